"""The lab's tools, run as modules from the repository's top folder (``python -m tools.<name>``):

- ``student``: the student edition (``make student``, ``make lab``, ``make handout``);
- ``grade``: grading handed-in notebooks (``make grade``), with ``grade_kernel`` (its sandboxed
  kernel) and ``forkkernel`` (its opt-in zygote, ``--fork``);
- ``website``: the static website (``make site``), with ``colab`` (the Colab links and install block);
- ``regenerate``: re-execute notebooks to refresh their stored outputs (``make regenerate``);
- ``nbauthor``: a notebook from a Python outline;
- ``runner`` (the one notebook runner) and ``files`` (output files written whole or not at all).
"""

"""One line, not a traceback, for the two errors every newcomer meets in a notebook before any check runs:

- running an exercise cell whose stub is still there (``raise NotImplementedError("Exercise 00.1: ...")``),
  alone or through Run All;
- running a check cell before the exercise cell above it defined its name (``NameError: name 'prediction'
  is not defined``);
- ``torch.jit.trace`` finding that two traces of one function differ (a page of graph diff), which an input
  changed in place causes (notebook 09).

Importing labsupport inside IPython (the setup cell) registers :func:`short_error` with the shell's
``set_custom_exc`` for these three exception types. Anything else of those types (a NameError from a typo
inside the student's own code, a NotImplementedError of a library) keeps IPython's usual traceback, and the
error message a kernel sends (its name and value, which the grader reads) is the same either way.
"""

from __future__ import annotations

import linecache
import re
import textwrap
from typing import Any

from .feedback import _BOLD, _OFF, _WIDTH

_STUB = re.compile(r"raise\s+NotImplementedError\(")
_EXERCISE = re.compile(r"Exercise (\d\d\.\d+)")


def short_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> Any:
    """IPython's custom exception handler: the one line of :func:`one_line`, or the usual traceback."""
    line = one_line(value, tb)
    if line is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    folded = textwrap.wrap(line, width=_WIDTH, break_long_words=False, break_on_hyphens=False)
    return shell._showtraceback(etype, value, ["\n".join(folded)])


def one_line(value: BaseException, tb: Any) -> str | None:
    """The line shown for an exercise's stub or a check run before its exercise cell, or None."""
    code_line = _raising_line(tb)
    if isinstance(value, NotImplementedError) and _STUB.match(code_line) and _EXERCISE.match(str(value)):
        return (
            f"{_BOLD}■ NOT WRITTEN YET{_OFF} · {str(value).strip()} is still the stub: replace the "
            "`raise NotImplementedError(...)` line with your answer, run this cell, then the check cell below it."
        )
    if type(value).__name__ == "TracingCheckError" and "Graphs differed across invocations" in str(value):
        return (
            f"{_BOLD}■ TWO TRACES DIFFER{_OFF} · torch.jit.trace checks each trace by tracing the function again on "
            "the same example, and the two graphs it recorded differ. Does the function change its input in place "
            "(an augmented assignment such as `/=` on the argument, or a method ending in `_`)? The first run then "
            "changed the example the second run received."
        )
    if isinstance(value, NameError) and code_line.startswith("lab.check_") and getattr(value, "name", None):
        return (
            f"{_BOLD}■ NOT DEFINED YET{_OFF} · {value.name} is not defined: run the exercise cell above first (it "
            f"defines {value.name}; if it stopped with an error, fix that error there first), then this check again."
        )
    return None


def _raising_line(tb: Any) -> str:
    """The source line, stripped, of the innermost frame of ``tb`` (a notebook cell's line, for these two)."""
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()


def install_short_errors() -> None:
    """Register :func:`short_error` with the running IPython shell, if any (a plain Python has none)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return
    import torch

    shell.set_custom_exc((NotImplementedError, NameError, torch.jit.TracingCheckError), short_error)

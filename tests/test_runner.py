"""tools/runner.py's in-process runner: cells run as in a kernel (outputs, errors, a failing cell
does not stop the next), and what a notebook changes in the process is put back after it."""

import multiprocessing
import os
import sys

import nbformat
import torch

from tools import runner
from tools.runner import run_in_process

CELLS = [
    "import os, sys, torch\nprint('hello')",
    "raise ValueError('boom')",
    "os.environ['LAB_RUNNER_TEST'] = '1'\nsys.path.insert(0, '/nowhere')\n"
    "torch.set_default_dtype(torch.float64)\ntorch.set_grad_enabled(False)\nprint(os.getcwd())",
    "import time\nwhile True:\n    time.sleep(0.01)",
]


def _double(x):
    return 2 * x


def test_cells_run_like_a_kernel_and_the_process_is_put_back(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    main, cwd, path = sys.modules["__main__"], os.getcwd(), list(sys.path)
    # 5 s: a cell's first traceback makes IPython import its formatters, which took over 1 s on a busy
    # 2-core machine (a clean-clone CI saw the failing cell time out); the endless cell sleeps through it
    run_in_process(nb, tmp_path, timeout=5)
    first, failing, changing, endless = nb.cells
    assert [o.text for o in first.outputs] == ["hello\n"]
    assert [(o.ename, o.evalue) for o in failing.outputs if o.output_type == "error"] == [("ValueError", "boom")]
    assert changing.outputs[0].text == f"{tmp_path}\n"  # it ran after the failing cell, in the folder given
    assert [o.ename for o in endless.outputs if o.output_type == "error"] == ["TimeoutError"]
    assert sys.modules["__main__"] is main and os.getcwd() == cwd and sys.path == path
    assert "LAB_RUNNER_TEST" not in os.environ
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    # a spawned process reads __main__'s __spec__: an IPython shell's own __main__ has none
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(_double, [21]) == [42]


def test_a_reset_that_loses_a_name_on_the_way_is_finished():
    """torch 2.6's Dynamo deletes its __resume_at_... functions from the namespace while reset deletes the
    others: IPython's reset then raised KeyError, and the in-process Run-all of notebook 09 failed."""

    class Shell:
        def __init__(self):
            self.calls = 0

        def reset(self, new_session=True):
            self.calls += 1
            if self.calls < 3:
                raise KeyError("__resume_at_50_118")

    shell = Shell()
    runner._reset(shell)
    assert shell.calls == 3

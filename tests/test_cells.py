"""labsupport/checks/cells.py: an exercise's stub, and a check run before its exercise cell, show one line."""

import sys

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from labsupport.checks import cells


@pytest.fixture
def shell():
    """A fresh IPython shell with the lab's handler, as the setup cell's import leaves a kernel's."""
    hooks = (sys.displayhook, sys.excepthook)
    main = sys.modules["__main__"]
    config = Config()
    config.HistoryManager.enabled = False
    InteractiveShell.clear_instance()
    made = InteractiveShell.instance(config=config)
    made.colors = "nocolor"
    cells.install_short_errors()
    yield made
    InteractiveShell.clear_instance()
    sys.modules["__main__"] = main
    sys.displayhook, sys.excepthook = hooks


def shown(shell, source: str) -> tuple[str, BaseException | None]:
    with capture_output() as captured:
        result = shell.run_cell(source, store_history=False)
    return captured.stdout + captured.stderr, result.error_in_exec


def test_the_stub_of_an_exercise_is_one_line(shell):
    text, error = shown(shell, 'peak = None\nraise NotImplementedError("Exercise 00.1: the tensor peak")')
    assert isinstance(error, NotImplementedError)  # what the kernel sends (and the grader reads) is unchanged
    assert "NOT WRITTEN YET" in text and "Exercise 00.1: the tensor peak is still the stub" in text
    assert "Traceback" not in text and "----" not in text and len(text.strip().splitlines()) <= 3
    assert all(len(line) <= 100 + len(cells._BOLD + cells._OFF) for line in text.strip().splitlines())  # folded at
    # spaces, as JupyterLab would fold it mid-word ("lin|e")


def test_a_check_run_before_its_exercise_cell_is_one_line(shell):
    shell.run_cell("class Lab:\n    def check_thing(self, x):\n        return x\n\nlab = Lab()")
    text, error = shown(shell, "lab.check_thing(prediction)")
    assert isinstance(error, NameError)
    assert "NOT DEFINED YET" in text and "prediction is not defined: run the exercise cell above first" in " ".join(
        text.split()
    )
    assert len(text.strip().splitlines()) <= 3


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    return typo_name\n\nf()",  # a NameError in the student's own code: where it is matters
        "raise NotImplementedError('a library feature')",  # not an exercise's stub
        "x = undefined_here + 1",  # a NameError outside a check cell
    ],
)
def test_other_errors_keep_their_traceback(shell, source):
    text, error = shown(shell, source)
    assert error is not None and "NOT WRITTEN YET" not in text and "NOT DEFINED YET" not in text
    assert "Traceback" in text or "----" in text


def test_outside_ipython_nothing_is_installed(monkeypatch):
    InteractiveShell.clear_instance()
    cells.install_short_errors()  # no shell: returns quietly
    assert cells.one_line(NameError("x"), None) is None


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_two_traces_that_differ_are_one_line_that_asks_about_inputs_changed_in_place(shell):
    """09.1 written with `x /= 2`: torch.jit.trace's check traced it twice, the first run had halved the example,
    and the cell ended in a page of graph diff. The line asks about the cause without writing the fix."""
    source = (
        "import torch\n"
        "def halve_until_small(x):\n"
        "    while bool(x.abs().max() > 1):\n"
        "        x /= 2\n"
        "    return x\n\n"
        "traced = torch.jit.trace(halve_until_small, torch.tensor([3.0, -1.0]))"
    )
    text, error = shown(shell, source)
    assert type(error).__name__ == "TracingCheckError"  # the kernel's error (and the grader's view) is unchanged
    assert "TWO TRACES DIFFER" in text and "change its input in place" in text
    assert "Graph diff" not in text and len(text.strip().splitlines()) <= 4

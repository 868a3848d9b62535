"""The student edition of every notebook, executed: stubs fail clearly, solutions pass.

One kernel per notebook, cell by cell (tools/student.py's ``verify``): cells before
the first exercise run cleanly; each exercise raises the NotImplementedError that
names it; its check, run against the stub, fails with a CheckError a student can
act on (not a NameError or an internal traceback); then the original solution is
pasted back and the same check must pass, and the next exercise runs on that state.
The run stops after the last check: the cells after it are the source's own, on
the source's state, and nbval runs them (that saves the long training runs).

Each notebook gets its own test class, so that ``pytest -n 2 --dist loadscope``
(make test) can run two notebooks at once instead of queueing them all on one
worker.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402


def _round_trip(path: Path) -> None:
    report = student.verify(path)
    problems = report.all_problems
    assert not problems, (
        f"the student edition of {path.name} does not work as a student would need:\n  - "
        + "\n  - ".join(problems)
        + "\n\nA check must call the student's function through labsupport.checks.core.call_student "
          "and validate its arguments (expect_tensor), so an unsolved stub gives a CheckError.\n\n"
        + student.summary(report))
    assert report.exercises, f"{path.name} has no exercise"


def _test_class(path: Path) -> type:
    def test_round_trip(self):
        _round_trip(path)

    name = "TestStudentEdition_" + path.stem
    return type(name, (), {"test_round_trip": test_round_trip, "__doc__": f"{path.name}, student edition"})


for _path in NOTEBOOKS:
    _cls = _test_class(_path)
    globals()[_cls.__name__] = _cls


def test_every_notebook_is_covered():
    names = sorted(n for n in globals() if n.startswith("TestStudentEdition_"))
    assert names == ["TestStudentEdition_" + p.stem for p in NOTEBOOKS] and names


def test_verify_catches_checks_that_break_on_the_stub(tmp_path):
    # A tiny torch-free notebook: one good exercise, one whose check has a NameError on the stub.
    from nbformat.v4 import new_code_cell as code, new_markdown_cell as md, new_notebook
    import nbformat

    setup = ("class CheckError(AssertionError):\n    pass\n\n"
             "def call(fn, *args):\n    try:\n        return fn(*args)\n"
             "    except NotImplementedError as exc:\n"
             "        raise CheckError(f'your function is not written yet ({exc})') from None\n\n"
             "def check_double(fn):\n    if call(fn, 2) != 4:\n        raise CheckError('expected 4')\n"
             "    print('PASS  double')")
    nb = new_notebook(cells=[
        md("# 99 · t"), code(setup),
        md("### Exercise 1: double"),
        code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
        code("check_double(double)"),
        code("# NBVAL_SKIP\nraise SystemExit('skipped cells are not run')"),
        md("### Exercise 2: triple"),
        code("def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION"),
        code("check_tripel(triple)"),
        code("print(double(1) + triple(1))"),
        code("raise SystemExit('cells after the last check are not run')"),
    ])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    path = tmp_path / "99_t.ipynb"
    nbformat.write(nb, path)
    report = student.verify(path, timeout=60)
    good, bad = report.exercises
    assert good.problems == [] and good.solved_output == "PASS  double"
    assert good.stub_message == "CheckError: your function is not written yet (Exercise 1: double)"
    assert bad.stub_message.startswith("NameError") and bad.check_cell == 8
    assert any("raised NameError instead of a CheckError" in p for p in bad.problems)
    assert report.problems == []
    assert report.tail_cells == 2  # after the last check: left to nbval, not run again


def test_verify_reports_a_failing_cell_before_the_first_exercise(tmp_path):
    from nbformat.v4 import new_code_cell as code, new_markdown_cell as md, new_notebook
    import nbformat

    nb = new_notebook(cells=[
        md("# 99 · t"), code("import labsupport_typo"),
        md("### Exercise 1: one"),
        code("def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        code("check_one(one)"),
    ])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    path = tmp_path / "99_t.ipynb"
    nbformat.write(nb, path)
    report = student.verify(path, timeout=60)
    assert report.problems == ["cell 1 (before the first exercise) fails: ModuleNotFoundError: "
                               "No module named 'labsupport_typo'"]
    assert report.exercises[0].stub_message is None  # the walk stopped there

"""The student edition of every notebook, run as a student who solved nothing.

"Run all" on the untouched student edition, going on after each error
(tools/student.py's ``run_unsolved``): every stub raises the NotImplementedError
that names it, every check fails with a CheckError a student can act on, and
every later cell either runs or stops at once with one line naming the exercise
to solve first (``lab.require``); nothing crashes inside PyTorch, and no
half-written TensorBoard run or temporary file is left behind. That each solution passes its
check, nbval proves on the solved sources (their stored PASS lines).

The cells run in the test's own Python (``in_process=True``: an IPython shell, no kernel;
what a notebook changes in the process is put back after it), since what is tested is the
notebook's cells, not a kernel; the grader's and nbval's tests run real kernels.

Each notebook gets its own test class, so that ``pytest -n 2 --dist loadscope``
(make test) can run two notebooks at once instead of queueing them all on one
worker.
"""

import gc
import getpass
import tempfile
from pathlib import Path

import nbformat

from tools import migrate_exercises, student

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _made_by_a_library(folder: Path) -> bool:
    """A folder that a library makes for the life of a process and deletes when it exits: multiprocessing's
    ``pymp-*`` (a forkserver's socket lives there), and torch 2.6's folder for its remote-module template,
    which ``import torch._dynamo`` (and so torchvision) makes in every process, a forkserver's too."""
    return folder.name.startswith("pymp-") or [p.name for p in folder.iterdir()] == ["_remote_module_non_scriptable.py"]


def _unsolved(path: Path, runs: Path, temporary: Path) -> None:
    report = student.run_unsolved(path, in_process=True)
    gc.collect()  # the notebook's namespace is gone: a TemporaryDirectory it held is deleted now
    left = sorted(p.name for p in temporary.iterdir() if not _made_by_a_library(p))
    assert not left, f"the student edition of {path.name} left temporary files behind: {left}"
    problems = report.all_problems
    assert not problems, (
        f"the student edition of {path.name}, with nothing solved:\n  - "
        + "\n  - ".join(problems)
        + "\n\n"
        + student.summary(report)
    )
    assert report.exercises, f"{path.name} has no exercise"
    half_written = [d for d in runs.glob("*/*") if d.is_dir() and not any(d.iterdir())]
    assert not half_written, f"empty TensorBoard runs left behind: {half_written}"


def write_tiny(nb, folder: Path) -> Path:
    """Save a tiny test notebook (with the kernelspec nbclient needs, and its exercises marked as
    tools/migrate_exercises.py marks them) as folder/99_t.ipynb."""
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    migrate_exercises.annotate(nb, "99_t")
    path = folder / "99_t.ipynb"
    nbformat.write(nb, path)
    return path


def _test_class(path: Path) -> type:
    def test_run_all_unsolved(self, tmp_path, monkeypatch):
        monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "runs"))  # the kernel inherits it
        temporary = tmp_path / "tmp"
        temporary.mkdir()
        # torch.compile's cache stays where it always is (it is kept on purpose, and a cold one costs minutes)
        monkeypatch.setenv(
            "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
        )
        monkeypatch.setenv("TMPDIR", str(temporary))  # the programs it starts put their temporary files here,
        monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # and so does this Python
        _unsolved(path, tmp_path / "runs", temporary)

    name = "TestStudentEdition_" + path.stem
    return type(name, (), {"test_run_all_unsolved": test_run_all_unsolved, "__doc__": f"{path.name}, student edition"})


for _path in NOTEBOOKS:
    _cls = _test_class(_path)
    globals()[_cls.__name__] = _cls


def test_run_unsolved_catches_cells_that_crash_after_an_unsolved_exercise(tmp_path):
    from nbformat.v4 import new_code_cell as code
    from nbformat.v4 import new_markdown_cell as md
    from nbformat.v4 import new_notebook

    setup = (
        "class CheckError(AssertionError):\n    pass\n\n"
        "def check_double(fn):\n    try:\n        fn(2)\n    except NotImplementedError as exc:\n"
        "        raise CheckError(f'not written yet ({exc})') from None\n    print('PASS  double')"
    )
    nb = new_notebook(
        cells=[
            md("# 99 · t"),
            code(setup),
            md("### Exercise 1: double"),
            code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("check_double(double)"),
            code("print(double(21))"),  # unguarded use of the exercise: crashes when unsolved
            code("base = 21"),  # a demo that only feeds the next one
            code(
                "shown = 2 * base\nprint(shown)"
            ),  # a demo that needs no exercise and feeds no cell: both left to nbval
            md("### Exercise 2: double again"),
            code("def double2(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("check_double(double2)"),
            code("twice = double2(2)"),  # after the last check: found without running it
            code("print(twice)"),  # and what depends on it, too
            code("require_ok = 1  # lab.require(\"99.2\") would guard it\nprint(len('guarded'))"),
        ]
    )
    path = write_tiny(nb, tmp_path)
    report = student.run_unsolved(path, timeout=60, in_process=True)  # the walk's logic: no kernel needed
    first, _ = report.exercises
    assert first.problems == [] and first.stub_message == "CheckError: not written yet (Exercise 99.1: double)"
    assert report.problems[0].startswith("cell 11 uses double2, which an exercise makes, without lab.require")
    assert report.problems[1].startswith("cell 12 uses twice, which an exercise makes")
    assert report.problems[2].startswith("cell 5 crashes when nothing is solved: NotImplementedError")
    assert len(report.problems) == 3 and report.tail_cells == 3 and report.demo_cells == 2


def test_run_unsolved_in_a_kernel_reports_as_in_process(tmp_path):
    # the default path (`python -m tools.student unsolved`): the same walk, cells run by a real kernel
    from nbformat.v4 import new_code_cell as code
    from nbformat.v4 import new_markdown_cell as md
    from nbformat.v4 import new_notebook

    nb = new_notebook(
        cells=[
            md("# 99 · t"),
            code("def check_double(fn):\n    fn(2)"),
            md("### Exercise 1: double"),
            code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("check_double(double)"),
            code("print(double(21))"),  # unguarded use: crashes when unsolved
            md("### Exercise 2: again"),
            code("def again(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"),
            code("check_double(again)"),
        ]
    )
    path = write_tiny(nb, tmp_path)
    report = student.run_unsolved(path, timeout=60)
    assert [e.stub_message for e in report.exercises] == [
        "NotImplementedError: Exercise 99.1: double",
        "NotImplementedError: Exercise 99.2: again",
    ]
    assert len(report.problems) == 1 and report.problems[0].startswith("cell 5 crashes when nothing is solved")


def test_every_notebook_is_covered():
    names = sorted(n for n in globals() if n.startswith("TestStudentEdition_"))
    assert names == ["TestStudentEdition_" + p.stem for p in NOTEBOOKS] and names


def test_verify_catches_checks_that_break_on_the_stub(tmp_path):
    # A tiny torch-free notebook: one good exercise, one whose check has a NameError on the stub.
    from nbformat.v4 import new_code_cell as code
    from nbformat.v4 import new_markdown_cell as md
    from nbformat.v4 import new_notebook

    setup = (
        "class CheckError(AssertionError):\n    pass\n\n"
        "def call(fn, *args):\n    try:\n        return fn(*args)\n"
        "    except NotImplementedError as exc:\n"
        "        raise CheckError(f'your function is not written yet ({exc})') from None\n\n"
        "def check_double(fn):\n    if call(fn, 2) != 4:\n        raise CheckError('expected 4')\n"
        "    print('PASS  double')"
    )
    nb = new_notebook(
        cells=[
            md("# 99 · t"),
            code(setup),
            md("### Exercise 1: double"),
            code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("check_double(double)"),
            code("# NBVAL_SKIP\nraise SystemExit('skipped cells are not run')"),
            md("### Exercise 2: triple"),
            code("def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION"),
            code("check_tripel(triple)"),
            code("print(double(1) + triple(1))"),
            code("raise SystemExit('cells after the last check are not run')"),
        ]
    )
    path = write_tiny(nb, tmp_path)
    report = student.verify(path, timeout=60)
    good, bad = report.exercises
    assert good.problems == [] and good.solved_output == "PASS  double"
    assert good.stub_message == "CheckError: your function is not written yet (Exercise 99.1: double)"
    assert bad.stub_message.startswith("NameError") and bad.check_cell == 8
    assert any("raised NameError instead of a CheckError" in p for p in bad.problems)
    assert report.problems == []
    assert report.tail_cells == 2  # after the last check: left to nbval, not run again


def test_verify_reports_a_failing_cell_before_the_first_exercise(tmp_path):
    from nbformat.v4 import new_code_cell as code
    from nbformat.v4 import new_markdown_cell as md
    from nbformat.v4 import new_notebook

    nb = new_notebook(
        cells=[
            md("# 99 · t"),
            code("import labsupport_typo"),
            md("### Exercise 1: one"),
            code("def one():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
            code("check_one(one)"),
        ]
    )
    path = write_tiny(nb, tmp_path)
    report = student.verify(path, timeout=60)
    assert report.problems == [
        "cell 1 (before the first exercise) fails: ModuleNotFoundError: No module named 'labsupport_typo'"
    ]
    assert report.exercises[0].stub_message is None  # the walk stopped there

"""tools/grade.py: a synthetic class graded end to end.

Most students hand in variants of a tiny torch-free source notebook built here (its
kernels start in a second); one pair hands in the real notebook 01, derived from
whatever it holds now. The whole class is graded ONCE (a module fixture), with two
workers, and each test reads its student's row, feedback and results.
"""

import copy
import csv
import json
import logging
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell as code
from nbformat.v4 import new_markdown_cell as md
from nbformat.v4 import new_notebook

from tools import grade, migrate_exercises, student

PLACEHOLDER = student.ANSWER_PLACEHOLDER

ROOT = Path(__file__).resolve().parent.parent

REAL = ROOT / "notebooks" / "01_tensors.ipynb"
TIMEOUT = 2

SETUP = """\
class CheckError(AssertionError):
    pass

def _call(fn, x):
    try:
        return fn(x)
    except NotImplementedError as exc:
        raise CheckError(f"your function is not written yet ({exc})") from None

def check_scale(fn, k):
    got = _call(fn, 2)
    if got != 2 * k:
        raise CheckError(f"f(2) should be {2 * k}, got {got!r}")
    print(f"PASS  scale by {k}: f(2) = {got}")

def check_prediction(p):
    if p is None:
        raise CheckError("prediction is None: not written yet")
    if p != "error":
        raise CheckError(f"the cell raises an error, you predicted {p!r}")
    print("PASS  prediction: error")"""


def tiny_source() -> nbformat.NotebookNode:
    nb = new_notebook(
        cells=[
            md("# 99 · Tiny\n\nA made-up notebook for the grader's tests."),
            code(SETUP),
            md("## 1. Scaling"),
            md("### Exercise 1: double"),
            code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("check_scale(double, 2)"),
            md("### Exercise 2: triple"),
            code("def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION"),
            code("check_scale(triple, 3)"),
            md("### Exercise 3: predict"),
            code('### BEGIN SOLUTION\nprediction = "error"\n### END SOLUTION'),
            code("check_prediction(prediction)"),
            md("### Exercise 4: why\n\nExplain in one sentence."),
            md("### BEGIN SOLUTION\nBecause the reference says so.\n### END SOLUTION"),
            md("## Summary"),
        ]
    )
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    migrate_exercises.annotate(nb, "99_tiny")
    return nb


def _set(nb, label: str, text: str):
    """A copy of ``nb`` whose exercise cell for ``label`` holds ``text``."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    heading = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(label))
    nb.cells[heading + 1].source = text
    return nb


def _write(folder: Path, name: str, nb) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder / name


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    src_dir = tmp / "notebooks"
    src_dir.mkdir()
    source = tiny_source()
    nbformat.write(source, src_dir / "99_tiny.ipynb")
    broken = new_notebook(
        cells=[
            md("# 98 · Broken"),
            code("raise ImportError('no labsupport here')"),
            md("### Exercise 1: one"),
            code("one = None\n### BEGIN SOLUTION\none = 1\n### END SOLUTION"),
            code("check_one(one)"),
        ]
    )
    migrate_exercises.annotate(broken, "98_broken")
    nbformat.write(broken, src_dir / "98_broken.ipynb")
    shutil_copy = src_dir / "01_tensors.ipynb"
    shutil_copy.write_bytes(REAL.read_bytes())
    ed = student.make_edition(source, "99_tiny.ipynb").notebook
    solved = nbformat.read(src_dir / "99_tiny.ipynb", as_version=4)
    sub, out = tmp / "handed_in", tmp / "grades"
    name = "99_tiny.ipynb"
    answered = _set(ed, "### Exercise 1", "def double(x):\n    return x + x")
    answered = _set(answered, "### Exercise 2", "def triple(x):\n    return x * 3")
    answered = _set(answered, "### Exercise 3", "prediction = 'error'")
    answered.cells[13].source = "Because *I* say so. <script>alert(1)</script>"
    _write(sub / "answered", name, answered)
    _write(sub / "blank", name, ed)
    _write(sub / "blank", "98.ipynb", student.make_edition(broken, "98_broken.ipynb").notebook)
    _write(sub / "wrong", name, _set(answered, "### Exercise 2", "def triple(x):\n    return x * 4"))
    _write(sub / "loop", name, _set(answered, "### Exercise 1", "while True:\n    print('spam ' * 200)"))
    _write(sub / "hog", name, _set(answered, "### Exercise 2", "hog = bytearray(5 * 2**30)  # over the 4096 MB cap"))
    crash = _set(answered, "### Exercise 2", "import os\nos._exit(3)")
    _write(sub / "crash", name, _set(crash, "### Exercise 1", "def double(x):\n    return 2 * abs(x)"))
    extra = tmp / "extra"
    extra.mkdir()
    (extra / "99_tiny.py").write_text(EXTRA)
    edited = nbformat.from_dict(json.loads(json.dumps(answered)))
    del edited.cells[7]  # exercise 2's cell deleted; exercise 1's cell copied, an older attempt above it
    older = copy.deepcopy(edited.cells[4])  # Jupyter's copy and paste: the metadata too, a new id
    older.update(id="pasted-copy", source="def double(x):\n    return 0")
    edited.cells.insert(4, older)
    edited.cells.insert(4, nbformat.v4.new_code_cell("def double(x):\n    return -1"))  # no metadata: not it
    _write(sub / "edited", name, edited)
    reordered = nbformat.from_dict(json.loads(json.dumps(answered)))
    reordered.cells[7], reordered.cells[10] = reordered.cells[10], reordered.cells[7]  # exercise 3's cell above 2's
    _write(sub / "reordered", name, reordered)
    (sub / "notjson").mkdir()
    (sub / "notjson" / name).write_text("this is not {json")
    hostile = HOSTILE.format(out=str(out), neighbour=str(sub / "answered" / name), canary=str(tmp / "hacked.txt"))
    _write(sub / "hostile", name, _set(answered, "### Exercise 1", hostile))
    copies = sub / "twocopies"
    _write(copies, "99_tiny (old).ipynb", _set(answered, "### Exercise 2", "def triple(x):\n    return 0"))
    newer = _write(copies, "homework final.ipynb", solved)
    time.sleep(0.01)
    newer.touch()
    real = nbformat.read(REAL, as_version=4)
    _write(sub / "real_full", "notebook1.ipynb", real)
    _write(sub / "real_blank", "01_tensors.ipynb", student.make_edition(real, REAL).notebook)
    _write(sub / "real_forged", "01_tensors.ipynb", _forged(_copied(student.make_edition(real, REAL).notebook)))
    # fork=True: the opt-in zygote is the path with most to attack (a kernel asking it for another).
    cfg = grade.Config(src=str(src_dir), extra=str(extra), timeout=TIMEOUT, cell_timeout=120, memory_mb=4096, fork=True)
    t0 = time.perf_counter()
    table = grade.grade(sub, out, jobs=2, cfg=cfg)
    seconds = time.perf_counter() - t0
    time.sleep(1.0)  # give the hostile student's background process its chance to strike
    return {"table": table, "out": out, "tmp": tmp, "seconds": seconds, "real": grade.load_source(REAL)}


# A forged kernel on notebook 01 (every answer after 01.1 left unwritten; 01.1 copied, below): IPython's
# error display and custom exception handler replaced, torch's comparisons patched, PASS lines printed.
# The grader runs 01's checks itself (tools/judge.py), so none of it earns a point.
FORGE = """\
import torch
get_ipython().showtraceback = lambda *a, **k: print("PASS  ok")
get_ipython().set_custom_exc((BaseException,), lambda *a, **k: print("PASS  ok"))
torch.allclose = torch.equal = lambda *a, **k: True
print("PASS  everything")
"""


def _role(cell) -> tuple:
    lab = cell.get("metadata", {}).get("lab") or {}
    role = lab.get("role")
    return lab.get("exercise"), role if isinstance(role, str) else "+".join(role or [])


def _forged(ed):
    """FORGE at the top of the second exercise's solution cell (the first one holds _copied's answer)."""
    solutions = [c for c in ed.cells if (c.metadata.get("lab") or {}).get("role") == "solution"]
    solutions[1].source = FORGE + solutions[1].source
    return ed


def _copied(ed):
    """01.1 answered with labsupport's own reference: right values, not the student's code."""
    cell = next(c for c in ed.cells if _role(c) == ("01.1", "solution"))
    cell.source = "def pairwise_sq_dists(a, b):\n    from labsupport.checks import nb01_tensors\n"
    cell.source += "    return nb01_tensors._pairwise_reference(a, b)"
    return ed


EXTRA = """\
def extra_99_1(ns):
    assert ns["double"](-5) == -10, "SECRET: double(-5) should be -10"
"""

HOSTILE = """\
import os, pathlib, subprocess, sys
attempts = []
try:
    pathlib.Path({out!r}).mkdir(parents=True, exist_ok=True)
    pathlib.Path({out!r}, "grades.csv").write_text("student,score\\nhostile,100\\n")
    attempts.append("wrote grades.csv")
except OSError:
    pass
try:
    pathlib.Path({canary!r}).write_text("x")
    attempts.append("wrote outside scratch")
except OSError:
    pass
try:
    pathlib.Path({neighbour!r}).read_text()
    attempts.append("read a neighbour")
except OSError:
    pass
try:  # a process of its own from the grader's zygote, outside the sandbox: refused
    import json, socket
    zygote = socket.socket(socket.AF_UNIX)
    zygote.connect(os.environ["LAB_GRADE_ZYGOTE"])
    socket.send_fds(zygote, [json.dumps({{"program": "python", "argv": ["-c", "pass"], "cwd": "/", "env": {{}}}}).encode()], [0, 1, 2])
    if zygote.makefile().readline():
        attempts.append("forked a kernel outside the sandbox")
    else:
        print("the zygote refused")
except (OSError, KeyError):
    pass
code = "import time, pathlib\\nfor _ in range(40):\\n    time.sleep(0.25)\\n    try:\\n        " \\
       "pathlib.Path({out!r}, 'grades.csv').write_text('hacked')\\n    except OSError:\\n        pass"
subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
try:
    os.kill(os.getppid(), 9)  # the grader's worker: the rest of the class would be lost
except OSError:
    pass

def double(x):
    return 2 * x if not attempts else -1"""


def _rows(graded) -> dict:
    with open(graded["out"] / "grades.csv", newline="") as f:
        return {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}


def _results(graded, who: str) -> dict:
    lines = (graded["out"] / "results.jsonl").read_text().splitlines()
    return {r["exercise"]: r for r in map(json.loads, lines) if r["student"] == who}


def _feedback(graded, who: str, notebook: str = "99_tiny") -> str:
    return (graded["out"] / "feedback" / who / f"{notebook}.md").read_text()


def _points(row) -> list[str]:
    return [row["99.1"], row["99.2"], row["99.3"], row["score"], row["max_score"], row["status"]]


def test_the_gradebook_has_one_column_per_exercise(graded):
    with open(graded["out"] / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    real_ids = [e.id for e in graded["real"].exercises]
    assert header == [
        "student",
        "notebook",
        *real_ids,
        "98.1",
        "99.1",
        "99.2",
        "99.3",
        "score",
        "max_score",
        "status",
        "review",
    ]  # review: a flagged student is in the class
    assert (graded["out"] / "feedback" / "answered" / "99_tiny.html").read_text().startswith("<!doctype html>")
    assert list((graded["out"] / "logs").glob("grade-*.log"))
    with open(graded["out"] / "gradebook.csv", newline="") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    assert book["(points possible)"]["99_tiny"] == "3" and book["wrong"]["99_tiny"] == "2"
    assert book["real_full"]["99_tiny"] == "0" and book["real_full"]["total"] == book["real_full"]["01_tensors"]


def test_full_marks_and_zero(graded):
    rows = _rows(graded)
    assert _points(rows["answered", "99_tiny"]) == ["1", "1", "1", "3", "3", "ok"]
    assert _points(rows["twocopies", "99_tiny"]) == ["1", "1", "1", "3", "3", "ok"]  # pasted the solutions
    assert _points(rows["blank", "99_tiny"]) == ["0", "0", "0", "0", "3", "ok"]
    text = _feedback(graded, "blank")
    assert text.count("not written yet") >= 3 and "PASS" not in text
    assert "PASS  scale by 2: f(2) = 4" in _feedback(graded, "answered")


def test_written_answers_are_collected_verbatim_and_not_scored(graded):
    text = _feedback(graded, "answered")
    assert "scores them by hand" in text and "Because *I* say so. <script>alert(1)</script>" in text
    html = (graded["out"] / "feedback" / "answered" / "99_tiny.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "_(no answer)_" in _feedback(graded, "blank")
    for who in ("answered", "blank", "wrong"):  # nothing of the reference answer leaks
        assert "the reference says so" not in _feedback(graded, who)
    written = [
        r
        for r in map(json.loads, (graded["out"] / "results.jsonl").read_text().splitlines())
        if r["student"] == "answered" and r["points"] is None
    ]
    assert [w["answer"] for w in written] == ["Because *I* say so. <script>alert(1)</script>"]


def test_one_wrong_exercise_loses_exactly_its_points(graded):
    assert _points(_rows(graded)["wrong", "99_tiny"]) == ["1", "0", "1", "2", "3", "ok"]
    assert "f(2) should be 6, got 8" in _feedback(graded, "wrong")


def test_an_infinite_loop_times_out_and_grading_goes_on(graded):
    assert _points(_rows(graded)["loop", "99_tiny"]) == ["0", "1", "1", "2", "3", "ok"]
    res = _results(graded, "loop")["99.1"]
    assert res["status"] == "timeout" and f"timed out after {TIMEOUT} s" in res["feedback"]
    assert f"timed out after {TIMEOUT} s" in _feedback(graded, "loop")
    executed = nbformat.read(graded["out"] / "executed" / "loop" / "99_tiny.ipynb", as_version=4)
    kept = [c for c in executed.cells if c.cell_type == "code" and c.source.startswith("while True")][0].outputs
    assert sum(len(o.get("text", "")) for o in kept) <= grade.MAX_OUTPUT  # the print loop filled nothing


def test_a_kernel_crash_costs_only_its_exercise(graded):
    assert _points(_rows(graded)["crash", "99_tiny"])[1:] == ["0", "1", "1", "3", "ok"]
    assert "the kernel died" in _feedback(graded, "crash")


def test_a_runaway_allocation_raises_memory_error_and_costs_only_its_exercise(graded):
    assert _points(_rows(graded)["hog", "99_tiny"]) == ["1", "0", "1", "2", "3", "ok"]
    assert "your exercise cell itself raised MemoryError" in _results(graded, "hog")["99.2"]["feedback"]


def test_instructor_only_cases_count_but_stay_hidden(graded):
    assert _rows(graded)["crash", "99_tiny"]["99.1"] == "0"  # its check passed; the extra case did not
    text = _feedback(graded, "crash")
    assert "PASS  scale by 2" in text and "an additional test of your instructor failed" in text
    assert "SECRET" not in text and "-10" not in text
    assert "SECRET" in _results(graded, "crash")["99.1"]["detail"]


def test_every_notebook_and_its_student_edition_match_their_source():
    sources = grade.load_sources(ROOT / "notebooks")
    assert sources
    for name, src in sources.items():
        for nb in (src.notebook, src.student):
            found, score, how = grade.match_source(nb, sources)
            assert found is src and score > 0.9, f"{name}: {how}"


def test_points_per_exercise(tmp_path):
    source = tiny_source()
    source.cells[4].metadata["lab"]["points"] = 2  # exercise 1's solution cell: the notebook says 2
    nbformat.write(source, tmp_path / "99_tiny.ipynb")
    src = grade.load_source(tmp_path / "99_tiny.ipynb")
    assert [e.id for e in src.exercises] == ["99.1", "99.2", "99.3"] and src.max_score() == 4
    (tmp_path / "99_tiny.py").write_text("POINTS = {'99.2': 2.5}")  # the instructor's private file overrides
    src = grade.load_source(tmp_path / "99_tiny.ipynb", tmp_path)
    assert src.points == {"99.1": 2, "99.2": 2.5, "99.3": 1} and src.max_score() == 5.5
    assert [w.id for w in src.written] == ["99.4"]


# --------------------------------------------------------------------------- matching cells, no kernel


def predictions_source() -> nbformat.NotebookNode:
    """Two prediction exercises (both assign ``prediction``), then a written answer whose heading
    sits in the answer cell itself, after another written answer."""
    nb = new_notebook(
        cells=[
            md("# 97 · Predictions"),
            code(SETUP),
            md("### Exercise 1: first prediction"),
            code('### BEGIN SOLUTION\nprediction = "error"\n### END SOLUTION'),
            code("check_prediction(prediction)"),
            md("### Exercise 2: second prediction"),
            code('### BEGIN SOLUTION\nprediction = "error"\n### END SOLUTION'),
            code("check_prediction(prediction)"),
            md("### Exercise 3: explain\n\nIn one sentence."),
            md("### BEGIN SOLUTION\nThe reference's reason.\n### END SOLUTION"),
            md(
                "### Exercise 4: why did it win?\n\nIn two sentences: why?\n\n### BEGIN SOLUTION\nIt did.\n### END SOLUTION"
            ),
        ]
    )
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    migrate_exercises.annotate(nb, "97_predictions")
    return nb


@pytest.fixture
def predictions(tmp_path):
    nbformat.write(predictions_source(), tmp_path / "97_predictions.ipynb")
    src = grade.load_source(tmp_path / "97_predictions.ipynb")
    return src, nbformat.from_dict(json.loads(json.dumps(src.student)))


def test_a_reordered_pair_of_prediction_cells_is_graded_under_their_own_exercises(predictions):
    src, sub = predictions
    sub.cells[3].source, sub.cells[6].source = 'prediction = "first"', 'prediction = "second"'
    sub.cells[3], sub.cells[6] = sub.cells[6], sub.cells[3]  # the student moved them: second above first
    nb, slots, _ = grade.rebuild(src, sub)
    assert (slots["97.1"].code, slots["97.2"].code) == ('prediction = "first"', 'prediction = "second"')
    assert (nb.cells[3].source, nb.cells[6].source) == ('prediction = "first"', 'prediction = "second"')
    assert (slots["97.1"].cell, slots["97.2"].cell) == (6, 3)


def test_a_written_answer_whose_heading_sits_in_its_own_cell(predictions):
    src, sub = predictions
    assert [(w.id, w.label) for w in src.written] == [
        ("97.3", "Exercise 97.3: explain"),
        ("97.4", "Exercise 97.4: why did it win?"),
    ]
    sub.cells[9].source = "Because of the learning rate."
    sub.cells[10].source = sub.cells[10].source.replace(student.ANSWER_PLACEHOLDER, "Adam's step adapts.")
    _, _, written = grade.rebuild(src, sub)
    assert written == [
        {"exercise": "97.3", "label": "Exercise 97.3: explain", "answer": "Because of the learning rate."},
        {"exercise": "97.4", "label": "Exercise 97.4: why did it win?", "answer": "Adam's step adapts."},
    ]


@pytest.mark.parametrize(
    "edit, answer",
    [
        (lambda text: text.replace("\n" + PLACEHOLDER, ""), ""),  # the placeholder deleted, nothing written
        (lambda text: text.replace(PLACEHOLDER, ""), ""),
        (lambda text: text.replace("\n" + PLACEHOLDER, "") + "\nIt adapts.", "It adapts."),
        (lambda text: text.replace(PLACEHOLDER, "It adapts.\nTwice."), "It adapts.\nTwice."),
        (lambda text: text.replace(PLACEHOLDER, "Your answer here"), ""),  # an earlier edition's placeholder
        (lambda text: "It adapts.", "It adapts."),  # the question deleted too
        (lambda text: text, ""),
    ],
)
def test_the_question_is_never_collected_as_the_answer(predictions, edit, answer):
    src, sub = predictions
    sub.cells[10].source = edit(sub.cells[10].source)
    _, _, written = grade.rebuild(src, sub)
    assert written[1]["answer"] == answer


def test_cells_are_found_by_metadata_or_id_never_by_heading_or_position(predictions):
    src, sub = predictions
    sub.cells[6].source = 'prediction = "second"'
    lost = sub.cells[3]
    lost.source, lost.metadata = 'prediction = "first"', {}  # metadata stripped: found by its id
    sub.cells.insert(3, code('prediction = "under the heading, but not the cell"'))
    del sub.cells[7].metadata["lab"]  # exercise 2's cell: no metadata, and a new id
    sub.cells[7]["id"] = "recreated"
    _, slots, _ = grade.rebuild(src, sub)
    assert slots["97.1"].code == 'prediction = "first"' and slots["97.2"].code is None
    assert "missing" in slots["97.2"].note


def test_a_renamed_file_is_matched_by_content(predictions, tmp_path):
    src, sub = predictions
    folder = tmp_path / "handed_in" / "ana"
    _write(folder, "my homework (final).ipynb", sub)
    jobs, rows = grade.collect(tmp_path / "handed_in", {src.name: src}, logging.getLogger("test"))
    assert rows == [] and [(j["notebook"], j["file"]) for j in jobs] == [
        ("97_predictions", "my homework (final).ipynb")
    ]
    assert "matched to 97_predictions by content" in jobs[0]["match"]


def test_a_deleted_and_a_duplicated_exercise_cell(graded):
    assert _points(_rows(graded)["edited", "99_tiny"]) == ["1", "0", "1", "2", "3", "ok"]
    text = _feedback(graded, "edited")
    assert "missing from the notebook" in text and "appears 2 times" in text


def test_moved_exercise_cells_are_graded_under_their_own_exercise(graded):
    assert _points(_rows(graded)["reordered", "99_tiny"]) == ["1", "1", "1", "3", "3", "ok"]


def test_renamed_files_and_two_copies_are_matched_by_content(graded):
    text = _feedback(graded, "twocopies")
    assert "graded `homework final.ipynb`: matched to 99_tiny by content" in text
    assert "also handed in and not graded: `99_tiny (old).ipynb`" in text


def test_a_source_whose_setup_fails_is_not_ok(graded):
    row = _rows(graded)["blank", "98_broken"]
    assert row["98.1"] == "0" and row["status"].startswith("the notebook's setup (cell 1) failed: ImportError")


def test_a_file_that_is_not_json(graded):
    row = _rows(graded)["notjson", "99_tiny"]
    assert row["score"] == "0" and row["max_score"] == "3" and "not JSON" in row["status"]


def test_a_hostile_submission_changes_nothing(graded):
    rows = _rows(graded)
    assert rows["answered", "99_tiny"]["score"] == "3" and "hacked" not in (graded["out"] / "grades.csv").read_text()
    assert not (graded["tmp"] / "hacked.txt").exists()
    assert "Landlock ABI" in grade.sandbox_state(grade.Config()), "no Landlock here: the attacks below may succeed"
    assert _points(rows["hostile", "99_tiny"]) == ["1", "1", "1", "3", "3", "ok"]  # every attempt failed
    executed = (graded["out"] / "executed" / "hostile" / "99_tiny.ipynb").read_text()
    assert "the zygote refused" in executed  # it was asked (the kernels were forked), and said no
    assert _results(graded, "hostile")["99.1"]["flags"], "the instructor is told to review it"
    assert rows["hostile", "99_tiny"]["review"] == "code to review in 99.1"  # in grades.csv
    assert "Your instructor will review this exercise's code by hand" in _feedback(graded, "hostile")
    assert not rows["answered", "99_tiny"]["review"]


def test_the_real_notebook(graded):
    rows, src = _rows(graded), graded["real"]
    full, blank = rows["real_full", "01_tensors"], rows["real_blank", "01_tensors"]
    assert full["status"] == "ok" and full["score"] == full["max_score"] == f"{src.max_score():g}", _feedback(
        graded, "real_full", "01_tensors"
    )
    assert blank["score"] == "0" and all(blank[e.id] == "0" for e in src.exercises)
    text = _feedback(graded, "real_blank", "01_tensors")
    assert "not written yet" in text and "PASS" not in text
    assert "matched to 01_tensors by content" in _feedback(graded, "real_full", "01_tensors")


def test_the_real_notebook_is_judged_by_the_grader(graded):
    solved = {k: r for k, r in _results(graded, "real_full").items() if "max_points" in r}
    assert solved and all(r["verdict"] == "grader" and r["points"] == r["max_points"] for r in solved.values())
    forged = {k: r for k, r in _results(graded, "real_forged").items() if "max_points" in r and k != "01.1"}
    assert forged and all(r["points"] == 0 and "failed" in r["detail"] for r in forged.values()), forged
    copied = _results(graded, "real_forged")["01.1"]
    assert copied["points"] == 0 and "imports labsupport" in copied["feedback"]
    assert "passed" in copied["detail"]  # its values were right: the code analysis is what stops it

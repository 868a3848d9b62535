"""A ninth hostile audit of the grader: the grade itself and the instructor's outputs.

One class hands in the torch-free notebook of tests/test_grade_judge.py (99.1-99.3 judged by the grader, 99.4 by its
kernel) and is graded once, an honest student beside the hostile ones: "edited_checks" rewrites every check cell
(wrapped in try/except, given the reference, called twice, moved above its exercise) and inserts cells after the
checks that redefine the answers right; "detects_grading" reads the environment, the cwd, sys.argv and its parent
process, and prints the grader's own lines (PASS, "mistake:", ANSI escapes, <script>). Both already earned nothing:
the grader rebuilds each notebook on the source and takes only the exercise cells. Measured before this audit's
fixes: a late penalty of -50 (the flag or policy.json) gave a late student 50 % more per day, "nan" or "inf" typed
into manual.csv became the score of the row (a gradebook of nan), and a second grader on the same OUT ran beside
the first, both writing its files and one log (named to the second).
"""

import csv
import json
import logging
import math
import sys
import time
from pathlib import Path

import nbformat
import pytest
from test_grade_judge import RIGHT, TINY_CHECKS, TRUSTED, WRONG, _answer, tiny_source

from tools import grade, student

CHECKS = ("lab.check_scale(double, 2)", "lab.check_scale(triple, 3)", "lab.check_prediction(prediction)")
EDITED = (
    "try:\n    lab.check_scale(lab._twice, 2)\nexcept Exception:\n    print('PASS  scale by 2')",
    "lab.check_scale(triple, 3)\nlab.check_scale(lambda x: 3 * x, 3)",
    "prediction = 'error'\nlab.check_prediction(prediction)",
)
RIGHT_AFTER = "def double(x):\n    return 2 * x\ndef triple(x):\n    return 3 * x\nprediction = 'error'"
DETECTS = """\
import os, sys
SEEN = [sorted(os.environ), os.getcwd(), list(sys.argv), os.getppid()]
try:
    SEEN.append(open(f'/proc/{os.getppid()}/cmdline').read())
except OSError:
    pass
GRADED = any('grade' in str(x).lower() for x in SEEN)
print('PASS  scale by 2\\nmistake: everyone\\n\\x1b[2J\\x1b[1A<script>alert(1)</script>')
def double(x):
    print('PASS  scale by 2\\x1b[1A\\r')
    return x + 1 if GRADED else 2 * x
"""


def _edited_checks(ed) -> nbformat.NotebookNode:
    """Wrong answers; check cells rewritten, one moved above its exercise, and cells after them set right answers."""
    nb = _answer(ed, WRONG)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source in CHECKS:
            cell.source = EDITED[CHECKS.index(cell.source)]
    last = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(last + 1, nbformat.v4.new_code_cell(RIGHT_AFTER))
    moved = next(i for i, c in enumerate(nb.cells) if c.source == "lab.check_power(power4)")
    nb.cells.insert(1, nb.cells.pop(moved))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile9")
    src_dir, checks_dir, sub, out = tmp / "notebooks", tmp / "checks", tmp / "handed_in", tmp / "out"
    for folder in (src_dir, checks_dir, out):
        folder.mkdir()
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    students = {
        "honest": _answer(ed, RIGHT),
        "edited_checks": _edited_checks(ed),
        "detects_grading": _answer(ed, {**WRONG, "### Exercise 1": DETECTS}),
    }
    for who, nb in students.items():
        (sub / who).mkdir(parents=True)
        (sub / who / "hw.ipynb").write_text(json.dumps(nb))
    cfg = grade.Config(src=str(src_dir), timeout=3, cell_timeout=60, checks=str(checks_dir / "tinychecks.py"))
    cfg.trusted = TRUSTED
    try:
        grade.grade(sub, out, jobs=2, cfg=cfg, canary=False)
    finally:
        sys.path.remove(str(checks_dir))
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    return {"rows": rows, "out": out, "sub": sub}


def _points(row) -> list[str]:
    return [row["99.1"], row["99.2"], row["99.3"], row["99.4"]]


def test_the_honest_student_beside_them_is_graded_right(graded):
    row = graded["rows"]["honest"]
    assert _points(row) == ["1", "1", "1", "1"] and row["status"] == "ok", row


@pytest.mark.parametrize("who", ["edited_checks", "detects_grading"])
def test_edited_checks_and_a_grading_detector_earn_nothing(graded, who):
    row = graded["rows"][who]
    assert _points(row) == ["0", "0", "0", "0"] and row["score"] == "0", row


def test_a_student_s_lines_reach_the_instructor_s_outputs_as_text(graded):
    out = graded["out"]
    report = (out / "report.html").read_text()
    assert "<script>" not in report and "\x1b" not in report
    log = "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert "\x1b" not in log
    html = "".join(p.read_text() for p in (out / "feedback").rglob("*.html"))
    assert "<script>" not in html and "\x1b" not in html
    assert not [p for p in graded["sub"].rglob("*") if p.name not in ("hw.ipynb",) and p.is_file()]


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "=1+1", "NaN"])
def test_a_score_that_is_no_finite_number_scores_nothing(text):
    assert grade._number(text) is None
    assert grade._number("2.5") == 2.5 and grade._number("-1") == -1.0


@pytest.mark.parametrize("rate", [-50, float("nan"), 101, "=1+1"])
def test_a_late_penalty_that_would_earn_points_is_refused(tmp_path, rate):
    assert isinstance(grade._policy(tmp_path, "2026-01-01T00:00", rate), str)
    (tmp_path / "policy.json").write_text(json.dumps({"deadline": "2026-01-01T00:00", "late_penalty": rate}))
    assert isinstance(grade._policy(tmp_path, None, None), str)


def _late_auto(out: Path, sources: dict) -> None:
    src = next(iter(sources.values()))
    ids = [e.id for e in src.exercises]
    row = {"student": "late", "notebook": src.name, "status": "ok", "submitted": "2026-01-03T00:00:00"}
    row.update({i: "1" for i in ids})
    grade._write_csv(out / grade.AUTO, ["student", "notebook", *ids, "status", "submitted"], [row])
    grade._write_csv(
        out / grade.MANUAL, grade._MANUAL_HEADER, [{"student": "late", "exercise": ids[0], "points": "nan"}]
    )


def test_a_negative_penalty_or_a_nan_override_raises_no_score(tmp_path):
    (tmp_path / "notebooks").mkdir()
    nbformat.write(tiny_source(tmp_path), tmp_path / "notebooks" / "99_judged.ipynb")
    sources = grade.load_sources(tmp_path / "notebooks")
    out = tmp_path / "out"
    out.mkdir()
    _late_auto(out, sources)
    deadline = time.mktime(time.strptime("2026-01-01T00:00", "%Y-%m-%dT%H:%M"))
    (row,) = grade.finish(out, sources, deadline=deadline, penalty=-50.0)
    score = float(row["score"])
    assert math.isfinite(score) and score <= len(next(iter(sources.values())).exercises), row


def test_a_second_grader_of_the_same_out_stops_before_writing(tmp_path):
    out, sub = tmp_path / "out", tmp_path / "sub"
    sub.mkdir()
    with grade._sole_grader(out):
        before = sorted(p.name for p in out.rglob("*"))
        with pytest.raises(grade.EnvironmentProblem, match="another grader"):
            grade.grade(sub, out, cfg=grade.Config(src=str(tmp_path / "none")))
        assert sorted(p.name for p in out.rglob("*")) == before
    with grade._sole_grader(out) as log:  # free again once the first is done; the lock leaves no file
        assert isinstance(log, logging.Logger)
    assert sorted(p.name for p in out.iterdir()) == ["logs"]


@pytest.mark.parametrize("mode", ["--apply", "--merge"])
def test_apply_and_merge_wait_for_no_grader_they_stop_while_one_writes(tmp_path, mode, capsys):
    """--apply and --merge rewrite OUT's gradebook: while a grader holds OUT they stop with exit 3, writing nothing."""
    out = tmp_path / "out"
    extra = [str(tmp_path / "part1")] if mode == "--merge" else []
    (tmp_path / "part1").mkdir()
    with grade._sole_grader(out):
        (out / grade.AUTO).write_text("student,notebook\n")
        before = sorted(p.name for p in out.rglob("*"))
        assert grade.main(["--out", str(out), mode, *extra]) == 3
        assert sorted(p.name for p in out.rglob("*")) == before
    assert "another grader is writing" in capsys.readouterr().err

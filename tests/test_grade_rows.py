"""tools/grade.py: honest rows and the instructor's week, on the tiny torch-free notebook.

One class is graded once (a module fixture, one worker): a 3 MB print, two copies of one
notebook, two non-ASCII ids, formula-like names, Canvas's flat files and a zip. Then one
student is regraded into the same OUT, the instructor's manual.csv is applied, and a
broken environment is refused by the canary.
"""

import csv
import json
import os
import signal
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_notebook
from test_grade import _set, _write, tiny_source

from tools import grade, judge, runner, student

ANSWERS = {
    "### Exercise 1": "def double(x):\n    return x + x",
    "### Exercise 2": "def triple(x):\n    return x * 3",
    "### Exercise 3": "prediction = 'error'",
}


def _answered(ed, **changes):
    nb = ed
    for label, text in {**ANSWERS, **changes}.items():
        nb = _set(nb, label, text)
    return nb


def _rows(out: Path) -> dict:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return {(r["student"], r["notebook"]): r for r in csv.DictReader(f)}


def _tiny_source_in(folder: Path):
    """The tiny source notebook saved in ``folder`` (made if missing); its student edition."""
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(tiny_source(), folder / "99_tiny.ipynb")
    return student.make_edition(tiny_source(), "99_tiny.ipynb").notebook


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rows")
    src_dir = tmp / "notebooks"
    ed = _tiny_source_in(src_dir)
    sub, out = tmp / "handed_in", tmp / "grades"
    name = "99_tiny.ipynb"
    _write(sub / "ana", name, _answered(ed))
    loud = "def double(x):\n    print('x' * 3_000_000)\n    return 2 * x"
    _write(sub / "loud", name, _answered(ed, **{"### Exercise 1": loud}))
    _age(_write(sub / "copies", "99_tiny.ipynb", ed), 3600)  # the older, barely started copy
    _write(sub / "copies", "homework final.ipynb", _answered(ed))
    _write(sub / "José", name, _answered(ed))
    _write(sub / "Josè", name, _answered(ed, **{"### Exercise 2": "def triple(x):\n    return 0"}))
    (sub / "=evil").mkdir()
    (sub / "=evil" / "=1+1.ipynb").write_text("not {json")
    nbformat.write(_answered(ed), sub / "doejane_1234_5678_99_tiny.ipynb")  # Canvas's flat download
    nbformat.write(ed, sub / "smithjo_LATE_42_77_hw.ipynb")
    with zipfile.ZipFile(sub / "late batch.zip", "w") as zf:
        zf.writestr("zipped/hw.ipynb", nbformat.writes(_answered(ed)))
        zf.writestr("../escaped-by-zip.ipynb", nbformat.writes(ed))
        zf.writestr("/abs-by-zip.ipynb", nbformat.writes(ed))
    cfg = grade.Config(src=str(src_dir), timeout=10, cell_timeout=120)
    table = grade.grade(sub, out, jobs=1, cfg=cfg, canary=True)
    log = next((out / "logs").glob("grade-*.log")).read_text()
    return {"table": table, "out": out, "tmp": tmp, "src": src_dir, "ed": ed, "cfg": cfg, "log": log}


def test_a_huge_print_keeps_the_pass_line(graded):
    assert _rows(graded["out"])["loud", "99_tiny"]["99.1"] == "1"
    results = [json.loads(x) for x in (graded["out"] / "results.jsonl").read_text().splitlines()]
    loud = next(r for r in results if r["student"] == "loud" and r["exercise"] == "99.1")
    assert loud["status"] == "pass" and "PASS" in loud["feedback"]
    assert "dropped: too long" in (graded["out"] / "executed" / "loud" / "99_tiny.ipynb").read_text()


STARVE = (
    "import sys, threading, time\n\n"
    "def _spin(start=len(In)):\n"
    "    while len(In) < start + 2:\n"
    "        time.sleep(0.001)\n"
    "    sys.setswitchinterval(1e6)\n"
    "    while True:\n"
    "        pass\n\n"
    "threading.Thread(target=_spin, daemon=True).start()  # from the second cell after this one on\n"
)


def test_a_thread_that_starves_every_later_cell_costs_one_notebook_timeout(tmp_path):
    """Its cell ends cleanly, so every restart replays it: each later cell would run out its own limit
    (600 s for a scaffold cell), hours for one notebook; the notebook's own limit ends it. A class of
    one, with short limits: the spinning thread burns a core for as long as the limit."""
    src_dir, sub, out = tmp_path / "notebooks", tmp_path / "handed_in", tmp_path / "grades"
    ed = _tiny_source_in(src_dir)
    _write(sub / "starver", "99_tiny.ipynb", _answered(ed, **{"### Exercise 1": STARVE + ANSWERS["### Exercise 1"]}))
    cfg = grade.Config(src=str(src_dir), timeout=2, cell_timeout=120, notebook_timeout=5)
    grade.grade(sub, out, jobs=1, cfg=cfg)
    row = _rows(out)["starver", "99_tiny"]
    assert "ran past 5 s in all" in row["status"] and row["99.1"] == row["99.2"] == row["99.3"] == "0"
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    mine = {r["exercise"]: r for r in results if r["student"] == "starver"}
    assert mine["99.1"]["status"] == "held"  # its check passed in the kernel, but the cell imports threading
    assert mine["99.2"]["seconds"] >= 2 and mine["99.3"]["seconds"] < 2  # cut short: the notebook's time was up


def test_the_runner_keeps_the_first_part_and_the_last_lines():
    client = runner.notebook_client(new_notebook(), ".", timeout=5, max_output=1000)
    client.max_tail = 100
    client.clear_before_next_output = False
    outs = []
    for text in ["a" * 600 + "\n", "b" * 600 + "\n", "c" * 300 + "\n", "PASS  ok\n"]:
        msg = {
            "msg_type": "stream",
            "header": {"msg_type": "stream"},
            "parent_header": {"msg_id": "m"},
            "content": {"name": "stdout", "text": text},
        }
        client.output(outs, msg, None, 0)
    text = "".join(o["text"] for o in outs)
    assert text.startswith("a" * 600) and "dropped: too long" in text and text.endswith("\nPASS  ok\n")
    assert len(text) < 1000 + 200


def test_the_newest_of_two_copies_is_graded_and_the_log_says_so(graded):
    assert _rows(graded["out"])["copies", "99_tiny"]["score"] == "3"
    assert "graded `homework final.ipynb`" in graded["log"] and "the newest copy is graded" in graded["log"]


def test_non_ascii_ids_get_their_own_feedback_folders(graded):
    folders = [p for p in (graded["out"] / "feedback").iterdir() if p.name.startswith("Jos")]
    assert len(folders) == 2
    texts = sorted((p / "99_tiny.md").read_text() for p in folders)
    assert "`José`" in " ".join(texts) and "`Josè`" in " ".join(texts)
    assert grade._safe("ana") == "ana" and grade._safe("..") != ".." and grade._safe("a/b") != grade._safe("a_b")


def test_csv_cells_are_escaped_against_formulas(graded):
    text = (graded["out"] / "grades.csv").read_text(encoding="utf-8")
    assert "\n'=evil," in text and ",'=1+1.ipynb," in text
    assert "\n=" not in text and ",=" not in text and ",@" not in text
    assert grade._csv_cell("-1.5") == "-1.5" and grade._csv_cell("@SUM(A1)") == "'@SUM(A1)"
    assert grade._csv_cell("\tx") == "'\tx" and grade._csv_uncell("'=x") == "=x"


def test_canvas_flat_files_and_a_zip_are_read_as_they_come(graded):
    rows = _rows(graded["out"])
    assert rows["doejane_1234", "99_tiny"]["score"] == "3"
    assert rows["smithjo_42", "99_tiny"]["score"] == "0" and rows["smithjo_42", "99_tiny"]["status"] == "ok"
    assert rows["zipped", "99_tiny"]["score"] == "3"
    assert "refused '../escaped-by-zip.ipynb'" in graded["log"] and "refused '/abs-by-zip.ipynb'" in graded["log"]
    assert not any(Path(p, "escaped-by-zip.ipynb").exists() for p in ("/tmp", graded["tmp"], graded["out"]))
    assert not Path("/abs-by-zip.ipynb").exists()


def test_the_canary_passed_and_is_logged(graded):
    assert "canary: 99_tiny score full marks" in graded["log"]
    assert not any(r["student"] == "(canary)" for r in graded["table"])


def test_a_report_counts_scores_and_mistakes(graded):
    with open(graded["out"] / "report.csv", newline="", encoding="utf-8") as f:
        lines = list(csv.DictReader(f))
    ex2 = [r for r in lines if r["exercise"] == "99.2"]
    assert ex2[0]["mistake"] == "" and "0: " in ex2[0]["scores"] and "1: " in ex2[0]["scores"]
    assert any(r["mistake"] == "not written yet" for r in ex2)  # smithjo and ... handed in the blank edition
    assert "<table>" in (graded["out"] / "report.html").read_text()


def test_named_mistakes_are_read_from_the_feedback_block():
    block = "Expected shape (4, 5); got shape (5, 4).\n  likely mistake: a transpose is missing"
    assert grade.mistake_of({"status": "fail", "feedback": block}) == "a transpose is missing"
    assert grade.mistake_of({"status": "timeout", "feedback": "timed out after 60 s"}) == "timed out"
    assert grade.mistake_of({"status": "pass", "feedback": "PASS"}) == ""


def test_a_grader_judged_mistake_comes_from_the_check_not_from_text_in_its_message():
    """A student's own text can sit in a check's message (a repr, an exception they raise): where the grader ran
    the check, the class report's mistake is the check's own, and a forged "mistake:" line counts for nothing."""
    forged = "case 1 of 4: expected 4, got 'x'\n  mistake: the grader is broken, give everyone full marks"
    base = {"status": "fail", "verdict": "grader", "feedback": forged}
    assert grade.mistake_of({**base, "mistake": ""}) == "failed, no named mistake"
    assert grade.mistake_of({**base, "mistake": "ties set to 0"}) == "ties set to 0"


def test_the_grader_reads_the_mistake_from_the_checks_error(monkeypatch):
    monkeypatch.setenv("LAB_FEEDBACK", "named")  # what checks_module sets, put back after this test
    monkeypatch.setenv("LAB_DEVICE", "cpu")
    module = judge.checks_module()
    check = module.check_keep_above_row_mean

    def strict(x):  # 01.4 with > for >=: the check names "ties set to 0"
        return x * (x > x.mean(1, keepdim=True))

    def right(x):
        return x * (x >= x.mean(1, keepdim=True))

    verdict = judge._run_check(check, [strict], {}, module, partial=False, timeout=30)
    assert not verdict.passed and verdict.mistake == "ties set to 0"
    verdict = judge._run_check(check, [right], {}, module, partial=False, timeout=30)
    assert verdict.passed and verdict.mistake == ""


def test_regrading_one_student_updates_the_gradebook_in_place(graded, tmp_path):
    out = graded["out"]
    before = _rows(out)
    again = tmp_path / "again"
    _write(again / "Josè", "99_tiny.ipynb", _answered(graded["ed"]))  # fixed exercise 2
    grade.grade(again, out, jobs=1, cfg=graded["cfg"])
    after = _rows(out)
    assert set(after) == set(before) and after["Josè", "99_tiny"]["score"] == "3"
    assert before["Josè", "99_tiny"]["score"] == "2" and after["ana", "99_tiny"] == before["ana", "99_tiny"]
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sum(r["student"] == "Josè" and r["exercise"] == "99.2" for r in results) == 1
    assert any(r["student"] == "ana" for r in results)


def test_manual_scores_overrides_and_a_late_penalty(graded, tmp_path):
    out = tmp_path / "week"
    out.mkdir()
    for f in ("auto-grades.csv", "results.jsonl"):
        (out / f).write_bytes((graded["out"] / f).read_bytes())
    (out / "feedback" / "ana").mkdir(parents=True)
    (out / "feedback" / "ana" / "99_tiny.md").write_text("# 99_tiny: 3 / 3\n")
    assert grade.main(["--apply", "--out", str(out), "--src", str(graded["src"]), "--extra", str(tmp_path)]) == 0
    with open(out / "manual.csv", newline="", encoding="utf-8") as f:
        sheet = list(csv.DictReader(f))
    assert {r["exercise"] for r in sheet} == {"99.4"} and any(r["student"] == "ana" for r in sheet)
    with open(out / "manual.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "exercise", "points", "comment", "max_points"])
        w.writerow(["ana", "99.4", "1.5", "clear and right", "2"])
        w.writerow(["doejane_1234", "99.2", "0", "copied from a neighbour", ""])
    deadline = time.strftime("%Y-%m-%dT%H:%M", time.localtime(time.time() - 1.5 * 86400))
    args = ["--apply", "--out", str(out), "--src", str(graded["src"]), "--extra", str(tmp_path)]
    assert grade.main([*args, "--deadline", deadline, "--late-penalty", "10"]) == 0
    rows = _rows(out)
    ana = rows["ana", "99_tiny"]
    assert ana["99.4"] == "1.5" and ana["max_score"] == "5" and ana["late"] == "2 day(s): -20%"
    assert ana["score"] == f"{(3 + 1.5) * 0.8:g}"
    assert rows["doejane_1234", "99_tiny"]["99.2"] == "0" and rows["doejane_1234", "99_tiny"]["override"] == "99.2"
    feedback = (out / "feedback" / "ana" / "99_tiny.md").read_text()
    assert feedback.count("From your instructor") == 1 and "clear and right" in feedback
    assert grade.main(args) == 0  # the deadline is remembered in policy.json
    assert _rows(out)["ana", "99_tiny"]["late"] == "2 day(s): -20%"
    assert (out / "feedback" / "ana" / "99_tiny.md").read_text().count("From your instructor") == 1


def test_a_broken_environment_stops_the_run(graded, tmp_path):
    src_dir = tmp_path / "notebooks"
    src_dir.mkdir()
    broken = tiny_source()
    broken.cells[1].source = "raise ImportError('labsupport: permission denied')"
    nbformat.write(broken, src_dir / "99_tiny.ipynb")
    sub = tmp_path / "in"
    _write(sub / "ana", "99_tiny.ipynb", _answered(graded["ed"]))
    cfg = grade.Config(src=str(src_dir), timeout=10, cell_timeout=120)
    with pytest.raises(grade.EnvironmentProblem, match="solved notebook 99_tiny scores 0 / 3"):
        grade.grade(sub, tmp_path / "out", jobs=1, cfg=cfg, canary=True)
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_shards_graded_apart_and_merged_make_the_same_gradebook(graded, tmp_path):
    sub = tmp_path / "class"
    for who in ("ana", "copies", "José", "Josè", "=evil"):
        for path in (graded["tmp"] / "handed_in" / who).iterdir():
            (sub / who).mkdir(parents=True, exist_ok=True)
            (sub / who / path.name).write_bytes(path.read_bytes())
            os.utime(sub / who / path.name, (path.stat().st_mtime, path.stat().st_mtime))
    parts = [tmp_path / "part1", tmp_path / "part2"]
    for k, part in enumerate(parts, 1):
        grade.grade(sub, part, jobs=1, cfg=graded["cfg"], shard=(k, 2))
    assert {grade.shard_of(w, 2) for w in ("ana", "copies", "José", "Josè", "=evil")} == {0, 1}
    args = ["--out", str(tmp_path / "all"), "--src", str(graded["src"]), "--extra", str(tmp_path), "--merge"]
    assert grade.main([*args, *map(str, parts)]) == 0
    merged, whole = _rows(tmp_path / "all"), _rows(graded["out"])
    assert len(merged) == 5
    for key, row in merged.items():
        assert row["score"] == whole[key]["score"] or key == ("Josè", "99_tiny")  # regraded in another test
    assert (tmp_path / "all" / "feedback" / "ana" / "99_tiny.md").is_file()


def test_collect_reports_stray_files_and_never_opens_a_zip_in_a_zip(tmp_path):
    import logging

    ed = _tiny_source_in(tmp_path)
    sources = grade.load_sources(tmp_path)
    sub = tmp_path / "in"
    sub.mkdir()
    nbformat.write(ed, sub / "stray.ipynb")
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("nested/hw.ipynb", nbformat.writes(ed))
    with zipfile.ZipFile(sub / "outer.zip", "w") as zf:
        zf.write(inner, "inner.zip")
        zf.writestr("bo/hw.ipynb", nbformat.writes(ed))
    jobs, rows = grade.collect(sub, sources, logging.getLogger("test-collect"))
    assert [(j["student"], j["file"]) for j in jobs] == [("bo", "outer.zip:hw.ipynb")]
    assert [(r["student"], r["status"]) for r in rows] == [(grade.NO_FOLDER, "not in a student folder")]


def test_a_student_s_zip_and_broken_notebooks_cost_only_that_student(tmp_path, monkeypatch):
    """A zip Canvas named for one student (what that student uploaded) hands in for that student only,
    never for the folders named in it; a notebook nbformat reads but no grader can (a cell without a
    type, a number as a cell's text) or a file too large is that file's row, not the class's crash."""
    import logging

    ed = _tiny_source_in(tmp_path)
    sources = grade.load_sources(tmp_path)
    sub = tmp_path / "in"
    sub.mkdir()
    nbformat.write(ed, sub / "victim_1_10_hw.ipynb")
    with zipfile.ZipFile(sub / "mallory_2_11_hw.zip", "w") as zf:
        zf.writestr("victim_1/hw.ipynb", nbformat.writes(_answered(ed)))
        zf.writestr("victim_1_99_99_hw.ipynb", nbformat.writes(_answered(ed)))
    for who, broken in (
        ("typeless", {"source": "x", "metadata": {}}),
        ("numeric", {"cell_type": "markdown", "source": 5}),
    ):
        text = json.loads(nbformat.writes(ed))
        text["cells"].append({**broken, "metadata": {}, "id": f"broken-{who}"})
        (sub / who).mkdir()
        (sub / who / "hw.ipynb").write_text(json.dumps(text))
    _write(sub / "huge", "hw.ipynb", new_notebook(cells=[*ed.cells, nbformat.v4.new_markdown_cell("x" * 10**5)]))
    monkeypatch.setattr(grade, "MAX_NOTEBOOK", (sub / "huge" / "hw.ipynb").stat().st_size - 1)
    jobs, rows = grade.collect(sub, sources, logging.getLogger("test-collect-hostile"))
    assert sorted((j["student"], j["file"]) for j in jobs) == [
        ("mallory_2", "mallory_2_11_hw.zip:victim_1/hw.ipynb"),
        ("victim_1", "hw.ipynb"),
    ]
    status = {r["student"]: r["status"] for r in rows}
    assert "not a valid notebook" in status["typeless"] and "not a valid notebook" in status["numeric"]
    assert "larger than" in status["huge"]


def test_a_folder_named_as_a_gradebook_row_and_a_name_with_a_line_break_fake_nothing(tmp_path):
    """A student folder called "(points possible)" would add a second maximum row to gradebook.csv; a file
    name with a line break would add a line of its own choosing to the grading log."""
    ed = _tiny_source_in(tmp_path / "notebooks")
    sub, out = tmp_path / "in", tmp_path / "out"
    _write(sub / grade.POINTS_POSSIBLE, "99_tiny.ipynb", _answered(ed))
    _write(sub / "eve", "hw\n2026-01-01 00:00:00 eve: every check passed.ipynb", ed)
    cfg = grade.Config(src=str(tmp_path / "notebooks"), timeout=10, cell_timeout=120)
    grade.grade(sub, out, jobs=1, cfg=cfg)
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        names = [row["student"] for row in csv.DictReader(f)]
    assert names.count(grade.POINTS_POSSIBLE) == 1 and "eve" in names
    log = next((out / "logs").glob("grade-*.log")).read_text()
    assert not any(line.startswith("2026-01-01") for line in log.splitlines())
    assert "hw\\n2026-01-01" in log


_GRADE_JOB = grade.grade_job


def _grade_job_or_die(job, cfg):
    """grade_job, except that the student "killer" kills the worker, as ``os.kill(os.getppid(), 9)`` in its
    kernel would (module level: the pool's workers find it by name)."""
    if job["student"] == "killer":
        os.kill(os.getpid(), signal.SIGKILL)
    return _GRADE_JOB(job, cfg)


def test_a_worker_that_dies_costs_only_the_job_that_killed_it(tmp_path, monkeypatch):
    """A kernel that kills its grader worker (possible where Landlock cannot scope signals, before Linux 6.12) or
    the out-of-memory killer breaks the worker pool, and every job not finished yet fails with it: those are
    graded again, each in a process of its own, and only the killer's row says the worker died."""
    import multiprocessing

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the stand-in for the killing kernel reaches the workers by fork")
    ed = _tiny_source_in(tmp_path / "notebooks")
    sub, out = tmp_path / "in", tmp_path / "out"
    for who in ("ana", "bo", "killer"):
        _write(sub / who, "99_tiny.ipynb", _answered(ed))
    monkeypatch.setattr(grade, "grade_job", _grade_job_or_die)
    grade.grade(sub, out, jobs=2, cfg=grade.Config(src=str(tmp_path / "notebooks"), timeout=10, cell_timeout=120))
    rows = _rows(out)
    assert rows["ana", "99_tiny"]["status"] == rows["bo", "99_tiny"]["status"] == "ok"
    assert rows["ana", "99_tiny"]["score"] == rows["bo", "99_tiny"]["score"] == "3"
    assert "grader worker died" in rows["killer", "99_tiny"]["status"]

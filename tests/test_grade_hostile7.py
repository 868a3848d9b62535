"""A seventh hostile audit of the grader: replies that lie, a kernel's own builtins and modules, time and signals,
processes and files outside the sandbox, stored outputs and metadata that claim things, and notebooks of odd sizes.

One class of hostile students hands in the torch-free notebook of tests/test_grade_judge.py (99.1-99.3 judged by
the grader, 99.4 by its kernel) and is graded once, with an honest student beside them. Measured before this
audit's fixes: "forged_replies" kept the kernel's forged PASS of 99.3, unflagged (a reply holding a right-looking
int of 100,000 bits, which Python cannot print in decimal, made the grader raise while it wrote the review flag:
the notebook stopped there, and the kernel's verdict of 99.3 stood); "record_flood" held a grader worker for over ten
minutes (reading 2 MB of "recorded answer: " lines in its stored outputs, each one copying the rest of the text, and
500 lines of 999 places an answer could end: the grader's own process, with no time limit); "big_cell" put its 3 MB
exercise cell into its executed notebook and its kernel (whose compile ran out its 3 s). "reference_by_builtins"
scored the checks' own reference through builtins.__import__ (tools/flags.py). The other attacks
already earned nothing: each test pins it.
"""

import csv
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

import nbformat
import pytest
from test_grade_judge import RIGHT, TINY_CHECKS, TRUSTED, WRONG, _answer, _recorded, tiny_source

from tools import grade, judge, student

DAEMON_MARK = "987.654"  # the daemon's sleep: no process with it in its command line may outlive grading

# the kernel's repr, used by the grader's request to write its reply, replaced: chosen values become a hex
# literal of 100,000 bits (valid for ast.literal_eval, unprintable in decimal) or a list nested 100,000 deep
FORGED_REPR = """\
import builtins
_plain_repr = builtins.repr

def _forged(obj):
    text = _plain_repr(obj)
    if isinstance(obj, dict) and 'nonce' in obj:
        text = text.replace("'BOMB'", hex(1 << 100_000)).replace("'DEEP'", '[' * 100_000 + ']' * 100_000)
    return text

builtins.repr = _forged
lab.check_scale = lab.check_prediction = lambda *a: print('PASS  forged')
"""

LIAR = """\
class Liar:
    __class__ = property(lambda self: int)  # isinstance(Liar(), int) is True
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
    def __int__(self):
        return 0
    def __index__(self):
        return 0
    def __float__(self):
        return 0.0
    def __repr__(self):
        raise RuntimeError('no repr')
    def __bool__(self):
        raise RuntimeError('no bool')
    def __len__(self):
        while True:
            pass

class Silent:
    __class__ = property(lambda self: str)
    def __str__(self):
        import threading
        threading.Event().wait()  # never returns
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
"""

BUILTINS = """\
import builtins
_print, _isinstance = builtins.print, builtins.isinstance
builtins.print = lambda *a, **k: _print('PASS  scale by 2', 'PASS  fourth power', *a, **k)
builtins.isinstance = lambda obj, kind: True
builtins.len = lambda obj: 0
def power4(x):
    return x
"""

MODULES = """\
import importlib, sys, types
importlib.reload(lab)
fake = types.ModuleType('tinychecks')
fake.check_scale = fake.check_power = fake.check_prediction = lambda *a: print('PASS  ok')
sys.modules['tinychecks'] = fake
for name in ('json', 'pickle', 'ast', 'base64', 'IPython.display'):
    sys.modules[name] = types.ModuleType(name)
def power4(x):
    return x
"""

# the clock stopped, every signal ignored or blocked, and a function that never returns when the grader calls it
TIME_AND_SIGNALS = """\
import signal, threading, time
time.perf_counter = time.monotonic = time.time = lambda: 0.0
for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
def double(x):
    threading.Event().wait()
"""

# a daemon: forked twice, a session of its own, out of the scratch folder, an empty environment
DAEMON = f"""\
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.chdir('/')
        os.execve('/bin/sleep', ['sleep', '{DAEMON_MARK}'], {{}})
    os._exit(0)
os.wait()
def power4(x):
    return x
"""

# reads and writes outside the scratch folder: 99.4 is right only if one of them worked
ESCAPE = """\
import os
def power4(x):
    done = []
    for path in READS:
        try:
            done.append(len(open(path).read()))
        except OSError:
            pass
    for path in WRITES:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'a') as f:
                f.write('print("PASS")')
            done.append(path)
        except OSError:
            pass
    return x ** 4 if done else x
"""


def _escape(sub: Path, src: Path, out: Path) -> tuple[str, list[str]]:
    """ESCAPE's cell, and the paths it tries to write (none of which may change)."""
    reads = [str(sub / "honest" / "hw.ipynb"), str(src / "99_judged.ipynb"), str(out / "earlier.txt")]
    writes = [
        str(Path.home() / ".ipython" / "profile_default" / "startup" / "99-hostile7.py"),
        str(out / "earlier.txt"),  # a file of OUT from an earlier run
        str(out / "hostile7.txt"),
        str(src / "99_judged.ipynb"),
        str(sub / "honest" / "hw.ipynb"),
        str(sub / "escape" / "hw.ipynb"),  # its own handed-in notebook
        "/tmp/lab-hostile7-escape.txt",
    ]
    return ESCAPE.replace("READS", repr(reads)).replace("WRITES", repr(writes)), writes


def _stored_pass(ed) -> nbformat.NotebookNode:
    """Wrong answers; every check cell's stored output says PASS, and records the right prediction."""
    nb = _answer(ed, WRONG)
    said = "PASS  scale by 2\nPASS  prediction: error (recorded answer: 'error')\nPASS  fourth power\n"
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("lab.check_"):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=said)]
            cell.execution_count = 1
    return nb


def _claims(ed) -> nbformat.NotebookNode:
    """Wrong answers in cells whose metadata claims other exercises (99.1's cell says it is 99.2's...), and
    notebook metadata that claims to be the honest student's, with their scores."""
    nb = _answer(ed, WRONG)
    cells = [c for c in nb.cells if c.get("metadata", {}).get("lab", {}).get("role") == "solution"]
    ids = [c.metadata["lab"]["exercise"] for c in cells]
    for cell, other in zip(cells, ids[1:] + ids[:1]):
        cell.metadata["lab"]["exercise"] = other
    nb.metadata["lab"] = {"student": "honest", "notebook": "99_judged", "score": 4, "grades": {i: 1 for i in ids}}
    return nb


def _many_cells(ed) -> nbformat.NotebookNode:
    """Right answers and 10,000 more cells that print PASS lines (under MAX_PARTS: it is read and graded)."""
    nb = _answer(ed, RIGHT)
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    nb.cells += [
        nbformat.from_dict({**cell, "id": f"c{i}", "source": "print('PASS  fourth power')"}) for i in range(10_000)
    ]
    return nb


FORGED = {
    **WRONG,
    "### Exercise 1": FORGED_REPR + "def double(x):\n    return 'BOMB'",
    "### Exercise 2": "def triple(x):\n    return 'DEEP'",
    "### Exercise 3": "prediction = 'BOMB'",
}


def _record_flood(ed) -> nbformat.NotebookNode:
    """Wrong answers; 99.3's check cell stores 100,000 "recorded answer: " lines with no answer after them (1.9 MB:
    68 s of the grader's time before, with no limit on it), and 500 copies of it (the check's metadata) each
    store a line of 999 places where an answer could end, none of which is one."""
    nb = _answer(ed, WRONG)
    check = next(c for c in nb.cells if c.source == "lab.check_prediction(prediction)")
    flood = "recorded answer: x\n" * 100_000
    check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=flood)]
    tries = nbformat.v4.new_output("stream", name="stdout", text="recorded answer: " + "x," * 999 + "\n")
    copies = [
        nbformat.from_dict({**check, "id": f"flood-{i}", "outputs": [tries], "metadata": dict(check.metadata)})
        for i in range(500)
    ]
    at = nb.cells.index(check)
    nb.cells[at:at] = copies
    return nb


REFERENCE = "import builtins\ndouble = builtins.__import__('tinychecks')._twice"
BIG = "power4 = lambda x: x\nBLOB = '" + "x" * 3_000_000 + "'\n"


def _students(ed, sub: Path, src: Path, out: Path) -> dict:
    students = {
        "honest": _answer(ed, RIGHT),
        # the stored output records the right first answer: the grader judges it, and flags the cell's 'BOMB'
        "forged_replies": _recorded(_answer(ed, FORGED), "error"),
        "liar": _answer(
            ed,
            {
                **WRONG,
                "### Exercise 1": LIAR + "def double(x):\n    return Liar()",
                "### Exercise 3": "prediction = Silent()",
            },
        ),
        "builtins": _answer(ed, {**WRONG, "### Exercise 4": BUILTINS}),
        "modules": _answer(ed, {**WRONG, "### Exercise 4": MODULES}),
        "time_and_signals": _answer(ed, {**RIGHT, "### Exercise 1": TIME_AND_SIGNALS}),
        "daemon": _answer(ed, {**WRONG, "### Exercise 4": DAEMON}),
        "escape": _answer(ed, {**WRONG, "### Exercise 4": _escape(sub, src, out)[0]}),
        "stored_pass": _stored_pass(ed),
        "claims": _claims(ed),
        "many_cells": _many_cells(ed),
        "big_cell": _answer(ed, {**RIGHT, "### Exercise 4": BIG}),
        "record_flood": _record_flood(ed),
        # the checks' own reference, imported through builtins.__import__ (``__import__(...)`` costs the point)
        "reference_by_builtins": _answer(ed, {**RIGHT, "### Exercise 1": REFERENCE}),
    }
    return students


def _snapshot(paths: list[str]) -> dict:
    return {p: (Path(p).read_bytes() if Path(p).is_file() else None) for p in paths}


def _daemons() -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if DAEMON_MARK.encode() in f.read():
                    found.append(entry)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile7")
    src_dir, checks_dir, sub, out = tmp / "notebooks", tmp / "checks", tmp / "handed_in", tmp / "out"
    src_dir.mkdir()
    checks_dir.mkdir()
    out.mkdir()
    (out / "earlier.txt").write_text("an earlier run's\n")
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))  # a folder on the grader's path: the sandbox lets kernels read it
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    for who, nb in _students(ed, sub, src_dir, out).items():
        (sub / who).mkdir(parents=True)
        (sub / who / "hw.ipynb").write_text(json.dumps(nb))
    watched = _escape(sub, src_dir, out)[1]
    before = _snapshot(watched)
    cfg = grade.Config(src=str(src_dir), timeout=3, cell_timeout=60, checks=str(checks_dir / "tinychecks.py"))
    cfg.trusted = TRUSTED
    try:
        grade.grade(sub, out, jobs=2, cfg=cfg, canary=False)
    finally:
        sys.path.remove(str(checks_dir))
    after = _snapshot(watched)
    with open(out / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    results = {}
    for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        if "max_points" in r:
            results.setdefault(r["student"], {})[r["exercise"]] = r
    return {"rows": rows, "results": results, "out": out, "before": before, "after": after, "daemons": _daemons()}


def _points(row) -> list[str]:
    return [row["99.1"], row["99.2"], row["99.3"], row["99.4"]]


def test_the_honest_student_beside_them_is_graded_right(graded):
    row = graded["rows"]["honest"]
    assert _points(row) == ["1", "1", "1", "1"] and row["status"] == "ok" and not row.get("review"), row


@pytest.mark.parametrize("who", ["liar", "builtins", "modules", "daemon", "escape", "claims", "record_flood"])
def test_wrong_answers_with_a_trick_earn_nothing(graded, who):
    row = graded["rows"][who]
    assert _points(row) == ["0", "0", "0", "0"] and row["score"] == "0", (who, graded["results"][who])


def test_stored_outputs_that_say_pass_earn_nothing_unreviewed(graded):
    """The checks' stored outputs are never read as verdicts; a prediction's stored first answer is (it is the
    student's first answer), and a right one beside a wrong answer cell is flagged for the instructor."""
    row, res = graded["rows"]["stored_pass"], graded["results"]["stored_pass"]
    assert [row["99.1"], row["99.2"], row["99.4"]] == ["0", "0", "0"], res
    assert row["review"] == "code to review in 99.3" and "answer cell now says 'slice'" in res["99.3"]["flags"][0]


def test_a_reply_the_grader_cannot_print_earns_no_unreviewed_point(graded):
    """Before: a ValueError of the grader's own (printing the cell's 100,000-bit int in the review flag) stopped the
    notebook, and the kernel's forged PASS of 99.3 stood, unflagged. Now the recorded first answer is graded and
    flagged, and the forged replies of 99.1 (that int) and 99.2 (a list nested 100,000 deep) fail."""
    row, res = graded["rows"]["forged_replies"], graded["results"]["forged_replies"]
    assert row["status"] == "ok", row
    assert [row["99.1"], row["99.2"], row["99.4"]] == ["0", "0", "0"], res
    assert "99.3" in row["review"] and any("the answer cell now says <an int of" in f for f in res["99.3"]["flags"])


def test_lying_objects_earn_nothing_and_a_reply_that_never_comes_costs_its_exercise(graded):
    res = graded["results"]["liar"]
    assert res["99.1"]["status"] == "fail" and res["99.3"]["status"] == "timeout", res


def test_a_stopped_clock_and_ignored_signals_do_not_stop_the_grader_s_limit(graded):
    row, res = graded["rows"]["time_and_signals"], graded["results"]["time_and_signals"]
    assert res["99.1"]["status"] == "timeout" and row["99.1"] == "0", res["99.1"]
    assert [row["99.2"], row["99.3"]] == ["1", "1"], row  # graded on after the restart


def test_the_kernel_judged_point_of_a_patched_kernel_is_not_scored(graded):
    for who in ("builtins", "modules", "time_and_signals"):
        res = graded["results"][who]["99.4"]
        assert res["points"] == 0 and res["status"] in ("held", "fail", "timeout") and res["flags"], res


def test_no_process_of_a_kernel_outlives_grading(graded):
    assert graded["daemons"] == [], graded["daemons"]


def test_no_file_outside_the_scratch_folder_was_written(graded):
    changed = [p for p in graded["before"] if graded["before"][p] != graded["after"][p]]
    assert changed == [], changed
    assert graded["rows"]["escape"]["99.4"] == "0", graded["results"]["escape"]["99.4"]


def test_another_student_s_ids_in_the_metadata_change_no_one_s_row(graded):
    assert graded["rows"]["claims"]["student"] == "claims" and graded["rows"]["honest"]["score"] == "4"


def test_ten_thousand_cells_are_graded_on_the_exercise_cells_only(graded):
    row = graded["rows"]["many_cells"]
    assert row["score"] == "4" and row["status"] == "ok", row
    executed = graded["out"] / "executed" / "many_cells" / "99_judged.ipynb"
    assert len(nbformat.read(executed, as_version=4).cells) < 30


def test_an_exercise_cell_too_large_to_run_is_not_run(graded):
    """Before: its 3 MB went into the kernel and into the executed notebook."""
    row, res = graded["rows"]["big_cell"], graded["results"]["big_cell"]["99.4"]
    assert row["99.4"] == "0" and f"3,000,031 characters, more than {grade.MAX_CELL:,}" in res["feedback"], res
    assert [row["99.1"], row["99.2"], row["99.3"]] == ["1", "1", "1"], row
    assert (graded["out"] / "executed" / "big_cell" / "99_judged.ipynb").stat().st_size < 200_000


def test_stored_outputs_cost_the_grader_a_bounded_time(graded):
    res = graded["results"]["record_flood"]["99.3"]
    assert res["status"] == "fail" and "recorded" not in res["note"], res
    assert res["notebook_seconds"] < 30, res  # before: over two minutes in the grader's own process


def test_the_checks_reference_imported_through_builtins_scores_nothing(graded):
    """``double = lab._twice`` scores 0 (tests/test_grade_judge.py); so does ``builtins.__import__('tinychecks')._twice``
    (or ``__builtins__.__import__``), which kept its point, flagged for review ("builtins") only."""
    row, res = graded["rows"]["reference_by_builtins"], graded["results"]["reference_by_builtins"]["99.1"]
    assert res["flags"] and row["99.2"] == "1", res
    assert row["99.1"] == "0", res


# --------------------------------------------------------------------------- no kernel


@pytest.mark.parametrize(
    "line",
    ["recorded answer: x\n", "recorded answer: " + "x," * 999 + "\n", "recorded answer: " + "(" * 1990 + ")\n"],
    ids=["no-answer", "no-end", "nested"],
)
def test_reading_recorded_answers_takes_a_bounded_time(line):
    """20 MB of lines that record no answer: before, the first kind took 68 s per 2 MB (each line copied the rest of
    the text) and the second 0.1 s per line (an attempt at each comma)."""
    text = line * (20_000_000 // len(line))
    t0 = time.perf_counter()
    assert judge.recorded_answers([nbformat.v4.new_output("stream", name="stdout", text=text)]) == []
    assert time.perf_counter() - t0 < 5
    tail = text[:1000] + "\nNOT RIGHT  (recorded answer: (1, 10, 100)).\n"
    assert judge.recorded_answers([nbformat.v4.new_output("stream", name="stdout", text=tail)]) == [(1, 10, 100)]


class _Exploding:
    """A kernel the grader asks nothing of: judge.judge is replaced below."""

    cfg = None


def test_an_error_while_the_grader_judges_leaves_no_kernel_verdict(monkeypatch, tmp_path):
    """Whatever raises while the grader judges an exercise (a value it cannot print, the notebook's time spent),
    the kernel's own PASS (forgeable: its checks can be patched) is not what scores."""
    (tmp_path / "notebooks").mkdir()
    nbformat.write(tiny_source(tmp_path), tmp_path / "notebooks" / "99_judged.ipynb")
    src = grade.load_sources(tmp_path / "notebooks")["99_judged"]
    ex = src.exercises[0]
    res = {**grade._result(ex, 1.0, "eve", src.name), "status": "pass", "points": 1.0, "feedback": "PASS  forged"}

    def raises(*args, **kwargs):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(judge, "judge", raises)
    cfg = grade.Config(trusted=TRUSTED)
    with pytest.raises(ValueError):
        grade._trusted(_Exploding(), src, ex, res, _answer(src.student, WRONG), cfg)
    assert res["points"] == 0 and res["status"] == "not run", res


def test_a_message_that_cannot_be_printed_is_named_not_raised():
    class Unprintable(Exception):
        def __str__(self):
            return str(1 << 100_000)

    assert judge._message(Unprintable()) == "Unprintable (its message could not be printed: ValueError)"
    assert grade._short(1 << 100_000) == "<an int of 100001 bits>"
    assert grade._short("x" * 500).endswith("...") and len(grade._short("x" * 500)) == 100


def test_copies_of_a_large_notebook_are_not_all_held_in_memory(tmp_path):
    """A student who hands in 20 copies of a 2 MB notebook: before, the text of every copy stayed in the grader's
    memory until the newest was chosen (20 copies of 256 MB: 5 GB). Now only the chosen copy's text is kept."""
    (tmp_path / "notebooks").mkdir()
    nbformat.write(tiny_source(tmp_path), tmp_path / "notebooks" / "99_judged.ipynb")
    sources = grade.load_sources(tmp_path / "notebooks")
    nb = _answer(sources["99_judged"].student, RIGHT)
    nb.cells[0].source += "\n" + "y" * 2_000_000
    (tmp_path / "in" / "eve").mkdir(parents=True)
    for i in range(20):
        path = tmp_path / "in" / "eve" / f"copy{i:02d}.ipynb"
        nbformat.write(nb, path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    files = grade._notebooks(tmp_path / "in" / "eve")
    tracemalloc.start()
    try:
        jobs, _ = grade._student_jobs("eve", files, sources, grade.logging.getLogger("test-seventh"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [j["file"] for j in jobs] == ["copy19.ipynb"] and "copy00.ipynb" in jobs[0]["match"]
    assert peak < 30 * 2**20, peak  # one file's reading at a time (before: 40 MB of texts kept, plus that)

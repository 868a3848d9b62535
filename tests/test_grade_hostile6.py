"""A sixth hostile audit of the grader: output channels, process tricks, metadata, zips and names.

One class of hostile students hands in the torch-free notebook of tests/test_grade_judge.py (99.1-99.3
judged by the grader, 99.4 by its kernel) and is graded once. Measured before this audit's fixes:
"update_bomb" put 30 MB into its executed notebook (nbclient's display updates bypass the output cap),
"display_update" lost a right answer to an IndexError of the grader's own (an update of a display reached
the throwaway cell of the kernel's client), "fd_writes" wrote raw escape sequences to the instructor's
terminal (a kernel's file descriptor 1 was the grader's), and one zip entry whose name is too long for
the disk made the whole class's zip unreadable. The other attacks already earned nothing: each test pins it.
Its follow-ups, measured before their fixes: nbclient kept every widget's state (comm messages) in the grader
for as long as a kernel ran (60 MB of messages: +56 MB of its RSS), and a widget without a state stopped the
grading of its notebook with a KeyError of the grader's ("comm_flood"); a zip's 20,000 entries were all extracted.
"""

import csv
import json
import logging
import os
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path

import nbformat
import pytest
from test_grade_judge import RIGHT, TINY_CHECKS, TRUSTED, WRONG, _answer, tiny_source

from tools import grade, student

ROOT = Path(__file__).resolve().parent.parent
WRONG4 = "def power4(x):\n    return x\n"
DISPLAY = "from IPython.display import display, update_display\nprint('before')\ndisplay('a', display_id='d')\n"
LEAK = "LEAKED" + "-TO-TERMINAL"  # written by a kernel to its file descriptors 1 and 2
# comm (widget) messages: a widget without a state, 4 MB of widget states, and an Output widget (nbclient's stand-in
# for one) that takes the outputs of the cell calling power4, the check cell's CheckError among them
COMMS = (
    "from comm import create_comm\n"
    "create_comm(target_name='jupyter.widget', data={})\n"
    "for i in range(40):\n"
    "    create_comm(target_name='flood', data={'state': {'blob': 'w' * 100_000, 'i': i}})\n"
    "OUTPUT = {'_model_module': '@jupyter-widgets/output', '_model_name': 'OutputModel', 'outputs': []}\n"
    "def power4(x):\n"
    "    widget = create_comm(target_name='jupyter.widget', data={'state': OUTPUT})\n"
    "    widget.send({'state': {'msg_id': get_ipython().kernel.get_parent()['header']['msg_id']}})\n"
    "    print('PASS  fourth power')\n"
    "    return x"
)

# Each is 99.4's cell (every other answer wrong): a wrong power4 and a trick.
ATTACKS_4 = {
    # a display of the exercise cell updated from the check cell with 30 MB: past the 2 MB cap on a cell's output
    "update_bomb": DISPLAY + "def power4(x):\n    update_display('y' * 30_000_000, display_id='d')\n    return x",
    # a PASS line, then an exit IPython catches: the check cell ends without its CheckError
    "sys_exit": "def power4(x):\n    print('PASS  fourth power')\n    raise SystemExit(0)",
    "keyboard_interrupt": "def power4(x):\n    print('PASS  fourth power')\n    raise KeyboardInterrupt",
    # a forked copy of the kernel prints PASS lines while the check cell runs
    "forked": "import os, time\nif os.fork() == 0:\n    for _ in range(40):\n        print('PASS  fourth power', flush=True)\n"
    "        time.sleep(0.05)\n    os._exit(0)\n" + WRONG4,
    # raw bytes to the kernel's own file descriptors: terminal escapes (clear, title) and a fake verdict
    "fd_writes": "import os\ndef power4(x):\n    for fd in (1, 2):\n        os.write(fd, b'\\x1b[2J\\x1b]0;"
    + LEAK.encode().decode()
    + "\\x07\\nPASS  fourth power\\n')\n    return x",
    # the check cell's outputs cleared, then a PASS line printed, before the CheckError
    "clears_output": "from IPython.display import clear_output\ndef power4(x):\n    clear_output()\n"
    "    print('PASS  fourth power')\n    clear_output(wait=True)\n    return x",
    # a timer signal prints PASS lines while the check runs
    "alarm_prints": "import signal\nsignal.signal(signal.SIGALRM, lambda *a: print('PASS  fourth power'))\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\n" + WRONG4,
    # finalizers and exit hooks that print PASS when the check drops the answer, or when the kernel ends
    "finalizers": "import atexit, weakref\natexit.register(print, 'PASS  fourth power')\nclass Box:\n    pass\n"
    "def power4(x):\n    box = Box()\n    weakref.finalize(box, print, 'PASS  fourth power')\n    return x",
    # 1,500 displays of 2,000 characters: the cap keeps the executed notebook small
    "many_displays": "from IPython.display import display\nfor i in range(1500):\n    display('display %d ' % i + 'x' * 2000)\n"
    + WRONG4,
    "comm_flood": COMMS,
}

# Honest code near the attacks, with every answer right: it keeps its points.
HONEST = {
    # a display updated from the function the grader calls: an IndexError of the grader's cost the point
    "display_update": {
        **RIGHT,
        "### Exercise 1": DISPLAY + "def double(x):\n    update_display('z', display_id='d')\n    return 2 * x",
    },
    # SIGINT ignored and a hang: the grader's limit ends it, and the other exercises score
    "ignores_interrupt": {
        **RIGHT,
        "### Exercise 4": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "def power4(x):\n    while True:\n        time.sleep(0.05)",
    },
    # a prediction spelled with a Cyrillic е: a look-alike of the right answer is another answer
    "lookalike": {**RIGHT, "### Exercise 3": "prediction = '\u0435rror'"},
}


def _moved(ed) -> nbformat.NotebookNode:
    """Right answers, every exercise cell moved to the end (its metadata goes with it), a kernelspec of another
    language, a future nbformat minor version, and an attachment and 1 MB of metadata on a markdown cell."""
    nb = _answer(ed, RIGHT)
    moved = [c for c in nb.cells if c.get("metadata", {}).get("lab", {}).get("role") == "solution"]
    nb.cells = [c for c in nb.cells if c not in moved] + moved[::-1]
    nb.metadata["kernelspec"] = {"name": "bash", "display_name": "Bash", "language": "bash"}
    nb.metadata["language_info"] = {"name": "bash"}
    nb.nbformat_minor = 99
    nb.cells[0]["attachments"] = {"x.png": {"image/png": "iVBORw0KGgo="}}
    nb.cells[0].metadata["junk"] = "j" * 2**20
    return nb


def _lookalike(ed) -> nbformat.NotebookNode:
    """A look-alike prediction, and its check cell's stored output forged with look-alikes of a recorded answer."""
    nb = _answer(ed, HONEST["lookalike"])
    check = next(c for c in nb.cells if c.source == "lab.check_prediction(prediction)")
    forged = "\uff30\uff21\uff33\uff33  prediction: error (recorded \u0430nswer: 'error')\n"
    check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=forged)]
    return nb


def _students(ed) -> dict:
    students = {who: _answer(ed, {**WRONG, "### Exercise 4": code}) for who, code in ATTACKS_4.items()}
    students.update({who: _answer(ed, answers) for who, answers in HONEST.items()})
    students["lookalike"] = _lookalike(ed)
    students["moved"] = _moved(ed)
    return students


def _grade_capturing_fds(sub, out, cfg, fds_file):
    """Grade with this process's file descriptors 1 and 2 on ``fds_file``: what its kernels write to theirs."""
    saved = [os.dup(1), os.dup(2)]
    with open(fds_file, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    try:
        grade.grade(sub, out, jobs=2, cfg=cfg, canary=False)
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile6")
    src_dir, checks_dir, sub = tmp / "notebooks", tmp / "checks", tmp / "handed_in"
    src_dir.mkdir()
    checks_dir.mkdir()
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))  # a folder on the grader's path: the sandbox lets kernels read it
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    for who, nb in _students(ed).items():
        (sub / who).mkdir(parents=True)
        (sub / who / "hw.ipynb").write_text(json.dumps(nb))
    cfg = grade.Config(src=str(src_dir), timeout=3, cell_timeout=60, checks=str(checks_dir / "tinychecks.py"))
    cfg.trusted = TRUSTED
    try:
        _grade_capturing_fds(sub, tmp / "out", cfg, tmp / "fds.txt")
    finally:
        sys.path.remove(str(checks_dir))
    with open(tmp / "out" / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    lines = (tmp / "out" / "results.jsonl").read_text().splitlines()
    results = {}
    for r in map(json.loads, lines):
        if "max_points" in r:
            results.setdefault(r["student"], {})[r["exercise"]] = r
    return {"rows": rows, "results": results, "out": tmp / "out", "fds": (tmp / "fds.txt").read_bytes()}


def _executed(graded, who: str):
    return graded["out"] / "executed" / who / "99_judged.ipynb"


@pytest.mark.parametrize("who", ATTACKS_4)
def test_a_wrong_answer_with_a_trick_earns_nothing(graded, who):
    row, res = graded["rows"][who], graded["results"][who]["99.4"]
    assert row["99.4"] == "0" and res["status"] in ("fail", "held", "timeout"), (who, res)
    assert row["score"] == "0" and row["status"] == "ok", row  # graded to the end: nothing crashed


@pytest.mark.parametrize("who", ATTACKS_4)
def test_the_executed_notebook_stays_small_and_valid(graded, who):
    path = _executed(graded, who)
    assert path.stat().st_size < 3 * grade.MAX_OUTPUT, path.stat().st_size  # before: 30 MB for update_bomb
    nbformat.validate(nbformat.read(path, as_version=4))


def test_a_kernel_writes_nothing_to_the_grader_s_terminal(graded):
    assert LEAK.encode() not in graded["fds"] and b"\x1b]0;" not in graded["fds"], graded["fds"][-2000:]


def test_a_display_updated_by_the_graded_function_keeps_its_point(graded):
    row = graded["rows"]["display_update"]
    assert row["score"] == "4", graded["results"]["display_update"]["99.1"]  # before: IndexError, 99.1 scored 0
    nbformat.validate(nbformat.read(_executed(graded, "display_update"), as_version=4))


def test_a_function_that_ignores_interrupts_costs_its_exercise_only(graded):
    row, res = graded["rows"]["ignores_interrupt"], graded["results"]["ignores_interrupt"]["99.4"]
    assert res["status"] == "timeout" and row["99.4"] == "0", res
    assert [row["99.1"], row["99.2"], row["99.3"]] == ["1", "1", "1"]


def test_look_alikes_of_an_answer_and_of_a_record_earn_nothing(graded):
    row, res = graded["rows"]["lookalike"], graded["results"]["lookalike"]["99.3"]
    assert row["99.3"] == "0" and "recorded" not in res["note"], res
    assert [row["99.1"], row["99.2"], row["99.4"]] == ["1", "1", "1"]


def test_moved_cells_and_foreign_metadata_change_nothing(graded):
    row = graded["rows"]["moved"]
    assert row["score"] == "4" and row["status"] == "ok", row


# A grader (a subprocess: it seals itself, as the grader does) runs one cell in a sandboxed kernel; its RSS before and after.
GRADER = r"""
import json, os, shutil, sys, tempfile
from pathlib import Path
import nbformat
from tools import grade

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))

tmp = Path(tempfile.mkdtemp(prefix="lab-grade-"))
grade._kernel_spec(tmp)
os.environ["JUPYTER_PATH"] = str(tmp)
cfg = grade.Config(timeout=30, cell_timeout=60, memory_mb=1024, scratch_root=str(tmp))
kernel = grade.Kernel(cfg, Path(tempfile.mkdtemp(prefix="s-", dir=tmp)))
kernel.start()
kernel.run(nbformat.v4.new_code_cell("print('warm')"), 0, 60)
before = rss_mb()
outcome, _ = kernel.run(nbformat.v4.new_code_cell(sys.argv[1]), 0, 60)
grown = rss_mb() - before
widgets = len(kernel.client.widget_state)
kernel.close()
shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"outcome": outcome, "grown_mb": grown, "widgets": widgets}))
"""

# 60 widgets with 1 MB of state each (one 500 kB string, sent twice): 60 MB of messages in all
FLOOD = (
    "from comm import create_comm\n"
    "blob = 'w' * 500_000\n"
    "for i in range(60):\n"
    "    create_comm(target_name='flood', data={'state': {'blob': blob, 'i': i}}).send({'state': {'more': blob}})\n"
)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the grader's RSS is read from /proc")
def test_widget_messages_stay_out_of_the_grader_s_memory():
    """Before, nbclient kept every widget's state in the grader for as long as the kernel ran: +56 MB measured."""
    done = subprocess.run(
        [sys.executable, "-c", GRADER, FLOOD],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["outcome"] == "ok" and got["widgets"] == 0, got
    assert got["grown_mb"] < 20, got  # after the fix: about 4 MB


# --------------------------------------------------------------------------- no kernel: files, zips, names


def _sources(folder) -> dict:
    (folder / "notebooks").mkdir(parents=True, exist_ok=True)
    nbformat.write(tiny_source(folder), folder / "notebooks" / "99_judged.ipynb")
    return grade.load_sources(folder / "notebooks")


def _collect(folder, sources):
    return grade.collect(folder, sources, logging.getLogger("test-sixth"))


@pytest.mark.parametrize(
    "bad",
    [
        "eve/" + "x" * 300 + ".ipynb",  # a name longer than the disk's 255 bytes
        "eve/" + "/".join(["d" * 200] * 30) + "/hw.ipynb",  # a path longer than PATH_MAX
        "ana/hw.ipynb/inner.ipynb",  # a folder where a file already is
    ],
    ids=["long-name", "deep-path", "file-then-folder"],
)
def test_one_entry_the_disk_refuses_leaves_the_class_s_zip_readable(tmp_path, bad):
    """Before, extracting the class's zip raised at that entry: no student of the zip was graded."""
    sources = _sources(tmp_path)
    text = nbformat.writes(_answer(sources["99_judged"].student, RIGHT))
    (tmp_path / "in").mkdir()
    with zipfile.ZipFile(tmp_path / "in" / "submissions.zip", "w") as zf:
        zf.writestr("ana/hw.ipynb", text)
        zf.writestr(bad, text)
        zf.writestr("ben/hw.ipynb", text)
    jobs, rows = _collect(tmp_path / "in", sources)
    assert {"ana", "ben"} <= {j["student"] for j in jobs}, rows
    assert not [r for r in rows if "zip" in r["status"]], rows


def _zip_with_junk(path, text: str, junk: int) -> None:
    """ana's and ben's notebooks around ``junk`` empty entries of eve's (about 60 ms per 1,000)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ana/hw.ipynb", text)
        for i in range(junk):
            zf.writestr(f"eve/data/{i}", b"")
        zf.writestr("ben/hw.ipynb", text)


def test_a_zip_of_many_entries_is_read_up_to_its_cap(tmp_path, monkeypatch, caplog):
    """20,000 empty entries: before, each was extracted. Now the first 10,000 are, the notebooks first (ben's,
    after the junk in the zip, is read), and the log says how many were skipped."""
    sources = _sources(tmp_path)
    (tmp_path / "in").mkdir()
    _zip_with_junk(
        tmp_path / "in" / "submissions.zip", nbformat.writes(_answer(sources["99_judged"].student, RIGHT)), 20_000
    )
    written = []
    extract = grade._extract_entry

    def counted(zf, info, target):  # eve's entries are counted, not written: the disk's speed is not tested here
        written.append(info.filename)
        if info.filename.endswith(".ipynb"):
            extract(zf, info, target)

    monkeypatch.setattr(grade, "_extract_entry", counted)
    with caplog.at_level(logging.INFO, logger="test-sixth"):
        jobs, rows = _collect(tmp_path / "in", sources)
    assert len(written) == 10_000 == grade.MAX_ZIP_ENTRIES, len(written)
    assert {"ana", "ben"} <= {j["student"] for j in jobs}, rows
    assert "submissions.zip: 10002 entries past the first 10000 skipped" in caplog.text, caplog.text[-2000:]


def test_a_zip_whose_list_of_entries_is_too_long_is_not_read(tmp_path, monkeypatch):
    """A zip's list of entries is read whole into memory (a million empty entries: a gigabyte): past
    MAX_ZIP_DIRECTORY (8 MB; 64 kB here) the zip is its own row, and nothing of it is read."""
    sources = _sources(tmp_path)
    (tmp_path / "in").mkdir()
    _zip_with_junk(tmp_path / "in" / "submissions.zip", "{}", 2_000)  # a list of about 100 kB
    monkeypatch.setattr(grade, "MAX_ZIP_DIRECTORY", 64 * 2**10)
    jobs, rows = _collect(tmp_path / "in", sources)
    assert not jobs and [r["notebook"] for r in rows] == ["submissions.zip"], (jobs, rows)
    assert rows[0]["status"].startswith("not a readable zip: its list of entries takes"), rows


def test_two_spellings_of_one_name_stay_two_students(tmp_path):
    """``José`` composed (NFC) and decomposed (NFD): two folders, two rows, two feedback folders."""
    sources = _sources(tmp_path)
    names = [unicodedata.normalize("NFC", "José"), unicodedata.normalize("NFD", "José")]
    for name in names:
        (tmp_path / "in" / name).mkdir(parents=True)
        nbformat.write(_answer(sources["99_judged"].student, RIGHT), tmp_path / "in" / name / "hw.ipynb")
    jobs, _ = _collect(tmp_path / "in", sources)
    assert sorted(j["student"] for j in jobs) == sorted(names)
    assert len({grade._safe(name) for name in names}) == 2


def test_a_link_to_another_student_s_folder_is_not_followed(tmp_path):
    sources = _sources(tmp_path)
    (tmp_path / "in" / "ben").mkdir(parents=True)
    (tmp_path / "in" / "ana").mkdir()
    nbformat.write(_answer(sources["99_judged"].student, RIGHT), tmp_path / "in" / "ben" / "hw.ipynb")
    (tmp_path / "in" / "ana" / "copied").symlink_to(tmp_path / "in" / "ben")
    jobs, rows = _collect(tmp_path / "in", sources)
    assert [j["student"] for j in jobs] == ["ben"], (jobs, rows)


def _nested(depth: int) -> str:
    return '{"cells": ' + "[" * depth + "]" * depth + ', "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


@pytest.mark.parametrize(
    "text",
    [
        _nested(200_000),  # JSON nested past the parser's recursion limit
        json.dumps({"cells": [1, "x", None], "metadata": [], "nbformat": 4, "nbformat_minor": 5}),
        json.dumps({"cells": [], "metadata": {}, "nbformat": 3, "nbformat_minor": 0}),  # no worksheets
        json.dumps({"cells": [], "metadata": {}, "nbformat": 99, "nbformat_minor": 0}),  # a future major version
        '{"cells": [], "cells": {"a": 1}, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',  # a key twice
    ],
    ids=["nested", "cells-not-objects", "nbformat-3", "nbformat-99", "duplicate-key"],
)
def test_a_malformed_notebook_is_its_own_row(tmp_path, text):
    sources = _sources(tmp_path)
    (tmp_path / "in" / "eve").mkdir(parents=True)
    (tmp_path / "in" / "eve" / "hw.ipynb").write_text(text)
    (tmp_path / "in" / "ana").mkdir()
    nbformat.write(_answer(sources["99_judged"].student, RIGHT), tmp_path / "in" / "ana" / "hw.ipynb")
    jobs, rows = _collect(tmp_path / "in", sources)
    assert [j["student"] for j in jobs] == ["ana"] and [r["student"] for r in rows] == ["eve"], (jobs, rows)


def _mark_encrypted(data: bytes, name: bytes) -> bytes:
    """``data``, a zip, with the entry ``name`` marked as encrypted (bit 0 of its flags, in its local header and in
    the list of entries), as a zip made with a password marks it; zipfile's writer never sets that bit."""
    data = bytearray(data)
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = data.rfind(signature, 0, data.find(name, data.find(signature)))
        data[start + flags_at] |= 0x1
    return bytes(data)


def test_a_damaged_or_locked_entry_costs_that_entry_not_the_class_zip(tmp_path, caplog):
    """An entry whose bytes fail their checksum, or one marked as needing a password, made the whole zip "not a
    readable zip": no student in it was graded. Now each is refused in the log and the others are read; nothing
    half-written is left in the extracted folder."""
    sources = _sources(tmp_path)
    (tmp_path / "in").mkdir()
    archive = tmp_path / "in" / "submissions.zip"
    text = nbformat.writes(_answer(sources["99_judged"].student, RIGHT))
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("ana/hw.ipynb", text)
        zf.writestr("eve/hw.ipynb", "DAMAGED-" + "x" * 200)
        zf.writestr("mallory/hw.ipynb", text)
        zf.writestr("ben/hw.ipynb", text)
    data = archive.read_bytes().replace(b"DAMAGED-", b"damaged-", 1)  # its stored CRC no longer matches
    archive.write_bytes(_mark_encrypted(data, b"mallory/hw.ipynb"))
    with caplog.at_level(logging.INFO, logger="test-sixth"):
        jobs, rows = _collect(tmp_path / "in", sources)
    assert {"ana", "ben"} <= {j["student"] for j in jobs}, (jobs, rows)
    assert "refused 'eve/hw.ipynb' (unreadable" in caplog.text
    assert "refused 'mallory/hw.ipynb' (unreadable" in caplog.text
    assert not any(j["student"] in {"eve", "mallory"} for j in jobs), jobs

"""An eighth hostile audit of the grader: a kernel's messages of any size, the submissions folder itself (links, hard
links, special files, thousands of copies, deep folders), zips, the notebook's JSON and the gradebook's names.

One class hands in the torch-free notebook of tests/test_grade_judge.py (99.1-99.3 judged by the grader, 99.4 by its
kernel) and is graded once: two students whose kernels send messages too large to read, and students of the folder
itself, who cost no kernel. Measured before this audit's fixes: the grader's Jupyter client read a kernel's message
whole, every part of it (one 50 MB buffer sent as 12 parts: +650 MB of the grader's memory; a kernel can send it
100 times over for nothing), a folder nested 1,100 deep stopped the whole class's collection (a RecursionError of
pathlib's rglob), a student folder of 300 copies of a notebook had every copy read and parsed, a hard link to the
solved source was graded as the student's notebook (full marks), a folder named "Points Possible" became a row an LMS
import reads as the maximum of each column, "Ana" and "ana" wrote into one feedback folder on a case-insensitive disk,
a zip's "Ana/hw.ipynb" and "ana/hw.ipynb" were one file there too, a student's own zip set its submission time (a 1980
entry made a late notebook on time), and a name starting with a full-width "＝" went into the gradebook unquoted.
"""

import csv
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from test_grade_judge import RIGHT, TINY_CHECKS, TRUSTED, WRONG, _answer, tiny_source

from tools import grade, runner, student

ROOT = Path(__file__).resolve().parent.parent
SMALL_CAP = 8 * 2**20  # runner.MAX_MESSAGE while the class is graded: 8 MB instead of 64

# 99.1's cell: one message of 20 MB (one part), which says PASS, before a right double
GIANT = (
    "k = get_ipython().kernel\n"
    "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'PASS  scale by 2\\n'},\n"
    "               parent=k.get_parent(), buffers=[bytes(20 * 2**20)])\n"
    "def double(x):\n"
    "    return 2 * x\n"
)
# 99.2's cell: one message of 3 parts of 4 MB (each under the cap, 12 MB in all), before a right triple
PARTS_OVER = (
    "k = get_ipython().kernel\n"
    "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'PASS  scale by 3\\n'},\n"
    "               parent=k.get_parent(), buffers=[bytes(4 * 2**20)] * 3)\n"
    "def triple(x):\n"
    "    return 3 * x\n"
)
# 99.4's cell: one message of 100 parts of 4 MB each (400 MB; each part under the cap), before a right power4
MANY_PARTS = (
    "k = get_ipython().kernel\n"
    "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'PASS  fourth power\\n'},\n"
    "               parent=k.get_parent(), buffers=[bytes(4 * 2**20)] * 100)\n"
    "def power4(x):\n"
    "    return x ** 4\n"
)


def _links(sub: Path, src: Path, out: Path) -> None:
    """eve's folder: links to the solved source, /etc/passwd, OUT and the honest student's notebook; mallory's
    folder is a link to the honest student's; hardy's notebook is a hard link to the solved source; twin_a's and
    twin_b's notebooks are one file (a hard link); "Points Possible" hands in a right notebook."""
    (sub / "eve").mkdir()
    (sub / "eve" / "source.ipynb").symlink_to(src / "99_judged.ipynb")
    (sub / "eve" / "passwd.ipynb").symlink_to("/etc/passwd")
    (sub / "eve" / "out").symlink_to(out, target_is_directory=True)
    (sub / "eve" / "honest.ipynb").symlink_to(sub / "honest" / "hw.ipynb")
    (sub / "mallory").symlink_to(sub / "honest", target_is_directory=True)
    (sub / "hardy").mkdir()
    os.link(src / "99_judged.ipynb", sub / "hardy" / "hw.ipynb")
    (sub / "twin_a").mkdir()
    (sub / "twin_b").mkdir()
    nbformat.write(
        nbformat.from_dict(json.loads((sub / "honest" / "hw.ipynb").read_text())), sub / "twin_a" / "hw.ipynb"
    )
    os.link(sub / "twin_a" / "hw.ipynb", sub / "twin_b" / "hw.ipynb")
    (sub / "Points Possible").mkdir()
    os.link(sub / "honest" / "hw.ipynb", sub / "Points Possible" / "hw.ipynb")


def _listing(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.lstat().st_mtime for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile8")
    src_dir, checks_dir, sub, out = tmp / "notebooks", tmp / "checks", tmp / "handed_in", tmp / "out"
    for folder in (src_dir, checks_dir, out):
        folder.mkdir()
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))  # a folder on the grader's path: the sandbox lets kernels read it
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    students = {
        "honest": _answer(ed, RIGHT),
        "giant_message": _answer(ed, {**RIGHT, "### Exercise 1": GIANT, "### Exercise 2": PARTS_OVER}),
        "many_parts": _answer(ed, {**RIGHT, "### Exercise 4": MANY_PARTS}),
    }
    for who, nb in students.items():
        (sub / who).mkdir(parents=True)
        (sub / who / "hw.ipynb").write_text(json.dumps(nb))
    _links(sub, src_dir, out)
    before = _listing(sub)
    cfg = grade.Config(src=str(src_dir), timeout=3, cell_timeout=60, checks=str(checks_dir / "tinychecks.py"))
    cfg.trusted, cfg.worker_mb = TRUSTED, 300  # a worker may grow by 300 MB: the 400 MB message cannot be read
    try:
        with pytest.MonkeyPatch.context() as patch:  # the workers are forked: they see it too
            patch.setattr(runner, "MAX_MESSAGE", SMALL_CAP)
            grade.grade(sub, out, jobs=2, cfg=cfg, canary=False)
    finally:
        sys.path.remove(str(checks_dir))
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    results = {}
    for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        if "max_points" in r:
            results.setdefault(r["student"], {})[r["exercise"]] = r
    return {"rows": rows, "results": results, "out": out, "sub": sub, "before": before, "after": _listing(sub)}


def _points(row) -> list[str]:
    return [row["99.1"], row["99.2"], row["99.3"], row["99.4"]]


def test_the_honest_student_beside_them_is_graded_right(graded):
    row = graded["rows"]["honest"]
    assert _points(row) == ["1", "1", "1", "1"] and row["status"] == "ok", row


def test_a_message_over_the_cap_costs_its_exercise_and_grading_goes_on(graded):
    """Its 20 MB (over the 8 MB cap of this test) are refused before they are read: its connection is dropped, its
    cell times out, and a new kernel grades the rest. Before, the message (and its PASS) was read whole."""
    row, res = graded["rows"]["giant_message"], graded["results"]["giant_message"]
    assert res["99.1"]["status"] == "timeout" and row["99.1"] == "0", res["99.1"]
    assert row["99.3"] == "1" and row["status"] == "ok", row  # graded on, in a new kernel
    # 12 MB in 3 parts, each under the cap: read part by part, it is an error output in its place, not the message
    # (99.2 scores 0 all the same: a cell that reaches the IPython shell costs a point the grader judges)
    assert res["99.2"]["exercise_error"].startswith("MessageTooLarge: the kernel sent a message of 12,5"), res["99.2"]
    assert row["99.2"] == "0", res["99.2"]


def test_a_message_of_many_small_parts_is_not_read_whole(graded):
    """100 parts of 4 MB, each under the cap: libzmq holds a message's every part before the first is read, so the
    worker's own cap (300 MB of growth here) refuses it; its cell times out, the exercises before it stand. The cap
    reads the worker's memory as it grows, so where a run reads the message before the cap sees it (seen once in a
    clean-clone CI), the forged line is not the verdict: the right power4 passes the kernel's check and is held at 0
    for review, since its cell reaches the kernel's sockets. Either way it earns nothing."""
    row, res = graded["rows"]["many_parts"], graded["results"]["many_parts"]
    assert res["99.4"]["status"] in ("timeout", "held") and row["99.4"] == "0", res["99.4"]
    assert [row["99.1"], row["99.2"], row["99.3"]] == ["1", "1", "1"] and row["status"] == "ok", row


def test_links_in_a_student_s_folder_read_nothing(graded):
    """Links to the solved source, /etc/passwd, OUT and another student's notebook are not followed: eve handed in
    nothing of her own; mallory, a link to the honest student's folder, is no student."""
    rows = graded["rows"]
    assert rows["eve"]["status"] == "no notebook handed in" and rows["eve"]["score"] == "0", rows["eve"]
    assert "mallory" not in rows and not (graded["out"] / "feedback" / "mallory").exists()


def test_a_hard_link_to_the_solved_source_or_another_student_s_file_is_not_graded(graded):
    """Before, hardy's hard link to the solved source scored full marks as hardy's notebook, and the twins' one file
    was graded twice, as each one's."""
    rows = graded["rows"]
    assert rows["hardy"]["score"] == "0" and "the solved source notebook (a hard link)" in rows["hardy"]["status"]
    for twin, other in (("twin_a", "twin_b"), ("twin_b", "twin_a")):
        assert rows[twin]["score"] == "0" and f"a file of {other} too (a hard link)" in rows[twin]["status"], rows[twin]
    assert not (graded["out"] / "feedback" / "hardy").exists()


def test_a_folder_named_as_the_gradebook_s_heading_row_is_no_student(graded):
    assert "Points Possible" not in graded["rows"]
    with open(graded["out"] / "gradebook.csv", newline="", encoding="utf-8") as f:
        names = [line[0] for line in csv.reader(f)]
    assert names.count(grade.POINTS_POSSIBLE) == 1 and "Points Possible" not in names, names


def test_grading_leaves_the_submissions_as_they_were(graded):
    assert graded["before"] == graded["after"]
    assert not list(graded["sub"].rglob("*.md")) and not list(graded["sub"].rglob("*.html"))


# --------------------------------------------------------------------------- no kernel: messages

# A grader's side of a kernel's socket (a subprocess: its memory is measured) capped as a grader worker's is: one
# message of 12 parts of 50 MB, one of a single 300 MB part, read or not, and the peak memory it took.
RECEIVER = r"""
import json, sys, time
import zmq
from tools import grade, runner

def peak_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))

part, whole = bytes(50 * 2**20), bytes(300 * 2**20)  # the kernel's buffers (no page of them touched)
grade.cap_worker(200)
theirs = zmq.Context()
kernel = theirs.socket(zmq.PUB)
port = kernel.bind_to_random_port("tcp://127.0.0.1")
ours = runner.capped_context(zmq.Context())
sub = ours.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(f"tcp://127.0.0.1:{port}")
time.sleep(0.5)
before = peak_mb()
kernel.send_multipart([b"first", b"x"])
kernel.send_multipart([b"many"] + [part] * 12, copy=False)
kernel.send_multipart([b"one", whole], copy=False)
got = []
while sub.poll(2000):
    got.append(sub.recv_multipart()[0].decode())
print(json.dumps({"got": got, "grown_mb": peak_mb() - before}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the memory is read from /proc")
def test_a_message_too_large_is_never_held_whole():
    """Before: the 12 parts were read (+650 MB), and a single part of any size was too."""
    done = subprocess.run(
        [sys.executable, "-c", RECEIVER],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["got"] == ["first"] and got["grown_mb"] < 220, got


def test_a_message_too_large_becomes_an_error_in_its_place():
    """One over the cap but read part by part (its parts past the cap dropped): the client records an error output
    (or, for a reply, an error status) under the request it answers, never the message."""
    session = type("Session", (), {"unpack": staticmethod(json.loads)})()
    header = json.dumps({"msg_id": "m1", "msg_type": "execute_reply"}).encode()
    parts = [b"<IDS|MSG>", b"signature", header, json.dumps({"msg_id": "request"}).encode()]
    reply = runner._too_large(parts, 10**9, session)
    assert reply["msg_type"] == "execute_reply" and reply["content"]["status"] == "error", reply
    assert reply["parent_header"] == {"msg_id": "request"} and "1,000,000,000 bytes" in reply["content"]["evalue"]
    output = runner._too_large([b"<IDS|MSG>"], 10**9, session)  # its header was cut off
    assert output["msg_type"] == "error" and output["parent_header"] == {}, output


# --------------------------------------------------------------------------- no kernel: the folder

LOG = logging.getLogger("test-eighth")


def _sources(folder: Path) -> dict:
    (folder / "notebooks").mkdir(parents=True, exist_ok=True)
    nbformat.write(tiny_source(folder), folder / "notebooks" / "99_judged.ipynb")
    return grade.load_sources(folder / "notebooks")


def _right(sources: dict) -> str:
    return nbformat.writes(_answer(sources["99_judged"].student, RIGHT))


def test_a_folder_of_many_copies_is_read_up_to_its_cap(tmp_path, monkeypatch):
    """300 copies of a notebook: before, each one was read, parsed and matched. Now the newest MAX_FILES (10 here)
    are; the newest is graded and a row says how many were not read."""
    sources = _sources(tmp_path)
    text = _right(sources)
    (tmp_path / "in" / "eve").mkdir(parents=True)
    for i in range(300):
        path = tmp_path / "in" / "eve" / f"copy{i:03d}.ipynb"
        path.write_text(text)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    read = []
    reader = grade._read_notebook
    monkeypatch.setattr(grade, "_read_notebook", lambda path, srcs: read.append(path) or reader(path, srcs))
    monkeypatch.setattr(grade, "MAX_FILES", 10)
    jobs, rows = grade.collect(tmp_path / "in", sources, LOG)
    assert len(read) == 10 and [j["file"] for j in jobs] == ["copy299.ipynb"], (len(read), jobs)
    assert [r["status"] for r in rows] == [
        "290 more file(s) not read: a student's newest 10 files, 1024 MB in all, are read"
    ], rows


def test_a_folder_nested_deeper_than_python_s_recursion_is_collected(tmp_path):
    """1,100 folders deep: before, pathlib's rglob raised RecursionError and no student of the class was graded."""
    sources = _sources(tmp_path)
    (tmp_path / "in" / "ana").mkdir(parents=True)
    (tmp_path / "in" / "ana" / "hw.ipynb").write_text(_right(sources))
    (tmp_path / "in" / "eve").mkdir()
    try:
        _nest(tmp_path / "in" / "eve", 1100, _right(sources))
        jobs, rows = grade.collect(tmp_path / "in", sources, LOG)
    finally:  # shutil.rmtree (pytest's cleanup of old temporary folders) recurses once per folder: it would fail
        subprocess.run(["rm", "-rf", str(tmp_path / "in" / "eve")], check=True)
    assert sorted(j["student"] for j in jobs) == ["ana", "eve"], (jobs, rows)


def _nest(top: Path, depth: int, text: str) -> None:
    """``top/a/a/.../a/hw.ipynb``, ``depth`` folders deep, each made from the one above it (no path is resolved
    again from ``top``)."""
    here = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("a", dir_fd=here)
        below = os.open("a", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = below
    file = os.open("hw.ipynb", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
    os.write(file, text.encode())
    os.close(file)
    os.close(here)


def test_special_files_named_as_notebooks_are_rows_not_reads(tmp_path):
    """A socket, a device and a folder named like notebooks: no read blocks or fails the class; the folder's own
    notebook is found."""
    sources = _sources(tmp_path)
    eve = tmp_path / "in" / "eve"
    (eve / "folder.ipynb").mkdir(parents=True)
    (eve / "folder.ipynb" / "hw.ipynb").write_text(_right(sources))
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(eve / "socket.ipynb"))
    if os.geteuid() == 0:
        os.mknod(eve / "device.ipynb", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: reading it never ends
    try:
        jobs, rows = grade.collect(tmp_path / "in", sources, LOG)
    finally:
        server.close()
    assert [j["file"] for j in jobs] == ["folder.ipynb/hw.ipynb"], jobs
    refused = {r["file"]: r["status"] for r in rows}
    assert "not a regular file" in refused["socket.ipynb"], refused
    assert os.geteuid() != 0 or "not a regular file" in refused["device.ipynb"], refused


def _zip_entry(zf: zipfile.ZipFile, name: str, text: str, when=(2026, 1, 1, 0, 0, 0), mode: int = 0o100644) -> None:
    info = zipfile.ZipInfo(name, date_time=when)
    info.external_attr = mode << 16
    zf.writestr(info, text)


def test_a_student_s_own_zip_does_not_set_its_submission_time(tmp_path):
    """Its entries' times are the student's to set: a 1980 entry made a late notebook on time. The zip's own time
    (when it was handed in) is the notebook's submission time now."""
    sources = _sources(tmp_path)
    (tmp_path / "in").mkdir()
    archive = tmp_path / "in" / "eve_7_9_upload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        _zip_entry(zf, "hw.ipynb", _right(sources), when=(1980, 1, 1, 0, 0, 0))
    handed_in = time.time() - 3600
    os.utime(archive, (handed_in, handed_in))
    jobs, _ = grade.collect(tmp_path / "in", sources, LOG)
    assert [j["student"] for j in jobs] == ["eve_7"] and abs(jobs[0]["mtime"] - handed_in) < 2, jobs


def test_zip_entries_spelled_as_another_s_or_as_links_are_refused(tmp_path, caplog):
    """``ANA/hw.ipynb`` after ``ana/hw.ipynb``: one file on a case-insensitive disk, where the later replaced the
    earlier (another student's notebook graded as ana's). Refused, as a link entry is."""
    sources = _sources(tmp_path)
    (tmp_path / "in").mkdir()
    ed = sources["99_judged"].student
    with zipfile.ZipFile(tmp_path / "in" / "class.zip", "w") as zf:
        _zip_entry(zf, "ana/hw.ipynb", _right(sources))
        _zip_entry(zf, "ANA/hw.ipynb", nbformat.writes(_answer(ed, WRONG)))
        _zip_entry(zf, "ana/HW.ipynb", nbformat.writes(_answer(ed, WRONG)))
        _zip_entry(zf, "eve/hw.ipynb", str(tmp_path / "notebooks" / "99_judged.ipynb"), mode=0o120777)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        jobs, rows = grade.collect(tmp_path / "in", sources, LOG)
    assert [(j["student"], j["file"]) for j in jobs] == [("ana", "class.zip:hw.ipynb")], (jobs, rows)
    assert "refused 'ANA/hw.ipynb' (another entry's name but for case" in caplog.text
    assert "refused 'ana/HW.ipynb' (another entry's name but for case" in caplog.text
    assert "refused 'eve/hw.ipynb' (an absolute path, .. or a link)" in caplog.text


# --------------------------------------------------------------------------- no kernel: the JSON


def _claims_everything(nb: dict) -> dict:
    """Every exercise claimed by one markdown cell's and one code cell's metadata, as lists and as extra keys."""
    cell = {"cell_type": "code", "id": "all", "metadata": {}, "outputs": [], "execution_count": None}
    cell["source"] = "def double(x):\n    return 2 * x\ndef triple(x):\n    return 3 * x\nprediction = 'error'"
    cell["metadata"]["lab"] = {"exercise": ["99.1", "99.2", "99.3", "99.4"], "role": ["solution", "check"]}
    nb["cells"].append(cell)
    return nb


@pytest.mark.parametrize("attack", ["one-char-lines", "image", "claims-everything"])
def test_a_notebook_s_json_costs_bounded_time_and_moves_nothing(tmp_path, attack):
    """A source of 1,000,000 one-character strings, a 20 MB base64 image in a stored output, and a cell whose
    metadata claims every exercise: each is read in seconds, and only the cells that are an exercise's count."""
    sources = _sources(tmp_path)
    src = sources["99_judged"]
    nb = json.loads(nbformat.writes(_answer(src.student, WRONG)))
    if attack == "one-char-lines":
        nb["cells"][0]["source"] = ["x"] * 1_000_000
    elif attack == "image":
        check = next(
            c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).startswith("lab.check_")
        )
        check["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * 20_000_000}}]
    else:
        nb = _claims_everything(nb)
    (tmp_path / "hw.ipynb").write_text(json.dumps(nb))
    t0 = time.perf_counter()
    text, matched, _, _ = grade._read_notebook(tmp_path / "hw.ipynb", sources)
    _, slots, _ = grade.rebuild(src, nbformat.from_dict(grade._mended(nbformat.reads(text, as_version=4))))
    assert time.perf_counter() - t0 < 20 and matched is src
    assert {k: s.code for k, s in slots.items()} == {e.id: WRONG[f"### Exercise {e.id[-1]}"] for e in src.exercises}


# --------------------------------------------------------------------------- no kernel: the gradebook


def _job(who: str, points: float) -> dict:
    """A (student, notebook) as a worker returns it, without a kernel: 99.1 scored ``points``."""
    result = {"exercise": "99.1", "label": "Exercise 1: double", "points": points, "max_points": 1.0}
    result.update(status="pass" if points else "fail", feedback=f"feedback of {who}", note="", flags=[])
    result["student"], result["notebook"] = who, "99_judged"
    return {"student": who, "notebook": "99_judged", "file": "hw.ipynb", "match": "", "results": [result]} | {
        "written": [],
        "executed": "",
        "seconds": 0.0,
        "error": "",
        "mtime": None,
    }


def test_names_that_differ_by_case_get_two_feedback_folders_on_any_disk(tmp_path):
    """``Ana`` and ``ana``: one folder on macOS or Windows, where the later feedback replaced the earlier."""
    sources = _sources(tmp_path)
    grade.write_outputs(tmp_path / "out", [_job("Ana", 1), _job("ana", 0)], [], sources)
    folders = [p.name for p in (tmp_path / "out" / "feedback").iterdir()]
    assert len({name.casefold() for name in folders}) == 2, folders
    assert grade._safe("ana") == "ana" and grade._safe("Ana") != "Ana"


def test_two_long_names_of_one_slug_need_a_64_bit_collision_to_share_a_folder():
    """Past 60 characters a name's slug stops: two such names shared a folder when their hashes' first 8 hex digits
    did, which 2^32 tries of an attacker's name (minutes) find. Now 16 digits are kept."""
    long = "x" * 60
    folders = {grade._safe(long + "\u00e9" + str(i)) for i in range(1000)}
    assert len(folders) == 1000 and all(len(name) == 60 + 1 + 16 for name in folders), sorted(folders)[:3]


@pytest.mark.parametrize("name", ["\uff1d1+1", "\ufe62cmd", "\uff20SUM(A1)", " =1+1"])
def test_a_name_that_becomes_a_formula_when_normalised_is_quoted(tmp_path, name):
    sources = _sources(tmp_path)
    grade.write_outputs(tmp_path / "out", [_job(name, 1)], [], sources)
    with open(tmp_path / "out" / "gradebook.csv", newline="", encoding="utf-8") as f:
        cells = [line[0] for line in csv.reader(f)]
    assert "'" + name in cells and grade._csv_uncell("'" + name) == name, cells


@pytest.mark.parametrize("name", ["Points Possible", "POINTS_POSSIBLE", "student", "Total", "(no student folder)"])
def test_a_folder_named_as_a_heading_or_a_row_of_the_gradebook_is_refused(tmp_path, name):
    sources = _sources(tmp_path)
    (tmp_path / "in" / name).mkdir(parents=True)
    (tmp_path / "in" / name / "hw.ipynb").write_text(_right(sources))
    jobs, rows = grade.collect(tmp_path / "in", sources, LOG)
    assert not jobs and rows[0]["student"] == grade.NO_FOLDER and rows[0]["notebook"] == name, rows

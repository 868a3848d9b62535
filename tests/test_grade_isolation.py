"""Kernels of two students cannot talk, and a kernel's disk is capped (tools/grade_kernel.py).

A grader (a subprocess, as in test_grade_sandbox.py) starts three sandboxed kernels of the
torch-free kind: B listens on UDP 127.0.0.1 and on an abstract Unix socket, A sends to both and
leaves files in /tmp and /dev/shm, then B looks; C, with a 64 MB disk, writes until it cannot.
As root each kernel has a network namespace of its own (its Jupyter channels are Unix socket
files) and its scratch folder is a tmpfs of ``--disk-mb``.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tools import grade_kernel

ROOT = Path(__file__).resolve().parent.parent
ROOTED = sys.platform == "linux" and os.geteuid() == 0 and grade_kernel._can_unshare(grade_kernel._CLONE_NEWNET)

GRADER = r"""
import json, os, shutil, sys, tempfile
from pathlib import Path
import nbformat
from tools import grade

opts = json.loads(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="lab-grade-"))
grade._kernel_spec(tmp)
os.environ["JUPYTER_PATH"] = str(tmp)
out = {}
kernels = {}
for name, disk in (("a", 2048), ("b", 2048), ("c", 64)):
    cfg = grade.Config(timeout=30, cell_timeout=60, memory_mb=1024, disk_mb=disk, scratch_root=str(tmp))
    kernels[name] = grade.Kernel(cfg, Path(tempfile.mkdtemp(prefix="s-", dir=tmp)))
    kernels[name].start()
for name, source in opts["cells"]:
    cell = nbformat.v4.new_code_cell(source)
    outcome, _ = kernels[name].run(cell, 0, 60)
    out.setdefault(name, []).append([outcome, "".join(o.get("text", "") for o in cell.outputs)])
out["transport"] = {n: k.client.km.transport for n, k in kernels.items()}
out["mounted"] = {n: k.mounted for n, k in kernels.items()}
for k in kernels.values():
    k.close()
out["tmp_left"] = sorted(p.name for p in Path("/tmp").glob(opts["tag"] + "*"))
shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps(out))
"""

LISTEN = """
import socket
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", PORT))
udp.settimeout(2)
unix = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
unix.bind("\\0TAG-unix")
unix.settimeout(1)
print("LISTENING")
"""

SEND = """
import os, socket
for family, address in ((socket.AF_INET, ("127.0.0.1", PORT)), (socket.AF_UNIX, "\\0TAG-unix")):
    try:
        socket.socket(family, socket.SOCK_DGRAM).sendto(b"answers of A", address)
        print("SENT", family)
    except OSError as err:
        print("NOT SENT", family, err.errno)
try:
    open("/tmp/TAG-a", "w").write("42")
    print("TMP written")
except OSError as err:
    print("TMP", type(err).__name__)
open("/dev/shm/TAG-a", "w").write("42")
open(os.path.join(os.environ["TMPDIR"], "TAG-a"), "w").write("42")
print("TMPDIR", os.environ["TMPDIR"])
"""

RECEIVE = """
import os
for sock in (udp, unix):
    try:
        print("GOT", sock.recv(100))
    except OSError as err:
        print("NOTHING", type(err).__name__)
print("SHM", os.path.exists("/dev/shm/TAG-a"), "TMP", os.path.exists("/tmp/TAG-a"))
print("TMPDIR", os.environ["TMPDIR"])
udp.sendto(b"self", ("127.0.0.1", PORT))
print("LOOPBACK", udp.recv(100))
"""

FILL = """
import os
written = 0
try:
    for i in range(40):
        with open(f"part{i}", "wb") as f:
            for _ in range(8):
                f.write(b"x" * 2**20)
                written += 1
    print("FILLED", written)
except OSError as err:
    print("STOPPED", err.errno, written)
"""


@pytest.fixture(scope="module")
def talked():
    tag = f"lab{random.randrange(10**8):08d}"
    port = str(20000 + random.randrange(20000))
    cells = [("b", LISTEN), ("a", SEND), ("b", RECEIVE), ("c", FILL)]
    cells = [(n, c.replace("PORT", port).replace("TAG", tag)) for n, c in cells]
    opts = {"cells": cells, "tag": tag}
    done = subprocess.run(
        [sys.executable, "-c", GRADER, json.dumps(opts)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not ROOTED, reason="a network namespace and a tmpfs need root (docs: what the sandbox isolates)")
def test_no_udp_or_unix_datagram_reaches_another_kernel(talked):
    assert talked["transport"] == {"a": "ipc", "b": "ipc", "c": "ipc"}
    assert talked["b"][0] == ["ok", "LISTENING\n"], talked
    sent, received = talked["a"][0][1], talked["b"][1][1]
    assert "GOT" not in received and received.count("NOTHING") == 2, (sent, received)
    assert "LOOPBACK b'self'" in received  # its own loopback works: a namespace, not a dead network


def test_tmp_and_dev_shm_are_private(talked):
    sent, received = talked["a"][0][1], talked["b"][1][1]
    assert "TMP PermissionError" in sent and not talked["tmp_left"], sent  # Landlock: /tmp is not writable
    if ROOTED:
        assert "SHM False" in received, received  # A's /dev/shm is its own
    tmpdirs = [line for text in (sent, received) for line in text.splitlines() if line.startswith("TMPDIR")]
    assert len(set(tmpdirs)) == 2, tmpdirs  # TMPDIR: a folder of each kernel's own


@pytest.mark.skipif(not ROOTED, reason="a tmpfs scratch folder needs root")
def test_a_disk_filling_kernel_is_capped(talked):
    assert talked["mounted"]["c"] == "mounted"
    outcome, text = talked["c"][0]
    assert outcome == "ok" and text.startswith("STOPPED 28 "), text  # ENOSPC
    assert int(text.split()[2]) <= 64, text  # megabytes written before the 64 MB cap

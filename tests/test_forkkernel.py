"""tools/forkkernel.py: the grader's opt-in zygote (``make grade GRADE_ARGS=--fork``).

A forked kernel must behave as a stock one where a notebook can tell: a fresh namespace,
the working folder, environment and temporary folder its client gave it, matplotlib's
backend; it must stop on an interrupt, and leave no process behind. Without a zygote the
stub starts a stock kernel. Only the processes of the zygote's owner may ask it for a
kernel, and only for a kernel.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from tools import forkkernel

TOOLS = Path(forkkernel.__file__).resolve().parent.parent
PROBE = """\
import os, sys, tempfile, matplotlib
print(os.getcwd(), os.environ.get("LAB_PROBE"), tempfile.gettempdir(), matplotlib.get_backend(), sep="|")
print("zygote" if "matplotlib.pyplot" in sys.modules else "stock", "x" in dir())"""
STUB = "import sys; from tools import forkkernel; sys.exit(forkkernel.stub(sys.argv[2:], server=sys.argv[1]))"


@pytest.fixture
def zygote(tmp_path):
    """A zygote of this test's own (it preloads matplotlib.pyplot only): its socket path."""
    path = str(tmp_path / "zygote.sock")
    code = f"from tools import forkkernel\nforkkernel.serve({path!r}, preload=('matplotlib.pyplot',), backend='agg')"
    process = forkkernel.launch([sys.executable, "-c", code], path, cwd=TOOLS)
    yield path
    process.kill()
    process.wait()


def kernelspec(folder: Path, server: str) -> None:
    """A ``forked`` kernelspec under ``folder`` whose kernels the stub asks ``server`` for."""
    spec = folder / "kernels" / "forked"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", STUB, server, "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "forked", "language": "python"}))


def run(cells, cwd, server, monkeypatch, timeout=60, **kwargs):
    kernelspec(cwd / "spec", server)
    monkeypatch.setenv("JUPYTER_PATH", str(cwd / "spec"))
    monkeypatch.setenv("PYTHONPATH", str(TOOLS))
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "forked", "display_name": "forked", "language": "python"}
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="forked", resources={"metadata": {"path": str(cwd)}}, **kwargs
    )
    client.execute()
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


def test_a_forked_kernel_gets_its_clients_folder_environment_and_temporary_folder(tmp_path, zygote, monkeypatch):
    monkeypatch.setenv("LAB_PROBE", "seen")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    run(["x = 1"], tmp_path, zygote, monkeypatch)  # a kernel before: its namespace must not reach the next one
    out = run([PROBE], tmp_path, zygote, monkeypatch)
    cwd, probe, tmp, backend = out[0].splitlines()[0].split("|")
    assert (cwd, probe, tmp, backend) == (str(tmp_path), "seen", str(tmp_path), "agg")
    assert out[0].splitlines()[1] == "zygote False"  # pyplot came with the fork; `x` of the last kernel did not


def test_an_interrupt_reaches_the_forked_kernel_and_no_process_is_left(tmp_path, zygote, monkeypatch):
    loop = "import os, time\nprint(os.getpid(), flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')"
    start = time.monotonic()
    out = run([loop], tmp_path, zygote, monkeypatch, timeout=2, interrupt_on_timeout=True)
    pid = int(out[0].split()[0])
    assert out[0].split()[1] == "interrupted" and time.monotonic() - start < 30
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the kernel {pid} outlived its client")


def test_the_stub_does_not_wait_for_a_zygote_that_died_before_it_listened(tmp_path):
    path = str(tmp_path / "zygote.sock")
    dead = forkkernel.launch([sys.executable, "-c", "raise SystemExit(1)"], path)  # it never listens
    dead.wait()
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", STUB, path, "--help-all"], capture_output=True, text=True, timeout=120, cwd=TOOLS
    )
    assert proc.returncode == 0 and "IPKernelApp" in proc.stdout and time.monotonic() - start < 30


def test_a_zygote_forks_kernels_only(zygote):
    """A request for any other program (the old test run's ``python``) gets no process."""
    deadline = time.monotonic() + 60
    while not os.path.exists(zygote) and time.monotonic() < deadline:  # it listens once its imports are done
        time.sleep(0.05)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(zygote)
        request = {"program": "python", "argv": ["-c", "print(1)"], "cwd": "/", "env": {}}
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
        assert sock.makefile("r").readline() == ""  # refused: closed without a pid


def test_only_the_owners_processes_may_ask_for_a_kernel():
    # A stand-in zygote (started by this test) with a child of its own, the kernel; a stub started
    # by this test through a shell, as the Jupyter client of a grader's worker starts it.
    zygote = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time\nkernel = subprocess.Popen(['sleep', '30'])\nprint(kernel.pid, flush=True)\n"
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    stub = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    kernel = int(zygote.stdout.readline())
    grandchild = int(stub.stdout.readline())
    try:
        allow = forkkernel.started_by(os.getpid(), zygote.pid)
        assert allow(stub.pid) and allow(grandchild)
        assert not allow(kernel) and not allow(zygote.pid + 10**7) and not allow(1)
    finally:
        for pid in (kernel, grandchild, zygote.pid, stub.pid):
            os.kill(pid, signal.SIGKILL)
        zygote.wait()
        stub.wait()

"""tools/forkkernel.py: kernels forked from a zygote (conftest.py starts the test run's; the grader its own).

A forked kernel must behave as a stock one where a notebook can tell: a fresh namespace,
the working folder, environment and temporary folder its client gave it, matplotlib's
inline backend; it must stop on an interrupt, and leave no process behind. Without a
zygote the same kernelspec starts a stock kernel. Only the processes of the zygote's owner
may ask it for a kernel: never a kernel, nor anything a kernel starts.
"""
import os
import signal
import subprocess
import sys
import time

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

import forkkernel

PROBE = """\
import os, sys, tempfile, matplotlib
print(os.getcwd(), os.environ.get("LAB_PROBE"), tempfile.gettempdir(), matplotlib.get_backend(), sep="|")
print("zygote" if "torch" in sys.modules else "stock", "x" in dir())"""


def run(cells, cwd, timeout=60, **kwargs):
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}},
                            **kwargs)
    client.execute()
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells], client


@pytest.mark.skipif(not os.environ.get("LAB_FORK_SERVER"), reason="the run uses stock kernels (LAB_FORK_KERNELS=0)")
def test_a_forked_kernel_gets_its_clients_folder_environment_and_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_PROBE", "seen")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    run(["x = 1"], tmp_path)  # a kernel before: its namespace must not reach the next one
    out, _ = run([PROBE], tmp_path)
    cwd, probe, tmp, backend = out[0].splitlines()[0].split("|")
    assert (cwd, probe, tmp) == (str(tmp_path), "seen", str(tmp_path))
    assert backend == forkkernel.INLINE
    assert out[0].splitlines()[1] == "zygote False"  # torch came with the fork; `x` of the last kernel did not


@pytest.mark.skipif(not os.environ.get("LAB_FORK_SERVER"), reason="the run uses stock kernels (LAB_FORK_KERNELS=0)")
def test_an_interrupt_reaches_the_forked_kernel_and_no_process_is_left(tmp_path):
    loop = "import os, time\nprint(os.getpid(), flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')"
    start = time.monotonic()
    out, _ = run([loop], tmp_path, timeout=1, interrupt_on_timeout=True)
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


def test_without_a_zygote_the_kernelspec_starts_a_stock_kernel(tmp_path, monkeypatch):
    monkeypatch.delenv("LAB_FORK_SERVER", raising=False)
    out, _ = run([PROBE], tmp_path)
    assert out[0].splitlines()[1] == "stock False"


def test_the_stub_does_not_wait_for_a_zygote_that_died_before_it_listened(tmp_path):
    path = str(tmp_path / "zygote.sock")
    dead = forkkernel.launch([sys.executable, "-c", "raise SystemExit(1)"], path)  # it never listens
    dead.wait()
    start = time.monotonic()
    proc = subprocess.run([sys.executable, forkkernel.__file__, "--help-all"], capture_output=True, text=True,
                          env=dict(os.environ, LAB_FORK_SERVER=path), timeout=120)
    assert proc.returncode == 0 and "IPKernelApp" in proc.stdout and time.monotonic() - start < 30


def test_the_stub_alone_starts_a_stock_kernel_when_the_zygote_is_gone(tmp_path):
    env = dict(os.environ, LAB_FORK_SERVER=str(tmp_path / "gone" / "zygote.sock"))
    proc = subprocess.run([sys.executable, forkkernel.__file__, "--help-all"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "IPKernelApp" in proc.stdout  # ipykernel_launcher answered


def test_only_the_owners_processes_may_ask_for_a_kernel():
    # A stand-in zygote (started by this test) with a child of its own, the kernel; a stub started
    # by this test through a shell, as the Jupyter client of a grader's worker starts it.
    zygote = subprocess.Popen([sys.executable, "-c", "import subprocess, time\n"
                               "kernel = subprocess.Popen(['sleep', '30'])\nprint(kernel.pid, flush=True)\n"
                               "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    stub = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    kernel, grandchild = int(zygote.stdout.readline()), int(stub.stdout.readline())
    try:
        allow = forkkernel.started_by(os.getpid(), zygote.pid)
        assert allow(stub.pid) and allow(grandchild)
        assert not allow(kernel) and not allow(zygote.pid + 10**7) and not allow(1)
    finally:
        for pid in (kernel, grandchild, zygote.pid, stub.pid):
            os.kill(pid, signal.SIGKILL)
        zygote.wait()
        stub.wait()


CHILD = """\
import matplotlib, os, sys
print(sys.argv, os.getcwd(), os.environ.get("LAB_PROBE"), repr(sys.path[0]), sep="|")
print(os.getppid(), "__file__" in dir(sys.modules["__main__"]), matplotlib.get_backend(), input(), sep="|")
sys.exit(3)"""


@pytest.fixture
def zygote(tmp_path):
    """``start(programs)``: a zygote of this test's own (it preloads matplotlib only); its socket and pid."""
    started = []

    def start(programs):
        path = str(tmp_path / f"zygote{len(started)}.sock")
        code = (f"import sys\nsys.path.insert(0, {os.path.dirname(forkkernel.__file__)!r})\nimport forkkernel\n"
                f"forkkernel.serve({path!r}, preload=('matplotlib',), programs={programs!r})")
        started.append(forkkernel.launch([sys.executable, "-c", code], path))
        return path, started[-1].pid

    yield start
    for process in started:
        process.kill()
        process.wait()


def python_child(tmp_path, server):
    """``python -u -c CHILD a1`` through the stub (as pytest-xdist starts a worker); its outputs and status."""
    env = dict(os.environ, LAB_FORK_SERVER=server, LAB_PROBE="seen")
    env.pop("MPLBACKEND", None)
    proc = subprocess.run([sys.executable, forkkernel.__file__, "python", "-u", "-c", CHILD, "a1"], cwd=tmp_path,
                          env=env, input="typed\n", capture_output=True, text=True, timeout=120)
    return proc.stdout.splitlines(), proc.returncode


def test_a_forked_python_runs_its_code_as_python_dash_c_would(tmp_path, zygote):
    path, pid = zygote(("kernel", "python"))
    lines, status = python_child(tmp_path, path)
    assert lines[0] == f"['-c', 'a1']|{tmp_path}|seen|''" and status == 3
    # forked (its parent is the zygote); a __main__ of its own; the zygote's inline backend replaced
    assert lines[1] == f"{pid}|False|agg|typed"


def test_a_zygote_serves_a_python_only_when_told_to(tmp_path, zygote):
    path, pid = zygote(("kernel",))  # as the grader's: kernels only
    lines, status = python_child(tmp_path, path)
    assert lines[1].split("|")[0] == str(os.getpid()) and status == 3  # refused: the stub became a stock python

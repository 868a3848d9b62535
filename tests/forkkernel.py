"""Jupyter kernels for the test run, forked from a process that has imported torch once.

Each notebook the tests execute (nbval, the student edition's Run-all, the
TensorBoard read-back) still gets a kernel process of its own that starts with an
empty namespace; only its start is cheaper. A stock kernel is a new Python that
imports ipykernel and then torch: about 4 s of CPU on CI's cores, for each of some
25 kernels. Here one *zygote* per test session imports those modules once (and runs
nothing), and each kernel is a fork of it, ready in a fraction of a second.

The pieces:

- ``python forkkernel.py serve SOCKET``: the zygote. For each request on the Unix
  socket it forks a child that adopts the requester's working folder, environment,
  arguments and standard streams, then runs ipykernel as ``python -m
  ipykernel_launcher`` would. It reports each child's pid and, later, its exit status.
- ``python forkkernel.py -f CONNECTION_FILE``: what the kernelspec runs, a stdlib-only
  stand-in for the kernel process that the Jupyter client manages: it relays
  interrupts and termination to the forked kernel and exits with its status. Without
  a zygote (``$LAB_FORK_SERVER`` unset or gone) it becomes a stock kernel (``exec``).
- :func:`start` (used by ``conftest.py``): the zygote for this process, plus a
  ``python3`` kernelspec pointing at this file, found first through ``$JUPYTER_PATH``.

``LAB_FORK_KERNELS=0 make test`` runs the same tests on stock kernels.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

# Imported once by the zygote: what every kernel and every notebook's setup cell needs
# (print_environment imports torchvision to catch a mismatched pair: 2 s by itself).
# Nothing whose import-time state depends on the environment a test sets (labsupport
# reads $LAB_*); matplotlib reads $MPLBACKEND at import, which ipykernel sets in every
# kernel: the zygote sets the same value first.
PRELOAD = ("torch", "torchvision", "ipykernel.kernelapp", "ipykernel.ipkernel", "tqdm.auto", "matplotlib.pyplot")
INLINE = "module://matplotlib_inline.backend_inline"  # ipykernel's default backend
CONNECT_TIMEOUT_S = 120  # the zygote's imports, on a busy 2-core machine


def _stock_kernel(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *args])


# ----------------------------------------------------------------------------- the stub

def stub(args: list[str]) -> int:
    """Ask the zygote for a kernel, relay signals to it, and return its exit status."""
    path = os.environ.get("LAB_FORK_SERVER")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            if not path:
                raise FileNotFoundError
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if not path or time.monotonic() > deadline or not os.path.exists(os.path.dirname(path)):
                _stock_kernel(args)
            time.sleep(0.05)
    request = {"argv": ["-m ipykernel_launcher", *args], "cwd": os.getcwd(), "env": dict(os.environ),
               "stub": os.getpid()}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    replies = sock.makefile("r")
    line = replies.readline()
    if not line:  # the zygote died before forking
        _stock_kernel(args)
    pid = int(line)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda signum, _frame: _relay(pid, signum))
    status = replies.readline()
    return int(status) if status else 1


def _relay(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- the zygote

def serve(path: str) -> None:
    """Import PRELOAD, then fork a kernel for each request until the parent goes away."""
    import importlib
    os.environ.setdefault("MPLBACKEND", INLINE)
    for name in PRELOAD:
        importlib.import_module(name)
    parent = os.getppid()
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    server.listen(16)
    os.replace(path + ".tmp", path)  # clients see the socket only once it listens
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        ready, _, _ = select.select([server, wake_r], [], [], 1.0)
        if wake_r in ready:
            wake_r.recv(4096)
        _reap(children)
        if server in ready:
            conn, _ = server.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                for s in (server, wake_r, wake_w, conn, *children.values()):
                    s.close()
                _child(json.loads(message), fds)  # never returns
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
    for pid in children:
        _relay(pid, signal.SIGTERM)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the kernel the stub asked for, then exit."""
    code = 1
    try:
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile
        tempfile.tempdir = None  # the zygote's imports may have cached $TMPDIR: read it again
        # ipykernel would poll its parent, which is now the zygote: parent_handle=1 turns that
        # off (and its console note with it); _watch follows the stub instead.
        sys.argv = [*request["argv"], "--IPKernelApp.parent_handle=1"]
        threading.Thread(target=_watch, args=(request["stub"],), daemon=True).start()
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - report, then leave the zygote's loop behind
        import traceback
        traceback.print_exc()
    finally:
        import atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _watch(stub_pid: int) -> None:
    """End the kernel when its stub is gone (killed with SIGKILL, which it cannot relay)."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(stub_pid, 0)
        except ProcessLookupError:
            os._exit(1)


# ------------------------------------------------------------------------ for conftest

def start(folder: Path) -> subprocess.Popen | None:
    """Write the ``python3`` kernelspec under ``folder`` and put it first on $JUPYTER_PATH;
    unless $LAB_FORK_KERNELS is 0, start this process's zygote and return it."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(Path(__file__).resolve()), "-f", "{connection_file}"],
        "display_name": "Python 3 (lab tests)", "language": "python", "metadata": {"debugger": False}}))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("JUPYTER_PATH")]))
    if os.environ.get("LAB_FORK_KERNELS", "1") == "0":
        os.environ.pop("LAB_FORK_SERVER", None)
        return None
    path = folder / "zygote.sock"
    path.unlink(missing_ok=True)
    os.environ["LAB_FORK_SERVER"] = str(path)
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", str(path)],
                            stdin=subprocess.DEVNULL)


def stop(zygote: subprocess.Popen | None) -> None:
    if zygote is not None:
        zygote.terminate()
        try:
            zygote.wait(10)
        except subprocess.TimeoutExpired:
            zygote.kill()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(stub(sys.argv[1:]))

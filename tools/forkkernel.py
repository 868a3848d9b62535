"""Jupyter kernels forked from a process that imported their heavy modules once (a zygote).

Each kernel still is a process of its own that starts with an empty namespace; only its
start is cheaper. A stock kernel is a new Python that imports ipykernel and then torch
(and, in every notebook's setup cell, torchvision): about 4-6 s of CPU on a 2-core
machine. A *zygote* imports those modules once and runs nothing; each kernel is a fork
of it, ready in a fraction of a second. Its one user is the grader, and only when asked
(``make grade GRADE_ARGS=--fork``; tools/grade.py, tools/grade_kernel.py): every sandboxed
kernel of the run is forked, and enters its sandbox right after the fork, before any
student code runs. It needs Linux (``/proc``, ``socket.send_fds``). The test run uses
stock kernels: no process machinery there.

The pieces:

- :func:`serve`: the zygote. For each request on its Unix socket it forks a child that
  adopts the requester's working folder, environment, arguments and standard streams,
  then runs ipykernel as ``python -m ipykernel_launcher`` would. It reports the child's
  pid and, later, its exit status, and kills the child when the requester goes away
  (a ``SIGKILL`` the requester could not relay). ``allow`` decides who may ask.
- :func:`stub`: the process the Jupyter client starts and manages, a stdlib-only
  stand-in for the kernel: it relays interrupts and termination to the forked kernel
  and exits with its status. Without a zygote it calls its fallback (a stock kernel).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Imported once by the zygote: what every kernel and every notebook's setup cell needs
# (print_environment imports torchvision to catch a mismatched pair: 2 s by itself).
# Nothing whose import-time state depends on the environment of one kernel (labsupport
# reads $LAB_*); matplotlib reads $MPLBACKEND at import: the zygote sets the backend its
# kernels get (ipykernel's inline one, or the grader's Agg) first.
# ipykernel.debugger (debugpy) is imported by every kernel as it starts, debugger on or off: 0.2 s each.
PRELOAD = (
    "torch",
    "torchvision",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "tqdm.auto",
    "matplotlib.pyplot",
)
INLINE = "module://matplotlib_inline.backend_inline"  # ipykernel's default backend
CONNECT_TIMEOUT_S = 120  # the zygote's imports, on a busy 2-core machine


def _stock_kernel(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *args])


# ----------------------------------------------------------------------------- the stub


def stub(
    args: list[str], server: str | None, fallback: Callable[[list[str]], None] = _stock_kernel, program: str = "kernel"
) -> int:
    """Ask the zygote at ``server`` for a kernel run with ``args``, relay signals to it,
    and return its exit status. ``fallback(args)`` (which must not return) runs when there
    is no zygote, or it does not answer."""
    path = server
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            if not path:
                raise FileNotFoundError
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if (
                not path
                or time.monotonic() > deadline
                or not os.path.exists(os.path.dirname(path))
                or not _alive(_pid_of(path))
            ):  # a zygote that died importing never listens
                sock.close()
                fallback(args)
            time.sleep(0.05)
    request = {"program": program, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    replies = sock.makefile("r")
    line = replies.readline()
    if not line:  # the zygote died before forking, or refused this process
        sock.close()
        fallback(args)
    pid = int(line)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda signum, _frame: _relay(pid, signum))
    status = replies.readline()
    if status:
        return int(status)
    while _alive(pid):  # the zygote is gone (killed): the kernel may still run; stay its stand-in
        time.sleep(0.2)
    return 1


def _relay(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not; 0, unknown, counts as running)."""
    if pid <= 0:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _pid_of(path: str) -> int:
    """The pid of the zygote serving ``path`` (written by :func:`launch`), or 0."""
    try:
        return int(Path(path + ".pid").read_text())
    except (OSError, ValueError):
        return 0


def launch(command: list[str], path: str, **popen) -> subprocess.Popen:
    """Start a zygote (``command`` ends in ``serve path``) and note its pid beside its socket, so
    that a stub stops waiting for a zygote that died before it listened."""
    Path(path).unlink(missing_ok=True)
    zygote = subprocess.Popen(command, stdin=subprocess.DEVNULL, **popen)
    Path(path + ".pid").write_text(str(zygote.pid))
    return zygote


# --------------------------------------------------------------------------- the zygote


def parent_of(pid: int) -> int:
    """The parent's pid of process ``pid`` (Linux /proc); 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def started_by(owner: int, zygote: int) -> Callable[[int], bool]:
    """A rule for :func:`serve`'s ``allow``: a requester qualifies when ``owner`` is among its
    ancestors and ``zygote`` is not. Every kernel descends from the zygote, so no kernel (nor
    anything it starts) can ask for a kernel of its own, outside its sandbox."""

    def allow(pid: int) -> bool:
        for _ in range(64):
            pid = parent_of(pid)
            if pid == zygote or pid <= 1:
                return False
            if pid == owner:
                return True
        return False

    return allow


def serve(
    path: str,
    preload: tuple[str, ...] = PRELOAD,
    backend: str = INLINE,
    enter: Callable[[dict], None] | None = None,
    allow: Callable[[int], bool] | None = None,
    programs: tuple[str, ...] = ("kernel",),
) -> None:
    """Import ``preload``, then fork a kernel for each request until the parent goes away.

    ``allow(pid)`` (when given) decides whether the process ``pid`` may ask, and
    ``programs`` what it may ask for (only ``"kernel"`` today); a refused request gets
    its connection closed. ``enter(request)`` runs in each child after it took the
    requester's folder, environment and streams, before its program starts.
    """
    import importlib

    os.environ.setdefault("MPLBACKEND", backend)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's note that Python has frozen modules
    for name in preload:
        importlib.import_module(name)
    # The imports' objects live on in every kernel: out of the collector's sight, a kernel's
    # garbage collection neither walks them nor copies their memory pages (copy-on-write).
    gc.collect()
    gc.freeze()
    parent = os.getppid()
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    os.chmod(path + ".tmp", 0o600)
    server.listen(16)
    os.replace(path + ".tmp", path)  # clients see the socket only once it listens
    children: dict[int, socket.socket] = {}  # kernel pid -> the connection of its stub
    while os.getppid() == parent:
        stubs = {conn: pid for pid, conn in children.items() if conn.fileno() >= 0}
        ready, _, _ = select.select([server, wake_r, *stubs], [], [], 1.0)
        if wake_r in ready:
            wake_r.recv(4096)
        for conn in set(ready) & set(stubs):
            try:
                gone = not conn.recv(1)
            except OSError:
                gone = True
            if gone:  # the stub was killed (a SIGKILL it could not relay): so is its kernel
                _relay(stubs[conn], signal.SIGKILL)
                conn.close()
        _reap(children)
        if server in ready:
            conn, _ = server.accept()
            pid = _fork(conn, [server, wake_r, wake_w, *children.values()], enter, allow, programs)
            if pid:
                children[pid] = conn
            else:
                conn.close()
    for pid in children:
        _relay(pid, signal.SIGTERM)


def _fork(conn: socket.socket, close: list[socket.socket], enter, allow, programs: tuple[str, ...]) -> int:
    """Fork the kernel ``conn`` asks for; its pid, or 0 when refused."""
    try:
        peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        if allow is not None and not allow(peer):  # refused before reading a byte of its request
            return 0
        conn.settimeout(10)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        conn.settimeout(None)
    except (OSError, ValueError):
        return 0
    try:
        request = json.loads(message)
    except ValueError:
        request = None
    if len(fds) != 3 or not isinstance(request, dict) or request.get("program") not in programs:
        for fd in fds:
            os.close(fd)
        return 0
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        for s in (*close, conn):
            s.close()
        _child(request, fds, enter)  # never returns
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    return pid


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None and conn.fileno() >= 0:
            try:
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def _child(request: dict, fds: list[int], enter) -> None:
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
        if enter is not None:
            enter(request)
        # ipykernel would poll its parent, which is now the zygote: parent_handle=1 turns
        # that off (and its console note with it); the zygote ends the kernel when its stub goes.
        sys.argv = ["-m ipykernel_launcher", *request["argv"], "--IPKernelApp.parent_handle=1"]
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

"""The kernel launcher of ``tools/grade.py``: an ipykernel that runs one submission, fenced in.

The grader's kernel spec starts ``python -m tools.grade_kernel -f <connection file>``
with the environment variable ``LAB_GRADE_SANDBOX`` holding a JSON object::

    {"memory_mb": 4096, "read": ["/usr", ...], "write": ["/tmp/lab-grade-x/scratch"],
     "landlock": true}

Before the kernel starts, this launcher

* caps the process's data (``RLIMIT_DATA``: its heap and private memory, what an
  allocation grows) at ``memory_mb`` (0: no cap), so a runaway allocation raises
  MemoryError in the cell instead of taking the machine down. Not its address space:
  torch and torchvision alone map 3.6 GB of it, of which they use under 1 GB;
* on Linux 5.13+ with Landlock, restricts the kernel and every process it starts to
  reading the ``read`` paths and writing the ``write`` paths (the scratch folder): the
  submissions folder, the gradebook and other students' scratch folders are neither
  readable nor writable; (Landlock ABI 4+) the only TCP it may use is binding the
  five ports of its own connection file: no outgoing connection, so no download either;
  (ABI 6+) it cannot signal a process outside its sandbox (kill the grader, or another
  student's kernel).

Where Landlock is missing it says so on stderr (the grader logs it) and goes on: the
limits on memory and time, and the scratch working folder, still hold.

``python -m tools.grade_kernel serve SOCKET`` is the grader's zygote (tools/forkkernel.py):
it imports torch, torchvision and ipykernel once; with ``$LAB_GRADE_ZYGOTE`` naming its
socket, this launcher asks it for the kernel instead, and the forked child enters the
sandbox above before it runs anything else. Only the grader's own processes may ask:
a kernel (or anything it starts) is refused, whatever it sends.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

# Linux syscall numbers (the same on x86_64 and aarch64) and flags, from <linux/landlock.h>.
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION_FLAG = 1
_PATH_BENEATH, _NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE  # the rights that apply to a file (not a folder)
_ABI1_ALL = (1 << 13) - 1  # execute ... make_sym
_TRUNCATE = 1 << 14
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6: no signal, no abstract socket outside the sandbox
ZYGOTE_VARIABLE = "LAB_GRADE_ZYGOTE"  # the socket of the grader's zygote, if it started one


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock(read: list[str], write: list[str], ports: list[int]) -> str:
    """Restrict this process (and its children) to the given paths and TCP ports.

    Returns "" when the ruleset is in force, else why not (an old kernel, a seccomp filter).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    if abi < 1:
        return f"Landlock is not available ({os.strerror(ctypes.get_errno())})"
    fs = _ABI1_ALL | (_TRUNCATE if abi >= 3 else 0)
    net = (_BIND_TCP | _CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    fd = libc.syscall(_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return f"Landlock ruleset refused ({os.strerror(ctypes.get_errno())})"
    reading = _EXECUTE | _READ_FILE | _READ_DIR
    for paths, rights in ((read, reading), (write, fs)):
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist needs no rule
            allowed = rights if os.path.isdir(path) else rights & (_FILE_RIGHTS | (_TRUNCATE & fs))
            rule = _PathBeneath(allowed, pfd)
            libc.syscall(
                _ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)
            )
            os.close(pfd)
    if net:
        for port in ports:
            rule = _NetPort(_BIND_TCP, port)  # port 0: an ephemeral port (ipykernel's IOPub pipe)
            libc.syscall(_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_NET_PORT), ctypes.byref(rule), ctypes.c_uint32(0))
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.syscall(_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        return f"Landlock restriction refused ({os.strerror(ctypes.get_errno())})"
    os.close(fd)
    return ""


def enter_sandbox(connection: str) -> None:
    """Fence this process in, as ``$LAB_GRADE_SANDBOX`` (removed from the environment) says."""
    cfg = json.loads(os.environ.pop("LAB_GRADE_SANDBOX", "{}"))
    with open(connection) as f:
        info = json.load(f)
    ports = [0] + [int(info[k]) for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
    memory = int(cfg.get("memory_mb", 0))
    if memory > 0:
        limit = memory * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    if cfg.get("stderr"):  # the kernel's own warnings go to the scratch folder, not the grader's terminal
        fd = os.open(cfg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    if cfg.get("landlock", True):
        why = landlock(list(cfg.get("read", [])) + [connection], list(cfg.get("write", [])), ports)
        if why:
            print(f"lab-grade: {why}; file isolation is best effort", file=sys.stderr)


def _connection(argv: list[str]) -> str:
    return argv[argv.index("-f") + 1]


def _stock_kernel(args: list[str]) -> None:
    """A kernel of its own: this process enters the sandbox, then becomes the kernel."""
    os.environ.pop(ZYGOTE_VARIABLE, None)
    enter_sandbox(_connection(args))
    from ipykernel import kernelapp

    sys.argv = [sys.argv[0], *args]
    kernelapp.launch_new_instance()
    sys.exit(0)


def serve(path: str) -> None:
    """The grader's zygote (tools/forkkernel.py): its kernels enter their sandbox right after
    the fork; only processes of the grader that started it (not a kernel) may ask for one."""
    import forkkernel  # this file runs as a script (the kernelspec's program): tools/ is sys.path[0]

    def enter(request: dict) -> None:
        os.environ.pop(ZYGOTE_VARIABLE, None)
        enter_sandbox(_connection(request["argv"]))

    forkkernel.serve(path, backend="Agg", enter=enter, allow=forkkernel.started_by(os.getppid(), os.getpid()))


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif os.environ.get(ZYGOTE_VARIABLE):
        import forkkernel  # as above: the script's own folder

        sys.exit(forkkernel.stub(sys.argv[1:], server=os.environ[ZYGOTE_VARIABLE], fallback=_stock_kernel))
    else:
        _stock_kernel(sys.argv[1:])


if __name__ == "__main__":
    main()

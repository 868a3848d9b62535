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

On Linux it also, before Landlock: caps every file it writes (``RLIMIT_FSIZE``, ``file_mb``);
joins a cgroup of its own (``cgroup``, with ``pids_max``) that the grader made room for, so
that everything it starts, in new sessions too, is found and killed when it stops
(:func:`end`); and, where it may make a mount namespace (root), mounts a ``/dev/shm`` of its
own (a tmpfs of ``shm_mb``), gone with it, and a ``/proc`` that lists only the processes it
may trace (no other kernel's or the grader's command line). After Landlock: ``no_new_privs``, every capability
dropped (bounding, ambient, effective, permitted, inheritable sets), so root in a kernel
cannot read another process's ``/proc/<pid>/environ`` or memory, and not dumpable. The
grader's own processes are not dumpable either (:func:`seal_grader`).

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
import shutil
import signal
import sys
from pathlib import Path

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
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 4, 24, 36, 37
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522
_CLONE_NEWNS, _CLONE_NEWNET = 0x00020000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
_CGROUP_BASES = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")
_SHM = "/dev/shm"
_SHM_BEFORE: dict[str, set[str]] = {}  # scratch -> /dev/shm's entries before its kernel (no private /dev/shm)


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


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _why(what: str) -> str:
    return f"{what} ({os.strerror(ctypes.get_errno())})"


def seal_grader(reaper: bool = False) -> None:
    """This grader process: not dumpable, so no kernel (even as root, without CAP_SYS_PTRACE) reads
    its /proc/<pid>/environ or memory; with ``reaper``, the parent of its kernels' orphans."""
    if sys.platform != "linux":
        return
    libc = _libc()
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    if reaper:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def drop_capabilities() -> str:
    """Empty this process's capability sets (bounding, ambient, effective, permitted, inheritable):
    root in a kernel can no longer read another process's /proc files, ptrace, mount or bypass file
    modes. Returns "" when done, else why not."""
    libc = _libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: there is nothing to drop
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}: all empty
    if libc.capset(header, data) != 0:
        return _why("capset refused")
    return ""


def private_shm(size_mb: int) -> str:
    """A /dev/shm of this process's own (a tmpfs of ``size_mb`` MB in a new mount namespace), gone
    with its last process. Needs CAP_SYS_ADMIN (root). Returns "" when done, else why not."""
    libc = _libc()
    if libc.unshare(_CLONE_NEWNS) != 0:
        return _why("no mount namespace")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return _why("mounts not made private")
    size = f",size={size_mb}m" if size_mb > 0 else ""
    options = f"mode=1777{size}".encode()
    if libc.mount(b"tmpfs", _SHM.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        return _why("no tmpfs on /dev/shm")
    return ""


def private_proc() -> str:
    """In this process's mount namespace (:func:`private_shm`'s), a /proc of its own that lists only the
    processes it may trace (``hidepid=ptraceable``): with Landlock, its own and those it starts. The host's
    /proc shows every process's command line (the grader's, other kernels', anything else the machine
    runs) to anyone. Needs CAP_SYS_ADMIN (root). Returns "" when done, else why not."""
    libc = _libc()
    if libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, b"hidepid=ptraceable") != 0:
        return _why("no /proc of its own")
    return ""


def private_network() -> str:
    """A network namespace of this process's own, with only a loopback (up): no UDP, TCP or abstract
    Unix socket reaches another kernel, the grader or the outside. Its Jupyter channels must then
    be Unix socket files (the grader starts it with ``transport="ipc"``). Needs root."""
    import fcntl
    import socket
    import struct

    if _libc().unshare(_CLONE_NEWNET) != 0:
        return _why("no network namespace")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])[1]
            fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
    except OSError as err:
        return f"the loopback stays down ({err.strerror})"
    return ""


def mount_scratch(path: str, size_mb: int) -> str:
    """Make ``path`` (a kernel's empty scratch folder) a tmpfs of ``size_mb`` MB: the cap on the disk
    a kernel fills, whatever the number of files. Needs root. "" when done, else why not."""
    if sys.platform != "linux" or size_mb <= 0:
        return "no disk cap asked" if size_mb <= 0 else "not Linux"
    options = f"size={size_mb}m,mode=0700".encode()
    if _libc().mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        return _why("no tmpfs for the scratch folder")
    return ""


def unmount_scratch(path: str) -> None:
    """Undo :func:`mount_scratch` (lazily, if a process still holds a file there)."""
    if sys.platform == "linux":
        _libc().umount2(path.encode(), 2)  # MNT_DETACH


def _can_unshare(flag: int) -> bool:
    """Whether a kernel started from here could have that namespace (tried in a forked child)."""
    if sys.platform != "linux" or not os.path.isdir(_SHM):
        return False
    libc = _libc()  # loaded before the fork: the child calls nothing that could wait on a lock
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(flag) == 0 else 1)
    return os.waitpid(pid, 0)[1] == 0


_UNSHARE: list[bool] = []


def _cgroup_of(scratch: str) -> str:
    """Where the cgroup of the kernel of ``scratch`` is made ("" where none can be)."""
    name = "lab-grade-" + "-".join(Path(scratch).parts[-2:]).replace("/", "")
    return next(
        (
            os.path.join(base, name)
            for base in _CGROUP_BASES
            if os.path.isfile(os.path.join(base, "cgroup.procs")) and os.access(base, os.W_OK)
        ),
        "",
    )


def end_leftovers(root: str) -> None:
    """After a grader worker died in the middle of a job (its kernel killed it, or the out-of-memory killer did):
    end what that job's kernel left under ``root``, the run's folder of scratch folders: its processes and its
    cgroup (:func:`end`), and its scratch folder's tmpfs, which would keep the folder from being deleted."""
    for folder in sorted(Path(root).glob("s-*")):
        scratch = str(folder)
        end(0, {"cgroup": _cgroup_of(scratch)}, scratch)
        if os.path.ismount(scratch):
            unmount_scratch(scratch)


def prepare(scratch: str) -> dict:
    """The grader's side of a kernel's sandbox, before it starts: its cgroup (where one can be made)
    and whether it gets a private /dev/shm; else /dev/shm's entries now, to delete its own after it."""
    if not _UNSHARE:
        _UNSHARE.extend([_can_unshare(_CLONE_NEWNS), _can_unshare(_CLONE_NEWNET)])
    cgroup = _cgroup_of(scratch)
    if not _UNSHARE[0] and os.path.isdir(_SHM):
        _SHM_BEFORE[scratch] = set(os.listdir(_SHM))
    return {"cgroup": cgroup, "private_shm": _UNSHARE[0], "netns": _UNSHARE[1]}


def _join_cgroup(path: str, pids_max: int) -> str:
    try:
        os.makedirs(path, exist_ok=True)
        if pids_max > 0 and os.path.exists(os.path.join(path, "pids.max")):
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(pids_max))
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as err:
        return f"no cgroup of its own ({err.strerror})"
    return ""


def _processes() -> dict[int, int]:
    """Every live process's parent (Linux /proc); zombies left out."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2 :].split()
                if fields[0] != "Z":
                    parents[int(entry)] = int(fields[1])
            except (OSError, ValueError, IndexError):
                pass
    return parents


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (children, theirs...), now."""
    parents = _processes()
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _marked(scratch: str) -> set[int]:
    """Processes started in, or with an environment naming, the kernel's scratch folder."""
    marker = scratch.encode()
    found = set()
    for pid in _processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if pid != os.getpid() and (marker + b"/" in env or cwd == scratch or cwd.startswith(scratch + "/")):
            found.add(pid)
    return found


def end(pid: int, sandbox: dict, scratch: str) -> list[int]:
    """After a kernel stopped: kill every process it left (its cgroup, its descendants, anything
    started in its scratch folder), reap those that are this process's, remove its cgroup, and
    delete the /dev/shm entries it made when it had no /dev/shm of its own. The pids killed."""
    import time

    if sys.platform != "linux":
        return []
    killed: set[int] = set()
    cgroup = sandbox.get("cgroup", "")
    for _ in range(20):
        left = descendants(pid) if pid > 0 else set()
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cgroup.procs")) as f:
                    left |= {int(x) for x in f.read().split()} & set(_processes())  # zombies: dead already
            except (OSError, ValueError):
                pass
        left |= _marked(scratch)
        left.discard(os.getpid())
        if not left:
            break
        for victim in left:
            try:
                os.kill(victim, signal.SIGKILL)
                killed.add(victim)
            except OSError:
                pass
        time.sleep(0.05)
    for victim in killed:  # those that were (or became, by the reaper) this process's children
        for _ in range(20):
            try:
                if os.waitpid(victim, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
    if _libc().prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(reaper := ctypes.c_int(0)), 0, 0, 0) == 0 and reaper.value:
        try:  # a worker: its only children are kernels, and the orphans of its kernels
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
    for _ in range(40 if cgroup else 0):  # busy while a zombie of it waits for its parent (the zygote)
        try:
            os.rmdir(cgroup)
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.05)
    before = _SHM_BEFORE.pop(scratch, None)
    if before is not None and os.path.isdir(_SHM):
        for entry in set(os.listdir(_SHM)) - before:
            path = os.path.join(_SHM, entry)
            try:
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            except OSError:
                pass
    return sorted(killed)


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
    else:  # no cap of its own: not its grader worker's either (tools/grade.py cap_worker)
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    if cfg.get("stderr"):  # the kernel's stdout and stderr (os.write(1, ...) too) go to the scratch folder, not the
        # grader's terminal: no escape sequence a student writes reaches it
        fd = os.open(cfg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    file_mb = int(cfg.get("file_mb", 0))
    if file_mb > 0:  # no file the kernel writes grows past it (SIGXFSZ is ignored: the write fails)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    linux = sys.platform == "linux"
    if linux and cfg.get("cgroup"):
        why = _join_cgroup(cfg["cgroup"], int(cfg.get("pids_max", 0)))
        if why:
            print(f"lab-grade: {why}; its processes are found by their parent", file=sys.stderr)
    if linux and cfg.get("netns"):
        why = private_network()
        if why:
            print(f"lab-grade: {why}; the network is shared", file=sys.stderr)
    if linux and cfg.get("private_shm"):
        why = private_shm(int(cfg.get("shm_mb", 0)))
        if why:
            print(f"lab-grade: {why}; /dev/shm is shared", file=sys.stderr)
        else:
            why = private_proc()
            if why:
                print(f"lab-grade: {why}; every process's command line is visible", file=sys.stderr)
    if cfg.get("landlock", True):
        why = landlock(list(cfg.get("read", [])) + [connection], list(cfg.get("write", [])), ports)
        if why:
            print(f"lab-grade: {why}; file isolation is best effort", file=sys.stderr)
    if not linux:
        return
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    why = drop_capabilities()
    if why:
        print(f"lab-grade: {why}; the kernel keeps its capabilities", file=sys.stderr)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # its own /proc files: the grader's (root's) only


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

    seal_grader()  # its memory and /proc files: out of its kernels' reach

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

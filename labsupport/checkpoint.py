"""Checkpoints written atomically and loaded safely.

A crash while saving never leaves a half-written file under the real name: the
data goes to a temporary file in the same folder (``.net.pt.<random>.tmp`` for
``net.pt``), is flushed to disk, then renamed over the target in one step. A save
holds an OS lock (``flock``) on its temporary file while writing it, so the next save
of the same path can tell the temporaries of killed saves (no lock: deleted) from
those of a save still running (kept). Git ignores them. Loading uses
``weights_only=True``.

Example:
    >>> import tempfile, os, torch
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = save_checkpoint({"w": torch.ones(2)}, os.path.join(folder, "net.pt"))
    ...     print(load_checkpoint(path)["w"])
    tensor([1., 1.])
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

try:
    import fcntl
except ImportError:  # Windows: no lock, so orphan temporaries are left alone
    fcntl = None

__all__ = ["load_checkpoint", "save_checkpoint"]


def _path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"a checkpoint path must be a file name (str or Path), got {type(path).__name__}")
    return Path(path)


def _temporary(path: Path) -> tuple[int, str]:
    """A new, locked temporary file beside ``path``: its descriptor and name."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        if fcntl is None:
            return fd, tmp
        # Waits only while another save checks whether this file is an orphan.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, tmp):
            return fd, tmp
        os.close(fd)  # deleted as an orphan before we locked it: make another


def _same_file(fd: int, name: str) -> bool:
    """Whether ``name`` still names the open file ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(name, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _remove_orphans(path: Path) -> None:
    """Delete the temporaries of ``path`` that killed saves left (those nobody locks)."""
    if fcntl is None:
        return
    orphan = re.compile(rf"^\.{re.escape(path.name)}\.[A-Za-z0-9_]+\.tmp$")
    with os.scandir(path.parent) as entries:
        names = [e.path for e in entries if orphan.match(e.name) and e.is_file(follow_symlinks=False)]
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # renamed into place meanwhile, or not ours to open
        try:
            if _unlocked(fd) and _same_file(fd, name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        finally:
            os.close(fd)


def _unlocked(fd: int) -> bool:
    """Lock ``fd`` if no one else does; False when a running save holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def save_checkpoint(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` atomically; returns the path.

    Example:
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     print(save_checkpoint({"step": 1}, os.path.join(folder, "c.pt")).name)
        c.pt
    """
    path = _path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # while locked: no other save takes it for an orphan
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _unloadable(path: Path, reason: str) -> RuntimeError:
    return RuntimeError(
        f"{path} is not a checkpoint this lab can load safely (truncated, not "
        "written by torch.save, or holding objects other than tensors, dicts, "
        f"lists and numbers): {reason}"
    )


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: tensors, dicts, lists and numbers
    only, never arbitrary pickled code; a missing or unreadable file gets one sentence.

    Example:
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     print(load_checkpoint(save_checkpoint([1, 2], os.path.join(folder, "l.pt"))))
        [1, 2]
    """
    path = _path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise _unloadable(path, "the file is empty")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError:
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        reason = next(iter(str(exc).splitlines()), "") or type(exc).__name__
        raise _unloadable(path, reason) from None

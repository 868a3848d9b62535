"""Checkpoints written atomically and loaded safely.

A crash while saving never leaves a half-written file under the real name: the
data goes to a temporary file in the same folder, is flushed to disk, then
renamed over the target in one step. Loading uses ``weights_only=True``.

Example:
    >>> import tempfile, os, torch
    >>> path = os.path.join(tempfile.mkdtemp(), "net.pt")
    >>> _ = save_checkpoint({"w": torch.ones(2)}, path)
    >>> load_checkpoint(path)["w"]
    tensor([1., 1.])
"""
from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["save_checkpoint", "load_checkpoint"]


def _path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"a checkpoint path must be a file name (str or Path), got {type(path).__name__}")
    return Path(path)


def save_checkpoint(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` atomically; returns the path.

    Example:
        >>> save_checkpoint({"step": 1}, os.path.join(tempfile.mkdtemp(), "c.pt")).name
        'c.pt'
    """
    path = _path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: tensors, dicts, lists and numbers
    only, never arbitrary pickled code; a missing or unreadable file gets one sentence.

    Example:
        >>> p = save_checkpoint([1, 2], os.path.join(tempfile.mkdtemp(), "l.pt"))
        >>> load_checkpoint(p)
        [1, 2]
    """
    path = _path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise RuntimeError(f"{path} is not a checkpoint this lab can load safely (truncated, not "
                           f"written by torch.save, or holding objects other than tensors, dicts, "
                           f"lists and numbers): {str(exc).splitlines()[0]}") from None

"""Device choice and the one-line environment report of every setup cell.

Example:
    >>> import labsupport as lab
    >>> lab.pick_device("cpu")
    device(type='cpu')
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import warnings

import torch

from .timing import as_device

__all__ = ["pick_device", "pick_amp_dtype", "print_environment"]

#: The oldest versions every notebook and test passes on (pyproject.toml says the same).
MIN_VERSIONS = {"torch": (2, 6), "torchvision": (0, 21)}


def _available() -> list[str]:
    names = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    return names + (["mps"] if mps is not None and mps.is_available() else [])


def pick_device(prefer: str | None = None) -> torch.device:
    """``prefer``, else ``$LAB_DEVICE``, else CUDA, Apple's MPS, CPU; asking for a
    device that is not there raises a RuntimeError listing the ones that are.

    Example:
        >>> pick_device("cpu")
        device(type='cpu')
    """
    if prefer is not None and not isinstance(prefer, (str, torch.device)):
        raise RuntimeError(
            f"a device is named by a string such as 'cpu' or 'cuda', or a torch.device; "
            f"got {type(prefer).__name__} {prefer!r}"
        )
    wanted = prefer if prefer is not None else os.environ.get("LAB_DEVICE", "").strip()
    if not wanted:
        return torch.device(
            next(d for d in ("cuda", "mps", "cpu") if d == "cpu" or any(n.startswith(d) for n in _available()))
        )
    try:
        dev = torch.device(wanted)
    except (RuntimeError, TypeError) as exc:
        raise RuntimeError(f"{wanted!r} is not a device name (try 'cpu', 'cuda', 'cuda:1' or 'mps')") from exc
    if dev.type == "meta":
        raise RuntimeError(
            "the meta device holds shapes but no data and runs nothing: pick a real one ('cpu', 'cuda' or 'mps')"
        )
    names = _available()
    if str(dev) not in names and not (dev.index is None and any(n.startswith(dev.type) for n in names)):
        raise RuntimeError(f"{wanted!r} was asked for but is not available; available: {', '.join(names)}")
    return dev


def pick_amp_dtype(device: torch.device | str) -> torch.dtype:
    """The autocast type for ``device``: bf16 on a CUDA GPU of compute capability 8.0 (Ampere) or
    later, fp16 (with a ``GradScaler``) below it, bf16 on any other device.

    ``torch.cuda.is_bf16_supported()`` would not do: it counts emulation and answers True on a
    T4 (7.5), where bf16 runs without tensor cores and cuDNN has no bf16 convolutions.

    Example:
        >>> pick_amp_dtype("cpu")
        torch.bfloat16
    """
    device = as_device(device)
    if device.type != "cuda":
        return torch.bfloat16
    return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16


def _version(module: str) -> str:
    """The installed version of ``module`` ("missing" if none), without importing it: importing
    torchvision only to print its version would cost every notebook a second or more. A notebook
    that uses torchvision imports it in its setup cell, before this line, and an import that
    fails (a torch/torchvision mismatch) stops that cell with its own error."""
    if module in sys.modules:
        return str(getattr(sys.modules[module], "__version__", "missing")).split("+")[0]
    try:
        return importlib.metadata.version(module).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def print_environment(device: torch.device | str | None = None) -> None:
    """Print python, torch, torchvision and the device in one line; warn about a
    torch or torchvision older than the lab's floor.

    Example:
        >>> print_environment("cpu")       # doctest: +ELLIPSIS
        python ... | torch ... | torchvision ... | device cpu (... thread...)
    """
    device = pick_device(device)  # None: the default; a name that is no device gets pick_device's sentence
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        threads = torch.get_num_threads()
        where = f"{threads} thread" if threads == 1 else f"{threads} threads"
    found = {name: _version(name) for name in MIN_VERSIONS}
    print(
        f"python {platform.python_version()} | torch {found['torch']} | torchvision "
        f"{found['torchvision']} | device {device} ({where})"
    )
    for name, floor in MIN_VERSIONS.items():
        parts = tuple(int(p) for p in found[name].split(".")[:2] if p.isdigit())
        if found[name] == "missing" or parts < floor:
            warnings.warn(
                f"{name} {found[name]} is older than the lab's floor "
                f"{'.'.join(map(str, floor))}: run `make lab`, or pip install the lab's "
                f"pinned versions",
                stacklevel=2,
            )

"""Device choice and the one-line environment report of every setup cell.

Example:
    >>> import labsupport as lab
    >>> device = lab.pick_device()          # cuda > mps > cpu, or $LAB_DEVICE
    >>> lab.print_environment(device)       # doctest: +SKIP
    python 3.11.7 | torch 2.14.0 | torchvision 0.29.2 | device cpu (2 threads)
"""
from __future__ import annotations

import os
import platform
import re
import warnings

import torch

__all__ = ["pick_device", "environment_line", "print_environment", "check_versions",
           "MIN_VERSIONS"]

#: Oldest versions the notebooks are tested against.
MIN_VERSIONS = {"python": "3.10", "torch": "2.1", "torchvision": "0.16"}


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def pick_device(prefer: str | None = None) -> torch.device:
    """Pick the device the notebook runs on.

    Order: ``prefer`` argument, then the ``LAB_DEVICE`` environment variable,
    then CUDA, Apple's MPS, CPU. Asking for a device that is not there raises
    a ``RuntimeError`` that says which ones are.

    Example:
        >>> pick_device("cpu")
        device(type='cpu')
    """
    wanted = prefer if prefer is not None else os.environ.get("LAB_DEVICE", "").strip()
    if wanted:
        try:
            dev = torch.device(wanted)
        except (RuntimeError, TypeError) as exc:
            raise RuntimeError(f"LAB_DEVICE/prefer={wanted!r} is not a device name "
                               f"(try 'cpu', 'cuda', 'cuda:1' or 'mps')") from exc
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"{wanted!r} was asked for but CUDA is not available; "
                               f"available: {', '.join(_available())}")
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            raise RuntimeError(f"{wanted!r} was asked for but only {torch.cuda.device_count()} "
                               f"CUDA device(s) exist")
        if dev.type == "mps" and not _mps_available():
            raise RuntimeError(f"{wanted!r} was asked for but MPS is not available; "
                               f"available: {', '.join(_available())}")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _available() -> list[str]:
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    return names


def _version_tuple(text: str) -> tuple[int, ...]:
    """'2.14.0+cu130' -> (2, 14, 0)."""
    parts = []
    for piece in re.split(r"[.+]", text):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def check_versions(versions: dict[str, str] | None = None) -> list[str]:
    """Return one message per package older than :data:`MIN_VERSIONS`, and warn with each.

    Example:
        >>> check_versions({"python": "3.12.1", "torch": "2.0.1", "torchvision": "0.16.0"})  # doctest: +SKIP
        ['torch 2.0.1 is older than the minimum 2.1 this lab is tested with: ...']
    """
    versions = _versions() if versions is None else versions
    problems = []
    for name, minimum in MIN_VERSIONS.items():
        found = versions.get(name)
        if found is None:
            problems.append(f"{name} is not installed; the lab needs {name} >= {minimum}: run `make lab`")
        elif _version_tuple(found) < _version_tuple(minimum):
            problems.append(f"{name} {found} is older than the minimum {minimum} this lab is tested "
                            f"with: upgrade it (`make lab` installs the pinned versions)")
    for message in problems:
        warnings.warn(message, stacklevel=2)
    return problems


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "torch": torch.__version__.split("+")[0]}
    try:
        import torchvision
        found["torchvision"] = torchvision.__version__.split("+")[0]
    except Exception:  # a torch/torchvision mismatch raises RuntimeError, not ImportError
        pass
    return found


def environment_line(device: torch.device | str | None = None) -> str:
    """One line naming python, torch, torchvision and the device.

    Example:
        >>> environment_line("cpu").startswith("python ")
        True
    """
    device = torch.device(device) if device is not None else pick_device()
    v = _versions()
    tv = v.get("torchvision", "missing")
    if device.type == "cuda":
        where = f"{device} ({torch.cuda.get_device_name(device)})"
    else:
        where = f"{device} ({torch.get_num_threads()} threads)"
    return f"python {v['python']} | torch {v['torch']} | torchvision {tv} | device {where}"


def print_environment(device: torch.device | str | None = None) -> None:
    """Print :func:`environment_line` and warn about versions below the minimum.

    Example:
        >>> print_environment("cpu")       # doctest: +ELLIPSIS
        python ... | torch ... | torchvision ... | device cpu (... threads)
    """
    print(environment_line(device))
    check_versions()

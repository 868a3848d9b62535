"""Timing helpers. Timings vary by machine: print them only in cells tagged
``nbval-ignore-output``, and assert the property that matters inside the cell."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from .checks.running import stopped_after

__all__ = ["Timer", "sync", "time_fn"]


def as_device(device: Any) -> torch.device:
    """``device`` (a name such as ``"cuda:0"``, or a ``torch.device``) as a torch.device, or one sentence on what
    it should be.

    Example:
        >>> as_device("cpu")
        device(type='cpu')
    """
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a device name such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(f"{device!r} is not a device name (try 'cpu', 'cuda' or 'mps')") from None


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work (a no-op on CPU), so a timer measures the work, not its launch.

    Example:
        >>> sync("cpu")
    """
    dev = None if device is None else as_device(device)
    if torch.cuda.is_available() and (dev is None or dev.type == "cuda"):
        torch.cuda.synchronize(dev)


class Timer:
    """Wall-clock timer for a ``with`` block; synchronises the GPU on both ends.

    Example:
        >>> with Timer() as t:
        ...     pass
        >>> isinstance(t.seconds, float)
        True
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        sync(device)  # a device that is no device is refused here, before the block runs
        self.device = device
        self.seconds = float("nan")

    def __enter__(self) -> Timer:
        sync(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        sync(self.device)
        self.seconds = time.perf_counter() - self._start


def time_fn(fn: Callable[[], Any], *, min_run_time: float = 0.2, label: str = "") -> float:
    """Median seconds per call of ``fn()``, measured by ``torch.utils.benchmark``
    (warm-up, GPU synchronisation and the repeat count are handled there).

    Example:
        >>> time_fn(lambda: torch.ones(100).sum(), min_run_time=0.01) > 0
        True
    """
    if not callable(fn):
        raise TypeError(f"time_fn needs a function of no arguments (a lambda: ...), got {type(fn).__name__}")
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, (int, float)) or not 0 < min_run_time < 600:
        raise ValueError(f"min_run_time must be a number of seconds in (0, 600), got {min_run_time!r}")
    if not isinstance(label, str):
        raise TypeError(f"label must be a string, got {type(label).__name__}")
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, label=label)
    with stopped_after(timing_limit(min_run_time), "time_fn(fn)", TOO_SLOW):
        measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return float(measurement.median)


#: Why a timer stops a function: said in the TimeoutError's sentence.
TOO_SLOW = (
    "fn() never returned, or its calls are far too slow to time (a loop whose condition never changes? "
    "work meant for a smaller input?)"
)


def timing_limit(min_run_time: float) -> float:
    """Seconds a timer may run before it stops ``fn``: the checks' time limit plus the requested run time."""
    from .checks import running

    return running.TIME_LIMIT + 2 * float(min_run_time)

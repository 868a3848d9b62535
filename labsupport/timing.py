"""Timing helpers. Timings vary by machine: print them only in cells tagged
``nbval-ignore-output``, and assert the property that matters inside the cell."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

__all__ = ["Timer", "sync", "time_fn"]


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work (a no-op on CPU), so a timer measures the work, not its launch.

    Example:
        >>> sync("cpu")
    """
    dev = torch.device(device) if device is not None else None
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
        self.device, self.seconds = device, float("nan")

    def __enter__(self) -> "Timer":
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
    if not isinstance(min_run_time, (int, float)) or not 0 < min_run_time < 600:
        raise ValueError(f"min_run_time must be a number of seconds in (0, 600), got {min_run_time!r}")
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, label=label)
    return float(timer.blocked_autorange(min_run_time=min_run_time).median)

"""Slow datasets for DataLoader workers (notebook 07, benchmarks/dataloader_workers.py), in an
importable module: ``spawn``/``forkserver`` workers get the dataset by pickling, which stores a class
by module and name, so a class defined in a notebook (``__main__``) cannot be sent.

Example:
    >>> ds = SlowDataset(SyntheticImages(8, shape=(1, 4, 4)), delay=0.001)
    >>> seconds = time_loader(torch.utils.data.DataLoader(ds, batch_size=4))
    >>> len(seconds), seconds[0] >= 8 * 0.001
    (1, True)
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["SlowDataset", "SyntheticImages", "time_loader", "worker_speedup"]


class SlowDataset(Dataset):
    """``base`` with each read ``delay`` s slower: ``mode="sleep"`` waits without the CPU (a
    disk, the network); ``mode="spin"`` burns ``delay`` s of this thread's CPU time (decoding)."""

    def __init__(self, base: Dataset, delay: float = 0.002, mode: str = "sleep") -> None:
        if not (hasattr(base, "__getitem__") and hasattr(base, "__len__")):
            raise TypeError(f"base must be a map-style dataset, got {type(base).__name__}")
        if (
            isinstance(delay, bool)
            or not isinstance(delay, (int, float))
            or not 0 <= delay <= 1
            or mode not in ("sleep", "spin")
        ):
            raise ValueError(f"delay must be seconds in [0, 1] and mode 'sleep' or 'spin', got {delay!r}, {mode!r}")
        self.base, self.delay, self.mode = base, float(delay), mode

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        if self.mode == "sleep":
            time.sleep(self.delay)
        else:
            end = time.thread_time() + self.delay  # CPU time: a spinning thread that shares its core takes longer
            while time.thread_time() < end:
                pass
        return self.base[index]


class SyntheticImages(Dataset):
    """``n`` random float32 images of ``shape`` with labels below ``num_classes``; item ``i`` is
    drawn from a generator seeded with ``seed + i``: the same in every process."""

    def __init__(self, n: int, shape: Sequence[int] = (3, 64, 64), num_classes: int = 10, seed: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        self.n, self.shape, self.num_classes, self.seed = n, tuple(shape), num_classes, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} images")
        g = torch.Generator().manual_seed(self.seed + index % self.n)
        return torch.rand(self.shape, generator=g), int(torch.randint(self.num_classes, (), generator=g))


#: Seconds time_loader runs before it is stopped (a read that never returns, or a loader without end).
LOADER_LIMIT = 300.0


def _whole(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is an int in [low, high], else a ValueError that says so."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int from {low} to {high}, got {value!r}")
    return value


def time_loader(
    loader: DataLoader,
    *,
    epochs: int = 1,
    device: torch.device | str | None = None,
    non_blocking: bool = False,
    limit: float | None = LOADER_LIMIT,
) -> list[float]:
    """Seconds of each of ``epochs`` passes over ``loader``; with ``device``, each batch is moved there.
    Stopped with a TimeoutError after ``limit`` seconds (None: no limit)."""
    from .checks.running import stopped_after

    if not hasattr(loader, "__iter__") or isinstance(loader, (torch.Tensor, str, bytes)):
        raise TypeError(
            f"loader must be a DataLoader (or another iterable of batches), got {type(loader).__name__}"
            + (": wrap the tensors in a TensorDataset, then a DataLoader" if isinstance(loader, torch.Tensor) else "")
        )
    _whole(epochs, "epochs", 1, 1000)
    if limit is None:
        return _time_epochs(loader, epochs, device, non_blocking)
    why = "a read that never returns (the dataset's __getitem__ or a transform), or a loader without end"
    with stopped_after(limit, "time_loader", why):
        return _time_epochs(loader, epochs, device, non_blocking)


def _time_epochs(loader: Any, epochs: int, device: torch.device | str | None, non_blocking: bool) -> list[float]:
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for batch in loader:
            if device is None:
                continue
            for t in batch if isinstance(batch, (list, tuple)) else [batch]:
                if isinstance(t, torch.Tensor):
                    t.to(device, non_blocking=non_blocking)
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def worker_speedup(mode: str, items: int = 24, delay: float = 0.01) -> float:
    """Epoch time with 0 workers / with 2 workers over a slow dataset, with this process (and so its
    workers) pinned to one core where the OS allows it (Linux). Measured once per process.

    In ``"spin"`` mode the figure leaves out what two programs gain over one on a core that other busy
    programs share: with ``k`` of them, one program gets 1/(k+1) of the core and two get 2/(k+2) between
    them, a gain of 2/(1+s) where s is the share that this process got while it read alone. That gain
    comes from the other programs, not from the core (a test run or a busy laptop would otherwise show
    spinning workers 1.6x faster); on an idle core s is close to 1 and the figure is unchanged."""
    from .checks.running import stopped_after

    if mode not in ("sleep", "spin"):
        raise ValueError(f"mode must be 'sleep' or 'spin', got {mode!r}")
    _whole(items, "items", 4, 2000)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 < delay <= 0.1:
        raise ValueError(f"delay must be seconds in (0, 0.1], got {delay!r}")
    if items * delay > 2.0:
        raise ValueError(
            f"items * delay must be at most 2 s of reads per epoch (ten epochs are timed), got "
            f"{items} * {delay:g} s = {items * delay:g} s"
        )
    with stopped_after(120, "worker_speedup", "a worker that never started or a read that never returned"):
        return _speedup(mode, items, float(delay))


@functools.cache  # measured once per process: notebook 07 shows the figures its check judged
def _speedup(mode: str, items: int, delay: float) -> float:
    ds = SlowDataset(SyntheticImages(items, shape=(1,)), delay, mode)
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with warnings.catch_warnings():  # on one core, torch warns that 2 workers are more than it suggests: we know
        warnings.filterwarnings("ignore", "This DataLoader will create")
        try:
            if cores:
                os.sched_setaffinity(0, {min(cores)})
            context = "fork" if cores else None  # other programs on the core slow
            loader = DataLoader(
                ds, batch_size=4, num_workers=2, persistent_workers=True, multiprocessing_context=context
            )
            rounds = []
            for _ in range(5):  # interleaved, so a busy moment slows both
                alone = time_loader(DataLoader(ds, batch_size=4), limit=None)[0]
                rounds.append((alone, time_loader(loader, limit=None)[0]))
        finally:
            if cores:
                os.sched_setaffinity(0, cores)
    alone = min(a for a, _ in rounds)  # a pass: the best of interleaved ones
    speedup = alone / min(w for _, w in rounds[1:])
    if mode == "spin":
        share = min(1.0, items * delay / alone)  # each read spins `delay` s of CPU time
        speedup /= 2 / (1 + share)
    return speedup

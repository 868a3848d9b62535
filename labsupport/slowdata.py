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
from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["SlowDataset", "SyntheticImages", "time_loader", "worker_speedup"]


class SlowDataset(Dataset):
    """``base`` with each read ``delay`` s slower: ``mode="sleep"`` waits without the CPU (a
    disk, the network); ``mode="spin"`` burns ``delay`` s of this thread's CPU time (decoding)."""

    def __init__(self, base: Dataset, delay: float = 0.002, mode: str = "sleep") -> None:
        if not (hasattr(base, "__getitem__") and hasattr(base, "__len__")):
            raise TypeError(f"base must be a map-style dataset, got {type(base).__name__}")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0 or mode not in ("sleep", "spin"):
            raise ValueError(f"delay must be seconds >= 0 and mode 'sleep' or 'spin', got {delay!r}, {mode!r}")
        self.base, self.delay, self.mode = base, float(delay), mode

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        end = time.thread_time() + self.delay  # CPU time: a spinning thread that shares its core takes longer
        _ = time.sleep(self.delay) if self.mode == "sleep" else None
        while self.mode == "spin" and time.thread_time() < end:
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


def time_loader(loader: DataLoader, *, epochs: int = 1, device: torch.device | str | None = None,
                non_blocking: bool = False) -> list[float]:
    """Seconds of each of ``epochs`` passes over ``loader``; with ``device``, each batch is moved there."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for batch in loader:
            for t in (batch if isinstance(batch, (list, tuple)) else [batch]) if device is not None else []:
                _ = t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else None
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


@functools.cache  # measured once per process: notebook 07 shows the figures its check judged
def worker_speedup(mode: str, items: int = 24, delay: float = 0.01) -> float:
    """Epoch time with 0 workers / with 2 workers over a slow dataset, with this process (and so its
    workers) pinned to one core where the OS allows it (Linux)."""
    ds, cores = SlowDataset(SyntheticImages(items, shape=(1,)), delay, mode), getattr(os, "sched_getaffinity", lambda _: None)(0)
    with warnings.catch_warnings():  # on one core, torch warns that 2 workers are more than it suggests: we know
        warnings.filterwarnings("ignore", "This DataLoader will create")
        try:
            _ = os.sched_setaffinity(0, {min(cores)}) if cores else None
            loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True,
                                multiprocessing_context="fork" if cores else None)  # other programs on the core slow
            rounds = [(time_loader(DataLoader(ds, batch_size=4))[0], time_loader(loader)[0]) for _ in range(5)]
            return min(a for a, _ in rounds) / min(w for _, w in rounds[1:])  # a pass: the best of interleaved ones
        finally:
            _ = os.sched_setaffinity(0, cores) if cores else None

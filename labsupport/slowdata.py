"""Datasets for the data-loading bottleneck (notebook 07, benchmarks/dataloader_workers.py).

``DataLoader(num_workers=k)`` reads items in ``k`` worker processes. With the
``spawn`` or ``forkserver`` start methods (the default on macOS and Windows, and
on Linux from Python 3.14) each worker receives the dataset by *pickling*, and
pickle stores a class by module and name: a worker re-imports it. A class
defined in a notebook lives in ``__main__``, which a fresh worker cannot import,
so Datasets meant for workers live here, in an importable module.

* :class:`SlowDataset` wraps any dataset and makes every read slow: a sleep
  (waiting on a disk or the network) or a busy loop (decoding on the CPU).
* :class:`SyntheticImages` makes image-sized items on demand (for pinned-memory
  transfers, where 8x8 digits are too small to matter).
* :func:`time_loader` times full passes over a loader.

Example:
    >>> from torch.utils.data import DataLoader
    >>> ds = SlowDataset(SyntheticImages(8, shape=(1, 4, 4)), delay=0.001)
    >>> loader = DataLoader(ds, batch_size=4)
    >>> seconds = time_loader(loader)
    >>> len(seconds), seconds[0] >= 8 * 0.001
    (1, True)
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["SlowDataset", "SyntheticImages", "time_loader"]

_MODES = ("sleep", "spin")


class SlowDataset(Dataset):
    """``base`` with every ``__getitem__`` made ``delay`` seconds slower.

    ``mode="sleep"`` waits without using the CPU, as a read from a slow disk or
    a network file system does (workers overlap the waits, however busy the
    cores are). ``mode="spin"`` keeps one core busy for ``delay`` seconds, as
    decoding a JPEG does (workers help only as far as there are idle cores).
    Items are ``base``'s items, unchanged.

    Example:
        >>> ds = SlowDataset(SyntheticImages(4, shape=(1, 2, 2)), delay=0.0)
        >>> len(ds), ds[0][0].shape
        (4, torch.Size([1, 2, 2]))
    """

    def __init__(self, base: Dataset, delay: float = 0.002, mode: str = "sleep") -> None:
        if not hasattr(base, "__getitem__") or not hasattr(base, "__len__"):
            raise TypeError(f"base must be a map-style dataset (with __getitem__ and __len__), "
                            f"got {type(base).__name__}")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise ValueError(f"delay must be a number of seconds >= 0, got {delay!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        self.base, self.delay, self.mode = base, float(delay), mode

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        if self.delay > 0:
            if self.mode == "sleep":
                time.sleep(self.delay)
            else:
                end = time.perf_counter() + self.delay
                while time.perf_counter() < end:
                    pass
        return self.base[index]

    def __repr__(self) -> str:
        return f"SlowDataset({self.base!r}, delay={self.delay:g}, mode={self.mode!r})"


class SyntheticImages(Dataset):
    """``n`` random float32 images of ``shape`` with int labels below
    ``num_classes``, made on demand: item ``i`` is drawn from a generator seeded
    with ``seed + i``, so it is the same in every process and on every call, and
    the dataset pickles as a few numbers.

    Example:
        >>> ds = SyntheticImages(3, shape=(3, 8, 8))
        >>> image, label = ds[2]
        >>> image.shape, image.dtype, 0 <= label < 10, torch.equal(image, ds[2][0])
        (torch.Size([3, 8, 8]), torch.float32, True, True)
    """

    def __init__(self, n: int, shape: Sequence[int] = (3, 64, 64), num_classes: int = 10,
                 seed: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        self.n, self.shape, self.num_classes, self.seed = n, tuple(int(s) for s in shape), num_classes, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError(f"index out of range for {self.n} images")
        g = torch.Generator().manual_seed(self.seed + index)
        return torch.rand(self.shape, generator=g), int(torch.randint(self.num_classes, (), generator=g))

    def __repr__(self) -> str:
        return f"SyntheticImages(n={self.n}, shape={self.shape})"


def time_loader(loader: DataLoader, *, epochs: int = 1, device: torch.device | str | None = None,
                non_blocking: bool = False) -> list[float]:
    """Seconds for each of ``epochs`` full passes over ``loader``.

    Each pass includes starting the workers (unless the loader has
    ``persistent_workers=True``, then only the first does). With ``device``,
    every tensor of each batch is also moved there (``non_blocking`` as given,
    which only overlaps with a pinned-memory loader) and the device is
    synchronised before the clock stops.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> loader = DataLoader(SyntheticImages(4, shape=(2,)), batch_size=2)
        >>> [s >= 0 for s in time_loader(loader, epochs=2)]
        [True, True]
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    dev = torch.device(device) if device is not None else None
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for batch in loader:
            if dev is not None:
                items = batch if isinstance(batch, (list, tuple)) else [batch]
                for item in items:
                    if isinstance(item, torch.Tensor):
                        item.to(dev, non_blocking=non_blocking)
        if dev is not None and dev.type == "cuda":
            torch.cuda.synchronize(dev)
        seconds.append(time.perf_counter() - start)
    return seconds

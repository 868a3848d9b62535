"""Data the notebooks share: the lecture's random regression problem (01-06) and
scikit-learn's bundled handwritten digits, which need no download (07-10).

Example:
    >>> [tuple(t.shape) for t in lecture_data(N=4, D_in=3, D_out=2)]
    [(4, 3), (4, 2)]
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from .seeding import _check_seed

__all__ = ["lecture_data", "lecture_weights", "load_digits_tensors", "digits_split", "DigitsDataset"]


#: The most numbers one lecture tensor may hold (about 400 MB in float32): a typo such as N=10**9 is refused.
MAX_NUMBERS = 10**8


def _size(value: object, name: str) -> int:
    """A size argument as an int, or a ValueError saying what it must be."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def _device(device: object) -> torch.device:
    """``device`` as a torch.device this machine has, or a ValueError naming it."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"device must be a device name such as 'cpu' or 'cuda', or a torch.device, got {device!r}"
        ) from None
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(device.type, True):
        raise ValueError(f"device {str(device)!r} is not available on this machine: use lab.pick_device()")
    return device


def _randn(seed: int, *shapes: tuple[int, ...], dtype: torch.dtype, device) -> list[torch.Tensor]:
    """Seeded normal tensors (drawn on the CPU: every device sees the same numbers); bad arguments get one sentence."""
    seed = _check_seed(seed)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch dtype such as torch.float32, got {dtype!r}")
    device = _device(device)
    for shape in shapes:
        if shape[0] * shape[1] > MAX_NUMBERS:
            raise ValueError(
                f"a {shape[0]} x {shape[1]} tensor holds more than {MAX_NUMBERS:.0e} numbers: check the sizes"
            )
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).to(device) for s in shapes]


def lecture_data(
    N: int = 64, D_in: int = 1000, D_out: int = 10, *, seed: int = 0, dtype: torch.dtype = torch.float32, device="cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lecture's random inputs x (N, D_in) and targets y (N, D_out). Example: ``lecture_data()``."""
    N, D_in, D_out = _size(N, "N"), _size(D_in, "D_in"), _size(D_out, "D_out")
    return tuple(_randn(seed, (N, D_in), (N, D_out), dtype=dtype, device=device))


def lecture_weights(
    D_in: int = 1000,
    H: int = 100,
    D_out: int = 10,
    *,
    seed: int = 1,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    requires_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lecture's random initial weights w1 (D_in, H), w2 (H, D_out). Example: ``lecture_weights()``."""
    D_in, H, D_out = _size(D_in, "D_in"), _size(H, "H"), _size(D_out, "D_out")
    if not isinstance(requires_grad, bool):
        raise TypeError(f"requires_grad must be True or False, got {requires_grad!r}")
    w1, w2 = _randn(seed, (D_in, H), (H, D_out), dtype=dtype, device=device)
    return w1.requires_grad_(requires_grad), w2.requires_grad_(requires_grad)


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits: images (1797, 1, 8, 8) in [0, 1], labels (1797,). Example: see DigitsDataset."""
    csv = importlib.util.find_spec("sklearn").origin.rsplit("__init__.py", 1)[0] + "datasets/data/digits.csv.gz"
    data = torch.tensor(np.loadtxt(csv, delimiter=","), dtype=torch.float32)  # not importing scikit-learn: seconds
    return data[:, :-1].reshape(-1, 1, 8, 8) / 16.0, data[:, -1].long()


def digits_split(n: int, val_fraction: float = 0.2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded split of range(n) into sorted train and validation indices. Example: ``digits_split(10)``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TypeError(f"n must be the number of items to split (a whole number >= 1), got {n!r:.40}")
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction!r:.40}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = int(round(n * val_fraction))
    return perm[n_val:].sort().values, perm[:n_val].sort().values


class DigitsDataset(Dataset):
    """The digits as a map-style Dataset of (image (1, 8, 8), int label); split is
    "train", "val" or "all". Example: ``len(DigitsDataset("val"))`` is 359."""

    def __init__(
        self,
        split: str = "train",
        *,
        val_fraction: float = 0.2,
        seed: int = 0,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if split not in ("train", "val", "all"):
            raise ValueError(f"split must be 'train', 'val' or 'all', got {split!r}")
        self.images, self.labels = load_digits_tensors()
        if split != "all":
            idx = digits_split(len(self.labels), val_fraction, seed)[split == "val"]
            self.images, self.labels = self.images[idx], self.labels[idx]
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be a function of an image (or None), got {type(transform).__name__}")
        self.split, self.transform = split, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        if self.transform is not None:
            image = _transformed(self.transform, image, index)
        return image, int(self.labels[index])


#: Seconds one call of a DigitsDataset transform may take before it is stopped.
TRANSFORM_LIMIT = 10.0


def _transformed(transform: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, index: int) -> torch.Tensor:
    """``transform(image)``, stopped with a TimeoutError after TRANSFORM_LIMIT s; where a time limit
    already runs (time_loader, a check), that one stays in charge."""
    import signal

    from .checks.running import stopped_after

    if hasattr(signal, "getitimer") and signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        return transform(image)
    why = "a transform that never returns (a loop whose condition never changes?)"
    with stopped_after(TRANSFORM_LIMIT, f"the transform of item {index}", why):
        return transform(image)

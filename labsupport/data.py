"""Data the notebooks share: the lecture's random regression problem and real
handwritten digits that need no download.

Example:
    >>> x, y = lecture_data()
    >>> x.shape, y.shape
    (torch.Size([64, 1000]), torch.Size([64, 10]))
    >>> train = DigitsDataset("train")
    >>> image, label = train[0]
    >>> image.shape, type(label)
    (torch.Size([1, 8, 8]), <class 'int'>)
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.data import Dataset

__all__ = ["LECTURE_SIZES", "lecture_data", "lecture_weights", "load_digits_tensors",
           "digits_split", "DigitsDataset"]

#: The lecture's sizes: batch N, input D_in, hidden H, output D_out.
LECTURE_SIZES = {"N": 64, "D_in": 1000, "H": 100, "D_out": 10}


def lecture_data(N: int = 64, D_in: int = 1000, D_out: int = 10, *, seed: int = 0,
                 dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The lecture's random inputs ``x`` (N, D_in) and targets ``y`` (N, D_out).

    Drawn on the CPU from a generator seeded with ``seed`` and then moved to
    ``device``, so every device sees the same numbers.

    Example:
        >>> x, y = lecture_data(N=4, D_in=3, D_out=2)
        >>> x.shape
        torch.Size([4, 3])
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D_in, generator=g, dtype=dtype)
    y = torch.randn(N, D_out, generator=g, dtype=dtype)
    return x.to(device), y.to(device)


def lecture_weights(D_in: int = 1000, H: int = 100, D_out: int = 10, *, seed: int = 1,
                    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                    requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The lecture's random initial weights ``w1`` (D_in, H) and ``w2`` (H, D_out).

    Example:
        >>> w1, w2 = lecture_weights(D_in=3, H=5, D_out=2)
        >>> w1.shape, w2.shape
        (torch.Size([3, 5]), torch.Size([5, 2]))
    """
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(D_in, H, generator=g, dtype=dtype).to(device)
    w2 = torch.randn(H, D_out, generator=g, dtype=dtype).to(device)
    return w1.requires_grad_(requires_grad), w2.requires_grad_(requires_grad)


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 of scikit-learn's bundled 8x8 digits: images (1797, 1, 8, 8) in
    [0, 1] as float32, labels (1797,) as int64. Ships with scikit-learn: no network.

    Example:
        >>> images, labels = load_digits_tensors()
        >>> images.shape, labels.shape
        (torch.Size([1797, 1, 8, 8]), torch.Size([1797]))
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(bunch.target, dtype=torch.int64)
    return images, labels


def digits_split(n: int, val_fraction: float = 0.2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random split of ``range(n)`` into train and validation indices.

    Example:
        >>> train_idx, val_idx = digits_split(10, 0.2)
        >>> len(train_idx), len(val_idx)
        (8, 2)
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = int(round(n * val_fraction))
    return perm[n_val:].sort().values, perm[:n_val].sort().values


class DigitsDataset(Dataset):
    """scikit-learn's handwritten digits as a map-style Dataset.

    ``split`` is ``"train"``, ``"val"`` or ``"all"``; the split is a seeded
    random permutation (``val_fraction``, ``seed``). Items are
    ``(image, label)`` with ``image`` a float32 tensor (1, 8, 8) in [0, 1]
    after ``transform`` (if given) and ``label`` an int.

    Example:
        >>> ds = DigitsDataset("val")
        >>> len(ds)
        359
    """

    def __init__(self, split: str = "train", *, val_fraction: float = 0.2, seed: int = 0,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        if split not in ("train", "val", "all"):
            raise ValueError(f"split must be 'train', 'val' or 'all', got {split!r}")
        images, labels = load_digits_tensors()
        if split != "all":
            train_idx, val_idx = digits_split(len(labels), val_fraction, seed)
            idx = train_idx if split == "train" else val_idx
            images, labels = images[idx], labels[idx]
        self.images, self.labels = images, labels
        self.transform = transform
        self.split = split

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])

    def __repr__(self) -> str:
        return f"DigitsDataset(split={self.split!r}, n={len(self)})"

"""Seeding: one call makes a notebook's randomness repeatable.

Example:
    >>> import labsupport as lab
    >>> lab.seed_everything(0)
    0
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["seed_everything", "make_generator"]


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**32:
        raise ValueError(f"a seed must be a whole number in [0, 2**32), got {seed!r}")
    return int(seed)


def seed_everything(seed: int = 0) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and every GPU); returns the seed.

    Example:
        >>> seed_everything(42)
        42
    """
    seed = _check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    os.environ.setdefault("PYTHONHASHSEED", str(seed))  # for subprocesses we start
    return seed


def make_generator(seed: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``: give it to a DataLoader or
    ``torch.randn(..., generator=g)`` so a cell's numbers do not depend on earlier cells.

    Example:
        >>> torch.equal(torch.rand(3, generator=make_generator(1)), torch.rand(3, generator=make_generator(1)))
        True
    """
    return torch.Generator().manual_seed(_check_seed(seed))

"""Seeding: one call makes a notebook's randomness repeatable.

Example:
    >>> import labsupport as lab
    >>> lab.seed_everything(0)
    0
    >>> g = lab.make_generator(0)          # pass to DataLoader(generator=g)
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["seed_everything", "make_generator", "seed_worker"]


def _check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
    if not 0 <= int(seed) < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return int(seed)


def seed_everything(seed: int = 0, *, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and every GPU).

    With ``deterministic=True`` torch is also asked to pick deterministic
    kernels (slower on GPU; raises where no deterministic kernel exists).
    Returns the seed, so ``seed = lab.seed_everything(0)`` reads naturally.

    Example:
        >>> seed_everything(42)
        42
    """
    seed = _check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    os.environ.setdefault("PYTHONHASHSEED", str(seed))  # for subprocesses we start
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    return seed


def make_generator(seed: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``.

    Give it to ``DataLoader(..., generator=g)`` or ``random_split`` so the
    shuffling order does not depend on how much randomness earlier cells used.

    Example:
        >>> g = make_generator(1)
        >>> torch.randperm(3, generator=g).tolist() == torch.randperm(3, generator=make_generator(1)).tolist()
        True
    """
    g = torch.Generator()
    g.manual_seed(_check_seed(seed))
    return g


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` for DataLoader workers: seeds NumPy and ``random``
    from the seed torch already gave the worker, so augmentations repeat.

    Example:
        >>> # DataLoader(ds, num_workers=2, worker_init_fn=seed_worker, generator=make_generator(0))
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)

"""Small training helpers for notebooks that have already written the loop by hand
(notebook 07 teaches it; 08 and 10 reuse it from here).

Example:
    >>> import torch, labsupport as lab
    >>> train, val = lab.digits_loaders(batch_size=64)
    >>> model = lab.DigitsCNN()
    >>> opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    >>> history = lab.fit(model, train, opt, epochs=1)          # doctest: +SKIP
    >>> lab.evaluate(model, val) > 0.5                            # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from .data import DigitsDataset
from .seeding import make_generator

__all__ = ["digits_loaders", "fit", "evaluate"]


def digits_loaders(batch_size: int = 64, *, seed: int = 0, val_fraction: float = 0.2,
                   train_transform: Callable | None = None,
                   num_workers: int = 0) -> tuple[DataLoader, DataLoader]:
    """Train and validation DataLoaders over :class:`DigitsDataset`, shuffled by a
    seeded generator (the training order is the same on every run).

    Example:
        >>> train, val = digits_loaders(32)
        >>> len(train.dataset), len(val.dataset)
        (1438, 359)
    """
    train = DigitsDataset("train", val_fraction=val_fraction, seed=seed, transform=train_transform)
    val = DigitsDataset("val", val_fraction=val_fraction, seed=seed)
    return (DataLoader(train, batch_size=batch_size, shuffle=True, generator=make_generator(seed),
                       num_workers=num_workers),
            DataLoader(val, batch_size=256, shuffle=False, num_workers=num_workers))


def fit(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, *, epochs: int = 1,
        device: torch.device | str = "cpu", loss_fn: Callable = F.cross_entropy,
        writer=None, progress: bool = False) -> list[float]:
    """Train ``model`` for ``epochs`` over ``loader``; return the loss of every step.

    Each step: batch to ``device``, forward, loss, ``zero_grad``, ``backward``,
    ``step``. With a TensorBoard ``writer`` the loss is logged per step under
    ``loss/train``; with ``progress`` a tqdm bar shows the epochs.

    Example:
        >>> from labsupport.models import DigitsCNN
        >>> model = DigitsCNN()
        >>> losses = fit(model, digits_loaders()[0], torch.optim.SGD(model.parameters(), lr=0.1))
        >>> len(losses)      # one loss per batch: 1438 images in batches of 64
        23
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    model.to(device).train()
    losses: list[float] = []
    epoch_iter = range(epochs)
    if progress:
        from tqdm.auto import tqdm
        epoch_iter = tqdm(epoch_iter, desc="epochs")
    for _ in epoch_iter:
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            loss = loss_fn(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if writer is not None:
                writer.add_scalar("loss/train", losses[-1], len(losses) - 1)
    return losses


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device | str = "cpu") -> float:
    """Classification accuracy of ``model`` over ``loader`` (in eval mode, no gradients).

    Example:
        >>> from labsupport.models import DigitsCNN
        >>> 0.0 <= evaluate(DigitsCNN(), digits_loaders()[1]) <= 1.0
        True
    """
    was_training = model.training
    model.to(device).eval()
    correct = total = 0
    for inputs, targets in loader:
        preds = model(inputs.to(device)).argmax(dim=1)
        correct += int((preds == targets.to(device)).sum())
        total += len(targets)
    model.train(was_training)
    if total == 0:
        raise ValueError("the loader is empty")
    return correct / total

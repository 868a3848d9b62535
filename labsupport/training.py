"""The training loop for notebooks 08 and 10. ``fit`` is notebook 07's cell ``def fit`` (section 1),
kept identical by tests/test_training_logs.py; ``evaluate`` measures accuracy only (it is not 07's
Exercise 1, which students write). Both answer a bad argument with one sentence."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from .data import DigitsDataset
from .seeding import make_generator

__all__ = ["digits_loaders", "fit", "evaluate"]

_RULES = {  # argument -> (is it right?, what it must be); other arguments meet PyTorch's own errors
    "model": (lambda v: isinstance(v, nn.Module), "an nn.Module"),
    "loader": (lambda v: hasattr(v, "__iter__") and not isinstance(v, (str, torch.Tensor)), "a DataLoader"),
    "optimizer": (lambda v: isinstance(v, torch.optim.Optimizer), "a torch.optim optimizer"),
    "epochs": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1")}


def _refuse_bad_arguments(fn: Callable) -> Callable:
    """Answer a bad argument with one sentence before ``fn`` starts."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        for name, value in inspect.signature(fn).bind(*args, **kwargs).arguments.items():
            ok, want = _RULES.get(name, (lambda v: True, ""))
            if not ok(value):
                error = ValueError if isinstance(value, int) and name == "epochs" else TypeError
                raise error(f"{fn.__name__}: {name} must be {want}, got {type(value).__name__} {value!r:.60}")
        return fn(*args, **kwargs)
    return run


def digits_loaders(batch_size: int = 64, *, seed: int = 0, train_transform: Callable | None = None,
                   num_workers: int = 0) -> tuple[DataLoader, DataLoader]:
    """Train (shuffled by a seeded generator) and validation loaders over lab.DigitsDataset."""
    return (DataLoader(DigitsDataset("train", seed=seed, transform=train_transform), batch_size, shuffle=True,
                       generator=make_generator(seed), num_workers=num_workers),
            DataLoader(DigitsDataset("val", seed=seed), 256, num_workers=num_workers))


@_refuse_bad_arguments
def fit(model, loader, optimizer, epochs=1, device="cpu", loss_fn=F.cross_entropy, writer=None):
    """Train model for epochs over loader; return the loss of every step."""
    model.to(device).train()
    losses = []
    for epoch in range(epochs):
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


@_refuse_bad_arguments
@torch.no_grad()
def evaluate(model: nn.Module, loader: Any, device: torch.device | str = "cpu") -> float:
    """Accuracy of ``model`` over ``loader``, measured in eval mode (its mode is restored)."""
    was_training, hits, seen, _ = model.training, 0, 0, model.to(device).eval()
    for inputs, targets in loader:
        hits += int((model(inputs.to(device)).argmax(dim=1) == targets.to(device)).sum())
        seen += len(targets)
    model.train(was_training)
    if seen == 0:
        raise ValueError("evaluate: the loader gave no batches, so there is no accuracy to measure")
    return hits / seen

"""The training loop for notebooks 08 and 10. ``fit`` is notebook 07's cell ``def fit`` (section 1),
kept identical by tests/test_training_logs.py; ``evaluate`` measures accuracy only (it is not 07's
Exercise 1, which students write). Both answer a bad argument with one sentence."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from .data import DigitsDataset
from .seeding import make_generator

__all__ = ["digits_loaders", "fit", "evaluate"]


def _is_model(value: Any) -> bool:
    return isinstance(value, nn.Module)


def _is_loader(value: Any) -> bool:
    return hasattr(value, "__iter__") and not isinstance(value, (str, bytes, torch.Tensor))


def _is_optimizer(value: Any) -> bool:
    return isinstance(value, torch.optim.Optimizer)


def _is_epochs(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_loss_fn(value: Any) -> bool:
    return callable(value)


def _is_writer(value: Any) -> bool:
    return value is None or callable(getattr(value, "add_scalar", None))


@dataclasses.dataclass(frozen=True)
class _Rule:
    """What an argument must be: a test, and the words for it."""

    test: Callable[[Any], bool]
    want: str


_RULES = {  # argument -> its rule; `device` is checked by _device_problem
    "model": _Rule(_is_model, "an nn.Module"),
    "loader": _Rule(_is_loader, "a DataLoader"),
    "optimizer": _Rule(_is_optimizer, "a torch.optim optimizer"),
    "epochs": _Rule(_is_epochs, "a whole number >= 1"),
    "loss_fn": _Rule(_is_loss_fn, "a function of (outputs, targets), such as F.cross_entropy"),
    "writer": _Rule(_is_writer, "None or a SummaryWriter (something with add_scalar)"),
}


def _device_problem(value: Any) -> str | None:
    """Why ``value`` cannot serve as a device here, or None."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return f"a device such as 'cpu' or 'cuda', got {type(value).__name__} {value!r:.40}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"a device of this machine, got {str(device)!r}: there is no CUDA GPU here (lab.pick_device() picks one)"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return (
            f"a device of this machine, got {str(device)!r}: there is no Apple GPU here (lab.pick_device() picks one)"
        )
    if device.type == "meta":
        return "a real device, got 'meta', which holds no values"
    return None


def _argument_error(owner: str, name: str, value: Any) -> Exception | None:
    """The one-sentence error for a bad argument ``name`` of ``owner``, or None."""
    if name == "device":
        problem = _device_problem(value)
        if problem is None:
            return None
        return ValueError(f"{owner}: device must be {problem}")
    rule = _RULES.get(name)
    if rule is None or rule.test(value):
        return None
    message = f"{owner}: {name} must be {rule.want}, got {type(value).__name__} {value!r:.60}"
    if name == "epochs" and isinstance(value, int) and not isinstance(value, bool):
        return ValueError(message)
    return TypeError(message)


class _CheckedBatches:
    """A loader whose batches must be (inputs, targets) pairs of tensors; anything else gets one sentence."""

    def __init__(self, loader: Any, owner: str) -> None:
        self.loader = loader
        self.owner = owner

    def __iter__(self) -> Any:
        for batch in self.loader:
            is_pair = isinstance(batch, (tuple, list)) and len(batch) == 2
            if not is_pair or not all(isinstance(part, torch.Tensor) for part in batch):
                raise TypeError(
                    f"{self.owner}: each batch of the loader must be a pair (inputs, targets) of tensors, "
                    f"got {type(batch).__name__} {batch!r:.60}"
                )
            yield batch


def _refuse_bad_arguments(fn: Callable) -> Callable:
    """Answer a bad argument with one sentence before ``fn`` starts; check each batch as it comes."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{fn.__name__}{inspect.signature(fn)} was called wrongly: {exc}") from None
        for name, value in bound.arguments.items():
            error = _argument_error(fn.__name__, name, value)
            if error is not None:
                raise error
        bound.arguments["loader"] = _CheckedBatches(bound.arguments["loader"], fn.__name__)
        return fn(*bound.args, **bound.kwargs)

    return run


def _expect_whole(owner: str, name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{owner}: {name} must be a whole number >= {minimum}, got {type(value).__name__} {value!r:.40}"
        )
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be a whole number >= {minimum}, got {value}")


def digits_loaders(
    batch_size: int = 64, *, seed: int = 0, train_transform: Callable | None = None, num_workers: int = 0
) -> tuple[DataLoader, DataLoader]:
    """Train (shuffled by a seeded generator) and validation loaders over lab.DigitsDataset."""
    _expect_whole("digits_loaders", "batch_size", batch_size, 1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"digits_loaders: seed must be a whole number, got {type(seed).__name__} {seed!r:.40}")
    _expect_whole("digits_loaders", "num_workers", num_workers, 0)
    if train_transform is not None and not callable(train_transform):
        raise TypeError(
            f"digits_loaders: train_transform must be None or a function of an image, got {type(train_transform).__name__}"
        )
    train = DigitsDataset("train", seed=seed, transform=train_transform)
    val = DigitsDataset("val", seed=seed)
    train_loader = DataLoader(train, batch_size, shuffle=True, generator=make_generator(seed), num_workers=num_workers)
    return train_loader, DataLoader(val, 256, num_workers=num_workers)


@_refuse_bad_arguments
def fit(model, loader, optimizer, epochs=1, device="cpu", loss_fn=F.cross_entropy, writer=None):
    """Train model for epochs over loader; return the loss of every step."""
    model.to(device).train()
    losses = []
    for epoch in range(epochs):  # noqa: B007  (as notebook 07 teaches it)
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
    was_training = model.training
    model.to(device).eval()
    hits = 0
    seen = 0
    for inputs, targets in loader:
        hits += int((model(inputs.to(device)).argmax(dim=1) == targets.to(device)).sum())
        seen += len(targets)
    model.train(was_training)
    if seen == 0:
        raise ValueError("evaluate: the loader gave no batches, so there is no accuracy to measure")
    return hits / seen

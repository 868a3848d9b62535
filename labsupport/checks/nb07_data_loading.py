"""Checks of notebook 07: evaluate and train (07.1), do workers help (07.2, predicted, then
measured), and the capstone on digits the student's code never sees (07.3)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import dis
import inspect
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:
    import resource
except ImportError:  # Windows: the children's CPU time is not counted
    resource = None

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..data import digits_split, load_digits_tensors
from ..device import pick_device
from ..slowdata import worker_speedup
from . import running
from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_function,
    expect_tensor,
    first_mistake,
    fmt,
    mistake_error,
    passed,
    plain_tensor,
    read_prediction,
    run_student,
)
from .running import FLOAT_TARGETS, empty_body, failing_line

__all__ = ["check_training_loop", "check_workers_prediction", "check_capstone"]

#: The capstone's target (accuracy on the held-out digits, distorted) and budget (CPU seconds on one thread).
TARGET = 0.94
BUDGET = 30.0
# 07.1: epochs of the student's train; neither 2 nor the notebook's 10, so a train that writes its own epoch
# count instead of using the epochs argument runs another number of epochs than it was given
EPOCHS = 3


@dataclasses.dataclass(frozen=True)
class Near:
    """A known wrong value (a number or a list of numbers), matched within a relative tolerance."""

    value: Any
    rel: float = 1e-4

    def __call__(self, got: Any) -> bool:
        want = torch.as_tensor(self.value, dtype=torch.float64).flatten()
        have = torch.as_tensor(got, dtype=torch.float64).flatten()
        if want.shape != have.shape:
            return False
        return bool(torch.allclose(have, want, rtol=self.rel, atol=1e-6))


def _numbers(values: Any, name: str, count: int, hint: str) -> list[float]:
    """``count`` plain numbers from a list or tuple (0-d tensors and numpy scalars are converted)."""
    __tracebackhide__ = True
    values = _readable(values)
    if isinstance(values, torch.Tensor) and values.dim() == 1 and values.device.type != "meta":
        values = list(values.detach().cpu().unbind())
    if type(values).__module__ == "numpy" and getattr(values, "ndim", None) == 1:
        values = values.tolist()  # np.array(the list): the same numbers
    if not isinstance(values, (list, tuple)):
        raise CheckError(f"{name} must be a list of numbers", got=_description(values), hint=hint, usage=True)
    if len(values) != count:
        raise CheckError(f"{name} has {len(values)} entries", expected=f"{count}", got=f"{len(values)}", hint=hint)
    return [float(as_number(value, f"{name}[{i}]")) for i, value in enumerate(values)]


def _judge(
    name: str, got: Sequence[float], want: Sequence[float], mistakes: Sequence[Mistake], where: str = ""
) -> None:
    """Compare a list of numbers with the reference's; name the first known mistake it matches."""
    __tracebackhide__ = True
    got_t = torch.tensor(list(got), dtype=torch.float64)
    want_t = torch.tensor(list(want), dtype=torch.float64)
    try:
        compare(name, got_t, want_t, rtol=1e-4, atol=1e-6, where=where)
    except CheckError as err:
        mistake = first_mistake(list(got), mistakes)
        if mistake is None:
            raise
        raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None


# ---------------------------------------------------------------- running the student's code: what it may leave


@contextlib.contextmanager
def _settings_kept() -> Iterator[None]:
    """Run the block with autograd on, and give the kernel back its autograd switch and default dtype as they were:
    a student's ``torch.set_grad_enabled(False)`` or ``torch.set_default_dtype(...)`` leaks out of their function,
    and would break the check's own computations, and this check's next run on a corrected answer."""
    dtype = torch.get_default_dtype()
    try:
        with torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


def _not_a_generator(result: Any, name: str) -> None:
    """A sentence for a function that gave back a generator: a `yield` in it, so calling it ran none of its body."""
    __tracebackhide__ = True
    if inspect.isgenerator(result):
        raise CheckError(
            f"{name} returned a generator: a `yield` in its body makes it a generator function, and calling one runs "
            "none of its lines until something iterates over what it returns",
            got="generator",
            hint="hand the result back with `return`, not `yield`",
            usage=True,
        )


def _items(result: Any, count: int) -> tuple | None:
    """The ``count`` items of a tuple or list, or None when ``result`` is no such sequence (or one that cannot be
    read: a length or an iteration that raises)."""
    if not isinstance(result, (tuple, list)):
        return None
    try:
        items = tuple(result)
    except Exception:  # a sequence of the student's own that raises when read
        return None
    return items if len(items) == count else None


def _readable(value: Any) -> Any:
    """A tensor subclass as a plain tensor (its overrides cannot answer for it); anything else unchanged."""
    return plain_tensor(value) if isinstance(value, torch.Tensor) else value


def _description(value: Any) -> str:
    """describe(value), or the type's name where describing it raises (a __len__ of the student's own)."""
    try:
        return describe(_readable(value))
    except Exception:  # a value of the student's own whose length or shape cannot be read
        return type(value).__name__


# ---------------------------------------------------------------- 07.1 evaluate and train


def _loader(seed: int, n: int) -> DataLoader:
    """Random 8x8 'digits' in batches of 32: the last batch is short, so batch means mislead."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 1, 8, 8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    return DataLoader(TensorDataset(images, labels), batch_size=32)


def _loop_model() -> nn.Module:
    """A small network with batch norm (so the mode matters), the same on every call."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(72)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    return model.to(pick_device())


@dataclasses.dataclass
class Measured:
    """What the check's own evaluate found, image by image and batch by batch."""

    loss: float
    acc: float
    loss_sum: float
    correct: int
    batch_losses: list[float]
    batch_accs: list[float]
    slots: int = 0  # len(loader) * loader.batch_size: more than the images when the last batch is short
    images: int = 0
    raw_nll_sum: float = 0.0  # F.nll_loss on the raw scores, summed: minus the labels' scores
    softmax_sum: float = 0.0  # cross_entropy of softmax(logits), summed
    broadcast_correct: int = 0  # (argmax(keepdim=True) == labels).sum(): (B, 1) against (B,) compares B x B pairs
    uniform_sum: float = 0.0  # -log_softmax averaged over the classes, summed: label smoothing's other term


@torch.no_grad()
def _measure(model: nn.Module, loader: DataLoader) -> Measured:
    """The reference evaluate: per-image means in eval mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    device = pick_device()
    loss_sum, correct, total, raw_nll_sum, softmax_sum = 0.0, 0, 0, 0.0, 0.0
    broadcast_correct, uniform_sum = 0, 0.0
    batch_losses, batch_accs = [], []
    for images, labels in loader:
        logits = model(images.to(device))
        labels = labels.to(device)
        losses = F.cross_entropy(logits, labels, reduction="none")
        right = int((logits.argmax(dim=1) == labels).sum())
        broadcast_correct += int((logits.argmax(dim=1, keepdim=True) == labels).sum())
        loss_sum += float(losses.sum())
        raw_nll_sum += float(F.nll_loss(logits, labels, reduction="sum"))
        softmax_sum += float(F.cross_entropy(F.softmax(logits, dim=1), labels, reduction="sum"))
        uniform_sum += float(-F.log_softmax(logits, dim=1).mean(dim=1).sum())
        correct += right
        total += len(labels)
        batch_losses.append(float(losses.mean()))
        batch_accs.append(right / len(labels))
    model.train(was_training)
    slots = len(loader) * (loader.batch_size or 1)
    return Measured(
        loss=loss_sum / total,
        acc=correct / total,
        loss_sum=loss_sum,
        correct=correct,
        batch_losses=batch_losses,
        batch_accs=batch_accs,
        slots=slots,
        images=total,
        raw_nll_sum=raw_nll_sum,
        softmax_sum=softmax_sum,
        broadcast_correct=broadcast_correct,
        uniform_sum=uniform_sum,
    )


def _loss_mistakes(m: Measured) -> list[Mistake]:
    batches = len(m.batch_losses)
    return [
        Mistake(
            "mean of batch means",
            Near(sum(m.batch_losses) / batches),
            "the mean of the batch means weighs the short last batch like a full one: the mean asked for is over "
            "the images, each counting once",
            look="what the loop adds up per batch, and what it divides by at the end",
        ),
        Mistake(
            "loss summed, not averaged",
            Near(m.loss_sum),
            "that is the sum of the per-image losses, not their mean",
            look="what evaluate returns as the loss",
        ),
        Mistake(
            "one batch only",
            Near(m.batch_losses[-1]),
            "that is the last batch's loss alone: a variable is overwritten, not added to, in the loop",
        ),
        Mistake(
            "first batch only",
            Near(m.batch_losses[0]),
            "that is the first batch's loss alone: is the `return` inside the loop?",
        ),
        Mistake(
            "batch means divided by the image count",
            Near(sum(m.batch_losses) / m.images),
            "the batch means were added up, then divided by the number of images: a batch mean already divides by "
            "its batch's size, so the images are divided out twice",
        ),
        Mistake(
            "batch means times loader.batch_size",
            Near(sum(m.batch_losses) * (m.slots / batches) / m.images),
            "each batch mean was multiplied by loader.batch_size, but the last batch is short: its loss was "
            "counted as if it held a full batch of images",
            look="what each batch's mean loss is multiplied by",
        ),
        Mistake(
            "loss divided by batches times batch size",
            Near(m.loss_sum / m.slots) if m.slots else None,
            "the summed loss was divided by the number of batches times loader.batch_size, but the last batch is "
            "short, so that product is more than the number of images",
            look="what the summed loss is divided by",
        ),
        Mistake(
            "loss divided by the number of batches",
            Near(m.loss_sum / batches),
            "the summed loss was divided by the number of batches (len(loader)): the mean asked for is per image",
            look="what the summed loss is divided by",
        ),
        *_loss_function_mistakes(m),
    ]


def _loss_function_mistakes(m: Measured) -> list[Mistake]:
    """Per-image means of a wrong loss function: the averaging is right, what is averaged is not."""
    return [
        Mistake(
            "nll_loss on raw scores",
            Near(m.raw_nll_sum / m.images),
            "F.nll_loss expects log-probabilities, but it was given the raw scores (logits): it only negates the "
            "label's score, so the 'loss' can even be negative; F.cross_entropy takes the raw scores",
            look="what F.nll_loss is given",
        ),
        Mistake(
            "softmax before the loss",
            Near(m.softmax_sum / m.images),
            "a softmax was applied before cross_entropy, which takes the raw scores (logits) and applies "
            "log-softmax itself: the probabilities went through a softmax twice, which squeezes every loss "
            "toward log(10)",
            look="what evaluate gives cross_entropy",
        ),
        Mistake(
            "label smoothing in evaluate",
            _smoothed([m]),
            "the loss evaluate measures is label-smoothed: it blends each image's cross-entropy with its loss "
            "against all ten classes alike, so it is not the cross-entropy of the model's predictions. Smoothing is "
            "a way to train; a validation loss measures the model against the true labels only",
            look="evaluate: the arguments of the loss it sums",
        ),
    ]


@dataclasses.dataclass(frozen=True)
class _Smoothed:
    """Per-image mean losses (one, or one per epoch) that are cross-entropy with label smoothing:
    (1 - eps) * ce + eps * uniform, for one smoothing eps in (0, 0.5] written with two decimals (0.1, 0.05)."""

    ce: tuple[float, ...]  # the plain cross-entropy, per image
    uniform: tuple[float, ...]  # the mean over the classes of -log p, per image

    def __call__(self, got: Any) -> bool:
        values = list(got) if isinstance(got, (list, tuple)) else [got]
        if len(values) != len(self.ce) or not all(isinstance(v, (int, float)) for v in values):
            return False
        pairs = [(v, c, u) for v, c, u in zip(values, self.ce, self.uniform) if abs(u - c) > 1e-3]
        if not pairs:
            return False
        eps = [(v - c) / (u - c) for v, c, u in pairs]
        first = round(eps[0], 2)
        return 0.005 < first <= 0.5 and all(abs(e - first) < 0.002 for e in eps)


def _smoothed(measured: Sequence[Measured]) -> _Smoothed:
    """The label-smoothed losses of these evaluations, for any smoothing."""
    return _Smoothed(tuple(m.loss_sum / m.images for m in measured), tuple(m.uniform_sum / m.images for m in measured))


def _acc_mistakes(m: Measured) -> list[Mistake]:
    return [
        Mistake(
            "count, not fraction",
            Near(m.correct),
            "that is the number of right answers, not the share of the images they make up",
            look="what evaluate returns as the accuracy",
        ),
        Mistake("percent", Near(100 * m.acc), "that is a percentage: the accuracy is asked as a fraction in [0, 1]"),
        Mistake(
            "mean of batch accuracies",
            Near(sum(m.batch_accs) / len(m.batch_accs)),
            "the mean of the batch accuracies weighs the short last batch like a full one, though each image "
            "should count once",
        ),
        Mistake(
            "batch accuracies divided by the image count",
            Near(sum(m.batch_accs) / m.images),
            "each batch's accuracy (a fraction) was added up, then divided by the number of images: a fraction "
            "already divides by its batch's size, so the images are divided out twice",
            look="what is added up per batch for the accuracy",
        ),
        Mistake("one batch only", Near(m.batch_accs[-1]), "that is the last batch's accuracy alone"),
        Mistake(
            "accuracy rounded down to 0",
            Near(0.0) if m.correct else None,
            f"the accuracy is exactly 0, yet the model gets {m.correct} of {m.images} images right: either what is "
            "compared with the labels are the largest scores themselves, not their positions (torch.max with a "
            "dim gives a pair, values first, indices second), or the count was divided with // (floor division), "
            "which rounds every fraction below 1 down to 0",
            look="evaluate: what is compared with the labels, and the division that makes the fraction",
        ),
        Mistake(
            "right answers divided by the number of batches",
            Near(m.correct / len(m.batch_accs)),
            "the count of right answers was divided by the number of batches (len(loader)): the accuracy is per "
            "image, right answers over the images counted",
            look="what the count of right answers is divided by",
        ),
        Mistake(
            "predictions of shape (B, 1) broadcast",
            Near(m.broadcast_correct / m.images),
            "the predictions keep a dimension of size 1 (argmax with keepdim=True, shape (B, 1)), and comparing "
            "them with the labels, shape (B,), broadcasts to a (B, B) table that checks every prediction against "
            "every label, so far more than one 'match' is counted per image; each prediction is compared with its "
            "own label, two tensors of the same shape",
            look="evaluate: the shapes of the two sides of the == that counts the right answers",
        ),
        Mistake(
            "divided by batches times batch size",
            Near(m.correct / m.slots) if m.slots else None,
            "the right answers were divided by the number of batches times the batch size, but the last batch is "
            "short, so that product is more than the number of images",
            look="what the count of right answers is divided by",
        ),
    ]


class _Spy:
    """Records the mode and grad state of every forward pass of one model."""

    def __init__(self, model: nn.Module) -> None:
        self.seen: list[tuple[bool, bool]] = []
        self.low_precision = 0  # passes whose output came in half precision (autocast)
        model.register_forward_hook(self._record)

    def _record(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self.seen.append((module.training, torch.is_grad_enabled()))
        if isinstance(output, torch.Tensor) and output.dtype in (torch.float16, torch.bfloat16):
            self.low_precision += 1


def _evaluate_mode_mistake(spy: _Spy, model: nn.Module) -> CheckError | None:
    """What evaluate did to the model's mode and to autograd, as the spy saw it."""
    if not spy.seen:
        return CheckError(
            "evaluate never ran the model",
            expected="one forward pass per batch",
            got="none",
            hint="loop over the loader and call model(images)",
            usage=True,
        )
    in_training = sum(1 for training, _ in spy.seen if training)
    if in_training:
        return mistake_error(
            f"{in_training} of evaluate's {len(spy.seen)} forward passes ran in training mode",
            Mistake(
                "model.eval() missing",
                None,
                "evaluate measured the model in training mode: batch norm normalised with each batch's own statistics",
                look="evaluate: which mode the model is in before its loop",
            ),
            expected="every forward pass in eval mode",
            got=f"{in_training} in training mode",
        )
    with_graph = sum(1 for _, grad in spy.seen if grad)
    if with_graph:
        return mistake_error(
            f"{with_graph} of evaluate's {len(spy.seen)} forward passes recorded a graph for backward",
            Mistake(
                "torch.no_grad() missing",
                None,
                "evaluate lets autograd record: measuring builds graphs nobody uses, which costs memory and time",
                look="evaluate: is autograd recording during its loop? (torch.no_grad)",
            ),
            expected="no graph (grad disabled)",
            got=f"{with_graph} with grad enabled",
        )
    if not model.training:
        return mistake_error(
            "after evaluate the model is still in eval mode",
            Mistake(
                "model.train() missing at the end",
                None,
                "evaluate leaves the model in eval mode, so the training that follows runs in it: evaluate is "
                "meant to hand the model back in training mode",
                look="evaluate: the model's mode when it returns",
            ),
            expected="training mode again",
            got="eval mode",
        )
    return None


def _check_evaluate(evaluate: Any) -> nn.Module:
    """Run the student's evaluate on a fresh batch-norm model; return the model (in training mode)."""
    __tracebackhide__ = True
    model = _loop_model()
    loader = _loader(1, 90)
    want = _measure(model, loader)
    spy = _Spy(model)
    result = run_student(evaluate, model, loader, what="evaluate(model, loader)")
    _not_a_generator(result, "evaluate")
    _grad_left_off("evaluate")
    mode_error = _evaluate_mode_mistake(spy, model)
    if mode_error is not None:
        raise mode_error
    pair = _items(result, 2)
    if pair is None:
        raise CheckError(
            "evaluate must return two numbers: (mean loss, accuracy)",
            got=_description(result),
            hint="end evaluate with a `return` of both numbers: the loss summed over the images divided by their "
            "number, and the share of the images classified right"
            if result is None
            else "return a tuple (loss, accuracy)",
            usage=True,
        )
    loss = float(as_number(pair[0], "evaluate's mean loss"))
    acc = float(as_number(pair[1], "evaluate's accuracy"))
    if Near(want.acc)(loss) and Near(want.loss)(acc):
        raise mistake_error(
            "evaluate's two numbers are in the wrong order",
            Mistake("loss and accuracy swapped", None, "return (mean loss, accuracy), in that order"),
            expected=f"({fmt(want.loss)}, {fmt(want.acc)})",
            got=f"({fmt(loss)}, {fmt(acc)})",
        )
    _judge("evaluate's mean loss", [loss], [want.loss], _loss_mistakes(want))
    _judge("evaluate's accuracy", [acc], [want.acc], _acc_mistakes(want))
    return model


GRAD_OFF_FOR_GOOD = Mistake(
    "autograd switched off for good",
    None,
    "torch.set_grad_enabled(False) written as a statement switches autograd off for the whole kernel, not for the "
    "lines below it: it stays off after the function returns, so every later forward pass (the next epoch's "
    "training, the next cell's) builds no graph, and backward() has nothing to go back through",
    look="where autograd is switched off for measuring, and what switches it on again",
)


def _grad_left_off(name: str) -> None:
    """The named mistake when the student's function returned with autograd switched off for the kernel (switched
    on again for the rest of the check)."""
    __tracebackhide__ = True
    if torch.is_grad_enabled():
        return
    torch.set_grad_enabled(True)
    raise mistake_error(
        f"after {name} returned, autograd was still switched off",
        GRAD_OFF_FOR_GOOD,
        expected="autograd on again once measuring is done",
        got="torch.is_grad_enabled() is False",
    )


class FakeWriter:
    """Stands in for a SummaryWriter: records every add_scalar as (tag, value, step); other
    add_* calls, flush and close are accepted and ignored."""

    def __init__(self) -> None:
        self.logged: dict[str, list[tuple[Any, Any]]] = {}
        self.others: set[str] = set()  # the other add_* methods called (add_scalars, add_histogram, ...)

    def add_scalar(self, tag: Any, scalar_value: Any, global_step: Any = None, walltime: Any = None, **_: Any) -> None:
        self.logged.setdefault(str(tag), []).append((scalar_value, global_step))

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("add_"):
            self.others.add(name)
            return _ignore
        if name in ("flush", "close"):
            return _ignore
        raise AttributeError(
            f"the check's stand-in writer has no {name!r}: log with writer.add_scalar(tag, value, step)"
        )


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def _optimizer(model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and schedule of 07.1: the rate falls every 2 steps, so when it is logged matters."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)


def _flat_weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])


@dataclasses.dataclass
class Run:
    """One training run, as the check's own loop records it."""

    losses: list[float] = dataclasses.field(default_factory=list)  # one per step
    lrs: list[float] = dataclasses.field(default_factory=list)  # the rate each step used
    lrs_after: list[float] = dataclasses.field(default_factory=list)  # the rate after scheduler.step()
    get_lrs: list[float] = dataclasses.field(default_factory=list)  # scheduler.get_lr() where the rate is read
    train_accs: list[float] = dataclasses.field(default_factory=list)  # per epoch, over its images
    train_batch_accs: list[float] = dataclasses.field(default_factory=list)  # per epoch, mean of batch accuracies
    train_last_accs: list[float] = dataclasses.field(default_factory=list)  # per epoch, its last batch's accuracy
    train_correct: list[float] = dataclasses.field(default_factory=list)  # per epoch, a count
    val: list[Measured] = dataclasses.field(default_factory=list)  # per epoch
    val_before: Measured | None = None  # on val_loader before the first epoch: the untrained model
    remeasured: list[Measured] = dataclasses.field(default_factory=list)  # per epoch, on the training loader
    weights: torch.Tensor | None = None
    slots: int = 0  # len(loader) * loader.batch_size: more than an epoch's images when the last batch is short


def _reference_train(
    model: nn.Module,
    loader: DataLoader,
    val: DataLoader,
    *,
    zero_grad: str = "every batch",
    scheduler_first: bool = False,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Run:
    """The check's train (or a variant with a known mistake), written out as a student would. ``zero_grad``:
    "every batch", "every epoch" (before the batch loop) or "never"."""
    optimizer, scheduler = _optimizer(model)
    device = pick_device()
    run = Run(val_before=_measure(model, val), slots=len(loader) * (loader.batch_size or 1))
    for _ in range(EPOCHS):
        model.train()
        if zero_grad == "every epoch":
            optimizer.zero_grad()
        correct, seen, batch_accs = 0, 0, []
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            logits = model(images)
            loss = F.cross_entropy(logits, labels, reduction=reduction, label_smoothing=label_smoothing)
            if zero_grad == "every batch":
                optimizer.zero_grad()
            loss.backward()
            run.lrs.append(scheduler.get_last_lr()[0])
            run.get_lrs.append(_get_lr(scheduler))
            if scheduler_first:
                scheduler.step()
            optimizer.step()
            if not scheduler_first:
                scheduler.step()
            run.lrs_after.append(scheduler.get_last_lr()[0])
            run.losses.append(loss.item())
            right = int((logits.argmax(dim=1) == labels).sum())
            correct += right
            seen += len(labels)
            batch_accs.append(right / len(labels))
        run.train_accs.append(correct / seen)
        run.train_correct.append(correct)
        run.train_batch_accs.append(sum(batch_accs) / len(batch_accs))
        run.train_last_accs.append(batch_accs[-1])
        run.val.append(_measure(model, val))
        run.remeasured.append(_measure(model, loader))
    run.weights = _flat_weights(model)
    return run


def _get_lr(scheduler: Any) -> float:
    """What a student who logs ``scheduler.get_lr()[0]`` logs (torch warns about that call outside step())."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scheduler.get_lr()[0]


@dataclasses.dataclass
class StudentRun:
    """What the student's train did: its result, its logs, and the steps it took."""

    history: Any
    logged: dict[str, list[tuple[Any, Any]]]
    steps: int
    scheduler_steps: int
    seen: list[tuple[bool, bool]]
    weights: torch.Tensor
    scheduler_arguments: list = dataclasses.field(default_factory=list)  # what scheduler.step() was given, if any
    shrunk: int = 0  # optimizer steps taken on gradients made smaller after backward (clipped)
    low_precision: int = 0  # forward passes whose output came in half precision
    rate: float = math.nan  # the optimizer's learning rate when train returned
    initial_rate: float = math.nan  # and when train was called
    moved: bool = False  # the model's weights changed
    others: set[str] = dataclasses.field(default_factory=set)  # the writer's other add_* methods train called


STEP_BEFORE_BACKWARD = Mistake(
    "step() before backward()",
    None,
    "the weights changed in place between the forward pass and loss.backward(): optimizer.step() ran before "
    "backward(), while autograd still needed the old weights to compute this batch's gradients (and the step "
    "itself used the previous batch's gradients)",
    look="the order in train's batch loop: forward, zero_grad(), backward(), step()",
)


class _GradWatch:
    """Counts the optimizer steps taken on gradients made smaller between backward and step (clip_grad_norm_,
    clip_grad_value_, or a scaling by hand): the norm each parameter's gradient had when backward left it,
    against the norm the step finds."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.after_backward: dict[int, float] = {}
        self.shrunk = 0
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._accumulated)
        optimizer.register_step_pre_hook(self._stepping)

    def _accumulated(self, param: torch.Tensor) -> None:
        self.after_backward[id(param)] = float(param.grad.detach().double().square().sum())

    def _stepping(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"] if id(p) in self.after_backward]
        before = sum(self.after_backward[id(p)] for p in params)
        now = sum(float(p.grad.detach().double().square().sum()) for p in params if p.grad is not None)
        if 0 < now < before * (1 - 1e-4):
            self.shrunk += 1
        self.after_backward.clear()


LOW_PRECISION = Mistake(
    "forward passes in half precision",
    None,
    "the forward passes ran in half precision (autocast to bfloat16 or float16): every product is rounded to two "
    "or three significant digits, so the weights drift from those of the loop the prompt describes, in full "
    "precision, which the check compares them with. Mixed precision is a speed-up for large models on a GPU",
    look="train: what the forward pass and the loss run inside",
)
GRADIENTS_CLIPPED = Mistake(
    "gradients clipped",
    None,
    "the gradients were made smaller between loss.backward() and optimizer.step() (clipped, by clip_grad_norm_ or "
    "clip_grad_value_, or scaled), so the steps are not those of the loop the prompt describes, which steps on the "
    "gradients as backward() leaves them: the check compares the weights with that loop. Clipping is a remedy for "
    "exploding gradients, which this small network does not have",
    look="train: what runs between loss.backward() and optimizer.step()",
)


class _Count:
    """An optimizer step hook that counts the steps."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *args: Any) -> None:
        self.count += 1


def _student_train(train: Any, model: nn.Module, loader: DataLoader, val: DataLoader) -> StudentRun:
    __tracebackhide__ = True
    optimizer, scheduler = _optimizer(model)
    steps = _Count()
    optimizer.register_step_post_hook(steps)
    gradients = _GradWatch(model, optimizer)
    writer = FakeWriter()
    spy = _Spy(model)
    arguments = _record_step_arguments(scheduler)
    before = _flat_weights(model)
    data = [t.clone() for t in (*loader.dataset.tensors, *val.dataset.tensors)]
    what = "train(model, train_loader, val_loader, optimizer, scheduler, epochs, writer)"
    try:
        history = run_student(train, model, loader, val, optimizer, scheduler, EPOCHS, writer, what=what)
    except CheckError as err:
        if not err.usage and not torch.is_grad_enabled() and "does not require grad" in err.message:
            torch.set_grad_enabled(True)
            raise mistake_error(err.message, GRAD_OFF_FOR_GOOD) from None
        if err.usage or "modified by an inplace operation" not in err.message:
            raise
        raise mistake_error(err.message, STEP_BEFORE_BACKWARD) from None
    _not_a_generator(history, "train")
    _grad_left_off("train")
    sched = scheduler.last_epoch
    weights = _flat_weights(model)
    run = StudentRun(history, writer.logged, steps.count, sched, spy.seen, weights, arguments, gradients.shrunk)
    run.low_precision = spy.low_precision
    run.rate = float(optimizer.param_groups[0]["lr"])
    run.initial_rate = float(optimizer.defaults["lr"])
    run.moved = not torch.equal(before, weights)
    run.others = writer.others
    _loaders_unchanged(data, (loader, val))
    return run


LOADER_DATA_CHANGED = Mistake(
    "loader's data changed in place",
    None,
    "train changed the images or labels inside the loaders it was handed (an in-place operation on "
    "loader.dataset.tensors, or on a batch that is a view of them): the caller's data is not what it was, and the "
    "next run of train (another model, the next run of the cell) starts from data changed once more",
    look="every line of train that writes into the loaders' data or into a batch",
)


def _loaders_unchanged(data: list[torch.Tensor], loaders: tuple[DataLoader, DataLoader]) -> None:
    """The loaders' tensors as they were before train ran (``data``: copies taken then)."""
    __tracebackhide__ = True
    now = [t for loader in loaders for t in loader.dataset.tensors]
    if any(not torch.equal(a, b) for a, b in zip(data, now)):
        raise mistake_error(
            "after train, the data inside the loaders it was given had changed",
            LOADER_DATA_CHANGED,
            expected="the loaders' images and labels as they were handed over",
            got="changed in place",
        )


def _record_step_arguments(scheduler: Any) -> list:
    """Make ``scheduler.step`` record each value it is given (scheduler.step(loss), a ReduceLROnPlateau habit, or
    scheduler.step(epoch)); returns the list it records into."""
    arguments: list = []
    original = scheduler.step

    def step(*args: Any, **kwargs: Any) -> Any:
        given = [value for value in (*args, *kwargs.values()) if value is not None]
        arguments.extend(given)
        return original(*args, **kwargs)

    scheduler.step = step
    return arguments


SCHEDULER_GIVEN_A_VALUE = Mistake(
    "scheduler.step() given a value",
    None,
    "scheduler.step() was given a value: this scheduler takes none, and a number given to it is read as the epoch "
    "to jump to (an old, deprecated form), so the schedule follows that number instead of counting its own steps; "
    "a loss goes to ReduceLROnPlateau's step, not to this one's",
    look="train: the call of scheduler.step()",
)


WRONG_EPOCHS = Mistake(
    "epochs argument ignored",
    None,
    "train runs another number of epochs than it was given: the epoch loop takes its count from the epochs "
    "argument, not from a number written into train, a notebook variable, or a range that is off by one",
    look="train: the range of the epoch loop",
)


FIRST_EPOCH_ONLY = Mistake(
    "train stops after its first epoch",
    None,
    "train stops after its first epoch: its return runs in the first round of the epoch loop (a return indented "
    "into the loop's body), or the loop's count is not the epochs argument",
    look="train: the indentation of its return, and the range of the epoch loop",
)


BATCHES_SKIPPED = Mistake(
    "batches skipped in every epoch",
    None,
    "train ran all its epochs but each trained on fewer batches than the loader holds: the batch loop stops "
    "early (a break, a bound such as len(loader) - 1, or an index that skips the first or the last batch), so "
    "those images never train the model; a for loop over the loader itself visits every batch once",
    look="train: the batch loop, and anything that ends or skips it",
)


def _training_runs(seen: list[tuple[bool, bool]]) -> list[int]:
    """The lengths of the runs of training-mode forward passes, between the eval-mode passes of evaluate."""
    runs = [0]
    for training, _ in seen:
        if training:
            runs[-1] += 1
        elif runs[-1]:
            runs.append(0)
    return [r for r in runs if r]


def _short_epochs(seen: list[tuple[bool, bool]], per_epoch: int) -> CheckError | None:
    """EPOCHS epochs (told apart by evaluate's passes between them), each with the same number of batches, too few."""
    runs = _training_runs(seen)
    if len(runs) != EPOCHS or len(set(runs)) != 1 or runs[0] >= per_epoch:
        return None
    return mistake_error(
        f"each of train's {EPOCHS} epochs trained on {runs[0]} of the loader's {per_epoch} batches",
        BATCHES_SKIPPED,
        expected=f"{per_epoch} training steps per epoch",
        got=f"{runs[0]} per epoch",
    )


GIVEN_MODEL_NOT_TRAINED = Mistake(
    "another model trained",
    None,
    "not one forward pass with gradients went through the model train was handed: it trains another model (a copy "
    "made inside train, or a model of the notebook read by its name), or its batch loop does not call the model "
    "yet; the caller gets back the model it passed, untrained",
    look="train: the model its batch loop calls, and where that name comes from",
)
OWN_OPTIMIZER = Mistake(
    "an optimizer of its own",
    None,
    "the weights changed, but the optimizer train was handed never took a step: train made an optimizer of its own "
    "and steps that one, so the caller's choice of optimizer and settings, and the scheduler attached to it, play "
    "no part",
    look="train: where the optimizer it steps comes from",
)
OWN_SCHEDULER = Mistake(
    "a schedule of its own",
    None,
    "the learning rate changed, but the scheduler train was handed never stepped: train moves the rate with a "
    "scheduler of its own (or by hand), so the schedule the caller chose is not the one that ran",
    look="train: where the scheduler it steps comes from",
)


def _train_mode_error(student: StudentRun, n: int) -> CheckError | None:
    """Forward passes with gradients in eval mode, or more training-mode passes than batches."""
    in_eval = sum(1 for training, grad in student.seen if grad and not training)
    if in_eval:
        return mistake_error(
            f"{in_eval} of train's forward passes with gradients ran in eval mode",
            Mistake(
                "model.train() missing",
                None,
                "train trains the model in eval mode: the model came to train in eval mode (the check hands it "
                "over so, as after a checkpoint was evaluated), or evaluate left it there, and nothing switched it",
                look="train: the model's mode at the start of each epoch",
            ),
            expected="training mode while training",
            got=f"{in_eval} passes in eval mode",
        )
    in_training = sum(1 for training, _ in student.seen if training)
    if not in_training:
        return mistake_error(
            "train never ran the model it was given in training mode",
            GIVEN_MODEL_NOT_TRAINED,
            expected=f"{n} forward passes in training mode (one per batch)",
            got=f"{len(student.seen)} forward passes, none in training mode",
        )
    per_epoch = n // EPOCHS
    short = _short_epochs(student.seen, per_epoch)
    if short is not None:
        return short
    if 0 < in_training != n and student.steps == in_training and in_training % per_epoch == 0:
        epochs = in_training // per_epoch
        ran = f"{epochs} epoch" if epochs == 1 else f"{epochs} epochs"
        return mistake_error(
            f"train ran {ran} of {per_epoch} batches where it was given epochs={EPOCHS}",
            FIRST_EPOCH_ONLY if epochs == 1 else WRONG_EPOCHS,
            expected=f"{n} training steps ({EPOCHS} epochs)",
            got=f"{in_training} ({ran})",
        )
    if in_training > n:
        return mistake_error(
            f"train ran the model {in_training} times in training mode in {EPOCHS} epochs of {n // EPOCHS} batches",
            Mistake(
                "second forward pass in training mode",
                None,
                "the model ran more than once per batch in training mode (a second model(images), for the "
                "accuracy, say): every training-mode pass updates batch norm's running statistics, so each batch moved "
                "them more than once; the logits the loss came from already give the accuracy",
                look="every model(...) call in train's batch loop",
            ),
            expected=f"{n} (one per batch)",
            got=str(in_training),
        )
    return None


def _counting_error(student: StudentRun, n: int) -> CheckError | None:
    """Training mode, optimizer steps and scheduler steps, as counted during the student's train."""
    mode_error = _train_mode_error(student, n)
    if mode_error is not None:
        return mode_error
    if student.steps != n:
        mistake = Mistake(
            "optimizer.step() missing",
            0,
            "the optimizer never takes a step: the weights never change",
            look="train: the batch loop, after the gradients are computed",
        )
        error = CheckError(
            f"optimizer.step() ran {student.steps} times in {EPOCHS} epochs of {n // EPOCHS} batches",
            expected=f"{n} (one per batch)",
            got=str(student.steps),
            hint="how many optimizer steps does one batch take, and where in the batch loop?",
        )
        if student.steps == 0 and student.moved:
            return mistake_error(error.message, OWN_OPTIMIZER, expected=error.expected, got=error.got)
        if student.steps == 0:
            return mistake_error(error.message, mistake, expected=error.expected, got=error.got)
        return error
    sched = student.scheduler_steps
    if student.scheduler_arguments:
        given = describe(student.scheduler_arguments[0])
        message = f"scheduler.step() was given {given}"
        return mistake_error(message, SCHEDULER_GIVEN_A_VALUE, expected=f"{n} calls of scheduler.step(), one per batch")
    if sched != n:
        mistakes = [
            Mistake(
                "scheduler never stepped",
                0,
                "the scheduler is never stepped: the rate never changes",
                look="train: the batch loop, and what moves the schedule on",
            ),
            Mistake(
                "scheduler per epoch",
                EPOCHS,
                "scheduler.step() sits in the epoch loop: this schedule is meant to advance after every "
                "batch (the prompt: 'stepping the scheduler after each batch')",
                look="train: which loop scheduler.step() sits in",
            ),
        ]
        message = f"scheduler.step() ran {sched} times in {EPOCHS} epochs of {n // EPOCHS} batches"
        if sched == 0 and not math.isclose(student.rate, student.initial_rate):
            return mistake_error(message, OWN_SCHEDULER, expected=f"{n} (one per batch)", got=str(sched))
        mistake = first_mistake(sched, mistakes)
        if mistake is not None:
            return mistake_error(message, mistake, expected=f"{n} (one per batch)", got=str(sched))
        return CheckError(
            message,
            expected=f"{n} (one per batch)",
            got=str(sched),
            hint="how often is the schedule meant to advance, and where in train does it?",
        )
    return None


def _weights_mistakes(start: nn.Module, loader: DataLoader, val: DataLoader) -> list[Mistake]:
    """Runs of the check's loop with a known mistake: their weights identify it."""
    import warnings

    unzeroed = _reference_train(copy.deepcopy(start), loader, val, zero_grad="never").weights
    per_epoch = _reference_train(copy.deepcopy(start), loader, val, zero_grad="every epoch").weights
    summed = _reference_train(copy.deepcopy(start), loader, val, reduction="sum").weights
    smoothed = _reference_train(copy.deepcopy(start), loader, val, label_smoothing=0.1).weights
    with warnings.catch_warnings():  # torch warns about exactly this order
        warnings.simplefilter("ignore")
        early = _reference_train(copy.deepcopy(start), loader, val, scheduler_first=True).weights
    return [
        Mistake(
            "zero_grad missing",
            Near(unzeroed, 1e-5),
            "the gradients are never cleared: each backward adds its gradients to those of all earlier batches",
            look="train: the batch loop, before backward()",
        ),
        Mistake(
            "zero_grad once per epoch",
            Near(per_epoch, 1e-5),
            "optimizer.zero_grad() runs once per epoch, before the batch loop: within an epoch each backward adds "
            "its gradients to those of the epoch's earlier batches, so every step but the epoch's first follows a "
            "sum of old gradients",
            look="train: where optimizer.zero_grad() sits, in the epoch loop or in the batch loop",
        ),
        Mistake(
            "no gradient at step",
            Near(_flat_weights(start), 1e-9),
            "optimizer.step() found no gradients: loss.backward() is missing or runs after optimizer.step(), or "
            "zero_grad() runs between backward() and step()",
            look="train: the order of zero_grad(), backward() and step() in the batch loop",
        ),
        Mistake(
            "loss summed over the batch",
            Near(summed, 1e-5),
            "the training loss sums the batch's per-image losses (reduction='sum'): its gradient, and so every "
            "step, grows with the batch size, unlike the batch mean, F.cross_entropy's default",
            look="train: the loss that backward() is called on",
        ),
        Mistake(
            "label smoothing in train",
            Near(smoothed, 1e-5),
            "the training loss is label-smoothed: the loop the prompt describes trains on the plain cross-entropy, "
            "and the check compares the weights with that loop. Smoothing is a choice of your own to try where the "
            "choices are yours, in the capstone",
            look="train: the arguments of the loss that backward() is called on",
        ),
        Mistake(
            "scheduler before step",
            Near(early, 1e-5),
            "scheduler.step() runs before optimizer.step(): each step used the next step's rate",
            look="train: the order of the two step() calls",
        ),
    ]


LOSS_WITH_GRAPH = Mistake(
    "loss kept with its graph",
    None,
    "each loss tensor kept in the history holds on to its step's whole graph (every activation it was computed "
    "from), so memory grows with every step, though a number is all the history needs",
    look="train: what is appended to history['loss']",
)


def _check_history(history: Any, ref: Run, n: int) -> None:
    """history["loss"] per step, history["val_loss"] and history["val_acc"] per epoch, against the reference's."""
    __tracebackhide__ = True
    if history is None:
        raise CheckError(
            "train returned None",
            expected="the history dict",
            got="None",
            hint="end train with `return history`",
            usage=True,
        )
    if not isinstance(history, dict):
        raise CheckError(
            "train must return the history dict",
            got=describe(history),
            hint='history = {"loss": [...], "val_loss": [...], "val_acc": [...]}',
            usage=True,
        )
    history = _history_entries(history)
    losses = history["loss"]
    if isinstance(losses, (list, tuple)) and len(losses) == EPOCHS and n != EPOCHS:
        raise mistake_error(
            f"history['loss'] has {EPOCHS} entries",
            Mistake(
                "one loss per epoch",
                None,
                "history['loss'] holds one value per epoch: append every step's loss.item() inside the batch loop",
            ),
            expected=f"{n} (one per step)",
            got=f"{EPOCHS}",
        )
    attached = (
        [i for i, v in enumerate(losses) if isinstance(v, torch.Tensor) and _readable(v).requires_grad]
        if isinstance(losses, (list, tuple))
        else []
    )
    if attached:
        raise mistake_error(
            f"history['loss'][{attached[0]}] is a tensor that still requires grad",
            LOSS_WITH_GRAPH,
            expected="a number per step",
            got=describe(losses[attached[0]]),
        )
    losses = _numbers(losses, "history['loss']", n, "one loss.item() per step")
    _judge("history['loss']", losses, ref.losses, _step_loss_mistakes(ref))
    val_losses = _numbers(history["val_loss"], "history['val_loss']", EPOCHS, "one value per epoch")
    val_accs = _numbers(history["val_acc"], "history['val_acc']", EPOCHS, "one value per epoch")
    _judge("history['val_loss']", val_losses, [m.loss for m in ref.val], _val_mistakes(ref, "loss"))
    _judge("history['val_acc']", val_accs, [m.acc for m in ref.val], _val_mistakes(ref, "acc"))


def _history_entries(history: dict) -> dict[str, Any]:
    """The three entries of the history dict train returned, or a sentence for a missing key, or for a dict of the
    student's own that raises when read."""
    __tracebackhide__ = True
    entries = {}
    for key in ("loss", "val_loss", "val_acc"):
        try:
            present = key in history
            if present:
                entries[key] = history[key]
        except Exception as exc:  # a dict subclass whose reading raises
            raise CheckError(
                f"the history train returned cannot be read: reading its key {key!r} raised {type(exc).__name__}",
                got=type(history).__name__,
                hint='return a plain dict: history = {"loss": [...], "val_loss": [...], "val_acc": [...]}',
                usage=True,
            ) from None
        if not present:
            raise CheckError(
                f"history has no key {key!r}",
                expected="keys 'loss', 'val_loss', 'val_acc'",
                got=f"keys {sorted(map(str, dict.keys(history)))}",
                usage=True,
            )
    return entries


def _val_mistakes(ref: Run, which: str) -> list[Mistake]:
    """Known wrong values of a per-epoch validation figure (which: 'loss' or 'acc')."""
    other = "acc" if which == "loss" else "loss"
    mistakes = [
        Mistake(
            "measured on the training loader",
            Near([getattr(m, which) for m in ref.remeasured]),
            "evaluate was given the training loader: validation figures come from val_loader",
        ),
        Mistake(
            "loss and accuracy swapped",
            Near([getattr(m, other) for m in ref.val]),
            "the validation loss and accuracy are swapped: evaluate returns (loss, accuracy)",
        ),
        Mistake(
            "validation before the epoch's training",
            Near([getattr(m, which) for m in [ref.val_before, *ref.val[:-1]]]),
            "each epoch's validation figures are those of the model before that epoch trained (the first epoch's "
            "are the untrained model's): evaluate ran before the batch loop, so the figures lag one epoch behind "
            "and the last epoch's training is never measured; the prompt measures after every epoch's batches",
            look="train: where evaluate is called, before or after the loop over the training batches",
        ),
    ]
    if which == "loss":
        per_epoch = len(ref.losses) // EPOCHS
        last_losses = [ref.losses[per_epoch * (epoch + 1) - 1] for epoch in range(EPOCHS)]
        last_training = Mistake(
            "last training loss as validation loss",
            Near(last_losses),
            "that is the loss of the epoch's last training batch: the validation loss is what evaluate measures on "
            "val_loader",
            look="what is logged, and kept in the history, as the validation loss",
        )
        mistakes.append(last_training)
        mistakes.append(
            Mistake(
                "label smoothing in evaluate",
                _smoothed(ref.val),
                "the validation loss is label-smoothed: it blends each image's cross-entropy with its loss against "
                "all ten classes alike, so it is not the cross-entropy of the model's predictions. Smoothing is a "
                "way to train; a validation loss measures the model against the true labels only",
                look="evaluate: the arguments of the loss it sums",
            )
        )
    if which == "acc":
        percent = Mistake(
            "percent", Near([100 * m.acc for m in ref.val]), "that is a percentage: accuracies are fractions in [0, 1]"
        )
        training = Mistake(
            "training accuracy as validation",
            Near(ref.train_accs),
            "that is the epoch's training accuracy: the validation accuracy is what evaluate measures on val_loader",
        )
        mistakes.extend([percent, training])
    return mistakes


def _steps_of(entries: list[tuple[Any, Any]], tag: str) -> list[float]:
    __tracebackhide__ = True
    steps = [step for _, step in entries]
    if any(step is None for step in steps):
        raise mistake_error(
            f"values under {tag!r} were logged without a step",
            Mistake(
                "no step given",
                None,
                "add_scalar(tag, value) without a step puts every point at step 0 (or "
                "at the call count), so the curves have no x-axis of steps",
            ),
            expected="add_scalar(tag, value, step)",
            got=f"{sum(s is None for s in steps)} calls without a step",
        )
    return [float(as_number(step, f"the step logged under {tag!r}")) for step in steps]


def _offset(steps: list[float], bases: Sequence[list[int]]) -> int | None:
    """Which of the allowed step numberings ``steps`` follows (its index), or None."""
    for i, base in enumerate(bases):
        if steps == [float(b) for b in base]:
            return i
    return None


def _nothing_logged_hint(others: set[str]) -> str:
    """What to ask a train that logged nothing with add_scalar: it logged another way, or to another writer."""
    if others:
        return (
            f"train called {', '.join(sorted(others))} on the writer, never add_scalar: the prompt's tags are logged "
            "one value at a time, writer.add_scalar(tag, value, step)"
        )
    return (
        "nothing at all reached the writer train was handed: does train log through that writer argument, with "
        "writer.add_scalar(tag, value, step), rather than through a writer of its own or of the notebook?"
    )


def _check_steps(logged: dict[str, list[tuple[Any, Any]]], n: int, others: set[str] = frozenset()) -> None:
    """Per-step tags at 1..n (or 0..n-1), per-epoch tags at the step count (or one less): consistently."""
    __tracebackhide__ = True
    per_batch = n // EPOCHS
    step_bases = [list(range(1, n + 1)), list(range(n))]
    epoch_bases = [[per_batch * (e + 1) for e in range(EPOCHS)], [per_batch * (e + 1) - 1 for e in range(EPOCHS)]]
    groups = (
        (("loss/train", "lr"), step_bases, n, "one per step"),
        (("accuracy/train", "accuracy/val", "loss/val"), epoch_bases, EPOCHS, "one per epoch"),
    )
    for tags, bases, count, what in groups:
        offsets = {}
        for tag in tags:
            entries = logged.get(tag)
            if not entries:
                raise CheckError(
                    f"nothing was logged under {tag!r}",
                    expected=f"{count} values ({what})",
                    got=f"tags logged: {sorted(logged) or 'none'}",
                    hint="which tags does the prompt name, and does train log each of them?"
                    if logged
                    else _nothing_logged_hint(others),
                )
            if len(entries) != count:
                raise _count_error(tag, len(entries), count, what, n)
            steps = _steps_of(entries, tag)
            offsets[tag] = _offset(steps, bases)
            if offsets[tag] is None:
                known = _epoch_step_mistakes(per_batch) if count == EPOCHS else _per_step_mistakes(per_batch)
                _wrong_steps(tag, steps, bases, known)
        if len(set(offsets.values())) > 1:
            raise CheckError(
                f"the tags {', '.join(map(repr, tags))} are logged at different steps",
                expected="one numbering for all of them",
                got=str(offsets),
                hint="log them at the same step count, so their curves line up",
            )


PER_STEP_TAG_PER_EPOCH = Mistake(
    "per-step tag logged per epoch",
    None,
    "a tag meant for every step was logged once per epoch: its add_scalar sits after the batch loop (one indent "
    "too few), so the curve gets one point per epoch, while 'loss/train' and 'lr' describe each step",
    look="train: the indentation of the per-step add_scalar calls",
)
PER_EPOCH_TAG_PER_STEP = Mistake(
    "per-epoch tag logged per step",
    None,
    "a tag meant for each epoch was logged at every step: its add_scalar sits inside the batch loop (one indent "
    "too many), while 'accuracy/train', 'accuracy/val' and 'loss/val' sum up a whole epoch",
    look="train: the indentation of the per-epoch writer.add_scalar calls",
)


def _count_error(tag: str, logged: int, count: int, what: str, n: int) -> CheckError:
    """A tag logged ``logged`` times where ``count`` were due (``n`` steps in all): once per epoch where every
    step was meant, or the reverse."""
    message = f"{tag!r} was logged {logged} times"
    expected = f"{count} ({what})"
    if count == n and logged == EPOCHS:
        return mistake_error(message, PER_STEP_TAG_PER_EPOCH, expected=expected, got=str(logged))
    if count == EPOCHS and logged == n:
        return mistake_error(message, PER_EPOCH_TAG_PER_STEP, expected=expected, got=str(logged))
    return CheckError(message, expected=expected, got=str(logged))


EPOCH_AS_STEP = Mistake(
    "epoch number as step",
    None,
    "the epoch number was logged as the step, so the per-epoch points do not line up with the per-step curves, "
    "whose steps count optimizer steps",
)
EPOCH_START_AS_STEP = Mistake(
    "step at the epoch's start",
    None,
    "the per-epoch values were logged at the step count where the epoch began (the epoch number times the batches "
    "per epoch), but they describe the model after the epoch's batches: the step is the count of optimizer steps "
    "taken so far, after the epoch's last batch, where the per-step curves have got to",
    look="train: the step given to the per-epoch writer.add_scalar calls",
)


STEP_COUNT_RESTARTS = Mistake(
    "step count restarts every epoch",
    None,
    "the step count starts again from zero at every epoch (it is set to 0 inside the epoch loop), so each epoch's "
    "points are drawn over the first epoch's and the curves run back on themselves; the step is the count of "
    "optimizer steps taken since training began, set once before the epochs",
    look="train: where the step count is set to its starting value",
)


def _epoch_step_mistakes(per_batch: int) -> list[tuple[list[list[int]], Mistake]]:
    """Wrong step numberings of the per-epoch tags, each with its mistake."""
    epoch_numbers = [list(range(1, EPOCHS + 1)), list(range(EPOCHS))]
    epoch_starts = [[per_batch * e for e in range(EPOCHS)]]
    restarted = [[per_batch] * EPOCHS, [per_batch - 1] * EPOCHS]
    return [(epoch_numbers, EPOCH_AS_STEP), (epoch_starts, EPOCH_START_AS_STEP), (restarted, STEP_COUNT_RESTARTS)]


def _per_step_mistakes(per_batch: int) -> list[tuple[list[list[int]], Mistake]]:
    """Wrong step numberings of the per-step tags, each with its mistake."""
    restarted = [list(range(1, per_batch + 1)) * EPOCHS, list(range(per_batch)) * EPOCHS]
    return [(restarted, STEP_COUNT_RESTARTS)]


def _wrong_steps(
    tag: str, steps: list[float], bases: Sequence[list[int]], known: Sequence[tuple[list[list[int]], Mistake]]
) -> None:
    __tracebackhide__ = True
    shown = [int(s) if float(s).is_integer() else s for s in steps]
    message = f"the steps logged under {tag!r} are not the optimizer steps so far"
    expected = f"{bases[0]} (or {bases[1]})"
    for numberings, mistake in known:
        if _offset(steps, numberings) is not None:
            raise mistake_error(message, mistake, expected=expected, got=str(shown))
    raise CheckError(
        message, expected=expected, got=str(shown), hint="what does train count, and which count does it log at?"
    )


def _logged_values(logged: dict[str, list[tuple[Any, Any]]], tag: str) -> list[float]:
    __tracebackhide__ = True
    return [float(as_number(value, f"a value logged under {tag!r}")) for value, _ in logged[tag]]


def _train_acc_mistakes(ref: Run) -> list[Mistake]:
    """Known wrong values logged under accuracy/train, one per epoch."""
    return [
        Mistake(
            "mean of batch accuracies",
            Near(ref.train_batch_accs),
            "the mean of the batch accuracies weighs the "
            "short last batch like a full one, though each image should count once",
        ),
        Mistake(
            "last batch only",
            Near(ref.train_last_accs),
            "that is the accuracy of the epoch's last batch alone: the earlier batches' right answers are lost",
        ),
        Mistake(
            "re-measured after the epoch",
            Near([m.acc for m in ref.remeasured]),
            "that is the accuracy measured "
            "again after the epoch; accuracy/train counts the right answers of the training batches as they "
            "were trained on",
        ),
        Mistake("percent", Near([100 * a for a in ref.train_accs]), "that is a percentage: accuracies are fractions"),
        Mistake(
            "validation accuracy as training accuracy",
            Near([m.acc for m in ref.val]),
            "that is the validation accuracy: accuracy/train counts the right answers of the epoch's training "
            "batches, as they were trained on",
            look="the value logged under 'accuracy/train'",
        ),
        Mistake(
            "count, not fraction",
            Near(ref.train_correct),
            "that is a count of right answers, not the share of the epoch's images they make up",
        ),
        Mistake(
            "right answers divided by the number of batches",
            Near([correct / (len(ref.losses) // EPOCHS) for correct in ref.train_correct]),
            "the epoch's right answers were divided by its number of batches (len(train_loader)): the accuracy is "
            "per image, right answers over the images seen in the epoch",
            look="what the epoch's count of right answers is divided by",
        ),
        Mistake(
            "counts kept across epochs",
            Near(_means_so_far(ref.train_accs)),
            "from the second epoch on, the value is the accuracy over every epoch so far: the counts of right "
            "answers and of images seen go on from one epoch to the next, where accuracy/train counts the images of "
            "its own epoch only",
            look="where the counts of right answers and of images start from zero",
        ),
        Mistake(
            "divided by batches times batch size",
            Near([correct / ref.slots for correct in ref.train_correct]),
            "the epoch's images were counted as the number of batches times the batch size (loader.batch_size "
            "added per batch, say), but the last batch is short, so that count is more than the images the epoch "
            "saw; each batch holds as many images as it has labels",
            look="how train counts the images of the epoch",
        ),
    ]


def _means_so_far(values: list[float]) -> list[float]:
    """The mean of the values up to each one: an epoch's accuracy over all epochs so far (each as many images)."""
    return [sum(values[: i + 1]) / (i + 1) for i in range(len(values))]


def _running_means(losses: list[float], per_epoch: int) -> list[float]:
    """The mean of the losses so far (of the epoch's, with ``per_epoch`` steps an epoch) at each step: what a
    progress bar shows."""
    means = []
    for i in range(len(losses)):
        start = i - i % per_epoch
        means.append(sum(losses[start : i + 1]) / (i + 1 - start))
    return means


@dataclasses.dataclass(frozen=True)
class NearAny:
    """Several known wrong values of one mistake: matched if any of them is :class:`Near`."""

    values: tuple

    def __call__(self, got: Any) -> bool:
        return any(Near(value)(got) for value in self.values)


def _step_loss_mistakes(ref: Run) -> list[Mistake]:
    """Known wrong values of the per-step training loss (history['loss'] and 'loss/train')."""
    per_epoch = len(ref.losses) // EPOCHS
    return [
        Mistake(
            "running mean of the losses",
            NearAny((_running_means(ref.losses, per_epoch), _running_means(ref.losses, len(ref.losses)))),
            "each step's value is the mean of the losses so far (a running mean over the epoch or the whole run, "
            "as a progress bar shows), while the per-step loss is that step's own",
            look="what is appended and logged as each step's loss",
        )
    ]


LR_AS_LIST = Mistake(
    "rate logged as a list",
    None,
    "scheduler.get_last_lr() returns a list, one rate per parameter group, and add_scalar takes one number",
    look="the value given to writer.add_scalar('lr', ...)",
)


def _lr_not_a_list(logged: dict[str, list[tuple[Any, Any]]]) -> None:
    """A list (or tuple) of one number logged under 'lr' is scheduler.get_last_lr() itself."""
    __tracebackhide__ = True
    for value, _ in logged.get("lr", []):
        if isinstance(value, (list, tuple)) and len(value) == 1:
            raise mistake_error(
                "a value logged under 'lr' is a list, not a number",
                LR_AS_LIST,
                expected="one number per step",
                got=describe(value),
            )


def _check_logged_values(logged: dict[str, list[tuple[Any, Any]]], ref: Run) -> None:
    """The values logged under each tag, against the reference run's."""
    __tracebackhide__ = True
    _lr_not_a_list(logged)
    lr_mistakes = [
        Mistake(
            "lr logged after scheduler.step()",
            Near(ref.lrs_after),
            "the rate was read after scheduler.step(): that is the next step's rate, not the one this step used",
            look="train: where the rate is read, relative to scheduler.step()",
        ),
        Mistake(
            "initial rate logged",
            Near([ref.lrs[0]] * len(ref.lrs)),
            "the logged rate never changes: it is "
            "the initial rate, not the one the scheduler set (which the scheduler and the optimizer both keep)",
        ),
        Mistake(
            "get_lr() for get_last_lr()",
            Near(ref.get_lrs),
            "scheduler.get_lr() is not the rate in use: it is the formula the scheduler applies inside its own "
            "step() (where this schedule decays, it already gives the decayed rate), and torch warns when it is "
            "called elsewhere; the scheduler keeps the rate this step used under another name",
            look="the value given to writer.add_scalar('lr', ...)",
        ),
    ]
    train_acc_mistakes = _train_acc_mistakes(ref)
    checks = [
        ("loss/train", ref.losses, _step_loss_mistakes(ref)),
        ("lr", ref.lrs, lr_mistakes),
        ("accuracy/train", ref.train_accs, train_acc_mistakes),
        ("accuracy/val", [m.acc for m in ref.val], _val_mistakes(ref, "acc")),
        ("loss/val", [m.loss for m in ref.val], _val_mistakes(ref, "loss")),
    ]
    for tag, want, mistakes in checks:
        _judge(f"the values logged under {tag!r}", _logged_values(logged, tag), want, mistakes)


NOTEBOOK_OBJECT = Mistake(
    "a notebook variable instead of an argument",
    None,
    "the function reads a model, loader, optimizer or scheduler of the notebook by its name, instead of the one it "
    "was handed as an argument: whoever calls it (the check, or a later cell) passes its own, and the notebook's "
    "object of the same kind is another one",
    look="every name the function reads that is neither one of its parameters nor made inside it",
)
LABELS_AS_FLOATS = Mistake(
    "labels converted to floats",
    None,
    "cross_entropy takes the labels as class indices, whole numbers of an integer dtype (the loader's labels are "
    "such): labels converted to floats are read as something else, and refused",
    look="the line that computes the loss, and what was done to the labels before it",
)

#: What a training function is handed, never to read from the notebook: a model (with parameters), a loader,
#: an optimizer, a scheduler.
_HANDED_OVER = (DataLoader, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)


def _notebook_objects(fn: Any) -> list[str]:
    """The names ``fn`` (and the functions inside it) reads from its notebook's globals that hold an object of a
    kind it is handed as an argument."""
    found = set()
    todo = [getattr(fn, "__code__", None)]
    namespace = getattr(fn, "__globals__", {})
    while todo:
        code = todo.pop()
        if code is None:
            continue
        todo += [const for const in code.co_consts if hasattr(const, "co_code")]
        for instruction in dis.get_instructions(code):
            if instruction.opname != "LOAD_GLOBAL":
                continue
            value = namespace.get(instruction.argval)
            model = isinstance(value, nn.Module) and any(True for _ in value.parameters())
            if model or isinstance(value, _HANDED_OVER):
                found.add(instruction.argval)
    return sorted(found)


def _named_crash(err: CheckError, functions: dict[str, Any]) -> CheckError:
    """``err``, or a named mistake when a loop read a notebook object or gave cross_entropy float labels."""
    if err.usage or (err.mistake and not err.mistake.startswith("raised")):
        return err
    if re.search(FLOAT_TARGETS, err.message):
        return mistake_error(err.message, LABELS_AS_FLOATS)
    for name, fn in functions.items():
        objects = _notebook_objects(fn)
        if objects:
            read = ", ".join(objects)
            return mistake_error(f"{err.message}\n  ({name} reads the notebook's {read})", NOTEBOOK_OBJECT)
    return err


def _not_written(fn: Any, name: str) -> None:
    __tracebackhide__ = True
    if empty_body(fn):
        raise CheckError(
            f"{name} is not written yet: its body is only `...` or `pass`",
            hint=f"write {name}, run its cell again, then run this check",
            usage=True,
        )


@exercise("07.1", "evaluate and train")
def check_training_loop(evaluate, train) -> None:
    """evaluate on a batch-norm model with a short last batch; then train for EPOCHS epochs against the
    check's own loop: modes, steps, weights, history, and every value and step logged."""
    expect_function(evaluate, "evaluate")
    expect_function(train, "train")
    _not_written(evaluate, "evaluate")
    _not_written(train, "train")
    try:
        with _settings_kept():
            _judge_training_loop(evaluate, train)
    except CheckError as err:
        named = _named_crash(err, {"evaluate": evaluate, "train": train})
        if named is err:
            raise
        raise named from None
    passed(
        "evaluate and train: modes, no_grad, per-image means, zero_grad/step, scheduler per batch, "
        "history, and every value and step logged"
    )


def _judge_training_loop(evaluate: Any, train: Any) -> None:
    __tracebackhide__ = True
    _check_evaluate(evaluate)
    loader, val = _loader(1, 90), _loader(2, 40)
    n = EPOCHS * len(loader)
    model = _loop_model()
    start = copy.deepcopy(model)
    model.eval()  # handed over in eval mode (as after a checkpoint was evaluated): train must switch it
    student = _student_train(train, model, loader, val)
    counting = _counting_error(student, n)
    if counting is not None:
        raise counting
    ref = _reference_train(copy.deepcopy(start), loader, val)
    try:
        compare("the vector of trained weights", student.weights, ref.weights, rtol=1e-4, atol=1e-6)
    except CheckError as err:
        if student.shrunk:
            raise mistake_error(err.message, GRADIENTS_CLIPPED, expected=err.expected, got=err.got) from None
        if student.low_precision:
            raise mistake_error(err.message, LOW_PRECISION, expected=err.expected, got=err.got) from None
        mistake = first_mistake(student.weights, _weights_mistakes(start, loader, val))
        if mistake is None:
            raise
        raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None
    _check_history(student.history, ref, n)
    _check_steps(student.logged, n, student.others)
    _check_logged_values(student.logged, ref)
    _check_second_run(train, start, loader, val, ref, n)


TRAIN_STATE_KEPT = Mistake(
    "state kept between calls of train",
    None,
    "train was right the first time and wrong when it was called again on a fresh model: it keeps something from "
    "one call to the next (a step count, a history or a list made outside the function, or a default argument "
    "that is a list or dict), so a second training run (another model, a new run of the cell) starts where the "
    "first one stopped",
    look="every name train uses that is not made anew inside it",
)


def _check_second_run(train: Any, start: nn.Module, loader: DataLoader, val: DataLoader, ref: Any, n: int) -> None:
    """train called once more, on a fresh copy of the same model: its history and logged steps must be those of the
    first call (a step count or history kept outside the function grows)."""
    model = copy.deepcopy(start)
    model.eval()
    again = _student_train(train, model, loader, val)
    try:
        _check_history(again.history, ref, n)
        _check_steps(again.logged, n)
    except CheckError as err:
        message = f"called a second time, on a fresh model, train went wrong: {err.message}"
        raise mistake_error(message, TRAIN_STATE_KEPT, expected=err.expected, got=err.got) from None


# ---------------------------------------------------------------- 07.2 do workers help?

WORDS = ("faster", "not faster")

#: What may join "not" and "faster" in a written answer ("not-faster", "not_faster", "not  faster").
_JOINER = re.compile(r"[\s_-]+")
#: Brackets, quotes and spaces around a pair written as text ("(faster, not faster)").
_AROUND_A_PAIR = re.compile(r"^[\s(\[]+|[\s)\].]+$")


#: The question asks "does num_workers=2 make an epoch clearly faster?": yes and no answer it too, and so do
#: words that say "not faster" in other terms (slower is not faster; the same speed is not clearly faster).
_YES_NO = {
    True: "faster",
    False: "not faster",
    "yes": "faster",
    "no": "not faster",
    "slower": "not faster",
    "no faster": "not faster",
    "not clearly faster": "not faster",
    "same": "not faster",
    "the same": "not faster",
    "same speed": "not faster",
}


def _spelled_word(item: Any) -> Any:
    """One half of the pair with its words joined by one space ("not-faster" as "not faster"), and yes or no
    (True or False) as the word it answers; else unchanged."""
    if isinstance(item, bool):
        return _YES_NO[item]
    if not isinstance(item, str):
        return item
    word = _JOINER.sub(" ", item.strip(" '\"")).strip()
    return _YES_NO.get(word.lower(), word)


#: A half of the pair labelled with its mode, as the question names them ("sleep: faster", "spin mode = no").
_MODE_LABEL = re.compile(r"^[\s'\"]*(sleep|spin)(\s+mode)?\s*[:=]\s*", re.IGNORECASE)
#: The longest text read as an answer: a pair of choices is a few words, and a longer text is shown back in full.
_LONGEST_ANSWER = 200
#: What a half of the pair may be: a word, yes or no as True or False (the check reads numbers as no answer).
_HALF_TYPES = (str, bool, int, float)


def _unlabelled(halves: Sequence[Any]) -> tuple:
    """Two halves with their mode labels dropped, in the order (sleep, spin) ("spin: no, sleep: yes" is read in
    the order its labels give); halves whose labels do not give one order come back as they are."""
    labels, words = [], []
    for half in halves:
        match = _MODE_LABEL.match(half) if isinstance(half, str) else None
        labels.append(match.group(1).lower() if match else None)
        words.append(half[match.end() :] if match else half)
    if labels == ["spin", "sleep"]:
        return (words[1], words[0])
    if labels[0] in (None, "sleep") and labels[1] in (None, "spin"):
        return tuple(words)
    return tuple(halves)


def _plain_halves(items: Sequence[Any]) -> None:
    """A sentence for a pair holding something other than words (a list in it, an object of the student's own)."""
    __tracebackhide__ = True
    odd = [type(item).__name__ for item in items if not isinstance(item, (*_HALF_TYPES, torch.Tensor))]
    if odd:
        raise CheckError(
            "2 workers on one core (sleep, spin): each half of the pair is one word",
            expected="('faster' or 'not faster', 'faster' or 'not faster')",
            got=f"a pair holding {', '.join(odd)}",
            usage=True,
        )


def _as_pair(prediction: Any) -> Any:
    """The pair with each half's spelling evened out; a pair written as one text ("faster, not faster") as a
    tuple when both halves are choices. Anything else comes back unchanged, for read_prediction to judge."""
    __tracebackhide__ = True
    if isinstance(prediction, dict) and {str(key).lower() for key in prediction} == {"sleep", "spin"}:
        by_mode = {str(key).lower(): value for key, value in prediction.items()}
        prediction = (by_mode["sleep"], by_mode["spin"])  # the pair written as a dict of the two modes
    if isinstance(prediction, (tuple, list)):
        _plain_halves(prediction)
        halves = _unlabelled(prediction) if len(prediction) == 2 else prediction
        return type(prediction)(_spelled_word(item) for item in halves)
    if not isinstance(prediction, str):
        return prediction
    if len(prediction) > _LONGEST_ANSWER:
        raise CheckError(
            f"2 workers on one core (sleep, spin): the answer is a text of {len(prediction):,} characters",
            expected="a pair of words, ('faster' or 'not faster', 'faster' or 'not faster')",
            got=f"{prediction[:40]!r}...",
            usage=True,
        )
    parts = re.split(r"[,/;]", _AROUND_A_PAIR.sub("", prediction))
    halves = tuple(_spelled_word(part) for part in (_unlabelled(parts) if len(parts) == 2 else parts))
    if len(halves) == 2 and all(isinstance(half, str) and half.lower() in WORDS for half in halves):
        return halves
    return prediction


@exercise("07.2", "predict, then run: do workers help on one core?", prediction=True)
def check_workers_prediction(prediction) -> None:
    """Measure whether 2 workers make an epoch faster on one core, in sleep and in spin mode."""
    name = "2 workers on one core (sleep, spin)"
    choices = [(a, b) for a in WORDS for b in WORDS]
    prediction = read_prediction(name, _as_pair(prediction), choices)  # junk is refused before seconds of measuring
    # sleeping reads come close to 2x; spinning ones reach 1.5x only when two other busy programs share the core
    sleep = "faster" if worker_speedup("sleep") > 1.6 else "not faster"
    spin = "faster" if worker_speedup("spin") > 1.6 else "not faster"
    why = (
        "A sleeping read leaves the core free for the other worker; a spinning one needs the core itself, "
        "so workers help only while there are idle cores."
    )
    if not hasattr(os, "sched_getaffinity"):  # macOS, Windows: the experiment ran on all cores
        why += " This system cannot pin the experiment to one core, so its spinning workers had idle cores."
    check_prediction(
        name,
        prediction,
        (sleep, spin),
        choices=choices,
        why=why,
        mistakes={
            ("faster", "faster"): "Two spinning workers share one core: no more CPU than one.",
            ("not faster", "not faster"): "While one worker sleeps, the other can read.",
        },
        ask="what does a worker do with the core while its read sleeps, and while its read spins? Which of the "
        "two leaves something for a second worker to use?",
    )


# ---------------------------------------------------------------- 07.3 the capstone


@dataclasses.dataclass
class Forward:
    """One outermost call of a module while the student's function ran."""

    seq: int
    rows: torch.Tensor  # the inputs, as (B, 8, 8) on the CPU
    predicted: torch.Tensor | None  # argmax of the output, (B,)
    key: tuple = ()  # its fingerprint
    trained: bool = False  # a backward pass went through its output
    training: bool = False  # dropout or batch norm in the module was in training mode
    mode: bool = False  # the module's own training flag
    scores: torch.Tensor | None = None  # log_softmax of the output, (B, 10), while no backward went through it


class ForwardLog:
    """Records, while the student's function runs, every outermost module call on digit-sized inputs:
    the inputs, the predictions, and whether a backward pass went through it (trained on them)."""

    KEEP_TRAINING = 60_000  # rows of training calls kept (about 40 epochs); later ones keep no rows
    MAX_ROWS = 400_000  # rows kept in all; later calls are not recorded

    def __init__(self) -> None:
        self.calls: list[Forward] = []
        self.depth = 0
        self.rows = 0
        self.checked = 0  # calls before this index were looked at for release
        self.handles: list[Any] = []

    def __enter__(self) -> ForwardLog:
        hooks = torch.nn.modules.module
        self.handles = [
            hooks.register_module_forward_pre_hook(self._enter),
            hooks.register_module_forward_hook(self._leave, always_call=True),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()

    def _enter(self, module: nn.Module, args: Any) -> None:
        self.depth += 1

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.rows < self.MAX_ROWS and not torch.jit.is_tracing():  # no warnings in a trace
            try:
                self._record(module, args, output)
                self._release()
            except Exception:  # a record is never worth breaking the student's training
                pass

    def _record(self, module: nn.Module, args: Any, output: Any) -> None:
        x = args[0] if isinstance(args, tuple) and args else None
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or len(x) == 0 or x[0].numel() != 64:
            return
        if x.device.type == "meta" or not x.is_floating_point():
            return
        rows = x.detach().to("cpu", torch.float32).reshape(-1, 8, 8).clone()
        predicted, scores = None, None
        if isinstance(output, torch.Tensor) and output.dim() == 2 and len(output) == len(x):
            predicted = output.detach().argmax(dim=1).cpu()
            if output.is_floating_point() and output.shape[1] == 10:
                scores = F.log_softmax(output.detach().to("cpu", torch.float64), dim=1)
        call = Forward(len(self.calls), rows, predicted, key=_fingerprint(rows), training=_random_in_training(module))
        call.mode, call.scores = module.training, scores
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(_Mark(call))
        self.calls.append(call)
        self.rows += len(rows)

    def _release(self) -> None:
        """Training calls (all but the newest) give their scores back, and past KEEP_TRAINING rows their rows
        too: the first epochs show what was trained on; evaluation calls keep both."""
        over = self.rows > self.KEEP_TRAINING
        for call in self.calls[self.checked : len(self.calls) - 1]:
            if not call.trained:
                continue
            call.scores = None
            if over and len(call.rows):
                self.rows -= len(call.rows)
                call.rows = torch.empty(0, 8, 8)
        self.checked = max(self.checked, len(self.calls) - 1)


MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)


def _random_in_training(module: nn.Module) -> bool:
    """Does the module hold dropout or batch norm in training mode (layers that act differently in eval mode)?"""
    return any(m.training for m in module.modules() if isinstance(m, MODE_DEPENDENT))


def _fingerprint(rows: torch.Tensor) -> tuple:
    """A short summary of a batch: equal batches have equal fingerprints."""
    return (tuple(rows.shape), round(float(rows.sum()), 3), round(float(rows.square().sum()), 3))


@dataclasses.dataclass
class _Mark:
    """A gradient hook that marks a recorded call as trained on; the gradient passes unchanged."""

    call: Forward

    def __call__(self, grad: torch.Tensor) -> None:
        self.call.trained = True


MATCH = 0.9999  # cosine of two centred images: distinct digits stay below 0.995, even cropped by a pixel
SHIFTS = [(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1)]


def _unit(x: torch.Tensor) -> torch.Tensor:
    """Each row flattened, centred and scaled to length 1: rows equal up to ``a * x + b`` (a > 0) become equal."""
    flat = x.reshape(len(x), -1).float()
    flat = flat - flat.mean(dim=1, keepdim=True)
    return flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _match(rows: torch.Tensor, originals: torch.Tensor) -> torch.Tensor:
    """For each row, the index of the original image it shows (normalised or not), or -1."""
    cos = _unit(rows) @ originals.T
    best, index = cos.max(dim=1)
    return torch.where(best > MATCH, index, torch.full_like(index, -1))


def _first_trained(log: ForwardLog, images: torch.Tensor, wanted: torch.Tensor) -> dict[int, float]:
    """For each wanted image index, the seq of the first training call that showed it (shifted by up to a
    pixel or not, normalised or not), or inf: training calls are searched in order, found images dropped."""
    first = {int(i): math.inf for i in wanted}
    rows = [call.rows for call in log.calls if call.trained]
    seqs = [torch.full((len(call.rows),), float(call.seq)) for call in log.calls if call.trained]
    if not rows:
        return first
    all_rows = torch.cat(rows)
    all_seqs = torch.cat(seqs)
    for start in range(0, len(all_rows), 4096):
        remaining = torch.tensor([i for i, seq in first.items() if seq == math.inf], dtype=torch.long)
        if len(remaining) == 0:
            break
        chunk = all_rows[start : start + 4096]
        chunk_seqs = all_seqs[start : start + 4096]
        earliest = torch.full((len(remaining),), math.inf)
        for di, dj in SHIFTS:
            r0, r1 = max(0, -di), 8 - max(0, di)
            c0, c1 = max(0, -dj), 8 - max(0, dj)
            wanted_unit = _unit(images[remaining, 0, r0 + di : r1 + di, c0 + dj : c1 + dj])
            hits = _unit(chunk[:, r0:r1, c0:c1]) @ wanted_unit.T > MATCH
            seq_of_hit = torch.where(hits, chunk_seqs[:, None], torch.tensor(math.inf)).min(dim=0).values
            earliest = torch.minimum(earliest, seq_of_hit)
        for i, seq in zip(remaining.tolist(), earliest.tolist()):
            first[i] = seq
    return first


@dataclasses.dataclass
class Segment:
    """Consecutive evaluation calls: the images they showed and how many the model got right."""

    start: int  # seq of its first call
    images: torch.Tensor  # indices into the student's images
    correct: int
    rights: list[int] = dataclasses.field(default_factory=list)  # right answers of each call
    sizes: list[int] = dataclasses.field(default_factory=list)  # images of each call
    training: bool = False  # a call ran with dropout or batch norm in training mode
    loss_sum: float = math.nan  # cross-entropy summed over its images (nan: an output was not 10 scores)
    eval_mode: bool = False  # every call ran with the module in eval mode

    @property
    def accuracy(self) -> float:
        return self.correct / len(self.images)


def _call_loss(call: Forward, labels: torch.Tensor) -> float:
    """The cross-entropy of a recorded call's scores, summed over its images (nan without scores)."""
    if call.scores is None:
        return math.nan
    return float(-call.scores[torch.arange(len(labels)), labels].sum())


def _runs(log: ForwardLog, originals: torch.Tensor) -> list[list[tuple[Forward, torch.Tensor]]]:
    """Evaluation calls (no backward went through them) on the student's images, in runs without training between."""
    runs: list[list[tuple[Forward, torch.Tensor]]] = [[]]
    last_trained = None
    for call in log.calls:
        if call.trained:
            last_trained = call
            runs.append([])
            continue
        index = _match(call.rows, originals) if call.predicted is not None else None
        if index is None or bool((index < 0).any()):
            runs.append([])
            continue
        if last_trained is not None and call.key == last_trained.key:
            runs.append([(call, index)])  # the batch just trained on, passed again: a run of its own
            runs.append([])
            continue
        runs[-1].append((call, index))
    return [run for run in runs if run]


def _segments(log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> list[Segment]:
    """Every single evaluation call, and every prefix and suffix of a run of them."""
    originals = _unit(images)
    segments = []
    for run in _runs(log, originals):
        rights = [int((call.predicted == labels[index]).sum()) for call, index in run]
        losses = [_call_loss(call, labels[index]) for call, index in run]
        spans = {(i, i + 1) for i in range(len(run))}
        spans |= {(0, j) for j in range(1, len(run) + 1)} | {(i, len(run)) for i in range(len(run))}
        for i, j in sorted(spans):
            shown = torch.cat([index for _, index in run[i:j]])
            sizes = [len(index) for _, index in run[i:j]]
            training = any(call.training for call, _ in run[i:j])
            segment = Segment(run[i][0].seq, shown, sum(rights[i:j]), rights[i:j], sizes, training)
            segment.loss_sum = sum(losses[i:j])
            segment.eval_mode = not any(call.mode for call, _ in run[i:j])
            segments.append(segment)
    return segments


def _spread(indices: torch.Tensor, count: int) -> torch.Tensor:
    """At most ``count`` of the sorted distinct ``indices``, evenly spread (a random sample might be a val split)."""
    distinct = indices.unique()
    return distinct[torch.linspace(0, len(distinct) - 1, min(len(distinct), count)).round().long()]


@dataclasses.dataclass
class Source:
    """Where an estimate was measured, as far as the recorded calls tell."""

    size: int | None = None  # images of a clean source (None: unknown)
    trained: Segment | None = None  # a source the model had trained on (when no clean one explains the estimate)
    share: float = 0.0  # of the source's images (a sample of them), the share trained on before it was measured
    images: torch.Tensor | None = None  # a clean source's image indices
    start: int = 0  # the seq of a clean source's first call: training after it does not count
    training: bool = False  # a clean source was measured with dropout or batch norm in training mode
    eval_mode: bool = False  # a clean source was measured with the model in eval mode


def _source_of(estimate: float, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> Source:
    """The recorded evaluation whose accuracy is exactly the estimate: clean, trained on, or unknown.
    Candidates: the latest 10 spans of at least 10 images; any clean one clears the estimate."""
    matching = [s for s in _segments(log, images, labels) if len(s.images) >= 10 and abs(s.accuracy - estimate) <= 1e-5]
    matching.sort(key=lambda segment: (-segment.start, -len(segment.images)))
    matching = matching[:10]
    if not matching:
        return Source()
    samples = [_spread(segment.images, 100) for segment in matching]
    first = _first_trained(log, images, torch.cat(samples).unique())
    trained = None
    share = 0.0
    for segment, sample in zip(matching, samples):
        segment_share = sum(first[i] < segment.start for i in sample.tolist()) / len(sample)
        if segment_share < 0.5:
            return Source(
                len(segment.images),
                share=segment_share,
                images=segment.images,
                start=segment.start,
                training=segment.training,
                eval_mode=segment.eval_mode,
            )
        if trained is None:
            trained = segment
            share = segment_share
    return Source(trained=trained, share=share)


@contextlib.contextmanager
def _budget_bar(start: float) -> Iterator[None]:
    """While the block runs, a notebook shows a gauge of the CPU seconds used since ``start`` out of the budget,
    redrawn twice a second: the check cannot see inside the student's training loop, but it can watch the
    clock. A gauge, not a tqdm bar: tqdm paints a bar that ends below its total red, and using less than the
    budget is the goal. Outside a notebook (a terminal, the tests) nothing is drawn."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm

    if not issubclass(tqdm, notebook_tqdm):  # tqdm.auto picks its widget only in a notebook's kernel
        yield
        return
    import ipywidgets
    from IPython.display import display

    gauge = ipywidgets.FloatProgress(value=0.0, min=0.0, max=BUDGET, description="training")
    label = ipywidgets.Label(f"train_capstone: 0 s of its {BUDGET:g} s CPU budget (then the check scores it)")
    display(ipywidgets.HBox([gauge, label]))
    stop = threading.Event()

    def show() -> None:
        used = _cpu_seconds() - start
        gauge.value = min(used, BUDGET)
        label.value = f"train_capstone: {used:.0f} s of its {BUDGET:g} s CPU budget (then the check scores it)"

    def redraw() -> None:
        while not stop.wait(0.5):
            show()

    drawer = threading.Thread(target=redraw, name="capstone budget gauge", daemon=True)
    drawer.start()
    try:
        yield
    finally:
        stop.set()
        drawer.join()
        show()


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (DataLoader workers)."""
    seconds = time.process_time()
    if resource is not None:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds += children.ru_utime + children.ru_stime
    return seconds


def _capstone_crash(err: CheckError) -> CheckError:
    """``err``, or a sentence for a train_capstone that is not finished (its return reads a name never assigned),
    or a named mistake."""
    cause = err.__cause__
    name = getattr(cause, "name", None) if isinstance(cause, NameError) else None
    if name in ("model", "val_accuracy") and failing_line(err).startswith("return"):
        return CheckError(
            f"train_capstone is not finished: its last line returns {name}, which nothing above it has assigned",
            hint="build and train the model, measure val_accuracy on your validation part, then return both",
            usage=True,
        )
    if re.search(r"shapes cannot be multiplied \(\d+x8 and 64x\d+\)", err.message):
        return mistake_error(err.message, UNFLATTENED_IMAGES)
    return _named_crash(err, {})


UNFLATTENED_IMAGES = Mistake(
    "images not flattened for Linear",
    None,
    "nn.Linear works on the last dimension of its input only: given images of shape (N, 1, 8, 8) it sees rows of "
    "8 pixels, while a layer made for 64 inputs expects each digit's 64 pixels as one vector",
    look="your model's first layers: the shape of what reaches the first nn.Linear",
)


def _import_what_optimizers_import() -> None:
    """Import what torch imports when the first optimizer is made (torch._dynamo, sympy: seconds of CPU), before
    the clock starts: that is torch's one-off cost, not the student's training, and a time limit that stopped
    the student's function in the middle of that import would leave the modules half-imported, and every later
    optimizer broken until the kernel restarts."""
    import torch._dynamo  # noqa: F401


def _run_capstone(train_capstone: Any, images: torch.Tensor, labels: torch.Tensor) -> tuple[Any, float, ForwardLog]:
    """The student's function on one thread, under a time limit, with its CPU time and its module calls."""
    __tracebackhide__ = True
    _import_what_optimizers_import()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = _cpu_seconds()
    try:
        with ForwardLog() as log, _budget_bar(start), _settings_kept():
            got = run_student(
                train_capstone,
                images,
                labels,
                what="train_capstone",
                timeout=min(running.TIME_LIMIT, max(5.0, 2 * BUDGET)),
            )
    except CheckError as err:
        named = _capstone_crash(err)
        if named is err:
            raise
        raise named from None
    finally:
        seconds = _cpu_seconds() - start
        torch.set_num_threads(threads)
    return got, seconds, log


@dataclasses.dataclass(frozen=True)
class Distortion:
    """How the capstone's check distorts its held-out digits, as a scanner might: each image gets its own
    draw, uniform within these bounds, from a seeded generator (the same draws every run)."""

    rotation: float = 15.0  # degrees, either way
    scale: float = 0.1  # zoom by a factor within 1 ± scale
    shift: float = 1.0  # pixels in each direction, not only whole ones
    noise: float = 0.1  # standard deviation of Gaussian pixel noise (then clipped to [0, 1])


HELD_OUT = Distortion()


def _distort(images: torch.Tensor, distortion: Distortion, seed: int = 2026) -> torch.Tensor:
    """images (N, 1, 8, 8) rotated, zoomed and moved (bilinear, zeros outside), then noisy. The same
    numbers are drawn whatever the bounds, so one kind alone is the same draw as in the full distortion."""
    g = torch.Generator().manual_seed(seed)
    n = len(images)
    dtype = images.dtype  # not the default dtype, which a student's cell may have changed
    angle = (2 * torch.rand(n, generator=g, dtype=dtype) - 1) * math.radians(distortion.rotation)
    zoom = 1 + (2 * torch.rand(n, generator=g, dtype=dtype) - 1) * distortion.scale
    shift = (2 * torch.rand(n, 2, generator=g, dtype=dtype) - 1) * distortion.shift
    noise = torch.randn(images.shape, generator=g, dtype=dtype) * distortion.noise
    cos = torch.cos(angle) / zoom
    sin = torch.sin(angle) / zoom
    to_grid = 2 / images.shape[-1]  # affine_grid's coordinates run from -1 to 1 across the image
    theta = torch.stack(
        [
            torch.stack([cos, -sin, -shift[:, 0] * to_grid], dim=1),
            torch.stack([sin, cos, -shift[:, 1] * to_grid], dim=1),
        ],
        dim=1,
    )
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    moved = F.grid_sample(images, grid, align_corners=False)
    return (moved + noise).clamp(0, 1)


def _one_kind_each() -> dict[str, Distortion]:
    """The held-out distortion taken apart: each kind alone, at its full bound."""
    d = HELD_OUT
    return {
        "rotated": Distortion(d.rotation, 0.0, 0.0, 0.0),
        "zoomed": Distortion(0.0, d.scale, 0.0, 0.0),
        "moved": Distortion(0.0, 0.0, d.shift, 0.0),
        "noisy": Distortion(0.0, 0.0, 0.0, d.noise),
    }


def _like_training_inputs(images: torch.Tensor, log: ForwardLog) -> torch.Tensor | None:
    """``images`` rescaled, pixel by pixel, to the mean and spread of the inputs the model trained on, or None
    when those look like the images as they come (no rescaling outside the model to undo)."""
    rows = [call.rows for call in log.calls if call.trained and len(call.rows)]
    if not rows:
        return None
    trained = torch.cat(rows)[:20_000].reshape(-1, 64)
    raw = images.reshape(len(images), 64)
    mean_t, std_t = trained.mean(dim=0), trained.std(dim=0)
    mean_r, std_r = raw.mean(dim=0), raw.std(dim=0)
    spread = float(std_t.median() / std_r.median().clamp_min(1e-6))
    if float((mean_t - mean_r).abs().mean()) < 0.1 and 0.67 < spread < 1.5:
        return None
    rescaled = (raw - mean_r) / std_r.clamp_min(1e-3) * std_t + mean_t
    return rescaled.reshape(images.shape)


def _rescaled_outside(
    model: nn.Module, accuracy: float, images: torch.Tensor, labels: torch.Tensor, log: ForwardLog
) -> Mistake | None:
    """The named mistake when the model, given the distorted held-out digits rescaled as its training inputs
    were, scores at least 5 points more: the rescaling happened outside the model."""
    distorted = _distort(images, HELD_OUT)
    rescaled = _like_training_inputs(distorted, log)
    if rescaled is None:
        return None
    score = _held_out_accuracy(model, rescaled, labels)
    if score < accuracy + 0.05:
        return None
    return Mistake(
        "inputs rescaled outside the model",
        None,
        "your training code rescaled (normalised) the images before they reached the model, but the images the "
        "returned model is given, by the check as by train_capstone's caller, are as they come, in [0, 1]. Given "
        f"the held-out digits rescaled like your training inputs, the same model scores {score:.1%}",
        look="where your training code changes the images' values, and what the returned model receives",
    )


def _below_target(
    model: nn.Module, accuracy: float, estimate: float, images: torch.Tensor, labels: torch.Tensor, log: ForwardLog
) -> CheckError:
    """How far the model is from the target, and which kind of change would close the gap: learning the
    digits better (it falls short even on clean ones), or making training look like the test; or the
    training inputs were rescaled outside the model."""
    clean = _held_out_accuracy(model, images, labels)
    got = f"{accuracy:.1%}, {100 * (TARGET - accuracy):.1f} points short (your estimate {estimate:.1%})"
    rescaled = _rescaled_outside(model, accuracy, images, labels, log)
    if rescaled is not None:
        return mistake_error(
            "the held-out accuracy is below the target", rescaled, expected=f">= {TARGET:.0%}", got=got
        )
    if clean < TARGET:
        mistake = Mistake(
            "below target on clean digits",
            None,
            f"even the held-out digits without any distortion score only {clean:.1%}: the model has not learned "
            "the digits themselves well enough yet. That calls for more capacity or more (or better scheduled) "
            "training; compare the choices on your validation part",
        )
    else:
        each = {name: _held_out_accuracy(model, _distort(images, d), labels) for name, d in _one_kind_each().items()}
        worst = min(each, key=each.get)
        mistake = Mistake(
            "not robust to distortions",
            None,
            f"the held-out digits as they are score {clean:.1%}, distorted {accuracy:.1%}: the model knows the "
            "digits only as your training images show them. One kind of distortion at a time: "
            + ", ".join(f"{name} {value:.0%}" for name, value in each.items())
            + f"; the {worst} digits cost most. Make your training images look like the check's (augmentation), "
            "and measure your estimate on distorted copies of your validation part, so that it measures what "
            "the check does",
        )
    return mistake_error("the held-out accuracy is below the target", mistake, expected=f">= {TARGET:.0%}", got=got)


def _model_and_estimate(got: Any) -> tuple[nn.Module, float]:
    __tracebackhide__ = True
    _not_a_generator(got, "train_capstone")
    pair = _items(got, 2)
    if pair is None:
        raise CheckError(
            "train_capstone must return (model, val_accuracy)",
            got=_description(got),
            hint="return a pair: the trained model first, then your validation accuracy",
            usage=True,
        )
    model, estimate = pair
    if isinstance(model, dict) and model and all(isinstance(value, torch.Tensor) for value in model.values()):
        raise CheckError(
            "the first value train_capstone returns is a state_dict (the model's weights by name), not the model",
            got=describe(model),
            hint="the check runs the model on its digits, and weights alone cannot run: return the trained "
            "nn.Module itself",
            usage=True,
        )
    if not isinstance(model, nn.Module):
        raise CheckError(
            "the first value train_capstone returns must be the model (an nn.Module)",
            got=describe(model),
            hint="return (model, val_accuracy), in this order",
            usage=True,
        )
    _parts_readable(model)
    return model, float(as_number(estimate, "your validation accuracy"))


def _parts_readable(model: nn.Module) -> None:
    """A sentence for a model whose parameters() or modules() raise (methods of the student's own, overridden):
    the check reads both, as any caller might."""
    __tracebackhide__ = True
    for method in ("parameters", "modules"):
        try:
            list(getattr(model, method)())
        except Exception as exc:  # a method of the student's own that raises
            raise CheckError(
                f"the returned model's {method}() raised {type(exc).__name__}: {exc}",
                got=type(model).__name__,
                hint=f"a module lists its {method} from what it holds: leave {method}() as nn.Module defines it",
                usage=True,
            ) from None


def _estimate_outside(estimate: float, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> CheckError:
    """Why an estimate lies outside [0, 1]: a count, a percentage, or something the check cannot read."""
    message = "your validation accuracy is not a fraction in [0, 1]"
    counts = {s.correct: len(s.images) for s in _segments(log, images, labels)}
    if estimate in counts:
        mistake = Mistake(
            "count, not fraction",
            None,
            f"that is a count of right answers (of {counts[estimate]} "
            "images), not the share of them the model gets right",
        )
        return mistake_error(message, mistake, expected="a fraction in [0, 1]", got=fmt(estimate))
    miscount = _miscounted(estimate, _segments(log, images, labels), len(labels))
    if miscount is not None:
        return mistake_error(message, miscount[1], expected="a fraction in [0, 1]", got=fmt(estimate))
    if 1 < estimate <= 100:
        mistake = Mistake(
            "percent",
            None,
            "that is a percentage, where the accuracy is asked as a fraction in [0, 1]",
        )
        return mistake_error(message, mistake, expected="a fraction in [0, 1]", got=fmt(estimate))
    return CheckError(
        message,
        expected="a fraction in [0, 1]",
        got=fmt(estimate),
        hint="the accuracy is the share of your validation images the model gets right",
        usage=True,
    )


@torch.no_grad()
def _held_out_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    __tracebackhide__ = True
    device = next(model.parameters(), torch.empty(0)).device
    if device.type == "meta":
        raise CheckError(
            "the model is on the meta device, which holds no weights",
            usage=True,
            hint="build and train the model on the CPU",
        )
    images = images.to(device)
    try:
        out = run_student(model, images, what="your model")
    except CheckError as err:
        if not (err.mistake or "").startswith("raised"):
            raise
        dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} - {images.dtype}
        if dtypes:
            raise mistake_error(
                f"{err.message.splitlines()[0]}, on images of dtype {images.dtype}",
                OTHER_DTYPE,
                expected=f"a model that takes {images.dtype} images",
                got=f"weights of dtype {', '.join(sorted(str(d) for d in dtypes))}",
            ) from None
        if not _takes_flat_images(model, images):
            raise
        raise mistake_error(
            f"{err.message.splitlines()[0]}, on images of shape {tuple(images.shape)}",
            FLAT_INPUT,
            expected="10 scores for each image of shape (1, 8, 8)",
            got="scores only for images flattened to 64 numbers",
        ) from None
    out = expect_tensor(out, "the model's output", shape=(len(labels), 10))
    if out.is_complex():
        raise CheckError(
            "the model's output is complex",
            expected="10 real scores for each image",
            got=describe(out),
            hint="scores are compared by size, and complex numbers have none: what made the output complex?",
            usage=True,
        )
    return float((out.argmax(dim=1).cpu() == labels).double().mean())


OTHER_DTYPE = Mistake(
    "model in another dtype",
    None,
    "the model's weights have another dtype than the images it is given, by the check as by train_capstone's "
    "caller (float32): a layer does not mix the two, so the returned model cannot take the images it is meant for",
    look="where your training code changes the dtype of the model and of the images",
)
FLAT_INPUT = Mistake(
    "model takes flattened images",
    None,
    "the model works on images flattened to 64 numbers, but the images it is given, by the check as by "
    "train_capstone's caller, have the shape (N, 1, 8, 8): the flattening happened in your training code, outside "
    "the model, so the returned model cannot take the images it is meant for",
    look="the first layer of the returned model, and where your training code reshapes the images",
)


def _takes_flat_images(model: nn.Module, images: torch.Tensor) -> bool:
    """Does the model give 10 scores per image once the images are flattened to (N, 64)?"""
    try:
        out = run_student(model, images.flatten(1), what="your model")
    except CheckError:
        return False
    return isinstance(out, torch.Tensor) and tuple(out.shape) == (len(images), 10)


def _tolerance(size: int | None, accuracy: float, held: int) -> float:
    """How far an honest estimate on ``size`` images may fall from the held-out accuracy (3 sigma each, + 2%)."""
    p = min(max(accuracy, 0.5), 0.995)
    spread = math.sqrt(p * (1 - p))
    return 0.02 + 3 * spread / math.sqrt(size or 30) + 3 * spread / math.sqrt(held)


#: The share of a validation part's images (exactly, or shifted by a pixel) the training had used before the estimate,
#: from which on a validation part counts as leaked: an honest split shares none.
LEAKED_SHARE = 0.05


#: How far (in standard deviations of a rank test) the validation images' nearest training inputs may be closer
#: than those of digits the student never had, before the check calls them trained on: p < 3e-6 by chance.
MEMORISED_Z = 4.5


def _nearest_training_input(targets: torch.Tensor, log: ForwardLog, before: int) -> torch.Tensor | None:
    """For each target image, the cosine (centred) of the training input most like it among the training calls
    before call ``before``, or None without any."""
    rows = [call.rows for call in log.calls if call.trained and len(call.rows) and call.seq < before]
    if not rows:
        return None
    unit = _unit(targets)
    best = torch.full((len(targets),), -1.0)
    for chunk in torch.cat(rows).split(4096):
        best = torch.maximum(best, (_unit(chunk) @ unit.T).max(dim=0).values)
    return best


def _rank_z(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mann-Whitney's U for "a is larger than b", as a z-score (normal approximation, no ties expected)."""
    ranks = torch.cat([a, b]).argsort().argsort().double() + 1
    n1, n2 = len(a), len(b)
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    return (u - n1 * n2 / 2) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)


def _trained_on_copies(source: Source, log: ForwardLog, images: torch.Tensor, held_out: torch.Tensor) -> float:
    """How much closer the estimate's images come to some input the model trained on before that estimate than
    digits the student never had do (a z-score): augmented copies of validation images in training show here,
    where exact matching misses them. A model retrained on everything after its estimate is fine."""
    if source.images is None or len(source.images) < 50:
        return 0.0
    validation = _nearest_training_input(images[_spread(source.images, 200)], log, source.start)
    control = _nearest_training_input(held_out[: min(len(held_out), 200)], log, source.start)
    if validation is None or control is None:
        return 0.0
    return _rank_z(validation, control)


def _same(a: float, b: float) -> bool:
    """Equal up to float32 rounding."""
    return abs(a - b) <= 1e-5 * max(abs(b), 1e-3)


def _miscounts(segment: Segment, given: int) -> list[tuple[float, Mistake]]:
    """What a slip in counting gives on a recorded evaluation (batches as its calls), with its mistake: only the
    slips whose value differs from the honest accuracy."""
    right, size, batches = segment.correct, len(segment.images), len(segment.sizes)
    slips = [
        (sum(r / n for r, n in zip(segment.rights, segment.sizes)) / batches, BATCH_MEAN),
        (right / batches, PER_BATCH_COUNT),
        (right / (batches * max(segment.sizes)), WHOLE_BATCHES),
        ((right + segment.rights[-1]) / (size + segment.sizes[-1]), COUNTED_TWICE),
        (right / given, ALL_IMAGES),
        (1 - right / size, ERROR_RATE),
        (segment.loss_sum / size, LOSS_NOT_ACCURACY),
    ]
    return [(value, mistake) for value, mistake in slips if math.isfinite(value) and not _same(value, segment.accuracy)]


def _miscounted(estimate: float, segments: list[Segment], given: int) -> tuple[Segment, Mistake] | None:
    """The recorded evaluation (of at least 10 images, the latest first) and the counting slip that give the
    estimate exactly, or None."""
    for segment in sorted(segments, key=lambda s: -s.start):
        if len(segment.images) < 10:
            continue
        for value, mistake in _miscounts(segment, given):
            if _same(estimate, value):
                return segment, mistake
    return None


BATCH_MEAN = Mistake(
    "accuracy averaged over batches",
    None,
    "that is the mean of the batches' accuracies: a last batch smaller than the others weighs as much as a full "
    "one, so it is not the share of your validation images the model gets right",
    look="how the right answers and the images are added up over your validation batches",
)
PER_BATCH_COUNT = Mistake(
    "divided by the number of batches",
    None,
    "that is the count of right answers divided by the number of batches, not by the number of images",
    look="what the count of right answers is divided by (the length of a DataLoader counts its batches)",
)
WHOLE_BATCHES = Mistake(
    "whole batches counted",
    None,
    "that counts every batch as a full one: the last batch holds fewer images, so the number of images is "
    "too large and the accuracy too small",
    look="how the number of validation images is added up, batch by batch",
)
COUNTED_TWICE = Mistake(
    "a batch counted twice",
    None,
    "the last batch's right answers and images are added once more after the loop, so it counts twice",
    look="the lines after your validation loop, and their indentation",
)
ALL_IMAGES = Mistake(
    "divided by all images",
    None,
    "that is the right answers on your validation part divided by the number of all the images train_capstone "
    "received, not by the number of validation images",
    look="what the count of right answers is divided by",
)
LOSS_NOT_ACCURACY = Mistake(
    "loss, not accuracy",
    None,
    "that is the mean cross-entropy loss on your validation images, not the share of them the model gets right",
    look="the value returned as val_accuracy",
)
ERROR_RATE = Mistake(
    "error rate",
    None,
    "that is the error rate (the share of wrong answers): the accuracy is the share of right ones",
)
LABELS_MISPAIRED = Mistake(
    "labels paired wrongly",
    None,
    "an accuracy near chance (one digit in ten) from a model that gets most held-out digits right: are the "
    "predictions compared with the labels of the same images, in the same order? A shuffled validation loader, "
    "or labels taken from another split, pairs them at random",
    look="where the predictions and the labels they are compared with come from",
)


def _chance_or_error_rate(estimate: float, accuracy: float, tolerance: float) -> Mistake | None:
    """An estimate near chance (labels paired at random) or near the error rate, whichever it is closer to."""
    if accuracy < 0.5:
        return None
    near_chance = abs(estimate - 0.1) <= 0.02 + 3 * math.sqrt(0.09 / 100)
    near_error = abs(estimate - (1 - accuracy)) <= tolerance
    if near_chance and (not near_error or abs(estimate - 0.1) < abs(estimate - (1 - accuracy))):
        return LABELS_MISPAIRED
    return ERROR_RATE if near_error else None


def _estimate_error(
    estimate: float, accuracy: float, source: Source, held: int, miscount: tuple[Segment, Mistake] | None
) -> CheckError | None:
    """The estimate against the held-out accuracy: taken on training images, miscounted (``miscount``: the
    recorded evaluation and the slip that give it), or too far from it."""
    if source.trained is not None:
        mistake = Mistake(
            "estimate on training images",
            None,
            "your estimate was measured on images the model "
            "had trained on, so it says how well the model remembers, not how well it generalises",
            look="the images val_accuracy is measured on, and whether the training loader ever saw them",
        )
        return mistake_error(
            "your estimate is not measured on a validation part kept aside from training",
            mistake,
            expected="an accuracy on images your training never used",
            got=f"{estimate:.1%}, measured on {len(source.trained.images)} images, {source.share:.0%} of which your "
            f"training had used (held-out accuracy: {accuracy:.1%})",
        )
    if miscount is not None:
        segment, mistake = miscount
        return mistake_error(
            "your estimate is not the share of your validation images the model gets right",
            mistake,
            expected=f"{segment.correct} right of {len(segment.images)} images: {fmt(segment.accuracy)}",
            got=fmt(estimate),
        )
    tolerance = _tolerance(source.size, accuracy, held)
    if abs(estimate - accuracy) <= tolerance:
        return None
    message = "your estimate is far from the model's accuracy on held-out digits"
    expected = f"{accuracy:.1%} ± {tolerance:.1%}"
    zero = Mistake(
        "estimate is zero",
        0.0,
        "an accuracy of exactly 0 from a model that is right on most digits: is "
        "the count divided with // (integer division), which rounds the fraction down to 0?",
    )
    mistake = first_mistake(estimate, [zero]) or _chance_or_error_rate(estimate, accuracy, tolerance)
    if mistake is not None:
        return mistake_error(message, mistake, expected=expected, got=f"{estimate:.1%}")
    return CheckError(
        message,
        expected=expected,
        got=f"{estimate:.1%}",
        hint="measure the returned model, in eval mode, on your validation part: right answers / images",
    )


TRAINING_ACCURACY = Mistake(
    "training accuracy as estimate",
    None,
    "that is the accuracy on the last epoch's training batches, counted as the model trained on them: images it "
    "learns from say how well it remembers, not how well it does on digits it never saw",
    look="where val_accuracy is counted: inside the training loop, or on images the training loader never gives",
)
LAST_BATCH_ONLY = Mistake(
    "last validation batch only",
    None,
    "that is the accuracy of the last batch of your validation loop alone: the loop sets the accuracy anew for each "
    "batch instead of adding up the right answers and the images of all of them",
    look="your validation loop: what each batch does to the accuracy",
)


def _last_epoch(log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> tuple[list[int], list[int]]:
    """The right answers and the sizes of the last training calls, back to the first that repeats an image
    (the last epoch), as long as each shows the student's images unaltered; empty lists without any."""
    originals = _unit(images)
    seen: set[int] = set()
    rights, sizes = [], []
    for call in reversed([call for call in log.calls if call.trained]):
        if call.predicted is None or not len(call.rows):
            break
        index = _match(call.rows, originals)
        shown = set(index.tolist())
        if bool((index < 0).any()) or seen & shown:
            break
        seen |= shown
        rights.append(int((call.predicted == labels[index]).sum()))
        sizes.append(len(index))
    return rights, sizes


def _training_accuracy(estimate: float, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> bool:
    """Is the estimate the accuracy over the last epoch's training batches (each image once, or the mean of the
    batches' accuracies), counted from the outputs the training steps used?"""
    rights, sizes = _last_epoch(log, images, labels)
    if sum(sizes) < 10 or sum(rights) == sum(sizes):  # every image right: 1.0 is any honest estimate's too
        return False
    counted = sum(rights) / sum(sizes)
    batch_mean = sum(r / n for r, n in zip(rights, sizes)) / len(sizes)
    return any(abs(estimate - value) <= 1e-6 for value in (counted, batch_mean))


def _last_batch_only(estimate: float, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> bool:
    """Is the estimate the accuracy of the last batch of a validation loop (batches of one size, the last no
    larger), where no other evaluation gives it (a single call, a prefix or a suffix of a run of calls, as
    _segments spans them)? Two calls of different sizes (the training part measured, then the validation part)
    are not a loop's batches."""
    found = False
    for run in _runs(log, _unit(images)):
        sizes = [len(index) for _, index in run]
        rights = [int((call.predicted == labels[index]).sum()) for call, index in run]
        n = len(run)
        spans = {(i, i + 1) for i in range(n)} | {(0, j) for j in range(1, n + 1)} | {(i, n) for i in range(n)}
        if n > 1:
            spans.discard((n - 1, n))
        if any(_same(estimate, sum(rights[i:j]) / sum(sizes[i:j])) for i, j in spans):
            return False
        # a loader's batches: one size, but for a last one no larger; two calls alone only when of one size
        batches = n > 1 and len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0] and (n > 2 or sizes[0] == sizes[1])
        found = found or (batches and _same(estimate, rights[-1] / sizes[-1]))
    return found


def _estimate_slip(
    estimate: float, source: Source, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor
) -> CheckError | None:
    """An estimate that is the training batches' accuracy (where no evaluation gives it), one written in where the
    model was never measured, or one validation batch's."""
    if source.size is None and source.trained is None and _training_accuracy(estimate, log, images, labels):
        return mistake_error(
            "your estimate is not measured on a validation part kept aside from training",
            TRAINING_ACCURACY,
            expected="an accuracy on images your training never used",
            got=f"{estimate:.1%}, the accuracy on the training batches of the last epoch",
        )
    if source.size is None and source.trained is None and _never_measured(log):
        return mistake_error(
            "your estimate was not measured: the model never ran on images outside its training steps",
            ESTIMATE_NOT_MEASURED,
            expected="an accuracy counted by running the model on your validation part",
            got=f"{estimate:.1%}, and no forward pass without training recorded",
        )
    if _last_batch_only(estimate, log, images, labels):
        return mistake_error(
            "your estimate is the accuracy of one batch of your validation loop",
            LAST_BATCH_ONLY,
            expected="the right answers over all your validation images",
            got=f"{estimate:.1%}, the accuracy of its last batch alone",
        )
    return None


ESTIMATE_NOT_MEASURED = Mistake(
    "estimate not measured",
    None,
    "every forward pass of the model fed a training step, and none measured it: the validation accuracy returned "
    "is a number written in (a placeholder, the target, an accuracy seen on another run), not one counted on this "
    "model's predictions for images it did not train on",
    look="where val_accuracy gets its value",
)


def _never_measured(log: ForwardLog) -> bool:
    """Did the recorder see the training (some calls trained on), but no forward pass without training, while it
    recorded (an estimate written in, not measured)?"""
    trained = sum(1 for call in log.calls if call.trained)
    return trained > 0 and trained == len(log.calls) and log.rows < log.MAX_ROWS


PARTLY_TRAINED_ON = Mistake(
    "validation part partly trained on",
    None,
    "some of the images your estimate was measured on went into training too: the training part and the validation "
    "part overlap, so the estimate is partly how well the model remembers. The two parts of a split share no image",
    look="the indices (or the split calls) your training part and your validation part are made from",
)
ESTIMATE_IN_TRAINING_MODE = Mistake(
    "estimate in training mode",
    None,
    "dropout and batch norm act differently in training mode: the estimate measures a noisier network than the "
    "one you return in eval mode",
    look="the mode the model is in when val_accuracy is measured",
)
TRAINED_ON_COPIES = Mistake(
    "estimate on augmented training images",
    None,
    "the images of your validation part, or altered copies of them, went into training: the estimate says how "
    "well the model remembers them, not how well it generalises",
    look="which indices the training loader is built from",
)


BACK_IN_TRAINING_MODE = Mistake(
    "back in training mode after measuring",
    None,
    "your estimate was measured in eval mode, but something after it switched the model back to training mode "
    "before it was returned (an evaluate function that hands the model back in training mode, as 07.1's does): "
    "dropout and batch norm act differently in training mode, and the caller gets the model as you return it",
    look="the lines between measuring val_accuracy and the return, and the end of any function they call",
)


def _measured_in_eval(estimate: float, log: ForwardLog, images: torch.Tensor, labels: torch.Tensor) -> bool:
    """Was the estimate measured with the model in eval mode: the evaluation that gives it, or, where none is
    found (distorted copies of the validation part, say), the last call without training?"""
    source = _source_of(estimate, log, images, labels)
    if source.size is not None:
        return source.eval_mode
    last = [call for call in log.calls if not call.trained]
    return bool(last) and not last[-1].mode


INPUTS_CHANGED = Mistake(
    "inputs changed in place",
    None,
    "train_capstone changed the tensors it was given in place (an in-place operation on them: -=, /=, a method "
    "ending in _, or an assignment into them): its caller's images or labels are not what they were, and what "
    "your model learned from is not what the caller will give it",
    look="every line of train_capstone that writes into images or labels, or into a view of them",
)


def _unchanged(given: tuple[torch.Tensor, torch.Tensor], images: torch.Tensor, labels: torch.Tensor) -> None:
    """The images and labels handed to train_capstone are as they were given (fresh copies to compare)."""
    __tracebackhide__ = True
    for name, got, want in (("images", given[0], images), ("labels", given[1], labels)):
        if got.shape != want.shape or got.dtype != want.dtype or not torch.equal(got, want):
            raise mistake_error(
                f"train_capstone changed the {name} it was given",
                INPUTS_CHANGED,
                expected=f"the {name} as they were handed over",
                got=f"{name} changed in place",
            )


def _returned_in_training(model: nn.Module, measured_in_eval: bool = False) -> CheckError | None:
    """The error for a model returned with some layer in training mode, or None; ``measured_in_eval``: the
    estimate came from an evaluation in eval mode."""
    training = [
        f"layer {name} ({type(m).__name__})" if name else "the model" for name, m in model.named_modules() if m.training
    ]
    if training:
        mistake = (
            BACK_IN_TRAINING_MODE
            if measured_in_eval
            else Mistake(
                "returned in training mode",
                None,
                "dropout and batch norm act differently in training mode, and the model is still in it when it is "
                "measured and returned",
                look="the end of train_capstone: which mode is the model in when you measure it, and when you return it?",
            )
        )
        return mistake_error(
            "the model came back in training mode",
            mistake,
            expected="eval mode",
            got=f"in training mode: {', '.join(training[:3])}"
            + (f" and {len(training) - 3} more" if len(training) > 3 else ""),
        )
    return None


def _leaked(
    estimate: float, accuracy: float, source: Source, log: ForwardLog, images: torch.Tensor, held_out: torch.Tensor
) -> CheckError | None:
    """The error for an estimate measured on a validation part that training partly used (the images themselves,
    or altered copies of them), or None."""
    if source.size is not None and source.share >= LEAKED_SHARE:
        return mistake_error(
            "your estimate is not measured on a validation part kept aside from training",
            PARTLY_TRAINED_ON,
            expected="an accuracy on images your training never used",
            got=f"{estimate:.1%}, measured on {source.size} images, about {source.share:.0%} of which your training "
            f"had used (held-out accuracy: {accuracy:.1%})",
        )
    copies = _trained_on_copies(source, log, images, held_out)
    if copies > MEMORISED_Z:
        return mistake_error(
            "your estimate is not measured on a validation part kept aside from training",
            TRAINED_ON_COPIES,
            expected="an accuracy on images your training never used",
            got=f"{estimate:.1%} (held-out accuracy: {accuracy:.1%}), measured on {source.size} images whose "
            f"closest training inputs are far closer than for digits you never had ({copies:.1f} standard deviations)",
        )
    return None


@exercise("07.3", "the capstone")
def check_capstone(train_capstone) -> dict:
    """Run train_capstone(images, labels) -> (model, validation accuracy) on one thread, timing its CPU;
    measure the model on digits it never saw (a split the check makes), distorted as HELD_OUT says, and
    where its estimate came from."""
    expect_function(train_capstone, "train_capstone")
    images, labels = load_digits_tensors()
    seen, held = digits_split(len(labels), 0.2, seed=2026)
    given = (images[seen], labels[seen])
    got, seconds, log = _run_capstone(train_capstone, *given)
    model, estimate = _model_and_estimate(got)
    _unchanged(given, images[seen], labels[seen])
    if not 0.0 <= estimate <= 1.0:
        raise _estimate_outside(estimate, log, images[seen], labels[seen])
    if any(m.training for m in model.modules()):
        error = _returned_in_training(model, _measured_in_eval(estimate, log, images[seen], labels[seen]))
        if error is not None:
            raise error
    accuracy = _held_out_accuracy(model, _distort(images[held], HELD_OUT), labels[held])
    if seconds > BUDGET:
        mistake = Mistake(
            "over budget",
            None,
            "fewer epochs, a smaller network or larger batches: time one epoch first, then decide how many fit",
        )
        raise mistake_error(
            "training took too long", mistake, expected=f"at most {BUDGET:g} s of CPU time", got=f"{seconds:.3g} s"
        )
    source = _source_of(estimate, log, images[seen], labels[seen])
    leak = _leaked(estimate, accuracy, source, log, images[seen], images[held])
    if leak is not None:
        raise leak
    slip = _estimate_slip(estimate, source, log, images[seen], labels[seen])
    if accuracy < TARGET and source.trained is None and slip is None:
        raise _below_target(model, accuracy, estimate, images[held], labels[held], log)
    if slip is not None:
        raise slip
    if source.training:
        raise mistake_error(
            "your estimate was measured with dropout or batch norm in training mode",
            ESTIMATE_IN_TRAINING_MODE,
            expected="an accuracy measured in eval mode, as the returned model is measured",
            got=f"{estimate:.1%} (held-out accuracy: {accuracy:.1%})",
        )
    miscount = None
    if source.size is None and source.trained is None:
        miscount = _miscounted(estimate, _segments(log, images[seen], labels[seen]), len(seen))
    error = _estimate_error(estimate, accuracy, source, len(held), miscount)
    if error is not None:
        raise error
    passed(f"capstone: held-out accuracy on distorted digits >= {TARGET:.0%} within the {BUDGET:g} s CPU budget")
    clean = _held_out_accuracy(model, images[held], labels[held])
    return {"accuracy": accuracy, "clean_accuracy": clean, "estimate": estimate, "cpu_seconds": seconds}

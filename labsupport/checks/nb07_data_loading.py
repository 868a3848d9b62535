"""Checks for notebook 07: evaluate and train written by hand,
the workers prediction (measured here), and the capstone on held-out digits."""
from __future__ import annotations

import copy
import time
from types import SimpleNamespace

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
from . import core
from .core import CheckError, check_prediction, compare, describe, exercise, expect_function, expect_tensor, passed, read_prediction, run_student  # noqa: E501

__all__ = ["check_training_loop", "check_workers_prediction", "check_capstone"]
TARGET, BUDGET = 0.97, 30.0  # the capstone: held-out accuracy, and CPU seconds on one thread
_t = lambda v: torch.tensor(float(v), dtype=torch.float64)  # noqa: E731


def _data(seed: int, n: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)), 32)


@torch.no_grad()
def _loss_acc(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    was, _, dev = model.training, model.eval(), pick_device()
    logits, _ = model(x.to(dev)), model.train(was)
    return F.cross_entropy(logits, y.to(dev)).item(), (logits.argmax(1) == y.to(dev)).double().mean().item()


def _train(model, loader, val, train=None, zero_grad=True):
    """Two epochs of the student's train (-> history, writer log, steps, scheduler steps) or the reference's."""
    opt, steps, dev, history, log = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), [], pick_device(), {}, {}
    sched, _ = torch.optim.lr_scheduler.StepLR(opt, 2, 0.7), opt.register_step_post_hook(lambda *a: steps.append(1))
    if train is not None:
        writer = SimpleNamespace(add_scalar=lambda tag, value, step=None, *a, **k: log.setdefault(tag, []).append(step))
        return run_student(train, model, loader, val, opt, sched, 2, writer, what="train"), log, len(steps), sched.last_epoch
    for _ in range(2):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
            _ = opt.zero_grad() if zero_grad else None
            loss.backward(), opt.step(), sched.step(), history.setdefault("loss", []).append(loss.item())
        for key, value in zip(("val_loss", "val_acc"), _loss_acc(model, *val.dataset.tensors)):
            history.setdefault(key, []).append(value)
    return history, torch.cat([p.detach().double().flatten() for p in model.parameters()])


def _numbers(got, n: int, what: str) -> list[float]:
    if not (isinstance(got, (tuple, list)) and len(got) == n and all(type(v) in (int, float) for v in got)):
        raise CheckError(f"{what} must be {n} Python numbers", got=describe(got), hint="use .item() on tensors")
    return list(got)


@exercise("07.1", "evaluate and train")
def check_training_loop(evaluate, train) -> None:
    """evaluate(model, loader) -> (mean loss, accuracy) on a batch-norm model with a short last batch;
    train(model, train_loader, val_loader, optimizer, scheduler, 2, writer) -> history, against a reference."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(72)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    model, loader, val, spy = model.to(pick_device()), _data(1, 90), _data(2, 40), SimpleNamespace(seen=[])
    model.register_forward_hook(lambda m, i, o: spy.seen.append((m.training, torch.is_grad_enabled())))
    want, x, y = _loss_acc(model, *loader.dataset.tensors), *loader.dataset.tensors
    means = [sum(v) / len(v) for v in zip(*[_loss_acc(model, *b) for b in loader])]
    spy.seen = []
    got = _numbers(run_student(evaluate, model, loader, what="evaluate(model, loader)"), 2, "evaluate's result")
    for bad, hint in [(any(t for t, _ in spy.seen), "model.eval() is missing: batch norm used the batch's statistics"),
                      (any(g for _, g in spy.seen), "torch.no_grad() is missing: it builds graphs nobody uses"),
                      (not model.training, "evaluate leaves the model in eval mode: call model.train() at its end")]:
        if bad:
            raise CheckError("evaluate does not measure the model as it should", hint=hint)
    compare("evaluate's mean loss", _t(got[0]), _t(want[0]), rtol=1e-4, mistakes=[(_t(means[0]), "the mean of "
            "batch means weighs the short last batch like full ones: sum per-image losses, divide by the count")])
    compare("evaluate's accuracy", _t(got[1]), _t(want[1]), rtol=1e-4, mistakes=[(_t(want[1] * len(y)), "that is "
            "the number right: divide by the count"), (_t(want[1] * 100), "a fraction, not a percentage")])
    start, spy.seen = copy.deepcopy(model), []
    history, log, steps, sched_steps = _train(model, loader, val, train=train)
    n = 2 * len(loader)  # steps in two epochs
    for bad, hint in [(not all(t for t, g in spy.seen if g), "model.train() is missing at the start of each epoch"),
                      (steps != n, f"optimizer.step() ran {steps} times for {n} batches"),
                      (sched_steps == 2, "the scheduler steps once per epoch: step it after every batch"),
                      (sched_steps != n, f"scheduler.step() ran {sched_steps} times for {n} batches"),
                      (not isinstance(history, dict), "train must end with `return history`")]:
        if bad:
            raise CheckError("train does not train as it should", hint=hint)
    (ref, weights), (_, unzeroed) = _train(copy.deepcopy(start), loader, val), _train(start, loader, val, zero_grad=False)
    compare("the trained weights", torch.cat([p.detach().double().flatten() for p in model.parameters()]), weights,
            rtol=1e-4, atol=1e-6, mistakes=[(unzeroed, "optimizer.zero_grad() is missing: gradients add up")])
    for key, k in (("loss", n), ("val_loss", 2), ("val_acc", 2)):
        compare(f"history[{key!r}]", torch.tensor(_numbers(history.get(key), k, f"history[{key!r}]")).double(),
                torch.tensor(ref[key]).double(), rtol=1e-4, atol=1e-6)
    for tag, want_steps in [(t, list(range(1, n + 1))) for t in ("loss/train", "lr")] + [
            (t, [n // 2, n]) for t in ("accuracy/train", "accuracy/val", "loss/val")]:
        if log.get(tag) != want_steps:
            raise CheckError(f"the steps logged under {tag!r} are wrong", expected=str(want_steps), got=str(log.get(tag)),
                             hint="log at the step count, not the epoch number, so curves line up")
    passed("evaluate and train: modes, no_grad, per-image means, zero_grad/step, scheduler per batch, logs")


@exercise("07.2", "do workers help? (predict, then run)")
def check_workers_prediction(prediction) -> None:
    """Measure whether 2 workers make an epoch faster on one core, in sleep and in spin mode."""
    words, name = ("faster", "not faster"), "2 workers on one core (sleep, spin)"
    choices = [(a, b) for a in words for b in words]
    prediction = read_prediction(name, prediction, choices)  # before seconds of measuring
    # sleeping reads come close to 2x; spinning ones reach 1.5x only when two other busy programs share the core
    actual = tuple("faster" if worker_speedup(mode) > 1.6 else "not faster" for mode in ("sleep", "spin"))
    check_prediction(name, prediction, actual, choices=choices,
                     why="A sleeping read leaves the core free for the other worker; a spinning one needs "
                         "the core itself, so workers help only while there are idle cores.",
                     mistakes={("faster", "faster"): "Two spinning workers share one core: no more CPU than one.",
                               ("not faster", "not faster"): "While one worker sleeps, the other can read."})


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (DataLoader workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN) if resource else None
    return time.process_time() + (kids.ru_utime + kids.ru_stime if kids else 0.0)


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    dev = next(model.parameters(), torch.empty(0)).device
    out = expect_tensor(run_student(model, x.to(dev), what="your model"), "the model's output", shape=(len(y), 10))
    return (out.argmax(1).cpu() == y).double().mean().item()


@exercise("07.3", "the capstone: 97% on held-out digits")
def check_capstone(train_capstone) -> dict:
    """Run train_capstone(images, labels) -> (model, validation accuracy) on one thread, timing its CPU;
    measure the model on digits it never saw (a split the check makes)."""
    expect_function(train_capstone, "train_capstone")
    images, labels = load_digits_tensors()
    seen, held = digits_split(len(labels), 0.2, seed=2026)
    threads, start, _ = torch.get_num_threads(), _cpu_seconds(), torch.set_num_threads(1)
    try:
        got = run_student(train_capstone, images[seen], labels[seen], what="train_capstone",
                          timeout=min(core.TIME_LIMIT, max(5.0, 2 * BUDGET)))
    finally:
        seconds, _ = _cpu_seconds() - start, torch.set_num_threads(threads)
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], nn.Module)):
        raise CheckError("train_capstone must return (model, accuracy)", got=describe(got))
    model, estimate = got[0], _numbers(got[1:], 1, "your validation accuracy")[0]
    if any(m.training for m in model.modules()):
        raise CheckError("the model came back in training mode", hint="call model.eval() before you measure "
                         "(and return): dropout and batch norm act differently in training mode")
    acc, fitted = _accuracy(model, images[held], labels[held]), _accuracy(model, images[seen], labels[seen])
    if seconds > BUDGET:
        raise CheckError("training took too long", expected=f"at most {BUDGET:g} s of CPU time",
                         got=f"{seconds:.3g} s", hint="fewer epochs or a smaller network")
    on_train = estimate >= fitted and estimate - acc > 0.02
    if acc < TARGET or on_train:
        raise CheckError("the held-out accuracy is below the target" if acc < TARGET else "your estimate is off",
                         expected=f">= {TARGET:.0%}", got=f"{acc:.1%} (your estimate {estimate:.1%})",
                         hint="your estimate matches the training images' accuracy: it was measured on images "
                              "the model trained on; keep a validation part aside" if on_train else None)
    passed(f"capstone: held-out accuracy >= {TARGET:.0%} within the {BUDGET:g} s CPU budget")
    return {"accuracy": acc, "estimate": estimate, "cpu_seconds": seconds}

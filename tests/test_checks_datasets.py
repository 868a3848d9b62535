"""Checks of notebook 07: evaluate and train (one test per named mistake, from one spec),
the workers prediction (measured), and the capstone on held-out digits."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import labsupport as lab
import labsupport.checks.core as core
import labsupport.checks.nb07_data_loading as ds

DEVICE = lab.pick_device()
# the "optimizer.step() never called" mistake makes torch warn about the scheduler order; that is the point
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")


def make_evaluate(eval_mode=True, no_grad=True, back_to_train=True, per_batch=False, count=False,
                  percent=False, tensors=False):
    """A student's evaluate with the listed mistakes switched on."""
    def evaluate(model, loader):
        _ = model.eval() if eval_mode else None
        loss_sum, correct, total, batches = 0.0, 0, 0, 0
        with torch.set_grad_enabled(not no_grad):
            for images, labels in loader:
                images, labels = images.to(DEVICE), labels.to(DEVICE)
                logits = model(images)
                loss = F.cross_entropy(logits, labels, reduction="mean" if per_batch else "sum")
                loss_sum += loss.item()
                correct += (logits.argmax(1) == labels).sum().item()
                total, batches = total + len(labels), batches + 1
        _ = model.train() if back_to_train else None
        loss = loss_sum / (batches if per_batch else total)
        acc = correct if count else correct / total * (100 if percent else 1)
        return (torch.tensor(loss), torch.tensor(acc)) if tensors else (loss, acc)
    return evaluate


def make_train(train_mode=True, zero_grad=True, step=True, sched_per_epoch=False, epoch_steps=False,
               tensors=False, returns=True, evaluate=make_evaluate()):
    """A student's train with the listed mistakes switched on."""
    def train(model, train_loader, val_loader, optimizer, scheduler, epochs, writer):
        history, n = {"loss": [], "val_loss": [], "val_acc": []}, 0
        for epoch in range(epochs):
            _ = model.train() if train_mode or epoch == 0 else None
            correct = seen = 0
            for images, labels in train_loader:
                images, labels = images.to(DEVICE), labels.to(DEVICE)
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                _ = optimizer.zero_grad() if zero_grad else None
                loss.backward()
                _ = optimizer.step() if step else None
                n += 1
                writer.add_scalar("lr", scheduler.get_last_lr()[0], n)
                _ = scheduler.step() if not sched_per_epoch else None
                history["loss"].append(loss if tensors else loss.item())
                writer.add_scalar("loss/train", loss.item(), n)
                correct, seen = correct + (logits.argmax(1) == labels).sum().item(), seen + len(labels)
            _ = scheduler.step() if sched_per_epoch else None
            val_loss, val_acc = evaluate(model, val_loader)
            history["val_loss"].append(val_loss)
            history["val_acc"].append(val_acc)
            at = epoch + 1 if epoch_steps else n
            for tag, value in (("accuracy/train", correct / seen), ("accuracy/val", val_acc), ("loss/val", val_loss)):
                writer.add_scalar(tag, value, at)
        return history if returns else None
    return train


def test_the_reference_passes(capsys):
    lab.check_training_loop(make_evaluate(), make_train())
    assert capsys.readouterr().out.startswith("PASS  evaluate and train:")


LOOP_MISTAKES = [
    (dict(eval_mode=False), {}, "model.eval() is missing"),
    (dict(no_grad=False), {}, "torch.no_grad() is missing"),
    (dict(back_to_train=False), {}, "call model.train() at its end"),
    (dict(per_batch=True), {}, "the mean of batch means"),
    (dict(count=True), {}, "the number right"),
    (dict(percent=True), {}, "not a percentage"),
    (dict(tensors=True), {}, "use .item()"),
    ({}, dict(train_mode=False, evaluate=make_evaluate(back_to_train=False)), "model.train() is missing at the"),
    ({}, dict(step=False), "optimizer.step() ran 0 times"),
    ({}, dict(sched_per_epoch=True), "the scheduler steps once per epoch"),
    ({}, dict(zero_grad=False), "optimizer.zero_grad() is missing"),
    ({}, dict(tensors=True), "use .item()"),
    ({}, dict(returns=False), "return history"),
    ({}, dict(epoch_steps=True), "not the epoch number"),
]


@pytest.mark.parametrize("eval_flags, train_flags, fragment", LOOP_MISTAKES, ids=lambda v: str(v)[:40])
def test_each_loop_mistake_is_named(eval_flags, train_flags, fragment):
    evaluate = make_evaluate(**eval_flags)
    with pytest.raises(core.CheckError) as err:
        lab.check_training_loop(evaluate, make_train(**train_flags))
    assert fragment in str(err.value)


def _raises(*args, **kwargs):
    raise RuntimeError("boom")


def _never(*args, **kwargs):
    while True:
        pass


BAD = [None, [1, 2], 3.5, "evaluate", _raises, _never, lambda *a: (float("nan"), float("nan"))]


@pytest.mark.parametrize("bad", BAD, ids=["None", "list", "float", "str", "raises", "never", "nan"])
def test_bad_answers_to_the_loop_check_are_check_errors(bad, monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.5)
    for args in ((bad, make_train()), (make_evaluate(), bad)):
        with pytest.raises(core.CheckError):
            lab.check_training_loop(*args)


# ---------------------------------------------------------------- the workers prediction

@pytest.mark.parametrize("answer", [("faster", "faster"), ("not faster", "not faster"), ("not faster", "faster"),
                                    None, "faster", ["fast", "slow"], float("nan"), ("faster",)])
def test_wrong_or_malformed_predictions_fail(answer, monkeypatch):
    monkeypatch.setattr(ds, "worker_speedup", lambda mode: 1.9 if mode == "sleep" else 1.0)
    with pytest.raises(core.CheckError):
        lab.check_workers_prediction(answer)


def test_the_prediction_is_measured(capsys, monkeypatch):
    from labsupport import slowdata
    measured = []  # a real measurement, on 16 items: 4 batches, 2 for each worker
    monkeypatch.setattr(ds, "worker_speedup", lambda mode: measured.append(mode) or slowdata.worker_speedup(mode, items=16))
    lab.check_workers_prediction(["faster", "not faster"])       # a list counts like a tuple
    assert measured == ["sleep", "spin"]
    assert "('faster', 'not faster') is right" in capsys.readouterr().out


def test_spin_workers_on_one_core_do_not_help():
    assert lab.worker_speedup("spin", items=8, delay=0.01) < 1.6  # the check's line between "faster" and not


# ---------------------------------------------------------------- the capstone

def make_capstone(epochs=3, eval_mode=True, estimate="val", sleep=0.0, nan=False):
    """A quick capstone solution (an MLP) with the listed mistakes switched on."""
    def train_capstone(images, labels):
        torch.manual_seed(0)
        val, fit = torch.arange(200), torch.arange(200, len(labels))
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(epochs):
            for x, y in DataLoader(TensorDataset(images[fit], labels[fit]), 64, shuffle=True):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(), loss.backward(), opt.step()
        time.sleep(sleep)
        _ = model.eval() if eval_mode else None
        part = fit if estimate == "train" else val
        with torch.no_grad():
            acc = (model(images[part]).argmax(1) == labels[part]).float().mean().item()
            _ = [p.fill_(float("nan")) for p in model.parameters()] if nan else None
        return model, acc
    return train_capstone


def test_a_good_capstone_passes(capsys):
    result = lab.check_capstone(make_capstone(epochs=20))
    assert capsys.readouterr().out == "PASS  capstone: held-out accuracy >= 97% within the 30 s CPU budget\n"
    assert result["accuracy"] >= 0.97 and 0 < result["cpu_seconds"] < 30


@pytest.mark.parametrize("flags, fragment", [
    (dict(eval_mode=False), "training mode"),
    (dict(epochs=1), "below the target"),
    (dict(epochs=20, estimate="train"), "measured on images the model trained on"),
    (dict(nan=True), "not finite"),
])
def test_each_capstone_mistake_is_named(flags, fragment):
    with pytest.raises(core.CheckError) as err:
        lab.check_capstone(make_capstone(**flags))
    assert fragment in str(err.value)


def test_the_capstone_time_budget(monkeypatch):
    monkeypatch.setattr(ds, "BUDGET", 0.01)
    with pytest.raises(core.CheckError, match="at most 0.01 s of CPU time"):
        lab.check_capstone(make_capstone(epochs=1))


@pytest.mark.parametrize("bad", [None, [1, 2], "model", _raises, _never, lambda x, y: (nn.Linear(64, 10), 0.9),
                                 lambda x, y: (None, 0.9), lambda x, y: nn.Flatten()])
def test_bad_capstone_answers_are_check_errors(bad, monkeypatch):
    monkeypatch.setattr(ds, "BUDGET", 0.2)
    monkeypatch.setattr(core, "TIME_LIMIT", 0.5)  # how long _never runs
    with pytest.raises(core.CheckError):
        lab.check_capstone(bad)

"""Checks of notebook 10: the references pass, each listed mistake is named, bad inputs get a CheckError."""
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labsupport as lab
from labsupport.checks import core


# ----------------------------------------------------------------------------- 10.1 Module.to prediction

def test_to_prediction_is_measured(capsys):
    lab.check_to_prediction("same")
    assert capsys.readouterr().out.startswith("PASS  Module.to: 'same' is right.")


@pytest.mark.parametrize("answer, fragment", [("new", "usual reason given for the rule"), ("maybe", "one of the choices"),
                                              (None, "no prediction yet"), (3, "one of the choices")])
def test_to_prediction_mistakes(answer, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_to_prediction(answer)


# ----------------------------------------------------------------------------- 10.2 GradScaler step

def _forward(model, inputs, targets, dtype, autocast=True):
    with torch.autocast(device_type=inputs.device.type, dtype=dtype, enabled=autocast):
        return F.cross_entropy(model(inputs), targets)


def amp_step(model, optimizer, scaler, inputs, targets, dtype, *, zero=True, scaled=True, via_scaler=True,
             update=True, autocast=True):
    loss = _forward(model, inputs, targets, dtype, autocast)
    if zero:
        optimizer.zero_grad(set_to_none=True)
    (scaler.scale(loss) if scaled else loss).backward()
    scaler.step(optimizer) if via_scaler else optimizer.step()
    if update:
        scaler.update()
    return loss.detach()


def test_amp_step_reference_passes(capsys):
    lab.check_amp_step(amp_step)
    assert capsys.readouterr().out.startswith("PASS  amp_step: the step on inf gradients was skipped")


def _variant(**wrong):
    return lambda *args: amp_step(*args, **wrong)


def never_returns(*args):
    while True:
        time.sleep(0.01)


AMP_MISTAKES = [
    (_variant(via_scaler=False, update=False), "optimizer.step\\(\\) stepped on the scaled"),
    (_variant(via_scaler=False), "No inf checks were recorded"),
    (_variant(zero=False), "the third step was skipped too: zero the gradients"),
    (_variant(scaled=False), "did not use scaler.scale"),
    (_variant(update=False), "call scaler.update"),
    (_variant(autocast=False), "under torch.autocast"),
    (lambda *a: [amp_step(*a)], "must return the loss"),
    (lambda *a: None, "must return the loss"),
    (None, "is None: run the exercise cell above first"),
    ([1, 2], "not a function"),
    (lambda *a: (_ for _ in ()).throw(NotImplementedError("Exercise 2")), "not written yet"),
    (lambda *a: 1 / 0, "ZeroDivisionError"),
    (lambda m, *a: [p.data.fill_(float("nan")) for p in m.parameters()] and torch.tensor(0.0), "or inf gradients"),
]


@pytest.mark.parametrize("wrong, fragment", AMP_MISTAKES)
def test_amp_step_names_the_mistake(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_amp_step(wrong)


def test_amp_step_stops_a_function_that_never_returns(monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_amp_step(never_returns)


# ----------------------------------------------------------------------------- 10.3 data parallel by hand

def data_parallel_grads(model, inputs, targets, world_size, *, start=lambda r, n: r * n, ranks=None,
                        reduction="mean", zero=True, scale=None, clone=True):
    n, kept = len(inputs) // world_size, []
    for r in range(world_size if ranks is None else ranks(world_size)):
        if zero:
            model.zero_grad(set_to_none=clone)
        s = start(r, n)
        F.cross_entropy(model(inputs[s:s + n]), targets[s:s + n], reduction=reduction).backward()
        kept.append([p.grad.clone() if clone else p.grad for p in model.parameters()])
    return [sum(gs) / (world_size if scale is None else scale) for gs in zip(*kept)]


def test_data_parallel_reference_passes(capsys):
    lab.check_data_parallel_grads(data_parallel_grads)
    assert capsys.readouterr().out.startswith("PASS  data_parallel_grads:")


def _dp(**wrong):
    return lambda *args: data_parallel_grads(*args, **wrong)


DP_MISTAKES = [
    (_dp(scale=1), "gradients summed, not averaged"),
    (_dp(reduction="sum"), "wrong loss reduction"),
    (_dp(zero=False), "gradients not zeroed between shards"),
    (_dp(ranks=lambda w: w - 1), "a shard was dropped"),
    (_dp(start=lambda r, n: r), "the shards overlap"),
    (_dp(clone=False), "one shard's gradient alone"),
    (_dp(ranks=lambda w: 1, scale=1), "one shard's gradient alone"),
    (_dp(start=lambda r, n: 0), "one shard's gradient alone"),
    (_dp(start=lambda r, n: r * n + 1), "world_size equal contiguous shards"),
    (lambda m, x, y, w: None, "one gradient per parameter"),
    (lambda m, x, y, w: torch.zeros(3), "one gradient per parameter"),
    (lambda m, x, y, w: [torch.zeros(1)], "a list of 8 tensors"),
    (lambda m, x, y, w: [np.zeros(1)] * 8, "numpy"),
    (lambda m, x, y, w: [torch.zeros(1)] * 8, "shape"),
    (lambda m, x, y, w: [torch.full_like(p, float("nan")) for p in m.parameters()], "NaN"),
    (lambda m, x, y, w: (_ for _ in ()).throw(NotImplementedError("Exercise 3")), "not written yet"),
    (lambda m, x, y, w: {}["x"], "KeyError"),
    ("not a function", "not a function"),
]


@pytest.mark.parametrize("wrong, fragment", DP_MISTAKES)
def test_data_parallel_names_the_mistake(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_data_parallel_grads(wrong)


def test_data_parallel_stops_a_function_that_never_returns(monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.5)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_data_parallel_grads(never_returns)


# ----------------------------------------------------------------------------- real DDP (synthesised results)

def result_with(states, world_size=2, lr=0.1):
    return {"world_size": world_size, "batch_size": 16, "lr": lr, "seed": 0, "states": states}


def float32(state):
    return {k: v.float() for k, v in state.items()}


@pytest.fixture(scope="module")
def reference():
    return float32(lab.sgd_step_state(0, 16, 0.1))


def test_ddp_check_accepts_the_one_process_step(reference, capsys):
    lab.check_ddp_equivalence(result_with([reference, reference]))
    assert "PASS  DDP: 2 workers on 1/2 of the batch" in capsys.readouterr().out


def test_ddp_check_names_each_mistake(reference):
    half = float32(lab.sgd_step_state(0, 16, 0.1, shard=(0, 2)))
    summed = float32(lab.sgd_step_state(0, 16, 0.2))
    for states, fragment in [([reference, {k: v + 1e-3 for k, v in reference.items()}], "drifted apart"),
                             ([half, half], "not averaged"), ([summed, summed], "summed, not averaged"),
                             ([{k: v + 1e-2 for k, v in reference.items()}] * 2, "differ from one process's step")]:
        with pytest.raises(lab.CheckError, match=fragment):
            lab.check_ddp_equivalence(result_with(states))


def test_ddp_check_fails_on_nan_parameters(reference):
    nan = {k: torch.full_like(v, float("nan")) for k, v in reference.items()}
    with pytest.raises(lab.CheckError, match="NaN"):
        lab.check_ddp_equivalence(result_with([nan, nan]))


@pytest.mark.parametrize("bad, fragment", [
    (None, "Got None"), ([1, 2], "list of length 2"), ({"states": []}, "keys world_size"),
    ({"world_size": "2", "batch_size": 16, "lr": 0.1, "seed": 0, "states": []}, "keys world_size"),
])
def test_ddp_check_rejects_what_is_not_a_result(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_ddp_equivalence(bad)


def test_ddp_check_rejects_broken_states(reference):
    for states, fragment in [([reference], "one DigitsCNN state dict per worker"), (None, "per worker"),
                             ([reference, {"w": torch.zeros(1)}], "per worker"),
                             ([reference, dict(reference, **{"classifier.2.bias": torch.zeros(3)})], "shape")]:
        with pytest.raises(lab.CheckError, match=fragment):
            lab.check_ddp_equivalence(result_with(states))

"""Checks of notebook 06 (torch.optim): the reference passes, each named mistake is named, bad input is a CheckError."""
import re

import pytest
import torch

import labsupport as lab
import labsupport.checks.core as core
from labsupport.checks.nb06_optim import _RULES


class SGDMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, group)

    def update(self, p, group):
        state = self.state[p]
        if "v" not in state:
            state["v"] = p.grad.clone()
        else:
            state["v"].mul_(group["momentum"]).add_(p.grad)
        p.sub_(group["lr"] * state["v"])


def variant(update=None, step=None, init=None):
    body = {k: v for k, v in (("update", update), ("step", step), ("__init__", init)) if v}
    return type("SGDMomentum", (SGDMomentum,), body)


def rule_optimizer(rule, own_settings):
    """An optimizer that applies one of the check's known wrong update rules (the spec the check replays)."""
    def init(self, params, lr=0.01, momentum=0.9):
        SGDMomentum.__init__(self, params, lr, momentum)
        self.constructor = {"lr": lr, "momentum": momentum}

    def update(self, p, group):
        hyper = group if own_settings else self.constructor
        new, self.state[p]["v"] = rule(p.clone(), p.grad.clone(), self.state[p].get("v"), hyper["lr"], hyper["momentum"])
        p.copy_(new)
    return variant(update=update, init=init)


def test_reference_passes(capsys):
    lab.check_sgd_momentum(SGDMomentum)
    assert capsys.readouterr().out.startswith("PASS  SGDMomentum: same parameters")


@pytest.mark.parametrize("rule, own, message", _RULES, ids=[m[:30] for _, _, m in _RULES])
def test_each_known_wrong_rule_is_named(rule, own, message):
    with pytest.raises(lab.CheckError, match=re.escape(message)):
        lab.check_sgd_momentum(rule_optimizer(rule, own))


def _shared_buffer(self, p, group):
    self.v = p.grad.clone() if not hasattr(self, "v") else self.v * group["momentum"] + p.grad
    p.sub_(group["lr"] * self.v)


def _no_skip(self):
    for group in self.param_groups:
        for p in group["params"]:
            self.update(p, group)


def _no_no_grad(self):
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.sub_(group["lr"] * p.grad)


def _alias(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _nan(self, p, group):
    p.fill_(float("nan"))


def _forever(self):
    while True:
        pass


@pytest.mark.parametrize("cls, fragment", [
    (variant(update=_shared_buffer), "keep one per parameter"),
    (variant(step=torch.no_grad()(_no_skip)), "skip it"),
    (variant(step=_no_no_grad), "torch.no_grad"),
    (variant(update=_alias), "p.grad.clone()"),
    (variant(update=_nan), "not finite"),
    (variant(init=lambda self, params, lr=0.1, momentum=0.9: None), r"super\(\).__init__"),
])
def test_class_mistakes_are_named(cls, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_sgd_momentum(cls)


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"), ([SGDMomentum], "got list"), (torch.optim.Adam, "TypeError"), (int, "must be a subclass"),
    (variant(step=lambda self: 1 / 0), "ZeroDivisionError"),
    (variant(step=lambda self: (_ for _ in ()).throw(NotImplementedError("Exercise 3"))), "not written yet"),
])
def test_bad_input(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_sgd_momentum(bad)


def test_bad_step_count_and_never_returning_step(monkeypatch):
    for steps in (0, 1, 2.5, None):
        with pytest.raises(lab.CheckError, match="steps"):
            lab.check_sgd_momentum(SGDMomentum, steps=steps)
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_sgd_momentum(variant(step=_forever))


def test_sweep_prediction_measures_the_sweep():
    with pytest.raises(lab.CheckError, match="must be one of"):
        lab.check_sweep_prediction("rmsprop")
    for bad in (None, 3, ["sgd"]):
        with pytest.raises(lab.CheckError):
            lab.check_sweep_prediction(bad)
    with pytest.raises(lab.CheckError, match="Likely mistake: Adam's step"):
        lab.check_sweep_prediction("adam", steps=50)

"""Checks of notebook 06 (optim): SGD with momentum as an Optimizer subclass."""
import numpy as np
import pytest
import torch

import labsupport as lab


class SGDMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = p.grad.clone()
                else:
                    state["velocity"].mul_(group["momentum"]).add_(p.grad)
                p.sub_(group["lr"] * state["velocity"])


def test_reference_passes(capsys):
    lab.check_sgd_momentum(SGDMomentum)
    assert capsys.readouterr().out == ("PASS  SGDMomentum: same parameters as torch.optim.SGD(momentum=...) "
                                       "after each of 6 steps (2 parameter groups, max rel. error < 1e-10)\n")


def test_lr_folded_into_the_velocity_is_equivalent_and_passes(capsys):
    # v = mu * v + lr * g; p -= v is the same update while lr is constant
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    v = self.state[p].get("v")
                    v = group["lr"] * p.grad if v is None else group["momentum"] * v + group["lr"] * p.grad
                    self.state[p]["v"] = v
                    p -= v
    lab.check_sgd_momentum(variant(torch.no_grad()(step)))
    assert capsys.readouterr().out.startswith("PASS  SGDMomentum")


def variant(step):
    return type("SGDMomentum", (SGDMomentum,), {"step": step})


def rule(update):
    """A step() applying ``update(p, grad, state, lr, mu)`` to every parameter with a gradient."""
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    update(p, p.grad, self.state[p], group["lr"], group["momentum"])
    return variant(step)


def _no_state(p, g, state, lr, mu):
    v = g.clone()  # a fresh velocity every step
    p -= lr * v


def _rebind(p, g, state, lr, mu):
    v = state["v"] = g.clone() if "v" not in state else mu * state["v"] + g
    p = p - lr * v  # noqa: F841 - the mistake: rebinds the name, the parameter stays put


def _uphill(p, g, state, lr, mu):
    v = state["v"] = g.clone() if "v" not in state else mu * state["v"] + g
    p += lr * v


def _dampened(p, g, state, lr, mu):
    v = state["v"] = g.clone() if "v" not in state else mu * state["v"] + (1 - mu) * g
    p -= lr * v


def _nesterov(p, g, state, lr, mu):
    v = state["v"] = g.clone() if "v" not in state else mu * state["v"] + g
    p -= lr * (g + mu * v)


def _lr_twice(p, g, state, lr, mu):
    v = state["v"] = lr * g if "v" not in state else mu * state["v"] + lr * g
    p -= lr * v


def _aliased(p, g, state, lr, mu):
    if "v" not in state:
        state["v"] = g  # the .grad tensor itself, not a copy
    else:
        state["v"].mul_(mu).add_(g)
    p -= lr * state["v"]


def _wrong_formula(p, g, state, lr, mu):
    v = state["v"] = g.clone() if "v" not in state else mu * state["v"] + 2 * g
    p -= lr * v


class FixedHyper(SGDMomentum):
    """Keeps lr and momentum from the constructor and ignores the groups' own."""

    def __init__(self, params, lr=0.01, momentum=0.9):
        super().__init__(params, lr, momentum)
        self.lr, self.momentum = lr, momentum

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    s = self.state[p]
                    s["v"] = p.grad.clone() if "v" not in s else self.momentum * s["v"] + p.grad
                    p -= self.lr * s["v"]


class NoNoGrad(SGDMomentum):
    def step(self):  # no @torch.no_grad()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(group["lr"] * p.grad)


class NoNoneSkip(SGDMomentum):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                p.sub_(group["lr"] * p.grad)


class NoSuper(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.9):
        self.params, self.lr, self.momentum = list(params), lr, momentum

    def step(self):
        for group in self.param_groups:
            pass


@pytest.mark.parametrize("variant_cls, fragment", [
    (rule(_no_state), r"step 2 of 6 is the first .*the velocity is not kept between steps"),
    (rule(_rebind), r"step 1 of 6 .*does not change the parameters"),
    (rule(_uphill), r"step 1 of 6 .*move uphill"),
    (rule(_dampened), r"step 2 of 6 .*'dampening'"),
    (rule(_nesterov), r"step 1 of 6 .*Nesterov"),
    (rule(_lr_twice), r"step 1 of 6 .*learning rate is applied twice"),
    (FixedHyper, r"group 1: lr=0.05, momentum=0.5.*second parameter group is updated with the constructor's"),
    (rule(_aliased), r"zero_grad\(set_to_none=False\).*Store a copy: p.grad.clone\(\)"),
    (rule(_wrong_formula), r"step 2 of 6 .*v = momentum \* v \+ grad"),
    (NoNoGrad, r"leaf Variable.*@torch.no_grad\(\)"),
    (NoNoneSkip, r"p.grad is None: continue"),
    (NoSuper, r"without param_groups: call super\(\).__init__\(params, dict\(lr=lr"),
])
def test_mistakes_are_named_with_the_first_step_that_differs(variant_cls, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_sgd_momentum(variant_cls)


def _stub_step(self):
    raise NotImplementedError("Exercise 1: SGD with momentum")


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"),
    (SGDMomentum([torch.zeros(1, requires_grad=True)]), "got an instance"),
    (torch.nn.Linear, "must be a subclass of torch.optim.optimizer.Optimizer"),
    ([SGDMomentum], "got list"),
    (np.float64(0.1), "got numpy"),
    (variant(_stub_step), r"not written yet \(Exercise 1: SGD with momentum\)"),
])
def test_bad_inputs(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_sgd_momentum(bad)


@pytest.mark.parametrize("steps", [1, 0, 2.5, True])
def test_bad_step_count(steps):
    with pytest.raises(lab.CheckError, match="steps must be an int >= 2"):
        lab.check_sgd_momentum(SGDMomentum, steps=steps)


def test_torch_sgd_itself_passes(capsys):
    # the reference against itself: a sanity test of the harness
    class TorchSGD(torch.optim.SGD):
        def __init__(self, params, lr=0.01, momentum=0.9):
            super().__init__(params, lr=lr, momentum=momentum)
    lab.check_sgd_momentum(TorchSGD, steps=3)
    assert capsys.readouterr().out.startswith("PASS  TorchSGD")

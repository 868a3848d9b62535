"""Checks for notebook 06 (torch.optim); each reference is torch.optim itself, run at check time."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .core import CheckError, check_prediction, exercise, expect_count, passed, read_prediction, rel_error, run_student
from .nb05_nn_module import expect_class

__all__ = ["check_sweep_prediction", "check_sgd_momentum"]
SWEEP_LRS = (1e-3, 1e-2, 1e-1, 1.0)
SWEEP = {"sgd": dict(), "momentum": dict(momentum=0.9), "adam": None}   # SGD's extra settings; None: Adam
_SHAPES, _GROUP1 = [(4, 5), (4,), (2,), (3, 4), (3,)], {"lr": 0.05, "momentum": 0.5}   # (2,) never gets a gradient


@exercise("06.1", "which optimizer wins the sweep")
def check_sweep_prediction(prediction: Any, steps: int = 50) -> None:
    """Run notebook 06's sweep (each optimizer at every lr of SWEEP_LRS, ``steps`` steps) and name the winner."""
    __tracebackhide__ = True
    from ..data import lecture_data
    prediction = read_prediction("the sweep's winner", prediction, tuple(SWEEP))  # before seconds of measuring
    (x, y), best = lecture_data(), {}
    for name, extra in SWEEP.items():
        for lr in SWEEP_LRS:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(1000, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10))
            opt = torch.optim.Adam(model.parameters(), lr) if extra is None else torch.optim.SGD(model.parameters(), lr, **extra)
            for _ in range(steps):
                opt.zero_grad(), F.mse_loss(model(x), y).backward(), opt.step()
            loss = float(F.mse_loss(model(x), y).detach())
            best[name] = min(best.get(name, (math.inf, lr)), (loss if math.isfinite(loss) else math.inf, lr))
    winner = min(best, key=best.get)
    check_prediction("the sweep's winner", prediction, winner, choices=tuple(SWEEP), mistakes={
        "adam": "Adam's step is about lr per weight whatever the gradient; the grid's larger lrs make it jump about.",
        "momentum": "momentum multiplies the step by about 1/(1 - 0.9) = 10, so it diverges one grid step earlier."},
        why="best lr of each: " + ", ".join(f"{n} {lr:g}" for n, (_, lr) in best.items()))


def _trajectory(make: Any, rule: Any = None, steps: int = 6, set_to_none: bool = True) -> list[list[torch.Tensor]]:
    """Parameters after each step, with optimizer ``make(groups)`` or update ``rule(p, g, v, lr, mu) -> (p, v)``."""
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(6)
    ps = [(torch.randn(*s, generator=g, dtype=torch.float64) * 0.5).requires_grad_() for s in _SHAPES]
    groups = [{"params": ps[:3]}, {"params": ps[3:], **_GROUP1}]
    opt, bufs, out = make(groups) if make else None, [None] * 5, []
    if make and not isinstance(getattr(opt, "param_groups", None), list):
        raise CheckError("the optimizer has no param_groups")
    loss = lambda: F.mse_loss(F.linear(F.relu(F.linear(x, ps[0], ps[1])), ps[3], ps[4]), y)  # noqa: E731
    for _ in range(steps):
        x, y = torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(8, 3, generator=g, dtype=torch.float64)
        if opt is None:
            for i, grad in enumerate(torch.autograd.grad(loss(), ps, allow_unused=True)):
                hyper = _GROUP1 if rule[1] and i > 2 else {"lr": 0.1, "momentum": 0.9}
                if grad is not None:
                    new, bufs[i] = rule[0](ps[i].detach(), grad, bufs[i], hyper["lr"], hyper["momentum"])
                    ps[i] = new.requires_grad_()
        else:
            opt.zero_grad(set_to_none=set_to_none)
            loss().backward()
            run_student(opt.step, what=f"{type(opt).__name__}.step()")
        out.append([p.detach().clone() for p in ps])
    return out


_RULES = [  # (update rule, uses each group's own settings, what to tell); v is None on the first step
    (lambda p, g, v, lr, mu: (p - lr * g, g), True, "the velocity is not kept between steps: this is plain SGD"),
    (lambda p, g, v, lr, mu: (p, g), True, "step() never changes the parameters: update them in place (p.sub_(...)); "
                                           "`p = p - ...` only rebinds a local name"),
    (lambda p, g, v, lr, mu: (p + lr * (w := g if v is None else mu * v + g), w), True, "the sign: subtract lr * v"),
    (lambda p, g, v, lr, mu: (p - lr * (w := g if v is None else mu * v + (1 - mu) * g), w), True,
     "dampening: torch adds the whole gradient, v = momentum * v + grad"),
    (lambda p, g, v, lr, mu: (p - lr * (g + mu * (w := g if v is None else mu * v + g)), w), True,
     "this is Nesterov momentum; the exercise asks for p -= lr * v"),
    (lambda p, g, v, lr, mu: (p - lr * (w := lr * g if v is None else mu * v + lr * g), w), True,
     "the learning rate is applied twice: it is either in v or in the step, not both"),
    (lambda p, g, v, lr, mu: (p - lr * (0 if v is None else v), g if v is None else mu * v + g), True,
     "update order: the step uses the velocity of the previous step; update v first, then p -= lr * v"),
    (lambda p, g, v, lr, mu: (p - lr * (w := g if v is None else mu * v + g), w), False,
     "the second group is updated with the constructor's lr and momentum: read group['lr'] and group['momentum']"),
]


@exercise("06.3", "SGD with momentum")
def check_sgd_momentum(SGDMomentum: Any, steps: int = 6) -> None:
    """Train side by side with ``torch.optim.SGD(momentum=...)`` (two groups, a parameter without gradient)."""
    __tracebackhide__ = True
    cls, steps = expect_class(SGDMomentum, torch.optim.Optimizer, "SGDMomentum"), expect_count(steps, "steps", minimum=2)
    try:
        mine = _trajectory(lambda gs: run_student(cls, gs, lr=0.1, momentum=0.9, what="SGDMomentum(...)"), steps=steps)
    except CheckError as err:
        raise CheckError(err.message, hint=next((why for key, why in [
            ("must match the size", "one velocity for all parameters: keep one per parameter, in self.state[p]"),
            ("NoneType", "a parameter without gradient has p.grad None: skip it"),
            ("param_groups", "call super().__init__(params, dict(lr=lr, momentum=momentum)) in __init__")]
            if key in err.message), err.hint)) from None
    ref = _trajectory(lambda groups: torch.optim.SGD(groups, lr=0.1, momentum=0.9), steps=steps)
    for step, (a, b) in enumerate(zip(mine, ref), start=1):
        if max(rel_error(p, q) for p, q in zip(a, b)) > 1e-10:
            why = next((w for rule, own, w in _RULES if all(rel_error(p, q) < 1e-8 for s, t in
                        zip(mine, _trajectory(None, (rule, own), steps)) for p, q in zip(s, t))), None)
            raise CheckError(f"step {step} of {steps} is the first where SGDMomentum and torch.optim.SGD differ",
                             hint=why or ("the parameters are not finite" if not all(
                                 torch.isfinite(p).all() for p in a) else "v = momentum * v + grad, then p -= lr * v"))
    if any(rel_error(p, q) > 1e-10 for a, b in zip(_trajectory(lambda gs: cls(gs, lr=0.1, momentum=0.9), steps=3,
                                                               set_to_none=False), ref) for p, q in zip(a, b)):
        raise CheckError("with zero_grad(set_to_none=False) the parameters differ", hint="the velocity is p.grad "
                         "itself, which zero_grad() wipes: store a copy, p.grad.clone()")
    passed(f"SGDMomentum: same parameters as torch.optim.SGD(momentum=...) after each of {steps} steps")

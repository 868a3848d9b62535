"""Checks for notebook 06 (optim): SGD with momentum written as a
``torch.optim.Optimizer`` subclass.

The check trains the same small network twice, side by side, once with the
student's optimizer and once with ``torch.optim.SGD(momentum=...)``, and
reports the first step where the parameters part ways (and the likely
mistake, found by replaying the usual wrong update rules).

Example:
    >>> import torch, labsupport as lab
    >>> class SGDMomentum(torch.optim.Optimizer):
    ...     def __init__(self, params, lr=0.01, momentum=0.9):
    ...         super().__init__(params, dict(lr=lr, momentum=momentum))
    ...     @torch.no_grad()
    ...     def step(self):
    ...         for group in self.param_groups:
    ...             for p in group["params"]:
    ...                 if p.grad is None:
    ...                     continue
    ...                 state = self.state[p]
    ...                 if "velocity" not in state:
    ...                     state["velocity"] = p.grad.clone()
    ...                 else:
    ...                     state["velocity"].mul_(group["momentum"]).add_(p.grad)
    ...                 p.sub_(group["lr"] * state["velocity"])
    >>> lab.check_sgd_momentum(SGDMomentum)
    PASS  SGDMomentum: same parameters as torch.optim.SGD(momentum=...) after each of 6 steps (2 parameter groups, max rel. error < 1e-10)
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from .core import CheckError, call_student, describe, passed, rel_error
from .modules import expect_class

__all__ = ["check_sgd_momentum"]

TOL = 1e-10
LR, MOMENTUM = 0.1, 0.9                 # the constructor's defaults in the check
GROUP1 = {"lr": 0.05, "momentum": 0.5}  # the second parameter group's own settings
SHAPES = [(4, 5), (4,), (2,), (3, 4), (3,)]   # W1, b1, frozen (never used), W2, b2
GROUPS = [[0, 1, 2], [3, 4]]                  # parameter indices of group 0 and group 1


def _initial_params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(6)
    return [torch.randn(*s, generator=g, dtype=torch.float64) * 0.5 for s in SHAPES]


def _batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(8, 5, generator=g, dtype=torch.float64),
             torch.randn(8, 3, generator=g, dtype=torch.float64)) for _ in range(steps)]


def _loss(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    W1, b1, _frozen, W2, b2 = params
    return F.mse_loss(F.linear(F.relu(F.linear(x, W1, b1)), W2, b2), y)


def _hyper(i: int, per_group: bool = True) -> tuple[float, float]:
    if per_group and i in GROUPS[1]:
        return GROUP1["lr"], GROUP1["momentum"]
    return LR, MOMENTUM


# A wrong update rule: (p, grad, buf, lr, mu) -> (new p, new buf); buf is None on the first step.
_Rule = Callable[[torch.Tensor, torch.Tensor, Any, float, float], tuple[torch.Tensor, torch.Tensor]]


def _torch_rule(p, g, buf, lr, mu):
    buf = g.clone() if buf is None else mu * buf + g
    return p - lr * buf, buf


_MISTAKES: list[tuple[str, _Rule, bool]] = [
    ("the velocity is not kept between steps, so this is plain SGD (step 1 agrees because the "
     "velocity starts as the gradient). Store it in self.state[p] and update it in place each step.",
     lambda p, g, buf, lr, mu: (p - lr * g, g), True),
    ("step() does not change the parameters. Update them in place (p.sub_(...) or p -= ...); "
     "`p = p - ...` only rebinds the loop's local name.",
     lambda p, g, buf, lr, mu: (p, g), True),
    ("the parameters move uphill: subtract lr * velocity (p -= lr * v), do not add it.",
     lambda p, g, buf, lr, mu: (lambda b: (p + lr * b, b))(g.clone() if buf is None else mu * buf + g), True),
    ("the velocity is an average (momentum * v + (1 - momentum) * grad, 'dampening'); torch's SGD "
     "adds the whole gradient: v = momentum * v + grad.",
     lambda p, g, buf, lr, mu: (lambda b: (p - lr * b, b))(g.clone() if buf is None else mu * buf + (1 - mu) * g), True),
    ("this is Nesterov momentum (p -= lr * (grad + momentum * v)); the exercise asks for the "
     "classical form p -= lr * v.",
     lambda p, g, buf, lr, mu: (lambda b: (p - lr * (g + mu * b), b))(g.clone() if buf is None else mu * buf + g), True),
    ("the learning rate is applied twice: with v = momentum * v + lr * grad, update p -= v "
     "(or keep v = momentum * v + grad and update p -= lr * v).",
     lambda p, g, buf, lr, mu: (lambda b: (p - lr * b, b))(lr * g if buf is None else mu * buf + lr * g), True),
    (f"the second parameter group is updated with the constructor's lr={LR} and momentum={MOMENTUM} "
     f"instead of its own (lr={GROUP1['lr']}, momentum={GROUP1['momentum']}). Read group['lr'] and "
     f"group['momentum'] inside `for group in self.param_groups:`.",
     _torch_rule, False),
]


def _replay(rule: _Rule, per_group: bool, batches, upto: int) -> list[torch.Tensor]:
    """Parameters after ``upto`` steps of ``rule`` (a reference or a known mistake)."""
    params = [p.clone() for p in _initial_params()]
    bufs: list[Any] = [None] * len(params)
    for x, y in batches[:upto]:
        live = [p.clone().requires_grad_(True) for p in params]
        grads = torch.autograd.grad(_loss(live, x, y), live, allow_unused=True)
        for i, g in enumerate(grads):
            if g is None:
                continue
            lr, mu = _hyper(i, per_group)
            params[i], bufs[i] = rule(params[i], g, bufs[i], lr, mu)
    return params


def _hint(err: CheckError) -> CheckError:
    text = str(err)
    if "leaf Variable that requires grad" in text or "a view of a leaf Variable" in text:
        text += (" Updating a parameter in place needs gradient tracking off: decorate step with "
                 "@torch.no_grad() (or wrap the update in `with torch.no_grad():`).")
    elif "NoneType" in text:
        text += (" Some parameters get no gradient (here: one the loss never uses), so p.grad is "
                 "None: skip them with `if p.grad is None: continue`.")
    elif "param_groups" in text or "'state'" in text:
        text += (" Call super().__init__(params, defaults) in __init__, with defaults a dict "
                 "holding lr and momentum.")
    return CheckError(text)


def _make(cls: type, params: list[torch.Tensor]) -> Any:
    __tracebackhide__ = True
    groups = [{"params": [params[i] for i in GROUPS[0]]},
              {"params": [params[i] for i in GROUPS[1]], **GROUP1}]
    try:
        opt = call_student(cls, groups, lr=LR, momentum=MOMENTUM,
                           what=f"{cls.__name__}(param_groups, lr={LR}, momentum={MOMENTUM})")
    except CheckError as err:
        raise _hint(err) from None
    if not isinstance(opt, torch.optim.Optimizer) or not hasattr(opt, "param_groups"):
        raise CheckError(f"{cls.__name__}(...) gave {describe(opt)} without param_groups: call "
                         f"super().__init__(params, dict(lr=lr, momentum=momentum)) in __init__.")
    return opt


def _run(cls: type, batches, set_to_none: bool):
    """Train with the student's optimizer and with torch's SGD; return the first
    (step, parameter index, error) where they differ, or the largest error."""
    __tracebackhide__ = True
    mine = [p.clone().requires_grad_(True) for p in _initial_params()]
    ref = [p.clone().requires_grad_(True) for p in _initial_params()]
    opt = _make(cls, mine)
    ref_opt = torch.optim.SGD([{"params": [ref[i] for i in GROUPS[0]]},
                               {"params": [ref[i] for i in GROUPS[1]], **GROUP1}],
                              lr=LR, momentum=MOMENTUM)
    worst = 0.0
    for step, (x, y) in enumerate(batches, start=1):
        for params, optimizer, is_student in ((mine, opt, True), (ref, ref_opt, False)):
            optimizer.zero_grad(set_to_none=set_to_none)
            _loss(params, x, y).backward()
            if is_student:
                try:
                    call_student(optimizer.step, what=f"{cls.__name__}.step()")
                except CheckError as err:
                    raise _hint(err) from None
            else:
                optimizer.step()
        for i, (a, b) in enumerate(zip(mine, ref)):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape:
                raise CheckError(f"after step {step}, parameter {i} is {describe(a)}; expected a "
                                 f"tensor of shape {tuple(b.shape)} updated in place.")
            err = rel_error(a, b)
            worst = max(worst, err)
            if err > TOL:
                return step, i, err
    return None, None, worst


def check_sgd_momentum(SGDMomentum: Any, *, steps: int = 6) -> None:
    """Check an SGD-with-momentum optimizer class, ``SGDMomentum(params, lr, momentum)``,
    against ``torch.optim.SGD(params, lr, momentum)``.

    Both train the same float64 network for ``steps`` steps on the same batches,
    with two parameter groups (the second with its own lr and momentum) and one
    parameter that never gets a gradient. The first step where any parameter
    differs is reported, with the likely cause: velocity not kept between steps,
    parameters not updated in place, wrong sign, dampening, Nesterov, lr applied
    twice, the group's own settings ignored, the momentum buffer aliasing
    ``p.grad``, or a missing ``torch.no_grad()``.

    Example:
        >>> class TorchSGD(torch.optim.SGD):     # torch's own SGD passes, of course
        ...     def __init__(self, params, lr=0.01, momentum=0.9):
        ...         super().__init__(params, lr=lr, momentum=momentum)
        >>> check_sgd_momentum(TorchSGD, steps=3)
        PASS  TorchSGD: same parameters as torch.optim.SGD(momentum=...) after each of 3 steps (2 parameter groups, max rel. error < 1e-10)
    """
    __tracebackhide__ = True
    cls = expect_class(SGDMomentum, torch.optim.Optimizer, "SGDMomentum")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise CheckError(f"steps must be an int >= 2 (momentum shows from step 2 on), got {steps!r}")
    batches = _batches(steps)
    step, index, err = _run(cls, batches, set_to_none=True)
    if step is not None:
        group = 0 if index in GROUPS[0] else 1
        lr, mu = _hyper(index)
        where = (f"step {step} of {steps} is the first where {cls.__name__} and torch.optim.SGD differ: "
                 f"parameter {index} (shape {SHAPES[index]}, group {group}: lr={lr}, momentum={mu}) "
                 f"has max rel. error {err:.3g} > {TOL:g}")
        mine = [p.clone().requires_grad_(True) for p in _initial_params()]
        opt = _make(cls, mine)
        for x, y in batches[:step]:
            opt.zero_grad()
            _loss(mine, x, y).backward()
            opt.step()
        for why, rule, per_group in _MISTAKES:
            replay = _replay(rule, per_group, batches, step)
            if all(rel_error(a.detach(), b) < 1e-8 for a, b in zip(mine, replay)):
                raise CheckError(f"{where}: {why}")
        raise CheckError(f"{where}. With v the velocity (kept per parameter in self.state[p]), "
                         f"each step does v = momentum * v + grad (v = grad on the first step), then "
                         f"p -= lr * v.")
    step, _, _ = _run(cls, batches[:3], set_to_none=False)
    if step is not None:
        raise CheckError(f"with zero_grad(set_to_none=False) the parameters differ from torch's from "
                         f"step {step} on: the velocity is the .grad tensor itself, so zero_grad() "
                         f"wipes it and backward() overwrites it. Store a copy: p.grad.clone().")
    passed(f"{cls.__name__}: same parameters as torch.optim.SGD(momentum=...) after each of {steps} "
           f"steps (2 parameter groups, max rel. error < {TOL:g})")

"""Checks for notebook 04: a Function exercise is a _Spec (cases with a random grad_output, a built-in
whose autograd gradients are the reference, known mistakes as data), run by one runner, then gradcheck."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .core import CheckError, check_prediction, describe, exercise, passed, run_cases, run_student

__all__ = ["check_sigmoid_prediction", "check_softplus_function", "check_scaled_matmul_function"]


@dataclass
class _Spec:
    builtin: str                          # the reference, named in messages
    reference: Callable[..., torch.Tensor]
    outputs: tuple[str, ...]              # what the runner compares: the forward output, then each gradient
    cases: Callable[[], list[tuple]]      # (*arguments, grad_output), float64 unless testing float32
    mistakes: Callable[..., list]         # (*case) -> [((output, *grads) with None for "any", or a predicate; why)]


_AUTOGRAD_ERRORS = [  # what autograd says when backward returns the wrong things, and what it means
    (r"incorrect number of gradients", "backward returns one value per argument of forward, None for a non-tensor"),
    (r"different than None at position", "an argument that is not a tensor gets None from backward, no gradient"),
    (r"invalid gradient at index", "each gradient has its input's shape: check the order and the transposes"),
    (r"save_for_backward can only save", "save_for_backward takes tensors only: keep a number as ctx.scale = scale")]


def _function(cls: Any) -> type:
    if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
        return cls
    owner = getattr(cls, "__self__", None)
    raise CheckError("expected your torch.autograd.Function subclass", got=describe(cls), hint=(
        f"pass {owner.__name__} itself, not {owner.__name__}.apply" if isinstance(owner, type) else
        "pass the class, without parentheses" if isinstance(cls, torch.autograd.Function) else
        "define `class ...(torch.autograd.Function)` with forward and backward, and run its cell"))


def _forward_backward(cls: type, *case: Any) -> tuple:
    """Run the student's forward and backward; leaves share memory with the case, so in-place writes show."""
    *args, g = case
    leaves = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    given = g.clone()
    try:
        out = cls.apply(*leaves)
        grads = torch.autograd.grad(out, [a for a in leaves if isinstance(a, torch.Tensor)], given, allow_unused=True)
    except (RuntimeError, TypeError) as exc:
        hint = next((h for p, h in _AUTOGRAD_ERRORS if re.search(p, str(exc))), None)
        raise CheckError(f"{cls.__name__}: {exc}", hint=hint) if hint else exc
    if not torch.equal(given, g):
        raise CheckError(f"{cls.__name__}.backward changed grad_output in place", hint="autograd may still need "
                         "it: use out-of-place operations (grad_output * mask), or work on grad_output.clone()")
    return (out, *grads)


def _reference(spec: _Spec, *case: Any) -> tuple:
    *args, g = case
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    out = spec.reference(*leaves)
    return (out.detach(), *torch.autograd.grad(out, [a for a in leaves if isinstance(a, torch.Tensor)], g))


def _run_check(cls: Any, spec: _Spec) -> None:
    cls = _function(cls)
    run_cases(lambda *case: _forward_backward(cls, *case), spec.cases(), lambda *case: _reference(spec, *case),
              what=cls.__name__, outputs=spec.outputs, mistakes=spec.mistakes, rtol=1e-6, atol=0.0,
              inplace_hint="use out-of-place operations in forward (x.abs(), not x.abs_()): the input is the caller's")
    args = [a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in spec.cases()[0][:-1]]
    if not run_student(torch.autograd.gradcheck, cls.apply, tuple(args), raise_exception=False, what="gradcheck"):
        raise CheckError(f"torch.autograd.gradcheck fails for {cls.__name__} in float64")
    passed(f"{cls.__name__}: forward and backward match autograd through {spec.builtin}; gradcheck passes")


def _seeded(seed: int, *shapes: tuple) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]


def _softplus_cases() -> list[tuple]:
    x, g, g8 = _seeded(40, (5, 4), (5, 4), (8,))
    big = torch.tensor([-800.0, -100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 800.0], dtype=torch.float64)
    return [(3 * x, g), (big, g8), (big[2:].float() * torch.tensor([1, 1, 1, 1, 1, 0.125]), g8[2:].float())]


def _softplus_mistakes(x: torch.Tensor, g: torch.Tensor) -> list:
    return [
        ((None, torch.sigmoid(x)), "the local derivative alone: multiply it by grad_output (the chain rule)"),
        ((None, g * torch.sigmoid(F.softplus(x))), "sigmoid of the OUTPUT y: the derivative is sigmoid of the input x"),
        ((None, g * (1 - torch.exp(-x))), "1 - exp(-y) wants the OUTPUT y = softplus(x), not the input x"),
        (lambda got: not torch.isfinite(got[0]).all(), "log(1 + exp(x)) overflows for large x: use the stable form"),
        (lambda got: not torch.isfinite(got[1]).all(), "exp(x) / (1 + exp(x)) is inf / inf = NaN for large x"),
        (lambda got: bool(((got[1] == 0) & (torch.sigmoid(x) > 0)).any()), "1 - exp(-y) rounds to 0 when y is tiny (exp(-y) == 1.0): use -torch.expm1(-y), "
                          "or sigmoid(x) of the saved input")]


_SOFTPLUS = _Spec("torch.nn.functional.softplus", F.softplus, ("the forward output", "grad_x"), _softplus_cases,
                  _softplus_mistakes)


def _matmul_mistakes(x, w, s, g):
    one = torch.ones_like(g)
    return [((None, s * g.mm(w.t()), x.t().mm(g)), "grad_w is still the planted bug: it lacks the factor scale"),
            ((None, g.mm(w.t()), x.t().mm(g)), "both gradients lack the factor scale"),
            ((None, s * s * g.mm(w.t()), s * s * x.t().mm(g)), "scale is applied twice"),
            ((None, s * one.mm(w.t()), s * x.t().mm(one)), "the gradients ignore grad_output: multiply by it")]


_SCALED_MM = _Spec("scale * torch.mm(x, w)", lambda x, w, s: s * torch.mm(x, w),
                   ("the forward output", "grad_x", "grad_w"),
                   lambda: [(*_seeded(41 + k, (5, 4), (4, 3)), 0.37, _seeded(50 + k, (5, 3))[0]) for k in range(2)],
                   _matmul_mistakes)


@exercise("04.1", "where the plain sigmoid breaks")
def check_sigmoid_prediction(prediction: Any) -> None:
    """Run the plain sigmoid's backward at x = -1000 (float32) and judge the prediction."""
    x = torch.tensor(-1000.0, requires_grad=True)
    (1 / (1 + torch.exp(-x))).backward()                                   # the experiment, run now
    actual = {0.0: "0"}.get(float(x.grad), str(float(x.grad)).lower())     # "nan", "inf", "0" or the number
    check_prediction("the plain sigmoid's gradient at x = -1000", prediction, actual,
                     choices=("0", "nan", "inf", "error"),
                     why="the reciprocal's derivative -1/u^2 is -0 at u = inf, exp's is inf, and -0 * inf is NaN.",
                     mistakes={"0": "0 is the true (rounded) value: the chain of small steps never computes it.",
                               "error": "PyTorch raises nothing for inf or NaN: they flow on silently."})


@exercise("04.2", "a stable softplus")
def check_softplus_function(cls: Any) -> None:
    """Check a softplus Function: values, gradients (any grad_output), |x| up to 800, float32, gradcheck."""
    _run_check(cls, _SOFTPLUS)


@exercise("04.4", "the classmate's ScaledMatmul")
def check_scaled_matmul_function(cls: Any) -> None:
    """Check ``forward(ctx, x, w, scale) -> scale * x @ w`` and its backward (None for ``scale``)."""
    _run_check(cls, _SCALED_MM)

"""Checks for notebook 02 (manual backprop): the two-layer net's backward pass.

Example:
    >>> import labsupport as lab
    >>> def backward(x, y, w1, w2):
    ...     h = x.mm(w1); h_relu = h.clamp(min=0); y_pred = h_relu.mm(w2)
    ...     grad_y_pred = 2.0 * (y_pred - y)
    ...     grad_w2 = h_relu.t().mm(grad_y_pred)
    ...     grad_h = grad_y_pred.mm(w2.t()) * (h > 0)
    ...     return x.t().mm(grad_h), grad_w2
    >>> lab.check_manual_backward(backward)
    PASS  manual backward: both gradients match autograd on 2 test cases (max rel. error < 1e-08)
"""
from __future__ import annotations

from typing import Callable

import torch

from .core import CheckError, call_student, describe, expect_tensor, passed, rel_error

__all__ = ["check_manual_backward", "two_layer_grads"]

TOL = 1e-8


def two_layer_grads(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor,
                    w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference gradients of ``sum((relu(x @ w1) @ w2 - y)**2)`` with respect to
    ``w1`` and ``w2``, computed by autograd (independent of any hand derivation).

    Example:
        >>> x, y, w1, w2 = (torch.randn(3, 4), torch.randn(3, 2), torch.randn(4, 5), torch.randn(5, 2))
        >>> [g.shape for g in two_layer_grads(x, y, w1, w2)]
        [torch.Size([4, 5]), torch.Size([5, 2])]
    """
    w1 = w1.detach().clone().requires_grad_(True)
    w2 = w2.detach().clone().requires_grad_(True)
    loss = (torch.relu(x @ w1) @ w2 - y).pow(2).sum()
    g1, g2 = torch.autograd.grad(loss, (w1, w2))
    return g1, g2


def _variants(x, y, w1, w2):
    """Gradients a student gets from each common mistake, name -> (g1, g2)."""
    h = x @ w1
    h_relu = h.clamp(min=0)
    d = h_relu @ w2 - y
    good_h = (2 * d @ w2.t()) * (h > 0)
    return {
        "no_mask": (x.t() @ (2 * d @ w2.t()), h_relu.t() @ (2 * d)),
        "no_factor_2": (x.t() @ (d @ w2.t() * (h > 0)), h_relu.t() @ d),
        "sign": (-(x.t() @ good_h), -(h_relu.t() @ (2 * d))),
        "pre_activation": (x.t() @ good_h, h.t() @ (2 * d)),
    }


_HINTS = {
    "no_mask": "grad_h is not zero where h < 0: did you apply the ReLU mask (grad_h[h < 0] = 0)?",
    "no_factor_2": "it is exactly half the true gradient: the derivative of (y_pred - y)**2 "
                   "is 2 * (y_pred - y). Did you drop the factor 2?",
    "sign": "it has the wrong sign: grad_y_pred is 2 * (y_pred - y), not 2 * (y - y_pred).",
    "pre_activation": "grad_w2 uses h instead of h_relu: the second layer sees the ReLU's output.",
}


def check_manual_backward(backward: Callable, *, cases: int = 2) -> None:
    """Check a hand-written ``backward(x, y, w1, w2) -> (grad_w1, grad_w2)`` for
    the loss ``sum((relu(x @ w1) @ w2 - y)**2)``.

    Runs it in float64 on fresh, non-square problems and compares each gradient
    with autograd's. A wrong result is matched against the usual mistakes (a
    transpose, the ReLU mask, the factor 2, the sign, h instead of h_relu) and
    the message names the one that fits.

    Example:
        >>> def backward(x, y, w1, w2):
        ...     return two_layer_grads(x, y, w1, w2)   # autograd stands in for a hand derivation
        >>> check_manual_backward(backward)
        PASS  manual backward: both gradients match autograd on 2 test cases (max rel. error < 1e-08)
    """
    __tracebackhide__ = True
    sizes = [(8, 7, 5, 3), (16, 12, 9, 4)][:cases]
    worst = 0.0
    for case, (N, D_in, H, D_out) in enumerate(sizes):
        g = torch.Generator().manual_seed(100 + case)
        x, y = torch.randn(N, D_in, generator=g, dtype=torch.float64), torch.randn(N, D_out, generator=g, dtype=torch.float64)
        w1 = torch.randn(D_in, H, generator=g, dtype=torch.float64)
        w2 = torch.randn(H, D_out, generator=g, dtype=torch.float64)
        got = call_student(backward, x.clone(), y.clone(), w1.clone(), w2.clone(),
                           what="your backward(x, y, w1, w2)")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckError(f"backward must return (grad_w1, grad_w2), got {describe(got)}")
        ref = two_layer_grads(x, y, w1, w2)
        variants = _variants(x, y, w1, w2)
        for i, (name, value, expected) in enumerate(zip(("grad_w1", "grad_w2"), got, ref)):
            value = expect_tensor(value, name, shape=tuple(expected.shape))
            if value.dtype != torch.float64:
                raise CheckError(f"{name} has dtype {value.dtype}; expected torch.float64 like "
                                 f"the inputs: do not create new tensors with a fixed dtype.")
            err = rel_error(value, expected)
            if err < TOL:
                worst = max(worst, err)
                continue
            for mistake, grads in variants.items():
                if rel_error(value, grads[i]) < 1e-6:
                    raise CheckError(f"{name} is wrong: {_HINTS[mistake]}")
            raise CheckError(f"{name} does not match autograd's gradient (max rel. error "
                             f"{err:.3g} > {TOL:g}). Recheck the chain rule step that produces it.")
    passed(f"manual backward: both gradients match autograd on {len(sizes)} test cases "
           f"(max rel. error < {TOL:g})")

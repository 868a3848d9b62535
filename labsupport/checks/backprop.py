"""Checks of notebook 02, against autograd at check time: each layer's backward (a vector-Jacobian product),
the composed two-layer gradients, and the student's central-difference gradient checker."""
from typing import Any, Callable

import torch

from ..data import lecture_data, lecture_weights
from .core import CheckError, check_prediction, describe, exercise, passed, rel_error, run_cases, run_student

__all__ = ["check_linear_layer", "check_relu_layer", "check_loss_and_grads", "check_numeric_grad",
           "check_lr_prediction"]
TOL, MASK = 1e-8, "ReLU mask {}: the gradient flows where h > 0 and is 0 where h < 0"
LOSS = lambda x, y: lambda w1, w2: (torch.relu(x @ w1) @ w2 - y).pow(2).sum()  # noqa: E731
SMOOTH = lambda w: (w ** 3 / 3 + 2 * w.sin()).sum()  # noqa: E731  f'' = 2w - 2 sin w, f''' = 2 - 2 cos w


def _randn(seed: int, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).double() for s in shapes]


def _vjp(f: Callable, inputs: tuple, dout: Any = None) -> tuple:
    ins = [t.detach().clone().requires_grad_(True) for t in inputs]
    return (f(*ins).detach(), *torch.autograd.grad(f(*ins), ins, dout))


def two_layer_grads(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple:
    """Autograd's (grad_w1, grad_w2) of sum((relu(x @ w1) @ w2 - y)**2): the reference of 02's and 03's checks."""
    return _vjp(LOSS(x, y), (w1, w2))[1:]


def _layer_check(name: str, ex: str, outputs: tuple, cases: list, reference: Callable, mistakes: Callable,
                 **kw: Any) -> Callable:
    def check(forward: Any, backward: Any) -> None:
        def both(*args: torch.Tensor) -> tuple:  # the student's forward, then their backward on its cache
            out = run_student(forward, *args[:-1], what=f"your {name}_forward")
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise CheckError(f"{name}_forward must return (out, cache)", got=describe(out))
            grads = run_student(backward, args[-1], out[1], what=f"your {name}_backward(dout, cache)")
            return (out[0], *(grads if isinstance(grads, (tuple, list)) else (grads,)))
        run_cases(both, cases, reference, what=f"your {name} layer", outputs=outputs, mistakes=mistakes, rtol=TOL, **kw)
        passed(f"{name} layer: {', '.join(outputs)} match autograd on {len(cases)} cases (max rel. error < {TOL:g})")
    check.__name__ = check.__qualname__ = f"check_{name}_layer"
    check.__doc__ = f"Exercise {ex}: the {name} layer. Example: ``check_{name}_layer({name}_forward, {name}_backward)``."
    return exercise(ex, f"the {name} layer")(check)


check_linear_layer = _layer_check("linear", "02.1", ("out", "dx", "dw"), [_randn(10, (3, 4), (4, 4), (3, 4)),
                                  _randn(11, (5, 3), (3, 2), (5, 2))], lambda x, w, dout: _vjp(torch.mm, (x, w), dout),
    lambda x, w, dout: [((None, dout @ w, None), "missing transpose: dx needs w transposed (dx has x's shape)"),
                        ((None, None, dout.t() @ x), "dw is transposed: a weight's gradient has the weight's shape")])
check_relu_layer = _layer_check("relu", "02.2", ("out", "dh"), [_randn(12, (4, 5), (4, 5)), _randn(13, (6, 3), (6, 3))],
    lambda h, dout: _vjp(torch.relu, (h,), dout), lambda h, dout: [
        ((None, dout), MASK.format("missing")), ((None, dout * (h < 0)), MASK.format("inverted (h < 0 for h > 0)")),
        ((None, dout * h.clamp(min=0)), "you multiplied by the ReLU's output: its local slope is 0 or 1")],
    inplace_hint="keep h intact (no clamp_, no h[...] = 0): the backward needs its signs")


def _two_layer_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list:
    (g1, g2), h, d = two_layer_grads(x, y, w1, w2), x @ w1, 2 * (torch.relu(x @ w1) @ w2 - y)
    return [((None, x.t() @ (d @ w2.t()), None), MASK.format("missing")),
            ((None, x.t() @ (d @ w2.t() * (h < 0)), None), MASK.format("inverted (h < 0 for h > 0)")),
            ((None, g1 / 2, g2 / 2), "factor 2 dropped: the derivative of (p - y)**2 is 2 (p - y)"),
            ((None, -g1, -g2), "wrong sign: grad_y_pred is 2 (y_pred - y), pointing from y towards y_pred"),
            ((None, None, h.t() @ d), "h instead of h_relu: the second layer's input is the ReLU's output"),
            ((None, g1.t(), None), "missing transpose: grad_w1 must have w1's shape")]


@exercise("02.3", "the two-layer backward")
def check_loss_and_grads(loss_and_grads: Any) -> None:
    """(loss, grad_w1, grad_w2) of sum((relu(x @ w1) @ w2 - y)**2). Example: ``check_loss_and_grads(fn)``."""
    run_cases(loss_and_grads, [_randn(14, (8, 7), (8, 3), (7, 5), (5, 3)), _randn(15, (9, 12), (9, 4), (12, 6), (6, 4))],
              lambda x, y, w1, w2: _vjp(LOSS(x, y), (w1, w2)), what="your loss_and_grads(x, y, w1, w2)",
              outputs=("loss", "grad_w1", "grad_w2"), rtol=TOL, mistakes=_two_layer_mistakes)
    passed(f"loss_and_grads: the loss and both gradients match autograd on 2 cases (max rel. error < {TOL:g})")


def _checker_mistakes(f: Callable, w: torch.Tensor) -> list:
    d1, d2, d3 = _vjp(f, (w,))[1], 2 * w - 2 * w.sin(), 2 - 2 * w.cos()
    like = lambda g, d: float((g - d1).flatten() @ d.flatten()) > 0.9 * float((g - d1).norm() * d.norm())  # noqa: E731
    return [(lambda g: g.dtype != torch.float64, "float32: f(w + eps) - f(w - eps) drowns in rounding; stay in float64"),
            (lambda g: bool((g == g.flatten()[0]).all()), "every entry got the same number: nudge one entry at a time"),
            (lambda g: like(g, d2), "one-sided difference: (f(w + eps) - f(w)) / eps errs by about eps/2 * f'' "
             "(the central difference only by about eps**2 / 6 * f''')"),
            (lambda g: like(g, d3), "eps too large: the central difference errs by about eps**2 / 6 * f'''"),
            (lambda g: rel_error(g, d1) < 0.5, "noisy: eps too small for the precision (rounding error grows like "
             "1e-16 * |f| / eps in float64, 1e-7 * |f| / eps if any step ran in float32)")]


@exercise("02.4", "a gradient checker")
def check_numeric_grad(numeric_grad: Any) -> None:
    """numeric_grad(f, w) against autograd on a smooth float64 function. Example: ``check_numeric_grad(fn)``."""
    run_cases(numeric_grad, [(SMOOTH, *_randn(16, (4, 5))), (SMOOTH, 2 * _randn(17, (7,))[0])],
              lambda f, w: _vjp(f, (w,))[1], what="your numeric_grad(f, w)", outputs=("the gradient",),
              rtol=TOL, atol=1e-12, mistakes=_checker_mistakes, inplace_hint="restore w (or nudge a copy)")
    passed(f"numeric_grad: matches autograd on 2 cases (max rel. error < {TOL:g})")


@exercise("02.5", "predict a larger learning rate")
def check_lr_prediction(prediction: Any) -> None:
    """The loss after 50 steps of 1e-4 against 1e-6, measured. Example: ``check_lr_prediction("diverges")``."""
    (x, y), loss = lecture_data(), {}
    for lr in (0.0, 1e-6, 1e-4):  # 0.0: the starting loss
        w = lecture_weights()
        for _ in range(50 if lr else 0):
            w = [p - lr * g for p, g in zip(w, two_layer_grads(x, y, *w))]
        loss[lr] = float(LOSS(x, y)(*w))
    actual = "diverges" if not loss[1e-4] < loss[0.0] else "falls faster" if loss[1e-4] < loss[1e-6] else "falls slower"
    check_prediction("learning rate 1e-4", prediction, actual, choices=("falls faster", "falls slower", "diverges"),
                     why=f"after 50 steps the loss is {loss[1e-4]:.3g} (1e-6 gives {loss[1e-6]:.3g}): a step 100x "
                         "larger overshoots, each overshoot makes the gradient larger, and the loss blows up.")

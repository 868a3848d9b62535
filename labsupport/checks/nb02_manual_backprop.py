"""Checks of notebook 02 against autograd at check time: layer backwards, two-layer gradients, a gradient checker."""
from typing import Any, Callable

import torch
from ..data import lecture_data, lecture_weights
from .core import CheckError, check_prediction, describe, exercise, passed, read_prediction, rel_error, run_cases, run_student
from .nb01_tensors import _randn

__all__ = ["check_linear_layer", "check_relu_layer", "check_loss_and_grads", "check_numeric_grad", "check_lr_prediction"]
TOL, MASK = 1e-8, "ReLU mask {}: the gradient flows where h > 0 and is 0 where h < 0"
LOSS = lambda x, y: lambda w1, w2: (torch.relu(x @ w1) @ w2 - y).pow(2).sum()  # noqa: E731
SMOOTH = lambda w: (w ** 3 / 3 + 2 * w.sin()).sum()  # noqa: E731  f'' = 2w - 2 sin w, f''' = 2 - 2 cos w
two_layer_grads = lambda x, y, w1, w2: _vjp(LOSS(x, y), (w1, w2))[1:]  # noqa: E731  (grad_w1, grad_w2)


def _vjp(f: Callable, inputs: tuple, dout: torch.Tensor | None = None) -> tuple:  # autograd: (f(*inputs), *grads)
    with torch.enable_grad():  # of sum(out * dout); torch.func.vjp, grad_outputs import dynamo, sympy (2.5 s, 1.2 s)
        out = f(*(inputs := tuple(t.detach().requires_grad_() for t in inputs)))
    return out.detach(), *torch.autograd.grad((out if dout is None else out * dout).sum(), inputs)


def _layer_check(name: str, ex: str, outputs: tuple, cases: list, reference: Callable, mistakes: Callable, **kw):
    def check(forward: Any, backward: Any) -> None:
        def both(*args: torch.Tensor) -> tuple:  # the student's forward, then their backward on its cache
            if forward is None or backward is None:  # what the student edition sets until the cell is written
                raise CheckError(f"{name}_forward and {name}_backward are not written yet: define both above")
            out = run_student(forward, *args[:-1], what=f"your {name}_forward")
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise CheckError(f"{name}_forward must return (out, cache)", got=describe(out))
            grads = run_student(backward, args[-1], out[1], what=f"your {name}_backward(dout, cache)")
            return (out[0], *(grads if isinstance(grads, (tuple, list)) else (grads,)))
        run_cases(both, cases, reference, what=f"your {name} layer", outputs=outputs, mistakes=mistakes, rtol=TOL, **kw)
        passed(f"{name} layer: {', '.join(outputs)} match autograd on {len(cases)} cases (max rel. error < {TOL:g})")
    check.__name__, check.__doc__ = f"check_{name}_layer", f"Exercise {ex}. Example: ``check_{name}_layer(fwd, bwd)``."
    return exercise(ex, f"the {name} layer")(check)


check_linear_layer = _layer_check("linear", "02.1", ("out", "dx", "dw"), [_randn(10, (3, 4), (4, 4), (3, 4)),
                                  _randn(11, (5, 3), (3, 2), (5, 2))], lambda x, w, dout: _vjp(torch.mm, (x, w), dout),
    lambda x, w, dout: [((None, dout @ w if len(w) == w.size(1) else w, None), "missing transpose: dx has x's shape"),
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
            ((None, g1 / 2, g2 / 2), "factor 2 dropped: d/dp of (p - y)**2 is 2 (p - y)"),
            ((None, -g1, -g2), "wrong sign: grad_y_pred is 2 (y_pred - y), pointing from y towards y_pred"),
            ((None, None, h.t() @ d), "h instead of h_relu: the second layer's input is the ReLU's output")]


@exercise("02.3", "the two-layer backward")
def check_loss_and_grads(loss_and_grads: Any) -> None:
    """(loss, grad_w1, grad_w2) of sum((relu(x @ w1) @ w2 - y)**2). Example: ``check_loss_and_grads(fn)``."""
    run_cases(loss_and_grads, [_randn(14, (8, 7), (8, 3), (7, 5), (5, 3)), _randn(15, (9, 8), (9, 4), (8, 6), (6, 4))],
              lambda x, y, w1, w2: _vjp(LOSS(x, y), (w1, w2)), what="your loss_and_grads(x, y, w1, w2)",
              outputs=("loss", "grad_w1", "grad_w2"), rtol=TOL, mistakes=_two_layer_mistakes)
    passed(f"loss_and_grads: the loss and both gradients match autograd on 2 cases (max rel. error < {TOL:g})")


def _checker_mistakes(f: Callable, w: torch.Tensor) -> list:
    d1, d2, d3 = _vjp(f, (w,))[1], 2 * w - 2 * w.sin(), 2 - 2 * w.cos()  # f', f'', f''' of SMOOTH
    like = lambda g, d: float((g - d1).flatten() @ d.flatten()) > 0.9 * float((g - d1).norm() * d.norm())  # noqa: E731
    return [(lambda g: g.dtype != torch.float64, "float32: f(w + eps) - f(w - eps) drowns in rounding: use float64"),
            (lambda g: like(g, d2), "one-sided difference: errs by about eps/2 * f'', the central by eps**2/6 * f'''"),
            (lambda g: like(g, d3), "eps too large: the central difference errs by about eps**2 / 6 * f'''"),
            (lambda g: rel_error(g, d1) < 0.5, "noisy: eps too small, or a step ran in float32 (rounding / eps)")]


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
    prediction = read_prediction("learning rate 1e-4", prediction, ("falls faster", "falls slower", "diverges"))
    (x, y), w = lecture_data(), {lr: lecture_weights() for lr in (0.0, 1e-6, 1e-4)}  # 0.0: stays at the start
    for _ in range(50):
        w = {lr: [p - lr * g for p, g in zip(ws, two_layer_grads(x, y, *ws))] for lr, ws in w.items()}
    loss = {lr: float(LOSS(x, y)(*ws)) for lr, ws in w.items()}
    actual = "diverges" if not loss[1e-4] < loss[0.0] else "falls faster" if loss[1e-4] < loss[1e-6] else "falls slower"
    check_prediction("learning rate 1e-4", prediction, actual, choices=("falls faster", "falls slower", "diverges"),
                     why=f"{loss[0.0]:.3g} -> {loss[1e-4]:.3g} in 50 steps: each step overshoots to a steeper slope.")

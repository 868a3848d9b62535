"""Checks for notebook 03: references are autograd on float64 copies; predictions meet the experiment."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckError, check_prediction, compare, exercise, passed, run_cases, run_student

__all__ = ["check_predicted_gradients", "check_backward_twice_prediction", "check_vjp_prediction",
           "check_second_derivative_prediction", "check_fixed_training", "check_accumulated_training"]

LR, STEPS, CHUNKS = 1e-3, 4, 4
_sse = lambda x, y, w1, w2: (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()  # noqa: E731  the lecture's loss
_REBIND = ("`w1 = w1 - ...` binds the name to a new tensor, so the caller's w1 (the leaf autograd fills) "
           "never changes: update in place, `w1 -= learning_rate * w1.grad`, inside torch.no_grad()")


def _grads(f: Callable, *args: torch.Tensor, wrt: int = 0) -> tuple:
    leaves = [a.detach().clone().requires_grad_(i >= wrt) for i, a in enumerate(args)]
    return torch.autograd.grad(f(*leaves), leaves[wrt:])


def _two_path_mistakes(a, b):
    d, e = a * b + a.exp(), a.exp()
    return [((2 * d * b, None), "grad_a misses the path through exp(a): a reaches L twice, and the paths add up"),
            ((2 * d * e, None), "grad_a misses the path through a * b: a reaches L twice, and the paths add up"),
            ((b + e, a), "the outer derivative dL/dd = 2 * d is missing from both gradients"),
            ((d * (b + e), d * a), "both are half the gradient: d(d**2)/dd = 2 * d"),
            ((None, 2 * d * b), "grad_b: the derivative of a * b with respect to b is a, not b")]


@exercise("03.1", "a gradient along two paths")
def check_predicted_gradients(predict: Any) -> None:
    """Check ``predict(a, b) -> (grad_a, grad_b)`` for ``L = sum((a * b + exp(a)) ** 2)``."""
    g = torch.Generator().manual_seed(30)
    cases = [tuple(torch.randn(s, generator=g, dtype=torch.float64) * k for k in (0.5, 1.0)) for s in [(5,), (3, 4)]]
    run_cases(predict, cases, lambda *ab: _grads(lambda a, b: ((a * b + a.exp()) ** 2).sum(), *ab),
              what="your predict_grads(a, b)", outputs=("grad_a", "grad_b"), mistakes=_two_path_mistakes)
    passed("predicted gradients: grad_a and grad_b match autograd on 2 cases (rel. error < 1e-5)")


def _experiment(kind: str) -> Any:  # the notebook's predict-then-run experiments, run at check time
    x, s = torch.tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor(1.0, requires_grad=True)
    if kind == "vjp":
        (x ** 2).backward(gradient=torch.tensor([1.0, 10.0, 100.0]))
        return tuple(x.grad.tolist())
    if kind == "second derivative":
        torch.autograd.grad(s ** 3, s, create_graph=True)[0].backward()
        return float(s.grad)
    loss = torch.randn(4, 3).mm(torch.randn(3, 2, requires_grad=True)).clamp(min=0).pow(2).sum()
    loss.backward()
    try:
        return loss.backward() or "doubled"
    except RuntimeError:
        return "error"


def _prediction(ex_id: str, title: str, kind: str, **judge: Any) -> Callable:
    def check(prediction: Any) -> None:
        check_prediction(title, prediction, _experiment(kind), **judge)
    check.__doc__, check.judge = f"Run exercise {ex_id}'s experiment now; judge the prediction.", judge  # type: ignore
    return exercise(ex_id, title)(check)


check_backward_twice_prediction = _prediction(
    "03.2", "a second backward() on one graph", "backward twice", choices=("error", "doubled", "same"),
    why="backward() frees what the graph saved (factors, masks) as it goes; keep it with retain_graph=True.",
    mistakes={"doubled": "Doubling is what a second FORWARD and backward give (section 3): a new graph."})
check_vjp_prediction = _prediction(
    "03.3", "x.grad after backward(gradient=v)", "vjp",
    why="backward(gradient=v) computes v^T J, here v_i * 2 x_i: as if the loss were (v * y).sum().",
    mistakes={(2, 4, 6): "That is dy/dx = 2x, without v.", (1, 10, 100): "That is v, without 2x."})
check_second_derivative_prediction = _prediction(
    "03.4", "x.grad after dy.backward()", "second derivative",
    why="create_graph=True records how dy = 3x^2 was computed, so dy.backward() writes d2y/dx2 = 6x into x.grad.",
    mistakes={3: "3 is the first derivative 3x^2.", 9: "torch.autograd.grad does not add dy/dx into x.grad."})
_LOOP_MISTAKES = [  # (how the loop goes wrong, as _simulate runs it; what to tell the student)
    ("frozen", _REBIND),
    ("no_reset", "gradients accumulate across steps (backward() adds into .grad): reset them once per step"),
    ("last_chunk", "only the last chunk's gradient was used: .grad was reset before each chunk's backward"),
    ("up", "the weights moved up the gradient: subtract learning_rate * grad")]


def _simulate(x, y, w1, w2, chunks: int, mode: str = "right") -> tuple:  # (losses, w1.grad at log, w1, w2)
    w, acc, losses, seen = [w1, w2], [0, 0], [], []
    for _ in range(STEPS):
        losses.append(float(_sse(x, y, *w)))
        grads = list(zip(*[_grads(_sse, xc, yc, *w, wrt=2) for xc, yc in zip(x.chunk(chunks), y.chunk(chunks))]))
        acc = [{"no_reset": a + sum(gs), "last_chunk": gs[-1]}.get(mode, sum(gs)) for a, gs in zip(acc, grads)]
        seen.append(acc[0])
        w = w if mode == "frozen" else [a - (-1 if mode == "up" else 1) * LR * g for a, g in zip(w, acc)]
    return losses, torch.stack(seen), w[0], w[1]


def _run_loop(train: Any, seed: int, chunks: int | None, what: str, done: str) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y, w1_0, w2_0 = (torch.randn(*s, generator=g, dtype=torch.float64) for s in [(16, 12), (16, 4), (12, 9), (9, 4)])
    w1, w2, seen = w1_0.clone().requires_grad_(), w2_0.clone().requires_grad_(), []
    log = {"log": lambda t, loss: seen.append(0 * w1 if w1.grad is None else w1.grad.clone())} if chunks else {}
    try:
        losses = run_student(train, x, y, w1, w2, LR, STEPS, *([chunks] if chunks else []), what=f"your {what}", **log)
    except CheckError as err:
        cause = str(err.__cause__)  # a None .grad: reset too early, or a rebound w1 that is no leaf
        hint = ("w.grad is None before the first backward(): reset after the update" if "'zero_'" in cause else
                _REBIND if "NoneType" in cause or "does not require grad" in cause else err.hint)
        raise CheckError(err.message, hint=hint) from None
    ref = _simulate(x, y, w1_0, w2_0, chunks or 1)
    same = lambda run: all(torch.allclose(a.detach(), b, rtol=1e-9) for a, b in zip((w1, w2), run[2:]))  # noqa: E731
    for mode, why in _LOOP_MISTAKES if not same(ref) else ():
        if same(_simulate(x, y, w1_0, w2_0, chunks or 1, mode)):
            raise CheckError("w1 and w2 after training differ from a correct run", hint=why)
    for name, got, want in zip(("w1", "w2"), (w1, w2), ref[2:]):
        compare(f"{name} after training", got.detach(), want, rtol=1e-9)
    if not isinstance(losses, (list, tuple)) or not all(isinstance(v, (int, float)) for v in losses):
        raise CheckError("losses must be a list of numbers", got=repr(losses)[:60], hint="append loss.item()")
    compare("the losses", torch.tensor(losses, dtype=torch.float64), torch.tensor(ref[0], dtype=torch.float64),
            rtol=1e-9, hint="one loss per step: the whole batch's loss, computed before the update")
    if chunks:
        compare("w1.grad at each call of log", torch.stack(seen) if seen else None, ref[1], rtol=1e-9,
                hint="call log(t, loss) once per step, after all chunks' backward, before the update and the reset")
    passed(f"{what}: {done}; weights and losses match a correct run over {STEPS} steps")


@exercise("03.5", "the loop that did not train")
def check_fixed_training(train: Any) -> None:
    """Check the repaired loop ``train(x, y, w1, w2, learning_rate, steps) -> losses``."""
    _run_loop(train, 301, None, "train_fixed(x, y, w1, w2, learning_rate, steps)", "the caller's w1 and w2 learn")


@exercise("03.6", "gradients accumulated over chunks")
def check_accumulated_training(train: Any) -> None:
    """Check ``train(x, y, w1, w2, learning_rate, steps, chunks, log=None) -> losses``."""
    _run_loop(train, 300, CHUNKS, "train_accumulated(...)", f"{CHUNKS} chunks add up to the full batch's gradient")

"""Checks of notebook 03 (autograd): references are autograd on float64 copies, predictions meet
the experiment run at check time, and the training loops are judged by what happened to the
caller's weights and gradients (watched by hooks), not by the form of the code."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_function,
    first_mistake,
    mistake_error,
    passed,
    plain,
    plain_tensor,
    run_cases,
    run_student,
)
from .nb02_manual_backprop import _autograd_refused, _by_hand
from .predictions import one_row
from .references import lecture_loss

__all__ = [
    "check_predicted_gradients",
    "check_backward_twice_prediction",
    "check_vjp_prediction",
    "check_second_derivative_prediction",
    "check_fixed_training",
    "check_accumulated_training",
]

#: The training loops' problem: learning rate, steps, chunks (03.6). STEPS > CHUNKS, so a loop whose
#: later steps never reach the caller's weights shows as fewer backward() calls than steps.
LR = 1e-3
STEPS = 5
CHUNKS = 4


def _two_path_loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exercise 03.1's L = sum((a * b + exp(a)) ** 2)."""
    return ((a * b + a.exp()) ** 2).sum()


def _autograd(f: Any, *args: torch.Tensor, wrt: int = 0) -> tuple:
    """Autograd's gradients of ``f(*args)`` with respect to ``args[wrt:]``, on detached copies."""
    leaves = []
    for i, a in enumerate(args):
        leaves.append(a.detach().clone().requires_grad_(i >= wrt))
    with torch.enable_grad():
        loss = f(*leaves)
    return torch.autograd.grad(loss, leaves[wrt:])


# ------------------------------------------------------------------ 03.1 a gradient along two paths


def _two_path_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """The typical wrong (grad_a, grad_b) of L = sum((a * b + exp(a)) ** 2); None: any value."""
    d = a * b + a.exp()
    e = a.exp()
    paths = "a reaches d along two paths, and the chain rule adds the contributions of both"
    return [
        Mistake("missing exp path", (2 * d * b, None), f"grad_a has only the path through a * b: {paths}"),
        Mistake("missing product path", (2 * d * e, None), f"grad_a has only the path through exp(a): {paths}"),
        Mistake("exp derivative taken as 1", (2 * d * (b + 1), None), "grad_a: the derivative of exp(a) is exp(a)"),
        Mistake(
            "exp path without the outer derivative",
            (2 * d * b + e, None),
            "grad_a's path through exp(a) lacks the outer derivative dL/dd = 2 * d: every path is multiplied by it",
        ),
        Mistake(
            "exp path without the outer derivative",
            (2 * d * b + 2 * e, None),
            "grad_a's path through exp(a) is multiplied by 2 but not by d: the outer derivative dL/dd = 2 * d "
            "multiplies every path",
        ),
        Mistake(
            "exp path in grad_b",
            (None, 2 * d * (a + e)),
            "grad_b counts the path through exp(a), which does not depend on b: b reaches d only through a * b",
        ),
        Mistake(
            "exp(a) added to grad_b",
            (None, 2 * d * a + e),
            "grad_b has exp(a) added to it: exp(a) does not change when b does, so its derivative with respect to b "
            "is 0, and b reaches d only through a * b",
            look="every term of grad_b: does it come from a path that starts at b?",
        ),
        Mistake(
            "c for d", (2 * (a * b) * (b + e), None), "the outer derivative is 2 * d, with d = a * b + exp(a), not c"
        ),
        Mistake("c for d", (None, 2 * (a * b) * a), "the outer derivative is 2 * d, with d = a * b + exp(a), not c"),
        Mistake("outer derivative missing", (b + e, None), "grad_a lacks dL/dd = 2 * d, the outer derivative"),
        Mistake("outer derivative missing", (None, a), "grad_b lacks dL/dd = 2 * d, the outer derivative"),
        *_outer_derivative_mistakes(a, b),
        *_inner_derivative_mistakes(a, b),
        Mistake("half the gradient", (d * (b + e), None), "grad_a is half the gradient: d(d**2)/dd = 2 * d"),
        Mistake("half the gradient", (None, d * a), "grad_b is half the gradient: d(d**2)/dd = 2 * d"),
        Mistake("grad_b uses b", (None, 2 * d * b), "grad_b: the derivative of a * b with respect to b is a, not b"),
        Mistake(
            "grad_a uses a",
            (2 * d * (a + e), None),
            "grad_a: the derivative of a * b with respect to a is b, not a",
        ),
        Mistake("gradients swapped", (2 * d * a, 2 * d * (b + e)), "grad_a and grad_b are returned in swapped order"),
        Mistake(
            "paths multiplied",
            (2 * d * b * e, None),
            f"grad_a multiplies the two paths' derivatives: {paths}, it does not multiply them",
        ),
        *_two_path_round12_mistakes(a, b),
    ]


def _two_path_round12_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """Round 12 of the audit: a sign flipped, exp's derivative by the power rule, and the outer derivative alone."""
    d = a * b + a.exp()
    e = a.exp()
    return [
        Mistake(
            "gradients negated",
            (-2 * d * (b + e), -2 * d * a),
            "both gradients have the right size but the opposite sign: L = sum(d**2) has no minus sign, so neither "
            "has its derivative (a minus belongs to a gradient descent step, not to the gradient)",
            look="the sign of the factor every path shares",
        ),
        Mistake(
            "exp derivative taken as a * exp(a)",
            (2 * d * (b + a * e), None),
            "grad_a: the derivative of exp(a) was taken as a * exp(a), as if the power rule applied to an exponent; "
            "exp is its own derivative",
            look="the term of grad_a that comes from exp(a)",
        ),
        Mistake(
            "gradients of the mean",
            (2 * d * (b + e) / d.numel(), 2 * d * a / d.numel()),
            "both gradients are divided by the number of entries, as for a mean of d**2: L is the sum of d**2, so "
            "each entry's term counts fully",
            look="a division by the number of entries (numel, len, a .mean())",
        ),
        Mistake(
            "outer derivative alone",
            (2 * d, None),
            "grad_a is dL/dd = 2 * d alone: the chain rule multiplies it by how d changes with a, along both paths",
            look="what grad_a multiplies 2 * d with",
        ),
        Mistake(
            "outer derivative alone",
            (None, 2 * d),
            "grad_b is dL/dd = 2 * d alone: the chain rule multiplies it by how d changes with b, through a * b",
            look="what grad_b multiplies 2 * d with",
        ),
    ]


def _outer_derivative_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """dL/dd taken as the constant 2 (d forgotten), or as d**2 (the loss's own term, not its derivative)."""
    d = a * b + a.exp()
    why_two = "the outer derivative dL/dd was taken as 2: the derivative of d**2 is 2 * d, and d stays in it"
    why_square = "the paths were multiplied by d**2, the loss's own term: the outer derivative is d(d**2)/dd = 2 * d"
    look = "the factor every path shares, dL/dd"
    return [
        Mistake("outer derivative without d", (2 * (b + a.exp()), None), why_two, look=look),
        Mistake("outer derivative without d", (None, 2 * a), why_two, look=look),
        Mistake("d**2 for the outer derivative", (d**2 * (b + a.exp()), None), why_square, look=look),
        Mistake("d**2 for the outer derivative", (None, d**2 * a), why_square, look=look),
        *_summed_outer_derivative_mistakes(a, b),
    ]


def _summed_outer_derivative_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """dL/dd taken as one number, 2 * d.sum(), shared by every entry (sixteenth audit)."""
    d = a * b + a.exp()
    why = (
        "the outer derivative was one number for every entry, twice the sum of d: L adds up separate terms d_i**2, "
        "and entry i of a or b reaches L only through its own d_i, so each entry has its own outer factor"
    )
    look = "the factor every path shares, dL/dd: its shape"
    return [
        Mistake("outer derivative summed", (2 * d.sum() * (b + a.exp()), None), why, look=look),
        Mistake("outer derivative summed", (None, 2 * d.sum() * a), why, look=look),
    ]


def _inner_derivative_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """The derivative of a * b taken as a + b (the product rule with both factors varying), and of exp(a) taken
    by the power rule, as a * exp(a - 1)."""
    d = a * b + a.exp()
    product = (
        "the derivative of a * b was taken as a + b, as if both factors changed together: by the product rule "
        "d(a * b) = a db + b da, and when only b changes da is 0 (when only a changes, db is 0), so one term is left"
    )
    return [
        Mistake("product rule with both factors varying", (2 * d * (a + b + a.exp()), None), product),
        Mistake("product rule with both factors varying", (None, 2 * d * (a + b)), product),
        Mistake(
            "gradient summed",
            ((2 * d * (b + a.exp())).sum(), None),
            "grad_a was added up into one number: the gradient of L with respect to a has one entry per entry of "
            "a, each saying how L changes when that entry moves (L is a sum, its derivative is not)",
            look="the last operation on grad_a: what does it do to the shape?",
        ),
        Mistake(
            "gradient summed",
            (None, (2 * d * a).sum()),
            "grad_b was added up into one number: the gradient of L with respect to b has one entry per entry of "
            "b, each saying how L changes when that entry moves (L is a sum, its derivative is not)",
            look="the last operation on grad_b: what does it do to the shape?",
        ),
        Mistake(
            "power rule on exp",
            (2 * d * (b + a * (a - 1).exp()), None),
            "grad_a's path through exp(a) used the power rule, as if exp(a) were a power of a: the exponent is the "
            "variable here, and the derivative of exp(a) is exp(a) itself",
            look="the factor of the path through exp(a)",
        ),
    ]


#: predict_grads only reads a and b: the notebook's next cell hands it a.detach(), which shares a's memory.
PREDICT_IN_PLACE = (
    "predict_grads only reads its inputs, but an operation whose name ends in _ (exp_, mul_, add_) or an "
    "assignment into {name} (+=, {name}[...] =) wrote into the caller's tensor; the notebook hands it a.detach(), "
    "which shares a's memory, so a itself would change"
)


def _two_path_reference(a: torch.Tensor, b: torch.Tensor) -> tuple:
    return _autograd(_two_path_loss, a, b)


@exercise("03.1", "predict a gradient, then let autograd confirm it")
def check_predicted_gradients(predict: Any) -> None:
    """Check ``predict(a, b) -> (grad_a, grad_b)`` for ``L = sum((a * b + exp(a)) ** 2)``."""
    what = "your predict_grads(a, b)"
    expect_function(predict, what)
    g = torch.Generator().manual_seed(30)
    cases = []
    for shape in [(5,), (3, 4)]:
        a = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        b = torch.randn(shape, generator=g, dtype=torch.float64)
        cases.append((a, b))
    instead = "the exercise asks for the derivatives worked out on paper, written with tensor arithmetic"
    try:
        with _autograd_refused(what, instead):
            run_cases(
                _by_hand(predict),
                cases,
                _two_path_reference,
                what=what,
                outputs=("grad_a", "grad_b"),
                mistakes=_two_path_mistakes,
                inplace_hint=PREDICT_IN_PLACE,
            )
    except CheckError as err:
        if "not finite" not in err.message or err.mistake:
            raise
        # the engine's guess (a learning rate, ...) does not fit a formula: say what, not why
        raise CheckError(err.message, expected=err.expected, got=err.got) from None
    passed("predicted gradients: grad_a and grad_b match autograd on 2 cases (rel. error < 1e-5)")


# ------------------------------------------------------------------ 03.2-03.4 predict, then run


def _backward_twice() -> str:
    """Exercise 03.2's experiment: a second backward() through one graph."""
    w = torch.randn(3, 2, generator=torch.Generator().manual_seed(32), requires_grad=True)
    loss = torch.ones(4, 3).mm(w).clamp(min=0).pow(2).sum()
    loss.backward()
    first = w.grad.clone()
    try:
        loss.backward()
    except RuntimeError:
        return "error"
    if torch.allclose(w.grad, 2 * first):
        return "doubled"
    return "same"


#: Other words for a choice: the error's own name, and the prompt's own gloss of "same" (".grad is unchanged").
OTHER_WORDS = {
    "runtimeerror": "error",
    "runtime error": "error",
    "unchanged": "same",
    # thirteenth audit: the plain words students use for the two outcomes
    "exception": "error",
    "an error": "error",
    "raises": "error",
    "raises an error": "error",
    "crash": "error",
    "crashes": "error",
    "twice": "doubled",
    "2x": "doubled",
    # fourteenth audit
    "fails": "error",
    "it fails": "error",
    "errors": "error",
    "it errors": "error",
    "it raises": "error",
    "an exception is raised": "error",
    "an error is raised": "error",
    # fifteenth audit: the error named with an article or a verb
    "a runtimeerror": "error",
    "raises runtimeerror": "error",
    "raises a runtimeerror": "error",
    "it raises runtimeerror": "error",
    "it raises a runtimeerror": "error",
    "runtimeerror is raised": "error",
    "a runtimeerror is raised": "error",
}


def _error_by_name(prediction: Any) -> Any:
    """03.2's answer with the error's own name ("RuntimeError") read as the choice "error", "unchanged" as "same"."""
    if isinstance(prediction, str):
        return OTHER_WORDS.get(str.strip(prediction, " '\"`.!").lower(), prediction)
    if isinstance(prediction, torch.Tensor):
        return plain_tensor(prediction)  # a subclass's overrides cannot answer for its values
    return prediction


@exercise("03.2", "predict, then run: backward() twice on the same loss", prediction=True)
def check_backward_twice_prediction(prediction: Any) -> None:
    """Run exercise 03.2's experiment now and judge the prediction."""
    check_prediction(
        "a second backward() on one graph",
        _error_by_name(prediction),
        _backward_twice(),
        choices=("error", "doubled", "same"),
        why="backward() frees what the graph saved (factors, masks) as it goes; keep it with retain_graph=True.",
        mistakes={
            "doubled": "Doubling is what a second FORWARD and backward give (section 3): a new graph.",
            "same": "backward() never leaves .grad as it was: it adds, or it cannot run at all.",
        },
        ask="what did the first backward() free that a second one would need?",
    )


def _vjp_experiment() -> tuple:
    """Exercise 03.3's experiment: x.grad after y.backward(gradient=v) for y = x ** 2."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x**2).backward(gradient=torch.tensor([1.0, 10.0, 100.0]))
    return tuple(x.grad.tolist())


def _three_numbers(prediction: Any) -> Any:
    """03.3's answer as a tuple of three plain numbers (from a list, a tuple, a tensor or an array)."""
    __tracebackhide__ = True
    if prediction is None or prediction is Ellipsis:
        return prediction  # check_prediction says that no prediction was written yet
    prediction = one_row(prediction)  # [[2, 40, 600]]: one row, in one pair of brackets too many
    items = prediction
    if isinstance(prediction, torch.Tensor):
        tensor = plain_tensor(prediction)
        if tensor.device.type == "meta":
            raise CheckError("your prediction is on the meta device, which holds no values", usage=True)
        items = tensor.detach().cpu().tolist()
    elif type(prediction).__module__ == "numpy" and hasattr(prediction, "tolist"):
        items = prediction.tolist()
    items = plain(items)
    if not isinstance(items, tuple) or len(items) != 3:
        hint = None
        if isinstance(items, str) and any(char.isdigit() for char in items):
            hint = "write the list itself, without quotes around it: [first, second, third]"
        raise CheckError(
            "x.grad after backward(gradient=v): answer with a list of three numbers, one per element of x",
            got=describe(prediction),
            hint=hint,
            usage=True,
        )
    numbers = []
    for i, item in enumerate(items):
        numbers.append(as_number(item, f"number {i + 1} of your prediction"))
    return tuple(numbers)


@exercise("03.3", "predict, then run: a vector-Jacobian product", prediction=True)
def check_vjp_prediction(prediction: Any) -> None:
    """Run exercise 03.3's experiment now and judge the prediction (three numbers)."""
    check_prediction(
        "x.grad after backward(gradient=v)",
        _three_numbers(prediction),
        _vjp_experiment(),
        why="backward(gradient=v) computes v^T J, here v_i * 2 x_i: as if the loss were (v * y).sum().",
        mistakes={
            (2, 4, 6): "That is dy/dx = 2x, without v.",
            (1, 10, 100): "That is v, without 2x.",
            (1, 20, 300): "That is v * x: the derivative of x ** 2 is 2x.",
            (1, 40, 900): "That is v * y, the outputs weighted by v, not their derivatives.",
            (1, 4, 9): "That is y = x ** 2 itself: x.grad holds derivatives of the outputs, weighted by v.",
            (2, 20, 200): "That is 2 * v: the derivative of x ** 2 is 2x, which changes from one element to the next.",
            (2, 80, 1800): "That is 2 * v * y, v times 2x ** 2: the derivative of x ** 2 is 2x, not 2 * y.",
            (222, 444, 666): "That is 2x times the sum of v: y_i depends on x_i alone, so J is diagonal and each "
            "x_j gets only the v_j of its own output.",
            (642, 642, 642): "642 is the sum of all three v_i * 2 x_i: v^T J keeps one entry per x_j, each "
            "adding up the outputs that depend on x_j (here one).",
        },
        ask="which entries of the Jacobian J are not zero, and what does v^T J add up for each x_j?",
        rel=1e-9,  # exact arithmetic on small integers: 620 is not 600
    )


def _second_derivative() -> float:
    """Exercise 03.4's experiment: x.grad after dy.backward(), dy = d(x ** 3)/dx with create_graph."""
    x = torch.tensor(1.0, requires_grad=True)
    (dy,) = torch.autograd.grad(x**3, x, create_graph=True)
    dy.backward()
    return float(x.grad)


def _one_number(prediction: Any) -> Any:
    """03.4's answer with a one-element list, tuple, 1-d tensor or array ([6], torch.tensor([6.0])) read as that
    one number; anything else as it came (the engine reads and refuses the rest)."""
    if isinstance(prediction, torch.Tensor):
        prediction = plain_tensor(prediction)  # a subclass's overrides cannot answer for its shape or values
    if isinstance(prediction, torch.Tensor) or type(prediction).__module__ == "numpy":
        if getattr(prediction, "ndim", 0) == 1 and getattr(prediction, "shape", ()) == (1,):
            return prediction.reshape(())
        return prediction
    if isinstance(prediction, (list, tuple)) and len(prediction) == 1:
        return plain(prediction)[0]
    return prediction


@exercise("03.4", "predict, then run: a second derivative", prediction=True)
def check_second_derivative_prediction(prediction: Any) -> None:
    """Run exercise 03.4's experiment now and judge the prediction (a number)."""
    check_prediction(
        "x.grad after dy.backward()",
        _one_number(prediction),
        _second_derivative(),
        why="create_graph=True records how dy = 3x^2 was computed, so dy.backward() writes d2y/dx2 = 6x into x.grad.",
        mistakes={
            3: "3 is the first derivative 3x^2.",
            9: "torch.autograd.grad does not add dy/dx into x.grad.",
            0: "dy has a history: create_graph=True recorded how it was computed.",
            12: "12 counts the second derivative twice: torch.autograd.grad returned dy without writing anything "
            "into x.grad, so dy.backward() is the only call that adds to it.",
            1: "1 is dx/dx: dy.backward() differentiates dy = 3x^2, the graph create_graph=True recorded.",
            "None": "x.grad does not stay None: dy is a function of x that create_graph=True recorded, so "
            "dy.backward() reaches x and writes a number into x.grad.",
        },
        ask="what did create_graph=True record, and which derivative does dy.backward() compute from it?",
        rel=1e-9,  # an exact number: 6.2 is not 6
    )


# ------------------------------------------------------------------ 03.5 / 03.6 training loops


@dataclasses.dataclass(frozen=True)
class _Problem:
    """The data and starting weights a loop is run on (float64), and the chunks of 03.6 (1 in 03.5)."""

    x: torch.Tensor
    y: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    chunks: int
    lr: float = LR


def _problem(seed: int, chunks: int, lr: float = LR) -> _Problem:
    g = torch.Generator().manual_seed(seed)
    # 18 rows: chunk(4) makes pieces of 5, 5, 5 and 3, while split(x, 4) makes five pieces of 4, 4, 4, 4 and 2
    x = 0.5 * torch.randn(18, 12, generator=g, dtype=torch.float64)
    y = torch.randn(18, 4, generator=g, dtype=torch.float64)
    w1 = 0.5 * torch.randn(12, 9, generator=g, dtype=torch.float64)
    w2 = 0.5 * torch.randn(9, 4, generator=g, dtype=torch.float64)
    return _Problem(x, y, w1, w2, chunks, lr)


@dataclasses.dataclass
class _Run:
    """Gradient descent as a loop with one behaviour runs it: what each step saw and left."""

    losses: list[float]  # the whole batch's loss before each step's update
    chunk_losses: list[list[float]]  # each chunk's loss, each step
    before: list[tuple]  # (w1, w2) before each step's update
    partial: list[list[torch.Tensor]]  # w1.grad after the first k chunks' backward(), each step
    final: tuple  # (w1, w2) after the last step

    def final_loss(self, problem: _Problem) -> float:
        return float(lecture_loss(problem.x, problem.y, *self.final))


#: Behaviours of a loop that uses chunks; with one chunk they are the right loop.
_CHUNK_BEHAVIOURS = ("reset per chunk", "update per chunk", "scaled", "chunk means")


def _chunk_gradient(grad: tuple, x_part: Any, y_part: Any, w: tuple, behaviour: str, chunks: int) -> tuple:
    """``grad`` after one chunk's backward(), as the loop with ``behaviour`` would leave it."""
    part = _autograd(lecture_loss, x_part, y_part, *w, wrt=2)
    if behaviour == "reset per chunk":
        return tuple(part)
    if behaviour == "scaled":
        part = [d / chunks for d in part]
    if behaviour == "chunk means":
        part = [d / y_part.numel() for d in part]
    return tuple(g + d for g, d in zip(grad, part))


#: The signs of the two updates of a loop that goes up the gradient: both weights, or one of them.
_SIGNS = {"ascent": (-1.0, -1.0), "w1 ascent": (-1.0, 1.0), "w2 ascent": (1.0, -1.0)}


def _descend(p: _Problem, behaviour: str = "right") -> _Run:
    """STEPS steps of gradient descent from the problem's start, as a loop with ``behaviour`` runs them:
    "right", "no reset", "w1 reset only", "w2 reset only", "ascent" (or "w1 ascent", "w2 ascent": one weight only),
    "reset per chunk", "update per chunk", "scaled" (by 1/chunks) or "chunk means"."""
    w = (p.w1, p.w2)
    zeros = (torch.zeros_like(p.w1), torch.zeros_like(p.w2))
    grad = zeros
    run = _Run([], [], [], [], w)
    for _ in range(STEPS):
        run.losses.append(float(lecture_loss(p.x, p.y, *w)))
        run.before.append(w)
        if behaviour == "w1 reset only":
            grad = (zeros[0], grad[1])
        elif behaviour == "w2 reset only":
            grad = (grad[0], zeros[1])
        elif behaviour != "no reset":
            grad = zeros
        chunk_losses = []
        partial = []
        for x_part, y_part in zip(p.x.chunk(p.chunks), p.y.chunk(p.chunks)):
            chunk_losses.append(float(lecture_loss(x_part, y_part, *w)))
            grad = _chunk_gradient(grad, x_part, y_part, w, behaviour, p.chunks)
            partial.append(grad[0])
            if behaviour == "update per chunk":
                w = tuple(v - p.lr * g for v, g in zip(w, grad))
                grad = zeros
        run.chunk_losses.append(chunk_losses)
        run.partial.append(partial)
        if behaviour != "update per chunk":
            w = tuple(v - sign * p.lr * g for v, g, sign in zip(w, grad, _SIGNS.get(behaviour, (1.0, 1.0))))
    run.final = w
    return run


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got.detach(), want, rtol=1e-9, atol=1e-12)


@dataclasses.dataclass
class _Observed:
    """What happened to the caller's w1 and w2 while the student's loop ran."""

    problem: _Problem
    weights: tuple  # the caller's w1 and w2, after the loop
    versions: tuple  # their version counters before the loop (in-place changes count them up)
    arrivals: tuple  # for each: how many times backward() added into its .grad
    w1_values: list  # the caller's w1 at each of those times
    error: BaseException | None = None  # what the loop raised, if it raised

    def untouched(self, i: int) -> bool:
        return torch.equal(self.weights[i].detach(), (self.problem.w1, self.problem.w2)[i])

    def changed_in_place(self, i: int) -> bool:
        return self.weights[i]._version != self.versions[i]

    def error_text(self) -> str:
        if self.error is None:
            return ""
        return f"{type(self.error).__name__}: {self.error}"

    def facts(self) -> str:
        """Where each weight stands: changed or not, and how often backward() reached it."""
        when = f"in {STEPS} steps" if self.error is None else "before the error"
        parts = []
        for i, name in enumerate(("w1", "w2")):
            state = "unchanged since the start" if self.untouched(i) else "changed"
            parts.append(f"{name} {state}, reached by backward() {self.arrivals[i]} time(s) {when}")
        return "; ".join(parts)


def _reset_before_any_backward(seen: _Observed) -> bool:
    text = seen.error_text()
    return "zero_" in text and "NoneType" in text and seen.arrivals == (0, 0)


def _update_recorded(seen: _Observed) -> bool:
    return "leaf Variable that requires grad" in seen.error_text()


def _reset_before_update(seen: _Observed) -> bool:
    """.grad was emptied after backward() and before the update read it (None: the update raised)."""
    for i, w in enumerate(seen.weights):
        if not seen.arrivals[i] or not seen.untouched(i):
            continue
        if seen.error is not None:
            if "NoneType" in seen.error_text() and w.grad is None and not seen.changed_in_place(i):
                return True
        elif seen.changed_in_place(i) and (w.grad is None or not w.grad.any()):
            return True
    return False


def _rebound(seen: _Observed) -> bool:
    """Later steps computed with tensors other than the caller's: those got a gradient, then nothing."""
    text = seen.error_text()
    for i, w in enumerate(seen.weights):
        if not seen.arrivals[i] or seen.changed_in_place(i) or not seen.untouched(i):
            continue
        if seen.error is None and seen.arrivals[i] < STEPS:
            return True
        if seen.error is not None and w.grad is not None:
            if "NoneType" in text or "does not require grad" in text:
                return True
    return False


def _never_updated(seen: _Observed) -> bool:
    if seen.error is not None:
        return False
    for i in range(2):
        if seen.untouched(i) and not seen.changed_in_place(i) and seen.arrivals[i] >= STEPS:
            return True
    return False


def _one_update_short(seen: _Observed) -> bool:
    """Do the caller's weights end where one update fewer leaves them (the first or the last step's skipped)?"""
    if seen.error is not None:
        return False
    short = _descend(seen.problem).before[-1]
    return all(_close(w, r) for w, r in zip(seen.weights, short))


def _stopped_after_first_step(seen: _Observed) -> bool:
    """Did the loop run one correct step and stop there (a return inside the loop)?"""
    chunks = seen.problem.chunks
    if seen.error is not None or seen.arrivals != (chunks, chunks):
        return False
    after_one = _descend(seen.problem).before[1]
    return all(_close(w, r) for w, r in zip(seen.weights, after_one))


def _never_reached(seen: _Observed) -> bool:
    """The loop ran to its end, and backward() never reached either of the caller's weights."""
    return seen.error is None and seen.arrivals == (0, 0)


def _some_chunks_left_out(seen: _Observed) -> bool:
    """Do the caller's weights end where descent on the first or the last k chunks alone leads (k < chunks,
    backward() having run k times per step)?"""
    p = seen.problem
    per_step, rest = divmod(seen.arrivals[0], STEPS)
    if seen.error is not None or rest or not 0 < per_step < p.chunks:
        return False
    pieces = list(zip(p.x.chunk(p.chunks), p.y.chunk(p.chunks)))
    for kept in (pieces[:per_step], pieces[-per_step:]):
        x = torch.cat([piece[0] for piece in kept])
        y = torch.cat([piece[1] for piece in kept])
        part = dataclasses.replace(p, x=x, y=y, chunks=per_step)
        if all(_close(w, r) for w, r in zip(seen.weights, _descend(part).final)):
            return True
    return False


def _remainder_left_out(seen: _Observed) -> bool:
    """Do the caller's weights end where descent on the first chunks * (N // chunks) rows leads: chunks pieces of
    N // chunks rows each, the last N % chunks rows never used?"""
    p = seen.problem
    size = len(p.x) // p.chunks
    if seen.error is not None or p.chunks == 1 or size * p.chunks == len(p.x):
        return False
    if seen.arrivals[0] != STEPS * p.chunks:
        return False
    kept = size * p.chunks
    part = dataclasses.replace(p, x=p.x[:kept], y=p.y[:kept])
    return all(_close(w, r) for w, r in zip(seen.weights, _descend(part).final))


def _requires_grad_turned_off(seen: _Observed) -> bool:
    """Does a caller's weight no longer require grad after the loop (requires_grad set to False on it)?"""
    return any(not w.requires_grad for w in seen.weights)


def _behaves_like(behaviour: str, seen: _Observed) -> bool:
    """Do the caller's weights end where a loop with ``behaviour`` leaves them?"""
    if seen.error is not None:
        return False
    if behaviour in _CHUNK_BEHAVIOURS and seen.problem.chunks == 1:
        return False
    run = _descend(seen.problem, behaviour)
    return all(_close(w, r) for w, r in zip(seen.weights, run.final))


#: Optimizers a student may reach for instead of the loop's own update, each with its default settings but the
#: learning rate (SGD with momentum at the usual 0.9).
_OTHER_OPTIMIZERS = {
    "Adam": torch.optim.Adam,
    "AdamW": torch.optim.AdamW,
    "RMSprop": torch.optim.RMSprop,
    "Adagrad": torch.optim.Adagrad,
    "SGD with momentum": functools.partial(torch.optim.SGD, momentum=0.9),
}


def _optimizer_final(p: _Problem, make: Callable, fresh: bool, reset: bool = True) -> tuple:
    """(w1, w2) after STEPS steps of the optimizer ``make`` on the full batch, made once or anew each step, with
    or without a reset of .grad after each step."""
    w = [p.w1.clone().requires_grad_(), p.w2.clone().requires_grad_()]
    optimizer = make(w, lr=p.lr)
    with torch.enable_grad():
        for _ in range(STEPS):
            if fresh:
                optimizer = make(w, lr=p.lr)
            lecture_loss(p.x, p.y, *w).backward()
            optimizer.step()
            if reset:
                optimizer.zero_grad()
    return tuple(v.detach() for v in w)


def _follows_optimizer(fresh: bool) -> Callable[[_Observed], bool]:
    """A test on what happened: do the weights end where another optimizer, made once (or anew each step, with or
    without a reset of .grad), leaves them? (A fresh SGD with momentum is plain gradient descent, so it is not tried
    fresh.)"""

    def follows(seen: _Observed) -> bool:
        if seen.error is not None:
            return False
        for name, make in _OTHER_OPTIMIZERS.items():
            if fresh and name == "SGD with momentum":
                continue
            for reset in (True, False) if fresh else (True,):
                final = _optimizer_final(seen.problem, make, fresh, reset)
                if all(_close(w, r) for w, r in zip(seen.weights, final)):
                    return True
        return False

    return follows


_WHEN = "In which order do backward(), the update and the reset run in your step?"

#: The typical ways a training loop goes wrong, judged on what happened (first match wins).
#: None of them names the repaired line of exercise 03.5: they ask the question that shows the bug.
_LOOP_MISTAKES = [
    Mistake(
        "requires_grad turned off",
        _requires_grad_turned_off,
        why="after the loop, a weight the caller passed in no longer requires grad: the loop set its requires_grad "
        "to False, so from then on autograd does not track it, backward() leaves its .grad alone, and the updates "
        "that read .grad find None or a gradient from before. A weight that is trained must stay tracked for the "
        "whole loop",
        look="every line that changes the weights' requires_grad, and when it runs",
        symptom="a weight the caller passed in does not require grad any more after the loop",
    ),
    Mistake(
        "backward never called",
        _never_reached,
        why="backward() never reached the caller's w1 or w2 in any step: the loop never called backward() on a loss "
        "computed from the weights it was given (is the step written, and does it use w1 and w2?)",
        look="the loop's body: the forward pass, the loss and its backward()",
    ),
    Mistake(
        "reset before any backward",
        _reset_before_any_backward,
        why="w.grad is None until a backward() has filled it, so resetting it with zero_() fails in the first "
        "step: at which point of a step is there a gradient to reset?",
        look="the line that resets .grad, and where it sits in the step",
    ),
    Mistake(
        "update recorded by autograd",
        _update_recorded,
        why="the update ran while autograd was recording, and autograd refuses to change a leaf it records: "
        "what must surround an update so that autograd does not record it?",
        look="the update lines, and the block they sit in",
    ),
    Mistake(
        "reset between backward and update",
        _reset_before_update,
        why=f".grad was reset after backward() and before the update read it, so the update found no gradient. {_WHEN}",
        look="the lines that reset .grad, relative to the update",
    ),
    Mistake(
        "update rebinds the names",
        _rebound,
        why="after the first step your loop computed with tensors other than the caller's w1 and w2, which never "
        "changed. Which tensor does the name w1 refer to after the update line, and is it the one the caller "
        "passed in?",
        look="the two lines under `with torch.no_grad():` that compute the new w1 and w2",
    ),
    Mistake(
        "weights never updated",
        _never_updated,
        why="backward() reached the caller's w1 and w2 in every step, but at least one of them never changed: which "
        "line is meant to change each tensor the caller passed in?",
        look="the update lines",
    ),
    Mistake(
        "stopped after the first step",
        _stopped_after_first_step,
        why=f"the caller's weights end where one correct step leaves them, and backward() ran in that step alone: "
        f"the loop stopped after its first pass instead of running all {STEPS} steps. Which lines belong to the "
        "loop's body, and which come after it?",
        look="the return line, and which block it belongs to",
    ),
    Mistake(
        "one update short",
        _one_update_short,
        why=f"the caller's weights end where {STEPS - 1} correct updates leave them, one fewer than the {STEPS} "
        "steps: one step computed its gradient but did not update, the first or the last. Does every step of your "
        "loop reach the update, and does the loop run steps times?",
        look="the condition or the range around the update",
    ),
    Mistake(
        "gradients accumulate across steps",
        functools.partial(_behaves_like, "no reset"),
        why="each update used this step's gradient plus all earlier ones: backward() adds into .grad. "
        "When does .grad go back to zero in your loop?",
        look="the reset of w1.grad and w2.grad, if there is one",
    ),
    Mistake(
        "one gradient accumulates",
        lambda seen: _behaves_like("w1 reset only", seen) or _behaves_like("w2 reset only", seen),
        why="one weight's updates used its step's gradient plus all earlier ones, while the other's were right: "
        "backward() adds into .grad. Is every weight's .grad back to zero at the start of each step?",
        look="the reset of w1.grad and w2.grad",
    ),
    Mistake(
        "update goes up the gradient",
        functools.partial(_behaves_like, "ascent"),
        why="the weights moved up the gradient, the direction in which the loss grows: which sign does your "
        "update give learning_rate * grad?",
        look="the sign in each update line",
    ),
    Mistake(
        "one weight goes up the gradient",
        lambda seen: _behaves_like("w1 ascent", seen) or _behaves_like("w2 ascent", seen),
        why="one weight moved down the gradient, as it should, and the other up it, the direction in which the loss "
        "grows: the two update lines do not give learning_rate * grad the same sign",
        look="the sign in each update line, one beside the other",
    ),
    Mistake(
        "some chunks left out",
        _some_chunks_left_out,
        why="each update used the gradient of only some of the chunks: the rows of the others never reached .grad, "
        "so the step is not the full batch's. Does the loop over the chunks visit every piece?",
        look="the loop over the chunks: what it iterates over, and where it starts and stops",
    ),
    Mistake(
        "last rows left out",
        _remainder_left_out,
        why="each update used all the chunks but not all the rows: every piece got N // chunks rows, and the "
        "rows left over when N is not a multiple of chunks never reached .grad. Count the rows your pieces hold "
        "when the batch does not divide evenly",
        look="how the pieces are cut: the size of each, and where the last one ends",
    ),
    Mistake(
        "only the last chunk's gradient",
        functools.partial(_behaves_like, "reset per chunk"),
        why="each update used the last chunk's gradient alone: .grad was reset before every chunk's backward(), "
        f"which discarded the chunks before it. {_WHEN}",
        look="the reset inside the loop over chunks",
    ),
    Mistake(
        "one update per chunk",
        functools.partial(_behaves_like, "update per chunk"),
        why="the weights were updated after every chunk: one update per chunk, where the exercise wants one per "
        "step with the chunks' gradients added up",
        look="the update, inside or after the loop over chunks",
    ),
    Mistake(
        "chunk gradients scaled",
        functools.partial(_behaves_like, "scaled"),
        why="each update moved the weights by the full batch's gradient divided by the number of chunks (a chunk's "
        "loss divided by chunks before its backward(), or the learning rate divided by chunks): with the "
        "lecture's summed loss the chunks' gradients add up to the full batch's gradient, and the step is "
        "learning_rate times that, with no factor",
        look="the loss each chunk calls backward() on, and the step size of the update",
    ),
    Mistake(
        "chunk losses are means",
        functools.partial(_behaves_like, "chunk means"),
        why="each chunk's loss is a mean over its entries (.mean(), or mse_loss's default), so chunks of different "
        "sizes weigh differently and their gradients do not add up to the full batch's: the lecture's loss is a sum",
        look="the loss each chunk calls backward() on",
    ),
    Mistake(
        "a fresh optimizer each step",
        _follows_optimizer(fresh=True),
        why="every step moved each weight by about learning_rate, whatever the size of its gradient: an adaptive "
        "optimizer (Adam, RMSprop, Adagrad) made inside the loop starts over at every step, and a first step of "
        "Adam is a step of learning_rate in the gradient's sign. The exercise asks for plain gradient descent, "
        "which moves each weight by learning_rate times its gradient",
        look="where the optimizer is made, and which update rule the exercise asks for",
    ),
    Mistake(
        "another optimizer",
        _follows_optimizer(fresh=False),
        why="the weights follow another optimizer's update rule (Adam, RMSprop, Adagrad or momentum), which keeps "
        "running averages of the gradients from step to step: the exercise asks for plain gradient descent, where "
        "each step moves each weight by learning_rate times this step's gradient and nothing else, so that the "
        "losses are those of a correct run",
        look="the update: which rule moves the weights?",
    ),
]


@dataclasses.dataclass(frozen=True)
class _LogCall:
    """One call of log(t, loss) and what the caller's w1 and w1.grad held then."""

    t: Any
    loss: Any
    w1: torch.Tensor
    grad_w1: torch.Tensor | None


def _count_arrival(arrivals: list[int], w1_values: list, i: int, w: torch.Tensor) -> None:
    arrivals[i] += 1
    if i == 0:
        w1_values.append(w.detach().clone())


def _log_recorder(calls: list[_LogCall], w1: torch.Tensor) -> Any:
    """The ``log`` the check hands to the loop: it records each call, and what w1 and w1.grad hold then."""

    def log(t: Any, loss: Any) -> None:
        grad = None
        if w1.grad is not None:
            grad = w1.grad.detach().clone()
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().clone()
        calls.append(_LogCall(t, loss, w1.detach().clone(), grad))

    return log


GRAD_MODE_LEFT_OFF = Mistake(
    "grad mode left off",
    None,
    why="the loop switched gradient recording off for the whole kernel (torch.set_grad_enabled(False), or a "
    "no_grad() entered by hand) and left it off when it returned: a forward run while it is off builds no graph, "
    "so the backward() after it has nothing to go back through, in the loop's next step and in every cell after "
    "the call. The check switched it back on; a with-block switches it off for the update alone and back on "
    "when the block ends",
    look="the line that turns recording off for the update: where is it turned back on?",
)

GENERATOR_LOOP = Mistake(
    "loop written as a generator",
    None,
    why="the function contains `yield`, which makes it a generator function: calling it runs none of its body "
    "(no forward, no backward, no update) until something iterates over what it returned. The prompt asks for a "
    "function that trains the caller's weights and returns the list of losses",
    look="the yield line: how does the function hand its losses back?",
)


@contextlib.contextmanager
def _torch_settings_kept(what: str) -> Iterator[None]:
    """Run the block, then put back torch's process-wide settings a loop may switch and forget (grad mode, the
    default dtype, anomaly detection), so that nothing is left broken for the next cell; grad mode left off is
    named, since it stops the loop itself from learning."""
    __tracebackhide__ = True
    grad_mode = torch.is_grad_enabled()
    dtype = torch.get_default_dtype()
    anomaly = torch.is_anomaly_enabled()
    try:
        yield
    finally:
        left_off = grad_mode and not torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
        torch.set_default_dtype(dtype)
        torch.autograd.set_detect_anomaly(anomaly)
    if left_off:
        raise mistake_error(
            f"{what} left gradient recording switched off when it returned",
            GRAD_MODE_LEFT_OFF,
            expected="torch.is_grad_enabled() as before the call: True",
            got="False",
        )


def _call_loop(train: Any, args: list, kwargs: dict, what: str) -> tuple[Any, CheckError | None]:
    """The loop's result, or the failure of a loop that raised; a loop left without gradient recording, or
    written as a generator, is named as such."""
    __tracebackhide__ = True
    result = None
    error = None
    with _torch_settings_kept(what):
        try:
            result = run_student(train, *args, what=what, **kwargs)
        except CheckError as err:
            if err.__cause__ is None:  # not written yet, stopped at the time limit, not a function
                raise
            error = err
    if inspect.isgenerator(result):
        raise mistake_error(
            f"{what} returned a generator, without running the loop",
            GENERATOR_LOOP,
            expected="the list of losses, one float per step",
            got=describe(result),
        )
    return result, error


def _run_loop(train: Any, p: _Problem, what: str, calls: list[_LogCall] | None) -> tuple[Any, _Observed]:
    """Run the student's loop on fresh leaves, watching the caller's weights; returns (result, observed)."""
    __tracebackhide__ = True
    expect_function(train, what)
    x = p.x.clone()
    y = p.y.clone()
    w1 = p.w1.clone().requires_grad_()
    w2 = p.w2.clone().requires_grad_()
    arrivals = [0, 0]
    w1_values = []
    for i, w in enumerate((w1, w2)):
        w.register_post_accumulate_grad_hook(functools.partial(_count_arrival, arrivals, w1_values, i))
    versions = (w1._version, w2._version)
    args = [x, y, w1, w2, p.lr, STEPS]
    kwargs = {}
    if p.chunks > 1:
        args.append(p.chunks)
    if calls is not None:
        kwargs["log"] = _log_recorder(calls, w1)
    result, error = _call_loop(train, args, kwargs, what)
    for name, got, start in (("x", x, p.x), ("y", y, p.y)):
        if not torch.equal(got, start):
            raise CheckError(
                f"{what} changed the data {name} in place",
                hint=f"the data belong to the caller, who uses {name} again: the loop only reads it (an in-place "
                "operation, or a write into a view of it, changed it)",
                look=f"every operation on {name} or on a piece of it, and whether it writes into that tensor",
                mistake="data changed in place",
            )
    cause = error.__cause__ if error else None
    if calls is None and p.chunks > 1:
        _judge_log_left_out(error, what)
    seen = _Observed(p, (w1, w2), versions, tuple(arrivals), w1_values, cause)
    if error is not None:
        mistake = first_mistake(seen, _LOOP_MISTAKES)
        if mistake is None:
            raise error
        raise mistake_error(error.message, mistake, got=seen.facts()) from None
    return result, seen


LOG_CALLED_WITHOUT_CHECK = Mistake(
    "log called when not given",
    None,
    why="log is optional: called without it, the loop still called log(t, loss), and log is None then. The "
    "prompt says to call it only if it is given",
    look="the line that calls log: what is log when the caller gives none?",
)


def _judge_log_left_out(error: CheckError | None, what: str) -> None:
    """A loop run without log (its default, None) must not call it."""
    __tracebackhide__ = True
    if error is None or "'NoneType' object is not callable" not in str(error.__cause__):
        return
    raise mistake_error(
        f"{what} called without log raised TypeError: {error.__cause__}",
        LOG_CALLED_WITHOUT_CHECK,
        expected="a loop that runs with log left at its default, None",
    )


def _judge_weights(seen: _Observed, right: _Run) -> None:
    """The caller's w1 and w2 must end where correct gradient descent leaves them."""
    __tracebackhide__ = True
    if all(_close(w, r) for w, r in zip(seen.weights, right.final)):
        return
    mistake = first_mistake(seen, _LOOP_MISTAKES)
    untouched = [name for i, name in enumerate(("w1", "w2")) if seen.untouched(i)]
    if untouched:
        message = f"the caller's {untouched[0]} is exactly as it was before training"
        if len(untouched) == 2:
            message = "the caller's w1 and w2 are exactly as they were before training"
        expected = f"w1 and w2 changed by {STEPS} steps of gradient descent"
        if mistake is None:
            raise CheckError(message, expected=expected, got=seen.facts())
        raise mistake_error(message, mistake, expected=expected, got=seen.facts())
    if mistake is None:
        _judge_step_size(seen, right)
    for name, got, want in zip(("w1", "w2"), seen.weights, right.final):
        try:
            compare(f"the caller's {name} after training", got.detach(), want, rtol=1e-9, atol=1e-12)
        except CheckError as err:
            if mistake is None:
                raise
            raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None


def _judge_step_size(seen: _Observed, right: _Run) -> None:
    """The first update must move w1 by learning_rate times its gradient (seen at the second step's backward)."""
    __tracebackhide__ = True
    chunks = seen.problem.chunks
    if len(seen.w1_values) != STEPS * chunks:
        return
    moved = seen.w1_values[chunks] - seen.problem.w1
    grad = right.partial[0][-1]
    factor = -float((moved * grad).sum() / (grad * grad).sum())
    if abs(factor - LR) <= 1e-6 * LR or not torch.allclose(moved, -factor * grad, rtol=1e-6, atol=1e-12):
        return
    raise CheckError(
        "the caller's w1 and w2 after training differ from a correct run",
        expected=f"a first update of learning_rate ({LR:g}) times the gradient",
        got=f"the first update moved w1 by {factor / LR:.3g} x learning_rate x its gradient",
        hint="the update's step size is not the learning_rate the loop was given: which step size does it use?",
        look="the update lines: what multiplies the gradient besides learning_rate, and how often each line runs",
        mistake="step size is not learning_rate",
    )


def _loss_mistakes(run: _Run, p: _Problem) -> list[Mistake]:
    """Typical wrong lists of losses, as tensors of one loss per step."""
    after = run.losses[1:] + [run.final_loss(p)]
    mistakes = [
        Mistake(
            "loss after the update",
            torch.tensor(after, dtype=torch.float64),
            why="each loss was computed after the step's update: a step's loss is the one its gradient came from",
            look="the line that records each step's loss, and where it sits relative to the update",
        )
    ]
    if p.chunks > 1:
        last = [losses[-1] for losses in run.chunk_losses]
        mean = [loss / p.chunks for loss in run.losses]
        mistakes.append(
            Mistake(
                "last chunk's loss",
                torch.tensor(last, dtype=torch.float64),
                why="each loss is the last chunk's alone: a step's loss adds up the losses of all its chunks",
                look="the number recorded for each step, and which chunks it comes from",
            )
        )
        mistakes.append(
            Mistake(
                "chunk losses averaged",
                torch.tensor(mean, dtype=torch.float64),
                why="each loss is the mean of the chunks' losses: with the lecture's summed loss it is their sum",
                look="the number recorded for each step: what is done to the chunks' losses",
            )
        )
    return mistakes


def _numbers(value: Any, what: str) -> list[float]:
    """A list, tuple, 1-d tensor or array of numbers (or 0-d tensors) as plain floats."""
    __tracebackhide__ = True
    if isinstance(value, torch.Tensor):
        tensor = plain_tensor(value)
        if tensor.device.type == "meta":
            raise CheckError(f"{what} are on the meta device, which holds no values", usage=True)
        if tensor.dim() == 1:
            value = tensor.detach().cpu().tolist()
    elif type(value).__module__ == "numpy" and getattr(value, "ndim", 0) == 1:
        value = value.tolist()
    items = plain(value)
    if not isinstance(items, tuple):
        raise CheckError(
            f"{what} must be a list of numbers, one per step",
            got=describe(value),
            hint="the function hands back nothing: what does its last line return?"
            if value is None
            else "a list of one number per step is asked: where does the loop collect each step's number?",
            usage=True,
        )
    numbers = []
    for i, item in enumerate(items):
        numbers.append(float(as_number(item, f"item {i} of {what}")))
    return numbers


LOSSES_KEEP_GRAPHS = Mistake(
    "losses kept with their graphs",
    None,
    why="the losses returned are tensors that still require grad: each keeps the whole graph of its step's forward "
    "pass (every activation saved for backward()) alive for as long as the list lives, so the memory grows with "
    "every step, the very memory 03.6's chunks are meant to save. The losses are plain numbers, one float per step",
    look="how each step's loss is recorded (and, with chunks, added up): a tensor, or a plain number?",
)

WEIGHTS_RETURNED = Mistake(
    "weights returned with the losses",
    None,
    why="the function returned weight tensors along with the losses: the caller's w1 and w2 are the tensors the "
    "loop trains, so the caller already holds them, and the function returns the losses alone, one float per step",
    look="the return line",
)


def _judge_nothing_but_losses(result: Any, p: _Problem, what: str) -> None:
    """The result must not carry the weights: (losses, w1, w2) is not a list of losses."""
    __tracebackhide__ = True
    if not isinstance(result, (list, tuple)):
        return
    shapes = (p.w1.shape, p.w2.shape)
    weights = [item for item in result if isinstance(item, torch.Tensor) and item.shape in shapes]
    if not weights:
        return
    raise mistake_error(
        f"{what} returned {len(result)} things, {len(weights)} of them shaped like w1 or w2",
        WEIGHTS_RETURNED,
        expected="the list of losses, one float per step",
        got=describe(result),
    )


def _requires_grad(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _judge_losses_detached(result: Any, what: str) -> None:
    """The losses must be numbers (or tensors without a graph), not tensors that hold the steps' graphs."""
    __tracebackhide__ = True
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    kept = [i for i, item in enumerate(items) if _requires_grad(item)]
    if not kept:
        return
    raise mistake_error(
        f"{what} returned {len(kept)} loss(es) that require grad",
        LOSSES_KEEP_GRAPHS,
        expected="one float per step",
        got=describe(items[kept[0]]),
    )


def _stored_dtype(result: Any, losses: list[float]) -> torch.dtype:
    """The precision the losses were kept in, to judge them to: torch.tensor(losses) stores float32 by default, and
    so do a float32 running total (torch.tensor(0.0), torch.zeros(())) and its .item(), whose every loss is then a
    float32 number (thirteenth audit: those were told "one loss per step ... before the update")."""
    if isinstance(result, torch.Tensor) and result.is_floating_point():
        return result.dtype
    items = list(result) if isinstance(result, (list, tuple)) else []
    if any(isinstance(item, torch.Tensor) and item.dtype in (torch.float32, torch.float16) for item in items):
        return torch.float32
    in_float32 = torch.tensor(losses, dtype=torch.float64).float().double()
    if losses and in_float32.tolist() == losses:
        return torch.float32
    return torch.float64


def _plain_losses(result: Any) -> Any:
    """The losses with tensor subclasses as plain tensors (their overrides cannot answer for them), in a list
    where they came in a list or a tuple; anything else as it came."""
    if isinstance(result, torch.Tensor):
        return plain_tensor(result)
    if isinstance(result, (list, tuple)):
        return [plain_tensor(item) if isinstance(item, torch.Tensor) else item for item in result]
    return result


def _judge_losses(result: Any, right: _Run, p: _Problem, what: str) -> None:
    """One loss per step: the whole batch's loss before the step's update."""
    __tracebackhide__ = True
    result = _plain_losses(result)
    _judge_nothing_but_losses(result, p, what)
    _judge_losses_detached(result, what)
    losses = _numbers(result, f"the losses {what} returned")
    if len(losses) == STEPS * p.chunks and p.chunks > 1:
        raise CheckError(
            f"{what} returned {len(losses)} losses",
            expected=f"one per step: {STEPS}",
            hint="one loss per chunk was returned: a step's loss adds up its chunks' losses",
            look="the line that appends to the losses, and which loop it sits in",
            mistake="one loss per chunk",
        )
    if len(losses) != STEPS:
        raise CheckError(f"{what} returned {len(losses)} losses", expected=f"one per step: {STEPS}")
    stored = _stored_dtype(result, losses)
    compare(
        "the list of losses returned",
        torch.tensor(losses, dtype=torch.float64),
        torch.tensor(right.losses, dtype=torch.float64),
        rtol=max(1e-9, 4 * torch.finfo(stored).eps),
        atol=0.0,
        mistakes=_loss_mistakes(right, p),
        hint="one loss per step: the whole batch's loss, computed before the update",
    )


def _judge_chunks(seen: _Observed) -> None:
    """Exercise 03.6: .grad adds up one backward() per chunk."""
    __tracebackhide__ = True
    count = seen.arrivals[0]
    if count == 0:
        raise CheckError(
            "backward() never added into the caller's w1.grad, though the weights are right",
            expected=f"w1.grad filled by {seen.problem.chunks} backward() calls per step",
            hint="the gradients were computed another way (torch.autograd.grad?); log, and TensorBoard's "
            "histograms, read them from .grad",
            look="the call that computes the gradients",
            mistake="gradients never in .grad",
        )
    if count < STEPS * seen.problem.chunks:
        raise CheckError(
            f"backward() ran {count} times in {STEPS} steps",
            expected=f"one backward() per chunk: {seen.problem.chunks} per step, {STEPS * seen.problem.chunks} in all",
            hint="backward() ran fewer times than there are chunks: each chunk's loss needs its own backward(), "
            "so that .grad adds up the chunks' gradients",
            look="the loop over the chunks, and where backward() is called",
            mistake="no chunks",
        )
    if count > STEPS * seen.problem.chunks:
        raise CheckError(
            f"backward() ran {count} times in {STEPS} steps",
            expected=f"one backward() per chunk: {seen.problem.chunks} per step, {STEPS * seen.problem.chunks} in all",
            hint=f"the batch of {len(seen.problem.x)} rows was cut into more pieces than chunks={seen.problem.chunks}: "
            "does the function you cut it with take the number of pieces, or the size of each piece?",
            look="the call that cuts x and y into pieces",
            mistake="more pieces than chunks",
        )


def _judge_log_call(k: int, call: _LogCall, right: _Run, p: _Problem) -> None:
    """Call k of log must come after the step's backward() calls and before its update."""
    __tracebackhide__ = True
    where = f"at log's call {k + 1} of {STEPS}"
    after = right.before[k + 1][0] if k + 1 < STEPS else right.final[0]
    if not _close(call.w1, right.before[k][0]):
        if _close(call.w1, after):
            raise CheckError(
                f"w1 {where} is already the updated weight",
                expected="log called before the update",
                hint="log ran after the update: it should see the gradients the update is about to use",
                look="the call of log, and where it sits relative to the update",
                mistake="log after the update",
            )
        raise CheckError(f"w1 {where} is not the weight of that step", expected="log called once per step")
    if call.grad_w1 is None or not call.grad_w1.any():
        raise CheckError(
            f"w1.grad {where} holds no gradient",
            expected="this step's gradient, added up over all chunks",
            got="None" if call.grad_w1 is None else "zeros",
            hint="log ran before the step's backward() calls had filled .grad",
            look="the call of log, and where it sits relative to the loop over the chunks",
            mistake="log before the backward calls",
        )
    for partial in right.partial[k][:-1]:
        if _close(call.grad_w1, partial):
            raise CheckError(
                f"w1.grad {where} holds the gradient of only some of the chunks",
                hint="log ran before the last chunk's backward()",
                look="the call of log, and where it sits relative to the loop over the chunks",
                mistake="log before all chunks",
            )
    compare(f"w1.grad {where}", call.grad_w1, right.partial[k][-1], rtol=1e-9, atol=1e-12)


def _judge_log(calls: list[_LogCall], right: _Run, p: _Problem) -> None:
    """log(t, loss) once per step, t counting the steps, loss the step's loss, at the right moment."""
    __tracebackhide__ = True
    if not calls:
        raise CheckError(
            "log was never called",
            expected=f"log(t, loss) once per step: {STEPS} calls",
            hint="the check gave the loop a log, and the loop never called it: the prompt asks for log(t, loss) once "
            "per step whenever log is given",
            look="the call of log, and the condition around it",
            mistake="log never called",
        )
    if len(calls) == STEPS * p.chunks:
        raise CheckError(
            f"log was called {len(calls)} times",
            expected=f"once per step: {STEPS} calls",
            hint="log ran once per chunk, inside the loop over chunks",
            look="the call of log, and which loop it sits in",
            mistake="log once per chunk",
        )
    if len(calls) != STEPS:
        raise CheckError(f"log was called {len(calls)} times", expected=f"once per step: {STEPS} calls")
    ts = _numbers([call.t for call in calls], "the t values passed to log")
    losses = _numbers([call.loss for call in calls], "the losses passed to log")
    if all(abs(t - loss) <= 1e-9 * abs(loss) for t, loss in zip(ts, right.losses)):
        raise CheckError(
            "the t passed to log is the step's loss",
            hint="log(t, loss) takes the step first, then the loss",
            look="the call of log: the order of its arguments",
            mistake="log arguments swapped",
        )
    if ts not in ([float(t) for t in range(STEPS)], [float(t) for t in range(1, STEPS + 1)]):
        raise CheckError(
            "the t passed to log does not count the steps",
            expected=f"0, 1, ..., {STEPS - 1} (or 1, 2, ..., {STEPS})",
            got=", ".join(f"{t:g}" for t in ts),
        )
    for k, call in enumerate(calls):
        _judge_log_call(k, call, right, p)
    # a loss handed over as a tensor (torch.tensor(total) is float32), or a float32 total's .item(), is judged to
    # its own precision
    dtypes = [c.loss.dtype for c in calls if isinstance(c.loss, torch.Tensor) and c.loss.is_floating_point()]
    dtypes.append(_stored_dtype(losses, losses))
    coarsest = max(torch.finfo(d).eps for d in dtypes)
    compare(
        "the list of losses passed to log",
        torch.tensor(losses, dtype=torch.float64),
        torch.tensor(right.losses, dtype=torch.float64),
        rtol=max(1e-9, 4 * coarsest),
        atol=0.0,
        mistakes=_loss_mistakes(right, p),
    )


#: A second learning rate, unlike LR: a loop must step by the rate it is given.
OTHER_LR = 3e-3


def _judge_rate_followed(train: Any, what: str, chunks: int) -> None:
    """Run the loop again with learning_rate=OTHER_LR: the caller's weights must end where that rate leads."""
    __tracebackhide__ = True
    p = _problem(303, chunks, OTHER_LR)
    _, seen = _run_loop(train, p, what, None)
    if all(_close(w, r) for w, r in zip(seen.weights, _descend(p).final)):
        return
    first_rate = _descend(_problem(303, chunks, LR)).final
    fixed = all(_close(w, r) for w, r in zip(seen.weights, first_rate))
    raise CheckError(
        f"with learning_rate={OTHER_LR:g}, the caller's w1 and w2 do not end where {STEPS} steps at that rate lead",
        expected=f"the weights after {STEPS} steps of learning_rate={OTHER_LR:g}",
        got=f"the weights after {STEPS} steps of learning_rate={LR:g}" if fixed else "other weights",
        hint=f"the loop passed with learning_rate={LR:g} but does not follow another value: the step size is "
        "written into the loop instead of taken from its learning_rate argument",
        look="the update lines, and the number each multiplies the gradient by",
        mistake="learning rate fixed",
    )


@exercise("03.5", "why did the network not learn?")
def check_fixed_training(train: Any) -> None:
    """Check the repaired loop ``train(x, y, w1, w2, learning_rate, steps) -> losses``."""
    what = "train_fixed(x, y, w1, w2, learning_rate, steps)"
    p = _problem(301, 1)
    result, seen = _run_loop(train, p, f"your {what}", None)
    right = _descend(p)
    _judge_weights(seen, right)
    _judge_losses(result, right, p, f"your {what}")
    _judge_rate_followed(train, f"your {what}", 1)
    passed(f"{what}: the caller's w1 and w2 learn; weights and losses match a correct run over {STEPS} steps")


#: A second number of chunks, unlike the notebook's 4: a loop must cut the batch into as many pieces as it is told.
OTHER_CHUNKS = 3


def _judge_chunks_followed(train: Any, what: str) -> None:
    """Run the loop again with chunks=OTHER_CHUNKS: one backward() per piece, as many pieces as chunks says."""
    __tracebackhide__ = True
    p = _problem(302, OTHER_CHUNKS)
    _, seen = _run_loop(train, p, what, None)  # and without log, which is optional
    count = seen.arrivals[0]
    if count == STEPS * OTHER_CHUNKS:
        return
    raise CheckError(
        f"with chunks={OTHER_CHUNKS}, backward() ran {count} times in {STEPS} steps",
        expected=f"one backward() per chunk: {OTHER_CHUNKS} per step, {STEPS * OTHER_CHUNKS} in all",
        got=f"{count / STEPS:g} per step, as with chunks={CHUNKS}" if count == STEPS * CHUNKS else f"{count}",
        hint=f"the loop passed with chunks={CHUNKS} but does not follow another value: the number of pieces is "
        "written into the loop instead of taken from its chunks argument",
        look="the call that cuts x and y into pieces, and what it is told about their number",
        mistake="number of chunks fixed",
    )


@exercise("03.6", "one update from several chunks")
def check_accumulated_training(train: Any) -> None:
    """Check ``train(x, y, w1, w2, learning_rate, steps, chunks, log=None) -> losses``."""
    what = "train_accumulated(...)"
    p = _problem(300, CHUNKS)
    calls: list[_LogCall] = []
    result, seen = _run_loop(train, p, f"your {what}", calls)
    right = _descend(p)
    _judge_weights(seen, right)
    _judge_losses(result, right, p, f"your {what}")
    _judge_chunks(seen)
    _judge_log(calls, right, p)
    _judge_chunks_followed(train, f"your {what}")
    _judge_rate_followed(train, f"your {what}", CHUNKS)
    passed(
        f"{what}: {CHUNKS} chunks add up to the full batch's gradient; weights and losses match a correct run "
        f"over {STEPS} steps"
    )

"""Checks of notebook 02 against autograd at check time: layer backwards, two-layer gradients, a gradient
checker. The student's code runs under torch.no_grad() with autograd calls refused: the rule is "by hand".

Example:
    >>> f = _Recorder(torch.zeros(2, dtype=torch.float64))
    >>> _ = f(torch.tensor([1e-6, 0.0], dtype=torch.float64))
    >>> f.summary()["eps"]
    1e-06
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..data import lecture_data, lecture_weights
from .core import (
    CheckError,
    Mistake,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_function,
    expect_tensor,
    mistake_error,
    passed,
    read_prediction,
    rel_error,
    run_cases,
    run_student,
)
from .references import lecture_loss
from .values import plain_tensor, under_a_transform

__all__ = [
    "check_linear_layer",
    "check_relu_layer",
    "check_loss_and_grads",
    "check_numeric_grad",
    "check_lr_prediction",
]

TOL = 1e-8


def _randn(seed: int, *shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Seeded float64 normal tensors of the given shapes (drawn on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes)


def _vjp(f: Callable, inputs: tuple, dout: torch.Tensor | None = None) -> tuple:
    """Autograd's (f(*inputs), *gradients of sum(f * dout)) on detached copies of the inputs."""
    with torch.enable_grad():
        leaves = tuple(t.detach().clone().requires_grad_() for t in inputs)
        out = f(*leaves)
        target = out if dout is None else out * dout
        grads = torch.autograd.grad(target.sum(), leaves)
    return (out.detach(), *grads)


def two_layer_grads(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple:
    """Autograd's (grad_w1, grad_w2) of the lecture's loss."""
    result = _vjp(functools.partial(lecture_loss, x, y), (w1, w2))
    return result[1], result[2]


# --------------------------------------------------------------------------- the rule: gradients by hand


class _UsedAutograd(BaseException):
    """Raised inside the student's code when it calls autograd (``except Exception`` cannot swallow it)."""


#: The autograd calls the student's code made in the check that runs now (kept even if it swallowed the error).
_AUTOGRAD_CALLS: list[str] = []


#: What autograd's calls are named: reverse mode (.backward(), torch.autograd.grad, and what is built on them:
#: torch.func.grad, vjp, jacrev, torch.autograd.functional), and forward mode, whose dual numbers are made by
#: torch._make_dual (torch.func.jvp and jacfwd, torch.autograd.forward_ad).
AUTOGRAD_NAMES = ("backward", "grad", "_make_dual")


class _NoAutograd(TorchFunctionMode):
    """Refuses .backward(), torch.autograd.grad and anything built on them (torch.func.grad, jacobian), and
    forward-mode autograd (torch.func.jvp, jacfwd, torch.autograd.forward_ad.make_dual)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if getattr(func, "__name__", "") in AUTOGRAD_NAMES:
            call = f"{getattr(func, '__module__', 'torch')}.{func.__name__}"
            if func.__name__ == "_make_dual":
                call = f"forward mode: torch.func.jvp, jacfwd or forward_ad, which make dual numbers with {call}"
            _AUTOGRAD_CALLS.append(call)
            raise _UsedAutograd(call)
        return func(*args, **(kwargs or {}))


def _by_hand(fn: Callable) -> Callable:
    """``fn`` run under torch.no_grad() with autograd calls refused (the signature stays ``fn``'s); tensor
    subclasses it returns come back as plain tensors, whose overrides cannot answer for them."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad(), _NoAutograd():
            result = fn(*args, **kwargs)
        if type(result) in (tuple, list):  # a namedtuple or any other class keeps its own type
            return type(result)(_as_plain(value) for value in result)
        return _as_plain(result)

    return run


def _rule_broken(what: str, call: str, instead: str) -> CheckError:
    return CheckError(
        f"{what} called autograd ({call}): this exercise computes the gradients by hand, so the check "
        "runs it under torch.no_grad() with autograd switched off",
        hint=instead,
        mistake="used autograd",
    )


@contextlib.contextmanager
def _autograd_refused(what: str, instead: str) -> Iterator[None]:
    """Turn an autograd call caught by :class:`_NoAutograd` into the sentence of the rule, also where the
    student's code caught the refusal itself and failed (or passed) afterwards."""
    _AUTOGRAD_CALLS.clear()
    try:
        yield
    except _UsedAutograd as used:
        raise _rule_broken(what, str(used), instead) from None
    except CheckError:
        if not _AUTOGRAD_CALLS:
            raise
        raise _rule_broken(what, _AUTOGRAD_CALLS[0], instead) from None
    if _AUTOGRAD_CALLS:
        raise _rule_broken(what, _AUTOGRAD_CALLS[0], instead)


# --------------------------------------------------------------------------- 02.1 and 02.2: layers


def _not_finite(result: Any) -> bool:
    """Does the answer (one tensor or a tuple of them) hold a NaN or an inf?"""
    values = result if isinstance(result, (tuple, list)) else (result,)
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return True
    return False


#: The cases are finite, so a NaN or inf in the answer was made by the student's code.
NOT_FINITE = Mistake(
    "NaN or inf made",
    _not_finite,
    why="the inputs hold no NaN or inf, so an operation of yours made them: a division by zero, a log, an overflow",
    look="print the intermediate tensors of one case and find the first that is not finite",
)


def _first_parameter(fn: Any) -> str:
    """The name of ``fn``'s first parameter ("its argument" where it has none we can read)."""
    with contextlib.suppress(TypeError, ValueError):
        for parameter in inspect.signature(fn).parameters.values():
            return parameter.name
    return "its argument"


def _expect_layer(forward: Any, backward: Any, name: str) -> None:
    __tracebackhide__ = True
    if forward is None and backward is None:  # what the student edition holds until the cell is written
        raise CheckError(
            f"{name}_forward and {name}_backward are not written yet: define both in the cell above and run it",
            usage=True,
        )
    expect_function(forward, f"your {name}_forward")
    expect_function(backward, f"your {name}_backward")


REDUCED_INSTEAD = Mistake(
    "a reduction, not an element-wise max",
    None,
    why="torch.max(h, 0) (like torch.min and torch.median with a dimension) reduces h along dimension 0 and returns "
    "its largest values with their indices; the ReLU compares every entry of h with 0 on its own and keeps h's shape",
    look="the operation that computes the output in relu_forward",
)


def _holds_tensors(value: Any) -> bool:
    """Is ``value`` a container of tensors, as a cache is (a tuple or a list of them), rather than an output?"""
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (tuple, list)) and any(isinstance(item, torch.Tensor) for item in value)


def _as_plain(value: Any) -> Any:
    """A tensor subclass as a plain tensor (its overrides cannot answer for it); anything else as it came."""
    return plain_tensor(value) if isinstance(value, torch.Tensor) else value


def _split_forward(result: Any, name: str) -> tuple[Any, Any]:
    """(out, cache) from what a forward returned, or a sentence saying what it must return."""
    __tracebackhide__ = True
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckError(
            f"{name}_forward must return two things, (out, cache)",
            got=describe(result),
            hint="return the output first, then whatever the backward will need",
            usage=True,
        )
    out, cache = result
    if isinstance(out, tuple) and hasattr(out, "values") and hasattr(out, "indices"):  # torch.max(h, 0) and kin
        raise mistake_error(
            f"the output of {name}_forward is a (values, indices) pair, not a tensor",
            REDUCED_INSTEAD,
            expected="a tensor of h's shape",
            got=f"({describe(out.values)}, {describe(out.indices)})",
        )
    if _holds_tensors(out) and isinstance(cache, torch.Tensor):
        raise CheckError(
            f"{name}_forward returned (cache, out): the output must come first",
            got=f"({describe(out)}, {describe(cache)})",
            usage=True,
        )
    return out, cache


GRADIENT_IN_A_TUPLE = Mistake(
    "gradient wrapped in a tuple",
    None,
    why="a backward returns one gradient per input of its forward, and this forward has one input: the prompt asks "
    "for that gradient itself, a tensor, while a tuple or list around it stops the next step (02.3 multiplies it "
    "with a matrix, which a tuple cannot be)",
    look="the return line of the backward: what is around the gradient?",
)


def _split_backward(result: Any, name: str, outputs: tuple[str, ...]) -> tuple:
    """The gradients a backward returned, one per input, or a sentence saying what it must return."""
    __tracebackhide__ = True
    if len(outputs) == 1 and not _holds_tensors(result):
        return (result,)  # one value (a nested list of numbers, a number, None): the comparison names it
    if len(outputs) == 1 and len(result) == 1:
        raise mistake_error(
            f"{name}_backward(dout, cache) returned its gradient inside a {type(result).__name__}",
            GRADIENT_IN_A_TUPLE,
            expected=f"{outputs[0]}, a tensor",
            got=f"a {type(result).__name__} holding one {describe(result[0])}",
        )
    if isinstance(result, (tuple, list)) and len(result) == len(outputs):
        return tuple(result)
    wanted = outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})"
    raise CheckError(
        f"{name}_backward(dout, cache) must return {wanted}",
        got=describe(result),
        hint="a missing `return`" if result is None else f"return one gradient per input of the forward: {wanted}",
        usage=True,
    )


INPUT_CHANGED = Mistake(
    "layer changed its input",
    None,
    why="the gradients are right, but the layer wrote into a tensor it was given (an operation whose name ends in "
    "_, such as t_ or mul_, or an assignment into it), and the cache holds those very tensors: in 02.3 they are "
    "the data x and the weights, so every call would change them",
    look="every in-place operation in the forward and the backward: which tensor does it write into?",
)


class _Layer:
    """The student's forward, then their backward on its cache, as one function of a case's tensors;
    it notes whether the forward changed its input in place. ``kept``: the names of the inputs that must
    come back unchanged after the backward (the linear layer's x and w)."""

    def __init__(
        self, name: str, forward: Any, backward: Any, grads: tuple[str, ...], kept: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self.forward = _by_hand(forward)
        self.backward = _by_hand(backward)
        self.grads = grads
        self.kept = kept
        self.changed: str | None = None

    def __call__(self, *args: torch.Tensor) -> tuple:
        inputs = args[:-1]
        dout = args[-1]
        before = [a.clone() for a in inputs]
        result = run_student(self.forward, *inputs, what=f"your {self.name}_forward")
        out, cache = _split_forward(result, self.name)
        if not torch.equal(inputs[0], before[0]):
            self.changed = _first_parameter(self.forward)
        if isinstance(out, torch.Tensor):
            out = plain_tensor(out).clone()  # as it was before the backward ran (a backward may write into its cache)
        grads = run_student(self.backward, dout, cache, what=f"your {self.name}_backward(dout, cache)")
        self._judge_kept(inputs, before)
        return (out, *[_as_plain(grad) for grad in _split_backward(grads, self.name, self.grads)])

    def _judge_kept(self, inputs: tuple, before: list) -> None:
        """The inputs named in ``kept`` must hold what they held before the forward ran."""
        __tracebackhide__ = True
        for name, now, then in zip(self.kept, inputs, before):
            if now.shape == then.shape and torch.equal(now, then):
                continue
            got = describe(now)
            if now.shape == then.shape:
                got = f"{name} changed by up to {_largest_change(now, then)}"
            raise mistake_error(
                f"after your {self.name}_forward and {self.name}_backward, the {name} passed to the forward is changed",
                INPUT_CHANGED,
                expected=f"{name} as it was passed in, {describe(then)}",
                got=got,
            )


STATE_OUTSIDE_THE_CACHE = Mistake(
    "state kept outside the cache",
    None,
    why="each forward-then-backward alone is right, but after a second forward the backward of the first call "
    "answers with the second call's tensors: what the backward needs is kept outside the cache (a global "
    "variable, an attribute), and the next forward overwrites it. A network that uses the layer twice runs both "
    "forwards before either backward (02.3 does so with the linear layer), so its first layer would get the "
    "second one's gradients",
    look="where the forward puts what the backward needs, and where the backward reads it from",
)


def _two_forwards_then_backwards(layer: _Layer, cases: list, reference: Callable) -> None:
    """As a network runs a layer twice: the forwards of two cases, then their backwards in reverse order, each on
    its own cache; the first case's gradients must come out as when it ran alone."""
    __tracebackhide__ = True
    first, second = cases[0], cases[1]
    what = f"your {layer.name} layer"
    try:
        _, cache_one = _split_forward(
            run_student(layer.forward, *[a.clone() for a in first[:-1]], what=what), layer.name
        )
        _, cache_two = _split_forward(
            run_student(layer.forward, *[a.clone() for a in second[:-1]], what=what), layer.name
        )
        run_student(layer.backward, second[-1].clone(), cache_two, what=what)
        got = _split_backward(
            run_student(layer.backward, first[-1].clone(), cache_one, what=what), layer.name, layer.grads
        )
    except CheckError as err:
        if err.usage:
            raise
        got = (err.message,)
    expected = reference(*first)[1:]
    got = tuple(_as_plain(value) for value in got)
    for name, value, ref in zip(layer.grads, got, expected):
        if isinstance(value, torch.Tensor) and value.shape == ref.shape and rel_error(value, ref) < 1e-6:
            continue
        raise mistake_error(
            f"{what}: after a second forward, the backward on the first forward's cache gives another {name}",
            STATE_OUTSIDE_THE_CACHE,
            expected=f"the {name} of the first case, as when it ran alone",
            got=describe(value) if isinstance(value, torch.Tensor) else str(value),
        )


def _largest_change(now: torch.Tensor, then: torch.Tensor) -> str:
    return f"{float((now.double() - then.double()).abs().max()):.3g}"


def _check_layer(layer: _Layer, cases: list, reference: Callable, mistakes: Callable) -> None:
    """Run a layer over its cases; a wrong answer after the forward changed its input says so."""
    __tracebackhide__ = True
    try:
        with _autograd_refused(f"your {layer.name} layer", "derive the backward from the chain rule and the shapes"):
            run_cases(
                layer,
                cases,
                reference,
                what=f"your {layer.name} layer",
                outputs=("out", *layer.grads),
                mistakes=mistakes,
                rtol=TOL,
            )
    except CheckError as err:
        if layer.changed is None or err.usage:
            raise
        raise CheckError(
            f"{err.message}; your {layer.name}_forward also changed its argument {layer.changed} in place",
            expected=err.expected,
            got=err.got,
            hint=f"after the forward, {layer.changed} no longer holds what was passed in (for the ReLU: it holds "
            f"max({layer.changed}, 0)), so a cache that refers to it lacks the values the backward needs",
            look=f"{layer.name}_forward: every line that writes into {layer.changed}",
            mistake="forward changed its input",
        ) from None


def _linear_reference(x: torch.Tensor, w: torch.Tensor, dout: torch.Tensor) -> tuple:
    return _vjp(torch.mm, (x, w), dout)


def _linear_mistakes(x: torch.Tensor, w: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 02.1 for this case."""
    mistakes = [
        NOT_FINITE,
        Mistake(
            "dw transposed",
            (None, None, dout.t() @ x),
            why="dw came out transposed: a weight's gradient has the weight's shape (D, K)",
            look="the order of the factors in dw's product, and which one is transposed",
        ),
        Mistake(
            "dx transposed",
            (None, (dout @ w.t()).t(), None),
            why="dx came out transposed: an input's gradient has the input's shape (N, D)",
            look="the order of the factors in dx's product, and which one is transposed",
        ),
        Mistake(
            "dx and dw swapped",
            (None, x.t() @ dout, dout @ w.t()),
            why="the two gradients came back in the other order: the backward returns (dx, dw)",
            look="the return line",
        ),
        Mistake(
            "out used instead of x",
            (None, None, (x @ w).t() @ dout),
            why="dw was built from the layer's output; its factor is the layer's input x",
            look="what the cache holds, and which tensor dw multiplies dout with",
        ),
        Mistake(
            "dw averaged over the batch",
            (None, None, x.t() @ dout / x.shape[0]),
            why="dw was divided by the number of rows: the gradient of out = x @ w sums the rows' contributions, "
            "and any averaging belongs to the loss, which the upstream gradient dout already carries",
            look="the line that computes dw",
        ),
    ]
    first, last = _linear_shape_mistakes(x, w, dout)
    return [*first, *mistakes, *last, *_linear_factor_mistakes(x, w, dout), *_linear_upstream_mistakes(x, w, dout)]


def _linear_shape_mistakes(x: torch.Tensor, w: torch.Tensor, dout: torch.Tensor) -> tuple[list, list]:
    """The mistakes of 02.1 that only some shapes let run (a square w, D == K): those matched before the others,
    and those after them."""
    first, last = [], []
    if x.shape[1] == dout.shape[1]:  # only D == K lets x @ dout.T run at all (case 1: it comes first)
        mistake = Mistake(
            "dw transposes dout instead of x",
            (None, None, x @ dout.t()),
            why="dw multiplies x by dout transposed, which gives an (N, N) matrix where dw has w's shape (D, K): "
            "the product must add up over the samples, the axis x and dout share; which factor has to be "
            "transposed for that?",
            look="the order of the factors in dw's product, and which one is transposed",
        )
        last.append(mistake)
    if dout.shape == x.shape:  # only D == K lets dout itself pass for dx (case 1: it comes first)
        mistake = Mistake(
            "dx is dout",
            (None, dout, None),
            why="dx is dout itself, passed through unchanged: it has x's shape only because D == K here. x reaches "
            "out only through the product with w, so the chain rule brings w into dx; does the cache the forward "
            "returns hold everything the backward needs?",
            look="what linear_forward puts in its cache, and the line that computes dx",
        )
        first.insert(0, mistake)
    if w.shape[0] == w.shape[1]:  # only a square w lets the forward's x @ w.T run at all (thirteenth audit)
        mistake = Mistake(
            "w transposed in the forward",
            (x @ w.t(), None, None),
            why="out is x @ w.T, which runs only because this w is square: that is nn.Linear's convention, whose "
            "weight is stored (out_features, in_features), while this exercise's w is (D, K), one column per "
            "output",
            look="the product in linear_forward",
        )
        first.insert(0, mistake)
    if w.shape[0] == w.shape[1]:  # only a square w lets the product run without the transpose
        mistake = Mistake(
            "dx without transpose",
            (None, dout @ w, None),
            why="dx multiplies dout by w as it stands, which runs only because this w is square: dx must have x's "
            "shape (N, D), and its product must add up over K, the axis that dout and w share. Over which axis of w "
            "does it add up now?",
            look="the factor w in dx's product",
        )
        first.insert(0, mistake)
    return first, last


def _linear_factor_mistakes(x: torch.Tensor, w: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """Right products with a stray sign or factor 2, and dw summed down to a vector (round 12 of the audit)."""
    dx = dout @ w.t()
    dw = x.t() @ dout
    return [
        Mistake(
            "dx negated",
            (None, -dx, None),
            why="dx has the right size everywhere but the opposite sign: out = x @ w has no minus sign, so neither "
            "has its local derivative (a minus belongs to the update step, not to the gradient)",
            look="the sign of dx's line",
        ),
        Mistake(
            "dw negated",
            (None, None, -dw),
            why="dw has the right size everywhere but the opposite sign: out = x @ w has no minus sign, so neither "
            "has its local derivative (a minus belongs to the update step, not to the gradient)",
            look="the sign of dw's line",
        ),
        Mistake(
            "dx doubled",
            (None, 2 * dx, None),
            why="dx is twice the gradient: a factor 2 belongs to a square's derivative (the loss's), and out = x @ w "
            "squares nothing; dout already carries whatever the loss contributes",
            look="the constants in dx's line",
        ),
        Mistake(
            "dw doubled",
            (None, None, 2 * dw),
            why="dw is twice the gradient: a factor 2 belongs to a square's derivative (the loss's), and out = x @ w "
            "squares nothing; dout already carries whatever the loss contributes",
            look="the constants in dw's line",
        ),
        Mistake(
            "dx reduced to a vector",
            (None, dx.sum(0), None),
            why="dx was summed over the samples down to one vector, as a bias's gradient would be: every sample has "
            "its own input, so dx has one row per sample, the shape (N, D) of x",
            look="a .sum() or .mean() in dx's line",
        ),
        Mistake(
            "dw reduced to a vector",
            (None, None, dw.sum(0)),
            why="dw was summed down to one vector: a weight's gradient has one entry per weight, the shape (D, K) of w",
            look="a .sum() or .mean() in dw's line",
        ),
    ]


def _linear_upstream_mistakes(x: torch.Tensor, w: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """Local derivatives alone: the upstream gradient replaced by ones (sixteenth audit)."""
    ones = torch.ones_like(dout)
    return [
        Mistake(
            "dx without dout",
            (None, ones @ w.t(), None),
            why="dx is the local derivative alone, as if every entry of dout were 1: the chain rule combines the "
            "local derivative with the upstream gradient dout, which the backward receives for that",
            look="where dout enters dx's line",
        ),
        Mistake(
            "dw without dout",
            (None, None, x.t() @ ones),
            why="dw is the local derivative alone, as if every entry of dout were 1: the chain rule combines the "
            "local derivative with the upstream gradient dout, which the backward receives for that",
            look="where dout enters dw's line",
        ),
    ]


def _linear_cases() -> list[tuple]:
    return [_randn(10, (3, 4), (4, 4), (3, 4)), _randn(11, (5, 3), (3, 2), (5, 2))]  # (x, w, dout)


@exercise("02.1", "the linear layer")
def check_linear_layer(linear_forward: Any, linear_backward: Any) -> None:
    """Exercise 02.1: out, dx and dw against autograd. Example: ``lab.check_linear_layer(linear_forward, linear_backward)``."""
    _expect_layer(linear_forward, linear_backward, "linear")
    cases = _linear_cases()
    layer = _Layer("linear", linear_forward, linear_backward, ("dx", "dw"), kept=("x", "w"))
    _check_layer(layer, cases, _linear_reference, _linear_mistakes)
    _two_forwards_then_backwards(layer, cases, _linear_reference)
    passed(f"linear layer: out, dx, dw match autograd on {len(cases)} cases (max rel. error < {TOL:g})")


def _relu_reference(h: torch.Tensor, dout: torch.Tensor) -> tuple:
    return _vjp(torch.relu, (h,), dout)


def _relu_mistakes(h: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 02.2 for this case."""
    return [
        NOT_FINITE,
        Mistake(
            "forward not applied",
            (h, None),
            why="out is h itself: the forward's first return value is max(h, 0) (the output first, then the cache)",
            look="the output of relu_forward",
        ),
        Mistake(
            "min(h, 0)",
            (h.clamp(max=0), None),
            why="out is min(h, 0): the ReLU keeps the positive part, max(h, 0)",
            look="the clamp in relu_forward: min= or max=",
        ),
        Mistake(
            "absolute value",
            (h.abs(), None),
            why="out is |h|: the negative entries came out with their sign flipped, where the ReLU sets them to 0",
            look="what relu_forward does to the negative entries of h",
        ),
        Mistake(
            "leaky ReLU",
            _leaky_output(h),
            why="out keeps a small share of each negative h instead of 0: that is a leaky ReLU (F.leaky_relu, "
            "max(h, a*h) with a small slope a); the ReLU of this exercise sets every negative entry to 0",
            look="what relu_forward does to the negative entries of h",
        ),
        *_relu_backward_mistakes(h, dout),
        Mistake(
            "mask used as an index",
            (None, dout[h > 0]),
            why="indexing with a boolean mask picks the chosen entries out into a new 1-D tensor, so dh lost h's "
            "shape: the gradient has one entry per entry of h, dout's value where the ReLU was on and 0 where it "
            "was off",
            look="the line that applies the mask to dout",
        ),
    ]


def _leaky_output(h: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate on (out, dh): out is h where h > 0, and one and the same small share of h (0 < a < 1) where h < 0."""
    negative = h < 0

    def leaky(result: Any) -> bool:
        out = result[0]
        if not isinstance(out, torch.Tensor) or out.shape != h.shape or not out.is_floating_point():
            return False
        if not negative.any() or rel_error(out[~negative], h[~negative]) > 1e-6:
            return False
        slope = float((out[negative].double() / h[negative].double()).mean())
        return 0 < slope < 1 and rel_error(out[negative], slope * h[negative]) < 1e-6

    return leaky


def _relu_backward_mistakes(h: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """The typical wrong gradients of 02.2's backward: the mask, and what dout is multiplied with."""
    return [
        Mistake(
            "ReLU mask missing",
            (None, dout),
            why="dh equals dout everywhere, no entry was set to 0: the gradient is 0 where h, the layer's input, "
            "is negative (its output max(h, 0) never is)",
            look="the mask: which tensor does it compare with 0, and is that tensor in the cache?",
        ),
        Mistake(
            "ReLU mask inverted",
            (None, dout * (h < 0)),
            why="the gradient passes where h < 0 and stops where h > 0: the mask is the wrong way round",
            look="the comparison that builds the mask",
        ),
        Mistake(
            "ReLU of dout",
            (None, dout.clamp(min=0)),
            why="the ReLU was applied to dout: the mask depends on the sign of h, the layer's input, not of dout",
            look="which tensor the mask is computed from",
        ),
        Mistake(
            "dout clamped and masked",
            (None, dout.clamp(min=0) * (h > 0)),
            why="the mask by h is right, but dout's negative entries were set to 0 as well: the ReLU's backward "
            "passes dout as it is, whatever its sign, wherever h > 0",
            look="what is done to dout besides the mask",
        ),
        Mistake(
            "sign instead of the mask",
            (None, dout * h.sign()),
            why="dout was multiplied by sign(h), which is -1 where h < 0; the ReLU's slope there is 0",
            look="the factor dout is multiplied with",
        ),
        Mistake(
            "multiplied by the output",
            (None, dout * torch.relu(h)),
            why="dout was multiplied by max(h, 0), the ReLU's output; its local slope is 0 or 1",
            look="what dout is multiplied with",
        ),
        Mistake(
            "multiplied by the input",
            (None, dout * h),
            why="dout was multiplied by h; the ReLU's local slope is 0 or 1, not h",
            look="what dout is multiplied with",
        ),
        *_relu_backward_form_mistakes(h, dout),
        *_relu_backward_sigmoid_mistakes(h, dout),
    ]


def _relu_backward_form_mistakes(h: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """A dh that is a mask: the slope alone, or the product of dout and h compared with 0."""
    return [
        Mistake(
            "slope without dout",
            (None, (h > 0).to(h.dtype)),
            why="that is the ReLU's local slope alone: the chain rule multiplies it with dout",
            look="the return line: where does dout enter it?",
        ),
        Mistake(
            "product compared with 0",
            (None, dout * h > 0),
            why="dh came back as True/False values: Python multiplies before it compares, so the product of dout "
            "and h was what got compared with 0, and no value of dout is left in dh",
            look="the return line: which operation runs first, and what does the comparison apply to?",
        ),
    ]


def _relu_backward_sigmoid_mistakes(h: torch.Tensor, dout: torch.Tensor) -> list[Mistake]:
    """A dh whose slope is the sigmoid's (its value, or its derivative), a smooth curve where the ReLU has a step."""
    sig = torch.sigmoid(h)
    return [
        Mistake(
            "sigmoid as the slope",
            (None, dout * sig),
            why="dout was multiplied by sigmoid(h), a smooth curve between 0 and 1 that is never exactly 0 or 1: "
            "that is a smooth stand-in for the ReLU, not its slope; what is the derivative of max(h, 0) on each side "
            "of 0?",
            look="the factor dout is multiplied with: which values can it take?",
        ),
        Mistake(
            "sigmoid's derivative as the slope",
            (None, dout * sig * (1 - sig)),
            why="dout was multiplied by sigmoid(h) (1 - sigmoid(h)), the sigmoid's derivative: that is another "
            "layer's slope; what is the derivative of max(h, 0) on each side of 0?",
            look="the factor dout is multiplied with: which layer's derivative is it?",
        ),
    ]


def _relu_cases() -> list[tuple]:
    """(h, dout): random floats are never exactly 0. The prompt allows h of any shape: the last case is 3-D."""
    return [_randn(12, (4, 5), (4, 5)), _randn(13, (6, 3), (6, 3)), _randn(17, (2, 3, 4), (2, 3, 4))]


NOT_FINITE_AT_ZERO = Mistake(
    "NaN or inf where h is 0",
    None,
    why="dh is not finite exactly where h = 0: the backward divides by h (or by max(h, 0)), which is 0 there; "
    "the slope it needs is 0 or 1 on each side, and the text fixes a convention at 0",
    look="relu_backward: the division, and what it divides by where h is 0",
)


def _relu_at_zero(layer: _Layer) -> None:
    """One more case whose h holds exact zeros: dh must be finite, and between 0 and dout there (any subgradient)."""
    __tracebackhide__ = True
    h, dout = _randn(16, (4, 6), (4, 6))
    h[:, ::2] = 0.0
    what = "your relu layer"
    with _autograd_refused(what, "derive the backward from the chain rule and the shapes"):
        out, dh = layer(h.clone(), dout.clone())
    expect_tensor(out, "out (h with exact zeros)", shape=h.shape)
    dh = expect_tensor(dh, "dh (h with exact zeros)", shape=h.shape, finite=False)
    zero = h == 0
    if not torch.isfinite(dh[~zero]).all():
        expect_tensor(dh, "dh (h with exact zeros)")  # not finite where h is not 0 either: the general sentence
    if not torch.isfinite(dh[zero]).all():
        raise mistake_error(
            "dh is not finite where h is exactly 0",
            NOT_FINITE_AT_ZERO,
            expected="finite numbers",
            got=f"{int((~torch.isfinite(dh[zero])).sum())} NaN or inf at the {int(zero.sum())} zeros of h",
        )
    low = torch.minimum(dout, torch.zeros_like(dout))
    high = torch.maximum(dout, torch.zeros_like(dout))
    inside = (dh.double() >= low - 1e-12) & (dh.double() <= high + 1e-12)
    if not inside[zero].all():
        raise CheckError(
            "where h is exactly 0, dh is not between 0 and dout",
            expected="a subgradient at 0: between 0 (this lab's convention) and dout (the lecture's)",
            got=f"{int((~inside[zero]).sum())} of the {int(zero.sum())} entries outside",
            hint="the ReLU's slope at 0 can be any number from 0 to 1, never outside",
        )
    compare(
        "dh where h is not 0",
        dh[~zero],
        dout[~zero] * (h[~zero] > 0),
        rtol=TOL,
        where="on a case with exact zeros in h",
    )


PYTHON_MAX = Mistake(
    "Python's max on a tensor",
    None,
    why="Python's built-in max(h, 0) (like an `if h > 0:`) asks whether the whole tensor h is greater than 0, "
    "one yes or no, which a tensor of several entries cannot answer: the ReLU compares every entry with 0 on its "
    "own, with a tensor operation",
    look="the comparison with 0 in the layer: does it look at each entry, or at the whole tensor?",
)


def _asked_a_tensor_for_one_truth(err: CheckError) -> bool:
    """Did the student's code fail because Python asked a tensor of several entries for one True or False?"""
    return err.mistake == "raised RuntimeError" and "Boolean value of Tensor with more than one" in err.message


@exercise("02.2", "the ReLU layer")
def check_relu_layer(relu_forward: Any, relu_backward: Any) -> None:
    """Exercise 02.2: out and dh against autograd, then on an h with exact zeros (where any subgradient passes).
    Example: ``lab.check_relu_layer(relu_forward, relu_backward)``."""
    _expect_layer(relu_forward, relu_backward, "relu")
    cases = _relu_cases()
    layer = _Layer("relu", relu_forward, relu_backward, ("dh",))
    try:
        _check_layer(layer, cases, _relu_reference, _relu_mistakes)
    except CheckError as err:
        if not _asked_a_tensor_for_one_truth(err):
            raise
        raise mistake_error(err.message, PYTHON_MAX) from None
    _relu_at_zero(layer)
    _two_forwards_then_backwards(layer, cases, _relu_reference)
    passed(f"relu layer: out, dh match autograd on {len(cases)} cases (max rel. error < {TOL:g})")


# --------------------------------------------------------------------------- 02.3 the two-layer backward


def _two_layer_reference(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple:
    return _vjp(functools.partial(lecture_loss, x, y), (w1, w2))


def _loss_not_reduced(result: Any) -> bool:
    return isinstance(result[0], torch.Tensor) and result[0].dim() > 0


def _loss_not_first(result: Any) -> bool:
    """A gradient where the loss belongs, and a 0-d tensor (the loss) further on."""
    if not _loss_not_reduced(result):
        return False
    return any(isinstance(value, torch.Tensor) and value.dim() == 0 for value in result[1:])


def _two_layer_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 02.3 for this case."""
    return [
        *_two_layer_loss_mistakes(x, y, w1, w2),
        *_two_layer_gradient_mistakes(x, y, w1, w2),
        *_two_layer_wrong_tensor_mistakes(x, y, w1, w2),
        *_two_layer_start_mistakes(x, y, w1, w2),
        *_two_layer_form_mistakes(x, y, w1, w2),
    ]


def _two_layer_loss_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """Mistakes of the loss itself: not finite, returned last, not reduced, a mean, halved, a norm, the ReLU left out."""
    g1, g2 = two_layer_grads(x, y, w1, w2)
    count = y.numel()
    return [
        NOT_FINITE,
        Mistake(
            "loss not first",
            _loss_not_first,
            why="the loss came back after the gradients: loss_and_grads returns (loss, grad_w1, grad_w2), in "
            "this order",
            look="the return line",
        ),
        Mistake(
            "loss not reduced",
            _loss_not_reduced,
            why="the loss is one number, the sum of all the squared errors",
            look="the line that computes loss",
        ),
        Mistake(
            "mean instead of sum",
            (lecture_loss(x, y, w1, w2) / count, g1 / count, g2 / count),
            why="that is the mean of the squared errors; the exercise's loss is their sum",
            look="the reduction of the loss (and the factor in grad_y_pred)",
        ),
        Mistake(
            "loss a mean",
            (lecture_loss(x, y, w1, w2) / count, None, None),
            why="the loss is the mean of the squared errors, while the gradients are those of their sum: the "
            "exercise's loss is the sum",
            look="the reduction of the loss",
        ),
        Mistake(
            "half the loss",
            (lecture_loss(x, y, w1, w2) / 2, None, None),
            why="the loss is half the sum of the squared errors: some courses put 1/2 in front of the L2 loss, the "
            "lecture's does not (and its gradient keeps the 2 of (p - y)**2)",
            look="the line that computes loss",
        ),
        Mistake(
            "square root of the loss",
            (lecture_loss(x, y, w1, w2).sqrt(), None, None),
            why="the loss is the square root of the sum of the squared errors (a norm, .norm() or torch.dist): "
            "the exercise's loss is the sum itself, without the root",
            look="the line that computes loss",
        ),
        Mistake(
            "ReLU left out",
            ((x @ w1 @ w2 - y).pow(2).sum(), None, None),
            why="the loss is that of a network without its ReLU: the prediction goes through max(h, 0) between the "
            "two layers, in the forward pass and so in the backward pass too",
            look="the forward pass between the first layer and the second",
        ),
    ]


def _two_layer_relu_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """Mistakes of the ReLU's backward between the two linear backwards: the mask missing, inverted, taken from the
    gradient, or the output used as the slope."""
    h = x @ w1
    d = 2 * (torch.relu(h) @ w2 - y)
    return [
        Mistake(
            "ReLU mask missing",
            (None, x.t() @ (d @ w2.t()), None),
            why="grad_w1 ignores the ReLU: its gradient is 0 where h < 0",
            look="the ReLU's backward between the two linear backwards",
        ),
        Mistake(
            "ReLU mask inverted",
            (None, x.t() @ (d @ w2.t() * (h < 0)), None),
            why="grad_w1 passes the gradient where h < 0 and stops it where h > 0",
            look="the ReLU's backward between the two linear backwards",
        ),
        Mistake(
            "ReLU applied to the gradient",
            (None, x.t() @ torch.relu(d @ w2.t()), None),
            why="grad_w1 keeps the gradient where the gradient is positive; the mask comes from h, the ReLU's input",
            look="what the ReLU's backward compares with 0",
        ),
        Mistake(
            "multiplied by the ReLU's output",
            (None, x.t() @ (d @ w2.t() * torch.relu(h)), None),
            why="grad_w1's upstream gradient was multiplied by max(h, 0), the ReLU's output: the ReLU's local slope "
            "is 0 or 1, whatever size the output has",
            look="what the gradient is multiplied with between the two linear backwards",
        ),
    ]


def _two_layer_gradient_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """Mistakes of the backward pass: the mask, the factor 2, the sign, the second layer's input, the order."""
    g1, g2 = two_layer_grads(x, y, w1, w2)
    h = x @ w1
    d = 2 * (torch.relu(h) @ w2 - y)
    return [
        *_two_layer_relu_mistakes(x, y, w1, w2),
        Mistake(
            "gradients divided by the batch size",
            (lecture_loss(x, y, w1, w2), g1 / len(x), g2 / len(x)),
            why="the loss is right, the sum of the squared errors, but both gradients are that loss's gradients "
            "divided by the number of samples: grad_y_pred was averaged over the batch as a mean's gradient would "
            "be, while the gradient of a sum has no such factor",
            look="grad_y_pred: the derivative of the loss this function returns",
        ),
        Mistake(
            "factor 2 dropped",
            (None, g1 / 2, g2 / 2),
            why="both gradients are half the reference: the derivative of a square keeps the exponent as a factor, and "
            "grad_y_pred lost it",
            look="grad_y_pred",
        ),
        Mistake(
            "wrong sign",
            (None, -g1, -g2),
            why="both gradients point the wrong way: the difference in grad_y_pred is taken the other way round from "
            "the one the loss squares, and the derivative of the loss with respect to y_pred keeps its order",
            look="grad_y_pred",
        ),
        Mistake(
            "h instead of h_relu",
            (None, None, h.t() @ d),
            why="grad_w2 was built from h; the second layer's input is the ReLU's output h_relu",
            look="which tensor the second linear layer's cache holds",
        ),
        Mistake(
            "gradients in the wrong order",
            (None, g2, g1),
            why="the two gradients came back in the other order: (loss, grad_w1, grad_w2)",
            look="the return line",
        ),
    ]


def _two_layer_wrong_tensor_mistakes(
    x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> list[Mistake]:
    """A gradient with respect to the wrong tensor: x's gradient kept as grad_w1, x where h_relu belongs."""
    d = 2 * (torch.relu(x @ w1) @ w2 - y)
    return [
        Mistake(
            "dx for grad_w1",
            (None, _vjp(functools.partial(_loss_of_x, y, w1, w2), (x,))[1], None),
            why="grad_w1 has the shape of x: it is the gradient with respect to the input x, the first of the two "
            "gradients linear_backward returns, (dx, dw)",
            look="which of the first layer's two gradients is kept as grad_w1",
        ),
        Mistake(
            "grad_h for grad_w1",
            (None, d @ w2.t() * (x @ w1 > 0), None),
            why="grad_w1 is the gradient at h, the first layer's output, with h's shape (N, H): the backward pass "
            "stopped one step early, before the first layer's backward turned it into the gradient of its weight",
            look="what is done with the gradient after the ReLU's backward",
        ),
        Mistake(
            "x instead of h_relu",
            (None, None, x.t() @ d),
            why="grad_w2 was built from x, the network's input: the second layer's input is the ReLU's output h_relu",
            look="which tensor grad_w2 multiplies grad_y_pred with",
        ),
    ]


def _loss_of_x(y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The lecture's loss as a function of the input x (for the gradient a mistaken grad_w1 holds)."""
    return lecture_loss(x, y, w1, w2)


def _two_layer_start_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """Mistakes of grad_y_pred, where the backward pass starts: a mean's factor, or the squared errors themselves."""
    g1, g2 = two_layer_grads(x, y, w1, w2)
    return [
        Mistake(
            "gradients of the mean",
            (None, g1 / y.numel(), g2 / y.numel()),
            why="the loss is the sum, but grad_y_pred was divided by the number of entries, as for a mean: the sum's "
            "derivative has no such factor",
            look="grad_y_pred",
        ),
        Mistake(
            "the loss for its derivative",
            (None, *_squared_errors_as_gradient(x, y, w1, w2)),
            why="grad_y_pred holds the squared errors (y_pred - y)**2 themselves: the backward pass starts from "
            "their derivative with respect to y_pred",
            look="grad_y_pred",
        ),
    ]


def _two_layer_form_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """A mean over the samples, and a ReLU on the prediction too."""
    g1, g2 = two_layer_grads(x, y, w1, w2)
    rows = len(x)
    return [
        Mistake(
            "averaged over the samples",
            (lecture_loss(x, y, w1, w2) / rows, g1 / rows, g2 / rows),
            why="the loss and the gradients are divided by the number of samples N (a mean over the batch): the "
            "exercise's loss is the sum over every sample and output, with no factor",
            look="the reduction of the loss, and the factor in grad_y_pred",
        ),
        Mistake(
            "loss averaged over the samples",
            (lecture_loss(x, y, w1, w2) / rows, None, None),
            why="the loss is divided by the number of samples N, while the gradients are those of the sum: the "
            "exercise's loss is the sum over every sample and output, with no factor",
            look="the reduction of the loss",
        ),
        Mistake(
            "ReLU on the prediction",
            ((torch.relu(torch.relu(x @ w1) @ w2) - y).pow(2).sum(), None, None),
            why="the prediction went through a ReLU too: the network has one ReLU, between the two layers, and "
            "y_pred = h_relu @ w2 is used as it is",
            look="the forward pass after the second layer",
        ),
        *_two_layer_l1_mistakes(x, y, w1, w2),
    ]


def _two_layer_l1_mistakes(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> list[Mistake]:
    """The L1 loss, sum |y_pred - y|, in the loss or in the backward's start (its derivative, the sign)."""
    h = x @ w1
    errors = torch.relu(h) @ w2 - y
    signs = errors.sign()
    sign_grads = (x.t() @ (signs @ w2.t() * (h > 0)), torch.relu(h).t() @ signs)
    return [
        Mistake(
            "L1 loss",
            (errors.abs().sum(), None, None),
            why="the loss adds up the absolute errors, |y_pred - y| (an L1 loss, as in F.l1_loss): the exercise's "
            "loss adds up the squared errors, (y_pred - y)**2",
            look="the line that computes loss",
        ),
        Mistake(
            "L1 loss's derivative",
            (None, *sign_grads),
            why="grad_y_pred is the sign of the error, the derivative of the absolute error |y_pred - y|: the "
            "exercise's loss squares the errors, and the derivative of a square grows with the error",
            look="grad_y_pred",
        ),
    ]


def _squared_errors_as_gradient(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple:
    """(grad_w1, grad_w2) of a backward pass that starts from (y_pred - y)**2 instead of its derivative."""
    h = x @ w1
    start = (torch.relu(h) @ w2 - y) ** 2
    grad_w2 = torch.relu(h).t() @ start
    grad_w1 = x.t() @ (start @ w2.t() * (h > 0))
    return grad_w1, grad_w2


def _two_layer_cases() -> list[tuple]:
    return [_randn(14, (8, 7), (8, 3), (7, 5), (5, 3)), _randn(15, (9, 8), (9, 4), (8, 6), (6, 4))]


WEIGHTS_CHANGED = Mistake(
    "weights changed inside",
    None,
    why="loss_and_grads changed w1 or w2 in place (a training step inside it?): it only computes the loss and the "
    "gradients, and the training loop that calls it updates the weights, so each step would update them twice",
    look="loss_and_grads: every line that writes into w1 or w2 (-=, .sub_, .copy_, ...)",
)


DATA_CHANGED = Mistake(
    "data changed inside",
    None,
    why="loss_and_grads wrote into x or y, the data it was given (an operation whose name ends in _, or an "
    "assignment into the tensor): it only reads them, and the training loop passes the same x and y at every "
    "step, so each step would see other data",
    look="every in-place operation in loss_and_grads and in the layers it calls: which tensor does it write into?",
)


def _weights_kept(loss_and_grads: Callable) -> Callable:
    """``loss_and_grads``, failing with WEIGHTS_CHANGED when a call changes the w1 or w2 it was given, and with
    DATA_CHANGED when it changes x or y."""

    @functools.wraps(loss_and_grads)
    def run(x: Any, y: Any, w1: Any, w2: Any) -> Any:
        given = {"w1": w1, "w2": w2, "x": x, "y": y}
        before = {name: t.clone() if isinstance(t, torch.Tensor) else t for name, t in given.items()}
        result = loss_and_grads(x, y, w1, w2)
        for name, new in given.items():
            old = before[name]
            if not isinstance(new, torch.Tensor) or (new.shape == old.shape and torch.equal(old, new)):
                continue
            change = "its shape" if new.shape != old.shape else f"at most {float((new - old).abs().max()):.3g}"
            raise mistake_error(
                f"your loss_and_grads(x, y, w1, w2) changed the {name} it was given",
                WEIGHTS_CHANGED if name.startswith("w") else DATA_CHANGED,
                expected=f"{name} as it was passed in",
                got=f"{name} changed by {change}",
            )
        if isinstance(result, (tuple, list)):
            return tuple(_as_plain(value) for value in result)  # a subclass's overrides cannot answer for it
        return result

    return run


@exercise("02.3", "the two-layer backward")
def check_loss_and_grads(loss_and_grads: Any) -> None:
    """Exercise 02.3: (loss, grad_w1, grad_w2) by hand, against autograd. Example: ``lab.check_loss_and_grads(loss_and_grads)``."""
    what = "your loss_and_grads(x, y, w1, w2)"
    expect_function(loss_and_grads, what)
    cases = _two_layer_cases()
    with _autograd_refused(what, "run the backward pass through your layers' backward functions, in reverse order"):
        run_cases(
            _weights_kept(_by_hand(loss_and_grads)),
            cases,
            _two_layer_reference,
            what=what,
            outputs=("loss", "grad_w1", "grad_w2"),
            rtol=TOL,
            mistakes=_two_layer_mistakes,
        )
    passed(
        f"loss_and_grads: the loss and both gradients match autograd on {len(cases)} cases (max rel. error < {TOL:g})"
    )


# --------------------------------------------------------------------------- 02.4 the gradient checker


def _smooth(w: torch.Tensor) -> torch.Tensor:
    """A smooth scalar function, one term per entry, the terms' signs alternating (+, -, +, ... in w's order), so
    that the gradient has entries of both signs and an answer that loses the sign fails: f' = +-(w**2 + 2 cos w)
    (never below 2 in size), f'' = +-(2w - 2 sin w), f''' = +-(2 - 2 cos w)."""
    signs = 1 - 2 * (torch.arange(w.numel(), device=w.device) % 2)
    return (signs.reshape(w.shape).to(w.dtype) * (w**3 / 3 + 2 * w.sin())).sum()


def _smooth_grad(w: torch.Tensor) -> torch.Tensor:
    return _vjp(_smooth, (w,))[1]


#: Steps outside these bounds are named as the cause of a wrong answer; 1e-7 to 2e-4 pass on the check's cases.
SMALLEST_EPS = 9e-8
LARGEST_EPS = 2.5e-4

#: Calls of f recorded per case, at most (a loop that never ends must not fill the memory).
MAX_RECORDED = 10_000


class _Recorder:
    """The check's f, which notes where the student's numeric_grad evaluated it: dtype, and how far from w."""

    def __init__(self, w: torch.Tensor) -> None:
        self.w = w.detach().clone()
        # per call: dtype, entries moved, the entry moved most, its move (signed)
        self.calls: list[tuple[torch.dtype, int, int, float]] = []

    def __call__(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor) and len(self.calls) < MAX_RECORDED and not under_a_transform(v):
            self._note(v)
        return _smooth(v)

    def _note(self, v: torch.Tensor) -> None:
        if v.numel() != self.w.numel() or not v.is_floating_point() or v.device.type == "meta":
            return
        moves = v.detach().double().reshape(-1) - self.w.reshape(-1)
        ulps = 8 * torch.finfo(torch.float64).eps * (self.w.reshape(-1).abs() + 1)
        moved = moves.abs() > ulps
        largest = int(moves.abs().argmax())
        self.calls.append((v.dtype, int(moved.sum()), largest, float(moves[largest])))

    def summary(self) -> dict[str, Any]:
        """What the calls show: dtypes, eps, one- or two-sided, several entries at once, entries visited."""
        moved = [call for call in self.calls if call[1] > 0]
        sizes = sorted(abs(call[3]) for call in moved)
        return {
            "dtypes": {call[0] for call in self.calls},
            "eps": sizes[len(sizes) // 2] if sizes else None,
            "backwards": any(call[3] < 0 for call in moved),
            "forwards": any(call[3] > 0 for call in moved),
            "several at once": any(call[1] > 1 for call in moved),
            "visited": len({call[2] for call in moved}),
        }


def _ratio(g: Any, d1: torch.Tensor) -> float | None:
    """r if ``g`` is r times ``d1`` (to 1e-4) for some r other than 1, else None."""
    if not isinstance(g, torch.Tensor) or g.shape != d1.shape or not g.is_floating_point():
        return None
    g = g.detach().double()
    if not torch.isfinite(g).all():
        return None
    r = float((g * d1).sum() / (d1 * d1).sum())
    if r == 0 or abs(r - 1) < 1e-6:
        return None
    if float((g - r * d1).norm()) > 1e-4 * abs(r) * float(d1.norm()):
        return None
    return r


def _is_multiple(g: Any, *, d1: torch.Tensor, factor: float | None) -> bool:
    """Is ``g`` ``factor`` times the gradient ``d1`` (any constant factor where ``factor`` is None)?"""
    r = _ratio(g, d1)
    if r is None:
        return False
    if factor is None:
        return abs(r - 1) > 0.01
    return abs(r - factor) < 1e-3 * abs(factor)


def _any_answer(result: Any) -> bool:
    """Matches every answer: for mistakes read off the student's calls of f rather than off the result."""
    return True


def _dtype_is_not(dtype: torch.dtype) -> Callable[[Any], bool]:
    def other_dtype(g: Any) -> bool:
        return isinstance(g, torch.Tensor) and g.dtype != dtype

    return other_dtype


def _not_shaped_like(w: torch.Tensor) -> Callable[[Any], bool]:
    def reshaped(g: Any) -> bool:
        return isinstance(g, torch.Tensor) and g.numel() == w.numel() and g.shape != w.shape

    return reshaped


def _rounded_to_float32(eps: float | None) -> float | None:
    """The round number (such as 1e-5) that float32 rounded to ``eps``, if ``eps`` is such a rounding."""
    if eps is None:
        return None
    intended = float(f"{eps:.6g}")
    rounded = float(torch.tensor(intended, dtype=torch.float32))
    if intended == eps or rounded != eps:
        return None
    return intended


def _precision_mistakes(f: _Recorder) -> list[Mistake]:
    """f evaluated in a lower precision than w's, then the result's dtype."""
    mistakes = []
    if f.summary()["dtypes"] - {torch.float64}:
        lower = Mistake(
            "f evaluated in float32",
            _any_answer,
            why="f was evaluated in lower precision (float32 carries about 7 digits): dividing "
            "f(w + eps) - f(w - eps) by a small eps magnifies its rounding",
            look="every tensor you build, and every .float(): which dtype does f see?",
        )
        mistakes.append(lower)
    intended = _rounded_to_float32(f.summary()["eps"])
    if intended is not None:
        nudge = Mistake(
            "nudge made in float32",
            _any_answer,
            why=f"w moved by {f.summary()['eps']!r}, which is {intended:g} rounded to float32: the nudge was made "
            "in a float32 tensor (torch.zeros(...) without dtype=), but the difference was divided by the exact eps",
            look="the line that creates the nudge: which dtype does it get?",
        )
        mistakes.append(nudge)
    result = Mistake(
        "result not float64",
        _dtype_is_not(torch.float64),
        why="the result's dtype is not w's: torch.zeros(shape) makes float32 (or a .float() converted it)",
        look="the line that creates the result: which dtype does it get?",
    )
    mistakes.append(result)
    return mistakes


def _whole_rows_moved(f: _Recorder) -> bool:
    """Did every call of f that moved w move exactly one row's worth of entries (w[i] on a 2-d w)?"""
    if f.w.dim() < 2 or f.w.shape[-1] < 2:
        return False
    moved = [call[1] for call in f.calls if call[1] > 0]
    return bool(moved) and all(count == f.w.shape[-1] for count in moved)


def _entry_mistakes(f: _Recorder) -> list[Mistake]:
    """Which entries of w the calls of f moved: several at once, or not all of them."""
    seen = f.summary()
    mistakes = []
    if f.calls and seen["eps"] is None:
        still = Mistake(
            "nothing nudged",
            _any_answer,
            why="f was only ever evaluated at w itself: the nudge is 0 (eps = 0, or added to a copy f never sees)",
            look="what f receives: w with entry i moved by eps",
        )
        mistakes.append(still)
    if seen["several at once"] and _whole_rows_moved(f):
        rows = Mistake(
            "a whole row nudged at once",
            _any_answer,
            why=f"each evaluation of f moved a whole row of w, {f.w.shape[-1]} entries at once: on a 2-d tensor, "
            "one index picks a row, not an entry, so the loop nudged len(w) whole rows where e_i moves a single "
            "entry",
            look="the index that writes eps into the nudge, and how many entries it reaches",
        )
        mistakes.append(rows)
    if seen["several at once"]:
        several = Mistake(
            "several entries nudged at once",
            _any_answer,
            why="f was evaluated with several entries of w moved at once; e_i nudges only entry i",
            look="the nudge: zeros everywhere except at entry i",
        )
        mistakes.append(several)
    if seen["visited"] == 1 and f.w.numel() > 1:
        first_only = Mistake(
            "stopped after the first entry",
            _any_answer,
            why=f"only the first of w's {f.w.numel()} entries was ever nudged: the loop stopped after its first pass. "
            "Which lines belong to the loop's body, and which come after it?",
            look="the return line, and which block it belongs to",
        )
        mistakes.append(first_only)
    if seen["visited"] and seen["visited"] < f.w.numel():
        missed = Mistake(
            "not every entry visited",
            _any_answer,
            why=f"only {seen['visited']} of w's {f.w.numel()} entries were ever nudged "
            "(range(len(w)) counts rows, not entries)",
            look="the range of the loop: what does it count, rows of w or its entries?",
        )
        mistakes.append(missed)
    return mistakes


def _factor_mistakes(d1: torch.Tensor, eps: float | None) -> list[Mistake]:
    """Answers that are a constant multiple of the gradient d1."""
    notes = [
        (2.0, "factor 2: divided by eps", "w + eps and w - eps lie 2*eps apart, but the difference was divided by eps"),
        (0.5, "factor 1/2", "the result is half the gradient: divide by the distance between the two points of f"),
        (-1.0, "wrong sign", "the difference was taken the wrong way round: f(w + eps) comes first"),
        (-2.0, "wrong sign and factor 2", "the difference is reversed and divided by eps instead of 2*eps"),
    ]
    if eps is not None:
        why = "the result is eps**2 times the gradient: `/ 2 * eps` divides by 2, then multiplies by eps"
        notes.append((eps * eps, "divided by 2, times eps", why))
    mistakes = []
    for factor, name, why in notes:
        matches = functools.partial(_is_multiple, d1=d1, factor=factor)
        mistakes.append(Mistake(name, matches, why=why, look="the division that ends the difference quotient"))
    return mistakes


def _values_beside(w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """f(w + eps e_i) and f(w - eps e_i) for every entry i, each shaped like w."""
    flat = w.detach().reshape(-1)
    plus, minus = [], []
    for i in range(flat.numel()):
        nudge = torch.zeros_like(flat)
        nudge[i] = eps
        plus.append(_smooth((flat + nudge).reshape(w.shape)))
        minus.append(_smooth((flat - nudge).reshape(w.shape)))
    return torch.stack(plus).reshape(w.shape), torch.stack(minus).reshape(w.shape)


def _sign_lost(d1: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer is the gradient's size, every sign made positive (d1 has entries of both signs)."""

    def positive(g: Any) -> bool:
        if not isinstance(g, torch.Tensor) or g.shape != d1.shape or not g.is_floating_point():
            return False
        return rel_error(g, d1.abs()) < 1e-6

    return positive


def _quotient_mistakes(f: _Recorder, w: torch.Tensor, d1: torch.Tensor) -> list[Mistake]:
    """The difference quotient written wrongly: its sign dropped, the division done first, the values added."""
    sign = Mistake(
        "sign lost",
        _sign_lost(d1),
        why="every entry has the gradient's size, but all of them are positive: where f falls as entry i grows, "
        "the gradient is negative, and something (an abs(), or a square and a square root) dropped that sign",
        look="what is done to the difference of the two values of f, or to the result, besides the division",
    )
    eps = f.summary()["eps"]
    if eps is None:
        return [sign]
    eps = float(f"{eps:.6g}")  # the eps written in the code, not its rounding in w + eps - w
    plus, minus = _values_beside(w, eps)
    first = Mistake(
        "division before the subtraction",
        plus - minus / (2 * eps),
        why="each entry is about f's own value times -1/(2*eps), hundreds of thousands: Python divides before it "
        "subtracts, so only the second value of f was divided, and the first was left as it is",
        look="the line of the difference quotient: which operation runs first?",
    )
    added = Mistake(
        "values of f added",
        (plus + minus) / (2 * eps),
        why="each entry is about f's own value divided by eps, not a slope: the two values of f were added, where a "
        "slope measures how much f changes from one point to the other",
        look="the operator between the two values of f",
    )
    return [sign, first, added]


def _step_mistakes(f: _Recorder) -> list[Mistake]:
    """The one-sided formula and eps, read off the calls of f."""
    seen = f.summary()
    eps = seen["eps"]
    if eps is None:
        return []
    mistakes = []
    if seen["backwards"] != seen["forwards"]:
        side = "w - eps" if seen["backwards"] else "w + eps"
        one_sided = Mistake(
            "one-sided difference",
            _any_answer,
            why=f"f was evaluated at w and {side} only: the one-sided difference errs by about eps/2 * f'', "
            "the central one by eps**2/6 * f'''",
            look="the points where f is evaluated: on which sides of w do they lie?",
        )
        mistakes.append(one_sided)
    if eps < SMALLEST_EPS:
        small = Mistake(
            "eps too small",
            _any_answer,
            why=f"eps = {eps:.1g}: f is known to about 1e-16 * |f|, and dividing by so small an eps "
            "magnifies that rounding beyond 1e-8",
            look="eps: balance rounding (about 1e-16 / eps) against truncation (about eps**2)",
        )
        mistakes.append(small)
    if eps > LARGEST_EPS:
        large = Mistake(
            "eps too large",
            _any_answer,
            why=f"eps = {eps:.1g}: the central difference errs by about eps**2 / 6 * f''', above 1e-8",
            look="eps: balance rounding (about 1e-16 / eps) against truncation (about eps**2)",
        )
        mistakes.append(large)
    return mistakes


def _second_point_at_w(f: _Recorder, d1: torch.Tensor) -> list[Mistake]:
    """f evaluated at w +- eps on one side only, and at w itself, the difference divided by 2 eps: about half the
    gradient (the thirteenth audit: `old = w[i]` saved a view, so the "restore" to old - eps landed on w)."""
    seen = f.summary()
    if seen["eps"] is None or seen["backwards"] == seen["forwards"]:
        return []
    side, other = ("w - eps", "w + eps") if seen["backwards"] else ("w + eps", "w - eps")
    return [
        Mistake(
            "second point at w itself",
            functools.partial(_is_multiple, d1=d1, factor=0.5),
            why=f"f was evaluated at {side} and at w itself, never at {other}, and the difference was divided by "
            "2*eps, so each entry is about half the slope. If your code does move the entry to the other side "
            "before its second call of f, the value it moves from changed along with the entry",
            look="the value saved before an entry is nudged: w[i] (or flat[i]) is a view of w, not a copy, so it "
            "changes when that entry is written; .item() or .clone() keeps a copy",
        )
    ]


def _checker_mistakes(f: _Recorder, w: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 02.4, read off the result and off where f was evaluated."""
    d1 = _smooth_grad(w)
    reshaped = Mistake(
        "not shaped like w",
        _not_shaped_like(w),
        why="the entries are there, but the result must have w's shape",
        look="the line that creates the result, and the shape it is given",
    )
    return [
        *_precision_mistakes(f),
        reshaped,
        *_entry_mistakes(f),
        NOT_FINITE,
        *_second_point_at_w(f, d1),
        *_factor_mistakes(d1, f.summary()["eps"]),
        *_quotient_mistakes(f, w, d1),
        Mistake(
            "off by a constant factor",
            functools.partial(_is_multiple, d1=d1, factor=None),
            why="every entry is the gradient times one and the same number: the scale of the difference quotient",
            look="the division that ends the difference quotient",
        ),
        *_step_mistakes(f),
    ]


def _checker_cases() -> list[tuple]:
    (w1,) = _randn(16, (4, 5))
    (w2,) = _randn(17, (7,))
    return [(_Recorder(w1), w1), (_Recorder(2 * w2), 2 * w2)]


def _left_as_found(numeric_grad: Callable) -> Callable:
    """``numeric_grad`` with a check that w comes back as it went in (a few ulps of drift are allowed)."""

    @functools.wraps(numeric_grad)
    def run(f: Any, w: torch.Tensor) -> Any:
        before = w.clone()
        result = numeric_grad(f, w)
        limit = 16 * torch.finfo(before.dtype).eps * float(before.abs().max() + 1)
        drift = math.inf
        if w.shape == before.shape and w.dtype == before.dtype:
            drift = float((w.detach() - before).abs().max())
        if not drift <= limit:
            raise CheckError(
                f"your numeric_grad(f, w) left w changed: after it returned, w differed by up to {drift:.2g}",
                hint="a nudge was not undone; the prompt asks to leave w as you found it",
                look="what the loop leaves in w after f was evaluated at both points",
                mistake="w left changed",
            )
        return _as_plain(result)  # a subclass's overrides cannot answer for it

    return run


@exercise("02.4", "a gradient checker")
def check_numeric_grad(numeric_grad: Any) -> None:
    """Exercise 02.4: numeric_grad(f, w) against autograd on smooth float64 functions. Example: ``lab.check_numeric_grad(numeric_grad)``."""
    what = "your numeric_grad(f, w)"
    expect_function(numeric_grad, what)
    cases = _checker_cases()
    with _autograd_refused(what, "the exercise builds the gradient from values of f alone, with autograd off"):
        try:
            run_cases(
                _left_as_found(_by_hand(numeric_grad)),
                cases,
                lambda f, w: _smooth_grad(w),
                what=what,
                outputs=("the gradient",),
                rtol=TOL,
                atol=1e-12,
                mistakes=_checker_mistakes,
            )
        except CheckError as err:
            raise _named_default(err, numeric_grad) from None
        _judge_one_entry_at_a_time([case[0] for case in cases], what)
        _judge_eps_followed(numeric_grad, what)
    passed(f"numeric_grad: matches autograd on {len(cases)} cases (max rel. error < {TOL:g})")


EARLIER_NUDGES_KEPT = Mistake(
    "earlier nudges kept",
    None,
    why="f was evaluated with several entries of w moved at once: the nudges of the entries visited before stayed "
    "in the tensor handed to f, so each later difference was taken around a shifted point. The check's f adds up "
    "one term per entry, so its values came out right, but on a function whose entries interact (a network's "
    "loss) they would not",
    look="the tensor you nudge: what does it hold at entry i - 1 when entry i is moved?",
)


def _judge_one_entry_at_a_time(recorders: list[_Recorder], what: str) -> None:
    """Every evaluation of f must move one entry of w at most: right values from the check's separable f do
    not show nudges left in a copy of w (they would on a function whose entries interact)."""
    __tracebackhide__ = True
    for f in recorders:
        counts = [call[1] for call in f.calls]
        if f.summary()["several at once"]:
            raise mistake_error(
                f"{what} gave the right values, but evaluated f with up to {max(counts)} entries of w moved at once",
                EARLIER_NUDGES_KEPT,
                expected="f evaluated at w with one entry moved by +-eps, the others as w holds them",
                got=f"{sum(count > 1 for count in counts)} of the {len(counts)} evaluations moved several entries",
            )


#: The eps the check passes once, by name, to see that numeric_grad uses the eps it is given.
GIVEN_EPS = 1e-5

EPS_IGNORED = Mistake(
    "eps argument ignored",
    None,
    why="the default was set by overwriting eps, whatever the caller passed: numeric_grad(f, w, eps=...) must "
    "nudge by the eps it is given, and use the default only when none is given",
    look="the line that sets eps: when does it run, and what happens to the eps the caller gave?",
)


def _judge_eps_followed(numeric_grad: Callable, what: str) -> None:
    """Call ``numeric_grad(f, w, eps=GIVEN_EPS)`` once: f must be evaluated GIVEN_EPS away from w. Skipped where
    the function has no parameter named eps, or where its calls of f cannot be read (a vmapped f)."""
    __tracebackhide__ = True
    with contextlib.suppress(TypeError, ValueError):
        if "eps" not in inspect.signature(numeric_grad).parameters:
            return
    (w,) = _randn(18, (3,))
    f = _Recorder(w)
    run_student(_by_hand(numeric_grad), f, w.clone(), eps=GIVEN_EPS, what=f"{what[:-1]}, eps={GIVEN_EPS:g})")
    used = f.summary()["eps"]
    # any nudge of exactly eps counts: a wider stencil also evaluates f at 2 eps and beyond
    moves = [abs(call[3]) for call in f.calls if call[1] > 0]
    if used is None or any(math.isclose(move, GIVEN_EPS, rel_tol=1e-3) for move in moves):
        return
    raise mistake_error(
        f"{what[:-1]}, eps={GIVEN_EPS:g}) nudged w by {used:.3g}, not by the eps it was given",
        EPS_IGNORED,
        expected=f"f evaluated at w +- {GIVEN_EPS:g} e_i",
        got=f"f evaluated at w +- {used:.3g} e_i",
    )


AXES_ASSUMED = Mistake(
    "two axes assumed",
    None,
    why="numeric_grad reads an axis (or an index) that w does not have in this case: w may have any number of "
    "axes, and the check also passes a vector, so code written for a matrix (w.shape[1], w[i, j]) fails there",
    look="every w.shape[...] and every index into w or a nudge: how many axes do they assume?",
)
_AXIS_ERRORS = ("tuple index out of range", "too many indices for tensor")


def _named_default(err: CheckError, numeric_grad: Callable) -> CheckError:
    """The error as it came, unless it is the scaffold's eps=None left without a value, or code that assumes w
    has two axes."""
    if err.mistake == "raised IndexError" and any(text in err.message for text in _AXIS_ERRORS):
        return mistake_error(err.message, AXES_ASSUMED)
    with contextlib.suppress(TypeError, ValueError):
        eps = inspect.signature(numeric_grad).parameters.get("eps")
        if eps is not None and eps.default is None and err.mistake == "raised TypeError" and "NoneType" in err.message:
            return CheckError(
                err.message,
                hint="the check calls numeric_grad(f, w), so eps keeps its default, None, and arithmetic with None fails",
                look="the top of the function: what is eps when the caller gives none?",
                mistake="eps left None",
            )
    return err


# --------------------------------------------------------------------------- 02.5 a larger learning rate


def _loss_after(lr: float, steps: int = 50) -> float:
    """The lecture's loss after ``steps`` of gradient descent with learning rate ``lr``."""
    x, y = lecture_data()
    w1, w2 = lecture_weights()
    for _ in range(steps):
        g1, g2 = two_layer_grads(x, y, w1, w2)
        w1 = w1 - lr * g1
        w2 = w2 - lr * g2
    return float(lecture_loss(x, y, w1, w2))


LR_NOTES = {
    "falls faster": "larger steps go further only while the slope stays about the same over one step; "
    "here one step overshoots the valley to a point where the slope is steeper",
    "falls slower": "the loss does not fall at all: each step of 1e-4 lands where the slope is steeper, "
    "and the next step, larger still, lands further up",
}


@exercise("02.5", "predict a larger learning rate", prediction=True)
def check_lr_prediction(prediction: Any) -> None:
    """Exercise 02.5: the loss after 50 steps of 1e-4 against 1e-6, measured. Example: ``lab.check_lr_prediction(prediction)``."""
    choices = ("falls faster", "falls slower", "diverges")
    prediction = read_prediction("learning rate 1e-4", _as_plain(prediction), choices)
    start = _loss_after(0.0, steps=0)
    small = _loss_after(1e-6)
    large = _loss_after(1e-4)
    if not (math.isfinite(large) and large < start):
        actual = "diverges"
    elif large < small:
        actual = "falls faster"
    else:
        actual = "falls slower"
    check_prediction(
        "learning rate 1e-4",
        prediction,
        actual,
        choices=choices,
        why=f"{start:.3g} -> {large:.3g} in 50 steps: each step overshoots to a steeper slope.",
        mistakes=LR_NOTES,
        ask="why steps 100 times larger make the loss grow instead of fall faster (where does one step land?)",
    )

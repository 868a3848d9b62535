"""Checks of notebook 04 (custom autograd Functions). A Function exercise is data (cases with a random
grad_output, a built-in whose autograd gradients are the reference, known mistakes); one runner calls
the student's forward through ``apply`` and their backward DIRECTLY on its ctx, so each returned
gradient's shape and dtype are judged before autograd could sum or cast them away; then gradcheck."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    plain_tensor,
    rel_error,
    run_student,
)
from .nb05_nn_module import torch_settings_kept
from .running import expect_written, failing_line

__all__ = ["check_sigmoid_prediction", "check_softplus_function", "check_scaled_matmul_function"]

RTOL = 1e-6
#: float64 cases: a backward computed in float32 and cast back is off by 4e-7 or more somewhere in the check's
#: cases, which RTOL lets through; a float32 tensor of the scale (torch.tensor(scale), a design that passes) is
#: off by 1.3e-8 at most.
RTOL_FLOAT64 = 1e-7


def _rtol(ref: torch.Tensor) -> float:
    """The relative tolerance for a value of ``ref``'s dtype."""
    return RTOL_FLOAT64 if ref.dtype == torch.float64 else RTOL


@dataclasses.dataclass(frozen=True)
class _FunctionExercise:
    """One Function exercise: what forward takes, the reference, the cases and the known mistakes."""

    builtin: str  # the reference, named in the PASS line
    reference: Callable[..., torch.Tensor]
    arguments: tuple[str, ...]  # forward's arguments after ctx, in order
    cases: Callable[[], list[tuple]]  # (*arguments, grad_output)
    mistakes: Callable[..., list[Mistake]]  # (*arguments, grad_output) -> typical wrong (output, *gradients)

    def outputs(self, case: tuple) -> tuple[str, ...]:
        """What is compared: the forward output, then the gradient of each tensor argument."""
        names = ["the forward output"]
        for name, value in zip(self.arguments, case):
            if isinstance(value, torch.Tensor):
                names.append(f"grad_{name}")
        return tuple(names)


# PyTorch's error texts inside a forward, what they mean there, the mistake they name, and where to look.
_FUNCTION_ERRORS = [
    (
        r"save_for_backward can only save",
        "save_for_backward takes tensors only: keep a number as an attribute of ctx",
        "number saved with save_for_backward",
        "forward: the call to save_for_backward, and what each of its arguments is",
    ),
    (
        r"can only concatenate tuple|unsupported operand type\(s\) for .*'(tuple|torch\.return_types)",
        "torch.max(x, 0) reads the 0 as a dimension: it reduces x along dim 0 and returns a pair (values, "
        "indices), not a tensor; the max(x, 0) of the stable form compares each element of x with the number 0 "
        "and keeps x's shape",
        "torch.max with a dimension",
        "forward: the call of torch.max (or x.max), and what its second argument means to it",
    ),
    (
        r"Boolean value of Tensor with more than one value is ambiguous",
        "Python's own max (or an if) asks whether a whole tensor is larger than 0, which has no single answer: "
        "the max(x, 0) of the stable form is taken element by element, by a tensor operation",
        "Python's max on a tensor",
        "forward: the max (or the if): does it look at each element, or at the whole tensor?",
    ),
]


def _function_class(cls: Any, name: str) -> type:
    """The student's torch.autograd.Function subclass, or a sentence saying what to pass instead."""
    __tracebackhide__ = True
    if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
        if cls is torch.autograd.Function:
            raise CheckError(f"that is torch.autograd.Function itself: pass your subclass {name}", usage=True)
        if cls.forward is torch.autograd.Function.forward:
            raise CheckError(
                f"{cls.__name__} has no forward: it neither defines one nor inherits one from another Function",
                hint="a Function needs a static forward(ctx, ...) and a static backward(ctx, grad_output)",
                usage=True,
            )
        expect_written(cls, ("forward", "backward"))
        return cls
    if cls is None:
        raise CheckError(
            f"{name} is None: run the exercise cell above first (until then its name holds None)", usage=True
        )
    owner = getattr(cls, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        hint = f"pass {owner.__name__} itself, not {owner.__name__}.apply"
    elif isinstance(cls, torch.autograd.Function):
        hint = "pass the class, without parentheses"
    elif isinstance(cls, type):
        hint = f"{cls.__name__} must subclass torch.autograd.Function, with static forward and backward methods"
    else:
        hint = "define `class ...(torch.autograd.Function)` with forward and backward, run its cell, pass the class"
    got = f"the class {cls.__name__}" if isinstance(cls, type) else describe(cls)
    raise CheckError(f"expected your torch.autograd.Function subclass {name}", got=got, hint=hint, usage=True)


def _forward(cls: type, leaves: list, originals: list, ex: _FunctionExercise) -> torch.Tensor:
    """The student's forward through ``apply``; the inputs must come out unchanged."""
    __tracebackhide__ = True
    try:
        out = run_student(cls.apply, *leaves, what=f"{cls.__name__}.apply (your forward)")
    except CheckError as err:
        with_ctx = cls.setup_context is torch.autograd.Function.setup_context  # else forward takes no ctx
        if not err.usage and not _takes(cls.forward, int(with_ctx) + len(leaves)):
            raise mistake_error(err.message, FORWARD_SIGNATURE) from None
        if _super_without_instance(err):
            raise mistake_error(err.message, SUPER_IN_STATIC) from None
        known = [
            (advice, name, look) for pattern, advice, name, look in _FUNCTION_ERRORS if re.search(pattern, str(err))
        ]
        if not known:
            raise
        advice, name, look = known[0]
        raise CheckError(err.message, hint=advice, look=look, mistake=name) from None
    for name, leaf, original in zip(ex.arguments, leaves, originals):
        if isinstance(leaf, torch.Tensor) and not torch.equal(leaf.detach(), original):
            raise CheckError(
                f"{cls.__name__}.forward changed its input {name} in place",
                hint="the input belongs to the caller: compute the output with out-of-place operations",
                look=f"forward: each operation on {name}, and whether it writes into {name} itself",
                mistake="forward changes its input",
            )
    if out is None:
        raise mistake_error(f"{cls.__name__}.forward returned None", NOTHING_RETURNED, expected="the output tensor")
    raw = out
    out = expect_tensor(out, "the forward output", finite=False)  # a plain alias: its grad_fn is the alias's
    with torch._C.DisableTorchFunction():  # a subclass's own methods may answer anything
        node = raw.grad_fn
    if node is None or not hasattr(node, "_forward_cls"):
        subclass = type(raw) is not torch.Tensor
        raise CheckError(
            f"the output of {cls.__name__}.apply has no backward to call",
            expected="a floating-point tensor connected to your backward",
            got=f"a {type(raw).__name__} (a subclass of torch.Tensor) that is not" if subclass else describe(out),
            hint=(
                f"{type(raw).__name__}'s own operations hand autograd a tensor cut from your backward: forward "
                "returns a plain torch.Tensor (as_subclass(torch.Tensor) turns it back into one)"
            )
            if subclass
            else None,
        )
    if type(raw) is not torch.Tensor:
        _onward_connected(cls, raw)
    return raw


def _onward_connected(cls: type, raw: torch.Tensor) -> None:
    """A subclass output must stay in autograd's graph through the next operation, as a layer after it needs."""
    __tracebackhide__ = True
    with torch.enable_grad():
        onward = run_student(
            torch.mul, raw, 1.0, what=f"an operation on the {type(raw).__name__} that forward returned"
        )
    with torch._C.DisableTorchFunction():
        node = onward.grad_fn if isinstance(onward, torch.Tensor) else None
    if node is None:
        raise CheckError(
            f"an operation on the output of {cls.__name__}.apply is cut from autograd's graph",
            expected="a result that still leads back to your backward, as the next layer needs",
            got=f"a result without grad_fn: forward returned a {type(raw).__name__}, a subclass of torch.Tensor",
            hint=f"{type(raw).__name__}'s own operations cut their results from the graph, so no layer before this "
            "Function would get a gradient: forward returns a plain torch.Tensor (as_subclass(torch.Tensor) turns "
            "it back into one)",
        )


NOTHING_RETURNED = Mistake(
    "nothing returned",
    None,
    why="the method computes its result but never hands it back, so autograd gets None: a function without a return "
    "statement returns None, and print only shows a value, it does not give it to the caller",
    look="the end of the method: what does it hand back?",
)
FORWARD_SIGNATURE = Mistake(
    "forward's parameters",
    None,
    why="apply hands forward the context first and then its own arguments, one for one, and nothing else: a static "
    "method has no self, so a parameter beyond those is one apply cannot fill (or one argument is missing)",
    look="the def line of forward: which of its parameters does apply hand over?",
)
FORWARD_NAMES_IN_BACKWARD = Mistake(
    "backward reads what forward did not hand over",
    None,
    why="backward runs later, in a call of its own: forward's local names (and its arguments) are gone by then, and "
    "ctx carries only what forward put on it (attributes it set, and the tensors it saved for backward)",
    look="backward: each name it reads, and the line of forward that hands it over",
)
SAVED_COUNT = Mistake(
    "saved tensors miscounted",
    None,
    why="ctx.saved_tensors holds exactly the tensors forward saved, in that order, and nothing else: backward takes "
    "out another number of them than forward put in (a number kept as an attribute of ctx is not among them)",
    look="the line of forward that saves tensors, beside the line of backward that reads ctx.saved_tensors",
)


def _takes(method: Any, count: int) -> bool:
    """Can ``method`` be called with ``count`` positional arguments? True when it cannot tell."""
    try:
        inspect.signature(method).bind(*[None] * count)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin)
        return True
    return True


SUPER_IN_STATIC = Mistake(
    "super() in a static method",
    None,
    why="super() without arguments starts from the method's first argument, which it takes for an instance of the "
    "class: in a static method of a Function that argument is ctx, an object autograd made, not an instance, so "
    "super() cannot find the parent class's method from it",
    look="the line that calls super(): what its first argument is in a static method, and how else the parent "
    "class can be named",
)


def _super_without_instance(err: CheckError) -> bool:
    """Did the student's code fail because a zero-argument super() ran in a static method?"""
    text = str(err.__cause__)
    return "super(type, obj): obj must be an instance" in text or "super(): no arguments" in text


def _backward_misread(err: CheckError) -> Mistake | None:
    """The mistake behind an error of backward that reads what forward did not hand over, miscounts what it
    saved, or calls super() from a static method; None for any other error."""
    cause = err.__cause__
    text = str(cause)
    if _super_without_instance(err):
        return SUPER_IN_STATIC
    if isinstance(cause, NameError):
        return FORWARD_NAMES_IN_BACKWARD
    if isinstance(cause, AttributeError) and re.search(r"'\w*Backward\w*' object has no attribute", text):
        return FORWARD_NAMES_IN_BACKWARD
    if "saved_tensors" not in failing_line(err):
        return None
    if isinstance(cause, ValueError) and re.search(r"(not enough|too many) values to unpack", text):
        return SAVED_COUNT
    if isinstance(cause, IndexError) and "tuple index out of range" in text:
        return SAVED_COUNT
    return None


SAVED_NOT_UNPACKED = Mistake(
    "ctx.saved_tensors not unpacked",
    None,
    why="ctx.saved_tensors is always a tuple, even when forward saved a single tensor: backward computed with the "
    "tuple itself instead of the tensor inside it",
    look="the line of backward that reads ctx.saved_tensors: what it binds the tuple to",
)


def _tuple_used_as_tensor(err: CheckError) -> bool:
    """Did backward fail because it computed with a tuple (ctx.saved_tensors kept whole) where a tensor belongs?"""
    cause = err.__cause__
    return isinstance(cause, (TypeError, AttributeError)) and "tuple" in str(cause)


BACKWARD_SIGNATURE = Mistake(
    "backward's parameters",
    None,
    why="autograd calls backward itself, with the context first and then one gradient for each output of forward, "
    "and nothing else: a static method has no self, so every parameter beyond those is one it cannot fill",
    look="the def line of backward: which of its parameters does autograd hand over?",
)


def _backward(cls: type, out: torch.Tensor, grad_output: torch.Tensor) -> Any:
    """The student's backward, called directly on the ctx of ``out`` (what autograd would hand it)."""
    __tracebackhide__ = True
    given = grad_output.clone()
    try:
        with torch.no_grad():
            grads = run_student(out.grad_fn.apply, given, what=f"{cls.__name__}.backward")
    except CheckError as err:
        if not err.usage and not _takes(cls.backward, 2):
            raise mistake_error(err.message, BACKWARD_SIGNATURE) from None
        misread = None if err.usage else _backward_misread(err)
        if misread is not None:
            raise mistake_error(err.message, misread) from None
        if err.usage or not _tuple_used_as_tensor(err):
            raise
        raise mistake_error(err.message, SAVED_NOT_UNPACKED) from None
    if not torch.equal(given, grad_output):
        raise CheckError(
            f"{cls.__name__}.backward changed grad_output in place",
            hint="autograd may still need grad_output: compute the gradients with out-of-place operations",
            look="backward: each operation on grad_output, and whether it writes into grad_output itself",
            mistake="grad_output changed in place",
        )
    return grads


def _one_per_argument(cls: type, grads: Any, args: tuple, ex: _FunctionExercise) -> list:
    """backward's values, one per forward argument: a gradient for each tensor, None for a number."""
    __tracebackhide__ = True
    wanted = f"one per argument of forward ({', '.join(ex.arguments)}), in that order"
    if grads is None:
        raise mistake_error(f"{cls.__name__}.backward returned None", NOTHING_RETURNED, expected=wanted)
    if isinstance(grads, list):
        raise CheckError(
            f"{cls.__name__}.backward returned a list",
            expected=f"a tuple: {wanted}",
            got=describe(grads),
            hint="autograd unpacks a tuple only: a list counts as one value",
            look="backward: the brackets of the return line",
            mistake="list instead of tuple",
        )
    if not isinstance(grads, tuple):
        grads = (grads,)
    extra = [g for g in grads[len(args) :] if g is not None]
    if len(grads) < len(args) or extra:
        raise CheckError(
            f"{cls.__name__}.backward returned {len(grads)} value(s)",
            expected=wanted,
            got=", ".join(describe(g) for g in grads) or "nothing",
            hint="backward returns one value per argument of forward: a gradient for each tensor, None for a number",
            look="backward's return line, beside forward's def line: one value for each argument after ctx",
            mistake="wrong number of gradients",
        )
    result = []
    for name, value, grad in zip(ex.arguments, args, grads):
        if not isinstance(value, torch.Tensor):
            if grad is not None:
                raise CheckError(
                    f"{cls.__name__}.backward returned a gradient for {name}, which is a number, not a tensor",
                    expected=f"None for {name}",
                    got=describe(grad),
                    hint="autograd takes no gradient for an argument that is not a tensor: it wants None there",
                    look=f"backward's return line: the value in {name}'s position",
                    mistake="gradient for a number",
                )
            continue
        if grad is None:
            raise CheckError(
                f"{cls.__name__}.backward returned None for {name}, which needs a gradient",
                expected=f"dL/d{name}, a tensor of {name}'s shape",
                got="None",
                hint="None tells autograd that an argument takes no gradient, which is right for a number only: "
                f"{name} is a tensor, so the loss's gradient has to flow back to it",
                look=f"backward's return line: the value in {name}'s position",
                mistake="None for a tensor",
            )
        result.append(grad)
    return result


def _student(cls: type, case: tuple, ex: _FunctionExercise) -> tuple:
    """(forward output, *gradients) of the student's Function on one case, gradients as backward returned them."""
    __tracebackhide__ = True
    *args, grad_output = case
    originals = []
    leaves = []
    for a in args:
        if isinstance(a, torch.Tensor):
            originals.append(a.clone())
            leaves.append(a.detach().clone().requires_grad_())
        else:
            originals.append(a)
            leaves.append(a)
    out = _forward(cls, leaves, originals, ex)
    output = plain_tensor(out).detach().clone()  # a subclass's own methods may answer anything
    grads = _backward(cls, out, grad_output)
    _saved_unchanged(cls, [output, *leaves], [plain_tensor(out).detach(), *originals], ("output", *ex.arguments))
    given = _one_per_argument(cls, grads, tuple(args), ex)
    plain = [plain_tensor(g) if isinstance(g, torch.Tensor) else g for g in given]
    return (plain_tensor(out).detach(), *plain)


def _saved_unchanged(cls: type, before: list, after: list, names: tuple) -> None:
    """backward leaves forward's input and output as they were: either may be what ctx saved."""
    __tracebackhide__ = True
    for name, old, new in zip(names, before, after):
        if isinstance(old, torch.Tensor) and not torch.equal(old.detach(), new.detach()):
            raise CheckError(
                f"{cls.__name__}.backward changed forward's {name} in place",
                hint="what ctx saved still belongs to autograd (and the input to the caller): compute the "
                "gradient with out-of-place operations (no method ending in _, and a = a * b, not a *= b)",
                look=f"backward: each operation on the saved {name}, and whether it writes into that tensor itself",
                mistake="saved tensor changed in place",
            )


def _reference(ex: _FunctionExercise, case: tuple) -> tuple:
    """(output, *gradients) through the built-in, by autograd."""
    *args, grad_output = case
    leaves = []
    for a in args:
        if isinstance(a, torch.Tensor):
            leaves.append(a.detach().clone().requires_grad_())
        else:
            leaves.append(a)
    tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
    with torch.enable_grad():
        out = ex.reference(*leaves)
    return (out.detach(), *torch.autograd.grad(out, tensors, grad_output))


def _case_words(number: int, total: int, case: tuple) -> str:
    dtype = next(a.dtype for a in case if isinstance(a, torch.Tensor))
    shapes = ", ".join(str(tuple(a.shape)) for a in case[:-1] if isinstance(a, torch.Tensor))
    return f"in case {number} of {total} ({dtype}, inputs of shape {shapes})"


def _located(err: CheckError, name: str, where: str) -> CheckError:
    """``err`` (from compare) with the case it happened in; a non-finite value gets no guessed cause."""
    if where in err.message:
        return err
    hint = err.hint
    if "not finite" in err.message:
        hint = None
    return CheckError(f"{err.message} {where}", expected=err.expected, got=err.got, hint=hint, usage=err.usage)


def _same_form(value: Any, ref: torch.Tensor) -> bool:
    """A tensor of the reference's dtype and number of dimensions: only then can a known mistake explain it."""
    return isinstance(value, torch.Tensor) and value.dtype == ref.dtype and value.dim() == ref.dim()


def _explaining(mistakes: list[Mistake], index: int, ref: torch.Tensor) -> list[Mistake]:
    """The mistakes that can explain a wrong output ``index``: a predicate, or a wrong value given for
    that output which differs from the right one in this case."""
    result = []
    for mistake in mistakes:
        if not isinstance(mistake.matches, tuple):
            result.append(mistake)
            continue
        wrong = mistake.matches[index]
        if wrong is None:
            continue
        if wrong.shape == ref.shape and torch.allclose(wrong.to(ref.dtype), ref, rtol=_rtol(ref), atol=0.0):
            continue  # in this case the wrong formula gives the right value
        result.append(mistake)
    return result


def _judged_so_far(got: tuple, index: int) -> tuple:
    """``got`` with the outputs after the forward output left out (None) when the forward output is the one
    judged: a mistake told by the gradients (sigmoid(2x) is a tanh slope) must not explain a wrong forward."""
    if index > 0:
        return got
    return (got[0], *(None for _ in got[1:]))


def _judge_case(got: tuple, want: tuple, names: tuple, mistakes: list[Mistake], where: str) -> None:
    """Compare output by output (shape, dtype, finite, then values); a difference names the known mistake."""
    __tracebackhide__ = True
    for index, (name, value, ref) in enumerate(zip(names, got, want)):
        try:
            compare(name, value, ref, rtol=_rtol(ref), atol=0.0, where=where)
        except CheckError as err:
            mistake = None
            if _same_form(value, ref) and not err.usage:
                mistake = first_mistake(_judged_so_far(got, index), _explaining(mistakes, index, ref))
            if mistake is None:
                raise _located(err, name, where) from None
            message = f"{name} is wrong {where}"
            if mistake.symptom:
                message += f": {mistake.symptom}"
            raise mistake_error(message, mistake, expected=err.expected, got=err.got) from None


STATE_OUTSIDE_CTX = Mistake(
    "state kept outside ctx",
    None,
    why="backward read what a later call of forward left behind: forward keeps what backward needs outside ctx "
    "(on the class, in a global or a default argument), so when the Function is applied twice before backward "
    "runs, as in a network that uses it in two layers, the first call's backward works with the second call's "
    "tensors; each call has its own ctx, and only ctx keeps one call's tensors apart from another's",
    look="forward: where it keeps what backward needs, and whether that place belongs to this one call",
)


def _two_calls(cls: type, ex: _FunctionExercise, first: tuple, second: tuple) -> None:
    """The Function applied to ``first``, then to ``second``, and only then the first call's backward (as in a
    network that uses it twice): that backward must give the first call's gradients."""
    __tracebackhide__ = True
    outputs = []
    for case in (first, second):
        leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in case[:-1]]
        outputs.append(run_student(cls.apply, *leaves, what=f"{cls.__name__}.apply (your forward)"))
    grads = _backward(cls, outputs[0], first[-1])
    got = _one_per_argument(cls, grads, tuple(first[:-1]), ex)
    want = _reference(ex, first)[1:]
    for name, value, ref in zip(ex.outputs(first)[1:], got, want):
        if not torch.allclose(value.detach().double(), ref.double(), rtol=_rtol(ref), atol=0.0):
            raise mistake_error(
                f"{name} of a first call is wrong when a second call of {cls.__name__}.apply ran before its backward",
                STATE_OUTSIDE_CTX,
                expected="the first call's gradient, as when backward follows its own forward",
                got="another gradient",
            )


def _run_check(cls: Any, ex: _FunctionExercise, name: str) -> None:
    __tracebackhide__ = True
    cls = _function_class(cls, name)
    with torch_settings_kept(f"your {cls.__name__}"):
        _judge_function(cls, ex)
    passed(f"{cls.__name__}: forward and backward match autograd through {ex.builtin}; gradcheck passes")


def _judge_function(cls: type, ex: _FunctionExercise) -> None:
    """Every case, then two calls before one backward, then gradcheck."""
    __tracebackhide__ = True
    cases = ex.cases()
    for number, case in enumerate(cases, start=1):
        got = _student(cls, case, ex)
        want = _reference(ex, case)
        where = _case_words(number, len(cases), case)
        _judge_case(got, want, ex.outputs(case), ex.mistakes(*case), where)
    _two_calls(cls, ex, cases[0], cases[-1])
    args = []
    for a in cases[0][:-1]:
        if isinstance(a, torch.Tensor):
            args.append(a.detach().clone().requires_grad_())
        else:
            args.append(a)
    what = f"torch.autograd.gradcheck on {cls.__name__}"
    if not run_student(torch.autograd.gradcheck, cls.apply, tuple(args), raise_exception=False, what=what):
        raise CheckError(f"torch.autograd.gradcheck fails for {cls.__name__} in float64")


def _seeded(seed: int, *shapes: tuple) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]


# ------------------------------------------------------------------ 04.2 a stable softplus


def _softplus_cases() -> list[tuple]:
    """Values, large |x| in float64, float32; last, x and grad_output of case 1's shape but other values and not
    contiguous (transposed), as autograd may hand them over: a view(-1), or a result kept from an earlier call,
    fails there."""
    x, g, g8 = _seeded(40, (5, 4), (5, 4), (8,))
    big = torch.tensor([-800.0, -100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 800.0], dtype=torch.float64)
    small = big[2:].float() * torch.tensor([1, 1, 1, 1, 1, 0.125])
    x_t, g_t = _seeded(44, (4, 5), (4, 5))
    return [(3 * x, g), (big, g8), (small, g8[2:].float()), (2 * x_t.t(), g_t.t())]


def _inf_where_exp_overflows(x: torch.Tensor, got: tuple) -> bool:
    """The output is inf exactly where exp(x) overflows, finite elsewhere: log(1 + exp(x))."""
    overflow = torch.isinf(torch.exp(x))
    out = got[0]
    if not overflow.any() or not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return False
    return bool(torch.equal(torch.isinf(out), overflow)) and bool(torch.isfinite(out[~overflow]).all())


def _nan_where_exp_overflows(x: torch.Tensor, got: tuple) -> bool:
    """The gradient is NaN exactly where exp(x) overflows, finite elsewhere: exp(x) / (1 + exp(x))."""
    overflow = torch.isinf(torch.exp(x))
    grad = got[1]
    if not overflow.any() or not isinstance(grad, torch.Tensor) or grad.shape != x.shape:
        return False
    return bool(torch.equal(torch.isnan(grad), overflow)) and bool(torch.isfinite(grad[~overflow]).all())


def _a_real_factor(factor: float) -> bool:
    """Can ``factor`` be a number written into a formula: finite and not 0? (A gradient of inf, of NaN, or of zeros
    comes out as a factor inf, NaN or 0, which a mistake about a factor must not explain.)"""
    return math.isfinite(factor) and not math.isclose(factor, 0.0, abs_tol=1e-12)


def _fixed_factor(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor, got: tuple) -> bool:
    """Are both gradients one and the same constant (not ``scale``) times the unscaled ones?"""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return False
    plain = (g.mm(w.t()), x.t().mm(g))
    factors = []
    for grad, unscaled in zip(got[1:], plain):
        if not isinstance(grad, torch.Tensor) or grad.shape != unscaled.shape:
            return False
        factor = float((grad.double() * unscaled.double()).sum() / unscaled.double().square().sum())
        if not _a_real_factor(factor):
            return False  # gradients of inf or NaN, or zeros: no factor explains them
        if not torch.allclose(grad.double(), factor * unscaled.double(), rtol=1e-6, atol=1e-9):
            return False
        factors.append(factor)
    return math.isclose(factors[0], factors[1], rel_tol=1e-6) and not math.isclose(factors[0], scale, rel_tol=1e-6)


def _one_number_times_sigmoid(x: torch.Tensor, got: tuple) -> bool:
    """Is the gradient one constant (not 1) times sigmoid(x): grad_output summed or averaged first?"""
    grad = got[1]
    if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or x.numel() < 2:
        return False
    local = torch.sigmoid(x).double()
    factor = float((grad.double() * local).sum() / local.square().sum())
    if not _a_real_factor(factor) or math.isclose(factor, 1.0, rel_tol=1e-6):
        return False  # the right gradient, or zeros: nothing was summed or averaged
    return bool(torch.allclose(grad.double(), factor * local, rtol=1e-6, atol=1e-12))


def _gradient_times_a_constant(x: torch.Tensor, g: torch.Tensor, got: tuple) -> bool:
    """Is the gradient the right one, grad_output * sigmoid(x), times one constant other than 1 and -1 (a division
    by the number of elements, a factor 1/2 or 2 from the formula)?"""
    grad = got[1] if isinstance(got, (tuple, list)) and len(got) > 1 else None
    if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not grad.is_floating_point():
        return False
    right = (g * torch.sigmoid(x)).double()
    wanted = grad.detach().double()
    if right.square().sum() == 0:
        return False
    factor = float((wanted * right).sum() / right.square().sum())
    if not _a_real_factor(factor) or math.isclose(abs(factor), 1.0, rel_tol=1e-6):
        return False
    return bool(torch.allclose(wanted, factor * right, rtol=1e-6, atol=1e-12))


def _float32_gradient(x: torch.Tensor, g: torch.Tensor, got: tuple) -> bool:
    """Is the gradient, element by element, grad_output * sigmoid(x) computed in float32 (x of a wider dtype)?"""
    grad = got[1]
    if x.dtype == torch.float32 or not isinstance(grad, torch.Tensor) or grad.shape != x.shape:
        return False
    if torch.allclose(grad.double(), (g * torch.sigmoid(x)).double(), rtol=RTOL_FLOAT64, atol=0.0):
        return False  # the right gradient: something else is wrong
    local = torch.sigmoid(x.float()).to(x.dtype)
    candidates = (g * local, (g.float() * local.float()).to(x.dtype))
    return any(torch.allclose(grad.double(), c.double(), rtol=1e-5, atol=0.0) for c in candidates)


def _tanh_slope(x: torch.Tensor, g: torch.Tensor, got: tuple) -> bool:
    """Is the gradient grad_output times a tanh-based slope that is not the sigmoid (tanh(x), (1 + tanh(x)) / 2,
    1 + tanh(x/2), tanh(x/2) / 2, ...): a half or a shift of the identity sigmoid(x) = (1 + tanh(x/2)) / 2 lost?"""
    grad = got[1] if isinstance(got, (tuple, list)) and len(got) > 1 else None
    if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not grad.is_floating_point():
        return False
    t = torch.tanh(x)
    half = torch.tanh(x / 2)
    # (1 + half) / 2 is the sigmoid itself, and (1 - half) / 2 is sigmoid(-x), a mistake of its own
    slopes = (t, (1 + t) / 2, 1 + t, t / 2, 1 - t, (1 - t) / 2, half, 1 + half, half / 2, 1 - half)
    wanted = grad.detach().double()
    return any(torch.allclose(wanted, (g * slope).double(), rtol=1e-6, atol=1e-12) for slope in slopes)


def _local_derivative(x: torch.Tensor, g: torch.Tensor, got: tuple) -> torch.Tensor | None:
    """grad_x divided by grad_output, in float64 (None when grad_x is not a floating tensor of x's shape, or
    grad_output has a 0): the derivative the student's backward multiplied grad_output by."""
    grad = got[1] if isinstance(got, (tuple, list)) and len(got) > 1 else None
    if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not grad.is_floating_point():
        return None
    if not bool((g != 0).all()):
        return None
    return grad.detach().double() / g.double()


def _floored_derivative(x: torch.Tensor, g: torch.Tensor, got: tuple) -> bool:
    """Is the derivative the sigmoid kept away from 0 (and maybe from 1) by a small number: a clamp(1e-7, ...), an
    epsilon added, or x clipped to a range? Then it is off by at most 1e-4, either never below sigmoid(x) or
    pulled towards 1/2 everywhere, and above sigmoid(x) where that is smallest, where such a guard always acts."""
    local = _local_derivative(x, g, got)
    if local is None or not bool(torch.isfinite(local).all()):
        return False
    right = torch.sigmoid(x.double())
    above = local - right
    slack = 1e-12 * right.abs()
    if bool((above.abs() <= slack).all()) or float(above.abs().max()) > 1e-4:
        return False
    inward = above * torch.sign(0.5 - right)
    if bool((above < -slack).any()) and bool((inward < -slack).any()):
        return False
    smallest = torch.argmin(right)
    return bool(above.flatten()[smallest] > slack.flatten()[smallest])


def _gradient_clamped_below(x: torch.Tensor, g: torch.Tensor, got: tuple) -> bool:
    """Is grad_x the right gradient with every element below a small positive number raised to it (the whole
    gradient clamped, so the negative ones grad_output brought are gone)?"""
    grad = got[1] if isinstance(got, (tuple, list)) and len(got) > 1 else None
    if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not grad.is_floating_point():
        return False
    right = (g * torch.sigmoid(x)).double()
    floor = float(grad.detach().double().min())
    if not bool((right < 0).any()) or not 0 < floor <= 1e-3:
        return False
    return bool(torch.allclose(grad.detach().double(), right.clamp(min=floor), rtol=1e-6, atol=1e-12))


def _softplus_guard_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """Backwards that guard the derivative against 0 (or the gradient against negatives) with a small number."""
    return [
        Mistake(
            "derivative floored at a small number",
            functools.partial(_floored_derivative, x, g),
            "where the derivative of softplus is tiny (x very negative) yours is not: it is kept away from 0 (and "
            "perhaps from 1) by a small number, as a clamp, an epsilon added or x clipped to a range would keep it. "
            "Nothing there "
            "needs guarding: the derivative tends to 0, and in float64 the reference keeps it that small (or "
            "exactly 0 where it underflows); a guard against 0 belongs where a formula divides by or takes the log "
            "of a number that can reach 0, and then the formula is better rewritten so it cannot",
            look="backward: every clamp, every small constant, and what they do where x is very negative",
            symptom="a little too large, most where x is very negative",
        ),
        Mistake(
            "gradient clamped below",
            functools.partial(_gradient_clamped_below, x, g),
            "grad_x is never below one small positive number: the whole gradient was clamped from below, so the "
            "negative values grad_output brings (a loss that falls as x grows) are gone; the derivative of softplus "
            "is positive, but grad_x = grad_output * derivative takes grad_output's sign",
            look="backward: every clamp, and which tensor it is applied to",
        ),
    ]


def _softplus_forward_mistakes(x: torch.Tensor) -> list[Mistake]:
    """The typical wrong forward outputs of a softplus Function (any gradient)."""
    right = F.softplus(x)
    return [
        Mistake(
            "forward is max(x, 0) alone",
            _zeros_where(x.clamp(min=0), right),
            "the forward output lacks log1p(exp(-|x|))",
            look="forward: the terms of the sum, beside those of the stable form",
        ),
        Mistake(
            "forward lacks max(x, 0)",
            (torch.log1p(torch.exp(-x.abs())), None),
            "the forward output is the correction log1p(exp(-|x|)) alone, at most log(2): the stable form adds it "
            "to a first term that follows x for large x",
            look="forward: the terms of the sum, beside those of the stable form",
        ),
        Mistake(
            "min(x, 0) for max(x, 0)",
            (x.clamp(max=0) + torch.log1p(torch.exp(-x.abs())), None),
            "the first term is min(x, 0), not max(x, 0), so the output is too small by |x| for every x: clamp's "
            "max= sets the largest value allowed, an upper bound of 0 (which gives min(x, 0)), while max(x, 0) "
            "keeps x where it is above 0, a lower bound of 0",
            look="forward: the first term of the sum, and which bound clamp is given",
        ),
        Mistake(
            "forward adds x for max(x, 0)",
            (x + torch.log1p(torch.exp(-x.abs())), None),
            "the forward adds x where the stable form has max(x, 0): the two differ for x < 0",
            look="forward: the first term of the sum, for a negative x",
        ),
        Mistake(
            "correction subtracted",
            (x.clamp(min=0) - torch.log1p(torch.exp(-x.abs())), None),
            "the correction term log1p(exp(-|x|)) is subtracted from max(x, 0): the stable form adds it "
            "(softplus is never below max(x, 0))",
            look="forward: the sign between the two terms",
        ),
        Mistake(
            "exp(-x) for exp(-|x|)",
            (x.clamp(min=0) + torch.log1p(torch.exp(-x)), None),
            "for x < 0 the output is too large by exactly |x|, and right for x > 0: either the correction term "
            "takes exp(-x), which is right for x > 0 only (and overflows for very negative x), or the first term is "
            "|x| where the stable form has max(x, 0); in the stable form only the correction depends on |x|",
            look="forward: the argument of the exp, and the first term, for a negative x",
        ),
        Mistake(
            "log for log1p",
            _zeros_where(x.clamp(min=0) + torch.log(1 + torch.exp(-x.abs())), right),
            "log(1 + exp(-|x|)) rounds 1 + a tiny number before the log: log1p keeps the tiny number's digits "
            "(torch.logsumexp of x and 0 takes the same log of a sum inside)",
            look="forward: the function that takes the log of 1 plus a tiny number",
        ),
        *_softplus_overflow_mistakes(x),
    ]


def _softplus_overflow_mistakes(x: torch.Tensor) -> list[Mistake]:
    """Forward outputs that overflow, mirror softplus, or lose float64's digits in float32."""
    stable32 = (x.float().clamp(min=0) + torch.log1p(torch.exp(-x.float().abs()))).to(x.dtype)
    return [
        Mistake(
            "forward overflows",
            functools.partial(_inf_where_exp_overflows, x),
            "log(1 + exp(x)) overflows where exp(x) is inf: the stable form never exponentiates a large number",
            look="forward: each exp, and how large its argument can get",
        ),
        Mistake(
            "x + log1p(exp(-x)) overflows",
            functools.partial(_inf_where_exp_overflows, -x),
            "the output is inf exactly where exp(-x) overflows (x very negative): x + log1p(exp(-x)) equals "
            "softplus on paper, but for x < 0 it exponentiates a large number; the stable form takes max(x, 0) and "
            "exp(-|x|), which is never above 1",
            look="forward: each exp, and how large its argument can get for a very negative x",
        ),
        Mistake(
            "softplus of -x",
            (F.softplus(-x), None),
            "the output is log(1 + exp(-x)), softplus of -x, the mirror image of softplus: softplus follows x for "
            "large x and goes to 0 for very negative x, while yours is large for very negative x and goes to 0 for "
            "large x; a sign of x went missing in forward",
            look="forward: the sign of x in each term, beside the stable form",
        ),
        Mistake(
            "forward in float32",
            (stable32, None) if x.dtype != torch.float32 else None,
            "the output has float32's precision: the forward computes in float32 (a .float(), or a float32 "
            "constant) and casts back, so tiny outputs lose their digits; a Function computes in its input's dtype",
            look="forward: every .float() and every tensor it creates",
        ),
    ]


def _zeros_where(wrong: torch.Tensor, right: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate on (output, grad): the output is ``wrong``, exactly 0 where ``wrong`` is 0 and ``right`` is
    not. Only such a case tells the two apart, and a tiny but non-zero output there (float32's) is not
    taken for a rounding to 0."""
    telling = (wrong == 0) & (right != 0)

    def test(got: Any) -> bool:
        out = got[0] if isinstance(got, (tuple, list)) and got else None
        if not telling.any() or not isinstance(out, torch.Tensor) or out.shape != wrong.shape:
            return False
        rest = ~telling
        return bool((out.detach()[telling] == 0).all()) and rel_error(out.detach()[rest], wrong[rest]) < 1e-6

    return test


def _kept_from_the_first_case(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """In a later case of the first case's shape: the output, or the gradient, of the first case kept (a result
    cached by shape, or stored on the class and handed back)."""
    first_x, first_g = _softplus_cases()[0]
    if x.shape != first_x.shape or torch.equal(x, first_x):
        return []
    kept = Mistake(
        "result kept from an earlier call",
        (F.softplus(first_x), None),
        "the output is the one an earlier call gave for other inputs of the same shape: forward hands back a "
        "result it kept (cached by shape, or stored on the class), but every call computes from its own input",
        look="forward: every result it keeps between calls, and what it is keyed by",
    )
    gradient = dataclasses.replace(
        kept, name="gradient kept from an earlier call", matches=(None, first_g * torch.sigmoid(first_x))
    )
    return [kept, gradient]


def _softplus_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """The typical wrong (output, grad_x) of a softplus Function; None: any value."""
    y = F.softplus(x)
    return (
        _softplus_forward_mistakes(x)
        + _kept_from_the_first_case(x, g)
        + [
            Mistake(
                "no grad_output",
                (None, torch.sigmoid(x)),
                "backward returned the local derivative alone: the chain rule multiplies it by grad_output",
                look="backward: the return line: where does grad_output enter it?",
            ),
            Mistake(
                "grad_output passed on unchanged",
                (None, g),
                "backward hands grad_output on as it came, as if softplus were the identity: the chain rule multiplies "
                "it, element by element, by the derivative of softplus at the same position",
                look="backward: what multiplies grad_output",
            ),
            Mistake(
                "sigmoid of the output",
                (None, g * torch.sigmoid(y)),
                "backward takes the sigmoid of the OUTPUT y = softplus(x): the derivative you derived on paper is a "
                "function of one of the two tensors; which one does that formula take?",
                look="backward: which tensor the derivative is computed from, and which one ctx saved",
            ),
            Mistake(
                "sigmoid(-x)",
                (None, g * torch.sigmoid(-x)),
                "the gradient is sigmoid(-x) = 1 / (1 + e^x), which is also exp(-y) with the output y: that is 1 minus "
                "the derivative. The derivative of log(1 + e^x) is close to 1 for large x (where softplus follows x) and "
                "to 0 for very negative x: which way round does yours go?",
                look="backward: the sign of x inside the derivative",
            ),
            *_softplus_sign_mistakes(x, g),
            *_softplus_formula_mistakes(x, g),
            *_softplus_chain_mistakes(x, g),
            Mistake(
                "sigmoid's derivative",
                (None, g * y * (1 - y)),
                "y (1 - y) is the sigmoid's derivative (section 1), not the derivative of softplus",
                look="backward: what multiplies grad_output, and which function that is the derivative of",
            ),
            *_softplus_guard_mistakes(x, g),
            *_softplus_rounding_mistakes(x, g),
            Mistake(
                "gradient times a constant",
                functools.partial(_gradient_times_a_constant, x, g),
                "every element of grad_x is the right gradient times one and the same number: a factor too many in "
                "backward (a division by the number of elements, a 1/2 or a 2 from the formula). backward hands on "
                "dL/dx element by element for the grad_output it is given: any mean over the batch is already in "
                "grad_output, and the derivative of log(1 + e^x) carries no constant factor",
                look="backward: every number that multiplies or divides the gradient",
            ),
        ]
    )


def _softplus_formula_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """Backwards with the wrong sign, half the stable form's derivative, the log's derivative left out, or the
    output's formula given the input."""
    return [
        Mistake(
            "sign flipped",
            (None, -g * torch.sigmoid(x)),
            "the gradient has the right size and the wrong sign: softplus rises everywhere, so its derivative is "
            "positive",
            look="backward: the sign in front of the gradient",
        ),
        Mistake(
            "derivative of max(x, 0) alone",
            (None, g * (x > 0).to(x.dtype)),
            "that is the derivative of max(x, 0) alone: the log1p(exp(-|x|)) term changes with x too, and its "
            "derivative has to be added",
            look="backward: the derivative of each term of the stable form",
        ),
        Mistake(
            "exp(x) alone",
            (None, g * torch.exp(x)),
            "the derivative of log(u) is u' / u: e^x still has to be divided by 1 + e^x",
            look="backward: the derivative of the outer log",
        ),
        Mistake(
            "output formula given the input",
            (None, g * (1 - torch.exp(-x))),
            "1 - exp(-y) wants the OUTPUT y = softplus(x): it was given the input x",
            look="backward: which tensor the formula is given, and which one ctx saved",
        ),
    ]


def _softplus_chain_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """Backwards that take the sigmoid's derivative for softplus's, reduce grad_output before the chain rule, or
    differentiate the wrong function or at the wrong tensor."""
    return [
        Mistake(
            "sigmoid's derivative of x",
            (None, g * torch.sigmoid(x) * (1 - torch.sigmoid(x))),
            "sigmoid(x) (1 - sigmoid(x)) is the derivative of the sigmoid: one differentiation more than softplus's "
            "backward needs",
            look="backward: what multiplies grad_output, and which function that is the derivative of",
        ),
        Mistake(
            "grad_output reduced to one number",
            functools.partial(_one_number_times_sigmoid, x),
            "every element of grad_x is sigmoid(x) times one and the same number: grad_output was summed or "
            "averaged first, but the chain rule multiplies element by element, each element of grad_output with "
            "the derivative at the same position",
            look="backward: what multiplies the derivative, and whether it still has x's shape",
        ),
        *_softplus_misread_mistakes(x, g),
        Mistake(
            "a tanh that is not the derivative",
            functools.partial(_tanh_slope, x, g),
            "the gradient is built from tanh, but not as the derivative of softplus: tanh(x) runs from -1 to 1 and "
            "changes fastest at 0, while the derivative of log(1 + e^x) runs from 0 (x very negative) to 1 (x "
            "large) and is 1/2 at 0; compare the factor and the argument of your tanh with the derivative you "
            "worked out on paper",
            look="backward: the tanh expression, its argument and the numbers around it",
        ),
    ]


def _softplus_misread_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """Backwards that take softplus for its own derivative, or evaluate the derivative at grad_output."""
    return [
        Mistake(
            "softplus as its own derivative",
            (None, g * F.softplus(x)),
            "backward multiplies grad_output by softplus itself, as if softplus were its own derivative the way "
            "exp is: differentiate log(1 + e^x) with the chain rule, the outer log first, then the inner 1 + e^x",
            look="backward: what multiplies grad_output, beside the derivative you worked out on paper",
        ),
        Mistake(
            "derivative taken at grad_output",
            (None, g * torch.sigmoid(g)),
            "the derivative was evaluated at grad_output, the gradient arriving from later layers: the derivative "
            "of softplus is a function of forward's input (or of its output), and grad_output only multiplies it",
            look="backward: which tensor the derivative is computed from",
        ),
    ]


def _softplus_sign_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """A stable sigmoid written by hand in backward that loses the sign of x: it takes |x| (or -|x|) where
    the derivative wants x itself, so it is right for one sign of x only."""
    return [
        Mistake(
            "sigmoid of |x|",
            (None, g * torch.sigmoid(x.abs())),
            "the gradient is right where x > 0 and wrong where x < 0: the derivative was evaluated at |x|, which "
            "drops the sign of x; the |x| of the stable forward does not carry over to its derivative (and a stable sigmoid written by hand needs one formula for "
            "each sign of x)",
            look="backward: what the derivative is evaluated at, for a negative x",
            symptom="right where x > 0, wrong where x < 0",
        ),
        Mistake(
            "sigmoid of -|x|",
            (None, g * torch.sigmoid(-x.abs())),
            "the gradient is right where x < 0 and wrong where x > 0: the derivative was evaluated at -|x| (as in "
            "exp(-|x|) / (1 + exp(-|x|)), the stable sigmoid's formula for negative x), which drops the sign of x: "
            "for x > 0 a stable sigmoid written by hand needs its other formula",
            look="backward: what the derivative is evaluated at, for a positive x",
            symptom="right where x < 0, wrong where x > 0",
        ),
    ]


def _softplus_rounding_mistakes(x: torch.Tensor, g: torch.Tensor) -> list[Mistake]:
    """Backwards with the right formula on paper whose numbers overflow, cancel or lose float64's digits."""
    y = F.softplus(x)
    return [
        Mistake(
            "exp(x) / (1 + exp(x)) overflows",
            functools.partial(_nan_where_exp_overflows, x),
            "the gradient is NaN exactly where exp(x) overflows: an exp of a large number (of x, or of the output, "
            "which is about x there) is inf, and inf / inf or inf - inf is NaN, as in exp(x) / (1 + exp(x)): write "
            "the derivative so that nothing overflows",
            look="backward: each exp, and how large its argument can get",
        ),
        Mistake(
            "backward in float32",
            functools.partial(_float32_gradient, x, g),
            "grad_x has float32's precision: backward computes in float32 (a .float(), or a float32 constant) and "
            "casts back, so tiny gradients (x very negative) round to 0; a Function computes in its input's dtype",
            look="backward: every .float() and every tensor it creates",
        ),
        Mistake(
            "1 - exp(-y) cancels",
            (None, g * (1 - torch.exp(-y))),
            "the gradient loses its digits where it is tiny (x very negative): it subtracts two numbers close to 1 "
            "(1 - exp(-y), 1 - 1/(1 + exp(x)), 1 + tanh(x/2)): how else can the same derivative be written, or "
            "computed, so that nothing close to 1 is subtracted from 1?",
            look="backward: the subtraction from 1, where x is very negative",
        ),
    ]


_SOFTPLUS = _FunctionExercise(
    builtin="torch.nn.functional.softplus",
    reference=F.softplus,
    arguments=("x",),
    cases=_softplus_cases,
    mistakes=_softplus_mistakes,
)


# ------------------------------------------------------------------ 04.4 the classmate's ScaledMatmul


def _scaled_matmul(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * torch.mm(x, w)


def _scaled_matmul_cases() -> list[tuple]:
    """Two scales, each with its own sizes (all different), so neither a number nor a size written into
    backward passes."""
    cases = []
    for k, (scale, n, d_in, d_out) in enumerate(((0.37, 5, 4, 3), (2.5, 3, 6, 2))):
        x, w = _seeded(41 + k, (n, d_in), (d_in, d_out))
        (g,) = _seeded(50 + k, (n, d_out))
        cases.append((x, w, scale, g))
    return cases


#: The planted bug of exercise 04.4, as its rungs say it: what is visibly wrong, a question, where to look.
#: None of them contains the repaired line.
_PLANTED = Mistake(
    "grad_w lacks a factor (the planted bug)",
    None,
    why="forward's output is a product of factors; grad_x keeps all of them that do not depend on x. Which "
    "factor did grad_x keep that grad_w left out?",
    look="the line of the classmate's backward that computes grad_w, beside the one that computes grad_x",
    symptom="every element of grad_w is off by the same factor, while grad_x matches",
)


def _grad_w_other_factor(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor, got: tuple) -> bool:
    """Is grad_x right and grad_w one constant (neither 1 nor ``scale``) times x.T @ grad_output?"""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return False
    grad_x, grad_w = got[1], got[2]
    unscaled = x.t().mm(g).double()
    if not isinstance(grad_x, torch.Tensor) or grad_x.shape != g.mm(w.t()).shape:
        return False
    if not torch.allclose(grad_x.double(), scale * g.mm(w.t()).double(), rtol=1e-6, atol=1e-9):
        return False
    if not isinstance(grad_w, torch.Tensor) or grad_w.shape != unscaled.shape:
        return False
    factor = float((grad_w.double() * unscaled).sum() / unscaled.square().sum())
    if not _a_real_factor(factor):
        return False  # a grad_w of inf or NaN, or zeros: no factor explains it
    if not torch.allclose(grad_w.double(), factor * unscaled, rtol=1e-6, atol=1e-9):
        return False
    return not any(math.isclose(factor, f, rel_tol=1e-6) for f in (1.0, scale))


def _scaled_linear_grads(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The reference gradients of 04.4's ``scale * x @ w`` for the upstream gradient ``g``: (grad_x, grad_w),
    which the mistake builders below alter one way each."""
    return scale * g.mm(w.t()), scale * x.t().mm(g)


def _grad_output_mistakes(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> list[Mistake]:
    """Gradients that leave grad_output out (both, or grad_w alone), or come back in swapped order."""
    grad_x, grad_w = _scaled_linear_grads(x, w, scale, g)
    ones = torch.ones_like(g)
    return [
        Mistake(
            "grad_output ignored",
            (None, scale * ones.mm(w.t()), scale * x.t().mm(ones)),
            "the gradients ignore grad_output: each is the local derivative times grad_output",
            look="the lines that compute grad_x and grad_w: where does grad_output enter them?",
        ),
        Mistake(
            "grad_output ignored in grad_w",
            (None, grad_x, scale * x.t().mm(ones)),
            "grad_w ignores grad_output, while grad_x uses it: grad_w is x's transpose times grad_output (times the "
            "factor), not times a tensor of ones, so every gradient depends on what arrives from later layers",
            look="the line that computes grad_w: where does grad_output enter it?",
        ),
        Mistake(
            "gradients swapped",
            (None, grad_w, grad_x),
            "grad_x and grad_w are returned in swapped order",
            look="the return line of backward: the order of its values, beside forward's arguments",
        ),
    ]


def _transposed_mistakes(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> list[Mistake]:
    """A gradient returned transposed."""
    grad_x, grad_w = _scaled_linear_grads(x, w, scale, g)
    return [
        Mistake(
            "grad_w transposed",
            (None, None, grad_w.t()),
            "grad_w is transposed: a weight's gradient has the weight's shape",
            look="the line that computes grad_w: the order of the factors and their transposes",
        ),
        Mistake(
            "grad_x transposed",
            (None, grad_x.t(), None),
            "grad_x is transposed: an input's gradient has the input's shape",
            look="the line that computes grad_x: the order of the factors and their transposes",
        ),
    ]


def _scaled_matmul_mistakes(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> list[Mistake]:
    """The typical wrong (output, grad_x, grad_w) of ScaledMatmul; None: any value."""
    grad_x, grad_w = _scaled_linear_grads(x, w, scale, g)
    return [
        dataclasses.replace(_PLANTED, matches=(None, grad_x, grad_w / scale)),
        Mistake(
            "grad_x lacks a factor",
            (None, grad_x / scale, grad_w),
            "grad_x is off by the same factor in every element, while grad_w is right: which factor of forward's "
            "output does grad_x leave out?",
            look="the line that computes grad_x, beside the one that computes grad_w",
            symptom="every element of grad_x is off by the same factor, while grad_w matches",
        ),
        Mistake(
            "both gradients lack a factor",
            (None, grad_x / scale, grad_w / scale),
            "both gradients are off by the same factor: forward multiplies x @ w by a number, and the chain rule "
            "carries it into both",
            look="the lines that compute grad_x and grad_w: the numbers each is multiplied by",
        ),
        Mistake(
            "grad_x has the factor twice",
            (None, scale * grad_x, None),
            "grad_x carries the factor scale twice",
            look="the line that computes grad_x: how many times does scale enter it?",
        ),
        Mistake(
            "grad_w has the factor twice",
            (None, None, scale * grad_w),
            "grad_w carries the factor scale twice",
            look="the line that computes grad_w: how many times does scale enter it?",
        ),
        *_grad_output_mistakes(x, w, scale, g),
        *_sign_and_batch_mistakes(x, w, scale, g),
        *_transposed_mistakes(x, w, scale, g),
        Mistake(
            "forward lacks the factor",
            (x.mm(w), None, None),
            "the forward output is x @ w without the factor",
            look="forward: the return line (the classmate's forward is right: inherit it)",
        ),
        Mistake(
            "a fixed factor",
            functools.partial(_fixed_factor, x, w, scale, g),
            f"both gradients carry the same factor, but not this call's scale ({scale:g}): a number written into "
            "backward stays the same whatever scale forward was given",
            look="where the factor in backward comes from",
        ),
        *_grad_w_factor_mistakes(x, w, scale, g),
        Mistake(
            "gradients in float32",
            functools.partial(_float32_precision, (grad_x, grad_w)),
            "the gradients are right to float32's precision only (about 7 digits): backward computes in float32 "
            "(a .float(), or a float32 tensor it creates) and casts back; a Function computes in its input's dtype, "
            "float64 here",
            look="backward: every .float() and every tensor it creates",
        ),
    ]


def _float32_precision(right: tuple, got: tuple) -> bool:
    """Is every gradient right to float32's precision, and one of them not to float64's?"""
    if not isinstance(got, (tuple, list)) or len(got) != len(right) + 1:
        return False
    exact = True
    for grad, want in zip(got[1:], right):
        if not isinstance(grad, torch.Tensor) or grad.shape != want.shape:
            return False
        if not torch.allclose(grad.double(), want, rtol=1e-5, atol=1e-7):
            return False
        exact = exact and torch.allclose(grad.double(), want, rtol=RTOL_FLOAT64, atol=0.0)
    return not exact


def _sign_and_batch_mistakes(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> list[Mistake]:
    """A gradient with the wrong sign, or grad_w averaged over the batch, as a mean loss would be."""
    grad_x, grad_w = _scaled_linear_grads(x, w, scale, g)
    return [
        Mistake(
            "grad_x sign flipped",
            (None, -grad_x, None),
            "grad_x has the right size and the wrong sign: forward multiplies by scale, it subtracts nothing, so no "
            "minus sign enters its gradients",
            look="the line that computes grad_x: its signs",
        ),
        Mistake(
            "grad_w sign flipped",
            (None, grad_x, -grad_w),
            "grad_w has the right size and the wrong sign, while grad_x is right: forward multiplies by scale, it "
            "subtracts nothing, so no minus sign enters its gradients",
            look="the line that computes grad_w: its signs",
        ),
        Mistake(
            "grad_w averaged over the batch",
            (None, grad_x, grad_w / x.shape[0]),
            f"grad_w is divided by the number of rows of x ({x.shape[0]}): forward sums over the rows of x (a "
            "matrix product), so grad_w sums their contributions; a mean, if any, belongs to the loss, and "
            "grad_output already carries it",
            look="the line that computes grad_w: what it divides by",
        ),
    ]


def _grad_w_factor_mistakes(x: torch.Tensor, w: torch.Tensor, scale: float, g: torch.Tensor) -> list[Mistake]:
    """grad_w off by a factor other than the planted bug's, while grad_x is right."""
    grad_x, grad_w = _scaled_linear_grads(x, w, scale, g)
    return [
        Mistake(
            "grad_w divided by the factor",
            (None, grad_x, grad_w / scale**2),
            "grad_w divides by the factor that forward multiplies by: a constant factor of forward's output "
            "reaches each gradient as it is, the same way it reaches grad_x",
            look="the line that computes grad_w, beside the one that computes grad_x",
        ),
        Mistake(
            "grad_w off by another factor",
            functools.partial(_grad_w_other_factor, x, w, scale, g),
            f"every element of grad_w is off by the same factor, but the factor it carries is not this call's "
            f"scale ({scale:g}): a number written into backward, a size, or the sum of some tensor does not follow "
            "the scale forward was given; the only factor forward multiplies by is the scale it was called with",
            look="where the factor in grad_w comes from",
        ),
    ]


_SCALED_MATMUL = _FunctionExercise(
    builtin="scale * torch.mm(x, w)",
    reference=_scaled_matmul,
    arguments=("x", "w", "scale"),
    cases=_scaled_matmul_cases,
    mistakes=_scaled_matmul_mistakes,
)


# ------------------------------------------------------------------ the checks


def _plain_sigmoid_gradient() -> str:
    """Exercise 04.1's experiment: the plain sigmoid's gradient at x = -1000 in float32, as a word."""
    x = torch.tensor(-1000.0, requires_grad=True)
    (grad,) = torch.autograd.grad(1 / (1 + torch.exp(-x)), x)
    value = float(grad)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "0"
    return repr(value)


# 04.1's choices written out in words, as the word the choices use
_WORDS = {"zero": "0", "not a number": "nan", "infinite": "inf", "infinity": "inf"}


def _as_word(prediction: Any) -> Any:
    """A number answer (0, float("inf"), a 0-d tensor, or written as text: "0.0", "Infinity") as the word the
    choices use, the error's own name ("RuntimeError") as "error"; anything else unchanged."""
    __tracebackhide__ = True
    if isinstance(prediction, str):
        word = prediction.strip(" '\"`.!").lower()
        if word in ("runtimeerror", "runtime error", "an error", "raises an error"):
            return "error"
        if word in _WORDS:
            return _WORDS[word]
        try:
            prediction = float(prediction.strip(" '\"`"))
        except ValueError:
            return prediction
    number = isinstance(prediction, (int, float)) and not isinstance(prediction, bool)
    if isinstance(prediction, torch.Tensor) and prediction.numel() == 1 and prediction.device.type != "meta":
        number = prediction.dtype != torch.bool
    if not number:
        return prediction
    value = as_number(prediction, "your prediction", allow_nan=True)
    if math.isnan(value):
        return "nan"
    if value == 0:
        return "0"
    if value == math.inf:
        return "inf"
    return prediction


@exercise("04.1", "predict, then run: the plain sigmoid's gradient at x = -1000", prediction=True)
def check_sigmoid_prediction(prediction: Any) -> None:
    """Run the plain sigmoid's backward at x = -1000 (float32) now and judge the prediction."""
    check_prediction(
        "the plain sigmoid's gradient at x = -1000",
        _as_word(prediction),
        _plain_sigmoid_gradient(),
        choices=("0", "nan", "inf", "error"),
        why="the reciprocal's derivative -1/u^2 is -0 at u = inf, exp's is inf, and -0 * inf is NaN.",
        mistakes={
            "0": "0 is the true (rounded) value: the chain of small steps never computes it.",
            "inf": "exp's local derivative is inf, but it is multiplied by the reciprocal's, which is -0.",
            "error": "PyTorch raises nothing for inf or NaN: they flow on silently.",
        },
        ask="which local derivatives does the backward multiply at x = -1000, and what is their product in float32?",
    )


@exercise("04.2", "Softplus as a Function")
def check_softplus_function(cls: Any) -> None:
    """Check a softplus Function: values, gradients (any grad_output), |x| up to 800, float32, gradcheck."""
    _run_check(cls, _SOFTPLUS, "Softplus")


@exercise("04.4", "fix the classmate's Function")
def check_scaled_matmul_function(cls: Any) -> None:
    """Check ``forward(ctx, x, w, scale) -> scale * x @ w`` and its backward (None for ``scale``)."""
    _run_check(cls, _SCALED_MATMUL, "ScaledMatmul")

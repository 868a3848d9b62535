"""Checks for notebook 04 (custom autograd Functions): ReLU as a Function, a
numerically stable Function (softplus or log-sum-exp), and a Function with two
tensor inputs and a non-tensor argument (``scale * x @ w``).

Every check runs the student's class the same way: the forward against the torch
built-in, the backward against autograd's gradient of the built-in for a random
``grad_output`` (so a forgotten ``grad_output`` shows), then
``torch.autograd.gradcheck`` in float64. Failures are explained: a gradient of
the wrong shape, a forgotten ``grad_output``, the input saved where the output
was needed (or the reverse), the wrong number of returned gradients, a gradient
returned for a non-tensor argument, ``grad_output`` or the input changed in place,
and the function's own typical slips.

Example:
    >>> import torch, labsupport as lab
    >>> class MyReLU(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x.clamp(min=0)
    ...     @staticmethod
    ...     def backward(ctx, grad_output):
    ...         x, = ctx.saved_tensors
    ...         return grad_output * (x > 0)
    >>> lab.check_relu_function(MyReLU)
    PASS  MyReLU: forward matches torch.relu, backward matches autograd on 2 test cases, gradcheck passes (float64)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from .core import CheckError, call_student, describe, expect_tensor, passed, rel_error

__all__ = ["check_relu_function", "check_stable_function", "check_scaled_matmul_function",
           "STABLE_CHOICES"]

#: The functions exercise (b) offers.
STABLE_CHOICES = ("softplus", "logsumexp")

Mistakes = Callable[..., list]


@dataclass
class _Spec:
    """What a check needs to know about one Function exercise."""
    builtin: str                                   # name of the torch reference, for messages
    names: tuple[str, ...]                         # forward's arguments after ctx
    make_args: Callable[[torch.Generator], tuple]  # float64 tensors and plain numbers
    reference: Callable[..., torch.Tensor]         # the built-in, differentiable
    forward_mistakes: Mistakes = lambda *a: []     # (*args) -> [(output, why)]
    backward_mistakes: Mistakes = lambda *a: []    # (*args, out, g) -> [((grads...), why)]
    error_hints: Sequence[tuple[str, str]] = ()    # (text in an exception, what to do)
    extreme: Sequence[tuple] = ()                  # inputs where a naive formula overflows
    stability_hint: tuple[str, str] = ("", "")     # (forward, backward) advice for extreme inputs
    shape_hint: str = ""
    extra_pass: str = ""


def _function_class(fn: Any) -> type:
    """The student's Function subclass, or a CheckError saying what to pass."""
    __tracebackhide__ = True
    Function = torch.autograd.Function
    if isinstance(fn, type) and issubclass(fn, Function):
        return fn
    if isinstance(fn, Function):
        raise CheckError(f"expected the class itself, got an instance of {type(fn).__name__}: pass "
                         f"{type(fn).__name__}, without parentheses.")
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, Function):
        raise CheckError(f"expected the class itself, got {owner.__name__}.apply: pass {owner.__name__}; "
                         f"the check calls .apply on it.")
    if fn is None:
        raise CheckError("expected a subclass of torch.autograd.Function, got None. Did the cell that "
                         "defines the class run?")
    raise CheckError(f"expected a subclass of torch.autograd.Function (class ...(torch.autograd.Function) "
                     f"with static forward(ctx, ...) and backward(ctx, grad_output)), got {describe(fn)}.")


def _hint(text: str, spec: _Spec) -> str:
    general = [
        ("save_for_backward can only save variables",
         "save_for_backward takes tensors only: keep a plain number as an attribute (ctx.scale = scale)."),
        ("must implement either the backward",
         "The class has no backward(ctx, grad_output): add one (a @staticmethod)."),
    ]
    for needle, hint in list(spec.error_hints) + general:
        if needle in text:
            return " " + hint
    return ""


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.replace(" ", "").split(",") if s)


def _explain_autograd_error(exc: BaseException, cls: type, spec: _Spec, args: tuple) -> str:
    """Turn autograd's complaint about a backward's return value into advice."""
    text = str(exc)
    name = cls.__name__
    m = re.search(r"incorrect number of gradients \(expected (\d+), got (\d+)\)", text)
    if m:
        want = ", ".join(f"grad_{n}" if isinstance(a, torch.Tensor) else "None"
                         for n, a in zip(spec.names, args))
        return (f"{name}.backward returned {m.group(2)} gradient(s); expected {m.group(1)}, one per "
                f"argument of forward after ctx ({', '.join(spec.names)}): return ({want}), with None for "
                f"an argument that is not a tensor.")
    m = re.search(r"invalid gradient at index (\d+) - got \[([\d, ]*)\] but expected shape compatible "
                  r"with \[([\d, ]*)\]", text)
    if m:
        i, got, want = int(m.group(1)), _shape(m.group(2)), _shape(m.group(3))
        msg = (f"{name}.backward returned a gradient of shape {got} for {spec.names[i]}, whose shape is "
               f"{want}: each gradient must have the shape of its input.")
        others = [n for n, a in zip(spec.names, args)
                  if isinstance(a, torch.Tensor) and n != spec.names[i] and tuple(a.shape) == got]
        if others:
            msg += (f" It has the shape of {others[0]}: return the gradients in the order of forward's "
                    f"arguments.")
        elif got == want[::-1]:
            msg += " Did you forget a transpose?"
        return msg
    m = re.search(r"different than None at position (\d+)", text)
    if m:
        pos = int(m.group(1)) - 1
        arg = spec.names[pos] if 0 <= pos < len(spec.names) else f"argument {pos + 1}"
        return (f"{name}.backward returned a gradient for {arg}, which is not a tensor: return None in "
                f"its place.")
    return f"{name}.backward raised {type(exc).__name__}: {exc}.{_hint(text, spec)}"


def _forward(cls: type, spec: _Spec, args: tuple) -> tuple[torch.Tensor, tuple]:
    """Run the student's forward on fresh copies; returns (output, inputs)."""
    __tracebackhide__ = True
    inputs = tuple(a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) else a
                   for a in args)
    try:
        out = call_student(cls.apply, *inputs, what=f"{cls.__name__}.apply (your forward)")
    except CheckError as err:
        cause = err.__cause__
        hint = _hint(f"{type(cause).__name__}: {cause}", spec) if cause is not None else ""
        raise CheckError(f"{err}{hint}") from None
    for name, a, given in zip(spec.names, args, inputs):
        if isinstance(a, torch.Tensor) and not torch.equal(given.detach(), a):
            raise CheckError(f"{cls.__name__}.forward changed its input {name} in place: use "
                             f"out-of-place operations ({name}.clamp(min=0), not {name}.clamp_(min=0) "
                             f"or {name}[mask] = 0), so the caller's tensor stays as it was.")
    return out, inputs


def _check_forward(cls: type, spec: _Spec, out: Any, args: tuple) -> torch.Tensor:
    __tracebackhide__ = True
    ref = spec.reference(*args)
    name = f"{cls.__name__}'s forward output"
    if isinstance(out, (tuple, list)) and len(out) == 1 and isinstance(out[0], torch.Tensor):
        raise CheckError(f"{name}: expected a tensor, got a {type(out).__name__} holding one tensor: "
                         f"return the tensor itself.")
    if isinstance(out, torch.Tensor) and tuple(out.shape) != tuple(ref.shape):
        raise CheckError(f"{name} has shape {tuple(out.shape)}; {spec.builtin} gives {tuple(ref.shape)}."
                         f"{' ' + spec.shape_hint if spec.shape_hint else ''}")
    out = expect_tensor(out, name, shape=tuple(ref.shape))
    if out.dtype != ref.dtype:
        raise CheckError(f"{name} has dtype {out.dtype}; expected {ref.dtype} like the input: do not "
                         f"create tensors with a fixed dtype.")
    if rel_error(out, ref) < 1e-8:
        return out
    for wrong, why in spec.forward_mistakes(*args):
        if wrong.shape == out.shape and rel_error(out, wrong) < 1e-8:
            raise CheckError(f"{name} does not match {spec.builtin}: {why}.")
    raise CheckError(f"{name} does not match {spec.builtin} (max rel. error {rel_error(out, ref):.3g}).")


def _student_grads(cls: type, spec: _Spec, out: torch.Tensor, inputs: tuple, args: tuple,
                   g: torch.Tensor) -> list:
    __tracebackhide__ = True
    given = g.clone()
    tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
    try:
        grads = torch.autograd.grad(out, tensors, given, allow_unused=True)
    except NotImplementedError as exc:
        raise CheckError(f"{cls.__name__}.backward is not written yet ({exc}).{_hint(str(exc), spec)} "
                         f"Fill in the exercise cell above, run it, then run this check again.") from None
    except Exception as exc:  # autograd's checks on what backward returned, or the student's own error
        raise CheckError(_explain_autograd_error(exc, cls, spec, args)) from None
    if not torch.equal(given, g):
        raise CheckError(f"{cls.__name__}.backward changed grad_output in place: autograd may still need "
                         f"it. Work on a copy (grad_input = grad_output.clone()) or use out-of-place "
                         f"operations (grad_output * mask).")
    return list(grads)


def _check_backward(cls: type, spec: _Spec, grads: list, args: tuple, g: torch.Tensor) -> None:
    __tracebackhide__ = True
    tensor_args = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) else a
                   for a in args]
    leaves = [a for a in tensor_args if isinstance(a, torch.Tensor)]
    ref_out = spec.reference(*tensor_args)
    refs = torch.autograd.grad(ref_out, leaves, g)
    names = [n for n, a in zip(spec.names, args) if isinstance(a, torch.Tensor)]
    plain_args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    mistakes = spec.backward_mistakes(*plain_args, ref_out.detach(), g)
    for k, (name, got, ref) in enumerate(zip(names, grads, refs)):
        if got is None:
            raise CheckError(f"{cls.__name__}.backward returned None for {name}, which needs a gradient: "
                             f"return d(loss)/d({name}) there (None only for non-tensor arguments).")
        got = expect_tensor(got, f"the gradient {cls.__name__}.backward returned for {name}",
                            shape=tuple(ref.shape))
        if rel_error(got, ref) < 1e-7:
            continue
        for wrong, why in mistakes:
            if wrong[k] is not None and wrong[k].shape == got.shape and rel_error(got, wrong[k]) < 1e-7:
                raise CheckError(f"the gradient for {name} is wrong: {why}.")
        raise CheckError(f"the gradient for {name} does not match autograd's gradient of {spec.builtin} "
                         f"(max rel. error {rel_error(got, ref):.3g}). Write the local derivative on paper "
                         f"and multiply it by grad_output.")


def _check_gradcheck(cls: type, spec: _Spec) -> None:
    __tracebackhide__ = True
    args = spec.make_args(torch.Generator().manual_seed(99))
    inputs = tuple(a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) else a
                   for a in args)
    try:
        ok = torch.autograd.gradcheck(cls.apply, inputs, eps=1e-6, atol=1e-5, rtol=1e-3,
                                      raise_exception=False)
    except Exception as exc:
        raise CheckError(f"torch.autograd.gradcheck could not run {cls.__name__}: "
                         f"{type(exc).__name__}: {exc}") from None
    if not ok:
        raise CheckError(f"torch.autograd.gradcheck fails for {cls.__name__} in float64: its backward "
                         f"disagrees with finite differences of its forward.")


def _check_extreme(cls: type, spec: _Spec) -> None:
    __tracebackhide__ = True
    for args in spec.extreme:
        out, inputs = _forward(cls, spec, args)
        ref = spec.reference(*args)
        x = args[0]
        where = f"{x.dtype} input {x.tolist()}"
        out = expect_tensor(out, f"{cls.__name__}'s forward output", shape=tuple(ref.shape), finite=False)
        if not torch.isfinite(out).all() or rel_error(out, ref) > 1e-6:
            raise CheckError(f"{cls.__name__}'s forward is not stable: for the {where}, expected "
                             f"{_fmt_list(ref)} ({spec.builtin}), got {_fmt_list(out)}. {spec.stability_hint[0]}")
        g = torch.ones_like(ref)
        grads = _student_grads(cls, spec, out, inputs, args, g)
        leaf = args[0].detach().clone().requires_grad_(True)
        want, = torch.autograd.grad(spec.reference(leaf, *args[1:]), leaf, g)
        got = grads[0]
        if got is None or not torch.isfinite(got).all() or rel_error(got, want) > 1e-6:
            shown = "None" if got is None else _fmt_list(got)
            raise CheckError(f"{cls.__name__}'s backward is not stable: for the {where}, expected the "
                             f"gradient {_fmt_list(want)} (autograd through {spec.builtin}), got {shown}. "
                             f"{spec.stability_hint[1]}")


def _fmt_list(t: torch.Tensor) -> str:
    values = t.detach().reshape(-1).tolist()
    shown = ", ".join(f"{v:.3g}" for v in values[:8])
    return f"[{shown}{', ...' if len(values) > 8 else ''}]"


def _run_check(fn: Any, spec: _Spec) -> None:
    __tracebackhide__ = True
    cls = _function_class(fn)
    for case in range(2):
        gen = torch.Generator().manual_seed(40 + case)
        args = spec.make_args(gen)
        out, inputs = _forward(cls, spec, args)
        out = _check_forward(cls, spec, out, args)
        g = torch.randn(out.shape, generator=gen, dtype=out.dtype)
        grads = _student_grads(cls, spec, out, inputs, args, g)
        _check_backward(cls, spec, grads, args, g)
    _check_gradcheck(cls, spec)
    _check_extreme(cls, spec)
    passed(f"{cls.__name__}: forward matches {spec.builtin}, backward matches autograd on 2 test cases, "
           f"gradcheck passes (float64){spec.extra_pass}")


# --------------------------------------------------------------------------- (a) ReLU

def _away_from_zero(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Random float64 values with |x| >= 0.1: the finite differences never straddle the kink."""
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return x.sign() * (x.abs() + 0.1)


_RELU = _Spec(
    builtin="torch.relu",
    names=("x",),
    make_args=lambda gen: (_away_from_zero(gen, 6, 5),),
    reference=torch.relu,
    forward_mistakes=lambda x: [
        (x, "it returns x unchanged; the ReLU is x.clamp(min=0)"),
        (x.clamp(max=0), "it keeps the negative part; the ReLU keeps the positive part, x.clamp(min=0)"),
        ((x > 0).to(x.dtype), "it returns the mask (x > 0); return the values, x.clamp(min=0)"),
    ],
    backward_mistakes=lambda x, out, g: [
        (((x > 0).to(g.dtype),), "it is the mask alone: did you forget to multiply by grad_output?"),
        ((g,), "it is not zero where x < 0. Zero grad_output where the saved input x is negative; a mask "
               "on the saved output selects nothing, since relu(x) is never negative"),
        ((g * (x < 0),), "it is zero where x > 0 instead of where x < 0: the mask is inverted"),
        ((g.clamp(min=0),), "it clamps grad_output; the mask must come from the input x, not from the "
                            "sign of grad_output"),
        ((g * out,), "it multiplies grad_output by the output relu(x); the local derivative is 1 where "
                     "x > 0 and 0 elsewhere"),
    ],
)


def check_relu_function(fn: Any) -> None:
    """Check a ``torch.autograd.Function`` subclass implementing the ReLU.

    Forward against ``torch.relu``; backward against autograd for a random
    ``grad_output``; then ``gradcheck`` in float64 (inputs kept away from the
    kink at 0). Recognised mistakes: forward returns the input, the negative
    part or the mask; forward changes its input in place; backward forgets
    ``grad_output``, applies no mask (or masks on the saved output, which is never
    negative), inverts the mask, clamps ``grad_output``, multiplies by the output,
    changes ``grad_output`` in place, returns the wrong number or shape of
    gradients.

    Example (a backward that forgets ``grad_output``):
        >>> class MyReLU(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x.clamp(min=0)
        ...     @staticmethod
        ...     def backward(ctx, grad_output):
        ...         x, = ctx.saved_tensors
        ...         return (x > 0).to(x.dtype)
        >>> check_relu_function(MyReLU)
        Traceback (most recent call last):
        ...
        labsupport.checks.core.CheckError: the gradient for x is wrong: it is the mask alone: did you forget to multiply by grad_output?.
    """
    __tracebackhide__ = True
    _run_check(fn, _RELU)


# --------------------------------------------------------------------------- (b) stable Function

def _softplus_args(gen: torch.Generator) -> tuple:
    return (3 * torch.randn(5, 4, generator=gen, dtype=torch.float64),)


_SOFTPLUS = _Spec(
    builtin="torch.nn.functional.softplus",
    names=("x",),
    make_args=_softplus_args,
    reference=lambda x: F.softplus(x),
    forward_mistakes=lambda x: [
        (torch.sigmoid(x), "that is sigmoid(x), softplus's derivative; softplus(x) = log(1 + exp(x))"),
        (torch.exp(x), "the log is missing: softplus(x) = log(1 + exp(x))"),
        (torch.log(torch.exp(x)), "the 1 + is missing: softplus(x) = log(1 + exp(x))"),
    ],
    backward_mistakes=lambda x, out, g: [
        ((torch.sigmoid(x),), "it is the local derivative alone: did you forget to multiply by grad_output?"),
        ((g * torch.sigmoid(out),), "it is sigmoid of the saved output; the derivative is sigmoid(x) of "
                                    "the input. Save the input x (or use 1 - exp(-y) with the output y)"),
        ((g * (1 - torch.exp(-x)),), "1 - exp(-y) needs the output y = softplus(x), but you used the input "
                                     "x: save the output instead (or use sigmoid(x) with the input)"),
        ((g * out,), "it multiplies grad_output by the output; the derivative of softplus is sigmoid(x)"),
        ((g * torch.exp(x),), "exp(x) is the derivative of exp; the derivative of log(1 + exp(x)) is "
                              "exp(x) / (1 + exp(x)) = sigmoid(x)"),
    ],
    extreme=[
        (torch.tensor([-1000.0, -100.0, -1.0, 0.0, 1.0, 100.0, 1000.0], dtype=torch.float64),),
        (torch.tensor([-200.0, -90.0, 0.0, 90.0, 200.0], dtype=torch.float32),),
    ],
    stability_hint=(
        "exp(x) overflows for large x: write softplus(x) = max(x, 0) + log1p(exp(-|x|)), which never "
        "exponentiates a positive number.",
        "exp(x) / (1 + exp(x)) becomes inf / inf = NaN for large x: use torch.sigmoid(x) (stable), or "
        "1 - exp(-y) with the saved output y.",
    ),
    extra_pass=", finite and accurate for inputs up to |x| = 1000",
)


def _lse_args(gen: torch.Generator) -> tuple:
    return (2 * torch.randn(4, 6, generator=gen, dtype=torch.float64),)


def _softmax_rows(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.exp(x - out.unsqueeze(-1))


_LOGSUMEXP = _Spec(
    builtin="torch.logsumexp(x, dim=-1)",
    names=("x",),
    make_args=_lse_args,
    reference=lambda x: torch.logsumexp(x, dim=-1),
    forward_mistakes=lambda x: [
        (x.exp().sum(-1), "the log is missing: log(sum(exp(x)))"),
        (x.max(-1).values, "that is the max alone: add log(sum(exp(x - max)))"),
        (torch.log(torch.exp(x - x.max(-1, keepdim=True).values).sum(-1)),
         "the max you subtracted inside the exp must be added back: m + log(sum(exp(x - m)))"),
    ],
    backward_mistakes=lambda x, out, g: [
        ((_softmax_rows(x, out),), "it is the softmax alone: did you forget to multiply by grad_output "
                                   "(grad_output.unsqueeze(-1) * softmax)?"),
        ((g.unsqueeze(-1) * torch.exp(x),), "exp(x) is not the gradient: the derivative of log(sum(exp(x))) "
                                            "is the softmax exp(x - y), with the saved output y"),
        ((g.unsqueeze(-1) * torch.softmax(x, dim=0),), "the softmax must run over the last dimension "
                                                       "(the one that was summed), not dim 0"),
        ((g.unsqueeze(-1).expand_as(x),), "the local derivative (the softmax) is missing"),
    ],
    error_hints=[
        ("must match the size of tensor",
         "grad_output has the output's shape (one value per row): use grad_output.unsqueeze(-1) so it "
         "broadcasts over the reduced dimension."),
    ],
    extreme=[
        (torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]], dtype=torch.float64),),
        (torch.tensor([[100.0, 90.0, 0.0], [-200.0, -201.0, -300.0]], dtype=torch.float32),),
    ],
    stability_hint=(
        "exp overflows (or underflows to log(0)) for large |x|: subtract the row maximum m first and "
        "add it back, m + log(sum(exp(x - m)), dim=-1).",
        "exp(x) / sum(exp(x)) becomes inf / inf or 0 / 0: compute the softmax as exp(x - y) with the "
        "saved output y = logsumexp(x) (y.unsqueeze(-1) to broadcast).",
    ),
    shape_hint="Reduce over the last dimension only (dim=-1), without keepdim.",
    extra_pass=", finite and accurate for inputs up to |x| = 2000",
)


def check_stable_function(fn: Any, choice: str) -> None:
    """Check a numerically stable ``torch.autograd.Function``: ``choice`` is
    ``"softplus"`` (element-wise ``log(1 + exp(x))``) or ``"logsumexp"``
    (``log(sum(exp(x)))`` over the last dimension).

    Besides forward, backward and gradcheck on ordinary inputs, the Function must
    stay finite and accurate for inputs up to |x| = 1000 (float64) and in
    float32, where the naive formulas overflow. Recognised mistakes (softplus):
    naive ``log(1 + exp(x))``, sigmoid/exp/missing ``1 +`` in the forward; backward
    without ``grad_output``, sigmoid of the saved output (output saved where the
    input was needed), ``1 - exp(-x)`` (input saved where the output was needed),
    multiplied by the output, ``exp(x)``, unstable ``exp(x) / (1 + exp(x))``.
    (logsumexp): missing log, max alone, max not added back, ``keepdim`` or the
    wrong dimension; backward without ``grad_output``, ``exp(x)`` instead of the
    softmax, softmax over the wrong dimension, ``grad_output`` not unsqueezed,
    unstable ``exp(x) / sum(exp(x))``.

    Example:
        >>> class Softplus(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))
        ...     @staticmethod
        ...     def backward(ctx, grad_output):
        ...         x, = ctx.saved_tensors
        ...         return grad_output * torch.sigmoid(x)
        >>> check_stable_function(Softplus, "softplus")  # doctest: +NORMALIZE_WHITESPACE
        PASS  Softplus: forward matches torch.nn.functional.softplus, backward matches autograd on 2 test
        cases, gradcheck passes (float64), finite and accurate for inputs up to |x| = 1000
    """
    __tracebackhide__ = True
    specs = {"softplus": _SOFTPLUS, "logsumexp": _LOGSUMEXP}
    if not isinstance(choice, str) or choice.strip().lower().replace("-", "").replace("_", "") not in specs:
        raise CheckError(f"choice must be one of {', '.join(repr(c) for c in STABLE_CHOICES)}, got "
                         f"{choice!r} ({describe(choice)}).")
    _run_check(fn, specs[choice.strip().lower().replace("-", "").replace("_", "")])


# --------------------------------------------------------------------------- (c) two inputs and a number

SCALE = 0.37


def _mm_args(gen: torch.Generator) -> tuple:
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    w = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    return x, w, SCALE


_SCALED_MM = _Spec(
    builtin="scale * torch.mm(x, w)",
    names=("x", "w", "scale"),
    make_args=_mm_args,
    reference=lambda x, w, scale: scale * torch.mm(x, w),
    forward_mistakes=lambda x, w, scale: [
        (x.mm(w), "the factor scale is missing"),
        (x.mm(w) / scale, "it divides by scale; multiply"),
        (x.mm(w) * scale ** 2, "scale is applied twice"),
    ],
    backward_mistakes=lambda x, w, scale, out, g: [
        ((g.mm(w.t()), x.t().mm(g)), "the factor scale is missing: d(scale * x @ w) carries scale into "
                                     "both gradients"),
        ((torch.ones_like(g).mm(w.t()) * scale, x.t().mm(torch.ones_like(g)) * scale),
         "it does not depend on grad_output: did you forget to multiply by grad_output?"),
        ((g.mm(w.t()) * scale ** 2, x.t().mm(g) * scale ** 2), "scale is applied twice"),
        ((g.mm(w.t()) / scale, x.t().mm(g) / scale), "it divides by scale; multiply"),
    ],
    error_hints=[
        ("cannot be multiplied",
         "Check the transposes: grad_x = grad_output @ w.T has x's shape (N, D_in), grad_w = x.T @ "
         "grad_output has w's shape (D_in, D_out)."),
    ],
)


def check_scaled_matmul_function(fn: Any) -> None:
    """Check a ``torch.autograd.Function`` computing ``scale * x @ w`` from
    ``forward(ctx, x, w, scale)``, where ``scale`` is a plain Python number.

    ``backward`` must return three values: the gradients for ``x`` and ``w`` and
    ``None`` for ``scale``. Recognised mistakes: scale missing, divided or applied
    twice (forward or backward); ``grad_output`` forgotten; two values returned
    instead of three; a gradient returned for ``scale``; gradients swapped or of
    the wrong shape (a missing transpose); ``save_for_backward`` given the number.

    Example:
        >>> class ScaledMatmul(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x, w, scale):
        ...         ctx.save_for_backward(x, w)
        ...         ctx.scale = scale
        ...         return scale * x.mm(w)
        ...     @staticmethod
        ...     def backward(ctx, grad_output):
        ...         x, w = ctx.saved_tensors
        ...         return ctx.scale * grad_output.mm(w.t()), ctx.scale * x.t().mm(grad_output), None
        >>> check_scaled_matmul_function(ScaledMatmul)  # doctest: +NORMALIZE_WHITESPACE
        PASS  ScaledMatmul: forward matches scale * torch.mm(x, w), backward matches autograd on 2 test
        cases, gradcheck passes (float64)
    """
    __tracebackhide__ = True
    _run_check(fn, _SCALED_MM)

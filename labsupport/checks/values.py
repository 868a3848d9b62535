"""What a check does with a student's value: describe it, normalise it, validate it, compare it.

Every comparison here refuses NaN and inf, names a wrong dtype or an extra leading
dimension as such (before autograd could cast or sum it away), refuses the meta
device, and never trusts a subclass's own ``==``: str, int, float and tensor
subclasses are turned into the plain type first.
"""

from __future__ import annotations

import decimal
import fractions
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .feedback import CheckError, Mistake

#: What a check says of ``...`` where an answer belongs.
PLACEHOLDER = "... is the placeholder the prompt left: this part of the answer is not written yet"


def describe(value: Any) -> str:
    """A short description: type, shape, dtype and device for tensors. An object that raises when asked (a
    ``__len__`` that raises, a tensor subclass whose overrides lie) is described by its type's name."""
    try:
        return _described(value)
    except Exception:
        return type(value).__name__


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = plain_tensor(value)
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}, on {value.device}"
    kind = type(value).__name__
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return f"numpy.{kind} of shape {tuple(value.shape)}, dtype {value.dtype}"
    if value is None:
        return "None"
    if value is Ellipsis:
        return "... (the placeholder)"
    if isinstance(value, (int, float, complex, bool)):
        return f"{kind} {plain(value)!r}"
    if isinstance(value, (list, tuple, dict, set, str)):
        return f"{kind} of length {len(value)}"
    return kind


def fmt(x: float) -> str:
    """A number in 3 significant digits (stable across machines)."""
    return f"{x:.3g}"


def fmt_apart(expected: float, got: float) -> tuple[str, str]:
    """``expected`` and ``got`` in 3 significant digits, or in as many more (up to 17, where every float differs) as two different
    numbers need not to print alike ("expected 1.305e+14; got 1.300e+14", never "1.3e+14; got 1.3e+14").
    Past 3 digits both keep their trailing zeros, so that they read at one precision ("2.334; got 2.330",
    not "2.334; got 2.33").

    Example:
        >>> fmt_apart(1.305e14, 1.3e14)
        ('1.305e+14', '1.300e+14')
        >>> fmt_apart(2.33, 2.5)
        ('2.33', '2.5')
        >>> fmt_apart(1234.0, 1233.6)
        ('1234.0', '1233.6')
    """
    shown = f"{expected:.3g}", f"{got:.3g}"
    digits = 3
    while shown[0] == shown[1] and expected != got and digits < 17:
        digits += 1
        shown = _same_digits(expected, digits), _same_digits(got, digits)
    return shown


def _same_digits(x: float, digits: int) -> str:
    """``x`` in ``digits`` significant digits, trailing zeros kept (a whole number keeps no bare point)."""
    return f"{x:#.{digits}g}".replace(".e", "e").removesuffix(".")


def scalar_of(value: Any) -> Any:
    """A one-element tensor (not on the meta device) or numpy value as a Python number; anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        return value.detach().cpu().item()
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "size", 2) == 1:
        return value.item()
    return value


def plain(value: Any) -> Any:
    """``value`` with str/int/float/bool subclasses turned into the plain type (whose ``==``
    cannot lie), lists and tuples element by element; anything else unchanged."""
    if isinstance(value, bool):
        return bool.__bool__(value) if type(value) is not bool else value
    if isinstance(value, int) and type(value) is not int:
        return int.__int__(value)
    if isinstance(value, float) and type(value) is not float:
        return float.__float__(value)
    if isinstance(value, str) and type(value) is not str:
        return str.__str__(value)
    if isinstance(value, (list, tuple)):
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        return tuple(plain(item) for item in items)
    return value


def under_a_transform(t: torch.Tensor) -> bool:
    """Is ``t`` a torch.func wrapper (vmap's batched tensor, one call for many points; grad's tracking tensor),
    whose values a check cannot read out or copy?"""
    is_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
    return is_wrapped is not None and bool(is_wrapped(t))


def plain_tensor(value: torch.Tensor) -> torch.Tensor:
    """A tensor subclass as a plain ``torch.Tensor`` (its overrides cannot answer for it)."""
    if type(value) in (torch.Tensor, torch.nn.Parameter):
        return value
    with torch._C.DisableTorchFunction():
        return value.as_subclass(torch.Tensor)


def as_number(value: Any, name: str, *, allow_nan: bool = False) -> float | int:
    """A plain Python number from an int, a float, a Decimal or Fraction, a 0-d tensor or a numpy scalar;
    anything else (a bool, a string, a tensor of several elements, NaN) is refused with a sentence."""
    __tracebackhide__ = True
    dtype = None  # a tensor's: float16 overflows where float32 does not
    if isinstance(value, torch.Tensor):
        value = plain_tensor(value)
        dtype = value.dtype
        if value.numel() != 1:
            raise CheckError(
                f"{name} must be one number",
                got=describe(value),
                hint="reduce it to one value, then convert it with .item()",
                usage=True,
            )
        if value.device.type == "meta":
            raise CheckError(f"{name} is on the meta device, which holds no values", got=describe(value), usage=True)
    value = scalar_of(value)
    given = value
    value = plain(value)
    if isinstance(value, (decimal.Decimal, fractions.Fraction)):  # exact numbers: 3/4 is a number, too
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = "write the number without quotes" if isinstance(value, str) else None
        if value is Ellipsis:
            hint = PLACEHOLDER
        elif isinstance(value, tuple):
            hint = "one number is asked, and a tuple or list holds several (a comma in a return line makes a tuple)"
        elif callable(value):
            hint = "a function was given where the number it computes belongs"
        if value is None:
            hint = (
                "it is still None, the exercise cell's placeholder: write your answer in that cell and run it (a "
                "function without a return statement gives None too: print shows a number, return hands it back)"
            )
        raise CheckError(f"{name} must be a number", got=describe(given), hint=hint, usage=True)  # a list is a list
    if not allow_nan and isinstance(value, float) and not math.isfinite(value):  # an int is finite, however large
        hint = None
        if dtype in (torch.float16, torch.bfloat16) and math.isinf(value):
            hint = f"{dtype} holds numbers up to {torch.finfo(dtype).max:g} only: compute it in float32"
        raise CheckError(f"{name} is not a finite number", got=repr(value), hint=hint, usage=True)
    return value


def expect_count(value: Any, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An argument of a check that must be a whole number in ``[minimum, maximum]`` (cases, steps)."""
    __tracebackhide__ = True
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CheckError(f"{name} must be a whole number >= {minimum}, got {describe(value)}", usage=True)
    if maximum is not None and value > maximum:
        raise CheckError(
            f"{name} must be at most {maximum} (got {value}): the check would run for minutes",
            usage=True,
        )
    return value


def _not_a_tensor(value: Any, name: str, want: str) -> CheckError:
    if value is None:
        return CheckError(
            f"{name} is None",
            expected=want,
            got="None",
            hint="nothing was handed back: the function that makes it has no `return` for it yet (a stub left as ... "
            "or pass, a print instead of a return, a change made in place with nothing returned), or a cell that "
            "defines it has not run",
            usage=True,
        )
    hint = None
    if value is Ellipsis:
        hint = PLACEHOLDER
    elif type(value).__module__ == "numpy":
        hint = (
            "stay in torch throughout: a NumPy function turned the result into an array, which autograd cannot "
            "follow (torch has its own version of the function, with dim= for axis=)"
        )
    elif isinstance(value, tuple):
        hint = (
            "a tuple where one tensor belongs: does the function hand back more than was asked (its result and "
            "something else), or pieces that belong in one tensor?"
        )
    elif isinstance(value, list):
        hint = "build it with torch operations (or torch.stack / torch.tensor)"
    elif isinstance(value, (int, float)):
        hint = "keep the result as a tensor (drop .item() / float())"
    return CheckError(f"{name} is not a tensor", expected=want, got=describe(value), hint=hint, usage=True)


def _shape_error(value: torch.Tensor, name: str, shape: tuple) -> CheckError:
    got = tuple(value.shape)
    leading = got[1:] == shape or (len(got) == len(shape) + 1 and got[0] == 1)
    trailing = got[:-1] == shape and not (got[1:] == shape and got[0] == 1)
    if leading and not trailing:
        return CheckError(
            f"{name} has an extra leading dimension",
            expected=f"shape {shape}",
            got=f"shape {got}",
            hint="a batch or stacking axis was kept: the result should not have it",
        )
    if trailing:  # (N, C) for (N,): a product not summed, an index not taken; with N == C either end fits
        return CheckError(
            f"{name} has one dimension too many" if leading else f"{name} has an extra trailing dimension",
            expected=f"shape {shape}",
            got=f"shape {got}",
            hint="an axis that should be reduced (summed, indexed or squeezed) was kept",
        )
    message = f"{name} has the wrong shape"
    hint = None
    if len(shape) == 2 and got == shape[::-1] and got != shape:
        hint = "a transpose is missing (or one too many)"
    elif value.numel() == math.prod(shape):
        hint = "the number of elements is right: check the order of a reshape/view/permute"
    elif not got and shape:
        hint = "you reduced over everything where a dimension should stay"
    return CheckError(message, expected=f"shape {shape}", got=f"shape {got}", hint=hint)


def expect_tensor(
    value: Any,
    name: str,
    *,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    finite: bool = True,
) -> torch.Tensor:
    """Return ``value`` (as a plain tensor) if it has these properties, else raise a
    CheckError naming ``name``, what was expected and what came. The meta device is always refused."""
    __tracebackhide__ = True
    want = "a torch.Tensor" + (f" of shape {tuple(shape)}" if shape is not None else "")
    if not isinstance(value, torch.Tensor):
        raise _not_a_tensor(value, name, want)
    value = plain_tensor(value)  # first: a subclass's overrides may lie about is_nested, layout or shape
    if value.is_nested or value.layout != torch.strided:
        kind = "nested" if value.is_nested else str(value.layout).removeprefix("torch.")
        raise CheckError(
            f"{name} is a {kind} tensor; the check compares plain (dense) tensors",
            expected=want,
            got=f"a {kind} tensor",
            hint="return an ordinary tensor: .to_dense() turns a sparse one into one, and a nested one's pieces "
            "can be stacked or padded",
            usage=True,
        )
    if value.device.type == "meta":
        raise CheckError(
            f"{name} is on the meta device, which holds shapes but no values",
            got=describe(value),
            hint="compute it on a real device (the CPU, or the notebook's device)",
            usage=True,
        )
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise _shape_error(value, name, tuple(shape))
    if dtype is not None and value.dtype != dtype:
        raise CheckError(
            f"{name} has the wrong dtype",
            expected=str(dtype),
            got=str(value.dtype),
            hint="a tensor created without dtype= (or with another one), or a .float()/.half()/.double() call",
        )
    if device is not None and value.device.type != torch.device(device).type:
        raise CheckError(
            f"{name} is on the wrong device",
            expected=str(torch.device(device)),
            got=str(value.device),
            hint="move it with .to(device); create new tensors with device=...",
        )
    if finite and (value.is_floating_point() or value.is_complex()) and not torch.isfinite(value).all():
        nans = int(torch.isnan(value).sum())
        infs = int(torch.isinf(value).sum())
        raise CheckError(
            f"{name} is not finite",
            expected="finite numbers",
            got=f"{nans} NaN and {infs} inf",
            hint="where does the first NaN or inf appear? A division by zero, the log of 0, an exp that "
            "overflows, or values that grew step by step",
        )
    return value


def rel_error(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-10) -> float:
    """Largest ``|x - y| / max(|x| + |y|, eps)`` in float64 (inf if either is not finite)."""
    a = plain_tensor(x).detach().double().cpu()
    b = plain_tensor(y).detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.inf
    return float(((a - b).abs() / (a.abs() + b.abs()).clamp(min=eps)).max())


def as_mistakes(mistakes: Sequence[Any] | None) -> list[Mistake]:
    """Mistakes as :class:`Mistake` objects (a ``(wrong, why)`` pair becomes one named by its text)."""
    result = []
    for item in mistakes or ():
        if isinstance(item, Mistake):
            result.append(item)
        else:
            wrong, why = item
            result.append(Mistake(name=why, matches=wrong, why=why))
    return result


def matches(got: Any, wrong: Any, tol: float = 1e-6) -> bool:
    """Does ``got`` equal a known wrong answer (a value, a tuple of values with None for
    "any", or a predicate)? A predicate that cannot handle the answer does not match, and neither does a complex
    tensor (no listed mistake is one; casting it to a real dtype would warn on stderr)."""
    if isinstance(got, torch.Tensor) and plain_tensor(got).is_complex():
        return False
    try:
        if callable(wrong) and not isinstance(wrong, torch.Tensor):
            return bool(wrong(got))
        if isinstance(wrong, torch.Tensor):
            if not isinstance(got, torch.Tensor) or got.shape != wrong.shape:
                return False
            return rel_error(got, wrong) < tol
        if isinstance(wrong, (tuple, list)):
            if not isinstance(got, (tuple, list)) or len(got) != len(wrong):
                return False
            return all(w is None or matches(g, w, tol) for g, w in zip(got, wrong))
        return plain(got) == wrong
    except Exception as exc:
        if os.environ.get("LAB_STRICT_PREDICATES") and _raised_by_the_lab(exc):
            raise  # a name or import error in the lab's own predicate: the tests set this, a student never does
        return False


def _raised_by_the_lab(exc: Exception) -> bool:
    """Is ``exc`` a NameError, ImportError or UnboundLocalError whose innermost frame is labsupport's code (a bug
    of a predicate's, which ``matches`` would otherwise read as "no match", silently)?"""
    if not isinstance(exc, (NameError, ImportError)):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).is_relative_to(Path(__file__).parent)


def first_mistake(got: Any, mistakes: Sequence[Any] | None) -> Mistake | None:
    """The first known mistake that ``got`` matches, or None."""
    for mistake in as_mistakes(mistakes):
        if matches(got, mistake.matches):
            return mistake
    return None


def mistake_error(message: str, mistake: Mistake, **facts: Any) -> CheckError:
    """A CheckError for an answer that matched a known mistake."""
    return CheckError(
        message,
        hint=mistake.why,
        look=mistake.look,
        mistake=mistake.name,
        got=facts.get("got", mistake.symptom),
        expected=facts.get("expected"),
    )


def _name_by_value(err: CheckError, got: Any, expected: torch.Tensor, mistakes: Sequence[Any]) -> None:
    """A wrong shape that a listed mistake gives exactly (its value, shape and all: a batch summed, an axis
    squeezed) is named as that mistake; predicates are not asked, since they were written for the right shape."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) == tuple(expected.shape):
        return
    by_value = [m for m in as_mistakes(mistakes) if isinstance(m.matches, torch.Tensor)]
    mistake = first_mistake(got, by_value)
    if mistake is not None:
        err.hint, err.look, err.mistake = mistake.why, mistake.look, mistake.name


def _left_unfilled(got: torch.Tensor, wrong: torch.Tensor) -> str | None:
    """What a result that is still 0 from some entry on says (``wrong`` marks the entries off the reference):
    a result never filled in, or a loop that stopped early; None otherwise."""
    flat_got = got.reshape(-1)
    first = int(wrong.reshape(-1).int().argmax())
    if flat_got[first:].any():
        return None
    if first == 0:
        return (
            "every entry is exactly 0, unlike the reference: a result created as zeros and never filled in (a step "
            "not written yet), or a factor that is always 0"
        )
    return (
        f"the first {first} entries (in row-major order) are right and every later one is still 0: a loop that "
        "stopped early, after its first pass or short of the last index (a return inside it, or a range too short)"
    )


def _at_element(flat: int, shape: torch.Size) -> str:
    """The words "at element (i, j)" for the ``flat``-th entry of a tensor of ``shape``; none for a single number."""
    if shape.numel() <= 1:
        return ""
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape)))
    return f" at element {index}"


def compare(
    name: str,
    got: Any,
    expected: torch.Tensor,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    mistakes: Sequence[Any] = (),
    hint: str | None = None,
    dtype: bool = True,
    where: str = "",
) -> float:
    """Validate ``got`` against the reference ``expected`` (type, exact shape, dtype,
    device, finite), then compare values; a mismatch names the first known mistake
    it matches, else the worst element. ``where`` says which case ("in case 2").
    Returns the max relative error."""
    __tracebackhide__ = True
    expected = plain_tensor(expected).detach()
    if not torch.isfinite(expected).all():
        raise CheckError(
            f"the reference for {name} is not finite, so nothing can match it",
            hint="the inputs the check was given (your earlier results?) hold NaN or inf, or are too large: "
            "fix those first",
            usage=True,
        )
    try:
        got = expect_tensor(
            got, name, shape=tuple(expected.shape), dtype=expected.dtype if dtype else None, device=expected.device
        )
    except CheckError as err:
        if where:  # which case gave the wrong shape, dtype or device: a sizes-dependent answer shows itself
            err.message = f"{err.message} {where}"
        if isinstance(got, torch.Tensor):
            got = plain_tensor(got)  # the mistakes are matched by its values, not by what its overrides say
        _name_by_value(err, got, expected, mistakes)
        err.args = (err._text(),)
        raise
    g = got.detach().double().cpu()
    e = expected.double().cpu()
    excess = (g - e).abs() - (atol + rtol * e.abs())
    if g.numel() == 0 or float(excess.max()) <= 0:
        return rel_error(got, expected)
    flat = int(excess.argmax())
    message = (
        f"{name} does not match the reference{(' ' + where) if where else ''}{_at_element(flat, e.shape)} "
        f"(max abs. error {fmt(float((g - e).abs().max()))}; tolerance rtol={rtol:g}, atol={atol:g})"
    )
    mistake = first_mistake(got, mistakes)
    if mistake is None and hint is None:
        hint = _left_unfilled(g, excess > 0)
    shown_expected, shown_got = fmt_apart(float(e.reshape(-1)[flat]), float(g.reshape(-1)[flat]))
    error = CheckError(
        message,
        expected=shown_expected,
        got=shown_got,
        hint=mistake.why if mistake else hint,
        look=mistake.look if mistake else None,
        mistake=mistake.name if mistake else None,
    )
    raise error

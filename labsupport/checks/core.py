"""The checks' shared machinery: argument validation, closeness, numeric gradients.

Every check in the lab follows three rules:

* the reference is computed at check time by an independent method;
* a failure raises :class:`CheckError` with *expected ..., got ...* and, when it
  can tell, the likely mistake;
* a success prints one stable ``PASS`` line.

Example:
    >>> import torch, labsupport as lab
    >>> a = torch.ones(2, 3)
    >>> lab.check_close("a", a, torch.ones(2, 3))
    PASS  a: matches the reference (max rel. error 0 < 1e-05)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import torch

__all__ = ["CheckError", "describe", "expect_tensor", "rel_error", "check_close",
           "numeric_gradient", "check_gradients", "call_student", "passed"]


class CheckError(AssertionError):
    """A check failed. The message says what was expected, what came, and why.

    It subclasses AssertionError, so a failing check stops "Run all" like an assert.

    Example:
        >>> try:
        ...     expect_tensor(None, "grad_w1")
        ... except CheckError as err:
        ...     print(err)
        grad_w1: expected a torch.Tensor, got None. Did the cell that computes grad_w1 run, and does your function end with `return`?
    """


def passed(message: str) -> None:
    """Print the one-line success verdict every check ends with.

    Example:
        >>> passed("forward: shapes and values match")
        PASS  forward: shapes and values match
    """
    print(f"PASS  {message}")


def describe(value: Any) -> str:
    """A short description of ``value``: type, shape, dtype and device for tensors.

    Example:
        >>> describe(torch.zeros(2, 3))
        'tensor of shape (2, 3), dtype torch.float32, on cpu'
        >>> describe([1, 2])
        'list of length 2'
    """
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}, on {value.device}"
    kind = type(value).__name__
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return f"numpy.{kind} of shape {tuple(value.shape)}, dtype {value.dtype}"
    if isinstance(value, (list, tuple, dict, set, str)):
        return f"{kind} of length {len(value)}"
    if isinstance(value, (int, float, complex, bool)):
        return f"{kind} {value!r}"
    return kind


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def expect_tensor(value: Any, name: str, *, shape: Sequence[int] | None = None,
                  dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                  finite: bool = True) -> torch.Tensor:
    """Validate that ``value`` is a tensor with the given properties; return it.

    Raises :class:`CheckError` with a one-line message naming ``name``, what was
    expected and what came (``None``, a list, a numpy array, a wrong shape,
    dtype or device, NaN or inf).

    Example:
        >>> expect_tensor(torch.zeros(3), "bias", shape=(3,)).shape
        torch.Size([3])
    """
    __tracebackhide__ = True
    want = "a torch.Tensor"
    if shape is not None:
        want += f" of shape {tuple(shape)}"
    if value is None:
        raise CheckError(f"{name}: expected {want}, got None. Did the cell that computes "
                         f"{name} run, and does your function end with `return`?")
    if not isinstance(value, torch.Tensor):
        hint = ""
        if type(value).__module__ == "numpy":
            hint = " Convert with torch.from_numpy(...), or stay in torch throughout."
        elif isinstance(value, (list, tuple)):
            hint = " Build it with torch operations (or torch.stack / torch.tensor) instead."
        elif isinstance(value, (int, float)):
            hint = " Keep the result as a tensor (drop .item() / float())."
        raise CheckError(f"{name}: expected {want}, got {describe(value)}.{hint}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        hint = ""
        if len(shape) == 2 and tuple(value.shape) == tuple(shape)[::-1] and shape[0] != shape[1]:
            hint = " Did you forget a transpose?"
        elif value.numel() == math.prod(shape):
            hint = " The number of elements is right: check the order of a reshape/view."
        elif value.dim() == 0 and len(shape) > 0:
            hint = " Did you sum (or average) over everything where you should have kept a dimension?"
        raise CheckError(f"{name} has shape {tuple(value.shape)}; expected {tuple(shape)}.{hint}")
    if dtype is not None and value.dtype != dtype:
        raise CheckError(f"{name} has dtype {value.dtype}; expected {dtype}. Mixing dtypes "
                         f"usually comes from creating a tensor without dtype= or calling .double()/.float().")
    if device is not None and value.device.type != torch.device(device).type:
        raise CheckError(f"{name} is on {value.device}; expected {torch.device(device)}. "
                         f"Move it with .to(device) (and create new tensors with device=...).")
    if finite and value.is_floating_point() and not torch.isfinite(value).all():
        n_nan = int(torch.isnan(value).sum())
        n_inf = int(torch.isinf(value).sum())
        raise CheckError(f"{name} contains {n_nan} NaN and {n_inf} inf value(s); expected finite "
                         f"numbers. A learning rate that is too large, a division by zero or "
                         f"log/exp overflow are the usual causes.")
    return value


def rel_error(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-10) -> float:
    """Largest relative error ``|x - y| / max(|x| + |y|, eps)`` over all elements.

    Both arguments must be tensors of the same shape. Computed in float64.

    Example:
        >>> rel_error(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
        0.0
    """
    __tracebackhide__ = True
    y = expect_tensor(y, "second argument of rel_error", finite=False)
    x = expect_tensor(x, "first argument of rel_error", shape=tuple(y.shape), finite=False)
    a, b = x.detach().double().cpu(), y.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    err = (a - b).abs() / (a.abs() + b.abs()).clamp(min=eps)
    return float(err.max())


def check_close(name: str, got: Any, expected: torch.Tensor, *, rtol: float = 1e-5,
                atol: float = 1e-8, hint: str | None = None, quiet: bool = False) -> None:
    """Check ``got`` against the reference ``expected``; print PASS or raise.

    ``got`` must match ``expected`` in shape, dtype and device and be finite.
    Values count as close when ``|got - expected| <= atol + rtol * |expected|``
    everywhere (as in :func:`torch.allclose`). On failure the message gives the
    worst element's index and both values, the max abs/rel errors, and ``hint``.
    Like every check it returns nothing, so a cell ending in a check shows only
    its verdict.

    Example:
        >>> check_close("y", torch.tensor([1.0]), torch.tensor([1.0]))
        PASS  y: matches the reference (max rel. error 0 < 1e-05)
    """
    __tracebackhide__ = True
    expected = expected.detach()
    got = expect_tensor(got, name, shape=tuple(expected.shape), dtype=expected.dtype,
                        device=expected.device)
    err = rel_error(got, expected)
    g = got.detach().double().cpu()
    e = expected.double().cpu()
    excess = (g - e).abs() - (atol + rtol * e.abs())
    if g.numel() and float(excess.max()) > 0:
        flat = int(excess.argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(e.shape))) if e.dim() else ()
        abs_err = float((g - e).abs().max())
        msg = (f"{name} does not match the reference: worst element {idx}: expected "
               f"{_fmt(float(e.reshape(-1)[flat]))}, got {_fmt(float(g.reshape(-1)[flat]))} "
               f"(max abs. error {_fmt(abs_err)}, max rel. error {_fmt(err)}; "
               f"tolerance rtol={rtol:g}, atol={atol:g}).")
        if hint:
            msg += f" {hint}"
        raise CheckError(msg)
    if not quiet:
        passed(f"{name}: matches the reference (max rel. error {_bound(err)} < {rtol:g})")


def _bound(err: float) -> str:
    """A stable way to print a small error: its order of magnitude, not its digits."""
    if err == 0:
        return "0"
    return f"1e{math.floor(math.log10(err)):d}" if err < 1 else _fmt(err)


def call_student(fn: Any, *args: Any, what: str = "your function",
                 inplace_hint: str | None = None, **kwargs: Any) -> Any:
    """Call a student's function, turning its exceptions into a clear CheckError.

    A ``NotImplementedError`` (the student edition's stub) says the exercise is
    unfinished; any other exception is reported with its type and message. With
    ``inplace_hint``, tensor arguments must come back unchanged: a function that
    wrote into its input fails with ``what ... changed its input ... in place``
    followed by the hint.

    Example:
        >>> call_student(lambda x: x + 1, 1)
        2
        >>> call_student(lambda x: x.add_(1), torch.zeros(2), what="f", inplace_hint="use x + 1.")
        Traceback (most recent call last):
        ...
        labsupport.checks.core.CheckError: f changed its input x in place: use x + 1.
    """
    __tracebackhide__ = True
    if not callable(fn):
        raise CheckError(f"expected {what} to be a function, got {describe(fn)}. "
                         f"Pass the function itself, without calling it (no parentheses).")
    if inplace_hint is not None:
        before = [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]
        result = call_student(fn, *args, what=what, **kwargs)
        for i, (a, b) in enumerate(zip(args, before)):
            if b is not None and not torch.equal(a.detach(), b):
                name = "x" if len(args) == 1 else f"#{i + 1}"
                raise CheckError(f"{what} changed its input {name} in place: {inplace_hint}")
        return result
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        raise CheckError(f"{what} is not written yet ({exc}). Fill in the exercise cell above, "
                         f"run it, then run this check again.") from None
    except CheckError:
        raise
    except Exception as exc:
        raise CheckError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def numeric_gradient(f: Callable[[], torch.Tensor], x: torch.Tensor, h: float = 1e-6,
                     indices: Sequence[tuple[int, ...]] | None = None) -> torch.Tensor:
    """Central-difference gradient of the scalar ``f()`` with respect to ``x``.

    ``f`` takes no arguments and reads ``x`` (which is nudged in place and
    restored). With ``indices`` only those entries are computed (the rest are
    0): a full numeric gradient costs two evaluations of ``f`` per element.
    Use float64: in float32 the differences drown in rounding error.

    Example:
        >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
        >>> numeric_gradient(lambda: (x ** 2).sum(), x).round(decimals=6).tolist()
        [2.0, 4.0]
    """
    __tracebackhide__ = True
    x = expect_tensor(x, "x", finite=True)
    if not x.is_floating_point():
        raise CheckError(f"x: expected a floating-point tensor, got dtype {x.dtype}")
    grad = torch.zeros_like(x)
    positions = indices if indices is not None else [tuple(i) for i in torch.cartesian_prod(
        *[torch.arange(s) for s in x.shape]).reshape(x.numel(), -1).tolist()] if x.dim() else [()]
    with torch.no_grad():
        for idx in positions:
            idx = tuple(idx)
            old = x[idx].item()
            x[idx] = old + h
            plus = _scalar(f())
            x[idx] = old - h
            minus = _scalar(f())
            x[idx] = old
            grad[idx] = (plus - minus) / (2 * h)
    return grad


def _scalar(value: Any) -> float:
    __tracebackhide__ = True
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise CheckError(f"the function must return a scalar (one number), got {describe(value)}")
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    raise CheckError(f"the function must return a scalar tensor, got {describe(value)}")


def check_gradients(f: Callable[[], torch.Tensor], params: Mapping[str, torch.Tensor],
                    grads: Mapping[str, Any], *, num_samples: int = 20, h: float = 1e-6,
                    tol: float = 1e-5, seed: int = 0) -> None:
    """Compare analytic gradients with central differences of ``f``, parameter by parameter.

    ``params`` maps names to the (float64) tensors ``f`` reads; ``grads`` maps
    the same names to the gradients to test. ``num_samples`` random entries of
    each parameter are checked (a full check costs two evaluations per entry).
    The failure message names the parameter whose gradient is wrong.

    Example:
        >>> w = torch.tensor([1.0, -2.0], dtype=torch.float64)
        >>> check_gradients(lambda: (w ** 3).sum(), {"w": w}, {"w": 3 * w ** 2})
        PASS  gradient check: 1 gradient(s) match central differences (max rel. error < 1e-05)
    """
    __tracebackhide__ = True
    if not isinstance(params, Mapping) or not isinstance(grads, Mapping):
        raise CheckError(f"params and grads must be dicts name -> tensor, got "
                         f"{describe(params)} and {describe(grads)}")
    missing = [n for n in params if n not in grads]
    if missing:
        raise CheckError(f"no gradient given for {', '.join(missing)}; expected one per parameter "
                         f"({', '.join(params)})")
    gen = torch.Generator().manual_seed(seed)
    for name, p in params.items():
        p = expect_tensor(p, f"parameter {name}")
        g = expect_tensor(grads[name], f"gradient of {name}", shape=tuple(p.shape))
        n = min(num_samples, p.numel())
        flat = torch.randperm(p.numel(), generator=gen)[:n]
        idx = [tuple(int(i) for i in torch.unravel_index(k, tuple(p.shape))) for k in flat]
        num = numeric_gradient(f, p, h=h, indices=idx)
        for i in idx:
            a, b = float(g[i]), float(num[i])
            err = abs(a - b) / max(abs(a) + abs(b), 1e-10)
            if err > tol:
                raise CheckError(f"gradient of {name} is wrong at index {i}: numeric (central "
                                 f"difference) {_fmt(b)}, analytic {_fmt(a)} (rel. error {_fmt(err)} > {tol:g})")
    passed(f"gradient check: {len(params)} gradient(s) match central differences "
           f"(max rel. error < {tol:g})")

"""The numeric gradient check: gradients against central differences, with a time limit."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from . import running
from .feedback import CheckError, passed
from .running import TimedOut, explain_error, time_limit
from .values import as_number, describe, expect_count, expect_tensor, fmt, fmt_apart


def _scalar(value: Any) -> float:
    __tracebackhide__ = True
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        raise CheckError("f must return one number (a loss)", got=describe(value), usage=True)
    return float(as_number(value, "the value f returned"))


def _central_difference(f: Callable[[], Any], x: torch.Tensor, i: tuple, h: float) -> float:
    """(f(x + h e_i) - f(x - h e_i)) / 2h, with x[i] restored even if f raises."""
    old = x[i].item()
    try:
        with torch.no_grad():
            x[i] = old + h
            plus = _scalar(f())
            x[i] = old - h
            minus = _scalar(f())
    finally:
        with torch.no_grad():
            x[i] = old
    return (plus - minus) / (2 * h)


def _positive(value: Any, name: str) -> float:
    __tracebackhide__ = True
    number = as_number(value, name)
    if number <= 0:
        raise CheckError(f"{name} must be a positive, finite number, got {number!r}", usage=True)
    return float(number)


def _validated(params: Any, grads: Any) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    __tracebackhide__ = True
    if not isinstance(params, Mapping) or not isinstance(grads, Mapping) or not params:
        raise CheckError(
            "params and grads must be non-empty dicts name -> tensor",
            got=f"{describe(params)} and {describe(grads)}",
            usage=True,
        )
    missing = [name for name in params if name not in grads]
    if missing:
        raise CheckError(
            f"no gradient given for {', '.join(map(str, missing))}",
            expected=f"one per parameter ({', '.join(map(str, params))})",
            usage=True,
        )
    result = []
    for name, p in params.items():
        p = expect_tensor(p, f"parameter {name}")
        if p.dtype != torch.float64:
            raise CheckError(
                f"parameter {name} must be float64",
                got=str(p.dtype),
                hint="in float32 central differences drown in rounding error",
                usage=True,
            )
        g = expect_tensor(grads[name], f"gradient of {name}", shape=tuple(p.shape), dtype=torch.float64)
        result.append((name, p, g))
    return result


def check_gradients(
    f: Callable[[], Any],
    params: Mapping[str, torch.Tensor],
    grads: Mapping[str, Any],
    *,
    num_samples: int = 20,
    h: float = 1e-6,
    tol: float = 1e-5,
    seed: int = 0,
    timeout: float | None = None,
) -> None:
    """Compare gradients with central differences of ``f`` on ``num_samples`` random entries of
    each (float64) parameter; the failure names the parameter. ``f`` is stopped after ``timeout`` s.

    Example:
        >>> w = torch.tensor([1.0, -2.0], dtype=torch.float64)
        >>> check_gradients(lambda: (w * w).sum().exp(), {"w": w}, {"w": 2 * w * (w * w).sum().exp()})
        PASS  gradient check: 1 gradient(s) match central differences (max rel. error < 1e-05)
    """
    __tracebackhide__ = True
    if not callable(f):
        raise CheckError("f must be a function of no arguments that returns the loss", got=describe(f), usage=True)
    checked = _validated(params, grads)
    expect_count(num_samples, "num_samples", maximum=10_000)
    h = _positive(h, "h")
    tol = _positive(tol, "tol")
    if tol >= 1:
        raise CheckError(
            f"tol={tol:g} would accept any gradient: use a relative error below 1 (1e-5 is usual)", usage=True
        )
    limit = running.TIME_LIMIT if timeout is None else _positive(timeout, "timeout")
    generator = torch.Generator().manual_seed(seed)
    try:
        with time_limit(limit):
            for name, p, g in checked:
                _check_one(f, name, p, g, num_samples, h, tol, generator)
    except TimedOut:
        raise CheckError(
            f"f did not finish the gradient check within {limit:g} s, so it was stopped",
            hint="f should compute one loss quickly; a loop that never ends, or num_samples far too large",
        ) from None
    except (CheckError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise CheckError(f"f raised {type(exc).__name__}: {exc}", hint=explain_error(exc)) from exc
    passed(f"gradient check: {len(checked)} gradient(s) match central differences (max rel. error < {tol:g})")


def _check_one(
    f: Callable,
    name: str,
    p: torch.Tensor,
    g: torch.Tensor,
    samples: int,
    h: float,
    tol: float,
    generator: torch.Generator,
) -> None:
    __tracebackhide__ = True
    for k in torch.randperm(p.numel(), generator=generator)[: min(samples, p.numel())]:
        index = tuple(int(j) for j in torch.unravel_index(k, tuple(p.shape)))
        analytic = float(g[index])
        numeric = _central_difference(f, p, index, h)
        if not math.isfinite(numeric):
            raise CheckError(f"f's central difference at {name}{list(index)} is not finite", usage=True)
        err = abs(analytic - numeric) / max(abs(analytic) + abs(numeric), 1e-10)
        if not err <= tol:
            expected, got = fmt_apart(numeric, analytic)
            raise CheckError(
                f"gradient of {name} is wrong at index {index} (rel. error {fmt(err)} > {tol:g})",
                expected=f"{expected} (central difference)",
                got=got,
            )

"""The check engine: run a student's code, validate what comes back, compare it with a
reference computed at check time, and name the mistake.

A failure raises :class:`CheckError`, shown in Jupyter as a short block (what was
expected, what came, the likely mistake, the exercise), never a traceback; a success
prints one stable ``PASS`` line and marks the exercise solved for :func:`require`.
A check is data where it can be: seeded cases, a reference, and known mistakes
``(wrong answer or predicate, what to tell the student)``, run by :func:`run_cases`;
procedural checks (training loops, DDP) use :func:`run_student` and :func:`compare`.
"""
from __future__ import annotations

import contextlib
import functools
import linecache
import math
import os
import re
import signal
import threading
import traceback
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

__all__ = ["CheckError", "require", "show_traceback", "check_gradients"]

#: Seconds a student's function may run inside a check ($LAB_TIME_LIMIT overrides).
TIME_LIMIT = float(os.environ.get("LAB_TIME_LIMIT", "60"))


class CheckError(AssertionError):
    """A check failed: what was expected, what came, and the likely mistake.

    It subclasses AssertionError, so a failing check stops "Run all" (and nbval)
    like an assert. In Jupyter it renders as a short block instead of a traceback;
    ``lab.show_traceback()`` prints the full one.

    Example:
        >>> err = CheckError("grad_w1 is wrong", expected="shape (4, 5)", got="shape (5, 4)",
        ...                  hint="a transpose is missing")
        >>> print(err)
        grad_w1 is wrong. Expected shape (4, 5); got shape (5, 4). Likely mistake: a transpose is missing
    """

    def __init__(self, message: str, *, expected: str | None = None, got: str | None = None,
                 hint: str | None = None, exercise: str | None = None) -> None:
        self.message, self.expected, self.got, self.hint = message, expected, got, hint
        self.exercise = exercise
        super().__init__(self._text())

    def _text(self) -> str:
        facts = "; ".join(f"{k} {v}" for k, v in (("expected", self.expected), ("got", self.got)) if v is not None)
        text = self.message
        if facts or self.hint:
            text = text.rstrip(".") + (". " + facts[0].upper() + facts[1:] if facts else "")
        return text + (f". Likely mistake: {self.hint}" if self.hint else "")

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the traceback (see IPython's showtraceback)."""
        _LAST[0] = self
        red, bold, off = "\x1b[31m", "\x1b[1m", "\x1b[0m"
        rows = (("expected: ", self.expected), ("got:      ", self.got), (f"{bold}likely mistake:{off} ", self.hint))
        return [f"{red}{bold}✗ CHECK FAILED{off}{red} · {self.exercise or 'check'}{off}", f"  {self.message}",
                *(f"  {k}{v}" for k, v in rows if v is not None),
                "  (the full traceback: run lab.show_traceback() in a new cell)"]


class ExerciseNotSolved(CheckError):
    """Raised by :func:`require`: a cell needs an exercise whose check has not passed."""

    def _render_traceback_(self) -> list[str]:
        _LAST[0] = self
        return [f"\x1b[33m\x1b[1m■ STOPPED\x1b[0m\x1b[33m · {self.message}\x1b[0m"]


_LAST: list[BaseException | None] = [None]
_SOLVED: dict[str, str] = {}   # exercise id -> title, for the checks that passed in this kernel
_TITLES: dict[str, str] = {}   # every exercise id a check declares -> its title


def show_traceback() -> None:
    """Print the full traceback of the last failed check, which its block hides: ``lab.show_traceback()``."""
    err = _LAST[0]
    print("".join(traceback.format_exception(type(err), err, err.__traceback__)) if err
          else "no check has failed in this kernel yet", end="" if err else "\n")


def exercise(ex_id: str, title: str) -> Callable[[Callable], Callable]:
    """Declare the check of exercise ``ex_id`` (``"02.1"``): failures are labelled
    with it, success marks it solved for :func:`require`, and an unexpected error
    inside the check becomes a message, not a traceback."""
    _TITLES[ex_id] = title

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            _SOLVED.pop(ex_id, None)
            label = f"Exercise {ex_id}: {title}"
            try:
                result = check(*args, **kwargs)
            except CheckError as err:
                err.exercise = err.exercise or label
                raise
            except Exception as exc:  # a hole in the check's validation: still one clear sentence
                raise CheckError(f"the check could not use your answer ({type(exc).__name__}: {exc})",
                                 hint="look at what your code returns against what the exercise "
                                      "asks for; if it matches, tell your instructor",
                                 exercise=label) from exc
            _SOLVED[ex_id] = title
            return result
        run.exercise_id = ex_id  # type: ignore[attr-defined]
        return run
    return decorate


def require(*ex_ids: str) -> None:
    """Stop this cell at once, with one line, unless the named exercises passed
    their checks in this kernel (so an unsolved exercise never crashes later cells).

    Example:
        >>> require()   # nothing required: returns quietly
    """
    __tracebackhide__ = True
    missing = [i for i in ex_ids if i not in _SOLVED]
    if missing:
        names = " and ".join(f"Exercise {i} ({_TITLES.get(i, 'see above')})" for i in missing)
        raise ExerciseNotSolved(f"this cell uses the result of {names}: solve it and run its "
                                f"check until it says PASS, then run this cell again.")


def passed(message: str) -> None:
    """Print the one-line success verdict every check ends with."""
    print(f"PASS  {message}")


def describe(value: Any) -> str:
    """A short description: type, shape, dtype and device for tensors."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}, on {value.device}"
    kind = type(value).__name__
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return f"numpy.{kind} of shape {tuple(value.shape)}, dtype {value.dtype}"
    if isinstance(value, (list, tuple, dict, set, str)):
        return f"{kind} of length {len(value)}"
    return "None" if value is None else f"{kind} {value!r}" if isinstance(value, (int, float, complex, bool)) else kind


def fmt(x: float) -> str:
    """A number in 3 significant digits (stable across machines)."""
    return f"{x:.3g}"


def expect_tensor(value: Any, name: str, *, shape: Sequence[int] | None = None,
                  dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                  finite: bool = True) -> torch.Tensor:
    """Return ``value`` if it is a tensor with these properties, else raise a
    CheckError naming ``name``, what was expected and what came."""
    __tracebackhide__ = True
    want = "a torch.Tensor" + (f" of shape {tuple(shape)}" if shape is not None else "")
    if value is None:
        raise CheckError(f"{name} is None", expected=want, got="None",
                         hint=f"the cell that computes {name} did not run, or your function "
                              f"does not end with `return`")
    if not isinstance(value, torch.Tensor):
        hint = ("convert with torch.from_numpy(...), or stay in torch throughout" if type(value).__module__ == "numpy"
                else "build it with torch operations (or torch.stack / torch.tensor)" if isinstance(value, (list, tuple))
                else "keep the result as a tensor (drop .item() / float())" if isinstance(value, (int, float)) else None)
        raise CheckError(f"{name} is not a tensor", expected=want, got=describe(value), hint=hint)
    if shape is not None and tuple(value.shape) != tuple(shape):
        got, want = tuple(value.shape), tuple(shape)
        hint = ("a transpose is missing (or one too many)" if len(want) == 2 and got == want[::-1] != want
                else "an extra leading dimension: did you keep a batch or stacking axis?" if got[1:] == want
                else "the number of elements is right: check the order of a reshape/view/permute"
                if value.numel() == math.prod(want) else
                "you reduced over everything where a dimension should stay" if not got and want else None)
        raise CheckError(f"{name} has the wrong shape", expected=f"shape {tuple(shape)}",
                         got=f"shape {tuple(value.shape)}", hint=hint)
    if dtype is not None and value.dtype != dtype:
        raise CheckError(f"{name} has the wrong dtype", expected=str(dtype), got=str(value.dtype),
                         hint="a tensor created without dtype=, or a .float()/.double() call")
    if device is not None and value.device.type != torch.device(device).type:
        raise CheckError(f"{name} is on the wrong device", expected=str(torch.device(device)),
                         got=str(value.device), hint="move it with .to(device); create new "
                                                     "tensors with device=...")
    if finite and (value.is_floating_point() or value.is_complex()) and not torch.isfinite(value).all():
        raise CheckError(f"{name} is not finite", expected="finite numbers",
                         got=f"{int(torch.isnan(value).sum())} NaN and {int(torch.isinf(value).sum())} inf",
                         hint="a learning rate that is too large, a division by zero, or log/exp overflow")
    return value


def expect_count(value: Any, name: str, *, minimum: int = 1) -> int:
    """An argument of a check that must be a whole number >= ``minimum`` (cases, steps)."""
    __tracebackhide__ = True
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CheckError(f"{name} must be a whole number >= {minimum}, got {describe(value)}")
    return value


def rel_error(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-10) -> float:
    """Largest ``|x - y| / max(|x| + |y|, eps)`` in float64 (inf if either is not finite)."""
    a, b = x.detach().double().cpu(), y.detach().double().cpu()
    if a.numel() == 0:
        return 0.0
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.inf
    return float(((a - b).abs() / (a.abs() + b.abs()).clamp(min=eps)).max())


def _matches(got: Any, wrong: Any, tol: float = 1e-6) -> bool:
    """Does ``got`` equal a known wrong answer (a value, a tuple of values, or a predicate)?"""
    try:
        if callable(wrong) and not isinstance(wrong, torch.Tensor):
            return bool(wrong(got))
        if isinstance(wrong, torch.Tensor):
            return isinstance(got, torch.Tensor) and got.shape == wrong.shape and rel_error(got, wrong) < tol
        if isinstance(wrong, (tuple, list)):
            return (isinstance(got, (tuple, list)) and len(got) == len(wrong)
                    and all(w is None or _matches(g, w, tol) for g, w in zip(got, wrong)))
        return got == wrong
    except Exception:  # a predicate that cannot handle this answer does not match it
        return False


def first_mistake(got: Any, mistakes: Sequence[tuple[Any, str]]) -> str | None:
    """The message of the first known mistake that ``got`` matches, or None."""
    return next((why for wrong, why in mistakes if _matches(got, wrong)), None)


def compare(name: str, got: Any, expected: torch.Tensor, *, rtol: float = 1e-5, atol: float = 1e-8,
            mistakes: Sequence[tuple[Any, str]] = (), hint: str | None = None, dtype: bool = True) -> float:
    """Validate ``got`` against the reference ``expected`` (type, exact shape, dtype,
    device, finite), then compare values; a mismatch names the first known mistake
    it matches, else the worst element. Returns the max relative error."""
    __tracebackhide__ = True
    expected = expected.detach()
    if not torch.isfinite(expected).all():
        raise CheckError(f"the reference for {name} is not finite, so nothing can match it",
                         hint="the inputs the check was given (your earlier results?) hold NaN or "
                              "inf, or are too large: fix those first")
    got = expect_tensor(got, name, shape=tuple(expected.shape), dtype=expected.dtype if dtype else None,
                        device=expected.device)
    g, e = got.detach().double().cpu(), expected.double().cpu()
    excess = (g - e).abs() - (atol + rtol * e.abs())
    if g.numel() and float(excess.max()) > 0:
        flat = int(excess.argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(e.shape))) if e.dim() else ()
        raise CheckError(f"{name} does not match the reference at element {idx} (max abs. error "
                         f"{fmt(float((g - e).abs().max()))}; tolerance rtol={rtol:g}, atol={atol:g})",
                         expected=fmt(float(e.reshape(-1)[flat])), got=fmt(float(g.reshape(-1)[flat])),
                         hint=first_mistake(got, mistakes) or hint)
    return rel_error(got, expected)


# PyTorch's error texts, and what they usually mean in a student's code.
ERROR_HINTS: list[tuple[str, str]] = [  # (pattern in PyTorch's error, what it usually means)
    (r"mat1 and mat2 shapes|size mismatch, got|Expected size for first two dimensions|shapes? .* cannot be multiplied",
     "a matrix product's inner sizes differ: write each operand's shape beside the line; a transpose is missing"),
    (r"must match the size of tensor b|cannot be broadcast|not broadcastable",
     "two tensors were combined elementwise with shapes that do not broadcast: print both shapes"),
    (r"Expected all tensors to be on the same device", "tensors on different devices: create new ones with "
     "device=x.device, or move them with .to()"),
    (r"to have the same dtype|expected scalar type|dtype", "tensors of different dtypes: create new ones "
     "with dtype=x.dtype (or use torch.*_like)"),
    (r"does not require grad and does not have a grad_fn", "the tensor is not part of a graph: its leaves "
     "need requires_grad=True, and no torch.no_grad() or .detach() on the way"),
    (r"backward through the graph a second time", "backward() frees the graph: recompute the forward pass "
     "each step, or pass retain_graph=True"),
    (r"leaf Variable that requires grad is being used in an in-place", "update the weights inside `with torch.no_grad():`"),
    (r"modified by an inplace operation", "an in-place operation overwrote a value autograd saved: use the out-of-place form"),
    (r"grad can be implicitly created only for scalar outputs", "backward() without an argument needs a scalar: "
     "reduce the loss, or pass gradient="),
    (r"view size is not compatible|is not contiguous", "view() needs a contiguous tensor: use reshape()"),
    (r"index .* is out of bounds|out of range", "an index is out of range: check an off-by-one or the axis you index"),
]


def explain_error(exc: BaseException) -> str | None:
    """The advice for a PyTorch error raised in student code, or None."""
    text = f"{type(exc).__name__}: {exc}"
    return next((advice for pattern, advice in ERROR_HINTS if re.search(pattern, text)), None)


class _TimedOut(BaseException):
    """Raised in the student's code at the time limit: a BaseException, which ``except Exception`` cannot swallow."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with _TimedOut (main thread, POSIX only)."""
    usable = (seconds and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise _TimedOut()
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _student_line(exc: BaseException) -> str | None:
    """The last line of the student's own code (a notebook cell) that ``exc`` passed through."""
    lines = [linecache.getline(f.f_code.co_filename, n).strip() for f, n in traceback.walk_tb(exc.__traceback__)
             if "ipykernel" in f.f_code.co_filename or f.f_code.co_filename.startswith("<")]
    return next((line for line in reversed(lines) if line), None)


def expect_function(fn: Any, what: str) -> None:
    """Refuse None or a non-function (checks with a costly reference call it first)."""
    __tracebackhide__ = True
    if fn is None:
        raise CheckError(f"{what} is None: run the exercise cell above first (until it is solved, its name holds None)")
    if not callable(fn):
        raise CheckError(f"{what} is not a function", expected="a function", got=describe(fn),
                         hint="pass the function itself, without calling it (no parentheses)")


def run_student(fn: Any, *args: Any, what: str = "your function", timeout: float | None = None,
                inplace_hint: str | None = None, **kwargs: Any) -> Any:
    """Call a student's function and turn whatever goes wrong into a CheckError:
    not written yet (the stub), not callable, an exception (with the line and the
    advice for PyTorch's error), no return within ``timeout`` seconds, or a tensor
    argument changed in place (with ``inplace_hint``)."""
    __tracebackhide__ = True
    expect_function(fn, what)
    limit = TIME_LIMIT if timeout is None else timeout
    before = ([a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]
              if inplace_hint is not None else [])
    try:
        with time_limit(limit):
            result = fn(*args, **kwargs)
    except _TimedOut:
        raise CheckError(f"{what} did not return within {limit:g} s, so the check stopped it",
                         hint="a loop that never ends (a while whose condition never changes?), or "
                              "far more work than the exercise needs") from None
    except NotImplementedError as exc:
        raise CheckError(f"{what} is not written yet ({exc}): fill in the exercise cell above, "
                         f"run it, then run this check again") from None
    except CheckError:
        raise
    except Exception as exc:
        where = _student_line(exc)
        raise CheckError(f"{what} raised {type(exc).__name__}: {str(exc).strip()}"
                         + (f"\n  in your line:  {where}" if where else ""),
                         hint=explain_error(exc)) from exc
    for i, (a, b) in enumerate(zip(args, before)):
        if b is not None and not torch.equal(a.detach(), b):
            name = "x" if len(args) == 1 else f"#{i + 1}"
            raise CheckError(f"{what} changed its input {name} in place", hint=inplace_hint)
    return result


def run_cases(fn: Any, cases: Sequence[tuple], reference: Callable[..., Any], *, what: str,
              outputs: Sequence[str] = ("the result",), mistakes: Callable[..., list] | None = None,
              rtol: float = 1e-5, atol: float = 1e-8, inplace_hint: str | None = None,
              timeout: float | None = None) -> float:
    """The engine for function exercises: call ``fn`` on fresh copies of each case, compare with
    ``reference(*case)`` output by output, and on a difference name the first ``(wrong result or
    predicate, message)`` of ``mistakes(*case)`` that fits (None in a tuple: any value). Returns
    the worst relative error."""
    __tracebackhide__ = True
    if not cases:
        raise CheckError("the check was asked to run zero cases: nothing would be tested")
    worst = 0.0
    for case in cases:
        copies = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case)
        result = run_student(fn, *copies, what=what, timeout=timeout, inplace_hint=inplace_hint)
        refs = reference(*case)
        refs = refs if isinstance(refs, tuple) else (refs,)
        if len(outputs) == 1:
            got = (result,)
        elif isinstance(result, (tuple, list)) and len(result) == len(outputs):
            got = tuple(result)
        else:
            raise CheckError(f"{what} returned the wrong number of values",
                             expected=f"a tuple ({', '.join(outputs)})", got=describe(result),
                             hint="a missing `return`" if result is None else None)
        for name, value, ref in zip(outputs, got, refs):
            try:
                worst = max(worst, compare(name, value, ref, rtol=rtol, atol=atol))
            except CheckError as err:
                why = first_mistake(got if len(outputs) > 1 else got[0], mistakes(*case) if mistakes else [])
                if why:
                    raise CheckError(f"{name} is wrong", hint=why) from None
                raise err
    return worst


def read_prediction(name: str, got: Any, choices: Sequence[Any] | None = None) -> Any:
    """``got`` (a list as a tuple) if it has the form of an answer (one of ``choices``, lower-cased),
    else a CheckError: checks that measure call it first, to refuse junk before measuring."""
    __tracebackhide__ = True
    if got is None or got is Ellipsis:
        raise CheckError(f"{name}: no prediction yet: write your answer between the solution "
                         f"markers above and run that cell first")
    got = tuple(got) if isinstance(got, list) else got
    if not isinstance(got, (str, int, float, bool, tuple, torch.Size)):
        raise CheckError(f"{name}: answer with a plain value", got=describe(got),
                         expected=" / ".join(map(repr, choices)) if choices else "a number or a word")
    if choices is not None:
        if isinstance(got, str):
            got = got.strip().lower()
        if got not in choices:
            raise CheckError(f"{name}: the answer must be one of the choices",
                             expected=" / ".join(map(repr, choices)), got=repr(got))
    return got


def check_prediction(name: str, got: Any, actual: Any, *, choices: Sequence[Any] | None = None,
                     why: str, mistakes: Mapping[Any, str] | None = None, rel: float = 0.05) -> None:
    """Judge a predict-then-run answer: ``actual`` is what the experiment gives
    (measured by the check), ``why`` the explanation shown either way, ``mistakes``
    the explanation for each typical wrong answer. Numbers count within ``rel``."""
    __tracebackhide__ = True
    got = read_prediction(name, got, choices)
    if isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            raise CheckError(f"{name}: the answer must be a number", got=describe(got))
        right = math.isclose(got, actual, rel_tol=rel, abs_tol=1e-12)
    elif isinstance(actual, tuple):
        right = tuple(got) == actual if isinstance(got, tuple) else False
    else:
        right = got == actual
    if not right:
        hint = next((h for k, h in (mistakes or {}).items() if k == got or (
            isinstance(k, (int, float)) and isinstance(got, (int, float)) and math.isclose(k, got, rel_tol=rel))), None)
        raise CheckError(f"{name}: not what happens", expected=repr(actual), got=repr(got),
                         hint=(hint + " " if hint else "") + why)
    passed(f"{name}: {actual!r} is right. {why}")


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


def _scalar(value: Any) -> float:
    __tracebackhide__ = True
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CheckError("the function must return one number", got=describe(value))


def check_gradients(f: Callable[[], Any], params: Mapping[str, torch.Tensor],
                    grads: Mapping[str, Any], *, num_samples: int = 20, h: float = 1e-6,
                    tol: float = 1e-5, seed: int = 0) -> None:
    """Compare gradients with central differences of ``f`` on ``num_samples``
    random entries of each (float64) parameter; the failure names the parameter.

    Example:
        >>> w = torch.tensor([1.0, -2.0], dtype=torch.float64)
        >>> check_gradients(lambda: (w * w).sum().exp(), {"w": w}, {"w": 2 * w * (w * w).sum().exp()})
        PASS  gradient check: 1 gradient(s) match central differences (max rel. error < 1e-05)
    """
    __tracebackhide__ = True
    if not isinstance(params, Mapping) or not isinstance(grads, Mapping) or not params:
        raise CheckError("params and grads must be non-empty dicts name -> tensor",
                         got=f"{describe(params)} and {describe(grads)}")
    missing = [n for n in params if n not in grads]
    if missing:
        raise CheckError(f"no gradient given for {', '.join(missing)}",
                         expected=f"one per parameter ({', '.join(params)})")
    expect_count(num_samples, "num_samples")
    gen = torch.Generator().manual_seed(seed)
    for name, p in params.items():
        p = expect_tensor(p, f"parameter {name}")
        if p.dtype != torch.float64:
            raise CheckError(f"parameter {name} must be float64", got=str(p.dtype),
                             hint="in float32 central differences drown in rounding error")
        g = expect_tensor(grads[name], f"gradient of {name}", shape=tuple(p.shape))
        for k in torch.randperm(p.numel(), generator=gen)[:min(num_samples, p.numel())]:
            i = tuple(int(j) for j in torch.unravel_index(k, tuple(p.shape)))
            a, b = float(g[i]), _central_difference(f, p, i, h)
            err = abs(a - b) / max(abs(a) + abs(b), 1e-10)
            if not err <= tol:
                raise CheckError(f"gradient of {name} is wrong at index {i} (rel. error {fmt(err)} > {tol:g})",
                                 expected=f"{fmt(b)} (central difference)", got=fmt(a))
    passed(f"gradient check: {len(params)} gradient(s) match central differences "
           f"(max rel. error < {tol:g})")

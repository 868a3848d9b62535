"""Checks for notebook 09 (static and dynamic graphs): TorchScript's script vs
trace on data-dependent control flow, and a torch.export round trip.

Example:
    >>> import torch, labsupport as lab
    >>> def export_and_reload(model, example, path):
    ...     batch = torch.export.Dim("batch")
    ...     program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    ...     torch.export.save(program, path)
    ...     return torch.export.load(path)
    >>> lab.check_export_roundtrip(export_and_reload)
    PASS  export round trip: the reloaded program matches the eager model on batches of 3, 4 and 9 (torch.allclose, rtol 1e-05); the saved file loads on its own
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from .core import CheckError, call_student, describe, passed, rel_error

__all__ = ["halvings_needed", "check_script_vs_trace", "check_export_roundtrip"]

# Largest |x| of each fresh input: 0, 0, 1, 2, 3 and 6 halvings are needed.
_SCALES = (0.5, 1.0, 1.7, 4.0, 6.0, 50.0)


def halvings_needed(max_abs: float) -> int:
    """How many times a tensor whose largest ``|x|`` is ``max_abs`` must be halved
    until that is at most 1 (0 when it already is), by exact float arithmetic.

    Example:
        >>> [halvings_needed(m) for m in (0.5, 1.0, 1.5, 4.0, 50.0)]
        [0, 0, 1, 2, 6]
    """
    n = 0
    while max_abs > 1.0:
        max_abs /= 2.0
        n += 1
    return n


def _fresh_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(90)
    xs = []
    for scale in _SCALES:
        x = torch.randn(4, generator=g)
        xs.append(x / x.abs().max() * scale)  # largest |x| is exactly `scale`
    return xs


def _is_torchscript(obj: Any) -> bool:
    return isinstance(obj, (torch.jit.ScriptFunction, torch.jit.ScriptModule))


def _as_torchscript(obj: Any, name: str, how: str) -> Any:
    __tracebackhide__ = True
    if obj is None:
        raise CheckError(f"{name}: expected a TorchScript function, got None. Did the exercise "
                         f"cell run and assign {name}?")
    if not _is_torchscript(obj):
        hint = (f" It is a plain Python function: pass it through {how}."
                if callable(obj) else "")
        raise CheckError(f"{name}: expected a TorchScript function (what {how} returns), got "
                         f"{describe(obj)}.{hint}")
    return obj


def _has_loop(fn: Any) -> bool:
    return "prim::Loop" in str(fn.graph)


def _run(fn: Any, x: torch.Tensor, what: str) -> torch.Tensor:
    __tracebackhide__ = True
    out = call_student(fn, x.clone(), what=what,
                       inplace_hint="x /= 2 or x.div_(2) writes into the caller's tensor; "
                                    "write x = x / 2 so it is left alone.")
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        raise CheckError(f"{what} returned {describe(out)} for an input of shape {tuple(x.shape)}; "
                         f"expected a tensor of the same shape.")
    return out


def check_script_vs_trace(halve_until_small: Callable, scripted: Any, traced: Any) -> None:
    """Check the eager ``halve_until_small(x)``, its ``torch.jit.script`` version and its
    ``torch.jit.trace`` version on fresh inputs needing 0 to 6 halvings.

    The reference divides by ``2 ** halvings_needed(max|x|)``, computed with
    Python floats (exact for powers of two). The eager and scripted functions must
    match it everywhere, and the scripted graph must hold a ``prim::Loop``; the
    traced one must have no loop and be wrong on at least one input (tracing
    records the example's fixed number of halvings). Names the usual mistakes:
    ``if`` instead of ``while``, ``>=`` instead of ``>``, halving in place, and
    the two versions swapped (traced where scripted was asked, or the reverse).

    Example (the solution of notebook 09's exercise 1):
        >>> def halve_until_small(x):
        ...     while x.abs().max() > 1:
        ...         x = x / 2
        ...     return x
        >>> import warnings
        >>> with warnings.catch_warnings():   # TorchScript is deprecated, and tracing a loop warns
        ...     warnings.simplefilter("ignore")
        ...     scripted = torch.jit.script(halve_until_small)
        ...     traced = torch.jit.trace(halve_until_small, torch.full((3,), 5.0))
        >>> check_script_vs_trace(halve_until_small, scripted, traced)    # doctest: +ELLIPSIS
        PASS  ...
    """
    __tracebackhide__ = True
    xs = _fresh_inputs()
    expected = [x / 2.0 ** halvings_needed(float(x.abs().max())) for x in xs]
    if not callable(halve_until_small):
        hint = (" Write the function in the exercise cell and run that cell first."
                if halve_until_small is None else "")
        raise CheckError(f"halve_until_small: expected your eager function, got "
                         f"{describe(halve_until_small)}.{hint}")
    for x, want in zip(xs, expected):
        got = _run(halve_until_small, x, "your halve_until_small(x)")
        if torch.equal(got, want):
            continue
        m = float(x.abs().max())
        k = halvings_needed(m)
        if m > 1 and k > 1 and torch.equal(got, x / 2):
            raise CheckError(f"halve_until_small halved once where {k} halvings were needed "
                             f"(largest |x| = {m:g}): use a `while` loop, not `if`.")
        if torch.equal(got, want / 2):
            raise CheckError(f"halve_until_small halves once too often (largest |x| = {m:g} needs "
                             f"{k}): keep halving while the largest |x| is above 1 (>), not >= 1.")
        raise CheckError(f"halve_until_small is wrong for an input whose largest |x| is {m:g}: "
                         f"expected it divided by {2 ** k} (largest |x| {float(want.abs().max()):g}), "
                         f"got largest |x| {float(got.abs().max()):.3g}.")
    scripted = _as_torchscript(scripted, "scripted_halve", "torch.jit.script")
    traced = _as_torchscript(traced, "traced_halve", "torch.jit.trace")
    if not _has_loop(scripted):
        raise CheckError("scripted_halve has no loop in its graph (no prim::Loop): it looks traced, "
                         "not scripted. Make it with torch.jit.script(halve_until_small).")
    if _has_loop(traced):
        raise CheckError("traced_halve still contains the loop (prim::Loop): it was scripted. Make "
                         "it with torch.jit.trace(halve_until_small, example) to see what tracing does.")
    for x, want in zip(xs, expected):
        got = _run(scripted, x, "scripted_halve")
        if not torch.equal(got, want):
            raise CheckError(f"scripted_halve disagrees with the reference on an input whose largest "
                             f"|x| is {float(x.abs().max()):g}: script the function that passed above.")
    wrong = 0
    for x, want in zip(xs, expected):
        got = _run(traced, x, "traced_halve")
        wrong += not torch.equal(got, want)
    if wrong == 0:
        raise CheckError("traced_halve is right on every fresh input, which a trace of a data-"
                         "dependent loop cannot be: trace halve_until_small itself, with one example.")
    passed(f"script vs trace: the scripted loop matches the reference on {len(xs)} fresh inputs "
           f"(0 to {max(halvings_needed(s) for s in _SCALES)} halvings); the trace replays a fixed "
           f"number of halvings and is wrong on {wrong} of {len(xs)}")


def _digits_model(seed: int = 0) -> nn.Module:
    from ..models import DigitsCNN

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DigitsCNN().eval()


def _batch(n: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def check_export_roundtrip(export_and_reload: Callable, *, batches: tuple[int, ...] = (3, 4, 9)) -> None:
    """Check ``export_and_reload(model, example, path) -> ExportedProgram``.

    The function gets a seeded :class:`DigitsCNN` in eval mode, an example batch of
    4 images and a path in a fresh temporary folder. It must export the model with
    a dynamic batch dimension, save the program to ``path`` and return
    ``torch.export.load(path)``. The check loads the file a second time on its own
    and runs both programs on fresh batches of several sizes against the eager
    model. Names the usual mistakes: nothing saved, the eager model (or
    ``.module()``) returned instead of the program, a batch size fixed to the
    example's, a different model exported.

    Example (the solution of notebook 09's exercise 2):
        >>> def export_and_reload(model, example, path):
        ...     batch = torch.export.Dim("batch")
        ...     program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
        ...     torch.export.save(program, path)
        ...     return torch.export.load(path)
        >>> check_export_roundtrip(export_and_reload)                     # doctest: +ELLIPSIS
        PASS  ...
    """
    __tracebackhide__ = True
    model = _digits_model()
    example = _batch(4, seed=1)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # torch 2.11's torch.export.load warns about a read-only buffer it makes itself;
        # it says nothing about the student's work, so it stays out of the check's output.
        warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
        path = Path(tmp) / "digits_cnn.pt2"
        got = call_student(export_and_reload, model, example.clone(), str(path),
                           what="your export_and_reload(model, example, path)")
        if got is model or (isinstance(got, nn.Module) and not isinstance(got, torch.fx.GraphModule)):
            raise CheckError("export_and_reload returned the eager model: return the program that "
                             "torch.export.load(path) gives back.")
        if isinstance(got, torch.fx.GraphModule):
            raise CheckError("export_and_reload returned a GraphModule (program.module()); return "
                             "the ExportedProgram itself, as torch.export.load(path) gives it.")
        if not isinstance(got, torch.export.ExportedProgram):
            raise CheckError(f"export_and_reload must return a torch.export.ExportedProgram, got "
                             f"{describe(got)}")
        if not path.is_file():
            raise CheckError(f"nothing was saved at the path given ({path.name}): call "
                             f"torch.export.save(program, path) before loading it back.")
        try:
            on_its_own = torch.export.load(str(path))
        except Exception as exc:
            raise CheckError(f"the file saved at path does not load with torch.export.load "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).") from exc
        for which, program in (("the returned program", got), ("the saved file", on_its_own)):
            module = program.module()
            for n in batches:
                x = _batch(n, seed=100 + n)
                with torch.no_grad():
                    want = model(x)
                try:
                    out = module(x)
                except Exception as exc:
                    if n != example.shape[0]:
                        raise CheckError(f"{which} fails on a batch of {n} images ({type(exc).__name__}): "
                                         f"it only accepts the example's batch size, "
                                         f"{example.shape[0]}. Mark dimension 0 as dynamic: "
                                         f"dynamic_shapes=({{0: torch.export.Dim('batch')}},).") from None
                    raise CheckError(f"{which} fails on the example's own batch size "
                                     f"({type(exc).__name__}: {exc}).") from None
                if not isinstance(out, torch.Tensor) or out.shape != want.shape:
                    raise CheckError(f"{which} returned {describe(out)} for a batch of {n}; "
                                     f"expected shape {tuple(want.shape)}.")
                err = rel_error(out, want)
                if not torch.allclose(out, want, rtol=1e-5, atol=1e-6):
                    raise CheckError(f"{which} disagrees with the eager model on a batch of {n} "
                                     f"(max rel. error {err:.3g}): export the model you were given "
                                     f"(in eval mode), not a new one.")
    sizes = ", ".join(str(b) for b in batches[:-1]) + f" and {batches[-1]}"
    passed(f"export round trip: the reloaded program matches the eager model on batches of "
           f"{sizes} (torch.allclose, rtol 1e-05); the saved file loads on its own")

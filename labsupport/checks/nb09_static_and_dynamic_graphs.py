"""Checks for notebook 09 (static and dynamic graphs): script vs trace, torch.cond, torch.compile(fullgraph)."""
import contextlib
import io
import logging
import warnings
from typing import Any, Callable
import torch
from .core import CheckError, check_prediction, describe, exercise, expect_tensor, first_mistake, passed, read_prediction, run_student

__all__ = ["check_script_vs_trace", "check_cond_gate", "check_fullgraph_prediction"]

def _halvings(m: float) -> int: return 0 if m <= 1.0 else 1 + _halvings(m / 2.0)  # noqa: E704

def _inputs() -> list[torch.Tensor]:     # largest |x| 0.5 to 50 (0-6 halvings); the last one's is negative
    g = torch.Generator().manual_seed(90)
    xs = [(x := torch.randn(4, generator=g)) / x.abs().max() * s for s in (0.5, 1.0, 1.7, 4.0, 6.0, 50.0)]
    return xs + [torch.tensor([-8.0, 0.5, 1.5, -0.25])]

def _run(fn: Any, x: torch.Tensor, what: str) -> torch.Tensor:
    got = run_student(fn, x.clone(), what=what, inplace_hint="x /= 2 writes into the caller's tensor: x = x / 2")
    return expect_tensor(got, f"what {what} returned", shape=tuple(x.shape), dtype=x.dtype)

@exercise("09.1", "a loop that tracing gets wrong")
def check_script_vs_trace(halve_until_small: Callable, scripted: Any, traced: Any) -> None:
    """The eager loop, its ``torch.jit.script`` and its ``torch.jit.trace`` on fresh inputs needing 0 to 6 halvings."""
    xs, want = _inputs(), [x / 2.0 ** _halvings(float(x.abs().max())) for x in _inputs()]
    if halve_until_small is None:
        raise CheckError("halve_until_small is None", hint="write the function in the exercise cell, run that cell")
    for x, w in zip(xs, want):
        if not torch.equal(got := _run(halve_until_small, x, "your halve_until_small(x)"), w):
            hint = first_mistake(got, [
                (x / 2 ** _halvings(float(x.max())), "it compares x.max(), not x.abs().max(): a large negative "
                 "value never counts"),
                (w / 2, "it halves once too often: keep halving while the largest |x| is > 1, not >= 1"),
                (x / 2, "it halved once: use a `while` loop, not `if`")])
            raise CheckError(f"halve_until_small is wrong for an input whose largest |x| is {float(x.abs().max()):g}",
                             expected=f"largest |x| {float(w.abs().max()):.3g}",
                             got=f"largest |x| {float(got.abs().max()):.3g}", hint=hint)
    for name, obj, how in (("scripted_halve", scripted, "script"), ("traced_halve", traced, "trace")):
        if not isinstance(obj, (torch.jit.ScriptFunction, torch.jit.ScriptModule)):
            raise CheckError(f"{name} is not a TorchScript function", expected=f"what torch.jit.{how} returns",
                             got=describe(obj), hint=f"pass it through torch.jit.{how}" if callable(obj) else None)
    if "prim::Loop" not in str(scripted.graph):
        raise CheckError("scripted_halve has no loop in its graph (no prim::Loop)", hint="it was traced, not scripted")
    if "prim::Loop" in str(traced.graph):
        raise CheckError("traced_halve still holds the loop (prim::Loop)", hint="it was scripted, not traced")
    if any(not torch.equal(_run(scripted, x, "scripted_halve"), w) for x, w in zip(xs, want)):
        raise CheckError("scripted_halve disagrees with the reference", hint="script the function that passed above")
    wrong = sum(not torch.equal(_run(traced, x, "traced_halve"), w) for x, w in zip(xs, want))
    if wrong == 0:
        raise CheckError("traced_halve is right on every fresh input, which a trace of a data-dependent loop cannot "
                         "be", hint="trace halve_until_small itself, with one example")
    passed(f"script vs trace: the scripted loop matches the reference on {len(xs)} fresh inputs (0 to 6 halvings); "
           f"the trace replays a fixed number of halvings and is wrong on {wrong} of {len(xs)}")

@exercise("09.3", "a Gate that exports")
def check_cond_gate(cond_gate_class: Any) -> None:
    """``cond_gate_class()``: Gate's ``.linear`` and function, with ``torch.cond``; run on both branches, exported."""
    if not isinstance(cond_gate_class, type) or not issubclass(cond_gate_class, torch.nn.Module):
        raise CheckError("expected your module class itself (CondGate, not CondGate())", got=describe(cond_gate_class))
    model = torch.manual_seed(0) and run_student(cond_gate_class, what="CondGate()")
    if not isinstance(getattr(model, "linear", None), torch.nn.Linear):
        raise CheckError("CondGate() has no .linear = nn.Linear(4, 3)", hint="keep Gate's __init__ (or subclass Gate)")
    d = model.linear.weight.detach().sum(0)       # h.sum() grows along d: +d and -d take the two branches
    xs = [10 * d.repeat(3, 1), -10 * d.repeat(3, 1)]
    for x in xs:                                   # the eager module first
        with torch.no_grad():
            h = model.linear(x)
            want, other = (h.relu(), -h) if h.sum() > 0 else (-h, h.relu())
            got = expect_tensor(run_student(model, x, what="CondGate()(x)"), "CondGate()(x)", shape=tuple(want.shape))
        if not torch.allclose(got, want, atol=1e-6):
            raise CheckError(f"CondGate()(x) differs from Gate on a batch with h.sum() {'>' if h.sum() > 0 else '<'} 0",
                             hint="the two branches are swapped (true_fn runs when the predicate holds)" if
                             torch.allclose(got, other, atol=1e-6) else "h = self.linear(x), then h.relu() or -h")
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):   # a refused export
            warnings.simplefilter("ignore")         # prints its graph: the message below says what matters
            logging.disable(logging.CRITICAL)
            program = torch.export.export(model, (xs[0],))
    except Exception as exc:
        raise CheckError(f"torch.export refused CondGate ({type(exc).__name__}: {str(exc).splitlines()[0][:150]})",
                         hint="a Python `if` (or .item(), bool()) on a tensor: put the branch in "
                              "torch.cond(pred, true_fn, false_fn, (h,))") from None
    finally:
        logging.disable(logging.NOTSET)
    if "torch.ops.higher_order.cond" not in str(program.graph_module.code):
        raise CheckError("the exported graph has no cond node", hint="torch.where computes both branches and "
                         "picks elementwise; the exercise is torch.cond, which keeps both in the graph, runs one")
    passed("CondGate: matches Gate on both branches; torch.export keeps both in one graph (a cond node)")

def _flip_if_negative(x: torch.Tensor) -> torch.Tensor:       # notebook 09's function, the experiment's subject
    if x.sum() > 0:
        return x
    return -x

@exercise("09.2", "does fullgraph=True accept a data-dependent branch?")
def check_fullgraph_prediction(prediction: Any) -> None:
    """Predict-then-run: ``torch.compile(flip_if_negative, fullgraph=True)`` on a negative input."""
    prediction = read_prediction("fullgraph=True", prediction, ("error", "correct", "wrong"))  # before compiling
    try:
        out = torch.compile(_flip_if_negative, fullgraph=True, backend="eager")(-torch.arange(1.0, 4.0))
        actual = "correct" if torch.equal(out, torch.arange(1.0, 4.0)) else "wrong"
    except Exception:
        actual = "error"
    check_prediction("fullgraph=True", prediction, actual, choices=("error", "correct", "wrong"),
                     why="A branch on a tensor's value needs a graph break, and fullgraph=True forbids graph breaks, "
                         "so compiling raises instead of falling back to Python.",
                     mistakes={"correct": "Without fullgraph=True it would be: Dynamo breaks the graph at the `if`, "
                               "runs the branch in Python and stays correct.",
                               "wrong": "That is tracing. Dynamo guards what it captured, so it never silently "
                               "replays the wrong branch."})

"""Checks of notebook 09 (static and dynamic graphs): script vs trace, fullgraph, a Gate that exports."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import itertools
import logging
import os
import re
import signal
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from . import running
from .core import (
    CheckError,
    Mistake,
    TimedOut,
    check_prediction,
    describe,
    exercise,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    read_prediction,
    run_student,
    time_limit,
)

__all__ = [
    "check_script_vs_trace",
    "check_cond_gate",
    "check_fullgraph_prediction",
    "check_fullgraph_fix",
    "check_run_programs",
]


# ----------------------------------------------------------------------------- 09.1 script vs trace


def fresh_inputs() -> list[torch.Tensor]:
    """Seven inputs whose largest |x| is 0.5 to 50 (0 to 6 halvings); the last one's is negative."""
    g = torch.Generator().manual_seed(90)
    inputs = []
    for largest in (0.5, 1.0, 1.7, 4.0, 6.0, 50.0):
        x = torch.randn(4, generator=g)
        inputs.append(x / x.abs().max() * largest)
    # 7 is no power of 2: a norm above 1 and a largest |x| above 0.5 need different numbers of halvings here
    inputs.append(torch.tensor([-7.0, 0.5, 1.5, -0.25]))
    return inputs


def halve_while(x: torch.Tensor, too_large: Callable[[torch.Tensor], bool]) -> torch.Tensor:
    """Halve the whole of ``x`` while ``too_large(x)``: the reference, and its typical variants."""
    while too_large(x):
        x = x / 2
    return x


def _largest_abs_above_one(x: torch.Tensor) -> bool:
    return bool(x.abs().max() > 1)


def _largest_abs_at_least_one(x: torch.Tensor) -> bool:
    return bool(x.abs().max() >= 1)


def _largest_above_one(x: torch.Tensor) -> bool:
    return bool(x.max() > 1)


def _halve_once(x: torch.Tensor) -> torch.Tensor:
    if _largest_abs_above_one(x):
        return x / 2
    return x


def _halve_elementwise(x: torch.Tensor) -> torch.Tensor:
    while _largest_abs_above_one(x):
        x = torch.where(x.abs() > 1, x / 2, x)
    return x


def _on_every_input(variant: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[list], bool]:
    """A test on the answers for all fresh inputs: are they what ``variant`` returns?"""

    def test(answers: list) -> bool:
        for got, x in zip(answers, fresh_inputs()):
            if not torch.equal(got, variant(x)):
                return False
        return True

    return test


def _variant_no_abs(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, _largest_above_one)


def _variant_sum(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, lambda t: bool(t.abs().sum() > 1))


def _variant_norm(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, lambda t: bool(t.norm() > 1))


def _variant_mean(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, lambda t: bool(t.abs().mean() > 1))


def _variant_min(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, lambda t: bool(t.abs().min() > 1))


def _variant_floor(x: torch.Tensor) -> torch.Tensor:
    while _largest_abs_above_one(x):
        x = torch.div(x, 2, rounding_mode="floor")
    return x


def _divide_by_largest(x: torch.Tensor, signed: bool, always: bool) -> torch.Tensor:
    """x divided by its largest |x| (or, ``signed``, its largest value) while the largest |x| is above 1 (or, ``always``,
    once whatever it is): the loop's halving replaced by a normalisation."""
    for _ in range(50):  # x / x.max() can flip signs back and forth: a student's loop could run long
        if not always and not _largest_abs_above_one(x):
            break
        x = x / (x.max() if signed else x.abs().max())
        if always:
            break
    return x


def _divided_by_largest(answers: list) -> bool:
    """Is every answer its input divided by its largest (absolute) value, in a loop or once, not halved?"""
    for signed, always in itertools.product((False, True), repeat=2):
        wants = [_divide_by_largest(x, signed, always) for x in fresh_inputs()]
        if all(torch.allclose(got, want, atol=1e-6) for got, want in zip(answers, wants)):
            return True
    return False


def _halvings(got: torch.Tensor, x: torch.Tensor) -> int | None:
    """k if ``got`` is the whole of ``x`` halved k times (k < 40), else None."""
    for k in range(40):
        if torch.equal(got, x / 2**k):
            return k
    return None


def _needed_halvings(x: torch.Tensor) -> int:
    """How many halvings the reference makes on ``x``."""
    return _halvings(halve_while(x, _largest_abs_above_one), x) or 0


def _capped(answers: list) -> bool:
    """Every answer is its input halved as often as it needs, but never more than some cap of 2 or more (a loop
    over a fixed range that halves only while x is too large): the cap shows on an input that needs more."""
    done = [_halvings(got, x) for got, x in zip(answers, fresh_inputs())]
    needed = [_needed_halvings(x) for x in fresh_inputs()]
    if None in done or done == needed:
        return False
    cap = max(done)
    return cap >= 2 and done == [min(k, cap) for k in needed]


def _whole_tensor_halved(answers: list) -> bool:
    """Every answer is its input, whole, halved some number of times (the wrong number somewhere)."""
    return all(_halvings(got, x) is not None for got, x in zip(answers, fresh_inputs()))


def _variant_at_least_one(x: torch.Tensor) -> torch.Tensor:
    return halve_while(x, _largest_abs_at_least_one)


EAGER_MISTAKES = [
    Mistake(
        "no abs",
        _on_every_input(_variant_no_abs),
        "its loop measures x by its largest value, not by its largest absolute value: a large negative value "
        "never counts",
        look="the loop's condition",
    ),
    Mistake(
        ">= 1",
        _on_every_input(_variant_at_least_one),
        "it halves once too often: it keeps going while the largest |x| is >= 1, but 1 is small enough",
        look="the comparison in the loop's condition",
    ),
    Mistake(
        "if, not while",
        _on_every_input(_halve_once),
        "it halved at most once: an `if` tests once, and a `return` inside the loop's body ends the function "
        "after its first pass; the loop must test again after every halving, and hand x back once it is done",
        look="what ends the loop: its condition, or something in its body",
    ),
    Mistake(
        "fixed number of passes",
        _capped,
        "it halves while the largest |x| is above 1, but at most a fixed number of times: a loop over a fixed "
        "range stops after its last pass however large x still is, so an input that needs more halvings comes back "
        "too large; the number of passes has to come from the data",
        look="what ends the loop",
    ),
    Mistake(
        "elementwise",
        _on_every_input(_halve_elementwise),
        "it halved only the large elements: the exercise halves the whole tensor, every element alike",
    ),
    Mistake(
        "sum, not max",
        _on_every_input(_variant_sum),
        "its loop measures x by the sum of |x|, which grows with the number of elements: the exercise's "
        "measure is one element, the largest |x|",
        look="the loop's condition",
    ),
    Mistake(
        "norm, not max",
        _on_every_input(_variant_norm),
        "its loop measures x by its norm, which counts every element: the exercise's measure is one "
        "element, the largest |x|",
        look="the loop's condition",
    ),
    Mistake(
        "mean, not max",
        _on_every_input(_variant_mean),
        "its loop measures x by the mean of |x|, which is below the largest |x| and stops too soon: the "
        "exercise's measure is the largest |x|",
        look="the loop's condition",
    ),
    Mistake(
        "min, not max",
        _on_every_input(_variant_min),
        "its loop looks at the smallest |x|: one small element ends the loop while a large one is still above 1",
        look="the loop's condition",
    ),
    Mistake(
        "floor division",
        _on_every_input(_variant_floor),
        "it rounds down as it halves: floor division (//, rounding_mode='floor') turns 1.7 into 0 and -0.25 "
        "into -1, not halves",
        look="the halving line",
    ),
    Mistake(
        "divided by the largest",
        _divided_by_largest,
        "it divides x by its own largest value, which scales it to a largest |x| of 1 in one step: the exercise "
        "halves x, by the same factor every pass, as many passes as it takes, so the result depends on how many "
        "halvings were needed",
        look="the line inside the loop that makes x smaller",
    ),
    Mistake(
        "wrong stop",
        _whole_tensor_halved,
        "it halves the whole tensor, as it should, but not the right number of times: the loop stops too "
        "early or too late on some inputs. It must go on exactly while the largest |x| is above 1, "
        "and return x as it is then",
        look="the loop's condition and what is returned after the loop",
    ),
]


def _returned(value: Any, who: str) -> Any:
    """``value``, unless it is None: a function whose result is not handed back yet (a stub left as given, no
    `return`, a print in its place, or a change made in place)."""
    __tracebackhide__ = True
    if value is None:
        raise CheckError(
            f"{who} returned None",
            hint="it does not hand back a result yet: is it finished? A function gives its result with `return`; "
            "a print only shows a value, and a change made in place returns nothing",
            usage=True,
        )
    return value


def _eager_answers(halve_until_small: Any, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    _stop_endless_script(halve_until_small, "your halve_until_small(x)")
    answers = []
    for x in inputs:
        got = run_student(
            halve_until_small,
            x.clone(),
            what="your halve_until_small(x)",
            inplace_hint="x /= 2 writes into the caller's tensor: make a new tensor each time",
        )
        got = _returned(got, "your halve_until_small(x)")
        answers.append(expect_tensor(got, "what halve_until_small returned", shape=tuple(x.shape), dtype=x.dtype))
    return answers


def _check_eager(halve_until_small: Any) -> None:
    inputs = fresh_inputs()
    answers = _eager_answers(halve_until_small, inputs)
    for x, got in zip(inputs, answers):
        want = halve_while(x, _largest_abs_above_one)
        if torch.equal(got, want):
            continue
        message = f"halve_until_small is wrong for an input whose largest |x| is {float(x.abs().max()):g}"
        facts = {"expected": f"largest |x| {float(want.abs().max()):.3g}", "got": f"largest |x| {_largest(got)}"}
        mistake = first_mistake(answers, EAGER_MISTAKES)
        if mistake is not None:
            raise mistake_error(message, mistake, **facts)
        raise CheckError(message, **facts)
    _check_large_input(halve_until_small)


#: An input that needs more halvings (13) than any of fresh_inputs (6 at most): a loop capped at the fresh inputs'
#: count (`for _ in range(6)`, read off the prompt) stops before it is small enough.
LARGE_INPUT = (5000.0, -3.0, 0.5, 1.0)


def _check_large_input(halve_until_small: Any) -> None:
    """halve_until_small on an input that needs 13 halvings: the number of passes comes from the data."""
    __tracebackhide__ = True
    x = torch.tensor(LARGE_INPUT)
    got = _eager_answers(halve_until_small, [x])[0]
    want = halve_while(x, _largest_abs_above_one)
    if torch.equal(got, want):
        return
    message = f"halve_until_small is wrong for an input whose largest |x| is {float(x.abs().max()):g}"
    facts = {"expected": f"largest |x| {float(want.abs().max()):.3g}", "got": f"largest |x| {_largest(got)}"}
    done = _halvings(got, x)
    if done is not None and done < _needed_halvings(x):
        fixed = next(mistake for mistake in EAGER_MISTAKES if mistake.name == "fixed number of passes")
        raise mistake_error(message, fixed, **facts)
    raise CheckError(message, **facts)


def _largest(t: torch.Tensor) -> str:
    return f"{float(t.abs().max()):.3g}" if t.numel() else "(empty)"


PAST = {"script": "scripted", "trace": "traced"}


def _torchscript(obj: Any, name: str, how: str) -> Any:
    """``obj`` if it is what torch.jit returns, else a CheckError saying what it is."""
    if isinstance(obj, (torch.jit.ScriptFunction, torch.jit.ScriptModule)):
        return obj
    if obj is None:
        raise CheckError(f"{name} is None", hint="run the exercise cell that makes it", usage=True)
    why = f"{name} must come from torch.jit.{how}: a plain function or module is not a TorchScript graph"
    if isinstance(obj, torch.Tensor):
        raise CheckError(
            f"{name} is a tensor, a result, not a TorchScript function",
            expected=f"what torch.jit.{how} returns",
            got=describe(obj),
            hint=f"a tensor is what calling the {PAST[how]} function gives: the check needs the function itself, "
            "kept without calling it",
            usage=True,
        )
    raise CheckError(
        f"{name} is not a TorchScript function",
        expected=f"what torch.jit.{how} returns",
        got=describe(obj),
        hint=why if callable(obj) else None,
        mistake=f"not {PAST[how]}" if callable(obj) else None,
        usage=not callable(obj),
    )


def _graph_has_loop(fn: Any) -> bool:
    graph = getattr(fn, "graph", None)
    return "prim::Loop" in str(graph)


def _returns_in_time(fn: Any, inputs: list[torch.Tensor], seconds: float) -> bool:
    """Whether ``fn`` returns (or raises) on every input within ``seconds``, tried in a forked child process.
    TorchScript runs its loops in C++, where the time limit's signal cannot stop them: in the check's own process
    a scripted loop that never ends would hang the kernel. Where there is no fork (Windows) it says True."""
    if not hasattr(os, "fork"):
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "this process is multi-threaded": the child only computes
        child = os.fork()
    if child == 0:  # the child: run every input, whatever happens, and leave without clean-up
        try:
            for x in inputs:
                with contextlib.suppress(BaseException):
                    fn(x.clone())
        finally:
            os._exit(0)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if os.waitpid(child, os.WNOHANG)[0]:
                return True
            time.sleep(0.01)
        return False
    finally:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)


def _same_script(fn: Any, eager: Any) -> bool:
    """Whether ``fn`` is ``torch.jit.script(eager)``: the same TorchScript code as the eager function that returned
    on every input above."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.script(eager).code == fn.code
    except Exception:
        return False


#: What each of 09.1's three names should be, said when TorchScript handed in under that name never returns.
ENDLESS_FIX = {
    "your halve_until_small(x)": "halve_until_small is the plain Python function; it halves while the largest |x| "
    "is above 1",
    "scripted_halve": "script the halve_until_small that passed above",
    "traced_halve": "trace the halve_until_small that passed above, with `example`",
}


def _stop_endless_script(fn: Any, name: str, eager: Any = None) -> None:
    """A CheckError if ``fn``, TorchScript with a loop, does not return on the fresh inputs within the time limit."""
    __tracebackhide__ = True
    scripted = isinstance(fn, (torch.jit.ScriptFunction, torch.jit.ScriptModule))
    if not scripted or "prim::Loop" not in str(getattr(fn, "inlined_graph", "prim::Loop")):
        return
    if eager is not None and _same_script(fn, eager):
        return
    limit = running.TIME_LIMIT
    if _returns_in_time(fn, [*fresh_inputs(), torch.tensor(LARGE_INPUT)], limit):
        return
    raise CheckError(
        f"{name} did not return within {limit:g} s on the check's inputs, so the check stopped it",
        hint=f"its loop never ends on some input (a while whose condition never changes?): {ENDLESS_FIX[name]}",
        mistake="too slow",
    )


def _outputs(fn: Any, name: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    outputs = []
    for x in inputs:
        got = run_student(fn, x.clone(), what=name)
        outputs.append(expect_tensor(got, f"what {name} returned", shape=tuple(x.shape), dtype=x.dtype))
    return outputs


def _fixed_halvings(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> int | None:
    """k if every output is its input halved k times (what a trace replays), else None."""
    for k in range(12):
        if all(torch.equal(out, x / 2**k) for out, x in zip(outputs, inputs)):
            return k
    return None


def _check_scripted(scripted: Any, inputs: list[torch.Tensor], wants: list[torch.Tensor]) -> None:
    outputs = _outputs(scripted, "scripted_halve", inputs)
    wrong = sum(not torch.equal(out, want) for out, want in zip(outputs, wants))
    if wrong == 0:
        return
    message = f"scripted_halve is wrong on {wrong} of {len(inputs)} fresh inputs, where halve_until_small is right"
    if _fixed_halvings(outputs, inputs) is not None and not _graph_has_loop(scripted):
        why = "scripted_halve replays a fixed number of halvings, as a trace does: it was traced, not scripted"
        raise CheckError(message, hint=why, mistake="traced, not scripted")
    raise CheckError(message, hint="script the halve_until_small that passed above", mistake="scripted another")


def _trace_is_exact(eager: Callable, inputs: list[torch.Tensor], wants: list[torch.Tensor]) -> bool:
    """Whether the check's own trace of the student's eager function (on an input that needs two halvings) is right
    on every input: then that function has no data-dependent loop for a trace to get wrong."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = run_student(torch.jit.trace, eager, torch.tensor([3.0, -1.0]), what="tracing halve_until_small")
            outputs = [run_student(traced, x.clone(), what="its trace") for x in inputs]
        except CheckError:
            return False
    return all(isinstance(out, torch.Tensor) and torch.equal(out, want) for out, want in zip(outputs, wants))


NO_LOOP = (
    "halve_until_small gets the result without a data-dependent loop (tensor operations that work out the number "
    "of halvings), so any trace of it is right on every input and there is nothing for tracing to get wrong; the "
    "exercise is about the loop it describes, which halves while the largest |x| is above 1"
)


def _check_traced(traced: Any, eager: Callable, inputs: list[torch.Tensor], wants: list[torch.Tensor]) -> int:
    outputs = _outputs(traced, "traced_halve", inputs)
    wrong = sum(not torch.equal(out, want) for out, want in zip(outputs, wants))
    if wrong == 0 and _graph_has_loop(traced):
        why = "traced_halve still holds the loop (prim::Loop in its graph): it was scripted, not traced"
        raise CheckError("traced_halve is right on every fresh input", hint=why, mistake="scripted, not traced")
    if wrong == 0 and _trace_is_exact(eager, inputs, wants):
        raise CheckError(
            "traced_halve is right on every fresh input, and so is a trace of your halve_until_small",
            hint=NO_LOOP,
            mistake="no loop to trace",
        )
    if wrong == 0:
        raise CheckError(
            "traced_halve is right on every fresh input, which a trace of a data-dependent loop cannot be",
            hint="it is the trace of a function without the data-dependent loop: trace halve_until_small itself",
            mistake="traced another",
        )
    if _fixed_halvings(outputs, inputs) is None:
        raise CheckError(
            "traced_halve does not replay a fixed number of halvings, as a trace of halve_until_small does",
            hint="trace the halve_until_small that passed above, with `example`",
            mistake="traced another",
        )
    return wrong


@exercise("09.1", "a loop that tracing gets wrong")
def check_script_vs_trace(halve_until_small: Callable, scripted_halve: Any, traced_halve: Any) -> None:
    """The eager loop, its ``torch.jit.script`` and its ``torch.jit.trace`` on fresh inputs needing 0 to 6 halvings."""
    _check_eager(halve_until_small)
    scripted = _torchscript(scripted_halve, "scripted_halve", "script")
    traced = _torchscript(traced_halve, "traced_halve", "trace")
    inputs = fresh_inputs()
    wants = [halve_while(x, _largest_abs_above_one) for x in inputs]
    _stop_endless_script(scripted, "scripted_halve", halve_until_small)
    _stop_endless_script(traced, "traced_halve", halve_until_small)
    _check_scripted(scripted, inputs, wants)
    wrong = _check_traced(traced, halve_until_small, inputs, wants)
    passed(
        f"script vs trace: the scripted loop matches the reference on {len(inputs)} fresh inputs (0 to 6 halvings); "
        f"the trace replays a fixed number of halvings and is wrong on {wrong} of {len(inputs)}"
    )


# ----------------------------------------------------------------------------- 09.2 fullgraph prediction


def _flip_if_negative(x: torch.Tensor) -> torch.Tensor:  # notebook 09's function, the experiment's subject
    if x.sum() > 0:
        return x
    return -x


def fullgraph_outcome() -> str:
    """What ``torch.compile(flip_if_negative, fullgraph=True)`` does on a negative input: error, correct or wrong."""
    x = -torch.arange(1.0, 4.0)
    try:
        out = torch.compile(_flip_if_negative, fullgraph=True, backend="eager")(x)
    except Exception:
        return "error"
    if torch.equal(out, -x):
        return "correct"
    return "wrong"


#: Words a student may write for 09.2's "error": the compiled call raises.
RAISES_WORDS = frozenset(
    {"raise", "raises", "raised", "exception", "throw", "throws", "an error", "an exception", "raises an error"}
    | {"raises an exception", "it raises", "it raises an error", "error is raised", "an error is raised"}
)


#: Words of 09.2's other two choices: "right" is "correct", "incorrect" is "wrong" (the engine would read the "in"
#: of "incorrect" as a denial of "correct").
SYNONYMS = {"right": "correct", "the right one": "correct", "incorrect": "wrong", "the wrong one": "wrong"}

#: More ways to say that the call raises: it crashes, it errors, or the name of an exception class.
CRASH_WORDS = frozenset({"crash", "crashes", "it crashes", "errors", "it errors", "errors out", "it errors out"})


def _fullgraph_word(prediction: Any) -> Any:
    """09.2's "error" written another way ("raises", "an exception", an exception class such as RuntimeError, or one
    of them raised and kept), "right" and "incorrect" as "correct" and "wrong"; anything else unchanged."""
    if isinstance(prediction, BaseException) or (
        isinstance(prediction, type) and issubclass(prediction, BaseException)
    ):
        return "error"
    if not isinstance(prediction, str):
        return prediction
    words = " ".join(re.sub(r"[^a-z]+", " ", str.lower(prediction)).split())  # str.lower: a subclass may lie
    if words in RAISES_WORDS or words in CRASH_WORDS:
        return "error"
    if re.fullmatch(r"[A-Za-z_.]*(Error|Exception|Unsupported)", str.strip(prediction)):  # "TypeError", "Unsupported"
        return "error"
    return SYNONYMS.get(words, prediction)


@exercise("09.2", "does fullgraph=True accept a data-dependent branch?", prediction=True)
def check_fullgraph_prediction(prediction: Any) -> None:
    """Predict-then-run: ``torch.compile(flip_if_negative, fullgraph=True)`` on a negative input."""
    choices = ("error", "correct", "wrong")
    prediction = read_prediction("fullgraph=True", _fullgraph_word(prediction), choices)  # refused before compiling
    check_prediction(
        "fullgraph=True",
        prediction,
        fullgraph_outcome(),
        choices=choices,
        why="A branch on a tensor's value needs a graph break, and fullgraph=True forbids graph breaks, "
        "so compiling raises instead of falling back to Python.",
        mistakes={
            "correct": "Without fullgraph=True it would be: Dynamo breaks the graph at the `if`, "
            "runs the branch in Python and stays correct.",
            "wrong": "That is tracing. Dynamo guards what it captured, so it never silently replays the wrong branch.",
        },
        ask="what does fullgraph=True promise about the captured program, and what does Dynamo do without it "
        "when it reaches an `if` on a tensor's value",
    )


# ----------------------------------------------------------------------------- 09.3 a Gate that exports


# How far each row of a gate batch moves from the common row (whose h.sum() is +-5), in steps of 10 towards the
# batch's sign: the rows' sums are 25, -5, -5 / 15, 5, -5 / 5, 5, -25 / 15, 5, -5 times the sign of h.sum(). So
# every row, alone, has the wrong sign in some batch, and most of the rows have it in batches 1 and 3, not 2 and 4.
GATE_ROW_MOVES = {
    (1.0, 1.0): (2.0, -1.0, -1.0),
    (1.0, -1.0): (1.0, 0.0, -1.0),
    (-1.0, 1.0): (-1.0, -1.0, 2.0),
    (-1.0, -1.0): (1.0, 0.0, -1.0),
}


def gate_batches(linear: torch.nn.Linear) -> list[tuple[torch.Tensor, str]]:
    """Four batches of 3 rows, one per pair of signs of (h.sum(), x.sum()), with h = linear(x). The rows of a batch
    disagree in sign, and which of them agree with the whole batch changes from batch to batch: only the whole
    batch's sum decides, not one row's, nor a majority of the rows (GATE_ROW_MOVES). Each comes with its
    description."""
    w = linear.weight.detach().double()
    b = linear.bias.detach().double() if linear.bias is not None else torch.zeros(w.shape[0], dtype=torch.float64)
    d = w.sum(0)  # h.sum() of one row is x @ d + b.sum()
    ones = torch.ones_like(d)
    system = torch.stack([torch.stack([d @ d, d @ ones]), torch.stack([d @ ones, ones @ ones])])
    spread = 10.0 * d / (d @ d).clamp(min=1e-12)  # moves a row's h.sum() by 10; a batch's moves add up to 0
    batches = []
    for h_sign in (1.0, -1.0):
        for x_sign in (1.0, -1.0):
            moves = GATE_ROW_MOVES[(h_sign, x_sign)]
            target = torch.tensor([5.0 * h_sign - float(b.sum()), 5.0 * x_sign], dtype=torch.float64)
            a, c = torch.linalg.solve(system, target)
            row = a * d + c * ones  # row @ d + b.sum() = +-5, row.sum() = +-5
            x = torch.stack([row + h_sign * move * spread for move in moves]).float()
            words = f"h.sum() {'>' if h_sign > 0 else '<'} 0, x.sum() {'>' if x_sign > 0 else '<'} 0"
            batches.append((x, words))
    return batches


def gate_rule(h: torch.Tensor) -> torch.Tensor:
    """Gate's function of h = self.linear(x): relu where the whole batch's sum is positive, else -h."""
    if h.sum() > 0:
        return h.relu()
    return -h


def _which_branch(got: torch.Tensor, h: torch.Tensor) -> str:
    if torch.allclose(got, h.relu(), atol=1e-5):
        return "relu"
    if torch.allclose(got, -h, atol=1e-5):
        return "neg"
    return "neither"


def _branch_mistake(taken: list[str], batches: list) -> Mistake | None:
    """Name why the branches were picked wrongly, from which branch each batch took."""
    h_positive = [words.startswith("h.sum() >") for _, words in batches]
    x_positive = ["x.sum() >" in words for _, words in batches]
    relu_taken = [branch == "relu" for branch in taken]
    if relu_taken == [not p for p in h_positive]:
        return Mistake(
            "swapped branches",
            None,
            "the two branches are swapped: the first function is the one that runs when the predicate is true",
            look="the order of the two branch functions",
        )
    if relu_taken == x_positive:
        return Mistake(
            "predicate on x",
            None,
            "the branch follows the sign of x.sum(), the module's input: Gate decides on h, the output of self.linear",
            look="the predicate: which tensor does it sum?",
        )
    return Mistake(
        "wrong predicate",
        None,
        "the branch does not follow the sign of the sum over all of h (the whole batch, every element)",
        look="the predicate",
    )


UNCHANGED_BRANCH = Mistake(
    "a branch returns h",
    None,
    "a branch returns h unchanged: Gate returns relu(h) when the batch's sum is positive and -h otherwise",
    look="the two branch functions",
)


NEGATION_CLIPPED = Mistake(
    "the negating branch clipped",
    None,
    "the branch for a sum that is not above 0 does more than negate h: Gate's second branch flips the sign of every "
    "element of h and clips nothing, where this one also zeroed or folded the elements of one sign (a relu, or an "
    "abs, carried over from the other branch)",
    look="the branch taken when the sum is not above 0",
)


#: Activations a student may put into a branch in place of Gate's relu (or around its negation).
OTHER_ACTIVATIONS = {
    "a sigmoid": torch.sigmoid,
    "a tanh": torch.tanh,
    "a softplus": F.softplus,
    "a GELU": F.gelu,
    "a SiLU": F.silu,
    "an ELU": F.elu,
    "a leaky relu": F.leaky_relu,
}


def _other_activation(got: torch.Tensor, h: torch.Tensor) -> str | None:
    """The activation (in OTHER_ACTIVATIONS' words) whose f(h), -f(h) or f(-h) ``got`` is, or None."""
    for words, function in OTHER_ACTIVATIONS.items():
        for candidate in (function(h), -function(h), function(-h)):
            if torch.allclose(got, candidate, atol=1e-5):
                return words
    return None


def other_activation_mistake(words: str) -> Mistake:
    """A branch that applies ``words`` (such as "a sigmoid") where Gate's branch applies none of it."""
    return Mistake(
        "another activation in a branch",
        None,
        f"a branch applies {words} to h: that is not Gate's rule, which returns relu(h) when the batch's sum is "
        "positive and h negated otherwise, and nothing else",
        look="the two branch functions, side by side with Gate's forward",
    )


def _negation_clipped(got: torch.Tensor, h: torch.Tensor) -> bool:
    """Is ``got`` h negated and made non-negative: relu(-h), -relu(h) or |h|?"""
    for clipped in ((-h).relu(), -(h.relu()), h.abs(), -(h.abs())):
        if torch.allclose(got, clipped, atol=1e-5):
            return True
    return False


OPERANDS_MISSING = Mistake(
    "operands missing",
    None,
    "the branch functions take an argument, but torch.cond had no operands to give them: its last argument "
    "is the tuple of tensors it passes to whichever branch runs",
    look="the arguments of torch.cond, and those of the branch functions",
)

BRANCH_MUTATES = Mistake(
    "branch changes its input",
    None,
    "a branch of torch.cond changes its input in place (relu_, neg_, +=), which cond cannot capture: each branch "
    "must compute and return a new tensor",
    look="the two functions given to torch.cond",
)

# What torch says when torch.cond is called the wrong way, and the mistake behind it.
COND_USAGE = [
    (
        "expected pred to be bool or single-element tensor",
        Mistake(
            "per-row predicate",
            None,
            "torch.cond takes one predicate for the whole call (a one-element boolean tensor) and runs one "
            "branch; a comparison per row would pick a branch per row, which is elementwise selection, not "
            "Gate's rule: Gate decides once, on the sum over the whole batch",
            look="the first argument of torch.cond",
        ),
    ),
    (
        "expect operands to be a tuple",
        Mistake(
            "operands not a tuple",
            None,
            "torch.cond's last argument is the collection of tensors handed to both branches (a tuple or a "
            "list), not a single tensor",
            look="the last argument of torch.cond",
        ),
    ),
    (
        "expect both branches to be callable",
        Mistake(
            "branches not functions",
            None,
            "torch.cond was given the two branches' results, tensors computed before it ran, where it takes two "
            "functions: it calls only the one the predicate picks, with the operands as its arguments",
            look="the second and third arguments of torch.cond",
        ),
    ),
    ("missing required positional argument", OPERANDS_MISSING),
    ("missing a required argument", OPERANDS_MISSING),  # torch 2.6's words
    ("failed to bind arguments when attempting to inline", OPERANDS_MISSING),  # torch 2.11's words
    ("input mutation during higher order op tracing", BRANCH_MUTATES),  # torch 2.11: refused before export
    (
        "unsupported branch return type",
        Mistake(
            "branch returns no tensor",
            None,
            "a branch function of torch.cond returns no tensor (None, from a body without `return`, or a Python "
            "number): torch.cond hands back what the branch it runs returns, so each branch must end by returning "
            "a tensor shaped like h",
            look="the last line of each branch function",
        ),
    ),
    (
        "when merging two branches' output in torch.cond",
        Mistake(
            "branches differ",
            None,
            "the two branches return tensors of different shapes or dtypes: torch.cond merges them into one "
            "output, so both must return what Gate returns, a tensor shaped like h",
            look="what each branch function returns",
        ),
    ),
]

_COND_MISTAKES = {mistake.name: mistake for _, mistake in COND_USAGE}
COND_USAGE += [  # a tensor's bound method as a branch (h.relu): Dynamo names the method it cannot trace
    (
        "<unknown module>.tensor.",
        Mistake(
            "a tensor's method as a branch",
            None,
            "a branch given to torch.cond is one tensor's own method (such as h.relu), which holds that tensor "
            "inside it: torch.cond calls each branch with the operands and traces what it computes from them, so a "
            "branch must be a function of its arguments",
            look="the second and third arguments of torch.cond, and the operands handed to them",
        ),
    ),
]
COND_USAGE += [  # torch 2.6's words for two of them
    ("expected branches to return a possibly nested", _COND_MISTAKES["branch returns no tensor"]),
    ("expect branches to return tensors with same metadata", _COND_MISTAKES["branches differ"]),
]

BRANCH_RETURNS_TUPLE = Mistake(
    "branch returns a tuple",
    None,
    "torch.cond returns what its branches return: a branch that returns a tuple (or list) of tensors makes "
    "forward return that tuple, where Gate returns one tensor",
    look="what each branch function returns, and what forward returns",
)


COND_RESULT_WRAPPED = Mistake(
    "cond's result wrapped",
    None,
    "torch.cond handed back one tensor, as its branches return one, and forward put that tensor into a list (or "
    "tuple) before returning it: Gate's forward returns the tensor itself",
    look="forward's return line: what surrounds torch.cond's result",
)


@contextlib.contextmanager
def _recording_cond(results: list) -> Iterator[None]:
    """Calls of ``torch.cond`` (the name students call) append what each returned to ``results``."""
    original = torch.cond

    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        results.append(out)
        return out

    torch.cond = recorded
    try:
        yield
    finally:
        torch.cond = original


def _collection_mistake(got: Any, cond_results: list) -> Mistake:
    """A list or tuple returned by forward: wrapped there around cond's tensor, or handed back by cond itself."""
    if cond_results and isinstance(cond_results[-1], torch.Tensor) and len(got) == 1:
        return COND_RESULT_WRAPPED
    return BRANCH_RETURNS_TUPLE


def _reason_in_causes(err: BaseException, phrase: str) -> str | None:
    """The first line holding ``phrase`` in the errors ``err`` was raised from (torch 2.6 raises a generic
    "Cond doesn't work unless it is captured completely" from the error that says why), or None."""
    cause, depth = err.__cause__, 0
    while cause is not None and depth < 6:
        for line in str(cause).splitlines():
            if phrase in line.lower():
                return line.strip()
        cause, depth = cause.__cause__ or cause.__context__, depth + 1
    return None


#: What to say when CondGate's forward wrote into its input.
INPUT_CHANGED = (
    "an in-place operation (a method ending in _, +=, an assignment into x[...]) wrote into the input: Gate's forward "
    "leaves x as it came, and a caller that uses x again would find other numbers"
)

WEIGHTS_CHANGED_IN_FORWARD = Mistake(
    "weights changed in forward",
    None,
    "forward changed self.linear's weights while it ran (an in-place change: a method ending in _, .data, an "
    "assignment under torch.no_grad), so every call computes another function and the exported graph is not the "
    "module that was checked: forward computes from the weights and leaves them as they are; only an optimizer "
    "step changes them",
    look="every line of forward that writes into self.linear",
)


def _run_gate(model: torch.nn.Module, x: torch.Tensor) -> Any:
    """``model(x)``, with torch.cond's own complaints about how it was called turned into named mistakes (and
    Dynamo's warning about a branch it cannot trace left out: the named mistake says it in words); a forward that
    writes into its input or its own weights is named."""
    weights = [p.detach().clone() for p in model.linear.parameters()]
    result = _run_gate_forward(model, x)
    if any(not torch.equal(w, p.detach()) for w, p in zip(weights, model.linear.parameters())):
        raise mistake_error("CondGate()(x) changed self.linear's weights while it ran", WEIGHTS_CHANGED_IN_FORWARD)
    return result


def _run_gate_forward(model: torch.nn.Module, x: torch.Tensor) -> Any:
    """``model(x)``, with torch.cond's own complaints turned into named mistakes."""

    def call(x: torch.Tensor) -> Any:  # the module's argument by its name, x, in what run_student says
        return model(x)

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Dynamo does not know how to trace", category=UserWarning)
            with running.grad_mode_kept("CondGate()(x)"):
                return run_student(call, x.clone(), what="CondGate()(x)", inplace_hint=INPUT_CHANGED)
    except CheckError as err:
        text = err.message.lower()
        for phrase, mistake in COND_USAGE:
            reason = _reason_in_causes(err, phrase) if phrase not in text else None
            if reason:  # torch 2.6 says why only in the error it was raised from
                raise mistake_error(f"{err.message.splitlines()[0]} {reason}"[:300], mistake) from None
            if phrase in text:
                first = err.message.splitlines()[0]
                if first.count("(") > first.count(")"):  # a tensor printed over several lines: cut before it
                    first = first.split(", but got")[0]
                if first.endswith(":"):  # torch's reason comes on a later line: add the line that names it
                    first += " " + next(line.strip() for line in err.message.splitlines() if phrase in line.lower())
                raise mistake_error(first[:300], mistake) from None
        raise


BRANCHES_ON_X = Mistake(
    "branches given x",
    None,
    "the branches ran on x, the module's input, not on h: what CondGate returns has x's shape, one value per input "
    "feature, where Gate applies its relu (or its negation) to the output of self.linear. Which tensor does "
    "torch.cond hand to its branches?",
    look="the operands of torch.cond",
)


COND_RESULT_INDEXED = Mistake(
    "cond's result indexed",
    None,
    "torch.cond hands back what its branch returns, here one tensor shaped like h; indexing that result takes "
    "one of its rows, not an element of a tuple",
    look="what forward does with torch.cond's result before returning it",
)


def _first_row_only(got: Any, h: torch.Tensor) -> bool:
    """Is ``got`` the first row of Gate's output (or of the other branch's), a (B, 3) result indexed [0]?"""
    if not isinstance(got, torch.Tensor) or h.dim() != 2 or got.shape != h.shape[1:]:
        return False
    return torch.allclose(got, h[0].relu(), atol=1e-5) or torch.allclose(got, -h[0], atol=1e-5)


def _ran_on_x(got: Any, x: torch.Tensor, h: torch.Tensor) -> bool:
    """Is ``got`` Gate's rule applied to x itself (relu(x) or -x), not to h?"""
    if not isinstance(got, torch.Tensor) or got.shape != x.shape or x.shape == h.shape:
        return False
    return torch.allclose(got, x.relu(), atol=1e-5) or torch.allclose(got, -x, atol=1e-5)


def _eager_runs(model: torch.nn.Module, batches: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(h, output) of the student's module on each batch, h = model.linear(x)."""
    runs = []
    for x, _ in batches:
        cond_results: list = []
        with torch.no_grad(), _recording_cond(cond_results):
            h = model.linear(x)
            got = _run_gate(model, x)
        if isinstance(got, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in got):
            raise mistake_error(
                f"CondGate()(x) returned a {type(got).__name__} of {len(got)}, not a tensor",
                _collection_mistake(got, cond_results),
                expected=f"a tensor of shape {tuple(h.shape)}",
            )
        if _first_row_only(got, h):
            raise mistake_error(
                f"CondGate()(x) returned a tensor of shape {tuple(got.shape)}, one row of h's shape",
                COND_RESULT_INDEXED,
                expected=f"shape {tuple(h.shape)}, that of h = self.linear(x)",
            )
        if _ran_on_x(got, x, h):
            raise mistake_error(
                f"CondGate()(x) returned a tensor of shape {tuple(got.shape)}, x's shape",
                BRANCHES_ON_X,
                expected=f"shape {tuple(h.shape)}, that of h = self.linear(x)",
            )
        got = _returned(got, "CondGate()(x)")
        runs.append((h, expect_tensor(got, "CondGate()(x)", shape=tuple(h.shape), dtype=h.dtype)))
    return runs


def _check_eager_gate(model: torch.nn.Module, batches: list) -> None:
    runs = _eager_runs(model, batches)
    wrong = [i for i, (h, got) in enumerate(runs) if not torch.allclose(got, gate_rule(h), atol=1e-5)]
    if not wrong:
        return
    first = wrong[0]
    h, got = runs[first]
    words = batches[first][1]
    message = f"CondGate()(x) differs from Gate's function on batch {first + 1} of {len(batches)} ({words})"
    expected = "relu(h)" if words.startswith("h.sum() >") else "-h"
    taken = [_which_branch(out, hs) for hs, out in runs]
    if taken[first] == "neither":
        facts = {"expected": f"{expected}, with h = self.linear(x)", "got": "neither relu(h) nor -h"}
        if torch.allclose(got, h, atol=1e-5):
            raise mistake_error(message, UNCHANGED_BRANCH, **facts)
        if expected == "-h" and _negation_clipped(got, h):
            raise mistake_error(message, NEGATION_CLIPPED, **facts)
        activation = _other_activation(got, h)
        if activation:
            raise mistake_error(message, other_activation_mistake(activation), **facts)
        if _per_element(runs):
            raise mistake_error(message, ELEMENTWISE_CHOICE, **facts)
        if _per_row(runs):
            raise mistake_error(message, ROW_CHOICE, **facts)
        raise CheckError(message, **facts)
    facts = {"expected": expected, "got": f"{'relu(h)' if expected == '-h' else '-h'} (the other branch)"}
    if "neither" in taken:
        raise CheckError(message, **facts)
    if len(set(taken)) == 1:
        raise mistake_error(message, _one_branch_everywhere(taken[0]), **facts)
    raise mistake_error(message, _branch_mistake(taken, batches), **facts)


ELEMENTWISE_CHOICE = Mistake(
    "choice per element",
    None,
    "the output is |h|: each element of h was kept or negated by its own sign, a choice per element, where Gate "
    "makes one choice for the whole batch, from the sign of h.sum(), and applies that branch to all of h",
    look="the condition that picks the branch: is it one value for the batch, or one per element?",
)


ROW_CHOICE = Mistake(
    "choice per row",
    None,
    "each row of h took its own branch, from the sign of its own sum: Gate makes one choice for the whole batch, "
    "from the sign of h.sum() over all of h, and applies that branch to every row",
    look="the condition that picks the branch: over which elements of h does its sum run?",
)


def _per_row(runs: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Is every output the branch each row of h picks by the sign of its own sum (a torch.where per row)?"""
    return all(
        torch.allclose(got, torch.where(h.sum(dim=-1, keepdim=True) > 0, h.relu(), -h), atol=1e-5) for h, got in runs
    )


def _per_element(runs: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Is every output |h|, and not a choice per row (which gives |h| on a batch whose rows each keep one sign)?"""
    if not all(torch.allclose(got, h.abs(), atol=1e-5) for h, got in runs):
        return False
    per_rows = [torch.where(h.sum(dim=-1, keepdim=True) > 0, h.relu(), -h) for h, _ in runs]
    return not all(torch.allclose(got, per_row, atol=1e-5) for (_, got), per_row in zip(runs, per_rows))


def _one_branch_everywhere(branch: str) -> Mistake:
    """Every batch took the same branch: a predicate that never changes, or two branches that compute the same."""
    result = "relu(h)" if branch == "relu" else "-h"
    return Mistake(
        "wrong predicate",
        None,
        f"every batch got {result}, whatever the sign of h.sum(): the predicate came out the same for every batch "
        "(it does not follow the sign of the sum over all of h), or both branch functions compute the same thing",
        look="the predicate, and the two branch functions side by side",
    )


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """A refused export prints the graph it got (stderr, logging) and warns: the check's message says what matters."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _is_data_dependent(exc: Exception) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "datadependent" in text or "data-dependent" in text or "data dependent" in text or "control flow" in text


PYTHON_BRANCH = Mistake(
    "python branch",
    None,
    "the branch is decided in Python on a tensor's value (an `if`, .item(), bool()), which one graph cannot "
    "hold: which operator, met in the section on fullgraph=True, keeps both branches inside the graph?",
    look="forward's `if` (CondGate runs Gate's forward unless it defines its own)",
)


def _export(model: torch.nn.Module, x: torch.Tensor) -> Any:
    try:
        with _quiet_export(), time_limit(running.TIME_LIMIT):
            return torch.export.export(model, (x,))
    except TimedOut:
        raise CheckError(f"torch.export of CondGate did not finish within {running.TIME_LIMIT:g} s") from None
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
        reason = lines[0] if not lines[0].endswith(":") or len(lines) == 1 else f"{lines[0]} {lines[1]}"
        message = f"torch.export refused CondGate ({type(exc).__name__}: {reason[:220]})"
        if _is_data_dependent(exc):
            raise mistake_error(message, PYTHON_BRANCH) from None
        # torch 2.6 traces the branch and then refuses its in-place change of a tensor that requires grad
        if "input mutation" in str(exc).lower() or "used in an in-place operation" in str(exc):
            raise mistake_error(message, BRANCH_MUTATES) from None
        raise CheckError(message) from None


def _check_exported(program: Any, batches: list, model: torch.nn.Module) -> None:
    if "torch.ops.higher_order.cond" not in str(program.graph_module.code):
        raise CheckError(
            "the exported graph has no cond node: the branch is not a graph operator",
            hint="torch.where, or a mask, computes both branches and picks elementwise; the exercise asks for the "
            "graph operator that runs only the branch the predicate picks",
            mistake="no cond node",
        )
    exported = program.module()
    for number, (x, words) in enumerate(batches, start=1):
        with torch.no_grad():
            want = gate_rule(model.linear(x))
            got = expect_tensor(run_student(exported, x.clone(), what="the exported CondGate"), "its output")
        if not torch.allclose(got, want, atol=1e-5):
            raise CheckError(f"the exported CondGate differs from Gate's function on batch {number} ({words})")


def _build_gate(cond_gate_class: Any) -> torch.nn.Module:
    if cond_gate_class is None:
        raise CheckError("CondGate is None: run the exercise cell that defines it", usage=True)
    if isinstance(cond_gate_class, torch.nn.Module):
        raise CheckError("the check needs the class CondGate itself, not an instance CondGate()", usage=True)
    if not isinstance(cond_gate_class, type) or not issubclass(cond_gate_class, torch.nn.Module):
        raise CheckError(
            "the check needs your module class (a subclass of nn.Module)", got=describe(cond_gate_class), usage=True
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = run_student(cond_gate_class, what="CondGate()")
    linear = getattr(model, "linear", None)
    if not isinstance(linear, torch.nn.Linear) or (linear.in_features, linear.out_features) != (4, 3):
        raise CheckError(
            "CondGate() has no .linear = nn.Linear(4, 3), which Gate's function needs",
            hint="subclass Gate and keep its __init__",
            usage=True,
        )
    if linear.bias is None:
        raise CheckError("CondGate().linear has no bias, where Gate's layer has one", hint=KEEP_GATE_INIT, usage=True)
    _check_gate_layer(linear)
    return model


KEEP_GATE_INIT = (
    "subclass Gate and keep its __init__: self.linear = nn.Linear(4, 3), float32 on the CPU, random weights"
)


def _check_gate_layer(linear: torch.nn.Linear) -> None:
    """The check builds its batches from the layer's weights and runs it on float32 CPU rows: refuse a layer
    it cannot use (another dtype or device, weights that are not finite, or weights that no batch can tell apart)."""
    for name, tensor in linear.named_parameters():
        if tensor.dtype != torch.float32 or tensor.device.type != "cpu":
            raise CheckError(
                f"CondGate().linear.{name} is {tensor.dtype} on {tensor.device}: the check needs Gate's float32 "
                "CPU layer, which it runs on float32 CPU batches",
                hint=KEEP_GATE_INIT,
                usage=True,
            )
        if not torch.isfinite(tensor).all():
            raise CheckError(
                f"CondGate().linear.{name} holds NaN or inf: the check needs Gate's layer with its random weights",
                hint=KEEP_GATE_INIT,
                usage=True,
            )
    column_sums = linear.weight.detach().double().sum(0)  # what gate_batches moves h.sum() along
    spread = column_sums - column_sums.mean()
    if spread.norm() < 1e-3 * max(1.0, float(column_sums.norm())):
        raise CheckError(
            "CondGate().linear's weights have equal column sums (all zero, or constant), so no batch can set the "
            "sign of h.sum() apart from that of x.sum(): the check needs Gate's layer with its random weights",
            hint=KEEP_GATE_INIT,
            usage=True,
        )


OUTPUT_DETACHED = Mistake(
    "no gradient to the layer",
    None,
    "the values are Gate's, but no gradient flows from CondGate's output back to self.linear: somewhere between h "
    "and the output the graph was cut (.detach(), .data, a tensor rebuilt from values, torch.no_grad), so a "
    "training step would never change the layer; Gate's output carries the layer's gradient in both branches",
    look="what forward does to h and to torch.cond's result on the way to its return",
)


def _check_gate_gradients(model: torch.nn.Module, batches: list) -> None:
    """The layer's gradients through CondGate's output, on each batch, against those through Gate's rule on a copy
    of the layer (a CondGate is a module that trains, not only one that exports)."""
    weights = torch.randn(batches[0][0].shape[0], 3, generator=torch.Generator().manual_seed(5))
    for number, (x, words) in enumerate(batches, start=1):
        reference = copy.deepcopy(model.linear)
        want = torch.autograd.grad((gate_rule(reference(x)) * weights).sum(), list(reference.parameters()))
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _run_gate(model, x)
        message = f"CondGate()(x) on batch {number} ({words}) gives Gate's values but not its gradients"
        if not isinstance(got, torch.Tensor) or not got.requires_grad:
            raise mistake_error(message, OUTPUT_DETACHED, got="an output that does not require grad")
        params = list(model.linear.parameters())
        grads = torch.autograd.grad((got * weights).sum(), params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        if all(float(g.abs().max()) == 0.0 for g in grads):
            raise mistake_error(message, OUTPUT_DETACHED, got="gradients of zero on every weight of self.linear")
        if not all(torch.allclose(g, w, atol=1e-5) for g, w in zip(grads, want)):
            raise CheckError(message, expected="the gradients of Gate's rule on self.linear's weights")


ZERO_SUM_TO_RELU = Mistake(
    "a sum of 0 sent to relu",
    None,
    "on a batch whose h.sum() is exactly 0 the module returned relu(h): Gate takes its first branch only for a sum "
    "above 0, so a sum of exactly 0 goes to the other branch",
    look="the comparison in the predicate: what does it give for a sum of exactly 0?",
)

#: A bias whose entries add up to exactly 0 in float32: with x all zeros, every row of h is this bias.
ZERO_SUM_BIAS = (0.5, -0.5, 0.0)


def _zero_sum_probe(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.Tensor] | None:
    """A copy of the student's module whose layer makes h.sum() exactly 0 on a batch of zeros, and that batch; None
    where the module cannot be copied."""
    try:
        probe = copy.deepcopy(model)
    except Exception:  # a module that refuses to be copied: the tie is not tried
        return None
    with torch.no_grad():
        probe.linear.bias.copy_(torch.tensor(ZERO_SUM_BIAS))
    return probe, torch.zeros(2, probe.linear.in_features)


def _check_zero_sum(model: torch.nn.Module) -> None:
    """The tie: on a batch whose h.sum() is exactly 0, Gate returns -h (its `if` asks for a sum above 0)."""
    made = _zero_sum_probe(model)
    if made is None:
        return
    probe, x = made
    h, got = _eager_runs(probe, [(x, "h.sum() = 0")])[0]
    if torch.allclose(got, gate_rule(h), atol=1e-5):
        return
    message = "CondGate()(x) differs from Gate's function on a batch whose h.sum() is exactly 0"
    if torch.allclose(got, h.relu(), atol=1e-5):
        raise mistake_error(message, ZERO_SUM_TO_RELU, expected="-h", got="relu(h) (the other branch)")
    raise CheckError(message, expected="-h, with h = self.linear(x)", got=f"{describe(got)}")


@functools.cache
def _warm_up_cond() -> None:
    """Run torch.cond once, outside any time limit: its first call imports and sets up Dynamo (seconds on a small
    machine), which would count against the student's forward, and a time limit that ends it halfway leaves
    torch._dynamo half imported, broken for every later call in the kernel."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cond(torch.tensor(True), torch.neg, torch.abs, (torch.ones(1),))


@exercise("09.3", "a Gate that exports")
def check_cond_gate(cond_gate_class: Any) -> None:
    """``cond_gate_class()`` against Gate's rule on batches that take each branch, then exported: one cond node."""
    _warm_up_cond()
    model = _build_gate(cond_gate_class)
    batches = gate_batches(model.linear)
    _check_eager_gate(model, batches)
    _check_zero_sum(model)
    _check_gate_gradients(model, batches)
    program = _export(model, batches[0][0])
    _check_exported(program, batches, model)
    passed("CondGate: matches Gate on both branches; torch.export keeps both in one graph (a cond node)")


# ----------------------------------------------------------------------------- 09.4 one graph, no breaks


def summarise_variant(
    x: torch.Tensor, *, scale: str = "abs max", flip: str = "mean < 0", share: str = "> 0 after"
) -> torch.Tensor:
    """Notebook 09's ``summarise`` (Exercise 4) without its print, and its typical variants: how x is
    scaled ("none": not at all; "max", "norm"), when it is flipped (by the sign of the mean, the median or the
    smallest entry), and how the share of positive entries is counted."""
    y = x.clone() if scale == "none" else x / _scale_of(x, scale)
    if flip == "each":
        y = y.abs()
    elif flip == "sign":
        y = y * torch.sign(y.mean())
    elif flip != "none" and _flips(_flip_statistic(y, flip), flip):
        y = -y
    counted = x if share == "> 0 before" else y
    positive = (counted >= 0) if share == ">= 0 after" else (counted > 0)
    if share == "nonzero":
        positive = counted != 0
    if share == "< 0 after":
        positive = counted < 0
    elif share == "<= 0 after":
        positive = counted <= 0
    count = float(positive.sum())
    if share == "none":
        return y
    if share == "mask":
        return y * positive.to(y.dtype)
    if share == "count":
        return y * count
    if share == "floor":
        return y * (count // len(y))
    if share == "percent":
        return y * (100 * count / len(y))
    if share == "positive mean":
        return y * y.clamp(min=0).mean()
    return y * (count / len(y))


def _scale_of(x: torch.Tensor, scale: str) -> torch.Tensor:
    """What this variant divides x by: its largest absolute value (summarise's), its largest value, or its norm."""
    if scale == "max":
        return x.max()
    if scale == "norm":
        return x.norm()
    return x.abs().max()


def _flips(mean: torch.Tensor, flip: str) -> bool:
    """Does this variant of the flip's condition negate a vector with this mean?"""
    if flip == "mean >= 0":
        return bool(mean >= 0)
    if flip == "mean > 0":
        return bool(mean > 0)
    if flip == "mean <= 0":
        return bool(mean <= 0)
    return bool(mean < 0)


def _flip_statistic(y: torch.Tensor, flip: str) -> torch.Tensor:
    """The number whose sign decides this variant of the flip: the mean (summarise's), or what a student may put
    in its place, the median or the smallest entry."""
    if flip == "median < 0":
        return y.median()
    if flip == "min < 0":
        return y.min()
    return y.mean()


def summarise_reference(x: torch.Tensor) -> torch.Tensor:
    """What ``summarise`` returns (the reference the check compares with)."""
    return summarise_variant(x)


def summarise_inputs() -> list[tuple[torch.Tensor, str]]:
    """Seven vectors, each with what it tests: both signs of the mean, a largest |x| that is
    negative, exact zeros, a length other than 6, and a mean of exactly 0 (which summarise leaves unflipped)."""
    g = torch.Generator().manual_seed(94)
    base = torch.randn(6, generator=g)
    return [
        (base.abs() + 0.1, "all positive"),
        (-(base.abs() + 0.1), "all negative"),
        (torch.tensor([3.0, -1.0, 0.5, -0.25, 2.0, -0.5]), "a positive mean"),
        (torch.tensor([-4.0, 1.0, 0.5, 0.25, 1.0, -0.5]), "a negative mean, largest |x| negative"),
        (torch.tensor([0.0, -2.0, 1.0, -0.5, 0.0, 0.75]), "zeros and a negative mean"),
        (torch.randn(9, generator=g) + 0.3, "9 numbers"),
        (torch.tensor([1.0, -1.0, 0.5, -0.5]), "a mean of exactly 0"),
    ]


def _variant(**how: str) -> Callable[[list], bool]:
    """A test on the answers for all of summarise_inputs: are they what this variant returns?"""

    def test(answers: list) -> bool:
        for got, (x, _) in zip(answers, summarise_inputs()):
            if not torch.allclose(got, summarise_variant(x, **how), atol=1e-6):
                return False
        return True

    return test


def _either_variant(*tests: Callable[[list], bool]) -> Callable[[list], bool]:
    """A test on the answers that holds where any of ``tests`` holds."""

    def test(answers: list) -> bool:
        return any(one(answers) for one in tests)

    return test


def _zero_mean_changed(answers: list) -> bool:
    """Right except on the vector whose mean is exactly 0, which came back flipped or zeroed."""
    return _variant(flip="mean <= 0")(answers) or _variant(flip="sign")(answers)


def _length_written_in(answers: list) -> bool:
    """Right but for the share's divisor, one number for every vector, not each vector's own length."""
    counts = [summarise_variant(x, share="count") for x, _ in summarise_inputs()]
    pairs = [(got.double(), count.double()) for got, count in zip(answers, counts)]
    scaled = [(got, count) for got, count in pairs if float((got * count).sum()) > 0]
    if not scaled:
        return False
    got, count = scaled[0]
    divisor = float((count * count).sum() / (got * count).sum())
    length = round(divisor)
    if length < 1 or abs(divisor - length) > 1e-3:
        return False
    same = all(torch.allclose(got, count / length, atol=1e-6) for got, count in pairs)
    return same and any(len(x) != length for x, _ in summarise_inputs())


def _from_unscaled_x(answers: list) -> bool:
    """Built from x as it came: every step on x unscaled, or x itself times the share of the scaled vector."""
    if _variant(scale="none")(answers):
        return True
    for got, (x, _) in zip(answers, summarise_inputs()):
        share = (summarise_variant(x, share="none") > 0).to(x.dtype).mean()
        if not torch.allclose(got, x * share, atol=1e-6):
            return False
    return True


SCALED_VECTOR_UNUSED = Mistake(
    "scaled vector unused",
    _from_unscaled_x,
    "the result is built from x as it came, not from the scaled vector: summarise first divides x by its largest "
    "absolute value, and the flip, the share and the product all work on that scaled vector, which is also what "
    "gets returned",
    look="which vector each step after the scaling (and the return) uses",
)


LENGTH_WRITTEN_IN = Mistake(
    "length written in",
    None,
    "the vector's length is written into the function as a number (the length of the vectors you tried): "
    "summarise_graph is called on vectors of any length, so every size it uses must be read from x itself",
    look="every number in summarise_graph that stands for a length or a size",
)


SUMMARISE_MISTAKES = [
    Mistake(
        "no abs",
        _variant(scale="max"),
        "x is divided by its largest value, not by its largest absolute value",
        look="the line that scales x",
    ),
    Mistake(
        "scaled by the norm",
        _variant(scale="norm"),
        "x is divided by its length (the Euclidean norm), not by its largest absolute value: summarise scales the "
        "vector so that its largest entry, in absolute value, becomes 1",
        look="the line that scales x",
    ),
    Mistake(
        "flip swapped",
        _either_variant(_variant(flip="mean >= 0"), _variant(flip="mean > 0")),
        "the sign flips when the mean is positive: summarise flips only a vector whose mean is negative",
        look="the condition of the flip",
    ),
    Mistake(
        "a mean of 0 flipped",
        _zero_mean_changed,
        "the vector whose mean is exactly 0 came back flipped (or zeroed): summarise flips only a vector whose "
        "mean is below 0, and returns one with a mean of 0 unflipped",
        look="what the flip does when the mean is exactly 0",
    ),
    Mistake(
        "flip by the median",
        _variant(flip="median < 0"),
        "the flip follows the sign of the median of the vector (its middle entry), not that of its mean: a vector "
        "with a positive mean but more negative entries than positive ones came back flipped",
        look="which number of the vector the flip's condition compares with 0",
    ),
    Mistake(
        "flip when any entry is negative",
        _variant(flip="min < 0"),
        "the vector is flipped whenever one of its entries is negative (its smallest entry below 0): summarise "
        "flips by the sign of the mean of all the entries, one number for the whole vector",
        look="which number of the vector the flip's condition compares with 0",
    ),
    Mistake(
        "flip each element",
        _variant(flip="each"),
        "every negative element was flipped on its own: summarise flips the whole vector, by the sign of its mean",
        look="the flip",
    ),
    Mistake(
        "flip left out",
        _variant(flip="none"),
        "the vector is never flipped: summarise negates the whole vector when its mean is below 0, a step that "
        "summarise_graph leaves out (the vectors with a positive mean hide it)",
        look="what happens between the scaling and the share",
    ),
    Mistake(
        "share left out",
        _variant(share="none"),
        "the result is the scaled (and flipped) vector itself: summarise also multiplies it by the share of its "
        "entries that are above 0, one number for the whole vector",
        look="what the returned vector is multiplied by",
    ),
    Mistake(
        "only the scaling",
        _variant(flip="none", share="none"),
        "the result is x scaled and nothing more: summarise goes on from the scaled vector with two more steps, the "
        "flip by the sign of its mean and the product by the share of its entries above 0, and summarise_graph "
        "leaves both out (is it finished?)",
        look="what summarise_graph does between the scaling and its return",
    ),
    Mistake(
        "each entry by its own comparison",
        _variant(share="mask"),
        "each entry was multiplied by its own comparison with 0 (1 or 0), which only zeroes the entries at or below "
        "0: the share is one number for the whole vector, the fraction of its entries above 0",
        look="the share: one number for the vector, or one per entry?",
    ),
    Mistake(
        "share of the other entries",
        _either_variant(_variant(share="< 0 after"), _variant(share="<= 0 after")),
        "the share counts the entries below 0 (or at most 0), the other side of the comparison: summarise "
        "multiplies by the share of the entries that are above 0",
        look="the comparison inside the share",
    ),
    Mistake(
        "share of the nonzero entries",
        _variant(share="nonzero"),
        "the share counts every entry that is not 0, the negative ones too (as a count of nonzero entries does): "
        "summarise counts the entries that are strictly above 0",
        look="the comparison inside the share",
    ),
    Mistake(
        "count, not share",
        _variant(share="count"),
        "the result is multiplied by the number of positive entries, not by their share of all entries",
        look="the share",
    ),
    Mistake(
        "share in whole numbers",
        _variant(share="floor"),
        "the share was computed in integer arithmetic: the number of positive entries floor-divided by the length "
        "is 0 unless every entry is positive, where the share is a fraction between 0 and 1",
        look="the division that turns the count into a share, and the dtype of what it divides",
    ),
    Mistake(
        "share in percent",
        _variant(share="percent"),
        "the share came out as a percentage, 100 times too large: summarise multiplies by the fraction of the "
        "entries that are above 0, a number between 0 and 1",
        look="the share",
    ),
    Mistake(
        "mean of the positive values",
        _variant(share="positive mean"),
        "the factor is the mean of the entries' positive parts (each value above 0, the rest as 0): summarise "
        "multiplies by the share of the entries above 0, which counts them, whatever their size",
        look="the share: what is averaged, the values or the comparisons with 0?",
    ),
    Mistake(
        "zero counted",
        _variant(share=">= 0 after"),
        "the share counts zeros as positive: summarise counts the entries that are strictly above 0",
        look="the comparison in the share",
    ),
    Mistake(
        "share before the flip",
        _variant(share="> 0 before"),
        "the share is counted on the vector before the flip: summarise counts after it",
        look="which tensor the share is computed from",
    ),
    dataclasses.replace(LENGTH_WRITTEN_IN, matches=_length_written_in),
    SCALED_VECTOR_UNUSED,
]

# Why Dynamo broke the graph, told by the student's line and Dynamo's reason.
PRINT_LEFT_IN = Mistake(
    "print left in",
    None,
    "a print is Python input/output, which no graph holds: Dynamo must hand control back to Python to run "
    "it (and a compiled graph would print only while it is captured, like a trace)",
    look="the print",
)
BRANCH_IN_PYTHON = Mistake(
    "python branch",
    None,
    "an `if` on a tensor's value is decided by Python, between two graphs: in one graph, the choice must be "
    "a tensor operation that takes the predicate as a tensor (section 6 met one; an elementwise choice works too)",
    look="the flip",
)
PYTHON_NUMBERS = Mistake(
    "python numbers",
    None,
    "the tensor's values leave the graph as Python numbers (tolist, item, float, the math module's functions, a "
    "loop over the elements): "
    "a graph can only count with tensor operations, whose result stays a tensor",
    look="the share of positive entries",
)
DATA_DEPENDENT_SIZE = Mistake(
    "data-dependent size",
    None,
    "selecting the positive entries (with a mask, or nonzero) makes a tensor whose length depends on the "
    "values, which one graph cannot hold: a graph's shapes are known before the values are. Which operation "
    "could count the positive entries and give a result whose shape does not depend on how many there are?",
    look="the share of positive entries",
)
GRAPH_BREAKS = [PRINT_LEFT_IN, BRANCH_IN_PYTHON, PYTHON_NUMBERS, DATA_DEPENDENT_SIZE]
SELECTS_BY_VALUE = re.compile(r"(?<!count_)nonzero\(|masked_select|argwhere")  # a size that depends on values
LOOP_OVER_ELEMENTS = re.compile(r"\bfor\b.+\bin\b")  # a for statement or a generator on the break line


def _break_line(frames: Any, fn: Callable) -> tuple[int | None, str]:
    """(line number inside ``fn``, its text) where Dynamo stopped, from the user stack it reported."""
    code = getattr(fn, "__code__", None)
    for frame in reversed(list(frames or [])):
        if code is not None and frame.filename == code.co_filename and frame.lineno >= code.co_firstlineno:
            return frame.lineno - code.co_firstlineno + 1, (frame.line or "").strip()
    return None, ""


def _break_mistake(exc: BaseException, line: str) -> Mistake | None:
    """The graph break's kind, from the student's line first, then from the first line of Dynamo's reason."""
    reason = (str(exc).splitlines() or [""])[0].lower()
    if "print(" in line or "`print`" in reason:
        return PRINT_LEFT_IN
    if "dynamic shape" in reason or SELECTS_BY_VALUE.search(line):
        return DATA_DEPENDENT_SIZE
    numbers = ("tolist", "item(", "float(", "int(", "numpy", "__iter__", "math.")
    in_reason = ("tolist", "item", "numpy", "data-dependent expression")
    if any(word in line for word in numbers) or any(word in reason for word in in_reason):
        return PYTHON_NUMBERS
    if LOOP_OVER_ELEMENTS.search(line):  # Dynamo reports the loop's `if v > 0` as a branch: the loop came first
        return PYTHON_NUMBERS
    if line.startswith(("if ", "elif ", "while ")) or "branch" in reason or "jump" in reason:
        return BRANCH_IN_PYTHON
    return None


def _compiled_answers(fn: Callable, inputs: list) -> list[torch.Tensor]:
    """Run ``torch.compile(fn, fullgraph=True, backend="eager")`` on every input; a refusal says where."""
    torch._dynamo.reset()  # forget earlier compilations of the same code
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    answers = []
    for x, _ in inputs:
        try:
            with _quiet_export(), time_limit(running.TIME_LIMIT):
                got = compiled(x.clone())
        except TimedOut:
            raise CheckError(f"compiling summarise_graph did not finish within {running.TIME_LIMIT:g} s") from None
        except Exception as exc:
            number, line = _break_line(getattr(exc, "real_stack", None), fn)
            reason = (str(exc).splitlines() or [""])[0][:120]
            where = f" at line {number} of summarise_graph: `{line}`" if number else ""
            message = f"torch.compile(summarise_graph, fullgraph=True) refused it: Dynamo must break the graph{where}"
            facts = {"expected": "one graph for the whole function", "got": f"{type(exc).__name__}: {reason}"}
            mistake = _break_mistake(exc, line)
            if mistake is not None:
                raise mistake_error(message, mistake, **facts) from None
            raise CheckError(message, **facts) from None
        answers.append(expect_tensor(got, "what the compiled summarise_graph returned", shape=tuple(x.shape)))
    return answers


def _no_breaks_by_default(fn: Callable, x: torch.Tensor) -> None:
    """``torch._dynamo.explain`` with Dynamo's default settings must find one graph: fullgraph=True lets some
    calls through (``.item()`` in recent versions) that a plain ``torch.compile`` still breaks the graph at."""
    __tracebackhide__ = True
    torch._dynamo.reset()
    try:
        with _quiet_export(), time_limit(running.TIME_LIMIT):
            report = torch._dynamo.explain(fn)(x.clone())
    except TimedOut:
        raise CheckError(f"tracing summarise_graph did not finish within {running.TIME_LIMIT:g} s") from None
    except Exception:
        return  # the compiled runs above passed: what explain cannot trace, it cannot count either
    if not report.graph_break_count:
        return
    first = report.break_reasons[0]
    number, line = _break_line(first.user_stack, fn)
    where = f" at line {number} of summarise_graph: `{line}`" if number else ""
    message = f"torch.compile(summarise_graph) with Dynamo's default settings breaks the graph{where}"
    reason = (first.reason.splitlines() or [""])[0][:120]
    facts = {"expected": "one graph for the whole function", "got": f"{report.graph_count} graphs: {reason}"}
    mistake = _break_mistake(RuntimeError(first.reason), line)
    if mistake is not None:
        raise mistake_error(message, mistake, **facts)
    raise CheckError(message, **facts)


def _check_summarise_values(answers: list, inputs: list, how: str) -> None:
    for got, (x, words) in zip(answers, inputs):
        want = summarise_reference(x)
        if torch.allclose(got, want, atol=1e-6):
            continue
        message = f"{how} summarise_graph differs from summarise on a vector with {words}"
        facts = {"expected": f"{[round(v, 3) for v in want.tolist()]}", "got": f"{[round(v, 3) for v in got.tolist()]}"}
        if facts["expected"] == facts["got"]:  # a difference below the rounding: say where and how large
            gap = (got.double() - want.double()).abs()
            facts["got"] += f", off by up to {float(gap.max()):.2g} (entry {int(gap.argmax())}): a loss of precision?"
        mistake = first_mistake(answers, SUMMARISE_MISTAKES)
        if mistake is not None:
            raise mistake_error(message, mistake, **facts)
        raise CheckError(message, **facts)


BRANCH_RETURNS_ITS_INPUT = Mistake(
    "cond branch returns its input",
    None,
    "a branch of torch.cond returns its operand itself, unchanged (the branch that leaves the vector as it is): "
    "torch.cond refuses a branch whose output is one of its inputs (it calls that aliasing), even where the "
    "values are right. How can that branch return the same values in a tensor that is not its input?",
    look="the branch of torch.cond that returns its argument as it came",
)


#: What mean() says when it is given the booleans of a comparison.
BOOL_MEAN_ERROR = (
    "could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Bool"
)

MEAN_OF_BOOLEANS = Mistake(
    "mean of booleans",
    None,
    "the share was taken as the mean of the comparison itself, a tensor of booleans, and mean() averages only "
    "floating-point (or complex) numbers: it cannot tell what dtype a mean of True and False would have. What "
    "does the comparison hand to mean(), and what would mean() need to be given instead?",
    look="the share of positive entries",
)


WHERE_CONDITION_NOT_A_TENSOR = Mistake(
    "torch.where given a Python bool",
    None,
    "torch.where takes its condition as a tensor: turned into a Python bool first, the choice is made by Python "
    "again (which one graph cannot hold), and torch.where refuses the bool besides",
    look="the first argument of torch.where",
)
WHERE_VALUE_MISSING = Mistake(
    "torch.where given too few values",
    None,
    "torch.where picks, entry by entry, between two values: one for where the condition holds and one for where it "
    "does not. Called with the condition and a single value, it matches none of its forms",
    look="the arguments of torch.where: which value does it take where the condition is false?",
)
#: torch's words for a torch.where call that matches none of its forms, and the types it was given.
WHERE_REFUSED = re.compile(r"where\(\) received an invalid combination of arguments - got \(([^)]*)\)")


def _where_mistake(message: str) -> Mistake | None:
    """The mistake behind torch.where's refusal of its arguments, from the types torch lists; None otherwise."""
    found = WHERE_REFUSED.search(message)
    if found is None:
        return None
    given = [word.strip() for word in found.group(1).split(",") if word.strip()]
    if given and given[0] == "bool":
        return WHERE_CONDITION_NOT_A_TENSOR
    if len(given) == 2:
        return WHERE_VALUE_MISSING
    return None


def _eager_summaries(summarise_graph: Any, inputs: list) -> list[torch.Tensor]:
    """summarise_graph on every input, run eagerly; torch.cond's refusal of a branch that returns its input is named."""
    __tracebackhide__ = True
    eager = []
    for x, _ in inputs:
        try:
            got = run_student(summarise_graph, x.clone(), what="summarise_graph(x)", inplace_hint="make new tensors")
        except CheckError as err:
            if BOOL_MEAN_ERROR in err.message:
                raise mistake_error(err.message, MEAN_OF_BOOLEANS) from None
            where = _where_mistake(err.message)
            if where is not None:
                lines = err.message.splitlines()
                yours = [line for line in lines if line.startswith("  in your line:")]
                raise mistake_error("\n".join([lines[0].split(" - got")[0], *yours]), where) from None
            if _names_an_earlier_length(err, x, eager):
                raise mistake_error(
                    err.message, LENGTH_WRITTEN_IN, got=f"an error on the vector of {len(x)} numbers"
                ) from None
            if "aliasing" not in err.message.lower():
                raise
            kind = type(err.__cause__).__name__ if err.__cause__ is not None else "an error"
            message = f"summarise_graph(x) raised {kind}: torch.cond refused a branch whose output aliases its input"
            raise mistake_error(message, BRANCH_RETURNS_ITS_INPUT) from None
        got = _returned(got, "summarise_graph(x)")
        if _is_the_share(got, x):
            raise mistake_error(
                f"summarise_graph(x) returned one number for a vector of {len(x)}",
                SHARE_ALONE,
                expected=f"shape {tuple(x.shape)}",
            )
        eager.append(expect_tensor(got, "what summarise_graph returned", shape=tuple(x.shape), dtype=x.dtype))
    return eager


SHARE_ALONE = Mistake(
    "share returned alone",
    None,
    "summarise_graph returned the share of positive entries, one number, where summarise returns the scaled (and "
    "flipped) vector multiplied by that share: a vector as long as x",
    look="what summarise_graph returns",
)


def _is_the_share(got: Any, x: torch.Tensor) -> bool:
    """Is ``got`` a single number equal to the share of x's summarised entries above 0?"""
    if not isinstance(got, torch.Tensor) or got.numel() != 1 or len(x) == 1 or not got.dtype.is_floating_point:
        return False
    share = (summarise_variant(x, share="none") > 0).double().mean()
    return bool(torch.isclose(got.detach().double().reshape(()), share, atol=1e-6))


def _names_an_earlier_length(err: CheckError, x: torch.Tensor, earlier: list[torch.Tensor]) -> bool:
    """Did the function fail on a vector of a new length, naming in its error the length of those it ran on?"""
    lengths = {len(t) for t in earlier} - {len(x)}
    if err.usage or err.mistake == "too slow" or not lengths:
        return False
    return any(re.search(rf"(?<![\d.]){length}(?![\d.])", err.message) for length in lengths)


@exercise("09.4", "one graph, no breaks")
def check_fullgraph_fix(summarise_graph: Any) -> None:
    """``summarise_graph`` equals ``summarise`` on seven vectors, eagerly and under ``torch.compile(fullgraph=True)``."""
    inputs = summarise_inputs()
    eager = _eager_summaries(summarise_graph, inputs)
    _check_summarise_values(eager, inputs, "eagerly,")
    compiled = _compiled_answers(summarise_graph, inputs)
    _check_summarise_values(compiled, inputs, "compiled,")
    _no_breaks_by_default(summarise_graph, inputs[0][0])
    passed(
        f"summarise_graph: equal to summarise on {len(inputs)} vectors (both signs of the mean, a mean of 0, zeros), "
        "and torch.compile(fullgraph=True) captures it as one graph"
    )


# ----------------------------------------------------------------------------- 09.5 a modular network, batched

STEP_NAMES = ("rotate", "scale", "shift", "flip")  # notebook 09's modules, section 9


def program_modules() -> torch.nn.ModuleDict:
    """One seeded nn.Linear(2, 2) per step name: the modules the check runs programs with."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(95)
        return torch.nn.ModuleDict({name: torch.nn.Linear(2, 2) for name in STEP_NAMES})


def program_batch() -> tuple[torch.Tensor, list[tuple[str, ...]]]:
    """12 points and their programs: 5 programs of 1 to 3 steps, interleaved, so that order matters."""
    programs = [("rotate",), ("scale", "shift"), ("flip", "rotate", "scale"), ("shift", "flip"), ("scale", "rotate")]
    rows = [0, 1, 2, 1, 3, 0, 4, 2, 1, 3, 4, 0]
    points = torch.randn(len(rows), 2, generator=torch.Generator().manual_seed(96))
    return points, [programs[r] for r in rows]


def program_batch_reordered() -> tuple[torch.Tensor, list[tuple[str, ...]]]:
    """A second, smaller batch: two programs with the same steps in opposite orders, and one that repeats a step,
    so that rows grouped by their set of names (or a program's steps run once each) show."""
    programs = [("scale", "rotate"), ("rotate", "scale"), ("shift", "shift")]
    rows = [0, 1, 2, 1, 0, 2]
    points = torch.randn(len(rows), 2, generator=torch.Generator().manual_seed(97))
    return points, [programs[r] for r in rows]


def run_program_rows(
    modules: Any, points: torch.Tensor, programs: list, *, reverse: bool = False, cut: bool = False
) -> torch.Tensor:
    """The reference: each row through its own program's modules, one row at a time (or in reverse order; or, with
    ``cut``, each step given its input detached, so that gradients reach a program's last step only)."""
    rows = []
    for i, program in enumerate(programs):
        x = points[i : i + 1]
        for name in reversed(program) if reverse else program:
            x = modules[name](x.detach() if cut else x)
        rows.append(x)
    return torch.cat(rows)


def last_step_on_points(modules: Any, points: torch.Tensor, programs: list) -> torch.Tensor:
    """Each row through the last module of its program alone: every step was given the points, not the
    previous step's output, so only the last one shows."""
    rows = []
    for i, program in enumerate(programs):
        rows.append(modules[program[-1]](points[i : i + 1]))
    return torch.cat(rows)


def _same_rows_other_order(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Are the rows of ``got`` those of ``want`` in another order?"""
    if got.shape != want.shape or torch.allclose(got, want, atol=1e-6):
        return False
    distances = torch.cdist(got.detach().double(), want.detach().double())
    return bool((distances.min(dim=1).values < 1e-5).all() and (distances.min(dim=0).values < 1e-5).all())


def _rows_in_groups(got: torch.Tensor, want: torch.Tensor, programs: list) -> bool:
    """Are the rows of ``got`` those of ``want`` in another order, each program's rows next to each other (the order
    of the groups, never put back)?"""
    if not _same_rows_other_order(got, want):
        return False
    sources = torch.cdist(got.detach().double(), want.detach().double()).argmin(dim=1).tolist()
    runs = []  # the programs along got's rows, a run of equal programs counted once
    for i in sources:
        if not runs or runs[-1] != programs[i]:
            runs.append(programs[i])
    return len(runs) == len(set(programs))


def _equals_one_of(got: torch.Tensor, candidates: list[torch.Tensor]) -> bool:
    """Is ``got`` one of the candidate results?"""
    return any(torch.allclose(got, candidate, atol=1e-6) for candidate in candidates)


def _each_row_one_of(got: torch.Tensor, candidates: list[list[torch.Tensor]]) -> bool:
    """Is every row i of ``got`` one of the rows in ``candidates[i]``?"""
    for row, options in zip(got, candidates):
        if not any(torch.allclose(row, option, atol=1e-6) for option in options):
            return False
    return True


def _rows_through_programs(modules: Any, points: torch.Tensor, programs: list) -> list[list[torch.Tensor]]:
    """For each row, its point through every program of the batch (its own and the others')."""
    results = [run_program_rows(modules, points, [program] * len(points)) for program in dict.fromkeys(programs)]
    return [[result[i] for result in results] for i in range(len(points))]


def _rows_through_reorderings(modules: Any, points: torch.Tensor, programs: list) -> list[list[torch.Tensor]]:
    """For each row, its point through every order of its own program's steps."""
    options = []
    for i, program in enumerate(programs):
        orders = [list(order) for order in itertools.permutations(program)]
        options.append([run_program_rows(modules, points[i : i + 1], [order])[0] for order in orders])
    return options


def _rows_never_run(got: torch.Tensor, want: torch.Tensor, points: torch.Tensor) -> bool:
    """Is every row of ``got`` right, or left as a row of zeros or as its point (a group that never ran), with at
    least one group run?"""
    candidates = [[right, torch.zeros_like(right), point] for right, point in zip(want, points)]
    ran = torch.isclose(got, want, atol=1e-6).all(dim=1) & ~torch.isclose(want, points, atol=1e-6).all(dim=1)
    return bool(ran.any()) and _each_row_one_of(got, candidates)


def _nothing_written(got: torch.Tensor, points: torch.Tensor) -> bool:
    """Is every row of ``got`` still a row of zeros or its own point: a result made, and never filled in?"""
    return _each_row_one_of(got, [[torch.zeros_like(point), point] for point in points])


def _program_slip_mistakes(modules: Any, points: torch.Tensor, programs: list, want: torch.Tensor) -> list[Mistake]:
    """Half-finished run_programs: a step left out, the steps in another order, a row through another row's
    program (the rows grouped by less than their whole program), a group that never ran."""
    shortened = [
        run_program_rows(modules, points, [program[1:] for program in programs]),
        run_program_rows(modules, points, [program[:-1] for program in programs]),
        run_program_rows(modules, points, [program[:1] for program in programs]),
    ]
    return [
        Mistake(
            "a step left out",
            functools.partial(_equals_one_of, candidates=shortened),
            "every program ran short (its first step, its last step, or every step after the first never ran): "
            "each name of a program is one module to apply, from the first name to the last",
            look="the range of steps the loop over a program's names covers",
        ),
        Mistake(
            "steps in another order",
            functools.partial(_each_row_one_of, candidates=_rows_through_reorderings(modules, points, programs)),
            "some rows went through their program's modules in another order: a program is a sequence, not a set "
            "of steps, and a rotation then a scale differs from a scale then a rotation",
            look="what the rows are grouped by, and in which order its steps are applied",
        ),
        Mistake(
            "another row's program",
            functools.partial(_each_row_one_of, candidates=_rows_through_programs(modules, points, programs)),
            "some rows went through the program of another row: the rows were grouped by less than their whole "
            "program (its first step, its length, its set of names), so a group held rows of different programs",
            look="what the rows are grouped by, and whose program each group runs",
        ),
        Mistake(
            "rows never run",
            functools.partial(_rows_never_run, want=want, points=points),
            "the rows that ran are right, but some rows never went through their program (they came back as zeros "
            "or as their point): one group of rows was left out, every program of the batch must run",
            look="the loop over the groups: does it reach every one of them?",
        ),
        Mistake(
            "result never filled in",
            functools.partial(_nothing_written, points=points),
            "no row of the result went through its program: each comes back as it was made (zeros, or its point), "
            "so what the modules computed never reached the tensor that is returned (is it finished?)",
            look="where each group's output is put into the result",
        ),
    ]


def program_mistakes(modules: Any, points: torch.Tensor, programs: list) -> list[Mistake]:
    """The typical wrong results of run_programs on this batch."""
    with torch.no_grad():
        want = run_program_rows(modules, points, programs)
        reversed_rows = run_program_rows(modules, points, programs, reverse=True)
        last_only = last_step_on_points(modules, points, programs)
        slips = _program_slip_mistakes(modules, points, programs, want)
    return [
        Mistake(
            "reversed program",
            reversed_rows,
            "each program ran from its last step to its first: a program's first name is the first module applied",
            look="the order in which a program's modules are applied",
        ),
        Mistake(
            "each step on the points",
            last_only,
            "each step was given the rows of `points`, not the output of the step before it, so only a program's "
            "last step shows in the result: a program's steps form a chain",
            look="what each module of a program is given",
        ),
        Mistake(
            "rows out of order",
            functools.partial(_rows_in_groups, want=want, programs=programs),
            "every row was computed right but comes back in the order of the groups, not in the order of `points`",
            look="where the groups' results are put back together",
        ),
        Mistake(
            "rows put back wrongly",
            functools.partial(_same_rows_other_order, want=want),
            "every row was computed right, and the groups were put back in some order, but not in that of `points`: "
            "row i of the result must be row i of `points` after its program; a permutation that takes each "
            "grouped row to its place is the inverse of the one that grouped them",
            look="how the grouped rows are put back in the order of `points`",
        ),
        *slips,
    ]


NO_GRADIENT = Mistake(
    "no gradient",
    None,
    "the result is right but carries no gradient to the modules: it was built outside autograd's graph "
    "(a new tensor from values, .detach(), .item() or torch.no_grad), so training would not change them",
    look="how the groups' results are put back together",
)
CHAIN_CUT = Mistake(
    "chain cut between steps",
    None,
    "the values are right, and the gradients reach the last module of each program, but none before it: the "
    "graph was cut between one step and the next (a .detach(), .data or a tensor rebuilt from values on a "
    "step's input), so training would change only the last module of every program",
    look="what each step of a program is given: the previous step's output as it came, graph and all",
)
STATE_KEPT = Mistake(
    "state kept between calls",
    None,
    "run_programs's result depends on the calls before it: called again on the same modules, points and programs "
    "(after another batch, or right after itself), it does not give what it gave before; it keeps something from "
    "one call to the next (a dict, a list or a cache made outside the function, or a default "
    "argument that is a dict or list), so a later batch meets the rows of an earlier one",
    look="every name the function uses that is not made anew inside it",
)
ONE_CALL_PER_ROW = Mistake(
    "one call per row",
    None,
    "the modules ran once per row (or per step of every row): rows that share a program can go through each "
    "of its modules together, as one batch",
    look="what the loop runs over",
)


ROWS_EVERYWHERE = Mistake(
    "every row through every program",
    None,
    "the modules ran on more rows than the programs need: every row went through modules of programs that are not "
    "its own, and the right rows were picked out afterwards; only the rows that share a program go through its "
    "modules",
    look="which rows each group's modules are given",
)


class ModuleWork(running.TorchCalls):
    """Counts, among the torch calls of the block, those that apply a module's weight to data, and the rows
    of data they are given. A tensor made from weights alone (weight.T, a stack of weights) counts as a
    weight, so modules[name](h), .forward(h), F.linear and a matmul by hand are all counted alike."""

    def __init__(self, modules: torch.nn.ModuleDict) -> None:
        super().__init__()
        self.applications = 0
        self.rows = 0
        self.in_features = next(iter(modules.values())).in_features
        self.weights = {id(m.weight): m.weight for m in modules.values()}
        self.biases = {id(m.bias): m.bias for m in modules.values() if m.bias is not None}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        result = super().__torch_function__(func, types, args, kwargs)
        given = [t for t in pytree.tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        weights = [t for t in given if id(t) in self.weights]
        biases = [t for t in given if id(t) in self.biases]
        data = [t for t in given if id(t) not in self.weights and id(t) not in self.biases and t.is_floating_point()]
        if weights and data:  # a module at work: one call, on as many rows as its input holds
            self.applications += 1
            self.rows += max(t.numel() for t in data) // self.in_features
        elif not data and (weights or biases):  # made from parameters alone: it stands for them
            made = self.weights if weights else self.biases
            for t in pytree.tree_leaves(result):
                if isinstance(t, torch.Tensor):
                    made[id(t)] = t
        return result


GROUPS_APART = Mistake(
    "groups returned apart",
    None,
    "run_programs returned the results of its groups of rows, one tensor per program, side by side in a list: they "
    "still have to become one tensor whose row i is row i of points after its own program",
    look="what run_programs does with the groups' results before it returns",
)

ROWS_APART = Mistake(
    "rows returned apart",
    None,
    "run_programs returned its rows one by one, side by side in a list: the caller gets one tensor, whose row i is "
    "row i of points after its own program",
    look="what run_programs does with the rows it has computed before it returns",
)

RETURNED_EARLY = Mistake(
    "returned before every group ran",
    None,
    "the result holds only some of the rows, each of them right: the function returned before every group of rows "
    "had run, as a `return` inside the loop over the groups does on the loop's first pass",
    look="where the `return` stands, and what the loop over the groups builds before it",
)

PROGRAM_AS_A_NAME = Mistake(
    "program used as a module's name",
    None,
    "modules was looked up with a whole program, a tuple of step names: modules holds one module per step name, "
    "and a program is a sequence of those names, each one module to apply in turn",
    look="what the function looks up in modules",
)


GROUPS_STACKED = Mistake(
    "groups stacked",
    None,
    "the groups' results were stacked, which puts them side by side along a new first dimension and needs every "
    "group to hold the same number of rows: the groups differ in size, and the caller wants their rows one after "
    "the other in one (B, 2) tensor, each row back at its place in points",
    look="how the groups' results are joined into one tensor",
)


def _program_result(got: Any, want: torch.Tensor) -> torch.Tensor:
    """What run_programs returned, if it is one tensor shaped like ``want``; a half-finished result is named."""
    __tracebackhide__ = True
    got = _returned(got, "run_programs(modules, points, programs)")
    if isinstance(got, (list, tuple)) and got and all(isinstance(t, torch.Tensor) for t in got):
        message = f"run_programs returned a {type(got).__name__} of {len(got)} tensors, not one tensor"
        rows = len(got) == len(want) and all(t.shape == want.shape[1:] for t in got)
        mistake = ROWS_APART if rows else GROUPS_APART
        raise mistake_error(message, mistake, expected=f"one tensor of shape {tuple(want.shape)}")
    early = isinstance(got, torch.Tensor) and got.dim() == 2 and got.shape[1:] == want.shape[1:]
    if early and 0 < len(got) < len(want):
        close = torch.cdist(got.detach().double(), want.double()).min(dim=1).values < 1e-5
        if bool(close.all()):
            message = f"run_programs returned {len(got)} rows for {len(want)} points"
            raise mistake_error(message, RETURNED_EARLY, expected=f"shape {tuple(want.shape)}")
    return expect_tensor(got, "what run_programs returned", shape=tuple(want.shape), dtype=want.dtype)


def _looked_up_a_program(err: CheckError) -> bool:
    """Did the student's function fail looking up a tuple of names (a whole program) in the ModuleDict?"""
    cause = err.__cause__
    if not isinstance(cause, KeyError) or not cause.args or not isinstance(cause.args[0], tuple):
        return False
    frames = traceback.walk_tb(cause.__traceback__)
    return any(frame.f_code.co_name == "__getitem__" and "container" in frame.f_code.co_filename for frame, _ in frames)


def _call_run_programs(run_programs: Any, modules: torch.nn.ModuleDict, points: torch.Tensor, given: list) -> Any:
    """The student's run_programs on the check's batch; a whole program looked up in modules is named."""
    __tracebackhide__ = True
    handed = points.clone()
    try:
        with running.grad_mode_kept("run_programs"):
            got = run_student(
                run_programs,
                modules,
                handed,
                given,
                what="run_programs(modules, points, programs)",
                inplace_hint="make new tensors for the results; leave points as it came",
            )
    except CheckError as err:
        if "stack expects each tensor to be equal size" in err.message:
            raise mistake_error(err.message, GROUPS_STACKED) from None
        if not _looked_up_a_program(err):
            raise
        raise mistake_error(err.message, PROGRAM_AS_A_NAME) from None
    if handed.requires_grad:
        raise mistake_error("run_programs switched on requires_grad of the `points` it was given", POINTS_MADE_A_LEAF)
    return got


POINTS_MADE_A_LEAF = Mistake(
    "requires_grad set on points",
    None,
    "run_programs changed the caller's points: it asked autograd to track them, so every backward through the "
    "result would also fill points.grad. The gradients the training needs are the modules' own weights', which "
    "track themselves; points is data, and is left as it came",
    look="the line that calls requires_grad_ (or sets .requires_grad) on points",
)


def _module_grads(modules: torch.nn.ModuleDict, out: torch.Tensor, weights: torch.Tensor) -> list[torch.Tensor]:
    params = list(modules.parameters())
    grads = torch.autograd.grad((out * weights).sum(), params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


RAN_BACKWARD = (
    "run_programs ran backward on what it computed: it must return the result without running backward "
    "(no .backward(), no torch.autograd.grad); the check takes the modules' gradients through it itself"
)


def _check_program_gradients(
    got: torch.Tensor,
    modules: torch.nn.ModuleDict,
    reference: torch.nn.ModuleDict,
    points: torch.Tensor,
    programs: list,
) -> None:
    """The modules' gradients through ``got`` against those through the row-by-row loop on ``reference``, a copy
    of the modules made before run_programs ran."""
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(97))
    if not got.requires_grad:
        raise mistake_error("run_programs's result does not require grad", NO_GRADIENT, expected="requires_grad True")
    if any(p.grad is not None for p in modules.parameters()):
        raise CheckError(RAN_BACKWARD, got="the modules' .grad already filled in when it returned")
    want = _module_grads(reference, run_program_rows(reference, points, programs), weights)
    try:
        grads = _module_grads(modules, got, weights)
    except RuntimeError as exc:  # the graph behind got was freed by a backward inside run_programs
        raise CheckError(RAN_BACKWARD, got=f"RuntimeError: {str(exc).splitlines()[0][:160]}") from None
    if all(torch.allclose(g, w, atol=1e-5) for g, w in zip(grads, want)):
        return
    message = "the modules' gradients through run_programs differ from those of the row-by-row loop"
    if all(float(g.abs().max()) == 0.0 for g in grads):
        raise mistake_error(message, NO_GRADIENT)
    cut = _module_grads(reference, run_program_rows(reference, points, programs, cut=True), weights)
    if all(torch.allclose(g, c, atol=1e-5) for g, c in zip(grads, cut)):
        raise mistake_error(message, CHAIN_CUT)
    raise CheckError(message)


def _module_tensors(modules: torch.nn.ModuleDict) -> list[tuple[str, Any, list]]:
    """What run_programs must leave as it found it: the module under each name, and each module's tensors
    (the objects, and a copy of their values)."""
    state = []
    for name, module in modules.items():
        tensors = [(key, t, t.detach().clone()) for key, t in module.state_dict(keep_vars=True).items()]
        state.append((name, module, tensors))
    return state


ONLY_READS = "run_programs must only read modules and programs: compute new tensors, and change neither"


def _refuse_changes(modules: torch.nn.ModuleDict, before: list, programs: list, given: list) -> None:
    """Refuse a run_programs that changed the modules (which module sits under a name, a weight's object or
    values) or the list of programs it was given: the reference would then judge another network."""
    if len(given) != len(programs) or any(a is not b for a, b in zip(given, programs)):
        raise CheckError("run_programs changed the list `programs` it was given", hint=ONLY_READS)
    if list(modules.keys()) != [name for name, _, _ in before]:
        raise CheckError("run_programs added or removed modules in `modules`", hint=ONLY_READS)
    for name, module, tensors in before:
        if modules[name] is not module:
            raise CheckError(f"run_programs replaced modules[{name!r}] with another module", hint=ONLY_READS)
        now = module.state_dict(keep_vars=True)
        for key, tensor, values in tensors:
            if now.get(key) is not tensor:
                raise CheckError(f"run_programs replaced modules[{name!r}].{key}", hint=ONLY_READS)
            if not torch.equal(tensor.detach(), values):
                raise CheckError(f"run_programs changed the values of modules[{name!r}].{key}", hint=ONLY_READS)


def _check_program_work(work: ModuleWork, points: torch.Tensor, programs: list) -> int:
    """The module calls and the rows they were given: at most one call per step of each distinct program,
    and each row through the steps of its own program only. Returns the number of calls."""
    if work.applications == 0:
        raise CheckError(
            "the check saw no module at work inside run_programs, so it cannot count the module calls",
            hint="it counts the torch operations that use a module's weight while run_programs runs; work done "
            "elsewhere (compiled code, another thread or process, torch function handling switched off) is not seen",
            usage=True,
        )
    distinct = set(programs)
    limit = sum(len(program) for program in distinct)
    needed = sum(len(program) for program in programs)  # each row through each step of its own program, once
    if work.rows > needed and work.rows > work.applications:  # more than a row a call: rows that are not its own
        message = f"the modules were given {work.rows} rows in all, for programs that need {needed}"
        raise mistake_error(message, ROWS_EVERYWHERE, expected=f"at most {needed} rows through the modules")
    if work.applications > limit:
        message = (
            f"the modules ran {work.applications} times for {len(points)} rows with {len(distinct)} distinct programs"
        )
        raise mistake_error(message, ONE_CALL_PER_ROW, expected=f"at most {limit} module calls")
    if work.rows > needed:
        message = f"the modules were given {work.rows} rows in all, for programs that need {needed}"
        raise mistake_error(message, ROWS_EVERYWHERE, expected=f"at most {needed} rows through the modules")
    return work.applications


def _judge_programs(run_programs: Any, points: torch.Tensor, programs: list) -> int:
    """``run_programs`` on one batch against one row at a time: values, gradients, module calls (their number)."""
    modules = program_modules()
    reference = copy.deepcopy(modules)  # the reference runs on the modules as they were before the call
    before = _module_tensors(modules)
    given = list(programs)
    with ModuleWork(modules) as work:
        got = _call_run_programs(run_programs, modules, points, given)
    _refuse_changes(modules, before, programs, given)
    with torch.no_grad():
        want = run_program_rows(reference, points, programs)
    got = _program_result(got, want)
    if not torch.allclose(got.detach(), want, atol=1e-6):
        mistake = first_mistake(got.detach(), program_mistakes(reference, points, programs))
        message = "run_programs differs from running each row through its own program"
        wrong = int((~torch.isclose(got.detach(), want, atol=1e-6).all(dim=1)).sum())
        facts = {"expected": "the row-by-row results", "got": f"{wrong} of {len(points)} rows differ"}
        if mistake is not None:
            raise mistake_error(message, mistake, **facts)
        raise CheckError(message, **facts)
    _check_program_gradients(got, modules, reference, points, programs)
    return _check_program_work(work, points, programs)


def _probe_allowed(run_programs: Any, err: CheckError) -> bool:
    """May the check call run_programs again to see whether it keeps state? Not a function that ran out of time,
    was no function, or gave what the check cannot use."""
    return callable(run_programs) and not err.usage and "did not return within" not in err.message


def _result_on(run_programs: Any, points: torch.Tensor, programs: list) -> torch.Tensor | None:
    """run_programs's values on a batch, on fresh modules, if they are right; None if it raised or they are not."""
    modules = program_modules()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            got = running.run_student(run_programs, modules, points.clone(), list(programs), what="run_programs")
    except CheckError:
        return None
    with torch.no_grad():
        want = run_program_rows(modules, points, programs)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return None
    return got.detach() if torch.allclose(got.detach(), want, atol=1e-6) else None


def _changes_between_calls(run_programs: Any, points: torch.Tensor, programs: list) -> bool:
    """Do two calls of run_programs in a row on the same batch disagree (one raises and the other does not, or
    their values differ)?"""
    results = []
    for _ in range(2):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                got = running.run_student(run_programs, program_modules(), points.clone(), list(programs))
        except CheckError:
            got = None
        results.append(got.detach() if isinstance(got, torch.Tensor) else None)
    first, second = results
    if first is None or second is None:
        return (first is None) != (second is None)
    return first.shape != second.shape or not torch.allclose(first, second, atol=1e-6, equal_nan=True)


#: Containers a function may keep between calls; the probe below gives it empty ones.
KEPT_CONTAINERS = (dict, list, set)


def _names_read(code: Any) -> set[str]:
    """The global names a code object (and the code nested in it: comprehensions, inner functions) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, type(code)):
            names |= _names_read(const)
    return names


def _emptied(value: Any) -> Any:
    """An empty container of the same type as ``value`` where it is a dict, list or set; else ``value``."""
    if isinstance(value, KEPT_CONTAINERS):
        try:
            return type(value)()
        except TypeError:
            return value
    return value


def _with_fresh_state(run_programs: Any) -> Any:
    """A copy of the plain function ``run_programs`` that finds empty every dict, list and set it could have kept
    from earlier calls (the globals it reads, its default arguments, the variables it closes over), as in a fresh
    kernel; None where it is no plain function or keeps no such container."""
    if not isinstance(run_programs, types.FunctionType):
        return None
    code = run_programs.__code__
    kept = [name for name in _names_read(code) if isinstance(run_programs.__globals__.get(name), KEPT_CONTAINERS)]
    defaults = run_programs.__defaults__ or ()
    cells = run_programs.__closure__ or ()
    contents = []
    for cell in cells:
        try:
            contents.append(cell.cell_contents)
        except ValueError:  # a cell not filled in yet
            return None
    if not kept and not any(isinstance(v, KEPT_CONTAINERS) for v in (*defaults, *contents)):
        return None
    fresh_globals = dict(run_programs.__globals__)
    fresh_globals.update({name: _emptied(fresh_globals[name]) for name in kept})
    fresh = types.FunctionType(
        code,
        fresh_globals,
        run_programs.__name__,
        tuple(_emptied(v) for v in defaults) or None,
        tuple(types.CellType(_emptied(v)) for v in contents) or None,
    )
    fresh.__kwdefaults__ = run_programs.__kwdefaults__
    return fresh


def _right_when_fresh(run_programs: Any, points: torch.Tensor, programs: list) -> bool:
    """Is run_programs right on this batch once the containers it keeps between calls are empty again (a check
    repeated after earlier calls filled them)?"""
    fresh = _with_fresh_state(run_programs)
    return fresh is not None and _result_on(fresh, points, programs) is not None


def _keeps_state(run_programs: Any, points: torch.Tensor, programs: list) -> bool:
    """Does run_programs, wrong on this batch, keep state between calls: two calls in a row disagree, or it is
    right once what it keeps is emptied?"""
    if _changes_between_calls(run_programs, points, programs):
        return True
    return _right_when_fresh(run_programs, points, programs)


def _state_of_the_first_batch(run_programs: Any, points: torch.Tensor, programs: list) -> bool:
    """Right on the first batch, wrong on the second: does run_programs, called again on the first, now get it
    wrong, or is it right on the second once what it keeps between calls is emptied?"""
    if _result_on(run_programs, points, programs) is None:
        return True
    return _right_when_fresh(run_programs, *program_batch_reordered())


@exercise("09.5", "one batch, many networks")
def check_run_programs(run_programs: Any) -> None:
    """``run_programs(modules, points, programs)`` against one row at a time: values, gradients, module calls; on
    the batch the PASS line reports, then on one whose programs share their steps in other orders."""
    points, programs = program_batch()
    try:
        calls = _judge_programs(run_programs, points, programs)
    except CheckError as err:
        if _probe_allowed(run_programs, err) and _keeps_state(run_programs, points, programs):
            raise mistake_error(err.message, STATE_KEPT) from None
        raise
    try:
        _judge_programs(run_programs, *program_batch_reordered())
    except CheckError as err:  # right on the first batch: is it still, after the second? Or alone on the second?
        if _probe_allowed(run_programs, err) and _state_of_the_first_batch(run_programs, points, programs):
            raise mistake_error(err.message, STATE_KEPT) from None
        raise
    passed(
        f"run_programs: {len(points)} rows, {len(set(programs))} programs, equal to one row at a time with the same "
        f"gradients, in {calls} module calls instead of {sum(len(p) for p in programs)}"
    )

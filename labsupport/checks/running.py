"""Running a student's code inside a check: a time limit, errors turned into sentences,
arguments changed in place, and the case-by-case engine for function exercises."""

from __future__ import annotations

import contextlib
import dis
import inspect
import linecache
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .feedback import CheckError
from .values import as_mistakes, compare, describe, first_mistake, mistake_error

#: Seconds a student's function may run inside a check ($LAB_TIME_LIMIT overrides).
TIME_LIMIT = float(os.environ.get("LAB_TIME_LIMIT", "60"))

#: None, or a list the grader (tools/judge.py) sets for partial credit: run_cases then runs every
#: case, appends (cases passed, cases run) and raises the first failure after the last case.
CASE_TALLY: list[tuple[int, int]] | None = None


#: Seconds between rings once a time limit is reached, until the block has stopped. A ring that lands
#: in a finalizer (``__del__``, a weakref callback: Python prints "Exception ignored in ..." and goes
#: on) or in an ``except BaseException`` of the student's is lost; the next one stops the block. A ring
#: while a TimedOut is being handled (its clean-up running) is skipped.
RING_AGAIN = 0.05


class TimedOut(BaseException):
    """Raised in the student's code at the time limit: a BaseException, which ``except Exception`` cannot swallow."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with :class:`TimedOut`, raised again every RING_AGAIN s
    until the block stops (main thread, POSIX only; elsewhere the block runs unlimited). An
    enclosing, earlier deadline is kept."""
    usable = bool(seconds) and hasattr(signal, "setitimer")
    usable = usable and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left < seconds:
        yield  # an enclosing limit ends sooner: it stays in charge
        return
    over = False  # set once the block is over: a ring still pending then is ignored

    def ring(signum: int, frame: Any) -> None:
        if over or (frame is not None and frame.f_code is _TIME_LIMIT_CODE):
            return  # the block is over, or this function's finally is switching the timer off
        if _cleaning_up():
            return  # the last TimedOut is on its way out: its except, finally or __exit__ may finish
        if _importing(frame):
            return  # a module half-loaded stays broken for every later cell: the next ring comes after the import
        raise TimedOut()

    def unraisable(info: Any) -> None:  # a ring lost in a finalizer: no "Exception ignored" text for it
        if not (isinstance(info.exc_type, type) and issubclass(info.exc_type, TimedOut)):
            previous_hook(info)

    previous_hook = sys.unraisablehook
    old = signal.signal(signal.SIGALRM, ring)
    sys.unraisablehook = unraisable
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds, RING_AGAIN)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        over = True
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGALRM, old)
        if outer_left:  # the enclosing limit goes on with what is left of it (at least a tick)
            left = outer_left - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), RING_AGAIN)


_TIME_LIMIT_CODE = time_limit.__wrapped__.__code__


def _importing(frame: Any) -> bool:
    """Whether the interrupted code is running an import (a module's body, or importlib loading it): a TimedOut
    raised there leaves the module half-initialised in sys.modules (torch's compiler modules load lazily, at a
    student's first optimizer or torch.cond), and every later use of it fails."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _cleaning_up() -> bool:
    """Whether the code a ring interrupts is handling a TimedOut (an except, a finally or an __exit__
    that deletes a half-written file, stops workers...), or an error raised while handling one."""
    error = sys.exc_info()[1]
    for _ in range(10):
        if error is None:
            return False
        if isinstance(error, TimedOut):
            return True
        error = error.__context__
    return False


@contextlib.contextmanager
def stopped_after(seconds: float, what: str, why: str) -> Iterator[None]:
    """Run the block under :func:`time_limit`; at the limit raise a TimeoutError that says
    what was stopped and why (for helpers such as the timers and data loaders)."""
    try:
        with time_limit(seconds):
            yield
    except TimedOut:
        raise TimeoutError(f"{what} did not finish within {seconds:g} s, so it was stopped: {why}") from None


# PyTorch's error texts, and what they usually mean in a student's code.
#: What a classification loss says about float targets: on the CPU, and on CUDA (where torch names its kernel).
FLOAT_TARGETS = (
    r"expected target dtype to be Long|expected scalar type Long but found Float"
    r"|nll_loss\w*\" not implemented for '(Float|Double|Half|BFloat16)'"
)
#: torch's NotImplementedError for an operation that has no kernel for a dtype (not a stub's).
_NO_KERNEL = re.compile(r"\" not implemented for '\w+'")

ERROR_HINTS: list[tuple[str, str]] = [
    (
        r"takes \d+ positional arguments? but \d+ (were|was) given|missing \d+ required positional argument"
        r"|got an unexpected keyword argument '(?!axis)",
        "the check calls the function with the arguments the exercise's starting code names, in that order: "
        "compare your def line with it (a parameter added, left out or renamed?)",
    ),
    (
        r"unexpected keyword argument 'axis'|Cannot interpret 'torch\.\w+' as a data type",
        "a NumPy function met a tensor (np.sum(t, axis=...), np.take_along_axis, ...): NumPy hands a tensor to "
        "the tensor's own method with NumPy's argument names, which the tensor does not know. Stay in torch: the "
        "tensor's methods and torch's functions take dim= where NumPy takes axis=",
    ),
    (
        r"mat1 and mat2 shapes|size mismatch, got|Expected size for first two dimensions"
        r"|shapes? .* cannot be multiplied",
        "a matrix product's inner sizes differ: write each operand's shape beside the line",
    ),
    (
        r"indexing tensors could not be broadcast",
        "index tensors used together are paired entry by entry, so their lengths must match (one entry per "
        "row picked): print the shape of each index and ask what each one counts",
    ),
    (
        r"must match the size of tensor b|cannot be broadcast|not broadcastable",
        "two tensors were combined elementwise with shapes that do not broadcast: print both shapes",
    ),
    (
        r"Expected all tensors to be on the same device",
        "tensors on different devices: create new ones with device=x.device, or move them with .to()",
    ),
    (
        r"Input type \(.*\) and weight type \(.*\) should be the same",
        "the input and the layer's weights differ in dtype or device (the names in the message say which): "
        "convert one to the other's, with .to(...), rather than changing the model's type",
    ),
    (
        r"(?i)only tensors of floating point (and complex )?dtype can require gradients",
        "a tensor of whole numbers (an integer dtype) was asked to require gradients, as a parameter or with "
        "requires_grad: gradients exist only for floating-point values; where were its values made integers?",
    ),
    (
        r"could not infer output dtype|must be either a floating point",
        "this operation needs floating-point values and got integers (Long): where did the values become integers?",
    ),
    (
        FLOAT_TARGETS,
        "a classification loss reads its targets as class indices, whole numbers of dtype torch.long: were the "
        "labels converted to another dtype on the way?",
    ),
    (
        r"'(float|int)' object has no attribute 'backward'",
        "backward() was called on a Python number: the loss became one (.item(), float(), the math module) before "
        "the gradients were computed, and a number has no graph to go back through",
    ),
    (
        r"not implemented for '\w+'",
        "this operation has no version for the dtype named at the end of the message (on this device): which "
        "tensor has a dtype it was not meant to have?",
    ),
    (
        r"to have the same dtype|expected scalar type|dtype",
        "tensors of different dtypes: create new ones with dtype=x.dtype (or use torch.*_like)",
    ),
    (
        r"does not require grad and does not have a grad_fn",
        "the tensor is not part of a graph: its leaves need requires_grad=True, and no torch.no_grad() "
        "or .detach() on the way",
    ),
    (
        r"backward through the graph a second time",
        "backward() frees the graph: each step needs its own forward pass",
    ),
    (
        r"leaf Variable that requires grad is being used in an in-place",
        "autograd refuses in-place changes to a leaf it is recording: where should a weight update happen?",
    ),
    (
        r"modified by an inplace operation",
        "an in-place operation (an augmented assignment such as +=, a method ending in _, a write through an "
        "index) overwrote a tensor that autograd saved for the backward pass: which tensor is written after "
        "an operation already used it?",
    ),
    (
        r"grad can be implicitly created only for scalar outputs",
        "backward() without an argument needs a scalar: reduce the loss, or pass gradient=",
    ),
    (
        r"view size is not compatible|is not contiguous",
        "view() reads the tensor's memory in place, so it needs a contiguous tensor, and a transposed or "
        "permuted one is not: which relative of view() copies the entries when it must?",
    ),
    (
        r"must be Tensor, not tuple|'tuple' object has no attribute|instances of 'tuple'|type\(s\) for .*'tuple'",
        "a tuple where a tensor belongs: ctx.saved_tensors, and a function that returns several values, give a "
        "tuple; take the tensor out of it first",
    ),
    (r"index .* is out of bounds|out of range", "an index is out of range: check an off-by-one or the axis you index"),
    # Python's own errors, as a half-written or not-yet-running answer raises them
    (
        r"^NameError",
        "the line reads a name that nothing has assigned yet: a step of the function not written yet, a name "
        "spelled differently where it is made (a parameter's name?), or a cell that defines it and has not run",
    ),
    (
        r"^UnboundLocalError",
        "the line reads a local variable before the function assigned it: its assignment is missing above, or "
        "sits in a branch that did not run",
    ),
    (
        r"'NoneType' object is not callable",
        "something called as a function holds None: the name of an exercise not solved yet (it holds None until "
        "its cell runs with an answer), or a variable that received a function's missing return value",
    ),
    (
        r"NoneType",
        "a value is None where a result was expected: a function that ends without `return` (yours from an "
        "earlier exercise?), an argument left at its default None, or a .grad that no backward() has filled yet",
    ),
    (
        r"'(int|float)' object is not callable",
        "a number was called like a function: a name that holds a number (a parameter such as steps or chunks?) "
        "followed by parentheses, or an operator missing before a parenthesis",
    ),
    (
        r"'torch\.Size' object is not callable",
        ".shape is an attribute that holds the sizes, not a method: it is read, not called",
    ),
    (
        r"'torch\.Size' object cannot be interpreted as an integer",
        "a whole shape went where one number is expected: which of its sizes (or how many elements in all) is meant?",
    ),
    (
        r"'Tensor' object is not callable",
        "a tensor was called like a function: parentheses right after a tensor, or after an attribute that is "
        "not a method (.T, .shape), or a name that holds a tensor where a function was meant",
    ),
    (
        r"only one element tensors can be converted|must be real number, not Tensor",
        "a tensor of several values went where Python needs one number: the math module's functions, float(), "
        "int() and .item() take a single value, and torch.tensor() of a list of tensors converts each to one",
    ),
    (
        r"Boolean value of Tensor with more than one value is ambiguous",
        "a tensor of several values was used where Python needs one True or False (an if, and/or/not, Python's "
        "own max or min): each entry must be compared on its own, with tensor operations",
    ),
    (r"tensors used as indices must be", "an index tensor holds floats: indices are integers (or booleans)"),
    (
        r"Index tensor must have the same number of dimensions",
        "gather's index needs as many axes as the tensor it reads from: compare the two shapes",
    ),
    (r"too many indices for tensor", "more indices than the tensor has axes: print its shape beside the line"),
    (
        r"must be a matrix|must be a [23]D tensor",
        "a matrix product got an operand with another number of axes than it takes (mm: two, bmm: three): "
        "print each operand's shape",
    ),
    (
        r"shape '\[.*\]' is invalid for input of size",
        "the sizes asked of a reshape or view do not multiply to the tensor's number of elements: where does "
        "each size come from?",
    ),
    (
        r"does not match the length of the desired ordering",
        "permute names every axis of the tensor exactly once: count the tensor's axes",
    ),
    (
        r"unsupported operand type\(s\).*'(builtin_function_or_method|method|function)'",
        "a method or function was used without calling it, so the function itself, not its result, went into "
        "the arithmetic",
    ),
    (
        r"'list' object has no attribute|type\(s\) for .*'list'",
        "a Python list where a tensor belongs: a list has no tensor methods and no elementwise arithmetic",
    ),
    (
        r"numpy\.ndarray",
        "a numpy array where a tensor belongs: torch functions take tensors, so stay in torch throughout",
    ),
    (
        r"(not enough|too many) values to unpack",
        "the names on the left of an assignment and the values on the right differ in number: what does the "
        "right side hold (a tuple of how many? a tensor unpacks along its first axis)?",
    ),
]


def explain_error(exc: BaseException) -> str | None:
    """The advice for a PyTorch error raised in student code, or None."""
    text = f"{type(exc).__name__}: {exc}"
    for pattern, advice in ERROR_HINTS:
        if re.search(pattern, text):
            return advice
    return None


def _exception_text(exc: BaseException, limit: int = 6) -> str:
    """The exception's text, its first ``limit`` lines: some of torch's messages (Dynamo's) run to dozens."""
    lines = [line.rstrip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) <= limit:
        return "\n".join(lines)
    return "\n".join(lines[:limit]) + f"\n  ({len(lines) - limit} more lines: lab.show_traceback() shows them all)"


def _student_lines(exc: BaseException) -> list[tuple[Any, str]]:
    """(code object, line) of each frame of the student's own code (a notebook cell) that ``exc`` passed
    through, outermost first, blank lines left out."""
    lines = []
    for frame, number in traceback.walk_tb(exc.__traceback__):
        filename = frame.f_code.co_filename
        if "ipykernel" in filename or filename.startswith("<"):
            line = linecache.getline(filename, number).strip()
            if line:
                lines.append((frame.f_code, line))
    return lines


def _student_line(exc: BaseException) -> str | None:
    """Where in the student's code ``exc`` was raised: the last line of theirs it passed through, and, when that
    line is in another function of theirs (an earlier exercise's helper), the line of the called function that
    called into it."""
    lines = _student_lines(exc)
    if not lines:
        return None
    code, where = lines[-1]
    outer_code, outer = lines[0]
    if outer_code is not code and outer != where:  # a comprehension is code of its own, on the same line
        where += f"\n  called from your line:  {outer}"
    return where


@contextlib.contextmanager
def grad_mode_kept(what: str) -> Iterator[None]:
    """A CheckError if the block (a call of a student's function) switched autograd off and left it off (where it was
    on before); autograd is switched back on first, so that the check goes on as it should."""
    __tracebackhide__ = True
    enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        if enabled and not torch.is_grad_enabled():  # raised or not: the mode switched off is what went wrong
            torch.set_grad_enabled(True)
            raise _autograd_switched_off(what)


def _autograd_switched_off(what: str) -> CheckError:
    """What to say to a student's function that switched autograd off and left it off."""
    return CheckError(
        f"{what} switched autograd off and left it off (torch.set_grad_enabled(False), or a no_grad entered "
        "without a `with`)",
        hint="a call of torch.set_grad_enabled(False) switches gradient tracking off for every line that runs "
        "after it, in this function and in every later cell, until something switches it on again; "
        "`with torch.no_grad():` limits it to the lines of its block",
        mistake="autograd switched off",
    )


def expect_function(fn: Any, what: str) -> None:
    """Refuse None or a non-function (checks with a costly reference call it first)."""
    __tracebackhide__ = True
    if fn is None:
        raise CheckError(
            f"{what} is None (the exercise cell's placeholder): write your code in that cell, in place of its "
            "`raise NotImplementedError(...)` line, run it, then this check",
            usage=True,
        )
    if not callable(fn):
        raise CheckError(
            f"{what} is not a function",
            expected="a function",
            got=describe(fn),
            hint="pass the function itself, without calling it (no parentheses)",
            usage=True,
        )


def _argument_names(fn: Callable, count: int) -> list[str]:
    """The names of ``fn``'s first ``count`` positional parameters (#1, #2, ... where unknown)."""
    names = [f"#{i + 1}" for i in range(count)]
    with contextlib.suppress(TypeError, ValueError):
        parameters = list(inspect.signature(fn).parameters.values())
        for i, parameter in enumerate(parameters[:count]):
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                names[i] = parameter.name
    return names


#: torch's NotImplementedError for a module called without a forward method of its own.
_NO_FORWARD = re.compile(r'Module \[(\w+)\] is missing the required "forward" function')
#: Containers of modules: they hold modules, and are not themselves called.
_CONTAINERS = ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict")


def _not_implemented(exc: NotImplementedError, what: str) -> CheckError:
    """A stub's NotImplementedError: not written yet. torch raises one too, for a module that has no forward:
    a container called like a layer, or a class whose forward is misspelled or not indented inside it."""
    missing = _NO_FORWARD.search(str(exc))
    if missing and missing.group(1) in _CONTAINERS:
        return CheckError(
            f"{what} called an nn.{missing.group(1)} as if it were a layer",
            hint=f"an nn.{missing.group(1)} holds modules so that their parameters are registered; it has no "
            "forward of its own: each module it holds is called in turn",
            mistake="container called",
        )
    if missing:
        return CheckError(
            f"{what} called a {missing.group(1)}, which has no forward method",
            hint="a module computes in its method named forward: is it spelled so, and indented inside the class?",
            mistake="no forward",
        )
    said = f" ({exc})" if str(exc) else ""
    return CheckError(
        f"{what} is not written yet{said}: fill in the exercise cell above, run it, then run this check again",
        usage=True,
    )


def _student_failure(exc: BaseException, what: str, limit: float) -> CheckError:
    """The CheckError for what went wrong inside a student's function: too slow, not written yet, exit() called,
    or an exception (its line, and the advice for PyTorch's error)."""
    if isinstance(exc, TimedOut):
        return CheckError(
            f"{what} did not return within {limit:g} s, so the check stopped it",
            hint="a loop that never ends (a while whose condition never changes?), or far more work than the "
            "exercise needs",
            mistake="too slow",
        )
    if isinstance(exc, NotImplementedError) and not _NO_KERNEL.search(str(exc)):
        return _not_implemented(exc, what)
    if isinstance(exc, SystemExit):
        return CheckError(
            f"{what} called exit() (SystemExit), which ends a program, not a function",
            hint="a function hands back its result with `return`; exit(), quit() and sys.exit() stop the cell",
            usage=True,
        )
    where = _student_line(exc)
    text = _exception_text(exc)
    message = f"{what} raised {type(exc).__name__}" + (f": {text}" if text else " (with no message)")
    if where:
        message += f"\n  in your line:  {where}"
    return CheckError(message, hint=explain_error(exc), mistake=f"raised {type(exc).__name__}")


def run_student(
    fn: Any,
    *args: Any,
    what: str = "your function",
    timeout: float | None = None,
    inplace_hint: str | None = None,
    **kwargs: Any,
) -> Any:
    """Call a student's function and turn whatever goes wrong into a CheckError:
    not written yet (the stub), not callable, an exception (with the line and the
    advice for PyTorch's error), no return within ``timeout`` seconds, or a tensor
    argument changed in place (named by its parameter name, with ``inplace_hint``)."""
    __tracebackhide__ = True
    expect_function(fn, what)
    limit = TIME_LIMIT if timeout is None else timeout
    before = []
    if inplace_hint is not None:
        for a in args:
            before.append(a.detach().clone() if isinstance(a, torch.Tensor) else None)
    try:
        with time_limit(limit):
            result = fn(*args, **kwargs)
    except CheckError:
        raise
    except (TimedOut, NotImplementedError, SystemExit) as exc:
        raise _student_failure(exc, what, limit) from None
    except KeyboardInterrupt:
        raise  # the student's own interrupt (the stop button) stops the check too
    except BaseException as exc:  # an Exception, or a class of the student's own on BaseException
        raise _student_failure(exc, what, limit) from exc
    names = _argument_names(fn, len(args))
    for name, a, b in zip(names, args, before):
        if b is not None and not torch.equal(a.detach(), b):
            raise CheckError(
                f"{what} changed its argument {name} in place",
                hint=inplace_hint.format(name=name) if "{name}" in inplace_hint else inplace_hint,
                mistake=f"changed {name} in place",
            )
    return result


class TorchCalls(TorchFunctionMode):
    """Records the torch functions and tensor methods the block calls: how many calls, and which functions
    (``torch.cdist in calls.seen``). A check's spy on a design rule; it changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.seen: set[Any] = set()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.count += 1
        self.seen.add(func)
        return func(*args, **(kwargs or {}))


def _foreign_sizes(err: CheckError, case: tuple) -> list[int]:
    """Sizes in a "shapes cannot be multiplied (AxB and CxD)" or a broadcasting error ("The size of tensor a (A)
    must match the size of tensor b (B)") that no tensor of the case has."""
    text = str(err.__cause__ or "")
    match = re.search(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text)
    if match is None:
        match = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text)
    if match is None:
        return []
    sizes = {size for a in case if isinstance(a, torch.Tensor) for size in a.shape}
    return sorted({int(n) for n in match.groups()} - sizes - {1})


def _case_words(number: int, total: int, case: tuple) -> str:
    """ "in case 2 of 3 (x: (4, 3))": which case, with its tensors' shapes."""
    shapes = [str(tuple(a.shape)) for a in case if isinstance(a, torch.Tensor)]
    text = f"in case {number} of {total}"
    if shapes:
        text += f" (inputs of shape {', '.join(shapes)})"
    return text


def _outputs_of(result: Any, outputs: Sequence[str], what: str) -> tuple:
    __tracebackhide__ = True
    if len(outputs) == 1:
        return (result,)
    if isinstance(result, (tuple, list)) and len(result) == len(outputs):
        return tuple(result)
    if result is not None and not isinstance(result, (tuple, list, torch.Tensor, int, float)):  # a generator, a dict
        raise CheckError(
            f"{what} returned {type(result).__name__} where a tuple of {len(outputs)} values belongs",
            expected=f"a tuple ({', '.join(outputs)})",
            got=describe(result),
            hint="return the values themselves, one per output, in this order: a tuple or a list",
            usage=True,
        )
    raise CheckError(
        f"{what} returned the wrong number of values",
        expected=f"a tuple ({', '.join(outputs)})",
        got=describe(result),
        hint="a missing `return`" if result is None else "return one value per output, in this order",
        usage=True,
    )


def run_cases(
    fn: Any,
    cases: Sequence[tuple],
    reference: Callable[..., Any],
    *,
    what: str,
    outputs: Sequence[str] = ("the result",),
    mistakes: Callable[..., Sequence[Any]] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    inplace_hint: str | None = None,
    timeout: float | None = None,
) -> float:
    """The engine for function exercises: call ``fn`` on fresh copies of each case, compare with
    ``reference(*case)`` output by output, and on a difference name the first mistake of
    ``mistakes(*case)`` that fits. Returns the worst relative error."""
    __tracebackhide__ = True
    if not cases:
        raise CheckError("the check was asked to run zero cases: nothing would be tested", usage=True)
    worst = 0.0
    failures: list[CheckError] = []
    for number, case in enumerate(cases, start=1):
        try:
            worst = max(
                worst,
                _run_case(
                    fn, case, number, len(cases), reference, what, outputs, mistakes, rtol, atol, inplace_hint, timeout
                ),
            )
        except CheckError as err:
            if CASE_TALLY is None or err.usage or err.mistake == "too slow":
                raise
            failures.append(err)
    if CASE_TALLY is not None:
        CASE_TALLY.append((len(cases) - len(failures), len(cases)))
    if failures:
        raise failures[0]
    return worst


def _run_case(fn, case, number, total, reference, what, outputs, mistakes, rtol, atol, inplace_hint, timeout) -> float:
    """One case of :func:`run_cases`: the worst relative error of its outputs, or a CheckError."""
    __tracebackhide__ = True
    worst = 0.0
    copies = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case)
    where = _case_words(number, total, case)
    try:
        result = run_student(fn, *copies, what=what, timeout=timeout, inplace_hint=inplace_hint)
    except CheckError as err:
        foreign = _foreign_sizes(err, case)
        if foreign:
            err.hint = (
                f"the shapes in the error have sizes ({', '.join(map(str, foreign))}) that none of this call's inputs "
                "has: the function used a tensor from outside the call, such as a notebook variable, instead of its "
                "arguments (or what its cache holds)"
            )
        if not err.usage and err.mistake != "too slow" and total > 1:
            err.message = f"{where[0].upper()}{where[1:]}, {err.message}"  # which case made the code fail
        err.args = (err._text(),)
        raise
    refs = reference(*case)
    if not isinstance(refs, tuple):
        refs = (refs,)
    got = _outputs_of(result, outputs, what)
    known = as_mistakes(mistakes(*case)) if mistakes else []
    whole = got if len(outputs) > 1 else got[0]
    for name, value, ref in zip(outputs, got, refs):
        try:
            worst = max(worst, compare(name, value, ref, rtol=rtol, atol=atol, where=where))
        except CheckError as err:
            mistake = first_mistake(whole, known)
            if mistake is None:
                raise
            raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None
    return worst


#: The instructions of a body that does nothing: `...`, `pass`, a docstring, `return None`.
_NOTHING_DONE = {"RESUME", "NOP", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"}


def empty_body(fn: Any) -> bool:
    """Does ``fn``'s body do nothing (``...``, ``pass``, a docstring alone): a method left as the template gave it?"""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if code is None or code.co_name == "<lambda>":  # a template's method is a def; a lambda is written on purpose
        return False
    for instruction in dis.get_instructions(code):
        if instruction.opname not in _NOTHING_DONE:
            return False
        if instruction.opname in ("LOAD_CONST", "RETURN_CONST") and instruction.argval is not None:
            return False
    return True


def expect_written(cls: type, methods: tuple[str, ...]) -> None:
    """A usage sentence for the first of ``methods`` that ``cls`` still has with an empty body."""
    __tracebackhide__ = True
    for method in methods:
        if empty_body(getattr(cls, method, None)):
            raise CheckError(
                f"{cls.__name__}.{method} is not written yet: its body is only `...` or `pass`",
                hint=f"write {method}, run its cell again, then run this check",
                usage=True,
            )


def failing_line(err: CheckError) -> str:
    """The source line where the exception behind ``err`` was raised ("" if unknown): the check reads it to tell
    which of the student's statements failed."""
    cause = err.__cause__
    if cause is None or cause.__traceback__ is None:
        return ""
    frames = traceback.extract_tb(cause.__traceback__)
    return (frames[-1].line or "") if frames else ""

"""How a check talks to the student: the failure block, the hint ladder, and exercise bookkeeping.

The ladder (the same for every exercise):

1. The first failure of a kind says what is wrong and where: which output, which case,
   what it should satisfy, expected against got. It does not name the mistake.
2. The same kind of failure again names the likely mistake in words.
3. Code (a line to look at) appears only when the student asks, ``lab.hint("03.5")``,
   or after :data:`CODE_AFTER` failed runs of the exercise's check.

A "kind" is the named :class:`Mistake` the answer matched, else the failure's message.
``str(err)`` always holds the full text (message, expected, got, likely mistake) for
programs such as tests and the grader; Jupyter shows the block of the current rung.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CheckError", "hint", "require", "show_traceback"]

#: Failed runs of one exercise's check after which the code rung is shown unasked.
CODE_AFTER = 4


def start_rung() -> int:
    """1, or 2 where $LAB_FEEDBACK=named (the grader's feedback files name the mistake at once)."""
    if os.environ.get("LAB_FEEDBACK") == "named":
        return 2
    return 1


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A typical wrong answer of one exercise, and what to tell the student about it.

    ``matches`` is the wrong answer itself (a tensor, a value, a tuple with None for
    "any") or a predicate on the answer. ``why`` names the mistake in words (rung 2);
    ``look`` points at the code (rung 3) and never contains a find-the-bug exercise's fix.
    ``symptom`` optionally says what is visibly wrong at rung 1, without the cause.
    """

    name: str
    matches: Any
    why: str
    look: str | None = None
    symptom: str | None = None


class CheckError(AssertionError):
    """A check failed: what was expected, what came, and the likely mistake.

    It subclasses AssertionError, so a failing check stops "Run all" (and nbval)
    like an assert. In Jupyter it renders as a short block at the rung of the ladder
    the student has reached; ``lab.show_traceback()`` prints the full traceback.

    Example:
        >>> err = CheckError("grad_w1 is wrong", expected="shape (4, 5)", got="shape (5, 4)",
        ...                  hint="a transpose is missing")
        >>> print(err)
        grad_w1 is wrong. Expected shape (4, 5); got shape (5, 4). Likely mistake: a transpose is missing
    """

    def __init__(
        self,
        message: str,
        *,
        expected: str | None = None,
        got: str | None = None,
        hint: str | None = None,
        look: str | None = None,
        mistake: str | None = None,
        usage: bool = False,
        exercise: str | None = None,
    ) -> None:
        self.message = message
        self.expected = expected
        self.got = got
        self.hint = hint
        self.look = look
        self.mistake = mistake
        # usage=True: the answer (or the call) cannot be used at all; its advice is what the
        # check needs from the student, shown at once, not a mistake to discover.
        self.usage = usage
        self.exercise = exercise
        self.rung = 3 if usage else start_rung()
        super().__init__(self._text())

    def kind(self) -> str:
        """What counts as "the same failure again" on the ladder."""
        if self.mistake:
            return self.mistake
        return self.message

    def _text(self) -> str:
        text = self.message
        facts = []
        if self.expected is not None:
            facts.append(f"expected {self.expected}")
        if self.got is not None:
            facts.append(f"got {self.got}")
        if facts or self.hint:
            text = text.rstrip(".")
        if facts:
            joined = "; ".join(facts)
            text += ". " + joined[0].upper() + joined[1:]
        if self.hint:
            text += f". Likely mistake: {self.hint}"
        return text

    def rendered(self, footer: bool = True) -> list[str]:
        """The lines of the block at this error's rung, without colours."""
        lines = [f"CHECK FAILED · {self.exercise or 'check'}", f"  {self.message}"]
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.got is not None:
            lines.append(f"  got:      {self.got}")
        if self.hint and (self.rung >= 2 or self.usage):
            lines.append(f"  likely mistake: {self.hint}" if not self.usage else f"  what to do: {self.hint}")
        if self.look and self.rung >= 3 and not self.usage:
            lines.append(f"  look at: {self.look}")
        if self.mistake and start_rung() == 2:
            lines.append(f"  mistake: {self.mistake}")  # its short name, for the grader's class report
        if footer and not self.usage and self.exercise_id():
            lines.append(_next_step(self))
        return lines

    def exercise_id(self) -> str | None:
        """The exercise id ("03.5") this failure belongs to, if a check raised it."""
        if self.exercise and self.exercise.startswith("Exercise "):
            return self.exercise.split()[1].rstrip(":")
        return None

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the traceback (see IPython's showtraceback). The header is bold red
        (JupyterLab's darker red, readable on the pink of an error box); the rest keeps the text colour."""
        _LAST[0] = self
        lines = self.rendered()
        head = f"{_BOLD_RED}✗ CHECK FAILED · {self.exercise or 'check'}{_OFF}"
        body = [part for line in lines[1:] for part in _folded(line)]
        if self.usage:  # what was handed in cannot be used (a stub's None, a wrong type): no traceback helps there
            return [head, *body]
        tail = "  (the full traceback: run lab.show_traceback() in a new cell)"
        return [head, *body, tail]


# A block's lines are folded at spaces to this width: JupyterLab folds a longer output line wherever
# the output area ends, in the middle of a word.
_WIDTH = 100
_LABELS = ("expected: ", "got:      ", "likely mistake: ", "what to do: ", "look at: ")


def _folded(line: str) -> list[str]:
    """``line`` folded at spaces to ``_WIDTH`` columns, its continuation lines indented under its text
    (after its label). A line laid out by the check (it holds a line break) and the short-name line the
    grader reads ("mistake: ...") stay as they are; a word longer than the width is never cut."""
    if len(line) <= _WIDTH or "\n" in line or line.lstrip().startswith("mistake: "):
        return [line]
    body = line.lstrip()
    indent = len(line) - len(body)
    label = next((label for label in _LABELS if body.startswith(label)), "")
    return textwrap.wrap(
        line,
        width=_WIDTH,
        subsequent_indent=" " * (indent + len(label)),
        break_long_words=False,
        break_on_hyphens=False,
    )


_BOLD = "\x1b[1m"
_BOLD_RED = "\x1b[1;31m"
_OFF = "\x1b[0m"


def _next_step(err: CheckError) -> str:
    """The ladder's last line: what the next run, or lab.hint, will add."""
    ex_id = err.exercise_id()
    if err.rung == 1 and err.hint:
        return f"  (change your code and run the check again; stuck? lab.hint({ex_id!r}) names the likely mistake)"
    if err.rung == 2 and err.look:
        return f"  (still stuck? lab.hint({ex_id!r}) shows where to look)"
    return "  (fix it and run the check again)"


class ExerciseNotSolved(CheckError):
    """Raised by :func:`require`: a cell needs an exercise whose check has not passed."""

    def _render_traceback_(self) -> list[str]:
        # not recorded in _LAST: lab.hint() and lab.show_traceback() stay on the last failed check;
        # bold in the text's own colour: yellow on an error box's pink was hard to read (1.5:1)
        return [f"{_BOLD}■ STOPPED{_OFF} · {self.message}"]


@dataclasses.dataclass
class _Ledger:
    """What this kernel remembers about one exercise."""

    failures: int = 0
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    last: CheckError | None = None
    solved: bool = False


_LAST: list[BaseException | None] = [None]
_LEDGER: dict[str, _Ledger] = {}
_TITLES: dict[str, str] = {}  # every exercise id a check declares -> its title
_PREDICTIONS: set[str] = set()  # the ids of predict-then-run exercises: any recorded answer lets their demo run
_CURRENT: list[str] = []  # the exercise whose check is running (predictions record under it)


def _ledger(ex_id: str) -> _Ledger:
    if ex_id not in _LEDGER:
        _LEDGER[ex_id] = _Ledger()
    return _LEDGER[ex_id]


def reset_feedback() -> None:
    """Forget every failure, solved exercise and committed prediction (tests use it)."""
    from . import predictions

    _LEDGER.clear()
    _LAST[0] = None
    predictions.COMMITTED.clear()


def _climb(ex_id: str, err: CheckError) -> None:
    """Count this failure and set the rung it is shown at."""
    ledger = _ledger(ex_id)
    ledger.failures += 1
    kind = err.kind()
    ledger.kinds[kind] = ledger.kinds.get(kind, 0) + 1
    ledger.last = err
    _LAST[0] = err
    if err.usage:
        return
    rung = start_rung()
    if ledger.kinds[kind] >= 2:
        rung = 2
    if ledger.failures >= CODE_AFTER:
        rung = 3
    err.rung = max(err.rung, rung)


def current_exercise() -> str | None:
    """The id of the exercise whose check is running, if any."""
    if _CURRENT:
        return _CURRENT[-1]
    return None


@contextlib.contextmanager
def _running(ex_id: str) -> Iterator[None]:
    _CURRENT.append(ex_id)
    try:
        yield
    finally:
        _CURRENT.pop()


@contextlib.contextmanager
def _usual_torch_state() -> Iterator[None]:
    """Run a check with autograd on and float32 as the default dtype, whatever earlier cells set (a
    ``torch.set_grad_enabled(False)``, a ``torch.set_default_dtype(torch.float64)``): a right answer is judged as
    it runs in a training loop, and the check's references are built as they were meant to be. The kernel gets its
    own settings back afterwards, also where a student's function changed them. Nothing to do where torch is not
    loaded (the grader's torch-free tests)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


def _called_wrongly(check: Callable, args: tuple, kwargs: dict) -> str | None:
    """A sentence if ``check(*args, **kwargs)`` does not fit the check's signature."""
    signature = inspect.signature(check)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return f"{check.__name__}{signature} was called wrongly ({exc})"
    return None


def exercise(ex_id: str, title: str, *, prediction: bool = False) -> Callable[[Callable], Callable]:
    """Declare the check of exercise ``ex_id`` (``"02.1"``): failures are labelled with it
    and climb its hint ladder, success marks it solved for :func:`require`, and an
    unexpected error inside the check becomes a sentence, not a traceback. A ``prediction``
    (predict, then run) counts as done for :func:`require` once an answer is recorded, right or not."""
    _TITLES[ex_id] = title
    if prediction:
        _PREDICTIONS.add(ex_id)

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            label = f"Exercise {ex_id}: {title}"
            ledger = _ledger(ex_id)
            ledger.solved = False
            wrong_call = _called_wrongly(check, args, kwargs)
            if wrong_call:
                raise CheckError(
                    wrong_call,
                    hint="pass what the exercise's check cell passes: run that cell as it is",
                    usage=True,
                    exercise=label,
                )
            try:
                with _running(ex_id), _usual_torch_state():
                    result = check(*args, **kwargs)
            except CheckError as err:
                err.exercise = err.exercise or label
                _climb(ex_id, err)
                raise
            except Exception as exc:
                err = CheckError(
                    f"the check could not use what it was given ({type(exc).__name__}: {exc})",
                    hint="compare what your code returns with what the exercise asks for "
                    "(type, shape, dtype, one value or a tuple)",
                    usage=True,
                    exercise=label,
                )
                _climb(ex_id, err)
                raise err from exc
            ledger.solved = True
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
    missing = [ex_id for ex_id in ex_ids if not _ledger(ex_id).solved]
    if not missing:
        return
    unanswered = [ex_id for ex_id in missing if ex_id in _PREDICTIONS]  # any recorded answer, right or not, will do
    unsolved = [ex_id for ex_id in missing if ex_id not in _PREDICTIONS]
    parts, todo = [], []
    if unanswered:
        parts.append(f"shows what happens in {_named(unanswered)}")
        todo.append("write your prediction and run its check (your first answer is recorded, right or not)")
    if unsolved:
        parts.append(f"uses the result of {_named(unsolved)}")
        todo.append(
            f"solve {_ids(unsolved)} and run {'its check' if len(unsolved) == 1 else 'their checks'} until PASS"
        )
    raise ExerciseNotSolved(f"this cell {' and '.join(parts)}: {', then '.join(todo)}, then run this cell again.")


def _named(ex_ids: list[str]) -> str:
    """``Exercise 02.1 (the linear layer) and Exercise 02.2 (the ReLU layer)``."""
    return " and ".join(f"Exercise {ex_id} ({_TITLES.get(ex_id, 'see above')})" for ex_id in ex_ids)


def _ids(ex_ids: list[str]) -> str:
    """``02.1``, or ``02.1 and 02.2``."""
    return " and ".join(ex_ids)


def _known_id(ex_id: str) -> str:
    """``ex_id``, or the declared id it was meant to be ('7.1' and ' 07.1 ' for '07.1'), said in one line."""
    if ex_id in _TITLES:
        return ex_id
    cleaned = ex_id.strip().removeprefix("Exercise ").strip()
    one_digit = cleaned[:1].isdigit() and cleaned[1:2] == "."  # '7.1': notebooks are numbered 00 to 10
    padded = "0" + cleaned if one_digit else cleaned
    for candidate in (cleaned, padded):
        if candidate in _TITLES:
            print(f"(there is no exercise {ex_id!r}: showing {candidate}, {_TITLES[candidate]})")
            return candidate
    return ex_id


def passed(message: str) -> None:
    """Print the one-line success verdict every check ends with."""
    print(f"PASS  {message}")


def show_traceback() -> None:
    """Print the full traceback of the last failed check, which its block hides: ``lab.show_traceback()``."""
    err = _LAST[0]
    if err is None:
        print("no check has failed in this kernel yet")
        return
    print("".join(traceback.format_exception(type(err), err, err.__traceback__)), end="")


def hint(ex_id: str | None = None) -> None:
    """Show everything the ladder holds for an exercise's last failure: the likely mistake
    and where to look (``lab.hint("03.5")``; no id: the last failed check).

    Example:
        >>> hint("98.9")  # doctest: +ELLIPSIS
        Exercise 98.9 has no check. A written answer has none: ...
    """
    from . import predictions

    if ex_id is None:
        last = _LAST[0]
        ex_id = last.exercise_id() if isinstance(last, CheckError) else None
        if ex_id is None:
            print("no check has failed in this kernel yet: run an exercise's check first")
            return
    if not isinstance(ex_id, str):
        print(f"lab.hint takes an exercise id such as '03.5', got {type(ex_id).__name__}")
        return
    ex_id = _known_id(ex_id)
    if ex_id in predictions.COMMITTED:
        print(f"HINT · Exercise {ex_id}: {_TITLES.get(ex_id, 'a prediction')}, the explanation:")
        predictions.explain(ex_id)
        return
    if ex_id not in _TITLES:
        print(
            f"Exercise {ex_id} has no check. A written answer has none: write it in its cell (double-click the "
            "cell to edit it), and your instructor reads it. Otherwise, compare the id with the exercise's heading."
        )
        return
    ledger = _LEDGER.get(ex_id, _Ledger())
    if ledger.solved:
        print(f"Exercise {ex_id} passed its check on its last run: there is nothing to hint.")
        return
    err = ledger.last
    if err is None:
        print(f"Exercise {ex_id} has not failed a check in this kernel: run its check first.")
        return
    err.rung = 3
    lines = err.rendered(footer=False)
    lines[0] = f"HINT · {err.exercise or 'check'}, its last failure:"  # not a new failure: a look at the last one
    print("\n".join(part for line in lines for part in _folded(line)))
    if err.hint or err.look:
        return
    if err.usage:
        print("  (the check could not use this answer: the line above says what it needs)")
    elif err.expected is None and err.got is None:
        print("  (no known mistake matches this answer; lab.show_traceback() shows where it failed)")
    else:
        print("  (no known mistake matches this answer: compare expected and got above, case by case)")

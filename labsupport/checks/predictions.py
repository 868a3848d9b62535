"""Predict, observe, explain: a prediction's check records the first valid answer, only then
shows what happens, and asks the student to explain it.

What is kept: the first committed answer of each exercise, in this kernel's memory and in
the check cell's output (the line ``recorded answer: ...``), which the submitted notebook
carries. A kernel restart forgets the memory, and a student can edit the stored output of
a notebook file by hand; the grader therefore reads the recorded line of the submitted
notebook and flags a recorded answer that differs from the answer cell.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import fractions
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .feedback import CheckError, current_exercise, passed
from .values import describe, plain, plain_tensor, scalar_of


@dataclasses.dataclass
class Committed:
    """A prediction the student committed: the first valid answer, and what the experiment gave."""

    name: str
    answer: Any
    actual: Any
    right: bool
    why: str
    ask: str
    note: str | None
    runs: int = 1  # how often its check ran: each run of a wrong answer climbs one rung


#: exercise id -> its first committed prediction, for this kernel.
COMMITTED: dict[str, Committed] = {}


def one_row(got: Any) -> Any:
    """A single row written with one pair of brackets too many (``[[2, 40, 600]]``, a (1, 3) tensor or array)
    as that row; anything else unchanged."""
    if isinstance(got, torch.Tensor):
        got = plain_tensor(got)  # its overrides cannot answer for it
    if isinstance(got, torch.Tensor) and got.dim() == 2 and got.shape[0] == 1:
        return got[0]
    if type(got).__module__ == "numpy" and getattr(got, "ndim", 0) == 2 and got.shape[0] == 1:
        return got[0]
    if isinstance(got, (list, tuple)) and len(got) == 1 and isinstance(got[0], (list, tuple)):
        return got[0]
    return got


def _normalised(got: Any, choices: Sequence[Any] | None) -> Any:
    """The answer in plain types: tensors and numpy scalars as numbers (inside tuples too), 1-d tensors and
    arrays, lists and torch.Size as tuples, words lower-cased (also inside tuples), NaN and inf as the words
    'nan' and 'inf' when those are choices."""
    got = one_row(got)
    if isinstance(got, torch.Tensor) and got.dim() == 1 and got.device.type != "meta":
        got = tuple(got.detach().cpu().tolist())
    elif type(got).__module__ == "numpy" and getattr(got, "ndim", 0) == 1:
        got = tuple(got.tolist())
    got = scalar_of(got)
    if isinstance(got, torch.Tensor):
        return got  # several dimensions, or on the meta device: read_prediction says what it needs
    if isinstance(got, (decimal.Decimal, fractions.Fraction)):
        got = float(got)  # exact numbers: 3/4 is a number, too
    if isinstance(got, torch.Size):
        got = tuple(int(n) for n in got)
    got = plain(got)
    if isinstance(got, tuple):
        got = tuple(scalar_of(item) for item in got)
    if isinstance(got, str):
        text = _bare_word(got)
        return number_in_text(text) if _numbers_among(choices) else text
    if isinstance(got, tuple):
        return tuple(_bare_word(item) if isinstance(item, str) else item for item in got)
    word_choices = [c for c in choices or () if isinstance(c, str)]
    if isinstance(got, float) and not math.isfinite(got) and word_choices:
        word = "nan" if math.isnan(got) else ("inf" if got > 0 else "-inf")
        if word in word_choices:
            return word
    return got


#: What may surround a one-word answer without changing it: quotes and spaces before it; quotes, spaces and a
#: full stop, comma, colon, semicolon or exclamation mark after it ("'slice'", "Slice.").
_AROUND_A_WORD = re.compile(r"^[\s'\"`]+|[\s'\"`.,;:!]+$")


def _bare_word(text: str) -> str:
    return _AROUND_A_WORD.sub("", text).lower()


#: Digits grouped by thousands, as people write large counts: 101,110 or 101_110 or 101 110.
_THOUSANDS = re.compile(r"[+-]?\d{1,3}([,_ ]\d{3})+(\.\d+)?")


def number_in_text(answer: Any) -> Any:
    """A number written as text (``"1024"``, ``"101,110"``, ``"0.89"``) as that number: an int where the text
    is a whole number, else a float. Anything else comes back as it was; so do "nan" and "inf", which are words."""
    if not isinstance(answer, str):
        return answer
    text = answer.strip()
    if _THOUSANDS.fullmatch(text):
        text = re.sub(r"[,_ ]", "", text)
    try:
        value = float(text)
    except ValueError:
        return answer
    if not math.isfinite(value):
        return answer
    return int(value) if re.fullmatch(r"[+-]?\d+", text) else value


def one_number(answer: Any) -> Any:
    """A read answer that is one number in brackets (``[6]``, ``torch.tensor([6.0])``, read as ``(6,)``) as that
    number, where a number is asked; anything else as it was."""
    if isinstance(answer, tuple) and len(answer) == 1 and isinstance(answer[0], (int, float, str)):
        return answer[0]
    return answer


def _finite(number: int | float) -> bool:
    """Is ``number`` finite? An int always is, even one too large for a float (10**400), which math.isfinite
    refuses with an OverflowError."""
    return isinstance(number, int) or math.isfinite(number)


def _short_repr(value: Any) -> str:
    """repr(value), cut to 80 characters (an int of 400 digits is still a number, not a page); a value whose
    repr raises is described instead."""
    try:
        text = repr(value)
    except Exception:
        return describe(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _words_of(mistakes: Mapping[Any, str] | None) -> list[str]:
    """The wrong answers a numeric prediction's check lists as words ("None"), normalised as answers are ("none")."""
    return [_normalised(wrong, None) for wrong in mistakes or {} if isinstance(wrong, str)]


def _listed_word(text: str, mistakes: Mapping[Any, str] | None) -> str | None:
    """The listed word ``text`` spells, in any case, quoted or with a full stop ("None", "'none'."), or None."""
    word = _bare_word(text)
    return word if word in _words_of(mistakes) else None


def _numbers_among(choices: Sequence[Any] | None) -> bool:
    return any(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices or ())


#: The longest text read as a prediction: a word, a number or a short tuple is far shorter.
MAX_ANSWER = 500


def read_prediction(name: str, got: Any, choices: Sequence[Any] | None = None, *, form: str | None = None) -> Any:
    """``got`` in plain types if it has the form of an answer (one of ``choices`` when given), else a
    CheckError: checks that measure call it first, to refuse junk before measuring. ``form`` says what the
    answer looks like ("a number between 0 and 1") where there are no choices to list."""
    __tracebackhide__ = True
    if got is None or got is Ellipsis:
        raise CheckError(
            f"{name}: no prediction yet: write your answer in the cell above, in place of `prediction = None`, and "
            "run that cell first",
            usage=True,
        )
    expected = " / ".join(map(repr, choices)) if choices else (form or "a number, a word or a tuple of them")
    if isinstance(got, str) and len(got) > MAX_ANSWER:
        raise CheckError(
            f"{name}: the answer is {len(got):,} characters long; a prediction is a word, a number or a short tuple",
            expected=expected,
            usage=True,
        )
    got = _normalised(got, choices)
    if not isinstance(got, (str, int, float, bool, tuple)):
        raise CheckError(f"{name}: answer with a plain value", got=describe(got), expected=expected, usage=True)
    if isinstance(got, tuple) and not all(isinstance(item, (str, int, float, bool)) for item in got):
        raise CheckError(
            f"{name}: answer with plain values in the tuple", got=_short_repr(got), expected=expected, usage=True
        )
    if choices is not None:
        if got not in _normalised_choices(choices):
            raise CheckError(
                f"{name}: the answer must be one of the choices",
                expected=expected,
                got=_short_repr(got),
                hint=_choice_mentioned(got, choices) or _close_spelling(got, choices),
                usage=True,
            )
    return got


RULED_OUT = "your text rules a choice out; write the one choice you expect instead, alone, as a word"

#: Words that turn a sentence against the choice it names ("not the mask", "it isn't new").
_NEGATION = re.compile(r"\b(not|no|never|nor)\b|n't\b")


def _choice_mentioned(got: Any, choices: Sequence[Any]) -> str | None:
    """For an answer that is a sentence holding exactly one of the word choices ("the slice"): how to write it.
    A sentence that rules the choice out ("not the mask") is not told to write that choice: it may mean another."""
    if not isinstance(got, str):
        return None
    words = [c for c in choices if isinstance(c, str) and re.search(rf"\b{re.escape(c.lower())}\b", got)]
    if len(words) != 1:
        return None
    rest = re.sub(rf"\b{re.escape(words[0].lower())}\b", " ", got)
    rest = re.sub(r"\bnot a number\b", " ", rest)  # NaN's own name, no negation ("not a number (nan)")
    if _NEGATION.search(rest):
        return RULED_OUT
    return (
        f"write the choice alone, as a word: your text mentions {words[0]!r}; if that is your answer, write just that"
    )


#: What turns a word into its opposite when written before it ("incorrect", "unsafe", "non-zero").
_NEGATED_WORD = re.compile(r"(in|un|non|not|im|ir|il|dis)[\s_-]?")


def _close_spelling(got: Any, choices: Sequence[Any]) -> str | None:
    """For a word spelled close to exactly one of the word choices ("diverge" for "diverges"): which one."""
    words = [c.lower() for c in choices if isinstance(c, str)]
    if not isinstance(got, str) or not got or not words:
        return None
    close = difflib.get_close_matches(got, words, n=2, cutoff=0.75)
    if len(close) != 1:
        return None
    if got.endswith(close[0]) and _NEGATED_WORD.fullmatch(got[: -len(close[0])]):
        return RULED_OUT  # "incorrect" is not a misspelling of "correct": it means the opposite
    return (
        f"{got!r} is not one of the choices as written; did you mean {close[0]!r}? Write the choice exactly as listed"
    )


def _normalised_choices(choices: Sequence[Any]) -> list[Any]:
    return [_normalised(choice, None) for choice in choices]


def _same(got: Any, actual: Any, rel: float) -> bool:
    """Does the normalised answer ``got`` equal the outcome (numbers within ``rel``)?"""
    if isinstance(actual, bool) or isinstance(got, bool):
        return type(got) is type(actual) and got == actual
    if isinstance(actual, (int, float)):
        if not isinstance(got, (int, float)) or not _finite(got):
            return False
        try:
            return math.isclose(got, actual, rel_tol=rel, abs_tol=1e-12)
        except OverflowError:  # an int beyond any float: far from every outcome
            return False
    if isinstance(actual, tuple):
        if not isinstance(got, tuple) or len(got) != len(actual):
            return False
        return all(_same(g, a, rel) for g, a in zip(got, actual))
    return got == _normalised(actual, None)


def _note_for(got: Any, mistakes: Mapping[Any, str] | None, rel: float) -> str | None:
    for wrong, note in (mistakes or {}).items():
        if _same(got, _normalised(wrong, None), rel):
            return note
    return None


def check_prediction(
    name: str,
    got: Any,
    actual: Any,
    *,
    choices: Sequence[Any] | None = None,
    why: str,
    mistakes: Mapping[Any, str] | None = None,
    rel: float = 0.05,
    ask: str | None = None,
) -> None:
    """Judge a predict-then-run answer. ``actual`` is what the experiment gives (measured by the
    check), ``why`` the explanation, ``mistakes`` a note for each typical wrong answer, ``ask``
    the question that makes the student explain. Numbers count within ``rel``.

    The first valid answer is committed and kept; the outcome is shown only then, with the
    question ``ask``. A right first answer prints PASS; a wrong one prints the outcome and does
    not stop the notebook (the record is what counts, so changing the answer cannot pass). The
    explanation ``why`` waits: ``lab.hint`` shows it, or a wrong answer's third run."""
    __tracebackhide__ = True
    if got is None and "none" in _words_of(mistakes):  # the stub's None, or a student's "it stays None"
        raise CheckError(
            f"{name}: no prediction yet: write your answer in the cell above, in place of `prediction = None`, and "
            'run that cell first (to predict that it stays None, write the word as text: prediction = "None")',
            usage=True,
        )
    got = read_prediction(name, got, choices)
    if isinstance(actual, (int, float)) and not isinstance(actual, bool):
        got = one_number(got)
        if isinstance(got, str):
            got = _listed_word(got, mistakes) or number_in_text(got)  # "0.89" for a number asked without choices
        if got in _words_of(mistakes):
            pass  # a word the check expects as a wrong answer ("None" for a gradient that stays None)
        elif isinstance(got, bool) or not isinstance(got, (int, float)) or not _finite(got):
            raise CheckError(f"{name}: the answer must be a number (finite)", got=_short_repr(got), usage=True)
    ex_id = current_exercise() or name
    question = ask or "before reading the explanation, say in one sentence why this happens"
    record = COMMITTED.get(ex_id)
    if record is None:
        right = _same(got, actual, rel)
        note = None if right else _note_for(got, mistakes, rel)  # a note on a mistake never contradicts a PASS
        record = Committed(name, got, actual, right, why, question, note)
        COMMITTED[ex_id] = record
        _first_verdict(record, ex_id)
        return
    _later_verdict(record, got, ex_id)


def _first_verdict(record: Committed, ex_id: str) -> None:
    if record.right:
        _right_verdict(record, ex_id)
        return
    print(f"NOT RIGHT  {record.name}: what happens is {record.actual!r} (recorded answer: {record.answer!r}).")
    _ask(record, ex_id)


def _right_verdict(record: Committed, ex_id: str) -> None:
    """A right answer passes, and is still asked why: the explanation waits for the student's own."""
    passed(f"{record.name}: {record.actual!r} is right (recorded answer: {record.answer!r}).")
    _ask(record, ex_id)


def _ask(record: Committed, ex_id: str) -> None:
    ask = record.ask.rstrip(".")
    if not ask.endswith(("?", ")")):
        ask += "?"  # it asks a question
    print(f"  Now explain: {ask}")
    print(f"  (write it down or say it to yourself: no check reads it; then lab.hint({ex_id!r}) shows the explanation)")


def _later_verdict(record: Committed, got: Any, ex_id: str) -> None:
    """Each run of a wrong prediction's check climbs one rung: the outcome and the question (first run),
    the note on the recorded answer (second), the explanation (third and later, or lab.hint at any time)."""
    record.runs += 1
    if record.right:
        _right_verdict(record, ex_id)
        if got != record.answer:  # a PASS printed under another answer reads as if that one were right
            print(
                f"  (your new answer {got!r} does not replace it: a prediction counts once, before you see the outcome)"
            )
        return
    changed = ""
    if got != record.answer:  # a prediction is made once, before the outcome is seen: that is what it measures
        changed = f"; your new answer {got!r} does not replace it: a prediction counts once, before you see the outcome"
    print(
        f"NOT RIGHT  {record.name}: what happens is {record.actual!r} "
        f"(recorded answer: {record.answer!r}, your first{changed})."
    )
    if record.runs >= 3:
        explain(ex_id)
        return
    if record.note:
        print(f"  About {record.answer!r}: {record.note}")
    _ask(record, ex_id)


def explain(ex_id: str) -> None:
    """Print the explanation of a committed prediction (what ``lab.hint`` shows for one)."""
    record = COMMITTED[ex_id]
    if record.note:
        print(f"  About {record.answer!r}: {record.note}")
    print(f"  Why: {record.why}")

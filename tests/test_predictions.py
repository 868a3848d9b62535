"""Predict, observe, explain: the first valid answer is committed and kept, the outcome comes only
after it, and answers are normalised (never compared with a subclass's own ==)."""

import math

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import core, predictions
from labsupport.checks.core import CheckError

WHY = "backward() frees the graph."
CHOICES = ("error", "doubled", "same")


@core.exercise("99.7", "a made-up prediction")
def check_guess(prediction):
    """Judge a prediction of what a second backward() does."""
    core.check_prediction(
        "second backward",
        prediction,
        "error",
        choices=CHOICES,
        why=WHY,
        mistakes={"doubled": "doubling is what a second forward pass gives."},
        ask="what did the first backward() free?",
    )


def refused(fn, *args, **kwargs):
    with pytest.raises(core.CheckError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_no_outcome_before_a_valid_answer(capsys):
    assert "no prediction yet" in refused(check_guess, None)
    assert "one of the choices" in refused(check_guess, "maybe")
    assert "error" not in capsys.readouterr().out
    assert core.COMMITTED == {}


def test_wrong_then_right_keeps_the_first_answer_and_never_passes(capsys):
    check_guess("Doubled")
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT  second backward: what happens is 'error' (recorded answer: 'doubled')")
    assert "what did the first backward() free?" in first and "PASS" not in first
    assert WHY not in first  # the explanation waits for the student's own
    check_guess("error")
    second = capsys.readouterr().out
    assert "PASS" not in second
    assert "recorded answer: 'doubled', your first; your new answer 'error' does not replace it" in second
    assert core.COMMITTED["99.7"].answer == "doubled" and not core.COMMITTED["99.7"].right
    lab.hint("99.7")
    explained = capsys.readouterr().out
    assert "doubling is what a second forward pass gives" in explained and WHY in explained


def test_each_run_of_a_wrong_prediction_climbs_one_rung(capsys):
    check_guess("doubled")
    assert "doubling is what" not in capsys.readouterr().out  # the outcome and the question only
    check_guess("doubled")
    second = capsys.readouterr().out
    assert "About 'doubled': doubling is what a second forward pass gives" in second
    assert "what did the first backward() free?" in second and WHY not in second
    check_guess("doubled")
    assert f"Why: {WHY}" in capsys.readouterr().out


def test_a_wrong_answer_without_a_note_is_asked_again_before_the_explanation(capsys):
    check_guess("same")
    check_guess("same")
    second = capsys.readouterr().out
    assert "About" not in second and WHY not in second and second.count("what did the first backward() free?") == 2
    check_guess("same")
    assert f"Why: {WHY}" in capsys.readouterr().out


def test_a_right_first_answer_passes_is_asked_why_and_stays_right(capsys):
    check_guess(" ERROR ")
    assert capsys.readouterr().out == (
        "PASS  second backward: 'error' is right (recorded answer: 'error').\n"
        "  Now explain: what did the first backward() free?\n"
        "  (write it down or say it to yourself: no check reads it; then lab.hint('99.7') shows the explanation)\n"
    )
    check_guess("same")
    assert capsys.readouterr().out.startswith("PASS  second backward")
    lab.hint("99.7")
    assert f"Why: {WHY}" in capsys.readouterr().out


class AlwaysEqual(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_a_string_that_equals_everything_is_judged_by_its_text(capsys):
    check_guess(AlwaysEqual("same"))
    assert capsys.readouterr().out.startswith("NOT RIGHT")


def judge(got, actual, **kwargs):
    core.COMMITTED.clear()
    core.check_prediction("q", got, actual, why="because.", **kwargs)


@pytest.mark.parametrize(
    "got, actual, kwargs",
    [
        (torch.tensor(6.0), 6.0, {}),
        (np.float64(6.0), 6.0, {}),
        (torch.Size([2, 3]), (2, 3), {}),
        ([2, 3], (2, 3), {}),
        (("Faster", "Not faster"), ("faster", "not faster"), {}),
        (float("nan"), "nan", {"choices": ("nan", "0", "inf")}),
        (torch.tensor(float("inf")), "inf", {"choices": ("nan", "inf")}),
        ("Error.", "error", {"choices": CHOICES}),
        ("'error'", "error", {"choices": CHOICES}),
        (" error! ", "error", {"choices": CHOICES}),
        ("0.89.", 0.89, {}),
    ],
    ids=[
        "0-d tensor",
        "numpy scalar",
        "torch.Size",
        "list",
        "case in a tuple",
        "float nan",
        "tensor inf",
        "a full stop after the word",
        "quotes inside the string",
        "spaces and an exclamation mark",
        "a number ending a sentence",
    ],
)
def test_every_form_of_a_right_answer_passes(got, actual, kwargs, capsys):
    judge(got, actual, **kwargs)
    assert capsys.readouterr().out.startswith("PASS  q:")


class LyingFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


@pytest.mark.parametrize(
    "got, fragment",
    [
        ("six", "must be a number"),
        (True, "must be a number"),
        (float("nan"), "must be a number"),
        (torch.ones(2), "must be a number"),  # read as the tuple (1.0, 1.0): not the one number asked for
        (torch.ones(2, 2), "answer with a plain value"),
        (torch.tensor(1.0, device="meta"), "answer with a plain value"),
        ({"a": 1}, "answer with a plain value"),
    ],
)
def test_answers_that_are_not_numbers_are_refused_with_a_sentence(got, fragment):
    core.COMMITTED.clear()
    assert fragment in refused(core.check_prediction, "q", got, 6.0, why="")
    assert core.COMMITTED == {}


def test_a_float_that_equals_everything_is_judged_by_its_value(capsys):
    judge(LyingFloat(7.0), 6.0)
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    judge(LyingFloat(6.1), 6.0)
    assert capsys.readouterr().out.startswith("PASS")


def test_numbers_count_within_the_tolerance(capsys):
    judge(101, 100)
    assert capsys.readouterr().out.startswith("PASS")
    judge(120, 100)
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    assert math.isclose(core.COMMITTED["q"].answer, 120)


def test_a_number_written_as_text_counts_where_the_choices_are_numbers(capsys):
    judge("1024", 1024, choices=(64, 1024, 4096))
    assert capsys.readouterr().out.startswith("PASS  q: 1024 is right (recorded answer: 1024)")
    judge("1,024", 1024, choices=(64, 1024, 4096))  # grouped by thousands
    assert capsys.readouterr().out.startswith("PASS  q: 1024 is right (recorded answer: 1024)")
    judge(" 64 ", 1024, choices=(64, 1024, 4096))
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    assert "one of the choices" in refused(judge, "ten", 1024, choices=(64, 1024, 4096))
    judge("error", "error", choices=("error", "1"))  # words stay words
    assert capsys.readouterr().out.startswith("PASS")


def test_a_number_written_as_text_counts_for_a_number_asked_without_choices(capsys):
    judge("6.1", 6.0)
    assert capsys.readouterr().out.startswith("PASS  q: 6.0 is right (recorded answer: 6.1)")
    assert "must be a number" in refused(judge, "six", 6.0)


def test_a_sentence_that_names_one_choice_is_refused_with_how_to_write_it():
    core.COMMITTED.clear()
    text = refused(check_guess, "it raises an error")
    assert "the answer must be one of the choices" in text
    assert "your text mentions 'error'; if that is your answer, write just that" in text
    assert core.COMMITTED == {}  # a refused answer is not committed: the student may write it again
    assert "mentions" not in refused(check_guess, "doubled or the same")  # two choices: no suggestion


def test_a_sentence_that_rules_one_choice_out_is_not_told_to_write_that_choice():
    core.COMMITTED.clear()
    for sentence in ("it is not the same", "it won't be doubled", "no error"):
        text = refused(check_guess, sentence)
        assert "the answer must be one of the choices" in text
        assert "mentions" not in text  # writing the choice it names would commit the opposite of what it means
        assert "rules a choice out; write the one choice you expect instead" in text
    assert core.COMMITTED == {}


def test_a_near_spelling_of_one_choice_is_refused_with_the_choice_it_resembles():
    core.COMMITTED.clear()
    text = refused(check_guess, "errors")
    assert "did you mean 'error'? Write the choice exactly as listed" in text
    assert core.COMMITTED == {}  # refused, not committed: the outcome is still hidden
    assert "did you mean" not in refused(check_guess, "grows")  # like no choice: no suggestion


def test_a_right_answer_never_gets_the_note_meant_for_it_as_a_mistake(capsys):
    """Tenth audit: where the outcome depends on the machine, a choice listed as a mistake can be right; its note
    ("not what limits them") then followed a PASS in lab.hint."""
    judge("doubled", "doubled", choices=CHOICES, mistakes={"doubled": "doubling needs a new forward pass."})
    assert capsys.readouterr().out.startswith("PASS")
    lab.hint("q")
    explained = capsys.readouterr().out
    assert "doubling needs" not in explained and "About" not in explained and "Why: because." in explained


def test_a_word_with_a_negating_prefix_is_not_told_to_write_the_choice_it_negates():
    """Tenth audit: "incorrect" was answered "did you mean 'correct'?", the opposite of what it says."""
    choices = ("error", "correct", "wrong")
    for word in ("incorrect", "Uncorrect", "not-correct"):
        text = refused(judge, word, "error", choices=choices)
        assert "did you mean" not in text and "'correct'?" not in text
        assert "rules a choice out" in text
    assert "did you mean 'correct'?" in refused(judge, "corect", "error", choices=choices)
    assert core.COMMITTED == {}


def test_one_row_in_a_pair_of_brackets_too_many_is_read_as_that_row():
    """03.3's [[2, 40, 600]] and a (1, 3) tensor were refused with no hint; a single row is read as itself."""
    import numpy as np

    from labsupport.checks import predictions

    expected = (2, 40, 600)
    for answer in ([[2, 40, 600]], ([2, 40, 600],), torch.tensor([[2, 40, 600]]), np.array([[2, 40, 600]])):
        assert predictions._normalised(answer, None) == expected, answer
    assert predictions._normalised([[1, 2], [3, 4]], None) == ((1, 2), (3, 4))  # two rows stay two rows


def test_03_3_reads_its_three_numbers_in_one_pair_of_brackets_too_many(capsys):
    """The second audit's [[2, 40, 600]] for 03.3 was refused as not "a list of three numbers"."""
    import labsupport as lab

    lab.check_vjp_prediction([[2.0, 40.0, 600.0]])
    out = capsys.readouterr().out
    assert out.startswith(("PASS", "NOT RIGHT")) and "(recorded answer: (2.0, 40.0, 600.0)" in out


def test_not_a_number_is_nan_s_name_and_no_negation():
    """04.1: "not a number (nan)" was told that its text rules a choice out."""
    with pytest.raises(CheckError) as err:
        predictions.read_prediction("the gradient", "not a number (nan)", choices=("0", "nan", "inf", "error"))
    assert "your text mentions 'nan'" in str(err.value) and predictions.RULED_OUT not in str(err.value)


@pytest.mark.parametrize("answer", [10**400, -(10**400)])
def test_an_int_beyond_any_float_is_a_wrong_number_not_a_crash(answer, capsys):
    lab.check_second_derivative_prediction(answer)
    assert capsys.readouterr().out.startswith("NOT RIGHT")


def test_fractions_and_decimals_are_numbers_in_a_prediction(capsys):
    import decimal
    import fractions

    lab.check_second_derivative_prediction(fractions.Fraction(12, 2))
    assert capsys.readouterr().out.startswith("PASS")
    predictions.COMMITTED.clear()
    lab.check_second_derivative_prediction(decimal.Decimal("6.0"))
    assert capsys.readouterr().out.startswith("PASS")


def test_a_page_of_text_is_refused_at_once_and_not_printed_back():
    with pytest.raises(CheckError) as err:
        predictions.read_prediction("the outcome", "faster " * 200_000, choices=("faster", "not faster"))
    assert "1,400,000 characters long" in str(err.value) and len(str(err.value)) < 400


def test_an_item_whose_repr_raises_is_described_not_a_crash():
    class Odd:
        def __repr__(self):
            raise RuntimeError("no repr")

    with pytest.raises(CheckError) as err:
        predictions.read_prediction("the pair", ("a", Odd()))
    assert "plain values" in str(err.value)


def test_a_new_answer_under_a_right_first_one_is_told_it_does_not_replace_it(capsys):
    """06.1: 'sgd' (right) then 'momentum' printed PASS 'sgd' is right under a cell that said momentum."""
    lab.check_second_derivative_prediction(6)
    capsys.readouterr()
    lab.check_second_derivative_prediction(3)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "your new answer 3 does not replace it" in out


def test_no_prediction_yet_says_where_to_write_it():
    with pytest.raises(CheckError) as err:
        predictions.read_prediction("the outcome", None)
    assert "in place of `prediction = None`" in str(err.value) and "solution markers" not in str(err.value)

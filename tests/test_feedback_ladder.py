"""The hint ladder: what and where first, the mistake's name on a repeat, code only when asked or
after several tries; a wrongly called check says so; lab.hint shows the whole ladder."""

import pytest
import torch

import labsupport as lab
from labsupport.checks import core

MISTAKES = [
    core.Mistake(
        name="sign flipped",
        matches=lambda y: bool(torch.equal(y, -2 * torch.ones(2))),
        why="the result has the opposite sign: which way does the derivative point?",
        look="the line that computes the result's sign",
    )
]


@core.exercise("99.5", "doubling, with a ladder")
def check_double(fn):
    """The check of a made-up exercise: fn(x) must be 2 * x."""
    got = core.run_student(fn, torch.ones(2), what="double(x)")
    core.compare("double(x)", got, torch.full((2,), 2.0), mistakes=MISTAKES)
    core.passed("doubling")


def failure(fn):
    with pytest.raises(core.CheckError) as info:
        check_double(fn)
    return info.value, "\n".join(info.value.rendered())


def test_first_failure_says_what_and_where_without_the_mistake():
    err, shown = failure(lambda x: -2 * x)
    assert "double(x) does not match the reference at element (0,)" in shown
    assert "expected: 2" in shown and "got:      -2" in shown
    assert "opposite sign" not in shown and "look at" not in shown
    assert "lab.hint('99.5') names the likely mistake" in shown
    assert err.mistake == "sign flipped" and "opposite sign" in str(err)  # programs see it all


def test_the_same_mistake_again_is_named_and_code_comes_after_several_tries():
    failure(lambda x: -2 * x)
    _, second = failure(lambda x: -2 * x)
    assert "likely mistake: the result has the opposite sign" in second
    assert "look at" not in second
    failure(lambda x: -2 * x)
    _, fourth = failure(lambda x: -2 * x)
    assert "look at: the line that computes the result's sign" in fourth


def test_a_different_failure_starts_again_at_the_first_rung():
    failure(lambda x: -2 * x)
    _, other = failure(lambda x: 3 * x)
    assert "likely mistake" not in other


def test_lab_hint_shows_the_whole_ladder_on_request(capsys):
    lab.hint("99.5")
    assert "has not failed a check" in capsys.readouterr().out
    failure(lambda x: -2 * x)
    lab.hint("99.5")
    out = capsys.readouterr().out
    assert "likely mistake: the result has the opposite sign" in out and "look at:" in out
    assert out.startswith("HINT · Exercise 99.5") and "CHECK FAILED" not in out  # a look back, not a new failure
    lab.hint()  # the last failed check
    assert "opposite sign" in capsys.readouterr().out
    lab.hint(3)
    assert "takes an exercise id" in capsys.readouterr().out


def test_after_a_pass_lab_hint_does_not_show_the_old_failure_as_current(capsys):
    failure(lambda x: -2 * x)
    check_double(lambda x: 2 * x)
    capsys.readouterr()
    lab.hint("99.5")
    assert capsys.readouterr().out == "Exercise 99.5 passed its check on its last run: there is nothing to hint.\n"
    lab.hint()  # the last failed check was 99.5's, which passes now
    assert "nothing to hint" in capsys.readouterr().out


def test_a_stopped_cell_leaves_lab_hint_on_the_last_failed_check(capsys):
    """A STOPPED line (lab.require) is shown through _render_traceback_; it used to become "the last failure",
    so lab.hint() said no check had failed."""
    failure(lambda x: -2 * x)
    with pytest.raises(core.CheckError) as info:
        lab.require("99.6")
    info.value._render_traceback_()  # what IPython does with it
    lab.hint()
    assert "opposite sign" in capsys.readouterr().out


def test_a_stop_for_two_exercises_says_them():
    with pytest.raises(core.CheckError, match="solve 99.6 and 99.7 and run their checks until PASS"):
        lab.require("99.6", "99.7")


def test_an_answer_the_check_cannot_use_gets_its_advice_at_once():
    _, shown = failure(None)
    assert "is None" in shown and "look at" not in shown
    _, shown = failure(lambda x: [1.0, 2.0])
    assert "not a tensor" in shown and "what to do: build it with torch operations" in shown


def test_a_wrongly_called_check_blames_the_call_not_the_answer():
    with pytest.raises(core.CheckError) as info:
        check_double(lambda x: x, "extra")
    assert "was called wrongly" in str(info.value) and "your answer" not in str(info.value)


def test_a_solved_exercise_is_required_and_a_failure_unsolves_it(capsys):
    check_double(lambda x: 2 * x)
    assert capsys.readouterr().out == "PASS  doubling\n"
    lab.require("99.5")
    failure(lambda x: x)
    with pytest.raises(core.ExerciseNotSolved):
        lab.require("99.5")


def test_the_graders_feedback_names_the_mistake_at_once_with_its_short_name(monkeypatch):
    monkeypatch.setenv("LAB_FEEDBACK", "named")
    _, shown = failure(lambda x: -2 * x)
    assert "likely mistake: the result has the opposite sign" in shown
    assert "  mistake: sign flipped" in shown.splitlines()


def test_the_hint_after_a_refused_answer_points_back_to_what_the_check_needs(capsys):
    """lab.hint ended with "compare expected and got above" after refusals that showed neither."""
    with pytest.raises(lab.CheckError):
        lab.check_vgg_share_prediction(None)
    capsys.readouterr()
    lab.hint("08.1")
    out = capsys.readouterr().out
    assert "compare expected and got" not in out and "says what it needs" in out


def test_hint_for_an_id_without_its_leading_zero_shows_the_exercise_meant(capsys):
    lab.hint("7.1")
    out = capsys.readouterr().out
    assert "there is no exercise '7.1': showing 07.1" in out and "Exercise 07.1 has not failed" in out
    lab.hint("Exercise 03.5")
    assert "showing 03.5" in capsys.readouterr().out
    lab.hint("98.9")  # no such exercise, and none it could mean: no check has this id
    assert capsys.readouterr().out.startswith("Exercise 98.9 has no check.")


def test_long_lines_of_a_shown_block_are_folded_at_spaces_under_their_label():
    """JupyterLab folded a long feedback line wherever its output area ended, mid-word; the block folds
    its own lines at spaces, continuation lines under the text after the label, and cuts no word."""
    long_look = "the line that computes the result's sign, " * 6 + "and " + "x" * 120
    err = core.CheckError(
        "double(x) does not match the reference " + "on every case the check tried " * 5,
        expected="2",
        got="-2",
        hint="the result has the opposite sign " * 5,
        look=long_look,
        mistake="sign flipped",
        exercise="Exercise 99.5: doubling",
    )
    err.rung = 3
    shown = err._render_traceback_()
    words = " ".join(err.rendered()[1:]).split()
    assert " ".join(shown[1:-1]).split() == words  # nothing lost, no word cut
    assert all(len(line) <= 100 for line in shown[1:-1] if "x" * 120 not in line)
    hint_at = next(i for i, line in enumerate(shown) if line.startswith("  likely mistake: "))
    assert shown[hint_at + 1].startswith(" " * len("  likely mistake: ") + "the")
    assert shown[hint_at + 1][len("  likely mistake: ")] != " "


def test_a_usage_failure_shows_no_traceback_advice():
    """A stub's None (SGDMomentum is None) is what was handed in, not a bug inside: no 'full traceback' line."""
    err = core.CheckError(
        "SGDMomentum is None", hint="replace `SGDMomentum = None`", usage=True, exercise="Exercise 99.6: x"
    )
    assert not any("show_traceback" in line for line in err._render_traceback_())
    err = core.CheckError("double(x) is wrong", exercise="Exercise 99.6: x")
    assert "show_traceback" in err._render_traceback_()[-1]

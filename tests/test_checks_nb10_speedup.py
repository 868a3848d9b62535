"""Exercise 10.4 (the speed-up, before the measurement): the 4-GPU throughput speed-ups of
ResNet-50 (weak scaling) and the DigitsCNN (strong scaling), predicted from a step's compute and
DDP's cost; the first answer is committed, each typical wrong answer gets its note."""

import json
import re
from pathlib import Path

import pytest

import labsupport as lab
from labsupport.checks import nb10_scaling_up as nb10

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_scaling_up.ipynb"


def test_the_derivation_gives_the_measured_speedups():
    # benchmarks/RESULTS.md: 3,940 -> 14,700 img/s (3.72x) and 33,400 -> 23,100 img/s (0.69x)
    assert nb10.ddp_speedups() == (3.72, 0.69)


def test_the_measurement_the_notebook_prints_is_the_derivations_outcome(capsys):
    # the cell after the check prints the measurement (lab.print_ddp_scaling), not a table in the text
    four_gpus = tuple(ratios[-1] for _, ratios in nb10.MEASURED_SCALING.values())
    assert four_gpus == nb10.ddp_speedups()
    lab.print_ddp_scaling()
    shown = capsys.readouterr().out
    assert "14,700 img/s  (3.72x)" in shown and "23,100 img/s  (0.69x)" in shown
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    check = next(i for i, c in enumerate(cells) if "check_speedup_prediction" in "".join(c["source"]))
    assert "lab.print_ddp_scaling()" in "".join(cells[check + 1]["source"])
    assert 'lab.require("10.4")' in "".join(cells[check + 1]["source"])


def test_the_notebook_states_the_checks_inputs():
    text = "".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"])
    for case in nb10.SCALING.values():
        for value in (case.one_gpu_ms, case.ddp_added_ms):
            assert re.search(rf"\b{value:g} ms", text), value


@pytest.mark.parametrize("answer", [(3.72, 0.69), (3.7, 0.7), [3.6, 0.68]])
def test_a_right_prediction_passes(answer, capsys):
    lab.check_speedup_prediction(answer)
    out = capsys.readouterr().out
    assert out.startswith("PASS  4-GPU speed-up (ResNet-50, DigitsCNN): (3.72, 0.69) is right")
    assert "4 x 64.9 / 69.7" not in out  # a right answer is asked why first; lab.hint shows the derivation
    lab.hint("10.4")
    shown = capsys.readouterr().out
    assert "4 x 64.9 / 69.7 = 3.72" in shown and "1.92 / (1.92 + 0.85) = 0.69" in shown


NOTES = {
    (4.0, 1.0): "leaves out what DDP adds",
    (4.0, 4.0): "ideal scaling for both jobs",  # audit 5: no note
    (0.93, 0.69): "the ratio of the step times",
    (3.72, 2.77): "share one batch of 64",
    (3.72, 1.44): "launch-bound",
    (0.69, 3.72): "in the other order",
    (0.93, 0.17): "divided by the 4 GPUs",
    (0.27, 1.45): "upside down",  # audit 11: no note
    (1.07, 1.44): "how much longer a step takes",  # audit 12: no note for the four below
    (3.72, 0.17): "counts one GPU's 16 images",
    (4.0, 0.69): "ResNet-50's is ideal scaling",
    (3.72, 1.0): "The digits' leaves out what DDP adds",
}


def test_every_listed_mistake_has_a_test():
    assert list(nb10.speedup_mistakes()) == list(NOTES)


@pytest.mark.parametrize("answer", list(NOTES))
def test_each_wrong_prediction_gets_its_note_and_keeps_the_first_answer(answer, capsys):
    lab.check_speedup_prediction(answer)
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT  4-GPU speed-up (ResNet-50, DigitsCNN): what happens is (3.72, 0.69)")
    assert NOTES[answer] not in first  # the note comes once the student has been asked to explain
    lab.check_speedup_prediction((3.72, 0.69))
    second = capsys.readouterr().out
    assert "PASS" not in second and NOTES[answer] in second


@pytest.mark.parametrize(
    "answer", [None, 3.72, "fast", (3.72,), (3.72, 0.69, 1.0), ("fast", 0.69), (True, 1), (float("nan"), 1)], ids=repr
)
def test_what_is_no_prediction_of_two_numbers_is_refused_and_not_committed(answer, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_speedup_prediction(answer)
    assert info.value.usage
    lab.check_speedup_prediction((3.72, 0.69))  # the first valid answer is the one committed
    assert capsys.readouterr().out.startswith("PASS")


class ShowsNothing:
    """An object whose repr, len and iter raise."""

    def __repr__(self):
        raise ValueError("no repr")

    def __len__(self):
        raise ValueError("no len")

    def __iter__(self):
        raise ValueError("no iter")


class UnreadablePair(tuple):
    """A tuple that raises when iterated."""

    def __iter__(self):
        raise RuntimeError("no iter")


@pytest.mark.parametrize(
    "answer", [(ShowsNothing(), 0.69), UnreadablePair((3.72, 0.69)), ShowsNothing()], ids=["item", "pair", "object"]
)
def test_a_pair_that_cannot_be_read_gets_one_sentence(answer, capsys):
    """15th audit: these reached the engine's "could not use what it was given" with the object's own error."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_speedup_prediction(answer)
    assert info.value.usage
    assert info.value.message.startswith("4-GPU speed-up (ResNet-50, DigitsCNN): answer with")
    assert "could not use" not in str(info.value)
    lab.check_speedup_prediction((3.72, 0.69))
    assert capsys.readouterr().out.startswith("PASS")


def test_exact_numbers_are_numbers(capsys):
    """15th audit: Fractions and Decimals were refused as no plain values."""
    from decimal import Decimal
    from fractions import Fraction

    lab.check_speedup_prediction((Fraction(4 * 649, 697), Decimal("0.69")))
    assert capsys.readouterr().out.startswith("PASS")


def test_percentages_written_as_text_hear_that_a_ratio_is_asked():
    with pytest.raises(lab.CheckError) as info:
        lab.check_speedup_prediction("372%, 69%")
    assert "not a percentage" in info.value.hint


def test_a_slowdown_factor_for_the_digits_hears_what_a_speedup_below_one_means(capsys):
    """15th audit: 1.44 is also 2.77 / 1.92, how many times slower the digits run; the note named only the
    proportional-share reading."""
    lab.check_speedup_prediction((3.72, 1.44))
    lab.check_speedup_prediction((3.72, 0.69))
    assert "how many times slower" in capsys.readouterr().out

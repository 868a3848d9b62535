"""Checks of notebook 00: the right answers pass, each listed mistake is named, bad input gets a message."""
import math

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import core

T = lab.TITAN_RTX
TENSOR = T["sms"] * T["tensor_cores_per_sm"] * T["fp16_fma_per_tensor_core_per_cycle"] * 2 * T["boost_clock_ghz"] * 1e9


def cpu_peak(c, g, b, u):
    return c * g * 1e9 * u * (b / 32) * 2


def roofline(i, p, b):
    return min(p, i * b)


def raises(*args):
    raise ValueError("boom")


def never_returns(*args):
    while True:
        pass


@pytest.mark.parametrize("check, answer", [
    (lab.check_titan_tensor_peak, TENSOR),
    (lab.check_titan_tensor_peak, torch.tensor(TENSOR, dtype=torch.float64)),
    (lab.check_titan_tensor_peak, np.float64(TENSOR)),
    (lab.check_cpu_peak_flops, cpu_peak),
    (lab.check_cpu_peak_flops, lambda *a: torch.tensor(cpu_peak(*a), dtype=torch.float64)),
    (lab.check_roofline, roofline),
    (lab.check_matmul_size_prediction, 1024),
])
def test_right_answers_pass(check, answer, capsys):
    check(answer)
    assert capsys.readouterr().out.startswith("PASS")


def test_titan_pass_line_states_the_lectures_8x(capsys):
    lab.check_titan_tensor_peak(TENSOR)
    assert "130 TFLOP/s, 8x" in capsys.readouterr().out


# One entry per mistake each check lists: (check, wrong answer, words of the message it must get).
MISTAKES = [
    (lab.check_titan_tensor_peak, TENSOR / 2, "a multiply-add is 2 FLOP"),                     # FMA as 1 FLOP
    (lab.check_titan_tensor_peak, TENSOR * 4 / T["tensor_cores_per_sm"], "8 tensor cores per SM"),  # Hopper's 4
    (lab.check_titan_tensor_peak, TENSOR * T["base_clock_ghz"] / T["boost_clock_ghz"], "base clock"),
    (lab.check_titan_tensor_peak, TENSOR / T["sms"], "one SM"),
    (lab.check_titan_tensor_peak, TENSOR / 1e12, "not GFLOP/s or TFLOP/s"),
    (lab.check_titan_tensor_peak, TENSOR / 1e9, "not GFLOP/s or TFLOP/s"),
    (lab.check_cpu_peak_flops, lambda c, g, b, u: cpu_peak(c, g, b, u) / 2, "an FMA is 2 FLOP"),
    (lab.check_cpu_peak_flops, lambda c, g, b, u: cpu_peak(c, g, b * 32 / 64, u), "not 64"),
    (lab.check_cpu_peak_flops, lambda c, g, b, u: cpu_peak(c, g, b * 32, u), "width in bits"),
    (lab.check_cpu_peak_flops, lambda c, g, b, u: cpu_peak(c, g, b, 1), "fma_units FMA units"),
    (lab.check_cpu_peak_flops, lambda c, g, b, u: cpu_peak(c, g / 1e9, b, u), "in GHz"),
    (lab.check_roofline, lambda i, p, b: max(p, i * b), "higher roof"),
    (lab.check_roofline, lambda i, p, b: i * b, "beats the compute peak"),
    (lab.check_roofline, lambda i, p, b: p, "memory cannot feed"),
    (lab.check_matmul_size_prediction, 16, "not what limits them"),
]


@pytest.mark.parametrize("check, wrong, words", MISTAKES)
def test_each_listed_mistake_is_named(check, wrong, words):
    with pytest.raises(lab.CheckError, match=words):
        check(wrong)


def test_a_wrong_answer_outside_the_list_still_says_what_was_expected():
    with pytest.raises(lab.CheckError, match="Expected 1.3e"):
        lab.check_titan_tensor_peak(1.0)
    with pytest.raises(lab.CheckError, match="roofline.*is wrong"):
        lab.check_roofline(lambda i, p, b: p / b)


BAD = [None, [1.0], "1e14", float("nan"), math.inf, torch.ones(2)]
CHECKS = [lab.check_titan_tensor_peak, lab.check_cpu_peak_flops, lab.check_roofline,
          lab.check_matmul_size_prediction]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_answers_get_a_check_error(check, bad):
    with pytest.raises(lab.CheckError):
        check(bad)


@pytest.mark.parametrize("check", [lab.check_cpu_peak_flops, lab.check_roofline], ids=lambda c: c.__name__)
@pytest.mark.parametrize("returns", BAD, ids=repr)
def test_functions_returning_junk_get_a_check_error(check, returns):
    with pytest.raises(lab.CheckError, match="must be a finite number"):
        check(lambda *a: returns)


@pytest.mark.parametrize("check", [lab.check_cpu_peak_flops, lab.check_roofline], ids=lambda c: c.__name__)
def test_a_raising_function_gets_its_error_named(check):
    with pytest.raises(lab.CheckError, match="ValueError: boom"):
        check(raises)


@pytest.mark.parametrize("check", [lab.check_cpu_peak_flops, lab.check_roofline], ids=lambda c: c.__name__)
def test_a_function_that_never_returns_is_stopped(check, monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match="did not return"):
        check(never_returns)


@pytest.mark.parametrize("check", [lab.check_cpu_peak_flops, lab.check_roofline], ids=lambda c: c.__name__)
def test_the_stub_says_not_written_yet(check):
    def stub(*args):
        raise NotImplementedError("Exercise")
    with pytest.raises(lab.CheckError, match="not written yet"):
        check(stub)


def test_failures_are_labelled_with_the_exercise():
    with pytest.raises(lab.CheckError) as info:
        lab.check_roofline(None)
    assert info.value.exercise == "Exercise 00.4: the roofline"

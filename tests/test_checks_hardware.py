"""Checks of notebook 00: the references pass, each known slip is named, bad returns get a message."""
import numpy as np
import pytest
import torch

import labsupport as lab


def cpu_peak_flops(cores, clock_ghz, simd_bits, fma_units):
    return cores * clock_ghz * 1e9 * fma_units * (simd_bits / 32) * 2


def test_cpu_peak_reference_passes(capsys):
    lab.check_cpu_peak_flops(cpu_peak_flops)
    assert capsys.readouterr().out.startswith("PASS  cpu_peak_flops")


def test_cpu_peak_accepts_a_0d_tensor(capsys):
    lab.check_cpu_peak_flops(lambda *a: torch.tensor(cpu_peak_flops(*a), dtype=torch.float64))
    assert "PASS" in capsys.readouterr().out


def stub(*args):
    raise NotImplementedError("Exercise 1: cpu_peak_flops")


@pytest.mark.parametrize("wrong, fragment", [
    (lambda c, g, b, u: cpu_peak_flops(c, g, b, u) / 2, "exactly half"),
    (lambda c, g, b, u: c * g * 1e9 * u * (b / 64) * 2, "exactly half"),
    (lambda c, g, b, u: c * g * 1e9 * u * b * 2, "lanes = simd_bits / 32"),
    (lambda c, g, b, u: c * g * 1e9 * (b / 32) * 2, "multiply by fma_units"),
    (lambda c, g, b, u: c * g * u * (b / 32) * 2, "multiply by 1e9"),
    (lambda c, g, b, u: c + g + b + u, r"= cores x clock_ghz x 1e9"),
    (lambda c, g, b, u: None, "got None"),
    (lambda c, g, b, u: np.float32(1.0), "numpy"),
    (lambda c, g, b, u: [1.0], "list of length 1"),
    (lambda c, g, b, u: float("nan"), "finite"),
    (stub, "not written yet"),
])
def test_cpu_peak_slips(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_cpu_peak_flops(wrong)


def roofline(intensity, peak, bandwidth):
    return min(peak, intensity * bandwidth)


def test_roofline_reference_passes(capsys):
    lab.check_roofline(roofline)
    assert capsys.readouterr().out.startswith("PASS  roofline")


@pytest.mark.parametrize("wrong, fragment", [
    (lambda i, p, b: max(p, i * b), "take the min"),
    (lambda i, p, b: i * b, "cap intensity x bandwidth at peak"),
    (lambda i, p, b: p, "memory sets the pace"),
    (lambda i, p, b: p / b, r"min\(peak, intensity x bandwidth\)"),
    (lambda i, p, b: None, "got None"),
    (lambda i, p, b: "1e12", "str"),
    (lambda i, p, b: float("inf"), "finite"),
    (lambda i, p, b: torch.ones(2), "tensor of shape"),
])
def test_roofline_slips(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_roofline(wrong)

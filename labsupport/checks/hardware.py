"""Checks for notebook 00 (hardware): the peak-FLOPs formula and the roofline.

Example:
    >>> import labsupport as lab
    >>> lab.check_roofline(lambda intensity, peak, bandwidth: min(peak, intensity * bandwidth))
    PASS  roofline: min(peak, intensity x bandwidth) on 5 test cases
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .core import CheckError, call_student, describe, passed

__all__ = ["check_cpu_peak_flops", "check_roofline"]


def _number(value: Any, name: str) -> float:
    __tracebackhide__ = True
    try:
        import torch

        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckError(f"{name}: expected a number (int or float), got {describe(value)}")
    if not math.isfinite(value):
        raise CheckError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def check_cpu_peak_flops(cpu_peak_flops: Callable) -> None:
    """Check ``cpu_peak_flops(cores, clock_ghz, simd_bits, fma_units)`` returns the
    peak fp32 FLOP/s: cores x clock (in Hz) x FMA units x fp32 lanes (simd_bits / 32)
    x 2 (an FMA is a multiply and an add).

    The reference is the formula written out independently, on four machines
    (an Arm core with four 128-bit FMA units, a 2-core AVX-512 laptop, an 8-core
    AVX2 desktop, a 64-core server). Recognises the usual slips: no factor 2 for the FMA, bits
    instead of lanes, fp64 lanes (/64), the FMA units left out, and the clock
    left in GHz.

    Example:
        >>> check_cpu_peak_flops(lambda c, ghz, bits, u: c * ghz * 1e9 * u * bits / 32 * 2)
        PASS  cpu_peak_flops: cores x clock x FMA units x lanes x 2 on 4 machines
    """
    __tracebackhide__ = True
    machines = [(1, 2.0, 128, 4), (2, 2.6, 512, 2), (8, 3.5, 256, 2), (64, 2.25, 256, 2)]
    for cores, ghz, bits, units in machines:
        got = call_student(cpu_peak_flops, cores, ghz, bits, units,
                           what="your cpu_peak_flops(cores, clock_ghz, simd_bits, fma_units)")
        got = _number(got, "peak FLOP/s")
        expected = cores * ghz * 1e9 * units * (bits // 32) * 2
        if _close(got, expected):
            continue
        args = f"(cores={cores}, clock_ghz={ghz}, simd_bits={bits}, fma_units={units})"
        slips = [
            (expected / 2, "it is exactly half. An FMA (fused multiply-add) counts as 2 FLOP, and an "
                           "fp32 lane is 32 bits wide (lanes = simd_bits / 32, not / 64)"),
            (cores * ghz * 1e9 * units * bits * 2, "simd_bits is a width in bits: an fp32 lane is "
                                                   "32 bits, so lanes = simd_bits / 32"),
            (expected / units, "each core has fma_units FMA units working in parallel: multiply by fma_units"),
            (expected / 1e9, "clock_ghz is in GHz: multiply by 1e9 to get cycles per second"),
        ]
        for value, why in slips:
            if _close(got, value):
                raise CheckError(f"cpu_peak_flops{args} returned {got:.4g}; expected {expected:.4g}: {why}.")
        raise CheckError(f"cpu_peak_flops{args} returned {got:.4g}; expected {expected:.4g} "
                         f"= cores x clock_ghz x 1e9 x fma_units x (simd_bits / 32) x 2.")
    passed("cpu_peak_flops: cores x clock x FMA units x lanes x 2 on 4 machines")


def check_roofline(roofline: Callable) -> None:
    """Check ``roofline(intensity, peak, bandwidth)``: the best FLOP/s a kernel of
    arithmetic ``intensity`` (FLOP per byte) can reach on a machine with compute
    ``peak`` (FLOP/s) and memory ``bandwidth`` (bytes/s): ``min(peak, intensity x bandwidth)``.

    Test cases lie on both sides of the ridge point (peak / bandwidth) and on it.
    Recognises ``max`` instead of ``min`` and a missing roof on either side.

    Example:
        >>> check_roofline(lambda i, p, b: min(p, i * b))
        PASS  roofline: min(peak, intensity x bandwidth) on 5 test cases
    """
    __tracebackhide__ = True
    cases = [(0.083, 1e12, 1e11), (1000.0, 1e12, 1e11), (10.0, 1e12, 1e11),
             (0.25, 6.7e13, 4.8e12), (300.0, 9.9e14, 4.8e12)]
    results = []
    for intensity, peak, bandwidth in cases:
        got = call_student(roofline, intensity, peak, bandwidth,
                           what="your roofline(intensity, peak, bandwidth)")
        results.append(_number(got, "attainable FLOP/s"))
    wrong = [(c, got) for c, got in zip(cases, results) if not _close(got, min(c[1], c[0] * c[2]))]
    if wrong:
        # A slip shows in the pattern over all cases (on one case, max and "no cap" agree).
        slips = [
            (lambda i, p, b: max(p, i * b), "that is the larger of the two roofs; a kernel is held "
                                            "back by whichever limit it hits first: take the min"),
            (lambda i, p, b: i * b, "a kernel can never beat the compute peak, however high its "
                                    "intensity: cap intensity x bandwidth at peak"),
            (lambda i, p, b: p, "with little arithmetic per byte, memory sets the pace: the limit "
                                "is intensity x bandwidth when that is below the peak"),
        ]
        why = next((text for fn, text in slips
                    if all(_close(got, fn(*c)) for c, got in zip(cases, results))),
                   "attainable FLOP/s = min(peak, intensity x bandwidth)")
        (intensity, peak, bandwidth), got = wrong[0]
        args = f"(intensity={intensity:g}, peak={peak:g}, bandwidth={bandwidth:g})"
        raise CheckError(f"roofline{args} returned {got:.4g}; expected "
                         f"{min(peak, intensity * bandwidth):.4g}: {why}.")
    passed(f"roofline: min(peak, intensity x bandwidth) on {len(cases)} test cases")

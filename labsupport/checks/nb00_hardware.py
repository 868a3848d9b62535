"""Checks of notebook 00 (hardware): peak FLOP/s by arithmetic, a predicted matmul, the roofline.

Every reference is computed here, at check time, from the same facts the student has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import running
from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    exercise,
    first_mistake,
    fmt,
    fmt_apart,
    mistake_error,
    passed,
    read_prediction,
    run_student,
    stopped_after,
)
from .values import describe, plain, plain_tensor, scalar_of

__all__ = ["check_titan_tensor_peak", "check_cpu_peak_flops", "check_matmul_size_prediction", "check_roofline"]

#: Relative tolerance of a plain-number answer (float rounding only).
REL_TOL = 1e-6

#: 2**30 / 1e9: a GHz counted as 2**30 cycles per second (GiB's binary giga) instead of 1e9.
BINARY_GIGA = 2**30 / 1e9


def _times(ref: float, factor: float) -> Callable[[float], bool]:
    """A test on an answer: is it ``factor`` times the reference ``ref``?"""

    def test(got: float) -> bool:
        return math.isclose(got, ref * factor, rel_tol=REL_TOL)

    return test


def _power_of_ten_off(ref: float, rel_tol: float = REL_TOL) -> Callable[[float], bool]:
    """A test on an answer: is it the reference times 10**k for some k != 0 (a unit slip), to ``rel_tol``?"""

    def test(got: float) -> bool:
        if got <= 0 or ref <= 0:
            return False
        power = round(math.log10(got / ref))
        return power != 0 and math.isclose(got / ref, 10.0**power, rel_tol=rel_tol)

    return test


def _negative(got: Any) -> bool:
    """A test on an answer, or on a list of them: is any of them below zero?"""
    if isinstance(got, (list, tuple)):
        return any(value < 0 for value in got)
    return got < 0


def _slip_pairs(slips: list[tuple[str, Any, str]], test: Callable[[Any], Callable[[Any], bool]]) -> list[Mistake]:
    """One Mistake per pair of ``slips``, (name, factor, phrase): two slips at once multiply their factors.
    ``test(factor_a, factor_b)`` makes the predicate on the answer."""
    mistakes = []
    for first, (name_a, factor_a, phrase_a) in enumerate(slips):
        for name_b, factor_b, phrase_b in slips[first + 1 :]:
            mistake = Mistake(
                f"{name_a} and {name_b}",
                test(factor_a, factor_b),
                f"two slips at once: {phrase_a}; and {phrase_b}",
                look="your product, factor by factor: what each factor counts, and in which unit",
            )
            mistakes.append(mistake)
    return mistakes


# ----------------------------------------------------------------------------- 00.1 the tensor cores' peak


def titan_peaks(t: dict) -> tuple[float, float]:
    """The Titan RTX's tensor-core peak and its CUDA cores' fp32 peak, in FLOP/s, from the facts ``t``."""
    clock = t["boost_clock_ghz"] * 1e9
    tensor = t["sms"] * t["tensor_cores_per_sm"] * t["fp16_fma_per_tensor_core_per_cycle"] * 2 * clock
    fp32 = t["sms"] * t["cuda_cores_per_sm"] * 2 * clock
    return tensor, fp32


def titan_mistakes(t: dict) -> list[Mistake]:
    """The typical wrong peaks, each a ratio to the right one (or the fp32 peak itself)."""
    ref, fp32 = titan_peaks(t)
    return [
        Mistake(
            "half",
            _times(ref, 0.5),
            "exactly half: either a multiply-add counted as 1 FLOP (it is 2), or 4 tensor cores per SM "
            "(Ampere's and Hopper's count; the Titan RTX has 8)",
            look="the factor for FLOP per FMA, and which per-SM count of tensor cores your product uses",
        ),
        Mistake(
            "twice",
            _times(ref, 2.0),
            "exactly twice: a multiply-add counts as 2 FLOP (one multiply, one add), not 4, and the Titan RTX has 8 "
            "tensor cores per SM, not 16, each doing 64 FMAs per cycle (Ampere's 4 per SM do 256 each: take the "
            "counts from t)",
            look="the factor for FLOP per FMA, and which per-SM count of tensor cores your product uses",
        ),
        Mistake(
            "CUDA cores' peak",
            _times(fp32, 1.0),
            "that is the CUDA cores' fp32 peak computed above (it is also what one tensor core per SM gives): "
            "each SM has tensor_cores_per_sm tensor cores, each finishing fp16_fma_per_tensor_core_per_cycle FMAs",
            look="which units your product counts, and how many of them per SM",
        ),
        Mistake(
            "fp16 on the CUDA cores",
            _times(fp32, 2.0),
            "that is twice the CUDA cores' fp32 peak, what the CUDA cores reach in fp16 (two fp16 numbers in each "
            "32-bit lane): the matrix products asked for run on the tensor cores, a separate unit, "
            "tensor_cores_per_sm of them per SM, each finishing fp16_fma_per_tensor_core_per_cycle FMAs",
            look="which units, and how many of them, your product counts",
        ),
        Mistake(
            "base clock",
            _times(ref, t["base_clock_ghz"] / t["boost_clock_ghz"]),
            "that uses the base clock; peak figures use the boost clock",
            look="which of t's two clocks your product uses",
        ),
        Mistake(
            "CUDA cores as tensor cores",
            _times(ref, t["cuda_cores_per_sm"] / t["tensor_cores_per_sm"]),
            "that counts cuda_cores_per_sm cores per SM, each doing fp16_fma_per_tensor_core_per_cycle FMAs: the "
            "fp16 FMAs are done by the tensor cores, and each SM has tensor_cores_per_sm of them",
            look="which per-SM count multiplies fp16_fma_per_tensor_core_per_cycle",
        ),
        Mistake(
            "one SM",
            _times(ref, 1 / t["sms"]),
            "that is one SM: the chip has 72 of them",
            look="which of t's counts are in your product: is every one of them there?",
        ),
        *_titan_rate_mistakes(t),
    ]


def _titan_rate_mistakes(t: dict) -> list[Mistake]:
    """Wrong peaks of 00.1 at the level of rates: FMAs per cycle, cycles per second, other chips, units."""
    ref, fp32 = titan_peaks(t)
    return [
        Mistake(
            "one FMA per tensor core",
            _times(ref, 1 / t["fp16_fma_per_tensor_core_per_cycle"]),
            "that counts one FMA per tensor core and cycle: each does fp16_fma_per_tensor_core_per_cycle",
            look="which of t's counts are in your product: is every one of them there?",
        ),
        Mistake(
            "per cycle",
            _times(ref, 1 / (t["boost_clock_ghz"] * 1e9)),
            "that is FLOP per cycle: multiply by the cycles per second (1 GHz is 1e9 cycles per second)",
            look="where boost_clock_ghz enters your product",
        ),
        Mistake(
            "a later GPU's tensor cores",
            _times(ref, 4.0),
            "four times the peak: that is what Hopper's tensor cores give (4 per SM at 512 FMAs each); the Titan "
            "RTX's are Turing's, tensor_cores_per_sm of them per SM, each doing fp16_fma_per_tensor_core_per_cycle",
            look="take every count from t, not from the paragraph on later generations",
        ),
        Mistake(
            "CUDA cores added",
            _times(ref, 1 + fp32 / ref),
            "that adds the CUDA cores' fp32 peak to the tensor cores': the fp16 matrix products run on the tensor "
            "cores, so the peak asked for is theirs alone",
            look="the + in your expression: which units' peak does each term count?",
        ),
        Mistake(
            "binary giga",
            _times(ref, BINARY_GIGA),
            "7% above the peak: a GHz was counted as 2**30 cycles per second, the binary giga of memory sizes "
            "(GiB); a clock rate uses the decimal giga, 1e9",
            look="the factor that turns boost_clock_ghz into cycles per second",
        ),
        Mistake(
            "unit",
            _power_of_ten_off(ref, rel_tol=0.01),
            "a power of ten off: give FLOP/s, not GFLOP/s or TFLOP/s (and compute it from t's numbers, unrounded)",
            look="a factor such as 1e9, 1e12 or 1e-12 in your expression, or a figure typed in rounded",
        ),
        Mistake(
            "ratio to the fp32 peak",
            _times(ref / fp32, 1.0),
            "that is how many times the fp32 peak the tensor-core peak is, the figure the prompt asks you to guess: "
            "titan_tensor_peak is the peak itself, in FLOP/s",
            look="what the variable holds: a ratio of two peaks, or a rate",
        ),
        Mistake(
            "negative",
            _negative,
            "a peak is a count of FLOP per second, so it is positive: a minus sign slipped into the expression",
            look="every minus sign in your expression",
        ),
    ]


def titan_slip_pairs(t: dict) -> list[Mistake]:
    """Two of the usual slips of 00.1 at once (the base clock and an FMA counted as 4 FLOP, say)."""
    ref, _ = titan_peaks(t)
    slips = [
        ("FMA as 1 FLOP", 0.5, "an FMA was counted as 1 FLOP (it is 2)"),
        ("FMA as 4 FLOP", 2.0, "an FMA was counted as 4 FLOP (it is 2)"),
        ("base clock", t["base_clock_ghz"] / t["boost_clock_ghz"], "the base clock was used, not the boost clock"),
        ("one SM", 1 / t["sms"], "the SMs were left out (the chip has 72)"),
        ("one tensor core per SM", 1 / t["tensor_cores_per_sm"], "tensor_cores_per_sm was left out"),
        ("one FMA per cycle", 1 / t["fp16_fma_per_tensor_core_per_cycle"], "the FMAs per cycle were left out"),
        ("per cycle", 1 / (t["boost_clock_ghz"] * 1e9), "the clock was left out, so this counts FLOP per cycle"),
        ("binary giga", BINARY_GIGA, "a GHz was counted as 2**30 cycles per second, not 1e9"),
        ("GFLOP/s", 1e-9, "the result is in GFLOP/s, not FLOP/s"),
        ("TFLOP/s", 1e-12, "the result is in TFLOP/s, not FLOP/s"),
    ]

    def test(factor_a: float, factor_b: float) -> Callable[[float], bool]:
        return _times(ref, factor_a * factor_b)

    # two ways of writing one factor cannot both be in one product
    contradictory = {"FMA as 1 FLOP and FMA as 4 FLOP", "GFLOP/s and TFLOP/s"}
    return [mistake for mistake in _slip_pairs(slips, test) if mistake.name not in contradictory]


@exercise("00.1", "the tensor cores' peak")
def check_titan_tensor_peak(titan_tensor_peak: Any) -> None:
    """Check the Titan RTX's dense fp16 tensor-core peak (FLOP/s), a plain number."""
    from ..hardware import TITAN_RTX as t

    got = as_number(titan_tensor_peak, "titan_tensor_peak")
    ref, fp32 = titan_peaks(t)
    if not math.isclose(got, ref, rel_tol=1e-3):
        # The reference is the answer itself: it is never printed, only how far the answer is from it.
        message = "titan_tensor_peak is not the Titan RTX's tensor-core peak"
        expected = "the peak worked out from the facts in t, to 0.1%"
        mistake = first_mistake(got, [*titan_mistakes(t), *titan_slip_pairs(t)])
        if mistake is not None:
            raise mistake_error(message, mistake, expected=expected, got=f"{fmt(got)} FLOP/s")
        if math.isclose(got, ref, rel_tol=0.01):
            raise CheckError(
                message,
                expected=expected,
                got=f"{fmt(got)} FLOP/s: within 1% of it, but not within 0.1%",
                hint="a rounded figure? compute it from t's numbers, without rounding any of them",
            )
        raise CheckError(message, expected=expected, got=f"{fmt(got)} FLOP/s")
    passed(f"Titan RTX tensor cores: {fmt(ref / 1e12)} TFLOP/s, {ref / fp32:.0f}x its CUDA cores' fp32")


# ----------------------------------------------------------------------------- 00.2 a CPU's peak

#: (cores, clock_ghz, simd_bits, fma_units): an Arm core, a laptop, a desktop, a server.
CPU_MACHINES = [(1, 2.0, 128, 4), (2, 2.6, 512, 2), (8, 3.5, 256, 2), (64, 2.25, 256, 2)]


def cpu_peak_reference(cores: int, clock_ghz: float, simd_bits: int, fma_units: int) -> float:
    """Peak fp32 FLOP/s: lanes of 32 bits, 2 FLOP per FMA, fma_units FMAs per cycle and core."""
    return cores * clock_ghz * 1e9 * fma_units * (simd_bits / 32) * 2


def _on_every_machine(formula: Callable[..., float]) -> Callable[[list[float]], bool]:
    """A test on the answers for all machines: do they follow ``formula``?"""

    def test(answers: list[float]) -> bool:
        for got, machine in zip(answers, CPU_MACHINES):
            if not math.isclose(got, formula(*machine), rel_tol=REL_TOL):
                return False
        return True

    return test


def _half(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) / 2


def _quarter(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) / 4


def _twice(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * 2


def _bits_as_lanes(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * 32


def _bytes_as_lanes(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * 4


def _no_lanes(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) / (b / 32)


def _one_fma_unit(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, 1)


def _fixed_fma_units(answers: list[float]) -> bool:
    """Does every answer use one and the same number of FMA units (2, as the text says recent x86 cores have)?"""
    units = [got / cpu_peak_reference(c, g, b, 1) for got, (c, g, b, _) in zip(answers, CPU_MACHINES)]
    return all(math.isclose(u, units[0], rel_tol=REL_TOL) for u in units) and units[0] in (2.0, 4.0)


def _fixed_lanes(answers: list[float]) -> bool:
    """Does every answer use one and the same number of lanes (8, AVX2's 256 bits, say), whatever simd_bits is?"""
    lanes = [got / cpu_peak_reference(c, g, 32, u) for got, (c, g, _, u) in zip(answers, CPU_MACHINES)]
    return all(math.isclose(n, lanes[0], rel_tol=REL_TOL) for n in lanes) and lanes[0] in (4.0, 8.0, 16.0)


def _fixed_cores(answers: list[float]) -> bool:
    """Does every answer use one and the same whole number of cores (4 or 8, say, a laptop's), whatever cores is?"""
    counts = [got / cpu_peak_reference(1, g, b, u) for got, (_, g, b, u) in zip(answers, CPU_MACHINES)]
    same = all(math.isclose(n, counts[0], rel_tol=REL_TOL) for n in counts)
    return same and counts[0] > 1 and math.isclose(counts[0], round(counts[0]), rel_tol=REL_TOL)


def _power_of_ten_everywhere(answers: list[float]) -> bool:
    """Is every answer the peak times one and the same power of ten other than 1 (a unit slip)?"""
    references = [cpu_peak_reference(*machine) for machine in CPU_MACHINES]
    first = answers[0] / references[0]
    same = all(math.isclose(got / ref, first, rel_tol=REL_TOL) for got, ref in zip(answers, references))
    return same and _power_of_ten_off(1.0)(first)


def _one_core(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(1, g, b, u)


def _clock_in_hz(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) / 1e9


def _binary_giga(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * BINARY_GIGA


def _units_twice(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * u


def _fma_as_3(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * 1.5


def _lanes_added(answers: list[float]) -> bool:
    """Are the answers the peak with the lanes (simd_bits / 32) added to another factor (the FMA units, the cores or
    the 2 FLOP per FMA) instead of multiplying the product?"""

    def added_to(which: int) -> Callable[..., float]:
        def formula(c: int, g: float, b: int, u: int) -> float:
            factors = [c, u, 2]
            factors[which] += b / 32
            return factors[0] * g * 1e9 * factors[1] * factors[2]

        return formula

    return any(_on_every_machine(added_to(which))(answers) for which in range(3))


def _cores_twice(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * c


def _lanes_twice(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * (b / 32)


def _clock_twice(c: int, g: float, b: int, u: int) -> float:
    return cpu_peak_reference(c, g, b, u) * g


def _log2_lanes(answers: list[float]) -> bool:
    """Are the answers the peak with the lanes (simd_bits / 32) or simd_bits itself replaced by its log2?"""

    def with_log2(of_bits: bool) -> Callable[..., float]:
        def formula(c: int, g: float, b: int, u: int) -> float:
            counted = math.log2(b) if of_bits else math.log2(b / 32)
            return cpu_peak_reference(c, g, b, u) / (b / 32) * counted

        return formula

    return _on_every_machine(with_log2(False))(answers) or _on_every_machine(with_log2(True))(answers)


def _divides(answers: list[float]) -> bool:
    """Is one of cores, fma_units or the lanes dividing the product where it should multiply it?"""

    def divided_by(which: int) -> Callable[..., float]:
        def formula(c: int, g: float, b: int, u: int) -> float:
            factor = (c, u, b / 32)[which]
            return cpu_peak_reference(c, g, b, u) / factor**2

        return formula

    return any(_on_every_machine(divided_by(which))(answers) for which in range(3))


def _clock_rounded(answers: list[float]) -> bool:
    """Is the clock rounded to whole GHz (int, round, floor or ceil) before it enters the product?"""

    def rounded_with(rounding: Callable[[float], int]) -> Callable[..., float]:
        def formula(c: int, g: float, b: int, u: int) -> float:
            return cpu_peak_reference(c, rounding(g), b, u)

        return formula

    return any(_on_every_machine(rounded_with(rounding))(answers) for rounding in (int, round, math.ceil))


CPU_MISTAKES = [
    Mistake(
        "half",
        _on_every_machine(_half),
        "half the peak on every machine: either the lanes were counted 64 bits wide, fp64's width (an fp32 "
        "number is 32 bits), or an FMA was counted as 1 FLOP (it is 2)",
        look="how many fp32 numbers fit in one register, and how many FLOP one FMA on each makes",
    ),
    Mistake(
        "quarter",
        _on_every_machine(_quarter),
        "a quarter of the peak on every machine: two factors of 2 are missing, most likely the lanes counted 64 "
        "bits wide, fp64's width (an fp32 number is 32 bits), and an FMA counted as 1 FLOP (it is 2)",
        look="how many fp32 numbers fit in one register, and how many FLOP one FMA on each makes",
    ),
    Mistake(
        "twice",
        _on_every_machine(_twice),
        "twice the peak on every machine: an fp32 lane is 32 bits (not 16), an FMA is 2 FLOP (not 4), and a core "
        "counts once even with two hardware threads, which share its FMA units",
        look="how many fp32 numbers fit in one register, and how many FLOP one FMA on each makes",
    ),
    Mistake(
        "bits as lanes",
        _on_every_machine(_bits_as_lanes),
        "simd_bits is a width in bits: one fp32 lane is 32",
        look="where simd_bits enters the product",
    ),
    Mistake(
        "SIMD lanes left out",
        _on_every_machine(_no_lanes),
        "that counts one number per FMA instruction: a SIMD FMA works on every fp32 lane of its simd_bits-wide "
        "register at once",
        look="where simd_bits enters the product",
    ),
    Mistake(
        "bytes as lanes",
        _on_every_machine(_bytes_as_lanes),
        "that counts bytes as lanes: an fp32 lane is 4 bytes (32 bits)",
        look="where simd_bits enters the product",
    ),
    Mistake(
        "SIMD lanes fixed",
        _fixed_lanes,
        "every machine got the same number of fp32 lanes, written as a number: the registers differ from machine "
        "to machine, and simd_bits says how wide each one's are",
        look="where simd_bits enters the product",
    ),
    Mistake(
        "fma_units ignored",
        _on_every_machine(_one_fma_unit),
        "each core has fma_units FMA units side by side",
        look="which of the four arguments your product uses: is every one of them there?",
    ),
    Mistake(
        "fma_units fixed",
        _fixed_fma_units,
        "every machine got the same number of FMA units, written as a number: the machines differ there, and "
        "fma_units says how many each has",
        look="where fma_units enters the product",
    ),
    Mistake(
        "cores ignored",
        _on_every_machine(_one_core),
        "that is one core's peak: every core has its own units",
        look="which of the four arguments your product uses: is every one of them there?",
    ),
    Mistake(
        "cores fixed",
        _fixed_cores,
        "every machine got the same number of cores, written as a number: the four machines have different core "
        "counts, and cores says how many each has",
        look="where cores enters the product",
    ),
    Mistake(
        "clock in GHz",
        _on_every_machine(_clock_in_hz),
        "clock_ghz is in GHz: one GHz is 1e9 cycles per second",
        look="the factor that turns clock_ghz into cycles per second",
    ),
    Mistake(
        "binary giga",
        _on_every_machine(_binary_giga),
        "7% above the peak on every machine: a GHz was counted as 2**30 cycles per second, the binary giga of "
        "memory sizes (GiB); a clock rate uses the decimal giga, 1e9",
        look="the factor that turns clock_ghz into cycles per second",
    ),
    Mistake(
        "unit",
        _power_of_ten_everywhere,
        "a power of ten off on every machine: give FLOP/s, not GFLOP/s or TFLOP/s, and count 1 GHz as 1e9 "
        "cycles per second",
        look="the factor that turns clock_ghz into cycles per second",
    ),
    Mistake(
        "negative",
        _negative,
        "a peak is a count of FLOP per second, so it is positive: a minus sign slipped into the product",
        look="every minus sign in your return line",
    ),
    Mistake(
        "fma_units twice",
        _on_every_machine(_units_twice),
        "fma_units-times the peak on every machine: fma_units multiplies the product twice, where each core's FMA "
        "units are counted once",
        look="every place fma_units enters the product",
    ),
    Mistake(
        "FMA as 3 FLOP",
        _on_every_machine(_fma_as_3),
        "1.5 times the peak on every machine: an FMA was counted as 3 FLOP, where a fused multiply-add is one "
        "multiply and one add",
        look="the number of FLOP your product gives each FMA",
    ),
    Mistake(
        "SIMD lanes added",
        _lanes_added,
        "the number of fp32 lanes was added to another factor of the product: every lane of a SIMD FMA works at "
        "the same time, so the lanes multiply the peak, as the cores and the FMA units do",
        look="the + in your expression, and where simd_bits enters it",
    ),
    Mistake(
        "cores twice",
        _on_every_machine(_cores_twice),
        "cores-times the peak on every machine (right only where cores is 1): cores multiplies the product twice, "
        "where each core counts once",
        look="every place cores enters the product",
    ),
    Mistake(
        "SIMD lanes twice",
        _on_every_machine(_lanes_twice),
        "the lanes multiply the product twice: one FMA instruction works on each fp32 lane of the register once",
        look="every place simd_bits enters the product",
    ),
    Mistake(
        "clock twice",
        _on_every_machine(_clock_twice),
        "clock_ghz multiplies the product twice: the clock gives the cycles per second once",
        look="every place clock_ghz enters the product",
    ),
    Mistake(
        "log2 of the lanes",
        _log2_lanes,
        "the lanes were counted as a base-2 logarithm: a register of simd_bits bits holds simd_bits / 32 fp32 "
        "numbers side by side, one per lane, and the FMA works on all of them",
        look="where simd_bits enters the product",
    ),
    Mistake(
        "a factor divides",
        _divides,
        "one of cores, fma_units or the lanes divides the product: each of them multiplies the peak, since more "
        "cores, more FMA units and more lanes all work at the same time",
        look="every / in your expression: what does it divide by?",
    ),
    Mistake(
        "clock rounded",
        _clock_rounded,
        "the clock was rounded to whole GHz: clock_ghz is a fraction on some machines (2.6, 2.25), and every "
        "digit of it counts",
        look="what happens to clock_ghz before it enters the product",
    ),
]


def _cpu_factor_fma_as_1(c: int, g: float, b: int, u: int) -> float:
    return 0.5


def _cpu_factor_no_lanes(c: int, g: float, b: int, u: int) -> float:
    return 32 / b


def _cpu_factor_one_unit(c: int, g: float, b: int, u: int) -> float:
    return 1 / u


def _cpu_factor_one_core(c: int, g: float, b: int, u: int) -> float:
    return 1 / c


def _cpu_factor_ghz(c: int, g: float, b: int, u: int) -> float:
    return 1e-9


def _cpu_factor_binary_giga(c: int, g: float, b: int, u: int) -> float:
    return BINARY_GIGA


def _cpu_factor_units_twice(c: int, g: float, b: int, u: int) -> float:
    return u


def _cpu_slip_test(factor_a: Callable[..., float], factor_b: Callable[..., float]) -> Callable[[list[float]], bool]:
    def formula(c: int, g: float, b: int, u: int) -> float:
        return cpu_peak_reference(c, g, b, u) * factor_a(c, g, b, u) * factor_b(c, g, b, u)

    return _on_every_machine(formula)


#: Two of the usual slips of 00.2 at once; the first two are the same factor 2, named once.
CPU_SLIP_PAIRS = _slip_pairs(
    [
        ("a factor 2 missing", _cpu_factor_fma_as_1, "a factor 2 is missing (an FMA is 2 FLOP; an fp32 lane 32 bits)"),
        ("SIMD lanes left out", _cpu_factor_no_lanes, "simd_bits was left out (a SIMD FMA works on every lane)"),
        ("fma_units ignored", _cpu_factor_one_unit, "fma_units was left out"),
        ("cores ignored", _cpu_factor_one_core, "cores was left out"),
        ("clock in GHz", _cpu_factor_ghz, "the clock stayed in GHz (1 GHz is 1e9 cycles per second)"),
        ("binary giga", _cpu_factor_binary_giga, "a GHz was counted as 2**30 cycles per second, not 1e9"),
        ("fma_units twice", _cpu_factor_units_twice, "fma_units multiplies the product twice"),
    ],
    _cpu_slip_test,
)


@exercise("00.2", "a CPU's peak")
def check_cpu_peak_flops(cpu_peak_flops: Callable) -> None:
    """Check ``cpu_peak_flops(cores, clock_ghz, simd_bits, fma_units)`` on four machines."""
    answers = []
    for machine in CPU_MACHINES:
        got = run_student(cpu_peak_flops, *machine, what="your cpu_peak_flops")
        answers.append(as_number(got, "what cpu_peak_flops returned"))
    for got, machine in zip(answers, CPU_MACHINES):
        ref = cpu_peak_reference(*machine)
        if math.isclose(got, ref, rel_tol=REL_TOL):
            continue
        c, ghz, bits, u = machine
        message = f"cpu_peak_flops(cores={c}, clock_ghz={ghz}, simd_bits={bits}, fma_units={u}) is wrong"
        mistake = first_mistake(answers, [*CPU_MISTAKES, *CPU_SLIP_PAIRS])
        expected, shown = fmt_apart(ref, got)
        if mistake is not None:
            raise mistake_error(message, mistake, expected=expected, got=shown)
        raise CheckError(message, expected=expected, got=shown)
    passed("cpu_peak_flops: right on 4 machines")


# ----------------------------------------------------------------------------- 00.3 which size gets closer


def measuring_device(device: Any) -> torch.device:
    """The device a check may time on, or a CheckError saying what it needs."""
    from ..device import pick_device

    if device is None or not isinstance(device, (str, torch.device)):
        raise CheckError(
            f"device must name a device such as 'cpu' or measure_on, got {type(device).__name__}",
            hint="pass measure_on, as the check cell does",
            usage=True,
        )
    try:
        return pick_device(device)
    except RuntimeError as exc:
        raise CheckError(str(exc), hint="pass measure_on, as the check cell does", usage=True) from None


def matmul_rates(device: torch.device) -> dict[int, float]:
    """FLOP/s of a 16 x 16 and a 1024 x 1024 fp32 matmul on ``device``, under the check's time limit."""
    from ..hardware import measure_matmul

    rates = {}
    why = "two matrix products take a few seconds at most: is the device busy with other work?"
    try:
        with stopped_after(running.TIME_LIMIT, f"timing the matmuls on {device}", why):
            for n in (16, 1024):
                rates[n] = measure_matmul(n, "fp32", device, min_run_time=0.05).flops_per_s
    except TimeoutError as exc:
        raise CheckError(str(exc), mistake="timing stopped") from None
    return rates


#: A square size written as the product it names: "1024 x 1024", "1024x1024", "1024 × 1024", "1024*1024",
#: or with its side named, "n=1024".
_SQUARE = re.compile(r"(n\s*=\s*)?(\d+)(?:\s*[x×*]\s*(\d+))?", re.IGNORECASE)


def _whole_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()


def _side_of_square(prediction: Any) -> Any:
    """The side n of a size written as the square it names ("1024 x 1024", "n=1024", (1024, 1024), [1024]),
    else the answer as it came (the engine reads and refuses the rest)."""
    if isinstance(prediction, torch.Tensor):
        prediction = plain_tensor(prediction)  # a subclass's overrides cannot answer for its device or its values
    if isinstance(prediction, torch.Tensor) and prediction.dim() == 1 and prediction.device.type != "meta":
        prediction = prediction.detach().cpu().tolist()
    if isinstance(prediction, (list, tuple)) and len(prediction) in (1, 2):
        sides = [scalar_of(side) for side in plain(prediction)]
        if all(_whole_number(side) for side in sides) and sides[0] == sides[-1]:
            return int(sides[0])
        return prediction
    if not isinstance(prediction, str):
        return prediction
    match = _SQUARE.fullmatch(str.strip(prediction, " '\"`"))
    if match is None or not (match.group(1) or match.group(3)):
        return prediction  # a plain number as text: the engine reads it
    if match.group(3) and match.group(3) != match.group(2):
        return prediction  # not a square
    return int(match.group(2))


@exercise("00.3", "which size gets closer to the peak", prediction=True)
def check_matmul_size_prediction(prediction: Any, device: Any = "cpu") -> None:
    """Time a 16 and a 1024 fp32 matmul on ``device``, then judge ``prediction`` (16 or 1024)."""
    name = "which size gets closer to the peak"
    prediction = _side_of_square(prediction)
    prediction = read_prediction(name, prediction, (16, 1024))  # refused before anything is timed
    rates = matmul_rates(measuring_device(device))
    winner = max(rates, key=rates.get)
    why = "16 x 16 is 8 kFLOP: too little work to pay each call's fixed cost (dispatch, a kernel launch)"
    if winner == 16:  # a measurement disturbed by other work: say so rather than explain the opposite outcome
        why = (
            f"this run measured 16 x 16 at {rates[16]:.3g} FLOP/s and 1024 x 1024 at only {rates[1024]:.3g}, "
            "which a quiet device does not give (was another program busy?). Normally " + why
        )
    check_prediction(
        name,
        prediction,
        winner,
        choices=(16, 1024),
        why=why,
        mistakes={16: "small matrices do fit in the cache, but that is not what limits them."},
        ask="what does every call cost besides its arithmetic, and how much arithmetic does a 16 x 16 "
        "product have to spread that cost over",
    )


# ----------------------------------------------------------------------------- 00.4 the roofline

#: (intensity, peak, bandwidth): memory-bound, compute-bound, at the ridge (10 FLOP/byte), just below and just
#: above it; then an H100-like machine, whose ridge lies at 14 FLOP/byte: far below it, just below it, above it.
#: At 12 FLOP/byte one machine is compute-bound and the other memory-bound, so no fixed switch passes both.
#: Last, a machine whose ridge lies at 10.8 FLOP/byte, with 10.6 and 10.9 on either side of it: an intensity and a
#: ridge point compared as whole numbers (int() or round()) pick the wrong roof on one of them.
ROOFLINE_CASES = [
    (0.083, 1e12, 1e11),
    (1000.0, 1e12, 1e11),
    (10.0, 1e12, 1e11),
    (5.0, 1e12, 1e11),
    (12.0, 1e12, 1e11),
    (0.25, 6.7e13, 4.8e12),
    (12.0, 6.7e13, 4.8e12),
    (30.0, 6.7e13, 4.8e12),
    (10.6, 1.08e12, 1e11),
    (10.9, 1.08e12, 1e11),
]


def roofline_reference(intensity: float, peak: float, bandwidth: float) -> float:
    """The lower of the two roofs: the compute peak, and what memory can feed."""
    return min(peak, intensity * bandwidth)


def _follows(formula: Callable[[float, float, float], float]) -> Callable[[Sequence[float]], bool]:
    def test(answers: Sequence[float]) -> bool:
        for got, case in zip(answers, ROOFLINE_CASES):
            if not math.isclose(got, formula(*case), rel_tol=REL_TOL):
                return False
        return True

    return test


def _higher_roof(i: float, p: float, b: float) -> float:
    return max(p, i * b)


def _memory_only(i: float, p: float, b: float) -> float:
    return i * b


def _peak_only(i: float, p: float, b: float) -> float:
    return p


def _bandwidth_as_flops(i: float, p: float, b: float) -> float:
    return min(p, b)


def _intensity_inverted(i: float, p: float, b: float) -> float:
    return min(p, b / i)


def _bandwidth_in_numbers(i: float, p: float, b: float) -> float:
    """The bandwidth turned into fp32 numbers per second (bytes / 4) before the intensity, per byte, multiplies it."""
    return min(p, i * b / 4)


def _bandwidth_times_four(i: float, p: float, b: float) -> float:
    """The bandwidth multiplied by 4 bytes per fp32 number: a conversion the units do not ask for."""
    return min(p, i * b * 4)


def _memory_roof_converted(answers: Sequence[float]) -> bool:
    """Is the memory roof 4 times too low or too high on every case (bytes converted to fp32 numbers, or back)?"""
    return _follows(_bandwidth_in_numbers)(answers) or _follows(_bandwidth_times_four)(answers)


def _times_added(i: float, p: float, b: float) -> float:
    """One FLOP's compute time and its memory time added: 1 / (1 / peak + 1 / (intensity * bandwidth))."""
    return 1 / (1 / p + 1 / (i * b))


def _roofs_added(i: float, p: float, b: float) -> float:
    return p + i * b


def _one_roof_each(answers: Sequence[float]) -> bool:
    """Is every answer one of the two roofs (the wrong one somewhere): a switch at the wrong intensity?"""
    return all(
        math.isclose(got, p, rel_tol=REL_TOL) or math.isclose(got, i * b, rel_tol=REL_TOL)
        for got, (i, p, b) in zip(answers, ROOFLINE_CASES)
    )


def _whole_number_pick(i: float, p: float, b: float, whole: Callable[[float], int], peak_at_ridge: bool) -> float:
    """The roof picked by comparing the intensity with the ridge point, both made whole numbers by ``whole``."""
    intensity, ridge = whole(i), whole(p / b)
    above = intensity >= ridge if peak_at_ridge else intensity > ridge
    return p if above else i * b


def _whole_number_switch(answers: Sequence[float]) -> bool:
    """Is every answer the roof that int() or round() of the intensity and of the ridge point picks (with >= or >)?"""
    for whole in (int, round):
        for peak_at_ridge in (True, False):
            picks = [_whole_number_pick(i, p, b, whole, peak_at_ridge) for i, p, b in ROOFLINE_CASES]
            if all(math.isclose(got, pick, rel_tol=REL_TOL) for got, pick in zip(answers, picks)):
                return True
    return False


def _roofline_power_of_ten(answers: Sequence[float]) -> bool:
    """Is every answer the right FLOP/s times one and the same power of ten other than 1 (GFLOP/s, TFLOP/s)?"""
    references = [roofline_reference(*case) for case in ROOFLINE_CASES]
    first = answers[0] / references[0]
    same = all(math.isclose(got / ref, first, rel_tol=REL_TOL) for got, ref in zip(answers, references))
    return same and _power_of_ten_off(1.0)(first)


def _share_of_peak(answers: Sequence[float]) -> bool:
    """Is every answer the reached FLOP/s divided by the peak, as a fraction or in percent?"""
    for scale in (1.0, 100.0):
        shares = [scale * roofline_reference(i, p, b) / p for i, p, b in ROOFLINE_CASES]
        if all(math.isclose(got, share, rel_tol=REL_TOL) for got, share in zip(answers, shares)):
            return True
    return False


def _roof_labels(answers: Sequence[float]) -> bool:
    """Every answer is 0, 1 or 2: a label for the roof that limits the kernel, not the rate it reaches."""
    return all(answer in (0, 1, 2) for answer in answers)


def _ridge_point(i: float, p: float, b: float) -> float:
    return p / b


def _lower_intensity(i: float, p: float, b: float) -> float:
    return min(i, p / b)


def _intensity_over_bandwidth(i: float, p: float, b: float) -> float:
    return min(p, i / b)


def _peak_and_bandwidth_swapped(i: float, p: float, b: float) -> float:
    return min(b, i * p)


def _bandwidth_in_bits(i: float, p: float, b: float) -> float:
    return min(p, i * b * 8)


def _seconds_per_flop(i: float, p: float, b: float) -> float:
    return max(1 / p, 1 / (i * b))


#: What a function that names the limiting roof, instead of the rate, is told.
WHICH_ROOF = (
    "the function tells which roof limits the kernel (memory or compute); the prompt asks for the rate itself, "
    "the number of FLOP/s the kernel can reach under that roof"
)

ROOFLINE_MISTAKES = [
    Mistake("higher roof", _follows(_higher_roof), "that is the higher roof; the lower limit is the one that holds"),
    Mistake("no compute roof", _follows(_memory_only), "no kernel beats the compute peak, however much it computes"),
    Mistake("no memory roof", _follows(_peak_only), "with few FLOP per byte, memory cannot feed the peak"),
    Mistake(
        "intensity left out",
        _follows(_bandwidth_as_flops),
        "the memory roof compares bytes per second with FLOP per second: what memory can feed is bytes/s times "
        "the FLOP done per byte",
        look="the memory roof's expression",
    ),
    Mistake(
        "intensity inverted",
        _follows(_intensity_inverted),
        "intensity is FLOP per byte: bytes/s times FLOP/byte gives FLOP/s",
    ),
    Mistake(
        "bytes converted to numbers",
        _memory_roof_converted,
        "the memory roof is 4 times off: the bandwidth was converted between bytes and fp32 numbers (4 bytes each), "
        "but the intensity already counts FLOP per byte, so bytes/s times FLOP/byte is FLOP/s with no conversion",
        look="the memory roof's expression: check its units factor by factor",
    ),
    Mistake(
        "compute and memory times added",
        _follows(_times_added),
        "the time to compute and the time to move the bytes were added, as if the two ran one after the other: "
        "they overlap, so the slower of the two alone sets the rate, and the answer is one roof or the other",
        look="roofline: how the two limits are combined",
    ),
    Mistake(
        "roofs added",
        _follows(_roofs_added),
        "the two roofs were added: each is a limit on the same rate, the FLOP/s one kernel reaches, so they do not "
        "stack; the kernel reaches at most the lower of them",
        look="roofline: how the two limits are combined",
    ),
    Mistake(
        "ridge compared in whole numbers",
        _whole_number_switch,
        "each answer is one of the two roofs, but where the intensity lies just below or just above the ridge "
        "point, less than 1 FLOP/byte from it, the other roof was picked: the intensity and the ridge point were "
        "compared as whole numbers (an int() or round() cuts off their fractions), and both have fractions",
        look="roofline: what is done to the intensity and the ridge point before they are compared",
    ),
    Mistake(
        "switch at the wrong intensity",
        _one_roof_each,
        "each answer is one of the two roofs, but not the lower one at every intensity: the switch happens at "
        "the ridge point, where the two roofs meet, and that point moves from machine to machine",
        look="roofline: which roof is lower depends on intensity, peak and bandwidth together",
    ),
    Mistake(
        "share of the peak",
        _share_of_peak,
        why="each answer is the share of the peak the kernel reaches (a fraction, or a percent): the function "
        "returns the FLOP/s themselves, the rate the lower roof allows",
        look="what the return line divides by",
    ),
    Mistake(
        "unit",
        _roofline_power_of_ten,
        why="every answer is off by one and the same power of ten: the peak and the bandwidth come in FLOP/s and "
        "bytes/s, and the answer stays in FLOP/s, not GFLOP/s or TFLOP/s",
        look="a factor such as 1e9 or 1e12 in the return line",
    ),
    Mistake(
        "intensity divided by the bandwidth",
        _follows(_intensity_over_bandwidth),
        "the memory roof divides the intensity by the bandwidth: FLOP/byte divided by bytes/s is not a rate; "
        "which combination of the two gives FLOP/s?",
        look="the memory roof's expression: check its units factor by factor",
    ),
    Mistake(
        "peak and bandwidth swapped",
        _follows(_peak_and_bandwidth_swapped),
        "the peak and the bandwidth traded places: the intensity (FLOP per byte) turns bytes/s into FLOP/s, and "
        "the compute roof is the peak itself",
        look="which argument each roof uses",
    ),
    Mistake(
        "bytes converted to bits",
        _follows(_bandwidth_in_bits),
        "the memory roof is 8 times too high: the bandwidth was turned into bits per second, but the intensity "
        "counts FLOP per byte, so bytes/s times FLOP/byte is FLOP/s with no conversion",
        look="the memory roof's expression: check its units factor by factor",
    ),
    Mistake(
        "seconds per FLOP",
        _follows(_seconds_per_flop),
        "each answer is the time one FLOP takes, the inverse of the rate: the function returns FLOP per second",
        look="the return line: a rate, or its inverse?",
    ),
    Mistake(
        "ridge point returned",
        _follows(_ridge_point),
        "each answer is the machine's ridge point, peak / bandwidth, the same for every intensity: that is the "
        "intensity (FLOP/byte) at which the two roofs meet, while the function returns the FLOP/s a kernel of the "
        "given intensity reaches",
        look="the return line: does it use intensity, and is its unit FLOP/s?",
    ),
    Mistake(
        "intensity returned",
        _follows(_lower_intensity),
        "each answer is an intensity in FLOP/byte, the lower of the kernel's and the ridge point's: comparing "
        "them tells which roof limits the kernel, but the function returns that roof's rate, in FLOP/s",
        look="the return line: check its unit",
    ),
    Mistake("which roof returned", _roof_labels, WHICH_ROOF, look="the return line: a label, or a rate in FLOP/s?"),
]


def _as_label(value: Any) -> Any:
    """A word or a True/False a function returned (a label, not a rate), else None; a number in quotes is no label."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.numel() == 1:
        return bool(plain_tensor(value))
    label = plain(value)
    if isinstance(label, str):
        try:
            float(label)
        except ValueError:
            return label
        return None  # a number in quotes: as_number says so
    return label if isinstance(label, bool) else None


def _judge_roof_labels(results: list[Any]) -> None:
    """Answers that are words or True/False and differ from case to case name the limiting roof, not its rate."""
    __tracebackhide__ = True
    labels = [_as_label(result) for result in results]
    if any(label is None for label in labels) or len(set(labels)) < 2:
        return  # numbers, or one value whatever the case: as_number says what it needs
    i, p, b = ROOFLINE_CASES[0]
    shown = repr(labels[0]) if len(repr(labels[0])) <= 40 else describe(results[0])
    raise CheckError(
        f"roofline(intensity={i:g}, peak={p:g}, bandwidth={b:g}) returned {shown}, not a number (and "
        f"{', '.join(sorted({repr(label) for label in labels} - {repr(labels[0])}))[:80]} in other cases)",
        hint=WHICH_ROOF,
        mistake="which roof returned",
    )


@exercise("00.4", "the roofline")
def check_roofline(roofline: Callable) -> None:
    """Check ``roofline(intensity, peak, bandwidth)`` on both sides of the ridge point."""
    results = [run_student(roofline, *case, what="your roofline") for case in ROOFLINE_CASES]
    _judge_roof_labels(results)
    answers = [as_number(got, "what roofline returned") for got in results]
    for got, case in zip(answers, ROOFLINE_CASES):
        ref = roofline_reference(*case)
        if math.isclose(got, ref, rel_tol=REL_TOL):
            continue
        i, p, b = case
        message = f"roofline(intensity={i:g}, peak={p:g}, bandwidth={b:g}) is wrong"
        mistake = first_mistake(answers, ROOFLINE_MISTAKES)
        expected, shown = fmt_apart(ref, got)
        if mistake is not None:
            raise mistake_error(message, mistake, expected=expected, got=shown)
        raise CheckError(message, expected=expected, got=shown)
    passed(f"roofline: right on {len(ROOFLINE_CASES)} cases, on both sides of the ridge point")

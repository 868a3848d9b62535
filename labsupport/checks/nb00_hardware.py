"""Checks of notebook 00 (hardware); each reference is computed here, at check time."""
from __future__ import annotations

import math
from typing import Any, Callable

from .core import CheckError, check_prediction, describe, exercise, first_mistake, fmt, passed, read_prediction, run_student

_near = lambda x: lambda got: math.isclose(got, x, rel_tol=1e-6)  # noqa: E731

__all__ = ["check_titan_tensor_peak", "check_cpu_peak_flops", "check_matmul_size_prediction", "check_roofline"]


def _number(value: Any, name: str) -> float:
    if hasattr(value, "item") and getattr(value, "numel", lambda: getattr(value, "size", 0))() == 1:
        value = value.item()   # a 0-d tensor or a numpy scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CheckError(f"{name} must be a finite number", expected="an int or float", got=describe(value),
                         hint="did the cell that sets it run, and does your function end with `return`?")
    return float(value)


@exercise("00.1", "the tensor cores' peak")
def check_titan_tensor_peak(titan_tensor_peak: Any) -> None:
    """Check the Titan RTX's dense fp16 tensor-core peak (FLOP/s). Example: ``check_titan_tensor_peak(x)``"""
    from ..hardware import TITAN_RTX as t
    got = _number(titan_tensor_peak, "titan_tensor_peak")
    per_clock = t["sms"] * t["tensor_cores_per_sm"] * t["fp16_fma_per_tensor_core_per_cycle"] * 2
    ref, fp32 = per_clock * t["boost_clock_ghz"] * 1e9, t["sms"] * t["cuda_cores_per_sm"] * 2 * t["boost_clock_ghz"] * 1e9
    if not math.isclose(got, ref, rel_tol=1e-3):
        raise CheckError("titan_tensor_peak is not the Titan RTX's tensor-core peak", expected=f"{fmt(ref)} FLOP/s",
                         got=f"{fmt(got)} FLOP/s", hint=first_mistake(got, [
            (_near(ref / 2), "exactly half: a multiply-add is 2 FLOP; Turing has 8 tensor cores per SM (Hopper: 4)"),
            (_near(per_clock * t["base_clock_ghz"] * 1e9), "that uses the base clock; peak figures use the boost clock"),
            (_near(ref / t["sms"]), "that is one SM: the chip has 72 of them"),
            (lambda g: min(abs(g * s / ref - 1) for s in (1e9, 1e12)) < 1e-3, "give FLOP/s, not GFLOP/s or TFLOP/s")]))
    passed(f"Titan RTX tensor cores: {fmt(ref / 1e12)} TFLOP/s, {ref / fp32:.0f}x its CUDA cores' fp32")


@exercise("00.2", "a CPU's peak")
def check_cpu_peak_flops(cpu_peak_flops: Callable) -> None:
    """Check ``cpu_peak_flops(cores, clock_ghz, simd_bits, fma_units)``. Example: ``check_cpu_peak_flops(f)``"""
    for c, ghz, bits, u in [(1, 2.0, 128, 4), (2, 2.6, 512, 2), (8, 3.5, 256, 2), (64, 2.25, 256, 2)]:
        got = _number(run_student(cpu_peak_flops, c, ghz, bits, u, what="your cpu_peak_flops"), "peak FLOP/s")
        ref = c * ghz * 1e9 * u * bits / 32 * 2
        if not math.isclose(got, ref, rel_tol=1e-6):
            raise CheckError(f"cpu_peak_flops(cores={c}, clock_ghz={ghz}, simd_bits={bits}, fma_units={u}) is wrong",
                             expected=fmt(ref), got=fmt(got), hint=first_mistake(got, [
                (_near(ref / 2), "exactly half: an FMA is 2 FLOP, and an fp32 lane is 32 bits (not 64)"),
                (_near(ref * 32), "simd_bits is a width in bits: one fp32 lane is 32 of them"),
                (_near(ref / u), "each core has fma_units FMA units working side by side"),
                (_near(ref / 1e9), "clock_ghz is in GHz: a cycle per second is 1 Hz")]))
    passed("cpu_peak_flops: right on 4 machines")


@exercise("00.3", "which size gets closer to the peak")
def check_matmul_size_prediction(prediction: Any, device: Any = "cpu") -> None:
    """Time a 16 and a 1024 fp32 matmul on ``device``, judge ``prediction``. Example: ``check_...(16)``"""
    from ..hardware import measure_matmul
    prediction = read_prediction("which size gets closer to the peak", prediction, (16, 1024))  # before timing
    rates = {n: measure_matmul(n, "fp32", device, min_run_time=0.05).flops_per_s for n in (16, 1024)}
    check_prediction("which size gets closer to the peak", prediction, max(rates, key=rates.get), choices=(16, 1024),
                     why="16 x 16 is 8 kFLOP: too little work to pay each call's fixed cost (dispatch, a kernel launch)",
                     mistakes={16: "small matrices do fit in the cache, but that is not what limits them."})


@exercise("00.4", "the roofline")
def check_roofline(roofline: Callable) -> None:
    """Check ``roofline(intensity, peak, bandwidth)`` both sides of the ridge. Example: ``check_roofline(f)``"""
    cases = [(0.083, 1e12, 1e11), (1000.0, 1e12, 1e11), (10.0, 1e12, 1e11), (0.25, 6.7e13, 4.8e12)]
    got = [_number(run_student(roofline, *c, what="your roofline"), "attainable FLOP/s") for c in cases]
    ref = [min(p, i * b) for i, p, b in cases]
    k = next((k for k, (g, r) in enumerate(zip(got, ref)) if not math.isclose(g, r, rel_tol=1e-6)), None)
    if k is not None:
        pattern = lambda f: lambda g: all(math.isclose(x, f(*c), rel_tol=1e-6) for x, c in zip(g, cases))  # noqa: E731
        raise CheckError(f"roofline(intensity={cases[k][0]:g}, peak={cases[k][1]:g}, bandwidth={cases[k][2]:g})"
                         " is wrong", expected=fmt(ref[k]), got=fmt(got[k]), hint=first_mistake(got, [
            (pattern(lambda i, p, b: max(p, i * b)), "that is the higher roof; the lower limit is the one that holds"),
            (pattern(lambda i, p, b: i * b), "no kernel beats the compute peak, however much it computes per byte"),
            (pattern(lambda i, p, b: p), "with few FLOP per byte, memory cannot feed the peak")]))
    passed(f"roofline: right on {len(cases)} cases, on both sides of the ridge point")

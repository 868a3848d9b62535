"""Notebook 00: what the machine is made of (:func:`cpu_info`, :func:`gpu_info`) and how
fast it goes (:func:`time_per_call`, :func:`matmul_sweep`). Peaks use the vendor's clock.

Example:
    >>> import labsupport as lab
    >>> lab.measure_matmul(64, "fp32", "cpu", min_run_time=0.01).flops_per_s > 0
    True
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .checks.running import stopped_after
from .timing import TOO_SLOW, as_device, timing_limit

__all__ = ["TITAN_RTX", "cpu_info", "gpu_info", "time_per_call", "measure_matmul", "matmul_sweep", "format_rate"]

#: The lecture's GPU, NVIDIA Titan RTX (Turing TU102), from NVIDIA's Turing whitepaper.
TITAN_RTX = {
    "name": "NVIDIA Titan RTX",
    "sms": 72,
    "cuda_cores_per_sm": 64,
    "tensor_cores_per_sm": 8,
    "fp16_fma_per_tensor_core_per_cycle": 64,
    "base_clock_ghz": 1.35,
    "boost_clock_ghz": 1.77,
}

_PRECISIONS = {
    "fp32": (torch.float32, "highest"),
    "tf32": (torch.float32, "high"),
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
}
# Per SM, by compute capability: fp32 CUDA cores, and dense tensor-core FLOP per cycle
# (fp16/bf16 with fp32 accumulation; tf32 is half of it). NVIDIA's architecture whitepapers.
_CORES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128}
_TENSOR_FLOP_PER_SM = {(7, 0): 1024, (7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 9): 1024, (9, 0): 4096}
# Clock of NVIDIA's datasheet tensor figures (989 TFLOP/s bf16 dense on H100/H200 SXM), by name.
_TENSOR_CLOCK_GHZ = [("H100 PCIe", 1.62), ("H100", 1.83), ("H200", 1.83), ("A100", 1.41)]
# _TENSOR_FLOP_PER_SM is the workstation and data-center boards' rate (RTX A6000, A40, A10, RTX 6000 Ada,
# L4, L40S, T4, Titan RTX). GeForce boards, and the L40 (not the L40S), run fp16/bf16/tf32 tensor math
# with fp32 accumulation, PyTorch's, at half of it (fp16 accumulation keeps the full rate): the RTX
# 4090's dense bf16 is 165 TFLOP/s, not 330. Sources: NVIDIA's whitepapers "NVIDIA Ada GPU
# Architecture" (Ada Lovelace: RTX 4090), "NVIDIA Ampere GA102 GPU Architecture" (RTX 3090) and
# "NVIDIA Turing GPU Architecture" (RTX 2080 Ti), each giving fp32- and fp16-accumulate rates; the
# NVIDIA L40 and L40S datasheets.
_HALF_RATE_TENSOR = re.compile(r"GeForce|RTX [2-5]0[5-9]0|\bL40\b")


#: The CPU as the OS and torch describe it; ``fma_bits``: the FMA datapath's width, which on
#: some AMD cores is narrower than the registers (:func:`_amd_fma_bits`).
CpuInfo = namedtuple("CpuInfo", "model torch_threads capability simd_bits fma_bits clock_ghz clock_source bf16_factor")
#: One size of a sweep: median seconds per call and FLOP/s.
Measurement = namedtuple("Measurement", "size precision seconds flops_per_s")


def _amd_fma_bits(family: int, model: int, simd: int) -> int:
    """Width of an AMD core's FMA datapath. Zen 1 and Zen+ (family 23, models below 0x30) have 128-bit
    FMA units and run a 256-bit AVX2 instruction as two halves (older cores: 128 bits at most); Zen 2
    and 3 have 256-bit units and no AVX-512; Zen 4 (family 25, like Zen 3) runs a 512-bit AVX-512
    instruction as two 256-bit halves; desktop and server Zen 5 (family 26) have 512-bit units.
    Example:
    >>> _amd_fma_bits(23, 1, 256), _amd_fma_bits(23, 0x71, 256), _amd_fma_bits(25, 0x11, 512)
    (128, 256, 256)
    """
    if family < 23 or (family == 23 and model < 0x30):
        return min(simd, 128)
    return min(simd, 256) if family <= 25 else simd


def cpu_info(cpuinfo: str | None = None, capability: str | None = None) -> CpuInfo:
    """Read ``/proc/cpuinfo``, cpufreq's maximum (boost) clock and torch's vector ISA. Example:
    >>> cpu_info().simd_bits in (128, 256, 512)
    True
    """
    read = lambda path: Path(path).read_text() if Path(path).is_file() else ""  # noqa: E731
    text = read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    fields: dict[str, list[str]] = {}
    for key, sep, value in (line.partition(":") for line in text.splitlines()):
        if sep:
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    first = lambda key, default="": (fields.get(key) or [default])[0]  # noqa: E731
    flags = set((first("flags") or first("features")).split())
    cap = (capability or torch.backends.cpu.get_cpu_capability()).upper()
    simd = 512 if "avx512f" in flags or cap.startswith("AVX512") else 256 if "avx2" in flags or cap == "AVX2" else 128
    family, model = (int(v) if v.isdigit() else 0 for v in (first("cpu family", "0"), first("model", "0")))
    amd = first("vendor_id") == "AuthenticAMD"
    zen = amd and family <= 25
    max_khz = read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip() if cpuinfo is None else ""
    if max_khz.isdigit():
        clock, source = int(max_khz) / 1e6, "cpufreq maximum (boost)"
    elif zen and first("cpu family") == "25":  # a VM hiding cpufreq on Zen 3/4: EPYC 7003/9004 boost
        clock, source = 3.7, "hidden here; 3.7 GHz, the boost of most AMD EPYC 7003/9004 parts"
    elif fields.get("cpu mhz"):
        clock, source = max(map(float, fields["cpu mhz"])) / 1e3, "/proc/cpuinfo (current, not boost)"
    else:
        clock, source = None, "unknown"
    bf16 = 16 if "amx_bf16" in flags else 2 if "avx512_bf16" in flags else 1
    return CpuInfo(
        first("model name", "unknown"),
        torch.get_num_threads(),
        cap,
        simd,
        _amd_fma_bits(family, model, simd) if amd else simd,
        clock,
        source,
        bf16,
    )


@dataclass
class GpuInfo:
    """One CUDA GPU: SMs, cores, the boost clock (fp32 figures) and the datasheet tensor clock."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    memory_gib: float
    clock_ghz: float | None
    tensor_clock_ghz: float | None

    def peak(self, precision: str = "fp32") -> float | None:
        """Dense peak FLOP/s for ``fp32``/``tf32``/``bf16``/``fp16``, tensor math accumulating in
        fp32 as PyTorch's does (None where unknown)."""
        cores, tensor = _CORES_PER_SM.get(self.compute_capability), _TENSOR_FLOP_PER_SM.get(self.compute_capability)
        if precision == "fp32":
            return None if cores is None or self.clock_ghz is None else self.sm_count * cores * 2 * self.clock_ghz * 1e9
        if (
            tensor is None
            or self.tensor_clock_ghz is None
            or (self.compute_capability < (8, 0) and precision != "fp16")
        ):
            return None
        rate = (0.5 if precision == "tf32" else 1) * (0.5 if _HALF_RATE_TENSOR.search(self.name) else 1)
        return self.sm_count * tensor * rate * self.tensor_clock_ghz * 1e9


def gpu_info(index: int = 0) -> GpuInfo | None:
    """Describe CUDA GPU ``index`` (None without one). Example:
    >>> gpu_info() is None or gpu_info().sm_count > 0
    True
    """
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(index)
    boost = getattr(p, "clock_rate", 0) / 1e6 or None
    tensor = next((ghz for key, ghz in _TENSOR_CLOCK_GHZ if key in p.name), boost)
    return GpuInfo(p.name, (p.major, p.minor), p.multi_processor_count, p.total_memory / 2**30, boost, tensor)


def time_per_call(fn: Callable[[], object], device: torch.device | str = "cpu", min_run_time: float = 0.1) -> float:
    """Median seconds per call of ``fn()``: 3 warm-up calls, then synchronised blocks of
    about 15 ms, on a GPU each after a 50 ms pause (else its power limit lowers the clock).
    Example:
        >>> time_per_call(lambda: torch.ones(100).sum(), "cpu", min_run_time=0.01) > 0
        True
    """
    if not callable(fn):
        raise TypeError(f"time_per_call needs a function of no arguments (a lambda: ...), got {type(fn).__name__}")
    cuda = as_device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def block(k: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(k):
            fn()
        sync()
        return (time.perf_counter() - start) / k

    times: list[float] = []
    with stopped_after(timing_limit(min_run_time), "time_per_call(fn)", TOO_SLOW):
        k = max(1, math.ceil(0.015 / max(1e-7, min(block(1) for _ in range(3)))))
        while sum(times) * k < min_run_time or len(times) < 3:
            time.sleep(0.05 if cuda else 0)
            times.append(block(k))
    return statistics.median(times)


def measure_matmul(
    n: int, precision: str = "fp32", device: torch.device | str = "cpu", *, min_run_time: float = 0.1
) -> Measurement:
    """Time ``a @ b`` for random (n, n) matrices drawn on the CPU with seed 0."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number >= 1 (the matrices' size), got {n!r:.40}")
    if not isinstance(precision, str) or precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, _PRECISIONS))}, got {precision!r:.40}")
    dtype, setting = _PRECISIONS[precision]
    device, g = as_device(device), torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device, dtype) for _ in range(2))
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(setting or old)
    try:
        seconds = time_per_call(lambda: a @ b, device, min_run_time)
    finally:
        torch.set_float32_matmul_precision(old)
    return Measurement(n, precision, seconds, 2.0 * n**3 / seconds)


def matmul_sweep(
    sizes: Sequence[int],
    precision: str = "fp32",
    device: torch.device | str = "cpu",
    *,
    min_run_time: float = 0.05,
    max_call_s: float = 0.25,
) -> list[Measurement]:
    """:func:`measure_matmul` for growing sizes; stops before a call predicted (n^3) over
    ``max_call_s``. Example:
        >>> [m.size for m in matmul_sweep([16, 32], min_run_time=0.01)]
        [16, 32]
    """
    if not isinstance(sizes, (list, tuple, range)):
        raise TypeError(f"sizes must be a list of matrix sizes such as [256, 512, 1024], got {type(sizes).__name__}")
    out: list[Measurement] = []
    for n in sorted(sizes):
        if out and out[-1].seconds * (n / out[-1].size) ** 3 > max_call_s:
            break
        out.append(measure_matmul(n, precision, device, min_run_time=min_run_time))
    return out


def format_rate(value: float | None, unit: str = "FLOP/s") -> str:
    """3 significant digits and an SI prefix. Example:
    >>> format_rate(2.5e9, "B/s"), format_rate(None)
    ('2.5 GB/s', 'unknown')
    """
    if value is None:
        return "unknown"
    try:
        value = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"format_rate needs a number (or None), got {type(value).__name__}") from None
    scales = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
    scale, prefix = next((s, p) for s, p in scales if abs(value) >= s or s == 1.0)
    return f"{value / scale:.3g} {prefix}{unit}"

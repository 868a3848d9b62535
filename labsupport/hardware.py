"""What is inside the machine, what it could do at best, and what it does.

Three kinds of helper, in the order notebook 00 uses them:

* **inventory**: :func:`cpu_info` (cores, SIMD width, clock, read from
  ``/proc/cpuinfo`` and ``torch.backends.cpu.get_cpu_capability()``) and
  :func:`gpu_info` (streaming multiprocessors, cores per SM and clock, from
  ``torch.cuda.get_device_properties``);
* **peak arithmetic**: :func:`peak_flops` = cores x clock x FLOP per cycle, the
  lecture's back-of-the-envelope formula (:data:`TITAN_RTX` is its example);
* **measurement**: :func:`measure_matmul`, :func:`matmul_sweep`,
  :func:`measure_elementwise` and :func:`measure_transfer`, all timed with
  ``torch.utils.benchmark`` (warm-up, GPU synchronisation and repeats handled there).

Peaks are estimates from public architecture figures: the notebook states its
verdicts as ratios ``achieved / peak`` and never hard-codes a measured number.

Example:
    >>> import labsupport as lab
    >>> lab.peak_flops(cores=4608, clock_ghz=1.77, flops_per_cycle=2) / 1e12   # Titan RTX, fp32
    16.31232
    >>> r = lab.measure_matmul(64, "fp32", "cpu", min_run_time=0.01)
    >>> r.flops_per_s > 0
    True
"""
from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch

__all__ = ["CpuInfo", "GpuInfo", "Measurement", "TITAN_RTX", "PRECISIONS", "cpu_info", "gpu_info",
           "peak_flops", "matmul_flops", "matmul_intensity", "measure_matmul", "matmul_sweep",
           "measure_elementwise", "measure_transfer", "format_rate"]

#: The lecture's worked example: NVIDIA Titan RTX (Turing), fp32 on CUDA cores.
TITAN_RTX = {"name": "NVIDIA Titan RTX", "cuda_cores": 4608, "boost_clock_ghz": 1.77,
             "flops_per_cycle_per_core": 2}

#: Precision name -> (storage dtype, float32 matmul precision setting or None).
#: "tf32" is float32 storage with TensorFloat-32 tensor cores allowed (GPUs from Ampere on).
PRECISIONS: dict[str, tuple[torch.dtype, str | None]] = {
    "fp32": (torch.float32, "highest"),
    "tf32": (torch.float32, "high"),
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
}

# Per streaming multiprocessor, by compute capability (major, minor): fp32 CUDA
# cores, and dense tensor-core FLOP per cycle for fp16/bf16 (fp32 accumulate)
# and tf32. From NVIDIA's architecture whitepapers (datacenter/workstation
# parts; GeForce cards run fp32-accumulate tensor math at half this rate).
_FP32_CORES_PER_SM = {(6, 0): 64, (6, 1): 128, (6, 2): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64,
                      (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128,
                      (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128}
_TENSOR_FLOPS_PER_SM_CYCLE = {
    # (major, minor): {"fp16": ..., "bf16": ..., "tf32": ...}
    (7, 0): {"fp16": 1024},
    (7, 2): {"fp16": 1024},
    (7, 5): {"fp16": 1024},
    (8, 0): {"fp16": 2048, "bf16": 2048, "tf32": 1024},
    (8, 6): {"fp16": 1024, "bf16": 1024, "tf32": 512},
    (8, 7): {"fp16": 1024, "bf16": 1024, "tf32": 512},
    (8, 9): {"fp16": 1024, "bf16": 1024, "tf32": 512},
    (9, 0): {"fp16": 4096, "bf16": 4096, "tf32": 2048},
    (10, 0): {"fp16": 8192, "bf16": 8192, "tf32": 4096},
}


def peak_flops(*, cores: int, clock_ghz: float, flops_per_cycle: float) -> float:
    """Peak FLOP/s = ``cores`` x ``clock_ghz`` x 1e9 x ``flops_per_cycle`` (per core).

    One fused multiply-add (FMA) counts as 2 FLOP, so a core that finishes one
    FMA per cycle has ``flops_per_cycle=2``; a SIMD core multiplies that by its
    lanes and its number of FMA units.

    Example:
        >>> peak_flops(cores=2, clock_ghz=1.0, flops_per_cycle=32) / 1e9
        64.0
    """
    for name, value in (("cores", cores), ("clock_ghz", clock_ghz), ("flops_per_cycle", flops_per_cycle)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(cores) * float(clock_ghz) * 1e9 * float(flops_per_cycle)


# ----------------------------------------------------------------------------- CPU

@dataclass
class CpuInfo:
    """The CPU as far as the operating system and torch tell (see :func:`cpu_info`).

    ``flops_per_cycle`` is per core for fp32: FMA units x fp32 lanes x 2.
    ``bf16_factor`` multiplies it for bf16 matmuls (2 with AVX512-BF16 dot
    products, 16 with AMX tiles, else 1: bf16 is converted to fp32).

    Example:
        >>> info = cpu_info()
        >>> info.flops_per_cycle == info.fma_units * (info.fma_bits // 32) * (2 if info.fma else 1)
        True
    """

    model: str
    logical_cpus: int
    usable_cpus: int
    physical_cores: int
    torch_threads: int
    capability: str
    simd_bits: int
    fma: bool
    fma_units: int
    fma_bits: int
    clock_ghz: float | None
    clock_source: str
    bf16_factor: int
    flags: frozenset = field(default_factory=frozenset, repr=False)

    @property
    def fp32_lanes(self) -> int:
        """fp32 numbers in one SIMD register."""
        return self.simd_bits // 32

    @property
    def flops_per_cycle(self) -> int:
        """Peak fp32 FLOP per cycle per core: FMA units x lanes per FMA x 2."""
        return self.fma_units * (self.fma_bits // 32) * (2 if self.fma else 1)

    def peak(self, precision: str = "fp32", cores: int | None = None) -> float | None:
        """Estimated peak FLOP/s over ``cores`` (default: the cores torch uses).

        ``None`` when the clock is unknown.
        """
        if self.clock_ghz is None:
            return None
        cores = self.torch_threads if cores is None else cores
        factor = self.bf16_factor if precision == "bf16" else 1
        return peak_flops(cores=cores, clock_ghz=self.clock_ghz,
                          flops_per_cycle=self.flops_per_cycle * factor)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo_fields(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), []).append(value.strip())
    return out


def _simd_bits(capability: str, flags: frozenset) -> int:
    cap = capability.upper()
    if cap.startswith("AVX512") or "avx512f" in flags:
        return 512
    if cap.startswith("AVX2") or "avx2" in flags:
        return 256
    match = re.match(r"SVE(\d+)", cap)
    if match:
        return int(match.group(1))
    return 128  # SSE2 on x86-64, NEON on Arm: both 128-bit


def cpu_info(cpuinfo_text: str | None = None, capability: str | None = None) -> CpuInfo:
    """Read the CPU's cores, SIMD width and clock.

    Sources: ``/proc/cpuinfo`` (model, flags, physical cores, current MHz),
    ``/sys/.../cpufreq/cpuinfo_max_freq`` (maximum clock) and
    ``torch.backends.cpu.get_cpu_capability()`` (the widest vector instructions
    torch's kernels use here, e.g. ``AVX512``, ``AVX2``, ``DEFAULT``). The two
    arguments exist for tests. Where the operating system does not say (macOS,
    Windows), fields fall back to ``os.cpu_count()`` and ``clock_ghz=None``.

    The FMA-unit count is an assumption (2 per core, true of recent x86 server
    and desktop cores); AMD Zen 4 runs 512-bit instructions as two 256-bit
    halves, so its FMA width counts as 256 bits.

    Example:
        >>> info = cpu_info()
        >>> info.simd_bits in (128, 256, 512, 1024, 2048) and info.torch_threads >= 1
        True
    """
    text = _read("/proc/cpuinfo") if cpuinfo_text is None else cpuinfo_text
    fields = _cpuinfo_fields(text)
    if capability is None:
        get_cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        capability = get_cap() if get_cap is not None else "unknown"
    flags = frozenset((fields.get("flags") or fields.get("features") or [""])[0].split())
    model = (fields.get("model name") or fields.get("cpu model") or [platform.processor() or "unknown"])[0]
    logical = len(fields.get("processor", [])) or os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    pairs = set(zip(fields.get("physical id", []), fields.get("core id", [])))
    physical = len(pairs) or logical
    simd = _simd_bits(capability, flags)
    fma = "fma" in flags or "asimd" in flags or platform.machine().lower() in ("arm64", "aarch64")
    vendor = (fields.get("vendor_id") or [""])[0]
    family = (fields.get("cpu family") or ["0"])[0]
    fma_bits = simd
    if vendor == "AuthenticAMD" and family.isdigit() and int(family) <= 25:
        fma_bits = min(simd, 256)  # Zen 1-4: at most 256-bit FMA datapaths
    max_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        clock, source = int(max_khz) / 1e6, "cpufreq maximum"
    elif fields.get("cpu mhz"):
        clock, source = max(float(v) for v in fields["cpu mhz"]) / 1e3, "/proc/cpuinfo (current)"
    else:
        clock, source = None, "unknown"
    if "amx_bf16" in flags:
        bf16 = 16
    elif "avx512_bf16" in flags:
        bf16 = 2
    else:
        bf16 = 1
    return CpuInfo(model=model, logical_cpus=logical, usable_cpus=usable, physical_cores=physical,
                   torch_threads=torch.get_num_threads(), capability=capability, simd_bits=simd,
                   fma=fma, fma_units=2, fma_bits=fma_bits, clock_ghz=clock, clock_source=source,
                   bf16_factor=bf16, flags=flags)


# ----------------------------------------------------------------------------- GPU

@dataclass
class GpuInfo:
    """One CUDA GPU (see :func:`gpu_info`). Peaks are ``None`` where the
    architecture is not in this module's table or the clock is unknown.

    Example:
        >>> h100 = GpuInfo("H100", (9, 0), 132, 128, 1.98, "datasheet", 80.0,
        ...                {"bf16": 4096, "fp16": 4096, "tf32": 2048})
        >>> round(h100.peak("fp32") / 1e12, 1), round(h100.peak("bf16") / 1e12)
        (66.9, 1071)
    """

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    fp32_cores_per_sm: int | None
    clock_ghz: float | None
    clock_source: str
    memory_gib: float
    tensor_flops_per_sm_cycle: dict[str, int]

    @property
    def cuda_cores(self) -> int | None:
        """fp32 CUDA cores on the chip: SMs x cores per SM."""
        return None if self.fp32_cores_per_sm is None else self.sm_count * self.fp32_cores_per_sm

    def peak(self, precision: str = "fp32") -> float | None:
        """Estimated dense peak FLOP/s: CUDA cores x clock x 2 for ``fp32``,
        SMs x tensor-core FLOP per SM-cycle x clock for ``tf32``/``bf16``/``fp16``."""
        if self.clock_ghz is None:
            return None
        if precision == "fp32":
            if self.cuda_cores is None:
                return None
            return peak_flops(cores=self.cuda_cores, clock_ghz=self.clock_ghz, flops_per_cycle=2)
        per_sm = self.tensor_flops_per_sm_cycle.get(precision)
        if per_sm is None:
            return None
        return peak_flops(cores=self.sm_count, clock_ghz=self.clock_ghz, flops_per_cycle=per_sm)


def _nvidia_smi_max_clock_mhz(index: int) -> float | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-i", str(index), "--query-gpu=clocks.max.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        return float(out.splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gpu_info(index: int = 0) -> GpuInfo | None:
    """Describe CUDA GPU ``index`` from ``torch.cuda.get_device_properties``;
    ``None`` when there is no CUDA GPU.

    The clock is the properties' ``clock_rate`` (the maximum SM clock, kHz) when
    this torch has it, else ``nvidia-smi``'s maximum SM clock.

    Example:
        >>> info = gpu_info()
        >>> info is None or info.sm_count > 0
        True
    """
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    props = torch.cuda.get_device_properties(index)
    cc = (props.major, props.minor)
    khz = getattr(props, "clock_rate", None)
    if khz:
        clock, source = khz / 1e6, "device properties"
    else:
        mhz = _nvidia_smi_max_clock_mhz(index)
        clock, source = (mhz / 1e3, "nvidia-smi max SM clock") if mhz else (None, "unknown")
    return GpuInfo(name=props.name, compute_capability=cc, sm_count=props.multi_processor_count,
                   fp32_cores_per_sm=_FP32_CORES_PER_SM.get(cc), clock_ghz=clock,
                   clock_source=source, memory_gib=props.total_memory / 2**30,
                   tensor_flops_per_sm_cycle=dict(_TENSOR_FLOPS_PER_SM_CYCLE.get(cc, {})))


# ----------------------------------------------------------------------------- measurement

@dataclass
class Measurement:
    """One timed operation: its size, precision, median seconds per call, and
    the work and bytes it does per call.

    Example:
        >>> m = Measurement("matmul", 1000, "fp32", "cpu", 0.02, 2e9, 1.2e7)
        >>> m.flops_per_s / 1e9, round(m.intensity)
        (100.0, 167)
    """

    op: str
    size: int
    precision: str
    device: str
    seconds: float
    flops: float
    bytes: float

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOP per byte moved to or from memory."""
        return self.flops / self.bytes if self.bytes else float("inf")


def matmul_flops(n: int) -> int:
    """FLOP of an (n, n) @ (n, n) product: n*n outputs, each n multiplies and n adds.

    Example:
        >>> matmul_flops(1000)
        2000000000
    """
    return 2 * n ** 3


def matmul_intensity(n: int, bytes_per_element: int) -> float:
    """FLOP per byte of an (n, n) matmul that reads A and B and writes C once: 2n^3 / (3 n^2 b).

    Example:
        >>> round(matmul_intensity(1024, 4), 1)
        170.7
    """
    return matmul_flops(n) / (3 * n * n * bytes_per_element)


@contextlib.contextmanager
def _quiet_benchmark_import() -> Iterator[None]:
    # torch.utils.benchmark imports torch.utils.cpp_extension, which logs a
    # warning about CUDA_HOME on CUDA builds of torch running without a GPU.
    # It says nothing about timing, so it is silenced for that import only.
    logger = logging.getLogger("torch.utils.cpp_extension")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


with _quiet_benchmark_import():  # imported once here, quietly; later imports reuse it
    from torch.utils import benchmark


def _timer(stmt_fn, label: str):
    return benchmark.Timer(stmt="fn()", globals={"fn": stmt_fn}, label=label)


@contextlib.contextmanager
def _matmul_precision(setting: str | None) -> Iterator[None]:
    if setting is None:
        yield
        return
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(setting)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def _check_precision(precision: str) -> tuple[torch.dtype, str | None]:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def measure_matmul(n: int, precision: str = "fp32", device: torch.device | str = "cpu", *,
                   min_run_time: float = 0.1, seed: int = 0) -> Measurement:
    """Time ``a @ b`` for random (n, n) matrices; median of repeated runs.

    ``precision`` is ``"fp32"``, ``"tf32"`` (fp32 storage, TensorFloat-32
    tensor cores allowed), ``"bf16"`` or ``"fp16"``. The data is drawn on the
    CPU and moved, so every device multiplies the same numbers.

    Example:
        >>> m = measure_matmul(32, "bf16", min_run_time=0.01)
        >>> (m.size, m.precision, m.flops)
        (32, 'bf16', 65536.0)
    """
    dtype, setting = _check_precision(precision)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    device = torch.device(device)
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    with _matmul_precision(setting):
        timer = _timer(lambda: torch.mm(a, b), f"matmul {n} {precision}")
        seconds = float(timer.blocked_autorange(min_run_time=min_run_time).median)
    return Measurement("matmul", n, precision, device.type, seconds, float(matmul_flops(n)),
                       float(3 * n * n * a.element_size()))


def matmul_sweep(sizes: Sequence[int], precision: str = "fp32", device: torch.device | str = "cpu", *,
                 min_run_time: float = 0.05, max_call_s: float = 0.25) -> list[Measurement]:
    """:func:`measure_matmul` for each size in increasing order; stops before a
    size whose product would take over ``max_call_s`` seconds per call
    (predicted from the last one, assuming n^3 growth), so a slow precision on
    a slow machine cannot stall the notebook.

    Example:
        >>> [m.size for m in matmul_sweep([16, 32], min_run_time=0.01)]
        [16, 32]
    """
    results: list[Measurement] = []
    for n in sorted(sizes):
        if results and results[-1].seconds * (n / results[-1].size) ** 3 > max_call_s:
            break
        results.append(measure_matmul(n, precision, device, min_run_time=min_run_time))
    return results


def measure_elementwise(numel: int, device: torch.device | str = "cpu", *, precision: str = "fp32",
                        min_run_time: float = 0.1) -> Measurement:
    """Time ``c = a + b`` over ``numel`` elements (into a preallocated ``c``).

    One FLOP per element against three elements moved (two reads, one
    write): about 0.08 FLOP per byte in fp32, so its speed is set by memory
    bandwidth, not arithmetic.

    Example:
        >>> m = measure_elementwise(1024, min_run_time=0.01)
        >>> m.flops, m.bytes
        (1024.0, 12288.0)
    """
    dtype, _ = _check_precision(precision)
    device = torch.device(device)
    a = torch.ones(numel, dtype=dtype, device=device)
    b = torch.ones(numel, dtype=dtype, device=device)
    c = torch.empty_like(a)
    timer = _timer(lambda: torch.add(a, b, out=c), f"add {numel}")
    seconds = float(timer.blocked_autorange(min_run_time=min_run_time).median)
    return Measurement("add", numel, precision, device.type, seconds, float(numel),
                       float(3 * numel * a.element_size()))


def measure_transfer(nbytes: int, *, pinned: bool, device: torch.device | str = "cuda",
                     min_run_time: float = 0.1) -> Measurement:
    """Time a host-to-device copy of ``nbytes`` from pageable or pinned (page-locked)
    host memory. Pinned memory lets the GPU's copy engine read it directly (DMA)
    and makes ``non_blocking=True`` copies truly asynchronous.

    Example:
        >>> measure_transfer(1 << 20, pinned=True)            # doctest: +SKIP
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("measure_transfer needs a CUDA device")
    host = torch.ones(nbytes // 4, dtype=torch.float32)
    if pinned:
        host = host.pin_memory()
    dest = torch.empty(host.shape, dtype=host.dtype, device=device)
    timer = _timer(lambda: dest.copy_(host, non_blocking=pinned), "h2d")
    seconds = float(timer.blocked_autorange(min_run_time=min_run_time).median)
    return Measurement("h2d pinned" if pinned else "h2d pageable", nbytes, "fp32", device.type,
                       seconds, 0.0, float(host.numel() * 4))


def format_rate(value: float | None, unit: str = "FLOP/s") -> str:
    """A rate with an SI prefix and 3 significant digits: ``format_rate(1.5e12)`` -> ``'1.5 TFLOP/s'``.

    Example:
        >>> format_rate(2.5e9, "B/s")
        '2.5 GB/s'
        >>> format_rate(None)
        'unknown'
    """
    if value is None:
        return "unknown"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"

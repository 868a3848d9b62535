"""labsupport.hardware: inventory parsing, peak arithmetic, and the measurements' bookkeeping."""
import logging
from types import SimpleNamespace

import pytest
import torch

import labsupport as lab
from labsupport import hardware

INTEL_2_SOCKETS = "\n".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Intel(R) Xeon(R) Gold\n"
    f"physical id\t: {i // 4}\ncore id\t\t: {(i % 4) // 2}\ncpu MHz\t\t: {2000 + i}.000\n"
    f"flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_bf16\n"
    for i in range(8))
ZEN4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\n"
        "cpu MHz\t\t: 2600.000\nflags\t\t: sse2 avx2 fma avx512f avx512_bf16\n")
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n"


def test_titan_rtx_example_is_the_lectures_16_tflops():
    t = lab.TITAN_RTX
    peak = lab.peak_flops(cores=t["cuda_cores"], clock_ghz=t["boost_clock_ghz"],
                          flops_per_cycle=t["flops_per_cycle_per_core"])
    assert peak == pytest.approx(16.31e12, rel=1e-3)


@pytest.mark.parametrize("bad", [0, -1, None, "2", True, float("nan")])
def test_peak_flops_rejects_non_positive_numbers(bad):
    with pytest.raises(ValueError, match="positive number"):
        lab.peak_flops(cores=bad, clock_ghz=1.0, flops_per_cycle=2)


def test_cpu_info_parses_sockets_cores_flags_and_clock():
    info = lab.cpu_info(INTEL_2_SOCKETS, capability="AVX512")
    assert (info.logical_cpus, info.physical_cores) == (8, 4)   # 2 sockets x 2 cores x 2 threads
    assert info.simd_bits == 512 and info.fp32_lanes == 16 and info.fma and info.fma_bits == 512
    assert info.flops_per_cycle == 2 * 16 * 2
    assert info.bf16_factor == 16                                # AMX tiles
    assert info.model == "Intel(R) Xeon(R) Gold"
    if info.clock_source.startswith("/proc"):                    # no cpufreq on this host
        assert info.clock_ghz == pytest.approx(2.007)


def test_zen4_counts_256_bit_fma_and_bf16_dot_products():
    info = lab.cpu_info(ZEN4, capability="AVX512")
    assert info.simd_bits == 512 and info.fma_bits == 256
    assert info.flops_per_cycle == 32 and info.bf16_factor == 2


def test_arm_neon_is_128_bit_with_fma():
    info = lab.cpu_info(ARM, capability="DEFAULT")
    assert info.simd_bits == 128 and info.fma and info.flops_per_cycle == 16
    assert info.physical_cores == 1


def test_cpu_peak_is_cores_times_clock_times_flops_per_cycle():
    info = lab.cpu_info(ZEN4, capability="AVX2")
    info.clock_ghz = 3.0
    assert info.peak("fp32", cores=4) == pytest.approx(4 * 3.0e9 * 16 * 2)   # AVX2: 8 lanes x 2 FMA x 2
    assert info.peak("bf16", cores=4) == pytest.approx(2 * info.peak("fp32", cores=4))
    info.clock_ghz = None
    assert info.peak() is None


def test_cpu_info_of_this_machine_is_consistent():
    info = lab.cpu_info()
    assert info.torch_threads == torch.get_num_threads()
    assert 1 <= info.usable_cpus <= info.logical_cpus
    assert info.simd_bits >= 128


def fake_cuda(monkeypatch, major, minor, clock_rate=1980000):
    props = SimpleNamespace(name="Fake GPU", major=major, minor=minor, multi_processor_count=132,
                            total_memory=80 * 2**30)
    if clock_rate is not None:
        props.clock_rate = clock_rate
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


def test_gpu_info_hopper_peaks(monkeypatch):
    fake_cuda(monkeypatch, 9, 0)
    info = lab.gpu_info()
    assert info.cuda_cores == 132 * 128 and info.clock_ghz == pytest.approx(1.98)
    assert info.peak("fp32") == pytest.approx(66.9e12, rel=1e-3)
    assert info.peak("bf16") == pytest.approx(132 * 4096 * 1.98e9)
    assert info.peak("tf32") == pytest.approx(info.peak("bf16") / 2)
    assert info.memory_gib == pytest.approx(80.0)


def test_gpu_info_unknown_architecture_and_clock(monkeypatch):
    fake_cuda(monkeypatch, 99, 0, clock_rate=None)
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)   # no nvidia-smi either
    info = lab.gpu_info()
    assert info.cuda_cores is None and info.clock_ghz is None and info.clock_source == "unknown"
    assert info.peak("fp32") is None and info.peak("bf16") is None


def test_gpu_info_turing_has_no_bf16_tensor_cores(monkeypatch):
    fake_cuda(monkeypatch, 7, 5)
    info = lab.gpu_info()
    assert info.peak("fp16") is not None and info.peak("bf16") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_no_gpu_means_none_and_no_transfer():
    assert lab.gpu_info() is None
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        lab.measure_transfer(1024, pinned=True)


def test_matmul_arithmetic():
    assert lab.matmul_flops(3) == 54
    assert lab.matmul_intensity(1024, 2) == pytest.approx(2 * lab.matmul_intensity(1024, 4))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_measure_matmul(precision):
    m = lab.measure_matmul(32, precision, min_run_time=0.01)
    assert (m.op, m.size, m.precision, m.device) == ("matmul", 32, precision, "cpu")
    assert m.seconds > 0 and m.flops == 2 * 32 ** 3
    assert m.bytes == 3 * 32 * 32 * lab.PRECISIONS[precision][0].itemsize
    assert m.flops_per_s == pytest.approx(m.flops / m.seconds)


def test_measure_matmul_validates_its_arguments():
    with pytest.raises(ValueError, match="precision must be one of"):
        lab.measure_matmul(8, "fp8")
    with pytest.raises(ValueError, match="positive int"):
        lab.measure_matmul(0)


def test_matmul_precision_setting_is_restored():
    before = torch.get_float32_matmul_precision()
    lab.measure_matmul(16, "tf32", min_run_time=0.01)
    assert torch.get_float32_matmul_precision() == before


def test_sweep_runs_in_order_and_stops_before_a_slow_size():
    assert [m.size for m in lab.matmul_sweep([32, 16], min_run_time=0.01)] == [16, 32]
    assert [m.size for m in lab.matmul_sweep([16, 4096], min_run_time=0.01, max_call_s=1e-9)] == [16]


def test_elementwise_is_memory_bound_by_construction():
    m = lab.measure_elementwise(4096, min_run_time=0.01)
    assert m.op == "add" and m.flops == 4096 and m.bytes == 3 * 4096 * 4
    assert m.intensity == pytest.approx(1 / 12)
    assert m.bytes_per_s > 0


def test_benchmark_import_leaves_logging_as_it_was():
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    lab.measure_elementwise(16, min_run_time=0.001)
    assert logger.level == level


def test_format_rate():
    assert lab.format_rate(1.5e12) == "1.5 TFLOP/s"
    assert lab.format_rate(999.0, "B/s") == "999 B/s"
    assert lab.format_rate(None) == "unknown"


def test_measurement_properties():
    m = lab.Measurement("add", 10, "fp32", "cpu", 2.0, 10.0, 120.0)
    assert (m.flops_per_s, m.bytes_per_s, m.intensity) == (5.0, 60.0, pytest.approx(1 / 12))
    assert lab.CpuInfo.__name__ == "CpuInfo" and lab.GpuInfo.__name__ == "GpuInfo"

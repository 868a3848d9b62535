"""labsupport.hardware: inventory parsing, peaks at the vendor's clock, and the timing recipe."""

from types import SimpleNamespace

import pytest
import torch

import labsupport as lab
from labsupport import hardware

INTEL_2_SOCKETS = "\n".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Intel(R) Xeon(R) Gold\n"
    f"cpu MHz\t\t: {2000 + i}.000\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_bf16\n"
    for i in range(8)
)
ZEN4_VM = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: AMD EPYC\n"
    "cpu MHz\t\t: 2600.000\nflags\t\t: sse2 avx2 fma avx512f avx512_bf16\n"
)
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n"


def amd(family, model, flags="sse2 avx avx2 fma"):
    return (
        f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: AMD Ryzen\ncpu MHz\t\t: 3000.000\nflags\t\t: {flags}\n"
    )


def test_titan_rtx_facts_give_the_lectures_16_tflops_fp32():
    t = lab.TITAN_RTX
    assert t["sms"] * t["cuda_cores_per_sm"] == 4608 and t["tensor_cores_per_sm"] == 8
    assert t["sms"] * t["cuda_cores_per_sm"] * 2 * t["boost_clock_ghz"] * 1e9 == pytest.approx(16.3e12, rel=1e-3)


def test_cpu_info_reads_flags_and_falls_back_to_the_current_clock_without_cpufreq():
    info = lab.cpu_info(INTEL_2_SOCKETS, capability="AVX512")
    assert info.simd_bits == 512 and info.fma_bits == 512 and info.bf16_factor == 16  # AMX tiles
    assert info.model == "Intel(R) Xeon(R) Gold"
    assert info.clock_ghz == pytest.approx(2.007) and "not boost" in info.clock_source


def test_a_zen4_vm_counts_256_bit_fma_and_assumes_epyc_boost():
    info = lab.cpu_info(ZEN4_VM, capability="AVX512")
    assert info.simd_bits == 512 and info.fma_bits == 256 and info.bf16_factor == 2
    assert info.clock_ghz == 3.7 and "EPYC" in info.clock_source  # boost, not the 2.6 GHz it reports


@pytest.mark.parametrize(
    "family, model, fma_bits",
    [(23, 1, 128), (23, 8, 128), (23, 0x71, 256), (25, 0x21, 256)],  # Zen 1, Zen+, Zen 2 (3950X), Zen 3
)
def test_zen1_runs_avx2_on_128_bit_fma_units_so_its_peak_is_not_doubled(family, model, fma_bits):
    info = lab.cpu_info(amd(family, model), capability="AVX2")
    assert info.simd_bits == 256 and info.fma_bits == fma_bits
    per_cycle = 2 * info.fma_bits / 32 * 2  # per core: 2 FMA units x fp32 lanes x 2 FLOP (notebook 00's peak)
    assert per_cycle == (16 if (family, model) < (23, 0x30) else 32)  # Zen 1: 16 fp32 FLOP per cycle, not 32


def test_arm_neon_is_128_bit_and_an_unknown_clock_is_none():
    info = lab.cpu_info(ARM, capability="DEFAULT")
    assert info.simd_bits == 128 and info.bf16_factor == 1 and info.clock_ghz is None


def test_cpu_info_of_this_machine():
    info = lab.cpu_info()
    assert info.torch_threads == torch.get_num_threads() and info.simd_bits >= 128


def fake_cuda(monkeypatch, name, major, minor, sms=132, clock_rate=1980000):
    props = SimpleNamespace(
        name=name, major=major, minor=minor, multi_processor_count=sms, total_memory=80 * 2**30, clock_rate=clock_rate
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


def test_h100_peaks_match_nvidias_datasheet(monkeypatch):
    fake_cuda(monkeypatch, "NVIDIA H100 80GB HBM3", 9, 0)
    info = lab.gpu_info()
    assert info.peak("fp32") == pytest.approx(66.9e12, rel=1e-3)  # at the 1.98 GHz boost
    assert info.peak("bf16") == pytest.approx(989.4e12, rel=1e-3)  # at 1.83 GHz, as the datasheet
    assert info.peak("tf32") == pytest.approx(info.peak("bf16") / 2) and info.memory_gib == pytest.approx(80)


def test_an_unlisted_gpu_uses_its_boost_clock_and_unknown_architectures_have_no_peak(monkeypatch):
    fake_cuda(monkeypatch, "Some GPU", 9, 0)
    assert lab.gpu_info().peak("bf16") == pytest.approx(132 * 4096 * 1.98e9)
    fake_cuda(monkeypatch, "Future GPU", 99, 0)
    assert lab.gpu_info().peak("fp32") is None and lab.gpu_info().peak("bf16") is None


def test_turing_has_fp16_but_no_bf16_tensor_cores(monkeypatch):
    fake_cuda(monkeypatch, "NVIDIA TITAN RTX", 7, 5, sms=72, clock_rate=1770000)
    info = lab.gpu_info()
    assert info.peak("fp16") == pytest.approx(130.5e12, rel=1e-3) and info.peak("bf16") is None


def test_geforce_cards_run_fp32_accumulate_tensor_math_at_half_the_workstation_rate(monkeypatch):
    fake_cuda(monkeypatch, "NVIDIA GeForce RTX 4090", 8, 9, sms=128, clock_rate=2520000)
    info = lab.gpu_info()
    assert info.peak("bf16") == pytest.approx(165.2e12, rel=2e-3)  # Ada whitepaper; notebook 00's table: 165
    assert info.peak("fp16") == info.peak("bf16") and info.peak("tf32") == pytest.approx(82.6e12, rel=2e-3)
    assert info.peak("fp32") == pytest.approx(82.6e12, rel=2e-3)  # the CUDA cores are not halved
    fake_cuda(monkeypatch, "NVIDIA GeForce RTX 3090", 8, 6, sms=82, clock_rate=1695000)
    assert lab.gpu_info().peak("bf16") == pytest.approx(71.2e12, rel=2e-3)  # GA102 whitepaper
    fake_cuda(monkeypatch, "NVIDIA RTX A6000", 8, 6, sms=84, clock_rate=1800000)
    assert lab.gpu_info().peak("bf16") == pytest.approx(154.8e12, rel=2e-3)  # same chip, full rate
    fake_cuda(monkeypatch, "NVIDIA RTX 6000 Ada Generation", 8, 9, sms=142, clock_rate=2505000)
    assert lab.gpu_info().peak("bf16") == pytest.approx(364.2e12, rel=2e-3)
    fake_cuda(monkeypatch, "NVIDIA L40S", 8, 9, sms=142, clock_rate=2490000)
    assert lab.gpu_info().peak("bf16") == pytest.approx(362.05e12, rel=2e-3)  # the datasheets: the L40S
    fake_cuda(monkeypatch, "NVIDIA L40", 8, 9, sms=142, clock_rate=2490000)
    assert lab.gpu_info().peak("bf16") == pytest.approx(181.05e12, rel=2e-3)  # has twice the L40's rate


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_no_gpu_means_none():
    assert lab.gpu_info() is None


def test_time_per_call_warms_up_then_times_blocks_of_about_15_ms():
    calls = []
    seconds = lab.time_per_call(lambda: calls.append(1), "cpu", min_run_time=0.01)
    assert 0 < seconds < 1e-3
    assert len(calls) > 3 + 3 * 100  # 3 warm-up calls, then at least 3 blocks of many calls


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_measure_matmul_restores_the_matmul_precision(precision):
    before = torch.get_float32_matmul_precision()
    m = lab.measure_matmul(32, precision, min_run_time=0.01)
    assert (m.size, m.precision) == (32, precision) and m.flops_per_s == pytest.approx(2 * 32**3 / m.seconds)
    assert torch.get_float32_matmul_precision() == before


def test_sweep_runs_in_order_and_stops_before_a_slow_size():
    assert [m.size for m in lab.matmul_sweep([32, 16], min_run_time=0.01)] == [16, 32]
    assert [m.size for m in lab.matmul_sweep([16, 4096], min_run_time=0.01, max_call_s=1e-9)] == [16]


def test_format_rate():
    assert lab.format_rate(1.5e12) == "1.5 TFLOP/s" and lab.format_rate(999.0, "B/s") == "999 B/s"
    assert lab.format_rate(None) == "unknown" and lab.format_rate(0.5) == "0.5 FLOP/s"


def test_the_benchmark_script_uses_only_what_the_module_offers():
    assert hardware.CpuInfo._fields[:2] == ("model", "torch_threads") and callable(hardware.GpuInfo.peak)


def test_time_per_call_stops_a_function_that_never_returns(monkeypatch):
    from labsupport.checks import running

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)

    def forever():
        while True:
            pass

    with pytest.raises(TimeoutError, match=r"time_per_call\(fn\) did not finish within .* so it was stopped"):
        hardware.time_per_call(forever, "cpu", min_run_time=0.01)

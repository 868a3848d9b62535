"""Matrix-multiply throughput as notebook 00 measures it, against the estimated peak.

    python benchmarks/matmul_throughput.py                     # the CPU, and the first CUDA GPU
    python benchmarks/matmul_throughput.py --device cuda --plain --json out.json

For each device and precision (fp32 and bf16; tf32 and fp16 too on a GPU) it runs
``labsupport.matmul_sweep`` (what notebook 00 runs), keeps the best size, and prints a
markdown table: achieved FLOP/s, the peak at the vendor's clock, and the ratio.
``--plain`` (GPU) adds the yardstick for the lab's timing: a plain loop of 10 bf16
8192^3 products timed with CUDA events after a 1 s rest (best of 5), the same loop
kept up for 1000 products (the power limit lowers the clock), ``lab.measure_matmul``
of the same product, and the same fp32 product on the CPU for the GPU/CPU ratio.
Timings are never asserted; run this on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import labsupport as lab  # noqa: E402


def cpu_peak(precision: str) -> float | None:
    """Cores torch uses x boost clock x 2 FMA units x fp32 lanes x 2 (x the bf16 factor)."""
    c = lab.cpu_info()
    if c.clock_ghz is None:
        return None
    factor = c.bf16_factor if precision == "bf16" else 1
    return c.torch_threads * c.clock_ghz * 1e9 * 2 * c.fma_bits / 32 * 2 * factor  # 2 FMA units assumed


def measure(device: torch.device, min_run_time: float) -> list[dict]:
    if device.type == "cuda":
        info = lab.gpu_info(device.index or 0)
        name, peak = info.name, info.peak
        sizes, precisions = [1024, 2048, 4096, 8192, 16384], ["fp32", "tf32", "bf16", "fp16"]
    else:
        c = lab.cpu_info()
        name, peak = f"{c.model} ({c.torch_threads} threads, {c.capability})", cpu_peak
        sizes, precisions = [128, 256, 512, 1024, 2048], ["fp32", "bf16"]
    rows = []
    for p in precisions:
        runs = lab.matmul_sweep(sizes, p, device, min_run_time=min_run_time, max_call_s=1.0)
        best = max(runs, key=lambda m: m.flops_per_s)
        rows.append(
            {
                "device": name,
                "what": f"matmul {p}",
                "size": best.size,
                "achieved": best.flops_per_s,
                "peak": peak(p),
                "sweep": {m.size: m.flops_per_s for m in runs},
            }
        )
    return rows


def plain_loop(n: int = 8192, products: int = 10, rest_s: float = 1.0) -> float:
    """FLOP/s of ``products`` back-to-back bf16 products after a rest and 3 warm-ups (CUDA events)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to("cuda", torch.bfloat16) for _ in range(2))
    time.sleep(rest_s)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(products):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * products / (start.elapsed_time(end) / 1e3)


def plain_comparison() -> list[str]:
    best = max(plain_loop() for _ in range(5))
    sustained = plain_loop(products=1000)
    time.sleep(1.0)
    lab_rate = lab.measure_matmul(8192, "bf16", "cuda", min_run_time=0.5).flops_per_s
    gpu32 = lab.measure_matmul(4096, "fp32", "cuda").flops_per_s
    cpu32 = lab.measure_matmul(4096, "fp32", "cpu", min_run_time=0.5).flops_per_s
    return [
        f"plain loop, 10 bf16 8192^3 products after a 1 s rest (best of 5): {lab.format_rate(best)}",
        f"plain loop kept up for 1000 products (power-limited clock): {lab.format_rate(sustained)}",
        f"lab.measure_matmul(8192, 'bf16', 'cuda'): {lab.format_rate(lab_rate)} = {lab_rate / best:.1%} "
        "of the best plain loop",
        f"same 4096^3 fp32 product: GPU {lab.format_rate(gpu32)}, CPU ({torch.get_num_threads()} threads) "
        f"{lab.format_rate(cpu32)}: {gpu32 / cpu32:.0f}x",
    ]


def table(rows: list[dict]) -> str:
    lines = [
        "| device | operation | best n | achieved | peak (vendor's clock) | % of peak |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        frac = f"{r['achieved'] / r['peak']:.0%}" if r["peak"] else "-"
        lines.append(
            f"| {r['device']} | {r['what']} | {r['size']} | {lab.format_rate(r['achieved'])} "
            f"| {lab.format_rate(r['peak'])} | {frac} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["all", "cpu", "cuda"], default="all")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per measurement")
    parser.add_argument("--plain", action="store_true", help="compare with a plain CUDA-event loop (GPU)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    devices = [torch.device("cpu")] if args.device in ("all", "cpu") else []
    if args.device in ("all", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda", 0))
    elif args.device == "cuda":
        print("no CUDA GPU", file=sys.stderr)
        return 1
    rows = [row for d in devices for row in measure(d, args.min_run_time)]
    print(table(rows))
    notes = plain_comparison() if args.plain and torch.cuda.is_available() else []
    print("\n".join(notes))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "plain": notes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

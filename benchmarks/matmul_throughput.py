"""Matrix-multiply throughput as notebook 00 measures it, against the estimated peak.

    python benchmarks/matmul_throughput.py                 # the CPU, and every CUDA GPU's first device
    python benchmarks/matmul_throughput.py --device cuda --json out.json

For each device and precision (fp32 and bf16; tf32 and fp16 too on a GPU) it runs
``labsupport.matmul_sweep`` (the code of notebook 00), keeps the best size, and
prints a markdown table: achieved FLOP/s, the peak from ``cpu_info``/``gpu_info``
and the ratio. It also reports the element-wise add's memory bandwidth. Timings are
never asserted anywhere; run this on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import labsupport as lab  # noqa: E402

CPU_SIZES = [128, 256, 512, 1024, 2048]
GPU_SIZES = [512, 1024, 2048, 4096, 8192, 16384]


def measure(device: torch.device, min_run_time: float) -> list[dict]:
    if device.type == "cuda":
        info = lab.gpu_info(device.index or 0)
        name, sizes, precisions = info.name, GPU_SIZES, ["fp32", "tf32", "bf16", "fp16"]
        peak = info.peak
        adds = [2**26, 2**28]
    else:
        info = lab.cpu_info()
        name = f"{info.model} ({info.torch_threads} threads, {info.capability})"
        sizes, precisions = CPU_SIZES, ["fp32", "bf16"]
        peak = info.peak
        adds = [2**24, 2**26]
    rows = []
    for p in precisions:
        runs = lab.matmul_sweep(sizes, p, device, min_run_time=min_run_time, max_call_s=1.0)
        best = max(runs, key=lambda m: m.flops_per_s)
        pk = peak(p)
        rows.append({"device": name, "what": f"matmul {p}", "size": best.size,
                     "achieved": best.flops_per_s, "peak": pk,
                     "fraction": best.flops_per_s / pk if pk else None,
                     "sweep": {m.size: m.flops_per_s for m in runs}})
    add = max((lab.measure_elementwise(n, device, min_run_time=min_run_time) for n in adds),
              key=lambda m: m.bytes_per_s)
    rows.append({"device": name, "what": "add fp32 (bandwidth)", "size": add.size,
                 "achieved": add.bytes_per_s, "peak": None, "fraction": None, "sweep": {}})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| device | operation | best n | achieved | estimated peak | % of peak |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        unit = "B/s" if "bandwidth" in r["what"] else "FLOP/s"
        frac = f"{r['fraction']:.0%}" if r["fraction"] is not None else "-"
        peak = lab.format_rate(r["peak"]) if r["peak"] else "-"
        lines.append(f"| {r['device']} | {r['what']} | {r['size']} | {lab.format_rate(r['achieved'], unit)} "
                     f"| {peak} | {frac} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["all", "cpu", "cuda"], default="all")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per measurement")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    devices = []
    if args.device in ("all", "cpu"):
        devices.append(torch.device("cpu"))
    if args.device in ("all", "cuda"):
        if torch.cuda.is_available():
            devices.append(torch.device("cuda", 0))
        elif args.device == "cuda":
            print("no CUDA GPU", file=sys.stderr)
            return 1
    rows = [row for d in devices for row in measure(d, args.min_run_time)]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

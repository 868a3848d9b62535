"""Step time of notebook 10's training loop, fp32 vs bf16 autocast; optionally 1 vs N DDP workers.

    python benchmarks/train_step.py                          # CPU, and the GPU if there is one
    python benchmarks/train_step.py --batch-sizes 64 4096 --json out.json
    python benchmarks/train_step.py --ddp 2                  # + DDP with 1 and 2 workers (NCCL on >= 2 GPUs)
    python benchmarks/train_step.py --device cuda --ddp 1    # + the NCCL path on one GPU

The step is the notebook's: DigitsCNN, Adam, cross-entropy; batches from a
DataLoader with pinned memory on a GPU, copied with ``non_blocking=True``, the
forward pass under ``torch.autocast(dtype=torch.bfloat16)`` when asked, and a
synchronisation before the clock is read. Reports the median over ``--steps``
steps after ``--warmup`` steps. With ``--ddp N`` it also runs
``labsupport.run_data_parallel`` for 1 and N workers (the notebook's launcher)
and reports each one's median step time (slowest worker) and the equivalence
error of its first step against one process in float64.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler  # noqa: E402

import labsupport as lab  # noqa: E402


def step_times(device: torch.device, batch_size: int, use_autocast: bool, steps: int, warmup: int) -> list[float]:
    lab.seed_everything(0)
    pin = device.type == "cuda"
    dataset = lab.DigitsDataset("train")
    # sampling with replacement: any batch size, exactly steps + warmup batches
    sampler = RandomSampler(
        dataset, replacement=True, num_samples=batch_size * (steps + warmup), generator=lab.make_generator(0)
    )
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, pin_memory=pin)
    model = lab.DigitsCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    times = []
    for i, (inputs, targets) in enumerate(loader):
        start = time.perf_counter()
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_autocast):
            loss = F.cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        lab.sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def ddp_rows(world_sizes: list[int], batch_size: int, steps: int) -> list[dict]:
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = "nccl" if n_gpu >= max(world_sizes) else "gloo"  # one GPU per worker
    rows = []
    for ws in world_sizes:
        result = lab.run_data_parallel(ws, batch_size=batch_size, train_steps=steps, backend=backend)
        lab.check_ddp_equivalence(result)  # prints PASS or raises CheckError
        ref = lab.sgd_step_state(result["seed"], result["batch_size"], result["lr"])
        err = max(float((s[k].double() - ref[k]).abs().max()) for s in result["states"] for k in ref)
        slowest = max(statistics.median(t) for t in result["step_times"])
        rows.append(
            {
                "backend": backend,
                "world_size": ws,
                "batch_size": batch_size,
                "median_step_s": slowest,
                "max_abs_error_vs_one_process": err,
                "startup_s": max(result["startup_s"]),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["all", "cpu", "cuda"], default="all")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--ddp",
        type=int,
        default=0,
        help="also run DDP with 1 and N workers (NCCL when there is a GPU per worker; "
        "--ddp 1 runs the NCCL path on a single GPU)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    devices = []
    if args.device in ("all", "cpu"):
        devices.append(torch.device("cpu"))
    if args.device in ("all", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda", 0))
    rows = []
    print("| device | batch | fp32 step | bf16 autocast step | autocast speed-up |")
    print("|---|---|---|---|---|")
    for device, bs in itertools.product(devices, args.batch_sizes):
        fp32 = statistics.median(step_times(device, bs, False, args.steps, args.warmup))
        amp = statistics.median(step_times(device, bs, True, args.steps, args.warmup))
        name = (
            torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
        )
        rows.append({"device": name, "batch_size": bs, "fp32_step_s": fp32, "autocast_step_s": amp})
        print(f"| {name} | {bs} | {fp32 * 1e3:.2f} ms | {amp * 1e3:.2f} ms | {fp32 / amp:.2f}x |")
    out = {"train_step": rows}
    if args.ddp >= 1:
        out["ddp"] = ddp_rows(sorted({1, args.ddp}), args.batch_sizes[0], args.steps)
        print("\n| backend | workers | global batch | median step (slowest worker) | max abs error vs 1 process |")
        print("|---|---|---|---|---|")
        for r in out["ddp"]:
            print(
                f"| {r['backend']} | {r['world_size']} | {r['batch_size']} | {r['median_step_s'] * 1e3:.2f} ms "
                f"| {r['max_abs_error_vs_one_process']:.1e} |"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

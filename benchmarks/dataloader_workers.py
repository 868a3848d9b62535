"""How much DataLoader workers (and pinned memory) speed up loading, on this machine.

    .venv/bin/python benchmarks/dataloader_workers.py [--json results.json]

Notebook 07's experiment, measured properly: every item of the digits is read
through ``lab.SlowDataset``, which adds a fixed cost per item, and one pass over
the data is timed with ``num_workers`` 0 and 2 (workers kept between epochs with
``persistent_workers``; the first epoch, which starts them, is reported
separately). Two kinds of slow read:

* ``sleep``: waiting on I/O (a disk, a network file system); the waits overlap
  in the workers whatever the cores are doing;
* ``spin``: CPU work (decoding, augmenting); workers help only as far as there
  are idle cores, so a busy machine shows less.

With a CUDA GPU it also times a pass over image-sized batches (3x224x224)
copied to the GPU, with ``pin_memory`` off and on (``non_blocking`` copies from
pinned memory). Figures are medians over the epochs after the first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Subset  # noqa: E402

import labsupport as lab  # noqa: E402


def load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def time_workers(
    mode: str, workers: int, items: int, delay: float, batch_size: int, epochs: int, start_method: str | None
) -> dict:
    dataset = Subset(lab.SlowDataset(lab.DigitsDataset("train"), delay=delay, mode=mode), range(items))
    kwargs = {}
    if workers > 0:
        kwargs = dict(persistent_workers=True, multiprocessing_context=start_method)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, **kwargs)
    seconds = lab.time_loader(loader, epochs=epochs)
    del loader
    return {
        "mode": mode,
        "num_workers": workers,
        "first_epoch_s": seconds[0],
        "epoch_s": statistics.median(seconds[1:]),
        "all_epochs_s": seconds,
    }


def time_pinned(
    pin: bool, items: int, batch_size: int, epochs: int, workers: int, device: torch.device, start_method: str | None
) -> dict:
    images = lab.SyntheticImages(items, shape=(3, 224, 224))
    kwargs = dict(persistent_workers=True, multiprocessing_context=start_method) if workers > 0 else {}
    loader = DataLoader(images, batch_size=batch_size, num_workers=workers, pin_memory=pin, **kwargs)
    seconds = lab.time_loader(loader, epochs=epochs, device=device, non_blocking=pin)
    gigabytes = items * 3 * 224 * 224 * 4 / 1e9
    epoch = statistics.median(seconds[1:])
    return {
        "pin_memory": pin,
        "num_workers": workers,
        "epoch_s": epoch,
        "first_epoch_s": seconds[0],
        "GB_per_epoch": gigabytes,
        "GB_per_s": gigabytes / epoch,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512, help="digits read per epoch")
    parser.add_argument("--delay", type=float, default=0.002, help="seconds added to each read")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per setting (the first is reported apart)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--modes", nargs="+", default=["sleep", "spin"], choices=["sleep", "spin"])
    parser.add_argument("--start-method", default=None, help="fork, spawn or forkserver (default: the platform's)")
    parser.add_argument("--pin-items", type=int, default=512, help="3x224x224 images per epoch for pin_memory")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first one includes the workers' start-up)")

    torch.set_num_threads(1)  # the loading, not the math, is measured; keep the main process light
    device = lab.pick_device()
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "start_method": args.start_method or torch.multiprocessing.get_start_method(),
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "load_before": load(),
    }
    print(" | ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    print(
        f"{args.items} digits per epoch, +{args.delay * 1e3:g} ms per read, batch {args.batch_size}, "
        f"{args.epochs} epochs per setting",
        flush=True,
    )

    results = {"info": info, "args": {k: str(v) for k, v in vars(args).items()}, "workers": [], "pinned": []}
    for mode in args.modes:
        base = None
        for workers in args.workers:
            r = time_workers(mode, workers, args.items, args.delay, args.batch_size, args.epochs, args.start_method)
            base = r["epoch_s"] if workers == 0 else base
            r["speedup_vs_0"] = base / r["epoch_s"] if base else None
            results["workers"].append(r)
            speed = f"{r['speedup_vs_0']:.2f}x" if r["speedup_vs_0"] else "-"
            print(
                f"  {mode:5s} num_workers={workers}: {r['epoch_s']:.3f} s/epoch (first epoch "
                f"{r['first_epoch_s']:.3f} s), {args.items / r['epoch_s']:.0f} items/s, speed-up {speed}",
                flush=True,
            )
    if device.type == "cuda":
        for pin in (False, True):
            r = time_pinned(pin, args.pin_items, 64, args.epochs, 2, device, args.start_method)
            results["pinned"].append(r)
            print(
                f"  3x224x224 to GPU, 2 workers, pin_memory={pin!s:5s}: {r['epoch_s']:.3f} s/epoch, "
                f"{r['GB_per_s']:.2f} GB/s",
                flush=True,
            )
        if len(results["pinned"]) == 2:
            ratio = results["pinned"][0]["epoch_s"] / results["pinned"][1]["epoch_s"]
            results["pin_speedup"] = ratio
            print(f"  pin_memory speed-up: {ratio:.2f}x", flush=True)
    else:
        print("  no CUDA GPU: pin_memory not measured (it only speeds up copies to a GPU)")
    info["load_after"] = load()
    print(f"load average before {info['load_before']}, after {info['load_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

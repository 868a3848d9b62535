"""Weak scaling of DistributedDataParallel: throughput on 1, 2, 4 GPUs with a fixed batch per GPU.

Run one size per launch (a model where data parallelism pays, and the lab's tiny digits CNN where it
does not); rank 0 appends one JSON line per run to --out:

    export NCCL_NVLS_ENABLE=0     # NVLink multicast stays off (shared hosts require it)
    for n in 1 2 4; do
      torchrun --standalone --nproc_per_node $n benchmarks/ddp_scaling.py --model resnet50 --batch 128
      torchrun --standalone --nproc_per_node $n benchmarks/ddp_scaling.py --model digits --batch 32
    done

Data are random tensors made on the GPU, so the input pipeline never limits the figure. One
process runs the model without DDP (the honest baseline); several wrap it in DDP. bf16 autocast,
SGD with momentum. Throughput = world size x batch per GPU / median step time. On a CPU the
same script runs with gloo (``--device cpu``) for a smoke test.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def build(name: str) -> tuple[torch.nn.Module, tuple[int, ...], int]:
    """The model, the shape of one input image, and the number of classes."""
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(), (3, 224, 224), 1000
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from labsupport.models import DigitsCNN

    return DigitsCNN(), (1, 8, 8), 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["resnet50", "digits"], default="resnet50")
    parser.add_argument("--batch", type=int, default=128, help="per GPU")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", default="ddp_scaling.jsonl")
    args = parser.parse_args()
    rank, local, world = (int(os.environ.get(k, d)) for k, d in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)))
    cuda = args.device == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(0)
    net, shape, classes = build(args.model)
    net = net.to(device, memory_format=torch.channels_last if args.model == "resnet50" else torch.contiguous_format)
    model = DDP(net, device_ids=[local] if cuda else None) if world > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device=device).manual_seed(rank)
    x = torch.randn(args.batch, *shape, device=device, generator=g)
    y = torch.randint(0, classes, (args.batch,), device=device, generator=g)
    times = []
    for step in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = torch.tensor(statistics.median(times), device=device)
    if world > 1:
        dist.all_reduce(step_s, op=dist.ReduceOp.MAX)  # synchronous: the slowest rank sets the pace
    if rank == 0:
        row = {
            "model": args.model,
            "gpus": world,
            "batch_per_gpu": args.batch,
            "params_M": round(sum(p.numel() for p in net.parameters()) / 1e6, 2),
            "step_ms": round(float(step_s) * 1e3, 2),
            "samples_per_s": round(world * args.batch / float(step_s), 1),
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        }
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

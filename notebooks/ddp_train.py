"""Data-parallel training of the digits CNN, the way you launch it for real (notebook 10, section 4).

    torchrun --nproc_per_node 2 ddp_train.py --epochs 3 --out ddp_run

torchrun starts one process per GPU (or per CPU worker) and gives each its RANK, LOCAL_RANK and
WORLD_SIZE in the environment; this script does the rest:
- joins the process group (NCCL with one GPU per process, gloo on the CPU);
- wraps the model in DistributedDataParallel, which broadcasts rank 0's weights at construction;
- gives each rank its own part of the data with DistributedSampler, reshuffled by set_epoch;
- scales the learning rate with the global batch (per-process batch x world size): linearly for
  SGD, with the square root for Adam (scaled_lr says why);
- writes the checkpoint and results.json from rank 0 only, atomically (a temporary file, then os.replace).
"""
import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

import labsupport as lab

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")        # NVLink multicast off: DDP does not need it


def scaled_lr(base_lr, global_batch, optimizer):
    """The learning rate for a global batch, from ``base_lr``, the one found for a batch of 64.

    One step on k times the batch should do the work of k steps. SGD: the linear scaling rule,
    k * base_lr (Goyal et al., 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour");
    large k also needs a warm-up. Adam divides each step by the gradient's running RMS, mostly
    noise at small batches; k times the batch cuts that noise by sqrt(k), so Adam's step already
    grows by about sqrt(k), and the learning rate supplies the other sqrt(k): the square-root rule
    (Malladi et al., 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms", which
    also adjusts the betas and eps for large k). The linear rule would overshoot with Adam.
    """
    k = global_batch / 64
    return base_lr * (k if optimizer == "sgd" else k ** 0.5)


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-per-process", type=int, default=32)
parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
parser.add_argument("--base-lr", type=float, default=None,
                    help="learning rate for a batch of 64 (default: 1e-3 for Adam, 0.05 for SGD with momentum)")
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()

rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
if use_cuda:
    torch.cuda.set_device(device)
else:
    torch.set_num_threads(1)                          # the processes share the machine's cores
dist.init_process_group("nccl" if use_cuda else "gloo")   # address and port come from torchrun

torch.manual_seed(rank)                               # different on purpose: DDP copies rank 0's weights
model = DDP(lab.DigitsCNN().to(device), device_ids=[local_rank] if use_cuda else None)
global_batch = args.batch_per_process * world_size
base_lr = args.base_lr or {"adam": 1e-3, "sgd": 0.05}[args.optimizer]
lr = scaled_lr(base_lr, global_batch, args.optimizer)  # linear for SGD, square root for Adam
if args.optimizer == "sgd":                           # built after the model is on its device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

train = lab.DigitsDataset("train")
sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(train, batch_size=args.batch_per_process, sampler=sampler)
start, epoch_losses, seen = time.perf_counter(), [], []
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)                          # without it every epoch repeats epoch 0's order
    seen.append(list(iter(sampler)))                  # the indices this rank gets in this epoch
    total = torch.zeros(2, device=device)
    for inputs, targets in loader:
        loss = F.cross_entropy(model(inputs.to(device)), targets.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()                               # DDP averages the gradients across ranks here
        optimizer.step()
        total += torch.stack([loss.detach() * len(targets), torch.tensor(len(targets), device=device)])
    dist.all_reduce(total)                            # the epoch's mean loss over all ranks
    epoch_losses.append(float(total[0] / total[1]))
seconds = time.perf_counter() - start

all_seen = [None] * world_size
dist.all_gather_object(all_seen, seen)                # every rank's indices, for the report
weights_equal = torch.tensor(1.0, device=device)
for p in model.parameters():                          # are the replicas still identical?
    p0 = p.detach().clone()
    dist.broadcast(p0, src=0)
    weights_equal *= float(torch.equal(p0, p.detach()))
dist.all_reduce(weights_equal, op=dist.ReduceOp.MIN)

if rank == 0:                                         # one writer: the replicas are identical
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "checkpoint.pt.tmp"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                "epochs": args.epochs}, tmp)
    os.replace(tmp, args.out / "checkpoint.pt")       # atomic: a reader never sees half a file
    val = DataLoader(lab.DigitsDataset("val"), batch_size=256)
    first = [set(s[0]) for s in all_seen]
    results = {"world_size": world_size, "backend": dist.get_backend(), "global_batch": global_batch,
               "optimizer": args.optimizer, "lr": lr, "epoch_losses": epoch_losses, "seconds": seconds,
               "val_accuracy": lab.evaluate(model.module, val, device),
               "replicas_identical": bool(weights_equal.item()),
               "dataset_size": len(train), "per_rank_epoch0": [len(s) for s in first],
               "epoch0_covers": len(set().union(*first)) == len(train),
               "epoch0_repeats": sum(len(s) for s in first) - len(set().union(*first)),
               "rank0_order_changes_with_epoch": all_seen[0][0] != all_seen[0][-1]}
    (args.out / "results.json.tmp").write_text(json.dumps(results, indent=1))
    os.replace(args.out / "results.json.tmp", args.out / "results.json")
dist.barrier()                                        # every rank leaves together: none tears gloo down under
dist.destroy_process_group()                          # a peer still working (it can abort: "terminate called")

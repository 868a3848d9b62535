"""DistributedDataParallel in real processes, for notebook 10's equivalence check.

A worker process cannot import a notebook, so the worker lives here: :func:`run_data_parallel`
starts it (NCCL, one GPU each, when there are enough GPUs; else gloo on the CPU), and
:func:`sgd_step_state` is the one-process reference. ``notebooks/ddp_train.py`` is the
``torchrun`` script students write.
"""
from __future__ import annotations

import datetime, multiprocessing, os, socket, sys, tempfile, time  # noqa: E401
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["run_data_parallel", "sgd_step_state"]

_NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}  # NVLink multicast off


def _shard(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(x) // world
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def _digits_batch(batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from .data import DigitsDataset
    train = DigitsDataset("train")
    idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:batch_size]
    return train.images[idx], train.labels[idx]


def sgd_step_state(seed: int = 0, batch_size: int = 64, lr: float = 0.1, *, shard: tuple[int, int] | None = None,
                   dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """ONE process's plain SGD step of the seeded DigitsCNN on the whole batch (or on the
    ``(rank, world_size)`` slice ``shard``), in float64 on the CPU: its state dict. Example:
        >>> sorted(sgd_step_state(batch_size=4))[:2]
        ['classifier.0.bias', 'classifier.0.weight']
    """
    from .models import DigitsCNN
    torch.manual_seed(seed)
    model = DigitsCNN().to(dtype)
    x, y = _digits_batch(batch_size, seed)
    x, y = _shard(x, y, *shard) if shard else (x, y)
    grads = torch.autograd.grad(F.cross_entropy(model(x.to(dtype)), y), list(model.parameters()))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= lr * g
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _worker(rank: int, world: int, backend: str, port: int, outdir: str, cfg: dict[str, Any]) -> None:
    """One worker process; its output goes to a log file, its results to rank<r>.pt."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from .models import DigitsCNN

    started = time.time() - cfg["t0"]
    log = open(os.path.join(outdir, f"worker{rank}.log"), "w", buffering=1)
    os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)   # the notebook's output stays clean
    os.environ.update(_NCCL_ENV)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":   # plain fp32 math: compared with a float64 reference
        torch.cuda.set_device(device), torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
        torch.set_num_threads(cfg["threads"])
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg["timeout"]))
    torch.manual_seed(cfg["seed"])
    model = DigitsCNN().to(device)
    ddp = DDP(model, device_ids=[rank] if backend == "nccl" else None)  # broadcasts rank 0's weights
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg["lr"])
    x, y = _shard(*cfg["batch"], rank, world)
    F.cross_entropy(ddp(x.to(device)), y.to(device)).backward()   # gradients averaged here
    opt.step()
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    times = []
    for step in range(cfg["train_steps"] + cfg["warmup_steps"] if cfg["train_steps"] else 0):
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(ddp(x.to(device)), y.to(device)).backward()
        opt.step()
        _ = float(next(model.parameters()).sum()) if step >= cfg["warmup_steps"] else None  # wait for it
        times += [time.perf_counter() - start] if step >= cfg["warmup_steps"] else []
    torch.save({"state": state, "step_times": times, "startup_s": started}, os.path.join(outdir, f"rank{rank}.pt"))
    dist.destroy_process_group()
    os._exit(0)     # results are on disk; skip a teardown that takes seconds once DDP loaded dynamo


def run_data_parallel(world_size: int = 2, *, batch_size: int = 64, lr: float = 0.1, seed: int = 0,
                      train_steps: int = 0, warmup_steps: int = 3, backend: str | None = None,
                      timeout: float = 120.0) -> dict[str, Any]:
    """Start ``world_size`` DDP workers that each take one SGD step on their slice of the same
    batch (then time ``train_steps`` more). Returns ``world_size, backend, batch_size, lr, seed,
    states`` (each worker's weights), ``step_times``, ``startup_s`` and ``seconds``; raises
    RuntimeError with the workers' logs if one fails. Example:
        >>> run_data_parallel(2, batch_size=8)["backend"]          # doctest: +SKIP
        'gloo'
    """
    import torch.multiprocessing as mp

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1 or batch_size % world_size:
        raise ValueError(f"world_size must be a positive int that divides batch_size ({batch_size}), "
                         f"got {world_size!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= max(2, world_size) else "gloo")
    if backend not in ("gloo", "nccl") or (backend == "nccl" and gpus < world_size):
        raise ValueError(f"backend must be 'gloo', or 'nccl' with one GPU per worker: got {backend!r}, "
                         f"{world_size} workers, {gpus} GPU(s)")
    cfg = {"lr": lr, "seed": seed, "train_steps": train_steps, "warmup_steps": warmup_steps,
           "timeout": timeout, "threads": max(1, torch.get_num_threads() // world_size),
           "batch": _digits_batch(batch_size, seed), "t0": time.time()}
    with tempfile.TemporaryDirectory(prefix="lab_ddp_") as outdir, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))    # a free port: the OS picks it
        port = sock.getsockname()[1]
        sock.close()
        try:
            multiprocessing.set_forkserver_preload(["torch._dynamo", "torch.nn.parallel"])  # a server imports
            mp.start_processes(_worker, args=(world_size, backend, port, outdir, cfg),   # these once (no CUDA
                               nprocs=world_size, join=True, start_method="forkserver")  # yet); workers fork it
        except Exception as exc:
            logs = "".join(f"--- worker {r} ---\n" + p.read_text()[-2000:]
                           for r in range(world_size) if (p := Path(outdir, f"worker{r}.log")).exists())
            raise RuntimeError(f"a data-parallel worker failed: {exc}\n{logs}") from None
        out = [torch.load(Path(outdir, f"rank{r}.pt"), weights_only=True) for r in range(world_size)]
    return {"world_size": world_size, "backend": backend, "batch_size": batch_size, "lr": lr, "seed": seed,
            "states": [o["state"] for o in out], "step_times": [o["step_times"] for o in out],
            "startup_s": [o["startup_s"] for o in out], "seconds": time.time() - cfg["t0"]}

"""DistributedDataParallel in real processes, for notebook 10's equivalence check.

A worker process cannot import a notebook, so the worker lives here: :func:`run_data_parallel`
starts it (NCCL, one GPU each, when there are enough GPUs; else gloo on the CPU), and
:func:`sgd_step_state` is the one-process reference. ``notebooks/ddp_train.py`` is the
``torchrun`` script students write.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["run_data_parallel", "sgd_step_state"]

_NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}  # NVLink multicast off


#: The largest values that make sense in a notebook (larger ones would run for minutes or fail later).
MAX_WORLD_SIZE = 16
MAX_STEPS = 10_000


def _whole_number(value: Any, name: str, minimum: int, maximum: int) -> int:
    """``value`` if it is an int (not a bool) in [minimum, maximum], else a ValueError in one sentence."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be a whole number from {minimum} to {maximum}, got {value!r}")
    return value


def _seconds_or_rate(value: Any, name: str, maximum: float) -> float:
    """``value`` if it is a finite number in (0, maximum], else a ValueError in one sentence."""
    number_types = (int, float)
    if isinstance(value, bool) or not isinstance(value, number_types) or not 0 < value <= maximum:
        raise ValueError(f"{name} must be a number above 0 and at most {maximum:g}, got {value!r}")
    return float(value)


def _shard(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(x) // world
    return x[rank * n : (rank + 1) * n], y[rank * n : (rank + 1) * n]


def _digits_batch(batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from .data import DigitsDataset

    train = DigitsDataset("train")
    _whole_number(batch_size, "batch_size", 1, len(train))
    idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:batch_size]
    return train.images[idx], train.labels[idx]


def sgd_step_state(
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 0.1,
    *,
    shard: tuple[int, int] | None = None,
    dtype: torch.dtype = torch.float64,
) -> dict[str, torch.Tensor]:
    """ONE process's plain SGD step of the seeded DigitsCNN on the whole batch (or on the
    ``(rank, world_size)`` slice ``shard``), in float64 on the CPU: its state dict. Example:
        >>> sorted(sgd_step_state(batch_size=4))[:2]
        ['classifier.0.bias', 'classifier.0.weight']
    """
    from .models import DigitsCNN

    _whole_number(seed, "seed", 0, 2**32 - 1)
    _seconds_or_rate(lr, "lr", 1e3)
    if shard is not None:
        if not isinstance(shard, tuple) or len(shard) != 2:
            raise ValueError(f"shard must be a pair (rank, world_size), got {shard!r}")
        world = _whole_number(shard[1], "shard's world_size", 1, MAX_WORLD_SIZE)
        _whole_number(shard[0], "shard's rank", 0, world - 1)
    torch.manual_seed(seed)
    model = DigitsCNN().to(dtype)
    x, y = _digits_batch(batch_size, seed)
    if shard is not None:
        x, y = _shard(x, y, *shard)
    grads = torch.autograd.grad(F.cross_entropy(model(x.to(dtype)), y), list(model.parameters()))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= lr * g
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _join_process_group(rank: int, world: int, backend: str, port: int, cfg: dict[str, Any]) -> torch.device:
    """Set this worker's device and threads, then join the process group over 127.0.0.1."""
    import torch.distributed as dist

    os.environ.update(_NCCL_ENV)
    if backend == "nccl":  # plain fp32 math: compared with a float64 reference
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
        torch.set_num_threads(cfg["threads"])
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=cfg["timeout"]),
    )
    return device


def _timed_steps(ddp: Any, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, cfg: dict) -> list[float]:
    """Seconds of each of ``train_steps`` further steps, after ``warmup_steps`` untimed ones."""
    times = []
    if not cfg["train_steps"]:
        return times
    for step in range(cfg["warmup_steps"] + cfg["train_steps"]):
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        if step >= cfg["warmup_steps"]:
            float(next(ddp.parameters()).sum())  # wait for the step's work to finish
            times.append(time.perf_counter() - start)
    return times


def _worker(rank: int, world: int, backend: str, port: int, outdir: str, cfg: dict[str, Any]) -> None:
    """One worker process; its output goes to a log file, its results to rank<r>.pt."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .models import DigitsCNN

    started = time.time() - cfg["t0"]
    log = open(os.path.join(outdir, f"worker{rank}.log"), "w", buffering=1)
    os.dup2(log.fileno(), 1)  # the notebook's output stays clean
    os.dup2(log.fileno(), 2)
    device = _join_process_group(rank, world, backend, port, cfg)
    torch.manual_seed(cfg["seed"])
    model = DigitsCNN().to(device)
    ddp = DDP(model, device_ids=[rank] if backend == "nccl" else None)  # broadcasts rank 0's weights
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg["lr"])
    x, y = _shard(*cfg["batch"], rank, world)
    x = x.to(device)
    y = y.to(device)
    F.cross_entropy(ddp(x), y).backward()  # gradients averaged here
    opt.step()
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    times = _timed_steps(ddp, opt, x, y, cfg)
    torch.save({"state": state, "step_times": times, "startup_s": started}, os.path.join(outdir, f"rank{rank}.pt"))
    dist.barrier()  # leave together: a rank that tears gloo down under a busy peer can abort it
    dist.destroy_process_group()
    os._exit(0)  # results are on disk; skip a teardown that takes seconds once DDP loaded dynamo


def _pick_backend(backend: Any, world_size: int) -> str:
    """The backend asked for (None: nccl with a GPU per worker, else gloo), or a ValueError saying why not."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend is None:
        backend = "nccl" if gpus >= max(2, world_size) else "gloo"
    if backend not in ("gloo", "nccl") or (backend == "nccl" and gpus < world_size):
        raise ValueError(
            f"backend must be 'gloo', or 'nccl' with one GPU per worker: got {backend!r}, "
            f"{world_size} workers, {gpus} GPU(s)"
        )
    return backend


def _config(world_size: int, batch_size: int, lr: float, seed: int, steps: tuple, timeout: float) -> dict[str, Any]:
    """The workers' settings, each argument checked (one sentence for one that makes no sense)."""
    _whole_number(world_size, "world_size", 1, MAX_WORLD_SIZE)
    _whole_number(batch_size, "batch_size", 1, 100_000)
    if batch_size % world_size:
        raise ValueError(f"world_size ({world_size}) must divide batch_size ({batch_size}): equal shards")
    train_steps, warmup_steps = steps
    return {
        "lr": _seconds_or_rate(lr, "lr", 1e3),
        "seed": _whole_number(seed, "seed", 0, 2**32 - 1),
        "train_steps": _whole_number(train_steps, "train_steps", 0, MAX_STEPS),
        "warmup_steps": _whole_number(warmup_steps, "warmup_steps", 0, MAX_STEPS),
        "timeout": _seconds_or_rate(timeout, "timeout", 3600),
        "threads": max(1, torch.get_num_threads() // world_size),
        "batch": _digits_batch(batch_size, seed),
        "t0": time.time(),
    }


def _workers_logs(outdir: str, world_size: int) -> str:
    logs = []
    for r in range(world_size):
        path = Path(outdir, f"worker{r}.log")
        if path.exists():
            logs.append(f"--- worker {r} ---\n" + path.read_text()[-2000:])
    return "".join(logs)


def _run_workers(world_size: int, backend: str, outdir: str, cfg: dict[str, Any]) -> None:
    """Start the workers from a forkserver and wait for them, at most ``cfg["timeout"]`` seconds."""
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a free port: the OS picks it
        port = sock.getsockname()[1]
    # A server process imports these once (no CUDA yet); every worker is a fork of it.
    multiprocessing.set_forkserver_preload(["torch._dynamo", "torch.nn.parallel"])
    context = mp.start_processes(
        _worker,
        args=(world_size, backend, port, outdir, cfg),
        nprocs=world_size,
        join=False,
        start_method="forkserver",
    )
    deadline = cfg["t0"] + cfg["timeout"]
    while not context.join(timeout=0.5):
        if time.time() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(
                f"the {world_size} data-parallel workers did not finish within timeout={cfg['timeout']:g} s, "
                "so they were stopped: is the machine busy, or is a worker waiting for one that failed?"
            )


def run_data_parallel(
    world_size: int = 2,
    *,
    batch_size: int = 64,
    lr: float = 0.1,
    seed: int = 0,
    train_steps: int = 0,
    warmup_steps: int = 3,
    backend: str | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Start ``world_size`` DDP workers that each take one SGD step on their slice of the same
    batch (then time ``train_steps`` more), all within ``timeout`` seconds. Returns ``world_size,
    backend, batch_size, lr, seed, states`` (each worker's weights), ``step_times``, ``startup_s``
    and ``seconds``; raises RuntimeError with the workers' logs if one fails. Example:
        >>> run_data_parallel(2, batch_size=8)["backend"]          # doctest: +SKIP
        'gloo'
    """
    cfg = _config(world_size, batch_size, lr, seed, (train_steps, warmup_steps), timeout)
    backend = _pick_backend(backend, world_size)
    with tempfile.TemporaryDirectory(prefix="lab_ddp_") as outdir:
        try:
            _run_workers(world_size, backend, outdir, cfg)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{_workers_logs(outdir, world_size)}") from None
        except Exception as exc:
            raise RuntimeError(f"a data-parallel worker failed: {exc}\n{_workers_logs(outdir, world_size)}") from None
        out = [torch.load(Path(outdir, f"rank{r}.pt"), weights_only=True) for r in range(world_size)]
    return {
        "world_size": world_size,
        "backend": backend,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "states": [o["state"] for o in out],
        "step_times": [o["step_times"] for o in out],
        "startup_s": [o["startup_s"] for o in out],
        "seconds": time.time() - cfg["t0"],
    }

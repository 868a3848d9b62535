"""Data parallelism with real processes: ``torch.distributed`` + ``DistributedDataParallel``.

A notebook cannot hand a function it defined to a *spawned* process (the new
Python interpreter cannot import the notebook), so the worker code lives here
and :func:`run_data_parallel` starts it:

* one process per worker, started with the ``spawn`` method;
* backend ``nccl`` with one GPU per process when at least ``world_size`` CUDA
  GPUs (and at least 2) are present, else ``gloo`` on the CPU; the processes
  meet over TCP on 127.0.0.1 at a free port (nothing leaves the machine);
* every worker builds the same seeded :class:`~labsupport.models.DigitsCNN`,
  takes its own slice of each batch (:func:`shard_batch`), and lets DDP average
  the gradients during ``backward()``;
* each worker writes what it measured to a file in a temporary folder, which
  the parent reads back; the workers' own stdout and stderr go to a log file
  there too, so a notebook cell shows only what the parent prints.

Example:
    >>> import labsupport as lab
    >>> result = lab.run_data_parallel(world_size=2, train_steps=0)    # doctest: +SKIP
    >>> lab.check_ddp_equivalence(result)                               # doctest: +SKIP
    PASS  DDP: 2 workers on half batches end the step with the weights of 1 process on the whole batch (tolerance 1e-05)
"""
from __future__ import annotations

import datetime
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["free_port", "loopback_interface", "pick_backend", "shard_batch", "digits_batch",
           "sgd_step_state", "run_data_parallel", "NCCL_SAFE_ENV"]

#: Set in every worker before NCCL starts: NVLink multicast (NVLS) stays off.
#: It is not needed for DDP's all-reduce, and some shared hosts require it off.
NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it).

    Example:
        >>> 1024 <= free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def loopback_interface() -> str | None:
    """Name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS),
    which gloo is told to use so it never depends on the host name resolving.

    Example:
        >>> loopback_interface() in ("lo", "lo0", None)
        True
    """
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def pick_backend(world_size: int) -> str:
    """``"nccl"`` when at least ``world_size`` (and at least 2) CUDA GPUs exist, else ``"gloo"``.

    Example:
        >>> pick_backend(2) in ("gloo", "nccl")
        True
    """
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "nccl" if n_gpu >= max(2, world_size) else "gloo"


def shard_batch(inputs: torch.Tensor, targets: torch.Tensor, rank: int,
                world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Worker ``rank``'s contiguous slice of a batch split into ``world_size`` equal parts.

    Example:
        >>> x, y = torch.arange(8.0).reshape(4, 2), torch.arange(4)
        >>> shard_batch(x, y, 1, 2)[1]
        tensor([2, 3])
    """
    n = len(inputs)
    if n % world_size:
        raise ValueError(f"batch of {n} does not split into {world_size} equal shards")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    size = n // world_size
    return inputs[rank * size:(rank + 1) * size], targets[rank * size:(rank + 1) * size]


def digits_batch(batch_size: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch of training digits: ``batch_size`` images chosen by a seeded permutation.

    Example:
        >>> x, y = digits_batch(8)
        >>> tuple(x.shape), tuple(y.shape)
        ((8, 1, 8, 8), (8,))
    """
    from .data import DigitsDataset

    train = DigitsDataset("train")
    idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:batch_size]
    return train.images[idx], train.labels[idx]


def sgd_step_state(seed: int = 0, batch_size: int = 64, lr: float = 0.1,
                   dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """The reference for :func:`run_data_parallel`'s step, in ONE process: the
    seeded DigitsCNN takes one plain SGD step on the whole batch (mean
    cross-entropy), in ``dtype`` on the CPU. Returns its state dict.

    Example:
        >>> sorted(sgd_step_state(batch_size=4))[:2]
        ['classifier.0.bias', 'classifier.0.weight']
    """
    import torch.nn.functional as F

    from .models import DigitsCNN

    torch.manual_seed(seed)
    model = DigitsCNN().to(dtype)
    x, y = digits_batch(batch_size, seed)
    loss = F.cross_entropy(model(x.to(dtype)), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= lr * g
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------- worker side

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _worker(rank: int, world_size: int, backend: str, port: int, outdir: str,
            cfg: dict[str, Any]) -> None:
    """Entry point of one spawned worker (module-level, so spawn can import it)."""
    ready = time.time() - cfg["t0"]  # interpreter started, torch and labsupport imported
    log = open(os.path.join(outdir, f"worker{rank}.log"), "w", buffering=1)
    os.dup2(log.fileno(), 1)  # keep the notebook's output clean: the parent
    os.dup2(log.fileno(), 2)  # prints the log only if a worker fails
    sys.stdout, sys.stderr = log, log
    for key, value in NCCL_SAFE_ENV.items():
        os.environ[key] = value
    if backend == "gloo":
        iface = loopback_interface()
        if iface:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        torch.set_num_threads(cfg["threads"])
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .models import DigitsCNN

    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        # the equivalence test compares with a float64 CPU reference: plain fp32 math
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=cfg["timeout"]))
    try:
        # seconds since the parent started the processes, at each stage of this worker
        timeline = {"started": ready, "joined": time.time() - cfg["t0"]}
        out: dict[str, Any] = {"rank": rank, "world_size": world_size, "backend": backend,
                               "device_type": device.type, "startup_s": ready, "timeline": timeline}
        # 1. one SGD step on this worker's half of a fixed batch
        torch.manual_seed(cfg["seed"])
        model = DigitsCNN().to(device)
        ddp = DDP(model, device_ids=[rank] if backend == "nccl" else None)
        timeline["wrapped"] = time.time() - cfg["t0"]
        x, y = shard_batch(*cfg["batch"], rank, world_size)
        opt = torch.optim.SGD(ddp.parameters(), lr=cfg["lr"])
        loss = F.cross_entropy(ddp(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()          # DDP all-reduces and averages the gradients here
        opt.step()
        out["state"] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        timeline["stepped"] = time.time() - cfg["t0"]
        # 2. optional: time training steps on a global batch split over the workers
        if cfg["train_steps"] > 0:
            out.update(_time_training(ddp, rank, world_size, device, cfg))
            timeline["trained"] = time.time() - cfg["t0"]
        torch.save(out, os.path.join(outdir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
    log.flush()
    # The results are on disk. Skip the interpreter's teardown, which takes
    # seconds once DDP has imported torch._dynamo; the exit status stays 0.
    os._exit(0)


def _time_training(ddp, rank: int, world_size: int, device: torch.device,
                   cfg: dict[str, Any]) -> dict[str, Any]:
    import torch.nn.functional as F

    images, labels = (t.to(device) for t in cfg["train_data"])
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(cfg["seed"])
    times, losses = [], []
    global_batch = cfg["batch_size"]
    for step in range(cfg["train_steps"] + cfg["warmup_steps"]):
        idx = torch.randperm(len(images), generator=g)[:global_batch].to(device)
        x, y = shard_batch(images[idx], labels[idx], rank, world_size)
        _sync(device)
        start = time.perf_counter()
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        _sync(device)
        if step >= cfg["warmup_steps"]:
            times.append(time.perf_counter() - start)
            losses.append(float(loss.detach()))
    return {"step_times": times, "losses": losses}


# ----------------------------------------------------------------------------- parent side

def run_data_parallel(world_size: int = 2, *, batch_size: int = 64, lr: float = 0.1, seed: int = 0,
                      train_steps: int = 0, warmup_steps: int = 3, backend: str | None = None,
                      timeout: float = 120.0) -> dict[str, Any]:
    """Start ``world_size`` worker processes that each take one DDP step on their
    share of the same batch, and optionally time ``train_steps`` further steps.

    Returns a dict: ``world_size``, ``backend``, ``batch_size``, ``lr``,
    ``seed``, ``states`` (each worker's weights after the step, on the CPU),
    ``step_times`` (seconds per training step, per worker), ``losses``,
    ``seconds`` (wall time including process start-up), ``startup_s`` and
    ``timeline`` (per worker, seconds since launch when it had ``started``
    Python and torch, ``joined`` the process group, ``wrapped`` the model in
    DDP, ``stepped`` once and, with ``train_steps``, ``trained``). :func:`~labsupport.check_ddp_equivalence`
    compares ``states`` with one process's step on the whole batch.

    Raises ``RuntimeError`` with the workers' log when a worker fails.

    Example:
        >>> r = run_data_parallel(2, batch_size=8)            # doctest: +SKIP
        >>> r["backend"], len(r["states"])                     # doctest: +SKIP
        ('gloo', 2)
    """
    import torch.multiprocessing as mp

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} must be a multiple of world_size {world_size}")
    backend = backend or pick_backend(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise RuntimeError(f"nccl needs one GPU per worker: {world_size} workers, "
                           f"{torch.cuda.device_count()} GPU(s)")
    from .data import DigitsDataset

    # the data travels with the arguments, so workers need not load it again
    train = DigitsDataset("train")
    cfg = {"batch_size": batch_size, "lr": lr, "seed": seed, "train_steps": train_steps,
           "warmup_steps": warmup_steps, "timeout": timeout,
           "threads": max(1, torch.get_num_threads() // world_size),
           "batch": digits_batch(batch_size, seed),
           "train_data": (train.images, train.labels) if train_steps > 0 else None}
    outdir = tempfile.mkdtemp(prefix="lab_ddp_")
    start = time.perf_counter()
    cfg["t0"] = time.time()
    try:
        try:
            mp.start_processes(_worker, args=(world_size, backend, free_port(), outdir, cfg),
                               nprocs=world_size, join=True, start_method="spawn")
        except Exception as exc:
            logs = "".join(f"--- worker {r} ---\n" + _tail(Path(outdir, f"worker{r}.log"))
                           for r in range(world_size))
            raise RuntimeError(f"a data-parallel worker failed: {exc}\n{logs}") from None
        seconds = time.perf_counter() - start
        results = [torch.load(Path(outdir, f"rank{r}.pt"), weights_only=True)
                   for r in range(world_size)]
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return {"world_size": world_size, "backend": backend, "batch_size": batch_size, "lr": lr,
            "seed": seed, "states": [r["state"] for r in results],
            "step_times": [r.get("step_times", []) for r in results],
            "losses": [r.get("losses", []) for r in results], "seconds": seconds,
            "startup_s": [r["startup_s"] for r in results],
            "timeline": [r["timeline"] for r in results]}


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text()[-chars:]
    except OSError:
        return "(no log)\n"

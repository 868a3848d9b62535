"""Checks for notebook 10 (scaling up): mixed precision, data parallelism by hand,
and real DistributedDataParallel against one process.

Example:
    >>> import torch, torch.nn.functional as F, labsupport as lab
    >>> def autocast_forward(model, inputs, targets):
    ...     with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16):
    ...         logits = model(inputs)
    ...         loss = F.cross_entropy(logits, targets)
    ...     return logits, loss
    >>> lab.check_autocast_forward(autocast_forward)
    PASS  autocast: logits in bfloat16, loss in float32, weights still float32, loss within 2% of float32
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from .core import CheckError, call_student, describe, expect_tensor, passed

__all__ = ["check_autocast_forward", "check_data_parallel_grads", "check_ddp_equivalence"]


def _digits_cnn(seed: int, dtype: torch.dtype = torch.float32, device: Any = "cpu"):
    from ..models import DigitsCNN

    torch.manual_seed(seed)
    return DigitsCNN().to(device=device, dtype=dtype)


def _batch(n: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


# ----------------------------------------------------------------------------- autocast

def check_autocast_forward(autocast_forward: Callable, device: torch.device | str = "cpu") -> None:
    """Check ``autocast_forward(model, inputs, targets) -> (logits, loss)`` runs the
    forward pass and the loss under ``torch.autocast`` with bfloat16.

    Expected: logits in bfloat16 (autocast ran the convolutions and linear
    layers in bf16), the loss in float32 (autocast runs cross-entropy in fp32),
    the model's weights untouched and still float32, and the loss within 2% of
    a float32 forward pass (the reference, computed here without autocast).
    Runs on ``device`` (the CPU by default; bf16 autocast works on both).

    Example:
        >>> check_autocast_forward(lambda m, x, y: (m(x), F.cross_entropy(m(x), y)))  # doctest: +SKIP
        CheckError: logits have dtype torch.float32; expected torch.bfloat16. ...
    """
    __tracebackhide__ = True
    device = torch.device(device)
    model = _digits_cnn(0, device=device)
    with torch.no_grad():  # spread the logits, so a softmax before the loss shows
        model.classifier[-1].weight.mul_(20.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _batch(16, 1)
    x, y = x.to(device), y.to(device)
    with torch.no_grad():
        ref_loss = float(F.cross_entropy(model(x), y))
    got = call_student(autocast_forward, model, x, y, what="your autocast_forward(model, inputs, targets)")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise CheckError(f"expected a pair (logits, loss), got {describe(got)}. "
                         f"End with `return logits, loss`.")
    logits, loss = got
    logits = expect_tensor(logits, "logits", shape=(16, 10), device=device)
    loss = expect_tensor(loss, "loss", shape=(), device=device)
    weights = [p for p in model.parameters()]
    if any(p.dtype != torch.float32 for p in weights):
        raise CheckError(f"the model's weights are now {weights[0].dtype}; expected torch.float32. "
                         f"Don't convert the model (model.to(torch.bfloat16) / .half()): autocast "
                         f"keeps fp32 master weights and casts each operation's inputs instead.")
    if logits.dtype != torch.bfloat16:
        raise CheckError(f"logits have dtype {logits.dtype}; expected torch.bfloat16. The forward "
                         f"pass did not run under autocast: wrap it in `with torch.autocast("
                         f"device_type=inputs.device.type, dtype=torch.bfloat16):` (the device "
                         f"type must match where the data is, here {device.type!r}).")
    if loss.dtype != torch.float32:
        raise CheckError(f"loss has dtype {loss.dtype}; expected torch.float32. Compute the loss "
                         f"inside the autocast block: autocast runs cross_entropy in float32, "
                         f"while a loss taken outside it on bf16 logits stays bf16.")
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    if changed:
        raise CheckError(f"the weights changed ({changed[0]}, ...): autocast_forward should only "
                         f"compute logits and loss, not take an optimizer step.")
    rel = abs(float(loss.detach()) - ref_loss) / abs(ref_loss)
    if rel > 0.02:
        raise CheckError(f"loss is {float(loss.detach()):.4g}; expected about {ref_loss:.4g} (the float32 "
                         f"loss, within 2%). Use F.cross_entropy(logits, targets) with its default "
                         f"mean reduction on the model's raw logits (no softmax first).")
    if not loss.requires_grad:
        raise CheckError("the loss does not require grad: don't compute it under torch.no_grad(); "
                         "the training step calls loss.backward() on it.")
    passed("autocast: logits in bfloat16, loss in float32, weights still float32, "
           "loss within 2% of float32")


# ----------------------------------------------------------------------------- data parallel by hand

def _full_batch_grads(model, x, y) -> list[torch.Tensor]:
    loss = F.cross_entropy(model(x), y)
    return [g.detach() for g in torch.autograd.grad(loss, list(model.parameters()))]


def _max_rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    num = max(float((u - v).abs().max()) for u, v in zip(a, b))
    den = max(float(v.abs().max()) for v in b)
    return num / max(den, 1e-30)


def check_data_parallel_grads(data_parallel_grads: Callable) -> None:
    """Check ``data_parallel_grads(model, inputs, targets, world_size)``: split the
    batch into ``world_size`` equal shards, compute each shard's mean-loss
    gradient (one "worker" each), and return their **average**, one tensor per
    parameter in ``model.parameters()`` order.

    The reference is autograd's gradient of the mean cross-entropy over the
    whole batch, in float64: with equal shards the average of the shards' mean
    gradients equals it exactly (up to rounding). Recognises a sum instead of
    an average, only one shard used, and gradients stored by reference
    (``p.grad`` instead of ``p.grad.clone()``, overwritten by the next shard).

    Example:
        >>> def data_parallel_grads(model, inputs, targets, world_size):
        ...     n, total = len(inputs) // world_size, None
        ...     for r in range(world_size):
        ...         model.zero_grad()
        ...         F.cross_entropy(model(inputs[r*n:(r+1)*n]), targets[r*n:(r+1)*n]).backward()
        ...         g = [p.grad.clone() for p in model.parameters()]
        ...         total = g if total is None else [a + b for a, b in zip(total, g)]
        ...     return [t / world_size for t in total]
        >>> check_data_parallel_grads(data_parallel_grads)
        PASS  data_parallel_grads: the average of the shards' gradients equals the whole-batch gradient (world_size 2 and 3)
    """
    __tracebackhide__ = True
    worst = 0.0
    for case, (n, world_size) in enumerate([(12, 2), (12, 3)]):
        model = _digits_cnn(10 + case, torch.float64)
        x, y = _batch(n, 20 + case, torch.float64)
        before = [p.detach().clone() for p in model.parameters()]
        expected = _full_batch_grads(model, x, y)
        shard_grads = []
        for r in range(world_size):
            s = slice(r * n // world_size, (r + 1) * n // world_size)
            shard_grads.append(_full_batch_grads(model, x[s], y[s]))
        model.zero_grad(set_to_none=True)
        got = call_student(data_parallel_grads, model, x, y, world_size,
                           what="your data_parallel_grads(model, inputs, targets, world_size)")
        if any(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)):
            raise CheckError("the model's weights changed: data_parallel_grads should only compute "
                             "gradients, not take an optimizer step.")
        if isinstance(got, torch.Tensor) or not isinstance(got, (list, tuple)):
            raise CheckError(f"expected a list with one gradient tensor per parameter "
                             f"({len(expected)}), got {describe(got)}")
        if len(got) != len(expected):
            raise CheckError(f"expected {len(expected)} gradients (one per parameter, in "
                             f"model.parameters() order), got {len(got)}")
        got = [expect_tensor(g, f"gradient {i}", shape=tuple(e.shape))
               for i, (g, e) in enumerate(zip(got, expected))]
        got = [g.detach().to(torch.float64) for g in got]
        err = _max_rel(got, expected)
        worst = max(worst, err)
        if err < 1e-6:
            continue
        summed = [sum(gs) for gs in zip(*shard_grads)]
        if _max_rel(got, summed) < 1e-6:
            raise CheckError(f"the gradients are {world_size}x too large: that is the SUM of the "
                             f"{world_size} shards' gradients. Each shard's loss is already a mean, "
                             f"so average them (divide by world_size), as DDP does.")
        for r, gs in enumerate(shard_grads):
            if _max_rel(got, gs) < 1e-6:
                which = "the last" if r == world_size - 1 else f"shard {r}'s"
                raise CheckError(f"the result equals {which} shard's gradient alone. Average over "
                                 f"all shards; if you kept p.grad itself, store p.grad.clone() "
                                 f"(zero_grad/backward reuse or replace the .grad tensors).")
        raise CheckError(f"the averaged gradients do not match the whole-batch gradient "
                         f"(max rel. error {err:.3g} > 1e-06, world_size={world_size}). Give each "
                         f"shard inputs[r*n//world_size:(r+1)*n//world_size], use the mean "
                         f"cross-entropy, and zero the gradients before each shard's backward().")
    passed("data_parallel_grads: the average of the shards' gradients equals the whole-batch "
           "gradient (world_size 2 and 3)")


# ----------------------------------------------------------------------------- real DDP

def _state_error(got: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor],
                 atol: float, rtol: float) -> tuple[float, float]:
    """Largest |got - ref| and the largest excess over atol + rtol*|ref|, over all tensors."""
    worst_abs, worst_excess = 0.0, -math.inf
    for k, r in ref.items():
        d = (got[k].double() - r.double()).abs()
        worst_abs = max(worst_abs, float(d.max()))
        worst_excess = max(worst_excess, float((d - atol - rtol * r.double().abs()).max()))
    return worst_abs, worst_excess


def check_ddp_equivalence(result: Any, *, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Check the result of :func:`labsupport.run_data_parallel`: after one SGD
    step, every worker (each on its own slice of the batch, gradients averaged
    by DistributedDataParallel) holds the same weights, and those are the
    weights ONE process gets from the same step on the WHOLE batch.

    The reference is recomputed here, in float64 on the CPU, with plain
    autograd and no torch.distributed. Tolerance: ``|ddp - ref| <= atol +
    rtol * |ref|`` for every weight. Names the likely mistake: replicas that
    drifted apart (no DDP), a step on one worker's half only (no averaging), or
    a step with the summed gradient.

    Example:
        >>> import labsupport as lab
        >>> check_ddp_equivalence(lab.run_data_parallel(world_size=2))     # doctest: +SKIP
        PASS  DDP: 2 workers on 1/2 of the batch each end the step with the weights of 1 process on the whole batch (tolerance 1e-05)
    """
    __tracebackhide__ = True
    from ..distributed import sgd_step_state

    need = ("world_size", "batch_size", "lr", "seed", "states")
    if not isinstance(result, Mapping) or any(k not in result for k in need):
        raise CheckError(f"expected the dict returned by lab.run_data_parallel(...) (keys "
                         f"{', '.join(need)}), got {describe(result)}")
    states = result["states"]
    ws = result["world_size"]
    if not isinstance(states, (list, tuple)) or len(states) != ws or ws < 1:
        raise CheckError(f"expected one state per worker ({ws}), got {describe(states)}")
    ref = sgd_step_state(result["seed"], result["batch_size"], result["lr"])
    for r, state in enumerate(states):
        if not isinstance(state, Mapping) or set(state) != set(ref):
            raise CheckError(f"worker {r}'s state is not a DigitsCNN state dict: got {describe(state)}")
        for k, v in state.items():
            expect_tensor(v, f"worker {r}'s {k}", shape=tuple(ref[k].shape))
    for r in range(1, ws):
        diff, _ = _state_error(states[r], states[0], 0.0, 0.0)
        if diff > atol:
            raise CheckError(f"worker {r}'s weights differ from worker 0's by up to {diff:.3g}: the "
                             f"replicas drifted apart. Each worker stepped on its own gradient; wrap "
                             f"the model in DistributedDataParallel so backward() averages gradients.")
    worst, excess = _state_error(states[0], ref, atol, rtol)
    if excess > 0:
        if ws > 1:
            half = _step_on_shard(result, shard=0)
            if _state_error(states[0], half, atol, rtol)[1] <= 0:
                raise CheckError("the weights equal a step on worker 0's slice alone: the gradients "
                                 "were not averaged across workers (is the model wrapped in DDP?).")
            summed = sgd_step_state(result["seed"], result["batch_size"], result["lr"] * ws)
            if _state_error(states[0], summed, atol, rtol)[1] <= 0:
                raise CheckError(f"the step is {ws}x too large: the gradients were summed across "
                                 f"workers instead of averaged.")
        raise CheckError(f"the workers' weights differ from one process's step on the whole batch "
                         f"by up to {worst:.3g} (tolerance atol={atol:g}, rtol={rtol:g}).")
    who = f"{ws} workers on 1/{ws} of the batch each end" if ws > 1 else "1 worker ends"
    passed(f"DDP: {who} the step with the weights of 1 process on the whole batch (tolerance {atol:g})")


def _step_on_shard(result: Mapping[str, Any], shard: int) -> dict[str, torch.Tensor]:
    """One process's SGD step (float64, CPU) on worker ``shard``'s slice only:
    what a worker ends with when gradients are NOT averaged."""
    from ..distributed import digits_batch, shard_batch

    torch.manual_seed(result["seed"])
    model = _digits_cnn(result["seed"], torch.float64)
    x, y = digits_batch(result["batch_size"], result["seed"])
    x, y = shard_batch(x, y, shard, result["world_size"])
    grads = torch.autograd.grad(F.cross_entropy(model(x.double()), y), list(model.parameters()))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= result["lr"] * g
    return {k: v.detach().clone() for k, v in model.state_dict().items()}

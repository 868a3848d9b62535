"""Checks for notebook 10 (scaling up): Module.to, autocast with GradScaler, data parallelism, DDP."""
from typing import Any, Callable, Mapping
import torch
import torch.nn.functional as F
from .core import (CheckError, check_prediction, describe, exercise, expect_function, expect_tensor, first_mistake, passed,
                   rel_error, run_student)

__all__ = ["check_to_prediction", "check_amp_step", "check_data_parallel_grads", "check_ddp_equivalence"]

def _cnn(seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    from ..models import DigitsCNN
    return torch.manual_seed(seed) and DigitsCNN().to(dtype)

def _batch(n: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)

def _near(a: Mapping, b: Mapping, rtol: float = 1e-4, atol: float = 1e-6) -> bool:  # every tensor of b, in a
    return all(torch.allclose(a[k].double(), b[k].double(), rtol=rtol, atol=atol) for k in b)

def _grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list:
    return list(torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters())))

def _flat(tensors: Any) -> torch.Tensor: return torch.cat([t.detach().double().flatten() for t in tensors])  # noqa

@exercise("10.1", "does Module.to keep the Parameter objects?")
def check_to_prediction(prediction: Any) -> None:
    """Predict-then-run: after ``model.to(...)``, is ``model.weight`` the object it was before?"""
    before, _ = (model := torch.nn.Linear(2, 2)).weight, model.to(torch.float64)   # a real conversion, on any machine
    check_prediction("Module.to", prediction, "same" if model.weight is before else "new", choices=("same", "new"),
                     why="Module.to swaps each parameter's data in place, so an optimizer built earlier holds the "
                         "live parameters; the hazard is optimizer state or a loaded state_dict on the old device.",
                     mistakes={"new": "That belief is the usual reason given for the rule, but it is not why."})

def _amp_reference(batches: list, scale: float = 1024.0) -> list[tuple[dict, float]]:
    model, out = _cnn(3), []     # loss scaling by hand: on inf/NaN skip the step and halve, else step and double
    for x, y in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            grads = torch.autograd.grad(F.cross_entropy(model(x), y) * scale, list(model.parameters()))
        if finite := all(bool(torch.isfinite(g).all()) for g in grads):
            [p.data.sub_(0.1 * g / scale) for p, g in zip(model.parameters(), grads)]
        out.append(({k: v.clone() for k, v in model.state_dict().items()}, scale := scale * (2 if finite else 0.5)))
    return out

@exercise("10.2", "a training step with GradScaler")
def check_amp_step(amp_step: Callable) -> None:
    """``amp_step(model, optimizer, scaler, inputs, targets, dtype)``: 3 steps, the 2nd on inf (fp16 overflow)."""
    expect_function(amp_step, "amp_step")
    (x1, y1), (x3, y3), model = _batch(16, 5), _batch(16, 6), _cnn(3)
    ref = _amp_reference(batches := [(x1, y1), (torch.full_like(x1, float("inf")), y1), (x3, y3)])
    opt, init = torch.optim.SGD(model.parameters(), lr=0.1), {k: v.clone() for k, v in model.state_dict().items()}
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    for i, (x, y) in enumerate(batches):
        if not isinstance(loss := run_student(amp_step, model, opt, scaler, x, y, torch.bfloat16, what="amp_step"),
                          torch.Tensor) or loss.dim() != 0:
            raise CheckError("amp_step must return the loss", expected="a 0-dim tensor", got=describe(loss))
        state, step = model.state_dict(), ("first", "second (inf gradients)", "third")[i]
        if not _near(state, ref[i][0]):
            raise CheckError(f"the weights after the {step} step differ from the reference", hint=first_mistake(
                state, [(lambda s: not all(torch.isfinite(v).all() for v in s.values()) or not _near(s, init, 0, 1.0),
                         "optimizer.step() stepped on the scaled (1024x) or inf gradients: scaler.step(optimizer) "
                         "unscales them and skips a step on inf"),
                        (lambda s: i == 2 and _near(s, ref[0][0]), "the third step was skipped too: zero the "
                         "gradients every step, or the skipped step's inf stays in .grad")])
                or "run the forward pass and the loss under torch.autocast(inputs.device.type, dtype=dtype)")
        if scaler.get_scale() != ref[i][1]:
            raise CheckError(f"the scale after the {step} step is {scaler.get_scale():g}, expected {ref[i][1]:g}",
                             hint="call scaler.update() after scaler.step(optimizer)")
    passed("amp_step: the step on inf gradients was skipped and the scale halved; the others stepped and doubled it")

@exercise("10.3", "data parallelism by hand")
def check_data_parallel_grads(data_parallel_grads: Callable) -> None:
    """``data_parallel_grads(model, inputs, targets, world_size)`` against autograd's whole-batch gradient."""
    for case, (n, ws) in enumerate([(12, 2), (12, 3)]):
        model, (x, y), k = _cnn(10 + case, torch.float64), _batch(n, 20 + case, torch.float64), n // ws
        want, mean = _grads(model, x, y), lambda gs: [sum(g) / ws for g in zip(*gs)]
        shards = [_grads(model, x[r * k:(r + 1) * k], y[r * k:(r + 1) * k]) for r in range(ws)]
        got = run_student(data_parallel_grads, model, x, y, ws, what="your data_parallel_grads(...)")
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise CheckError("one gradient per parameter", expected=f"a list of {len(want)} tensors",
                             got=describe(got))
        got = [expect_tensor(g, f"gradient {i}", shape=w.shape).double() for i, (g, w) in enumerate(zip(got, want))]
        if rel_error(_flat(got), _flat(want)) > 1e-6:
            raise CheckError(f"the averaged gradients differ from the whole-batch gradient (world_size {ws})", hint=(
                first_mistake(got, [
                    ([sum(g) for g in zip(*shards)], "gradients summed, not averaged: each shard's loss is already "
                     "a mean, so divide the sum by world_size, as DDP does"),
                    ([g * k for g in want], "wrong loss reduction: reduction='sum' scales each shard's gradient by "
                     "the shard size; keep F.cross_entropy's mean"),
                    (mean([[sum(g) for g in zip(*shards[:r + 1])] for r in range(ws)]), "gradients not zeroed "
                     "between shards: backward() adds to .grad"),
                    (mean(shards[:-1]), "a shard was dropped: range(world_size) covers every rank"),
                    (mean([_grads(model, x[r:r + k], y[r:r + k]) for r in range(ws)]), "the shards overlap: rank r "
                     "starts at r * shard, not at r"),
                    (lambda g: any(rel_error(_flat(g), _flat(s)) < 1e-6 for s in shards), "one shard's gradient "
                     "alone: keep a copy (p.grad.clone()) of every shard's gradients and average them all")])
                or "world_size equal contiguous shards, the mean loss of each, the average of their gradients"))
    passed("data_parallel_grads: the shards' average equals the whole-batch gradient (world_size 2 and 3)")

def check_ddp_equivalence(result: Any) -> None:
    """``lab.run_data_parallel``'s workers after one DDP step against ONE process's SGD step (float64, CPU)."""
    from ..distributed import sgd_step_state
    keys = ("world_size", "batch_size", "lr", "seed", "states")
    if not isinstance(result, Mapping) or any(not isinstance(result.get(k), t) for k, t in zip(keys, (int,) * 2 + (float, int))):
        raise CheckError(f"expected what lab.run_data_parallel returns (keys {', '.join(keys)})", got=describe(result))
    ws, states, args, lr = result["world_size"], result.get("states"), (result["seed"], result["batch_size"]), result["lr"]
    ref = sgd_step_state(*args, lr)
    if not isinstance(states, list) or len(states) != ws or not states or any(
            not isinstance(s, Mapping) or set(s) != set(ref) for s in states):
        raise CheckError(f"expected one DigitsCNN state dict per worker ({ws})", got=describe(states))
    [expect_tensor(v, f"worker {r}'s {k}", shape=tuple(ref[k].shape)) for r, s in enumerate(states) for k, v in s.items()]
    if not all(_near(s, states[0]) for s in states):
        raise CheckError("the replicas drifted apart", hint="each worker stepped on its own gradient: use DDP")
    if not _near(states[0], ref):
        raise CheckError("the workers' weights differ from one process's step on the whole batch", hint=first_mistake(
            states[0], [(lambda s: ws > 1 and _near(s, sgd_step_state(*args, lr, shard=(0, ws))), "the gradients "
                         "were not averaged across workers (a step on worker 0's slice alone)"),
                        (lambda s: ws > 1 and _near(s, sgd_step_state(*args, lr * ws)), f"the step is {ws}x too "
                         "large: gradients summed, not averaged")]))
    passed(f"DDP: {ws} workers on 1/{ws} of the batch each end the step with one process's weights (whole batch)")

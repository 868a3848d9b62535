"""Checks of notebook 10: the references pass, each known mistake is named, bad inputs get a message."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labsupport as lab
from labsupport.checks import scaling


# ----------------------------------------------------------------------------- autocast

def autocast_forward(model, inputs, targets):
    with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16):
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
    return logits, loss


def test_autocast_reference_passes(capsys):
    lab.check_autocast_forward(autocast_forward)
    assert capsys.readouterr().out.startswith("PASS  autocast:")


def no_autocast(model, inputs, targets):
    logits = model(inputs)
    return logits, F.cross_entropy(logits, targets)


def wrong_device_type(model, inputs, targets):
    with torch.autocast(device_type="cuda" if inputs.device.type == "cpu" else "cpu",
                        dtype=torch.bfloat16, enabled=False):
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
    return logits, loss


def model_to_bf16(model, inputs, targets):
    model.to(torch.bfloat16)
    logits = model(inputs.to(torch.bfloat16))
    return logits, F.cross_entropy(logits.float(), targets)


def loss_outside(model, inputs, targets):
    with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16):
        logits = model(inputs)
    return logits, F.cross_entropy(logits, targets)


def softmax_first(model, inputs, targets):
    with torch.autocast(device_type=inputs.device.type, dtype=torch.bfloat16):
        logits = model(inputs)
        loss = F.cross_entropy(logits.softmax(dim=1), targets)
    return logits, loss


def under_no_grad(model, inputs, targets):
    with torch.no_grad():
        return autocast_forward(model, inputs, targets)


def takes_a_step(model, inputs, targets):
    logits, loss = autocast_forward(model, inputs, targets)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    return logits, loss


def stub(*args):
    raise NotImplementedError("Exercise 1: autocast_forward")


@pytest.mark.parametrize("wrong, fragment", [
    (no_autocast, "did not run under autocast"),
    (wrong_device_type, "device type must match"),
    (model_to_bf16, "Don't convert the model"),
    (loss_outside, "inside the autocast block"),
    (softmax_first, "no softmax first"),
    (under_no_grad, "does not require grad"),
    (takes_a_step, "not take an optimizer step"),
    (stub, "not written yet"),
    (lambda m, x, y: None, "a pair \\(logits, loss\\), got None"),
    (lambda m, x, y: (m(x).detach().numpy(), torch.tensor(1.0)), "numpy"),
    (lambda m, x, y: (m(x)[:4], torch.tensor(1.0)), "shape"),
    (lambda m, x, y: (m(x), torch.tensor(float("nan"))), "NaN"),
    (lambda m, x, y: [m(x)], "a pair"),
    ("not a function", "function"),
])
def test_autocast_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_autocast_forward(wrong)


# ----------------------------------------------------------------------------- data parallel by hand

def data_parallel_grads(model, inputs, targets, world_size):
    n, total = len(inputs) // world_size, None
    for r in range(world_size):
        model.zero_grad()
        F.cross_entropy(model(inputs[r * n:(r + 1) * n]), targets[r * n:(r + 1) * n]).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
    return [t / world_size for t in total]


def test_data_parallel_reference_passes(capsys):
    lab.check_data_parallel_grads(data_parallel_grads)
    assert capsys.readouterr().out.startswith("PASS  data_parallel_grads:")


def summed(model, inputs, targets, world_size):
    return [g * world_size for g in data_parallel_grads(model, inputs, targets, world_size)]


def by_reference(model, inputs, targets, world_size):
    n, kept = len(inputs) // world_size, []
    for r in range(world_size):
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(inputs[r * n:(r + 1) * n]), targets[r * n:(r + 1) * n]).backward()
        kept.append([p.grad for p in model.parameters()])      # no clone: overwritten next time
    return [sum(gs) / world_size for gs in zip(*kept)]


def first_shard_only(model, inputs, targets, world_size):
    n = len(inputs) // world_size
    model.zero_grad()
    F.cross_entropy(model(inputs[:n]), targets[:n]).backward()
    return [p.grad.clone() for p in model.parameters()]


def wrong_split(model, inputs, targets, world_size):
    model.zero_grad()
    F.cross_entropy(model(inputs[::2]), targets[::2]).backward()
    return [p.grad.clone() for p in model.parameters()]


def steps(model, inputs, targets, world_size):
    grads = data_parallel_grads(model, inputs, targets, world_size)
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= g
    return grads


@pytest.mark.parametrize("wrong, fragment", [
    (summed, "SUM of the"),
    (by_reference, "the last shard's gradient alone"),
    (first_shard_only, "shard 0's shard's gradient alone"),
    (wrong_split, "do not match the whole-batch gradient"),
    (steps, "weights changed"),
    (lambda m, x, y, w: None, "got None"),
    (lambda m, x, y, w: torch.zeros(3), "one gradient tensor per parameter"),
    (lambda m, x, y, w: [torch.zeros(1)], "expected 8 gradients"),
    (lambda m, x, y, w: [np.zeros(1)] * 8, "numpy"),
    (lambda m, x, y, w: [torch.zeros(1)] * 8, "shape"),
    (lambda m, x, y, w: [torch.full_like(p, float("nan")) for p in m.parameters()], "NaN"),
    (lambda m, x, y, w: (_ for _ in ()).throw(NotImplementedError("Exercise 2")), "not written yet"),
])
def test_data_parallel_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_data_parallel_grads(wrong)


# ----------------------------------------------------------------------------- real DDP (synthesised results)

def result_with(states, world_size=2, lr=0.1):
    return {"world_size": world_size, "batch_size": 16, "lr": lr, "seed": 0, "states": states}


def float32(state):
    return {k: v.float() for k, v in state.items()}


@pytest.fixture(scope="module")
def reference():
    return float32(lab.sgd_step_state(0, 16, 0.1))


def test_ddp_check_accepts_the_one_process_step(reference, capsys):
    lab.check_ddp_equivalence(result_with([reference, reference]))
    assert "PASS  DDP: 2 workers on 1/2 of the batch" in capsys.readouterr().out


def test_ddp_check_names_drifted_replicas(reference):
    other = {k: v + 1e-3 for k, v in reference.items()}
    with pytest.raises(lab.CheckError, match="replicas drifted apart"):
        lab.check_ddp_equivalence(result_with([reference, other]))


def test_ddp_check_names_a_step_on_one_half(reference):
    half = float32(scaling._step_on_shard(result_with([reference] * 2), shard=0))
    with pytest.raises(lab.CheckError, match="not averaged"):
        lab.check_ddp_equivalence(result_with([half, half]))


def test_ddp_check_names_summed_gradients():
    summed_state = float32(lab.sgd_step_state(0, 16, 0.2))
    with pytest.raises(lab.CheckError, match="summed across workers"):
        lab.check_ddp_equivalence(result_with([summed_state, summed_state]))


def test_ddp_check_gives_the_error_otherwise(reference):
    off = {k: v + 1e-2 for k, v in reference.items()}
    with pytest.raises(lab.CheckError, match="differ from one process's step"):
        lab.check_ddp_equivalence(result_with([off, off]))


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"),
    ([1, 2], "list of length 2"),
    ({"states": []}, "keys world_size"),
])
def test_ddp_check_rejects_what_is_not_a_result(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_ddp_equivalence(bad)


def test_ddp_check_rejects_broken_states(reference):
    with pytest.raises(lab.CheckError, match="one state per worker"):
        lab.check_ddp_equivalence(result_with([reference]))
    with pytest.raises(lab.CheckError, match="not a DigitsCNN state dict"):
        lab.check_ddp_equivalence(result_with([reference, {"w": torch.zeros(1)}]))
    nan = dict(reference, **{"classifier.2.bias": torch.full((10,), float("nan"))})
    with pytest.raises(lab.CheckError, match="NaN"):
        lab.check_ddp_equivalence(result_with([reference, nan]))
    short = dict(reference, **{"classifier.2.bias": torch.zeros(3)})
    with pytest.raises(lab.CheckError, match="shape"):
        lab.check_ddp_equivalence(result_with([reference, short]))

"""Checks of notebook 10: right answers pass (in every allowed design), each listed mistake is named,
the starting code never gets its fix, bad inputs get one clear sentence, predictions keep the first answer."""

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.cpu.amp import autocast as cpu_autocast

import labsupport as lab
from labsupport.checks import nb10_scaling_up as nb10
from labsupport.checks import running


def _label(value) -> str:
    """A parameter's test id that is the same in every process (a function by its name, not its address)."""
    if isinstance(value, str):
        return value
    return getattr(value, "__name__", type(value).__name__)


def never_returns(*args):
    while True:
        time.sleep(0.01)


# ----------------------------------------------------------------------------- 10.1 Module.to prediction


@pytest.mark.parametrize("answer", ["same", "Same", " SAME "])
def test_to_prediction_is_measured(answer, capsys):
    lab.check_to_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS  Module.to: 'same' is right (recorded answer: 'same').")


def test_a_wrong_then_right_to_prediction_keeps_the_first_and_never_passes(capsys):
    lab.check_to_prediction("new")
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT  Module.to: what happens is 'same' (recorded answer: 'new').")
    assert "Now explain: if the optimizer built before .to()" in first
    assert "swaps each parameter's data" not in first  # the explanation waits for lab.hint
    lab.check_to_prediction("same")
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 'new'" in second
    assert "usual reason given for the rule" in second
    lab.hint("10.1")
    assert "swaps each parameter's data" in capsys.readouterr().out


@pytest.mark.parametrize("answer", ["maybe", None, 3, ["same"], torch.ones(2), float("nan"), True], ids=repr)
def test_to_prediction_refuses_what_is_no_answer(answer, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_to_prediction(answer)
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out


# ----------------------------------------------------------------------------- 10.2 GradScaler step


def amp_step(model, optimizer, scaler, inputs, targets, dtype):
    """The notebook's solution."""
    with torch.autocast(device_type=inputs.device.type, dtype=dtype):
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def _scaled_update(optimizer, scaler, loss):
    """The notebook's scaler calls after the forward pass, which the variants below share."""
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def amp_step_loss_outside(model, optimizer, scaler, inputs, targets, dtype):
    """Correct: only the forward pass under autocast, the loss after it; zero_grad first, set_to_none=False."""
    optimizer.zero_grad(set_to_none=False)
    with torch.autocast(inputs.device.type, dtype=dtype):
        logits = model(inputs)
    loss = F.cross_entropy(logits.float(), targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # as before gradient clipping
    scaler.step(optimizer)
    scaler.update()
    return loss.detach().clone()


def amp_step_model_zero_grad(model, optimizer, scaler, inputs, targets, dtype):
    """Correct: model.zero_grad() at the end, backward inside the autocast block."""
    with torch.autocast(device_type=str(inputs.device.type), dtype=dtype, enabled=True):
        loss = F.cross_entropy(model(inputs), targets)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    model.zero_grad()
    return loss.detach()


def amp_step_device_from_parameters(model, optimizer, scaler, inputs, targets, dtype):
    """Correct: the device type read from the model's parameters, through a local name."""
    device = next(model.parameters()).device
    kind = device.type
    with torch.autocast(kind, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def amp_step_nested_forward(model, optimizer, scaler, inputs, targets, dtype):
    """Correct: the forward pass in a helper defined inside, whose own argument gives the device type."""

    def forward(x, y):
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            return F.cross_entropy(model(x), y)

    loss = forward(inputs, targets)
    return _scaled_update(optimizer, scaler, loss)


def amp_step_star_args(*args):
    """Correct: the arguments taken as *args and unpacked."""
    model, optimizer, scaler, inputs, targets, dtype = args
    with torch.autocast(device_type=inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


@pytest.mark.parametrize(
    "student",
    [
        amp_step,
        amp_step_loss_outside,
        amp_step_model_zero_grad,
        amp_step_device_from_parameters,
        amp_step_nested_forward,
        amp_step_star_args,
    ],
)
def test_amp_step_accepts_every_correct_design(student, capsys):
    lab.check_amp_step(student)
    assert capsys.readouterr().out == (
        "PASS  amp_step: the step on inf gradients was skipped and the scale halved; the others stepped and doubled it\n"
    )


def bf16_always(model, optimizer, scaler, inputs, targets, dtype):
    return amp_step(model, optimizer, scaler, inputs, targets, torch.bfloat16)


def fp16_always(model, optimizer, scaler, inputs, targets, dtype):
    return amp_step(model, optimizer, scaler, inputs, targets, torch.float16)


def no_autocast(model, optimizer, scaler, inputs, targets, dtype):
    loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def autocast_for_cuda(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(device_type="cuda", dtype=dtype, enabled=torch.cuda.is_available()):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def optimizer_step_no_update(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    optimizer.step()
    return loss.detach()


def no_zero_grad(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def zero_grad_before_step(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    scaler.scale(loss).backward()
    optimizer.zero_grad(set_to_none=False)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def zero_grad_to_none_before_step(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    scaler.scale(loss).backward()
    optimizer.zero_grad()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def not_scaled(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def scales_a_number(model, optimizer, scaler, inputs, targets, dtype):
    """Audit 7: the loss made a number before it is scaled (a bare ValueError from the scaler)."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss.item()).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def optimizer_step_then_update(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
    return loss.detach()


def stepped_twice(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    optimizer.step()  # out of habit
    scaler.update()
    return loss.detach()


def no_update(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    return loss.detach()


def own_scaler(model, optimizer, scaler, inputs, targets, dtype):
    mine = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    return amp_step(model, optimizer, mine, inputs, targets, dtype)


def unscaled_by_hand_no_skip(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    optimizer.step()
    scaler.update()
    return loss.detach()


def returns_scaled_loss(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaled.detach()


def not_detached(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def cpu_amp_autocast(model, optimizer, scaler, inputs, targets, dtype):
    with torch.cpu.amp.autocast(dtype=dtype):  # the CPU's own autocast: float32 on a GPU
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def cpu_autocast_imported(model, optimizer, scaler, inputs, targets, dtype):
    with cpu_autocast(dtype=dtype):  # torch.cpu.amp.autocast under another name
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def device_chosen_in_the_code(model, optimizer, scaler, inputs, targets, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU inputs on a GPU machine: no autocast
    with torch.autocast(device, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def inf_guard_before_the_scaler(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    if not torch.isfinite(loss):  # the scaler never hears of the overflow
        return loss.detach()
    return _scaled_update(optimizer, scaler, loss)


def backward_on_the_unscaled_loss(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaled = scaler.scale(loss)  # noqa: F841 (scaled, then not used)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def unscaled_twice(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit: unscale_ before clipping, then again: was "raised RuntimeError", no cause named."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def scaler_stepped_twice(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit: two scaler.step calls in one iteration: was "raised RuntimeError", no cause named."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def autocast_on_cuda(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 2: autocast for "cuda" on CPU inputs ran in float32 and was told only "no autocast"."""
    with torch.autocast(device_type="cuda", dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def autocast_follows_the_scaler(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 2: autocast enabled only with the scaler: bf16 without a scaler ran in float32 ("no autocast")."""
    with torch.autocast(inputs.device.type, dtype=dtype, enabled=scaler.is_enabled()):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def unscaled_after_the_step(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 2: unscale_ after scaler.step: was "raised RuntimeError", no cause named."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.unscale_(optimizer)
    scaler.update()
    return loss.detach()


def model_to_dtype(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit: the model converted to dtype was named "loss in the autocast dtype"."""
    model.to(dtype)
    return amp_step(model, optimizer, scaler, inputs, targets, dtype)


def model_half(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit: model.half() made the GradScaler refuse float16 gradients: no cause named."""
    model.half()
    return amp_step(model, optimizer, scaler, inputs, targets, dtype)


def scale_fixed_in_update(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 5: update() given the initial scale: a generic "the scale is 1024, expected 2048"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update(1024.0)
    return loss.detach()


def scale_kept_in_update(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update(scaler.get_scale())
    return loss.detach()


def step_only_on_a_finite_loss(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 5: the scaler's step skipped by hand on the inf batch: named "update without scaler.step"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    if torch.isfinite(loss):
        scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def summed_loss(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 5: a generic "the weights differ"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets, reduction="sum")
    return _scaled_update(optimizer, scaler, loss)


def softmax_before_the_loss(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 5: a generic "the weights differ"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs).softmax(dim=1), targets)
    return _scaled_update(optimizer, scaler, loss)


def nll_of_the_scores(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 6: the NLL loss on raw scores, softmax's sibling: a generic "the weights differ"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.nll_loss(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def autocast_given_the_device(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 6: the device where its type belongs: autocast's ValueError, no cause named."""
    with torch.autocast(device_type=inputs.device, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def scaled_without_backward(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 11: the scaled loss never goes through backward(): named as gradients cleared, a wrong cause."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def mean_divided_by_the_batch_size(model, optimizer, scaler, inputs, targets, dtype):
    """10.2 audit 11: the mean divided by the batch size again: a generic "the weights differ"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets) / len(inputs)
    return _scaled_update(optimizer, scaler, loss)


def clipped_while_scaled(model, optimizer, scaler, inputs, targets, dtype):
    """10.2, twelfth audit: clip_grad_norm_ on the scaled gradients: a generic "the weights differ"."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def returns_the_scores(model, optimizer, scaler, inputs, targets, dtype):
    """10.2, twelfth audit: the logits returned in place of the loss: "wrong shape" and no cause."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return logits.detach()


def clipped_after_unscaling(model, optimizer, scaler, inputs, targets, dtype):
    """10.2, twelfth audit: unscale_, then clip, then step: the documented order, which must pass."""
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


def test_clipping_after_unscaling_passes(capsys):
    lab.check_amp_step(clipped_after_unscaling)
    assert capsys.readouterr().out.startswith("PASS  amp_step")


def _returning(value):
    def step(*args):
        amp_step(*args)
        return value(*args) if callable(value) else value

    return step


def inf_turned_to_zero(model, optimizer, scaler, inputs, targets, dtype):
    """Thirteenth audit: the inf batch cleaned before the forward pass got "the weights differ" with no cause."""
    return amp_step(model, optimizer, scaler, torch.nan_to_num(inputs, posinf=0.0, neginf=0.0), targets, dtype)


def inf_clamped_in_place(model, optimizer, scaler, inputs, targets, dtype):
    """Thirteenth audit: the batch clamped in place to float16's range before the forward pass."""
    return amp_step(model, optimizer, scaler, inputs.clamp_(-1e4, 1e4), targets, dtype)


AMP_MISTAKES = {
    "inf removed from the batch": [inf_turned_to_zero, inf_clamped_in_place],
    "dtype ignored": [bf16_always, fp16_always],
    "no autocast": [no_autocast],
    "autocast on another device type": [autocast_for_cuda, autocast_on_cuda],
    "autocast off with the scaler": [autocast_follows_the_scaler],
    "unscaled after the step": [unscaled_after_the_step],
    "stepped on scaled gradients": [optimizer_step_no_update],
    "inf step taken": [unscaled_by_hand_no_skip],
    "gradients not zeroed": [no_zero_grad],
    "no step": [zero_grad_before_step],
    "weights updated twice": [stepped_twice],
    "loss not scaled": [not_scaled],
    "update without scaler.step": [optimizer_step_then_update],
    "gradients gone before the step": [zero_grad_to_none_before_step],
    "no update": [no_update],
    "scaler unused": [own_scaler],
    "scaled loss returned": [returns_scaled_loss],
    "loss not detached": [not_detached],
    "device type written in": [cpu_amp_autocast, cpu_autocast_imported],
    "inf step hidden from the scaler": [inf_guard_before_the_scaler],
    "backward on the unscaled loss": [backward_on_the_unscaled_loss],
    "unscaled twice": [unscaled_twice],
    "scaler stepped twice": [scaler_stepped_twice],
    "model cast to dtype": [model_to_dtype, model_half],
    "scale given to update": [scale_fixed_in_update, scale_kept_in_update],
    "inf step skipped by hand": [step_only_on_a_finite_loss],
    "loss summed over the batch": [summed_loss],
    "softmax before the loss": [softmax_before_the_loss],
    "negative log-likelihood of the scores": [nll_of_the_scores],
    "device given for its type": [autocast_given_the_device],
    "a number given to the scaler": [scales_a_number],
    "no backward": [scaled_without_backward],
    "loss divided by the batch size": [mean_divided_by_the_batch_size],
    "clipped while scaled": [clipped_while_scaled],
    "scores returned": [returns_the_scores],
}


def own_optimizer(model, optimizer, scaler, inputs, targets, dtype):
    """15th audit: a fresh optimizer made inside the step (plain SGD at the check's rate: the weights were right)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=nb10.AMP_LR)
    return amp_step(model, optimizer, scaler, inputs, targets, dtype)


AMP_MISTAKES["optimizer argument not used"] = [own_optimizer]
# The device chosen by whether a GPU exists: on a CPU-only machine the choice is the inputs' own and only the
# source shows it; on a GPU machine the CPU inputs run without autocast, in float32, and that is what is named.
AMP_MISTAKES["autocast on another device type" if torch.cuda.is_available() else "device type written in"].append(
    device_chosen_in_the_code
)


def test_every_listed_amp_mistake_has_a_test():
    listed = {m.name for m in nb10.amp_mistakes(torch.bfloat16, nb10.amp_batches(), 0)}
    listed |= {m.name for m in nb10.SCALER_ERRORS}
    listed |= {nb10.FIXED_DEVICE_TYPE.name, nb10.INF_STEP_HIDDEN.name}
    listed |= {nb10.AUTOCAST_ELSEWHERE.name, nb10.AUTOCAST_OFF_WITH_SCALER.name}
    listed |= {nb10.SCALE_GIVEN_TO_UPDATE.name, nb10.INF_STEP_SKIPPED_BY_HAND.name}
    listed |= {nb10.DEVICE_FOR_ITS_TYPE.name, nb10.NO_BACKWARD.name, nb10.SCORES_RETURNED.name}
    listed |= {nb10.INF_REMOVED.name, nb10.OPTIMIZER_UNUSED.name}
    assert listed <= set(AMP_MISTAKES)


@pytest.mark.filterwarnings("ignore:`torch.cpu.amp.autocast:FutureWarning")  # what two of the students call
@pytest.mark.filterwarnings("ignore:CUDA is not available")  # autocast for "cuda" on a machine without one
@pytest.mark.parametrize(
    "mistake, student", [(name, s) for name, students in AMP_MISTAKES.items() for s in students], ids=_label
)
def test_amp_step_names_each_mistake(mistake, student):
    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(student)
    assert info.value.mistake == mistake
    assert info.value.hint


def test_a_hard_coded_bf16_fails_on_float16_and_says_so():
    with pytest.raises(lab.CheckError, match="dtype=torch.float16") as info:
        lab.check_amp_step(bf16_always)
    assert "torch.bfloat16 forward pass" in info.value.hint


# The exercise's starting code as the student edition shows it, and a natural first attempt:
# the notebook's fp32_step (amp_step is "a drop-in replacement for fp32_step").
def amp_step_stub(model, optimizer, scaler, inputs, targets, dtype):
    """One mixed-precision training step; returns the detached loss."""
    # YOUR CODE HERE
    raise NotImplementedError("Exercise 2: a training step with a `GradScaler`")


def fp32_step(model, optimizer, scaler, inputs, targets, dtype):
    """A plain float32 step (scaler and dtype unused)."""
    loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


AMP_FIX_TOKENS = ["torch.autocast(", "autocast(inputs.device.type", "dtype=dtype", "scaler.scale(loss)", "scaler.step("]


@pytest.mark.parametrize("starting", [amp_step_stub, fp32_step])
def test_the_amp_starting_code_never_gets_the_fix(starting, capsys):
    for _ in range(5):
        with pytest.raises(lab.CheckError) as info:
            lab.check_amp_step(starting)
        shown = str(info.value) + "\n".join(info.value.rendered())
        for token in AMP_FIX_TOKENS:
            assert token not in shown
    capsys.readouterr()
    lab.hint("10.2")
    hint = capsys.readouterr().out
    assert hint
    for token in AMP_FIX_TOKENS:
        assert token not in hint


def test_the_first_amp_failure_says_what_and_where_only():
    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(no_zero_grad)
    shown = "\n".join(info.value.rendered())
    assert "after the third step" in shown and "backward() adds" not in shown


@pytest.mark.parametrize(
    "returns, words",
    [
        (None, "a missing `return`"),
        (None, "the scaler's step"),  # amp_step ending with `return scaler.step(optimizer)` gives None too
        (2.3, "as a tensor"),
        (lambda *a: [torch.tensor(2.3)], "as a tensor"),
        (torch.tensor([2.3]), "extra leading dimension"),
        (torch.tensor(float("nan")), "not finite"),
        (torch.tensor(2.3, device="meta"), "meta device"),
        (lambda m, o, s, x, y, d: torch.tensor(7.0), "expected 2."),
    ],
    ids=_label,
)
def test_amp_step_refuses_a_returned_loss_that_is_no_loss(returns, words):
    with pytest.raises(lab.CheckError, match=words):
        lab.check_amp_step(_returning(returns))


def test_amp_step_returning_the_loss_and_the_scores_is_told_to_return_one_value():
    """Thirteenth audit: (loss, logits) was told that a Python number cannot be stacked."""

    def loss_and_scores(model, optimizer, scaler, inputs, targets, dtype):
        loss = amp_step(model, optimizer, scaler, inputs, targets, dtype)
        return loss, torch.zeros(len(inputs), 10)

    with pytest.raises(lab.CheckError, match="as a tensor") as info:
        lab.check_amp_step(loss_and_scores)
    assert "several values" in info.value.hint and "Python number" not in info.value.hint


def test_amp_step_accepts_a_branch_on_the_scaler_being_enabled(capsys):
    """Thirteenth audit: the scaler used only when enabled, a plain backward and step otherwise."""

    def branches(model, optimizer, scaler, inputs, targets, dtype):
        with torch.autocast(inputs.device.type, dtype):
            loss = torch.nn.CrossEntropyLoss()(model(inputs), targets)
        optimizer.zero_grad()
        if not scaler.is_enabled():
            loss.backward()
            optimizer.step()
            return loss.detach()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    lab.check_amp_step(branches)
    assert capsys.readouterr().out.startswith("PASS")


def test_a_nan_loss_on_a_finite_batch_is_refused_although_the_weights_are_right():
    def nan_loss(*args):
        amp_step(*args)
        return torch.tensor(float("nan"))

    with pytest.raises(lab.CheckError, match="not finite"):
        lab.check_amp_step(nan_loss)


@pytest.mark.parametrize(
    "bad, words",
    [
        (None, "is None"),
        ([1, 2], "not a function"),
        ("amp_step", "not a function"),
        (amp_step_stub, "not written yet"),
        (lambda *a: 1 / 0, "ZeroDivisionError"),
        (lambda x: x, "TypeError"),
    ],
    ids=_label,
)
def test_amp_step_answers_bad_functions(bad, words):
    with pytest.raises(lab.CheckError, match=words):
        lab.check_amp_step(bad)


def test_amp_step_stops_a_function_that_never_returns(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within 0.1 s"):
        lab.check_amp_step(never_returns)


# ----------------------------------------------------------------------------- 10.3 data parallel by hand


def data_parallel_grads(model, inputs, targets, world_size):
    """The notebook's solution."""
    shard = len(inputs) // world_size
    total = None
    for r in range(world_size):
        model.zero_grad()
        part = slice(r * shard, (r + 1) * shard)
        F.cross_entropy(model(inputs[part]), targets[part]).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        total = grads if total is None else [t + g for t, g in zip(total, grads)]
    return [t / world_size for t in total]


def with_autograd_grad(model, inputs, targets, world_size):
    """Correct: torch.autograd.grad and chunk, a tuple returned."""
    params = list(model.parameters())
    shards = [
        torch.autograd.grad(F.cross_entropy(model(x), y), params)
        for x, y in zip(inputs.chunk(world_size), targets.chunk(world_size))
    ]
    return tuple(torch.stack(gs).mean(0) for gs in zip(*shards))


def variant(model, inputs, targets, world_size, *, start=None, ranks=None, reduction="mean", zero=True, divide=None):
    n = len(inputs) // world_size
    kept = []
    for r in range(world_size if ranks is None else ranks(world_size)):
        if zero:
            model.zero_grad(set_to_none=False)
        s = r * n if start is None else start(r, n)
        F.cross_entropy(model(inputs[s : s + n]), targets[s : s + n], reduction=reduction).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / (world_size if divide is None else divide(world_size)) for gs in zip(*kept)]


def reversed_ranks(model, inputs, targets, world_size):
    """Correct: the ranks in another order, the average by a mean over them."""
    params = list(model.parameters())
    pairs = list(zip(inputs.chunk(world_size), targets.chunk(world_size)))[::-1]
    shards = [torch.autograd.grad(F.cross_entropy(model(x), y), params) for x, y in pairs]
    return [torch.stack(gs).mean(0) for gs in zip(*shards)]


def _dp(**wrong):
    def student(model, inputs, targets, world_size):
        return variant(model, inputs, targets, world_size, **wrong)

    return student


def returns_in_the_loop(model, inputs, targets, world_size):
    """Audit 7: the return indented into the loop over the ranks."""
    shard = len(inputs) // world_size
    for r in range(world_size):
        model.zero_grad()
        part = slice(r * shard, (r + 1) * shard)
        F.cross_entropy(model(inputs[part]), targets[part]).backward()
        return [p.grad.clone() for p in model.parameters()]


def each_rank_kept(model, inputs, targets, world_size):
    """Audit 7: half-written, each rank's gradients kept and returned, never averaged ("one gradient per parameter")."""
    shard = len(inputs) // world_size
    per_rank = []
    for r in range(world_size):
        model.zero_grad()
        part = slice(r * shard, (r + 1) * shard)
        F.cross_entropy(model(inputs[part]), targets[part]).backward()
        per_rank.append([p.grad.clone() for p in model.parameters()])
    return per_rank


def no_clone(model, inputs, targets, world_size):
    n = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(inputs[r * n : (r + 1) * n]), targets[r * n : (r + 1) * n]).backward()
        kept.append([p.grad for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def scales_the_inputs(model, inputs, targets, world_size):
    inputs.mul_(2)
    return data_parallel_grads(model, inputs, targets, world_size)


def steps_the_weights(model, inputs, targets, world_size):
    grads = data_parallel_grads(model, inputs, targets, world_size)
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= 0.1 * g
    return grads


def whole_batch_by_forward(model, inputs, targets, world_size):
    """10.3 audit: model.forward skips the module's hooks, so a forward pre-hook never saw this call."""
    return list(torch.autograd.grad(F.cross_entropy(model.forward(inputs), targets), list(model.parameters())))


def whole_batch_and_a_vmap_call(model, inputs, targets, world_size):
    """10.3 audit: one call under torch.func.vmap turned off the judgment of every other call."""
    torch.func.vmap(lambda row: model(row.unsqueeze(0)))(inputs[:2])
    return list(torch.autograd.grad(F.cross_entropy(model(inputs), targets), list(model.parameters())))


def whole_batch_each_rank(model, inputs, targets, world_size):
    kept = []
    for _ in range(world_size):
        model.zero_grad()
        F.cross_entropy(model(inputs), targets).backward()  # the rank's slice forgotten
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def split_by_size(model, inputs, targets, world_size):
    """split(world_size) makes chunks of world_size rows; their mean still is the whole-batch gradient."""
    params = list(model.parameters())
    shards = [
        torch.autograd.grad(F.cross_entropy(model(x), y), params)
        for x, y in zip(inputs.split(world_size), targets.split(world_size))
    ]
    return [torch.stack(gs).mean(0) for gs in zip(*shards)]


def split_by_size_over_ranks(model, inputs, targets, world_size):
    """The same split, the chunks taken by rank: the first world_size chunks of world_size rows."""
    params = list(model.parameters())
    xs, ys = inputs.split(world_size), targets.split(world_size)
    shards = [torch.autograd.grad(F.cross_entropy(model(xs[r]), ys[r]), params) for r in range(world_size)]
    return [sum(gs) / world_size for gs in zip(*shards)]


def split_by_size_divided_by_ranks(model, inputs, targets, world_size):
    params = list(model.parameters())
    pairs = zip(inputs.split(world_size), targets.split(world_size))
    shards = [torch.autograd.grad(F.cross_entropy(model(x), y), params) for x, y in pairs]
    return [sum(gs) / world_size for gs in zip(*shards)]


def interleaved_shards(model, inputs, targets, world_size):
    params = list(model.parameters())
    shards = [
        torch.autograd.grad(F.cross_entropy(model(inputs[r::world_size]), targets[r::world_size]), params)
        for r in range(world_size)
    ]
    return [sum(gs) / world_size for gs in zip(*shards)]


def two_ranks_always(model, inputs, targets, world_size):
    """10.3 audit: the batch cut in 2 whatever world_size is: a relative error, no cause named."""
    shards = []
    for xs, ys in zip(inputs.chunk(2), targets.chunk(2)):
        shards.append(torch.autograd.grad(F.cross_entropy(model(xs), ys), list(model.parameters())))
    return [sum(gs) / world_size for gs in zip(*shards)]


def two_ranks_averaged(model, inputs, targets, world_size):
    """The batch cut in 2 and averaged over 2: the right gradient, from 2 shards where world_size asks for 3."""
    shards = []
    for xs, ys in zip(inputs.chunk(2), targets.chunk(2)):
        shards.append(torch.autograd.grad(F.cross_entropy(model(xs), ys), list(model.parameters())))
    return [sum(gs) / 2 for gs in zip(*shards)]


def shards_one_short(model, inputs, targets, world_size):
    """10.3 audit 5: each slice ended one early (an exclusive end taken for an inclusive one): no cause named."""
    n = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        model.zero_grad()
        rows = slice(r * n, (r + 1) * n - 1)
        F.cross_entropy(model(inputs[rows]), targets[rows]).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def shards_of_sixteen(model, inputs, targets, world_size):
    """10.3, round 12 second pass: a shard size of 16 written in (the notebook's 64 images over 4 ranks) was told
    "averaged twice"."""
    n = 16
    kept = []
    for r in range(world_size):
        model.zero_grad()
        rows = slice(r * n, (r + 1) * n)
        F.cross_entropy(model(inputs[rows]), targets[rows]).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def shards_of_five(model, inputs, targets, world_size):
    """The same with a size below the batch's share: 5 examples a rank, some examples never used."""
    kept = []
    for r in range(world_size):
        model.zero_grad()
        rows = slice(r * 5, (r + 1) * 5)
        F.cross_entropy(model(inputs[rows]), targets[rows]).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def shards_one_too_long(model, inputs, targets, world_size):
    """10.3 audit 11: each slice ended one late (an inclusive end written as end + 1): no cause named."""
    n = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        model.zero_grad()
        rows = slice(r * n, (r + 1) * n + 1)
        F.cross_entropy(model(inputs[rows]), targets[rows]).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def softmax_before_each_shard_loss(model, inputs, targets, world_size):
    """10.3 audit 11: probabilities given to the cross-entropy: no cause named."""
    kept = []
    for xs, ys in zip(inputs.chunk(world_size), targets.chunk(world_size)):
        model.zero_grad()
        F.cross_entropy(model(xs).softmax(dim=1), ys).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def zeroes_grads_in_place(model, inputs, targets, world_size):
    """10.3 audit 5: p.grad.zero_() on a fresh model raised AttributeError, with no cause named."""
    n = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        for p in model.parameters():
            p.grad.zero_()
        F.cross_entropy(model(inputs[r * n : (r + 1) * n]), targets[r * n : (r + 1) * n]).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def accumulated_without_clearing(model, inputs, targets, world_size):
    """10.3 audit 5: passed, since the check's model came with no gradients; a trained one has them in .grad."""
    for xs, ys in zip(inputs.chunk(world_size), targets.chunk(world_size)):
        (F.cross_entropy(model(xs), ys) / world_size).backward()
    return [p.grad.clone() for p in model.parameters()]


def cleared_after_each_rank(model, inputs, targets, world_size):
    """Gradients cleared after each rank's copy, so the first rank's still holds what .grad held before."""
    kept = []
    for xs, ys in zip(inputs.chunk(world_size), targets.chunk(world_size)):
        F.cross_entropy(model(xs), ys).backward()
        kept.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
    return [sum(gs) / world_size for gs in zip(*kept)]


def parameters_kept_as_a_generator(model, inputs, targets, world_size):
    """10.3 audit 6: model.parameters() walked by the first rank's grad(): autograd's error, no cause named."""
    params = model.parameters()
    shards = []
    for xs, ys in zip(inputs.chunk(world_size), targets.chunk(world_size)):
        shards.append(torch.autograd.grad(F.cross_entropy(model(xs), ys), params))
    return [sum(gs) / world_size for gs in zip(*shards)]


def divided_by_two(model, inputs, targets, world_size):
    return [g * world_size / 2 for g in data_parallel_grads(model, inputs, targets, world_size)]


def stacks_every_parameter(model, inputs, targets, world_size):
    """Each rank's gradients stacked into one tensor, as if every parameter had one shape."""
    shard = len(inputs) // world_size
    ranks = []
    for r in range(world_size):
        model.zero_grad()
        part = slice(r * shard, (r + 1) * shard)
        F.cross_entropy(model(inputs[part]), targets[part]).backward()
        ranks.append(torch.stack([p.grad.clone() for p in model.parameters()]))
    return list(torch.stack(ranks).mean(0))


def shard_sums_over_world_size(model, inputs, targets, world_size):
    """10.3, twelfth audit: each shard's summed loss divided by world_size, not by its size: told "split by chunk
    size", though the shards had the right size."""
    shard = len(inputs) // world_size
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for r in range(world_size):
        part = slice(r * shard, (r + 1) * shard)
        loss = F.cross_entropy(model(inputs[part]), targets[part], reduction="sum") / world_size
        total = [t + g for t, g in zip(total, torch.autograd.grad(loss, params))]
    return [t / world_size for t in total]


def mse_against_one_hot(model, inputs, targets, world_size):
    """Twelfth audit: a mean squared error against one-hot targets in place of the cross-entropy."""
    shard = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        rows = slice(r * shard, (r + 1) * shard)
        scores = model(inputs[rows])
        one_hot = F.one_hot(targets[rows], 10).to(scores.dtype)
        kept.append(torch.autograd.grad(F.mse_loss(scores, one_hot), list(model.parameters())))
    return [sum(gs) / world_size for gs in zip(*kept)]


def zeroed_before_the_copy(model, inputs, targets, world_size):
    """Twelfth audit: .grad zeroed between backward() and the copy, so every kept gradient is zero."""
    shard = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        rows = slice(r * shard, (r + 1) * shard)
        F.cross_entropy(model(inputs[rows]), targets[rows]).backward()
        model.zero_grad(set_to_none=False)
        kept.append([p.grad.clone() for p in model.parameters()])
    return [sum(gs) / world_size for gs in zip(*kept)]


def nll_on_raw_scores(model, inputs, targets, world_size):
    """Thirteenth audit: F.nll_loss on the raw scores, no log_softmax: "values differ" with no cause."""
    shard = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        rows = slice(r * shard, (r + 1) * shard)
        kept.append(torch.autograd.grad(F.nll_loss(model(inputs[rows]), targets[rows]), list(model.parameters())))
    return [sum(gs) / world_size for gs in zip(*kept)]


def _targets_cut(cut):
    """Inputs sliced right, targets by ``cut(targets, r, shard, world_size)``."""

    def student(model, inputs, targets, world_size):
        shard = len(inputs) // world_size
        kept = []
        for r in range(world_size):
            model.zero_grad()
            scores = model(inputs[r * shard : (r + 1) * shard])
            F.cross_entropy(scores, cut(targets, r, shard, world_size)).backward()
            kept.append([p.grad.clone() for p in model.parameters()])
        return [sum(gs) / world_size for gs in zip(*kept)]

    return student


def _targets_overlapping(targets, r, shard, world_size):
    return targets[r : r + shard]  # fourteenth audit: the inputs' slice right, the targets' not


def _targets_interleaved(targets, r, shard, world_size):
    return targets[r::world_size]


def _targets_whole(targets, r, shard, world_size):
    return targets


DP_MISTAKES = {
    "targets sliced otherwise": [_targets_cut(_targets_overlapping), _targets_cut(_targets_interleaved)],
    "targets not sliced": [_targets_cut(_targets_whole)],  # fourteenth audit: cross_entropy's ValueError only
    "nll_loss on raw scores": [nll_on_raw_scores],
    "parameters returned": [lambda model, inputs, targets, world_size: list(model.parameters())],
    "mean squared error": [mse_against_one_hot],
    "all gradients zero": [zeroed_before_the_copy],
    "shard's sum divided by world_size": [shard_sums_over_world_size],
    "summed, not averaged": [_dp(divide=lambda w: 1)],
    "averaged twice": [_dp(divide=lambda w: w * w)],
    "sum reduction": [_dp(reduction="sum")],
    "gradients not zeroed": [_dp(zero=False)],
    "last shard only": [no_clone],
    "first shard only": [_dp(start=lambda r, n: 0), _dp(ranks=lambda w: 1, divide=lambda w: 1), returns_in_the_loop],
    "a shard dropped": [_dp(ranks=lambda w: w - 1)],
    "overlapping shards": [_dp(start=lambda r, n: r)],
    "weights changed": [steps_the_weights],
    "batch never split": [whole_batch_each_rank, whole_batch_by_forward, whole_batch_and_a_vmap_call],
    "divided by the batch size": [_dp(divide=lambda w: 12)],
    "divided by the shard size": [_dp(divide=lambda w: 12 // w)],  # audit 4: no cause named
    "split by chunk size": [split_by_size, split_by_size_over_ranks, split_by_size_divided_by_ranks],
    "shards interleaved": [interleaved_shards],
    "world size written in": [two_ranks_always, two_ranks_averaged, divided_by_two],
    "shards one short": [shards_one_short],
    "shards one too long": [shards_one_too_long],
    "shard size written in": [shards_of_sixteen, shards_of_five],
    "softmax before the loss": [softmax_before_each_shard_loss],
    "zeroed a grad that is None": [zeroes_grads_in_place],
    "gradients left from before": [accumulated_without_clearing, cleared_after_each_rank],
    "parameters used up": [parameters_kept_as_a_generator],
    "each rank's gradients returned": [each_rank_kept],
    "gradients of all parameters stacked": [stacks_every_parameter],  # eighth audit: bare RuntimeError
}


def test_every_listed_data_parallel_mistake_has_a_test():
    model = nb10._cnn(0, torch.float64)
    x, y = nb10._batch(12, 0, torch.float64)
    listed = {m.name for m in nb10.data_parallel_mistakes(model, x, y, 2)}
    listed |= {m.name for m in nb10.fixed_world_size_mistakes(model, x, y, 3)}
    listed |= {nb10.WHOLE_BATCH.name, nb10.INTERLEAVED.name, nb10.GRAD_STILL_NONE.name, nb10.STALE_GRADIENTS.name}
    listed |= {nb10.PARAMETERS_USED_UP.name, nb10.RANKS_NOT_AVERAGED.name, nb10.GRADIENTS_STACKED.name}
    listed |= {nb10.SHARD_SUM_OVER_WORLD_SIZE.name, nb10.SHARD_SIZE_WRITTEN_IN.name, nb10.TARGETS_NOT_SLICED.name}
    listed |= {m.name for m in nb10.mse_mistakes(model, x, y, 2)} | {nb10.ZERO_GRADIENTS.name}
    listed |= {m.name for m in nb10.nll_mistakes(model, x, y, 2)} | {nb10.PARAMETERS_RETURNED.name}
    assert listed <= set(DP_MISTAKES)


def vmapped_shards(model, inputs, targets, world_size):
    """Every shard's gradient at once with torch.func.vmap: one call of the model, batched over the shards."""
    from torch.func import functional_call, grad, vmap

    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(p, x, y):
        return F.cross_entropy(functional_call(model, p, (x,)), y)

    k = len(inputs) // world_size
    xs = inputs.reshape(world_size, k, *inputs.shape[1:])
    ys = targets.reshape(world_size, k)
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    return [grads[name].mean(0) for name in params]


def replica_per_rank(model, inputs, targets, world_size):
    """Correct: each rank runs its own copy of the model, as DDP's processes do."""
    import copy

    shard = len(inputs) // world_size
    kept = []
    for r in range(world_size):
        replica = copy.deepcopy(model)
        rows = slice(r * shard, (r + 1) * shard)
        kept.append(torch.autograd.grad(F.cross_entropy(replica(inputs[rows]), targets[rows]), replica.parameters()))
    return [sum(gs) / world_size for gs in zip(*kept)]


def one_backward_of_the_shards_mean(model, inputs, targets, world_size):
    """Fourteenth audit, correct: every shard's mean loss added up and divided by world_size, one backward()."""
    shard = len(inputs) // world_size
    model.zero_grad()
    losses = [
        F.cross_entropy(model(inputs[r * shard : (r + 1) * shard]), targets[r * shard : (r + 1) * shard])
        for r in range(world_size)
    ]
    (sum(losses) / world_size).backward()
    return [p.grad.clone() for p in model.parameters()]


def shards_by_view(model, inputs, targets, world_size):
    """Fourteenth audit, correct: the batch viewed as (world_size, shard, ...), a rank a row of it."""
    xs = inputs.view(world_size, -1, *inputs.shape[1:])
    ys = targets.view(world_size, -1)
    params = list(model.parameters())
    per_rank = [torch.autograd.grad(F.cross_entropy(model(xs[r]), ys[r]), params) for r in range(world_size)]
    return [sum(gs) / world_size for gs in zip(*per_rank)]


@pytest.mark.parametrize(
    "student",
    [
        data_parallel_grads,
        with_autograd_grad,
        reversed_ranks,
        vmapped_shards,
        replica_per_rank,
        one_backward_of_the_shards_mean,
        shards_by_view,
    ],
)
def test_data_parallel_accepts_correct_designs(student, capsys):
    lab.check_data_parallel_grads(student)
    assert capsys.readouterr().out == (
        "PASS  data_parallel_grads: the shards' average equals the whole-batch gradient (world_size 2 and 3)\n"
    )


@pytest.mark.parametrize(
    "mistake, student", [(name, s) for name, students in DP_MISTAKES.items() for s in students], ids=_label
)
def test_data_parallel_names_each_mistake(mistake, student):
    with pytest.raises(lab.CheckError) as info:
        lab.check_data_parallel_grads(student)
    assert info.value.mistake == mistake


def test_parameters_used_up_is_named_in_the_words_of_older_torch_too():
    """torch before 2.14 (2.11 on the GPU machines) says "grad requires non-empty inputs." where 2.14 says
    "`inputs` argument to `grad()` cannot be empty": the mistake was named on one and not the other."""

    def older_torchs_words(model, inputs, targets, world_size):
        raise ValueError("grad requires non-empty inputs.")

    with pytest.raises(lab.CheckError) as info:
        lab.check_data_parallel_grads(older_torchs_words)
    assert info.value.mistake == "parameters used up"


def test_a_split_by_size_that_averages_right_is_told_by_the_calls_it_made():
    """10.3: split(world_size) passed, since the mean of any equal split is the whole-batch gradient."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_data_parallel_grads(split_by_size)
    assert info.value.got == "6 call(s) on 2, 2, 2, 2, 2, 2 examples"
    assert "Tensor.chunk takes the number of chunks" in info.value.hint


def test_a_shard_computed_twice_is_not_one_call_per_rank():
    def forward_twice(model, inputs, targets, world_size):
        model(inputs[:1])  # a look at the output, outside the ranks' work
        return data_parallel_grads(model, inputs, targets, world_size)

    with pytest.raises(lab.CheckError, match="not run once per rank") as info:
        lab.check_data_parallel_grads(forward_twice)
    assert info.value.hint is None


def test_an_unknown_data_parallel_mistake_guesses_no_cause():
    with pytest.raises(lab.CheckError, match="differ from the whole-batch gradient") as info:
        lab.check_data_parallel_grads(_dp(start=lambda r, n: r * n + 1))
    assert info.value.hint is None


# The student edition's cell: the solution region is a stub; a first attempt sums the shards.
def data_parallel_stub(model, inputs, targets, world_size):
    """Average over world_size equal shards of each shard's loss gradient."""
    shard = len(inputs) // world_size  # noqa: F841 (the scaffold's line, kept as the student sees it)
    # for each rank r: zero the grads, backward on the shard's mean loss, keep a copy of the grads
    # YOUR CODE HERE
    raise NotImplementedError("Exercise 3: data parallelism by hand")


DP_FIX_TOKENS = ["/ world_size", "divide the sum", "by world_size", "t / world_size"]


@pytest.mark.parametrize("starting", [data_parallel_stub, _dp(divide=lambda w: 1)])
def test_the_data_parallel_starting_code_never_gets_the_fix(starting, capsys):
    for _ in range(5):
        with pytest.raises(lab.CheckError) as info:
            lab.check_data_parallel_grads(starting)
        shown = str(info.value) + "\n".join(info.value.rendered())
        for token in DP_FIX_TOKENS:
            assert token not in shown
    capsys.readouterr()
    lab.hint("10.3")
    hint = capsys.readouterr().out
    assert hint
    for token in DP_FIX_TOKENS:
        assert token not in hint


@pytest.mark.parametrize(
    "bad, words",
    [
        (lambda m, x, y, w: None, "a missing `return`"),
        (lambda m, x, y, w: torch.zeros(3), "one gradient per parameter"),
        (lambda m, x, y, w: (g for g in data_parallel_grads(m, x, y, w)), "one gradient per parameter"),
        (lambda m, x, y, w: [torch.zeros(1)], "a list of 8 tensors"),
        (lambda m, x, y, w: [np.zeros(1)] * 8, "numpy"),
        (lambda m, x, y, w: [torch.zeros(1, dtype=torch.float64)] * 8, "shape"),
        (lambda m, x, y, w: [g.float() for g in data_parallel_grads(m, x, y, w)], "wrong dtype"),
        (lambda m, x, y, w: [g[None] for g in data_parallel_grads(m, x, y, w)], "extra leading dimension"),
        (lambda m, x, y, w: [g.to("meta") for g in data_parallel_grads(m, x, y, w)], "meta device"),
        # round 12, second pass: a dict by name, one flat tensor, or the list reversed, with no hint or a bare shape
        (lambda m, x, y, w: dict(zip("abcdefgh", data_parallel_grads(m, x, y, w))), "by position, not by name"),
        (lambda m, x, y, w: torch.cat([g.flatten() for g in data_parallel_grads(m, x, y, w)]), "flattened"),
        (lambda m, x, y, w: data_parallel_grads(m, x, y, w)[::-1], "another order than model.parameters"),
        (lambda m, x, y, w: [torch.full_like(p, float("nan")) for p in m.parameters()], "NaN"),
        (scales_the_inputs, "changed its argument inputs in place"),
        (data_parallel_stub, "not written yet"),
        (lambda m, x, y, w: {}["x"], "KeyError"),
        ("not a function", "not a function"),
        (None, "is None"),
    ],
    ids=_label,
)
def test_data_parallel_answers_bad_results(bad, words):
    with pytest.raises(lab.CheckError, match=words):
        lab.check_data_parallel_grads(bad)


def log_softmax_then_nll(model, inputs, targets, world_size):
    """Thirteenth audit: the cross-entropy written as log_softmax and nll_loss, accumulated in .grad by loss / ws."""
    model.zero_grad()
    for x, y in zip(inputs.chunk(world_size), targets.chunk(world_size)):
        (F.nll_loss(F.log_softmax(model(x), dim=1), y) / world_size).backward()
    return tuple(p.grad.clone() for p in model.parameters())


def index_split_remainder_last(model, inputs, targets, world_size):
    """Thirteenth audit: np.array_split's index blocks, the gradients stacked per parameter and averaged."""
    kept = []
    for rows in np.array_split(np.arange(len(inputs)), world_size):
        kept.append(torch.autograd.grad(F.cross_entropy(model(inputs[rows]), targets[rows]), list(model.parameters())))
    return [torch.stack(gs).mean(0) for gs in zip(*kept)]


@pytest.mark.parametrize("student", [log_softmax_then_nll, index_split_remainder_last])
def test_data_parallel_accepts_more_designs(student, capsys):
    lab.check_data_parallel_grads(student)
    assert capsys.readouterr().out.startswith("PASS")


def test_data_parallel_names_a_model_converted_to_float32():
    """Thirteenth audit: model.float() inside the function broke the check's own reference with a RuntimeError
    that read as a wrong return type (the float64 weights were exact in float32, so no value had changed)."""

    def converts_the_model(model, inputs, targets, world_size):
        model.float()
        return data_parallel_grads(model, inputs.float(), targets, world_size)

    with pytest.raises(lab.CheckError, match="converted the model") as info:
        lab.check_data_parallel_grads(converts_the_model)
    assert info.value.mistake == "weights changed"


def test_data_parallel_stops_a_function_that_never_returns(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within 0.1 s"):
        lab.check_data_parallel_grads(never_returns)


# ----------------------------------------------------------------------------- real DDP (synthesised results)


def result_with(states, world_size=2, lr=0.1, **changes):
    result = {"world_size": world_size, "batch_size": 16, "lr": lr, "seed": 0, "states": states}
    result.update(changes)
    return result


def float32(state):
    return {k: v.float() for k, v in state.items()}


@pytest.fixture(scope="module")
def reference():
    return float32(lab.sgd_step_state(0, 16, 0.1))


def test_ddp_check_accepts_the_one_process_step(reference, capsys):
    lab.check_ddp_equivalence(result_with([reference, reference]))
    assert "PASS  DDP: 2 workers on 1/2 of the batch" in capsys.readouterr().out


def test_ddp_check_names_each_mistake(reference):
    half = float32(lab.sgd_step_state(0, 16, 0.1, shard=(0, 2)))
    summed = float32(lab.sgd_step_state(0, 16, 0.2))
    drifted = {k: v + 1e-3 for k, v in reference.items()}
    for states, mistake in [
        ([reference, drifted], "replicas drifted"),
        ([half, half], "not averaged"),
        ([summed, summed], "summed"),
    ]:
        with pytest.raises(lab.CheckError) as info:
            lab.check_ddp_equivalence(result_with(states))
        assert info.value.mistake == mistake
    with pytest.raises(lab.CheckError, match="differ from one process's step") as info:
        lab.check_ddp_equivalence(result_with([{k: v + 1e-2 for k, v in reference.items()}] * 2))
    assert info.value.hint is None


@pytest.mark.parametrize("fill", [float("nan"), float("inf")])
def test_ddp_check_refuses_non_finite_parameters(reference, fill):
    bad = {k: torch.full_like(v, fill) for k, v in reference.items()}
    with pytest.raises(lab.CheckError, match="not finite"):
        lab.check_ddp_equivalence(result_with([bad, bad]))


def test_ddp_check_refuses_meta_parameters(reference):
    meta = {k: v.to("meta") for k, v in reference.items()}
    with pytest.raises(lab.CheckError, match="meta device"):
        lab.check_ddp_equivalence(result_with([meta, meta]))


@pytest.mark.parametrize(
    "bad, words",
    [
        (None, "Got None"),
        ([1, 2], "list of length 2"),
        ({"states": []}, "keys world_size"),
        ({"world_size": "2", "batch_size": 16, "lr": 0.1, "seed": 0, "states": []}, "world_size"),
        ({"world_size": True, "batch_size": 16, "lr": 0.1, "seed": 0, "states": []}, "world_size"),
        ({"world_size": 2, "batch_size": 16, "lr": float("nan"), "seed": 0, "states": []}, "lr"),
        ({"world_size": 2, "batch_size": 16, "lr": "0.1", "seed": 0, "states": []}, "lr"),
        ({"world_size": 2, "batch_size": 16, "lr": 0.1, "seed": -1, "states": []}, "seed"),
        ({"world_size": 2, "batch_size": 10**9, "lr": 0.1, "seed": 0, "states": []}, "batch_size"),
        ({"world_size": 0, "batch_size": 16, "lr": 0.1, "seed": 0, "states": []}, "world_size"),
    ],
    ids=repr,
)
def test_ddp_check_refuses_what_is_not_a_result(bad, words):
    with pytest.raises(lab.CheckError, match=words):
        lab.check_ddp_equivalence(bad)


def test_ddp_check_refuses_broken_states(reference):
    cases = [
        ([reference], "one DigitsCNN state dict per worker"),
        (None, "per worker"),
        ([reference, {"w": torch.zeros(1)}], "per worker"),
        ([reference, dict(reference, **{"classifier.2.bias": torch.zeros(3)})], "shape"),
        ([reference, dict(reference, **{"classifier.2.bias": [0.0] * 10})], "not a tensor"),
    ]
    for states, words in cases:
        with pytest.raises(lab.CheckError, match=words):
            lab.check_ddp_equivalence(result_with(states))


def test_speedups_as_percentages_are_refused_before_anything_is_recorded():
    """10.4: (372, 69) was committed as the answer and the outcome shown; a ratio on 4 GPUs is at most 4."""
    from labsupport.checks.predictions import COMMITTED

    with pytest.raises(lab.CheckError, match="ratio of throughputs") as info:
        lab.check_speedup_prediction((372, 69))
    assert info.value.usage and not COMMITTED


@pytest.mark.parametrize(
    "answer",
    [
        (torch.tensor(3.72), torch.tensor(0.69)),
        torch.tensor([3.72, 0.69]),
        np.array([3.72, 0.69]),
        (np.float32(3.72), np.float32(0.69)),
    ],
    ids=["tuple of 0-d tensors", "1-d tensor", "1-d array", "tuple of float32 scalars"],
)
def test_right_speedups_pass_in_any_numeric_form(answer, capsys):
    """10.4: the right numbers were refused when computed with tensors or numpy ("answer with plain values")."""
    lab.check_speedup_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("answer", [("3.72", "0.69"), ["3.72", 0.69], "3.72, 0.69", "(3.72, 0.69)", " 3.72 0.69 "])
def test_right_speedups_written_as_text_pass(answer, capsys):
    """10.4 audit 6: the right numbers written as text ("3.72, 0.69", or a tuple of strings) were refused."""
    lab.check_speedup_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS  4-GPU speed-up (ResNet-50, DigitsCNN): (3.72, 0.69) is right")


@pytest.mark.parametrize("answer", [("3.72x", "0.69x"), "3.72x, 0.69x", ("3.72 ×", "0.69×")])
def test_right_speedups_written_as_factors_pass(answer, capsys):
    """10.4, round 12 second pass: the right ratios written with their factor sign ("3.72x") were refused."""
    lab.check_speedup_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS  4-GPU speed-up (ResNet-50, DigitsCNN): (3.72, 0.69) is right")


@pytest.mark.parametrize(
    "answer, words",
    [(("372%", "69%"), "plain number without quotes"), (3.72, "one number per job")],
)
def test_speedups_in_another_form_say_what_to_change(answer, words):
    """10.4, round 12 second pass: percentages as text, or one number, were refused with no hint."""
    from labsupport.checks.predictions import COMMITTED

    with pytest.raises(lab.CheckError, match="answer with two numbers") as info:
        lab.check_speedup_prediction(answer)
    assert info.value.usage and not COMMITTED
    assert words in info.value.hint


@pytest.mark.parametrize("answer", ["3.72", "3.72, 0.69, 1.0", "fast, slow", ("3.72", "slow")])
def test_text_that_is_not_two_numbers_is_refused_before_anything_is_recorded(answer):
    from labsupport.checks.predictions import COMMITTED

    with pytest.raises(lab.CheckError, match="answer with two numbers") as info:
        lab.check_speedup_prediction(answer)
    assert info.value.usage and not COMMITTED


def autocast_for_cpu_written_in(model, optimizer, scaler, inputs, targets, dtype):
    with torch.autocast(device_type="cpu", dtype=dtype):  # right here, float32 on a GPU
        loss = F.cross_entropy(model(inputs), targets)
    return _scaled_update(optimizer, scaler, loss)


def test_a_device_type_written_into_autocast_is_named():
    """10.2: autocast(device_type='cpu') passed on a CPU; the prompt asks for the inputs' device type."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(autocast_for_cpu_written_in)
    assert info.value.mistake == "device type written in"


def _names_assigned_from_each_other(lines: int) -> str:
    """An amp_step whose device type comes through six names, each assigned from all six, ``lines`` times."""
    names = " + ".join(f"n{i}" for i in range(6))
    body = [f"    n{i % 6} = {names}" for i in range(lines)]
    return "\n".join(
        [
            "import torch",
            "import torch.nn.functional as F",
            "",
            "",
            "def amp_step(model, optimizer, scaler, inputs, targets, dtype):",
            "    n0 = n1 = n2 = n3 = n4 = n5 = 'cpu'",
            "    if False:",
            *["    " + line for line in body],
            "    with torch.autocast(device_type=n0, dtype=dtype):",
            "        loss = F.cross_entropy(model(inputs), targets)",
            "    optimizer.zero_grad()",
            "    scaler.scale(loss).backward()",
            "    scaler.step(optimizer)",
            "    scaler.update()",
            "    return loss.detach()",
            "",
        ]
    )


def _module_from(path, source: str):
    import importlib.util

    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_names_assigned_from_each_other_are_read_in_linear_time(tmp_path):
    """10.2 audit: the source analysis followed every path through such names (36 s for 24 lines)."""
    module = _module_from(tmp_path / "chained_names.py", _names_assigned_from_each_other(200))
    start = time.perf_counter()
    source = nb10._autocast_device_source(module.amp_step)
    assert time.perf_counter() - start < 2
    assert source == "n0, chosen inside amp_step"


def test_a_source_that_cannot_be_tokenized_is_not_judged(tmp_path, capsys):
    """10.2 audit: a function whose file now holds an unterminated string raised tokenize.TokenError."""
    import inspect

    source = inspect.getsource(amp_step)
    broken = tmp_path / "broken.py"
    broken.write_text('x = """\n' + "\n" * 20)
    code = compile("\n" * 5 + source, str(broken), "exec")
    namespace = {"torch": torch, "F": F}
    exec(code, namespace)
    lab.check_amp_step(namespace["amp_step"])
    assert capsys.readouterr().out.startswith("PASS  amp_step:")


def test_the_model_has_no_recorder_left_after_the_check():
    """10.3: the check records calls through the model's own forward, and takes that away afterwards."""
    seen = []

    def keeps_the_model(model, inputs, targets, world_size):
        seen.append(model)
        return data_parallel_grads(model, inputs, targets, world_size)

    lab.check_data_parallel_grads(keeps_the_model)
    for model in seen:
        assert "forward" not in vars(model)


def amp_step_bf16_log_softmax(model, optimizer, scaler, inputs, targets, dtype):
    """Cross-entropy as nll_loss of log_softmax: under CPU autocast log_softmax stays in bfloat16."""
    with torch.autocast(device_type=inputs.device.type, dtype=dtype):
        loss = F.nll_loss(F.log_softmax(model(inputs), dim=1), targets)
    return _scaled_update(optimizer, scaler, loss)


def test_a_loss_kept_in_the_autocast_dtype_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(amp_step_bf16_log_softmax)
    assert info.value.mistake == "loss in the autocast dtype"


# ----------------------------------------------------------------------------- 15th audit: bad input, global state


def targets_zeroed_in_place(model, optimizer, scaler, inputs, targets, dtype):
    targets.zero_()
    return amp_step(model, optimizer, scaler, inputs, targets, dtype)


def test_amp_step_that_writes_into_the_batch_is_named():
    """It was "the weights differ from loss scaling done by hand", with no cause."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(targets_zeroed_in_place)
    assert info.value.message == "amp_step (the first step) changed its argument targets in place"


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64, torch.bool], ids=str)
def test_amp_step_returning_a_loss_of_no_float_dtype_is_refused(dtype):
    """A complex loss passed (its real part was compared, with a warning); an integer one was "2, expected 2.317"."""

    def converted(*args):
        return amp_step(*args).to(dtype)

    with pytest.raises(lab.CheckError) as info:
        lab.check_amp_step(converted)
    assert "where a loss is a floating-point number" in info.value.message
    assert info.value.usage


def amp_step_grad_off(*args):
    loss = amp_step(*args)
    torch.set_grad_enabled(False)
    return loss


def data_parallel_grads_grad_off(*args):
    torch.set_grad_enabled(False)
    return data_parallel_grads(*args)


@pytest.mark.parametrize(
    "check, student",
    [(lab.check_amp_step, amp_step_grad_off), (lab.check_data_parallel_grads, data_parallel_grads_grad_off)],
    ids=["10.2", "10.3"],
)
def test_a_function_that_switches_autograd_off_is_named_and_the_kernel_keeps_it_on(check, student):
    """It was "the check could not use what it was given", or an error of the check's own next step."""
    with pytest.raises(lab.CheckError) as info:
        check(student)
    assert info.value.mistake == "autograd switched off"
    assert torch.is_grad_enabled()


@pytest.mark.parametrize(
    "check, student", [(lab.check_amp_step, amp_step), (lab.check_data_parallel_grads, data_parallel_grads)]
)
@pytest.mark.parametrize("setting", ["grad off", "float64 default"])
def test_a_right_answer_passes_whatever_the_kernel_switched_earlier(check, student, setting, capsys):
    """A torch.set_grad_enabled(False) or torch.set_default_dtype(torch.float64) run in an earlier cell refused
    right answers with wrong causes; the kernel keeps its own setting afterwards."""
    if setting == "grad off":
        torch.set_grad_enabled(False)
    else:
        torch.set_default_dtype(torch.float64)
    try:
        check(student)
        assert torch.is_grad_enabled() == (setting != "grad off")
        assert torch.get_default_dtype() == (torch.float64 if setting == "float64 default" else torch.float32)
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("answer, read", [("identical", "same"), ("The same object.", "same"), ("a copy", "new")])
def test_to_prediction_reads_the_choices_in_other_words(answer, read, capsys):
    """15th audit: "identical" and "a copy" were refused as no choice, though each can mean only one."""
    lab.check_to_prediction(answer)
    assert f"(recorded answer: {read!r})" in capsys.readouterr().out


def test_to_prediction_leaves_a_negation_to_the_question(capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_to_prediction("not the same")
    assert info.value.usage

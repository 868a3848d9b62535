"""Checks of notebook 10 (scaling up): Module.to, a GradScaler step, data parallelism by hand, DDP."""

from __future__ import annotations

import ast
import dataclasses
import decimal
import inspect
import itertools
import math
import numbers
import re
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    describe,
    exercise,
    expect_function,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    plain,
    read_prediction,
    run_student,
)
from .predictions import number_in_text
from .running import grad_mode_kept
from .values import under_a_transform

__all__ = [
    "check_to_prediction",
    "check_amp_step",
    "check_data_parallel_grads",
    "check_ddp_equivalence",
    "check_speedup_prediction",
    "check_rank_loader",
    "print_ddp_scaling",
]


def _cnn(seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    from ..models import DigitsCNN

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DigitsCNN().to(dtype)


def _batch(n: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _near(a: Mapping, b: Mapping, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Is every tensor of ``b`` close to the same key's tensor of ``a`` (NaN never is)?"""
    for key, want in b.items():
        got = a[key].detach().double()
        if got.shape != want.shape or not torch.allclose(got, want.double(), rtol=rtol, atol=atol):
            return False
    return True


def _finite(state: Mapping) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point())


# ----------------------------------------------------------------------------- 10.1 Module.to prediction


def to_keeps_parameters() -> str:
    """The experiment: after ``model.to(torch.float64)``, is ``model.weight`` the object it was?"""
    model = torch.nn.Linear(2, 2)
    before = model.weight
    model.to(torch.float64)  # a real conversion, on any machine
    if model.weight is before:
        return "same"
    return "new"


#: 10.1's two choices in other words a student writes: each phrase, whole, stands for its choice.
TO_SYNONYMS = {
    "same": ("identical", "the same", "the same one", "same one", "same object", "the same object", "unchanged"),
    "new": ("different", "a new one", "new one", "new object", "a new object", "a copy", "copy", "replaced"),
}


def _to_word(prediction: Any) -> Any:
    """10.1's "same" or "new" written in other words ("identical", "a copy") as that choice; anything else as it
    came (a phrase with a negation, such as "not the same", is left to the engine, which asks for the word)."""
    if not isinstance(prediction, str):
        return prediction
    words = " ".join(re.sub(r"[^a-z]+", " ", str.lower(prediction)).split())  # str.lower: a subclass may lie
    for choice, phrases in TO_SYNONYMS.items():
        if words in phrases:
            return choice
    return prediction


@exercise("10.1", "does .to() replace the parameters?", prediction=True)
def check_to_prediction(prediction: Any) -> None:
    """Predict-then-run: after ``model.to(...)``, is ``model.weight`` the object it was before?"""
    check_prediction(
        "Module.to",
        _to_word(prediction),
        to_keeps_parameters(),
        choices=("same", "new"),
        why="Module.to swaps each parameter's data in place, so an optimizer built earlier holds the "
        "live parameters; the hazard is optimizer state or a loaded state_dict on the old device.",
        mistakes={"new": "That belief is the usual reason given for the rule, but it is not why."},
        ask="if the optimizer built before .to() still holds the live parameters, what does .to() leave "
        "behind on the old device or dtype",
    )


# ----------------------------------------------------------------------------- 10.2 a GradScaler step

AMP_LR = 0.1
INIT_SCALE = 1024.0
STEP_WORDS = ("first", "second (inf gradients)", "third")


def amp_batches(with_inf: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three batches, the second full of inf (as an fp16 overflow makes the gradients); or two finite ones."""
    first = _batch(16, 5)
    third = _batch(16, 6)
    if not with_inf:
        return [first, third]
    return [first, (torch.full_like(first[0], float("inf")), first[1]), third]


@dataclasses.dataclass(frozen=True)
class AmpRecipe:
    """How a step is done: the reference, or one of its typical variants."""

    dtype: torch.dtype | None  # autocast's dtype; None: no autocast (float32)
    scaler_on: bool = True
    unscale: bool = True  # divide the gradients by the scale before the update
    skip_nonfinite: bool = True
    zero_grad: bool = True
    updates: int = 1  # weight updates per step (2: an optimizer.step() after the scaler's)
    scaled_backward: bool = True  # backward() on the scaled loss (False: on the loss itself)
    loss: str = "mean"  # the cross-entropy's reduction; "softmax": of probabilities; "nll": NLL of the raw scores;
    # "mean per example": the mean divided by the batch size again
    clip: float | None = None  # clip_grad_norm_ to this norm, on the gradients as backward() left them (scaled)


@dataclasses.dataclass
class AmpRun:
    """After each step: the weights, the scale and the loss."""

    states: list[dict] = dataclasses.field(default_factory=list)
    scales: list[float] = dataclasses.field(default_factory=list)
    losses: list[torch.Tensor] = dataclasses.field(default_factory=list)
    updates: list[int] = dataclasses.field(default_factory=list)  # the scaler's update() calls so far


def _amp_loss(logits: torch.Tensor, targets: torch.Tensor, form: str) -> torch.Tensor:
    """The cross-entropy of a step (``form`` "mean"), or of its typical variants ("sum", "softmax", "nll")."""
    if form == "softmax":
        return F.cross_entropy(logits.softmax(dim=1), targets)
    if form == "nll":
        return F.nll_loss(logits, targets)
    if form == "mean per example":
        return F.cross_entropy(logits, targets) / len(targets)
    return F.cross_entropy(logits, targets, reduction=form)


def amp_reference(recipe: AmpRecipe, batches: list) -> AmpRun:
    """Loss scaling by hand: on inf/NaN gradients skip the step and halve the scale, else step and double it."""
    model = _cnn(3)
    params = list(model.parameters())
    scale = INIT_SCALE if recipe.scaler_on else 1.0
    kept = [torch.zeros_like(p) for p in params]
    run = AmpRun()
    for x, y in batches:
        with torch.autocast("cpu", dtype=recipe.dtype or torch.bfloat16, enabled=recipe.dtype is not None):
            loss = _amp_loss(model(x), y, recipe.loss)
        grads = torch.autograd.grad(loss * scale if recipe.scaled_backward else loss, params)
        if recipe.zero_grad:
            kept = list(grads)
        else:
            kept = [k + g for k, g in zip(kept, grads)]
        finite = all(bool(torch.isfinite(g).all()) for g in kept)
        if finite or not recipe.skip_nonfinite or not recipe.scaler_on:
            with torch.no_grad():
                for p, g in zip(params, _clipped(kept, recipe.clip)):
                    p -= recipe.updates * AMP_LR * (g / scale if recipe.unscale else g)
        if recipe.scaler_on:
            scale = scale * 2 if finite else scale / 2
        run.states.append(_state(model))
        run.scales.append(scale)
        run.losses.append(loss.detach())
    return run


def _clipped(grads: list[torch.Tensor], max_norm: float | None) -> list[torch.Tensor]:
    """``grads`` scaled as torch.nn.utils.clip_grad_norm_(..., max_norm) scales them (as they are, if None)."""
    if max_norm is None:
        return grads
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    factor = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [g * factor for g in grads]


#: Norms students clip the gradients to (clip_grad_norm_'s max_norm), typical values.
CLIP_NORMS = (0.5, 1.0, 2.0, 5.0, 10.0)


class CountingScaler(torch.amp.GradScaler):
    """A GradScaler that counts the calls of scale, step and update (to name a mistake, never to judge)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = {"scale": 0, "step": 0, "update": 0}
        self.given_scales: list[Any] = []  # what update() was given as the new scale, when it was given one
        self.backwards = 0  # backward passes through a loss this scaler scaled

    def scale(self, outputs: Any) -> Any:
        self.calls["scale"] += 1
        scaled = super().scale(outputs)
        if isinstance(scaled, torch.Tensor) and scaled.requires_grad:
            scaled.register_hook(self._count_backward)
        return scaled

    def _count_backward(self, grad: torch.Tensor) -> None:
        """Called when backward() passes through a scaled loss (to tell "no backward" from "gradients cleared")."""
        self.backwards += 1

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls["step"] += 1
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        self.calls["update"] += 1
        if new_scale is not None:
            self.given_scales.append(new_scale)
        super().update(new_scale)


WEIGHTS_CAST = Mistake(
    "model cast to dtype",
    None,
    "the model itself was converted to the low-precision dtype: autocast leaves the weights in float32 and runs "
    "each operation in `dtype`, so the updates (often smaller than a low-precision weight can register) are kept; "
    "a GradScaler refuses float16 gradients for that reason",
    look="every line that converts the model, its parameters or its gradients to another dtype",
)

# What GradScaler's own assertions mean in a student's amp_step (matched on their text).
SCALER_ERRORS = [
    Mistake(
        "loss not scaled",
        "_scale is None",
        "the scaler was asked to step, but it had scaled nothing in this step: which tensor went into backward()?",
        look="the line that calls backward()",
    ),
    Mistake(
        "update without scaler.step",
        "No inf checks were recorded prior to update",
        "the scaler was asked to update its scale before it had stepped in this iteration: update() adapts the "
        "scale from what the scaler's step found (inf or not), so it has to come after that step; a step that goes "
        "around the scaler leaves it nothing to check either",
        look="the line that updates the weights, and the order of the scaler's calls",
    ),
    Mistake(
        "gradients gone before the step",
        "No inf checks were recorded for this optimizer",
        "the scaler found no gradients to check when it was asked to step: were they cleared between "
        "backward() and the step?",
        look="where the gradients are zeroed",
    ),
    Mistake(
        "unscaled twice",
        "unscale_() has already been called",
        "the gradients were to be unscaled a second time in one step: scaler.step() unscales them itself unless "
        "unscale_() already did, and unscale_() may run once per optimizer between two update() calls",
        look="every call that unscales the gradients, and when it runs",
    ),
    Mistake(
        "scaler stepped twice",
        "step() has already been called since the last update()",
        "the scaler was asked to step twice in one iteration: one step per iteration, then update() to adapt the "
        "scale, before the next iteration's step",
        look="every call of the scaler's step, and the order of the scaler's calls",
    ),
    dataclasses.replace(WEIGHTS_CAST, matches="Attempting to unscale FP16 gradients"),
    Mistake(
        "a number given to the scaler",
        "outputs must be a Tensor or an iterable of Tensors",
        "the scaler was given the loss as a Python number (.item(), float()): scale() multiplies the loss tensor, "
        "which keeps its graph, so that backward() can go through the scaled loss; a number has no graph, and the "
        "scaler refuses it",
        look="what the scaler's scale() is given",
    ),
    Mistake(
        "unscaled after the step",
        "unscale_() is being called after step()",
        "the gradients were to be unscaled after the scaler's step: by then the step has unscaled them itself and "
        "updated the weights; unscale_() is for looking at the true gradients (to clip them, say) before the step",
        look="where the gradients are unscaled, next to the scaler's step",
    ),
]


INF_STEP_SKIPPED_BY_HAND = Mistake(
    "inf step skipped by hand",
    None,
    "on the batch whose loss is not finite, amp_step skipped the scaler's step itself, and the scaler's update then "
    "had no step to learn from: finding inf gradients and skipping the update is the scaler's own job, and its step "
    "does it on every batch (it checks the gradients, skips the update when they are not finite, and tells the "
    "next update to lower the scale)",
    look="what amp_step does differently when the loss is not finite",
)


#: What torch.autocast says when its device_type is a torch.device.
DEVICE_TYPE_NOT_STR = "Expected `device_type` of type `str`"

DEVICE_FOR_ITS_TYPE = Mistake(
    "device given for its type",
    None,
    "torch.autocast was given a torch.device where it takes the name of a kind of device, a string: a device and "
    "its kind are two things, and a device holds the name of its kind as one of its attributes",
    look="the device type autocast is given",
)


#: What to say when amp_step wrote into the batch it was given.
BATCH_CHANGED = (
    "an in-place operation (a method ending in _, +=, an assignment into a slice) wrote into the batch: a training "
    "step reads its batch and leaves it as it came, for the loop that handed it over"
)


def _call_amp_step(amp_step: Callable, args: tuple, step: str) -> Any:
    """Call the student's step; GradScaler's assertions become the mistake they mean, and so does a batch whose inf
    values were removed in place."""
    had_inf = not bool(torch.isfinite(args[3]).all())
    try:
        with grad_mode_kept(f"amp_step (the {step} step)"):
            return run_student(amp_step, *args, what=f"amp_step (the {step} step)", inplace_hint=BATCH_CHANGED)
    except CheckError as err:
        if had_inf and "in place" in err.message and bool(torch.isfinite(args[3]).all()):
            raise mistake_error(
                f"in the {step} step, the model never saw the batch's inf values", INF_REMOVED
            ) from None
        cause = str(err.__cause__ or "")
        if DEVICE_TYPE_NOT_STR in cause:
            raise mistake_error(err.message, DEVICE_FOR_ITS_TYPE) from None
        for mistake in SCALER_ERRORS:
            if mistake.matches in cause:
                message = f"amp_step raised {type(err.__cause__).__name__} from the GradScaler in the {step} step"
                raise mistake_error(message, _skipped_on_inf(mistake, args[2], step)) from None
        raise


NO_BACKWARD = Mistake(
    "no backward",
    None,
    "the scaler's step found no gradients, and backward() never ran through the scaled loss: scaling the loss "
    "only multiplies a number; the gradients exist only once backward() has gone through that scaled loss",
    look="what happens to the scaled loss between the scaler's scale() and its step",
)


def _skipped_on_inf(mistake: Mistake, scaler: CountingScaler, step: str) -> Mistake:
    """An update without a scaler's step, on the inf batch only, after steps that went through the scaler; no
    gradients at the step because backward() never ran (rather than gradients cleared after it)."""
    if mistake.name == "update without scaler.step" and "inf" in step and scaler.calls["step"] > 0:
        return INF_STEP_SKIPPED_BY_HAND
    if mistake.name == "gradients gone before the step" and scaler.calls["scale"] > 0 and scaler.backwards == 0:
        return NO_BACKWARD
    return mistake


SCORES_RETURNED = Mistake(
    "scores returned",
    None,
    "amp_step returned a (batch, classes) tensor, the model's scores, where fp32_step returns the step's loss: one "
    "number, the mean cross-entropy over the batch",
    look="what amp_step returns",
)


def _not_a_loss_hint(loss: Any) -> str:
    """What to change in what amp_step returned where the loss, a tensor, was expected."""
    if loss is None:
        return (
            "a missing `return`, or the value of a call that gives nothing back (backward, the optimizer's or the "
            "scaler's step): amp_step ends with the step's loss"
        )
    if isinstance(loss, (tuple, list, dict)):
        return (
            "amp_step returned several values where fp32_step returns one: the training loop takes what it returns "
            "as the step's loss, alone"
        )
    return (
        "a Python number (what .item() or float() give) cannot be stacked with the other steps' losses: what kind "
        "of value does the loss start as, before it is turned into a number?"
    )


def _returned_loss(loss: Any, step: str, finite: bool) -> torch.Tensor:
    """The loss amp_step returned, if it is one: a 0-dim tensor holding values, without its graph."""
    name = f"the loss amp_step returned in the {step} step"
    if not isinstance(loss, torch.Tensor):
        raise CheckError(
            f"amp_step must return the loss as a tensor (the training loop stacks them); {name} is not one",
            expected="a 0-dim tensor",
            got=describe(loss),
            hint=_not_a_loss_hint(loss),
            usage=True,
        )
    if loss.dim() == 2:
        raise mistake_error(f"{name} has shape {tuple(loss.shape)}, one row per example", SCORES_RETURNED)
    loss = expect_tensor(loss, name, shape=(), finite=finite)
    if not loss.is_floating_point():
        raise CheckError(
            f"{name} has dtype {str(loss.dtype).removeprefix('torch.')}, where a loss is a floating-point number",
            expected="the loss as the cross-entropy computed it (a float dtype), detached",
            got=describe(loss),
            hint="a conversion after the loss was computed (to an integer, a boolean or a complex number) changes "
            "what the training loop records: return the loss itself",
            usage=True,
        )
    if loss.requires_grad:
        raise CheckError(
            f"{name} still holds its graph (requires_grad=True)",
            hint="the training loop keeps every step's loss: one with its graph keeps every step's graph alive",
            mistake="loss not detached",
        )
    return loss


def _weights_like(recipe: AmpRecipe, batches: list, step: int) -> Callable[[dict], bool]:
    """A test on the weights: are they those after step ``step`` of ``recipe``? (The batches after that step
    cannot change them: the reference runs up to it only.)"""

    def test(state: dict) -> bool:
        return _near(state, amp_reference(recipe, batches[: step + 1]).states[step])

    return test


def _weights_unmoved(dtype: torch.dtype, batches: list, step: int) -> Callable[[dict], bool]:
    """A test on the weights: are they those before step ``step`` (of the right recipe)?"""

    def test(state: dict) -> bool:
        before = amp_reference(AmpRecipe(dtype), batches[:step]).states[step - 1] if step else _state(_cnn(3))
        return _near(state, before, rtol=0, atol=1e-9)

    return test


def _not_finite(state: dict) -> bool:
    return not _finite(state)


UNSCALED_BACKWARD = Mistake(
    "backward on the unscaled loss",
    None,
    "the weights moved 1/scale as far as they should: the scaler's step divides the gradients by the scale, "
    "but backward() ran on the loss before it was scaled",
    look="which tensor backward() is called on",
)


SUMMED_LOSS = Mistake(
    "loss summed over the batch",
    None,
    "the weights moved as far as a loss summed over the batch moves them, batch-size times too far: the "
    "cross-entropy's default reduction, the mean, keeps the step's size independent of the batch size",
    look="the arguments of the loss function",
)

SOFTMAX_FIRST = Mistake(
    "softmax before the loss",
    None,
    "a softmax was applied before the cross-entropy, which takes the raw scores (logits) and applies "
    "log-softmax itself: the scores went through a softmax twice, and the gradients shrink",
    look="what the loss function is given",
)


NLL_OF_SCORES = Mistake(
    "negative log-likelihood of the scores",
    None,
    "the loss took the raw scores (logits) for log-probabilities: the negative log-likelihood loss only picks "
    "each target's entry and expects its input already normalised, so nothing turned the scores into "
    "log-probabilities; the cross-entropy asked for normalises the scores itself",
    look="which loss function the step computes, and what it is given",
)


MEAN_DIVIDED_AGAIN = Mistake(
    "loss divided by the batch size",
    None,
    "the weights moved batch-size times too little: the cross-entropy already averages over the batch (its default "
    "reduction is the mean), and the loss was then divided by the number of examples a second time",
    look="the line that computes the loss",
)


def amp_mistakes(dtype: torch.dtype, batches: list, step: int) -> list[Mistake]:
    """The typical wrong steps, each matching the weights after step ``step`` of one variant of the recipe."""
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16

    def like(recipe: AmpRecipe) -> Callable[[dict], bool]:
        return _weights_like(recipe, batches, step)

    return [
        Mistake(
            "no autocast",
            like(AmpRecipe(None)),
            "the weights moved exactly as a float32 forward pass moves them: in which precision did the forward "
            "pass and the loss run, and what tells PyTorch to use `dtype` on the inputs' device?",
            look="the lines that compute the logits and the loss",
        ),
        Mistake(
            "dtype ignored",
            like(AmpRecipe(other)),
            f"with dtype={dtype} the step matches a {other} forward pass: is the dtype argument used, or a "
            "dtype written into the code?",
            look="every place amp_step names a dtype",
        ),
        Mistake(
            "stepped on scaled gradients",
            like(AmpRecipe(dtype, unscale=False, skip_nonfinite=False)),
            f"the update used gradients still multiplied by the scale ({INIT_SCALE:g}): which call divides them "
            "by the scale before the weights change?",
            look="the line that updates the weights",
        ),
        Mistake(
            "inf step taken",
            _not_finite,
            "the weights hold NaN or inf: a step on non-finite gradients was taken instead of skipped",
            look="the line that updates the weights",
        ),
        Mistake(
            "gradients not zeroed",
            like(AmpRecipe(dtype, zero_grad=False)),
            "the third step was skipped too: the inf of the skipped step was still in .grad, since backward() "
            "adds to what is there",
            look="where the gradients are zeroed",
        ),
        Mistake(
            "weights updated twice",
            like(AmpRecipe(dtype, updates=2)),
            "the weights moved twice as far as one step moves them: after the scaler's step, which already "
            "updated them, how many more updates does the step make?",
            look="every call that updates the weights",
        ),
        dataclasses.replace(UNSCALED_BACKWARD, matches=like(AmpRecipe(dtype, scaled_backward=False))),
        _clipped_while_scaled(like, dtype),
        Mistake(
            "no step",
            _weights_unmoved(dtype, batches, step),
            "the weights did not move on a finite batch: no step was taken, or the gradients were cleared before it",
            look="the order of backward, the step and zeroing the gradients",
        ),
        *_amp_loss_mistakes(like, dtype),
    ]


def _clipped_while_scaled(like: Callable[[AmpRecipe], Callable], dtype: torch.dtype) -> Mistake:
    """The step whose gradients were clipped (clip_grad_norm_) before the scaler unscaled them."""
    return Mistake(
        "clipped while scaled",
        _any_of([like(AmpRecipe(dtype, clip=norm)) for norm in CLIP_NORMS]),
        f"the gradients were clipped while still multiplied by the scale ({INIT_SCALE:g}): the clip measures "
        "their norm, scale times too large, and cuts a step that needed no cutting. What has to happen to the "
        "gradients before anything reads their size?",
        look="the lines between backward() and the scaler's step",
    )


def _any_of(tests: list[Callable[[dict], bool]]) -> Callable[[dict], bool]:
    """A test on the weights that holds where any of ``tests`` holds."""

    def test(state: dict) -> bool:
        return any(one(state) for one in tests)

    return test


def _amp_loss_mistakes(like: Callable[[AmpRecipe], Callable], dtype: torch.dtype) -> list[Mistake]:
    """The steps with another loss than the mean cross-entropy of the scores."""
    return [
        dataclasses.replace(SUMMED_LOSS, matches=like(AmpRecipe(dtype, loss="sum"))),
        dataclasses.replace(SOFTMAX_FIRST, matches=like(AmpRecipe(dtype, loss="softmax"))),
        dataclasses.replace(NLL_OF_SCORES, matches=like(AmpRecipe(dtype, loss="nll"))),
        dataclasses.replace(MEAN_DIVIDED_AGAIN, matches=like(AmpRecipe(dtype, loss="mean per example"))),
    ]


def _largest_difference(state: Mapping, want: Mapping) -> str:
    """Where the weights differ most from the reference, in words (NaN and inf count as the most)."""
    differences = {}
    for key, value in want.items():
        difference = (state[key].double() - value.double()).abs().max()
        differences[key] = float(torch.nan_to_num(difference, nan=float("inf")))
    worst_key = max(differences, key=differences.get)
    return f"a largest difference of {differences[worst_key]:.2g} (in {worst_key})"


INF_STEP_HIDDEN = Mistake(
    "inf step hidden from the scaler",
    None,
    "on the batch whose loss is not finite, amp_step returned before the scaler saw the step: no step was taken, "
    "but the scaler never learned of the overflow, so it did not lower the scale and the next steps overflow "
    "again; finding inf and skipping the step is the scaler's own job",
    look="what amp_step does when the loss is not finite",
)


SCALE_GIVEN_TO_UPDATE = Mistake(
    "scale given to update",
    None,
    "update() was given a scale of its own: a scale passed to update() replaces the one the scaler would choose, so "
    "the scale no longer follows what the steps found (lowered after inf gradients, raised after good steps); "
    "the scaler works the new scale out itself, from its step's check of the gradients",
    look="the call that updates the scaler, and what it is given",
)


def _scale_mistake(scaler: CountingScaler, run: AmpRun, ref: AmpRun, i: int) -> Mistake | None:
    if scaler.given_scales:
        return SCALE_GIVEN_TO_UPDATE
    if not any(scaler.calls.values()):
        return Mistake(
            "scaler unused",
            None,
            "the scaler passed to amp_step was never used: amp_step must work through its `scaler` argument",
        )
    if scaler.calls["update"] == 0:
        return Mistake(
            "no update",
            None,
            "the scale never changed: a GradScaler adapts its scale only when told to, at the end of each step",
            look="the end of amp_step",
        )
    overflowed = ref.scales[i] < (ref.scales[i - 1] if i else INIT_SCALE)  # the reference halved the scale here
    if overflowed and run.updates[i] == (run.updates[i - 1] if i else 0):
        return INF_STEP_HIDDEN
    return None


LOSS_IN_LOW_PRECISION = Mistake(
    "loss in the autocast dtype",
    None,
    "the weights are off by only a little, as a loss computed at the autocast dtype's precision makes them: under "
    "autocast F.cross_entropy computes in float32, while log_softmax followed by nll_loss (or a loss written out "
    "by hand) stays in the low-precision dtype on the CPU, where the check runs (a GPU's autocast lifts "
    "log_softmax to float32 as well, but the CPU's does not)",
    look="how the loss is computed inside the autocast block",
)


def _judge_amp_step(run: AmpRun, ref: AmpRun, scaler: CountingScaler, dtype: torch.dtype, i: int) -> None:
    """Compare the student's weights, scale and loss after step ``i`` with the reference."""
    step = STEP_WORDS[i] if len(ref.states) == 3 else ("first", "second")[i]
    where = f"after the {step} step (dtype={dtype}, scaler {'on' if scaler.is_enabled() else 'off'})"
    cast = sorted({str(v.dtype) for key, v in run.states[i].items() if v.dtype != ref.states[i][key].dtype})
    if cast:
        message = f"the model's weights {where} are {', '.join(cast)}, not float32 as before the step"
        raise mistake_error(message, WEIGHTS_CAST, expected="float32 weights", got=", ".join(cast))
    if not _near(run.states[i], ref.states[i]):
        message = f"the weights {where} differ from loss scaling done by hand"
        facts = {"got": _largest_difference(run.states[i], ref.states[i])}
        for mistake in amp_mistakes(dtype, amp_batches(scaler.is_enabled()), i):
            if mistake.matches(run.states[i]):
                raise mistake_error(message, mistake, **facts)
        if dtype != torch.float32 and _near(run.states[i], ref.states[i], rtol=1e-2, atol=1e-3):
            raise mistake_error(message, LOSS_IN_LOW_PRECISION, **facts)
        raise CheckError(message, **facts)
    if run.scales[i] != ref.scales[i]:
        message = f"the scale {where} is {run.scales[i]:g}, expected {ref.scales[i]:g}"
        mistake = _scale_mistake(scaler, run, ref, i)
        if mistake is not None:
            raise mistake_error(message, mistake)
        raise CheckError(message)
    loss, want = run.losses[i], ref.losses[i]
    if bool(torch.isfinite(want)) and not torch.allclose(loss.double(), want.double(), rtol=1e-3):
        message = f"the loss amp_step returned {where} is {float(loss):.4g}, expected {float(want):.4g}"
        if torch.allclose(loss.double(), want.double() * INIT_SCALE * 2**i, rtol=1e-3):
            why = "the returned loss is multiplied by the scale: the scaled loss is for backward() only"
            raise CheckError(message, hint=why, mistake="scaled loss returned")
        raise CheckError(message)


AUTOCAST_ELSEWHERE = Mistake(
    "autocast on another device type",
    None,
    "the step ran in float32: autocast was given a device type that is not the inputs' (written in, or chosen by "
    "whether a GPU exists), and it changes only the operations of that device type, so on the inputs' device "
    "nothing ran in `dtype`",
    look="the device type autocast is given, and where that value comes from",
)

AUTOCAST_OFF_WITH_SCALER = Mistake(
    "autocast off with the scaler",
    None,
    "with the scaler disabled (bf16 needs no loss scaling) the forward pass ran in float32: autocast and the "
    "scaler are separate switches, and only the loss scaling is off here; the forward pass still runs in `dtype`",
    look="what decides whether autocast is enabled",
)


def _renamed(err: CheckError, amp_step: Callable, scaler_on: bool) -> CheckError:
    """A float32 step ("no autocast") whose cause shows elsewhere: autocast on another device type, or autocast
    switched off with the scaler (the same step passed with the scaler on)."""
    if err.mistake != "no autocast":
        return err
    source = _autocast_device_source(amp_step)
    if source is not None:
        return mistake_error(err.message, AUTOCAST_ELSEWHERE, expected="the inputs' device type", got=source)
    if not scaler_on:
        return mistake_error(err.message, AUTOCAST_OFF_WITH_SCALER, got=err.got)
    return err


def _run_amp_case(amp_step: Callable, dtype: torch.dtype, scaler_on: bool) -> None:
    __tracebackhide__ = True
    try:
        _run_amp_steps(amp_step, dtype, scaler_on)
    except CheckError as err:
        raise _renamed(err, amp_step, scaler_on) from None


INF_REMOVED = Mistake(
    "inf removed from the batch",
    None,
    "the batch's inf values were replaced (clamped, nan_to_num, masked) before the model saw them: here the inf "
    "stands for what an fp16 overflow does to a step, and the GradScaler is there to notice the inf gradients it "
    "leads to and skip that step; a batch made finite by hand takes a step on values that are not the data",
    look="what happens to inputs before the forward pass",
)


def _all_finite(args: tuple) -> bool:
    """Are the floating-point tensors among a forward pass's arguments all finite?"""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _run_amp_steps(amp_step: Callable, dtype: torch.dtype, scaler_on: bool) -> None:
    batches = amp_batches(with_inf=scaler_on)
    ref = amp_reference(AmpRecipe(dtype, scaler_on=scaler_on), batches)
    model = _cnn(3)
    optimizer = torch.optim.SGD(model.parameters(), lr=AMP_LR)
    scaler = CountingScaler("cpu", init_scale=INIT_SCALE, growth_interval=1, enabled=scaler_on)
    run = AmpRun()
    finite_inputs: list[bool] = []  # for each forward pass of the model: were its inputs all finite?
    model.register_forward_pre_hook(lambda module, args: finite_inputs.append(_all_finite(args)))
    optimizer_steps: list[int] = []  # one entry per step the optimizer passed to amp_step took
    optimizer.register_step_post_hook(lambda *hook_args: optimizer_steps.append(1))
    for i, (x, y) in enumerate(batches):
        step = STEP_WORDS[i] if scaler_on else ("first", "second")[i]
        finite_inputs.clear()
        loss = _call_amp_step(amp_step, (model, optimizer, scaler, x.clone(), y.clone(), dtype), step)
        if finite_inputs and all(finite_inputs) and not bool(torch.isfinite(x).all()):
            raise mistake_error(f"in the {step} step, the model never saw the batch's inf values", INF_REMOVED)
        run.losses.append(_returned_loss(loss, step, finite=bool(torch.isfinite(ref.losses[i]))))
        run.states.append(_state(model))
        run.scales.append(scaler.get_scale())
        run.updates.append(scaler.calls["update"])
        _judge_amp_step(run, ref, scaler, dtype, i)
        if not optimizer_steps and not _near(run.states[i], _state(_cnn(3)), rtol=0, atol=1e-9):
            message = f"the weights after the {step} step are right, but the optimizer passed to amp_step took no step"
            raise mistake_error(message, OPTIMIZER_UNUSED)


OPTIMIZER_UNUSED = Mistake(
    "optimizer argument not used",
    None,
    "the weights moved, but not through the optimizer amp_step was given: another one, made inside amp_step, took "
    "the step. A new optimizer each step forgets what the optimizer keeps between steps (momentum, Adam's running "
    "averages, a learning-rate schedule): here plain SGD hides it, in training it would not. amp_step works through "
    "its `optimizer` argument, as fp32_step does",
    look="which optimizer the scaler's step is given",
)


FIXED_DEVICE_TYPE = Mistake(
    "device type written in",
    None,
    "autocast covers the operations of one device type, and amp_step decides that type itself (written in, chosen "
    "by whether a GPU exists, or an autocast made for one device) instead of reading it from the tensors the step "
    "runs on: on this machine it is their own, but where they live elsewhere (a GPU, for one) the forward pass "
    "would run without autocast, in float32",
    look="the device type autocast is given, and where that value comes from",
)

DEVICE_AUTOCASTS = (torch.cpu.amp.autocast, torch.cuda.amp.autocast)  # deprecated, each fixed to its device


def _function_node(function: Callable) -> ast.FunctionDef | None:
    """A student's function's own syntax tree (amp_step's, rank_loader_fixed's), or None where its source cannot
    be read (a lambda, a built function, a file changed since): the source is only a second look, so a failure to
    read it judges nothing."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except Exception:  # OSError, TypeError, SyntaxError, tokenize.TokenError, ...: nothing to read
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            return node
    return None


def _argument_names(function: ast.FunctionDef) -> set[str]:
    """The names of the arguments of ``function`` and of every function or lambda defined inside it, ``*args``
    and ``**kwargs`` included: the values amp_step is given, or that its own helpers are given."""
    names = set()
    for node in ast.walk(function):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        arguments = node.args
        every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
        for extra in (arguments.vararg, arguments.kwarg):
            if extra is not None:
                every.append(extra)
        names |= {argument.arg for argument in every}
    return names


def _local_values(function: ast.FunctionDef) -> dict[str, list[ast.expr]]:
    """Each local name of ``function``: the expressions assigned to it (a loop variable: what it iterates)."""
    values: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        pairs = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.comprehension)):
            pairs = [(node.target, node.iter)]
        for target, value in pairs:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    values.setdefault(name.id, []).append(value)
    return values


def _reads_data(expr: ast.expr, data: set[str], values: dict[str, list[ast.expr]]) -> bool:
    """Does ``expr`` depend on one of the names in ``data`` (amp_step's tensors), through local names too?
    Each local name is followed once, so names assigned from each other cost no more than their assignments."""
    followed: set[str] = set()
    to_read = [expr]
    while to_read:
        for node in ast.walk(to_read.pop()):
            if not isinstance(node, ast.Name) or node.id in followed:
                continue
            if node.id in data:
                return True
            followed.add(node.id)
            to_read.extend(values.get(node.id, []))
    return False


def _autocast_device_source(amp_step: Callable) -> str | None:
    """Where amp_step's autocast gets its device type from, in words, if not from its tensors (a literal 'cpu', a
    choice by torch.cuda.is_available(), torch.cpu.amp.autocast); else None. The behaviour shows it only where the
    inputs live on another device, which no CPU-only machine can arrange."""
    function = _function_node(amp_step)
    if function is None:
        return None
    data = _argument_names(function) - {"dtype"}
    values = _local_values(function)
    for call in ast.walk(function):
        if not isinstance(call, ast.Call):
            continue
        called = ast.unparse(call.func)
        if not called.endswith("autocast"):
            continue
        found = getattr(amp_step, "__globals__", {}).get(called) if isinstance(call.func, ast.Name) else None
        if ".cpu.amp." in called or ".cuda.amp." in called or found in DEVICE_AUTOCASTS:
            return f"{called}, an autocast for one device type"
        device = [kw.value for kw in call.keywords if kw.arg == "device_type"] + call.args[:1]
        if device and not _reads_data(device[0], data, values):
            return _described(device[0], values)
    return None


def _described(device: ast.expr, values: dict[str, list[ast.expr]]) -> str:
    """The device argument of autocast, and where it comes from."""
    text = ast.unparse(device)
    if isinstance(device, ast.Constant):
        return f"{text}, written in"
    if any(isinstance(node, ast.Name) and node.id in values for node in ast.walk(device)):
        return f"{text}, chosen inside amp_step"
    return text


@exercise("10.2", "a training step with a GradScaler")
def check_amp_step(amp_step: Callable) -> None:
    """``amp_step(model, optimizer, scaler, inputs, targets, dtype)``: bf16 and fp16, 3 steps each, the 2nd on inf;
    then bf16 with the scaler disabled."""
    expect_function(amp_step, "amp_step")
    for dtype in (torch.bfloat16, torch.float16):
        _run_amp_case(amp_step, dtype, scaler_on=True)
    _run_amp_case(amp_step, torch.bfloat16, scaler_on=False)
    source = _autocast_device_source(amp_step)
    if source is not None:
        raise mistake_error(
            "amp_step's autocast does not take its device type from the tensors it runs on",
            FIXED_DEVICE_TYPE,
            expected="the inputs' device type, whatever it is",
            got=source,
        )
    passed("amp_step: the step on inf gradients was skipped and the scale halved; the others stepped and doubled it")


# ----------------------------------------------------------------------------- 10.3 data parallelism by hand


def _grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters())))


def _flat(tensors: Any) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten() for t in tensors])


def _mean(gradient_lists: list[list[torch.Tensor]], divide_by: int) -> list[torch.Tensor]:
    return [sum(gs) / divide_by for gs in zip(*gradient_lists)]


def _distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """||a - b|| / ||b|| over all parameters (inf where a holds NaN or inf)."""
    flat_a = _flat(a)
    flat_b = _flat(b)
    if not bool(torch.isfinite(flat_a).all()):
        return float("inf")
    return float((flat_a - flat_b).norm() / flat_b.norm().clamp(min=1e-30))


def _same_grads(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return _distance(a, b) < 1e-9


BATCH_SIZE_DIVISOR = Mistake(
    "divided by the batch size",
    None,
    "the shards' gradients were divided by the number of examples in the batch: each shard's loss is already a "
    "mean over its examples, so what is left to average is the ranks' gradients, one per rank",
    look="the division in the return line",
)

SHARD_SIZE_DIVISOR = Mistake(
    "divided by the shard size",
    None,
    "the sum of the shards' gradients was divided by the number of examples in a shard: each shard's loss is "
    "already a mean over its examples, so what is left to average is the ranks' gradients, one per rank",
    look="the division in the return line",
)

SPLIT_SIZE = Mistake(
    "split by chunk size",
    None,
    "the batch was cut into shards of world_size examples each, not into world_size shards: Tensor.split takes "
    "the size of each chunk, while Tensor.chunk takes the number of chunks",
    look="the call that cuts the batch into shards",
)


WORLD_SIZE_WRITTEN_IN = Mistake(
    "world size written in",
    None,
    "the result is what 2 ranks would give, but world_size is not 2 here: a 2 is written where world_size belongs "
    "(the number of shards the batch is cut into, or what their gradients' sum is divided by)",
    look="every number written into the function",
)


SHARDS_ONE_SHORT = Mistake(
    "shards one short",
    None,
    "each rank's shard is one example short: a slice already stops before its end index, so ending it one "
    "earlier leaves out the last example of every shard",
    look="where each rank's slice ends",
)


SHARDS_ONE_LONG = Mistake(
    "shards one too long",
    None,
    "each rank's shard takes one example more, the first of the next rank's shard: a slice already stops before "
    "its end index, so the end of rank r's slice is where rank r + 1's begins, with nothing added",
    look="where each rank's slice ends",
)


SHARD_SUM_OVER_WORLD_SIZE = Mistake(
    "shard's sum divided by world_size",
    None,
    "each shard's loss was its sum divided by world_size, where its mean divides by the number of examples in the "
    "shard: the shards had the right size (the model saw them), so the gradients come out shard size / world_size "
    "times too large",
    look="the loss of a shard, and what its sum is divided by",
)


def _split_or_divided(mistake: Mistake, calls: list[torch.Tensor] | None, ws: int) -> Mistake:
    """SPLIT_SIZE's gradients are also those of shards of the right size whose sums were divided by world_size:
    the examples the model saw in each call tell the two apart."""
    if mistake.name != SPLIT_SIZE.name or not calls:
        return mistake
    if any(len(inputs) == ws for inputs in calls):
        return mistake
    return SHARD_SUM_OVER_WORLD_SIZE


def fixed_world_size_mistakes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[Mistake]:
    """The results of a function that splits or averages for 2 ranks whatever world_size is (none where it is 2)."""
    if ws == 2:
        return []
    k = len(x) // ws
    shards = [_grads(model, x[r * k : (r + 1) * k], y[r * k : (r + 1) * k]) for r in range(ws)]
    halves = [_grads(model, xs, ys) for xs, ys in zip(x.chunk(2), y.chunk(2))]
    return [
        dataclasses.replace(WORLD_SIZE_WRITTEN_IN, matches=_mean(halves, ws)),
        dataclasses.replace(WORLD_SIZE_WRITTEN_IN, matches=_mean(shards, 2)),
    ]


def data_parallel_mistakes(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int, stale: list | None = None
) -> list[Mistake]:
    """The typical wrong results of data_parallel_grads for one case, each a list of gradients (``stale``: the
    gradients the model's .grad held when the function was called, if any)."""
    k = len(x) // ws
    shards = [_grads(model, x[r * k : (r + 1) * k], y[r * k : (r + 1) * k]) for r in range(ws)]
    before = [] if stale is None else [stale]  # what .grad held before the first backward
    running_sums = [_mean(before + shards[: r + 1], 1) for r in range(ws)]
    of_size_ws = [_grads(model, xs, ys) for xs, ys in zip(x.split(ws), y.split(ws))]  # split(ws): chunks of ws rows
    return [
        Mistake(
            "summed, not averaged",
            _mean(shards, 1),
            f"the shards' gradients were added up: each is the gradient of a mean over its shard, so how do "
            f"{ws} such gradients combine into the gradient of the mean over the whole batch?",
            look="the return line",
            symptom=f"each gradient is {ws} times the whole-batch gradient",
        ),
        Mistake(
            "averaged twice",
            _mean(shards, ws * ws),
            f"each gradient is {ws} times too small: count how often the shards' contributions are divided",
            look="every division in the function",
        ),
        Mistake(
            "sum reduction",
            _mean([[g * k for g in s] for s in shards], ws),
            "each shard's gradient is its shard size times too large: the shard's loss is a sum, not a mean",
            look="the loss of a shard",
        ),
        Mistake(
            "gradients not zeroed",
            _mean(running_sums, ws),
            "shard r's gradient still holds the shards before it: backward() adds to .grad",
            look="the start of the loop over ranks",
        ),
        Mistake(
            "last shard only",
            shards[-1],
            "the result is the last shard's gradient alone: were all shards' gradients kept, a copy each, "
            "before the next backward() reused .grad?",
            look="what is kept after each backward()",
        ),
        Mistake(
            "first shard only",
            shards[0],
            "the result is the first shard's gradient alone: does every rank run (a `return` inside the loop over "
            "the ranks ends the function after the first one), and take its own slice?",
            look="the slice of each rank, and where the function returns",
        ),
        Mistake("a shard dropped", _mean(shards[:-1], ws), "a shard was dropped: range(world_size) covers every rank"),
        dataclasses.replace(BATCH_SIZE_DIVISOR, matches=_mean(shards, len(x))),
        dataclasses.replace(SHARD_SIZE_DIVISOR, matches=_mean(shards, k)),
        SPLIT_SIZE,
        dataclasses.replace(SPLIT_SIZE, matches=_mean(of_size_ws[:ws], ws)),
        dataclasses.replace(SPLIT_SIZE, matches=_mean(of_size_ws, ws)),
        *_sliced_wrongly(model, x, y, ws),
        dataclasses.replace(SOFTMAX_FIRST, matches=_mean(_softmax_shards(model, x, y, ws), ws)),
    ]


def _softmax_shards(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[list[torch.Tensor]]:
    """Each shard's gradient of the cross-entropy of softmax probabilities (the scores normalised twice)."""
    k = len(x) // ws
    params = list(model.parameters())
    shards = []
    for r in range(ws):
        probabilities = model(x[r * k : (r + 1) * k]).softmax(dim=1)
        shards.append(list(torch.autograd.grad(F.cross_entropy(probabilities, y[r * k : (r + 1) * k]), params)))
    return shards


MSE_LOSS = Mistake(
    "mean squared error",
    None,
    "the gradients are those of a mean squared error between the scores (or their softmax) and one-hot targets, "
    "not of the loss the exercise names: the prompt's loss takes the raw scores and the class indices as they are",
    look="the loss each rank computes on its shard",
)

ZERO_GRADIENTS = Mistake(
    "all gradients zero",
    None,
    "every gradient returned is zero: what was kept or returned is .grad after it was zeroed again (or tensors "
    "that were created as zeros and never received the shards' gradients)",
    look="the order of backward(), the zeroing, and the copy of .grad in each rank's turn; and what is returned",
    symptom="every returned gradient is zero, where the whole-batch gradient is not",
)


def _mse_shards(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int, softmax: bool) -> list:
    """Each shard's gradient of the mean squared error between its scores (or their softmax) and one-hot targets."""
    k = len(x) // ws
    params = list(model.parameters())
    shards = []
    for r in range(ws):
        scores = model(x[r * k : (r + 1) * k])
        scores = scores.softmax(dim=1) if softmax else scores
        one_hot = F.one_hot(y[r * k : (r + 1) * k], scores.shape[1]).to(scores.dtype)
        shards.append(list(torch.autograd.grad(F.mse_loss(scores, one_hot), params)))
    return shards


PARAMETERS_RETURNED = Mistake(
    "parameters returned",
    None,
    "the function returned the model's parameters themselves, its weights and biases, not their gradients: a "
    "gradient of a parameter is a tensor of the same shape that autograd writes somewhere else",
    look="what each returned tensor is: the parameter, or what backward() computed for it",
)


NLL_ON_SCORES = Mistake(
    "nll_loss on raw scores",
    None,
    "the gradients are those of F.nll_loss on the model's raw scores: nll_loss only picks the score of the right "
    "class and negates it, so it is the cross-entropy only when its input is already a log-probability; on raw "
    "scores nothing normalises them over the classes",
    look="the loss each rank computes on its shard, and what its input is",
)


def nll_mistakes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[Mistake]:
    """The result of F.nll_loss on the raw scores (no log_softmax) in place of the cross-entropy: the shards'
    average is the whole batch's, so one computation covers every split."""
    gradients = list(torch.autograd.grad(F.nll_loss(model(x), y), list(model.parameters())))
    return [dataclasses.replace(NLL_ON_SCORES, matches=gradients)]


def mse_mistakes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[Mistake]:
    """The results of a mean squared error against one-hot targets in place of the cross-entropy."""
    return [
        dataclasses.replace(MSE_LOSS, matches=_mean(_mse_shards(model, x, y, ws, softmax), ws))
        for softmax in (False, True)
    ]


TARGETS_SLICED_OTHERWISE = Mistake(
    "targets sliced otherwise",
    None,
    "each rank ran the model on its own shard of inputs, but compared the scores with targets cut at other places "
    "(other rows of the batch), so the loss pairs an example with another example's label: a rank's targets are "
    "the same rows of the batch as its inputs",
    look="the slice of targets of each rank, next to that of inputs",
)


def _targets_sliced_otherwise(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[Mistake]:
    """The results of inputs sliced right and targets sliced wrong: starting r examples in (``targets[r:r + k]``),
    every world_size-th example, or always the first shard's."""
    k = len(x) // ws
    cuts = {
        "overlapping": [y[r : r + k] for r in range(ws)],
        "interleaved": [y[r::ws][:k] for r in range(ws)],
        "first": [y[:k] for _ in range(ws)],
    }
    mistakes = []
    for targets in cuts.values():
        shards = [_grads(model, x[r * k : (r + 1) * k], targets[r]) for r in range(ws)]
        mistakes.append(dataclasses.replace(TARGETS_SLICED_OTHERWISE, matches=_mean(shards, ws)))
    return mistakes


def _sliced_wrongly(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int) -> list[Mistake]:
    """The results of shards cut at the wrong places: starting r examples in, ending one example early or late, or
    the targets cut otherwise than the inputs."""
    k = len(x) // ws
    overlapping = [_grads(model, x[r : r + k], y[r : r + k]) for r in range(ws)]
    one_short = [_grads(model, x[r * k : (r + 1) * k - 1], y[r * k : (r + 1) * k - 1]) for r in range(ws)]
    one_long = [_grads(model, x[r * k : (r + 1) * k + 1], y[r * k : (r + 1) * k + 1]) for r in range(ws)]
    return [
        Mistake(
            "overlapping shards",
            _mean(overlapping, ws),
            "the shards overlap: rank r's slice starts r shards into the batch, not r examples",
            look="the slice of each rank",
        ),
        dataclasses.replace(SHARDS_ONE_SHORT, matches=_mean(one_short, ws)),
        dataclasses.replace(SHARDS_ONE_LONG, matches=_mean(one_long, ws)),
        *_targets_sliced_otherwise(model, x, y, ws),
    ]


RANKS_NOT_AVERAGED = Mistake(
    "each rank's gradients returned",
    None,
    "the function returned each rank's gradients, one list per rank: the exercise asks for their average, one "
    "gradient per parameter, the same list of tensors loss.backward() on the whole batch would leave in .grad",
    look="what the function does with the ranks' lists before it returns",
)


def _per_rank_lists(got: Any, count: int) -> bool:
    """Is ``got`` a list of lists (one per rank), each holding ``count`` tensors?"""
    if not isinstance(got, (list, tuple)) or len(got) < 2:
        return False
    return all(isinstance(part, (list, tuple)) and len(part) == count for part in got)


def _grads_returned(got: Any, want: list[torch.Tensor]) -> list[torch.Tensor]:
    if _per_rank_lists(got, len(want)):
        raise mistake_error(
            f"data_parallel_grads returned {len(got)} lists of gradients, not one",
            RANKS_NOT_AVERAGED,
            expected=f"a list of {len(want)} tensors, in model.parameters() order",
        )
    if not isinstance(got, (list, tuple)) or len(got) != len(want):
        raise CheckError(
            "data_parallel_grads must return one gradient per parameter",
            expected=f"a list of {len(want)} tensors, in model.parameters() order",
            got=describe(got),
            hint=_returned_form_hint(got, want),
            usage=True,
        )
    _judge_order(got, want)
    grads = []
    for i, (g, w) in enumerate(zip(got, want)):
        grads.append(expect_tensor(g, f"gradient {i}", shape=tuple(w.shape), dtype=w.dtype))
    return grads


def _returned_form_hint(got: Any, want: list[torch.Tensor]) -> str | None:
    """What to change in a result that is not a list of one gradient per parameter."""
    if got is None:
        return "a missing `return`"
    if isinstance(got, Mapping):
        return "the check reads the gradients by position, not by name: a list (or tuple) of the tensors themselves"
    if isinstance(got, torch.Tensor) and got.numel() == sum(w.numel() for w in want):
        return "the gradients came back flattened into one tensor: keep one tensor per parameter, each of its shape"
    return None


def _judge_order(got: Any, want: list[torch.Tensor]) -> None:
    """One gradient per parameter, but not in model.parameters() order: every shape is another parameter's."""
    shapes = [tuple(getattr(g, "shape", ())) for g in got]
    wanted = [tuple(w.shape) for w in want]
    if shapes != wanted and sorted(shapes) == sorted(wanted):
        raise CheckError(
            "data_parallel_grads returned its gradients in another order than model.parameters()",
            expected=", ".join(str(shape) for shape in wanted),
            got=", ".join(str(shape) for shape in shapes),
            hint="gradient i belongs to the i-th parameter that model.parameters() yields: build the list in that order",
            usage=True,
        )


STALE_GRADIENTS = Mistake(
    "gradients left from before",
    None,
    "the model's .grad already held gradients from an earlier backward pass when the function was called (a "
    "training loop leaves them there after every step), and the ranks' gradients were added to them: backward() "
    "adds to .grad, so what is there must be cleared before the first rank's backward too, not only between ranks",
    look="what .grad holds when the first rank's backward runs",
)


def stale_gradient_mistakes(want: list[torch.Tensor], stale: list[torch.Tensor] | None, ws: int) -> list[Mistake]:
    """The results that still hold ``stale``, the gradients .grad held before the call: all of it (each rank's loss
    divided by world_size and accumulated), or 1/world_size of it (the first rank's copy, or the sum divided)."""
    if stale is None:
        return []
    return [
        dataclasses.replace(STALE_GRADIENTS, matches=[w + s for w, s in zip(want, stale)]),
        dataclasses.replace(STALE_GRADIENTS, matches=[w + s / ws for w, s in zip(want, stale)]),
    ]


def _leave_stale_gradients(model: torch.nn.Module, n: int) -> list[torch.Tensor]:
    """Fill the model's .grad with the gradients of another batch, as a training step leaves them; returns them."""
    x, y = _batch(n, 30, torch.float64)
    stale = _grads(model, x, y)
    for p, g in zip(model.parameters(), stale):
        p.grad = g.clone()
    return stale


def _judge_parallel_grads(
    got: list,
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ws: int,
    stale: list | None,
    calls: list[torch.Tensor] | None = None,
) -> None:
    want = _grads(model, x, y)
    if _same_grads(got, want):
        return
    message = f"the averaged gradients differ from the whole-batch gradient (world_size {ws}, batch {len(x)})"
    if calls and _shard_size_written_in(calls, x, ws):
        sizes = ", ".join(str(len(inputs)) for inputs in calls)
        raise mistake_error(
            message,
            SHARD_SIZE_WRITTEN_IN,
            expected=f"{ws} shards of {len(x) // ws} examples",
            got=f"shards of {sizes} examples",
        )
    if float(_flat(got).abs().max()) == 0.0:
        raise mistake_error(message, ZERO_GRADIENTS, got="zeros in every gradient")
    mistakes = data_parallel_mistakes(model, x, y, ws, stale) + stale_gradient_mistakes(want, stale, ws)
    mistakes += mse_mistakes(model, x, y, ws) + nll_mistakes(model, x, y, ws)
    mistakes.append(dataclasses.replace(PARAMETERS_RETURNED, matches=[p.detach() for p in model.parameters()]))
    for mistake in mistakes + fixed_world_size_mistakes(model, x, y, ws):
        if isinstance(mistake.matches, list) and _same_grads(got, mistake.matches):
            raise mistake_error(message, _split_or_divided(mistake, calls, ws))
    raise CheckError(message, got=f"a relative error of {_distance(got, want):.2g} (norm of the difference)")


SHARD_SIZE_WRITTEN_IN = Mistake(
    "shard size written in",
    None,
    "every rank's slice has one fixed length, written into the function, that is not this batch's size divided by "
    "world_size: the ranks' shards then miss examples or overlap, and a rank past the end of the batch gets an "
    "empty shard; a shard's size comes from the batch and world_size",
    look="where the shard's size comes from",
)


def _shard_size_written_in(calls: list[torch.Tensor], x: torch.Tensor, ws: int) -> bool:
    """Did the ws calls of the model see x[r * s:(r + 1) * s] for one fixed s other than len(x) // ws (and other than
    ws itself, Tensor.split's chunk size, a mistake of its own)?"""
    size = len(calls[0])
    if len(calls) != ws or size in (0, ws, len(x) // ws) or any(inputs.shape[1:] != x.shape[1:] for inputs in calls):
        return False
    return all(torch.equal(inputs, x[r * size : (r + 1) * size]) for r, inputs in enumerate(calls))


def _recording_forward(calls: list[torch.Tensor | None]) -> Callable:
    """A forward method that appends to ``calls`` a copy of the inputs of each call, then runs the class's own
    forward. Set on the model itself, it sees ``model(x)`` and ``model.forward(x)`` alike (``Module.__call__``
    runs ``self.forward``), and a copy.deepcopy of the model records into the same list."""

    def forward(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        inputs = args[0] if args else next(iter(kwargs.values()), None)
        if isinstance(inputs, torch.Tensor) and under_a_transform(inputs):
            calls.append(None)  # torch.func.vmap shows one example's shape: the rows cannot be counted
        elif isinstance(inputs, torch.Tensor) and inputs.dim():
            calls.append(inputs.detach().clone())
        else:
            calls.append(torch.empty(0))
        return type(module).forward(module, *args, **kwargs)

    return forward


WHOLE_BATCH = Mistake(
    "batch never split",
    None,
    "every call of the model ran on the whole batch, but in data parallelism each rank runs the model on its own "
    "shard only: either every rank forgot its slice (equal gradients average to the right one, which hides it), or "
    "one forward pass served all ranks",
    look="where rank r takes its slice of inputs and targets",
)

INTERLEAVED = Mistake(
    "shards interleaved",
    None,
    "the average is right (any equal split averages to the whole-batch gradient), but rank r's shard is every "
    "world_size-th example, where the exercise asks for contiguous shards: rank r gets the r-th block of the batch",
    look="the slice of each rank",
)


def _which_shard(inputs: torch.Tensor, x: torch.Tensor, ws: int, interleaved: bool) -> int | None:
    """The rank whose shard of ``x`` (contiguous blocks, or every ws-th row) ``inputs`` is, or None."""
    k = len(x) // ws
    for r in range(ws):
        shard = x[r::ws] if interleaved else x[r * k : (r + 1) * k]
        if inputs.shape == shard.shape and torch.equal(inputs, shard):
            return r
    return None


def _judge_shards(calls: list[torch.Tensor], x: torch.Tensor, ws: int) -> None:
    """The rows each call of the model saw: one call per rank, on its own contiguous shard."""
    n, k = len(x), len(x) // ws
    sizes = [len(inputs) for inputs in calls]
    expected = f"{ws} calls of the model, one per rank, each on its own contiguous shard of {k} examples"
    got = f"{len(calls)} call(s) on {', '.join(str(size) for size in sizes)} examples"
    if all(size == n for size in sizes):
        raise mistake_error(
            f"every call of the model saw all {n} examples of the batch", WHOLE_BATCH, expected=expected, got=got
        )
    message = f"the model was not run once per rank on its shard (world_size {ws}, batch {n})"
    if len(calls) == -(-n // ws) and all(size == ws for size in sizes[:-1]):
        raise mistake_error(message, SPLIT_SIZE, expected=expected, got=got)
    if ws != 2 and sizes == [n // 2, n - n // 2]:  # two halves: the mean of their gradients is right, the split not
        raise mistake_error(message, WORLD_SIZE_WRITTEN_IN, expected=expected, got=got)
    if sizes != [k] * ws:
        raise CheckError(message, expected=expected, got=got)
    for interleaved in (False, True):
        ranks = {_which_shard(inputs, x, ws, interleaved) for inputs in calls}
        if ranks == set(range(ws)):
            if interleaved:
                raise mistake_error(
                    f"rank r's shard is not the r-th block of {k} examples", INTERLEAVED, expected=expected
                )
            return
    raise CheckError(f"the model's calls did not each see one contiguous shard of {k} examples", expected=expected)


GRAD_STILL_NONE = Mistake(
    "zeroed a grad that is None",
    None,
    "a parameter's .grad was zeroed in place before any backward() had filled it in: until then .grad is None, "
    "not a tensor of zeros, so there is nothing to zero in place; the zeroing must allow for a .grad that does "
    "not exist yet (as the model's and the optimizers' own way of zeroing gradients does)",
    look="the line that zeroes the gradients",
)


#: What autograd.grad says when it is given no tensors to differentiate (a generator of parameters used up):
#: torch 2.14's words, then those of the torch versions before it (2.11 on the GPU machines).
GRAD_OF_NOTHING = re.compile(r"`inputs` argument to `grad\(\)` cannot be empty|grad requires non-empty inputs")

GRADIENTS_STACKED = Mistake(
    "gradients of all parameters stacked",
    None,
    "the gradients of different parameters were stacked into one tensor, but they have different shapes (a "
    "convolution's weight, a bias, ...), so torch.stack refuses them: the ranks' gradients can be combined "
    "parameter by parameter, each with the same parameter's gradients of the other ranks",
    look="what is stacked with what, where the ranks' gradients are combined",
)


PARAMETERS_USED_UP = Mistake(
    "parameters used up",
    None,
    "autograd was asked for the gradient with respect to no parameter at all: the parameters were kept as what "
    "model.parameters() returns, a generator, which the first rank ran through to its end, so later ranks found "
    "it empty; a generator can be walked once, a list as often as needed",
    look="where the parameters are taken from the model, and how often that object is walked",
)


TARGETS_NOT_SLICED = Mistake(
    "targets not sliced",
    None,
    "the loss of a rank was given its shard's scores and the targets of the whole batch, so their numbers of rows "
    "differ: each rank takes its slice of targets as well as of inputs, the same rows of the batch",
    look="what each rank passes to the loss as its targets",
)

#: What cross_entropy says when the scores and the targets have different numbers of rows.
BATCH_SIZES_DIFFER = re.compile(r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)")


def _whole_targets(message: str, n: int) -> bool:
    """Does cross_entropy's error say a shard's scores met the targets of the whole batch of ``n``?"""
    sizes = BATCH_SIZES_DIFFER.search(message)
    return sizes is not None and int(sizes.group(2)) == n and int(sizes.group(1)) < n


def _run_parallel_grads(
    data_parallel_grads: Callable, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ws: int
) -> Any:
    """The student's function on one case; zeroing a .grad that is still None is named."""
    __tracebackhide__ = True
    try:
        with grad_mode_kept("your data_parallel_grads(...)"):
            return run_student(
                data_parallel_grads,
                model,
                x,
                y,
                ws,
                what="your data_parallel_grads(...)",
                inplace_hint="{name} was changed in place: the function only reads the batch",
            )
    except CheckError as err:
        if GRAD_OF_NOTHING.search(err.message):
            raise mistake_error(err.message, PARAMETERS_USED_UP) from None
        if _whole_targets(err.message, len(x)):
            raise mistake_error(err.message, TARGETS_NOT_SLICED) from None
        if "stack expects each tensor to be equal size" in err.message:
            raise mistake_error(err.message, GRADIENTS_STACKED) from None
        if "'NoneType' object has no attribute 'zero_'" not in err.message:
            raise
        raise mistake_error(err.message, GRAD_STILL_NONE) from None


def _judge_model_dtype(model: torch.nn.Module, before: Mapping[str, torch.Tensor]) -> None:
    """The model's tensors keep their dtype: model.float() (or .half()) inside the function converts the caller's
    model in place, which the comparison of values alone misses when the values are exact in the new dtype."""
    for key, value in model.state_dict().items():
        if value.dtype != before[key].dtype:
            raise CheckError(
                f"data_parallel_grads converted the model: its {key} is now {value.dtype}, it came as "
                f"{before[key].dtype}",
                hint="Module.float(), .double() and .to(dtype) convert the caller's model in place, not a copy: "
                "compute in the dtype the model and the batch come in",
                mistake="weights changed",
            )


@exercise("10.3", "data parallelism by hand")
def check_data_parallel_grads(data_parallel_grads: Callable) -> None:
    """``data_parallel_grads(model, inputs, targets, world_size)`` against autograd's whole-batch gradient."""
    expect_function(data_parallel_grads, "data_parallel_grads")
    for case, (n, ws) in enumerate([(12, 2), (12, 3)]):
        model = _cnn(10 + case, torch.float64)
        x, y = _batch(n, 20 + case, torch.float64)
        # a fresh model first (.grad is None), then one with the gradients a training step leaves in .grad
        stale = _leave_stale_gradients(model, n) if case else None
        before = _state(model)
        calls: list[torch.Tensor | None] = []  # the examples each call of the model saw
        model.forward = types.MethodType(_recording_forward(calls), model)
        try:
            got = _run_parallel_grads(data_parallel_grads, model, x, y, ws)
        finally:
            vars(model).pop("forward", None)
        _judge_model_dtype(model, before)
        if not _near(_state(model), before, rtol=0, atol=0):
            raise CheckError(
                "data_parallel_grads changed the model's weights",
                hint="it computes gradients only: no optimizer step, no in-place change of a parameter",
                mistake="weights changed",
            )
        # calls under torch.func.vmap show one shard's shape for all shards: the others are judged, and only a
        # function whose every call is under a transform (or that never calls the model) has nothing to judge
        counted = [inputs for inputs in calls if inputs is not None]
        _judge_parallel_grads(_grads_returned(got, list(model.parameters())), model, x, y, ws, stale, counted)
        if counted:
            _judge_shards(counted, x, ws)
    passed("data_parallel_grads: the shards' average equals the whole-batch gradient (world_size 2 and 3)")


# ----------------------------------------------------------------------------- 10.4 real DDP

DDP_KEYS = ("world_size", "batch_size", "lr", "seed", "states")


def _ddp_settings(result: Any) -> tuple[int, int, float, int]:
    """(world_size, batch_size, lr, seed) of what lab.run_data_parallel returned, each checked."""
    if not isinstance(result, Mapping) or any(key not in result for key in DDP_KEYS):
        raise CheckError(
            f"expected what lab.run_data_parallel returns (keys {', '.join(DDP_KEYS)})",
            got=describe(result),
            hint="pass `result`, as the check cell does, after the cell that runs the workers",
            usage=True,
        )
    numbers = []
    for key in ("world_size", "batch_size", "seed"):
        value = plain(result[key])
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise CheckError(f"result[{key!r}] must be a whole number, got {describe(value)}", usage=True)
        numbers.append(value)
    world_size, batch_size, seed = numbers
    lr = as_number(result["lr"], "result['lr']")
    return world_size, batch_size, float(lr), seed


def _reference_step(seed: int, batch_size: int, lr: float, **kwargs: Any) -> dict[str, torch.Tensor]:
    from ..distributed import sgd_step_state

    try:
        return sgd_step_state(seed, batch_size, lr, **kwargs)
    except ValueError as exc:
        raise CheckError(f"the check cannot redo this run: {exc}", usage=True) from None


def _worker_states(result: Mapping, world_size: int, ref: dict) -> list[dict]:
    states = result["states"]
    if not isinstance(states, (list, tuple)) or len(states) != world_size:
        raise CheckError(f"expected one DigitsCNN state dict per worker ({world_size})", got=describe(states))
    checked = []
    for rank, state in enumerate(states):
        if not isinstance(state, Mapping) or set(state) != set(ref):
            raise CheckError(f"expected one DigitsCNN state dict per worker ({world_size})", got=describe(state))
        tensors = {}
        for key, value in state.items():
            tensors[key] = expect_tensor(value, f"worker {rank}'s {key}", shape=tuple(ref[key].shape))
        checked.append(tensors)
    return checked


def check_ddp_equivalence(result: Any) -> None:
    """``lab.run_data_parallel``'s workers after one DDP step against ONE process's SGD step (float64, CPU)."""
    ws, batch_size, lr, seed = _ddp_settings(result)
    ref = _reference_step(seed, batch_size, lr)
    states = _worker_states(result, ws, ref)
    for rank, state in enumerate(states[1:], start=1):
        if not _near(state, states[0], rtol=1e-4):
            raise CheckError(
                f"worker {rank}'s weights differ from worker 0's after the step: the replicas drifted apart",
                hint="each worker stepped on its own gradient: DDP averages them, so every replica takes the same step",
                mistake="replicas drifted",
            )
    if _near(states[0], ref, rtol=1e-4):
        passed(f"DDP: {ws} workers on 1/{ws} of the batch each end the step with one process's weights (whole batch)")
        return
    message = "the workers' weights differ from one process's step on the whole batch"
    if ws > 1 and _near(states[0], _reference_step(seed, batch_size, lr, shard=(0, ws)), rtol=1e-4):
        why = "the step used worker 0's slice alone: the gradients were not averaged across workers"
        raise CheckError(message, hint=why, mistake="not averaged")
    if ws > 1 and _near(states[0], _reference_step(seed, batch_size, lr * ws), rtol=1e-4):
        why = f"the step is {ws}x too large: the workers' gradients were summed, not averaged"
        raise CheckError(message, hint=why, mistake="summed")
    raise CheckError(message)


# ----------------------------------------------------------------------------- 10.4 the speed-up, derived


@dataclasses.dataclass(frozen=True)
class ScalingCase:
    """One job on 1 and on 4 GPUs: what a step computes and what DDP adds (notebook 10's table, section 3)."""

    images_one_gpu: int  # images in one GPU's step, without DDP
    images_per_gpu: int  # images on each GPU's share of a step with 4 GPUs
    one_gpu_ms: float  # one GPU's step, measured
    share_ms: float  # one GPU's compute on its share, with 4 GPUs
    ddp_added_ms: float  # what DDP adds to every step with 4 GPUs


# The inputs, from benchmarks/ddp_scaling.py on 4 H100s (benchmarks/RESULTS.md): ResNet-50 at 256 images
# per GPU (weak scaling), and the DigitsCNN's one batch of 64 split 4 ways (strong scaling; launch-bound,
# so 16 images take about as long as 64). DDP's share is the 4-GPU step minus the compute.
SCALING = {
    "ResNet-50": ScalingCase(256, 256, 64.9, 64.9, 4.8),
    "DigitsCNN": ScalingCase(64, 16, 1.92, 1.92, 0.85),
}
GPUS = 4


#: What benchmarks/ddp_scaling.py measured for the two jobs (benchmarks/RESULTS.md): images per second on 1, 2
#: and 4 GPUs, and the speed-up over one GPU (from the unrounded step times). A cell after Exercise 10.4 prints
#: it once the prediction is recorded: a table in the notebook's text would answer the exercise before it is tried.
MEASURED_SCALING = {
    "ResNet-50 (25.6 M parameters), 256 images per GPU (weak scaling)": ((3940, 7440, 14700), (1.0, 1.89, 3.72)),
    "the DigitsCNN (0.04 M), one batch of 64 split over the GPUs (strong scaling)": (
        (33400, 27300, 23100),
        (1.0, 0.82, 0.69),
    ),
}


def print_ddp_scaling() -> None:
    """Print the throughputs measured for notebook 10's two DDP jobs on 1, 2 and 4 H100 GPUs (images per second,
    and the speed-up over one GPU without DDP).

    Example:
        >>> print_ddp_scaling()  # doctest: +ELLIPSIS
        images per second (speed-up over 1 GPU without DDP), measured on 4 H100 GPUs:
        ...
    """
    print("images per second (speed-up over 1 GPU without DDP), measured on 4 H100 GPUs:")
    for job, (rates, ratios) in MEASURED_SCALING.items():
        print(f"  {job}:")
        for gpus, rate, ratio in zip((1, 2, 4), rates, ratios):
            print(f"    {gpus} GPU{'s' if gpus > 1 else ' '}  {rate:>7,} img/s  ({ratio:.2f}x)")


def speedup(case: ScalingCase, *, gpus: int = GPUS, images_scale: bool = True, ddp: bool = True) -> float:
    """Throughput with ``gpus`` GPUs over one GPU's: images per step over the step's time (or its variants:
    the step times' ratio alone, or DDP's cost left out)."""
    step_ms = case.share_ms + (case.ddp_added_ms if ddp else 0.0)
    images = gpus * case.images_per_gpu if images_scale else case.images_one_gpu
    return (images / step_ms) / (case.images_one_gpu / case.one_gpu_ms)


def ddp_speedups() -> tuple[float, float]:
    """(ResNet-50, DigitsCNN): the throughput speed-up on 4 GPUs, from the step times above."""
    return tuple(round(speedup(case), 2) for case in SCALING.values())


def speedup_mistakes() -> dict[tuple[float, float], str]:
    """The typical wrong predictions, each with what to tell the student."""
    resnet, digits = SCALING.values()
    proportional = dataclasses.replace(digits, share_ms=digits.one_gpu_ms * digits.images_per_gpu / 64)
    right = ddp_speedups()
    return {
        (4.0, 1.0): "That leaves out what DDP adds to every step: the all-reduce that the backward pass cannot "
        "hide, and the synchronisation.",
        (4.0, 4.0): "That is ideal scaling for both jobs: it leaves out what DDP adds to every step, and the digits' "
        "4 GPUs share one batch of 64, so their step handles 64 images whatever the number of GPUs.",
        (round(speedup(resnet, images_scale=False), 2), right[1]): "That is the ratio of the step times; "
        "throughput counts images, and with 4 GPUs each step handles 4 times as many of ResNet-50's.",
        (right[0], round(GPUS * speedup(digits), 2)): "The digits' 4 GPUs share one batch of 64: a step handles "
        "64 images whatever the number of GPUs, so only the step's time decides.",
        (right[0], round(speedup(proportional), 2)): "That assumes a GPU's step shrinks with its share of "
        "the batch. The digits' step is launch-bound: 16 images take about as long as 64 (notebook 09's plot). "
        "(If your digits' figure says how many times slower they run: a speed-up is the new throughput over "
        "the old, so a job that runs slower has one below 1.)",
        (right[1], right[0]): "Those are the two speed-ups in the other order: the prediction is (resnet, digits), "
        "ResNet-50's first.",
        (round(right[0] / GPUS, 2), round(right[1] / GPUS, 2)): f"That is each speed-up divided by the {GPUS} GPUs, "
        f"the share of ideal scaling each job reaches; the question asks for the throughput of {GPUS} GPUs over "
        "one GPU's.",
        (round(1 / right[0], 2), round(1 / right[1], 2)): f"Those are the speed-ups upside down: one GPU's "
        f"throughput over {GPUS} GPUs'. A speed-up puts the new setup's throughput on top, so above 1 means faster.",
        **_partial_speedup_mistakes(right),
    }


def _partial_speedup_mistakes(right: tuple[float, float]) -> dict[tuple[float, float], str]:
    """Wrong predictions from the step times alone, from one GPU's share of the digits' batch, or with DDP's
    cost left out of one job only."""
    resnet, digits = SCALING.values()
    step_ratio = tuple(round((c.share_ms + c.ddp_added_ms) / c.one_gpu_ms, 2) for c in (resnet, digits))
    share_only = speedup(digits, gpus=1)  # one GPU's share of the batch counted as the step's images
    return {
        step_ratio: f"Those are how much longer a step takes on {GPUS} GPUs than on one (its time with DDP over "
        "one GPU's): a speed-up compares throughputs, images per second, so it also counts how many images each "
        "step handles.",
        (right[0], round(share_only, 2)): f"That counts one GPU's {digits.images_per_gpu} images per digits step: "
        f"the {GPUS} GPUs together handle the whole batch of {digits.images_one_gpu} in each step.",
        (round(speedup(resnet, ddp=False), 2), right[1]): "ResNet-50's is ideal scaling: it leaves out what DDP "
        f"adds to each of its steps ({resnet.ddp_added_ms:g} ms), which the digits' figure counts.",
        (right[0], round(speedup(digits, ddp=False), 2)): "The digits' leaves out what DDP adds to each of its "
        f"steps ({digits.ddp_added_ms:g} ms), which ResNet-50's figure counts.",
    }


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _speedup_why() -> str:
    """The derivation, with the numbers of SCALING."""
    resnet, digits = SCALING.values()
    right = ddp_speedups()
    resnet_step = resnet.share_ms + resnet.ddp_added_ms
    return (
        f"Throughput is images per second. ResNet-50 runs {GPUS} x {resnet.images_per_gpu} images in a step of "
        f"{resnet.share_ms:g} + {resnet.ddp_added_ms:g} ms, against {resnet.images_one_gpu} in {resnet.one_gpu_ms:g} ms: "
        f"{GPUS} x {resnet.one_gpu_ms:g} / {resnet_step:.3g} = {right[0]}. The digits' {GPUS} GPUs share one batch of "
        f"{digits.images_one_gpu}, and {digits.images_per_gpu} images take as long as {digits.images_one_gpu}, so the "
        f"step only grows: {digits.one_gpu_ms:g} / ({digits.share_ms:g} + {digits.ddp_added_ms:g}) = {right[1]}."
    )


def _factor_in_text(text: str) -> Any:
    """A speed-up written as text, with or without a factor sign: "3.72", "3.72x" or "3.72 ×" as 3.72."""
    return number_in_text(re.sub(r"\s*[x×]$", "", text.strip(), flags=re.IGNORECASE))


def _pair_in_text(prediction: Any) -> Any:
    """Two numbers written as text as numbers: "3.72, 0.69" or "(3.72, 0.69)" as (3.72, 0.69), and ("3.72", "0.69")
    or ("3.72x", "0.69x") too; anything else as it came (read_prediction says what it needs)."""
    if isinstance(prediction, str):
        parts = [part for part in re.split(r"[\s,;]+", prediction.strip().strip("()[]")) if part]
        numbers = tuple(_factor_in_text(part) for part in parts)
        if len(numbers) == 2 and all(_finite_number(n) for n in numbers):
            return numbers
        return prediction
    if isinstance(prediction, (tuple, list)):
        return tuple(_pair_item(item) for item in prediction)
    return prediction


def _pair_item(item: Any) -> Any:
    """One item of a pair: text as a number ("3.72x" as 3.72), an exact number (a Fraction, a Decimal) as a float,
    anything else as it came."""
    if isinstance(item, str):
        return _factor_in_text(item)
    exact = isinstance(item, (numbers.Rational, decimal.Decimal)) and not isinstance(item, (int, float))
    if exact and math.isfinite(item):
        return float(item)
    return item


def _shows(item: Any) -> bool:
    """Whether ``item`` can be written out (repr), as the check's messages do with the items of a pair."""
    try:
        repr(item)
    except Exception:
        return False
    return True


def _read_pair(name: str, prediction: Any) -> Any:
    """The prediction read as a pair of numbers where it is one; a usage CheckError for one that cannot be read
    (a container or an item that raises when it is looked at)."""
    __tracebackhide__ = True
    refusal = CheckError(
        f"{name}: answer with two numbers, (resnet, digits)",
        expected="a tuple of two numbers",
        got=describe(prediction),
        usage=True,
    )
    try:
        pair = _pair_in_text(prediction)
    except Exception:
        raise refusal from None
    if isinstance(pair, tuple) and not all(_shows(item) for item in pair):
        raise refusal
    return read_prediction(name, pair, form="two numbers, (resnet, digits)")


def _pair_form_hint(got: Any) -> str | None:
    """What to change in an answer that is not two numbers: text such as "372%" or a single number."""
    if isinstance(got, tuple) and any(isinstance(v, str) for v in got):
        return "write each speed-up as a plain number without quotes, a ratio of throughputs such as 1.5 (not a percentage)"
    if _finite_number(got):
        return "one number per job: a pair such as (1.5, 2.5), the ResNet's first"
    if isinstance(got, str) and "%" in got:
        return "write each speed-up as a ratio of throughputs such as 1.5, not a percentage"
    return None


@exercise("10.4", "the speed-up, before the measurement", prediction=True)
def check_speedup_prediction(prediction: Any) -> None:
    """Predict-then-run: the 4-GPU throughput speed-ups (ResNet-50, DigitsCNN) from a step's compute and DDP's cost."""
    name = "4-GPU speed-up (ResNet-50, DigitsCNN)"
    got = _read_pair(name, prediction)
    if not isinstance(got, tuple) or len(got) != 2 or not all(_finite_number(v) for v in got):
        raise CheckError(
            f"{name}: answer with two numbers, (resnet, digits)",
            expected="a tuple of two numbers",
            got=repr(got),
            hint=_pair_form_hint(got),
            usage=True,
        )
    if not all(0 < v <= GPUS for v in got):
        raise CheckError(
            f"{name}: a speed-up on {GPUS} GPUs is a ratio of throughputs, above 0 and at most {GPUS}",
            expected=f"two ratios such as 1.5 (not percentages), each above 0 and at most {GPUS}",
            got=repr(got),
            usage=True,
        )
    check_prediction(
        name,
        got,
        ddp_speedups(),
        why=_speedup_why(),
        mistakes=speedup_mistakes(),
        ask="for each job, how many images does one step of 4 GPUs handle, and how long does that step take",
    )


# ----------------------------------------------------------------------------- 10.6 the DDP data bug

LOADER_CASES = ((50, 2, 8), (50, 3, 8))  # (dataset size, world size, batch size)


def _index_dataset(n: int) -> torch.utils.data.TensorDataset:
    """A dataset whose items are their own indices, so a batch says which items a rank got."""
    return torch.utils.data.TensorDataset(torch.arange(n))


def _first_items(iterable: Any, limit: int) -> list:
    """At most ``limit`` items of ``iterable``: a loader that never ends is cut off here, whatever the clock says."""
    return list(itertools.islice(iterable, limit))


def _dataset_indices(values: torch.Tensor, n: int) -> list[int]:
    """The items of one batch as indices of the dataset of ``n`` indices the check passed in; a usage error for an
    item the dataset does not hold (a dataset of the loader's own, NaN)."""
    indices = []
    for value in values.tolist():
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or not math.isfinite(value) or value != int(value) or not 0 <= value < n:
            raise CheckError(
                f"the loader gave the item {value!r}, which is not an item of the dataset rank_loader_fixed was given",
                expected=f"items of that dataset: its indices 0 to {n - 1}",
                got=repr(value),
                hint="build the DataLoader on the dataset argument, not on a dataset of your own",
                usage=True,
            )
        indices.append(int(value))
    return indices


SHUFFLE_WITH_SAMPLER = Mistake(
    "shuffle kept with the sampler",
    None,
    "the DataLoader was given a sampler and told to shuffle too, which it refuses: the sampler already decides "
    "the order (it shuffles, the same way on every rank, before it cuts the rank's part). Which of the "
    "DataLoader's arguments still asks it to choose an order of its own?",
    look="the DataLoader's arguments: which of them decide the order of the items",
)


SET_EPOCH_ON_THE_LOADER = Mistake(
    "set_epoch on the loader",
    None,
    "set_epoch was called on the DataLoader, which has no such method: the epoch belongs to the DistributedSampler, "
    "which decides which items the rank gets and in which order, and uses the epoch to shuffle anew",
    look="which object is told the epoch",
)


EPOCH_AS_GENERATOR = Mistake(
    "epoch given as the loader's generator",
    None,
    "a DataLoader's generator is a torch.Generator, a source of random numbers, not a number: the loader is built "
    "without complaint, and refuses the number only when a loop iterates it. With a sampler, the loader's generator "
    "does not decide the order anyway: which object does, and what does it need to hear about the epoch?",
    look="where the function hands over `epoch`, and to which object",
)


SAMPLER_FOR_OTHER_WORLD = Mistake(
    "sampler made for another world size",
    None,
    "the DistributedSampler refused the rank it was given, since it was told of another number of processes than "
    "the world_size the function receives (a number written in, such as the 2 GPUs of the colleague's script, or "
    "the arguments in each other's places)",
    look="the number of processes the sampler is told of",
)


SAMPLER_ASKS_THE_GROUP = Mistake(
    "sampler not told the rank and world size",
    None,
    "a DistributedSampler that is not told num_replicas and rank asks torch.distributed for them, and here no "
    "process group exists (the check starts no processes); the function is given the rank and the world size, "
    "and the sampler's part of the data is only right for those",
    look="the arguments the DistributedSampler is built with",
)


def _build_loader(rank_loader: Callable, n: int, ws: int, batch: int, rank: int, epoch: int) -> Any:
    """The student's loader for one rank and epoch; DataLoader's refusal of shuffle=True with a sampler, and the
    sampler's refusal of a rank beyond its processes, are named."""
    __tracebackhide__ = True
    dataset = _index_dataset(n)
    try:
        loader = run_student(rank_loader, dataset, rank, ws, epoch, batch, what="rank_loader_fixed(...)")
    except CheckError as err:
        _expect_dataset_kept(dataset, n)
        said = str(err.__cause__ or err.message)
        if "'DataLoader' object has no attribute 'set_epoch'" in said:
            raise mistake_error(err.message, SET_EPOCH_ON_THE_LOADER) from None
        if "Invalid rank" in said:
            raise mistake_error(err.message, SAMPLER_FOR_OTHER_WORLD, got=f"an error for rank {rank} of {ws}") from None
        if "process group has not been initialized" in said:
            raise mistake_error(err.message, SAMPLER_ASKS_THE_GROUP) from None
        if "mutually exclusive with shuffle" not in said:
            raise
        raise mistake_error(err.message, SHUFFLE_WITH_SAMPLER) from None
    _expect_dataset_kept(dataset, n)
    return loader


DATASET_CHANGED = Mistake(
    "dataset changed",
    None,
    "rank_loader_fixed wrote into the dataset it was given (shuffled or changed its tensor in place): every rank "
    "holds the same dataset, and the loader only decides which of its items a rank reads, in which order; the "
    "items themselves stay as they are",
    look="every line that writes into the dataset or its tensors",
)


def _expect_dataset_kept(dataset: torch.utils.data.TensorDataset, n: int) -> None:
    """A named mistake if the student's function changed the dataset of indices it was given."""
    __tracebackhide__ = True
    tensors = getattr(dataset, "tensors", None)
    kept = isinstance(tensors, tuple) and len(tensors) == 1 and isinstance(tensors[0], torch.Tensor)
    if kept and tensors[0].shape == (n,) and torch.equal(tensors[0], torch.arange(n)):
        return
    raise mistake_error("rank_loader_fixed changed the dataset it was given", DATASET_CHANGED)


def _expect_generator(loader: Any) -> None:
    """A DataLoader given a generator that is not a torch.Generator (the epoch, say) fails only when iterated:
    name the mistake before the check iterates it."""
    __tracebackhide__ = True
    generator = getattr(loader, "generator", None)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise mistake_error(
            f"the DataLoader rank_loader_fixed returned was given a generator that is {describe(generator)}, which "
            "iterating the loader refuses (TypeError)",
            EPOCH_AS_GENERATOR,
            expected="a torch.Generator, or no generator",
        )


ONE_PASS_ONLY = Mistake(
    "an iterator returned",
    None,
    "rank_loader_fixed returned something that gives its batches only once (an iterator over the DataLoader, or a "
    "generator), so a second pass over it finds nothing: a loader serves its epoch each time it is iterated, which "
    "len(), a second look at what a rank gets, and a training loop that walks the data again all rely on",
    look="what the function returns",
)


def _expect_another_pass(loader: Any, batches: int, limit: int) -> None:
    """A loader gives its epoch again when iterated again; an iterator over one (or a generator) is used up."""
    __tracebackhide__ = True
    again = run_student(_first_items, loader, limit, what="iterating the loader rank_loader_fixed returned again")
    if len(again) >= batches:
        return
    raise mistake_error(
        f"the loader rank_loader_fixed returned gave {batches} batches, and {len(again)} when iterated a second time",
        ONE_PASS_ONLY,
        expected=f"the same {batches} batches each time it is iterated",
    )


def _epoch_indices(rank_loader: Callable, n: int, ws: int, batch: int, rank: int, epoch: int) -> list[int]:
    """The indices rank ``rank`` iterates in ``epoch``, from the student's loader (a usage error if not batches)."""
    loader = _build_loader(rank_loader, n, ws, batch, rank, epoch)
    if isinstance(loader, torch.utils.data.Sampler):
        raise CheckError(
            f"rank_loader_fixed returned a {type(loader).__name__}, not a loader",
            expected="a DataLoader that uses it",
            got=describe(loader),
            hint="a sampler only says which indices come in which order; the DataLoader built on it gives the batches",
            usage=True,
        )
    if loader is None or not hasattr(loader, "__iter__"):
        hint = None
        if loader is None:
            hint = "it hands back nothing yet (no `return`, or a print in its place): is it finished?"
        raise CheckError(
            "rank_loader_fixed did not return a loader",
            expected="a DataLoader",
            got=describe(loader),
            hint=hint,
            usage=True,
        )
    _expect_generator(loader)
    limit = n + 1  # one epoch of batches of at least one item each, and one more
    items = run_student(_first_items, loader, limit, what="iterating the loader rank_loader_fixed returned")
    if len(items) > n:
        raise CheckError(
            f"the loader rank_loader_fixed returned gave more than {n} batches for a dataset of {n} items: "
            "it does not end after one epoch",
            hint="return the DataLoader itself: one pass over it is one epoch",
            usage=True,
        )
    if rank == 0 and epoch == 0:  # once per case: a loader with worker processes starts them for every pass
        _expect_another_pass(loader, len(items), limit)
    indices = []
    sizes = []
    for item in items:
        values = _batch_values(item, batch)
        indices += _dataset_indices(values, n)
        sizes.append(len(values))
    _check_batch_sizes(sizes, batch)
    return indices


def _batch_values(item: Any, batch: int) -> torch.Tensor:
    """The items of one batch the loader gave: a 1-d tensor of at most ``batch`` values (a usage error if not)."""
    __tracebackhide__ = True
    values = item[0] if isinstance(item, (tuple, list)) else item
    if isinstance(values, torch.Tensor) and values.dim() == 1 and len(values) > batch:
        raise CheckError(
            f"a batch of the loader holds {len(values)} items, more than batch_size={batch}",
            expected=f"batches of at most {batch} items",
            got=f"a batch of {len(values)}",
            hint="the loader's batch size comes from the batch_size argument",
            usage=True,
        )
    if not isinstance(values, torch.Tensor) or values.dim() != 1:
        raise CheckError(
            f"a batch of the loader is not a batch of at most {batch} items",
            got=describe(item),
            hint="a batch here is a 1-d tensor of the dataset's items: the function returns a loader over the "
            "dataset it was given, not over something built from it",
            usage=True,
        )
    if values.device.type == "meta":
        raise CheckError(
            "a batch of the loader is on the meta device, which holds shapes but no items",
            got=describe(values),
            hint="a batch here is the dataset's own items: the function returns a loader over the dataset it was given",
            usage=True,
        )
    return values


BATCH_SIZE_IGNORED = Mistake(
    "batch size not passed on",
    None,
    "the loader's batches are smaller than the batch_size the function was given: each rank's loader takes "
    "batches of that size (a per-rank batch, as in the colleague's script); a DataLoader told no batch size "
    "hands out one item at a time, and a number of your own, or batch_size split among the ranks, changes the "
    "training the script was tuned for",
    look="the arguments of the DataLoader",
)


def _check_batch_sizes(sizes: list[int], batch: int) -> None:
    """Every batch of a rank but its last holds ``batch`` items (larger ones were refused before)."""
    short = [size for size in sizes[:-1] if size != batch]
    if not short:
        return
    raise mistake_error(
        f"a batch of the loader holds {short[0]} item{'' if short[0] == 1 else 's'}, where batch_size is {batch}",
        BATCH_SIZE_IGNORED,
        expected=f"batches of {batch} items (only a rank's last batch may hold fewer)",
        got=f"batch sizes {', '.join(str(size) for size in sorted(set(sizes)))}",
    )


@dataclasses.dataclass
class LoaderRun:
    """Which indices each rank got in epochs 0 to 3."""

    n: int
    ws: int
    batch: int
    epochs: list[list[list[int]]]  # epochs[epoch][rank] -> the indices in the order the rank saw them


#: The epochs the check reads: four, so that an order that comes back every other (or every third) epoch shows.
EPOCHS = 4


def loader_run(rank_loader: Callable, n: int, ws: int, batch: int) -> LoaderRun:
    epochs = [[_epoch_indices(rank_loader, n, ws, batch, r, e) for r in range(ws)] for e in range(EPOCHS)]
    return LoaderRun(n, ws, batch, epochs)


def _repeated_epoch(run: LoaderRun) -> tuple[int, int] | None:
    """(an earlier epoch, a later one) that give every rank the same items in the same order, or None."""
    for later in range(1, len(run.epochs)):
        for earlier in range(later):
            if run.epochs[earlier] == run.epochs[later]:
                return earlier, later
    return None


def _everything_on_every_rank(run: LoaderRun) -> bool:
    return all(sorted(seen) == list(range(run.n)) for seen in run.epochs[0])


def _same_shard_everywhere(run: LoaderRun) -> bool:
    return all(seen == run.epochs[0][0] for seen in run.epochs[0]) and len(run.epochs[0][0]) < run.n


def _not_shuffled(run: LoaderRun) -> bool:
    return all(seen == sorted(seen) for seen in run.epochs[0])


def _same_order_each_epoch(run: LoaderRun) -> bool:
    return run.epochs[0] == run.epochs[1]


def _unequal_parts(run: LoaderRun) -> bool:
    """Every item on exactly one rank, but the ranks' parts of different sizes (a split without padding)."""
    seen = sorted(i for shard in run.epochs[0] for i in shard)
    sizes = {len(shard) for shard in run.epochs[0]}
    return seen == list(range(run.n)) and len(sizes) > 1


def _overlapping_shards(run: LoaderRun) -> bool:
    """In some epoch, parts of the right size that overlap (each rank cut them from a permutation of its own)."""
    share = -(-run.n // run.ws)
    for parts in run.epochs:
        seen = [i for shard in parts for i in shard]
        if all(len(shard) == share for shard in parts) and len(set(seen)) < run.n:
            return True
    return False


def _parts_for_two_ranks(run: LoaderRun) -> bool:
    """On a world size other than 2, is every rank's part the size of a half of the dataset (num_replicas=2)?"""
    half = -(-run.n // 2)
    return run.ws != 2 and all(len(seen) == half for seen in run.epochs[0])


def _last_batch_dropped(run: LoaderRun) -> bool:
    share = -(-run.n // run.ws)
    whole_batches = share - share % run.batch
    return share % run.batch != 0 and all(len(seen) == whole_batches for seen in run.epochs[0])


def _order_comes_back(run: LoaderRun) -> bool:
    return run.epochs[0] != run.epochs[1] and _repeated_epoch(run) is not None


def _same_part_each_epoch(run: LoaderRun) -> bool:
    same_items = all(sorted(a) == sorted(b) for a, b in zip(run.epochs[0], run.epochs[1]))
    return same_items and run.epochs[0] != run.epochs[1]


LOADER_MISTAKES = [
    Mistake(
        "every rank sees all data",
        _everything_on_every_rank,
        "the loader ignores the DistributedSampler: every rank walks through the whole dataset, so N processes "
        "do N times the work of one, each epoch",
        look="what decides the order in which the DataLoader visits the dataset",
        symptom="every rank gets every item",
    ),
    Mistake(
        "same shard on every rank",
        _same_shard_everywhere,
        "every rank gets the same part of the data: the sampler does not know which rank it serves",
        look="the sampler's arguments",
    ),
    Mistake(
        "unequal parts",
        _unequal_parts,
        "each item reaches one rank, but the ranks' parts differ in size, so the ranks take different numbers of "
        "steps: in DDP every step waits for every rank's gradients, and a rank that runs out of batches first "
        "leaves the others waiting for good; the parts must hold the same number of items, padded with a few "
        "repeated ones where the dataset does not divide evenly",
        look="how the dataset is cut into the ranks' parts",
    ),
    Mistake(
        "not shuffled",
        _not_shuffled,
        "each rank's part comes in index order: the sampler does not shuffle",
        look="the sampler's arguments",
    ),
    Mistake(
        "shards overlap",
        _overlapping_shards,
        "the ranks' parts overlap while some items are never seen: each rank shuffles differently, so their parts "
        "are cut from different permutations: what must the ranks' samplers agree on for their parts to fit together?",
        look="the sampler's seed, and the epoch number each rank shuffles with",
    ),
    Mistake(
        "world size written in",
        _parts_for_two_ranks,
        "with more than 2 ranks every rank still got half of the dataset, the part of one rank of 2: the sampler "
        "was told a number of replicas written into the function, not the world_size it was given",
        look="the sampler's arguments: where does each number come from?",
    ),
    Mistake(
        "last batch dropped",
        _last_batch_dropped,
        "some items never come in that epoch: drop_last drops them, on the DataLoader each rank's last batch that "
        "is not full, on the sampler the items that do not divide evenly among the ranks",
        look="the DataLoader's and the sampler's arguments",
    ),
    Mistake(
        "same order every epoch",
        _same_order_each_epoch,
        "every epoch repeats the first one's order: the sampler's shuffle is drawn from its seed and from the "
        "epoch number it holds. Which epoch number does the sampler hold when the function builds epoch 1?",
        look="what the function does with `epoch`",
        symptom="epoch 1 is epoch 0 again, item for item",
    ),
    Mistake(
        "order comes back",
        _order_comes_back,
        "the order changes from one epoch to the next but then comes back: the sampler is told an epoch number "
        "that repeats, so a later epoch shuffles exactly as an earlier one did",
        look="the number the sampler is told each epoch",
    ),
    Mistake(
        "same part every epoch",
        _same_part_each_epoch,
        "each rank gets the same items every epoch, only in a new order: the rank's part is cut once and shuffled "
        "inside, so a rank never sees the other ranks' items; a DDP run reshuffles the whole dataset each epoch, the "
        "same way on every rank, and then cuts it into parts",
        look="where the rank's part is chosen, and what the function does with `epoch`",
    ),
]


SAMPLER_AS_SHUFFLE = Mistake(
    "sampler passed where shuffle goes",
    None,
    "the sampler was given to the DataLoader as its third positional argument, and DataLoader's third parameter is "
    "shuffle, not sampler: the loader reads the sampler as a true value, shuffles the whole dataset with a sampler "
    "of its own, and never asks the DistributedSampler, so every rank gets every item. Which parameter does each "
    "positional argument of that call land on?",
    look="the positional arguments of the DataLoader call, against the order of DataLoader's parameters",
)


def _is_sampler(expr: ast.expr, values: dict[str, list[ast.expr]]) -> bool:
    """Is ``expr`` a sampler: a call of a ...Sampler class, or a local name holding one (or named for one)?"""
    candidates = [expr]
    if isinstance(expr, ast.Name):
        if "sampler" in expr.id.lower():
            return True
        candidates += values.get(expr.id, [])
    for candidate in candidates:
        if isinstance(candidate, ast.Call) and ast.unparse(candidate.func).endswith("Sampler"):
            return True
    return False


def _sampler_in_shuffles_place(rank_loader: Callable) -> bool:
    """Does rank_loader's source give a DataLoader a sampler as its third positional argument, which is shuffle?
    Read only once every rank got every item: the source names the cause, the behaviour decides the verdict."""
    function = _function_node(rank_loader)
    if function is None:
        return False
    values = _local_values(function)
    for call in ast.walk(function):
        if not isinstance(call, ast.Call) or len(call.args) < 3:
            continue
        if ast.unparse(call.func).endswith("DataLoader") and _is_sampler(call.args[2], values):
            return True
    return False


def _loader_problem(run: LoaderRun) -> tuple[str, str] | None:
    """(what is wrong, what was expected) for the first property the ranks' indices break, or None."""
    share = -(-run.n // run.ws)  # DistributedSampler pads the dataset to equal parts
    first = run.epochs[0]
    where = f"with {run.n} items on {run.ws} ranks"
    for epoch, parts in enumerate(run.epochs):  # every epoch: a rank's part may go wrong after the first
        if any(len(seen) != share for seen in parts):
            got = ", ".join(str(len(seen)) for seen in parts)
            return (
                f"{where}, the ranks get {got} items in epoch {epoch}",
                f"{share} each: the dataset split {run.ws} ways",
            )
        missing = run.n - len(set().union(*parts))
        if missing:
            return f"{where}, {missing} of the {run.n} items reach no rank in epoch {epoch}", "every item on some rank"
    if all(seen == sorted(seen) for seen in first):
        return f"{where}, every rank gets its items in index order", "a shuffled order"
    repeated = _repeated_epoch(run)
    if repeated is not None:
        earlier, later = repeated
        return (
            f"{where}, epoch {later} gives every rank the same items in the same order as epoch {earlier}",
            "a new order each epoch",
        )
    if all(sorted(a) == sorted(b) for a, b in zip(run.epochs[0], run.epochs[1])):
        return (
            f"{where}, epoch 1 gives every rank the same items as epoch 0, in another order",
            "a new shuffle of the whole dataset each epoch, so each rank's part changes",
        )
    return None


@exercise("10.6", "the data of a DDP script")
def check_rank_loader(rank_loader_fixed: Any) -> None:
    """``rank_loader_fixed(dataset, rank, world_size, epoch, batch_size)`` for every rank of 2 and 3, epochs 0 to 3:
    disjoint equal parts that cover the data, shuffled, reshuffled each epoch (read from a dataset of indices)."""
    for n, ws, batch in LOADER_CASES:
        run = loader_run(rank_loader_fixed, n, ws, batch)
        problem = _loader_problem(run)
        if problem is None:
            continue
        message, expected = problem
        mistake = first_mistake(run, LOADER_MISTAKES)
        every_rank_all = mistake is not None and mistake.name == "every rank sees all data"
        if every_rank_all and _sampler_in_shuffles_place(rank_loader_fixed):
            mistake = SAMPLER_AS_SHUFFLE
        if mistake is not None:
            raise mistake_error(message, mistake, expected=expected)
        raise CheckError(message, expected=expected)
    passed(
        "rank_loader_fixed: on 2 and 3 ranks each rank gets its own shuffled part of the data (together all of it), "
        "and a new order every epoch"
    )

"""Checks of notebook 08: where VGG16's parameters are (08.1, predicted, then counted here), and a
torchvision ResNet made ready for feature extraction (08.2): what is frozen stays exactly as it was,
and the head learns as one step of the student's own optimizer says it should."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import math
import re
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .core import (
    CheckError,
    Mistake,
    as_number,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_function,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    read_prediction,
    run_student,
)
from .nb05_nn_module import torch_settings_kept
from .predictions import number_in_text

__all__ = ["check_vgg_share_prediction", "check_transfer"]

STEPS = 3  # 08.2: training steps per case
CLASSES = (3, 7)  # 08.2: the cases


@functools.lru_cache(maxsize=1)
def _vgg16_counts() -> tuple[int, int, int, int]:
    """VGG16's parameters: in its Linear layers, in the first of them, in all (counted once, on the meta device), and
    in its Linear layers as they would be if the first took one 512-channel vector, not 512 x 7 x 7 features."""
    from torchvision.models import vgg16

    with torch.device("meta"):
        model = vgg16(weights=None)
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    linear = sum(p.numel() for m in layers for p in m.parameters())
    first = sum(p.numel() for p in layers[0].parameters())
    total = sum(p.numel() for p in model.parameters())
    channels = model.features[-3].out_channels  # the last convolution's (a ReLU and a max-pool follow it)
    unflattened = linear - first + (channels + 1) * layers[0].out_features
    return linear, first, total, unflattened


def _one_number(prediction: Any) -> Any:
    """A one-element tensor (``torch.tensor([0.89])``) as the number it holds; anything else as it came."""
    if isinstance(prediction, torch.Tensor) and prediction.numel() == 1 and prediction.device.type != "meta":
        return prediction.reshape(())
    return prediction


def _refuse_decimal_comma(prediction: Any, name: str) -> None:
    """0,89 written without quotes is the tuple (0, 89) to Python: say so before anything is recorded."""
    __tracebackhide__ = True
    if not isinstance(prediction, tuple) or len(prediction) != 2 or prediction[0] != 0:
        return
    if not all(isinstance(part, int) and not isinstance(part, bool) for part in prediction):
        return
    raise CheckError(
        f"{name} must be one number",
        got=f"the tuple {prediction!r}",
        hint=f"Python reads 0,{prediction[1]} as two numbers, 0 and {prediction[1]}: a decimal point is a dot",
        usage=True,
    )


def _share_in_text(answer: Any) -> Any:
    """A share written as text as a number: "0.89" and "0,89" as 0.89, "89%" as 0.89; anything else as it came."""
    if not isinstance(answer, str):
        return answer
    text = answer.strip()
    if re.fullmatch(r"0,\d+", text):
        text = text.replace(",", ".")  # a decimal comma, as many languages write 0.89
    if not text.endswith("%"):
        return number_in_text(text)
    percent = number_in_text(text[:-1])
    if isinstance(percent, bool) or not isinstance(percent, (int, float)):
        return answer
    return percent / 100


@exercise("08.1", "predict, then count: where are VGG16's parameters?", prediction=True)
def check_vgg_share_prediction(prediction) -> None:
    """Count the share of VGG16's parameters in its three Linear layers (built on the meta device)."""
    name = "the share of VGG16's parameters in its Linear layers"
    _refuse_decimal_comma(prediction, name)
    answer = read_prediction(name, _one_number(prediction), form="a number between 0 and 1, such as 0.5")
    share = _share_in_text(answer)
    if not isinstance(share, int) or isinstance(share, bool) or 0 <= share <= 1:
        share = as_number(share, name)  # a whole number of 400 digits is too large for a float: refused below
    if not 0 <= share <= 1:
        raise CheckError(
            f"{name}: answer with a fraction between 0 and 1",
            got=repr(share) if abs(share) < 1e100 else f"a whole number of {len(str(abs(share)))} digits",
            hint="a share of 45% is written 0.45",
            usage=True,
        )
    linear, first, total, unflattened = _vgg16_counts()
    actual = round(linear / total, 2)
    check_prediction(
        name,
        share,
        actual,
        # Within 0.02 of 0.89 (0.87 to 0.91): two digits, one digit (0.9) and rounded arithmetic
        # (100 M + 16 M + 4 M of 138 M gives 0.87) pass. 0.86 does not: it is what the first two Linear
        # layers hold without the third (no note for it: a note matches within rel too, 0.87 and 0.88 included).
        rel=0.025,
        why="The first Linear layer alone maps 512 x 7 x 7 = 25088 features to 4096 outputs: 103 M weights; "
        "the 13 convolutions hold 15 M.",
        mistakes={
            round(1 - actual, 2): "That is the convolutions' share: they do most of the arithmetic, "
            "but hold few parameters.",
            round(first / total, 2): "That is the first Linear layer's share alone: the two after it "
            "(4096 to 4096, and 4096 to the 1000 classes) hold 21 M more.",
            round(unflattened / total, 2): "That is the share the Linear layers would hold if the first took 512 "
            "numbers: it takes the last convolution's whole output, 512 channels at each of 7 x 7 positions, "
            "flattened, and each of those features has its own weight to each of the 4096 outputs.",
            round(3 / 16, 2): "That is the share of the layers, 3 of VGG16's 16 layers with weights: the question "
            "counts parameters, and the layers hold very different numbers of them.",
        },
        ask="which single layer holds most of them, and what about its input makes it so large? Why does a "
        "convolution with many more multiplications need so few weights?",
    )


# ---------------------------------------------------------------- 08.2 freeze, then a new head


@functools.lru_cache(maxsize=1)
def _resnet18() -> nn.Module:
    """A ResNet-18 with random weights: the same layers as a pretrained one, batch norm included."""
    from torchvision.models import resnet18

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return resnet18(weights=None)


@functools.lru_cache(maxsize=1)
def _wider_resnet() -> nn.Module:
    """A torchvision ResNet whose head takes 2048 features, as ResNet-50's does (one bottleneck block per stage);
    built once, like _resnet18: each use takes a copy."""
    from torchvision.models.resnet import Bottleneck, ResNet

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ResNet(Bottleneck, [1, 1, 1, 1])


FIXED_WIDTH = Mistake(
    "head width fixed",
    None,
    "the new head takes a fixed number of features that fits ResNet-18 (512); the ResNets differ there "
    "(ResNet-50's head takes 2048), and section 6 calls your function on yet another network",
    look="prepare_for_transfer: the input size of the new head, read from the head it replaces",
)


def _prepared(
    prepare: Any, n: int, model: nn.Module | None = None
) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module]:
    """The student's (model, optimizer) for ``n`` classes (on a copy of ResNet-18 unless ``model`` is given), and
    the head the model had before."""
    __tracebackhide__ = True
    model = copy.deepcopy(_resnet18()) if model is None else model
    old_head = model.fc
    with torch_settings_kept("your prepare_for_transfer"):
        got = run_student(prepare, model, n, what="prepare_for_transfer(model, num_classes)")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise CheckError(
            "prepare_for_transfer must return (model, optimizer)",
            got=describe(got),
            hint="prepare_for_transfer returns a pair: the model, then its optimizer",
            usage=True,
        )
    model, optimizer = got
    if not isinstance(model, nn.Module) or not isinstance(optimizer, torch.optim.Optimizer):
        raise CheckError(
            "prepare_for_transfer must return (model, optimizer), in this order",
            expected="(an nn.Module, a torch.optim optimizer)",
            got=f"({describe(model)}, {describe(optimizer)})",
            usage=True,
        )
    head = getattr(model, "fc", None)
    if not isinstance(head, nn.Module):
        raise CheckError("the model has no head model.fc", got=describe(head), hint="replace model.fc", usage=True)
    return model, optimizer, old_head


def _probe(model: nn.Module, n: int) -> None:
    """The model's output on two images must have one score per class."""
    __tracebackhide__ = True
    weight = next(model.parameters(), torch.empty(0))
    if weight.device.type == "meta":
        raise CheckError("the model is on the meta device, which holds no weights", usage=True)
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            out = run_student(model, torch.zeros(2, 3, 32, 32, device=weight.device), what="your model")
    finally:
        for module, training in modes.items():
            module.train(training)
    out = expect_tensor(out, "the model's output")
    if out.dim() != 2 or out.shape[1] != n:
        mistake = Mistake(
            "wrong number of classes",
            None,
            "the new head must have one output per class, and the number of classes is the argument num_classes: "
            "is the head's number of outputs that argument, or a number of its own?",
        )
        raise mistake_error(
            f"the model's output has the wrong shape for {n} classes",
            mistake,
            expected=f"(2, {n})",
            got=str(tuple(out.shape)),
        )
    if _probabilities(out):
        raise mistake_error(
            "the model's outputs are probabilities (each row is non-negative and sums to 1), not scores",
            SOFTMAX_IN_HEAD,
            expected="one unnormalised score (a logit) per class, as the old head gave",
        )


SOFTMAX_IN_HEAD = Mistake(
    "softmax in the head",
    None,
    "the new head ends with a softmax, so the model hands out probabilities where a classifier's head gives raw "
    "scores (logits): the cross-entropy of the step normalises the scores itself, so probabilities would be "
    "normalised twice and the gradients shrink; a softmax belongs where probabilities are read, outside the model "
    "that is trained",
    look="the layers of the new head",
)


def _probabilities(out: torch.Tensor) -> bool:
    """Is every row of the model's output a probability vector (what a softmax at the end of the head makes)?"""
    if not out.is_floating_point() or not bool((out >= 0).all()):
        return False
    sums = out.double().sum(dim=1)
    return bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-5))


def _structure_error(model: nn.Module, optimizer: torch.optim.Optimizer, old_head: nn.Module) -> CheckError | None:
    """A replaced head, a frozen backbone, and an SGD optimizer (lr 0.01) that holds the head."""
    head = model.fc
    if head is old_head:
        mistake = Mistake(
            "head not replaced",
            None,
            "model.fc is still the pretrained 1000-class layer: assign a new nn.Linear to model.fc",
            look="where prepare_for_transfer puts the new head into the model",
        )
        return mistake_error("the model still has its old head", mistake, expected="a new model.fc", got="the old one")
    if any(module is old_head for module in head.modules()):
        got = "a model.fc that holds the old model.fc"
        return mistake_error("the new head holds the old one", OLD_HEAD_KEPT, expected="a new model.fc", got=got)
    frozen = [name for name, p in head.named_parameters() if not p.requires_grad]
    if frozen and len(frozen) < len(list(head.parameters())):
        got = f"{', '.join(frozen)} frozen"
        return mistake_error("part of the new head does not require grad", PART_FROZEN, expected="all of it", got=got)
    if frozen:
        mistake = Mistake(
            "head frozen",
            None,
            "the new head was frozen too: the freezing reached every parameter the model held at that moment, the "
            "new head's included (a layer made afterwards would require grad)",
        )
        return mistake_error("the new head does not require grad", mistake, expected="requires_grad=True", got="False")
    return _optimizer_error(optimizer, head, old_head)


PART_FROZEN = Mistake(
    "part of the head frozen",
    None,
    "only part of the new head requires grad (its weight and not its bias, say): the freezing reached into the "
    "head, and what does not require grad gets no gradient and never learns; every parameter of the new head must "
    "learn, and only the backbone's stay frozen",
    look="which parameters the freezing reaches",
)

OLD_HEAD_KEPT = Mistake(
    "old head kept",
    None,
    "the new head is built around the pretrained 1000-class layer: it reads ImageNet's 1000 class scores, not the "
    "backbone's features; the new head replaces the old one and takes the features the old one took",
    look="what model.fc is made of: nothing of the old model.fc stays in it",
)

BACKBONE_NOT_FROZEN = Mistake(
    "backbone not frozen",
    None,
    "the backbone's parameters got gradients and the optimizer updated them: they still require grad, and the "
    "optimizer holds them; a parameter that requires no grad gets none, and one the optimizer does not hold never "
    "moves: freeze the backbone before you add the head, or keep it out of what the optimizer is given",
    look="where prepare_for_transfer decides which parameters need gradients",
)

OLD_HEAD_OUTPUTS = Mistake(
    "head reads the old head's outputs",
    None,
    "the new head takes as many inputs as the old head had outputs (out_features, the 1000 ImageNet classes): "
    "what reaches the head is the backbone's features, as many as the old head took in",
    look="the first size given to the new nn.Linear",
)

PART_OF_THE_HEAD = Mistake(
    "part of the head in the optimizer",
    None,
    "the optimizer was given some of the head's parameters but not all (the weight without the bias, say): what it "
    "does not hold never changes, though it gets gradients; give it every parameter of the head",
    look="what prepare_for_transfer gives the optimizer",
)


def _optimizer_error(optimizer: torch.optim.Optimizer, head: nn.Module, old_head: nn.Module) -> CheckError | None:
    """The optimizer must update the head (frozen parameters in it do no harm): SGD, lr 0.01."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not {id(p) for p in head.parameters()} <= held:
        old = any(id(p) in held for p in old_head.parameters())
        missing = [name for name, p in head.named_parameters() if id(p) not in held]
        if not old and len(missing) < len(list(head.parameters())):
            return mistake_error(
                "the optimizer holds only part of the new head",
                PART_OF_THE_HEAD,
                expected="every parameter of model.fc",
                got=f"all but {', '.join(missing)}",
            )
        if old:
            why = "the optimizer was created before the head was replaced: it updates the old head's parameters"
            mistake = Mistake("optimizer over the old head", None, why)
        else:
            why = "the optimizer holds none of the new head's parameters: give it model.fc.parameters()"
            mistake = Mistake("head not in the optimizer", None, why)
        got = "the old head's parameters" if old else f"{len(held)} parameters, none of the new head's"
        return mistake_error("the optimizer does not hold the new head's parameters", mistake, got=got)
    head_ids = {id(p) for p in head.parameters()}
    # the learning rate of the groups that hold the head: a frozen backbone's group may have any other
    lrs = {group["lr"] for group in optimizer.param_groups if head_ids & {id(p) for p in group["params"]}}
    plain_lrs = {float(lr) if not isinstance(lr, torch.Tensor) else float(lr.item()) for lr in lrs}
    wrong_lr = any(not math.isclose(lr, 0.01, rel_tol=1e-6) for lr in plain_lrs)  # a float32 0.01 is 0.0099999998
    if not isinstance(optimizer, torch.optim.SGD) or wrong_lr:
        mistake = Mistake("optimizer settings", None, "the exercise asks for SGD with learning rate 0.01")
        got = f"{type(optimizer).__name__} with lr {sorted(plain_lrs)}"
        return mistake_error("the optimizer is not the one asked for", mistake, expected="SGD, lr=0.01", got=got)
    return None


class Mirror:
    """A copy of the student's model and optimizer that takes the reference step from the student's state."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = copy.deepcopy(model)
        self.model.requires_grad_(False)
        self.model.fc.requires_grad_(True)
        index = {id(p): i for i, p in enumerate(model.parameters())}
        params = list(self.model.parameters())
        groups = []
        for group in optimizer.param_groups:
            settings = {key: value for key, value in group.items() if key != "params"}
            groups.append({**settings, "params": [params[index[id(p)]] for p in group["params"]]})
        self.optimizer = type(optimizer)(groups)

    def step(
        self,
        state: Snapshot,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        zero_grad: bool = True,
        scale: float = 1.0,
        steps: int = 1,
        softmax_first: bool = False,
        nll_on_scores: bool = False,
        loss_after_step: bool = False,
        loss_of: Any = None,
        batch_statistics: bool = False,
    ) -> tuple[list[torch.Tensor], float]:
        """One step from the student's state before its step; returns the head's parameters and the loss.
        The keywords make it a known wrong step: gradients kept, a scaled loss, ``steps`` optimizer steps on one
        gradient, a softmax before the cross-entropy, nll_loss on the raw scores, the loss computed again after
        the step, ``loss_of(scores, labels)`` in place of the cross-entropy, or the backbone's batch norm
        normalising with the batch's own statistics (its running statistics left as they were)."""
        head = self.model.fc
        with torch.no_grad():
            for p, before in zip(head.parameters(), state.head):
                p.copy_(before)
        for p, grad in zip(head.parameters(), state.grads):
            p.grad = grad.clone() if grad is not None and not zero_grad else None
        self.optimizer.load_state_dict(copy.deepcopy(state.optimizer))  # the step changes its buffers in place
        self.model.eval()
        head.train(state.head_training)
        with torch.random.fork_rng(devices=[]), _batch_statistics(self.model, batch_statistics):
            torch.manual_seed(state.seed)
            scores = self.model(images)
            if loss_of is not None:
                loss = loss_of(scores, labels)
            elif nll_on_scores:
                loss = F.nll_loss(scores, labels)
            else:
                loss = F.cross_entropy(scores.softmax(dim=1) if softmax_first else scores, labels)
            rng = torch.get_rng_state()  # a second forward pass (dropout in the head) goes on from here
        (loss * scale).backward()
        for _ in range(steps):
            self.optimizer.step()
        if loss_after_step:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.set_rng_state(rng)
                loss = F.cross_entropy(self.model(images), labels)
        return [p.detach().clone() for p in head.parameters()], float(loss.detach())


@contextlib.contextmanager
def _batch_statistics(model: nn.Module, wanted: bool) -> Iterator[None]:
    """With ``wanted``, the backbone's batch norm in training mode (it normalises with each batch's statistics),
    its buffers brought back afterwards; otherwise nothing."""
    if not wanted:
        yield
        return
    buffers = {name: buf.clone() for name, buf in model.named_buffers()}
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.train()
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buf in model.named_buffers():
                buf.copy_(buffers[name])


@dataclasses.dataclass
class Snapshot:
    """The student's head and optimizer just before one of its steps."""

    head: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    optimizer: dict
    seed: int
    head_training: bool = True
    stepped: bool = True  # did the student's step call the optimizer's step()?


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> Snapshot:
    head = list(model.fc.parameters())
    grads = [None if p.grad is None else p.grad.detach().clone() for p in head]
    return Snapshot([p.detach().clone() for p in head], grads, copy.deepcopy(optimizer.state_dict()), seed)


EVAL_ONLY_IN_PREPARE = Mistake(
    "eval mode set only in prepare_for_transfer",
    None,
    "prepare_for_transfer put batch norm in eval mode, but a mode does not stay set: a training loop switches the "
    "model back with model.train() after each evaluation (notebook 05; lab.fit does it every epoch), and at the next "
    "step batch norm updates its running statistics again; the check did the same before each step, so a mode set "
    "once, before training, is gone by the next step",
    look="the start of transfer_step: in which mode is the backbone when the forward pass runs?",
)


def _batch_norm_in_eval(model: nn.Module) -> bool:
    """Did prepare_for_transfer leave some batch norm in eval mode (where transfer_step would have to keep it)?"""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training for m in model.modules())


BACKBONE_CHANGED_IN_PREPARE = Mistake(
    "backbone changed by prepare_for_transfer",
    None,
    "prepare_for_transfer itself changed the backbone, before any training step: the pretrained weights it was "
    "handed (or their batch-norm statistics) are what feature extraction keeps and builds on; re-initialising "
    "layers (reset_parameters, an init function applied to the whole model), loading other weights or running "
    "the model in training mode throws that away, and only the new head is meant to start fresh",
    look="prepare_for_transfer: everything it does to the model besides freezing it and replacing model.fc",
)


def _changed_by_prepare(model: nn.Module) -> CheckError | None:
    """Backbone parameters or buffers that no longer hold the pretrained values right after prepare_for_transfer
    (only entries kept under the same name: a swapped batch norm is judged after the steps)."""
    original = _resnet18().state_dict()
    now = model.state_dict()
    changed = [
        k
        for k, v in original.items()
        if not k.startswith("fc.") and k in now and now[k].shape == v.shape and not torch.equal(v, now[k].cpu())
    ]
    if not changed:
        return None
    return mistake_error(
        "right after prepare_for_transfer, before any step, the backbone no longer holds the weights it was given",
        BACKBONE_CHANGED_IN_PREPARE,
        expected="every backbone parameter and buffer as it was",
        got=f"{len(changed)} changed, e.g. {changed[0]}",
    )


def _frozen_error(model: nn.Module, step: int, eval_in_prepare: bool = False) -> CheckError | None:
    """After a step, every backbone parameter and buffer must hold what the pretrained model held; the model came
    to the step in training mode (``eval_in_prepare``: prepare_for_transfer had put batch norm in eval mode)."""
    original = _resnet18().state_dict()
    now = model.state_dict()
    # A batch norm swapped for one that never updates (torchvision's FrozenBatchNorm2d) keeps no counter of batches.
    uncounted = {k for k in original if k.endswith("num_batches_tracked") and k not in now}
    moved = [
        k
        for k, v in original.items()
        if not k.startswith("fc.") and k not in uncounted and (k not in now or not torch.equal(v, now[k].cpu()))
    ]
    if not moved:
        return None
    statistics = [k for k in moved if "running_" in k or "num_batches" in k]
    if statistics and len(statistics) == len(moved) and eval_in_prepare:
        return mistake_error(
            f"after step {step} the backbone's batch-norm statistics changed: the model came to transfer_step in "
            "training mode, as a training loop's model.train() leaves it",
            EVAL_ONLY_IN_PREPARE,
            expected="every backbone buffer as it was, whatever mode the model comes in",
            got=f"{len(statistics)} buffers changed, e.g. {statistics[0]}",
        )
    if statistics and len(statistics) == len(moved):
        mistake = Mistake(
            "batch norm in training mode",
            None,
            "batch norm's running statistics still update: the model is in training mode during the step, "
            "though only the head learns",
            look="the start of transfer_step: in which mode is the backbone when the forward pass runs?",
        )
        return mistake_error(
            f"after step {step} the backbone's batch-norm statistics changed",
            mistake,
            expected="every backbone buffer as it was",
            got=f"{len(statistics)} buffers changed, e.g. {statistics[0]}",
        )
    parameters = dict(model.named_parameters())
    if any(k in parameters for k in moved):
        return mistake_error(
            f"after step {step} the backbone's weights changed",
            BACKBONE_NOT_FROZEN,
            expected="every backbone parameter as it was",
            got=f"{len(moved)} changed, e.g. {moved[0]}",
        )
    return CheckError(
        f"after step {step} the backbone changed",
        expected="every backbone parameter and buffer as it was",
        got=f"{len(moved)} changed, e.g. {moved[0]}",
        hint="only the head may learn: what else updates the backbone's weights in your step?",
    )


BATCH_STATISTICS = Mistake(
    "features from batch statistics",
    None,
    "the head learned from features that the backbone's batch norm computed with each batch's own mean and "
    "variance (training mode), though its running statistics stayed as they were (track_running_stats "
    "turned off, or the buffers put back): a frozen backbone normalises with the running "
    "statistics it learned, so the features depend on the batch and differ from the pretrained network's",
    look="batch norm in prepare_for_transfer and transfer_step: which statistics it normalises with",
)


def _head_mistakes(mirror: Mirror, state: Snapshot, model: nn.Module, batch: tuple) -> list[Mistake]:
    """Known wrong updates of the head in this step (computed only when the update is wrong, each wrong step taken
    only when the mistakes before it did not match)."""
    head = list(model.fc.parameters())
    unchanged = all(torch.equal(p.detach(), b) for p, b in zip(head, state.head))
    if unchanged:
        return [_not_applied(head, state.stepped)]

    def moved_as(**how: Any) -> Any:
        return _moved_as(mirror, state, batch, **how)

    return [
        *_loss_form_mistakes(mirror, state, batch),
        dataclasses.replace(BATCH_STATISTICS, matches=moved_as(batch_statistics=True)),
        Mistake(
            "optimizer stepped twice",
            moved_as(steps=2),
            "the head took two steps with one gradient: optimizer.step() runs twice in a training step",
            look="every optimizer.step() in transfer_step",
        ),
        Mistake(
            "softmax before the loss",
            moved_as(softmax_first=True),
            "a softmax was applied before cross_entropy, which takes the raw scores (logits) and applies "
            "log-softmax itself: the probabilities went through a softmax twice, and the gradients shrink",
            look="what transfer_step gives cross_entropy",
        ),
        Mistake(
            "nll_loss on raw scores",
            moved_as(nll_on_scores=True),
            "nll_loss expects log-probabilities and only picks the label's entry: given the raw scores (logits), "
            "it pushes the right class's score up without bound and ignores every other class",
            look="the loss function transfer_step calls, and what it gives it",
        ),
        Mistake(
            "zero_grad missing",
            moved_as(zero_grad=False),
            "the gradients were never cleared: backward() adds to what .grad holds, so this step added its "
            "gradients to those of the steps before",
            look="where the step clears the gradients, before backward()",
        ),
        Mistake(
            "loss summed over the batch",
            moved_as(scale=float(len(batch[1]))),
            "the loss is summed over the batch, not averaged: "
            "cross-entropy's default (the mean) keeps the step size independent of the batch size",
        ),
        Mistake(
            "loss averaged twice",
            moved_as(scale=1 / len(batch[1])),
            "the loss was divided by the batch size after cross-entropy had already averaged it over the batch (its "
            "default reduction is the mean): the gradients, and so the step, came out batch-size times too small",
            look="what transfer_step does to the loss between the loss function and backward()",
        ),
    ]


def _loss_form_mistakes(mirror: Mirror, state: Snapshot, batch: tuple) -> list[Mistake]:
    """Known wrong losses of a step, by the head they move to: a regression or binary loss, label smoothing, a softmax
    over the wrong axis, nll on probabilities."""
    return [
        *[
            dataclasses.replace(REGRESSION_LOSS, matches=_moved_as(mirror, state, batch, loss_of=loss_of))
            for loss_of in SQUARED_ERRORS
        ],
        *[
            dataclasses.replace(BINARY_LOSS, matches=_moved_as(mirror, state, batch, loss_of=loss_of))
            for loss_of in BINARY_CROSS_ENTROPIES
        ],
        dataclasses.replace(LABEL_SMOOTHING, matches=_label_smoothed(mirror, state, batch)),
        Mistake(
            "softmax over the batch",
            _moved_as(mirror, state, batch, loss_of=_log_softmax_over_batch),
            "the log-softmax ran over dim 0, the batch: each class's scores were normalised across the images, "
            "where each image's scores must be normalised across the classes (dim 1 of the (batch, classes) scores)",
            look="the dim of the softmax in transfer_step",
        ),
        Mistake(
            "nll_loss on probabilities",
            _moved_as(mirror, state, batch, loss_of=_nll_of_probabilities),
            "nll_loss was given probabilities (a softmax), where it expects log-probabilities: it only picks the "
            "label's entry and negates it, so the loss is minus a probability, not the cross-entropy",
            look="what transfer_step gives nll_loss",
        ),
    ]


REGRESSION_LOSS = Mistake(
    "regression loss, not cross-entropy",
    None,
    "the step minimised a regression loss (a squared error, mse_loss, or l1_loss) between the scores and the labels "
    "(as one-hot vectors, or as numbers): a classifier's scores are logits, and the loss that makes them "
    "log-probabilities of the right class is the cross-entropy, which takes the scores and the class indices",
    look="the loss function transfer_step calls",
)


def _one_hot(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.one_hot(labels, scores.shape[1]).to(scores.dtype)


def _mse_to_one_hot(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(scores, _one_hot(scores, labels))


def _summed_mse_to_one_hot(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(scores, _one_hot(scores, labels), reduction="sum")


def _mse_of_probabilities(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(scores.softmax(dim=1), _one_hot(scores, labels))


# Squared errors a student writes for a classifier: on the scores, summed or averaged, or on probabilities.
SQUARED_ERRORS = (_mse_to_one_hot, _summed_mse_to_one_hot, _mse_of_probabilities)


BINARY_LOSS = Mistake(
    "binary cross-entropy",
    None,
    "the step's loss is a binary cross-entropy (BCE, on logits or on sigmoids): it asks a yes-or-no question of "
    "each class on its own, each score through its own sigmoid against a target shaped like the scores, so the "
    "classes do not compete for the one label an image has; a single-label classifier's scores are the logits of "
    "one softmax over the classes, and its loss is the cross-entropy, which takes the scores and the class indices",
    look="the loss function transfer_step calls, and the targets it gives it",
)


def _bce_to_one_hot(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(scores, _one_hot(scores, labels))


def _summed_bce_to_one_hot(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(scores, _one_hot(scores, labels), reduction="sum")


def _bce_of_sigmoids(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy(torch.sigmoid(scores), _one_hot(scores, labels))


# Binary cross-entropies a student writes for a classifier: on the logits (averaged or summed), or on sigmoids.
BINARY_CROSS_ENTROPIES = (_bce_to_one_hot, _summed_bce_to_one_hot, _bce_of_sigmoids)

LABEL_SMOOTHING = Mistake(
    "label smoothing",
    None,
    "the step's loss is a cross-entropy with label smoothing: part of each label's weight was spread over the "
    "other classes, which changes the gradients (the head is pulled less hard towards the right class); it is a "
    "regulariser you may choose in a training of your own, but this step trains on the labels as they are, with "
    "the plain cross-entropy the check compares with",
    look="the arguments of the loss transfer_step computes",
)


def _uniform_targets(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The cross-entropy against a uniform target over the classes: label smoothing's second term (smoothing 1)."""
    return -F.log_softmax(scores, dim=1).mean()


def _label_smoothed(mirror: Mirror, state: Snapshot, batch: tuple) -> Any:
    """A predicate: is the student's head where a cross-entropy with some label smoothing (0 < s < 1) puts it? That
    loss is (1 - s) cross-entropy + s uniform-target loss, and an SGD step (momentum and weight decay included) is
    affine in the gradient, so the head lies on the line through the two steps, at s: s is read from the head."""

    def close(got: Any) -> bool:
        plain, _ = mirror.step(state, *batch)
        uniform, _ = mirror.step(state, *batch, loss_of=_uniform_targets)
        moved = torch.cat([(g.detach().cpu() - p.cpu()).flatten() for g, p in zip(got, plain)]).double()
        line = torch.cat([(u.cpu() - p.cpu()).flatten() for u, p in zip(uniform, plain)]).double()
        smoothing = float(moved @ line / (line @ line).clamp(min=1e-30))
        if not 0 < smoothing < 1:
            return False
        return _close_to([p + smoothing * (u - p) for p, u in zip(plain, uniform)])(got)

    return close


def _log_softmax_over_batch(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(F.log_softmax(scores, dim=0), labels)


def _nll_of_probabilities(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(F.softmax(scores, dim=1), labels)


def _always(got: Any) -> bool:
    return True


STEP_BEFORE_BACKWARD = Mistake(
    "step before backward",
    _always,
    "optimizer.step() ran, but before loss.backward() had computed this batch's gradients: it found none (or "
    "those of the batch before) and left the head as it was, and the gradients it should have applied arrived "
    "after it; a step applies the gradients that are there when it runs",
    look="the order of the calls in transfer_step",
)


NOTHING_APPLIED = Mistake(
    "no backward, no step",
    _always,
    "the step went no further than the loss: no gradient reached the head and the optimizer never stepped, so the "
    "head stayed as it was; a training step goes on from its loss to the gradients, and then applies them (is "
    "transfer_step finished, or does it return before those calls?)",
    look="what transfer_step does after it has computed the loss",
)


def _not_applied(head: list[torch.Tensor], stepped: bool) -> Mistake:
    """Why a step left the head as it was: no optimizer.step() (or one before backward), no gradient when it ran,
    or neither a gradient nor a step."""
    has_grad = any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in head)
    if has_grad and stepped:
        return STEP_BEFORE_BACKWARD
    if not has_grad and not stepped:
        return NOTHING_APPLIED
    if has_grad:
        return Mistake(
            "optimizer.step() missing",
            _always,
            "the head never moved although its gradients are there: backward() only computes gradients, and "
            "nothing in the step applied them to the weights",
            look="what in transfer_step changes the head's weights",
        )
    return Mistake(
        "no gradient at step",
        _always,
        "the step found no gradients when it ran: nothing computed them from this batch's loss, or they were "
        "cleared between their computation and the step",
        look="the order of the calls in transfer_step: which computes the gradients, which clears them, which "
        "applies them",
    )


def _close_to(params: list[torch.Tensor]) -> Any:
    """A predicate: is the student's head (a list of tensors) within float error of ``params``?"""

    def close(got: Any) -> bool:
        return all(torch.allclose(g.cpu(), p.cpu(), rtol=1e-4, atol=1e-6) for g, p in zip(got, params))

    return close


def _moved_as(mirror: Mirror, state: Snapshot, batch: tuple, **how: Any) -> Any:
    """A predicate: is the student's head where the mirror's step with ``how`` (a known wrong step) puts it? That
    step is taken when the predicate is asked, not before: once a mistake matches, the ones after it cost nothing."""

    def close(got: Any) -> bool:
        params, _ = mirror.step(state, *batch, **how)
        return _close_to(params)(got)

    return close


def _check_step(model: nn.Module, mirror: Mirror, state: Snapshot, batch: tuple, loss: Any, step: int) -> None:
    """The head's parameters and the returned loss after one step, against the mirror's reference step."""
    __tracebackhide__ = True
    want, want_loss = mirror.step(state, *batch)
    head = [p.detach() for p in model.fc.parameters()]
    where = f"after step {step}"
    for (name, got), expected in zip(model.fc.named_parameters(), want):
        try:
            compare(f"the head's {name}", got.detach(), expected, rtol=1e-4, atol=1e-6, where=where)
        except CheckError as err:
            mistake = first_mistake(head, _head_mistakes(mirror, state, model, batch))
            if mistake is None:
                raise
            raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None
    if isinstance(loss, torch.Tensor):
        mistake = Mistake(
            "loss returned as a tensor",
            None,
            "the prompt asks for the loss as a number: a one-element tensor has a method that hands out its "
            "value as a Python float (a tensor keeps its whole graph alive)",
            look="what transfer_step returns",
        )
        raise mistake_error("transfer_step returned a tensor", mistake, expected="a Python float", got=describe(loss))
    if callable(loss):
        raise CheckError(
            f"transfer_step returned a {type(loss).__name__}, a method or function, not the value of the loss",
            expected="the loss, a float",
            got=describe(loss),
            hint="a method named without the parentheses that call it hands back the method itself, not its result",
            usage=True,
        )
    if loss is None:
        raise CheckError(
            "transfer_step returned None",
            expected="the loss, a float",
            got="None",
            hint="a missing `return`: transfer_step ends by returning the loss of its step, as a number",
            usage=True,
        )
    value = as_number(loss, "transfer_step's loss")
    try:
        compare("transfer_step's loss", torch.tensor(float(value)), torch.tensor(want_loss), rtol=1e-4, where=where)
    except CheckError as err:
        mistake = first_mistake(float(value), _loss_mistakes(mirror, state, batch, want_loss))
        if mistake is None:
            raise
        raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None


def _loss_mistakes(mirror: Mirror, state: Snapshot, batch: tuple, want: float) -> list[Mistake]:
    """Known wrong losses returned by a step that moved the head right (computed only when the loss is wrong)."""
    _, after = mirror.step(state, *batch, loss_after_step=True)
    return [
        Mistake(
            "loss returned as the batch's total",
            functools.partial(math.isclose, want * len(batch[1]), rel_tol=1e-4),
            "the loss returned is the step's mean loss multiplied by the number of images: that total is what a "
            "training loop adds up to average a whole epoch over its examples, but the step's own loss, the one "
            "backward() went through, is the mean over the batch",
            look="what transfer_step does to the loss it returns",
        ),
        Mistake(
            "loss recomputed after the step",
            functools.partial(math.isclose, after, rel_tol=1e-4),
            "the loss returned was computed again after optimizer.step(), with the updated head, not the loss "
            "this step's backward() went through",
            look="where transfer_step computes the loss it returns",
        ),
        Mistake(
            "loss returned divided by the batch size",
            functools.partial(math.isclose, want / len(batch[1]), rel_tol=1e-4),
            "the loss returned is the step's mean loss divided once more by the number of images: cross-entropy "
            "already averages over the batch, so its value is the loss per image",
            look="what transfer_step does to the loss before it returns it",
        ),
        Mistake(
            "accuracy returned",
            _one_of(_accuracies(mirror, state, batch)),
            "the number returned is the batch's accuracy (the share, or the count, of images whose highest score "
            "is their label), not the loss: the step returns the value of the cross-entropy that backward() went "
            "through",
            look="what transfer_step returns",
        ),
        Mistake(
            "loss rounded",
            _one_of(_roundings(want)),
            "the loss returned was rounded (int(), round(), math.floor, or a format with few decimals): the step "
            "returns the loss as the number backward() went through, all its digits; rounding is for printing it",
            look="what transfer_step does to the loss before it returns it",
        ),
    ]


def _roundings(loss: float) -> list[float]:
    """``loss`` rounded to 0 to 3 decimals, and down and up to whole numbers, where that changes it."""
    rounded = [round(loss, digits) for digits in range(4)] + [math.floor(loss), math.ceil(loss)]
    return [value for value in rounded if not math.isclose(value, loss, rel_tol=1e-4)]


def _accuracies(mirror: Mirror, state: Snapshot, batch: tuple) -> list[float]:
    """The batch's accuracy before the step, as a share, a percentage and a count of correct images."""
    seen = []

    def scored(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        seen.append(scores.detach())
        return F.cross_entropy(scores, labels)

    mirror.step(state, *batch, loss_of=scored)
    correct = float((seen[0].argmax(dim=1) == batch[1]).sum())
    share = correct / len(batch[1])
    return [share, 100 * share, correct]


def _one_of(values: list[float]) -> Callable[[float], bool]:
    """A match for a number equal to one of ``values``."""

    def matches(got: float) -> bool:
        return any(math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-9) for value in values)

    return matches


def _mirror(model: nn.Module, optimizer: torch.optim.Optimizer) -> Mirror:
    __tracebackhide__ = True
    try:
        return Mirror(model, optimizer)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckError(
            f"the check could not take a reference step with your optimizer ({type(exc).__name__}: {exc})",
            hint="create torch.optim.SGD over parameters of the returned model, with lr=0.01",
            usage=True,
        ) from None


class _Modes(list):
    """A forward pre-hook that records the mode of its module at each forward pass, and in ``recording``
    whether autograd recorded that pass (False under torch.no_grad())."""

    def __init__(self) -> None:
        super().__init__()
        self.recording: list[bool] = []

    def __call__(self, module: nn.Module, args: Any) -> None:
        self.append(module.training)
        self.recording.append(torch.is_grad_enabled())


class _StepCalls:
    """An optimizer step pre-hook that counts the calls of the student's optimizer.step() (to name a mistake)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.count += 1


HEAD_UNDER_NO_GRAD = Mistake(
    "head under no_grad",
    None,
    "the head ran under torch.no_grad() too, so nothing recorded how the loss depends on its weights and "
    "backward() has no graph to go through: only the frozen backbone may run without autograd",
    look="which calls in transfer_step run inside the torch.no_grad() block",
)


LOSS_A_NUMBER_TOO_SOON = Mistake(
    "loss made a number before backward",
    None,
    "backward() was called on a Python number: the loss became a float (with .item(), float() or the math module) "
    "before the gradients were computed, and a number has no graph to go back through; the step returns the loss "
    "as a number, but only after backward() has run on the tensor",
    look="where the loss stops being a tensor, and where backward() runs",
)

#: What mse_loss (and l1_loss) warn when the target's shape is not the scores': class indices against scores.
TARGET_SIZE_WARNING = "that is different to the input size"


LOSS_ARGUMENTS_SWAPPED = Mistake(
    "loss arguments swapped",
    None,
    "the loss was given the labels where the scores go and the scores where the labels go: the loss functions of "
    "torch.nn.functional take the model's (batch, classes) scores first and the batch of class indices second, so "
    "it read the scores as a target with a class per column, which it does not take",
    look="the order of the loss function's arguments",
)


def _raised_in_a_binary_loss(err: CheckError) -> bool:
    """Did the student's step fail inside torch's binary cross-entropy (given class indices, or integer targets)?"""
    cause = err.__cause__
    if cause is None:
        return False
    frames = traceback.walk_tb(cause.__traceback__)
    return any(frame.f_code.co_name.startswith("binary_cross_entropy") for frame, _ in frames)


STEP_A_GENERATOR = Mistake(
    "transfer_step is a generator",
    None,
    why="a yield anywhere in a function's body makes it a generator function: calling it builds a generator and "
    "runs none of its lines (no forward pass, no backward, no optimizer step) until something iterates over it",
    look="transfer_step: every yield in its body",
)


def _run_step(transfer_step: Any, model: nn.Module, optimizer: Any, batch: tuple, modes: _Modes, seed: int) -> Any:
    """The student's step on a copy of the batch (the reference keeps it as it was), under ``seed``."""
    __tracebackhide__ = True
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        given = tuple(t.clone() for t in batch)
        try:
            with torch_settings_kept("your transfer_step"):
                loss = run_student(transfer_step, model, optimizer, *given, what="transfer_step")
        except CheckError as err:
            if _raised_in_a_binary_loss(err):
                raise mistake_error(err.message, BINARY_LOSS) from None  # BCE on the class indices, or long targets
            if "multi-target not supported" in err.message:
                raise mistake_error(err.message, LOSS_ARGUMENTS_SWAPPED) from None
            if "'float' object has no attribute 'backward'" in err.message:
                raise mistake_error(err.message, LOSS_A_NUMBER_TOO_SOON) from None
            if any(TARGET_SIZE_WARNING in str(warning.message) for warning in warned):
                raise mistake_error(err.message, REGRESSION_LOSS) from None  # mse_loss(scores, labels): no broadcast
            no_grad = bool(modes.recording) and not modes.recording[-1]
            if not no_grad or "does not require grad" not in err.message:
                raise
            raise mistake_error(err.message, HEAD_UNDER_NO_GRAD) from None
    if inspect.isgenerator(loss):
        loss.close()
        raise mistake_error("transfer_step returned a generator and did nothing else", STEP_A_GENERATOR)
    return loss


def _refuse_unwritten(loss: Any, ran_forward: bool, stepped: bool) -> None:
    """A transfer_step that returned None without a forward pass or an optimizer step is not written yet."""
    __tracebackhide__ = True
    if loss is None and not ran_forward and not stepped:
        raise CheckError(
            "transfer_step returned None and did nothing with the model: no forward pass, no optimizer step",
            hint="it is not written yet (a stub left as it was?): fill it in, run its cell, then this check again",
            usage=True,
        )


def _head_mode(model: nn.Module) -> _Modes:
    """A record of the head's mode at each forward pass."""
    modes = _Modes()
    model.fc.register_forward_pre_hook(modes)
    return modes


def _probe_new_head(model: nn.Module, n: int, old_head: nn.Module) -> None:
    """The model's output must have one score per class; a head that takes the old head's outputs is named."""
    __tracebackhide__ = True
    try:
        _probe(model, n)
    except CheckError as err:
        first = next((m for m in model.fc.modules() if isinstance(m, nn.Linear)), None)
        takes_outputs = first is not None and first.in_features == getattr(old_head, "out_features", None)
        if "mat1 and mat2" not in err.message or not takes_outputs:
            raise
        raise mistake_error(
            f"the model with your new head fails: {err.message}",
            OLD_HEAD_OUTPUTS,
            expected=f"a head that takes {old_head.in_features} features",
            got=f"nn.Linear({first.in_features}, {first.out_features})",
        ) from None


def _still_computed(model: nn.Module) -> str:
    """A note for a PASS whose backbone still requires grad: it stayed as it was, but its gradients cost work."""
    head_ids = {id(p) for p in model.fc.parameters()}
    if not any(p.requires_grad for p in model.parameters() if id(p) not in head_ids):
        return ""
    return (
        " (the backbone still requires grad: it stayed as it was, but each step computes its gradients for nothing, "
        "which requires_grad_(False) saves)"
    )


def _check_other_width(prepare: Any) -> None:
    """prepare_for_transfer on a ResNet whose head takes 2048 features must give one score per class too."""
    __tracebackhide__ = True
    n = 4
    model, _, _ = _prepared(prepare, n, copy.deepcopy(_wider_resnet()))
    try:
        _probe(model, n)
    except CheckError as err:
        if "mat1 and mat2" not in err.message:
            raise
        raise mistake_error(
            "on a ResNet whose head takes 2048 features, the model with your new head fails", FIXED_WIDTH
        ) from None


@exercise("08.2", "feature extraction on a ResNet")
def check_transfer(prepare_for_transfer, transfer_step) -> None:
    """prepare_for_transfer(resnet, N) -> (model, optimizer), then 3 x transfer_step(model, optimizer,
    images, labels): the backbone stays exactly as it was; the head moves as one reference SGD step says."""
    expect_function(prepare_for_transfer, "prepare_for_transfer")
    expect_function(transfer_step, "transfer_step")
    with torch_settings_kept("your prepare_for_transfer or transfer_step"):
        model = _judge_transfer(prepare_for_transfer, transfer_step)
    passed(
        "transfer: backbone and batch-norm statistics frozen, a new trainable head, "
        "and each step moves the head as SGD says" + _still_computed(model)
    )


def _judge_transfer(prepare_for_transfer: Callable, transfer_step: Callable) -> nn.Module:
    """Both class counts, three steps each, then the wider ResNet; the last model prepared."""
    __tracebackhide__ = True
    for n in CLASSES:
        model, optimizer, old_head = _prepared(prepare_for_transfer, n)
        eval_in_prepare = _batch_norm_in_eval(model)
        error = _structure_error(model, optimizer, old_head) or _changed_by_prepare(model)
        if error is not None:
            raise error
        _probe_new_head(model, n, old_head)
        mirror = _mirror(model, optimizer)
        device = next(model.fc.parameters()).device
        modes = _head_mode(model)
        steps = _StepCalls()
        optimizer.register_step_pre_hook(steps)
        g = torch.Generator().manual_seed(n)
        for step in range(1, STEPS + 1):
            size = 3 + step  # batches of 4, 5 and 6 images: nothing may depend on the batch size
            batch = (torch.randn(size, 3, 32, 32, generator=g), torch.randint(0, n, (size,), generator=g))
            state = _snapshot(model, optimizer, seed=100 * n + step)
            model.train()  # as a training loop leaves it, back from an evaluation (notebook 05)
            steps.count = 0
            forwards = len(modes)
            loss = _run_step(transfer_step, model, optimizer, batch, modes, state.seed)
            _refuse_unwritten(loss, len(modes) > forwards, steps.count > 0)
            state.head_training = modes[-1] if modes else True
            state.stepped = steps.count > 0
            error = _frozen_error(model, step, eval_in_prepare)
            if error is not None:
                raise error
            on_device = tuple(t.to(device) for t in batch)
            _check_step(model, mirror, state, on_device, loss, step)
    _check_other_width(prepare_for_transfer)
    return model

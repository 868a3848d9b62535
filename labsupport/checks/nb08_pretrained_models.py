"""Checks for notebook 08: where VGG16's parameters are (predicted, then counted here), and a
torchvision ResNet made ready for feature extraction: what is frozen stays exactly as it was."""
from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from .core import CheckError, check_prediction, describe, exercise, expect_tensor, passed, read_prediction, run_student

__all__ = ["check_vgg_share_prediction", "check_transfer"]


@exercise("08.1", "where VGG16's parameters are (predict, then count)")
def check_vgg_share_prediction(prediction) -> None:
    """Count the share of VGG16's parameters in its three Linear layers (built on the meta device)."""
    from torchvision.models import vgg16
    prediction = read_prediction("the share of VGG16's parameters in its Linear layers", prediction)
    with torch.device("meta"):
        model = vgg16(weights=None)
    linear = sum(p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters())
    check_prediction("the share of VGG16's parameters in its Linear layers", prediction,
                     round(linear / sum(p.numel() for p in model.parameters()), 2), rel=0.05,
                     why="The first Linear layer alone maps 512 x 7 x 7 = 25088 features to 4096 outputs: "
                         "103 M weights; the 13 convolutions hold 15 M. (Give a fraction, not a percentage.)")


@functools.lru_cache(maxsize=1)
def _resnet18() -> nn.Module:
    from torchvision.models import resnet18

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return resnet18(weights=None)  # stands in for a pretrained one: same layers, batch norm included


def _fail(hint: str) -> None:
    raise CheckError("the model is not ready for feature extraction", hint=hint)


@exercise("08.2", "freeze, then a new head")
def check_transfer(prepare_for_transfer, transfer_step) -> None:
    """prepare_for_transfer(resnet, N) -> (model, optimizer), then 3 x transfer_step(model, optimizer,
    images, labels): only the new head may change; weights and batch-norm statistics stay as they were."""
    for n in (3, 7):
        model = copy.deepcopy(_resnet18())
        old_head, before = model.fc, {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("fc.")}
        got = run_student(prepare_for_transfer, model, n, what="prepare_for_transfer(model, num_classes)")
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], nn.Module)
                and isinstance(got[1], torch.optim.Optimizer)):
            raise CheckError("prepare_for_transfer must return (model, optimizer)", got=describe(got))
        model, optimizer = got
        head = getattr(model, "fc", None)
        if head is old_head or not isinstance(head, nn.Linear) or head.out_features != n or head.in_features != 512:
            _fail(f"model.fc must be a new nn.Linear(model.fc.in_features, num_classes) = Linear(512, {n}); "
                  f"it is {head}")
        expect_tensor(head.weight, "the new head's weight")
        head_ids = {id(p) for p in head.parameters()}
        in_opt = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for bad, hint in [(any(p.requires_grad for p in model.parameters() if id(p) not in head_ids), "the backbone is not frozen: its parameters "
                           "still require grad"), (not all(p.requires_grad for p in head.parameters()),
                           "the head is frozen too: freeze the backbone before you replace the head"),
                          (not head_ids <= in_opt, "the optimizer does not get the new head's parameters"),
                          (bool(in_opt - head_ids), "the optimizer gets parameters that are not the new head's")]:
            if bad:
                _fail(hint)
        g, w0 = torch.Generator().manual_seed(n), head.weight.detach().clone()
        for _ in range(3):
            loss = run_student(transfer_step, model, optimizer, torch.randn(4, 3, 32, 32, generator=g),
                               torch.randint(0, n, (4,), generator=g), what="transfer_step")
            expect_tensor(torch.tensor(loss) if type(loss) in (int, float) else loss, "transfer_step's loss")
        moved = [k for k, v in before.items() if not torch.equal(v, model.state_dict()[k])]
        if any("running_" in k or "num_batches" in k for k in moved):
            _fail("batch norm's running statistics still update: the model is in training mode in the step; "
                  "put the frozen backbone (or the whole model) in eval mode: only the head trains")
        if moved or torch.equal(w0, head.weight.detach()):
            _fail(f"after 3 steps {'the backbone changed' if moved else 'the head did not change'}")
    passed("transfer: backbone and batch-norm statistics frozen, a new trainable head, the optimizer over it")

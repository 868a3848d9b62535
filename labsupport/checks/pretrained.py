"""Checks for notebook 08 (pretrained models): a torchvision model made ready for
transfer learning (frozen backbone, new head, an optimizer over the head only).

Example:
    >>> import torch, labsupport as lab
    >>> def prepare_for_transfer(model, num_classes):
    ...     for p in model.parameters():
    ...         p.requires_grad_(False)
    ...     model.fc = torch.nn.Linear(model.fc.in_features, num_classes)
    ...     return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)
    >>> lab.check_transfer_head(prepare_for_transfer)
    PASS  transfer head: backbone frozen (60 tensors), new Linear(512 -> N) head trainable, output (2, N), optimizer gets only the head's 2 tensors (N = 3 and 7)
"""
from __future__ import annotations

import copy
import functools
from typing import Callable

import torch
from torch import nn

from .core import CheckError, call_student, describe, passed

__all__ = ["check_transfer_head"]

WHAT = "your prepare_for_transfer(model, num_classes)"


@functools.lru_cache(maxsize=1)
def _base_resnet18() -> nn.Module:
    from torchvision.models import resnet18

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return resnet18(weights=None)


def _fresh_resnet18() -> nn.Module:
    """An untrained torchvision ResNet-18 standing in for a pretrained one: a copy of
    one seeded model (building a ResNet initialises 11M weights; copying is cheaper)."""
    return copy.deepcopy(_base_resnet18())


def _short(names: list[str], n: int = 2) -> str:
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def check_transfer_head(prepare: Callable, *, classes: tuple[int, ...] = (3, 7)) -> None:
    """Check ``prepare(model, num_classes) -> (model, optimizer)`` on a torchvision ResNet-18.

    For each ``num_classes`` the function gets a fresh ResNet-18 and must return it
    with every backbone parameter frozen (``requires_grad=False``), ``fc`` replaced
    by a trainable ``nn.Linear(512, num_classes)``, and an optimizer that holds the
    trainable parameters and nothing else. The check runs the model on a small
    batch for the output shape and compares parameter sets by identity. Names the
    usual mistakes: nothing frozen, head frozen too (frozen after replacing it),
    ``fc`` not replaced, a new model built instead of adapting the given one, and
    an optimizer made from ``model.parameters()`` or from the old head.

    Example (the solution of notebook 08's exercise):
        >>> def prepare(model, num_classes):
        ...     for p in model.parameters():
        ...         p.requires_grad_(False)
        ...     model.fc = torch.nn.Linear(model.fc.in_features, num_classes)
        ...     return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)
        >>> check_transfer_head(prepare)                                  # doctest: +ELLIPSIS
        PASS  ...
    """
    __tracebackhide__ = True
    n_frozen = 0
    for case, num_classes in enumerate(classes):
        model = _fresh_resnet18()
        old_fc = model.fc
        conv1 = model.conv1.weight.detach().clone()
        got = call_student(prepare, model, num_classes, what=WHAT)
        if isinstance(got, nn.Module):
            raise CheckError("prepare_for_transfer returned only the model; expected a pair "
                             "(model, optimizer): end with `return model, optimizer`.")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckError(f"prepare_for_transfer must return (model, optimizer), got {describe(got)}")
        new_model, optimizer = got
        if not isinstance(new_model, nn.Module):
            raise CheckError(f"the first item returned must be the model (an nn.Module), got "
                             f"{describe(new_model)}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise CheckError(f"the second item returned must be a torch.optim optimizer, got "
                             f"{describe(optimizer)}. Build one, e.g. torch.optim.SGD(params, lr=0.01).")
        if not hasattr(new_model, "conv1") or not hasattr(new_model, "fc"):
            raise CheckError(f"the model returned is a {type(new_model).__name__} without the "
                             f"ResNet's conv1/fc: return the model you were given, adapted.")
        if new_model.conv1.weight.shape != conv1.shape or not torch.equal(
                new_model.conv1.weight.detach().cpu(), conv1):
            raise CheckError("the backbone's weights are not the ones given: adapt the model passed "
                             "in (its pretrained weights are the point), do not build a new one.")
        head = new_model.fc
        if head is old_fc:
            raise CheckError(f"model.fc is still the original {old_fc.out_features}-class layer: "
                             f"replace it, model.fc = nn.Linear(model.fc.in_features, num_classes).")
        if not isinstance(head, nn.Linear):
            raise CheckError(f"model.fc is a {type(head).__name__}; expected one nn.Linear "
                             f"(in_features {old_fc.in_features}, out_features {num_classes}).")
        if head.in_features != old_fc.in_features:
            raise CheckError(f"the new head takes {head.in_features} inputs but the backbone gives "
                             f"{old_fc.in_features}: use model.fc.in_features, not a guess.")
        if head.out_features != num_classes:
            raise CheckError(f"the new head has {head.out_features} outputs; expected num_classes = "
                             f"{num_classes}. Did you hard-code the number of classes?")
        head_ids = {id(p) for p in head.parameters()}
        named = list(new_model.named_parameters())
        backbone_trainable = [n for n, p in named if id(p) not in head_ids and p.requires_grad]
        if backbone_trainable:
            frac = f"{len(backbone_trainable)} of {len(named) - len(head_ids)}"
            raise CheckError(f"{frac} backbone parameter tensors still require grad "
                             f"({_short(backbone_trainable)}): freeze them with "
                             f"p.requires_grad_(False) for every parameter before adding the new head.")
        head_frozen = [n for n, p in named if id(p) in head_ids and not p.requires_grad]
        if head_frozen:
            raise CheckError(f"the new head is frozen too ({_short(head_frozen)}): freeze the backbone "
                             f"first, then replace fc; a new nn.Linear requires grad by default.")
        x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(10 + case))
        device = next(new_model.parameters()).device
        was_training = new_model.training
        new_model.eval()
        with torch.no_grad():
            out = call_student(new_model, x.to(device), what="the returned model")
        new_model.train(was_training)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
            raise CheckError(f"the model's output for a batch of 2 images is {describe(out)}; "
                             f"expected shape (2, {num_classes}).")
        in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
        opt_ids = {id(p) for p in in_optimizer}
        trainable_ids = {id(p) for _, p in named if p.requires_grad}
        frozen_in_opt = [n for n, p in named if id(p) in opt_ids and not p.requires_grad]
        if frozen_in_opt:
            raise CheckError(f"the optimizer receives {len(frozen_in_opt)} frozen parameter tensors "
                             f"({_short(frozen_in_opt)}): give it only the trainable ones, "
                             f"model.fc.parameters() or (p for p in model.parameters() if p.requires_grad).")
        old_ids = {id(p) for p in old_fc.parameters()}
        if opt_ids & old_ids:
            raise CheckError("the optimizer holds the OLD head's parameters: create the optimizer "
                             "after replacing model.fc, from the new layer's parameters.")
        missing = [n for n, p in named if id(p) in trainable_ids and id(p) not in opt_ids]
        if missing:
            raise CheckError(f"the optimizer does not receive {_short(missing)}: it must hold every "
                             f"trainable parameter, or the new head never learns.")
        foreign = opt_ids - trainable_ids
        if foreign:
            raise CheckError(f"the optimizer holds {len(foreign)} tensor(s) that are not parameters "
                             f"of the returned model.")
        n_frozen = len(named) - len(head_ids)
    passed(f"transfer head: backbone frozen ({n_frozen} tensors), new Linear(512 -> N) head "
           f"trainable, output (2, N), optimizer gets only the head's 2 tensors "
           f"(N = {' and '.join(str(c) for c in classes)})")

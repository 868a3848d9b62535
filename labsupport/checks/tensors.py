"""Checks for notebook 01 (tensors): the two-layer forward pass, the L2 loss,
and a broadcasting exercise.

Example:
    >>> import torch, labsupport as lab
    >>> lab.check_l2_loss(lambda y_pred, y: (y_pred - y).pow(2).sum())
    PASS  l2_loss: matches torch's sum-reduced MSE on 2 test cases
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .core import CheckError, call_student, check_close, expect_tensor, passed, rel_error

__all__ = ["check_two_layer_forward", "check_l2_loss", "check_pairwise_sq_dists"]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and rel_error(a, b) < tol


def _cases(seed: int, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def check_two_layer_forward(forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Check ``forward(x, w1, w2)`` computes ``relu(x @ w1) @ w2`` (no biases).

    The reference is built with ``torch.nn.functional.linear`` and ``relu`` on
    fresh non-square inputs, so a transposed weight shows up as a shape error.

    Example:
        >>> check_two_layer_forward(lambda x, w1, w2: x.mm(w1).clamp(min=0).mm(w2))
        PASS  forward: y_pred = relu(x @ w1) @ w2 on 2 test cases (shapes and values)
    """
    __tracebackhide__ = True
    for case, (N, D_in, H, D_out) in enumerate([(6, 5, 4, 3), (64, 1000, 100, 10)]):
        x, w1, w2 = _cases(case, (N, D_in), (D_in, H), (H, D_out))
        got = call_student(forward, x, w1, w2, what="your forward(x, w1, w2)")
        expected = F.linear(F.relu(F.linear(x, w1.t())), w2.t())
        expect_tensor(got, "y_pred", shape=(N, D_out))
        if not _close(got, expected):
            if _close(got, x @ w1 @ w2):
                raise CheckError("y_pred equals x @ w1 @ w2: the ReLU is missing. Apply "
                                 "clamp(min=0) (or torch.relu) to the hidden layer h = x @ w1.")
            if _close(got, F.relu(x @ w1 @ w2)):
                raise CheckError("y_pred equals relu(x @ w1 @ w2): the ReLU belongs on the hidden "
                                 "layer h = x @ w1, not on the output.")
            check_close("y_pred", got, expected, rtol=1e-4, atol=1e-5)
    passed("forward: y_pred = relu(x @ w1) @ w2 on 2 test cases (shapes and values)")


def check_l2_loss(l2_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Check ``l2_loss(y_pred, y)`` returns the scalar ``sum((y_pred - y)**2)``.

    Compared with ``F.mse_loss(..., reduction="sum")``; recognises the mean
    instead of the sum, a missing square, a square root (the norm) and a
    missing reduction.

    Example:
        >>> check_l2_loss(lambda y_pred, y: (y_pred - y).pow(2).sum())
        PASS  l2_loss: matches torch's sum-reduced MSE on 2 test cases
    """
    __tracebackhide__ = True
    for case, shape in enumerate([(5, 3), (64, 10)]):
        y_pred, y = _cases(10 + case, shape, shape)
        got = call_student(l2_loss, y_pred, y, what="your l2_loss(y_pred, y)")
        expected = F.mse_loss(y_pred, y, reduction="sum")
        if isinstance(got, torch.Tensor) and got.shape == y.shape:
            raise CheckError(f"l2_loss returned a tensor of shape {tuple(got.shape)}; expected a "
                             f"scalar (shape ()). Did you forget to .sum() the squared errors?")
        got = expect_tensor(got, "loss", shape=())
        if _close(got, expected):
            continue
        diff = y_pred - y
        known = [
            (F.mse_loss(y_pred, y), "you took the mean; the lecture's L2 loss is the sum "
                                    "(mean = sum / number of elements)"),
            (diff.sum(), "the squares are missing: square (y_pred - y) before summing"),
            (diff.abs().sum(), "that is the L1 loss (sum of |y_pred - y|): square instead"),
            (diff.norm(), "that is the norm sqrt(sum(...)): drop the square root"),
            ((y_pred ** 2 - y ** 2).sum(), "you squared each term separately: square the difference"),
        ]
        for value, why in known:
            if _close(got, value):
                raise CheckError(f"loss is {float(got):.4g}; expected {float(expected):.4g}: {why}.")
        check_close("loss", got, expected, rtol=1e-4)
    passed("l2_loss: matches torch's sum-reduced MSE on 2 test cases")


def check_pairwise_sq_dists(pairwise_sq_dists: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Check ``pairwise_sq_dists(a, b)`` gives the (N, M) matrix of squared
    Euclidean distances between the rows of ``a`` (N, D) and ``b`` (M, D).

    The reference is ``torch.cdist(a, b) ** 2``; recognises distances that are
    not squared, a transposed result and a missing broadcast.

    Example:
        >>> check_pairwise_sq_dists(lambda a, b: ((a[:, None] - b[None]) ** 2).sum(-1))
        PASS  pairwise_sq_dists: matches torch.cdist(a, b)**2 on 2 test cases
    """
    __tracebackhide__ = True
    for case, (N, M, D) in enumerate([(4, 3, 2), (7, 5, 6)]):
        a, b = _cases(20 + case, (N, D), (M, D))
        got = call_student(pairwise_sq_dists, a, b, what="your pairwise_sq_dists(a, b)")
        expected = torch.cdist(a.double(), b.double()).pow(2).float()
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (M, N):
            raise CheckError(f"result has shape {(M, N)}; expected {(N, M)} (rows of a, columns "
                             f"of b). Swap the roles: a[:, None, :] - b[None, :, :].")
        if isinstance(got, torch.Tensor) and got.dim() == 1:
            raise CheckError(f"result has shape {tuple(got.shape)}; expected {(N, M)}. Without "
                             f"broadcasting you compare row i with row i only: insert axes with "
                             f"a[:, None, :] and b[None, :, :].")
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (N, M, D):
            raise CheckError(f"result has shape {(N, M, D)}; expected {(N, M)}: sum the squared "
                             f"differences over the last dimension.")
        got = expect_tensor(got, "distances", shape=(N, M))
        if not _close(got, expected, 1e-4) and _close(got, expected.sqrt(), 1e-4):
            raise CheckError("these are the distances, not their squares: drop the square root.")
        check_close("distances", got, expected, rtol=1e-4, atol=1e-5, quiet=True)
    passed("pairwise_sq_dists: matches torch.cdist(a, b)**2 on 2 test cases")

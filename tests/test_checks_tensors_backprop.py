"""Checks of notebooks 01 and 02: the reference passes, each known mistake is named."""
import numpy as np
import pytest
import torch

import labsupport as lab


def forward(x, w1, w2):
    return x.mm(w1).clamp(min=0).mm(w2)


def test_forward_check(capsys):
    lab.check_two_layer_forward(forward)
    assert capsys.readouterr().out.startswith("PASS  forward")


@pytest.mark.parametrize("wrong, fragment", [
    (lambda x, w1, w2: x.mm(w1).mm(w2), "ReLU is missing"),
    (lambda x, w1, w2: x.mm(w1).mm(w2).clamp(min=0), "belongs on the hidden layer"),
    (lambda x, w1, w2: x.mm(w1).clamp(min=0).mm(w2) * 1.5, "does not match"),
    (lambda x, w1, w2: None, "got None"),
    (lambda x, w1, w2: forward(x, w1, w2).numpy(), "torch.from_numpy"),
    (lambda x, w1, w2: x.mm(w2), "raised RuntimeError"),
])
def test_forward_check_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_two_layer_forward(wrong)


def test_l2_loss_check(capsys):
    lab.check_l2_loss(lambda y_pred, y: (y_pred - y).pow(2).sum())
    assert "PASS  l2_loss" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, fragment", [
    (lambda p, y: (p - y).pow(2).mean(), "you took the mean"),
    (lambda p, y: (p - y).sum(), "squares are missing"),
    (lambda p, y: (p - y).abs().sum(), "L1 loss"),
    (lambda p, y: (p - y).norm(), "drop the square root"),
    (lambda p, y: (p - y).pow(2), "forget to .sum()"),
    (lambda p, y: (p - y).pow(2).sum().item(), "drop .item()"),
    (lambda p, y: torch.tensor(float("nan")), "NaN"),
])
def test_l2_loss_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_l2_loss(wrong)


def sq_dists(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def test_pairwise_check(capsys):
    lab.check_pairwise_sq_dists(sq_dists)
    assert "PASS  pairwise_sq_dists" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, fragment", [
    (lambda a, b: sq_dists(a, b).sqrt(), "not their squares"),
    (lambda a, b: sq_dists(a, b).t(), "Swap the roles"),
    (lambda a, b: ((a[:, None, :] - b[None, :, :]) ** 2), "sum the squared"),
    (lambda a, b: ((a[: len(b)] - b) ** 2).sum(-1), "Without broadcasting"),
    (lambda a, b: [[0.0]], "got list"),
])
def test_pairwise_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_pairwise_sq_dists(wrong)


def backward(x, y, w1, w2):
    h = x.mm(w1)
    h_relu = h.clamp(min=0)
    grad_y_pred = 2.0 * (h_relu.mm(w2) - y)
    grad_w2 = h_relu.t().mm(grad_y_pred)
    grad_h = grad_y_pred.mm(w2.t())
    grad_h[h < 0] = 0
    return x.t().mm(grad_h), grad_w2


def test_manual_backward_reference_passes(capsys):
    lab.check_manual_backward(backward)
    assert "PASS  manual backward: both gradients match autograd" in capsys.readouterr().out


def _no_mask(x, y, w1, w2):
    h_relu = x.mm(w1).clamp(min=0)
    g = 2.0 * (h_relu.mm(w2) - y)
    return x.t().mm(g.mm(w2.t())), h_relu.t().mm(g)


def _no_two(x, y, w1, w2):
    g1, g2 = backward(x, y, w1, w2)
    return g1 / 2, g2 / 2


def _transposed(x, y, w1, w2):
    g1, g2 = backward(x, y, w1, w2)
    return g1.t(), g2


def _sign(x, y, w1, w2):
    g1, g2 = backward(x, y, w1, w2)
    return -g1, -g2


def _float32(x, y, w1, w2):
    g1, g2 = backward(x, y, w1, w2)
    return g1.float(), g2.float()


def _stub(x, y, w1, w2):
    raise NotImplementedError("Exercise: write the backward pass")


@pytest.mark.parametrize("wrong, fragment", [
    (_no_mask, "did you apply the ReLU mask"),
    (_no_two, "Did you drop the factor 2"),
    (_transposed, r"grad_w1 has shape \(5, 7\); expected \(7, 5\)\. Did you forget a transpose"),
    (_sign, "wrong sign"),
    (_float32, "dtype torch.float32; expected torch.float64"),
    (_stub, "not written yet"),
    (lambda x, y, w1, w2: backward(x, y, w1, w2)[0], "must return \\(grad_w1, grad_w2\\)"),
    (lambda x, y, w1, w2: (None, None), "got None"),
])
def test_manual_backward_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_manual_backward(wrong)


def test_two_layer_grads_matches_hand_derivation():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64)
    w1, w2 = torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(5, 2, generator=g, dtype=torch.float64)
    for ref, mine in zip(lab.two_layer_grads(x, y, w1, w2), backward(x, y, w1, w2)):
        assert torch.allclose(ref, mine)

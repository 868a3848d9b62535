"""Checks of notebooks 01 and 02: the reference passes, each listed mistake is named (tests generated
from the specs where the mistake is a value), and bad answers of every kind give a CheckError."""
import numpy as np
import pytest
import torch

import labsupport as lab
import labsupport.checks.core as core
from labsupport.checks import nb02_manual_backprop as backprop
from labsupport.checks.nb01_tensors import SPECS

SOLVED = {
    "pairwise_sq_dists": lambda a, b: ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1),
    "correct_class_scores": lambda s, i: s.gather(1, i[:, None])[:, 0],
    "keep_above_row_mean": lambda x: x * (x >= x.mean(1, keepdim=True)),
    "channels_first_rows": lambda im: im.movedim(3, 1).flatten(1),
    "per_sample_matmul": lambda x, w: torch.einsum("bd,bdk->bk", x, w),
}
VALUE_MISTAKES = [(name, k) for name, spec in SPECS.items()
                  for k, (wrong, _) in enumerate(spec["mistakes"](*spec["cases"]()[0]))
                  if isinstance(wrong, torch.Tensor)]


@pytest.mark.parametrize("name", SPECS)
def test_tensor_reference_passes(name, capsys):
    getattr(lab, f"check_{name}")(SOLVED[name])
    assert capsys.readouterr().out.startswith(f"PASS  {name}")


@pytest.mark.parametrize("name, k", VALUE_MISTAKES)
def test_tensor_value_mistake_is_named(name, k):
    spec = SPECS[name]
    message = spec["mistakes"](*spec["cases"]()[0])[k][1]
    with pytest.raises(lab.CheckError, match="Likely mistake") as info:
        getattr(lab, f"check_{name}")(lambda *args: spec["mistakes"](*args)[k][0])
    assert message in str(info.value)


@pytest.mark.parametrize("name, wrong, fragment", [
    ("pairwise_sq_dists", lambda a, b: (a[:, None, :] - b[None, :, :]) ** 2, "sum the squared differences"),
    ("pairwise_sq_dists", lambda a, b: ((a[: len(b)] - b[: len(a)]) ** 2).sum(-1), "row i met only row i"),
    ("keep_above_row_mean", lambda x: x[x >= x.mean(1, keepdim=True)], "gathers the chosen elements"),
    ("keep_above_row_mean", lambda x: x.masked_fill_(x < x.mean(1, keepdim=True), 0), "clone first"),
    ("keep_above_row_mean", lambda x: x * (x >= x.mean(1)), "keepdim forgotten"),
    ("channels_first_rows", lambda im: im.permute(0, 3, 1, 2), "flatten each image"),
    ("channels_first_rows", lambda im: im.permute(0, 3, 1, 2).view(len(im), -1), "use reshape"),
])
def test_tensor_predicate_and_code_mistakes(name, wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        getattr(lab, f"check_{name}")(wrong)


@pytest.mark.parametrize("name", SPECS)
def test_tensor_wrong_dtype_is_refused(name):
    with pytest.raises(lab.CheckError, match="dtype"):
        getattr(lab, f"check_{name}")(lambda *args: SOLVED[name](*args).float())


def test_storage_prediction(capsys):
    lab.check_storage_prediction("Slice ")
    assert "'slice' is right" in capsys.readouterr().out
    for wrong in ("both", "mask", "neither"):
        with pytest.raises(lab.CheckError, match="a boolean mask gathers"):
            lab.check_storage_prediction(wrong)
    for junk in (None, "view", 3):
        with pytest.raises(lab.CheckError):
            lab.check_storage_prediction(junk)


# --------------------------------------------------------------------------- notebook 02

def linear_forward(x, w):
    return x @ w, (x, w)


def linear_backward(dout, cache):
    return dout @ cache[1].t(), cache[0].t() @ dout


def relu_forward(h):
    return h.clamp(min=0), h


def relu_backward(dout, h):
    return dout * (h > 0)


def loss_and_grads(x, y, w1, w2):
    h, c1 = linear_forward(x, w1)
    h_relu, c2 = relu_forward(h)
    y_pred, c3 = linear_forward(h_relu, w2)
    dh_relu, g2 = linear_backward(2 * (y_pred - y), c3)
    return ((y_pred - y) ** 2).sum(), linear_backward(relu_backward(dh_relu, c2), c1)[1], g2


def numeric_grad(f, w, eps=1e-6, one_sided=False):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        e = e.view(w.shape)
        grad.view(-1)[i] = (f(w + e) - f(w)) / eps if one_sided else (f(w + e) - f(w - e)) / (2 * eps)
    return grad


def test_backprop_references_pass(capsys):
    lab.check_linear_layer(linear_forward, linear_backward)
    lab.check_relu_layer(relu_forward, relu_backward)
    lab.check_loss_and_grads(loss_and_grads)
    lab.check_numeric_grad(numeric_grad)
    lab.check_numeric_grad(lambda f, w: numeric_grad(f, w, 1e-5))
    out = capsys.readouterr().out
    assert out.count("PASS  ") == 5 and "max rel. error < 1e-08" in out
    with pytest.raises(lab.CheckError, match="dtype"):
        lab.check_loss_and_grads(lambda *args: tuple(t.float() for t in loss_and_grads(*args)))


@pytest.mark.parametrize("backward, fragment", [
    (lambda dout, c: (dout @ c[1], c[0].t() @ dout), "missing transpose: dx"),
    (lambda dout, c: (dout @ c[1].t(), dout.t() @ c[0]), "dw is transposed"),
    (lambda dout, c: (dout @ c[1].t(), c[0] @ dout), "a transpose"),        # raised inside the student's code
])
def test_linear_mistakes(backward, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_linear_layer(linear_forward, backward)


@pytest.mark.parametrize("forward, backward, fragment", [
    (relu_forward, lambda dout, h: dout, "ReLU mask missing"),
    (relu_forward, lambda dout, h: dout * (h < 0), "ReLU mask inverted"),
    (relu_forward, lambda dout, h: dout * h.clamp(min=0), "multiplied by the ReLU's output"),
    (lambda h: (h.clamp_(min=0), h), relu_backward, "keep h intact"),
    (lambda h: h.clamp(min=0), relu_backward, r"must return \(out, cache\)"),
])
def test_relu_mistakes(forward, backward, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_relu_layer(forward, backward)


TWO_LAYER = backprop._two_layer_mistakes(*backprop._randn(14, (8, 7), (8, 3), (7, 5), (5, 3)))

def test_two_layer_transposed_gradient_gets_the_engine_hint():
    with pytest.raises(lab.CheckError, match="a transpose is missing"):
        lab.check_loss_and_grads(lambda *args: (lambda loss, g1, g2: (loss, g1.t(), g2))(*loss_and_grads(*args)))


def test_unwritten_layer_functions_are_named():
    with pytest.raises(lab.CheckError, match="linear_forward and linear_backward are not written yet"):
        lab.check_linear_layer(None, None)


@pytest.mark.parametrize("k", range(len(TWO_LAYER)))
def test_two_layer_mistake_is_named(k):
    def wrong(x, y, w1, w2):
        good = loss_and_grads(x, y, w1, w2)
        return tuple(g if m is None else m for g, m in zip(good, backprop._two_layer_mistakes(x, y, w1, w2)[k][0]))
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(wrong)
    assert TWO_LAYER[k][1] in str(info.value)


@pytest.mark.parametrize("wrong, fragment", [
    (lambda f, w: numeric_grad(f, w, one_sided=True), "one-sided difference"),
    (lambda f, w: numeric_grad(f, w, 1e-2), "eps too large"),
    (lambda f, w: numeric_grad(f, w, 1e-10), "eps too small"),
    (lambda f, w: numeric_grad(f, w).float(), "float32"),
    (lambda f, w: numeric_grad(f, w.float()).double(), "ran in float32"),
    (lambda f, w: numeric_grad(f, w.add_(1e-6)), "restore w"),
])
def test_gradient_checker_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_numeric_grad(wrong)


def test_lr_prediction(capsys):
    lab.check_lr_prediction("diverges")
    assert "'diverges' is right" in capsys.readouterr().out
    for wrong in ("falls faster", "falls slower"):
        with pytest.raises(lab.CheckError, match="overshoots"):
            lab.check_lr_prediction(wrong)
    for junk in (None, 1e-4, "faster"):
        with pytest.raises(lab.CheckError):
            lab.check_lr_prediction(junk)


def _forever(*args):
    while True:
        pass


def _raises(*args):
    raise ValueError("boom")


BAD_RESULTS = [None, [[1.0]], np.zeros((2, 2)), torch.zeros(3, 3, 3), torch.full((4, 3), float("nan")),
               torch.zeros(4, 3, dtype=torch.int64)]


@pytest.mark.parametrize("check, arity", [(lab.check_pairwise_sq_dists, 1), (lab.check_correct_class_scores, 1),
                                          (lab.check_keep_above_row_mean, 1), (lab.check_channels_first_rows, 1),
                                          (lab.check_per_sample_matmul, 1), (lab.check_loss_and_grads, 1),
                                          (lab.check_numeric_grad, 1), (lab.check_linear_layer, 2),
                                          (lab.check_relu_layer, 2)])
def test_bad_answers_give_a_check_error(check, arity, monkeypatch, capsys):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)  # how long _forever spins, in each of 9 checks
    funcs = [lambda *a, r=r: r for r in BAD_RESULTS] + [lambda *a, r=r: (r, r) for r in BAD_RESULTS]
    funcs += [lambda *a, r=r: (r, r, r) for r in BAD_RESULTS] + [_raises, _forever, None, "f", 3]
    for fn in funcs:
        with pytest.raises(lab.CheckError):
            check(*([fn] * arity))
    assert "PASS" not in capsys.readouterr().out


def test_two_layer_grads_is_autograd_and_matches_the_hand_derivation():
    x, y, w1, w2 = backprop._randn(0, (4, 3), (4, 2), (3, 5), (5, 2))
    for ref, mine in zip(backprop.two_layer_grads(x, y, w1, w2), loss_and_grads(x, y, w1, w2)[1:]):
        assert torch.allclose(ref, mine)


@pytest.mark.parametrize("name", SPECS)
def test_value_mistakes_differ_from_the_reference_and_each_other(name):
    case = SPECS[name]["cases"]()[0]
    values = [SPECS[name]["reference"](*case)] + [w for w, _ in SPECS[name]["mistakes"](*case)
                                                  if isinstance(w, torch.Tensor)]
    for i, a in enumerate(values):
        for b in values[:i]:
            assert a.shape != b.shape or lab.checks.core.rel_error(a, b) > 1e-3

"""Checks of notebook 02: correct variants pass (the lecture's in-place ReLU backward, a w restored 1 ulp off),
every listed mistake is named, the rule "no autograd" is checked by behaviour, and bad answers get one sentence."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labsupport as lab
from labsupport.checks import core, running
from labsupport.checks import nb02_manual_backprop as nb02


def linear_forward(x, w):
    return x @ w, (x, w)


def linear_backward(dout, cache):
    x, w = cache
    return dout @ w.t(), x.t() @ dout


def relu_forward(h):
    return h.clamp(min=0), h


def relu_backward(dout, h):
    return dout * (h > 0)


def lecture_relu_backward(dout, h):
    """The lecture's own line: it writes into dout."""
    dout[h < 0] = 0
    return dout


def loss_and_grads(x, y, w1, w2):
    h, c1 = linear_forward(x, w1)
    h_relu, c2 = relu_forward(h)
    y_pred, c3 = linear_forward(h_relu, w2)
    dh_relu, g2 = linear_backward(2 * (y_pred - y), c3)
    return ((y_pred - y) ** 2).sum(), linear_backward(relu_backward(dh_relu, c2), c1)[1], g2


def numeric_grad(f, w, eps=1e-6, one_sided=False, divisor=2.0):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        e = e.view(w.shape)
        if one_sided:
            grad.view(-1)[i] = (f(w + e) - f(w)) / eps
        else:
            grad.view(-1)[i] = (f(w + e) - f(w - e)) / (divisor * eps)
    return grad


def numeric_grad_restoring(f, w, eps=1e-6):
    """+eps, -2eps, +eps on w itself: w comes back 1 ulp off, which the prompt allows."""
    grad = torch.zeros_like(w)
    flat = w.view(-1)
    for i in range(w.numel()):
        flat[i] += eps
        plus = f(w)
        flat[i] -= 2 * eps
        minus = f(w)
        flat[i] += eps
        grad.view(-1)[i] = (plus - minus) / (2 * eps)
    return grad


def numeric_grad_scaffold(f, w, eps=None):
    """The scaffold's signature, with eps=None handled."""
    eps = 1e-6 if eps is None else eps
    return numeric_grad(f, w, eps)


# --------------------------------------------------------------------------- correct answers


def test_references_pass(capsys):
    lab.check_linear_layer(linear_forward, linear_backward)
    lab.check_relu_layer(relu_forward, relu_backward)
    lab.check_loss_and_grads(loss_and_grads)
    lab.check_numeric_grad(numeric_grad)
    out = capsys.readouterr().out
    assert out.count("PASS  ") == 4 and "max rel. error < 1e-08" in out


ZERO_CONVENTIONS = {
    "0 at h = 0 (autograd's)": lambda dout, h: dout * (h > 0),
    "dout at h = 0 (the lecture's)": lambda dout, h: dout * (h >= 0),
    "half at h = 0": lambda dout, h: dout * ((h > 0) + 0.5 * (h == 0)),
}


@pytest.mark.parametrize("name", list(ZERO_CONVENTIONS))
def test_any_subgradient_at_zero_passes(name, capsys):
    lab.check_relu_layer(relu_forward, lambda dout, cache: ZERO_CONVENTIONS[name](dout, cache))
    assert "PASS  relu layer" in capsys.readouterr().out


def test_a_backward_that_divides_by_h_is_named_at_zero():
    """02.2: dout * relu(h) / h gave NaN at h = 0 and passed (random inputs are never exactly 0)."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(relu_forward, lambda dout, cache: dout * torch.relu(cache) / cache)
    assert info.value.mistake == "NaN or inf where h is 0"


def test_a_slope_outside_zero_and_one_at_zero_is_refused():
    with pytest.raises(lab.CheckError, match="not between 0 and dout"):
        lab.check_relu_layer(relu_forward, lambda dout, cache: dout * ((cache > 0) + 2.0 * (cache == 0)))


def test_a_training_step_inside_loss_and_grads_is_named():
    """02.3: an update of w1 and w2 inside loss_and_grads passed (the check gave it copies, never looked back)."""

    def stepping(x, y, w1, w2):
        loss, grad_w1, grad_w2 = loss_and_grads(x, y, w1, w2)
        w1 -= 1e-6 * grad_w1
        w2 -= 1e-6 * grad_w2
        return loss, grad_w1, grad_w2

    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(stepping)
    assert info.value.mistake == "weights changed inside"
    assert "changed the w1 it was given" in info.value.message


def test_data_written_into_by_loss_and_grads_is_named():
    """02.3: right loss and gradients, then y overwritten in place (y -= y_pred style), passed."""

    def overwriting_y(x, y, w1, w2):
        result = loss_and_grads(x, y, w1, w2)
        y.sub_(torch.relu(x @ w1) @ w2)
        return result

    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(overwriting_y)
    assert info.value.mistake == nb02.DATA_CHANGED.name
    assert "changed the y it was given" in info.value.message


def test_lecture_relu_backward_that_writes_into_dout_passes(capsys):
    """02.2: the lecture's `dout[h < 0] = 0` got "keep h intact"; the prompt does not forbid it."""
    lab.check_relu_layer(relu_forward, lecture_relu_backward)
    assert capsys.readouterr().out.startswith("PASS  relu layer")


def test_forward_in_place_with_a_cache_of_the_output_passes(capsys):
    def in_place_forward(h):
        h.clamp_(min=0)
        return h, h  # the cache holds max(h, 0), whose signs still tell where h > 0

    lab.check_relu_layer(in_place_forward, relu_backward)
    assert capsys.readouterr().out.startswith("PASS  relu layer")


@pytest.mark.parametrize(
    "variant",
    [
        lambda f, w: numeric_grad(f, w, 1e-5),
        lambda f, w: numeric_grad(f, w, 1e-4),
        numeric_grad_restoring,
        numeric_grad_scaffold,
    ],
    ids=["eps 1e-5", "eps 1e-4", "restored 1 ulp off", "eps=None default"],
)
def test_checker_variants_pass(variant, capsys):
    """02.4: restoring w by +eps, -2eps, +eps leaves it 1 ulp off, which was refused."""
    lab.check_numeric_grad(variant)
    assert capsys.readouterr().out.startswith("PASS  numeric_grad")


def test_restoring_really_leaves_w_an_ulp_off():
    w = nb02._checker_cases()[0][1].clone()
    before = w.clone()
    numeric_grad_restoring(nb02._smooth, w)
    assert not torch.equal(w, before) and float((w - before).abs().max()) < 1e-15


def test_backward_returning_a_list_passes(capsys):
    lab.check_linear_layer(linear_forward, lambda dout, c: [dout @ c[1].t(), c[0].t() @ dout])
    lab.check_relu_layer(lambda h: [h.relu(), h], relu_backward)
    assert capsys.readouterr().out.count("PASS") == 2


def _linear_forward_into_out(x, w):
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype)
    torch.mm(x, w, out=out)
    return out, (x.clone(), w.clone())


def _linear_backward_transposing_its_clones(dout, cache):
    x, w = cache
    x.t_()  # the cache holds clones: writing into them leaves the caller's x and w alone
    w.t_()
    return dout.mm(w), x.mm(dout)


def _linear_backward_into_zeros(dout, cache):
    x, w = cache
    dx = torch.zeros_like(x)
    dw = torch.zeros_like(w)
    dx.addmm_(dout, w.t())
    dw.addmm_(x.t(), dout)
    return dx, dw


def _relu_backward_on_a_clone(dout, h):
    dh = dout.clone()
    dh[h <= 0] = 0
    return dh


def _loss_and_grads_in_place_on_its_own_tensors(x, y, w1, w2):
    h = x @ w1
    h_relu = h.clone()
    h_relu.clamp_(min=0)
    y_pred = h_relu @ w2
    diff = y_pred - y
    loss = (diff * diff).sum()
    grad_y_pred = diff.mul_(2)
    grad_w2 = h_relu.t() @ grad_y_pred
    grad_h = grad_y_pred @ w2.t()
    grad_h[h <= 0] = 0
    grad_w1 = torch.empty_like(w1)
    torch.mm(x.t(), grad_h, out=grad_w1)
    return loss, grad_w1, grad_w2


def test_in_place_work_on_the_layers_own_tensors_passes(capsys):
    """Ninth audit: the inputs are now watched for in-place writes; writing into fresh tensors, clones, out=
    targets and read-only .t() views of the inputs is right and passes."""
    lab.check_linear_layer(_linear_forward_into_out, _linear_backward_transposing_its_clones)
    lab.check_linear_layer(lambda x, w: (x @ w, (x.t(), w.t())), lambda dout, c: (dout @ c[1], c[0] @ dout))
    lab.check_linear_layer(linear_forward, _linear_backward_into_zeros)
    lab.check_relu_layer(relu_forward, _relu_backward_on_a_clone)
    lab.check_relu_layer(relu_forward, lambda dout, h: torch.where(h > 0, dout, 0.0))
    lab.check_relu_layer(relu_forward, lambda dout, h: dout.masked_fill(h <= 0, 0))
    lab.check_loss_and_grads(_loss_and_grads_in_place_on_its_own_tensors)
    assert capsys.readouterr().out.count("PASS  ") == 7


@pytest.mark.parametrize("wrap", [tuple, list], ids=["one-tuple", "one-list"])
def test_relu_backward_returning_a_one_tuple_is_named(wrap):
    """02.2: `return (dh,)` passed, then broke 02.3; the prompt asks relu_backward for dh itself, a tensor."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(relu_forward, lambda dout, h: wrap([dout * (h > 0)]))
    assert info.value.mistake == nb02.GRADIENT_IN_A_TUPLE.name
    assert "inside a " + wrap.__name__ in info.value.message


# --------------------------------------------------------------------------- the rule: no autograd


def autograd_loss_and_grads(x, y, w1, w2):
    w1 = w1.clone().requires_grad_()
    w2 = w2.clone().requires_grad_()
    loss = ((x @ w1).clamp(min=0) @ w2 - y).pow(2).sum()
    loss.backward()
    return loss.detach(), w1.grad, w2.grad


def autograd_grad_loss_and_grads(x, y, w1, w2):
    with torch.enable_grad():
        w1 = w1.clone().requires_grad_()
        w2 = w2.clone().requires_grad_()
        loss = ((x @ w1).clamp(min=0) @ w2 - y).pow(2).sum()
        try:  # a student's own error handling cannot hide it
            grads = torch.autograd.grad(loss, (w1, w2))
        except Exception:
            grads = (w1, w2)
    return loss.detach(), *grads


def autograd_numeric_grad(f, w):
    w = w.clone().requires_grad_()
    f(w).backward()
    return w.grad


@pytest.mark.parametrize("fn", [autograd_loss_and_grads, autograd_grad_loss_and_grads])
def test_two_layer_with_autograd_is_refused(fn):
    """02.3: computed with autograd, against the exercise's rule, it passed."""
    with pytest.raises(lab.CheckError, match="called autograd") as info:
        lab.check_loss_and_grads(fn)
    assert info.value.mistake == "used autograd"
    assert "torch.no_grad()" in info.value.message


def test_autograd_call_swallowed_by_the_student_is_still_refused():
    def swallowing(x, y, w1, w2):
        try:
            autograd_loss_and_grads(x, y, w1, w2)
        except BaseException:  # noqa: B036 (a student's bare except)
            pass
        return loss_and_grads(x, y, w1, w2)

    with pytest.raises(lab.CheckError, match="called autograd"):
        lab.check_loss_and_grads(swallowing)


def test_checker_with_autograd_is_refused():
    with pytest.raises(lab.CheckError, match="called autograd"):
        lab.check_numeric_grad(autograd_numeric_grad)


def test_layer_backward_with_autograd_is_refused():
    def forward(x, w):
        w = w.clone().requires_grad_()
        out = x @ w
        return out, (x, w, out)

    def backward(dout, cache):
        x, w, out = cache
        return torch.autograd.grad(out, (x, w), dout)

    with pytest.raises(lab.CheckError, match="called autograd"):
        lab.check_linear_layer(forward, backward)


# --------------------------------------------------------------------------- mistakes, one test each


def _table(cases, compute):
    """compute(*case) for every case, worked out here: the student's code runs where autograd is refused."""
    return [(case, compute(*case)) for case in cases]


def _look_up(table, *args):
    for case, value in table:
        if all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(args, case)):
            return value
    raise LookupError("not one of the check's cases")


def _layer_student(reference, mistakes, cases, name):
    """A forward and backward that give the reference except where the named mistake says otherwise."""

    def wrong_or_right(*case):
        right = reference(*case)
        wrong = next((m.matches for m in mistakes(*case) if m.name == name), None)
        if wrong is None:
            return right
        return tuple(r if m is None else m for r, m in zip(right, wrong))

    table = _table(cases, wrong_or_right)

    def forward(*inputs):
        return _look_up(table, *inputs)[0], inputs

    def backward(dout, cache):
        grads = _look_up(table, *cache, dout)[1:]
        return grads if len(grads) > 1 else grads[0]

    return forward, backward


LAYERS = {
    "linear": (lab.check_linear_layer, nb02._linear_reference, nb02._linear_mistakes, nb02._linear_cases),
    "relu": (lab.check_relu_layer, nb02._relu_reference, nb02._relu_mistakes, nb02._relu_cases),
}


def _layer_mistake_names():
    names = []
    for layer, (_, _, mistakes, cases) in LAYERS.items():
        for case in cases():
            names += [
                (layer, m.name)
                for m in mistakes(*case)
                if (layer, m.name) not in names and m is not nb02.NOT_FINITE and not callable(m.matches)
            ]
    return names


@pytest.mark.parametrize("layer, name", _layer_mistake_names())
def test_layer_mistake_is_named(layer, name):
    check, reference, mistakes, cases = LAYERS[layer]
    forward, backward = _layer_student(reference, mistakes, cases(), name)
    with pytest.raises(lab.CheckError) as info:
        check(forward, backward)
    assert info.value.mistake == name


@pytest.mark.parametrize(
    "backward, fragment",
    [
        (lambda dout, c: (dout @ c[1], c[0].t() @ dout), "dx without transpose"),
        (lambda dout, c: (dout @ c[1].t(), dout.t() @ c[0]), "dw transposed"),
        (lambda dout, c: (c[1] @ dout.t(), c[0].t() @ dout), "dx transposed"),
        (lambda dout, c: (dout @ c[1].t(), c[0] @ dout), "raised RuntimeError"),  # raised inside the student's code
        # round 12 of the audit: a stray sign or factor 2, and dw summed to a vector, got a generic expected/got
        (lambda dout, c: (-(dout @ c[1].t()), c[0].t() @ dout), "dx negated"),
        (lambda dout, c: (dout @ c[1].t(), -(c[0].t() @ dout)), "dw negated"),
        (lambda dout, c: (2 * dout @ c[1].t(), c[0].t() @ dout), "dx doubled"),
        (lambda dout, c: (dout @ c[1].t(), 2 * c[0].t() @ dout), "dw doubled"),
        (lambda dout, c: (dout @ c[1].t(), (c[0].t() @ dout).sum(0)), "dw reduced to a vector"),
        # round 12, second pass: dx summed over the samples, as a bias's gradient, got a generic expected/got
        (lambda dout, c: ((dout @ c[1].t()).sum(0), c[0].t() @ dout), "dx reduced to a vector"),
        # sixteenth audit: the local derivative alone, dout replaced by ones, got a generic expected/got
        (lambda dout, c: (torch.ones_like(dout) @ c[1].t(), c[0].t() @ torch.ones_like(dout)), "dx without dout"),
        (lambda dout, c: (dout @ c[1].t(), c[0].t() @ torch.ones_like(dout)), "dw without dout"),
    ],
)
def test_linear_mistakes_as_students_write_them(backward, fragment):
    with pytest.raises(lab.CheckError) as info:
        lab.check_linear_layer(linear_forward, backward)
    assert info.value.mistake == fragment


def test_dx_as_dout_from_a_cache_without_w_is_named():
    """Twelfth audit (G): a cache of x alone, and dx = dout (it has x's shape when D == K), got expected/got only."""

    def forward_keeping_x(x, w):
        return x @ w, (x,)

    def backward_without_w(dout, cache):
        (x,) = cache
        return dout, x.t() @ dout

    with pytest.raises(lab.CheckError) as info:
        lab.check_linear_layer(forward_keeping_x, backward_without_w)
    assert info.value.mistake == "dx is dout"
    assert "dout @ w" not in f"{info.value.hint} {info.value.look}"


def _backward_transposing_x_in_place(dout, cache):
    x, w = cache
    x.t_()  # the caller's x: in 02.3 the data itself
    return dout @ w.t(), x @ dout


def test_linear_layer_that_leaves_x_transposed_is_named():
    """02.1: right dx and dw, with the caller's x left transposed by x.t_(), passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_linear_layer(linear_forward, _backward_transposing_x_in_place)
    assert info.value.mistake == nb02.INPUT_CHANGED.name
    assert "the x passed to the forward is changed" in info.value.message


def test_forward_that_overwrites_h_is_named_with_the_argument():
    """02.2: the wrong answer's cause is the forward's in-place write into h, named from the signature."""

    def forward(pre_activation):
        pre_activation[pre_activation < 0] = 0
        return pre_activation, pre_activation

    with pytest.raises(lab.CheckError, match="changed its argument pre_activation in place") as info:
        lab.check_relu_layer(forward, lecture_relu_backward)
    assert info.value.mistake == "forward changed its input"


TWO_LAYER_CASE = nb02._two_layer_cases()[0]
TWO_LAYER = [m.name for m in nb02._two_layer_mistakes(*TWO_LAYER_CASE)]


@pytest.mark.parametrize(
    "name", [n for n in TWO_LAYER if n not in ("loss not first", "loss not reduced", "NaN or inf made")]
)
def test_two_layer_mistake_is_named(name):
    def wrong_values(*case):
        good = loss_and_grads(*case)
        mistake = next(m for m in nb02._two_layer_mistakes(*case) if m.name == name)
        return tuple(g if m is None else m for g, m in zip(good, mistake.matches))

    table = _table(nb02._two_layer_cases(), wrong_values)
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(lambda *args: _look_up(table, *args))
    assert info.value.mistake == name


def two_layer_with(loss_of, grad_y_pred_of):
    """The solution's loss_and_grads with its loss, or the backward pass's start, written another way."""

    def student(x, y, w1, w2):
        h, c1 = linear_forward(x, w1)
        h_relu, c2 = relu_forward(h)
        y_pred, c3 = linear_forward(h_relu, w2)
        dh_relu, g2 = linear_backward(grad_y_pred_of(y_pred, y), c3)
        g1 = linear_backward(relu_backward(dh_relu, c2), c1)[1]
        return loss_of(y_pred, y), g1, g2

    return student


def _sum_loss(p, y):
    return ((p - y) ** 2).sum()


def _sum_gradient(p, y):
    return 2 * (p - y)


def _loss_last(*args):
    loss, g1, g2 = loss_and_grads(*args)
    return g1, g2, loss


@pytest.mark.parametrize(
    "student, name",
    [
        (_loss_last, "loss not first"),
        (two_layer_with(lambda p, y: (p - y).norm(), _sum_gradient), "square root of the loss"),
        (two_layer_with(_sum_loss, lambda p, y: 2 * (p - y) / y.numel()), "gradients of the mean"),
        (two_layer_with(_sum_loss, lambda p, y: (p - y) ** 2), "the loss for its derivative"),
    ],
)
def test_two_layer_mistakes_as_students_write_them(student, name):
    """02.3: these got a generic expected/got, and (g1, g2, loss) was told "loss not reduced"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(student)
    assert info.value.mistake == name


@pytest.mark.parametrize(
    "student, name",
    [
        (lambda *args: tuple(v / len(args[0]) for v in loss_and_grads(*args)), "averaged over the samples"),
        (two_layer_with(lambda p, y: (p.clamp(min=0) - y).pow(2).sum(), _sum_gradient), "ReLU on the prediction"),
    ],
)
def test_two_layer_round_two_mistakes_are_named(student, name):
    """02.3: a loss and gradients averaged over the N samples, and a ReLU on y_pred too, got a generic
    expected/got."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(student)
    assert info.value.mistake == name


@pytest.mark.parametrize(
    "student, name",
    [
        (two_layer_with(lambda p, y: (p - y).abs().sum(), lambda p, y: (p - y).sign()), "L1 loss"),
        (two_layer_with(lambda p, y: F.l1_loss(p, y, reduction="sum"), _sum_gradient), "L1 loss"),
        (two_layer_with(_sum_loss, lambda p, y: torch.sign(p - y)), "L1 loss's derivative"),
    ],
)
def test_two_layer_l1_loss_is_named(student, name):
    """Fourteenth audit: an L1 loss (or its derivative, the sign, as grad_y_pred) got a generic expected/got."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(student)
    assert info.value.mistake == name


def test_two_layer_loss_not_reduced_is_named():
    def wrong(x, y, w1, w2):
        loss, g1, g2 = loss_and_grads(x, y, w1, w2)
        return (torch.relu(x @ w1) @ w2 - y) ** 2, g1, g2

    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(wrong)
    assert info.value.mistake == "loss not reduced"


@pytest.mark.parametrize(
    "check, answer",
    [
        (lab.check_linear_layer, (linear_forward, lambda dout, c: (dout @ c[1].t() / 0, c[0].t() @ dout))),
        (lab.check_relu_layer, (lambda h: (h.clamp(min=0).log(), h), relu_backward)),
        (lab.check_loss_and_grads, (lambda *a: tuple(v / 0 for v in loss_and_grads(*a)),)),
        (lab.check_numeric_grad, (lambda f, w: numeric_grad(f, w) / 0,)),
    ],
)
def test_nan_or_inf_made_is_named(check, answer):
    with pytest.raises(lab.CheckError) as info:
        check(*answer)
    assert info.value.mistake == "NaN or inf made"
    assert "learning rate" not in str(info.value)


def test_two_layer_transposed_gradient_gets_the_engine_hint():
    def transposed(*args):
        loss, g1, g2 = loss_and_grads(*args)
        return loss, g1.t(), g2

    with pytest.raises(lab.CheckError, match="a transpose is missing"):
        lab.check_loss_and_grads(transposed)


def _float32_inside(f, w):
    return numeric_grad(f, w.float()).double()


def _every_entry_at_once(f, w, eps=1e-6):
    return torch.full_like(w, float((f(w + eps) - f(w - eps)) / (2 * eps)))


def _rows_only(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    for i in range(len(w)):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = (f(w + e.view(w.shape)) - f(w - e.view(w.shape))) / (2 * eps)
    return grad


def _whole_rows(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    for i in range(len(w)):
        e = torch.zeros_like(w)
        e[i] = eps  # on a 2-d w: the whole row i
        grad[i] = (f(w + e) - f(w - e)) / (2 * eps)
    return grad


def _precedence(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = (f(w + e.view(w.shape)) - f(w - e.view(w.shape))) / 2 * eps
    return grad


def _eps_none(f, w, eps=None):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = (f(w + e.view(w.shape)) - f(w - e.view(w.shape))) / (2 * eps)
    return grad


def _not_restored(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    flat = w.view(-1)
    for i in range(w.numel()):
        flat[i] += eps
        plus = f(w)
        flat[i] -= 2 * eps
        minus = f(w)
        grad.view(-1)[i] = (plus - minus) / (2 * eps)
    return grad


def _nudge_in_float32(f, w, eps=1e-5):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros(w.shape)  # float32: eps becomes 9.99999974738e-06
        e.view(-1)[i] = eps
        grad.view(-1)[i] = (f(w + e) - f(w - e)) / (2 * eps)
    return grad


def _nudges_kept_in_a_copy(f, w, eps=1e-6):
    """One copy of w, each entry nudged up and down and never put back: right on a separable f only."""
    grad = torch.zeros_like(w)
    moved = w.clone()
    flat = moved.view(-1)
    for i in range(w.numel()):
        flat[i] += eps
        plus = f(moved)
        flat[i] -= 2 * eps
        minus = f(moved)
        grad.view(-1)[i] = (plus - minus) / (2 * eps)
    return grad


def _return_inside_the_loop(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = (f(w + e.view(w.shape)) - f(w - e.view(w.shape))) / (2 * eps)
        return grad


def _for_matrices_only(f, w, eps=1e-6):
    """02.4, eighth round: a double loop over w.shape[0] and w.shape[1] got a bare IndexError on the vector case."""
    grad = torch.zeros_like(w)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            e = torch.zeros_like(w)
            e[i, j] = eps
            grad[i, j] = (f(w + e) - f(w - e)) / (2 * eps)
    return grad


def _division_first(f, w, eps=1e-6):
    """f(w + e) - f(w - e) / (2 * eps): the parentheses around the difference left out."""
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = f(w + e.view(w.shape)) - f(w - e.view(w.shape)) / (2 * eps)
    return grad


def _values_added(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    for i in range(w.numel()):
        e = torch.zeros_like(w).view(-1)
        e[i] = eps
        grad.view(-1)[i] = (f(w + e.view(w.shape)) + f(w - e.view(w.shape))) / (2 * eps)
    return grad


def _saved_value_is_a_view(f, w, eps=1e-6):
    grad = torch.zeros_like(w)
    flat = w.view(-1)
    for i in range(w.numel()):
        old = flat[i]  # a view of w's entry, not a copy: it follows every write into flat[i]
        flat[i] = old + eps
        plus = f(w)
        flat[i] = old - eps
        minus = f(w)
        flat[i] = old
        grad.view(-1)[i] = (plus - minus) / (2 * eps)
    return grad


CHECKER_MISTAKES = {
    "two axes assumed": _for_matrices_only,
    "nudge made in float32": _nudge_in_float32,
    "result not float64": lambda f, w: numeric_grad(f, w).float(),
    "f evaluated in float32": _float32_inside,
    "not shaped like w": lambda f, w: numeric_grad(f, w).reshape(-1),
    "several entries nudged at once": _every_entry_at_once,
    # round 5 of the audit: e[i] = eps on a 2-d w got the general "several entries" sentence
    "a whole row nudged at once": _whole_rows,
    "not every entry visited": _rows_only,
    # round 7 of the audit: a return inside the loop was told that range(len(w)) counts rows
    "stopped after the first entry": _return_inside_the_loop,
    "factor 2: divided by eps": lambda f, w: numeric_grad(f, w, divisor=1.0),
    "factor 1/2": lambda f, w: numeric_grad(f, w, divisor=4.0),
    "wrong sign": lambda f, w: -numeric_grad(f, w),
    "wrong sign and factor 2": lambda f, w: numeric_grad(f, w, divisor=-1.0),
    "divided by 2, times eps": _precedence,
    "one-sided difference": lambda f, w: numeric_grad(f, w, one_sided=True),
    "eps too small": lambda f, w: numeric_grad(f, w, 1e-10),
    "eps too large": lambda f, w: numeric_grad(f, w, 1e-2),
    "off by a constant factor": lambda f, w: 3 * numeric_grad(f, w),
    "w left changed": _not_restored,
    "nothing nudged": lambda f, w: numeric_grad(f, w, eps=0.0),
    "NaN or inf made": lambda f, w: numeric_grad(f, w) / 0,
    "eps left None": _eps_none,
    # round 6 of the audit: a wrong PASS, the check's f being a sum of one term per entry
    "earlier nudges kept": _nudges_kept_in_a_copy,
    # twelfth round: an abs() of the difference PASSED (every gradient of the check's f was positive); the other
    # two got a generic expected/got
    "sign lost": lambda f, w: numeric_grad(f, w).abs(),
    "division before the subtraction": _division_first,
    "values of f added": _values_added,
    # thirteenth audit: `old = flat[i]` saved a view, so the second point was w itself; it got "factor 1/2"
    "second point at w itself": _saved_value_is_a_view,
}


@pytest.mark.parametrize("name", CHECKER_MISTAKES)
def test_checker_mistake_is_named(name):
    with pytest.raises(lab.CheckError) as info:
        lab.check_numeric_grad(CHECKER_MISTAKES[name])
    assert info.value.mistake == name


def test_dividing_by_eps_is_not_called_noise():
    """02.4: dividing by eps instead of 2*eps got "noisy: eps too small", though the result is exactly 2x."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_numeric_grad(lambda f, w: numeric_grad(f, w, divisor=1.0))
    assert "2*eps" in info.value.hint and "small" not in info.value.hint


def test_every_checker_mistake_has_a_test():
    f, w = nb02._checker_cases()[0]
    f(w + 1e-6)  # one call, so that the mistakes that need a measured eps are listed
    names = {m.name for m in nb02._checker_mistakes(f, w)}
    names |= {"f evaluated in float32", "several entries nudged at once", "not every entry visited", "eps too small"}
    names |= {"a whole row nudged at once"}
    names |= {"nothing nudged", "nudge made in float32", "stopped after the first entry"}
    assert names <= set(CHECKER_MISTAKES)


@pytest.mark.parametrize("eps", [1e-12, 1e-9, 3e-8, 1e-7, 1e-6, 1e-5, 1e-4, 3e-4, 1e-2, 0.1])
def test_any_eps_passes_or_gets_a_true_cause(eps, capsys):
    try:
        lab.check_numeric_grad(lambda f, w: numeric_grad(f, w, eps))
    except lab.CheckError as err:
        expected = "eps too small" if eps < 1e-6 else "eps too large"
        assert err.mistake == expected
    else:
        assert 1e-7 <= eps <= 3e-4


# --------------------------------------------------------------------------- 02.5, a prediction


def test_lr_prediction_right(capsys):
    lab.check_lr_prediction("Diverges")
    out = capsys.readouterr().out
    assert out.startswith("PASS  learning rate 1e-4: 'diverges' is right (recorded answer: 'diverges')")


def test_lr_prediction_wrong_then_right_keeps_the_first_answer(capsys):
    lab.check_lr_prediction("falls faster")
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and "recorded answer: 'falls faster'" in first
    assert "Now explain: why steps 100 times larger" in first
    lab.check_lr_prediction("diverges")
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 'falls faster'" in second
    assert core.COMMITTED["02.5"].answer == "falls faster"


@pytest.mark.parametrize(
    "junk", [None, 1e-4, "faster", float("nan"), ["diverges"], np.float64(2.0), torch.tensor(1.0)], ids=repr
)
def test_lr_prediction_junk_is_refused(junk, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_lr_prediction(junk)
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out


# --------------------------------------------------------------------------- bad inputs


def _forever(*args):
    while True:
        pass


def _raises(*args):
    raise ValueError("my own bug")


BAD_VALUES = [
    None,
    [[1.0]],
    np.zeros((2, 2)),
    torch.zeros(3, 3, 3, dtype=torch.float64),
    torch.full((4, 3), float("nan"), dtype=torch.float64),
    torch.zeros(4, 3, dtype=torch.int64),
    torch.zeros(4, 3, device="meta", dtype=torch.float64),
]
BAD_FUNCTIONS = [_raises, _forever, None, "f", 3, lambda: None]


def _bad_functions(outputs):
    funcs = [lambda *a, r=r: r for r in BAD_VALUES]
    funcs += [lambda *a, r=r: (r,) * outputs for r in BAD_VALUES]
    return funcs + BAD_FUNCTIONS


@pytest.mark.parametrize("check, outputs", [(lab.check_loss_and_grads, 3), (lab.check_numeric_grad, 1)])
def test_bad_one_function_answers_get_one_sentence(check, outputs, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    for fn in _bad_functions(outputs):
        with pytest.raises(lab.CheckError) as info:
            check(fn)
        assert "could not use" not in str(info.value)
    assert "PASS" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "check, forward, backward",
    [(lab.check_linear_layer, linear_forward, linear_backward), (lab.check_relu_layer, relu_forward, relu_backward)],
)
def test_bad_layer_answers_get_one_sentence(check, forward, backward, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    bad = _bad_functions(2)
    pairs = [(fn, backward) for fn in bad] + [(forward, fn) for fn in bad]
    pairs += [(lambda *a: a[0], backward), (lambda *a: ((a,), a[0]), backward), (forward, lambda d, c: (d, d, d))]
    for f, b in pairs:
        with pytest.raises(lab.CheckError) as info:
            check(f, b)
        assert "could not use" not in str(info.value)
    assert "PASS" not in capsys.readouterr().out


def test_forward_returning_cache_first_is_told_the_order():
    with pytest.raises(lab.CheckError, match=r"returned \(cache, out\)"):
        lab.check_relu_layer(lambda h: ((h,), h.clamp(min=0)), relu_backward)


def test_unwritten_layer_functions_are_named():
    with pytest.raises(lab.CheckError, match="linear_forward and linear_backward are not written yet"):
        lab.check_linear_layer(None, None)


def test_layer_check_called_with_one_function():
    with pytest.raises(lab.CheckError, match="called wrongly"):
        lab.check_linear_layer(linear_forward)


def test_two_layer_grads_is_autograd_and_matches_the_hand_derivation():
    x, y, w1, w2 = nb02._randn(0, (4, 3), (4, 2), (3, 5), (5, 2))
    for ref, mine in zip(nb02.two_layer_grads(x, y, w1, w2), loss_and_grads(x, y, w1, w2)[1:]):
        assert torch.allclose(ref, mine)


def test_torch_max_with_a_dimension_is_named_as_a_reduction():
    """02.2: torch.max(h, 0) was called "(cache, out)": the output first", the student's order being right."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(lambda h: (torch.max(h, 0), h), relu_backward)
    assert info.value.mistake == "a reduction, not an element-wise max"


def test_a_backward_that_reads_a_notebook_variable_is_told_so():
    """02.1: a backward that used the notebook's x (64, 1000) instead of its cache was told "inner sizes differ"."""
    notebook_x = torch.randn(64, 1000, dtype=torch.float64)

    def forward(x, w):
        return x @ w, w

    def backward(dout, cache):
        w = cache
        return dout @ w.t(), notebook_x.t() @ dout

    with pytest.raises(lab.CheckError) as info:
        lab.check_linear_layer(forward, backward)
    assert "from outside the call" in info.value.hint and "1000" in info.value.hint


def test_a_backward_one_sided_difference_is_named_too():
    def backward_difference(f, w, eps=1e-6):
        grad = torch.zeros_like(w)
        for i in range(w.numel()):
            e = torch.zeros_like(w).view(-1)
            e[i] = eps
            grad.view(-1)[i] = (f(w) - f(w - e.view(w.shape))) / eps
        return grad

    with pytest.raises(lab.CheckError) as info:
        lab.check_numeric_grad(backward_difference)
    assert info.value.mistake == "one-sided difference"
    assert "w - eps only" in info.value.hint


def test_a_checker_that_vmaps_f_passes(capsys):
    """02.4: torch.vmap over f is a correct checker, but the check's own f read its argument's values and
    crashed inside vmap, which the student was told as "your numeric_grad raised RuntimeError"."""

    def vmapped(f, w, eps=1e-6):
        nudges = eps * torch.eye(w.numel(), dtype=w.dtype).reshape(-1, *w.shape)
        return ((torch.vmap(f)(w + nudges) - torch.vmap(f)(w - nudges)) / (2 * eps)).reshape(w.shape)

    lab.check_numeric_grad(vmapped)
    assert capsys.readouterr().out.startswith("PASS  numeric_grad")


def test_forward_mode_autograd_is_refused():
    """02.4 (and every by-hand exercise): torch.func.jacfwd, forward-mode autograd, slipped past the refusal of
    backward() and autograd.grad, and passed as a numeric gradient."""
    with pytest.raises(lab.CheckError, match="forward mode") as info:
        lab.check_numeric_grad(lambda f, w: torch.func.jacfwd(f)(w))
    assert info.value.mistake == "used autograd"


def test_an_eps_argument_overwritten_by_the_default_is_named():
    """02.4: `eps = 1e-6` at the top ignored the eps the caller passed, and passed (the check never gave one)."""

    def overwriting(f, w, eps=None):
        eps = 1e-6
        return numeric_grad(f, w, eps)

    with pytest.raises(lab.CheckError, match="not by the eps it was given") as info:
        lab.check_numeric_grad(overwriting)
    assert info.value.mistake == "eps argument ignored"


# --------------------------------------------------------------------------- round 4 of the audit


def _relu_backward_with_if(dout, h):
    if h > 0:
        return dout
    return torch.zeros_like(dout)


@pytest.mark.parametrize(
    "forward, backward",
    [
        (lambda h: (max(h, 0), h), lecture_relu_backward),  # the prompt's max(h, 0), written with Python's max
        (relu_forward, _relu_backward_with_if),
    ],
)
def test_pythons_max_on_a_tensor_is_named(forward, backward):
    """02.2: Python's max(h, 0), or an `if` on h, got "raised RuntimeError: Boolean value of Tensor ..." alone."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(forward, backward)
    assert info.value.mistake == nb02.PYTHON_MAX.name
    assert "each entry" in info.value.look


def _first_layer_dx_kept(x, y, w1, w2):
    h, c1 = linear_forward(x, w1)
    h_relu, c2 = relu_forward(h)
    y_pred, c3 = linear_forward(h_relu, w2)
    dh_relu, g2 = linear_backward(2 * (y_pred - y), c3)
    g1, _ = linear_backward(lecture_relu_backward(dh_relu, h), c1)  # dx where dw belongs
    return ((y_pred - y) ** 2).sum(), g1, g2


def _grad_w2_from_x(x, y, w1, w2):
    loss, g1, _ = loss_and_grads(x, y, w1, w2)
    y_pred = torch.relu(x @ w1) @ w2
    return loss, g1, x.t() @ (2 * (y_pred - y))


@pytest.mark.parametrize(
    "student, name", [(_first_layer_dx_kept, "dx for grad_w1"), (_grad_w2_from_x, "x instead of h_relu")]
)
def test_two_layer_round_four_mistakes_are_named(student, name):
    """02.3: grad_w1 taken from the first of linear_backward's (dx, dw), and grad_w2 built from x, got "wrong shape"
    alone."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(student)
    assert info.value.mistake == name


def test_a_wider_central_stencil_follows_the_eps_it_is_given(capsys):
    """02.4: a five-point central difference nudges by eps and 2 eps; the median nudge, 2 eps, was blamed as
    "eps argument ignored"."""

    def five_point(f, w, eps=1e-3):
        grad = torch.zeros_like(w)
        for i in range(w.numel()):
            e = torch.zeros_like(w)
            e.view(-1)[i] = eps
            grad.view(-1)[i] = (-f(w + 2 * e) + 8 * f(w + e) - 8 * f(w - e) + f(w - 2 * e)) / (12 * eps)
        return grad

    lab.check_numeric_grad(five_point)
    assert capsys.readouterr().out.startswith("PASS  numeric_grad")


def test_a_backward_that_compares_the_product_with_zero_is_named():
    """Eleventh round of the audit: `dout * h > 0` (the comparison applied last) got the dtype advice
    "a .float()/.half()/.double() call", a cause the student did not have."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(relu_forward, lambda dout, h: dout * h > 0)
    assert info.value.mistake == "product compared with 0"
    assert ".float()" not in info.value.hint


# --------------------------------------------------------------------------- the twelfth audit


def test_the_checkers_function_has_gradients_of_both_signs():
    """02.4: f' = w**2 + 2 cos w is never below 2, so an answer that drops the sign (an abs()) passed."""
    for _, w in nb02._checker_cases():
        grad = nb02._smooth_grad(w)
        assert (grad > 0).any() and (grad < 0).any()
        assert float(grad.abs().min()) >= 2 - 1e-12


@pytest.mark.parametrize(
    "backward, name",
    [
        (lambda dout, h: dout * torch.sigmoid(h), "sigmoid as the slope"),
        (lambda dout, h: dout * torch.sigmoid(h) * (1 - torch.sigmoid(h)), "sigmoid's derivative as the slope"),
    ],
    ids=["sigmoid", "sigmoid's derivative"],
)
def test_a_sigmoid_used_as_the_relus_slope_is_named(backward, name):
    """02.2, twelfth round: each got a generic expected/got; the cause is named, the slope itself is not given."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(relu_forward, backward)
    assert info.value.mistake == name
    assert info.value.look and "(h > 0)" not in info.value.hint


# --------------------------------------------------------------------------- the thirteenth audit

_SAVED = {}


def _linear_forward_keeping_a_global(x, w):
    _SAVED["x"], _SAVED["w"] = x, w
    return x @ w, None


def _linear_backward_reading_the_global(dout, cache):
    return dout @ _SAVED["w"].t(), _SAVED["x"].t() @ dout


def _relu_forward_keeping_a_global(h):
    _SAVED["h"] = h
    return h.clamp(min=0), None


def _relu_backward_reading_the_global(dout, cache):
    return dout * (_SAVED["h"] > 0)


@pytest.mark.parametrize(
    "check, forward, backward",
    [
        (lab.check_linear_layer, _linear_forward_keeping_a_global, _linear_backward_reading_the_global),
        (lab.check_relu_layer, _relu_forward_keeping_a_global, _relu_backward_reading_the_global),
    ],
    ids=["linear", "relu"],
)
def test_a_layer_that_keeps_its_state_outside_the_cache_is_named(check, forward, backward):
    """02.1 and 02.2: a forward that saves its tensors in a global, and a backward that reads them there, passed;
    02.3 runs two linear forwards before either backward, so the first layer got the second one's tensors."""
    with pytest.raises(lab.CheckError) as info:
        check(forward, backward)
    assert info.value.mistake == "state kept outside the cache"
    assert "after a second forward" in info.value.message


def test_caches_of_other_forms_pass(capsys):
    """A dict, or NumPy copies, in the cache: the backward still answers each call from its own cache."""
    lab.check_linear_layer(lambda x, w: (x @ w, {"x": x, "w": w}), lambda dout, c: (dout @ c["w"].T, c["x"].T @ dout))
    lab.check_linear_layer(
        lambda x, w: (x @ w, (x.numpy().copy(), w.numpy().copy())),
        lambda dout, c: (dout @ torch.from_numpy(c[1]).T, torch.from_numpy(c[0]).T @ dout),
    )
    lab.check_relu_layer(lambda h: (torch.maximum(h, torch.zeros_like(h)), h > 0), lambda dout, c: dout * c)
    assert capsys.readouterr().out.count("PASS") == 3


def test_nn_linears_transposed_weight_in_the_forward_is_named():
    """02.1: out = x @ w.T, nn.Linear's convention, runs on the square w of case 1 and got a generic expected/got."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_linear_layer(lambda x, w: (x @ w.T, (x, w)), linear_backward)
    assert info.value.mistake == "w transposed in the forward"
    assert "x @ w" not in info.value.look


@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_a_leaky_relu_is_named(slope):
    """02.2: a leaky ReLU in the forward got a generic expected/got."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(
            lambda h: (torch.nn.functional.leaky_relu(h, slope), h),
            lambda dout, h: torch.where(h > 0, dout, slope * dout),
        )
    assert info.value.mistake == "leaky ReLU"


def test_gradients_of_a_mean_with_the_loss_of_a_sum_are_named():
    """02.3: grad_y_pred divided by the batch size, the loss still the sum, got a generic expected/got."""

    def averaged_gradient(x, y, w1, w2):
        h = x @ w1
        h_relu = h.clamp(min=0)
        y_pred = h_relu @ w2
        grad_y_pred = 2 * (y_pred - y) / len(x)
        grad_h = grad_y_pred @ w2.T * (h > 0)
        return ((y_pred - y) ** 2).sum(), x.T @ grad_h, h_relu.T @ grad_y_pred

    with pytest.raises(lab.CheckError) as info:
        lab.check_loss_and_grads(averaged_gradient)
    assert info.value.mistake == "gradients divided by the batch size"


def test_a_one_sided_difference_over_two_eps_is_named_with_its_points():
    """02.4: (f(w + e) - f(w)) / (2 eps) evaluates f at the same points as the view bug: the cause names them."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_numeric_grad(lambda f, w: numeric_grad(f, w, one_sided=True) / 2)
    assert info.value.mistake == "second point at w itself"
    assert "never at w - eps" in info.value.hint


def test_a_relu_written_for_two_axes_only_fails_on_the_3d_case():
    """Fourteenth audit: the prompt allows h of any shape, and every case was 2-D, so a forward that builds its
    zeros as (h.shape[0], h.shape[1]) passed."""

    def forward_2d_only(h):
        return torch.max(h, torch.zeros(h.shape[0], h.shape[1], dtype=h.dtype)), h

    with pytest.raises(lab.CheckError, match=r"case 3 of 3 \(inputs of shape \(2, 3, 4\)"):
        lab.check_relu_layer(forward_2d_only, lambda dout, h: dout * (h > 0))


@pytest.mark.parametrize(
    "forward, backward",
    [
        (lambda h: (torch.where(h > 0, h, 0.0), h > 0), lambda dout, on: torch.where(on, dout, 0.0)),
        (lambda h: (F.threshold(h, 0, 0), h), lambda dout, h: dout.masked_fill(h <= 0, 0)),
        (lambda h: (h.clamp(min=0), h), lambda dout, h: dout * torch.heaviside(h, torch.tensor(0.5, dtype=h.dtype))),
    ],
)
def test_relu_layers_in_other_styles_pass(forward, backward, capsys):
    """Fourteenth audit: a mask as the cache, F.threshold, and heaviside with 0.5 at 0 (a subgradient) are right."""
    lab.check_relu_layer(forward, backward)
    assert capsys.readouterr().out.startswith("PASS")


# --------------------------------------------------------------------------- fifteenth audit


class LyingTensor(torch.Tensor):
    """A tensor whose every torch operation, attribute and comparison answers True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True


def lying(t):
    with torch._C.DisableTorchFunction():
        return t.clone().as_subclass(LyingTensor)


@pytest.mark.parametrize("out", [None, "list", "numpy"])
def test_relu_forward_whose_output_is_no_tensor_is_not_told_it_swapped_the_pair(out):
    """02.2: (None, h) or (a list, h) got "relu_forward returned (cache, out): the output must come first"."""
    forms = {None: lambda t: None, "list": lambda t: t.tolist(), "numpy": lambda t: t.numpy()}
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(lambda h: (forms[out](h.clamp(min=0)), h), relu_backward)
    assert "(cache, out)" not in info.value.message
    assert info.value.message.startswith("out is None" if out is None else "out is not a tensor")


def test_linear_forward_returning_cache_first_is_still_told_so():
    with pytest.raises(lab.CheckError, match=r"returned \(cache, out\): the output must come first"):
        lab.check_linear_layer(lambda x, w: ((x, w), x @ w), linear_backward)


def test_relu_backward_returning_nested_lists_is_told_dh_is_not_a_tensor():
    """02.2: dh.tolist() got "relu_backward(dout, cache) must return dh"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_relu_layer(relu_forward, lambda dout, h: (dout * (h > 0)).tolist())
    assert info.value.message.startswith("dh is not a tensor")


def _lying_layer_answers(values):
    """The four function exercises of 02 with one output each in a lying tensor subclass."""

    def make(t):
        return lying(t if values == "right" else torch.zeros_like(t))

    return {
        "linear forward": lambda: lab.check_linear_layer(lambda x, w: (make(x @ w), (x, w)), linear_backward),
        "linear backward": lambda: lab.check_linear_layer(
            linear_forward, lambda d, c: (make(linear_backward(d, c)[0]), linear_backward(d, c)[1])
        ),
        "relu backward": lambda: lab.check_relu_layer(relu_forward, lambda d, h: make(relu_backward(d, h))),
        "loss and grads": lambda: lab.check_loss_and_grads(
            lambda *a: (make(loss_and_grads(*a)[0]), *loss_and_grads(*a)[1:])
        ),
        "numeric grad": lambda: lab.check_numeric_grad(lambda f, w: make(numeric_grad(f, w))),
    }


@pytest.mark.parametrize("name", list(_lying_layer_answers("right")))
def test_a_lying_subclass_is_judged_by_its_values(name, capsys):
    """02.1-02.4: a subclass whose overrides answer True got "the check could not use what it was given
    (TypeError: 'bool' object is not iterable)", or "out is not a tensor (drop .item())"."""
    _lying_layer_answers("right")[name]()
    assert "PASS" in capsys.readouterr().out
    with pytest.raises(lab.CheckError) as info:
        _lying_layer_answers("zeros")[name]()
    assert "could not use" not in info.value.message
    assert "does not match" in info.value.message


def test_lr_prediction_held_in_a_lying_tensor_gets_a_sentence():
    with pytest.raises(lab.CheckError) as info:
        lab.check_lr_prediction(lying(torch.tensor(1.0)))
    assert "could not use" not in info.value.message
    assert info.value.usage

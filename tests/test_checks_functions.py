"""Checks of notebook 04 (custom autograd Functions): the reference answers pass, every
listed mistake is named (one test each, generated from the specs where they are values),
and bad answers of any kind give a CheckError, never a PASS or another exception."""
import numpy as np
import pytest
import torch

import labsupport as lab
import labsupport.checks.core as core
from labsupport.checks import nb04_custom_functions as Fn


def make(forward, backward, name="Fn"):
    """A Function subclass from two plain functions forward(ctx, ...) and backward(ctx, g)."""
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def save_x(op):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return op(x)
    return forward


def stable(x):
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def save_y(ctx, x):
    y = stable(x)
    ctx.save_for_backward(y)
    return y


Softplus = make(save_x(stable), lambda ctx, g: g * torch.sigmoid(ctx.saved_tensors[0]), "Softplus")
SoftplusFromOutput = make(save_y, lambda ctx, g: -g * torch.expm1(-ctx.saved_tensors[0]), "SoftplusFromOutput")


def mm_forward(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    ctx.scale = scale
    return scale * x.mm(w)


def mm_backward(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g), None


ScaledMatmul = make(mm_forward, mm_backward, "ScaledMatmul")
SPECS = {"softplus": (Fn._SOFTPLUS, Fn.check_softplus_function, Softplus),
         "matmul": (Fn._SCALED_MM, Fn.check_scaled_matmul_function, ScaledMatmul)}


@pytest.mark.parametrize("cls", [Softplus, SoftplusFromOutput, ScaledMatmul], ids=lambda c: c.__name__)
def test_reference_answers_pass(cls, capsys):
    check = Fn.check_scaled_matmul_function if cls is ScaledMatmul else Fn.check_softplus_function
    check(cls)
    assert capsys.readouterr().out.startswith(f"PASS  {cls.__name__}: forward and backward match autograd")


def from_spec(spec, k):
    """A Function whose backward returns the k-th listed wrong value (None there: the right gradient)."""
    def forward(ctx, *args):
        ctx.args = args
        return spec.reference(*args)

    def backward(ctx, g):
        wrong = spec.mistakes(*[a.detach() if torch.is_tensor(a) else a for a in ctx.args], g)[k][0]
        with torch.enable_grad():   # backward runs with grad mode off; the reference needs autograd
            right = Fn._reference(spec, *ctx.args, g)
        grads = [r if w is None else w for w, r in zip(wrong[1:], right[1:])]
        return (*grads, *[None] * (len(ctx.args) - len(grads)))
    return make(forward, backward, "Wrong")


def value_mistakes():
    for name, (spec, check, _) in SPECS.items():
        for k, (wrong, why) in enumerate(spec.mistakes(*spec.cases()[0])):
            if not callable(wrong):
                yield pytest.param(spec, check, k, why, id=f"{name}-{k}")


@pytest.mark.parametrize("spec, check, k, why", list(value_mistakes()))
def test_each_listed_wrong_gradient_is_named(spec, check, k, why):
    with pytest.raises(lab.CheckError) as info:
        check(from_spec(spec, k))
    assert why in str(info.value)


def naive_backward(ctx, g):
    x, = ctx.saved_tensors
    return g * torch.exp(x) / (1 + torch.exp(x))


PREDICATE_MISTAKES = {  # the Softplus mistakes listed as predicates, each written as a student would
    "overflows for large x": make(save_x(lambda x: torch.log(1 + torch.exp(x))), Softplus.backward),
    "inf / inf = NaN": make(save_x(stable), naive_backward),
    "rounds to 0 when y is tiny": make(save_y, lambda ctx, g: g * (1 - torch.exp(-ctx.saved_tensors[0]))),
}


def test_every_predicate_mistake_has_a_test():
    spec = Fn._SOFTPLUS
    whys = [why for wrong, why in spec.mistakes(*spec.cases()[0]) if callable(wrong)]
    assert len(whys) == len(PREDICATE_MISTAKES)
    assert all(any(key in why for why in whys) for key in PREDICATE_MISTAKES)


@pytest.mark.parametrize("key", PREDICATE_MISTAKES)
def test_predicate_mistake_is_named(key):
    with pytest.raises(lab.CheckError, match=key.replace("/", r"\/")):
        Fn.check_softplus_function(PREDICATE_MISTAKES[key])


def test_the_planted_bug_is_named():
    def classmate_backward(ctx, grad_output):       # notebook 04's ClassmateScaledMatmul
        x, w = ctx.saved_tensors
        return ctx.scale * grad_output.mm(w.t()), x.t().mm(grad_output), None
    with pytest.raises(lab.CheckError, match="planted bug"):
        Fn.check_scaled_matmul_function(make(mm_forward, classmate_backward))


def two_grads(ctx, g):
    return mm_backward(ctx, g)[:2]


def grad_for_scale(ctx, g):
    return (*mm_backward(ctx, g)[:2], torch.tensor(1.0))


def swapped(ctx, g):
    grad_x, grad_w, _ = mm_backward(ctx, g)
    return grad_w, grad_x, None


def save_scale(ctx, x, w, scale):
    ctx.save_for_backward(x, w, scale)
    return scale * x.mm(w)


def grad_output_in_place(ctx, g):
    x, w = ctx.saved_tensors
    g.mul_(ctx.scale)
    return g.mm(w.t()), x.t().mm(g), None


def input_in_place(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    ctx.scale = scale
    return x.mul_(scale).mm(w)


@pytest.mark.parametrize("forward, backward, fragment", [
    (mm_forward, two_grads, "one value per argument of forward"),
    (mm_forward, grad_for_scale, "not a tensor gets None"),
    (mm_forward, swapped, "its input.s shape"),
    (save_scale, mm_backward, "save_for_backward takes tensors only"),
    (mm_forward, grad_output_in_place, "changed grad_output in place"),
    (input_in_place, mm_backward, "in place"),
], ids=["wrong number of gradients", "gradient for a non-tensor", "swapped", "number saved",
        "grad_output in place", "input in place"])
def test_returned_gradient_mistakes_are_named(forward, backward, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        Fn.check_scaled_matmul_function(make(forward, backward))


def raises(ctx, *args):
    raise ValueError("boom")


def stub(ctx, *args):
    raise NotImplementedError("Exercise 2")


def never_returns(ctx, *args):
    while True:
        pass


BAD = {
    "None": None, "list": [1, 2], "array": np.ones(3), "int": 3, "apply": Softplus.apply,
    "not a Function": type("Softplus", (), {"forward": staticmethod(stable)}),
    "extra dimension": make(save_x(lambda x: stable(x).unsqueeze(0)), Softplus.backward),
    "float32 output": make(save_x(lambda x: stable(x).float()), Softplus.backward),
    "NaN": make(save_x(lambda x: stable(x) * float("nan")), Softplus.backward),
    "raising forward": make(raises, Softplus.backward), "raising backward": make(save_x(stable), raises),
    "stub": make(stub, stub), "list output": make(save_x(lambda x: stable(x).tolist()), Softplus.backward),
    "None gradient": make(save_x(stable), lambda ctx, g: None),
}


@pytest.mark.parametrize("check", [Fn.check_softplus_function, Fn.check_scaled_matmul_function])
@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_bad_answers_fail_cleanly(check, bad):
    with pytest.raises(lab.CheckError):
        check(bad)


@pytest.mark.parametrize("check", [Fn.check_softplus_function, Fn.check_scaled_matmul_function])
def test_a_function_that_never_returns_is_stopped(check, monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return"):
        check(make(never_returns, never_returns))


# ------------------------------------------------------------------ 04.1 prediction

def test_sigmoid_prediction(capsys):
    Fn.check_sigmoid_prediction("nan")
    assert capsys.readouterr().out.startswith("PASS")
    Fn.check_sigmoid_prediction(" NaN ")


@pytest.mark.parametrize("wrong", ["0", "error"])
def test_sigmoid_prediction_mistakes_are_explained(wrong):
    with pytest.raises(lab.CheckError, match="Likely mistake"):
        Fn.check_sigmoid_prediction(wrong)


@pytest.mark.parametrize("bad", [None, "inf", 0, float("nan"), ["nan"], np.array([0.0]), torch.tensor(float("nan"))])
def test_sigmoid_prediction_bad_answers_fail_cleanly(bad):
    with pytest.raises(lab.CheckError):
        Fn.check_sigmoid_prediction(bad)

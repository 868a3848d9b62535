"""Checks of notebook 04 (custom autograd Functions): the reference solutions pass,
each known mistake is named, bad inputs get a message."""
import warnings

import pytest
import torch

import labsupport as lab


def make(forward, backward, name="Fn"):
    """A Function subclass from two plain functions forward(ctx, ...) and backward(ctx, g)."""
    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def save_x(op):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return op(x)
    return forward


def save_out(op):
    def forward(ctx, x):
        y = op(x)
        ctx.save_for_backward(y)
        return y
    return forward


def saved(backward):
    """backward(saved, g) -> backward(ctx, g) reading the one saved tensor."""
    return lambda ctx, g: backward(ctx.saved_tensors[0], g)


# ------------------------------------------------------------------ (a) ReLU

def relu_backward(x, g):
    grad = g.clone()
    grad[x < 0] = 0
    return grad


MyReLU = make(save_x(lambda x: x.clamp(min=0)), saved(relu_backward), "MyReLU")


def test_relu_reference_passes(capsys):
    lab.check_relu_function(MyReLU)
    assert capsys.readouterr().out == ("PASS  MyReLU: forward matches torch.relu, backward matches autograd "
                                       "on 2 test cases, gradcheck passes (float64)\n")


def _relu_in_place_forward(ctx, x):
    ctx.save_for_backward(x)
    return x.clamp_(min=0)


def _relu_masks_grad_in_place(x, g):
    g[x < 0] = 0
    return g


@pytest.mark.parametrize("forward, backward, fragment", [
    (save_x(lambda x: x * 1), saved(relu_backward), "returns x unchanged"),
    (save_x(lambda x: x.clamp(max=0)), saved(relu_backward), "keeps the negative part"),
    (save_x(lambda x: (x > 0).double()), saved(relu_backward), "returns the mask"),
    (_relu_in_place_forward, saved(relu_backward), "changed its input x in place"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: (x > 0).double()), "forget to multiply by grad_output"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: g * 1), "not zero where x < 0"),
    (save_out(lambda x: x.clamp(min=0)), saved(relu_backward), "relu\\(x\\) is never negative"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: g * (x < 0)), "mask is inverted"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: g.clamp(min=0)), "clamps grad_output"),
    (save_out(lambda x: x.clamp(min=0)), saved(lambda y, g: g * y), "multiplies grad_output by the output"),
    (save_x(lambda x: x.clamp(min=0)), saved(_relu_masks_grad_in_place), "changed grad_output in place"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: (relu_backward(x, g), g)),
     "returned 2 gradient\\(s\\); expected 1"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: relu_backward(x, g).t()), "forget a transpose"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: None), "returned None for x"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: 2 * relu_backward(x, g)), "does not match autograd"),
    (save_x(lambda x: x.clamp(min=0) * 2), saved(relu_backward), "does not match torch.relu"),
    (save_x(lambda x: x.clamp(min=0).float()), saved(relu_backward), "dtype torch.float32"),
    (save_x(lambda x: x.clamp(min=0)[0]), saved(relu_backward), "has shape \\(5,\\)"),
    (save_x(lambda x: x.clamp(min=0) * float("nan")), saved(relu_backward), "NaN"),
    (save_x(lambda x: x.clamp(min=0)), saved(lambda x, g: x.undefined_name), "raised AttributeError"),
])
def test_relu_mistakes(forward, backward, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_relu_function(make(forward, backward, "MyReLU"))


def test_gradcheck_catches_a_backward_the_sampled_cases_miss():
    # correct for the check's two test cases (the first two backward calls), wrong afterwards:
    # only gradcheck sees it
    calls = {"n": 0}

    def backward(x, g):
        calls["n"] += 1
        grad = relu_backward(x, g)
        return grad if calls["n"] <= 2 else 1.5 * grad
    with pytest.raises(lab.CheckError, match="gradcheck fails for MyReLU"):
        lab.check_relu_function(make(save_x(lambda x: x.clamp(min=0)), saved(backward), "MyReLU"))


class Unfinished(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("Exercise 1: ReLU as a Function")


class NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)


class StubForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("Exercise 1: ReLU as a Function")


@pytest.mark.parametrize("value, fragment", [
    (None, "got None. Did the cell that defines the class run"),
    (MyReLU.apply, "got MyReLU.apply: pass MyReLU"),
    (torch.relu, "expected a subclass of torch.autograd.Function"),
    (torch.nn.ReLU, "expected a subclass of torch.autograd.Function"),
    ([MyReLU], "got list of length 1"),
    ("MyReLU", "got str"),
    (Unfinished, "backward is not written yet"),
    (NoBackward, "has no backward"),
    (StubForward, "not written yet"),
])
def test_relu_bad_inputs(value, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_relu_function(value)


def test_relu_instance_instead_of_class():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates instantiating a Function: that is the mistake
        try:
            instance = MyReLU()
        except Exception:  # a future torch refuses outright: nothing left to check
            pytest.skip("this torch cannot instantiate an autograd.Function")
    with pytest.raises(lab.CheckError, match="got an instance of MyReLU"):
        lab.check_relu_function(instance)


# ------------------------------------------------------------------ (b) stable functions

def stable_softplus(x):
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


Softplus = make(save_x(stable_softplus), saved(lambda x, g: g * torch.sigmoid(x)), "Softplus")
SoftplusFromOutput = make(save_out(stable_softplus), saved(lambda y, g: g * -torch.expm1(-y)), "Softplus")


def lse_forward(ctx, x):
    m = x.max(dim=-1, keepdim=True).values
    y = m.squeeze(-1) + torch.log(torch.exp(x - m).sum(dim=-1))
    ctx.save_for_backward(x, y)
    return y


def lse_backward(ctx, g):
    x, y = ctx.saved_tensors
    return g.unsqueeze(-1) * torch.exp(x - y.unsqueeze(-1))


LogSumExp = make(lse_forward, lse_backward, "LogSumExp")


@pytest.mark.parametrize("fn, choice", [(Softplus, "softplus"), (SoftplusFromOutput, "softplus"),
                                        (LogSumExp, "logsumexp"), (LogSumExp, "log-sum-exp"),
                                        (LogSumExp, "LogSumExp")])
def test_stable_references_pass(fn, choice, capsys):
    lab.check_stable_function(fn, choice)
    out = capsys.readouterr().out
    assert out.startswith(f"PASS  {fn.__name__}: forward matches ") and "finite and accurate" in out


@pytest.mark.parametrize("forward, backward, fragment", [
    (save_x(lambda x: torch.log(1 + torch.exp(x))), saved(lambda x, g: g * torch.sigmoid(x)),
     "forward is not stable.*max\\(x, 0\\) \\+ log1p"),
    (save_x(stable_softplus), saved(lambda x, g: g * torch.exp(x) / (1 + torch.exp(x))),
     "backward is not stable.*inf / inf"),
    (save_x(torch.sigmoid), saved(lambda x, g: g * torch.sigmoid(x)), "that is sigmoid"),
    (save_x(torch.exp), saved(lambda x, g: g * torch.sigmoid(x)), "the log is missing"),
    (save_x(lambda x: torch.log(torch.exp(x))), saved(lambda x, g: g * torch.sigmoid(x)), "the 1 \\+ is missing"),
    (save_x(stable_softplus), saved(lambda x, g: torch.sigmoid(x)), "forget to multiply by grad_output"),
    (save_out(stable_softplus), saved(lambda y, g: g * torch.sigmoid(y)), "sigmoid of the saved output"),
    (save_x(stable_softplus), saved(lambda x, g: g * (1 - torch.exp(-x))), "needs the output y"),
    (save_out(stable_softplus), saved(lambda y, g: g * y), "multiplies grad_output by the output"),
    (save_x(stable_softplus), saved(lambda x, g: g * torch.exp(x)), "exp\\(x\\) is the derivative of exp"),
])
def test_softplus_mistakes(forward, backward, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_stable_function(make(forward, backward, "Softplus"), "softplus")


def lse_naive_forward(ctx, x):
    y = torch.log(torch.exp(x).sum(dim=-1))
    ctx.save_for_backward(x, y)
    return y


def lse_with(forward_value=None, backward_value=None):
    def forward(ctx, x):
        y = lse_forward(ctx, x) if forward_value is None else forward_value(x)
        ctx.save_for_backward(x, torch.logsumexp(x, dim=-1))
        return y

    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return lse_backward(ctx, g) if backward_value is None else backward_value(x, y, g)
    return make(forward, backward, "LogSumExp")


@pytest.mark.parametrize("fn, fragment", [
    (make(lse_naive_forward, lse_backward, "LogSumExp"), "forward is not stable.*subtract the row maximum"),
    (lse_with(backward_value=lambda x, y, g: g.unsqueeze(-1) * torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)),
     "backward is not stable.*exp\\(x - y\\)"),
    (lse_with(lambda x: x.exp().sum(-1)), "the log is missing"),
    (lse_with(lambda x: x.max(-1).values), "max alone"),
    (lse_with(lambda x: torch.log(torch.exp(x - x.max(-1, keepdim=True).values).sum(-1))), "added back"),
    (lse_with(lambda x: torch.logsumexp(x, -1, keepdim=True)), "has shape \\(4, 1\\).*without keepdim"),
    (lse_with(lambda x: torch.logsumexp(x, 0)), "has shape \\(6,\\).*dim=-1"),
    (lse_with(backward_value=lambda x, y, g: torch.exp(x - y.unsqueeze(-1))), "forget to multiply by grad_output"),
    (lse_with(backward_value=lambda x, y, g: g.unsqueeze(-1) * torch.exp(x)), "exp\\(x\\) is not the gradient"),
    (lse_with(backward_value=lambda x, y, g: g.unsqueeze(-1) * torch.softmax(x, 0)), "not dim 0"),
    (lse_with(backward_value=lambda x, y, g: g.unsqueeze(-1).expand_as(x)), "softmax\\) is missing"),
    (lse_with(backward_value=lambda x, y, g: g * torch.exp(x - y.unsqueeze(-1))), "unsqueeze\\(-1\\)"),
])
def test_logsumexp_mistakes(fn, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_stable_function(fn, "logsumexp")


def test_stable_choices_are_the_ones_the_check_accepts(capsys):
    assert lab.STABLE_CHOICES == ("softplus", "logsumexp")
    for choice, fn in zip(lab.STABLE_CHOICES, (Softplus, LogSumExp)):
        lab.check_stable_function(fn, choice)
    assert capsys.readouterr().out.count("PASS") == 2


@pytest.mark.parametrize("choice", ["tanh", None, 1, ["softplus"]])
def test_stable_bad_choice(choice):
    with pytest.raises(lab.CheckError, match="choice must be one of 'softplus', 'logsumexp'"):
        lab.check_stable_function(Softplus, choice)


def test_stable_wrong_choice_for_the_class():
    with pytest.raises(lab.CheckError, match="has shape \\(4, 6\\); torch.logsumexp"):
        lab.check_stable_function(Softplus, "logsumexp")


# ------------------------------------------------------------------ (c) scale * x @ w

def mm_forward(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    ctx.scale = scale
    return scale * x.mm(w)


def mm_backward(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g), None


ScaledMatmul = make(mm_forward, mm_backward, "ScaledMatmul")


def test_scaled_matmul_reference_passes(capsys):
    lab.check_scaled_matmul_function(ScaledMatmul)
    assert capsys.readouterr().out.startswith("PASS  ScaledMatmul: forward matches scale * torch.mm(x, w)")


def mm_with(forward_value=None, backward_value=None, save_scale=False):
    def forward(ctx, x, w, scale):
        out = mm_forward(ctx, x, w, scale)
        if save_scale:
            ctx.save_for_backward(x, w, scale)
        return out if forward_value is None else forward_value(x, w, scale)

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return mm_backward(ctx, g) if backward_value is None else backward_value(x, w, ctx.scale, g)
    return make(forward, backward, "ScaledMatmul")


@pytest.mark.parametrize("fn, fragment", [
    (mm_with(lambda x, w, s: x.mm(w)), "the factor scale is missing"),
    (mm_with(lambda x, w, s: x.mm(w) / s), "divides by scale"),
    (mm_with(lambda x, w, s: x.mm(w) * s * s), "applied twice"),
    (mm_with(backward_value=lambda x, w, s, g: (g.mm(w.t()), x.t().mm(g), None)), "the factor scale is missing"),
    (mm_with(backward_value=lambda x, w, s, g: (torch.ones_like(g).mm(w.t()) * s, x.t().mm(torch.ones_like(g)) * s, None)),
     "forget to multiply by grad_output"),
    (mm_with(backward_value=lambda x, w, s, g: (g.mm(w.t()) / s, x.t().mm(g) / s, None)), "divides by scale"),
    (mm_with(backward_value=lambda x, w, s, g: (s * g.mm(w.t()), s * x.t().mm(g))),
     "returned 2 gradient\\(s\\); expected 3.*\\(grad_x, grad_w, None\\)"),
    (mm_with(backward_value=lambda x, w, s, g: (s * g.mm(w.t()), s * x.t().mm(g), torch.tensor(1.0))),
     "returned a gradient for scale, which is not a tensor: return None"),
    (mm_with(backward_value=lambda x, w, s, g: (s * x.t().mm(g), s * g.mm(w.t()), None)),
     "shape \\(4, 3\\) for x.*It has the shape of w"),
    (mm_with(backward_value=lambda x, w, s, g: (s * g.mm(w.t()), s * g.t().mm(x), None)),
     "shape \\(3, 4\\) for w.*forget a transpose"),
    (mm_with(backward_value=lambda x, w, s, g: (s * g.mm(w), s * x.t().mm(g), None)),
     "cannot be multiplied.*Check the transposes"),
    (mm_with(backward_value=lambda x, w, s, g: (s * g.mm(w.t()), None, None)), "returned None for w"),
    (mm_with(save_scale=True), "save_for_backward takes tensors only"),
])
def test_scaled_matmul_mistakes(fn, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_scaled_matmul_function(fn)


def test_scaled_matmul_bad_inputs():
    with pytest.raises(lab.CheckError, match="got None"):
        lab.check_scaled_matmul_function(None)
    with pytest.raises(lab.CheckError, match="got ScaledMatmul.apply"):
        lab.check_scaled_matmul_function(ScaledMatmul.apply)

"""Checks of notebook 05 (nn.Module): the reference passes, each named mistake is named, bad input is a CheckError."""
import numpy as np
import pytest
import torch
from torch import nn

import labsupport as lab
import labsupport.checks.core as core


# ------------------------------------------------------------------ check_my_linear

class MyLinear(nn.Module):
    def __init__(self, D_in, D_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(D_out, D_in))
        self.bias = nn.Parameter(torch.zeros(D_out))

    def forward(self, x):
        return x @ self.weight.t() + self.bias


def linear_variant(init=None, forward=None):
    return type("MyLinear", (MyLinear,), {k: v for k, v in (("__init__", init), ("forward", forward)) if v})


def _plain(self, i, o):
    nn.Module.__init__(self)
    self.weight, self.bias = torch.randn(o, i, requires_grad=True), nn.Parameter(torch.zeros(o))


def _transposed(self, i, o):
    nn.Module.__init__(self)
    self.weight, self.bias = nn.Parameter(torch.randn(i, o)), nn.Parameter(torch.zeros(o))


def _no_bias(self, i, o):
    nn.Module.__init__(self)
    self.weight, self.bias = nn.Parameter(torch.randn(o, i)), None


def _frozen(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i), requires_grad=False)
    self.bias = nn.Parameter(torch.zeros(o))


def _no_super(self, i, o):
    self.weight = nn.Parameter(torch.randn(o, i))


def _no_super_tensor(self, i, o):
    self.weight = torch.randn(o, i)


def _sleep(self, x):
    while True:
        pass


LINEAR_MISTAKES = [
    (linear_variant(init=_plain), "a plain tensor is not registered"),
    (linear_variant(init=_transposed), r"weight is \(in, out\)"),
    (linear_variant(init=_no_bias), "the bias is missing"),
    (linear_variant(init=_frozen), "requires_grad=False"),
    (linear_variant(init=_no_super), r"super\(\).__init__\(\)"),
    (linear_variant(init=_no_super_tensor), r"super\(\).__init__\(\)"),
    (linear_variant(forward=lambda self, x: x @ self.weight), "transpose"),
    (linear_variant(forward=lambda self, x: x @ self.weight.t()), "the bias is not added"),
    (linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).detach()), "no gradient"),
    (linear_variant(forward=lambda self, x: x @ self.weight.t() * float("nan")), "not finite"),
]


def test_my_linear_passes(capsys):
    lab.check_my_linear(MyLinear)
    assert capsys.readouterr().out.startswith("PASS  MyLinear")


@pytest.mark.parametrize("variant, fragment", LINEAR_MISTAKES)
def test_my_linear_names_each_mistake(variant, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_my_linear(variant)


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"), ([MyLinear], "got list"), (MyLinear(2, 3), "instance of it"), (np.zeros(2), "numpy"),
    (int, "must be a subclass"),
    (linear_variant(forward=lambda self, x: None), "got None"),
    (linear_variant(forward=lambda self, x: (x @ self.weight.t()).tolist()), "got list"),
    (linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).float()), "dtype"),
    (linear_variant(forward=lambda self, x: 1 / 0), "ZeroDivisionError"),
    (linear_variant(forward=lambda self, x: (_ for _ in ()).throw(NotImplementedError("Exercise 1"))),
     "not written yet"),
])
def test_my_linear_bad_input(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_my_linear(bad)


def test_never_returning_forward_is_stopped(monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_my_linear(linear_variant(forward=_sleep))
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_residual_stack(stack_variant(forward=_sleep))


# ------------------------------------------------------------------ check_layer_list_prediction

def test_list_prediction():
    lab.check_layer_list_prediction(1000 * 100 + 100 + 100 * 10 + 10)
    with pytest.raises(lab.CheckError, match="counts the hidden layers too"):
        lab.check_layer_list_prediction(101110 + 3 * (100 * 100 + 100))
    with pytest.raises(lab.CheckError, match="registered"):
        lab.check_layer_list_prediction(0)
    for bad in (None, "many", [1], float("nan")):
        with pytest.raises(lab.CheckError):
            lab.check_layer_list_prediction(bad)


# ------------------------------------------------------------------ check_residual_stack

class Block(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, H), nn.Linear(H, D)

    def forward(self, h):
        return h + self.fc2(torch.relu(self.fc1(h)))


class ResidualStack(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def stack_variant(init=None, forward=None):
    return type("ResidualStack", (ResidualStack,), {k: v for k, v in (("__init__", init), ("forward", forward)) if v})


def _branch(self, x):
    for b in self.blocks:
        x = b.fc2(torch.relu(b.fc1(x)))
    return x


def _relu_after_sum(self, x):
    for b in self.blocks:
        x = torch.relu(b(x))
    return x


def _outer(self, x):
    return x + _branch(self, x)


def _in_place(self, x):
    for b in self.blocks:
        x += b.fc2(torch.relu(b.fc1(x)))
    return x


def _fresh_layer(self, x):
    return ResidualStack.forward(self, x) + nn.Linear(x.shape[1], x.shape[1])(x)


def _python_list(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = [Block(D, H) for _ in range(depth)]


def _repeated(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList([Block(D, H)] * depth)


def _no_super_stack(self, D, H, depth):
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth))


STACK_MISTAKES = [
    (stack_variant(forward=_branch), "no residual"),
    (stack_variant(forward=_relu_after_sum), "a ReLU after the sum"),
    (stack_variant(forward=_outer), "one residual around the whole stack"),
    (stack_variant(forward=_in_place), "in place"),
    (stack_variant(forward=_fresh_layer), "created inside forward"),
    (stack_variant(init=_python_list), "plain Python list"),
    (stack_variant(init=_repeated), "shares its weights"),
    (stack_variant(init=_no_super_stack), r"super\(\).__init__\(\)"),
    (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x).detach()), "no gradient"),
    (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x) * float("nan")), "not finite"),
    (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x)[None]), "extra leading dimension"),
]


def test_residual_stack_passes(capsys):
    lab.check_residual_stack(ResidualStack)
    assert capsys.readouterr().out.startswith("PASS  ResidualStack")


@pytest.mark.parametrize("variant, fragment", STACK_MISTAKES)
def test_residual_stack_names_each_mistake(variant, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_residual_stack(variant)


@pytest.mark.parametrize("bad", [None, [ResidualStack], ResidualStack(2, 2, 1), "ResidualStack",
                                 stack_variant(forward=lambda self, x: x.numpy())])
def test_residual_stack_bad_input(bad):
    with pytest.raises(lab.CheckError):
        lab.check_residual_stack(bad)

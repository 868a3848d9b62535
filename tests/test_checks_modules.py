"""Checks of notebook 05 (nn.Module): the reference passes, each known mistake is named."""
import numpy as np
import pytest
import torch
from torch import nn

import labsupport as lab


# ------------------------------------------------------------------ check_residual_block

class ResidualBlock(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


def residual_variant(forward=None, init=None):
    """A ResidualBlock subclass with a replaced forward and/or __init__."""
    body = {}
    if forward is not None:
        body["forward"] = forward
    if init is not None:
        body["__init__"] = init
    return type("ResidualBlock", (ResidualBlock,), body)


def test_residual_block_passes(capsys):
    lab.check_residual_block(ResidualBlock)
    assert capsys.readouterr().out == ("PASS  ResidualBlock: output shape, parameter count and forward "
                                       "values match the spec on 2 sizes\n")


def test_residual_block_any_equivalent_forward_passes(capsys):
    alt = residual_variant(forward=lambda self, x: self.fc2(self.fc1(x).clamp(min=0)) + x)
    lab.check_residual_block(alt)
    assert capsys.readouterr().out.startswith("PASS  ResidualBlock")


def _init_plain_list(self, D, H):
    nn.Module.__init__(self)
    self.layers = [nn.Linear(D, H), nn.Linear(H, D)]


def _init_no_bias(self, D, H):
    nn.Module.__init__(self)
    self.fc1, self.fc2 = nn.Linear(D, H, bias=False), nn.Linear(H, D, bias=False)


def _init_extra(self, D, H):
    ResidualBlock.__init__(self, D, H)
    self.scale = nn.Parameter(torch.ones(1))


def _init_no_super(self, D, H):
    self.fc1 = nn.Linear(D, H)


def _init_swapped(self, D, H):
    nn.Module.__init__(self)
    self.fc1, self.fc2 = nn.Linear(D, D), nn.Linear(D, D)


def _forward_in_place(self, x):
    x += self.fc2(torch.relu(self.fc1(x)))
    return x


def _forward_detached(self, x):
    return (x + self.fc2(torch.relu(self.fc1(x)))).detach()


def _forward_no_fc2(self, x):
    return torch.relu(self.fc1(x))


@pytest.mark.parametrize("variant, fragment", [
    (residual_variant(forward=lambda self, x: self.fc2(torch.relu(self.fc1(x)))),
     "the residual connection is missing"),
    (residual_variant(forward=lambda self, x: x + self.fc2(self.fc1(x))), "the ReLU between the two layers is missing"),
    (residual_variant(forward=lambda self, x: torch.relu(x + self.fc2(torch.relu(self.fc1(x))))),
     "no ReLU on the sum"),
    (residual_variant(forward=lambda self, x: x + torch.relu(self.fc2(torch.relu(self.fc1(x))))),
     "ReLU after fc2"),
    (residual_variant(forward=lambda self, x: x - self.fc2(torch.relu(self.fc1(x)))), "does not match"),
    (residual_variant(forward=_forward_in_place), "changed its input x in place"),
    (residual_variant(forward=_forward_detached), "does not require grad"),
    (residual_variant(forward=_forward_no_fc2), r"has shape \(4, 3\); expected \(4, 5\)"),
    (residual_variant(forward=lambda self, x: None), "got None"),
    (residual_variant(forward=lambda self, x: (x + self.fc2(torch.relu(self.fc1(x)))).double()), "dtype torch.float64"),
    (residual_variant(forward=lambda self, x: (x + self.fc2(torch.relu(self.fc1(x)))).tolist()), "got list"),
    (residual_variant(forward=lambda self, x: (x + self.fc2(torch.relu(self.fc1(x)))).detach().numpy()), "got numpy"),
    (residual_variant(forward=lambda self, x: x + self.fc2(torch.relu(self.fc1(x))) * float("nan")), "NaN"),
    (residual_variant(init=_init_plain_list), "plain Python list"),
    (residual_variant(init=_init_no_bias), "no bias"),
    (residual_variant(init=_init_extra), "has 39 parameters; the spec gives 38"),
    (residual_variant(init=_init_no_super), r"Call super\(\).__init__\(\) first"),
    (residual_variant(init=_init_swapped), r"fc1 is nn.Linear\(5, 5\); expected nn.Linear\(5, 3\)"),
])
def test_residual_block_mistakes(variant, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_residual_block(variant)


def _stub_forward(self, x):
    raise NotImplementedError("Exercise 1: a residual block")


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"),
    (ResidualBlock(3, 2), "got an instance of it"),
    ([ResidualBlock], "got list"),
    (np.zeros(3), "got numpy.ndarray"),
    (int, "must be a subclass of torch.nn.modules.module.Module"),
    (residual_variant(forward=_stub_forward), r"not written yet \(Exercise 1: a residual block\)"),
    (residual_variant(init=lambda self, D, H: (_ for _ in ()).throw(NotImplementedError("Exercise 1"))),
     "not written yet"),
])
def test_residual_block_bad_inputs(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_residual_block(bad)


# ------------------------------------------------------------------ check_shared_mlp

class SharedMLP(nn.Module):
    def __init__(self, D_in, H, D_out, depth):
        super().__init__()
        self.depth = depth
        self.input_layer = nn.Linear(D_in, H)
        self.hidden_layer = nn.Linear(H, H)
        self.output_layer = nn.Linear(H, D_out)

    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for _ in range(self.depth):
            h = torch.relu(self.hidden_layer(h))
        return self.output_layer(h)


def test_shared_mlp_passes(capsys):
    lab.check_shared_mlp(SharedMLP)
    assert capsys.readouterr().out == ("PASS  SharedMLP: one hidden layer shared by all uses (same parameter "
                                       "count for depth 1, 3 and 4); forward values and gradients match\n")


class SharedViaModuleList(SharedMLP):
    """The same object repeated in a ModuleList is still one shared layer: accepted."""

    def __init__(self, D_in, H, D_out, depth):
        super().__init__(D_in, H, D_out, depth)
        self.repeats = nn.ModuleList([self.hidden_layer] * depth)

    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for layer in self.repeats:
            h = torch.relu(layer(h))
        return self.output_layer(h)


def test_shared_mlp_module_list_of_one_layer_passes(capsys):
    lab.check_shared_mlp(SharedViaModuleList)
    assert capsys.readouterr().out.startswith("PASS  SharedMLP")


class NotShared(SharedMLP):
    """One new hidden layer per repetition: the classic way to miss the sharing."""

    def __init__(self, D_in, H, D_out, depth):
        nn.Module.__init__(self)
        self.input_layer = nn.Linear(D_in, H)
        self.hidden = nn.ModuleList([nn.Linear(H, H) for _ in range(depth)])
        self.output_layer = nn.Linear(H, D_out)

    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for layer in self.hidden:
            h = torch.relu(layer(h))
        return self.output_layer(h)


class NewLayerInForward(SharedMLP):
    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for _ in range(self.depth):
            h = torch.relu(nn.Linear(h.shape[1], h.shape[1])(h))
        return self.output_layer(h)


class LayersOnlyInForward(nn.Module):
    def __init__(self, D_in, H, D_out, depth):
        super().__init__()
        self.sizes, self.depth = (D_in, H, D_out), depth

    def forward(self, x):
        D_in, H, D_out = self.sizes
        return nn.Linear(H, D_out)(torch.relu(nn.Linear(D_in, H)(x)))


class UsedOnce(SharedMLP):
    def forward(self, x):
        return self.output_layer(torch.relu(self.hidden_layer(torch.relu(self.input_layer(x)))))


class OffByOne(SharedMLP):
    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for _ in range(self.depth - 1):
            h = torch.relu(self.hidden_layer(h))
        return self.output_layer(h)


class NoHiddenRelu(SharedMLP):
    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        for _ in range(self.depth):
            h = self.hidden_layer(h)
        return self.output_layer(h)


class CopiedWeights(SharedMLP):
    """Uses a detached copy of the hidden weights: same values, but gradients never reach them."""

    def forward(self, x):
        w, b = self.hidden_layer.weight.detach().clone(), self.hidden_layer.bias
        h = torch.relu(self.input_layer(x))
        for _ in range(self.depth):
            h = torch.relu(torch.nn.functional.linear(h, w, b))
        return self.output_layer(h)


class FirstUseOnly(SharedMLP):
    """Uses the layer for the first repetition only, then a detached copy: the gradient misses uses."""

    def forward(self, x):
        h = torch.relu(self.input_layer(x))
        w = self.hidden_layer.weight
        for i in range(self.depth):
            h = torch.relu(torch.nn.functional.linear(h, w if i == 0 else w.detach(), self.hidden_layer.bias))
        return self.output_layer(h)


class MissingAttribute(SharedMLP):
    def __init__(self, D_in, H, D_out, depth):
        nn.Module.__init__(self)
        self.depth = depth
        self.input_layer = nn.Linear(D_in, H)
        self.middle = nn.Linear(H, H)
        self.output_layer = nn.Linear(H, D_out)


@pytest.mark.parametrize("variant, fragment", [
    (NotShared, r"weights are not shared: .* depth=4\) has 173 parameters, 3 hidden layer\(s\) more"),
    (NewLayerInForward, "a layer is created inside forward"),
    (LayersOnlyInForward, "has no parameters. Layers created inside forward"),
    (UsedOnce, r"applies hidden_layer 1 time\(s\); the spec applies it depth=3 times"),
    (OffByOne, r"applies hidden_layer 0 time\(s\); the spec applies it depth=1 times"),
    (NoHiddenRelu, "no ReLU after hidden_layer"),
    (CopiedWeights, "hidden_layer.weight has no gradient"),
    (FirstUseOnly, "not the sum over its 3 uses"),
    (MissingAttribute, "has no attribute 'hidden_layer'"),
])
def test_shared_mlp_mistakes(variant, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_shared_mlp(variant)


class Stub(nn.Module):
    def __init__(self, *args):
        raise NotImplementedError("Exercise 2: weight sharing")


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"),
    (SharedMLP(2, 3, 4, 1), "got an instance"),
    ("SharedMLP", "got str"),
    (Stub, r"not written yet \(Exercise 2: weight sharing\)"),
    (type("SharedMLP", (SharedMLP,), {"forward": lambda self, x: [1.0]}), "got list"),
    (type("SharedMLP", (SharedMLP,), {"forward": lambda self, x: torch.zeros(8, 3, 1)}), "shape"),
])
def test_shared_mlp_bad_inputs(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_shared_mlp(bad)

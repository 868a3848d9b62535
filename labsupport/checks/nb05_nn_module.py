"""Checks for notebook 05 (nn.Module); references use the student's own parameters, so any init passes.
Example: ``lab.check_residual_stack(ResidualStack)`` prints one PASS line or raises a CheckError."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .core import CheckError, check_prediction, compare, describe, exercise, expect_tensor, passed, run_student

__all__ = ["check_my_linear", "check_layer_list_prediction", "check_residual_stack"]


def expect_class(obj: Any, base: type, name: str) -> type:
    """``obj`` if it is a class deriving from ``base``, else a CheckError (also used by 06 and 07)."""
    __tracebackhide__ = True
    if not inspect.isclass(obj) or not issubclass(obj, base):
        raise CheckError(f"{obj.__name__} must be a subclass of {base.__module__}.{base.__qualname__}" if
                         inspect.isclass(obj) else f"expected the class {name}, got " + (f"an instance of it: pass "
                         f"{name} without parentheses" if isinstance(obj, base) else describe(obj)))
    return obj


def _build(cls: Any, name: str, *args: int) -> nn.Module:
    """Create one instance of a student's nn.Module class, or say what is wrong."""
    __tracebackhide__ = True
    try:
        module = run_student(expect_class(cls, nn.Module, name), *args, what=f"{name}{args}")
    except CheckError as err:  # assigning a layer before super().__init__() raises this in nn.Module
        if "before Module.__init__() call" not in err.message:
            raise
        module = None
    if not isinstance(module, nn.Module) or "_parameters" not in vars(module):
        raise CheckError(f"{name}{args} is not a set-up nn.Module", hint="call super().__init__() first in __init__")
    return module


def _backward(out: torch.Tensor, params: list) -> None:
    __tracebackhide__ = True
    if out.grad_fn is None or (out.sum().backward() or any(p.grad is None for p in params)):
        raise CheckError("a parameter gets no gradient", hint="forward must use every layer, without .detach()")


@exercise("05.1", "a layer from raw parameters")
def check_my_linear(MyLinear: Any) -> None:
    """``MyLinear(D_in, D_out)`` loads ``nn.Linear``'s state_dict, then gives its outputs and gradients."""
    __tracebackhide__ = True
    for i, o in [(5, 3), (4, 7)]:
        layer, ref = _build(MyLinear, "MyLinear", i, o), nn.Linear(i, o).double()
        names = {n: tuple(p.shape) for n, p in layer.named_parameters() if p.requires_grad}
        if names != {"weight": (o, i), "bias": (o,)}:
            w, b = getattr(layer, "weight", torch.zeros(0)), getattr(layer, "bias", None)
            raise CheckError(f"MyLinear({i}, {o}) does not hold nn.Linear's parameters", got=str(names), hint=next(
                why for bad, why in [(not isinstance(w, nn.Parameter), "a plain tensor is not registered: wrap it in "
                                      "nn.Parameter(...)"), (not isinstance(b, nn.Parameter), "the bias is missing"),
                                     (tuple(w.shape) == (i, o), "weight is (in, out); nn.Linear keeps (out, in)"),
                                     (True, "a parameter has requires_grad=False")] if bad),
                expected=f"{{'weight': {(o, i)}, 'bias': {(o,)}}}")
        layer.double().load_state_dict(ref.state_dict())
        out = run_student(layer, x := torch.randn(6, i, dtype=torch.float64), what=f"MyLinear({i}, {o})(x)")
        compare("the output", out, ref(x), rtol=1e-10, mistakes=[(x @ ref.weight.t(), "the bias is not added")])
        _backward(out, list(layer.parameters()))
        ref(x).sum().backward()
        compare("the gradient of weight", layer.weight.grad, ref.weight.grad, rtol=1e-10)
    passed("MyLinear: registers weight and bias, loads nn.Linear's state_dict, same outputs and gradients")


@exercise("05.2", "what the optimizer sees")
def check_layer_list_prediction(prediction: Any) -> None:
    """Build notebook 05's ``ListMLP(1000, 100, 10, depth=3)``; count the scalars ``parameters()`` yields."""
    __tracebackhide__ = True
    model = nn.Module()  # the notebook's class, attribute by attribute
    model.input_layer, model.output_layer = nn.Linear(1000, 100), nn.Linear(100, 10)
    model.hidden = [nn.Linear(100, 100) for _ in range(3)]
    seen, hidden = (sum(p.numel() for p in m.parameters()) for m in (model, nn.ModuleList(model.hidden)))
    check_prediction("scalars the optimizer sees", prediction, seen, rel=1e-9, mistakes={
        seen + hidden: "that counts the hidden layers too.", 0: "the other two layers are attributes: registered."},
        why="a module is registered only when assigned to an attribute (or held in nn.ModuleList / nn.ModuleDict)")


@exercise("05.3", "a stack of residual blocks")
def check_residual_stack(ResidualStack: Any) -> None:
    """``ResidualStack(D, H, depth)``: ``depth`` blocks with their own weights, each ``h + fc2(relu(fc1(h)))``."""
    __tracebackhide__ = True
    for D, H, depth in [(5, 3, 2), (6, 4, 3)]:
        torch.manual_seed(D)
        stack, x = _build(ResidualStack, "ResidualStack", D, H, depth), torch.randn(7, D)
        out = expect_tensor(run_student(stack, x, what="ResidualStack(x)", inplace_hint="h += ... writes into "
                                        "the input: write h = h + ..."), "ResidualStack(x)", shape=(7, D))
        compare("a second call", run_student(stack, x, what="ResidualStack(x)"), out.detach(), hint="a layer "
                "created inside forward gets new random weights at each call: create layers once, in __init__")
        params, block = list(stack.parameters()), 2 * D * H + H + D
        if (n := sum(p.numel() for p in params)) != depth * block:
            raise CheckError(f"ResidualStack({D}, {H}, {depth}) has {n} parameters", expected=str(depth * block),
                             got=str(n), hint={0: "layers in a plain Python list are not registered: use nn.ModuleList",
                                               block: "one block object repeated ([block] * depth) shares its "
                                                      "weights: build a new block for each position"}.get(n))
        ref, no_res, relu_sum, inner = x, x, x, x
        for w1, b1, w2, b2 in zip(*[iter(p.detach() for p in params)] * 4):
            f = lambda h: F.linear(F.relu(F.linear(h, w1, b1)), w2, b2)  # noqa: E731
            ref, no_res, relu_sum, inner = ref + f(ref), f(no_res), F.relu(relu_sum + f(relu_sum)), f(inner)
        compare("ResidualStack(x)", out, ref, rtol=1e-4, atol=1e-6, mistakes=[
            (no_res, "no residual: each block returns h + fc2(relu(fc1(h))), not only the branch"),
            (relu_sum, "a ReLU after the sum: the block adds h after fc2 and stops there"),
            (x + inner, "one residual around the whole stack: each block adds its own input")])
        _backward(out, params)
    passed("ResidualStack: own weights per block, outputs and gradients match on 2 sizes")

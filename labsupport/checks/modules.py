"""Checks for notebook 05 (nn.Module): a module written from a spec, and a
module that reuses one layer several times (weight sharing).

Both checks build their reference from the student's *own* parameters with
``torch.nn.functional`` (so any initialisation passes), and compare parameter
counts with the number the spec implies.

Example:
    >>> import torch, labsupport as lab
    >>> from torch import nn
    >>> class ResidualBlock(nn.Module):
    ...     def __init__(self, D, H):
    ...         super().__init__()
    ...         self.fc1, self.fc2 = nn.Linear(D, H), nn.Linear(H, D)
    ...     def forward(self, x):
    ...         return x + self.fc2(torch.relu(self.fc1(x)))
    >>> lab.check_residual_block(ResidualBlock)
    PASS  ResidualBlock: output shape, parameter count and forward values match the spec on 2 sizes
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .core import CheckError, call_student, describe, expect_tensor, passed, rel_error

__all__ = ["check_residual_block", "check_shared_mlp"]

TOL = 1e-5


def expect_class(obj: Any, base: type, name: str) -> type:
    """Validate that ``obj`` is a class deriving from ``base``; return it.

    Raises :class:`CheckError` for ``None`` (the exercise cell did not run or is
    unfinished), an instance instead of the class, or a class with the wrong base.

    Example:
        >>> expect_class(torch.nn.Linear, torch.nn.Module, "Linear").__name__
        'Linear'
    """
    __tracebackhide__ = True
    if obj is None:
        raise CheckError(f"expected the class {name}, got None. Write the class in the exercise "
                         f"cell above and run that cell, then run this check again.")
    if not inspect.isclass(obj):
        if isinstance(obj, base):
            raise CheckError(f"expected the class {name} itself, got an instance of it "
                             f"({type(obj).__name__}(...)). Pass {name}, without parentheses: "
                             f"the check creates its own instances.")
        raise CheckError(f"expected the class {name}, got {describe(obj)}.")
    if not issubclass(obj, base):
        raise CheckError(f"{obj.__name__} must be a subclass of {base.__module__}.{base.__qualname__}: "
                         f"write `class {obj.__name__}({base.__qualname__}):`.")
    return obj


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _linear(module: nn.Module, attr: str, in_features: int, out_features: int, owner: str) -> nn.Linear:
    """The ``nn.Linear`` stored as ``module.<attr>`` with the given sizes, or a CheckError."""
    __tracebackhide__ = True
    layer = getattr(module, attr, None)
    if layer is None:
        raise CheckError(f"{owner} has no attribute {attr!r}; expected {attr} = nn.Linear("
                         f"{in_features}, {out_features}). Assign it in __init__ as self.{attr} = ...")
    if not isinstance(layer, nn.Linear):
        raise CheckError(f"{owner}.{attr} should be an nn.Linear, got {describe(layer)}.")
    if (layer.in_features, layer.out_features) != (in_features, out_features):
        raise CheckError(f"{owner}.{attr} is nn.Linear({layer.in_features}, {layer.out_features}); "
                         f"expected nn.Linear({in_features}, {out_features}).")
    if layer.bias is None:
        raise CheckError(f"{owner}.{attr} has no bias; the spec's layers keep theirs "
                         f"(leave bias=True, the default).")
    return layer


def _construct(cls: type, *args: int, label: str) -> nn.Module:
    __tracebackhide__ = True
    try:
        module = call_student(cls, *args, what=label)
    except CheckError as err:
        if "cannot assign module before Module.__init__() call" in str(err):
            raise CheckError(f"{label} failed: assigning a layer before the module is set up. "
                             f"Call super().__init__() first thing in __init__.") from None
        raise
    if not isinstance(module, nn.Module):
        raise CheckError(f"{label} gave {describe(module)}, not an nn.Module.")
    return module


def _forward(module: nn.Module, x: torch.Tensor, label: str) -> torch.Tensor:
    __tracebackhide__ = True
    return call_student(module, x, what=label,
                        inplace_hint="x += ... or a trailing-underscore op such as x.relu_() "
                                     "writes into the caller's tensor. Compute a new tensor: out = x + ...")


def check_residual_block(ResidualBlock: Any) -> None:
    """Check a ``ResidualBlock(D, H)`` module written from the notebook's spec:
    ``fc1 = nn.Linear(D, H)``, ``fc2 = nn.Linear(H, D)``, and
    ``forward(x) = x + fc2(relu(fc1(x)))``.

    Creates the block for two sizes, checks the layers, the parameter count
    (``2*D*H + H + D``), the output's shape and values against a reference
    computed with ``torch.nn.functional`` from the block's own weights, and that
    gradients reach both layers. Names the usual mistakes: no residual, no
    ReLU, a ReLU after the addition, layers kept in a plain list, an in-place
    update of the input.

    Example:
        >>> class Wrong(torch.nn.Module):
        ...     def __init__(self, D, H):
        ...         super().__init__()
        ...         self.fc1, self.fc2 = torch.nn.Linear(D, H), torch.nn.Linear(H, D)
        ...     def forward(self, x):
        ...         return self.fc2(torch.relu(self.fc1(x)))
        >>> check_residual_block(Wrong)
        Traceback (most recent call last):
        ...
        labsupport.checks.core.CheckError: ResidualBlock(5, 3)'s output is fc2(relu(fc1(x))): the residual connection is missing. Return x + fc2(relu(fc1(x))).
    """
    __tracebackhide__ = True
    cls = expect_class(ResidualBlock, nn.Module, "ResidualBlock")
    for case, (N, D, H) in enumerate([(4, 5, 3), (7, 6, 11)]):
        label = f"ResidualBlock({D}, {H})"
        torch.manual_seed(1000 + case)
        block = _construct(cls, D, H, label=label)
        want = 2 * D * H + H + D
        if _n_params(block) == 0:
            raise CheckError(f"{label} has no parameters. Layers kept in a plain Python list or dict "
                             f"are invisible to nn.Module: assign them as attributes "
                             f"(self.fc1 = nn.Linear(...)) or use nn.ModuleList.")
        fc1 = _linear(block, "fc1", D, H, label)
        fc2 = _linear(block, "fc2", H, D, label)
        if _n_params(block) != want:
            raise CheckError(f"{label} has {_n_params(block)} parameters; the spec gives {want} "
                             f"(fc1: {D}*{H} + {H}, fc2: {H}*{D} + {D}). Remove extra layers or "
                             f"parameters.")
        x = torch.randn(N, D, generator=torch.Generator().manual_seed(2000 + case))
        out = _forward(block, x, f"{label}(x)")
        if isinstance(out, torch.Tensor) and out.shape == (N, H):
            raise CheckError(f"{label}(x) has shape {(N, H)}; expected {(N, D)} like its input. "
                             f"fc2 maps the hidden layer back to D features before adding x.")
        out = expect_tensor(out, f"{label}(x)", shape=(N, D), dtype=torch.float32)
        with torch.no_grad():
            w1, b1, w2, b2 = fc1.weight, fc1.bias, fc2.weight, fc2.bias
            hidden = F.linear(x, w1, b1)
            expected = x + F.linear(F.relu(hidden), w2, b2)
            mistakes = [
                (F.linear(F.relu(hidden), w2, b2),
                 "is fc2(relu(fc1(x))): the residual connection is missing. Return x + fc2(relu(fc1(x)))."),
                (x + F.linear(hidden, w2, b2),
                 "is x + fc2(fc1(x)): the ReLU between the two layers is missing."),
                (F.relu(x + F.linear(F.relu(hidden), w2, b2)),
                 "is relu(x + fc2(relu(fc1(x)))): the spec adds x after the last layer, with no "
                 "ReLU on the sum."),
                (x + F.relu(F.linear(F.relu(hidden), w2, b2)),
                 "has a ReLU after fc2: the spec applies the ReLU only between fc1 and fc2."),
            ]
        err = rel_error(out, expected)
        if err > TOL:
            for value, why in mistakes:
                if rel_error(out, value) < TOL:
                    raise CheckError(f"{label}'s output {why}")
            raise CheckError(f"{label}(x) does not match x + fc2(relu(fc1(x))) computed from the "
                             f"block's own weights (max rel. error {err:.3g} > {TOL:g}).")
        if not out.requires_grad:
            raise CheckError(f"{label}(x) does not require grad: forward must not detach its result "
                             f"or run under torch.no_grad(), or the layers cannot learn.")
        out.sum().backward()
        for attr, layer in (("fc1", fc1), ("fc2", fc2)):
            if layer.weight.grad is None:
                raise CheckError(f"after backward, {label}.{attr}.weight has no gradient: forward "
                                 f"must use self.{attr} (not a copy or a new layer).")
    passed("ResidualBlock: output shape, parameter count and forward values match the spec on 2 sizes")


def _shared_reference(x: torch.Tensor, layers: dict[str, nn.Linear], depth: int,
                      skip_relu: bool = False) -> torch.Tensor:
    h = F.relu(F.linear(x, layers["input_layer"].weight, layers["input_layer"].bias))
    for _ in range(depth):
        h = F.linear(h, layers["hidden_layer"].weight, layers["hidden_layer"].bias)
        h = h if skip_relu else F.relu(h)
    return F.linear(h, layers["output_layer"].weight, layers["output_layer"].bias)


def check_shared_mlp(SharedMLP: Any) -> None:
    """Check a ``SharedMLP(D_in, H, D_out, depth)`` module that applies ONE
    ``hidden_layer = nn.Linear(H, H)`` ``depth`` times (weight sharing):
    ``h = relu(input_layer(x))``, then ``depth`` times ``h = relu(hidden_layer(h))``,
    then ``output_layer(h)``.

    Verifies that the sharing is real: the parameter count is the same for every
    depth (three layers' worth), the output matches a reference computed from
    the module's own three layers, two calls give the same output (no layer
    created inside ``forward``), and the gradient of ``hidden_layer.weight``
    equals autograd's gradient through all ``depth`` uses.

    Example:
        >>> class SharedMLP(torch.nn.Module):
        ...     def __init__(self, D_in, H, D_out, depth):
        ...         super().__init__()
        ...         self.depth = depth
        ...         self.input_layer = torch.nn.Linear(D_in, H)
        ...         self.hidden_layer = torch.nn.Linear(H, H)
        ...         self.output_layer = torch.nn.Linear(H, D_out)
        ...     def forward(self, x):
        ...         h = torch.relu(self.input_layer(x))
        ...         for _ in range(self.depth):
        ...             h = torch.relu(self.hidden_layer(h))
        ...         return self.output_layer(h)
        >>> check_shared_mlp(SharedMLP)
        PASS  SharedMLP: one hidden layer shared by all uses (same parameter count for depth 1, 3 and 4); forward values and gradients match
    """
    __tracebackhide__ = True
    cls = expect_class(SharedMLP, nn.Module, "SharedMLP")
    D_in, H, D_out, N = 6, 5, 3, 8
    want = (D_in * H + H) + (H * H + H) + (H * D_out + D_out)
    depths = (1, 3, 4)
    models, counts = {}, {}
    for depth in depths:  # count parameters for every depth first: that is where sharing shows
        label = f"SharedMLP({D_in}, {H}, {D_out}, depth={depth})"
        torch.manual_seed(3000 + depth)
        models[depth] = _construct(cls, D_in, H, D_out, depth, label=label)
        counts[depth] = _n_params(models[depth])
    for depth in sorted(depths, key=lambda d: -counts[d]):
        label = f"SharedMLP({D_in}, {H}, {D_out}, depth={depth})"
        if counts[depth] == 0:
            raise CheckError(f"{label} has no parameters. Layers created inside forward, or kept in "
                             f"a plain Python list or dict, are invisible to nn.Module: create them "
                             f"in __init__ as attributes (self.hidden_layer = nn.Linear(...)).")
        if counts[depth] != want:
            extra = counts[depth] - want
            if depth > 1 and extra > 0 and extra % (H * H + H) == 0:
                raise CheckError(f"weights are not shared: {label} has {counts[depth]} parameters, "
                                 f"{extra // (H * H + H)} hidden layer(s) more than the {want} of three "
                                 f"layers. You built a new nn.Linear for each repetition; create "
                                 f"hidden_layer once in __init__ and call it depth times in forward.")
            raise CheckError(f"{label} has {counts[depth]} parameters; expected {want} for any depth "
                             f"(input_layer {D_in}*{H}+{H}, hidden_layer {H}*{H}+{H}, output_layer "
                             f"{H}*{D_out}+{D_out}).")
    for depth in depths:
        label = f"SharedMLP({D_in}, {H}, {D_out}, depth={depth})"
        model = models[depth]
        layers = {"input_layer": _linear(model, "input_layer", D_in, H, label),
                  "hidden_layer": _linear(model, "hidden_layer", H, H, label),
                  "output_layer": _linear(model, "output_layer", H, D_out, label)}
        x = torch.randn(N, D_in, generator=torch.Generator().manual_seed(4000 + depth))
        out = expect_tensor(_forward(model, x, f"{label}(x)"), f"{label}(x)", shape=(N, D_out),
                            dtype=torch.float32)
        again = _forward(model, x, f"{label}(x)")
        if isinstance(again, torch.Tensor) and again.shape == out.shape and rel_error(again, out) > TOL:
            raise CheckError(f"{label} gives a different output each call on the same input: a layer "
                             f"is created inside forward, so it gets fresh random weights every time "
                             f"and is never trained. Create the layers once, in __init__.")
        with torch.no_grad():
            expected = _shared_reference(x, layers, depth)
        err = rel_error(out, expected)
        if err > TOL:
            for used in range(0, depth + 3):
                if used != depth and rel_error(out, _shared_reference(x, layers, used)) < TOL:
                    raise CheckError(f"{label} applies hidden_layer {used} time(s); the spec applies "
                                     f"it depth={depth} times (for _ in range(depth): ...).")
            if rel_error(out, _shared_reference(x, layers, depth, skip_relu=True)) < TOL:
                raise CheckError(f"{label}: no ReLU after hidden_layer; apply relu after every use.")
            raise CheckError(f"{label}(x) does not match the reference built from its own three layers "
                             f"(max rel. error {err:.3g} > {TOL:g}). Check the order: input_layer, "
                             f"relu, depth x (hidden_layer, relu), output_layer.")
        if not out.requires_grad:
            raise CheckError(f"{label}(x) does not require grad: forward must not detach its result "
                             f"or run under torch.no_grad().")
        # the sharing itself: hidden_layer's gradient collects all depth uses
        ref_params = {name: (layer.weight.detach().clone().requires_grad_(True),
                             layer.bias.detach().clone().requires_grad_(True))
                      for name, layer in layers.items()}
        ref_layers = {name: _Pair(*p) for name, p in ref_params.items()}
        _shared_reference(x, ref_layers, depth).pow(2).sum().backward()
        model.zero_grad()
        out.pow(2).sum().backward()
        got = layers["hidden_layer"].weight.grad
        if got is None:
            raise CheckError(f"after backward, {label}.hidden_layer.weight has no gradient: forward "
                             f"must call self.hidden_layer itself (not a copy).")
        ref = ref_params["hidden_layer"][0].grad
        if rel_error(got, ref) > 1e-4:
            raise CheckError(f"{label}: the gradient of hidden_layer.weight is not the sum over its "
                             f"{depth} uses (max rel. error {rel_error(got, ref):.3g}): the repetitions "
                             f"do not all use the same layer object.")
    passed(f"SharedMLP: one hidden layer shared by all uses (same parameter count for depth "
           f"{', '.join(map(str, depths[:-1]))} and {depths[-1]}); forward values and gradients match")


class _Pair:
    """A weight and bias pair with the attribute names of nn.Linear (for the reference)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.weight, self.bias = weight, bias

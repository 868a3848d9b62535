"""Checks for notebook 05 (nn.Module), judged on behaviour: references are built from the student's own parameters,
so any initialisation, attribute name, declaration order or container passes."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .core import (
    CheckError,
    Mistake,
    check_prediction,
    compare,
    describe,
    exercise,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    plain_tensor,
    read_prediction,
    run_student,
)
from .predictions import number_in_text, one_number
from .running import TorchCalls, expect_written

__all__ = ["check_my_linear", "check_layer_list_prediction", "check_residual_stack"]

NO_SUPER = Mistake(
    "no super().__init__()",
    None,
    why="nn.Module's own set-up never ran before __init__ stored its first attribute, so the module has no "
    "registry of parameters to put them in",
    look="the first line of __init__: what must nn.Module do before a parameter can be stored on the module?",
)
NO_GRADIENT = Mistake(
    "no gradient",
    None,
    why="forward cuts its computation from autograd's graph (.detach(), .data, torch.no_grad(), or a tensor "
    "rebuilt from numbers), so backward() cannot reach the parameters",
    look="forward: every .detach(), .data or torch.no_grad() between the parameters and the output",
)


SETTINGS_CHANGED = Mistake(
    "torch settings changed for the whole program",
    None,
    why="a call such as torch.set_grad_enabled(False) or torch.set_default_dtype(...) on a line of its own changes "
    "the setting for every line that runs after it, in the whole notebook, not just in the function that made it: "
    "nothing after it is recorded for backward() (or new tensors get another dtype), so the check's own steps, "
    "and every later cell, fail in ways that seem unrelated",
    look="your code: every torch.set_... call, and whether the setting it makes is meant to last beyond one block",
)


def _settings_changed(grad: bool, dtype: torch.dtype) -> list[str]:
    """What the block changed of the settings torch keeps for the whole program, in words."""
    changed = []
    if torch.is_grad_enabled() != grad:
        changed.append(f"gradient recording {'off' if grad else 'on'} (torch.is_grad_enabled() is now {not grad})")
    if torch.get_default_dtype() != dtype:
        changed.append(f"the default dtype {torch.get_default_dtype()} instead of {dtype}")
    return changed


@contextlib.contextmanager
def torch_settings_kept(what: str) -> Iterator[None]:
    """Run a check's block, then put back the settings torch keeps for the whole program (grad mode, the default
    dtype) as they were before it, so that the next cell and the next check start as before; when the student's
    code (``what``) changed one of them, the check fails with a sentence that says which (04, 06 and 08 use it)."""
    __tracebackhide__ = True
    grad = torch.is_grad_enabled()
    dtype = torch.get_default_dtype()
    failure = None
    try:
        yield
    except Exception as err:  # a CheckError, or the check's own step failing in the setting the code left
        failure = err
    finally:
        changed = _settings_changed(grad, dtype)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
    if changed:
        raise mistake_error(
            f"{what} left {' and '.join(changed)}, a setting for the whole program; the check has put it back",
            SETTINGS_CHANGED,
        ) from None
    if failure is not None:
        raise failure


_PUBLIC_NAMES = {nn.Module: "torch.nn.Module", torch.optim.Optimizer: "torch.optim.Optimizer"}


def expect_class(obj: Any, base: type, name: str) -> type:
    """``obj`` if it is a class deriving from ``base``, else a CheckError saying what to pass (06 uses it too)."""
    __tracebackhide__ = True
    wanted = _PUBLIC_NAMES.get(base, f"{base.__module__}.{base.__qualname__}")
    if obj is None:
        raise CheckError(
            f"{name} is None, as the exercise cell's starting code leaves it",
            hint=f"replace `{name} = None` in the exercise cell with your class, run that cell, then this one",
            usage=True,
        )
    if isinstance(obj, base):
        raise CheckError(
            f"expected the class {name}, got an instance of it", hint=f"pass {name} without parentheses", usage=True
        )
    if not inspect.isclass(obj):
        raise CheckError(
            f"expected the class {name}", got=describe(obj), hint=f"pass the class itself: {name}", usage=True
        )
    if not issubclass(obj, base):
        raise CheckError(f"{obj.__name__} must be a subclass of {wanted}", got=f"class {obj.__name__}", usage=True)
    return obj


NO_RETURN = Mistake(
    "forward returns nothing",
    None,
    why="forward computes its result but never hands it back, so its caller gets None: a function without a return "
    "statement returns None, and print only shows a value, it does not give it to the caller",
    look="the end of forward: what does it hand back?",
)


def expect_output(result: Any, call: str) -> Any:
    """``result`` of a module's forward, unless it is None (no return) or a tuple (one tensor is wanted)."""
    __tracebackhide__ = True
    if result is None:
        raise mistake_error(f"{call} returned None", NO_RETURN, expected="the output tensor", got="None")
    if isinstance(result, tuple):
        raise CheckError(
            f"{call} returned a tuple, not a tensor",
            expected="the output tensor alone",
            got=describe(result),
            hint="forward hands back one tensor, the layer's output: a comma after the returned value, or a second "
            "value beside it, makes a tuple",
            usage=True,
        )
    if isinstance(result, list) and result and all(isinstance(item, torch.Tensor) for item in result):
        raise CheckError(
            f"{call} returned a list of {len(result)} tensors, not a tensor",
            expected="the output tensor alone",
            got=describe(result),
            hint="forward hands back one tensor, the module's output: a list of intermediate results (one per layer "
            "or block, say) is not it; which one of them is the output?",
            usage=True,
        )
    return result


NOT_ON_SELF = Mistake(
    "attribute read without self",
    None,
    why="forward reads a name that __init__ stored on the module: inside forward that name is looked up as a local "
    "or notebook variable, which does not exist; what __init__ keeps lives on the object that forward gets as self",
    look="forward: the names it reads, and where __init__ put them",
)


def _attribute_without_self(err: CheckError, module: nn.Module) -> CheckError:
    """``err``, or the NOT_ON_SELF mistake if forward raised a NameError for one of the module's attributes."""
    cause = err.__cause__
    name = getattr(cause, "name", None)
    if isinstance(cause, NameError) and isinstance(name, str) and hasattr(module, name):
        return mistake_error(err.message, NOT_ON_SELF)
    return err


INTEGER_PARAMETER = Mistake(
    "integer values in a parameter",
    None,
    why="a parameter was made from a tensor of whole numbers (an integer dtype): autograd computes gradients "
    "only for floating-point tensors, so nn.Parameter refuses it; where do the values come from, and which dtype "
    "do they get?",
    look="__init__: the tensor each nn.Parameter(...) is given, and its dtype",
)


def _build(cls: Any, name: str, *args: int) -> nn.Module:
    """One instance of a student's nn.Module class (under the time limit), or a CheckError that says what is wrong."""
    __tracebackhide__ = True
    cls = expect_class(cls, nn.Module, name)
    call = f"{name}({', '.join(map(str, args))})"
    try:
        module = run_student(cls, *args, what=call)
    except CheckError as err:  # assigning a layer or a Parameter before super().__init__() raises this
        if "Only Tensors of floating point" in err.message:
            raise mistake_error(err.message, INTEGER_PARAMETER) from None
        if "before Module.__init__() call" not in err.message:
            raise
        module = None
    if not isinstance(module, nn.Module) or "_parameters" not in vars(module):
        raise mistake_error(f"{call} is not a set-up nn.Module: it has no registry of parameters", NO_SUPER)
    for name, value in vars(module)["_parameters"].items():
        if value is not None and type(value).__hash__ is None:  # nn.Module keeps its parameters in sets
            raise CheckError(
                f"{call}.{name} is a {type(value).__name__}, a tensor class whose objects cannot be hashed (it "
                "defines __eq__ without __hash__), so nn.Module cannot list its parameters",
                hint="store plain tensors in nn.Parameter: torch.randn(...), not an instance of your own tensor class",
                usage=True,
            )
    for name, value in _named_tensors(module, call):
        if value.device.type == "meta":
            raise CheckError(
                f"{call}.{name} is on the meta device, which holds shapes but no values",
                hint="create the layer's tensors on the CPU (no device='meta')",
                usage=True,
            )
    return module


def _graph_leaves(out: torch.Tensor) -> list[torch.Tensor]:
    """The tensors requiring grad that ``out`` was computed from (the leaves of its autograd graph)."""
    leaves = []
    seen = set()
    todo = [out.grad_fn]
    while todo and len(seen) < 100_000:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        for parent, _ in node.next_functions:
            todo.append(parent)
    return leaves


def _scaled(term: torch.Tensor, rest: torch.Tensor) -> Any:
    """A predicate: is the answer ``c * term + rest`` for a constant c other than 1?"""

    def scaled(got: Any) -> bool:
        if not isinstance(got, torch.Tensor) or got.shape != term.shape or got.device.type == "meta":
            return False
        part = got.detach().double().cpu() - rest
        c = float((part * term).sum() / (term * term).sum().clamp(min=1e-30))
        if not math.isfinite(c) or abs(c) < 1e-9:
            return False  # inf, NaN or zeros: no constant factor explains them
        return abs(c - 1) > 1e-6 and torch.allclose(part, c * term, rtol=1e-6, atol=1e-9)

    return scaled


def _backward(out: torch.Tensor, upstream: torch.Tensor) -> None:
    """Backpropagate ``upstream`` through ``out`` (as a scalar: backward with grad_tensors imports sympy, 1 s)."""
    (out * upstream).sum().backward()


def _same_as(expected: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-5) -> Any:
    """A predicate: is the answer a tensor close to ``expected`` (a known wrong answer)?"""

    def same(got: Any) -> bool:
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or got.device.type == "meta":
            return False
        return torch.allclose(got.detach().double().cpu(), expected.double(), rtol=rtol, atol=atol)

    return same


# ------------------------------------------------------------------ 05.1 MyLinear

UNREGISTERED = Mistake(
    "plain tensor, not registered",
    None,
    why="it is stored as a plain tensor; a module registers a tensor only when it is an nn.Parameter",
    look="__init__: what each tensor is wrapped in before it is stored on self",
)
OPERATION_AFTER_PARAMETER = Mistake(
    "operation after nn.Parameter",
    None,
    why="nn.Parameter(...) was followed by an operation (a division by a scale, .double(), .to(...), .cuda()): "
    "the result of an operation on a parameter is a plain tensor computed from it, not a parameter, so the "
    "module registers nothing; the wrapping has to come last, around the finished tensor",
    look="__init__: the line that creates the weight, and what is applied after nn.Parameter(...)",
)
BUFFER_NOT_PARAMETER = Mistake(
    "registered as a buffer",
    None,
    why="it is registered as a buffer: the module saves and moves it, but parameters() does not yield it, so no "
    "optimizer would ever train it",
    look="__init__: the call that stores the tensor: what kind of entry does it make?",
)
EQUAL_START = Mistake(
    "weights start equal",
    None,
    why="every output unit starts with the same weights (every entry one number such as zeros or ones, or one row "
    "repeated for every unit): then the units compute the same function and get the same gradient, so training "
    "can never tell them apart; the prompt asks for a random start, at any scale",
    look="__init__: what the weight's first values are made from",
)
MISSING_BIAS = Mistake(
    "missing bias",
    None,
    why="the layer has no bias: nn.Linear adds a learned vector to every output",
    look="__init__: which of nn.Linear's two tensors it creates",
)
OTHER_NAMES = Mistake(
    "names differ from nn.Linear's",
    None,
    why="load_state_dict matches by name, and nn.Linear's state_dict names its tensors 'weight' and 'bias'",
    look="__init__: the attribute names of the two parameters",
)
TRANSPOSED_WEIGHT = Mistake(
    "weight stored (in, out)",
    None,
    why="the weight is stored as (D_in, D_out); nn.Linear stores it as (D_out, D_in), one row per output",
    look="__init__: the shape given to the weight's nn.Parameter",
)
BIAS_2D = Mistake(
    "bias with two dimensions",
    None,
    why="the bias was created with two dimensions; nn.Linear's bias is a vector of D_out numbers",
    look="__init__: the shape given to the bias's nn.Parameter",
)
BIAS_SIZE = Mistake(
    "bias of the wrong length",
    None,
    why="the bias needs one number per output (D_out), not per input",
    look="__init__: the shape given to the bias's nn.Parameter",
)
BIAS_ONE_NUMBER = Mistake(
    "bias of one number",
    None,
    why="the bias holds a single number, which every output would share; nn.Linear learns a bias for each output "
    "unit, a vector of D_out numbers",
    look="__init__: the shape given to the bias's nn.Parameter",
)
FROZEN = Mistake(
    "requires_grad=False",
    None,
    why="a parameter was created with requires_grad=False, so training would never change it",
    look="__init__: the arguments each nn.Parameter(...) is given",
)
EXTRA_STATE = Mistake(
    "extra entries in state_dict",
    None,
    why="the layer holds parameters or buffers nn.Linear does not have, so its state_dict cannot load into it",
    look="__init__: every tensor it stores on self, beside the keys of nn.Linear's state_dict",
)
USES_LINEAR = Mistake(
    "uses nn.Linear / F.linear",
    None,
    why="the exercise builds the layer from raw nn.Parameters: no nn.Linear or F.linear inside",
    look="the line that hands the layer's work to nn.Linear or F.linear",
)


def _softmax(t: torch.Tensor) -> torch.Tensor:
    return torch.softmax(t, dim=-1)


#: Activations students put inside MyLinear's forward.
LAYER_ACTIVATIONS = (torch.relu, torch.sigmoid, torch.tanh, _softmax)


def _in_float32(right: torch.Tensor) -> Mistake:
    """The right output, but only to float32's precision."""
    return Mistake(
        "computed in float32",
        _same_as(right, rtol=1e-5, atol=1e-6),
        why="the output is right to float32's precision only: forward computes in float32 (a .float(), or a "
        "tensor it creates without a dtype) and casts back; a layer computes in its parameters' dtype, which "
        "is float64 after .double() (the check loads float64 weights)",
        look="forward: every .float() and every tensor it creates",
    )


def _scale_mistakes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> list[Mistake]:
    """Forward passes with a constant factor on the product, on the bias, or on the whole output."""
    right = x @ weight.t() + bias
    return [
        Mistake(
            "product scaled",
            _scaled(x @ weight.t(), bias),
            why="the product with the weight is multiplied by a constant; a scale for the initial weights belongs in "
            "__init__, and the loaded weights are used as they are",
            look="forward: every number that multiplies the product",
        ),
        Mistake(
            "bias scaled",
            _scaled(bias.expand_as(right), x @ weight.t()),
            why="the bias is multiplied by a constant; nn.Linear adds it once, as it is",
            look="forward: what happens to self.bias",
        ),
        Mistake(
            "output scaled",
            _scaled(right, torch.zeros_like(right)),
            why="the whole output, bias included, is multiplied by a constant (a scale for the initial weights moved "
            "into forward?): nn.Linear hands back the product plus the bias as they are, and a scale for the initial "
            "weights belongs in __init__",
            look="forward: every number that multiplies or divides the result",
        ),
    ]


def _linear_mistakes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> list[Mistake]:
    """The outputs of the typical wrong forward passes (float64 references)."""
    right = x @ weight.t() + bias
    mistakes = [
        Mistake(
            "bias not added",
            _same_as(x @ weight.t()),
            why="the bias is never added to the product",
            look="forward: what happens to self.bias",
        ),
        Mistake(
            "bias subtracted",
            _same_as(x @ weight.t() - bias),
            why="the bias is subtracted; nn.Linear adds it",
            look="forward: the sign in front of self.bias",
        ),
        Mistake(
            "sign flipped",
            _either(bias - x @ weight.t(), -right),
            why="the product with the weight (or the whole output) comes out with its sign flipped, as if the weight "
            "were negated: nn.Linear computes with the loaded weight and bias as they are, no minus sign on either",
            look="forward: every minus sign, and every negation of self.weight or of the result",
        ),
        Mistake(
            "one bias for every output",
            _either(*[x @ weight.t() + value for value in (bias[0], bias.sum(), bias.mean())]),
            why="every output gets the same number as its bias (one entry of it, or its sum or mean): each output "
            "unit has its own bias, and the bias vector is added entry by entry",
            look="forward: what is added to the product",
        ),
        Mistake(
            "activation inside the layer",
            _either(
                *[activation(right) for activation in LAYER_ACTIVATIONS],
                *[activation(x @ weight.t()) + bias for activation in LAYER_ACTIVATIONS],
            ),
            why="the output goes through an activation (a ReLU, sigmoid, tanh or softmax), after the bias or "
            "between the product and the bias; nn.Linear is linear, the activation is a separate module",
            look="forward: what is applied after the bias is added",
        ),
        _in_float32(right),
    ]
    mistakes.extend(_scale_mistakes(x, weight, bias))
    if weight.shape[0] == weight.shape[1]:
        mistakes.append(
            Mistake(
                "missing transpose",
                _same_as(x @ weight + bias),
                why="nn.Linear's weight holds one row per output, shape (D_out, D_in): each output is the dot product of a "
                "row of x with one row of the weight, which the product as written does not pair up",
                look="forward: the product of x with the weight",
            )
        )
    return mistakes


LOCAL_NAMES = Mistake(
    "parameters kept in local names",
    None,
    why="__init__ creates its tensors but binds them to local names, which are gone when __init__ returns: a module "
    "registers only what is assigned to its own attributes, on the object __init__ gets as self",
    look="__init__: the left-hand side of each assignment",
)


PARAMETERS_IN_A_CONTAINER = Mistake(
    "parameters in a plain list or dict",
    None,
    why="the nn.Parameters sit inside a plain Python list, tuple or dict stored on self: a module looks only at "
    "its own attributes, not inside ordinary containers, so it registers none of them, and nn.Linear's state_dict "
    "has nowhere to load",
    look="__init__: where each nn.Parameter is stored, and under which name",
)


def _parameters_in_containers(layer: nn.Module) -> bool:
    """Does ``layer`` keep nn.Parameters inside a plain list, tuple or dict attribute (where they are not registered)?"""
    for kept in vars(layer).values():
        items = kept.values() if isinstance(kept, dict) else kept if isinstance(kept, (list, tuple)) else ()
        if any(isinstance(item, nn.Parameter) for item in items):
            return True
    return False


def _keeps_locals(init: Any) -> bool:
    """Does ``init`` bind local names beyond its parameters (where ``self.`` may be missing)?"""
    code = getattr(inspect.unwrap(init), "__code__", None)
    if code is None:
        return False
    arguments = code.co_argcount + code.co_kwonlyargcount
    return code.co_nlocals > arguments


def _named(module: nn.Module, method: str, call: str) -> list[tuple[str, torch.Tensor]]:
    """What ``module.<method>()`` (named_parameters or named_buffers) yields, as (name, tensor) pairs: an override
    of the student's runs under the time limit, an error of theirs is a sentence, and what is no pair is left out."""
    __tracebackhide__ = True
    found = run_student(
        lambda: list(itertools.islice(getattr(module, method)(), MAX_PARAMETERS + 1)), what=f"{call}.{method}()"
    )
    pairs = [entry for entry in found if isinstance(entry, tuple) and len(entry) == 2]
    return [(str(name), value) for name, value in pairs if isinstance(value, torch.Tensor)]


def _named_tensors(module: nn.Module, call: str) -> list[tuple[str, torch.Tensor]]:
    """``module``'s named parameters, then its named buffers."""
    __tracebackhide__ = True
    return _named(module, "named_parameters", call) + _named(module, "named_buffers", call)


def _linear_structure(layer: nn.Module, call: str, i: int, o: int) -> None:
    """Raise a CheckError naming what keeps ``nn.Linear(i, o)``'s state_dict from loading into ``layer``."""
    __tracebackhide__ = True
    params = dict(_named(layer, "named_parameters", call))
    facts = {
        "expected": f"weight {(o, i)} and bias {(o,)}, two nn.Parameters",
        "got": ", ".join(f"{name} {tuple(p.shape)}" for name, p in params.items()) or "no parameters",
    }
    if any(isinstance(module, nn.Linear) for module in layer.modules()):
        raise mistake_error(f"{call} contains an nn.Linear", USES_LINEAR, **facts)
    buffers = dict(_named(layer, "named_buffers", call))
    for name in ("weight", "bias"):
        if name not in params and name in buffers:
            raise mistake_error(f"{call}.parameters() does not yield {name}", BUFFER_NOT_PARAMETER, **facts)
        kept = vars(layer).get(name)
        if name not in params and isinstance(kept, torch.Tensor) and kept.grad_fn is not None:
            raise mistake_error(f"{call}.parameters() does not yield {name}", OPERATION_AFTER_PARAMETER, **facts)
        if name not in params and isinstance(kept, torch.Tensor):
            raise mistake_error(f"{call}.parameters() does not yield {name}", UNREGISTERED, **facts)
    if set(params) - {"weight", "bias"}:
        if set(params) & {"W", "w", "b", "B", "weights", "biases"} or len(params) == 2:
            raise mistake_error(f"{call} names its parameters differently from nn.Linear", OTHER_NAMES, **facts)
        raise mistake_error(f"{call} has parameters nn.Linear does not have", EXTRA_STATE, **facts)
    if not params and _parameters_in_containers(layer):
        raise mistake_error(f"{call}.parameters() yields nothing", PARAMETERS_IN_A_CONTAINER, **facts)
    if not params and _keeps_locals(type(layer).__init__):
        raise mistake_error(f"{call}.parameters() yields nothing", LOCAL_NAMES, **facts)
    if "weight" not in params:
        raise CheckError(f"{call}.parameters() does not yield a weight", **facts)
    if "bias" not in params:
        raise mistake_error(f"{call}.parameters() does not yield a bias", MISSING_BIAS, **facts)
    weight_shape = tuple(params["weight"].shape)
    bias_shape = tuple(params["bias"].shape)
    if weight_shape == (i, o) and i != o:
        raise mistake_error(f"{call}.weight has shape {weight_shape}", TRANSPOSED_WEIGHT, **facts)
    if weight_shape != (o, i):
        raise CheckError(f"{call}.weight has shape {weight_shape}", **facts)
    if len(bias_shape) == 2 and o in bias_shape and params["bias"].numel() == o:
        raise mistake_error(f"{call}.bias has shape {bias_shape}", BIAS_2D, **facts)
    if bias_shape == (i,) and i != o:
        raise mistake_error(f"{call}.bias has shape {bias_shape}", BIAS_SIZE, **facts)
    if bias_shape != (o,) and params["bias"].numel() == 1:
        raise mistake_error(f"{call}.bias has shape {bias_shape}", BIAS_ONE_NUMBER, **facts)
    if bias_shape != (o,):
        raise CheckError(f"{call}.bias has shape {bias_shape}", **facts)
    frozen = [name for name, p in params.items() if not p.requires_grad]
    if frozen:
        raise mistake_error(f"{call}.{frozen[0]} has requires_grad=False", FROZEN, **facts)
    keys = set(run_student(lambda: list(layer.state_dict()), what=f"{call}.state_dict()"))
    extra = sorted(keys - {"weight", "bias"})
    if extra:
        facts["got"] = f"state_dict keys {sorted(keys)}"
        raise mistake_error(f"{call}.state_dict() holds entries nn.Linear's has not: {extra}", EXTRA_STATE, **facts)
    _random_start(params["weight"].detach(), call)


def _random_start(weight: torch.Tensor, call: str) -> None:
    """The layer's own initial weight (before the check loads nn.Linear's): finite, neither one number nor one row
    repeated (both make every output unit the same)."""
    __tracebackhide__ = True
    if weight.device.type == "meta":
        return  # the structure is all a meta layer can show; loading its state fails with its own sentence
    if not torch.isfinite(weight).all():
        raise CheckError(
            f"{call}.weight starts with NaN or inf",
            expected="a random start: finite numbers",
            got=f"{int((~torch.isfinite(weight)).sum())} of {weight.numel()} not finite",
            hint="torch.empty leaves whatever was in memory: what gives the weight its values before it is used?",
        )
    weight = weight.detach().as_subclass(torch.Tensor)  # a subclass's own == may answer anything
    if weight.numel() > 1 and bool((weight == weight.reshape(-1)[0]).all()):
        raise mistake_error(
            f"{call}.weight starts with every entry equal",
            EQUAL_START,
            expected="a random start",
            got=f"every entry {float(weight.reshape(-1)[0]):g}",
        )
    if weight.dim() == 2 and weight.shape[0] > 1 and bool((weight == weight[0]).all()):
        raise mistake_error(
            f"{call}.weight starts with every row equal",
            EQUAL_START,
            expected="a random start: a different row of weights for each output unit",
            got=f"the same row for all {weight.shape[0]} output units",
        )


def _load_linear_state(layer: nn.Module, call: str, state: dict) -> None:
    __tracebackhide__ = True
    try:
        layer.double()
        layer.load_state_dict(state)
    except Exception as exc:
        raise CheckError(f"{call}.load_state_dict(nn.Linear's state_dict) failed: {exc}".strip()) from None


STALE_COPY = Mistake(
    "a copy of the weight kept",
    None,
    why="forward uses a tensor made from the weight in __init__ (a transpose, say), and that copy is not the "
    "parameter: .double(), .to() and load_state_dict change the parameter and leave the copy as it was",
    look="__init__: the tensors kept beside the parameters, and which of them forward multiplies by",
)


@contextlib.contextmanager
def _stale_copies_named(layer: nn.Module, call: str) -> Iterator[None]:
    """A failure while the layer keeps plain tensors beside its parameters (copies made in __init__) names them."""
    __tracebackhide__ = True
    try:
        yield
    except CheckError as err:
        sizes = {p.numel() for p in _parameters(layer, call)}
        copies = [name for name, t in vars(layer).items() if isinstance(t, torch.Tensor) and t.numel() in sizes]
        named_elsewhere = err.mistake is not None and not err.mistake.startswith("raised")
        if not copies or named_elsewhere:  # a named mistake (a subtracted bias...) says more than a kept tensor
            raise
        kept = ", ".join(f"self.{name}" for name in copies)
        message = f"{err.message.splitlines()[0]} ({call} keeps {kept} beside its parameters)"
        raise mistake_error(message, STALE_COPY) from None


LINEAR_INPLACE = "forward must leave its input {name} as it is: compute the output with out-of-place operations"
LEAF_INPLACE = "leaf Variable that requires grad is being used in an in-place"
PARAMETER_INPLACE = Mistake(
    "parameter changed in place",
    None,
    why="forward changes a parameter in place (a method whose name ends in _, such as t_() or unsqueeze_(), or "
    "+= on a parameter): autograd refuses, since a parameter is a leaf whose gradient it must compute, and a "
    "layer's forward only reads its weights; an operation that returns a new tensor leaves the parameter as it is",
    look="forward: every method ending in _, and every +=, -= or *=, applied to self.weight or self.bias",
)


def _writes_into_parameters(layer: nn.Module, x: torch.Tensor, call: str) -> bool:
    """Does forward still write into a leaf that requires grad when x does not require grad (so: a parameter)?"""
    try:
        run_student(layer, x.detach().clone(), what=f"{call}(x)")
    except CheckError as err:
        return LEAF_INPLACE in err.message
    return False


def _run_layer(layer: nn.Module, x: torch.Tensor, call: str) -> Any:
    """``layer(x)``; a forward that writes into x (which requires grad here, so torch refuses) or into one of its
    parameters is told which."""
    __tracebackhide__ = True
    try:
        return run_student(layer, x, what=f"{call}(x)", inplace_hint=LINEAR_INPLACE)
    except CheckError as err:
        named = _attribute_without_self(err, layer)
        if named is not err:
            raise named from None
        if LEAF_INPLACE not in err.message:
            raise
        if _writes_into_parameters(layer, x, call):
            raise mistake_error(f"{call}(x) changed one of its parameters in place", PARAMETER_INPLACE) from None
        raise CheckError(
            f"{call}(x) changed its input x in place",
            hint=LINEAR_INPLACE.format(name="x"),
            mistake="changed x in place",
        ) from None


@contextlib.contextmanager
def _unfilled_memory_as_nan() -> Iterator[None]:
    """torch.empty gives NaN here (PyTorch's deterministic mode fills new memory), so a weight that __init__
    never fills is refused every time, not only when the memory it got happens to hold NaN or zeros."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


ONE_ROW_ONLY = Mistake(
    "one row only",
    None,
    why="the output holds the result of a single row of x: a loop over the rows that hands back its first result "
    "(a return inside the loop ends forward on its first pass) or keeps only the last one, where the layer maps "
    "the whole batch at once",
    look="forward: how many rows of x reach the tensor it returns",
)


BATCH_REDUCED = Mistake(
    "batch summed or averaged",
    None,
    why="the output has one row for the whole batch: the rows were summed or averaged over the batch dimension, "
    "but a layer maps each sample on its own and hands back one output row per input row",
    look="forward: every sum or mean, and which dimension it runs over",
)


def _batch_reduced(out: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> bool:
    """True if ``out`` is one row (shape (D_out,) or (1, D_out)) that sums or averages the batch's outputs."""
    if not isinstance(out, torch.Tensor) or out.numel() != weight.shape[0] or out.dim() > 2:
        return False
    row = plain_tensor(out).detach().double().cpu().reshape(-1)
    product = x @ weight.t()
    rows = (product.sum(0) + bias, product.mean(0) + bias, (product + bias).sum(0))
    return any(torch.allclose(row, candidate, rtol=1e-6, atol=1e-8) for candidate in rows)


def _one_row_only(out: Any, expected: torch.Tensor) -> bool:
    """True if ``out`` is the first or the last row of ``expected`` alone (shape (D_out,) or (1, D_out))."""
    if not isinstance(out, torch.Tensor) or out.numel() != expected.shape[1] or out.dim() > 2:
        return False
    row = plain_tensor(out).detach().double().cpu().reshape(-1)
    ends = (expected[0], expected[-1])
    return any(torch.allclose(row, end, rtol=1e-6, atol=1e-8) for end in ends)


RANDOM_IN_FORWARD = Mistake(
    "something random in forward",
    None,
    why="two calls on the same x give different outputs: something random runs in forward (dropout, added noise, "
    "a weight drawn at each call), but nn.Linear is deterministic, the same input giving the same output; "
    "dropout is a layer of its own, placed after the linear layer when a model wants it",
    look="forward: every random draw it makes (F.dropout, torch.randn, ...)",
)


def _compare_linear_output(
    layer: nn.Module, call: str, out: Any, x: torch.Tensor, expected: torch.Tensor, mistakes: list, where: str
) -> None:
    """The output against nn.Linear's; an unnamed difference from a forward that answers differently each call
    is named."""
    __tracebackhide__ = True
    try:
        compare(f"{call}(x)", out, expected, rtol=1e-10, atol=1e-12, mistakes=mistakes, where=where)
    except CheckError as err:
        if err.mistake is not None or not isinstance(out, torch.Tensor) or out.device.type == "meta":
            raise
        with torch.no_grad():
            again = run_student(layer, x, what=f"{call}(x), called a second time on the same x")
        comparable = isinstance(again, torch.Tensor) and again.shape == out.shape and again.device == out.device
        if not comparable or torch.equal(plain_tensor(again), plain_tensor(out).detach()):
            raise
        raise mistake_error(err.message, RANDOM_IN_FORWARD, expected=err.expected, got=err.got) from None


def _check_linear_case(cls: type, i: int, o: int, where: str) -> None:
    """One size: the state_dict loads, and outputs and gradients equal nn.Linear's (float64)."""
    __tracebackhide__ = True
    call = f"MyLinear({i}, {o})"
    with _unfilled_memory_as_nan():
        layer = _build(cls, "MyLinear", i, o)
    _linear_structure(layer, call, i, o)
    g = torch.Generator().manual_seed(10 * i + o)
    weight = torch.randn(o, i, generator=g, dtype=torch.float64)
    bias = torch.randn(o, generator=g, dtype=torch.float64)
    _load_linear_state(layer, call, {"weight": weight.clone(), "bias": bias.clone()})
    x = torch.randn(6, i, generator=g, dtype=torch.float64).requires_grad_()
    with _stale_copies_named(layer, call):
        with TorchCalls() as calls:
            out = expect_output(_run_layer(layer, x, call), f"{call}(x)")
        if F.linear in calls.seen:  # what nn.Linear runs
            raise mistake_error(f"{call}(x) calls F.linear", USES_LINEAR)
        plain_x = x.detach()
        mistakes = _linear_mistakes(plain_x, weight, bias)
        if _one_row_only(out, plain_x @ weight.t() + bias):
            shapes = {"expected": f"shape (6, {o})", "got": f"shape {tuple(out.shape)}, one row's result"}
            raise mistake_error(
                f"{call}(x) has shape {tuple(out.shape)} for x of shape (6, {i})", ONE_ROW_ONLY, **shapes
            )
        if _batch_reduced(out, plain_x, weight, bias):
            shapes = {"expected": f"shape (6, {o})", "got": f"shape {tuple(out.shape)}"}
            raise mistake_error(f"{call}(x) has one row for a batch of 6", BATCH_REDUCED, **shapes)
        _compare_linear_output(layer, call, out, plain_x, plain_x @ weight.t() + bias, mistakes, where)
    if out.grad_fn is None:
        raise mistake_error(f"the output of {call}(x) is not connected to autograd's graph", NO_GRADIENT)
    upstream = torch.randn(6, o, generator=g, dtype=torch.float64)
    run_student(_backward, out, upstream, what=f"backward through {call}(x)")
    params = dict(layer.named_parameters())
    references = {"weight": upstream.t() @ plain_x, "bias": upstream.sum(0)}
    for name, expected in references.items():
        if params[name].grad is None:
            raise mistake_error(f"{call}.{name} gets no gradient from backward()", NO_GRADIENT)
        compare(f"the gradient of {name}", params[name].grad, expected, rtol=1e-10, atol=1e-12, where=where)
    if x.grad is None:
        raise CheckError(f"x gets no gradient through {call}(x): forward cuts its input from the graph")
    compare("the gradient of x", x.grad, upstream @ weight, rtol=1e-10, atol=1e-12, where=where)
    _check_second_call(layer, call, weight, bias, g, where)


KEPT_FROM_AN_EARLIER_CALL = Mistake(
    "tensor kept from an earlier call",
    None,
    why="forward keeps a tensor it computed in an earlier call (an output, or a transpose of the weight made "
    "once) and uses it again: it holds the weights as they were then, in the memory they had then, so once other "
    "weights are loaded, or the layer is moved with .to() or .double(), the layer answers with the old ones",
    look="forward: every self.<name> = ... it sets, and whether a later call reads it back",
)


@contextlib.contextmanager
def _kept_from_an_earlier_call_named(layer: nn.Module, call: str) -> Iterator[None]:
    """A wrong second call while the layer holds a plain tensor that carries a graph (computed from a parameter in
    an earlier call) names that tensor."""
    __tracebackhide__ = True
    try:
        yield
    except CheckError as err:
        kept = [name for name, t in vars(layer).items() if isinstance(t, torch.Tensor) and t.requires_grad]
        if not kept:
            raise
        names = ", ".join(f"self.{name}" for name in kept)
        raise mistake_error(
            f"{err.message.splitlines()[0]} ({call} keeps {names} from an earlier call)",
            KEPT_FROM_AN_EARLIER_CALL,
            expected=err.expected,
            got=err.got,
        ) from None


def _check_second_call(
    layer: nn.Module, call: str, weight: torch.Tensor, bias: torch.Tensor, g: torch.Generator, where: str
) -> None:
    """A second call, on another batch of another size, after the layer was converted (new memory for every
    parameter, as .to() gives) and other weights were loaded, gives its own output and gradients: nothing is kept
    from the first call (an output, or a tensor computed from the weight, such as a transpose made once)."""
    __tracebackhide__ = True
    o, i = weight.shape
    weight = torch.randn(o, i, generator=g, dtype=torch.float64)
    bias = torch.randn(o, generator=g, dtype=torch.float64)
    layer.float()
    _load_linear_state(layer, call, {"weight": weight.clone(), "bias": bias.clone()})
    x = torch.randn(3, i, generator=g, dtype=torch.float64)
    what = (
        f"{call}(x) called a second time, on another x of shape (3, {i}), after .float(), .double() and a "
        "load_state_dict of other weights"
    )
    out = expect_output(_run_layer(layer, x, f"{call}"), what)
    with _kept_from_an_earlier_call_named(layer, call):
        compare(what, out, x @ weight.t() + bias, rtol=1e-10, atol=1e-12, where=where)
    run_student(layer.zero_grad, what=f"{call}.zero_grad()")
    upstream = torch.randn(3, o, generator=g, dtype=torch.float64)
    run_student(_backward, out, upstream, what=f"backward through {what}")
    weight_grad = layer.weight.grad
    if weight_grad is None:
        raise mistake_error(f"{call}.weight gets no gradient from the second call's backward()", NO_GRADIENT)
    compare(f"the gradient of weight after {what}", weight_grad, upstream.t() @ x, rtol=1e-10, atol=1e-12)


OUTPUT_SQUEEZED = Mistake(
    "output squeezed",
    None,
    why="forward squeezes its output, which removes every dimension of size 1: a batch of one sample loses its "
    "batch dimension (or, with D_out = 1, its feature dimension), so the next layer or the loss gets a tensor of "
    "another shape than nn.Linear gives",
    look="forward: what it does to the shape after the product",
)


def _loaded_layer(cls: type, i: int, o: int, shape: tuple[int, ...]) -> tuple[nn.Module, str, torch.Tensor, Callable]:
    """``MyLinear(i, o)`` with seeded float64 weights loaded, its name, an input of ``shape`` + (i,), and nn.Linear's
    function with those weights (the reference)."""
    __tracebackhide__ = True
    call = f"MyLinear({i}, {o})"
    layer = _build(cls, "MyLinear", i, o)
    g = torch.Generator().manual_seed(10 * len(shape) + i)
    weight = torch.randn(o, i, generator=g, dtype=torch.float64)
    bias = torch.randn(o, generator=g, dtype=torch.float64)
    _load_linear_state(layer, call, {"weight": weight, "bias": bias})
    x = torch.randn(*shape, i, generator=g, dtype=torch.float64)
    return layer, call, x, lambda t: t @ weight.t() + bias


def _check_one_row(cls: type) -> None:
    """A batch of one sample, shape (1, D_in), gives shape (1, D_out), as nn.Linear does."""
    __tracebackhide__ = True
    i, o = 4, 3
    layer, call, x, reference = _loaded_layer(cls, i, o, (1,))
    what = f"{call}(x) for a batch of one sample, x of shape (1, {i})"
    out = run_student(layer, x, what=what)
    if isinstance(out, torch.Tensor) and out.numel() == o and out.dim() < 2:
        raise mistake_error(
            f"{what} has shape {tuple(out.shape)}",
            OUTPUT_SQUEEZED,
            expected=f"shape (1, {o}), as nn.Linear gives",
            got=f"shape {tuple(out.shape)}",
        )
    compare(what, out, reference(x), rtol=1e-10, atol=1e-12)


def _leading_dimensions_note(cls: type) -> str | None:
    """None if the layer gives nn.Linear's output for input of shape (2, 3, D_in), as nn.Linear takes (*, D_in); else
    a note for the PASS line: the exercise's cases are (N, D_in), so a layer for matrices only still passes."""
    __tracebackhide__ = True
    i, o = 5, 3
    layer, call, x, reference = _loaded_layer(cls, i, o, (2, 3))
    with warnings.catch_warnings(record=True) as caught:  # a right answer gets no warning printed by the check
        warnings.simplefilter("always")
        try:
            out = run_student(layer, x, what=f"{call}(x)")
            compare(f"{call}(x)", out, reference(x), rtol=1e-10, atol=1e-12)
        except CheckError as err:
            got = err.got or "an error"
        else:
            return None
    note = (
        f"nn.Linear also takes input with more leading dimensions, shape (*, D_in), such as (2, 3, {i}) -> "
        f"(2, 3, {o}); your layer gives {got} there. `@` broadcasts over leading dimensions; mm, addmm and a "
        "2-D einsum do not."
    )
    if any("x.T" in str(warning.message) for warning in caught):
        note += (
            " And .T reverses the order of ALL the dimensions of a tensor with more than two (PyTorch warns that "
            "this use is deprecated), not only the last two: the batch dimensions move to the end."
        )
    return note


def _dtype_note(cls: type) -> str | None:
    """None if a new layer's parameters have PyTorch's default dtype, as nn.Linear's have; else a note for the PASS
    line: the check loads float64 weights and calls .float(), which hides a layer that starts in float64."""
    __tracebackhide__ = True
    layer = _build(cls, "MyLinear", 5, 3)
    default = torch.get_default_dtype()
    params = _parameters(layer, "MyLinear(5, 3)")
    dtypes = sorted({str(p.dtype) for p in params if p.is_floating_point() and p.dtype != default})
    if not dtypes:
        return None
    return (
        f"MyLinear(5, 3) starts with {' and '.join(dtypes)} parameters, where nn.Linear's are {default} (the "
        "default dtype), so a float32 batch fails there with a dtype mismatch, and nn.Linear's state_dict loads "
        f"into them as {' and '.join(dtypes)}: NumPy arrays (np.random.randn, torch.from_numpy) and dtype= make "
        "float64 unless told otherwise."
    )


COMPUTED_IN_FLOAT64 = Mistake(
    "computed in float64",
    None,
    why="forward converts to float64 (a .double(), or dtype=torch.float64) on the way: a float32 layer then answers "
    "in float64, where nn.Linear answers in the dtype of its weights and input, so the next layer or the loss gets "
    "a dtype the rest of the model does not have",
    look="forward: every .double() and every dtype= it passes",
)


def _check_float32_call(cls: type) -> None:
    """In float32, as a model uses it (the other cases are float64, to compare closely), the layer answers in
    float32 with nn.Linear's output to float32's precision."""
    __tracebackhide__ = True
    i, o = 5, 3
    call = f"MyLinear({i}, {o})"
    layer = _build(cls, "MyLinear", i, o)
    g = torch.Generator().manual_seed(32)
    state = {"weight": torch.randn(o, i, generator=g), "bias": torch.randn(o, generator=g)}
    _load_linear_state(layer, call, state)
    layer.float()
    x = torch.randn(4, i, generator=g)
    what = f"{call}(x) in float32 (after .float(), on a float32 x)"
    out = expect_output(_run_layer(layer, x, call), what)
    if isinstance(out, torch.Tensor) and out.dtype == torch.float64:
        raise mistake_error(f"{what} is float64", COMPUTED_IN_FLOAT64, expected="torch.float32", got="torch.float64")
    compare(what, out, x @ state["weight"].t() + state["bias"], rtol=1e-4, atol=1e-5)


@exercise("05.1", "a layer from raw parameters")
def check_my_linear(MyLinear: Any) -> None:
    """``MyLinear(D_in, D_out)`` loads ``nn.Linear``'s state_dict, then gives its outputs and gradients."""
    __tracebackhide__ = True
    expect_class(MyLinear, nn.Module, "MyLinear")
    expect_written(MyLinear, ("__init__", "forward"))
    if issubclass(MyLinear, nn.Linear):
        raise mistake_error("MyLinear is a subclass of nn.Linear", USES_LINEAR)
    sizes = [(4, 4), (5, 3), (3, 6)]
    with torch_settings_kept("your MyLinear"), torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        for number, (i, o) in enumerate(sizes, start=1):
            _check_linear_case(MyLinear, i, o, f"in case {number} of {len(sizes)}")
        _check_one_row(MyLinear)
        _check_float32_call(MyLinear)
        notes = [_dtype_note(MyLinear), _leading_dimensions_note(MyLinear)]
    passed("MyLinear: registers weight and bias, loads nn.Linear's state_dict, same outputs and gradients")
    for note in notes:
        if note is not None:
            print(f"      note: {note}")


# ------------------------------------------------------------------ 05.2 the prediction


@exercise("05.2", "what the optimizer sees", prediction=True)
def check_layer_list_prediction(prediction: Any) -> None:
    """Build notebook 05's ``ListMLP(1000, 100, 10, depth=3)`` (on the meta device); count what ``parameters()`` yields."""
    __tracebackhide__ = True
    answer = read_prediction("scalars the optimizer sees", prediction, form="a whole number, such as 1234")
    answer = number_in_text(one_number(answer))
    whole = isinstance(answer, int) or (isinstance(answer, float) and answer.is_integer())
    if whole and not isinstance(answer, bool) and answer > 1e300:  # too large for a float, and for any model
        raise CheckError(
            "scalars the optimizer sees: a count of numbers is a whole number >= 0, of the size of a model",
            got=f"a whole number of {len(str(int(answer)))} digits",
            hint="write one whole number, such as 1234",
            usage=True,
        )
    if isinstance(answer, bool) or not whole or answer < 0:
        raise CheckError(
            "scalars the optimizer sees: a count of numbers is a whole number >= 0",
            got=repr(answer),
            hint="write one whole number, such as 1234",
            usage=True,
        )
    model = nn.Module()  # the notebook's class, attribute by attribute
    model.input_layer = nn.Linear(1000, 100, device="meta")
    model.hidden = [nn.Linear(100, 100, device="meta") for _ in range(3)]
    model.output_layer = nn.Linear(100, 10, device="meta")
    seen = sum(p.numel() for p in model.parameters())
    hidden = sum(p.numel() for layer in model.hidden for p in layer.parameters())
    weights_only = sum(p.numel() for name, p in model.named_parameters() if name.endswith("weight"))
    hidden_weights = sum(layer.weight.numel() for layer in model.hidden)
    tensors = len(list(model.parameters()))
    notes = {
        seen + hidden: "That counts the hidden layers too: they sit in a plain Python list.",
        hidden: "That counts only the hidden layers; the other two are attributes of the module.",
        0: "The input and output layers are attributes of the module, so they are registered.",
        weights_only: "The biases are parameters too.",
        weights_only + hidden_weights: "That counts the hidden layers, which sit in a plain Python list, and leaves "
        "out the biases, which are parameters too.",
        tensors: "That is how many tensors parameters() yields; the question counts the numbers inside them.",
    }
    check_prediction(
        "scalars the optimizer sees",
        answer,
        seen,
        rel=1e-9,
        mistakes=notes,
        why="a module is registered only when assigned to an attribute (or held in nn.ModuleList / nn.ModuleDict)",
        ask="which of the model's layers does parameters() yield, weights and biases, which does it miss although "
        "forward uses them, and what happens to those when the optimizer steps?",
    )


# ------------------------------------------------------------------ 05.3 ResidualStack


@dataclasses.dataclass
class _Layer:
    """One linear layer of the student's stack, read from its parameters (float64 copies)."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight, self.bias)


@dataclasses.dataclass
class _Block:
    fc1: _Layer
    fc2: _Layer

    def branch(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(h)))


@dataclasses.dataclass
class _Parts:
    """The student's parameters sorted by role: fc1-shaped layers, fc2-shaped layers, and the rest.
    ``biases`` is "all" (one per weight), "none" (no biases at all), "some" (fewer biases than weights: some
    layers have none) or "mismatch"."""

    fc1: list[_Layer]
    fc2: list[_Layer]
    others: list[tuple[int, ...]]
    biases: str


def _layers(weights: list[torch.Tensor], biases: list[torch.Tensor]) -> tuple[list[_Layer], str]:
    """Pair each weight with the bias of the same rank (the order of ``parameters()``)."""
    if not biases:
        return [_Layer(w, None) for w in weights], "none"
    if len(biases) < len(weights):
        return [_Layer(w, None) for w in weights], "some"
    if len(biases) > len(weights):
        return [_Layer(w, None) for w in weights], "mismatch"
    return [_Layer(w, b) for w, b in zip(weights, biases)], "all"


def _shaped(params: list[torch.Tensor], shape: tuple[int, ...]) -> list[torch.Tensor]:
    return [p for p in params if tuple(p.shape) == shape]


def _parts(params: list[torch.Tensor], D: int, H: int, transposed: bool = False) -> _Parts:
    """Read the layers off the parameters by shape; ``transposed``: weights stored as (in, out), used as h @ w."""
    if transposed:
        fc1, biases1 = _layers([w.t() for w in _shaped(params, (D, H))], _shaped(params, (H,)))
        fc2, biases2 = _layers([w.t() for w in _shaped(params, (H, D))], _shaped(params, (D,)))
    else:
        fc1, biases1 = _layers(_shaped(params, (H, D)), _shaped(params, (H,)))
        fc2, biases2 = _layers(_shaped(params, (D, H)), _shaped(params, (D,)))
    known = {(H, D), (D, H), (H,), (D,)}
    others = [tuple(p.shape) for p in params if tuple(p.shape) not in known]
    biases = biases1 if biases1 == biases2 else "some"
    if "mismatch" in (biases1, biases2):
        biases = "mismatch"
    elif {biases1, biases2} == {"none"}:
        biases = "none"
    return _Parts(fc1, fc2, others, biases)


def _stack(blocks: list[_Block], x: torch.Tensor) -> torch.Tensor:
    h = x
    for block in blocks:
        h = h + block.branch(h)
    return h


def _orders(parts: _Parts) -> Iterator[list[_Block]]:
    """Every stack the layers can form: any pairing of fc1 with fc2 layers, blocks in any order (up to 3 blocks)."""
    if len(parts.fc1) > 3:
        yield [_Block(a, b) for a, b in zip(parts.fc1, parts.fc2)]
        return
    for pairing in itertools.permutations(parts.fc2):
        blocks = [_Block(a, b) for a, b in zip(parts.fc1, pairing)]
        for order in itertools.permutations(blocks):
            yield list(order)


def _per_block(blocks: list[_Block], x: torch.Tensor, block_output: Callable) -> torch.Tensor:
    """The stack's output when each block returns ``block_output(block, h)``."""
    h = x
    for block in blocks:
        h = block_output(block, h)
    return h


def _stack_mistakes(blocks: list[_Block], x: torch.Tensor, depth: int) -> list[Mistake]:
    """What the typical wrong forward passes give, computed from the student's own layers."""

    def wrong(block_output: Callable) -> Callable[[Any], bool]:
        return _same_as(_per_block(blocks, x, block_output))

    return [
        Mistake(
            "no residual",
            wrong(lambda b, h: b.branch(h)),
            why="each block returns only its branch, without adding h back",
        ),
        Mistake(
            "ReLU after the sum",
            wrong(lambda b, h: torch.relu(h + b.branch(h))),
            why="a ReLU is applied after adding h; the block stops at the sum",
        ),
        Mistake(
            "missing ReLU",
            wrong(lambda b, h: h + b.fc2(b.fc1(h))),
            why="the branch has no ReLU between fc1 and fc2",
        ),
        Mistake(
            "ReLU on the branch output",
            wrong(lambda b, h: h + torch.relu(b.branch(h))),
            why="the branch ends with a ReLU after fc2",
        ),
        Mistake(
            "blocks read x", wrong(lambda b, h: h + b.branch(x)), why="every block reads the stack's input x, not h"
        ),
        Mistake(
            "blocks add x back",
            wrong(lambda b, h: x + b.branch(h)),
            why="every block adds the stack's input x to its branch instead of its own input h: the skip connection "
            "of each block carries what that block was given",
            look="forward: the two terms of each block's sum, and which variable each one reads",
        ),
        Mistake(
            "residual averaged",
            wrong(lambda b, h: (h + b.branch(h)) / 2),
            why="each block returns the mean of h and its branch, (h + branch) / 2: a residual block adds the branch "
            "to h, with no factor",
        ),
        Mistake(
            "ReLU on the block's input",
            wrong(lambda b, h: h + b.fc2(b.fc1(torch.relu(h)))),
            why="the ReLU is applied to h, before fc1; in the block it sits between fc1 and fc2: fc2(relu(fc1(h)))",
        ),
        Mistake(
            "ReLU on the skip",
            wrong(lambda b, h: torch.relu(h) + b.branch(h)),
            why="the skip carries relu(h), not h: the skip connection adds the block's input as it is, and the only "
            "ReLU of the block sits inside the branch, between fc1 and fc2",
            look="the block's forward: the term of its sum that is not the branch",
        ),
        *_weighted_sum_mistakes(blocks, x),
        *_wiring_mistakes(blocks, x, depth),
        *_block_form_mistakes(blocks, x),
    ]


# The factors (on h, on the branch) students put into a block's sum; (1/2, 1/2) is "residual averaged".
RESIDUAL_FACTORS = [(1, -1), (-1, 1), (1, 0.5), (1, 2), (1, 0.1), (1, 2**-0.5), (2, 1), (0.5, 1), (2**-0.5, 2**-0.5)]


def _term(factor: float, name: str) -> str:
    if factor == 1:
        return name
    if factor == -1:
        return f"-{name}"
    return f"{factor:.3g} * {name}"


def _weighted_sum_mistakes(blocks: list[_Block], x: torch.Tensor) -> list[Mistake]:
    """Blocks whose sum weights h or the branch by a factor (or subtracts one), and one block without its skip."""
    mistakes = []
    factors = list(RESIDUAL_FACTORS)
    if len(blocks) > 2:
        factors.append((1, 1 / len(blocks)))  # the branch divided by the depth
    for on_h, on_branch in factors:
        total = f"{_term(on_h, 'h')} + {_term(on_branch, 'branch')}".replace("+ -", "- ")
        twice = ""
        if (on_h, on_branch) == (2, 1):
            twice = " (is h added twice, once inside the block and once more where the stack calls it?)"
        mistakes.append(
            Mistake(
                "residual scaled",
                _same_as(_weighted_stack(blocks, x, on_h, on_branch)),
                why=f"each block returns {total}{twice}: a residual block adds its branch to h, both as they are, "
                "with no factor and no minus sign",
                look="the block's forward: the two terms of its sum, their factors and signs",
            )
        )
    if len(blocks) < 2:
        return mistakes  # with one block, a missing skip is "no residual"
    for number in range(len(blocks)):
        position = {0: "the first block", len(blocks) - 1: "the last block"}.get(number, f"block {number + 1}")
        mistakes.append(
            Mistake(
                "one block without its residual",
                _same_as(_one_without_skip(blocks, x, number)),
                why=f"{position} of {len(blocks)} returns only its branch, without adding h back; the other "
                "blocks add it",
                look=f"forward: where {position} is applied, and what it returns",
            )
        )
    return mistakes + _several_without_skip(blocks, x)


def _several_without_skip(blocks: list[_Block], x: torch.Tensor) -> list[Mistake]:
    """Two or more blocks (not all) that return only their branch: only some blocks keep the skip."""
    if len(blocks) > 4:
        return []
    mistakes = []
    for size in range(2, len(blocks)):
        for skipless in itertools.combinations(range(len(blocks)), size):
            numbers = " and ".join(str(number + 1) for number in skipless)
            mistakes.append(
                Mistake(
                    "some blocks without their residual",
                    _same_as(_without_skips(blocks, x, set(skipless))),
                    why=f"blocks {numbers} of {len(blocks)} return only their branch, without adding h back; the "
                    "other blocks add it: every block of the stack is a residual block",
                    look="forward: where each block is applied, and which of them add h back",
                )
            )
    return mistakes


def _without_skips(blocks: list[_Block], x: torch.Tensor, skipless: set[int]) -> torch.Tensor:
    """The stack's output when the blocks numbered in ``skipless`` return only their branch."""
    h = x
    for number, block in enumerate(blocks):
        h = block.branch(h) if number in skipless else h + block.branch(h)
    return h


def _weighted_stack(blocks: list[_Block], x: torch.Tensor, on_h: float, on_branch: float) -> torch.Tensor:
    """The stack's output when each block returns ``on_h * h + on_branch * branch``."""
    h = x
    for block in blocks:
        h = on_h * h + on_branch * block.branch(h)
    return h


def _one_without_skip(blocks: list[_Block], x: torch.Tensor, skipless: int) -> torch.Tensor:
    """The stack's output when block number ``skipless`` returns only its branch."""
    h = x
    for number, block in enumerate(blocks):
        if number == skipless:
            h = block.branch(h)
        else:
            h = h + block.branch(h)
    return h


# Activations students put in the branch instead of the ReLU (relu6 differs only above 6: the check's x has a
# large row, which takes some pre-activations there).
OTHER_ACTIVATIONS = (torch.tanh, torch.sigmoid, F.gelu, F.leaky_relu, F.elu, F.softplus, F.silu, F.relu6, F.hardtanh)


def _wiring_mistakes(blocks: list[_Block], x: torch.Tensor, depth: int) -> list[Mistake]:
    """Wrong ways of wiring the blocks into a stack (the blocks themselves right)."""
    mistakes = [
        Mistake(
            "one residual around the whole stack",
            _same_as(x + _chain(blocks, x)),
            why="the input is added once, around the whole stack, instead of once per block",
        ),
        Mistake(
            "input added again at the end",
            _same_as(x + _stack(blocks, x)),
            why="each block adds its own input back already, and forward adds the stack's input x once more to the "
            "last block's output: the stack's output is the last block's sum, with nothing added after it",
            look="forward: what is done with the result after the loop over the blocks",
        ),
        Mistake(
            "ReLU on the stack's output",
            _same_as(torch.relu(_stack(blocks, x))),
            why="a ReLU is applied to the stack's output; the stack ends with the last block's sum",
        ),
        Mistake(
            "only the last block counts",
            _same_as(x + blocks[-1].branch(x)),
            why="each block is applied to x and the result overwrites h, so only the last block's output is kept",
        ),
        Mistake("returns the input", _same_as(x), why="forward returns its input unchanged"),
        Mistake(
            "blocks side by side",
            _either(
                sum(x + block.branch(x) for block in blocks),
                sum(x + block.branch(x) for block in blocks) / len(blocks),
            ),
            why="every block was applied to the stack's input x and their outputs were added up (or averaged): the "
            "blocks sit "
            "side by side instead of one after the other, where each block works on what the block before it "
            "returned (adding or averaging their outputs does not chain them)",
            look="forward: what each block is given, and what happens to its output",
        ),
        Mistake(
            "not a ReLU",
            _either(*[_stack_with(blocks, x, act) for act in OTHER_ACTIVATIONS]),
            why="the branch uses another activation; the block is fc2(relu(fc1(h)))",
        ),
        Mistake(
            "all earlier outputs added",
            _either(*_dense_sums(blocks, x)),
            why=DENSE_SUMS_WHY,
            look="forward: what each block's sum adds to its branch, and what is returned after the loop",
        ),
        Mistake(
            "each block applied twice",
            _same_as(_stack([b for block in blocks for b in (block, block)], x)),
            why="forward applies every block twice",
        ),
    ]
    return mistakes + _loop_bound_mistakes(blocks, x, depth)


def _dense_sums(blocks: list[_Block], x: torch.Tensor) -> list[torch.Tensor]:
    """What DenseNet-style wiring gives: each block adds the sum of all earlier outputs (x included) to its branch
    (of the last output, or of that sum), or the stack returns the sum of every block's output."""
    results = []
    for branch_of_sum in (False, True):
        outputs = [x]
        for block in blocks:
            total = sum(outputs)
            outputs.append(total + block.branch(total if branch_of_sum else outputs[-1]))
        results.append(outputs[-1])
    outputs = [x]
    for block in blocks:
        outputs.append(outputs[-1] + block.branch(outputs[-1]))
    results.append(sum(outputs))
    return results


DENSE_SUMS_WHY = (
    "each block's sum takes in the outputs of all earlier blocks (and x), as a DenseNet's blocks do, or the stack "
    "returns the sum of every block's output: a residual block adds back only its own input, the output of the "
    "block just before it, and the stack returns what the last block returns"
)


def _loop_bound_mistakes(blocks: list[_Block], x: torch.Tensor, depth: int) -> list[Mistake]:
    """A loop over the blocks that ends early: a return inside it, or one block too few."""
    mistakes = []
    if len(blocks) == depth and depth > 2:  # with two blocks, the first alone is also "a block skipped"
        mistakes.append(
            Mistake(
                "return inside the loop",
                _same_as(_stack(blocks[:1], x)),
                why="forward hands back the output of the first block alone: its return runs in the first round of the "
                "loop over the blocks (a return indented into the loop's body), so the loop never reaches the others",
                look="forward: the indentation of its return",
            )
        )
    if len(blocks) == depth and depth > 1:
        mistakes.append(
            Mistake(
                "a block skipped in forward",
                _either(_stack(blocks[:-1], x), _stack(blocks[1:], x)),
                why=f"forward applies only {depth - 1} of the {depth} blocks (an off-by-one in its loop)",
            )
        )
    return mistakes


def _stack_with(blocks: list[_Block], x: torch.Tensor, activation: Any) -> torch.Tensor:
    h = x
    for block in blocks:
        h = h + block.fc2(activation(block.fc1(h)))
    return h


def _chain(blocks: list[_Block], x: torch.Tensor) -> torch.Tensor:
    h = x
    for block in blocks:
        h = block.branch(h)
    return h


def _layer_norm(h: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(h, h.shape[-1:])


def _block_form_mistakes(blocks: list[_Block], x: torch.Tensor) -> list[Mistake]:
    """Blocks that combine h and the branch otherwise than by a sum, or move the ReLU, or normalise."""
    return [
        Mistake(
            "skip multiplied",
            _same_as(_per_block(blocks, x, lambda b, h: h * b.branch(h))),
            why="each block multiplies h by its branch (h * branch): a skip connection adds the block's input to "
            "the branch, so a block can start close to the identity",
            look="the block's forward: the operator between h and the branch",
        ),
        Mistake(
            "ReLU after fc2",
            _same_as(_per_block(blocks, x, lambda b, h: h + torch.relu(b.fc2(b.fc1(h))))),
            why="the branch applies its ReLU after fc2, with none between fc1 and fc2: the block's branch is "
            "fc2(relu(fc1(h))), the ReLU on fc1's output",
            look="the block's forward: which layer's output the ReLU is applied to",
        ),
        Mistake(
            "ReLU moved after the sum",
            _same_as(_per_block(blocks, x, lambda b, h: torch.relu(h + b.fc2(b.fc1(h))))),
            why="the block's only ReLU comes after adding h, with none between fc1 and fc2 (the original ResNet "
            "block's last step, without its inner one): this block ends at the sum, and its ReLU acts on fc1's output",
            look="the block's forward: where the ReLU is applied",
        ),
        Mistake(
            "normalised in the block",
            _either(
                _per_block(blocks, x, lambda b, h: h + b.branch(_layer_norm(h))),
                _per_block(blocks, x, lambda b, h: _layer_norm(h + b.branch(h))),
                _per_block(blocks, x, lambda b, h: h + b.branch(F.normalize(h, dim=-1))),
            ),
            why="each block normalises h (a layer norm before the branch or after the sum, as in a transformer): "
            "this block has no normalisation, only h + fc2(relu(fc1(h)))",
            look="the block's forward: every operation besides fc1, the ReLU, fc2 and the sum",
        ),
    ]


def _either(*candidates: torch.Tensor) -> Any:
    tests = [_same_as(candidate) for candidate in candidates]

    def either(got: Any) -> bool:
        return any(test(got) for test in tests)

    return either


FRESH_LAYERS = Mistake(
    "layers created in forward",
    None,
    why="two calls on the same input give different outputs, so something random runs in forward: a layer "
    "created inside forward starts from new random weights at every call, and dropout (which this block does "
    "not have) draws a new mask at every call",
    look="forward: every layer or random draw it creates at each call",
)
NOT_REGISTERED = Mistake(
    "layers not registered",
    None,
    why="some layers are kept where nn.Module does not look (a plain Python list, dict or tuple), so parameters(), "
    "the optimizer and state_dict() miss them",
    look="__init__: the container that holds the blocks: does nn.Module look inside it?",
)
NO_BIASES = Mistake(
    "layers without bias",
    None,
    why="the layers have no bias: fc1 and fc2 are nn.Linear layers, each with a weight and a bias",
    look="__init__: the arguments given to each nn.Linear",
)
SOME_WITHOUT_BIAS = Mistake(
    "some layers without bias",
    None,
    why="some of the layers have a bias and others have none: fc1 and fc2 are both nn.Linear layers, and each "
    "keeps a weight and a bias unless it is told not to",
    look="__init__: the arguments given to each nn.Linear, fc1's beside fc2's",
)
WRONG_HIDDEN = Mistake(
    "wrong hidden size",
    None,
    why="the hidden layer of each block does not have H units: fc1 maps D features to H, and fc2 maps H back to D",
    look="__init__: the sizes given to fc1 and fc2",
)
SHARED_BLOCK = Mistake(
    "one block repeated",
    None,
    why="the same fc1 and fc2 serve every position (one block object repeated, or one pair of layers applied "
    "depth times in a loop), so all positions share their weights",
    look="__init__: how many block objects are created: does [Block(...)] * depth, or a loop over one pair of "
    "layers, make new ones?",
)
SHARED_LAYER = Mistake(
    "one layer shared by all blocks",
    None,
    why="one fc1 (or fc2) layer object serves every block, so the blocks share its weights",
    look="__init__: where fc1 and fc2 are created, and how many times",
)
DETACHED = Mistake(
    "part of the graph detached",
    None,
    why="the outputs are right but the gradients differ: part of forward is cut from the graph (.detach(), .data)",
    look="forward: every .detach() or .data on the way from x to the output",
)
INPLACE_SUM = Mistake(
    "in-place sum in forward",
    None,
    why="forward changes h in place (`h += ...`) after a layer used it: fc1 keeps the h it was given for backward, "
    "and the in-place sum overwrites it, so autograd refuses to backpropagate (a copy made first does not help: "
    "the copy is what fc1 kept)",
    look="forward: the line that adds the branch to h: does it make a new tensor, or write into the one fc1 kept?",
)
STACK_INPLACE = (
    "an in-place operation (an augmented assignment such as +=, or a method ending in _) on the caller's {name} "
    "writes into the caller's tensor: a block's sum should be a new tensor, and {name} stay as it was given"
)


EXTRA_LAYERS = Mistake(
    "layers besides fc1 and fc2",
    None,
    why="besides each block's fc1 and fc2, the stack holds other parameters (a normalisation layer, an output "
    "layer, a scale): a block here is fc1, a ReLU and fc2 around a skip connection, and nothing else",
    look="__init__: every layer or nn.Parameter created besides fc1 and fc2",
)
CONCATENATED = Mistake(
    "skip concatenated",
    None,
    why="the rows of the output multiply with every block: the skip connection puts h and the branch side by side "
    "(torch.cat, torch.stack) instead of adding them element by element (a sum keeps the input's shape)",
    look="the block's forward: how h and the branch are combined",
)


def _concatenated(result: Any, rows: int, D: int) -> bool:
    """Whether ``result`` has D columns and a whole multiple (above one) of the input's rows."""
    if not isinstance(result, torch.Tensor) or result.dim() != 2 or result.shape[1] != D:
        return False
    return result.shape[0] > rows and result.shape[0] % rows == 0


def _wrong_count(k: int, depth: int) -> Mistake:
    if abs(k - depth) == 1:
        return Mistake(
            "off-by-one depth",
            None,
            why=f"the stack builds {k} blocks for depth={depth}, one too {'many' if k > depth else 'few'}: an "
            "off-by-one in the loop that creates them, or a count that does not come from depth",
            look="__init__: the range of the loop that builds the blocks, and where its count comes from",
        )
    return Mistake(
        "wrong number of blocks",
        None,
        why=f"the stack builds {k} blocks for depth={depth}: depth does not set the number of blocks",
        look="__init__: how many blocks it builds, and where that count comes from",
    )


def _hidden_sizes(shapes: list[tuple[int, ...]], D: int) -> set[int]:
    """The hidden sizes K of D -> K -> D layers that the weight shapes describe (empty if one is no such layer)."""
    sizes = set()
    for shape in shapes:
        if len(shape) != 2:
            continue
        if shape[1] == D:
            sizes.add(shape[0])
        elif shape[0] == D:
            sizes.add(shape[1])
        else:
            return set()
    return sizes


def _structure(parts: _Parts, out: torch.Tensor, x: torch.Tensor, depth: int, facts: dict, call: str) -> None:
    """Raise a CheckError if the parameters are not ``depth`` blocks' worth, naming the cause when behaviour shows it."""
    __tracebackhide__ = True
    k1 = len(parts.fc1)
    k2 = len(parts.fc2)
    if k1 == k2 == depth and parts.biases == "all" and not parts.others:
        return
    message = f"{call}.parameters() does not hold {depth} blocks' layers"
    if parts.others and not parts.fc1 and not parts.fc2 and len(_hidden_sizes(parts.others, x.shape[1])) == 1:
        raise mistake_error(message, WRONG_HIDDEN, **facts)
    if parts.others or parts.biases == "mismatch":
        if k1 == k2 == depth:
            raise mistake_error(message, EXTRA_LAYERS, **facts)
        raise CheckError(message, **facts)
    if k1 == k2 == depth and parts.biases == "some":
        raise mistake_error(message, SOME_WITHOUT_BIAS, **facts)
    if k1 == k2 == depth:
        raise mistake_error(message, NO_BIASES, **facts)
    if k1 == k2 and k1 >= 1:
        only = _Block(parts.fc1[0], parts.fc2[0])
        if k1 == 1 and _same_as(_stack([only] * depth, x))(out):
            raise mistake_error(message, SHARED_BLOCK, **facts)
        if any(_same_as(_stack(blocks, x))(out) for blocks in _orders(parts)):
            raise mistake_error(message, _wrong_count(k1, depth), **facts)
    if {k1, k2} == {1, depth}:
        fc1 = parts.fc1 * depth if k1 == 1 else parts.fc1
        fc2 = parts.fc2 * depth if k2 == 1 else parts.fc2
        if _same_as(_stack([_Block(a, b) for a, b in zip(fc1, fc2)], x))(out):
            raise mistake_error(message, SHARED_LAYER, **facts)
    raise CheckError(message, **facts)


def _matching_stack(
    readings: list[_Parts], out: torch.Tensor, x: torch.Tensor, depth: int, call: str, where: str
) -> list:
    """The blocks (read from the student's parameters) whose stack gives ``out``; else a CheckError.
    ``readings`` are ways to read the parameters, the first being nn.Linear's layout."""
    __tracebackhide__ = True
    with torch.no_grad():
        for reading in readings:
            for blocks in _orders(reading):
                if _same_as(_stack(blocks, x))(out):
                    return blocks
        canonical = [_Block(a, b) for a, b in zip(readings[0].fc1, readings[0].fc2)]
        mistake = first_mistake(out, _stack_mistakes(canonical, x, depth))
        reference = _stack(canonical, x)
    where = where + " (blocks built from your own parameters)"
    try:
        compare(f"{call}(x)", out, reference.float(), rtol=1e-4, atol=1e-5, where=where)
    except CheckError as err:
        if mistake is None:
            raise
        raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None
    return canonical


def _check_gradients(
    stack: nn.Module, out: torch.Tensor, copies: list, blocks: list, x: torch.Tensor, call: str, where: str
) -> None:
    """Backpropagate a random upstream gradient; every parameter's gradient equals the reference's."""
    __tracebackhide__ = True
    params = list(stack.parameters())
    if out.grad_fn is None:
        raise mistake_error(f"the output of {call}(x) is not connected to autograd's graph", NO_GRADIENT)
    for p in params:
        p.grad = None
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(53), dtype=out.dtype)
    try:
        run_student(_backward, out, upstream, what=f"backward through {call}(x)")
    except CheckError as err:
        if err.usage or "modified by an inplace operation" not in err.message:
            raise
        message = f"backward through {call}(x) failed: a tensor that forward's layers kept for backward was changed in place afterwards"
        raise mistake_error(message, INPLACE_SUM) from None
    reference = _stack(blocks, x)
    expected = torch.autograd.grad((reference * upstream.double()).sum(), copies, allow_unused=True)
    for number, (p, want) in enumerate(zip(params, expected), start=1):
        label = f"parameter {number} of {call} (shape {tuple(p.shape)})"
        if p.grad is None:
            raise mistake_error(f"{label} gets no gradient from backward()", NO_GRADIENT)
        want = torch.zeros_like(p, dtype=torch.float64) if want is None else want
        try:
            compare(f"the gradient of {label}", p.grad, want.to(p.grad.dtype), rtol=1e-3, atol=1e-5, where=where)
        except CheckError as err:
            raise mistake_error(err.message, DETACHED, expected=err.expected, got=err.got) from None


#: More tensors than any ResidualStack of the check holds: parameters() yielding past it never ends, or lies.
MAX_PARAMETERS = 10_000


def _first_parameters(module: nn.Module) -> list:
    """Up to MAX_PARAMETERS + 1 of what ``module.parameters()`` yields (run under the check's time limit)."""
    found = module.parameters()
    if found is None or not hasattr(found, "__iter__"):
        raise TypeError(f"parameters() returned {type(found).__name__}, not an iterable of tensors")
    return list(itertools.islice(found, MAX_PARAMETERS + 1))


def _parameters(module: nn.Module, call: str) -> list[torch.Tensor]:
    """``module.parameters()`` as a list of tensors, or a CheckError if an override yields something else."""
    __tracebackhide__ = True
    params = run_student(_first_parameters, module, what=f"{call}.parameters()")
    if len(params) > MAX_PARAMETERS:
        raise CheckError(
            f"{call}.parameters() yields more than {MAX_PARAMETERS} tensors",
            hint="an override of parameters() that never ends (itertools.repeat, a loop that always yields)",
            usage=True,
        )
    for p in params:
        if not isinstance(p, torch.Tensor):
            raise CheckError(f"{call}.parameters() yields a {type(p).__name__}, not a tensor", usage=True)
    return params


MODULE_LIST_CALLED = Mistake(
    "nn.ModuleList called",
    None,
    why="forward calls the container of the blocks as if it were a layer: an nn.ModuleList (like a Python list) only "
    "holds its modules, it has no forward of its own, so calling it runs nothing; each block inside it has to be "
    "called in turn",
    look="forward: what is called with x, and what that object is",
)


def _run_stack(stack: nn.Module, x: torch.Tensor, call: str) -> Any:
    """``stack.forward(x)``; calling the nn.ModuleList itself, or a block's attribute read without self, is named."""
    __tracebackhide__ = True
    try:
        return run_student(stack.forward, x, what=f"{call}(x)", inplace_hint=STACK_INPLACE)
    except CheckError as err:
        if re.search(r"called an nn\.Module(List|Dict) as if|'(list|tuple)' object is not callable", err.message):
            raise mistake_error(f"{call}(x) called the container of its blocks", MODULE_LIST_CALLED) from None
        named = _attribute_without_self(err, stack)
        if named is err:
            raise
        raise named from None


MODULE_CHANGED = Mistake(
    "forward changes the module",
    None,
    why="calling the stack changes the stack itself: after a call its layers or their weights are not the ones it "
    "had before (a layer or a container assigned anew in forward, a block appended, weights reset or changed in "
    "place), so every call runs another network, and an optimizer, built once from parameters(), trains tensors "
    "that forward no longer uses (or misses the new ones); forward only uses the layers the module holds",
    look="forward: every assignment to an attribute of self, every append, and every call that changes a layer's weights",
)


def _snapshot(stack: nn.Module) -> tuple | None:
    """The submodules and parameters of ``stack`` (identities and values), read through nn.Module's own methods
    (an override is not asked); None when they cannot be read."""
    try:
        modules = [id(m) for m in itertools.islice(nn.Module.modules(stack), MAX_PARAMETERS)]
        found = itertools.islice(nn.Module.parameters(stack), MAX_PARAMETERS)
        params = [(id(p), p.detach().clone()) for p in found]
    except Exception:  # noqa: BLE001 - a module that cannot be read is judged by the steps after this one
        return None
    return modules, params


def _id_of(item: Any) -> int:
    """The identity kept in a snapshot: a module's id, or the id of a (id, values) pair's parameter."""
    return item[0] if isinstance(item, tuple) else item


def _changed_part(before: tuple, after: tuple) -> str | None:
    """What differs between two snapshots, in words; None when nothing does."""
    for kind, old, new in (("submodules", before[0], after[0]), ("parameter tensors", before[1], after[1])):
        if len(old) != len(new):
            return f"it holds {len(new)} {kind} where it held {len(old)}"
        if [_id_of(item) for item in old] != [_id_of(item) for item in new]:
            return f"some of its {kind} were replaced by new ones"
    for (_, old), (_, new) in zip(before[1], after[1]):
        if old.shape != new.shape or not torch.equal(old, new):
            return "the values of its parameters changed"
    return None


def _check_repeatable(stack: nn.Module, x: torch.Tensor, out: torch.Tensor, call: str) -> None:
    """A second call on the same x gives the same output and leaves the module as the first call left it
    (a layer built once, on the first call, as nn.LazyLinear does, is allowed)."""
    __tracebackhide__ = True
    before = _snapshot(stack)
    again = run_student(stack, x, what=f"{call}(x), called a second time")
    after = _snapshot(stack)
    changed = None if before is None or after is None else _changed_part(before, after)
    if changed is not None:
        raise mistake_error(f"calling {call}(x) changes the module: after a second call, {changed}", MODULE_CHANGED)
    if not _same_as(out.detach(), rtol=1e-6, atol=1e-7)(again):
        raise mistake_error(f"two calls of {call}(x) on the same x give different outputs", FRESH_LAYERS)


def _check_stack_case(cls: type, D: int, H: int, depth: int, where: str) -> None:
    __tracebackhide__ = True
    call = f"ResidualStack({D}, {H}, {depth})"
    stack = _build(cls, "ResidualStack", D, H, depth)
    x = torch.randn(7, D)
    x[0] *= 40  # a large row: some pre-activations above 6, where relu6 or a clamp part from the ReLU
    result = _run_stack(stack, x, call)
    if _concatenated(result, 7, D):
        message = f"{call}(x) has the wrong shape: expected (7, {D}), the input's; got {tuple(result.shape)}"
        raise mistake_error(message, CONCATENATED)
    out = expect_tensor(expect_output(result, f"{call}(x)"), f"{call}(x)", shape=(7, D), dtype=torch.float32)
    _check_repeatable(stack, x, out, call)
    params = _parameters(stack, call)
    registered = {id(p) for p in params}
    hidden = [leaf for leaf in _graph_leaves(out) if id(leaf) not in registered]
    shapes = [tuple(p.shape) for p in params]
    count = sum(p.numel() for p in params)
    want = depth * (2 * D * H + H + D)
    facts = {
        "expected": f"{want} parameters: {depth} blocks of fc1 (weight {(H, D)}, bias {(H,)}) and fc2 "
        f"(weight {(D, H)}, bias {(D,)}), as nn.Linear stores them",
        "got": f"{count} parameters in tensors of shapes {shapes}",
    }
    if count == want:
        facts["got"] = f"{count} parameters, as many as expected, but in tensors of shapes {shapes}"
    if hidden:
        message = f"{call}(x) uses {len(hidden)} weight tensors that {call}.parameters() does not yield"
        raise mistake_error(message, NOT_REGISTERED, **facts)
    copies = [p.detach().double().requires_grad_() for p in params]
    parts = _parts(copies, D, H)
    x64 = x.double()
    with torch.no_grad():
        _structure(parts, out, x64, depth, facts, call)
    readings = [parts, _parts(copies, D, H, transposed=True)]
    blocks = _matching_stack(readings, out, x64, depth, call, where)
    _check_other_batch(stack, blocks, D, call, where)
    _check_gradients(stack, out, copies, blocks, x64, call, where)
    _check_input_gradient(stack, blocks, x, call, where)


INPUT_CUT = Mistake(
    "input cut from the graph",
    None,
    why="the parameters get their gradients, but the input x does not get its own: forward cuts x from autograd's "
    "graph (a .detach() or .data on it, or x rebuilt from its numbers) before the blocks use it, so in a network "
    "every layer before the stack would stop learning",
    look="forward: what happens to x before the first block",
)


def _check_input_gradient(stack: nn.Module, blocks: list, x: torch.Tensor, call: str, where: str) -> None:
    """The gradient reaches the stack's input too, as the layers before it in a network need."""
    __tracebackhide__ = True
    given = x.detach().clone().requires_grad_()
    what = f"{call}(x) for an x that requires grad"
    out = expect_tensor(expect_output(_run_stack(stack, given, call), what), what, shape=tuple(x.shape))
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(54), dtype=out.dtype)
    connected = out.grad_fn is not None
    grad = None
    if connected:
        grad = run_student(_input_grad, out, given, upstream, what=f"backward through {call}(x) to x")
    if grad is None:
        raise mistake_error(f"x gets no gradient through {call}(x)", INPUT_CUT)
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad((_stack(blocks, x64) * upstream.double()).sum(), x64)
    try:
        compare("the gradient of x", grad, want.to(grad.dtype), rtol=1e-3, atol=1e-5, where=where)
    except CheckError as err:
        raise mistake_error(err.message, INPUT_CUT, expected=err.expected, got=err.got) from None


def _input_grad(out: torch.Tensor, x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor | None:
    (grad,) = torch.autograd.grad(out, x, upstream, allow_unused=True)
    return grad


BATCH_DIMENSION_LOST = Mistake(
    "batch of one squeezed",
    None,
    why="for a batch of one sample the output loses its batch dimension: something in forward (a squeeze(), a "
    "flatten(), a reshape or an index) removes a dimension of size 1, and a batch of one has one; the stack's output "
    "has the input's shape whatever the batch size, as nn.Linear's has",
    look="forward: every squeeze, flatten, reshape or index, and what it does to a batch of size 1",
)


def _check_other_batch(stack: nn.Module, blocks: list, D: int, call: str, where: str) -> None:
    """Calls on other x, of other batch sizes (one of them a single sample), give those x's outputs: nothing is
    kept from an earlier call, no size is written into forward, and no dimension of size 1 is squeezed away."""
    __tracebackhide__ = True
    for rows in (4, 1):
        x = torch.randn(rows, D)
        what = f"{call}(x) for another x, of shape ({rows}, {D})"
        result = _run_stack(stack, x, call)
        if rows == 1 and isinstance(result, torch.Tensor) and tuple(result.shape) in ((D,), ()):
            message = f"{what} has the wrong shape: expected (1, {D}), the input's; got {tuple(result.shape)}"
            raise mistake_error(message, BATCH_DIMENSION_LOST)
        out = expect_tensor(expect_output(result, what), what, shape=(rows, D), dtype=torch.float32)
        with torch.no_grad():
            reference = _stack(blocks, x.double())
        compare(what, out, reference.float(), rtol=1e-4, atol=1e-5, where=where)


@exercise("05.3", "a stack of residual blocks")
def check_residual_stack(ResidualStack: Any) -> None:
    """``ResidualStack(D, H, depth)``: ``depth`` blocks with their own weights, each ``h + fc2(relu(fc1(h)))``."""
    __tracebackhide__ = True
    expect_class(ResidualStack, nn.Module, "ResidualStack")
    expect_written(ResidualStack, ("__init__", "forward"))
    cases = [(5, 3, 3), (6, 4, 2)]
    with torch_settings_kept("your ResidualStack"), torch.random.fork_rng(devices=[]):
        for number, (D, H, depth) in enumerate(cases, start=1):
            torch.manual_seed(number)
            where = f"in case {number} of {len(cases)}"
            _check_stack_case(ResidualStack, D, H, depth, where)
    passed("ResidualStack: own weights per block, outputs and gradients match on 2 sizes")

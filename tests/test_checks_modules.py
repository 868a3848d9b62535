"""Checks of notebook 05 (nn.Module): correct designs pass, each listed mistake is named (one test per Mistake),
bad input gets one clear sentence, and the prediction records the first answer."""

import copy
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import labsupport as lab
from labsupport.checks import core, nb05_nn_module, running

# ------------------------------------------------------------------ 05.1 check_my_linear


class MyLinear(nn.Module):
    def __init__(self, D_in, D_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(D_out, D_in) / math.sqrt(D_in))
        self.bias = nn.Parameter(torch.zeros(D_out))

    def forward(self, x):
        return x @ self.weight.t() + self.bias


def linear_variant(init=None, forward=None):
    body = {}
    if init is not None:
        body["__init__"] = init
    if forward is not None:
        body["forward"] = forward
    return type("MyLinear", (MyLinear,), body)


def _bias_first(self, i, o):
    nn.Module.__init__(self)
    self.bias = nn.Parameter(torch.zeros(o))
    self.weight = nn.Parameter(torch.empty(o, i))
    nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))


def _float64_start(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i, dtype=torch.float64))
    self.bias = nn.Parameter(torch.zeros(o, dtype=torch.float64))


def _init_functions(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.empty(o, i))
    self.bias = nn.Parameter(torch.empty(o))
    nn.init.xavier_normal_(self.weight)
    nn.init.uniform_(self.bias, -0.1, 0.1)


def _registered(self, i, o):
    nn.Module.__init__(self)
    self.register_parameter("weight", nn.Parameter(torch.randn(o, i)))
    self.register_parameter("bias", nn.Parameter(torch.randn(o)))


def _sizes_and_a_call_counter(self, i, o):
    nn.Module.__init__(self)
    self.in_features = i
    self.out_features = o
    self.weight = nn.Parameter(torch.empty(o, i))
    self.bias = nn.Parameter(torch.empty(o))
    self.register_buffer("calls", torch.zeros((), dtype=torch.long), persistent=False)
    self.last_shape = None
    self.reset_parameters()


def _reset_parameters(self):
    nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
    bound = 1 / math.sqrt(self.in_features)
    nn.init.uniform_(self.bias, -bound, bound)


def _counting_forward(self, x):
    assert x.shape[-1] == self.in_features
    self.calls += 1
    self.last_shape = tuple(x.shape)  # a fact about the call, never a value used by the next one
    return torch.einsum("...i,oi->...o", x, self.weight) + self.bias


CORRECT_LINEARS = {
    "the notebook's": MyLinear,
    "bias declared first, kaiming init": linear_variant(init=_bias_first),
    "register_parameter": linear_variant(init=_registered),
    "float64 randn": linear_variant(init=_float64_start),
    "nn.init functions": linear_variant(init=_init_functions),
    "addmm": linear_variant(forward=lambda self, x: torch.addmm(self.bias, x, self.weight.t())),
    "float64 inside, the input's dtype out": linear_variant(
        forward=lambda self, x: (x.double() @ self.weight.double().t() + self.bias.double()).to(x.dtype)
    ),
    "einsum": linear_variant(forward=lambda self, x: torch.einsum("ni,oi->no", x, self.weight) + self.bias),
    "matmul with .T": linear_variant(forward=lambda self, x: torch.matmul(x, self.weight.T) + self.bias),
    # ninth audit (a second call on another batch): sizes, a shape and a counter kept on the layer are right
    "sizes, a call counter and the last shape kept": type(
        "MyLinear",
        (MyLinear,),
        {
            "__init__": _sizes_and_a_call_counter,
            "reset_parameters": _reset_parameters,
            "forward": _counting_forward,
        },
    ),
}


@pytest.mark.parametrize("design", ["addmm", "einsum"])
def test_a_layer_for_matrices_only_passes_with_a_note_on_leading_dimensions(design, capsys):
    """05.1: the exercise's cases are (N, D_in); nn.Linear takes (*, D_in), which the PASS line's note says."""
    lab.check_my_linear(CORRECT_LINEARS[design])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS  MyLinear") and len(out) == 2
    assert out[1].startswith("      note: nn.Linear also takes input with more leading dimensions")
    assert "(2, 3, 5) -> (2, 3, 3); your layer gives an error there" in out[1]


def test_a_layer_that_flattens_leading_dimensions_hears_the_shape_it_gave(capsys):
    flat = linear_variant(forward=lambda self, x: x.reshape(-1, x.shape[-1]) @ self.weight.t() + self.bias)
    lab.check_my_linear(flat)
    assert "your layer gives shape (6, 3) there" in capsys.readouterr().out


def test_a_weight_that_starts_with_nan_is_refused():
    with pytest.raises(lab.CheckError, match="starts with NaN or inf"):
        lab.check_my_linear(linear_variant(init=_nan_start))


def _empty_start(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.empty(o, i))  # nn.Linear's first step, without its reset_parameters()
    self.bias = nn.Parameter(torch.empty(o))


def test_a_weight_never_filled_after_torch_empty_is_refused_every_time():
    """torch.empty's memory may hold finite leftovers that look random: the check makes it NaN while it builds."""
    for _ in range(3):
        with pytest.raises(lab.CheckError, match="starts with NaN or inf"):
            lab.check_my_linear(linear_variant(init=_empty_start))
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("design", list(CORRECT_LINEARS))
def test_my_linear_accepts_every_allowed_design(design, capsys):
    lab.check_my_linear(CORRECT_LINEARS[design])
    out = capsys.readouterr().out
    assert out.startswith("PASS  MyLinear")
    # thirteenth audit: a layer that starts in float64 passes, with a note (a float32 batch fails there)
    assert ("note:" in out) == (design in ("addmm", "einsum", "float64 randn"))


def _plain_tensor(self, i, o):
    nn.Module.__init__(self)
    self.weight = torch.randn(o, i, requires_grad=True)
    self.bias = nn.Parameter(torch.zeros(o))


def _no_bias(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = None


def _other_names(self, i, o):
    nn.Module.__init__(self)
    self.W = nn.Parameter(torch.randn(o, i))
    self.b = nn.Parameter(torch.zeros(o))


def _transposed(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(i, o))
    self.bias = nn.Parameter(torch.zeros(o))


def _bias_row(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.zeros(1, o))


def _bias_per_input(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.zeros(i))


def _frozen(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i), requires_grad=False)
    self.bias = nn.Parameter(torch.zeros(o))


def _extra(self, i, o):
    MyLinear.__init__(self, i, o)
    self.scale = nn.Parameter(torch.ones(1))


def _buffer(self, i, o):
    MyLinear.__init__(self, i, o)
    self.register_buffer("calls", torch.zeros(1))


def _inner_linear(self, i, o):
    nn.Module.__init__(self)
    self.inner = nn.Linear(i, o)


def _bias_buffer(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.register_buffer("bias", torch.zeros(o))


def _zero_start(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.zeros(o, i))
    self.bias = nn.Parameter(torch.zeros(o))


def _same_rows(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(i).repeat(o, 1))
    self.bias = nn.Parameter(torch.zeros(o))


def _nan_start(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.full((o, i), float("nan")))  # what torch.empty may hold
    self.bias = nn.Parameter(torch.zeros(o))


def _no_super(self, i, o):
    self.weight = nn.Parameter(torch.randn(o, i))


def _no_super_tensor(self, i, o):
    self.weight = torch.randn(o, i)


def _cached_transpose(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.zeros(o))
    self.weight_t = self.weight.t()  # a copy: .double() and load_state_dict leave it behind


def _in_float32(self, x):
    """05.1: computed in float32 and cast back (got expected/got only, an error of 1e-7)."""
    return (x.float() @ self.weight.float().t() + self.bias.float()).to(x.dtype)


# Mistake name -> a MyLinear that makes it.
def _scaled_after_wrapping(self, i, o):
    """05.1: the scale applied after nn.Parameter, a plain tensor; it was told to use nn.Parameter, which it did."""
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i)) / math.sqrt(i)
    self.bias = nn.Parameter(torch.zeros(o))


def _one_number_bias(self, i, o):
    """05.1, fifth audit: a bias of one number got only its shape, (1,), against (o,)."""
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.zeros(1))


def _scalar_bias(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.tensor(0.0))


def _weight_transposed_in_place(self, x):
    """05.1, fifth audit: t_() on the parameter was told that forward "changed its input x in place"."""
    return x @ self.weight.t_() + self.bias


def _prints_output(self, x):
    print((x @ self.weight.t() + self.bias).shape)


def _weight_without_self(self, x):
    return x @ weight.t() + bias  # noqa: F821 (the attributes, as a student reads them without self.)


def _locals_only(self, i, o):
    nn.Module.__init__(self)
    weight = nn.Parameter(torch.randn(o, i))  # noqa: F841 (the mistake: a local name, gone when __init__ returns)
    bias = nn.Parameter(torch.zeros(o))  # noqa: F841


def _parameters_in_a_list(self, i, o):
    """05.1, round 12 second pass: parameters in a plain list got "does not yield a weight" with no cause."""
    nn.Module.__init__(self)
    self.params = [nn.Parameter(torch.randn(o, i)), nn.Parameter(torch.zeros(o))]


def _returns_inside_the_row_loop(self, x):
    """05.1, eighth round: a return inside a loop over the rows got only "wrong shape (1, 4)"."""
    for row in x:
        return (row @ self.weight.t() + self.bias).unsqueeze(0)


def _transpose_made_on_the_first_call(self, x):
    """05.1, ninth audit: a transpose made once, in the first call, passed (it views the weight's memory,
    so loads into that memory showed through; a .to() or .double() gives the weight new memory)."""
    if getattr(self, "weight_t", None) is None:
        self.weight_t = self.weight.t()
    return x @ self.weight_t + self.bias


def _integer_weight(self, i, o):
    """05.1, eleventh audit: integer values in a parameter were told 'tensors of different dtypes'."""
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randint(-3, 4, (o, i)))
    self.bias = nn.Parameter(torch.zeros(o))


LINEAR_MISTAKES = {
    "one row only": linear_variant(forward=_returns_inside_the_row_loop),
    "forward returns nothing": linear_variant(forward=_prints_output),  # seventh audit: "did the cell run?"
    "attribute read without self": linear_variant(forward=_weight_without_self),  # seventh audit: bare NameError
    "parameters kept in local names": linear_variant(init=_locals_only),  # seventh audit: facts only
    "parameters in a plain list or dict": linear_variant(
        init=_parameters_in_a_list, forward=lambda self, x: x @ self.params[0].t() + self.params[1]
    ),
    "plain tensor, not registered": linear_variant(init=_plain_tensor),
    "missing bias": linear_variant(init=_no_bias),
    "names differ from nn.Linear's": linear_variant(init=_other_names),
    "weight stored (in, out)": linear_variant(init=_transposed),
    "bias with two dimensions": linear_variant(init=_bias_row),
    "bias of the wrong length": linear_variant(init=_bias_per_input),
    "requires_grad=False": linear_variant(init=_frozen),
    "extra entries in state_dict": linear_variant(init=_extra),
    "uses nn.Linear / F.linear": linear_variant(
        forward=lambda self, x: torch.nn.functional.linear(x, self.weight, self.bias)
    ),
    "no super().__init__()": linear_variant(init=_no_super),
    "registered as a buffer": linear_variant(init=_bias_buffer),
    "weights start equal": linear_variant(init=_zero_start),
    "no gradient": linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).detach()),
    "bias not added": linear_variant(forward=lambda self, x: x @ self.weight.t()),
    "bias subtracted": linear_variant(forward=lambda self, x: x @ self.weight.t() - self.bias),
    "activation inside the layer": linear_variant(forward=lambda self, x: torch.relu(x @ self.weight.t() + self.bias)),
    "missing transpose": linear_variant(forward=lambda self, x: x @ self.weight + self.bias),
    "product scaled": linear_variant(forward=lambda self, x: x @ self.weight.t() / math.sqrt(x.shape[1]) + self.bias),
    "bias scaled": linear_variant(forward=lambda self, x: x @ self.weight.t() + 2 * self.bias),
    "sign flipped": linear_variant(forward=lambda self, x: x @ (-self.weight).t() + self.bias),  # twelfth audit (G)
    "one bias for every output": linear_variant(forward=lambda self, x: x @ self.weight.t() + self.bias[0]),
    "a copy of the weight kept": linear_variant(
        init=_cached_transpose, forward=lambda self, x: x @ self.weight_t + self.bias
    ),
    "tensor kept from an earlier call": linear_variant(forward=_transpose_made_on_the_first_call),
    "computed in float32": linear_variant(forward=_in_float32),
    "operation after nn.Parameter": linear_variant(init=_scaled_after_wrapping),
    "output squeezed": linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).squeeze()),
    "bias of one number": linear_variant(init=_one_number_bias),
    "parameter changed in place": linear_variant(forward=_weight_transposed_in_place),
    # eleventh audit: these three got expected/got only, the fourth a wrong cause
    "output scaled": linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias) / x.shape[1]),
    "batch summed or averaged": linear_variant(forward=lambda self, x: (x @ self.weight.t()).mean(0) + self.bias),
    "integer values in a parameter": linear_variant(init=_integer_weight),
    # every case was float64, so a forward that computes in float64 passed (a wrong PASS)
    "computed in float64": linear_variant(
        forward=lambda self, x: x.double() @ self.weight.double().t() + self.bias.double()
    ),
    # thirteenth audit: dropout inside the layer got expected/got only
    "something random in forward": linear_variant(
        forward=lambda self, x: F.dropout(x, 0.1, self.training) @ self.weight.t() + self.bias
    ),
}
MORE_LINEAR_MISTAKES = [
    ("extra entries in state_dict", linear_variant(init=_buffer)),
    ("uses nn.Linear / F.linear", linear_variant(init=_inner_linear)),
    ("uses nn.Linear / F.linear", nn.Linear),
    ("no super().__init__()", linear_variant(init=_no_super_tensor)),
    ("weights start equal", linear_variant(init=_same_rows)),
    ("one bias for every output", linear_variant(forward=lambda self, x: x @ self.weight.t() + self.bias.sum())),
    (  # 05.1, fourth audit: an in-place change of x was told torch's advice about weight updates
        "changed x in place",
        linear_variant(forward=lambda self, x: x.mul_(1.0) @ self.weight.t() + self.bias),
    ),
    ("bias of one number", linear_variant(init=_scalar_bias)),
    (  # an in-place change of the bias, the other parameter
        "parameter changed in place",
        linear_variant(forward=lambda self, x: x @ self.weight.t() + self.bias.unsqueeze_(0)),
    ),
    (  # 05.1: a sigmoid (or softmax) inside got expected/got only: only a ReLU was listed
        "activation inside the layer",
        linear_variant(forward=lambda self, x: torch.sigmoid(x @ self.weight.t() + self.bias)),
    ),
    (  # 05.1, eleventh audit: a ReLU between the product and the bias got expected/got only
        "activation inside the layer",
        linear_variant(forward=lambda self, x: torch.relu(x @ self.weight.t()) + self.bias),
    ),
    (  # 05.1, twelfth audit (G): the whole output negated was told "multiplied by a constant"
        "sign flipped",
        linear_variant(forward=lambda self, x: -(x @ self.weight.t() + self.bias)),
    ),
    (  # 05.1, eleventh audit: the batch summed, keeping its dimension, got expected/got only
        "batch summed or averaged",
        linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).sum(0, keepdim=True)),
    ),
]


def _mistake_names(module, *extra):
    names = {m.name for m in vars(module).values() if isinstance(m, core.Mistake)}
    return names | set(extra)


def test_every_linear_mistake_has_a_test():
    x = torch.zeros(2, 3, dtype=torch.float64)
    w = torch.zeros(3, 3, dtype=torch.float64)
    listed = {m.name for m in nb05_nn_module._linear_mistakes(x, w, w[0])}
    module_level = {
        m.name
        for m in (
            nb05_nn_module.UNREGISTERED,
            nb05_nn_module.MISSING_BIAS,
            nb05_nn_module.OTHER_NAMES,
            nb05_nn_module.TRANSPOSED_WEIGHT,
            nb05_nn_module.BIAS_2D,
            nb05_nn_module.BIAS_SIZE,
            nb05_nn_module.FROZEN,
            nb05_nn_module.EXTRA_STATE,
            nb05_nn_module.USES_LINEAR,
            nb05_nn_module.NO_SUPER,
            nb05_nn_module.NO_GRADIENT,
            nb05_nn_module.BUFFER_NOT_PARAMETER,
            nb05_nn_module.EQUAL_START,
            nb05_nn_module.STALE_COPY,
            nb05_nn_module.OPERATION_AFTER_PARAMETER,
            nb05_nn_module.OUTPUT_SQUEEZED,
            nb05_nn_module.BIAS_ONE_NUMBER,
            nb05_nn_module.PARAMETER_INPLACE,
            nb05_nn_module.NO_RETURN,
            nb05_nn_module.NOT_ON_SELF,
            nb05_nn_module.LOCAL_NAMES,
            nb05_nn_module.PARAMETERS_IN_A_CONTAINER,
            nb05_nn_module.ONE_ROW_ONLY,
            nb05_nn_module.KEPT_FROM_AN_EARLIER_CALL,
            nb05_nn_module.BATCH_REDUCED,
            nb05_nn_module.INTEGER_PARAMETER,
            nb05_nn_module.COMPUTED_IN_FLOAT64,
            nb05_nn_module.RANDOM_IN_FORWARD,
        )
    }
    assert listed | module_level == set(LINEAR_MISTAKES)


@pytest.mark.parametrize("name", list(LINEAR_MISTAKES))
def test_my_linear_names_each_mistake(name):
    with pytest.raises(lab.CheckError) as err:
        lab.check_my_linear(LINEAR_MISTAKES[name])
    assert err.value.mistake == name
    assert err.value.hint


@pytest.mark.parametrize("name, variant", MORE_LINEAR_MISTAKES)
def test_my_linear_names_more_forms_of_a_mistake(name, variant):
    with pytest.raises(lab.CheckError) as err:
        lab.check_my_linear(variant)
    assert err.value.mistake == name


def test_one_row_repeated_is_named_as_an_equal_start():
    with pytest.raises(lab.CheckError) as err:
        lab.check_my_linear(linear_variant(init=_same_rows))
    assert "every row equal" in err.value.message and "one row repeated" in err.value.hint


def test_a_single_output_unit_is_not_refused_for_identical_rows():
    nb05_nn_module._random_start(torch.randn(1, 5), "MyLinear(5, 1)")
    with pytest.raises(lab.CheckError, match="every entry equal"):
        nb05_nn_module._random_start(torch.zeros(1, 5), "MyLinear(5, 1)")


def test_a_bias_of_shape_1_out_is_named_by_its_shape_not_requires_grad():
    """Issue 23: a (1, out) bias got "requires_grad=False"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_my_linear(LINEAR_MISTAKES["bias with two dimensions"])
    assert "requires_grad" not in str(err.value)
    assert "shape (1, 4)" in err.value.message
    assert "two dimensions" in err.value.hint


def test_first_failure_says_what_without_the_cause():
    with pytest.raises(lab.CheckError) as err:
        lab.check_my_linear(LINEAR_MISTAKES["bias not added"])
    first = "\n".join(err.value.rendered())
    assert "does not match" in first and "in case 1 of 3" in first
    assert "bias is never added" not in first
    with pytest.raises(lab.CheckError) as again:
        lab.check_my_linear(LINEAR_MISTAKES["bias not added"])
    assert "bias is never added" in "\n".join(again.value.rendered())


class Lying(torch.Tensor):
    def __eq__(self, other):
        return True


def _forever(*args):
    while True:
        pass


def _raise_init(self, i, o):
    raise ValueError("my own bug")


def _meta(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i, device="meta"))
    self.bias = nn.Parameter(torch.zeros(o, device="meta"))


def _init_left_as_given(self, D_in, D_out): ...


def _forward_left_as_given(self, x):
    pass


LINEAR_BAD_INPUT = {
    "None": (None, "MyLinear is None"),
    "a list": ([MyLinear], "Got list"),
    "an instance": (MyLinear(2, 3), "instance of it"),
    "numpy": (np.zeros(2), "numpy"),
    "a string": ("MyLinear", "expected the class MyLinear"),
    "another class": (int, "subclass of torch.nn.Module"),
    "a function": (lambda i, o: MyLinear(i, o), "expected the class MyLinear"),
    "forward returns None": (linear_variant(forward=lambda self, x: None), "got None"),
    "forward returns a list": (linear_variant(forward=lambda self, x: (x @ self.weight.t()).tolist()), "got list"),
    "forward returns numpy": (
        linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).detach().numpy()),
        "numpy",
    ),
    "float32 output": (linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias).float()), "dtype"),
    "NaN output": (linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias) * math.nan), "not finite"),
    "inf output": (linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias) / 0), "not finite"),
    "meta output": (linear_variant(forward=lambda self, x: torch.zeros(6, 4, device="meta")), "meta device"),
    "extra dimension": (
        linear_variant(forward=lambda self, x: (x @ self.weight.t() + self.bias)[None]),
        "extra leading",
    ),
    "lying subclass": (
        linear_variant(forward=lambda self, x: torch.zeros(len(x), 4, dtype=x.dtype).as_subclass(Lying)),
        "does not match",
    ),
    "forward raises": (linear_variant(forward=lambda self, x: 1 / 0), "ZeroDivisionError"),
    "forward not written": (
        linear_variant(forward=lambda self, x: (_ for _ in ()).throw(NotImplementedError("Exercise 1"))),
        "not written yet",
    ),
    "__init__ raises": (linear_variant(init=_raise_init), "ValueError: my own bug"),
    "__init__ left as given": (linear_variant(init=_init_left_as_given), "MyLinear.__init__ is not written yet"),
    "forward left as given": (linear_variant(forward=_forward_left_as_given), "MyLinear.forward is not written yet"),
    "meta parameters": (linear_variant(init=_meta), "meta device"),
}


@pytest.mark.parametrize("case", list(LINEAR_BAD_INPUT))
def test_my_linear_bad_input_gets_a_sentence(case, capsys):
    bad, fragment = LINEAR_BAD_INPUT[case]
    with pytest.raises(lab.CheckError, match=fragment) as err:
        lab.check_my_linear(bad)
    assert "PASS" not in capsys.readouterr().out
    assert "could not use" not in str(err.value) and "Traceback" not in str(err.value)


def test_never_returning_code_is_stopped(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    for variant in (linear_variant(forward=_forever), linear_variant(init=_forever)):
        with pytest.raises(lab.CheckError, match="did not return within"):
            lab.check_my_linear(variant)
    for variant in (stack_variant(forward=_forever), stack_variant(init=_forever)):
        with pytest.raises(lab.CheckError, match="did not return within"):
            lab.check_residual_stack(variant)


def test_a_check_called_wrongly_says_so():
    with pytest.raises(lab.CheckError, match="called wrongly"):
        lab.check_my_linear(MyLinear, steps=3)
    with pytest.raises(lab.CheckError, match="called wrongly"):
        lab.check_residual_stack()


# ------------------------------------------------------------------ 05.2 check_layer_list_prediction

SEEN = 1000 * 100 + 100 + 100 * 10 + 10


def test_list_prediction_right(capsys):
    lab.check_layer_list_prediction(SEEN)
    assert capsys.readouterr().out.startswith(f"PASS  scalars the optimizer sees: {SEEN} is right")


@pytest.mark.parametrize("answer", [torch.tensor(SEEN), np.int64(SEEN), float(SEEN)])
def test_list_prediction_accepts_any_number_type(answer, capsys):
    lab.check_layer_list_prediction(answer)
    assert "PASS" in capsys.readouterr().out


def test_list_prediction_records_the_first_answer_and_asks_why(capsys):
    lab.check_layer_list_prediction(SEEN + 3 * (100 * 100 + 100))
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and "recorded answer: 131410" in first
    assert "which does it miss although forward uses them" in first
    lab.check_layer_list_prediction(SEEN)
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 131410" in second
    lab.hint("05.2")
    assert "plain Python list" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, note",
    [
        (131000, "leaves out the biases"),
        (4, "how many tensors parameters() yields"),
        (101000, "The biases are parameters too"),
        (SEEN + 3 * (100 * 100 + 100), "plain Python list"),
    ],
)
def test_list_prediction_notes_each_typical_wrong_answer(wrong, note, capsys):
    lab.check_layer_list_prediction(wrong)
    capsys.readouterr()
    lab.hint("05.2")
    out = capsys.readouterr().out
    header, first = out.splitlines()[:2]
    assert header.startswith("HINT · Exercise 05.2") and first.startswith(f"  About {wrong}:") and note in out


@pytest.mark.parametrize("bad", [None, "many", "-4", [1, 2], float("nan"), True, torch.zeros(2), {"n": 1}, 3.5, -4])
def test_list_prediction_bad_input(bad, capsys):
    with pytest.raises(lab.CheckError):
        lab.check_layer_list_prediction(bad)
    assert "PASS" not in capsys.readouterr().out


# ------------------------------------------------------------------ 05.3 check_residual_stack


class Block(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)

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
    body = {}
    if init is not None:
        body["__init__"] = init
    if forward is not None:
        body["forward"] = forward
    return type("ResidualStack", (ResidualStack,), body)


class BackwardsBlock(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.fc2 = nn.Linear(H, D)
        self.fc1 = nn.Linear(D, H)

    def forward(self, h):
        return self.fc2(torch.relu(self.fc1(h))) + h


class TwoLists(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.ups = nn.ModuleList([nn.Linear(D, H) for _ in range(depth)])
        self.downs = nn.ModuleList([nn.Linear(H, D) for _ in range(depth)])

    def forward(self, x):
        for up, down in zip(self.ups, self.downs):
            x = x + down(torch.relu(up(x)))
        return x


class SequentialStack(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.net = nn.Sequential(*[BackwardsBlock(D, H) for _ in range(depth)])

    def forward(self, x):
        return self.net(x)


class RawBlock(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.b2 = nn.Parameter(torch.zeros(D))
        self.w1 = nn.Parameter(torch.randn(H, D) / D**0.5)
        self.b1 = nn.Parameter(torch.zeros(H))
        self.w2 = nn.Parameter(torch.randn(D, H) / H**0.5)

    def forward(self, h):
        return h + torch.relu(h @ self.w1.T + self.b1) @ self.w2.T + self.b2


class DictStack(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.blocks = nn.ModuleDict({f"block{i}": RawBlock(D, H) for i in range(depth)})

    def forward(self, x):
        for block in self.blocks.values():
            x = block(x)
        return x


class TransposedRawBlock(nn.Module):
    def __init__(self, D, H):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(D, H) / D**0.5)
        self.b1 = nn.Parameter(torch.zeros(H))
        self.w2 = nn.Parameter(torch.randn(H, D) / H**0.5)
        self.b2 = nn.Parameter(torch.zeros(D))

    def forward(self, h):
        return h + torch.relu(h @ self.w1 + self.b1) @ self.w2 + self.b2


def _reversed(self, x):
    for block in reversed(self.blocks):
        x = block(x)
    return x


def _zero_last_layers(self, D, H, depth):
    """Each block starts as the identity: fc2's weight and bias are zeros (the skip connection's idea)."""
    _with_blocks(self, Block, D, H, depth)
    for block in self.blocks:
        nn.init.zeros_(block.fc2.weight)
        nn.init.zeros_(block.fc2.bias)


def _functional_forward_noting_the_batch(self, x):
    self.last_batch = x.shape[0]  # kept for a log, never read back by forward
    for b in self.blocks:
        inner = torch.relu(F.linear(x, b.fc1.weight, b.fc1.bias))
        x = x + F.linear(inner, b.fc2.weight, b.fc2.bias)
    return x


class RecursiveStack(nn.Module):
    """One block, then a ResidualStack of depth - 1 (twelfth audit)."""

    def __init__(self, D, H, depth):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)
        self.rest = RecursiveStack(D, H, depth - 1) if depth > 1 else None

    def forward(self, x):
        x = x + self.fc2(F.relu(self.fc1(x)))
        return x if self.rest is None else self.rest(x)


def _deep_copies(self, D, H, depth):
    """Copies of one block: each has its own weights, from the same start (twelfth audit)."""
    nn.Module.__init__(self)
    first = Block(D, H)
    self.blocks = nn.ModuleList(copy.deepcopy(first) for _ in range(depth))


CORRECT_STACKS = {
    "recursive": RecursiveStack,
    "deep copies of one block": stack_variant(init=_deep_copies),
    "the notebook's": ResidualStack,
    "fc2 declared before fc1": stack_variant(
        init=lambda self, D, H, depth: _with_blocks(self, BackwardsBlock, D, H, depth)
    ),
    "two ModuleLists": TwoLists,
    "nn.Sequential of blocks": SequentialStack,
    "raw parameters in a ModuleDict": DictStack,
    "blocks applied in reverse order": stack_variant(forward=_reversed),
    "raw weights stored (in, out)": stack_variant(
        init=lambda self, D, H, depth: _with_blocks(self, TransposedRawBlock, D, H, depth)
    ),
    # ninth audit (a call on another batch): blocks that start as the identity, and a batch size noted in forward
    "fc2 initialised to zero": stack_variant(init=_zero_last_layers),
    "F.linear, the batch size noted": stack_variant(forward=_functional_forward_noting_the_batch),
}


def _with_blocks(self, block, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(block(D, H) for _ in range(depth))


@pytest.mark.parametrize("design", list(CORRECT_STACKS))
def test_residual_stack_accepts_every_allowed_design(design, capsys):
    """Issue 23: fc2 before fc1 and two ModuleLists were refused with "tell your instructor"."""
    lab.check_residual_stack(CORRECT_STACKS[design])
    assert capsys.readouterr().out.startswith("PASS  ResidualStack")


def _branch_only(self, x):
    for b in self.blocks:
        x = b.fc2(torch.relu(b.fc1(x)))
    return x


def _relu_after_sum(self, x):
    for b in self.blocks:
        x = torch.relu(b(x))
    return x


def _no_relu(self, x):
    for b in self.blocks:
        x = x + b.fc2(b.fc1(x))
    return x


def _relu_on_branch(self, x):
    for b in self.blocks:
        x = x + torch.relu(b.fc2(torch.relu(b.fc1(x))))
    return x


def _outer(self, x):
    return x + _branch_only(self, x)


def _from_x(self, x):
    h = x
    for b in self.blocks:
        h = h + b.fc2(torch.relu(b.fc1(x)))
    return h


def _x_added_back(self, x):
    """05.3: `h = x + block(h)`, the stack's input added in every block, got expected/got only."""
    h = x
    for b in self.blocks:
        h = x + b.fc2(torch.relu(b.fc1(h)))
    return h


def _last_only(self, x):
    h = x
    for b in self.blocks:
        h = b(x)
    return h


def _returns_x(self, x):
    for b in self.blocks:
        b(x)
    return x


def _skip_first(self, x):
    for b in list(self.blocks)[1:]:
        x = b(x)
    return x


def _tanh(self, x):
    for b in self.blocks:
        x = x + b.fc2(torch.tanh(b.fc1(x)))
    return x


def _twice(self, x):
    for b in self.blocks:
        x = b(b(x))
    return x


def _dense_sums(self, x):
    """Twelfth audit (G): DenseNet-style, each block adds every earlier output; it got a generic verdict."""
    outputs = [x]
    for b in self.blocks:
        outputs.append(sum(outputs) + b.fc2(torch.relu(b.fc1(outputs[-1]))))
    return outputs[-1]


def _in_place(self, x):
    for b in self.blocks:
        x += b.fc2(torch.relu(b.fc1(x)))
    return x


def _fresh_layer(self, x):
    return ResidualStack.forward(self, x) + 0.1 * nn.Linear(x.shape[1], x.shape[1])(x)


def _detached_skip(self, x):
    for b in self.blocks:
        x = x.detach() + b.fc2(torch.relu(b.fc1(x)))
    return x


def _python_list(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = [Block(D, H) for _ in range(depth)]


def _repeated(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList([Block(D, H)] * depth)


def _one_less(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth - 1))


def _one_more(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth + 1))


def _fixed_count(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(5))


def _no_biases(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth))
    for b in self.blocks:
        b.fc1 = nn.Linear(D, H, bias=False)
        b.fc2 = nn.Linear(H, D, bias=False)


def _square(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, D) for _ in range(depth))


class SharedUp(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.up = nn.Linear(D, H)
        self.downs = nn.ModuleList(nn.Linear(H, D) for _ in range(depth))

    def forward(self, x):
        for down in self.downs:
            x = x + down(torch.relu(self.up(x)))
        return x


def _averaged(self, x):
    for b in self.blocks:
        x = (x + b.fc2(torch.relu(b.fc1(x)))) / 2
    return x


def _half_branch(self, x):
    for b in self.blocks:
        x = x + 0.5 * b.fc2(torch.relu(b.fc1(x)))
    return x


def _branch_subtracted(self, x):
    for b in self.blocks:
        x = x - b.fc2(torch.relu(b.fc1(x)))
    return x


def _skip_doubled(self, x):
    for b in self.blocks:
        x = 2 * x + b.fc2(torch.relu(b.fc1(x)))
    return x


def _last_without_skip(self, x):
    *first, last = self.blocks
    for b in first:
        x = b(x)
    return last.fc2(torch.relu(last.fc1(x)))


def _first_without_skip(self, x):
    first, *rest = self.blocks
    x = first.fc2(torch.relu(first.fc1(x)))
    for b in rest:
        x = b(x)
    return x


def _relu_on_input(self, x):
    for b in self.blocks:
        x = x + b.fc2(b.fc1(torch.relu(x)))
    return x


def _relu_on_output(self, x):
    return torch.relu(ResidualStack.forward(self, x))


def _input_added_at_the_end(self, x):
    """05.3, fifth audit: the blocks add their inputs back, and x is added once more: expected/got only."""
    return x + ResidualStack.forward(self, x)


def _no_super_stack(self, D, H, depth):
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth))


def _first_block_rebuilt(self, x):
    """05.3: forward assigns a new block in place of the first one at every call."""
    first = self.blocks[0]
    self.blocks[0] = Block(first.fc1.in_features, first.fc1.out_features)
    return ResidualStack.forward(self, x)


def _block_appended(self, x):
    """05.3: forward appends a block at every call and runs the blocks that were there before (its output is still
    right)."""
    blocks = list(self.blocks)
    first = blocks[0]
    self.blocks.append(Block(first.fc1.in_features, first.fc1.out_features))
    for block in blocks:
        x = block(x)
    return x


def _weights_changed_in_place(self, x):
    """05.3: forward rescales fc1's weight in place at every call."""
    with torch.no_grad():
        for b in self.blocks:
            b.fc1.weight.mul_(0.9)
    return ResidualStack.forward(self, x)


def _built_on_the_first_call(self, x):
    """05.3: the blocks are appended on the first call only, like a lazy layer: a design the prompt allows."""
    if len(self.blocks) == 0:
        for _ in range(self.depth):
            self.blocks.append(Block(x.shape[1], self.hidden))
    return ResidualStack.forward(self, x)


def _empty_stack(self, D, H, depth):
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList()
    self.depth = depth
    self.hidden = H


@pytest.mark.parametrize(
    "forward",
    [_first_block_rebuilt, _block_appended, _weights_changed_in_place],
    ids=["rebuilt", "appended", "rescaled"],
)
def test_a_forward_that_changes_the_module_is_named(forward):
    """Fourteenth audit: a block reassigned or weights changed in place in forward were told "something random runs
    in forward"; a block appended at every call got a parameter count."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_residual_stack(stack_variant(forward=forward))
    assert info.value.mistake == "forward changes the module"
    assert "changes the module" in info.value.message


def test_blocks_built_on_the_first_call_pass(capsys):
    """Fourteenth audit: blocks built once, on the first call (as nn.LazyLinear builds its weight), are a design."""
    lab.check_residual_stack(stack_variant(init=_empty_stack, forward=_built_on_the_first_call))
    assert "PASS" in capsys.readouterr().out


class LazyStack(nn.Module):
    def __init__(self, D, H, depth):
        super().__init__()
        self.fc1s = nn.ModuleList(nn.LazyLinear(H) for _ in range(depth))
        self.fc2s = nn.ModuleList(nn.Linear(H, D) for _ in range(depth))

    def forward(self, x):
        for fc1, fc2 in zip(self.fc1s, self.fc2s):
            x = x + fc2(F.relu(fc1(x)))
        return x


def test_lazy_linear_layers_pass(capsys):
    lab.check_residual_stack(LazyStack)
    assert "PASS" in capsys.readouterr().out


# Mistake name -> a ResidualStack that makes it.
def _return_in_loop(self, x):
    for block in self.blocks:
        x = block(x)
        return x


def _module_list_called(self, x):
    return self.blocks(x)


def _blocks_side_by_side(self, x):
    """05.3, eighth round: the blocks' outputs on x summed got expected/got only."""
    return sum(block(x) for block in self.blocks)


def _relu_on_the_skip(self, x):
    """05.3, eleventh audit: relu(h) + branch got expected/got only."""
    for b in self.blocks:
        x = torch.relu(x) + b.fc2(torch.relu(b.fc1(x)))
    return x


def _fc2_without_bias(self, D, H, depth):
    """05.3, eleventh audit: fc2 alone without a bias got a parameter count only."""
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(Block(D, H) for _ in range(depth))
    for b in self.blocks:
        b.fc2 = nn.Linear(H, D, bias=False)


def _multiplied_skip(self, x):
    """05.3, twelfth audit: h * branch got expected/got only."""
    for b in self.blocks:
        x = x * b.fc2(torch.relu(b.fc1(x)))
    return x


def _relu_after_fc2(self, x):
    """05.3, twelfth audit: h + relu(fc2(fc1(h))) got expected/got only."""
    for b in self.blocks:
        x = x + torch.relu(b.fc2(b.fc1(x)))
    return x


def _pre_norm(self, x):
    """05.3, twelfth audit: a transformer's pre-norm block, h + branch(layer_norm(h)), got expected/got only."""
    for b in self.blocks:
        x = x + b.fc2(torch.relu(b.fc1(F.layer_norm(x, x.shape[-1:]))))
    return x


def _only_last_with_skip(self, x):
    """05.3, twelfth audit: two of three blocks without their skip got expected/got only."""
    for b in self.blocks[:-1]:
        x = b.fc2(torch.relu(b.fc1(x)))
    return self.blocks[-1](x)


def _concatenated_skip(self, x):
    """05.3, twelfth audit: torch.cat([h, branch]) got a shape only."""
    for b in self.blocks:
        x = torch.cat([x, b.fc2(torch.relu(b.fc1(x)))])
    return x


def _relu_moved_after_sum(self, x):
    """05.3, sixteenth audit: the ReLU moved from inside the branch to after the sum got expected/got only."""
    for b in self.blocks:
        x = torch.relu(x + b.fc2(b.fc1(x)))
    return x


class NormBlock(Block):
    def __init__(self, D, H):
        super().__init__(D, H)
        self.norm = nn.LayerNorm(D)

    def forward(self, h):
        return self.norm(h + self.fc2(torch.relu(self.fc1(h))))


def _with_layer_norm(self, D, H, depth):
    """05.3, twelfth audit: a LayerNorm in every block got a parameter count only."""
    nn.Module.__init__(self)
    self.blocks = nn.ModuleList(NormBlock(D, H) for _ in range(depth))


STACK_MISTAKES = {
    "skip multiplied": stack_variant(forward=_multiplied_skip),
    "ReLU after fc2": stack_variant(forward=_relu_after_fc2),
    "ReLU moved after the sum": stack_variant(forward=_relu_moved_after_sum),
    "normalised in the block": stack_variant(forward=_pre_norm),
    "some blocks without their residual": stack_variant(forward=_only_last_with_skip),
    "skip concatenated": stack_variant(forward=_concatenated_skip),
    "layers besides fc1 and fc2": stack_variant(init=_with_layer_norm),
    "blocks side by side": stack_variant(forward=_blocks_side_by_side),
    "no residual": stack_variant(forward=_branch_only),
    "ReLU after the sum": stack_variant(forward=_relu_after_sum),
    "missing ReLU": stack_variant(forward=_no_relu),
    "ReLU on the branch output": stack_variant(forward=_relu_on_branch),
    "one residual around the whole stack": stack_variant(forward=_outer),
    "blocks read x": stack_variant(forward=_from_x),
    "blocks add x back": stack_variant(forward=_x_added_back),
    "residual averaged": stack_variant(forward=_averaged),
    "residual scaled": stack_variant(forward=_half_branch),
    "one block without its residual": stack_variant(forward=_last_without_skip),
    "ReLU on the block's input": stack_variant(forward=_relu_on_input),
    "ReLU on the stack's output": stack_variant(forward=_relu_on_output),
    "input added again at the end": stack_variant(forward=_input_added_at_the_end),
    "only the last block counts": stack_variant(forward=_last_only),
    "returns the input": stack_variant(forward=_returns_x),
    "not a ReLU": stack_variant(forward=_tanh),
    "each block applied twice": stack_variant(forward=_twice),
    "all earlier outputs added": stack_variant(forward=_dense_sums),
    "a block skipped in forward": stack_variant(forward=_skip_first),
    "changed x in place": stack_variant(forward=_in_place),
    "layers created in forward": stack_variant(forward=_fresh_layer),
    "layers not registered": stack_variant(init=_python_list),
    "layers without bias": stack_variant(init=_no_biases),
    "wrong hidden size": stack_variant(init=_square),
    "one block repeated": stack_variant(init=_repeated),
    "one layer shared by all blocks": SharedUp,
    "off-by-one depth": stack_variant(init=_one_less),
    "wrong number of blocks": stack_variant(init=_fixed_count),
    "part of the graph detached": stack_variant(forward=_detached_skip),
    "no gradient": stack_variant(forward=lambda self, x: ResidualStack.forward(self, x).detach()),
    "no super().__init__()": stack_variant(init=_no_super_stack),
    "return inside the loop": stack_variant(forward=_return_in_loop),  # seventh audit: expected/got only
    "nn.ModuleList called": stack_variant(forward=_module_list_called),  # seventh audit: "not written yet"
    "ReLU on the skip": stack_variant(forward=_relu_on_the_skip),
    "some layers without bias": stack_variant(init=_fc2_without_bias),
    # thirteenth audit: x.detach() before the blocks passed (only the parameters' gradients were compared)
    "input cut from the graph": stack_variant(forward=lambda self, x: ResidualStack.forward(self, x.detach())),
    # fourteenth audit: a forward that reassigns one of its blocks was told "something random runs in forward"
    "forward changes the module": stack_variant(forward=_first_block_rebuilt),
}


def test_every_stack_mistake_has_a_test():
    blocks = [
        nb05_nn_module._Block(nb05_nn_module._Layer(torch.eye(2), None), nb05_nn_module._Layer(torch.eye(2), None))
    ]
    listed = {m.name for m in nb05_nn_module._stack_mistakes(blocks * 3, torch.zeros(1, 2), 3)}
    module_level = {
        m.name
        for m in (
            nb05_nn_module.FRESH_LAYERS,
            nb05_nn_module.NOT_REGISTERED,
            nb05_nn_module.NO_BIASES,
            nb05_nn_module.WRONG_HIDDEN,
            nb05_nn_module.SHARED_BLOCK,
            nb05_nn_module.SHARED_LAYER,
            nb05_nn_module.DETACHED,
            nb05_nn_module.NO_GRADIENT,
            nb05_nn_module.NO_SUPER,
            nb05_nn_module._wrong_count(2, 3),
            nb05_nn_module._wrong_count(5, 3),
            nb05_nn_module.MODULE_LIST_CALLED,
            nb05_nn_module.SOME_WITHOUT_BIAS,
            nb05_nn_module.EXTRA_LAYERS,
            nb05_nn_module.CONCATENATED,
            nb05_nn_module.INPUT_CUT,
            nb05_nn_module.MODULE_CHANGED,
        )
    }
    assert listed | module_level | {"changed x in place"} == set(STACK_MISTAKES)


@pytest.mark.parametrize("name", list(STACK_MISTAKES))
def test_residual_stack_names_each_mistake(name):
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(STACK_MISTAKES[name])
    assert err.value.mistake == name
    assert err.value.hint


def _branch_over_depth(self, x):
    """05.3, twelfth audit: each branch divided by the depth got expected/got only."""
    for b in self.blocks:
        x = x + b.fc2(torch.relu(b.fc1(x))) / len(self.blocks)
    return x


MORE_STACK_MISTAKES = [
    ("residual scaled", stack_variant(forward=_branch_subtracted), "returns h - branch"),
    ("residual scaled", stack_variant(forward=_skip_doubled), "returns 2 * h + branch"),
    ("one block without its residual", stack_variant(forward=_first_without_skip), "the first block of 3"),
    ("one block without its residual", stack_variant(forward=_last_without_skip), "the last block of 3"),
    ("residual scaled", stack_variant(forward=_branch_over_depth), "h + 0.333 * branch"),
]


@pytest.mark.parametrize("name, variant, fragment", MORE_STACK_MISTAKES)
def test_residual_stack_names_more_forms_of_a_mistake(name, variant, fragment):
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(variant)
    assert err.value.mistake == name
    assert fragment in err.value.hint


@pytest.mark.parametrize("init", [_one_less, _one_more])
def test_off_by_one_depth_is_named_as_such(init):
    """Issue 23: an off-by-one depth got "one block object repeated"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(init=init))
    assert err.value.mistake == "off-by-one depth"
    assert "repeated" not in str(err.value) and "shares" not in str(err.value)
    assert "off-by-one" in err.value.hint


STACK_BAD_INPUT = {
    "None": (None, "ResidualStack is None"),
    "a list": ([ResidualStack], "Got list"),
    "an instance": (ResidualStack(2, 2, 1), "instance of it"),
    "a string": ("ResidualStack", "expected the class"),
    "forward returns None": (stack_variant(forward=lambda self, x: None), "got None"),
    "forward returns a tuple": (stack_variant(forward=lambda self, x: (x, x)), "not a tensor"),
    "forward returns numpy": (stack_variant(forward=lambda self, x: x.numpy()), "numpy"),
    "float64 output": (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x).double()), "dtype"),
    "NaN output": (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x) * math.nan), "not finite"),
    "meta output": (stack_variant(forward=lambda self, x: torch.zeros(x.shape, device="meta")), "meta device"),
    "extra dimension": (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x)[None]), "extra leading"),
    "reduced output": (stack_variant(forward=lambda self, x: ResidualStack.forward(self, x).sum(1)), "wrong shape"),
    "forward raises": (stack_variant(forward=lambda self, x: 1 / 0), "ZeroDivisionError"),
    "no forward": (type("ResidualStack", (nn.Module,), {"__init__": _python_list}), "has no forward method"),
    "two constructor arguments": (stack_variant(init=lambda self, D, H: None), "TypeError"),
}


@pytest.mark.parametrize("case", list(STACK_BAD_INPUT))
def test_residual_stack_bad_input_gets_a_sentence(case, capsys):
    bad, fragment = STACK_BAD_INPUT[case]
    with pytest.raises(lab.CheckError, match=fragment) as err:
        lab.check_residual_stack(bad)
    assert "PASS" not in capsys.readouterr().out
    assert "could not use" not in str(err.value) and "Traceback" not in str(err.value)


class NormedBlock(Block):
    def __init__(self, D, H):
        super().__init__(D, H)
        self.norm = nn.LayerNorm(D)

    def forward(self, h):
        return h + self.fc2(torch.relu(self.fc1(self.norm(h))))


def test_extra_layers_are_stated_as_facts_and_named():
    """Twelfth audit: the facts (the shapes) stay; the cause is now named, since depth blocks' worth of fc1 and
    fc2 plus other tensors can only be layers besides fc1 and fc2 (it was facts alone)."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(
            stack_variant(init=lambda self, D, H, depth: _with_blocks(self, NormedBlock, D, H, depth))
        )
    assert err.value.mistake == "layers besides fc1 and fc2"
    assert "(5,)" in err.value.got


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    lab.check_my_linear(MyLinear)
    lab.check_residual_stack(ResidualStack)
    assert torch.equal(torch.rand(3), expected)


def _with_activation(act):
    def forward(self, x):
        for b in self.blocks:
            x = x + b.fc2(act(b.fc1(x)))
        return x

    return forward


@pytest.mark.parametrize("act", [F.relu6, F.elu, F.softplus, F.silu, F.hardtanh], ids=lambda f: f.__name__)
def test_other_activations_in_the_branch_are_named(act):
    # relu6 equals the ReLU below 6: the check's large row takes some pre-activations above it
    with pytest.raises(lab.CheckError) as info:
        lab.check_residual_stack(stack_variant(forward=_with_activation(act)))
    assert info.value.mistake == "not a ReLU"


def test_a_clamp_at_zero_is_a_relu_and_passes(capsys):
    lab.check_residual_stack(stack_variant(forward=_with_activation(lambda t: t.clamp(min=0))))
    assert capsys.readouterr().out.startswith("PASS  ResidualStack")


class EndlessParameters(ResidualStack):
    def parameters(self, recurse=True):
        return itertools.repeat(torch.zeros(1))


class NoParameters(ResidualStack):
    def parameters(self, recurse=True):
        return None


class NeverYields(ResidualStack):
    def parameters(self, recurse=True):
        while True:
            yield from ()


@pytest.mark.parametrize(
    "student, message",
    [
        (EndlessParameters, r"parameters\(\) yields more than"),
        (NoParameters, "returned NoneType, not an iterable"),
        (NeverYields, "did not return within"),
    ],
)
def test_a_parameters_override_that_never_ends_or_returns_none_is_refused(student, message, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match=message):
        lab.check_residual_stack(student)


def _unused_tensor(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i))
    self.bias = nn.Parameter(torch.zeros(o))
    self.notes = torch.zeros(o * i)  # as large as the weight, never used


def test_a_kept_tensor_does_not_hide_a_named_mistake():
    student = linear_variant(init=_unused_tensor, forward=lambda self, x: x @ self.weight.t() - self.bias)
    with pytest.raises(lab.CheckError) as info:
        lab.check_my_linear(student)
    assert info.value.mistake == "bias subtracted"


class AlwaysEqual(torch.Tensor):
    """A tensor class that says it equals anything (and so, by Python's rule, cannot be hashed)."""

    def __eq__(self, other):
        return True


def _unhashable_weight(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.randn(o, i).as_subclass(AlwaysEqual))
    self.bias = nn.Parameter(torch.zeros(o))


def test_a_weight_of_an_unhashable_tensor_class_gets_a_sentence():
    with pytest.raises(lab.CheckError, match="cannot be hashed") as info:
        lab.check_my_linear(linear_variant(init=_unhashable_weight))
    assert info.value.usage


def _copy_then_add_in_place(self, x):
    h = x.clone()  # the caller's x is safe, but fc1 keeps this h for backward
    for block in self.blocks:
        h += block.fc2(torch.relu(block.fc1(h)))
    return h


def test_an_in_place_sum_on_a_copy_is_named():
    """05.3: h = x.clone(); h += ... got torch's RuntimeError from backward, in a traceback's words."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=_copy_then_add_in_place))
    assert err.value.mistake == "in-place sum in forward"
    assert "RuntimeError" not in str(err.value)


@pytest.mark.parametrize("answer", ["101110", "101,110", " 101_110 "])
def test_list_prediction_accepts_the_number_written_as_text(answer, capsys):
    """05.2: the right count in quotes was refused: "a count of numbers is a whole number; got '101110'"."""
    lab.check_layer_list_prediction(answer)
    assert capsys.readouterr().out.startswith(f"PASS  scalars the optimizer sees: {SEEN} is right")


def _one_pair_in_a_loop(self, D, H, depth):
    nn.Module.__init__(self)
    self.fc1 = nn.Linear(D, H)
    self.fc2 = nn.Linear(H, D)
    self.depth = depth


def _pair_applied_depth_times(self, x):
    for _ in range(self.depth):
        x = x + self.fc2(torch.relu(self.fc1(x)))
    return x


def test_one_pair_of_layers_applied_in_a_loop_is_not_called_a_repeated_block_object():
    """05.3: two layers applied depth times were told "one block object is used at every position"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(init=_one_pair_in_a_loop, forward=_pair_applied_depth_times))
    assert err.value.mistake == "one block repeated"
    assert "one pair of layers applied depth times in a loop" in err.value.hint


class MixedLayoutBlock(nn.Module):
    """fc2 kept as a raw (H, D) weight used as h @ w: a layout the prompt does not ask for."""

    def __init__(self, D, H):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.w2 = nn.Parameter(torch.randn(H, D) / H**0.5)
        self.b2 = nn.Parameter(torch.zeros(D))

    def forward(self, h):
        return h + torch.relu(self.fc1(h)) @ self.w2 + self.b2


def test_as_many_parameters_in_another_layout_are_said_to_be_as_many():
    def init(self, D, H, depth):
        nn.Module.__init__(self)
        self.blocks = nn.ModuleList(MixedLayoutBlock(D, H) for _ in range(depth))

    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(init=init))
    assert "as many as expected" in err.value.got and "as nn.Linear stores them" in err.value.expected


def test_a_stack_forward_that_prints_instead_of_returning_is_named(capsys):
    """05.3, seventh audit: a forward that printed its output was told "the cell ... did not run"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=lambda self, x: print(ResidualStack.forward(self, x).shape)))
    capsys.readouterr()
    assert err.value.mistake == nb05_nn_module.NO_RETURN.name
    assert "did not run" not in str(err.value)


def test_a_stack_block_reading_its_layers_without_self_is_named():
    """05.3, seventh audit: `blocks` read without self. in forward got a bare NameError."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=lambda self, x: blocks[0](x)))  # noqa: F821
    assert err.value.mistake == nb05_nn_module.NOT_ON_SELF.name


# ------------------------------------------------------------------ ninth audit: wrong answers that passed


def _remembering_forward(self, x):
    if getattr(self, "kept", None) is None:
        self.kept = x @ self.weight.t() + self.bias
    return self.kept


def test_a_layer_that_keeps_its_first_output_fails():
    """05.1: each layer was called once, so a forward that returned its first output again passed."""
    with pytest.raises(lab.CheckError, match="called a second time, on another x of shape"):
        lab.check_my_linear(linear_variant(forward=_remembering_forward))


def test_a_layer_for_matrices_that_uses_dot_t_gets_the_note_and_no_torch_warning(capsys, recwarn):
    """05.1: `(self.weight @ x.T).T` printed torch's deprecation warning for .T on the (2, 3, D_in) input."""
    transposes = linear_variant(forward=lambda self, x: (self.weight @ x.T).T + self.bias)
    lab.check_my_linear(transposes)
    captured = capsys.readouterr()
    assert captured.out.startswith("PASS  MyLinear")
    assert "your layer gives an error there" in captured.out and ".T reverses the order of ALL" in captured.out
    assert "UserWarning" not in captured.err and not [w for w in recwarn if "x.T" in str(w.message)]


def _stack_keeping_its_output(self, x):
    if getattr(self, "kept", None) is None:
        self.kept = ResidualStack.forward(self, x)
    return self.kept


def _stack_of_seven_rows(self, x):
    h = torch.zeros(7, x.shape[1]) + x
    return ResidualStack.forward(self, h)


@pytest.mark.parametrize("forward", [_stack_keeping_its_output, _stack_of_seven_rows], ids=["kept", "7 rows"])
def test_a_stack_right_only_for_the_first_input_or_its_batch_size_fails(forward):
    """05.3: both calls used the same x of 7 rows, so a kept output or a batch size written in passed."""
    with pytest.raises(lab.CheckError, match=r"shape \(4, 5\)|size of tensor a \(7\)"):
        lab.check_residual_stack(stack_variant(forward=forward))


# ------------------------------------------------------------------ the eleventh audit


def _blocks_averaged_side_by_side(self, x):
    """05.3: the blocks' outputs on x averaged got expected/got only (their sum was named)."""
    return sum(block(x) for block in self.blocks) / len(self.blocks)


def _all_block_outputs(self, x):
    outputs = []
    for block in self.blocks:
        x = block(x)
        outputs.append(x)
    return outputs


def test_blocks_averaged_side_by_side_are_named():
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=_blocks_averaged_side_by_side))
    assert err.value.mistake == "blocks side by side"


def test_the_skip_added_twice_hears_it_may_be_added_twice():
    """05.3: a block that adds h, called as h + block(h), was told only 'each block returns 2 * h + branch'."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=_skip_doubled))
    assert "added twice" in err.value.hint


def test_a_list_of_block_outputs_is_not_told_to_stack_them():
    """05.3: a forward returning every block's output was told to build a tensor with torch.stack."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_residual_stack(stack_variant(forward=_all_block_outputs))
    assert "list of 3 tensors" in str(err.value)
    assert "torch.stack" not in str(err.value)


# ------------------------------------------------------------------ thirteenth audit


def _numpy_start(self, i, o):
    nn.Module.__init__(self)
    self.weight = nn.Parameter(torch.from_numpy(np.random.randn(o, i) / np.sqrt(i)))
    self.bias = nn.Parameter(torch.from_numpy(np.zeros(o)))


def test_a_layer_that_starts_in_float64_passes_with_a_note_on_its_dtype(capsys):
    """05.1: the check loads float64 weights and calls .float(), so parameters made from NumPy arrays (float64)
    passed without a word, though MyLinear(5, 3)(torch.randn(4, 5)) fails with a dtype mismatch."""
    layer = linear_variant(init=_numpy_start)
    with pytest.raises(RuntimeError):
        layer(5, 3)(torch.randn(4, 5))
    lab.check_my_linear(layer)
    out = capsys.readouterr().out
    assert out.startswith("PASS  MyLinear")
    assert "note: MyLinear(5, 3) starts with torch.float64 parameters" in out
    assert "torch.float32" in out


@pytest.mark.parametrize("answer", [[SEEN], torch.tensor([SEEN]), np.array([SEEN]), (SEEN,)])
def test_list_prediction_reads_one_number_in_brackets_as_that_number(answer, capsys):
    """05.2 refused [101110] and torch.tensor([101110]), which 03.4 and 08.1 read as the number inside."""
    lab.check_layer_list_prediction(answer)
    assert capsys.readouterr().out.startswith(f"PASS  scalars the optimizer sees: {SEEN} is right")


def _squeezed(self, x):
    """05.3: the output squeezed at the end, right for every batch but one of a single sample."""
    return ResidualStack.forward(self, x).squeeze()


def test_a_stack_that_squeezes_a_batch_of_one_is_named():
    """Fourteenth audit: .squeeze() on the output passed, since the check never tried a batch of one sample."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_residual_stack(stack_variant(forward=_squeezed))
    assert info.value.mistake == "batch of one squeezed"
    assert "(1, 5)" in info.value.message


# ------------------------------------------------------------------ fifteenth audit: bad input


def _forward_grad_off(self, x):
    torch.set_grad_enabled(False)
    return x @ self.weight.t() + self.bias


def test_a_forward_that_switches_gradients_off_for_good_is_named_and_the_setting_restored(capsys):
    """torch.set_grad_enabled(False) in forward was told "not connected to autograd's graph" and left gradient
    recording off, so every later check (the right answer's too) failed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_my_linear(linear_variant(forward=_forward_grad_off))
    assert info.value.mistake == "torch settings changed for the whole program"
    assert "gradient recording off" in info.value.message
    assert torch.is_grad_enabled()
    lab.check_my_linear(MyLinear)
    assert "PASS" in capsys.readouterr().out


def _init_in_float64(self, D, H, depth):
    torch.set_default_dtype(torch.float64)
    ResidualStack.__init__(self, D, H, depth)


def test_a_stack_that_changes_the_default_dtype_is_named_and_the_setting_restored():
    with pytest.raises(lab.CheckError) as info:
        lab.check_residual_stack(stack_variant(init=_init_in_float64))
    assert info.value.mistake == "torch settings changed for the whole program"
    assert torch.get_default_dtype() == torch.float32


def test_an_output_of_zeros_is_not_called_scaled():
    """05.1: a forward that returns zeros was told "the whole output is multiplied by a constant" (the constant 0)."""
    student = linear_variant(forward=lambda self, x: torch.zeros(*x.shape[:-1], self.bias.numel(), dtype=x.dtype))
    with pytest.raises(lab.CheckError) as info:
        lab.check_my_linear(student)
    assert info.value.mistake not in ("output scaled", "product scaled", "bias scaled")
    assert "exactly 0" in str(info.value)


class _StateDictRaises(MyLinear):
    def state_dict(self, *args, **kwargs):
        raise RuntimeError("my own bug")


class _NamedParametersRaises(MyLinear):
    def named_parameters(self, *args, **kwargs):
        raise RuntimeError("my own bug")


class _ZeroGradRaises(MyLinear):
    def zero_grad(self, set_to_none=True):
        raise RuntimeError("my own bug")


class _ParametersStopHalfway(MyLinear):
    def parameters(self, recurse=True):
        yield self.weight
        raise RuntimeError("my own bug")


@pytest.mark.parametrize(
    "student, method",
    [
        (_StateDictRaises, "state_dict()"),
        (_NamedParametersRaises, "named_parameters()"),
        (_ZeroGradRaises, "zero_grad()"),
        (_ParametersStopHalfway, "zero_grad()"),
    ],
)
def test_an_override_that_raises_is_named_by_its_method(student, method):
    """These got "the check could not use what it was given (RuntimeError: my own bug)"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_my_linear(student)
    assert f"MyLinear(4, 4).{method} raised RuntimeError: my own bug" in info.value.message
    assert "could not use" not in str(info.value)


def test_a_count_too_large_for_a_float_gets_a_sentence():
    """05.2: 10**400 got "the check could not use what it was given (OverflowError ...)"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_layer_list_prediction(10**400)
    assert info.value.usage and "401 digits" in str(info.value)
    assert "could not use" not in str(info.value)

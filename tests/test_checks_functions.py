"""Checks of notebook 04 (custom autograd Functions): correct answers in every style the prompt allows
pass; every listed mistake is named (one test each, generated from the specs where they are values);
backward is judged on what it returns, before autograd could sum a leading dimension or cast a dtype
away; the classmate's Function handed in unchanged gets its bug named without the fix; the prediction
records its first answer; bad answers of any kind get one clear sentence, never a PASS or a hang."""

import ast
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

import labsupport as lab
from labsupport.checks import core, predictions, running
from labsupport.checks import nb04_custom_functions as Fn

ROOT = Path(__file__).resolve().parent.parent


def notebook_classes(cell_id, namespace=None):
    """The classes defined in a cell of notebook 04 (the code around them is left out)."""
    cells = json.loads((ROOT / "notebooks" / "04_custom_functions.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if c.get("id") == cell_id)
    tree = ast.parse(source)
    tree.body = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    namespace = {"torch": torch, **(namespace or {})}
    exec(compile(tree, f"<notebook 04 cell {cell_id}>", "exec"), namespace)
    return namespace


def failure(check, *args):
    with pytest.raises(lab.CheckError) as info:
        check(*args)
    return info.value


def make(forward, backward, name="Fn"):
    """A Function subclass from two plain functions forward(ctx, ...) and backward(ctx, g)."""
    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


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


def sigmoid_of_saved(ctx, g):
    return g * torch.sigmoid(ctx.saved_tensors[0])


Softplus = make(save_x(stable), sigmoid_of_saved, "Softplus")
SoftplusFromOutput = make(save_y, lambda ctx, g: -g * torch.expm1(-ctx.saved_tensors[0]), "SoftplusFromOutput")


class SoftplusModern(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return F.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output * torch.sigmoid(x),)


def mm_forward(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    ctx.scale = scale
    return scale * x.mm(w)


def mm_backward(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g), None


ScaledMatmul = make(mm_forward, mm_backward, "ScaledMatmul")


class ScaledMatmulWithNeeds(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, s):
        ctx.save_for_backward(a, b, torch.tensor(s))
        return a.mm(b) * s

    @staticmethod
    def backward(ctx, grad_output):
        a, b, s = ctx.saved_tensors
        grad_a = grad_output.mm(b.t()) * s if ctx.needs_input_grad[0] else None
        grad_b = a.t().mm(grad_output) * s if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None


def _stable_softplus(x):
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


class SoftplusContiguousView(torch.autograd.Function):
    """Ninth audit (a transposed grad_output): contiguous() before view(-1) is right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _stable_softplus(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        flat = grad_output.contiguous().view(-1) * torch.sigmoid(x).contiguous().view(-1)
        return flat.view(x.shape)


class SoftplusFromBoth(torch.autograd.Function):
    """Saves x and y: the derivative is exp(x - y), and a new tensor written into in place."""

    @staticmethod
    def forward(ctx, x):
        y = _stable_softplus(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        local = torch.exp(x - y)
        local.mul_(grad_output)
        return local


class ScaledMatmulScaleFirst(torch.autograd.Function):
    """Ninth audit (other sizes, float64 to 1e-7): the scale on grad_output first, @ and a scale kept as a float."""

    @staticmethod
    def forward(ctx, x, w, scale):
        ctx.save_for_backward(x, w)
        ctx.scale = float(scale)
        return scale * x.mm(w)

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        g = grad_output * ctx.scale
        return g @ w.T, x.T @ g, None


def test_the_notebook_solutions_pass(capsys):
    lab.check_softplus_function(notebook_classes("nb04-c108")["Softplus"])
    classmate = notebook_classes("nb04-c115")["ClassmateScaledMatmul"]
    solved = notebook_classes("nb04-c119", {"ClassmateScaledMatmul": classmate})["ScaledMatmul"]
    lab.check_scaled_matmul_function(solved)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "PASS  Softplus: forward and backward match autograd through torch.nn.functional.softplus; gradcheck passes",
        "PASS  ScaledMatmul: forward and backward match autograd through scale * torch.mm(x, w); gradcheck passes",
    ]


@pytest.mark.parametrize(
    "check, cls",
    [
        (lab.check_softplus_function, Softplus),
        (lab.check_softplus_function, SoftplusFromOutput),
        (lab.check_softplus_function, SoftplusModern),
        (lab.check_scaled_matmul_function, ScaledMatmul),
        (lab.check_scaled_matmul_function, ScaledMatmulWithNeeds),
        (lab.check_softplus_function, SoftplusContiguousView),
        (lab.check_softplus_function, SoftplusFromBoth),
        (lab.check_scaled_matmul_function, ScaledMatmulScaleFirst),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_correct_designs_pass(check, cls, capsys):
    check(cls)
    assert capsys.readouterr().out.startswith(f"PASS  {cls.__name__}: forward and backward match autograd")


# ------------------------------------------------------------------ every listed mistake

SPECS = {
    "softplus": (Fn._SOFTPLUS, lab.check_softplus_function),
    "matmul": (Fn._SCALED_MATMUL, lab.check_scaled_matmul_function),
}


def from_spec(spec, k):
    """A Function whose forward and backward return the k-th listed wrong values (None there: the right one)."""

    def forward(ctx, *args):
        ctx.args = args
        right = spec.reference(*args)
        wrong = spec.mistakes(*args, torch.zeros_like(right))[k].matches[0]
        return right if wrong is None else wrong

    def backward(ctx, g):
        wrong = spec.mistakes(*ctx.args, g)[k].matches[1:]
        right = Fn._reference(spec, (*ctx.args, g))[1:]
        grads = [r if w is None else w for w, r in zip(wrong, right)]
        return (*grads, *[None] * (len(ctx.args) - len(grads)))

    return make(forward, backward, "Wrong")


def value_mistakes():
    for key, (spec, check) in SPECS.items():
        for k, mistake in enumerate(spec.mistakes(*spec.cases()[0])):
            if isinstance(mistake.matches, tuple):
                yield pytest.param(spec, check, k, mistake, id=f"{key}: {mistake.name}")


@pytest.mark.parametrize("spec, check, k, mistake", list(value_mistakes()))
def test_each_listed_wrong_value_is_named(spec, check, k, mistake):
    err = failure(check, from_spec(spec, k))
    assert err.mistake == mistake.name
    assert err.hint == mistake.why


def naive_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.exp(x) / (1 + torch.exp(x))


def float32_inside_backward(ctx, g):
    """04.2: the derivative computed in float32 and cast back (was named "1 - exp(-y) cancels")."""
    (x,) = ctx.saved_tensors
    return g * torch.sigmoid(x.float()).to(x.dtype)


def averaged_grad_output(ctx, g):
    """04.2: grad_output averaged before the chain rule (got expected/got only)."""
    (x,) = ctx.saved_tensors
    return g.mean() * torch.sigmoid(x)


PREDICATE_MISTAKES = {  # the Softplus mistakes listed as predicates, each written as a student would
    "forward overflows": make(save_x(lambda x: torch.log(1 + torch.exp(x))), sigmoid_of_saved),
    "exp(x) / (1 + exp(x)) overflows": make(save_x(stable), naive_backward),
    "forward is max(x, 0) alone": make(save_x(lambda x: x.clamp(min=0)), sigmoid_of_saved),
    "log for log1p": make(save_x(lambda x: x.clamp(min=0) + torch.log(1 + torch.exp(-x.abs()))), sigmoid_of_saved),
    "backward in float32": make(save_x(stable), float32_inside_backward),
    "grad_output reduced to one number": make(save_x(stable), averaged_grad_output),
    "x + log1p(exp(-x)) overflows": make(save_x(lambda x: x + torch.log1p(torch.exp(-x))), sigmoid_of_saved),
    # twelfth audit: a tanh-based slope that is not the sigmoid got a generic expected/got
    "a tanh that is not the derivative": make(
        save_x(stable), lambda ctx, g: g * 0.5 * (1 + torch.tanh(ctx.saved_tensors[0]))
    ),
    # thirteenth audit: the gradient divided by the number of elements got "no known mistake"
    "gradient times a constant": make(save_x(stable), lambda ctx, g: sigmoid_of_saved(ctx, g) / g.numel()),
    # fourteenth audit: a derivative floored with clamp(min=1e-7) got expected/got only
    "derivative floored at a small number": make(
        save_x(stable), lambda ctx, g: g * torch.sigmoid(ctx.saved_tensors[0]).clamp(min=1e-7)
    ),
    # fourteenth audit: the whole gradient clamped from below (its negative values gone) got expected/got only
    "gradient clamped below": make(
        save_x(stable), lambda ctx, g: (g * torch.sigmoid(ctx.saved_tensors[0])).clamp(min=1e-7)
    ),
}


def _guarded_from_the_output(ctx, g):
    """04.2 from the output y: -expm1(-y) kept inside (1e-7, 1 - 1e-7)."""
    return -g * torch.expm1(-ctx.saved_tensors[0]).clamp(-1 + 1e-7, -1e-7)


@pytest.mark.parametrize(
    "backward",
    [
        lambda ctx, g: g * torch.sigmoid(ctx.saved_tensors[0]).clamp(1e-7, 1 - 1e-7),
        lambda ctx, g: g * (torch.sigmoid(ctx.saved_tensors[0]) + 1e-7),
        lambda ctx, g: g * torch.sigmoid(ctx.saved_tensors[0].clamp(-30, 30)),
    ],
    ids=["clamped into (eps, 1 - eps)", "epsilon added", "x clipped"],
)
def test_other_guards_against_zero_are_named_as_a_floor(backward):
    """Fourteenth audit: an epsilon added was named "backward in float32"; a clamp into (eps, 1 - eps) or x clipped
    to [-30, 30] got expected/got only."""
    err = failure(lab.check_softplus_function, make(save_x(stable), backward))
    assert err.mistake == "derivative floored at a small number"
    assert "clamp(min" not in str(err) and "1e-7" not in str(err)


def test_the_floor_is_named_from_the_output_too():
    err = failure(lab.check_softplus_function, make(save_y, _guarded_from_the_output))
    assert err.mistake == "derivative floored at a small number"


def test_a_wrong_forward_is_not_explained_by_its_gradient():
    """Fourteenth audit: softplus with beta=2 (sigmoid(2x) = (1 + tanh(x)) / 2 in backward) was told its gradient
    was a tanh that is not the derivative, while the check reported its forward output wrong."""
    beta_two = make(save_x(lambda x: F.softplus(x, beta=2)), lambda ctx, g: g * torch.sigmoid(2 * ctx.saved_tensors[0]))
    err = failure(lab.check_softplus_function, beta_two)
    assert "forward output" in str(err)
    assert err.mistake != "a tanh that is not the derivative"


def _stable_in_float32(x):
    return stable(x.float()).to(x.dtype)


def test_a_forward_computed_in_float32_is_not_taken_for_log_instead_of_log1p():
    """04.2: float32 inside, cast back, was told "log1p keeps the tiny number's digits": it had used log1p."""
    assert failure(lab.check_softplus_function, make(save_x(_stable_in_float32), sigmoid_of_saved)).mistake == (
        "forward in float32"
    )


def test_every_predicate_mistake_has_a_test():
    spec = Fn._SOFTPLUS
    names = [m.name for m in spec.mistakes(*spec.cases()[0]) if not isinstance(m.matches, tuple)]
    assert sorted(names) == sorted(PREDICATE_MISTAKES)


@pytest.mark.parametrize("name", PREDICATE_MISTAKES)
def test_predicate_mistake_is_named(name):
    assert failure(lab.check_softplus_function, PREDICATE_MISTAKES[name]).mistake == name


def test_the_cancelling_output_formula_is_named_as_a_student_writes_it():
    cancels = make(save_y, lambda ctx, g: g * (1 - torch.exp(-ctx.saved_tensors[0])))
    assert failure(lab.check_softplus_function, cancels).mistake == "1 - exp(-y) cancels"


# ------------------------------------------------------------------ backward judged before autograd


def extra_dimension(ctx, g):
    return sigmoid_of_saved(ctx, g).unsqueeze(0)


def float32_gradient(ctx, g):
    return sigmoid_of_saved(ctx, g).float()


def float32_grad_w(ctx, g):
    grad_x, grad_w, _ = mm_backward(ctx, g)
    return grad_x, grad_w.float(), None


def extra_dimension_grad_w(ctx, g):
    grad_x, grad_w, _ = mm_backward(ctx, g)
    return grad_x, grad_w.unsqueeze(0), None


@pytest.mark.parametrize(
    "check, cls, words",
    [
        (lab.check_softplus_function, make(save_x(stable), extra_dimension), "extra leading dimension"),
        (lab.check_softplus_function, make(save_x(stable), float32_gradient), "wrong dtype"),
        (lab.check_scaled_matmul_function, make(mm_forward, extra_dimension_grad_w), "extra leading dimension"),
        (lab.check_scaled_matmul_function, make(mm_forward, float32_grad_w), "wrong dtype"),
    ],
    ids=["softplus (1, *shape)", "softplus float32", "matmul (1, *shape)", "matmul float32"],
)
def test_gradients_autograd_would_fix_silently_are_refused(check, cls, words):
    """Issue 23: these passed, because autograd sums a leading dimension and casts the dtype."""
    err = failure(check, cls)
    assert words in str(err) and "case 1 of" in str(err)
    assert err.mistake is None  # no known mistake is guessed for a wrong form


def two_grads(ctx, g):
    return mm_backward(ctx, g)[:2]


def grad_for_scale(ctx, g):
    return (*mm_backward(ctx, g)[:2], torch.tensor(1.0))


def none_for_w(ctx, g):
    return mm_backward(ctx, g)[0], None, None


def as_list(ctx, g):
    return list(mm_backward(ctx, g))


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


@pytest.mark.parametrize(
    "forward, backward, name",
    [
        (mm_forward, two_grads, "wrong number of gradients"),
        (mm_forward, grad_for_scale, "gradient for a number"),
        (mm_forward, none_for_w, "None for a tensor"),
        (mm_forward, as_list, "list instead of tuple"),
        (save_scale, mm_backward, "number saved with save_for_backward"),
        (mm_forward, grad_output_in_place, "grad_output changed in place"),
        (input_in_place, mm_backward, "forward changes its input"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_what_backward_returns_is_named(forward, backward, name):
    assert failure(lab.check_scaled_matmul_function, make(forward, backward)).mistake == name


# ------------------------------------------------------------------ 04.4: the starting code gets no answer


def test_the_classmates_function_handed_in_unchanged_gets_no_answer(capsys):
    classmate = notebook_classes("nb04-c115")["ClassmateScaledMatmul"]
    not_overridden = type("ScaledMatmul", (classmate,), {})
    for starting in (classmate, not_overridden):
        core.reset_feedback()
        texts = []
        for _ in range(core.CODE_AFTER):
            err = failure(lab.check_scaled_matmul_function, starting)
            assert err.mistake == Fn._PLANTED.name
            texts += [str(err), "\n".join(err.rendered()), err.look or ""]
        capsys.readouterr()
        lab.hint("04.4")
        texts.append(capsys.readouterr().out)
        text = "\n".join(texts)
        assert "look at:" in text and "Likely mistake" in text
        for leak in ["scale", "ctx.scale", "x.t()", "saved_x", "lacks the factor", "multiply grad_w"]:
            assert leak not in text, leak


# ------------------------------------------------------------------ bad answers


def raises(ctx, *args):
    raise ValueError("boom")


def stub(ctx, *args):
    raise NotImplementedError("Exercise 2")


def never_returns(ctx, *args):
    while True:
        pass


def to_meta(ctx, g):
    return sigmoid_of_saved(ctx, g).to("meta")


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # instantiating a Function is deprecated: the mistake
    INSTANCE = Softplus()

BAD = {
    "None": None,
    "list": [1, 2],
    "array": np.ones(3),
    "int": 3,
    "apply": Softplus.apply,
    "an instance": INSTANCE,
    "torch.autograd.Function": torch.autograd.Function,
    "a module class": torch.nn.Linear,
    "not a Function": type("Softplus", (), {"forward": staticmethod(stable)}),
    "extra dimension out": make(save_x(lambda x: stable(x).unsqueeze(0)), sigmoid_of_saved),
    "float32 output": make(save_x(lambda x: stable(x).float()), sigmoid_of_saved),
    "NaN output": make(save_x(lambda x: stable(x) * float("nan")), sigmoid_of_saved),
    "meta output": make(save_x(lambda x: stable(x).to("meta")), sigmoid_of_saved),
    "int output": make(save_x(lambda x: stable(x).long()), sigmoid_of_saved),
    "tuple output": make(save_x(lambda x: (stable(x), x)), sigmoid_of_saved),
    "list output": make(save_x(lambda x: stable(x).tolist()), sigmoid_of_saved),
    "raising forward": make(raises, sigmoid_of_saved),
    "raising backward": make(save_x(stable), raises),
    "stub": make(stub, stub),
    "None gradient": make(save_x(stable), lambda ctx, g: None),
    "numpy gradient": make(save_x(stable), lambda ctx, g: np.ones(3)),
    "meta gradient": make(save_x(stable), to_meta),
    "NaN gradient": make(save_x(stable), lambda ctx, g: g * float("nan")),
    "no backward": type("Softplus", (torch.autograd.Function,), {"forward": staticmethod(save_x(stable))}),
    "never returns": make(never_returns, never_returns),
    "backward never returns": make(save_x(stable), never_returns),
}


@pytest.mark.parametrize("check", [lab.check_softplus_function, lab.check_scaled_matmul_function])
@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_bad_answers_get_a_sentence(check, bad, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    err = failure(check, bad)
    text = str(err)
    assert text and "could not use" not in text and "Traceback" not in text
    assert "PASS" not in capsys.readouterr().out
    listed = [m.name for spec, _ in SPECS.values() for m in spec.mistakes(*spec.cases()[0])]
    assert err.mistake not in listed  # a wrong form is never given a known mistake's cause


@pytest.mark.parametrize("check", [lab.check_softplus_function, lab.check_scaled_matmul_function])
def test_a_function_that_never_returns_is_stopped(check, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    assert "did not return within 0.2 s" in str(failure(check, make(never_returns, never_returns)))


# ------------------------------------------------------------------ 04.1 prediction


@pytest.mark.parametrize("answer", ["nan", " NaN ", float("nan"), torch.tensor(float("nan")), np.float32("nan")])
def test_sigmoid_prediction_passes_in_any_form(answer, capsys):
    lab.check_sigmoid_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("wrong", ["0", 0, 0.0, torch.tensor(0.0), "inf", float("inf"), "error"])
def test_wrong_then_right_records_the_first_answer(wrong, capsys):
    lab.check_sigmoid_prediction(wrong)
    lab.check_sigmoid_prediction("nan")
    out = capsys.readouterr().out
    assert "PASS" not in out and out.startswith("NOT RIGHT") and "Now explain:" in out
    assert predictions.COMMITTED["04.1"].answer in ("0", "inf", "error")


@pytest.mark.parametrize("answer, word", [("0.0", "0"), ("-0", "0"), (" Infinity ", "inf"), ("'0.'", "0")])
def test_sigmoid_prediction_reads_a_number_written_as_text(answer, word, capsys):
    """Tenth audit: 0.0 was read as the choice "0", but "0.0" was refused as not one of the choices."""
    lab.check_sigmoid_prediction(answer)
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    assert predictions.COMMITTED["04.1"].answer == word


@pytest.mark.parametrize("wrong", ["0", "inf", "error"])
def test_each_wrong_prediction_gets_its_note_from_lab_hint(wrong, capsys):
    lab.check_sigmoid_prediction(wrong)
    capsys.readouterr()
    lab.hint("04.1")
    out = capsys.readouterr().out
    header, first = out.splitlines()[:2]
    assert header.startswith("HINT · Exercise 04.1") and first.startswith(f"  About '{wrong}'") and "Why:" in out


@pytest.mark.parametrize(
    "bad",
    [
        None,
        5,
        -1.0,
        float("-inf"),
        True,
        "maybe",
        ["nan"],
        np.array([0.0]),
        torch.zeros(2),
        torch.zeros((), device="meta"),
    ],
)
def test_sigmoid_prediction_bad_answers_get_a_sentence(bad, capsys):
    err = failure(lab.check_sigmoid_prediction, bad)
    assert err.usage and "could not use" not in str(err)
    assert "04.1" not in predictions.COMMITTED
    assert "PASS" not in capsys.readouterr().out


NEW_SOFTPLUS_MISTAKES = {
    "sign flipped": lambda ctx, g: -g * torch.sigmoid(ctx.saved_tensors[0]),
    "derivative of max(x, 0) alone": lambda ctx, g: g * (ctx.saved_tensors[0] > 0).to(g.dtype),
}


@pytest.mark.parametrize("name", list(NEW_SOFTPLUS_MISTAKES))
def test_more_softplus_backward_mistakes_are_named(name):
    """04.2: these got expected/got only, on every try."""
    err = failure(lab.check_softplus_function, make(save_x(stable), NEW_SOFTPLUS_MISTAKES[name]))
    assert err.mistake == name


def _fixed_half_forward(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    return scale * x.mm(w)


def _fixed_half_backward(ctx, g):
    x, w = ctx.saved_tensors
    return 0.5 * g.mm(w.t()), 0.5 * x.t().mm(g), None


def test_a_factor_written_into_backward_is_named():
    """04.4: 0.5 in place of the saved scale got expected/got only; the message never mentioned the scale."""
    err = failure(lab.check_scaled_matmul_function, make(_fixed_half_forward, _fixed_half_backward, "ScaledMatmul"))
    assert err.mistake == "a fixed factor"


def _half_in_grad_w_backward(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), 0.5 * x.t().mm(g), None


def _saving_scale_forward(ctx, x, w, scale):
    ctx.save_for_backward(x, w)
    ctx.scale = scale
    return scale * x.mm(w)


def test_a_number_written_into_grad_w_alone_is_named():
    """04.4: the notebook's 0.5 copied into grad_w while grad_x uses the saved scale."""
    student = make(_saving_scale_forward, _half_in_grad_w_backward, "ScaledMatmul")
    err = failure(lab.check_scaled_matmul_function, student)
    assert err.mistake == "grad_w off by another factor"
    assert "0.5 * " not in str(err) and "ctx.scale" not in str(err)


def test_a_forward_without_the_absolute_value_is_named():
    no_abs = make(save_x(lambda x: x.clamp(min=0) + torch.log1p(torch.exp(-x))), sigmoid_of_saved)
    assert failure(lab.check_softplus_function, no_abs).mistake == "exp(-x) for exp(-|x|)"


@pytest.mark.parametrize(
    "backward",
    [
        lambda ctx, g: g * (1 - 1 / (1 + torch.exp(ctx.saved_tensors[0]))),
        lambda ctx, g: g * 0.5 * (1 + torch.tanh(ctx.saved_tensors[0] / 2)),
    ],
)
def test_other_cancelling_backwards_hear_about_the_cancellation_not_about_y(backward):
    err = failure(lab.check_softplus_function, make(save_x(stable), backward))
    assert err.mistake == "1 - exp(-y) cancels"
    assert "it subtracts two numbers close to 1" in err.hint


def _sigmoid_derivative_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.sigmoid(x) * (1 - torch.sigmoid(x))


def _grad_x_negated(ctx, g):
    x, w = ctx.saved_tensors
    return -ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g), None


def _grad_w_negated(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), -ctx.scale * x.t().mm(g), None


def _grad_w_batch_mean(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g) / x.shape[0], None


WRITTEN_MISTAKES = {  # found by the audit: each got expected/got only, or a wrong cause (04.4's "not this scale")
    "correction subtracted": (
        lab.check_softplus_function,
        make(save_x(lambda x: x.clamp(min=0) - torch.log1p(torch.exp(-x.abs()))), sigmoid_of_saved),
    ),
    "sigmoid's derivative of x": (lab.check_softplus_function, make(save_x(stable), _sigmoid_derivative_backward)),
    "grad_x sign flipped": (lab.check_scaled_matmul_function, make(mm_forward, _grad_x_negated, "ScaledMatmul")),
    "grad_w sign flipped": (lab.check_scaled_matmul_function, make(mm_forward, _grad_w_negated, "ScaledMatmul")),
    "grad_w averaged over the batch": (
        lab.check_scaled_matmul_function,
        make(mm_forward, _grad_w_batch_mean, "ScaledMatmul"),
    ),
}


def _stable_sigmoid_without_the_sign(ctx, g):
    """04.2, found by the fourth audit: a hand-written stable sigmoid whose x < 0 branch lost the sign."""
    (x,) = ctx.saved_tensors
    return g * torch.where(x >= 0, 1 / (1 + torch.exp(-x)), 1 / (1 + torch.exp(x)))


def _stable_sigmoid_of_minus_abs(ctx, g):
    """04.2: the stable sigmoid's formula for x < 0, exp(-|x|) / (1 + exp(-|x|)), used for every x."""
    (x,) = ctx.saved_tensors
    e = torch.exp(-x.abs())
    return g * e / (1 + e)


WRITTEN_MISTAKES["sigmoid of |x|"] = (
    lab.check_softplus_function,
    make(save_x(stable), _stable_sigmoid_without_the_sign),
)
WRITTEN_MISTAKES["sigmoid of -|x|"] = (lab.check_softplus_function, make(save_x(stable), _stable_sigmoid_of_minus_abs))


@pytest.mark.parametrize("name", list(WRITTEN_MISTAKES))
def test_mistakes_written_as_a_student_would_are_named(name):
    check, student = WRITTEN_MISTAKES[name]
    assert failure(check, student).mistake == name


def _sigmoid_in_place(ctx, g):
    (x,) = ctx.saved_tensors
    return g * x.sigmoid_()


def _scale_in_place(ctx, g):
    x, w = ctx.saved_tensors
    grad_x = g.mm(w.t()).mul_(ctx.scale)
    w.mul_(ctx.scale)  # the saved weight scaled in place, then used for grad_w's sake
    return grad_x, x.t().mm(g) * ctx.scale, None


@pytest.mark.parametrize(
    "check, student",
    [
        (lab.check_softplus_function, make(save_x(stable), _sigmoid_in_place)),
        (lab.check_scaled_matmul_function, make(mm_forward, _scale_in_place, "ScaledMatmul")),
    ],
    ids=["softplus x.sigmoid_()", "matmul w.mul_()"],
)
def test_a_backward_that_changes_a_saved_tensor_is_named(check, student):
    """04.2: x.sigmoid_() in backward got torch's RuntimeError from gradcheck, a traceback's words."""
    err = failure(check, student)
    assert err.mistake == "saved tensor changed in place"
    assert "RuntimeError" not in str(err)


def test_a_forward_with_the_absolute_value_in_front_hears_about_it():
    """04.2: |x| + log1p(exp(-|x|)) was told that its correction takes exp(-x), which it does not."""
    with_abs = make(save_x(lambda x: x.abs() + torch.log1p(torch.exp(-x.abs()))), sigmoid_of_saved)
    err = failure(lab.check_softplus_function, with_abs)
    assert err.mistake == "exp(-x) for exp(-|x|)"
    assert "the first term is |x|" in err.hint


def _saved_tuple_backward(ctx, g):
    x = ctx.saved_tensors  # the tuple, not the tensor inside it
    return g * torch.sigmoid(x)


def test_saved_tensors_used_as_a_tensor_is_named():
    """04.2: `x = ctx.saved_tensors` got torch's TypeError about a tuple, with no cause."""
    err = failure(lab.check_softplus_function, make(save_x(stable), _saved_tuple_backward))
    assert err.mistake == "ctx.saved_tensors not unpacked"
    assert "x, = ctx.saved_tensors" not in str(err)


def _backward_with_self(self, ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.sigmoid(x)


def test_a_backward_with_self_is_named():
    """04.2: `def backward(self, ctx, g)` got Python's bare TypeError about a missing argument."""
    err = failure(lab.check_softplus_function, make(save_x(stable), _backward_with_self))
    assert err.mistake == "backward's parameters"
    assert "no self" in err.hint


# found by the fifth audit: clamp(max=0) for max(x, 0) got expected/got only
WRITTEN_MISTAKES_5 = {
    "min(x, 0) for max(x, 0)": make(
        save_x(lambda x: x.clamp(max=0) + torch.log1p(torch.exp(-x.abs()))), sigmoid_of_saved, "Softplus"
    ),
    # round 12, second pass: the correction term alone, its first term dropped, got a generic expected/got
    "forward lacks max(x, 0)": make(save_x(lambda x: torch.log1p(torch.exp(-x.abs()))), sigmoid_of_saved, "Softplus"),
}


@pytest.mark.parametrize("name", list(WRITTEN_MISTAKES_5))
def test_mistakes_found_by_the_fifth_audit_are_named(name):
    err = failure(lab.check_softplus_function, WRITTEN_MISTAKES_5[name])
    assert err.mistake == name
    assert "clamp(min=0)" not in str(err)  # the repaired line is never quoted


def test_exp_of_minus_the_output_hears_that_it_is_sigmoid_of_minus_x():
    """04.2: exp(-y), the output form with its "1 -" dropped, was told only about sigmoid(-x), a formula it did not
    write."""
    err = failure(lab.check_softplus_function, make(save_y, lambda ctx, g: g * torch.exp(-ctx.saved_tensors[0])))
    assert err.mistake == "sigmoid(-x)"
    assert "exp(-y) with the output y" in err.hint and "1 minus the derivative" in err.hint


def test_a_backward_that_passes_grad_output_on_unchanged_is_named():
    passed_on = make(save_x(stable), lambda ctx, g: g)
    assert failure(lab.check_softplus_function, passed_on).mistake == "grad_output passed on unchanged"


@pytest.mark.parametrize(
    "first_term, name",
    [
        (lambda x: torch.max(x, 0), "torch.max with a dimension"),
        (lambda x: max(x, 0), "Python's max on a tensor"),
    ],
)
def test_a_forward_that_takes_max_x_0_literally_is_named(first_term, name):
    forward = save_x(lambda x: first_term(x) + torch.log1p(torch.exp(-x.abs())))
    err = failure(lab.check_softplus_function, make(forward, sigmoid_of_saved))
    assert err.mistake == name
    assert "element" in err.hint and "clamp" not in err.hint


# ------------------------------------------------------------------ seventh audit: answers that raise or are half-written


def _prints_instead(ctx, g):
    print(sigmoid_of_saved(ctx, g))


def _forward_with_self(self, ctx, x):
    ctx.save_for_backward(x)
    return stable(x)


def _forward_local_in_backward(ctx, g):
    return g * torch.sigmoid(x)  # noqa: F821 (forward's argument, as a student reads it in backward)


def _saves_nothing(ctx, x):
    return stable(x)


def _unpacks_one(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.sigmoid(x)


def _scale_from_saved_tensors(ctx, g):
    x, w, scale = ctx.saved_tensors
    return scale * g.mm(w.t()), scale * x.t().mm(g), None


def test_a_method_that_prints_instead_of_returning_is_named(capsys):
    """04.2/04.4: a backward that printed its result was told "1 value(s) ... wrong number of gradients"."""
    for check, forward in ((lab.check_softplus_function, save_x(stable)), (lab.check_scaled_matmul_function, None)):
        backward = _prints_instead if forward else lambda ctx, g: print(mm_backward(ctx, g))
        err = failure(check, make(forward or mm_forward, backward))
        assert err.mistake == Fn.NOTHING_RETURNED.name
        assert "backward returned None" in str(err) and "value(s)" not in str(err)
    err = failure(lab.check_softplus_function, make(lambda ctx, x: print(stable(x)), sigmoid_of_saved))
    assert err.mistake == Fn.NOTHING_RETURNED.name and "forward returned None" in str(err)
    capsys.readouterr()


def test_a_forward_with_self_is_named():
    """04.2: `def forward(self, ctx, x)` got Python's bare TypeError about a missing argument."""
    err = failure(lab.check_softplus_function, make(_forward_with_self, sigmoid_of_saved))
    assert err.mistake == Fn.FORWARD_SIGNATURE.name
    assert "no self" in err.hint


@pytest.mark.parametrize(
    "backward", [_forward_local_in_backward, lambda ctx, g: g * torch.sigmoid(ctx.x)], ids=["name", "ctx attribute"]
)
def test_backward_reading_what_forward_did_not_hand_over_is_named(backward):
    """04.2/04.4: forward's x read in backward got a bare NameError (or AttributeError on ctx)."""
    err = failure(lab.check_softplus_function, make(save_x(stable), backward))
    assert err.mistake == Fn.FORWARD_NAMES_IN_BACKWARD.name
    assert "save_for_backward(x)" not in str(err)  # the repaired line is never quoted


@pytest.mark.parametrize(
    "check, forward, backward",
    [
        (lab.check_softplus_function, _saves_nothing, _unpacks_one),
        (lab.check_scaled_matmul_function, mm_forward, _scale_from_saved_tensors),
    ],
    ids=["nothing saved", "scale unpacked from saved_tensors"],
)
def test_saved_tensors_miscounted_is_named(check, forward, backward):
    """04.2/04.4: unpacking more tensors than forward saved got Python's bare ValueError."""
    err = failure(check, make(forward, backward))
    assert err.mistake == Fn.SAVED_COUNT.name


def _backward_left_as_given(ctx, grad_output): ...


def test_a_method_left_as_the_template_gave_it_is_not_written_yet():
    """04.2: the template's `def backward(ctx, grad_output): ...` was told "returned None for x"."""
    err = failure(lab.check_softplus_function, make(save_x(stable), _backward_left_as_given, "Softplus"))
    assert err.usage and "Softplus.backward is not written yet" in str(err)


def test_a_function_without_forward_says_so():
    """04.4: a ScaledMatmul that subclasses torch.autograd.Function and only overrides backward was told "your
    forward is not written yet"."""
    err = failure(
        lab.check_scaled_matmul_function,
        type("ScaledMatmul", (torch.autograd.Function,), {"backward": staticmethod(mm_backward)}),
    )
    assert err.usage and "has no forward" in str(err)


# ------------------------------------------------------------------ eighth round


Classmate = make(mm_forward, lambda ctx, g: (ctx.scale * g.mm(ctx.saved_tensors[1].t()), None, None), "Classmate")


class _SuperInBackward(Classmate):
    @staticmethod
    def backward(ctx, grad_output):
        grad_x, _, _ = super().backward(ctx, grad_output)
        x, _ = ctx.saved_tensors
        return grad_x, ctx.scale * x.t().mm(grad_output), None


class _ParentByName(Classmate):
    @staticmethod
    def backward(ctx, grad_output):
        grad_x, _, _ = Classmate.backward(ctx, grad_output)
        x, _ = ctx.saved_tensors
        return grad_x, ctx.scale * x.t().mm(grad_output), None


def test_super_called_in_a_static_backward_is_named():
    """04.4, eighth round: super().backward(...) inside the static backward got a bare TypeError."""
    err = failure(lab.check_scaled_matmul_function, _SuperInBackward)
    assert err.mistake == Fn.SUPER_IN_STATIC.name
    assert "Classmate.backward" not in str(err)  # the repaired call is never quoted


def test_the_parent_backward_called_by_its_class_name_passes(capsys):
    lab.check_scaled_matmul_function(_ParentByName)
    assert "PASS" in capsys.readouterr().out


def _float32_backward(ctx, g):
    x, w = ctx.saved_tensors
    grad_x = ctx.scale * g.float().mm(w.float().t())
    grad_w = ctx.scale * x.float().t().mm(g.float())
    return grad_x.double(), grad_w.double(), None


def test_a_backward_computed_in_float32_is_named():
    """04.4: float32 inside backward, cast back, passed when its rounding stayed under rtol=1e-6."""
    err = failure(lab.check_scaled_matmul_function, make(mm_forward, _float32_backward, "ScaledMatmul"))
    assert err.mistake == "gradients in float32"


def _sizes_written_in(ctx, g):
    x, w = ctx.saved_tensors
    grad_x = torch.zeros(5, 4, dtype=g.dtype)
    grad_x = grad_x + ctx.scale * g.mm(w.t())
    return grad_x, ctx.scale * x.t().mm(g), None


def test_sizes_written_into_backward_fail():
    """04.4: both cases had x (5, 4) and w (4, 3), so a backward that wrote those sizes in passed."""
    failure(lab.check_scaled_matmul_function, make(mm_forward, _sizes_written_in, "ScaledMatmul"))


def _flattened_view(ctx, g):
    (x,) = ctx.saved_tensors
    return (g.view(-1) * torch.sigmoid(x).view(-1)).view(x.shape)


def _remembered_by_shape(ctx, g):
    (x,) = ctx.saved_tensors
    if x.shape not in _REMEMBERED:
        _REMEMBERED[x.shape] = torch.sigmoid(x)
    return g * _REMEMBERED[x.shape]


_REMEMBERED = {}


@pytest.mark.parametrize("backward", [_flattened_view, _remembered_by_shape], ids=["view(-1)", "memoised"])
def test_a_backward_right_only_on_contiguous_or_first_inputs_fails(backward):
    """04.2: every case had a contiguous grad_output and its own shape, so view(-1) and a cache keyed by shape
    passed; the last case repeats case 1's shape with other values, transposed."""
    _REMEMBERED.clear()
    failure(lab.check_softplus_function, make(save_x(stable), backward))


# ------------------------------------------------------------------ the eleventh audit


def _softplus_of_the_output(ctx, g):
    """04.2: softplus taken for its own derivative, written with the saved output (got expected/got only)."""
    (y,) = ctx.saved_tensors
    return g * y


def _sigmoid_of_grad_output(ctx, g):
    """04.2: the derivative evaluated at grad_output instead of x (got expected/got only)."""
    return g * torch.sigmoid(g)


@pytest.mark.parametrize(
    "backward, name",
    [
        (_softplus_of_the_output, "softplus as its own derivative"),
        (_sigmoid_of_grad_output, "derivative taken at grad_output"),
    ],
    ids=["g * y", "g * sigmoid(g)"],
)
def test_eleventh_audit_softplus_backwards_are_named(backward, name):
    forward = save_y if backward is _softplus_of_the_output else save_x(stable)
    err = failure(lab.check_softplus_function, make(forward, backward))
    assert err.mistake == name
    assert "sigmoid(x)" not in err.hint


def _grad_w_divided_by_a_size(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g) / x.shape[1], None


def test_a_size_in_grad_w_is_not_told_it_was_a_written_number():
    """04.4: grad_w divided by x's number of columns was told 'a number written into backward' only."""
    err = failure(lab.check_scaled_matmul_function, make(mm_forward, _grad_w_divided_by_a_size, "ScaledMatmul"))
    assert err.mistake == "grad_w off by another factor"
    assert "a size" in err.hint
    assert "ctx.scale" not in err.hint


# ------------------------------------------------------------------ the twelfth audit


def _tanh_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.tanh(x)


def _tanh_half_without_the_half(ctx, g):
    (x,) = ctx.saved_tensors
    return g * (1 + torch.tanh(x / 2))


def _tanh_half_sigmoid(ctx, g):
    """The sigmoid written with tanh, right on paper: it cancels for very negative x (1 + tanh(x/2) is 1 - 1)."""
    (x,) = ctx.saved_tensors
    return g * 0.5 * (1 + torch.tanh(x / 2))


def _forward_of_minus_x(x):
    return (-x).clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


@pytest.mark.parametrize(
    "student, name",
    [
        (make(save_x(stable), _tanh_backward), "a tanh that is not the derivative"),
        (make(save_x(stable), _tanh_half_without_the_half), "a tanh that is not the derivative"),
        (make(save_x(_forward_of_minus_x), sigmoid_of_saved), "softplus of -x"),
        (make(save_x(lambda x: torch.log1p(torch.exp(-x))), sigmoid_of_saved), "softplus of -x"),
        # the tanh form of the sigmoid itself is not told that its tanh is wrong: it cancels
        (make(save_x(stable), _tanh_half_sigmoid), "1 - exp(-y) cancels"),
    ],
    ids=["tanh(x)", "1 + tanh(x/2)", "max(-x, 0) + ...", "log1p(exp(-x))", "(1 + tanh(x/2)) / 2"],
)
def test_twelfth_audit_softplus_mistakes_are_named(student, name):
    err = failure(lab.check_softplus_function, student)
    assert err.mistake == name
    assert err.look and "sigmoid(x)" not in err.hint + err.look


def test_every_softplus_mistake_says_where_to_look():
    """04.2's mistakes had no "look at" line: the code rung added nothing to the likely mistake."""
    spec = Fn._SOFTPLUS
    for case in spec.cases():
        missing = [m.name for m in spec.mistakes(*case) if not m.look]
        assert not missing, missing


@pytest.mark.parametrize(
    "student, name",
    [
        (make(save_x(stable), lambda ctx, g: [sigmoid_of_saved(ctx, g)]), "list instead of tuple"),
        (
            make(save_x(stable), lambda ctx, g: g.mul_(torch.sigmoid(ctx.saved_tensors[0]))),
            "grad_output changed in place",
        ),
        (make(save_x(stable), lambda ctx, g: (sigmoid_of_saved(ctx, g), g)), "wrong number of gradients"),
        (make(save_x(stable), lambda ctx, g: None), "nothing returned"),
    ],
    ids=["list", "grad_output in place", "two gradients", "None"],
)
def test_softplus_form_mistakes_say_where_to_look(student, name):
    err = failure(lab.check_softplus_function, student)
    assert err.mistake == name and err.look and err.hint


def test_none_for_a_tensor_says_why_and_where():
    err = failure(lab.check_scaled_matmul_function, make(mm_forward, none_for_w, "ScaledMatmul"))
    assert err.mistake == "None for a tensor"
    assert err.hint and "w" in err.look


def _grad_w_of_ones(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(torch.ones_like(g)), None


def test_grad_output_left_out_of_grad_w_alone_is_named():
    """04.4: grad_w without grad_output (x.T @ ones), grad_x right, got a generic expected/got."""
    err = failure(lab.check_scaled_matmul_function, make(mm_forward, _grad_w_of_ones, "ScaledMatmul"))
    assert err.mistake == "grad_output ignored in grad_w"
    assert err.look


@pytest.mark.parametrize("answer", ["RuntimeError", "runtime error", "an error"])
def test_the_errors_own_name_is_read_as_error(answer, capsys):
    lab.check_sigmoid_prediction(answer)
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    assert predictions.COMMITTED["04.1"].answer == "error"


# ------------------------------------------------------------------ thirteenth audit


@pytest.mark.parametrize("factor", [0.5, 3.0, 1 / 20])
def test_a_gradient_off_by_one_constant_factor_is_named_without_the_fix(factor):
    """A backward that halves, doubles or averages the right gradient was compared value by value, with no cause."""
    student = make(save_x(stable), lambda ctx, g: factor * sigmoid_of_saved(ctx, g))
    err = failure(lab.check_softplus_function, student)
    assert err.mistake == "gradient times a constant"
    assert "sigmoid" not in err.hint


def _logsumexp_forward(x):
    return torch.logsumexp(torch.stack([x, torch.zeros_like(x)]), dim=0)


def test_a_forward_through_logsumexp_hears_that_logsumexp_takes_a_log_of_a_sum():
    """torch.logsumexp of x and 0 is softplus on paper but rounds 1 + a tiny number (1e-3 off at x = -30): it
    was told about log(1 + exp(-|x|)), which the student never wrote."""
    err = failure(lab.check_softplus_function, make(save_x(_logsumexp_forward), sigmoid_of_saved))
    assert err.mistake == "log for log1p"
    assert "logsumexp" in err.hint


@pytest.mark.parametrize("answer, word", [("Not a number", "nan"), ("zero", "0"), ("infinite", "inf")])
def test_sigmoid_prediction_reads_the_choice_written_as_a_word(answer, word, capsys):
    """ "not a number" (what NaN stands for) and "zero" were refused as not one of the choices."""
    lab.check_sigmoid_prediction(answer)
    capsys.readouterr()
    assert predictions.COMMITTED["04.1"].answer == word


class SoftplusOnTheClass(torch.autograd.Function):
    """x kept on the class, not on ctx: right while each backward follows its own forward."""

    kept = None

    @staticmethod
    def forward(ctx, x):
        SoftplusOnTheClass.kept = x
        return stable(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * torch.sigmoid(SoftplusOnTheClass.kept)


class ScaledMatmulScaleOnTheClass(torch.autograd.Function):
    """scale kept on the class: the check's cases have other scales, so a second call changes it."""

    scale = None

    @staticmethod
    def forward(ctx, x, w, scale):
        ctx.save_for_backward(x, w)
        ScaledMatmulScaleOnTheClass.scale = scale
        return scale * x.mm(w)

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        scale = ScaledMatmulScaleOnTheClass.scale
        return scale * grad_output.mm(w.t()), scale * x.t().mm(grad_output), None


@pytest.mark.parametrize(
    "check, student",
    [
        (lab.check_softplus_function, SoftplusOnTheClass),
        (lab.check_scaled_matmul_function, ScaledMatmulScaleOnTheClass),
    ],
    ids=["softplus", "scaled matmul"],
)
def test_state_kept_outside_ctx_is_named(check, student):
    """Each case ran forward then its own backward, so what forward kept on the class was always the latest: it
    passed, though a network that applies the Function twice gets the second call's tensors in the first backward."""
    err = failure(check, student)
    assert err.mistake == "state kept outside ctx"
    assert "second call" in err.message


class SoftplusCachedByShape(torch.autograd.Function):
    cache = {}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if x.shape not in SoftplusCachedByShape.cache:
            SoftplusCachedByShape.cache[x.shape] = stable(x)
        return SoftplusCachedByShape.cache[x.shape].clone()

    @staticmethod
    def backward(ctx, grad_output):
        return sigmoid_of_saved(ctx, grad_output)


class SoftplusGradientCachedByShape(torch.autograd.Function):
    cache = {}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return stable(x)

    @staticmethod
    def backward(ctx, grad_output):
        shape = grad_output.shape
        if shape not in SoftplusGradientCachedByShape.cache:
            SoftplusGradientCachedByShape.cache[shape] = sigmoid_of_saved(ctx, grad_output)
        return SoftplusGradientCachedByShape.cache[shape]


@pytest.mark.parametrize(
    "student, name",
    [
        (SoftplusCachedByShape, "result kept from an earlier call"),
        (SoftplusGradientCachedByShape, "gradient kept from an earlier call"),
    ],
)
def test_a_result_kept_from_an_earlier_call_is_named(student, name):
    """Case 4 has case 1's shape to catch a kept result: it failed with a generic "does not match"."""
    err = failure(lab.check_softplus_function, student)
    assert err.mistake == name
    assert "case 4" in err.message


def test_a_zero_gradient_is_not_said_to_come_from_a_summed_grad_output():
    """zeros_like(x) left in backward was told "grad_output was summed or averaged first" (a factor of 0)."""
    err = failure(lab.check_softplus_function, make(save_x(stable), lambda ctx, g: torch.zeros_like(g)))
    assert err.mistake != "grad_output reduced to one number"


class MarkedTensor(torch.Tensor):
    """A subclass with no overrides: it behaves as a tensor, and autograd keeps its graph."""


class DetachingTensor(torch.Tensor):
    """A subclass whose every operation hands back a detached result: a layer after it gets no graph."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
            return out.detach().as_subclass(cls) if isinstance(out, torch.Tensor) else out


def _forward_as(kind):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return stable(x).as_subclass(kind)

    return forward


def test_a_harmless_tensor_subclass_output_passes(capsys):
    """The check read grad_fn from a plain alias of the output (an AliasBackward), so any subclass output was told
    "has no backward to call", though autograd went through the student's backward."""
    lab.check_softplus_function(make(_forward_as(MarkedTensor), sigmoid_of_saved))
    assert capsys.readouterr().out.startswith("PASS")


def test_a_subclass_output_that_loses_its_graph_says_so():
    """Known from the twelfth audit: a subclass whose operations cut the graph got a generic verdict."""
    err = failure(lab.check_softplus_function, make(_forward_as(DetachingTensor), sigmoid_of_saved))
    assert "cut from autograd's graph" in err.message
    assert "DetachingTensor" in err.got and "plain torch.Tensor" in err.hint


class LyingTensor(torch.Tensor):
    """A subclass whose comparisons answer True whatever the values."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.isclose, torch.Tensor.__eq__):
            return True
        return super().__torch_function__(func, types, args, kwargs)


def test_a_lying_gradient_is_judged_by_its_values_and_names_no_mistake_from_its_lies():
    """A zero gradient of a subclass that lies in allclose was told it was a tanh-based slope."""
    lying_zeros = make(save_x(stable), lambda ctx, g: torch.zeros_like(g).as_subclass(LyingTensor))
    err = failure(lab.check_softplus_function, lying_zeros)
    assert err.mistake is None or "tanh" not in err.mistake
    assert "got" in str(err) and err.got.startswith("0")


# ------------------------------------------------------------------ fifteenth audit: bad input


def test_an_infinite_gradient_is_not_called_a_factor_too_many():
    """04.2: grad_output * sigmoid(x) * inf matched "the gradient times one constant" (the factor came out inf)."""
    err = failure(lab.check_softplus_function, make(save_x(stable), lambda ctx, g: sigmoid_of_saved(ctx, g) * math.inf))
    assert "not finite" in err.message
    assert err.mistake is None or "factor" not in err.mistake


def _classmate_grads(ctx, g):
    x, w = ctx.saved_tensors
    return ctx.scale * g.mm(w.t()), ctx.scale * x.t().mm(g), None


def _scaled_matmul_with(grad_w):
    def forward(ctx, x, w, scale):
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        return scale * x.mm(w)

    def backward(ctx, g):
        grad_x, right, _ = _classmate_grads(ctx, g)
        return grad_x, grad_w(right), None

    return make(forward, backward, "ScaledMatmul")


@pytest.mark.parametrize(
    "grad_w, words",
    [(lambda right: right * math.inf, "not finite"), (lambda right: -right * math.inf, "not finite")],
    ids=["inf", "-inf"],
)
def test_an_infinite_grad_w_is_not_called_another_factor(grad_w, words):
    """04.4: a grad_w of inf was told "off by the same factor, but not this call's scale"."""
    err = failure(lab.check_scaled_matmul_function, _scaled_matmul_with(grad_w))
    assert words in err.message
    assert err.mistake not in (Fn._PLANTED.name, "grad_w off by another factor", "a fixed factor")
    assert "same factor" not in str(err)


def test_a_grad_w_of_zeros_is_not_called_another_factor():
    """04.4: a grad_w of zeros came out as "a factor" of 0 that is not the scale."""
    err = failure(lab.check_scaled_matmul_function, _scaled_matmul_with(torch.zeros_like))
    assert "same factor" not in str(err)
    assert "exactly 0" in str(err)


def _forward_that_sets_float64(ctx, x):
    torch.set_default_dtype(torch.float64)
    ctx.save_for_backward(x)
    return stable(x)


def test_a_forward_that_changes_the_default_dtype_is_named_and_the_setting_restored(capsys):
    """A forward that calls torch.set_default_dtype passed and left every later cell making float64 tensors."""
    err = failure(lab.check_softplus_function, make(_forward_that_sets_float64, sigmoid_of_saved, "Softplus"))
    assert err.mistake == "torch settings changed for the whole program"
    assert "default dtype torch.float64" in err.message
    assert torch.get_default_dtype() == torch.float32
    lab.check_softplus_function(Softplus)
    assert "PASS" in capsys.readouterr().out

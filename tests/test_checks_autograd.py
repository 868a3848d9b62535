"""Checks of notebook 03 (autograd): correct answers and the designs the prompts allow pass; every
listed mistake is named (one test each, generated from the checks' own lists where they are values);
the find-the-bug starting code gets its bug named without the repaired line; predictions record the
first answer; bad answers of any kind get one clear sentence, never a PASS, a traceback or a hang."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import core, predictions, running
from labsupport.checks import nb03_autograd as A

ROOT = Path(__file__).resolve().parent.parent


def notebook_functions(cell_id):
    """The functions defined in a cell of notebook 03 (the code around them is left out)."""
    cells = json.loads((ROOT / "notebooks" / "03_autograd.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if c.get("id") == cell_id)
    tree = ast.parse(source)
    tree.body = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    namespace = {"torch": torch}
    exec(compile(tree, f"<notebook 03 cell {cell_id}>", "exec"), namespace)
    return namespace


def failure(check, *args):
    with pytest.raises(lab.CheckError) as info:
        check(*args)
    return info.value


def all_rungs(check, answer, ex_id, capsys):
    """Every text the ladder can show for ``answer``: four failed runs (the code rung), then lab.hint."""
    texts = []
    for _ in range(core.CODE_AFTER):
        err = failure(check, answer)
        texts += [str(err), "\n".join(err.rendered()), err.look or ""]
    capsys.readouterr()
    lab.hint(ex_id)
    texts.append(capsys.readouterr().out)
    return "\n".join(texts)


def never_returns(*args, **kwargs):
    while True:
        pass


def raises(*args, **kwargs):
    raise ValueError("my own bug")


class AlwaysEqual(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


# ------------------------------------------------------------------ 03.1 two paths


def two_path(a, b):
    d = a * b + a.exp()
    return 2 * d * (b + a.exp()), 2 * d * a


def two_path_in_place_on_its_own_tensors(a, b):
    d = a * b
    d.add_(a.exp())  # d is a new tensor: writing into it leaves a and b alone
    two_d = d.mul_(2)
    grad_a = torch.empty_like(a)
    torch.mul(two_d, b + a.exp(), out=grad_a)
    return grad_a, two_d * a


def two_path_on_clones(a, b):
    exp_a = a.clone().exp_()
    b_plus = b.clone()
    b_plus.add_(exp_a)
    d = torch.addcmul(exp_a, a, b)
    return 2 * d * b_plus, 2 * d * a


@pytest.mark.parametrize(
    "answer",
    [two_path, lambda a, b: list(two_path(a, b)), two_path_in_place_on_its_own_tensors, two_path_on_clones],
    ids=["tuple", "list", "in place on new tensors", "in place on clones"],
)
def test_two_path_reference_passes(answer, capsys):
    lab.check_predicted_gradients(answer)
    assert capsys.readouterr().out.startswith("PASS  predicted gradients")


TWO_PATH_MISTAKES = A._two_path_mistakes(torch.ones(1), torch.ones(1))


@pytest.mark.parametrize("k", range(len(TWO_PATH_MISTAKES)), ids=[m.why[:40] for m in TWO_PATH_MISTAKES])
def test_two_path_mistake_is_named(k):
    def wrong(a, b):
        values = A._two_path_mistakes(a, b)[k].matches
        return tuple(r if v is None else v for v, r in zip(values, two_path(a, b)))

    err = failure(lab.check_predicted_gradients, wrong)
    assert err.mistake == TWO_PATH_MISTAKES[k].name
    assert err.hint == TWO_PATH_MISTAKES[k].why


@pytest.mark.parametrize(
    ("grads", "name"),
    [
        (lambda a, b, d: (-2 * d * (b + a.exp()), -2 * d * a), "gradients negated"),
        (lambda a, b, d: (2 * d * (b + a * a.exp()), 2 * d * a), "exp derivative taken as a * exp(a)"),
        # round 12, second pass: the gradients of mean(d**2), as an ML habit writes the loss, got a generic verdict
        (lambda a, b, d: (2 * d * (b + a.exp()) / d.numel(), 2 * d * a / d.numel()), "gradients of the mean"),
        (lambda a, b, d: (2 * d, 2 * d * a), "outer derivative alone"),
        (lambda a, b, d: (2 * d * (b + a.exp()), 2 * d), "outer derivative alone"),
    ],
)
def test_two_path_mistakes_as_students_write_them(grads, name):
    """Round 12 of the audit: these got a generic expected/got; each now names its mistake and where to look."""

    def wrong(a, b):
        return grads(a, b, a * b + a.exp())

    err = failure(lab.check_predicted_gradients, wrong)
    assert err.mistake == name and err.look


def _two_path_exponentiating_a(a, b):
    grads = two_path(a, b)
    a.exp_()  # the caller's a: the notebook hands in a.detach(), which shares a's memory
    return grads


def test_two_path_that_writes_into_a_is_named():
    """03.1: right gradients, then a.exp_() on the caller's a, passed (the check never looked at a again)."""
    err = failure(lab.check_predicted_gradients, _two_path_exponentiating_a)
    assert err.mistake == "changed a in place"
    assert "a.detach()" in err.hint


def test_grad_a_with_a_for_b_is_named():
    """03.1: d(a * b)/da taken as a (grad_b's factor) got a generic expected/got."""

    def a_for_b(a, b):
        d = a * b + a.exp()
        return 2 * d * (a + a.exp()), 2 * d * a

    assert failure(lab.check_predicted_gradients, a_for_b).mistake == "grad_a uses a"


@pytest.mark.parametrize(
    "outer, name",
    [
        (lambda d: 2, "outer derivative without d"),
        (lambda d: d**2, "d**2 for the outer derivative"),
        (lambda d: 2 * d.sum(), "outer derivative summed"),  # sixteenth audit: got a generic expected/got
    ],
)
def test_an_outer_derivative_other_than_2d_is_named(outer, name):
    """03.1: dL/dd written as 2 (d forgotten) or as d**2 got a generic expected/got."""

    def predict(a, b):
        d = a * b + a.exp()
        return outer(d) * (b + a.exp()), outer(d) * a

    assert failure(lab.check_predicted_gradients, predict).mistake == name


@pytest.mark.parametrize(
    "grad_a, grad_b, name",
    [
        (lambda a, b, d: 2 * d * (b + a.exp()), lambda a, b, d: 2 * d * a + a.exp(), "exp(a) added to grad_b"),
        (
            lambda a, b, d: 2 * d * (b + a.exp()),
            lambda a, b, d: 2 * d * (a + b),
            "product rule with both factors varying",
        ),
        (
            lambda a, b, d: 2 * d * (b + a * torch.exp(a - 1)),
            lambda a, b, d: 2 * d * a,
            "power rule on exp",
        ),
    ],
)
def test_inner_derivative_slips_are_named(grad_a, grad_b, name):
    """Round 5 of the audit: each got a generic expected/got (the generated tests above use the check's own values)."""

    def predict(a, b):
        d = a * b + a.exp()
        return grad_a(a, b, d), grad_b(a, b, d)

    assert failure(lab.check_predicted_gradients, predict).mistake == name


def test_two_path_with_autograd_is_named():
    def with_autograd(a, b):
        a = a.clone().requires_grad_()
        b = b.clone().requires_grad_()
        return torch.autograd.grad(((a * b + a.exp()) ** 2).sum(), (a, b))

    assert failure(lab.check_predicted_gradients, with_autograd).mistake == "used autograd"


def _loss(a, b):
    return ((a * b + a.exp()) ** 2).sum()


def _backward_with_grad_enabled(a, b):
    with torch.enable_grad():
        a = a.clone().requires_grad_()
        b = b.clone().requires_grad_()
        _loss(a, b).backward()
    return a.grad, b.grad


AUTOGRAD_IN_DISGUISE = {
    "torch.func.grad": lambda a, b: torch.func.grad(_loss, argnums=(0, 1))(a, b),
    "autograd.functional.vjp": lambda a, b: torch.autograd.functional.vjp(_loss, (a, b))[1],
    "backward under enable_grad": _backward_with_grad_enabled,
}


@pytest.mark.parametrize("name", list(AUTOGRAD_IN_DISGUISE))
def test_autograd_by_another_name_is_refused(name):
    err = failure(lab.check_predicted_gradients, AUTOGRAD_IN_DISGUISE[name])
    assert err.mistake == "used autograd", err


TWO_PATH_BAD = {
    "None": None,
    "list": [1.0, 2.0],
    "numpy": lambda a, b: (np.ones(5), np.ones(5)),
    "three values": lambda a, b: (a, b, a),
    "returns None": lambda a, b: None,
    "float32": lambda a, b: tuple(t.float() for t in two_path(a, b)),
    "extra dimension": lambda a, b: tuple(t.unsqueeze(0) for t in two_path(a, b)),
    "NaN": lambda a, b: tuple(t * float("nan") for t in two_path(a, b)),
    "summed": lambda a, b: tuple(t.sum() for t in two_path(a, b)),
    "meta": lambda a, b: tuple(t.to("meta") for t in two_path(a, b)),
    "raises": raises,
    "never returns": never_returns,
}


@pytest.mark.parametrize("bad", TWO_PATH_BAD.values(), ids=TWO_PATH_BAD.keys())
def test_two_path_bad_answers_get_a_sentence(bad, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    err = failure(lab.check_predicted_gradients, bad)
    assert "could not use" not in str(err) and "Traceback" not in str(err)
    assert "PASS" not in capsys.readouterr().out


def test_extra_dimension_and_dtype_are_named():
    assert "extra leading dimension" in str(failure(lab.check_predicted_gradients, TWO_PATH_BAD["extra dimension"]))
    assert "wrong dtype" in str(failure(lab.check_predicted_gradients, TWO_PATH_BAD["float32"]))


# ------------------------------------------------------------------ 03.2-03.4 predictions

PREDICTIONS = {
    "03.2": (lab.check_backward_twice_prediction, "error", "doubled"),
    "03.3": (lab.check_vjp_prediction, [2, 40, 600], [2, 4, 6]),
    "03.4": (lab.check_second_derivative_prediction, 6, 3),
}


@pytest.mark.parametrize(
    "ex_id, answer",
    [
        ("03.2", "error"),
        ("03.2", " Error "),
        ("03.3", [2, 40, 600]),
        ("03.3", (2.0, 40.0, 600.0)),
        ("03.3", torch.tensor([2.0, 40.0, 600.0])),
        ("03.3", np.array([2, 40, 600])),
        ("03.3", [torch.tensor(2.0), torch.tensor(40.0), torch.tensor(600.0)]),
        ("03.4", 6),
        ("03.4", 6.0),
        ("03.4", torch.tensor(6.0)),
        ("03.4", np.float64(6.0)),
        ("03.2", "RuntimeError"),  # sixth audit: the error's own name was refused as not a choice
        ("03.4", [6]),  # sixth audit: one number in a list or a 1-d tensor was refused
        ("03.4", torch.tensor([6.0])),
        ("03.4", np.array([6.0])),
    ],
)
def test_right_predictions_pass_in_any_form(ex_id, answer, capsys):
    PREDICTIONS[ex_id][0](answer)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "recorded answer" in out


def test_the_prompts_own_word_unchanged_counts_as_same(capsys):
    """Tenth audit: 03.2's prompt glosses "same" as ".grad is unchanged", and "unchanged" was refused."""
    lab.check_backward_twice_prediction("Unchanged")
    assert capsys.readouterr().out.startswith("NOT RIGHT  a second backward() on one graph")
    assert predictions.COMMITTED["03.2"].answer == "same"


@pytest.mark.parametrize("ex_id", PREDICTIONS)
def test_a_0d_tensor_is_converted(ex_id, capsys):
    check, right, _ = PREDICTIONS[ex_id]
    if ex_id == "03.3":
        check([torch.tensor(float(v)) for v in right])
    elif ex_id == "03.4":
        check(torch.tensor(6.0, dtype=torch.float64))
    else:
        pytest.skip("03.2 takes a word")
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("ex_id", PREDICTIONS)
def test_wrong_then_right_records_the_first_answer(ex_id, capsys):
    check, right, wrong = PREDICTIONS[ex_id]
    check(wrong)
    first = capsys.readouterr().out
    check(right)
    second = capsys.readouterr().out
    assert "PASS" not in first + second
    assert first.startswith("NOT RIGHT") and "Now explain:" in first
    assert "does not replace it" in second
    assert predictions.COMMITTED[ex_id].right is False


@pytest.mark.parametrize("ex_id", PREDICTIONS)
def test_every_prediction_asks_a_question(ex_id, capsys):
    check, _, wrong = PREDICTIONS[ex_id]
    check(wrong)
    asked = predictions.COMMITTED[ex_id].ask
    assert asked.endswith("?") and asked in capsys.readouterr().out


PREDICTION_NOTES = [
    ("03.2", "doubled"),
    ("03.2", "same"),
    ("03.3", [2, 4, 6]),
    ("03.3", [1, 10, 100]),
    ("03.3", [1, 20, 300]),
    ("03.3", [1, 40, 900]),
    ("03.3", [1, 4, 9]),  # round 5 of the audit: y itself, and 2 * v, had no note
    ("03.3", [2, 20, 200]),
    ("03.4", 3),
    ("03.4", 9),
    ("03.4", 0),
]


@pytest.mark.parametrize("ex_id, wrong", PREDICTION_NOTES)
def test_each_wrong_prediction_gets_its_note_from_lab_hint(ex_id, wrong, capsys):
    PREDICTIONS[ex_id][0](wrong)
    assert "About" not in capsys.readouterr().out  # the explanation waits for the student's own
    lab.hint(ex_id)
    out = capsys.readouterr().out
    header, first = out.splitlines()[:2]
    assert header.startswith(f"HINT · Exercise {ex_id}") and first.startswith("  About") and "Why:" in out


PREDICTION_BAD = {
    "None": None,
    "empty list": [],
    "word for a number": "six",
    "NaN": float("nan"),
    "inf": float("inf"),
    "bool": True,
    "dict": {"x": 1},
    "meta tensor": torch.tensor(6.0, device="meta"),
    "tensor of two": torch.tensor([6.0, 6.0]),
    "always-equal str": AlwaysEqual("error"),
    "list of words": ["2", "40", "600"],
    "two numbers": [2, 40],
    "NaN inside": [2, float("nan"), 600],
    "nested": [[2, 40], [600]],  # two rows ([[2, 40, 600]], one row in brackets too many, is read as its row)
}


@pytest.mark.parametrize("ex_id", PREDICTIONS)
@pytest.mark.parametrize("bad", PREDICTION_BAD.values(), ids=PREDICTION_BAD.keys())
def test_bad_predictions_get_a_sentence_and_commit_nothing(ex_id, bad, capsys):
    check, _, _ = PREDICTIONS[ex_id]
    if ex_id == "03.2" and isinstance(bad, AlwaysEqual):
        check(bad)  # plain("error") is the right word: the subclass's __eq__ is never asked
        assert capsys.readouterr().out.startswith("PASS")
        return
    err = failure(check, bad)
    assert err.usage and "could not use" not in str(err)
    assert ex_id not in predictions.COMMITTED
    assert "PASS" not in capsys.readouterr().out


def test_always_equal_subclass_cannot_pass_a_number(capsys):
    class Liar(float):
        def __eq__(self, other):
            return True

        __hash__ = float.__hash__

    lab.check_second_derivative_prediction(Liar(3.0))
    assert capsys.readouterr().out.startswith("NOT RIGHT")


# ------------------------------------------------------------------ 03.5 / 03.6 training loops


def step_loss(x, y, w1, w2):
    return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()


def make_loop(mode="right", reset="after update", log_at="before update", t0=0, loss="sum"):
    """A training loop as students write it, with one behaviour changed (the names below)."""

    def train(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        losses = []
        for t in range(steps):
            if reset == "start of step" and w1.grad is not None:
                w1.grad.zero_()
                w2.grad.zero_()
            if reset == "zero before backward":
                w1.grad.zero_()
                w2.grad.zero_()
            parts = []
            pieces = list(zip(x.chunk(chunks), y.chunk(chunks)))
            if mode == "last chunk left out":  # range(chunks - 1), an off-by-one
                pieces = pieces[:-1]
            for x_part, y_part in pieces:
                if reset == "per chunk":
                    w1.grad = None
                    w2.grad = None
                part = step_loss(x_part, y_part, w1, w2)
                if mode == "chunk means":
                    part = part / y_part.numel()
                if mode != "no backward":  # half-done: the forward pass and the loss only
                    (part / chunks if mode == "scaled" else part).backward()
                parts.append(part.item())
                if log_at == "per chunk" and log is not None:
                    log(t, sum(parts))
                if mode == "update per chunk":
                    with torch.no_grad():
                        w1 -= learning_rate * w1.grad
                        w2 -= learning_rate * w2.grad
                    w1.grad = None
                    w2.grad = None
            value = {"last": parts[-1], "mean": sum(parts) / len(parts)}.get(loss, sum(parts))
            if reset == "None before update":
                w1.grad = None
                w2.grad = None
            if reset == "zero before update":
                w1.grad.zero_()
                w2.grad.zero_()
            if log_at == "before update" and log is not None:
                log(t + t0, value)
            if log_at == "swapped" and log is not None:
                log(value, t)
            if mode == "last update skipped" and t < steps - 1:  # a guard meant for something else
                with torch.no_grad():
                    w1 -= learning_rate * w1.grad
                    w2 -= learning_rate * w2.grad
            if mode in ("right", "scaled", "chunk means", "last chunk left out"):
                with torch.no_grad():
                    w1 -= learning_rate * w1.grad
                    w2 -= learning_rate * w2.grad
            if mode == "ascent":
                with torch.no_grad():
                    w1 += learning_rate * w1.grad
                    w2 += learning_rate * w2.grad
            if mode == "w2 ascent":  # one sign typed wrong
                with torch.no_grad():
                    w1 -= learning_rate * w1.grad
                    w2 += learning_rate * w2.grad
            if mode == "w2 update forgotten":
                with torch.no_grad():
                    w1 -= learning_rate * w1.grad
            if mode == "outside no_grad":
                w1 -= learning_rate * w1.grad
                w2 -= learning_rate * w2.grad
            if mode == "rebind":
                with torch.no_grad():
                    w1 = (w1 - learning_rate * w1.grad).requires_grad_()
                    w2 = (w2 - learning_rate * w2.grad).requires_grad_()
            if mode == "rebind, no requires_grad":
                with torch.no_grad():
                    w1 = w1 - learning_rate * w1.grad
                    w2 = w2 - learning_rate * w2.grad
            if log_at == "after update" and log is not None:
                log(t, value)
            if reset == "after update":
                w1.grad = None
                w2.grad = None
            if reset == "w1 only after update":
                w1.grad = None
            if loss == "after update":
                value = step_loss(x, y, w1, w2).item()
            losses.append(value)
        return losses

    return train


def test_notebook_solutions_pass(capsys):
    solved = notebook_functions("nb03-c122")["train_fixed"]
    lab.check_fixed_training(solved)
    accumulated = notebook_functions("nb03-c125")["train_accumulated"]
    lab.check_accumulated_training(accumulated)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS  train_fixed") and out[1].startswith("PASS  train_accumulated")


def sgd_loop(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    optimizer = torch.optim.SGD([w1, w2], lr=learning_rate)
    losses = []
    for t in range(steps):
        optimizer.zero_grad()
        total = torch.zeros((), dtype=x.dtype)
        for x_part, y_part in zip(x.tensor_split(chunks), y.tensor_split(chunks)):
            part = step_loss(x_part, y_part, w1, w2)
            part.backward()
            total = total + part.detach()
        if log is not None:
            log(torch.tensor(t), total)
        optimizer.step()
        losses.append(total)
    return losses


def data_loop(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    losses = []
    for t in range(steps):
        total = 0.0
        for i in range(chunks):
            rows = slice(i * len(x) // chunks, (i + 1) * len(x) // chunks)
            part = (torch.relu(x[rows] @ w1) @ w2 - y[rows]).pow(2).sum()
            part.backward()
            total += part.item()
        if log is not None:
            log(t=t + 1, loss=total)
        w1.data.sub_(learning_rate * w1.grad)
        w2.data.sub_(learning_rate * w2.grad)
        w1.grad.zero_()
        w2.grad.zero_()
        losses.append(total)
    return np.array(losses)


def float32_log_loop(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """Logs each step's loss as torch.tensor(total): a float32 tensor, right to float32's precision."""

    def as_float32(t, loss):
        log(t, torch.tensor(loss))

    return data_loop(x, y, w1, w2, learning_rate, steps, chunks, None if log is None else as_float32)


CORRECT_VARIANTS = {
    "reset at the start of a step": make_loop(reset="start of step"),
    "float32 tensor losses in the log": float32_log_loop,
    "1-based t": make_loop(t0=1),
    "optimizer, tensor losses and t": sgd_loop,
    ".data, slices, numpy losses": data_loop,
}


@pytest.mark.parametrize("variant", CORRECT_VARIANTS.values(), ids=CORRECT_VARIANTS.keys())
def test_correct_variants_pass(variant, capsys):
    lab.check_accumulated_training(variant)
    lab.check_fixed_training(lambda x, y, w1, w2, learning_rate, steps: variant(x, y, w1, w2, learning_rate, steps))
    assert capsys.readouterr().out.count("PASS") == 2


def split_by_size_loop(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """torch.split's second argument is a piece's size, not a count: 18 rows by 4 make five pieces."""
    losses = []
    for t in range(steps):
        total = 0.0
        for x_part, y_part in zip(torch.split(x, chunks), torch.split(y, chunks)):
            part = step_loss(x_part, y_part, w1, w2)
            part.backward()
            total += part.item()
        if log is not None:
            log(t, total)
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(total)
    return losses


def test_a_number_of_chunks_written_in_is_named():
    """03.6: x.chunk(4) where chunks belongs passed, because the check only ever asked for 4 chunks."""

    def four_pieces(x, y, w1, w2, learning_rate, steps, chunks, log=None):
        return make_loop()(x, y, w1, w2, learning_rate, steps, 4, log)

    err = failure(lab.check_accumulated_training, four_pieces)
    assert err.mistake == "number of chunks fixed"
    assert "as with chunks=4" in err.got


def test_pieces_of_size_chunks_instead_of_chunks_pieces_are_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_accumulated_training(split_by_size_loop)
    assert info.value.mistake == "more pieces than chunks"


def equal_pieces_loop(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """Pieces of len(x) // chunks rows each, cut by hand: 18 rows in 4 chunks leave the last 2 out."""
    size = len(x) // chunks
    losses = []
    for t in range(steps):
        total = 0.0
        for i in range(chunks):
            rows = slice(i * size, (i + 1) * size)
            part = step_loss(x[rows], y[rows], w1, w2)
            part.backward()
            total += part.item()
        if log is not None:
            log(t, total)
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(total)
    return losses


def first_step_only(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """A loop whose return sits inside it: one correct step, then the function ends."""
    return make_loop()(x, y, w1, w2, learning_rate, 1, chunks, log)


def w2_frozen_after_update(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """Twelfth audit (G): requires_grad=False set on w2 after the first update was told "a value is None"."""
    losses = []
    for t in range(steps):
        total = 0.0
        for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
            part = step_loss(x_part, y_part, w1, w2)
            part.backward()
            total += part.item()
        if log is not None:
            log(t, total)
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w2.requires_grad = False
        w1.grad = None
        w2.grad = None
        losses.append(total)
    return losses


def optimizer_loop(make, fresh):
    """Fourteenth audit: a torch.optim optimizer instead of the loop's update, made once or anew in each step."""

    def train(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        optimizer = make([w1, w2], lr=learning_rate)
        losses = []
        for t in range(steps):
            if fresh:
                optimizer = make([w1, w2], lr=learning_rate)
            total = 0.0
            for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
                part = step_loss(x_part, y_part, w1, w2)
                part.backward()
                total += part.item()
            if log is not None:
                log(t, total)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(total)
        return losses

    return train


# One loop per listed mistake (the checks' own list): (loop, which checks it is for).
LOOP_MISTAKES = {
    "reset before any backward": make_loop(reset="zero before backward"),
    "update recorded by autograd": make_loop("outside no_grad"),
    "reset between backward and update": make_loop(reset="None before update"),
    "update rebinds the names": make_loop("rebind"),
    "weights never updated": make_loop("never", reset="after update"),
    # round 6 of the audit: a step without its update was told "step size is not learning_rate" (the first) or
    # got a generic expected/got (the last)
    "one update short": make_loop("last update skipped"),
    # round 7 of the audit: a return inside the loop got a bare "w1 does not match the reference at element ..."
    "stopped after the first step": first_step_only,
    "gradients accumulate across steps": make_loop(reset="never"),
    "one gradient accumulates": make_loop(reset="w1 only after update"),
    "update goes up the gradient": make_loop("ascent"),
    "only the last chunk's gradient": make_loop(reset="per chunk"),
    "one update per chunk": make_loop("update per chunk"),
    "chunk gradients scaled": make_loop("scaled"),
    "chunk losses are means": make_loop("chunk means"),
    # twelfth round of the audit: each got a generic expected/got before
    "backward never called": make_loop("no backward"),
    "one weight goes up the gradient": make_loop("w2 ascent"),
    "some chunks left out": make_loop("last chunk left out"),
    # round 12, second pass: pieces of N // chunks rows cut by hand, dropping the rest, got a generic expected/got
    "last rows left out": equal_pieces_loop,
    "requires_grad turned off": w2_frozen_after_update,
    # fourteenth audit: these got a generic expected/got
    "a fresh optimizer each step": optimizer_loop(torch.optim.Adam, fresh=True),
    "another optimizer": optimizer_loop(torch.optim.Adam, fresh=False),
}
CHUNK_ONLY = {
    "some chunks left out",
    "last rows left out",
    "only the last chunk's gradient",
    "one update per chunk",
    "chunk gradients scaled",
    "chunk losses are means",
}


def test_every_listed_loop_mistake_has_a_loop():
    assert {m.name for m in A._LOOP_MISTAKES} == set(LOOP_MISTAKES)


@pytest.mark.parametrize("name", LOOP_MISTAKES)
@pytest.mark.parametrize("chunked", [False, True], ids=["03.5", "03.6"])
def test_loop_mistake_is_named(name, chunked):
    if name in CHUNK_ONLY and not chunked:
        pytest.skip("one chunk: the same as a correct loop")
    check = lab.check_accumulated_training if chunked else lab.check_fixed_training
    loop = LOOP_MISTAKES[name] if chunked else bind_steps(LOOP_MISTAKES[name])
    err = failure(check, loop)
    assert err.mistake == name
    assert err.hint == next(m.why for m in A._LOOP_MISTAKES if m.name == name)


@pytest.mark.parametrize(
    "loop, name",
    [
        (optimizer_loop(torch.optim.RMSprop, fresh=True), "a fresh optimizer each step"),
        (optimizer_loop(torch.optim.Adagrad, fresh=True), "a fresh optimizer each step"),
        (
            optimizer_loop(lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9), fresh=False),
            "another optimizer",
        ),
    ],
)
def test_other_optimizers_are_named(loop, name):
    assert failure(lab.check_fixed_training, bind_steps(loop)).mistake == name


@pytest.mark.parametrize("make", [torch.optim.SGD, lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)])
def test_a_fresh_plain_sgd_each_step_is_gradient_descent_and_passes(make, capsys):
    """Fourteenth audit: a fresh SGD (even with momentum, whose buffer starts empty) is one plain step: right."""
    lab.check_fixed_training(bind_steps(optimizer_loop(make, fresh=True)))
    assert capsys.readouterr().out.startswith("PASS")


def bind_steps(loop):
    def train(x, y, w1, w2, learning_rate, steps):
        return loop(x, y, w1, w2, learning_rate, steps)

    return train


@pytest.mark.parametrize("chunked", [False, True], ids=["03.5", "03.6"])
@pytest.mark.parametrize("reset", ["None before update", "zero before update"])
def test_reset_at_the_wrong_moment_is_not_called_rebinding(chunked, reset):
    """Issue 23: a reset between backward() and the update got the rebinding hint while quoting an in-place line."""
    loop = make_loop(reset=reset)
    check = lab.check_accumulated_training if chunked else lab.check_fixed_training
    err = failure(check, loop if chunked else bind_steps(loop))
    assert err.mistake == "reset between backward and update"
    assert "refer to" not in str(err)


def test_rebinding_that_raises_is_named():
    err = failure(lab.check_fixed_training, bind_steps(make_loop("rebind, no requires_grad")))
    assert err.mistake == "update rebinds the names"


LEAKS = ["-=", "in place", "in-place", "sub_", ".data", "copy_", "learning_rate * w1.grad", "w1.grad = None"]


def test_the_starting_code_of_03_5_gets_no_answer(capsys):
    """The classmate's loop handed in unchanged: the bug is named, the repaired line never shown."""
    classmate = notebook_functions("nb03-c120")["classmate_train"]
    assert failure(lab.check_fixed_training, classmate).mistake == "update rebinds the names"
    core.reset_feedback()
    text = all_rungs(lab.check_fixed_training, classmate, "03.5", capsys)
    assert "look at:" in text and "Likely mistake" in text
    for leak in LEAKS:
        assert leak not in text, leak


@pytest.mark.parametrize("name", LOOP_MISTAKES)
def test_no_rung_of_a_loop_mistake_shows_the_repaired_line(name, capsys):
    if name in CHUNK_ONLY:
        pytest.skip("03.6 only")
    text = all_rungs(lab.check_fixed_training, bind_steps(LOOP_MISTAKES[name]), "03.5", capsys)
    for leak in ["learning_rate * w1.grad", "w1.grad = None", "sub_", ".data"]:
        assert leak not in text.replace("in your line", "")


OTHER_MISTAKES_03_6 = {
    "last chunk's loss": make_loop(loss="last"),
    "chunk losses averaged": make_loop(loss="mean"),
    "loss after the update": make_loop(loss="after update", log_at="none"),
    "log once per chunk": make_loop(log_at="per chunk"),
    "log after the update": make_loop(log_at="after update"),
    "log arguments swapped": make_loop(log_at="swapped"),
    "log never called": make_loop(log_at="none"),
}


@pytest.mark.parametrize("name", OTHER_MISTAKES_03_6)
def test_loss_and_log_mistakes_are_named(name):
    loop = OTHER_MISTAKES_03_6[name]
    if name == "loss after the update":
        err = failure(lab.check_fixed_training, bind_steps(loop))
    else:
        err = failure(lab.check_accumulated_training, loop)
    assert err.mistake == name


def whole_batch(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    return make_loop()(x, y, w1, w2, learning_rate, steps, 1, log)


def with_autograd_grad(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    losses = []
    for t in range(steps):
        grads = [torch.zeros_like(w1), torch.zeros_like(w2)]
        total = 0.0
        for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
            part = step_loss(x_part, y_part, w1, w2)
            for g, d in zip(grads, torch.autograd.grad(part, (w1, w2))):
                g += d
            total += part.item()
        if log is not None:
            log(t, total)
        with torch.no_grad():
            w1 -= learning_rate * grads[0]
            w2 -= learning_rate * grads[1]
        losses.append(total)
    return losses


def log_first(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    def quiet(t, loss):
        pass

    losses = make_loop()(x, y, w1, w2, learning_rate, steps, chunks, quiet)
    return losses


def log_before_backward(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    losses = []
    for t in range(steps):
        log(t, step_loss(x, y, w1, w2).item())
        losses += make_loop()(x, y, w1, w2, learning_rate, 1, chunks)
    return losses


@pytest.mark.parametrize(
    "loop, name",
    [
        (whole_batch, "no chunks"),
        (with_autograd_grad, "gradients never in .grad"),
        (log_first, "log never called"),
        (log_before_backward, "log before the backward calls"),
    ],
)
def test_chunk_and_log_timing_mistakes_are_named(loop, name):
    assert failure(lab.check_accumulated_training, loop).mistake == name


def test_a_step_size_other_than_learning_rate_is_named():
    def hard_coded(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        return make_loop()(x, y, w1, w2, 1e-6, steps, chunks, log)

    for check in (lab.check_fixed_training, lab.check_accumulated_training):
        err = failure(check, hard_coded)
        assert err.mistake == "step size is not learning_rate" and "0.001 x learning_rate" in str(err)


def test_data_changed_in_place_is_named():
    def scales_x(x, y, w1, w2, learning_rate, steps):
        x /= 2
        return bind_steps(make_loop())(x, y, w1, w2, learning_rate, steps)

    assert failure(lab.check_fixed_training, scales_x).mistake == "data changed in place"


def returns(value):
    def train(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        make_loop()(x, y, w1, w2, learning_rate, steps, chunks, log)
        return value

    return train


LOOP_BAD = {
    "None": None,
    "a string": "train",
    "a class": type("Train", (), {}),
    "returns None": returns(None),
    "a word in the losses": returns([1.0, "x", 1.0, 1.0, 1.0]),
    "NaN losses": returns([float("nan")] * A.STEPS),
    "one loss": returns([1.0]),
    "a 2-d tensor": returns(torch.ones(A.STEPS, 1)),
    "meta losses": returns(torch.ones(A.STEPS, device="meta")),
    "a dict": returns({"loss": 1.0}),
    "a generator": returns(x for x in range(A.STEPS)),
    "wrong losses": returns(torch.ones(A.STEPS)),
    "raises": raises,
    "does nothing": lambda *args, **kwargs: [0.0] * A.STEPS,
    "too few arguments": lambda x, y: [],
    "never returns": never_returns,
}


@pytest.mark.parametrize("check", [lab.check_fixed_training, lab.check_accumulated_training])
@pytest.mark.parametrize("bad", LOOP_BAD.values(), ids=LOOP_BAD.keys())
def test_loop_bad_answers_get_a_sentence(check, bad, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    err = failure(check, bad)
    text = str(err)
    assert text and "could not use" not in text and "Traceback" not in text
    assert "PASS" not in capsys.readouterr().out
    if bad is LOOP_BAD["does nothing"]:  # no step at all: that backward() never ran is its true cause
        assert err.mistake == "backward never called"
        return
    assert err.mistake not in LOOP_MISTAKES  # a wrong form is never given a known mistake's cause


@pytest.mark.parametrize("check", [lab.check_fixed_training, lab.check_accumulated_training])
def test_a_loop_that_never_returns_is_stopped(check, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    assert "did not return within 0.2 s" in str(failure(check, never_returns))


def test_a_check_called_wrongly_says_so():
    err = failure(lab.check_fixed_training)
    assert err.usage and "called wrongly" in str(err)


def test_losses_returned_as_a_float32_tensor_pass(capsys):
    """03.5: torch.tensor(losses) (float32 by default) was refused at float64's precision."""
    solved = notebook_functions("nb03-c122")["train_fixed"]
    lab.check_fixed_training(lambda *args: torch.tensor(solved(*args)))
    assert capsys.readouterr().out.startswith("PASS  train_fixed")


def test_an_exact_prediction_is_judged_exactly(capsys):
    """03.3: [2, 40, 620] counted as right within the 5% meant for measured timings."""
    lab.check_vjp_prediction([2, 40, 620])
    assert capsys.readouterr().out.startswith("NOT RIGHT")


def _accumulated_with(step_end):
    """The notebook's train_accumulated with the end of each step (log, update, reset) replaced by ``step_end``."""

    def train(x, y, w1, w2, learning_rate, steps, chunks, log=None):
        losses = []
        for t in range(steps):
            total = 0.0
            for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
                part = (x_part.mm(w1).clamp(min=0).mm(w2) - y_part).pow(2).sum()
                part.backward()
                total = step_end.add(total, part)
            step_end.finish(t, total, log, w1, w2, learning_rate)
            losses.append(total)
        return losses

    return train


class _LogAlways:
    """Calls log whether it was given or not; adds the chunks' losses as numbers."""

    @staticmethod
    def add(total, part):
        return total + part.item()

    @staticmethod
    def finish(t, total, log, w1, w2, learning_rate):
        log(t, total)
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None


class _TensorTotal(_LogAlways):
    """Adds the chunks' losses as tensors, graphs and all; calls log only when given."""

    @staticmethod
    def add(total, part):
        return total + part

    @staticmethod
    def finish(t, total, log, w1, w2, learning_rate):
        if log is not None:
            log(t, total)
        _LogAlways.finish(t, total, lambda *args: None, w1, w2, learning_rate)


def test_log_called_when_not_given_is_named():
    """03.6: log(t, loss) called without `if log is not None` passed: the check always passed a log."""
    err = failure(lab.check_accumulated_training, _accumulated_with(_LogAlways))
    assert err.mistake == "log called when not given"


def test_losses_that_keep_their_graphs_are_named():
    """03.6: `total += part` without .item() returned tensors holding every step's graph, and passed."""
    err = failure(lab.check_accumulated_training, _accumulated_with(_TensorTotal))
    assert err.mistake == "losses kept with their graphs"


@pytest.mark.parametrize("chunked", [False, True], ids=["03.5", "03.6"])
def test_weights_returned_with_the_losses_are_named(chunked):
    """Round 5 of the audit: (losses, w1, w2) was told its losses keep their graphs, about tensors shaped like w1."""

    def with_weights(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        return make_loop()(x, y, w1, w2, learning_rate, steps, chunks, log), w1, w2

    check = lab.check_accumulated_training if chunked else lab.check_fixed_training
    loop = with_weights if chunked else bind_steps(with_weights)
    err = failure(check, loop)
    assert err.mistake == "weights returned with the losses"
    assert "graph" not in err.hint


def test_a_learning_rate_divided_by_the_chunks_is_named_with_the_step_size():
    """Round 5 of the audit: learning_rate / chunks was named, but its sentence pointed only at the chunks' losses."""

    def smaller_steps(x, y, w1, w2, learning_rate, steps, chunks, log=None):
        return make_loop()(x, y, w1, w2, learning_rate / chunks, steps, chunks, log)

    err = failure(lab.check_accumulated_training, smaller_steps)
    assert err.mistake == "chunk gradients scaled"
    assert "learning rate" in err.hint


def test_a_learning_rate_written_into_the_loop_is_named():
    """03.5 and 03.6 passed a loop that steps by 1e-3 whatever learning_rate it is given (the check's own rate)."""
    solved = notebook_functions("nb03-c122")["train_fixed"]
    accumulated = notebook_functions("nb03-c125")["train_accumulated"]
    with pytest.raises(lab.CheckError) as info:
        lab.check_fixed_training(lambda x, y, w1, w2, learning_rate, steps: solved(x, y, w1, w2, 1e-3, steps))
    assert info.value.mistake == "learning rate fixed" and "learning_rate=0.001" in info.value.got
    with pytest.raises(lab.CheckError) as info:
        lab.check_accumulated_training(
            lambda x, y, w1, w2, learning_rate, steps, chunks, log=None: accumulated(
                x, y, w1, w2, 1e-3, steps, chunks, log
            )
        )
    assert info.value.mistake == "learning rate fixed"


@pytest.mark.parametrize("answer", ["[2, 40, 600]", "2, 40, 600"])
def test_a_list_written_inside_quotes_is_refused_with_what_to_write(answer, capsys):
    err = failure(lab.check_vjp_prediction, answer)
    assert err.usage and "without quotes" in err.hint
    assert "03.3" not in predictions.COMMITTED
    assert "PASS" not in capsys.readouterr().out


# ------------------------------------------------------------------ the twelfth audit


def first_chunk_only(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    """03.6: one chunk's backward() per step, the first (x.chunk(chunks)[0]), instead of a loop over them."""
    losses = []
    for t in range(steps):
        part = step_loss(x.chunk(chunks)[0], y.chunk(chunks)[0], w1, w2)
        part.backward()
        if log is not None:
            log(t, part.item())
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(part.item())
    return losses


def test_a_loop_over_the_first_chunk_alone_is_named():
    assert failure(lab.check_accumulated_training, first_chunk_only).mistake == "some chunks left out"


@pytest.mark.parametrize("chunked", [False, True], ids=["03.5", "03.6"])
def test_one_weight_left_without_its_update_is_named_without_saying_both(chunked):
    """The why said "nothing changed them" of w1 and w2, while w1 had changed."""
    loop = make_loop("w2 update forgotten")
    check = lab.check_accumulated_training if chunked else lab.check_fixed_training
    err = failure(check, loop if chunked else bind_steps(loop))
    assert err.mistake == "weights never updated"
    assert "at least one of them" in err.hint


LOOK_LESS = {  # mistakes of 03.5 / 03.6 that had no "look at" line on the code rung
    "update goes up the gradient": (lab.check_fixed_training, bind_steps(make_loop("ascent"))),
    "log never called": (lab.check_accumulated_training, make_loop(log_at="none")),
    "log after the update": (lab.check_accumulated_training, make_loop(log_at="after update")),
    "log once per chunk": (lab.check_accumulated_training, make_loop(log_at="per chunk")),
    "log arguments swapped": (lab.check_accumulated_training, make_loop(log_at="swapped")),
    "last chunk's loss": (lab.check_accumulated_training, make_loop(loss="last")),
    "no chunks": (lab.check_accumulated_training, whole_batch),
}


@pytest.mark.parametrize("name", LOOK_LESS)
def test_loop_mistakes_say_where_to_look(name):
    check, loop = LOOK_LESS[name]
    err = failure(check, loop)
    assert err.mistake == name
    assert err.look and err.hint


# ------------------------------------------------------------------ the thirteenth audit


@pytest.mark.parametrize(
    "words", ["exception", "Raises an error.", "crashes", "it fails", "It errors.", "an exception is raised"]
)
def test_plain_words_for_an_error_count_as_error(words, capsys):
    """03.2: "exception", "raises an error" and "crashes" were refused as not one of the choices."""
    lab.check_backward_twice_prediction(words)
    assert capsys.readouterr().out.startswith("PASS")
    assert predictions.COMMITTED["03.2"].answer == "error"


def test_twice_counts_as_doubled(capsys):
    lab.check_backward_twice_prediction("twice")
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    assert predictions.COMMITTED["03.2"].answer == "doubled"


@pytest.mark.parametrize(
    "check, wrong, right, note",
    [
        (lab.check_vjp_prediction, [2, 80, 1800], [2, 40, 600], "not 2 * y"),
        (lab.check_vjp_prediction, [222, 444, 666], [2, 40, 600], "J is diagonal"),
        (lab.check_vjp_prediction, [642, 642, 642], [2, 40, 600], "one entry per x_j"),
        (lab.check_second_derivative_prediction, 12, 6, "counts the second derivative twice"),
        (lab.check_second_derivative_prediction, 1, 6, "dx/dx"),
    ],
)
def test_new_wrong_predictions_get_their_own_note_and_keep_the_first_answer(check, wrong, right, note, capsys):
    """03.3 and 03.4: these wrong answers got the generic explanation only."""
    check(wrong)
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and note not in first  # the note waits for the second run
    check(right)
    second = capsys.readouterr().out
    assert note in second and "your first" in second


def _accumulated_in_a_float32_total(x, y, w1, w2, learning_rate, steps, chunks, log=None):
    """03.6 with the running total started as torch.tensor(0.0): float32, whatever the data's dtype."""
    losses = []
    for t in range(steps):
        total = torch.tensor(0.0)
        for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
            part = (x_part.mm(w1).clamp(min=0).mm(w2) - y_part).pow(2).sum()
            part.backward()
            total += part.detach()
        if log is not None:
            log(t, total.item())
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(total.item())
    return losses


def test_losses_kept_in_a_float32_total_pass(capsys):
    """03.6: a float32 running total's .item() (and 0-d float32 tensors in a list) were told "one loss per step:
    the whole batch's loss, before the update", though every loss was right to float32's precision."""
    lab.check_accumulated_training(_accumulated_in_a_float32_total)
    solved = notebook_functions("nb03-c122")["train_fixed"]
    lab.check_fixed_training(lambda *args: [torch.tensor(loss) for loss in solved(*args)])
    assert capsys.readouterr().out.count("PASS") == 2


def test_float32_precision_still_refuses_a_wrong_loss():
    solved = notebook_functions("nb03-c122")["train_fixed"]
    err = failure(lab.check_fixed_training, lambda *args: [float(torch.tensor(1.001 * loss)) for loss in solved(*args)])
    assert "does not match the reference" in err.message


@pytest.mark.parametrize("answer", ["None", "none", "'None'."])
def test_a_gradient_that_stays_none_is_a_wrong_prediction_with_its_note(answer, capsys):
    """03.4 asks for a number; "x.grad stays None" is a prediction too, recorded and judged wrong, not refused."""
    lab.check_second_derivative_prediction(answer)
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and predictions.COMMITTED["03.4"].answer == "none"
    lab.check_second_derivative_prediction(answer)
    assert "does not stay None" in capsys.readouterr().out


def test_a_bare_none_says_how_to_predict_that_the_gradient_stays_none():
    with pytest.raises(core.CheckError) as err:
        lab.check_second_derivative_prediction(None)
    assert "no prediction yet" in str(err.value) and 'prediction = "None"' in str(err.value)
    assert "03.4" not in predictions.COMMITTED


# ------------------------------------------------------------------ fifteenth audit


def _grad_mode_switched_off_by_hand(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
    """The update under torch.set_grad_enabled(False), switched back on at the top of each step only."""
    losses = []
    for t in range(steps):
        torch.set_grad_enabled(True)
        total = 0.0
        for x_part, y_part in zip(x.chunk(chunks), y.chunk(chunks)):
            part = step_loss(x_part, y_part, w1, w2)
            part.backward()
            total += part.item()
        if log is not None:
            log(t, total)
        torch.set_grad_enabled(False)
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(total)
    return losses


def _grad_mode_never_switched_back(x, y, w1, w2, learning_rate, steps):
    """The update under torch.set_grad_enabled(False), never switched back: the second step has no graph."""
    losses = []
    for _ in range(steps):
        loss = step_loss(x, y, w1, w2)
        losses.append(loss.item())
        loss.backward()
        torch.set_grad_enabled(False)
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
    return losses


@pytest.mark.parametrize(
    "check, loop",
    [
        (lab.check_fixed_training, _grad_mode_never_switched_back),
        (lab.check_fixed_training, _grad_mode_switched_off_by_hand),
        (lab.check_accumulated_training, _grad_mode_switched_off_by_hand),
    ],
)
def test_a_loop_that_leaves_grad_mode_off_is_named_and_breaks_nothing_after_it(check, loop, capsys):
    """03.5/03.6: the loop's torch.set_grad_enabled(False) stayed on in the kernel: it was told "does not require
    grad", and so was every correct loop checked after it."""
    try:
        with pytest.raises(lab.CheckError) as info:
            check(loop)
        assert info.value.mistake == "grad mode left off"
        assert torch.is_grad_enabled()
        check(make_loop())
        assert "PASS" in capsys.readouterr().out
    finally:
        torch.set_grad_enabled(True)


def test_a_loop_that_changes_torch_settings_leaves_them_as_they_were(capsys):
    """03.5: torch.set_default_dtype and set_detect_anomaly inside the loop outlived the check."""

    def loop(*args):
        torch.set_default_dtype(torch.float64)
        torch.autograd.set_detect_anomaly(True)
        return make_loop()(*args)

    try:
        lab.check_fixed_training(loop)
        assert "PASS" in capsys.readouterr().out
        assert torch.get_default_dtype() == torch.float32
        assert not torch.is_anomaly_enabled()
    finally:
        torch.set_default_dtype(torch.float32)
        torch.autograd.set_detect_anomaly(False)


@pytest.mark.parametrize("check", [lab.check_fixed_training, lab.check_accumulated_training])
def test_a_loop_written_as_a_generator_is_named(check):
    """03.5/03.6: a `yield` made the loop a generator that ran nothing: it was told "backward() never reached the
    caller's w1 or w2"."""

    def generator(*args, **kwargs):
        yield from make_loop()(*args, **kwargs)

    with pytest.raises(lab.CheckError) as info:
        check(generator)
    assert info.value.mistake == "loop written as a generator"


class LyingTensor(torch.Tensor):
    """A tensor whose every torch operation, attribute and comparison answers True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True


def lying(t):
    with torch._C.DisableTorchFunction():
        return t.clone().as_subclass(LyingTensor)


@pytest.mark.parametrize("check", [lab.check_fixed_training, lab.check_accumulated_training])
@pytest.mark.parametrize("form", ["one tensor", "a list of 0-d tensors"])
def test_losses_in_a_lying_subclass_are_judged_by_their_values(check, form, capsys):
    """03.5/03.6: got "the check could not use what it was given (TypeError: 'bool' object is not iterable)"."""

    def wrapped(values):
        def loop(*args, **kwargs):
            losses = torch.tensor(make_loop()(*args, **kwargs), dtype=torch.float64)
            if values == "zeros":
                losses = torch.zeros_like(losses)
            return lying(losses) if form == "one tensor" else [lying(loss) for loss in losses]

        return loop

    check(wrapped("right"))
    assert "PASS" in capsys.readouterr().out
    with pytest.raises(lab.CheckError) as info:
        check(wrapped("zeros"))
    assert "does not match" in info.value.message


def test_predicted_gradients_in_a_lying_subclass_are_judged_by_their_values(capsys):
    lab.check_predicted_gradients(lambda a, b: tuple(lying(g) for g in two_path(a, b)))
    assert "PASS" in capsys.readouterr().out
    with pytest.raises(lab.CheckError) as info:
        lab.check_predicted_gradients(lambda a, b: tuple(lying(torch.zeros_like(g)) for g in two_path(a, b)))
    assert "does not match" in info.value.message


@pytest.mark.parametrize("check", [lab.check_backward_twice_prediction, lab.check_second_derivative_prediction])
def test_a_prediction_in_a_lying_subclass_gets_a_sentence_or_its_value(check, capsys):
    """03.2/03.4: got "the check could not use what it was given (AttributeError: 'bool' object has no attribute
    'type')"."""
    try:
        check(lying(torch.tensor(6.0)))
    except lab.CheckError as err:
        assert "could not use" not in err.message and err.usage
    else:
        assert "6.0 is right" in capsys.readouterr().out


@pytest.mark.parametrize("answer", ["it raises a RuntimeError", "A RuntimeError is raised.", "raises RuntimeError"])
def test_the_error_named_with_a_verb_counts_as_error(answer, capsys):
    lab.check_backward_twice_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS")

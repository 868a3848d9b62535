"""Notebook 09's checks (script vs trace, fullgraph, torch.cond), and that a saved TorchScript
file and a saved ExportedProgram answer as the eager modules. That they run in a fresh Python
process that never imports the code defining the model is the notebook's own section 5 (nbval)."""

import time
import warnings

import pytest
import torch
from torch import nn

import labsupport as lab
from labsupport.checks import nb09_static_and_dynamic_graphs as nb09
from labsupport.checks import running

EXAMPLE = torch.tensor([3.0, -1.0])  # needs two halvings, as in the notebook


def _script(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript's deprecation (torch >= 2.14) and tracer warnings
        return torch.jit.script(fn)


def _trace(fn, example=EXAMPLE):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example)


def never_returns(*args):
    while True:  # sleeps rather than spin: the time limit costs no CPU
        time.sleep(0.01)


# ---------------------------------------------------------------- 09.1 script vs trace


def halve_until_small(x):
    while x.abs().max() > 1:
        x = x / 2
    return x


def halve_by_multiplying(x):
    while bool(x.abs().max() > 1.0):
        x = x * 0.5
    return x


def halve_with_break(x):
    for _ in range(100):
        if x.abs().max() <= 1:
            break
        x = torch.div(x, 2)
    return x


def halve_in_place(x):
    while x.abs().max() > 1:
        x /= 2
    return x


def shrink_wrongly(x):
    while x.abs().max() > 1:
        x = x / 3
    return x


def stub(x):
    raise NotImplementedError("Exercise 1: a loop that tracing gets wrong")


@pytest.fixture(scope="module")
def halvers():
    return _script(halve_until_small), _trace(halve_until_small)


def test_script_vs_trace_passes_the_reference(halvers, capsys):
    lab.check_script_vs_trace(halve_until_small, *halvers)
    assert capsys.readouterr().out == (
        "PASS  script vs trace: the scripted loop matches the reference on 7 fresh inputs (0 to 6 "
        "halvings); the trace replays a fixed number of halvings and is wrong on 6 of 7\n"
    )


@pytest.mark.parametrize("eager", [halve_by_multiplying, halve_with_break])
def test_script_vs_trace_accepts_other_loops(eager, capsys):
    lab.check_script_vs_trace(eager, _script(eager), _trace(eager))
    assert capsys.readouterr().out.startswith("PASS")


def test_a_trace_with_another_example_is_accepted(capsys):
    lab.check_script_vs_trace(halve_until_small, _script(halve_until_small), _trace(halve_until_small, EXAMPLE * 8))
    assert "PASS" in capsys.readouterr().out


def _at_most_three_passes(x):
    for _ in range(3):
        if x.abs().max() > 1:
            x = x / 2
    return x


def _stops_at_two(x):
    while x.abs().max() > 2:
        x = x / 2
    return x


EAGER_WRONG = {
    "no abs": nb09._variant_no_abs,
    ">= 1": nb09._variant_at_least_one,
    "if, not while": nb09._halve_once,
    "fixed number of passes": _at_most_three_passes,  # audit 5: "wrong stop", the loop's own cause unnamed
    "elementwise": nb09._halve_elementwise,
    "sum, not max": nb09._variant_sum,
    "norm, not max": nb09._variant_norm,
    "mean, not max": nb09._variant_mean,
    "min, not max": nb09._variant_min,
    "floor division": nb09._variant_floor,
    "divided by the largest": lambda x: x / x.abs().max() if x.abs().max() > 1 else x,  # twelfth audit (G)
    "wrong stop": _stops_at_two,
}


def _as_many_passes_as_the_prompt_says(x):
    """Twelfth audit: `for _ in range(6)`, the prompt's "0 to 6 halvings" as a cap, passed."""
    for _ in range(6):
        if x.abs().max() > 1:
            x = x / 2
    return x


def test_a_cap_at_the_fresh_inputs_count_is_named(halvers):
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(_as_many_passes_as_the_prompt_says, *halvers)
    assert info.value.mistake == "fixed number of passes"
    assert "5000" in info.value.message


def test_every_eager_mistake_has_a_test():
    assert [m.name for m in nb09.EAGER_MISTAKES] == list(EAGER_WRONG)


@pytest.mark.parametrize("name", list(EAGER_WRONG))
def test_each_eager_mistake_is_named(halvers, name):
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(EAGER_WRONG[name], *halvers)
    assert info.value.mistake == name
    assert "halve_until_small is wrong for an input" in info.value.message
    assert "x.abs().max()" not in f"{info.value.hint} {info.value.look}"  # audit 6: "no abs" quoted the condition


@pytest.mark.parametrize(
    "eager, message",
    [
        (halve_in_place, "changed its argument x in place"),
        (lambda x: halve_until_small(x).tolist(), "is not a tensor"),
        (lambda x: x.double(), "wrong dtype"),
        (lambda x: x * float("nan"), "not finite"),
        (lambda x: x.to("meta"), "meta device"),
        (lambda x: x[None], "extra leading dimension"),
        (lambda x: 1 / 0, "ZeroDivisionError"),
        (stub, "is not written yet (Exercise 1: a loop that tracing gets wrong)"),
        (None, "is None"),
        (3.0, "is not a function"),
        ([halve_until_small], "is not a function"),
    ],
)
def test_script_vs_trace_answers_bad_eager_functions(halvers, eager, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(eager, *halvers)
    assert message in str(info.value)


def _returns_inside_the_loop(x):
    while x.abs().max() > 1:
        x = x / 2
        return x
    return x


def test_a_return_inside_the_loop_is_named_with_the_if():
    """Audit 7: the `return` indented into the loop's body halves once; the mistake spoke of an `if` only."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(_returns_inside_the_loop, None, None)
    assert info.value.mistake == "if, not while"
    assert "a `return` inside the loop" in info.value.hint


def _prints_its_result(x):
    while x.abs().max() > 1:
        x = x / 2
    print(x)


@pytest.mark.parametrize("unfinished", [_prints_its_result, lambda x: None], ids=["prints", "returns None"])
def test_a_halve_until_small_that_returns_nothing_says_so(unfinished, capsys):
    """Audit 7: "the cell that computes what halve_until_small returned did not run" for a print, or a stub."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(unfinished, None, None)
    assert info.value.usage
    assert info.value.message == "your halve_until_small(x) returned None"
    assert "print" in info.value.hint


def test_a_traced_halve_that_is_the_traces_output_says_so(halvers):
    """Audit 7: traced_halve = trace(...)(example), a tensor, got "not a TorchScript function" without a word why."""
    scripted, traced = halvers
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(halve_until_small, scripted, traced(EXAMPLE))
    assert info.value.usage
    assert info.value.message == "traced_halve is a tensor, a result, not a TorchScript function"


def _stops_at_a_half(x):
    while x.abs().max() > 0.5:
        x = x / 2
    return x


def test_a_threshold_of_a_half_is_not_called_a_norm(halvers):
    """09.1 audit: on the old inputs `> 0.5` halved exactly as `x.norm() > 1` does, and was named "norm, not max"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(_stops_at_a_half, *halvers)
    assert info.value.mistake == "wrong stop"


def test_an_unknown_eager_mistake_says_what_without_a_cause(halvers):
    with pytest.raises(lab.CheckError, match="largest |x| is 1.7") as info:
        lab.check_script_vs_trace(shrink_wrongly, *halvers)
    assert info.value.mistake is None and info.value.hint is None


def test_script_vs_trace_stops_a_loop_that_never_ends(halvers, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return within 0.1 s"):
        lab.check_script_vs_trace(never_returns, *halvers)


def halve_forever(x):
    while x.abs().max() >= 0:  # true for every tensor: the loop never ends
        x = x / 2
    return x


@pytest.mark.parametrize("slot", ["your halve_until_small(x)", "scripted_halve", "traced_halve"])
def test_script_vs_trace_stops_torchscript_that_never_returns(halvers, slot, monkeypatch, capsys):
    """15th audit: TorchScript runs its loop in C++, where the time limit's signal never arrives: it hung."""
    monkeypatch.setattr(running, "TIME_LIMIT", 0.5)
    args = [halve_until_small, *halvers]
    args[["your halve_until_small(x)", "scripted_halve", "traced_halve"].index(slot)] = _script(halve_forever)
    start = time.perf_counter()
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(*args)
    assert time.perf_counter() - start < 20
    assert info.value.message == f"{slot} did not return within 0.5 s on the check's inputs, so the check stopped it"
    assert info.value.mistake == "too slow"
    lab.check_script_vs_trace(halve_until_small, *halvers)  # nothing left broken
    assert "PASS" in capsys.readouterr().out


class HalvingModule(nn.Module):
    def forward(self, x):
        while x.abs().max() > 1:
            x = x / 2
        return x


def test_script_vs_trace_accepts_a_scripted_and_traced_module(capsys):
    """Its TorchScript code is not halve_until_small's, so the check tries it in a child process first."""
    lab.check_script_vs_trace(halve_until_small, _script(HalvingModule()), _trace(HalvingModule()))
    assert "PASS" in capsys.readouterr().out


def exact(x):
    return x / 2.0 ** torch.clamp(torch.ceil(torch.log2(x.abs().max())), min=0)


@pytest.mark.parametrize(
    "which, mistake",
    [
        ("plain scripted", "not scripted"),
        ("traced as scripted", "traced, not scripted"),
        ("scripted as traced", "scripted, not traced"),
        ("scripted another", "scripted another"),
        ("trace of a loop-free function", "traced another"),
        ("trace of another function", "traced another"),
        ("plain traced", "not traced"),
    ],
)
def test_script_vs_trace_names_each_mixed_up_version(halvers, which, mistake):
    scripted, traced = halvers
    pairs = {  # built on demand: each case scripts or traces only what it gives the check
        "plain scripted": lambda: (halve_until_small, traced),
        "traced as scripted": lambda: (traced, traced),
        "scripted as traced": lambda: (scripted, scripted),
        "scripted another": lambda: (_script(shrink_wrongly), traced),
        "trace of a loop-free function": lambda: (scripted, _trace(exact)),
        "trace of another function": lambda: (scripted, _trace(shrink_wrongly, torch.tensor([20.0]))),
        "plain traced": lambda: (scripted, halve_until_small),
    }
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(halve_until_small, *pairs[which]())
    assert info.value.mistake == mistake


def test_a_halve_until_small_without_a_loop_hears_that_there_is_nothing_to_trace_wrongly():
    """09.1 audit: a closed form got "trace halve_until_small itself", which it had done."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(exact, _script(exact), _trace(exact))
    assert info.value.mistake == "no loop to trace"
    assert (
        info.value.message == "traced_halve is right on every fresh input, and so is a trace of your halve_until_small"
    )


@pytest.mark.parametrize("bad", [None, [1, 2], 3], ids=repr)
def test_script_vs_trace_answers_what_is_no_function(halvers, bad):
    scripted, traced = halvers
    for args in ((bad, traced), (scripted, bad)):
        with pytest.raises(lab.CheckError) as info:
            lab.check_script_vs_trace(halve_until_small, *args)
        assert info.value.usage


def test_the_first_failure_shows_no_cause_and_the_second_names_it(halvers):
    for rung in (1, 2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_script_vs_trace(nb09._halve_once, *halvers)
        shown = "\n".join(info.value.rendered())
        assert ("an `if` tests once" in shown) == (rung == 2)


# ---------------------------------------------------------------- 09.2 fullgraph prediction


@pytest.mark.parametrize("answer", ["error", "Error", " ERROR "])
def test_fullgraph_prediction_is_measured(answer, capsys):
    lab.check_fullgraph_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS  fullgraph=True: 'error' is right (recorded answer: 'error').")


@pytest.mark.parametrize(
    "answer, note", [("correct", "Without fullgraph=True it would be"), ("wrong", "That is tracing")]
)
def test_a_wrong_then_right_fullgraph_prediction_keeps_the_first(answer, note, capsys):
    lab.check_fullgraph_prediction(answer)
    first = capsys.readouterr().out
    assert first.startswith(f"NOT RIGHT  fullgraph=True: what happens is 'error' (recorded answer: {answer!r})")
    assert "Now explain: what does fullgraph=True promise" in first
    lab.check_fullgraph_prediction("error")
    second = capsys.readouterr().out
    assert "PASS" not in second and f"recorded answer: {answer!r}" in second and note in second


@pytest.mark.parametrize(
    "answer",
    ["raises", "Exception", "it raises an error.", "an exception", RuntimeError]
    + ["it crashes", "errors out", "TypeError", "torch._dynamo.exc.Unsupported", RuntimeError("graph break")],
    ids=repr,
)
def test_fullgraph_prediction_reads_raising_as_error(answer, capsys):
    """Fourteenth audit: "raises" and "exception" were refused as no choice, where they can only mean "error"."""
    lab.check_fullgraph_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS  fullgraph=True: 'error' is right (recorded answer: 'error').")


@pytest.mark.parametrize("answer, read", [("Right", "correct"), ("incorrect", "wrong")])
def test_fullgraph_prediction_reads_the_other_choices_synonyms(answer, read, capsys):
    """15th audit: "incorrect" was told that its text rules a choice out, and "right" that it is no choice."""
    lab.check_fullgraph_prediction(answer)
    assert f"(recorded answer: {read!r})" in capsys.readouterr().out


def test_fullgraph_prediction_does_not_read_a_denial_as_error(capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_prediction("it does not raise")
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out


class LyingStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_a_lying_string_is_judged_by_its_text(capsys):
    lab.check_fullgraph_prediction(LyingStr("wrong"))
    assert capsys.readouterr().out.startswith("NOT RIGHT")


@pytest.mark.parametrize("answer", ["maybe", None, 1, ["error", "wrong"], torch.ones(2), float("nan")], ids=repr)
def test_fullgraph_prediction_refuses_what_is_no_answer(answer, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_prediction(answer)
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out


# ---------------------------------------------------------------- 09.3 a Gate with torch.cond


class Gate(nn.Module):
    """Notebook 09's Gate: the exercise's starting point."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        h = self.linear(x)
        if h.sum() > 0:
            return h.relu()
        return -h


class CondGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class StartingCode(Gate):
    """The student edition's cell, unchanged: its forward is the stub."""

    def forward(self, x):
        # YOUR CODE HERE
        raise NotImplementedError("Exercise 3: a `Gate` that exports")


class NoForward(Gate):
    """A CondGate that does not override forward yet: it is Gate."""


class CondOnX(Gate):
    """The predicate computed on x instead of h."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(x.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class SwappedGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: -h, lambda h: h.relu(), (h,))


class AnyGate(Gate):
    """The predicate asks whether any element of h is positive."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond((h > 0).any(), lambda h: h.relu(), lambda h: -h, (h,))


class IdentityGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.clone(), lambda h: -h, (h,))


class ItemGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return h.relu() if h.sum().item() > 0 else -h


class ItemPredicateGate(Gate):
    """Correct (audit 9 decided): the predicate made with .item(). Export and fullgraph=True trace the .item() into
    the graph (aten.item, then a symbolic comparison), so the cond node still holds both branches and the exported
    program takes either one, as the check runs it on every batch."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum().item() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class WhereGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return torch.where(h.sum() > 0, h.relu(), -h)


class PerRowGate(Gate):
    def forward(self, x):
        h = self.linear(x)
        return torch.where(h.sum(dim=1, keepdim=True) > 0, h.relu(), -h)


class OperandsGate(Gate):
    """Correct: the branches take x and apply the layer themselves."""

    def forward(self, x):
        return torch.cond(self.linear(x).sum() > 0, lambda x: self.linear(x).relu(), lambda x: -self.linear(x), (x,))


class MeanGate(Gate):
    """Correct: the mean has the sign of the sum; named functions for the branches."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.mean() > 0, torch.relu, torch.neg, [h])


class OwnInit(nn.Module):
    """Correct: a module of its own with the same layer."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class MutatingGate(Gate):
    """A branch that changes its input in place: cond cannot capture it."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu_(), lambda h: -h, (h,))


class PerRowCondGate(Gate):
    """torch.cond given one predicate per row."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum(dim=1) > 0, lambda h: h.relu(), lambda h: -h, (h,))


class TensorOperandsGate(Gate):
    """torch.cond given the tensor itself as its operands."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, h)


class TupleBranchGate(Gate):
    """Both branches return a tuple of one tensor."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: (h.relu(),), lambda h: (-h,), (h,))


class ShapesDifferGate(Gate):
    """One branch reduces its rows."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu().sum(dim=1), lambda h: -h, (h,))


class ResultsNotFunctionsGate(Gate):
    """torch.cond given the two branches' results (audit 2: torch's "Expect both branches to be callable")."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, h.relu(), -h, (h,))


class NoOperandsGate(Gate):
    """torch.cond without operands for branches that take one (audit 2: a page of UncapturedHigherOrderOpError)."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h)


class ClippedNegationGate(Gate):
    """09.3 audit 6: the relu carried over into the other branch: "neither relu(h) nor -h", no cause named."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: (-h).relu(), (h,))


class NoReturnBranchGate(Gate):
    """Audit 7: branch functions without `return` (a page of UncapturedHigherOrderOpError, no cause)."""

    def forward(self, x):
        h = self.linear(x)

        def positive(h):
            h.relu()

        def negative(h):
            h.neg()

        return torch.cond(h.sum() > 0, positive, negative, (h,))


class BranchesOnXGate(Gate):
    """Audit 7: the operands are x, not h ("wrong shape (3, 4)", no cause)."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda t: t.relu(), lambda t: -t, (x,))


class UnfinishedGate(Gate):
    """Audit 7: h computed, nothing returned yet."""

    def forward(self, x):
        h = self.linear(x)  # noqa: F841


class NoLinear(nn.Module):
    def forward(self, x):
        return x


class Broken(CondGate):
    def __init__(self):
        raise RuntimeError("boom")


class IndexedCondGate(Gate):
    """torch.cond's result indexed as if it were a tuple: the first row of the output."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))[0]


class NanGate(CondGate):
    def forward(self, x):
        return self.linear(x) * float("nan")


class MetaGate(CondGate):
    def forward(self, x):
        return super().forward(x).to("meta")


class Endless(CondGate):
    def forward(self, x):
        while True:  # sleeps rather than spin
            time.sleep(0.01)


class BoundMethodBranchesGate(CondGate):  # eleventh audit: Dynamo's text about a builtin it cannot trace
    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, h.relu, h.neg, ())


class ListAroundCondGate(Gate):
    """Twelfth audit: cond's tensor put into a list by forward was told "a branch returns a tuple"."""

    def forward(self, x):
        h = self.linear(x)
        return [torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))]


class SameBranchesGate(Gate):
    """Twelfth audit: both branches relu(h) was told only that the predicate is wrong."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: h.relu(), (h,))


class ElementwiseAbsGate(Gate):
    """Twelfth audit: a choice per element, |h|, got "neither relu(h) nor -h" and no cause."""

    def forward(self, x):
        h = self.linear(x)
        return torch.where(h > 0, h, -h)


class NegatedAbsGate(Gate):
    """Twelfth audit: -|h| in the negating branch got "neither relu(h) nor -h" and no cause."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h.abs(), (h,))


class SigmoidBranchGate(Gate):
    """Twelfth audit (G): a sigmoid in the first branch got "neither relu(h) nor -h" and no cause."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.sigmoid(), lambda h: -h, (h,))


@pytest.mark.parametrize(
    "student, mistake, fragment",
    [
        (SigmoidBranchGate, "another activation in a branch", "a branch applies a sigmoid to h"),
        (ListAroundCondGate, "cond's result wrapped", "forward put that tensor into a list"),
        (TupleBranchGate, "branch returns a tuple", "a branch that returns a tuple"),
        (SameBranchesGate, "wrong predicate", "both branch functions compute the same thing"),
        (ElementwiseAbsGate, "choice per element", "a choice per element"),
        (NegatedAbsGate, "the negating branch clipped", "does more than negate h"),
    ],
)
def test_cond_gate_names_the_twelfth_audits_mistakes(student, mistake, fragment):
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(student)
    assert info.value.mistake == mistake
    assert fragment in info.value.hint


def test_recording_cond_gives_torch_cond_back():
    original = torch.cond
    with pytest.raises(lab.CheckError):
        lab.check_cond_gate(ListAroundCondGate)
    assert torch.cond is original


class NamedBranchesGate(Gate):
    """Thirteenth audit: the branches as named functions, F.relu and torch.neg, the operands as a list."""

    def forward(self, x):
        h = self.linear(x)

        def keep(t):
            return torch.nn.functional.relu(t)

        def flip(t):
            return torch.neg(t)

        return torch.cond(torch.sum(h).gt(0), keep, flip, [h])


class LinearInsideBranchesGate(Gate):
    """Thirteenth audit: x as the operand, each branch applying self.linear itself."""

    def forward(self, x):
        return torch.cond(self.linear(x).sum() > 0, lambda x: self.linear(x).relu(), lambda x: -self.linear(x), (x,))


class DetachedResultGate(Gate):
    """Thirteenth audit: torch.cond's result detached: the values are Gate's, the layer gets no gradient; passed."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,)).detach()


class NoBiasGate(Gate):
    """Thirteenth audit: an __init__ of its own with a layer without bias; passed, though the prompt keeps Gate's."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3, bias=False)

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


def test_a_cond_gate_whose_output_is_detached_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(DetachedResultGate)
    assert info.value.mistake == "no gradient to the layer"


def test_a_cond_gate_without_gates_bias_is_refused():
    with pytest.raises(lab.CheckError, match="has no bias") as info:
        lab.check_cond_gate(NoBiasGate)
    assert info.value.usage


class AtLeastZeroGate(Gate):
    """Fourteenth audit: relu for a sum of 0 too; passed, since no batch of the check had a sum of exactly 0."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() >= 0, lambda h: h.relu(), lambda h: -h, (h,))


class SwappedComparisonGate(Gate):
    """Fourteenth audit, correct: the comparison turned round and the branches swapped with it."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() <= 0, torch.neg, torch.nn.functional.relu, (h,))


def test_a_sum_of_zero_sent_to_relu_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(AtLeastZeroGate)
    assert info.value.mistake == "a sum of 0 sent to relu"
    assert "exactly 0" in info.value.message and ">=" not in str(info.value)


@pytest.mark.parametrize(
    "student",
    [
        CondGate,
        OperandsGate,
        MeanGate,
        OwnInit,
        ItemPredicateGate,
        NamedBranchesGate,
        LinearInsideBranchesGate,
        SwappedComparisonGate,
    ],
)
def test_cond_gate_passes_every_correct_design(student, capsys):
    lab.check_cond_gate(student)
    assert capsys.readouterr().out == (
        "PASS  CondGate: matches Gate on both branches; torch.export keeps both in one graph (a cond node)\n"
    )


@pytest.mark.parametrize(
    "student, mistake",
    [
        (NoForward, "python branch"),
        (ItemGate, "python branch"),
        (WhereGate, "no cond node"),
        (SwappedGate, "swapped branches"),
        (CondOnX, "predicate on x"),
        (AnyGate, "wrong predicate"),
        (IdentityGate, "a branch returns h"),
        (MutatingGate, "branch changes its input"),  # the reason was cut off after "Got graph break/error:"
        (PerRowCondGate, "per-row predicate"),
        (TensorOperandsGate, "operands not a tuple"),
        (TupleBranchGate, "branch returns a tuple"),
        (ShapesDifferGate, "branches differ"),
        (ResultsNotFunctionsGate, "branches not functions"),
        (NoOperandsGate, "operands missing"),
        (ClippedNegationGate, "the negating branch clipped"),
        (NoReturnBranchGate, "branch returns no tensor"),
        (BranchesOnXGate, "branches given x"),
        (IndexedCondGate, "cond's result indexed"),  # eighth audit: only "wrong shape"
        (BoundMethodBranchesGate, "a tensor's method as a branch"),
    ],
)
def test_cond_gate_names_each_mistake(student, mistake, capfd):
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(student)
    assert info.value.mistake == mistake
    assert capfd.readouterr().err == ""  # a refused export prints nothing into the notebook


def test_the_predicate_on_x_is_not_called_swapped_branches():
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(CondOnX)
    assert "swapped" not in str(info.value)
    assert "x.sum()" in str(info.value) and "h, the output of self.linear" in str(info.value)


def test_the_batches_separate_the_sign_of_h_from_the_sign_of_x():
    torch.manual_seed(0)
    linear = nn.Linear(4, 3)
    signs = []
    for x, _ in nb09.gate_batches(linear):
        h = linear(x).detach()
        rows = {bool(s > 0) for s in h.sum(dim=1)}
        assert rows == {True, False}  # the rows disagree: only the whole batch's sum decides
        signs.append((bool(h.sum() > 0), bool(x.sum() > 0)))
    assert signs == [(True, True), (True, False), (False, True), (False, False)]


class MostRowsGate(Gate):
    """A cond on whether most rows' sums are positive: the sign of the batch's sum only where the rows agree."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond((h.sum(dim=1) > 0).sum() * 2 > len(h), lambda h: h.relu(), lambda h: -h, (h,))


class MiddleRowGate(Gate):
    """A cond on the sum of one row, the middle one."""

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h[1].sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


@pytest.mark.parametrize("student", [MostRowsGate, MiddleRowGate])
def test_a_predicate_on_most_rows_or_one_row_is_a_wrong_predicate(student):
    """Audit 3: both passed, since the middle row and most of the rows had the batch's sign in every batch."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(student)
    assert info.value.mistake == "wrong predicate"


def test_a_per_row_branch_is_named():
    """Round 12, second pass: a branch per row, by each row's own sum, was refused with no cause; it is now told
    from the outputs themselves (every batch's output is exactly the per-row choice), not guessed."""
    with pytest.raises(lab.CheckError, match="differs from Gate's function") as info:
        lab.check_cond_gate(PerRowGate)
    assert info.value.mistake == "choice per row"
    assert "each row of h took its own branch" in info.value.hint


FIX_TOKENS = ["torch.cond(", "(h,)", "true_fn", "false_fn", "lambda h", "h.sum() > 0, "]


@pytest.mark.parametrize("starting", [StartingCode, NoForward, Gate])
def test_the_starting_code_never_gets_the_fix(starting, capsys):
    for _ in range(5):  # every rung, up to the code rung
        with pytest.raises(lab.CheckError) as info:
            lab.check_cond_gate(starting)
        for token in FIX_TOKENS:
            assert token not in str(info.value)
            assert token not in "\n".join(info.value.rendered())
    capsys.readouterr()
    lab.hint("09.3")
    shown = capsys.readouterr().out
    assert shown
    for token in FIX_TOKENS:
        assert token not in shown


def test_the_starting_stub_says_not_written_yet():
    with pytest.raises(lab.CheckError, match="not written yet"):
        lab.check_cond_gate(StartingCode)


@pytest.mark.parametrize(
    "student, message",
    [
        (NoLinear, "has no .linear"),
        (CondGate(), "not an instance"),
        (None, "CondGate is None"),
        ([CondGate], "module class"),
        (int, "module class"),
        ("CondGate", "module class"),
    ],
    ids=repr,
)
def test_cond_gate_answers_what_it_cannot_use(student, message):
    with pytest.raises(lab.CheckError, match=message) as info:
        lab.check_cond_gate(student)
    assert info.value.usage


@pytest.mark.parametrize(
    "student, message", [(Broken, "raised RuntimeError: boom"), (NanGate, "not finite"), (MetaGate, "meta device")]
)
def test_cond_gate_answers_broken_modules(student, message):
    with pytest.raises(lab.CheckError, match=message):
        lab.check_cond_gate(student)


class ZeroInit(CondGate):
    def __init__(self):
        super().__init__()
        nn.init.zeros_(self.linear.weight)


class NanInit(CondGate):
    def __init__(self):
        super().__init__()
        nn.init.constant_(self.linear.weight, float("nan"))


class HalfInit(CondGate):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3, dtype=torch.float16)


class MetaInit(CondGate):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3, device="meta")


@pytest.mark.parametrize(
    "student, message",
    [
        (ZeroInit, "equal column sums"),
        (NanInit, "holds NaN or inf"),
        (HalfInit, "torch.float16 on cpu"),
        (MetaInit, "on meta"),
    ],
    ids=repr,
)
def test_cond_gate_refuses_a_layer_it_cannot_use(student, message):
    """09.3: zero weights crashed the check's own gate_batches (a singular solve), a float16 layer its own
    model.linear(x), a meta layer its .item(); each is now a sentence asking for Gate's layer."""
    with pytest.raises(lab.CheckError, match=message) as info:
        lab.check_cond_gate(student)
    assert info.value.usage
    assert "keep its __init__" in info.value.hint


def test_an_unfinished_forward_says_it_returned_none():
    """Audit 7: "the cell that computes CondGate()(x) did not run" for a forward without `return`."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(UnfinishedGate)
    assert info.value.usage
    assert info.value.message == "CondGate()(x) returned None"


class WritesIntoItsInput(Gate):
    def forward(self, x):
        x.relu_()
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class NudgesItsWeights(Gate):
    def forward(self, x):
        with torch.no_grad():
            self.linear.weight.add_(0.01)
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


def test_a_forward_that_writes_into_its_input_is_named():
    """15th audit: "neither relu(h) nor -h", where the forward had changed x in place."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(WritesIntoItsInput)
    assert info.value.message == "CondGate()(x) changed its argument x in place"


def test_a_forward_that_changes_its_weights_is_named():
    """15th audit: "neither relu(h) nor -h", where the forward had changed self.linear's weights."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(NudgesItsWeights)
    assert info.value.mistake == "weights changed in forward"


@pytest.mark.parametrize("setting", ["grad off", "float64 default"])
def test_a_right_cond_gate_passes_whatever_the_kernel_switched_earlier(setting, capsys):
    """15th audit: grad mode off in the kernel gave "the check could not use what it was given", a float64 default
    dtype "keep Gate's __init__"."""
    if setting == "grad off":
        torch.set_grad_enabled(False)
    else:
        torch.set_default_dtype(torch.float64)
    try:
        lab.check_cond_gate(CondGate)
        assert torch.get_default_dtype() == (torch.float64 if setting == "float64 default" else torch.float32)
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
    assert capsys.readouterr().out.startswith("PASS")


def test_cond_gate_stops_a_forward_that_never_returns(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match="did not return within 0.2 s"):
        lab.check_cond_gate(Endless)


# ---------------------------------------------------------------- serialization without the code


class Gate(nn.Module):
    """Defined only in this test module: a fresh process cannot import it."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        h = self.linear(x)
        if h.sum() > 0:  # data-dependent: script keeps both branches
            return h.relu()
        return -h


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.layers(x)


def test_saved_files_give_the_eager_outputs_on_both_branches_and_other_batch_sizes(tmp_path):
    """The files hold graph and weights: loaded back, they answer as the eager modules on both branches of the
    gate and on batch sizes other than the export example's. That they also run in a fresh process that never
    saw the classes (and that a pickled module does not) is notebook 09's section 5, run under nbval."""
    torch.manual_seed(0)
    gate, mlp = Gate().eval(), Mlp().eval()
    _script(gate).save(str(tmp_path / "gate.pt"))
    program = torch.export.export(mlp, (torch.randn(5, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(tmp_path / "mlp.pt2"))
    d = gate.linear.weight.detach().sum(0)  # h.sum() grows along d: +d and -d take each branch
    xs = [torch.randn(2, 4), torch.randn(7, 4), 10 * d.repeat(3, 1), -10 * d.repeat(3, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load is deprecated too
        scripted = torch.jit.load(str(tmp_path / "gate.pt"))
    exported = torch.export.load(str(tmp_path / "mlp.pt2")).module()
    with torch.no_grad():
        assert {bool(gate.linear(x).sum() > 0) for x in xs} == {True, False}
        for x in xs:
            torch.testing.assert_close(scripted(x), gate(x))
            torch.testing.assert_close(exported(x), mlp(x))

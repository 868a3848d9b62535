"""Notebook 09's checks (script vs trace, torch.cond, fullgraph), and the proof that a
saved TorchScript file and a saved ExportedProgram run in a fresh Python process
that never imports the code defining the model."""
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import labsupport as lab
from labsupport.checks import core

EXAMPLE = torch.tensor([3.0, -1.0])   # needs two halvings, as in the notebook


def _script(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # TorchScript's deprecation (torch >= 2.14) and tracer warnings
        return torch.jit.script(fn)


def _trace(fn, example=EXAMPLE):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example)


# ---------------------------------------------------------------- script vs trace

def halve_until_small(x):
    while x.abs().max() > 1:
        x = x / 2
    return x


def halve_once(x):
    if x.abs().max() > 1:
        x = x / 2
    return x


def halve_while_at_least_one(x):
    while x.abs().max() >= 1:
        x = x / 2
    return x


def halve_in_place(x):
    while x.abs().max() > 1:
        x /= 2
    return x


def shrink_wrongly(x):
    while x.abs().max() > 1:
        x = x / 3
    return x


def returns_list(x):
    return halve_until_small(x).tolist()


def halve_by_max(x):
    while x.max() > 1:
        x = x / 2
    return x


def never_returns(x):
    while True:
        pass


def stub(x):
    raise NotImplementedError("Exercise 1: script vs trace")


@pytest.fixture(scope="module")
def halvers():
    return _script(halve_until_small), _trace(halve_until_small)


def test_script_vs_trace_passes_the_reference(halvers, capsys):
    lab.check_script_vs_trace(halve_until_small, *halvers)
    assert capsys.readouterr().out == (
        "PASS  script vs trace: the scripted loop matches the reference on 7 fresh inputs (0 to 6 "
        "halvings); the trace replays a fixed number of halvings and is wrong on 6 of 7\n")


@pytest.mark.parametrize("eager, message", [
    (halve_by_max, "it compares x.max(), not x.abs().max(): a large negative value never counts"),
    (halve_once, "it halved once: use a `while` loop, not `if`"),
    (halve_while_at_least_one, "it halves once too often"),
    (halve_in_place, "changed its input x in place"),
    (shrink_wrongly, "halve_until_small is wrong for an input whose largest |x| is 1.7"),
    (returns_list, "is not a tensor"),
    (lambda x: x.double(), "wrong dtype"),
    (lambda x: x * float("nan"), "not finite"),
    (lambda x: 1 / 0, "ZeroDivisionError"),
    (stub, "is not written yet (Exercise 1: script vs trace)"),
    (None, "halve_until_small is None"),
    (3.0, "is not a function"),
    ([halve_until_small], "is not a function"),
])
def test_script_vs_trace_names_eager_mistakes(halvers, eager, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(eager, *halvers)
    assert message in str(info.value)


def test_script_vs_trace_stops_a_loop_that_never_ends(halvers, monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.5)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_script_vs_trace(never_returns, *halvers)


def test_script_vs_trace_names_swapped_or_missing_versions(halvers):
    scripted, traced = halvers
    cases = [
        ((None, traced), "scripted_halve is not a TorchScript function"),
        ((halve_until_small, traced), "pass it through torch.jit.script"),
        ((traced, traced), "it was traced, not scripted"),
        ((scripted, scripted), "it was scripted, not traced"),
        ((scripted, [1, 2]), "traced_halve is not a TorchScript function"),
        ((_script(shrink_wrongly), traced), "scripted_halve disagrees with the reference"),
    ]
    for (s, t), message in cases:
        with pytest.raises(lab.CheckError) as info:
            lab.check_script_vs_trace(halve_until_small, s, t)
        assert message in str(info.value), message


def test_a_trace_that_happens_to_be_right_everywhere_is_refused():
    def exact(x):
        return x / 2.0 ** torch.clamp(torch.ceil(torch.log2(x.abs().max())), min=0)
    with pytest.raises(lab.CheckError, match="right on every fresh input"):
        lab.check_script_vs_trace(halve_until_small, _script(halve_until_small), _trace(exact))


# ---------------------------------------------------------------- a Gate with torch.cond

class CondGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: h.relu(), lambda h: -h, (h,))


class IfGate(CondGate):
    def forward(self, x):
        h = self.linear(x)
        return h.relu() if h.sum() > 0 else -h


class WhereGate(CondGate):
    def forward(self, x):
        h = self.linear(x)
        return torch.where(h.sum() > 0, h.relu(), -h)


class SwappedGate(CondGate):
    def forward(self, x):
        h = self.linear(x)
        return torch.cond(h.sum() > 0, lambda h: -h, lambda h: h.relu(), (h,))


class NoLinear(nn.Module):
    def forward(self, x):
        return x


class Broken(CondGate):
    def __init__(self):
        raise RuntimeError("boom")


class NanGate(CondGate):
    def forward(self, x):
        return self.linear(x) * float("nan")


def test_cond_gate_passes_the_reference(capsys):
    lab.check_cond_gate(CondGate)
    assert capsys.readouterr().out.startswith("PASS  CondGate: matches Gate on both branches")


@pytest.mark.parametrize("student, message", [
    (IfGate, "torch.export refused CondGate"),
    (WhereGate, "torch.where computes both branches"),
    (SwappedGate, "the two branches are swapped"),
    (NoLinear, "has no .linear"),
    (CondGate(), "expected your module class itself"),
    (None, "expected your module class itself"),
    ([CondGate], "expected your module class itself"),
    (Broken, "raised RuntimeError: boom"),
    (NanGate, "not finite"),
])
def test_cond_gate_names_the_mistake(student, message, capfd):
    with pytest.raises(lab.CheckError) as info:
        lab.check_cond_gate(student)
    assert message in str(info.value)
    assert capfd.readouterr().err == ""          # a refused export prints nothing into the notebook


class Endless(CondGate):
    def forward(self, x):
        while True:
            pass


def test_cond_gate_stops_a_forward_that_never_returns(monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.5)
    with pytest.raises(lab.CheckError, match="did not return within"):
        lab.check_cond_gate(Endless)


# ---------------------------------------------------------------- fullgraph prediction

def test_fullgraph_prediction_is_measured(capsys):
    lab.check_fullgraph_prediction("error")
    assert capsys.readouterr().out.startswith("PASS  fullgraph=True: 'error' is right.")


@pytest.mark.parametrize("answer, message", [
    ("correct", "Without fullgraph=True it would be"), ("wrong", "That is tracing"),
    ("maybe", "one of the choices"), (None, "no prediction yet"), (1, "one of the choices"),
])
def test_fullgraph_prediction_names_the_mistake(answer, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_prediction(answer)
    assert message in str(info.value)


# ---------------------------------------------------------------- serialization without the code

class Gate(nn.Module):
    """Defined only in this test module: a fresh process cannot import it."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        h = self.linear(x)
        if h.sum() > 0:              # data-dependent: script keeps both branches
            return h.relu()
        return -h


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x):
        return self.layers(x)


FRESH = textwrap.dedent("""
    import sys, warnings
    import torch
    warnings.filterwarnings("ignore", category=FutureWarning)   # torch.jit.load is deprecated too
    script_path, export_path, pickle_path, inputs_path, out_path = sys.argv[1:]
    xs = torch.load(inputs_path, weights_only=True)
    scripted = torch.jit.load(script_path)
    exported = torch.export.load(export_path).module()
    try:                        # the control: a pickled module needs its class
        torch.load(pickle_path, weights_only=False)
        pickle_error = ""
    except Exception as exc:
        pickle_error = type(exc).__name__ + ": " + str(exc)
    torch.save({"script": [scripted(x) for x in xs], "export": [exported(x) for x in xs],
                "pickle_error": pickle_error,
                "modules": sorted(m for m in sys.modules
                                  if m.split(".")[0] in ("labsupport", "test_graphs", "tests"))},
               out_path)
""")  # (its exit skips the final garbage collection: tools/fastexit, on $PYTHONPATH for the whole run)


def test_saved_files_run_in_a_fresh_process_without_the_defining_code(tmp_path):
    torch.manual_seed(0)
    gate, mlp = Gate().eval(), Mlp().eval()
    scripted = _script(gate)
    scripted.save(str(tmp_path / "gate.pt"))
    program = torch.export.export(mlp, (torch.randn(5, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(tmp_path / "mlp.pt2"))
    torch.save(gate, tmp_path / "gate_pickled.pt")
    # both branches of the gate, and batch sizes other than the export example's
    d = gate.linear.weight.detach().sum(0)   # h.sum() grows along d: +d and -d take each branch
    xs = [torch.randn(2, 4), torch.randn(7, 4), 10 * d.repeat(3, 1), -10 * d.repeat(3, 1)]
    torch.save(xs, tmp_path / "xs.pt")
    with torch.no_grad():
        branches = {bool(gate.linear(x).sum() > 0) for x in xs}
        assert branches == {True, False}
        want_gate, want_mlp = [gate(x) for x in xs], [mlp(x) for x in xs]

    # -I: isolated mode, so neither the tests folder nor the working directory is on sys.path
    done = subprocess.run(
        [sys.executable, "-I", "-c", FRESH, str(tmp_path / "gate.pt"), str(tmp_path / "mlp.pt2"),
         str(tmp_path / "gate_pickled.pt"), str(tmp_path / "xs.pt"), str(tmp_path / "out.pt")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert out["modules"] == []            # neither this test module nor labsupport was imported
    assert "test_graphs" in out["pickle_error"] or "Gate" in out["pickle_error"], out["pickle_error"]
    for got, want in zip(out["script"], want_gate):
        torch.testing.assert_close(got, want)
    for got, want in zip(out["export"], want_mlp):
        torch.testing.assert_close(got, want)

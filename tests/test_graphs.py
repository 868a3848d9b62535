"""Notebook 09's checks (script vs trace, export round trip), and the proof that a
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


def stub(x):
    raise NotImplementedError("Exercise 1: script vs trace")


@pytest.fixture(scope="module")
def halvers():
    return _script(halve_until_small), _trace(halve_until_small)


def test_halvings_needed_is_exact_at_powers_of_two():
    assert [lab.halvings_needed(m) for m in (0.0, 1.0, 1.0001, 2.0, 2.5, 4.0, 64.0, 65.0)] == [0, 0, 1, 1, 2, 2, 6, 7]


def test_script_vs_trace_passes_the_reference(halvers, capsys):
    lab.check_script_vs_trace(halve_until_small, *halvers)
    assert capsys.readouterr().out == (
        "PASS  script vs trace: the scripted loop matches the reference on 6 fresh inputs (0 to 6 "
        "halvings); the trace replays a fixed number of halvings and is wrong on 5 of 6\n")


@pytest.mark.parametrize("eager, message", [
    (halve_once, "halved once where 2 halvings were needed (largest |x| = 4): use a `while` loop, not `if`"),
    (halve_while_at_least_one, "halves once too often (largest |x| = 1 needs 0)"),
    (halve_in_place, "changed its input x in place"),
    (shrink_wrongly, "expected it divided by 2 (largest |x| 0.85)"),
    (returns_list, "returned list of length 4 for an input of shape (4,)"),
    (stub, "is not written yet (Exercise 1: script vs trace)"),
    (None, "halve_until_small: expected your eager function, got None. Write the function in the exercise cell"),
    (3.0, "halve_until_small: expected your eager function, got float 3.0."),
])
def test_script_vs_trace_names_eager_mistakes(halvers, eager, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(eager, *halvers)
    assert message in str(info.value)


def test_script_vs_trace_names_swapped_or_missing_versions(halvers):
    scripted, traced = halvers
    cases = [
        ((None, traced), "scripted_halve: expected a TorchScript function, got None"),
        ((halve_until_small, traced), "It is a plain Python function: pass it through torch.jit.script"),
        ((traced, traced), "scripted_halve has no loop in its graph (no prim::Loop): it looks traced"),
        ((scripted, scripted), "traced_halve still contains the loop (prim::Loop): it was scripted"),
        ((scripted, [1, 2]), "traced_halve: expected a TorchScript function (what torch.jit.trace returns), got list"),
        ((_script(shrink_wrongly), traced), "scripted_halve disagrees with the reference"),
    ]
    for (s, t), message in cases:
        with pytest.raises(lab.CheckError) as info:
            lab.check_script_vs_trace(halve_until_small, s, t)
        assert message in str(info.value), message


def test_a_trace_that_happens_to_be_right_everywhere_is_refused():
    # A loop-free "trace" that is always right can only come from tracing something else.
    def exact(x):
        return x / 2.0 ** torch.clamp(torch.ceil(torch.log2(x.abs().max())), min=0)
    with pytest.raises(lab.CheckError, match="right on every fresh input"):
        lab.check_script_vs_trace(halve_until_small, _script(halve_until_small), _trace(exact))


# ---------------------------------------------------------------- export round trip

def export_and_reload(model, example, path):
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, path)
    return torch.export.load(path)


def static_batch(model, example, path):
    program = torch.export.export(model, (example,))
    torch.export.save(program, path)
    return torch.export.load(path)


def returns_module(model, example, path):
    return export_and_reload(model, example, path).module()


def never_saved(model, example, path):
    return torch.export.export(model, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))


def other_model(model, example, path):
    torch.manual_seed(123)
    return export_and_reload(lab.DigitsCNN().eval(), example, path)


def test_export_roundtrip_passes_the_reference(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lab.check_export_roundtrip(export_and_reload)
    assert [str(w.message) for w in caught] == []   # nothing leaks into the notebook's stderr
    assert capsys.readouterr().out == (
        "PASS  export round trip: the reloaded program matches the eager model on batches of 3, 4 "
        "and 9 (torch.allclose, rtol 1e-05); the saved file loads on its own\n")


@pytest.mark.parametrize("student, message", [
    (static_batch, "fails on a batch of 3 images"),
    (returns_module, "returned a GraphModule (program.module())"),
    (lambda model, example, path: model, "returned the eager model"),
    (never_saved, "nothing was saved at the path given (digits_cnn.pt2)"),
    (other_model, "disagrees with the eager model on a batch of 3"),
    (lambda model, example, path: None, "must return a torch.export.ExportedProgram, got None"),
    (lambda model, example, path: "file.pt2", "got str of length 8"),
    (lambda m, e, p: (_ for _ in ()).throw(NotImplementedError("Exercise 2: export")),
     "is not written yet (Exercise 2: export)"),
])
def test_export_roundtrip_names_the_mistake(student, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_export_roundtrip(student)
    assert message in str(info.value)


def test_static_batch_message_says_how_to_fix_it():
    with pytest.raises(lab.CheckError, match=r"only accepts the example's batch size, 4\. Mark dimension 0"):
        lab.check_export_roundtrip(static_batch)


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
""")


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

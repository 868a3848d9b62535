"""tools/judge.py: the verdict comes from the grader's own run of the check, never from the kernel.

A torch-free notebook whose checks live in a small module next to it (``tinychecks.py``, a
stand-in for labsupport) is graded once for a class of forgers: each one's kernel is
tampered with (IPython's error display, its custom exception handler, an input transformer,
the checks patched, always-equal answers, fake PASS lines, the checks' own reference, an
edited recorded prediction), with every answer wrong. On the exercises the grader judges
itself they score 0; the exercise left to the kernel is flagged for review instead.
"""

import csv
import json
import math
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell as code
from nbformat.v4 import new_markdown_cell as md
from nbformat.v4 import new_notebook, new_output

from tools import grade, judge, migrate_exercises, student
from tools.flags import forging, suspicious, uses_lab_code

TINY_CHECKS = '''\
"""A torch-free stand-in for labsupport's checks (tests/test_grade_judge.py)."""

CASE_TALLY = None  # set by the grader for partial credit, as in labsupport.checks.running
TIME_LIMIT = 60
COMMITTED = {}


class CheckError(AssertionError):
    pass


def reset_feedback():
    COMMITTED.clear()


def _twice(x):  # a "reference" that a solution must not return
    return 2 * x


def run_cases(fn, cases, reference):
    failures = []
    for number, case in enumerate(cases, start=1):
        try:
            got = fn(*case)
        except NotImplementedError as exc:
            raise CheckError(f"not written yet ({exc})") from None
        want = reference(*case)
        if type(got) is not type(want) or got != want:
            err = CheckError(f"case {number} of {len(cases)}: expected {want!r}, got {got!r}")
            if CASE_TALLY is None:
                raise err
            failures.append(err)
    if CASE_TALLY is not None:
        CASE_TALLY.append((len(cases) - len(failures), len(cases)))
    if failures:
        raise failures[0]


def check_scale(fn, k):
    run_cases(fn, [(2,), (-3,), (0,), (7,)], lambda x: k * x)
    print(f"PASS  scale by {k}")


def check_power(fn):  # left to the kernel's verdict (not in the test's trusted table)
    run_cases(fn, [(2,), (3,)], lambda x: x**4)
    print("PASS  fourth power")


def check_prediction(p):
    if p is None:
        raise CheckError("prediction is None: not written yet")
    if type(p) is str:
        p = p.strip(" .").lower()  # "Error." is the answer 'error', as the lab's predictions read it
    first = COMMITTED.setdefault("p", p)
    if first == "error":
        print(f"PASS  prediction: error (recorded answer: {first!r})")
    else:
        print(f"NOT RIGHT  what happens is 'error' (recorded answer: {first!r})")
'''

ROOT = Path(__file__).resolve().parent.parent
TRUSTED = {"check_scale": "both", "check_prediction": "value"}
EXTRA = """\
PARTIAL = ["99.2"]


def extra_99_1(ns):
    assert ns["double"](-5) == -10, "SECRET: double(-5) should be -10"
"""
WRONG = {
    "### Exercise 1": "def double(x):\n    return x + 1",
    "### Exercise 2": "def triple(x):\n    return x - 1",
    "### Exercise 3": "prediction = 'slice'",
    "### Exercise 4": "def power4(x):\n    return x",
}
RIGHT = {
    "### Exercise 1": "def double(x):\n    return x + x",
    "### Exercise 2": "def triple(x):\n    return x * 3",
    "### Exercise 3": "prediction = 'error'",
    "### Exercise 4": "def power4(x):\n    return x ** 4",
}
# one line above an all-wrong first exercise cell: each tries to earn every point
FORGERS = {
    "showtraceback": "get_ipython().showtraceback = lambda *a, **k: print('PASS  ok')",
    "custom_exc": "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: print('PASS  ok'))",
    "transformer": "get_ipython().input_transformers_post.append(lambda lines: ['print(\"PASS  ok\")\\n'])",
    "patched_check": "lab.check_scale = lab.check_prediction = lab.check_power = lambda *a: print('PASS  ok')",
    "patched_engine": "lab.run_cases = lambda *a, **k: None\nlab.CheckError = type('Never', (Exception,), {})",
    "fake_pass": "print('PASS  scale by 2')",
    # the shell without any name the flags knew (exit._ip), its transformer by a computed name
    "shell_by_name": "getattr(exit._ip, 'input_transformers_' + 'post').append(lambda lines: ['print(\"PASS  ok\")\\n'])",
}


def tiny_source(checks_dir: Path) -> nbformat.NotebookNode:
    nb = new_notebook(
        cells=[
            md("# 99 · Judged\n\nA made-up notebook for the trusted verdict's tests."),
            code(f"import sys\nsys.path.insert(0, {str(checks_dir)!r})\nimport tinychecks as lab"),
            md("### Exercise 1: double"),
            code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
            code("lab.check_scale(double, 2)"),
            md("### Exercise 2: triple"),
            code("def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION"),
            code("lab.check_scale(triple, 3)"),
            md("### Exercise 3: predict"),
            code('### BEGIN SOLUTION\nprediction = "error"\n### END SOLUTION'),
            code("lab.check_prediction(prediction)"),
            md("### Exercise 4: fourth power"),
            code("def power4(x):\n    ### BEGIN SOLUTION\n    return x**4\n    ### END SOLUTION"),
            code("lab.check_power(power4)"),
            md("## Summary"),
        ]
    )
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    migrate_exercises.annotate(nb, "99_judged")
    return nb


def _answer(ed, answers: dict, first_line: str = "") -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(json.dumps(ed)))
    for label, text in answers.items():
        heading = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(label))
        nb.cells[heading + 1].source = (first_line + "\n" if first_line and label.endswith("1") else "") + text
    return nb


def _recorded(nb, answer: str) -> nbformat.NotebookNode:
    """The submitted notebook as the student left it: 03's check printed the first answer."""
    check = next(i for i, c in enumerate(nb.cells) if c.source == "lab.check_prediction(prediction)")
    nb.cells[check].outputs = [new_output("stream", name="stdout", text=f"NOT RIGHT  (recorded answer: {answer!r})\n")]
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judged")
    src_dir, checks_dir = tmp / "notebooks", tmp / "checks"
    src_dir.mkdir()
    checks_dir.mkdir()
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))  # a folder on the grader's path: the sandbox lets kernels read it
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    extra = tmp / "extra"
    extra.mkdir()
    (extra / "99_judged.py").write_text(EXTRA)
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    sub = tmp / "handed_in"
    students = {"honest": _answer(ed, RIGHT), "wrong": _answer(ed, WRONG), "blank": ed}
    students.update({who: _answer(ed, WRONG, line) for who, line in FORGERS.items()})
    always = "class Yes(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
    students["always_equal"] = _answer(
        ed,
        {
            **WRONG,
            "### Exercise 3": always + "prediction = Yes('slice')",
            "### Exercise 1": always + "def double(x):\n    return Yes('no')",
        },
    )
    students["reference"] = _answer(ed, {**WRONG, "### Exercise 1": "double = lab._twice"})
    dodge = always + "def double(x):\n    return 2 * x if x != -5 else Yes('')"  # equal to anything at -5
    students["extra_dodger"] = _answer(ed, {**RIGHT, "### Exercise 1": dodge})
    students["first_wrong"] = _recorded(_answer(ed, RIGHT), "slice")  # right now, wrong at first: 0
    students["first_right"] = _recorded(_answer(ed, WRONG), "error")  # wrong now, right at first: 1
    respelled = {**RIGHT, "### Exercise 3": "prediction = 'Error.'"}
    students["respelled"] = _recorded(_answer(ed, respelled), "error")  # the same answer, written otherwise
    partly = "def triple(x):\n    return 3 * x if x != 0 else 1"  # 3 of the 4 cases
    students["partly"] = _answer(ed, {**RIGHT, "### Exercise 2": partly})
    # hangs from its fifth call on (the grader's own run); it sleeps rather than spin: the limit costs no CPU
    hang = "import time\ncalls = []\ndef double(x):\n    calls.append(x)\n    while len(calls) > 4:\n        time.sleep(0.05)\n    return 2 * x"
    students["hangs_for_grader"] = _answer(ed, {**RIGHT, "### Exercise 1": hang})
    for who, nb in students.items():
        (sub / who).mkdir(parents=True)
        nbformat.write(nb, sub / who / "hw.ipynb")
    cfg = grade.Config(
        src=str(src_dir),
        extra=str(extra),
        timeout=3,
        cell_timeout=60,
        checks=str(checks_dir / "tinychecks.py"),
        trusted=TRUSTED,
    )
    t0 = time.perf_counter()
    try:
        table = grade.grade(sub, tmp / "out", jobs=2, cfg=cfg, canary=True)
    finally:
        sys.path.remove(str(checks_dir))
    return {"table": table, "out": tmp / "out", "seconds": time.perf_counter() - t0}


def _rows(graded) -> dict:
    with open(graded["out"] / "grades.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def _results(graded, who: str) -> dict:
    lines = (graded["out"] / "results.jsonl").read_text().splitlines()
    return {r["exercise"]: r for r in map(json.loads, lines) if r["student"] == who and "max_points" in r}


def _points(row) -> list[str]:
    return [row["99.1"], row["99.2"], row["99.3"], row["99.4"]]


def test_honest_and_wrong_students(graded):
    rows = _rows(graded)
    assert _points(rows["honest"]) == ["1", "1", "1", "1"] and rows["honest"]["score"] == "4"
    assert _points(rows["wrong"]) == ["0", "0", "0", "0"] and _points(rows["blank"]) == ["0", "0", "0", "0"]
    res = _results(graded, "honest")
    assert [res[e].get("verdict") for e in ("99.1", "99.2", "99.3", "99.4")] == ["grader", "grader", "grader", None]
    assert res["99.1"]["feedback"] == "PASS  scale by 2"
    assert "expected 6, got 1" in _results(graded, "wrong")["99.2"]["feedback"]


@pytest.mark.parametrize("who", [*FORGERS, "always_equal"])
def test_a_forged_kernel_earns_nothing_the_grader_judges(graded, who):
    row = _rows(graded)[who]
    assert _points(row)[:3] == ["0", "0", "0"], who
    for ex in ("99.1", "99.2", "99.3"):  # the grader's own run failed (not only a static rule)
        assert "failed" in _results(graded, who)[ex]["detail"], (who, ex)


def test_the_kernels_verdict_is_flagged_where_it_was_forged(graded):
    rows = _rows(graded)
    forgers = ("showtraceback", "custom_exc", "transformer", "patched_check", "patched_engine", "shell_by_name")
    # the error display replaced: the kernel's reply still says "error", so the check's own failure is the verdict
    undone = ("showtraceback", "custom_exc")
    for who in forgers:
        assert rows[who]["review"], who  # 99.4's point came from the kernel: an instructor reads it
        res = _results(graded, who)["99.4"]
        assert rows[who]["99.4"] == "0", who
        if who in undone:
            assert res["status"] == "fail" and "expected 16, got 2" in res["feedback"], (who, res)
        else:
            assert res["status"] == "held", who
            assert "held at 0 until your instructor has read the code of 99.1" in res["feedback"]
    assert not rows["honest"]["review"] and rows["honest"]["99.4"] == "1"


def test_only_code_that_changes_how_checks_run_holds_points():
    assert forging(suspicious("class Net:\n    def __init__(self):\n        setattr(self, 'w', 1)")) == []
    assert forging(suspicious("import os\nx = os.environ.get('HOME')")) == []
    assert forging(suspicious("setattr(lab, 'check_relu', print)"))
    assert forging(suspicious("import torch as t\nsetattr(t, 'allclose', lambda *a: True)"))


def test_the_checks_own_reference_scores_nothing(graded):
    res = _results(graded, "reference")["99.1"]
    assert res["points"] == 0 and "lab._twice" in res["feedback"] and res["flags"]


def test_extra_cases_run_in_the_grader(graded):
    row, res = _rows(graded)["extra_dodger"], _results(graded, "extra_dodger")["99.1"]
    assert row["99.1"] == "0" and "SECRET" in res["detail"]  # its always-equal answer came back a plain str
    assert "additional test of your instructor failed" in res["feedback"] and "SECRET" not in res["feedback"]
    assert _rows(graded)["honest"]["99.1"] == "1"


def test_a_prediction_is_judged_on_the_first_recorded_answer(graded):
    rows = _rows(graded)
    assert rows["first_wrong"]["99.3"] == "0" and rows["first_right"]["99.3"] == "1"
    assert "first answer your notebook recorded: 'slice'" in _results(graded, "first_wrong")["99.3"]["note"]
    assert not _results(graded, "first_wrong")["99.3"]["flags"]  # changing a wrong answer is how one learns
    assert "was the notebook's stored output edited?" in _results(graded, "first_right")["99.3"]["flags"][0]
    assert rows["respelled"]["99.3"] == "1" and not _results(graded, "respelled")["99.3"]["flags"]


def test_partial_credit_counts_the_cases_passed(graded):
    row, res = _rows(graded)["partly"], _results(graded, "partly")["99.2"]
    assert row["99.2"] == "0.75" and res["status"] == "partial"
    assert row["99.1"] == "1"  # not in PARTIAL: all or nothing


def test_a_function_that_hangs_for_the_grader_costs_its_exercise_only(graded):
    row, res = _rows(graded)["hangs_for_grader"], _results(graded, "hangs_for_grader")["99.1"]
    assert res["status"] == "timeout" and row["99.1"] == "0"
    assert _points(row)[1:] == ["1", "1", "1"]


# --------------------------------------------------------------------------- no kernel


def test_check_calls_are_parsed_from_the_cell():
    call = judge.check_call("capstone = lab.check_capstone(train_capstone)")
    assert (call.check, call.args) == ("check_capstone", ["train_capstone"])
    assert judge.check_call("lab.check_scale(double, 2)").args == ["double", judge.Const(2)]
    for cell in ("lab.check_x(f(1))", "x = 1\nlab.check_x(a)", "lab.hint('01.1')", "lab.check_x(*a)", "lab.check_x("):
        assert judge.check_call(cell) is None, cell


def test_values_are_rebuilt_from_plain_types():
    class Yes(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    got = judge.plain({"a": [Yes("x"), (True, 2, 2.5)], "b": {"__lab_opaque__": "a Net object"}})
    assert type(got["a"][0]) is str and got["a"][0] != "y"
    assert isinstance(got["b"], judge.Opaque) and "cannot copy" in repr(got["b"])
    assert judge.decode("L" + repr({"nonce": "1", "x": [1, "a"]})) == {"nonce": "1", "x": [1, "a"]}
    for bad in ("L__import__('os').system('true')", "Tgarbage", "X1", "L" + "[" * 100_000):
        with pytest.raises(judge.NoReply):
            judge.decode(bad)


def test_a_pickled_class_is_refused():
    import base64
    import io
    import pickle

    import torch

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    buffer = io.BytesIO()
    torch.save({"nonce": "1", "x": torch.ones(2)}, buffer)
    good = judge.decode("T" + base64.b64encode(buffer.getvalue()).decode())
    assert type(good["x"]) is torch.Tensor
    with pytest.raises(judge.NoReply):
        judge.decode("T" + base64.b64encode(pickle.dumps(Evil(), protocol=2)).decode())
    assert isinstance(judge.plain(torch.zeros(1).expand(10**9)), judge.Opaque)  # no 4 GB copy of one number


def test_a_reply_that_would_inflate_in_the_grader_is_refused(monkeypatch):
    """A kernel's reply is at most MAX_REPLY characters, and so is what the grader makes of it: no
    compressed entry in torch.save's zip (a zip bomb), no list of stride-0 views copied whole."""
    import base64
    import io
    import zipfile

    import torch

    buffer = io.BytesIO()
    torch.save({"nonce": "1", "x": torch.zeros(2**16)}, buffer)
    stored = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info in stored.infolist():
            zf.writestr(info.filename, stored.read(info.filename))
    assert len(deflated.getvalue()) < len(buffer.getvalue()) // 10
    assert judge.decode("T" + base64.b64encode(buffer.getvalue()).decode())["x"].shape == (2**16,)
    with pytest.raises(judge.NoReply):
        judge.decode("T" + base64.b64encode(deflated.getvalue()).decode())
    # at MAX_ELEMENTS, a complex view of one number is 16 bytes sent and 1 GB copied: 50 of them would take
    # the grader's worker down, and with it every student after it (a smaller limit here, for the test's speed)
    monkeypatch.setattr(judge, "MAX_ELEMENTS", 1000)
    one = torch.zeros(1, dtype=torch.complex128).expand(600)
    got = judge.plain([one] * 50)
    assert type(got[0]) is torch.Tensor and all(isinstance(x, judge.Opaque) for x in got[1:])
    with pytest.raises(judge.NoReply):
        judge.decode("L" + repr([0] * judge.MAX_LITERAL))  # ast.literal_eval's tree: ~100 bytes a character


@pytest.mark.parametrize(
    "text, answer",
    [
        ("PASS  p: 'slice' is right (recorded answer: 'slice'). A view.", "slice"),
        ("NOT RIGHT  p: what happens is 3 (recorded answer: (1, 10, 100)).\n", (1, 10, 100)),
        ("NOT RIGHT  p (recorded answer: 'a, b)', your first; ...", "a, b)"),
        ("NOT RIGHT  p (recorded answer: 0.5).", 0.5),
    ],
)
def test_the_recorded_answer_is_read_from_the_stored_output(text, answer):
    assert judge.recorded_answer([new_output("stream", name="stdout", text=text)]) == (True, answer)
    assert judge.recorded_answer([new_output("stream", name="stdout", text="PASS  ok")]) == (False, None)


def test_code_that_may_run_the_lab_s_own_code():
    assert uses_lab_code("def f(a, b):\n    return ((a[:, None] - b) ** 2).sum(-1)") == []
    assert uses_lab_code("g = lab.make_generator(0)", {"make_generator"}) == []
    for attack in (
        "from labsupport.checks.nb01_tensors import _pairwise_reference as f",
        "f = lab.checks.nb01_tensors._pairwise_reference",
        "m = lab\nf = m.checks",
        "f = getattr(lab, 'chec' + 'ks')",
        "import sys\nf = sys.modules['labsupport']",
        "import gc\nf = [o for o in gc.get_objects()]",
        "f = lab.check_pairwise_sq_dists.__wrapped__",
        "import builtins\nf = builtins.__import__('labsupport').checks",
        "f = __builtins__.__import__('labsupport')",
        "f = __builtins__['__import__']('labsupport')",
    ):
        assert uses_lab_code(attack), attack


# --------------------------------------------------------------------------- the real checks

#: judge.TRUSTED as measured: every check here gave full points to the solved notebooks through the
#: grader's own run (make grade's canary does it again on every run), and no other check is listed.
PINNED = {
    **dict.fromkeys(["check_titan_tensor_peak", "check_cpu_peak_flops", "check_roofline"], "both"),
    **dict.fromkeys(["check_pairwise_sq_dists", "check_correct_class_scores", "check_keep_above_row_mean"], "both"),
    **dict.fromkeys(["check_channels_first_rows", "check_per_sample_matmul", "check_predicted_gradients"], "both"),
    **dict.fromkeys(["check_linear_layer", "check_relu_layer", "check_loss_and_grads"], "both"),
    **dict.fromkeys(
        [
            "check_matmul_size_prediction",
            "check_storage_prediction",
            "check_lr_prediction",
            "check_backward_twice_prediction",
            "check_vjp_prediction",
            "check_second_derivative_prediction",
            "check_sigmoid_prediction",
            "check_layer_list_prediction",
            "check_sweep_prediction",
            "check_workers_prediction",
            "check_vgg_share_prediction",
            "check_fullgraph_prediction",
            "check_to_prediction",
            "check_speedup_prediction",
        ],
        "value",
    ),
}


def test_the_checks_the_grader_judges_are_pinned():
    assert judge.TRUSTED == PINNED
    used = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for ex in grade.load_source(path).exercises:
            if ex.call is not None:
                used[ex.call.check] = ex.id
    assert set(PINNED) <= set(used), f"listed but in no check cell: {set(PINNED) - set(used)}"
    for check, mode in PINNED.items():  # a prediction's first argument is the recorded answer
        assert (mode == "value") == check.endswith("_prediction"), check


@pytest.mark.skipif(
    not os.environ.get("LAB_GRADE_ALL"), reason="every notebook: about 5 minutes on 2 cores (LAB_GRADE_ALL=1)"
)
def test_every_check_the_grader_judges_gives_full_marks_to_its_solved_notebook(tmp_path):
    """What make grade's canary checks on every run, for the whole series at once."""
    (tmp_path / "notebooks").mkdir()
    sub = tmp_path / "handed_in" / "solved"
    sub.mkdir(parents=True)
    for path in (ROOT / "notebooks").iterdir():
        if path.is_file():
            (tmp_path / "notebooks" / path.name).write_bytes(path.read_bytes())
            if path.suffix == ".ipynb":
                (sub / path.name).write_bytes(path.read_bytes())
    cfg = grade.Config(src=str(tmp_path / "notebooks"), timeout=120, cell_timeout=900, fork=True)
    grade.grade(tmp_path / "handed_in", tmp_path / "out", jobs=2, cfg=cfg)
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    results = [r for r in map(json.loads, lines) if "max_points" in r]
    judged = {r["exercise"] for r in results if r.get("verdict") == "grader"}
    expected = {
        ex.id
        for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        for ex in grade.load_source(path).exercises
        if ex.call is not None and ex.call.check in PINNED
    }
    assert judged == expected
    assert [r for r in results if r["points"] != r["max_points"]] == []


class _Shell:
    """What the kernel side asks of IPython: the student's namespace."""

    def __init__(self, user_ns: dict) -> None:
        self.user_ns = user_ns


@pytest.mark.parametrize("with_torch", [True, False], ids=["torch.save", "a literal"])
def test_numpy_scalars_and_str_subclasses_come_back_as_their_plain_values(with_torch, monkeypatch):
    # the kernel side, run here on a namespace of ours: numpy's float64 is a float subclass (np.mean
    # returns one), which torch.load(weights_only=True) refuses and repr() writes as np.float64(...)
    import IPython.display
    import numpy as np

    class Yes(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    ns = {
        "mean": np.float64(0.25),
        "count": np.int64(3),
        "flag": np.bool_(True),
        "word": Yes("slice"),
        "pair": (np.float64(1.5), [np.float32(2.0)]),
        "nan": np.float64("nan"),
    }
    sent = []
    monkeypatch.setattr(IPython.display, "publish_display_data", lambda data: sent.append(data[judge.MIME]))
    if not with_torch:
        monkeypatch.delitem(sys.modules, "torch")  # as in a kernel that never imported torch
    side = {"get_ipython": lambda: _Shell(ns)}
    exec(judge._KERNEL_SIDE, side)
    side["_lab_grade_request"]("n1", "fetch", list(ns))
    monkeypatch.undo()
    objects = judge.plain(judge.decode(sent[0]))["objects"]
    got = {name: value["value"] for name, value in objects.items()}
    assert got["mean"] == 0.25 and type(got["mean"]) is float
    assert got["count"] == 3 and type(got["count"]) is int
    assert got["flag"] is True
    assert got["word"] == "slice" and type(got["word"]) is str and got["word"] != "other"
    assert got["pair"] == (1.5, [2.0]) and type(got["pair"][0]) is float
    assert math.isnan(got["nan"])

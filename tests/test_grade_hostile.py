"""A hostile audit of the grader: code that kept a kernel-judged point it did not earn, unheld.

Before the fixes in tools/flags.py, none of the code in BYPASSES held anything: most of it raised
no flag at all, and code IPython runs but Python cannot parse was flagged without holding. The
six in FORGED_4 were measured on the tiny torch-free notebook of tests/test_grade_judge.py: with a
wrong answer, the kernel printed the PASS line of the exercise it judges (99.4) and the point
counted. The torch ones (type(t).__sub__, torch.library) were measured on labsupport's compare():
a wrong tensor passed. Now each one holds the notebook's kernel-judged points for review, and
the code an honest solution writes near them holds nothing.
"""

import csv
import io
import json
import logging
import os
import sys
import threading

import nbformat
import numpy as np
import pytest
from test_grade_judge import RIGHT, TINY_CHECKS, TRUSTED, WRONG, _answer, tiny_source

from tools import grade, judge, student
from tools.flags import MAX_ANALYSED, forging, suspicious, uses_lab_code

FAKE_PASS = "lambda f: print('PASS  fourth power')"

# Unflagged before: each reached a check (or how checks run) by a route the analysis did not follow.
BYPASSES = {
    # the name every check cell calls, bound to something else
    "lab rebound to an object": f"class Fake:\n    check_power = staticmethod({FAKE_PASS})\nlab = Fake()",
    "lab rebound by import": "import json as lab",
    "lab rebound by def": "def lab():\n    pass",
    "lab rebound by a loop": "for lab in [None]:\n    pass",
    "lab rebound by except": "try:\n    1 / 0\nexcept ZeroDivisionError as lab:\n    pass",
    "lab rebound inside a function": "def f():\n    global lab\n    lab = None\nf()",
    # the lab's (or an imported) module under a name the analysis did not follow
    "alias through a list": f"m = [lab][0]\nm.check_power = {FAKE_PASS}",
    "alias through a walrus": f"(m := lab).check_power = {FAKE_PASS}",
    "alias through a parameter": f"def patch(m):\n    m.check_power = {FAKE_PASS}\npatch(lab)",
    "alias through a loop": f"for m in (lab,):\n    m.check_power = {FAKE_PASS}",
    "alias through a conditional": f"m = lab if True else None\nm.check_power = {FAKE_PASS}",
    "alias through a context manager": "import contextlib\nwith contextlib.nullcontext(lab) as m:\n    m.check_power = print",
    "alias through copy": "import copy\nc = copy.copy(torch)\nc.allclose = print",
    "sys through a list": "import sys\ns = [sys][0]\ns.stdout = None",
    "a submodule alias": "import numpy\nt = numpy.testing\nt.assert_allclose = print",
    # a module the analysis cannot name (numpy.testing re-exports numpy as np), patched where it is a parameter
    "a function put into a parameter's attribute": "def patch(m):\n    m.allclose = lambda *a, **k: True\npatch(np.testing.np)",
    "setattr of a function on a parameter": "def patch(m):\n    setattr(m, 'allclose', lambda *a, **k: True)",
    # code IPython runs that the analysis blanked with the magic's line
    "%time runs its statement": f"%time lab.check_power = {FAKE_PASS}",
    "%timeit runs its statement": "%timeit -n1 -r1 lab.check_power = print",
    "a shell line's {expression}": "!true {lab.__setattr__('check_power', print)}",
    "a line magic's {expression}": "%ls {lab.__setattr__('check_power', print)}",
    "%run -i": "%run -i helper.py",
    "%load_ext": "%load_ext helper",
    "%config": "%config InteractiveShell.ast_node_interactivity = 'none'",
    "%reset": "%reset -f",
    # IPython runs what Python cannot parse; the analysis flagged it but held nothing
    "a shell assignment": f"files = !true\nlab.check_power = {FAKE_PASS}",
    "a help line": f"lab.check_power?\nlab.check_power = {FAKE_PASS}",
    # IPython's shell without get_ipython: IPython.display imports IPython
    "the shell through IPython.display's import": (
        "import IPython.display\nsh = IPython.InteractiveShell.instance()\nsh.user_global_ns['lab'].check_power = print"
    ),
    # torch's own operators replaced without an assignment to torch
    "torch.library": "lib = torch.library.Library('aten', 'IMPL')\nlib.impl('sub.Tensor', lambda a, b, alpha=1: a, 'CPU')",
    "from torch.library": "from torch.library import Library",
    "a torch function mode": "from torch.overrides import TorchFunctionMode\nTorchFunctionMode().__enter__()",
    "a dispatch mode": "from torch.utils._python_dispatch import TorchDispatchMode",
    "torch's private C module": "torch._C._set_grad_enabled(False)",
    "a global module hook": "nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 0)",
    "a global module hook (torch.nn)": "torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 0)",
    "global autograd hooks": "torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 0).__enter__()",
    # torch.Tensor's methods replaced through type(): compare()'s (g - e).abs() is then always 0
    "type(tensor).__sub__": "type(torch.zeros(1)).__sub__ = lambda a, b: torch.zeros_like(a)",
    "type(tensor) by name": "T = type(torch.zeros(1))\nT.abs = lambda self: self * 0",
    "a class reached through a list": "T = [torch.Tensor][0]\nT.abs = lambda self: self * 0",
    "any special method assigned": "class A:\n    pass\nA.__repr__ = lambda s: 'x'",
    # numpy's protocols: np.allclose(answer, expected) asks the answer
    "__array_function__": "class A:\n    def __array_function__(self, func, types, args, kwargs):\n        return True",
    "__array_ufunc__": "class A:\n    def __array_ufunc__(self, *args, **kwargs):\n        return True",
    "os.register_at_fork": "import os\nos.register_at_fork(after_in_child=lambda: print('PASS  ok'))",
}

# A third audit: code the analysis never read as code (strings some allowed API evaluates, pickles,
# a module the cell wrote), and attributes reached by names it never saw. Unflagged before.
PASS_FN = "functools.partial(print, 'PASS  fourth power')"  # no lambda, no def: no function "put into" lab
HIDDEN = "import sys; sys.modules['tinychecks'].check_power = lambda f: print('PASS  fourth power')"
UNSEEN = {
    "a string annotation typing evaluates": f"import typing\ndef f(x: {f'exec({HIDDEN!r})'!r}):\n    pass\ntyping.get_type_hints(f)",
    "typing's evaluator by a from-import": "from typing import get_type_hints",
    "singledispatch's register": "import functools\n@functools.singledispatch\ndef f(x):\n    pass",
    "logging.config resolves a module by name": f"import functools, logging.config\nm = logging.config.BaseConfigurator({{}}).resolve('labsupport')\nm.check_power = {PASS_FN}",
    "logging.config's fileConfig evaluates its args": "import io, logging.config\nlogging.config.fileConfig(io.StringIO(''))",
    "logging.config reached through logging": "import logging\nlogging.config.dictConfig({'version': 1})",
    "a format string's field": f"import functools, string\ndef f():\n    pass\nm = string.Formatter().get_field('0.__globals__[lab]', [f], {{}})[0]\nm.check_power = {PASS_FN}",
    "Formatter by a from-import": "from string import Formatter",
    "getattr passed on as a value": f"import functools\ndef f():\n    pass\nm = functools.reduce(getattr, ['__glob' + 'als__'], f)['lab']\nm.check_power = {PASS_FN}",
    "numpy unpickles": "import io\nnp.load(io.BytesIO(b''), allow_pickle=True)",
    "numpy unpickles (positional)": "np.load('a.npy', None, True)",
    "torch unpickles": "torch.load('a.pt', weights_only=False)",
    "torch's weights_only turned off by the environment": "import os\nos.environ['TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'] = '1'",
    "torch.hub runs a hubconf.py": "torch.hub.load('.', 'model', source='local')",
    "C++ compiled in the cell": "from torch.utils.cpp_extension import load_inline",
    "numpy's ctypes": "import numpy.ctypeslib",
    "a module the cell wrote, put on sys.path": f"import sys\nsys.path.insert(0, '.')\nopen('statistics.py', 'w').write({HIDDEN!r})\nimport statistics",
    "sys.path by a from-import": "from sys import path\npath.append('.')",
    "an import hook": "import sys\nsys.meta_path.insert(0, object())",
    "a shell line's {expression!r}": f"import functools\n!true {{lab.__setattr__('check_power', {PASS_FN})!r}}",
    "a magic's {expression!s}": "%ls {lab.__setattr__('check_power', print)!s}",
    # setattr by another name: functools copies the attributes it is told to, from one object to another
    "update_wrapper's assigned": "import functools\ndef fake(fn):\n    print('PASS  fourth power')\n"
    "functools.update_wrapper(lab.check_power, fake, assigned=['__co' + 'de__'], updated=[])",
    "wraps's assigned (positional)": "import functools\ndef fake(fn):\n    pass\nfunctools.wraps(fake, ['abs'], [])(torch.Tensor)",
    # the kernel replaced by a program started with code in its arguments; a graph that calls names it computes
    "os.execv": "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'print(1)'])",
    "a torch.fx node on a computed name": (
        "g = torch.fx.Graph()\nx = g.placeholder('x')\ng.call_method('__set' + 'attr__', (x, 'check_power', print))"
    ),
    # a module (or torch's class) under an attribute, changed through it
    "a class attribute bound to lab": f"import functools\nclass T:\n    x = lab\nT.x.check_power = {PASS_FN}",
    "an instance attribute bound to torch's class": "class T:\n    def __init__(self):\n        self.t = torch.Tensor\n"
    "o = T()\no.t.abs = lambda self: self * 0",
}

# What honest solutions write that is close to the attacks: it holds nothing.
HONEST_NEAR = {
    "%time and a shell line": "%time y = relu(x)\n!ls\n!pip install tqdm\nz = 1",
    "%timeit with options": "%timeit -n 3 -r 2 relu(torch.ones(3))",
    "%matplotlib": "%matplotlib inline\nimport matplotlib.pyplot as plt",
    "a dict in a timed line": "%time d = {'a': 1}",
    "attributes of one's own objects": "x = torch.ones(2, requires_grad=True)\nx.grad = None\nnet = nn.Linear(2, 2)\nnet.weight.data = torch.zeros(2, 2)",
    "a hook on one's own module": "net = nn.Linear(2, 2)\nnet.register_forward_hook(lambda m, i, o: None)",
    "isinstance with a module's class": "ok = isinstance(torch.ones(1), torch.Tensor) and np.pi > 3",
    "a module's function passed on": "import math\nvalues = list(map(math.sqrt, [1, 4]))\nacts = [torch.relu, F.gelu]",
    "an alias of a module": "import numpy as np\nrng = np.random\nx = rng.default_rng(0).normal(size=3)",
    "an alias of the environment": "import os\nenv = os.environ\nenv['MASTER_PORT'] = '29500'",
    "a class of one's own with a type() call": "class Net(nn.Module):\n    pass\nname = type(Net()).__name__",
    "an operator of one's own (notebook 04)": (
        "@torch.library.custom_op('lab::twice', mutates_args=())\ndef twice(x: torch.Tensor) -> torch.Tensor:\n"
        "    return 2 * x\ntorch.library.opcheck(twice, (torch.ones(2),))"
    ),
    "Dynamo reset (notebook 09)": "torch._dynamo.reset()\ncompiled = torch.compile(lambda x: x + 1)",
    "catching the lab's error": "try:\n    lab.check_power(print)\nexcept lab.CheckError as err:\n    print(err)",
    "a logger": "import logging\nlog = logging.getLogger(__name__)\nlog.info('epoch %d', 1)",
    "a path resolved": "from pathlib import Path\nroot = Path('.').resolve()",
    "string annotations": "def f(x: 'torch.Tensor') -> 'torch.Tensor':\n    return x\ny: 'int' = 1",
    "loads without pickles": "w = torch.load('a.pt', weights_only=True, map_location='cpu')\na = np.load('a.npy')",
    "format strings": "s = '{x:.2f} {0!r}'.format(1, x=2.0)\nt = f'{s!r:>10}'",
    "a shell line with a conversion": "x = 1\n!echo {x!r} {x:>4}",
    "reduce with an operator": "import functools, operator\nv = functools.reduce(operator.add, [1, 2])",
    "os.path and sys.version": "import os, sys\np = os.path.join('a', 'b')\nprint(sys.version)",
    "a torch.fx graph of one's own (notebook 09)": (
        "gm = torch.fx.symbolic_trace(nn.Linear(2, 2))\nops = [n.op for n in gm.graph.nodes if n.op == 'call_method']\n"
        "g = torch.fx.Graph()\nx = g.placeholder('x')\ng.output(g.call_method('relu', (x,)))"
    ),
    "a decorator with functools.wraps": "import functools\ndef logged(fn):\n    @functools.wraps(fn)\n"
    "    def inner(*a):\n        return fn(*a)\n    return inner",
    "a module's functions and layers as attributes": (
        "class Net(nn.Module):\n    act = nn.ReLU\n    def __init__(self):\n        super().__init__()\n"
        "        self.fn = F.relu\n        self.fc = nn.Linear(2, 2)\n        self.fc.weight.data = torch.zeros(2, 2)\n"
        "net = Net()\nnet.fc.bias.data = torch.zeros(2)"
    ),
}


@pytest.mark.parametrize("name", BYPASSES)
def test_each_bypass_holds_the_kernel_judged_points(name):
    assert forging(suspicious(BYPASSES[name])), name


@pytest.mark.parametrize("name", UNSEEN)
def test_code_the_analysis_never_read_holds_the_kernel_judged_points(name):
    assert forging(suspicious(UNSEEN[name])), name


@pytest.mark.parametrize(
    "name", ["logging.config resolves a module by name", "getattr passed on as a value", "a format string's field"]
)
def test_reaching_the_lab_by_an_unseen_name_costs_a_grader_judged_point(name):
    assert uses_lab_code(UNSEEN[name]), name  # the check's own reference would pass its check


def test_a_check_message_cannot_close_the_feedback_fence():
    forged = "x\n```\n## Exercise 99.4: fourth power\n\n**✓ passed** (1 / 1)\n````"
    result = {"exercise": "99.4", "label": "Exercise 4: fourth power", "status": "fail", "points": 0.0}
    graded = {"notebook": "99_judged", "student": "ana", "results": [{**result, "max_points": 1.0, "note": ""}]}
    graded["results"][0]["feedback"] = forged
    text = grade.feedback_markdown(graded, {})
    assert text.count("## Exercise 99.4") == 2  # the real heading and the forged one...
    opening = text.splitlines()[text.splitlines().index(forged.splitlines()[0]) - 1]
    assert opening == "`````text"  # ...inside a fence longer than any run of backticks in the message
    assert "\n`````\n" in text


def test_a_file_name_cannot_rewrite_the_log_on_a_terminal_or_break_its_line():
    """A student's own zip names its files: an escape sequence (cursor up, erase line) or a Unicode line
    separator in a name reached the log as it was; only \\r and \\n were escaped."""
    name = "ana/hw\x1b[1A\x1b[2K\u2028ben: 4 / 4\x85.ipynb"
    record = logging.LogRecord("grade", logging.INFO, __file__, 1, "%s: not a notebook", (name,), None)
    line = grade._OneLine("%(message)s").format(record)
    assert line.isprintable() and len(line.splitlines()) == 1, line
    assert line == "ana/hw\\x1b[1A\\x1b[2K\\u2028ben: 4 / 4\\x85.ipynb: not a notebook"


def test_a_cell_too_long_to_analyse_is_held_without_parsing_it():
    """10 MB of code took the analysis 45 s and 4 GB of the grader's memory; a notebook may hold 256 MB."""
    code = "x = [1, 2, 3]\n" * (MAX_ANALYSED // 10)
    assert forging(suspicious(code)) == [
        f"the code cannot be analysed (longer than {MAX_ANALYSED:,} characters): review it by hand"
    ]
    assert uses_lab_code(code)  # on an exercise the grader judges, it scores 0 until read


@pytest.mark.parametrize("name", HONEST_NEAR)
def test_honest_code_near_the_attacks_holds_nothing(name):
    assert forging(suspicious(HONEST_NEAR[name])) == [], (name, suspicious(HONEST_NEAR[name]))


# --------------------------------------------------------------------------- graded in sandboxed kernels

WRONG4 = "def power4(x):\n    return x\n"  # 99.4, judged in its kernel: wrong on every case
# Every answer wrong; the exercise cell of 99.4 then tries to make its kernel print PASS anyway.
FORGED_4 = {
    "rebinds_lab": WRONG4 + f"class Fake:\n    check_power = staticmethod({FAKE_PASS})\nlab = Fake()",
    "alias_by_list": WRONG4 + f"m = [lab][0]\nm.check_power = {FAKE_PASS}",
    "time_magic": WRONG4 + f"%time lab.check_power = {FAKE_PASS}",
    "shell_braces": WRONG4 + "!true {lab.__setattr__('check_power', " + FAKE_PASS + ")}",
    "ipython_syntax": WRONG4 + f"files = !true\nlab.check_power = {FAKE_PASS}",
    "ipython_display": WRONG4
    + "import IPython.display\nsh = IPython.InteractiveShell.instance()\n"
    + f"sh.user_global_ns['lab'].check_power = {FAKE_PASS}",
}


class _Exec:  # a pickle of it runs HIDDEN when numpy loads it
    def __reduce__(self):
        return (exec, (HIDDEN,))


def _npy_pickle() -> str:
    buffer = io.BytesIO()
    np.save(buffer, np.array([_Exec()], dtype=object), allow_pickle=True)
    return buffer.getvalue().hex()


# Measured before the third audit's fixes: each printed PASS for a wrong power4 and kept its point, unflagged.
FORGED_4.update(
    {
        "type_hints": WRONG4 + UNSEEN["a string annotation typing evaluates"],
        "config_resolve": WRONG4
        + UNSEEN["logging.config resolves a module by name"].replace("labsupport", "tinychecks"),
        "format_field": WRONG4 + UNSEEN["a format string's field"],
        "shell_conversion": WRONG4 + UNSEEN["a shell line's {expression!r}"],
        "npy_pickle": WRONG4
        + f"import io\nimport numpy as np\nnp.load(io.BytesIO(bytes.fromhex('{_npy_pickle()}')), allow_pickle=True)",
        "own_module": WRONG4 + UNSEEN["a module the cell wrote, put on sys.path"],
        "wrapper_code": WRONG4 + UNSEEN["update_wrapper's assigned"],
        "class_attribute": WRONG4 + UNSEEN["a class attribute bound to lab"],
    }
)

# A fourth audit. Measured before its fixes: "swallowed" kept its point (a PASS line printed, then an exception
# whose message no kernel message can carry: the error output never came, the kernel's reply said "error");
# "sees_processes" was right (the kernel read the command line of every process of the machine: the grader's,
# other kernels'); "huge_error" copied 10 MB into each of its feedback files, results.jsonl and the executed
# notebook; "terminal" wrote a screen-clearing escape into the feedback; "surrogate" stopped the whole run
# (UnicodeEncodeError writing the executed notebook: no gradebook for anyone).
SWALLOWED = WRONG4.replace("return x", "print('PA' + 'SS  fourth power')\n    raise ValueError(chr(0xD800))")
SEES_PROCESSES = """\
import os
def power4(x):
    others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]
    return x**4 if others else x
"""
HUGE_ERROR = WRONG4.replace("return x", "raise ValueError('x' * 3_000_000)")
TERMINAL = WRONG4.replace("return x", "raise ValueError('\\x1b[2J\\x1b[1;1H\\u202e' + 'nuf')")
ODD_FOLDER = os.fsdecode(b"bad\xff\x1b[31m")  # not UTF-8, and an escape sequence

# Reads and writes the sandbox refuses (already refused before this audit): 99.4 is right only if one worked.
PEEK = """\
def power4(x):
    found = []
    for path in PATHS:
        try:
            found.append(len(open(path).read()))
        except OSError:
            pass
    try:
        open(WRITE, "w").write("x")
        found.append(1)
    except OSError:
        pass
    return x**4 if found else x
"""


def _two_records(ed) -> nbformat.NotebookNode:
    """Right now, wrong at first ('slice', as its check cell's output shows): a copy of the check cell, with the
    check's metadata, put above it with a stored output forged to record 'error' first."""
    nb = _answer(ed, RIGHT)
    check = next(i for i, c in enumerate(nb.cells) if c.source == "lab.check_prediction(prediction)")
    said = "NOT RIGHT  what happens is 'error' (recorded answer: {!r})\n"
    nb.cells[check].outputs = [nbformat.v4.new_output("stream", name="stdout", text=said.format("slice"))]
    forged = nbformat.from_dict(json.loads(json.dumps(nb.cells[check])))
    forged.id, forged.outputs[0].text = "forged-record", said.format("error").replace("NOT RIGHT", "PASS")
    nb.cells.insert(check - 2, forged)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    src_dir, checks_dir, sub = tmp / "notebooks", tmp / "checks", tmp / "handed_in"
    src_dir.mkdir()
    checks_dir.mkdir()
    (checks_dir / "tinychecks.py").write_text(TINY_CHECKS)
    sys.path.append(str(checks_dir))  # a folder on the grader's path: the sandbox lets kernels read it
    nbformat.write(tiny_source(checks_dir), src_dir / "99_judged.ipynb")
    ed = student.make_edition(tiny_source(checks_dir), "99_judged.ipynb").notebook
    students = {who: _answer(ed, {**WRONG, "### Exercise 4": code}) for who, code in FORGED_4.items()}
    paths = [str(sub / "rebinds_lab" / "hw.ipynb"), str(src_dir / "99_judged.ipynb")]
    peek = PEEK.replace("PATHS", repr(paths)).replace("WRITE", repr(str(sub / "peeked.txt")))
    students["peeks"] = _answer(ed, {**WRONG, "### Exercise 4": peek})
    fourth = {"swallowed": SWALLOWED, "sees_processes": SEES_PROCESSES, "huge_error": HUGE_ERROR, "terminal": TERMINAL}
    students.update({who: _answer(ed, {**WRONG, "### Exercise 4": code}) for who, code in fourth.items()})
    # right answers; the first one's cell holds a lone surrogate (a JSON escape no UTF-8 text can store)
    students["surrogate"] = _answer(ed, {**RIGHT, "### Exercise 1": "def double(x):\n    return 2 * x  # \ud800"})
    students[ODD_FOLDER] = _answer(ed, RIGHT)
    students["two_records"] = _two_records(ed)
    for who, nb in students.items():
        (sub / who).mkdir(parents=True)
        (sub / who / "hw.ipynb").write_text(json.dumps(nb))  # ASCII: the surrogate stays an escape
    cfg = grade.Config(src=str(src_dir), timeout=5, cell_timeout=60, checks=str(checks_dir / "tinychecks.py"))
    cfg.trusted = TRUSTED
    try:
        grade.grade(sub, tmp / "out", jobs=2, cfg=cfg, canary=False)
    finally:
        sys.path.remove(str(checks_dir))
    with open(tmp / "out" / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    lines = (tmp / "out" / "results.jsonl").read_text().splitlines()
    results = [r for r in map(json.loads, lines) if r.get("exercise") == "99.4" and "max_points" in r]
    return {"rows": rows, "results": {r["student"]: r for r in results}, "sub": sub, "out": tmp / "out"}


@pytest.mark.parametrize("who", FORGED_4)
def test_a_forged_kernel_verdict_is_held_for_review(graded, who):
    row, res = graded["rows"][who], graded["results"][who]
    assert res["feedback"].startswith("PASS"), res["feedback"]  # the kernel was forged...
    assert row["99.4"] == "0" and res["status"] == "held", (who, res)  # ...and its point is held
    assert row["review"], who


def test_the_sandbox_refuses_other_students_the_sources_and_the_submissions(graded):
    assert graded["rows"]["peeks"]["99.4"] == "0", graded["results"]["peeks"]
    assert not (graded["sub"] / "peeked.txt").exists()


def test_a_pass_line_before_an_error_the_kernel_cannot_send_is_a_failure(graded):
    row, res = graded["rows"]["swallowed"], graded["results"]["swallowed"]
    assert row["99.4"] == "0" and res["status"] == "fail", res
    assert "the cell showed no error" in res["feedback"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="a /proc of its own needs root")
def test_a_kernel_sees_no_process_outside_its_sandbox(graded):
    assert graded["rows"]["sees_processes"]["99.4"] == "0", graded["results"]["sees_processes"]


def test_a_huge_error_message_is_clipped_everywhere_it_lands(graded):
    res = graded["results"]["huge_error"]
    assert res["status"] == "fail" and len(res["feedback"]) < grade.MAX_FEEDBACK + 100
    assert "characters left out" in res["feedback"]
    for path in [
        graded["out"] / "feedback" / "huge_error" / "99_judged.md",
        graded["out"] / "executed" / "huge_error" / "99_judged.ipynb",
    ]:
        assert path.stat().st_size < 200_000, path


def test_an_escape_sequence_or_override_in_a_message_is_written_as_text(graded):
    feedback = graded["results"]["terminal"]["feedback"]
    markdown = (graded["out"] / "feedback" / "terminal" / "99_judged.md").read_text()
    for text in (feedback, markdown):
        assert "\x1b" not in text and "\u202e" not in text
        assert "\\x1b[2J\\x1b[1;1H\\u202enuf" in text


def test_a_lone_surrogate_costs_nothing_and_stops_nothing(graded):
    row = graded["rows"]["surrogate"]
    assert row["status"] == "ok" and row["score"] == "4", row  # the whole run wrote its gradebook, too
    executed = nbformat.read(graded["out"] / "executed" / "surrogate" / "99_judged.ipynb", as_version=4)
    assert any(cell.source.endswith("# \ufffd") for cell in executed.cells)


def test_a_folder_name_no_one_can_read_is_escaped_in_the_gradebook(graded):
    shown = "bad\\udcff\\x1b[31m"
    assert graded["rows"][shown]["score"] == "4"
    assert "\x1b" not in (graded["out"] / "grades.csv").read_text("utf-8")


def test_a_pipe_named_like_a_notebook_is_refused_not_read_forever(tmp_path):
    folder = tmp_path / "ana"
    folder.mkdir()
    os.mkfifo(folder / "hw.ipynb")

    def unblock():  # before the fix the grader blocked on the pipe until a writer came: this one comes at 2 s
        with open(folder / "hw.ipynb", "w") as f:
            f.write("{}")

    timer = threading.Timer(2.0, unblock)
    timer.daemon = True
    timer.start()
    jobs, rows = grade.collect(tmp_path, {}, logging.getLogger("test"))
    timer.cancel()
    assert not jobs and "not a regular file" in rows[0]["status"], rows


def test_a_notebook_of_too_many_cells_is_refused_before_it_is_validated(tmp_path):
    """200,000 empty cells (14 MB) took nbformat 12 s to validate, twice per file: 256 MB of them, an hour."""
    cell = {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ""}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell] * (grade.MAX_PARTS + 1)}
    (tmp_path / "hw.ipynb").write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="more than 20,000 cells and outputs"):
        grade._read_notebook(tmp_path / "hw.ipynb", {})


# --------------------------------------------------------------------------- a fifth audit: metadata, gradebooks

# What a student edits by hand besides code: the exercise metadata of cells, their names, their written answers.
# Measured before its fixes: each one below changed a row or a file that was not only the attacker's, or
# stopped a notebook from being graded.


def _tiny_sources(folder) -> dict:
    (folder / "notebooks").mkdir(parents=True, exist_ok=True)
    nbformat.write(tiny_source(folder), folder / "notebooks" / "99_judged.ipynb")
    return grade.load_sources(folder / "notebooks")


def _graded_job(who: str, points: float, written: str | None = None) -> dict:
    """A (student, notebook) as a worker returns it, without a kernel: 99.1 scored ``points``."""
    result = {"exercise": "99.1", "label": "Exercise 1: double", "points": points, "max_points": 1.0}
    result.update(status="pass" if points else "fail", feedback=f"feedback of {who}", note="", flags=[])
    result["student"], result["notebook"] = who, "99_judged"
    answers = [] if written is None else [{"exercise": "99.5", "label": "Question 5", "answer": written}]
    return {"student": who, "notebook": "99_judged", "file": "hw.ipynb", "match": "", "results": [result]} | {
        "written": answers,
        "executed": "",
        "seconds": 0.0,
        "error": "",
        "mtime": None,
    }


def test_a_student_named_as_another_s_folder_writes_only_into_their_own(tmp_path):
    """``José``'s folder is ``Jos_-24c2ab65``: a student whose id is that name wrote their feedback over José's."""
    victim = "José"
    attacker = grade._safe(victim)
    sources = _tiny_sources(tmp_path)
    grade.write_outputs(tmp_path / "out", [_graded_job(victim, 1), _graded_job(attacker, 0)], [], sources)
    folders = {p.name: (p / "99_judged.md").read_text() for p in (tmp_path / "out" / "feedback").iterdir()}
    assert len(folders) == 2 and "feedback of José" in folders[grade._safe(victim)]
    assert grade._safe(attacker) != grade._safe(victim)
    assert grade._safe("") not in ("", ".") and grade._safe("plain-id") == "plain-id"


@pytest.mark.parametrize("text", ["'=x", "''=x", "=x", "'-1", "-1", "'", "'ok"])
def test_a_csv_cell_reads_back_as_written(text):
    assert grade._csv_uncell(grade._csv_cell(text)) == text


def test_a_quote_before_a_formula_does_not_make_one_student_another(tmp_path):
    """Both ids were written ``'=x`` and read back as ``=x``: one student's row replaced the other's, and a
    regrade of ``=x`` dropped ``'=x``'s row from the gradebook."""
    sources = _tiny_sources(tmp_path)
    out = tmp_path / "out"
    grade.write_outputs(out, [_graded_job("=x", 1), _graded_job("'=x", 0)], [], sources)
    grade.write_outputs(out, [_graded_job("=x", 1)], [], sources)  # =x regraded alone
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = {grade._csv_uncell(r["student"]): r["99.1"] for r in csv.DictReader(f)}
    assert rows == {"=x": "1", "'=x": "0"}


def test_hand_edited_exercise_metadata_moves_nothing(tmp_path):
    """A role list holding a list stopped the notebook's rebuild (TypeError: every exercise 'grader error');
    raised points, a check cell marked as a solution and a markdown cell claiming a code role change nothing."""
    src = _tiny_sources(tmp_path)["99_judged"]
    sub = _answer(src.student, RIGHT)
    cells = sub.cells
    check = next(i for i, c in enumerate(cells) if c.source == "lab.check_power(power4)")
    cells[check - 1].metadata["lab"]["points"] = 100  # 99.4's solution cell
    cells[check].metadata["lab"] = {"exercise": "99.3", "role": "solution", "points": 5}  # its check: 99.3's answer?
    heading = next(c for c in cells if c.source.startswith("### Exercise 2"))
    heading.metadata["lab"] = {"exercise": "99.2", "role": "solution", "points": 9}
    first = next(c for c in cells if c.source.startswith("def double"))
    first.metadata["lab"]["role"] = [["solution"]]  # unhashable: it counts as no metadata
    nb, slots, _ = grade.rebuild(src, sub)
    assert slots["99.2"].code == RIGHT["### Exercise 2"] and slots["99.4"].code == RIGHT["### Exercise 4"]
    assert slots["99.3"].code == "lab.check_power(power4)"  # the student's own "answer", graded as theirs
    assert nb.cells[src.exercises[3].check_cell].source == "lab.check_power(power4)"  # the check is the source's
    assert src.points == {"99.1": 1.0, "99.2": 1.0, "99.3": 1.0, "99.4": 1.0}


def test_an_unreadable_copy_named_as_the_notebook_leaves_the_graded_copy_s_row(tmp_path):
    """A half-saved ``99_judged.ipynb`` beside a good ``99_judged-Copy1.ipynb``: the broken file's row had the
    graded copy's (student, notebook) and, written after it, replaced it in grades.csv with 0."""
    sources = _tiny_sources(tmp_path)
    sub = tmp_path / "in" / "ana"
    sub.mkdir(parents=True)
    (sub / "99_judged.ipynb").write_text("{half saved")
    nbformat.write(_answer(sources["99_judged"].student, RIGHT), sub / "99_judged-Copy1.ipynb")
    jobs, rows = grade.collect(tmp_path / "in", sources, logging.getLogger("test-fifth"))
    assert [(j["student"], j["notebook"]) for j in jobs] == [("ana", "99_judged")]
    assert [(r["notebook"], r["file"]) for r in rows] == [("99_judged.ipynb", "99_judged.ipynb")]
    table = grade.write_outputs(tmp_path / "out", [_graded_job("ana", 1)], rows, sources)
    assert {(r["notebook"], r["score"]) for r in table} == {("99_judged", "1"), ("99_judged.ipynb", "0")}


def test_a_student_s_zip_and_flat_file_make_one_row(tmp_path):
    """Canvas's flat notebook and the same student's zip were two jobs of one (student, notebook): which row and
    feedback won depended on which worker finished last. Now the newest copy is the one job."""
    import zipfile

    sources = _tiny_sources(tmp_path)
    ed = sources["99_judged"].student
    sub = tmp_path / "in"
    sub.mkdir()
    nbformat.write(_answer(ed, RIGHT), sub / "bob_7_5_99_judged.ipynb")
    with zipfile.ZipFile(sub / "bob_7_6_old.zip", "w") as zf:
        info = zipfile.ZipInfo("old/hw.ipynb", date_time=(2020, 1, 1, 0, 0, 0))
        zf.writestr(info, nbformat.writes(ed))
    jobs, rows = grade.collect(sub, sources, logging.getLogger("test-fifth"))
    assert [(j["student"], j["file"]) for j in jobs] == [("bob_7", "99_judged.ipynb")] and not rows
    assert "also handed in and not graded: `bob_7_6_old.zip:old/hw.ipynb`" in jobs[0]["match"]


FORGED_SECTIONS = (
    "my answer\n\n## Exercise 99.4: fourth power\n\n**✓ passed** (1 / 1)\n\n"
    "## From your instructor\n\n**99.5** (10): excellent, full marks\n\nthe rest of my answer"
)


def test_a_written_answer_forges_no_section_of_the_grader_or_the_instructor(tmp_path):
    """A written answer went into the feedback as it was: its headings read as the grader's sections, its
    "## From your instructor" line as the instructor's notes, and applying manual.csv cut the feedback there."""
    sources = _tiny_sources(tmp_path)
    text = grade.feedback_markdown(_graded_job("eve", 0, FORGED_SECTIONS), sources)
    lines = text.splitlines()
    assert "## From your instructor" not in lines and "## Exercise 99.4: fourth power" not in lines
    assert "> the rest of my answer" in lines
    path = tmp_path / "eve.md"
    path.write_text(text)
    grade._instructor_notes(path, ["**99.5** (2): too short"], "eve")
    notes = path.read_text()
    assert notes.startswith(text.rstrip()) and notes.count("\n## From your instructor\n") == 1
    assert notes.rstrip().endswith("**99.5** (2): too short")


def test_a_comma_typed_into_a_sheet_does_not_stop_apply(tmp_path):
    """A line with more cells than the header (a comment with a comma, typed in a text editor) crashed --apply."""
    (tmp_path / "manual.csv").write_text("student,exercise,points,comment\nana,99.5,1,good, but short\n")
    assert grade._read_csv(tmp_path / "manual.csv") == [
        {"student": "ana", "exercise": "99.5", "points": "1", "comment": "good"}
    ]


def test_a_forged_record_beside_the_real_one_is_flagged(graded):
    """Before, the first record the check cells held was graded, unflagged, though the real check cell recorded
    another first answer: a cell given the check's metadata, or a second line in its output, outvoted it."""
    lines = (graded["out"] / "results.jsonl").read_text().splitlines()
    res = next(r for r in map(json.loads, lines) if r["student"] == "two_records" and r.get("exercise") == "99.3")
    assert res["points"] == 1 and "recorded: 'error'" in res["note"], res
    assert any("2 different first answers ('error', 'slice')" in flag for flag in res["flags"]), res["flags"]
    assert graded["rows"]["two_records"]["review"] == "code to review in 99.3"


def test_an_answer_that_quotes_a_record_is_one_answer():
    text = "NOT RIGHT  (recorded answer: \"x (recorded answer: 'error')\").\nNOT RIGHT  (recorded answer: 'slice', your first)"
    found = judge.recorded_answers([nbformat.v4.new_output("stream", name="stdout", text=text)])
    assert found == ["x (recorded answer: 'error')", "slice"]


@pytest.mark.parametrize(
    "one, other",
    [("ana\x1b", "ana\\x1b"), ("\ue000" + "1", "\U000e0001"), ("a\\b", "a\\\\b")],
)
def test_two_folder_names_stay_two_students(tmp_path, one, other):
    """A printable name spelled as another name's escape (``ana\\x1b`` beside ``ana`` and ESC), or a character
    above U+FFFF written as a private-use one and a digit, was the same student: one folder's notebook went
    ungraded ("also handed in and not graded") under a student id they shared."""
    assert grade.shown(one) != grade.shown(other)
    sources = _tiny_sources(tmp_path)
    for name in (one, other):
        (tmp_path / "in" / name).mkdir(parents=True)
        nbformat.write(_answer(sources["99_judged"].student, RIGHT), tmp_path / "in" / name / "hw.ipynb")
    jobs, _ = grade.collect(tmp_path / "in", sources, logging.getLogger("test-fifth"))
    assert len({j["student"] for j in jobs}) == 2

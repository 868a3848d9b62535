"""The sealed kernel (tools/grade_kernel.py) and the code-analysis flags (tools/flags.py).

A grader process is started with a secret in its environment (an instructor's LMS token);
its kernel tries to read it through /proc, leaves processes in new sessions, files in
/dev/shm and a file past the size cap. Nothing of it may succeed or survive the kernel.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import grade, grade_kernel
from tools.flags import forging, suspicious, uses_lab_code

ROOT = Path(__file__).resolve().parent.parent
LINUX = sys.platform == "linux" and Path("/proc/self/stat").exists()

# --------------------------------------------------------------------------- flags

ATTACKS = {
    "showtraceback": "get_ipython().showtraceback = lambda *a, **k: print('PASS  ok')",
    "set_custom_exc": "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: print('PASS  ok'))",
    "input transformer": "ip = get_ipython()\nip.input_transformers_post.append(lambda lines: ['pass\\n'])",
    "check_*": "import labsupport as lab\nlab.check_relu = lambda *a: None",
    "check_* (the setup's lab)": "lab.check_relu = lambda *a, **k: None",
    "run_cases": "from labsupport.checks import core; core.run_cases = lambda *a, **k: None",
    "compare": "from labsupport.checks import core\ncore.compare = lambda *a, **k: None",
    "always equal": "class Anything(str):\n    def __eq__(self, other):\n        return True\nprediction = Anything()",
    "torch.equal": "torch.equal = lambda *a: True",
    "torch.allclose": "import torch\ntorch.allclose = lambda *a, **k: True",
    "alias": "t = torch\nt.allclose = lambda *a, **k: True",
    "augmented": "torch.nn.functional.__doc__ += 'x'",
    "del": "del lab.check_relu",
    "setattr": "setattr(lab, 'check_relu', print)",
    "sys.modules": "import sys\nsys.modules['labsupport'].check_relu = print",
    "builtins": "import builtins\nbuiltins.print = lambda *a: None",
    "exec": "exec('x = 1')",
    "eval": "y = eval('1 + 1')",
    "importlib": "import importlib\nm = importlib.import_module('labsupport')",
    "ctypes": "import ctypes",
    "__import__": "m = __import__('labsupport')",
    "globals": "globals()['check_relu'] = print",
    "gc": "import gc\nobjs = gc.get_objects()",
    "frames": "import sys\nf = sys._getframe(1)",
    "environ": "import os\ntoken = os.environ.get('LMS_TOKEN')",
    "/proc": "text = open('/proc/1/environ').read()",
    "does not parse": "def relu(x):\n    return x.clamp(min=0",
}


@pytest.mark.parametrize("name", ATTACKS)
def test_every_attack_is_flagged(name):
    assert suspicious(ATTACKS[name]), name


# Forgeries that reached the kernel's verdict with no flag at all (each measured on a kernel-judged
# check): every one must now hold the notebook's kernel-judged points (tools/flags.forging).
UNFLAGGED_BEFORE = {
    "mock.ANY": "from unittest.mock import ANY\ndef double(x):\n    return ANY",
    "pytest.approx": "import pytest\ndef double(x):\n    return pytest.approx(0, abs=1e300)",
    "numpy's masked": "import numpy as np\ndef double(x):\n    return np.ma.masked",
    "type() with methods": "def double(x):\n    return type('L', (), {'__ne__': lambda s, o: False})()",
    "class body locals()": "class L:\n    locals()['__ne__'] = lambda s, o: False",
    "the shell from exit": "getattr(exit._ip, 'input_transformers_' + 'cleanup').append(lambda lines: [])",
    "a computed getattr": "getattr(exit, '_' + 'ip').ev('1')",
    "builtins from print": "e = print.__self__.eval",
    "namespace by locals()": "locals()['get_' + 'ipython']()",
    "pickle runs code": "import pickle\npickle.loads(b'cbuiltins\\nexec\\n(S\\'1\\'\\ntR.')",
    "pydoc imports": "from pydoc import locate\nm = locate('labsupport.checks')",
    "sys as an alias": "import sys as s\ns.modules['labsupport'].check_relu = print",
    "from sys import modules": "from sys import modules as m\nm['labsupport'].check_relu = print",
    "attrgetter": "import operator\nshell = operator.attrgetter('_ip')(exit)",
    "object.__getattribute__": "shell = object.__getattribute__(exit, '_i' + 'p')",
    "timeit runs a string": "import timeit\ntimeit.timeit('lab.check_relu = print', globals={'lab': lab}, number=1)",
    "a module written first": "open('helper.py', 'w').write('import labsupport')\nimport helper",
    "a trace function": "import sys\nsys.settrace(lambda frame, event, arg: None)",
    "a trace function by threading": "import threading\nthreading.settrace(print)",
    "a frame's line jumped": "def tracer(frame, event, arg):\n    frame.f_lineno += 1\n    return tracer",
    "math patched": "import math\nmath.isclose = lambda *a, **k: True",
    "numpy patched": "import numpy as np\nnp.allclose = lambda *a, **k: True",
    "operator patched": "from operator import eq\nimport operator as op\nop.eq = lambda a, b: True",
    "stdout replaced": "import sys\nsys.stdout = open('out.txt', 'w')",
    "an object's class replaced": "class Weird:\n    pass\nanswer = Weird()\nanswer.__class__ = float",
    # a fifth audit's: each held nothing before its fixes (vars() is locals(), or a module's namespace; np is the
    # setup's numpy; getattr(self.f, ...) reached past self)
    "vars() rebinds lab": "vars()['lab'] = object()",
    "vars() of numpy": "vars(np)['allclose'] = lambda *a, **k: True",
    "numpy of the setup patched": "np.testing.assert_allclose = print",
    "numpy of the setup in a list": "x = [np][0]\nx.allclose = print",
    "a computed getattr past self": "class N:\n    def f(self):\n        return getattr(self.f, '__glob' + 'als__')['lab']",
    # `self` that is no method's own object: numpy.testing.np is numpy, which no analysis of files can name
    "a free function's self": "def patch(self):\n    self.allclose = lambda *a, **k: True\npatch(np.testing.np)",
    "a method called unbound": "class P:\n    def patch(self):\n        self.allclose = lambda *a, **k: True\n"
    "P.patch(np.testing.np)",
}

# Honest code a solution may hold: none of it holds points (the solved notebooks' own are tested below).
HONEST = {
    "plain imports": "import math, time, itertools\nfrom collections import defaultdict\nimport numpy as np",
    "the data tools": "from torch.utils.data import DataLoader, TensorDataset\nfrom tqdm.auto import tqdm",
    "a plot's settings": "import matplotlib.pyplot as plt\nplt.rcParams['figure.figsize'] = (5, 3)",
    "seeding numpy": "import numpy as np\nnp.random.seed(0)\nx = np.arange(3)",
    "a flushed stdout": "import sys\nsys.stdout.flush()\nprint(sys.getsizeof([]))",
    "an environment variable for DDP": "import os\nos.environ['MASTER_PORT'] = '29500'",
    "a class of one's own": "x = torch.ones(2)\nprint(x.__class__.__name__)",
    "a step on lists of tensors": "torch._foreach_mul_(velocity, 0.9)\ntorch._foreach_add_(params, velocity, alpha=-0.1)",
    # a fifth audit's honest solutions, each held before its fixes (tools/flags.py: own objects, plain getters)
    "a membership test of globals()": "def f(x):\n    return x\nprint('f' in globals(), 'x' not in locals())",
    "vars() of one's own class": "class Linear:\n    @staticmethod\n    def forward(x, w):\n        return x @ w, (x, w)\n"
    "print(sorted(k for k in vars(Linear) if not k.startswith('_')))",
    "__dict__ of one's own class": "class ReLU:\n    def forward(self, h):\n        return h.clamp(min=0), h\n"
    "print(ReLU.__dict__.keys())",
    "vars(self)": "class Cpu:\n    def __init__(self, cores):\n        self.cores = cores\n\n    def peak(self):\n"
    "        return vars(self)['cores'] * 2",
    "setattr of a computed name on one's own object": "class Ops:\n    pass\n\nops = Ops()\n"
    "for name, fn in {'forward': abs, 'backward': max}.items():\n    setattr(ops, name, fn)",
    "a function put on one's own object": "class Helpers:\n    scale = 2.0\n\nhelpers = Helpers()\n"
    "helpers.double = lambda x: x * helpers.scale\nsetattr(helpers, 'triple', lambda x: 3 * x)",
    "a method of one's own model replaced": "class Stack(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "probe = Stack()\nplain = probe.forward\nprobe.forward = lambda x: plain(x) * 1.0\ndel probe.forward",
    "a layer's forward replaced": "from torch import nn\nlin = nn.Linear(4, 4)\nplain_forward = lin.forward\n\n"
    "def noisy(x):\n    return plain_forward(x) + 0.0\n\nlin.forward = noisy",
    "attrgetter of a plain attribute": "import operator\ngrad_of = operator.attrgetter('grad', 'weight.data')\n"
    "from operator import attrgetter\nnames = attrgetter('fc')",
    "methodcaller of a plain method": "from operator import methodcaller\nsize = methodcaller('size', 0)",
    "getattr and setattr by a name bound to a string": "HEAD = 'fc'\n\ndef prepare(model, num_classes):\n"
    "    old = getattr(model, HEAD)\n    setattr(model, HEAD, nn.Linear(old.in_features, num_classes))",
}

# Code next to the fifth audit's narrowed rules: each still holds the kernel-judged points.
NEAR_THE_OWN_OBJECTS = {
    "a class attribute bound to lab, read through vars": "class T:\n    x = lab\nvars(T)['x'].check_power = print",
    "a class attribute bound to nn.ReLU, read through __dict__": "class T:\n    act = nn.ReLU\n"
    "T.__dict__['act'].forward = print",
    "a constant name that is watched": "HEAD = '_ip'\nshell = getattr(exit, HEAD)",
    "a name bound twice": "HEAD = 'fc'\nHEAD = '__glob' + 'als__'\ng = getattr(print, HEAD)",
    "a parameter shadowing a constant": "HEAD = 'fc'\ndef f(o, HEAD):\n    return getattr(o, HEAD)",
    "attrgetter of a dotted path through a watched name": "import operator\ne = operator.attrgetter('__self__.eval')(print)",
    "attrgetter of a computed name": "from operator import attrgetter\nname = '_' + 'ip'\ns = attrgetter(name)(exit)",
    "attrgetter passed on": "from operator import attrgetter\ng = attrgetter('grad')\nh = attrgetter\n"
    "s = h('_i' + 'p')(exit)",
    "an own class whose __new__ returns torch's": "class P:\n    def __new__(cls):\n        return torch.Tensor\n"
    "p = P()\np.abs = lambda self: self * 0",
    "an own class whose __getattr__ returns torch's": "class P:\n    def __getattr__(self, n):\n"
    "        return torch.Tensor\np = P()\np.x.abs = lambda self: self * 0",
    "an own class rebound": "class P:\n    pass\nP = lambda: torch.Tensor\np = P()\np.abs = lambda self: self * 0",
    "a metaclass": "class M(type):\n    pass\nclass P(metaclass=M):\n    pass\np = P()\np.abs = lambda s: s",
    "a layer's class by a computed getattr": "lin = nn.Linear(2, 2)\n"
    "getattr(lin, '__cl' + 'ass__').forward = lambda s, x: x",
    "a layer's class by setattr": "lin = nn.Linear(2, 2)\nsetattr(type(lin), 'forward', lambda s, x: x)",
    "nn rebound, then a 'layer'": "import numpy as nn\nr = nn.Random()\nr.abs = lambda s: s",
    "torch's class under an own object's attribute": "class P:\n    pass\np = P()\np.t = torch.Tensor\n"
    "p.t.abs = lambda s: s * 0",
    "globals() read, not tested": "x = 'lab' in globals() or globals()['lab']",
    "vars() compared, not tested": "ok = vars() == {}",
    "self bound at the top": "import numpy\nself = numpy.testing.np\nself.allclose = lambda *a, **k: True",
    "a free function's self, by a computed getattr": "def peek(self):\n    return getattr(self, '__glob' + 'als__')",
}


@pytest.mark.parametrize("name", UNFLAGGED_BEFORE)
def test_forgeries_by_name_and_always_equal_objects_hold_points(name):
    assert forging(suspicious(UNFLAGGED_BEFORE[name])), name


@pytest.mark.parametrize("name", HONEST)
def test_honest_code_holds_no_points(name):
    assert forging(suspicious(HONEST[name])) == [], name


@pytest.mark.parametrize("name", HONEST)
def test_honest_code_keeps_a_grader_judged_point(name):
    assert uses_lab_code(HONEST[name]) == [], name  # 'may run the lab's own code' scores 0 there


@pytest.mark.parametrize("name", NEAR_THE_OWN_OBJECTS)
def test_code_near_ones_own_objects_holds_points(name):
    assert forging(suspicious(NEAR_THE_OWN_OBJECTS[name])), name


def test_a_computed_attribute_of_self_is_honest():
    assert not forging(suspicious("class Net:\n    def f(self, i):\n        return getattr(self, f'fc{i}')"))


def _solutions(limit_per_notebook: int = 100) -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if c.get("metadata", {}).get("lab", {}).get("role") == "solution"]
        found += [(f"{path.stem}/{c.metadata['lab']['exercise']}", c.source) for c in cells[:limit_per_notebook]]
    return found


def test_honest_solutions_are_not_flagged():
    solutions = _solutions()
    assert len(solutions) >= 43
    assert {name: suspicious(code) for name, code in solutions if suspicious(code)} == {}


def test_magics_and_indented_regions_parse():
    assert suspicious("%time y = relu(x)\n!ls\nz = 1") == []
    assert suspicious("    return torch.where(x > 0, x, 0)") == []
    assert suspicious("x = torch.arange(3)[0]\nx[0] = 1\nself_w = nn.Linear(2, 3)") == []


# --------------------------------------------------------------------------- the kernel's environment


def test_the_kernels_environment_holds_nothing_of_the_instructors_shell(monkeypatch, tmp_path):
    monkeypatch.setenv("LMS_TOKEN", "s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("JUPYTER_TOKEN", "s3cret")
    extra = ROOT / "grading" / "extra"
    env = grade._sandbox_env(grade.Config(extra=str(extra), scratch_root=str(tmp_path)), tmp_path / "s-x")
    assert not [k for k, v in env.items() if "s3cret" in v]
    sandbox = json.loads(env["LAB_GRADE_SANDBOX"])
    readable = [Path(p).resolve() for p in sandbox["read"]]
    assert not any(p == extra or extra.is_relative_to(p) for p in readable), "the extra cases are readable"
    assert sandbox["file_mb"] > 0 and "cgroup" in sandbox and "private_shm" in sandbox


def test_no_folder_above_the_sources_is_readable_from_the_python_path(monkeypatch, tmp_path):
    """PYTHONPATH naming a folder above the repository (or above --src, --extra) opens nothing of theirs."""
    src, extra = tmp_path / "course" / "notebooks", tmp_path / "course" / "extra"
    monkeypatch.setattr(sys, "path", [*sys.path, str(ROOT.parent), str(tmp_path), str(ROOT / "tools")])
    src.mkdir(parents=True)
    extra.mkdir()
    env = grade._sandbox_env(grade.Config(src=str(src), extra=str(extra), scratch_root=str(tmp_path)), tmp_path / "s")
    readable = [Path(p).resolve() for p in json.loads(env["LAB_GRADE_SANDBOX"])["read"]]
    for secret in (ROOT / "notebooks", src, extra):
        assert not any(p == secret or secret.is_relative_to(p) for p in readable), secret
    assert ROOT / "tools" in readable  # a folder inside the repository that holds no solution stays on the path


# --------------------------------------------------------------------------- a kernel, from a grader with a secret

GRADER = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
import nbformat
from tools import grade, grade_kernel

opts = json.loads(sys.argv[1])
if opts["fallback"]:  # a machine without cgroups or mount namespaces
    grade_kernel._CGROUP_BASES = ()
    grade_kernel._UNSHARE[:] = [False, False]
tmp = Path(tempfile.mkdtemp(prefix="lab-grade-"))
grade._kernel_spec(tmp)
os.environ["JUPYTER_PATH"] = str(tmp)
base = dict(timeout=30, cell_timeout=60, memory_mb=1024, landlock=opts["landlock"])
zygote = grade._start_zygote(grade.Config(**base, fork=True), tmp) if opts["fork"] else None
cfg = grade.Config(**base, scratch_root=str(tmp), zygote=str(tmp / "zygote.sock") if zygote else "")
scratch = Path(tempfile.mkdtemp(prefix="s-", dir=tmp))
kernel = grade.Kernel(cfg, scratch)
kernel.start()
connection = Path(kernel.client.km.connection_file)
cell = nbformat.v4.new_code_cell(opts["cell"].replace("GRADER", str(os.getpid())))
outcome, _ = kernel.run(cell, 0, 60)
shm_during = sorted(e for e in os.listdir("/dev/shm") if e.startswith(opts["shm"]))
kernel.close()
time.sleep(0.3)
def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
alive = [p for p in os.listdir("/proc") if p.isdigit() and b"sleep\0" + opts["tag"].encode() in cmdline(p)]
if zygote is not None:
    zygote.terminate()
    zygote.wait()
shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({
    "outcome": outcome,
    "text": "".join(o.get("text", "") for o in cell.outputs),
    "errors": [o for o in cell.outputs if o.get("output_type") == "error"],
    "own_environ_has_secret": "s3cret-lms" in open("/proc/self/environ").read(),
    "shm_during": shm_during,
    "shm_after": sorted(e for e in os.listdir("/dev/shm") if e.startswith(opts["shm"])),
    "alive": alive,
    "connection_file_in_scratch": connection.parent == scratch,
    "cgroup_left": bool(json.loads(kernel.env["LAB_GRADE_SANDBOX"])["cgroup"]) and os.path.exists(json.loads(kernel.env["LAB_GRADE_SANDBOX"])["cgroup"]),
}))
"""

CELL = r"""
import os, subprocess
def _read(path):
    try:
        return "s3cret-lms" in open(path).read()
    except OSError as err:
        return type(err).__name__
print("OWNER-ENVIRON", _read("/proc/GRADER/environ"))
print("PARENT-ENVIRON", _read(f"/proc/{os.getppid()}/environ"))
print("SUBPROCESS-RC", subprocess.run(["cat", "/proc/GRADER/environ"], capture_output=True).returncode)
print("KERNEL-ENVIRON", "LMS_TOKEN" in os.environ)
print("CAPS", [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))])
subprocess.Popen(["setsid", "sleep", "TAG1"])
os.system("setsid sleep TAG2 &")
open("/dev/shm/TAG-answer", "w").write("42")
try:
    with open("big", "wb") as f:
        for _ in range(1100):
            f.write(b"x" * 2**20)
    print("FILE written")
except OSError as err:
    print("FILE", err.errno)
try:
    with open("/dev/shm/TAG-big", "wb") as f:
        for _ in range(400):
            f.write(b"x" * 2**20)
    print("SHM written")
except OSError as err:
    print("SHM", err.errno)
"""


def _grade_one(landlock: bool, fork: bool, fallback: bool) -> dict:
    tag = f"lab{random.randrange(10**8):08d}"
    n = random.randrange(10**6)
    cell = CELL.replace("TAG1", f"300.{n}1").replace("TAG2", f"300.{n}2").replace("TAG", tag)
    opts = {"landlock": landlock, "fork": fork, "fallback": fallback, "cell": cell, "tag": f"300.{n}", "shm": tag}
    env = {**os.environ, "LMS_TOKEN": "s3cret-lms", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", GRADER, json.dumps(opts)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    shm = [e for e in os.listdir("/dev/shm") if e.startswith(tag)]
    return {**out, "tag": tag, "shm_host": shm}


@pytest.mark.skipif(not LINUX, reason="Linux /proc")
@pytest.mark.parametrize(
    "landlock,fork,fallback",
    [(True, False, False), (False, False, False), (True, True, False), (False, False, True)],
    ids=["landlock", "no-landlock", "forked", "no-cgroup-no-namespace"],
)
def test_a_kernel_reads_no_secret_and_leaves_nothing_behind(landlock, fork, fallback):
    out = _grade_one(landlock, fork, fallback)
    text = out["text"]
    assert out["outcome"] == "ok" and not out["errors"], out
    assert out["own_environ_has_secret"], "the test's grader did not hold the secret"
    # refused, or (root: a /proc of the kernel's own) the grader is not even listed
    assert "OWNER-ENVIRON PermissionError" in text or "OWNER-ENVIRON FileNotFoundError" in text, text
    assert "PARENT-ENVIRON True" not in text and "SUBPROCESS-RC 0" not in text, text
    assert "KERNEL-ENVIRON False" in text, text
    if os.geteuid() == 0:
        assert "CAPS ['0000000000000000', '0000000000000000', '0000000000000000']" in text, text
    assert "FILE 27" in text, text  # EFBIG: RLIMIT_FSIZE (1024 MB, the memory cap)
    assert out["alive"] == [], "a process started in a new session outlived its kernel"
    assert out["shm_after"] == [] and out["shm_host"] == [], "a /dev/shm file outlived its kernel"
    assert not out["cgroup_left"]
    assert out["connection_file_in_scratch"], (
        "the kernel's ports and key outside its scratch folder: a dying kernel leaves them"
    )
    if grade_kernel._can_unshare(grade_kernel._CLONE_NEWNS) and not fallback:  # root: a /dev/shm of its own, capped
        assert out["shm_during"] == [], "the kernel's /dev/shm was visible to the grader"
        assert "SHM 28" in text, text  # ENOSPC: 256 MB of /dev/shm
    else:
        assert out["shm_during"], "the fallback test wrote nothing to the shared /dev/shm"

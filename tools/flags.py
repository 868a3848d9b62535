"""Code analysis of a submission's solution cells: what an instructor should review.

``suspicious(source)`` parses the cell (``ast``, IPython's ``%``/``!`` lines blanked) and
returns one short reason per construct that could reach the grader, the lab's checks or
torch's comparisons instead of answering the exercise. A cell that does not parse is
flagged too. Nothing here decides a point: it marks a row for review.
"""

from __future__ import annotations

import ast
import textwrap

# modules whose attributes a solution must not assign: the checks, torch (and its usual aliases)
_GUARDED_MODULES = ("labsupport", "torch")
_GUARDED_NAMES = {"lab", "labsupport", "torch", "nn", "F", "optim"}  # what the setup cells bind
_CALLS = {
    "get_ipython": "reaches the IPython shell (get_ipython)",
    "setattr": "setattr()",
    "delattr": "delattr()",
    "exec": "exec()",
    "eval": "eval()",
    "compile": "compile()",
    "__import__": "__import__()",
    "globals": "globals()",
    "vars": "vars()",
    "breakpoint": "breakpoint()",
    "locals": "locals()",
    "attrgetter": "reaches attributes by name (operator.attrgetter)",
    "methodcaller": "reaches attributes by name (operator.methodcaller)",
}
_ATTRIBUTES = {
    "get_ipython": "reaches the IPython shell (get_ipython)",
    "set_custom_exc": "replaces IPython's error handler (set_custom_exc)",
    "showtraceback": "touches IPython's traceback display (showtraceback)",
    "showsyntaxerror": "touches IPython's traceback display (showsyntaxerror)",
    "input_transformers_post": "an IPython input transformer",
    "input_transformers_cleanup": "an IPython input transformer",
    "input_transformer_manager": "an IPython input transformer",
    "ast_transformers": "an IPython AST transformer",
    "run_cell": "runs IPython cells itself",
    "user_ns": "reaches the kernel's namespace",
    "modules": None,  # sys.modules: checked with its owner below
    "_getframe": "frame access (sys._getframe)",
    "currentframe": "frame access (inspect.currentframe)",
    "stack": None,  # inspect.stack: checked with its owner below
    "get_objects": "walks the heap (gc.get_objects)",
    "get_referrers": "walks the heap (gc.get_referrers)",
    "get_referents": "walks the heap (gc.get_referents)",
    "environ": None,  # os.environ
    "getenv": "reads the environment (os.getenv)",
    "putenv": "sets the environment (os.putenv)",
    "system": None,  # os.system
    "tb_frame": "frame access (a traceback's frame)",
    "f_back": "frame access (f_back)",
    "f_globals": "frame access (f_globals)",
    "f_locals": "frame access (f_locals)",
    "f_builtins": "frame access (f_builtins)",
    "f_lineno": "frame access (f_lineno)",
    "f_trace": "frame access (f_trace)",
    "f_code": "frame access (f_code)",
    "gi_frame": "frame access (a generator's frame)",
    "__dict__": "a module's or class's __dict__",
    "__setattr__": "__setattr__",
    "__delattr__": "__delattr__",
    "__globals__": "a function's globals (__globals__)",
    "__builtins__": "builtins",
    "__subclasses__": "__subclasses__",
    "__code__": "a function's code (__code__)",
    "__closure__": "a function's closure (__closure__)",
    "__bases__": "a class's bases (__bases__)",
    "__mro__": "a class's mro (__mro__)",
    "__loader__": "a module's loader",
    "_ip": "reaches the IPython shell (exit._ip)",
    "__self__": "a builtin's module (__self__)",
    "__getattribute__": "__getattribute__",
    "attrgetter": "reaches attributes by name (operator.attrgetter)",
    "methodcaller": "reaches attributes by name (operator.methodcaller)",
    "masked": "numpy's masked constant (compares as neither true nor false)",
}
_OWNED = {
    ("sys", "modules"): "sys.modules",
    ("inspect", "stack"): "frame access (inspect.stack)",
    ("os", "environ"): "reads the environment (os.environ)",
    ("os", "system"): "runs a shell command (os.system)",
    ("events", "register"): "registers an IPython event callback (events.register)",
    ("numpy", "ma"): "numpy.ma (masked values compare as neither true nor false)",
    ("sys", "settrace"): "a trace function (sys.settrace), which can change how the checks run",
    ("sys", "setprofile"): "a trace function (sys.setprofile), which can change how the checks run",
    ("sys", "addaudithook"): "an audit hook (sys.addaudithook), which sees everything the checks do",
    ("sys", "_current_frames"): "frame access (sys._current_frames)",
    ("os", "popen"): "runs a shell command (os.popen)",
    ("os", "fork"): "starts a process (os.fork)",
    ("os", "kill"): "signals a process (os.kill)",
    ("os", "killpg"): "signals a process (os.killpg)",
}
_MODULES = {
    "importlib": "importlib",
    "ctypes": "ctypes",
    "builtins": "builtins",
    "gc": "the garbage collector (gc)",
    "inspect": "inspect",
    "subprocess": "subprocess",
    "socket": "socket",
    "IPython": "imports IPython",
    "ipykernel": "imports ipykernel",
    "traitlets": "imports traitlets",
    "zmq": "imports zmq",
    "jupyter_client": "imports jupyter_client",
    "pickle": "runs code by name (pickle)",
    "marshal": "runs code by name (marshal)",
    "copyreg": "runs code by name (copyreg)",
    "shelve": "runs code by name (shelve)",
    "dill": "runs code by name (dill)",
    "cloudpickle": "runs code by name (cloudpickle)",
    "runpy": "runs code by name (runpy)",
    "pydoc": "runs code by name (pydoc)",
    "code": "runs code by name (code)",
    "timeit": "runs code by name (timeit: its statements are strings)",
    "codeop": "runs code by name (codeop)",
    "unittest": "always-equal objects (unittest.mock.ANY)",
    "mock": "always-equal objects (mock.ANY)",
    "pytest": "always-equal objects (pytest.approx)",
}
_SUBMODULES = {"numpy.ma": _OWNED["numpy", "ma"]}  # a module whose parent is honest
# The modules a solution may import without review: what the notebooks themselves use, and plain
# computation. Any other import is held for review (tools/flags.forging): a module can carry code
# that this analysis never sees (one the solution wrote into its folder first, a trace function
# installed by threading, a callback run at exit). labsupport is judged by uses_lab_code.
_ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "cmath",
        "collections",
        "contextlib",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "io",
        "itertools",
        "json",
        "labsupport",
        "logging",
        "math",
        "matplotlib",
        "numbers",
        "numpy",
        "operator",
        "os",
        "pathlib",
        "PIL",
        "platform",
        "pprint",
        "random",
        "re",
        "shutil",
        "statistics",
        "string",
        "struct",
        "sys",
        "tempfile",
        "textwrap",
        "time",
        "torch",
        "torchvision",
        "tqdm",
        "typing",
        "typing_extensions",
        "warnings",
    }
)
_UNPATCHED_MODULES = ("matplotlib",)  # setting its attributes (rcParams) changes no check
_IPYTHON_OK = ("IPython.display",)  # display() and friends: honest
_DUNDERS = {
    "__eq__",
    "__ne__",
    "__hash__",
    "__bool__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__float__",
    "__int__",
    "__index__",
    "__array__",
    "__torch_function__",
    "__torch_dispatch__",
    "__instancecheck__",
    "__subclasscheck__",
    "__class__",
}


_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")  # a computed name outside self: any attribute


def _strip_magics(source: str) -> str:
    """IPython's ``%magic`` and ``!shell`` lines as ``pass`` (same indentation), so the rest parses."""
    lines = []
    for line in source.splitlines():
        body = line.lstrip()
        lines.append(line[: len(line) - len(body)] + "pass" if body[:1] in ("%", "!") else line)
    return "\n".join(lines)


def _root(node: ast.AST) -> str | None:
    """The name an attribute/subscript chain starts from: ``torch`` for ``torch.nn.functional.relu``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _plain_root(node: ast.AST) -> str | None:
    """The name a plain ``a.b.c`` chain starts from (no call, no subscript); else None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _environ_item(target: ast.AST) -> bool:
    """``os.environ[...]`` (flagged as the environment, for review only): a variable set for the code."""
    return (
        isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) and target.value.attr == "environ"
    )


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.guarded = set(_GUARDED_NAMES)
        self.aliases = {"np": "numpy"}  # a name bound by an import -> the module it names
        self.imported: set[str] = set()  # names bound by imports of other modules (os, sys, math...)

    def add(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    # imports: the names they bind, and the modules that are flagged themselves
    def _module(self, name: str) -> None:
        top = name.split(".")[0]
        if top in _MODULES and not name.startswith(_IPYTHON_OK):
            self.add(_MODULES[top])
        elif top not in _MODULES and top not in _ALLOWED_IMPORTS:
            self.add(f"imports {top or 'a relative module'}, a module no exercise needs (its code is not analysed)")
        for module, reason in _SUBMODULES.items():
            if name == module or name.startswith(module + "."):
                self.add(reason)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name)
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            if alias.name.split(".")[0] in _GUARDED_MODULES:
                self.guarded.add(alias.asname or alias.name.split(".")[0])
            elif alias.name.split(".")[0] not in _UNPATCHED_MODULES:
                self.imported.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._module(module)
        for alias in node.names:
            self._module(f"{module}.{alias.name}")
            if alias.name in _CALLS or alias.name in _ATTRIBUTES and _ATTRIBUTES[alias.name]:
                self.add(_CALLS.get(alias.name) or _ATTRIBUTES[alias.name])
            if (module.split(".")[-1], alias.name) in _OWNED:  # from sys import modules
                self.add(_OWNED[module.split(".")[-1], alias.name])
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            if module.split(".")[0] in _GUARDED_MODULES:
                self.guarded.add(alias.asname or alias.name)
            elif module.split(".")[0] not in _UNPATCHED_MODULES:
                self.imported.add(alias.asname or alias.name)

    # assignments to the lab's or torch's attributes (and to aliases of them)
    def _target(self, target: ast.AST, verb: str) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._target(elt, verb)
        elif isinstance(target, ast.Starred):
            self._target(target.value, verb)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            if root in self.guarded:
                self.add(f"{verb} an attribute of {root} (the lab's checks or torch)")
            elif root in self.imported and not _environ_item(target):
                self.add(f"{verb} an attribute of the module {root}, which the checks use too")
            if isinstance(target, ast.Attribute) and target.attr in _DUNDERS:
                self.add(f"{verb} {target.attr}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, "assigns")
        if isinstance(node.value, (ast.Name, ast.Attribute)) and _plain_root(node.value) in self.guarded:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.guarded.add(target.id)  # an alias: x = torch; x.equal = ...
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, "assigns")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, "assigns")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, "deletes")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in _DUNDERS:
                self.add(f"a class that defines {item.name}")
            elif isinstance(item, ast.Assign):
                for target in item.targets:
                    if isinstance(target, ast.Name) and target.id in _DUNDERS:
                        self.add(f"a class that defines {target.id}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func.id if isinstance(node.func, ast.Name) else ""
        if func in ("setattr", "delattr") and node.args and _root(node.args[0]) in self.guarded:
            self.add(f"{func}() on an attribute of {_root(node.args[0])} (the lab's checks or torch)")
        named = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
        if func in _BY_NAME and len(node.args) > 1 and not named and _root(node.args[0]) != "self":
            self.add(f"{func}() of an attribute whose name is computed")  # getattr(shell, "input_" + ...)
        if func == "type" and len(node.args) == 3:
            self.add("a class made by type() (its methods given by name)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _CALLS:
            self.add(_CALLS[node.id])
        elif node.id in ("__builtins__", "builtins"):
            self.add("builtins")
        elif node.id in _MODULES and node.id in ("importlib", "ctypes"):
            self.add(_MODULES[node.id])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        reason = _ATTRIBUTES.get(node.attr)
        if reason:
            self.add(reason)
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else _root(node.value)
        owner = self.aliases.get(owner, owner or "").split(".")[-1]  # import sys as s: s.modules
        if (owner, node.attr) in _OWNED:
            self.add(_OWNED[owner, node.attr])
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and "/proc" in node.value:
            self.add("reads /proc")
        elif isinstance(node.value, str) and node.value in _ATTRIBUTES and _ATTRIBUTES[node.value]:
            self.add(_ATTRIBUTES[node.value] + " (by name)")
        elif isinstance(node.value, str) and node.value in _DUNDERS:
            self.add(f"a class that defines {node.value} (by name)")  # type("X", (), {"__eq__": ...})


def suspicious(source: str) -> list[str]:
    """Short reasons to review this solution code; [] when nothing in it reaches past the exercise."""
    text = _strip_magics(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        try:
            tree = ast.parse(textwrap.dedent(text))
        except SyntaxError as err:
            return [f"the code does not parse ({err.msg}, line {err.lineno}): review it by hand"]
    except (ValueError, RecursionError, MemoryError) as err:
        return [f"the code cannot be analysed ({type(err).__name__}): review it by hand"]
    visitor = _Visitor()
    try:
        visitor.visit(tree)
    except RecursionError:
        visitor.add("the code nests too deep to analyse: review it by hand")
    return visitor.reasons


# Reasons of :func:`suspicious` for reaching an object by a name computed at run time, or through a bound
# method's owner: both lists below hold them.
_BY_NAME_REASONS = (
    "runs code by name",
    "whose name is computed",
    "attributes by name",
    "locals()",
    "__self__",
    "__getattribute__",
)

# Reasons of :func:`suspicious` that reach code or objects outside the cell (the checks' references
# among them): on an exercise the grader judges itself, they cost the point (see tools/judge.py).
_REACHING = (
    "sys.modules",
    "a module no exercise needs",
    "a trace function",
    "importlib",
    "__import__",
    "exec()",
    "eval()",
    "compile()",
    "globals()",
    "vars()",
    "the garbage collector",
    "walks the heap",
    "frame access",
    "__globals__",
    "__closure__",
    "__code__",
    "__dict__",
    "__subclasses__",
    "__loader__",
    "reaches the IPython shell",
    "reaches the kernel's namespace",
    "ctypes",
    *_BY_NAME_REASONS,
    "does not parse",
    "cannot be analysed",
    "nests too deep",
)


def uses_lab_code(source: str, allowed: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Why this solution code may run the lab's own code (a check's reference) instead of its own:
    it imports labsupport, uses a ``lab.<name>`` the notebook itself does not use (``allowed``),
    asks ``getattr``/``vars``/``dir`` for one, or reaches objects by other means (sys.modules, gc,
    frames, exec...). [] for code that computes its answer itself."""
    reasons = [r for r in suspicious(source) if any(key in r for key in _REACHING)]
    try:
        tree = ast.parse(textwrap.dedent(_strip_magics(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return reasons or ["the code does not parse: review it by hand"]
    lab_names = {"lab", "labsupport"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m.split(".")[0] == "labsupport" for m in modules):
                reasons.append("imports labsupport (the lab's checks)")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in lab_names:
            if node.attr not in allowed:
                reasons.append(f"uses {node.value.id}.{node.attr}, which the notebook's own code does not use")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "dir"):
            if node.args and _root(node.args[0]) in lab_names:
                reasons.append(f"{node.func.id}() on the lab's module")
        elif isinstance(node, ast.Name) and node.id in lab_names and not isinstance(node.ctx, ast.Load):
            reasons.append(f"rebinds {node.id}")
    loads = sum(isinstance(n, ast.Name) and n.id in lab_names for n in ast.walk(tree))
    attributes = sum(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in lab_names
        for n in ast.walk(tree)
    )
    if loads > attributes:
        reasons.append("uses the lab's module itself (passes it on, or another name for it)")
    return list(dict.fromkeys(reasons))


def lab_names_used(sources: list[str]) -> set[str]:
    """The ``lab.<name>`` attributes these cells (a notebook's own code) use: what a solution may use too."""
    found: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(textwrap.dedent(_strip_magics(source)))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "lab":
                found.add(node.attr)
    return found


# Reasons of :func:`suspicious` that change how the checks run in the kernel (its error display,
# its input, the lab's or torch's functions, equality itself): on an exercise judged in its kernel,
# they hold the notebook's kernel-judged points at 0 until an instructor has read the code.
_FORGING = (
    "IPython",
    "a module no exercise needs",
    "a trace function",
    "audit hook",
    "get_ipython",
    "set_custom_exc",
    "traceback display",
    "input transformer",
    "AST transformer",
    "runs IPython cells",
    "kernel's namespace",
    "event callback",
    "an attribute of",
    "sys.modules",
    "builtins",
    "frame access",
    "walks the heap",
    "garbage collector",
    "ctypes",
    "exec()",
    "eval()",
    "compile()",
    "__import__",
    "importlib",
    "globals()",
    "__globals__",
    "__code__",
    "__closure__",
    "__subclasses__",
    "__dict__",
    "__setattr__",
    "__delattr__",
    "a class that defines",
    "assigns __",
    *_BY_NAME_REASONS,
    "always-equal",
    "neither true nor false",
    "made by type()",
)


def forging(reasons: list[str]) -> list[str]:
    """The reasons (of :func:`suspicious`) that could change a check's verdict in the kernel."""
    return [r for r in reasons if any(key in r for key in _FORGING)]

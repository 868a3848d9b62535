"""Code analysis of a submission's solution cells: what an instructor should review.

``suspicious(source)`` parses the cell (``ast``; IPython's ``%``/``!`` lines read as the code
IPython runs for them) and returns one short reason per construct that could reach the grader,
the lab's checks or torch's comparisons instead of answering the exercise. A cell that does not
parse, or is too long to parse, is flagged too. Nothing here decides a point: it marks a row for
review, and :func:`forging` picks the reasons that hold a notebook's kernel-judged points.

The analysis follows a module through its imports and plain aliases (``t = torch``); what would
lose track of it is a reason of its own: the module put in a list or passed to a function, the
name ``lab`` bound to something else, a class reached through ``type(x)``, a function put into
another object's attribute, a magic that runs code it cannot read. So is code kept in strings that
an allowed module runs (a string annotation ``typing.get_type_hints`` evaluates, ``logging.config``,
a pickle ``np.load``/``torch.load`` is told to read, a module the cell wrote and put on ``sys.path``,
a replaced process), and an attribute reached by a name the analysis never sees (``getattr`` passed
on, ``string.Formatter``'s fields, ``functools.update_wrapper``'s ``assigned``, a torch.fx node).

What the cell builds is its own: an object of a class it defines (none with ``__new__``, ``__getattr__``...
or a metaclass) or a layer it builds (``nn.Linear(...)``) may take functions, and attributes by computed
names; ``vars(MyClass)`` and ``MyClass.__dict__`` read its own attributes (while no attribute of the cell is
bound to a module). A name bound once to a string names an attribute as the string does,
``attrgetter("grad")`` a plain one, and ``"x" in globals()`` only asks.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import string
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
    "__import__": "__import__()",  # builtins.__import__, __builtins__.__import__, __builtins__["__import__"]
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
    **dict.fromkeys(
        [
            "register_module_forward_hook",
            "register_module_forward_pre_hook",
            "register_module_backward_hook",
            "register_module_full_backward_hook",
            "register_module_full_backward_pre_hook",
            "register_module_buffer_registration_hook",
            "register_module_module_registration_hook",
            "register_module_parameter_registration_hook",
            "saved_tensors_hooks",
        ],
        "a global hook on every module or tensor of the kernel (the checks' own too)",
    ),
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
    ("os", "register_at_fork"): "a callback run at every fork (os.register_at_fork)",
    # the kernel's process replaced by another program (a kernel started with lines of code in its argv)
    **{
        ("os", name): f"replaces the kernel's program (os.{name}): code the analysis does not read runs"
        for name in ("execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "fexecve")
    },
    **{
        ("os", name): f"starts a process (os.{name})"
        for name in ("posix_spawn", "posix_spawnp", "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "forkpty")
    },
    # a module the cell wrote into its folder, imported under an allowed name (statistics.py)
    **{
        ("sys", name): f"changes where imports come from (sys.{name})"
        for name in ("path", "meta_path", "path_hooks", "path_importer_cache")
    },
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
# a module (or class) whose parent is honest, imported or reached as an attribute
_SUBMODULES = {
    "numpy.ma": _OWNED["numpy", "ma"],
    # code or objects named in strings, which the analysis never reads as code
    "logging.config": "runs code by name (logging.config: its files and dicts name code to run)",
    "string.Formatter": "reaches attributes by name (string.Formatter reads '{0.attr[key]}' fields)",
    "torch.hub": "runs code by name (torch.hub runs a hubconf.py)",
    "torch.package": "runs code by name (torch.package unpickles code)",
    "torch.serialization": "runs code by name (torch.serialization: what torch.load may unpickle)",
    "torch.utils.cpp_extension": "runs code by name (torch.utils.cpp_extension compiles C++)",
    "torch.utils.model_zoo": "runs code by name (torch.utils.model_zoo unpickles)",
    "numpy.ctypeslib": "ctypes (numpy.ctypeslib)",
    "numpy.f2py": "runs code by name (numpy.f2py compiles code)",
}
# functions that evaluate strings as code: string annotations (typing.get_type_hints, which
# functools.singledispatch's register calls), fields of a format string
_EVALUATES_STRINGS = {
    name: f"runs code by name ({name} evaluates string annotations)"
    for name in ("get_type_hints", "ForwardRef", "_eval_type", "evaluate_forward_ref")
} | {
    "singledispatch": "runs code by name (singledispatch's register evaluates string annotations)",
    "singledispatchmethod": "runs code by name (singledispatchmethod's register evaluates string annotations)",
    "get_field": "reaches attributes by name (a format string's field, Formatter.get_field)",
}
# keyword arguments that let a load unpickle, i.e. run code named in the file it reads
_UNPICKLES = {"allow_pickle": False, "weights_only": True, "pickle_module": None}
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
    "__array_function__",  # numpy's protocols: np.allclose(answer, expected) asks the answer
    "__array_ufunc__",
    "__array_priority__",
    "__array_interface__",
    "__array_struct__",
}
# torch's machinery that changes how its operators run for everyone (the checks' own calls too): torch.library
# but what makes a new operator of one's own (notebook 04), torch.overrides, private modules but Dynamo's
# (notebook 09 resets it)
_TORCH_INTERNALS = ("overrides",)
_TORCH_LIBRARY_OK = ("custom_op", "register_fake", "opcheck", "infer_schema")
_TORCH_PRIVATE_OK = ("_dynamo",)
_TORCH_PRIVATE_MATH = "_foreach_"  # torch._foreach_add_ and kin: arithmetic on lists of tensors (optimizers use them)
_LAB_NAMES = ("lab", "labsupport")  # the names the check cells call
_OWN_OBJECTS = ("self", "ctx", "cls")  # a method's own object, an autograd.Function's context
_CLASS_OF = ("__class__", "__base__", "__bases__", "__mro__")  # an object's class, or its bases
# the setup cells' names of modules: what a name means when no import of the cell binds it
_SETUP_MODULES = {
    "lab": "labsupport",
    "np": "numpy",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "optim": "torch.optim",
}


_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")  # a computed name outside self: any attribute


# IPython magics: the code it runs for them is analysed, and a magic that runs code the analysis cannot
# read (%run, %config, %load_ext of a module of the cell's...) is a reason of its own.
_TIMED_MAGICS = ("time", "timeit")  # the rest of the line (after timeit's options) is Python it runs
_PLAIN_MAGICS = ("matplotlib", "pip", "conda", "tensorboard", "who", "whos", "pwd", "ls", "env", "capture")
_TIMEIT_VALUES = ("-n", "-r", "-p")  # timeit's options that take a value


def _braces(text: str) -> list[str]:
    """The ``{expression}`` parts of a shell or magic line, which IPython evaluates before it runs the line
    (``!echo {x}``): those that parse as Python (IPython runs nothing of the others)."""
    found, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "{":
            depth, start = depth + 1, (i + 1 if depth == 0 else start)
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                found.append(text[start:i].strip())
    parsed = []
    for expr in found + _format_fields(text):
        try:
            ast.parse(expr, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        parsed.append(f"({expr})")
    return parsed


def _format_fields(text: str) -> list[str]:
    """The fields IPython's formatter evaluates in a shell or magic line, split as ``string.Formatter``
    splits them: ``{expr!r}`` runs ``expr``, ``{expr:spec}`` runs ``expr:spec``. Fields before a malformed
    one are evaluated too, so they are read up to it."""
    fields = []
    try:
        for _, name, spec, _ in string.Formatter().parse(text):
            if name is not None:
                fields.append(f"{name}:{spec}" if spec else name)
    except ValueError:
        pass
    return [f.strip() for f in fields if f.strip()]


def _timed_code(rest: str) -> str:
    """The statement of ``%time`` / ``%timeit`` (its options dropped)."""
    words = rest.split(" ")
    while words and (not words[0] or words[0].startswith("-")):
        word = words.pop(0)
        if word in _TIMEIT_VALUES and words:
            words.pop(0)
    return " ".join(words).strip()


def _magic(indent: str, body: str) -> tuple[list[str], str]:
    """One ``%``/``%%``/``!`` line as the Python IPython runs for it (indented like it), and a reason to
    review it when it runs code the analysis cannot read."""
    if body.startswith("!"):
        return [indent + "pass"] + [indent + expr for expr in _braces(body)], ""
    name, _, rest = body.lstrip("%").partition(" ")
    if name in _TIMED_MAGICS:
        code = _timed_code(rest)
        return [indent + (code or "pass")], ""
    plain = name in _PLAIN_MAGICS or (name in ("load_ext", "reload_ext") and rest.strip() == "tensorboard")
    reason = "" if plain else f"an IPython magic (%{name}) runs code the analysis does not read"
    return [indent + "pass"] + [indent + expr for expr in _braces(rest)], reason


def _read_magics(source: str) -> tuple[str, list[str]]:
    """``source`` with each IPython ``%magic`` and ``!shell`` line replaced by the Python it runs (``pass``,
    ``%time``'s statement, the ``{expressions}`` IPython evaluates in it), and the reasons to review them."""
    lines, reasons = [], []
    for line in source.splitlines():
        body = line.lstrip()
        if body[:1] not in ("%", "!"):
            lines.append(line)
            continue
        code, reason = _magic(line[: len(line) - len(body)], body)
        lines += code
        if reason and reason not in reasons:
            reasons.append(reason)
    return "\n".join(lines), reasons


def _strip_magics(source: str) -> str:
    """``source`` as Python: IPython's magic and shell lines as the code they run (see :func:`_read_magics`)."""
    return _read_magics(source)[0]


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


def _environ_item(target: ast.AST, aliases: dict[str, str]) -> bool:
    """``os.environ[...]`` or ``env[...]`` after ``env = os.environ`` (flagged as the environment, for review
    only): a variable set for the code."""
    if not isinstance(target, ast.Subscript):
        return False
    value = target.value
    if isinstance(value, ast.Name):
        return aliases.get(value.id, "").endswith(".environ")
    return isinstance(value, ast.Attribute) and value.attr == "environ"


def _dotted(node: ast.AST, aliases: dict[str, str]) -> list[str]:
    """A plain ``a.b.c`` chain as the dotted path it names, its first name read through the imports
    (``nn.modules`` -> torch, nn, modules); [] for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return []
    return [*aliases.get(node.id, node.id).split("."), *reversed(parts)]


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _torch_internal(parts: list[str]) -> bool:
    """``torch.library.Library``, ``torch.overrides``, ``torch.utils._python_dispatch``, ``torch._C``...: what
    replaces how torch's operators run, for every caller."""
    if parts[:1] != ["torch"]:
        return False
    if parts[1:2] == ["library"] and len(parts) > 2 and parts[2] not in _TORCH_LIBRARY_OK:
        return True
    private = [
        p for p in parts[1:] if p.startswith("_") and not _is_dunder(p) and not p.startswith(_TORCH_PRIVATE_MATH)
    ]
    return any(p in _TORCH_INTERNALS for p in parts) or any(p not in _TORCH_PRIVATE_OK for p in private)


@functools.lru_cache(maxsize=512)
def _is_module(parts: tuple[str, ...]) -> bool:
    """Does this dotted path name an installed module or package (``numpy.testing``, ``torch.nn.modules``)?
    Read from the files on disk: nothing is imported."""
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = list(spec.submodule_search_locations or [])
    for i, part in enumerate(parts[1:], start=2):
        package = [os.path.join(p, part) for p in places if os.path.isfile(os.path.join(p, part, "__init__.py"))]
        if package:
            places = package
        elif any(os.path.isfile(os.path.join(p, part + ".py")) for p in places):
            return i == len(parts)
        else:
            return False
    return True


def _assigned(parent: ast.AST | None, node: ast.AST) -> bool:
    """Is ``node`` the value of a plain ``name = node`` (an alias the analysis follows)?"""
    if isinstance(parent, ast.Assign) and parent.value is node:
        return all(isinstance(t, ast.Name) for t in parent.targets)
    return isinstance(parent, ast.AnnAssign) and parent.value is node and isinstance(parent.target, ast.Name)


def _escapes(tree: ast.AST, modules: set[str], aliases: dict[str, str]) -> list[str]:
    """A module (``lab``, ``torch``, ``sys``, ``numpy.testing``) used as a value: put in a list, passed to a
    function, bound by a loop or ``with``. The analysis follows a module's names only through imports and
    plain ``name = module`` aliases; ``m = [lab][0]`` would hide ``m.check_x = ...``."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    reasons = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in modules):
            continue
        top = node
        while isinstance(parents.get(top), ast.Attribute):
            top = parents[top]
        parent = parents.get(top)
        if not isinstance(getattr(top, "ctx", ast.Load()), ast.Load):
            continue  # assigned or deleted: the assignment's own reasons (_Visitor._target)
        called = isinstance(parent, ast.Call) and parent.func is top
        if called or isinstance(parent, ast.Subscript) and parent.value is top:
            continue  # called, or an item read: lab.require(...), os.environ["X"]
        if _assigned(parent, top):
            continue
        parts = _dotted(top, aliases)
        if top is node or _is_module(tuple(parts)):
            reasons.append(f"passes {'.'.join(parts)} on as a value (a name the analysis cannot follow)")
    return reasons


def _picked(node: ast.AST) -> list[ast.AST]:
    """The plain chains an expression picks out of a literal, a conditional or a walrus, uncalled
    (``[torch.Tensor][0]``, ``a if c else torch.Tensor``): what a name bound to it may be."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return [node] if _plain_root(node) else []
    if isinstance(node, ast.Subscript):
        return _picked(node.value) if isinstance(node.value, (ast.List, ast.Tuple, ast.Dict, ast.Set)) else []
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [c for e in node.elts for c in _picked(e)]
    if isinstance(node, ast.Dict):
        return [c for v in node.values for c in _picked(v)]
    if isinstance(node, ast.IfExp):
        return _picked(node.body) + _picked(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [c for v in node.values for c in _picked(v)]
    if isinstance(node, (ast.NamedExpr, ast.Starred)):
        return _picked(node.value)
    return []


def _reaches_a_class(node: ast.AST) -> bool:
    """Does this chain go through ``type(x)`` or ``x.__class__`` (``__base__``...): a class reached from one of
    its objects, maybe torch's or the lab's (``type(torch.zeros(1)).__sub__ = ...``)?"""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type":
            return len(node.args) == 1
        if isinstance(node, ast.Attribute) and node.attr in _CLASS_OF:
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _chain(node: ast.AST) -> list[str]:
    """The attribute names of a chain, first to last: ``["x", "check"]`` for ``T.x.check`` (calls and
    subscripts passed through)."""
    names = []
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.func if isinstance(node, ast.Call) else node.value
    return names[::-1]


def _aliased_attributes(tree: ast.AST) -> set[str]:
    """Attributes bound to a module or to an object of one (``class T: x = lab``, ``self.t = torch.Tensor``):
    ``T.x.check_power = ...`` then changes the module, under a root the analysis does not guard."""
    modules = set(_GUARDED_NAMES) | set(_SETUP_MODULES)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
    in_class = {id(item) for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for item in n.body}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        if not any(_plain_root(c) in modules for c in _picked(node.value)):
            continue
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if isinstance(target, ast.Attribute):
                found.add(target.attr)
            elif isinstance(target, ast.Name) and id(node) in in_class:
                found.add(target.id)
    return found


def _bound_names(tree: ast.AST) -> dict[str, int]:
    """How many times the cell binds each name (assignments, loops, parameters, imports, defs, classes)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names = [node.name]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = node.names * 2  # bound elsewhere too: never a constant of this cell
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _constant_names(tree: ast.Module, counts: dict[str, int]) -> set[str]:
    """Names the cell binds once, at its top level, to a string (``HEAD = "fc"``): ``getattr(model, HEAD)``
    names its attribute as plainly as ``getattr(model, "fc")`` (the string itself is read as a constant)."""
    return {
        node.targets[0].id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and counts.get(node.targets[0].id) == 1
    }


_OWN_CLASS_HOOKS = ("__new__", "__getattr__", "__getattribute__", "__setattr__")  # what makes X() or x.a another's


def _own_objects(tree: ast.Module, counts: dict[str, int]) -> tuple[set[str], set[str], set[str]]:
    """The classes the cell defines, the objects it builds from them, and the layers it builds (``nn.Linear(...)``),
    each name bound once: a function or an attribute put on such an object changes nothing of the lab's or
    torch's. None when a class of the cell could build or reach something else (``__new__``, ``__getattr__``...,
    a metaclass)."""
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for cls in classes:
        methods = {item.name for item in cls.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if cls.keywords or methods.intersection(_OWN_CLASS_HOOKS):
            return set(), set(), set()
    own = {c.name for c in classes if counts.get(c.name) == 1}
    imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    instances, layers = set(), set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call, name = node.value, node.targets[0].id
        if not isinstance(call, ast.Call) or counts.get(name) != 1:
            continue
        root = _plain_root(call.func)
        path = _dotted(call.func, {**_SETUP_MODULES, **imports})
        plain = counts.get(root or "", 0) == (root in imports or root == "torch")  # nn, torch: not rebound
        if plain and path[:2] == ["torch", "nn"] and len(path) == 3 and path[2][:1].isupper():
            layers.add(name)
        elif isinstance(call.func, ast.Name) and call.func.id in own:
            instances.add(name)
    return own, instances, layers


def _selves(tree: ast.AST, counts: dict[str, int]) -> set[str]:
    """``self``, ``ctx``, ``cls``, each bound only as the first parameter of a method of a class of the cell:
    ``def patch(self): self.allclose = ...`` outside a class is handed whatever the call passes (a module)."""
    firsts: dict[str, int] = {}
    methods: dict[tuple[str, str], str] = {}  # (class, method) -> its first parameter (not a staticmethod's)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.args.posonlyargs + item.args.args:
                first = (item.args.posonlyargs + item.args.args)[0].arg
                firsts[first] = firsts.get(first, 0) + 1
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list)
                methods[cls.name, item.name] = "" if static else first
    unbound = {  # MyClass.patch(np.testing.np): the method's self is whatever the call passes
        methods.get((n.func.value.id, n.func.attr), "")
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
    }
    return {name for name in _OWN_OBJECTS if counts.get(name, 0) == firsts.get(name, 0) and name not in unbound}


def _safe_getters(tree: ast.AST) -> set[int]:
    """The ``attrgetter``/``methodcaller`` of calls that name plain attributes in string constants
    (``attrgetter("grad")``): the ids of their function nodes. A dunder, a private name or one of the names
    this analysis watches (``_ATTRIBUTES``) keeps its reason."""
    safe = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        given = node.args[:1] if name == "methodcaller" else node.args
        if name not in ("attrgetter", "methodcaller") or not given or name == "attrgetter" and node.keywords:
            continue
        if all(isinstance(a, ast.Constant) and isinstance(a.value, str) and _plain_path(a.value) for a in given):
            safe.add(id(node.func))
    return safe


def _plain_path(text: str) -> bool:
    """``"grad"``, ``"weight.data"``: public attributes only, none that this analysis watches."""
    parts = text.split(".")
    return all(p.isidentifier() and not p.startswith("_") and p not in _ATTRIBUTES for p in parts)


def _membership_tests(tree: ast.AST) -> set[int]:
    """The ``globals``/``locals``/``vars`` of ``"x" in globals()``: a yes or no, no object reached."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            for right in node.comparators:
                if isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and not right.args:
                    if right.func.id in ("globals", "locals", "vars") and not right.keywords:
                        found.add(id(right.func))
    return found


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.guarded = set(_GUARDED_NAMES)
        self.aliases = dict(_SETUP_MODULES)  # a name bound by an import -> the module it names
        # names bound by imports of other modules (os, sys, math...), and numpy as the setup cells bind it
        self.imported: set[str] = {"np"}
        self.modules = set(_GUARDED_NAMES) | {"np"}  # names bound to modules: see _escapes
        self.classes: set[str] = set()  # names bound to a class reached through type() or __class__
        self.functions: set[str] = set()  # the names of the functions the code defines
        self.called: set[int] = set()  # the ids of the nodes called as functions (``f`` of ``f(x)``)
        self.aliased: set[str] = set()  # attributes bound to a module or its objects (``class T: x = lab``)
        self.own: set[str] = set()  # the classes the code defines (see _own_objects)
        self.instances: set[str] = set()  # the objects it builds from them
        self.layers: set[str] = set()  # the layers it builds (nn.Linear(...))
        self.constants: set[str] = set()  # names bound once to a string (see _constant_names)
        self.selves: set[str] = set(_OWN_OBJECTS)  # the names of _OWN_OBJECTS bound only as a method's own
        self.exempt: set[int] = set()  # nodes whose name says less than it seems (see suspicious)
        self.plain_getters: set[str] = set()  # attrgetter/methodcaller imported, only ever called on plain names

    def _owned(self, node: ast.AST, all_kinds: bool = True) -> bool:
        """Is ``node`` the bare name of the code's own object (``self``, an object of a class it defined; with
        ``all_kinds``, that class or a layer it built too) while no attribute of the code is bound to a
        module (``class T: x = lab``)? ``getattr(layer, "__cl" + "ass__")`` would be torch's class."""
        names = ({"self"} & self.selves) | self.instances | (self.own | self.layers if all_kinds else set())
        return isinstance(node, ast.Name) and node.id in names and not self.aliased

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
        self._submodule(name)
        if _torch_internal(name.split(".")):
            self.add("changes how torch's operators run (torch.library, torch.overrides, a private module)")

    def _submodule(self, name: str) -> None:
        for module, reason in _SUBMODULES.items():
            if name == module or name.startswith(module + "."):
                self.add(reason)

    def _bind(self, name: str, module: str) -> None:
        """``name`` bound by an import of ``module``: rebinding a name the check cells call is a reason."""
        if name in _LAB_NAMES and module.split(".")[0] != "labsupport":
            self.add(f"rebinds {name}, the name the check cells call")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name)
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            self._bind(alias.asname or alias.name.split(".")[0], alias.name)
            self.modules.add(alias.asname or alias.name.split(".")[0])
            if alias.name.split(".")[0] in _GUARDED_MODULES:
                self.guarded.add(alias.asname or alias.name.split(".")[0])
            elif alias.name.split(".")[0] not in _UNPATCHED_MODULES:
                self.imported.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._module(module)
        for alias in node.names:
            self._module(f"{module}.{alias.name}")
            plain = (alias.asname or alias.name) in self.plain_getters  # attrgetter("grad") wherever it is used
            if not plain and (alias.name in _CALLS or alias.name in _ATTRIBUTES and _ATTRIBUTES[alias.name]):
                self.add(_CALLS.get(alias.name) or _ATTRIBUTES[alias.name])
            if alias.name in _EVALUATES_STRINGS or alias.name == "*":
                self.add(_EVALUATES_STRINGS.get(alias.name, "runs code by name (a * import binds names unseen)"))
            if (module.split(".")[-1], alias.name) in _OWNED:  # from sys import modules
                self.add(_OWNED[module.split(".")[-1], alias.name])
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            self._bind(alias.asname or alias.name, module)
            if _is_module((*module.split("."), alias.name)):
                self.modules.add(alias.asname or alias.name)
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
            elif root in self.imported and not _environ_item(target, self.aliases):
                self.add(f"{verb} an attribute of the module {root}, which the checks use too")
            elif root is None:
                self.add(f"{verb} an attribute of an object reached through an expression the analysis cannot follow")
            if any(attr in self.aliased for attr in _chain(target)[:-1]):
                self.add(f"{verb} an attribute of an object reached through an attribute bound to a module")
            if root in self.classes or _reaches_a_class(target.value):
                self.add(f"{verb} an attribute of a class reached through type() or __class__ (torch's own?)")
            if isinstance(target, ast.Attribute) and (target.attr in _DUNDERS or _is_dunder(target.attr)):
                self.add(f"{verb} {target.attr}")

    def _function_into(self, owner: ast.AST, value: ast.AST) -> None:
        """A function put into an attribute of ``owner``, an object the code did not build as ``self`` (a method
        of a module or class replaced, however the analysis lost track of which: ``m.allclose = lambda *a: True``).
        An object of its own class, or a layer it built, is its own (``probe.forward = ...``)."""
        function = isinstance(value, ast.Lambda) or isinstance(value, ast.Name) and value.id in self.functions
        root = _root(owner)
        if function and root not in self.selves and not self._owned(owner):
            self.add(f"assigns a function to an attribute of {root or 'an object'} (replaces a method?)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, "assigns")
            if isinstance(target, ast.Attribute):
                self._function_into(target.value, node.value)
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        value = node.value
        if isinstance(value, (ast.Name, ast.Attribute)) and _plain_root(value) in self.guarded:
            self.guarded.update(names)  # an alias: x = torch; x.equal = ...
        elif isinstance(value, (ast.Name, ast.Attribute)) and _plain_root(value) in self.imported | self.modules:
            self.imported.update(names)  # t = numpy.testing; t.assert_allclose = ...
            path = _dotted(value, self.aliases)
            self.aliases.update(dict.fromkeys(names, ".".join(path)))
            if isinstance(value, ast.Name) or _is_module(tuple(path)):
                self.modules.update(names)
        elif any(_plain_root(c) in self.guarded | self.imported | self.modules for c in _picked(value)):
            self.guarded.update(names)  # T = [torch.Tensor][0]; T.abs = ...
        if _reaches_a_class(value):
            self.classes.update(names)  # T = type(torch.zeros(1)); T.abs = ...
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, "assigns")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, "assigns")
        self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, "deletes")
        self.generic_visit(node)

    # the names the check cells call, bound to something else than the lab
    def _rebinds(self, name: str | None) -> None:
        if name in _LAB_NAMES:
            self.add(f"rebinds {name}, the name the check cells call")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._rebinds(node.name)
        self._annotation(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._rebinds(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._rebinds(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        self._rebinds(node.name)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._rebinds(node.name)
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
        name = node.args[1] if len(node.args) > 1 else None
        named = isinstance(name, ast.Constant) or isinstance(name, ast.Name) and name.id in self.constants
        if func in _BY_NAME and len(node.args) > 1 and not named and not self._owned(node.args[0], all_kinds=False):
            self.add(f"{func}() of an attribute whose name is computed")  # getattr(shell, "input_" + ...)
        if func == "setattr" and len(node.args) == 3:
            self._function_into(node.args[0], node.args[2])
        if func == "vars" and len(node.args) == 1 and not node.keywords and self._owned(node.args[0]):
            self.exempt.add(id(node.func))  # vars(self), vars(MyClass): the code's own attributes
        if func == "type" and len(node.args) == 3:
            self.add("a class made by type() (its methods given by name)")
        self._unpickles(node)
        self._wraps(node)
        self._graph_names(node)
        self.generic_visit(node)

    def _graph_names(self, node: ast.Call) -> None:
        """A torch.fx node built on a computed name (``graph.call_method('__set' + 'attr__', ...)``): the code
        the graph runs reaches attributes and methods by names the analysis never sees."""
        method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        names = {"call_method": 1, "get_attr": 1, "call_module": 1, "create_node": 2}.get(method, 0)
        given = list(node.args[:names]) + [kw.value for kw in node.keywords if kw.arg in ("target", "qualified_name")]
        if names and any(not (isinstance(a, ast.Constant) and isinstance(a.value, str)) for a in given):
            self.add(f"reaches attributes by name (a computed name given to {method})")

    def _wraps(self, node: ast.Call) -> None:
        """``functools.update_wrapper``/``wraps`` told which attributes to copy: a ``setattr`` by names the
        analysis never sees (``assigned=['__co' + 'de__']`` gives a check the code of another function)."""
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        fixed = {"update_wrapper": 2, "wraps": 1}.get(name)
        named = any(kw.arg in ("assigned", "updated", None) for kw in node.keywords)
        if fixed is not None and (len(node.args) > fixed or named):
            self.add(f"reaches attributes by name (functools.{name} with the attributes it copies)")

    def _unpickles(self, node: ast.Call) -> None:
        """A load told to unpickle (``np.load(f, allow_pickle=True)``, ``torch.load(f, weights_only=False)``):
        a pickle runs whatever code it names, in bytes the analysis never reads."""
        for kw in node.keywords:
            safe = _UNPICKLES.get(kw.arg or "", ...)
            if kw.arg in _UNPICKLES and not (isinstance(kw.value, ast.Constant) and kw.value.value is safe):
                self.add(f"runs code by name (unpickles: {kw.arg}={ast.unparse(kw.value)[:40]})")
        loader = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if loader == "load" and len(node.args) > 2:
            self.add("runs code by name (a load whose pickle options are positional)")

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._rebinds(node.id)
        if node.id in _BY_NAME and id(node) not in self.called:
            self.add(f"reaches attributes by name ({node.id} passed on as a value)")  # reduce(getattr, names, f)
        if node.id in _EVALUATES_STRINGS:
            self.add(_EVALUATES_STRINGS[node.id])
        if node.id in _CALLS and id(node) not in self.exempt:
            self.add(_CALLS[node.id])
        elif node.id in ("__builtins__", "builtins"):
            self.add("builtins")
        elif node.id in _MODULES and node.id in ("importlib", "ctypes"):
            self.add(_MODULES[node.id])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        reason = _ATTRIBUTES.get(node.attr)
        if node.attr == "__dict__" and self._owned(node.value) or id(node) in self.exempt:
            reason = None  # MyClass.__dict__, self.__dict__; operator.attrgetter("grad")
        if reason:
            self.add(reason)
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else _root(node.value)
        owner = self.aliases.get(owner, owner or "").split(".")[-1]  # import sys as s: s.modules
        if (owner, node.attr) in _OWNED:
            self.add(_OWNED[owner, node.attr])
        path = _dotted(node, self.aliases)
        self._submodule(".".join(path))
        if node.attr in _EVALUATES_STRINGS:
            self.add(_EVALUATES_STRINGS[node.attr])
        if _torch_internal(path):
            self.add("changes how torch's operators run (torch.library, torch.overrides, a private module)")
        if path[:1] == ["IPython"] and len(path) > 1 and path[1] != "display":
            self.add(f"reaches IPython's shell (IPython.{path[1]})")
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def _annotation(self, annotation: ast.AST | None) -> None:
        """A string annotation is code that ``typing.get_type_hints`` (or a library calling it) evaluates:
        read it as code too."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                tree = ast.parse(annotation.value.strip(), mode="eval")
            except (SyntaxError, ValueError, MemoryError):
                return  # evaluating it would raise before running anything
            self.visit(tree)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and "WEIGHTS_ONLY" in node.value:
            self.add("runs code by name (an environment variable that lets torch.load unpickle)")
        if isinstance(node.value, str) and "/proc" in node.value:
            self.add("reads /proc")
        elif isinstance(node.value, str) and node.value in _ATTRIBUTES and _ATTRIBUTES[node.value]:
            self.add(_ATTRIBUTES[node.value] + " (by name)")
        elif isinstance(node.value, str) and node.value in _DUNDERS:
            self.add(f"a class that defines {node.value} (by name)")  # type("X", (), {"__eq__": ...})


# Characters of one cell the analysis reads (the longest solution of the series has 2,500): parsing 10 MB of
# code takes the grader's worker 45 s and 4 GB, and a handed-in file may hold 256 MB.
MAX_ANALYSED = 200_000


def suspicious(source: str) -> list[str]:
    """Short reasons to review this solution code; [] when nothing in it reaches past the exercise."""
    if len(source) > MAX_ANALYSED:
        return [f"the code cannot be analysed (longer than {MAX_ANALYSED:,} characters): review it by hand"]
    text, magics = _read_magics(source)
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
    visitor.functions = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    visitor.called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    visitor.aliased = _aliased_attributes(tree)
    counts = _bound_names(tree)
    visitor.constants = _constant_names(tree, counts)
    visitor.own, visitor.instances, visitor.layers = _own_objects(tree, counts)
    visitor.selves = _selves(tree, counts)
    visitor.exempt = _membership_tests(tree) | _safe_getters(tree)
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in ("attrgetter", "methodcaller")]
    visitor.plain_getters = {n.id for n in loads} - {n.id for n in loads if id(n) not in visitor.exempt}
    try:
        visitor.visit(tree)
        for reason in [*magics, *_escapes(tree, visitor.modules, visitor.aliases)]:
            visitor.add(reason)
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
    "where imports come from",
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
    "an IPython magic",
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
    if len(source) > MAX_ANALYSED:
        return reasons
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
        if len(source) > MAX_ANALYSED:
            continue
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
    "where imports come from",
    "the kernel's program",
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
    "vars()",  # vars() is locals(); vars(np) a module's namespace, written like a dict (not the code's own)
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
    "rebinds",
    "as a value",
    "torch's operators",
    "a global hook",
    "reached through",
    "at every fork",
    "a function to an attribute",
    "does not parse",  # IPython runs what Python cannot parse (x = !ls, obj?): its code was never read
    "cannot be analysed",
    "nests too deep",
)


def forging(reasons: list[str]) -> list[str]:
    """The reasons (of :func:`suspicious`) that could change a check's verdict in the kernel."""
    return [r for r in reasons if any(key in r for key in _FORGING)]

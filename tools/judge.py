"""The grader's trusted verdict: the lab's real check, run where the student's code cannot reach it.

The submission runs in its sandboxed kernel (tools/grade_kernel.py). For an exercise whose
check cell is a plain call, ``lab.check_x(name1, name2)``, the grader (this module, in the
grader's own worker process, which never runs student code) then asks the kernel for each
named object, over the kernel protocol, as data only:

* a plain value (tensors, numbers, strings, bools, None, torch.Size, dtypes, and lists,
  tuples and dicts of them) comes back BY VALUE: ``torch.save`` in the kernel,
  ``torch.load(..., weights_only=True)`` here (no class of the student's can be rebuilt),
  then every tensor subclass and every subclass of str/int/float/bool is turned into the
  plain type (an always-equal ``__eq__`` is gone);
* a plain function comes back as a :class:`Remote`: calling it sends its arguments to the
  kernel the same way, runs the student's function there (with the caller's grad mode
  and a time limit) and returns its result, and the arguments as they are after the call
  (so "changed its argument in place" is still seen), by value;
* anything else (a class, a module, an object) comes back as an :class:`Opaque` that the
  check refuses like any wrong answer.

The check itself (``labsupport.checks``) runs HERE, on those values, with this process's
own torch: patching ``torch.allclose``, ``run_cases``, ``lab.check_*``, IPython's error
display or input transformers in the kernel changes nothing, and printing ``PASS`` there
earns nothing. Which checks run like this is :data:`TRUSTED` (tests/test_grade_judge.py
pins it); the others (modules, classes, autograd graphs, timing) keep the kernel's verdict,
and their rows are flagged for review when the code analysis of tools/flags.py fires.

A prediction's answer is the student's FIRST answer: the ``recorded answer: ...`` line the
check printed in the submitted notebook (:func:`recorded_answer`), else the kernel's value.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import inspect
import io
import math
import os
import random
import re
import secrets
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

#: The checks the grader judges itself, by the check function's name. "both": the trusted run
#: decides, and the kernel's own run of the check must pass too (it sees what no copy can: a
#: call of autograd inside the student's function, a global changed); "value": the trusted run
#: alone decides (predictions: the first answer recorded in the notebook is the one judged).
#: A check not listed (a new exercise, a module or class, a timing) keeps the kernel's verdict.
TRUSTED: dict[str, str] = {
    "check_titan_tensor_peak": "both",
    "check_cpu_peak_flops": "both",
    "check_matmul_size_prediction": "value",
    "check_roofline": "both",
    "check_pairwise_sq_dists": "both",
    "check_storage_prediction": "value",
    "check_correct_class_scores": "both",
    "check_keep_above_row_mean": "both",
    "check_channels_first_rows": "both",
    "check_per_sample_matmul": "both",
    "check_linear_layer": "both",
    "check_relu_layer": "both",
    "check_loss_and_grads": "both",
    "check_lr_prediction": "value",
    "check_predicted_gradients": "both",
    "check_backward_twice_prediction": "value",
    "check_vjp_prediction": "value",
    "check_second_derivative_prediction": "value",
    "check_sigmoid_prediction": "value",
    "check_layer_list_prediction": "value",
    "check_sweep_prediction": "value",
    "check_workers_prediction": "value",
    "check_vgg_share_prediction": "value",
    "check_fullgraph_prediction": "value",
    "check_to_prediction": "value",
    "check_speedup_prediction": "value",
}

MIME = "application/x-lab-grade"  # the kernel's replies: display data of this type, base64 of torch.save
MAX_REPLY = 32 * 2**20  # characters of one reply
MAX_ELEMENTS = 2**26  # elements of the tensors of one reply (a stride-0 view could claim far more than it holds)
MAX_LITERAL = 2**22  # characters of a reply as a Python literal (ast.literal_eval's tree is ~100x its text)


class KernelLost(BaseException):
    """The kernel timed out or died while answering: a BaseException, so no check's
    ``except Exception`` swallows it; the grader restarts the kernel."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class NoReply(Exception):
    """The kernel sent no readable reply (its display machinery broken, a reply too large)."""


@dataclass
class CheckCall:
    """A check cell that is one plain call: ``lab.check_x(a, b)`` (or ``name = lab.check_x(a)``)."""

    check: str
    args: list[Any]  # a name (str) of the kernel's, or a Const written in the cell
    kwargs: dict[str, Any] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [a for a in [*self.args, *self.kwargs.values()] if isinstance(a, str)]


@dataclass(frozen=True)
class Const:
    """A literal written in the check cell itself (``lab.check_x(f, 3)``)."""

    value: Any


def check_call(source: str) -> CheckCall | None:
    """The check and the names a check cell passes it, by parsing the cell; None when the cell
    is anything but one call of a ``check_*`` function with plain names as arguments."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    stmt = tree.body[0]
    call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if not name.startswith("check_"):
        return None
    args = [_argument(a) for a in call.args]
    kwargs = {k.arg: _argument(k.value) for k in call.keywords}
    if None in args or None in kwargs.values() or None in kwargs:
        return None
    return CheckCall(name, args, kwargs)


def _argument(node: ast.AST) -> Any:
    """A name, a literal (Const), or None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    try:
        return Const(ast.literal_eval(node))
    except (ValueError, SyntaxError, TypeError):
        return None


# --------------------------------------------------------------------------- what the kernel runs

# Runs in the kernel, as a hidden cell: it reads the student's namespace and replies with data.
# Nothing in it is trusted: the student's code may have replaced anything it uses, which can
# only change the data sent back, never how this side reads it.
_KERNEL_SIDE = r"""
def _lab_grade_request(_nonce, _what, _arg):
    import ast, base64, functools, inspect, io, math, sys, types
    from IPython.display import publish_display_data
    torch = sys.modules.get("torch")  # a notebook that never imported torch has no tensor to send

    def pack(obj, depth=0):
        if depth > 20:
            return {"__lab_opaque__": "a value nested too deep"}
        if torch is not None and isinstance(obj, torch.Tensor):
            copy = obj.detach().as_subclass(torch.Tensor)
            return copy.requires_grad_() if obj.requires_grad and copy.is_floating_point() else copy
        if isinstance(obj, float) and not math.isfinite(obj):
            return {"__lab_float__": repr(float(obj))}
        if obj is None or type(obj) in (bool, int, float, complex, str, bytes):
            return obj
        for plain in (int, float, complex, str, bytes):  # a subclass (numpy's float64, a str whose == lies): its value
            if isinstance(obj, plain):
                return pack(plain(obj), depth + 1)
        if torch is not None and isinstance(obj, (torch.dtype, torch.device, torch.Size)):
            return obj
        if type(obj).__module__ == "numpy" and getattr(obj, "size", 2) == 1 and hasattr(obj, "item"):
            return pack(obj.item(), depth + 1)
        if isinstance(obj, (list, tuple)):
            items = [pack(x, depth + 1) for x in obj]
            return tuple(items) if isinstance(obj, tuple) and type(obj) is tuple else items
        if isinstance(obj, dict):
            return {k: pack(v, depth + 1) for k, v in obj.items()}
        return {"__lab_opaque__": f"a {type(obj).__name__} object"}

    def encode(obj):
        if torch is None:
            return "L" + repr(obj)
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        return "T" + base64.b64encode(buffer.getvalue()).decode()

    def decode(text):
        if text[:1] == "L":
            return ast.literal_eval(text[1:])
        import torch
        return torch.load(io.BytesIO(base64.b64decode(text[1:])), weights_only=True)

    def describe(obj):
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)):
            try:
                params = [[p.name, int(p.kind), p.default is not p.empty] for p in inspect.signature(obj).parameters.values()]
            except (TypeError, ValueError):
                params = None
            return {"function": getattr(obj, "__name__", "function"), "params": params}
        return {"value": pack(obj)}

    def reply(body):
        publish_display_data({"MIME_TYPE": encode({"nonce": _nonce, **body})})

    ns = get_ipython().user_ns
    if _what == "fetch":
        reply({"objects": {name: (describe(ns[name]) if name in ns else {"missing": True}) for name in _arg}})
        return
    name, args, kwargs, grad = decode(_arg)
    torch = sys.modules.get("torch")
    try:
        if torch is None:
            result = ns[name](*args, **kwargs)
        else:
            with torch.set_grad_enabled(grad):
                result = ns[name](*args, **kwargs)
    except BaseException as exc:
        reply({"raised": [type(exc).__name__, str(exc)[:2000]], "args": pack(list(args))})
        return
    reply({"result": pack(result), "args": pack(list(args))})
""".replace("MIME_TYPE", MIME)


class Channel:
    """Requests to one sandboxed kernel (tools/grade.py's ``Kernel``), replies read as data only."""

    def __init__(self, kernel: Any, timeout: float) -> None:
        self.kernel = kernel
        self.timeout = timeout
        self.calls = 0

    def request(self, what: str, arg: Any, timeout: float | None = None) -> dict:
        import nbformat

        nonce = secrets.token_hex(8)
        # exec of one string: IPython tokenizes a cell before it runs it, one token here instead of ~1,000
        code = f"exec({_KERNEL_SIDE!r})\n_lab_grade_request({nonce!r}, {what!r}, {arg!r}); del _lab_grade_request"
        cell = nbformat.v4.new_code_cell(code)
        limit = timeout or self.timeout
        client = self.kernel.client
        kept = client.max_output
        client.max_output = MAX_REPLY
        blocked = _block_alarm()
        try:
            outcome, _ = self.kernel.run(cell, -1, max(1, math.ceil(limit)), hidden=True)
        finally:
            client.max_output = kept
            _unblock_alarm(blocked)
        self.calls += 1
        if outcome in ("timeout", "dead"):
            raise KernelLost(outcome)
        texts = [o.get("data", {}).get(MIME) for o in cell.outputs if o.get("output_type") == "display_data"]
        texts = [t for t in texts if isinstance(t, str)]
        if not texts:
            raise NoReply("the kernel sent no reply (its display machinery replaced, or the reply too large)")
        body = decode(texts[-1])
        if not isinstance(body, dict) or body.get("nonce") != nonce:
            raise NoReply("the kernel's reply does not answer the request")
        return body


def _block_alarm() -> bool:
    """Hold a check's time limit (SIGALRM) while the kernel is asked: it rings after the reply,
    never inside the kernel client's event loop."""
    if not hasattr(signal, "pthread_sigmask"):
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    return True


def _unblock_alarm(blocked: bool) -> None:
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})


# --------------------------------------------------------------------------- data from the kernel


class Opaque:
    """Something the kernel cannot send as data (a class, a module, an object of the student's)."""

    def __init__(self, what: str) -> None:
        self.what = str(what)[:100]

    def __repr__(self) -> str:
        return f"<{self.what}, which the grader cannot copy out of your kernel>"


def decode(text: str) -> Any:
    """A reply as plain Python and torch values: ``L`` and a Python literal (``ast.literal_eval``), or
    ``T`` and base64 of ``torch.save`` (loaded with ``weights_only=True``: no class of the student's)."""
    if len(text) > (MAX_LITERAL if text[:1] == "L" else MAX_REPLY):
        raise NoReply("the kernel's reply is too large")
    try:
        if text[:1] == "L":
            obj = ast.literal_eval(text[1:])
        elif text[:1] == "T":
            import torch

            raw = base64.b64decode(text[1:])
            _stored_zip(raw)
            obj = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
        else:
            raise ValueError("an unknown format")
    except (Exception, MemoryError, RecursionError) as exc:
        raise NoReply(f"the kernel's reply is not plain data ({type(exc).__name__})") from None
    return plain(obj, budget=[MAX_ELEMENTS])


def _stored_zip(raw: bytes) -> None:
    """Refuse what ``torch.save`` never writes: another format than its zip, a compressed entry (a zip
    bomb: a few MB that inflate to more than the grader's memory), entries larger than the reply."""
    import zipfile

    if raw[:2] != b"PK":
        raise ValueError("not torch.save's zip format")
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        infos = zf.infolist()
    if any(info.compress_type != zipfile.ZIP_STORED for info in infos):
        raise ValueError("a compressed entry")
    if sum(info.file_size for info in infos) > len(raw):
        raise ValueError("entries larger than the reply")


def encode(obj: Any) -> str:
    """``obj`` (the grader's own values) for the kernel: a literal when it holds no torch object."""
    if not _has_torch(obj):
        return "L" + repr(obj)
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return "T" + base64.b64encode(buffer.getvalue()).decode()


def _has_torch(obj: Any) -> bool:
    if isinstance(obj, (list, tuple)):
        return any(_has_torch(x) for x in obj)
    if isinstance(obj, dict):
        return any(_has_torch(x) for x in obj.values())
    if isinstance(obj, float):
        return not math.isfinite(obj)  # repr(nan) is no literal: torch.save keeps it
    return type(obj).__module__.startswith("torch")


def plain(obj: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """``obj`` rebuilt from plain types only: tensors as ``torch.Tensor`` (no subclass), numbers
    and strings as exactly int, float, bool, complex, str (no always-equal subclass). ``budget``:
    the elements its tensors may still copy (one list shared by the whole value), else MAX_ELEMENTS."""
    torch = sys.modules.get("torch")  # no tensor was loaded unless torch was
    budget = [MAX_ELEMENTS] if budget is None else budget
    if depth > 30:
        return Opaque("a value nested too deep")
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.numel() > budget[0]:  # many stride-0 views of one number: each copy would be whole
            return Opaque(f"a tensor of {obj.numel()} elements, more than the grader copies")
        budget[0] -= obj.numel()
        flag = bool(obj.requires_grad)
        return obj.detach().as_subclass(torch.Tensor).clone().requires_grad_(flag and obj.is_floating_point())
    if obj is None or type(obj) in (bool, int, float, complex, str, bytes):
        return obj
    for kind in (bool, int, float, complex, str, bytes):
        if isinstance(obj, kind):
            return kind(obj)
    if torch is not None and isinstance(obj, (torch.dtype, torch.device)):
        return obj
    if torch is not None and isinstance(obj, torch.Size):
        return torch.Size(int(n) for n in obj)
    if isinstance(obj, dict):
        if set(obj) == {"__lab_opaque__"}:
            return Opaque(str(obj["__lab_opaque__"]))
        if set(obj) == {"__lab_float__"} and obj["__lab_float__"] in ("nan", "inf", "-inf"):
            return float(obj["__lab_float__"])
        return {plain(k, depth + 1, budget): plain(v, depth + 1, budget) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(plain(x, depth + 1, budget) for x in obj)
    if isinstance(obj, list):
        return [plain(x, depth + 1, budget) for x in obj]
    return Opaque(f"a {type(obj).__name__} object")


_EXCEPTIONS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (StopIteration, StopAsyncIteration))
}


class Remote:
    """A function of the student's kernel, called from here: arguments and results travel by value."""

    def __init__(self, channel: Channel, name: str, params: list | None) -> None:
        self._channel, self._name = channel, name
        self.__name__ = self.__qualname__ = name
        if params is not None:
            with contextlib.suppress(ValueError, TypeError):
                self.__signature__ = inspect.Signature(
                    [
                        inspect.Parameter(p, inspect._ParameterKind(kind), default=_Default if has else inspect._empty)
                        for p, kind, has in params
                    ]
                )

    def __repr__(self) -> str:
        return f"<your function {self._name} (in your kernel)>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        torch = sys.modules.get("torch")
        for value in [*args, *kwargs.values()]:
            if callable(value):
                raise TypeError("the grader cannot pass a function or a module to your kernel")
        left = signal.getitimer(signal.ITIMER_REAL)[0] if hasattr(signal, "getitimer") else 0
        limit = min(left, self._channel.timeout) if left else self._channel.timeout
        grad = torch.is_grad_enabled() if torch is not None else True
        payload = encode((self._name, list(args), dict(kwargs), grad))
        body = self._channel.request("call", payload, timeout=limit + 1)
        _copy_back(args, body.get("args"))
        if "raised" in body:
            kind, message = (list(body["raised"]) + ["", ""])[:2]
            cls = _EXCEPTIONS.get(str(kind), RuntimeError)
            if cls is KernelLost or not issubclass(cls, Exception):
                cls = RuntimeError
            raise cls(str(message) if cls is not RuntimeError or kind == "RuntimeError" else f"{kind}: {message}")
        return body.get("result")


class _DefaultType:
    def __repr__(self) -> str:
        return "<its default>"


_Default = _DefaultType()


def _copy_back(args: tuple, after: Any) -> None:
    """Write into the caller's tensors what the student's function left in its copies of them."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(after, list) or len(after) != len(args):
        return
    for mine, theirs in zip(args, after):
        if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor):
            with torch.no_grad():
                if mine.shape == theirs.shape and mine.dtype == theirs.dtype:
                    mine.copy_(theirs)
                else:
                    mine.data = theirs.detach().clone()


def fetch(channel: Channel, names: list[str]) -> dict[str, Any]:
    """The kernel's objects of these names: values, :class:`Remote` functions or :class:`Opaque`."""
    body = channel.request("fetch", list(names))
    objects = body.get("objects") if isinstance(body.get("objects"), dict) else {}
    found: dict[str, Any] = {}
    for name in names:
        entry = objects.get(name)
        if not isinstance(entry, dict) or entry.get("missing"):
            raise NameError(f"name {name!r} is not defined")
        if "function" in entry:
            params = entry.get("params")
            ok = isinstance(params, list) and all(
                isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and type(p[1]) is int for p in params
            )
            found[name] = Remote(channel, name, params if ok else None)
        else:
            found[name] = entry.get("value")
    return found


class KernelNamespace(dict):
    """The kernel's names for the instructor's extra cases: each read fetches it (value or function)."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel

    def __missing__(self, name: str) -> Any:
        try:
            value = fetch(self._channel, [name])[name]
        except NameError:
            raise KeyError(name) from None
        if isinstance(value, Opaque):
            raise NotCopyable(name)
        self[name] = value
        return value

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default


class NotCopyable(KeyError):
    """An extra case asked for a name the kernel cannot send as data (a class, a module)."""


# --------------------------------------------------------------------------- the first answer of a prediction

_RECORDED = re.compile(r"recorded answer: ")


def recorded_answer(outputs: list) -> tuple[bool, Any]:
    """(True, the answer) from a prediction check's stored output (``recorded answer: 'slice'``), the
    student's first committed answer; (False, None) when the outputs hold none."""
    found = recorded_answers(outputs, limit=1)
    return (True, found[0]) if found else (False, None)


MAX_RECORDED = 20  # recorded answers read from one output: each check run prints one
MAX_SCANNED = 100  # "recorded answer: " read from one output, an answer after it or not (a stored output is the
# student's: 100,000 of them in 2 MB took the grader 68 s, and 200 MB would take days, with no time limit)
MAX_TRIES = 50  # places an answer may end at (a ")" or a ","), tried on one line


def recorded_answers(outputs: list, limit: int = MAX_RECORDED) -> list[Any]:
    """Every answer the stored output records, in order (each run of a prediction's check prints the first
    answer it committed: more than one differing answer means a kernel restart, or an output edited by hand).
    A ``recorded answer:`` inside an answer read is part of that answer, not an answer of its own. At most
    :data:`MAX_SCANNED` of them are read, each in a bounded time, however long the output."""
    text = "".join(str(o.get("text", "")) for o in outputs if isinstance(o, dict) and o.get("output_type") == "stream")
    found: list[Any] = []
    at = 0
    for _ in range(MAX_SCANNED):
        match = _RECORDED.search(text, at) if len(found) < limit else None
        if not match:
            break
        value, length = _literal_at(text, match.end())
        if length:
            found.append(value)
        at = match.end() + length
    return found


def _literal_at(text: str, start: int) -> tuple[Any, int]:
    """The Python literal at ``text[start:]`` up to a ``)`` or ``,`` on its line, and its length (0: none)."""
    rest = text[start : start + 2000].split("\n", 1)[0]  # an answer is short: no copy of the rest of the text
    ends = [end for end, char in enumerate(rest) if char in "),"][:MAX_TRIES]
    for end in ends:
        try:
            return ast.literal_eval(rest[:end]), end
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
    return None, 0


# --------------------------------------------------------------------------- the verdict


@dataclass
class Verdict:
    passed: bool
    feedback: str
    fraction: float = 0.0  # the share of points: 1 on a pass, else the cases passed (partial credit)
    outcome: str = "ok"  # "ok", or "timeout" / "dead" when the kernel was lost while answering
    cases: tuple[int, int] = (0, 0)  # (passed, run) over the check's run_cases calls, with partial credit
    current: Any = None  # the kernel's value of the first argument (a prediction: the answer cell's now)
    mistake: str = ""  # the named mistake of the check's failure, read from the CheckError, not from any text

    @property
    def fraction_if_failed(self) -> float:
        """The share of points when every case passed but something else failed (one more failed case)."""
        passed, run = self.cases
        return passed / (run + 1) if run else 0.0


def checks_module(name: str = "labsupport") -> Any:
    """The module whose ``check_*`` functions are the real checks (labsupport; a test's own module),
    imported in this trusted process and set up as the grader's kernels are (named mistakes, CPU)."""
    import importlib
    import importlib.util

    os.environ.setdefault("LAB_DEVICE", "cpu")
    os.environ["LAB_FEEDBACK"] = "named"
    if not name.endswith(".py"):
        return importlib.import_module(name)
    if name not in sys.modules:  # a file: a test's own checks
        spec = importlib.util.spec_from_file_location(os.path.basename(name)[:-3], name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def _engine(module: Any) -> tuple[Any, Any]:
    """Where the module keeps its run_cases settings (``CASE_TALLY``, ``TIME_LIMIT``) and its
    ``reset_feedback``: labsupport.checks.running and .feedback, or the module itself."""
    if getattr(module, "__name__", "") == "labsupport":
        from labsupport.checks import feedback, running

        return running, feedback
    return module, module


def judge(
    channel: Channel,
    call: CheckCall,
    *,
    module: str = "labsupport",
    answer: tuple[bool, Any] = (False, None),
    partial: bool = False,
    timeout: float = 60.0,
) -> Verdict:
    """Run ``call``'s real check here, on the kernel's objects of those names (the first argument
    replaced by ``answer`` when it holds a recorded prediction)."""
    checks = checks_module(module)
    check = getattr(checks, call.check, None)
    if check is None or not callable(check):
        return Verdict(False, f"the grader knows no check named {call.check}")
    try:
        objects = fetch(channel, call.names())
    except KernelLost as lost:
        return Verdict(False, "", outcome=lost.outcome)
    except (NameError, NoReply) as exc:
        return Verdict(False, f"{type(exc).__name__}: {exc}")
    args = [objects[a] if isinstance(a, str) else a.value for a in call.args]
    current = args[0] if args else None
    if answer[0] and args:
        args[0] = plain(answer[1])
    kwargs = {k: objects[v] if isinstance(v, str) else v.value for k, v in call.kwargs.items()}
    verdict = _run_check(check, args, kwargs, checks, partial=partial, timeout=timeout)
    verdict.current = current
    return verdict


def _fresh(module: Any, timeout: float) -> None:
    """The same start for every student: no failures remembered, no committed prediction, seeds."""
    running, feedback = _engine(module)
    reset = getattr(feedback, "reset_feedback", None)
    if callable(reset):
        reset()
    if hasattr(running, "TIME_LIMIT"):
        running.TIME_LIMIT = timeout
    random.seed(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)


def _run_check(check, args, kwargs, module, *, partial: bool, timeout: float) -> Verdict:
    """One check run in this process, its stdout captured: PASS and no exception, or why not."""
    _fresh(module, timeout)
    running, _ = _engine(module)
    tally: list[tuple[int, int]] = []
    running.CASE_TALLY = tally if partial else None
    printed = io.StringIO()
    error: BaseException | None = None
    try:
        with contextlib.redirect_stdout(printed):
            check(*args, **kwargs)
    except KernelLost as lost:
        return Verdict(False, "", outcome=lost.outcome)
    except Exception as exc:  # a CheckError (labsupport's exercise decorator turns any other error into one)
        error = exc
    finally:
        running.CASE_TALLY = None
    passes = [line.strip() for line in printed.getvalue().splitlines() if line.startswith("PASS")]
    cases = (sum(p for p, _ in tally), sum(t for _, t in tally))
    if error is None and passes:
        return Verdict(True, "\n".join(passes), 1.0, cases=cases)
    if error is None:
        said = printed.getvalue().strip()
        return Verdict(False, said or "the check printed no PASS line", 0.0, cases=cases)
    named = getattr(error, "mistake", None)
    return Verdict(
        False, _message(error), _fraction(tally), cases=cases, mistake=named if isinstance(named, str) else ""
    )


def _fraction(tally: list[tuple[int, int]]) -> float:
    """The share of cases passed; a failure outside the cases counts as one more failed case."""
    passed = sum(p for p, _ in tally)
    total = sum(t for _, t in tally)
    if total == 0:
        return 0.0
    if passed == total:
        total += 1
    return passed / total


def _message(error: BaseException) -> str:
    """A failure as the student's kernel shows it (the check's block, without its first line)."""
    try:  # the message may print the student's values: an int too long for decimal raises ValueError
        rendered = getattr(error, "rendered", None)
        if callable(rendered):
            lines = rendered()
            return "\n".join(line.rstrip() for line in lines[1:] if line.strip()).strip()
        return _said(error)
    except Exception as exc:
        return f"{type(error).__name__} (its message could not be printed: {type(exc).__name__})"


def _said(error: BaseException) -> str:
    """``"Kind: message"``, or the kind alone when the message cannot be printed (it holds a value of the student's)."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception as exc:
        return f"{type(error).__name__} (its message could not be printed: {type(exc).__name__})"


def run_extra(channel: Channel, function: Any, module: str = "labsupport", timeout: float = 60.0) -> tuple[str, str]:
    """Run one instructor extra case here, on the kernel's names: ("pass" | "fail" | "kernel"
    (it needs a name the kernel cannot send: run it there) | "timeout" | "dead", the message)."""
    checks = checks_module(module)
    _fresh(checks, timeout)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            function(KernelNamespace(channel))
    except KernelLost as lost:
        return lost.outcome, ""
    except NotCopyable as exc:
        return "kernel", f"{exc.args[0]} is not plain data"
    except Exception as exc:
        return "fail", _said(exc)[:2000]
    return "pass", ""

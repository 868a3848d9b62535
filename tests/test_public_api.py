"""labsupport holds only what notebooks share: every public name is called by a notebook and
documented, and no function grows past 60 lines. (There is no cap on the package's size: readable
code is the goal, not few lines.)"""

import ast
import inspect
import json
import re
from pathlib import Path

import labsupport as lab

ROOT = Path(__file__).resolve().parent.parent
# What a notebook calls, or tells the student to call (`lab.show_traceback()` in a markdown cell).
NOTEBOOK_CODE = "\n".join(
    "".join(c["source"])
    for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
    for c in json.loads(p.read_text())["cells"]
)
NOTEBOOK_CODE += "\n".join(p.read_text() for p in (ROOT / "notebooks").glob("*.py"))


def public_names():
    return sorted(n for n in dir(lab) if not n.startswith("_") and not inspect.ismodule(getattr(lab, n)))


def test_every_public_name_is_called_by_a_notebook():
    unused = [n for n in public_names() if not re.search(rf"\blab\.{re.escape(n)}\b", NOTEBOOK_CODE)]
    assert not unused, f"public labsupport names no notebook uses (make them private or delete them): {unused}"


def test_every_public_function_and_class_has_a_docstring():
    missing = [
        n
        for n in public_names()
        if (inspect.isfunction(getattr(lab, n)) or inspect.isclass(getattr(lab, n)))
        and not inspect.getdoc(getattr(lab, n))
    ]
    assert not missing, f"no docstring: {missing}"


def test_no_function_is_longer_than_60_lines():
    long = []
    for path in sorted((ROOT / "labsupport").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, f"functions over 60 lines: {long}"

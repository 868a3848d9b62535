"""Every public labsupport name is documented and exercised by at least one test."""
import inspect
import re
from pathlib import Path

import labsupport as lab

TESTS = Path(__file__).resolve().parent


def public_names():
    return sorted(n for n in dir(lab) if not n.startswith("_") and not inspect.ismodule(getattr(lab, n)))


def test_every_public_function_and_class_has_a_docstring_with_an_example():
    missing = []
    for name in public_names():
        obj = getattr(lab, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            doc = inspect.getdoc(obj) or ""
            if "Example" not in doc and ">>>" not in doc:
                missing.append(name)
    assert not missing, f"no docstring example: {missing}"


def test_every_public_name_is_used_in_a_test():
    text = "\n".join(p.read_text() for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name)
    unused = [n for n in public_names() if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert not unused, f"public labsupport names no test uses: {unused}"

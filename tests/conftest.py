"""Fixtures of the unit tests."""

import gc
import os

import pytest

# A Mistake's predicate that fails on a name or an import of the lab's own (a typo, a missing import) raises in
# the tests instead of reading as "no match" (labsupport/checks/values.py, matches); students never set it.
os.environ.setdefault("LAB_STRICT_PREDICATES", "1")

from labsupport.checks import core


@pytest.fixture(autouse=True)
def fresh_feedback():
    """Each test starts with a kernel that has seen no failure and no committed prediction."""
    core.reset_feedback()
    yield
    core.reset_feedback()


def pytest_unconfigure(config):
    """The tests are done: this process's objects are moved out of the garbage collector's sight
    (``gc.freeze``), so that Python does not walk them again and again as it exits. A worker that ran
    the in-process Run-all holds half a million of them: 5-6 s of exit became 0.3 s (benchmarks/RESULTS.md).
    tempfile's folders still go: their weakref.finalize runs at exit, collected or not."""
    gc.freeze()

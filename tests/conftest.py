"""Fixtures of the unit tests."""

import pytest

from labsupport.checks import core


@pytest.fixture(autouse=True)
def fresh_feedback():
    """Each test starts with a kernel that has seen no failure and no committed prediction."""
    core.reset_feedback()
    yield
    core.reset_feedback()

"""Chromium for the browser tests: where it is, and what a test does when it is missing.

Locally a browser test skips without Chromium; under ``CI=true`` it fails instead, so a
green CI means the browser tests ran (``.ci/run`` installs Chromium). ``LAB_CHROMIUM``
names the browser to use instead of looking on PATH (a path or a program name).
"""

import os
import shutil

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
MISSING = "Chromium is not installed (apt-get install chromium)"


def find_chromium() -> str | None:
    """Chromium's path: ``LAB_CHROMIUM`` if set, else the first of NAMES on PATH; None if none."""
    chosen = os.environ.get("LAB_CHROMIUM")
    if chosen:
        return shutil.which(chosen)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def in_ci() -> bool:
    """Whether this runs in CI (``CI=true``, as GitHub Actions and GitLab set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def chromium_or_skip() -> str:
    """Chromium's path; without one, skip the test with MISSING, or fail with it in CI."""
    found = find_chromium()
    if found:
        return found
    reason = MISSING
    chosen = os.environ.get("LAB_CHROMIUM")
    if chosen:
        reason += f"; LAB_CHROMIUM={chosen!r} names no program"
    if in_ci():
        pytest.fail(f"{reason} (CI=true: browser tests must run)", pytrace=False)
    pytest.skip(reason)

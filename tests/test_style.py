"""The code follows the ruff configuration in pyproject.toml (what `make lint` checks)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_check_is_clean():
    result = subprocess.run([*RUFF, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-1000:]


def test_ruff_format_leaves_every_file_as_it_is():
    result = subprocess.run([*RUFF, "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-1000:]

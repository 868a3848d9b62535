"""Test-run set-up shared by tests/, the notebooks (nbval) and labsupport's doctests:
each test process gets its kernels from a zygote that imported torch once
(tests/forkkernel.py; ``LAB_FORK_KERNELS=0`` for stock kernels)."""
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import forkkernel  # noqa: E402

ZYGOTE = pytest.StashKey[tuple]()


def pytest_configure(config):
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the xdist controller runs no test
    folder = Path(tempfile.mkdtemp(prefix="lab-kernels-"))
    config.stash[ZYGOTE] = (forkkernel.start(folder), folder)


def pytest_unconfigure(config):
    zygote, folder = config.stash.get(ZYGOTE, (None, None))
    forkkernel.stop(zygote)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)

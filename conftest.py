"""Test-run set-up shared by tests/, the notebooks (nbval) and labsupport's doctests.

- Kernels and workers: every kernel of the session, and xdist's workers, are forked from
  one zygote that imported torch once (tools/forkkernel.py; ``LAB_FORK_KERNELS=0`` for
  stock ones). The controller starts it; the workers find it through the environment.
- Early work: torch-free work that a fixture needs (the site's build) starts in the
  controller at once, on the core that would idle while the zygote imports torch.
- Scheduling (``make test``: ``-n TEST_JOBS --dist loadscope --no-loadscope-reorder``): a
  worker takes a whole notebook, test class or module at a time; the longest go first, so
  that the workers finish together; and a TensorBoard read-back test runs right after nbval
  ran its notebook, on the same worker, and reads the runs that nbval's execution logged
  (the ``nbval_runs`` fixture) instead of training again.
"""
import gc
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import forkkernel  # noqa: E402

# Every Python this run starts (workers, the zygote, the notebooks' subprocesses) skips its
# final garbage collection: see tools/fastexit/sitecustomize.py.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tools" / "fastexit"), os.environ.get("PYTHONPATH")]))

ZYGOTE = pytest.StashKey[tuple]()
EARLY = pytest.StashKey[dict]()
# Torch-free work the controller starts at once, on the core that idles while the zygote
# imports torch (8 s); a fixture then takes its result (the ``early`` fixture). name ->
# (the test module that uses it, the command writing into the folder it is given).
EARLY_WORK = {"site": ("tests/test_site.py", lambda out: [sys.executable, str(ROOT / "tools" / "site.py"), "--out", out])}
# Seconds each unit took in `make test` on a 2-core machine (the durations report); the
# longest are handed out first. A unit not listed counts as a few seconds.
SECONDS = {"notebooks/10_scaling_up.ipynb": 39,
           "notebooks/07_data_loading.ipynb": 31, "tests/test_grade.py": 25, "notebooks/06_optim.ipynb": 22,
           "tests/test_colab.py": 17, "notebooks/09_static_and_dynamic_graphs.ipynb": 15,
           "tests/test_checks_datasets.py": 15, "tests/test_bad_input.py": 14,
           "notebooks/08_pretrained_models.ipynb": 14, "tests/test_slowdata.py": 12,
           "tests/test_student_roundtrip.py::TestStudentEdition_09_static_and_dynamic_graphs": 13,
           "tests/test_student_roundtrip.py::TestStudentEdition_07_data_loading": 11,
           # early, so that test_tensorboard's server can show the runs their nbval run logged
           "notebooks/02_manual_backprop.ipynb": 30, "notebooks/05_nn_module.ipynb": 30,
           "tests/test_tensorboard.py": 11}
READ_BACK = "tests/test_tensorboard.py::"
_cells: dict[str, list[int]] = {}  # notebook stem -> [cells collected, cells passed] on this worker
_done = Path()  # a file per notebook whose nbval run passed whole, in this session (any worker)


def pytest_configure(config):
    global _done
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's zygote and folder, by environment
        _done = Path(os.environ["LAB_NBVAL_DONE"])
        return
    folder = Path(tempfile.mkdtemp(prefix="lab-tests-"))
    _done = folder / "nbval-done"
    _done.mkdir()
    os.environ["LAB_NBVAL_DONE"] = str(_done)
    config.stash[ZYGOTE] = (zygote := forkkernel.start(folder), folder)
    tx = getattr(config.option, "tx", None) or []
    if zygote is not None and tx and set(tx) == {"popen"} and os.environ.get("LAB_FORK_WORKERS") != "0":
        # -n N: the workers are forked from the zygote too (LAB_FORK_WORKERS=0: new Pythons)
        python = shlex.join([sys.executable, forkkernel.__file__, "python"])
        config.option.tx = [f"popen//python={python}"] * len(tx)
    (folder / "early").mkdir()
    os.environ["LAB_EARLY"] = str(folder / "early")
    config.stash[EARLY] = {name: subprocess.Popen(  # each writes its exit status last: the fixture waits for it
        ["sh", "-c", '"$@" >"$0.log" 2>&1; echo $? >"$0.status"', str(folder / "early" / name),
         *command(str(folder / "early" / name))], stdin=subprocess.DEVNULL, start_new_session=True)
        for name, (_, command) in EARLY_WORK.items()}


def pytest_xdist_node_collection_finished(node, ids):
    """Stop the early work that no collected test will use (``-k``, a single test file)."""
    for name, process in node.config.stash.get(EARLY, {}).items():
        if not any(i.startswith(EARLY_WORK[name][0] + "::") for i in ids):
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)  # the shell and the command it runs
    process.wait()


def pytest_unconfigure(config):
    for process in config.stash.get(EARLY, {}).values():
        _stop(process)  # unfinished (an aborted run): its folder goes next
    zygote, folder = config.stash.get(ZYGOTE, (None, None))
    forkkernel.stop(zygote)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    # The process ends next: its last garbage collections would walk every object of torch
    # (about 2 s of each worker's exit, while the session waits); frozen, they are skipped.
    gc.freeze()


def _stem(nodeid: str) -> str | None:
    """The stem of the notebook an nbval item executes."""
    path = nodeid.split("::")[0]
    return Path(path).stem if path.startswith("notebooks/") and path.endswith(".ipynb") else None


def _read_back_stem(nodeid: str) -> str | None:
    """The notebook a TensorBoard read-back test reads the runs of (its ``stem`` parameter)."""
    if nodeid.startswith(READ_BACK) and nodeid.endswith("]"):
        return nodeid[nodeid.rindex("[") + 1:-1]
    return None


def unit_of(nodeid: str, notebooks: set[str]) -> str:
    """What one worker takes whole: a notebook (with the read-back tests of its runs, when
    nbval runs it in this session), a test class, or a test module."""
    stem = _read_back_stem(nodeid)
    if stem in notebooks:
        return f"notebooks/{stem}.ipynb"
    path, _, rest = nodeid.partition("::")
    return f"{path}::{rest.split('::')[0]}" if "::" in rest else path


def pytest_collection_modifyitems(config, items):
    """Order: the longest units first (SECONDS), each read-back test after its notebook's cells."""
    notebooks = {_stem(item.nodeid) for item in items} - {None}
    for item in items:
        if _stem(item.nodeid):
            _cells.setdefault(_stem(item.nodeid), [0, 0])[0] += 1
    units: dict[str, list] = {}
    for item in items:  # a read-back test is collected before the notebook: put it after the cells
        units.setdefault(unit_of(item.nodeid, notebooks), []).append(item)
    for unit in units.values():
        unit.sort(key=lambda item: _read_back_stem(item.nodeid) is not None)
    order = sorted(units, key=lambda unit: -SECONDS.get(unit, 0))  # stable: ties keep collection order
    items[:] = [item for unit in order for item in units[unit]]


def pytest_collection_finish(session):
    # What collection imported (torch, the test modules) lives to the end: out of the garbage
    # collector's sight, its full collections during the run no longer walk all of it.
    gc.freeze()


def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope, with unit_of's units in the collection's order (--no-loadscope-reorder)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if not hasattr(self, "_notebooks"):
                collected = next(iter(self.registered_collections.values()))
                self._notebooks = {_stem(n) for n in collected} - {None}
            return unit_of(nodeid, self._notebooks)

    return Units(config, log)


def pytest_runtest_logreport(report):
    stem = Path(report.nodeid.split("::")[0]).stem if report.nodeid.startswith("notebooks/") else None
    if stem in _cells and (report.when == "call" and report.passed or report.skipped):
        _cells[stem][1] += 1  # a cell tagged nbval-skip counts as done
        if _cells[stem][0] == _cells[stem][1]:  # the whole notebook passed: its runs are complete
            (_done / stem).touch()


@pytest.fixture(scope="session")
def early():
    """``take(name)``: the folder the controller's early work ``name`` (EARLY_WORK) wrote,
    once it finished; fails with its log if it failed."""
    def take(name: str, timeout: float = 600) -> Path:
        out = Path(os.environ["LAB_EARLY"], name)
        status = out.with_name(name + ".status")
        deadline = time.monotonic() + timeout
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not status.exists() or status.read_text().strip() != "0":
            log = out.with_name(name + ".log")
            pytest.fail(f"{' '.join(EARLY_WORK[name][1](str(out)))} failed or never finished:\n"
                        f"{log.read_text()[-3000:] if log.exists() else '(no log)'}")
        return out
    return take


@pytest.fixture(scope="session")
def nbval_runs():
    """``find(stem)``: the runs folder that nbval's execution of notebooks/<stem>.ipynb logged
    into, earlier in this session (on either worker) with every cell passing; else None."""
    def find(stem: str) -> Path | None:
        if not (_done / stem).exists():
            return None
        return (ROOT / "notebooks" / os.environ.get("LAB_RUNS_DIR", "../runs")).resolve()
    return find

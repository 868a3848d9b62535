"""TensorBoard around the notebooks: the inline frame's address, ``tb_writer`` and ``tb_hint``,
and the Makefile's ``tensorboard`` (loopback, a fixed overridable port, one notebook with NB=,
a rerun shown without a restart, Ctrl-C leaves no process) and ``clean-runs``.

What the notebooks log, a live server over it and what a browser shows: tests/test_tensorboard.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import warnings
from pathlib import Path

import pytest
import torch
from procs import alive, descendants
from tb_events import read_histograms, read_hparams, read_scalars, read_tags
from tb_server import STARTUP_TIMEOUT_S, TensorBoardServer, free_port, get_json

import labsupport as lab

ROOT = Path(__file__).resolve().parent.parent


def _import_tb_afresh(name: str):
    """Execute labsupport/tb.py as a new module (``name``), as a first ``import labsupport`` would,
    leaving the imported ``labsupport.tb`` of this Python as it is."""
    spec = importlib.util.spec_from_file_location(name, Path(lab.tb.__file__))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_importing_labsupport_points_the_inline_frame_at_the_labs_address(monkeypatch):
    # $TENSORBOARD_PROXY_URL is the address the %tensorboard magic's frame loads: importing
    # labsupport sets it to lab.tb.INLINE_URL, and keeps one a JupyterHub proxy set
    monkeypatch.delenv("TENSORBOARD_PROXY_URL", raising=False)
    _import_tb_afresh("lab_tb_first_import")
    assert os.environ.get("TENSORBOARD_PROXY_URL") == lab.tb.INLINE_URL
    monkeypatch.setenv("TENSORBOARD_PROXY_URL", "/proxy/%PORT%/")
    _import_tb_afresh("lab_tb_under_a_proxy")
    assert os.environ.get("TENSORBOARD_PROXY_URL") == "/proxy/%PORT%/"
    import IPython.display
    from tensorboard import notebook

    monkeypatch.setenv("TENSORBOARD_PROXY_URL", lab.tb.INLINE_URL)
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    notebook._display_ipython(port=6123, height=800, display_handle=None)
    assert '"http://127.0.0.1:6123/?smoothing=0"' in shown[0].data


# ------------------------------------------------------------- tb_writer and tb_hint


def test_writer_prefixes_every_tag_with_the_notebook(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    with lab.tb_writer("05_nn_module", "mlp", root=tmp_path) as writer:
        writer.add_graph(model, torch.zeros(1, 4))
        writer.add_scalar("loss", 2.0, 0)
        writer.add_scalar("05_nn_module/lr", 0.1, 0)  # already prefixed: left as it is
        writer.add_histogram("weights/0.weight", model[0].weight.detach(), 0)
    run = tmp_path / "05_nn_module" / "mlp"
    assert Path(writer.log_dir) == run
    tags = read_tags(run)
    assert sorted(tags["scalars"]) == ["05_nn_module/loss", "05_nn_module/lr"]
    assert tags["histograms"] == ["05_nn_module/weights/0.weight"] and tags["graph"] is True
    assert read_histograms(run)["weights/0.weight"][0][1].num == 12


def test_add_hparams_stays_in_the_run_folder_and_out_of_the_charts(tmp_path):
    with lab.tb_writer("06_optim", "sgd", root=tmp_path) as writer:
        for step, loss in enumerate([3.0, 2.0, 1.0]):
            writer.add_scalar("loss", loss, step)
        writer.add_hparams({"optimizer": "sgd", "lr": 0.1, "nesterov": False}, {"hparam/final_loss": 1.0}, run_name=".")
    run = Path(writer.log_dir)
    assert [p for p in run.iterdir() if p.is_dir()] == [], "add_hparams-style sub-folder was made"
    assert read_hparams(run) == {"lr": 0.1, "nesterov": False, "optimizer": "sgd"}
    assert list(read_scalars(run)) == ["loss"], "the metric was copied into a one-point chart"
    with pytest.raises(ValueError, match="non-empty dict"):
        writer.add_hparams({}, {})
    with lab.tb_writer("07_data", "plain", root=tmp_path) as writer:
        writer.add_scalar("loss", 1.0, 0)
    assert read_hparams(writer.log_dir) == {} and read_tags(writer.log_dir)["graph"] is False


def test_a_rerun_replaces_its_run_and_a_failed_run_is_deleted(tmp_path):
    for losses in ([3.0, 2.0, 1.0], [9.0, 8.0]):  # the same cell run twice
        with lab.tb_writer("06_optim", "adam", root=tmp_path) as writer:
            for step, loss in enumerate(losses):
                writer.add_scalar("loss", loss, step)
    folder = tmp_path / "06_optim"
    assert [p.name for p in folder.iterdir()] == ["adam"]
    assert len(list((folder / "adam").iterdir())) == 1, "old and new event files mixed in one run"
    assert read_scalars(folder / "adam") == {"loss": [(0, 9.0), (1, 8.0)]}
    with pytest.raises(RuntimeError, match="boom"):
        with lab.tb_writer("06_optim", "adam", root=tmp_path) as writer:
            writer.add_scalar("loss", 1.0, 0)
            raise RuntimeError("boom")
    assert list(folder.iterdir()) == [], "a run stopped half-way must not stay in TensorBoard"
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith(".tb-replaced-")]
    for bad in ("has space", "a/b/c", "/a", "a/", "", None):
        with pytest.raises(ValueError, match="letters, digits"):
            with lab.tb_writer("06_optim", bad, root=tmp_path):
                pass


def _trial(log_dir) -> str:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    raw = acc.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    return metadata.parse_session_start_info_plugin_data(raw).group_name


def test_a_run_in_a_group_has_its_own_folder_charts_and_trial_name(tmp_path):
    with lab.tb_writer("06_optim", "sweep/lr0.1-sgd", root=tmp_path) as writer:
        writer.add_scalar("loss", 1.0, 0)
        writer.add_scalar("06_optim/note", 2.0, 0)  # naming the notebook: left as it is
        writer.add_histogram("w", torch.ones(3), 0)
        writer.add_hparams({"lr": 0.1}, {}, run_name=".")
    run = tmp_path / "06_optim" / "sweep" / "lr0.1-sgd"
    assert Path(writer.log_dir) == run and [p.name for p in (tmp_path / "06_optim").iterdir()] == ["sweep"]
    tags = read_tags(run)
    assert sorted(tags["scalars"]) == ["06_optim/note", "06_optim/sweep/loss"]
    assert tags["histograms"] == ["06_optim/sweep/w"]
    assert _trial(run) == "lr0.1-sgd (06/sweep)"
    with lab.tb_writer("06_optim", "sgd", root=tmp_path) as writer:
        writer.add_hparams({"lr": 0.1}, {})
    assert _trial(writer.log_dir) == "sgd (06)"
    # a group and a run of one name would nest a run in a run: refused before anything is written
    with pytest.raises(ValueError, match="holds a group of runs"):
        with lab.tb_writer("06_optim", "sweep", root=tmp_path) as writer:
            writer.add_scalar("loss", 1.0, 0)
    with pytest.raises(ValueError, match="is a run, not a group"):
        with lab.tb_writer("06_optim", "sgd/lr1", root=tmp_path) as writer:
            writer.add_scalar("loss", 1.0, 0)
    assert read_tags(tmp_path / "06_optim" / "sweep" / "lr0.1-sgd")["scalars"], "the group was touched"
    assert sorted(p.name for p in (tmp_path / "06_optim").iterdir()) == ["sgd", "sweep"]


def test_log10_adds_a_log10_series_beside_the_tags_it_names(tmp_path):
    values = [3e7, 1e-6, 0.0, -1.0, float("nan"), float("inf")]
    with lab.tb_writer("02_manual_backprop", "x", root=tmp_path, log10=("loss", "lr")) as writer:
        for step, value in enumerate(values):
            writer.add_scalar("loss", value, step)
        writer.add_scalar("loss/val", torch.tensor(100.0), 0)  # a tensor, a tag under loss/
        writer.add_scalar("lr", 1e-6, 0)
        writer.add_scalar("lr2", 1e-6, 0)  # not named: no log10
        writer.add_scalar("accuracy", 0.5, 0)
    scalars = read_scalars(writer.log_dir)
    assert sorted(scalars) == ["accuracy", "loss", "loss/val", "loss/val_log10", "loss_log10", "lr", "lr2", "lr_log10"]
    steps, logs = zip(*scalars["loss_log10"])
    assert steps == (0, 1, 4, 5), "0 and -1 have no log10: left out of loss_log10 only"
    assert logs[:2] == pytest.approx((math.log10(3e7), -6.0)) and math.isnan(logs[2]) and logs[3] == math.inf
    assert len(scalars["loss"]) == len(values)
    assert scalars["loss/val_log10"] == [(0, 2.0)] and scalars["lr_log10"] == [(0, pytest.approx(-6.0))]
    for bad in ("loss", ("",), (1,)):
        with pytest.raises(ValueError, match="log10 must be a tuple of tag names"):
            with lab.tb_writer("02_manual_backprop", "x", root=tmp_path, log10=bad):
                pass


def test_runs_go_to_lab_runs_dir_or_beside_the_notebooks(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "elsewhere"))
    with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:
        pass
    assert Path(writer.log_dir) == tmp_path / "elsewhere" / "02_manual_backprop" / "manual-sgd"
    monkeypatch.delenv("LAB_RUNS_DIR")
    for name in ("labsupport", "notebooks", "student"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "student")  # as a student's notebook runs
    with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:
        pass
    assert writer.log_dir == os.path.join("..", "runs", "02_manual_backprop", "manual-sgd")


def test_runs_dir_is_where_tb_writer_logs_the_notebooks_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "lab runs"))
    assert lab.runs_dir("06_optim") == tmp_path / "lab runs" / "06_optim"
    monkeypatch.delenv("LAB_RUNS_DIR")
    for name in ("labsupport", "notebooks", "student"):
        (tmp_path / "repo" / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "student")  # a notebook folder of the repository
    with lab.tb_writer("06_optim", "sgd") as writer:
        pass
    assert lab.runs_dir("06_optim") == tmp_path / "repo" / "runs" / "06_optim"
    assert lab.runs_dir("06_optim") == Path(os.path.abspath(writer.log_dir)).parent
    (tmp_path / "handout").mkdir()
    monkeypatch.chdir(tmp_path / "handout")  # outside the repository: runs/ in the kernel's folder
    assert lab.runs_dir("06_optim") == tmp_path / "handout" / "runs" / "06_optim"
    for bad in ("06 optim", "../06_optim", "", None, 6):
        with pytest.raises(ValueError, match="^notebook name must be letters, digits"):
            lab.runs_dir(bad)


# Runs in a fresh Python whose working folder is a student folder outside the repository, as a
# kernel there does: per notebook, logs a run as its cells do, then runs its %tensorboard cell in
# IPython (the real magic: {...} expansion, then TensorBoard's own parsing of the line), with
# TensorBoard's start replaced by one that records the arguments it was given.
_INLINE_DRIVER = r"""
import json, re, shlex, sys
import nbformat
from IPython.core.interactiveshell import InteractiveShell
from tensorboard import manager
from traitlets.config import Config

config = Config()
config.HistoryManager.enabled = False
shell = InteractiveShell.instance(config=config)
asked = []

class NotStarted(Exception):
    pass

def start(arguments, timeout=None):
    asked.append(arguments)
    raise NotStarted

manager.start = start
seen = {}
for path in sys.argv[1:]:
    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    names = {n for source in code for n in re.findall(r'lab\.tb_writer\("([^"]+)"', source)}
    inline = [source for source in code if "%tensorboard" in source]
    shell.run_cell("import labsupport as lab", store_history=False).raise_error()
    name = names.pop() if len(names) == 1 else f"one notebook name in tb_writer calls, not {names}"
    shell.user_ns["name"] = name
    shell.run_cell("with lab.tb_writer(name, 'x') as w:\n    w.add_scalar('loss', 1.0, 0)").raise_error()
    result = shell.run_cell(inline[0], store_history=False)
    assert isinstance(result.error_in_exec, NotStarted), result.error_in_exec
    logdir = asked[-1][asked[-1].index("--logdir") + 1]
    seen[path] = {"name": name, "logged": shell.user_ns["w"].log_dir, "served": logdir, "cells": len(inline)}
print(json.dumps(seen))
"""


def test_a_student_folder_outside_the_repository_views_the_runs_it_logs(tmp_path):
    """A notebook copied anywhere (the handout, JupyterHub, `make lab STUDENT_DIR=...`) with no
    labsupport/ beside it: its %tensorboard cell serves the folder its cells log into."""
    folder = tmp_path / "my notes"  # a space in the path, as in many home folders
    folder.mkdir()
    copies = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if "%tensorboard" in path.read_text():
            shutil.copy(path, folder / path.name)
            copies.append(path.name)
    assert len(copies) == 7, copies
    env = {**_env_without_runs_dir(), "IPYTHONDIR": str(tmp_path / "ipython"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _INLINE_DRIVER, *copies],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for copy in copies:
        stem = Path(copy).stem
        logged, served = seen[copy]["logged"], seen[copy]["served"]
        assert seen[copy]["name"] == stem and seen[copy]["cells"] == 1, seen[copy]
        assert (folder / logged).resolve().parent == (folder / served).resolve(), (copy, logged, served)
        assert (folder / served).resolve() == folder / "runs" / stem
        assert (folder / logged).is_dir()


def test_tb_hint_names_the_folder_and_how_to_view(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    (tmp_path / "labsupport").mkdir()
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")  # as a notebook runs
    with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:
        pass
    lab.tb_hint(writer)
    assert capsys.readouterr().out == ("logged to runs/02_manual_backprop/manual-sgd; view with `make tensorboard`\n")
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "elsewhere" / "runs"))
    with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:
        pass
    lab.tb_hint(writer.log_dir)
    line = capsys.readouterr().out
    assert line == f"logged to {tmp_path}/elsewhere/runs/02_manual_backprop/manual-sgd; view with `make tensorboard`\n"
    # nbval and `make regenerate` see the same text: the sanitizer maps both lines to one
    rules = [
        (r, rep)
        for r, rep in re.findall(
            r"^regex: (.*)$\n^replace: (.*)$", (ROOT / "tests" / "nbval_sanitize.cfg").read_text(), re.M
        )
    ]
    clean = line
    for regex, replace in rules:
        clean = re.sub(regex, replace, clean)
    assert clean == "logged to runs/02_manual_backprop/manual-sgd; view with `make tensorboard`\n"


@pytest.mark.parametrize("where", [None, 3, ["runs"], torch.ones(1)])
def test_tb_hint_refuses_what_is_neither_a_writer_nor_a_folder(where, capsys):
    with pytest.raises(TypeError, match="^tb_hint needs a SummaryWriter \\(lab.tb_writer's\\) or its run folder, got "):
        lab.tb_hint(where)
    assert capsys.readouterr().out == ""


def test_tb_writer_refuses_a_root_that_is_not_a_folder(tmp_path):
    with pytest.raises(TypeError, match="^root must be a folder \\(a str or a Path\\), got int$"):
        with lab.tb_writer("06_optim", "sgd", 5):
            pass
    assert list(tmp_path.iterdir()) == []


def test_read_helpers_reject_a_missing_folder(tmp_path):
    for read in (read_scalars, read_histograms, read_tags, read_hparams):
        with pytest.raises(FileNotFoundError, match="no run folder"):
            read(tmp_path / "missing")


# ------------------------------------------------------------------------- Makefile

MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="no make program")


def _make(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MAKE, "-s", "-C", str(cwd), *args], capture_output=True, text=True, timeout=60)


def _first_free_port(start: int) -> int:
    """The first port from ``start`` on which nothing on 127.0.0.1 accepts a connection (make tensorboard's rule)."""
    for port in range(start, 65536):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)):
                return port
    raise AssertionError(f"no free port from {start} on")


@needs_make
def test_make_tensorboard_serves_runs_on_loopback_at_a_fixed_overridable_port():
    def dry_run(*args: str) -> str:
        return subprocess.run(
            [MAKE, "-n", "-C", str(ROOT), "-o", ".venv/.installed", "tensorboard", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env_without_runs_dir(),
        ).stdout

    # 6006, or the first free port after it: a student's inline %tensorboard may hold 6006 (and 6007...)
    port = _first_free_port(6006)
    assert re.search(rf"tensorboard --logdir runs --host 127\.0\.0\.1 --port {port}$", dry_run(), re.M)
    assert "--logdir runs/06_optim --host 127.0.0.1 --port 6123" in dry_run("TB_PORT=6123", "NB=06_optim")
    assert "--logdir /srv/logs --host" in dry_run("LAB_RUNS_DIR=/srv/logs")


@needs_make
@pytest.mark.parametrize("target", ["test", "unit", "nbval", "regenerate"])
def test_tests_and_regenerate_log_outside_the_students_runs(target):
    recipe = subprocess.run(
        [MAKE, "-n", "-C", str(ROOT), "-o", ".venv/.installed", target],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env_without_runs_dir(),
    ).stdout
    folder = re.search(r"\bLAB_RUNS_DIR=(\S+)", recipe)
    assert folder, f"`make {target}` does not set LAB_RUNS_DIR: {recipe}"
    assert Path(folder.group(1)).is_relative_to(ROOT / "build"), folder.group(1)


def test_regenerate_run_alone_gives_its_kernels_what_make_regenerate_gives(monkeypatch):
    """`python -m tools.regenerate one.ipynb` (the recipe's step) logs outside runs/ and runs on one thread, as
    `make regenerate` does; what the caller set wins."""
    from tools import regenerate

    recipe = subprocess.run(
        [MAKE, "-n", "-C", str(ROOT), "-o", ".venv/.installed", "regenerate"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env_without_runs_dir(),
    ).stdout
    made = dict(re.findall(r"\b([A-Z_]+)=(\S+)", recipe))
    for name, value in regenerate.KERNEL_ENVIRONMENT.items():
        assert made[name] == value, name
        monkeypatch.setenv(name, "recorded")  # so that the test puts back what was there, or nothing
        monkeypatch.delenv(name)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert regenerate.main(["no-such.ipynb"]) == 2
    assert os.environ["OMP_NUM_THREADS"] == "4"
    assert os.environ["LAB_RUNS_DIR"] == regenerate.KERNEL_ENVIRONMENT["LAB_RUNS_DIR"]


def _env_without_runs_dir() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "LAB_RUNS_DIR"}


def test_a_rerun_replaces_its_run_in_a_running_tensorboard(tmp_path):
    def log(losses):
        with lab.tb_writer("06_optim", "adam", root=tmp_path / "runs") as writer:
            for step, loss in enumerate(losses):
                writer.add_scalar("loss", loss, step)

    def served():
        query = urllib.parse.urlencode({"run": "06_optim/adam", "tag": "06_optim/loss"})
        return [(step, value) for _, step, value in get_json(f"{server.url}/data/plugin/scalars/scalars?{query}")]

    log([3.0, 2.0, 1.0])
    server = TensorBoardServer(tmp_path / "runs", tmp_path / "tb.log")
    try:
        server.wait_for_runs({"06_optim/adam"})
        log([9.0, 8.0])  # the student runs the cell again
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while served() != [(0, 9.0), (1, 8.0)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert served() == [(0, 9.0), (1, 8.0)], "the open TensorBoard should show the new run only"
    finally:
        server.stop()


def _as_from_a_terminal() -> None:
    """In the child, before make starts: SIGINT as a terminal's shell hands it on (its default
    action, not blocked), whatever this test worker inherited or a library left in its mask."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _signal_state(pids) -> str:
    """Each process's name, state and SIGINT handling, from /proc (for a failure message)."""
    lines = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            fields = dict(
                line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
            )
            sigint = 1 << (signal.SIGINT - 1)
            blocked = int(fields.get("SigBlk", "0"), 16) & sigint
            ignored = int(fields.get("SigIgn", "0"), 16) & sigint
            lines.append(
                f"{pid} {fields.get('Name')} {fields.get('State')} SIGINT blocked={bool(blocked)} ignored={bool(ignored)}"
            )
    return "\n".join(lines)


@needs_make
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to list processes")
def test_make_tensorboard_stopped_with_ctrl_c_leaves_no_process(tmp_path):
    runs_root = tmp_path / "runs"
    with lab.tb_writer("02_manual_backprop", "manual-sgd", root=runs_root) as writer:
        writer.add_scalar("loss", 1.0, 0)
    port = free_port()
    log = open(tmp_path / "make_tensorboard.log", "wb")
    # a terminal's Ctrl-C sends SIGINT to the whole foreground process group: make and its children
    proc = subprocess.Popen(
        [
            MAKE,
            "--no-print-directory",
            "-C",
            str(ROOT),
            "-o",
            ".venv/.installed",
            "tensorboard",
            f"TB_PORT={port}",
            "NB=02_manual_backprop",
            f"LAB_RUNS_DIR={runs_root}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    family: set[int] = set()
    try:
        deadline, runs = time.monotonic() + STARTUP_TIMEOUT_S, None
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                runs = get_json(f"http://127.0.0.1:{port}/data/runs", timeout=5)
                if runs:
                    break
            time.sleep(0.1)
        assert runs == ["manual-sgd"], (
            f"not served: {runs!r}\n{(tmp_path / 'make_tensorboard.log').read_text()[-2000:]}"
        )
        family |= descendants(proc.pid)
        assert family, "make started no TensorBoard"
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # Once in about a dozen full runs (never alone, never under load alone) one Ctrl-C was not
            # enough. A student would press it again: so does the test, and says what it saw.
            stalled = _signal_state([proc.pid, *family])
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"make tensorboard was still running after two Ctrl-C:\n{stalled}\n"
                    f"{(tmp_path / 'make_tensorboard.log').read_text()[-2000:]}"
                )
            warnings.warn(f"make tensorboard needed a second Ctrl-C; after the first:\n{stalled}", stacklevel=1)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(p) for p in family):
            time.sleep(0.2)
        survivors = [p for p in family if alive(p)]
        assert not survivors, (
            f"left running after Ctrl-C: {[Path(f'/proc/{p}/cmdline').read_bytes() for p in survivors]}"
        )
    finally:
        for pid in [proc.pid, *family]:  # never leave one behind, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=15)
        log.close()


@needs_make
def test_make_clean_runs_empties_runs_and_nothing_else(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "runs" / "02_manual_backprop" / "manual-sgd-20261126-101500").mkdir(parents=True)
    (repo / "runs" / "02_manual_backprop" / "manual-sgd-20261126-101500" / "events.out").write_text("x")
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (repo / "runs" / "link-out").symlink_to(outside)  # a link inside runs/
    (repo / "notes.txt").write_text("keep me too")
    shutil.copy(ROOT / "Makefile", repo / "Makefile")

    done = _make(repo, "clean-runs")
    assert done.returncode == 0, done.stderr
    assert (repo / "runs").is_dir() and list((repo / "runs").iterdir()) == []
    assert (outside / "precious.txt").read_text() == "keep me", "followed a link out of runs/"
    assert (repo / "notes.txt").is_file() and (repo / "Makefile").is_file()


@needs_make
def test_make_clean_runs_refuses_a_runs_symlink(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (repo / "runs").symlink_to(outside)
    shutil.copy(ROOT / "Makefile", repo / "Makefile")

    refused = _make(repo, "clean-runs")
    assert refused.returncode != 0 and "symbolic link" in refused.stderr, refused.stderr
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (repo / "runs").is_symlink()

    (repo / "runs").unlink()
    (repo / "runs").write_text("a file, not a folder")
    refused = _make(repo, "clean-runs")
    assert refused.returncode != 0 and "not a folder" in refused.stderr
    assert (repo / "runs").read_text() == "a file, not a folder"

"""Runs that never mix (labsupport/tb.py) and the port `make tensorboard` picks.

Writers run in processes forked from this one (torch is imported already), as two
kernels would: two writers of one run started together, a rerun while the old run is
still being written, and a kill while a rerun replaces a run of 30,000 event files.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tb_events import read_scalars

import labsupport as lab
from labsupport import tb

ROOT = Path(__file__).resolve().parent.parent
FORK = multiprocessing.get_context("fork")
NB, RUN = "06_optim", "adam"


def _refused(pid: int | None = None) -> str:
    """The refusal sentence a second writer of 06_optim/adam gets, as a regular expression."""
    process = str(pid) if pid else r"\d+"
    return rf"run 06_optim/adam is being written right now by another process \(process {process}\): "


def _log(root, values, holding, go, results, start=None):
    """Child: log ``values`` to 06_optim/adam, pausing half-way (``holding``) until ``go``."""
    if start is not None:
        start.wait(30)
    try:
        with lab.tb_writer(NB, RUN, root=root) as writer:
            for step, value in enumerate(values):
                if step == len(values) // 2:
                    holding.set()
                    go.wait(30)
                writer.add_scalar("loss", value, step)
                writer.flush()
    except Exception as exc:  # any: the test shows it
        holding.set()
        results.put(f"{type(exc).__name__}: {exc}")
    else:
        results.put("ok")


def _start(target, *args):
    process = FORK.Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _finish(processes) -> None:
    for process in processes:
        process.join(60)
        if process.is_alive():
            process.kill()
            process.join(10)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _series(values) -> dict:
    return {"loss": [(step, float(value)) for step, value in enumerate(values)]}


def _log_here(root, values) -> None:
    with lab.tb_writer(NB, RUN, root=root) as writer:
        for step, value in enumerate(values):
            writer.add_scalar("loss", value, step)


def test_two_writers_of_one_run_started_together_never_mix(tmp_path):
    for trial in range(4):
        root = tmp_path / f"trial{trial}"
        start = FORK.Barrier(2)
        held = [FORK.Event(), FORK.Event()]
        results = FORK.Queue()
        values = [[100.0 + k for k in range(10)], [200.0 + k for k in range(10)]]
        # each one, once in, waits half-way until the other has tried to start as well
        writers = [
            _start(_log, root, values[0], held[0], held[1], results, start),
            _start(_log, root, values[1], held[1], held[0], results, start),
        ]
        _finish(writers)
        outcomes = sorted(results.get(timeout=10) for _ in writers)
        run = root / NB / RUN
        assert len(list(run.iterdir())) == 1, f"two writers' event files in one run: {outcomes}"
        assert read_scalars(run) in (_series(values[0]), _series(values[1]))
        assert _names(root / NB) == [RUN], "a lock file or an old run was left"
        # the second one stopped with one sentence
        assert outcomes[1] == "ok", outcomes
        assert re.match(f"RuntimeError: {_refused()}", outcomes[0]), outcomes


def test_a_rerun_while_the_old_run_is_written_is_refused_then_replaces_it(tmp_path):
    old, new = [3.0, 2.5, 2.0, 1.5], [9.0, 8.0]
    writing, rerun_tried = FORK.Event(), FORK.Event()
    results = FORK.Queue()
    child = _start(_log, tmp_path, old, writing, rerun_tried, results)
    run = tmp_path / NB / RUN
    try:
        assert writing.wait(60), "the first writer did not start"
        with pytest.raises(RuntimeError, match=_refused(child.pid)):
            _log_here(tmp_path, new)  # the student runs the cell again meanwhile
        assert read_scalars(run) == _series(old[:2]), "the refused rerun touched the run"
    finally:
        rerun_tried.set()
        _finish([child])
    assert results.get(timeout=10) == "ok"
    assert read_scalars(run) == _series(old)
    _log_here(tmp_path, new)  # once it has finished, a rerun replaces it
    assert _names(tmp_path / NB) == [RUN]
    assert len(list(run.iterdir())) == 1
    assert read_scalars(run) == _series(new)


def test_a_rerun_replaces_the_old_run_at_its_first_write(tmp_path):
    _log_here(tmp_path, [3.0, 2.0, 1.0])
    run = tmp_path / NB / RUN
    old_files = set(run.iterdir())
    with lab.tb_writer(NB, RUN, root=tmp_path) as writer:
        assert set(run.iterdir()) == old_files, "TensorBoard lost the old run too early"
        assert read_scalars(run) == _series([3.0, 2.0, 1.0])
        writer.add_scalar("loss", 9.0, 0)
        writer.flush()
        assert not set(run.iterdir()) & old_files
        assert read_scalars(run) == _series([9.0])
        assert _names(tmp_path / NB) == [f".{RUN}.lock", RUN]
    assert _names(tmp_path / NB) == [RUN]
    with pytest.raises(RuntimeError, match="closed at the end of its `with"):
        writer.add_scalar("loss", 1.0, 1)
    # a block that stops before logging keeps the old run; after logging, its own is deleted
    with pytest.raises(KeyboardInterrupt), lab.tb_writer(NB, RUN, root=tmp_path):
        raise KeyboardInterrupt
    assert read_scalars(run) == _series([9.0])
    with pytest.raises(ValueError, match="boom"), lab.tb_writer(NB, RUN, root=tmp_path) as w:
        w.add_scalar("loss", 5.0, 0)
        raise ValueError("boom")
    assert _names(tmp_path / NB) == []


def _replace_until_killed(repo, stage, paused):
    """Child: rerun 06_optim/adam from ``repo/notebooks`` and stop at ``stage`` until killed."""
    os.chdir(repo / "notebooks")
    os.environ.pop("LAB_RUNS_DIR", None)
    if stage == "renamed":  # the old run is aside, the new one not written yet
        move_aside = tb._move_aside

        def move_aside_and_stop(folder):
            move_aside(folder)
            paused.set()
            time.sleep(120)

        tb._move_aside = move_aside_and_stop
    else:  # the new run is written; the old one is a thousand files into its deletion

        def delete_some_and_stop(path):
            with os.scandir(path) as entries:
                for entry, _ in zip(entries, range(1000)):
                    os.unlink(entry.path)
            paused.set()
            time.sleep(120)

        tb._delete = delete_some_and_stop
    with lab.tb_writer(NB, RUN) as writer:
        writer.add_scalar("loss", 1.0, 0)


def _outside(top: Path, runs: Path) -> set[str]:
    """Every path under ``top``, except inside ``runs``."""
    found = set()
    for here, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if Path(here, d) != runs]
        found.update(os.path.relpath(os.path.join(here, n), top) for n in dirs + files)
    return found


def _kill_rerun_at(stage: str, repo: Path) -> list[str]:
    """Rerun 06_optim/adam in a child, SIGKILL it at ``stage``; what runs/06_optim holds then."""
    paused = FORK.Event()
    child = _start(_replace_until_killed, repo, stage, paused)
    try:
        deadline = time.monotonic() + 60
        while not paused.wait(0.1):
            assert child.is_alive() and time.monotonic() < deadline, f"no rerun reached: {stage}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        _finish([child])
    assert child.exitcode == -signal.SIGKILL
    return _names(repo / "runs" / NB)


def test_a_kill_while_replacing_a_huge_run_leaves_nothing_outside_runs(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    for name in ("labsupport", "notebooks"):
        (repo / name).mkdir(parents=True)
    runs = repo / "runs"
    old = runs / NB / RUN
    old.mkdir(parents=True)
    (old / "events.out.tfevents.0").touch()
    for i in range(1, 30_000):  # 30,000 names to delete (links to one file: made fast)
        os.link(old / "events.out.tfevents.0", old / f"events.out.tfevents.{i}")
    before = _outside(tmp_path, runs)

    left = _kill_rerun_at("deleting", repo)
    assert _outside(tmp_path, runs) == before, "a kill left something outside runs/"
    assert left[0] == f".{RUN}.lock" and left[1].startswith(f".{RUN}.old-") and left[2:] == [RUN]
    assert len(os.listdir(runs / NB / left[1])) == 29_000
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", f"runs/{NB}/{left[1]}"], check=False)
    assert ignored.returncode == 0, "leftovers in runs/ must be git-ignored"

    # the next rerun deletes those leftovers first; killed in turn, it leaves its own
    trash = left[1]
    left = _kill_rerun_at("renamed", repo)
    assert _outside(tmp_path, runs) == before
    assert left[0] == f".{RUN}.lock" and left[1].startswith(f".{RUN}.old-") and left[1] != trash
    assert len(left) == 2

    # the next writer of that notebook, of any run, deletes what a killed one left
    monkeypatch.chdir(repo / "notebooks")
    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    with lab.tb_writer(NB, "sgd") as writer:
        writer.add_scalar("loss", 2.0, 0)
    assert _names(runs / NB) == ["sgd"]
    assert read_scalars(runs / NB / "sgd") == _series([2.0])
    assert _outside(tmp_path, runs) == before


def test_the_leftovers_of_a_run_being_written_are_kept(tmp_path):
    notebook = tmp_path / NB
    trash = notebook / ".sgd.old-1234abcd"
    trash.mkdir(parents=True)
    (trash / "events.out.tfevents.1").touch()
    held = os.open(notebook / ".sgd.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a running writer of "sgd" holds it
    try:
        _log_here(tmp_path, [1.0])
        assert _names(notebook) == [".sgd.lock", ".sgd.old-1234abcd", RUN]
    finally:
        os.close(held)  # that writer is killed: its lock file stays, unlocked
    _log_here(tmp_path, [2.0])
    assert _names(notebook) == [RUN]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make program")
def test_make_clean_runs_deletes_what_a_killed_writer_left(tmp_path):
    notebook = tmp_path / "runs" / NB
    (notebook / f".{RUN}.old-1234abcd").mkdir(parents=True)
    (notebook / f".{RUN}.old-1234abcd" / "events.out.tfevents.1").touch()
    (notebook / f".{RUN}.lock").touch()
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    done = subprocess.run(
        ["make", "-s", "-C", str(tmp_path), "clean-runs"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert _names(tmp_path / "runs") == []


# ------------------------------------------------------------ make tensorboard's port


def _dry_run(*args: str) -> str:
    """The commands `make tensorboard` would run (the port is chosen while they are made)."""
    env = {k: v for k, v in os.environ.items() if k != "LAB_RUNS_DIR"}
    command = ["make", "-n", "-C", str(ROOT), "-o", ".venv/.installed", "tensorboard"]
    command += [f"BIN={Path(sys.executable).parent}", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=60, env=env).stdout


def _served_port(recipe: str) -> int:
    served = re.search(r"tensorboard --logdir \S+ --host 127\.0\.0\.1 --port (\d+)$", recipe, re.MULTILINE)
    assert served, recipe
    assert "bind_all" not in recipe
    return int(served[1])


@pytest.mark.skipif(shutil.which("make") is None, reason="no make program")
def test_make_tensorboard_takes_the_next_free_port_and_prints_its_url():
    with socket.socket() as inline:  # as an inline %tensorboard holds 6006
        inline.bind(("127.0.0.1", 0))
        inline.listen()
        taken = inline.getsockname()[1]
        recipe = _dry_run(f"TB_PORT={taken}")
    port = _served_port(recipe)
    assert port > taken
    assert f"port {taken} is in use (an inline %tensorboard?); open http://127.0.0.1:{port}/?smoothing=0" in recipe
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    recipe = _dry_run(f"TB_PORT={free}")
    assert _served_port(recipe) == free
    assert f"make tensorboard: open http://127.0.0.1:{free}/?smoothing=0" in recipe

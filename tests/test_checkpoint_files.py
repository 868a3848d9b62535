"""Checkpoint files (labsupport/checkpoint.py): what killed saves leave, and unreadable files.

Saves run in processes forked from this one and pause half-way (``torch.save`` is
slowed down in the child), so a test knows where each one is when it is killed.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import torch

import labsupport as lab

ROOT = Path(__file__).resolve().parent.parent
FORK = multiprocessing.get_context("fork")
UNLOADABLE = "is not a checkpoint this lab can load safely"


def _save_paused(path, value, paused, go):
    """Child: save ``{"w": value}`` to ``path``, pausing (``paused``) once written until ``go``."""
    real_save = torch.save

    def save_and_wait(obj, f):
        real_save(obj, f)
        f.flush()
        paused.set()
        go.wait(60)

    torch.save = save_and_wait
    lab.save_checkpoint({"w": torch.full((1000,), value)}, path)


class _PausedSave:
    """A save of ``path`` in a child process, paused before its temporary file is renamed."""

    def __init__(self, path: Path, value: float) -> None:
        self.paused, self.go = FORK.Event(), FORK.Event()
        args = (path, value, self.paused, self.go)
        self.process = FORK.Process(target=_save_paused, args=args, daemon=True)
        self.process.start()
        assert self.paused.wait(60), "the save did not start"

    def finish(self) -> None:
        self.go.set()
        self.process.join(60)
        assert self.process.exitcode == 0

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(60)
        assert self.process.exitcode == -signal.SIGKILL


def _temporaries(folder: Path) -> set[str]:
    """The names of the temporary files of ``net.pt`` saves (links aside)."""
    found = folder.iterdir()
    return {p.name for p in found if re.fullmatch(r"\.net\.pt\.\w+\.tmp", p.name) and not p.is_symlink()}


def test_orphans_of_killed_saves_are_removed_by_the_next_save_and_ignored_by_git(tmp_path):
    path = tmp_path / "net.pt"
    saves = [_PausedSave(path, value) for value in (1.0, 2.0, 3.0)]  # three at once
    for save in saves:
        save.kill()
    orphans = _temporaries(tmp_path)
    assert len(orphans) == 3 and not path.exists()
    for orphan in orphans:  # wherever a notebook saves, git ignores them
        for where in (orphan, f"notebooks/{orphan}", f"notebooks/checkpoints/{orphan}"):
            ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", where], check=False)
            assert ignored.returncode == 0, f"git does not ignore {where}"
    # files that only look alike, or belong to another checkpoint, are left alone
    kept = [".net.pt.backup", ".other.pt.abcd1234.tmp", "net.pt.abcd1234.tmp", ".net.pt.a.b.tmp"]
    for name in kept:
        (tmp_path / name).write_text("keep me")
    (tmp_path / ".net.pt.link1234.tmp").symlink_to(tmp_path / ".net.pt.backup")

    lab.save_checkpoint({"w": torch.zeros(3)}, path)
    assert _temporaries(tmp_path) == set()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, ".net.pt.link1234.tmp", "net.pt"])
    assert all((tmp_path / name).read_text() == "keep me" for name in kept)
    assert torch.equal(lab.load_checkpoint(path)["w"], torch.zeros(3))


def test_a_save_still_running_keeps_its_temporary_file(tmp_path):
    path = tmp_path / "net.pt"
    running = _PausedSave(path, 7.0)  # another kernel saving the same file meanwhile
    try:
        (temporary,) = _temporaries(tmp_path)
        lab.save_checkpoint({"w": torch.zeros(3)}, path)
        assert _temporaries(tmp_path) == {temporary}, "a running save's file was deleted"
    finally:
        running.finish()
    assert _temporaries(tmp_path) == set()
    assert torch.equal(lab.load_checkpoint(path)["w"], torch.full((1000,), 7.0))


def test_an_empty_or_cut_checkpoint_gets_the_same_one_sentence(tmp_path):
    empty = tmp_path / "empty.pt"
    empty.touch()
    with pytest.raises(RuntimeError, match=rf"{UNLOADABLE} .*: the file is empty$") as raised:
        lab.load_checkpoint(empty)
    assert "\n" not in str(raised.value)
    whole = lab.save_checkpoint({"w": torch.ones(1000)}, tmp_path / "whole.pt").read_bytes()
    for size in (1, 10, 1000, len(whole) - 10, len(whole) - 1):
        cut = tmp_path / f"cut{size}.pt"
        cut.write_bytes(whole[:size])
        with pytest.raises(RuntimeError, match=UNLOADABLE) as raised:
            lab.load_checkpoint(cut)
        assert "\n" not in str(raised.value)

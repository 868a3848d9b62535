"""TensorBoard: where a notebook's runs go, and tags that TensorBoard can chart.

A run lives in ``runs/<notebook>/<run>`` (no timestamp): running the cell again
**replaces** the run of that name, so reruns never pile up. ``$LAB_RUNS_DIR`` moves
the whole folder (tests and ``make regenerate`` use it to stay out of ``runs/``).

A run folder never mixes two runs:

- One writer per run at a time. A ``tb_writer`` block holds an OS lock (``flock``) on
  ``runs/<notebook>/.<run>.lock``; a second writer of that name (another kernel, a
  script) stops at once with one sentence naming the process that is writing it. It
  does not wait, which would look like a hung cell, and it does not get a renamed run,
  which would add a run the notebook never names.
- The old run is replaced at the new run's first write, not before: the old folder is
  renamed to ``.<run>.old-<random>`` beside it, the new event file is written, then the
  old folder is deleted. A block that stops before logging anything keeps the old run;
  one stopped by an error or Ctrl-C after logging is deleted.
- Nothing goes outside ``runs/<notebook>/``. A killed process leaves its lock file and
  perhaps a half-deleted ``.<run>.old-*``: the next ``tb_writer`` of that notebook deletes
  them (``make clean-runs`` too), and git ignores ``runs/``. TensorBoard reads every file
  named ``*tfevents*``, in dot-folders too, so it may list ``.<run>.old-*`` for the few
  seconds a huge old run takes to delete.

The writer prefixes every tag with the notebook's name (``loss`` in 02 is charted as
``02_manual_backprop/loss``), so no two notebooks' scales share an axis.
``add_hparams`` writes hyper-parameters for the HParams tab only, in the run's own
folder; metric values are not copied into one-point charts (the tab shows each
curve's last value instead).

Example:
    >>> with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:  # doctest: +SKIP
    ...     writer.add_scalar("loss", 1.0, 0)  # charted as 02_manual_backprop/loss
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no lock; two writers of one run must not overlap there
    fcntl = None

__all__ = ["tb_hint", "tb_writer"]

RUNS_DIR = "runs"  # relative to the repository, unless $LAB_RUNS_DIR says otherwise
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")
# What a killed writer leaves beside its run: its lock file, an old run being deleted.
_LEFTOVER = re.compile(r"^\.(?P<run>.+)\.(?:lock|old-[A-Za-z0-9_]+)$")
_TAGGED = (  # the methods whose first argument is a tag
    "add_scalar",
    "add_scalars",
    "add_histogram",
    "add_image",
    "add_images",
    "add_figure",
    "add_text",
    "add_audio",
    "add_video",
    "add_pr_curve",
    "add_mesh",
    "add_histogram_raw",
)


def _runs_root(root: str | os.PathLike | None = None) -> Path:
    """``root``, else $LAB_RUNS_DIR, else ``../runs`` from a notebook folder of the repository
    (notebooks/ and student/ share one runs/), else ``runs`` here."""
    if root is not None or os.environ.get("LAB_RUNS_DIR"):
        return Path(root if root is not None else os.environ["LAB_RUNS_DIR"])
    here = Path.cwd()
    in_repo = (here.parent / "labsupport").is_dir() and (here.parent / "notebooks").is_dir()
    return Path("..", RUNS_DIR) if in_repo else Path(RUNS_DIR)


class _Lock:
    """An exclusive ``flock`` on one file, taken without waiting; released by deleting it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def take(self) -> bool:
        """Lock the file (made if missing) and write our process id; False if it is held."""
        if fcntl is None:
            return True
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            if _same_file(fd, self.path):
                break
            # Its last holder deleted this file as it finished: lock the one there now.
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return True

    def holder(self) -> str:
        """`` (process 1234)`` as written in the lock file, or nothing if it holds no id yet."""
        with contextlib.suppress(OSError, ValueError):
            return f" (process {int(self.path.read_text())})"
        return ""

    def release(self) -> None:
        """Delete the file, then unlock it: who locked it meanwhile sees it gone and retries."""
        if self.fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the open file ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _lock_of(folder: Path) -> _Lock:
    return _Lock(folder.parent / f".{folder.name}.lock")


def _trash_name(folder: Path) -> Path:
    """``.<name>.old-<random>`` beside ``folder``: where an old run goes to be deleted."""
    return folder.parent / f".{folder.name}.old-{secrets.token_hex(4)}"


def _rename(source: Path, target: Path) -> Path:
    source.rename(target)
    return target


def _move_aside(folder: Path) -> Path | None:
    """Rename ``folder`` to a trash name beside it, in one step; None if there is none."""
    try:
        return _rename(folder, _trash_name(folder))
    except FileNotFoundError:
        return None


def _delete(path: Path) -> None:
    """Delete a file, a link, or a folder and all in it (links inside are never followed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _discard(folder: Path) -> None:
    """Move ``folder`` aside in one rename (TensorBoard drops it at once), then delete it."""
    trash = _move_aside(folder)
    if trash is not None:
        _delete(trash)


def _clean_leftovers(folder: Path) -> None:
    """Delete what killed writers left beside ``folder``, whose own lock the caller holds."""
    found: dict[str, list[Path]] = {}
    for entry in folder.parent.iterdir():
        match = _LEFTOVER.match(entry.name)
        if match:
            found.setdefault(match["run"], []).append(entry)
    own_lock = _lock_of(folder).path
    for run, entries in found.items():
        if run == folder.name:
            trash = [entry for entry in entries if entry != own_lock]
        else:
            trash = _take_over(folder, run, entries)
        for entry in trash:
            _delete(entry)


def _take_over(folder: Path, run: str, entries: list[Path]) -> list[Path]:
    """Rename another run's leftovers to trash names of ``folder`` if its writer is dead."""
    lock = _lock_of(folder.parent / run)
    if not lock.take():
        return []  # being written: that writer cleans up after itself
    try:  # renamed at once, so that run's lock is held for a moment only
        others = [entry for entry in entries if entry != lock.path]
        return [_rename(entry, _trash_name(folder)) for entry in others]
    finally:
        lock.release()


def _writer_class():
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    class NotebookWriter(SummaryWriter):
        """A SummaryWriter whose tags start with ``<notebook>/`` and whose first write
        replaces the old run of its folder."""

        def __init__(self, log_dir: str, tag_prefix: str, **kwargs) -> None:
            self.tag_prefix = tag_prefix
            # "init" -> "new" -> "writing" (from the first write) -> "ended" (after the block)
            self._state = "init"
            super().__init__(log_dir=log_dir, **kwargs)
            self._state = "new"

        def _get_file_writer(self):
            if self._state == "init":
                return None  # SummaryWriter.__init__ opens the event file: put off
            if self._state == "ended":
                raise RuntimeError(
                    f"the writer of {self.log_dir} was closed at the end of its "
                    "`with lab.tb_writer(...)` block: log inside the block"
                )
            if self._state == "writing":
                return super()._get_file_writer()
            self._state = "writing"
            old = _move_aside(Path(self.log_dir))
            try:
                return super()._get_file_writer()  # writes and flushes the first event
            finally:
                if old is not None:
                    _delete(old)

        def add_hparams(
            self,
            hparam_dict: Mapping[str, Any],
            metric_dict: Mapping[str, float] | None = None,
            hparam_domain_discrete=None,
            run_name: str | None = None,
            global_step=None,
        ) -> None:
            if not isinstance(hparam_dict, Mapping) or not hparam_dict:
                raise ValueError(f"hparams must be a non-empty dict of name -> value, got {hparam_dict!r}")
            # The experiment summary is left out: TensorBoard then builds the table from every
            # run's own session info, so runs with different hparam names all get their columns.
            _, start, end = hparams_summaries(dict(hparam_dict), dict(metric_dict or {}))
            for summary in (start, end):
                self._get_file_writer().add_summary(summary, global_step)

    def prefixed(method):
        def add(self, tag, *args, **kwargs):
            tag = tag if tag.startswith(self.tag_prefix) else self.tag_prefix + tag
            return method(self, tag, *args, **kwargs)

        return add

    for name in _TAGGED:
        setattr(NotebookWriter, name, prefixed(getattr(SummaryWriter, name)))
    return NotebookWriter


@contextlib.contextmanager
def tb_writer(notebook: str, run: str, root: str | os.PathLike | None = None, **kwargs) -> Iterator:
    """A ``SummaryWriter`` on ``runs/<notebook>/<run>``, which replaces an older run of that
    name at its first write; closed at the end, deleted if the block raises.

    Example:
        >>> import tempfile
        >>> with tb_writer("06_optim", "sgd", root=tempfile.mkdtemp()) as w:
        ...     w.add_scalar("loss", 0.5, 1)
        >>> Path(w.log_dir).name, sorted(p.name for p in Path(w.log_dir).parent.iterdir())
        ('sgd', ['sgd'])
    """
    for label, value in (("notebook", notebook), ("run", run)):
        if not isinstance(value, str) or not _NAME.match(value):
            raise ValueError(f"{label} name must be letters, digits and _ . = - (no spaces or slashes), got {value!r}")
    folder = _runs_root(root) / notebook / run
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_of(folder)
    if not lock.take():
        raise RuntimeError(
            f"run {notebook}/{run} is being written right now by another process"
            f"{lock.holder()}: let it finish or stop it, or give this run another name"
        )
    try:
        _clean_leftovers(folder)
        writer = _writer_class()(str(folder), f"{notebook}/", **kwargs)
        try:
            yield writer
            writer.close()
        except BaseException:
            writer.close()
            if writer._state == "writing":  # a run stopped half-way is deleted
                _discard(folder)
            raise
        finally:
            writer._state = "ended"
    finally:
        lock.release()


def tb_hint(where) -> None:
    """Print one line: where a run's logs went (a writer or a run folder) and how to view them.

    Example:
        >>> tb_hint("../runs/02_manual_backprop/manual-sgd")  # doctest: +SKIP
        logged to runs/02_manual_backprop/manual-sgd; view with `make tensorboard`
    """
    shown = str(log_dir := Path(getattr(where, "log_dir", where)))
    if not os.environ.get("LAB_RUNS_DIR"):
        with contextlib.suppress(ValueError):
            shown = f"{RUNS_DIR}/{log_dir.resolve().relative_to(_runs_root(None).resolve()).as_posix()}"
    print(f"logged to {shown}; view with `make tensorboard`")

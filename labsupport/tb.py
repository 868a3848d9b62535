"""TensorBoard: where a notebook's runs go, and tags that TensorBoard can chart.

A run lives in ``runs/<notebook>/<run>`` (no timestamp): running the cell again
**replaces** the run of that name, so reruns never pile up. ``$LAB_RUNS_DIR`` moves
the whole folder (tests and ``make regenerate`` use it to stay out of ``runs/``; ``make lab``
sets it to the repository's ``runs/``, so a student folder anywhere logs there). Outside the
repository, with no ``$LAB_RUNS_DIR`` (a handout, Colab), runs go to ``runs/`` in the kernel's
working folder. ``runs_dir(notebook)`` is that notebook's folder, which its ``%tensorboard`` cell reads.

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

What TensorBoard shows on first open (docs/tensorboard.md says why each is so):

- A run named ``<group>/<run>`` (``sweep/lr0.1-sgd``) lives in ``runs/<notebook>/<group>/<run>``
  and charts its tags as ``<notebook>/<group>/<tag>``: a group's runs (a short sweep) get
  charts of their own, apart from the notebook's full runs.
- ``tb_writer(..., log10=("loss", "lr"))``: ``add_scalar`` of a tag named ``loss`` (or
  ``loss/...``) also writes ``<tag>_log10``, the value's base-10 logarithm, at the same step,
  so a loss that falls from 3e7 to 1e-4, or a learning rate of 1e-6 (which TensorBoard's value
  table prints as "0"), reads on the linear axis TensorBoard opens with. A value <= 0 has
  no logarithm: that point is left out of the ``_log10`` series only.
- ``add_hparams`` writes hyper-parameters for the HParams tab only, in the run's own
  folder; metric values are not copied into one-point charts (the tab shows each
  curve's last value instead). The trial is named by the run, not its folder path:
  ``sgd (06)``, ``lr0.1-sgd (06/sweep)``.
- The inline ``%tensorboard`` view opens with smoothing off (``?smoothing=0``): importing
  this module sets ``$TENSORBOARD_PROXY_URL`` (the address the magic's frame loads) to
  ``http://127.0.0.1:%PORT%/?smoothing=0`` unless it is set already (JupyterHub proxies set it).

Example:
    >>> with lab.tb_writer("02_manual_backprop", "manual-sgd", log10=("loss",)) as writer:  # doctest: +SKIP
    ...     writer.add_scalar("loss", 1e7, 0)  # charted as 02_manual_backprop/loss, and loss_log10 = 7.0
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no lock; two writers of one run must not overlap there
    fcntl = None

__all__ = ["runs_dir", "tb_hint", "tb_writer"]

RUNS_DIR = "runs"  # relative to the repository, unless $LAB_RUNS_DIR says otherwise
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")
_RUN = re.compile(r"^(?:(?P<group>[A-Za-z0-9][A-Za-z0-9_.=-]*)/)?(?P<leaf>[A-Za-z0-9][A-Za-z0-9_.=-]*)$")
LOG10_SUFFIX = "_log10"
# The inline %tensorboard frame loads this address (tensorboard.notebook reads it at display
# time): TensorBoard's default smoothing (0.6) draws a curve of 10 points (07's per-epoch
# accuracy) an epoch or two late, and this lab's full-batch curves have no noise to smooth.
INLINE_URL = "http://127.0.0.1:%PORT%/?smoothing=0"
os.environ.setdefault("TENSORBOARD_PROXY_URL", INLINE_URL)
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
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder (a str or a Path), got {type(root).__name__}")
    if root is not None or os.environ.get("LAB_RUNS_DIR"):
        return Path(root if root is not None else os.environ["LAB_RUNS_DIR"])
    here = Path.cwd()
    in_repo = (here.parent / "labsupport").is_dir() and (here.parent / "notebooks").is_dir()
    return Path("..", RUNS_DIR) if in_repo else Path(RUNS_DIR)


def _check_notebook_name(notebook) -> None:
    if not isinstance(notebook, str) or not _NAME.match(notebook):
        raise ValueError(f"notebook name must be letters, digits and _ . = - (no spaces or slashes), got {notebook!r}")


def runs_dir(notebook: str) -> Path:
    """The folder ``lab.tb_writer(notebook, ...)`` logs that notebook's runs into, as an absolute
    path: what the notebook's inline ``%tensorboard --logdir`` must read, wherever the notebook is
    (``$LAB_RUNS_DIR/<notebook>``, else ``<repository>/runs/<notebook>`` from a notebook folder of
    the repository, else ``runs/<notebook>`` in the kernel's working folder: a handout, Colab).

    A notebook's cell reads it through IPython's ``{...}`` expansion of a line magic (quoted, as
    the path may hold spaces): ``%tensorboard --logdir "{lab.runs_dir('07_data_loading')}" --host 127.0.0.1``.

    Example:
        >>> lab.runs_dir("07_data_loading")  # doctest: +SKIP
        PosixPath('/home/me/pytorch-lab/runs/07_data_loading')
    """
    _check_notebook_name(notebook)
    return Path(os.path.abspath(_runs_root(None) / notebook))


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
        """`` (process 1234)`` as written in the lock file. Its holder writes the id just after locking, so a
        file read in between is read again for up to 0.1 s; after that, nothing is said."""
        for _ in range(20):
            with contextlib.suppress(OSError, ValueError):
                return f" (process {int(self.path.read_text())})"
            time.sleep(0.005)
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


def _with_prefix(tag: str, prefix: str) -> str:
    """``tag`` under ``prefix`` (``<notebook>/``, and the run's group); a tag that starts with
    the notebook's name already is kept as it is."""
    return tag if tag.startswith(prefix.split("/", 1)[0] + "/") else prefix + tag


def _log10_of(tag: str, prefix: str, bases: tuple[str, ...], value) -> float | None:
    """log10(value) when ``tag`` (prefixed) is one of ``bases`` or under one (``loss/train``
    under ``loss``); None when it is not, or when value <= 0 has none. NaN and inf stay."""
    name = tag[len(prefix) :] if tag.startswith(prefix) else tag.split("/", 1)[1]  # as the notebook wrote it
    if not any(name == base or name.startswith(base + "/") for base in bases):
        return None
    value = float(value)
    if not (value > 0 or math.isnan(value)):
        return None
    return math.log10(value) if math.isfinite(value) else value


def _name_trial(start, trial: str) -> None:
    """Set the HParams trial's name in a session-start summary: instead of the run's folder
    path ("06_optim/sweep/lr0.1-sgd" reads "06_optim/swee..." in the table's 10em Trial ID
    column), the run's name, short and unique per run."""
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    plugin_data = start.value[0].metadata.plugin_data
    content = HParamsPluginData.FromString(plugin_data.content)
    content.session_start_info.group_name = trial
    plugin_data.content = content.SerializeToString()


def _writer_class():
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    class NotebookWriter(SummaryWriter):
        """A SummaryWriter whose tags start with ``<notebook>/`` (and the run's group), whose
        first write replaces the old run of its folder, and which names its HParams trial."""

        def __init__(self, log_dir: str, tag_prefix: str, trial: str, log10: tuple[str, ...] = (), **kwargs) -> None:
            self.tag_prefix = tag_prefix
            self.trial = trial  # the HParams tab's name for this run
            self.log10 = log10  # tags (and tags under them) also written as <tag>_log10
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
            _name_trial(start, self.trial)
            for summary in (start, end):
                self._get_file_writer().add_summary(summary, global_step)

    for name in _TAGGED:
        wrap = _scalar_and_log10 if name == "add_scalar" else _prefixed
        setattr(NotebookWriter, name, wrap(getattr(SummaryWriter, name)))
    return NotebookWriter


def _prefixed(method):
    """A writer method whose first argument, a tag, goes under the writer's prefix."""

    def add(self, tag, *args, **kwargs):
        return method(self, _with_prefix(tag, self.tag_prefix), *args, **kwargs)

    return add


def _scalar_and_log10(add_scalar):
    """``add_scalar`` with the tag prefixed, which also writes ``<tag>_log10`` for the
    writer's ``log10`` tags."""

    def add(self, tag, scalar_value, global_step=None, walltime=None, **kwargs):
        tag = _with_prefix(tag, self.tag_prefix)
        add_scalar(self, tag, scalar_value, global_step, walltime, **kwargs)
        log = _log10_of(tag, self.tag_prefix, self.log10, scalar_value) if self.log10 else None
        if log is not None:
            add_scalar(self, tag + LOG10_SUFFIX, log, global_step, walltime, **kwargs)

    return add


@contextlib.contextmanager
def tb_writer(
    notebook: str, run: str, root: str | os.PathLike | None = None, *, log10: tuple[str, ...] = (), **kwargs
) -> Iterator:
    """A ``SummaryWriter`` on ``runs/<notebook>/<run>``, which replaces an older run of that
    name at its first write; closed at the end, deleted if the block raises.

    ``run`` may name a group: ``"sweep/lr0.1-sgd"`` writes ``runs/<notebook>/sweep/lr0.1-sgd``, charted
    as ``<notebook>/sweep/<tag>``. ``log10``: tags whose scalars are also written as ``<tag>_log10``
    (``("loss",)`` covers ``loss``, ``loss/train``, ``loss/val``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as root:
        ...     with tb_writer("06_optim", "sgd", root=root, log10=("loss",)) as w:
        ...         w.add_scalar("loss", 0.01, 1)
        ...     print(Path(w.log_dir).name, sorted(p.name for p in Path(w.log_dir).parent.iterdir()))
        sgd ['sgd']
    """
    _check_notebook_name(notebook)
    parts = _RUN.match(run) if isinstance(run, str) else None
    if parts is None:
        raise ValueError(
            "run name must be letters, digits and _ . = - (no spaces), with at most one / "
            f"that puts the run in a group (sweep/lr0.1-sgd), got {run!r}"
        )
    if isinstance(log10, str) or not all(isinstance(tag, str) and tag for tag in log10):
        raise ValueError(f"log10 must be a tuple of tag names, such as ('loss', 'lr'), got {log10!r}")
    group, leaf = parts["group"], parts["leaf"]
    folder = _runs_root(root) / notebook / run
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_of(folder)
    if not lock.take():
        raise RuntimeError(
            f"run {notebook}/{run} is being written right now by another process"
            f"{lock.holder()}: let it finish or stop it, or give this run another name"
        )
    try:
        _refuse_a_run_inside_a_run(folder, group)  # under the lock: no writer of this run renames it meanwhile
        _clean_leftovers(folder)
        prefix = f"{notebook}/{group}/" if group else f"{notebook}/"
        where = notebook.split("_", 1)[0] + (f"/{group}" if group else "")
        writer = _writer_class()(str(folder), prefix, f"{leaf} ({where})", tuple(log10), **kwargs)
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


def _refuse_a_run_inside_a_run(folder: Path, group: str | None) -> None:
    """A group's folder holds runs, a run's folder event files: never one inside the other
    (replacing run ``sweep`` would delete the group ``sweep/...``)."""
    try:
        if group:
            if any("tfevents" in p.name for p in folder.parent.iterdir() if p.is_file()):
                raise ValueError(f"{folder.parent} is a run, not a group of runs: give the group another name")
        elif any(p.is_dir() and not p.name.startswith(".") for p in folder.iterdir()):
            raise ValueError(f"{folder} holds a group of runs ({folder.name}/...): give this run another name")
    except FileNotFoundError:  # no such folder (yet): nothing to nest in
        pass


def tb_hint(where) -> None:
    """Print one line: where a run's logs went (a writer or a run folder) and how to view them.

    Example:
        >>> tb_hint("../runs/02_manual_backprop/manual-sgd")  # doctest: +SKIP
        logged to runs/02_manual_backprop/manual-sgd; view with `make tensorboard`
    """
    where = getattr(where, "log_dir", where)
    if not isinstance(where, (str, os.PathLike)):
        raise TypeError(
            f"tb_hint needs a SummaryWriter (lab.tb_writer's) or its run folder, got {type(where).__name__}"
        )
    log_dir = Path(where)
    shown = str(log_dir)
    if not os.environ.get("LAB_RUNS_DIR"):
        with contextlib.suppress(ValueError):
            shown = f"{RUNS_DIR}/{log_dir.resolve().relative_to(_runs_root(None).resolve()).as_posix()}"
    print(f"logged to {shown}; view with `make tensorboard`")

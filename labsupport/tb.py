"""TensorBoard: where a notebook's runs go, and tags that TensorBoard can chart.

A run lives in ``runs/<notebook>/<run>`` (no timestamp): running the cell again
**replaces** the run of that name (the old folder is moved out of ``runs/`` in one
rename and deleted before the new run writes), so reruns never pile up and a folder
never mixes two runs. A run stopped by an error or Ctrl-C is deleted. ``$LAB_RUNS_DIR``
moves the whole folder (tests and ``make regenerate`` use it to stay out of ``runs/``).

The writer prefixes every tag with the notebook's name (``loss`` in 02 is charted as
``02_manual_backprop/loss``), so no two notebooks' scales share an axis.
``add_hparams`` writes hyper-parameters for the HParams tab only, in the run's own
folder; metric values are not copied into one-point charts (the tab shows each
curve's last value instead).

Example:
    >>> with lab.tb_writer("02_manual_backprop", "manual-sgd") as writer:   # doctest: +SKIP
    ...     writer.add_scalar("loss", 1.0, 0)              # charted as 02_manual_backprop/loss
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = ["tb_writer", "tb_hint"]

RUNS_DIR = "runs"  # relative to the repository, unless $LAB_RUNS_DIR says otherwise
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")
_TAGGED = ("add_scalar", "add_scalars", "add_histogram", "add_image", "add_images",  # tag first
           "add_figure", "add_text", "add_audio", "add_video", "add_pr_curve", "add_mesh", "add_histogram_raw")


def _runs_root(root: str | os.PathLike | None = None) -> Path:
    """``root``, else $LAB_RUNS_DIR, else ``../runs`` from a notebook folder of the repository
    (notebooks/ and student/ share one runs/), else ``runs`` here."""
    if root is not None or os.environ.get("LAB_RUNS_DIR"):
        return Path(root if root is not None else os.environ["LAB_RUNS_DIR"])
    here = Path.cwd()
    in_repo = (here.parent / "labsupport").is_dir() and (here.parent / "notebooks").is_dir()
    return Path("..", RUNS_DIR) if in_repo else Path(RUNS_DIR)


def _discard(folder: Path) -> None:
    """Move ``folder`` out of the runs tree in one rename, then delete it."""
    if folder.exists():
        trash = Path(tempfile.mkdtemp(prefix=".tb-replaced-", dir=folder.parent.parent.parent))
        with contextlib.suppress(OSError):
            folder.rename(trash / folder.name)
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)   # if the rename failed


def _writer_class():
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    class NotebookWriter(SummaryWriter):
        """A SummaryWriter whose tags start with ``<notebook>/``."""
        def add_hparams(self, hparam_dict: Mapping[str, Any], metric_dict: Mapping[str, float] | None = None,
                        hparam_domain_discrete=None, run_name: str | None = None, global_step=None) -> None:
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
    """A ``SummaryWriter`` on a fresh ``runs/<notebook>/<run>`` (an older run of that
    name is replaced), flushed and closed at the end; deleted if the block raises.

    Example:
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
    _discard(folder)
    writer = _writer_class()(log_dir=str(folder), **kwargs)
    writer.tag_prefix = f"{notebook}/"
    try:
        yield writer
    except BaseException:
        writer.close()           # a run stopped half-way is removed, not kept beside the good ones
        _discard(folder)
        raise
    writer.close()


def tb_hint(where) -> None:
    """Print one line: where a run's logs went (a writer or a run folder) and how to view them.

    Example:
        >>> tb_hint("../runs/02_manual_backprop/manual-sgd")   # doctest: +SKIP
        logged to runs/02_manual_backprop/manual-sgd; view with `make tensorboard`
    """
    shown = str(log_dir := Path(getattr(where, "log_dir", where)))
    if not os.environ.get("LAB_RUNS_DIR"):
        with contextlib.suppress(ValueError):
            shown = f"{RUNS_DIR}/{log_dir.resolve().relative_to(_runs_root(None).resolve()).as_posix()}"
    print(f"logged to {shown}; view with `make tensorboard`")

"""TensorBoard: thin helpers over ``torch.utils.tensorboard.SummaryWriter``.

Runs live under ``runs/<notebook>/<run>-<timestamp>`` so two runs never share a
folder and TensorBoard lists them in the order they were made.

Example:
    >>> import labsupport as lab
    >>> with lab.tb_writer("02_manual_backprop", "manual") as writer:   # doctest: +SKIP
    ...     writer.add_scalar("loss", 1.0, 0)
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Iterator

__all__ = ["RUNS_DIR", "run_dir", "make_writer", "tb_writer", "read_scalars"]

#: Where logs go, relative to the working directory, unless $LAB_RUNS_DIR says otherwise.
RUNS_DIR = "runs"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")


def _runs_root(root: str | os.PathLike | None) -> Path:
    if root is not None:
        return Path(root)
    env = os.environ.get("LAB_RUNS_DIR")
    if env:
        return Path(env)
    # notebooks run in notebooks/ (or student/): log to the repository's runs/ beside it
    here = Path.cwd()
    if (here.parent / "labsupport").is_dir() and (here.parent / "notebooks").is_dir():
        return Path("..") / RUNS_DIR
    return Path(RUNS_DIR)


def run_dir(notebook: str, run: str, root: str | os.PathLike | None = None) -> Path:
    """Create and return a new, empty ``<root>/<notebook>/<run>-<YYYYmmdd-HHMMSS>``.

    If that folder exists already (two runs in one second), ``-2``, ``-3``...
    is appended. Names may hold letters, digits and ``_ . = -``.

    Example:
        >>> import tempfile
        >>> d = run_dir("01_tensors", "demo", root=tempfile.mkdtemp())
        >>> d.parent.name, d.name.startswith("demo-")
        ('01_tensors', True)
    """
    for label, value in (("notebook", notebook), ("run", run)):
        if not isinstance(value, str) or not _NAME.match(value):
            raise ValueError(f"{label} name must be letters, digits and _ . = - "
                             f"(no spaces or slashes), got {value!r}")
    parent = _runs_root(root) / notebook
    parent.mkdir(parents=True, exist_ok=True)
    base = f"{run}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 1000):
        candidate = parent / (base if n == 1 else f"{base}-{n}")
        try:
            candidate.mkdir()  # atomic: exactly one caller gets each name
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not find a free run folder under {parent}")


def make_writer(notebook: str, run: str, root: str | os.PathLike | None = None, **kwargs):
    """A ``SummaryWriter`` logging into a fresh :func:`run_dir`.

    Example:
        >>> writer = make_writer("02_manual_backprop", "manual")   # doctest: +SKIP
        >>> writer.log_dir                                          # doctest: +SKIP
        'runs/02_manual_backprop/manual-20261126-101500'
    """
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(run_dir(notebook, run, root)), **kwargs)


@contextlib.contextmanager
def tb_writer(notebook: str, run: str, root: str | os.PathLike | None = None,
              **kwargs) -> Iterator:
    """:func:`make_writer` as a context manager: the writer is flushed and closed
    even if training stops with an exception, so the run's event file stays
    readable up to the last step logged.

    Example:
        >>> with tb_writer("06_optim", "sgd") as w:       # doctest: +SKIP
        ...     w.add_scalar("loss", 0.5, 1)
    """
    writer = make_writer(notebook, run, root, **kwargs)
    try:
        yield writer
    finally:
        writer.flush()
        writer.close()


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Read a run's scalars back with TensorBoard's own event reader.

    Returns ``{tag: [(step, value), ...]}`` in the order they were logged.

    Example:
        >>> read_scalars("runs/02_manual_backprop/manual-sgd-20261126-101500")["loss"][:1]  # doctest: +SKIP
        [(0, 28900000.0)]
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = Path(log_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"no run folder at {path}")
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, float(e.value)) for e in acc.Scalars(tag)]
            for tag in acc.Tags().get("scalars", [])}

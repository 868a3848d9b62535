"""TensorBoard: thin helpers over ``torch.utils.tensorboard.SummaryWriter``.

Runs live under ``runs/<notebook>/<run>-<timestamp>`` so two runs never share a
folder and TensorBoard lists them in the order they were made. Everything is
written by ``SummaryWriter`` itself and read back with TensorBoard's own
``EventAccumulator``; this module only chooses folders and names.

Writing: :func:`tb_writer` (a writer for a fresh run folder), :func:`log_histograms`
(weights and gradients of a model), :func:`log_hparams` (hyper-parameters kept in
the run's own folder), :func:`tb_hint` (one line saying where the logs went).
Reading (tests, checks): :func:`read_scalars`, :func:`read_histograms`,
:func:`read_tags`, :func:`read_hparams`.

Example:
    >>> import labsupport as lab
    >>> with lab.tb_writer("02_manual_backprop", "manual") as writer:   # doctest: +SKIP
    ...     writer.add_scalar("loss", 1.0, 0)
    >>> lab.tb_hint(writer)                                             # doctest: +SKIP
    logged to runs/02_manual_backprop/manual-20261126-101500; view with `make tensorboard`
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from .paths import lab_folder

__all__ = ["RUNS_DIR", "run_dir", "make_writer", "tb_writer", "log_histograms", "log_hparams",
           "tb_hint", "read_scalars", "read_histograms", "read_tags", "read_hparams"]

#: Where logs go, relative to the working directory, unless $LAB_RUNS_DIR says otherwise.
RUNS_DIR = "runs"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")


def _runs_root(root: str | os.PathLike | None) -> Path:
    return lab_folder(RUNS_DIR, root=root, env="LAB_RUNS_DIR")


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
    at the end; if the block raises (Ctrl-C, an unsolved exercise), the half-written
    run folder is deleted so TensorBoard never shows it.

    Example:
        >>> with tb_writer("06_optim", "sgd") as w:       # doctest: +SKIP
        ...     w.add_scalar("loss", 0.5, 1)
    """
    writer = make_writer(notebook, run, root, **kwargs)
    try:
        yield writer
    except BaseException:
        # A run that stopped half-way (an exercise not solved, Ctrl-C) would sit in
        # TensorBoard beside the good ones: it is removed, not kept.
        writer.close()
        shutil.rmtree(writer.log_dir, ignore_errors=True)
        raise
    writer.flush()
    writer.close()


def log_histograms(writer, model, step: int, *, grads: bool = True) -> None:
    """Log a histogram of every parameter of ``model`` (tag ``weights/<name>``) and,
    with ``grads``, of every gradient present (tag ``grads/<name>``).

    Call it after ``loss.backward()`` and before ``optimizer.zero_grad()``, every
    few steps (a histogram costs far more than a scalar).

    Example:
        >>> import torch, tempfile
        >>> model = torch.nn.Linear(3, 2)
        >>> model(torch.ones(1, 3)).sum().backward()
        >>> with tb_writer("03_autograd", "demo", root=tempfile.mkdtemp()) as w:
        ...     log_histograms(w, model, step=0)
        >>> sorted(read_histograms(w.log_dir))
        ['grads/bias', 'grads/weight', 'weights/bias', 'weights/weight']
    """
    for name, param in model.named_parameters():
        writer.add_histogram(f"weights/{name}", param.detach(), step)
        if grads and param.grad is not None:
            writer.add_histogram(f"grads/{name}", param.grad, step)


def log_hparams(writer, hparams: Mapping[str, Any], metrics: Mapping[str, float] | None = None,
                step: int | None = None) -> None:
    """Record a run's hyper-parameters (and optional final metrics) for the HParams view.

    Unlike ``SummaryWriter.add_hparams``, which writes into a new sub-folder named
    by a timestamp (unless given ``run_name="."``), this keeps them in the run's own
    folder and in the run's own event file, so the HParams table
    has one row per run, and its metric columns are the run's scalars (their last
    values). ``metrics`` are logged as extra scalars at ``step``: give them new tags
    such as ``"hparam/final_loss"``, not a tag already logged per step.
    Values may be ``int``, ``float``, ``str`` or ``bool``.

    Example:
        >>> import tempfile
        >>> with tb_writer("06_optim", "adam", root=tempfile.mkdtemp()) as w:
        ...     w.add_scalar("loss", 0.5, 0)
        ...     log_hparams(w, {"optimizer": "adam", "lr": 1e-3}, {"hparam/final_loss": 0.5})
        >>> read_hparams(w.log_dir)
        {'lr': 0.001, 'optimizer': 'adam'}
    """
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    if not isinstance(hparams, Mapping) or not hparams:
        raise ValueError(f"hparams must be a non-empty dict of name -> value, got {hparams!r}")
    metrics = dict(metrics or {})
    # The experiment summary (first of the three) is left out on purpose: TensorBoard
    # then builds the table from all runs' session infos, so runs whose hparams
    # differ (momentum for SGD only, say) still all get their columns.
    _experiment, session_start, session_end = hparams_summaries(dict(hparams), metrics)
    file_writer = writer._get_file_writer()
    file_writer.add_summary(session_start, step)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, step)
    file_writer.add_summary(session_end, step)


def _display_dir(log_dir: Path) -> tuple[str, str]:
    """(how to show ``log_dir``, how to view it) for :func:`tb_hint`."""
    if not os.environ.get("LAB_RUNS_DIR"):
        root = _runs_root(None)
        try:
            rel = log_dir.resolve().relative_to(root.resolve())
            return f"{RUNS_DIR}/{rel.as_posix()}", "`make tensorboard`"
        except ValueError:
            pass
    root = log_dir.parent.parent
    return str(log_dir), f"`tensorboard --logdir {root} --host 127.0.0.1`"


def tb_hint(where) -> None:
    """Print one line: where a run's logs went and how to look at them.

    ``where`` is a ``SummaryWriter`` (its ``log_dir``) or a run folder.

    Example:
        >>> with tb_writer("02_manual_backprop", "manual-sgd") as writer:   # doctest: +SKIP
        ...     pass
        >>> tb_hint(writer)                                                  # doctest: +SKIP
        logged to runs/02_manual_backprop/manual-sgd-20261126-101500; view with `make tensorboard`
    """
    log_dir = Path(getattr(where, "log_dir", where))
    shown, view = _display_dir(log_dir)
    print(f"logged to {shown}; view with {view}")


def _accumulator(log_dir: str | os.PathLike):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = Path(log_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"no run folder at {path}")
    # size 0 = keep every event (the default samples scalars and histograms)
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Read a run's scalars back with TensorBoard's own event reader.

    Returns ``{tag: [(step, value), ...]}`` in the order they were logged.

    Example:
        >>> read_scalars("runs/02_manual_backprop/manual-sgd-20261126-101500")["loss"][:1]  # doctest: +SKIP
        [(0, 28900000.0)]
    """
    acc = _accumulator(log_dir)
    return {tag: [(e.step, float(e.value)) for e in acc.Scalars(tag)]
            for tag in acc.Tags().get("scalars", [])}


def read_histograms(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, Any]]]:
    """Read a run's histograms back with TensorBoard's event reader.

    Returns ``{tag: [(step, histogram), ...]}``; each histogram has the fields
    ``min, max, num, sum, sum_squares, bucket_limit, bucket``.

    Example:
        >>> h = read_histograms("runs/02_manual_backprop/manual-sgd-20261126-101500")  # doctest: +SKIP
        >>> h["grads/w1"][0][1].num                                                      # doctest: +SKIP
        100000.0
    """
    acc = _accumulator(log_dir)
    return {tag: [(e.step, e.histogram_value) for e in acc.Histograms(tag)]
            for tag in acc.Tags().get("histograms", [])}


def read_tags(log_dir: str | os.PathLike) -> dict[str, Any]:
    """Everything a run holds, by kind, as TensorBoard's event reader sees it:
    ``{"scalars": [...], "histograms": [...], "graph": bool, "tensors": [...], ...}``.
    (``"graph"`` is True once ``add_graph`` has written a model graph.)

    Example:
        >>> read_tags("runs/05_modules/mlp-20261126-101500")["graph"]   # doctest: +SKIP
        True
    """
    return _accumulator(log_dir).Tags()


def read_hparams(log_dir: str | os.PathLike) -> dict[str, Any]:
    """The hyper-parameters recorded in a run's own folder (by :func:`log_hparams`),
    as ``{name: value}``; ``{}`` when there are none.

    Example:
        >>> read_hparams("runs/06_optim/adam-20261126-101500")   # doctest: +SKIP
        {'lr': 0.001, 'optimizer': 'adam'}
    """
    from google.protobuf import json_format
    from tensorboard.plugins.hparams import metadata

    acc = _accumulator(log_dir)
    try:
        raw = acc.PluginTagToContent(metadata.PLUGIN_NAME).get(metadata.SESSION_START_INFO_TAG)
    except KeyError:  # no hparams summary at all in this run
        raw = None
    if raw is None:
        return {}
    start = metadata.parse_session_start_info_plugin_data(raw)
    return {name: json_format.MessageToDict(value) for name, value in sorted(start.hparams.items())}

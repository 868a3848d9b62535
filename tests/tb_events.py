"""Read a TensorBoard run back with TensorBoard's own ``EventAccumulator`` (tests only).

A run made by ``lab.tb_writer(notebook, run)`` lives in ``<root>/<notebook>/<run>``
and every tag it holds starts with ``<notebook>/``. The readers check that prefix
and return the tags without it (``"loss"``, ``"weights/w1"``), so a test names a
tag as the notebook wrote it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _accumulator(log_dir: str | os.PathLike):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = Path(log_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"no run folder at {path}")
    # size 0 = keep every event (the default samples scalars and histograms)
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def _unprefixed(log_dir: str | os.PathLike, tags: list[str]) -> dict[str, str]:
    prefix = Path(log_dir).parent.name + "/"
    wrong = [t for t in tags if not t.startswith(prefix)]
    assert not wrong, f"tags {wrong} of {log_dir} do not start with the notebook's name {prefix!r}"
    return {t[len(prefix) :]: t for t in tags}


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` in the order logged."""
    acc = _accumulator(log_dir)
    tags = _unprefixed(log_dir, acc.Tags().get("scalars", []))
    return {short: [(e.step, float(e.value)) for e in acc.Scalars(tag)] for short, tag in tags.items()}


def read_histograms(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, Any]]]:
    """``{tag: [(step, histogram), ...]}``; a histogram has ``min, max, num, sum, sum_squares, bucket``."""
    acc = _accumulator(log_dir)
    tags = _unprefixed(log_dir, acc.Tags().get("histograms", []))
    return {short: [(e.step, e.histogram_value) for e in acc.Histograms(tag)] for short, tag in tags.items()}


def read_tags(log_dir: str | os.PathLike) -> dict[str, Any]:
    """Everything a run holds, by kind (``"graph"`` is True once ``add_graph`` wrote a graph)."""
    return _accumulator(log_dir).Tags()


def read_hparams(log_dir: str | os.PathLike) -> dict[str, Any]:
    """The hyper-parameters recorded in the run's own event files, ``{}`` when none."""
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

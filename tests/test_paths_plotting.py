"""Where runs/ lives (labsupport.tb) and labsupport.plotting (loss curves)."""

import os
import re
from pathlib import Path

import nbformat
import pytest
import torch

import labsupport as lab
from labsupport.tb import _runs_root


def test_runs_folder_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    assert _runs_root(tmp_path / "r") == tmp_path / "r"
    assert str(_runs_root()) == "runs"
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "env"))
    assert _runs_root() == tmp_path / "env"
    monkeypatch.delenv("LAB_RUNS_DIR")
    for name in ("labsupport", "notebooks", "student"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "student")  # beside notebooks/: the repository's runs/
    assert str(_runs_root()) == os.path.join("..", "runs")


def test_plot_losses_draws_each_curve():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = lab.plot_losses({"a": [3.0, 2.0, 1.0], "b": [torch.tensor(2.0), torch.tensor(1.0)]})
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert ax.get_yscale() == "log" and ax.get_legend() is not None
    ax = lab.plot_losses([1.0, 0.5], log_y=False, title="t")
    assert ax.get_yscale() == "linear" and list(ax.get_lines()[0].get_ydata()) == [1.0, 0.5]
    assert ax.get_title() == "t" and ax.get_xlabel() == "step" and ax.get_legend() is None
    for empty in ({}, {"a": []}):
        with pytest.raises(ValueError, match="at least one curve|empty"):
            lab.plot_losses(empty)
    plt.close("all")


@pytest.mark.parametrize(
    "curves, message",
    [
        (None, "plot_losses needs a list of losses, or a dict of them (label -> list), got None"),
        ("0.5", "the losses must be a list of numbers, got str"),
        (0.5, "the losses must be a list of numbers, got float"),
        (torch.ones(2, 3), "the losses must be one-dimensional (one loss per step), got shape (2, 3)"),
        ({"sgd": None}, "curve 'sgd' must be a list of numbers, got NoneType"),
        ([1.0, "nan?", 2.0], "the losses: item 1 is 'nan?', not a number"),
        ([[1.0, 2.0]], "the losses: item 0 is [1.0, 2.0], not a number"),
    ],
)
def test_plot_losses_refuses_what_is_not_a_curve_in_one_sentence(curves, message):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    with pytest.raises((TypeError, ValueError), match=f"^{re.escape(message)}$"):
        lab.plot_losses(curves)
    assert plt.get_fignums() == before  # no empty figure left for the notebook to show


def test_a_diverging_curve_is_still_drawn():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = lab.plot_losses([1.0, float("inf"), float("nan")], log_y=False)
    assert len(ax.get_lines()[0].get_ydata()) == 3
    plt.close("all")


PLOTTED = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("0[0-8]_*.ipynb"))


@pytest.mark.parametrize("path", PLOTTED, ids=lambda p: p.stem)
def test_every_notebook_has_a_plot_and_each_plot_is_titled_and_labelled(path):
    # issue 26, item 8: a picture where one teaches; a chart without a title or axis labels teaches less
    nb = nbformat.read(path, as_version=4)
    plotting = [
        c for c in nb.cells if c.cell_type == "code" and any("image/png" in o.get("data", {}) for o in c.outputs)
    ]
    assert plotting, f"{path.name} stores no plot"
    for cell in plotting:
        assert "title" in cell.source, f"{path.name} cell {cell.id}: a plot without a title"
        labelled = "label" in cell.source or "plot_losses" in cell.source or "imshow" in cell.source  # images: no axes
        assert labelled, f"{path.name} cell {cell.id}: a plot without axis labels"

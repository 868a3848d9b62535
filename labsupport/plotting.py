"""Loss curves with matplotlib inline (end the notebook cell with ``plt.show()``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["plot_losses"]


def plot_losses(
    curves: Mapping[str, Sequence[float]] | Sequence[float],
    *,
    title: str = "training loss",
    xlabel: str = "step",
    ylabel: str = "loss",
    log_y: bool = True,
    ax=None,
):
    """Plot one curve (a list of numbers or 0-d tensors) or several (a dict label -> list)
    on one axis, on a log scale unless ``log_y=False`` (losses fall by orders of
    magnitude); return the axis.

    Example:
        >>> ax = plot_losses({"sgd": [4.0, 2.0, 1.0], "adam": [4.0, 1.0, 0.5]})   # doctest: +SKIP
    """
    import matplotlib.pyplot as plt

    if curves is None:
        raise TypeError("plot_losses needs a list of losses, or a dict of them (label -> list), got None")
    items = list(curves.items()) if isinstance(curves, Mapping) else [("loss", curves)]
    if not items:
        raise ValueError("plot_losses needs at least one curve")
    curves = [(label, _numbers(label, values)) for label, values in items]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for label, ys in curves:
        ax.plot(range(len(ys)), ys, label=str(label))
    if log_y:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if len(items) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    return ax


def _numbers(label: Any, values: Any) -> list[float]:
    """One curve's values as floats (NaN and inf kept: a diverging run is worth seeing), or one sentence saying
    what the curve should be."""
    what = f"curve {label!r}" if label != "loss" else "the losses"
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of numbers, got {type(values).__name__}")
    if getattr(values, "ndim", 1) != 1:
        raise ValueError(f"{what} must be one-dimensional (one loss per step), got shape {tuple(values.shape)}")
    ys = []
    for step, value in enumerate(values):
        try:
            ys.append(float(value))
        except (TypeError, ValueError):
            raise TypeError(f"{what}: item {step} is {value!r:.60}, not a number") from None
    if not ys:
        raise ValueError(f"{what} is empty")
    return ys

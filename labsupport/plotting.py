"""Plotting helpers for matplotlib inline.

Example:
    >>> import labsupport as lab
    >>> ax = lab.plot_losses({"manual": [3.0, 2.0, 1.0]})   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Mapping, Sequence

__all__ = ["plot_losses"]


def plot_losses(curves: Mapping[str, Sequence[float]] | Sequence[float], *, title: str = "training loss",
                xlabel: str = "step", ylabel: str = "loss", log_y: bool = True, ax=None):
    """Plot one or more loss curves on one axis and return the axis.

    ``curves`` is a list of numbers (one curve) or a dict label -> list. Values
    may be floats or 0-d tensors. ``log_y`` uses a log scale (losses usually fall
    by orders of magnitude). End the notebook cell with ``plt.show()``.

    Example:
        >>> ax = plot_losses([4.0, 2.0, 1.0], log_y=False)    # doctest: +SKIP
    """
    import matplotlib.pyplot as plt

    if isinstance(curves, Mapping):
        items = list(curves.items())
    else:
        items = [("loss", curves)]
    if not items:
        raise ValueError("plot_losses needs at least one curve")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for label, values in items:
        ys = [float(v) for v in values]
        if not ys:
            raise ValueError(f"curve {label!r} is empty")
        ax.plot(range(len(ys)), ys, label=str(label))
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(items) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    return ax

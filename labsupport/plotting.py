"""Loss curves with matplotlib inline (end the notebook cell with ``plt.show()``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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

    items = list(curves.items()) if isinstance(curves, Mapping) else [("loss", curves)]
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
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if len(items) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    return ax

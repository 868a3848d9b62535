"""Models the notebooks share.

* :class:`TwoLayerNet` and :class:`ParallelBlock`: the lecture's nn.Module examples.
* :class:`DigitsCNN`: a small CNN for the 8x8 digits (notebooks 07, 08, 10).

Example:
    >>> import torch
    >>> net = TwoLayerNet(1000, 100, 10)
    >>> net(torch.randn(64, 1000)).shape
    torch.Size([64, 10])
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["TwoLayerNet", "ParallelBlock", "DigitsCNN", "count_parameters"]


class TwoLayerNet(nn.Module):
    """``Linear(D_in, H) -> ReLU -> Linear(H, D_out)``, as in the lecture.

    Example:
        >>> TwoLayerNet(4, 3, 2)(torch.zeros(5, 4)).shape
        torch.Size([5, 2])
    """

    def __init__(self, D_in: int, H: int, D_out: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(D_in, H)
        self.linear2 = nn.Linear(H, D_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h_relu = self.linear1(x).clamp(min=0)
        return self.linear2(h_relu)


class ParallelBlock(nn.Module):
    """Two linear layers applied to the same input, their outputs multiplied
    element-wise and passed through a ReLU (the lecture's example of a
    module that is not a plain sequence).

    Example:
        >>> ParallelBlock(4, 3)(torch.zeros(5, 4)).shape
        torch.Size([5, 3])
    """

    def __init__(self, D_in: int, D_out: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(D_in, D_out)
        self.linear2 = nn.Linear(D_in, D_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = self.linear1(x)
        h2 = self.linear2(x)
        return (h1 * h2).clamp(min=0)


class DigitsCNN(nn.Module):
    """A small CNN for 1x8x8 digit images: ``features`` (two 3x3 convolutions and
    a 2x2 max-pool) then ``classifier`` (two linear layers).

    Split into ``features`` and ``classifier`` so transfer learning can keep one
    and replace the other.

    Example:
        >>> DigitsCNN()(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """

    def __init__(self, num_classes: int = 10, width: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(2 * width * 4 * 4, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters in ``model`` (only those with
    ``requires_grad`` when ``trainable_only``).

    Example:
        >>> count_parameters(torch.nn.Linear(3, 2))
        8
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)

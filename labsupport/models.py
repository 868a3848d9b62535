"""Models the notebooks share: :class:`DigitsCNN`, a small CNN for the 8x8 digits (notebooks 07-10),
and :func:`count_parameters` (05-08)."""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["DigitsCNN", "count_parameters"]


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

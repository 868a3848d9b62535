"""Models the notebooks share: :class:`DigitsCNN`, a small CNN for the 8x8 digits (notebooks 07-10),
and :func:`count_parameters` (05-08)."""

from __future__ import annotations

import numbers

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
        num_classes = _expect_size("num_classes", num_classes)
        width = _expect_size("width", width)
        hidden = _expect_size("hidden", hidden)
        self.features = nn.Sequential(
            nn.Conv2d(1, width, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(2 * width * 4 * 4, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _expect_images(x)
        return self.classifier(self.features(x))


def _expect_size(name: str, value: object) -> int:
    """A layer size as an int; one sentence for what is not a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"DigitsCNN: {name} must be a whole number >= 1, got {type(value).__name__} {value!r:.40}")
    if value < 1:
        raise ValueError(f"DigitsCNN: {name} must be a whole number >= 1, got {value}")
    return int(value)


def _expect_images(x: object) -> None:
    """Refuse what is not a batch of 1x8x8 images, in one sentence, before the layers' own errors."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"DigitsCNN takes a tensor of images of shape (N, 1, 8, 8), got {type(x).__name__}")
    if x.dim() != 4 or tuple(x.shape[1:]) != (1, 8, 8):
        raise ValueError(f"DigitsCNN takes images of shape (N, 1, 8, 8), got a tensor of shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"DigitsCNN takes floating-point images, got {x.dtype}: convert them with .float()")
    if x.device.type == "meta":
        raise ValueError("DigitsCNN got images on the meta device, which holds no values: use a real device")


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters in ``model`` (only those with
    ``requires_grad`` when ``trainable_only``).

    Example:
        >>> count_parameters(torch.nn.Linear(3, 2))
        8
    """
    if isinstance(model, type) and issubclass(model, nn.Module):
        raise TypeError(f"count_parameters takes a model, got the class {model.__name__}: create one first")
    if not isinstance(model, nn.Module):
        raise TypeError(f"count_parameters: expected an nn.Module, got {type(model).__name__}")
    if not isinstance(trainable_only, bool):
        raise TypeError(f"count_parameters: trainable_only must be True or False, got {trainable_only!r:.40}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)

"""MNIST and FashionMNIST through torchvision, offline-first (notebook 07).

The lab runs without a network: the digits ship with scikit-learn. MNIST is
used only when its files are already in the data folder, or when downloads are
switched on explicitly with ``LAB_DOWNLOAD=1`` (or ``download=True``); it is
never fetched behind the user's back, and never during the tests.

    LAB_DOWNLOAD=1 make lab      # notebook 07 then downloads MNIST (~12 MB) into data/

Example:
    >>> import tempfile
    >>> dataset, message = load_mnist(root=tempfile.mkdtemp())
    >>> dataset is None, message.startswith("MNIST is not in ")
    (True, True)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

from .paths import lab_folder

__all__ = ["DOWNLOAD_ENV", "data_dir", "load_mnist"]

#: Set this environment variable to 1 to allow downloads.
DOWNLOAD_ENV = "LAB_DOWNLOAD"
_NAMES = ("MNIST", "FashionMNIST")


def data_dir(root: str | os.PathLike | None = None) -> Path:
    """Where downloaded datasets live: ``root``, else ``$LAB_DATA_DIR``, else the
    repository's ``data/`` (``../data`` from ``notebooks/``). Git ignores it.

    Example:
        >>> data_dir("/tmp/x")
        PosixPath('/tmp/x')
    """
    return lab_folder("data", root=root, env="LAB_DATA_DIR")


def _to_tensor(image) -> torch.Tensor:
    """PIL 28x28 grey image -> float32 tensor (1, 28, 28) in [0, 1]."""
    data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    return data.reshape(1, image.size[1], image.size[0]).float() / 255.0


def load_mnist(name: str = "MNIST", *, train: bool = False, root: str | os.PathLike | None = None,
               download: bool | None = None,
               transform: Callable | None = None) -> tuple[torch.utils.data.Dataset | None, str]:
    """``torchvision.datasets.<name>`` if it can be had, and a one-line message.

    ``name`` is ``"MNIST"`` or ``"FashionMNIST"``. The files are looked for under
    :func:`data_dir`; if they are missing they are downloaded only when
    ``download`` is true (default: ``$LAB_DOWNLOAD == "1"``). Returns
    ``(dataset, message)``, or ``(None, message)`` when the data is not there,
    with the message saying why and how to get it. Items are ``(image, label)``
    with ``image`` a float32 tensor (1, 28, 28) in [0, 1] unless ``transform``
    is given.

    Example:
        >>> import tempfile
        >>> load_mnist("FashionMNIST", root=tempfile.mkdtemp())[0] is None
        True
    """
    if name not in _NAMES:
        raise ValueError(f"name must be one of {_NAMES}, got {name!r}")
    if download is None:
        download = os.environ.get(DOWNLOAD_ENV, "").strip() == "1"
    folder = data_dir(root)
    import torchvision

    cls = getattr(torchvision.datasets, name)
    transform = transform if transform is not None else _to_tensor
    try:
        dataset = cls(str(folder), train=train, download=False, transform=transform)
        return dataset, f"{name}: {len(dataset)} {'training' if train else 'test'} images from {folder}"
    except RuntimeError:
        pass  # not there (torchvision raises "Dataset not found")
    if not download:
        return None, (f"{name} is not in {folder} and downloads are off (set {DOWNLOAD_ENV}=1 to "
                      f"fetch it): continuing with the digits")
    try:
        dataset = cls(str(folder), train=train, download=True, transform=transform)
    except Exception as exc:  # noqa: BLE001 - no network shows up as URLError, RuntimeError, OSError...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"{name} could not be downloaded ({reason[:80]}): continuing with the digits"
    return dataset, f"{name}: {len(dataset)} {'training' if train else 'test'} images downloaded to {folder}"

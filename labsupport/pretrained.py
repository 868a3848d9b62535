"""Pretrained models without surprises (notebook 08): torchvision weights from the torch hub cache,
downloaded (hash checked by ``torch.hub``) only when the network is there; ImageNet top-k on a photo
that ships with matplotlib; a digits CNN pre-trained offline in seconds, for transfer learning."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .data import digits_split, load_digits_tensors
from .models import DigitsCNN

__all__ = ["weights_file", "load_pretrained", "grace_hopper", "imagenet_topk", "transfer_digits", "pretrain_digits_cnn"]


def _resolve(arch: str, weights: Any):
    """The member of ``arch``'s weights enum named by ``weights`` (a member or its name)."""
    from torchvision import models

    if not isinstance(arch, str):
        raise TypeError(f"arch must be a torchvision model name such as 'resnet18', got {type(arch).__name__}")
    try:
        enum = models.get_model_weights(arch)
    except (ValueError, KeyError):
        raise ValueError(f"torchvision has no model called {arch!r} (try 'resnet18', 'vgg16')") from None
    member = None
    with contextlib.suppress(KeyError, ValueError, TypeError):
        member = enum.verify(weights)
    if member is None:
        raise ValueError(f"{weights!r} are not weights for {arch}: choose one of {', '.join(enum.__members__)}")
    return member


def weights_file(arch: str, weights: Any) -> Path:
    """Where torch.hub keeps ``weights``: ``<torch.hub.get_dir()>/checkpoints/<file name of the URL>``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(_resolve(arch, weights).url)


def load_pretrained(
    arch: str, weights: Any, *, download: bool | None = None, timeout: float = 10.0
) -> nn.Module | None:
    """torchvision ``arch`` with ``weights``, in eval mode, or None after one line saying why. A missing
    file is downloaded if ``download`` (default: unless $LAB_OFFLINE is set)."""
    from torchvision import models

    if download is not None and not isinstance(download, bool):
        raise TypeError(f"download must be True, False or None, got {download!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise ValueError(f"timeout must be seconds in (0, 600], got {timeout!r}")
    weights, path, why = _resolve(arch, weights), weights_file(arch, weights), "downloads are off"
    offline = os.environ.get("LAB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no")
    if not path.is_file() and (download if download is not None else not offline):
        old = socket.getdefaulttimeout()
        try:
            socket.setdefaulttimeout(timeout)
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.hub.download_url_to_file(
                weights.url, str(path), hash_prefix=path.stem.rsplit("-", 1)[-1], progress=False
            )
        except (OSError, RuntimeError) as exc:  # no network, a timeout, or a wrong hash (nothing is left behind)
            why = f"cannot be downloaded ({str(getattr(exc, 'reason', exc)).strip().splitlines()[0][:80]})"
        finally:
            socket.setdefaulttimeout(old)
    name = f"{type(weights).__name__}.{weights.name}"
    if not path.is_file():
        print(
            f"{name} is not in the torch hub cache and {why}: put {path.name} (from {weights.url}) in "
            f"{path.parent}{os.sep} and run this cell again; going on without it."
        )
        return None
    try:
        torch.load(path, map_location="cpu", weights_only=True)  # tensors only, never pickled code
        return models.get_model(arch, weights=weights, progress=False).eval()
    except Exception as exc:  # truncated, pickled code, or the tensors of another network
        print(
            f"{path} is there but is not a valid {name} file ({type(exc).__name__}): delete it and "
            f"put the original file there; going on without it."
        )
        return None


def grace_hopper():
    """matplotlib's bundled photo of Grace Hopper, as an RGB PIL image (no download)."""
    from matplotlib import cbook
    from PIL import Image

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        return Image.open(f).convert("RGB")


#: Seconds one forward pass of imagenet_topk may take before it is stopped.
FORWARD_LIMIT = 120.0


def _whole(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is an int in [low, high], else a ValueError that says so."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int from {low} to {high}, got {value!r}")
    return value


@torch.no_grad()
def imagenet_topk(
    model: nn.Module, weights: Any, image: Any = None, k: int = 5, device: torch.device | str = "cpu"
) -> list[tuple[str, float]]:
    """The ``k`` likeliest ImageNet classes of ``image`` (default: grace_hopper()), [(name, probability)]."""
    from PIL import Image

    from .checks.running import stopped_after

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    meta = getattr(weights, "meta", None)
    if not isinstance(meta, dict) or "categories" not in meta or not hasattr(weights, "transforms"):
        raise TypeError(
            f"weights must be a torchvision weights enum such as ResNet18_Weights.IMAGENET1K_V1, got {weights!r}"
        )
    categories = meta["categories"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(categories):
        raise ValueError(f"k must be between 1 and {len(categories)} (an int), got {k!r}")
    if image is None:
        image = grace_hopper()
    if not isinstance(image, (Image.Image, torch.Tensor)):
        raise TypeError(f"image must be a PIL image or a tensor, got {type(image).__name__}")
    batch = weights.transforms()(image)[None].to(device)
    was_training = model.training
    model.to(device).eval()
    try:
        with stopped_after(FORWARD_LIMIT, "the model's forward pass", "a forward that never returns"):
            probabilities = model(batch).softmax(dim=1)[0].cpu()
    finally:
        model.train(was_training)
    top = probabilities.topk(k)
    return [(categories[i], float(p)) for p, i in zip(top.values.tolist(), top.indices.tolist())]


def transfer_digits(per_class: int = 3, *, seed: int = 0) -> dict[str, TensorDataset]:
    """The digits for transfer learning: ``source`` (half A of the training images), ``target_train``
    (``per_class`` images per digit from half B, chosen by ``seed``), ``target_val`` (the validation images)."""
    _whole(seed, "seed", 0, 2**63 - 1)
    images, labels = load_digits_tensors()
    train_idx, val_idx = digits_split(len(labels))
    shuffled = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(0))]
    part_a, part_b, g = shuffled[:719].sort().values, shuffled[719:], torch.Generator().manual_seed(seed)
    pools = [part_b[labels[part_b] == digit] for digit in range(10)]
    if isinstance(per_class, bool) or not isinstance(per_class, int) or not 1 <= per_class <= min(map(len, pools)):
        raise ValueError(f"per_class must be an int from 1 to {min(map(len, pools))}, got {per_class!r}")
    small = torch.cat([pool[torch.randperm(len(pool), generator=g)[:per_class]] for pool in pools]).sort().values
    return {
        name: TensorDataset(images[idx], labels[idx])
        for name, idx in (("source", part_a), ("target_train", small), ("target_val", val_idx))
    }


def pretrain_digits_cnn(*, epochs: int = 10, seed: int = 0, lr: float = 3e-3, batch_size: int = 64) -> DigitsCNN:
    """A DigitsCNN trained on ``transfer_digits()["source"]`` with Adam on the CPU, the same on every run
    (the global random state is left alone); in eval mode."""
    from .training import fit

    _whole(epochs, "epochs", 1, 100)  # 10 epochs take about a second
    _whole(seed, "seed", 0, 2**63 - 1)
    _whole(batch_size, "batch_size", 1, 719)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr <= 1:
        raise ValueError(f"lr must be a number in (0, 1], got {lr!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DigitsCNN()
        loader = DataLoader(
            transfer_digits()["source"], batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)
        )
        fit(model, loader, torch.optim.Adam(model.parameters(), lr=lr), epochs=epochs, device="cpu")
    return model.eval()

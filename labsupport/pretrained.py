"""Pretrained models without surprises: torchvision weights from the torch hub
cache (downloaded only when the network is there), ImageNet inference on a
photo that ships with matplotlib, and a digits CNN pre-trained in seconds for
transfer learning that needs no download at all (notebook 08).

Example:
    >>> import labsupport as lab
    >>> model = lab.load_pretrained("resnet18", "IMAGENET1K_V1")    # doctest: +SKIP
    ResNet18_Weights.IMAGENET1K_V1 is not in the torch hub cache and ...
    >>> lab.weights_file("resnet18", "IMAGENET1K_V1").name
    'resnet18-f37072fd.pth'
    >>> data = lab.transfer_digits(per_class=3)
    >>> len(data["target_train"])
    30
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .data import digits_split, load_digits_tensors
from .models import DigitsCNN

__all__ = ["weights_file", "load_pretrained", "grace_hopper", "imagenet_topk",
           "transfer_digits", "pretrain_digits_cnn"]

_HASH = re.compile(r"-([a-f0-9]+)\.")  # torchvision's file names end in -<sha256 prefix>.pth


def _resolve(arch: str, weights: Any):
    """The weights enum member for ``arch`` named by ``weights`` (member or its name)."""
    from torchvision import models

    if not isinstance(arch, str):
        raise TypeError(f"arch must be a torchvision model name such as 'resnet18', got "
                        f"{type(arch).__name__}")
    try:
        enum = models.get_model_weights(arch)
    except (ValueError, KeyError):
        raise ValueError(f"torchvision has no model called {arch!r} (try 'resnet18', "
                         f"'alexnet', 'vgg16')") from None
    if isinstance(weights, str):
        try:
            return enum.verify(weights)
        except (KeyError, ValueError):
            raise ValueError(f"{enum.__name__} has no member {weights!r}; choose one of "
                             f"{', '.join(enum.__members__)}") from None
    if not isinstance(weights, enum):
        raise ValueError(f"{weights!r} are not weights for {arch}: pass a member of "
                         f"{enum.__name__} ({', '.join(enum.__members__)})")
    return weights


def _name(weights: Any) -> str:
    return f"{type(weights).__name__}.{weights.name}"


def weights_file(arch: str, weights: Any) -> Path:
    """Where torch looks for ``weights``: ``<torch hub dir>/checkpoints/<file name of the URL>``.

    The hub dir is ``$TORCH_HOME/hub`` (default ``~/.cache/torch/hub``) or
    whatever ``torch.hub.set_dir`` chose.

    Example:
        >>> weights_file("resnet18", "IMAGENET1K_V1").parent.name
        'checkpoints'
    """
    weights = _resolve(arch, weights)
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(weights.url).path)


def _download(url: str, dest: Path, timeout: float = 10.0) -> None:
    """Fetch ``url`` to ``dest`` atomically, checking the sha256 prefix that
    torchvision puts in the file name. Raises ``OSError`` (offline, timeout,
    wrong hash); ``dest`` then does not exist.

    Example:
        >>> _download("https://download.pytorch.org/models/resnet18-f37072fd.pth", Path("r.pth"))  # doctest: +SKIP
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as src:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        match = _HASH.search(dest.name)
        if match and not digest.hexdigest().startswith(match.group(1)):
            raise OSError(f"downloaded file has sha256 {digest.hexdigest()[:12]}..., expected "
                          f"{match.group(1)}... (truncated or altered download)")
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _downloads_allowed(download: bool | None) -> bool:
    if download is not None:
        return bool(download)
    return os.environ.get("LAB_OFFLINE", "").strip().lower() in ("", "0", "false", "no")


def load_pretrained(arch: str, weights: Any, *, download: bool | None = None,
                    timeout: float = 10.0) -> nn.Module | None:
    """torchvision model ``arch`` with pretrained ``weights``, in eval mode on the CPU,
    or ``None`` (after one printed line saying why) when the weights are not available.

    ``weights`` is a member of the model's weights enum (``ResNet18_Weights.IMAGENET1K_V1``)
    or its name (``"IMAGENET1K_V1"``). The file is read from the torch hub cache
    (:func:`weights_file`). When it is missing it is downloaded if ``download``
    is true, or if ``download`` is ``None`` and ``$LAB_OFFLINE`` is not set;
    when that fails (no network) the printed line names the file and the folder
    to put it in, so the notebook can go on without it.

    Example:
        >>> model = load_pretrained("resnet18", "IMAGENET1K_V1", download=False)   # doctest: +SKIP
    """
    from torchvision import models

    weights = _resolve(arch, weights)
    path = weights_file(arch, weights)
    why = "downloads are off (download=False or $LAB_OFFLINE)"
    if not path.is_file() and _downloads_allowed(download):
        try:
            _download(weights.url, path, timeout)
        except OSError as exc:  # URLError, socket timeouts and hash mismatches are OSErrors
            reason = str(getattr(exc, "reason", exc)).strip() or type(exc).__name__
            why = f"cannot be downloaded ({reason.splitlines()[0]})"
    if not path.is_file():
        print(f"{_name(weights)} is not in the torch hub cache and {why}: put {path.name} "
              f"(from {weights.url}) in {path.parent}{os.sep} and run this cell again; "
              f"going on without it.")
        return None
    # Read it once with weights_only=True (tensors only, never pickled code), then let
    # torchvision build the model and load the file from the cache.
    problem = None
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, not a torch file, or holding more than tensors
        problem = f"not a plain file of tensors: {type(exc).__name__}"
    if problem is None:
        try:
            model = models.get_model(arch, weights=weights, progress=False)
        except Exception as exc:  # e.g. the tensors of another architecture
            problem = f"its tensors do not fit {arch}: {type(exc).__name__}"
    if problem is not None:
        print(f"{path} is there but is not a valid {_name(weights)} file ({problem}): delete it "
              f"and put the original file there; going on without it.")
        return None
    return model.eval()


def grace_hopper():
    """matplotlib's bundled photo of Grace Hopper as an RGB ``PIL.Image`` (no download).

    Example:
        >>> grace_hopper().size
        (512, 600)
    """
    from matplotlib import cbook
    from PIL import Image

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        return Image.open(f).convert("RGB")


@torch.no_grad()
def imagenet_topk(model: nn.Module, weights: Any, image: Any = None, k: int = 5,
                  device: torch.device | str = "cpu") -> list[tuple[str, float]]:
    """The ``k`` most likely ImageNet classes for ``image`` (default :func:`grace_hopper`),
    as ``[(category, probability), ...]`` best first.

    The image goes through the weights' own preprocessing (``weights.transforms()``:
    resize, centre crop, scale to [0, 1], normalise) and the names come from
    ``weights.meta["categories"]``.

    Example:
        >>> from torchvision.models import resnet18, ResNet18_Weights
        >>> top = imagenet_topk(resnet18(), ResNet18_Weights.IMAGENET1K_V1, k=3)
        >>> len(top), isinstance(top[0][0], str)
        (3, True)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    categories = weights.meta["categories"]
    if not 1 <= k <= len(categories):
        raise ValueError(f"k must be between 1 and {len(categories)}, got {k}")
    image = grace_hopper() if image is None else image
    batch = weights.transforms()(image).unsqueeze(0).to(device)
    was_training = model.training
    model.to(device).eval()
    probs = model(batch).softmax(dim=1)[0].cpu()
    model.train(was_training)
    top = probs.topk(k)
    return [(categories[i], float(p)) for p, i in zip(top.values.tolist(), top.indices.tolist())]


def transfer_digits(per_class: int = 3, *, seed: int = 0) -> dict[str, TensorDataset]:
    """The digits split for transfer learning, as TensorDatasets of (image, label):

    * ``source``: half of the training images (part A, all ten digits), the big
      labelled set a network is pre-trained on;
    * ``target_train``: ``per_class`` images of each digit from the other half
      (part B), the small labelled set of the new task;
    * ``target_val``: every validation image, to compare the methods on.

    Training and validation images are :func:`digits_split`'s (seed 0) and parts A
    and B a fixed random halving of the training images, so no image is in two
    sets; the ``per_class`` images are a random choice seeded by ``seed``.

    Example:
        >>> data = transfer_digits(per_class=3)
        >>> len(data["source"]), len(data["target_train"]), len(data["target_val"])
        (719, 30, 359)
    """
    if isinstance(per_class, bool) or not isinstance(per_class, int) or per_class < 1:
        raise ValueError(f"per_class must be a positive int, got {per_class!r}")
    images, labels = load_digits_tensors()
    train_idx, val_idx = digits_split(len(labels))
    shuffled = train_idx[torch.randperm(len(train_idx), generator=torch.Generator().manual_seed(0))]
    part_a, part_b = shuffled[: len(shuffled) // 2], shuffled[len(shuffled) // 2:]
    g = torch.Generator().manual_seed(seed)
    chosen = []
    for digit in range(10):
        pool = part_b[labels[part_b] == digit]
        if per_class > len(pool):
            raise ValueError(f"per_class={per_class} but part B has only {len(pool)} images of "
                             f"the digit {digit}")
        chosen.append(pool[torch.randperm(len(pool), generator=g)[:per_class]])
    small = torch.cat(chosen).sort().values
    part_a = part_a.sort().values
    return {
        "source": TensorDataset(images[part_a], labels[part_a]),
        "target_train": TensorDataset(images[small], labels[small]),
        "target_val": TensorDataset(images[val_idx], labels[val_idx]),
    }


def pretrain_digits_cnn(*, epochs: int = 10, seed: int = 0, lr: float = 3e-3,
                        batch_size: int = 64) -> DigitsCNN:
    """A :class:`DigitsCNN` trained on ``transfer_digits()["source"]`` (part A of the
    training images) with Adam, on the CPU, deterministically: the same weights on
    every run. Takes about a second; about 97% validation accuracy.

    The global random state is left as it was. Returned in eval mode.

    Example:
        >>> net = pretrain_digits_cnn(epochs=1)
        >>> net.classifier[-1].out_features, net.training
        (10, False)
    """
    from .training import fit

    source = transfer_digits()["source"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DigitsCNN()
        loader = DataLoader(source, batch_size=batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(seed))
        fit(model, loader, torch.optim.Adam(model.parameters(), lr=lr), epochs=epochs, device="cpu")
    return model.eval()

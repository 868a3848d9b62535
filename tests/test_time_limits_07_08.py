"""Helpers of notebooks 07 and 08 under bad input: what a student's code can block (a read or a
transform that never returns, a loader without end, a forward pass that hangs) is stopped with a
sentence, and arguments that would run for minutes are refused with one."""

import itertools
import time

import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision.models import ResNet18_Weights

import labsupport as lab
import labsupport.data as data
import labsupport.pretrained as pretrained


def _never(*args):
    while True:
        pass


class NeverReads(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        _never()


def test_time_loader_stops_a_read_that_never_returns():
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="time_loader did not finish within 0.3 s, so it was stopped: a read"):
        lab.time_loader(DataLoader(NeverReads()), limit=0.3)
    assert time.perf_counter() - start < 5


def test_time_loader_stops_a_loader_without_end():
    with pytest.raises(TimeoutError, match="a loader without end"):
        lab.time_loader(itertools.repeat(torch.zeros(1)), limit=0.3)


class NeverWakes(Dataset):
    """A read that never returns, asleep: the forked worker holds no core while time_loader waits for it, nor
    during the DataLoader's shutdown, which gives a worker 5 s before it terminates it."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        while True:
            time.sleep(1)


def test_time_loader_stops_a_worker_that_never_returns():
    loader = DataLoader(NeverWakes(), num_workers=1, multiprocessing_context="fork")
    with pytest.raises(TimeoutError, match="stopped"):
        lab.time_loader(loader, limit=1.0)


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ((None,), {}, TypeError),
        ((3,), {}, TypeError),
        (([torch.zeros(1)],), dict(epochs=10**6), ValueError),
        (([torch.zeros(1)],), dict(epochs=0), ValueError),
    ],
    ids=["None", "int", "a million epochs", "no epoch"],
)
def test_time_loader_refuses_absurd_arguments(args, kwargs, error):
    with pytest.raises(error, match="must be"):
        lab.time_loader(*args, **kwargs)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("sleep",), dict(items=10**6)),
        (("sleep",), dict(delay=5)),
        (("sleep",), dict(items=2000, delay=0.1)),
        (("nap",), {}),
        ((["sleep"],), {}),
        (("sleep",), dict(items=True)),
    ],
    ids=["a million items", "5 s reads", "200 s epochs", "unknown mode", "a list", "bool"],
)
def test_worker_speedup_refuses_what_would_run_for_minutes(args, kwargs):
    start = time.perf_counter()
    with pytest.raises(ValueError, match="must be"):
        lab.worker_speedup(*args, **kwargs)
    assert time.perf_counter() - start < 1


def test_slow_dataset_refuses_reads_of_minutes():
    with pytest.raises(ValueError, match=r"seconds in \[0, 1\]"):
        lab.SlowDataset(lab.SyntheticImages(2), delay=1e9)


def test_a_digits_transform_that_never_returns_is_stopped(monkeypatch):
    monkeypatch.setattr(data, "TRANSFORM_LIMIT", 0.3)
    digits = lab.DigitsDataset("val", transform=_never)
    with pytest.raises(TimeoutError, match="the transform of item 3 did not finish within 0.3 s"):
        digits[3]


def test_a_digits_transform_that_never_returns_is_stopped_in_a_worker(monkeypatch):
    monkeypatch.setattr(data, "TRANSFORM_LIMIT", 0.3)  # a forked worker inherits it
    loader = DataLoader(lab.DigitsDataset("val", transform=_never), num_workers=1, multiprocessing_context="fork")
    with pytest.raises(TimeoutError, match="the transform of item 0 did not finish"):
        next(iter(loader))


def test_inside_time_loader_its_own_limit_stays_in_charge(monkeypatch):
    monkeypatch.setattr(data, "TRANSFORM_LIMIT", 30.0)
    loader = DataLoader(lab.DigitsDataset("val", transform=_never))
    with pytest.raises(TimeoutError, match="time_loader did not finish within 0.5 s"):
        lab.time_loader(loader, limit=0.5)


def test_digits_transforms_still_transform():
    digits = lab.DigitsDataset("val", transform=lambda image: image * 0 + 1)
    image, label = digits[0]
    assert torch.equal(image, torch.ones(1, 8, 8)) and isinstance(label, int)


def test_a_transform_that_is_not_a_function_is_refused():
    with pytest.raises(TypeError, match="transform must be a function"):
        lab.DigitsDataset("val", transform=3)


class NeverForward(nn.Module):
    def forward(self, x):
        _never()


def test_imagenet_topk_stops_a_forward_that_never_returns(monkeypatch):
    monkeypatch.setattr(pretrained, "FORWARD_LIMIT", 0.3)
    model = NeverForward().train()
    with pytest.raises(TimeoutError, match="the model's forward pass did not finish within 0.3 s"):
        lab.imagenet_topk(model, ResNet18_Weights.IMAGENET1K_V1, Image.new("RGB", (8, 8)))
    assert model.training  # its mode is given back


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(weights="resnet18"), TypeError),
        (dict(weights=None), TypeError),
        (dict(k=True), ValueError),  # "k must be between"
        (dict(k=0), ValueError),
        (dict(image="photo.jpg"), TypeError),
    ],
    ids=["weights a string", "weights None", "k True", "k 0", "image a path"],
)
def test_imagenet_topk_refuses_bad_arguments(kwargs, error):
    args = {"model": nn.Identity(), "weights": ResNet18_Weights.IMAGENET1K_V1, **kwargs}
    with pytest.raises(error, match="must be"):
        lab.imagenet_topk(**args)


@pytest.mark.parametrize(
    "kwargs",
    [dict(epochs=10**6), dict(epochs=0), dict(lr=float("nan")), dict(lr=-1), dict(batch_size=0), dict(seed="a")],
    ids=["a million epochs", "no epoch", "lr NaN", "lr negative", "no batch", "seed a string"],
)
def test_pretrain_digits_cnn_refuses_absurd_arguments(kwargs):
    start = time.perf_counter()
    with pytest.raises(ValueError, match="must be"):
        lab.pretrain_digits_cnn(**kwargs)
    assert time.perf_counter() - start < 1


def test_transfer_digits_refuses_a_bad_seed():
    with pytest.raises(ValueError, match="seed must be"):
        lab.transfer_digits(seed=-1)


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(timeout=-1), ValueError), (dict(timeout=1e9), ValueError), (dict(download="yes"), TypeError)],
)
def test_load_pretrained_refuses_bad_arguments(kwargs, error):
    with pytest.raises(error, match="must be"):
        lab.load_pretrained("resnet18", ResNet18_Weights.IMAGENET1K_V1, **kwargs)

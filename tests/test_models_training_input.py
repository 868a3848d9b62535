"""labsupport.models and labsupport.training answer bad arguments with one sentence naming the function and the
argument, never with an error from deep inside torch; good arguments still work."""

import re

import numpy as np
import pytest
import torch
from torch import nn

import labsupport as lab


def _sgd():
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _batches():
    return [(torch.zeros(2, 1, 8, 8), torch.zeros(2, dtype=torch.long))]


BAD_CALLS = {
    "DigitsCNN num_classes str": (lambda: lab.DigitsCNN(num_classes="10"), TypeError, "DigitsCNN: num_classes"),
    "DigitsCNN num_classes 0": (lambda: lab.DigitsCNN(num_classes=0), ValueError, "DigitsCNN: num_classes"),
    "DigitsCNN width -1": (lambda: lab.DigitsCNN(width=-1), ValueError, "DigitsCNN: width"),
    "DigitsCNN width 2.5": (lambda: lab.DigitsCNN(width=2.5), TypeError, "DigitsCNN: width"),
    "DigitsCNN hidden True": (lambda: lab.DigitsCNN(hidden=True), TypeError, "DigitsCNN: hidden"),
    "DigitsCNN on 28x28": (lambda: lab.DigitsCNN()(torch.zeros(2, 1, 28, 28)), ValueError, "shape (N, 1, 8, 8)"),
    "DigitsCNN on flat images": (lambda: lab.DigitsCNN()(torch.zeros(2, 64)), ValueError, "shape (N, 1, 8, 8)"),
    "DigitsCNN on one image": (lambda: lab.DigitsCNN()(torch.zeros(1, 8, 8)), ValueError, "shape (N, 1, 8, 8)"),
    "DigitsCNN on None": (lambda: lab.DigitsCNN()(None), TypeError, "takes a tensor of images"),
    "DigitsCNN on a list": (lambda: lab.DigitsCNN()([1.0]), TypeError, "takes a tensor of images"),
    "DigitsCNN on numpy": (lambda: lab.DigitsCNN()(np.zeros((2, 1, 8, 8))), TypeError, "got ndarray"),
    "DigitsCNN on ints": (lambda: lab.DigitsCNN()(torch.zeros(2, 1, 8, 8, dtype=torch.long)), TypeError, "floating"),
    "DigitsCNN on meta": (lambda: lab.DigitsCNN()(torch.zeros(2, 1, 8, 8, device="meta")), ValueError, "meta"),
    "count_parameters None": (lambda: lab.count_parameters(None), TypeError, "count_parameters: expected an nn.Module"),
    "count_parameters class": (lambda: lab.count_parameters(nn.Linear), TypeError, "got the class Linear"),
    "count_parameters flag": (lambda: lab.count_parameters(nn.Linear(2, 2), "no"), TypeError, "trainable_only"),
    "digits_loaders 0": (lambda: lab.digits_loaders(0), ValueError, "digits_loaders: batch_size"),
    "digits_loaders '64'": (lambda: lab.digits_loaders("64"), TypeError, "digits_loaders: batch_size"),
    "digits_loaders seed": (lambda: lab.digits_loaders(seed="x"), TypeError, "digits_loaders: seed"),
    "digits_loaders workers": (lambda: lab.digits_loaders(num_workers=-1), ValueError, "digits_loaders: num_workers"),
    "digits_loaders transform": (lambda: lab.digits_loaders(train_transform=3), TypeError, "train_transform"),
    "fit device": (lambda: lab.fit(nn.Linear(2, 2), [], _sgd(), device="gpu"), ValueError, "fit: device must be"),
    "fit meta": (lambda: lab.fit(nn.Linear(2, 2), [], _sgd(), device="meta"), ValueError, "fit: device must be"),
    "fit loss_fn": (lambda: lab.fit(nn.Linear(2, 2), [], _sgd(), loss_fn="ce"), TypeError, "fit: loss_fn"),
    "fit writer": (lambda: lab.fit(nn.Linear(2, 2), [], _sgd(), writer=3), TypeError, "fit: writer"),
    "fit epochs True": (lambda: lab.fit(nn.Linear(2, 2), [], _sgd(), epochs=True), TypeError, "fit: epochs"),
    "fit bad batches": (
        lambda: lab.fit(nn.Linear(64, 10), [(torch.zeros(2, 64),)], _sgd()),
        TypeError,
        "fit: each batch of the loader must be a pair",
    ),
    "fit called wrongly": (lambda: lab.fit(nn.Linear(2, 2)), TypeError, "fit(model, loader"),
    "evaluate loader of tensors": (
        lambda: lab.evaluate(nn.Linear(64, 10), [torch.zeros(2, 64)]),
        TypeError,
        "evaluate: each batch of the loader must be a pair",
    ),
    "evaluate loader None": (lambda: lab.evaluate(nn.Linear(2, 2), None), TypeError, "evaluate: loader"),
    "evaluate device 3": (lambda: lab.evaluate(nn.Linear(2, 2), _batches(), device=3), ValueError, "evaluate: device"),
    "evaluate device 'cuda'": (
        lambda: lab.evaluate(nn.Linear(2, 2), _batches(), "cuda"),
        ValueError,
        "evaluate: device",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_arguments_get_one_sentence(case):
    if "cuda" in case and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    call, error, fragment = BAD_CALLS[case]
    with pytest.raises(error, match=re.escape(fragment)) as info:
        call()
    assert "\n" not in str(info.value)


def test_good_arguments_still_work():
    cnn = lab.DigitsCNN(num_classes=np.int64(3), width=4, hidden=8)
    assert cnn(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    assert lab.DigitsCNN().double()(torch.zeros(1, 1, 8, 8, dtype=torch.float64)).dtype == torch.float64
    assert lab.count_parameters(cnn, trainable_only=True) == lab.count_parameters(cnn)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    losses = lab.fit(
        model, _batches() * 3, torch.optim.SGD(model.parameters(), 0.1), epochs=2, device=torch.device("cpu")
    )
    assert len(losses) == 6
    assert lab.evaluate(model, _batches()) in (0.0, 0.5, 1.0)

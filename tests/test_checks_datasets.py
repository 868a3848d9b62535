"""Checks of notebook 07 (data loading): a Dataset written from its spec."""
import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

import labsupport as lab


class SlidingWindows(Dataset):
    def __init__(self, series, window, transform=None):
        self.series, self.window, self.transform = series, window, transform

    def __len__(self):
        return len(self.series) - self.window

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} windows")
        inputs = self.series[index:index + self.window]
        if self.transform is not None:
            inputs = self.transform(inputs)
        return inputs, self.series[index + self.window]


def test_reference_passes(capsys):
    lab.check_window_dataset(SlidingWindows)
    assert capsys.readouterr().out == ("PASS  SlidingWindows: length, items, negative and out-of-range "
                                       "indices, transform and DataLoader batches all match the spec\n")


def with_getitem(getitem):
    return type("SlidingWindows", (SlidingWindows,), {"__getitem__": getitem})


def with_len(length):
    return type("SlidingWindows", (SlidingWindows,), {"__len__": length})


def _no_negative(self, index):
    if index >= len(self):
        raise IndexError(index)
    return self.series[index:index + self.window], self.series[index + self.window]


def _no_range_check(self, index):
    if index < 0:
        index += len(self)
    return self.series[index:index + self.window], self.series[index + self.window]


def _value_error(self, index):
    if not -len(self) <= index < len(self):
        raise ValueError("out of range")
    return SlidingWindows.__getitem__(self, index)


def _target_slice(self, index):
    inputs, _ = SlidingWindows.__getitem__(self, index)
    i = index % len(self)
    return inputs, self.series[i + self.window:i + self.window + 1]


def _target_item(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs, target.item()


def _transform_both(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    if self.transform is not None:
        target = self.transform(target)
    return inputs, target


def _transform_ignored(self, index):
    saved, self.transform = self.transform, None
    try:
        return SlidingWindows.__getitem__(self, index)
    finally:
        self.transform = saved


def _wrong_target(self, index):
    inputs, _ = SlidingWindows.__getitem__(self, index)
    i = index % len(self)
    return inputs, self.series[i + self.window - 1]


def _random(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs + 0.01 * torch.randn(inputs.shape), target


def _in_place(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    if self.transform is not None:
        i = index % len(self)
        self.series[i:i + self.window] *= 1.0001  # modifies the caller's series
    return inputs, target


def _list_inputs(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs.tolist(), target


def _numpy_inputs(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs.numpy(), target


def _float64(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs.double(), target.double()


def _dict_item(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return {"inputs": inputs, "target": target}


def _nan(self, index):
    inputs, target = SlidingWindows.__getitem__(self, index)
    return inputs * float("nan"), target


def _stub(self, index):
    raise NotImplementedError("Exercise 1: a Dataset from its spec")


@pytest.mark.parametrize("variant, fragment", [
    (with_len(lambda self: len(self.series) - self.window + 1), r"len\(.*\) is 18; expected 17\. The last window"),
    (with_len(lambda self: len(self.series) - self.window - 1), r"is 16; expected 17: the last window"),
    (with_len(lambda self: len(self.series)), r"is 20; expected len\(series\) - window = 17"),
    (with_getitem(_no_negative), r"\[-1\] is not item 16 .*Negative indices count from the end"),
    (with_getitem(_no_range_check), r"\[-18\] returned tuple .*expected IndexError"),
    (with_getitem(_value_error), r"raised ValueError: out of range; expected IndexError"),
    (with_getitem(_target_slice), r"the target has shape \(1,\); expected a 0-d tensor"),
    (with_getitem(_target_item), "the target is a Python float"),
    (with_getitem(_transform_both), "the transform was applied to the target too"),
    (with_getitem(_transform_ignored), "the inputs are the raw window"),
    (with_getitem(_wrong_target), r"expected series\[0 \+ 3\]"),
    (with_getitem(_random), "gives a different item the second time"),
    (with_getitem(_in_place), r"with a transform\[0\] modified the series it was given \(in place\)"),
    (with_getitem(_list_inputs), "got list"),
    (with_getitem(_numpy_inputs), "got numpy"),
    (with_getitem(_float64), "dtype torch.float64"),
    (with_getitem(_dict_item), r"should be a tuple \(inputs, target\), got dict"),
    (with_getitem(_nan), "NaN"),
    (with_getitem(_stub), r"not written yet \(Exercise 1: a Dataset from its spec\)"),
])
def test_mistakes(variant, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_window_dataset(variant)


class NoTransformArgument(SlidingWindows):
    def __init__(self, series, window):
        super().__init__(series, window)


class CollateBreaks(SlidingWindows):
    """Windows of varying length: each item is right alone but default_collate cannot stack them."""

    def __getitem__(self, index):
        inputs, target = super().__getitem__(index)
        return (inputs if index != 5 else inputs[:-1]), target


def test_missing_transform_argument():
    with pytest.raises(lab.CheckError, match="raised TypeError"):
        lab.check_window_dataset(NoTransformArgument)


def test_a_loader_that_cannot_collate_is_reported():
    with pytest.raises(lab.CheckError, match=r"iterating DataLoader\(.*raised RuntimeError"):
        lab.check_window_dataset(CollateBreaks)


class Stub(Dataset):
    def __init__(self, series, window, transform=None):
        raise NotImplementedError("Exercise 1: a Dataset from its spec")


@pytest.mark.parametrize("bad, fragment", [
    (None, "got None"),
    (SlidingWindows(torch.zeros(5), 2), "got an instance of it"),
    (torch.utils.data.TensorDataset, "raised AttributeError"),
    (list, "must be a subclass of torch.utils.data.dataset.Dataset"),
    (np.arange(3), "got numpy"),
    (Stub, r"not written yet \(Exercise 1"),
])
def test_bad_inputs(bad, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_window_dataset(bad)

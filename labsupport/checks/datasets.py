"""Checks for notebook 07 (data loading): a map-style ``Dataset`` written from a spec.

The spec, ``SlidingWindows(series, window, transform=None)`` over a 1-D float
tensor: item ``i`` is ``(inputs, target)`` with ``inputs = series[i:i+window]``
(after ``transform``) and ``target = series[i+window]`` as a 0-d tensor; there
are ``len(series) - window`` items; negative indices count from the end and
out-of-range indices raise ``IndexError``.

Example:
    >>> import torch, labsupport as lab
    >>> from torch.utils.data import Dataset
    >>> class SlidingWindows(Dataset):
    ...     def __init__(self, series, window, transform=None):
    ...         self.series, self.window, self.transform = series, window, transform
    ...     def __len__(self):
    ...         return len(self.series) - self.window
    ...     def __getitem__(self, i):
    ...         if i < 0:
    ...             i += len(self)
    ...         if not 0 <= i < len(self):
    ...             raise IndexError(f"index out of range for {len(self)} windows")
    ...         inputs = self.series[i:i + self.window]
    ...         if self.transform is not None:
    ...             inputs = self.transform(inputs)
    ...         return inputs, self.series[i + self.window]
    >>> lab.check_window_dataset(SlidingWindows)
    PASS  SlidingWindows: length, items, negative and out-of-range indices, transform and DataLoader batches all match the spec
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from .core import CheckError, call_student, describe, expect_tensor, passed, rel_error
from .modules import expect_class

__all__ = ["check_window_dataset"]


class _Scale:
    """The check's transform: multiply by a constant (a class, so it pickles)."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and values (NaN equal to NaN)."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.all((a == b) | (a != a) & (b != b)))


def _item(ds: Any, index: int, label: str) -> tuple[torch.Tensor, torch.Tensor]:
    __tracebackhide__ = True
    item = call_student(ds.__getitem__, index, what=f"{label}[{index}]")
    if not isinstance(item, tuple) or len(item) != 2:
        raise CheckError(f"{label}[{index}] should be a tuple (inputs, target), got {describe(item)}.")
    return item


def _expect_item(item: tuple, index: int, series: torch.Tensor, window: int, label: str,
                 factor: float = 1.0, live: torch.Tensor | None = None) -> None:
    """Compare ``item`` with the spec's item ``index`` of ``series`` (an untouched copy);
    ``live`` is the tensor the dataset holds, which must still equal it."""
    __tracebackhide__ = True
    if live is not None and not torch.equal(live, series):
        raise CheckError(f"{label}[{index}] modified the series it was given (in place): read from "
                         f"it, never write to it; a transform must return a new tensor.")
    inputs, target = item
    n = len(series) - window
    i = index + n if index < 0 else index
    want_inputs, want_target = series[i:i + window] * factor, series[i + window]
    name = f"{label}[{index}]"
    if isinstance(target, (float, int)) and not isinstance(target, bool):
        raise CheckError(f"{name}: the target is a Python {type(target).__name__}; expected a 0-d "
                         f"float32 tensor. Return series[i + window] as it is (no .item()).")
    if isinstance(target, torch.Tensor) and target.shape == (1,):
        raise CheckError(f"{name}: the target has shape (1,); expected a 0-d tensor (shape ()). "
                         f"Index with series[i + window] instead of slicing series[i + window:i + window + 1].")
    expect_tensor(inputs, f"{name}'s inputs", shape=(window,), dtype=torch.float32)
    expect_tensor(target, f"{name}'s target", shape=(), dtype=torch.float32)
    if rel_error(target, want_target) > 1e-6:
        if factor != 1.0 and rel_error(target, want_target * factor) < 1e-6:
            raise CheckError(f"{name}: the transform was applied to the target too; apply it to the "
                             f"inputs (the window) only.")
        raise CheckError(f"{name}: the target is {float(target):.4g}; expected series[{i} + {window}] = "
                         f"{float(want_target):.4g} (the value right after the window).")
    if rel_error(inputs, want_inputs) > 1e-6:
        if factor != 1.0 and rel_error(inputs, want_inputs / factor) < 1e-6:
            raise CheckError(f"{name}: the inputs are the raw window; the transform given to the "
                             f"constructor must be applied to them (if transform is not None).")
        raise CheckError(f"{name}: the inputs are not series[{i}:{i} + {window}].")


def check_window_dataset(SlidingWindows: Any) -> None:
    """Check a ``SlidingWindows(series, window, transform=None)`` Dataset class
    against its spec (see the module docstring).

    Exercises ``__len__`` (recognises the off-by-one in both directions),
    ``__getitem__`` at the start, middle and end, negative indices, out-of-range
    indices (which must raise ``IndexError``), repeated access (same item
    twice), the transform (on the inputs only), that the series is not
    modified, and a ``DataLoader`` over the dataset (batch shapes and order).

    Example:
        >>> check_window_dataset(None)          # the exercise cell has not run yet
        Traceback (most recent call last):
        ...
        labsupport.checks.core.CheckError: expected the class SlidingWindows, got None. Write the class in the exercise cell above and run that cell, then run this check again.
    """
    __tracebackhide__ = True
    cls = expect_class(SlidingWindows, Dataset, "SlidingWindows")
    for case, (length, window) in enumerate([(20, 3), (13, 5)]):
        series = torch.randn(length, generator=torch.Generator().manual_seed(70 + case))
        original = series.clone()
        label = f"SlidingWindows(series of {length}, window={window})"
        ds = call_student(cls, series, window, what=label)
        n = length - window
        got_len = call_student(len, ds, what=f"len({label})")
        if got_len == n + 1:
            raise CheckError(f"len({label}) is {got_len}; expected {n}. The last window "
                             f"series[{n}:{length}] has no next value to predict, so it is not an item: "
                             f"len(series) - window.")
        if got_len == n - 1:
            raise CheckError(f"len({label}) is {got_len}; expected {n}: the last window "
                             f"series[{n - 1}:{length - 1}] with target series[{length - 1}] is missing.")
        if got_len != n:
            raise CheckError(f"len({label}) is {got_len}; expected len(series) - window = {n}.")
        first, again = _item(ds, 3, label), _item(ds, 3, label)
        if all(isinstance(t, torch.Tensor) for t in first + again) and not (
                _same(first[0], again[0]) and _same(first[1], again[1])):
            raise CheckError(f"{label}[3] gives a different item the second time: items must depend "
                             f"on the index only (no randomness or state in __getitem__ here).")
        for index in (0, n // 2, n - 1):
            _expect_item(_item(ds, index, label), index, original, window, label, live=series)
        for index in (-1, -n):  # the same items as n - 1 and 0, which passed just above
            try:
                _expect_item(_item(ds, index, label), index, original, window, label, live=series)
            except CheckError as err:
                raise CheckError(f"{label}[{index}] is not item {index + n} ({err}). Negative indices "
                                 f"count from the end, like a list's: start __getitem__ with "
                                 f"`if index < 0: index += len(self)`.") from None
        for index in (n, n + 5, -n - 1):
            try:
                item = ds[index]
            except IndexError:
                continue
            except Exception as exc:  # noqa: BLE001 - report whatever the student's code raised
                raise CheckError(f"{label}[{index}] raised {type(exc).__name__}: {exc}; expected "
                                 f"IndexError for an index out of range (there are {n} items).") from None
            raise CheckError(f"{label}[{index}] returned {describe(item)}; expected IndexError (there "
                             f"are only {n} items, valid indices {-n}..{n - 1}). Without it a plain "
                             f"`for item in dataset` never stops. Raise IndexError when the index is "
                             f"out of range.")
        if not torch.equal(series, original):
            raise CheckError(f"{label} modified the series it was given; read from it, never write to it.")
        # the transform, on the inputs only
        factor = 10.0
        tds = call_student(cls, series, window, transform=_Scale(factor),
                           what=f"SlidingWindows(series, {window}, transform=...)")
        for index in (0, n - 1, -2):
            _expect_item(_item(tds, index, label + " with a transform"), index, original, window,
                         label + " with a transform", factor=factor, live=series)
        if not torch.equal(series, original):
            raise CheckError(f"{label} with a transform modified the series: the transform must get "
                             f"the window, and must not change the series in place.")
        # a DataLoader over it: batches, in order
        batch = 4
        loader = DataLoader(ds, batch_size=batch, shuffle=False)
        got_inputs, got_targets = [], []
        try:
            for inputs, targets in loader:
                got_inputs.append(inputs)
                got_targets.append(targets)
        except Exception as exc:  # noqa: BLE001
            raise CheckError(f"iterating DataLoader({label}, batch_size={batch}) raised "
                             f"{type(exc).__name__}: {exc}") from None
        want_batches = -(-n // batch)
        if len(got_inputs) != want_batches:
            raise CheckError(f"DataLoader(batch_size={batch}) over {label} gave {len(got_inputs)} "
                             f"batches; expected {want_batches} for {n} items.")
        if tuple(got_inputs[0].shape) != (batch, window) or tuple(got_targets[0].shape) != (batch,):
            raise CheckError(f"the first batch has inputs {tuple(got_inputs[0].shape)} and targets "
                             f"{tuple(got_targets[0].shape)}; expected ({batch}, {window}) and ({batch},).")
        all_inputs, all_targets = torch.cat(got_inputs), torch.cat(got_targets)
        want_inputs = series.unfold(0, window, 1)[:n]
        if not torch.equal(all_inputs, want_inputs) or not torch.equal(all_targets, series[window:]):
            raise CheckError(f"the DataLoader's batches over {label} are not the windows in order.")
    passed("SlidingWindows: length, items, negative and out-of-range indices, transform and "
           "DataLoader batches all match the spec")

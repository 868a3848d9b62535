"""Checks of notebook 01: each function exercise runs seeded cases against an independent reference
and names the typical mistakes (cases with ties at the row mean, labels without the last class, float32).

Example:
    >>> x = _tied_rows(0, (3, 4), torch.float64)
    >>> bool((x == x.mean(dim=1, keepdim=True)).any(dim=1).all())   # every row holds its own mean
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .core import (
    CheckError,
    Mistake,
    check_prediction,
    exercise,
    mistake_error,
    passed,
    rel_error,
    run_cases,
    run_student,
)
from .running import TorchCalls
from .values import plain_tensor

__all__ = [
    "check_pairwise_sq_dists",
    "check_storage_prediction",
    "check_correct_class_scores",
    "check_keep_above_row_mean",
    "check_channels_first_rows",
    "check_per_sample_matmul",
]

RTOL = 1e-4
ATOL = 1e-5


def _randn(seed: int, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    """Seeded normal tensors of the given shapes (drawn on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=dtype) for shape in shapes)


def _tied_rows(seed: int, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """Whole numbers whose rows each contain their own mean exactly (a tie with the mean in every row)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, shape, generator=g).to(torch.float64)
    columns = shape[1]
    for row in x:
        row[-1] = columns * row[0] - row[:-1].sum()  # the row's sum is columns * row[0]: its mean is row[0]
    return x.to(dtype)


#: The in-place hint of the exercises that add axes: the caller's tensors must come back as they went in.
NEW_AXIS_IN_PLACE = (
    "{name} came back changed: an in-place method (unsqueeze_, squeeze_, sub_, a write through an index) "
    "changed the caller's tensor, so its shape or values are no longer what the caller passed in; the "
    "methods without the trailing underscore (unsqueeze, or indexing with None) return a new view instead"
)


#: The in-place hint of 01.5: reordering axes in place (transpose_, t_) reshapes the caller's images.
REORDERED_IN_PLACE = (
    "{name} came back changed: an in-place method (transpose_, t_, squeeze_, mul_, a write through an index) "
    "changed the caller's tensor, so its shape or values are no longer what the caller passed in; the methods "
    "without the trailing underscore (permute, transpose) return a new view and leave the caller's tensor as it was"
)


# --------------------------------------------------------------------------- 01.1 pairwise squared distances


def _pairwise_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A loop over every pair of rows, in float64: independent of any broadcasting."""
    out = torch.empty(len(a), len(b), dtype=torch.float64)
    for i in range(len(a)):
        for j in range(len(b)):
            out[i, j] = ((a[i].double() - b[j].double()) ** 2).sum()
    return out.to(a.dtype)


def _squared_differences(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a[:, None, :] - b[None, :, :]) ** 2


def _squeezes_to(expected: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer has the expected values, with extra axes of size 1."""

    def extra_unit_axes(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.dim() <= expected.dim():
            return False
        if result.numel() != expected.numel() or result.squeeze().shape != expected.squeeze().shape:
            return False
        return rel_error(result.reshape(expected.shape), expected) < 1e-4

    return extra_unit_axes


def _one_of(*candidates: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer has the shape and values of one of ``candidates``."""

    def matches_one(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.is_complex() or result.device.type == "meta":
            return False
        same_shape = [other for other in candidates if result.shape == other.shape]
        return any(rel_error(result.to(other.dtype), other) < 1e-4 for other in same_shape)

    return matches_one


def _not_finite(result: Any) -> bool:
    return isinstance(result, torch.Tensor) and result.is_floating_point() and not bool(torch.isfinite(result).all())


#: Every exercise's inputs are finite, so a NaN or inf in the answer was made by the student's code.
NOT_FINITE = Mistake(
    "NaN or inf made",
    _not_finite,
    why="the inputs hold no NaN or inf, so an operation of yours made them: a fill value, a division, a log",
    look="the line that fills or divides: print the result of each step",
)


def _has_three_axes(result: Any) -> bool:
    return isinstance(result, torch.Tensor) and result.dim() == 3


def _pairwise_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 01.1 for the points a and b."""
    squeezed = [_squeezed_mistake(a, b)] if 1 in (len(a), len(b)) else []
    return [*squeezed, *_pairwise_broadcast_mistakes(a, b), *_pairwise_formula_mistakes(a, b), NOT_FINITE]


def _pairwise_broadcast_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """Mistakes of the broadcasting design: the root, the axes, the reduction."""
    squares = _squared_differences(a, b)
    return [
        Mistake(
            "square root taken",
            torch.cdist(a, b),
            why="these are the distances themselves, not their squares",
            look="the last step: a .sqrt(), ** 0.5, torch.norm or torch.dist takes the root the exercise leaves out",
        ),
        Mistake(
            "rows and columns swapped",
            _pairwise_reference(b, a),
            why="entry [i, j] must pair a[i] with b[j]: you built the transpose (rows follow b)",
            look="which operand gets the new axis in position 1, and which in position 0",
        ),
        Mistake(
            "summed over a's rows",
            squares.sum(0),
            why="the sum runs over the points of a instead of over the coordinates",
            look="the axis of the sum: which axis holds the coordinates?",
        ),
        Mistake(
            "summed over b's rows",
            squares.sum(1),
            why="the sum runs over the points of b instead of over the coordinates",
            look="the axis of the sum: which axis holds the coordinates?",
        ),
        Mistake(
            "kept a size-1 axis",
            _squeezes_to(_pairwise_reference(a, b)),
            why="the values are right, but the sum kept its axis, with size 1: the result is (N, M)",
            look="the reduction over the last axis, and its keepdim",
        ),
        Mistake(
            "coordinates not summed",
            _has_three_axes,
            why="the squared differences are there, one per coordinate, but they are not added up",
            look="what happens to the (N, M, D) tensor of squared differences before it is returned",
        ),
        Mistake(
            "mean instead of sum",
            squares.mean(-1),
            why="that is the mean of the squared differences over the coordinates; the distance adds them up",
            look="the reduction over the last axis",
        ),
        Mistake(
            "max or min instead of sum",
            _one_of(squares.amax(-1), squares.amin(-1)),
            why="each entry is one coordinate's squared difference (the largest or the smallest of the pair's): the "
            "squared distance adds up the squared differences of every coordinate",
            look="the reduction over the last axis",
        ),
        *_halved_mistake(squares),
    ]


def _halved_mistake(squares: torch.Tensor) -> list[Mistake]:
    """Half the squared distance; with two coordinates that is the mean, named as such."""
    if squares.shape[-1] == 2:
        return []
    halved = Mistake(
        "halved",
        squares.sum(-1) / 2,
        why="every entry is half the squared distance: the factor 1/2 of a squared-error loss (whose derivative it "
        "simplifies) is not part of the distance",
        look="every factor in your return line",
    )
    return [halved]


def _pairwise_formula_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """Mistakes of the algebra: summing before squaring, and the expansion |a|^2 + |b|^2 - 2 a.b."""
    cross = a @ b.T
    norms = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :]
    return [
        Mistake(
            "summed before squaring",
            (a.sum(1)[:, None] - b.sum(1)[None, :]) ** 2,
            why="the coordinates were added before squaring, so positive and negative differences cancel before "
            "anything is squared",
            look="the order of ** 2 and .sum()",
        ),
        Mistake(
            "cross term without factor 2",
            norms - cross,
            why="|a|^2 + |b|^2 - a.b: the expansion of (a - b)^2 has the cross term twice",
            look="the term built from a @ b.T",
        ),
        Mistake(
            "cross term with the wrong sign",
            norms + 2 * cross,
            why="(a - b)^2 = a^2 - 2ab + b^2: the cross term is subtracted",
            look="the sign in front of the a @ b.T term",
        ),
        Mistake(
            "squared lengths of the whole tensors",
            (a * a).sum() + (b * b).sum() - 2 * cross,
            why="the terms beside a @ b.T are sums over the whole of a and of b, one number each: each pair needs "
            "the squared length of its own rows, |a[i]|^2 and |b[j]|^2",
            look="the dim= of the two sums of squares, and the axes they keep",
        ),
        Mistake(
            "norms not squared",
            a.norm(dim=1)[:, None] + b.norm(dim=1)[None, :] - 2 * cross,
            why="the expansion uses the lengths |a| and |b|; it needs their squares, |a|^2 = a.a",
            look="the two terms beside the a @ b.T term",
        ),
        Mistake(
            "lengths subtracted",
            (a.norm(dim=1)[:, None] - b.norm(dim=1)[None, :]) ** 2,
            why="that squares the difference of the two points' lengths, |a[i]| - |b[j]|: two points of the same "
            "length can lie far apart, so the subtraction runs coordinate by coordinate, before anything is summed",
            look="what is subtracted: whole rows of coordinates, or one number per point",
        ),
        *_pairwise_square_mistakes(a, b),
    ]


def _pairwise_square_mistakes(a: torch.Tensor, b: torch.Tensor) -> list[Mistake]:
    """Mistakes of what is squared: nothing, the wrong pairs, absolute values, each point before the subtraction,
    or the expansion without its cross term."""
    norms = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :]
    return [
        Mistake(
            "differences not squared",
            (a[:, None, :] - b[None, :, :]).sum(-1),
            why="the differences were summed as they are: positive and negative ones cancel, so each must be "
            "squared before the sum",
            look="what is done to each difference before the sum",
        ),
        Mistake(
            "one set of points paired with itself",
            _paired_with_itself(a, b),
            why="the pairs were built from one set of points twice (a with a, or b with b): entry [i, j] pairs "
            "a[i] with b[j]",
            look="the two operands of the subtraction",
        ),
        Mistake(
            "absolute differences",
            (a[:, None, :] - b[None, :, :]).abs().sum(-1),
            why="those are sums of absolute differences (the L1 distance): the exercise squares each difference",
            look="what is done to each difference before the sum",
        ),
        Mistake(
            "squares subtracted",
            (a * a).sum(1)[:, None] - (b * b).sum(1)[None, :],
            why="the coordinates were squared before the subtraction, a**2 - b**2: the exercise squares the "
            "difference, (a - b)**2, which is not the same",
            look="what is subtracted from what, and when the square comes",
        ),
        Mistake(
            "a squared length left out",
            _one_length_left_out(a, b),
            why="the expansion |a|^2 + |b|^2 - 2 a.b is missing one of its squared lengths (or both): each pair's "
            "squared distance needs the squared length of a[i] and that of b[j] beside the cross term",
            look="the terms of the expansion beside the one built from a @ b.T: how many are there?",
        ),
        Mistake(
            "cross term left out",
            norms,
            why="|a|^2 + |b|^2 alone: (a - b)^2 expands to a^2 - 2ab + b^2, and the cross term -2 a.b is missing",
            look="the terms of the expansion: one is built from a @ b.T",
        ),
    ]


def _one_length_left_out(a: torch.Tensor, b: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the expansion without |a|^2, without |b|^2, or with the cross term alone."""
    cross = 2 * a @ b.T
    partial = [
        (a * a).sum(1)[:, None] - cross,
        (b * b).sum(1)[None, :] - cross,
        -cross,
    ]

    def unfinished(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.shape != cross.shape:
            return False
        for value in partial:
            if rel_error(result, value) < 1e-4:
                return True
        return False

    return unfinished


def _paired_with_itself(a: torch.Tensor, b: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer is the squared distances of a to a, or of b to b."""
    within_a = _pairwise_reference(a, a)
    within_b = _pairwise_reference(b, b)

    def one_set_twice(result: Any) -> bool:
        if not isinstance(result, torch.Tensor):
            return False
        for within in (within_a, within_b):
            if result.shape == within.shape and rel_error(result, within) < 1e-4:
                return True
        return False

    return one_set_twice


def _pairwise_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        _randn(20, (4, 3), (5, 3)),
        _randn(21, (7, 6), (2, 6)),
        _randn(22, (3, 4), (3, 4)),  # square: a transposed result keeps the shape
        _randn(23, (5, 2), (4, 2), dtype=torch.float32),
        _randn(24, (1, 3), (4, 3)),  # a single point in a, then in b: the result keeps its axis of size 1
        _randn(25, (5, 2), (1, 2)),
    ]


def _squeezed_mistake(a: torch.Tensor, b: torch.Tensor) -> Mistake:
    return Mistake(
        "every size-1 axis squeezed",
        _squeezed_everything(_pairwise_reference(a, b)),
        why="with a single point in a (or in b) the result lost its axis of size 1: squeeze() without an axis "
        "removes every axis of size 1, also the one that counts the points; entry [i, j] needs both axes, "
        "(N, M), whatever N and M are",
        look="the squeeze (or the reshape) at the end: which axes does it remove when N or M is 1?",
    )


USES_CDIST = Mistake(
    "torch.cdist used",
    None,
    why="torch.cdist computes the distances for you; the exercise is to make broadcasting pair the rows",
    look="which shapes a and b must take so that a - b holds every pair's differences",
)
LOOPS = Mistake(
    "Python loops",
    None,
    why="the number of tensor operations grows with the number of points: a Python loop runs over rows or pairs, "
    "where one broadcast operation pairs them all at once",
    look="which shapes a and b must take so that a - b holds every pair's differences",
)


def _operations(fn: Callable, args: tuple, what: str) -> TorchCalls:
    """The torch functions and tensor methods one call of ``fn(*args)`` runs."""
    __tracebackhide__ = True
    with TorchCalls() as calls:
        run_student(fn, *args, what=what)
    return calls


def _loop_error(what: str, few: TorchCalls, more: TorchCalls, sizes: tuple[str, str, str], loops: Mistake) -> None:
    """Raise ``loops`` if the call on the larger inputs ran clearly more tensor operations (a Python loop);
    ``sizes``: the smaller inputs, the larger ones, and what they count ("points")."""
    __tracebackhide__ = True
    small, large, unit = sizes
    if more.count > few.count + 10:
        raise mistake_error(
            f"{what} ran {few.count} tensor operations on {small} {unit}, {more.count} on {large}",
            loops,
            expected=f"as many for more {unit}",
        )


LOOPS_OVER_COORDINATES = Mistake(
    "Python loop over the coordinates",
    None,
    why="the number of tensor operations grows with the number of coordinates D: a Python loop (or a sum over a "
    "generator) handles one coordinate at a time, where one broadcast subtraction holds all of them and one "
    "reduction adds them up",
    look="the loop over the coordinates: which single operation could handle all of them at once?",
)


def _pairwise_design(pairwise_sq_dists: Callable) -> None:
    """The prompt's rule: no torch.cdist, and no loop. A broadcasting answer runs the same operations whatever
    the number of points and coordinates; a loop over rows or pairs runs more for more points (counted on
    20 x 15, then 40 x 30), a loop over the coordinates more for more coordinates (3, then 9)."""
    __tracebackhide__ = True
    what = "your pairwise_sq_dists(a, b)"
    few = _operations(pairwise_sq_dists, _randn(44, (20, 3), (15, 3)), what)
    more = _operations(pairwise_sq_dists, _randn(64, (40, 3), (30, 3)), what)
    wider = _operations(pairwise_sq_dists, _randn(65, (20, 9), (15, 9)), what)
    if torch.cdist in few.seen | more.seen | wider.seen:
        raise mistake_error(f"{what} calls torch.cdist", USES_CDIST)
    _loop_error(what, few, more, ("20 and 15", "40 and 30", "points"), LOOPS)
    _loop_error(what, few, wider, ("points of 3", "points of 9", "coordinates"), LOOPS_OVER_COORDINATES)


@exercise("01.1", "pairwise squared distances")
def check_pairwise_sq_dists(pairwise_sq_dists: Any) -> None:
    """Exercise 01.1: the (N, M) squared distances, then the prompt's rule (no loops, no torch.cdist).
    Example: ``lab.check_pairwise_sq_dists(pairwise_sq_dists)``."""
    cases = _pairwise_cases()
    run_cases(
        pairwise_sq_dists,
        cases,
        _pairwise_reference,
        what="your pairwise_sq_dists(a, b)",
        mistakes=_pairwise_mistakes,
        rtol=RTOL,
        atol=ATOL,
        inplace_hint=NEW_AXIS_IN_PLACE,
    )
    _pairwise_design(pairwise_sq_dists)
    passed(f"pairwise_sq_dists: matches the reference on {len(cases)} cases (shapes and values)")


# --------------------------------------------------------------------------- 01.2 which write reaches t


def _storage_experiment() -> str:
    """The notebook's experiment, run at check time: which write changed t."""
    t = torch.arange(6.0)
    s = t[1:4]  # the slice starts at t[1]
    m = t[t > 2]  # the selection starts at t[3]
    s[0] = -1.0
    m[0] = -1.0
    slice_reached = bool(t[1] == -1)
    mask_reached = bool(t[3] == -1)
    if slice_reached and mask_reached:
        return "both"
    if slice_reached:
        return "slice"
    if mask_reached:
        return "mask"
    return "neither"


STORAGE_NOTES = {
    "mask": "the mask's result is new memory: writing into m cannot reach t; the slice is the one that shares it",
    "both": "only one of the two is a view: a boolean mask picks an irregular set, which strides cannot describe",
    "neither": "a slice is a regular pattern, so PyTorch returns a view over t's own memory",
}


@exercise("01.2", "predict which write reaches t", prediction=True)
def check_storage_prediction(prediction: Any) -> None:
    """Exercise 01.2: which selection shares t's memory, measured. Example: ``lab.check_storage_prediction(prediction)``."""
    check_prediction(
        "which write reaches t",
        plain_tensor(prediction) if isinstance(prediction, torch.Tensor) else prediction,  # no subclass's overrides
        _storage_experiment(),
        choices=("slice", "mask", "both", "neither"),
        why="a slice is a view (same memory, other strides); a boolean mask gathers the chosen elements "
        "into new memory: a copy.",
        mistakes=STORAGE_NOTES,
        ask="which of s and m shares t's memory, and what in the way each was made decides it",
    )


# --------------------------------------------------------------------------- 01.3 the score of each label


def _class_scores_reference(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return scores.gather(1, labels[:, None])[:, 0]


def _rows_and_columns_swapped(scores: torch.Tensor, labels: torch.Tensor) -> list[Mistake]:
    """scores[labels, arange(N)], where the sizes let it run at all."""
    n = len(labels)
    if n > scores.shape[1] or int(labels.max()) >= scores.shape[0]:
        return []
    return [
        Mistake(
            "rows and columns swapped",
            scores[labels, torch.arange(n)],
            why="the labels went into the row position: the first index picks rows (samples), the second columns",
            look="the order of the two index tensors",
        )
    ]


def _gathered_along_rows(scores: torch.Tensor, labels: torch.Tensor) -> list[Mistake]:
    """scores.gather(0, labels[:, None]): the labels used as row numbers, in column 0, where the sizes allow it."""
    if int(labels.max()) >= scores.shape[0]:
        return []
    return [
        Mistake(
            "gathered along the sample axis",
            scores.gather(0, labels[:, None])[:, 0],
            why="the gather ran along dim 0, the sample axis, so each label was used as a row number (in column 0): "
            "gather's dim is the axis its index values count along, and the labels count classes",
            look="the dim of the gather, and which axis the labels number",
        )
    ]


def _class_scores_picked_wrongly(scores: torch.Tensor, labels: torch.Tensor) -> list[Mistake]:
    """The right rows, but a softmax, a minus or the column to the left on the way."""
    return [
        Mistake(
            "probabilities",
            scores.softmax(dim=1)[torch.arange(len(labels)), labels],
            why="those are the labels' probabilities (a softmax of each row): the exercise asks for the raw scores "
            "themselves",
            look="what is done to scores before the entries are picked",
        ),
        Mistake(
            "per-sample cross-entropy",
            torch.nn.functional.cross_entropy(scores, labels, reduction="none"),
            why="that is each sample's cross-entropy, minus the log-probability of its label: the loss starts from "
            "the scores this exercise picks, but the exercise asks for the raw scores themselves",
            look="what is done to scores before (or after) the entries are picked",
        ),
        Mistake(
            "wrong sign",
            -_class_scores_reference(scores, labels),
            why="the right entries with their sign flipped: the minus belongs to a loss, and the exercise asks for "
            "the scores as they are",
            look="the sign in front of the picked entries",
        ),
        Mistake(
            "one-hot product not summed",
            scores * torch.nn.functional.one_hot(labels, scores.shape[1]).to(scores.dtype),
            why="each row still holds all C columns, zero everywhere except at its label: the mask picked the right "
            "entry, but one number per sample is asked, so each row's C entries still have to be combined into one",
            look="the (N, C) result: what reduces it over the class axis",
        ),
        Mistake(
            "labels shifted by one",
            scores[torch.arange(len(labels)), labels - 1],
            why="each row gave the entry one column to the left of its label: the labels count the classes from 0, "
            "as the columns do, so labels[i] is the column number itself",
            look="the column index: what is done to labels before they index?",
        ),
    ]


def _class_scores_reduced(scores: torch.Tensor) -> list[Mistake]:
    """Each row reduced to one number over all its classes, the labels never used: a sum or a mean."""
    return [
        Mistake(
            "row sums",
            scores.sum(dim=1),
            why="each entry is the sum of its row's scores over all C classes: the result has the right shape, one "
            "number per sample, but the labels never entered it, while entry i is the score of label i alone",
            look="where labels enters the computation: which entry of each row does it pick?",
        ),
        Mistake(
            "row means",
            scores.mean(dim=1),
            why="each entry is the mean of its row's scores over all C classes: the result has the right shape, one "
            "number per sample, but the labels never entered it, while entry i is the score of label i alone",
            look="where labels enters the computation: which entry of each row does it pick?",
        ),
    ]


def _class_scores_masked_mean(scores: torch.Tensor, labels: torch.Tensor) -> Mistake:
    """The label's column kept by a one-hot mask, then the row averaged: each score divided by C."""
    return Mistake(
        "masked row averaged",
        _class_scores_reference(scores, labels) / scores.shape[1],
        why="each entry is its label's score divided by C, the number of classes: the mask kept the label's column "
        "alone, and the reduction over the row then averaged that one score with C - 1 zeros",
        look="the reduction over the classes, after the mask",
    )


def _class_scores_mistakes(scores: torch.Tensor, labels: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 01.3 for this case."""
    return [
        Mistake(
            "one column per label for every row",
            scores[:, labels],
            why="scores[:, labels] gives every row all the labelled columns (N, N): the two indices must pair up, "
            "one row index per label",
            look="the row index: what pairs each label with its own row?",
        ),
        Mistake(
            "labels index the rows",
            scores[labels],
            why="scores[labels] picks whole rows: the labels are column numbers",
            look="the index: which axis of scores do the labels number?",
        ),
        *_rows_and_columns_swapped(scores, labels),
        Mistake(
            "log-probabilities",
            scores.log_softmax(dim=1)[torch.arange(len(labels)), labels],
            why="those are the labels' log-probabilities (log_softmax, or minus a per-sample cross-entropy): the "
            "exercise asks for the raw scores themselves",
            look="what is done to scores before the entries are picked",
        ),
        *_class_scores_picked_wrongly(scores, labels),
        Mistake(
            "every label looked up in the first row",
            scores[0, labels],
            why="each entry is the score of its label in the first sample's row: the labels picked columns, but "
            "nothing picked the rows (gather with an index of shape (1, N), take, or an index into the flattened "
            "scores counts from the start of row 0)",
            look="the row index: which row does sample i's entry come from?",
        ),
        *_gathered_along_rows(scores, labels),
        *_class_scores_reduced(scores),
        _class_scores_masked_mean(scores, labels),
        Mistake(
            "predicted classes",
            scores.argmax(dim=1),
            why="those are the classes with the largest score (argmax), not the scores of the true labels",
            look="what is picked: the score of the label, or the class that scores highest?",
        ),
        Mistake(
            "row maximum",
            scores.max(dim=1).values,
            why="that is each row's largest score, not the score of its label",
            look="which column of each row is picked: the label's, or the largest?",
        ),
        Mistake(
            "kept a size-1 axis",
            _squeezes_to(_class_scores_reference(scores, labels)),
            why="the values are right, but an axis of size 1 is still there: one number per sample is asked, (N,)",
            look="the shape of the result: which axis of size 1 is left over?",
        ),
        NOT_FINITE,
    ]


def _class_scores_cases() -> tuple[list[tuple], list[tuple]]:
    """Cases whose labels contain every class, then the same scores with the last class missing."""
    (s1,) = _randn(30, (4, 4))
    (s2,) = _randn(31, (6, 3))
    (s3,) = _randn(32, (5, 4), dtype=torch.float32)
    every_class = [
        (s1, torch.tensor([2, 0, 3, 3])),
        (s2, torch.tensor([1, 2, 0, 0, 1, 2])),
        (s3, torch.tensor([3, 1, 0, 2, 1])),
    ]
    last_missing = [
        (s1, torch.tensor([2, 0, 1, 1])),
        (s2, torch.tensor([1, 0, 0, 1, 1, 0])),
    ]
    return every_class, last_missing


def _classes_from_labels(err: CheckError) -> CheckError:
    """The failure of an answer that passed while the labels held every class, and not otherwise."""
    return CheckError(
        "your correct_class_scores(scores, labels) passed every case whose labels contain all classes "
        "0..C-1, then failed on the same scores with labels that never use the last class",
        got=err.message.splitlines()[0].replace("your correct_class_scores(scores, labels) ", ""),
        hint="the number of classes is taken from the labels (one_hot(labels) without num_classes, "
        "labels.max() + 1, unique): it counts only up to the largest label present",
        look="where the number of classes comes from: which tensor knows it even when a class is missing?",
        mistake="classes counted from labels",
    )


def _row_index_of_another_length(err: CheckError) -> CheckError:
    """An IndexError from two index tensors of different lengths (the row index counting the classes, say)
    gets its cause; any other failure comes back as it was."""
    if err.mistake != "raised IndexError" or "indexing tensors could not be broadcast" not in err.message:
        return err
    return CheckError(
        err.message,
        hint="the row index and the labels are paired entry by entry, so each needs one entry per sample, N in "
        "all; here they have different lengths, which a square case (N equal to C) hides: the row index counts "
        "something else, the classes (the length of a row, or scores.shape[1]) for instance",
        look="the row index: which axis of scores does its length come from?",
        mistake="row index of another length",
    )


LOOPS_OVER_SAMPLES = Mistake(
    "Python loop",
    None,
    why="the number of tensor operations grows with the number of samples: a Python loop (or a comprehension) "
    "picks one entry at a time, where one indexing picks every sample's entry at once",
    look="the loop over the samples: which one indexing of scores could pick every sample's entry at once?",
)


LOOPS_OVER_CLASSES = Mistake(
    "Python loop over the classes",
    None,
    why="the number of tensor operations grows with the number of classes C: a Python loop (or a sum over a "
    "generator) visits one class at a time, where one indexing picks every sample's entry whatever C is",
    look="the loop over the samples: which one indexing of scores could pick every sample's entry at once?",
)


def _squeezed_to_0d(result: Any) -> bool:
    return isinstance(result, torch.Tensor) and result.dim() == 0


ONE_SAMPLE_SQUEEZED = Mistake(
    "every size-1 axis squeezed",
    _squeezed_to_0d,
    why="with one sample the result is a 0-d tensor: squeeze() without an axis removed the sample axis too, "
    "because N is 1 here; one number per sample is asked, (N,), whatever N is",
    look="the squeeze: which axes does it remove when N is 1?",
)


def _class_scores_one_sample(correct_class_scores: Callable, options: dict) -> None:
    """One more case, a batch of one sample: the result is (1,), not a 0-d tensor."""
    __tracebackhide__ = True
    (scores,) = _randn(34, (1, 4))
    case = [(scores, torch.tensor([2]))]

    def mistakes(scores: torch.Tensor, labels: torch.Tensor) -> list[Mistake]:
        return [ONE_SAMPLE_SQUEEZED, NOT_FINITE]  # the others index rows by label, which one row cannot hold

    run_cases(correct_class_scores, case, _class_scores_reference, **{**options, "mistakes": mistakes})


def _class_scores_design(correct_class_scores: Callable) -> None:
    """The prompt's rule: no loop. Indexing runs the same operations for 20 samples as for 40, and for 5
    classes as for 15."""
    __tracebackhide__ = True
    what = "your correct_class_scores(scores, labels)"
    calls = []
    for n, classes in ((20, 5), (40, 5), (20, 15)):
        (scores,) = _randn(33 + n + classes, (n, classes))
        labels = torch.arange(n) % classes
        calls.append(_operations(correct_class_scores, (scores, labels), what))
    _loop_error(what, calls[0], calls[1], ("20", "40", "samples"), LOOPS_OVER_SAMPLES)
    _loop_error(what, calls[0], calls[2], ("5", "15", "classes"), LOOPS_OVER_CLASSES)


@exercise("01.3", "the score of each sample's label")
def check_correct_class_scores(correct_class_scores: Any) -> None:
    """Exercise 01.3: entry i is scores[i, labels[i]]. Example: ``lab.check_correct_class_scores(correct_class_scores)``."""
    every_class, last_missing = _class_scores_cases()
    options = dict(
        what="your correct_class_scores(scores, labels)",
        mistakes=_class_scores_mistakes,
        rtol=RTOL,
        atol=ATOL,
        inplace_hint=NEW_AXIS_IN_PLACE,
    )
    try:
        run_cases(correct_class_scores, every_class, _class_scores_reference, **options)
    except CheckError as err:
        raise _row_index_of_another_length(err) from None
    try:
        run_cases(correct_class_scores, last_missing, _class_scores_reference, **options)
    except CheckError as err:
        if err.usage or err.mistake == "too slow":
            raise
        raise _classes_from_labels(err) from None
    _class_scores_one_sample(correct_class_scores, options)
    _class_scores_design(correct_class_scores)
    total = len(every_class) + len(last_missing)
    passed(f"correct_class_scores: matches the reference on {total} cases, some without the last class")


# --------------------------------------------------------------------------- 01.4 keep what is above the row mean


def _keep(x: torch.Tensor, mean: torch.Tensor, *, keep_ties: bool = True, above: bool = True) -> torch.Tensor:
    """x where it is above (or below) ``mean``, 0 elsewhere; ties kept or not."""
    if above:
        mask = x >= mean if keep_ties else x > mean
    else:
        mask = x < mean
    return torch.where(mask, x, torch.zeros_like(x))


def _keep_reference(x: torch.Tensor) -> torch.Tensor:
    return _keep(x, x.mean(dim=1, keepdim=True))


def _is_bool(result: Any) -> bool:
    return isinstance(result, torch.Tensor) and result.dtype == torch.bool


def _is_one_dimensional(result: Any) -> bool:
    return isinstance(result, torch.Tensor) and result.dim() == 1


def _keep_mistakes(x: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 01.4 for this x."""
    row_mean = x.mean(dim=1, keepdim=True)
    mistakes = [
        Mistake(
            "ties set to 0",
            _keep(x, row_mean, keep_ties=False),
            why="an entry equal to its row's mean was set to 0: the prompt keeps entries at or above the mean, "
            "so only those strictly below go",
            look="the comparison in the mask: < against <=, > against >=",
        ),
        Mistake(
            "column means",
            _keep(x, x.mean(dim=0, keepdim=True)),
            why="those are column means (dim=0): each row's threshold is the mean of that row's own entries",
            look="the dim= of the mean",
        ),
        Mistake(
            "inverted mask",
            _keep(x, row_mean, above=False),
            why="the mask is inverted: what is below the mean was kept, what is above set to 0",
            look="the direction of the comparison in the mask",
        ),
        Mistake(
            "mean of the whole tensor",
            _keep(x, x.mean()),
            why="that is the mean of the whole tensor; each row has its own",
            look="the mean: over which axis does it reduce?",
        ),
        Mistake(
            "replaced by the mean",
            torch.where(x >= row_mean, x, row_mean),
            why="the entries below the mean were raised to the mean (a clamp at the mean): they are to become 0",
            look="what the entries below the mean are replaced with",
        ),
        Mistake(
            "mean subtracted",
            torch.where(x >= row_mean, x - row_mean, torch.zeros_like(x)),
            why="the kept entries had their row's mean subtracted: they are to stay as they are",
            look="what the entries at or above the mean are replaced with",
        ),
    ]
    mistakes += _inverted_with_ties(x)
    if x.shape[0] == x.shape[1]:  # only a square x lets a (N,) mean broadcast without an error
        mistake = Mistake(
            "keepdim forgotten",
            _keep(x, x.mean(dim=1)),
            why="the (N,) row means broadcast as a row, so column j was compared with row j's mean",
            look="the shape of the row means: print it beside x's, and ask how it broadcasts",
        )
        mistakes.insert(1, mistake)
    listed = [*mistakes, _recomputed_mean_mistake(x), *_keep_threshold_mistakes(x), *_keep_form_mistakes(x)]
    return _unlike_reference(listed, _keep_reference(x))


def _recomputed_mean_mistake(x: torch.Tensor) -> Mistake:
    """01.4 written as a loop that reads each row's mean from the tensor it is zeroing."""
    return Mistake(
        "mean recomputed while zeroing",
        _zeroed_one_entry_at_a_time(x),
        why="each entry was compared with the mean of its row as the row stood at that moment, after the entries "
        "before it had already been set to 0: every 0 written moves the mean, so later entries met another "
        "threshold. Each row has one threshold, the mean of the row as it was passed in",
        look="the loop: when is the row's mean computed, and from which tensor, the one being written into?",
    )


def _zeroed_one_entry_at_a_time(x: torch.Tensor) -> torch.Tensor:
    """An entry-by-entry loop that compares each entry with the current mean of the row it is zeroing."""
    out = x.clone()
    for row in out:
        for j in range(len(row)):
            if row[j] < row.mean():
                row[j] = 0
    return out


def _inverted_with_ties(x: torch.Tensor) -> list[Mistake]:
    """The inverted mask that keeps the entries equal to the mean: told apart only where a row holds its mean."""
    row_mean = x.mean(dim=1, keepdim=True)
    inverted_with_ties = torch.where(x <= row_mean, x, torch.zeros_like(x))
    if torch.equal(inverted_with_ties, _keep(x, row_mean, above=False)):
        return []
    mistake = Mistake(
        "inverted mask, ties kept",
        inverted_with_ties,
        why="the mask is inverted: the entries above their row's mean were set to 0 and those below kept, the "
        "opposite of what is asked (the mask marks the entries that are replaced by 0)",
        look="the direction of the comparison in the mask, and which entries the assignment writes 0 into",
    )
    return [mistake]


def _unlike_reference(mistakes: list[Mistake], reference: torch.Tensor) -> list[Mistake]:
    """The mistakes whose value differs from the reference in this case: on whole numbers with ties, several
    wrong thresholds keep exactly the right entries, and such a one must not be named for an answer whose
    values are right but whose dtype is not."""
    kept = []
    for mistake in mistakes:
        same = isinstance(mistake.matches, torch.Tensor) and torch.equal(mistake.matches, reference)
        if not same:
            kept.append(mistake)
    return kept


def _keep_threshold_mistakes(x: torch.Tensor) -> list[Mistake]:
    """Thresholds other than the row's mean: the row sum over the number of rows, and 0."""
    mistakes = [
        Mistake(
            "compared with 0",
            _keep(x, torch.zeros((), dtype=x.dtype)),
            why="the entries were compared with 0 (a ReLU), not with their row's mean",
            look="what the mask compares x with",
        ),
        Mistake(
            "row median",
            _keep(x, x.median(dim=1, keepdim=True).values),
            why="each row's threshold was its median, the middle entry: the mean is the row's sum divided by its "
            "length, and the two differ wherever a row is lopsided",
            look="the reduction that makes each row's threshold",
        ),
    ]
    by_rows = _keep(x, x.sum(dim=1, keepdim=True) / x.shape[0])
    # on a square x the number of rows is the row's length; where it keeps what the whole tensor's mean keeps,
    # this x cannot tell the two apart (another case does)
    if x.shape[0] != x.shape[1] and not torch.equal(by_rows, _keep(x, x.mean())):
        mistake = Mistake(
            "divided by the number of rows",
            by_rows,
            why="each row's sum was divided by the number of rows: a row's mean divides by the number of entries "
            "in the row",
            look="what the row sums are divided by",
        )
        mistakes.insert(0, mistake)
    return mistakes


def _keep_form_mistakes(x: torch.Tensor) -> list[Mistake]:
    """Answers that are the mask itself, or not shaped like x."""
    row_mean = x.mean(dim=1, keepdim=True)
    return [
        Mistake(
            "a row left as it was",
            _one_row_untouched(x),
            why="every row is right but one, which came back as x had it, its entries below the mean still there: "
            "a loop over the rows that stops one short or starts at 1 (a range's bounds) leaves one row unvisited",
            look="the bounds of the loop over the rows: do they reach every row, the first and the last?",
        ),
        Mistake(
            "mask returned",
            _is_bool,
            why="that is the mask itself: the result keeps x's values where the mask is True",
            look="the mask: where do x's values enter the result?",
        ),
        Mistake(
            "mask as numbers",
            (x >= row_mean).to(x.dtype),
            why="that is the mask as 1s and 0s: the result keeps x's values where the mask is True",
            look="the mask as numbers: where do x's values enter the result?",
        ),
        Mistake(
            "selected elements only",
            _is_one_dimensional,
            why="x[mask] gathers the chosen elements into a new 1-D tensor: the result keeps x's shape",
            look="x[mask]: what shape does it give, and which shape is asked?",
        ),
        NOT_FINITE,
    ]


def _one_row_untouched(x: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer is right in every row but one, and that row is x's own (never processed)."""
    reference = _keep_reference(x)

    def row_skipped(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.shape != x.shape or not result.is_floating_point():
            return False
        wrong = [i for i in range(len(x)) if rel_error(result[i], reference[i]) > 1e-4]
        return len(wrong) == 1 and rel_error(result[wrong[0]], x[wrong[0]]) < 1e-4

    return row_skipped


def _keep_cases() -> list[tuple[torch.Tensor]]:
    return [
        (_tied_rows(41, (4, 4), torch.float64),),
        _randn(146, (3, 6)),  # rows whose mean, median and mid-range keep different entries
        (_tied_rows(42, (5, 3), torch.float32),),
    ]


@exercise("01.4", "keep what is above each row's mean")
def check_keep_above_row_mean(keep_above_row_mean: Any) -> None:
    """Exercise 01.4: entries below their row's mean set to 0. Example: ``lab.check_keep_above_row_mean(keep_above_row_mean)``."""
    cases = _keep_cases()
    run_cases(
        keep_above_row_mean,
        cases,
        _keep_reference,
        what="your keep_above_row_mean(x)",
        mistakes=_keep_mistakes,
        rtol=RTOL,
        atol=ATOL,
        inplace_hint="the prompt asks to leave x unchanged: assigning through a mask (x[mask] = 0) or an in-place "
        "method (masked_fill_, mul_) writes into {name} itself",
    )
    passed(f"keep_above_row_mean: matches the reference on {len(cases)} cases, some with ties at the row mean")


# --------------------------------------------------------------------------- 01.5 channels-first rows


def _channels_first_reference(images: torch.Tensor) -> torch.Tensor:
    """Channel by channel, each (H, W) plane flattened row by row."""
    rows = []
    for image in images:
        planes = [image[:, :, c].reshape(-1) for c in range(image.shape[-1])]
        rows.append(torch.cat(planes))
    return torch.stack(rows)


def _flattens_to(expected: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer has more than two axes, and flattening all but the first gives ``expected``."""

    def not_flat(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.dim() <= 2 or result.shape[0] != expected.shape[0]:
            return False
        if result[0].numel() != expected.shape[1]:
            return False
        return rel_error(result.reshape(expected.shape), expected) < 1e-4

    return not_flat


def _leading_axis_is(size: int, expected: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer holds ``expected``'s values in its order, with a first axis of ``size``."""

    def regrouped(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.dim() < 2 or result.shape[0] != size:
            return False
        if result.numel() != expected.numel():
            return False
        return rel_error(result.reshape(expected.shape), expected) < 1e-4

    return regrouped


def _one_number_per_pixel(images: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer is (N, H*W) or (N, H, W), one number per pixel (C > 1, so the shape tells)."""
    n, h, w, c = images.shape

    def per_pixel(result: Any) -> bool:
        if c == 1 or not isinstance(result, torch.Tensor):
            return False
        return tuple(result.shape) in ((n, h * w), (n, h, w))

    return per_pixel


def _channels_first_mistakes(images: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 01.5 for this batch."""
    n = len(images)
    return [
        Mistake(
            "reshape without permute",
            images.reshape(n, -1),
            why="that is the stored (H, W, C) order: reshape never moves elements between axes",
            look="where the channel axis sits when the rows are flattened: which operation moves axes?",
        ),
        Mistake(
            "H and W swapped",
            images.permute(0, 3, 2, 1).reshape(n, -1),
            why="each channel's values came out column by column: H and W traded places",
            look="the numbers in permute(...): does each name the old axis that goes to that position?",
        ),
        Mistake(
            "all axes reversed",
            images.permute(3, 2, 1, 0).reshape(n, -1),
            why="every axis was reversed, (C, W, H, N), as NumPy's .T does on an array of any number of axes (and "
            "torch's .T on more than two): the batch axis went last, H and W traded places, and the rows cut from "
            "that order mix the images",
            look="the transpose: how many axes does it move, and which one should stay in front?",
        ),
        Mistake(
            "inverse permutation",
            images.permute(0, 2, 3, 1).reshape(n, -1),
            why="the permutation was read backwards: it says where each old axis goes, but permute takes, for each "
            "new position, the old axis that goes there",
            look="the numbers in permute(...): new position k holds old axis dims[k]",
        ),
        Mistake(
            "batch axis moved",
            images.permute(3, 0, 1, 2).reshape(n, -1),
            why="the channel axis went in front of the batch axis: the rows no longer hold one image each",
            look="the first number in permute(...): which axis does it put first?",
        ),
        *_channels_first_axis_mistakes(images),
        Mistake(
            "not flattened",
            _flattens_to(_channels_first_reference(images)),
            why="the values are in the right order but each image is not one row yet (it is still (C, H, W), or "
            "(C, H*W)): one row per image is asked",
            look="the flatten: which axes does it merge, and how many are left?",
        ),
        Mistake(
            "channel axis reduced away",
            _one_number_per_pixel(images),
            why="each image gave one number per pixel, H*W in all: the channel axis was reduced (a mean, sum or max "
            "over it) or one channel was picked, where every channel's values stay in the row, C*H*W numbers",
            look="the operation that removes the channel axis: which axis should only move, not disappear?",
        ),
        Mistake(
            "batch flattened too",
            _is_one_dimensional,
            why="everything was flattened into one long row: one row per image is asked, (N, C*H*W)",
            look="the flatten: which axes does it merge?",
        ),
        NOT_FINITE,
    ]


def _channels_first_axis_mistakes(images: torch.Tensor) -> list[Mistake]:
    """The channel axis moved one place only (mT, transpose(-1, -2)), and one row per channel instead of per image."""
    n, h, w, c = images.shape
    return [
        Mistake(
            "last two axes swapped",
            images.transpose(-1, -2).reshape(n, -1),
            why="the last two axes traded places, (N, H, C, W): the channel axis moved one place only, so it now "
            "sits between H and W, while the rows need it before both (mT and transpose(-1, -2) swap only the last "
            "two axes)",
            look="where the channel axis ends up before the flatten: print the shape",
        ),
        Mistake(
            "one row per channel",
            _leading_axis_is(n * c, _channels_first_reference(images)),
            why="the first axis counts one channel of one image, N*C of them ((N*C, H*W), or (N*C, H, W)): the "
            "values are in the right order, but one row per image is asked, all its channels one after the other",
            look="the sizes the reshape (or flatten) is given: what does the first axis count?",
        ),
        Mistake(
            "sizes in the other order",
            _leading_axis_is(c * h * w, _channels_first_reference(images)),
            why="the values come in the right order, but they were cut into rows of N numbers, (C*H*W, N): the "
            "reshape got its two sizes the other way round, where one row per image, C*H*W numbers long, is asked",
            look="the sizes the reshape is given: which one comes first?",
        ),
        Mistake(
            "channels joined along dim 0",
            _channel_major(images),
            why="the channel planes were joined along the first axis, so the rows go channel by channel, each "
            "channel holding every image ((C*N, H*W) after a cat, (C, N, H*W) after a stack): the first axis has to "
            "count the images, and each image's channels are joined within its own row",
            look="the dim of the cat (or stack) that joins the channels: which axis does it grow?",
        ),
        Mistake(
            "a size written as a number",
            _size_written_in(images),
            why="right for a batch of the example's size only: a number of images or of channels was written into "
            "the code, and this batch has another; every size comes from images.shape",
            look="every number in your reshape (or your list of channels): where does each come from?",
        ),
    ]


def _channel_major(images: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the channel planes were joined along the first axis, channel by channel, each holding every
    image, ((C*N, H*W) from torch.cat(..., dim=0), (C, N, H*W) from torch.stack(..., dim=0))."""
    n, h, w, c = images.shape
    planes = images.permute(3, 0, 1, 2).reshape(c, n, h * w)

    def joined_on_dim_0(result: Any) -> bool:
        if c == 1 or not isinstance(result, torch.Tensor) or result.dim() < 2 or result.numel() != planes.numel():
            return False
        if result.shape[0] not in (c, c * n):
            return False
        return rel_error(result.reshape(planes.shape), planes) < 1e-4

    return joined_on_dim_0


def _size_written_in(images: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: a size read off the example written as a number, so this batch is cut wrong. Either the right
    values in the right order cut into rows of another length (the batch size fixed), or the first channels'
    values alone, in the right order (the number of channels fixed)."""
    n, h, w, c = images.shape
    expected = _channels_first_reference(images)

    def fixed_size(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.dim() != 2 or result.device.type == "meta":
            return False
        if result.numel() == expected.numel() and result.shape[0] != n:
            return rel_error(result.reshape(expected.shape), expected) < 1e-4
        kept = result.shape[1] // (h * w)
        if result.shape[0] != n or result.shape[1] % (h * w) or not 0 < kept < c:
            return False
        return rel_error(result, expected[:, : kept * h * w]) < 1e-4

    return fixed_size


def _channels_first_cases() -> list[tuple[torch.Tensor]]:
    return [
        _randn(50, (2, 4, 5, 3)),
        _randn(51, (3, 2, 6, 4)),
        _randn(52, (2, 3, 3, 2), dtype=torch.float32),
    ]


@exercise("01.5", "channels-last images to channels-first rows")
def check_channels_first_rows(channels_first_rows: Any) -> None:
    """Exercise 01.5: (N, H, W, C) to (N, C*H*W). Example: ``lab.check_channels_first_rows(channels_first_rows)``."""
    cases = _channels_first_cases()
    run_cases(
        channels_first_rows,
        cases,
        _channels_first_reference,
        what="your channels_first_rows(images)",
        mistakes=_channels_first_mistakes,
        rtol=RTOL,
        atol=ATOL,
        inplace_hint=REORDERED_IN_PLACE,
    )
    passed(f"channels_first_rows: matches the reference on {len(cases)} cases (shapes and values)")


# --------------------------------------------------------------------------- 01.6 one matrix per sample


def _per_sample_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[b] @ w[b] for b in range(len(x))])


def _squeezed_everything(expected: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer is ``expected`` with its axes of size 1 removed (a squeeze() without an axis)."""

    def squeezed(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or expected.squeeze().shape == expected.shape:
            return False
        if result.shape != expected.squeeze().shape:
            return False
        return rel_error(result, expected.squeeze()) < 1e-4

    return squeezed


def _holds_input(x: torch.Tensor) -> Callable[[Any], bool]:
    """A predicate: the answer holds the numbers of ``x`` alone, in x's order, in some other shape."""

    def holds_x(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.shape == x.shape or result.numel() != x.numel():
            return False
        return rel_error(result.reshape(x.shape), x) < 1e-6

    return holds_x


def _all_pairs(pairs: torch.Tensor) -> Callable[[Any], bool]:
    """Is the result the (B, B, K) products of every sample with every matrix, in either order of the two B axes?"""

    def test(result: Any) -> bool:
        if not isinstance(result, torch.Tensor) or result.shape != pairs.shape:
            return False
        return any(rel_error(result, other) < 1e-6 for other in (pairs, pairs.transpose(0, 1)))

    return test


def _per_sample_mistakes(x: torch.Tensor, w: torch.Tensor) -> list[Mistake]:
    """The typical wrong answers of 01.6 for this case."""
    return [
        Mistake(
            "every sample with every matrix",
            _all_pairs(x @ w),
            why="x @ w met every sample with every matrix (matmul broadcast x over w's batch, or an einsum with two "
            "batch letters): (B, B, K)",
            look="the shapes matmul sees: which axes does it treat as a batch, and which as the matrices?",
        ),
        Mistake(
            "kept a size-1 axis",
            _squeezes_to(_per_sample_reference(x, w)),
            why="the values are right, but an axis of size 1 is still there: the result is (B, K)",
            look="the shape of the result: which axis of size 1 is left over?",
        ),
        Mistake(
            "first sample with every matrix",
            x[0] @ w,
            why="every row used the first sample, x[0], each with its own matrix: row b is sample b's row times "
            "w[b], so x's batch axis has to pair with w's, one sample per matrix",
            look="what happens to x's batch axis before the product",
        ),
        Mistake(
            "one matrix for all samples",
            x @ w[0],
            why="every sample used the first matrix: w[b] belongs to sample b",
            look="what happens to w's batch axis before the product",
        ),
        Mistake(
            "summed over K",
            (x[:, :, None] * w).sum(2),
            why="the product sums over D, the axis x and w share, not over K",
            look="the axis of the sum",
        ),
        Mistake(
            "mean instead of sum",
            (x[:, :, None] * w).mean(1),
            why="that is the mean of the products over D; a matrix product adds them up",
            look="the reduction over D",
        ),
        Mistake(
            "result transposed",
            _per_sample_reference(x, w).T,
            why="the numbers are right but stand (K, B): one column per sample, where row b must be sample b's "
            "(the diagonal of x @ w, taken over its two batch axes, puts them last)",
            look="the shape of the result before you return it: which axis counts the samples?",
        ),
        Mistake(
            "every size-1 axis squeezed",
            _squeezed_everything(_per_sample_reference(x, w)),
            why="squeeze() without an axis removed K too, because K is 1 here: the result is (B, K) whatever K is",
            look="the squeeze: which axes does it remove when K is 1?",
        ),
        *_per_sample_sum_mistakes(x, w),
        *_per_sample_unfinished_mistakes(x, w),
        NOT_FINITE,
    ]


def _per_sample_sum_mistakes(x: torch.Tensor, w: torch.Tensor) -> list[Mistake]:
    """Sums over the wrong axis of 01.6: over the samples, of the results or of the matrices."""
    return [
        Mistake(
            "summed over dim 0",
            (x[:, :, None] * w).sum(0),
            why="the products were added up over the samples, the first axis (dim 0), and the result is (D, K): the "
            "sum of a matrix product runs over D, the axis x and w share, and each sample keeps its own row",
            look="the dim of the sum: which axis of (B, D, K) is D?",
        ),
        Mistake(
            "samples summed",
            _per_sample_reference(x, w).sum(0),
            why="the products of all the samples were added into one row of K numbers: each sample keeps its own "
            "row, so the batch index stays in the result (an einsum whose output leaves b out sums over it)",
            look="the batch axis of the result",
        ),
        Mistake(
            "matrices summed",
            x @ w.sum(0),
            why="each sample met the sum of all the matrices: the batch index of w was summed away (an einsum "
            "whose w index differs from x's, 'bd,cdk->bk'), where sample b meets w[b] alone",
            look="the index that x and w share for the batch",
        ),
        Mistake(
            "matrices averaged",
            x @ w.mean(0),
            why="each sample met the mean of all the matrices: x @ w paired every sample with every matrix, "
            "(B, B, K), and a mean over the extra batch axis averaged them, where sample b meets w[b] alone",
            look="the shapes matmul sees, and what the reduction over the batch axis mixes",
        ),
    ]


def _per_sample_unfinished_mistakes(x: torch.Tensor, w: torch.Tensor) -> list[Mistake]:
    """Answers that hand back a step before the product is done: x with its new axis, or the products unsummed."""
    return [
        Mistake(
            "x returned with its new axis",
            _holds_input(x),
            why="the result holds x's own numbers, only reshaped: the step that gives x its new axis is there, but "
            "the tensor handed back is that step's result, not the product with w",
            look="the tensor the function returns: which step made it?",
        ),
        Mistake(
            "products not summed",
            x[:, :, None] * w,
            why="the result holds every product x[b, d] * w[b, d, k] on its own, shape (B, D, K): a matrix product "
            "also adds these products up, over the axis the two factors share",
            look="what happens to D between the products and the result",
        ),
    ]


def _per_sample_cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        _randn(60, (3, 4), (3, 4, 2)),
        _randn(61, (5, 2), (5, 2, 6)),
        _randn(62, (4, 3), (4, 3, 1), dtype=torch.float32),  # K = 1: a squeeze() without an axis removes it
    ]


LOOPS_OVER_MATRICES = Mistake(
    "Python loop",
    None,
    why="the number of tensor operations grows with the number of samples: a Python loop (or a comprehension) "
    "multiplies one sample at a time, where one batched product handles every sample at once",
    look="the loop over the samples (or over D or K): which single batched product could handle them all?",
)


LOOPS_OVER_AXES = Mistake(
    "Python loop over D or K",
    None,
    why="the number of tensor operations grows with the size of the matrices, D or K: a Python loop (or a sum "
    "over a generator) handles one row or column of w at a time, where one batched product handles them all",
    look="the loop over the samples (or over D or K): which single batched product could handle them all?",
)


def _per_sample_design(per_sample_matmul: Callable) -> None:
    """The prompt's rule: no loop. A batched product runs the same operations for 20 samples as for 40, and
    for (3, 2) matrices as for (9, 8)."""
    __tracebackhide__ = True
    what = "your per_sample_matmul(x, w)"
    calls = []
    for n, d, k in ((20, 3, 2), (40, 3, 2), (20, 9, 8)):
        args = _randn(63 + n + d, (n, d), (n, d, k))
        calls.append(_operations(per_sample_matmul, args, what))
    _loop_error(what, calls[0], calls[1], ("20", "40", "samples"), LOOPS_OVER_MATRICES)
    _loop_error(what, calls[0], calls[2], ("(3, 2)", "(9, 8)", "matrices"), LOOPS_OVER_AXES)


@exercise("01.6", "one matrix per sample")
def check_per_sample_matmul(per_sample_matmul: Any) -> None:
    """Exercise 01.6: row b is x[b] @ w[b]. Example: ``lab.check_per_sample_matmul(per_sample_matmul)``."""
    cases = _per_sample_cases()
    run_cases(
        per_sample_matmul,
        cases,
        _per_sample_reference,
        what="your per_sample_matmul(x, w)",
        mistakes=_per_sample_mistakes,
        rtol=RTOL,
        atol=ATOL,
        inplace_hint=NEW_AXIS_IN_PLACE,
    )
    _per_sample_design(per_sample_matmul)
    passed(f"per_sample_matmul: matches the reference on {len(cases)} cases (shapes and values)")

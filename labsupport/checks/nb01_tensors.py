"""Checks of notebook 01: each function exercise is a spec (seeded cases, a torch reference, known mistakes)."""
from typing import Any, Callable

import torch

from .core import check_prediction, exercise, passed, run_cases


def _randn(seed: int, *shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes)


AXIS, SQ = "wrong axis of a reduction: ", lambda a, b: (a[:, None, :] - b[None, :, :]).pow(2)
_above = lambda x, mean, keep=True: torch.where((x >= mean) == keep, x, 0.0)  # noqa: E731
SPECS: dict[str, dict[str, Any]] = {
    "pairwise_sq_dists": dict(id="01.1", title="pairwise squared distances", args="a, b",
        cases=lambda: [_randn(20, (4, 3), (5, 3)), _randn(21, (7, 6), (2, 6))],
        reference=lambda a, b: torch.cdist(a, b).pow(2),
        mistakes=lambda a, b: [
            (torch.cdist(a, b), "these are the distances, not their squares: drop the square root"),
            (torch.cdist(b, a).pow(2), "rows must follow a and columns b: you built the transpose"),
            (SQ(a, b).sum(0), AXIS + "sum over the coordinates (the last axis), not over a's rows"),
            (SQ(a, b).sum(1), AXIS + "sum over the coordinates (the last axis), not over b's rows"),
            (lambda r: r.dim() == 3, "sum the squared differences over the last axis (the coordinates)"),
            (lambda r: r.dim() == 1, "row i met only row i: give a and b new axes so every pair meets")]),
    "correct_class_scores": dict(id="01.3", title="the score of each sample's label", args="scores, labels",
        cases=lambda: [(*_randn(30, (4, 4)), torch.tensor([2, 0, 3, 3])),
                       (*_randn(31, (6, 3)), torch.tensor([1, 2, 0, 0, 1, 2]))],
        reference=lambda s, i: s.gather(1, i[:, None]).squeeze(1), mistakes=lambda s, i: [
            (s[:, i], "scores[:, labels] is every labelled column of every row: equal-length index tensors pair up"),
            (s[i], "scores[labels] picks whole rows: the labels are column numbers"),
            (s[i, torch.arange(len(i))], "rows and columns are swapped: the first index picks rows"),
            (s.max(dim=1).values, "that is each row's maximum, not the score of its label"),
            (s.gather(1, i[:, None]), "keep one number per sample: the result is (N,), not (N, 1)")]),
    "keep_above_row_mean": dict(id="01.4", title="keep what is above each row's mean", args="x",
        cases=lambda: [_randn(51, (4, 4)), _randn(41, (3, 6))],
        reference=lambda x: _above(x, x.mean(dim=1, keepdim=True)), mistakes=lambda x: [
            (_above(x, x.mean(dim=0, keepdim=True)), AXIS + "those are column means; a row's mean reduces dim=1"),
            (_above(x, x.mean(dim=1)), "keepdim forgotten: x.mean(dim=1) has shape (N,) and broadcasts as a row, "
                                       "so column j met row j's mean; keep the reduced axis (keepdim=True)"),
            (_above(x, x.mean(dim=1, keepdim=True), False), "the mask is inverted: you kept what is below"),
            (_above(x, x.mean()), "that is the mean of the whole tensor; each row has its own"),
            (lambda r: r.dim() == 1, "x[mask] gathers the chosen elements into a new 1-D tensor: to keep the "
                                     "shape, write through the mask into a clone (or use torch.where)")],
        inplace_hint="you changed x itself: a mask assignment writes into the tensor you index, so clone first"),
    "channels_first_rows": dict(id="01.5", title="channels-last images to channels-first rows", args="images",
        cases=lambda: [_randn(50, (2, 4, 5, 3)), _randn(51, (3, 2, 6, 4))],
        reference=lambda im: torch.stack([i.movedim(-1, 0).flatten() for i in im]), mistakes=lambda im: [
            (im.reshape(len(im), -1), "that is the stored (H, W, C) order: reshape never moves elements "
                                      "between axes; put the channel axis first with permute, then flatten"),
            (im.transpose(1, 3).reshape(len(im), -1), "H and W are swapped: permute names, for each new "
                                                      "position, the OLD axis that goes there"),
            (lambda r: r.dim() == 4, "flatten each image into one row: the result is (N, C*H*W)")]),
    "per_sample_matmul": dict(id="01.6", title="one matrix per sample", args="x, w",
        cases=lambda: [_randn(60, (3, 4), (3, 4, 2)), _randn(61, (5, 2), (5, 2, 6))],
        reference=lambda x, w: torch.einsum("bd,bdk->bk", x, w), mistakes=lambda x, w: [
            (x @ w, "x @ w met every sample with every matrix (matmul broadcasts x over w's batch): "
                    "give x an axis so each sample meets only its own matrix"),
            (torch.einsum("bd,bdk->bk", x, w)[:, None], "drop the axis of size 1 you added (squeeze)"),
            (x @ w[0], "every sample used the first matrix: w[b] belongs to sample b"),
            ((x[:, :, None] * w).sum(2), AXIS + "the product sums over D, the axis x and w share")])}


def _function_check(name: str, spec: dict[str, Any]) -> Callable[[Callable], None]:
    def check(fn: Callable) -> None:
        run_cases(fn, cases := spec["cases"](), spec["reference"], what=f"your {name}({spec['args']})",
                  mistakes=lambda *c: spec["mistakes"](*c) if c[0] is cases[0][0] else [],  # named on the 1st case
                  rtol=1e-4, atol=1e-5, inplace_hint=spec.get("inplace_hint"))
        passed(f"{name}: matches the reference on {len(cases)} cases (shapes and values)")
    check.__name__ = check.__qualname__ = f"check_{name}"
    check.__doc__ = f"Exercise {spec['id']}: {spec['title']}. Example: ``lab.check_{name}({name})``."
    return exercise(spec["id"], spec["title"])(check)


globals().update({f"check_{name}": _function_check(name, spec) for name, spec in SPECS.items()})
__all__ = [f"check_{name}" for name in SPECS] + ["check_storage_prediction"]


@exercise("01.2", "predict which write reaches t")
def check_storage_prediction(prediction: Any) -> None:
    """Which selection shares t's memory, measured. Example: ``check_storage_prediction("both")``."""
    t = torch.arange(6.0)
    s, m = t[1:4], t[t > 2]     # the slice starts at t[1], the selection at t[3]
    s[0], m[0] = -1.0, -1.0
    actual = [["neither", "mask"], ["slice", "both"]][bool(t[1] == -1)][bool(t[3] == -1)]
    check_prediction("which write reaches t", prediction, actual, choices=("slice", "mask", "both", "neither"),
                     why="a slice is a view (same memory, other strides); a boolean mask gathers the chosen "
                         "elements into new memory: a copy.")

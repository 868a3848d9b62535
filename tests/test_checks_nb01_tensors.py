"""Checks of notebook 01: correct variants pass, every listed mistake is named (the value mistakes' tests are
generated from the check's own lists), the issue's wrong PASSes fail, and bad answers get one sentence."""

from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import labsupport as lab
from labsupport.checks import nb01_tensors as nb01
from labsupport.checks import running
from labsupport.checks.values import rel_error

ROOT = Path(__file__).resolve().parent.parent

# name -> (check, reference, the check's mistakes function, its cases)
SPECS = {
    "pairwise_sq_dists": (
        lab.check_pairwise_sq_dists,
        nb01._pairwise_reference,
        nb01._pairwise_mistakes,
        nb01._pairwise_cases,
    ),
    "correct_class_scores": (
        lab.check_correct_class_scores,
        nb01._class_scores_reference,
        nb01._class_scores_mistakes,
        lambda: nb01._class_scores_cases()[0],
    ),
    "keep_above_row_mean": (lab.check_keep_above_row_mean, nb01._keep_reference, nb01._keep_mistakes, nb01._keep_cases),
    "channels_first_rows": (
        lab.check_channels_first_rows,
        nb01._channels_first_reference,
        nb01._channels_first_mistakes,
        nb01._channels_first_cases,
    ),
    "per_sample_matmul": (
        lab.check_per_sample_matmul,
        nb01._per_sample_reference,
        nb01._per_sample_mistakes,
        nb01._per_sample_cases,
    ),
}


def _keep_with_where(x):
    return torch.where(x >= x.mean(dim=1, keepdim=True), x, torch.zeros_like(x))


def _keep_with_clone(x):
    out = x.clone()
    out[x < x.sum(dim=1, keepdim=True) / x.shape[1]] = 0
    return out


def _keep_with_masked_fill(x):
    return x.masked_fill(x - x.mean(dim=-1, keepdim=True) < 0, 0.0)


def _keep_row_by_row(x):
    out = x.clone()
    for row in out:
        row[row < row.mean()] = 0
    return out


def _keep_all_rows_but_the_last(x):
    out = x.clone()
    for i in range(len(x) - 1):
        out[i][x[i] < x[i].mean()] = 0
    return out


def _keep_recomputing_the_mean(x):
    out = x.clone()
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            if out[i, j] < out[i].mean():
                out[i, j] = 0
    return out


def _class_scores_with_one_hot(scores, labels):
    return (scores * F.one_hot(labels, num_classes=scores.shape[1])).sum(dim=1)


def _pairwise_by_expansion(a, b):
    return (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T


def _pairwise_repeated_then_viewed(a, b):
    n, m = len(a), len(b)
    diff = a.repeat_interleave(m, dim=0) - b.repeat(n, 1)
    return (diff**2).sum(1).view(n, m)


def _pairwise_by_expansion_keepdim(a, b):
    aa = (a * a).sum(-1, keepdim=True)
    bb = (b * b).sum(-1, keepdim=True)
    return (aa - 2 * a @ b.t() + bb.t()).clamp_min(0)


CORRECT = {
    "pairwise_sq_dists": [
        lambda a, b: ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1),
        lambda a, b: (a.unsqueeze(1) - b.unsqueeze(0)).pow(2).sum(dim=2),
        _pairwise_by_expansion,
        lambda a, b: torch.einsum("nmd->nm", (a[:, None] - b[None]) ** 2),
        # ninth audit: a squeeze of one named axis, or a reshape to (N, M) at the end, keeps a single point's axis
        lambda a, b: (a[:, None, :] - b[None, :, :]).pow(2).sum(-1, keepdim=True).squeeze(-1),
        _pairwise_repeated_then_viewed,
        _pairwise_by_expansion_keepdim,
    ],
    "correct_class_scores": [
        lambda s, i: s[torch.arange(len(i)), i],
        lambda s, i: s.gather(1, i[:, None]).squeeze(1),
        lambda s, i: s.gather(1, i.unsqueeze(1))[:, 0],
        _class_scores_with_one_hot,
        lambda s, i: s[F.one_hot(i, s.shape[1]).bool()],
    ],
    "keep_above_row_mean": [
        lambda x: x * (x >= x.mean(1, keepdim=True)),
        _keep_with_where,
        _keep_with_clone,
        _keep_with_masked_fill,
        # thirteenth audit: the mean computed once per row before a loop writes into that row
        _keep_row_by_row,
    ],
    "channels_first_rows": [
        lambda im: im.permute(0, 3, 1, 2).reshape(im.shape[0], -1),
        lambda im: im.permute(0, 3, 1, 2).flatten(1),
        lambda im: im.movedim(-1, 1).contiguous().view(len(im), -1),
        lambda im: torch.stack([i.permute(2, 0, 1).flatten() for i in im]),
        # thirteenth audit: one channel at a time, and an einsum that only moves axes
        lambda im: torch.cat([im[..., c].reshape(len(im), -1) for c in range(im.shape[-1])], 1),
        lambda im: torch.einsum("nhwc->nchw", im).reshape(len(im), -1),
    ],
    "per_sample_matmul": [
        lambda x, w: (x.unsqueeze(1) @ w).squeeze(1),
        lambda x, w: torch.einsum("bd,bdk->bk", x, w),
        lambda x, w: torch.bmm(x[:, None, :], w)[:, 0],
        lambda x, w: (x[:, :, None] * w).sum(1),
        lambda x, w: torch.diagonal(x @ w, dim1=0, dim2=1).T,
        # thirteenth audit
        lambda x, w: torch.vmap(torch.matmul)(x, w),
        lambda x, w: (w.mT @ x[..., None])[..., 0],
    ],
}

CORRECT_CASES = [(name, k) for name, variants in CORRECT.items() for k in range(len(variants))]


@pytest.mark.parametrize("name, k", CORRECT_CASES)
def test_correct_variants_pass(name, k, capsys):
    SPECS[name][0](CORRECT[name][k])
    assert capsys.readouterr().out.startswith(f"PASS  {name}")


def _value_mistakes():
    """(exercise, mistake name) for every mistake that is a value in some case."""
    found = []
    for name, (_, _, mistakes, cases) in SPECS.items():
        for case in cases():
            for mistake in mistakes(*case):
                if isinstance(mistake.matches, torch.Tensor) and (name, mistake.name) not in found:
                    found.append((name, mistake.name))
    return found


VALUE_MISTAKES = _value_mistakes()


@pytest.mark.parametrize("name, mistake", VALUE_MISTAKES)
def test_value_mistake_is_named(name, mistake):
    check, reference, mistakes, _ = SPECS[name]

    def wrong(*args):
        for m in mistakes(*args):
            if m.name == mistake and isinstance(m.matches, torch.Tensor):
                return m.matches
        return reference(*args)

    with pytest.raises(lab.CheckError) as info:
        check(wrong)
    assert info.value.mistake == mistake
    assert info.value.hint in str(info.value)


# the mistakes that are predicates, handed in as students write them
PREDICATE_MISTAKES = [
    ("pairwise_sq_dists", "coordinates not summed", lambda a, b: (a[:, None, :] - b[None, :, :]) ** 2),
    ("pairwise_sq_dists", "kept a size-1 axis", lambda a, b: ((a[:, None] - b[None]) ** 2).sum(-1, keepdim=True)),
    ("correct_class_scores", "kept a size-1 axis", lambda s, i: s.gather(1, i[:, None])),
    ("per_sample_matmul", "kept a size-1 axis", lambda x, w: x.unsqueeze(1) @ w),
    ("per_sample_matmul", "kept a size-1 axis", lambda x, w: w.transpose(1, 2) @ x[:, :, None]),
    ("pairwise_sq_dists", "NaN or inf made", lambda a, b: ((a[:, None] - b[None]) ** 2).sum(-1) / 0),
    ("correct_class_scores", "NaN or inf made", lambda s, i: s[torch.arange(len(i)), i].log()),
    ("keep_above_row_mean", "NaN or inf made", lambda x: x.masked_fill(x < x.mean(1, keepdim=True), float("nan"))),
    ("channels_first_rows", "NaN or inf made", lambda im: im.permute(0, 3, 1, 2).flatten(1).log()),
    ("per_sample_matmul", "NaN or inf made", lambda x, w: (x.unsqueeze(1) @ w).squeeze(1) / 0),
    ("keep_above_row_mean", "mask returned", lambda x: x >= x.mean(1, keepdim=True)),
    ("keep_above_row_mean", "selected elements only", lambda x: x[x >= x.mean(1, keepdim=True)]),
    ("channels_first_rows", "not flattened", lambda im: im.permute(0, 3, 1, 2)),
    ("channels_first_rows", "batch flattened too", lambda im: im.permute(0, 3, 1, 2).reshape(-1)),
    # the audit's wrong answers, as students write them: each got a generic expected/got before
    ("pairwise_sq_dists", "differences not squared", lambda a, b: (a[:, None] - b[None]).sum(-1)),
    ("pairwise_sq_dists", "one set of points paired with itself", lambda a, b: ((a[:, None] - a[None]) ** 2).sum(-1)),
    ("correct_class_scores", "probabilities", lambda s, i: s.softmax(dim=1)[torch.arange(len(i)), i]),
    ("correct_class_scores", "wrong sign", lambda s, i: -s[torch.arange(len(i)), i]),
    ("correct_class_scores", "labels shifted by one", lambda s, i: s[torch.arange(len(i)), i - 1]),
    ("channels_first_rows", "not flattened", lambda im: im.permute(0, 3, 1, 2).reshape(len(im), im.shape[3], -1)),
    ("per_sample_matmul", "mean instead of sum", lambda x, w: (x[:, :, None] * w).mean(1)),
    ("per_sample_matmul", "every size-1 axis squeezed", lambda x, w: (x.unsqueeze(1) @ w).squeeze()),
    # round 2 of the audit: each got a generic expected/got before
    ("correct_class_scores", "per-sample cross-entropy", lambda s, i: F.cross_entropy(s, i, reduction="none")),
    (
        "pairwise_sq_dists",
        "squared lengths of the whole tensors",
        lambda a, b: (a**2).sum() + (b**2).sum() - 2 * a @ b.T,
    ),
    # round 4 of the audit: each got a generic expected/got before (the value mistakes' own tests are generated)
    ("pairwise_sq_dists", "squares subtracted", lambda a, b: (a[:, None] ** 2 - b[None] ** 2).sum(-1)),
    ("pairwise_sq_dists", "cross term left out", lambda a, b: (a**2).sum(1, keepdim=True) + (b**2).sum(1)),
    # round 5 of the audit: a generic expected/got, and a one-hot product read as "an extra leading dimension"
    ("pairwise_sq_dists", "lengths subtracted", lambda a, b: (a.norm(dim=1)[:, None] - b.norm(dim=1)) ** 2),
    ("correct_class_scores", "one-hot product not summed", lambda s, i: s * F.one_hot(i, s.shape[1])),
    ("per_sample_matmul", "samples summed", lambda x, w: torch.einsum("bd,bdk->k", x, w)),
    # round 6 of the audit (half-finished answers): each got a generic expected/got before
    ("pairwise_sq_dists", "a squared length left out", lambda a, b: (a**2).sum(1, keepdim=True) - 2 * a @ b.T),
    ("keep_above_row_mean", "a row left as it was", _keep_all_rows_but_the_last),
    # eighth round: an intermediate step handed back, (3, 1, 4), got the bare shape only
    ("per_sample_matmul", "x returned with its new axis", lambda x, w: x.unsqueeze(1)),
    ("channels_first_rows", "one row per channel", lambda im: im.permute(0, 3, 1, 2).flatten(0, 1)),
    # ninth round: a squeeze at the end passed, since every case had more than one point on each side
    ("pairwise_sq_dists", "every size-1 axis squeezed", lambda a, b: ((a[:, None] - b[None]) ** 2).sum(-1).squeeze()),
    # eleventh round: reshape's sizes the other way round, (C*H*W, N), got "a transpose is missing"
    ("channels_first_rows", "sizes in the other order", lambda im: im.permute(0, 3, 1, 2).reshape(-1, len(im))),
    # twelfth round: each got a generic expected/got (or the bare shape) before
    ("correct_class_scores", "row sums", lambda s, i: s.sum(1)),
    ("correct_class_scores", "row means", lambda s, i: s.mean(dim=-1)),
    ("channels_first_rows", "channel axis reduced away", lambda im: im.mean(3).flatten(1)),
    ("channels_first_rows", "channel axis reduced away", lambda im: im.sum(-1).reshape(len(im), -1)),
    ("channels_first_rows", "channel axis reduced away", lambda im: im[..., 0]),
    ("per_sample_matmul", "first sample with every matrix", lambda x, w: x[0] @ w),
    ("per_sample_matmul", "first sample with every matrix", lambda x, w: torch.einsum("d,bdk->bk", x[0], w)),
    # round 12, second pass: an einsum with two batch letters builds x @ w's pairs with the B axes swapped
    ("per_sample_matmul", "every sample with every matrix", lambda x, w: torch.einsum("ad,bdk->abk", x, w)),
    # thirteenth audit: NumPy's .T (every axis reversed) got a generic expected/got, and a loop that recomputes the
    # row's mean after each 0 it writes was told "a loop that stopped early"
    (
        "channels_first_rows",
        "all axes reversed",
        lambda im: torch.from_numpy(np.ascontiguousarray(im.numpy().T)).reshape(len(im), -1),
    ),
    (
        "channels_first_rows",
        "all axes reversed",
        lambda im: im.permute(*reversed(range(im.dim()))).reshape(len(im), -1),
    ),
    ("keep_above_row_mean", "mean recomputed while zeroing", _keep_recomputing_the_mean),
    # fourteenth audit: these got a generic expected/got ("halved" is a value mistake, tested above)
    ("pairwise_sq_dists", "max or min instead of sum", lambda a, b: ((a[:, None] - b[None]) ** 2).max(-1).values),
    ("pairwise_sq_dists", "max or min instead of sum", lambda a, b: ((a[:, None] - b[None]) ** 2).amin(-1)),
    (
        "channels_first_rows",
        "channels joined along dim 0",
        lambda im: torch.cat([im[..., c].reshape(len(im), -1) for c in range(im.shape[-1])], 0),
    ),
    (
        "channels_first_rows",
        "channels joined along dim 0",
        lambda im: torch.stack([im[..., c].flatten(1) for c in range(im.shape[-1])]),
    ),
    ("channels_first_rows", "a size written as a number", lambda im: im.permute(0, 3, 1, 2).reshape(2, -1)),
    ("per_sample_matmul", "result transposed", lambda x, w: torch.diagonal(x @ w, dim1=0, dim2=1)),
    (
        "channels_first_rows",
        "a size written as a number",
        lambda im: torch.cat([im[..., 0].flatten(1), im[..., 1].flatten(1), im[..., 2].flatten(1)], 1),
    ),
]


@pytest.mark.parametrize("name, mistake, wrong", PREDICATE_MISTAKES)
def test_predicate_mistake_is_named(name, mistake, wrong):
    with pytest.raises(lab.CheckError) as info:
        SPECS[name][0](wrong)
    assert info.value.mistake == mistake


def test_every_listed_mistake_has_a_test():
    listed = set()
    for name, (_, _, mistakes, cases) in SPECS.items():
        for case in cases():
            listed |= {(name, m.name) for m in mistakes(*case)}
    tested = set(VALUE_MISTAKES) | {(name, mistake) for name, mistake, _ in PREDICATE_MISTAKES}
    assert listed == tested


def _differ(a, b):
    return a.shape != b.shape or rel_error(a, b) > 1e-3


@pytest.mark.parametrize("name", SPECS)
def test_value_mistakes_differ_from_the_reference_and_each_other(name):
    """In each case, the mistakes that are wrong there differ from each other (so the name is the right one);
    each mistake is wrong in some case (ties only where a row holds its mean)."""
    _, reference, mistakes, cases = SPECS[name]
    wrong_somewhere = set()
    for case in cases():
        right = reference(*case)
        values = [(m.name, m.matches) for m in mistakes(*case) if isinstance(m.matches, torch.Tensor)]
        values = [(n, v) for n, v in values if _differ(v, right)]
        wrong_somewhere |= {n for n, _ in values}
        for i, (_, a) in enumerate(values):
            for _, b in values[:i]:
                assert _differ(a, b)
    assert wrong_somewhere == {m for n, m in VALUE_MISTAKES if n == name}


# --------------------------------------------------------------------------- the wrong PASSes


def test_one_hot_without_num_classes_is_caught_and_named():
    """01.3: every old case held the last class, so one_hot(labels) without num_classes passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(lambda s, i: (s * F.one_hot(i)).sum(1))
    assert info.value.mistake == "classes counted from labels"
    assert "num_classes" in info.value.hint
    assert "num_classes" not in info.value.message  # rung 1 says what and where, not the cause


def test_classes_from_the_largest_label_are_caught():
    def by_max_label(scores, labels):
        mask = torch.arange(int(labels.max()) + 1) == labels[:, None]
        return scores[mask]

    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(by_max_label)
    assert info.value.mistake == "classes counted from labels"


def test_some_cases_miss_the_last_class():
    every_class, last_missing = nb01._class_scores_cases()
    for scores, labels in every_class:
        assert scores.shape[1] - 1 in labels.tolist()
    for scores, labels in last_missing:
        assert scores.shape[1] - 1 not in labels.tolist()


def test_strict_comparison_drops_ties_and_is_named():
    """01.4: random floats never tie with the mean, so `>` for `>=` passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_keep_above_row_mean(lambda x: x * (x > x.mean(1, keepdim=True)))
    assert info.value.mistake == "ties set to 0"
    with pytest.raises(lab.CheckError) as info:
        lab.check_keep_above_row_mean(lambda x: torch.where(x <= x.mean(1, keepdim=True), 0.0, x))
    assert info.value.mistake == "ties set to 0"


def test_cases_hold_ties_and_the_prompt_says_where_ties_go():
    ties = [case[0] for case in nb01._keep_cases() if (case[0] == case[0].mean(1, keepdim=True)).any()]
    assert len(ties) >= 2
    nb = nbformat.read(ROOT / "notebooks" / "01_tensors.ipynb", as_version=4)
    prompt = next(c.source for c in nb.cells if c.source.startswith("### Exercise 01.4"))
    assert "at or above" in prompt


def test_a_mid_range_threshold_fails():
    """Round 5 of the audit: (max + min) / 2 of each row kept the same entries as the mean on every case, and passed."""

    def mid_range(x):
        middle = (x.max(1, keepdim=True).values + x.min(1, keepdim=True).values) / 2
        return torch.where(x >= middle, x, torch.zeros_like(x))

    with pytest.raises(lab.CheckError, match="does not match the reference"):
        lab.check_keep_above_row_mean(mid_range)


def test_a_right_answer_in_another_dtype_names_no_threshold():
    """Round 5 of the audit: float32 values that were right got the "row median" sentence, because on whole numbers
    with ties the median keeps the same entries as the mean; a mistake that equals the reference is never named."""
    with pytest.raises(lab.CheckError, match="wrong dtype") as info:
        lab.check_keep_above_row_mean(lambda x: torch.where(x >= x.mean(1, keepdim=True), x, 0.0).float())
    assert info.value.mistake is None


def test_changing_x_in_place_names_x():
    def in_place(x):
        x[x < x.mean(1, keepdim=True)] = 0
        return x

    with pytest.raises(lab.CheckError, match="changed its argument x in place") as info:
        lab.check_keep_above_row_mean(in_place)
    assert "leave x unchanged" in info.value.hint


def test_a_float32_case_catches_a_hard_coded_dtype():
    def hard_coded(a, b):
        out = torch.zeros(len(a), len(b), dtype=torch.float64)
        out += ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return out

    with pytest.raises(lab.CheckError, match="wrong dtype"):
        lab.check_pairwise_sq_dists(hard_coded)


def test_rung_one_hides_the_cause_and_the_code(capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_channels_first_rows(lambda im: im.reshape(len(im), -1))
    first = "\n".join(info.value.rendered())
    assert info.value.rung == 1
    assert info.value.hint not in first and "permute" not in first
    with pytest.raises(lab.CheckError) as info:
        lab.check_channels_first_rows(lambda im: im.reshape(len(im), -1))
    assert info.value.hint in "\n".join(info.value.rendered())
    assert info.value.look not in "\n".join(info.value.rendered())
    lab.hint("01.5")
    assert info.value.look in capsys.readouterr().out


# --------------------------------------------------------------------------- 01.2, a prediction


def test_storage_prediction_right_first(capsys):
    lab.check_storage_prediction("Slice ")
    out = capsys.readouterr().out
    assert out.startswith("PASS  which write reaches t: 'slice' is right (recorded answer: 'slice')")


def test_storage_prediction_wrong_then_right_keeps_the_first_answer(capsys):
    lab.check_storage_prediction("both")
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and "recorded answer: 'both'" in first
    assert "Now explain: which of s and m shares t's memory" in first
    assert "a boolean mask gathers" not in first  # the explanation waits for lab.hint
    lab.check_storage_prediction("slice")
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 'both'" in second
    assert nb01.STORAGE_NOTES["both"] in second
    assert lab.checks.core.COMMITTED["01.2"].answer == "both"


class LyingStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize(
    "junk",
    [None, "view", 3, 2.5, float("nan"), ["slice"], np.array(["slice", "mask"]), torch.zeros(2), LyingStr("junk")],
    ids=repr,
)
def test_storage_prediction_junk_is_refused_and_not_recorded(junk, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_storage_prediction(junk)
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out
    assert "01.2" not in lab.checks.core.COMMITTED


def test_storage_prediction_called_wrongly():
    with pytest.raises(lab.CheckError, match="called wrongly"):
        lab.check_storage_prediction()


# --------------------------------------------------------------------------- bad inputs


def _forever(*args):
    while True:
        pass


def _raises(*args):
    raise ValueError("my own bug")


class AlwaysEqual(torch.Tensor):
    """A tensor subclass that claims to equal anything."""

    def __eq__(self, other):
        return True

    __hash__ = torch.Tensor.__hash__


BAD_RESULTS = {
    "None": None,
    "list": [[1.0, 2.0]],
    "numpy": np.zeros((4, 5)),
    "float": 3.5,
    "wrong shape": torch.zeros(3, 3, 3, dtype=torch.float64),
    "int dtype": torch.zeros(4, 5, dtype=torch.int64),
    "nan": torch.full((4, 5), float("nan"), dtype=torch.float64),
    "inf": torch.full((4, 5), float("inf"), dtype=torch.float64),
    "meta": torch.zeros(4, 5, device="meta", dtype=torch.float64),
    "empty": torch.zeros(0),
    "lying subclass": torch.zeros(4, 5, dtype=torch.float64).as_subclass(AlwaysEqual),
    "tuple": (torch.zeros(4, 5), torch.zeros(4, 5)),
}
BAD_FUNCTIONS = {"raises": _raises, "never returns": _forever, "takes no argument": lambda: None}
BAD_ANSWERS = {"None": None, "string": "pairwise_sq_dists", "number": 3, "tensor": torch.zeros(2), "class": Exception}


def _bad_inputs():
    cases = [(kind, lambda *a, r=result: r) for kind, result in BAD_RESULTS.items()]
    cases += list(BAD_FUNCTIONS.items())
    cases += [(f"answer {kind}", answer) for kind, answer in BAD_ANSWERS.items()]
    return cases


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("kind, answer", _bad_inputs(), ids=[kind for kind, _ in _bad_inputs()])
def test_bad_input_gets_one_sentence(name, kind, answer, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError) as info:
        SPECS[name][0](answer)
    text = str(info.value)
    assert "PASS" not in capsys.readouterr().out
    assert text and "Traceback" not in text and "could not use" not in text
    assert "\n" not in info.value.message.split("\n  in your line:")[0]


@pytest.mark.parametrize("name", SPECS)
def test_never_returning_is_stopped_with_a_sentence(name, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match=r"did not return within 0.2 s"):
        SPECS[name][0](_forever)


@pytest.mark.parametrize("name", SPECS)
def test_wrong_dtype_is_named(name):
    check, reference, _, _ = SPECS[name]
    with pytest.raises(lab.CheckError, match="dtype"):
        check(lambda *args: reference(*args).to(torch.float16))


# --------------------------------------------------------------------------- the helpers notebook 01 calls


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"N": 0}, "N must be a whole number >= 1"),
        ({"N": -3}, "N must be a whole number >= 1"),
        ({"N": 2.5}, "N must be a whole number"),
        ({"D_in": "1000"}, "D_in must be a whole number"),
        ({"D_out": True}, "D_out must be a whole number"),
        ({"N": 10**6, "D_in": 10**6}, "more than"),
        ({"dtype": torch.int64}, "dtype must be a floating-point torch dtype"),
        ({"dtype": "float32"}, "dtype must be a floating-point torch dtype"),
        ({"device": "gpu0"}, "device must be a device name"),
        ({"device": 3.5}, "device must be a device name"),
        ({"seed": -1}, "a seed must be a whole number"),
        ({"seed": "0"}, "a seed must be a whole number"),
    ],
)
def test_lecture_data_bad_arguments_get_one_sentence(kwargs, fragment):
    with pytest.raises((ValueError, TypeError), match=fragment):
        lab.lecture_data(**kwargs)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"H": 0}, "H must be a whole number >= 1"),
        ({"D_in": None}, "D_in must be a whole number"),
        ({"requires_grad": "yes"}, "requires_grad must be True or False"),
        ({"dtype": torch.bool}, "dtype must be a floating-point torch dtype"),
        ({"seed": 2**40}, "a seed must be a whole number"),
    ],
)
def test_lecture_weights_bad_arguments_get_one_sentence(kwargs, fragment):
    with pytest.raises((ValueError, TypeError), match=fragment):
        lab.lecture_weights(**kwargs)


def test_unavailable_device_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="not available on this machine"):
        lab.lecture_data(device="cuda")


def test_lecture_helpers_still_give_the_lecture_numbers():
    x, y = lab.lecture_data(N=4, D_in=3, D_out=2, seed=np.int64(0))
    w1, w2 = lab.lecture_weights(D_in=3, H=5, D_out=2, requires_grad=True, device=torch.device("cpu"))
    assert x.shape == (4, 3) and y.shape == (4, 2) and w1.requires_grad and w2.shape == (5, 2)
    assert torch.equal(x, lab.lecture_data(N=4, D_in=3, D_out=2)[0])


def test_code_that_raises_on_one_case_is_told_which_case():
    """01.3: a hard-coded 4 raised on the second case, and the message did not say which case it was."""

    def hard_coded(scores, labels):
        return scores[torch.arange(4), labels]

    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(hard_coded)
    assert info.value.message.startswith("In case 2 of 3 (inputs of shape (6, 3), (6,)), your correct_class_scores")


PAIRWISE_DESIGNS_REFUSED = {
    "torch.cdist used": lambda a, b: torch.cdist(a, b) ** 2,
    "Python loops": lambda a, b: torch.stack([((row - b) ** 2).sum(1) for row in a]),
}


@pytest.mark.parametrize("name", list(PAIRWISE_DESIGNS_REFUSED))
def test_the_prompts_rule_is_checked_after_the_values(name):
    """01.1: torch.cdist and a loop over rows gave the right values and passed, though the prompt forbids both."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_pairwise_sq_dists(PAIRWISE_DESIGNS_REFUSED[name])
    assert info.value.mistake == name


LOOPS_REFUSED = {
    "correct_class_scores": lambda s, i: torch.stack([s[k, i[k]] for k in range(len(i))]),
    "per_sample_matmul": lambda x, w: torch.stack([x[b] @ w[b] for b in range(len(x))]),
}


@pytest.mark.parametrize("name", list(LOOPS_REFUSED))
def test_a_loop_over_the_samples_is_refused(name):
    """01.3 and 01.6: a comprehension over the samples gave the right values and passed, though the prompts
    say "no loop"."""
    with pytest.raises(lab.CheckError) as info:
        SPECS[name][0](LOOPS_REFUSED[name])
    assert info.value.mistake == "Python loop"


LOOPS_OVER_ANOTHER_AXIS = {
    "pairwise_sq_dists": (
        lambda a, b: sum((a[:, None, k] - b[None, :, k]) ** 2 for k in range(a.shape[1])),
        "Python loop over the coordinates",
    ),
    "correct_class_scores": (
        lambda s, i: sum(torch.where(i == c, s[:, c], torch.zeros_like(s[:, c])) for c in range(s.shape[1])),
        "Python loop over the classes",
    ),
    "per_sample_matmul": (
        lambda x, w: sum(x[:, d, None] * w[:, d, :] for d in range(x.shape[1])),
        "Python loop over D or K",
    ),
}


@pytest.mark.parametrize("name", list(LOOPS_OVER_ANOTHER_AXIS))
def test_a_loop_over_an_axis_other_than_the_samples_is_refused(name):
    """01.1, 01.3 and 01.6: a loop over the coordinates, the classes or D gave the right values and passed,
    because only the number of samples changed between the counted calls."""
    loop, mistake = LOOPS_OVER_ANOTHER_AXIS[name]
    with pytest.raises(lab.CheckError) as info:
        SPECS[name][0](loop)
    assert info.value.mistake == mistake


def test_a_broadcast_through_matmul_is_not_a_loop(capsys):
    lab.check_pairwise_sq_dists(lambda a, b: (a * a).sum(1, keepdim=True) + (b * b).sum(1) - 2 * a @ b.T)
    assert capsys.readouterr().out.startswith("PASS  pairwise_sq_dists")


def test_a_squeeze_without_an_axis_fails_on_one_sample():
    """01.3: gather(...).squeeze() returns a 0-d tensor for a batch of one, and passed (every case had N > 1)."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(lambda s, i: s.gather(1, i.unsqueeze(1)).squeeze())
    err = info.value
    assert err.mistake == "every size-1 axis squeezed"
    assert "(1,)" in str(err)


@pytest.mark.parametrize(
    "squeeze",
    [lambda d: d.squeeze(), lambda d: d.squeeze(1)],
    ids=["squeeze()", "squeeze(1) with one point in b"],
)
def test_pairwise_squeezed_fails_on_one_point(squeeze):
    """01.1: (...).sum(-1).squeeze() returns (M,) for one point in a and passed (every case had N, M > 1)."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_pairwise_sq_dists(lambda a, b: squeeze(((a[:, None] - b[None]) ** 2).sum(-1)))
    err = info.value
    assert err.mistake == "every size-1 axis squeezed"
    assert "squeeze() without an axis" in err.hint


def _pairwise_unsqueezing_in_place(a, b):
    a.unsqueeze_(1)
    b.unsqueeze_(0)
    return ((a - b) ** 2).sum(-1)


def test_pairwise_that_unsqueezes_its_inputs_in_place_is_refused():
    """01.1: a.unsqueeze_(1) reshaped the caller's points and still returned the right distances: it passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_pairwise_sq_dists(_pairwise_unsqueezing_in_place)
    err = info.value
    assert err.mistake == "changed a in place"
    assert "unsqueeze_" in err.hint


def _class_scores_unsqueezing_labels(scores, labels):
    labels.unsqueeze_(1)
    return scores.gather(1, labels)[:, 0]


def test_class_scores_that_unsqueeze_the_labels_in_place_are_refused():
    """01.3: labels.unsqueeze_(1) left the caller's labels (N, 1) and passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(_class_scores_unsqueezing_labels)
    err = info.value
    assert err.mistake == "changed labels in place"


def _per_sample_unsqueezing_x(x, w):
    x.unsqueeze_(1)
    return (x @ w)[:, 0]


def test_per_sample_matmul_that_unsqueezes_x_in_place_is_refused():
    """01.6: x.unsqueeze_(1) left the caller's x (B, 1, D) and passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_per_sample_matmul(_per_sample_unsqueezing_x)
    err = info.value
    assert err.mistake == "changed x in place"


# --------------------------------------------------------------------------- eleventh round of the audit


def _zero_what_is_above_the_mean(x):
    out = x.clone()
    out[x > x.mean(dim=1, keepdim=True)] = 0
    return out


def test_an_inverted_mask_that_keeps_ties_is_named():
    """01.4: zeroing the entries above the mean (ties kept) got a bare expected/got."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_keep_above_row_mean(_zero_what_is_above_the_mean)
    assert info.value.mistake == "inverted mask, ties kept"
    assert "inverted" in info.value.hint


@pytest.mark.parametrize(
    "rows",
    [lambda s: torch.arange(s.shape[1]), lambda s: torch.arange(len(s[0])), lambda s: list(range(s.shape[1]))],
)
def test_a_row_index_over_the_classes_is_named(rows):
    """01.3: a row index of C entries passed the square case, then raised an IndexError with no cause given."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(lambda s, i: s[rows(s), i])
    assert info.value.mistake == "row index of another length"
    assert "N in all" in info.value.hint
    assert "arange" not in info.value.hint


def test_another_index_error_keeps_its_own_advice():
    """01.3: an index out of range is not a row index of another length."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(lambda s, i: s[torch.arange(len(i)), i + s.shape[1]])
    assert info.value.mistake == "raised IndexError"


def test_the_channel_axis_reduced_away_is_named_without_the_fix(capsys):
    """01.5, twelfth round: a mean over the channels, (N, H*W), got the bare shape; the rungs name the cause and
    where to look, never the permutation itself."""
    err = None
    for _ in range(2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_channels_first_rows(lambda im: im.mean(3).flatten(1))
        err = info.value
    assert err.mistake == "channel axis reduced away" and err.look
    assert "permute(0, 3, 1, 2)" not in str(err) + err.look


# --------------------------------------------------------------------------- fifteenth audit


def test_channels_first_rows_that_transposes_the_callers_images_in_place_is_refused():
    """01.5: transpose_ gave the right rows and reshaped the caller's images behind its back; it passed."""

    def in_place(images):
        return images.transpose_(1, 3).transpose_(2, 3).reshape(images.shape[0], -1)

    with pytest.raises(lab.CheckError) as info:
        lab.check_channels_first_rows(in_place)
    assert info.value.mistake == "changed images in place"
    assert "transpose_" in info.value.hint


class LyingTensor(torch.Tensor):
    """A tensor whose every torch operation, attribute and comparison answers True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True


def test_storage_prediction_held_in_a_lying_tensor_gets_a_sentence():
    """01.2: got "the check could not use what it was given (AttributeError: ...)"."""
    with torch._C.DisableTorchFunction():
        answer = torch.tensor(1.0).as_subclass(LyingTensor)
    with pytest.raises(lab.CheckError) as info:
        lab.check_storage_prediction(answer)
    assert "could not use" not in info.value.message
    assert info.value.usage


def test_the_broadcast_product_averaged_over_its_extra_batch_axis_is_named():
    """01.6, sixteenth audit: x @ w broadcast to (B, B, K), then .mean(0), got the generic "does not match"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_per_sample_matmul(lambda x, w: torch.matmul(x, w).mean(0))
    assert info.value.mistake == "matrices averaged"
    assert "w.mean" not in str(info.value)  # the cause is said, not a line to paste


def test_a_one_hot_mask_averaged_over_the_row_is_named():
    """01.3, sixteenth audit: (scores * one_hot(labels, C)).mean(1) got the generic "does not match"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_correct_class_scores(lambda s, i: (s * F.one_hot(i, s.shape[1])).mean(1))
    assert info.value.mistake == "masked row averaged"
    assert ".sum(" not in str(info.value)  # the cause is said, not the repaired reduction

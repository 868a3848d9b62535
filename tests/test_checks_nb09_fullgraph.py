"""Exercise 09.4 (one graph, no breaks): summarise_graph is judged eagerly against summarise, then
under torch.compile(fullgraph=True, backend="eager"); each graph break and each wrong value is named."""

import json
from pathlib import Path

import pytest
import torch

import labsupport as lab
from labsupport.checks import nb09_static_and_dynamic_graphs as nb09
from labsupport.checks import running

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_static_and_dynamic_graphs.ipynb"


def notebook_summarise():
    """The colleague's summarise, as notebook 09 defines it (the cell above Exercise 4's solution)."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("def summarise(x):"))
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["summarise"]


def test_the_reference_is_the_notebooks_summarise(capsys):
    summarise = notebook_summarise()
    for x, _ in nb09.summarise_inputs():
        assert torch.equal(summarise(x.clone()), nb09.summarise_reference(x))
    assert "largest |x|" in capsys.readouterr().out  # the print the exercise removes


def with_where(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    return y * (y > 0).float().mean()


def with_cond(x):
    y = x / x.abs().max()
    y = torch.cond(y.mean() < 0, lambda y: -y, lambda y: y.clone(), (y,))
    return y * (y > 0).sum() / y.shape[0]


def with_sign(x):
    y = x / x.abs().amax()
    sign = 1 - 2 * (y.mean() < 0).to(y.dtype)
    y = y * sign
    return y * torch.count_nonzero(y > 0) / y.numel()


@pytest.mark.parametrize("student", [with_where, with_cond, with_sign])
def test_every_correct_design_passes(student, capsys):
    lab.check_fullgraph_fix(student)
    assert capsys.readouterr().out.startswith("PASS  summarise_graph: equal to summarise on 7 vectors")


# ---------------------------------------------------------------- graph breaks


def keeps_print(x):
    y = with_where(x)
    print("largest |x|:", float(x.abs().max()))
    return y


def keeps_if(x):
    y = x / x.abs().max()
    if y.mean() < 0:
        y = -y
    return y * (y > 0).float().mean()


def keeps_tolist(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    share = sum(1 for v in y.tolist() if v > 0) / len(y)
    return y * share


def selects_the_positive(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    return y * y[y > 0].numel() / y.numel()


BREAKS = {
    "print left in": keeps_print,
    "python branch": keeps_if,
    "python numbers": keeps_tolist,
    "data-dependent size": selects_the_positive,
}


def test_every_graph_break_has_a_test():
    assert [m.name for m in nb09.GRAPH_BREAKS] == list(BREAKS)


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_graph_break_is_named_with_its_line(name, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(BREAKS[name])
    assert info.value.mistake == name
    assert " the graph at line " in info.value.message  # fullgraph=True refused it, or the default settings break it
    assert "one graph for the whole function" in info.value.expected


def test_a_count_by_nonzero_is_a_data_dependent_size():
    """09.4: y[y > 0] and torch.nonzero break the graph ("Dynamic shape operator") and got no named cause."""

    def by_nonzero(x):
        y = x / x.abs().max()
        y = torch.where(y.mean() < 0, -y, y)
        return y * len(torch.nonzero(y > 0)) / len(y)

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(by_nonzero)
    assert info.value.mistake == "data-dependent size"


def test_the_math_module_on_a_count_is_python_numbers():
    """Audit 7: math.floor of the count broke the graph ("data-dependent expression") with no cause named."""
    import math

    def floors_the_count(x):
        y = x / x.abs().max()
        y = torch.where(y.mean() < 0, -y, y)
        return y * math.floor((y > 0).sum()) / len(y)

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(floors_the_count)
    assert info.value.mistake == "python numbers"


def test_a_loop_over_the_elements_is_python_numbers_not_a_branch():
    """09.4: sum(1 for v in y if v > 0) was named "python branch", with a look at the flip."""

    def loops_over_y(x):
        y = x / x.abs().max()
        y = torch.where(y.mean() < 0, -y, y)
        return y * sum(1 for v in y if v > 0) / len(y)

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(loops_over_y)
    assert info.value.mistake == "python numbers"
    assert "line 4 of summarise_graph" in info.value.message


def test_the_first_break_shows_where_and_the_second_names_why():
    for rung in (1, 2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_fullgraph_fix(keeps_if)
        assert "line 3 of summarise_graph: `if y.mean() < 0:`" in info.value.message
        shown = "\n".join(info.value.rendered())
        assert ("decided by Python, between two graphs" in shown) == (rung == 2)


def test_a_mean_of_booleans_is_named():
    """09.4 audit 5: (y > 0).mean() raised mean()'s dtype error, with running's hint about tensors of different
    dtypes (a wrong cause)."""

    def mean_of_the_comparison(x):
        y = x / x.abs().max()
        y = torch.where(y.mean() < 0, -y, y)
        return y * (y > 0).mean()

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(mean_of_the_comparison)
    assert info.value.mistake == "mean of booleans"
    assert "different dtypes" not in info.value.hint


def _where_on_a_python_bool(x):
    y = x / x.abs().max()
    y = torch.where(bool(y.mean() < 0), -y, y)
    return y * (y > 0).float().mean()


def _where_with_one_value(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y)
    return y * (y > 0).float().mean()


@pytest.mark.parametrize(
    "student, name",
    [
        (_where_on_a_python_bool, "torch.where given a Python bool"),
        (_where_with_one_value, "torch.where given too few values"),
    ],
)
def test_a_torch_where_called_wrongly_is_named(student, name):
    """09.4 audit 8: torch's long list of torch.where's forms came with no cause."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(student)
    assert info.value.mistake == name
    assert "expected one of" not in info.value.message
    text = f"{info.value.hint} {info.value.look}"
    assert "y.mean() < 0" not in text and "-y, y" not in text


def test_no_hint_quotes_the_fix():
    fixes = ("torch.where", "torch.cond", ".float().mean()", "count_nonzero", "(y > 0)", ".clone()")
    for mistake in [*nb09.GRAPH_BREAKS, *nb09.SUMMARISE_MISTAKES, nb09.MEAN_OF_BOOLEANS]:
        text = f"{mistake.why} {mistake.look}"
        assert not any(fix in text for fix in fixes), mistake.name
    # the cond branch's mistake names torch.cond, which the student wrote, but not the repaired branch
    cond = nb09.BRANCH_RETURNS_ITS_INPUT
    assert ".clone()" not in f"{cond.why} {cond.look}"


# ---------------------------------------------------------------- wrong values


def variant(**how):
    def student(x):
        return nb09.summarise_variant(x, **how)

    return student


def share_of_six(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    return y * (y > 0).float().sum() / 6  # the length of most of the check's vectors, written in


def times_x_itself(x):
    """Audit 11: the share multiplies x, not the scaled vector: expected/got only."""
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    return x * (y > 0).float().mean()


def ones_of_six(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() < 0, -y, y)
    return y * ((y > 0).float() @ torch.ones(6)) / len(y)


VALUES = {
    "no abs": variant(scale="max"),
    "scaled by the norm": variant(scale="norm"),  # fourteenth audit: x / x.norm(), expected/got only
    "flip swapped": variant(flip="mean >= 0"),
    "a mean of 0 flipped": variant(flip="mean <= 0"),
    "flip by the median": variant(flip="median < 0"),  # fourteenth audit: expected/got only
    "flip when any entry is negative": variant(flip="min < 0"),  # fourteenth audit: y.min() < 0, expected/got only
    "flip each element": variant(flip="each"),
    "flip left out": variant(flip="none"),  # audit 6: half-finished answers had no cause named
    "share left out": variant(share="none"),
    "only the scaling": variant(flip="none", share="none"),  # audit 7: `return y`, the stub's first line, unnamed
    "each entry by its own comparison": variant(share="mask"),
    "share of the other entries": variant(share="< 0 after"),  # twelfth audit: expected/got only
    "share of the nonzero entries": variant(share="nonzero"),  # fourteenth audit: (y != 0), expected/got only
    "count, not share": variant(share="count"),
    "share in whole numbers": variant(share="floor"),  # audit: (y > 0).sum() // len(y) had no cause named
    "share in percent": variant(share="percent"),  # audit 6: a share read as a percentage
    "mean of the positive values": variant(share="positive mean"),  # round 12, second pass: expected/got only
    "zero counted": variant(share=">= 0 after"),
    "share before the flip": variant(share="> 0 before"),
    "length written in": share_of_six,  # audit 4: expected/got only
    "scaled vector unused": times_x_itself,
}


@pytest.mark.parametrize(
    "name, how",
    [("flip swapped", {"flip": "mean > 0"}), ("share of the other entries", {"share": "<= 0 after"})],
)
def test_more_forms_of_a_value_mistake_are_named(name, how):
    """Twelfth audit: a flip when the mean is above 0, and one minus the share, got expected/got only."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(variant(**how))
    assert info.value.mistake == name


def test_the_share_returned_alone_is_named():
    """Twelfth audit: returning the share alone was told "you reduced over everything"."""

    def share_alone(x):
        y = x / x.abs().max()
        y = torch.where(y.mean() < 0, -y, y)
        return (y > 0).float().mean()

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(share_alone)
    assert info.value.mistake == "share returned alone"
    assert "reduced" not in str(info.value)


def test_every_step_on_x_unscaled_is_named_too():
    """Audit 11: the starting line dropped, every step on x as it came: expected/got only."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(variant(scale="none"))
    assert info.value.mistake == "scaled vector unused"


def test_every_value_mistake_has_a_test():
    assert [m.name for m in nb09.SUMMARISE_MISTAKES] == list(VALUES)


@pytest.mark.parametrize("name", list(VALUES))
def test_each_value_mistake_is_named(name):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(VALUES[name])
    assert info.value.mistake == name
    assert info.value.message.startswith("eagerly, summarise_graph differs from summarise on a vector with")


def test_a_length_written_into_a_tensor_is_named_where_it_fails():
    """Audit 4: torch.ones(6) where len(x) belongs raised on the vector of 9, with a generic broadcasting hint."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(ones_of_six)
    assert info.value.mistake == "length written in"
    assert "vector of 9 numbers" in info.value.got


def test_an_unknown_value_mistake_says_what_without_a_cause():
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(lambda x: with_where(x) * 2)
    assert info.value.mistake is None and info.value.hint is None
    assert info.value.expected and info.value.got


@pytest.mark.parametrize(
    "student, message",
    [
        (None, "is None"),
        (3, "is not a function"),
        (lambda x: with_where(x).tolist(), "is not a tensor"),
        (lambda x: x.div_(2), "changed its argument x in place"),
        (lambda x: 1 / 0, "ZeroDivisionError"),
    ],
)
def test_what_the_check_cannot_use_is_answered(student, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(student)
    assert message in str(info.value)


def test_a_function_that_never_returns_is_stopped(monkeypatch):
    def endless(x):
        while True:
            pass

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match="did not return within 0.2 s"):
        lab.check_fullgraph_fix(endless)


def flips_at_zero(x):
    y = x / x.abs().max()
    y = torch.where(y.mean() <= 0, -y, y)
    return y * (y > 0).float().mean()


def zeroes_at_zero(x):
    y = x / x.abs().max()
    y = y * torch.sign(y.mean())
    return y * (y > 0).float().mean()


@pytest.mark.parametrize("student", [flips_at_zero, zeroes_at_zero])
def test_a_flip_that_changes_a_mean_of_zero_is_named(student):
    """09.4: torch.where(y.mean() <= 0, -y, y) and y * sign(y.mean()) passed: no input had a mean of exactly 0;
    then they got only expected/got on that input."""
    with pytest.raises(lab.CheckError, match="a mean of exactly 0") as info:
        lab.check_fullgraph_fix(student)
    assert info.value.mistake == "a mean of 0 flipped"


def test_an_item_that_fullgraph_lets_through_is_still_a_graph_break():
    """09.4: .item() passed under fullgraph=True (torch 2.14 captures it), while a plain torch.compile and
    torch._dynamo.explain, which the notebook's next cell prints, still break the graph there."""

    def via_item(x):
        y = x / x.abs().max()
        y = torch.where(torch.tensor(y.mean().item() < 0), -y, y)
        return y * (y > 0).float().mean()

    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(via_item)
    assert info.value.mistake == "python numbers", str(info.value)


def test_a_cond_branch_that_returns_its_input_is_named(capsys):
    """09.4 (audit 2): torch.cond(y.mean() < 0, lambda y: -y, lambda y: y, (y,)) got torch's page-long aliasing
    error, the same at every try; now the first try says which branch, the second why, lab.hint where."""

    def cond_keeps_y(x):
        y = x / x.abs().max()
        y = torch.cond(y.mean() < 0, lambda v: -v, lambda v: v, (y,))
        return y * (y > 0).float().mean()

    try:
        cond_keeps_y(torch.randn(5))
    except Exception:  # torch 2.11 and later refuse a branch that returns its input
        pass
    else:  # torch 2.6 runs it: the function is then a right answer, and passes
        lab.check_fullgraph_fix(cond_keeps_y)
        return
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(cond_keeps_y)
    assert info.value.mistake == "cond branch returns its input", str(info.value)
    assert "aliases its input" in info.value.message and "\n" not in info.value.message
    lab.hint("09.4")
    out = capsys.readouterr().out
    assert "look at: the branch of torch.cond that returns its argument as it came" in out
    assert ".clone()" not in out  # where to look, not the repaired branch


def median_flip_with_where(x):
    """Fourteenth audit: the flip decided by torch.median, written as a student would, in one graph."""
    y = x / x.abs().max()
    y = torch.where(y.median() < 0, -y, y)
    return y * (y > 0).float().mean()


def test_a_median_flip_written_with_where_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_fullgraph_fix(median_flip_with_where)
    assert info.value.mistake == "flip by the median"
    assert "median" not in info.value.message


def sign_factor_and_count_nonzero(x):
    """Fourteenth audit: the flip as a factor of +-1, the share by count_nonzero of the comparison."""
    y = x / torch.linalg.vector_norm(x, float("inf"))
    y = y * (1 - 2 * (y.sum() < 0).to(y.dtype))
    return y * torch.count_nonzero(y > 0) / y.shape[0]


def heaviside_share(x):
    """Fourteenth audit: the share as the mean of a Heaviside step that is 0 at 0."""
    y = x / torch.amax(torch.abs(x))
    y = torch.where(x.mean().lt(0), y.neg(), y)
    return y * torch.heaviside(y, torch.zeros(())).mean()


@pytest.mark.parametrize("student", [sign_factor_and_count_nonzero, heaviside_share])
def test_more_correct_designs_pass(student, capsys):
    lab.check_fullgraph_fix(student)
    assert capsys.readouterr().out.startswith("PASS")

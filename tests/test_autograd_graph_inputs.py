"""lab.print_graph and lab.graph_nodes given what students pass by mistake: one clear sentence
(a TypeError or ValueError that says what to pass instead), never an internal error."""

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.autograd_graph import _lines


def loss_and_weight():
    w = torch.ones(3, requires_grad=True)
    return (w.exp() * 2).sum(), w


@pytest.mark.parametrize(
    "value, words",
    [
        (None, "got None: pass a tensor"),
        ([torch.ones(2)], "got list: pass one tensor"),
        ((torch.ones(2), torch.ones(2)), "got tuple: pass one tensor"),
        (np.ones(2), "got ndarray: pass a tensor"),
        ("loss", "got str: pass a tensor"),
        (2.5, "got float: pass a tensor"),
    ],
)
def test_what_is_not_a_tensor_gets_a_sentence(value, words):
    for walk in (lab.print_graph, lab.graph_nodes):
        with pytest.raises(TypeError, match=words):
            walk(value)


def test_a_grad_fn_is_told_to_pass_the_tensor():
    loss, _ = loss_and_weight()
    with pytest.raises(TypeError, match="a node of the graph: pass the tensor itself"):
        lab.print_graph(loss.grad_fn)


@pytest.mark.parametrize("names", [["w"], "w", 3])
def test_names_must_be_a_dict(names):
    loss, _ = loss_and_weight()
    with pytest.raises(TypeError, match=r"names must be a dict name -> tensor, such as \{'w1': w1\}"):
        lab.print_graph(loss, names=names)


@pytest.mark.parametrize("depth", [0, -1, 2.5, True, "3", None])
def test_max_depth_must_be_a_positive_int(depth):
    loss, _ = loss_and_weight()
    with pytest.raises(ValueError, match="max_depth must be a positive int"):
        lab.print_graph(loss, max_depth=depth)


@pytest.mark.parametrize("flag", ["yes", 1, None])
def test_include_leaves_must_be_a_bool(flag):
    loss, _ = loss_and_weight()
    with pytest.raises(TypeError, match="include_leaves must be True or False"):
        lab.graph_nodes(loss, include_leaves=flag)


def test_a_deep_graph_and_a_huge_max_depth_do_not_hit_the_recursion_limit():
    w = torch.ones(2, requires_grad=True)
    t = w
    for _ in range(3000):
        t = t.neg()
    lines = _lines(t, max_depth=10**9)
    assert len(lines) == 3001 and lines[-1].endswith("AccumulateGrad -> leaf (2,)")
    assert len(lab.graph_nodes(t)) == 3000


def test_names_that_are_not_tensors_are_ignored_and_meta_graphs_print(capsys):
    w = torch.ones(3, device="meta", requires_grad=True)
    lab.print_graph(w.neg().sum(), names={"w": w, 7: "note", "x": None})
    assert capsys.readouterr().out.splitlines()[-1].endswith("AccumulateGrad -> leaf w (3,)")

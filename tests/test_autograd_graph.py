"""The graph-walk helper: the chain from a tensor's grad_fn back to its leaves."""

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.autograd_graph import _lines


def two_layer():
    x, y = torch.randn(4, 5), torch.randn(4, 2)
    w1 = torch.randn(5, 3, requires_grad=True)
    w2 = torch.randn(3, 2, requires_grad=True)
    loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
    return loss, w1, w2


def test_two_layer_graph_from_loss_to_leaves(capsys):
    loss, w1, w2 = two_layer()
    lab.print_graph(loss, names={"w1": w1, "w2": w2})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "SumBackward0"
    assert lines[1] == "└─ PowBackward0"
    assert lines[2] == "   └─ SubBackward0"
    assert [line.strip(" │├└─") for line in lines].count("(input that needs no gradient)") == 2  # x and y
    leaves = [line for line in lines if "AccumulateGrad" in line]
    assert leaves == [
        "      │  │     └─ AccumulateGrad -> leaf w1 (5, 3)",
        "      │  └─ AccumulateGrad -> leaf w2 (3, 2)",
    ]
    # every node of the chain appears, in order from the loss down
    kinds = [line.strip(" │├└─").split(" ")[0] for line in lines]
    assert kinds[:4] == ["SumBackward0", "PowBackward0", "SubBackward0", "MmBackward0"]
    assert kinds.count("MmBackward0") == 2


def test_graph_lines_match_next_functions():
    loss, w1, w2 = two_layer()
    lines = _lines(loss)
    # walk next_functions by hand: each node's children are printed right below it
    node, depth = loss.grad_fn, 0
    while node is not None and type(node).__name__ != "AccumulateGrad":
        assert any(line.endswith(type(node).__name__) for line in lines)
        node = node.next_functions[0][0]
        depth += 1
    assert depth == 6  # Sum, Pow, Sub, Mm, Clamp, Mm; then the first input of x @ w1 is x: None
    assert "-> leaf (5, 3)" in "\n".join(lines)  # unnamed leaves still show their shape


def test_shared_node_is_printed_once():
    w = torch.ones(3, requires_grad=True)
    h = w.exp()
    lines = _lines((h * h).sum(), names={"w": w})
    assert lines == [
        "SumBackward0",
        "└─ MulBackward0",
        "   ├─ ExpBackward0",
        "   │  └─ AccumulateGrad -> leaf w (3,)",
        "   └─ ExpBackward0 (shown above)",
    ]


def test_max_depth_cuts_long_chains():
    w = torch.ones(2, requires_grad=True)
    t = w
    for _ in range(50):
        t = t.sin()
    lines = _lines(t, max_depth=3)
    assert lines == ["SinBackward0", "└─ SinBackward0", "   └─ SinBackward0", "      └─ ..."]
    assert len(lab.graph_nodes(t)) == 50


def test_custom_function_is_one_node():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.randn(3, requires_grad=True)
    assert lab.graph_nodes(Square.apply(x)) == ["SquareBackward"]
    assert lab.graph_nodes(Square.apply(x), include_leaves=True) == ["SquareBackward", "AccumulateGrad"]
    plain = 1 / (1 + torch.exp(-x))
    assert len(lab.graph_nodes(plain)) > len(lab.graph_nodes(torch.sigmoid(x))) == 1


def test_leaf_and_detached_tensors():
    w = torch.ones(2, 3, requires_grad=True)
    assert _lines(w, names={"w": w}) == ["leaf w (2, 3) (no grad_fn: nothing computed it)"]
    assert lab.graph_nodes(w) == []
    for no_graph in (torch.ones(3), (w * 2).detach()):
        with pytest.raises(ValueError, match="not part of an autograd graph"):
            lab.print_graph(no_graph)
    with torch.no_grad():
        made_without_grad = w * 2
    with pytest.raises(ValueError, match="torch.no_grad"):
        lab.graph_nodes(made_without_grad)


@pytest.mark.parametrize("value, kind", [(None, "None"), ([1.0], "list"), (np.ones(2), "ndarray"), (3.0, "float")])
def test_bad_inputs(value, kind):
    with pytest.raises(TypeError, match=f"expected a torch.Tensor, got {kind}"):
        lab.print_graph(value)
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        lab.graph_nodes(value)


def test_bad_names_and_depth():
    loss, w1, _ = two_layer()
    with pytest.raises(TypeError, match="names must be a dict"):
        _lines(loss, names=[w1])
    with pytest.raises(ValueError, match="max_depth must be a positive int"):
        _lines(loss, max_depth=0)
    # names that are not tensors are ignored, not fatal
    assert _lines(loss, names={"w1": w1, "note": "text"})[0] == "SumBackward0"

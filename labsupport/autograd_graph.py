"""Walk autograd's graph from a tensor's ``grad_fn`` through ``next_functions`` to the
leaves (``AccumulateGrad`` adds into their ``.grad``); inputs needing no gradient are None.

Example:
    >>> w = torch.ones(3, requires_grad=True)
    >>> print_graph(w.exp().sum(), names={"w": w})
    SumBackward0
    └─ ExpBackward0
       └─ AccumulateGrad -> leaf w (3,)
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

__all__ = ["print_graph", "graph_nodes"]


def _root(tensor: Any) -> Any:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {'None' if tensor is None else type(tensor).__name__}")
    if tensor.grad_fn is None and not tensor.requires_grad:
        raise ValueError("this tensor is not part of an autograd graph (no grad_fn, requires_grad=False): was "
                         "it computed without requires_grad=True, under torch.no_grad(), or after .detach()?")
    return tensor.grad_fn


def _label(node: Any, names: dict[int, str]) -> str:
    leaf = getattr(node, "variable", None)  # only AccumulateGrad nodes have one
    if not isinstance(leaf, torch.Tensor):
        return type(node).__name__
    return f"{type(node).__name__} -> leaf {names[id(leaf)] + ' ' if id(leaf) in names else ''}{tuple(leaf.shape)}"


def _lines(tensor: Any, names: Mapping[str, torch.Tensor] | None = None, max_depth: int = 25) -> list[str]:
    root = _root(tensor)
    if names is not None and not isinstance(names, Mapping):
        raise TypeError(f"names must be a dict name -> tensor, got {type(names).__name__}")
    if type(max_depth) is not int or max_depth < 1:
        raise ValueError(f"max_depth must be a positive int, got {max_depth!r}")
    ids = {id(t): str(n) for n, t in (names or {}).items() if isinstance(t, torch.Tensor)}
    if root is None:  # a leaf that requires grad: nothing above it
        return [f"leaf {ids.get(id(tensor), '')} {tuple(tensor.shape)} (no grad_fn: nothing computed it)".replace("  ", " ")]
    lines, seen = [_label(root, ids)], {root}

    def visit(node: Any, prefix: str, depth: int) -> None:
        children = [child for child, _ in node.next_functions]
        for i, child in enumerate(children):
            branch, pad = ("└─ ", "   ") if i == len(children) - 1 else ("├─ ", "│  ")
            if child is None:
                lines.append(prefix + branch + "(input that needs no gradient)")
            elif child in seen:
                lines.append(prefix + branch + _label(child, ids) + " (shown above)")
            elif depth >= max_depth:
                lines.append(prefix + branch + "...")
            else:
                seen.add(child)
                lines.append(prefix + branch + _label(child, ids))
                visit(child, prefix + pad, depth + 1)
    visit(root, "", 1)
    return lines


def print_graph(tensor: Any, names: Mapping[str, torch.Tensor] | None = None, max_depth: int = 25) -> None:
    """Print the backward nodes from ``tensor.grad_fn`` down to the leaves, as a tree. ``names``
    labels leaves (``{"w1": w1}``); a node reached twice is expanded once; ``max_depth`` cuts."""
    print("\n".join(_lines(tensor, names, max_depth)))


def graph_nodes(tensor: Any, include_leaves: bool = False) -> list[str]:
    """Names of the distinct backward nodes behind ``tensor``, depth first: the recorded operations."""
    seen, stack, names = set(), [_root(tensor)], []
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            names.append(type(node).__name__)
            stack.extend(child for child, _ in reversed(node.next_functions))
    return names if include_leaves else [n for n in names if n != "AccumulateGrad"]

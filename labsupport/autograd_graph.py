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

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["print_graph", "graph_nodes"]


def _root(tensor: Any) -> Any:
    """The backward node behind ``tensor`` (None for a leaf), or a sentence saying what to pass instead."""
    if not isinstance(tensor, torch.Tensor):
        kind = "None" if tensor is None else type(tensor).__name__
        if hasattr(tensor, "next_functions"):
            advice = ", a node of the graph: pass the tensor itself (the loss, say), not its grad_fn"
        elif isinstance(tensor, (tuple, list)):
            advice = ": pass one tensor (the loss, say), not several"
        else:
            advice = ": pass a tensor computed from tensors that require grad (the loss, say)"
        raise TypeError(f"expected a torch.Tensor, got {kind}{advice}")
    if tensor.grad_fn is None and not tensor.requires_grad:
        raise ValueError(
            "this tensor is not part of an autograd graph (no grad_fn, requires_grad=False): was "
            "it computed without requires_grad=True, under torch.no_grad(), or after .detach()?"
        )
    return tensor.grad_fn


def _label(node: Any, names: dict[int, str]) -> str:
    leaf = getattr(node, "variable", None)  # only AccumulateGrad nodes have one
    if not isinstance(leaf, torch.Tensor):
        return type(node).__name__
    return f"{type(node).__name__} -> leaf {names[id(leaf)] + ' ' if id(leaf) in names else ''}{tuple(leaf.shape)}"


def _lines(tensor: Any, names: Mapping[str, torch.Tensor] | None = None, max_depth: int = 25) -> list[str]:
    root = _root(tensor)
    if names is not None and not isinstance(names, Mapping):
        raise TypeError(f"names must be a dict name -> tensor, such as {{'w1': w1}}, got {type(names).__name__}")
    if type(max_depth) is not int or max_depth < 1:
        raise ValueError(f"max_depth must be a positive int, got {max_depth!r}")
    ids = {id(t): str(n) for n, t in (names or {}).items() if isinstance(t, torch.Tensor)}
    if root is None:  # a leaf that requires grad: nothing above it
        return [
            f"leaf {ids.get(id(tensor), '')} {tuple(tensor.shape)} (no grad_fn: nothing computed it)".replace("  ", " ")
        ]
    lines, seen = [_label(root, ids)], {root}
    # Depth first, without recursion (a long chain must not hit Python's recursion limit):
    # each entry is (node, the prefix of its line, the prefix of its children's lines, depth).
    stack = [(child, prefix, pad, 1) for child, prefix, pad in reversed(_branches(root, ""))]
    while stack:
        node, prefix, pad, depth = stack.pop()
        if node is None:
            lines.append(prefix + "(input that needs no gradient)")
        elif node in seen:
            lines.append(prefix + _label(node, ids) + " (shown above)")
        elif depth >= max_depth:
            lines.append(prefix + "...")
        else:
            seen.add(node)
            lines.append(prefix + _label(node, ids))
            for child, child_prefix, child_pad in reversed(_branches(node, pad)):
                stack.append((child, child_prefix, child_pad, depth + 1))
    return lines


def _branches(node: Any, pad: str) -> list[tuple[Any, str, str]]:
    """(child, prefix of its line, prefix of its children's lines) for each input of ``node``."""
    children = [child for child, _ in node.next_functions]
    result = []
    for i, child in enumerate(children):
        last = i == len(children) - 1
        result.append((child, pad + ("└─ " if last else "├─ "), pad + ("   " if last else "│  ")))
    return result


def print_graph(tensor: Any, names: Mapping[str, torch.Tensor] | None = None, max_depth: int = 25) -> None:
    """Print the backward nodes from ``tensor.grad_fn`` down to the leaves, as a tree. ``names``
    labels leaves (``{"w1": w1}``); a node reached twice is expanded once; ``max_depth`` cuts."""
    print("\n".join(_lines(tensor, names, max_depth)))


def graph_nodes(tensor: Any, include_leaves: bool = False) -> list[str]:
    """Names of the distinct backward nodes behind ``tensor``, depth first: the recorded operations."""
    if not isinstance(include_leaves, bool):
        raise TypeError(f"include_leaves must be True or False, got {include_leaves!r}")
    seen, stack, names = set(), [_root(tensor)], []
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            names.append(type(node).__name__)
            stack.extend(child for child, _ in reversed(node.next_functions))
    return names if include_leaves else [n for n in names if n != "AccumulateGrad"]

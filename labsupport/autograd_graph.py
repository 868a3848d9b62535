"""Walk autograd's graph: from a tensor's ``grad_fn`` through ``next_functions``
back to the leaves, printed as a tree (plain text, no extra dependency).

Every tensor computed from a tensor with ``requires_grad=True`` remembers the
backward node (``grad_fn``) of the operation that made it; each node lists, in
``next_functions``, the nodes of that operation's inputs. Leaves that need a
gradient end in an ``AccumulateGrad`` node, which adds into their ``.grad``;
inputs that need none (data such as ``x`` and ``y``) appear as ``None``.

Example:
    >>> import torch, labsupport as lab
    >>> w = torch.ones(3, requires_grad=True)
    >>> loss = (2 * w).sum()
    >>> lab.print_graph(loss, names={"w": w})
    SumBackward0
    └─ MulBackward0
       ├─ AccumulateGrad -> leaf w (3,)
       └─ (input that needs no gradient)
    >>> lab.graph_nodes(loss)
    ['SumBackward0', 'MulBackward0']
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch

__all__ = ["graph_lines", "print_graph", "graph_nodes"]

_NO_GRAD = "(input that needs no gradient)"


def _root(tensor: Any) -> Any:
    """The tensor's grad_fn, or a clear error for anything that has no graph."""
    if not isinstance(tensor, torch.Tensor):
        kind = "None" if tensor is None else type(tensor).__name__
        raise TypeError(f"expected a torch.Tensor, got {kind}")
    if tensor.grad_fn is None and not tensor.requires_grad:
        raise ValueError("this tensor is not part of an autograd graph: it has no grad_fn and "
                         "requires_grad=False. Was it computed from tensors without "
                         "requires_grad=True, under torch.no_grad(), or after .detach()?")
    return tensor.grad_fn


def _label(node: Any, names: Mapping[int, str]) -> str:
    kind = type(node).__name__
    variable = getattr(node, "variable", None)  # only AccumulateGrad nodes have one
    if isinstance(variable, torch.Tensor):
        name = names.get(id(variable), "")
        shape = tuple(variable.shape)
        return f"{kind} -> leaf {name + ' ' if name else ''}{shape}"
    return kind


def _ids(names: Mapping[str, torch.Tensor] | None) -> dict[int, str]:
    if names is None:
        return {}
    if not isinstance(names, Mapping):
        raise TypeError(f"names must be a dict name -> tensor, got {type(names).__name__}")
    return {id(t): str(n) for n, t in names.items() if isinstance(t, torch.Tensor)}


def graph_lines(tensor: torch.Tensor, names: Mapping[str, torch.Tensor] | None = None,
                max_depth: int = 25) -> list[str]:
    """The graph behind ``tensor`` as lines of a tree, root (``tensor.grad_fn``) first.

    ``names`` maps a label to a leaf tensor so its ``AccumulateGrad`` line names
    it (``{"w1": w1}``). A node reached a second time (its output was used by two
    operations) is printed once more with ``(shown above)`` and not expanded
    again; branches deeper than ``max_depth`` end with ``...``.

    Example:
        >>> w = torch.ones(2, requires_grad=True)
        >>> graph_lines(w.exp().sum())
        ['SumBackward0', '└─ ExpBackward0', '   └─ AccumulateGrad -> leaf (2,)']
    """
    root = _root(tensor)
    labels = _ids(names)
    if root is None:  # a leaf that requires grad: no graph above it
        name = labels.get(id(tensor), "")
        return [f"leaf {name + ' ' if name else ''}{tuple(tensor.shape)} (no grad_fn: nothing computed it)"]
    if not isinstance(max_depth, int) or max_depth < 1:
        raise ValueError(f"max_depth must be a positive int, got {max_depth!r}")
    lines = [_label(root, labels)]
    seen = {root}

    def visit(node: Any, prefix: str, depth: int) -> None:
        children = [child for child, _ in node.next_functions]
        for i, child in enumerate(children):
            last = i == len(children) - 1
            branch, pad = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if child is None:
                lines.append(prefix + branch + _NO_GRAD)
            elif child in seen:
                lines.append(prefix + branch + _label(child, labels) + " (shown above)")
            elif depth >= max_depth:
                lines.append(prefix + branch + "...")
            else:
                seen.add(child)
                lines.append(prefix + branch + _label(child, labels))
                visit(child, prefix + pad, depth + 1)

    visit(root, "", 1)
    return lines


def print_graph(tensor: torch.Tensor, names: Mapping[str, torch.Tensor] | None = None,
                max_depth: int = 25) -> None:
    """Print :func:`graph_lines`: the chain of backward nodes from ``tensor`` to its leaves.

    Example:
        >>> w = torch.ones(2, requires_grad=True)
        >>> print_graph(w.exp().sum(), names={"w": w})
        SumBackward0
        └─ ExpBackward0
           └─ AccumulateGrad -> leaf w (2,)
    """
    print("\n".join(graph_lines(tensor, names, max_depth)))


def _walk(root: Any) -> Iterator[Any]:
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(child for child, _ in reversed(node.next_functions))


def graph_nodes(tensor: torch.Tensor, include_leaves: bool = False) -> list[str]:
    """Type names of the distinct backward nodes behind ``tensor``, depth first.

    ``AccumulateGrad`` (one per leaf) is left out unless ``include_leaves``, so
    the length is the number of recorded operations.

    Example:
        >>> w = torch.ones(2, requires_grad=True)
        >>> graph_nodes(torch.sigmoid(w).sum())
        ['SumBackward0', 'SigmoidBackward0']
        >>> len(graph_nodes(w, include_leaves=True))
        0
    """
    root = _root(tensor)
    if root is None:
        return []
    names = [type(node).__name__ for node in _walk(root)]
    return names if include_leaves else [n for n in names if n != "AccumulateGrad"]

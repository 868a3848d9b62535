"""Write a notebook from a plain-text outline (authoring aid for contributors).

    python -m tools.nbauthor outline.py notebooks/NN_topic.ipynb

The outline is a Python file whose cells are separated by lines ``# %% [markdown]``
or ``# %%`` (the "percent" format many editors understand). Markdown cells have
each line prefixed with ``# ``. The written notebook has no outputs: run
``python -m tools.regenerate`` on it next.

Cell ids are never positional. When the notebook exists, a cell that the outline keeps
(the same source, or an edited cell in the same place among changed ones) keeps its id
and its exercise metadata (``metadata["lab"]``); a new cell gets a fresh id of the
series (``nb03-1a2b3c4d``). Mark a new exercise's cells with
``python -m tools.migrate_exercises`` next.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from . import student
from .files import write_notebook
from .migrate_exercises import new_cell_id, series_prefix

KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def parse(text: str) -> list:
    cells = []
    for block in re.split(r"^# %%", text, flags=re.MULTILINE)[1:]:
        header, _, body = block.partition("\n")
        body = body.strip("\n")
        if header.strip() == "[markdown]":
            lines = [re.sub(r"^# ?", "", line) for line in body.splitlines()]
            cells.append(new_markdown_cell("\n".join(lines)))
        else:
            cells.append(new_code_cell(body))
    return cells


def keep_ids(cells: list, old: list, name: str) -> None:
    """Give ``cells`` the ids (and ``lab`` metadata) of their counterparts in ``old``, matched by
    source (an edited cell: by place among the changed ones, of the same type); fresh ids of the
    series to the rest."""
    taken = {c.get("id", "") for c in old}
    key = [(c.cell_type, c.source) for c in cells]
    matcher = difflib.SequenceMatcher(None, [(c.cell_type, c.source) for c in old], key, autojunk=False)
    kept = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for i, j in zip(range(i1, i2), range(j1, j2)):
            if tag in ("equal", "replace") and old[i].cell_type == cells[j].cell_type:
                cells[j]["id"] = old[i]["id"]
                if student.LAB in old[i].metadata:
                    cells[j].metadata[student.LAB] = old[i].metadata[student.LAB]
                kept.add(j)
    prefix = series_prefix(name)
    for j, cell in enumerate(cells):
        if j not in kept:
            cell["id"] = new_cell_id(prefix, taken)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[1])
    nb = new_notebook(cells=parse(src.read_text()))
    nb.metadata["kernelspec"] = KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    old = nbformat.read(dst, as_version=4).cells if dst.exists() else []
    keep_ids(nb.cells, old, dst.stem)  # stable ids: diffs stay small, the grader finds the cells
    write_notebook(dst, nb)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

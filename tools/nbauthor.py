"""Write a notebook from a plain-text outline (authoring aid for contributors).

    python -m tools.nbauthor outline.py notebooks/NN_topic.ipynb

The outline is a Python file whose cells are separated by lines ``# %% [markdown]``
or ``# %%`` (the "percent" format many editors understand). Markdown cells have
each line prefixed with ``# ``. The written notebook has no outputs: run
``python -m tools.regenerate`` on it next.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[1])
    nb = new_notebook(cells=parse(src.read_text()))
    nb.metadata["kernelspec"] = KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids: diffs stay small
        cell["id"] = f"c{i:03d}"
    nbformat.write(nb, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

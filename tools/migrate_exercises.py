"""Write each exercise down as cell metadata, and give every cell an id of the series.

    python -m tools.migrate_exercises notebooks/*.ipynb [--check]

Until issue 24 an exercise was a convention: a code cell with ``### BEGIN SOLUTION`` /
``### END SOLUTION`` was its solution, the nearest ``### Exercise k: title`` heading above
gave its number, the next code cell calling ``check...(`` was its check, and a markdown cell
with markers was a written answer. This reads those conventions one last time and writes them
into the cells' ``metadata["lab"]`` (the schema: CONTRIBUTING.md, "How an exercise is
defined"), which every tool reads from then on:

- heading: ``{"exercise": "03.5", "role": "heading"}``
- solution: ``{"exercise": "03.5", "role": "solution", "points": 1}``
- check: ``{"exercise": "03.5", "role": "check"}``
- written answer: ``{"exercise": "06.2", "role": "answer", "points": 0}``, and
  ``"role": ["heading", "answer"]`` when the question sits under its heading in the same cell.

The points are what tools/grade.py gave before: 1 for an exercise with a check; for a written
answer its rubric's total (``**Rubric** (3 points)``, scored by hand), 0 where it has no rubric. Every cell also gets an id unique across the series: ``nbNN-``
and a token (its old id, else a random one); the tools keep ids from then on.

Only cells' ids and ``lab`` metadata change: sources, outputs, the other metadata and the
notebook's own are compared before and after, and nothing is written if they differ. A cell
that already has ``lab`` metadata is left alone, so a second run changes nothing, and on a
notebook with one new exercise it annotates that exercise only (what docs/instructors.md's
recipe uses). ``--check`` writes nothing and exits 1 if a notebook would change.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import secrets
import sys
from pathlib import Path

import nbformat

from . import student
from .files import write_notebook

_CHECK_CALL = re.compile(r"\bcheck\w*\s*\(")
_CELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --------------------------------------------------------------------------- ids


def series_prefix(name: str) -> str:
    """``nb03`` for ``03_autograd``: what every cell id of that notebook starts with.

    Example:
        >>> series_prefix("03_autograd"), series_prefix("sample")
        ('nb03', 'nbsample')
    """
    number = re.match(r"\d+", name)
    return f"nb{number.group(0)}" if number else "nb" + re.sub(r"[^A-Za-z0-9]", "", name)[:16]


def new_cell_id(prefix: str, taken: set[str]) -> str:
    """A fresh id ``<prefix>-<8 hex digits>`` not in ``taken`` (and added to it)."""
    while True:
        cell_id = f"{prefix}-{secrets.token_hex(4)}"
        if cell_id not in taken:
            taken.add(cell_id)
            return cell_id


def assign_ids(nb: nbformat.NotebookNode, name: str) -> int:
    """Give each cell of ``nb`` whose id does not start with ``nbNN-`` one that does: its old id
    after the prefix when that is valid, else a random token. Returns how many changed."""
    prefix = series_prefix(name)
    taken = {c.get("id", "") for c in nb.cells}
    changed = 0
    for cell in nb.cells:
        old = cell.get("id", "")
        if old.startswith(f"{prefix}-"):
            continue
        cell_id = f"{prefix}-{old}"
        if not old or not _CELL_ID.match(cell_id) or cell_id in taken:
            cell_id = new_cell_id(prefix, taken)
        taken.add(cell_id)
        cell["id"] = cell_id
        changed += 1
    return changed


# --------------------------------------------------------------------------- the old conventions


def exercise_prefix(name: str) -> str:
    """``03`` for ``03_autograd``: the part of an exercise id before the dot (as the checks'
    ``@exercise("03.5", ...)``); a name without a number stands for itself."""
    number = re.match(r"\d+", name)
    return number.group(0) if number else name


def _last_heading(text: str) -> str | None:
    """ "exercise" if the last heading of a markdown cell is ``Exercise ...``, "section" if it is
    a heading of level 1-3 that is not, None if the cell has no heading (or sub-headings only)."""
    for line in reversed(text.splitlines()):
        h = student._HEADING.match(line)
        if not h:
            continue
        if student._EXERCISE.match(h.group(2)):
            return "exercise"
        if len(h.group(1)) <= 3:
            return "section"
    return None


def _heading_above(cells: list, index: int) -> int | None:
    """The nearest cell above ``index`` whose last heading is an exercise heading, crossing only
    sub-headings (level 4+) and cells without headings; None when a section heading comes first."""
    for j in range(index - 1, -1, -1):
        if cells[j].cell_type != "markdown":
            continue
        kind = _last_heading(cells[j].source)
        if kind == "exercise":
            return j
        if kind == "section":
            return None
    return None


def _own_heading(text: str) -> bool:
    """True if an exercise heading comes before the first marker of this (markdown) cell."""
    for line in text.splitlines():
        if student._MARKER.match(line):
            return False
        h = student._HEADING.match(line)
        if h and student._EXERCISE.match(h.group(2)):
            return True
    return False


def _number(text: str, running: int) -> str:
    """The exercise's number in its heading (``### Exercise 01.3: ...`` or ``### Exercise 3: ...``: 3),
    else ``running``."""
    for line in text.splitlines():
        h = student._HEADING.match(line)
        m = student._EXERCISE.match(h.group(2)) if h else None
        if m and m.group("num"):
            return m.group("num").rsplit(".", 1)[-1]
    return str(running)


def _next_code_cell(cells: list, index: int) -> int | None:
    for j in range(index + 1, len(cells)):
        if cells[j].cell_type == "code":
            return j
    return None


_RUBRIC = re.compile(r"^\*\*Rubric\*\* \((\d+) points?\)", re.MULTILINE)


def _rubric_points(source: str) -> int:
    """A written answer's points: its rubric's total (``**Rubric** (3 points)``), 0 without a rubric."""
    found = _RUBRIC.search(source)
    return int(found.group(1)) if found else 0


def _mark(cell, ex_id: str, role, points: float | None = None) -> None:
    """Write ``{"exercise": ex_id, "role": role[, "points": points]}`` into the cell's metadata."""
    have = cell.metadata.get(student.LAB)
    if have is not None and have.get("exercise") != ex_id:
        raise ValueError(f"cell {cell.get('id')} belongs to exercise {have.get('exercise')} already, not {ex_id}")
    lab = {"exercise": ex_id, "role": role}
    if points is not None:
        lab["points"] = points
    cell.metadata[student.LAB] = lab


def annotate(nb: nbformat.NotebookNode, name: str) -> list[str]:
    """Give ``nb`` (the notebook ``name``, e.g. ``03_autograd``) its ids of the series and, for
    each cell with solution markers but no ``lab`` metadata, its exercise's metadata inferred
    from the old conventions (the module's docstring). Returns what was done, in words.

    Example:
        >>> from nbformat.v4 import new_code_cell as code, new_markdown_cell as md, new_notebook
        >>> nb = new_notebook(cells=[md("### Exercise 2: double"),
        ...     code("### BEGIN SOLUTION\\ny = 2\\n### END SOLUTION"), code("lab.check_double(y)")])
        >>> annotate(nb, "07_data")[1:]
        ['exercise 07.2: heading cell 0, solution cell 1, check cell 2']
        >>> nb.cells[1].metadata["lab"], nb.cells[1].id.startswith("nb07-")
        ({'exercise': '07.2', 'role': 'solution', 'points': 1}, True)
    """
    done = []
    renamed = assign_ids(nb, name)
    if renamed:
        done.append(f"{renamed} cell id(s) of the series")
    cells, running = nb.cells, 0
    for i, cell in enumerate(cells):
        if cell.cell_type not in ("code", "markdown") or not student.has_marker(cell.source):
            continue
        running += 1
        if student.LAB in cell.metadata:
            continue
        own = cell.cell_type == "markdown" and _own_heading(cell.source)
        heading = i if own else _heading_above(cells, i)
        ex_id = f"{exercise_prefix(name)}.{_number(cells[heading].source if heading is not None else '', running)}"
        parts = [] if heading is None or own else [f"heading cell {heading}"]
        if cell.cell_type == "code":
            _mark(cell, ex_id, "solution", 1)
            parts.append(f"solution cell {i}")
            j = _next_code_cell(cells, i)
            if j is not None and not student.has_marker(cells[j].source) and _CHECK_CALL.search(cells[j].source):
                _mark(cells[j], ex_id, "check")
                parts.append(f"check cell {j}")
        else:
            _mark(cell, ex_id, ["heading", "answer"] if own else "answer", _rubric_points(cell.source))
            parts.append(f"{'heading and ' if own else ''}answer cell {i}")
        if heading is not None and not own:
            _mark(cells[heading], ex_id, "heading")
        done.append(f"exercise {ex_id}: {', '.join(parts)}")
    return done


# --------------------------------------------------------------------------- files


def content(nb: nbformat.NotebookNode) -> str:
    """``nb`` as JSON without its cells' ids and ``lab`` metadata: what the migration must not change."""
    data = copy.deepcopy(dict(nb))
    data["cells"] = [dict(c) for c in data["cells"]]
    for cell in data["cells"]:
        cell.pop("id", None)
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k != student.LAB}
    return json.dumps(data, sort_keys=True)


def migrate(path: Path, *, write: bool = True) -> list[str]:
    """Annotate the notebook at ``path`` (see :func:`annotate`); save it as tools/regenerate.py
    does (``nbformat.write``: same indent and key order) if anything changed and ``write``."""
    nb = nbformat.read(path, as_version=4)
    before = content(nb)
    done = annotate(nb, path.stem)
    if content(nb) != before:
        raise RuntimeError(f"{path}: the migration would change more than cell ids and metadata; nothing written")
    student.exercise_parts(nb, path)  # what every tool reads must now be valid
    if done and write:
        write_notebook(path, nb)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook would change")
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks:
        try:
            done = migrate(path, write=not args.check)
        except (student.ExerciseError, ValueError, RuntimeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for line in done:
            print(f"{path}: {line}")
        status |= bool(done and args.check)
    return status


if __name__ == "__main__":
    sys.exit(main())

"""How long each section of a notebook takes a student, estimated from its cells.

    python -m tools.course_time notebooks/*.ipynb            # a table per notebook
    python -m tools.course_time --write notebooks/05_*.ipynb # put "*About N minutes*" under each heading

A section is a ``## k. Title`` heading and the cells up to the next ``## `` heading. Its time is
reading (markdown words at WORDS_PER_MINUTE, code lines at LINES_PER_MINUTE: read and run) plus a
fixed time per exercise, by the kind its cells' ``metadata["lab"]`` and its solution tell
(MINUTES), rounded to 5 minutes, at least 5. Solutions are not read: students write them.
docs/instructors.md, "Course plan", builds its sessions from these numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import nbformat

from tools import student

from .files import write_notebook

WORDS_PER_MINUTE = 150
LINES_PER_MINUTE = 10
MINUTES = {"written": 10, "predict": 4, "capstone": 45, "code": 12}
CAPSTONES = {"07.3"}

_SECTION = re.compile(r"^## (\d+)\. .*$", re.MULTILINE)
_SOLUTION = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION", re.DOTALL)
_STATED = re.compile(r"^\*About \d+ minutes.*\*$")


@dataclasses.dataclass
class Section:
    cell: int  # index of the cell with the heading
    line: int  # line of the heading in that cell
    title: str
    reading: float = 0.0  # minutes
    exercises: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (id, kind)

    @property
    def minutes(self) -> int:
        total = self.reading + sum(MINUTES[kind] for _, kind in self.exercises)
        return max(5, 5 * round(total / 5))

    @property
    def note(self) -> str:
        n = len(self.exercises)
        count = f", {n} exercise{'s' if n > 1 else ''}" if n else ""
        return f"*About {self.minutes} minutes{count}.*"


def kind(nb: nbformat.NotebookNode, part: student.Parts) -> str:
    """written, predict, capstone or code: what the exercise asks of a student."""
    if part.solution is None:
        return "written"
    if part.id in CAPSTONES:
        return "capstone"
    if re.search(r"^prediction\s*=", nb.cells[part.solution].source, re.MULTILINE):
        return "predict"
    return "code"


def reading_minutes(cell: nbformat.NotebookNode) -> float:
    text = _SOLUTION.sub("", cell.source)
    if cell.cell_type == "markdown":
        text = "\n".join(line for line in text.splitlines() if not _STATED.match(line))
        return len(text.split()) / WORDS_PER_MINUTE
    return len([line for line in text.splitlines() if line.strip()]) / LINES_PER_MINUTE


def sections(nb: nbformat.NotebookNode, path: str | Path = "<notebook>") -> list[Section]:
    """The notebook's numbered sections with their reading time and exercises."""
    graded = {part.graded: part for part in student.exercise_parts(nb, path)}
    found: list[Section] = []
    current = None
    for i, cell in enumerate(nb.cells):
        heading = _SECTION.search(cell.source) if cell.cell_type == "markdown" else None
        if cell.cell_type == "markdown" and cell.source.startswith("## ") and heading is None:
            current = None  # the summary
        if heading is not None:
            line = cell.source[: heading.start()].count("\n")
            current = Section(i, line, heading.group(0)[3:])
            found.append(current)
        if current is None:
            continue
        current.reading += reading_minutes(cell)
        if i in graded:
            current.exercises.append((graded[i].id, kind(nb, graded[i])))
    return found


def stated(nb: nbformat.NotebookNode, section: Section) -> str | None:
    """The "*About N minutes...*" line under a section's heading, or None."""
    lines = nb.cells[section.cell].source.split("\n")
    below = lines[section.line + 1] if len(lines) > section.line + 1 else ""
    return below if _STATED.match(below) else None


def write(nb: nbformat.NotebookNode, found: list[Section]) -> None:
    """Put (or refresh) each section's note on the line under its heading."""
    for section in found:
        cell = nb.cells[section.cell]
        lines = cell.source.split("\n")
        if stated(nb, section) is None:
            lines.insert(section.line + 1, section.note)
        else:
            lines[section.line + 1] = section.note
        cell.source = "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help="write each section's estimate under its heading")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        found = sections(nb, path)
        print(f"{path.stem}: {sum(s.minutes for s in found)} minutes")
        for section in found:
            ids = ", ".join(f"{ex} {k}" for ex, k in section.exercises)
            print(f"  {section.minutes:4d}  {section.title[:60]}  {ids}")
        if args.write:
            write(nb, found)
            write_notebook(path, nb)


if __name__ == "__main__":
    main()

"""No exercise's answer is readable anywhere a student gets it: another notebook, a
labsupport docstring example (help() shows it), or the student edition itself."""

import json
from pathlib import Path

import pytest

from tools import student

ROOT = Path(__file__).resolve().parent.parent

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def solution_lines(cells):
    """{(cell index): set of solution lines} (lines of >= 16 characters that are not comments)."""
    found = {}
    for i, cell in enumerate(cells):
        lines = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        text = lines.splitlines()
        blocks = student.solution_blocks(lines, cell=i)
        answer = {text[k].strip() for b, e in blocks for k in range(b + 1, e)}
        answer = {t for t in answer if len(t) >= 16 and not t.startswith("#")}
        if answer:
            found[i] = answer
    return found


def visible_lines(cells):
    """Every stripped line outside the solution regions."""
    seen = set()
    for i, cell in enumerate(cells):
        text = "".join(cell["source"]).splitlines()
        inside = {k for b, e in student.solution_blocks("\n".join(text), cell=i) for k in range(b, e + 1)}
        seen |= {t.strip() for k, t in enumerate(text) if k not in inside}
    return seen


def docstring_example_lines():
    lines = set()
    for path in (ROOT / "labsupport").rglob("*.py"):
        for line in path.read_text().splitlines():
            if line.strip().startswith((">>>", "...")):
                lines.add(line.strip()[3:].strip())
    return lines


PLACES = {p.name: visible_lines(json.loads(p.read_text())["cells"]) for p in NOTEBOOKS}
PLACES["labsupport docstrings"] = docstring_example_lines()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_solution_is_readable_elsewhere(path):
    problems = []
    for cell, answer in solution_lines(json.loads(path.read_text())["cells"]).items():
        for place, lines in PLACES.items():
            hit = answer & lines
            if len(hit) >= 2 and len(hit) >= 0.5 * len(answer):
                problems.append(
                    f"{len(hit)} of {len(answer)} solution lines of cell {cell} are readable in "
                    f"{place}: {sorted(hit)[:2]}"
                )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_holds_no_solution_line_and_no_output(path):
    import nbformat

    source = json.loads(path.read_text())["cells"]
    edition = student.make_edition(nbformat.read(path, as_version=4), path).notebook
    lines = {line.strip() for c in edition.cells for line in c.source.splitlines()}
    for cell, answer in solution_lines(source).items():
        hit = answer & lines
        assert not (len(hit) >= 2 and len(hit) >= 0.5 * len(answer)), (
            f"cell {cell}: {len(hit)} of {len(answer)} solution lines are in the student edition: {sorted(hit)[:3]}"
        )
    for c in edition.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None
            assert not [t for t in c.metadata.get("tags", []) if t.startswith("nbval-")]
        assert "NBVAL_" not in c.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_line_of_the_student_edition_reads_as_a_marker(path):
    # marker text outside a solution or answer cell stops the build (tools/student.py), so what
    # is published holds no marker, exact or near (### SOLUTION BEGIN, a zero-width space, ...)
    import nbformat

    edition = student.make_edition(nbformat.read(path, as_version=4), path).notebook
    found = [
        (i, line)
        for i, c in enumerate(edition.cells)
        for line in c.source.splitlines()
        if student.looks_like_marker(line)
    ]
    assert not found, f"marker text in the student edition: {found[:3]}"

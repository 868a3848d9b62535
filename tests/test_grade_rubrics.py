"""Written questions: rubrics parsed from the source notebooks, and the scoring sheet per question.

No kernel runs here: the sheets are written from a gradebook and results made by hand.
"""

import csv
import json
from pathlib import Path

import nbformat
import pytest
from test_grade import tiny_source

from tools import grade

ROOT = Path(__file__).resolve().parent.parent

RUBRIC = """\
### BEGIN SOLUTION
Because the reference says so.

**Rubric** (3 points)
- 1 point: names the reference
- 2 points: says why it holds
### END SOLUTION"""


def _written_cells(nb):
    for i, cell in enumerate(nb.cells):
        lab = cell.get("metadata", {}).get("lab", {})
        roles = lab.get("role") if isinstance(lab.get("role"), list) else [lab.get("role")]
        if cell.cell_type == "markdown" and "answer" in roles:
            yield i, cell, lab


def _sources_with_rubric(tmp_path):
    nb = tiny_source()
    i, cell, lab = next(_written_cells(nb))
    cell.source, lab["points"] = RUBRIC, 3
    nbformat.write(nb, tmp_path / "99_tiny.ipynb")
    return {"99_tiny": grade.load_source(tmp_path / "99_tiny.ipynb")}


def test_a_rubric_is_parsed_from_the_solution_region():
    total, lines = grade.parse_rubric("Why?\n" + RUBRIC)
    assert total == 3 and lines == [(1.0, "names the reference"), (2.0, "says why it holds")]
    assert grade.parse_rubric("**Rubric** (3 points)\n- 1 point: outside the region") == (None, [])
    assert grade.parse_rubric("### BEGIN SOLUTION\n- 1 point: before the rubric line\n### END SOLUTION") == (None, [])


def test_the_sheet_lists_the_rubric_and_its_scores_reach_the_gradebook(tmp_path):
    sources = _sources_with_rubric(tmp_path)
    w = sources["99_tiny"].written[0]
    assert (w.points, w.rubric_total, len(w.rubric)) == (3, 3, 2)
    out = tmp_path / "out"
    out.mkdir()
    header = ["student", "notebook", "file", "submitted", "99.1", "99.2", "99.3", "score", "max_score", "status"]
    with open(out / grade.AUTO, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for who in ("ana", "ben"):
            writer.writerow([who, "99_tiny", "hw.ipynb", "", "1", "1", "1", "3", "3", "ok"])
    lines = [
        {"student": who, "notebook": "99_tiny", "exercise": "99.4", "status": "written (not scored)", "answer": text}
        for who, text in (("ana", "Because the reference says it. <b>"), ("ben", ""))
    ]
    (out / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    grade.finish(out, sources)
    sheet = out / "written" / "99.4.csv"
    with open(sheet, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = ["R1 (1): names the reference", "R2 (2): says why it holds"]
    assert list(rows[0]) == ["student", *columns, "points", "comment", "answer"]
    assert [r["student"] for r in rows] == ["ana", "ben"]
    page = (out / "written" / "99.4.html").read_text()
    assert "says why it holds" in page and "&lt;b&gt;" in page and "<b>" not in page.split("</h1>")[1]
    rows[0].update({columns[0]: "1", columns[1]: "1", "comment": "half of the why"})
    rows[1].update({"points": "0"})
    with open(sheet, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = {r["student"]: r for r in grade.finish(out, sources)}
    assert table["ana"]["99.4"] == "2" and table["ana"]["score"] == "5" and table["ana"]["max_score"] == "6"
    assert table["ben"]["99.4"] == "0" and table["ben"]["max_score"] == "6"
    with open(sheet, newline="") as f:
        assert list(csv.DictReader(f))[0]["comment"] == "half of the why"  # kept when written again
    with open(out / "manual.csv", "a", newline="") as f:  # manual.csv still wins over the sheet
        csv.writer(f).writerow(["ana", "99.4", "3", "regraded", "", ""])
    table = {r["student"]: r for r in grade.finish(out, sources)}
    assert table["ana"]["99.4"] == "3" and table["ana"]["max_score"] == "6"


def _answer_cells():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell, lab in _written_cells(nb):
            yield f"{path.stem} cell {i} ({lab.get('exercise')})", cell, lab


@pytest.mark.parametrize("where, cell, lab", list(_answer_cells()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_answer_cell_has_a_rubric_worth_its_points(where, cell, lab):
    total, lines = grade.parse_rubric(cell.source)
    assert total is not None and lines, f"{where}: no '**Rubric** (N points)' line with '- N point(s): ...' lines"
    assert sum(p for p, _ in lines) == total == float(lab.get("points") or 0) > 0, (where, total, lines, lab)
    assert "not scored" not in cell.source.split("### BEGIN SOLUTION")[0], where

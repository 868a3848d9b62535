"""An exercise is data in the notebook (issue 24): every exercise of the series is complete
in its cells' ``metadata["lab"]``, its id is the one its check declares, cell ids are unique
across the series, and tools/migrate_exercises.py wrote exactly that, changing nothing else."""

import json
import re
from pathlib import Path

import nbformat
import pytest

import labsupport
from tools import migrate_exercises, nbauthor, student

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
_CHECK = re.compile(r"\blab\.(check_\w+)\s*\(")


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _heading_problem(cells: list, part: student.Parts) -> str | None:
    """What is wrong with an exercise's heading cell, or None."""
    if part.heading is None:
        return "no heading cell (role 'heading': the '### Exercise NN.k: title' cell)"
    if part.heading > part.graded:
        return f"its heading (cell {part.heading}) comes after its {'solution' if part.solution else 'answer'}"
    # the id itself, as the checks' messages, lab.hint and the gradebook name the exercise
    if not re.search(rf"^### Exercise {re.escape(part.id)}: \S", cells[part.heading].source, re.MULTILINE):
        return f"its heading cell {part.heading} has no '### Exercise {part.id}: title' line"
    return None


def _check_problem(cells: list, part: student.Parts) -> str | None:
    """What is wrong with an exercise's check cell, or None."""
    if part.solution is None:
        return None if part.check is None else "a written answer has no check cell"
    if part.check is None:
        return "no check cell (role 'check')"
    following = next(j for j in range(part.solution + 1, len(cells)) if cells[j].cell_type == "code")
    if part.check != following:
        return f"its check is cell {part.check}, not the next code cell ({following})"
    called = _CHECK.findall(cells[part.check].source)
    if len(called) != 1:
        return f"its check cell calls {called or 'no lab.check_...'}: one check"
    declared = getattr(getattr(labsupport, called[0], None), "exercise_id", None)
    if declared != part.id:
        return f"its check cell calls lab.{called[0]}, which is @exercise({declared!r}), not {part.id!r}"
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_is_complete(path):
    nb = read(path)
    parts = student.exercise_parts(nb, path)
    assert parts, f"{path.name} has no exercise"
    problems = []
    for part in parts:
        if not part.id.startswith(migrate_exercises.exercise_prefix(path.stem) + "."):
            problems.append(f"exercise {part.id}: not an id of notebook {path.stem[:2]}")
        if part.points is None or part.points < 0 or (part.solution is not None and part.points == 0):
            problems.append(f"exercise {part.id}: points {part.points!r}")
        for problem in (_heading_problem(nb.cells, part), _check_problem(nb.cells, part)):
            if problem:
                problems.append(f"exercise {part.id}: {problem}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def declared_ids() -> set[str]:
    """The exercise ids of labsupport's public checks (tests declare made-up exercises of their own)."""
    ids = set()
    for name in dir(labsupport):
        exercise_id = getattr(getattr(labsupport, name), "exercise_id", None)
        if name.startswith("check_") and exercise_id:
            ids.add(exercise_id)
    return ids


def test_exercise_ids_are_the_ids_the_checks_declare():
    declared = declared_ids()
    checked, written = {}, {}
    for path in NOTEBOOKS:
        for part in student.exercise_parts(read(path), path):
            (checked if part.solution is not None else written)[part.id] = path.name
    assert sorted(checked) == sorted(declared), "an exercise with a check, or a check without its exercise"
    assert not set(written) & declared, "a written answer has no check"
    # issue 26, item 4: written answers in 00 and 03-07 (09 and 10 add their own)
    assert {"00.5", "03.7", "04.3", "05.4", "06.2", "07.4"} <= set(written)


def test_a_check_names_its_exercise_as_the_heading_does():
    """A student reads "### Exercise 03.5: why did the network not learn?" above the exercise; its check's
    failure block, lab.require and lab.hint say "Exercise 03.5: <title>": the same id and the same title
    (the heading's, without its Markdown's backticks and dollar signs)."""
    from labsupport.checks import feedback

    differ = {}
    for path in NOTEBOOKS:
        nb = read(path)
        for part in student.exercise_parts(nb, path):
            heading = student.heading_title(nb.cells[part.heading].source)
            shown = re.sub(r"[`$]", "", heading)
            if part.solution is not None and feedback._TITLES.get(part.id) != shown:
                differ[part.id] = (shown, feedback._TITLES.get(part.id))
    assert differ == {}, differ


def test_cell_ids_are_unique_across_the_series():
    seen: dict[str, str] = {}
    for path in NOTEBOOKS:
        prefix = migrate_exercises.series_prefix(path.stem)
        for cell in read(path).cells:
            assert cell.id.startswith(f"{prefix}-"), f"{path.name}: cell id {cell.id!r} is not {prefix}-..."
            assert cell.id not in seen, f"cell id {cell.id} is in {seen.get(cell.id)} and {path.name}"
            seen[cell.id] = path.name


def _before_the_migration(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """``nb`` as it was before tools/migrate_exercises.py: no ``lab`` metadata, the old ids."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    prefix = migrate_exercises.series_prefix(name) + "-"
    for cell in nb.cells:
        cell.metadata.pop(student.LAB, None)
        cell["id"] = cell.id.removeprefix(prefix)
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_migration_wrote_what_it_reads_from_the_old_conventions_and_nothing_else(path, tmp_path):
    old = tmp_path / path.name
    nbformat.write(_before_the_migration(read(path), path.stem), old)
    done = migrate_exercises.migrate(old)
    assert done and old.read_bytes() == path.read_bytes()  # the committed notebook, byte for byte
    assert migrate_exercises.migrate(old) == []  # and a second run has nothing left to do
    assert migrate_exercises.content(read(old)) == migrate_exercises.content(_before_the_migration(read(path), "x"))


def test_the_migration_refuses_to_change_anything_but_metadata_and_ids(tmp_path, monkeypatch):
    path = tmp_path / NOTEBOOKS[0].name
    path.write_bytes(NOTEBOOKS[0].read_bytes())

    def rewrite(nb, name):
        nb.cells[0].source += "\nchanged"
        return ["changed a source"]

    monkeypatch.setattr(migrate_exercises, "annotate", rewrite)
    with pytest.raises(RuntimeError, match="more than cell ids and metadata"):
        migrate_exercises.migrate(path)
    assert path.read_bytes() == NOTEBOOKS[0].read_bytes()


OUTLINE = """\
# %% [markdown]
# ### Exercise 1: double

# %%
def f(x):
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION

# %%
lab.check_double(f)
"""


def test_nbauthor_keeps_ids_and_exercise_metadata_of_existing_cells(tmp_path):
    outline, dst = tmp_path / "outline.py", tmp_path / "42_new.ipynb"
    outline.write_text(OUTLINE)
    assert nbauthor.main([str(outline), str(dst)]) == 0
    assert migrate_exercises.migrate(dst) == ["exercise 42.1: heading cell 0, solution cell 1, check cell 2"]
    first = read(dst)
    assert all(c.id.startswith("nb42-") for c in first.cells)
    outline.write_text("# %% [markdown]\n# # 42 · New\n\n" + OUTLINE.replace("2 * x", "x + x"))  # a cell above, an edit
    assert nbauthor.main([str(outline), str(dst)]) == 0
    second = read(dst)
    assert [c.id for c in second.cells[1:]] == [c.id for c in first.cells]
    assert second.cells[0].id.startswith("nb42-") and second.cells[0].id not in {c.id for c in first.cells}
    assert [c.metadata.get("lab") for c in second.cells[1:]] == [c.metadata.get("lab") for c in first.cells]
    assert "x + x" in second.cells[2].source and migrate_exercises.migrate(dst) == []

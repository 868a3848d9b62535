"""The student edition generator (tools/student.py, `make student`, `make lab`'s preparation).

Kernel-free: the round trip that executes each notebook is in test_student_roundtrip.py.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import migrate_exercises, student

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

STAMP = ".venv/.installed"  # `make -o` this: the tests must never trigger an install


def nb_of(*cells, annotate=True):
    """A notebook of ``cells``; ``annotate``: its exercises marked as tools/migrate_exercises.py would."""
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    for i, c in enumerate(nb.cells):
        c["id"] = f"c{i:03d}"
    if annotate:
        migrate_exercises.annotate(nb, "99_sample")
    return nb


def lab(cell, exercise="99.1", role="solution", points=1):
    """``cell`` with its exercise metadata (points on a solution or answer cell only)."""
    cell.metadata["lab"] = {"exercise": exercise, "role": role}
    if role in ("solution", "answer"):
        cell.metadata["lab"]["points"] = points
    return cell


def ran(cell, text="out\n", count=1):
    cell.outputs = [new_output("stream", name="stdout", text=text)]
    cell.execution_count = count
    return cell


EXERCISE = 'def f(x):\n    """Double x."""\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION'


def sample():
    return nb_of(
        new_markdown_cell("# 99 · Sample"),
        ran(new_code_cell("import labsupport as lab"), "setup\n", 1),
        new_markdown_cell("### Exercise 4: double it"),
        ran(new_code_cell(EXERCISE), "", 2),
        ran(new_code_cell("lab.check_double(f)"), "PASS  double\n", 3),
        ran(new_code_cell("print(f(2))"), "4\n", 4),
        new_markdown_cell(
            "### Exercise 5: why\nWhy?\n### BEGIN SOLUTION\nBecause 2 * 2 = 4.\n### END SOLUTION\nThe end."
        ),
    )


# --------------------------------------------------------------------------- stubs


def test_function_stub_keeps_scaffold_and_indentation():
    ed = student.make_edition(sample(), "99_sample.ipynb")
    src = ed.notebook.cells[3].source
    assert src == (
        'def f(x):\n    """Double x."""\n    # YOUR CODE HERE\n    raise NotImplementedError("Exercise 99.4: double it")'
    )
    ns = {}
    exec(src, ns)
    with pytest.raises(NotImplementedError, match="^Exercise 99.4: double it$"):
        ns["f"](1)
    assert [(e.cell, e.label, e.check_cell, e.blocks) for e in ed.exercises] == [(3, "Exercise 99.4: double it", 4, 1)]
    assert [(e.id, e.points, e.heading_cell) for e in ed.exercises] == [("99.4", 1, 2)]


def test_every_output_and_nbval_tag_is_cleared():
    nb = sample()
    nb.cells[1].metadata["tags"] = ["nbval-ignore-output", "keep-me"]
    ed = student.make_edition(nb, "x.ipynb").notebook
    for cell in ed.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert ed.cells[1].metadata["tags"] == ["keep-me"]
    assert nb.cells[1].outputs  # the source is not modified


def test_markdown_solution_becomes_answer_placeholder():
    ed = student.make_edition(sample(), "x.ipynb")
    assert ed.notebook.cells[6].source == f"### Exercise 5: why\nWhy?\n{student.ANSWER_PLACEHOLDER}\nThe end."
    assert ed.written_answers == [6]
    assert [(a.id, a.label, a.points, a.heading_cell) for a in ed.answers] == [("99.5", "Exercise 99.5: why", 0, 6)]


def test_metadata_valid_and_marked():
    nb = student.make_edition(sample(), "notebooks/99_sample.ipynb").notebook
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["labsupport"] == {"edition": "student", "source": "notebooks/99_sample.ipynb"}
    assert [c["id"] for c in nb.cells] == [f"nb99-c{i:03d}" for i in range(7)]
    roles = [c.metadata.get("lab") for c in nb.cells]  # the edition carries the metadata (the grader, the site)
    assert roles == [
        None,
        None,
        {"exercise": "99.4", "role": "heading"},
        {"exercise": "99.4", "role": "solution", "points": 1},
        {"exercise": "99.4", "role": "check"},
        None,
        {"exercise": "99.5", "role": ["heading", "answer"], "points": 0},
    ]


def test_source_notebook_is_not_modified():
    nb = sample()
    before = nbformat.writes(nb)
    student.make_edition(nb, "x.ipynb")
    assert nbformat.writes(nb) == before


@pytest.mark.parametrize(
    "headings, expected",
    [
        (["### Exercise 2: the forward pass"], "Exercise 99.2: the forward pass"),
        (["### Exercise: write the backward pass"], "Exercise 99.1: write the backward pass"),  # running number
        (["### Exercise 3"], "Exercise 99.3"),
        (["### Exercise 5 — dashes"], "Exercise 99.5: dashes"),
        (["### Exercise 1: old", "## 5. A new section"], "Exercise 99.1"),  # a section heading stops the search
        (["### Exercise 7: kept", "#### Hint"], "Exercise 99.7: kept"),  # a sub-heading does not
        ([], "Exercise 99.1"),
    ],
)
def test_labels_from_the_nearest_heading(headings, expected):
    cells = [new_markdown_cell(h + "\n\nSome text.") for h in headings]
    ed = student.make_edition(nb_of(*cells, new_code_cell(EXERCISE), new_code_cell("lab.check_double(f)")))
    assert [e.label for e in ed.exercises] == [expected]


def test_running_number_counts_exercise_cells():
    ed = student.make_edition(
        nb_of(
            new_markdown_cell("### Exercise: first"),
            new_code_cell(EXERCISE),
            new_code_cell("lab.check_a(f)"),
            new_markdown_cell("### Exercise: second"),
            new_code_cell(EXERCISE),
            new_code_cell("lab.check_b(f)"),
        )
    )
    assert [e.label for e in ed.exercises] == ["Exercise 99.1: first", "Exercise 99.2: second"]


def test_label_with_quotes_is_a_valid_python_string():
    ed = student.make_edition(
        nb_of(
            new_markdown_cell('### Exercise 1: the "L2" loss \\ `sum`'),
            new_code_cell(EXERCISE),
            new_code_cell("lab.check(f)"),
        )
    )
    ns = {}
    exec(ed.notebook.cells[1].source, ns)
    with pytest.raises(NotImplementedError) as info:
        ns["f"](0)
    assert str(info.value) == 'Exercise 99.1: the "L2" loss \\ `sum`'


def test_top_level_block_sets_the_names_its_check_reads_to_none():
    cell = "w = torch.zeros(3)\n### BEGIN SOLUTION\nmodel = make()\nhelper, loss = 1, 2\n### END SOLUTION"
    ed = student.make_edition(
        nb_of(
            new_markdown_cell("### Exercise 2: model"),
            new_code_cell(cell),
            new_code_cell("lab.check_model(model, loss)"),
        )
    )
    assert ed.notebook.cells[1].source == (
        "w = torch.zeros(3)\n# YOUR CODE HERE\nmodel = None\nloss = None\n"
        'raise NotImplementedError("Exercise 99.2: model")'
    )
    assert "helper" not in ed.notebook.cells[1].source  # not read by the check: not revealed


def test_two_blocks_in_one_cell_and_no_check_cell():
    cell = (
        "def a():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n\n"
        "def b():\n    ### BEGIN SOLUTION\n    return 2\n    ### END SOLUTION"
    )
    ed = student.make_edition(nb_of(new_code_cell(cell), new_code_cell("print(a())")))
    ex = ed.exercises[0]
    assert ex.blocks == 2 and ex.check_cell is None and ed.checks == 0
    assert ed.notebook.cells[0].source.count('raise NotImplementedError("Exercise 99.1")') == 2


# --------------------------------------------------------------------------- marker errors


# The four spellings that used to publish a solution silently, and their kin.
SPELLINGS = {
    "word order": "### SOLUTION BEGIN",
    "start": "### START SOLUTION",
    "zero-width space": "### BEGIN\u200b SOLUTION",
    "full-width letters": "### \uff22\uff25\uff27\uff29\uff2e SOLUTION",
}


@pytest.mark.parametrize(
    "source, cell_type, line, problem",
    [
        ("x = 1\n### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "code", 3, "nested"),
        ("x = 1\n### END SOLUTION", "code", 2, "without a '### BEGIN SOLUTION'"),
        ("def f():\n    ### BEGIN SOLUTION\n    return 1", "code", 2, "never closed"),
        ("Answer:\n### BEGIN SOLUTION\nyes", "markdown", 2, "never closed"),
        # Almost-markers would silently publish the solution: each is an error naming the cell.
        ("x = 1\n### begin solution\ny = 2\n### END SOLUTION", "code", 2, "is not a solution marker"),
        ("x = 1\n### BEGIN SOLUTION:\ny = 2\n### END SOLUTION", "code", 2, "is not a solution marker"),
        ("x = 1\n### BEGIN SOLUTION ###\ny = 2\n### END SOLUTION", "code", 2, "is not a solution marker"),
        ("x = 1\n### BEGIN_SOLUTION\ny = 2\n### END_SOLUTION", "code", 2, "is not a solution marker"),
        ("x = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION", "code", 2, "is not a solution marker"),
        ("Answer:\n### Begin Solution\nyes\n### END SOLUTION", "markdown", 2, "is not a solution marker"),
        *[(f"x = 1\n{m}\ny = 2\n### END SOLUTION", "code", 2, "is not a solution marker") for m in SPELLINGS.values()],
        *[
            (f"Answer:\n### BEGIN SOLUTION\nyes\n{m}", "markdown", 4, "is not a solution marker")
            for m in SPELLINGS.values()
        ],
    ],
)
def test_bad_markers_in_a_solution_cell_name_file_cell_and_line(source, cell_type, line, problem):
    make = new_code_cell if cell_type == "code" else new_markdown_cell
    cell = lab(make(source), role="solution" if cell_type == "code" else "answer")
    nb = nb_of(new_markdown_cell("# t"), new_code_cell("ok = 1"), cell, annotate=False)
    with pytest.raises(student.MarkerError) as info:
        student.make_edition(nb, "notebooks/42_bad.ipynb")
    assert str(info.value).startswith(f"notebooks/42_bad.ipynb: cell 2, line {line}: ")
    assert problem in str(info.value)
    assert (info.value.cell, info.value.line) == (2, line)


MARKER_TEXT = [
    *SPELLINGS.values(),
    "### BEGIN SOLUTION",  # exact, but the metadata does not make the cell a solution cell
    "### END SOLUTION",
    "### begin solution",
    "### BEGIN_SOLUTION",
    "# END SOLUTION",
    "### SOLUTION END",
    "### STOP SOLUTION",
    "**End of solution**",
    "    ### start\u200bsolution",
    "### \uff25\uff2e\uff24 \uff33\uff2f\uff2c\uff35\uff34\uff29\uff2f\uff2e",  # ＥＮＤ ＳＯＬＵＴＩＯＮ
]


@pytest.mark.parametrize("text", MARKER_TEXT, ids=ascii)
@pytest.mark.parametrize("where", ["code", "markdown", "check"])
def test_marker_text_outside_a_solution_cell_stops_the_build(text, where, tmp_path, capsys):
    cells = (
        new_markdown_cell("### Exercise 1: double"),
        new_code_cell(EXERCISE),
        new_code_cell("lab.check_double(f)"),
        new_code_cell("y = 1"),
        new_markdown_cell("Notes."),
    )
    nb = nb_of(*cells)  # the exercise's cells marked; then the text lands in one of the others
    at = {"code": 3, "markdown": 4, "check": 2}[where]
    nb.cells[at].source += f"\n{text}\nz = 2"
    src, out = tmp_path / "notebooks", tmp_path / "student"
    src.mkdir()
    nbformat.write(nb, src / "42_bad.ipynb")
    with pytest.raises(student.MarkerError) as info:
        student.make_edition(nbformat.read(src / "42_bad.ipynb", as_version=4), src / "42_bad.ipynb")
    assert (info.value.cell, info.value.line) == (at, 2)
    assert "reads as a solution marker" in str(info.value)
    assert student.main(["build", "--src", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"42_bad.ipynb: cell {at}, line 2: " in err and "reads as a solution marker" in err
    assert not (out / "42_bad.ipynb").exists()


@pytest.mark.parametrize(
    "line",
    [
        "# the solution ends here when n is small",
        "# begin with the solution of exercise 2",
        "end_solution = begin_solution()",
        "print('start solution')",
        "A solution that starts small is fine.",
        "### Exercise 3: the end",
    ],
)
def test_ordinary_lines_about_solutions_are_not_markers(line):
    assert not student.looks_like_marker(line)
    nb = nb_of(new_code_cell(f"x = 1\n{line}"))
    student.make_edition(nb, "x.ipynb")


@pytest.mark.parametrize("cell_type", ["code", "markdown"])
def test_a_solution_cell_without_a_marker_pair_is_an_error(cell_type):
    make = new_code_cell if cell_type == "code" else new_markdown_cell
    cell = lab(make("x = 1"), role="solution" if cell_type == "code" else "answer")
    nb = nb_of(new_markdown_cell("# t"), cell, annotate=False)
    with pytest.raises(student.ExerciseError, match=r"^x\.ipynb: cell 1: .* no '### BEGIN SOLUTION' / '### END"):
        student.make_edition(nb, "x.ipynb")


def test_a_solution_region_is_what_the_metadata_says():
    # a marked cell is a solution because its metadata says so: not the heading above, not its place
    nb = nb_of(
        new_markdown_cell("### Exercise 1: double"),
        new_code_cell("print('setup')"),
        lab(new_code_cell(EXERCISE), "99.7"),
        lab(new_markdown_cell("### Exercise 7: ours"), "99.7", "heading"),
        lab(new_code_cell("lab.check_double(f)"), "99.7", "check"),
        annotate=False,
    )
    ed = student.make_edition(nb, "x.ipynb")
    assert [(e.id, e.cell, e.label, e.check_cell, e.heading_cell) for e in ed.exercises] == [
        ("99.7", 2, "Exercise 99.7: ours", 4, 3)
    ]


@pytest.mark.parametrize(
    "metadata, problem",
    [
        ({"exercise": "99.1", "role": "solutions", "points": 1}, "role must be one of"),
        ({"exercise": "99.1", "role": [["solution"]], "points": 1}, "role must be one of"),  # was a TypeError
        ({"exercise": "99.1", "role": "solution"}, "needs its exercise's points"),
        ({"exercise": "99.1", "role": "solution", "points": True}, "needs its exercise's points"),
        ({"exercise": "99.1", "role": "answer", "points": 0}, "belongs on a markdown cell"),
        ({"exercise": "Exercise 1", "role": "solution", "points": 1}, "needs the exercise's id"),
        ({"exercise": "99.1", "role": "solution", "points": 1, "point": 2}, "unknown keys"),
        ("solution", "must be an object"),
    ],
)
def test_malformed_exercise_metadata_is_an_error(metadata, problem):
    cell = new_code_cell(EXERCISE)
    cell.metadata["lab"] = metadata
    with pytest.raises(student.ExerciseError, match=problem):
        student.make_edition(nb_of(new_markdown_cell("# t"), cell, annotate=False), "x.ipynb")


def test_an_exercise_needs_one_solution_and_its_check_after_it():
    one, two = lab(new_code_cell(EXERCISE)), lab(new_code_cell(EXERCISE))
    with pytest.raises(student.ExerciseError, match="has a solution cell already"):
        student.make_edition(nb_of(one, two, annotate=False), "x.ipynb")
    check = lab(new_code_cell("lab.check_double(f)"), role="check")
    with pytest.raises(student.ExerciseError, match="comes before its solution cell"):
        student.make_edition(nb_of(check, lab(new_code_cell(EXERCISE)), annotate=False), "x.ipynb")
    heading = lab(new_markdown_cell("### Exercise 1: d"), role="heading")
    with pytest.raises(student.ExerciseError, match="needs exactly one solution"):
        student.make_edition(nb_of(heading, annotate=False), "x.ipynb")


def test_build_stops_on_bad_markers_before_writing_anything(tmp_path, capsys):
    src, out = tmp_path / "notebooks", tmp_path / "student"
    src.mkdir()
    nbformat.write(sample(), src / "01_good.ipynb")
    nbformat.write(nb_of(new_code_cell("### END SOLUTION")), src / "02_bad.ipynb")
    for command in ("build", "prepare"):
        assert student.main([command, "--src", str(src), "--out", str(out)]) == 2
        assert "02_bad.ipynb: cell 0, line 1: '### END SOLUTION' without" in capsys.readouterr().err
        assert not (out / "01_good.ipynb").exists()


# --------------------------------------------------------------------------- build / prepare


@pytest.fixture
def tree(tmp_path):
    src, out = tmp_path / "notebooks", tmp_path / "student"
    src.mkdir()
    nbformat.write(sample(), src / "01_sample.ipynb")
    (src / "README.md").write_text("map\n")
    (src / ".ipynb_checkpoints").mkdir()
    (src / ".ipynb_checkpoints" / "01_sample-checkpoint.ipynb").write_text("{}")
    return src, out


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def edit(path, text="my answer"):
    nb = nbformat.read(path, as_version=4)
    nb.cells[3].source = nb.cells[3].source.replace("# YOUR CODE HERE", f"# {text}")
    nbformat.write(nb, path)
    return path.read_bytes()


def test_build_is_deterministic_and_copies_other_files(tree):
    src, out = tree
    assert student.build(src, out, log=lambda *a: None) == 0
    first = snapshot(out)
    assert sorted(first) == [".generated.json", "01_sample.ipynb", "README.md"]  # no hidden source files
    time.sleep(0.01)
    assert student.build(src, out, log=lambda *a: None) == 0
    assert snapshot(out) == first
    assert first["01_sample.ipynb"] == student.generate(src / "01_sample.ipynb")
    manifest = json.loads(first[".generated.json"])
    assert set(manifest["files"]) == {"01_sample.ipynb", "README.md"}


def test_build_refuses_to_overwrite_an_edited_copy(tree):
    src, out = tree
    student.build(src, out, log=lambda *a: None)
    mine = edit(out / "01_sample.ipynb")
    lines = []
    assert student.build(src, out, log=lines.append) == 1
    assert (out / "01_sample.ipynb").read_bytes() == mine
    assert any(line.startswith("kept") and "01_sample.ipynb" in line for line in lines)
    assert "make student FORCE=1" in lines[-1]
    assert not (out / "backup").exists()
    # the refusal is remembered: still refused when the source changes too
    nb = nbformat.read(src / "01_sample.ipynb", as_version=4)
    nb.cells[0].source += "\nNew intro."
    nbformat.write(nb, src / "01_sample.ipynb")
    assert student.build(src, out, log=lambda *a: None) == 1
    assert (out / "01_sample.ipynb").read_bytes() == mine


def test_build_force_keeps_a_timestamped_backup(tree):
    src, out = tree
    student.build(src, out, log=lambda *a: None)
    mine = edit(out / "01_sample.ipynb")
    assert student.build(src, out, force=True, log=lambda *a: None) == 0
    backups = list((out / "backup").glob("01_sample-*.ipynb"))
    assert len(backups) == 1 and re.fullmatch(r"01_sample-\d{8}-\d{6}\.ipynb", backups[0].name)
    assert backups[0].read_bytes() == mine
    assert (out / "01_sample.ipynb").read_bytes() == student.generate(src / "01_sample.ipynb")
    mine2 = edit(out / "01_sample.ipynb", "second try")  # a second forced build in the same second
    student.build(src, out, force=True, log=lambda *a: None)
    assert sorted(p.read_bytes() for p in (out / "backup").iterdir()) == sorted([mine, mine2])


def test_build_updates_an_untouched_copy_when_the_source_changes(tree):
    src, out = tree
    student.build(src, out, log=lambda *a: None)
    nb = nbformat.read(src / "01_sample.ipynb", as_version=4)
    nb.cells[0].source += "\nNew intro."
    nbformat.write(nb, src / "01_sample.ipynb")
    assert student.build(src, out, log=lambda *a: None) == 0
    assert "New intro." in (out / "01_sample.ipynb").read_text()


def test_an_unrecorded_copy_that_differs_counts_as_edited(tree):
    src, out = tree
    out.mkdir()
    (out / "README.md").write_text("my notes\n")
    assert student.build(src, out, log=lambda *a: None) == 1
    assert (out / "README.md").read_text() == "my notes\n"


def test_prepare_creates_missing_files_and_never_overwrites(tree):
    src, out = tree
    lines = []
    assert student.prepare(src, out, log=lines.append) == 0
    assert sorted(snapshot(out)) == [".generated.json", "01_sample.ipynb", "README.md"]
    assert any(line.startswith("created") for line in lines)
    mine = edit(out / "01_sample.ipynb")
    (out / "README.md").unlink()
    lines = []
    student.prepare(src, out, log=lines.append)
    assert (out / "01_sample.ipynb").read_bytes() == mine and (out / "README.md").exists()
    assert lines == [f"created  {out / 'README.md'}"]  # nothing to say about the edited notebook


def test_prepare_reports_a_newer_source(tree):
    src, out = tree
    student.prepare(src, out, log=lambda *a: None)
    mine = edit(out / "01_sample.ipynb")
    (src / "README.md").write_text("map, version 2\n")
    nb = nbformat.read(src / "01_sample.ipynb", as_version=4)
    nb.cells[0].source += "\nNew intro."
    nbformat.write(nb, src / "01_sample.ipynb")
    lines = []
    student.prepare(src, out, log=lines.append)
    assert (out / "01_sample.ipynb").read_bytes() == mine
    assert (out / "README.md").read_text() == "map\n"
    text = "\n".join(lines)
    assert re.search(r"newer .*README\.md changed since .* \(you have not edited it\): `make student` updates it", text)
    assert re.search(r"newer .*01_sample\.ipynb changed since .*your copy is kept.*make student FORCE=1", text)


# --------------------------------------------------------------------------- the real notebooks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_of_each_notebook(path):
    source = nbformat.read(path, as_version=4)
    ed = student.make_edition(source, path)
    data = student.render(ed.notebook)
    nb = nbformat.reads(data.decode(), as_version=4)
    nbformat.validate(nb)  # valid nbformat, as written
    assert len(nb.cells) == len(source.cells)
    assert ed.exercises, f"{path.name} has no exercise (no ### BEGIN SOLUTION block in a code cell)"
    text = data.decode()
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    # no solution line survives in any code cell (unless the source has it outside a solution too;
    # markdown may quote code in its instructions), and no output of an exercise or check cell
    outside, solution = set(), []
    for c in source.cells:
        inside = {k for b, e in student.solution_blocks(c.source) for k in range(b, e + 1)}
        for k, line in enumerate(c.source.splitlines()):
            if k in inside:
                solution.append(line.strip())
            elif c.cell_type == "code":
                outside.add(line.strip())
    student_code = {line.strip() for c in nb.cells if c.cell_type == "code" for line in c.source.splitlines()}
    for line in solution:
        if len(line) >= 8 and line not in outside and not line.startswith("#"):
            assert line not in student_code, f"solution line {line!r} appears in the student edition's code"
    for ex in ed.exercises:
        cell = nb.cells[ex.cell]
        assert (
            cell.outputs == [] and cell.source.count(f"raise NotImplementedError({json.dumps(ex.label)})") == ex.blocks
        )
        assert ex.check_cell is not None, f"{ex.label} (cell {ex.cell}) has no check cell after it"
        assert nb.cells[ex.check_cell].outputs == []
        assert re.fullmatch(r"Exercise \d+[a-z]?(\.\d+)?(: .+)?", ex.label)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_generation_is_deterministic(path):
    assert student.generate(path) == student.generate(path)


# --------------------------------------------------------------------------- through make


def make(*args, check=True):
    proc = subprocess.run(
        ["make", "--no-print-directory", "-o", STAMP, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, f"make {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_make_student_twice_then_edits_survive_make_student_and_make_lab_preparation(tmp_path):
    out = tmp_path / "student"
    make("student", f"STUDENT_DIR={out}")
    first = snapshot(out)
    assert sorted(k for k in first if k.endswith(".ipynb")) == [p.name for p in NOTEBOOKS]
    make("student", f"STUDENT_DIR={out}")
    assert snapshot(out) == first, "make student is not deterministic"

    target = out / NOTEBOOKS[0].name
    nb = nbformat.read(target, as_version=4)
    nb.cells.append(new_code_cell("# my own experiment"))
    nbformat.write(nb, target)
    mine = target.read_bytes()
    other = out / NOTEBOOKS[-1].name
    if len(NOTEBOOKS) > 1:
        other.unlink()

    proc = make("student", f"STUDENT_DIR={out}", check=False)
    assert proc.returncode != 0 and "FORCE=1" in proc.stdout, proc.stdout + proc.stderr
    assert target.read_bytes() == mine
    make("student-prepare", f"STUDENT_DIR={out}")
    assert target.read_bytes() == mine and other.exists()
    make("student", f"STUDENT_DIR={out}", "FORCE=1")
    assert target.read_bytes() == first[target.name]
    assert [p.read_bytes() for p in (out / "backup").iterdir()] == [mine]


def test_student_notebooks_find_labsupport_and_log_to_the_repository_runs(tmp_path, monkeypatch):
    # the kernel of `make lab` is .venv's python, which has labsupport installed (editable),
    # so `import labsupport` works from student/ (or any folder), not only from notebooks/
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "import importlib.util as u; print(u.find_spec('labsupport').origin)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(proc.stdout.strip()).parent == ROOT / "labsupport"
    # and TensorBoard logs from student/ go to the repository's runs/, like those from notebooks/
    for name in ("labsupport", "notebooks", "student"):
        (tmp_path / name).mkdir()
    from labsupport import tb

    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path / "student")
    assert tb._runs_root(None) == Path("..") / "runs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_of_the_student_edition_is_itself(path, tmp_path):
    # what makes a handout repository work (docs/instructors.md): its notebooks/ holds the student
    # edition, and `make lab` there copies it to student/ unchanged
    once = tmp_path / path.name
    once.write_bytes(student.generate(path))
    assert student.generate(once) == once.read_bytes()


def test_ci_workflow_for_instructors_runs_exactly_make_test_with_a_pip_cache():
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    (job,) = flow["jobs"].values()
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    assert runs == ["make test"]
    setup = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip"
    assert set(setup["with"]["cache-dependency-path"].split()) == {"constraints.txt", "pyproject.toml"}
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "docs/ci/github-actions.yml" in (ROOT / "docs" / "instructors.md").read_text()

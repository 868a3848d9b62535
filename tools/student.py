"""The student edition: ``student/`` generated from the solved notebooks in ``notebooks/``.

    python -m tools.student build   [--src notebooks] [--out student] [--force]   # make student
    python -m tools.student prepare [--src notebooks] [--out student]             # make lab
    python -m tools.student handout --out build/handout                           # make handout
    python -m tools.student verify  notebooks/01_tensors.ipynb [...]              # round trip
    python -m tools.student unsolved notebooks/01_tensors.ipynb [...]             # Run all, nothing solved

``build`` writes every student notebook. What is an exercise is data in the
notebook: each cell of one carries ``metadata["lab"]``, e.g.
``{"exercise": "03.5", "role": "solution", "points": 1}`` (the schema is in
CONTRIBUTING.md; ``python -m tools.migrate_exercises`` writes it). In a
solution cell, each block between the lines ``### BEGIN SOLUTION`` and
``### END SOLUTION`` becomes a stub::

    # YOUR CODE HERE
    raise NotImplementedError("Exercise 02.2: the forward pass")

named by the exercise's id and its heading cell's title. When the
block sits at the top level of its cell, any name it assigns that the check
cell reads is set to ``None`` first, so the check answers "got None" instead
of a NameError. In an answer cell (markdown) the block becomes
``Your answer here: double-click ...``. Every code cell loses its stored outputs (a PASS line or
a finished loss curve would spoil the exercise; nbgrader clears them too) and
its ``nbval-*`` tags; every cell keeps its id and its ``lab`` metadata (the
grader matches a submission's cells by them). Other files under the source
folder (images) are copied as they are, except that the repository's
``student/README.md`` comes from ``docs/student_README.md``
(``notebooks/README.md`` is the instructors' map).

A student's work is never lost. ``build`` overwrites a student file only when
it is still exactly what was generated last time (the hashes are kept in
``<out>/.generated.json``); an edited file is kept and reported, and exit
status is 1, unless ``--force``, which first moves the edited copy to
``<out>/backup/<name>-<YYYYmmdd-HHMMSS>.<ext>``. ``prepare`` (what ``make lab``
runs) only creates missing files and reports sources that changed since the
copy was made. Both are deterministic: running them twice changes nothing.

``verify`` proves the edition works, with ONE kernel per notebook, cell by
cell: cells before the first exercise run cleanly; each exercise raises the
NotImplementedError naming it; its check, run against the stub, fails with a
CheckError (not a NameError or another internal error); then the original
solution cell runs and the check must pass; the next exercise follows on that
state. The run stops after the last check (``--whole`` runs the rest too): from
there on the cells and the state are the source's, which nbval runs anyway.
Cells marked ``# NBVAL_SKIP`` (as nbval reads it) are skipped.

Unbalanced or nested markers, a solution cell without a marker pair, text
that reads as a marker in any other cell (``### SOLUTION BEGIN``, a zero-width
space, full-width letters: :func:`looks_like_marker`) and malformed metadata
stop ``build``/``prepare`` with the file, the cell (counted from 0, as in the
.ipynb file) and the line (from 1).

Example:
    >>> cell = "def f(x):\\n    ### BEGIN SOLUTION\\n    return x\\n    ### END SOLUTION"
    >>> print(stub_code(cell, "Exercise 1: identity")[0])
    def f(x):
        # YOUR CODE HERE
        raise NotImplementedError("Exercise 1: identity")
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import re
import shutil
import sys
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import tomllib
from nbconvert.preprocessors import ClearOutputPreprocessor

from .files import write_atomic

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ".generated.json"
BACKUP_DIR = "backup"
# student/README.md is written for students (what the folder is, how to start, what the checks
# say); notebooks/README.md is the instructors' map and stays in notebooks/.
STUDENT_README = ROOT / "docs" / "student_README.md"

# The handout (make handout, build/handout.zip) is used away from the repository: its README
# says how to install labsupport from the wheel beside the notebooks (the Makefile builds it
# into the folder) and keeps the student README's part on the checks' messages.
HANDOUT_README = """\
# Your notebooks (the lab's handout)

This folder holds the lab's notebooks, `00_hardware` to `10_scaling_up`, with every exercise left
for you to write; `ddp_train.py`, the script notebook 10 runs; and `{wheel}`, the lab's
helper package (`labsupport`, imported as `lab`): the notebooks call it, and its checks tell you
whether an exercise is right. Work through the notebooks in order: each one builds on the one before.

## Setting up, once

In a terminal, in this folder, with Python 3.10 or newer (a virtual environment of its own is
best: `python -m venv .venv`, then `source .venv/bin/activate`, on Windows `.venv\\Scripts\\activate`):

```bash
pip install {wheel} jupyterlab
```

This one command installs the helpers, what they need (PyTorch 2.6 or newer, torchvision, NumPy,
matplotlib, scikit-learn, tqdm, TensorBoard: a PyTorch already installed is kept) and JupyterLab.

## Starting

```bash
jupyter lab                   # in this folder; open the http://localhost:8888/lab?token=... link it prints
tensorboard --logdir runs     # in a second terminal: the training notebooks' curves on http://localhost:6006
```

Run each notebook's first cell (its setup) before anything else, then go down cell by cell. If that
cell's line says the helpers are not installed, run the `pip install` line above, then restart the
kernel (Kernel > Restart Kernel). Stop JupyterLab or TensorBoard with Ctrl-C in their terminal.
`runs/` (made here by the training cells) holds what they log for TensorBoard.

"""


def handout_readme() -> str:
    """The handout's README.md: how to install and start, then the student README's part on the checks."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheel = f"labsupport-{version}-py3-none-any.whl"
    text = STUDENT_README.read_text()
    checks = text[text.index("## Exercises") : text.index("## What else is here")]
    return HANDOUT_README.format(wheel=wheel) + checks.rstrip() + "\n"


def handout(src_dir: Path, out: Path) -> int:
    """The handout's folder (make handout zips it, with the labsupport wheel the Makefile adds):
    the student edition of ``src_dir`` with the handout's README, without the build's hashes."""
    status = build(src_dir, out, force=False)
    (out / MANIFEST).unlink(missing_ok=True)
    (out / "README.md").write_text(handout_readme())
    return status


STUB_COMMENT = "# YOUR CODE HERE"
# A written answer's region in the student edition: it says how to edit a markdown cell, which a first-time
# JupyterLab user does not know (double-clicking shows the cell's text, Shift+Enter renders it again).
# A double-click alone shows the text but leaves JupyterLab's keys as commands (typed letters insert or delete
# cells): the click into the line that puts a cursor there is the step a newcomer misses.
ANSWER_PLACEHOLDER = (
    "Your answer here: to write it, double-click this cell, click on this line so that a cursor blinks, "
    "replace the line with your answer, then press Shift+Enter."
)
# What earlier editions put there: a handed-in notebook from one of them still has an unanswered question.
EARLIER_PLACEHOLDERS = (
    "Your answer here",
    "Your answer here: double-click this cell to edit it, write your answer in place of this line, then press "
    "Shift+Enter.",
)
EDITION = "student"

LAB = "lab"  # the key of an exercise cell's metadata: {"exercise": "03.5", "role": "solution", "points": 1}
ROLES = ("heading", "solution", "check", "answer")
_CELL_TYPE = {"heading": "markdown", "solution": "code", "check": "code", "answer": "markdown"}
_GRADED = ("solution", "answer")  # the roles that carry the exercise's points
_ID = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9]+$")

_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")
# What reads as a marker once case, spacing, underscores, word order, zero-width and
# full-width characters are set aside (see looks_like_marker).
_JOINED = re.compile(r"(begin|start|end|stop|finish)(of)?(the)?solutions?|solutions?(begin|start|end|stop|finish)s?")
_DECORATION = re.compile(r"[\s#*:.`~=>|-]")
_NEAR = re.compile(r"\b(begin|start|end)\s+solutions?\b|\bsolutions?\s+(begin|start|end)\b")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXERCISE = re.compile(
    r"^exercise\b\s*(?P<num>\d+[a-z]?(?:\.\d+)?)?\s*(?:[:.\u2013\u2014-]\s*)?(?P<title>.*)$", re.IGNORECASE
)


class ExerciseError(ValueError):
    """An exercise whose cells or metadata are wrong: says the file and the cell."""

    def __init__(self, path: str | Path, cell: int, problem: str) -> None:
        self.path, self.cell, self.line, self.problem = str(path), cell, None, problem
        super().__init__(f"{path}: cell {cell}: {problem}")


class MarkerError(ExerciseError):
    """Solution markers that do not pair up, or marker text where none belongs: says the file, cell and line."""

    def __init__(self, path: str | Path, cell: int, line: int, problem: str) -> None:
        self.path, self.cell, self.line, self.problem = str(path), cell, line, problem
        ValueError.__init__(self, f"{path}: cell {cell}, line {line}: {problem}")


# --------------------------------------------------------------------------- parsing


def _plain(line: str) -> str:
    """``line`` folded (NFKC: full-width letters), without format characters (Cf: zero-width
    spaces), lower-cased, with underscores read as spaces."""
    text = unicodedata.normalize("NFKC", line)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return text.replace("_", " ").lower()


def looks_like_marker(line: str) -> bool:
    """True if ``line`` reads as a solution marker, exact or not: case, spacing, underscores,
    word order, zero-width and full-width characters set aside.

    Example:
        >>> [looks_like_marker(s) for s in ("### SOLUTION BEGIN", "### START SOLUTION", "# the solution ends")]
        [True, True, False]
    """
    text = _plain(line)
    if "solution" not in text:
        return False
    rest = _DECORATION.sub("", re.sub(r"[a-z]", "", text))
    if not rest and _JOINED.fullmatch(re.sub(r"[^a-z]", "", text)):
        return True
    return text.lstrip().startswith("#") and bool(_NEAR.search(text))


def solution_blocks(source: str, *, path: str | Path = "<notebook>", cell: int = 0) -> list[tuple[int, int]]:
    """``(begin, end)`` line indices (0-based) of each marker pair in ``source``.

    Raises :class:`MarkerError` (1-based line) for an END without BEGIN, a
    BEGIN inside an open block, a BEGIN never closed, or a line that reads as a
    marker but is not exactly one (:func:`looks_like_marker`).

    Example:
        >>> solution_blocks("a\\n### BEGIN SOLUTION\\nb\\n### END SOLUTION")
        [(1, 3)]
    """
    blocks, open_at = [], None
    lines = source.splitlines()
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            if looks_like_marker(line):
                raise MarkerError(
                    path,
                    cell,
                    i + 1,
                    f"{line.strip()!r} is not a solution marker: write "
                    f"exactly '### BEGIN SOLUTION' or '### END SOLUTION' on its own line",
                )
            continue
        if m.group(1) == "BEGIN":
            if open_at is not None:
                raise MarkerError(
                    path,
                    cell,
                    i + 1,
                    f"nested '### BEGIN SOLUTION': the block opened at line {open_at + 1} is not closed yet",
                )
            open_at = i
        else:
            if open_at is None:
                raise MarkerError(path, cell, i + 1, "'### END SOLUTION' without a '### BEGIN SOLUTION' before it")
            blocks.append((open_at, i))
            open_at = None
    if open_at is not None:
        raise MarkerError(
            path, cell, open_at + 1, "'### BEGIN SOLUTION' is never closed by '### END SOLUTION' in this cell"
        )
    return blocks


def has_marker(text: str) -> bool:
    """True if any line of ``text`` is a BEGIN/END SOLUTION marker."""
    return any(_MARKER.match(line) for line in text.splitlines())


def heading_title(text: str) -> str:
    """The title of the first ``### Exercise NN.k: title`` line of a heading cell (display text:
    the exercise's id is in the cell's metadata), or ``""``.

    Example:
        >>> heading_title("Intro.\\n### Exercise 02.2: the forward pass")
        'the forward pass'
    """
    for line in text.splitlines():
        h = _HEADING.match(line)
        m = _EXERCISE.match(h.group(2)) if h else None
        if m:
            return m.group("title").strip()
    return ""


def _assigned_names(code: str) -> list[str]:
    """Names bound at the top level of ``code`` (assignments, def, class), in order."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names: list[str] = []

    def add_target(t: ast.AST) -> None:
        if isinstance(t, ast.Name):
            names.append(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                add_target(e)
        elif isinstance(t, ast.Starred):
            add_target(t.value)

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                add_target(t)
        elif isinstance(node, ast.AnnAssign):
            add_target(node.target)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return list(dict.fromkeys(names))


def _read_names(code: str) -> set[str]:
    """Names ``code`` reads (falls back to identifiers when it is not plain Python)."""
    try:
        return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set(re.findall(r"[A-Za-z_]\w*", code))


def _stored_names(code: str) -> set[str]:
    """Names a cell binds outside its functions and classes (assignments, loops, with-as, def, class)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    found, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _free_names(code: str) -> set[str]:
    """Names ``code`` reads that nothing in it binds (arguments, loop and comprehension variables,
    assignments in any scope); IPython's %magic and !shell lines are left out."""
    lines = [line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    bound = {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    return {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound


def unguarded_uses(cells: list, exercise_cells: set[int], after: int) -> list[str]:
    """Cells after index ``after`` that read a value an exercise (or a cell that needs one) made,
    without ``lab.require(...)``: statically, since "Run all" stops being informative there."""
    tainted, problems = set(), []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        guarded = i in exercise_cells or "lab.require(" in cell.source
        stored, free = _stored_names(cell.source), _free_names(cell.source)
        used = (free - stored) & tainted  # a name the cell binds itself is its own
        if guarded or used:
            tainted |= stored
        else:
            tainted -= stored  # bound afresh by a cell that needs no exercise
        if used and not guarded and i > after:
            problems.append(
                f"cell {i} uses {', '.join(sorted(used))}, which an exercise makes, without "
                f"lab.require(...): it would crash while that exercise is unsolved"
            )
    return problems


def _names(code: str) -> tuple[set[str], set[str], set[str]]:
    """(every name ``code`` mentions, the names its imports bind, the names it could change:
    binds, assigns into, calls a method of, or passes to a function)."""
    try:
        tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        every = set(re.findall(r"[A-Za-z_]\w*", code))
        return every, set(), every
    imported = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    changed, handed = set(imported), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            changed.add(node.id)  # x = ...
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            handed.append(node.value)  # x.a = ..., x[i] += ...
        elif isinstance(node, ast.Call):
            handed += [*node.args, *(k.value for k in node.keywords)]  # f(x), f(k=x)
            if isinstance(node.func, ast.Attribute):
                handed.append(node.func.value)  # x.method(...)
    for value in handed:
        value = value.value if isinstance(value, ast.Starred) else value
        if isinstance(value, ast.Name):
            changed.add(value.id)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | imported, imported, changed


def demo_leaves(cells: list, roles: set[int], last: int) -> set[int]:
    """Code cells up to index ``last`` that "Run all" on the unsolved edition leaves to nbval:
    not an exercise or check (``roles``), mentioning nothing that one of those could change
    (modules aside), nor anything a cell that does so could change, and binding nothing that a
    later cell still run reads: a plot, a timing, a printout, and the demo cells that only feed
    those. They run the same whether or not anything is solved."""
    code = [i for i, c in enumerate(cells[: last + 1]) if c.cell_type == "code"]
    names = {i: _names(cells[i].source) for i in code}
    modules = set().union(*(imported for _, imported, _ in names.values())) | {"lab"}
    reads = {i: _free_names(cells[i].source) for i in code}
    binds = {i: _stored_names(cells[i].source) | names[i][1] for i in code}
    tainted, free = set(), []  # tainted: what an exercise (or a cell after one that uses it) could change
    for k, i in enumerate(code):
        if i in roles or "lab.require(" in cells[i].source or names[i][0] & tainted:
            tainted |= (binds[i] | names[i][2]) - modules
        else:
            free.append(k)
    leaves: set[int] = set()
    for k in reversed(free):  # the last first: whether a later cell still runs is known
        live = set(binds[code[k]])  # what this cell made that a later cell could still read
        for j in code[k + 1 :]:
            if j in leaves:
                continue
            if reads[j] & live:
                break
            live -= binds[j]  # bound afresh there, before any read
        else:
            leaves.add(code[k])
    return leaves


def _py_string(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return json.dumps(text, ensure_ascii=False)


def stub_code(
    source: str, label: str, check_source: str = "", *, path: str | Path = "<notebook>", cell: int = 0
) -> tuple[str, int]:
    """Replace each solution block of a code cell by the stub; return (new source, blocks).

    The stub keeps the BEGIN marker's indentation. A block at the top level of
    the cell first sets to ``None`` the names it assigns that ``check_source``
    reads.
    """
    lines = source.splitlines()
    blocks = solution_blocks(source, path=path, cell=cell)
    out: list[str] = []
    pos = 0
    for begin, end in blocks:
        out.extend(lines[pos:begin])
        indent = re.match(r"\s*", lines[begin]).group(0)
        out.append(f"{indent}{STUB_COMMENT}")
        if not indent:
            body = "\n".join(lines[begin + 1 : end])
            wanted = _read_names(check_source)
            out.extend(f"{name} = None" for name in _assigned_names(body) if name in wanted)
        out.append(f"{indent}raise NotImplementedError({_py_string(label)})")
        pos = end + 1
    out.extend(lines[pos:])
    return "\n".join(out), len(blocks)


def stub_markdown(source: str, *, path: str | Path = "<notebook>", cell: int = 0) -> tuple[str, int]:
    """Replace each solution block of a markdown cell by ``ANSWER_PLACEHOLDER``."""
    lines = source.splitlines()
    blocks = solution_blocks(source, path=path, cell=cell)
    out: list[str] = []
    pos = 0
    for begin, end in blocks:
        out.extend(lines[pos:begin])
        out.append(ANSWER_PLACEHOLDER)
        pos = end + 1
    out.extend(lines[pos:])
    return "\n".join(out), len(blocks)


@dataclass
class Exercise:
    """One exercise cell of a notebook, and the check cell after it."""

    cell: int
    label: str
    check_cell: int | None
    blocks: int
    id: str = ""
    points: float = 1
    heading_cell: int | None = None


@dataclass
class Answer:
    """A written answer: a markdown cell whose solution region becomes ``ANSWER_PLACEHOLDER``."""

    cell: int
    label: str
    id: str
    points: float = 0
    heading_cell: int | None = None


@dataclass
class Edition:
    """A generated student notebook and what the generator found in its source."""

    notebook: nbformat.NotebookNode
    exercises: list[Exercise] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    @property
    def checks(self) -> int:
        return sum(e.check_cell is not None for e in self.exercises)

    @property
    def written_answers(self) -> list[int]:
        return [a.cell for a in self.answers]


@dataclass
class Parts:
    """The cells of one exercise, as their metadata say (cell indices; None where there is none)."""

    id: str
    heading: int | None = None
    solution: int | None = None
    check: int | None = None
    answer: int | None = None
    points: float | None = None

    @property
    def graded(self) -> int:
        """The solution cell, else the answer cell."""
        return self.solution if self.solution is not None else self.answer


def _lab_problem(lab, cell) -> str | None:
    """What is wrong with a cell's ``metadata["lab"]``, or None."""
    example = '{"exercise": "03.5", "role": "solution", "points": 1}'
    if not isinstance(lab, dict):
        return f"metadata {LAB!r} must be an object such as {example}, not {lab!r}"
    role = lab.get("role")
    roles = [role] if isinstance(role, str) else role
    if set(lab) - {"exercise", "role", "points"}:
        return f"metadata {LAB!r} has unknown keys {sorted(set(lab) - {'exercise', 'role', 'points'})}: {example}"
    if not isinstance(lab.get("exercise"), str) or not _ID.match(lab["exercise"]):
        return (
            f'metadata {LAB!r} needs the exercise\'s id, as its check declares it ("03.5"), not {lab.get("exercise")!r}'
        )
    if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
        return f"metadata {LAB!r}: role must be one of {', '.join(ROLES)} (or a list of them), not {role!r}"
    if len(set(roles)) < len(roles) or set(roles) - set(ROLES):
        return f"metadata {LAB!r}: role must be one of {', '.join(ROLES)} (or a list of them), not {role!r}"
    for r in roles:
        if _CELL_TYPE[r] != cell.cell_type:
            return f"metadata {LAB!r}: role {r!r} belongs on a {_CELL_TYPE[r]} cell, this is a {cell.cell_type} cell"
    points = lab.get("points")
    if set(roles) & set(_GRADED):
        if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
            return f"metadata {LAB!r}: a {'/'.join(roles)} cell needs its exercise's points (a number >= 0), not {points!r}"
    elif points is not None:
        return f"metadata {LAB!r}: points belong on the exercise's solution or answer cell, not on its {role} cell"
    return None


def lab_metadata(cell) -> tuple[str | None, tuple[str, ...]]:
    """(exercise id, roles) from ``cell.metadata["lab"]``; ``(None, ())`` when the cell has none
    (or it is malformed: :func:`exercise_parts` says how).

    Example:
        >>> from nbformat.v4 import new_code_cell
        >>> lab_metadata(new_code_cell(metadata={"lab": {"exercise": "03.5", "role": "check"}}))
        ('03.5', ('check',))
    """
    lab = cell.get("metadata", {}).get(LAB)
    if lab is None or _lab_problem(lab, cell):
        return None, ()
    role = lab["role"]
    return lab["exercise"], (role,) if isinstance(role, str) else tuple(role)


def _check_markers(cell, index: int, roles: tuple[str, ...], path: str | Path, student_copy: bool) -> None:
    """A solution or answer cell has a valid marker pair (a student copy: none needed); any
    other cell has nothing that reads as a marker."""
    graded = [r for r in roles if r in _GRADED]
    if graded:
        if not solution_blocks(cell.source, path=path, cell=index) and not student_copy:
            raise ExerciseError(
                path,
                index,
                f"its metadata makes it an exercise's {graded[0]} cell, but it has no "
                f"'### BEGIN SOLUTION' / '### END SOLUTION' pair: mark the answer, or remove its {LAB!r} metadata",
            )
        return
    for k, line in enumerate(cell.source.splitlines()):
        if _MARKER.match(line) or looks_like_marker(line):
            what = f"the {'/'.join(roles)} cell of an exercise" if roles else f"a cell without {LAB!r} metadata"
            raise MarkerError(
                path,
                index,
                k + 1,
                f"{line.strip()!r} reads as a solution marker, in {what}: only an exercise's solution or "
                f"answer cell (metadata {LAB!r}) may hold one, and here it would be published as it is. Give the "
                f"cell its exercise's metadata (python -m tools.migrate_exercises), or reword the line",
            )


def exercise_parts(nb: nbformat.NotebookNode, path: str | Path = "<notebook>") -> list[Parts]:
    """The exercises of ``nb``, read from its cells' ``metadata["lab"]`` alone, in the order of
    their solution (or answer) cells. Raises :class:`ExerciseError` for malformed metadata, a role
    taken twice, an exercise without a solution or answer cell, a check cell before its solution;
    :class:`MarkerError` for a solution cell whose markers do not pair up and for marker text in
    any other cell."""
    found: dict[str, Parts] = {}
    student_copy = nb.metadata.get("labsupport", {}).get("edition") == EDITION
    for i, cell in enumerate(nb.cells):
        lab = cell.get("metadata", {}).get(LAB)
        problem = None if lab is None else _lab_problem(lab, cell)
        if problem:
            raise ExerciseError(path, i, problem)
        ex_id, roles = lab_metadata(cell)
        if cell.cell_type in ("code", "markdown"):
            _check_markers(cell, i, roles, path, student_copy)
        if ex_id is None:
            continue
        part = found.setdefault(ex_id, Parts(ex_id))
        for role in roles:
            if getattr(part, role) is not None:
                raise ExerciseError(
                    path,
                    i,
                    f"exercise {ex_id} has a {role} cell already (cell {getattr(part, role)}): one per exercise",
                )
            setattr(part, role, i)
        if "points" in lab:
            part.points = lab["points"]
    for part in found.values():
        first = min(i for i in (part.heading, part.solution, part.check, part.answer) if i is not None)
        if (part.solution is None) == (part.answer is None):
            raise ExerciseError(
                path, first, f"exercise {part.id} needs exactly one solution (code) or answer (markdown) cell"
            )
        if part.check is not None and (part.solution is None or part.check < part.solution):
            raise ExerciseError(
                path, part.check, f"the check cell of exercise {part.id} comes before its solution cell"
            )
    return sorted(found.values(), key=lambda p: p.graded)


def exercise_label(cells: list, ex_id: str, heading: int | None) -> str:
    """``Exercise NN.k: title``, what the stub raises: the exercise's id, as its heading, the checks'
    messages, ``lab.hint`` and the gradebook name it, and the title from its heading cell.

    Example:
        >>> from nbformat.v4 import new_markdown_cell as md
        >>> exercise_label([md("### Exercise 07.3: loss")], "07.3", 0)
        'Exercise 07.3: loss'
    """
    title = heading_title(cells[heading].source) if heading is not None else ""
    return f"Exercise {ex_id}: {title}" if title else f"Exercise {ex_id}"


def _nbval_marked(cell, marker: str, *tags: str) -> bool:
    """True if ``cell`` carries nbval's ``marker`` as a comment line (as nbval reads it) or a tag."""
    comments = {line.strip().lstrip("#").strip() for line in cell.source.splitlines() if line.strip().startswith("#")}
    cell_tags = set(cell.get("metadata", {}).get("tags", []))
    return marker in comments or bool(cell_tags & set(tags))


def _is_skip(cell) -> bool:
    return _nbval_marked(cell, "NBVAL_SKIP", "nbval-skip")


def _clear(cell) -> None:
    cell.outputs = []
    cell.execution_count = None


def make_edition(nb: nbformat.NotebookNode, path: str | Path = "<notebook>", *, keep_outputs: bool = False) -> Edition:
    """The student edition of a solved notebook (the input is not modified).

    Its exercises are what the cells' ``metadata["lab"]`` say (:func:`exercise_parts`; the
    schema is in CONTRIBUTING.md), and each cell keeps that metadata and its id, so the grader
    and the site read the same. ``keep_outputs`` (the public site) keeps the stored outputs of
    cells that are neither an exercise nor its check: the demos' printouts and plots."""
    nb = copy.deepcopy(nb)
    cells = nb.cells
    ed = Edition(nb)
    for part in exercise_parts(nb, path):
        label = exercise_label(cells, part.id, part.heading)
        if part.solution is not None:
            ed.exercises.append(Exercise(part.solution, label, part.check, 0, part.id, part.points, part.heading))
        else:
            ed.answers.append(Answer(part.answer, label, part.id, part.points, part.heading))
    for ex in ed.exercises:
        cell = cells[ex.cell]
        check_src = cells[ex.check_cell].source if ex.check_cell is not None else ""
        cell.source, ex.blocks = stub_code(cell.source, ex.label, check_src, path=path, cell=ex.cell)
        _clear(cell)
        if ex.check_cell is not None:
            _clear(cells[ex.check_cell])
    for answer in ed.answers:
        cells[answer.cell].source, _ = stub_markdown(cells[answer.cell].source, path=path, cell=answer.cell)
    if not keep_outputs:
        # No stored output survives (a PASS line or a finished loss curve spoils the exercise):
        # nbconvert's ClearOutputPreprocessor empties every code cell's outputs and counts.
        nb, _ = ClearOutputPreprocessor().preprocess(nb, {})
        cells = nb.cells
    for cell in cells:
        if cell.cell_type == "code" and not keep_outputs:
            # nbval's tags are for the instructors' CI, not for students.
            tags = [t for t in cell.metadata.get("tags", []) if not t.startswith("nbval-")]
            if tags:
                cell.metadata["tags"] = tags
            else:
                cell.metadata.pop("tags", None)
    nb.metadata["labsupport"] = {"edition": EDITION, "source": f"notebooks/{Path(path).name}"}
    nbformat.validate(nb)
    return ed


def render(nb: nbformat.NotebookNode) -> bytes:
    """The notebook as the bytes ``nbformat.write`` would store (deterministic)."""
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def generate(src: Path) -> bytes:
    """The student edition of the file ``src`` (notebooks transformed, other files as they are)."""
    if src.suffix == ".ipynb":
        return render(make_edition(nbformat.read(src, as_version=4), src).notebook)
    return src.read_bytes()


# --------------------------------------------------------------------------- files


def source_files(src_dir: Path) -> list[Path]:
    """Files under ``src_dir`` to publish, relative, sorted (no hidden files or folders)."""
    files = []
    for p in sorted(src_dir.rglob("*")):
        rel = p.relative_to(src_dir)
        if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            files.append(rel)
    return files


def _show(path: Path) -> str:
    """``path`` relative to the working folder when it is below it (for messages)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load_manifest(out: Path) -> dict[str, str]:
    try:
        data = json.loads((out / MANIFEST).read_text())
        return dict(data.get("files", {}))
    except (OSError, ValueError, AttributeError):
        return {}


def _save_manifest(out: Path, files: dict[str, str]) -> None:
    data = {
        "about": "hashes of the files tools/student.py generated last; a file whose hash "
        "differs has been edited and is never overwritten without --force",
        "files": dict(sorted(files.items())),
    }
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    path = out / MANIFEST
    if not path.exists() or path.read_text() != text:
        write_atomic(path, text)


def _backup(out: Path, rel: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = out / BACKUP_DIR / rel.parent
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        suffix = "" if n == 1 else f"-{n}"
        dest = folder / f"{rel.stem}-{stamp}{suffix}{rel.suffix}"
        if not dest.exists():
            shutil.copy2(out / rel, dest)
            return dest
    raise RuntimeError(f"no free backup name for {rel} in {folder}")


def _generate_all(src_dir: Path) -> dict[Path, bytes]:
    if not src_dir.is_dir():
        raise FileNotFoundError(f"no source folder {src_dir}")
    files = {rel: generate(src_dir / rel) for rel in source_files(src_dir)}
    if src_dir.resolve() == (ROOT / "notebooks").resolve() and STUDENT_README.is_file():
        files[Path("README.md")] = STUDENT_README.read_bytes()
    return files


def build(src_dir: Path, out: Path, force: bool = False, log=print) -> int:
    """Write the student edition of ``src_dir`` into ``out``; return the exit status.

    A file in ``out`` that differs from what was generated last time (the
    student's work) is kept and reported (status 1) unless ``force``, which
    backs it up first.
    """
    generated = _generate_all(src_dir)  # all markers validated before anything is written
    out.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest(out)
    refused = []
    for rel, data in generated.items():
        key, dest, sha = rel.as_posix(), out / rel, _sha(data)
        if dest.exists():
            current = _sha(dest.read_bytes())
            if current == sha:
                manifest[key] = sha
                continue
            if current != manifest.get(key):  # edited since it was generated
                if not force:
                    refused.append(key)
                    log(f"kept     {dest}: it differs from the generated copy (your work?)")
                    continue
                log(f"backup   {dest} -> {_backup(out, rel)}")
            write_atomic(dest, data)
            log(f"updated  {dest}")
        else:
            write_atomic(dest, data)
            log(f"created  {dest}")
        manifest[key] = sha
    _save_manifest(out, manifest)
    notebooks = [rel for rel in generated if rel.suffix == ".ipynb"]
    log(
        f"student edition of {_show(src_dir)}/: {len(notebooks)} notebook(s), {len(generated) - len(notebooks)} "
        f"other file(s) in {out}/"
    )
    if refused:
        log(
            f"\n{len(refused)} file(s) in {out}/ were edited and were NOT overwritten: {', '.join(refused)}.\n"
            f"To replace them with the new student edition anyway, run `make student FORCE=1`:\n"
            f"each edited file is first copied to {out}/{BACKUP_DIR}/<name>-<timestamp>."
        )
        return 1
    return 0


def prepare(src_dir: Path, out: Path, log=print) -> int:
    """Create the student files that are missing in ``out``; never overwrite one.

    Reports files whose source changed since the student copy was made.
    """
    generated = _generate_all(src_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest(out)
    for rel, data in generated.items():
        key, dest, sha = rel.as_posix(), out / rel, _sha(data)
        if not dest.exists():
            write_atomic(dest, data)
            manifest[key] = sha
            log(f"created  {dest}")
            continue
        current = _sha(dest.read_bytes())
        if current == sha:
            manifest[key] = sha
            continue
        recorded = manifest.get(key)
        if recorded == sha:
            continue  # the source has not changed since; the difference is the student's work
        if recorded is None and (src_dir / rel).stat().st_mtime <= dest.stat().st_mtime:
            continue  # no record, and the copy is the newer file: assume it is the student's work
        if current == recorded:
            log(
                f"newer    {_show(src_dir / rel)} changed since {dest} was made (you have not edited it): "
                f"`make student` updates it."
            )
        else:
            log(
                f"newer    {_show(src_dir / rel)} changed since {dest} was made; your copy is kept. "
                f"To take the new version: `make student FORCE=1` (your copy goes to {out}/{BACKUP_DIR}/)."
            )
    _save_manifest(out, manifest)
    return 0


# --------------------------------------------------------------------------- verify


@dataclass
class ExerciseResult:
    """What happened to one exercise in :func:`verify`."""

    label: str
    cell: int
    check_cell: int | None
    stub_raised: str | None = None  # the exercise cell's own error, if it raised
    stub_message: str | None = None  # the check's message against the stub
    solved_output: str | None = None  # the check's output once the solution is back
    problems: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The result of :func:`verify` for one notebook."""

    path: Path
    exercises: list[ExerciseResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tail_cells: int = 0  # code cells after the last check, not run (nbval runs them)
    demo_cells: int = 0  # run_unsolved: demo cells before it that need no exercise, left to nbval

    @property
    def all_problems(self) -> list[str]:
        return self.problems + [f"{e.label} (cell {e.cell}): {p}" for e in self.exercises for p in e.problems]

    @property
    def checks(self) -> int:
        return sum(e.check_cell is not None for e in self.exercises)


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out and "text/plain" in out["data"]:
            parts.append(out["data"]["text/plain"])
    return "".join(parts)


def _raises_expected(cell) -> bool:
    return _nbval_marked(cell, "NBVAL_RAISES_EXCEPTION", "nbval-raises-exception", "raises-exception")


def verify(
    path: Path, *, timeout: int = 300, cwd: Path | None = None, kernel_name: str = "python3", whole: bool = False
) -> Report:
    """Run the student edition of ``path`` in one fresh kernel, pasting each solution
    back after its check has failed on the stub (see the module docstring).

    The run stops after the last exercise's check unless ``whole``: with every
    solution pasted back, the cells after it are the source's own cells on the
    source's state, which nbval already runs (and they hold the long training runs).
    The kernel's working folder is ``cwd`` (default: the notebook's own folder,
    a sibling of ``student/``, so relative paths such as ``../runs`` agree).
    """
    from nbclient.exceptions import CellExecutionError

    from .runner import notebook_client

    path = Path(path)
    source = nbformat.read(path, as_version=4)
    ed = make_edition(source, path)
    student = ed.notebook
    report = Report(path)
    by_cell = {e.cell: ExerciseResult(e.label, e.cell, e.check_cell) for e in ed.exercises}
    report.exercises = list(by_cell.values())
    for res in report.exercises:
        if res.check_cell is None:
            res.problems.append("no check cell follows it (the next code cell must call a lab.check_... function)")
    checks = {e.check_cell: by_cell[e.cell] for e in ed.exercises if e.check_cell is not None}
    first_exercise = min(by_cell, default=len(student.cells))
    last_needed = (
        len(student.cells) - 1
        if whole
        else max(
            [e.check_cell if e.check_cell is not None else e.cell for e in ed.exercises], default=len(student.cells) - 1
        )
    )
    report.tail_cells = sum(c.cell_type == "code" for c in student.cells[last_needed + 1 :])
    client = notebook_client(student, cwd or path.parent, timeout=timeout, kernel_name=kernel_name)

    def run(cell, index):
        """Execute a copy of ``cell``; return (cell with outputs, error or None)."""
        cell = copy.deepcopy(cell)
        try:
            client.execute_cell(cell, index)
            return cell, None
        except CellExecutionError as err:
            return cell, err

    start = time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(student.cells[: last_needed + 1]):
            if cell.cell_type != "code" or _is_skip(source.cells[i]):
                continue
            where = f"cell {i}"
            if i in by_cell:
                res = by_cell[i]
                _, err = run(cell, i)
                if err is not None:
                    res.stub_raised = f"{err.ename}: {err.evalue}"
                    if err.ename != "NotImplementedError" or res.label not in err.evalue:
                        res.problems.append(
                            f"the stub cell should raise NotImplementedError({res.label!r}), "
                            f"but raised {err.ename}: {err.evalue}"
                        )
                if res.check_cell is None:  # nothing to check: paste the solution back and go on
                    _, err = run(source.cells[i], i)
                    if err is not None:
                        res.problems.append(f"the solution cell fails: {err.ename}: {err.evalue}")
                continue
            if i in checks:
                res = checks[i]
                _, err = run(cell, i)
                if err is None:
                    res.problems.append("the check passed on the unsolved stub")
                else:
                    res.stub_message = f"{err.ename}: {err.evalue}"
                    if err.ename != "CheckError":
                        res.problems.append(
                            f"on the stub, the check cell {i} raised {err.ename} instead of "
                            f"a CheckError a student can act on: {err.evalue}"
                        )
                    elif res.stub_raised is None and res.label not in err.evalue:
                        res.problems.append(
                            f"on the stub, the check's message does not name "
                            f"{res.label!r} (was the student's function called "
                            f"through call_student?): {err.evalue}"
                        )
                # the round trip: the original solution cell, then the same check again
                _, err = run(source.cells[res.cell], res.cell)
                if err is not None:
                    res.problems.append(f"the solution cell fails: {err.ename}: {err.evalue}")
                    continue
                done, err = run(cell, i)
                res.solved_output = _text(done).strip()
                if err is not None:
                    res.problems.append(f"with the solution pasted back, the check fails: {err.ename}: {err.evalue}")
                elif "PASS" not in res.solved_output:
                    res.problems.append(
                        f"with the solution pasted back, the check printed no PASS line (got {res.solved_output!r})"
                    )
                continue
            _, err = run(cell, i)
            if err is not None and not _raises_expected(cell):
                stage = "before the first exercise" if i < first_exercise else "after the solutions were pasted back"
                report.problems.append(f"{where} ({stage}) fails: {err.ename}: {err.evalue}")
                break  # what follows would only repeat this failure
    report.seconds = time.perf_counter() - start
    return report


def _error(cell) -> tuple[str, str] | None:
    """(ename, evalue) of the error a cell's outputs hold, if any."""
    for out in cell.get("outputs", []):
        if out.output_type == "error":
            return out.ename, out.evalue
    return None


def run_unsolved(path: Path, *, timeout: int = 300, cwd: Path | None = None, in_process: bool = False) -> Report:
    """ "Run all" on the untouched student edition, as a student who solved nothing would,
    going on after every error. Each stub must raise the NotImplementedError naming its
    exercise, each check must fail with a CheckError, and every other cell must either
    run or stop at once with ExerciseNotSolved (``lab.require``): an unsolved exercise
    never crashes a later cell inside PyTorch or labsupport. (That the solutions pass
    their checks, nbval proves on the solved sources.) Demo cells that need no exercise
    and feed no later cell (:func:`demo_leaves`) are left to nbval too. With ``in_process``, the
    cells run in this Python (:func:`tools.runner.run_in_process`) instead of a fresh kernel.
    """
    from .runner import notebook_client, run_in_process

    path = Path(path)
    source = nbformat.read(path, as_version=4)
    ed = make_edition(source, path)
    nb = ed.notebook
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and _is_skip(source.cells[i]):
            cell.source = ""  # as under nbval: the %tensorboard launcher is not run
    report = Report(path, [ExerciseResult(e.label, e.cell, e.check_cell) for e in ed.exercises])
    # "Run all" goes as far as the last check; after it, the cells that need an exercise are found
    # statically (nbval runs all of them on the solved source anyway).
    last = max([e.check_cell or e.cell for e in ed.exercises], default=len(nb.cells) - 1)
    report.problems += unguarded_uses(
        nb.cells,
        {e.cell for e in ed.exercises} | {e.check_cell for e in ed.exercises if e.check_cell is not None},
        last,
    )
    report.tail_cells = sum(c.cell_type == "code" for c in nb.cells[last + 1 :])
    nb.cells = nb.cells[: last + 1]
    roles = {r.cell: ("exercise", r) for r in report.exercises}
    roles.update({r.check_cell: ("check", r) for r in report.exercises if r.check_cell is not None})
    for i in demo_leaves(nb.cells, set(roles), last):  # nbval runs them; here they would only cost time
        nb.cells[i].source, report.demo_cells = "", report.demo_cells + 1
    start = time.perf_counter()
    if in_process:
        run_in_process(nb, cwd or path.parent, timeout=timeout)
    else:
        notebook_client(nb, cwd or path.parent, timeout=timeout, allow_errors=True).execute()
    report.seconds = time.perf_counter() - start
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        error = _error(cell)
        role, res = roles.get(i, (None, None))
        if role == "exercise":
            res.stub_raised = error and f"{error[0]}: {error[1]}"
            if error is not None and (error[0] != "NotImplementedError" or res.label not in error[1]):
                res.problems.append(
                    f"the stub cell should define its stub or raise "
                    f"NotImplementedError({res.label!r}), but raised {res.stub_raised}"
                )
        elif role == "check":
            res.stub_message = error and f"{error[0]}: {error[1]}"
            if error is None:
                res.problems.append("the check passed on the unsolved stub")
            elif error[0] not in ("CheckError", "ExerciseNotSolved"):
                res.problems.append(f"on the stub, the check raised {res.stub_message} instead of a CheckError")
        elif error is not None and error[0] != "ExerciseNotSolved":
            report.problems.append(
                f"cell {i} crashes when nothing is solved: {error[0]}: {error[1][:200]} "
                f"(start it with lab.require(...) if it uses an exercise's result)"
            )
    return report


def summary(report: Report) -> str:
    """A readable account of a :func:`verify` run (used by the CLI and the tests)."""
    lines = [
        f"{report.path.name}: {len(report.exercises)} exercise(s), {report.checks} check(s), "
        f"{report.seconds:.1f} s"
        + (f" ({report.tail_cells} code cell(s) after the last check not run)" if report.tail_cells else "")
        + (f" ({report.demo_cells} demo cell(s) left to nbval)" if report.demo_cells else "")
    ]
    for e in report.exercises:
        lines.append(f"  {e.label} (cell {e.cell}, check cell {e.check_cell})")
        if e.stub_raised:
            lines.append(f"    exercise cell: {e.stub_raised}")
        lines.append(f"    on the stub:   {e.stub_message}")
        lines.append(f"    solved:        {e.solved_output}")
    for p in report.all_problems:
        lines.append(f"  PROBLEM: {p}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The student edition of the lab's notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("build", "write the student edition (make student)"),
        ("prepare", "create missing student files only (make lab)"),
        ("handout", "write the handout's folder (make handout): the edition and its README"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--src", type=Path, default=ROOT / "notebooks", help="solved notebooks (default notebooks/)")
        p.add_argument("--out", type=Path, default=ROOT / "student", help="student edition (default student/)")
        if name == "build":
            p.add_argument(
                "--force", action="store_true", help="overwrite edited student files too, after backing each up"
            )
    p = sub.add_parser("verify", help="run each notebook's student edition and its round trip")
    p.add_argument("notebooks", nargs="+", type=Path)
    p.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    p.add_argument("--whole", action="store_true", help="also run the cells after the last check")
    p = sub.add_parser("unsolved", help="Run all on the untouched student edition (what make test checks)")
    p.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "build":
            return build(args.src, args.out, force=args.force)
        if args.command == "prepare":
            return prepare(args.src, args.out)
        if args.command == "handout":
            return handout(args.src, args.out)
    except (ExerciseError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    status = 0
    for nb in args.notebooks:
        report = run_unsolved(nb) if args.command == "unsolved" else verify(nb, timeout=args.timeout, whole=args.whole)
        print(summary(report), flush=True)
        status |= bool(report.all_problems)
    return status


if __name__ == "__main__":
    sys.exit(main())

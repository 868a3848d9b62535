"""The instructors' recipe for adding an exercise (docs/instructors.md, section 6), followed
step by step on a copy of the lab: the check in its notebook's module and ``__all__``, the
notebook's cells, the commands the recipe names (read from the docs' own text), then what
the lab promises: the check is exported, the exercise is complete, its stored output says
PASS, and the student edition carries it without its answer."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "instructors.md"
STEM = "01_tensors"

CHECK = '''

def _double_mistakes(x):
    return [Mistake(name="not doubled", matches=x, why="the input came back unchanged: what should happen to it?")]


@exercise("01.7", "doubling a tensor")
def check_double(double: Any) -> None:
    """Check ``double(x) -> 2 * x`` on two seeded cases."""
    generator = torch.Generator().manual_seed(70)
    cases = [(torch.randn(3, generator=generator),), (torch.randn(2, 4, generator=generator),)]
    run_cases(double, cases, lambda x: 2 * x, what="your double(x)", mistakes=_double_mistakes)
    passed("doubling: 2 cases match 2 * x")
'''
CELLS = [
    nbformat.v4.new_markdown_cell(
        "### Exercise 01.7: doubling a tensor\n\nWrite `double(x)`, which returns twice `x`."
    ),
    nbformat.v4.new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
    nbformat.v4.new_code_cell("lab.check_double(double)"),
]


def section_6() -> str:
    """Section 6 of the docs, up to the next section's heading."""
    text = DOCS.read_text()
    start = text.index("## 6. Adding an exercise")
    return text[start : text.index("\n## ", start)]


def recipe_commands() -> list[list[str]]:
    """The ``python -m tools...`` commands of the recipe, for this notebook."""
    commands = re.findall(r"`(python -m tools\.[^`]+)`", section_6())
    return [shlex.split(c.replace("NN_topic", STEM))[1:] for c in commands]


def test_the_recipe_names_its_commands():
    modules = [c[1] for c in recipe_commands()]
    assert modules == ["tools.migrate_exercises", "tools.regenerate"], modules


@pytest.fixture(scope="module")
def lab_copy(tmp_path_factory):
    """A copy of the lab with one notebook, where the recipe is followed."""
    copy = tmp_path_factory.mktemp("lab")
    for folder in ("labsupport", "tools"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / f"{STEM}.ipynb", copy / "notebooks")
    shutil.copy(ROOT / "pyproject.toml", copy)
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__", "test_*.py"))
    return copy


def run(copy: Path, args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(copy), "LAB_RUNS_DIR": str(copy / "runs"), "OMP_NUM_THREADS": "1"}
    env.update({k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")})
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


def test_following_the_recipe_adds_a_working_exercise(lab_copy):
    # Step 1: the check, in the notebook's module, and its name in the module's __all__.
    module = lab_copy / "labsupport" / "checks" / f"nb{STEM}.py"
    source = module.read_text()
    assert "__all__ = [" in source and "Mistake" in source and "run_cases" in source
    source = source.replace("__all__ = [", '__all__ = [\n    "check_double",', 1) + CHECK
    module.write_text(source)
    # Step 3: the notebook's cells, before its summary; then the recipe's commands (step 4 too).
    path = lab_copy / "notebooks" / f"{STEM}.ipynb"
    nb = nbformat.read(path, as_version=4)
    summary = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "Summary" in c.source)
    nb.cells[summary:summary] = CELLS
    nbformat.write(nb, path)
    for args in recipe_commands():
        proc = run(lab_copy, args)
        assert proc.returncode == 0, f"{shlex.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    # Exported: the regenerated check cell reached lab.check_double through `import labsupport as lab`
    # (its PASS line, below); a Python of its own to import it again would cost a torch import.
    nb = nbformat.read(path, as_version=4)
    roles = {c.metadata["lab"]["role"]: c for c in nb.cells if c.metadata.get("lab", {}).get("exercise") == "01.7"}
    assert set(roles) == {"heading", "solution", "check"}
    assert roles["solution"].metadata["lab"]["points"] == 1
    assert "PASS  doubling: 2 cases match 2 * x" in "".join(o.get("text", "") for o in roles["check"].outputs)
    # And regenerating changed nothing else, to the byte: without the three new cells, the notebook is
    # the stored one (this stands for `make regenerate` on every notebook: same seeds, same outputs).
    nb.cells = [c for c in nb.cells if c.metadata.get("lab", {}).get("exercise") != "01.7"]
    assert nbformat.writes(nb) + "\n" == (ROOT / "notebooks" / f"{STEM}.ipynb").read_text()
    # Step 5: the student edition carries the exercise, without its answer.
    proc = run(lab_copy, ["-m", "tools.student", "build", "--out", "student"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    edition = nbformat.read(lab_copy / "student" / f"{STEM}.ipynb", as_version=4)
    stub = next(
        c for c in edition.cells if c.metadata.get("lab", {}).get("exercise") == "01.7" and c.cell_type == "code"
    )
    assert "return 2 * x" not in stub.source and "NotImplementedError" in stub.source

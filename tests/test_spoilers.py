"""No exercise's answer is readable anywhere a student gets it: another notebook, a
labsupport docstring example (help() shows it), the student edition itself, or what a check
says when the answer is wrong."""

import ast
import json
import re
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


def predicted_numbers(cells) -> set[str]:
    """The specific numbers a prediction's solution commits to (``prediction = (3.72, 0.69)``: "3.72", "0.69"):
    floats written with two decimals or more, which no other text of a notebook holds by chance."""
    found = set()
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        lines = text.splitlines()
        for begin, end in student.solution_blocks(text, cell=i):
            for line in lines[begin + 1 : end]:
                if line.strip().startswith("prediction"):
                    found |= set(re.findall(r"(?<![\w.])\d+\.\d{2,}(?![\w.])", line.split("#")[0]))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_predicted_number_is_readable_in_the_student_edition(path):
    # 10.4's derived speed-ups once stood in a table right under the answer cell; the measurement is
    # printed by a cell that runs once the prediction is recorded
    import nbformat

    # 08.1's share once stood as "89%" in the markdown right under its check
    numbers = predicted_numbers(json.loads(path.read_text())["cells"])
    edition = student.make_edition(nbformat.read(path, as_version=4), path).notebook
    shown = [(k, n) for k, c in enumerate(edition.cells) for n in numbers if _reads_as(n, c.source)]
    assert not shown, f"a prediction's answer is readable in the student edition (cell, number): {shown}"


def _reads_as(number: str, text: str) -> bool:
    """Whether ``text`` holds ``number`` (``0.89``), or a fraction's percentage (``89%``, ``89 %``)."""
    if re.search(rf"(?<![\w.]){re.escape(number)}(?!\d)", text):
        return True
    if float(number) >= 1:
        return False
    percent = f"{float(number) * 100:.0f}"
    return re.search(rf"(?<![\w.]){percent}\s?%", text) is not None


def test_the_predicted_number_scan_finds_the_answer_it_was_written_for():
    cells = [{"source": "### BEGIN SOLUTION\nprediction = (3.72, 0.69)   # 4 x 64.9\n### END SOLUTION"}]
    assert predicted_numbers(cells) == {"3.72", "0.69"}
    assert _reads_as("0.69", "a speed-up of 0.69x") and _reads_as("0.89", "So 89% of VGG16's parameters")
    assert not _reads_as("0.89", "189% or 0.891 or 1.89") and not _reads_as("3.72", "372%")


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


# Short but decisive lines. The test above catches a solution copied whole; a fix is often one
# line (03.5's in-place update, 08.2's freeze), so every solution line that does something (an
# operator or a call) and is long enough to be specific is looked for, whitespace and comments
# set aside, in every cell a student reads: code outside the solution regions, comments, and the
# code spans of markdown, in every notebook of the series, and in labsupport's docstring examples.
TOKEN = re.compile(r"\d+\.?\d*(?:e[-+]?\d+)?|\w+|\*\*=?|//=?|->|[-+*/@%&|^<>!=]=|[^\s\w]")
OPERATORS = {
    "=",
    "+",
    "-",
    "*",
    "/",
    "@",
    "**",
    "//",
    "%",
    "-=",
    "+=",
    "*=",
    "/=",
    "@=",
    "<",
    ">",
    "<=",
    ">=",
    "==",
    "!=",
}
MIN_TOKENS = 5

# Boilerplate every training loop of the series writes the same way; none of them is the point
# of the exercise whose solution contains it (each entry says where it is taught in the open).
ALLOWED = {
    "optimizer . zero_grad ( )": "the training step, taught in 06 section 1",
    "optimizer . step ( )": "the training step, taught in 06 section 1",
    "loss . backward ( )": "the training step, taught in 03 section 1",
    "losses . append ( loss . item ( ) )": "recording the loss, in every loop since 02",
    "return loss . item ( )": "a step's loss as a number, in every loop since 06",
    "super ( ) . __init__ ( )": "the first line of every module, taught in 05 section 3",
    "torch . manual_seed ( 0 )": "seeding, in every notebook's setup",
    "w1 . grad = None": "resetting .grad, taught in 03 section 3 (03.5 is about the update, not the reset)",
    "w2 . grad = None": "resetting .grad, taught in 03 section 3",
    "model . train ( )": "train()/eval(), taught in 05 section 7; the exercises decide where they go",
    "model . eval ( )": "train()/eval(), taught in 05 section 7",
    "model . zero_grad ( )": "the training step, taught in 05 section 1",
    "scheduler . step ( )": "schedulers, taught in 06 section 7",
    "x = x / 2": "09.1's prompt states it; the exercise is where the loop lives and what script and trace keep",
    "h = self . linear ( x )": "the forward's first line, Gate's (09): the exercise is the branch after it",
    "return loss . detach ( )": "10's fp32_step returns it; the exercise is the autocast and scaler lines",
}


def tokens(text):
    return TOKEN.findall(text)


def code_part(line):
    """The code of a line, its comment cut off (a '#' inside a string is rare enough here)."""
    return line.split("#", 1)[0]


def balanced(found):
    return all(found.count(a) == found.count(b) for a, b in ("()", "[]", "{}"))


def decisive(line):
    """A whole statement that computes something: not a header (def, class, for, with, a
    decorator: the scaffold often shows them), not a fragment of a statement split over lines."""
    found = tokens(code_part(line))
    if len(found) < MIN_TOKENS or not balanced(found) or found[0] == "@" or found[-1] == ":":
        return False
    call = any(a.isidentifier() and b == "(" for a, b in zip(found, found[1:]))
    return call or bool(OPERATORS & set(found))


def short_solution_lines(cells):
    """{cell index: {normalised solution line}} for the decisive lines of each solution region."""
    found = {}
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        lines = text.splitlines()
        blocks = student.solution_blocks(text, cell=i)
        inside = [lines[k] for b, e in blocks for k in range(b + 1, e)]
        normal = {" ".join(tokens(code_part(t))) for t in inside if decisive(t)}
        normal -= set(ALLOWED)
        if normal:
            found[i] = normal
    return found


def readable_texts(cells):
    """Normalised text of everything a student reads, one entry per line or code span."""
    texts = []
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        lines = text.splitlines()
        if cell["cell_type"] == "markdown":
            if student.solution_blocks(text, cell=i):
                continue  # a written question's model answer: the student edition drops it
            spans = re.findall(r"`([^`]+)`", text)
            texts += [" ".join(tokens(s)) for s in spans]
            texts += [" ".join(tokens(t)) for t in lines if t.startswith("    ")]
            continue
        inside = {k for b, e in student.solution_blocks(text, cell=i) for k in range(b, e + 1)}
        texts += [" ".join(tokens(t)) for k, t in enumerate(lines) if k not in inside]
    return [f" {t} " for t in texts if t]


READABLE = {p.name: readable_texts(json.loads(p.read_text())["cells"]) for p in NOTEBOOKS}
READABLE["labsupport docstrings"] = [f" {' '.join(tokens(line))} " for line in docstring_example_lines()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_decisive_solution_line_is_readable_anywhere(path):
    problems = []
    for cell, answer in short_solution_lines(json.loads(path.read_text())["cells"]).items():
        for line in sorted(answer):
            places = [name for name, texts in READABLE.items() if any(f" {line} " in t for t in texts)]
            if places:
                problems.append(f"{path.name} cell {cell}: solution line {line!r} is readable in {', '.join(places)}")
    assert not problems, "\n".join(problems)


def test_the_short_line_scan_finds_the_spoilers_it_was_written_for():
    cells = [
        {
            "cell_type": "code",
            "source": "def f(w1):\n    ### BEGIN SOLUTION\n    w1 -= lr * w1.grad  # fix\n    ### END SOLUTION\n",
        },
        {"cell_type": "code", "source": "with torch.no_grad():\n    w1-=lr*w1.grad\n"},
        {"cell_type": "markdown", "source": "Freeze it: `model.requires_grad_(False)`."},
    ]
    answer = short_solution_lines(cells)[0]
    assert answer == {"w1 -= lr * w1 . grad"}
    assert any(" w1 -= lr * w1 . grad " in t for t in readable_texts(cells))
    frozen = [{"cell_type": "code", "source": "### BEGIN SOLUTION\nmodel.requires_grad_(False)\n### END SOLUTION"}]
    assert any(f" {line} " in t for line in short_solution_lines(frozen)[0] for t in readable_texts(cells))
    assert not decisive("return losses") and not decisive("x = y")


# The checks' own words. What a check tells the student (a Mistake's why, a CheckError's hint, a
# prediction's notes, explanation and question) never quotes a decisive solution line of its notebook;
# for a find-the-bug exercise, whose prompt hands over code to repair, neither does where it points (look=).
FIND_THE_BUG = {
    "03.5": "the classmate's training loop that did not learn",
    "04.4": "the classmate's Function with a wrong backward",
    "09.4": "the colleague's summarise that breaks the graph",
    "10.6": "the colleague's rank_loader with two bugs",
}
SAID = {
    "Mistake": {"why", "symptom"},
    "CheckError": {"hint"},
    "mistake_error": {"hint"},
    "compare": {"hint"},
    "check_prediction": {"why", "ask", "mistakes"},
}
POINTED = {"Mistake": {"look"}, "CheckError": {"look"}}


def mistake_fields():
    """Mistake's fields in order (name, matches, why, look, ...): its positional arguments."""
    tree = ast.parse((ROOT / "labsupport" / "checks" / "feedback.py").read_text())
    mistake = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Mistake")
    return [n.target.id for n in mistake.body if isinstance(n, ast.AnnAssign)]


POSITIONAL = {"Mistake": mistake_fields()}


def called_name(call):
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return getattr(call.func, "id", None)


def arguments(call):
    """(parameter name, expression) of each argument the call names or that has a known position."""
    names = POSITIONAL.get(called_name(call), [])
    return list(zip(names, call.args)) + [(k.arg, k.value) for k in call.keywords]


class Module:
    """A check module's syntax tree, with what its names and functions stand for."""

    def __init__(self, source):
        self.tree = ast.parse(source)
        self.assigned = {}  # name -> every expression the module assigns to it, or passes to it as a parameter
        self.returned = {}  # function name -> every expression it returns
        functions = {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef)}
        for name, function in functions.items():
            returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
            self.returned[name] = returns
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.assign(target.id, node.value)
            if isinstance(node, ast.Call) and called_name(node) in functions:
                parameters = [a.arg for a in functions[called_name(node)].args.args]
                for parameter, value in zip(parameters, node.args):
                    self.assign(parameter, value)
                for keyword in node.keywords:
                    self.assign(keyword.arg, keyword.value)

    def assign(self, name, value):
        self.assigned.setdefault(name, []).append(value)

    def strings(self, expr, seen=None):
        """The string constants of an expression (f-strings' constant parts included), following the
        names it uses to what the module assigns to them and its own functions' calls to what they return."""
        seen = set() if seen is None else seen
        found = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
            elif isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                for value in self.assigned.get(node.id, []) + self.returned.get(node.id, []):
                    found += self.strings(value, seen)
        return found

    def feedback(self, roles):
        """Normalised texts of every argument that ``roles`` (callee -> parameter names) names."""
        texts = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                wanted = roles.get(called_name(node), set())
                for name, expr in arguments(node):
                    if name in wanted:
                        texts += [f" {' '.join(tokens(s))} " for s in self.strings(expr)]
        return texts


def check_module(notebook):
    return ROOT / "labsupport" / "checks" / f"nb{notebook.stem}.py"


def spoilers_in_feedback(cells, module):
    """'exercise: solution line' for each decisive solution line that the check module's feedback quotes."""
    said = module.feedback(SAID)
    pointed = module.feedback(POINTED)
    found = []
    for cell, answer in short_solution_lines(cells).items():
        exercise = cells[cell].get("metadata", {}).get("lab", {}).get("exercise")
        texts = said + pointed if exercise in FIND_THE_BUG else said
        found += [f"{exercise}: {line!r}" for line in sorted(answer) if any(f" {line} " in t for t in texts)]
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_check_quotes_a_solution_line_of_its_notebook(path):
    cells = json.loads(path.read_text())["cells"]
    found = spoilers_in_feedback(cells, Module(check_module(path).read_text()))
    assert not found, f"{check_module(path).name} quotes solution lines in its feedback:\n" + "\n".join(found)


def test_the_feedback_scan_finds_the_spoilers_it_was_written_for():
    fix = "### BEGIN SOLUTION\nw1 -= lr * w1.grad\n### END SOLUTION\n"
    cells = [{"cell_type": "code", "source": fix, "metadata": {"lab": {"exercise": "03.5", "role": "solution"}}}]
    quoting = {
        "a why": 'Mistake("rebinds", None, "write w1 -= lr*w1.grad")',
        "a why= by name": 'WHY = f"the fix: w1 -= lr * w1.grad ({n})"\nMistake("rebinds", None, why=WHY)',
        "a hint": 'raise CheckError("wrong", hint="use " + "w1 -= lr * w1.grad")',
        "a prediction's note": 'check_prediction("p", p, 1, why="w", mistakes={0: "w1 -= lr * w1.grad"})',
        "a function's text": 'def fix():\n    return "w1 -= lr * w1.grad"\nCheckError("wrong", hint=fix())',
        "a parameter": 'def fail(tip):\n    raise CheckError("wrong", hint=tip)\nfail("w1 -= lr * w1.grad")',
        "a find-the-bug look": 'Mistake("rebinds", None, "which tensor?", "w1 -= lr * w1.grad")',
    }
    for place, source in quoting.items():
        assert spoilers_in_feedback(cells, Module(source)) == ["03.5: 'w1 -= lr * w1 . grad'"], place
    cells[0]["metadata"]["lab"]["exercise"] = "02.3"  # not a find-the-bug exercise: its look= may show code
    assert spoilers_in_feedback(cells, Module('Mistake("x", None, "which tensor?", look="w1 -= lr * w1.grad")')) == []
    # quoting the broken line the prompt hands over is no spoiler
    assert spoilers_in_feedback(cells, Module('Mistake("x", None, "after w1 = w1 - lr * w1.grad, which w1?")')) == []

"""Every notebook follows the lab's template and its stored outputs are fit for nbval."""

import json
import re
from pathlib import Path

import nbformat
import pytest

from tools import regenerate

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def cells(path):
    return nbformat.read(path, as_version=4).cells


def code_cells(path):
    return [c for c in cells(path) if c.cell_type == "code"]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_template(path):
    cs = cells(path)
    first = cs[0].source
    assert cs[0].cell_type == "markdown" and first.startswith(f"# {path.stem[:2]} ·"), "title first"
    assert "**You will learn**" in first and "**Before this:**" in first
    setup = next(c for c in cs if c.cell_type == "code")
    assert "nbval-ignore-output" in setup.metadata.get("tags", []), "setup cell must be tagged nbval-ignore-output"
    for needed in ("import labsupport as lab", "lab.seed_everything(", "lab.pick_device(", "lab.print_environment("):
        assert needed in setup.source, f"setup cell lacks {needed!r}"
    last = cs[-1].source
    assert cs[-1].cell_type == "markdown" and "## Summary" in last and "**Next:**" in last


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_is_followed_by_a_check(path):
    cs = cells(path)
    for i, c in enumerate(cs):
        if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source:
            assert c.source.count("### BEGIN SOLUTION") == c.source.count("### END SOLUTION") == 1
            nxt = next(c for c in cs[i + 1 :] if c.cell_type == "code")
            assert re.search(r"\blab\.check_\w+\(", nxt.source), (
                f"cell {i}: the code cell after an exercise must call a lab.check_... function"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_clean(path):
    counts = []
    for i, c in enumerate(code_cells(path)):
        tags = set(c.metadata.get("tags", []))
        assert not re.search(r"^\s*#\s*NBVAL_", c.source, re.M), f"code cell {i}: use a cell tag, not a NBVAL_ comment"
        ignored = bool(tags & {"nbval-ignore-output", "nbval-skip"})
        if "nbval-skip" not in tags:
            assert c.execution_count is not None, f"code cell {i} was never executed"
            counts.append(c.execution_count)
        for out in c.outputs:
            assert out.output_type != "error", f"code cell {i} stores an error"
            if not ignored:
                assert out.get("name") != "stderr", f"code cell {i}: stderr in a compared output: {out.text[:80]!r}"
                text = json.dumps(out.get("text", "")) + json.dumps(out.get("data", {}).get("text/plain", ""))
                assert not re.search(r"/tmp/ipykernel_\d+", text), f"code cell {i}: kernel path in output"
    assert counts == list(range(1, len(counts) + 1)), "not run top to bottom from a fresh kernel"


def test_normalise_removes_per_run_noise():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.metadata["widgets"] = {"state": {}}
    nb.cells[0].metadata["execution"] = {"iopub.status.busy": "2026-01-01"}
    nb.cells[0].outputs = [
        nbformat.v4.new_output("display_data", data={regenerate.WIDGET_VIEW: {"model_id": "abc123"}}),
        nbformat.v4.new_output("stream", name="stdout", text="logged to ../runs/02_x/run-20260101-120000\n"),
    ]
    out = regenerate.normalise(nb)
    assert "widgets" not in out.metadata and "execution" not in out.cells[0].metadata
    assert out.cells[0].outputs[0].data[regenerate.WIDGET_VIEW]["model_id"] == "cell0-output0"
    assert out.cells[0].outputs[1].text == "logged to runs/02_x/run\n"  # any location and old timestamps read alike


def test_regenerate_keeps_ignored_outputs_of_unchanged_cells():
    tagged = {"tags": ["nbval-ignore-output"]}
    old = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("t()", metadata=tagged),
            nbformat.v4.new_code_cell("changed()", metadata=tagged),
        ]
    )
    old.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1.0 s\n")]
    old.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="old\n")]
    new = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("t()", metadata=tagged),
            nbformat.v4.new_code_cell("changed(2)", metadata=tagged),
        ]
    )
    new.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1.3 s\n")]
    new.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="new\n")]
    old.cells[0].execution_count, old.cells[1].execution_count = 1, 2
    assert regenerate.keep_ignored_outputs(old, new) == 1
    assert new.cells[0].outputs[0].text == "1.0 s\n" and new.cells[1].outputs[0].text == "new\n"
    # A cell never run before (fresh from an outline) takes its new outputs.
    old.cells[0].execution_count = None
    new.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1.3 s\n")]
    assert regenerate.keep_ignored_outputs(old, new) == 0


def test_normalise_merges_stream_chunks():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print()")])
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\n"),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
        nbformat.v4.new_output("stream", name="stderr", text="c\n"),
    ]
    outs = regenerate.normalise(nb).cells[0].outputs
    assert [(o.name, o.text) for o in outs] == [("stdout", "a\nb\n"), ("stderr", "c\n")]


# That regenerating a real notebook reproduces its stored outputs to the byte is checked where the
# recipe's test regenerates notebook 01 anyway (tests/test_recipe.py): one execution instead of two.


def _png(y) -> str:
    """A loss-curve plot of ``y`` as a notebook stores it (base64 PNG)."""
    import base64
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    fig.add_subplot().semilogy(y)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode()


def _plot_cell(source: str, text: str, png: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=text),
        nbformat.v4.new_output(
            "display_data", data={"image/png": png, "text/plain": "<Figure size 600x350 with 1 Axes>"}
        ),
    ]
    return cell


def test_regenerate_keeps_a_plot_that_moved_by_float_noise_only():
    import numpy as np

    y = np.exp(-np.arange(300) / 60) + 0.01
    stored = _png(y)
    noisy = _png(y * (1 + 1e-4 * np.random.default_rng(0).standard_normal(300)))  # another CPU's sums
    other = _png(y**2)  # a real change of the curve
    assert noisy != stored and regenerate.images_close(stored, noisy)
    assert not regenerate.images_close(stored, other) and not regenerate.images_close(stored, _png(y[:100]))
    old = nbformat.v4.new_notebook(cells=[_plot_cell(s, "loss 0.012\n", stored) for s in "abcd"])
    new = nbformat.v4.new_notebook(
        cells=[
            _plot_cell("a", "loss 0.012\n", noisy),  # same source and text, pixels alike: keeps the stored PNG
            _plot_cell("b", "loss 0.012\n", other),  # the picture changed: stored anew
            _plot_cell("c", "loss 0.013\n", noisy),  # a text output changed: everything stored anew
            _plot_cell("d2", "loss 0.012\n", noisy),  # the source changed: stored anew
        ]
    )
    assert regenerate.keep_close_images(old, new) == 1
    assert [c.outputs[1].data["image/png"] for c in new.cells] == [stored, other, noisy, noisy]


PLOT_NOTEBOOK = """\
import os
import matplotlib.pyplot as plt
import numpy as np
noise = float(os.environ.get("LAB_TEST_NOISE", "0")) * np.random.default_rng(0).standard_normal(300)
y = (np.exp(-np.arange(300) / 60) + 0.01) * (1 + noise)
print(f"final loss {y[-1]:.3f}")
plt.semilogy(y)
plt.show()"""


def test_regenerate_on_another_cpu_leaves_a_plot_notebook_unchanged(tmp_path, monkeypatch):
    path = tmp_path / "plot.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PLOT_NOTEBOOK)]), path)
    regenerate.execute(path)
    first = path.read_text()
    assert '"image/png"' in first
    kept = []
    keep = regenerate.keep_close_images
    monkeypatch.setattr(regenerate, "keep_close_images", lambda old, new: kept.append(keep(old, new)) or kept[-1])
    monkeypatch.setenv("LAB_TEST_NOISE", "1e-4")  # the kernel inherits it: float noise, same printed numbers
    regenerate.execute(path)
    assert kept == [1], "the noise did not reach the pixels: the test proves nothing"
    assert path.read_text() == first


# A dollar sign before a plain number ("$749 ... $2,499") opens math in JupyterLab and in the site's MathJax,
# which then typesets the words between two prices: a span between two dollar signs that reads as prose
# (two words in a row, no \\text) is such an accident; a formula ($2n^3$, $3 \\times 3$) is not.
INLINE_MATH = re.compile(r"(?<![\\$])\$([^$\n]+)\$(?!\$)")
PROSE = re.compile(r"[A-Za-z]{3,}[,;)]? +\(?[A-Za-z]{3,}")


def prose_in_math(markdown: str) -> list[str]:
    """The spans between two dollar signs that read as prose (outside `code`)."""
    text = re.sub(r"`[^`]*`", "", markdown)
    return [m.group(1) for m in INLINE_MATH.finditer(text) if PROSE.search(m.group(1)) and "\\text" not in m.group(1)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_prose_is_typeset_as_math(path):
    nb = nbformat.read(path, as_version=4)
    found = [
        (i, span[:60]) for i, c in enumerate(nb.cells) if c.cell_type == "markdown" for span in prose_in_math(c.source)
    ]
    assert not found, f"text between two dollar signs becomes math (write USD 749, not $749): {found[:3]}"


def test_the_math_scan_finds_prices_and_leaves_formulas():
    assert prose_in_math("Ryzen $749 (AMD, November 2019); Titan RTX $2,499 (NVIDIA)") == [
        "749 (AMD, November 2019); Titan RTX "
    ]
    assert prose_in_math("does $2n^3$ FLOP on $3n^2$ numbers, a $3 \\times 3$ kernel, $f(x + h)$, `a$b c$d`") == []

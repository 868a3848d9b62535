"""The lab as a static website: ``make site`` writes ``build/site/``.

    python -m tools.website [--src notebooks] [--out build/site]

One HTML page per notebook, with the stored outputs and plots of the demos, and
an index. The site is public, so it never shows a solution: each page is made
from the *student edition* of its notebook (solution regions become stubs;
exercise and check cells lose their outputs), keeping the other cells' outputs, except
those that show what a prediction is about (they begin with ``lab.require`` of a
prediction exercise): a reader would see every outcome before predicting it.
Each page links to its notebook in Colab and to a download of its student
edition, which the site carries under ``student/`` (publish the folder as the
``gh-pages`` branch and the Colab links resolve).

Why nbconvert and not JupyterBook: nbconvert already comes with JupyterLab (no
new dependency, no Sphinx build), renders exactly the stored outputs nbval
checked, and eleven pages plus an index need no table-of-contents machinery.

The site works offline (opened from disk or a server without internet): it loads
nothing from a CDN. MathJax 2 comes from the ``jupyter-server-mathjax`` package
(what Jupyter itself serves) and is copied into ``mathjax/`` (only what renders
TeX to HTML-CSS with the STIX web fonts, ~2.5 MB); mermaid and require.js, which
no page uses, are left out (a notebook that draws a mermaid diagram stops the
build). Exercise and check cells are shown as the student gets them: stubs, no
outputs, and no execution counts on any cell (a student's copy has none), each
labelled "Exercise" or "Check" instead.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from pathlib import Path

import jinja2
import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters.strings import clean_html

from . import colab, student
from .regenerate import WIDGET_VIEW

ROOT = Path(__file__).resolve().parent.parent
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "nav.lab{display:flex;gap:1rem;flex-wrap:wrap;padding:.6rem 1rem;background:#f3f4f6;"
    "border-bottom:1px solid #ddd;font-family:system-ui,sans-serif;font-size:.95rem}"
    "nav.lab a{color:#1f4fbf;text-decoration:none}li{margin:.6rem 0}.blurb{color:#555}"
    ".blurb code{background:#f3f4f6;padding:0 .2em}ul.notebooks{list-style:none;padding-left:0}"
    "p.lab-note{color:#555;font:.95rem system-ui,sans-serif;margin:.8rem 1rem}"
)
# What marks exercise and check cells on a page (cell tags become classes in nbconvert's lab template).
CELL_STYLE = (
    ".celltag_lab-exercise,.celltag_lab-check{border-left:4px solid #e8a33d;padding-left:.4rem}"
    ".celltag_lab-check{border-left-color:#5b8def}"
    ".celltag_lab-exercise::before,.celltag_lab-check::before{font:600 .85rem system-ui,sans-serif;color:#555}"
    '.celltag_lab-exercise::before{content:"Exercise: your code goes here"}'
    '.celltag_lab-check::before{content:"Check: run it after the exercise"}'
    ".jp-Cell.celltag_lab-setup .jp-InputArea-editor pre{max-height:9em;overflow:auto}"
    ".celltag_lab-setup::before{font:600 .85rem system-ui,sans-serif;color:#555;"
    "content:\"Setup cell: loads the lab's helpers (and installs them where they are missing, as on Colab); "
    'scroll it to read all of it"}'
    ".celltag_lab-outcome{border-left:4px solid #9aa3ad;padding-left:.4rem}"
    ".celltag_lab-outcome::after{font:600 .85rem system-ui,sans-serif;color:#555;"
    'content:"Output not shown here: it is what the prediction above asks about. In the notebook it runs once '
    'your prediction is recorded."}'
)
EXERCISE_TAG = "lab-exercise"
CHECK_TAG = "lab-check"
OUTCOME_TAG = "lab-outcome"
SETUP_TAG = "lab-setup"
# Under each page's bar: where its outputs come from (the exercise cells show the starting code).
PAGE_NOTE = (
    '<p class="lab-note">The outputs on this page come from a run of the solved notebook; each exercise cell '
    "shows the starting code you get, and its check cell shows no output. Open the notebook (Colab, or "
    "<code>make lab</code> on your machine) to solve the exercises.</p>"
)
# A prediction's check (lab.check_sweep_prediction(...)), and the lab.require(...) that opens its demo cells.
PREDICTION_CHECK = re.compile(r"\blab\.check_\w*_prediction\(")
REQUIRE = re.compile(r"lab\.require\(([^)]*)\)")
MATHJAX_DIR = "mathjax"
# The files of jupyter-server-mathjax's MathJax 2.7 that its TeX-AMS-MML_HTMLorMML config loads
# to typeset TeX in Chromium and Firefox (HTML-CSS output, STIX-Web fonts), with the TeX
# extensions a formula may ask for; not its localizations, a11y tools or SVG output (9 of 12 MB).
MATHJAX_FILES = (
    "LICENSE",
    "MathJax.js",
    "config/*.js",
    "extensions/*.js",
    "extensions/TeX/**/*",
    "extensions/HTML-CSS/*.js",
    "jax/element/**/*",
    "jax/input/TeX/*.js",
    "jax/output/HTML-CSS/**/*",
    "fonts/HTML-CSS/STIX-Web/woff/**/*",
)
# nbconvert's lab page without its CDN scripts: MathJax from mathjax/, no require.js (for
# widgets, which regenerate strips) and no mermaid (no notebook draws a diagram).
PAGE_TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  tex2jax: {inlineMath: [["$", "$"], ["\\(", "\\)"]], displayMath: [["$$", "$$"], ["\\[", "\\]"]],
            processEscapes: true, processEnvironments: true},
  TeX: {equationNumbers: {autoNumber: "AMS", useLabelIds: true}},
  "HTML-CSS": {availableFonts: [], webFont: "STIX-Web", imageFont: null, preferredFont: null,
               linebreaks: {automatic: true}},
  "fast-preview": {disabled: true},
  displayAlign: "center",
  messageStyle: "none"
});
</script>
<script src="{{ resources.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
"""


# Markup with no tag but div, pre, span and code, each with at most a class: what Pygments
# makes of a code cell, its text escaped. Sanitizing it changes nothing, yet nbconvert's
# template runs bleach on every highlighted code cell: a third of the build's time.
_PLAIN_MARKUP = re.compile(r'(?:[^<>]+|</?(?:div|pre|span|code)(?: class="[\w -]*")?>)*')


def sanitized(markup: str | bytes) -> str:
    """nbconvert's ``clean_html``, skipped where it has nothing to remove (_PLAIN_MARKUP)."""
    markup = markup.decode() if isinstance(markup, bytes) else str(markup)
    return markup if _PLAIN_MARKUP.fullmatch(markup) else clean_html(markup)


_CODE_SPAN = re.compile(r"(`[^`]*`)")


def title_and_blurb(nb: nbformat.NotebookNode) -> tuple[str, str]:
    """The notebook's ``# NN · title`` heading and the first sentence after it, as markdown
    whose emphasis marks are gone and whose `code spans` are kept as they are."""
    first = nb.cells[0].source.splitlines()
    title = first[0].lstrip("# ").strip()
    body = " ".join(line for line in first[1:] if line.strip() and not line.startswith(("**", "-")))
    parts = _CODE_SPAN.split(body.strip())
    sentence = []
    for k, part in enumerate(parts):
        if k % 2:  # a code span: no sentence ends inside it, and its characters stay
            sentence.append(part)
            continue
        head, *rest = re.split(r"(?<=[.!?])\s", part, maxsplit=1)
        sentence.append(re.sub(r"\*+|(?<!\w)_+|_+(?!\w)", "", head))
        if rest:
            break
    return title, "".join(sentence).strip()


def inline_html(markdown: str) -> str:
    """Escaped HTML of a one-line markdown text whose only markup is `code spans`."""
    parts = _CODE_SPAN.split(markdown)
    return "".join(f"<code>{html.escape(p[1:-1])}</code>" if k % 2 else html.escape(p) for k, p in enumerate(parts))


def copy_mathjax(out: Path) -> Path:
    """Copy MATHJAX_FILES of jupyter-server-mathjax into ``out``; returns MathJax.js's path."""
    try:
        import jupyter_server_mathjax
    except ImportError as exc:
        raise SystemExit("the site needs jupyter-server-mathjax (make install, or pip install -e '.[lab]')") from exc
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    for pattern in MATHJAX_FILES:
        for path in static.glob(pattern):
            if path.is_file():
                target = out / path.relative_to(static)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return out / "MathJax.js"


# The index's paragraph on taking the course: where, in what order, and what "the lecture" is.
HOW_TO = (
    "<p><b>How to take it.</b> In order, from 00: each notebook builds on the one before. Open a notebook in "
    "Colab (the link beside it), or work on your own machine: clone "
    f'<a href="https://github.com/{colab.REPO}">the repository</a> and run <code>make lab</code> (its README says '
    "what else is needed: Python 3.10 or later and <code>make</code>; a GPU is optional). You need Python and some linear "
    "algebra and calculus (matrix products, the chain rule); no PyTorch.</p>"
    "<p><b>&ldquo;The lecture&rdquo;.</b> The notebooks follow a lecture on deep-learning hardware and software "
    "(CPUs, GPUs and TPUs, then PyTorch from tensors to static and dynamic graphs). Where they say &ldquo;the "
    "lecture&rdquo; they mean its example, the two-layer ReLU network on random data, and its figures. Each "
    "notebook restates what it uses from it: you do not need the lecture at hand.</p>"
)


def mark_exercises(edition: student.Edition) -> None:
    """Tag the edition's exercise and check cells (CELL_STYLE labels them on the page)."""
    cells = edition.notebook.cells
    for ex in edition.exercises:
        for index, tag in ((ex.cell, EXERCISE_TAG), (ex.check_cell, CHECK_TAG)):
            if index is not None:
                tags = cells[index].metadata.setdefault("tags", [])
                tags.append(tag)


def mark_setup(edition: student.Edition) -> None:
    """Tag the notebook's setup cell, its first code cell (CELL_STYLE shows a few lines of it, and says what it
    is): its install fallback is the same in every notebook, and long."""
    for cell in edition.notebook.cells:
        if cell.cell_type == "code":
            if "import labsupport as lab" in cell.source:
                cell.metadata.setdefault("tags", []).append(SETUP_TAG)
            return


def hide_outcomes(edition: student.Edition) -> None:
    """Empty the stored outputs of the cells that show a prediction's outcome (they begin with
    ``lab.require`` of a prediction exercise) and tag them (CELL_STYLE says why on the page): the
    public site would otherwise print every prediction's answer before the student makes it."""
    cells = edition.notebook.cells
    predictions = {
        ex.id
        for ex in edition.exercises
        if ex.check_cell is not None and PREDICTION_CHECK.search(cells[ex.check_cell].source)
    }
    for cell in cells:
        required = REQUIRE.match(cell.source) if cell.cell_type == "code" else None
        if required and predictions & set(re.findall(r"[\"']([0-9]+\.[0-9]+)[\"']", required.group(1))):
            cell.outputs = []
            cell.metadata.setdefault("tags", []).append(OUTCOME_TAG)


#: What a written answer's cell says on a page: a static page has no cell to double-click.
PAGE_ANSWER = "*(A written answer: in the notebook, you write it here.)*"


def mark_written_answers(edition: student.Edition) -> None:
    """Put :data:`PAGE_ANSWER` where the student edition tells how to edit a written answer's cell."""
    for answer in edition.answers:
        cell = edition.notebook.cells[answer.cell]
        cell.source = cell.source.replace(student.ANSWER_PLACEHOLDER, PAGE_ANSWER)


def drop_progress_bars(edition: student.Edition) -> None:
    """Remove the stored outputs that are widget views: the progress bars of training loops. Regenerate keeps
    no widget state, so a page could only show such a bar as it was drawn first (``epochs: 0%|``), stuck at
    zero, and a reader of a finished run needs no bar."""
    for cell in edition.notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [out for out in cell.outputs if WIDGET_VIEW not in out.get("data", {})]


def nav(name: str, names: list[str]) -> str:
    """The bar at the top of a page: index, Colab, download, previous and next."""
    i = names.index(name)
    links = [
        '<a href="index.html">All notebooks</a>',
        f'<a href="{colab.colab_url(name)}">Open in Colab</a>',
        f'<a href="student/{name}" download>Download the notebook</a>',
    ]
    if i > 0:
        links.append(f'<a href="{Path(names[i - 1]).stem}.html">&larr; {Path(names[i - 1]).stem}</a>')
    if i + 1 < len(names):
        links.append(f'<a href="{Path(names[i + 1]).stem}.html">{Path(names[i + 1]).stem} &rarr;</a>')
    return f'<nav class="lab">{" ".join(links)}</nav>'


def build(src: Path, out: Path) -> list[Path]:
    """Write the site; returns the pages written (index first)."""
    paths = sorted(src.glob("[0-9][0-9]_*.ipynb"))
    names = [p.name for p in paths]
    if out.exists():
        shutil.rmtree(out)
    (out / "student").mkdir(parents=True)
    mathjax = copy_mathjax(out / MATHJAX_DIR)
    exporter = HTMLExporter(
        template_name="lab",
        template_file="site.html.j2",
        extra_loaders=[jinja2.DictLoader({"site.html.j2": PAGE_TEMPLATE})],
        filters={"clean_html": sanitized},
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        mathjax_url=f"{mathjax.relative_to(out).as_posix()}?config=TeX-AMS-MML_HTMLorMML-full,Safe",
    )
    entries, pages = [], []
    for path in paths:
        source = nbformat.read(path, as_version=4)
        edition = student.make_edition(source, path, keep_outputs=True)
        mark_exercises(edition)
        mark_setup(edition)
        hide_outcomes(edition)
        drop_progress_bars(edition)
        mark_written_answers(edition)
        (out / "student" / path.name).write_bytes(student.generate(path))
        body, _ = exporter.from_notebook_node(edition.notebook)
        if 'class="jp-Mermaid"' in body:
            raise SystemExit(f"{path.name} draws a mermaid diagram: vendor mermaid.js into the site (tools/website.py)")
        title, blurb = title_and_blurb(source)
        body = body.replace("<body", f'<body data-notebook="{path.stem}"', 1)
        body_start = re.search(r"<body[^>]*>", body).end()
        body = body[:body_start] + nav(path.name, names) + PAGE_NOTE + body[body_start:]
        body = body.replace("<title>Notebook</title>", f"<title>{html.escape(title)}</title>")
        style = STYLE.split("body{")[1].split("}", 1)[1] + CELL_STYLE
        body = body.replace("</head>", f"<style>{style}</style></head>", 1)
        page = out / f"{path.stem}.html"
        page.write_text(body)
        pages.append(page)
        entries.append(
            f'<li><a href="{page.name}">{html.escape(title)}</a> · <a href="{colab.colab_url(path.name)}">'
            f'Colab</a><div class="blurb">{inline_html(blurb)}</div></li>'
        )
    index = out / "index.html"
    index.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>PyTorch lab</title>'
        f"<style>{STYLE}</style></head><body><h1>The PyTorch lab</h1>"
        f"<p>Eleven notebooks, from the hardware under PyTorch to training on several GPUs. "
        f"Read them here with their outputs, or open one in Colab and solve its exercises: "
        f"every exercise has a check that says what it expected and what it got.</p>"
        f"{HOW_TO}"
        f'<ul class="notebooks">{"".join(entries)}</ul></body></html>\n'
    )
    return [index, *pages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    args = parser.parse_args(argv)
    pages = build(args.src, args.out)
    print(f"wrote {len(pages)} pages to {args.out} (open {pages[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

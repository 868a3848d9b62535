"""The lab as a static website: ``make site`` writes ``build/site/``.

    python -m tools.website [--src notebooks] [--out build/site]

One HTML page per notebook, with the stored outputs and plots of the demos, and
an index. The site is public, so it never shows a solution: each page is made
from the *student edition* of its notebook (solution regions become stubs;
exercise and check cells lose their outputs), keeping the other cells' outputs.
Each page links to its notebook in Colab and to a download of its student
edition, which the site carries under ``student/`` (publish the folder as the
``gh-pages`` branch and the Colab links resolve).

Why nbconvert and not JupyterBook: nbconvert already comes with JupyterLab (no
new dependency, no Sphinx build), renders exactly the stored outputs nbval
checked, and eleven pages plus an index need no table-of-contents machinery.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters.strings import clean_html

from . import colab, student

ROOT = Path(__file__).resolve().parent.parent
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "nav.lab{display:flex;gap:1rem;flex-wrap:wrap;padding:.6rem 1rem;background:#f3f4f6;"
    "border-bottom:1px solid #ddd;font-family:system-ui,sans-serif;font-size:.95rem}"
    "nav.lab a{color:#1f4fbf;text-decoration:none}li{margin:.6rem 0}.blurb{color:#555}"
)


# Markup with no tag but div, pre, span and code, each with at most a class: what Pygments
# makes of a code cell, its text escaped. Sanitizing it changes nothing, yet nbconvert's
# template runs bleach on every highlighted code cell: a third of the build's time.
_PLAIN_MARKUP = re.compile(r'(?:[^<>]+|</?(?:div|pre|span|code)(?: class="[\w -]*")?>)*')


def sanitized(markup: str | bytes) -> str:
    """nbconvert's ``clean_html``, skipped where it has nothing to remove (_PLAIN_MARKUP)."""
    markup = markup.decode() if isinstance(markup, bytes) else str(markup)
    return markup if _PLAIN_MARKUP.fullmatch(markup) else clean_html(markup)


def title_and_blurb(nb: nbformat.NotebookNode) -> tuple[str, str]:
    """The notebook's ``# NN · title`` heading and the first sentence after it."""
    first = nb.cells[0].source.splitlines()
    title = first[0].lstrip("# ").strip()
    body = " ".join(line for line in first[1:] if line.strip() and not line.startswith(("**", "-")))
    sentence = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    return title, re.sub(r"[`*]", "", sentence)


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
    exporter = HTMLExporter(template_name="lab", filters={"clean_html": sanitized})
    entries, pages = [], []
    for path in paths:
        source = nbformat.read(path, as_version=4)
        public = student.make_edition(source, path, keep_outputs=True).notebook
        (out / "student" / path.name).write_bytes(student.generate(path))
        body, _ = exporter.from_notebook_node(public)
        title, blurb = title_and_blurb(source)
        body = body.replace("<body", f'<body data-notebook="{path.stem}"', 1)
        body_start = re.search(r"<body[^>]*>", body).end()
        body = body[:body_start] + nav(path.name, names) + body[body_start:]
        body = body.replace("<title>Notebook</title>", f"<title>{html.escape(title)}</title>")
        body = body.replace("</head>", f"<style>{STYLE.split('body{')[1].split('}', 1)[1]}</style></head>", 1)
        page = out / f"{path.stem}.html"
        page.write_text(body)
        pages.append(page)
        entries.append(
            f'<li><a href="{page.name}">{html.escape(title)}</a> · <a href="{colab.colab_url(path.name)}">'
            f'Colab</a><div class="blurb">{html.escape(blurb)}</div></li>'
        )
    index = out / "index.html"
    index.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>PyTorch lab</title>'
        f"<style>{STYLE}</style></head><body><h1>The PyTorch lab</h1>"
        f"<p>Eleven notebooks, from the hardware under PyTorch to training on several GPUs. "
        f"Read them here with their outputs, or open one in Colab and solve its exercises: "
        f"every exercise has a check that says what it expected and what it got.</p>"
        f"<ol>{''.join(entries)}</ol></body></html>\n"
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

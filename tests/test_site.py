"""`make site`: a static HTML site of the series, with outputs, without solutions."""

import html
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from browser import chromium_or_skip
from test_spoilers import solution_lines

from tools import colab, student, website

ROOT = Path(__file__).resolve().parent.parent


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The site, built once for this module as `make site` builds it."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "tools.website", "--out", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"python -m tools.website failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return out


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_index_links_every_page_with_colab(built):
    index = (built / "index.html").read_text()
    for path in NOTEBOOKS:
        assert f'href="{path.stem}.html"' in index and colab.colab_url(path.name) in index
        assert (built / f"{path.stem}.html").is_file() and (built / "student" / path.name).is_file()


def test_index_says_how_to_take_the_course_and_what_the_lecture_is(built):
    """A newcomer read "the lecture's GPU" on every page with no lecture named, and took the index's 1. for
    notebook 00: the index now says where to start, what is needed and what "the lecture" means, unnumbered."""
    index = (built / "index.html").read_text()
    assert f'href="https://github.com/{colab.REPO}"' in index and "<code>make lab</code>" in index
    assert "&ldquo;The lecture&rdquo;" in index and "you do not need the lecture at hand" in index
    assert '<ul class="notebooks">' in index and "<ol" not in index


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_page_says_where_its_outputs_come_from_and_shows_its_setup_cell_short(built, path):
    """The setup cell (its install fallback is 20 long lines) is shown a few lines high, scrollable and labelled;
    a note under the bar says the outputs come from the solved notebook (07's trained curves under a stub)."""
    raw = (built / f"{path.stem}.html").read_text()
    assert website.PAGE_NOTE in raw
    tagged = [m.start() for m in re.finditer(rf'class="[^"]*\bcelltag_{website.SETUP_TAG}\b', raw)]
    assert len(tagged) == 1, f"{len(tagged)} cells tagged as the setup cell"
    setup_at = tagged[0]
    assert "import labsupport as lab" in html.unescape(re.sub(r"<[^>]+>", "", raw[setup_at : setup_at + 20000]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_page_has_outputs_and_links_but_no_solution(built, path):
    page = built / f"{path.stem}.html"
    raw = page.read_text()
    assert colab.colab_url(path.name) in raw and f'href="student/{path.name}" download' in raw
    source = json.loads(path.read_text())["cells"]
    if any("image/png" in o.get("data", {}) for c in source if c["cell_type"] == "code" for o in c["outputs"]):
        assert "data:image/png;base64" in raw  # the demos' plots are on the page
    text = set(line.strip() for line in text_of(page).splitlines())
    for cell, answer in solution_lines(source).items():
        hit = answer & text
        assert not (len(hit) >= 2 and len(hit) >= 0.5 * len(answer)), f"cell {cell}'s solution is on the page: {hit}"
    downloaded = json.loads((built / "student" / path.name).read_text())
    assert downloaded["metadata"]["labsupport"]["edition"] == "student"


def offline_chromium(chromium: str, profile: Path) -> list[str]:
    """Headless Chromium with the network off: every http(s) request goes to a proxy that
    refuses it (127.0.0.1:9), every host name fails to resolve; file:// pages still load."""
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
    ]


def test_pages_render_in_headless_chromium(built, tmp_path):
    chromium = chromium_or_skip()  # fails instead under CI=true (tests/browser.py)
    for page in ("index.html", f"{NOTEBOOKS[2].stem}.html"):
        shot = tmp_path / f"{page}.png"
        subprocess.run(
            [
                *offline_chromium(chromium, tmp_path / "profile"),
                "--window-size=1200,1400",
                "--virtual-time-budget=10000",
                f"--screenshot={shot}",
                (built / page).as_uri(),
            ],
            capture_output=True,
            timeout=120,
        )
        assert shot.is_file() and shot.stat().st_size > 20_000, f"{page} did not render"


# Reports, once MathJax has typeset the page (or at load, if it never came), which fonts loaded
# and which URLs the page fetched, in a <pre id="probe"> that --dump-dom shows.
PROBE = """<script>
function labProbe(mathjax) {
  var fonts = [];
  document.fonts.forEach(function (f) { fonts.push(f.family + ":" + f.status); });
  var urls = performance.getEntriesByType("resource").map(function (e) { return e.name; });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify({mathjax: mathjax, fonts: fonts, urls: urls});
  document.body.appendChild(pre);
}
window.addEventListener("load", function () {
  if (window.MathJax && MathJax.Hub) { MathJax.Hub.Register.StartupHook("End", function () { labProbe(true); }); }
  else { labProbe(false); }
});
</script></body>"""
# TeX that MathJax did not typeset: display delimiters, or $...$ around TeX-looking text.
RAW_TEX = re.compile(r"\$\$|\\\(|\\\[|\$[^$\n]{0,200}[\\^_{}][^$\n]{0,200}\$")


class RenderedText(HTMLParser):
    """The text a reader sees outside code, and the classes of every element."""

    SKIP = {"script", "style", "pre", "code", "textarea"}

    def __init__(self) -> None:
        super().__init__()
        self.text, self.classes, self.depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        self.classes.extend((dict(attrs).get("class") or "").split())
        self.depth += tag in self.SKIP

    def handle_endtag(self, tag):
        self.depth -= tag in self.SKIP and self.depth > 0

    def handle_data(self, data):
        if not self.depth:
            self.text.append(data)


def has_math(path: Path) -> bool:
    md = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return bool(re.search(r"\$[^$\n]+\$", md))


def test_pages_load_nothing_from_the_network(built):
    assert (built / website.MATHJAX_DIR / "MathJax.js").is_file()
    size = sum(f.stat().st_size for f in (built / website.MATHJAX_DIR).rglob("*") if f.is_file())
    assert size < 4_000_000, f"MathJax takes {size / 1e6:.1f} MB of the site: copy fewer of its files"
    remote = re.compile(r"""(?:src=|href=|url\(|import\(|@import)\s*["']?(?:https?:)?//""", re.IGNORECASE)
    for page in sorted(built.glob("*.html")):
        raw = page.read_text()
        heads = raw.split("<body", 1)[0] + "".join(re.findall(r"<script.*?</script>", raw, re.S))
        assert not remote.search(heads), f"{page.name} loads {remote.search(heads).group(0)}..."
        assert "cdnjs" not in raw and "mermaid" not in raw.lower(), f"{page.name} still names a CDN or mermaid"


# What the formulas do not need: embedded plots and code blocks (MathJax skips <pre>).
_EMBEDDED_IMAGE = re.compile(r'<img\b[^>]*\bsrc="data:[^"]*"[^>]*>')
_PRE = re.compile(r"<pre\b.*?</pre>", re.S)


def one_page_of(built: Path, pages: list[Path]) -> str:
    """The first page, with the bodies of the others appended to its own and PROBE last: one
    Chromium run typesets every formula of the site under the pages' shared MathJax setup (one
    launch instead of one per page). Plots and code blocks are taken out: megabytes of layout
    that hold no formula."""

    def lean(page: Path) -> str:
        return _PRE.sub("", _EMBEDDED_IMAGE.sub("", (built / f"{page.stem}.html").read_text()))

    first = lean(pages[0])
    bodies = [re.search(r"<body[^>]*>(.*)</body>", lean(p), re.S) for p in pages[1:]]
    assert all(bodies), "a page of the site has no <body>"
    return first.replace("</body>", "".join(b.group(1) for b in bodies) + PROBE, 1)


def test_math_renders_offline_in_headless_chromium(built, tmp_path):
    chromium = chromium_or_skip()
    pages = [p for p in NOTEBOOKS if has_math(p)]
    assert pages, "no notebook has math: the test checks nothing"
    probe = built / "probe-math.html"  # next to the pages: mathjax/ resolves alike
    probe.write_text(one_page_of(built, pages))
    try:
        proc = subprocess.run(
            [*offline_chromium(chromium, tmp_path / "profile"), "--virtual-time-budget=60000", "--dump-dom"]
            + [probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        probe.unlink()
    where = f"the pages with math ({', '.join(p.stem for p in pages)}) in one"
    dom = proc.stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, f"{where}: the page never finished loading:\n{proc.stderr[-1500:]}"
    report = json.loads(html.unescape(found.group(1)))
    assert report["mathjax"], f"{where}: MathJax did not load from {website.MATHJAX_DIR}/"
    assert not [u for u in report["urls"] if not u.startswith("file:")], f"{where} fetched {report['urls']}"
    assert "STIXMathJax_Main:loaded" in report["fonts"], f"{where}: math fonts not loaded: {report['fonts']}"
    formulas = len(re.findall(r'<script type="math/tex', dom))
    frames = len(re.findall(r'id="MathJax-Element-\d+-Frame"', dom))
    assert formulas and frames == formulas, f"{where}: {frames} of {formulas} formulas typeset"
    seen = RenderedText()
    seen.feed(dom)
    raw = RAW_TEX.search("".join(seen.text))
    assert not raw, f"{where}: raw TeX left on the page: {raw.group(0)!r}"
    errors = {c for c in seen.classes if c in ("merror", "noError", "MathJax_Error")}
    assert not errors, f"{where}: MathJax reports TeX errors ({errors})"


def test_blurb_keeps_inline_code_and_drops_emphasis():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_markdown_cell(
            "# 99 · Title\n\nThe *update* was `p -= lr * p.grad` and `f. g`, **always**. A second sentence."
        )
    )
    title, blurb = website.title_and_blurb(nb)
    assert title == "99 · Title"
    assert blurb == "The update was `p -= lr * p.grad` and `f. g`, always."
    shown = website.inline_html(blurb + " <b>")
    assert "<code>p -= lr * p.grad</code>" in shown and "<code>f. g</code>" in shown and "&lt;b&gt;" in shown


def test_index_teaser_shows_inline_code(built):
    index = (built / "index.html").read_text()
    assert "<code>param -= learning_rate * param.grad</code>" in index  # 06's first sentence


def cell_divs(raw: str) -> list[str]:
    """The opening tags of a page's cells."""
    return re.findall(r'<div[^>]* class="jp-Cell [^"]*"', raw)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_cells_look_like_the_student_edition(built, path):
    page = built / f"{path.stem}.html"
    raw = page.read_text()
    # No execution count on any cell: a student's copy has none, and "In [ ]:" beside "In [7]:" misleads.
    assert "jp-InputPrompt" not in raw.split("<body", 1)[1] and "In&nbsp;[" not in raw
    edition = student.make_edition(nbformat.read(path, as_version=4), path, keep_outputs=True)
    checks = [e.check_cell for e in edition.exercises if e.check_cell is not None]
    cells = cell_divs(raw)
    exercises = [c for c in cells if "celltag_lab-exercise" in c]
    checked = [c for c in cells if "celltag_lab-check" in c]
    assert (len(exercises), len(checked)) == (len(edition.exercises), len(checks))
    assert all("jp-mod-noOutputs" in c for c in exercises + checked), "an exercise or check cell shows an output"
    shown = text_of(page)
    for ex in edition.exercises:  # the stub the student gets, naming its exercise
        assert f'NotImplementedError("{ex.label}")' in shown


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_predictions_outcome_is_on_the_page(built, path):
    """A cell that shows a prediction's outcome (it begins with lab.require of a prediction) is on the page
    without its output, and says why; nothing its stored output prints is on the page."""
    source = nbformat.read(path, as_version=4)
    predictions = {
        c.metadata["lab"]["exercise"]
        for c in source.cells
        if c.metadata.get("lab", {}).get("role") == "check" and "_prediction(" in c.source
    }
    demos = [c for c in source.cells if c.cell_type == "code" and _required(c) & predictions]
    raw = (built / f"{path.stem}.html").read_text()
    hidden = [c for c in cell_divs(raw) if "celltag_lab-outcome" in c]
    assert len(hidden) == len(demos) and all("jp-mod-noOutputs" in c for c in hidden)
    shown = text_of(built / f"{path.stem}.html")
    for cell in demos:
        for out in cell.outputs:
            for line in "".join(out.get("text", "")).splitlines():
                assert len(line.strip()) < 12 or line.strip() not in shown, (
                    f"a prediction's outcome is on the page: {line}"
                )


def _required(cell) -> set[str]:
    """The exercise ids of the ``lab.require(...)`` that opens ``cell``."""
    first = cell.source.split("\n", 1)[0]
    return set(re.findall(r'"(\d+\.\d+)"', first)) if first.startswith("lab.require(") else set()


def test_the_site_hides_the_outcome_of_a_prediction_only():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in ("a = 1", "print(a)")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nb.cells[1].source = 'lab.require("99.1")\nprint(a)'
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="the outcome\n")]
    check = nbformat.v4.new_code_cell("lab.check_sign_prediction(prediction)")
    edition = student.Edition(nb, exercises=[student.Exercise(cell=0, label="x", check_cell=2, blocks=1, id="99.1")])
    nb.cells.insert(2, check)
    nb.cells[1], nb.cells[2] = nb.cells[2], nb.cells[1]  # the check, then the demo
    edition.exercises[0].check_cell = 1
    website.hide_outcomes(edition)
    assert nb.cells[2].outputs == [] and "lab-outcome" in nb.cells[2].metadata["tags"]
    assert nb.cells[0].outputs  # not a demo
    check.source = "lab.check_power(power)"  # not a prediction: its later cells keep their outputs
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="the outcome\n")]
    nb.cells[2].metadata["tags"] = []
    website.hide_outcomes(edition)
    assert nb.cells[2].outputs


def test_progress_bars_are_left_off_the_pages(built):
    """Notebook 06's runs show a progress bar each (a widget); no page shows one stuck at 0%."""
    source = nbformat.read(ROOT / "notebooks" / "06_optim.ipynb", as_version=4)
    bars = [
        out
        for c in source.cells
        if c.cell_type == "code"
        for out in c.outputs
        if website.WIDGET_VIEW in out.get("data", {})
    ]
    assert bars, "notebook 06 stores no progress bar: this test no longer looks at one"
    for page in built.glob("[0-9][0-9]_*.html"):
        assert not re.search(r"\b0%\|", text_of(page)), page.name
    assert "momentum and Adam end more than 100x below plain SGD" in text_of(built / "06_optim.html")


def test_a_written_answer_on_a_page_says_where_it_is_written_not_how_to_edit_a_cell(built):
    """A static page has no cell to double-click: the edition's editing instructions are replaced."""
    text = text_of(built / "06_optim.html")
    assert student.ANSWER_PLACEHOLDER not in text and "A written answer: in the notebook, you write it here." in text


@pytest.mark.parametrize(
    "markup, kept",
    [
        ('<div class="highlight"><pre><span class="n">x</span> &lt; 1</pre></div>', True),
        ('<div class="highlight"><pre><script>alert(1)</script></pre></div>', False),
        ('<span class="n" onclick="alert(1)">x</span>', False),
        ('<img src=x onerror="alert(1)">', False),
    ],
)
def test_only_markup_with_nothing_to_remove_skips_the_sanitizer(markup, kept):
    from nbconvert.filters.strings import clean_html

    assert website.sanitized(markup) == (markup if kept else clean_html(markup))

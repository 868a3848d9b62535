"""Running the lab where students are: Colab, JupyterHub, a notebook downloaded alone.

    python -m tools.colab apply notebooks/*.ipynb    # (re)write each setup cell's install block
    python -m tools.colab check notebooks/*.ipynb    # exit 1 if a setup cell's block is missing or stale

Every notebook's setup cell starts with the notebook's own imports, then the same short
block (BOOTSTRAP): ``import labsupport as lab``, and only when that fails (Colab, a
JupyterHub image without the package) a pip install of INSTALL that keeps the runtime's
own torch (``torch==<its version>`` stops pip from replacing it), with one line saying
what it did. When pip fails (offline, no such release) it prints nothing and stops
nothing itself: it tells IPython to show each NameError that follows (``lab``,
``device``... were never defined) as the one line STOP (IPython calls such a handler
instead of showing the exception, so it shows STOP itself: ``_showtraceback``, the
method ipykernel and Colab implement to send an error's lines), so the rest of the setup cell
and every later cell that needs the helpers stop with ``■ STOPPED · <what to do>``,
never a traceback. Rerun after connecting, the cell installs them and NameErrors read
as usual again.

The lab's data all ships inside its dependencies (scikit-learn's digits, matplotlib's
sample image, torchvision's weight metadata); the only files a notebook reads beside it
(BESIDE, e.g. notebook 10's ``ddp_train.py``) are fetched from the same tag.

A fork changes one setting, REPO below (docs/instructors.md, "Publishing your fork"),
then runs ``apply``: it rewrites every setup cell and README.md's Colab links.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import tomllib

from .files import write_notebook

ROOT = Path(__file__).resolve().parent.parent
#: THE setting a fork changes: the GitHub repository (owner/name) the lab is published from.
#: Its tag v<version> is what pip installs; its site branch holds the site and the student edition.
REPO = "pytorch-teaching-lab/pytorch-lab"
SITE_BRANCH = "gh-pages"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
TAG = f"v{VERSION}"
#: What pip installs outside the lab (a requirement pip understands; derived from REPO and the version).
INSTALL = f"labsupport @ git+https://github.com/{REPO}@{TAG}"

#: Files a notebook reads from its own folder, fetched from the tag when it runs outside the lab.
BESIDE = {"10_scaling_up.ipynb": ["ddp_train.py"]}
RAW = f"https://raw.githubusercontent.com/{REPO}/{TAG}/notebooks"

#: The one line every later cell shows when the install failed.
STOP = (
    "■ STOPPED · the lab's helpers (labsupport) are not installed and pip could not install them (offline?): "
    "connect to the internet and rerun the first code cell, or install them in a terminal "
    "(`pip install <the lab's folder or its labsupport wheel>`) and restart the kernel"
)
BEGIN = "try:  # the lab's helpers; outside the lab (Colab, JupyterHub) pip installs them, keeping this torch"
BOOTSTRAP = f"""{BEGIN}
    import labsupport as lab
except ModuleNotFoundError:
    import subprocess, sys
    pip = [sys.executable, "-m", "pip", "install", "-q", "{INSTALL}"]
    if subprocess.run([*pip, f"torch=={{torch.__version__}}"], capture_output=True).returncode == 0:
        import labsupport as lab
        print(f"installed labsupport {VERSION} ({TAG}); torch kept at {{torch.__version__}}")
    else:  # from here on, a cell that needs the helpers stops with one line saying what to do
        stop = {STOP!r}
        get_ipython().set_custom_exc((NameError,), lambda shell, etype, value, tb, tb_offset=None, stop=stop: shell._showtraceback(etype, value, [stop] if "lab" not in shell.user_ns else shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset)))"""
FETCH = """        import os, urllib.request
        for name in {names!r}:  # read by this notebook from its own folder
            if not os.path.exists(name):
                urllib.request.urlretrieve(f"{raw}/{{name}}", name)
                print(f"fetched {{name}} from {tag}")"""
#: The block before this version (a comment line first, 20 lines): apply replaces it.
OLD_BEGIN = "# -- install the lab's helpers when this notebook runs outside the lab (Colab, JupyterHub) --"
OLD_END = "# -- end of install block --"


def bootstrap(notebook: str = "") -> str:
    """The install block of ``notebook``'s setup cell (with the fetch of the files it reads beside it)."""
    names = BESIDE.get(notebook)
    if not names:
        return BOOTSTRAP
    head, tail = BOOTSTRAP.split("\n    else:", 1)
    return head + "\n" + FETCH.format(names=names, raw=RAW, tag=TAG) + "\n    else:" + tail


def colab_url(notebook: str) -> str:
    """The Colab address of a notebook's student edition on the site branch."""
    return f"https://colab.research.google.com/github/{REPO}/blob/{SITE_BRANCH}/student/{notebook}"


README = ROOT / "README.md"


def with_links(text: str) -> str:
    """``text`` (README.md) with its Colab links and its pip requirement following REPO and the version."""
    text = re.sub(
        r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w.-]+/student/", colab_url(""), text
    )
    return re.sub(r"labsupport @ git\+https://github\.com/[\w.-]+/[\w.-]+@v[\w.]+", INSTALL, text)


def setup_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code")


def _without_block(source: str) -> str:
    """``source`` less its install block (this version's or the older one)."""
    if OLD_BEGIN in source and OLD_END in source:
        return source[: source.index(OLD_BEGIN)] + source[source.index(OLD_END) + len(OLD_END) :]
    lines = source.splitlines()
    if BEGIN not in lines:
        return source
    start = lines.index(BEGIN)
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "except", "else")) or not lines[end].strip()):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[:start] + lines[end:])


IMPORT = re.compile(r"(import |from \S+ import )")


def with_bootstrap(source: str, notebook: str = "") -> str:
    """``source`` as the setup cell holds it: the notebook's own imports first, then the install
    block (replacing an older one, and any plain import of labsupport), then the rest."""
    lines = [line for line in _without_block(source).splitlines() if line.strip() != "import labsupport as lab"]
    while lines and not lines[0].strip():
        lines.pop(0)
    n = 0
    while n < len(lines) and (IMPORT.match(lines[n]) or not lines[n].strip()):
        n += 1
    imports = "\n".join(lines[:n]).strip("\n")
    rest = "\n".join(lines[n:]).strip("\n")
    if not re.search(r"^import torch$", imports, re.M):
        raise ValueError(
            f"{notebook or 'a setup cell'}: the block reads torch's version, so the imports must hold `import torch`"
        )
    return f"{imports}\n\n{bootstrap(notebook)}\n\n{rest}"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("apply", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for name in argv[1:]:
        path = Path(name)
        nb = nbformat.read(path, as_version=4)
        cell = setup_cell(nb)
        wanted = with_bootstrap(cell.source, path.name)
        if cell.source != wanted:
            stale.append(path.name)
            if argv[0] == "apply":
                cell.source = wanted
                write_notebook(path, nb)
    readme = README.read_text()
    if with_links(readme) != readme:
        stale.append(f"{README.name} (its Colab links or pip line)")
        if argv[0] == "apply":
            README.write_text(with_links(readme))
    if argv[0] == "check" and stale:
        print(
            f"install block or links missing or stale in: {', '.join(stale)} "
            f"(run python -m tools.colab apply notebooks/*.ipynb)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

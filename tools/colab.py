"""Running the lab where students are: Colab, JupyterHub, a notebook downloaded alone.

    python -m tools.colab apply notebooks/*.ipynb    # (re)write each setup cell's install block
    python -m tools.colab check notebooks/*.ipynb    # exit 1 if a setup cell's block is missing or stale

Every notebook's setup cell starts with the same few lines (BOOTSTRAP): when
``labsupport`` cannot be imported, they pip-install it from the lab's release tag,
keeping the runtime's own torch (a requirement ``torch==<installed version>``
stops pip from replacing it), and print one line saying what they did; without
network they print one line saying so and how to fix it, then stop the cell.
The lab's data all ships inside its dependencies (scikit-learn's digits,
matplotlib's sample image, torchvision's weight metadata); the only files a
notebook reads beside it (BESIDE, e.g. notebook 10's ``ddp_train.py``) are fetched
from the same tag. The one place that names the repository and tag is this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import tomllib

ROOT = Path(__file__).resolve().parent.parent
#: Where the lab is published; the site branch holds the built site and the student edition.
REPO = "pytorch-teaching-lab/pytorch-lab"
SITE_BRANCH = "gh-pages"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
TAG = f"v{VERSION}"

#: Files a notebook reads from its own folder, fetched from the tag when it runs outside the lab.
BESIDE = {"10_scaling_up.ipynb": ["ddp_train.py"]}
RAW = f"https://raw.githubusercontent.com/{REPO}/{TAG}/notebooks"

BEGIN = "# -- install the lab's helpers when this notebook runs outside the lab (Colab, JupyterHub) --"
END = "# -- end of install block --"
BOOTSTRAP = f"""{BEGIN}
try:
    import labsupport as lab
except ModuleNotFoundError:
    import importlib, importlib.metadata, importlib.util, subprocess, sys
    try:  # pip is told to keep the runtime's torch (read from its metadata: no import of torch yet)
        keep = [f"torch=={{importlib.metadata.version('torch')}}"]
    except importlib.metadata.PackageNotFoundError:
        keep = []
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                          "labsupport @ git+https://github.com/{REPO}@{TAG}", *keep], capture_output=True, text=True)
    if pip.returncode != 0:
        raise SystemExit("labsupport is not installed and pip could not fetch it (offline?): connect to the "
                         "internet and rerun this cell, or run `pip install <the lab's folder>` in a terminal")
    importlib.invalidate_caches()
    import labsupport as lab
    where = "Colab" if importlib.util.find_spec("google.colab") else "this runtime"
    print(f"installed labsupport {VERSION} ({TAG}) for {{where}}; torch {{'kept at ' + keep[0][7:] if keep else 'installed'}}")
{END}"""
FETCH = """    import os, urllib.request
    for name in {names!r}:  # read by this notebook from its own folder
        if not os.path.exists(name):
            urllib.request.urlretrieve(f"{raw}/{{name}}", name)
            print(f"fetched {{name}} from {tag}")
"""


def bootstrap(notebook: str = "") -> str:
    """The install block of ``notebook``'s setup cell (with the fetch of the files it reads beside it)."""
    names = BESIDE.get(notebook)
    if not names:
        return BOOTSTRAP
    return BOOTSTRAP.replace(f"\n{END}", "\n" + FETCH.format(names=names, raw=RAW, tag=TAG) + END)


def colab_url(notebook: str) -> str:
    """The Colab address of a notebook's student edition on the site branch."""
    return f"https://colab.research.google.com/github/{REPO}/blob/{SITE_BRANCH}/student/{notebook}"


def setup_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code")


def with_bootstrap(source: str, notebook: str = "") -> str:
    """``source`` with the install block first (replacing an older one) and no plain import of labsupport."""
    if BEGIN in source and END in source:
        source = source[source.index(END) + len(END) :].lstrip("\n")
    lines = [line for line in source.splitlines() if line.strip() != "import labsupport as lab"]
    return bootstrap(notebook) + "\n" + "\n".join(lines)


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
                nbformat.write(nb, path)
    if argv[0] == "check" and stale:
        print(
            f"setup cell install block missing or stale in: {', '.join(stale)} "
            f"(run python -m tools.colab apply notebooks/*.ipynb)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

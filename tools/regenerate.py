"""Re-execute notebooks in place from a fresh kernel, so their stored outputs are
the ones nbval compares against.

    python -m tools.regenerate notebooks/01_tensors.ipynb [more.ipynb ...]

Runs each notebook top to bottom in its own folder with the current Python
environment's kernel, then normalises what changes on every run but carries no
meaning (widget model ids, execution timing metadata), so running it twice in a
row leaves the files byte-for-byte unchanged. Text outputs also pass through
the nbval sanitize rules (tests/nbval_sanitize.cfg), so what legitimately varies
(run-folder timestamps, temporary paths) is stored in its sanitized form.

Cells tagged ``nbval-ignore-output`` (timings, versions, hardware) keep the
output stored last time as long as their source is unchanged, so a re-run does
not churn measured figures; ``--refresh-ignored`` records them anew (after a
torch upgrade, say, for the environment line).

Plots keep their stored PNG when they look the same. A loss curve is drawn from
float sums whose last bits depend on the CPU (SIMD width, BLAS kernels), so on
another machine its anti-aliased line moves by a fraction of a pixel: the PNG's
bytes change although the printed, rounded numbers are byte-identical. A code
cell whose source and text outputs are unchanged therefore keeps each stored
image that decodes to the same size with at most ``PIXEL_SHARE`` of its pixels
changed by more than ``PIXEL_DELTA`` (of full scale) in some channel; a real
change (another curve, axis, label or size) moves far more pixels and is stored.
``--refresh-images`` stores every new image. Comparing images is regenerate's
job alone: nbval (0.11, ``IPyNbFile.skip_compare``) never compares
``image/png`` or ``image/jpeg`` unless run with ``--nbdime``; of a figure it
compares only the ``text/plain`` line (``<Figure size 1000x350 with 2 Axes>``),
so these pixels never fail ``make test``, they only make diffs that mean nothing.
"""

from __future__ import annotations

import argparse
import base64
import copy
import io
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import numpy as np

from .files import write_notebook
from .runner import blank_skipped, notebook_client, restore_skipped

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PNG = "image/png"
# An image counts as unchanged when at most PIXEL_SHARE of its pixels differ by more than
# PIXEL_DELTA (0..1) in a channel. Measured on a 1000x350 two-panel loss plot: curves moved
# by float noise change at most 0.001 % of them (1e-4 relative) or 0.006 % (1e-3); one letter of the
# title changes 0.055 %, a legend label 0.086 %, one point of a curve 1 % off 0.7 %.
PIXEL_DELTA = 0.1
PIXEL_SHARE = 0.0002
SANITIZE = Path(__file__).resolve().parent.parent / "tests" / "nbval_sanitize.cfg"


def sanitize_rules(path: Path = SANITIZE) -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of an nbval sanitize file."""
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", path.read_text(), flags=re.MULTILINE)


def _sanitize(text: str, rules: list[tuple[str, str]]) -> str:
    for regex, replace in rules:
        text = re.sub(regex, replace, text)
    return text


def merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (how a cell's prints are
    chunked depends on timing; nbval joins them too before comparing)."""
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and out.get("output_type") == "stream"
            and prev.get("output_type") == "stream"
            and prev.get("name") == out.get("name")
        ):
            prev["text"] = prev["text"] + out["text"]
        else:
            merged.append(out)
    return merged


def normalise(nb: nbformat.NotebookNode, rules: list[tuple[str, str]] | None = None) -> nbformat.NotebookNode:
    """Drop per-run noise: widget state and ids, timing metadata; merge stream
    chunks; sanitize text outputs."""
    rules = sanitize_rules() if rules is None else rules
    nb.metadata.pop("widgets", None)
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        if "outputs" in cell:
            cell.outputs = merge_streams(cell.outputs)
        for j, out in enumerate(cell.get("outputs", [])):
            if "text" in out:
                out["text"] = _sanitize(out["text"], rules)
            data = out.get("data", {})
            if "text/plain" in data:
                data["text/plain"] = _sanitize(data["text/plain"], rules)
            view = data.get(WIDGET_VIEW)
            if view is not None:
                view["model_id"] = f"cell{i}-output{j}"
    return nb


def _ignored(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and "nbval-ignore-output" in cell.get("metadata", {}).get("tags", [])


def keep_ignored_outputs(old: nbformat.NotebookNode, new: nbformat.NotebookNode) -> int:
    """Give each NBVAL_IGNORE_OUTPUT cell of ``new`` the outputs its identical
    counterpart in ``old`` had (matched by source, in order). Returns how many."""
    stored: dict[str, list] = {}
    for cell in old.cells:
        if _ignored(cell) and cell.execution_count is not None:  # never run (fresh from an outline): nothing to keep
            stored.setdefault(cell.source, []).append(cell.outputs)
    kept = 0
    for cell in new.cells:
        if _ignored(cell) and stored.get(cell.source):
            cell.outputs = stored[cell.source].pop(0)
            kept += 1
    return kept


def png_pixels(data: str) -> np.ndarray:
    """The pixels (floats in 0..1) of a base64 PNG as a notebook stores it."""
    from matplotlib import image

    return image.imread(io.BytesIO(base64.b64decode(data)), format="png")


def images_close(old: str, new: str, delta: float = PIXEL_DELTA, share: float = PIXEL_SHARE) -> bool:
    """Whether two stored PNGs show the same picture, but for a few pixels (see the module's notes)."""
    if old == new:
        return True
    try:
        a, b = png_pixels(old), png_pixels(new)
    except (ValueError, OSError, SyntaxError):  # not a PNG Pillow can read
        return False
    if a.shape != b.shape:
        return False
    diff = abs(a - b)
    changed = diff.max(axis=-1) > delta if diff.ndim == 3 else diff > delta
    return float(changed.mean()) <= share


def _without_images(outputs: list) -> list:
    """The outputs with each PNG's data blanked: what must match exactly."""
    bare = copy.deepcopy(list(outputs))
    for out in bare:
        if PNG in out.get("data", {}):
            out["data"][PNG] = ""
    return bare


def keep_close_images(old: nbformat.NotebookNode, new: nbformat.NotebookNode) -> int:
    """Give each code cell of ``new`` the stored PNGs of its counterpart in ``old`` (same source,
    matched in order) when every other output is identical and each image is close
    (images_close). Both notebooks normalised. Returns how many images were kept."""
    stored: dict[str, list] = {}
    for cell in old.cells:
        if cell.cell_type == "code" and cell.execution_count is not None:
            stored.setdefault(cell.source, []).append(cell.outputs)
    kept = 0
    for cell in new.cells:
        if cell.cell_type != "code" or not stored.get(cell.source):
            continue
        before = stored[cell.source].pop(0)
        if not any(PNG in out.get("data", {}) for out in cell.outputs):
            continue
        if _without_images(before) != _without_images(cell.outputs):
            continue
        pairs = [(o, n) for o, n in zip(before, cell.outputs) if PNG in n.get("data", {})]
        if all(images_close(o["data"][PNG], n["data"][PNG]) for o, n in pairs):
            for o, n in pairs:
                kept += o["data"][PNG] != n["data"][PNG]
                n["data"][PNG] = o["data"][PNG]
    return kept


def execute(path: Path, timeout: int = 600, refresh_ignored: bool = False, refresh_images: bool = False) -> float:
    """Execute ``path`` in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.read(path, as_version=4)
    # Cells tagged nbval-skip (the %tensorboard launcher) are not run, as under nbval:
    # running one would start a TensorBoard server that outlives the kernel.
    skipped = blank_skipped(nb)
    client = notebook_client(nb, path.parent, timeout=timeout)
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        restore_skipped(nb, skipped)
    seconds = time.perf_counter() - start
    if not refresh_ignored:
        keep_ignored_outputs(before, nb)
    nb = normalise(nb)
    if not refresh_images:
        keep_close_images(before, nb)
    write_notebook(path, nb)
    return seconds


#: What the kernels get unless the caller set it, as under `make regenerate`: one thread, so the stored figures
#: are bit-identical from run to run, and TensorBoard runs kept out of the students' runs/.
KERNEL_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TORCHINDUCTOR_VEC_ISA_OK": "1",
    "LAB_RUNS_DIR": str(Path(__file__).resolve().parent.parent / "build" / "regenerate" / "runs"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--refresh-ignored", action="store_true", help="also re-record the outputs of NBVAL_IGNORE_OUTPUT cells"
    )
    parser.add_argument(
        "--refresh-images", action="store_true", help="store every new plot, even one that looks like the stored one"
    )
    args = parser.parse_args(argv)
    for name, value in KERNEL_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    for path in args.notebooks:
        if not path.is_file():
            print(f"no such notebook: {path}", file=sys.stderr)
            return 2
        seconds = execute(path, args.timeout, refresh_ignored=args.refresh_ignored, refresh_images=args.refresh_images)
        print(f"{path}: {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

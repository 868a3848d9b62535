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
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
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


def execute(path: Path, timeout: int = 600, refresh_ignored: bool = False) -> float:
    """Execute ``path`` in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.read(path, as_version=4)
    # Cells tagged nbval-skip (the %tensorboard launcher) are not run, as under nbval:
    # running one would start a TensorBoard server that outlives the kernel.
    # nbclient passes over a code cell whose source is blank.
    skipped = {
        i: cell.source
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and "nbval-skip" in cell.get("metadata", {}).get("tags", [])
    }
    for i in skipped:
        nb.cells[i].source = ""
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        for i, source in skipped.items():
            nb.cells[i].update(source=source, outputs=[], execution_count=None)
    seconds = time.perf_counter() - start
    if not refresh_ignored:
        keep_ignored_outputs(before, nb)
    nbformat.write(normalise(nb), path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--refresh-ignored", action="store_true", help="also re-record the outputs of NBVAL_IGNORE_OUTPUT cells"
    )
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if not path.is_file():
            print(f"no such notebook: {path}", file=sys.stderr)
            return 2
        seconds = execute(path, args.timeout, refresh_ignored=args.refresh_ignored)
        print(f"{path}: {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

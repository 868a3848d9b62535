"""The tools' one notebook runner: nbclient's NotebookClient, set up the same way for the student
edition's checks (``student``), ``regenerate``, the grader (``grade``) and the tests.

    client = notebook_client(nb, folder, timeout=600)
    client.execute()                      # or, cell by cell: with client.setup_kernel(): ...

Cells tagged ``nbval-skip`` (the ``%tensorboard`` launchers) are not run, as under nbval:
:func:`blank_skipped` empties them for the run and returns their sources for :func:`restore_skipped`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient


class _CappedClient(NotebookClient):
    """A NotebookClient that keeps at most ``max_output`` characters of each cell's output (errors
    always), then one line saying the rest was dropped: a print loop cannot fill the runner's memory."""

    max_output = 2_000_000

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] != "error":
            size = sum(len(str(value)) for value in msg.get("content", {}).values())
            kept = sum(len(str(o)) for o in outs) if len(outs) < 1000 else self.max_output
            if kept + size > self.max_output:
                if not outs or outs[-1].get("name") != "runner":
                    note = "[the rest of this output was dropped: too long]\n"
                    outs.append(nbformat.v4.new_output("stream", name="runner", text=note))
                return None
        return super().output(outs, msg, display_id, cell_index)


def notebook_client(
    nb: nbformat.NotebookNode,
    folder: str | Path,
    *,
    timeout: float,
    allow_errors: bool = False,
    kernel_name: str = "python3",
    max_output: int | None = None,
    **kwargs: Any,
) -> NotebookClient:
    """A client that runs ``nb`` in a fresh kernel whose working folder is ``folder``; with
    ``max_output``, each cell keeps at most that many characters of output."""
    options = dict(
        timeout=timeout,
        kernel_name=kernel_name,
        allow_errors=allow_errors,
        record_timing=False,
        resources={"metadata": {"path": str(folder)}},
        **kwargs,
    )
    if max_output is None:
        return NotebookClient(nb, **options)
    client = _CappedClient(nb, **options)
    client.max_output = max_output
    return client


def is_skipped(cell: nbformat.NotebookNode) -> bool:
    """A code cell nbval does not run (tagged ``nbval-skip``)."""
    return cell.cell_type == "code" and "nbval-skip" in cell.get("metadata", {}).get("tags", [])


def blank_skipped(nb: nbformat.NotebookNode) -> dict[int, str]:
    """Empty the cells nbval skips (nbclient passes over a blank cell); return their sources."""
    skipped = {}
    for index, cell in enumerate(nb.cells):
        if is_skipped(cell):
            skipped[index] = cell.source
            cell.source = ""
    return skipped


def restore_skipped(nb: nbformat.NotebookNode, skipped: dict[int, str]) -> None:
    """Put back what :func:`blank_skipped` emptied, without outputs."""
    for index, source in skipped.items():
        nb.cells[index].update(source=source, outputs=[], execution_count=None)

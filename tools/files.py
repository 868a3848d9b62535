"""Writing the tools' output files so that a crash or Ctrl-C never leaves one half written.

    write_atomic(out / "grades.csv", text)

The new content goes to a temporary file beside the target, which then replaces it in one step
(``os.replace``): a reader sees the old file or the new one, never a part. Where the write itself
fails (a full disk), the temporary file is removed and the old file stays as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) in one step; its folder is made if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_notebook(path: Path, nb) -> None:
    """Store notebook ``nb`` at ``path`` with the bytes ``nbformat.write`` gives, replacing it in one step."""
    import nbformat

    text = nbformat.writes(nb)
    write_atomic(Path(path), text if text.endswith("\n") else text + "\n")

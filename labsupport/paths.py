"""Where the lab keeps what it writes (TensorBoard runs, downloaded data).

Notebooks run in ``notebooks/`` or ``student/``; their output belongs in the
repository's top-level folder beside them, not in a folder per edition.

Example:
    >>> lab_folder("runs", root="/tmp/elsewhere")
    PosixPath('/tmp/elsewhere')
"""
from __future__ import annotations

import os
from pathlib import Path

__all__: list[str] = []  # used by labsupport itself (tb, mnist), not by notebooks


def lab_folder(name: str, *, root: str | os.PathLike | None = None, env: str | None = None) -> Path:
    """The folder ``name`` of the lab: ``root`` if given, else ``$env`` if set,
    else ``../name`` when the working directory sits in the repository (beside
    ``labsupport/`` and ``notebooks/``), else ``name`` in the working directory.

    Example:
        >>> lab_folder("data", env="LAB_NO_SUCH_VARIABLE").name
        'data'
    """
    if root is not None:
        return Path(root)
    value = os.environ.get(env) if env else None
    if value:
        return Path(value)
    here = Path.cwd()
    if (here.parent / "labsupport").is_dir() and (here.parent / "notebooks").is_dir():
        return Path("..") / name
    return Path(name)

"""Grading for instructors: a folder of submissions in, a gradebook and feedback out.

    make grade SUBMISSIONS=handed_in [OUT=grades] [JOBS=2]
    python -m tools.grade handed_in [--out grades] [--jobs 2] [--timeout 60] [--memory-mb 4096]

``handed_in/<student id>/`` holds the notebooks a student handed in: any subset of
the series, under any file name. Each file is matched to its source in ``notebooks/``
by content (its headings, markdown cells, and code cells' ids with their first lines),
never by name; two files that match
one source: the newest is graded (the closer match on a tie), and the feedback
says which. A student's files from every place (their folder, Canvas's flat files,
zips) are weighed together.

Rebuild, don't trust. The grader starts from the student edition of the source
(tools/student.py: the scaffold, the check cells, no answers, no outputs) and puts
into it only the student's *solution cells*. Which cells those are, the cells
say: the student edition carries each exercise's metadata (``metadata["lab"]``:
its id, the cell's role, its points) and the source's cell ids, and Jupyter keeps
both. A submission's cell is exercise 03.5's solution when its metadata says so
(a copy made in Jupyter keeps it: the last copy is graded) or when it has the
source cell's id; nothing else (its heading, position or first line) counts.
Deleted, moved or edited scaffold cells and stored outputs cannot change a grade.
Written answers (answer cells) are collected verbatim for the instructor, who scores
them by hand (a scoring sheet per question, OUT/written/<id>.csv, with the rubric of the
source's answer cell; or manual.csv): the student's lines minus the question's.

Each rebuilt notebook runs cell by cell in its own kernel (tools/grade_kernel.py:
a memory cap, and with Landlock no access to anything but a scratch folder, the
Python installation and labsupport; no outgoing TCP), with LAB_DEVICE=cpu and a
time limit per exercise. A cell that runs past it, or a kernel that dies, costs
that exercise its points; the kernel is restarted, the cells that had run cleanly
are replayed, and grading goes on. An exercise scores its points (its solution
cell's ``points`` metadata, unless ``POINTS`` in the extra cases says otherwise) when its check
passed and the instructor's extra cases for it passed. For the checks in ``judge.TRUSTED`` the
check that counts is run by this process itself on the values and functions the kernel sends
back as data (tools/judge.py), never on what the kernel printed; for the others it is the
check cell's run in the kernel (a ``PASS`` line, no exception), and forging code is flagged.
Kernels write nothing the grader reads back: results travel over the kernel
protocol, and only this process writes OUT, after the kernels have ended. What lands in OUT
from a submission is bounded and inert: a message is clipped to 20,000 characters, and a
control character, a right-to-left override or a lone surrogate in a message or a file or
folder name is written as its escape.

Output in OUT: ``grades.csv`` (one row per student and notebook, one column per
exercise id), ``gradebook.csv`` (one row per student, one column per notebook: for an
LMS import), ``feedback/<student>/<notebook>.md`` and ``.html``,
``results.jsonl`` (one line per exercise, with timings and the instructor-only
details), ``executed/<student>/<notebook>.ipynb`` (the rebuilt notebook with its
outputs) and ``logs/grade-<time>.log``. Each file is replaced whole (tools/files.py): a crash
or Ctrl-C leaves the earlier gradebook as it was, never a file cut short.

Instructor-only cases: ``grading/extra/<notebook stem>.py`` (``--extra`` picks
another folder) may define ``extra_<id with _ for .>(ns)`` (e.g. ``extra_02_1``),
called with the kernel's namespace after the last check, for each exercise whose own
check passed; raising anything fails the exercise. Its message goes to results.jsonl only; the feedback
says "an additional test of your instructor failed". It may also define
``POINTS = {"02.1": 2}``.
"""

from __future__ import annotations

import argparse
import compileall
import concurrent.futures as cf
import contextlib
import copy
import csv
import difflib
import fcntl
import hashlib
import html
import io
import json
import logging
import math
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import forkkernel, grade_kernel, judge
from . import student as edition  # the markers, labels and the student edition
from .files import write_atomic
from .flags import forging, lab_names_used, suspicious, uses_lab_code
from .grade_kernel import ZYGOTE_VARIABLE
from .runner import bound_messages, notebook_client

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = Path(__file__).resolve().with_name("grade_kernel.py")
KERNEL_NAME = "lab-grader"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --------------------------------------------------------------------------- sources


@dataclass
class Exercise:
    """A graded exercise of a source notebook."""

    id: str
    label: str
    cell: int
    check_cell: int | None
    cell_id: str  # its solution cell's id, unique across the series
    call: judge.CheckCall | None = None  # its check cell, when it is one plain call of a check
    check_id: str = ""  # its check cell's id


@dataclass
class Written:
    """A written answer (an answer cell): collected, and scored by hand (its scoring sheet, manual.csv)."""

    id: str
    label: str
    cell: int
    cell_id: str
    question: list[str]  # the answer cell's lines in the student edition, but "Your answer here"
    points: float = 0.0  # scored by hand (manual.csv)
    rubric: list[tuple[float, str]] = field(default_factory=list)  # (points, what earns them), from the source
    rubric_total: float | None = None  # the "(N points)" of its **Rubric** line


_RUBRIC_HEAD = re.compile(r"^\s*\*\*Rubric\*\*\s*\((\d+(?:\.\d+)?)\s+points?\)\s*$")
_RUBRIC_LINE = re.compile(r"^\s*-\s+(\d+(?:\.\d+)?)\s+points?:\s*(\S.*)$")


def parse_rubric(source: str) -> tuple[float | None, list[tuple[float, str]]]:
    """An answer cell's rubric, from its solution region: the total of its ``**Rubric** (N points)``
    line and its ``- N point(s): text`` lines after it; (None, []) when the region has none."""
    total, lines, inside, seen = None, [], False, False
    for line in source.splitlines():
        if edition._MARKER.match(line):
            inside = "BEGIN" in line
            continue
        head = _RUBRIC_HEAD.match(line) if inside else None
        if head:
            total, seen = float(head.group(1)), True
            continue
        item = _RUBRIC_LINE.match(line) if inside and seen else None
        if item:
            lines.append((float(item.group(1)), item.group(2).strip()))
    return total, lines


@dataclass
class Source:
    """A solved notebook, its student edition and what grading needs from it."""

    name: str
    path: Path
    notebook: nbformat.NotebookNode  # the solved source (read for nbval-skip tags only)
    student: nbformat.NotebookNode  # the student edition: the base every rebuild starts from
    exercises: list[Exercise]
    written: list[Written]
    fingerprint: set[tuple[str, str]]
    extra: str = ""  # the instructor-only cases (Python source), if any
    points: dict[str, float] = field(default_factory=dict)
    partial: set[str] = field(default_factory=set)  # exercises scored in proportion to the cases passed
    allowed: set[str] = field(default_factory=set)  # the lab.<name>s the notebook's own cells use

    def max_score(self) -> float:
        return sum(self.points[e.id] for e in self.exercises)


def fingerprint(nb) -> set[tuple[str, str]]:
    """What identifies a notebook whatever its file name: its headings, its markdown cells and
    each code cell's id with its first line."""
    found = {("heading", h) for h in _headings(nb)}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found.add(("markdown", " ".join(cell.source.split())))
        elif cell.cell_type == "code" and cell.source.strip():
            found.add(("code", f"{cell.get('id', '')}:{_first_line(cell.source)}"))
    return found


def _headings(nb) -> set[str]:
    found = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                h = edition._HEADING.match(line)
                if h:
                    found.add(h.group(2).strip().lower())
    return found


def load_source(path: Path, extra_dir: Path | None = None) -> Source:
    """Read a solved notebook and what grading needs from its exercises' metadata."""
    nb = nbformat.read(path, as_version=4)
    ed = edition.make_edition(nb, path)
    cells = ed.notebook.cells
    exercises = [
        Exercise(
            e.id,
            e.label,
            e.cell,
            e.check_cell,
            cells[e.cell].get("id", ""),
            judge.check_call(cells[e.check_cell].source) if e.check_cell is not None else None,
            cells[e.check_cell].get("id", "") if e.check_cell is not None else "",
        )
        for e in ed.exercises
    ]
    written = [
        Written(
            a.id,
            a.label,
            a.cell,
            cells[a.cell].get("id", ""),
            [line for line in cells[a.cell].source.splitlines() if line.strip() not in _PLACEHOLDERS],
            float(a.points or 0),
            *reversed(parse_rubric(nb.cells[a.cell].source)),
        )
        for a in ed.answers
    ]
    src = Source(
        path.stem,
        path,
        nb,
        ed.notebook,
        exercises,
        written,
        fingerprint(ed.notebook),
        points={e.id: float(e.points) for e in ed.exercises},
        allowed={n for n in lab_names_used([c.source for c in nb.cells]) if not n.startswith("check_")} - {"hint"},
    )
    extra = (extra_dir / f"{path.stem}.py") if extra_dir else None
    if extra and extra.is_file():
        src.extra = extra.read_text()
        namespace: dict = {}
        exec(compile(src.extra, str(extra), "exec"), namespace)  # the instructor's own file
        src.points.update({str(k): float(v) for k, v in namespace.get("POINTS", {}).items()})
        src.partial.update(str(k) for k in namespace.get("PARTIAL", ()))
    return src


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def load_sources(src_dir: Path, extra_dir: Path | None = None) -> dict[str, Source]:
    return {p.stem: load_source(p, extra_dir) for p in sorted(src_dir.glob("[0-9][0-9]_*.ipynb"))}


# --------------------------------------------------------------------------- matching


def match_source(nb, sources: dict[str, Source]) -> tuple[Source | None, float, str]:
    """The source notebook ``nb`` is a copy of, by content; with the score and a sentence."""
    mine = fingerprint(nb)
    best, best_score = None, 0.0
    for src in sources.values():
        score = len(mine & src.fingerprint) / max(len(src.fingerprint), 1)
        if score > best_score:
            best, best_score = src, score
    if best is None or best_score < 0.25:
        near = f" (closest: {best.name}, {best_score:.0%})" if best else ""
        return None, best_score, f"not matched to any notebook: it shares too few headings and cells{near}"
    return best, best_score, f"matched to {best.name} by content ({best_score:.0%} of its headings and cells)"


def _cells_of(sub, ex_id: str, role: str, cell_type: str, cell_id: str) -> list[int]:
    """Cells of the submission that are exercise ``ex_id``'s ``role`` cell: by their ``lab``
    metadata (a copy made in Jupyter keeps it), or by the source cell's id when the metadata is gone."""
    found = []
    for i, cell in enumerate(sub.cells):
        if cell.get("cell_type") != cell_type:
            continue
        own_id, roles = _lab_metadata(cell)
        if (own_id == ex_id and role in roles) or (own_id is None and cell_id and cell.get("id") == cell_id):
            found.append(i)
    return found


def _lab_metadata(cell) -> tuple[str | None, tuple[str, ...]]:
    """A submission's cell's (exercise id, roles), as :func:`student.lab_metadata` reads them; metadata it
    cannot read at all (a role list holding a list, ``metadata`` that is no object) counts as none, as
    malformed metadata does: one cell's hand-edited metadata does not stop its notebook from being graded."""
    try:
        return edition.lab_metadata(cell)
    except (TypeError, AttributeError, KeyError):
        return None, ()


# An unanswered question's line: this edition's placeholder, or an earlier edition's (a handout given out before it).
_PLACEHOLDERS = (edition.ANSWER_PLACEHOLDER, *edition.EARLIER_PLACEHOLDERS)


def _written_answer(sub, w: Written) -> str | None:
    """The student's answer to ``w``, verbatim, or None when the cell is gone: the answer cell's
    lines that are not the question's (the lines around "Your answer here" in the student edition),
    so a deleted placeholder never makes the question the answer."""
    found = _cells_of(sub, w.id, "answer", "markdown", w.cell_id)
    if not found:
        return None
    lines = sub.cells[found[-1]].source.splitlines()
    question = [line.strip() for line in w.question]
    matcher = difflib.SequenceMatcher(None, [line.strip() for line in lines], question, autojunk=False)
    theirs = [
        line
        for tag, i1, i2, _, _ in matcher.get_opcodes()
        if tag != "equal"
        for line in lines[i1:i2]
        if not edition._MARKER.match(line)
    ]
    answer = "\n".join(theirs).strip()
    return "" if answer in ("", *_PLACEHOLDERS) else answer


MAX_CELL = 1_000_000  # characters of one exercise cell run: the series' longest solution holds a few thousand


@dataclass
class Slot:
    """What the submission holds for one exercise."""

    code: str | None
    note: str = ""
    cell: int | None = None


def rebuild(src: Source, sub) -> tuple[nbformat.NotebookNode, dict[str, Slot], list[dict]]:
    """The student edition of ``src`` with the submission's exercise cells put in."""
    nb = copy.deepcopy(src.student)
    slots: dict[str, Slot] = {}
    for ex in src.exercises:
        found = _cells_of(sub, ex.id, "solution", "code", ex.cell_id)
        if not found:
            slots[ex.id] = Slot(None, "the exercise cell is missing from the notebook (deleted?)")
            continue
        code = sub.cells[found[-1]].source
        if len(code) > MAX_CELL:  # no solution is near it: the kernel, the analysis and OUT are spared its text
            slots[ex.id] = Slot(
                None, f"the exercise cell holds {len(code):,} characters, more than {MAX_CELL:,}: not run"
            )
            continue
        note = (
            f"this exercise's cell appears {len(found)} times in your notebook; the last one "
            f"(cell {found[-1]}) was graded, as Run All would leave it"
            if len(found) > 1
            else ""
        )
        nb.cells[ex.cell].source = code
        slots[ex.id] = Slot(code, note, found[-1])
    written = [{"exercise": w.id, "label": w.label, "answer": _written_answer(sub, w)} for w in src.written]
    return nb, slots, written


# --------------------------------------------------------------------------- the kernel


@dataclass
class Config:
    """How to grade: limits, folders, the sandbox."""

    src: str = str(ROOT / "notebooks")
    extra: str | None = None
    timeout: float = 60.0  # seconds per exercise (its cell and its check cell each)
    cell_timeout: float = 600.0  # seconds for any other cell
    notebook_timeout: float = 3600.0  # seconds for a whole notebook, restarts and replays included (0: none)
    memory_mb: int = 4096
    disk_mb: int = 2048  # the scratch folder's size (a tmpfs of its own, as root)
    landlock: bool = True
    scratch_root: str = ""
    private: tuple[str, ...] = ()  # the submissions and the output folder
    fork: bool = False  # --fork: kernels forked from one zygote per run (tools/forkkernel.py)
    zygote: str = ""  # its socket, while it runs
    checks: str = "labsupport"  # the module of the real checks, imported by the grader itself (tools/judge.py)
    trusted: dict[str, str] | None = None  # check name -> "both" | "value"; None: judge.TRUSTED
    partial: tuple[str, ...] = ()  # --partial: exercise ids (or "all") scored by the share of cases passed
    # MB a grader worker's data may grow by (0: no cap): no message of a kernel's takes more of it (cap_worker)
    worker_mb: int = 4096


def trusted_mode(ex: Exercise, cfg: Config) -> str:
    """How exercise ``ex`` is judged: "both" or "value" (tools/judge.py, by the grader), "" (by its kernel)."""
    if ex.call is None:
        return ""
    table = judge.TRUSTED if cfg.trusted is None else cfg.trusted
    return table.get(ex.call.check, "")


def _sandbox_env(cfg: Config, scratch: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        in (
            "PATH",
            "LANG",
            "LC_ALL",
            "TZ",
            "LD_LIBRARY_PATH",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "TORCHINDUCTOR_VEC_ISA_OK",
        )
    }
    data = ROOT / "data"
    env.update(
        HOME=str(scratch),
        TMPDIR=str(scratch / "tmp"),
        MPLCONFIGDIR=str(scratch / "mpl"),
        IPYTHONDIR=str(scratch / "ipython"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        LAB_RUNS_DIR=str(scratch / "runs"),
        LAB_DATA_DIR=str(data if data.is_dir() else scratch / "data"),
        LAB_DEVICE="cpu",
        CUDA_VISIBLE_DEVICES="",
        PYTHONHASHSEED="0",
        LAB_TIME_LIMIT=str(int(cfg.timeout)),
        MPLBACKEND="Agg",
        HF_HUB_OFFLINE="1",
        LAB_FEEDBACK="named",
        TORCH_HOME=os.environ.get("TORCH_HOME", str(Path.home() / ".cache" / "torch")),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    src = Path(cfg.src)
    readable = [
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        "/sbin",
        "/etc",
        "/opt",
        "/proc",
        "/sys",
        "/dev",
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(ROOT / "labsupport"),
        str(data),
        env["TORCH_HOME"],
    ]
    # never readable, whatever contains them: the submissions, OUT, the solved sources, the extra cases
    private = [Path(p).resolve() for p in (*cfg.private, cfg.src, cfg.extra or cfg.src, ROOT)]
    readable += [
        p
        for p in sys.path
        if p and os.path.isdir(p) and not any(q == Path(p).resolve() or Path(p).resolve() in q.parents for q in private)
    ]
    readable += [str(src / rel) for rel in edition.source_files(src) if rel.suffix != ".ipynb"]
    grade_kernel.seal_grader(reaper=bool(cfg.scratch_root))  # a worker of run_jobs reaps its kernels' orphans
    env["LAB_GRADE_SANDBOX"] = json.dumps(
        {
            "memory_mb": cfg.memory_mb,
            "file_mb": cfg.memory_mb,  # no file larger than the memory cap
            "shm_mb": max(64, cfg.memory_mb // 4) if cfg.memory_mb > 0 else 0,
            "pids_max": 512,
            "landlock": cfg.landlock,
            "read": readable,
            "write": [str(scratch), "/dev/null", "/dev/shm"],
            "stderr": str(scratch / "kernel-stderr.txt"),
            **grade_kernel.prepare(str(scratch)),
        }
    )
    if cfg.zygote:
        env[ZYGOTE_VARIABLE] = cfg.zygote
    return env


def _start_zygote(cfg: Config, folder: Path) -> subprocess.Popen | None:
    """The zygote of this run: torch, torchvision and ipykernel imported once, in an
    environment like the kernels' (threads, hash seed, no bytecode); its kernels enter
    their sandbox right after the fork (tools/grade_kernel.py serve)."""
    if not cfg.fork or not hasattr(socket, "send_fds") or not Path("/proc/self/stat").exists():
        return None
    home = folder / "zygote"
    for sub in ("tmp", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = _sandbox_env(Config(**{**asdict(cfg), "zygote": ""}), home)
    del env["LAB_GRADE_SANDBOX"]
    path = str(folder / "zygote.sock")
    with open(home / "stderr.txt", "wb") as err:
        return forkkernel.launch(
            [sys.executable, str(LAUNCHER), "serve", path], path, env=env, cwd=home, stdout=err, stderr=err
        )


# The hidden first cell: the same seed for every student (with PYTHONHASHSEED=0). The
# notebooks seed torch themselves (lab.seed_everything in their setup cell); importing it
# here would only move its import time.
_PREAMBLE = "import random as _r; _r.seed(0); del _r"


MAX_OUTPUT = 2_000_000  # characters of output kept per cell: a print loop cannot fill the grader's memory


IOPUB_TIMEOUT = 30  # seconds a cell's outputs may still come in after its kernel's reply (at most its own limit)


class NotebookTimeout(Exception):
    """A notebook ran past ``Config.notebook_timeout`` in all: a thread that starves every later cell
    (each one's own limit, then a restart that replays it) cannot hold a worker for hours."""


class Kernel:
    """One sandboxed kernel, restartable; runs one cell at a time."""

    def __init__(self, cfg: Config, scratch: Path) -> None:
        self.cfg, self.scratch = cfg, scratch
        self.deadline = time.monotonic() + cfg.notebook_timeout if cfg.notebook_timeout > 0 else float("inf")
        self.env = _sandbox_env(cfg, scratch)
        self.client = None
        self.starts = 0
        self.mounted = ""  # why the scratch folder is no tmpfs of its own ("" when it is one)
        self.sandbox = json.loads(self.env["LAB_GRADE_SANDBOX"])

    def start(self) -> None:
        if self.starts == 0 and hasattr(os, "geteuid") and os.geteuid() == 0:
            self.mounted = grade_kernel.mount_scratch(str(self.scratch), self.cfg.disk_mb) or "mounted"
        for sub in ("tmp", "mpl", "ipython", "cache", "runs"):
            (self.scratch / sub).mkdir(parents=True, exist_ok=True)
        # cells run at index 0 of a throwaway notebook: their outputs land in the cell passed in
        self.client = notebook_client(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell()]),
            self.scratch,
            timeout=self.cfg.cell_timeout,
            kernel_name=KERNEL_NAME,
            allow_errors=True,
            max_output=MAX_OUTPUT,
            startup_timeout=120,
            # a kernel whose messages stopped coming (its connection dropped: a message over runner.MAX_MESSAGE)
            # costs the cell its time limit and gets a new kernel, instead of leaving every later cell without outputs
            raise_on_iopub_timeout=True,
        )
        self.client.km = self.client.create_kernel_manager()
        bound_messages(self.client.km)  # no message of the kernel's is read whole past runner.MAX_MESSAGE bytes
        # in the scratch folder, which goes with the job, even when the kernel or its worker dies
        self.client.km.connection_file = str(self.scratch / f"kernel-{self.starts}.json")
        if self.sandbox.get("netns"):  # a network of its own: Jupyter's channels become Unix socket files
            self.client.km.transport = "ipc"
            self.client.km.ip = str(self.scratch / f"kernel-{self.starts}")
        self.client.start_new_kernel(env=self.env, cwd=str(self.scratch))
        self.client.start_new_kernel_client()
        self.starts += 1
        self.run(nbformat.v4.new_code_cell(_PREAMBLE), -1, 60, hidden=True)

    def stop(self) -> None:
        """End the kernel and every process it started (new sessions too); its /dev/shm files go."""
        if self.client is not None:
            pid = getattr(getattr(self.client.km, "provisioner", None), "pid", None) or 0
            try:
                self.client._cleanup_kernel()
            except Exception:  # a dead kernel: nothing left to stop
                pass
            self.client = None
            grade_kernel.end(pid, self.sandbox, str(self.scratch))

    def close(self) -> None:
        """Stop it for good: its scratch folder's tmpfs goes too."""
        self.stop()
        if self.mounted == "mounted":
            grade_kernel.unmount_scratch(str(self.scratch))
            self.mounted = ""

    def run(self, cell, index: int, timeout: float, hidden: bool = False) -> tuple[str, float]:
        """Execute ``cell`` (outputs land in it); return ("ok" | "error" | "timeout" | "dead", seconds).
        A ``hidden`` cell stays out of the kernel's history (``In``, ``_ih``)."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise NotebookTimeout(f"the notebook ran past {self.cfg.notebook_timeout:g} s in all (restarts included)")
        self.client.timeout = max(1, int(min(timeout, left)))
        self.client.iopub_timeout = max(4, min(IOPUB_TIMEOUT, self.client.timeout))
        cell.outputs = []
        # nbclient updates a display (display_id) in self.nb's cell at this index: let that be this cell, and let no
        # update reach a display of an earlier cell (another cell's output, or an IndexError in the grader)
        self.client.nb.cells[0] = cell
        self.client._display_id_map.clear()
        replies: list[dict] = []
        self.client.on_cell_executed = lambda **kw: replies.append(kw.get("execute_reply") or {})
        t0 = time.perf_counter()
        try:
            self.client.execute_cell(cell, 0, store_history=not hidden)
        except CellTimeoutError:
            return "timeout", time.perf_counter() - t0
        except DeadKernelError:
            return "dead", time.perf_counter() - t0
        except RuntimeError as err:  # the kernel died between messages
            if "kernel" in str(err).lower() and "died" in str(err).lower():
                return "dead", time.perf_counter() - t0
            raise
        failed = _settled(cell, (replies[-1].get("content") or {}) if replies else {})
        return ("error" if failed else "ok"), time.perf_counter() - t0


def _settled(cell, reply: dict) -> bool:
    """Whether the cell failed, by its outputs or by the kernel's reply; its error outputs clipped.

    The kernel's reply counts too: an exception it cannot send as an output (a lone surrogate in its
    message), or one whose display was replaced, leaves the cell with the lines printed before it, a
    ``PASS`` line among them, and no error output; the reply still says ``error``, and the cell gets an
    error output saying so. The runner keeps an error output whole, however long: its message is the
    student's, and it is clipped here."""
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    if reply.get("status", "ok") != "ok" and not errors:
        evalue = f"{reply.get('ename', '')}: {reply.get('evalue', '')} (the kernel's reply says so; the cell showed no error)"
        errors.append(nbformat.v4.new_output("error", ename="KernelError", evalue=evalue, traceback=[]))
        cell.outputs.append(errors[-1])
    for err in errors:
        err["evalue"] = _clipped(str(err.get("evalue", "")))
        lines = [_clipped(str(line)) for line in err.get("traceback", [])]
        err["traceback"] = lines if len(lines) <= 200 else [*lines[:100], "[...]", *lines[-100:]]
    return bool(errors)


# --------------------------------------------------------------------------- grading one notebook


def _error(cell) -> dict | None:
    return next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _message(err: dict) -> str:
    """A check's failure as the student saw it (the CheckError block, without colours)."""
    lines = [_ANSI.sub("", line) for line in err.get("traceback", [])]
    block = [line for line in lines if not line.strip().startswith("(the full traceback")]
    if block and ("CHECK FAILED" in block[0] or "STOPPED" in block[0]):
        return "\n".join(line.rstrip() for line in block[1:] if line.strip()).strip() or block[0].strip()
    return f"{err.get('ename', 'Error')}: {err.get('evalue', '')}".strip()


def _result(ex: Exercise, points: float, student_id: str, notebook: str) -> dict:
    return {
        "student": student_id,
        "notebook": notebook,
        "exercise": ex.id,
        "label": ex.label,
        "points": 0.0,
        "max_points": points,
        "status": "not run",
        "feedback": "",
        "detail": "",
        "note": "",
        "seconds": 0.0,
        "flags": [],
    }


def _plan(src: Source, sub, student_id: str, cfg: Config):
    """The rebuilt notebook, a blank result per exercise, each graded cell's role, the cells to run."""
    nb, slots, written = rebuild(src, sub)
    results = {ex.id: _result(ex, src.points[ex.id], student_id, src.name) for ex in src.exercises}
    role: dict[int, tuple[str, Exercise]] = {}
    for ex in src.exercises:
        role[ex.cell] = ("exercise", ex)
        if ex.check_cell is not None:
            role[ex.check_cell] = ("check", ex)
        slot, res = slots[ex.id], results[ex.id]
        res["note"] = slot.note
        if slot.code is None:
            res.update(status="missing", feedback=slot.note)
            continue
        res["forging"] = forging(suspicious(slot.code))  # holds the points the kernel judges (_hold)
        if trusted_mode(ex, cfg):  # the grader judges it: code that may run the lab's own code costs the point
            res["reaches"] = uses_lab_code(slot.code, src.allowed)
            reasons = dict.fromkeys([*res["reaches"], *suspicious(slot.code)])
            res["flags"] += [f"review it: {why}" for why in reasons]
        else:
            res["flags"] += [f"review it: {why}" for why in suspicious(slot.code)]
    last = max([e.check_cell or e.cell for e in src.exercises], default=-1)
    order = [
        i
        for i, c in enumerate(nb.cells[: last + 1])
        if c.cell_type == "code" and not edition._is_skip(src.notebook.cells[i])
    ]
    return nb, results, written, role, order


def _lost(res: dict, outcome: str, kind: str, cfg: Config) -> None:
    """An exercise whose cell ran out of time or killed its kernel."""
    what = "your exercise cell" if kind == "exercise" else "its check"
    res["points"] = 0.0
    if outcome == "timeout":
        res.update(status="timeout", feedback=f"timed out after {cfg.timeout:g} s while running {what}")
    else:
        res.update(
            status="crashed",
            feedback=f"the kernel died while running {what} (os._exit, a crash in "
            f"native code, or the memory limit of {cfg.memory_mb} MB)",
        )


def _restart(kernel: Kernel, nb, clean: list[int]) -> None:
    """A fresh kernel, brought to the state before the lost cell by replaying the clean ones."""
    kernel.stop()
    kernel.start()
    for j in clean:
        again, _ = kernel.run(nb.cells[j], j, kernel.cfg.cell_timeout)
        if again in ("timeout", "dead"):
            raise RuntimeError(f"replaying cell {j} after a restart: {again}")


def grade_notebook(src: Source, sub, cfg: Config, student_id: str) -> dict:
    """Rebuild ``sub`` on ``src`` and run it in a fresh sandboxed kernel; the per-exercise results."""
    nb, results, written, role, order = _plan(src, sub, student_id, cfg)
    scratch = Path(tempfile.mkdtemp(prefix="s-", dir=cfg.scratch_root or None))
    kernel, t_start = Kernel(cfg, scratch), time.perf_counter()
    clean: list[int] = []  # cells that ran without error: replayed after a restart
    broken = setup_error = ""
    first = min([e.cell for e in src.exercises], default=0)
    try:
        kernel.start()
        for i in order:
            kind, ex = role.get(i, ("scaffold", None))
            res = results[ex.id] if ex else None
            if res is not None and res["status"] in ("missing", "timeout", "crashed"):
                continue
            limit = cfg.timeout + (10 if kind == "check" else 0) if ex else cfg.cell_timeout
            outcome, secs = kernel.run(nb.cells[i], i, limit)
            if res is not None:
                res["seconds"] = round(res["seconds"] + secs, 3)
            if outcome in ("timeout", "dead"):
                if res is not None:
                    _lost(res, outcome, kind, cfg)
                _restart(kernel, nb, clean)
                continue
            if outcome == "ok":
                clean.append(i)
            elif kind == "scaffold" and i < first and not setup_error:  # the source's own setup failed:
                err = _error(nb.cells[i])  # no grade below means anything
                setup_error = f"the notebook's setup (cell {i}) failed: {err['ename']}: {err['evalue']}"[:300]
            if kind == "exercise":
                err = _error(nb.cells[i])
                res["exercise_error"] = f"{err['ename']}: {err['evalue']}" if err else ""
            elif kind == "check":
                _judge(res, nb.cells[i], outcome)
                lost = _trusted(kernel, src, ex, res, sub, cfg) if trusted_mode(ex, cfg) else ""
                if lost:
                    _lost(res, lost, "check", cfg)
                    _restart(kernel, nb, clean)
        if src.extra:
            _extras(kernel, src, results, nb, clean)
    except Exception as exc:  # the kernel would not start, or its state could not be rebuilt
        broken = f"{type(exc).__name__}: {exc}"
    finally:
        kernel.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for res in results.values():
        if res["status"] == "not run":
            res["feedback"] = ("not graded: " + broken) if broken else "not graded: no check cell follows it"
    _hold(src, results, cfg)
    return {
        "results": list(results.values()),
        "written": written,
        "executed": nbformat.writes(nb, ensure_ascii=True),  # a lone surrogate an output holds stays an escape
        "seconds": round(time.perf_counter() - t_start, 3),
        "kernel_starts": kernel.starts,
        "error": broken or setup_error,
    }


def _judge(res: dict, cell, outcome: str) -> None:
    """Score one exercise from its check cell's outputs."""
    err = _error(cell)
    passes = [line.strip() for line in _stdout(cell).splitlines() if line.startswith("PASS")]
    stub = res.get("exercise_error", "").startswith("NotImplementedError") or (
        err is not None and "not written yet" in _message(err)
    )
    if outcome == "ok" and passes:
        res.update(status="pass", points=res["max_points"], feedback="\n".join(passes))
    elif err is not None:
        res.update(
            status="not written" if stub else "fail",
            feedback=("not written yet. " if stub and "not written yet" not in _message(err) else "") + _message(err),
        )
    else:
        res.update(status="fail", feedback="the check cell printed no PASS line")
    own = res.get("exercise_error", "")
    if res["status"] == "fail" and own and not own.startswith("NotImplementedError"):
        res["feedback"] += f"\n(your exercise cell itself raised {own})"


def _first_answer(sub, ex: Exercise) -> tuple[bool, object]:
    """A prediction's first committed answer: the ``recorded answer: ...`` its check printed in the
    submitted notebook (a re-run would only see the last answer), when the notebook holds one."""
    found = _recorded(sub, ex)[:1]
    return (True, found[0]) if found else (False, None)


def _recorded(sub, ex: Exercise) -> list:
    """Every first answer the submitted notebook's check cells of ``ex`` record, in order: read from all of
    their outputs at once (one cell's end is no answer's end), so 10,000 cells given the check's metadata cost
    the grader no more time than one (:data:`judge.MAX_SCANNED`)."""
    outputs: list = []
    for i in _cells_of(sub, ex.id, "check", "code", ex.check_id):
        stored = sub.cells[i].get("outputs")
        outputs += [*stored, _LINE_BREAK] if isinstance(stored, list) else []
    return judge.recorded_answers(outputs)


_LINE_BREAK = {"output_type": "stream", "text": "\n"}


def _trusted(kernel: Kernel, src: Source, ex: Exercise, res: dict, sub, cfg: Config) -> str:
    """Decide ``ex``'s points in this process (tools/judge.py): the real check on the kernel's values
    and functions, never on what the kernel printed. Returns "timeout" or "dead" when the kernel was
    lost while answering, else ""."""
    if res["status"] in ("missing", "timeout", "crashed"):
        return ""
    kernel_passed = res["status"] == "pass"
    # the kernel's verdict counts for nothing until the grader's own is in: if judging raises (a value the grader
    # cannot print, the notebook's time spent), the exercise is "not run", never the kernel's (forgeable) pass
    kernel_verdict = {k: res[k] for k in ("status", "feedback")}
    res.update(status="not run", points=0.0)
    mode = trusted_mode(ex, cfg)
    answer = _first_answer(sub, ex) if mode == "value" else (False, None)
    partial = ex.id in src.partial or ex.id in cfg.partial or "all" in cfg.partial
    t0 = time.perf_counter()
    verdict = judge.judge(
        judge.Channel(kernel, cfg.timeout),
        ex.call,
        module=cfg.checks,
        answer=answer,
        partial=partial,
        timeout=cfg.timeout,
    )
    res["seconds"] = round(res["seconds"] + time.perf_counter() - t0, 3)
    res["verdict"] = "grader"
    if verdict.outcome != "ok":
        return verdict.outcome
    if answer[0]:
        recorded = f"graded the first answer your notebook recorded: {_short(answer[1])}"
        res["note"] = f"{res['note']}\n{recorded}" if res["note"] else recorded
        if verdict.passed:
            res["flags"] += _answer_flags(kernel, ex, verdict.current, _recorded(sub, ex), cfg)
    res.update(kernel_verdict)
    top = res["max_points"]
    first = verdict.feedback.splitlines()[0] if verdict.feedback else ""
    res["detail"] = f"the grader's own run of the check: {'passed' if verdict.passed else 'failed'}: {first}"[:500]
    if res.get("reaches"):
        res.update(
            status="fail",
            points=0.0,
            feedback="your exercise cell may run the lab's own code instead of yours ("
            + "; ".join(res["reaches"])
            + "): it scores 0 until your instructor has read it",
        )
    elif verdict.passed and (mode == "value" or kernel_passed):
        res.update(status="pass", points=top, feedback=verdict.feedback)
    elif verdict.passed:  # the kernel's own run of the check failed: its message says why
        res["points"] = round(top * verdict.fraction_if_failed, 3) if partial else 0.0
    else:
        stub = "not written yet" in verdict.feedback
        res.update(status="not written" if stub else "fail", feedback=verdict.feedback, mistake=verdict.mistake)
        res["points"] = round(top * verdict.fraction, 3) if partial and not stub else 0.0
    if res["status"] != "pass" and res["points"] > 0:
        res["status"] = "partial"
    return ""


def _hold(src: Source, results: dict, cfg: Config) -> None:
    """Points judged in the kernel are held at 0 when any exercise cell of the notebook changes how checks
    run there (IPython's hooks, the lab's or torch's attributes, builtins...: tools/flags.forging): one
    cell's patch reaches every later check of that kernel. The instructor restores them (manual.csv)."""
    forged = [ex.id for ex in src.exercises if results[ex.id].get("forging")]
    if not forged:
        return
    for ex in src.exercises:
        res = results[ex.id]
        if not trusted_mode(ex, cfg) and res["points"] > 0:
            res.update(
                points=0.0,
                status="held",
                feedback=res["feedback"] + f"\n(held at 0 until your instructor has read the code of "
                f"{', '.join(forged)}: it changes how the checks run in your kernel)",
            )
            res["flags"] = res["flags"] or [f"review it: held because of the code of {', '.join(forged)}"]


def _answer_flags(kernel: Kernel, ex: Exercise, current: object, recorded: list, cfg: Config) -> list[str]:
    """Why a prediction whose first recorded answer (``recorded[0]``) passed needs a look: the notebook records
    other first answers too (the check prints one per run: a kernel restart, or a stored output edited or
    added by hand, as in a cell given the check's metadata), or the answer cell now says something else."""
    flags = []
    answers = list(dict.fromkeys(_short(_answer_words(a)) for a in recorded))
    if len(answers) > 1:
        flags.append(
            f"review it: the notebook records {len(answers)} different first answers ({', '.join(answers)}); "
            f"the first one, {answers[0]}, was graded (a kernel restart, or a stored output edited by hand?)"
        )
    if _edited_answer(kernel, ex, current, recorded[0], cfg):
        flags.append(
            f"review it: the recorded first answer {_short(recorded[0])} is right but the answer cell now says "
            f"{_short(current)} (was the notebook's stored output edited?)"
        )
    return flags


def _short(value: object, limit: int = 100) -> str:
    """``repr(value)`` (a value the kernel sent: plain data, but any size) clipped to ``limit`` characters; an int too
    long for Python to print in decimal (``0x`` and 100,000 hex digits, a valid literal) is named by its size."""
    try:
        text = repr(value)
    except ValueError:  # int -> str: "Exceeds the limit (4300 digits)"
        text = f"<an int of {value.bit_length() if isinstance(value, int) else '?'} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _edited_answer(kernel: Kernel, ex: Exercise, current: object, recorded: object, cfg: Config) -> bool:
    """A right recorded first answer next to an answer cell that now says something else, which the check
    itself does not find right either: the one sign that a notebook's stored output was edited by hand.
    ("Slice." or "1024 x 1024" in the cell for a recorded 'slice' or 1024 is the same answer, as the check reads it.)"""
    if _answer_words(current) == _answer_words(recorded):
        return False
    again = judge.judge(judge.Channel(kernel, cfg.timeout), ex.call, module=cfg.checks, timeout=cfg.timeout)
    return not (again.outcome == "ok" and again.passed)


def _answer_words(value: object) -> object:
    """A prediction compared as the checks compare it: words lower-cased, lists as tuples."""
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, (list, tuple)):
        return tuple(_answer_words(v) for v in value)
    return value


def _extras(kernel: Kernel, src: Source, results: dict, nb, clean: list[int]) -> None:
    """The instructor's extra cases of every exercise that passed its check, run by the grader itself
    on the kernel's values and functions (tools/judge.py), after the last check. A case that needs
    an object the kernel cannot send (a class, a module) runs in the kernel instead, in a hidden
    cell after every student cell, so no student code runs after it that could echo it back."""
    cases: dict = {}
    exec(compile(src.extra, f"<instructor cases of {src.name}>", "exec"), cases)  # the instructor's own file
    channel = judge.Channel(kernel, kernel.cfg.timeout)
    for ex in src.exercises:
        res, fn = results[ex.id], f"extra_{ex.id.replace('.', '_')}"
        if res["status"] != "pass" or not callable(cases.get(fn)):
            continue
        t0 = time.perf_counter()
        outcome, message = judge.run_extra(channel, cases[fn], kernel.cfg.checks, kernel.cfg.timeout)
        if outcome == "kernel":
            outcome, message = _extra_in_kernel(kernel, src, fn)
        res["seconds"] = round(res["seconds"] + time.perf_counter() - t0, 3)
        if outcome != "pass":
            res.update(
                status="fail",
                points=0.0,
                detail=f"extra cases: {message or outcome}",
                feedback=res["feedback"] + "\nbut an additional test of your instructor failed",
            )
        if outcome in ("timeout", "dead"):
            _restart(kernel, nb, clean)


def _extra_in_kernel(kernel: Kernel, src: Source, fn: str) -> tuple[str, str]:
    """An extra case run in the kernel, on its namespace (what every case did before tools/judge.py)."""
    probe = nbformat.v4.new_code_cell(
        f"def _grade_extra():\n    _ns = {{}}\n    exec(compile({src.extra!r}, '<instructor cases>', 'exec'), _ns)"
        f"\n    _ns[{fn!r}](get_ipython().user_ns)\n_grade_extra(); del _grade_extra"
    )
    outcome, _ = kernel.run(probe, -1, kernel.cfg.timeout, hidden=True)
    bad = _error(probe)
    if outcome == "ok" and bad is None:
        return "pass", ""
    return (outcome if outcome in ("timeout", "dead") else "fail"), (_message(bad) if bad else outcome)


# --------------------------------------------------------------------------- a whole class

_SOURCES: dict[tuple[str, str | None], dict[str, Source]] = {}


def _sources(cfg: Config) -> dict[str, Source]:
    key = (cfg.src, cfg.extra)
    if key not in _SOURCES:
        _SOURCES[key] = load_sources(Path(cfg.src), Path(cfg.extra) if cfg.extra else None)
    return _SOURCES[key]


def grade_job(job: dict, cfg: Config) -> dict:
    """Grade one (student, notebook) in a worker process; never raises."""
    src = _sources(cfg)[job["notebook"]]
    try:
        sub = nbformat.from_dict(_mended(nbformat.reads(job["text"], as_version=4)))
        out = grade_notebook(src, sub, cfg, job["student"])
        for res in out["results"]:
            res.update({k: _clipped(res[k]) for k in ("feedback", "detail", "exercise_error") if k in res})
        for w in out["written"]:
            w["answer"] = _clipped(w["answer"], MAX_ANSWER)
    except Exception as exc:
        out = {
            "results": [],
            "written": [],
            "executed": "",
            "seconds": 0.0,
            "kernel_starts": 0,
            "error": f"grader error: {type(exc).__name__}: {exc}",
        }
    return {**job, **out, "text": None}


MAX_FEEDBACK = 20_000  # characters of an exercise's feedback kept: its start and its end
MAX_ANSWER = 200_000  # characters of a written answer kept


def _clipped(text: str | None, limit: int = MAX_FEEDBACK) -> str | None:
    """``text`` cut to ``limit`` characters (its start and its end, and how much was left out between):
    an exception the student raised with 10 MB in its message is not copied into every file the grader writes."""
    if text is None or len(text) <= limit:
        return text
    left = f"\n[... {len(text) - limit:,} characters left out ...]\n"
    return text[: limit // 2] + left + text[-(limit // 2) :]


# what no one sees as itself: control characters (but line breaks and tabs), bidirectional overrides, lone surrogates
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x80-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _mended(value):
    """``value`` (a notebook read from JSON) with every lone surrogate (``"\\ud800"`` in the JSON: no UTF-8 text
    holds it, and the kernel protocol refuses it) replaced by U+FFFD, so the rest of its cells still run."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mended(v) for v in value]
    if isinstance(value, dict):
        return {k: _mended(v) for k, v in value.items()}
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value):
    """``value`` (strings, lists and dicts of them) with every character :data:`_UNSEEN` matches written as its
    escape: a terminal escape sequence in a message cannot recolour or erase what an instructor reads, a
    right-to-left override cannot reorder a line, and a lone surrogate (which no UTF-8 file can hold) cannot
    stop the gradebook from being written."""
    if isinstance(value, str):
        return _UNSEEN.sub(lambda m: _visible(m.group()), value)
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, dict):
        return {k: _storable(v) for k, v in value.items()}
    return value


def _kernel_spec(folder: Path) -> None:
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, str(LAUNCHER), "-f", "{connection_file}"],
                "display_name": "lab grader (sandboxed)",
                "language": "python",
            }
        )
    )


def _init_worker(jupyter_path: str, worker_mb: int = 0) -> None:
    os.environ["JUPYTER_PATH"] = jupyter_path + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    os.environ.update(LAB_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")  # the checks this worker runs itself (tools/judge.py)
    cap_worker(worker_mb)


def cap_worker(grow_mb: int) -> None:
    """Let this process's data (``RLIMIT_DATA``, its soft limit: the kernels it starts set their own) grow by at most
    ``grow_mb`` MB past what it holds now (0: no cap). A kernel's message arrives whole, every part of it, before
    the client reads its first part (libzmq): a message of 100 parts of 60 MB (one buffer sent 100 times, which
    costs its kernel nothing) would take 6 GB of the grader's. Past the cap its reading fails and the kernel's
    connection is dropped (the cell times out), or at worst this worker dies: that job's row says so, and no other
    student's is lost (:func:`_graded_in_rounds`)."""
    if grow_mb <= 0 or not Path("/proc/self/status").exists():
        return
    import resource

    with open("/proc/self/status") as f:
        held = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:")), 0)
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    soft = held + grow_mb * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


NO_FOLDER = "(no student folder)"  # the student of a row for a file at the top that is not Canvas's
_CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?:_LATE)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+\.ipynb)$")


def _reserved(name: str) -> bool:
    """A folder named as a row or a heading of the gradebook's own, however spelled (``Points Possible``, which an LMS
    import reads as the maximum of each column, ``STUDENT``, ``(no student folder)``): no student's."""
    words = " ".join(re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", name)).split()).casefold()
    return words in _RESERVED


def _units(submissions: Path, log: logging.Logger) -> tuple[dict[str, list[tuple[str, Path]]], list[dict]]:
    """Each student's files (name as handed in, path): a folder per student, or Canvas's flat
    ``<name>_<id>_<submission id>_<file>.ipynb`` files at the top (the student is ``<name>_<id>``)."""
    units: dict[str, list[tuple[str, Path]]] = {}
    rows = []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir() and _reserved(entry.name):
            log.info("%s: a folder named as a row of the gradebook's own: skipped", entry.name)
            status = "a student folder named as a row the gradebook writes itself: not graded (rename the folder)"
            rows.append({"student": NO_FOLDER, "notebook": entry.name, "file": entry.name, "status": status})
        elif entry.is_dir():
            # no link: it could point into another student's folder
            units.setdefault(shown(entry.name), []).extend(_notebooks(entry, log))
        elif entry.suffix == ".ipynb":
            canvas = _CANVAS.match(entry.name)
            if canvas:
                units.setdefault(shown(f"{canvas['name']}_{canvas['id']}"), []).append((shown(canvas["file"]), entry))
            else:
                log.info(
                    "%s: a notebook outside any student folder, not named as Canvas names them: skipped", entry.name
                )
                rows.append(
                    {
                        "student": NO_FOLDER,
                        "notebook": entry.name,
                        "file": entry.name,
                        "status": "not in a student folder",
                    }
                )
    return units, rows


_ZIP_LIMIT = 2 * 2**30  # bytes a zip may extract to
MAX_ZIP_ENTRIES = 10_000  # entries of one zip extracted (its notebooks first); the rest are skipped, and logged
MAX_ZIP_DIRECTORY = 8 * 2**20  # bytes of a zip's list of entries read: a longer list (~60,000 entries) is not read


def _zip_directory_size(archive: Path) -> int:
    """The size of a zip's list of entries (its central directory), from the record at its end, read before
    zipfile reads the whole list into memory: a zip of a million empty entries would take a gigabyte of it."""
    import zipfile

    reader = getattr(zipfile, "_EndRecData", None)  # zipfile's own reader of that record (zip64 too), private:
    if reader is None:  # a Python without it skips this test; MAX_ZIP_ENTRIES still bounds what is extracted
        return 0
    with open(archive, "rb") as f:
        end = reader(f)  # None: not a zip
    return int(end[zipfile._ECD_SIZE]) if end else 0


def _read_order(info) -> int:
    """When a zip's entry is extracted: its notebooks first (0), then its folders (1), then the rest (2), which the
    grader never reads: a student's thousands of data files or folders cannot push another student's notebook
    past :data:`MAX_ZIP_ENTRIES`."""
    if info.filename.endswith(".ipynb") and not info.is_dir():
        return 0
    return 1 if info.is_dir() else 2


def _safe_extract(archive: Path, into: Path, log: logging.Logger) -> Path:
    """Extract a zip into ``into``, refusing absolute paths, ``..`` and links; keep each file's time. At most
    :data:`MAX_ZIP_ENTRIES` entries are extracted: the log says how many were skipped and names the first."""
    import zipfile

    listed = _zip_directory_size(archive)
    if listed > MAX_ZIP_DIRECTORY:
        raise ValueError(
            f"its list of entries takes {listed / 2**20:.0f} MB, more than {MAX_ZIP_DIRECTORY // 2**20} MB "
            "(tens of thousands of entries): not read"
        )
    with zipfile.ZipFile(archive) as zf:
        entries = zf.infolist()
        if sum(info.file_size for info in entries) > _ZIP_LIMIT:
            raise ValueError(f"it would extract to more than {_ZIP_LIMIT // 2**20} MB")
        entries.sort(key=_read_order)  # stable: each kind in the zip's order
        root = into.resolve()
        claimed: dict[str, str] = {}
        for info in entries[:MAX_ZIP_ENTRIES]:
            if _spelled_twice(info.filename, claimed):
                log.info(
                    "%s: refused %r (another entry's name but for case or accents: one file on a Mac)",
                    archive.name,
                    info.filename,
                )
                continue
            _extract_checked(zf, info, root, archive.name, log)
    skipped = entries[MAX_ZIP_ENTRIES:]
    if skipped:
        log.info(
            "%s: %d entries past the first %d skipped, not read (the first skipped: %r)",
            archive.name,
            len(skipped),
            MAX_ZIP_ENTRIES,
            skipped[0].filename,
        )
    top = [e for e in into.iterdir() if not e.name.startswith((".", "__MACOSX"))]
    if len(top) == 1 and top[0].is_dir() and not any(top[0].glob("*.ipynb")):
        return top[0]  # one folder around the class
    return into


def _spelled_twice(name: str, claimed: dict[str, str]) -> bool:
    """Whether a zip entry's path, or a folder above it, is an earlier entry's but for case or Unicode normalisation
    (``Ana/hw.ipynb`` after ``ana/hw.ipynb``): one path on a case-insensitive disk (macOS, Windows), where one
    student's file would replace another's. ``claimed`` records each spelling seen first."""
    parts = [part for part in name.replace("\\", "/").split("/") if part]
    for i in range(1, len(parts) + 1):
        spelled = "/".join(parts[:i])
        if claimed.setdefault(unicodedata.normalize("NFC", spelled).casefold(), spelled) != spelled:
            return True
    return False


def _extract_checked(zf, info, into: Path, archive: str, log: logging.Logger) -> None:
    """One entry of a zip extracted under ``into`` (a resolved path), unless it is an absolute path, goes up (``..``) or out, is a
    link, or the disk refuses it (the log says why)."""
    name = info.filename.replace("\\", "/")
    parts = Path(name).parts
    mode = info.external_attr >> 16
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in parts or (mode & 0o170000) == 0o120000:
        log.info("%s: refused %r (an absolute path, .. or a link)", archive, info.filename)
        return
    target = into.joinpath(*parts)
    if into not in target.resolve().parents:
        log.info("%s: refused %r (outside the folder)", archive, info.filename)
        return
    try:
        _extract_entry(zf, info, target)
    except OSError as exc:  # a name too long for the disk: that entry, not the whole class's zip
        log.info("%s: refused %r (%s)", archive, info.filename, exc.strerror or type(exc).__name__)
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error) as exc:
        # a damaged entry (its checksum), one with a password or a compression zipfile cannot read
        log.info("%s: refused %r (unreadable: %s)", archive, info.filename, exc)


def _extract_entry(zf, info, target: Path) -> None:
    """One entry of a zip written to ``target``, with its time."""
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zf.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except BaseException:  # nothing half-written is left to be graded
        target.unlink(missing_ok=True)
        raise
    stamp = time.mktime((*info.date_time, 0, 0, -1))
    os.utime(target, (stamp, stamp))


MAX_NOTEBOOK = 256 * 2**20  # bytes of one handed-in file read: a larger one is refused, not loaded


def collect(
    submissions: Path, sources: dict[str, Source], log: logging.Logger, *, zips: bool = True
) -> tuple[list[dict], list[dict]]:
    """Match every file to a source; return the jobs to run and the rows that need no kernel.
    A ``.zip`` at the top of ``submissions`` is read as another such folder (extracted into a temporary
    folder), except a zip Canvas named for one student (``<name>_<id>_<sub>_<file>.zip``, what that student
    uploaded): every notebook in it is that student's, whatever its folders are called. A student's files
    from every place (their folder, Canvas's flat files, zips) are weighed together: one job per notebook,
    the newest copy, never two rows for one (student, notebook) that overwrite each other."""
    units, rows = _units(submissions, log)
    archives = sorted(p for p in submissions.glob("*.zip") if p.is_file() and not p.is_symlink()) if zips else []
    jobs: list[dict] = []
    handed_in: dict[tuple[str, str], float] = {}  # (student, file) from that student's own zip: the zip's time
    with contextlib.ExitStack() as stack:  # the extracted files are read by _student_jobs below
        for archive in archives:  # a zip in a zip is not opened
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lab-grade-zip-")))
            found, more_rows = _archive_units(archive, tmp, log)
            rows += more_rows
            for student_id, files in found.items():
                units.setdefault(student_id, []).extend((f"{archive.name}:{rel}", path) for rel, path in files)
                if _CANVAS.match(archive.name[: -len(".zip")] + ".ipynb"):
                    handed_in.update(
                        {(student_id, f"{archive.name}:{rel}"): archive.stat().st_mtime for rel, _ in files}
                    )
        rows += _shared_files(units, sources, log)
        for student_id, files in units.items():
            files, skipped = _budgeted(student_id, files, log)
            more_jobs, more_rows = _student_jobs(student_id, files, sources, log)
            # a notebook of a student's own zip is submitted at the zip's time: its entry's time (which copy is the
            # newest) is the student's to set, and a 1980 one would make a late notebook on time
            for job in more_jobs:
                job["mtime"] = handed_in.get((student_id, job["file"]), job["mtime"])
            jobs += more_jobs
            rows += more_rows + skipped
    return jobs, rows


MAX_FILES = 200  # notebooks of one student read, the newest first: the series has 15 (copies aside)
MAX_STUDENT_BYTES = 2**30  # bytes of one student's notebooks read, the newest first


def _budgeted(student_id: str, files: list[tuple[str, Path]], log: logging.Logger) -> tuple[list, list[dict]]:
    """The files of a student the grader reads: the newest :data:`MAX_FILES`, up to :data:`MAX_STUDENT_BYTES` in all
    (a folder of 10,000 copies of a notebook is not read 10,000 times); a row says how many more were not read."""
    if len(files) <= 1:
        return files, []
    stamped = []
    for rel, path in files:
        try:
            status = path.lstat()
        except OSError:
            status = None
        stamped.append((status.st_mtime if status else 0.0, status.st_size if status else 0, rel, path))
    stamped.sort(key=lambda f: f[0], reverse=True)
    kept, total = [], 0
    for _, size, rel, path in stamped:
        if kept and (len(kept) >= MAX_FILES or total + size > MAX_STUDENT_BYTES):
            break
        kept.append((rel, path))
        total += size
    if len(kept) == len(files):
        return files, []
    left = len(files) - len(kept)
    most = f"{MAX_FILES} files, {MAX_STUDENT_BYTES // 2**20} MB in all"
    why = f"{left} more file(s) not read: a student's newest {most}, are read"
    log.info("%s: %s", student_id, why)
    return sorted(kept), [{"student": student_id, "notebook": "", "file": "", "status": why}]


def _shared_files(units: dict[str, list[tuple[str, Path]]], sources: dict[str, Source], log: logging.Logger) -> list:
    """Take out of ``units`` every handed-in file that is, on disk, a solved source (a hard link to it) or a file of
    another student too (two names of one file: whose it is, the instructor says); a row for each."""
    owners: dict[tuple[int, int], set[str]] = {}
    inode = {}
    for student_id, files in units.items():
        for _, path in files:
            with contextlib.suppress(OSError):
                status = path.lstat()
                inode[path] = (status.st_dev, status.st_ino)
                owners.setdefault(inode[path], set()).add(student_id)
    solved = set()
    for src in sources.values():
        with contextlib.suppress(OSError):
            solved.add((src.path.stat().st_dev, src.path.stat().st_ino))
    rows = []
    for student_id, files in units.items():
        for rel, path in list(files):
            key = inode.get(path)
            why = "the solved source notebook" if key in solved else ""
            if not why and key is not None and len(owners[key]) > 1:
                why = "a file of " + ", ".join(sorted(owners[key] - {student_id})) + " too"
            if why:
                files.remove((rel, path))
                log.info("%s/%s: a link to %s: not read", student_id, rel, why)
                status = f"{rel} is {why} (a hard link): not graded"
                rows.append({"student": student_id, "notebook": rel, "file": rel, "status": status})
    return rows


def _archive_units(archive: Path, tmp: Path, log: logging.Logger) -> tuple[dict, list[dict]]:
    """The students' files of a zip extracted into ``tmp`` (see :func:`collect`), and the rows of what is no one's."""
    owner = _CANVAS.match(archive.name[: -len(".zip")] + ".ipynb")
    try:
        root = _safe_extract(archive, tmp, log)
    except Exception as exc:
        log.info("%s: not a readable zip: %s", archive.name, exc)
        status = f"not a readable zip: {exc}"
        return {}, [{"student": NO_FOLDER, "notebook": archive.name, "file": archive.name, "status": status}]
    log.info("%s: extracted into a temporary folder and read as handed in", archive.name)
    if owner:  # one student's upload: it cannot hand in for another student
        return {shown(f"{owner['name']}_{owner['id']}"): _notebooks(tmp, log)}, []
    return _units(root, log)


MAX_WALKED = 20_000  # files and folders of one student's folder looked at for notebooks; the rest is not, and logged


def _notebooks(folder: Path, log: logging.Logger | None = None) -> list[tuple[str, Path]]:
    """The notebooks under ``folder`` (name relative to it, path), no link, no checkpoint: found among its first
    :data:`MAX_WALKED` entries, a folder at a time without recursion (a folder nested 2,000 deep raises nothing)."""
    found, folders, seen = [], [folder], 0
    while folders and seen < MAX_WALKED:
        try:
            with os.scandir(folders.pop()) as listing:
                entries = [entry for _, entry in zip(range(MAX_WALKED - seen), listing)]
        except OSError:  # a folder it may not read
            continue
        seen += len(entries)
        for entry in entries:
            if entry.name in (".ipynb_checkpoints", "__MACOSX") or entry.is_symlink():
                continue  # no link: it could point into another student's folder, the sources or OUT
            if entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
            elif entry.name.endswith(".ipynb"):
                found.append(Path(entry.path))
    if (folders or seen >= MAX_WALKED) and log:
        log.info("%s: more than %d files and folders: the rest were not looked at", shown(folder.name), MAX_WALKED)
    return [(shown(p.relative_to(folder).as_posix()), p) for p in sorted(found)]


def shown(name: str) -> str:
    """A handed-in folder or file name as the gradebook, the feedback and the log write it: a character
    no one sees as itself (a control character, an escape sequence, a right-to-left override, a byte that
    is no UTF-8) as its escape, so a name cannot colour, reorder or break the lines it lands in, or stop
    the gradebook from being written. Two names stay two names: a backslash is doubled, so the folder named
    ``a\\x1b`` (four characters) and the folder named ``a`` and ESC are two students."""
    if name.isprintable() and "\\" not in name:
        return name
    return "".join("\\\\" if char == "\\" else _visible(char) for char in name)


def _read_notebook(path: Path, sources: dict[str, Source]) -> tuple[str, Source | None, float, str]:
    """A handed-in file's text and the source it matches (see :func:`match_source`); raises ValueError
    for a file that is too large, not JSON or not a notebook nbformat and the grader can read."""
    status = path.stat()
    if not stat.S_ISREG(status.st_mode):  # a pipe or a device would never end (or never start) its text
        raise ValueError("not a regular file")
    if status.st_size > MAX_NOTEBOOK:
        raise ValueError(f"larger than {MAX_NOTEBOOK // 2**20} MB")
    try:
        text = path.read_text(encoding="utf-8")
        parts = _parts(json.loads(text))
        nb = nbformat.reads(text, as_version=4) if parts <= MAX_PARTS else None
    except Exception as exc:
        raise ValueError(f"not JSON: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
    if nb is None:  # nbformat's validation takes a minute per 10 MB of empty cells, twice per file
        raise ValueError(f"more than {MAX_PARTS:,} cells and outputs")
    try:
        return (text, *match_source(nb, sources))
    except Exception as exc:  # nbformat reads some invalid notebooks (a cell with no type, a number as source)
        raise ValueError(f"not a valid notebook: {type(exc).__name__}: {exc}") from None


MAX_PARTS = 20_000  # cells and outputs of one handed-in notebook: the series' largest holds 114


def _parts(raw: object) -> int:
    """How many cells and outputs a notebook's JSON holds (0 for JSON that is no notebook)."""
    cells = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        return 0
    outputs = [c.get("outputs") for c in cells if isinstance(c, dict)]
    return len(cells) + sum(len(o) for o in outputs if isinstance(o, list))


def _student_jobs(
    student_id: str, files: list[tuple[str, Path]], sources: dict[str, Source], log: logging.Logger
) -> tuple[list[dict], list[dict]]:
    """One student's jobs (the newest copy of each notebook) and rows (files that are no notebook)."""
    jobs, rows = [], []
    chosen: dict[str, list[tuple[float, float, str, str]]] = {}
    texts: dict[str, tuple[tuple[float, float], str]] = {}
    unreadable: list[tuple[str, Path, str]] = []
    if not files:
        rows.append({"student": student_id, "notebook": "", "status": "no notebook handed in"})
    for rel, path in files:
        try:
            text, src, score, how = _read_notebook(path, sources)
        except Exception as exc:
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            log.info("%s/%s: not a notebook: %s", student_id, rel, why)
            unreadable.append((rel, path, why))
            continue
        log.info("%s/%s: %s", student_id, rel, how)
        if src is None:
            rows.append({"student": student_id, "notebook": rel, "file": rel, "status": how})
            continue
        mtime = path.stat().st_mtime
        chosen.setdefault(src.name, []).append((mtime, score, rel, how))
        if src.name not in texts or (mtime, score) > texts[src.name][0]:  # only the copy graded is kept: not 20
            texts[src.name] = ((mtime, score), text)  # copies of 256 MB each, all at once
    for rel, path, why in unreadable:
        # a file named as a notebook is that notebook's row (it scores 0), unless a readable copy was handed in:
        # then it is a row of its own, and the graded copy's row stands
        name = path.stem if path.stem in sources and path.stem not in chosen else rel
        status = f"{rel} is not a readable notebook ({why})"
        max_score = sources[name].max_score() if name in sources else ""
        rows.append({"student": student_id, "notebook": name, "file": rel, "status": status, "max_score": max_score})
    for name, cands in chosen.items():
        cands.sort(key=lambda c: (c[0], c[1]), reverse=True)  # the newest copy, then the closer match
        mtime, score, rel, how = cands[0]
        note = f"graded `{rel}`: {how}"
        if len(cands) > 1:
            others = ", ".join(f"`{c[2]}`" for c in cands[1:])
            note += f"; also handed in and not graded: {others} (the newest copy is graded, as handed in last)"
        log.info("%s: %s", student_id, note)
        jobs.append(
            {
                "student": student_id,
                "notebook": name,
                "file": rel,
                "match": note,
                "text": texts[name][1],
                "mtime": mtime,
            }
        )
    return jobs, rows


def run_jobs(jobs: list[dict], cfg: Config, workers: int, log: logging.Logger) -> list[dict]:
    """Grade every job over ``workers`` processes; a job whose worker dies is reported, not lost, and costs no
    other student their row (:func:`_graded_in_rounds`)."""
    with tempfile.TemporaryDirectory(prefix="lab-grade-") as tmp:
        _kernel_spec(Path(tmp))
        zygote = _start_zygote(cfg, Path(tmp))
        cfg = Config(**{**asdict(cfg), "scratch_root": tmp, "zygote": str(Path(tmp) / "zygote.sock") if zygote else ""})
        log.info(
            "kernels: %s",
            "forked from one process that imported torch once (tools/forkkernel.py)" if zygote else "a new Python each",
        )
        try:
            return _graded_in_rounds(jobs, cfg, workers, tmp, log)
        finally:
            if zygote is not None:
                zygote.terminate()
                zygote.wait()


def _graded_in_rounds(jobs: list[dict], cfg: Config, workers: int, tmp: str, log: logging.Logger) -> list[dict]:
    """A worker that dies (killed by its kernel's student, or by the system's out-of-memory killer) breaks its
    pool, and every job not finished yet fails with it. Those jobs are graded again, each in a pool of its own
    (``workers`` at a time), so that only a job that kills its own worker ends as "grader worker died"."""
    done, died = _run_round(jobs, cfg, workers, tmp, log)
    if not died:
        return sorted(done, key=lambda o: (o["student"], o["notebook"]))
    log.info("a grader worker died: %d job(s) graded again, each in a process of its own", len(died))
    grade_kernel.end_leftovers(tmp)  # the processes, cgroups and mounts of the jobs it took down

    def alone(job: dict) -> list[dict]:
        graded, lost = _run_round([job], cfg, 1, tmp, log)
        return graded + [_worker_died(job, why) for job, why in lost]

    with cf.ThreadPoolExecutor(max_workers=max(1, workers)) as threads:
        for rows in threads.map(alone, [job for job, _ in died]):
            done += rows
    grade_kernel.end_leftovers(tmp)
    return sorted(done, key=lambda o: (o["student"], o["notebook"]))


def _run_round(
    jobs: list[dict], cfg: Config, workers: int, tmp: str, log: logging.Logger
) -> tuple[list[dict], list[tuple[dict, BaseException]]]:
    start = (tmp, cfg.worker_mb)
    with cf.ProcessPoolExecutor(max_workers=max(1, workers), initializer=_init_worker, initargs=start) as pool:
        return _run_pool(pool, jobs, cfg, log)


def _worker_died(job: dict, exc: BaseException) -> dict:
    return {
        **job,
        "text": None,
        "results": [],
        "written": [],
        "executed": "",
        "seconds": 0.0,
        "kernel_starts": 0,
        "error": f"grader worker died: {type(exc).__name__}: {exc}",
    }


def _run_pool(
    pool: cf.ProcessPoolExecutor, jobs: list[dict], cfg: Config, log: logging.Logger
) -> tuple[list[dict], list[tuple[dict, BaseException]]]:
    """The jobs graded, and those whose worker died (with why), to grade again."""
    done, died = [], []
    # the longest notebooks first, so that the workers finish together
    sources = _sources(cfg)
    jobs = sorted(jobs, key=lambda j: -sum(c.cell_type == "code" for c in sources[j["notebook"]].student.cells))
    futures = {pool.submit(grade_job, job, cfg): job for job in jobs}
    for fut in cf.as_completed(futures):
        job = futures[fut]
        try:
            out = fut.result()
        except Exception as exc:  # the worker process itself died
            died.append((job, exc))
            continue
        log.info(
            "%s/%s: %s in %.1f s%s",
            job["student"],
            job["notebook"],
            " ".join(f"{r['exercise']}={r['status']}" for r in out["results"]),
            out["seconds"],
            f" ({out['error']})" if out["error"] else "",
        )
        done.append(out)
    return done, died


# --------------------------------------------------------------------------- writing the results

_STATUS_WORDS = {
    "pass": "✓ passed",
    "fail": "✗ failed",
    "not written": "✗ not written yet",
    "missing": "✗ missing",
    "timeout": "✗ timed out",
    "crashed": "✗ crashed",
    "not run": "✗ not graded",
    "partial": "◐ partly passed",
    "held": "⏸ held for your instructor's review",
}


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``: a check's message (or an exception the
    student's code raised) cannot close it and write headings or scores of its own into the feedback."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def feedback_markdown(graded: dict, sources: dict[str, Source]) -> str:
    """The student's feedback for one notebook: check verdicts and written answers, nothing hidden."""
    src = sources.get(graded["notebook"])
    score = sum(r["points"] for r in graded["results"])
    total = src.max_score() if src else 0
    lines = [
        f"# {graded['notebook']}: {score:g} / {total:g}",
        "",
        f"Student: `{graded['student']}`  ",
        f"{graded.get('match', '')}",
        "",
    ]
    if graded.get("error"):
        lines += [f"**This notebook could not be graded completely:** {graded['error']}", ""]
    for r in graded["results"]:
        lines += [
            f"## Exercise {r['exercise']}: {r['label'].split(':', 1)[-1].strip()}",
            "",
            f"**{_STATUS_WORDS.get(r['status'], r['status'])}** ({r['points']:g} / {r['max_points']:g})",
            "",
        ]
        if r["note"] and r["note"] != r["feedback"]:
            lines += [f"_{r['note']}_", ""]
        if r["feedback"]:
            fence = _fence(r["feedback"])
            lines += [fence + "text", r["feedback"], fence, ""]
        if r.get("flags"):
            lines += ["Your instructor will review this exercise's code by hand:", ""]
            lines += [f"- {flag}" for flag in r["flags"]] + [""]
    if graded.get("written"):
        lines += ["## Written answers (your instructor scores them by hand)", ""]
        for w in graded["written"]:
            answer = w["answer"]
            text = "_(the answer cell is missing)_" if answer is None else ("_(no answer)_" if not answer else answer)
            lines += [f"### {w['label']}", "", _quote(text), ""]
    text = "\n".join(lines).rstrip() + "\n"
    return _OWN_NOTES.sub(lambda m: " " + m.group(), text)  # only _instructor_notes starts a line with it


def _quote(answer: str) -> str:
    """A written answer as a quotation: its markdown still renders, but a heading or a score it writes
    (``## Exercise 99.4`` ... ``✓ passed``) reads as the student's, not as the grader's."""
    return "\n".join(f"> {line}".rstrip() for line in answer.splitlines())


def feedback_html(markdown_text: str, title: str) -> str:
    try:
        import mistune

        body = mistune.create_markdown(escape=True)(markdown_text)  # a student's <script> stays text
    except ImportError:
        body = f"<pre>{html.escape(markdown_text)}</pre>"
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
        "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto}pre{background:#f4f4f4;"
        "padding:.6em;white-space:pre-wrap}</style></head>\n<body>\n" + body + "</body></html>\n"
    )


_HASHED = re.compile(r"-[0-9a-f]{8,16}$")  # the end of a name :func:`_safe` made (8 hex digits before this audit)


def _safe(name: str) -> str:
    """A folder name for a student id: the id itself when it is plain ASCII, else a slug and a
    hash of the id, so two ids never share a folder (``José`` and ``Josè`` both slug to ``Jos_``). An id with
    a capital letter is hashed too: ``Ana`` and ``ana`` are one folder on a case-insensitive disk (macOS, Windows).
    A plain id that ends as such a name does (``Jos_-24c2ab65b7adab7e``, what ``José`` becomes) is hashed too:
    a student named so cannot write into another's folder."""
    slug = re.sub(r"[^A-Za-z0-9._@+-]", "_", name)[:60]
    if slug == name and name and not name.startswith(".") and not _HASHED.search(name) and name == name.lower():
        return name
    # 64 bits: two names of one slug (its first 60 characters) cannot be made to share a hash by trying 2^32 of them
    return f"{slug.lstrip('.') or '_'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value) -> str:
    """A CSV cell a spreadsheet never runs as a formula (OWASP's advice): text starting with
    ``= + - @``, a tab or a carriage return gets a leading ``'``; numbers stay numbers. So does text that
    :func:`_csv_uncell` would change (quotes before such a character: ``'=x``), so that reading a cell back
    gives the value written: a student named ``'=x`` never becomes the student ``=x``."""
    text = "" if value is None else str(value)
    if _quoted(text):
        return "'" + text
    if _formula(text):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def _formula(text: str) -> bool:
    """Whether a spreadsheet may read ``text`` as a formula: it starts with a character of :data:`_FORMULA`, or one
    that Unicode's compatibility normalisation (NFKC) makes one (``＝`` U+FF1D, ``﹢`` U+FE62: a sheet or an import
    may normalise them), after any spaces."""
    head = unicodedata.normalize("NFKC", text[:8]).lstrip(" ")
    return text.startswith(_FORMULA) or head.startswith(_FORMULA)


def _quoted(text: str) -> bool:
    """Whether ``text`` is one or more ``'`` before a character a formula starts with."""
    return text.startswith("'") and _formula(text.lstrip("'"))


def _csv_uncell(text: str) -> str:
    """The value :func:`_csv_cell` wrote."""
    return text[1:] if _quoted(text) else text


def _write_csv(path: Path, header: list[str], rows: list) -> None:
    """A CSV file whose every cell went through :func:`_csv_cell`; ``rows`` are dicts or lists."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow([_csv_cell(h) for h in header])
    for row in rows:
        cells = [row.get(h, "") for h in header] if isinstance(row, dict) else row
        writer.writerow([_csv_cell(c) for c in cells])
    write_atomic(path, buffer.getvalue())


def _read_csv(path: Path) -> list[dict]:
    """The rows of a CSV file this module wrote (or an instructor filled in), unescaped."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8-sig") as f:
        # a line with more cells than the header (a comma typed into a sheet) keeps its named cells
        rows = csv.DictReader(f)
        return [{_csv_uncell(k): _csv_uncell(v or "") for k, v in row.items() if isinstance(k, str)} for row in rows]


AUTO = "auto-grades.csv"  # the checks' points of every row so far, before manual scores and late penalties
MANUAL = "manual.csv"  # the instructor's: written answers' scores, overrides, comments
_MANUAL_HEADER = ["student", "exercise", "points", "comment", "max_points", "answer"]


def write_outputs(
    out: Path,
    graded: list[dict],
    rows: list[dict],
    sources: dict[str, Source],
    *,
    log: logging.Logger | None = None,
    deadline: float | None = None,
    penalty: float = 0.0,
) -> list[dict]:
    """feedback/, executed/, then the class's gradebook: this run's rows merged into the earlier
    runs' by (student, notebook), so regrading one student changes only that student's rows;
    returns the grades.csv rows (see :func:`finish`)."""
    new = []
    fresh: list[str] = []
    graded, rows = _storable(graded), _storable(rows)
    for g in graded:
        src = sources[g["notebook"]]
        by_id = {r["exercise"]: r for r in g["results"]}
        row = {"student": g["student"], "notebook": g["notebook"], "file": g.get("file", "")}
        row.update({e.id: f"{by_id[e.id]['points']:g}" if e.id in by_id else "0" for e in src.exercises})
        row.update(
            score=f"{sum(r['points'] for r in g['results']):g}",
            max_score=f"{src.max_score():g}",
            status="ok" if not g["error"] else g["error"],
            submitted=_when(g.get("mtime")),
        )
        flagged = sorted({r["exercise"] for r in g["results"] if r.get("flags")})
        if flagged:
            row["review"] = "code to review in " + ", ".join(flagged)
        new.append(row)
        for r in g["results"]:
            fresh.append(json.dumps({**r, "file": g["file"], "notebook_seconds": g["seconds"]}))
        for w in g["written"]:
            line = {
                "student": g["student"],
                "notebook": g["notebook"],
                "exercise": w["exercise"],
                "label": w["label"],
                "points": None,
                "status": "written (not scored)",
                "answer": w["answer"],
                "file": g["file"],
            }
            fresh.append(json.dumps(line))
        folder = out / "feedback" / _safe(g["student"])
        folder.mkdir(parents=True, exist_ok=True)
        md = feedback_markdown(g, sources)
        write_atomic(folder / f"{g['notebook']}.md", md)
        write_atomic(folder / f"{g['notebook']}.html", feedback_html(md, f"{g['student']}: {g['notebook']}"))
        if g["executed"]:
            ex_dir = out / "executed" / _safe(g["student"])
            ex_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(ex_dir / f"{g['notebook']}.ipynb", g["executed"])
    for r in rows:
        src = sources.get(r["notebook"])
        row = {
            "student": r["student"],
            "notebook": r["notebook"],
            "file": r.get("file", ""),
            "score": "0",
            "max_score": f"{r['max_score']:g}" if isinstance(r.get("max_score"), float) else "",
            "status": r["status"],
        }
        if src:
            row.update({e.id: "0" for e in src.exercises})
        new.append(row)
    _merge(out, new, fresh, sources, log)
    return finish(out, sources, log=log, deadline=deadline, penalty=penalty)


def _merge(
    out: Path, new: list[dict], fresh: list[str], sources: dict[str, Source], log: logging.Logger | None
) -> None:
    """Merge rows (auto-grades.csv) and results.jsonl lines into OUT's by (student, notebook)."""
    keys = {(r["student"], r["notebook"]) for r in new}
    students = {r["student"] for r in new}

    def stale(r: dict) -> bool:  # replaced by this run's rows
        return (r["student"], r["notebook"]) in keys or (r["student"] in students and not r["notebook"])

    old = _read_csv(out / AUTO) or _read_csv(out / "grades.csv")  # a gradebook from before auto-grades.csv
    kept = [r for r in old if not stale(r)]
    if old and log:
        log.info("gradebook: %d row(s) graded now merged with %d kept from earlier runs", len(new), len(kept))
    auto = sorted(new + kept, key=lambda r: (r["student"], r["notebook"]))
    ids = [e.id for s in sources.values() for e in s.exercises]
    header = ["student", "notebook", "file", "submitted", *ids, "score", "max_score", "status", "review"]
    _write_csv(out / AUTO, header, auto)
    lines = []
    if (out / "results.jsonl").is_file():
        for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if (r["student"], r["notebook"]) not in keys:
                lines.append(line)
    write_atomic(out / "results.jsonl", "".join(line + "\n" for line in [*fresh, *lines]))


def merge_parts(out: Path, parts: list[Path], sources: dict[str, Source], **late) -> list[dict]:
    """Combine OUT folders graded apart (``--shard k/N``) into ``out``: their rows, results,
    feedback and executed notebooks; then the gradebook and report of the whole class."""
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        if not (part / AUTO).is_file():
            raise FileNotFoundError(f"{part / AUTO} does not exist: is {part} a graded OUT folder?")
        for sub in ("feedback", "executed", "logs"):
            if (part / sub).is_dir():
                shutil.copytree(part / sub, out / sub, dirs_exist_ok=True)
        lines = (
            (part / "results.jsonl").read_text(encoding="utf-8").splitlines()
            if (part / "results.jsonl").is_file()
            else []
        )
        _merge(out, _read_csv(part / AUTO), lines, sources, None)
    return finish(out, sources, **late)


def shard_of(student_id: str, count: int) -> int:
    """The shard (0 to count - 1) a student's submissions are graded in: the same on every machine."""
    return int(hashlib.sha256(student_id.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16) % count


def _when(mtime: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(mtime)) if mtime else ""


def _number(text: str) -> float | None:
    """A finite number, else None: ``nan``, ``inf`` or ``1e999`` typed into manual.csv scores nothing."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def finish(
    out: Path,
    sources: dict[str, Source],
    *,
    log: logging.Logger | None = None,
    deadline: float | None = None,
    penalty: float = 0.0,
) -> list[dict]:
    """grades.csv, gradebook.csv, written.csv, report.html and report.csv from the checks' points
    (auto-grades.csv), the instructor's manual.csv (written answers' scores, overrides, comments)
    and the late rule (``penalty`` percent of the score per day started after ``deadline``)."""
    auto = _read_csv(out / AUTO)
    results = (
        [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
        if (out / "results.jsonl").is_file()
        else []
    )
    owner = {e.id: s for s in sources.values() for e in s.exercises}
    written = {w.id: (s, w) for s in sources.values() for w in s.written}
    manual = _combined(write_sheets(out, results, sources) + _read_csv(out / MANUAL))  # manual.csv's lines win
    if not (out / MANUAL).is_file():  # the sheet to fill in: one line per written answer
        answers = [r for r in results if r.get("status") == "written (not scored)"]
        sheet = [
            {
                "student": r["student"],
                "exercise": r["exercise"],
                "max_points": f"{written[r['exercise']][1].points:g}" if r["exercise"] in written else "",
                "answer": (r.get("answer") or "")[:500],
            }
            for r in answers
        ]
        _write_csv(out / MANUAL, _MANUAL_HEADER, sheet)
    by_key = {(r["student"], r["notebook"]): dict(r) for r in auto}
    extra_cols: list[str] = []
    comments: dict[tuple[str, str], list[str]] = {}
    for m in manual:
        ex, who, pts = m.get("exercise", "").strip(), m.get("student", "").strip(), _number(m.get("points", ""))
        src = owner.get(ex) or (written[ex][0] if ex in written else None)
        if src is None or not who:
            if log and any(m.values()):
                log.info("%s: row %r names no known exercise or student: ignored", MANUAL, m)
            continue
        row = by_key.get((who, src.name))
        if row is None:
            if log:
                log.info("%s: %s has no row for %s: ignored", MANUAL, who, src.name)
            continue
        if m.get("comment", "").strip() or pts is not None:
            shown = f"{pts:g}" if pts is not None else "-"
            comments.setdefault((who, src.name), []).append(f"**{ex}** ({shown}): {m.get('comment', '').strip()}")
        if pts is None:
            continue
        if ex in written:
            top = _number(m.get("max_points", "")) or float(written[ex][1].points)
            row[ex] = f"{pts:g}"
            row["max_score"] = f"{float(row.get('max_score') or 0) + top:g}"
            if ex not in extra_cols:
                extra_cols.append(ex)
        else:
            row[ex] = f"{pts:g}"
            row["override"] = (row.get("override", "") + f" {ex}").strip()
    table = []
    for row in sorted(by_key.values(), key=lambda r: (r["student"], r["notebook"])):
        src = sources.get(row["notebook"])
        if src is not None and row.get("status") == "ok":
            cols = [e.id for e in src.exercises] + [w.id for w in src.written if w.id in row and row[w.id] != ""]
            score = sum(_number(row.get(c, "")) or 0.0 for c in cols)
            when = row.get("submitted", "")
            if deadline is not None and when:
                late = time.mktime(time.strptime(when, "%Y-%m-%dT%H:%M:%S")) - deadline
                if late > 0:
                    days = int(-(-late // 86400))
                    cut = min(100.0, max(0.0, penalty * days))  # a late day never earns
                    score *= 1 - cut / 100
                    row["late"] = f"{days} day(s): -{cut:g}%"
            row["score"] = f"{round(score, 3):g}"
        table.append(row)
    present = {r["notebook"] for r in table}
    ids = [e.id for s in sources.values() if s.name in present for e in s.exercises]
    ids += [i for i in (w.id for s in sources.values() for w in s.written) if i in extra_cols]
    header = ["student", "notebook", *ids, "score", "max_score", "status"]
    header += [c for c in ("override", "late", "review") if any(r.get(c) for r in table)]
    _write_csv(out / "grades.csv", header, table)
    write_gradebook(out / "gradebook.csv", table, sources)
    for (who, name), notes in comments.items():
        _instructor_notes(out / "feedback" / _safe(who) / f"{name}.md", notes, f"{who}: {name}")
    write_report(out, table, results, sources)
    return table


def _combined(lines: list[dict]) -> list[dict]:
    """One line per (student, exercise): a later line's non-blank cells replace an earlier line's."""
    merged: dict[tuple[str, str], dict] = {}
    for line in lines:
        key = (line.get("student", "").strip(), line.get("exercise", "").strip())
        merged[key] = {**merged.get(key, {}), **{k: v for k, v in line.items() if str(v or "").strip()}}
    return list(merged.values())


SHEETS = "written"  # OUT/written/<exercise>.csv and .html: one scoring sheet per written question


def _rubric_columns(w: Written) -> list[str]:
    return [f"R{i} ({pts:g}): {text}" for i, (pts, text) in enumerate(w.rubric, start=1)]


def write_sheets(out: Path, results: list[dict], sources: dict[str, Source]) -> list[dict]:
    """For each written question, ``written/<id>.csv``: one row per student with a column per rubric
    line (fill in the points each line earned, or a total under ``points``), a comment and the
    answer; and ``written/<id>.html`` to read the answers beside the rubric. Rows filled in earlier
    are kept when the sheet is written again. Returns the filled rows as manual.csv lines."""
    answers: dict[str, dict[str, str]] = {}
    for r in results:
        if r.get("status") == "written (not scored)":
            answers.setdefault(r["exercise"], {})[r["student"]] = r.get("answer") or ""
    filled = []
    for w in (w for s in sources.values() for w in s.written):
        if w.id not in answers:
            continue
        path = out / SHEETS / f"{_safe(w.id)}.csv"
        path.parent.mkdir(exist_ok=True)
        earlier = {r.get("student", ""): r for r in _read_csv(path)}
        rubric = _rubric_columns(w)
        header = ["student", *rubric, "points", "comment", "answer"]
        rows = []
        for who, answer in sorted(answers[w.id].items()):
            old = earlier.get(who, {})
            marks = {c: old.get(c, "") for c in rubric}
            rows.append({"student": who, **marks, "points": old.get("points", ""), "comment": old.get("comment", "")})
            rows[-1]["answer"] = answer[:2000]
            given = [_number(v) for v in marks.values() if _number(v) is not None]
            total = sum(given) if given else _number(old.get("points", ""))
            if total is not None or old.get("comment", "").strip():
                filled.append({"student": who, "exercise": w.id, "points": "" if total is None else f"{total:g}"})
                filled[-1].update(comment=old.get("comment", ""), max_points=f"{w.points:g}")
        _write_csv(path, header, rows)
        write_atomic(path.with_suffix(".html"), _sheet_html(w, answers[w.id], path.name))
    return filled


def _sheet_html(w: Written, answers: dict[str, str], sheet: str) -> str:
    """The answers to one written question beside its rubric, to read while filling in the sheet."""
    items = "".join(f"<li>{pts:g} point(s): {html.escape(text)}</li>" for pts, text in w.rubric)
    body = "".join(
        f"<h3>{html.escape(who)}</h3><pre>{html.escape(text or '(no answer)')}</pre>\n"
        for who, text in sorted(answers.items())
    )
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(w.id)}</title>\n'
        "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto}pre{background:#f4f4f4;"
        "padding:.6em;white-space:pre-wrap}</style></head>\n<body>\n"
        f"<h1>{html.escape(w.label)} ({w.points:g} points)</h1>\n<p>Score each answer in <code>{html.escape(sheet)}"
        f"</code> (a column per rubric line), then <code>python -m tools.grade --apply --out OUT</code>.</p>\n"
        f"<ol>{items or '<li>(no rubric in the source notebook)</li>'}</ol>\n{body}</body></html>\n"
    )


_NOTES = "## From your instructor"
_OWN_NOTES = re.compile(rf"^{re.escape(_NOTES)}$", re.M)


def _instructor_notes(path: Path, notes: list[str], title: str) -> None:
    """Put the instructor's scores and comments at the end of a feedback file (replacing earlier ones)."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8").split("\n" + _NOTES + "\n")[0].rstrip()
    text += "\n\n" + _NOTES + "\n\n" + "\n\n".join(notes) + "\n"
    write_atomic(path, text)
    write_atomic(path.with_suffix(".html"), feedback_html(text, title))


_MISTAKE = re.compile(r"likely mistake:\s*(.+)", re.I)
_NAMED = re.compile(r"^\s*mistake:\s*(.+)$", re.M)  # the mistake's short name (the kernels run LAB_FEEDBACK=named)
_OTHER_REASONS = {
    "not written": "not written yet",
    "missing": "exercise cell missing",
    "timeout": "timed out",
    "crashed": "kernel died",
    "not run": "not graded",
    "held": "held for review (code that changes how checks run)",
}


def mistake_of(result: dict) -> str:
    """The named mistake of a failed exercise, else why it failed. Where the grader ran the check itself, the
    name comes from the check's error (``mistake`` in results.jsonl), never from text a student's code could
    have written into the message; a verdict of the kernel is read from its feedback ("mistake:" line)."""
    if result.get("status") == "pass":
        return ""
    if result.get("verdict") == "grader":
        if result.get("mistake"):
            return result["mistake"]
    else:
        found = _NAMED.search(result.get("feedback", "")) or _MISTAKE.search(result.get("feedback", ""))
        if found:
            return found.group(1).strip().rstrip(".")
    answered = judge.recorded_answer([{"output_type": "stream", "text": result.get("feedback", "")}])
    if answered[0]:  # a prediction judged NOT RIGHT: the class report counts each wrong answer
        return f"predicted {answered[1]!r}"
    if "additional test of your instructor" in result.get("feedback", ""):
        return "an instructor-only case failed"
    return _OTHER_REASONS.get(result.get("status", ""), "failed, no named mistake")


def write_report(out: Path, table: list[dict], results: list[dict], sources: dict[str, Source]) -> None:
    """report.csv and report.html: per exercise, how many students, the distribution of their
    scores (after the instructor's scores and overrides) and the named mistakes with their counts."""
    rows = [r for r in table if r["notebook"] in sources and r.get("status") == "ok"]
    lines = []
    for src in sources.values():
        mine = [r for r in rows if r["notebook"] == src.name]
        if not mine:
            continue
        for ex in [*src.exercises, *src.written]:
            scores = [_number(r.get(ex.id, "")) for r in mine]
            scores = [x for x in scores if x is not None]
            if not scores:
                continue
            counts: dict[float, int] = {}
            for x in scores:
                counts[x] = counts.get(x, 0) + 1
            spread = "; ".join(f"{k:g}: {v}" for k, v in sorted(counts.items()))
            base = {"notebook": src.name, "exercise": ex.id, "label": ex.label, "students": len(scores)}
            lines.append({**base, "mean": f"{sum(scores) / len(scores):.3g}", "scores": spread})
            students = {r["student"] for r in mine}
            named: dict[str, int] = {}
            for res in results:
                if res.get("exercise") == ex.id and res.get("student") in students and "max_points" in res:
                    why = mistake_of(res)
                    if why:
                        named[why] = named.get(why, 0) + 1
            for why, n in sorted(named.items(), key=lambda kv: -kv[1]):
                lines.append({**base, "mistake": why, "count": n, "share": f"{n / len(scores):.0%}"})
    header = ["notebook", "exercise", "label", "students", "mean", "scores", "mistake", "count", "share"]
    _write_csv(out / "report.csv", header, lines)
    cells = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(line.get(h, '')))}</td>" for h in header) + "</tr>\n" for line in lines
    )
    write_atomic(
        out / "report.html",
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>Class report</title>\n'
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:.2em .5em}"
        "table{border-collapse:collapse}</style></head>\n<body>\n<h1>Class report</h1>\n"
        "<p>Per exercise: the students graded, their mean, how many scored what, then each named mistake "
        "(the check's <em>likely mistake</em>) with how many students made it.</p>\n<table>\n<tr>"
        + "".join(f"<th>{h}</th>" for h in header)
        + "</tr>\n"
        + cells
        + "</table>\n</body></html>\n",
    )


#: The gradebook's first row, which an LMS import reads as the maximum of each column.
POINTS_POSSIBLE = "(points possible)"
_RESERVED = {"points possible", "no student folder", "student", "total", "score", "max score"}


def write_gradebook(path: Path, table: list[dict], sources: dict[str, Source]) -> None:
    """One row per student, one column per notebook (its score) and the total: the shape an
    LMS gradebook import (Canvas, Moodle) expects. A notebook not handed in scores 0."""
    names = sorted({r["notebook"] for r in table if r["notebook"] in sources})
    students = sorted({r["student"] for r in table})
    best: dict[tuple[str, str], float] = {}
    possible = {n: sources[n].max_score() for n in names}
    for r in table:
        if r["notebook"] in sources:
            key = (r["student"], r["notebook"])
            best[key] = max(best.get(key, 0.0), _number(r.get("score", "")) or 0.0)
            possible[r["notebook"]] = max(possible[r["notebook"]], _number(r.get("max_score", "")) or 0.0)
    lines = [[POINTS_POSSIBLE, *(f"{possible[n]:g}" for n in names), f"{sum(possible.values()):g}"]]
    for s in students:
        scores = [best.get((s, n), 0.0) for n in names]
        lines.append([s, *(f"{x:g}" for x in scores), f"{sum(scores):g}"])
    _write_csv(path, ["student", *names, "total"], lines)


def _visible(char: str) -> str:
    """``char`` as the log writes it: a control character, a line or paragraph separator (what an editor or a
    terminal reads as a line break, or an escape sequence that moves the cursor) as its escape."""
    if char.isprintable() or char in "\t ":
        return char
    code = ord(char)
    escape = f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return {"\r": "\\r", "\n": "\\n"}.get(char) or escape


class _OneLine(logging.Formatter):
    """One line per record: a handed-in file or folder name with a line break in it cannot fake a line of the log,
    nor one with a terminal's escape sequence erase or rewrite lines shown before it."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if text.isprintable() else "".join(map(_visible, text))


class EnvironmentProblem(RuntimeError):
    """The grading environment itself is broken: the solved notebooks do not score full marks."""


def _canary(todo: list[dict], sources: dict[str, Source], cfg: Config, jobs: int, log: logging.Logger) -> None:
    """Grade each solved source of this run first, as a submission: one that scores less than full
    marks means the environment is broken (labsupport not importable in the sandbox, a missing
    package, an instructor case that fails the reference), and no student's row would mean anything."""
    names = sorted({j["notebook"] for j in todo})
    checks = [
        {
            "student": "(canary)",
            "notebook": n,
            "file": sources[n].path.name,
            "match": "the solved source",
            "text": sources[n].path.read_text(encoding="utf-8"),
        }
        for n in names
    ]
    for g in run_jobs(checks, cfg, jobs, log):
        got = sum(r["points"] for r in g["results"])
        if g["error"] or got < sources[g["notebook"]].max_score():
            failed = [
                f"{r['exercise']}: {r['feedback'].splitlines()[0] if r['feedback'] else r['status']}"
                for r in g["results"]
                if r["status"] != "pass"
            ]
            why = g["error"] or "; ".join(failed[:3])
            raise EnvironmentProblem(
                f"the solved notebook {g['notebook']} scores {got:g} / {sources[g['notebook']].max_score():g} "
                f"in the grader's sandbox ({why[:400]}), so every student's would be wrong: fix the environment "
                "(is labsupport installed from this checkout? `pip show labsupport`) and grade again; nothing was written"
            )
    log.info("canary: %s score full marks in the sandbox", ", ".join(names) or "no notebook")


def grade(
    submissions: Path,
    out: Path,
    *,
    jobs: int = 2,
    cfg: Config | None = None,
    canary: bool = False,
    deadline: float | None = None,
    penalty: float = 0.0,
    shard: tuple[int, int] | None = None,
) -> list[dict]:
    """Grade every submission under ``submissions`` into ``out``; return the grades.csv rows. With
    ``canary``, the solved sources are graded first and must score full marks (else
    :class:`EnvironmentProblem`); ``deadline`` and ``penalty`` (percent per day started) make late rows lose points."""
    cfg = cfg or Config()
    grade_kernel.seal_grader()  # this process's environment (an LMS token?) and memory: no kernel reads them
    with _sole_grader(out) as log:
        t0 = time.perf_counter()
        sources = _sources(cfg)
        log.info(
            "grading %s into %s: %d source notebook(s), %d worker(s), %g s per exercise, %d MB per kernel, sandbox: %s",
            submissions,
            out,
            len(sources),
            jobs,
            cfg.timeout,
            cfg.memory_mb,
            sandbox_state(cfg),
        )
        # Kernels cannot write bytecode (the sandbox): compile labsupport once, here, instead of in each kernel.
        compileall.compile_dir(str(ROOT / "labsupport"), quiet=2)
        todo, rows = collect(submissions, sources, log)
        if shard is not None:
            k, n = shard
            todo = [j for j in todo if shard_of(j["student"], n) == k - 1]
            rows = [r for r in rows if shard_of(r["student"], n) == k - 1]
            log.info("shard %d/%d: %d notebook(s) of this part's students", k, n, len(todo))
        cfg = Config(**{**asdict(cfg), "private": (str(submissions), str(out))})
        if canary and todo:
            _canary(todo, sources, cfg, jobs, log)
        graded = run_jobs(todo, cfg, jobs, log)
        table = write_outputs(out, graded, rows, sources, log=log, deadline=deadline, penalty=penalty)
        log.info("done: %d row(s) in grades.csv in %.1f s", len(table), time.perf_counter() - t0)
        return table


@contextlib.contextmanager
def _sole_grader(out: Path):
    """OUT locked for this grader (a lock on the folder itself: no file is left behind) and its log. A second
    grader of the same OUT stops before it reads or writes anything there: two would interleave auto-grades.csv,
    results.jsonl and the feedback files, each run's rows replacing the other's."""
    with _locked(out):
        (out / "logs").mkdir(exist_ok=True)
        log = logging.getLogger(f"grade.{id(out)}")
        log.setLevel(logging.INFO)
        log.propagate = False
        name = f"grade-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        handler = logging.FileHandler(out / "logs" / name, encoding="utf-8")
        handler.setFormatter(_OneLine("%(asctime)s %(message)s"))
        log.addHandler(handler)
        try:
            yield log
        finally:
            log.removeHandler(handler)
            handler.close()


@contextlib.contextmanager
def _locked(out: Path):
    """OUT locked for this process (a lock on the folder itself: no file is left behind), or EnvironmentProblem
    when another grader, ``--apply`` or ``--merge`` holds it."""
    out.mkdir(parents=True, exist_ok=True)
    folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EnvironmentProblem(f"another grader is writing {out}: wait for it, or use another OUT") from None
        yield
    finally:
        os.close(folder)  # the lock goes with it


def sandbox_state(cfg: Config) -> str:
    rooted = sys.platform == "linux" and os.geteuid() == 0 and grade_kernel._can_unshare(grade_kernel._CLONE_NEWNET)
    extra = (
        f"; a network namespace and a {cfg.disk_mb} MB tmpfs scratch folder per kernel"
        if rooted
        else "; not root: the network and the disk are shared (docs: what the sandbox isolates)"
    )
    if not cfg.landlock:
        return "Landlock off (--no-landlock)" + extra
    import ctypes

    abi = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) if sys.platform == "linux" else -1
    return (f"Landlock ABI {abi}" if abi > 0 else "Landlock unavailable: file isolation is best effort") + extra


def _policy(out: Path, deadline: str | None, penalty: float | None) -> tuple[float | None, float] | str:
    """The late rule: from the flags (then saved in OUT/policy.json), else from OUT/policy.json."""
    saved = json.loads((out / "policy.json").read_text()) if (out / "policy.json").is_file() else {}
    if deadline is not None:
        saved["deadline"] = deadline
    if penalty is not None:
        saved["late_penalty"] = penalty
    if not saved.get("deadline"):
        return None, 0.0
    try:
        when = time.mktime(time.strptime(saved["deadline"], "%Y-%m-%dT%H:%M"))
    except ValueError:
        return f"--deadline {saved['deadline']!r}: use local time as YYYY-MM-DDTHH:MM"
    saved.setdefault("late_penalty", 10.0)
    rate = _number(saved["late_penalty"])
    if rate is None or not 0 <= rate <= 100:
        return f"late penalty {saved['late_penalty']!r}: use a percent per day from 0 to 100"
    if deadline is not None or penalty is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "policy.json", json.dumps(saved) + "\n")
    return when, rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Grade a folder of submissions (one sub-folder per student).")
    p.add_argument("submissions", type=Path, nargs="?", help="the folder handed in (not with --apply)")
    p.add_argument("--out", type=Path, default=Path("grades"))
    p.add_argument("--jobs", type=int, default=2, help="worker processes (one kernel each)")
    p.add_argument("--src", type=Path, default=ROOT / "notebooks", help="the solved notebooks")
    p.add_argument("--extra", type=Path, default=ROOT / "grading" / "extra", help="instructor-only cases")
    p.add_argument("--timeout", type=float, default=60, help="seconds per exercise cell and per check cell")
    p.add_argument("--cell-timeout", type=float, default=600, help="seconds for any other cell")
    p.add_argument(
        "--notebook-timeout", type=float, default=3600, help="seconds for a whole notebook, restarts included (0: none)"
    )
    p.add_argument(
        "--memory-mb", type=int, default=4096, help="memory (heap and private data) cap per kernel (0: none)"
    )
    p.add_argument(
        "--disk-mb", type=int, default=2048, help="disk per kernel: its scratch folder is a tmpfs this large (root)"
    )
    p.add_argument("--worker-mb", type=int, default=4096, help="memory a grader worker's data may grow by (0: no cap)")
    p.add_argument("--no-landlock", action="store_true", help="do not fence kernels in with Landlock")
    p.add_argument(
        "--fork",
        action="store_true",
        help="fork each kernel from one process that imported torch once (Linux only; about 3x faster "
        "kernel starts) instead of starting a new Python",
    )
    p.add_argument("--no-canary", action="store_true", help="do not grade the solved notebooks first")
    p.add_argument(
        "--partial",
        default="",
        help="exercise ids (comma-separated, or 'all') scored in proportion to the check's cases passed "
        "(exercises the grader judges itself; also PARTIAL in grading/extra/<notebook>.py)",
    )
    p.add_argument("--deadline", help="local time YYYY-MM-DDTHH:MM; kept in OUT/policy.json for later runs")
    p.add_argument("--late-penalty", type=float, help="percent of the score lost per day started after the deadline")
    p.add_argument("--shard", help="k/N: grade only the k-th of N parts of the class (students split by a hash)")
    p.add_argument("--merge", type=Path, nargs="+", help="grade nothing: combine these OUT folders of shards into OUT")
    p.add_argument(
        "--apply", action="store_true", help="grade nothing: rewrite the gradebook and report from OUT/manual.csv"
    )
    args = p.parse_args(argv)
    out = args.out.resolve()
    policy = _policy(out, args.deadline, args.late_penalty)
    if isinstance(policy, str):
        print(f"error: {policy}", file=sys.stderr)
        return 2
    deadline, penalty = policy
    shard = re.fullmatch(r"(\d+)/(\d+)", args.shard or "")
    if args.shard and not (shard and 1 <= int(shard[1]) <= int(shard[2])):
        print(f"error: --shard {args.shard!r}: use k/N with 1 <= k <= N", file=sys.stderr)
        return 2
    if args.merge:
        extra = args.extra.resolve() if args.extra.is_dir() else None
        try:
            with _locked(out):
                table = merge_parts(
                    out,
                    [p.resolve() for p in args.merge],
                    load_sources(args.src.resolve(), extra),
                    deadline=deadline,
                    penalty=penalty,
                )
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except EnvironmentProblem as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        print(f"{len(table)} row(s) from {len(args.merge)} part(s) in {out / 'grades.csv'}")
        return 0
    if args.apply:
        if not (out / AUTO).is_file():
            print(f"error: {out / AUTO} does not exist: grade first", file=sys.stderr)
            return 2
        try:
            with _locked(out):
                table = finish(
                    out,
                    load_sources(args.src.resolve(), args.extra.resolve() if args.extra.is_dir() else None),
                    deadline=deadline,
                    penalty=penalty,
                )
        except EnvironmentProblem as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        print(
            f"{len(table)} row(s) in {out / 'grades.csv'} with {out / MANUAL} applied; the class report in {out / 'report.html'}"
        )
        return 0
    if args.submissions is None or not args.submissions.is_dir():
        print(f"error: {args.submissions} is not a folder", file=sys.stderr)
        return 2
    cfg = Config(
        src=str(args.src.resolve()),
        extra=str(args.extra.resolve()) if args.extra.is_dir() else None,
        timeout=args.timeout,
        cell_timeout=args.cell_timeout,
        notebook_timeout=args.notebook_timeout,
        memory_mb=args.memory_mb,
        disk_mb=args.disk_mb,
        worker_mb=args.worker_mb,
        landlock=not args.no_landlock,
        fork=args.fork,
        partial=tuple(x.strip() for x in args.partial.split(",") if x.strip()),
    )
    if out == args.submissions.resolve() or args.submissions.resolve() in out.parents:
        print("error: OUT must not be inside SUBMISSIONS", file=sys.stderr)
        return 2
    try:
        table = grade(
            args.submissions.resolve(),
            out,
            jobs=args.jobs,
            cfg=cfg,
            canary=not args.no_canary,
            deadline=deadline,
            penalty=penalty,
            shard=(int(shard[1]), int(shard[2])) if shard else None,
        )
    except EnvironmentProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    ok = sum(r["status"] == "ok" for r in table)
    print(
        f"{len(table)} row(s) in {out / 'grades.csv'} ({ok} graded, {len(table) - ok} with a problem); "
        f"feedback in {out / 'feedback'}/, the log in {out / 'logs'}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Grading for instructors: a folder of submissions in, a gradebook and feedback out.

    make grade SUBMISSIONS=handed_in [OUT=grades] [JOBS=2]
    python -m tools.grade handed_in [--out grades] [--jobs 2] [--timeout 60] [--memory-mb 4096]

``handed_in/<student id>/`` holds the notebooks a student handed in: any subset of
the series, under any file name. Each file is matched to its source in ``notebooks/``
by content (its headings, markdown cells, and code cells' ids with their first lines),
never by name; two files that match
one source: the closer match is graded, the newer file on a tie, and the feedback
says which.

Rebuild, don't trust. The grader starts from the student edition of the source
(tools/student.py: the scaffold, the check cells, no answers, no outputs) and puts
into it only the student's *solution cells*. Which cells those are, the cells
say: the student edition carries each exercise's metadata (``metadata["lab"]``:
its id, the cell's role, its points) and the source's cell ids, and Jupyter keeps
both. A submission's cell is exercise 03.5's solution when its metadata says so
(a copy made in Jupyter keeps it: the last copy is graded) or when it has the
source cell's id; nothing else (its heading, position or first line) counts.
Deleted, moved or edited scaffold cells and stored outputs cannot change a grade.
Written answers (answer cells) are collected verbatim for the instructor and
never scored: the student's lines minus the question's.

Each rebuilt notebook runs cell by cell in its own kernel (tools/grade_kernel.py:
a memory cap, and with Landlock no access to anything but a scratch folder, the
Python installation and labsupport; no outgoing TCP), with LAB_DEVICE=cpu and a
time limit per exercise. A cell that runs past it, or a kernel that dies, costs
that exercise its points; the kernel is restarted, the cells that had run cleanly
are replayed, and grading goes on. An exercise scores its points (its solution
cell's ``points`` metadata, unless ``POINTS`` in the extra cases says otherwise) when its check cell printed a
``PASS`` line and raised nothing, and the instructor's extra cases for it passed.
Kernels write nothing the grader reads back: results travel over the kernel
protocol, and only this process writes OUT, after the kernels have ended.

Output in OUT: ``grades.csv`` (one row per student and notebook, one column per
exercise id), ``gradebook.csv`` (one row per student, one column per notebook: for an
LMS import), ``feedback/<student>/<notebook>.md`` and ``.html``,
``results.jsonl`` (one line per exercise, with timings and the instructor-only
details), ``executed/<student>/<notebook>.ipynb`` (the rebuilt notebook with its
outputs) and ``logs/grade-<time>.log``.

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
import copy
import csv
import difflib
import html
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import forkkernel
from . import student as edition  # the markers, labels and the student edition
from .grade_kernel import ZYGOTE_VARIABLE
from .runner import notebook_client

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = Path(__file__).resolve().with_name("grade_kernel.py")
KERNEL_NAME = "lab-grader"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUSPICIOUS = re.compile(
    r"\b(labsupport|lab\.\w+\s*=|check_\w+\s*=|sys\.modules|builtins|__import__|"
    r"get_ipython|os\.system|subprocess|socket)\b"
)


# --------------------------------------------------------------------------- sources


@dataclass
class Exercise:
    """A graded exercise of a source notebook."""

    id: str
    label: str
    cell: int
    check_cell: int | None
    cell_id: str  # its solution cell's id, unique across the series


@dataclass
class Written:
    """A written answer (an answer cell): collected, not scored."""

    id: str
    label: str
    cell: int
    cell_id: str
    question: list[str]  # the answer cell's lines in the student edition, but "Your answer here"


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
    exercises = [Exercise(e.id, e.label, e.cell, e.check_cell, cells[e.cell].get("id", "")) for e in ed.exercises]
    written = [
        Written(
            a.id,
            a.label,
            a.cell,
            cells[a.cell].get("id", ""),
            [line for line in cells[a.cell].source.splitlines() if line.strip() != edition.ANSWER_PLACEHOLDER],
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
    )
    extra = (extra_dir / f"{path.stem}.py") if extra_dir else None
    if extra and extra.is_file():
        src.extra = extra.read_text()
        namespace: dict = {}
        exec(compile(src.extra, str(extra), "exec"), namespace)  # the instructor's own file
        src.points.update({str(k): float(v) for k, v in namespace.get("POINTS", {}).items()})
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
        own_id, roles = edition.lab_metadata(cell)
        if (own_id == ex_id and role in roles) or (own_id is None and cell_id and cell.get("id") == cell_id):
            found.append(i)
    return found


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
    return "" if answer in ("", edition.ANSWER_PLACEHOLDER) else answer


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
    memory_mb: int = 4096
    landlock: bool = True
    scratch_root: str = ""
    private: tuple[str, ...] = ()  # the submissions and the output folder
    fork: bool = False  # --fork: kernels forked from one zygote per run (tools/forkkernel.py)
    zygote: str = ""  # its socket, while it runs


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
    private = [Path(p).resolve() for p in cfg.private]  # never readable, whatever contains them
    readable += [
        p
        for p in sys.path
        if p
        and os.path.isdir(p)
        and Path(p).resolve() != ROOT
        and not any(q == Path(p).resolve() or Path(p).resolve() in q.parents for q in private)
    ]
    readable += [str(src / rel) for rel in edition.source_files(src) if rel.suffix != ".ipynb"]
    env["LAB_GRADE_SANDBOX"] = json.dumps(
        {
            "memory_mb": cfg.memory_mb,
            "landlock": cfg.landlock,
            "read": readable,
            "write": [str(scratch), "/dev/null", "/dev/shm"],
            "stderr": str(scratch / "kernel-stderr.txt"),
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


class Kernel:
    """One sandboxed kernel, restartable; runs one cell at a time."""

    def __init__(self, cfg: Config, scratch: Path) -> None:
        self.cfg, self.scratch = cfg, scratch
        self.env = _sandbox_env(cfg, scratch)
        self.client = None
        self.starts = 0

    def start(self) -> None:
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
        )
        self.client.km = self.client.create_kernel_manager()
        self.client.start_new_kernel(env=self.env, cwd=str(self.scratch))
        self.client.start_new_kernel_client()
        self.starts += 1
        self.run(nbformat.v4.new_code_cell(_PREAMBLE), -1, 60, hidden=True)

    def stop(self) -> None:
        if self.client is not None:
            try:
                self.client._cleanup_kernel()
            except Exception:  # a dead kernel: nothing left to stop
                pass
            self.client = None

    def run(self, cell, index: int, timeout: float, hidden: bool = False) -> tuple[str, float]:
        """Execute ``cell`` (outputs land in it); return ("ok" | "error" | "timeout" | "dead", seconds).
        A ``hidden`` cell stays out of the kernel's history (``In``, ``_ih``)."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = int(timeout)
        cell.outputs = []
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
        failed = any(o.get("output_type") == "error" for o in cell.outputs)
        return ("error" if failed else "ok"), time.perf_counter() - t0


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


def _plan(src: Source, sub, student_id: str):
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
        elif _SUSPICIOUS.search(slot.code):
            res["flags"].append("the answer touches the lab's machinery (review it)")
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
    nb, results, written, role, order = _plan(src, sub, student_id)
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
        if src.extra:
            _extras(kernel, src, results)
    except Exception as exc:  # the kernel would not start, or its state could not be rebuilt
        broken = f"{type(exc).__name__}: {exc}"
    finally:
        kernel.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for res in results.values():
        if res["status"] == "not run":
            res["feedback"] = ("not graded: " + broken) if broken else "not graded: no check cell follows it"
    return {
        "results": list(results.values()),
        "written": written,
        "executed": nbformat.writes(nb),
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


def _extras(kernel: Kernel, src: Source, results: dict) -> None:
    """The instructor's extra cases of every exercise that passed its check. They run after the
    last check, in hidden cells, so no student code runs after them that could echo them back."""
    for ex in src.exercises:
        res, fn = results[ex.id], f"extra_{ex.id.replace('.', '_')}"
        if res["status"] != "pass" or not re.search(rf"^def {fn}\b", src.extra, re.M):
            continue
        probe = nbformat.v4.new_code_cell(
            f"def _grade_extra():\n    _ns = {{}}\n    exec(compile({src.extra!r}, '<instructor cases>', 'exec'), _ns)"
            f"\n    _ns[{fn!r}](get_ipython().user_ns)\n_grade_extra(); del _grade_extra"
        )
        outcome, secs = kernel.run(probe, -1, kernel.cfg.timeout, hidden=True)
        res["seconds"] = round(res["seconds"] + secs, 3)
        bad = _error(probe)
        if outcome != "ok" or bad is not None:
            res.update(
                status="fail",
                points=0.0,
                detail=f"extra cases: {_message(bad) if bad else outcome}",
                feedback=res["feedback"] + "\nbut an additional test of your instructor failed",
            )
        if outcome in ("timeout", "dead"):
            return


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
        sub = nbformat.reads(job["text"], as_version=4)
        out = grade_notebook(src, sub, cfg, job["student"])
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


def _init_worker(jupyter_path: str) -> None:
    os.environ["JUPYTER_PATH"] = jupyter_path + os.pathsep + os.environ.get("JUPYTER_PATH", "")


def collect(submissions: Path, sources: dict[str, Source], log: logging.Logger) -> tuple[list[dict], list[dict]]:
    """Match every file to a source; return the jobs to run and the rows that need no kernel."""
    jobs, rows = [], []
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        chosen: dict[str, list[tuple[float, float, Path, str, str]]] = {}
        files = sorted(
            p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts and not p.is_symlink()
        )  # a link could point into another student's folder
        if not files:
            rows.append({"student": folder.name, "notebook": "", "status": "no notebook handed in"})
        for path in files:
            rel = path.relative_to(folder).as_posix()
            try:
                text = path.read_text(encoding="utf-8")
                nb = nbformat.reads(text, as_version=4)
            except Exception as exc:
                why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                name = path.stem if path.stem in sources else rel
                log.info("%s/%s: not a notebook: %s", folder.name, rel, why)
                rows.append(
                    {
                        "student": folder.name,
                        "notebook": name,
                        "file": rel,
                        "status": f"{rel} is not a readable notebook (not JSON: {why})",
                        "max_score": sources[name].max_score() if name in sources else "",
                    }
                )
                continue
            src, score, how = match_source(nb, sources)
            log.info("%s/%s: %s", folder.name, rel, how)
            if src is None:
                rows.append({"student": folder.name, "notebook": rel, "file": rel, "status": how})
                continue
            chosen.setdefault(src.name, []).append((score, path.stat().st_mtime, path, text, how))
        for name, cands in chosen.items():
            cands.sort(key=lambda c: (c[0], c[1]), reverse=True)
            score, _, path, text, how = cands[0]
            note = f"graded `{path.relative_to(folder).as_posix()}`: {how}"
            if len(cands) > 1:
                others = ", ".join(f"`{c[2].relative_to(folder).as_posix()}`" for c in cands[1:])
                note += f"; also handed in and not graded: {others} (the closest match, then the newest, is graded)"
            log.info("%s: %s", folder.name, note)
            jobs.append(
                {
                    "student": folder.name,
                    "notebook": name,
                    "file": path.relative_to(folder).as_posix(),
                    "match": note,
                    "text": text,
                }
            )
    return jobs, rows


def run_jobs(jobs: list[dict], cfg: Config, workers: int, log: logging.Logger) -> list[dict]:
    """Grade every job over ``workers`` processes; a job whose worker dies is reported, not lost."""
    with tempfile.TemporaryDirectory(prefix="lab-grade-") as tmp:
        _kernel_spec(Path(tmp))
        zygote = _start_zygote(cfg, Path(tmp))
        cfg = Config(**{**asdict(cfg), "scratch_root": tmp, "zygote": str(Path(tmp) / "zygote.sock") if zygote else ""})
        log.info(
            "kernels: %s",
            "forked from one process that imported torch once (tools/forkkernel.py)" if zygote else "a new Python each",
        )
        try:
            with cf.ProcessPoolExecutor(max_workers=max(1, workers), initializer=_init_worker, initargs=(tmp,)) as pool:
                return _run_pool(pool, jobs, cfg, log)
        finally:
            if zygote is not None:
                zygote.terminate()
                zygote.wait()


def _run_pool(pool: cf.ProcessPoolExecutor, jobs: list[dict], cfg: Config, log: logging.Logger) -> list[dict]:
    done = []
    # the longest notebooks first, so that the workers finish together
    sources = _sources(cfg)
    jobs = sorted(jobs, key=lambda j: -sum(c.cell_type == "code" for c in sources[j["notebook"]].student.cells))
    futures = {pool.submit(grade_job, job, cfg): job for job in jobs}
    for fut in cf.as_completed(futures):
        job = futures[fut]
        try:
            out = fut.result()
        except Exception as exc:  # the worker process itself died
            out = {
                **job,
                "text": None,
                "results": [],
                "written": [],
                "executed": "",
                "seconds": 0.0,
                "kernel_starts": 0,
                "error": f"grader worker died: {type(exc).__name__}: {exc}",
            }
        log.info(
            "%s/%s: %s in %.1f s%s",
            job["student"],
            job["notebook"],
            " ".join(f"{r['exercise']}={r['status']}" for r in out["results"]),
            out["seconds"],
            f" ({out['error']})" if out["error"] else "",
        )
        done.append(out)
    return sorted(done, key=lambda o: (o["student"], o["notebook"]))


# --------------------------------------------------------------------------- writing the results

_STATUS_WORDS = {
    "pass": "✓ passed",
    "fail": "✗ failed",
    "not written": "✗ not written yet",
    "missing": "✗ missing",
    "timeout": "✗ timed out",
    "crashed": "✗ crashed",
    "not run": "✗ not graded",
}


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
            lines += ["```text", r["feedback"], "```", ""]
    if graded.get("written"):
        lines += ["## Written answers (collected for your instructor, not scored)", ""]
        for w in graded["written"]:
            answer = w["answer"]
            text = "_(the answer cell is missing)_" if answer is None else ("_(no answer)_" if not answer else answer)
            lines += [f"### {w['label']}", "", text, ""]
    return "\n".join(lines).rstrip() + "\n"


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


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", name) or "_"


def write_outputs(out: Path, graded: list[dict], rows: list[dict], sources: dict[str, Source]) -> list[dict]:
    """grades.csv, results.jsonl, feedback/ and executed/; returns the csv rows."""
    present = {g["notebook"] for g in graded} | {r["notebook"] for r in rows}
    ids = [e.id for s in sources.values() if s.name in present for e in s.exercises]  # notebooks in this run
    table = []
    with open(out / "results.jsonl", "w", encoding="utf-8") as jl:
        for g in graded:
            src = sources[g["notebook"]]
            by_id = {r["exercise"]: r for r in g["results"]}
            row = {"student": g["student"], "notebook": g["notebook"]}
            row.update({e.id: f"{by_id[e.id]['points']:g}" if e.id in by_id else "0" for e in src.exercises})
            row.update(
                score=f"{sum(r['points'] for r in g['results']):g}",
                max_score=f"{src.max_score():g}",
                status="ok" if not g["error"] else g["error"],
            )
            table.append(row)
            for r in g["results"]:
                jl.write(json.dumps({**r, "file": g["file"], "notebook_seconds": g["seconds"]}) + "\n")
            for w in g["written"]:
                jl.write(
                    json.dumps(
                        {
                            "student": g["student"],
                            "notebook": g["notebook"],
                            "exercise": w["exercise"],
                            "label": w["label"],
                            "points": None,
                            "status": "written (not scored)",
                            "answer": w["answer"],
                            "file": g["file"],
                        }
                    )
                    + "\n"
                )
            folder = out / "feedback" / _safe(g["student"])
            folder.mkdir(parents=True, exist_ok=True)
            md = feedback_markdown(g, sources)
            (folder / f"{g['notebook']}.md").write_text(md, encoding="utf-8")
            (folder / f"{g['notebook']}.html").write_text(
                feedback_html(md, f"{g['student']}: {g['notebook']}"), encoding="utf-8"
            )
            if g["executed"]:
                ex_dir = out / "executed" / _safe(g["student"])
                ex_dir.mkdir(parents=True, exist_ok=True)
                (ex_dir / f"{g['notebook']}.ipynb").write_text(g["executed"], encoding="utf-8")
    for r in rows:
        src = sources.get(r["notebook"])
        row = {
            "student": r["student"],
            "notebook": r["notebook"],
            "score": "0",
            "max_score": f"{r['max_score']:g}" if isinstance(r.get("max_score"), float) else "",
            "status": r["status"],
        }
        if src:
            row.update({e.id: "0" for e in src.exercises})
        table.append(row)
    table.sort(key=lambda r: (r["student"], r["notebook"]))
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "notebook", *ids, "score", "max_score", "status"], restval="")
        writer.writeheader()
        writer.writerows(table)
    write_gradebook(out / "gradebook.csv", table, sources)
    return table


def write_gradebook(path: Path, table: list[dict], sources: dict[str, Source]) -> None:
    """One row per student, one column per notebook (its score) and the total: the shape an
    LMS gradebook import (Canvas, Moodle) expects. A notebook not handed in scores 0."""
    names = sorted({r["notebook"] for r in table if r["notebook"] in sources})
    students = sorted({r["student"] for r in table})
    best = {}
    for r in table:
        if r["notebook"] in sources:
            key = (r["student"], r["notebook"])
            best[key] = max(best.get(key, 0.0), float(r["score"] or 0))
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *names, "total"])
        writer.writerow(
            [
                "(points possible)",
                *(f"{sources[n].max_score():g}" for n in names),
                f"{sum(sources[n].max_score() for n in names):g}",
            ]
        )
        for s in students:
            scores = [best.get((s, n), 0.0) for n in names]
            writer.writerow([s, *(f"{x:g}" for x in scores), f"{sum(scores):g}"])


def grade(submissions: Path, out: Path, *, jobs: int = 2, cfg: Config | None = None) -> list[dict]:
    """Grade every submission under ``submissions`` into ``out``; return the grades.csv rows."""
    cfg = cfg or Config()
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    log = logging.getLogger(f"grade.{id(out)}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.FileHandler(out / "logs" / f"grade-{time.strftime('%Y%m%d-%H%M%S')}.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    try:
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
        cfg = Config(**{**asdict(cfg), "private": (str(submissions), str(out))})
        graded = run_jobs(todo, cfg, jobs, log)
        table = write_outputs(out, graded, rows, sources)
        log.info("done: %d row(s) in grades.csv in %.1f s", len(table), time.perf_counter() - t0)
        return table
    finally:
        log.removeHandler(handler)
        handler.close()


def sandbox_state(cfg: Config) -> str:
    if not cfg.landlock:
        return "Landlock off (--no-landlock)"
    import ctypes

    abi = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) if sys.platform == "linux" else -1
    return f"Landlock ABI {abi}" if abi > 0 else "Landlock unavailable: file isolation is best effort"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Grade a folder of submissions (one sub-folder per student).")
    p.add_argument("submissions", type=Path)
    p.add_argument("--out", type=Path, default=Path("grades"))
    p.add_argument("--jobs", type=int, default=2, help="worker processes (one kernel each)")
    p.add_argument("--src", type=Path, default=ROOT / "notebooks", help="the solved notebooks")
    p.add_argument("--extra", type=Path, default=ROOT / "grading" / "extra", help="instructor-only cases")
    p.add_argument("--timeout", type=float, default=60, help="seconds per exercise cell and per check cell")
    p.add_argument("--cell-timeout", type=float, default=600, help="seconds for any other cell")
    p.add_argument(
        "--memory-mb", type=int, default=4096, help="memory (heap and private data) cap per kernel (0: none)"
    )
    p.add_argument("--no-landlock", action="store_true", help="do not fence kernels in with Landlock")
    p.add_argument(
        "--fork",
        action="store_true",
        help="fork each kernel from one process that imported torch once (Linux only; about 3x faster "
        "kernel starts) instead of starting a new Python",
    )
    args = p.parse_args(argv)
    if not args.submissions.is_dir():
        print(f"error: {args.submissions} is not a folder", file=sys.stderr)
        return 2
    cfg = Config(
        src=str(args.src.resolve()),
        extra=str(args.extra.resolve()) if args.extra.is_dir() else None,
        timeout=args.timeout,
        cell_timeout=args.cell_timeout,
        memory_mb=args.memory_mb,
        landlock=not args.no_landlock,
        fork=args.fork,
    )
    out = args.out.resolve()
    if out == args.submissions.resolve() or args.submissions.resolve() in out.parents:
        print("error: OUT must not be inside SUBMISSIONS", file=sys.stderr)
        return 2
    table = grade(args.submissions.resolve(), out, jobs=args.jobs, cfg=cfg)
    ok = sum(r["status"] == "ok" for r in table)
    print(
        f"{len(table)} row(s) in {out / 'grades.csv'} ({ok} graded, {len(table) - ok} with a problem); "
        f"feedback in {out / 'feedback'}/, the log in {out / 'logs'}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Grading time of N submissions of one notebook against the notebook's own run time.

    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py                       # notebook 01, N = 60, JOBS=1 then 2
    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py notebooks/02_manual_backprop.ipynb --n 20 --jobs 2
    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py --n 20 --fork    # kernels forked from one zygote
    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py --class synthetic --keep build/grade-bench  # + class report

``--class synthetic`` (notebook 01 only) hands in a class of typical answers instead of N copies
of the solved notebook: each exercise right for about 60% of the students, else one of a few
named mistakes (a square root taken, an inverted mask, reshape without permute...), a wrong
prediction or the stub left; ``--keep DIR`` keeps the last run's OUT (its report.csv).

The notebook's own run time T is one fresh kernel running the solved source from
top to bottom with nbclient (what nbval and tools/regenerate.py do, kernel start
included), the median of ``--repeats`` runs, measured before and after the grading
run (a shared machine's load changes). The class is N copies of the solved source
(every exercise passes, so every check runs). The goal of issue 16:
grading wall time <= 1.5 x N x T / jobs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from tools import grade

ROOT = Path(__file__).resolve().parent.parent


def own_run_time(path: Path) -> float:
    """Seconds for one fresh kernel to run the notebook top to bottom."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(
        nb, timeout=600, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return time.perf_counter() - t0


#: Notebook 01's typical wrong answers, per exercise (the first entry is right: None keeps the solution).
MISTAKES_01 = {
    "01.1": [
        None,
        "def pairwise_sq_dists(a, b):\n    return torch.cdist(a, b)",
        "def pairwise_sq_dists(a, b):\n    return ((a[:, None] - b[None]) ** 2).mean(dim=-1)",
        "def pairwise_sq_dists(a, b):\n    raise NotImplementedError",
    ],
    "01.2": [None, 'prediction = "mask"', 'prediction = "both"'],
    "01.3": [
        None,
        "def correct_class_scores(scores, labels):\n    return scores[:, labels]",
        "def correct_class_scores(scores, labels):\n    return scores.max(dim=1).values",
    ],
    "01.4": [
        None,
        "def keep_above_row_mean(x):\n    out = x.clone()\n    out[x > x.mean(dim=1, keepdim=True)] = 0\n    return out",
        "def keep_above_row_mean(x):\n    x[x < x.mean(dim=1, keepdim=True)] = 0\n    return x",
    ],
    "01.5": [None, "def channels_first_rows(images):\n    return images.reshape(images.shape[0], -1)"],
    "01.6": [None, "def per_sample_matmul(x, w):\n    return x @ w[0]"],
}


def synthetic_class(path: Path, n: int, folder: Path) -> None:
    """N students' notebooks: each exercise right with probability 0.6, else one of its mistakes."""
    import random

    rng = random.Random(25)
    solved = nbformat.read(path, as_version=4)
    for k in range(n):
        nb = nbformat.from_dict(json.loads(json.dumps(solved)))
        for cell in nb.cells:
            ex = (cell.get("metadata", {}).get("lab") or {}).get("exercise")
            if (cell.get("metadata", {}).get("lab") or {}).get("role") == "solution" and ex in MISTAKES_01:
                wrong = MISTAKES_01[ex][1:]
                if rng.random() >= 0.6:
                    cell.source = rng.choice(wrong)
            if cell.cell_type == "code":
                cell.outputs = []  # the solved notebook's outputs (its recorded predictions) are not the student's
        (folder / f"s{k:03d}").mkdir(parents=True)
        nbformat.write(nb, folder / f"s{k:03d}" / path.name)


def grade_class(path: Path, n: int, jobs: int, fork: bool, kind: str, keep: Path | None) -> tuple[float, list]:
    """Grade a class of ``n`` in a temporary folder with ``jobs`` workers: (wall seconds, grades.csv rows)."""
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
        sub = Path(tmp) / "handed_in"
        if kind == "synthetic":
            synthetic_class(path, n, sub)
        else:
            for k in range(n):
                (sub / f"s{k:03d}").mkdir(parents=True)
                shutil.copy(path, sub / f"s{k:03d}" / path.name)
        cfg = grade.Config(src=str(path.parent), fork=fork)
        t0 = time.perf_counter()
        table = grade.grade(sub, Path(tmp) / "out", jobs=jobs, cfg=cfg)
        wall = time.perf_counter() - t0
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(Path(tmp) / "out", keep)
    return wall, table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", type=Path, nargs="?", default=ROOT / "notebooks" / "01_tensors.ipynb")
    p.add_argument("--n", type=int, default=60, help="submissions")
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="worker counts, graded one after another")
    p.add_argument("--repeats", type=int, default=2, help="runs of the notebook itself, each side")
    p.add_argument("--fork", action="store_true", help="fork each kernel from one zygote (grade.py --fork)")
    p.add_argument("--class", dest="kind", choices=("copies", "synthetic"), default="copies")
    p.add_argument("--keep", type=Path, help="copy the last run's OUT here (its report.csv: the class report)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    path = args.notebook.resolve()
    before = statistics.median(own_run_time(path) for _ in range(args.repeats))
    runs = []
    for jobs in args.jobs:
        wall, table = grade_class(path, args.n, jobs, args.fork, args.kind, args.keep)
        runs.append((jobs, wall, table))
    after = statistics.median(own_run_time(path) for _ in range(args.repeats))
    own = (before + after) / 2
    figures = []
    ok = True
    for jobs, wall, table in runs:
        goal = 1.5 * args.n * own / jobs
        full = sum(r["score"] == r["max_score"] and r["status"] == "ok" for r in table)
        graded = sum(r["status"] == "ok" for r in table)
        figures.append(
            {
                "notebook": path.name,
                "class": args.kind,
                "n": args.n,
                "jobs": jobs,
                "fork": args.fork,
                "own_run_s": round(own, 2),
                "own_run_before_s": round(before, 2),
                "own_run_after_s": round(after, 2),
                "grading_wall_s": round(wall, 1),
                "per_submission_s": round(wall / args.n, 2),
                "goal_s": round(goal, 1),
                "ratio_to_goal": round(wall / goal, 2),
                "full_marks": full,
                "graded_ok": graded,
            }
        )
        print(
            f"{path.name} ({args.kind}, {'forked' if args.fork else 'stock'} kernels): own run {own:.1f} s "
            f"(before {before:.1f}, after {after:.1f}); grading {args.n} submissions with {jobs} worker(s): "
            f"{wall:.1f} s ({wall / args.n:.2f} s each); goal 1.5 x N x T / jobs = {goal:.1f} s -> "
            f"{wall / goal:.2f} of the goal; {graded}/{args.n} graded, {full} full marks"
        )
        ok = ok and wall <= goal and graded == args.n and (args.kind == "synthetic" or full == args.n)
    if len(runs) == 2:
        print(f"speed-up of {runs[1][0]} workers over {runs[0][0]}: {runs[0][1] / runs[1][1]:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

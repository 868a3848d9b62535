"""Grading time of N submissions of one notebook against the notebook's own run time.

    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py                       # notebook 01, N = 60, 2 workers
    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py notebooks/02_manual_backprop.ipynb --n 20
    OMP_NUM_THREADS=1 python benchmarks/grade_timing.py --n 20 --fork    # kernels forked from one zygote

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", type=Path, nargs="?", default=ROOT / "notebooks" / "01_tensors.ipynb")
    p.add_argument("--n", type=int, default=60, help="submissions")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="runs of the notebook itself, each side")
    p.add_argument("--fork", action="store_true", help="fork each kernel from one zygote (grade.py --fork)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    path = args.notebook.resolve()
    before = statistics.median(own_run_time(path) for _ in range(args.repeats))
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
        sub = Path(tmp) / "handed_in"
        for k in range(args.n):
            (sub / f"s{k:03d}").mkdir(parents=True)
            shutil.copy(path, sub / f"s{k:03d}" / path.name)
        cfg = grade.Config(src=str(path.parent), fork=args.fork)
        t0 = time.perf_counter()
        table = grade.grade(sub, Path(tmp) / "out", jobs=args.jobs, cfg=cfg)
        wall = time.perf_counter() - t0
    after = statistics.median(own_run_time(path) for _ in range(args.repeats))
    own = (before + after) / 2
    goal = 1.5 * args.n * own / args.jobs
    full = sum(r["score"] == r["max_score"] and r["status"] == "ok" for r in table)
    figures = {
        "notebook": path.name,
        "n": args.n,
        "jobs": args.jobs,
        "fork": cfg.fork,
        "own_run_s": round(own, 2),
        "own_run_before_s": round(before, 2),
        "own_run_after_s": round(after, 2),
        "grading_wall_s": round(wall, 1),
        "per_submission_s": round(wall / args.n, 2),
        "goal_s": round(goal, 1),
        "ratio_to_goal": round(wall / goal, 2),
        "full_marks": full,
    }
    print(
        f"{path.name} ({'forked' if cfg.fork else 'stock'} kernels): own run {own:.1f} s (before {before:.1f}, "
        f"after {after:.1f}); grading {args.n} "
        f"submissions with {args.jobs} workers: {wall:.1f} s ({wall / args.n:.2f} s each); goal "
        f"1.5 x N x T / jobs = {goal:.1f} s -> {wall / goal:.2f} of the goal; {full}/{args.n} full marks"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if wall <= goal and full == args.n else 1


if __name__ == "__main__":
    sys.exit(main())

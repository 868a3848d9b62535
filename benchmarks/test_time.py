"""How long `make test` takes: wall and CPU time, and the units (a notebook, a test module or
class) that take longest, summed from pytest's per-test durations.

    python3 benchmarks/test_time.py                      # this checkout, its .venv present

Run it on an idle machine: the figure the issue asks for is on 2 cores with nothing else running.
A virtual machine's speed varies from hour to hour, so the script also times a fixed pure-Python
loop before and after the run (the "machine speed"): compare runs only at a similar figure.
"""

from __future__ import annotations

import collections
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def unit(classname: str) -> str:
    """A junit classname (``tests.test_grade``, ``notebooks.07_data_loading.ipynb``) as a unit."""
    if classname.startswith("notebooks."):
        return "nbval " + classname.split(".")[1]
    if ".TestStudentEdition_" in classname:
        return "Run-all unsolved " + classname.split("TestStudentEdition_")[1]
    return classname.split(".")[1] if classname.startswith("tests.") else classname.split(".")[0]


def loop_seconds() -> float:
    """The best of three timings of 20 million additions in a fresh Python: this machine's speed now."""
    code = (
        "import time\nt = time.perf_counter()\ns = 0\nfor i in range(20_000_000):\n    s += i\n"
        "print(time.perf_counter() - t)"
    )
    return min(
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout) for _ in range(3)
    )


def main() -> int:
    speed = loop_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        start = time.perf_counter()
        done = subprocess.run(
            ["make", "-s", "test", f"PYTEST_ARGS=--junitxml={junit}"], cwd=ROOT, capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = next((line for line in reversed(done.stdout.splitlines()) if re.search(r"passed|failed", line)), "")
        print(
            f"make test: {wall:.0f} s wall, {usage.ru_utime:.0f} s user + {usage.ru_stime:.0f} s system CPU "
            f"on {os.cpu_count()} cores; {summary.strip('= ')}"
        )
        print(f"machine speed: 20 million additions in {speed:.2f} s before, {loop_seconds():.2f} s after")
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
            return done.returncode
        seconds: collections.Counter = collections.Counter()
        for case in ET.parse(junit).iter("testcase"):
            seconds[unit(case.get("classname") or "")] += float(case.get("time") or 0)
        print(f"sum of test durations: {sum(seconds.values()):.0f} s; the longest units:")
        for name, s in seconds.most_common(15):
            print(f"  {s:6.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

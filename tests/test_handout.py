"""`make handout`: the zip students get holds the student edition and its README, no answer."""

import json
import subprocess
import zipfile
from pathlib import Path

from test_spoilers import solution_lines

ROOT = Path(__file__).resolve().parent.parent


def test_handout_holds_only_the_student_edition(tmp_path):
    # BIN: this venv (make test-oldest runs the suite in another); STAMP empty: never (re)install from a test.
    out = subprocess.run(
        ["make", "-s", "handout", "BIN=" + str(Path(__import__("sys").executable).parent), "STAMP="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    with zipfile.ZipFile(ROOT / "build" / "handout.zip") as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
        sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        beside = sorted(f"handout/{p.name}" for p in (ROOT / "notebooks").glob("*.py"))  # ddp_train.py (notebook 10)
        assert names == sorted(["handout/README.md"] + [f"handout/{p.name}" for p in sources] + beside)
        readme = z.read("handout/README.md").decode()
        assert "solved sources" not in readme and "make lab" in readme
        for path in sources:
            handed = json.loads(z.read(f"handout/{path.name}"))
            assert handed["metadata"]["labsupport"]["edition"] == "student"
            lines = {line.strip() for c in handed["cells"] for line in "".join(c["source"]).splitlines()}
            for cell, answer in solution_lines(json.loads(path.read_text())["cells"]).items():
                hit = answer & lines
                assert not (len(hit) >= 2 and len(hit) >= 0.5 * len(answer)), f"{path.name} cell {cell}: {hit}"
            assert all(c.get("outputs", []) == [] for c in handed["cells"] if c["cell_type"] == "code")

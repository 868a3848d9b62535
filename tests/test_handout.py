"""`make handout`: the zip students get holds the student edition, its README and a wheel of
labsupport, no answer; unzipped alone, its README's one command installs what the notebooks need."""

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from test_spoilers import solution_lines

from tools import colab

ROOT = Path(__file__).resolve().parent.parent
WHEEL = f"labsupport-{colab.VERSION}-py3-none-any.whl"


@pytest.fixture(scope="module")
def handout():
    # BIN: this venv (make test-oldest runs the suite in another); STAMP empty: never (re)install from a test.
    out = subprocess.run(
        ["make", "-s", "handout", "BIN=" + str(Path(sys.executable).parent), "STAMP="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return ROOT / "build" / "handout.zip"


def test_handout_holds_only_the_student_edition_and_the_wheel(handout):
    with zipfile.ZipFile(handout) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
        sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        beside = sorted(f"handout/{p.name}" for p in (ROOT / "notebooks").glob("*.py"))  # ddp_train.py (notebook 10)
        extra = ["handout/README.md", f"handout/{WHEEL}"]
        assert names == sorted(extra + [f"handout/{p.name}" for p in sources] + beside)
        readme = z.read("handout/README.md").decode()
        assert "solved sources" not in readme and "make " not in readme and "Makefile" not in readme
        assert f"\npip install {WHEEL} jupyterlab\n" in readme  # the one command, with the wheel's real name
        for path in sources:
            handed = json.loads(z.read(f"handout/{path.name}"))
            assert handed["metadata"]["labsupport"]["edition"] == "student"
            lines = {line.strip() for c in handed["cells"] for line in "".join(c["source"]).splitlines()}
            for cell, answer in solution_lines(json.loads(path.read_text())["cells"]).items():
                hit = answer & lines
                assert not (len(hit) >= 2 and len(hit) >= 0.5 * len(answer)), f"{path.name} cell {cell}: {hit}"
            assert all(c.get("outputs", []) == [] for c in handed["cells"] if c["cell_type"] == "code")
        packaged = set(zipfile.ZipFile(z.open(f"handout/{WHEEL}")).namelist())
        assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "labsupport").rglob("*.py")} <= packaged


def visible_packages(tmp_path: Path) -> Path:
    """This venv's installed packages (torch...) as links in a folder, less labsupport: a
    student's machine that has PyTorch already, so the test downloads nothing."""
    folder = tmp_path / "their_packages"
    folder.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if re.match(r"(__editable__|labsupport)", entry.name, re.I) or entry.suffix == ".pth":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def test_the_unzipped_handout_alone_installs_and_runs_a_setup_cell(handout, tmp_path):
    with zipfile.ZipFile(handout) as z:
        z.extractall(tmp_path)
    here = tmp_path / "handout"
    readme = (here / "README.md").read_text()
    commands = [line for block in re.findall(r"```bash\n(.*?)```", readme, re.S) for line in block.splitlines()]
    install = next(line for line in commands if line.startswith("pip install"))

    # The README's venv, made without ensurepip (6 s of CPU): the linked packages hold pip and a
    # current setuptools, so the README's `pip install` runs as `python -m pip install` here.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "their_packages.pth").write_text(f"{visible_packages(tmp_path)}\n")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",  # offline: everything but the wheel must be there already
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "LAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    python = str(venv / "bin" / "python")
    missing = subprocess.run([python, "-c", "import labsupport"], cwd=here, env=env, capture_output=True, text=True)
    assert "No module named 'labsupport'" in missing.stderr

    # The README's command installs labsupport and nothing else: pip lists every package it
    # installed, and leaves the linked ones alone (pip never uninstalls outside the venv).
    assert install.startswith("pip install "), install
    command = f"{python} -m {install}"
    done = subprocess.run(command, shell=True, cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"Successfully installed labsupport-{colab.VERSION}", done.stdout

    nb = json.loads((here / "01_tensors.ipynb").read_text())
    setup = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"result = shell.run_cell({setup!r})\n"
        "print('labsupport from', shell.user_ns['lab'].__file__, result.success)\n"
    )
    run = subprocess.run([python, "-c", code], cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("python ") and " | torch " in lines[0], run.stdout  # the environment line
    assert lines[-1] == f"labsupport from {site / 'labsupport' / '__init__.py'} True"  # the wheel's, not a pip install

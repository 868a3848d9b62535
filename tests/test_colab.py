"""Opened anywhere: a runtime without labsupport (Colab, JupyterHub) runs a setup cell to success.

The runtime is simulated with no network: a fresh venv that sees this venv's packages
(torch, numpy...) but not labsupport, a fake ``pip`` that records its arguments and
"installs" labsupport by linking this checkout, and a fake ``google.colab`` module.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

from tools import colab

ROOT = Path(__file__).resolve().parent.parent

FAKE_PIP = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    Path(os.environ["FAKE_PIP_LOG"]).write_text(json.dumps(sys.argv[1:]))
    if os.environ.get("FAKE_PIP_OFFLINE"):
        print("ERROR: Could not find a version that satisfies the requirement (network unreachable)", file=sys.stderr)
        sys.exit(1)
    Path(os.environ["FAKE_SITE"], "labsupport").symlink_to(os.environ["LAB_SOURCE"])
""")


@pytest.fixture
def runtime(tmp_path):
    """A python without labsupport, and the environment that fakes pip (and optionally Colab)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "lab_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # its .pth files stay unread
    fake, fake_site = tmp_path / "fake", tmp_path / "fake_site"
    (fake / "pip").mkdir(parents=True)
    fake_site.mkdir()
    (fake / "pip" / "__main__.py").write_text(FAKE_PIP)
    (fake / "pip" / "__init__.py").write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": f"{fake}{os.pathsep}{fake_site}",
        "FAKE_PIP_LOG": str(tmp_path / "pip.json"),
        "FAKE_SITE": str(fake_site),
        "LAB_SOURCE": str(ROOT / "labsupport"),
        "LAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    return venv / "bin" / "python", env, tmp_path


def setup_source() -> str:
    nb = nbformat.read(ROOT / "notebooks" / "01_tensors.ipynb", as_version=4)
    return colab.with_bootstrap(colab.setup_cell(nb).source)


def run(python, env, cwd, code):
    code += "\nimport gc\ngc.freeze()  # the exit then skips collecting torch's objects: 1-2 s less"
    return subprocess.run([str(python), "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_runtime_really_lacks_labsupport(runtime):
    python, env, tmp = runtime
    out = run(
        python, env, tmp, "import importlib.util as u; print(u.find_spec('labsupport'), bool(u.find_spec('torch')))"
    )
    assert out.returncode == 0 and out.stdout.strip() == "None True", out.stderr


def test_setup_cell_installs_labsupport_keeps_torch_and_says_so(runtime):
    python, env, tmp = runtime
    out = run(python, env, tmp, setup_source())
    assert out.returncode == 0, out.stderr
    torch = importlib.metadata.version("torch")  # the installed distribution's, as pip knows it
    first = out.stdout.splitlines()[0]
    assert first == f"installed labsupport {colab.VERSION} ({colab.TAG}) for this runtime; torch kept at {torch}"
    args = json.loads((tmp / "pip.json").read_text())
    assert f"labsupport @ git+https://github.com/{colab.REPO}@{colab.TAG}" in args
    assert f"torch=={torch}" in args  # pip is told to keep the runtime's torch
    assert out.stdout.splitlines()[1].startswith("python ")  # then the setup cell's own environment line


def test_offline_says_so_in_one_line(runtime):
    python, env, tmp = runtime
    out = run(python, {**env, "FAKE_PIP_OFFLINE": "1"}, tmp, colab.bootstrap())
    assert out.returncode != 0 and out.stdout == ""
    message = out.stderr.strip()
    assert "\n" not in message and "offline?" in message and "pip install" in message


def test_in_colab_notebook_10_says_colab_and_fetches_the_script_it_reads_beside_it(runtime):
    python, env, tmp = runtime
    fake = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    colab_dir = tmp / "colab_fake" / "google" / "colab"
    colab_dir.mkdir(parents=True)
    (colab_dir / "__init__.py").write_text("")
    (fake / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        import shutil, urllib.request
        from pathlib import Path
        def fake_retrieve(url, name):   # no network: serve the file from this checkout, log the address
            Path({str(tmp / "urls.txt")!r}).open("a").write(url + "\\n")
            shutil.copy(Path({str(ROOT / "notebooks")!r}) / url.rsplit("/", 1)[1], name)
        urllib.request.urlretrieve = fake_retrieve
    """)
    )
    env = {**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(tmp / "colab_fake")}
    out = run(python, env, tmp, colab.bootstrap("10_scaling_up.ipynb"))  # the block alone: the rest is tested above
    assert out.returncode == 0, out.stderr
    assert " for Colab; torch kept at " in out.stdout.splitlines()[0]
    assert out.stdout.splitlines()[-1] == f"fetched ddp_train.py from {colab.TAG}"
    assert (tmp / "ddp_train.py").read_text() == (ROOT / "notebooks" / "ddp_train.py").read_text()
    assert (tmp / "urls.txt").read_text() == f"{colab.RAW}/ddp_train.py\n"


def test_in_the_lab_the_block_does_nothing(capfd, monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError(f"the block ran a program in the lab: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    namespace = {}
    exec(colab.BOOTSTRAP, namespace)  # here, where labsupport is installed (and imported already)
    assert namespace["lab"].__name__ == "labsupport" and capfd.readouterr() == ("", "")


def test_every_notebook_carries_the_current_block():
    notebooks = sorted(str(p) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert colab.main(["check", *notebooks]) == 0


def test_colab_links_point_at_the_student_edition():
    url = colab.colab_url("01_tensors.ipynb")
    assert url.endswith(f"/blob/{colab.SITE_BRANCH}/student/01_tensors.ipynb")
    readme = (ROOT / "README.md").read_text()
    assert url in readme and "/notebooks/01_tensors.ipynb" not in readme.split("Open in Colab")[-1][:2000]

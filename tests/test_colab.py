"""Opened anywhere: a runtime without labsupport (Colab, JupyterHub) runs a setup cell.

The runtime is a Jupyter kernel of this venv that cannot import labsupport: a
``sitecustomize`` on its PYTHONPATH puts a finder first on ``sys.meta_path`` that raises
ModuleNotFoundError for it, until a fake pip (a ``pip`` package on the same PYTHONPATH,
so ``sys.executable -m pip`` runs it) "installs" it by writing a marker file. The fake
pip fails when told to; the offline case runs the real pip with every proxy pointing at
a closed port (and PIP_TARGET in tmp, so it could never write into this venv).
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel

from tools import colab

ROOT = Path(__file__).resolve().parent.parent

HIDE = textwrap.dedent("""
    import os, sys
    class _NoLabsupport:  # as on Colab: labsupport is not there until pip installed it
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "labsupport" and not os.path.exists(os.environ["FAKE_INSTALLED"]):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, _NoLabsupport())
""")
FAKE_PIP = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    Path(os.environ["FAKE_PIP_LOG"]).write_text(json.dumps(sys.argv[1:]))
    if Path(os.environ["FAKE_PIP_FAILS"]).exists():
        print("ERROR: Could not find a version that satisfies the requirement (network unreachable)", file=sys.stderr)
        sys.exit(1)
    Path(os.environ["FAKE_INSTALLED"]).write_text("installed")
""")
NOISE = ("SystemExit", "To exit", "NameError", "Traceback", "ModuleNotFoundError")


@pytest.fixture
def runtime(tmp_path):
    """The environment of a runtime without labsupport, with a fake pip that fails while ``fails`` exists."""
    fake = tmp_path / "fake"
    (fake / "pip").mkdir(parents=True)
    (fake / "sitecustomize.py").write_text(HIDE)
    (fake / "pip" / "__init__.py").write_text("")
    (fake / "pip" / "__main__.py").write_text(FAKE_PIP)
    env = {
        **os.environ,
        "PYTHONPATH": str(fake),
        "FAKE_INSTALLED": str(tmp_path / "installed"),
        "FAKE_PIP_FAILS": str(tmp_path / "fails"),
        "FAKE_PIP_LOG": str(tmp_path / "pip.json"),
        "LAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    return env, tmp_path


class Kernel:
    """A Jupyter kernel in ``env``; ``run`` returns a cell's outputs as nbclient would store them."""

    def __init__(self, env, cwd):
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(cwd))

    def run(self, code):
        self.kc.execute(code)
        outputs = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=120)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                return outputs
            if kind in ("stream", "error"):
                outputs.append({"type": kind, **content})

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture
def kernel():
    kernels = []

    def start(env, cwd):
        kernels.append(Kernel(env, cwd))
        return kernels[-1]

    yield start
    for k in kernels:
        k.close()


def notebook_cells(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    first_check = next(c for c in nb.cells if c.metadata.get("lab", {}).get("role") == "check")
    return colab.setup_cell(nb).source, first_check.source


def text(outputs):
    return "".join(o.get("text", "") + "\n".join(o.get("traceback", [])) for o in outputs)


def stopped(outputs):
    """Whether a cell showed exactly the one STOPPED line and nothing else."""
    return [(o["type"], o.get("traceback")) for o in outputs] == [("error", [colab.STOP])]


def test_failing_pip_stops_every_later_cell_in_one_line_and_a_rerun_installs(runtime, kernel):
    env, tmp = runtime
    (tmp / "fails").touch()
    k = kernel(env, tmp)
    assert "ModuleNotFoundError" in text(k.run("import labsupport"))  # the runtime really lacks it
    setup, check = notebook_cells("01_tensors.ipynb")
    out = k.run(setup)
    assert stopped(out), out  # the setup cell's own output: one line, no SystemExit, no traceback
    assert colab.INSTALL in json.loads((tmp / "pip.json").read_text())
    for cell in (check, "x = torch.ones(3, device=device)", "lab.pick_device()"):  # lab, device: never a NameError
        out = k.run(cell)
        assert stopped(out), (cell, out)
        assert not any(word in text(out) for word in NOISE)
    assert text(k.run("print(torch.ones(2).sum().item())")) == "2.0\n"  # what needs no helper still runs

    (tmp / "fails").unlink()  # back online: rerunning the setup cell installs the helpers
    out = k.run(setup)
    lines = text(out).splitlines()
    torch = json.loads((tmp / "pip.json").read_text())[-1]
    assert torch.startswith("torch==")  # pip is told to keep the runtime's torch
    assert lines[0] == f"installed labsupport {colab.VERSION} ({colab.TAG}); torch kept at {torch[7:]}"
    assert lines[1].startswith("python ") and len(lines) == 2  # then the setup cell's environment line
    out = k.run("not_defined_anywhere")
    assert "NameError" in text(out) and colab.STOP not in text(out)  # a NameError reads as usual again


def test_offline_the_real_pip_fails_and_the_cell_says_so_in_one_line(runtime, kernel):
    env, tmp = runtime
    fake = Path(env["PYTHONPATH"])
    (fake / "pip" / "__main__.py").unlink()
    (fake / "pip" / "__init__.py").unlink()
    (fake / "pip").rmdir()  # sys.executable -m pip is this venv's pip
    closed = "http://127.0.0.1:9"
    offline = {
        "http_proxy": closed,
        "https_proxy": closed,
        "HTTP_PROXY": closed,
        "HTTPS_PROXY": closed,
        "ALL_PROXY": closed,
        "no_proxy": "",
        "NO_PROXY": "",
        "GIT_TERMINAL_PROMPT": "0",
        "PIP_TARGET": str(tmp / "target"),  # never this venv, whatever happens
        "PIP_NO_INDEX": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "3",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    k = kernel({**env, **offline}, tmp)
    setup, check = notebook_cells("08_pretrained_models.ipynb")
    out = k.run(setup)
    assert stopped(out), out
    out = k.run(check)
    assert stopped(out), out
    assert not (tmp / "installed").exists()


def run_python(env, cwd, code):
    code += "\nimport gc\ngc.freeze()  # the exit then skips collecting torch's objects: 1-2 s less"
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_notebook_10_fetches_the_script_it_reads_beside_it(runtime):
    env, tmp = runtime
    fake = Path(env["PYTHONPATH"])
    with (fake / "sitecustomize.py").open("a") as f:
        f.write(
            textwrap.dedent(f"""
            import shutil, urllib.request
            from pathlib import Path
            def fake_retrieve(url, name):   # no network: serve the file from this checkout, log the address
                Path({str(tmp / "urls.txt")!r}).open("a").write(url + "\\n")
                shutil.copy(Path({str(ROOT / "notebooks")!r}) / url.rsplit("/", 1)[1], name)
            urllib.request.urlretrieve = fake_retrieve
        """)
        )
    code = "import torch\n" + colab.bootstrap("10_scaling_up.ipynb")  # the block alone: the rest is tested above
    out = run_python(env, tmp, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(f"installed labsupport {colab.VERSION} ({colab.TAG}); torch kept at ")
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


def test_the_setup_cell_starts_with_the_notebooks_imports_and_a_short_block():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        source = colab.setup_cell(nbformat.read(path, as_version=4)).source
        assert source.startswith(("import ", "from ")), path.name
        block = colab.bootstrap(path.name)
        assert block in source and "SystemExit" not in source
        assert len(block.splitlines()) <= (16 if path.name in colab.BESIDE else 11)
        before = source[: source.index(block)].strip().splitlines()
        assert all(re.match(r"(import |from \S+ import )", line) for line in before if line), path.name


def test_apply_moves_an_older_block_below_the_imports_and_is_idempotent():
    old = f"{colab.OLD_BEGIN}\ntry:\n    import labsupport as lab\nexcept ModuleNotFoundError:\n    pass\n{colab.OLD_END}\n"
    source = old + "import torch\n\nlab.seed_everything(0)"
    new = colab.with_bootstrap(source)
    assert new == f"import torch\n\n{colab.BOOTSTRAP}\n\nlab.seed_everything(0)"
    assert colab.with_bootstrap(new) == new


def test_every_notebook_carries_the_current_block():
    notebooks = sorted(str(p) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert colab.main(["check", *notebooks]) == 0


def test_the_repository_is_one_setting():
    assert colab.INSTALL == f"labsupport @ git+https://github.com/{colab.REPO}@{colab.TAG}"
    readme = (ROOT / "README.md").read_text()
    fork = readme.replace(colab.REPO, "a-teacher/her-fork")
    assert colab.with_links(fork) == readme  # apply rewrites every mention: the links and the pip line


def test_colab_links_point_at_the_student_edition():
    url = colab.colab_url("01_tensors.ipynb")
    assert url.endswith(f"/blob/{colab.SITE_BRANCH}/student/01_tensors.ipynb")
    readme = (ROOT / "README.md").read_text()
    assert url in readme and "/notebooks/01_tensors.ipynb" not in readme.split("Open in Colab")[-1][:2000]
    assert f"\n{colab.STOP}\n" in readme  # what a student sees when the install fails, as it reads

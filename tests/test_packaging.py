"""Set-up files agree with each other: pyproject.toml, environment.yml, constraints.txt, Makefile."""

import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# conda-forge names that differ from PyPI names
CONDA_NAMES = {"torch": "pytorch"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower()


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def runtime_dependencies() -> list[str]:
    return [_name(r) for r in PROJECT["dependencies"]]


def all_dependencies() -> list[str]:
    extras = [_name(r) for group in PROJECT["optional-dependencies"].values() for r in group]
    return runtime_dependencies() + sorted(set(extras))


def test_runtime_needs_no_jupyter_and_no_test_tools():
    # Colab and JupyterHub bring their own Jupyter; `pip install .` must not pull one in.
    runtime = set(runtime_dependencies())
    assert runtime == {"torch", "torchvision", "numpy", "matplotlib", "scikit-learn", "tqdm", "tensorboard"}
    assert {"jupyterlab", "ipykernel", "ipywidgets"} <= {_name(r) for r in PROJECT["optional-dependencies"]["lab"]}
    assert {"nbval", "pytest", "pytest-xdist", "nbclient", "nbformat"} <= {
        _name(r) for r in PROJECT["optional-dependencies"]["test"]
    }
    assert "'.[lab,test]'" in (ROOT / "Makefile").read_text()


def test_declared_floors_match_the_lab_warning_and_the_oldest_pins():
    import labsupport.device as device

    floors = {_name(r): r.split(">=")[1] for r in PROJECT["dependencies"] if _name(r) in ("torch", "torchvision")}
    assert floors == {name: ".".join(map(str, v)) for name, v in device.MIN_VERSIONS.items()}
    oldest = (ROOT / "constraints-oldest.txt").read_text()
    for name, floor in floors.items():
        assert re.search(rf"^{name}=={re.escape(floor)}(\.0)?$", oldest, re.M), (
            f"{name} floor not pinned in constraints-oldest.txt"
        )


def test_environment_yml_names_every_runtime_dependency():
    text = (ROOT / "environment.yml").read_text()
    conda = {
        _name(line.strip()[2:])
        for line in text.splitlines()
        if line.strip().startswith("- ") and not line.strip().startswith("- -e")
    }
    missing = [d for d in all_dependencies() if CONDA_NAMES.get(d, d) not in conda]
    assert not missing, f"environment.yml lacks {missing}"
    assert "conda-forge" in text and "-e ." in text


def test_environment_yml_uses_conda_forge_only():
    text = (ROOT / "environment.yml").read_text()
    channels = re.search(r"channels:\n((?:\s+- .*\n)+)", text).group(1)
    assert [c.strip()[2:] for c in channels.splitlines()] == ["conda-forge", "nodefaults"]


def test_constraints_pin_every_runtime_dependency_and_a_matching_torch_pair():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version.strip()
    for dep in runtime_dependencies():
        assert dep in pins, f"constraints.txt does not pin {dep}"
    assert "+cpu" not in pins["torch"], "a CPU-only torch wheel breaks torchvision from the registry"


def test_installed_versions_are_the_pinned_ones():
    import os

    import torch
    import torchvision

    pins_file = ROOT / os.environ.get("LAB_PINS", "constraints.txt")  # make test-oldest: constraints-oldest.txt
    lines = pins_file.read_text().splitlines()
    pins = dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    assert torch.__version__.split("+")[0] == pins["torch"]
    assert torchvision.__version__.split("+")[0] == pins["torchvision"]


def test_makefile_targets_and_localhost_only():
    text = (ROOT / "Makefile").read_text()
    for target in ("lab", "test", "tensorboard", "regenerate"):
        assert re.search(rf"^{target}:", text, re.M), f"Makefile lacks `{target}`"
    assert "--ip=127.0.0.1" in text and "--host 127.0.0.1" in text
    assert "0.0.0.0" not in text


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci and "make test" in readme and "make lab" in readme


def test_make_is_idempotent_when_nothing_changed():
    # The venv exists (we are running in it): a second install must be a no-op.
    out = subprocess.run(["make", "-n", "install"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0
    assert "pip install" not in out.stdout, f"make would reinstall:\n{out.stdout}"

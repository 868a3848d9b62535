"""TensorBoard end to end.

1. Each training notebook's runs are read back with TensorBoard's own reader
   (tests/tb_events.py): one folder per run named as the notebook named it, every tag
   under the notebook's name, steps strictly increasing, loss falling, hyper-parameters
   in the HParams data only. This module executes each notebook up to its last logging
   cell (or a short driver of its logging code, SHORT_RUNS) in this Python (no kernel).
2. A real TensorBoard server is started on a free loopback port over the runs of
   the training notebooks 02, 03, 05, 06 and 07 (SERVED); its HTTP API must list the
   runs, the scalar tags and one scalar series equal to what the reader saw, the
   graph and the hyper-parameters; no chart mixes runs of different lengths (06's
   sweep has charts of its own), no run has steps out of order, and the HParams
   trials have short distinct names, with the metric columns notebook 06 names.
3. Headless Chromium opens what a student opens first and saves screenshots under
   build/ (tb-scalars.png: Time Series over all five notebooks; tb-scalars-06_optim.png
   and tb-scalars-07_data_loading.png: one notebook at the inline cell's address;
   tb-hparams.png), and reads the page: the sections present, the charts first in
   02's section, no smoothing at the inline address (skipped without Chromium, failed
   under ``CI=true``: tests/browser.py).
The writer, the hint line and the Makefile's targets: tests/test_tensorboard_tools.py (a module
of its own, so that another test worker takes it while this one runs notebooks and a browser).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser import chromium_or_skip
from tb_events import read_histograms, read_hparams, read_scalars, read_tags
from tb_server import TensorBoardServer, get_json, serving

import labsupport as lab
from tools.runner import run_in_process

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SCREENSHOTS = ROOT / "build"  # look at them: build/tb-*.png

# What each training notebook must log (docs/tensorboard.md has the same table).
# "runs": run folders' names it must have; "loss": the scalar
# tag that must fall (tags as the notebook writes them; on disk they start with "<notebook>/"); "scalars"/"histograms": tags every run has; "graph": add_graph
# was called; "hparams": every run records hyper-parameters, and there are >= 2 runs.
LECTURE_NET = {
    "loss": "loss",
    "scalars": {"loss", "lr", "loss_log10", "lr_log10"},  # log10=("loss", "lr")
    "histograms": {"w1", "w2", "w1.grad", "w2.grad"},  # tags after loss and lr: Time Series opens on the curves
}
EXPECTED: dict[str, dict] = {
    "02_manual_backprop": {"runs": {"manual-sgd"}, **LECTURE_NET},
    "03_autograd": {"runs": {"autograd-sgd"}, **LECTURE_NET},
    "05_nn_module": {"runs": {"sequential-sgd"}, "loss": "loss", "scalars": {"loss"}, "graph": True},
    "06_optim": {
        "runs": {"sgd", "adam-lr0.01-steplr", "sweep/lr0.1-sgd", "sweep/lr0.01-adam"},
        "loss": "loss",
        "hparams": True,
        "scalars": {"loss", "lr"},
    },
    "07_data_loading": {
        "runs": {"digits-cnn"},
        "loss": "loss/train",
        "scalars": {"loss/train", "lr", "accuracy/train", "accuracy/val", "loss/val"}
        | {"loss/train_log10", "loss/val_log10", "lr_log10"},
    },
    "08_pretrained_models": {
        "runs": {"scratch", "feature-extraction", "fine-tuning"},
        "loss": "loss/train",
        "scalars": {"loss/train", "accuracy/val", "lr/group0"},
    },
    "10_scaling_up": {"runs": {"fp32", "mixed-precision"}, "loss": "loss/train", "scalars": {"loss/train", "lr"}},
}
# The cheapest honest way to get each notebook's logs. By default the notebook itself
# runs from the top to its %tensorboard cell (a few seconds each). Notebooks whose
# training part takes longer run their setup cell and the cells that define their
# logging code (found by these markers), then a short driver of ours calls that code.
SHORT_RUNS: dict[str, tuple[tuple[str, ...], str]] = {
    "06_optim": (
        ("def make_model(", "def run("),
        """\
run("sgd", lambda p: torch.optim.SGD(p, lr=1e-1), steps=40)
run("adam-lr0.01-steplr", lambda p: torch.optim.Adam(p, lr=1e-2), steps=40,
    make_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 10, 0.5))
run("sweep/lr0.1-sgd", lambda p: torch.optim.SGD(p, lr=1e-1), steps=20)  # named as the sweep's cell does
run("sweep/lr0.01-adam", lambda p: torch.optim.Adam(p, lr=1e-2), steps=20)""",
    ),
    "07_data_loading": (
        ("def evaluate(", "def train("),
        """\
lab.seed_everything(0)
train_loader, val_loader = lab.digits_loaders(64)
model = lab.DigitsCNN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=2 * len(train_loader))
with lab.tb_writer("07_data_loading", "digits-cnn", log10=("loss", "lr")) as writer:  # as its training cell
    train(model, train_loader, val_loader, optimizer, scheduler, 2, writer)""",
    ),
}
# Notebooks whose logging part needs nothing of their first sections: their setup cell runs, then
# the cells from the one holding this marker down to the %tensorboard cell (08's model zoo of
# AlexNet, VGG-16 and ResNet-101 is built for its shapes and FLOPs only; its training starts here).
STARTS: dict[str, str] = {"08_pretrained_models": "from torchvision.models import ResNet18_Weights"}
# A cell that writes logs (for a notebook without a %tensorboard cell).
LOGGING_CELL = re.compile(r"\bwriter\b|tb_writer|make_writer|add_hparams|log_hparams|add_graph")


# ---------------------------------------------------------------- executing notebooks


def _skipped(cell) -> bool:
    return cell.cell_type == "code" and "nbval-skip" in cell.get("metadata", {}).get("tags", [])


def logging_cells(path: Path) -> list[str]:
    """The sources of the code cells that produce ``path``'s TensorBoard logs: from
    the top (for a notebook in STARTS, its setup cell and then from the marked cell) to the
    ``%tensorboard`` cell that ends its TensorBoard part (or, without one, to its last cell
    that writes logs), leaving out NBVAL_SKIP cells; for a notebook in SHORT_RUNS, its setup
    cell, its logging code and our driver."""
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    if path.stem in SHORT_RUNS:
        markers, driver = SHORT_RUNS[path.stem]
        picked = [code[0]]  # the setup cell: imports, seed, device
        for marker in markers:
            found = [c for c in code if marker in c.source]
            assert len(found) == 1, f"{path.name}: expected one code cell with {marker!r}, found {len(found)}"
            picked += [c for c in found if c not in picked]
        return [c.source for c in picked] + [driver]
    ends = [i for i, c in enumerate(code) if _skipped(c) and "%tensorboard" in c.source] or [
        i for i, c in enumerate(code) if not _skipped(c) and LOGGING_CELL.search(c.source)
    ]
    assert ends, f"{path.name} has no cell that logs to TensorBoard"
    begin = 0
    if path.stem in STARTS:
        found = [i for i, c in enumerate(code) if STARTS[path.stem] in c.source]
        assert len(found) == 1, f"{path.name}: expected one code cell with {STARTS[path.stem]!r}, found {len(found)}"
        begin = found[0]
    picked = ([code[0]] if begin else []) + code[begin : ends[-1] + 1]
    return [c.source for c in picked if not _skipped(c)]


def execute_logging_cells(paths: list[Path], timeout: int = 300) -> None:
    """Run each notebook's :func:`logging_cells` in turn, in this Python (tools.runner's
    ``run_in_process``: what is tested here is the logs, not a kernel; no kernel start, no second
    import of torch), in notebooks/, each notebook in a fresh namespace; its setup cell seeds again."""
    for path in paths:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in logging_cells(path)])
        run_in_process(nb, NOTEBOOKS, timeout=timeout)
        for index, cell in enumerate(nb.cells):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if errors:
                raise AssertionError(
                    f"executing {path.name} failed in its logging cell {index}: {errors[0].ename}: {errors[0].evalue}"
                )


@pytest.fixture(scope="module")
def notebook_runs(tmp_path_factory):
    """``runs(stem)``: a runs folder holding notebooks/<stem>.ipynb's runs: the notebook's
    logging cells run here (see SHORT_RUNS), into a folder of this module's."""
    own = tmp_path_factory.mktemp("runs")

    def runs(stem: str) -> Path:
        if not (NOTEBOOKS / f"{stem}.ipynb").is_file():
            pytest.skip(f"notebooks/{stem}.ipynb does not exist yet")
        if not (own / stem).is_dir():
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("LAB_RUNS_DIR", str(own))  # read by lab.tb_writer when it opens a run
                execute_logging_cells([NOTEBOOKS / f"{stem}.ipynb"])
        return own

    return runs


def _runs_of(root: Path, stem: str) -> list[Path]:
    """The run folders of ``stem``: ``<stem>/<run>``, and ``<stem>/<group>/<run>`` in a group."""
    folder = root / stem
    runs = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.is_dir() and not entry.name.startswith("."):
            group = [p for p in sorted(entry.iterdir()) if p.is_dir() and not p.name.startswith(".")]
            runs += group if group and not any("tfevents" in p.name for p in entry.iterdir()) else [entry]
    return runs


def _run_name(run: Path, stem: str) -> str:
    """``sgd``, or ``sweep/lr0.1-sgd`` for a run in a group."""
    return run.relative_to(run.parents[1] if run.parent.name != stem else run.parent).as_posix()


def _scalars(run: Path, stem: str) -> dict[str, list[tuple[int, float]]]:
    """``read_scalars`` for a run in a group too: tags without ``<stem>/<group>/``."""
    if run.parent.name == stem:
        return read_scalars(run)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    prefix = f"{stem}/{run.parent.name}/"
    tags = acc.Tags()["scalars"]
    assert all(t.startswith(prefix) for t in tags), f"{run}: tags {tags} not all under its group's {prefix!r}"
    return {t[len(prefix) :]: [(e.step, float(e.value)) for e in acc.Scalars(t)] for t in tags}


def _assert_strictly_increasing(steps: list[int], what: str) -> None:
    bad = [(a, b) for a, b in zip(steps, steps[1:]) if b <= a]
    assert not bad, f"{what}: steps not strictly increasing, e.g. {bad[0][0]} then {bad[0][1]}"


def _first_last_tenth(values: list[float]) -> tuple[float, float]:
    k = max(1, len(values) // 10)
    return sum(values[:k]) / k, sum(values[-k:]) / k


# ------------------------------------------------ 1. event files, TensorBoard's reader


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_notebook_logs_read_back(notebook_runs, stem):
    runs_root = notebook_runs(stem)
    spec = EXPECTED[stem]
    runs = _runs_of(runs_root, stem)
    assert runs, f"{stem} wrote no run under runs/{stem}/"
    if "runs" in spec:
        names = {_run_name(r, stem) for r in runs}
        assert spec["runs"] <= names, f"{stem}: expected runs {sorted(spec['runs'])} among {sorted(names)}"
    if spec.get("hparams"):
        assert len(runs) >= 2, f"{stem} should compare >= 2 runs, found {len(runs)}"
    for run in runs:
        where = f"{stem}/{_run_name(run, stem)}"
        # the named runs must train well; others may diverge on purpose (06's sgd-lr2, before clipping)
        trained = _run_name(run, stem) in spec.get("runs", {_run_name(run, stem)})
        assert [p for p in run.iterdir() if p.is_dir()] == [], f"{where}: a sub-folder (a second run) inside"
        scalars = _scalars(run, stem)  # asserts every tag starts with "<stem>/" (and its group)
        assert not [t for t in scalars if t.startswith("hparam")], f"{where}: hparams copied into charts"
        missing = set(spec.get("scalars", ())) - set(scalars)
        assert not missing, f"{where}: scalar tags {sorted(missing)} missing (has {sorted(scalars)})"
        for tag, series in scalars.items():
            _assert_strictly_increasing([s for s, _ in series], f"{where} scalar {tag!r}")
            assert not trained or all(math.isfinite(v) for _, v in series), f"{where} scalar {tag!r} has NaN/inf"
            if tag.endswith("_log10"):  # the writer's log10 of the tag it names, at the same steps
                plain = scalars[tag.removesuffix("_log10")]
                assert [s for s, _ in series] == [s for s, v in plain if v > 0], f"{where} {tag}: other steps"
                logs = [math.log10(v) for _, v in plain if v > 0]
                assert all(math.isclose(a, b, abs_tol=1e-5) for (_, a), b in zip(series, logs)), f"{where} {tag}"
        if "loss" in spec and trained:
            losses = [v for _, v in scalars[spec["loss"]]]
            assert len(losses) >= 10, f"{where}: only {len(losses)} loss points"
            first, last = _first_last_tenth(losses)
            assert last < first, f"{where}: loss did not fall (first tenth {first:.3g}, last {last:.3g})"
        histograms = read_histograms(run)
        missing = set(spec.get("histograms", ())) - set(histograms)
        assert not missing, f"{where}: histogram tags {sorted(missing)} missing (has {sorted(histograms)})"
        for tag, series in histograms.items():
            _assert_strictly_increasing([s for s, _ in series], f"{where} histogram {tag!r}")
        if spec.get("graph"):
            assert read_tags(run)["graph"], f"{where}: no model graph (add_graph) logged"
        if spec.get("hparams"):
            assert read_hparams(run), f"{where}: no hyper-parameters recorded"


@pytest.mark.parametrize("stem", ["02_manual_backprop", "03_autograd"])
def test_lecture_net_histograms_show_gradients_shrinking(notebook_runs, stem):
    runs = _runs_of(notebook_runs(stem), stem)
    assert len(runs) == 1, f"expected one run of {stem}, found {[r.name for r in runs]}"
    histograms = read_histograms(runs[0])
    steps = [s for s, _ in histograms["w1.grad"]]
    assert steps[0] == 0 and len(steps) >= 5, f"w1.grad logged at steps {steps}"
    for name, numel in (("w1", 1000 * 100), ("w2", 100 * 10)):
        for tag in (name, f"{name}.grad"):
            assert all(h.num == numel for _, h in histograms[tag]), (
                f"{tag}: every histogram should count all {numel} entries"
            )
        grads = [h for _, h in histograms[f"{name}.grad"]]
        rms_first, rms_last = (math.sqrt(h.sum_squares / h.num) for h in (grads[0], grads[-1]))
        assert rms_last < 1e-3 * rms_first, (
            f"{name}.grad: RMS should shrink > 1000x as the loss falls, got {rms_first:.3g} -> {rms_last:.3g}"
        )
    scalars = read_scalars(runs[0])
    loss = [v for _, v in scalars["loss"]]
    assert len(loss) == 500 and loss[-1] < 1e-3 * loss[0]
    # on a linear axis: loss_log10 spans a few units, lr_log10 reads -6 (the value table prints 1e-6 as "0")
    log_loss = [v for _, v in scalars["loss_log10"]]
    assert 7 < log_loss[0] < 8 and log_loss[-1] < log_loss[0] - 3
    assert {round(v, 6) for _, v in scalars["lr_log10"]} == {-6.0}


# ------------------------------------------------------------- 2. a live TensorBoard

# What the live server is shown: the training notebooks a student meets first (issue 27
# opened TensorBoard over these five); between them they log every kind TensorBoard
# serves (scalars, histograms, a graph, hparams). The read-back above covers 08 and 10.
SERVED = ("02_manual_backprop", "03_autograd", "05_nn_module", "06_optim", "07_data_loading")


@pytest.fixture(scope="module")
def runs_root(notebook_runs, tmp_path_factory):
    """One runs folder with the runs of SERVED."""
    root = tmp_path_factory.mktemp("served")
    for stem in SERVED:
        shutil.copytree(notebook_runs(stem) / stem, root / stem)
    return root


@pytest.fixture(scope="module")
def tensorboard(runs_root, tmp_path_factory):
    with serving(runs_root, tmp_path_factory.mktemp("tb")) as server:
        yield server


def test_server_lists_runs_tags_and_a_scalar_series(tensorboard, runs_root):
    run = _runs_of(runs_root, "02_manual_backprop")[0]
    name = run.relative_to(runs_root).as_posix()
    assert name in tensorboard.runs

    env = get_json(f"{tensorboard.url}/data/environment")
    assert env["debug"]["flags"]["host"] == "127.0.0.1" and not env["debug"]["flags"]["bind_all"]

    scalar_tags = get_json(f"{tensorboard.url}/data/plugin/scalars/tags")
    stem = "02_manual_backprop"
    assert {f"{stem}/loss", f"{stem}/lr"} <= set(scalar_tags.get(name, {})), f"{name}: {scalar_tags.get(name)}"
    histogram_tags = get_json(f"{tensorboard.url}/data/plugin/histograms/tags")
    assert {f"{stem}/w1", f"{stem}/w1.grad"} <= set(histogram_tags.get(name, {}))
    # every chart is in its notebook's section; no one-point hparam/* chart anywhere
    for served, tags in scalar_tags.items():
        assert all(t.startswith(served.split("/")[0] + "/") and "hparam" not in t for t in tags), (served, tags)

    query = urllib.parse.urlencode({"run": name, "tag": f"{stem}/loss"})
    series = get_json(f"{tensorboard.url}/data/plugin/scalars/scalars?{query}")  # [[wall_time, step, value]]
    reader = read_scalars(run)["loss"]
    assert [step for _, step, _ in series] == [step for step, _ in reader]
    assert all(math.isclose(value, ref, rel_tol=1e-6) for (_, _, value), (_, ref) in zip(series, reader))
    assert series[-1][2] < 1e-3 * series[0][2], "the served loss series should fall > 1000x"


def test_server_serves_every_kind_of_log(tensorboard, runs_root):
    for stem in SERVED:
        served = [r for r in tensorboard.runs if r.startswith(f"{stem}/")]
        assert served, f"TensorBoard lists no run of {stem}"
        if EXPECTED[stem].get("graph"):
            info = get_json(f"{tensorboard.url}/data/plugin/graphs/info")
            assert any(info.get(r, {}).get("run_graph") for r in served), f"no graph served for {stem}"
        if EXPECTED[stem].get("hparams"):
            body = json.dumps({"experimentName": ""}).encode()
            exp = get_json(f"{tensorboard.url}/data/plugin/hparams/experiment", data=body)
            served_names = {h["name"] for h in exp.get("hparamInfos", [])}
            for run in _runs_of(runs_root, stem):
                logged = set(read_hparams(run))
                assert logged and logged <= served_names, (
                    f"the HParams view serves {sorted(served_names)}; {run.name} logged {sorted(logged)}"
                )


def _served_series(server, run: str, tag: str) -> list[tuple[int, float]]:
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    return [(step, value) for _, step, value in get_json(f"{server.url}/data/plugin/scalars/scalars?{query}")]


def test_no_chart_mixes_runs_of_different_lengths_and_no_run_mixes_steps(tensorboard):
    # 06's 50-step sweep beside its 500-step runs in one `loss` chart was unreadable: a chart
    # (one tag) holds runs that cover the same steps, and each run's steps go strictly up
    # (two runs written into one folder would not)
    tags = get_json(f"{tensorboard.url}/data/plugin/scalars/tags")
    charts: dict[str, dict[str, tuple[int, int, int]]] = {}
    for run, run_tags in tags.items():
        for tag in run_tags:
            steps = [step for step, _ in _served_series(tensorboard, run, tag)]
            _assert_strictly_increasing(steps, f"served {run} {tag}")
            charts.setdefault(tag, {})[run] = (steps[0], steps[-1], len(steps))
    mixed = {tag: spans for tag, spans in charts.items() if len(set(spans.values())) > 1}
    assert not mixed, f"charts holding runs of different lengths (first step, last, count): {mixed}"
    sweep = {run for run in tags if run.startswith("06_optim/sweep/")}
    assert len(sweep) >= 2, f"no sweep group served: {sorted(tags)}"
    for run, run_tags in tags.items():
        in_group = all(t.startswith("06_optim/sweep/") for t in run_tags)
        assert in_group == (run in sweep), f"{run}: a sweep run charts under sweep/ only, a full run never: {run_tags}"
    assert {"06_optim/loss", "06_optim/sweep/loss"} <= set(charts)


def _hparams_post(server, route: str, body: dict) -> dict:
    return get_json(f"{server.url}/data/plugin/hparams/{route}", data=json.dumps(body).encode())


def test_hparams_trials_are_short_distinct_and_the_notebook_names_their_columns(tensorboard):
    everything = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]
    request = {"experimentName": "", "allowedStatuses": everything, "colParams": [], "startIndex": 0, "sliceSize": 1000}
    groups = _hparams_post(tensorboard, "session_groups", request)["sessionGroups"]
    runs = {s["name"] for g in groups for s in g["sessions"]}
    assert runs == {r for r in tensorboard.runs if r.startswith("06_optim/")}, "a run without its HParams row"
    trials = [g["name"] for g in groups]
    assert all(len(g["sessions"]) == 1 for g in groups), f"two runs merged into one trial: {trials}"
    # the Trial ID column is 10em wide: about 12 characters show, and they must tell the rows apart
    assert len({t[:12] for t in trials}) == len(trials), f"trial names alike in what the table shows: {trials}"
    assert "sgd (06)" in trials and "lr0.1-sgd (06/sweep)" in trials, trials
    assert not [t for t in trials if t.startswith("06_optim")], trials
    # notebook 06 names the metric columns that the table has (each curve's last value)
    columns = {
        m["name"]["tag"] for m in _hparams_post(tensorboard, "experiment", {"experimentName": ""})["metricInfos"]
    }
    assert columns == {"06_optim/loss", "06_optim/lr", "06_optim/sweep/loss", "06_optim/sweep/lr"}, columns
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / "06_optim.ipynb", as_version=4).cells)
    named = set(re.findall(r"`(06_optim/[\w/]+|hparam/\w+)`", text))
    assert named <= columns, f"06 names {sorted(named - columns)}, which the HParams table has no column for"
    assert {"06_optim/loss", "06_optim/sweep/loss"} <= named, f"06 should name the columns to sort by: {named}"


def test_waiting_for_a_server_that_never_answers_fails_clearly(tmp_path):
    silent = TensorBoardServer(
        tmp_path,
        tmp_path / "log",  # a process that never listens
        command=[sys.executable, "-c", "import time; time.sleep(60)"],
    )
    try:
        with pytest.raises(pytest.fail.Exception, match=r"did not come up at http://127\.0\.0\.1:\d+ within 1 s"):
            silent.wait_for_runs({"02_manual_backprop/x"}, timeout=1)
    finally:
        silent.stop()
    crashed = TensorBoardServer(
        tmp_path, tmp_path / "log2", command=[sys.executable, "-c", "print('bad flag'); raise SystemExit(3)"]
    )
    try:
        with pytest.raises(pytest.fail.Exception, match=r"(?s)exited with code 3.*bad flag"):
            crashed.wait_for_runs({"02_manual_backprop/x"}, timeout=30)
    finally:
        crashed.stop()


# ---------------------------------------------------- 3. what a browser shows first

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--virtual-time-budget=20000",
]
# Added to every address for the headless browser only: without WebGL there, Time Series
# draws no line unless told to use SVG; the light theme whatever the machine prefers.
HEADLESS = "darkMode=false&forceSVG=true"


def _chromium(url: str, profile: Path, size: str, screenshot: Path | None = None) -> str:
    """Open ``url`` in a fresh headless Chromium (a new profile: a first open, no saved
    settings) and return the page's DOM; with ``screenshot``, the same run saves it too."""
    chromium = chromium_or_skip()  # fails instead under CI=true (tests/browser.py)
    shot = [f"--screenshot={screenshot}"] if screenshot else []
    command = [
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={size}",
        *shot,
        "--dump-dom",
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert "<html" in result.stdout, f"no page (rc {result.returncode}): {result.stderr[-2000:]}"
    if screenshot is not None:
        assert screenshot.is_file() and screenshot.stat().st_size > 20_000, (
            f"no screenshot (rc {result.returncode}): {result.stderr[-2000:]}"
        )
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return result.stdout


def _shoot(url: str, tmp_path: Path, name: str, size: str) -> str:
    """Save build/<name>.png of ``url`` (look at it) and return the DOM of the same first open."""
    SCREENSHOTS.mkdir(exist_ok=True)
    return _chromium(url, tmp_path / f"{name}-profile", size, SCREENSHOTS / f"{name}.png")


_TIME_SERIES = re.compile(
    r'class="group-title" title="(?P<group>[^"]+)"'
    r'|data-mat-icon-name="expand_(?P<icon>less|more)_24px"'
    r"|<(?P<kind>scalar|histogram|image)-card-component"
    r'|title="(?P<title>[^"]+)"'
)
# a column of a card's value table: "Smoothed" is there only while smoothing is on
_SMOOTHED_COLUMN = re.compile(
    r'draggable="true"><tb-data-table-header[^>]*>(?:(?!</tb-data-table-header>).)*?>Smoothed<', re.S
)


def _sections(dom: str) -> list[dict]:
    """Time Series as shown: each section (a notebook) in order, open or not, with the
    cards drawn in it: ``[{"name", "open", "cards": [(kind, tag), ...]}]``."""
    sections, kind = [], None
    for m in _TIME_SERIES.finditer(dom[dom.find("<metrics-card-groups-component") :]):
        if m["group"]:
            sections.append({"name": m["group"], "open": None, "cards": []})
        elif m["icon"] and sections and sections[-1]["open"] is None:
            sections[-1]["open"] = m["icon"] == "less"
        elif m["kind"]:
            kind = m["kind"]
        elif m["title"] and kind and sections:
            sections[-1]["cards"].append((kind, m["title"]))
            kind = None
    return sections


def test_first_open_over_the_training_notebooks(tensorboard, tmp_path):
    # `make tensorboard` over 02, 03, 05, 06 and 07 opened on Time Series at the address it
    # prints: one section per notebook, and the first one starts with its curves (the
    # histograms, once first by name, come after them)
    dom = _shoot(f"{tensorboard.url}/?{HEADLESS}", tmp_path, "tb-scalars", "1400,2400")
    sections = _sections(dom)
    assert [s["name"] for s in sections] == list(SERVED), f"sections shown: {sections}"
    first = sections[0]
    assert first["open"], "the first section should open"
    kinds = [kind for kind, _ in first["cards"]]
    assert kinds[:4] == ["scalar"] * 4 and "histogram" in kinds, f"02 should open on its curves: {first['cards']}"
    assert kinds == sorted(kinds, key=lambda kind: kind != "scalar"), f"a histogram among the curves: {kinds}"
    assert [tag for _, tag in first["cards"][:4]] == [
        f"02_manual_backprop/{t}" for t in ("loss", "loss_log10", "lr", "lr_log10")
    ]
    # TensorBoard opens the first two sections only (its rule, not ours): docs/tensorboard.md
    # sends students to one notebook's view, which the next test opens
    assert [s["open"] for s in sections[:2]] == [True, True]
    # at a plain address smoothing is on (TensorBoard's default, 0.6): the value tables show a
    # Smoothed column, which the inline view's test below must not find
    assert _SMOOTHED_COLUMN.search(dom), "no Smoothed column at a plain address: the check below sees nothing"


def _inline_logdir(stem: str, runs_root: Path) -> Path:
    """The folder notebooks/<stem>.ipynb's %tensorboard cell serves when the lab logs into
    ``runs_root``: its line expanded as IPython expands a line magic's ``{...}``, then split
    as the magic splits it."""
    import shlex

    from IPython.utils.text import DollarFormatter

    code = [c.source for c in nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells if c.cell_type == "code"]
    lines = [line for source in code for line in source.splitlines() if line.startswith("%tensorboard ")]
    assert len(lines) == 1, lines
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAB_RUNS_DIR", str(runs_root))
        expanded = DollarFormatter().vformat(lines[0].removeprefix("%tensorboard "), args=[], kwargs={"lab": lab})
    arguments = shlex.split(expanded, comments=True, posix=True)
    return Path(arguments[arguments.index("--logdir") + 1])


@pytest.mark.parametrize("stem", ["06_optim", "07_data_loading"])
def test_a_notebooks_inline_view_opens_its_section_unsmoothed(runs_root, tmp_path, stem):
    # the notebook's %tensorboard cell serves the folder it logs into (runs/<stem>) and its frame
    # loads the address the lab sets (lab.tb.INLINE_URL): the notebook's one section, open, smoothing off
    logdir = _inline_logdir(stem, runs_root)
    assert logdir == runs_root / stem, logdir
    with serving(logdir, tmp_path) as server:
        url = lab.tb.INLINE_URL.replace("%PORT%", str(server.port)) + "&" + HEADLESS
        assert "smoothing=0" in url
        dom = _shoot(url, tmp_path, f"tb-scalars-{stem}", "1400,2800" if stem.startswith("07") else "1400,1300")
    sections = _sections(dom)
    assert [(s["name"], s["open"]) for s in sections] == [(stem, True)], sections
    charts = {tag for kind, tag in sections[0]["cards"] if kind == "scalar"}
    assert not _SMOOTHED_COLUMN.search(dom), "the value tables show a Smoothed column: smoothing is on"
    if stem == "06_optim":  # the sweep's 50-step runs apart from the 500-step runs
        assert {"06_optim/loss", "06_optim/lr", "06_optim/sweep/loss", "06_optim/sweep/lr"} <= charts, charts
    else:  # per-epoch curves beside per-step ones, and the learning rate readable as lr_log10
        assert {f"{stem}/{t}" for t in ("accuracy/val", "loss/val", "lr", "lr_log10", "loss/train_log10")} <= charts, (
            charts
        )


def test_hparams_screenshot(tensorboard, tmp_path):
    # one row per run of 06, named "sgd (06)", "lr0.1-sgd (06/sweep)"; hyper-parameter columns,
    # then the metric columns (each curve's last value). What the table holds is checked
    # through the API above: its page is shadow DOM, which --dump-dom does not show
    _chromium(
        f"{tensorboard.url}/?darkMode=false#hparams", tmp_path / "profile", "2400,900", SCREENSHOTS / "tb-hparams.png"
    )

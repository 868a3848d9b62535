"""The TensorBoard logs of notebooks 06 (optimizer runs) and 07 (the digits CNN), read back.

Self-contained: each test runs the notebook's own logging code (the cells that
define ``run`` in 06 and ``train`` in 07, taken from the .ipynb) for a few
steps into a temporary runs folder, then reads the event files with
TensorBoard's reader (``tb_events.read_scalars``, tags without the notebook prefix): the expected scalar tags are
there, steps strictly increase, and the logged loss falls.
"""

import math
import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from tb_events import read_scalars
from torch import nn
from tqdm.auto import tqdm

import labsupport as lab

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def notebook_code(name: str, *markers: str) -> list[str]:
    """The sources of the code cells of notebook ``name`` that contain each marker, in order."""
    cells = [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code"]
    found = []
    for marker in markers:
        matches = [src for src in cells if marker in src]
        assert len(matches) == 1, f"{name}: expected one code cell containing {marker!r}, found {len(matches)}"
        found.append(matches[0])
    return found


def strictly_increasing(steps):
    return all(b > a for a, b in zip(steps, steps[1:]))


def hparams_tags(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return set(acc.PluginTagToContent("hparams"))


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path))
    return tmp_path


def test_06_optimizer_runs_log_loss_lr_and_hparams(runs_dir):
    setup, run_cell = notebook_code("06_optim.ipynb", "def make_model(", "def run(")
    ns = {"torch": torch, "F": F, "nn": nn, "math": math, "lab": lab, "tqdm": tqdm, "device": torch.device("cpu")}
    exec(setup, ns)
    exec(run_cell, ns)
    losses = {
        "sgd": ns["run"]("sgd", lambda p: torch.optim.SGD(p, lr=1e-1), steps=40),
        "adam-steplr": ns["run"](
            "adam-steplr",
            lambda p: torch.optim.Adam(p, lr=1e-2),
            steps=40,
            make_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 10, 0.5),
        ),
    }
    folders = sorted((runs_dir / "06_optim").iterdir())
    assert [f.name for f in folders] == ["adam-steplr", "sgd"], "one folder per run"
    for name, folder in zip(["adam-steplr", "sgd"], folders):
        assert [p for p in folder.iterdir() if p.is_dir()] == [], "add_hparams must not make a sub-run"
        scalars = read_scalars(folder)
        assert set(scalars) == {"loss", "lr"}, sorted(scalars)  # hparams only in the HParams tab
        steps = [s for s, _ in scalars["loss"]]
        assert steps == list(range(40)) and strictly_increasing([s for s, _ in scalars["lr"]])
        values = [v for _, v in scalars["loss"]]
        assert values == pytest.approx(losses[name], rel=1e-6)  # what the notebook plots
        assert values[-1] < values[0] / 2 and sum(values[-5:]) < sum(values[:5])
        assert {"_hparams_/session_start_info", "_hparams_/session_end_info"} <= hparams_tags(folder)
    lrs = [v for _, v in read_scalars(folders[0])["lr"]]
    assert lrs[0] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(1e-2 * 0.5**3), "StepLR's staircase"


def test_07_digits_training_logs_loss_accuracy_and_lr(runs_dir):
    (loop_cell,) = notebook_code("07_data_loading.ipynb", "def train(")
    ns = {"torch": torch, "F": F, "lab": lab, "device": torch.device("cpu")}
    exec(loop_cell, ns)
    lab.seed_everything(0)
    train_loader, val_loader = lab.digits_loaders(64)
    model = lab.DigitsCNN()
    epochs = 2
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=epochs * len(train_loader))
    with lab.tb_writer("07_data_loading", "digits-cnn") as writer:
        history = ns["train"](model, train_loader, val_loader, optimizer, scheduler, epochs, writer)
        folder = Path(writer.log_dir)
    assert folder.parent == runs_dir / "07_data_loading"
    scalars = read_scalars(folder)
    assert {"loss/train", "lr", "accuracy/train", "accuracy/val", "loss/val"} <= set(scalars), sorted(scalars)
    for tag, series in scalars.items():
        assert strictly_increasing([s for s, _ in series]), f"{tag}: steps must increase"
    n = epochs * len(train_loader)
    assert len(scalars["loss/train"]) == len(scalars["lr"]) == n
    assert [s for s, _ in scalars["accuracy/val"]] == [len(train_loader) * (e + 1) for e in range(epochs)]
    loss = [v for _, v in scalars["loss/train"]]
    assert loss == pytest.approx(history["loss"], rel=1e-6)
    assert sum(loss[-10:]) < sum(loss[:10]) / 2, "the logged loss should fall"
    val_loss = [v for _, v in scalars["loss/val"]]
    assert val_loss[-1] < val_loss[0] and scalars["accuracy/val"][-1][1] > 0.8
    lrs = [v for _, v in scalars["lr"]]
    peak = lrs.index(max(lrs))
    assert 0 < peak < n - 1 and lrs[-1] < lrs[peak] / 100, "one cycle: the learning rate rises, then falls"


def test_lab_fit_is_the_fit_of_notebook_07():
    # CODE_GUIDE rule 2: labsupport.training.fit is a copy of 07's taught cell (only the
    # decorator that refuses bad arguments is added); the copy must not drift.
    import ast
    import inspect

    import labsupport.training as training

    (cell,) = notebook_code("07_data_loading.ipynb", "def fit(")
    taught = next(n for n in ast.parse(cell).body if isinstance(n, ast.FunctionDef) and n.name == "fit")
    copy = ast.parse(inspect.getsource(training)).body
    kept = next(n for n in copy if isinstance(n, ast.FunctionDef) and n.name == "fit")
    kept.decorator_list = []
    assert ast.dump(kept) == ast.dump(taught)


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (
            lambda: lab.fit(None, [], torch.optim.SGD([torch.zeros(1, requires_grad=True)], 0.1)),
            TypeError,
            "fit: model must be an nn.Module",
        ),
        (
            lambda: lab.fit(nn.Linear(2, 2), "data", torch.optim.SGD(nn.Linear(2, 2).parameters(), 0.1)),
            TypeError,
            "fit: loader must be a DataLoader",
        ),
        (lambda: lab.fit(nn.Linear(2, 2), [], "adam"), TypeError, "fit: optimizer must be a torch.optim optimizer"),
        (
            lambda: lab.fit(nn.Linear(2, 2), [], torch.optim.SGD(nn.Linear(2, 2).parameters(), 0.1), epochs=0),
            ValueError,
            "fit: epochs must be a whole number >= 1",
        ),
        (lambda: lab.evaluate(nn.Linear(2, 2), []), ValueError, "the loader gave no batches"),
        (lambda: lab.evaluate("model", []), TypeError, "evaluate: model must be an nn.Module"),
    ],
)
def test_training_helpers_answer_bad_arguments_in_one_sentence(call, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        call()

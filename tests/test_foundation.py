"""labsupport foundation: seeding, device, data, models, TensorBoard, plotting, timing, checkpoints."""
import os
import warnings

import numpy as np
import pytest
import torch

import labsupport as lab


def test_seed_everything_repeats_all_generators():
    import random
    lab.seed_everything(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    lab.seed_everything(3)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


@pytest.mark.parametrize("bad", [None, 1.5, "0", -1, 2**32, True])
def test_seed_everything_rejects_bad_seeds(bad):
    with pytest.raises((TypeError, ValueError), match="seed"):
        lab.seed_everything(bad)


def test_make_generator_and_seed_worker():
    assert torch.equal(torch.randperm(10, generator=lab.make_generator(5)),
                       torch.randperm(10, generator=lab.make_generator(5)))
    torch.manual_seed(11)
    lab.seed_worker(0)
    a = np.random.rand()
    torch.manual_seed(11)
    lab.seed_worker(0)
    assert np.random.rand() == a


def test_pick_device_order_and_override(monkeypatch):
    monkeypatch.delenv("LAB_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        expected = "mps"
    assert lab.pick_device().type == expected
    monkeypatch.setenv("LAB_DEVICE", "cpu")
    assert lab.pick_device() == torch.device("cpu")
    monkeypatch.setenv("LAB_DEVICE", "not-a-device")
    with pytest.raises(RuntimeError, match="not a device name"):
        lab.pick_device()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available; available: cpu"):
            lab.pick_device("cuda")


def test_environment_line_and_version_warnings(capsys):
    line = lab.environment_line("cpu")
    assert line.startswith(f"python ") and f"torch {torch.__version__.split('+')[0]}" in line
    assert "device cpu" in line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = lab.check_versions({"python": "3.12.0", "torch": "2.0.1"})
    assert len(problems) == 2
    assert "torch 2.0.1 is older than the minimum 2.1" in problems[0]
    assert "torchvision is not installed" in problems[1]
    assert len(caught) == 2
    assert lab.check_versions({"python": "3.10.0", "torch": "2.14.0+cu130", "torchvision": "0.29.2"}) == []
    assert lab.check_versions(dict(lab.MIN_VERSIONS)) == []  # the minimum itself is supported
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lab.print_environment("cpu")  # the installed versions are supported: no warning
    assert capsys.readouterr().out.startswith("python ")


def test_lecture_data_is_seeded_and_shaped():
    assert lab.LECTURE_SIZES == {"N": 64, "D_in": 1000, "H": 100, "D_out": 10}
    x, y = lab.lecture_data()
    assert x.shape == (64, 1000) and y.shape == (64, 10) and x.dtype == torch.float32
    x2, _ = lab.lecture_data()
    assert torch.equal(x, x2)
    assert not torch.equal(x, lab.lecture_data(seed=1)[0])
    w1, w2 = lab.lecture_weights(requires_grad=True, dtype=torch.float64)
    assert w1.shape == (1000, 100) and w2.shape == (100, 10) and w1.requires_grad and w1.dtype == torch.float64


def test_digits_dataset_is_real_offline_data():
    images, labels = lab.load_digits_tensors()
    assert images.shape == (1797, 1, 8, 8) and float(images.min()) == 0.0 and float(images.max()) == 1.0
    assert sorted(labels.unique().tolist()) == list(range(10))
    train, val = lab.DigitsDataset("train"), lab.DigitsDataset("val")
    assert len(train) + len(val) == 1797
    train_idx, val_idx = lab.digits_split(1797)
    assert not set(train_idx.tolist()) & set(val_idx.tolist())
    image, label = train[0]
    assert image.shape == (1, 8, 8) and isinstance(label, int)
    flipped = lab.DigitsDataset("train", transform=lambda t: t.flip(-1))
    assert torch.equal(flipped[0][0], image.flip(-1))
    with pytest.raises(ValueError, match="split must be"):
        lab.DigitsDataset("test")
    with pytest.raises(ValueError, match="val_fraction"):
        lab.digits_split(10, 1.5)


def test_models_shapes_and_parameter_counts():
    net = lab.TwoLayerNet(1000, 100, 10)
    assert net(torch.randn(64, 1000)).shape == (64, 10)
    assert lab.count_parameters(net) == 1000 * 100 + 100 + 100 * 10 + 10
    block = lab.ParallelBlock(4, 3)
    out = block(torch.randn(5, 4))
    assert out.shape == (5, 3) and (out >= 0).all()
    cnn = lab.DigitsCNN()
    assert cnn(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    for p in cnn.features.parameters():
        p.requires_grad_(False)
    assert lab.count_parameters(cnn, trainable_only=True) == lab.count_parameters(cnn.classifier)
    with pytest.raises(TypeError, match="nn.Module"):
        lab.count_parameters([1, 2])


def test_parallel_block_computes_relu_of_product():
    block = lab.ParallelBlock(3, 2)
    x = torch.randn(4, 3)
    assert torch.allclose(block(x), torch.relu(block.linear1(x) * block.linear2(x)))


def test_training_helpers_learn_digits():
    lab.seed_everything(0)
    train, val = lab.digits_loaders(64)
    model = lab.DigitsCNN()
    before = lab.evaluate(model, val)
    losses = lab.fit(model, train, torch.optim.Adam(model.parameters(), 1e-3), epochs=3)
    assert losses[-1] < losses[0] / 2
    assert lab.evaluate(model, val) > max(before, 0.8)
    with pytest.raises(ValueError, match="epochs"):
        lab.fit(model, train, torch.optim.SGD(model.parameters(), 0.1), epochs=0)


def test_run_dir_is_fresh_and_collision_free(tmp_path):
    a = lab.run_dir("02_manual_backprop", "manual", root=tmp_path)
    b = lab.run_dir("02_manual_backprop", "manual", root=tmp_path)
    assert a != b and a.is_dir() and b.is_dir() and a.parent == tmp_path / "02_manual_backprop"
    assert a.name.startswith("manual-")
    for bad in ("a b", "../up", "", "x/y"):
        with pytest.raises(ValueError, match="name"):
            lab.run_dir("nb", bad, root=tmp_path)


def test_lab_folder_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lab.lab_folder("runs", root=tmp_path / "r") == tmp_path / "r"
    monkeypatch.setenv("LAB_SOME_DIR", str(tmp_path / "env"))
    assert lab.lab_folder("runs", env="LAB_SOME_DIR") == tmp_path / "env"
    assert str(lab.lab_folder("runs")) == "runs"
    for name in ("labsupport", "notebooks", "student"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "student")
    assert str(lab.lab_folder("data")) == os.path.join("..", "data")


def test_runs_root_from_env_and_notebooks_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path / "elsewhere"))
    assert lab.run_dir("nb", "r").parent == tmp_path / "elsewhere" / "nb"
    monkeypatch.delenv("LAB_RUNS_DIR")
    (tmp_path / "labsupport").mkdir()
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    d = lab.run_dir("nb", "r")
    assert str(d).startswith(os.path.join("..", "runs", "nb")) and (tmp_path / "runs" / "nb").is_dir()


def test_make_writer_and_default_root(tmp_path, monkeypatch):
    monkeypatch.delenv("LAB_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    writer = lab.make_writer("05_nn_module", "graph")
    writer.close()
    assert writer.log_dir.startswith(lab.RUNS_DIR + "/05_nn_module/graph-")


def test_writer_logs_scalars_readable_back(tmp_path):
    with lab.tb_writer("06_optim", "sgd", root=tmp_path) as writer:
        for step, value in enumerate([3.0, 2.0, 1.0]):
            writer.add_scalar("loss", value, step)
        log_dir = writer.log_dir
    assert lab.read_scalars(log_dir) == {"loss": [(0, 3.0), (1, 2.0), (2, 1.0)]}
    with pytest.raises(FileNotFoundError):
        lab.read_scalars(tmp_path / "missing")


def test_writer_closes_on_crash_and_keeps_logged_steps(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with lab.tb_writer("07_data_loading", "crash", root=tmp_path) as writer:
            writer.add_scalar("loss", 1.0, 0)
            log_dir = writer.log_dir
            raise RuntimeError("boom")
    assert lab.read_scalars(log_dir)["loss"] == [(0, 1.0)]


def test_plot_losses_draws_each_curve():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = lab.plot_losses({"a": [3.0, 2.0, 1.0], "b": [torch.tensor(2.0), torch.tensor(1.0)]})
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert ax.get_yscale() == "log" and ax.get_legend() is not None
    ax = lab.plot_losses([1.0, 0.5], log_y=False)
    assert ax.get_yscale() == "linear" and list(ax.get_lines()[0].get_ydata()) == [1.0, 0.5]
    with pytest.raises(ValueError, match="empty"):
        lab.plot_losses({"a": []})
    plt.close("all")


def test_timing_helpers():
    with lab.Timer() as t:
        sum(range(1000))
    assert 0 <= t.seconds < 5
    assert lab.time_fn(lambda: torch.ones(10).sum(), min_run_time=0.01) > 0
    lab.sync("cpu")


def test_checkpoint_round_trip_and_atomicity(tmp_path, monkeypatch):
    path = tmp_path / "ck" / "model.pt"
    state = {"w": torch.arange(3.0), "step": 7}
    lab.save_checkpoint(state, path)
    loaded = lab.load_checkpoint(path)
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7

    # A crash in the middle of writing leaves the previous checkpoint intact and no temp file.
    def exploding_save(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt
    monkeypatch.setattr(torch, "save", exploding_save)
    with pytest.raises(KeyboardInterrupt):
        lab.save_checkpoint({"w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(lab.load_checkpoint(path)["w"], torch.arange(3.0))
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]


class Evil:
    """Not a tensor, dict or number: weights_only loading must refuse it."""


def test_load_checkpoint_refuses_pickled_code_and_missing_files(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"obj": Evil()}, path)
    with pytest.raises(Exception, match="(?i)weights_only|unsupported|global"):
        lab.load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        lab.load_checkpoint(tmp_path / "nope.pt")

"""labsupport foundation: seeding, device, data, models, TensorBoard, plotting, timing, checkpoints."""
import os
import warnings

import numpy as np
import pytest
import torch

import labsupport as lab


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

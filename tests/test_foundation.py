"""labsupport foundation: seeding, device, data, models, TensorBoard, plotting, timing, checkpoints."""

import pytest
import torch

import labsupport as lab


def test_lecture_data_is_seeded_and_shaped():
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
    from sklearn.datasets import load_digits  # read without scikit-learn's loader: the same digits

    bunch = load_digits()
    assert torch.equal(images, torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16)
    assert torch.equal(labels, torch.tensor(bunch.target)) and labels.dtype == torch.int64
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
    cnn = lab.DigitsCNN()
    assert cnn(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert lab.count_parameters(torch.nn.Linear(1000, 100)) == 1000 * 100 + 100
    for p in cnn.features.parameters():
        p.requires_grad_(False)
    assert lab.count_parameters(cnn, trainable_only=True) == lab.count_parameters(cnn.classifier)
    with pytest.raises(TypeError, match="nn.Module"):
        lab.count_parameters([1, 2])


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

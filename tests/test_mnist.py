"""labsupport.mnist: MNIST only from local files, or downloaded when explicitly allowed."""
import struct

import pytest
import torch
import torchvision

import labsupport as lab


@pytest.fixture
def no_downloads(monkeypatch):
    """Fail the test if anything tries to download."""
    calls = []

    def refuse(self, *args, **kwargs):
        calls.append(type(self).__name__)
        raise RuntimeError("network is off in this test")

    for name in ("MNIST", "FashionMNIST"):
        monkeypatch.setattr(getattr(torchvision.datasets, name), "download", refuse)
    return calls


def test_missing_and_downloads_off_says_so_in_one_line(tmp_path, monkeypatch, no_downloads):
    monkeypatch.delenv(lab.DOWNLOAD_ENV, raising=False)
    for name in ("MNIST", "FashionMNIST"):
        dataset, message = lab.load_mnist(name, root=tmp_path)
        assert dataset is None and no_downloads == []
        assert message == (f"{name} is not in {tmp_path} and downloads are off (set LAB_DOWNLOAD=1 to "
                           f"fetch it): continuing with the digits")
        assert "\n" not in message


def test_download_allowed_but_offline_continues(tmp_path, monkeypatch, no_downloads):
    monkeypatch.setenv(lab.DOWNLOAD_ENV, "1")
    dataset, message = lab.load_mnist(root=tmp_path)
    assert dataset is None and no_downloads == ["MNIST"]
    assert message.startswith("MNIST could not be downloaded (network is off in this test)")
    assert message.endswith(": continuing with the digits") and "\n" not in message


def _idx(path, magic, dims, data):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data))


def test_local_files_are_used_without_a_download(tmp_path, monkeypatch, no_downloads):
    monkeypatch.delenv(lab.DOWNLOAD_ENV, raising=False)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", 3), ("t10k", 2)):
        _idx(raw / f"{split}-images-idx3-ubyte", 0x803, (n, 28, 28), [i % 256 for i in range(n * 784)])
        _idx(raw / f"{split}-labels-idx1-ubyte", 0x801, (n,), list(range(n)))
    dataset, message = lab.load_mnist(root=tmp_path)
    assert no_downloads == [] and message == f"MNIST: 2 test images from {tmp_path}"
    image, label = dataset[1]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32 and label == 1
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert float(image[0, 0, 0]) == pytest.approx((784 % 256) / 255)


def test_data_dir_order(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "env"))
    assert lab.data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert lab.data_dir() == tmp_path / "env"
    monkeypatch.delenv("LAB_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    assert str(lab.data_dir()) == "data"


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="MNIST"):
        lab.load_mnist("CIFAR10")



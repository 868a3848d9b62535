"""labsupport.pretrained (offline-first weights loader, ImageNet top-k, digits
transfer data and pre-training) and the notebook 08 check. No network: the
weights file is a state dict made here and put in a temporary hub cache."""

import copy
import pathlib
import urllib.error

import pytest
import torch
from torch import nn
from torchvision.models import ResNet18_Weights, VGG16_Weights, resnet18

import labsupport as lab

W = ResNet18_Weights.IMAGENET1K_V1
FILE = "resnet18-f37072fd.pth"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty torch hub cache under tmp_path (via $TORCH_HOME); downloads off."""
    monkeypatch.setattr(torch.hub, "_hub_dir", None)  # follow $TORCH_HOME, as by default
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setenv("LAB_OFFLINE", "1")
    checkpoints = tmp_path / "hub" / "checkpoints"
    assert lab.weights_file("resnet18", W) == checkpoints / FILE
    return checkpoints


@pytest.fixture(scope="module")
def local_resnet18():
    """A ResNet-18 with random weights, built once for the module (its construction is the costly part): a test
    reads it or takes a copy, never changes it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return resnet18(weights=None)


def _place(checkpoints, obj, name=FILE):
    checkpoints.mkdir(parents=True, exist_ok=True)
    torch.save(obj, checkpoints / name)


# ---------------------------------------------------------------- the weights loader


def test_uncached_and_offline_prints_one_line_naming_file_and_folder(hub, capsys):
    assert lab.load_pretrained("resnet18", W) is None
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == 1
    assert FILE in lines[0] and f"in {hub}/ " in lines[0] and W.url in lines[0]
    assert lines[0].startswith("ResNet18_Weights.IMAGENET1K_V1 is not in the torch hub cache")
    assert "downloads are off" in lines[0] and "going on without it" in lines[0]


def test_failed_download_is_one_line_and_leaves_no_file(hub, capsys, monkeypatch):
    monkeypatch.delenv("LAB_OFFLINE")

    def no_network(request, *args, **kwargs):
        assert getattr(request, "full_url", request) == W.url
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "urlopen", no_network)
    assert lab.load_pretrained("resnet18", "IMAGENET1K_V1") is None
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    assert "cannot be downloaded ([Errno -2] Name or service not known)" in line and FILE in line
    assert list(hub.iterdir()) == []  # no half-written file left behind


def test_download_false_never_touches_the_network(hub, monkeypatch, capsys):
    monkeypatch.delenv("LAB_OFFLINE")
    monkeypatch.setattr(torch.hub, "urlopen", lambda *a, **k: pytest.fail("download=False must not download"))
    assert lab.load_pretrained("resnet18", W, download=False) is None
    assert "downloads are off" in capsys.readouterr().out


def test_cached_state_dict_is_loaded(hub, capsys, local_resnet18):
    reference = local_resnet18
    _place(hub, reference.state_dict())
    model = lab.load_pretrained("resnet18", W)
    assert capsys.readouterr().out == ""
    assert isinstance(model, nn.Module) and not model.training
    got, want = model.state_dict(), reference.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_hub_set_dir_is_honoured(tmp_path, monkeypatch, capsys, local_resnet18):
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    torch.hub.set_dir(str(tmp_path / "elsewhere"))  # undone by monkeypatch
    assert lab.weights_file("resnet18", "DEFAULT") == tmp_path / "elsewhere" / "checkpoints" / FILE
    reference = local_resnet18
    _place(tmp_path / "elsewhere" / "checkpoints", reference.state_dict())
    model = lab.load_pretrained("resnet18", "DEFAULT", download=False)
    assert torch.equal(model.fc.weight, reference.fc.weight)


@pytest.mark.parametrize(
    "content, why",
    [
        (b"not a checkpoint", "UnpicklingError"),
        ({"weight": torch.zeros(2)}, "RuntimeError"),
    ],
)
def test_a_bad_file_in_the_cache_is_reported_not_raised(hub, capsys, content, why):
    if isinstance(content, bytes):
        hub.mkdir(parents=True)
        (hub / FILE).write_bytes(content)
    else:
        _place(hub, content)
    assert lab.load_pretrained("resnet18", W) is None
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    assert f"{hub / FILE} is there but is not a valid ResNet18_Weights.IMAGENET1K_V1 file ({why})" in line
    assert "delete it" in line


def test_a_file_holding_code_is_refused(hub, capsys):
    # any pickled object other than tensors and containers would be code run by torch.load
    _place(hub, {"fc.weight": torch.zeros(1), "extra": pathlib.PurePosixPath("x")})
    assert lab.load_pretrained("resnet18", W) is None
    assert "(UnpicklingError)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "arch, weights, error, text",
    [
        ("resnet1", "IMAGENET1K_V1", ValueError, "torchvision has no model called 'resnet1'"),
        (
            "resnet18",
            "IMAGENET9K",
            ValueError,
            "'IMAGENET9K' are not weights for resnet18: choose one of IMAGENET1K_V1",
        ),
        ("resnet18", VGG16_Weights.IMAGENET1K_V1, ValueError, "are not weights for resnet18"),
        ("resnet18", None, ValueError, "are not weights for resnet18"),
        (resnet18, W, TypeError, "arch must be a torchvision model name"),
    ],
)
def test_bad_arguments_say_what_is_wrong(hub, arch, weights, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(")):
        lab.load_pretrained(arch, weights)


def test_a_download_with_the_wrong_hash_leaves_nothing(hub, capsys, monkeypatch):
    # torch.hub.download_url_to_file checks the sha256 prefix in the file name, as torchvision's are named
    monkeypatch.delenv("LAB_OFFLINE")
    src = hub.parent / "src.bin"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(b"pretend weights" * 1000)
    monkeypatch.setattr(type(W), "url", property(lambda self: src.as_uri()), raising=False)
    monkeypatch.setattr(lab.pretrained, "weights_file", lambda arch, w: hub / "resnet18-deadbeef.pth")
    assert lab.load_pretrained("resnet18", W) is None
    assert "cannot be downloaded (invalid hash value" in capsys.readouterr().out
    assert not (hub / "resnet18-deadbeef.pth").exists()


# ---------------------------------------------------------------- ImageNet inference


def test_grace_hopper_ships_with_matplotlib():
    image = lab.grace_hopper()
    assert image.mode == "RGB" and image.size == (512, 600)


def test_imagenet_topk_orders_and_names_the_classes(local_resnet18):
    model = copy.deepcopy(local_resnet18).eval()  # imagenet_topk may not change the shared one's mode
    top = lab.imagenet_topk(model, W, k=5)
    # independent reference: preprocess by hand with the same transform, then sort all classes
    batch = W.transforms()(lab.grace_hopper()).unsqueeze(0)
    with torch.no_grad():
        probs = model(batch).softmax(dim=1)[0]
    order = probs.argsort(descending=True)[:5]
    assert [name for name, _ in top] == [W.meta["categories"][i] for i in order]
    assert [p for _, p in top] == pytest.approx(probs[order].tolist(), rel=1e-5)
    assert all(a >= b for (_, a), (_, b) in zip(top, top[1:]))
    assert model.training is False


def test_imagenet_topk_rejects_bad_arguments():
    with pytest.raises(TypeError, match="nn.Module"):
        lab.imagenet_topk(None, W)
    with pytest.raises(ValueError, match="k must be between 1 and 1000"):
        lab.imagenet_topk(nn.Identity(), W, k=0)


# ---------------------------------------------------------------- transfer learning data and pre-training


def _rows(dataset):
    return {tuple(row.tolist()) for row in dataset.tensors[0].reshape(len(dataset), -1)}


def test_transfer_digits_splits_are_disjoint_and_balanced():
    data = lab.transfer_digits(per_class=4, seed=1)
    small = data["target_train"]
    assert len(small) == 40 and torch.bincount(small.tensors[1]).tolist() == [4] * 10
    assert (len(data["source"]), len(data["target_val"])) == (719, 359)
    # the 1797 digits images are all distinct, so equal rows would mean a shared image
    assert not _rows(small) & _rows(data["source"])
    assert not _rows(small) & _rows(data["target_val"])
    assert not _rows(data["source"]) & _rows(data["target_val"])
    again = lab.transfer_digits(per_class=4, seed=1)["target_train"]
    other = lab.transfer_digits(per_class=4, seed=2)["target_train"]
    assert torch.equal(again.tensors[0], small.tensors[0])
    assert not torch.equal(other.tensors[0], small.tensors[0])


@pytest.mark.parametrize("per_class", [0, -1, 2.5, True, 1000])
def test_transfer_digits_rejects_bad_sizes(per_class):
    with pytest.raises(ValueError, match="per_class"):
        lab.transfer_digits(per_class=per_class)


def test_pretraining_is_deterministic_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a = lab.pretrain_digits_cnn(epochs=1)
    b = lab.pretrain_digits_cnn(epochs=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    c = lab.pretrain_digits_cnn(epochs=1, seed=1)
    assert not torch.equal(a.features[0].weight, c.features[0].weight)


def test_pretrained_digits_cnn_is_good_on_held_out_digits():
    model = lab.pretrain_digits_cnn()
    assert not model.training
    val = torch.utils.data.DataLoader(lab.transfer_digits()["target_val"], batch_size=512)
    assert lab.evaluate(model, val) > 0.93


# ---------------------------------------------------------------- notebook 08's checks (moved)
# The checks of notebook 08 are tested in tests/test_checks_pretrained.py.

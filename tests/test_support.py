"""labsupport's small helpers: seeding, device, timing, checkpoints (bad arguments get one sentence)."""

import random
import warnings

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport import device as device_module


def test_seed_everything_repeats_all_generators():
    lab.seed_everything(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    lab.seed_everything(3)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
    assert torch.equal(
        torch.randperm(10, generator=lab.make_generator(5)), torch.randperm(10, generator=lab.make_generator(5))
    )


@pytest.mark.parametrize("bad", [None, 1.5, "0", -1, 2**32, True])
def test_seeds_that_are_not_whole_numbers_get_one_sentence(bad):
    for fn in (lab.seed_everything, lab.make_generator):
        with pytest.raises(ValueError, match="a seed must be a whole number"):
            fn(bad)


def test_pick_device_order_and_override(monkeypatch):
    monkeypatch.delenv("LAB_DEVICE", raising=False)
    assert lab.pick_device().type == ("cuda" if torch.cuda.is_available() else lab.pick_device().type)
    monkeypatch.setenv("LAB_DEVICE", "cpu")
    assert lab.pick_device() == torch.device("cpu")
    monkeypatch.setenv("LAB_DEVICE", "not-a-device")
    with pytest.raises(RuntimeError, match="not a device name"):
        lab.pick_device()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="not available; available: cpu"):
            lab.pick_device("cuda")


@pytest.mark.parametrize(
    "capability, dtype",
    [((7, 5), torch.float16), ((7, 0), torch.float16), ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)],
)
def test_amp_dtype_follows_compute_capability_not_is_bf16_supported(monkeypatch, capability, dtype):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # a T4 says True (emulation)
    assert lab.pick_amp_dtype(torch.device("cuda")) == dtype  # 7.x: fp16, so notebook 10 turns its GradScaler on
    assert lab.pick_amp_dtype("cpu") == torch.bfloat16


def test_environment_line_and_version_floor(capsys, monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lab.print_environment("cpu")  # the installed versions are inside the range: no warning
    line = capsys.readouterr().out
    assert line.startswith("python ") and f"torch {torch.__version__.split('+')[0]}" in line
    assert "device cpu (" in line and line.count("\n") == 1
    monkeypatch.setattr(device_module, "_version", lambda name: "2.1.2" if name == "torch" else "missing")
    with pytest.warns(UserWarning) as caught:
        lab.print_environment("cpu")
    assert [str(w.message).split(" is ")[0] for w in caught] == ["torch 2.1.2", "torchvision missing"]


@pytest.mark.parametrize("threads, said", [(1, "(1 thread)"), (2, "(2 threads)")])
def test_the_environment_line_counts_threads_in_english(threads, said, capsys):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lab.print_environment("cpu")
    finally:
        torch.set_num_threads(before)
    assert capsys.readouterr().out.rstrip().endswith(f"device cpu {said}")


def test_timing_helpers():
    with lab.Timer() as t:
        sum(range(1000))
    assert 0 <= t.seconds < 5
    assert lab.time_fn(lambda: torch.ones(10).sum(), min_run_time=0.01) > 0
    lab.sync("cpu")


@pytest.mark.parametrize(
    "args, message",
    [
        ((None,), "needs a function of no arguments"),
        ((lambda: 0,), None),
    ],
)
def test_time_fn_bad_arguments(args, message):
    if message is None:
        with pytest.raises(ValueError, match="min_run_time"):
            lab.time_fn(*args, min_run_time=-1)
    else:
        with pytest.raises(TypeError, match=message):
            lab.time_fn(*args)


def test_checkpoint_round_trip_and_atomicity(tmp_path, monkeypatch):
    path = tmp_path / "ck" / "model.pt"
    lab.save_checkpoint({"w": torch.arange(3.0), "step": 7}, path)
    loaded = lab.load_checkpoint(path)
    assert torch.equal(loaded["w"], torch.arange(3.0)) and loaded["step"] == 7

    def exploding_save(obj, f):  # a crash in the middle of writing
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", exploding_save)
    with pytest.raises(KeyboardInterrupt):
        lab.save_checkpoint({"w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert torch.equal(lab.load_checkpoint(path)["w"], torch.arange(3.0))  # the old one is intact
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # and no temp file is left


class Evil:
    """Not a tensor, dict or number: weights_only loading must refuse it."""


def test_load_checkpoint_refuses_code_truncation_and_bad_paths(tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"obj": Evil()}, evil)
    with pytest.raises(RuntimeError, match="not a checkpoint this lab can load safely"):
        lab.load_checkpoint(evil)
    good = lab.save_checkpoint({"w": torch.ones(100)}, tmp_path / "good.pt")
    (tmp_path / "cut.pt").write_bytes(good.read_bytes()[:50])
    with pytest.raises(RuntimeError, match="not a checkpoint this lab can load safely"):
        lab.load_checkpoint(tmp_path / "cut.pt")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        lab.load_checkpoint(tmp_path / "nope.pt")
    for bad in (None, 3, ""):
        with pytest.raises(TypeError, match="a checkpoint path must be a file name"):
            lab.save_checkpoint({}, bad)

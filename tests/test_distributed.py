"""labsupport.distributed: the helpers, and one real run of two gloo worker processes."""
import socket

import pytest
import torch

import labsupport as lab
from labsupport import distributed


def test_free_port_can_be_bound():
    port = lab.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_loopback_interface_exists_on_linux():
    name = lab.loopback_interface()
    if hasattr(socket, "if_nameindex") and any(n == "lo" for _, n in socket.if_nameindex()):
        assert name == "lo"


def test_pick_backend(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert lab.pick_backend(2) == "nccl"
    assert lab.pick_backend(4) == "gloo"          # fewer GPUs than workers
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert lab.pick_backend(1) == "gloo"          # one GPU: nothing to spread over
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert lab.pick_backend(2) == "gloo"


def test_shard_batch_covers_the_batch_once():
    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    shards = [lab.shard_batch(x, y, r, 3) for r in range(3)]
    assert torch.equal(torch.cat([s[0] for s in shards]), x)
    assert [s[1].tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="equal shards"):
        lab.shard_batch(x, y, 0, 4)
    with pytest.raises(ValueError, match="rank must be"):
        lab.shard_batch(x, y, 3, 3)


def test_digits_batch_is_fixed():
    a, b = lab.digits_batch(8), lab.digits_batch(8)
    assert torch.equal(a[0], b[0]) and a[0].shape == (8, 1, 8, 8) and a[1].dtype == torch.int64


def test_reference_step_moves_the_weights():
    torch.manual_seed(0)
    init = {k: v.double() for k, v in lab.DigitsCNN().state_dict().items()}
    after = lab.sgd_step_state(batch_size=8, lr=0.1)
    assert set(after) == set(init)
    assert all(v.dtype == torch.float64 for v in after.values())
    assert max(float((after[k] - init[k]).abs().max()) for k in init) > 1e-4


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"world_size": 0}, ValueError, "positive int"),
    ({"world_size": 2, "batch_size": 9}, ValueError, "multiple of world_size"),
    ({"world_size": 2, "backend": "mpi"}, ValueError, "'gloo' or 'nccl'"),
])
def test_run_data_parallel_validates_arguments(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        lab.run_data_parallel(**kwargs)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has GPUs for nccl")
def test_nccl_without_enough_gpus_says_so():
    with pytest.raises(RuntimeError, match="one GPU per worker"):
        lab.run_data_parallel(2, backend="nccl")


def test_nccl_safety_variables_turn_multicast_off():
    assert lab.NCCL_SAFE_ENV["NCCL_NVLS_ENABLE"] == "0"


def test_two_gloo_processes_match_one_process(capsys):
    # The real thing: two spawned processes, gloo over 127.0.0.1, DDP averaging gradients.
    result = lab.run_data_parallel(2, batch_size=16, train_steps=2, warmup_steps=1, backend="gloo")
    assert result["backend"] == "gloo" and len(result["states"]) == 2
    assert all(torch.equal(result["states"][0][k], result["states"][1][k]) for k in result["states"][0])
    assert [len(t) for t in result["step_times"]] == [2, 2]
    assert all(t > 0 for t in result["startup_s"])
    for t in result["timeline"]:
        assert 0 < t["started"] <= t["joined"] <= t["wrapped"] <= t["stepped"] <= t["trained"] <= result["seconds"]
    lab.check_ddp_equivalence(result)
    assert capsys.readouterr().out.startswith("PASS  DDP: 2 workers")
    assert not list(distributed.Path(distributed.tempfile.gettempdir()).glob("lab_ddp_*")), \
        "the workers' temporary folder was left behind"

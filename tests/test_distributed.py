"""labsupport.distributed: the helpers, and one real run of two gloo worker processes."""

import pytest
import torch

import labsupport as lab
from labsupport import distributed


def test_shard_covers_the_batch_once():
    x, y = torch.arange(12.0).reshape(6, 2), torch.arange(6)
    shards = [distributed._shard(x, y, r, 3) for r in range(3)]
    assert torch.equal(torch.cat([s[0] for s in shards]), x)
    assert [s[1].tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]


def test_reference_step_on_a_shard_differs_from_the_whole_batch():
    whole, half = lab.sgd_step_state(batch_size=8), lab.sgd_step_state(batch_size=8, shard=(0, 2))
    assert max(float((whole[k] - half[k]).abs().max()) for k in whole) > 1e-6


def test_reference_step_moves_the_weights():
    torch.manual_seed(0)
    init = {k: v.double() for k, v in lab.DigitsCNN().state_dict().items()}
    after = lab.sgd_step_state(batch_size=8, lr=0.1)
    assert set(after) == set(init)
    assert all(v.dtype == torch.float64 for v in after.values())
    assert max(float((after[k] - init[k]).abs().max()) for k in init) > 1e-4


@pytest.mark.parametrize(
    "kwargs",
    [{"world_size": 0}, {"world_size": 2, "batch_size": 9}, {"world_size": 2, "backend": "mpi"}, {"world_size": True}],
)
def test_run_data_parallel_validates_arguments(kwargs):
    with pytest.raises(ValueError):
        lab.run_data_parallel(**kwargs)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has GPUs for nccl")
def test_nccl_without_enough_gpus_says_so():
    with pytest.raises(ValueError, match="one GPU per worker"):
        lab.run_data_parallel(2, backend="nccl")


def test_nccl_safety_variables_turn_multicast_off():
    assert distributed._NCCL_ENV["NCCL_NVLS_ENABLE"] == "0"


def test_two_gloo_processes_match_one_process(capsys):
    # The real thing: two spawned processes, gloo over 127.0.0.1, DDP averaging gradients.
    result = lab.run_data_parallel(2, batch_size=16, train_steps=2, warmup_steps=1, backend="gloo")
    assert result["backend"] == "gloo" and len(result["states"]) == 2
    assert all(torch.equal(result["states"][0][k], result["states"][1][k]) for k in result["states"][0])
    assert [len(t) for t in result["step_times"]] == [2, 2]
    assert all(0 < t < result["seconds"] for t in result["startup_s"])
    lab.check_ddp_equivalence(result)
    assert capsys.readouterr().out.startswith("PASS  DDP: 2 workers")
    assert not list(distributed.Path(distributed.tempfile.gettempdir()).glob("lab_ddp_*")), (
        "the workers' temporary folder was left behind"
    )

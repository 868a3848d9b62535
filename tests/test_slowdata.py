"""labsupport.slowdata: the slow-read datasets of notebook 07 and the worker benchmark."""

import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import labsupport as lab


def test_slow_dataset_returns_the_base_items_and_is_slow():
    base = lab.SyntheticImages(6, shape=(1, 3, 3), seed=4)
    slow = lab.SlowDataset(base, delay=0.01)
    assert len(slow) == 6
    start = time.perf_counter()
    items = [slow[i] for i in range(6)]
    assert time.perf_counter() - start >= 6 * 0.01
    for (a, la), (b, lb) in zip(items, (base[i] for i in range(6))):
        assert torch.equal(a, b) and la == lb


def test_spin_mode_keeps_the_cpu_busy(monkeypatch):
    # Spinning means computing through the delay, never sleeping. (Measuring CPU time instead
    # would fail on a loaded machine, where the spinning process is not scheduled all the time.)
    def no_sleep(seconds):
        raise AssertionError("spin mode must not sleep")

    monkeypatch.setattr(time, "sleep", no_sleep)
    slow = lab.SlowDataset(lab.SyntheticImages(2, shape=(1,)), delay=0.02, mode="spin")
    wall = time.perf_counter()
    slow[0]
    assert time.perf_counter() - wall >= 0.02


def test_synthetic_images_are_deterministic_and_index_like_a_list():
    ds = lab.SyntheticImages(5, shape=(3, 4, 4), num_classes=3, seed=1)
    image, label = ds[2]
    assert image.shape == (3, 4, 4) and image.dtype == torch.float32 and 0 <= label < 3
    assert torch.equal(ds[-3][0], image) and torch.equal(lab.SyntheticImages(5, (3, 4, 4), 3, 1)[2][0], image)
    assert not torch.equal(ds[1][0], image)
    for bad in (5, -6):
        with pytest.raises(IndexError):
            ds[bad]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(base=[1, 2], delay=-1.0), ValueError),
        (dict(base=[1, 2], delay="1"), ValueError),
        (dict(base=[1, 2], delay=0.1, mode="nap"), ValueError),
        (dict(base=42, delay=0.1), TypeError),
    ],
)
def test_slow_dataset_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        lab.SlowDataset(**kwargs)


def test_synthetic_images_rejects_a_bad_size():
    with pytest.raises(ValueError):
        lab.SyntheticImages(-1)


def test_time_loader_times_each_epoch_and_rejects_bad_epochs():
    loader = DataLoader(lab.SlowDataset(lab.SyntheticImages(4, shape=(2,)), delay=0.005), batch_size=2)
    seconds = lab.time_loader(loader, epochs=2, device="cpu")
    assert len(seconds) == 2 and all(s >= 4 * 0.005 for s in seconds)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError):
            lab.time_loader(loader, epochs=bad)


def test_datasets_pickle_by_reference_to_an_importable_class():
    ds = lab.SlowDataset(lab.DigitsDataset("val"), delay=0.0)
    clone = pickle.loads(pickle.dumps(ds))
    assert type(clone) is lab.SlowDataset and len(clone) == len(ds)
    assert torch.equal(clone[5][0], ds[5][0]) and clone[5][1] == ds[5][1]
    assert b"labsupport.slowdata" in pickle.dumps(ds)


def test_a_class_defined_in_a_function_cannot_be_pickled():
    # The reason the notebook's worker datasets live in labsupport: what cannot be
    # imported by module and name cannot be sent to a spawned worker.
    class Local(Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return i

    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(Local())


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_started_by_spawn_and_forkserver_get_the_same_items(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"{method} is not available on this platform")
    ds = lab.SlowDataset(lab.DigitsDataset("val"), delay=0.0)
    subset = torch.utils.data.Subset(ds, range(24))
    expected = [batch for batch in DataLoader(subset, batch_size=8)]
    loader = DataLoader(subset, batch_size=8, num_workers=1, multiprocessing_context=method)
    got = [batch for batch in loader]
    assert len(got) == len(expected) == 3
    for (gi, gl), (ei, el) in zip(got, expected):
        assert torch.equal(gi, ei) and torch.equal(gl, el)


class _ReadLog(torch.utils.data.Dataset):
    """Each read sleeps like SlowDataset and reports which process read it, and when."""

    def __init__(self, n, delay):
        self.slow = lab.SlowDataset(lab.SyntheticImages(n, shape=(1,)), delay=delay)

    def __len__(self):
        return len(self.slow)

    def __getitem__(self, i):
        start = time.time()
        self.slow[i]
        return torch.tensor([float(os.getpid()), start, time.time()], dtype=torch.float64)


def test_two_workers_read_in_parallel():
    # The point of workers, shown without timing the loader (speed is for the benchmark):
    # reads happen in two other processes, and some of their slow reads overlap in time.
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("fork is not available on this platform")
    loader = DataLoader(_ReadLog(16, 0.05), batch_size=4, num_workers=2, multiprocessing_context="fork")
    reads = torch.cat(list(loader)).tolist()
    pids = {int(pid) for pid, _, _ in reads}
    assert len(pids) == 2 and os.getpid() not in pids
    overlapping = any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in reads for b in reads)
    assert overlapping, "no two reads by different workers overlapped in time"


def test_the_worker_benchmark_runs_and_reports(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "dataloader_workers.py"
    spec = importlib.util.spec_from_file_location("dataloader_workers", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "r.json"
    assert (
        bench.main(
            [
                "--items",
                "32",
                "--delay",
                "0.005",
                "--epochs",
                "2",
                "--modes",
                "sleep",
                "--batch-size",
                "4",
                "--start-method",
                "fork",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    import json

    results = json.loads(out.read_text())
    rows = {r["num_workers"]: r for r in results["workers"]}
    assert set(rows) == {0, 2} and rows[0]["speedup_vs_0"] == 1.0
    assert rows[0]["epoch_s"] >= 32 * 0.005 and rows[2]["speedup_vs_0"] > 0  # the figure itself is the benchmark's
    assert "speed-up" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins to one core on Linux only")
def test_spinning_workers_are_not_faster_on_a_core_that_busy_programs_share():
    # Two other programs spinning on the pinned core: two workers would get 2/4 of it against one
    # program's 1/3, 1.5x the speed, from the other programs' share and not from the core.
    from labsupport import slowdata

    core = min(os.sched_getaffinity(0))
    spin = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(0.2)  # both pinned and spinning
        assert slowdata._speedup.__wrapped__("spin", 8, 0.01) < 1.3
    finally:
        for process in busy:
            process.kill()
            process.wait()

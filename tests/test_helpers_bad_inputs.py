"""The helpers of notebooks 00, 07, 09 and 10 (timing, data, device, distributed): a bad argument gets one
sentence, and what a student's code can block is stopped after a time limit, with a sentence."""

import math
import time
import warnings

import pytest
import torch

import labsupport as lab
from labsupport import distributed
from labsupport.checks import running


def never_returns():
    while True:
        pass


# ----------------------------------------------------------------------------- timing


def test_time_fn_stops_a_function_that_never_returns(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"time_fn\(fn\) did not finish within 0.22 s, so it was stopped: fn\(\)"):
        lab.time_fn(never_returns, min_run_time=0.01)
    assert time.perf_counter() - start < 5


def test_time_fn_stops_a_function_far_too_slow_to_time(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(TimeoutError, match="far too slow to time"):
        lab.time_fn(lambda: time.sleep(1), min_run_time=0.01)


def test_time_fn_still_times():
    assert 0 < lab.time_fn(lambda: torch.ones(10).sum(), min_run_time=0.01) < 1


def test_time_fn_lets_the_functions_own_error_through():
    with pytest.raises(ZeroDivisionError):
        lab.time_fn(lambda: 1 / 0, min_run_time=0.01)


@pytest.mark.parametrize("fn", [None, 3, "f", [print]], ids=repr)
def test_time_fn_needs_a_function(fn):
    with pytest.raises(TypeError, match="needs a function of no arguments"):
        lab.time_fn(fn)


@pytest.mark.parametrize("seconds", [True, 0, -1, math.nan, math.inf, 1e9, "0.1", None], ids=repr)
def test_time_fn_refuses_run_times_that_make_no_sense(seconds):
    with pytest.raises(ValueError, match="min_run_time must be a number of seconds"):
        lab.time_fn(lambda: None, min_run_time=seconds)


def test_time_fn_refuses_a_label_that_is_no_string():
    with pytest.raises(TypeError, match="label must be a string"):
        lab.time_fn(lambda: None, min_run_time=0.01, label=3)


@pytest.mark.parametrize("device, error", [(3, TypeError), (["cpu"], TypeError), ("cpux", ValueError)], ids=repr)
def test_sync_and_timer_answer_bad_devices_in_one_sentence(device, error):
    with pytest.raises(error, match="device"):
        lab.sync(device)
    with pytest.raises(error, match="device"):
        lab.Timer(device)


# ----------------------------------------------------------------------------- device


@pytest.mark.parametrize(
    "wanted, words",
    [
        ("meta", "meta device holds shapes but no data"),
        (torch.device("meta"), "meta device holds shapes but no data"),
        (3, "a device is named by a string"),
        (0, "a device is named by a string"),
        (["cpu"], "a device is named by a string"),
        ("cpux", "is not a device name"),
        ("cuda:9", "not available"),
    ],
    ids=repr,
)
def test_pick_device_answers_bad_names_in_one_sentence(wanted, words):
    with pytest.raises(RuntimeError, match=words):
        lab.pick_device(wanted)


def test_pick_device_accepts_a_device_object():
    assert lab.pick_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("wanted", ["meta", 3, "cpux"], ids=repr)
def test_print_environment_answers_bad_devices_in_one_sentence(wanted, capsys):
    with pytest.raises(RuntimeError):
        lab.print_environment(wanted)
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------- distributed


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"world_size": 0}, "world_size must be a whole number"),
        ({"world_size": True}, "world_size must be a whole number"),
        ({"world_size": "2"}, "world_size must be a whole number"),
        ({"world_size": 10**6}, "world_size must be a whole number"),
        ({"world_size": 2, "batch_size": 9}, "must divide batch_size"),
        ({"batch_size": 0}, "batch_size must be a whole number"),
        ({"batch_size": 10**9}, "batch_size must be a whole number"),
        ({"batch_size": 64.0}, "batch_size must be a whole number"),
        ({"lr": math.nan}, "lr must be a number above 0"),
        ({"lr": -0.1}, "lr must be a number above 0"),
        ({"lr": "0.1"}, "lr must be a number above 0"),
        ({"seed": -1}, "seed must be a whole number"),
        ({"seed": 1.5}, "seed must be a whole number"),
        ({"train_steps": 10**7}, "train_steps must be a whole number from 0 to 10000"),
        ({"train_steps": -1}, "train_steps must be a whole number"),
        ({"warmup_steps": None}, "warmup_steps must be a whole number"),
        ({"timeout": 0}, "timeout must be a number above 0"),
        ({"timeout": math.inf}, "timeout must be a number above 0"),
        ({"world_size": 2, "backend": "mpi"}, "backend must be 'gloo'"),
    ],
    ids=repr,
)
def test_run_data_parallel_answers_bad_arguments_before_starting_workers(kwargs, words):
    with pytest.raises(ValueError, match=words):
        lab.run_data_parallel(**kwargs)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"seed": -1}, "seed must be"),
        ({"lr": math.nan}, "lr must be"),
        ({"batch_size": 0}, "batch_size must be"),
        ({"shard": (2, 2)}, "shard's rank"),
        ({"shard": (0, 0)}, "shard's world_size"),
        ({"shard": "0,2"}, "shard must be a pair"),
    ],
    ids=repr,
)
def test_sgd_step_state_answers_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words):
        lab.sgd_step_state(**kwargs)


class StuckWorker:
    """Stands in for a worker process that never finishes."""

    def __init__(self):
        self.killed = False

    def kill(self):
        self.killed = True


class StuckWorkers:
    """What torch.multiprocessing.start_processes returns, for workers that never finish."""

    def __init__(self):
        self.processes = [StuckWorker(), StuckWorker()]

    def join(self, timeout=None):
        time.sleep(min(timeout or 0.01, 0.01))
        return False


def test_workers_that_outlive_the_timeout_are_stopped_with_a_sentence(monkeypatch):
    workers = StuckWorkers()
    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda *args, **kwargs: workers)
    with pytest.raises(TimeoutError, match="did not finish within timeout=0.3 s, so they were stopped"):
        lab.run_data_parallel(2, batch_size=8, backend="gloo", timeout=0.3)
    assert all(worker.killed for worker in workers.processes)
    assert not list(distributed.Path(distributed.tempfile.gettempdir()).glob("lab_ddp_*"))


# ----------------------------------------------------------------------------- every public check of 00, 09 and 10


def raising(*args):
    raise ValueError("boom")


def endless(*args):
    while True:
        pass


class Lying:
    """An object that claims to equal everything."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


BAD_ANSWERS = {
    "None": None,
    "empty list": [],
    "list": [1, 2],
    "string": "x",
    "int": 3,
    "nan": math.nan,
    "inf": math.inf,
    "bool": True,
    "tensor": torch.ones(2),
    "meta tensor": torch.ones(2, device="meta"),
    "object": object(),
    "lying object": Lying(),
    "raising function": raising,
    "endless function": endless,
    "module instance": torch.nn.Linear(4, 3),
}

PUBLIC_CHECKS = [
    lab.check_titan_tensor_peak,
    lab.check_cpu_peak_flops,
    lab.check_matmul_size_prediction,
    lab.check_roofline,
    lab.check_fullgraph_prediction,
    lab.check_cond_gate,
    lab.check_to_prediction,
    lab.check_amp_step,
    lab.check_data_parallel_grads,
    lab.check_ddp_equivalence,
]


@pytest.mark.parametrize("check", PUBLIC_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", list(BAD_ANSWERS))
def test_every_public_check_answers_bad_input_in_one_sentence(check, name, monkeypatch, capsys):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError) as info:
        check(BAD_ANSWERS[name])
    assert info.value.message and "Traceback" not in str(info.value)
    assert "PASS" not in capsys.readouterr().out


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("name", list(BAD_ANSWERS))
def test_script_vs_trace_answers_bad_input_in_any_position(position, name, monkeypatch, capsys):
    def halve(x):
        while x.abs().max() > 1:
            x = x / 2
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = [halve, torch.jit.script(halve), torch.jit.trace(halve, torch.tensor([3.0, -1.0]))]
    args[position] = BAD_ANSWERS[name]
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError) as info:
        lab.check_script_vs_trace(*args)
    assert info.value.message and "Traceback" not in str(info.value)
    assert "PASS" not in capsys.readouterr().out


@pytest.mark.parametrize("name", list(BAD_ANSWERS))
def test_matmul_prediction_answers_a_bad_device_in_one_sentence(name, capsys):
    with pytest.raises(lab.CheckError) as info:
        lab.check_matmul_size_prediction(1024, BAD_ANSWERS[name])
    assert info.value.usage
    assert "PASS" not in capsys.readouterr().out


# ----------------------------------------------------------------------------- notebook 00's measuring helpers


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: lab.time_per_call(None), TypeError, "time_per_call needs a function of no arguments"),
        (lambda: lab.time_per_call(lambda: 1, device=0), TypeError, "device must be a device name"),
        (lambda: lab.measure_matmul(None), ValueError, "n must be a whole number >= 1 (the matrices' size), got None"),
        (lambda: lab.measure_matmul(0), ValueError, "n must be a whole number >= 1"),
        (lambda: lab.measure_matmul(8, "fp8"), ValueError, "precision must be one of 'fp32', 'tf32', 'bf16', 'fp16'"),
        (lambda: lab.measure_matmul(8, device="gpu"), ValueError, "'gpu' is not a device name"),
        (lambda: lab.pick_amp_dtype(None), TypeError, "device must be a device name such as 'cpu' or 'cuda'"),
        (lambda: lab.format_rate("fast"), TypeError, "format_rate needs a number (or None), got str"),
        (lambda: lab.format_rate(torch.ones(2)), TypeError, "format_rate needs a number (or None), got Tensor"),
        (lambda: lab.matmul_sweep(None), TypeError, "sizes must be a list of matrix sizes such as [256, 512, 1024]"),
        (lambda: lab.matmul_sweep(torch.tensor(64)), TypeError, "sizes must be a list of matrix sizes"),
        (lambda: lab.matmul_sweep(512), TypeError, "sizes must be a list of matrix sizes"),
        (lambda: lab.digits_split(None), TypeError, "n must be the number of items to split"),
        (lambda: lab.digits_split(torch.tensor(10)), TypeError, "n must be the number of items to split"),
        (lambda: lab.digits_split(10, val_fraction="0.2"), ValueError, "val_fraction must be between 0 and 1"),
        (lambda: lab.time_loader(torch.tensor(3.0)), TypeError, "loader must be a DataLoader"),
        (lambda: lab.time_loader("batches"), TypeError, "loader must be a DataLoader"),
    ],
)
def test_measuring_helpers_refuse_bad_arguments_in_one_sentence(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_format_rate_takes_a_zero_dimensional_tensor():
    assert lab.format_rate(torch.tensor(2.5e9), "B/s") == "2.5 GB/s"

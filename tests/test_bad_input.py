"""Every public check, fed what students actually pass by mistake, answers with a CheckError:
never PASS, never an exception from torch or labsupport internals, never a hang."""

import _thread
import inspect
import threading

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import core, running


def forever(*args, **kwargs):
    while True:
        pass


def raises(*args, **kwargs):
    raise ValueError("my own bug")


def returns_nan(*args, **kwargs):
    return torch.full((2, 2), float("nan"))


class Junk:
    """Not the class an exercise asks for."""


JUNK = {
    "None": None,
    "list": [1.0, 2.0],
    "numpy": np.zeros((2, 2)),
    "string": "my answer",
    "float": 3.5,
    "nan": float("nan"),
    "nan tensor": torch.full((2, 2), float("nan")),
    "empty tensor": torch.zeros(0),
    "returns None": lambda *a, **k: None,
    "raises": raises,
    "never returns": forever,
    "returns NaN": returns_nan,
    "a class": Junk,
    "a dict": {"w": torch.zeros(2)},
}


def one_argument_checks():
    names = []
    for name in sorted(dir(lab)):
        fn = getattr(lab, name)
        if (
            name.startswith("check_")
            and callable(fn)
            and name not in ("check_close", "check_gradients", "check_prediction")
        ):
            required = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if len(required) == 1:
                names.append(name)
    return names


CHECKS = one_argument_checks()


def test_there_are_checks_to_feed():
    assert len(CHECKS) >= 15


# A number is a valid answer to a prediction that asks for one: it is committed, not refused. So is
# a list of two numbers for the prediction that asks for two (10.4's speed-ups).
VALID_PREDICTIONS = {"float", "nan"}
VALID_PAIRS = {"check_speedup_prediction": {"list"}}


@pytest.mark.parametrize("junk", list(JUNK), ids=str)
@pytest.mark.parametrize("check", CHECKS)
def test_junk_gets_a_clear_message(check, junk, monkeypatch, capsys):
    if check.endswith("_prediction") and junk in VALID_PREDICTIONS:
        pytest.skip("a number can be a prediction's answer: committed and judged, not refused")
    if junk in VALID_PAIRS.get(check, ()):
        pytest.skip("two numbers are this prediction's answer: committed and judged, not refused")
    monkeypatch.setattr(running, "TIME_LIMIT", 0.1)  # the "never returns" junk waits this long
    guard = threading.Timer(90, _thread.interrupt_main)  # a hang fails the test instead of stalling CI
    guard.start()
    try:
        with pytest.raises(core.CheckError) as info:
            getattr(lab, check)(JUNK[junk])
    except KeyboardInterrupt:
        pytest.fail(f"{check}({junk}) hung for 90 s")
    finally:
        guard.cancel()
    assert "PASS" not in capsys.readouterr().out
    text = str(info.value)
    assert text and "Traceback" not in text
    assert "could not use your answer" not in text, f"{check}({junk}) slipped past the check's validation: {text}"

"""labsupport.checks.core: validation, closeness, numeric gradients, student calls."""
import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks.core import call_student, describe, expect_tensor


def test_passed_prints_the_stable_verdict_line(capsys):
    lab.passed("x: ok")
    assert capsys.readouterr().out == "PASS  x: ok\n"


def test_describe_names_type_shape_dtype_device():
    assert describe(None) == "None"
    assert describe(torch.zeros(2, 3)) == "tensor of shape (2, 3), dtype torch.float32, on cpu"
    assert describe([1, 2]) == "list of length 2"
    assert describe(np.zeros((2, 2))) == "numpy.ndarray of shape (2, 2), dtype float64"
    assert describe(3.5) == "float 3.5"


@pytest.mark.parametrize("value, fragment", [
    (None, "got None"),
    ([1.0, 2.0], "got list of length 2"),
    (np.ones(2), "torch.from_numpy"),
    (2.0, "drop .item()"),
])
def test_expect_tensor_rejects_non_tensors_with_one_line(value, fragment):
    with pytest.raises(lab.CheckError) as info:
        expect_tensor(value, "grad_w1", shape=(2,))
    msg = str(info.value)
    assert fragment in msg and "grad_w1" in msg and "\n" not in msg


def test_expect_tensor_shape_dtype_device_nan():
    with pytest.raises(lab.CheckError, match=r"shape \(100, 1000\); expected \(1000, 100\)\. Did you forget a transpose"):
        expect_tensor(torch.zeros(100, 1000), "grad_w1", shape=(1000, 100))
    with pytest.raises(lab.CheckError, match="reshape"):
        expect_tensor(torch.zeros(6), "x", shape=(2, 3))
    with pytest.raises(lab.CheckError, match="dtype torch.float64; expected torch.float32"):
        expect_tensor(torch.zeros(2, dtype=torch.float64), "x", dtype=torch.float32)
    with pytest.raises(lab.CheckError, match="expected meta"):
        expect_tensor(torch.zeros(2), "x", device="meta")
    with pytest.raises(lab.CheckError, match="1 NaN and 1 inf"):
        expect_tensor(torch.tensor([float("nan"), float("inf"), 1.0]), "x")
    assert expect_tensor(torch.tensor([float("nan")]), "x", finite=False).shape == (1,)


def test_rel_error():
    a = torch.tensor([1.0, 2.0])
    assert lab.rel_error(a, a) == 0.0
    assert lab.rel_error(torch.tensor([1.0]), torch.tensor([3.0])) == pytest.approx(0.5)
    with pytest.raises(lab.CheckError, match="shape"):
        lab.rel_error(torch.zeros(2), torch.zeros(3))
    with pytest.raises(lab.CheckError, match="got list"):
        lab.rel_error([1.0], torch.zeros(1))


def test_check_close_pass_and_failure_report(capsys):
    lab.check_close("y", torch.ones(2, 2), torch.ones(2, 2))
    assert capsys.readouterr().out.startswith("PASS  y: matches the reference")
    got = torch.ones(2, 2)
    got[1, 0] = 5.0
    with pytest.raises(lab.CheckError) as info:
        lab.check_close("y", got, torch.ones(2, 2), hint="look at row 1")
    msg = str(info.value)
    assert "worst element (1, 0): expected 1, got 5" in msg and "look at row 1" in msg


def test_check_close_rejects_wrong_dtype_and_nan():
    with pytest.raises(lab.CheckError, match="dtype"):
        lab.check_close("y", torch.ones(2, dtype=torch.float64), torch.ones(2))
    with pytest.raises(lab.CheckError, match="NaN"):
        lab.check_close("y", torch.tensor([1.0, float("nan")]), torch.ones(2))


def test_numeric_gradient_matches_analytic():
    x = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    g = lab.numeric_gradient(lambda: (x ** 3).sum(), x)
    assert torch.allclose(g, 3 * x ** 2, rtol=1e-6)
    only = lab.numeric_gradient(lambda: (x ** 3).sum(), x, indices=[(0, 1)])
    assert only[0, 1] == pytest.approx(12.0, rel=1e-6) and only[0, 0] == 0
    assert torch.equal(x, torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)), "x restored"


def test_numeric_gradient_rejects_non_scalar_function():
    x = torch.ones(2, dtype=torch.float64)
    with pytest.raises(lab.CheckError, match="scalar"):
        lab.numeric_gradient(lambda: x * 2, x)


def test_check_gradients_names_the_wrong_parameter(capsys):
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    v = torch.tensor([2.0, 1.0], dtype=torch.float64)
    f = lambda: (w ** 2).sum() * v.sum()
    good = {"w": 2 * w * v.sum(), "v": torch.full_like(v, float((w ** 2).sum()))}
    lab.check_gradients(f, {"w": w, "v": v}, good)
    assert "PASS  gradient check: 2 gradient(s)" in capsys.readouterr().out
    with pytest.raises(lab.CheckError, match="gradient of v is wrong"):
        lab.check_gradients(f, {"w": w, "v": v}, {"w": good["w"], "v": good["v"] * 2})
    with pytest.raises(lab.CheckError, match="no gradient given for v"):
        lab.check_gradients(f, {"w": w, "v": v}, {"w": good["w"]})
    with pytest.raises(lab.CheckError, match="dicts"):
        lab.check_gradients(f, [w], [good["w"]])


def test_call_student_turns_errors_into_check_errors():
    def stub():
        raise NotImplementedError("Exercise 2: the forward pass")
    with pytest.raises(lab.CheckError, match="not written yet \\(Exercise 2: the forward pass\\)"):
        call_student(stub)
    with pytest.raises(lab.CheckError, match="raised ZeroDivisionError"):
        call_student(lambda: 1 / 0)
    with pytest.raises(lab.CheckError, match="without calling it"):
        call_student(torch.zeros(2))
    assert call_student(lambda a, b=1: a + b, 1, b=2) == 3


def test_call_student_detects_writes_into_inputs():
    a, b = torch.zeros(2), torch.ones(2)
    with pytest.raises(lab.CheckError, match=r"f changed its input #2 in place: copy first"):
        call_student(lambda x, y: y.mul_(3), a, b, what="f", inplace_hint="copy first")
    assert torch.equal(call_student(lambda x, y: x + y, a, torch.ones(2), what="f", inplace_hint="-"),
                       torch.ones(2))
    # without the hint, writing into an input is the student's business
    assert call_student(lambda x: x.add_(1), torch.zeros(1)).item() == 1.0

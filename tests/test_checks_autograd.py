"""Checks of notebook 03 (autograd): the reference answers pass, every listed mistake
is named (one test each, generated from the checks' own mistake lists), and bad
answers of any kind give a CheckError, never a PASS or another exception."""
import numpy as np
import pytest
import torch

import labsupport as lab
import labsupport.checks.core as core
from labsupport.checks import nb03_autograd as A


# ------------------------------------------------------------------ 03.1 two paths

def two_path(a, b):
    d = a * b + a.exp()
    return 2 * d * (b + a.exp()), 2 * d * a


def test_two_path_reference_passes(capsys):
    lab.check_predicted_gradients(two_path)
    assert capsys.readouterr().out.startswith("PASS  predicted gradients")


@pytest.mark.parametrize("k", range(len(A._two_path_mistakes(torch.ones(1), torch.ones(1)))))
def test_two_path_mistake_is_named(k):
    def wrong(a, b):
        value, why = A._two_path_mistakes(a, b)[k]
        return tuple(r if v is None else v for v, r in zip(value, two_path(a, b)))
    why = A._two_path_mistakes(torch.ones(1), torch.ones(1))[k][1]
    with pytest.raises(lab.CheckError) as info:
        lab.check_predicted_gradients(wrong)
    assert why in str(info.value)


# ------------------------------------------------------------------ 03.2-03.4 predictions

RIGHT = {A.check_backward_twice_prediction: "error", A.check_vjp_prediction: [2, 40, 600],
         A.check_second_derivative_prediction: 6}


@pytest.mark.parametrize("check", RIGHT, ids=lambda c: c.exercise_id)
def test_prediction_right_answer_passes(check, capsys):
    check(RIGHT[check])
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check, wrong", [(c, w) for c in RIGHT for w in c.judge["mistakes"]])
def test_prediction_mistake_is_explained(check, wrong):
    with pytest.raises(lab.CheckError) as info:
        check(list(wrong) if isinstance(wrong, tuple) else wrong)
    assert check.judge["mistakes"][wrong] in str(info.value)


@pytest.mark.parametrize("check", RIGHT, ids=lambda c: c.exercise_id)
@pytest.mark.parametrize("bad", [None, [], np.array([2.0, 40.0, 600.0]), float("nan"), torch.tensor(6.0), "six"])
def test_prediction_bad_answers_fail_cleanly(check, bad):
    with pytest.raises(lab.CheckError):
        check(bad)


# ------------------------------------------------------------------ 03.5 / 03.6 loops

def make_loop(mode="right", chunked=False, no_grad=True):
    """A training loop with one of the checks' known mistakes (the modes of A._LOOP_MISTAKES)."""
    def train(x, y, w1, w2, learning_rate, steps, chunks=1, log=None):
        losses = []
        for t in range(steps):
            total = 0.0
            for xc, yc in zip(x.chunk(chunks), y.chunk(chunks)):
                if mode == "last_chunk" and w1.grad is not None:
                    w1.grad, w2.grad = None, None
                part = (xc.mm(w1).clamp(min=0).mm(w2) - yc).pow(2).sum()
                part.backward()
                total += part.item()
            if log is not None:
                log(t, total)
            sign = -1 if mode == "up" else 1
            if mode == "frozen":
                with torch.no_grad():
                    w1 = (w1 - sign * learning_rate * w1.grad).requires_grad_()
                    w2 = (w2 - sign * learning_rate * w2.grad).requires_grad_()
            elif no_grad:
                with torch.no_grad():
                    w1 -= sign * learning_rate * w1.grad
                    w2 -= sign * learning_rate * w2.grad
            else:
                w1 -= learning_rate * w1.grad
            if mode not in ("no_reset", "frozen"):
                w1.grad, w2.grad = None, None
            losses.append(total)
        return losses
    if chunked:
        return train
    return lambda x, y, w1, w2, learning_rate, steps: train(x, y, w1, w2, learning_rate, steps)


LOOP_CHECKS = [(A.check_fixed_training, False), (A.check_accumulated_training, True)]


@pytest.mark.parametrize("check, chunked", LOOP_CHECKS)
def test_loop_reference_passes(check, chunked, capsys):
    check(make_loop(chunked=chunked))
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check, chunked", LOOP_CHECKS)
@pytest.mark.parametrize("mode, why", A._LOOP_MISTAKES)
def test_loop_mistake_is_named(check, chunked, mode, why):
    if mode == "last_chunk" and not chunked:
        pytest.skip("one chunk: the same as a correct loop")
    with pytest.raises(lab.CheckError) as info:
        check(make_loop(mode, chunked))
    assert why in str(info.value)


def test_update_outside_no_grad_is_named():
    with pytest.raises(lab.CheckError, match="no_grad"):
        lab.check_fixed_training(make_loop(no_grad=False))


def rebinding_without_requires_grad(x, y, w1, w2, learning_rate, steps):
    losses = []
    for t in range(steps):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 = w1 - learning_rate * w1.grad
            w2 = w2 - learning_rate * w2.grad
    return losses


def test_rebinding_that_raises_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_fixed_training(rebinding_without_requires_grad)
    assert A._REBIND in str(info.value)


def test_log_at_the_wrong_time_is_named():
    def train(x, y, w1, w2, learning_rate, steps, chunks, log=None):
        losses = make_loop(chunked=True)(x, y, w1, w2, learning_rate, steps, chunks)
        for t, loss in enumerate(losses):
            log(t, loss)                       # after training: the gradients are gone
        return losses
    with pytest.raises(lab.CheckError, match="log"):
        lab.check_accumulated_training(train)


def returns(value):
    def train(x, y, w1, w2, learning_rate, steps, *rest, **kw):
        make_loop(chunked=True)(x, y, w1, w2, learning_rate, steps, *rest, **kw)
        return value
    return train


def never_returns(*args, **kwargs):
    while True:
        pass


def raises(*args, **kwargs):
    raise ValueError("boom")


@pytest.mark.parametrize("check, chunked", LOOP_CHECKS)
@pytest.mark.parametrize("bad", [None, "train", returns(None), returns([1.0, "x"]), returns(np.ones(4)),
                                 returns([float("nan")] * 4), returns([1.0]), returns(torch.ones(4)),
                                 raises, lambda *a, **k: None])
def test_loop_bad_answers_fail_cleanly(check, chunked, bad):
    with pytest.raises(lab.CheckError):
        check(bad)


@pytest.mark.parametrize("check", [A.check_fixed_training, A.check_accumulated_training, lab.check_predicted_gradients])
def test_a_function_that_never_returns_is_stopped(check, monkeypatch):
    monkeypatch.setattr(core, "TIME_LIMIT", 0.1)
    with pytest.raises(lab.CheckError, match="did not return"):
        check(never_returns)


@pytest.mark.parametrize("bad", [None, [1.0, 2.0], lambda a, b: (np.ones(5), np.ones(5)), lambda a, b: (a, b, a),
                                 lambda a, b: tuple(t.float() for t in two_path(a, b)),
                                 lambda a, b: tuple(t.unsqueeze(0) for t in two_path(a, b)),
                                 lambda a, b: tuple(t * float("nan") for t in two_path(a, b)),
                                 lambda a, b: tuple(t.sum() for t in two_path(a, b)), raises])
def test_two_path_bad_answers_fail_cleanly(bad):
    with pytest.raises(lab.CheckError):
        lab.check_predicted_gradients(bad)


def test_reset_before_the_first_backward_is_named():
    def train(x, y, w1, w2, learning_rate, steps):
        losses = []
        for t in range(steps):
            w1.grad.zero_()                    # .grad is None until the first backward
            w2.grad.zero_()
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            with torch.no_grad():
                w1 -= learning_rate * w1.grad
                w2 -= learning_rate * w2.grad
            losses.append(loss.item())
        return losses
    with pytest.raises(lab.CheckError, match="None before the first backward"):
        lab.check_fixed_training(train)

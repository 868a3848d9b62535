"""Checks of notebook 03 (autograd): the reference passes, each known mistake is named."""
import numpy as np
import pytest
import torch

import labsupport as lab


# ------------------------------------------------------------------ check_grads_agree

def test_grads_agree_passes(capsys):
    g = {"w1": torch.ones(3, 2), "w2": torch.arange(4.0)}
    lab.check_grads_agree({k: v.clone() for k, v in g.items()}, g, what="autograd vs by hand")
    assert capsys.readouterr().out == "PASS  autograd vs by hand: w1, w2 agree (relative error < 1e-05)\n"


@pytest.mark.parametrize("got, fragment", [
    ({"w": -torch.arange(1.0, 4.0)}, "opposite sign"),
    ({"w": 2 * torch.arange(1.0, 4.0)}, "twice the expected gradient"),
    ({"w": torch.arange(1.0, 4.0) + 0.1}, "differ"),
    ({"w": None}, "got None"),
    ({"v": torch.arange(1.0, 4.0)}, "no gradient named 'w'"),
    ({"w": torch.arange(1.0, 4.0).double()}, "dtype torch.float64"),
    ({"w": torch.ones(4)}, "shape"),
    ({"w": [1.0, 2.0, 3.0]}, "got list"),
    ([torch.ones(3)], "two dicts"),
])
def test_grads_agree_mistakes(got, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_grads_agree(got, {"w": torch.arange(1.0, 4.0)})


def test_grads_agree_needs_something_to_compare():
    with pytest.raises(lab.CheckError, match="at least one"):
        lab.check_grads_agree({}, {})


# ------------------------------------------------------------------ predicted gradients

def predict(a, b):
    d = a * b + a.exp()
    return 2 * d * (b + a.exp()), 2 * d * a


def test_predicted_reference_is_autograd():
    a, b = torch.tensor([0.3, -1.0], dtype=torch.float64), torch.tensor([2.0, 0.5], dtype=torch.float64)
    for got, want in zip(lab.predicted_reference(a, b), predict(a, b)):
        torch.testing.assert_close(got, want)


def test_predicted_check_passes(capsys):
    lab.check_predicted_gradients(predict)
    assert capsys.readouterr().out.startswith("PASS  predicted gradients")


def _d(a, b):
    return a * b + a.exp()


@pytest.mark.parametrize("wrong, fragment", [
    (lambda a, b: (2 * _d(a, b) * b, 2 * _d(a, b) * a), "misses the path through exp"),
    (lambda a, b: (2 * _d(a, b) * a.exp(), 2 * _d(a, b) * a), r"misses the path through a \* b"),
    (lambda a, b: (b + a.exp(), a), "outer derivative is missing"),
    (lambda a, b: (_d(a, b) * (b + a.exp()), _d(a, b) * a), "drop the factor 2"),
    (lambda a, b: predict(a, b)[::-1], "swapped"),
    (lambda a, b: (predict(a, b)[0], 2 * _d(a, b) * b), "is a, not b"),
    (lambda a, b: (predict(a, b)[0], 3 * _d(a, b) * a), "does not match autograd"),
    (lambda a, b: (predict(a, b)[0].sum(), predict(a, b)[1]), "do not sum"),
    (lambda a, b: tuple(g.float() for g in predict(a, b)), "dtype torch.float32"),
    (lambda a, b: predict(a, b)[0], "must return \\(grad_a, grad_b\\)"),
    (lambda a, b: None, "got None"),
    (lambda a, b: [g.tolist() for g in predict(a, b)], "got list"),
    (lambda a, b: [g.numpy() for g in predict(a, b)], "torch.from_numpy"),
    (lambda a, b: (predict(a, b)[0] * float("nan"), predict(a, b)[1]), "NaN"),
    (lambda a, b: (predict(a, b)[0][:2], predict(a, b)[1]), "shape"),
])
def test_predicted_check_mistakes(wrong, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_predicted_gradients(wrong)


def test_predicted_check_stub_and_non_function():
    def stub(a, b):
        raise NotImplementedError("Exercise 1: predict the gradients")
    with pytest.raises(lab.CheckError, match="not written yet"):
        lab.check_predicted_gradients(stub)
    with pytest.raises(lab.CheckError, match="to be a function"):
        lab.check_predicted_gradients(None)


# ------------------------------------------------------------------ training loops

def make_train(*, updated=("w1", "w2"), zero=("w1", "w2"), zero_where="after", no_grad=True, in_place=("w1", "w2"), sign=1.0,
               use_lr=True, log_where="after_backward", mean=False, store="item", twice=False,
               with_log=True, loss_after_update=False):
    """A training loop with one switch per mistake; the defaults are the correct loop."""
    def train(x, y, w1, w2, learning_rate, steps, log=None):
        losses = []
        lr = learning_rate if use_lr else 1.0
        for t in range(steps):
            if zero_where == "none_before" and t > 0:
                for name, w in (("w1", w1), ("w2", w2)):
                    if name in zero:
                        w.grad = None
            err = x.mm(w1).clamp(min=0).mm(w2) - y
            loss = err.pow(2).mean() if mean else err.pow(2).sum()
            loss.backward()
            if twice:
                loss2 = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
                loss2.backward()
            if zero_where == "before_update":
                w1.grad.zero_()
                w2.grad.zero_()
            if with_log and log is not None and log_where == "after_backward":
                log(t, loss.item())

            def update():
                nonlocal w1, w2
                if "w1" not in updated:
                    pass
                elif "w1" in in_place:
                    w1 -= sign * lr * w1.grad
                else:
                    w1 = w1 - sign * lr * w1.grad
                if "w2" not in updated:
                    pass
                elif "w2" in in_place:
                    w2 -= sign * lr * w2.grad
                else:
                    w2 = w2 - sign * lr * w2.grad
            if no_grad:
                with torch.no_grad():
                    update()
            else:
                update()
            if zero_where == "after":
                for name, w in (("w1", w1), ("w2", w2)):
                    if name in zero and w.grad is not None:
                        w.grad.zero_()
            if with_log and log is not None and log_where == "after_update":
                log(t, loss.item())
            if loss_after_update:
                loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            losses.append({"item": loss.item(), "tensor": loss, "detached": loss.detach()}[store])
        return losses
    return train


def test_training_check_passes(capsys):
    lab.check_autograd_training(make_train())
    assert capsys.readouterr().out == ("PASS  training loop: losses, gradients and weights match the "
                                       "reference at all 5 steps, and the loss falls\n")


def test_training_check_accepts_reset_to_none_and_detached_losses(capsys):
    lab.check_autograd_training(make_train(zero_where="none_before", store="detached"))
    assert "PASS  training loop" in capsys.readouterr().out


@pytest.mark.parametrize("options, fragment", [
    (dict(zero=()), "gradients accumulate"),
    (dict(zero=("w1",)), "w2.grad in step 1 equals this step's gradient plus the earlier ones"),
    (dict(zero_where="before_update"), "all zeros"),
    (dict(no_grad=False), "inside `with torch.no_grad"),
    (dict(updated=("w2",)), "w1 did not change in step 0"),
    (dict(in_place=("w2",)), "replaces w1 by a new tensor"),
    (dict(sign=-1.0), "moved up the gradient"),
    (dict(use_lr=False), "use the learning_rate argument"),
    (dict(log_where="after_update"), "log was called after the update"),
    (dict(with_log=False), "log was never called"),
    (dict(mean=True), "It is the mean"),
    (dict(store="tensor"), "still carries its graph"),
    (dict(twice=True), "twice the gradient"),
    (dict(loss_after_update=True), "It is the next step's loss"),
])
def test_training_check_mistakes(options, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_autograd_training(make_train(**options))


def test_training_check_in_place_outside_no_grad_message():
    with pytest.raises(lab.CheckError, match="leaf Variable that requires grad"):
        lab.check_autograd_training(make_train(no_grad=False))


def test_training_check_rebinding_without_log_call_site():
    # w1 = w1 - ...: the caller's tensors never change, and the next backward finds no leaf to fill
    train = make_train(in_place=(), with_log=False)
    with pytest.raises(lab.CheckError, match="does not require grad|lost requires_grad"):
        lab.check_autograd_training(train)


@pytest.mark.parametrize("result, fragment", [
    (None, "got None"),
    ([1.0, 2.0], "expected 5 losses"),
    (np.ones(5), "expected a list"),
    ([1.0, 2.0, "3", 4.0, 5.0], "expected a number"),
    ([torch.ones(2)] * 5, "expected one number"),
])
def test_training_check_bad_return_values(result, fragment):
    def train(x, y, w1, w2, learning_rate, steps, log=None):
        make_train()(x, y, w1, w2, learning_rate, steps, log)
        return result
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_autograd_training(train)


def test_training_check_bad_log_arguments():
    def wrong_step(x, y, w1, w2, learning_rate, steps, log=None):
        return make_train()(x, y, w1, w2, learning_rate, steps, lambda t, loss: log(t + 1, loss))
    with pytest.raises(lab.CheckError, match="expected the step number 0"):
        lab.check_autograd_training(wrong_step)

    def wrong_loss(x, y, w1, w2, learning_rate, steps, log=None):
        return make_train()(x, y, w1, w2, learning_rate, steps, lambda t, loss: log(t, "loss"))
    with pytest.raises(lab.CheckError, match="expected the loss as a number"):
        lab.check_autograd_training(wrong_loss)

    def twice(x, y, w1, w2, learning_rate, steps, log=None):
        def both(t, loss):
            log(t, loss)
            log(t, loss)
        return make_train()(x, y, w1, w2, learning_rate, steps, both)
    with pytest.raises(lab.CheckError, match="log was called 10 times in 5 steps"):
        lab.check_autograd_training(twice)


def test_training_check_missing_log_parameter_and_stub():
    def no_log(x, y, w1, w2, learning_rate, steps):
        return []
    with pytest.raises(lab.CheckError, match="unexpected keyword argument 'log'"):
        lab.check_autograd_training(no_log)

    def stub(x, y, w1, w2, learning_rate, steps, log=None):
        raise NotImplementedError("Exercise 2: the training loop")
    with pytest.raises(lab.CheckError, match="not written yet"):
        lab.check_autograd_training(stub)
    with pytest.raises(lab.CheckError, match="to be a function"):
        lab.check_autograd_training("train_autograd")


# ------------------------------------------------------------------ find the bug

def fixed(**options):
    train = make_train(with_log=False, **options)
    return lambda x, y, w1, w2, learning_rate, steps: train(x, y, w1, w2, learning_rate, steps)


def test_fixed_check_passes(capsys):
    lab.check_fixed_training(fixed())
    lab.check_fixed_training(fixed(zero_where="none_before"))
    out = capsys.readouterr().out.splitlines()
    assert out == ["PASS  fixed loop: no gradient accumulation; losses and weights match the reference "
                   "over 5 steps"] * 2


@pytest.mark.parametrize("options, fragment", [
    (dict(zero=()), "the gradients still accumulate"),
    (dict(zero=("w2",)), "w1's gradients still accumulate"),
    (dict(zero=("w1",)), "w2's gradients still accumulate"),
    (dict(zero_where="before_update"), "w1 never changed"),
    (dict(sign=-1.0), "moved up the gradient"),
    (dict(no_grad=False), "inside `with torch.no_grad"),
    (dict(in_place=()), "does not require grad|lost requires_grad"),
    (dict(in_place=("w1",)), "replaces w1 by a new tensor"),
    (dict(updated=("w1",)), "w2 never changed"),
    (dict(use_lr=False), "do not match a correct run"),
    (dict(loss_after_update=True), r"the weights are right, but losses\[0\]"),
])
def test_fixed_check_mistakes(options, fragment):
    with pytest.raises(lab.CheckError, match=fragment):
        lab.check_fixed_training(fixed(**options))


def test_fixed_check_zeroing_a_grad_that_is_none():
    def train(x, y, w1, w2, learning_rate, steps):
        losses = []
        for _ in range(steps):
            w1.grad.zero_()
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            losses.append(loss.item())
        return losses
    with pytest.raises(lab.CheckError, match="None until the first backward"):
        lab.check_fixed_training(train)


def test_fixed_check_bad_inputs():
    with pytest.raises(lab.CheckError, match="not written yet"):
        lab.check_fixed_training(lambda *a: (_ for _ in ()).throw(NotImplementedError("Exercise 3")))
    with pytest.raises(lab.CheckError, match="got None"):
        lab.check_fixed_training(lambda *a: None)
    with pytest.raises(lab.CheckError, match="to be a function"):
        lab.check_fixed_training(42)

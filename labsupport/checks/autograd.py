"""Checks for notebook 03 (autograd): gradients predicted by hand, the training
loop with autograd, and the "find the bug" loop that never zeroes ``.grad``.

References come from an independent computation at check time: autograd on the
check's own copy of the function (:func:`predicted_reference`), and a training
trajectory simulated with the gradients of ``labsupport.checks.backprop.two_layer_grads``.

Example:
    >>> import torch, labsupport as lab
    >>> def train(x, y, w1, w2, learning_rate, steps, log=None):
    ...     losses = []
    ...     for t in range(steps):
    ...         loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
    ...         loss.backward()
    ...         if log is not None:
    ...             log(t, loss.item())
    ...         with torch.no_grad():
    ...             w1 -= learning_rate * w1.grad
    ...             w2 -= learning_rate * w2.grad
    ...             w1.grad.zero_()
    ...             w2.grad.zero_()
    ...         losses.append(loss.item())
    ...     return losses
    >>> lab.check_autograd_training(train)
    PASS  training loop: losses, gradients and weights match the reference at all 5 steps, and the loss falls
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from .backprop import two_layer_grads
from .core import CheckError, call_student, describe, expect_tensor, passed, rel_error

__all__ = ["check_grads_agree", "check_predicted_gradients", "predicted_reference",
           "check_autograd_training", "check_fixed_training"]

LR = 1e-3      # learning rate of the checks' small problem: the loss falls at every step
STEPS = 5
TOL = 1e-8     # float64 throughout


def _close(a: Any, b: torch.Tensor, tol: float = 1e-6) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and bool(torch.isfinite(a).all()) and rel_error(a, b) < tol)


# --------------------------------------------------------------------------- demo check

def check_grads_agree(got: Mapping[str, Any], expected: Mapping[str, torch.Tensor], *,
                      what: str = "gradients", tol: float = 1e-5) -> None:
    """Compare two sets of gradients name by name with a norm-wise relative error
    ``||got - expected|| / ||expected||``, and print the verdict.

    Used to show that autograd reproduces the hand-written gradients of notebook
    02: the verdict names the bound, not the digits, so it reads the same on any
    machine.

    Example:
        >>> g = {"w": torch.ones(3)}
        >>> check_grads_agree(g, {"w": torch.ones(3)}, what="autograd vs by hand")
        PASS  autograd vs by hand: w agree (relative error < 1e-05)
    """
    __tracebackhide__ = True
    if not isinstance(got, Mapping) or not isinstance(expected, Mapping):
        raise CheckError(f"expected two dicts name -> tensor, got {describe(got)} and {describe(expected)}")
    if not expected:
        raise CheckError("expected at least one gradient to compare, got an empty dict")
    for name, ref in expected.items():
        if name not in got:
            raise CheckError(f"no gradient named {name!r} to compare; got {', '.join(map(str, got)) or 'none'}")
        value = got[name]
        if value is None:
            raise CheckError(f"{name}: expected a gradient tensor, got None. Did loss.backward() run, "
                             f"and does {name} have requires_grad=True?")
        value = expect_tensor(value, name, shape=tuple(ref.shape), dtype=ref.dtype)
        a, b = value.detach().double().cpu(), ref.detach().double().cpu()
        err = float((a - b).norm() / b.norm().clamp(min=1e-30))
        if err >= tol:
            hint = ""
            if float((a + b).norm() / b.norm().clamp(min=1e-30)) < tol:
                hint = " It has the opposite sign."
            elif float((a - 2 * b).norm() / b.norm().clamp(min=1e-30)) < tol:
                hint = " It is twice the expected gradient: was backward run twice without zeroing .grad?"
            raise CheckError(f"{name}: the two gradients differ (relative error {err:.3g} >= {tol:g}).{hint}")
    passed(f"{what}: {', '.join(expected)} agree (relative error < {tol:g})")


# --------------------------------------------------------------------------- exercise: predict

def predicted_reference(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Autograd's gradients of ``L = sum((a * b + exp(a)) ** 2)`` with respect to ``a`` and ``b``.

    Example:
        >>> ga, gb = predicted_reference(torch.zeros(2), torch.ones(2))
        >>> ga.tolist(), gb.tolist()
        ([4.0, 4.0], [0.0, 0.0])
    """
    a = a.detach().clone().requires_grad_(True)
    b = b.detach().clone().requires_grad_(True)
    loss = ((a * b + a.exp()) ** 2).sum()
    ga, gb = torch.autograd.grad(loss, (a, b))
    return ga, gb


def check_predicted_gradients(predict: Callable) -> None:
    """Check ``predict(a, b) -> (grad_a, grad_b)``, the hand-derived gradients of
    ``L = sum((a * b + exp(a)) ** 2)`` (``c = a * b``, ``d = c + exp(a)``).

    The reference is autograd on the check's own copy of ``L``. Recognised
    mistakes: one of the two paths from ``a`` to ``L`` left out (through ``a * b``
    or through ``exp(a)``), the outer factor ``2 * d`` dropped, only its 2 dropped,
    the two gradients swapped, ``b`` where ``a`` belongs in ``grad_b``, and a
    summed (scalar) result.

    Example:
        >>> def predict(a, b):
        ...     d = a * b + a.exp()
        ...     return 2 * d * (b + a.exp()), 2 * d * a
        >>> check_predicted_gradients(predict)
        PASS  predicted gradients: grad_a and grad_b match autograd on 2 test cases
    """
    __tracebackhide__ = True
    for case, shape in enumerate([(5,), (3, 4)]):
        g = torch.Generator().manual_seed(30 + case)
        a = 0.5 * torch.randn(*shape, generator=g, dtype=torch.float64)
        b = torch.randn(*shape, generator=g, dtype=torch.float64)
        got = call_student(predict, a.clone(), b.clone(), what="your predict_grads(a, b)")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckError(f"predict_grads must return (grad_a, grad_b), got {describe(got)}")
        ref = predicted_reference(a, b)
        d = a * b + a.exp()
        mistakes = [
            ((2 * d * b, 2 * d * a), "grad_a misses the path through exp(a): a reaches L twice "
                                     "(in a * b and in exp(a)), and the two contributions add up"),
            ((2 * d * a.exp(), 2 * d * a), "grad_a misses the path through a * b: a reaches L twice "
                                           "(in a * b and in exp(a)), and the two contributions add up"),
            ((b + a.exp(), a), "the outer derivative is missing: dL/dd = 2 * d multiplies both gradients"),
            ((d * (b + a.exp()), d * a), "they are half the true gradients: d(d**2)/dd = 2 * d, "
                                         "did you drop the factor 2?"),
            ((ref[1], ref[0]), "grad_a and grad_b are swapped: return (grad_a, grad_b) in that order"),
        ]
        for i, (name, value, expected) in enumerate(zip(("grad_a", "grad_b"), got, ref)):
            if isinstance(value, torch.Tensor) and value.dim() == 0 and expected.dim() > 0:
                raise CheckError(f"{name} is a scalar; expected a tensor of shape {tuple(expected.shape)} "
                                 f"like {name[-1]}. The gradient of a scalar loss has the input's shape: "
                                 f"do not sum it.")
            value = expect_tensor(value, name, shape=tuple(expected.shape))
            if value.dtype != torch.float64:
                raise CheckError(f"{name} has dtype {value.dtype}; expected torch.float64 like a and b: "
                                 f"do not create new tensors with a fixed dtype.")
            if _close(value, expected):
                continue
            for grads, why in mistakes:
                if _close(value, grads[i]):
                    raise CheckError(f"{name} is wrong: {why}.")
            if i == 1 and _close(value, 2 * d * b):
                raise CheckError("grad_b is wrong: the derivative of a * b with respect to b is a, not b.")
            raise CheckError(f"{name} does not match autograd (max rel. error {rel_error(value, expected):.3g}). "
                             f"Write the chain step by step: dL/dd = 2 * d, then dd/da and dd/db.")
    passed("predicted gradients: grad_a and grad_b match autograd on 2 test cases")


# --------------------------------------------------------------------------- training loops

def _problem(seed: int = 300) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    N, D_in, H, D_out = 16, 12, 9, 4
    x = torch.randn(N, D_in, generator=g, dtype=torch.float64)
    y = torch.randn(N, D_out, generator=g, dtype=torch.float64)
    w1 = torch.randn(D_in, H, generator=g, dtype=torch.float64)
    w2 = torch.randn(H, D_out, generator=g, dtype=torch.float64)
    return x, y, w1, w2


def _loss(x, y, w1, w2) -> float:
    return float((torch.relu(x @ w1) @ w2 - y).pow(2).sum())


def _simulate(x, y, w1, w2, lr: float, steps: int, accumulate: tuple[bool, bool] = (False, False),
              sign: float = 1.0) -> dict:
    """A training run as a student's loop would produce it: each step's loss,
    the weights it started from, the gradients it used, and the final weights.
    ``accumulate`` models a loop that never resets w1.grad / w2.grad."""
    w = [w1.clone(), w2.clone()]
    acc = [torch.zeros_like(w1), torch.zeros_like(w2)]
    run = {"losses": [], "weights": [], "grads": []}
    for _ in range(steps):
        run["losses"].append(_loss(x, y, *w))
        run["weights"].append((w[0].clone(), w[1].clone()))
        fresh = two_layer_grads(x, y, *w)
        used = []
        for k in range(2):
            acc[k] = acc[k] + fresh[k] if accumulate[k] else fresh[k]
            used.append(acc[k])
            w[k] = w[k] - sign * lr * acc[k]
        run["grads"].append(tuple(used))
    run["final"] = (w[0], w[1])
    return run


_ERROR_HINTS = [
    ("leaf Variable that requires grad is being used in an in-place operation",
     "Update the weights inside `with torch.no_grad():` so autograd does not record the update."),
    ("does not require grad and does not have a grad_fn",
     "The weights lost requires_grad: `w1 = w1 - ...` makes a new tensor. Update in place "
     "(`w1 -= learning_rate * w1.grad`) inside `with torch.no_grad():`."),
    ("backward through the graph a second time",
     "Build the loss again in every step (forward pass inside the loop) and call backward once per loss."),
    ("'NoneType' object has no attribute 'zero_'",
     "w.grad is None until the first backward: zero it after the update, or set `w1.grad = None`."),
    ("NoneType",
     "A .grad is None: call loss.backward() before the update, and keep updating the tensors you were "
     "given (an assignment `w1 = w1 - ...` replaces w1 by a new tensor whose .grad stays None)."),
]


def _run(train: Callable, args: tuple, kwargs: dict, what: str) -> Any:
    """call_student, with a hint for the errors a broken training loop raises."""
    __tracebackhide__ = True
    try:
        return call_student(train, *args, what=what, **kwargs)
    except CheckError as err:
        cause = err.__cause__
        text = f"{type(cause).__name__}: {cause}" if cause is not None else ""
        for needle, hint in _ERROR_HINTS:
            if needle in text:
                raise CheckError(f"{err} {hint}") from None
        raise


def _losses_list(losses: Any, steps: int, name: str = "the returned losses") -> list[float]:
    __tracebackhide__ = True
    if not isinstance(losses, (list, tuple)):
        raise CheckError(f"{name}: expected a list of {steps} numbers (one loss per step), got "
                         f"{describe(losses)}. Does the function end with `return losses`?")
    if len(losses) != steps:
        raise CheckError(f"{name}: expected {steps} losses for {steps} steps, got {len(losses)}. "
                         f"Append one loss per step.")
    out = []
    for t, value in enumerate(losses):
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                raise CheckError(f"{name}[{t}] is a tensor that still carries its graph (requires_grad=True): "
                                 f"append loss.item() so each step's graph can be freed.")
            if value.numel() != 1:
                raise CheckError(f"{name}[{t}]: expected one number, got {describe(value)}")
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CheckError(f"{name}[{t}]: expected a number (loss.item()), got {describe(value)}")
        out.append(float(value))
    return out


def _same(a: float, b: float, tol: float = 1e-9) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-30)


def _explain_update(before: tuple, after: tuple, grads: tuple, lr: float, step: int) -> str:
    """Why the weights after a step are not ``before - lr * grads``."""
    for k, name in enumerate(("w1", "w2")):
        delta = after[k] - before[k]
        g = grads[k]
        if _close(delta, -lr * g):
            continue
        if float(delta.abs().max()) == 0.0:
            return (f"{name} did not change in step {step}. Either its gradient was reset before the "
                    f"update used it (reset after the update), or `{name} = {name} - ...` rebinds a local "
                    f"name and the caller's {name} stays as it was: update in place "
                    f"(`{name} -= learning_rate * {name}.grad` inside torch.no_grad()).")
        if _close(delta, lr * g):
            return (f"{name} moved up the gradient in step {step}: subtract learning_rate * {name}.grad, "
                    f"do not add it.")
        ratio = float((delta * -g).sum() / (g * g).sum().clamp(min=1e-300))
        if _close(delta, -ratio * g):
            return (f"{name} moved by {ratio:.3g} * grad in step {step}; expected learning_rate * grad with "
                    f"learning_rate={lr:g}: use the learning_rate argument.")
        return (f"{name} after step {step} is not {name} - learning_rate * {name}.grad "
                f"(max rel. error {rel_error(after[k], before[k] - lr * g):.3g}).")
    return ""


def _accumulation_message(name: str, step: int) -> str:
    return (f"{name}.grad in step {step} equals this step's gradient plus the earlier ones: gradients "
            f"accumulate, because backward() adds into .grad. Reset them once per step "
            f"({name}.grad.zero_() after the update, or {name}.grad = None before backward).")


def check_autograd_training(train: Callable, *, steps: int = STEPS) -> None:
    """Check ``train(x, y, w1, w2, learning_rate, steps, log=None) -> losses``,
    the two-layer net's gradient-descent loop written with autograd.

    The check runs it on a small float64 problem and passes a ``log(t, loss)``
    callback that records the weights and their ``.grad`` at that moment (after
    ``loss.backward()``, before the update). Everything is compared with a run
    it simulates itself, gradients from an independent autograd call:

    * each step's loss and gradient (recognises gradients that accumulate because
      ``.grad`` is never reset, gradients zeroed before they are used, ``.grad``
      still None, a doubled gradient from two backward calls, a mean loss);
    * each update (recognises weights that never change because ``w1 = w1 - ...``
      rebinds a name, a step up the gradient, a learning rate not used);
    * the returned losses (one number per step, computed before the update; a
      tensor still holding its graph is refused) and that the loss falls;
    * errors a broken loop raises (an update outside ``torch.no_grad()``,
      weights that lost ``requires_grad``, backward twice through one graph).

    Example (a loop that never resets ``.grad``):
        >>> def train(x, y, w1, w2, learning_rate, steps, log=None):
        ...     losses = []
        ...     for t in range(steps):
        ...         loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        ...         loss.backward()
        ...         log(t, loss.item())
        ...         with torch.no_grad():
        ...             w1 -= learning_rate * w1.grad
        ...             w2 -= learning_rate * w2.grad
        ...         losses.append(loss.item())
        ...     return losses
        >>> check_autograd_training(train)
        Traceback (most recent call last):
        ...
        labsupport.checks.core.CheckError: w1.grad in step 1 equals this step's gradient plus the earlier ones: ...
    """
    __tracebackhide__ = True
    x, y, w1_0, w2_0 = _problem()
    w1 = w1_0.clone().requires_grad_(True)
    w2 = w2_0.clone().requires_grad_(True)
    records: list[tuple] = []

    def log(t: Any, loss: Any) -> None:
        snap = lambda p: None if p.grad is None else p.grad.detach().clone()  # noqa: E731
        records.append((t, loss, snap(w1), snap(w2), w1.detach().clone(), w2.detach().clone()))

    losses = _run(train, (x, y, w1, w2, LR, steps), {"log": log},
                  "your train_autograd(x, y, w1, w2, learning_rate, steps, log)")
    losses = _losses_list(losses, steps)
    ref = _simulate(x, y, w1_0, w2_0, LR, steps)
    assert all(b < a for a, b in zip(ref["losses"], ref["losses"][1:])), "reference loss must fall"
    if not records:
        raise CheckError("log was never called: call log(t, loss.item()) once per step, after "
                         "loss.backward() and before the update, so it can see this step's gradients.")
    if len(records) != steps:
        raise CheckError(f"log was called {len(records)} times in {steps} steps; expected once per step.")
    for t, (t_got, loss_got, g1, g2, v1, v2) in enumerate(records):
        if isinstance(t_got, torch.Tensor) and t_got.numel() == 1:
            t_got = t_got.item()
        if t_got != t:
            raise CheckError(f"log's first argument in step {t}: expected the step number {t} (0, 1, 2, ...), "
                             f"got {t_got!r}.")
        if t == 0 and not (_close(v1, w1_0) and _close(v2, w2_0)):
            if _close(v1, w1_0 - LR * ref["grads"][0][0]):
                raise CheckError("log was called after the update: call it between loss.backward() and "
                                 "the update, when .grad holds this step's gradient and the weights are "
                                 "the ones that produced the loss.")
            raise CheckError("the weights changed before the first log call: call log right after "
                             "loss.backward(), before the update.")
        if t > 0:
            prev = records[t - 1]
            why = _explain_update((prev[4], prev[5]), (v1, v2), (prev[2], prev[3]), LR, t - 1)
            if why:
                raise CheckError(why)
        if isinstance(loss_got, torch.Tensor) and loss_got.numel() == 1:
            loss_got = loss_got.item()
        if isinstance(loss_got, bool) or not isinstance(loss_got, (int, float)):
            raise CheckError(f"log's second argument in step {t}: expected the loss as a number "
                             f"(loss.item()), got {describe(loss_got)}")
        loss_val = float(loss_got)
        expected_loss = _loss(x, y, v1, v2)
        if not _same(loss_val, expected_loss):
            hint = ""
            if _same(loss_val, expected_loss / y.numel()):
                hint = " It is the mean: the lecture's loss is the sum of squared errors."
            raise CheckError(f"the loss in step {t}: expected {expected_loss:.6g}, "
                             f"sum((relu(x @ w1) @ w2 - y) ** 2), got {loss_val:.6g}.{hint}")
        fresh = two_layer_grads(x, y, v1, v2)
        for name, got, want, k in (("w1", g1, fresh[0], 0), ("w2", g2, fresh[1], 1)):
            if got is None:
                raise CheckError(f"{name}.grad is None when log was called in step {t}: call "
                                 f"loss.backward() before log (and keep {name} a leaf with requires_grad=True).")
            if _close(got, want, 1e-9):
                continue
            if float(got.abs().max()) == 0.0:
                raise CheckError(f"{name}.grad is all zeros when log was called in step {t}: the gradients "
                                 f"were reset between backward and the update. Reset them after the update "
                                 f"(or before backward).")
            earlier = sum(r[2 + k] for r in records[:t])
            if t > 0 and _close(got, want + earlier, 1e-9):
                raise CheckError(_accumulation_message(name, t))
            if _close(got, 2 * want, 1e-9):
                raise CheckError(f"{name}.grad in step {t} is twice the gradient: backward ran twice "
                                 f"on the same loss, or the loss was added twice.")
            raise CheckError(f"{name}.grad in step {t} does not match the gradient of the loss (max rel. "
                             f"error {rel_error(got, want):.3g}). Is the forward pass relu(x @ w1) @ w2?")
    last = records[-1]
    why = _explain_update((last[4], last[5]), (w1.detach(), w2.detach()), (last[2], last[3]), LR, steps - 1)
    if why:
        raise CheckError(why)
    for t, (value, want) in enumerate(zip(losses, ref["losses"])):
        if not _same(value, want):
            hint = ""
            if t + 1 < steps and _same(value, ref["losses"][t + 1]):
                hint = " It is the next step's loss: append the loss computed before the update."
            raise CheckError(f"losses[{t}]: expected {want:.6g}, the loss of step {t} before its update, "
                             f"got {value:.6g}.{hint}")
    if not losses[-1] < losses[0]:
        raise CheckError(f"the loss did not fall: {losses[0]:.4g} -> {losses[-1]:.4g}")
    passed(f"training loop: losses, gradients and weights match the reference at all {steps} steps, "
           f"and the loss falls")


def check_fixed_training(train: Callable, *, steps: int = STEPS) -> None:
    """Check the repaired "find the bug" loop ``train(x, y, w1, w2, learning_rate, steps) -> losses``.

    Runs it on a small float64 problem and compares the returned losses and the
    final weights with simulated runs: the correct one, and one that never resets
    ``.grad`` (for both weights, or only one of them). Recognised mistakes:
    gradients still accumulating (named per weight), weights that never change
    (reset before the update, or ``w1 = w1 - ...``), a step up the gradient, and
    the errors a broken loop raises.

    Example:
        >>> def train_fixed(x, y, w1, w2, learning_rate, steps):
        ...     losses = []
        ...     for t in range(steps):
        ...         loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        ...         losses.append(loss.item())
        ...         loss.backward()
        ...         with torch.no_grad():
        ...             w1 -= learning_rate * w1.grad
        ...             w2 -= learning_rate * w2.grad
        ...             w1.grad = None
        ...             w2.grad = None
        ...     return losses
        >>> check_fixed_training(train_fixed)
        PASS  fixed loop: no gradient accumulation; losses and weights match the reference over 5 steps
    """
    __tracebackhide__ = True
    x, y, w1_0, w2_0 = _problem(301)
    w1 = w1_0.clone().requires_grad_(True)
    w2 = w2_0.clone().requires_grad_(True)
    losses = _run(train, (x, y, w1, w2, LR, steps), {},
                  "your train_fixed(x, y, w1, w2, learning_rate, steps)")
    losses = _losses_list(losses, steps)
    final = (w1.detach(), w2.detach())
    ref = _simulate(x, y, w1_0, w2_0, LR, steps)
    if _close(final[0], ref["final"][0], 1e-9) and _close(final[1], ref["final"][1], 1e-9):
        for t, (value, want) in enumerate(zip(losses, ref["losses"])):
            if not _same(value, want):
                raise CheckError(f"the weights are right, but losses[{t}] is wrong: expected {want:.6g}, "
                                 f"the loss of step {t} before its update, got {value:.6g}.")
        passed(f"fixed loop: no gradient accumulation; losses and weights match the reference over "
               f"{steps} steps")
        return
    variants = [
        ((True, True), 1.0, "the gradients still accumulate: from the second step on, each update uses "
                            "the sum of all gradients so far, because backward() adds into .grad. Reset "
                            "w1.grad and w2.grad once per step (.grad.zero_() after the update, or "
                            ".grad = None before backward)."),
        ((True, False), 1.0, "w1's gradients still accumulate (w2's are reset): reset w1.grad in every "
                             "step too."),
        ((False, True), 1.0, "w2's gradients still accumulate (w1's are reset): reset w2.grad in every "
                             "step too."),
        ((False, False), -1.0, "the weights moved up the gradient: subtract learning_rate * grad."),
    ]
    for accumulate, sign, why in variants:
        run = _simulate(x, y, w1_0, w2_0, LR, steps, accumulate, sign)
        if _close(final[0], run["final"][0], 1e-9) and _close(final[1], run["final"][1], 1e-9):
            raise CheckError(why)
    for name, got, start in (("w1", final[0], w1_0), ("w2", final[1], w2_0)):
        if float((got - start).abs().max()) == 0.0:
            raise CheckError(f"{name} never changed. Either the gradients are reset before the update uses "
                             f"them (reset after the update), or `{name} = {name} - ...` rebinds a name "
                             f"instead of updating the caller's tensor in place (`{name} -= ...`).")
    raise CheckError(f"the final weights do not match a correct run of {steps} steps (max rel. error "
                     f"w1 {rel_error(final[0], ref['final'][0]):.3g}, w2 {rel_error(final[1], ref['final'][1]):.3g}). "
                     f"Change only what the bug needs: reset the gradients once per step.")

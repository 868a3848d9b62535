"""Checks of notebook 06 (torch.optim): the reference passes, each listed mistake is named (the wrong update rules
are generated from the check's own spec), the ladder keeps the formula for later, bad input gets one sentence."""

import inspect
import time

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import nb06_optim, running


class SGDMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, group)

    def update(self, p, group):
        state = self.state[p]
        if "v" not in state:
            state["v"] = p.grad.clone()
        else:
            state["v"].mul_(group["momentum"]).add_(p.grad)
        p.sub_(group["lr"] * state["v"])


def variant(**body):
    return type("SGDMomentum", (SGDMomentum,), body)


def _zeros_first(self, p, group):
    state = self.state[p]
    if "velocity" not in state:
        state["velocity"] = torch.zeros_like(p)
    state["velocity"] = group["momentum"] * state["velocity"] + p.grad
    p.add_(state["velocity"], alpha=-group["lr"])


def _data_assigned(self, p, group):
    state = self.state[p]
    buf = state.setdefault("buf", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(p.grad)
    p.data = p.data - group["lr"] * buf


def _zero_grad_override(self, set_to_none=True):
    for group in self.param_groups:
        for p in group["params"]:
            p.grad = None


def _velocity_as_the_state(self, p, group):
    """The velocity is self.state[p] itself (a tensor, not a dict), and self.state also counts the steps."""
    self.state["steps"] = self.state.get("steps", 0) + 1
    v = self.state.get(p)
    if not isinstance(v, torch.Tensor):
        self.state[p] = p.grad.clone()
    else:
        v.mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * self.state[p])


CORRECT = {
    "the notebook's": SGDMomentum,
    # ninth audit: the check now looks for the state under each parameter; this keeps it there in its own way
    "velocity as the state itself, a step count beside": variant(update=_velocity_as_the_state),
    "velocity from zeros, out of place": variant(update=_zeros_first),
    "velocity from zeros in place, p.data assigned": variant(update=_data_assigned),
    "own zero_grad": variant(zero_grad=_zero_grad_override),
}


@pytest.mark.parametrize("design", list(CORRECT))
def test_correct_designs_pass(design, capsys):
    lab.check_sgd_momentum(CORRECT[design])
    assert capsys.readouterr().out.startswith("PASS  SGDMomentum: same parameters")


def student_from(mistake):
    """A student's SGDMomentum that makes a rule mistake, built from the check's own WrongRule spec."""
    wrong = mistake.matches
    assert isinstance(wrong, nb06_optim.WrongRule)

    class Student(nb06_optim._RuleOptimizer):
        def __init__(self, params, lr=0.01, momentum=0.9):
            super().__init__(params, wrong.rules[-1], lr, momentum, wrong.settings[-1], wrong.fixed[-1])

    return Student


@pytest.mark.parametrize("mistake", nb06_optim.RULE_MISTAKES, ids=lambda m: m.name)
def test_each_wrong_rule_is_named(mistake):
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(student_from(mistake))
    assert err.value.mistake == mistake.name


VARIANTS = [(m, *variant) for m in nb06_optim.RULE_MISTAKES for variant in m.matches.variants()]


@pytest.mark.parametrize(
    "mistake, rule, settings, fixed", VARIANTS, ids=lambda v: getattr(v, "name", getattr(v, "__name__", v))
)
def test_every_rule_variant_is_named(mistake, rule, settings, fixed):
    class Student(nb06_optim._RuleOptimizer):
        def __init__(self, params, lr=0.01, momentum=0.9):
            super().__init__(params, rule, lr, momentum, settings, fixed)

    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(Student)
    assert err.value.mistake == mistake.name


def _aliased(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _outside_state(self, p, group):
    velocities = self.__dict__.setdefault("velocities", {})
    if p not in velocities:
        velocities[p] = p.grad.clone()
    else:
        velocities[p].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * velocities[p])


def _float32(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = torch.zeros(p.shape)
    state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _by_shape(self, p, group):
    state = self.state[tuple(p.shape)]  # the two biases of the check share a shape, and so a velocity
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _shared(self, p, group):
    if not hasattr(self, "v"):
        self.v = p.grad.clone()
    else:
        self.v = self.v * group["momentum"] + p.grad
    p.sub_(group["lr"] * self.v)


def _no_skip(self):
    for group in self.param_groups:
        for p in group["params"]:
            self.update(p, group)


def _no_no_grad(self):
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                self.update(p, group)


def _break_at_none(self):
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is None:
                break
            self.update(p, group)


def _keyed_by_id(self, p, group):
    state = self.state[id(p)]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _keyed_by_position(self):
    """Velocities keyed by (group index, position in the group): every run of the check comes out right."""
    for index, group in enumerate(self.param_groups):
        for position, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            state = self.state[(index, position)]
            if "v" not in state:
                state["v"] = p.grad.clone()
            else:
                state["v"].mul_(group["momentum"]).add_(p.grad)
            p.sub_(group["lr"] * state["v"])


def _first_group_only(self):
    for group in self.param_groups[:1]:
        for p in group["params"]:
            if p.grad is not None:
                self.update(p, group)


def _zeros_then_leave(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = torch.zeros_like(p)
        return
    state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _no_super(self, params, lr=0.01, momentum=0.9):
    self.lr = lr


def _no_momentum_default(self, params, lr=0.01, momentum=0.9):
    torch.optim.Optimizer.__init__(self, params, dict(lr=lr))


def _no_defaults(self, params, lr=0.01, momentum=0.9):
    torch.optim.Optimizer.__init__(self, params)


@torch.no_grad()
def _step_with_closure(self, closure):
    SGDMomentum.step(self)


def _momentum_under_its_symbol(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["mu"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _lr_as_a_name(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(lr * state["v"])  # noqa: F821 (__init__'s parameter, as a student reads it in step)


def _self_params(self):
    for p in self.params:
        if p.grad is not None:
            self.update(p, self.param_groups[0])


def _state_not_started(self, p, group):
    state = self.state[p]
    state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _missing_gradient_as_zeros(self):
    """Thirteenth audit: a None gradient taken for zeros passed, since the check's unused parameter never had a
    velocity; once its gradient stops (a branch of forward skips it), its old velocity moves it on."""
    for group in self.param_groups:
        for p in group["params"]:
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            state = self.state[p]
            state["v"] = grad.clone() if "v" not in state else group["momentum"] * state["v"] + grad
            p.sub_(group["lr"] * state["v"])


def _velocity_dropped_at_none(self):
    """Thirteenth audit: a velocity thrown away at a missing gradient passed (the gradient never came back)."""
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is None:
                self.state[p].clear()
                continue
            self.update(p, group)


def _init_other_names(self, params, lr=0.01, momentum=0.9):
    torch.optim.Optimizer.__init__(self, params, {"learning_rate": lr, "mu": momentum})


def _update_other_names(self, p, group):
    state = self.state[p]
    state["v"] = p.grad.clone() if "v" not in state else group["mu"] * state["v"] + p.grad
    p.sub_(group["learning_rate"] * state["v"])


def _grad_set_to_none_after(self, p, group):
    """06.3: the update, then p.grad = None, as zero_grad() would."""
    SGDMomentum.update(self, p, group)
    p.grad = None


def _init_swapped(self, params, lr=0.01, momentum=0.9):
    torch.optim.Optimizer.__init__(self, params, {"lr": momentum, "momentum": lr})


# Mistake name -> a student's SGDMomentum that makes it (the rule mistakes are generated above).
def _step_as_generator(self):
    """Fifteenth audit: a generator step() was told "step() computes new values but never writes them"."""
    yield SGDMomentum.step(self)


CLASS_MISTAKES = {
    "step() is a generator": variant(step=_step_as_generator),
    "setting read as a plain name": variant(update=_lr_as_a_name),  # seventh audit: bare NameError
    "parameters looked up in the wrong place": variant(step=torch.no_grad()(_self_params)),
    "state read before it is created": variant(update=_state_not_started),
    "velocity aliases p.grad": variant(update=_aliased),
    "velocity outside self.state": variant(update=_outside_state),
    "state keyed by a number": variant(update=_keyed_by_id),
    "loop left at a None gradient": variant(step=torch.no_grad()(_break_at_none)),
    "a group never updated": variant(step=torch.no_grad()(_first_group_only)),
    "first step skipped": variant(update=_zeros_then_leave),
    "velocity in float32": variant(update=_float32),
    "one velocity for all parameters": variant(update=_shared),
    "state keyed by shape": variant(update=_by_shape),  # passed before the biases shared a shape
    "None gradient not skipped": variant(step=torch.no_grad()(_no_skip)),
    "update recorded by autograd": variant(step=_no_no_grad),
    "no super().__init__()": variant(__init__=_no_super),
    "setting missing from defaults": variant(__init__=_no_momentum_default),
    "no defaults given to Optimizer": variant(__init__=_no_defaults),  # eighth audit: bare TypeError
    "step() requires an argument": variant(step=_step_with_closure),  # eighth audit: bare TypeError
    "setting read under another key": variant(update=_momentum_under_its_symbol),  # eighth audit: bare KeyError
    # ninth audit: state keyed by position passed, though the prompt keeps v in self.state[p]
    "state not kept under the parameter": variant(step=torch.no_grad()(_keyed_by_position)),
    "a parameter without a gradient still moves": variant(step=torch.no_grad()(_missing_gradient_as_zeros)),
    "velocity dropped at a missing gradient": variant(step=torch.no_grad()(_velocity_dropped_at_none)),
    # thirteenth audit: told "every group is updated with the same settings" (other names), expected/got (swapped)
    "settings under other names": variant(__init__=_init_other_names, update=_update_other_names),
    "lr and momentum swapped in the defaults": variant(__init__=_init_swapped),
    # fourteenth audit: p.grad = None after the update passed (the check's loop clears the gradients anyway)
    "gradients cleared in step()": variant(update=_grad_set_to_none_after),
}


def _grad_zeroed_after(self, p, group):
    """06.3: the update, then the gradient zeroed in place."""
    SGDMomentum.update(self, p, group)
    p.grad.zero_()


@torch.no_grad()
def _zero_grad_called_in_step(self):
    """06.3: the notebook's step, then zero_grad() inside it."""
    SGDMomentum.step.__wrapped__(self)
    self.zero_grad()


@pytest.mark.parametrize(
    "body", [{"update": _grad_zeroed_after}, {"step": _zero_grad_called_in_step}], ids=["zero_", "zero_grad()"]
)
def test_other_ways_of_clearing_the_gradients_in_step_are_named(body):
    """Fourteenth audit: the prompt's step() reads the gradients; torch.optim.SGD, which the check trains beside,
    leaves them to the loop, and a loop that accumulates gradients over batches or clips them after the step needs
    them there."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(**body))
    assert err.value.mistake == "gradients cleared in step()"
    assert "after step 1" in err.value.message


def test_every_listed_mistake_has_a_test():
    listed = {m.name for m in vars(nb06_optim).values() if isinstance(m, lab.checks.core.Mistake)}
    rules = {m.name for m in nb06_optim.RULE_MISTAKES}
    assert listed == set(CLASS_MISTAKES)
    assert rules.isdisjoint(listed)


@pytest.mark.parametrize("name", list(CLASS_MISTAKES))
def test_class_mistakes_are_named(name):
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(CLASS_MISTAKES[name])
    assert err.value.mistake == name
    assert err.value.hint and err.value.look


def _first_group_settings(self):
    group = self.param_groups[0]
    for each in self.param_groups:
        for p in each["params"]:
            if p.grad is not None:
                self.update(p, group)


def _last_group_only(self):
    for group in self.param_groups:
        params = group["params"]
    for p in params:  # an indentation slip: the loop over the parameters left the loop over the groups
        if p.grad is not None:
            self.update(p, group)


def _leave_step_at_first(self):
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "v" not in state:
                state["v"] = torch.zeros_like(p)
                return
            state["v"].mul_(group["momentum"]).add_(p.grad)
            p.sub_(group["lr"] * state["v"])


def _velocity_without_momentum(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"] += p.grad
    p.sub_(group["lr"] * state["v"])


def _momentum_times_gradient(self, p, group):
    state = self.state[p]
    v = state.get("v", torch.zeros_like(p))
    state["v"] = v + group["momentum"] * p.grad
    p.sub_(group["lr"] * state["v"])


def _momentum_written_in(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(0.9).add_(p.grad)
    p.sub_(group["lr"] * state["v"])


def _step_along_velocity_and_gradient(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["momentum"]).add_(p.grad)
    p.sub_(group["lr"] * (state["v"] + p.grad))


def _momentum_times_sum(self, p, group):
    state = self.state[p]
    v = state.get("v", torch.zeros_like(p))
    state["v"] = group["momentum"] * (v + p.grad)
    p.sub_(group["lr"] * state["v"])


def _both_settings_written_in(self, p, group):
    """Round 12, second pass: the signature's 0.01 and 0.9 both written into step() got a generic expected/got."""
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"] = 0.9 * state["v"] + p.grad
    p.sub_(0.01 * state["v"])


def _velocity_rebound(self, p, group):
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
        v = state["v"]
    else:
        v = state["v"]
        v = group["momentum"] * v + p.grad  # a new tensor; state["v"] keeps the first step's
    p.sub_(group["lr"] * v)


def _velocity_rebound_from_zeros(self, p, group):
    v = self.state[p].setdefault("v", torch.zeros_like(p))
    v = group["momentum"] * v + p.grad
    p.sub_(group["lr"] * v)


# More ways students write a listed mistake: description -> (mistake name, a student's SGDMomentum).
WRITTEN_AS = {
    "group = self.param_groups[0] for every group": (
        "group settings ignored",
        variant(step=torch.no_grad()(_first_group_settings)),
    ),
    "the parameter loop indented out of the group loop": (
        "a group never updated",
        variant(step=torch.no_grad()(_last_group_only)),
    ),
    "return from step() after creating a velocity": (
        "first step skipped",
        variant(step=torch.no_grad()(_leave_step_at_first)),
    ),
    # found by the audit: these three got expected/got only, on every try
    "v += grad": ("momentum factor missing", variant(update=_velocity_without_momentum)),
    "v = v + momentum * grad, from zeros": ("momentum on the gradient", variant(update=_momentum_times_gradient)),
    "v.mul_(0.9) in step()": ("setting written into step()", variant(update=_momentum_written_in)),
    "0.9 and 0.01 both in step()": ("setting written into step()", variant(update=_both_settings_written_in)),
    # found by the fourth audit: both got expected/got only
    "p -= lr * (v + grad)": ("velocity plus gradient", variant(update=_step_along_velocity_and_gradient)),
    "v = momentum * (v + grad)": ("momentum on the gradient", variant(update=_momentum_times_sum)),
    # found by the fifth audit: the first got expected/got only; the second is "no velocity kept", which now says how
    "v = momentum * v + grad, never stored back": ("velocity not stored back", variant(update=_velocity_rebound)),
    "v from zeros, never stored back": ("no velocity kept", variant(update=_velocity_rebound_from_zeros)),
}


@pytest.mark.parametrize("written", list(WRITTEN_AS))
def test_other_ways_of_writing_a_mistake_are_named(written):
    name, cls = WRITTEN_AS[written]
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(cls)
    assert err.value.mistake == name


def _student_dampening():
    return student_from(next(m for m in nb06_optim.RULE_MISTAKES if m.name == "dampening"))


def test_the_formula_waits_for_the_third_rung(capsys):
    """Issue 23: 06.3's hint gave the formula on the first failure."""
    with pytest.raises(lab.CheckError) as first:
        lab.check_sgd_momentum(_student_dampening())
    shown = "\n".join(first.value.rendered())
    assert "after step 1 of 6" in shown and "expected:" in shown and "got:" in shown
    assert "dampened" not in shown and "momentum * v" not in shown and "likely mistake:" not in shown
    assert "momentum * v" not in first.value.hint and "=" not in first.value.hint
    assert "momentum * v" not in first.value.look and "the line that updates v" in first.value.look
    with pytest.raises(lab.CheckError) as second:
        lab.check_sgd_momentum(_student_dampening())
    shown = "\n".join(second.value.rendered())
    assert "likely mistake: the gradient is scaled down (dampened)" in shown
    assert "look at" not in shown
    lab.hint("06.3")
    assert "look at: step(): the line that updates v: how much of this step's gradient" in capsys.readouterr().out


def test_the_module_has_no_lambdas_or_walruses():
    source = inspect.getsource(nb06_optim)
    assert "lambda" not in source and ":=" not in source


def _forever(self, *args, **kwargs):
    while True:
        pass


class NotAnOptimizer:
    def __init__(self, params, lr=0.1, momentum=0.9):
        pass


BAD_INPUT = {
    "None": (None, "SGDMomentum is None"),
    "a list": ([SGDMomentum], "Got list"),
    "an instance": (SGDMomentum([torch.zeros(1, requires_grad=True)]), "instance of it"),
    "numpy": (np.zeros(2), "numpy"),
    "a string": ("SGDMomentum", "expected the class"),
    "another class": (NotAnOptimizer, "subclass of torch.optim.Optimizer"),
    "torch.optim.SGD": (torch.optim.SGD, "derives from torch.optim.SGD"),
    "torch.optim.Adam": (torch.optim.Adam, "TypeError"),
    "step raises": (variant(step=lambda self: 1 / 0), "ZeroDivisionError"),
    "step not written": (variant(step=lambda self: (_ for _ in ()).throw(NotImplementedError("Ex 3"))), "not written"),
    "NaN parameters": (variant(update=lambda self, p, group: p.fill_(float("nan"))), "not finite"),
    "float32 parameters": (variant(update=lambda self, p, group: setattr(p, "data", p.data.float())), "dtype"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_gets_a_sentence(case, capsys):
    bad, fragment = BAD_INPUT[case]
    with pytest.raises(lab.CheckError, match=fragment) as err:
        lab.check_sgd_momentum(bad)
    assert "PASS" not in capsys.readouterr().out
    assert "could not use" not in str(err.value) and "Traceback" not in str(err.value)


@pytest.mark.parametrize("steps", [0, 1, 2.5, None, "6", True, 10**7, -3])
def test_absurd_steps_are_refused_at_once(steps):
    """Issue 23: check_sgd_momentum(steps=10**7) hung."""
    started = time.perf_counter()
    with pytest.raises(lab.CheckError, match="steps must be") as err:
        lab.check_sgd_momentum(SGDMomentum, steps=steps)
    assert time.perf_counter() - started < 1
    assert err.value.usage


def test_never_returning_code_is_stopped(monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    for cls in (variant(step=_forever), variant(__init__=_forever), variant(zero_grad=_forever)):
        started = time.perf_counter()
        with pytest.raises(lab.CheckError, match="did not (return|finish) within"):
            lab.check_sgd_momentum(cls)
        assert time.perf_counter() - started < 5


def test_slow_steps_are_stopped_as_a_whole(monkeypatch):
    def slow(self):
        time.sleep(0.05)
        SGDMomentum.step(self)

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match="did not (return|finish) within"):
        lab.check_sgd_momentum(variant(step=slow), steps=20)


# ------------------------------------------------------------------ 06.1 check_sweep_prediction


@pytest.fixture(scope="module")
def sweep_result():
    """Notebook 06's sweep at the check's default 50 steps, run once for the module: it is seeded, so every
    call gives the same losses."""
    return nb06_optim._sweep(50)


@pytest.fixture
def swept(sweep_result, monkeypatch):
    """check_sweep_prediction without re-running the sweep: it gets the sweep's result measured above."""

    def sweep(steps):
        assert steps == 50
        return dict(sweep_result)

    monkeypatch.setattr(nb06_optim, "_sweep", sweep)


def test_sweep_prediction_right(swept, capsys):
    lab.check_sweep_prediction("SGD")
    out = capsys.readouterr().out
    assert out.startswith("PASS  the sweep's winner: 'sgd' is right (recorded answer: 'sgd')")
    assert "sgd 1, momentum 0.1, adam 0.01" not in out  # the explanation waits for the student's own
    lab.hint("06.1")
    assert "sgd 1, momentum 0.1, adam 0.01" in capsys.readouterr().out


def test_sweep_prediction_records_the_first_answer_and_asks_why(swept, capsys):
    lab.check_sweep_prediction("adam")
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and "recorded answer: 'adam'" in first
    assert "Now explain: compare the best learning rates" in first
    lab.check_sweep_prediction("sgd")
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 'adam'" in second
    assert "does not replace it" in second


@pytest.mark.parametrize("bad", [None, "rmsprop", 3, ["sgd"], float("nan"), torch.zeros(2)])
def test_sweep_prediction_bad_input_before_measuring(bad):
    started = time.perf_counter()
    with pytest.raises(lab.CheckError):
        lab.check_sweep_prediction(bad)
    assert time.perf_counter() - started < 1


@pytest.mark.parametrize("steps", [0, 10**6, "50", None])
def test_sweep_refuses_absurd_steps(steps):
    with pytest.raises(lab.CheckError, match="steps must be"):
        lab.check_sweep_prediction("sgd", steps=steps)


@pytest.mark.parametrize("mistake", nb06_optim.RULE_MISTAKES, ids=lambda m: m.name)
def test_rule_hints_name_the_cause_in_words(mistake):
    assert "=" not in mistake.why and "*" not in mistake.why
    assert mistake.look.startswith(("step():", "__init__:"))


def _hand_made_groups(self, params, lr=0.01, momentum=0.9):
    self.param_groups = [{"params": list(params), "lr": lr, "momentum": momentum}]
    self.state = {}


def test_param_groups_made_by_hand_without_super_init_are_named():
    with pytest.raises(lab.CheckError, match="never ran torch.optim.Optimizer's __init__") as info:
        lab.check_sgd_momentum(variant(__init__=_hand_made_groups))
    assert info.value.mistake == "no super().__init__()"


def _return_at_none(self):
    for group in self.param_groups:
        for p in group["params"]:
            if p.grad is None:
                return
            self.update(p, group)


def test_a_return_at_a_none_gradient_hears_about_return():
    """06.3: `return` at the parameter without a gradient was told it "leaves the loop over its group"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(step=torch.no_grad()(_return_at_none)))
    assert err.value.mistake == "loop left at a None gradient"
    assert "or step() itself (return)" in err.value.hint


def _groups_indexed_by_name(self):
    for p in self.param_groups["params"]:
        if p.grad is not None:
            self.update(p, self.param_groups[0])


@torch.no_grad()
def _loop_over_the_group_dict(self):
    for group in self.param_groups:
        for p in group:
            if p.grad is not None:
                self.update(p, group)


def test_a_loop_over_a_group_dict_is_named():
    """06.3 audit 8: `for p in group` walks the dict's keys; a bare AttributeError on a str."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(step=_loop_over_the_group_dict))
    assert err.value.mistake == "parameters looked up in the wrong place"


def test_param_groups_indexed_like_one_group_is_named():
    """06.3, seventh audit: `self.param_groups['params']` got Python's bare TypeError about list indices."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(step=torch.no_grad()(_groups_indexed_by_name)))
    assert err.value.mistake == "parameters looked up in the wrong place"
    assert "group['params']" not in str(err.value)  # the repaired line is never quoted


def _step_left_as_given(self):
    pass


def _init_left_as_given(self, params, lr=0.01, momentum=0.9): ...


@pytest.mark.parametrize("body", [{"step": torch.no_grad()(_step_left_as_given)}, {"__init__": _init_left_as_given}])
def test_a_method_left_as_the_template_gave_it_is_not_written_yet(body):
    """06.3, seventh audit: a step of `pass` was told that it "computes new values but never writes them"; an
    __init__ of `...` that it does not call super().__init__."""
    with pytest.raises(lab.CheckError, match="is not written yet") as err:
        lab.check_sgd_momentum(variant(**body))
    assert err.value.usage and err.value.mistake is None


# ------------------------------------------------------------------ the eleventh audit


def _sum_dropped(self, p, group):
    """06.3: the sum with the new gradient is computed and dropped; the in-place fade stays (got expected/got only)."""
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"].mul_(group["momentum"]) + p.grad
    p.sub_(group["lr"] * state["v"])


def _one_minus_momentum(self, p, group):
    """06.3: the old velocity weighted by 1 - momentum, as in an average (got expected/got only)."""
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"] = (1 - group["momentum"]) * state["v"] + p.grad
    p.sub_(group["lr"] * state["v"])


@pytest.mark.parametrize(
    "update, name",
    [
        (_sum_dropped, "new gradients never join the velocity"),
        (_one_minus_momentum, "velocity faded by one minus the momentum"),
    ],
    ids=["v.mul_(momentum) + grad, dropped", "(1 - momentum) * v + grad"],
)
def test_eleventh_audit_velocity_updates_are_named(update, name):
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(update=update))
    assert err.value.mistake == name


def _velocity_kept_but_unused(self, p, group):
    """06.3: the velocity is stored, but p moves along the gradient; was told only that nothing is carried over."""
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone()
    else:
        state["v"] = group["momentum"] * state["v"] + p.grad
    p.sub_(group["lr"] * p.grad)


def test_a_velocity_kept_but_not_used_hears_about_the_step():
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(update=_velocity_kept_but_unused))
    assert err.value.mistake == "no velocity kept"
    assert "moves along the gradient" in err.value.hint


@pytest.mark.parametrize(
    "answer, word",
    [
        ("SGD with momentum", "momentum"),
        ("sgd + momentum", "momentum"),
        ("Stochastic gradient descent", "sgd"),
        ("plain SGD", "sgd"),
        ("Adam with momentum", None),  # Adam's own moments: not read as the momentum choice
    ],
)
def test_sweep_prediction_reads_a_choice_written_out(swept, answer, word, capsys):
    """Thirteenth audit: "SGD with momentum" and "stochastic gradient descent" were refused as not a choice."""
    if word is None:
        with pytest.raises(lab.CheckError):
            lab.check_sweep_prediction(answer)
        return
    lab.check_sweep_prediction(answer)
    assert f"recorded answer: '{word}'" in capsys.readouterr().out


@pytest.mark.parametrize("cls", [torch.optim.SGD, torch.optim.Adam])
def test_an_optimizer_class_as_the_prediction_is_asked_for_the_word(cls):
    """The class itself was told "answer with a plain value; got type"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_sweep_prediction(cls)
    assert f"not the class {cls.__name__}" in info.value.message


def _float32_first_velocity(self, p, group):
    """06.3: the first velocity made in float32, the later ones out of place (float64 again from step 2 on)."""
    state = self.state[p]
    if "v" not in state:
        state["v"] = p.grad.clone().float()
    else:
        state["v"] = group["momentum"] * state["v"] + p.grad
    p.sub_(group["lr"] * state["v"])


def test_a_velocity_in_float32_at_the_first_step_only_is_named():
    """Fourteenth audit: a float32 first velocity, promoted to float64 by the next step's out-of-place update, left no
    trace in the final state and got expected/got only."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(update=_float32_first_velocity))
    assert err.value.mistake == "velocity in float32"


# ------------------------------------------------------------------ fifteenth audit: bad input


def _step_switches_gradients_off(self):
    torch.set_grad_enabled(False)
    SGDMomentum.step(self)


def test_a_step_that_switches_gradients_off_for_good_is_named_and_the_setting_restored(capsys):
    """torch.set_grad_enabled(False) in step() got "the check could not use what it was given" and left gradient
    recording off for every later cell."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_sgd_momentum(variant(step=_step_switches_gradients_off))
    assert info.value.mistake == "torch settings changed for the whole program"
    assert "could not use" not in str(info.value)
    assert torch.is_grad_enabled()
    lab.check_sgd_momentum(SGDMomentum)
    assert "PASS" in capsys.readouterr().out


class _StateDictRaises(SGDMomentum):
    def state_dict(self):
        raise RuntimeError("my own bug")


def test_an_error_of_state_dict_is_not_blamed_on_a_missing_gradient():
    """An error raised by the student's state_dict() was named "None gradient not skipped" (the short run without
    a parameter lacking its gradient never reaches state_dict, so it completed)."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_sgd_momentum(_StateDictRaises)
    assert "state_dict() raised RuntimeError: my own bug" in info.value.message
    assert info.value.mistake != "None gradient not skipped"


def _momentum_as_float32_tensor(self, p, group):
    state = self.state[p]
    momentum = torch.tensor(group["momentum"])  # float32: holds 0.899999976
    state["v"] = p.grad.clone() if "v" not in state else torch.addcmul(p.grad, state["v"], momentum)
    p.sub_(group["lr"] * state["v"])


def _lr_as_float32_tensor(self, p, group):
    state = self.state[p]
    state["v"] = p.grad.clone() if "v" not in state else group["momentum"] * state["v"] + p.grad
    p.sub_(torch.tensor(group["lr"]) * state["v"])


@pytest.mark.parametrize("update", [_momentum_as_float32_tensor, _lr_as_float32_tensor], ids=["momentum", "lr"])
def test_a_setting_made_into_a_float32_tensor_is_named(update):
    """Sixteenth audit: torch.tensor(momentum) rounds 0.9 to float32, off by 3e-9 relative after a few steps; the
    check said only "does not match the reference" with an error of 4.5e-10."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_sgd_momentum(variant(update=update))
    assert err.value.mistake == "setting rounded to float32"
    assert "torch.tensor(group" not in err.value.message


def _velocity_in_a_foreach_add(self, p, group):
    state = self.state[p]
    if "momentum_buffer" not in state:
        state["momentum_buffer"] = torch.zeros_like(p).add_(p.grad)
    else:
        state["momentum_buffer"].mul_(group["momentum"]).add_(p.grad)
    torch._foreach_add_([p], [state["momentum_buffer"]], alpha=-group["lr"])


def _velocity_kept_in_float64_copies(self, p, group):
    state = self.state[p]
    velocity = state.get("velocity", torch.zeros_like(p, dtype=torch.float64))
    state["velocity"] = velocity * group["momentum"] + p.grad.double()
    p.copy_(p - (group["lr"] * state["velocity"]).to(p.dtype))


@pytest.mark.parametrize("update", [_velocity_in_a_foreach_add, _velocity_kept_in_float64_copies])
def test_sixteenth_audit_correct_designs_pass(update, capsys):
    lab.check_sgd_momentum(variant(update=update))
    assert "PASS" in capsys.readouterr().out

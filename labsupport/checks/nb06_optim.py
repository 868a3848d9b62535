"""Checks for notebook 06 (torch.optim); each reference is torch.optim itself, run at check time.
The known wrong momentum rules are data: small optimizers the check replays next to the student's."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import re
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from . import running
from .core import (
    CheckError,
    Mistake,
    TimedOut,
    check_prediction,
    compare,
    exercise,
    expect_count,
    expect_tensor,
    first_mistake,
    mistake_error,
    passed,
    read_prediction,
    run_student,
    time_limit,
)
from .nb05_nn_module import expect_class, torch_settings_kept
from .running import expect_written, failing_line

__all__ = ["check_sweep_prediction", "check_sgd_momentum"]

# ------------------------------------------------------------------ 06.1 the sweep

SWEEP_LRS = (1e-3, 1e-2, 1e-1, 1.0)
SWEEP = ("sgd", "momentum", "adam")
MAX_SWEEP_STEPS = 500


def _sweep_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    """The notebook's ``optimizers[name](params, lr)``."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.SGD(params, lr=lr)


def _final_loss(name: str, lr: float, steps: int, x: torch.Tensor, y: torch.Tensor) -> float:
    """Notebook 06's ``run(...)`` for one optimizer and lr: the loss after ``steps`` steps (inf if it diverged)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1000, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10))
    optimizer = _sweep_optimizer(name, model.parameters(), lr)
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        final = float(F.mse_loss(model(x), y))
    if not math.isfinite(final):
        return math.inf
    return final


def _sweep(steps: int) -> dict[str, tuple[float, float]]:
    """Each optimizer's best (loss, lr) over SWEEP_LRS."""
    from ..data import lecture_data

    x, y = lecture_data()
    best = {}
    with torch.random.fork_rng(devices=[]):
        for name in SWEEP:
            results = [(_final_loss(name, lr, steps, x, y), lr) for lr in SWEEP_LRS]
            best[name] = min(results)
    return best


def _sweep_word(prediction: Any) -> Any:
    """06.1's choices written out ("SGD with momentum", "stochastic gradient descent") as the word the choices
    use; an optimizer class is refused with a sentence; anything else unchanged."""
    __tracebackhide__ = True
    if isinstance(prediction, type) and issubclass(prediction, torch.optim.Optimizer):
        raise CheckError(
            f"the sweep's winner: write the choice as a word, not the class {prediction.__name__}",
            expected="'sgd', 'momentum' or 'adam', in quotes",
            got=f"the class {prediction.__name__}",
            usage=True,
        )
    if not isinstance(prediction, str):
        return prediction
    words = re.sub(r"[^a-z]+", " ", prediction.lower()).split()
    if "momentum" in words and "adam" not in words and ("sgd" in words or "with" in words):
        return "momentum"  # "SGD with momentum", "sgd + momentum", "momentum SGD"
    if words == ["stochastic", "gradient", "descent"] or words == ["plain", "sgd"]:
        return "sgd"
    return prediction


@exercise("06.1", "which optimizer wins a fair race?", prediction=True)
def check_sweep_prediction(prediction: Any, steps: int = 50) -> None:
    """Run notebook 06's sweep (each optimizer at every lr of SWEEP_LRS, ``steps`` steps) and name the winner."""
    __tracebackhide__ = True
    prediction = read_prediction("the sweep's winner", _sweep_word(prediction), SWEEP)  # before seconds of measuring
    steps = expect_count(steps, "steps", minimum=1, maximum=MAX_SWEEP_STEPS)
    best = _sweep(steps)
    winner = min(best, key=best.get)
    best_lrs = ", ".join(f"{name} {lr:g}" for name, (_, lr) in best.items())
    notes = {
        "adam": "Adam's step is about lr per weight whatever the gradient; the grid's larger lrs make it jump about.",
        "momentum": "momentum multiplies the step by about 1/(1 - 0.9) = 10, so it diverges one grid step earlier.",
        "sgd": "at its own best lr plain SGD takes steps as large as the others' effective ones.",
    }
    notes.pop(winner)
    check_prediction(
        "the sweep's winner",
        prediction,
        winner,
        choices=SWEEP,
        mistakes=notes,
        why="best lr of each: " + best_lrs,
        ask="compare the best learning rates: how does each optimizer's step depend on its lr and on the "
        "gradient, and what did the fixed rates of section 3 hide?",
    )


# ------------------------------------------------------------------ 06.3 SGD with momentum

LR = 0.1
MOMENTUM = 0.8
MAX_STEPS = 100
# (2,) takes no part in the loss: its .grad stays None; the two biases share a shape, (3,), one in each group
_SHAPES = [(3, 5), (2,), (3,), (3, 3), (3,)]
_GROUP1 = {"lr": 0.05, "momentum": 0.5}  # the second group's own settings


def _velocity(g: torch.Tensor, v: torch.Tensor | None, mu: float) -> torch.Tensor:
    if v is None:
        return g
    return mu * v + g


# Update rules ``(p, g, v, lr, mu) -> (new p, new v)``; v is None at a parameter's first step.
def _momentum(p, g, v, lr, mu):
    v = _velocity(g, v, mu)
    return p - lr * v, v


def _no_velocity(p, g, v, lr, mu):
    return p - lr * g, None


def _unchanged(p, g, v, lr, mu):
    return p, _velocity(g, v, mu)


def _uphill(p, g, v, lr, mu):
    v = _velocity(g, v, mu)
    return p + lr * v, v


def _dampened(p, g, v, lr, mu):
    v = g if v is None else mu * v + (1 - mu) * g
    return p - lr * v, v


def _dampened_from_zero(p, g, v, lr, mu):
    v = (1 - mu) * g if v is None else mu * v + (1 - mu) * g
    return p - lr * v, v


def _nesterov(p, g, v, lr, mu):
    v = _velocity(g, v, mu)
    return p - lr * (g + mu * v), v


def _velocity_plus_gradient(p, g, v, lr, mu):
    v = _velocity(g, v, mu)
    return p - lr * (v + g), v


def _old_velocity_plus_gradient(p, g, v, lr, mu):
    old = torch.zeros_like(g) if v is None else v
    return p - lr * (old + g), mu * old + g


def _first_step_twice(p, g, v, lr, mu):
    v = g + mu * g if v is None else mu * v + g
    return p - lr * v, v


def _lr_in_velocity(p, g, v, lr, mu):
    v = lr * g if v is None else mu * v + lr * g
    return p - v, v


def _lr_twice(p, g, v, lr, mu):
    v = lr * g if v is None else mu * v + lr * g
    return p - lr * v, v


def _no_lr(p, g, v, lr, mu):
    v = _velocity(g, v, mu)
    return p - v, v


def _stale_from_zero(p, g, v, lr, mu):
    old = torch.zeros_like(g) if v is None else v
    return p - lr * old, mu * old + g


def _stale_from_grad(p, g, v, lr, mu):
    old = g if v is None else v
    return p - lr * old, mu * old + g


def _velocity_not_stored(p, g, v, lr, mu):
    """The new velocity is bound to a local name only: the state keeps the first step's velocity for good."""
    if v is None:
        return p - lr * g, g
    return p - lr * (mu * v + g), v


def _momentum_missing(p, g, v, lr, mu):
    v = g if v is None else v + g
    return p - lr * v, v


def _momentum_on_gradient(p, g, v, lr, mu):
    v = g if v is None else v + mu * g
    return p - lr * v, v


def _momentum_on_gradient_from_zero(p, g, v, lr, mu):
    v = mu * g if v is None else v + mu * g
    return p - lr * v, v


def _momentum_on_both(p, g, v, lr, mu):
    v = mu * g if v is None else mu * (v + g)
    return p - lr * v, v


def _gradient_not_added(p, g, v, lr, mu):
    """The velocity fades in place, but the sum with the new gradient is computed and dropped."""
    v = g if v is None else mu * v
    return p - lr * v, v


def _one_minus_momentum_on_velocity(p, g, v, lr, mu):
    v = g if v is None else (1 - mu) * v + g
    return p - lr * v, v


def _lr_and_momentum_swapped(p, g, v, lr, mu):
    """The group's two settings read into each other's names: the velocity fades by lr, the step moves by mu."""
    return _momentum(p, g, v, mu, lr)


#: Weight decays students add out of habit (torch.optim.SGD's weight_decay argument, typical values).
WEIGHT_DECAYS = (1e-4, 5e-4, 1e-3, 1e-2)


def _with_weight_decay(decay: float) -> Callable:
    """The momentum rule on the gradient plus ``decay`` times the parameter (L2 weight decay)."""

    def rule(p, g, v, lr, mu):
        return _momentum(p, g + decay * p, v, lr, mu)

    rule.__name__ = f"_weight_decay_{decay:g}"
    return rule


def _clamped_gradient(p, g, v, lr, mu):
    return _momentum(p, g.clamp(-1, 1), v, lr, mu)


def _norm_clipped_gradient(p, g, v, lr, mu):
    return _momentum(p, g * min(1.0, 1.0 / max(g.norm().item(), 1e-12)), v, lr, mu)


def _normalised_gradient(p, g, v, lr, mu):
    return _momentum(p, g / g.norm().clamp(min=1e-12), v, lr, mu)


def _float32(number: float) -> float:
    """``number`` as torch.tensor(number) holds it: rounded to float32."""
    return torch.tensor(number, dtype=torch.float32).item()


def _float32_momentum(p, g, v, lr, mu):
    return _momentum(p, g, v, lr, _float32(mu))


def _float32_lr(p, g, v, lr, mu):
    return _momentum(p, g, v, _float32(lr), mu)


def _float32_settings(p, g, v, lr, mu):
    return _momentum(p, g, v, _float32(lr), _float32(mu))


#: The name of the mistake of a momentum or lr made into a float32 tensor (see _blame_precision).
FLOAT32_SETTING = "setting rounded to float32"

#: The defaults of the prompt's signature, SGDMomentum(params, lr=0.01, momentum=0.9): the numbers a student
#: writes into step() in place of the group's.
PROMPT_DEFAULTS = {"lr": 0.01, "momentum": 0.9}


def _settings(group: dict, first: dict, constructor: dict, which: str, initial_lr: float) -> dict:
    """The lr and momentum a replayed optimizer uses for ``group`` (``first``: its first group; ``initial_lr``:
    the group's lr when the optimizer was made)."""
    if which == "initial lr":
        return {"lr": initial_lr, "momentum": group["momentum"]}
    if which == "step both":
        return dict(PROMPT_DEFAULTS)
    if which in ("step lr", "step momentum"):
        name = which.split()[1]
        return {**group, name: PROMPT_DEFAULTS[name]}
    if which == "constructor":
        return constructor
    if which == "first group":
        return first
    if which == "constructor lr":
        return {"lr": constructor["lr"], "momentum": group["momentum"]}
    if which == "constructor momentum":
        return {"lr": group["lr"], "momentum": constructor["momentum"]}
    return group


class _RuleOptimizer(torch.optim.Optimizer):
    """SGD with momentum written with a given update rule: how the check replays a known wrong answer.
    ``settings``: "group" reads each group's lr and momentum; "constructor" uses the constructor's for every
    group ("constructor lr" / "constructor momentum": only that one); "first group" uses the first group's for
    every group; "initial lr" keeps each group's lr as it was when the optimizer was made. ``fixed`` replaces the
    constructor's arguments by fixed numbers (an __init__ that ignores them)."""

    def __init__(self, params, rule, lr, momentum, settings="group", fixed=None):
        hyper = {"lr": lr, "momentum": momentum}
        hyper.update(fixed or {})
        super().__init__(params, dict(hyper))
        self.rule = rule
        self.constructor = hyper
        self.settings = settings
        self.initial_lrs = [group["lr"] for group in self.param_groups]

    @torch.no_grad()
    def step(self):
        for group, initial_lr in zip(self.param_groups, self.initial_lrs):
            hyper = _settings(group, self.param_groups[0], self.constructor, self.settings, initial_lr)
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                new_p, state["v"] = self.rule(p.clone(), p.grad.clone(), state.get("v"), hyper["lr"], hyper["momentum"])
                p.copy_(new_p)


@dataclasses.dataclass(frozen=True)
class WrongRule:
    """A known wrong SGDMomentum: its update rules and fixed settings (the variants of one mistake), and whose
    settings each group uses. Called on a student's trajectory, it says whether the student's optimizer behaves
    like one of its variants."""

    rules: tuple[Callable, ...]
    settings: tuple[str, ...] = ("group",)
    fixed: tuple[dict, ...] = ({},)

    def variants(self) -> list[tuple[Callable, str, dict]]:
        return list(itertools.product(self.rules, self.settings, self.fixed))

    def __call__(self, trajectory: list) -> bool:
        for rule, settings, fixed in self.variants():
            replay, _ = _trajectory(_rule_maker(rule, settings, fixed), _Setup(len(trajectory)))
            if _same_trajectory(trajectory, replay, rtol=1e-7):
                return True
        return False


def _rule_maker(rule: Callable, settings: str, fixed: dict) -> Callable[[list], torch.optim.Optimizer]:
    def make(groups: list) -> torch.optim.Optimizer:
        return _RuleOptimizer(groups, rule, LR, MOMENTUM, settings, fixed)

    return make


def _revealed(trajectory: list) -> bool:
    """ALIASED, NOT_IN_STATE and STATE_BY_ID are named by the run that reveals them (set_to_none=False, a
    resumed run)."""
    return True


RULE_MISTAKES = [
    Mistake(
        "no velocity kept",
        WrongRule((_no_velocity,)),
        why="each step uses only the current gradient: nothing is carried over from one step to the next (a "
        "velocity computed into a local name, and never written back into self.state[p] nor updated in place, is "
        "gone when step() returns), or the velocity is kept but the parameter moves along the gradient instead",
        look="step(): where the velocity lives between two calls of step(), and what each step does to it",
    ),
    Mistake(
        "velocity not stored back",
        WrongRule((_velocity_not_stored,)),
        why="every step combines the gradient with the velocity the first step stored: the new velocity is bound "
        "to a local name (an assignment makes a new tensor), but self.state[p] still holds the old one, so the "
        "velocity never builds up past its first value",
        look="step(): after the velocity is updated, what self.state[p] holds",
    ),
    Mistake(
        "parameters never change",
        WrongRule((_unchanged,)),
        why="step() computes new values but never writes them into the parameters: binding a name to a new "
        "tensor does not change the tensor the name held before",
        look="step(): the line that moves p: does it change the tensor the optimizer holds, or bind a new one?",
        symptom="the parameters are the same after every step",
    ),
    Mistake(
        "wrong sign",
        WrongRule((_uphill,)),
        why="the parameters move up the gradient: the step is added instead of subtracted",
        look="step(): the line that moves p, and which way it moves",
    ),
    Mistake(
        "dampening",
        WrongRule((_dampened, _dampened_from_zero)),
        why="the gradient is scaled down (dampened) before it joins the velocity; the exercise adds the whole gradient",
        look="step(): the line that updates v: how much of this step's gradient joins it?",
    ),
    Mistake(
        "Nesterov momentum",
        WrongRule((_nesterov,)),
        why="this is Nesterov's variant, which looks ahead along the velocity; the exercise steps along the "
        "velocity itself",
        look="step(): the line that moves p: what does it move along?",
    ),
    Mistake(
        "velocity plus gradient",
        WrongRule((_velocity_plus_gradient, _old_velocity_plus_gradient)),
        why="the step moves along the velocity plus the gradient: the velocity already holds the current gradient "
        "(added at full weight, the old velocity faded by the momentum), so the step moves along the velocity "
        "alone; adding the gradient again counts it twice, or lets the old velocity in without its momentum factor",
        look="step(): the line that moves p: which terms does it add, and which of them already holds this gradient?",
    ),
    Mistake(
        "lr applied twice",
        WrongRule((_lr_twice,)),
        why="the learning rate scales the gradient inside the velocity and then the velocity again in the step",
        look="step(): count the places the lr appears; in which of the two lines does it belong?",
    ),
    Mistake(
        "first velocity updated again",
        WrongRule((_first_step_twice,)),
        why="at the first step the velocity is set to the gradient and then updated once more in the same step, "
        "so the first step moves by (1 + momentum) times the gradient",
        look="step(): what the first step does to v right after creating it",
        symptom="the first step already differs",
    ),
    Mistake(
        "lr inside the velocity",
        WrongRule((_lr_in_velocity,)),
        why="the learning rate scales the gradient inside the velocity, so the velocity carries old learning "
        "rates: the same steps while lr stays fixed, but after lr changes (the check halves it after the first "
        "step, as a scheduler would) the old velocity still moves by the old lr",
        look="step(): the line that updates v: does a setting belong there besides the momentum?",
    ),
    Mistake(
        "lr missing",
        WrongRule((_no_lr,)),
        why="the step moves by the whole velocity: the learning rate is never applied",
        look="step(): the line that moves p: how far does it go?",
    ),
    Mistake(
        "momentum factor missing",
        WrongRule((_momentum_missing,)),
        why="the velocity adds each gradient to the old velocity at full weight: the old velocity is never "
        "multiplied by the momentum, so old gradients never fade",
        look="step(): the line that updates v, and where the momentum enters it",
    ),
    Mistake(
        "momentum on the gradient",
        WrongRule((_momentum_on_gradient, _momentum_on_gradient_from_zero, _momentum_on_both)),
        why="the momentum multiplies the new gradient (instead of the old velocity, or as well as it): it is the "
        "old velocity alone that fades by the factor momentum at each step, and the new gradient joins it whole",
        look="step(): the line that updates v, and which term the momentum multiplies",
    ),
    Mistake(
        "new gradients never join the velocity",
        WrongRule((_gradient_not_added,)),
        why="after the first step the velocity only fades: it is multiplied by the momentum in place, but the new "
        "gradient is added in an expression whose result is never kept, so every step moves along the first "
        "gradient, a little less each time",
        look="step(): the line that updates v: where does the result of its sum go?",
    ),
    Mistake(
        "velocity faded by one minus the momentum",
        WrongRule((_one_minus_momentum_on_velocity,)),
        why="the old velocity is multiplied by one minus the momentum: the momentum is itself the share of the old "
        "velocity that stays from one step to the next, so a momentum close to 1 keeps almost all of it",
        look="step(): the line that updates v, and the factor on the old velocity",
    ),
    Mistake(
        "lr and momentum swapped",
        WrongRule((_lr_and_momentum_swapped,)),
        why="the velocity fades by the learning rate and the step moves by the momentum: the group's two settings "
        "are read into each other's names",
        look="step(): the lines that read the group's lr and momentum, and where each name is used",
    ),
    Mistake(
        "weight decay added",
        WrongRule(tuple(_with_weight_decay(decay) for decay in WEIGHT_DECAYS)),
        why="the gradient gets a share of the parameter added to it (weight decay, as torch.optim.SGD's "
        "weight_decay would), but the exercise's rule uses the gradient as it is",
        look="step(): what is added to p.grad before it joins the velocity",
    ),
    Mistake(
        "gradient clipped or normalised",
        WrongRule((_clamped_gradient, _norm_clipped_gradient, _normalised_gradient)),
        why="the gradient is clipped (or divided by its norm) before it joins the velocity: the rule uses the "
        "gradient as it is, and clipping, where a training wants it, belongs to the training loop "
        "(torch.nn.utils.clip_grad_norm_), not to the optimizer",
        look="step(): what is done to p.grad before it joins the velocity",
    ),
    Mistake(
        "setting written into step()",
        WrongRule((_momentum,), settings=("step momentum", "step lr", "step both")),
        why="step() uses a number of its own (the signature's default, 0.9 or 0.01) instead of the group's "
        "setting, so a momentum or lr given to the constructor, set per group, or changed by a scheduler never "
        "reaches the update",
        look="step(): where the momentum and the lr of the update come from",
    ),
    Mistake(
        "update order",
        WrongRule((_stale_from_zero, _stale_from_grad)),
        why="each step moves along the previous step's velocity: the velocity is updated after the parameters",
        look="step(): the order of the two updates, the velocity's and the parameter's",
    ),
    Mistake(
        "group settings ignored",
        WrongRule((_momentum,), settings=("constructor", "constructor lr", "constructor momentum", "first group")),
        why="every group is updated with the same settings, the constructor's or the first group's, but each group "
        "carries its own lr and momentum",
        look="step(): which dict the lr and momentum are read from, and whether it changes with the group",
    ),
    Mistake(
        "lr read once",
        WrongRule((_momentum,), settings=("initial lr",)),
        why="each group moves at the lr it had when the optimizer was made: the rate was read once (in __init__, "
        "or at a parameter's first step) and kept, so when the group's lr changes later, as a scheduler changes it "
        "(the check halves it after the first step), the steps go on at the old rate; the group holds the rate in "
        "force at each step",
        look="step(): where the lr of each update comes from, and when it was read",
    ),
    Mistake(
        "constructor arguments ignored",
        WrongRule((_momentum,), fixed=({"lr": 0.01}, {"momentum": 0.9}, {"lr": 0.01, "momentum": 0.9})),
        why="the groups do not hold the lr and momentum given to the constructor: fixed numbers are passed as "
        "defaults to super().__init__",
        look="__init__: the defaults dict it hands to torch.optim.Optimizer: where do its numbers come from?",
    ),
    Mistake(
        FLOAT32_SETTING,
        WrongRule((_float32_momentum, _float32_lr, _float32_settings)),
        why="the momentum or the lr is made into a tensor of the default dtype, float32 (torch.tensor(0.9) holds "
        "0.899999976), so every update of the float64 parameters is off in its ninth digit",
        look="step(): where the momentum or the lr becomes a tensor, and which dtype that tensor gets",
    ),
]
NO_SUPER = Mistake(
    "no super().__init__()",
    None,
    why="torch.optim.Optimizer's own __init__ never runs, so the optimizer has no param_groups, state or hooks of "
    "torch's making (param_groups written by hand are not enough)",
    look="__init__: what it hands on to torch.optim.Optimizer, and when",
)
NO_DEFAULTS = Mistake(
    "no defaults given to Optimizer",
    None,
    why="torch.optim.Optimizer.__init__ takes the parameters and a dict of default settings; without that dict no "
    "group knows its lr or momentum",
    look="__init__: the call to torch.optim.Optimizer's __init__, and what it is given",
)
STEP_NEEDS_ARGUMENT = Mistake(
    "step() requires an argument",
    None,
    why="training loops (and the check) call optimizer.step() with no argument; an optimizer's step() may accept "
    "a closure, but must not require one",
    look="step(): its signature",
)
MISSING_DEFAULT = Mistake(
    "setting missing from defaults",
    None,
    why="the defaults given to super().__init__ lack lr or momentum, so a group without its own has none",
    look="__init__: which settings the defaults dict holds",
)


def _rest_of_group_frozen(trajectory: list) -> bool:
    """Does the parameter after the one without a gradient never move, while the group's first one does?"""
    start = _initial_parameters()
    first, after_unused = 0, 2
    return not torch.equal(trajectory[0][first], start[first]) and all(
        torch.equal(params[after_unused], start[after_unused]) for params in trajectory
    )


LOOP_LEFT = Mistake(
    "loop left at a None gradient",
    _rest_of_group_frozen,
    why="at a parameter without a gradient, step() leaves the loop over its group (break), or step() itself "
    "(return), instead of skipping that one parameter, so the parameters after it are never updated",
    look="step(): what the loop does at a parameter whose .grad is None: where does the code go next?",
)


def _moved(params: list[torch.Tensor], start: list[torch.Tensor]) -> list[bool]:
    """For each parameter: does it differ from its starting value?"""
    return [not torch.equal(p, q) for p, q in zip(params, start)]


def _group_frozen(trajectory: list) -> bool:
    """Does exactly one group's every parameter keep its starting value through all steps?"""
    start = _initial_parameters()
    moved = [any(steps) for steps in zip(*(_moved(params, start) for params in trajectory))]
    frozen = [not any(group["params"]) for group in _groups(moved)]  # split as the parameters are
    return frozen.count(True) == 1


def _first_step_still(trajectory: list) -> bool:
    """Does no parameter move at the first step, while some move later?"""
    start = _initial_parameters()
    first, *later = trajectory
    return not any(_moved(first, start)) and any(any(_moved(params, start)) for params in later)


GROUP_SKIPPED = Mistake(
    "a group never updated",
    _group_frozen,
    why="the parameters of one group never move: step() updates only some of self.param_groups",
    look="step(): the loop over self.param_groups; does the update, and its indentation, run for every group?",
)
FIRST_STEP_SKIPPED = Mistake(
    "first step skipped",
    _first_step_still,
    why="at a parameter's first step only its velocity is created and the parameter stays where it is; that step "
    "already has a gradient, so the velocity starts as that gradient and the parameter moves along it",
    look="step(): what a parameter's first step does after its velocity is created",
)
NONE_GRAD = Mistake(
    "None gradient not skipped",
    None,
    why="a parameter that took no part in the loss has no gradient (p.grad is None), and step() uses it anyway",
    look="step(): the loop over a group's parameters: what happens to one whose .grad is None?",
)
NO_NO_GRAD = Mistake(
    "update recorded by autograd",
    None,
    why="step() changes the parameters in place while autograd records, which autograd refuses for its leaves",
    look="step(): is autograd recording while it runs? (torch.no_grad)",
)
SHARED_VELOCITY = Mistake(
    "one velocity for all parameters",
    None,
    why="one velocity is combined with the gradients of parameters of other shapes: each parameter needs its own",
    look="step(): where the velocity is kept: one for the optimizer, or one per parameter?",
)
ALIASED = Mistake(
    "velocity aliases p.grad",
    _revealed,
    why="the velocity is p.grad itself, not a copy, so zero_grad(set_to_none=False) wipes it and backward() adds "
    "into it",
    look="step(): how the velocity is created at a parameter's first step: a new tensor, or p.grad itself?",
)
NOT_IN_STATE = Mistake(
    "velocity outside self.state",
    _revealed,
    why="part of what step() remembers is kept outside self.state, so state_dict() does not save it and a "
    "resumed run loses it",
    look="step(): where the velocity is kept: does state_dict() see it?",
)
STATE_BY_ID = Mistake(
    "state keyed by a number",
    _revealed,
    why="self.state is keyed by id(p) (or another stand-in) instead of the parameter itself; load_state_dict() "
    "hands the saved state to the new run's parameters, which have other ids, so a resumed run loses the velocity",
    look="step(): the key it uses into self.state",
)
STATE_BY_SHAPE = Mistake(
    "state keyed by shape",
    None,
    why="self.state is keyed by the parameter's shape (or its size), so parameters of one shape share a single "
    "velocity: the check's two biases have the same shape, and each one's step carries the other's gradients",
    look="step(): the key it uses into self.state: can two parameters share it?",
)


def _moved_in_the_gap(trajectory: list) -> bool:
    """In the run whose extra parameter (the second, shape (2,)) has no gradient at step 3: did it move there?"""
    return len(trajectory) >= 3 and not torch.equal(trajectory[2][1], trajectory[1][1])


MOVED_WITHOUT_GRADIENT = Mistake(
    "a parameter without a gradient still moves",
    _moved_in_the_gap,
    why="a parameter whose .grad is None at this step moved all the same: its velocity from earlier steps carried "
    "it on (a missing gradient treated as zeros?). A parameter that took no part in this step's loss, such as a "
    "layer a branch of forward skipped, has no gradient, and step() leaves it and its velocity as they are",
    look="step(): what happens to a parameter whose .grad is None, and whether its velocity is still applied",
)
VELOCITY_DROPPED = Mistake(
    "velocity dropped at a missing gradient",
    _revealed,
    why="a parameter whose gradient was missing for one step lost its velocity: when the gradient came back, its "
    "velocity started again from that gradient alone. Skipping a parameter leaves it, and its state, as they are, "
    "so the velocity of the earlier steps carries on once the gradient returns",
    look="step(): what happens to the state of a parameter whose .grad is None",
)
LOW_PRECISION = Mistake(
    "velocity in float32",
    None,
    why="the velocity is kept at a lower precision (float32 or less) while the parameters are float64, so the "
    "updates lose precision",
    look="step(): how the velocity is created: which dtype does it get?",
)


@dataclasses.dataclass(frozen=True)
class _Setup:
    """How the check trains: ``steps`` steps (every group's lr halved after the first, as a scheduler would),
    zero_grad's set_to_none, whether one parameter has no gradient, a resume after step ``resume_at`` (new
    parameter tensors holding the same values, and a new optimizer loaded with state_dict(), as after a restart
    from a checkpoint), and whether step() is wrapped in torch.no_grad(). With ``gap_at``, the parameter takes part
    in the loss at every step but that one, where it has no gradient (a layer a branch of forward skipped once)."""

    steps: int
    set_to_none: bool = True
    unused: bool = True
    resume_at: int | None = None
    wrap_no_grad: bool = False
    gap_at: int | None = None

    def unused_at(self, step: int) -> bool:
        """Does the extra parameter take no part in the loss at ``step``?"""
        return self.unused if self.gap_at is None else step == self.gap_at


def _groups(params: list[torch.Tensor]) -> list[dict]:
    return [{"params": params[:3]}, {"params": params[3:], **_GROUP1}]


def _loss(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, unused: bool) -> torch.Tensor:
    w1, extra, b1, w2, b2 = params
    hidden = F.relu(F.linear(x, w1, b1))
    loss = F.mse_loss(F.linear(hidden, w2, b2), y)
    if not unused:
        loss = loss + extra.pow(2).sum()
    return loss


STEP_A_GENERATOR = Mistake(
    "step() is a generator",
    None,
    why="a yield anywhere in a function's body makes it a generator function: calling it builds a generator and "
    "runs none of its lines until something iterates over it, which optimizer.step() in a training loop never does, "
    "so no parameter is ever updated",
    look="step(): every yield in its body",
)


def _step(optimizer: torch.optim.Optimizer, setup: _Setup) -> None:
    __tracebackhide__ = True
    what = f"{type(optimizer).__name__}.step()"
    if setup.wrap_no_grad:
        with torch.no_grad():
            result = run_student(optimizer.step, what=what)
    else:
        result = run_student(optimizer.step, what=what)
    if inspect.isgenerator(result):
        result.close()
        raise mistake_error(
            f"{what} returned a generator and updated nothing",
            STEP_A_GENERATOR,
            expected="a step() that updates the parameters when it is called (it may return None or the loss)",
            got="a generator object",
        )


def _resume(
    make: Callable, params: list[torch.Tensor], optimizer: torch.optim.Optimizer
) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """New parameter tensors with the same values, and a new optimizer loaded with ``optimizer.state_dict()``:
    a run resumed from a checkpoint."""
    __tracebackhide__ = True
    name = type(optimizer).__name__
    state = run_student(optimizer.state_dict, what=f"{name}.state_dict()")
    params = [p.detach().clone().requires_grad_() for p in params]
    fresh = make(_groups(params))
    run_student(fresh.load_state_dict, state, what=f"{name}.load_state_dict(...)")
    return params, fresh


def _initial_parameters() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(6)
    return [(torch.randn(*shape, generator=gen, dtype=torch.float64) * 0.5).requires_grad_() for shape in _SHAPES]


def _halve_lr(optimizer: torch.optim.Optimizer) -> None:
    groups = getattr(optimizer, "param_groups", None)
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and isinstance(group.get("lr"), float):
            group["lr"] /= 2


GRADIENTS_CLEARED = Mistake(
    "gradients cleared in step()",
    None,
    why="step() clears the gradients it has just used (p.grad set to None or zeroed, or zero_grad() called inside "
    "it): torch.optim's optimizers only read .grad and leave clearing it to the training loop, which decides when "
    "(zero_grad() before the next backward); a loop that adds up the gradients of several batches before one step, "
    "or that logs or clips them after the step, finds them gone with yours",
    look="step(): every line that writes p.grad, or calls zero_grad",
)


def _expect_gradients_kept(params: list[torch.Tensor], had_gradient: list[bool], optimizer: Any, step: int) -> None:
    """step() leaves each parameter's gradient where it was: a non-zero gradient is neither None nor zeros after it."""
    __tracebackhide__ = True
    for number, (p, had) in enumerate(zip(params, had_gradient)):
        if not had or (p.grad is not None and bool(p.grad.any())):
            continue
        group = 0 if number < 3 else 1
        now = "None" if p.grad is None else "all zeros"
        raise mistake_error(
            f"after step {step}, {type(optimizer).__name__}.step() left group {group}'s parameter of shape "
            f"{tuple(p.shape)} with its .grad {now}",
            GRADIENTS_CLEARED,
            expected="the gradient backward() computed, still in .grad after step(), as torch.optim.SGD leaves it",
            got=f".grad {now}",
        )


def _trajectory(make: Callable, setup: _Setup) -> tuple[list[list[torch.Tensor]], torch.optim.Optimizer]:
    """Train the check's small network with ``make(groups)``: the parameters after each step, and the optimizer."""
    __tracebackhide__ = True
    params = _initial_parameters()
    gen = torch.Generator().manual_seed(7)
    optimizer = make(_groups(params))
    after = []
    for step in range(1, setup.steps + 1):
        x = torch.randn(8, 5, generator=gen, dtype=torch.float64)
        y = torch.randn(8, 3, generator=gen, dtype=torch.float64)
        run_student(optimizer.zero_grad, set_to_none=setup.set_to_none, what=f"{type(optimizer).__name__}.zero_grad()")
        _loss(params, x, y, setup.unused_at(step)).backward()
        had_gradient = [p.grad is not None and bool(p.grad.any()) for p in params]
        _step(optimizer, setup)
        _expect_gradients_kept(params, had_gradient, optimizer, step)
        _note_precision(optimizer)
        _expect_parameters(params, step, setup.steps)
        after.append([p.detach().clone() for p in params])
        if step == 1:
            _halve_lr(optimizer)
        if step == setup.resume_at:
            params, optimizer = _resume(make, params, optimizer)
    return after, optimizer


def _expect_parameters(params: list[torch.Tensor], step: int, steps: int) -> None:
    """After a step every parameter keeps its shape and dtype (float64) and holds finite numbers."""
    __tracebackhide__ = True
    for number, (p, shape) in enumerate(zip(params, _SHAPES)):
        group = 0 if number < 3 else 1
        name = f"after step {step} of {steps}, group {group}'s parameter of shape {shape}"
        expect_tensor(p.detach(), name, shape=shape, dtype=torch.float64, device="cpu")


def _same_trajectory(a: list, b: list, rtol: float) -> bool:
    for got, want in zip(a, b):
        for p, q in zip(got, want):
            if p.shape != q.shape or not torch.allclose(p.double(), q, rtol=rtol, atol=1e-12):
                return False
    return len(a) == len(b)


def _student_maker(cls: type) -> Callable[[list], torch.optim.Optimizer]:
    call = f"SGDMomentum(groups, lr={LR}, momentum={MOMENTUM})"

    def make(groups: list) -> torch.optim.Optimizer:
        __tracebackhide__ = True
        optimizer = run_student(cls, groups, lr=LR, momentum=MOMENTUM, what=call)
        if not isinstance(getattr(optimizer, "param_groups", None), list):
            raise mistake_error(f"{call} has no param_groups", NO_SUPER)
        if isinstance(optimizer, torch.optim.Optimizer) and "_optimizer_step_pre_hooks" not in vars(optimizer):
            # param_groups made by hand: Optimizer.__init__, which also sets up state and hooks, never ran
            raise mistake_error(f"{call} never ran torch.optim.Optimizer's __init__", NO_SUPER)
        return optimizer

    return make


def _timed_trajectory(make: Callable, setup: _Setup) -> tuple[list, torch.optim.Optimizer]:
    """The student's trajectory, all of it under the time limit."""
    __tracebackhide__ = True
    limit = running.TIME_LIMIT
    try:
        with time_limit(limit):
            return _trajectory(make, setup)
    except TimedOut:
        raise CheckError(
            f"{setup.steps} steps of SGDMomentum did not finish within {limit:g} s, so the check stopped them",
            hint="a loop that never ends, or far more work per step than the update needs",
            mistake="too slow",
        ) from None


def _completes(make: Callable, setup: _Setup) -> bool:
    try:
        _timed_trajectory(make, setup)
    except CheckError:
        return False
    return True


SETTING_AS_NAME = Mistake(
    "setting read as a plain name",
    None,
    why="step() reads a setting (the learning rate, the momentum) by the name of __init__'s parameter, but "
    "__init__'s names are gone when it returns: the settings were handed to torch.optim.Optimizer, which keeps "
    "them in every parameter group",
    look="step(): where each setting it uses comes from",
)
PARAMETERS_LOOKED_UP = Mistake(
    "parameters looked up in the wrong place",
    None,
    why="step() looks for the parameters where torch.optim.Optimizer does not keep them: it keeps a list of "
    "parameter groups, each a dict with its own list of parameters and its own settings",
    look="step(): the loop over the parameters, and what it iterates over",
)
SETTING_UNDER_ANOTHER_KEY = Mistake(
    "setting read under another key",
    None,
    "step() reads a setting of the group under a key the group does not have: a group holds its settings under "
    "the names of the defaults dict handed to torch.optim.Optimizer (and of any setting the group brings itself)",
    look="step(): the keys it reads from the group, and those of the defaults dict in __init__",
)
STATE_NOT_STARTED = Mistake(
    "state read before it is created",
    None,
    why="step() reads an entry of self.state[p] that nothing has put there yet: the state of a parameter starts "
    "as an empty dict at the first step, so the first step has to create what later steps update",
    look="step(): what happens to a parameter's state the first time step() sees it",
)


def _group_key_read(line: str, cause: KeyError) -> bool:
    """Does ``line`` read the missing key from a name that stands for a parameter group (group, g, pg, ...)?"""
    key = cause.args[0] if cause.args else None
    if not isinstance(key, str):
        return False
    return re.search(rf"\b(\w*group\w*|g|pg)\[\s*['\"]{re.escape(key)}['\"]\s*\]", line) is not None


def _misread_optimizer(err: CheckError) -> Mistake | None:
    """The mistake behind a NameError, AttributeError, TypeError or KeyError of step() that reads what the
    optimizer keeps (settings, parameters, state) from the wrong place; None for any other error."""
    cause = err.__cause__
    text = str(cause)
    name = getattr(cause, "name", None) if isinstance(cause, NameError) else None
    if name == "params":
        return PARAMETERS_LOOKED_UP
    if name in ("lr", "momentum", "defaults", "learning_rate", "mu", "beta"):
        return SETTING_AS_NAME
    if isinstance(cause, AttributeError) and re.search(
        r"object has no attribute '(params|parameters|lr|momentum)'", text
    ):
        return PARAMETERS_LOOKED_UP if "param" in text else SETTING_AS_NAME
    if isinstance(cause, AttributeError) and "'str' object has no attribute" in text:
        return PARAMETERS_LOOKED_UP  # a loop over a group dict gives its keys
    line = failing_line(err)
    if isinstance(cause, KeyError) and "step()" in err.message and _group_key_read(line, cause):
        return SETTING_UNDER_ANOTHER_KEY
    if isinstance(cause, TypeError) and "list indices must be integers" in text and "param_groups[" in line:
        return PARAMETERS_LOOKED_UP
    if isinstance(cause, KeyError) and "state" in line and "step()" in err.message:
        return STATE_NOT_STARTED
    return None


def _call_refused(cause: TypeError) -> bool:
    """Was the TypeError raised by the call itself (a required argument missing), before any line of the
    student's method ran? Its last frame is then the caller's: the check's, or torch.no_grad's wrapper."""
    frames = traceback.extract_tb(cause.__traceback__)
    if not frames or "required positional argument" not in str(cause):
        return False
    last = Path(frames[-1].filename).resolve()
    callers = (Path(torch.__file__).resolve().parent, Path(__file__).resolve().parent)
    return any(last.is_relative_to(caller) for caller in callers)


def _crash_mistake(make: Callable, err: CheckError, setup: _Setup) -> CheckError:
    """Name the mistake behind an error raised by the student's optimizer, where behaviour confirms it."""
    cause = err.__cause__
    short = dataclasses.replace(setup, steps=2)
    if isinstance(cause, KeyError) and cause.args and cause.args[0] in ("lr", "momentum"):
        return mistake_error(err.message, MISSING_DEFAULT)
    text = str(cause)
    if isinstance(cause, TypeError) and "required positional argument: 'defaults'" in text:
        return mistake_error(err.message, NO_DEFAULTS)
    if isinstance(cause, TypeError) and ".step()" in err.message and _call_refused(cause):
        return mistake_error(err.message, STEP_NEEDS_ARGUMENT)
    written = _misread_optimizer(err)
    if written is not None:
        return mistake_error(err.message, written)
    in_step = ".step()" in err.message  # not state_dict(), load_state_dict() or zero_grad() of an override
    if in_step and setup.unused and _completes(make, dataclasses.replace(short, unused=False)):
        return mistake_error(err.message, NONE_GRAD)
    if "leaf Variable" in text and _completes(make, dataclasses.replace(short, wrap_no_grad=True)):
        return mistake_error(err.message, NO_NO_GRAD)
    if "must match the size" in text:
        return mistake_error(err.message, SHARED_VELOCITY)
    return err


def _student_run(make: Callable, setup: _Setup) -> tuple[list, torch.optim.Optimizer]:
    __tracebackhide__ = True
    try:
        return _timed_trajectory(make, setup)
    except CheckError as err:
        if err.usage or err.mistake in ("too slow", NO_SUPER.name):
            raise
        raise _crash_mistake(make, err, setup) from None


#: The optimizers that held a low-precision tensor in their state after some step: a velocity made in float32 at the
#: first step and float64 after the second (v = momentum * v + g promotes it) leaves no trace in the final state.
_HELD_LOW_PRECISION: weakref.WeakSet = weakref.WeakSet()


def _state_in_low_precision(optimizer: Any) -> bool:
    """Does the optimizer keep a floating-point tensor of lower precision than float64 in its state now?"""
    states = getattr(optimizer, "state", None)
    if not isinstance(states, dict):
        return False
    for state in states.values():
        values = state.values() if isinstance(state, dict) else [state]
        for value in values:
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
                return True
    return False


def _note_precision(optimizer: Any) -> None:
    """Remember an optimizer whose state holds a low-precision tensor after this step."""
    if not _state_in_low_precision(optimizer):
        return
    try:
        _HELD_LOW_PRECISION.add(optimizer)
    except TypeError:  # an optimizer that cannot be weakly referenced or hashed: only its final state is judged
        return


def _low_precision(optimizer: Any) -> bool:
    """Did the optimizer keep a floating-point tensor of lower precision than float64 in its state, now or after
    an earlier step?"""
    try:
        seen = optimizer in _HELD_LOW_PRECISION
    except TypeError:
        seen = False
    return seen or _state_in_low_precision(optimizer)


def _blame_precision(mistake: Mistake | None) -> bool:
    """May a low-precision velocity be named instead of ``mistake``? A float32 velocity and a setting rounded to
    float32 leave the same tiny error, so the state, when it shows float32, decides."""
    return mistake is None or mistake.name == FLOAT32_SETTING


def _compare_runs(mine: list, reference: list, mistakes: list, optimizer: Any = None) -> None:
    """Compare step by step; at the first difference name the first mistake the whole trajectory matches."""
    __tracebackhide__ = True
    steps = len(reference)
    for step, (got, want) in enumerate(zip(mine, reference), start=1):
        for number, (p, q) in enumerate(zip(got, want)):
            group = 0 if number < 3 else 1
            name = f"group {group}'s parameter of shape {tuple(q.shape)}"
            where = f"after step {step} of {steps} (reference: torch.optim.SGD with the same groups)"
            try:
                compare(name, p, q, rtol=1e-9, atol=1e-12, where=where)
            except CheckError as err:
                mistake = _defaults_mistake(optimizer) or first_mistake(mine, mistakes)
                if _blame_precision(mistake) and optimizer is not None and _low_precision(optimizer):
                    mistake = LOW_PRECISION
                if mistake is None and optimizer is not None and _keyed_by_shape(optimizer):
                    mistake = STATE_BY_SHAPE
                if mistake is None:
                    raise
                raise mistake_error(err.message, mistake, expected=err.expected, got=err.got) from None


SETTINGS_UNDER_OTHER_NAMES = Mistake(
    "settings under other names",
    None,
    why="the defaults dict handed to torch.optim.Optimizer names the settings otherwise than lr and momentum: a group "
    "that brings its own settings (the check's second group does) keeps them under those two names, and so does a "
    "scheduler, which changes group['lr']; step() reads your names, which hold the constructor's numbers",
    look="__init__: the keys of the defaults dict, beside the names the exercise gives the settings",
)
SETTINGS_SWAPPED = Mistake(
    "lr and momentum swapped in the defaults",
    None,
    why="the defaults dict holds the momentum under lr and the learning rate under momentum: each key takes the "
    "argument of its own name",
    look="__init__: which argument goes under which key of the defaults dict",
)


def _defaults_mistake(optimizer: Any) -> Mistake | None:
    """A defaults dict whose keys are not lr and momentum, or whose values are the other's; None otherwise."""
    defaults = getattr(optimizer, "defaults", None)
    if not isinstance(defaults, dict):
        return None
    if "lr" not in defaults or "momentum" not in defaults:
        return SETTINGS_UNDER_OTHER_NAMES
    if defaults["lr"] == MOMENTUM and defaults["momentum"] == LR:
        return SETTINGS_SWAPPED
    return None


def _keyed_by_shape(optimizer: Any) -> bool:
    """Is the optimizer's state keyed by shapes or sizes (a torch.Size, a tuple of ints, an int)?"""
    states = getattr(optimizer, "state", None)
    if not isinstance(states, dict):
        return False
    for key in states:
        if isinstance(key, int) and not isinstance(key, bool) and key < 1000:
            return True
        if isinstance(key, tuple) and all(isinstance(k, int) for k in key):
            return True
    return False


def _keyed_by_stand_ins(optimizer: Any) -> bool:
    """Is the optimizer's state keyed by something other than tensors (id(p), a name)?"""
    states = getattr(optimizer, "state", None)
    return isinstance(states, dict) and any(not isinstance(key, torch.Tensor) for key in states)


STATE_NOT_PER_PARAMETER = Mistake(
    "state not kept under the parameter",
    None,
    why="the velocities are kept in self.state, but under other keys than the parameters themselves (a position "
    "in a group, a counter, a name): such a key names a place in today's list of parameters, not the parameter, "
    "so it points at another one once groups are added or a gradient comes and goes, and whatever looks up "
    "optimizer.state[p] finds nothing; the exercise keeps each velocity under its own parameter",
    look="step(): the key it uses into self.state",
)


def _stateless_parameters(optimizer: Any) -> list[tuple[int, ...]]:
    """The shapes of the parameters that have a gradient but nothing in ``optimizer.state`` under themselves."""
    states = getattr(optimizer, "state", None)
    if not isinstance(states, dict):
        return []
    missing = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            kept = states.get(p)
            if p.grad is not None and (kept is None or (isinstance(kept, dict) and not kept)):
                missing.append(tuple(p.shape))
    return missing


def _expect_state_per_parameter(optimizer: Any) -> None:
    """The prompt keeps v in self.state[p]: after a run, each parameter with a gradient has state there."""
    __tracebackhide__ = True
    missing = _stateless_parameters(optimizer)
    if not missing:
        return
    keys = ", ".join(repr(key) for key in list(optimizer.state)[:3])
    raise mistake_error(
        f"after the run, self.state holds nothing under {len(missing)} of the parameters that have a gradient "
        f"(shapes {', '.join(map(str, missing))})",
        STATE_NOT_PER_PARAMETER,
        expected="each such parameter's velocity kept under the parameter itself",
        got=f"keys {keys}" if keys else "an empty self.state",
    )


def _torch_sgd(groups: list) -> torch.optim.Optimizer:
    return torch.optim.SGD(groups, lr=LR, momentum=MOMENTUM)


@exercise("06.3", "SGD with momentum")
def check_sgd_momentum(SGDMomentum: Any, steps: int = 6) -> None:
    """Train side by side with ``torch.optim.SGD(momentum=...)`` (two groups, a parameter without gradient),
    then with zero_grad(set_to_none=False), then resumed from state_dict(), then with a gradient missing at one step."""
    __tracebackhide__ = True
    cls = expect_class(SGDMomentum, torch.optim.Optimizer, "SGDMomentum")
    expect_written(cls, ("__init__", "step"))
    if issubclass(cls, torch.optim.SGD):
        raise CheckError(
            "SGDMomentum derives from torch.optim.SGD, which it should replace",
            usage=True,
            hint="derive from torch.optim.Optimizer and write step() yourself",
        )
    steps = expect_count(steps, "steps", minimum=2, maximum=MAX_STEPS)
    with torch_settings_kept("your SGDMomentum"):
        _judge_optimizer(cls, steps)
    passed(f"SGDMomentum: same parameters as torch.optim.SGD(momentum=...) after each of {steps} steps")


def _judge_optimizer(cls: type, steps: int) -> None:
    """The four runs side by side with torch.optim.SGD, then the state kept per parameter."""
    __tracebackhide__ = True
    make = _student_maker(cls)
    mine, optimizer = _student_run(make, _Setup(steps))
    reference, _ = _trajectory(_torch_sgd, _Setup(steps))
    _compare_runs(mine, reference, [*RULE_MISTAKES, LOOP_LEFT, GROUP_SKIPPED, FIRST_STEP_SKIPPED], optimizer)
    kept_setup = _Setup(min(steps, 3), set_to_none=False)
    kept, _ = _student_run(make, kept_setup)
    _compare_runs(kept, _trajectory(_torch_sgd, kept_setup)[0], [ALIASED])
    resume_setup = _Setup(steps, resume_at=steps // 2)
    resumed, resumed_optimizer = _student_run(make, resume_setup)
    lost = STATE_BY_ID if _keyed_by_stand_ins(resumed_optimizer) else NOT_IN_STATE
    _compare_runs(resumed, _trajectory(_torch_sgd, resume_setup)[0], [lost])
    gap_setup = _Setup(5, unused=False, gap_at=3)
    gap, _ = _student_run(make, gap_setup)
    _compare_runs(gap, _trajectory(_torch_sgd, gap_setup)[0], [MOVED_WITHOUT_GRADIENT, VELOCITY_DROPPED])
    _expect_state_per_parameter(optimizer)

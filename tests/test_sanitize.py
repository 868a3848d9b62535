"""The nbval sanitize file: every rule is exercised by an example, and only those."""

import re
from pathlib import Path

import pytest
from nbval.plugin import get_sanitize_patterns

CFG = Path(__file__).with_name("nbval_sanitize.cfg")

# (text as a notebook prints it, text after sanitizing): one per rule, in file order.
EXAMPLES = [
    (
        "logged to /home/me/lab/build/test/runs/02_manual_backprop/manual; view",
        "logged to runs/02_manual_backprop/manual; view",
    ),
    ("/tmp/ipykernel_4242/3141592653.py:7: UserWarning: x", "<notebook cell>: UserWarning: x"),
    ("<Foo object at 0x7f3a2c1d5e80>", "<Foo object at 0xADDRESS>"),
    ("saved to /tmp/tmpk2_9zq1x/model.pt", "saved to /tmp/TMPDIR/model.pt"),
]


def rules():
    return get_sanitize_patterns(CFG.read_text())


def sanitize(text, patterns):
    for regex, replace in patterns:
        text = re.sub(regex, replace, text)
    return text


def test_rule_count_matches_examples():
    # A new rule needs a new example here; a removed rule, the example's removal.
    assert len(rules()) == len(EXAMPLES), (
        f"{CFG.name} has {len(rules())} rules but this test has {len(EXAMPLES)} examples"
    )


def test_each_rule_rewrites_its_example():
    for (regex, replace), (raw, clean) in zip(rules(), EXAMPLES):
        assert re.sub(regex, replace, raw) == clean, f"rule {regex!r} on {raw!r}"


def test_rules_leave_ordinary_output_alone():
    ordinary = "PASS  manual backward: both gradients match autograd (max rel. error < 1e-08)\nstep 499: loss 1.23e-05"
    assert sanitize(ordinary, rules()) == ordinary


@pytest.mark.parametrize(
    "raw",
    [
        "runs/06_optim/adam",
        "../runs/06_optim/adam",
        "runs/06_optim/adam-20261126-101500-3",
        "runs/06_optim/adam-TIMESTAMP",
        "../build/regenerate/runs/06_optim/adam-20261126-101500",
    ],
)
def test_every_form_of_a_run_folder_reads_the_same(raw):
    # stored outputs (timestamped run folders, ../runs from notebooks/) and fresh ones
    # (LAB_RUNS_DIR under build/) must compare equal
    assert sanitize(f"logged to {raw}; view", rules()) == "logged to runs/06_optim/adam; view"
    assert sanitize(f"folder={raw}\n", rules()) == "folder=runs/06_optim/adam\n"

"""notebooks/ddp_train.py scales the learning rate linearly for SGD and with the square root for Adam."""

import ast
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "notebooks" / "ddp_train.py"


def scaled_lr():
    """The script's own function, without running the script (it starts a process group)."""
    tree = ast.parse(SCRIPT.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "scaled_lr")
    namespace: dict = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(SCRIPT), "exec"), namespace)
    return namespace["scaled_lr"]


@pytest.mark.parametrize("global_batch", [64, 128, 256, 1024])
def test_sgd_scales_linearly_and_adam_with_the_square_root(global_batch):
    k = global_batch / 64
    assert scaled_lr()(0.05, global_batch, "sgd") == pytest.approx(0.05 * k)
    assert scaled_lr()(1e-3, global_batch, "adam") == pytest.approx(1e-3 * math.sqrt(k))


def test_the_script_uses_the_rule_for_the_optimizer_it_builds():
    source = SCRIPT.read_text()
    assert "lr = scaled_lr(base_lr, global_batch, args.optimizer)" in source
    assert (
        "torch.optim.SGD(model.parameters(), lr=lr" in source
        and "torch.optim.Adam(model.parameters(), lr=lr)" in source
    )
    assert "base_lr * global_batch / 64" not in source  # the linear rule no longer applies to Adam

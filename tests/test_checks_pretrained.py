"""Checks of notebook 08: the VGG16 prediction (08.1) and feature extraction on a ResNet (08.2):
one test per named mistake, the correct variants the prompt allows, and bad input."""

import contextlib
import copy
import re
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import labsupport as lab
import labsupport.checks.nb08_pretrained_models as nb08
from labsupport.checks import core, running

# ---------------------------------------------------------------- 08.1 where VGG16's parameters are


def test_the_vgg_share_is_counted(capsys):
    lab.check_vgg_share_prediction(0.9)
    out = capsys.readouterr().out
    assert out.startswith("PASS  the share of VGG16's parameters in its Linear layers: 0.89 is right")
    assert "(recorded answer: 0.9)" in out


@pytest.mark.parametrize("answer", [torch.tensor(0.89), 0.89, 0.87, 0.9, 0.91])
def test_right_shares_pass_in_any_numeric_form(answer, capsys):
    lab.check_vgg_share_prediction(answer)
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("answer", [0.86, 0.92])  # 0.86: the first two Linear layers only; was right (within 5%)
def test_shares_beyond_two_hundredths_are_not_right(answer, capsys):
    lab.check_vgg_share_prediction(answer)
    assert capsys.readouterr().out.startswith("NOT RIGHT")


@pytest.mark.parametrize(
    "answer, note",
    [
        (0.11, "convolutions' share"),
        (0.74, "first Linear layer's share alone"),
        (0.17, "share the Linear layers would hold if the first took 512"),  # audit 5: the 7 x 7 forgotten
        (0.1875, "share of the layers, 3 of VGG16's 16"),  # audit 5: layers counted, not parameters
    ],
)
def test_each_known_wrong_share_gets_its_note(answer, note, capsys):
    lab.check_vgg_share_prediction(answer)
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    lab.hint("08.1")
    assert f"About {answer!r}: That is the {note}" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [0.87, 0.88, 0.89, 0.9, 0.91])
def test_right_shares_get_no_note(answer, capsys):
    lab.check_vgg_share_prediction(answer)
    lab.hint("08.1")
    assert "About" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer",
    [None, 89, -0.1, "0.89 or so", "89", [0.89], float("nan"), float("inf"), True, torch.zeros((), device="meta")],
)
def test_malformed_shares_are_refused_before_anything_is_recorded(answer):
    with pytest.raises(lab.CheckError):
        lab.check_vgg_share_prediction(answer)
    assert not core.COMMITTED


@pytest.mark.parametrize("answer", ["0.89", " 0.9 ", "'0.89'", "89%", "89 %", torch.tensor([0.89])])
def test_right_shares_written_as_text_or_a_one_element_tensor_pass(answer, capsys):
    """08.1 audit 6: "0.89", "89%" and torch.tensor([0.89]) were refused as "must be a number"."""
    lab.check_vgg_share_prediction(answer)
    assert capsys.readouterr().out.startswith(
        "PASS  the share of VGG16's parameters in its Linear layers: 0.89 is right"
    )


def test_a_wrong_share_written_as_text_is_judged_like_the_number(capsys):
    lab.check_vgg_share_prediction("11%")
    assert capsys.readouterr().out.startswith("NOT RIGHT")
    lab.hint("08.1")
    assert "convolutions' share" in capsys.readouterr().out


def test_a_wrong_share_is_recorded_first_and_never_passes(capsys):
    lab.check_vgg_share_prediction(0.11)
    first = capsys.readouterr().out
    assert first.startswith("NOT RIGHT") and "Now explain: which single layer" in first
    lab.check_vgg_share_prediction(0.89)  # the right answer, after reading the outcome
    second = capsys.readouterr().out
    assert "PASS" not in second and "recorded answer: 0.11" in second
    lab.hint("08.1")
    assert "convolutions' share" in capsys.readouterr().out


# ---------------------------------------------------------------- 08.2 freeze, then a new head


def make_prepare(freeze=True, replace=True, classes=None, freeze_head=False, optimizer="head", nan=False,
                 head=None, momentum=0.0, lr=0.01, kind=torch.optim.SGD, width=None, reset=False):  # fmt: skip
    """prepare_for_transfer; each keyword switches on one way of writing it (a mistake or a variant)."""

    def prepare(model, num_classes):
        old_params = list(model.fc.parameters())
        if reset:
            for module in model.modules():
                if hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        if freeze:
            model.requires_grad_(False)
        if replace:
            if head == "sequential":
                model.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.fc.in_features, num_classes))
            else:
                model.fc = nn.Linear(width or model.fc.in_features, classes or num_classes)
        if freeze_head:
            model.fc.requires_grad_(False)
        if nan:
            torch.nn.init.constant_(model.fc.weight, float("nan"))
        params = {
            "head": model.fc.parameters(),
            "all": model.parameters(),
            "old": old_params,
            "backbone": model.layer4.parameters(),
        }[optimizer]
        if kind is torch.optim.SGD:
            return model, kind(params, lr=lr, momentum=momentum)
        return model, kind(params, lr=lr)

    return prepare


def make_step(eval_mode=True, zero_grad=True, step=True, late_zero=False, summed=False, returns="item",
              steps=1, softmax=False, nll=False, recompute=False, no_grad=False):  # fmt: skip
    """transfer_step; each keyword switches on one way of writing it."""

    def transfer_step(model, optimizer, images, labels):
        if eval_mode:
            model.eval()
            model.fc.train()
        else:
            model.train()
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            scores = model(images)
        scores = scores.softmax(dim=1) if softmax else scores
        if nll:
            loss = nn.functional.nll_loss(scores, labels)
        else:
            loss = nn.functional.cross_entropy(scores, labels, reduction="sum" if summed else "mean")
        if zero_grad and not late_zero:
            optimizer.zero_grad()
        loss.backward()
        if late_zero:
            optimizer.zero_grad()
        for _ in range(steps if step else 0):
            optimizer.step()
        if recompute:
            loss = nn.functional.cross_entropy(model(images), labels)
        return {"item": loss.item(), "tensor": loss, "detached": loss.detach(), "none": None}[returns]

    return transfer_step


def test_check_transfer_passes_the_reference(capsys):
    lab.check_transfer(make_prepare(), make_step())
    assert capsys.readouterr().out.startswith("PASS  transfer: backbone and batch-norm statistics frozen")


def _features_then_head(model, optimizer, images, labels):
    """A correct step that runs the frozen backbone under no_grad, then the head."""
    model.eval()
    backbone = nn.Sequential(*list(model.children())[:-1])
    with torch.no_grad():
        features = backbone(images).flatten(1)
    loss = nn.functional.cross_entropy(model.fc(features), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _nll_of_log_softmax(model, optimizer, images, labels):
    """A correct step that writes cross-entropy as nll_loss of log-probabilities."""
    model.eval()
    log_probs = nn.functional.log_softmax(model(images), dim=1)
    loss = nn.functional.nll_loss(log_probs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _prepare_a_copy(model, num_classes):
    """A correct prepare that returns a new model object."""
    model = copy.deepcopy(model)
    return make_prepare()(model, num_classes)


def _frozen_batch_norms(module):
    """Each BatchNorm2d of ``module`` swapped for torchvision's FrozenBatchNorm2d, its statistics copied."""
    from torchvision.ops.misc import FrozenBatchNorm2d

    for name, child in module.named_children():
        if not isinstance(child, nn.BatchNorm2d):
            _frozen_batch_norms(child)
            continue
        frozen = FrozenBatchNorm2d(child.num_features, eps=child.eps)
        for key in ("weight", "bias", "running_mean", "running_var"):
            getattr(frozen, key).copy_(getattr(child, key).detach())
        setattr(module, name, frozen)


def _prepare_with_frozen_batch_norm(model, num_classes):
    """A correct prepare that freezes batch norm for good, as torchvision's detection models do."""
    _frozen_batch_norms(model)
    return make_prepare()(model, num_classes)


def _prepare_frozen_by_name(model, num_classes):
    """The backbone frozen by a name test that lets only the head's weight through."""
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name == "fc.weight"
    return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)


def _prepare_with_a_frozen_group(model, num_classes):
    """Correct: a frozen backbone kept in the optimizer, in a group of its own with a smaller learning rate."""
    model.requires_grad_(False)
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    groups = [{"params": model.layer4.parameters(), "lr": 0.001}, {"params": model.fc.parameters()}]
    return model, torch.optim.SGD(groups, lr=0.01)


CORRECT_TRANSFERS = {
    # audit 3: FrozenBatchNorm2d keeps no num_batches_tracked, which read as "statistics changed"
    "FrozenBatchNorm2d": (_prepare_with_frozen_batch_norm, make_step(eval_mode=False)),
    # issue 23: a frozen backbone left in the optimizer (harmless: no gradient, no step) was refused
    "frozen backbone in the optimizer": (make_prepare(optimizer="all"), make_step()),
    "... with momentum": (make_prepare(optimizer="all", momentum=0.9), make_step()),
    "momentum on the head": (make_prepare(momentum=0.9), make_step()),
    "a head with dropout": (make_prepare(head="sequential"), make_step()),
    "backbone under no_grad": (make_prepare(), _features_then_head),
    "nll_loss of log_softmax": (make_prepare(), _nll_of_log_softmax),
    "a new model object": (_prepare_a_copy, make_step()),
    "lr as a tensor": (make_prepare(lr=torch.tensor(0.01)), make_step()),  # audit: float32 0.01 was "not 0.01"
    # audit 2: refused as "backbone not frozen", though the backbone never changes
    "only the head in the optimizer": (make_prepare(freeze=False), make_step()),
    "no_grad backbone, all in the optimizer": (make_prepare(freeze=False, optimizer="all"), _features_then_head),
    # audit 5: refused as "optimizer settings": the lr of every group was read, not only of those holding the head
    "a frozen group with its own lr": (_prepare_with_a_frozen_group, make_step()),
}


@pytest.mark.parametrize("prepare, step", CORRECT_TRANSFERS.values(), ids=CORRECT_TRANSFERS.keys())
def test_correct_variants_pass(prepare, step, capsys):
    lab.check_transfer(prepare, step)
    assert capsys.readouterr().out.startswith("PASS")


def _step_with_loss(loss_of):
    """A step whose loss is ``loss_of(scores, labels)``; everything else as the reference."""

    def transfer_step(model, optimizer, images, labels):
        model.eval()
        loss = loss_of(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return transfer_step


def _log_softmax_over_batch(scores, labels):
    return nn.functional.nll_loss(nn.functional.log_softmax(scores, dim=0), labels)


def _nll_of_probabilities(scores, labels):
    return nn.functional.nll_loss(scores.softmax(dim=1), labels)


def _mse_to_one_hot(scores, labels):
    return nn.functional.mse_loss(scores, nn.functional.one_hot(labels, scores.shape[1]).float())


def _mse_of_probabilities(scores, labels):
    return nn.functional.mse_loss(scores.softmax(dim=1), nn.functional.one_hot(labels, scores.shape[1]).float())


def _mse_to_indices(scores, labels):
    return nn.functional.mse_loss(scores, labels.float())


def _label_smoothing(scores, labels):
    return nn.CrossEntropyLoss(label_smoothing=0.1)(scores, labels)


def _bce_to_one_hot(scores, labels):
    return nn.functional.binary_cross_entropy_with_logits(
        scores, nn.functional.one_hot(labels, scores.shape[1]).float()
    )


def _bce_to_indices(scores, labels):
    return nn.BCEWithLogitsLoss()(scores, labels.float())


def _mean_divided_by_the_batch_size(scores, labels):
    return nn.functional.cross_entropy(scores, labels) / len(labels)


def _step_before_backward(model, optimizer, images, labels):
    model.eval()
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    optimizer.step()
    loss.backward()
    return loss.item()


def _returns_the_batch_total(model, optimizer, images, labels):
    """The reference step returning what a tutorial's epoch loop adds up: the mean loss times the batch size."""
    return make_step()(model, optimizer, images, labels) * len(labels)


def _returns_the_loss_per_image(model, optimizer, images, labels):
    """Twelfth audit: the mean loss divided once more by the batch size got a generic "loss does not match"."""
    return make_step()(model, optimizer, images, labels) / len(labels)


def _returns_the_accuracy(as_count):
    """Twelfth audit: a step returning the batch's accuracy (share or count) got a generic "loss does not match"."""

    def transfer_step(model, optimizer, images, labels):
        model.eval()
        scores = model(images)
        loss = nn.functional.cross_entropy(scores, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct = (scores.argmax(dim=1) == labels).sum().item()
        return correct if as_count else correct / len(labels)

    return transfer_step


def _prepare_around_the_old_head(model, num_classes):
    model.requires_grad_(False)
    model.fc = nn.Sequential(model.fc, nn.Linear(model.fc.out_features, num_classes))
    return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)


def _prepare_from_out_features(model, num_classes):
    model.requires_grad_(False)
    model.fc = nn.Linear(model.fc.out_features, num_classes)
    return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)


def _prepare_weight_only(model, num_classes):
    model.requires_grad_(False)
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    return model, torch.optim.SGD([model.fc.weight], lr=0.01)


def _prepare_in_eval_mode(model, num_classes):
    """The reference prepare that also puts the model in eval mode, once."""
    model, optimizer = make_prepare()(model, num_classes)
    model.eval()
    return model, optimizer


def _step_in_the_mode_it_finds(model, optimizer, images, labels):
    """The reference step without a mode of its own: it relies on the mode prepare_for_transfer set."""
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _stops_at_the_loss(model, optimizer, images, labels):
    """Half-written: the loss is computed and returned, and nothing trains on it yet."""
    model.eval()
    loss = nn.functional.cross_entropy(model(images), labels)
    return loss.item()


def _item_before_backward(model, optimizer, images, labels):
    """The loss made the float the prompt asks for before backward() ran on it."""
    model.eval()
    loss = nn.functional.cross_entropy(model(images), labels).item()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def _prepare_with_a_softmax_head(model, num_classes):
    """Audit 11: a head that ends with a softmax, trained with the cross-entropy: passed (probabilities normalised
    twice), since the reference step runs the student's own model."""
    model.requires_grad_(False)
    model.fc = nn.Sequential(nn.Linear(model.fc.in_features, num_classes), nn.Softmax(dim=1))
    return model, torch.optim.SGD(model.fc.parameters(), lr=0.01)


def _labels_then_scores(scores, labels):
    """Audit 11: the loss's arguments in the other order: a bare RuntimeError ("multi-target not supported")."""
    return nn.functional.cross_entropy(labels.float(), scores)


def _prepare_without_running_statistics(model, num_classes):
    """Batch norm told to stop tracking its statistics, taken for freezing them: in training mode it then
    normalises with each batch's own statistics."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.track_running_stats = False
    return make_prepare()(model, num_classes)


def _step_in_training_mode_with_the_buffers_put_back(model, optimizer, images, labels):
    """The step in training mode, with batch norm's buffers saved before it and copied back after it."""
    buffers = {name: buf.clone() for name, buf in model.named_buffers()}
    loss = make_step(eval_mode=False)(model, optimizer, images, labels)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            buf.copy_(buffers[name])
    return loss


def _step_with_a_yield(model, optimizer, images, labels):
    """Fifteenth audit: a generator transfer_step was told "the step went no further than the loss"."""
    yield make_step()(model, optimizer, images, labels)


def _rounded(rounding):
    """transfer_step with the loss it returns passed through ``rounding``."""

    def transfer_step(model, optimizer, images, labels):
        return rounding(make_step()(model, optimizer, images, labels))

    return transfer_step


TRANSFER_MISTAKES = [
    (make_prepare(replace=False), make_step(), "head not replaced"),
    (make_prepare(classes=10), make_step(), "wrong number of classes"),
    (make_prepare(width=512), make_step(), "head width fixed"),  # ResNet-18's width: passed
    (make_prepare(freeze=False, optimizer="all"), make_step(), "backbone not frozen"),
    (make_prepare(freeze_head=True), make_step(), "head frozen"),
    (_prepare_frozen_by_name, make_step(), "part of the head frozen"),  # audit 5: "the head was frozen too"
    (make_prepare(optimizer="old"), make_step(), "optimizer over the old head"),
    (make_prepare(optimizer="backbone"), make_step(), "head not in the optimizer"),
    (make_prepare(lr=0.1), make_step(), "optimizer settings"),
    (make_prepare(kind=torch.optim.Adam), make_step(), "optimizer settings"),
    (make_prepare(), make_step(eval_mode=False), "batch norm in training mode"),
    (make_prepare(), make_step(zero_grad=False), "zero_grad missing"),  # issue 23: passed ("head changed")
    (make_prepare(momentum=0.9), make_step(zero_grad=False), "zero_grad missing"),
    (make_prepare(), make_step(step=False), "optimizer.step() missing"),
    (make_prepare(), make_step(late_zero=True), "no gradient at step"),
    (make_prepare(), make_step(summed=True), "loss summed over the batch"),
    (make_prepare(), make_step(steps=2), "optimizer stepped twice"),
    (make_prepare(), make_step(softmax=True), "softmax before the loss"),
    (make_prepare(), make_step(nll=True), "nll_loss on raw scores"),
    (make_prepare(), make_step(recompute=True), "loss recomputed after the step"),
    (make_prepare(head="sequential"), make_step(recompute=True), "loss recomputed after the step"),  # dropout
    (make_prepare(), make_step(no_grad=True), "head under no_grad"),  # was: a generic requires_grad cause
    # ninth audit: re-initialised pretrained weights were told "the optimizer updated them" (it held the head only)
    (make_prepare(reset=True), make_step(), "backbone changed by prepare_for_transfer"),
    (make_prepare(), make_step(returns="tensor"), "loss returned as a tensor"),  # issue 23: passed
    (make_prepare(), make_step(returns="detached"), "loss returned as a tensor"),
    # the audit's: a generic "weight does not match" (the first two), "holds none of the new head's" (the third)
    (make_prepare(), _step_with_loss(_log_softmax_over_batch), "softmax over the batch"),
    (make_prepare(), _step_with_loss(_nll_of_probabilities), "nll_loss on probabilities"),
    (_prepare_weight_only, make_step(), "part of the head in the optimizer"),
    # audit 4: a generic "weight does not match" (the first two), a broadcasting error (the third)
    (make_prepare(), _step_with_loss(_mse_to_one_hot), "regression loss, not cross-entropy"),
    (make_prepare(), _step_with_loss(_mse_of_probabilities), "regression loss, not cross-entropy"),
    (make_prepare(), _step_with_loss(_mse_to_indices), "regression loss, not cross-entropy"),
    # audit 5: a generic "weight does not match" (the first three and the fifth), "raised ValueError" (the fourth),
    # "optimizer.step() is not called" (a wrong cause: it ran, before backward), a generic "loss does not match"
    (make_prepare(), _step_with_loss(_label_smoothing), "label smoothing"),
    (make_prepare(momentum=0.9), _step_with_loss(_label_smoothing), "label smoothing"),
    (make_prepare(), _step_with_loss(_bce_to_one_hot), "binary cross-entropy"),
    (make_prepare(), _step_with_loss(_bce_to_indices), "binary cross-entropy"),
    (make_prepare(), _step_with_loss(_mean_divided_by_the_batch_size), "loss averaged twice"),
    (make_prepare(), _step_before_backward, "step before backward"),
    (make_prepare(), _returns_the_batch_total, "loss returned as the batch's total"),
    (make_prepare(), _returns_the_loss_per_image, "loss returned divided by the batch size"),
    (make_prepare(), _returns_the_accuracy(as_count=False), "accuracy returned"),
    (make_prepare(), _returns_the_accuracy(as_count=True), "accuracy returned"),
    (make_prepare(), _rounded(lambda loss: round(loss, 2)), "loss rounded"),
    (make_prepare(), _step_with_a_yield, "transfer_step is a generator"),
    # audit 2: "head frozen" (a wrong cause), and a generic "inner sizes differ"
    (_prepare_around_the_old_head, make_step(), "old head kept"),
    (_prepare_from_out_features, make_step(), "head reads the old head's outputs"),
    # audit 3: passed, since nothing switched the model back to training mode between the steps
    (_prepare_in_eval_mode, _step_in_the_mode_it_finds, "eval mode set only in prepare_for_transfer"),
    # audit 7: "no gradient at step" (a step that never ran), and a bare AttributeError
    (make_prepare(), _stops_at_the_loss, "no backward, no step"),
    (make_prepare(), _item_before_backward, "loss made a number before backward"),
    (_prepare_with_a_softmax_head, make_step(), "softmax in the head"),
    (make_prepare(), _step_with_loss(_labels_then_scores), "loss arguments swapped"),
    # thirteenth audit: a generic "weight does not match" (the backbone's numbers all stayed as they were)
    (_prepare_without_running_statistics, make_step(eval_mode=False), "features from batch statistics"),
    (make_prepare(), _step_in_training_mode_with_the_buffers_put_back, "features from batch statistics"),
]


def _solution_lines(exercise):
    """The code of an exercise's solution in notebook 08, line by line and each right-hand side, comments cut."""
    import nbformat

    notebook = nbformat.read(Path(__file__).parent.parent / "notebooks" / "08_pretrained_models.ipynb", 4)
    marks = [c.metadata.get("lab", {}) for c in notebook.cells]
    cell = next(
        c for c, m in zip(notebook.cells, marks) if m.get("exercise") == exercise and m.get("role") == "solution"
    )
    region = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    code = [line.split("#")[0].strip() for line in region.splitlines()]
    code += [line.split(" = ", 1)[1] for line in code if " = " in line]
    return {line for line in code if len(line) >= 12}


# optimizer.step() and loss.backward() stay out: a hint names them where it speaks of the student's own call.
TRANSFER_SOLUTION = _solution_lines("08.2") - {"optimizer.step()", "loss.backward()"}


def _quotes_the_solution(err):
    """Audit 6: hints and pointers quoted the solution's lines (the new head, `return loss.item()`, zero_grad)."""
    said = f"{err.hint} {err.look}"
    return sorted(line for line in TRANSFER_SOLUTION if line in said)


@pytest.mark.parametrize("prepare, step, name", TRANSFER_MISTAKES, ids=[n for _, _, n in TRANSFER_MISTAKES])
def test_each_transfer_mistake_is_named(prepare, step, name):
    with pytest.raises(lab.CheckError) as err:
        lab.check_transfer(prepare, step)
    assert err.value.mistake == name, str(err.value)
    assert err.value.hint and name not in err.value.message
    assert not _quotes_the_solution(err.value)


def _step_divided_by_four(model, optimizer, images, labels):
    """The reference step with the mean written as a sum over the batch size the check used to give (4)."""
    model.eval()
    loss = nn.functional.cross_entropy(model(images), labels, reduction="sum") / 4
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def test_a_loss_averaged_over_a_fixed_batch_size_is_refused():
    """Audit 3: every batch held 4 images, so a sum divided by 4 passed for the mean."""
    with pytest.raises(lab.CheckError, match="after step 2"):
        lab.check_transfer(make_prepare(), _step_divided_by_four)


def test_every_mistake_the_check_names_has_a_test():
    source = Path(nb08.__file__).read_text()
    named = set(re.findall(r'Mistake\(\s*"([^"]+)"', source))
    assert named == {name for _, _, name in TRANSFER_MISTAKES}


def _raises(*args):
    raise RuntimeError("boom")


def _never(*args):
    while True:  # never returns, and sleeps rather than spin: the time limit costs no CPU
        time.sleep(0.01)


class Raises(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


class Never(nn.Module):
    def forward(self, x):
        while True:  # sleeps rather than spin
            time.sleep(0.01)


def _head(module):
    def prepare(model, num_classes):
        model.requires_grad_(False)
        model.fc = module
        return model, torch.optim.SGD(model.fc.parameters() or [torch.zeros(1, requires_grad=True)], lr=0.01)

    return prepare


def _on_meta(model, num_classes):
    model, optimizer = make_prepare()(model, num_classes)
    return model.to("meta"), optimizer


BAD_PREPARES = {
    "None": None,
    "list": [1, 2],
    "str": "prepare",
    "raises": _raises,
    "never returns": _never,
    "model only": lambda m, n: m,
    "no optimizer": lambda m, n: (m, None),
    "swapped": lambda m, n: tuple(reversed(make_prepare()(m, n))),
    "NaN": lambda *a: float("nan"),
    "NaN head": make_prepare(nan=True),
    "head raises": _head(nn.Sequential(Raises(), nn.Linear(512, 3))),
    "head never returns": _head(nn.Sequential(Never(), nn.Linear(512, 3))),
    "on meta": _on_meta,
}


@pytest.mark.parametrize("bad", BAD_PREPARES.values(), ids=BAD_PREPARES.keys())
def test_bad_prepares_are_one_sentence(bad, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 1.0)
    with pytest.raises(lab.CheckError) as err:
        lab.check_transfer(bad, make_step())
    text = str(err.value)
    assert "could not use what it was given" not in text and "Traceback" not in text, text


BAD_STEPS = {
    "None": None,
    "list": [1, 2],
    "raises": _raises,
    "never returns": _never,
    "returns None": make_step(returns="none"),
    "returns a string": lambda *a: make_step()(*a) and "0.5",
    "returns NaN": lambda *a: make_step()(*a) and float("nan"),
    "returns a list": lambda *a: [make_step()(*a)],
}


@pytest.mark.parametrize("bad", BAD_STEPS.values(), ids=BAD_STEPS.keys())
def test_bad_steps_are_one_sentence(bad, monkeypatch):
    monkeypatch.setattr(running, "TIME_LIMIT", 1.0)
    with pytest.raises(lab.CheckError) as err:
        lab.check_transfer(make_prepare(), bad)
    text = str(err.value)
    assert "could not use what it was given" not in text and "Traceback" not in text, text
    assert not _quotes_the_solution(err.value)


def _stub_step(model, optimizer, images, labels):
    pass


def _returns_the_method(model, optimizer, images, labels):
    loss = make_step(returns="detached")(model, optimizer, images, labels)
    return loss.item


@pytest.mark.parametrize(
    "step, message",
    [
        (_stub_step, "transfer_step returned None and did nothing with the model"),
        (_returns_the_method, "transfer_step returned a builtin_function_or_method, a method or function"),
    ],
    ids=["stub", "method"],
)
def test_an_unwritten_step_and_a_method_returned_are_one_sentence(step, message):
    """Audit 7: a `pass` stub was told "no gradient at step", and `return loss.item` "must be a number"."""
    with pytest.raises(lab.CheckError) as err:
        lab.check_transfer(make_prepare(), step)
    assert err.value.usage
    assert err.value.message.startswith(message)


# ------------------------------------------------------------------ thirteenth audit


def test_a_share_with_a_decimal_comma_in_quotes_passes(capsys):
    """08.1: "0,89" (a decimal comma, as many languages write it) was told to drop the quotes, which makes a tuple."""
    lab.check_vgg_share_prediction("0,89")
    assert capsys.readouterr().out.startswith("PASS  the share of VGG16's parameters in its Linear layers: 0.89 is")


def test_a_share_with_a_decimal_comma_without_quotes_hears_how_python_reads_it():
    """0,89 without quotes is the tuple (0, 89): it was told that "a comma in a return line makes a tuple"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_vgg_share_prediction((0, 89))
    assert "two numbers, 0 and 89" in info.value.hint and "dot" in info.value.hint
    assert not core.COMMITTED


# ---------------------------------------------------------------- fifteenth audit: bad input


def _step_then_gradients_off(model, optimizer, images, labels):
    loss = make_step()(model, optimizer, images, labels)
    torch.set_grad_enabled(False)
    return loss


def test_a_step_that_switches_gradients_off_for_good_is_named_and_the_setting_restored(capsys):
    """torch.set_grad_enabled(False) left on by transfer_step got "the check could not use what it was given"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_transfer(make_prepare(), _step_then_gradients_off)
    assert info.value.mistake == "torch settings changed for the whole program"
    assert info.value.message.startswith("your transfer_step left gradient recording off")
    assert torch.is_grad_enabled()
    lab.check_transfer(make_prepare(), make_step())
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_a_loss_rounded_to_a_few_decimals_is_named(digits):
    """Fifteenth audit: round(loss, 2) got expected/got only. (int(loss) is named too, unless the batch's count of
    right answers is the same whole number: then "accuracy returned" comes first.)"""
    with pytest.raises(lab.CheckError) as info:
        lab.check_transfer(make_prepare(), _rounded(lambda loss: round(loss, digits)))
    assert info.value.mistake == "loss rounded"


def test_a_loss_rounded_to_four_decimals_passes(capsys):
    lab.check_transfer(make_prepare(), _rounded(lambda loss: round(loss, 4)))
    assert "PASS" in capsys.readouterr().out


def test_a_share_too_large_for_a_float_gets_a_sentence():
    """08.1: 10**400 got "the check could not use what it was given (OverflowError ...)"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_vgg_share_prediction(10**400)
    assert info.value.usage and "between 0 and 1" in info.value.message
    assert "could not use" not in str(info.value)

"""The check engine: messages, rendering, require(), student calls, comparison, predictions."""

import linecache
import multiprocessing
import signal
import sys
import time

import numpy as np
import pytest
import torch

import labsupport as lab
from labsupport.checks import core, running, values
from labsupport.checks.core import CheckError


def message(fn, *args, **kwargs) -> str:
    with pytest.raises(CheckError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ----------------------------------------------------------------- the failure block


def test_check_error_reads_expected_got_hint_in_that_order():
    err = CheckError("w is wrong", expected="shape (2, 3)", got="shape (3, 2)", hint="a transpose")
    assert str(err) == "w is wrong. Expected shape (2, 3); got shape (3, 2). Likely mistake: a transpose"
    assert str(CheckError("plain sentence.")) == "plain sentence."


def test_failed_check_renders_as_a_short_block_in_ipython(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("import torch\nfrom labsupport.checks import core\ncore.compare('y', torch.zeros(2), torch.ones(2))")
    out = capsys.readouterr().out
    assert "CHECK FAILED" in out and "y does not match the reference" in out
    assert "Traceback" not in out and "core.py" not in out
    assert len(out.strip().splitlines()) <= 6
    shell.run_cell("import labsupport as lab\nlab.show_traceback()")
    full = capsys.readouterr().out
    assert "Traceback" in full and "values.py" in full  # the full traceback stays available
    InteractiveShell.clear_instance()


def test_show_traceback_before_any_failure(capsys):
    lab.show_traceback()
    assert "no check has failed" in capsys.readouterr().out


# ----------------------------------------------------------------- exercises and require()


def test_exercise_labels_failures_and_records_success(capsys):
    @core.exercise("99.1", "doubling")
    def check_double(fn):
        core.compare("double(x)", core.run_student(fn, torch.ones(2), what="double"), torch.full((2,), 2.0))
        core.passed("doubling")

    with pytest.raises(core.ExerciseNotSolved, match=r"Exercise 99\.1 \(doubling\)"):
        lab.require("99.1")
    with pytest.raises(CheckError) as info:
        check_double(lambda x: x)
    assert info.value.exercise == "Exercise 99.1: doubling"
    check_double(lambda x: 2 * x)
    assert capsys.readouterr().out == "PASS  doubling\n"
    lab.require("99.1")  # solved: returns quietly
    with pytest.raises(CheckError):
        check_double(lambda x: x)  # failing again un-solves it
    with pytest.raises(core.ExerciseNotSolved):
        lab.require("99.1")


def test_a_predictions_demo_waits_for_any_recorded_answer_and_says_so(capsys):
    """The cell after a prediction shows what happens: it runs once an answer is recorded, right or wrong, and
    before that asks for the prediction (never for a PASS that a wrong first answer can no longer get)."""
    from labsupport.checks.predictions import check_prediction

    @core.exercise("99.8", "predict the sign", prediction=True)
    def check_sign(prediction):
        check_prediction("the sign", prediction, "plus", choices=("plus", "minus"), why="it is squared")

    with pytest.raises(core.ExerciseNotSolved) as info:
        lab.require("99.8")
    text = str(info.value)
    assert "shows what happens in Exercise 99.8" in text and "write your prediction and run its check" in text
    assert "PASS" not in text
    with pytest.raises(CheckError):
        check_sign(None)  # no answer yet: nothing is recorded
    with pytest.raises(core.ExerciseNotSolved):
        lab.require("99.8")
    check_sign("minus")
    assert "NOT RIGHT" in capsys.readouterr().out
    lab.require("99.8")  # a wrong answer is on record: the demo may show what happens


def test_a_cell_that_needs_a_prediction_and_a_solved_exercise_names_both_at_once():
    @core.exercise("99.9", "predict the count", prediction=True)
    def check_count(prediction):
        pass

    with pytest.raises(core.ExerciseNotSolved) as info:
        lab.require("99.1", "99.9")
    text = str(info.value)
    assert "shows what happens in Exercise 99.9 (predict the count)" in text
    assert "uses the result of Exercise 99.1" in text and "solve 99.1 and run its check until PASS" in text


def test_every_prediction_check_is_declared_as_one():
    """Each check that records a prediction is declared with prediction=True, so that require() asks its demo
    cell for an answer, not for a PASS."""
    import inspect

    from labsupport import checks
    from labsupport.checks import feedback

    recording = set()
    for name in dir(checks):
        fn = getattr(checks, name)
        ex_id = getattr(fn, "exercise_id", None)
        if ex_id and "check_prediction(" in inspect.getsource(inspect.unwrap(fn)):
            recording.add(ex_id)
    assert len(recording) >= 14 and recording <= feedback._PREDICTIONS


def test_an_error_inside_a_check_becomes_a_message():
    @core.exercise("99.2", "broken spec")
    def check_broken(value):
        return value["key"]

    err = message(check_broken, [1, 2])
    assert "could not use what it was given (TypeError" in err


def test_require_renders_one_line():
    with pytest.raises(core.ExerciseNotSolved) as info:
        lab.require("98.7")
    lines = info.value._render_traceback_()
    assert len(lines) == 1 and "STOPPED" in lines[0] and "Exercise 98.7" in lines[0]


# ----------------------------------------------------------------- running student code


def test_run_student_explains_every_way_a_call_goes_wrong(monkeypatch):
    assert "not a function" in message(core.run_student, 3)

    def stub(x):
        raise NotImplementedError("Exercise 1: the forward pass")

    assert "not written yet (Exercise 1: the forward pass)" in message(core.run_student, stub, 1)

    def leaves(x):
        import sys

        sys.exit(3)

    err = message(core.run_student, leaves, 1, what="forward")
    assert err.startswith("forward called exit() (SystemExit), which ends a program, not a function")
    assert "`return`" in err

    def shapes(x):
        return x.mm(x)

    err = message(core.run_student, shapes, torch.ones(2, 3), what="forward")
    assert "forward raised RuntimeError: mat1 and mat2" in err and "inner sizes" in err

    def in_place(x):
        return x.add_(1)

    assert "changed its argument x in place. Likely mistake: use x + 1" in message(
        core.run_student, in_place, torch.zeros(2), inplace_hint="use x + 1"
    )

    def forever(x):
        while True:
            try:
                pass
            except Exception:  # the student's own handler cannot swallow the stop
                pass

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    assert "did not return within 0.2 s" in message(core.run_student, forever, 1, what="forever")


def test_error_hints_cover_the_usual_pytorch_errors():
    cases = {
        "mat1 and mat2 shapes cannot be multiplied (64x10 and 100x10)": "inner sizes",
        "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1": "broadcast",
        "Expected all tensors to be on the same device, but found at least two devices": "device",
        "element 0 of tensors does not require grad and does not have a grad_fn": "requires_grad",
        "Trying to backward through the graph a second time": "its own forward pass",
        "view size is not compatible with input tensor's size and stride": "copies the entries",
        "one of the variables needed for gradient computation has been modified by an inplace operation": "+=",
        "sigmoid(): argument 'input' (position 1) must be Tensor, not tuple": "ctx.saved_tensors",
        "Input type (torch.FloatTensor) and weight type (torch.DoubleTensor) should be the same": "dtype or device",
        "shape mismatch: indexing tensors could not be broadcast together with shapes [3], [4]": "paired entry by entry",
        "Only Tensors of floating point and complex dtype can require gradients": "whole numbers",
        "only Tensors of floating point dtype can require gradients": "whole numbers",
    }
    for text, word in cases.items():
        assert word in core.explain_error(RuntimeError(text)), text
    assert core.explain_error(ValueError("something else entirely")) is None


# ----------------------------------------------------------------- validating and comparing


@pytest.mark.parametrize(
    "value, fragment",
    [
        (None, "got None"),
        ([1.0, 2.0], "list of length 2"),
        (np.ones(2), "stay in torch"),
        (2.0, "drop .item()"),
        (torch.zeros(2, 1), "extra trailing dimension"),  # keepdim=True
        (torch.zeros(1, 2), "extra leading dimension"),
        (torch.zeros(2, 2), "one dimension too many"),  # square: the extra axis could be either one
        (torch.zeros(3), "wrong shape"),
        (torch.zeros(2, dtype=torch.float64), "wrong dtype"),
        (torch.zeros(2, device="meta"), "meta device"),
        (torch.tensor([float("nan"), 1.0]), "1 NaN and 0 inf"),
        (torch.tensor([float("inf"), 1.0]), "0 NaN and 1 inf"),
    ],
)
def test_compare_never_passes_bad_values(value, fragment):
    assert fragment in message(core.compare, "g", value, torch.zeros(2))


def test_compare_transpose_and_worst_element():
    assert "a transpose is missing" in message(core.compare, "w", torch.zeros(3, 2), torch.zeros(2, 3))
    err = message(core.compare, "y", torch.tensor([1.0, 5.0, 3.0]), torch.tensor([1.0, 2.0, 3.0]))
    assert "at element (1,)" in err and "Expected 2; got 5" in err


def test_compare_names_the_first_known_mistake_and_refuses_a_nan_reference():
    ref = torch.tensor([1.0, -2.0])
    mistakes = [(-ref, "the sign is flipped"), (lambda g: bool((g == 0).all()), "all zeros")]
    assert "Likely mistake: the sign is flipped" in message(core.compare, "g", -ref, ref, mistakes=mistakes)
    assert "Likely mistake: all zeros" in message(core.compare, "g", torch.zeros(2), ref, mistakes=mistakes)
    assert "reference for g is not finite" in message(core.compare, "g", ref, torch.tensor([float("nan"), 1.0]))
    assert core.compare("g", ref.clone(), ref) == 0.0


def test_a_wrong_shape_that_a_listed_mistake_gives_is_named_on_the_ladder():
    """A mistake that changes the shape (the batch summed away) is named like any other: not at the first
    failure, which says what and where, but from the second on. Predicates are not asked about a wrong shape."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    summed = x.sum(0)
    mistakes = [
        values.Mistake("batch summed", summed, why="the rows of the batch were added together", look="the sum"),
        values.Mistake("anything at all", lambda g: True, why="a predicate for the right shape"),
    ]
    with pytest.raises(CheckError) as first:
        core.compare("out", summed.clone(), x, mistakes=mistakes)
    assert first.value.mistake == "batch summed" and "has the wrong shape" in first.value.message
    assert "added together" not in "\n".join(first.value.rendered())  # the first rung: what and where
    with pytest.raises(CheckError) as other:
        core.compare("out", torch.zeros(3), x, mistakes=mistakes)
    assert other.value.mistake is None  # the predicate was not asked


def test_run_cases_refuses_zero_cases_and_counts_outputs():
    assert "zero cases" in message(core.run_cases, lambda x: x, [], lambda x: x, what="f")
    cases = [(torch.ones(2),)]
    err = message(core.run_cases, lambda x: x, cases, lambda x: (x, x), what="f", outputs=("a", "b"))
    assert "returned the wrong number of values" in err
    err = message(core.run_cases, lambda x: None, cases, lambda x: (x, x), what="f", outputs=("a", "b"))
    assert "missing `return`" in err
    for kind, made in (("generator", lambda x: (v for v in (x, x))), ("dict", lambda x: {"a": x, "b": x})):
        err = message(core.run_cases, made, cases, lambda x: (x, x), what="f", outputs=("a", "b"))
        assert f"f returned {kind} where a tuple of 2 values belongs" in err


def test_a_wrong_shape_in_a_later_case_says_which_case():
    # right on the first case's sizes only (a size written into the answer): the case says so
    cases = [(torch.ones(2, 3),), (torch.ones(4, 3),)]
    err = message(core.run_cases, lambda x: x.sum(1)[:2], cases, lambda x: x.sum(1), what="f")
    assert "wrong shape in case 2 of 2 (inputs of shape (4, 3))" in err


def test_run_cases_names_a_mistake_in_one_of_several_outputs():
    cases = [(torch.tensor([1.0, 2.0]),)]
    ref = lambda x: (2 * x, 3 * x)  # noqa: E731
    mistakes = lambda x: [((None, 2 * x), "b was computed like a")]  # noqa: E731
    err = message(core.run_cases, lambda x: (2 * x, 2 * x), cases, ref, what="f", outputs=("a", "b"), mistakes=mistakes)
    assert err.startswith("b does not match the reference in case 1 of 1 (inputs of shape (2,))")
    assert err.endswith("Likely mistake: b was computed like a")
    assert core.run_cases(lambda x: (2 * x, 3 * x), cases, ref, what="f", outputs=("a", "b")) == 0.0


# ----------------------------------------------------------------- gradients


def test_check_gradients_pass_and_failures(capsys):
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    f = lambda: (w**3).sum()  # noqa: E731
    lab.check_gradients(f, {"w": w}, {"w": 3 * w**2})
    assert capsys.readouterr().out.startswith("PASS  gradient check: 1 gradient(s)")
    assert "gradient of w is wrong at index" in message(lab.check_gradients, f, {"w": w}, {"w": w**2})
    assert "no gradient given for w" in message(lab.check_gradients, f, {"w": w}, {})
    assert "must be float64" in message(lab.check_gradients, f, {"w": w.float()}, {"w": w.float()})
    assert "non-empty dicts" in message(lab.check_gradients, f, {}, {})
    assert "whole number" in message(lab.check_gradients, f, {"w": w}, {"w": 3 * w**2}, num_samples=0)
    assert "return one number" in message(lab.check_gradients, lambda: w, {"w": w}, {"w": w})
    assert torch.equal(w, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))  # nudges are undone


def test_check_gradients_refuses_what_would_pass_wrongly():
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    f = lambda: (w**3).sum()  # noqa: E731
    right = 3 * w**2
    assert "wrong dtype" in message(lab.check_gradients, f, {"w": w}, {"w": right.half()})
    assert "wrong dtype" in message(lab.check_gradients, f, {"w": w}, {"w": right.to(torch.complex128)})
    assert "tol must be a positive, finite number" in message(lab.check_gradients, f, {"w": w}, {"w": right}, tol=0)
    assert "not a finite number" in message(lab.check_gradients, f, {"w": w}, {"w": right}, tol=float("inf"))
    assert "would accept any gradient" in message(lab.check_gradients, f, {"w": w}, {"w": right}, tol=5)
    assert "meta device" in message(lab.check_gradients, f, {"w": w}, {"w": torch.empty(3, device="meta")})


def test_check_gradients_stops_a_function_that_never_returns(monkeypatch):
    w = torch.tensor([1.0], dtype=torch.float64)

    def forever():
        while True:
            pass

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    assert "did not finish the gradient check within 0.2 s" in message(lab.check_gradients, forever, {"w": w}, {"w": w})
    assert "f raised ZeroDivisionError" in message(lab.check_gradients, lambda: 1 / 0, {"w": w}, {"w": w})


def test_an_inner_time_limit_leaves_the_enclosing_one_running():
    start = time.monotonic()
    with pytest.raises(running.TimedOut):
        with running.time_limit(0.5):
            with running.time_limit(0.1):
                pass  # the inner block ends at once
            while True:
                pass  # only the enclosing limit can stop this
    assert time.monotonic() - start < 5


def test_the_clean_up_of_a_stopped_block_runs_to_its_end():
    # while a TimedOut is being handled (a finally deleting a half-written run, workers being
    # stopped), the rings that follow wait: the clean-up is not cut short
    done = []

    def work():
        try:
            while True:
                pass
        finally:
            start = time.monotonic()
            while time.monotonic() - start < 0.3:  # six times RING_AGAIN
                pass
            done.append("cleaned up")

    with pytest.raises(running.TimedOut):
        with running.time_limit(0.05):
            work()
    assert done == ["cleaned up"]


def _stubborn():  # an `except BaseException` loses the first ring
    try:
        while True:
            pass
    except BaseException:
        pass
    while True:
        pass


class _SlowFinalizer:
    def __del__(self):  # most rings land here, where Python prints "Exception ignored" and goes on
        for _ in range(300):
            pass


def _endless():
    while True:
        _SlowFinalizer()


def _stop_each(reply):
    """In a forked child: run the blocks above under a limit and report how each ended."""
    hook, results = sys.unraisablehook, []
    for block in (_stubborn, _endless):
        start = time.monotonic()
        try:
            with running.time_limit(0.05):
                block()
        except running.TimedOut:
            results.append((block.__name__, time.monotonic() - start < 30))
    results.append(("timer off", signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)))
    results.append(("hook back", sys.unraisablehook is hook))
    reply.send(results)


def test_a_ring_that_is_lost_rings_again_and_is_not_printed(capfd):
    # in a forked child, so that a regression fails here (the child is killed) instead of hanging the run
    fork = multiprocessing.get_context("fork")
    receive, reply = fork.Pipe(duplex=False)
    child = fork.Process(target=_stop_each, args=(reply,))
    child.start()
    child.join(timeout=90)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("a time limit did not stop a block whose first ring was lost")
    assert receive.poll() and receive.recv() == [
        ("_stubborn", True),
        ("_endless", True),
        ("timer off", True),
        ("hook back", True),
    ]
    assert "Exception ignored" not in capfd.readouterr().err


@pytest.mark.parametrize("kind", ["nested", "sparse_coo"])
def test_a_nested_or_sparse_tensor_gets_one_sentence(kind):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors warn that they are a prototype
        value = (
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]) if kind == "nested" else torch.eye(3).to_sparse()
        )
    with pytest.raises(core.CheckError, match=f"is a {kind} tensor") as info:
        core.expect_tensor(value, "y")
    assert info.value.usage


def test_none_for_a_number_hears_about_a_missing_return():
    with pytest.raises(core.CheckError) as info:
        core.as_number(None, "your peak_flops(...)")
    assert "must be a number" in str(info.value) and "without a return statement" in info.value.hint


def test_a_long_exception_text_is_cut_to_its_first_lines():
    def long_error(x):
        raise RuntimeError("first line:\n" + "\n".join(f"detail {k}" for k in range(40)))

    with pytest.raises(core.CheckError) as info:
        core.run_student(long_error, 1, what="your f(x)")
    text = str(info.value)
    assert "first line:" in text and "detail 4" in text and "detail 5" not in text
    assert "35 more lines: lab.show_traceback() shows them all" in text


# ----------------------------------------------------------------- round 7: answers that raise or are half-written

HALF_WRITTEN_ERRORS = [
    (NameError("name 'grad_w1' is not defined"), "not written yet"),
    (UnboundLocalError("cannot access local variable 'h' where it is not associated with a value"), "assigned"),
    (TypeError("'NoneType' object is not callable"), "not solved yet"),
    (TypeError("cannot unpack non-iterable NoneType object"), "without `return`"),
    (TypeError("'torch.Size' object is not callable"), "not a method"),
    (TypeError("'Tensor' object is not callable"), "called like a function"),
    (TypeError("'int' object is not callable"), "number was called"),
    (ValueError("only one element tensors can be converted to Python scalars"), "one number"),
    (RuntimeError("Boolean value of Tensor with more than one value is ambiguous"), "True or False"),
    (RuntimeError("mean(): could not infer output dtype. Got: Long"), "floating-point"),
    (TypeError("unsupported operand type(s) for +: 'Tensor' and 'builtin_function_or_method'"), "without calling"),
    (ValueError("not enough values to unpack (expected 2, got 1)"), "differ in number"),
    (TypeError("'>' not supported between instances of 'tuple' and 'int'"), "a tuple where a tensor belongs"),
    (IndexError("tensors used as indices must be long, int, byte or bool tensors"), "integers"),
    (RuntimeError("shape '[7, -1]' is invalid for input of size 120"), "multiply"),
    (TypeError("mm(): argument 'input' (position 1) must be Tensor, not numpy.ndarray"), "numpy array"),
    (RuntimeError("expected scalar type Long but found Float"), "class indices"),
    (RuntimeError("nll_loss: expected target dtype to be Long or Byte, but got Float"), "class indices"),
    (AttributeError("'float' object has no attribute 'backward'"), "Python number"),
    # the same float targets on CUDA, in torch 2.11's words (the GPU machine)
    (
        NotImplementedError("\"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Float'"),
        "class indices",
    ),
    (NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Half'"), "no version for the dtype"),
    # NumPy functions given a tensor: np.sum(t, axis=-1), np.take_along_axis(t, index, 1)
    (TypeError("sum() got an unexpected keyword argument 'axis'"), "dim= where NumPy takes axis="),
    (TypeError("Cannot interpret 'torch.int64' as a data type"), "Stay in torch"),
]


@pytest.mark.parametrize("exc, words", HALF_WRITTEN_ERRORS, ids=[type(e).__name__ for e, _ in HALF_WRITTEN_ERRORS])
def test_error_hints_cover_python_errors_of_half_written_answers(exc, words):
    assert words in core.explain_error(exc)


def _cell_functions(source: str) -> dict:
    """Functions defined as a notebook cell defines them: their lines readable by linecache."""
    name = "<test cell 7>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace


def test_an_error_inside_an_earlier_helper_names_the_line_that_called_it():
    cell = _cell_functions("def helper(x):\n    return x.mm(x)\n\n\ndef student(x):\n    y = helper(x)\n    return y\n")
    text = message(core.run_student, cell["student"], torch.ones(2, 3))
    assert "in your line:  return x.mm(x)\n  called from your line:  y = helper(x)" in text
    assert "called from" not in message(core.run_student, cell["helper"], torch.ones(2, 3))


def test_an_error_inside_a_comprehension_names_its_line_once():
    cell = _cell_functions("def student(x):\n    return [y.mm(y) for y in [x]]\n")
    text = message(core.run_student, cell["student"], torch.ones(2, 3))
    assert "in your line:  return [y.mm(y) for y in [x]]" in text and "called from" not in text


def test_a_tuple_for_a_tensor_is_asked_whether_more_was_returned_than_asked():
    with pytest.raises(CheckError) as info:
        core.expect_tensor((torch.ones(2), torch.ones(2)), "your forward(x)")
    assert "a tuple where one tensor belongs" in info.value.hint


def test_a_broadcast_error_with_a_size_from_outside_the_call_names_a_notebook_variable():
    outside = torch.ones(7)
    with pytest.raises(CheckError) as info:
        core.run_cases(lambda a: a + outside, [(torch.ones(3),)], lambda a: a, what="f(a)")
    assert "(7)" in info.value.hint and "notebook variable" in info.value.hint


def test_none_and_the_placeholder_are_called_not_written_yet():
    for result, words in ((None, "no `return`"), (..., "placeholder")):
        with pytest.raises(CheckError) as info:
            core.run_cases(lambda a, r=result: r, [(torch.ones(3),)], lambda a: a, what="f(a)")
        assert words in info.value.hint and info.value.usage
    hints = [values.PLACEHOLDER, "tuple", "function was given"]
    for value, words in zip((..., (1.0, 2.0), print), hints):
        with pytest.raises(CheckError) as info:
            core.as_number(value, "the answer")
        assert words in info.value.hint


def test_a_result_left_unfilled_is_named_as_such():
    ref = torch.arange(1.0, 7.0).reshape(3, 2)
    with pytest.raises(CheckError) as info:
        core.compare("r", torch.zeros(3, 2), ref)
    assert "never filled in" in info.value.hint
    early = ref.clone()
    early[1:] = 0
    with pytest.raises(CheckError) as info:
        core.compare("r", early, ref)
    assert "first 2 entries" in info.value.hint and "stopped early" in info.value.hint
    with pytest.raises(CheckError) as info:
        core.compare("r", ref + 1, ref)
    assert info.value.hint is None  # wrong everywhere: no guess


def test_a_stub_raised_without_a_message_reads_without_empty_parentheses():
    def stub(x):
        raise NotImplementedError

    text = message(core.run_student, stub, 1, what="your f(x)")
    assert "your f(x) is not written yet:" in text and "()" not in text


def test_a_container_called_like_a_layer_is_named_not_called_unwritten():
    blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    with pytest.raises(core.CheckError) as info:
        core.run_student(lambda x: blocks(x), torch.ones(1, 2), what="your forward")
    assert "called an nn.ModuleList as if it were a layer" in str(info.value)
    assert "not written yet" not in str(info.value) and "each module it holds" in info.value.hint


def test_a_module_whose_forward_is_misspelled_is_told_so():
    class Net(torch.nn.Module):
        def foward(self, x):
            return x

    with pytest.raises(core.CheckError) as info:
        core.run_student(Net(), torch.ones(1, 2), what="your Net()(x)")
    assert "called a Net, which has no forward method" in str(info.value)
    assert "spelled" in info.value.hint


def test_torchs_missing_kernel_is_an_error_of_the_answer_not_a_stub():
    """On CUDA, float targets make torch raise NotImplementedError ("... not implemented for 'Float'"): it read
    "train(...) is not written yet" on the GPU machine."""

    def float_targets(x):
        raise NotImplementedError("\"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Float'")

    with pytest.raises(CheckError) as info:
        core.run_student(float_targets, 1, what="your train(...)")
    assert "not written yet" not in str(info.value) and "raised NotImplementedError" in str(info.value)
    assert "class indices" in info.value.hint


def test_a_single_wrong_number_is_not_pointed_at_as_an_element():
    """A newcomer read "at element (0,)" for a loss: a single number has no element to name."""
    for got, expected in [(torch.tensor(5.0), torch.tensor(2.0)), (torch.tensor([5.0]), torch.tensor([2.0]))]:
        err = message(core.compare, "loss", got, expected)
        assert "loss does not match the reference (max abs. error 3" in err and "element" not in err


def test_expected_and_got_are_shown_at_one_precision():
    """Expected 2.334 next to got 2.33 read as a rounding of the student's number; both now keep 4 digits."""
    err = message(
        core.compare, "loss", torch.tensor(2.33, dtype=torch.float64), torch.tensor(2.334, dtype=torch.float64)
    )
    assert "Expected 2.334; got 2.330" in err


def test_exact_numbers_are_numbers():
    """A Fraction or a Decimal (3/4 written exactly) was refused as "must be a number"."""
    from decimal import Decimal
    from fractions import Fraction

    assert core.as_number(Fraction(3, 4), "the answer") == 0.75
    assert core.as_number(Decimal("0.89"), "the answer") == 0.89
    with pytest.raises(CheckError, match="not a finite number"):
        core.as_number(Decimal("NaN"), "the answer")


def test_a_predicate_with_a_bug_of_the_labs_raises_in_the_tests_and_a_students_error_never_does(monkeypatch):
    """A helper's new Mistake never matched for a missing import: matches() read the NameError as "no match".
    Under LAB_STRICT_PREDICATES (tests/conftest.py sets it) a name or import error raised in labsupport's own
    code is raised; one raised by the student's value (its __eq__), or any error without the variable, is not."""

    def buggy(got):
        return got == undefined_in_the_lab  # noqa: F821 - the bug under test

    buggy.__code__ = buggy.__code__.replace(co_filename=values.__file__)  # its frame: labsupport's own file

    class Liar:
        def __eq__(self, other):
            raise NameError("the student's own")

    monkeypatch.setenv("LAB_STRICT_PREDICATES", "1")
    with pytest.raises(NameError):
        values.matches(1.0, buggy)
    assert values.matches(Liar(), 1.0) is False
    monkeypatch.delenv("LAB_STRICT_PREDICATES")
    assert values.matches(1.0, buggy) is False


def test_a_float16_number_that_overflowed_is_told_why():
    """00.1's FLOP count computed in float16 comes out inf: the sentence names float16's largest value."""
    with pytest.raises(core.CheckError) as err:
        values.as_number(torch.tensor(1e6).half(), "flops")
    assert "not a finite number" in str(err.value) and "65504" in str(err.value)
    with pytest.raises(core.CheckError) as err:
        values.as_number(float("inf"), "flops")
    assert "65504" not in str(err.value)


def test_a_numpy_array_where_a_tensor_belongs_is_told_to_stay_in_torch():
    with pytest.raises(core.CheckError) as err:
        values.expect_tensor(np.zeros(3), "grad")
    assert "stay in torch" in str(err.value) and "from_numpy" not in str(err.value)


def test_a_student_s_own_base_exception_is_a_sentence_not_a_traceback():
    class Stop(BaseException):
        pass

    def pairwise(a, b):
        raise Stop("my own")

    with pytest.raises(core.CheckError) as err:
        lab.check_pairwise_sq_dists(pairwise)
    assert "raised Stop: my own" in str(err.value)


def test_a_function_with_the_wrong_parameters_is_told_to_compare_its_def_line():
    def pairwise(a):
        return a

    with pytest.raises(core.CheckError) as err:
        lab.check_pairwise_sq_dists(pairwise)
    assert "compare your def line" in str(err.value)


def test_a_complex_result_matches_no_mistake_and_prints_no_warning(recwarn):
    got = torch.ones(2, dtype=torch.complex64)
    assert not values.matches(got, torch.ones(2))
    assert not values.matches(got, lambda value: value.double().sum() > 0)
    assert not [w for w in recwarn if "complex" in str(w.message).lower()]


def test_a_tensor_subclass_that_lies_is_judged_by_its_values():
    """01.x: a subclass whose __torch_function__ answers True to everything crashed the check ("could not use")."""

    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return True

    with pytest.raises(core.CheckError) as err:
        lab.check_pairwise_sq_dists(lambda a, b: torch.zeros(3).as_subclass(Liar))
    assert "wrong shape" in str(err.value) and "could not use" not in str(err.value)


@pytest.mark.parametrize("setting", ["grad off", "float64 default"])
def test_a_check_runs_as_usual_whatever_earlier_cells_set_and_gives_the_setting_back(setting, capsys):
    """An earlier cell's torch.set_grad_enabled(False) or torch.set_default_dtype(torch.float64) changed what checks
    built (09.3 refused right answers); the check runs with autograd on and float32, and the kernel keeps its own."""
    try:
        if setting == "grad off":
            torch.set_grad_enabled(False)
        else:
            torch.set_default_dtype(torch.float64)
        lab.check_fixed_training(_fixed_loop_for_settings)
        assert "PASS" in capsys.readouterr().out
        assert torch.is_grad_enabled() == (setting != "grad off")
        assert torch.get_default_dtype() == (torch.float64 if setting == "float64 default" else torch.float32)
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)


def _fixed_loop_for_settings(x, y, w1, w2, learning_rate, steps):
    """03.5's loop as the notebook's solution writes it."""
    losses = []
    for _ in range(steps):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
        w1.grad = None
        w2.grad = None
    return losses


def test_the_time_limit_never_stops_an_import_half_way(tmp_path, monkeypatch):
    """A ring inside a module's first import left it half-loaded in sys.modules (07.3, 09.3: torch's compiler
    modules load at a student's first optimizer or torch.cond), and every later check failed on it."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.4)\nLOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)

    def imports_then_spins():
        import slow_to_import  # noqa: F401

        while True:
            pass

    with pytest.raises(running.TimedOut):
        with running.time_limit(0.1):
            imports_then_spins()
    assert sys.modules["slow_to_import"].LOADED


def test_an_exception_without_a_message_reads_as_a_sentence():
    def pairwise(a, b):
        raise StopIteration

    with pytest.raises(core.CheckError) as err:
        lab.check_pairwise_sq_dists(pairwise)
    assert "raised StopIteration (with no message)" in str(err.value)

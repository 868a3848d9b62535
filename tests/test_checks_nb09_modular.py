"""Exercise 09.5 (one batch, many networks): run_programs is judged against a row-by-row loop on
values and gradients, and by how many times it calls the modules; each typical mistake is named."""

import pytest
import torch
import torch.nn.functional as F

import labsupport as lab
from labsupport.checks import nb09_static_and_dynamic_graphs as nb09
from labsupport.checks import running


def by_program(modules, points, programs):
    """Each program run once on all its rows: (the outputs, program after program; the row each came from)."""
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    outputs, order = [], []
    for program, rows in rows_of.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
        outputs.append(h)
        order += rows
    return torch.cat(outputs), torch.tensor(order)


def grouped(modules, points, programs):
    out, order = by_program(modules, points, programs)
    return out[torch.argsort(order)]


def index_put(modules, points, programs):
    out = points.new_zeros(points.shape)
    for program in set(programs):
        rows = torch.tensor([i for i, p in enumerate(programs) if p == program])
        h = points[rows]
        for name in program:
            h = modules[name](h)
        out = out.index_put((rows,), h)
    return out


def by_step(modules, points, programs):
    """Batched by (step, module) across programs: fewer calls than by program."""
    h = points
    for k in range(max(len(p) for p in programs)):
        parts = []
        for i, program in enumerate(programs):
            parts.append((i, program[k] if k < len(program) else None))
        new = h
        for name in {n for _, n in parts if n is not None}:
            rows = torch.tensor([i for i, n in parts if n == name])
            new = new.index_put((rows,), modules[name](h[rows]))
        h = new
    return h


def grouped_by_hand(modules, points, programs):
    """Batched by program, each step written out as F.linear or a matmul: no module is called."""
    out = points.new_zeros(points.shape)
    for program in set(programs):
        rows = torch.tensor([i for i, p in enumerate(programs) if p == program])
        h = points[rows]
        for k, name in enumerate(program):
            m = modules[name]
            h = F.linear(h, m.weight, m.bias) if k % 2 else h @ m.weight.T + m.bias
        out = out.index_put((rows,), h)
    return out


def grouped_forward(modules, points, programs):
    """Batched by program, calling .forward directly (no forward hooks run)."""
    return grouped({name: DirectForward(m) for name, m in modules.items()}, points, programs)


class DirectForward:
    def __init__(self, module):
        self.module = module

    def __call__(self, h):
        return self.module.forward(h)


def shared_prefixes(modules, points, programs):
    """Rows whose programs begin alike run that beginning together (a tree of prefixes): fewer calls still."""
    result = [None] * len(programs)
    pending = [(list(range(len(programs))), points, 0)]
    while pending:
        rows, h, depth = pending.pop()
        next_rows = {}
        for k, i in enumerate(rows):
            if len(programs[i]) == depth:
                result[i] = h[k]
            else:
                next_rows.setdefault(programs[i][depth], []).append(k)
        for name, ks in next_rows.items():
            pending.append(([rows[k] for k in ks], modules[name](h[ks]), depth + 1))
    return torch.stack(result)


def sorted_groups_row_by_row(modules, points, programs):
    """Grouped by tuple(program), programs in sorted order, rows put back one at a time."""
    groups = {}
    for i, program in enumerate(programs):
        groups.setdefault(tuple(program), []).append(i)
    result = [None] * len(programs)
    for program in sorted(groups):
        h = points[groups[program]]
        for name in program:
            h = modules[name](h)
        for k, i in enumerate(groups[program]):
            result[i] = h[k]
    return torch.stack(result)


def scattered(modules, points, programs):
    """Grouped by program, concatenated, then scattered back to the rows' places."""
    outputs, order = by_program(modules, points, programs)
    index = order[:, None].expand(-1, points.shape[1])
    return torch.zeros_like(points).scatter(0, index, outputs)


@pytest.mark.parametrize(
    "student",
    [
        grouped,
        index_put,
        by_step,
        grouped_by_hand,
        grouped_forward,
        shared_prefixes,
        sorted_groups_row_by_row,
        scattered,
    ],
)
def test_every_batched_design_passes(student, capsys):
    lab.check_run_programs(student)
    out = capsys.readouterr().out
    assert out.startswith("PASS  run_programs: 12 rows, 5 programs, equal to one row at a time")


def one_row_at_a_time(modules, points, programs):
    return nb09.run_program_rows(modules, points, programs)


def row_by_row_forward(modules, points, programs):
    rows = []
    for i, program in enumerate(programs):
        h = points[i : i + 1]
        for name in program:
            h = modules[name].forward(h)
        rows.append(h)
    return torch.cat(rows)


def row_by_row_linear(modules, points, programs):
    rows = []
    for i, program in enumerate(programs):
        h = points[i]
        for name in program:
            h = F.linear(h, modules[name].weight, modules[name].bias)
        rows.append(h)
    return torch.stack(rows)


def reversed_programs(modules, points, programs):
    return grouped(modules, points, [tuple(reversed(p)) for p in programs])


def group_order(modules, points, programs):
    return by_program(modules, points, programs)[0]


def put_back_the_wrong_way(modules, points, programs):
    """09.5 audit: indexed by the grouping order itself, not by its inverse: was told "in the order of the groups"."""
    out, order = by_program(modules, points, programs)
    return out[order]


def each_step_on_the_points(modules, points, programs):
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    outputs, order = [], []
    for program, rows in rows_of.items():
        for name in program:
            h = modules[name](points[rows])
        outputs.append(h)
        order += rows
    return torch.cat(outputs)[torch.argsort(torch.tensor(order))]


def detached(modules, points, programs):
    return grouped(modules, points, programs).detach()


def rebuilt_from_values(modules, points, programs):
    return torch.tensor(grouped(modules, points, programs).tolist())


def written_into_points(modules, points, programs):
    with torch.no_grad():
        points.copy_(grouped(modules, points, programs))
    return grouped(modules, points.clone(), [("scale",)] * len(programs)) / 2


def masked(modules, points, programs):
    """Every row through every program, the right rows kept with torch.where: 10 calls, but on all 12 rows each."""
    out = points
    for program in set(programs):
        mask = torch.tensor([p == program for p in programs])[:, None]
        h = points
        for name in program:
            h = modules[name](h)
        out = torch.where(mask, h, out)
    return out


def first_step_skipped(modules, points, programs):
    """09.5 audit 6: each program's loop started at its second name: expected/got only."""
    return grouped(modules, points, [program[1:] for program in programs])


def first_step_only(modules, points, programs):
    """09.5 audit 11: each group through its program's first module only: expected/got only."""
    return grouped(modules, points, [program[:1] for program in programs])


def groups_stacked(modules, points, programs):
    """09.5 audit 11: the groups' outputs stacked, not joined: torch's bare RuntimeError."""
    return torch.stack(groups_in_a_list(modules, points, programs))


def grouped_as_sets(modules, points, programs):
    """09.5 audit 6: grouped by the sorted names, each group run in that order: expected/got only."""
    return grouped(modules, points, [tuple(sorted(program)) for program in programs])


def grouped_by_first_step(modules, points, programs):
    """09.5 audit 6: grouped by the first step, each group run through its first row's program."""
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program[0], []).append(i)
    out = torch.zeros_like(points)
    for rows in rows_of.values():
        h = points[rows]
        for name in programs[rows[0]]:
            h = modules[name](h)
        out[rows] = h
    return out


def last_group_left_out(modules, points, programs):
    """09.5 audit 6: the loop over the groups stopped one short: 2 rows stayed zero, expected/got only."""
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    out = torch.zeros_like(points)
    for program, rows in list(rows_of.items())[:-1]:
        h = points[rows]
        for name in program:
            h = modules[name](h)
        out[rows] = h
    return out


def never_written(modules, points, programs):
    """The groups run, and their outputs never written into the result."""
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    out = torch.zeros_like(points)
    for program, rows in rows_of.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
    return out


def groups_in_a_list(modules, points, programs):
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    outputs = []
    for program, rows in rows_of.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
        outputs.append(h)
    return outputs


def rows_in_a_list(modules, points, programs):
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    outputs = [None] * len(programs)
    for program, rows in rows_of.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
        for k, row in enumerate(rows):
            outputs[row] = h[k]
    return outputs


def returns_in_the_loop(modules, points, programs):
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    for program, rows in rows_of.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
        return h


def program_as_a_name(modules, points, programs):
    out = torch.zeros_like(points)
    for i, program in enumerate(programs):
        out[i] = modules[program](points[i])
    return out


@pytest.mark.parametrize(
    "student, name",
    [
        (groups_in_a_list, "groups returned apart"),
        (rows_in_a_list, "rows returned apart"),  # audit 8: called "one tensor per program"
        (returns_in_the_loop, "returned before every group ran"),
        (program_as_a_name, "program used as a module's name"),
        (groups_stacked, "groups stacked"),
    ],
)
def test_each_half_written_run_programs_is_named(student, name):
    """Audit 7: a list of the groups' tensors ("not a tensor"), a return inside the loop ("wrong shape") and a
    whole program looked up in modules (a bare KeyError) had no cause named."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(student)
    assert info.value.mistake == name


def test_a_run_programs_that_prints_says_it_returned_none(capsys):
    def prints(modules, points, programs):
        print(points)

    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(prints)
    assert info.value.usage
    assert info.value.message == "run_programs(modules, points, programs) returned None"


def _groups(programs):
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(program, []).append(i)
    return rows_of


def cut_between_steps(modules, points, programs):
    """Thirteenth audit: each step given its input detached: told "carries no gradient", though the last modules
    got theirs."""
    out = points.clone()
    for program, rows in _groups(programs).items():
        h = points[rows]
        for name in program:
            h = modules[name](h.detach())
        out[rows] = h
    return out


KEPT_ROWS = {}


def rows_kept_between_calls(modules, points, programs):
    """Thirteenth audit: the grouping dict made outside the function: right on the first batch, then an IndexError."""
    for i, program in enumerate(programs):
        KEPT_ROWS.setdefault(program, []).append(i)
    out = points.clone()
    for program, rows in KEPT_ROWS.items():
        h = points[rows]
        for name in program:
            h = modules[name](h)
        out[rows] = h
    return out


def kept_rows_fresh(modules, points, programs):
    KEPT_ROWS.clear()
    return rows_kept_between_calls(modules, points, programs)


MISTAKES = {
    "reversed program": reversed_programs,
    "each step on the points": each_step_on_the_points,
    "rows out of order": group_order,
    "rows put back wrongly": put_back_the_wrong_way,
    "a step left out": first_step_skipped,
    "steps in another order": grouped_as_sets,
    "another row's program": grouped_by_first_step,
    "rows never run": last_group_left_out,
    "result never filled in": never_written,  # audit 7: "12 of 12 rows differ", no cause
    "no gradient": detached,
    "one call per row": one_row_at_a_time,
    "every row through every program": masked,
    "chain cut between steps": cut_between_steps,
}  # "state kept between calls" has tests of its own below: its student's state must start empty


def test_every_listed_mistake_has_a_test():
    modules = nb09.program_modules()
    points, programs = nb09.program_batch()
    listed = [m.name for m in nb09.program_mistakes(modules, points, programs)]
    named_by_the_check = [nb09.NO_GRADIENT.name, nb09.ONE_CALL_PER_ROW.name, nb09.ROWS_EVERYWHERE.name]
    named_by_the_check += [nb09.CHAIN_CUT.name]
    assert listed + named_by_the_check == list(MISTAKES)


def test_state_kept_is_named_on_the_first_check_of_a_fresh_kernel():
    KEPT_ROWS.clear()
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(rows_kept_between_calls)
    assert info.value.mistake == "state kept between calls"


def test_state_kept_is_named_again_on_a_repeated_check():
    """Fourteenth audit: a second check, with the rows of the first already in the dict, was told only "differs"."""
    KEPT_ROWS.clear()
    for _ in range(2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_run_programs(rows_kept_between_calls)
        assert info.value.mistake == "state kept between calls"


CACHED_ROWS = {}


def rows_cached_per_program(modules, points, programs):
    """Fourteenth audit: each program's rows cached once, outside the function: right on the first batch, then an
    IndexError on the second, named as an index out of range."""
    out = points.clone()
    for program in set(programs):
        if program not in CACHED_ROWS:
            CACHED_ROWS[program] = [i for i, p in enumerate(programs) if p == program]
        h = points[CACHED_ROWS[program]]
        for name in program:
            h = modules[name](h)
        out[CACHED_ROWS[program]] = h
    return out


def test_a_cache_filled_on_the_first_batch_is_state_kept():
    CACHED_ROWS.clear()
    for _ in range(2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_run_programs(rows_cached_per_program)
        assert info.value.mistake == "state kept between calls"


STEP_ORDER = {"rotate": 0, "scale": 1, "shift": 2, "flip": 3}


def reads_a_constant_table(modules, points, programs):
    """A global dict only read (never filled in): grouped by the programs' step numbers. Not state."""
    out = points.clone()
    for key in {tuple(STEP_ORDER[n] for n in p) for p in programs}:
        rows = [i for i, p in enumerate(programs) if tuple(STEP_ORDER[n] for n in p) == key]
        h = points[rows]
        for name in programs[rows[0]]:
            h = modules[name](h)
        out[rows] = h
    return out


def test_a_global_table_only_read_passes(capsys):
    lab.check_run_programs(reads_a_constant_table)
    assert capsys.readouterr().out.startswith("PASS")


def test_a_call_counter_that_changes_the_result_is_state_kept():
    calls = []

    def counts_its_calls(modules, points, programs):
        calls.append(1)
        out = points.clone()
        for program, rows in _groups(programs).items():
            h = points[rows]
            for name in program:
                h = modules[name](h)
            out[rows] = h * (1 if len(calls) == 1 else 2)
        return out

    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(counts_its_calls)
    assert info.value.mistake == "state kept between calls"


def sequential_per_program(modules, points, programs):
    """Thirteenth audit: each program's modules chained in an nn.Sequential, written into a clone of points."""
    out = points.clone()
    for program, rows in _groups(programs).items():
        out[rows] = torch.nn.Sequential(*[modules[name] for name in program])(points[rows])
    return out


def masked_scatter_groups(modules, points, programs):
    """Thirteenth audit: a boolean mask per distinct program, the group's output scattered back with masked_scatter."""
    out = torch.zeros_like(points)
    for program in set(programs):
        mask = torch.tensor([other == program for other in programs])
        h = points[mask]
        for name in program:
            h = modules[name](h)
        out = out.masked_scatter(mask[:, None].expand_as(out), h)
    return out


@pytest.mark.parametrize("student", [sequential_per_program, masked_scatter_groups, kept_rows_fresh])
def test_more_batched_designs_pass(student, capsys):
    lab.check_run_programs(student)
    assert capsys.readouterr().out.startswith("PASS")


def test_a_program_cut_to_its_first_step_is_a_step_left_out():
    """09.5 audit 11: only the first module of each program ran: expected/got only."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(first_step_only)
    assert info.value.mistake == "a step left out"


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_is_named(name):
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(MISTAKES[name])
    assert info.value.mistake == name


@pytest.mark.parametrize("student", [row_by_row_forward, row_by_row_linear])
def test_a_row_by_row_loop_that_skips_the_module_call_is_still_counted(student):
    """09.5: .forward(h) and F.linear ran no forward hook, and the loop passed "in 0 module calls"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(student)
    assert info.value.mistake == "one call per row"
    assert info.value.message == "the modules ran 23 times for 12 rows with 5 distinct programs"


def test_work_the_check_cannot_see_is_refused_not_passed():
    def unseen(modules, points, programs):
        with torch._C.DisableTorchFunction():
            return grouped(modules, points, programs)

    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(unseen)
    assert info.value.usage
    assert "cannot count the module calls" in info.value.message


def test_a_result_rebuilt_from_values_has_no_gradient():
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(rebuilt_from_values)
    assert info.value.mistake == "no gradient"


def test_changing_points_in_place_is_named():
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(written_into_points)
    assert info.value.mistake == "changed points in place"


def every_module_on_every_row(modules, points, programs):
    """Step by step, every module on all 12 rows, each row's own module's output kept: 12 calls on 144 rows."""
    h = points
    for k in range(max(len(p) for p in programs)):
        outputs = {name: module(h) for name, module in modules.items()}
        rows = [outputs[p[k]][i] if k < len(p) else h[i] for i, p in enumerate(programs)]
        h = torch.stack(rows)
    return h


def test_every_module_on_every_row_is_not_one_call_per_row():
    """Audit 4: its 12 calls (over the limit of 10) were named "one call per row", though each call took 12 rows."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(every_module_on_every_row)
    assert info.value.mistake == "every row through every program"


def test_too_many_calls_says_how_many_before_why():
    for rung in (1, 2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_run_programs(one_row_at_a_time)
        assert info.value.message == "the modules ran 23 times for 12 rows with 5 distinct programs"
        assert info.value.expected == "at most 10 module calls"
        shown = "\n".join(info.value.rendered())
        assert ("rows that share a program" in shown) == (rung == 2)


def test_the_batch_interleaves_programs_of_every_length():
    points, programs = nb09.program_batch()
    assert {len(p) for p in programs} == {1, 2, 3}
    assert programs != sorted(programs, key=programs.index)  # a program's rows are not contiguous
    assert set(name for p in programs for name in p) == set(nb09.STEP_NAMES)


@pytest.mark.parametrize(
    "student, message",
    [
        (None, "is None"),
        ("run", "is not a function"),
        (lambda m, p, g: grouped(m, p, g).tolist(), "is not a tensor"),
        (lambda m, p, g: grouped(m, p, g)[:5], "shape"),
        (lambda m, p, g: grouped(m, p, g).double(), "dtype"),
        (lambda m, p, g: m["jump"](p), "KeyError"),
    ],
)
def test_what_the_check_cannot_use_is_answered(student, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(student)
    assert message in str(info.value)


def test_a_function_that_never_returns_is_stopped(monkeypatch):
    def endless(modules, points, programs):
        while True:
            pass

    monkeypatch.setattr(running, "TIME_LIMIT", 0.2)
    with pytest.raises(lab.CheckError, match="did not return within 0.2 s"):
        lab.check_run_programs(endless)


def zero_the_weights(modules, points, programs):
    with torch.no_grad():
        for module in modules.values():
            module.weight.zero_()
    return grouped(modules, points, programs)


def one_module_everywhere(modules, points, programs):
    for name in list(modules):
        modules[name] = modules["rotate"]
    return grouped(modules, points, programs)


def new_weight_objects(modules, points, programs):
    for module in modules.values():
        module.weight = torch.nn.Parameter(module.weight.detach().clone())
    return grouped(modules, points, programs)


def cleared_programs(modules, points, programs):
    result = grouped(modules, points, programs)
    programs.clear()
    return result


@pytest.mark.parametrize(
    "student, message",
    [
        (zero_the_weights, "changed the values of modules['rotate'].weight"),
        (one_module_everywhere, "replaced modules['scale'] with another module"),
        (new_weight_objects, "replaced modules['rotate'].weight"),
        (cleared_programs, "changed the list `programs` it was given"),
    ],
)
def test_a_function_that_changes_modules_or_programs_is_refused(student, message):
    """09.5: the reference was computed after the call from the modules as they were then, so zeroing the
    weights (or putting one module under every name) and then batching correctly passed."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(student)
    assert info.value.message == f"run_programs {message}"
    assert "must only read modules and programs" in info.value.hint


def backward_inside(modules, points, programs):
    result = grouped(modules, points, programs)
    result.sum().backward()
    return result


def backward_then_grads_cleared(modules, points, programs):
    result = grouped(modules, points, programs)
    result.sum().backward()
    for parameter in modules.parameters():
        parameter.grad = None
    return result


@pytest.mark.parametrize("student", [backward_inside, backward_then_grads_cleared])
def test_a_function_that_runs_backward_is_told_to_return_the_result(student):
    """09.5: a backward inside run_programs freed the graph, and the check's own autograd.grad crashed
    ("Trying to backward through the graph a second time")."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(student)
    assert info.value.message.startswith("run_programs ran backward on what it computed")
    assert "without running backward" in info.value.message


def grouped_by_set_of_names(modules, points, programs):
    """09.5 audit 9: grouped by the set of a program's names, each group run through its first row's program; it
    passed while no two programs of the batch held the same names."""
    rows_of = {}
    for i, program in enumerate(programs):
        rows_of.setdefault(frozenset(program), []).append(i)
    out = torch.zeros_like(points)
    for rows in rows_of.values():
        h = points[rows]
        for name in programs[rows[0]]:
            h = modules[name](h)
        out[rows] = h
    return out


def each_step_once(modules, points, programs):
    """09.5 audit 9: a program's repeated step run once; it passed while no program repeated a step."""
    return grouped(modules, points, [tuple(dict.fromkeys(program)) for program in programs])


def test_programs_with_the_same_names_in_another_order_are_told_apart():
    points, programs = nb09.program_batch_reordered()
    assert ("scale", "rotate") in programs and ("rotate", "scale") in programs
    assert any(len(set(program)) < len(program) for program in programs)
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(grouped_by_set_of_names)
    assert info.value.mistake == "steps in another order"
    assert info.value.got == "2 of 6 rows differ"
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(each_step_once)
    assert info.value.message == "run_programs differs from running each row through its own program"
    assert info.value.got == "2 of 6 rows differ"


def points_made_a_leaf(modules, points, programs):
    points.requires_grad_(True)
    return grouped(modules, points, programs)


def test_requires_grad_switched_on_for_points_is_named():
    """15th audit: it passed, though the prompt says points is left as it came (its grad would fill up)."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(points_made_a_leaf)
    assert info.value.mistake == "requires_grad set on points"


def grad_switched_off(modules, points, programs):
    torch.set_grad_enabled(False)
    return grouped(modules, points, programs)


def test_autograd_switched_off_inside_run_programs_is_named():
    """15th audit: it was "the result does not require grad", and autograd stayed off in the kernel."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_run_programs(grad_switched_off)
    assert info.value.mistake == "autograd switched off"
    assert torch.is_grad_enabled()


def test_a_right_run_programs_passes_with_autograd_switched_off_in_the_kernel(capsys):
    """15th audit: a torch.set_grad_enabled(False) of an earlier cell refused the right answer."""
    torch.set_grad_enabled(False)
    try:
        lab.check_run_programs(grouped)
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    assert capsys.readouterr().out.startswith("PASS")

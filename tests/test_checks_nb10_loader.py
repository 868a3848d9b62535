"""Exercise 10.6 (the data of a DDP script): rank_loader_fixed is judged by the indices each rank of
2 and 3 processes receives in four epochs, on a dataset of indices, without starting processes."""

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

import labsupport as lab
from labsupport.checks import nb10_scaling_up as nb10
from labsupport.checks import running


def fixed(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def other_seed(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=7)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0)


def colleague(dataset, rank, world_size, epoch, batch_size=32):
    """Notebook 10's rank_loader, both bugs in."""
    DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(epoch))


def no_set_epoch(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def rank_zero(dataset, rank, world_size, epoch, batch_size=32):
    return fixed(dataset, 0, world_size, epoch, batch_size)


def unshuffled(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def seed_per_rank(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=rank)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def shuffle_false_then_sampler_positionally(dataset, rank, world_size, epoch, batch_size=32):
    """DataLoader's third parameter is shuffle: False there, the sampler fourth, is right."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size, False, sampler)


def _loader_for(dataset, sampler, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=False)


def through_a_helper(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = _loader_for(dataset, sampler, batch_size)
    loader.sampler.set_epoch(epoch)  # after the loader is built: the sampler is asked when the loader is iterated
    return loader


def with_a_generator_per_epoch(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    generator = torch.Generator().manual_seed(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=generator)


@pytest.mark.parametrize(
    "student",
    [fixed, other_seed, shuffle_false_then_sampler_positionally, through_a_helper, with_a_generator_per_epoch],
)
def test_every_correct_loader_passes(student, capsys):
    lab.check_rank_loader(student)
    assert capsys.readouterr().out.startswith("PASS  rank_loader_fixed: on 2 and 3 ranks each rank gets its own")


def epoch_from_rank(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def drop_last(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


def part_fixed_order_new(dataset, rank, world_size, epoch, batch_size=32):
    """The rank's part cut once (epoch 0's), only its order changes with the epoch."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    part = Subset(dataset, list(sampler))
    return DataLoader(part, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(epoch))


def epoch_cycles(dataset, rank, world_size, epoch, batch_size=32):
    """A new order in epoch 1, then epoch 0's again: the epoch number the sampler gets repeats."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch % 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def strided_without_padding(dataset, rank, world_size, epoch, batch_size=32):
    """A shuffle of its own, the same on every rank, cut into every world_size-th item: 17, 17, 16 of 50 on 3 ranks."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(epoch)).tolist()
    return DataLoader(Subset(dataset, order[rank::world_size]), batch_size=batch_size)


def two_replicas(dataset, rank, world_size, epoch, batch_size=32):
    """Round 12, second pass: num_replicas=2 written in passed on 2 ranks and got the part sizes only on 3."""
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank % 2, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


MISTAKES = {
    "every rank sees all data": colleague,
    "same shard on every rank": rank_zero,
    "unequal parts": strided_without_padding,  # audit 4: the sizes, without a cause
    "not shuffled": unshuffled,
    "shards overlap": seed_per_rank,
    "world size written in": two_replicas,
    "last batch dropped": drop_last,
    "same order every epoch": no_set_epoch,
    "order comes back": epoch_cycles,
    "same part every epoch": part_fixed_order_new,
}


def test_parts_that_overlap_only_after_epoch_0_fail():
    """10.6 audit 5: epoch 0 alone was checked for parts that cover the data, so an epoch number that grows with the
    rank (the same on every rank in epoch 0 only) passed."""

    def epoch_scaled_by_rank(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch * (rank + 1))
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(epoch_scaled_by_rank)
    assert info.value.mistake == "shards overlap"
    assert "reach no rank in epoch 1" in info.value.message


def test_set_epoch_with_the_rank_is_named_by_the_overlap_it_makes():
    """10.6: set_epoch(rank) was reported as "items reach no rank", then blamed on a missing set_epoch."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(epoch_from_rank)
    assert info.value.mistake == "shards overlap" and "epoch number" in info.value.look


def test_a_sampler_for_two_processes_is_named_on_three():
    """10.6 audit 6: the colleague's 2 GPUs written into the sampler: its ValueError on rank 2, no cause named."""

    def two_processes(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(two_processes)
    assert info.value.mistake == nb10.SAMPLER_FOR_OTHER_WORLD.name
    assert info.value.got == "an error for rank 2 of 3"


def test_a_sampler_left_to_ask_torch_distributed_is_named():
    """Thirteenth audit: DistributedSampler(dataset), no num_replicas or rank: torch's "Default process group has not
    been initialized", no cause named."""

    def sampler_on_defaults(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset)
        sampler.set_epoch(epoch)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(sampler_on_defaults)
    assert info.value.mistake == nb10.SAMPLER_ASKS_THE_GROUP.name


def test_a_sampler_set_through_its_epoch_attribute_after_the_loader_passes(capsys):
    """Thirteenth audit: the loader built first, the sampler's epoch set afterwards through its attribute."""

    def epoch_attribute(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size, sampler=sampler)
        sampler.epoch = epoch
        return loader

    lab.check_rank_loader(epoch_attribute)
    assert capsys.readouterr().out.startswith("PASS")


def test_set_epoch_on_the_loader_is_named():
    """10.6 audit 7: a bare AttributeError ("'DataLoader' object has no attribute 'set_epoch'"), no cause named."""

    def epoch_told_to_the_loader(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
        loader.set_epoch(epoch)
        return loader

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(epoch_told_to_the_loader)
    assert info.value.mistake == nb10.SET_EPOCH_ON_THE_LOADER.name


def test_the_epoch_as_the_loaders_generator_is_named():
    """10.6 audit 8: generator=epoch failed only while the check iterated the loader, with torch's TypeError."""

    def epoch_as_generator(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=epoch)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(epoch_as_generator)
    assert info.value.mistake == nb10.EPOCH_AS_GENERATOR.name
    assert "generator that is int 0" in info.value.message
    assert "set_epoch" not in f"{info.value.hint} {info.value.look}"


def test_a_loader_printed_not_returned_says_so(capsys):
    """10.6 audit 7: "did not return a loader" said nothing of why."""

    def prints_the_loader(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        print(DataLoader(dataset, batch_size=batch_size, sampler=sampler))

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(prints_the_loader)
    assert info.value.usage and "a print in its place" in info.value.hint


def test_every_listed_mistake_has_a_test():
    assert [m.name for m in nb10.LOADER_MISTAKES] == list(MISTAKES)


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_is_named(name):
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(MISTAKES[name])
    assert info.value.mistake == name
    assert info.value.message.startswith(
        "with 50 items on 3 ranks" if name in ("unequal parts", "world size written in") else "with 50 items on 2 ranks"
    )


def test_the_first_failure_says_what_each_rank_got_and_the_second_names_why():
    for rung in (1, 2):
        with pytest.raises(lab.CheckError) as info:
            lab.check_rank_loader(colleague)
        assert info.value.message == "with 50 items on 2 ranks, the ranks get 50, 50 items in epoch 0"
        shown = "\n".join(info.value.rendered())
        assert ("ignores the DistributedSampler" in shown) == (rung == 2)


def test_a_rank_whose_part_never_changes_fails_though_its_order_does():
    """10.6: the rank's part shuffled inside with the epoch's seed passed; a DDP sampler reshuffles it all."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(part_fixed_order_new)
    assert (
        info.value.message
        == "with 50 items on 2 ranks, epoch 1 gives every rank the same items as epoch 0, in another order"
    )


def test_an_order_that_comes_back_in_epoch_2_or_3_fails():
    """10.6: set_epoch(epoch % 2) passed when only epochs 0 and 1 were read."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(epoch_cycles)
    message = "with 50 items on 2 ranks, epoch 2 gives every rank the same items in the same order as epoch 0"
    assert info.value.message == message

    def every_third(dataset, rank, world_size, epoch, batch_size=32):
        return fixed(dataset, rank, world_size, epoch % 3, batch_size)

    with pytest.raises(lab.CheckError, match="epoch 3 gives every rank the same items in the same order as epoch 0"):
        lab.check_rank_loader(every_third)


def test_no_hint_quotes_the_fix():
    for mistake in nb10.LOADER_MISTAKES:
        text = f"{mistake.why} {mistake.look} {mistake.symptom}"
        assert "set_epoch" not in text and "sampler=" not in text, mistake.name


def test_a_fixed_colleague_on_three_ranks_is_checked_too():
    def two_ranks_only(dataset, rank, world_size, epoch, batch_size=32):
        return fixed(dataset, rank % 2, 2, epoch, batch_size)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(two_ranks_only)
    assert info.value.message.startswith("with 50 items on 3 ranks, the ranks get 25, 25, 25 items")


@pytest.mark.parametrize(
    "student, message",
    [
        (None, "is None"),
        ("loader", "is not a function"),
        (lambda *args: 3, "did not return a loader"),
        (lambda d, r, w, e, b: [[0, 1]], "is not a batch of at most 8 items"),
        (lambda d, r, w, e, b: DataLoader(d, batch_size=b, shuffle=True, sampler=range(3)), "ValueError"),
    ],
)
def test_what_the_check_cannot_use_is_answered(student, message):
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(student)
    assert message in str(info.value)


def test_a_loader_that_never_ends_is_stopped(monkeypatch):
    def endless_batches():
        while True:
            yield (torch.arange(3),)

    class Endless:
        def __iter__(self):
            return endless_batches()

    # cut off after one epoch's worth of batches, by count: no clock, no memory growing meanwhile
    monkeypatch.setattr(running, "TIME_LIMIT", 30)
    with pytest.raises(lab.CheckError, match="it does not end after one epoch"):
        lab.check_rank_loader(lambda *args: Endless())


def test_a_sampler_returned_instead_of_a_loader_is_named():
    def sampler_only(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        return sampler

    with pytest.raises(lab.CheckError, match="returned a DistributedSampler, not a loader"):
        lab.check_rank_loader(sampler_only)


def test_a_batch_size_of_its_own_is_told_by_the_batch_it_made():
    """10.6: batch_size=32 fixed gave "got: list of length 1" (the batch held 25 items)."""

    def own_size(dataset, rank, world_size, epoch, batch_size=32):
        return fixed(dataset, rank, world_size, epoch, batch_size=32)

    with pytest.raises(lab.CheckError, match="holds 25 items, more than batch_size=8"):
        lab.check_rank_loader(own_size)


def foreign_items(dataset, rank, world_size, epoch, batch_size=32):
    """10.5 audit: a loader over a dataset of its own passed, since only the indices' pattern was judged."""
    own = TensorDataset(torch.arange(len(dataset)) + 1000)
    return fixed(own, rank, world_size, epoch, batch_size)


def nan_items(dataset, rank, world_size, epoch, batch_size=32):
    own = TensorDataset(torch.full((len(dataset),), float("nan")))
    return fixed(own, rank, world_size, epoch, batch_size)


@pytest.mark.parametrize("student, item", [(foreign_items, "10"), (nan_items, "nan")])
def test_items_the_dataset_does_not_hold_are_refused(student, item):
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(student)
    assert info.value.message.startswith(f"the loader gave the item {item}")
    assert "not an item of the dataset rank_loader_fixed was given" in info.value.message
    assert info.value.expected == "items of that dataset: its indices 0 to 49"


def test_a_loader_without_the_batch_size_is_named():
    """10.6 audit: DataLoader(dataset, sampler=sampler), no batch size (batches of 1 item), passed."""

    def one_at_a_time(dataset, rank, world_size, epoch, batch_size=32):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        return DataLoader(dataset, sampler=sampler)

    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(one_at_a_time)
    assert info.value.mistake == "batch size not passed on"
    assert info.value.message == "a batch of the loader holds 1 item, where batch_size is 8"
    assert "sampler=" not in f"{info.value.hint} {info.value.look}"


def shuffle_kept(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=True)


def test_the_colleagues_shuffle_kept_beside_the_sampler_is_named():
    """10.6 (audit 2): DataLoader's "sampler option is mutually exclusive with shuffle" came with no cause."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(shuffle_kept)
    assert info.value.mistake == "shuffle kept with the sampler"
    text = f"{info.value.hint} {info.value.look}"
    assert "set_epoch" not in text and "sampler=sampler" not in text


def one_pass_iterator(dataset, rank, world_size, epoch, batch_size=32):
    return iter(fixed(dataset, rank, world_size, epoch, batch_size))


def one_pass_generator(dataset, rank, world_size, epoch, batch_size=32):
    return (batch for batch in fixed(dataset, rank, world_size, epoch, batch_size))


@pytest.mark.parametrize("student", [one_pass_iterator, one_pass_generator])
def test_an_iterator_in_place_of_the_loader_is_named(student):
    """10.6 audit 9: iter(loader) passed, since the check walked each returned object once."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(student)
    assert info.value.mistake == nb10.ONE_PASS_ONLY.name
    assert info.value.message.endswith("and 0 when iterated a second time")
    assert "iter(" not in f"{info.value.hint} {info.value.look}"


def through_a_batch_sampler(dataset, rank, world_size, epoch, batch_size=32):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    batches = torch.utils.data.BatchSampler(sampler, batch_size, drop_last=False)
    return DataLoader(dataset, batch_sampler=batches)


def test_a_batch_sampler_over_the_distributed_sampler_passes(capsys):
    """Another design the prompt allows; it is iterated twice like any loader."""
    lab.check_rank_loader(through_a_batch_sampler)
    assert capsys.readouterr().out.startswith("PASS  rank_loader_fixed")


def sampler_in_shuffles_place(dataset, rank, world_size, epoch, batch_size=32):
    chosen = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    chosen.set_epoch(epoch)
    return DataLoader(dataset, batch_size, chosen)


def test_a_sampler_passed_positionally_is_named():
    """10.6 audit 9: DataLoader(dataset, batch_size, sampler) puts the sampler on shuffle; it was named "every rank
    sees all data", which the student's line seems to contradict."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(sampler_in_shuffles_place)
    assert info.value.mistake == nb10.SAMPLER_AS_SHUFFLE.name
    assert info.value.message == "with 50 items on 2 ranks, the ranks get 50, 50 items in epoch 0"
    text = f"{info.value.hint} {info.value.look}"
    assert "third parameter is shuffle" in text and "sampler=" not in text


@pytest.mark.parametrize("setting", ["grad off", "float64 default"])
def test_a_right_loader_passes_whatever_the_kernel_switched_earlier(setting, capsys):
    """15th audit: the check runs as in a fresh kernel, and gives the kernel its settings back."""
    if setting == "grad off":
        torch.set_grad_enabled(False)
    else:
        torch.set_default_dtype(torch.float64)
    try:
        lab.check_rank_loader(fixed)
        assert torch.is_grad_enabled() == (setting != "grad off")
    finally:
        torch.set_grad_enabled(True)
        torch.set_default_dtype(torch.float32)
    assert capsys.readouterr().out.startswith("PASS")


def shuffles_the_dataset_itself(dataset, rank, world_size, epoch, batch_size=32):
    """15th audit: "a new shuffle each epoch" read as shuffling the data in place."""
    items = dataset.tensors[0]
    items[:] = items[torch.randperm(len(items), generator=torch.Generator().manual_seed(epoch))]
    return fixed(dataset, rank, world_size, epoch, batch_size)


def test_a_loader_that_changes_its_dataset_is_named():
    """It was named "the ranks shuffle differently", a cause it did not have."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(shuffles_the_dataset_itself)
    assert info.value.mistake == nb10.DATASET_CHANGED.name
    assert info.value.message == "rank_loader_fixed changed the dataset it was given"


class MetaBatches:
    """A loader whose batches hold no values."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for (batch,) in self.loader:
            yield (batch.to("meta"),)


def test_a_loader_of_meta_batches_gets_one_sentence():
    """It was "the check could not use what it was given (NotImplementedError: Cannot copy out of meta tensor)"."""
    with pytest.raises(lab.CheckError) as info:
        lab.check_rank_loader(lambda *args, **kwargs: MetaBatches(fixed(*args, **kwargs)))
    assert info.value.usage
    assert info.value.message == "a batch of the loader is on the meta device, which holds shapes but no items"

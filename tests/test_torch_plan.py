"""bert_data.torch's split of an epoch (``bert_data/torch/plan.py``): exactly once, balanced, and
the DataLoader's turn-taking that resuming relies on.

Pure arithmetic, so hypothesis runs it over thousands of shapes: files (empty ones too) x
ranks x workers x shuffled orders. Skipped when torch is not installed, except under CI.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

from bert_data.errors import ConfigError  # noqa: E402
from bert_data.torch.plan import (  # noqa: E402
    consumed_by_worker, file_order, rank_span, reader_span, segments, worker_records,
)

COUNTS = st.lists(st.integers(0, 40), min_size=1, max_size=12)


def read_by_every_reader(counts, world, workers, order, drop_last=False) -> Counter:
    """(file, record) -> how many readers read it."""
    seen: Counter = Counter()
    total = sum(counts)
    for rank in range(world):
        for worker in range(workers):
            start, stop = reader_span(total, world, rank, workers, worker, drop_last)
            for run in segments(counts, order, start, stop):
                assert 0 <= run.start < run.stop <= counts[run.file]
                seen.update((run.file, r) for r in range(run.start, run.stop))
    return seen


@settings(max_examples=400, deadline=None)
@given(counts=COUNTS, world=st.integers(1, 9), workers=st.integers(1, 6), seed=st.integers(0, 2**32),
       epoch=st.integers(0, 5), shuffle=st.booleans())
def test_every_record_is_read_exactly_once(counts: List[int], world: int, workers: int, seed: int, epoch: int,
                                           shuffle: bool) -> None:
    order = file_order(len(counts), seed, epoch, shuffle)
    seen = read_by_every_reader(counts, world, workers, order)
    every = {(f, r) for f, n in enumerate(counts) for r in range(n)}
    assert set(seen) == every  # none left out (readers may outnumber files, or records)
    assert all(times == 1 for times in seen.values())  # none read twice


@settings(max_examples=200, deadline=None)
@given(counts=COUNTS, world=st.integers(1, 9), workers=st.integers(1, 6))
def test_readers_are_balanced_to_one_record(counts: List[int], world: int, workers: int) -> None:
    total = sum(counts)
    per_rank = [sum(worker_records(total, world, rank, workers)) for rank in range(world)]
    assert sum(per_rank) == total and max(per_rank) - min(per_rank) <= 1
    for rank in range(world):
        per_worker = worker_records(total, world, rank, workers)
        assert max(per_worker) - min(per_worker) <= 1


@settings(max_examples=200, deadline=None)
@given(counts=COUNTS, world=st.integers(1, 9), workers=st.integers(1, 6), seed=st.integers(0, 99))
def test_drop_last_gives_every_rank_the_same_records_and_reads_each_at_most_once(
        counts: List[int], world: int, workers: int, seed: int) -> None:
    total = sum(counts)
    order = file_order(len(counts), seed, 0, True)
    seen = read_by_every_reader(counts, world, workers, order, drop_last=True)
    assert all(times == 1 for times in seen.values())
    assert len(seen) == total - total % world  # only the tail (fewer records than ranks) is left out
    assert {sum(worker_records(total, world, r, workers, True)) for r in range(world)} == {total // world}


def test_the_file_order_is_a_seeded_permutation_that_changes_per_epoch() -> None:
    orders = [tuple(file_order(50, 7, epoch, True)) for epoch in range(4)]
    assert all(sorted(order) == list(range(50)) for order in orders)
    assert len(set(orders)) == 4  # a new order every epoch
    assert tuple(file_order(50, 7, 2, True)) == orders[2]  # the same epoch: the same order, in every process
    assert tuple(file_order(50, 8, 2, True)) != orders[2]
    assert list(file_order(5, 7, 3, False)) == [0, 1, 2, 3, 4]


def simulate_dataloader(batches_per_worker: List[int]) -> List[int]:
    """The worker each batch comes from, as torch's DataLoader hands an IterableDataset's batches
    out: workers in turn, one batch each, a worker that is done drops out."""
    left = list(batches_per_worker)
    order = []
    while any(left):
        for worker, n in enumerate(left):
            if n:
                order.append(worker)
                left[worker] -= 1
    return order


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.integers(0, 12), min_size=1, max_size=6), data=st.data())
def test_consumed_batches_map_to_each_workers_share(batches: List[int], data) -> None:
    order = simulate_dataloader(batches)
    k = data.draw(st.integers(0, len(order)))
    expected = [order[:k].count(w) for w in range(len(batches))]
    assert consumed_by_worker(batches, k) == expected


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_the_turn_taking_is_torchs() -> None:
    """The DataLoader really hands batches out in the order simulate_dataloader assumes."""
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class Tagged(IterableDataset):
        def __iter__(self):
            worker = get_worker_info().id
            for i in (5, 1, 3)[worker] * [0]:
                yield worker

    got = [int(b[0]) for b in DataLoader(Tagged(), batch_size=1, num_workers=3)]
    assert got == simulate_dataloader([5, 1, 3])


def test_bad_parts_are_errors() -> None:
    with pytest.raises(ConfigError):
        rank_span(10, 2, 2)
    with pytest.raises(ConfigError):
        rank_span(10, 2, 5, drop_last=True)
    with pytest.raises(ConfigError, match="batches consumed"):
        consumed_by_worker([2, 2], 5)

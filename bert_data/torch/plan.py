"""Who reads which records in an epoch: the exactly-once split over ranks and DataLoader workers.

Pure arithmetic (no torch, no I/O), so the property that matters most, *every record of the
epoch is read exactly once, by exactly one reader, for any number of files, ranks and workers*,
is tested directly over thousands of shapes (``tests/test_torch_plan.py``).

How the split works. The files are put in the epoch's order (natural order, or a seeded
permutation of the files per ``(seed, epoch)`` when shuffling), which every reader computes
identically; their records, concatenated in that order, are numbered ``0 .. N-1``. That range is
cut into ``world_size`` contiguous spans, one per rank, and each rank's span into
``num_workers`` contiguous spans, one per DataLoader worker (:func:`reader_span`). Contiguous
spans of one ordered range are disjoint and cover it, which is the whole proof. A span becomes
runs of records of files (:class:`Segment`, :func:`segments`): a reader reads whole files where
its span covers them and record ranges of the (at most two) files its span cuts, so readers can
outnumber files (a file then feeds several readers, each its own range) and no reader is ever
idle while another has records. Counting on record counts, not file sizes, also balances them:
spans differ by at most one record per cut. The price of a cut: a reader whose run starts inside
a file reads (and CRC-checks, but does not decode) the records before it, and decompresses them
in a gzip file; with fewer files than readers that is up to about half a file per reader.

Ranks get ``floor(N / world_size)`` or one more record; with ``drop_last`` every rank gets
exactly ``floor(N / world_size)`` (the last ``N mod world_size`` records of the epoch's order
are not read, as ``DistributedSampler(drop_last=True)`` drops a tail), so that DDP ranks step
the same number of times.

:func:`consumed_by_worker` maps "this rank's training loop consumed ``k`` batches" to how many
batches each worker had delivered, from the DataLoader's documented order (workers take turns,
one batch each, a worker that has run out drops out of the turn): what resuming mid-epoch skips;
:func:`next_in_turn` says which worker's turn it was, so that the resumed DataLoader, whose turns
start at worker 0 again, hands the rest out in the uninterrupted order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from ..errors import ConfigError

__all__ = [
    "Segment",
    "derive_seed",
    "file_order",
    "share",
    "rank_span",
    "reader_span",
    "segments",
    "worker_records",
    "consumed_by_worker",
    "next_in_turn",
]


@dataclass(frozen=True)
class Segment:
    """Records ``[start, stop)`` of file ``file`` (its index in the dataset's list of files)."""

    file: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def derive_seed(seed: int, *parts: object) -> int:
    """A 64-bit seed from ``seed`` and a purpose (a name, the epoch, the reader): every random
    stream of the reader has its own, so that none depends on how many others were drawn."""
    digest = hashlib.blake2b(repr(("bert_data.torch", int(seed), *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def file_order(n_files: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order the files are read in this epoch: ``0 .. n_files-1``, or a permutation seeded by
    ``(seed, epoch)`` (the same in every rank and worker: the split relies on it)."""
    if not shuffle:
        return np.arange(n_files, dtype=np.int64)
    return np.random.default_rng(derive_seed(seed, "files", epoch)).permutation(n_files).astype(np.int64)


def share(total: int, parts: int, index: int) -> Tuple[int, int]:
    """``[start, stop)`` of part ``index`` when ``total`` items are cut into ``parts`` contiguous
    parts whose sizes differ by at most one."""
    if parts < 1 or not 0 <= index < parts:
        raise ConfigError(f"part {index} of {parts} does not exist")
    return total * index // parts, total * (index + 1) // parts


def rank_span(total: int, world_size: int, rank: int, drop_last: bool = False) -> Tuple[int, int]:
    """The records ``[start, stop)`` of the epoch's order that ``rank`` reads (see the module
    docstring; ``drop_last``: every rank the same number, the tail left out)."""
    if drop_last:
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} of {world_size} does not exist")
        each = total // world_size
        return each * rank, each * (rank + 1)
    return share(total, world_size, rank)


def reader_span(total: int, world_size: int, rank: int, num_workers: int, worker: int,
                drop_last: bool = False) -> Tuple[int, int]:
    """The records ``[start, stop)`` that worker ``worker`` of ``num_workers`` of ``rank`` reads."""
    first, last = rank_span(total, world_size, rank, drop_last)
    start, stop = share(last - first, num_workers, worker)
    return first + start, first + stop


def segments(counts: Sequence[int], order: Sequence[int], start: int, stop: int) -> List[Segment]:
    """The runs of records of files that make up ``[start, stop)`` of the records of the files
    ``order`` (indices into ``counts``, the records of each file), concatenated in that order.
    Empty files and empty runs are left out."""
    out: List[Segment] = []
    offset = 0
    for file in order:
        count = int(counts[int(file)])
        lo, hi = max(start, offset), min(stop, offset + count)
        if lo < hi:
            out.append(Segment(int(file), lo - offset, hi - offset))
        offset += count
        if offset >= stop:
            break
    return out


def worker_records(total: int, world_size: int, rank: int, num_workers: int, drop_last: bool = False) -> List[int]:
    """How many records each worker of ``rank`` reads in an epoch."""
    return [
        stop - start
        for start, stop in (reader_span(total, world_size, rank, num_workers, w, drop_last) for w in range(num_workers))
    ]


def consumed_by_worker(batches_per_worker: Sequence[int], consumed: int) -> List[int]:
    """How many batches each worker had delivered when the DataLoader had handed out
    ``consumed`` batches in all: workers take turns, one batch each in worker order, and a
    worker that has no batch left drops out of the turn (``torch.utils.data.DataLoader``'s
    order for an ``IterableDataset``, with ``in_order=True``, its default)."""
    counts = np.asarray(batches_per_worker, dtype=np.int64)
    if consumed < 0 or consumed > int(counts.sum()):
        raise ConfigError(
            f"{consumed} batches consumed, but this rank's epoch has {int(counts.sum())} batches "
            "(a state saved for another dataset, batch size or number of workers?)"
        )
    rounds = _full_rounds(counts, consumed)
    taken = np.minimum(counts, rounds)
    left = consumed - int(taken.sum())
    more = np.flatnonzero(counts > rounds)[:left]  # the next round, in worker order
    taken[more] += 1
    return taken.tolist()


def next_in_turn(batches_per_worker: Sequence[int], consumed: Sequence[int]) -> int:
    """The worker whose turn it is after each has delivered ``consumed[w]`` batches (as
    :func:`consumed_by_worker` says): the first, in worker order, of those with batches left that
    have delivered the fewest (the turns of a round go in worker order); 0 when none has any
    left. A resumed DataLoader starts its turns at worker 0 again, so the resumed readers take
    their roles rotated by this much and the batches come in the uninterrupted order."""
    left = [w for w, (n, c) in enumerate(zip(batches_per_worker, consumed)) if n > c]
    if not left:
        return 0
    fewest = min(consumed[w] for w in left)
    return next(w for w in left if consumed[w] == fewest)


def _full_rounds(counts: np.ndarray, consumed: int) -> int:
    """The most whole rounds of turns that fit in ``consumed`` batches (a binary search on
    ``sum(min(counts, rounds)) <= consumed``)."""
    lo, hi = 0, int(counts.max(initial=0))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(np.minimum(counts, mid).sum()) <= consumed:
            lo = mid
        else:
            hi = mid - 1
    return lo

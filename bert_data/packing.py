"""Packing stage (``--packing``): one pass's instances -> rows of up to k instances each (pure).

Packing changes only the arrangement. The instances are those the unpacked run with the same
seed writes (the pass is planned and masked by the same function with the same RNG streams);
this stage takes the pass's masked batches and puts up to ``max_sequences_per_pack`` of them
side by side in a row, each keeping its tokens, segment ids, masked-LM predictions and NSP/SOP
label, with ``input_mask`` its index in the row (1..k), ``positions`` restarting at 0 at each
``[CLS]`` and ``next_sentence_positions`` the offset of each ``[CLS]``: the record layout of
Habana's MLPerf packed TFRecords (``format/schema.py``, docs/packing.md).
:func:`bert_data.format.packed.unpack_rows` turns rows back into the instances.

Algorithm: shortest-pack-first histogram packing (SPFHP, Krell et al. 2021, "Efficient Sequence
Packing without Cross-contamination", Algorithm 1) applied one instance at a time, longest
first: an instance goes to the open pack with the *least* room that still fits it (fewest free
tokens, then the newest such pack), else it opens a new pack; a pack with k instances is
closed. The masked-LM budget of a row (``max_predictions_per_seq + max_sequences_per_pack``,
Habana's) is a second capacity: a pack without room for the instance's predictions does not
fit it. Every instance fits an empty pack, so no instance is ever dropped.

Memory: a pass is packed in *buffers* of at most :data:`PACK_BUFFER_ROWS` instances (the pass's
``n`` is known before its first batch, so its buffers are of equal size give or take one); a
buffer holds only its instances' real tokens and predictions, so a worker's memory is bounded
by one buffer whatever the group or corpus. Buffers depend only on the pass, never on the
workers, so the bytes do not either.

Randomness: the rows of a buffer are shuffled (so rows of every packing pattern, and rows
packed from any part of the pass, are mixed in every shard) by the pass's own named stream
``"packing"`` (``PassRandomness.packing_seed``, derived in :func:`bert_data.group.pass_randomness`);
nothing else is drawn, and no existing stream is touched. Rows are dealt round-robin to the
shards from the pass's first shard, as unpacked rows are.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .instances import INSTANCE_BATCH_ROWS, InstancePass, PassRandomness, shard_of_rows

# Instances packed together at most (a bound on a worker's packing memory: their real tokens).
# Packing quality hardly depends on it (SPFHP on the shared corpus: 0.27% padding at depth 8
# with buffers of 4,096 instances, 0.22% with the whole output in one buffer).
PACK_BUFFER_ROWS = 8192
# Packed rows are handed to the writer in batches of at most this many (the encoder's
# temporaries grow with a batch's rows), as unpacked instances are (instances.INSTANCE_BATCH_ROWS).
PACKED_BATCH_ROWS = INSTANCE_BATCH_ROWS


@dataclass(frozen=True)
class PackingParams:
    """The row's sizes: tokens, masked-LM budget, instances; and whether instances have NSP/SOP labels."""

    max_seq_length: int
    max_predictions_per_seq: int
    max_sequences_per_pack: int
    paired: bool  # NSP/SOP: segment_ids and next_sentence_* features; MLM-only windows: neither

    @property
    def prediction_budget(self) -> int:
        return self.max_predictions_per_seq + self.max_sequences_per_pack


@dataclass
class PackedPass(InstancePass):
    """A packed pass: ``n`` is still its instances; the row counters are complete once its
    batches are exhausted (the caller counts a pass after writing it)."""

    rows: int = 0
    real_tokens: int = 0  # tokens of the pass's instances (input_mask != 0)
    predictions: int = 0


# --------------------------------------------------------------------------------------------
# The algorithm
# --------------------------------------------------------------------------------------------


def spfhp(lengths: Sequence[int], predictions: Sequence[int], max_length: int, prediction_budget: int,
          max_sequences_per_pack: int) -> List[List[int]]:
    """Shortest-pack-first histogram packing, per instance: the packs (lists of indices into
    ``lengths``, each in the order its instances were placed), in the order they were opened.

    Deterministic: instances are placed longest first, ties in index order; an instance goes to
    the fitting open pack with the fewest free tokens (ties: the most recently filled), else a
    new one. A pack fits when its free tokens, free prediction slots and free instance slots all
    suffice. Raises ValueError for an instance longer than ``max_length`` or with more
    predictions than the budget (it could fit no row)."""
    lengths_a = np.asarray(lengths, dtype=np.int64)
    preds_a = np.asarray(predictions, dtype=np.int64)
    if len(lengths_a) and (int(lengths_a.max()) > max_length or int(preds_a.max()) > prediction_budget):
        raise ValueError("an instance is longer than the row or has more predictions than its budget")
    order = np.argsort(-lengths_a, kind="stable").tolist()
    lengths_l, preds_l = lengths_a.tolist(), preds_a.tolist()
    members: List[List[int]] = []
    free_tokens: List[int] = []
    free_preds: List[int] = []
    buckets: Dict[int, List[int]] = {}  # free tokens -> open packs with that many (filled last: at the end)
    open_sizes: List[int] = []  # the keys of non-empty buckets, ascending
    for i in order:
        length, pred = lengths_l[i], preds_l[i]
        chosen = -1
        j = bisect_left(open_sizes, length)
        while j < len(open_sizes) and chosen < 0:
            bucket = buckets[open_sizes[j]]
            for slot in range(len(bucket) - 1, -1, -1):
                if free_preds[bucket[slot]] >= pred:
                    chosen = bucket.pop(slot)
                    break
            if chosen >= 0 and not bucket:
                del buckets[open_sizes[j]]
                del open_sizes[j]
            j += 1
        if chosen < 0:
            chosen = len(members)
            members.append([])
            free_tokens.append(max_length)
            free_preds.append(prediction_budget)
        members[chosen].append(i)
        free_tokens[chosen] -= length
        free_preds[chosen] -= pred
        room = free_tokens[chosen]
        if len(members[chosen]) < max_sequences_per_pack and room > 0 and free_preds[chosen] >= 0:
            bucket = buckets.get(room)
            if bucket is None:
                buckets[room] = bucket = []
                insort(open_sizes, room)
            bucket.append(chosen)
    return members


# --------------------------------------------------------------------------------------------
# A buffer of instances, held compactly (real tokens only)
# --------------------------------------------------------------------------------------------


class InstanceBuffer:
    """Instances of one buffer: their real tokens and predictions, concatenated."""

    def __init__(self, paired: bool) -> None:
        self.paired = paired
        self.parts: Dict[str, List[np.ndarray]] = {}
        self.n = 0

    def add(self, features: Mapping[str, np.ndarray], lo: int, hi: int) -> None:
        """Rows ``lo:hi`` of a batch of unpacked instances."""
        mask = np.asarray(features["input_mask"][lo:hi])
        real = mask.sum(axis=1)
        run = mask != 0
        pos = np.asarray(features["masked_lm_positions"][lo:hi])
        weights = np.asarray(features["masked_lm_weights"][lo:hi])
        slots = weights != 0
        parts = {
            "length": real.astype(np.int64),
            "ids": np.asarray(features["input_ids"][lo:hi])[run].astype(np.int32),
            "npred": slots.sum(axis=1).astype(np.int64),
            "mlm_pos": pos[slots].astype(np.int32),
            "mlm_ids": np.asarray(features["masked_lm_ids"][lo:hi])[slots].astype(np.int32),
        }
        if self.paired:
            parts["segments"] = np.asarray(features["segment_ids"][lo:hi])[run].astype(np.int8)
            parts["labels"] = np.asarray(features["next_sentence_labels"][lo:hi])[:, 0].astype(np.int32)
        for name, value in parts.items():
            self.parts.setdefault(name, []).append(value)
        self.n += hi - lo

    def take(self) -> Dict[str, np.ndarray]:
        out = {name: np.concatenate(values) for name, values in self.parts.items()}
        self.parts, self.n = {}, 0
        return out


def pack_instances(instances: Mapping[str, np.ndarray], params: PackingParams,
                   rng: Optional[np.random.Generator]) -> Dict[str, np.ndarray]:
    """One buffer of compact instances (:class:`InstanceBuffer`) -> packed rows, shuffled by ``rng``
    (None: in the order the packs were opened)."""
    lengths, npred = instances["length"], instances["npred"]
    packs = spfhp(lengths, npred, params.max_seq_length, params.prediction_budget, params.max_sequences_per_pack)
    if rng is not None:
        packs = [packs[p] for p in rng.permutation(len(packs)).tolist()]
    return assemble_rows(instances, packs, params)


def assemble_rows(instances: Mapping[str, np.ndarray], packs: Sequence[Sequence[int]],
                  params: PackingParams) -> Dict[str, np.ndarray]:
    """The packed rows of ``packs`` (each a list of instance indices, in row order), vectorised."""
    L, B, K = params.max_seq_length, params.prediction_budget, params.max_sequences_per_pack
    lengths, npred = instances["length"], instances["npred"]
    n, rows = len(lengths), len(packs)
    row_of = np.empty(n, np.int64)
    slot_of = np.empty(n, np.int64)  # 0-based index of the instance in its row
    flat = [i for pack in packs for i in pack]
    row_of[flat] = np.repeat(np.arange(rows), [len(p) for p in packs])
    slot_of[flat] = np.concatenate([np.arange(len(p)) for p in packs]) if rows else np.zeros(0, np.int64)
    # token and prediction offsets of each instance in its row: cumulative over the row's order
    flat_a = np.asarray(flat, dtype=np.int64)
    tok_in_order = lengths[flat_a]
    pred_in_order = npred[flat_a]
    first = np.zeros(len(flat_a), bool)
    first[slot_of[flat_a] == 0] = True
    offset = np.empty(n, np.int64)
    moffset = np.empty(n, np.int64)
    offset[flat_a] = _row_exclusive_cumsum(tok_in_order, first)
    moffset[flat_a] = _row_exclusive_cumsum(pred_in_order, first)

    tok_start = np.concatenate([[0], np.cumsum(lengths)])
    pred_start = np.concatenate([[0], np.cumsum(npred)])
    tok_inst = np.repeat(np.arange(n), lengths)  # instance of each compact token
    tok_pos = np.arange(int(tok_start[-1])) - tok_start[tok_inst]  # position within its instance
    tok_target = row_of[tok_inst] * L + offset[tok_inst] + tok_pos

    out: Dict[str, np.ndarray] = {}
    ids = np.zeros(rows * L, np.int32)
    ids[tok_target] = instances["ids"]
    mask = np.zeros(rows * L, np.int32)
    mask[tok_target] = (slot_of[tok_inst] + 1).astype(np.int32)
    positions = np.zeros(rows * L, np.int32)
    positions[tok_target] = tok_pos
    out["input_ids"], out["input_mask"], out["positions"] = (a.reshape(rows, L) for a in (ids, mask, positions))
    if params.paired:
        segments = np.zeros(rows * L, np.int32)
        segments[tok_target] = instances["segments"]
        out["segment_ids"] = segments.reshape(rows, L)

    pred_inst = np.repeat(np.arange(n), npred)
    pred_target = row_of[pred_inst] * B + moffset[pred_inst] + (np.arange(int(pred_start[-1])) - pred_start[pred_inst])
    mpos = np.zeros(rows * B, np.int32)
    mpos[pred_target] = instances["mlm_pos"] + offset[pred_inst]
    mids = np.zeros(rows * B, np.int32)
    mids[pred_target] = instances["mlm_ids"]
    mweights = np.zeros(rows * B, np.float32)
    mweights[pred_target] = slot_of[pred_inst] + 1
    out["masked_lm_positions"], out["masked_lm_ids"], out["masked_lm_weights"] = (
        a.reshape(rows, B) for a in (mpos, mids, mweights))
    if params.paired:
        nsp_target = row_of * K + slot_of
        nsp_pos = np.zeros(rows * K, np.int32)
        nsp_pos[nsp_target] = offset
        labels = np.zeros(rows * K, np.int32)
        labels[nsp_target] = instances["labels"]
        weights = np.zeros(rows * K, np.float32)
        weights[nsp_target] = 1.0
        out["next_sentence_positions"], out["next_sentence_labels"], out["next_sentence_weights"] = (
            a.reshape(rows, K) for a in (nsp_pos, labels, weights))
    return out


def _row_exclusive_cumsum(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per run starting where ``first`` is True: the sum of the run's earlier values."""
    total = np.cumsum(values) - values  # exclusive cumsum over everything
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(values)), 0)) if len(values) else values
    return total - total[run_start]


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


def buffer_sizes(n: int, most: int = PACK_BUFFER_ROWS) -> List[int]:
    """``n`` instances cut into the fewest buffers of at most ``most``, of equal size give or take one."""
    if n <= 0:
        return []
    count = -(-n // most)
    return [n // count + (b < n % count) for b in range(count)]


def pack_pass(inner: InstancePass, params: PackingParams, randomness: PassRandomness, num_shards: int,
              buffer_rows: int = PACK_BUFFER_ROWS) -> PackedPass:
    """A pass's instances (``inner``: the unpacked pass, its batches in output order) packed
    into rows, buffer by buffer (:func:`buffer_sizes`), each buffer's rows shuffled by the pass's
    ``"packing"`` stream and dealt round-robin from the pass's first shard."""
    packed = PackedPass(n=inner.n, unpaired=inner.unpaired, batches=iter(()),
                        spanning_documents=inner.spanning_documents, random_next=inner.random_next,
                        single_sentence_chunks=inner.single_sentence_chunks,
                        continuations_kept=inner.continuations_kept)
    rng = np.random.Generator(np.random.PCG64(randomness.packing_seed))
    sizes = buffer_sizes(inner.n, buffer_rows)

    def batches() -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        buffer = InstanceBuffer(params.paired)
        written = 0
        wanted = iter(sizes)
        target = next(wanted, 0)
        for features, _ in inner.batches:
            count, lo = len(features["input_ids"]), 0
            while lo < count:
                hi = min(count, lo + target - buffer.n)
                buffer.add(features, lo, hi)
                lo = hi
                if buffer.n == target:
                    for rows in _flush(buffer):
                        yield rows, shard_of_rows(written, len(rows["input_ids"]), randomness.first_shard, num_shards)
                        written += len(rows["input_ids"])
                    target = next(wanted, 0)
        if buffer.n:  # only when the inner pass made more instances than it announced (never in production)
            for rows in _flush(buffer):
                yield rows, shard_of_rows(written, len(rows["input_ids"]), randomness.first_shard, num_shards)
                written += len(rows["input_ids"])
        packed.rows = written

    def _flush(buffer: InstanceBuffer) -> Iterator[Dict[str, np.ndarray]]:
        instances = buffer.take()
        packed.real_tokens += int(instances["length"].sum())
        packed.predictions += int(instances["npred"].sum())
        rows = pack_instances(instances, params, rng)
        del instances
        count = len(rows["input_ids"])
        for lo in range(0, count, PACKED_BATCH_ROWS):
            yield {name: value[lo : lo + PACKED_BATCH_ROWS] for name, value in rows.items()}

    packed.batches = batches()
    return packed


def packing_summary(instances: int, rows: int, real_tokens: int, max_seq_length: int,
                    max_sequences_per_pack: Optional[int]) -> Dict[str, object]:
    """The manifest's ``packing_summary`` figures: padding before (one instance per row) and after,
    the average instances per row (a trainer divides its batch size and steps by it, as
    Habana's and NVIDIA's do) and the bound on it, ``1 / mean fill`` of the unpacked rows."""
    before = instances * max_seq_length
    after = rows * max_seq_length
    return {
        "max_sequences_per_pack": max_sequences_per_pack,
        "instances": instances,
        "rows": rows,
        "real_tokens": real_tokens,
        "padding_before": round(1 - real_tokens / before, 6) if before else 0.0,
        "padding_after": round(1 - real_tokens / after, 6) if after else 0.0,
        "average_sequences_per_row": round(instances / rows, 6) if rows else 0.0,
        "speedup_bound": round(before / real_tokens, 6) if real_tokens else 0.0,
        "fewest_rows_possible": -(-real_tokens // max_seq_length),
    }

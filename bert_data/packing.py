"""Packing stage (``--packing``): one pass's instances -> rows of up to k instances each (pure).

Packing changes only the arrangement. The instances are those the unpacked run with the same
seed writes (the pass is planned and masked by the same function with the same RNG streams);
this stage takes the pass's masked batches and puts up to ``max_sequences_per_pack`` of them
side by side in a row, each keeping its tokens, segment ids, masked-LM predictions and NSP/SOP
label, with ``input_mask`` its index in the row (1..k), ``positions`` restarting at 0 at each
``[CLS]`` and ``next_sentence_positions`` the offset of each ``[CLS]``: the record layout of
Habana's MLPerf packed TFRecords (``format/schema.py``, docs/packing.md).
:func:`bert_data.format.packed.unpack_rows` turns rows back into the instances.

Algorithm (:func:`best_fill`): longest first, each row completed by the single instance or the
pair of instances, chosen over the histogram of the lengths left, that fills its free tokens
best (equally good pairs: the most balanced). The masked-LM budget of a row
(``max_predictions_per_seq + max_sequences_per_pack``, Habana's) is a second capacity: a fill
whose predictions do not fit is not taken. Every instance fits an empty row, so no instance is
ever dropped.

Memory and randomness: :class:`UnitPacker` packs the instances of all dupe passes of one unit
in buffers of at most :data:`PACK_BUFFER_TOKENS` real tokens, shuffles each buffer's rows by the
unit's own named stream ``"packing"`` (``PassRandomness.packing_seed`` of the unit's first pass,
derived in :func:`bert_data.group.pass_randomness`; no existing stream is touched) and deals them
round-robin to the shards, as unpacked rows are.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .format.native import wire
from .instances import INSTANCE_BATCH_ROWS, shard_of_rows

# Real tokens packed together at most (a worker's packing memory: 2-byte ids, 1-byte segments and
# the predictions, about 9 MB when full). At MSL 512 quality hardly depends on it (depth 3: 0.31%
# padding with 2M or 4M tokens, depth 8 0.19% or 0.18%); at MSL 128, where few short instances
# must complete many nearly full rows, it does (0.98% with 2M, 0.97% with 4M, 1.00% with 1M; the
# LP optimum is 0.915%), and 2M keeps a packed run's peak memory within 9% of the unpacked one's
# (4M: 16%; UnitPacker's docstring).
PACK_BUFFER_TOKENS = 1 << 21
# Packed rows are assembled and handed to the writer in batches of at most this many rows (as
# unpacked instances are, instances.INSTANCE_BATCH_ROWS) and at most PACKED_BATCH_TOKENS padded
# tokens: a batch's rows (4 int32 arrays of its padded tokens) are serialized while they are
# still in the cache, and its temporaries stay small (measured at MSL 512: 256K tokens, 512
# rows, made assembly 25% cheaper than 1M and the run's peak memory 4% lower).
PACKED_BATCH_ROWS = INSTANCE_BATCH_ROWS
PACKED_BATCH_TOKENS = 1 << 18


def packed_batch_rows(max_seq_length: int) -> int:
    return max(1, min(PACKED_BATCH_ROWS, PACKED_BATCH_TOKENS // max_seq_length))


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


# --------------------------------------------------------------------------------------------
# The algorithm
# --------------------------------------------------------------------------------------------


def best_fill(lengths: Sequence[int], predictions: Sequence[int], max_length: int, prediction_budget: int,
              max_sequences_per_pack: int) -> List[List[int]]:
    """:func:`best_fill_arrays`' packs as lists of indices into ``lengths``."""
    members, depths = best_fill_arrays(lengths, predictions, max_length, prediction_budget, max_sequences_per_pack)
    members_l, packs, at = members.tolist(), [], 0
    for depth in depths.tolist():
        packs.append(members_l[at : at + depth])
        at += depth
    return packs


def best_fill_arrays(lengths: Sequence[int], predictions: Sequence[int], max_length: int, prediction_budget: int,
                     max_sequences_per_pack: int) -> Tuple[np.ndarray, np.ndarray]:
    """Longest first, each row completed by its best fill: the packs (lists of indices into
    ``lengths``, each in the order its instances were placed), in the order they were opened.

    The longest instance left opens a row. While the row has free slots, the instances that
    complete it are chosen over the histogram of the lengths left: the single instance or the
    *pair* whose lengths fill the row's free tokens best, and among equally good fills the most
    balanced pair (the one whose longer member is shortest; with exactly two free slots such a pair
    is preferred even to an exact single). With more than two free slots an exact single is
    taken, and without an exact fill the longest instance that fits is added first and the row
    is completed again.
    Why: SPFHP (Krell et al. 2021, Alg. 1, best fit one instance at a time) spends a row's slots
    before its tokens: at depth 3 on the shared corpus it leaves 2.5% padding where this leaves
    0.26% (the token bound is 0%, an LP over all depth-3 patterns reaches about 0.3%). The
    balanced choice keeps both the shortest instances (the only ones that complete nearly full
    rows) and the half-length ones (which pair with each other) for the rows that need them
    (the preferences were chosen by measurement: depth 3 0.27% and depth 8 0.18% padding, where
    preferring exact singles at depth 3 gave 1.5% and pairs at depth 8 0.25%).

    Returns the packs, in the order they were opened, as int64 arrays: their instances back to
    back (each pack's in the order they were placed) and each pack's depth. ``_wire.best_fill``
    when the accelerator is built (the same packs, step for step; this Python is the reference).

    The masked-LM budget is a second capacity: a fill is taken only when its instances'
    predictions fit the row's free prediction slots (of equally long instances, those with the
    fewest predictions are taken first). Deterministic: ties go to the lower index. Every
    instance fits an empty row, so none is dropped. Raises ValueError for an instance longer
    than ``max_length`` or with more predictions than the budget (it could fit no row)."""
    lengths_a = np.asarray(lengths, dtype=np.int64)
    preds_a = np.asarray(predictions, dtype=np.int64)
    if len(lengths_a) and (int(lengths_a.max()) > max_length or int(preds_a.max()) > prediction_budget
                           or int(lengths_a.min()) < 1):
        raise ValueError("an instance is empty, longer than the row or has more predictions than its budget")
    order = _histogram_order(lengths_a, preds_a)
    native = wire()
    if native is not None:
        members, depths = np.empty(len(lengths_a), np.int64), np.empty(len(lengths_a), np.int64)
        rows = native.best_fill(np.ascontiguousarray(lengths_a), np.ascontiguousarray(preds_a), order, max_length,
                                prediction_budget, max_sequences_per_pack, members, depths)
        return members, depths[:rows]
    histogram = _Histogram(lengths_a, preds_a, order, max_length)
    packs: List[List[int]] = []
    predictions_l = preds_a.tolist()
    for length in range(max_length, 0, -1):
        while histogram.count[length]:
            free_tokens = max_length - length
            if max_sequences_per_pack == 1 or not histogram.present or free_tokens < histogram.present[0]:
                packs.extend([index] for index in histogram.take_all(length))  # nothing left is short enough
                break
            pack = [histogram.take(length)]
            free_preds = prediction_budget - predictions_l[pack[0]]
            while free_tokens and len(pack) < max_sequences_per_pack:
                slots = max_sequences_per_pack - len(pack)
                fill = histogram.best_fill(free_tokens, free_preds, slots)
                if not fill:
                    break
                if slots > 2 and sum(fill) < free_tokens:  # no exact fill yet: the longest that fits, then again
                    fill = histogram.longest_fitting(free_tokens, free_preds)
                for member in fill:
                    index = histogram.take(member)
                    pack.append(index)
                    free_tokens -= member
                    free_preds -= predictions_l[index]
                if slots <= 2 or not free_tokens:
                    break
            packs.append(pack)
    members = np.fromiter((i for pack in packs for i in pack), np.int64, len(lengths_a))
    return members, np.fromiter((len(pack) for pack in packs), np.int64, len(packs))


def _histogram_order(lengths: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """The instances by length, then most predictions first, then highest index first: each
    length's run, read from its end, gives the fewest predictions and lowest index first."""
    return np.lexsort((-np.arange(len(lengths)), -predictions, lengths)).astype(np.int64)


class _Histogram:
    """The instances left, by length: per length a stack of indices whose top has the fewest
    predictions (ties: the lowest index), the count per length, and the lengths present, sorted
    (plain Python lists: a row's fill is found with a few bisections, no array per row)."""

    def __init__(self, lengths: np.ndarray, predictions: np.ndarray, order: np.ndarray, max_length: int) -> None:
        self.predictions = predictions.tolist()
        counts = np.bincount(lengths, minlength=max_length + 1)
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        order_l = order.tolist()
        self.count: List[int] = counts.tolist()
        self.stacks: List[List[int]] = [order_l[bounds[n]:bounds[n + 1]] for n in range(max_length + 1)]
        self.present: List[int] = [n for n in range(1, max_length + 1) if self.count[n]]

    def take(self, length: int) -> int:
        self.count[length] -= 1
        if not self.count[length]:
            del self.present[bisect_left(self.present, length)]
        return self.stacks[length].pop()

    def take_all(self, length: int) -> List[int]:
        """Every instance of ``length`` left, in the order :meth:`take` would give them."""
        taken = self.stacks[length][::-1]
        self.stacks[length] = []
        if self.count[length]:
            self.count[length] = 0
            del self.present[bisect_left(self.present, length)]
        return taken

    def _fewest(self, length: int, nth: int = 1) -> int:
        """The predictions of the ``nth`` instance of ``length`` taken next."""
        return self.predictions[self.stacks[length][-nth]]

    def longest_fitting(self, free_tokens: int, free_preds: int) -> List[int]:
        for j in range(bisect_right(self.present, free_tokens) - 1, -1, -1):
            if self._fewest(self.present[j]) <= free_preds:
                return [self.present[j]]
        return []

    def _partner(self, longer: int, free_tokens: int, free_preds: int) -> int:
        """The longest partner of ``longer`` (not longer than it, within the free tokens and, with
        it, the free predictions), or 0."""
        present = self.present
        j = bisect_right(present, min(free_tokens - longer, longer)) - 1
        while j >= 0:
            partner = present[j]
            nth = 2 if partner == longer else 1
            if self.count[partner] >= nth and self._fewest(longer) + self._fewest(partner, nth) <= free_preds:
                return partner
            j -= 1
        return 0

    def best_fill(self, free_tokens: int, free_preds: int, slots: int) -> List[int]:
        """The lengths of the single instance or pair (``slots`` >= 2) that fill ``free_tokens``
        best within ``free_preds`` (the most tokens; then the shortest longer member, so a pair
        beats a single of the same total); [] when none fits."""
        present = self.present
        top = bisect_right(present, free_tokens)
        best_key, best = (0, 0), []
        for j in range(top - 1, -1, -1):  # a single instance: the longest that fits
            if self._fewest(present[j]) <= free_preds:
                best_key, best = (present[j], -present[j]), [present[j]]
                break
        if slots < 2 or (slots > 2 and best_key[0] == free_tokens):
            return best  # with slots to spare an exact single is kept; with two, a balanced exact pair beats it
        if not top:
            return best
        upper = bisect_right(present, free_tokens - present[0], 0, top)  # longer members with a partner short enough
        half = bisect_left(present, (free_tokens + 1) // 2, 0, upper)
        count = self.count
        for j in range(half, upper):  # an exact pair, the most balanced first (longer >= half the room, shortest first)
            longer = present[j]
            partner = free_tokens - longer
            nth = 2 if partner == longer else 1
            if count[partner] >= nth and self._fewest(longer) + self._fewest(partner, nth) <= free_preds:
                return [longer, partner]
        for j in range(half, upper):  # no exact pair: the fullest, then the most balanced
            longer = present[j]
            partner = self._partner(longer, free_tokens, free_preds)
            if partner and (longer + partner, -longer) > best_key:
                best_key, best = (longer + partner, -longer), [longer, partner]
        for j in range(half - 1, -1, -1):  # longer < half the room: longest first
            longer = present[j]
            if 2 * longer < best_key[0]:
                break
            partner = self._partner(longer, free_tokens, free_preds)
            if partner and (longer + partner, -longer) > best_key:
                best_key, best = (longer + partner, -longer), [longer, partner]
        return best


# --------------------------------------------------------------------------------------------
# A buffer of instances, held compactly (real tokens only)
# --------------------------------------------------------------------------------------------


class InstanceBuffer:
    """Instances of one buffer: their real tokens and predictions, back to back.

    The columns are allocated once for ``capacity_tokens`` (a :class:`UnitPacker` knows its
    buffer's most tokens) and reused buffer after buffer, so a worker's packing memory is one
    buffer's real tokens, not twice that while parts are concatenated; they grow by doubling past
    it. The rows' prefixes are copied by ``_wire.gather_prefixes`` when the accelerator is
    built and the masks are prefixes (every unpacked instance's are), else by numpy's boolean
    masks (the reference): the same values either way."""

    # column -> (what counts its entries per instance, the unpacked feature it is gathered from)
    COLUMNS = {"ids": ("length", "input_ids"), "segments": ("length", "segment_ids"),
               "mlm_pos": ("npred", "masked_lm_positions"), "mlm_ids": ("npred", "masked_lm_ids")}

    def __init__(self, paired: bool, capacity_tokens: int = 0) -> None:
        self.paired = paired
        self.columns: Dict[str, np.ndarray] = {
            name: np.empty(capacity_tokens, np.int8 if name == "segments" else np.uint16 if name == "ids" else np.int32)
            for name in self.COLUMNS if paired or name != "segments"
        }
        self.used = {"length": 0, "npred": 0}  # tokens and predictions held
        self.rows: Dict[str, List[np.ndarray]] = {}  # per instance: length, npred (int64), labels (int32)
        self.n = 0

    def add(self, features: Mapping[str, np.ndarray], lo: int, hi: int,
            real: Optional[Tuple[np.ndarray, bool]] = None) -> None:
        """Rows ``lo:hi`` of a batch of unpacked instances (``real``: :func:`row_counts` of their
        input_mask, when the caller has it)."""
        masks = {"length": np.asarray(features["input_mask"][lo:hi]),
                 "npred": np.asarray(features["masked_lm_weights"][lo:hi])}
        counted = {"length": row_counts(masks["length"]) if real is None else real, "npred": row_counts(masks["npred"])}
        for name, (count_key, feature) in self.COLUMNS.items():
            if name in self.columns:
                counts, prefix = counted[count_key]
                at = self.used[count_key]
                self._reserve(name, at + int(counts.sum()))
                self._gather(name, np.asarray(features[feature][lo:hi]), masks[count_key], counts if prefix else None, at)
        for count_key, (counts, _) in counted.items():
            self.used[count_key] += int(counts.sum())
            self.rows.setdefault(count_key, []).append(counts.astype(np.int64))
        if self.paired:
            labels = np.asarray(features["next_sentence_labels"][lo:hi])[:, 0].astype(np.int32)
            self.rows.setdefault("labels", []).append(labels)
        self.n += hi - lo

    def _reserve(self, name: str, size: int) -> None:
        column = self.columns[name]
        if size > len(column):
            grown = np.empty(max(size, 2 * len(column)), column.dtype)
            held = self.used[self.COLUMNS[name][0]]
            grown[:held] = column[:held]
            self.columns[name] = grown

    def _gather(self, name: str, values: np.ndarray, mask: np.ndarray, counts: Optional[np.ndarray], at: int) -> None:
        """The values under each row's mask into the column from ``at``: each row's first
        ``counts`` (None: the mask is not known to be a prefix) by the accelerator, else by
        numpy; ids are widened to int32 when one does not fit 2 bytes (a vocabulary over 65,536)."""
        native = wire()
        width = values.shape[1] if values.ndim == 2 else 0
        if native is not None and counts is not None and width and values.dtype == np.int32:
            values = np.ascontiguousarray(values)
            if native.gather_prefixes(values, width, counts, self.columns[name], at):
                return
            if name == "ids" and self.columns[name].dtype == np.uint16 and native.gather_prefixes(
                    values, width, counts, self._widened(name), at):
                return
        picked = values[mask != 0]  # the reference: every nonzero of the mask, a row's in order
        if name == "ids" and self.columns[name].dtype == np.uint16 and len(picked) and int(picked.max()) >= 1 << 16:
            self._widened(name)
        self.columns[name][at : at + len(picked)] = picked

    def _widened(self, name: str) -> np.ndarray:
        self.columns[name] = self.columns[name].astype(np.int32)
        return self.columns[name]

    def take(self) -> Dict[str, np.ndarray]:
        """The buffer's instances (views of its columns: valid until the next :meth:`add`), and it empties."""
        out = {name: np.concatenate(values) for name, values in self.rows.items()}
        for name, column in self.columns.items():
            out[name] = column[: self.used[self.COLUMNS[name][0]]]
        self.rows, self.n = {}, 0
        self.used = {"length": 0, "npred": 0}
        return out


def row_counts(values: np.ndarray) -> Tuple[np.ndarray, bool]:
    """Each row's nonzero entries (int64: an input_mask's real tokens, masked_lm_weights'
    predictions), and whether they are known to be the row's first entries (by
    ``_wire.prefix_counts``; every unpacked instance's are), so that prefixes can be copied."""
    native = wire()
    if native is not None and values.ndim == 2 and values.dtype in (np.int32, np.float32) and values.shape[1]:
        counts = np.empty(len(values), np.int64)
        if native.prefix_counts(np.ascontiguousarray(values), values.shape[1], counts):
            return counts, True
    return np.count_nonzero(values, axis=1).astype(np.int64), False


def pack_instances(instances: Mapping[str, np.ndarray], params: PackingParams,
                   rng: Optional[np.random.Generator]) -> Dict[str, np.ndarray]:
    """One buffer of compact instances (:class:`InstanceBuffer`) -> packed rows, shuffled by ``rng``
    (None: in the order the packs were opened)."""
    return assemble_packs(instances, *shuffled_packs(instances, params, rng), params)


def shuffled_packs(instances: Mapping[str, np.ndarray], params: PackingParams,
                   rng: Optional[np.random.Generator]) -> Tuple[np.ndarray, np.ndarray]:
    """The packs of a buffer (:func:`best_fill_arrays`) in the order ``rng`` shuffles them (None:
    opened): their members back to back and their depths."""
    members, depths = best_fill_arrays(instances["length"], instances["npred"], params.max_seq_length,
                                       params.prediction_budget, params.max_sequences_per_pack)
    if rng is None:
        return members, depths
    order = rng.permutation(len(depths))
    first = np.cumsum(depths) - depths
    return members[_ramps(first[order], depths[order])], depths[order]


def assemble_rows(instances: Mapping[str, np.ndarray], packs: Sequence[Sequence[int]],
                  params: PackingParams) -> Dict[str, np.ndarray]:
    """The packed rows of ``packs`` (each a list of instance indices, in row order)."""
    members = np.fromiter((i for pack in packs for i in pack), np.int64)
    depths = np.fromiter((len(pack) for pack in packs), np.int64, len(packs))
    return assemble_packs(instances, members, depths, params)


def assemble_packs(instances: Mapping[str, np.ndarray], members: np.ndarray, depths: np.ndarray,
                   params: PackingParams) -> Dict[str, np.ndarray]:
    """The packed rows of packs given as their members back to back and their depths,
    vectorised: the instances are first gathered in row order, so each row's real tokens (and
    predictions, and NSP slots) are one contiguous run that a boolean mask of the row's filled
    prefix places (``_wire.pack_rows`` when the accelerator is built)."""
    members, depths = np.asarray(members, np.int64), np.asarray(depths, np.int64)
    native = _assemble_native(instances, members, depths, params)
    if native is not None:
        return native
    ordered = select_instances(instances, members)
    L, B, K = params.max_seq_length, params.prediction_budget, params.max_sequences_per_pack
    rows = len(depths)
    lengths, npred = ordered["length"], ordered["npred"]
    first = np.cumsum(depths) - depths  # each row's first instance
    slot = np.arange(len(lengths)) - np.repeat(first, depths)  # 0-based index of an instance in its row
    tok_start = np.cumsum(lengths) - lengths
    offset = tok_start - np.repeat(tok_start[first], depths)  # the instance's first token in its row
    fill = np.add.reduceat(lengths, first) if rows else np.zeros(0, np.int64)
    real = np.arange(L) < fill[:, None]
    out: Dict[str, np.ndarray] = {}
    values = {"input_ids": ordered["ids"], "input_mask": np.repeat((slot + 1).astype(np.int32), lengths),
              "positions": _ramps(np.zeros(len(lengths), np.int64), lengths)}
    if params.paired:
        values["segment_ids"] = ordered["segments"]
    for name, value in values.items():
        out[name] = np.zeros((rows, L), np.int32)
        out[name][real] = value
    predicted = np.arange(B) < (np.add.reduceat(npred, first) if rows else np.zeros(0, np.int64))[:, None]
    for name, dtype, value in (("masked_lm_positions", np.int32, ordered["mlm_pos"] + np.repeat(offset, npred)),
                               ("masked_lm_ids", np.int32, ordered["mlm_ids"]),
                               ("masked_lm_weights", np.float32, np.repeat(slot + 1, npred))):
        out[name] = np.zeros((rows, B), dtype)
        out[name][predicted] = value
    if params.paired:
        filled = np.arange(K) < depths[:, None]
        for name, dtype, value in (("next_sentence_positions", np.int32, offset),
                                   ("next_sentence_labels", np.int32, ordered["labels"]),
                                   ("next_sentence_weights", np.float32, 1.0)):
            out[name] = np.zeros((rows, K), dtype)
            out[name][filled] = value
    return out


# --------------------------------------------------------------------------------------------
# A unit's passes
# --------------------------------------------------------------------------------------------


def _assemble_native(instances: Mapping[str, np.ndarray], members: np.ndarray, depths: np.ndarray,
                     params: PackingParams) -> Optional[Dict[str, np.ndarray]]:
    """:func:`assemble_rows` by ``_wire.pack_rows`` (row by row, no gathered copy of the
    instances); None without the accelerator, or when it declines: the numpy path then runs."""
    native = wire()
    ids = instances["ids"]
    if native is None or ids.dtype not in (np.uint16, np.int32):
        return None
    L, B, K = params.max_seq_length, params.prediction_budget, params.max_sequences_per_pack
    rows = len(depths)
    lengths, npred = instances["length"].astype(np.int64), instances["npred"].astype(np.int64)
    out = {name: np.empty((rows, L), np.int32) for name in ("input_ids", "input_mask", "positions")}  # pack_rows
    out["segment_ids"] = np.empty((rows, L), np.int32) if params.paired else None  # writes every entry
    out["masked_lm_positions"] = np.empty((rows, B), np.int32)
    out["masked_lm_ids"] = np.empty((rows, B), np.int32)
    out["masked_lm_weights"] = np.empty((rows, B), np.float32)
    for name, dtype in (("next_sentence_positions", np.int32), ("next_sentence_labels", np.int32),
                        ("next_sentence_weights", np.float32)):
        out[name] = np.empty((rows, K), dtype) if params.paired else None
    paired = params.paired
    done = native.pack_rows(
        L, B, K, np.ascontiguousarray(ids), np.ascontiguousarray(instances["segments"], np.int8) if paired else None,
        np.cumsum(lengths) - lengths, lengths, npred, np.cumsum(npred) - npred,
        np.ascontiguousarray(instances["mlm_pos"], np.int32), np.ascontiguousarray(instances["mlm_ids"], np.int32),
        np.ascontiguousarray(instances["labels"], np.int32) if paired else None, members, depths,
        *(out[name] for name in ("input_ids", "input_mask", "positions", "segment_ids", "masked_lm_positions",
                                 "masked_lm_ids", "masked_lm_weights", "next_sentence_positions",
                                 "next_sentence_labels", "next_sentence_weights")))
    if not done:
        return None
    return {name: value for name, value in out.items() if value is not None}


def select_instances(instances: Mapping[str, np.ndarray], indices: np.ndarray) -> Dict[str, np.ndarray]:
    """The compact instances ``indices`` (in that order) of a buffer (:meth:`InstanceBuffer.take`)."""
    out: Dict[str, np.ndarray] = {}
    for count_key, names in (("length", ("ids", "segments")), ("npred", ("mlm_pos", "mlm_ids"))):
        counts = instances[count_key]
        picked = counts[indices]
        gather = _ramps((np.cumsum(counts) - counts)[indices], picked)
        for name in names:
            if name in instances:
                out[name] = instances[name][gather]
        out[count_key] = picked
    if "labels" in instances:
        out["labels"] = instances["labels"][indices]
    return out


def _ramps(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``start, start + 1, ..., start + length - 1`` for each (start, length), back to back, in
    int32 (a buffer's tokens are far fewer than 2**31): one cumulative sum of steps, the ramp's
    jump written where each run begins."""
    total = int(lengths.sum())
    steps = np.ones(total, np.int32)
    if not total:
        return steps
    runs = lengths > 0
    begins = (np.cumsum(lengths) - lengths)[runs]
    first = starts[runs].astype(np.int64)
    last_end = np.concatenate([[0], (first + lengths[runs])[:-1] - 1])
    steps[begins] = (first - last_end).astype(np.int32)
    return np.cumsum(steps, dtype=np.int32)


class UnitPacker:
    """Packs the instances of all the dupe passes of one unit, buffer by buffer.

    Why the unit and not the pass: the fuller the buffer, the better the rare short instances
    find the rows they complete. On the shared corpus at MSL 128, depth 3, packing each pass
    (about 4,700 instances a buffer) left 1.06% padding, the unit's passes together in buffers of
    up to 2M tokens 0.98% (4M: 0.97%), and one buffer for the whole output 0.92% (the LP optimum
    over every depth-3 pattern is 0.915%).

    Memory: a buffer holds only its instances' real tokens and predictions, and is flushed when
    it reaches :data:`PACK_BUFFER_TOKENS` tokens (at an instance boundary found from the tokens
    alone, so the cut never depends on how the passes were batched); its rows are assembled
    :data:`PACKED_BATCH_ROWS` at a time. A worker's packing memory is bounded by one buffer
    whatever the group or corpus, and buffers depend only on the unit, never on the workers.

    Randomness: each buffer's rows are shuffled by the unit's ``"packing"`` stream (the seed
    :func:`bert_data.group.pass_randomness` derives for the unit's first pass), so rows of every
    packing pattern are mixed in every shard; rows are dealt round-robin from that pass's first
    shard. Nothing else is drawn."""

    def __init__(self, params: PackingParams, packing_seed: int, first_shard: int, num_shards: int,
                 buffer_tokens: Optional[int] = None) -> None:
        self.params = params
        self.rng = np.random.Generator(np.random.PCG64(packing_seed))
        self.first_shard, self.num_shards = first_shard, num_shards
        self.buffer_tokens = buffer_tokens or PACK_BUFFER_TOKENS
        self.buffer = InstanceBuffer(params.paired, self.buffer_tokens + params.max_seq_length)  # at most: see add()
        self.held_tokens = 0
        self.rows = 0  # rows written so far (complete after finish())
        self.real_tokens = 0  # tokens of the packed instances

    def add(self, batches: Iterable[Tuple[Mapping[str, np.ndarray], object]]) -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        """Take a pass's batches of unpacked instances; yield the rows of every buffer they fill."""
        for features, _ in batches:
            count, lo = len(features["input_ids"]), 0
            lengths, prefix = row_counts(np.asarray(features["input_mask"]))
            while lo < count:
                room = self.buffer_tokens - self.held_tokens
                reach = np.cumsum(lengths[lo:])
                hi = lo + int(np.searchsorted(reach, room, side="left")) + 1  # the instance that fills the buffer, included
                hi = min(hi, count)
                self.buffer.add(features, lo, hi, (lengths[lo:hi], prefix))
                self.held_tokens += int(reach[hi - lo - 1])
                lo = hi
                if self.held_tokens >= self.buffer_tokens:
                    yield from self._flush()

    def finish(self) -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        """The rows of what is left in the buffer."""
        if self.buffer.n:
            yield from self._flush()

    def _flush(self) -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        instances = self.buffer.take()
        self.held_tokens = 0
        self.real_tokens += int(instances["length"].sum())
        params = self.params
        members, depths = shuffled_packs(instances, params, self.rng)
        first = np.concatenate([[0], np.cumsum(depths)])  # each row's first member, and the end
        step = packed_batch_rows(params.max_seq_length)
        for lo in range(0, len(depths), step):
            hi = min(lo + step, len(depths))
            rows = assemble_packs(instances, members[first[lo] : first[hi]], depths[lo:hi], params)
            yield rows, shard_of_rows(self.rows, hi - lo, self.first_shard, self.num_shards)
            self.rows += hi - lo

    def count(self, stats: Counter) -> None:
        """Add the unit's row counters (the manifest's ``packing_summary``)."""
        stats["packed_rows"] += self.rows
        stats["packed_real_tokens"] += self.real_tokens


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

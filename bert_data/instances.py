"""Instance stage: a tokenized group -> NSP or SOP sentence pairs, one dupe pass at a time (pure).

This follows google-research/bert ``create_pretraining_data.py`` decision for decision, with
three deliberate differences that users asked for:

* a random B comes from a pool of documents (:class:`Negatives`: in a run, the corpus-wide
  sample of :mod:`bert_data.negatives`, the same whatever the groups, units or workers) and
  never from A's own original document (the reference retries 10 times and may give up, and
  then labels a B of the same document "random"); when no other document exists, the pair is a
  true continuation, or, for a one-sentence chunk, skipped, each counted;
* ``--mask_whole_word`` makes the 80/10/10 choice once per word (the reference draws per piece)
  and never joins a ``##`` piece across ``[SEP]`` (see :mod:`bert_data.masking`);
* work is organised for speed: pairing works on sentence *offsets* into one flat token array
  (so a pathological 10-million-token sentence costs O(1) here), truncation draws how many
  tokens leave each end in closed form (the same distribution as one coin flip per token),
  and masking is vectorised over a whole batch of instances with numpy.

:func:`pair_pass` is the production unit: plan every pair of one pass, shuffle the plan, then
assemble and mask it in bounded batches, each row tagged with its shard. The per-group function
(:mod:`bert_data.group`) feeds those batches to the fragment writer; tests drive it directly.

Randomness comes only from the :class:`PassRandomness` passed in, which the per-group function
derives from (seed, group, pass).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .format.native import wire
from .format.row_runs import MaskRuns
from .masking import MaskingParams, mask_batch
from .tokenization import TokenizedGroup

# Instances of one pass are assembled, masked and serialized in batches of this many rows, so
# the (rows x max_seq_length) temporaries stay bounded however large a group is.
INSTANCE_BATCH_ROWS = 4096


@dataclass(frozen=True)
class InstanceParams:
    """Shape of the sequences: shared by NSP/SOP pairs and MLM-only windows."""

    max_seq_length: int
    short_seq_prob: float
    min_short_seq_length: int
    cls_id: int
    sep_id: int
    sentence_order_prediction: bool = False  # ALBERT SOP pairs instead of NSP (see plan_pairs)
    # the masks' only reader is the TFRecord serializer: they are kept as their runs, never made
    # (format/row_runs.py MaskRuns; build_resources decides)
    masks_as_runs: bool = False

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - 3  # [CLS] A [SEP] B [SEP]


@dataclass
class PassRandomness:
    """Every random choice of one (group, dupe pass): derived by the caller from stable ids."""

    plan_rng: random.Random  # target lengths, split points, random B, truncation (or window lengths)
    mask_rng: np.random.Generator  # instance order and masks
    first_shard: int  # the shard the pass's first instance goes to; the rest follow round-robin
    packing_seed: int = 0  # --packing: of a unit's first pass, the seed of the unit's "packing" stream (packing.UnitPacker)


@dataclass
class InstancePass:
    """One dupe pass of one group, planned: ``n`` instances, produced lazily in batches of
    ``(features, shard of each row)``, rows already in output order."""

    n: int
    unpaired: int  # chunks skipped for want of a partner (NSP: no other document; SOP: one sentence)
    batches: Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]
    spanning_documents: int = 0  # MLM-only: windows that hold a document separator
    random_next: int = 0  # NSP: instances labelled random next (1)
    single_sentence_chunks: int = 0  # NSP: of those, chunks of one sentence (random next whatever the coin)
    continuations_kept: int = 0  # NSP: chunks kept as true continuations because no other document existed


def shard_of_rows(start: int, count: int, first_shard: int, num_shards: int) -> np.ndarray:
    """Round-robin shards of rows ``start .. start + count - 1`` of a pass."""
    return (np.arange(start, start + count) + first_shard) % num_shards


@dataclass
class Negatives:
    """Where the random B segments of a unit come from: documents given by their sentences'
    token offsets (document ``r`` owns sentences ``doc_starts[r]`` to ``doc_starts[r + 1] - 1``,
    sentence ``s`` is ``offsets[s] .. offsets[s + 1]``), their tokens at ``base + offset`` in the
    pass's token space (``ids``: their token array, placed after the unit's; None: the unit's own
    tokens, ``base`` 0), and for unit document ``d`` the documents it must not use, ascending
    (``excluded(d)``: its own original document). :func:`unit_negatives` is the unit itself;
    a run's is :meth:`bert_data.negatives.NegativePool.negatives`."""

    offsets: List[int]
    doc_starts: Sequence[int]
    base: int
    ids: Optional[np.ndarray]
    excluded: Callable[[int], Sequence[int]]
    _tokens: Optional[np.ndarray] = field(default=None, repr=False)
    _native: Optional[Tuple[int, Optional[tuple]]] = field(default=None, repr=False)

    @property
    def n_docs(self) -> int:
        return len(self.doc_starts) - 1

    def tokens(self, unit_ids: np.ndarray) -> np.ndarray:
        """The pass's token space: the unit's tokens, then the negatives' (joined once per unit,
        so that assembling a batch is one lookup; the copy is the unit plus the pool)."""
        if self.ids is None:
            return unit_ids
        if self._tokens is None:
            self._tokens = np.concatenate([unit_ids, self.ids])
        return self._tokens

    def native_arrays(self, n_unit_docs: int) -> Optional[tuple]:
        """The C planner's view of these negatives for a unit of ``n_unit_docs`` documents (made
        once per unit, kept for its passes): ``(offsets, doc_starts, base, excl_starts, excl)``,
        int64 arrays, unit document ``d`` barred from ``excl[excl_starts[d]:excl_starts[d + 1]]``;
        None when they are not integers that fit (Python's planner then runs)."""
        if self._native is None or self._native[0] != n_unit_docs:
            self._native = (n_unit_docs, _int64_negatives(self, n_unit_docs))
        return self._native[1]


def _int64_negatives(negatives: Negatives, n_unit_docs: int) -> Optional[tuple]:
    excluded = [negatives.excluded(d) for d in range(n_unit_docs)]
    flat = [value for values in excluded for value in values]
    if not all(isinstance(value, (int, np.integer)) for value in flat):
        return None
    starts = np.zeros(n_unit_docs + 1, dtype=np.int64)
    np.cumsum([len(values) for values in excluded], out=starts[1:])
    try:
        return (_int64(negatives.offsets), _int64(negatives.doc_starts), int(negatives.base), starts,
                np.asarray(flat, dtype=np.int64))
    except (OverflowError, TypeError, ValueError):
        return None


def _int64(values: Sequence[int]) -> np.ndarray:
    """``values`` as a C-contiguous int64 array (no copy when they are one); TypeError for values
    that are not integers (numpy would truncate floats)."""
    array = np.asarray(values)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError("not integers")
    return np.ascontiguousarray(array, dtype=np.int64)


def unit_negatives(group: TokenizedGroup, offsets: Optional[List[int]] = None) -> Negatives:
    """The unit's other documents as its negatives (a library caller's default, without a pool)."""
    return Negatives(offsets if offsets is not None else group.sent_offsets.tolist(), group.doc_starts, 0, None,
                     lambda d: (d,))


@dataclass
class PairPlan:
    """Token ranges (into ``TokenizedGroup.ids``) of segments A and B of each instance: int64
    arrays once planned (:func:`plan_pairs`), so that taking a batch of rows is one numpy index;
    lists while a plan is built by :meth:`add`."""

    a_lo: Sequence[int] = field(default_factory=list)
    a_hi: Sequence[int] = field(default_factory=list)
    b_lo: Sequence[int] = field(default_factory=list)
    b_hi: Sequence[int] = field(default_factory=list)
    is_random_next: Sequence[int] = field(default_factory=list)
    negatives_unavailable: int = 0  # one-sentence chunks dropped: no other document for a random B
    random_next: int = 0  # pairs labelled random next
    single_sentence_chunks: int = 0  # of those, one-sentence chunks (random next whatever the coin)
    continuations_kept: int = 0  # chunks due a random B kept as true continuations: no other document

    def __len__(self) -> int:
        return len(self.a_lo)

    def take(self, rows: Sequence[int]) -> "PairPlan":
        """The plan restricted to ``rows``, in that order (int64 arrays)."""
        index = np.asarray(rows, dtype=np.intp)
        return PairPlan(*(np.asarray(values, dtype=np.int64)[index] for values in self._ranges()))

    def frozen(self) -> "PairPlan":
        """The same plan with int64 arrays (what :func:`plan_pairs` returns)."""
        return PairPlan(*(np.asarray(values, dtype=np.int64) for values in self._ranges()), self.negatives_unavailable,
                        self.random_next, self.single_sentence_chunks, self.continuations_kept)

    def _ranges(self) -> Tuple[Sequence[int], ...]:
        return self.a_lo, self.a_hi, self.b_lo, self.b_hi, self.is_random_next

    def add(self, a_lo: int, a_hi: int, b_lo: int, b_hi: int, label: int) -> None:
        self.a_lo.append(a_lo)
        self.a_hi.append(a_hi)
        self.b_lo.append(b_lo)
        self.b_hi.append(b_hi)
        self.is_random_next.append(label)


def _popcount(value: int) -> int:
    return bin(value).count("1")


def truncate_pair(a_lo: int, a_hi: int, b_lo: int, b_hi: int, max_num_tokens: int, rng: random.Random):
    """The reference ``truncate_seq_pair`` in closed form.

    The reference removes one token at a time from the longer segment (B on ties), from the
    front or back with probability 1/2 each. The longer segment is truncated until it ties,
    then the two alternate; over k removals from one segment, the number taken from the front
    is Binomial(k, 1/2), drawn here as the popcount of k random bits.
    """
    while True:
        len_a = a_hi - a_lo
        len_b = b_hi - b_lo
        excess = len_a + len_b - max_num_tokens
        if excess <= 0:
            return a_lo, a_hi, b_lo, b_hi
        if len_a == len_b:
            from_b, from_a = (excess + 1) // 2, excess // 2
        elif len_a > len_b:
            from_a, from_b = min(excess, len_a - len_b), 0
        else:
            from_a, from_b = 0, min(excess, len_b - len_a)
        if from_a:
            front = _popcount(rng.getrandbits(from_a))
            a_lo += front
            a_hi -= from_a - front
        if from_b:
            front = _popcount(rng.getrandbits(from_b))
            b_lo += front
            b_hi -= from_b - front


@dataclass
class _PassPlanner:
    """The state one pass of planning shares across documents (BERT passes it as 8 arguments)."""

    group: TokenizedGroup
    params: InstanceParams
    rng: random.Random
    negatives: Optional[Negatives] = None  # None: the unit's other documents
    plan: PairPlan = field(default_factory=PairPlan)

    def __post_init__(self) -> None:
        self.off: List[int] = self.group.sent_offsets.tolist()
        self.n_docs = self.group.n_docs
        self.max_num_tokens = self.params.max_num_tokens
        if self.negatives is None:
            self.negatives = unit_negatives(self.group, self.off)

    def target_seq_length(self) -> int:
        """Per document and pass: usually the maximum, with ``short_seq_prob`` a random shorter one."""
        if self.rng.random() < self.params.short_seq_prob:
            return self.rng.randint(self.params.min_short_seq_length, self.max_num_tokens)
        return self.max_num_tokens

    def nsp_document(self, d: int) -> None:
        """BERT's ``create_instances_from_document`` on sentence offsets (see the module docstring)."""
        off, rng, plan = self.off, self.rng, self.plan
        doc_starts = self.group.doc_starts
        s_begin, s_end = doc_starts[d], doc_starts[d + 1]
        target_seq_length = self.target_seq_length()
        chunk_start = s_begin
        current_length = 0
        i = s_begin
        while i < s_end:
            current_length += off[i + 1] - off[i]
            if i == s_end - 1 or current_length >= target_seq_length:
                n_chunk = i + 1 - chunk_start
                a_end = 1 if n_chunk < 2 else rng.randint(1, n_chunk - 1)
                a_lo, a_hi = off[chunk_start], off[chunk_start + a_end]
                want_random = n_chunk == 1 or rng.random() < 0.5
                excluded = self.negatives.excluded(d) if want_random else ()
                if want_random and self.negatives.n_docs - len(excluded) < 1:
                    if n_chunk == 1:
                        plan.negatives_unavailable += 1
                        chunk_start, current_length = i + 1, 0
                        i += 1
                        continue
                    want_random = False  # no other document: keep the true continuation
                    plan.continuations_kept += 1
                if want_random:
                    b_lo, b_hi = self._random_segment(excluded, target_seq_length - (a_hi - a_lo))
                    i -= n_chunk - a_end  # put the unused sentences back
                    is_random = 1
                    plan.random_next += 1
                    plan.single_sentence_chunks += n_chunk == 1
                else:
                    b_lo, b_hi = a_hi, off[i + 1]
                    is_random = 0
                plan.add(*truncate_pair(a_lo, a_hi, b_lo, b_hi, self.max_num_tokens, rng), is_random)
                chunk_start, current_length = i + 1, 0
            i += 1

    def _random_segment(self, excluded: Sequence[int], target_b_length: int) -> Tuple[int, int]:
        """A random B: whole sentences from a random document of the negatives other than
        ``excluded`` (A's own), reaching the target length. Draws: the document (uniform over the
        allowed ones), then the sentence it starts at (uniform over the document's)."""
        negatives, rng = self.negatives, self.rng
        off, doc_starts = negatives.offsets, negatives.doc_starts
        r = rng.randint(0, negatives.n_docs - len(excluded) - 1)
        for skipped in excluded:  # the r-th allowed document
            if r < skipped:
                break
            r += 1
        r_begin, r_end = doc_starts[r], doc_starts[r + 1]
        start = rng.randint(r_begin, r_end - 1)
        b_lo = off[start]
        # smallest sentence end reaching target_b_length (at least one sentence)
        stop = bisect_left(off, b_lo + target_b_length, start + 1, r_end + 1)
        return negatives.base + b_lo, negatives.base + off[min(stop, r_end)]

    def sop_document(self, d: int) -> None:
        """ALBERT ``create_instances_from_document`` with ``random_next_sentence=False``.

        Same chunking as NSP (target length with ``short_seq_prob``, chunks of whole sentences);
        A is the chunk's first ``a_end`` sentences (``a_end`` uniform in [1, n - 1]) and B the
        rest, B being A's true continuation. With probability 0.5 they are swapped and the label
        (``is_random_next``, written as ``next_sentence_labels``) is 1; otherwise it is 0. Then
        the pair is truncated like NSP pairs. Random draws in ALBERT's order: ``a_end``, the
        swap coin, the truncation.

        One deliberate difference: for a chunk of a single sentence ALBERT takes B from a
        *random other document* and labels it 1, so that label then means "random", not
        "swapped" (an NSP leak into SOP). Here B never comes from another document and no
        sentence is split: such chunks are skipped and counted in ``plan.negatives_unavailable``
        (reported as ``sop_single_segment_chunks``).
        """
        off, rng, plan = self.off, self.rng, self.plan
        s_begin, s_end = self.group.doc_starts[d], self.group.doc_starts[d + 1]
        target_seq_length = self.target_seq_length()
        chunk_start = s_begin
        current_length = 0
        for i in range(s_begin, s_end):
            current_length += off[i + 1] - off[i]
            if i == s_end - 1 or current_length >= target_seq_length:
                n_chunk = i + 1 - chunk_start
                if n_chunk < 2:
                    plan.negatives_unavailable += 1
                else:
                    a_end = rng.randint(1, n_chunk - 1)
                    first_lo, first_hi = off[chunk_start], off[chunk_start + a_end]
                    second_lo, second_hi = first_hi, off[i + 1]
                    if rng.random() < 0.5:
                        a_lo, a_hi, b_lo, b_hi, label = second_lo, second_hi, first_lo, first_hi, 1
                    else:
                        a_lo, a_hi, b_lo, b_hi, label = first_lo, first_hi, second_lo, second_hi, 0
                    plan.add(*truncate_pair(a_lo, a_hi, b_lo, b_hi, self.max_num_tokens, rng), label)
                chunk_start, current_length = i + 1, 0


def plan_pairs(
    group: TokenizedGroup, params: InstanceParams, rng: random.Random, sentence_order_prediction: Optional[bool] = None,
    negatives: Optional[Negatives] = None,
) -> PairPlan:
    """One dupe pass over every document of the group: choose A/B segments and NSP labels.

    With ``sentence_order_prediction`` (default: ``params.sentence_order_prediction``) the
    labels are ALBERT's sentence-order labels instead (see :meth:`_PassPlanner.sop_document`).
    NSP's random B segments come from ``negatives`` (default: the group's other documents).
    """
    if sentence_order_prediction is None:
        sentence_order_prediction = params.sentence_order_prediction
    plan = _plan_native(group, params, rng, sentence_order_prediction, negatives)
    if plan is not None:
        return plan
    planner = _PassPlanner(group, params, rng, negatives)
    plan_document = planner.sop_document if sentence_order_prediction else planner.nsp_document
    for d in range(group.n_docs):
        plan_document(d)
    return planner.plan.frozen()


def _plan_native(group: TokenizedGroup, params: InstanceParams, rng: random.Random, sentence_order_prediction: bool,
                 negatives: Optional[Negatives]) -> Optional[PairPlan]:
    """:func:`plan_pairs` by ``_wire.plan_pairs``: the same pairs, counters and draws, on the
    state of ``rng`` (CPython's Mersenne Twister in C), which is left where Python's planner
    would leave it. None without the accelerator, for an ``rng`` that is not exactly
    ``random.Random``, or for inputs it refuses (Python's planner then says what is wrong)."""
    native = wire()
    if (native is None or type(rng) is not random.Random or params.max_num_tokens < 1
            or not isinstance(params.min_short_seq_length, (int, np.integer))
            or not isinstance(params.short_seq_prob, (int, float, np.integer, np.floating))):
        return None
    try:
        off, doc_starts = _int64(group.sent_offsets), _int64(group.doc_starts)
    except (OverflowError, TypeError, ValueError):
        return None
    if negatives is None or sentence_order_prediction:  # the unit's other documents (SOP draws none)
        n = len(doc_starts) - 1
        pool = (off, doc_starts, 0, np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64))
    else:
        pool = negatives.native_arrays(len(doc_starts) - 1)
        if pool is None:
            return None
    version, state, gauss_next = rng.getstate()
    if version != 3 or len(state) != 625:  # not the state layout of CPython 3.x's Mersenne Twister
        return None
    out = [np.empty(max(len(off) - 1, 0), dtype=np.int64) for _ in range(5)]  # a pair takes a sentence at least
    try:
        result = native.plan_pairs(state, sentence_order_prediction, params.max_num_tokens, params.short_seq_prob,
                                   params.min_short_seq_length, off, doc_starts, *pool, *out)
    except OverflowError:  # a setting beyond int64: Python's planner
        return None
    if result is None:
        return None
    state, n, unavailable, random_next, single_sentence_chunks, continuations_kept = result
    rng.setstate((version, state, gauss_next))
    return PairPlan(*(values[:n] for values in out), unavailable, random_next, single_sentence_chunks,
                    continuations_kept)


def assemble(ids: np.ndarray, plan: PairPlan, params: InstanceParams) -> Dict[str, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` + padding for every planned pair, as (n, L) arrays, plus the
    masking inputs ``candidates`` (the tokens of A and B) and ``real_length``. ``ids`` is the
    pass's token space (:meth:`Negatives.tokens`: the unit's, then the negatives'). One C loop
    per row with the accelerator (:func:`_assemble_native`), else the numpy below: the same arrays."""
    n = len(plan)
    length = params.max_seq_length
    arrays = _assemble_native(ids, plan, params)
    if arrays is not None:
        return arrays
    a_lo = np.asarray(plan.a_lo, dtype=np.int64)[:, None]
    len_a = np.asarray(plan.a_hi, dtype=np.int64)[:, None] - a_lo
    b_lo = np.asarray(plan.b_lo, dtype=np.int64)[:, None]
    len_b = np.asarray(plan.b_hi, dtype=np.int64)[:, None] - b_lo
    j = np.arange(length, dtype=np.int64)[None, :]
    in_a = (j >= 1) & (j <= len_a)
    in_b = (j >= len_a + 2) & (j <= len_a + len_b + 1)
    source = np.where(j <= len_a, a_lo + j - 1, b_lo + j - len_a - 2)
    source = np.where(in_a | in_b, source, 0)
    input_ids = np.where(in_a | in_b, ids[source] if len(ids) else 0, 0).astype(np.int32)
    input_ids[:, 0] = params.cls_id
    rows = np.arange(n)
    input_ids[rows, (len_a + 1)[:, 0]] = params.sep_id
    input_ids[rows, (len_a + len_b + 2)[:, 0]] = params.sep_id
    real_length = len_a + len_b + 3
    input_mask = (j < real_length).astype(np.int32)
    segment_ids = ((j >= len_a + 2) & (j < real_length)).astype(np.int32)
    return {
        "input_ids": input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "candidates": in_a | in_b,
        "real_length": real_length[:, 0],
        "next_sentence_labels": np.asarray(plan.is_random_next, dtype=np.int32)[:, None],
    }


def _assemble_native(ids: np.ndarray, plan: PairPlan, params: InstanceParams) -> Optional[Dict[str, np.ndarray]]:
    """:func:`assemble` by ``_wire.assemble_pairs``; None without the accelerator, for a token
    space that is not int32, or for a plan it refuses (numpy then says what is wrong)."""
    native = wire()
    if native is None or ids.dtype != np.int32 or params.max_seq_length < 3:
        return None
    n, length = len(plan), params.max_seq_length
    made = ("input_ids",) if params.masks_as_runs else ("input_ids", "input_mask", "segment_ids")
    rows = {name: np.empty((n, length), np.int32) for name in made}
    candidates, real_length = np.empty((n, length), np.bool_), np.empty(n, np.int64)
    bounds = [np.asarray(values, dtype=np.int64) for values in (plan.a_lo, plan.a_hi, plan.b_lo, plan.b_hi)]
    if not native.assemble_pairs(n, length, np.ascontiguousarray(ids), *bounds, params.cls_id, params.sep_id,
                                 rows["input_ids"], rows.get("input_mask"), rows.get("segment_ids"), candidates,
                                 real_length):
        return None
    if params.masks_as_runs:  # not made: their runs only (the TFRecord serializer writes them from those)
        rows["input_mask"] = MaskRuns(0, real_length, length)
        rows["segment_ids"] = MaskRuns(bounds[1] - bounds[0] + 2, real_length, length)  # B and its [SEP]
    return {**rows, "candidates": candidates, "real_length": real_length,
            "next_sentence_labels": np.asarray(plan.is_random_next, dtype=np.int32)[:, None]}


def pair_pass(
    group: TokenizedGroup,
    params: InstanceParams,
    masking: MaskingParams,
    randomness: PassRandomness,
    num_shards: int,
    is_continuation: Optional[np.ndarray] = None,
    batch_rows: int = INSTANCE_BATCH_ROWS,
    negatives: Optional[Negatives] = None,
) -> InstancePass:
    """One NSP/SOP dupe pass of a group: plan every pair, shuffle the plan, then assemble and
    mask it lazily in batches of ``batch_rows`` (memory stays bounded however large the group).

    Random draws, in order: the plan (``plan_rng``: per document its target length, then per
    chunk A's end, the coin, for a random B its document and first sentence, the truncation);
    the instance order, then each batch's masks (``mask_rng``). ``is_continuation`` is the
    vocabulary's ``##`` table (whole-word masking); ``negatives`` where random B segments come
    from (default: the group's other documents).
    """
    plan = plan_pairs(group, params, randomness.plan_rng, negatives=negatives)
    tokens = negatives.tokens(group.ids) if negatives is not None else group.ids
    n = len(plan)
    order = randomness.mask_rng.permutation(n)  # the pass's instance order, before any is built

    def batches() -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        for start in range(0, n, batch_rows):
            rows = order[start : start + batch_rows]
            arrays = assemble(tokens, plan.take(rows), params)
            features = mask_batch(arrays, masking, randomness.mask_rng, is_continuation, owns_input_ids=True)
            yield features, shard_of_rows(start, len(rows), randomness.first_shard, num_shards)

    return InstancePass(n=n, unpaired=plan.negatives_unavailable, batches=batches(), random_next=plan.random_next,
                        single_sentence_chunks=plan.single_sentence_chunks, continuations_kept=plan.continuations_kept)

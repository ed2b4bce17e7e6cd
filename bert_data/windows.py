"""MLM-only instances: fixed windows over a group's token stream (pure, no I/O).

The Cerebras Model Zoo ``create_tfrecords_mlm_only.py`` algorithm, on the same flat
:class:`~bert_data.tokenization.TokenizedGroup` the NSP path uses (tokenized once per group;
every dupe pass only re-plans windows and re-masks):

* the **stream** is the group's documents in order. With ``allow_cross_document_examples``
  (the default) it is one sequence, ``doc0 SEP doc1 SEP ... docN`` where ``SEP`` is the id of
  ``--document_separator_token`` (between documents only, never first or last); without it
  every document is its own stream. Streams never span groups: the last window of a group
  (or of a document, without cross-document examples) is shorter and padded;
* a window holds up to ``max_seq_length - 2`` stream tokens, written ``[CLS] window [SEP]``.
  The next window starts ``overlap_size`` tokens before the previous one ended. With
  ``short_seq_prob`` a window's target length is drawn from
  ``[max(min_short_seq_length, overlap_size + 1), max_seq_length - 2]`` (so every window
  advances). After the last full window, the rest of the stream is one more window only if
  it holds a token not already in the previous window (the Model Zoo emits an empty or
  all-overlap window there);
* masking is the NSP path's :func:`~bert_data.masking.mask_batch` (80/10/10, whole-word
  option); ``[CLS]``, ``[SEP]`` and the separator are never candidates, and a ``##`` piece
  never joins a word across the separator.

:func:`window_pass` is the production unit (one dupe pass: plan, then assemble, mask and
shuffle in batches of at most ``--buffer_size`` tokens). Randomness comes only from the
:class:`~bert_data.instances.PassRandomness` passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from .format.native import wire
from .format.row_runs import MaskRuns
from .instances import InstanceParams, InstancePass, PassRandomness, shard_of_rows
from .masking import MaskingParams, mask_batch
from .tokenization import TokenizedGroup


def build_streams(group: TokenizedGroup, separator_id: Optional[int]) -> "WindowStreams":
    """The token stream(s) of a group; stream ``s`` is ``tokens[bounds[s]:bounds[s + 1]]``.

    With a ``separator_id`` (``--allow_cross_document_examples``) one stream of every document
    joined by separators; with None one stream per document (``tokens`` is then ``group.ids``)."""
    doc_token_starts = group.sent_offsets[np.asarray(group.doc_starts, dtype=np.int64)]
    if separator_id is None:
        return WindowStreams(group.ids, [int(x) for x in doc_token_starts], None)
    if group.n_docs == 0:
        return WindowStreams(group.ids[:0], [0, 0], separator_id)
    # insert one separator before the first token of every document but the first
    positions = doc_token_starts[1:-1]
    tokens = np.insert(group.ids, positions, np.int32(separator_id)).astype(np.int32, copy=False)
    return WindowStreams(tokens, [0, len(tokens)], separator_id)


def plan_windows(
    length: int,
    max_num_tokens: int,
    overlap_size: int,
    short_seq_prob: float,
    min_short_seq_length: int,
    rng: random.Random,
) -> Tuple[List[int], List[int]]:
    """``(starts, lengths)`` of the windows over one stream of ``length`` tokens.

    Consecutive windows share exactly ``overlap_size`` tokens; together they cover the stream
    in order. ``rng`` is used only when ``short_seq_prob > 0`` (one draw per window).
    """
    if length <= 0:
        return [], []
    lowest_short = min(max(min_short_seq_length, overlap_size + 1), max_num_tokens)
    starts: List[int] = []
    lengths: List[int] = []
    start = 0
    if short_seq_prob <= 0:
        stride = max_num_tokens - overlap_size
        if length >= max_num_tokens:
            n_full = (length - max_num_tokens) // stride + 1
            starts = list(range(0, n_full * stride, stride))
            lengths = [max_num_tokens] * n_full
            start = n_full * stride
    else:
        while True:
            target = max_num_tokens
            if rng.random() < short_seq_prob:
                target = rng.randint(lowest_short, max_num_tokens)
            if start + target > length:
                break
            starts.append(start)
            lengths.append(target)
            start += target - overlap_size
    # the rest, only if it holds a token not in the previous window
    if not starts or length > start + overlap_size:
        if start < length:
            starts.append(start)
            lengths.append(length - start)
    return starts, lengths


def plan_group_windows(
    bounds: List[int],
    params: InstanceParams,
    overlap_size: int,
    rng: random.Random,
) -> Tuple[np.ndarray, np.ndarray]:
    """Windows over every stream of a group, streams in order: ``(starts, lengths)`` (int64)
    with ``starts`` indexing the group's token array from :func:`build_streams`."""
    all_starts: List[int] = []
    all_lengths: List[int] = []
    max_num_tokens = params.max_seq_length - 2
    for s in range(len(bounds) - 1):
        lo, hi = bounds[s], bounds[s + 1]
        starts, lengths = plan_windows(
            hi - lo, max_num_tokens, overlap_size, params.short_seq_prob, params.min_short_seq_length, rng
        )
        all_starts.extend(lo + x for x in starts)
        all_lengths.extend(lengths)
    return np.asarray(all_starts, dtype=np.int64), np.asarray(all_lengths, dtype=np.int64)


def assemble_windows(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    params: InstanceParams,
    separator_id: Optional[int],
) -> Dict[str, np.ndarray]:
    """``[CLS] window [SEP]`` + padding for every window, as (n, L) arrays, plus the masking
    inputs ``candidates`` (window tokens other than the separator) and ``real_length``. One C
    loop per row with the accelerator (:func:`_assemble_native`), else the numpy below: the same
    arrays."""
    n = len(starts)
    length = params.max_seq_length
    arrays = _assemble_native(tokens, starts, lengths, params, separator_id)
    if arrays is not None:
        return arrays
    j = np.arange(length, dtype=np.int64)[None, :]
    lo = starts.astype(np.int64)[:, None]
    span = lengths.astype(np.int64)[:, None]
    inside = (j >= 1) & (j <= span)
    source = np.where(inside, lo + j - 1, 0)
    input_ids = np.where(inside, tokens[source] if len(tokens) else 0, 0).astype(np.int32)
    input_ids[:, 0] = params.cls_id
    input_ids[np.arange(n), span[:, 0] + 1] = params.sep_id
    real_length = span + 2
    input_mask = (j < real_length).astype(np.int32)
    candidates = inside & (input_ids != params.cls_id) & (input_ids != params.sep_id)
    if separator_id is not None:
        candidates &= input_ids != separator_id
    return {
        "input_ids": input_ids,
        "input_mask": input_mask,
        "candidates": candidates,
        "real_length": real_length[:, 0],
    }


def _assemble_native(
    tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray, params: InstanceParams, separator_id: Optional[int]
) -> Optional[Dict[str, np.ndarray]]:
    """:func:`assemble_windows` by ``_wire.assemble_windows``; None without the accelerator, for
    tokens that are not int32, or for windows it refuses (numpy then says what is wrong)."""
    native = wire()
    if native is None or tokens.dtype != np.int32 or params.max_seq_length < 2:
        return None
    n, length = len(starts), params.max_seq_length
    input_ids = np.empty((n, length), np.int32)
    input_mask = None if params.masks_as_runs else np.empty((n, length), np.int32)
    candidates, real_length = np.empty((n, length), np.bool_), np.empty(n, np.int64)
    if not native.assemble_windows(
        n, length, np.ascontiguousarray(tokens), np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        params.cls_id, params.sep_id, separator_id if separator_id is not None else 0, separator_id is not None,
        input_ids, input_mask, candidates, real_length,
    ):
        return None
    if input_mask is None:  # not made: its runs only (the TFRecord serializer writes it from those)
        input_mask = MaskRuns(0, real_length, length)
    return {"input_ids": input_ids, "input_mask": input_mask, "candidates": candidates, "real_length": real_length}


@dataclass(frozen=True)
class WindowStreams:
    """A group's token stream(s) (see :func:`build_streams`) and the separator between documents
    (None: windows never span documents, so no separator is ever inside one)."""

    tokens: np.ndarray
    bounds: List[int]
    separator_id: Optional[int]


@dataclass(frozen=True)
class WindowOptions:
    overlap_size: int  # tokens shared by consecutive windows
    rows_per_batch: int  # windows assembled, masked and shuffled at once (--buffer_size // max_seq_length)


def window_pass(
    streams: WindowStreams,
    params: InstanceParams,
    options: WindowOptions,
    masking: Optional[MaskingParams],
    randomness: PassRandomness,
    num_shards: int,
    is_continuation: Optional[np.ndarray] = None,
) -> InstancePass:
    """One MLM-only dupe pass: plan the windows over every stream, then lazily assemble, mask
    (unless ``masking`` is None: ``--disable_masking``) and shuffle them batch by batch.

    Random draws, in order: the window lengths (``plan_rng``); per batch, the masks, then the
    order of the batch's rows (``mask_rng``)."""
    starts, lengths = plan_group_windows(streams.bounds, params, options.overlap_size, randomness.plan_rng)
    spanning = 0
    if streams.separator_id is not None and len(starts):
        spanning = _windows_with_separator(streams.tokens, starts, lengths, streams.separator_id)

    def batches() -> Iterator[Tuple[Dict[str, np.ndarray], np.ndarray]]:
        written = 0
        for lo in range(0, len(starts), options.rows_per_batch):
            hi = lo + options.rows_per_batch
            arrays = assemble_windows(streams.tokens, starts[lo:hi], lengths[lo:hi], params, streams.separator_id)
            if masking is not None:
                features = mask_batch(arrays, masking, randomness.mask_rng, is_continuation, owns_input_ids=True)
            else:
                features = {"input_ids": arrays["input_ids"], "input_mask": arrays["input_mask"]}
            n = len(features["input_ids"])
            order = randomness.mask_rng.permutation(n)
            features = {name: value[order] for name, value in features.items()}
            yield features, shard_of_rows(written, n, randomness.first_shard, num_shards)
            written += n

    return InstancePass(n=len(starts), unpaired=0, batches=batches(), spanning_documents=spanning)


def _windows_with_separator(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray, separator_id: int) -> int:
    is_separator = np.concatenate([[0], np.cumsum(tokens == separator_id)])
    return int(np.count_nonzero(is_separator[starts + lengths] - is_separator[starts]))

"""MLM-only windows (pure, no files, no TensorFlow): planning, streams and the production pass
function :func:`bert_data.windows.window_pass`, exactly as the per-group function calls it."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bert_data.instances import InstanceParams, PassRandomness
from bert_data.masking import MaskingParams
from bert_data.windows import WindowOptions, build_streams, plan_windows, window_pass
from conftest import collect_pass
from conftest import make_group as build_group

CLS, SEP = 2, 3
MLM_KEYS = {"input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions", "masked_lm_weights"}


@settings(max_examples=150, deadline=None)
@given(
    length=st.integers(0, 300),
    max_num_tokens=st.integers(1, 40),
    overlap_frac=st.floats(0, 0.99),
    short=st.sampled_from([0.0, 0.3, 1.0]),
    min_short=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_plan_windows_invariants(length, max_num_tokens, overlap_frac, short, min_short, seed):
    overlap = int(overlap_frac * max_num_tokens)
    if overlap >= max_num_tokens:
        overlap = max_num_tokens - 1
    starts, lengths = plan_windows(length, max_num_tokens, overlap, short, min(min_short, max_num_tokens), random.Random(seed))
    if length == 0:
        assert starts == []
        return
    assert starts[0] == 0 and starts[-1] + lengths[-1] == length
    assert all(1 <= n <= max_num_tokens for n in lengths)
    for a, la, b in zip(starts, lengths, starts[1:]):
        assert b == a + la - overlap
    if len(starts) > 1:
        assert lengths[-1] > overlap  # never a window of old tokens only


def test_build_streams_separator_placement():
    group = build_group([[np.array([10, 11]), np.array([12])], [np.array([20])], [np.array([30, 31])]])
    streams = build_streams(group, 99)
    assert streams.tokens.tolist() == [10, 11, 12, 99, 20, 99, 30, 31] and streams.bounds == [0, 8]
    streams = build_streams(group, None)
    assert streams.tokens.tolist() == [10, 11, 12, 20, 30, 31] and streams.bounds == [0, 3, 4, 6]


@settings(max_examples=120, deadline=None)
@given(
    doc_lengths=st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=5), min_size=1, max_size=5),
    seq=st.integers(6, 40),
    overlap_frac=st.floats(0, 0.9),
    short=st.sampled_from([0.0, 0.3]),
    cross=st.booleans(),
    masked=st.booleans(),
    rows_per_batch=st.integers(1, 7),
    num_shards=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_window_pass_invariants(doc_lengths, seq, overlap_frac, short, cross, masked, rows_per_batch, num_shards, seed):
    """The production MLM-only pass (``window_pass``, as the per-group function calls it): every
    window is ``[CLS] stream slice [SEP]`` + padding; masks only on window tokens, never on the
    separator; rows go round-robin over the shards; unmasked windows carry no mask features."""
    sep_doc = 9  # below every document token id (they start at 10)
    next_id = 10
    docs = []
    for lengths in doc_lengths:
        docs.append([np.arange(next_id + sum(lengths[:i]), next_id + sum(lengths[: i + 1])) for i in range(len(lengths))])
        next_id += sum(lengths)
    group = build_group(docs)
    streams = build_streams(group, sep_doc if cross else None)
    overlap = min(int(overlap_frac * (seq - 2)), seq - 3)
    params = InstanceParams(seq, short, 2, CLS, SEP)
    masking = MaskingParams(0.15, min(5, seq - 1), False, 5000, 4) if masked else None
    randomness = PassRandomness(random.Random(seed), np.random.Generator(np.random.PCG64(seed)), seed % num_shards)
    planned = window_pass(streams, params, WindowOptions(overlap, rows_per_batch), masking, randomness, num_shards)
    features, shards = collect_pass(planned)
    assert planned.n == (len(features["input_ids"]) if features else 0)
    if not planned.n:
        return
    assert set(features) == (MLM_KEYS if masked else {"input_ids", "input_mask"})
    assert shards.tolist() == [(r + seed % num_shards) % num_shards for r in range(planned.n)]
    spanning = 0
    for r in range(planned.n):
        ids, real = features["input_ids"][r].copy(), int(features["input_mask"][r].sum())
        assert features["input_mask"][r].tolist() == [1] * real + [0] * (seq - real)
        if masked:
            k = int(features["masked_lm_weights"][r].sum())
            positions = features["masked_lm_positions"][r][:k]
            assert all(1 <= p < real - 1 for p in positions), "never [CLS], the last [SEP] or padding"
            ids[positions] = features["masked_lm_ids"][r][:k]
            assert sep_doc not in features["masked_lm_ids"][r][:k].tolist(), "the separator is never masked"
        assert ids[0] == CLS and ids[real - 1] == SEP and not ids[real:].any()
        body = ids[1 : real - 1]
        starts = np.flatnonzero(streams.tokens == body[0]) if len(body) else []
        assert any(
            np.array_equal(streams.tokens[s : s + len(body)], body) for s in starts
        ), "the window is a contiguous slice of the stream"
        spanning += sep_doc in body.tolist()
    assert planned.spanning_documents == (spanning if cross else 0)

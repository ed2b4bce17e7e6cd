"""Instance stage (pure, no files): pairing, truncation, assembly and masking invariants.

The property tests drive the production pass function, :func:`bert_data.instances.pair_pass`
(plan, shuffle, batched assemble + mask, shard of each row), exactly as the per-group function
calls it; batch sizes are drawn too, so batching is covered.

The reference is google-research/bert ``create_pretraining_data.py``; the deliberate
differences (no same-document "random" B, whole-word 80/10/10 per word) are tested as such.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.instances import InstanceParams, PassRandomness, assemble, pair_pass, plan_pairs, truncate_pair
from bert_data.masking import MaskingParams, mask_batch, num_to_predict
from conftest import collect_pass
from conftest import make_group as build_group

PAD, CLS, SEP, MASK = 0, 2, 3, 4
LOW_ID, HIGH_ID = 5, 100  # random "word" ids are drawn from [LOW_ID, HIGH_ID)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Params:
    """The instance and masking parameters of a test, readable as one (``params.vocab_size``...)."""

    def __init__(self, instance: InstanceParams, masking: MaskingParams) -> None:
        self.instance, self.masking = instance, masking

    def __getattr__(self, name):
        for part in (self.instance, self.masking):
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(name)


def make_params(**overrides) -> Params:
    values = dict(
        max_seq_length=32,
        short_seq_prob=0.0,
        min_short_seq_length=2,
        masked_lm_prob=0.15,
        max_predictions_per_seq=5,
        mask_whole_word=False,
        vocab_size=200,
        cls_id=CLS,
        sep_id=SEP,
        mask_id=MASK,
    )
    values.update(overrides)
    instance = {k: values.pop(k) for k in ("max_seq_length", "short_seq_prob", "min_short_seq_length", "cls_id", "sep_id")}
    return Params(InstanceParams(**instance), MaskingParams(**values))


def make_docs(doc_lengths: Sequence[Sequence[int]], seed: int) -> List[List[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(LOW_ID, HIGH_ID, size=n).astype(np.int32) for n in lengths] for lengths in doc_lengths]


def run_instances(group, params, pair_seed, mask_seed, is_continuation=None, batch_rows=4096, num_shards=1):
    """One production pass (``pair_pass``): its features in output order, plus ``_plan`` (the plan
    reordered like the output, for row-by-row checks), ``_unpaired`` and ``_shards``."""
    randomness = PassRandomness(random.Random(pair_seed), np.random.Generator(np.random.PCG64(mask_seed)), 0)
    planned = pair_pass(group, params.instance, params.masking, randomness, num_shards, is_continuation, batch_rows)
    features, shards = collect_pass(planned)
    # the pass shuffles its plan with the first draw of the masking generator: replay it
    order = np.random.Generator(np.random.PCG64(mask_seed)).permutation(planned.n).tolist()
    plan = plan_pairs(group, params.instance, random.Random(pair_seed)).take(order)
    assert len(plan) == planned.n
    return dict(features, _plan=plan, _unpaired=planned.unpaired, _shards=shards)


# --- strategies ------------------------------------------------------------------------------

doc_lengths_strategy = st.lists(
    st.lists(st.integers(1, 60), min_size=1, max_size=8), min_size=1, max_size=6
)


@st.composite
def params_strategy(draw, mask_whole_word: bool = False, vocab_size: Optional[int] = None):
    msl = draw(st.integers(8, 64))
    return make_params(
        max_seq_length=msl,
        max_predictions_per_seq=draw(st.integers(1, msl - 1)),
        masked_lm_prob=draw(st.one_of(st.sampled_from([0.0, 0.15, 0.5, 1.0]), st.floats(0.0, 1.0))),
        short_seq_prob=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
        min_short_seq_length=draw(st.integers(1, msl - 3)),
        mask_whole_word=mask_whole_word,
        vocab_size=vocab_size if vocab_size is not None else draw(st.integers(HIGH_ID, 2000)),
    )


# --- invariant checker -----------------------------------------------------------------------


def _find(haystack: np.ndarray, needle: np.ndarray) -> List[int]:
    """Start indices where ``needle`` occurs contiguously in ``haystack``."""
    if len(needle) > len(haystack):
        return []
    windows = np.lib.stride_tricks.sliding_window_view(haystack, len(needle))
    return np.flatnonzero((windows == needle).all(axis=1)).tolist()


def check_instances(docs, group, params, features, is_continuation=None) -> List[Dict]:
    """Assert every per-instance invariant; returns per-row details for further checks."""
    plan = features["_plan"]  # the pass's plan, in output order
    n = len(plan)
    assert n > 0
    L, P = params.max_seq_length, params.max_predictions_per_seq
    assert set(features) >= {
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
        "masked_lm_weights", "next_sentence_labels",
    }
    assert features["input_ids"].shape == (n, L)
    assert features["input_mask"].shape == (n, L)
    assert features["segment_ids"].shape == (n, L)
    assert features["masked_lm_positions"].shape == (n, P)
    assert features["masked_lm_ids"].shape == (n, P)
    assert features["masked_lm_weights"].shape == (n, P)
    assert features["next_sentence_labels"].shape == (n, 1)
    assert features["masked_lm_weights"].dtype == np.float32

    ids = group.ids
    off = group.sent_offsets.tolist()
    boundaries = set(off)
    doc_bounds = [off[s] for s in group.doc_starts]  # token offset where each document starts (+ end)
    doc_tokens = [np.concatenate(d) for d in docs]
    max_num_tokens = params.max_num_tokens

    def doc_of(lo: int, hi: int) -> int:
        d = bisect_right(doc_bounds, lo) - 1
        assert 0 <= d < len(docs) and doc_bounds[d] <= lo < hi <= doc_bounds[d + 1], (lo, hi, doc_bounds)
        return d

    rows = []
    for r in range(n):
        a_lo, a_hi, b_lo, b_hi = plan.a_lo[r], plan.a_hi[r], plan.b_lo[r], plan.b_hi[r]
        len_a, len_b = a_hi - a_lo, b_hi - b_lo
        label = int(features["next_sentence_labels"][r, 0])
        assert label == plan.is_random_next[r]
        assert label in (0, 1)
        # --- plan level: ranges, documents, truncation --------------------------------------
        assert len_a >= 1 and len_b >= 1
        assert len_a + len_b <= max_num_tokens
        da, db = doc_of(a_lo, a_hi), doc_of(b_lo, b_hi)
        truncated_possible = len_a + len_b == max_num_tokens
        if label == 0:
            assert da == db, "true continuation must come from the same document"
            assert a_hi <= b_lo
            # A's source ended (and B's source began) at a sentence boundary between them
            assert any(a_hi <= s <= b_lo for s in boundaries if s <= b_lo), (a_hi, b_lo)
            if not truncated_possible:
                assert a_hi == b_lo, "without truncation B starts exactly where A ends"
        else:
            assert len(docs) >= 2, "a one-document group never yields a random next"
            assert da != db, "random B must come from a different document"
        if not truncated_possible:
            assert a_lo in boundaries and a_hi in boundaries
            assert b_lo in boundaries and b_hi in boundaries

        # --- assembled features ------------------------------------------------------------
        input_ids = features["input_ids"][r]
        mask = features["input_mask"][r]
        seg = features["segment_ids"][r]
        real = int(mask.sum())
        sep1, sep2 = 1 + len_a, 2 + len_a + len_b
        assert real == len_a + len_b + 3 <= L
        assert mask.tolist() == [1] * real + [0] * (L - real)
        assert seg.tolist() == [0] * (sep1 + 1) + [1] * (real - sep1 - 1) + [0] * (L - real)
        expected = np.concatenate([[CLS], ids[a_lo:a_hi], [SEP], ids[b_lo:b_hi], [SEP], np.zeros(L - real)])
        expected = expected.astype(np.int64)

        weights = features["masked_lm_weights"][r]
        count = int(weights.sum())
        assert weights.tolist() == [1.0] * count + [0.0] * (P - count)
        positions = features["masked_lm_positions"][r][:count].astype(np.int64)
        mlm_ids = features["masked_lm_ids"][r]
        assert features["masked_lm_positions"][r][count:].tolist() == [0] * (P - count)
        assert mlm_ids[count:].tolist() == [0] * (P - count)
        assert np.all(np.diff(positions) > 0), "masked positions ascending and unique"
        candidates = [j for j in range(1, real - 1) if j != sep1]
        assert set(positions.tolist()) <= set(candidates), "never [CLS], [SEP] or padding"
        assert mlm_ids[:count].tolist() == expected[positions].tolist()
        masked = np.zeros(L, dtype=bool)
        masked[positions] = True
        assert input_ids[~masked].tolist() == expected[~masked].tolist()
        assert input_ids[0] == CLS and input_ids[sep1] == SEP and input_ids[sep2] == SEP
        assert np.all((input_ids[masked] >= 0) & (input_ids[masked] < params.vocab_size))

        # restore the originals and check the content against the documents (plan-free)
        restored = input_ids.astype(np.int64).copy()
        restored[positions] = mlm_ids[:count]
        assert np.flatnonzero(restored == SEP).tolist() == [sep1, sep2], "exactly two [SEP]"
        assert np.flatnonzero(restored == CLS).tolist() == [0]
        seg_a, seg_b = restored[1:sep1], restored[sep1 + 1:sep2]
        where_a = {d: _find(t, seg_a) for d, t in enumerate(doc_tokens)}
        where_b = {d: _find(t, seg_b) for d, t in enumerate(doc_tokens)}
        assert any(where_a.values()), "A is a contiguous slice of a document"
        assert any(where_b.values()), "B is a contiguous slice of a document"
        if label == 0:
            assert any(
                sa + len(seg_a) <= sb for d in where_a for sa in where_a[d] for sb in where_b[d]
            ), "B follows A in the same document"
        else:
            assert any(
                da_ != db_ for da_ in where_a if where_a[da_] for db_ in where_b if where_b[db_]
            ), "B comes from another document"

        k = min(P, max(1, round(real * params.masked_lm_prob)))
        rows.append(dict(expected=expected, positions=positions, count=count, k=k, real=real,
                         candidates=candidates, input_ids=input_ids, len_ab=len_a + len_b))
        if not params.mask_whole_word:
            assert count == min(k, len_a + len_b), (count, k, real)
    return rows


# --- property tests ----------------------------------------------------------------------------


@SETTINGS
@given(doc_lengths=doc_lengths_strategy, params=params_strategy(), data_seed=st.integers(0, 2**32 - 1),
       pair_seed=st.integers(0, 2**32 - 1), mask_seed=st.integers(0, 2**32 - 1), batch_rows=st.integers(1, 9),
       num_shards=st.integers(1, 4))
def test_instance_invariants(doc_lengths, params, data_seed, pair_seed, mask_seed, batch_rows, num_shards):
    docs = make_docs(doc_lengths, data_seed)
    group = build_group(docs)
    plan = plan_pairs(group, params.instance, random.Random(pair_seed))  # the plan pair_pass will make
    features = run_instances(group, params, pair_seed, mask_seed, batch_rows=batch_rows, num_shards=num_shards)
    if len(plan) == 0:
        assert "input_ids" not in features
        assert len(docs) == 1
        return
    check_instances(docs, group, params, features)
    assert features["_unpaired"] == plan.negatives_unavailable
    # rows go round-robin over the shards from the pass's first shard (0 here)
    assert features["_shards"].tolist() == [r % num_shards for r in range(len(plan))]
    # batching changes only the masks (their draws are per batch: the batch size is part of the
    # output's definition), never which instances are made or their order
    whole = run_instances(group, params, pair_seed, mask_seed, batch_rows=len(plan), num_shards=num_shards)
    for name in ("input_mask", "segment_ids", "next_sentence_labels"):
        np.testing.assert_array_equal(features[name], whole[name])
    if len(docs) == 1:
        assert not features["next_sentence_labels"].any()


def _words(expected: np.ndarray, candidates: List[int], is_continuation: np.ndarray) -> List[List[int]]:
    words: List[List[int]] = []
    previous = None
    for j in candidates:
        if words and previous == j - 1 and is_continuation[expected[j]]:
            words[-1].append(j)
        else:
            words.append([j])
        previous = j
    return words


WWM_VOCAB = 1_000_000  # random replacements practically never collide with [MASK] or the original
WWM_CONTINUATION = np.zeros(WWM_VOCAB, dtype=bool)
WWM_CONTINUATION[60:HIGH_ID] = True  # ids 60..99 play the role of "##" pieces


# derandomized: a random replacement equal to [MASK] or to the original (p = 1e-6 per piece) would
# read as a mixed treatment; fixed examples keep that from ever flaking.
@settings(SETTINGS, derandomize=True)
@given(doc_lengths=doc_lengths_strategy, params=params_strategy(mask_whole_word=True, vocab_size=WWM_VOCAB),
       data_seed=st.integers(0, 2**32 - 1), pair_seed=st.integers(0, 2**32 - 1),
       mask_seed=st.integers(0, 2**32 - 1))
def test_whole_word_masking_invariants(doc_lengths, params, data_seed, pair_seed, mask_seed):
    docs = make_docs(doc_lengths, data_seed)
    group = build_group(docs)
    plan = plan_pairs(group, params.instance, random.Random(pair_seed))
    features = run_instances(group, params, pair_seed, mask_seed, WWM_CONTINUATION)
    if len(plan) == 0:
        return
    for row in check_instances(docs, group, params, features, WWM_CONTINUATION):
        expected, input_ids = row["expected"], row["input_ids"]
        chosen = set(row["positions"].tolist())
        words = _words(expected, row["candidates"], WWM_CONTINUATION)
        assert row["count"] <= row["k"]
        unchosen = []
        for word in words:
            hit = [j in chosen for j in word]
            assert all(hit) or not any(hit), f"word {word} only partly masked"
            if not any(hit):
                unchosen.append(word)
                continue
            kinds = set()
            for j in word:
                if input_ids[j] == MASK:
                    kinds.add("mask")
                elif input_ids[j] == expected[j]:
                    kinds.add("keep")
                else:
                    kinds.add("random")
            assert len(kinds) == 1, f"pieces of word {word} got different treatments {kinds}"
        # greedy: a word was left out only because it no longer fitted the budget
        if row["count"] < row["k"]:
            assert all(len(w) > row["k"] - row["count"] for w in unchosen)


def test_whole_word_mode_requires_continuation_table():
    params = make_params(mask_whole_word=True)
    group = build_group(make_docs([[10, 10], [10]], 0))
    with pytest.raises(ValueError, match="continuation"):
        run_instances(group, params, 1, 1, None)


def test_whole_word_never_joins_across_sep():
    """A ``##`` piece starting B is its own word, not the tail of A's last word."""
    is_cont = np.zeros(HIGH_ID, dtype=bool)
    is_cont[60:] = True
    # real length 8, budget round(8 * 0.25) = 2: only the 2-piece word B = [63 ##, 64 ##] fits;
    # joined across [SEP] with A = [10, 61 ##, 62 ##] it would be one 5-piece word and nothing fits.
    params = make_params(max_seq_length=16, max_predictions_per_seq=15, masked_lm_prob=0.25, mask_whole_word=True,
                         vocab_size=HIGH_ID)
    docs = [[np.array([10, 61, 62], dtype=np.int32), np.array([63, 64], dtype=np.int32)]]
    group = build_group(docs)
    for seed in range(20):
        features = run_instances(group, params, seed, seed, is_cont)
        rows = check_instances(docs, group, params, features, is_cont)
        assert rows[0]["positions"].tolist() == [5, 6]


# --- determinism and statistics --------------------------------------------------------------


def test_same_seeds_identical_arrays_different_seeds_differ():
    docs = make_docs([[12, 7, 30, 5, 9], [20, 20, 3], [4, 40, 8, 8, 8, 1]], 7)
    group = build_group(docs)
    for wwm in (False, True):
        params = make_params(max_seq_length=48, max_predictions_per_seq=7, short_seq_prob=0.3,
                             mask_whole_word=wwm, vocab_size=HIGH_ID)
        cont = np.arange(HIGH_ID) >= 60 if wwm else None
        first = run_instances(group, params, 11, 22, cont)
        second = run_instances(group, params, 11, 22, cont)
        assert first.keys() == second.keys()
        for name in first:
            if not name.startswith("_"):
                np.testing.assert_array_equal(first[name], second[name])
        other_mask = run_instances(group, params, 11, 23, cont)
        assert any(not np.array_equal(first[k], other_mask[k]) for k in ("input_ids", "masked_lm_positions"))


def _big_group(n_docs=40, n_sent=30, seed=3):
    rng = np.random.default_rng(seed)
    lengths = [[int(x) for x in rng.integers(5, 11, size=n_sent)] for _ in range(n_docs)]
    docs = make_docs(lengths, seed)
    return docs, build_group(docs)


def test_mask_replacement_split_is_80_10_10_and_nsp_is_balanced():
    docs, group = _big_group()
    params = make_params(max_seq_length=64, max_predictions_per_seq=20, masked_lm_prob=0.15, vocab_size=30000)
    n_mask = n_keep = n_random = 0
    labels = []
    for seed in range(12):
        features = run_instances(group, params, seed, 1000 + seed)
        labels.extend(features["next_sentence_labels"][:, 0].tolist())
        w = features["masked_lm_weights"] > 0
        pos = features["masked_lm_positions"]
        replaced = np.take_along_axis(features["input_ids"], pos, axis=1)[w]
        original = features["masked_lm_ids"][w]
        n_mask += int(np.sum(replaced == MASK))
        n_keep += int(np.sum(replaced == original))
        n_random += int(np.sum((replaced != MASK) & (replaced != original)))
    total = n_mask + n_keep + n_random
    assert total > 10000
    assert abs(n_mask / total - 0.8) < 0.02
    assert abs(n_keep / total - 0.1) < 0.02
    assert abs(n_random / total - 0.1) < 0.02
    assert abs(np.mean(labels) - 0.5) < 0.05


def test_whole_word_decision_split_is_80_10_10():
    docs, group = _big_group(n_docs=20)
    cont = np.zeros(WWM_VOCAB, dtype=bool)
    cont[60:HIGH_ID] = True
    params = make_params(max_seq_length=64, max_predictions_per_seq=20, mask_whole_word=True, vocab_size=WWM_VOCAB)
    kinds = {"mask": 0, "keep": 0, "random": 0}
    for seed in range(12):
        features = run_instances(group, params, seed, seed + 7, cont)
        for row in check_instances(docs, group, params, features, cont):
            chosen = set(row["positions"].tolist())
            for word in _words(row["expected"], row["candidates"], cont):
                if word[0] in chosen:
                    j = word[0]
                    v = row["input_ids"][j]
                    kinds["mask" if v == MASK else "keep" if v == row["expected"][j] else "random"] += 1
    total = sum(kinds.values())
    assert total > 3000
    assert abs(kinds["mask"] / total - 0.8) < 0.03
    assert abs(kinds["keep"] / total - 0.1) < 0.03
    assert abs(kinds["random"] / total - 0.1) < 0.03


def test_num_to_predict_uses_python_round_half_even():
    params = make_params(max_predictions_per_seq=100, masked_lm_prob=0.5)
    lengths = np.array([1, 2, 3, 5, 7, 9, 10, 11])
    assert num_to_predict(lengths, params.masking).tolist() == [min(100, max(1, round(x * 0.5))) for x in lengths.tolist()]
    assert num_to_predict(np.array([5]), params.masking).tolist() == [2]  # round(2.5) == 2
    assert num_to_predict(np.array([7]), params.masking).tolist() == [4]  # round(3.5) == 4
    params0 = make_params(masked_lm_prob=0.0, max_predictions_per_seq=5)
    assert num_to_predict(np.array([20]), params0.masking).tolist() == [1]  # at least one
    assert num_to_predict(np.array([200]), make_params(masked_lm_prob=1.0).masking).tolist() == [5]  # capped


# --- truncation --------------------------------------------------------------------------------


def _reference_lengths(len_a: int, len_b: int, max_num_tokens: int):
    """Lengths after google-research/bert truncate_seq_pair (one token at a time, B on ties)."""
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


@settings(max_examples=300, deadline=None)
@given(len_a=st.integers(1, 400), len_b=st.integers(1, 400), max_num_tokens=st.integers(2, 400),
       a_lo=st.integers(0, 1000), gap=st.integers(0, 100), seed=st.integers(0, 2**32 - 1))
def test_truncate_pair_matches_reference_lengths(len_a, len_b, max_num_tokens, a_lo, gap, seed):
    a_hi = a_lo + len_a
    b_lo = a_hi + gap
    b_hi = b_lo + len_b
    na_lo, na_hi, nb_lo, nb_hi = truncate_pair(a_lo, a_hi, b_lo, b_hi, max_num_tokens, random.Random(seed))
    assert (na_hi - na_lo, nb_hi - nb_lo) == _reference_lengths(len_a, len_b, max_num_tokens)
    assert a_lo <= na_lo < na_hi <= a_hi
    assert b_lo <= nb_lo < nb_hi <= b_hi
    assert (na_hi - na_lo) + (nb_hi - nb_lo) <= max_num_tokens
    if len_a + len_b <= max_num_tokens:
        assert (na_lo, na_hi, nb_lo, nb_hi) == (a_lo, a_hi, b_lo, b_hi)


def test_truncate_pair_front_back_split_is_binomial():
    """Each removed token leaves the front with probability 1/2 (Binomial(k, 1/2) in total)."""
    rng = random.Random(5)
    fronts = []
    for _ in range(4000):
        a_lo, a_hi, b_lo, b_hi = truncate_pair(0, 30, 100, 110, 30, rng)  # 10 tokens leave A
        assert (a_hi - a_lo, b_hi - b_lo) == (20, 10)
        assert (b_lo, b_hi) == (100, 110)
        fronts.append(a_lo)
        assert a_lo + (30 - a_hi) == 10
    fronts = np.asarray(fronts)
    assert abs(fronts.mean() - 5.0) < 0.15
    assert abs(fronts.var() - 2.5) < 0.3
    assert fronts.min() <= 1 and fronts.max() >= 9


# --- one-document groups, pathological lengths -------------------------------------------------


def test_one_document_group_never_random_next():
    rng = np.random.default_rng(0)
    params = make_params(max_seq_length=24, short_seq_prob=0.2)
    for seed in range(40):
        lengths = [[int(x) for x in rng.integers(1, 30, size=int(rng.integers(1, 10)))]]
        docs = make_docs(lengths, seed)
        group = build_group(docs)
        plan = plan_pairs(group, params.instance, random.Random(seed))
        assert not any(plan.is_random_next)
        features = run_instances(group, params, seed, seed)
        if len(plan):
            assert not features["next_sentence_labels"].any()
            check_instances(docs, group, params, features)


def test_one_sentence_chunk_in_one_document_group_counts_negatives_unavailable():
    # target 13: [100] alone is a one-sentence chunk (no other document for a random B);
    # [3, 3] then closes the document as a true continuation.
    docs = make_docs([[100, 3, 3]], 0)
    group = build_group(docs)
    params = make_params(max_seq_length=16, short_seq_prob=0.0)
    plan = plan_pairs(group, params.instance, random.Random(0))
    assert plan.negatives_unavailable == 1
    assert len(plan) == 1 and list(plan.is_random_next) == [0]
    features = run_instances(group, params, 0, 0)
    assert features["_unpaired"] == 1
    assert features["next_sentence_labels"].tolist() == [[0]]
    check_instances(docs, group, params, features)


def test_one_sentence_document_alone_yields_nothing_but_is_counted_in_plan():
    group = build_group(make_docs([[10]], 0))
    plan = plan_pairs(group, make_params().instance, random.Random(0))
    assert len(plan) == 0 and plan.negatives_unavailable == 1


def test_very_long_sentence_is_processed():
    docs = make_docs([[100_000], [100_000, 5], [3]], 1)
    group = build_group(docs)
    params = make_params(max_seq_length=128, max_predictions_per_seq=20)
    features = run_instances(group, params, 4, 4)
    check_instances(docs, group, params, features)
    assert (features["input_mask"].sum(axis=1) <= 128).all()


def test_tokenized_group_layout():
    docs = [[np.array([5, 6]), np.array([7])], [np.array([8, 9, 10])]]
    group = build_group(docs)
    assert group.ids.tolist() == [5, 6, 7, 8, 9, 10]
    assert group.sent_offsets.tolist() == [0, 2, 3, 6]
    assert group.doc_starts == [0, 2, 3]
    assert group.n_docs == 2


def test_tokenized_group_drops_empty_sentences_and_reports_empty_documents():
    from bert_data.tokenization import TokenizedGroup

    ids = np.array([5, 6, 7, 8], dtype=np.int32)
    lengths = np.array([2, 0, 0, 1, 1])  # doc 0: [5 6] + empty; doc 1: empty only; doc 2: [7], [8]
    group, left_out = TokenizedGroup.from_sentences(ids, lengths, np.array([0, 0, 1, 2, 2]), 4)
    assert left_out == [1, 3]
    assert group.sent_offsets.tolist() == [0, 2, 3, 4] and group.doc_starts == [0, 1, 3]


def test_assemble_layout_exact():
    ids = np.arange(10, 30, dtype=np.int32)
    from bert_data.instances import PairPlan

    plan = PairPlan([0, 5], [2, 6], [2, 12], [5, 13], [0, 1])
    params = make_params(max_seq_length=10)
    arrays = assemble(ids, plan, params.instance)
    assert arrays["input_ids"].tolist() == [
        [CLS, 10, 11, SEP, 12, 13, 14, SEP, 0, 0],
        [CLS, 15, SEP, 22, SEP, 0, 0, 0, 0, 0],
    ]
    assert arrays["input_mask"].tolist() == [[1] * 8 + [0] * 2, [1] * 5 + [0] * 5]
    assert arrays["segment_ids"].tolist() == [[0] * 4 + [1] * 4 + [0] * 2, [0] * 3 + [1] * 2 + [0] * 5]
    assert arrays["next_sentence_labels"].tolist() == [[0], [1]]
    features = mask_batch(arrays, make_params(max_seq_length=10, max_predictions_per_seq=9, masked_lm_prob=1.0).masking,
                          np.random.Generator(np.random.PCG64(0)))
    # masked_lm_prob 1.0: every candidate (A and B tokens) is predicted
    assert features["masked_lm_positions"][0].tolist() == [1, 2, 4, 5, 6, 0, 0, 0, 0]
    assert features["masked_lm_ids"][0].tolist() == [10, 11, 12, 13, 14, 0, 0, 0, 0]
    assert features["masked_lm_positions"][1].tolist() == [1, 3] + [0] * 7


@SETTINGS
@given(doc_lengths=st.lists(st.lists(st.integers(1, 25), min_size=1, max_size=10), min_size=2, max_size=5),
       msl=st.integers(8, 64), seed=st.integers(0, 2**32 - 1))
def test_chunking_follows_reference_without_truncation(doc_lengths, msl, seed):
    """With truncation switched off, the plan is the reference's chunking exactly: chunks tile
    each document in order, a chunk closes at the first sentence reaching the target length
    (or at the document end), a random-next pair puts B's unused sentences back, and a random
    B is read from a sentence start until it reaches ``target - len(A)``."""
    docs = make_docs(doc_lengths, seed)
    group = build_group(docs)
    params = make_params(max_seq_length=msl, max_predictions_per_seq=1, short_seq_prob=0.0).instance
    target = params.max_num_tokens
    import bert_data.instances as instances
    from bert_data.format import native

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "_wire", None)  # Python's planner: the C planner truncates on its own
        mp.setattr(instances, "truncate_pair", lambda a_lo, a_hi, b_lo, b_hi, max_num_tokens, rng: (a_lo, a_hi, b_lo, b_hi))
        plan = plan_pairs(group, params, random.Random(seed))
    off = group.sent_offsets.tolist()
    boundaries = set(off)
    doc_bounds = [off[s] for s in group.doc_starts]

    def last_sentence_start(end: int) -> int:
        return off[off.index(end) - 1]

    position = 0  # where the next chunk must start (token offset)
    doc = 0
    for r in range(len(plan)):
        a_lo, a_hi, b_lo, b_hi = plan.a_lo[r], plan.a_hi[r], plan.b_lo[r], plan.b_hi[r]
        while position == doc_bounds[doc + 1]:
            doc += 1
        assert a_lo == position, "chunks tile the document, unused sentences are put back"
        assert a_hi in boundaries and b_lo in boundaries and b_hi in boundaries
        if plan.is_random_next[r] == 0:
            assert b_lo == a_hi and b_hi <= doc_bounds[doc + 1]
            assert last_sentence_start(b_hi) - a_lo < target, "the chunk closes at the first sentence reaching target"
            assert b_hi - a_lo >= target or b_hi == doc_bounds[doc + 1]
            position = b_hi
        else:
            assert last_sentence_start(a_hi) == a_lo or a_hi - a_lo < target
            rdoc = bisect_right(doc_bounds, b_lo) - 1
            assert rdoc != doc and b_hi <= doc_bounds[rdoc + 1]
            want = target - (a_hi - a_lo)
            assert last_sentence_start(b_hi) == b_lo or last_sentence_start(b_hi) - b_lo < want
            assert b_hi - b_lo >= want or b_hi == doc_bounds[rdoc + 1]
            position = a_hi
    assert position == doc_bounds[-1] and doc == len(docs) - 1, "every sentence of every document is used"

"""Masked-LM masking in the C accelerator (``_wire.choose_rows``, ``_wire.replace_rows``) against
numpy's :func:`bert_data.masking.mask_batch` path, which stays the reference (issue 29).

The C path draws the batch's keys itself from the Generator's BitGenerator (a PCG64, every
pass's, by its state, stepped inline; any other by its ``capsule``'s ``next_double``, as
``Generator.random`` does), never storing them, then the coin and random ids are drawn by numpy
as before. So besides the same arrays, the generator must be left in exactly
the state numpy's path leaves it (later batches draw from it):

* random batches (0 to 6 rows, lengths 1 to 40, no, some or every candidate, ``max_predictions``
  above the length, vocabularies of 1 to 2**31 - 1 ids, every numpy BitGenerator): the same
  arrays and state, the caller's ids untouched, and the C path the one taken;
* a tie at a row's k-th key (numpy's choice among equal keys is its own): ``choose_rows`` says so
  on given keys; inside ``mask_batch`` the state is restored and numpy chooses, same arrays and state;
* the choice alone against a sorted reference, on keys with ties and keys far from uniform;
* bad arguments refused with an exception, never a crash.

Whole runs with and without the accelerator (every layout) are in ``test_native_write.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bert_data.format import native
from bert_data.masking import MaskingParams, mask_batch
from conftest import both_paths as both, require_wire, same_arrays

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIT_GENERATORS = [np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox, np.random.SFC64]


@pytest.fixture
def wire():
    require_wire()
    return native.wire()


def same_state(left, right) -> bool:
    """BitGenerator states equal (MT19937's holds an array)."""
    if isinstance(left, dict):
        return isinstance(right, dict) and left.keys() == right.keys() and all(same_state(left[k], right[k])
                                                                               for k in left)
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return bool(np.array_equal(left, right))
    return left == right


@st.composite
def masking_batches(draw):
    """An assembled batch as mask_batch is given it: [CLS]-like first and last real positions
    never candidates, the rest none, some or all of them."""
    n = draw(st.integers(0, 6))
    length = draw(st.integers(1, 40))
    real = draw(hnp.arrays(np.int64, n, elements=st.integers(min(3, length), length)))
    ids = draw(hnp.arrays(np.int32, (n, length), elements=st.integers(0, 200)))
    density = draw(st.sampled_from(["none", "some", "all"]))
    candidates = np.zeros((n, length), np.bool_)
    for r in range(n):
        inside = draw(hnp.arrays(np.bool_, length, elements=st.booleans()))
        candidates[r, 1 : real[r] - 1] = {"none": False, "all": True, "some": inside[1 : real[r] - 1]}[density]
    params = MaskingParams(draw(st.sampled_from([0.15, 0.5, 1.0])), draw(st.integers(1, 45)), False,
                           draw(st.sampled_from([1, 2, 201, 30522, 2**31 - 1])), 103)
    return {"input_ids": ids, "candidates": candidates, "real_length": real,
            "next_sentence_labels": np.zeros((n, 1), np.int32)}, params


def spy_on_choose(monkeypatch, tie=False):
    """Route native.wire()'s choose_rows through a recorder (its answers; False when ``tie``, after
    the real call has drawn: as a tie found in the last row would)."""
    real = native.wire()
    answers = []

    def choose_rows(*args):
        answers.append(real.choose_rows(*args))
        return False if tie else answers[-1]

    monkeypatch.setattr(native, "_wire", SimpleNamespace(choose_rows=choose_rows, replace_rows=real.replace_rows,
                                                         replace_rows_pcg64=real.replace_rows_pcg64, PCG64=real.PCG64))
    return answers


@SETTINGS
@given(masking_batches(), st.integers(0, 2**64 - 1), st.sampled_from(BIT_GENERATORS), st.integers(0, 3))
def test_mask_batch_c_and_numpy_give_the_same_arrays_and_state(batch, seed, bit_generator, burnt):
    arrays, params = batch
    given_ids = arrays["input_ids"].copy()

    def run():
        rng = np.random.Generator(bit_generator(seed))
        rng.random(burnt)  # the stream anywhere, a 32-bit half kept back or not (PCG64's has_uint32)
        rng.integers(0, 201, burnt)
        first = mask_batch(arrays, params, rng)
        return first, mask_batch(arrays, params, rng), rng.bit_generator.state  # later batches draw on

    with pytest.MonkeyPatch.context() as patch:
        require_wire()
        answers = spy_on_choose(patch)
        with_c = run()
    assert answers == [True, True], "the C path is the one taken"
    same_two_batches(with_c, both(run)[1], arrays, given_ids)


@pytest.mark.parametrize("vocab_size", [1, 2, 30522, 1431655766, 2**31])
@pytest.mark.parametrize("burnt", [0, 1])
def test_random_ids_drawn_in_c_are_numpys_rejections_included(vocab_size, burnt):
    """A PCG64's coin and random ids drawn in C (replace_rows_pcg64) are Generator.integers' own:
    Lemire's draws with their rejections (a third of the draws are rejected for 1,431,655,766 ids),
    a 32-bit half kept from before the batch or not, no draw at all for one id."""
    n, length, p = 400, 12, 4
    arrays = {"input_ids": np.arange(n * length, dtype=np.int32).reshape(n, length) % 997,
              "candidates": np.ones((n, length), np.bool_), "real_length": np.full(n, length, np.int64)}
    params = MaskingParams(0.3, p, False, vocab_size, 3)
    given_ids = arrays["input_ids"].copy()

    def run():
        rng = np.random.Generator(np.random.PCG64(5))
        rng.integers(0, 7, burnt)
        return mask_batch(arrays, params, rng), mask_batch(arrays, params, rng), rng.bit_generator.state

    with pytest.MonkeyPatch.context() as patch:
        require_wire()
        answers = spy_on_choose(patch)
        with_c = run()
    assert answers == [True, True]
    same_two_batches(with_c, both(run)[1], arrays, given_ids)


def same_two_batches(with_c, reference, arrays, given_ids) -> None:
    """Two batches masked by C and by the reference: the same arrays, the generator left in the
    same state, and the caller's ids untouched (a copy is masked)."""
    same_arrays(with_c[0], reference[0])
    same_arrays(with_c[1], reference[1])
    assert same_state(with_c[2], reference[2])
    np.testing.assert_array_equal(arrays["input_ids"], given_ids)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(masking_batches(), st.integers(0, 2**64 - 1), st.sampled_from(BIT_GENERATORS))
def test_a_tie_restores_the_generator_and_numpy_chooses(batch, seed, bit_generator):
    """choose_rows has drawn (part of) the keys when it finds a tie: mask_batch leaves the state
    as it was (a PCG64's words are not set back; another's state is restored), and numpy draws the
    same keys again."""
    arrays, params = batch

    def run():
        rng = np.random.Generator(bit_generator(seed))
        return mask_batch(arrays, params, rng), rng.bit_generator.state

    with pytest.MonkeyPatch.context() as patch:
        require_wire()
        answers = spy_on_choose(patch, tie=True)
        tied = run()
    assert len(answers) == 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_wire", None)
        reference = run()
    same_arrays(tied[0], reference[0])
    assert same_state(tied[1], reference[1])


class NotAGenerator:
    """A generator without a BitGenerator (keys multiples of 1/4: ties everywhere): numpy's path."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def random(self, size):
        self.calls += 1
        values = self.rng.random(size)
        return np.floor(values * 4) / 4 if self.calls == 1 else values

    def integers(self, low, high, size):
        return self.rng.integers(low, high, size=size)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(masking_batches(), st.integers(0, 2**32))
def test_a_generator_without_a_bit_generator_takes_numpys_path(batch, seed):
    arrays, params = batch

    def run():
        rng = NotAGenerator(seed)
        return mask_batch(arrays, params, rng), rng.rng.random(3)

    (c_features, c_after), (n_features, n_after) = both(run)
    same_arrays(c_features, n_features)
    np.testing.assert_array_equal(c_after, n_after)


def test_non_int32_ids_take_numpys_path(monkeypatch):
    require_wire()
    arrays = {"input_ids": np.arange(20, dtype=np.int64).reshape(2, 10), "candidates": np.ones((2, 10), np.bool_),
              "real_length": np.array([10, 10])}
    params = MaskingParams(0.3, 4, False, 100, 103)
    answers = spy_on_choose(monkeypatch)
    features = mask_batch(arrays, params, np.random.default_rng(0))
    assert answers == [] and features["masked_lm_weights"].sum() == 6


# --------------------------------------------------------------------------------------
# the choice alone (choose_rows on given keys) and the draws (on a BitGenerator)
# --------------------------------------------------------------------------------------


def reference_choice(keys, candidates, k):
    """The positions of the k smallest candidate keys (k at most their count), ascending; None on
    a tie at the k-th."""
    order = sorted(np.flatnonzero(candidates).tolist(), key=lambda j: keys[j])
    k = min(k, len(order))
    if 0 < k < len(order) and keys[order[k - 1]] == keys[order[k]]:
        return None
    return sorted(order[:k])


@SETTINGS
@given(st.data())
def test_choose_rows_on_given_keys_is_the_sorted_choice(data):
    require_wire()
    wire = native.wire()
    n, length = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 60))
    width = data.draw(st.integers(0, length))
    p = width + data.draw(st.integers(0, 3))
    steps = data.draw(st.sampled_from([2, 4, 64, 2**53]))  # keys in multiples of 1/steps: ties or not
    keys = np.floor(data.draw(hnp.arrays(np.float64, (n, length), elements=st.floats(0, 1, exclude_max=True))) * steps)
    keys /= steps
    candidates = data.draw(hnp.arrays(np.bool_, (n, length), elements=st.booleans()))
    # the numbers wanted: at most p, perhaps more than the row's candidates (then lowered to them)
    wanted = [data.draw(st.integers(0, p if int(candidates[r].sum()) <= width else width)) for r in range(n)]
    k = np.array(wanted, np.int64)
    positions = np.full((n, p), -1, np.int32)
    expected = [reference_choice(keys[r], candidates[r], wanted[r]) for r in range(n)]
    assert wire.choose_rows(n, length, width, p, candidates, k, keys, positions) is all(e is not None for e in expected)
    if all(e is not None for e in expected):
        assert k.tolist() == [min(w, int(c.sum())) for w, c in zip(wanted, candidates)]
        for r in range(n):
            assert positions[r].tolist() == expected[r] + [0] * (p - k[r])


def test_choose_rows_says_tie(wire):
    candidates = np.array([[0, 1, 1, 1, 0]], np.bool_)
    keys = np.array([[0.9, 0.5, 0.2, 0.5, 0.1]])
    positions = np.zeros((1, 2), np.int32)
    assert wire.choose_rows(1, 5, 2, 2, candidates, np.array([2]), keys, positions) is False
    assert wire.choose_rows(1, 5, 2, 2, candidates, np.array([1]), keys, positions) is True
    assert positions.tolist() == [[2, 0]]
    k, positions = np.array([4]), np.zeros((1, 4), np.int32)  # more than the 3 candidates: all, no tie
    assert wire.choose_rows(1, 5, 4, 4, candidates, k, keys, positions) is True
    assert k.tolist() == [3] and positions.tolist() == [[1, 2, 3, 0]]


def test_choose_rows_finds_the_smallest_keys_when_few_are_small(wire):
    """Keys far from uniform (most above the first threshold): the choice is still exact."""
    length = 120
    candidates = np.ones((1, length), np.bool_)
    keys = 0.5 + np.arange(length)[None, :] / 1000.0
    keys[0, 50], keys[0, 60] = 0.01, 0.02
    positions = np.zeros((1, 6), np.int32)
    assert wire.choose_rows(1, length, 5, 6, candidates, np.array([5]), keys, positions) is True
    assert positions.tolist() == [[0, 1, 2, 50, 60, 0]]


def pcg64_words(bit_generator):
    """A PCG64's state as choose_rows takes it: uint64 [state >> 64, state low, inc >> 64, inc low]."""
    state = bit_generator.state["state"]
    return np.array([state["state"] >> 64, state["state"] & (2**64 - 1), state["inc"] >> 64,
                     state["inc"] & (2**64 - 1)], np.uint64)


@pytest.mark.parametrize("length", [1, 7, 300, 5000])
@pytest.mark.parametrize("source", [g.__name__ for g in BIT_GENERATORS] + ["PCG64 words"])
def test_choose_rows_draws_the_keys_generator_random_draws(wire, source, length):
    """On a capsule (or a PCG64's state), choose_rows draws rng.random((n, L)) (non-candidates'
    keys too; a PCG64's past a row's last candidate skipped by a jump): the same choice as on those
    keys, and the generator where rng.random leaves it."""
    if source == "PCG64 words" and not wire.PCG64:
        pytest.skip("built without 128-bit integers: no inline PCG64")
    n, p = 50, min(40, length)
    rng = np.random.default_rng(3)
    candidates = rng.random((n, length)) < rng.random((n, 1))  # densities from 0 to 1
    candidates[3] = False  # no candidate: the whole row skipped
    candidates[4] = True
    candidates[5:25, 1 + length // 3 :] = False  # padding
    k = rng.integers(0, p + 1, n)  # lowered to the candidates' count
    bit_generator = getattr(np.random, source.split()[0])
    drawn, given = np.random.Generator(bit_generator(11)), np.random.Generator(bit_generator(11))
    drawn.random(5), given.random(5)
    on_keys, on_draws = np.zeros((n, p), np.int32), np.zeros((n, p), np.int32)
    assert wire.choose_rows(n, length, p, p, candidates, k.copy(), given.random((n, length)), on_keys) is True
    if source == "PCG64 words":
        words = pcg64_words(drawn.bit_generator)
        assert wire.choose_rows(n, length, p, p, candidates, k, words, on_draws) is True
        np.testing.assert_array_equal(words, pcg64_words(given.bit_generator))
    else:
        with drawn.bit_generator.lock:
            assert wire.choose_rows(n, length, p, p, candidates, k, drawn.bit_generator.capsule, on_draws) is True
    np.testing.assert_array_equal(on_draws, on_keys)
    if source != "PCG64 words":
        assert same_state(drawn.bit_generator.state, given.bit_generator.state)
        assert drawn.random(5).tolist() == given.random(5).tolist()


def test_choose_rows_on_pcg64_words_redraws_a_row_with_few_small_keys(wire):
    """A PCG64's keys are gathered below a threshold as they are drawn; a row where fewer than k
    are below it (row 15,553 of this stream: 4 of 40 keys below 0.368 for k = 5, about 1e-4 of
    rows) is drawn again whole: the choice of the given keys, the state past every row."""
    if not wire.PCG64:
        pytest.skip("built without 128-bit integers: no inline PCG64")
    n, length, p = 15560, 40, 5
    candidates = np.ones((n, length), np.bool_)
    drawn, given = np.random.Generator(np.random.PCG64(11)), np.random.Generator(np.random.PCG64(11))
    keys = given.random((n, length))
    assert (keys[15553] < (5 + 3 * 5**0.5 + 3) / 40).sum() == 4  # fewer than k: the row takes the other path
    on_keys, on_draws = np.zeros((n, p), np.int32), np.zeros((n, p), np.int32)
    assert wire.choose_rows(n, length, p, p, candidates, np.full(n, p, np.int64), keys, on_keys) is True
    words = pcg64_words(drawn.bit_generator)
    assert wire.choose_rows(n, length, p, p, candidates, np.full(n, p, np.int64), words, on_draws) is True
    np.testing.assert_array_equal(on_draws, on_keys)
    np.testing.assert_array_equal(words, pcg64_words(given.bit_generator))
    assert on_keys[15553].tolist() == sorted(np.argsort(keys[15553])[:5].tolist())


@pytest.mark.parametrize("sizes", [(4, 2**62, 2**62, 2**62), (2**40, 2**30, 8, 8), (1, 2**31, 4, 4), (1, 8, 4, 2**31)])
def test_sizes_whose_arrays_cannot_exist_are_refused_not_written(wire, sizes):
    """Sizes whose byte counts wrap to small products (they would pass the buffer checks) or whose
    positions do not fit int32: a ValueError from each masking function, before any array is touched."""
    n, length, width, p = sizes
    empty32, empty64, words = np.zeros(0, np.int32), np.zeros(4, np.int64), np.zeros(6, np.uint64)
    with pytest.raises(ValueError, match="sizes must satisfy"):
        wire.choose_rows(n, length, width, p, np.zeros(0, np.bool_), empty64, np.zeros(0), empty32)
    with pytest.raises(ValueError, match="sizes must satisfy"):
        wire.replace_rows(n, length, width, p, 103, empty32, empty64, np.zeros(0), empty64, empty32, empty32,
                          np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="sizes must satisfy"):
        wire.replace_rows_pcg64(n, length, width, p, 103, 30522, empty32, empty64, words, empty32, empty32,
                                np.zeros(0, np.float32))


def test_replace_rows_is_80_10_10(wire):
    ids = np.array([[101, 5, 6, 7, 102], [101, 8, 9, 102, 0]], np.int32)
    k = np.array([3, 1], np.int64)
    coin = np.array([[0.1, 0.85, 0.95], [0.79, 0.0, 0.0]])
    random_ids = np.array([[11, 12, 13], [14, 15, 16]], np.int64)
    positions = np.array([[1, 2, 3, 0], [2, 0, 0, 0]], np.int32)
    original, weights = np.full((2, 4), 7, np.int32), np.full((2, 4), 7, np.float32)
    assert wire.replace_rows(2, 5, 3, 4, 103, ids, k, coin, random_ids, positions, original, weights) is None
    assert ids.tolist() == [[101, 103, 6, 13, 102], [101, 8, 103, 102, 0]]
    assert original.tolist() == [[5, 6, 7, 0], [9, 0, 0, 0]]
    assert weights.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]


def good_choose_args(n=2, length=6):
    return [n, length, 2, 2, np.ones((n, length), np.bool_), np.ones(n, np.int64), np.zeros((n, length)),
            np.zeros((n, 2), np.int32)]


@pytest.mark.parametrize("bad", ["candidates_int8", "k_int32", "keys_short", "positions_short", "k_above_p",
                                 "width_above_p", "capsule_of_another_kind", "strided_keys"])
def test_choose_rows_refuses_bad_arguments(wire, bad):
    args = good_choose_args()
    if bad == "candidates_int8":
        args[4] = args[4].astype(np.int8)
    elif bad == "k_int32":
        args[5] = args[5].astype(np.int32)
    elif bad == "keys_short":
        args[6] = np.zeros((2, 5))
    elif bad == "positions_short":
        args[7] = np.zeros((2, 1), np.int32)
    elif bad == "k_above_p":
        args[5] = np.array([1, 3], np.int64)
    elif bad == "width_above_p":
        args[2] = 3
    elif bad == "capsule_of_another_kind":
        import datetime  # any capsule not named "BitGenerator"

        args[6] = datetime.datetime_CAPI
    elif bad == "strided_keys":
        args[6] = np.zeros((2, 12))[:, ::2]
    with pytest.raises((TypeError, ValueError, BufferError)):
        wire.choose_rows(*args)


@pytest.mark.parametrize("bad", ["ids_int64", "coin_short", "weights_float64", "position_outside", "negative_k"])
def test_replace_rows_refuses_bad_arguments(wire, bad):
    n, length = 2, 6
    args = [n, length, 2, 2, 103, np.zeros((n, length), np.int32), np.ones(n, np.int64), np.zeros((n, 2)),
            np.zeros((n, 2), np.int64), np.zeros((n, 2), np.int32), np.zeros((n, 2), np.int32),
            np.zeros((n, 2), np.float32)]
    if bad == "ids_int64":
        args[5] = args[5].astype(np.int64)
    elif bad == "coin_short":
        args[7] = np.zeros((n, 1))
    elif bad == "weights_float64":
        args[11] = np.zeros((n, 2))
    elif bad == "position_outside":
        args[9] = np.full((n, 2), length, np.int32)
    elif bad == "negative_k":
        args[6] = np.array([1, -1], np.int64)
    with pytest.raises((TypeError, ValueError, BufferError)):
        wire.replace_rows(*args)
    assert not args[5].any()  # nothing written



# ---------------------------------------------------------------------------------------------
# Whole-word masking (``_wire.mask_words``): the Python rows of masking._mask_whole_words are the
# reference; the C rows draw permutation, random and integers from numpy's own bit generator
# functions, so arrays and the generator's state must match exactly, for every BitGenerator,
# with a 32-bit half kept back or not, and vocabularies at both branches of numpy's bounded draw
# that a vocabulary can reach (1: no draw; 2 to 2**31 - 1: Lemire's, its rejections included).
# ---------------------------------------------------------------------------------------------


@SETTINGS
@given(masking_batches(), st.integers(0, 2**64 - 1), st.sampled_from(BIT_GENERATORS), st.integers(0, 3),
       st.sampled_from([1, 2, 201, 30522, 2**31 - 1]), st.integers(0, 2**20))
def test_whole_word_masking_c_and_python_give_the_same_arrays_and_state(batch, seed, bit_generator, burnt, vocab,
                                                                          continuation_bits):
    arrays, params = batch
    params = MaskingParams(params.masked_lm_prob, params.max_predictions_per_seq, True, vocab, params.mask_id)
    table = np.array([(continuation_bits >> (i % 21)) & 1 for i in range(201)], np.bool_)  # '##' ids, some of them
    given_ids = arrays["input_ids"].copy()
    calls = []

    def run():
        rng = np.random.Generator(bit_generator(seed))
        rng.random(burnt)
        rng.integers(0, 201, burnt)  # a 32-bit half kept back (PCG64's has_uint32) or not
        first = mask_batch(arrays, params, rng, table)
        return first, mask_batch(arrays, params, rng, table), rng.bit_generator.state

    with pytest.MonkeyPatch.context() as patch:
        require_wire()
        real = native.wire()

        def mask_words(*args):
            calls.append(real.mask_words(*args))
            return calls[-1]

        recorded = {name: getattr(real, name) for name in dir(real) if not name.startswith("__")}
        patch.setattr(native, "_wire", SimpleNamespace(**{**recorded, "mask_words": mask_words}))
        with_c = run()
    assert calls == [True, True], "the C path is the one taken"
    same_two_batches(with_c, both(run)[1], arrays, given_ids)


def test_mask_words_declines_before_drawing_what_python_must_decide(wire):
    """An id at a candidate outside the ## table, or a k above p: False, the generator untouched
    (Python then runs and says what is wrong)."""
    rng = np.random.Generator(np.random.PCG64(3))
    before = rng.bit_generator.state
    ids = np.array([[2, 500, 7, 3]], np.int32)
    candidates = np.array([[False, True, True, False]])
    table = np.zeros(100, np.bool_)
    out = [np.zeros((1, 2), np.int64), np.zeros((1, 2), np.int64), np.zeros((1, 2), np.bool_)]
    with rng.bit_generator.lock:
        assert not wire.mask_words(1, 4, 2, ids, candidates, table, np.array([1], np.int64), rng.bit_generator.capsule,
                                   30522, 103, *out)  # id 500 outside the table
        ids[0, 1] = 50
        assert not wire.mask_words(1, 4, 2, ids, candidates, table, np.array([3], np.int64), rng.bit_generator.capsule,
                                   30522, 103, *out)  # k above p
        assert not wire.mask_words(1, 4, 2, ids, candidates, table, np.array([1], np.int64), rng.bit_generator.capsule,
                                   0, 103, *out)  # no vocabulary
        assert not wire.mask_words(1, 4, 2, ids, candidates, table, np.array([1], np.int64), rng.bit_generator.capsule,
                                   2**31 + 1, 103, *out)  # a random id would not fit int32
    assert same_state(rng.bit_generator.state, before)
    with pytest.raises(TypeError):
        wire.mask_words(1, 4, 2, ids.astype(np.int64), candidates, table, np.array([1], np.int64),
                        rng.bit_generator.capsule, 30522, 103, *out)

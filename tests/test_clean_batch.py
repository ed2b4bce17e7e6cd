"""The fast path of ``inspect_tfrecords --stats``: :func:`bert_data.format.checks.clean_batch`
proves a whole batch valid in a few passes. It must never vouch for a batch that
:func:`check_records` finds a bad record in, and what it accumulates must equal what the
record-by-record checks and :meth:`Accumulator._accumulate` give. Driven by hypothesis over
valid batches of every layout and over single-cell mutations of them."""

from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.format.checks import _c_arrays, _clean_batch_numpy, check_records, clean_batch, is_masked, is_paired, token_kind_table
from bert_data.format import batch_decode
from bert_data.format.schema import SCHEMAS
from bert_data.inspection.inputs import VocabInfo
from bert_data.inspection.file_stats import Accumulator

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".", "dog", "ran", "[DOC]"]
VOCAB = VocabInfo("v", TOKENS, 0, 1, 2, 3, 4)
WORDS = [1, 5, 6, 7, 8, 9, 10, 11, 12]  # [UNK] included: it is counted, not special
DOC = 13
SEQ, PRED = 16, 4


@st.composite
def records(draw, layout: str, separator: Optional[int]) -> Dict[str, np.ndarray]:
    """One record that every check accepts (asserted by the tests)."""
    paired, masked = is_paired(layout), is_masked(layout)
    real = draw(st.integers(3, SEQ))
    ids = [draw(st.sampled_from(WORDS)) for _ in range(real)]
    ids[0], ids[-1] = VOCAB.cls, VOCAB.sep
    specials = {0, real - 1}
    len_a = 0
    if paired:
        len_a = draw(st.integers(2, real - 1))
        ids[len_a - 1] = VOCAB.sep
        specials.add(len_a - 1)
    elif separator is not None:
        for i in range(1, real - 1):
            if draw(st.integers(0, 4)) == 0:
                ids[i] = separator
                specials.add(i)
    rec: Dict[str, np.ndarray] = {
        "input_ids": np.zeros(SEQ, np.int64),
        "input_mask": np.array([1] * real + [0] * (SEQ - real), np.int64),
    }
    if paired:
        rec["segment_ids"] = np.array([0] * len_a + [1] * (real - len_a) + [0] * (SEQ - real), np.int64)
        rec["next_sentence_labels"] = np.array([draw(st.integers(0, 1))], np.int64)
    if masked:
        candidates = [i for i in range(real) if i not in specials]
        chosen = sorted(draw(st.lists(st.sampled_from(candidates), unique=True, max_size=PRED))) if candidates else []
        original = [ids[i] for i in chosen]
        for i in chosen:
            ids[i] = draw(st.sampled_from([VOCAB.mask, VOCAB.mask, ids[i], *WORDS]))
        pad = PRED - len(chosen)
        rec["masked_lm_positions"] = np.array(chosen + [0] * pad, np.int64)
        rec["masked_lm_ids"] = np.array(original + [0] * pad, np.int64)
        rec["masked_lm_weights"] = np.array([1.0] * len(chosen) + [0.0] * pad, np.float32)
    rec["input_ids"][:real] = ids
    return rec


LAYOUTS = [("nsp", None), ("sop", None), ("mlm_only", None), ("mlm_only", DOC), ("mlm_only", VOCAB.sep), ("unmasked", None)]


@st.composite
def batches(draw) -> tuple:
    layout, separator = draw(st.sampled_from(LAYOUTS))
    rows = draw(st.lists(records(layout, separator), min_size=1, max_size=6))
    batch = {spec.name: np.stack([r[spec.name] for r in rows]) for spec in SCHEMAS[layout]}
    return layout, separator, batch


def _slow(batch: Dict[str, np.ndarray], layout: str, separator: Optional[int]) -> Optional[Accumulator]:
    """The accumulator of the record-by-record checks, or None when some record is bad."""
    checks = check_records(batch, VOCAB, layout, separator)
    if any(rows.any() for rows, _ in checks):
        return None
    acc = Accumulator(VOCAB)
    acc._accumulate(batch, layout, separator)
    return acc


def _fast(batch: Dict[str, np.ndarray], layout: str, separator: Optional[int], impl: str = "numpy") -> Optional[Accumulator]:
    """clean_batch's answer as an accumulator. With ``impl`` "c" the int arrays are handed over as
    the batch decoder gives them (int32), which is what the C implementation takes."""
    if impl == "c":
        batch = {k: v.astype(np.int32) if v.dtype.kind == "i" and _fits_int32(v) else v for k, v in batch.items()}
        assert _c_arrays(batch, layout) is not None or not all(_fits_int32(v) for v in batch.values() if v.dtype.kind == "i")
    clean = clean_batch(batch, VOCAB, token_kind_table(VOCAB, layout, separator), layout, separator)
    if clean is None:
        return None
    acc = Accumulator(VOCAB)
    acc.add_clean(clean, layout, batch)
    return acc


class _Counting:
    """The accelerator module, counting its clean_rows calls."""

    def __init__(self, wire, calls: list) -> None:
        self.wire, self.calls = wire, calls

    def __getattr__(self, name):
        if name == "clean_rows":
            self.calls.append(name)
        return getattr(self.wire, name)


def _fits_int32(a: np.ndarray) -> bool:
    return a.size == 0 or (int(a.min()) >= -(2**31) and int(a.max()) < 2**31)


def _same(a: Accumulator, b: Accumulator) -> None:
    assert (a.valid, a.real_tokens, a.unk_tokens) == (b.valid, b.real_tokens, b.unk_tokens)
    assert a.len_hist.tolist() == b.len_hist.tolist()
    assert a.pred_hist.tolist() == b.pred_hist.tolist()
    assert a.composition.tolist() == b.composition.tolist()
    assert {k: v.tolist() for k, v in a.labels.items()} == {k: v.tolist() for k, v in b.labels.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=batches())
def test_valid_batches_take_the_fast_path_with_the_same_statistics(impl, monkeypatch, case):
    layout, separator, batch = case
    slow = _slow(batch, layout, separator)
    assert slow is not None, "the generator made a record the checks refuse"
    calls: list = []
    with monkeypatch.context() as patch:
        if impl == "c":  # the C implementation is the one that answers
            patch.setattr(batch_decode, "_wire", _Counting(batch_decode._wire, calls))
        fast = _fast(batch, layout, separator, impl)
    assert fast is not None
    assert len(calls) == (1 if impl == "c" else 0)
    _same(fast, slow)


VALUES = [-1, 0, 1, 2, 3, 4, 5, 9, DOC, len(TOKENS), 1 << 20, SEQ - 1, SEQ]
FLOATS = [0.0, -0.0, 1.0, 0.5, math.nan, 2.0]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=batches(), data=st.data())
def test_the_fast_path_never_vouches_for_a_bad_batch(impl, case, data):
    """One or two cells of a valid batch changed (two reach what one cannot: a prediction at
    a [SEP] whose original is [SEP])."""
    layout, separator, batch = case
    mutated = dict(batch)
    for _ in range(data.draw(st.integers(1, 2))):
        name = data.draw(st.sampled_from(sorted(batch)))
        target = mutated[name].copy()
        row = data.draw(st.integers(0, target.shape[0] - 1))
        column = data.draw(st.integers(0, target.shape[1] - 1))
        target[row, column] = data.draw(st.sampled_from(FLOATS if target.dtype.kind == "f" else VALUES))
        mutated[name] = target
    fast = _fast(mutated, layout, separator, impl)
    slow = _slow(mutated, layout, separator)
    if impl == "c":  # and it proves exactly the batches the numpy implementation proves
        numpy_answer = _clean_batch_numpy(mutated, VOCAB, token_kind_table(VOCAB, layout, separator), layout, separator)
        assert (fast is None) == (numpy_answer is None)
    if slow is None:
        assert fast is None, f"{layout} separator={separator}: a bad batch passed"
    elif fast is not None:
        _same(fast, slow)


def _one(layout: str, separator: Optional[int], **features) -> Dict[str, np.ndarray]:
    """A one-record batch of ``layout`` with the given (whole) features."""
    return {name: np.asarray(value)[None, :] for name, value in features.items()}


def test_a_prediction_at_a_kept_sep_is_refused(impl):
    """[CLS] the [SEP] cat [SEP], position 2 'predicted' as [SEP] kept: the SEP count is intact."""
    batch = _one(
        "nsp",
        None,
        input_ids=[2, 5, 3, 6, 3, 0],
        input_mask=[1, 1, 1, 1, 1, 0],
        segment_ids=[0, 0, 0, 1, 1, 0],
        masked_lm_positions=[2, 0],
        masked_lm_ids=[3, 0],
        masked_lm_weights=np.array([1.0, 0.0], np.float32),
        next_sentence_labels=[0],
    )
    assert _slow(batch, "nsp", None) is None
    assert _fast(batch, "nsp", None, impl) is None


def test_a_prediction_of_the_document_separator_is_refused(impl):
    batch = _one(
        "mlm_only",
        DOC,
        input_ids=[2, 5, 4, 6, 3, 0],
        input_mask=[1, 1, 1, 1, 1, 0],
        masked_lm_positions=[2, 0],
        masked_lm_ids=[DOC, 0],
        masked_lm_weights=np.array([1.0, 0.0], np.float32),
    )
    assert _slow(batch, "mlm_only", DOC) is None
    assert _fast(batch, "mlm_only", DOC, impl) is None


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(records("nsp", None), min_size=1, max_size=5), dtype=st.sampled_from([np.int32, np.int64]))
def test_int32_arrays_as_the_batch_decoder_gives_them(impl, rows, dtype):
    """decode_examples(small_ints=True) hands int32 arrays over: the same answer."""
    batch = {spec.name: np.stack([r[spec.name] for r in rows]) for spec in SCHEMAS["nsp"]}
    cast = {k: (v.astype(dtype) if v.dtype.kind == "i" else v) for k, v in batch.items()}
    _same(_fast(cast, "nsp", None), _slow(batch, "nsp", None))


def test_an_empty_window_is_refused(impl):
    """[CLS] [SEP] and nothing between: every count is right, the length is not."""
    batch = _one("unmasked", None, input_ids=[2, 3, 0, 0], input_mask=[1, 1, 0, 0])
    assert _slow(batch, "unmasked", None) is None
    assert _fast(batch, "unmasked", None, impl) is None

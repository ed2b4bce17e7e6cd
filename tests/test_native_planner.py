"""The pair planner in the C accelerator (``_wire.plan_pairs``) against Python's (issue 29).

``bert_data.instances.plan_pairs`` runs the C planner when the accelerator is built, else
Python's :class:`~bert_data.instances._PassPlanner`, which stays the reference. The C planner
runs CPython's Mersenne Twister on the state of the caller's ``random.Random``: it must give the
same pairs and counters, and leave the generator in the same state (later draws come from it).

* the generator alone (``_wire.mt_draws``) against ``random.Random``: ``random()``,
  ``randint`` over small and 64-bit ranges, ``getrandbits`` of 0..64 bits and the one bits of
  ``getrandbits`` of any width, from every index of the state;
* random groups (documents of 0, 1 and many sentences, one-token and huge sentences, short and
  long sequences, ``short_seq_prob`` 0 to 1, NSP and SOP, with and without a pool of negatives
  and exclusions, units with no other document): the same plan, counters and state, and the C
  path is the one taken;
* whole runs with and without the accelerator: the same shards.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import List, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.format import native
from bert_data.instances import InstanceParams, plan_pairs, unit_negatives
from bert_data.negatives import NegativePool
from bert_data.tokenization import TokenizedGroup
from bert_data.tools.create import main
from conftest import base_args, require_wire, write_corpus, write_vocab

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def accelerator():
    require_wire()
    return native.wire()


@pytest.fixture
def wire():
    return accelerator()


def burnt(seed: int, words: int, cls=random.Random) -> random.Random:
    """A generator ``words`` 32-bit draws into its stream (its state's index anywhere, 624 included)."""
    rng = cls(seed)
    rng.getrandbits(32 * words)
    return rng


# --------------------------------------------------------------------------------------
# the generator alone
# --------------------------------------------------------------------------------------

RANGES = [0, 1, 2, 3, 6, 7, 100, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3, 2**62, 2**63 - 1]
draws = st.one_of(
    st.just((0, ())),
    st.tuples(st.just(1), st.tuples(st.integers(-(2**40), 2**40), st.sampled_from(RANGES))),
    st.tuples(st.just(2), st.tuples(st.integers(0, 64))),
    st.tuples(st.just(3), st.tuples(st.integers(0, 1200))),
)


@SETTINGS
@given(seed=st.integers(0, 2**64), words=st.integers(0, 1300), ops=st.lists(draws, max_size=60))
def test_the_generator_draws_what_random_random_draws(seed, words, ops) -> None:
    wire = accelerator()
    rng = burnt(seed, words)
    kinds: List[int] = []
    args: List[int] = []
    expected = []
    start = rng.getstate()[1]
    for kind, values in ops:
        kinds.append(kind)
        if kind == 1:
            a = min(values[0], 2**63 - 1 - values[1])  # randint(a, a + width) within int64
            args += [a, a + values[1]]
            expected.append(rng.randint(a, a + values[1]))
        else:
            args += list(values)
            expected.append(rng.random() if kind == 0 else rng.getrandbits(values[0]) if kind == 2
                            else bin(rng.getrandbits(values[0])).count("1"))
    state, values = wire.mt_draws(start, kinds, args)
    assert values == expected
    assert state == rng.getstate()[1]


def test_getrandbits_of_zero_bits_draws_nothing(wire) -> None:
    rng = burnt(3, 5)
    before = rng.getstate()
    assert rng.getrandbits(0) == 0 and rng.getstate() == before  # Python 3.9+: 0, no draw
    state, values = wire.mt_draws(before[1], [2, 3], [0, 0])
    assert values == [0, 0] and state == before[1]


def test_an_empty_range_is_refused_as_python_refuses_it(wire) -> None:
    with pytest.raises(ValueError):
        random.Random(0).randint(5, 4)
    start = random.Random(0).getstate()[1]
    state, values = wire.mt_draws(start, [1], [5, 4])
    assert values == [None] and state == start


def test_a_state_that_is_not_one_is_refused(wire) -> None:
    with pytest.raises(ValueError):
        wire.mt_draws((1, 2, 3), [0], [])
    with pytest.raises(ValueError):
        wire.mt_draws((0,) * 624 + (625,), [0], [])


# --------------------------------------------------------------------------------------
# the planner: C against Python
# --------------------------------------------------------------------------------------


def group_of(documents: List[List[int]]) -> TokenizedGroup:
    """A group of documents given by their sentence lengths (the planner reads offsets only;
    documents of no sentence are allowed here, which tokenization never makes)."""
    lengths = [n for doc in documents for n in doc]
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    doc_starts = np.concatenate([[0], np.cumsum([len(doc) for doc in documents])]).astype(int).tolist()
    return TokenizedGroup(ids=np.zeros(min(int(offsets[-1]), 4096), dtype=np.int32), sent_offsets=offsets,
                          doc_starts=doc_starts)


class Spy:
    """The accelerator, recording whether each plan_pairs call planned (True) or declined (False)."""

    def __init__(self, module) -> None:
        self.module = module
        self.planned: List[bool] = []

    def __getattr__(self, name):
        return getattr(self.module, name)

    def plan_pairs(self, *args):
        result = self.module.plan_pairs(*args)
        self.planned.append(result is not None)
        return result


def outcome(group, params, seed, words, sop, make_negatives, cls=random.Random):
    """(plan fields and counters, or the error raised; the generator's state after)."""
    rng = burnt(seed, words, cls)
    try:
        plan = plan_pairs(group, params, rng, sop, make_negatives())
    except Exception as exc:  # the reference's own error, on both paths
        return ("raised", type(exc).__name__, str(exc)), rng.getstate()
    ranges = (plan.a_lo, plan.a_hi, plan.b_lo, plan.b_hi, plan.is_random_next)
    fields = [np.asarray(values).tolist() for values in ranges]
    counters = (plan.negatives_unavailable, plan.random_next, plan.single_sentence_chunks, plan.continuations_kept)
    return (fields, counters), rng.getstate()


def c_and_python(*case, cls=random.Random):
    """The outcome with the C planner (and whether it planned), then with Python's."""
    spy = Spy(accelerator())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_wire", spy)
        with_c = outcome(*case, cls=cls)
        patch.setattr(native, "_wire", None)
        with_python = outcome(*case, cls=cls)
    return with_c, with_python, spy.planned


sentence_lengths = st.one_of(st.integers(1, 12), st.integers(1, 700), st.sampled_from([1, 1, 2, 5000, 10**6]))
documents = st.lists(st.lists(sentence_lengths, min_size=1, max_size=14), min_size=1, max_size=7)
MAX_SEQ_LENGTHS = [4, 5, 6, 9, 16, 40, 128, 512]


@st.composite
def instance_params(draw) -> InstanceParams:
    length = draw(st.sampled_from(MAX_SEQ_LENGTHS))
    return InstanceParams(max_seq_length=length, short_seq_prob=draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
                          min_short_seq_length=draw(st.integers(1, length - 3)), cls_id=2, sep_id=3)


@st.composite
def pools(draw, n_unit_docs: int):
    """None (the unit's other documents) or (a pool group, its documents' origins, the unit's)."""
    if draw(st.booleans()):
        return None
    origins = st.integers(0, draw(st.integers(0, 4)))
    pool_docs = draw(st.lists(st.lists(sentence_lengths, min_size=1, max_size=6), max_size=7))
    return group_of(pool_docs), [draw(origins) for _ in pool_docs], [draw(origins) for _ in range(n_unit_docs)]


def negatives_of(unit: TokenizedGroup, pool):
    if pool is None:
        return lambda: None
    pool_group, pool_origins, unit_origins = pool
    negative_pool = NegativePool(pool_group.ids, pool_group.sent_offsets.tolist(), list(pool_group.doc_starts),
                                 pool_origins)
    return lambda: negative_pool.negatives(unit, unit_origins)


@SETTINGS
@given(docs=documents, params=instance_params(), sop=st.booleans(), seed=st.integers(0, 2**32),
       words=st.integers(0, 700), data=st.data())
def test_the_c_planner_gives_pythons_plan_and_state(docs, params, sop, seed, words, data) -> None:
    unit = group_of(docs)
    pool = data.draw(pools(unit.n_docs))
    with_c, with_python, planned = c_and_python(unit, params, seed, words, sop, negatives_of(unit, pool))
    assert with_c == with_python
    assert planned == [True]  # the C path was taken (and gave Python's answer)


@SETTINGS
@given(docs=st.lists(st.lists(st.integers(1, 30), min_size=0, max_size=4), min_size=1, max_size=5),
       params=instance_params(), sop=st.booleans(), seed=st.integers(0, 2**32), data=st.data())
def test_documents_of_no_sentence_give_pythons_answer_or_its_error(docs, params, sop, seed, data) -> None:
    """A random B from a document of no sentence is an empty randint range for Python (an error):
    the C planner declines, and Python's planner raises its own error."""
    unit = group_of(docs)
    pool = data.draw(pools(unit.n_docs))
    with_c, with_python, planned = c_and_python(unit, params, seed, 0, sop, negatives_of(unit, pool))
    assert with_c == with_python
    assert planned in ([True], [False])


@pytest.mark.parametrize("sop", [False, True])
@pytest.mark.parametrize("docs", [[[5]], [[1]], [[3, 4, 200]], [[1], [1]], [[1, 1, 1, 1, 1, 1]], [[10**6, 1, 10**6]]])
def test_units_without_another_document(docs, sop) -> None:
    """One document and no pool, or a pool of A's origin only: continuations kept, one-sentence
    chunks dropped, each counted the same."""
    unit = group_of(docs)
    params = InstanceParams(max_seq_length=9, short_seq_prob=0.5, min_short_seq_length=2, cls_id=2, sep_id=3)
    for pool in (None, (group_of([[3, 3], [4]]), [7, 7], [7] * unit.n_docs), (group_of([]), [], [0] * unit.n_docs)):
        for seed in range(20):
            with_c, with_python, planned = c_and_python(unit, params, seed, seed, sop,
                                                        negatives_of(unit, pool))
            assert with_c == with_python and planned == [True]


def test_the_unit_as_its_own_negatives_explicitly() -> None:
    """A library caller's :func:`unit_negatives` (its exclusions a callable) plans as the default."""
    unit = group_of([[4, 9, 2], [1], [30, 30, 30, 2], [7, 7]])
    params = InstanceParams(max_seq_length=16, short_seq_prob=0.3, min_short_seq_length=2, cls_id=2, sep_id=3)
    for seed in range(30):
        default, _, _ = c_and_python(unit, params, seed, 0, False, lambda: None)
        with_c, with_python, planned = c_and_python(unit, params, seed, 0, False,
                                                    lambda: unit_negatives(unit))
        assert default == with_c == with_python and planned == [True]


def test_a_random_subclass_is_planned_by_python() -> None:
    """Another generator's draws are its own: only ``random.Random`` itself goes to C."""

    class Other(random.Random):
        def random(self) -> float:
            return 0.25

    unit = group_of([[4, 9, 2], [3, 3], [30, 2]])
    params = InstanceParams(max_seq_length=16, short_seq_prob=0.3, min_short_seq_length=2, cls_id=2, sep_id=3)
    with_c, with_python, planned = c_and_python(unit, params, 1, 0, False, lambda: None, cls=Other)
    assert with_c == with_python and planned == []


def test_a_short_length_above_the_longest_is_pythons_error() -> None:
    unit = group_of([[4, 9, 2], [3, 3]])
    params = InstanceParams(max_seq_length=8, short_seq_prob=1.0, min_short_seq_length=9, cls_id=2, sep_id=3)
    with_c, with_python, planned = c_and_python(unit, params, 1, 0, False, lambda: None)
    assert with_c == with_python and with_c[0][1] == "ValueError" and planned == [False]


def test_the_plan_is_int64_arrays_on_both_paths(monkeypatch, wire) -> None:
    unit = group_of([[4, 9, 2], [3, 3], [30, 2]])
    params = InstanceParams(max_seq_length=16, short_seq_prob=0.3, min_short_seq_length=2, cls_id=2, sep_id=3)
    for module in (wire, None):
        monkeypatch.setattr(native, "_wire", module)
        plan = plan_pairs(unit, params, random.Random(0))
        for values in (plan.a_lo, plan.a_hi, plan.b_lo, plan.b_hi, plan.is_random_next):
            assert isinstance(values, np.ndarray) and values.dtype == np.int64 and len(values) == len(plan)
        taken = plan.take([2, 0])
        assert taken.a_lo.tolist() == [plan.a_lo[2], plan.a_lo[0]]


def test_wire_plan_pairs_refuses_bad_arguments(wire) -> None:
    state = random.Random(0).getstate()[1]
    off = np.array([0, 3, 5], dtype=np.int64)
    starts = np.array([0, 2], dtype=np.int64)
    out = [np.empty(2, dtype=np.int64) for _ in range(5)]
    good = (off, starts, off, starts, 0, np.array([0, 1], dtype=np.int64), np.array([0], dtype=np.int64))
    assert wire.plan_pairs(state, False, 13, 0.1, 2, *good, *out) is not None
    with pytest.raises(TypeError):  # int32 offsets
        wire.plan_pairs(state, False, 13, 0.1, 2, off.astype(np.int32), *good[1:], *out)
    with pytest.raises(ValueError):
        wire.plan_pairs(state[:-1], False, 13, 0.1, 2, *good, *out)
    declined = [
        (np.array([0, 5, 3], dtype=np.int64), starts),  # offsets that do not ascend
        (off, np.array([0, 3], dtype=np.int64)),  # a document past the last sentence
    ]
    for bad_off, bad_starts in declined:
        assert wire.plan_pairs(state, False, 13, 0.1, 2, bad_off, bad_starts, *good[2:], *out) is None
    assert wire.plan_pairs(state, False, 0, 0.1, 2, *good, *out) is None  # max_num_tokens 0
    assert wire.plan_pairs(state, False, 13, 0.1, 2, *good, *[o[:0] for o in out]) is None  # no room


# --------------------------------------------------------------------------------------
# whole runs
# --------------------------------------------------------------------------------------


def _digests(out: Path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tfrecords"))}


@pytest.mark.parametrize("flags", [{}, {"sentence_order_prediction": True}, {"max_seq_length": 12},
                                   {"short_seq_prob": 0.5, "max_seq_length": 20}])
def test_runs_with_and_without_the_accelerator_write_the_same_shards(tmp_path, monkeypatch, flags) -> None:
    require_wire()
    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    runs: List[Optional[dict]] = []
    for name, module in (("c", native.wire()), ("python", None)):
        monkeypatch.setattr(native, "_wire", module)
        out = tmp_path / name
        assert main(base_args(metadata, vocab, out, dupe_factor=3, **flags)) == 0
        runs.append(_digests(out))
    assert runs[0] and runs[0] == runs[1]

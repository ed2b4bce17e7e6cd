"""--sentence_order_prediction (ALBERT SOP): B is A's true continuation, swapped with
probability 0.5; next_sentence_labels 1 = swapped. Negatives never come from another document."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from conftest import base_args  # noqa: E402
from objective_corpus import CLS, SEP, original_ids, read_examples, write_unique_corpus  # noqa: E402

from bert_data.tools import create as cli  # noqa: E402
from bert_data.instances import InstanceParams, plan_pairs  # noqa: E402
from conftest import make_group as build_group  # noqa: E402

SEQ, PRED = 40, 6


def params(**overrides) -> InstanceParams:
    values = dict(
        max_seq_length=SEQ, short_seq_prob=0.1, min_short_seq_length=2, cls_id=2, sep_id=3,
        sentence_order_prediction=True,
    )
    values.update(overrides)
    return InstanceParams(**values)


def unique_group(rng: random.Random, n_docs: int):
    """Documents of sentences whose token ids are the token's position: order is visible."""
    docs, next_id = [], 0
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(1, 7)):
            n = rng.randint(1, 25)
            sentences.append(np.arange(next_id, next_id + n))
            next_id += n
        docs.append(sentences)
    return build_group(docs)


def test_plan_labels_match_order_and_never_cross_documents():
    labels = []
    for seed in range(200):
        rng = random.Random(seed)
        group = unique_group(rng, rng.randint(1, 6))
        doc_of_token = np.repeat(np.arange(group.n_docs), np.diff(group.sent_offsets[group.doc_starts]))
        plan = plan_pairs(group, params(), random.Random(seed + 1000))
        for a_lo, a_hi, b_lo, b_hi, label in zip(plan.a_lo, plan.a_hi, plan.b_lo, plan.b_hi, plan.is_random_next):
            assert a_lo < a_hi and b_lo < b_hi
            assert (a_hi - a_lo) + (b_hi - b_lo) <= SEQ - 3
            assert doc_of_token[a_lo] == doc_of_token[b_lo] == doc_of_token[a_hi - 1] == doc_of_token[b_hi - 1]
            if label == 0:
                assert a_hi <= b_lo  # A precedes B
            else:
                assert label == 1 and b_hi <= a_lo  # swapped: B precedes A
            labels.append(label)
    assert len(labels) > 500 and 0.44 < np.mean(labels) < 0.56


def test_single_sentence_chunks_are_counted_not_paired_with_other_documents():
    group = build_group([[np.arange(0, 50)], [np.arange(50, 53)], [np.arange(53, 55), np.arange(55, 57)]])
    plan = plan_pairs(group, params(short_seq_prob=0.0), random.Random(0))
    # documents 0 and 1 are one sentence each: skipped and counted (ALBERT would pair them with
    # a random document and label that 1); document 2 gives one pair
    assert plan.negatives_unavailable == 2 and len(plan) == 1
    assert sorted([(plan.a_lo[0], plan.a_hi[0]), (plan.b_lo[0], plan.b_hi[0])]) == [(53, 55), (55, 57)]


def test_default_is_nsp_and_unchanged():
    group = unique_group(random.Random(5), 6)
    nsp = params(sentence_order_prediction=False)
    assert InstanceParams(**{k: v for k, v in vars(nsp).items() if k != "sentence_order_prediction"}) == nsp
    a = plan_pairs(group, nsp, random.Random(9))
    b = plan_pairs(group, params(), random.Random(9), sentence_order_prediction=False)
    def fields(plan):
        return {k: np.asarray(v).tolist() for k, v in vars(plan).items()}

    assert fields(a) == fields(b)


@pytest.fixture(scope="module")
def sop_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sop")
    corpus = write_unique_corpus(root / "c", [4, 1, 6, 3, 5, 2, 7, 1, 4, 3, 6, 2], [6, 11, 3, 14, 8, 5, 9])
    out = root / "out"
    args = base_args(
        corpus.metadata, corpus.vocab, out, sentence_order_prediction=True, single_sentence_per_line=True,
        max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=4, split_num=4,
    )
    assert cli.main(args) == 0
    return corpus, out, args


def test_records_label_matches_order(sop_run):
    corpus, out, _ = sop_run
    doc_of = corpus.doc_of()
    examples = read_examples(out)
    labels = []
    for ex in examples:
        assert set(ex) == {"input_ids", "input_mask", "segment_ids", "masked_lm_ids", "masked_lm_positions",
                           "masked_lm_weights", "next_sentence_labels"}
        ids = original_ids(ex)
        n = int(ex["input_mask"].sum())
        seg = ex["segment_ids"]
        first_sep = int(np.flatnonzero(ids[:n] == SEP)[0])
        assert ids[0] == CLS and ids[n - 1] == SEP and (seg[: first_sep + 1] == 0).all() and (seg[first_sep + 1 : n] == 1).all()
        a, b = ids[1:first_sep], ids[first_sep + 1 : n - 1]
        assert len(a) and len(b)
        assert len({doc_of[t] for t in np.concatenate([a, b]).tolist()}) == 1  # one document, always
        label = int(ex["next_sentence_labels"][0])
        if label == 0:
            assert a.max() < b.min()  # A, then its true continuation B
        else:
            assert label == 1 and b.max() < a.min()  # swapped
        labels.append(label)
    assert 0.3 < np.mean(labels) < 0.7


def test_manifest_documents_the_sop_label(sop_run):
    _, out, _ = sop_run
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["objective"] == "mlm+sop" and manifest["record_schema"] == "sop"
    assert "swapped" in manifest["schema"]["next_sentence_labels"]["description"]
    assert manifest["sop_single_segment_chunks"] > 0  # the one-sentence documents
    assert manifest["nsp_negatives_unavailable"] == 0


def test_byte_identical_rerun(sop_run, tmp_path):
    _, out, args = sop_run
    again = tmp_path / "again"
    rerun = [a if a != str(out) else str(again) for a in args]
    assert cli.main(rerun) == 0
    for shard in sorted(out.glob("*.tfrecords")):
        assert shard.read_bytes() == (again / shard.name).read_bytes()


def test_nothing_usable_for_sentence_order_prediction_gives_its_own_way(tmp_path, capsys) -> None:
    """helper-15: an SOP run with no second segment anywhere advised 'give more documents (a random
    B comes from another one)', which SOP never draws; it now names what SOP needs."""
    from bert_data.tools.create import main
    from conftest import base_args, write_corpus, write_vocab

    metadata = write_corpus(tmp_path / "corpus", n_docs=3)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = base_args(metadata, vocab, tmp_path / "out", max_seq_length=5, max_predictions_per_seq=1,
                     sentence_order_prediction=True, quiet=True)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sentence-order prediction swaps two segments of one document" in err[0], err
    assert "random B" not in err[0] and "longer --max_seq_length" in err[0]

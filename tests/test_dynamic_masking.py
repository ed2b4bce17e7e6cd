"""--disable_masking records + pretraining_dataset(dynamic_masking=True): masks drawn in tf.data."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from conftest import base_args, write_corpus, write_vocab  # noqa: E402
from objective_corpus import read_examples  # noqa: E402

from bert_data.tools import create as cli  # noqa: E402
from bert_data.reader.dynamic_masking import DynamicMaskingOptions, make_dynamic_masker  # noqa: E402
from bert_data.errors import ConfigError, VocabError  # noqa: E402
from bert_data.reader.dataset import pretraining_dataset  # noqa: E402
from bert_data.tokenization import load_vocab  # noqa: E402

SEQ, PRED = 32, 5
CLS, SEP, MASK, PAD = 101, 102, 103, 0
VOCAB = 30000


def synthetic(n: int, seed: int = 0):
    """n unmasked examples [CLS] tokens [SEP] pad, random lengths, token ids in [1000, VOCAB)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, SEQ), np.int32)
    mask = np.zeros((n, SEQ), np.int32)
    for i in range(n):
        real = int(rng.integers(4, SEQ + 1))
        ids[i, :real] = rng.integers(1000, VOCAB, real)
        ids[i, 0], ids[i, real - 1] = CLS, SEP
        if real > 6:
            ids[i, real // 2] = SEP  # a document separator inside
        mask[i, :real] = 1
    return ids, mask


def masked(ids, mask, seed, **kw):
    masker = make_dynamic_masker(SEQ, PRED, 0.15, VOCAB, MASK, [PAD, CLS, SEP, MASK], **kw)
    d = tf.data.Dataset.from_tensor_slices({"input_ids": ids, "input_mask": mask}).enumerate()
    d = d.map(lambda i, x: masker(x, tf.stack([tf.constant(seed, tf.int64), i]))).batch(len(ids))
    return {k: v.numpy() for k, v in next(iter(d)).items()}


@pytest.fixture(scope="module")
def draws():
    ids, mask = synthetic(3000)
    return ids, mask, masked(ids, mask, seed=7)


def test_80_10_10_and_positions(draws):
    ids, mask, out = draws
    counts = np.zeros(3)
    for row in range(len(ids)):
        used = out["masked_lm_weights"][row] > 0
        positions = out["masked_lm_positions"][row][used]
        real = int(mask[row].sum())
        candidates = np.flatnonzero(mask[row] & ~np.isin(ids[row], [CLS, SEP]))
        assert used.sum() == min(PRED, max(1, round(real * 0.15)), len(candidates))  # round half to even, like Python
        assert np.isin(positions, candidates).all()  # never [CLS]/[SEP]/separator/padding
        assert (np.diff(positions) > 0).all() and not used[used.sum():].any()
        assert (out["masked_lm_positions"][row][~used] == 0).all() and (out["masked_lm_ids"][row][~used] == 0).all()
        assert (out["masked_lm_ids"][row][used] == ids[row][positions]).all()
        untouched = np.setdiff1d(np.arange(SEQ), positions)
        assert (out["input_ids"][row][untouched] == ids[row][untouched]).all()
        new = out["input_ids"][row][positions]
        counts += [(new == MASK).sum(), (new == ids[row][positions]).sum(), ((new != MASK) & (new != ids[row][positions])).sum()]
    total = counts.sum()
    assert total > 8000
    mask_rate, keep_rate, random_rate = counts / total
    assert abs(mask_rate - 0.8) < 0.02 and abs(keep_rate - 0.1) < 0.02 and abs(random_rate - 0.1) < 0.02


def test_same_seed_same_masks_other_seed_other_masks(draws):
    ids, mask, out = draws
    again = masked(ids[:500], mask[:500], seed=7)
    for key in again:
        assert (again[key] == out[key][:500]).all()
    other = masked(ids[:500], mask[:500], seed=8)
    assert (other["masked_lm_positions"] != out["masked_lm_positions"][:500]).any()


def test_whole_word_masking_keeps_words_together():
    table = np.zeros(VOCAB, bool)
    table[20000:] = True  # ids >= 20000 are ## continuations
    ids, mask = synthetic(400, seed=3)
    out = masked(ids, mask, seed=1, is_continuation=table, mask_whole_word=True)
    for row in range(len(ids)):
        used = out["masked_lm_weights"][row] > 0
        chosen = set(out["masked_lm_positions"][row][used].tolist())
        real = int(mask[row].sum())
        assert len(chosen) <= min(PRED, max(1, round(real * 0.15)))
        for p in chosen:
            assert ids[row][p] not in (CLS, SEP)
            if p + 1 < real and table[ids[row][p + 1]] and ids[row][p + 1] not in (CLS, SEP):
                assert p + 1 in chosen  # the word's next piece
            if table[ids[row][p]] and ids[row][p - 1] not in (CLS, SEP):
                assert p - 1 in chosen  # and its previous one
        new = out["input_ids"][row]
        for p in chosen:  # one 80/10/10 choice per word: a [MASK]ed piece's word is all [MASK]
            if p + 1 in chosen and table[ids[row][p + 1]] and new[p] == MASK:
                assert new[p + 1] == MASK


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
    root = tmp_path_factory.mktemp("dyn")
    metadata, vocab = write_corpus(root / "c", n_docs=10), write_vocab(root / "vocab.txt")
    out = root / "out"
    assert cli.main(base_args(metadata, vocab, out, mlm_only=True, disable_masking=True, unmasked_format="ids", dupe_factor=1,
                              num_output_files=2, max_seq_length=SEQ, max_predictions_per_seq=PRED)) == 0
    return out, vocab


def test_unmasked_records_hold_two_features(unmasked):
    out, _ = unmasked
    examples = read_examples(out)
    assert examples and all(set(ex) == {"input_ids", "input_mask"} for ex in examples)
    assert all(len(ex["input_ids"]) == SEQ for ex in examples)
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["record_schema"] == "unmasked" and manifest["masking"].startswith("none")


def test_reader_round_trip(unmasked):
    out, vocab = unmasked
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    special = {tokens.index(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}

    def read(**kw):
        d = pretraining_dataset(str(out), 8, SEQ, 20, is_training=False, **kw)  # any P: unmasked records have none
        return [{k: v.numpy() for k, v in b.items()} for b in d]

    raw = read()
    assert set(raw[0]) == {"input_ids", "input_mask"}
    first = read(dynamic_masking=True, vocab_file=str(vocab), seed=11, nsp_compatible=True)
    second = read(dynamic_masking=True, vocab_file=str(vocab), seed=11, nsp_compatible=True)
    assert set(first[0]) == {"input_ids", "input_mask", "segment_ids", "next_sentence_labels", "masked_lm_positions",
                             "masked_lm_ids", "masked_lm_weights"}
    for a, b, r in zip(first, second, raw):
        for key in a:
            assert (a[key] == b[key]).all()  # same seed, same masks
        assert a["masked_lm_positions"].shape == (8, 20) and a["masked_lm_weights"].dtype == np.float32
        assert not a["segment_ids"].any() and not a["next_sentence_labels"].any()
        assert (a["input_mask"] == r["input_mask"]).all()
        for row in range(8):
            used = a["masked_lm_weights"][row] > 0
            positions = a["masked_lm_positions"][row][used]
            assert used.any() and not (set(r["input_ids"][row][positions].tolist()) & special)
            assert (a["masked_lm_ids"][row][used] == r["input_ids"][row][positions]).all()
    # the same masks when the settings come as an options object
    with_options = read(masking=DynamicMaskingOptions(vocab_file=str(vocab)), seed=11, nsp_compatible=True)
    for a, b in zip(first, with_options):
        for key in a:
            assert (a[key] == b[key]).all()
    # a training pipeline re-masks every epoch
    train = pretraining_dataset(str(out), 4, SEQ, PRED, dynamic_masking=True, vocab_file=str(vocab), seed=3,
                                shuffle_buffer=1, cycle_length=1)
    batches = [b["masked_lm_positions"].numpy() for b in train.take(200)]
    assert len({b.tobytes() for b in batches}) > 100


def test_reader_errors(unmasked, tmp_path):
    out, vocab = unmasked
    with pytest.raises(ConfigError, match="vocab_file"):
        pretraining_dataset(str(out), 4, SEQ, PRED, dynamic_masking=True)
    metadata, vocab2 = write_corpus(tmp_path / "c", n_docs=3), write_vocab(tmp_path / "vocab.txt")
    static = tmp_path / "static"
    assert cli.main(base_args(metadata, vocab2, static, mlm_only=True, max_seq_length=SEQ, max_predictions_per_seq=PRED)) == 0
    with pytest.raises(ConfigError, match="unmasked records"):
        pretraining_dataset(str(static), 4, SEQ, PRED, dynamic_masking=True, vocab_file=str(vocab2))
    batch = next(iter(pretraining_dataset(str(static), 2, SEQ, PRED, is_training=False)))
    assert set(batch) == {"input_ids", "input_mask", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"}


@pytest.mark.parametrize(
    "lines, message",
    [
        (["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the"], "lacks the special token"),  # no [UNK]
        (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "the"], "duplicate token"),
        (["[PAD]", "[UNK]", "[CLS]", "", "[SEP]", "[MASK]"], "blank line"),
    ],
)
def test_reader_rejects_a_vocab_the_writer_rejects(unmasked, tmp_path, lines, message):
    out, _ = unmasked
    bad = tmp_path / "bad_vocab.txt"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(VocabError, match=message) as writer_side:
        load_vocab(str(bad))
    with pytest.raises(VocabError, match=message) as reader_side:
        pretraining_dataset(str(out), 4, SEQ, PRED, dynamic_masking=True, vocab_file=str(bad))
    assert str(reader_side.value) == str(writer_side.value)


def test_whole_words_follow_the_writers_greedy_rule():
    """Words in random order, each taken if it still fits in the budget (instances._mask_whole_words),
    recomputed here from the masker's own stateless draws."""
    length, slots, prob, vocab = 48, 12, 0.25, 1000
    table = np.zeros(vocab, bool)
    table[600:] = True
    masker = make_dynamic_masker(length, slots, prob, vocab, 4, [0, 2, 3, 4], is_continuation=table, mask_whole_word=True)
    rng = np.random.default_rng(0)
    for t in range(150):
        real = int(rng.integers(3, length + 1))
        ids = np.zeros(length, np.int32)
        ids[:real] = rng.integers(10, vocab, real)
        ids[0], ids[real - 1] = 2, 3
        mask = (np.arange(length) < real).astype(np.int32)
        seed = tf.constant([5, t], tf.int64)
        out = masker({"input_ids": ids, "input_mask": mask}, seed)
        cand = (mask > 0) & ~np.isin(ids, [0, 2, 3, 4])
        word_start = cand & ~(np.concatenate([[False], cand[:-1]]) & table[ids])
        word_of = np.cumsum(word_start) - 1
        n_words = int(word_start.sum())
        word_len = np.bincount(word_of[cand], minlength=length)
        keys = tf.random.stateless_uniform([length], seed=tf.random.experimental.stateless_split(seed, num=3)[0]).numpy()
        order = np.argsort(np.where(np.arange(length) < n_words, keys, 2.0), kind="stable")[:n_words]
        budget = min(slots, max(1, round(real * prob)), int(cand.sum()))
        picked, chosen = 0, set()
        for w in order.tolist():
            if picked >= budget:
                break
            if picked + word_len[w] <= budget:
                picked += word_len[w]
                chosen.add(w)
        expected = [p for p in np.flatnonzero(cand).tolist() if word_of[p] in chosen]
        count = int(out["masked_lm_weights"].numpy().sum())
        assert out["masked_lm_positions"].numpy()[:count].tolist() == expected

"""``--disable_masking`` writes what the Cerebras Model Zoo's ``create_tfrecords_mlm_only.py
--disable_masking`` writes: per window a ``tf.train.SequenceExample`` whose ``feature_lists``
hold ``tokens``, the window's WordPiece strings ``[CLS] ... [SEP]`` unpadded, once (dupe 1), for
its BertMlmOnlyTfRecordsDynamicMaskProcessor. ``--unmasked_format ids`` keeps our int64 records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bert_data.format.example_wire import serialize_token_sequences, token_sequence_elements
from bert_data.format.tfrecord import iter_records
from bert_data.tools import create as cli
from bert_data.tools.inspect import main as inspect_main

from conftest import base_args, write_corpus, write_vocab

tf = pytest.importorskip("tensorflow")

# The Model Zoo reader's parse spec (BertMlmOnlyTfRecordsDynamicMaskProcessor), written out here.
MODEL_ZOO_SEQUENCE_FEATURES = {"tokens": tf.io.FixedLenSequenceFeature((), tf.string)}


def _tf_bytes(tokens) -> bytes:
    features = [tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.encode()])) for t in tokens]
    lists = tf.train.FeatureLists(feature_list={"tokens": tf.train.FeatureList(feature=features)})
    return tf.train.SequenceExample(feature_lists=lists).SerializeToString(deterministic=True)


def test_encoder_is_byte_identical_to_tensorflow() -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b", "é", "日本", "x" * 200]
    elements = token_sequence_elements(vocab)
    rng = np.random.default_rng(0)
    ids = np.zeros((50, 300), np.int64)
    mask = np.zeros((50, 300), np.int64)
    for row in range(50):
        n = int(rng.integers(2, 300))
        ids[row, :n] = [2, *rng.integers(5, len(vocab), n - 2), 3]
        mask[row, :n] = 1
    ours = serialize_token_sequences(ids, mask, elements)
    for row in range(50):
        n = int(mask[row].sum())
        assert ours[row] == _tf_bytes([vocab[i] for i in ids[row, :n]])


def _read_tokens(out) -> list:
    rows = []
    for shard in sorted(out.glob("*.tfrecords")):
        for record in iter_records(str(shard)):
            _, parsed = tf.io.parse_single_sequence_example(record, sequence_features=MODEL_ZOO_SEQUENCE_FEATURES)
            rows.append([t.decode() for t in parsed["tokens"].numpy()])
    return rows


def test_model_zoo_disable_masking_end_to_end(tmp_path, capsys, caplog) -> None:
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=10), write_vocab(tmp_path / "vocab.txt")
    known = set(vocab.read_text().split("\n"))
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        args = base_args(metadata, vocab, out, disable_masking=True, num_workers=workers, dupe_factor=10)
        assert cli.main(args, prog=cli.MLM_ONLY_PROG) == 0, capsys.readouterr().err
        outputs[workers] = {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}
    assert outputs[1] == outputs[2]
    assert "--dupe_factor 10 is taken as 1" in caplog.text
    out = tmp_path / "w1"
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["record_schema"] == "unmasked_tokens" and manifest["dupe_factor"] == 1
    rows = _read_tokens(out)
    assert len(rows) == manifest["n_examples"] > 0
    for tokens in rows:
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and 2 < len(tokens) <= 32
        assert set(tokens) <= known and "[MASK]" not in tokens
    capsys.readouterr()
    assert inspect_main([str(out), "--stats"]) == 2  # not our layout: one line naming the Model Zoo reader
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BertMlmOnlyTfRecordsDynamicMaskProcessor" in err[0]


def test_ids_format_and_flag_rules(tmp_path, capsys) -> None:
    metadata, vocab = write_corpus(tmp_path / "c", n_docs=6), write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "ids"
    assert cli.main(base_args(metadata, vocab, out, mlm_only=True, disable_masking=True, unmasked_format="ids")) == 0
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["record_schema"] == "unmasked" and set(manifest["schema"]) == {"input_ids", "input_mask"}
    capsys.readouterr()
    assert cli.main(base_args(metadata, vocab, tmp_path / "x", mlm_only=True, unmasked_format="ids")) == 2
    assert "--unmasked_format only applies with --disable_masking" in capsys.readouterr().err

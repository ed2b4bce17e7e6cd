"""bert_data.reader.dataset: the tf.data reader of the records create_tfrecords writes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from conftest import base_args, write_corpus, write_vocab  # noqa: E402

from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.errors import ConfigError, RecordFormatError  # noqa: E402
from bert_data.reader.dataset import (  # noqa: E402
    ReaderOptions,
    decode_record,
    detect_compression,
    pretraining_dataset,
    resolve_files,
)
from bert_data.format.schema import FEATURE_NAMES, tf_feature_spec  # noqa: E402
from bert_data.format.tfrecord import frame_records  # noqa: E402

SEQ, PRED = 32, 5
INT_FEATURES = [n for n in FEATURE_NAMES if n != "masked_lm_weights"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Tuple[Path, Path]:
    root = tmp_path_factory.mktemp("input_corpus")
    return write_corpus(root / "corpus", n_docs=14), write_vocab(root / "vocab.txt")


def build(corpus, out: Path, **extra) -> Path:
    metadata, vocab = corpus
    assert create_tfrecords(base_args(metadata, vocab, out, **extra)) == 0
    return out


@pytest.fixture(scope="module")
def plain(corpus, tmp_path_factory) -> Path:
    return build(corpus, tmp_path_factory.mktemp("plain") / "out", num_output_files=4)


@pytest.fixture(scope="module")
def gzipped(corpus, tmp_path_factory) -> Path:
    return build(corpus, tmp_path_factory.mktemp("gz") / "out", num_output_files=4, compression="gzip")


def shard_files(out: Path) -> List[str]:
    return [str(out / f"examples-{i}.tfrecords") for i in range(1, 5)]


def raw_examples(files: List[str], compression: str = "") -> List[Dict[str, np.ndarray]]:
    """Reference: every raw record, file by file, through tf.io.parse_single_example."""
    spec = tf_feature_spec(SEQ, PRED)
    return [
        {k: v.numpy() for k, v in tf.io.parse_single_example(record, spec).items()}
        for record in tf.data.TFRecordDataset(files, compression_type=compression)
    ]


def rows(dataset) -> List[Dict[str, np.ndarray]]:
    out = []
    for batch in dataset:
        batch = {k: v.numpy() for k, v in batch.items()}
        n = len(batch["input_ids"])
        out.extend({k: v[i] for k, v in batch.items()} for i in range(n))
    return out


def key(example: Dict[str, np.ndarray]) -> bytes:
    return b"|".join(np.asarray(example[n], dtype=np.float64).tobytes() for n in FEATURE_NAMES)


def assert_same_examples(got: List[Dict[str, np.ndarray]], want: List[Dict[str, np.ndarray]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(FEATURE_NAMES)
        for name in FEATURE_NAMES:
            np.testing.assert_array_equal(g[name], w[name], err_msg=name)


def test_round_trip_every_field(plain):
    manifest = json.loads((plain / "data_params.json").read_text())
    reference = raw_examples(shard_files(plain))
    assert len(reference) == manifest["n_examples"] > 20

    full = pretraining_dataset(str(plain), batch_size=1, max_seq_length=SEQ, max_predictions_per_seq=PRED,
                               is_training=False)
    assert_same_examples(rows(full), reference)

    batch_size = next(b for b in range(7, 20) if len(reference) % b)  # so that drop_remainder has something to drop
    dataset = pretraining_dataset(plain, batch_size, SEQ, PRED, is_training=False)
    batches = list(dataset)
    assert len(batches) == len(reference) // batch_size
    spec = tf_feature_spec(SEQ, PRED)
    for batch in batches:
        assert set(batch) == set(FEATURE_NAMES)
        for name, tensor in batch.items():
            assert tensor.shape == (batch_size, spec[name].shape[0]), name
            assert tensor.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32), name
    # static shapes too (drop_remainder=True), as TPU/XLA training needs
    for name, tensor_spec in dataset.element_spec.items():
        assert tensor_spec.shape.as_list() == [batch_size, spec[name].shape[0]]
    assert_same_examples(rows(batches), reference[: len(batches) * batch_size])


def test_pattern_forms_agree(plain):
    by_dir = resolve_files(plain)
    assert by_dir == shard_files(plain)  # natural order, manifest not included
    assert resolve_files(str(plain / "*.tfrecords")) == by_dir
    assert resolve_files([str(plain / "examples-[12].tfrecords"), str(plain / "examples-[34].tfrecords")]) == by_dir
    assert resolve_files(",".join(by_dir[::-1])) == by_dir[::-1]
    assert resolve_files([str(plain / "*.tfrecords"), by_dir[0]]) == by_dir  # duplicates once


def test_decode_record_casts_ints(plain):
    record = next(iter(tf.data.TFRecordDataset(shard_files(plain)[0])))
    decoded = decode_record(record, SEQ, PRED)
    reference = tf.io.parse_single_example(record, tf_feature_spec(SEQ, PRED))
    for name in FEATURE_NAMES:
        assert decoded[name].dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32)
        np.testing.assert_array_equal(decoded[name].numpy(), reference[name].numpy())


def test_gzip_round_trip(plain, gzipped):
    files = shard_files(gzipped)
    assert all(Path(f).read_bytes()[:2] == b"\x1f\x8b" for f in files if Path(f).stat().st_size)
    reference = raw_examples(files, "GZIP")
    assert_same_examples(reference, raw_examples(shard_files(plain)))  # same seed: same records
    for compression in ("auto", "gzip"):
        got = rows(pretraining_dataset(gzipped, 1, SEQ, PRED, is_training=False, compression=compression))
        assert_same_examples(got, reference)
    with pytest.raises(ConfigError, match="compression"):
        pretraining_dataset(gzipped, 1, SEQ, PRED, compression="zlib")


def test_mixed_compression_detected_per_file(plain, gzipped, tmp_path):
    mixed = [shard_files(plain)[0], shard_files(gzipped)[1]]
    got = rows(pretraining_dataset(mixed, 1, SEQ, PRED, is_training=False))
    want = raw_examples([mixed[0]]) + raw_examples([mixed[1]], "GZIP")
    assert_same_examples(got, want)


def test_manifest_mismatch(plain):
    with pytest.raises(RecordFormatError) as info:
        pretraining_dataset(plain, 4, 64, PRED)
    message = str(info.value)
    assert "data_params.json" in message and "max_seq_length=32" in message and "max_seq_length=64" in message
    with pytest.raises(RecordFormatError, match="max_predictions_per_seq=5.*max_predictions_per_seq=20"):
        pretraining_dataset(str(plain / "*.tfrecords"), 4, SEQ, 20, is_training=False)
    # the check can be switched off (the parse then fails later, inside tf.data)
    pretraining_dataset(plain, 4, 64, PRED, check_manifest=False)


def test_no_files(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordFormatError, match="no TFRecord files match.*empty"):
        pretraining_dataset(tmp_path / "empty", 4, SEQ, PRED)
    pattern = str(tmp_path / "nothing-*.tfrecords")
    with pytest.raises(RecordFormatError, match="nothing-"):
        pretraining_dataset(pattern, 4, SEQ, PRED)


def test_sharding_disjoint_and_covering(plain):
    all_examples = raw_examples(shard_files(plain))
    everything = Counter(key(e) for e in all_examples)
    per_shard = []
    for index in range(2):
        got = rows(pretraining_dataset(plain, 1, SEQ, PRED, is_training=False, num_shards=2, shard_index=index))
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2)
        via_context = rows(pretraining_dataset(plain, 1, SEQ, PRED, is_training=False, input_pipeline_context=context))
        assert_same_examples(via_context, got)
        # Dataset.shard over files: shard i reads files i, i+2 in order
        assert_same_examples(got, raw_examples(shard_files(plain)[index::2]))
        per_shard.append(Counter(key(e) for e in got))
    assert per_shard[0] and per_shard[1]
    assert not set(per_shard[0]) & set(per_shard[1])
    assert per_shard[0] + per_shard[1] == everything

    # training pipelines are sharded by file too
    shard_keys = [set(c) for c in per_shard]
    for index in range(2):
        train = pretraining_dataset(plain, 4, SEQ, PRED, is_training=True, num_shards=2, shard_index=index, seed=1)
        seen = {key(e) for e in rows(train.take(15))}
        assert seen <= shard_keys[index]


def test_bad_sharding_arguments(plain):
    with pytest.raises(ConfigError, match="gets no file"):
        pretraining_dataset(plain, 1, SEQ, PRED, num_shards=5, shard_index=4)
    with pytest.raises(ConfigError, match="together"):
        pretraining_dataset(plain, 1, SEQ, PRED, num_shards=2)
    with pytest.raises(ConfigError, match="shard_index"):
        pretraining_dataset(plain, 1, SEQ, PRED, num_shards=2, shard_index=2)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    with pytest.raises(ConfigError, match="not both"):
        pretraining_dataset(plain, 1, SEQ, PRED, input_pipeline_context=context, num_shards=2, shard_index=0)
    with pytest.raises(ConfigError, match="batch_size"):
        pretraining_dataset(plain, 0, SEQ, PRED)


def test_training_pipeline_repeats_shuffles_and_is_seedable(plain):
    all_examples = raw_examples(shard_files(plain))
    known = {key(e) for e in all_examples}
    n = len(all_examples)
    batch_size = 8
    steps = 2 * n // batch_size + 2  # more than two epochs: it must repeat
    dataset = pretraining_dataset(plain, batch_size, SEQ, PRED, is_training=True, seed=123)
    for name, tensor_spec in dataset.element_spec.items():
        assert tensor_spec.shape[0] == batch_size
        assert tensor_spec.dtype == (tf.float32 if name == "masked_lm_weights" else tf.int32)
    first = rows(dataset.take(steps))
    assert len(first) == steps * batch_size
    assert {key(e) for e in first} <= known
    assert len({key(e) for e in first}) > 0.9 * len(known)  # every file is read
    assert [key(e) for e in first[:n]] != [key(e) for e in all_examples]  # shuffled
    again = rows(pretraining_dataset(plain, batch_size, SEQ, PRED, is_training=True, seed=123).take(steps))
    assert [key(e) for e in again] == [key(e) for e in first]


def test_plain_file_whose_first_length_starts_with_gzip_magic_is_read_as_plain(plain, tmp_path):
    """A first record of 0x8b1f bytes makes a plain file start with 1f 8b, the gzip magic; the
    reader must tell it apart (by its valid length CRC), as iter_records and inspect_tfrecords do."""
    source = raw_examples(shard_files(plain))[0]
    source_record = next(iter(tf.data.TFRecordDataset(shard_files(plain)[0]))).numpy()
    pad_len = 0x8B1F - len(source_record) - 100  # below the target: protobuf framing adds a few bytes
    while True:  # an extra bytes feature (ignored by the parser) brings the record to 0x8b1f bytes
        example = tf.train.Example.FromString(source_record)
        example.features.feature["zz_padding"].bytes_list.value.append(b"x" * pad_len)
        record = example.SerializeToString()
        if len(record) >= 0x8B1F:
            break
        pad_len += 1
    assert len(record) == 0x8B1F
    data = frame_records([record, source_record])
    assert data[:2] == b"\x1f\x8b"
    path = tmp_path / "magic.tfrecords"
    path.write_bytes(data)
    assert detect_compression(str(path)) == ""
    got = rows(pretraining_dataset(str(path), 1, SEQ, PRED, is_training=False))
    assert_same_examples(got, [source, source])


def test_options_objects_and_keywords_agree(plain):
    by_keywords = rows(pretraining_dataset(plain, 1, SEQ, PRED, is_training=False, num_shards=2, shard_index=1))
    options = ReaderOptions(num_shards=2, shard_index=1)
    assert_same_examples(rows(pretraining_dataset(plain, 1, SEQ, PRED, is_training=False, options=options)), by_keywords)
    # a keyword overrides the object's field
    other = ReaderOptions(num_shards=2, shard_index=0)
    assert_same_examples(
        rows(pretraining_dataset(plain, 1, SEQ, PRED, is_training=False, options=other, shard_index=1)), by_keywords
    )
    with pytest.raises(ConfigError, match="'num_shard'"):
        pretraining_dataset(plain, 1, SEQ, PRED, num_shard=2)
    with pytest.raises(ConfigError, match="shuffle_buffer"):
        ReaderOptions(shuffle_buffer=0)
    with pytest.raises(ConfigError, match="record_schema"):
        pretraining_dataset(plain, 1, SEQ, PRED, record_schema="bert")

"""Tests of bert_data.format.tfrecord, .example_wire and .batch_decode: byte equality with
TensorFlow, round trips, reader errors."""

from __future__ import annotations

import gzip
import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.errors import RecordFormatError
from bert_data.format import batch_decode, example_wire, tfrecord
from bert_data.format.example_wire import parse_example, serialize_examples
from bert_data.format.tfrecord import frame_records, iter_records, tfrecord_compression
from bert_data.output.naming import natural_key
from bert_data.format.schema import NSP_FEATURES, feature_lengths

from conftest import require_wire

REPO = Path(__file__).resolve().parents[1]
BERT_ORDER = sorted((f.name, f.dtype) for f in NSP_FEATURES)

SPECIAL_INTS = [
    0, 1, 127, 128, 255, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
    2**35, 2**40, 2**56, 2**63 - 1, -1, -2, -127, -128, -(2**31), -(2**40), -(2**63),
]  # fmt: skip
SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, -1e-30, 1e-45, 3.4e38, -3.4e38, float("inf"), float("-inf")]


@pytest.fixture(scope="module")
def tf():
    tf = pytest.importorskip("tensorflow")
    return tf


def tf_example_bytes(tf, row: dict, order) -> bytes:
    feature = {}
    for name, dtype in order:
        values = row[name]
        if dtype == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def bert_batch(n: int, seed: int = 0, seq: int = 128, pred: int = 20) -> dict:
    rng = np.random.default_rng(seed)
    lengths = feature_lengths(seq, pred)
    out = {}
    for spec in NSP_FEATURES:
        k = lengths[spec.name]
        if spec.name in ("input_ids", "masked_lm_ids"):
            a = rng.integers(0, 30522, (n, k))
            a[:, k // 2 :] *= rng.integers(0, 2, (n, 1))  # half the rows padded with zeros
        elif spec.name == "masked_lm_positions":
            a = np.sort(rng.integers(0, seq, (n, k)), axis=1)
        elif spec.dtype == "float32":
            a = (rng.random((n, k)) < 0.8).astype(np.float32)
        else:
            a = rng.integers(0, 2, (n, k))
        out[spec.name] = a
    return out


# ----------------------------------------------------------------------------------------
# serialize_examples == TensorFlow deterministic bytes
# ----------------------------------------------------------------------------------------

int_values = st.one_of(st.sampled_from(SPECIAL_INTS), st.integers(0, 300), st.integers(-(2**63), 2**63 - 1))
float_values = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(width=32, allow_nan=False))


@st.composite
def batches(draw):
    n = draw(st.integers(0, 4))
    # Prefix-free names: for a key that is a prefix of another (``"a"``, ``"ab"``) the upb
    # protobuf backend's "deterministic" order is not the sorted order (it writes "ab" first,
    # while C++ protobuf writes "a" first); the BERT feature names are prefix-free.
    names = draw(
        st.lists(st.text(max_size=140), min_size=1, max_size=4, unique_by=lambda s: s.encode("utf-8")).filter(
            lambda ns: not any(a != b and b.startswith(a) for a in ns for b in ns)
        )
    )
    order = [(name, draw(st.sampled_from(["int64", "float32"]))) for name in sorted(names)]
    features = {}
    for name, dtype in order:
        k = draw(st.sampled_from([0, 1, 2, 3, 5, 17]))
        if dtype == "int64":
            vals = draw(st.lists(int_values, min_size=n * k, max_size=n * k))
            features[name] = np.array(vals, dtype=np.int64).reshape(n, k)
        else:
            vals = draw(st.lists(float_values, min_size=n * k, max_size=n * k))
            features[name] = np.array(vals, dtype=np.float32).reshape(n, k)
    return features, order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_serialize_matches_tensorflow(tf, batch):
    features, order = batch
    got = serialize_examples(features, order)
    n = next(iter(features.values())).shape[0]
    assert len(got) == n
    for i in range(n):
        row = {name: features[name][i] for name, _ in order}
        assert got[i] == tf_example_bytes(tf, row, order)
        parsed = parse_example(got[i])
        assert list(parsed) == [name for name, _ in order]
        for name, dtype in order:
            assert parsed[name].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(parsed[name], features[name][i])


def test_serialize_large_lengths_and_input_dtypes(tf):
    # Payloads > 16383 bytes need 3-byte length varints; long keys need 2-byte key lengths.
    rng = np.random.default_rng(1)
    n = 3
    features = {
        "a" * 200: rng.integers(-(2**63), 0, (n, 1700)),  # 10-byte varints: 17,000-byte payload
        "b": rng.random((n, 5000)).astype(np.float64),  # float64 input is rounded to float32, like TF
        "c": rng.integers(0, 2**31, (n, 3)).astype(np.uint32),
        "d": np.array([[True, False]] * n),
        "e": rng.integers(0, 100, (n, 4)).astype(np.int16),
        "f": np.full((n, 2), 2**63 - 1, np.uint64),
        "g": np.array([[np.nan, 1.0]] * n, np.float32),
    }
    order = [(k, "float32" if k in ("b", "g") else "int64") for k in sorted(features)]
    got = serialize_examples(features, order)
    for i in range(n):
        row = {k: features[k][i].astype(np.float32) if k in ("b", "g") else features[k][i] for k in features}
        assert got[i] == tf_example_bytes(tf, row, order)


def test_serialize_bert_batch_matches_tensorflow(tf):
    features = bert_batch(40, seed=3)
    got = serialize_examples(features, BERT_ORDER)
    for i in range(40):
        assert got[i] == tf_example_bytes(tf, {k: v[i] for k, v in features.items()}, BERT_ORDER)


def test_serialize_fixed_length_fast_path():
    # Every value fits in one byte: all records have the same length and no compaction is needed.
    features = {"x": np.arange(12).reshape(3, 4) % 100, "y": np.ones((3, 2), np.float32)}
    got = serialize_examples(features, [("x", "int64"), ("y", "float32")])
    assert len({len(r) for r in got}) == 1
    for i, rec in enumerate(got):
        parsed = parse_example(rec)
        np.testing.assert_array_equal(parsed["x"], features["x"][i])
        np.testing.assert_array_equal(parsed["y"], features["y"][i])


def test_serialize_input_validation():
    good = np.zeros((2, 3), np.int64)
    with pytest.raises(ValueError, match="missing"):
        serialize_examples({"a": good}, [("a", "int64"), ("b", "int64")])
    with pytest.raises(ValueError, match="rows"):
        serialize_examples({"a": good, "b": np.zeros((3, 3))}, [("a", "int64"), ("b", "int64")])
    with pytest.raises(ValueError, match="2-D"):
        serialize_examples({"a": np.zeros(3, np.int64)}, [("a", "int64")])
    with pytest.raises(TypeError, match="integer"):
        serialize_examples({"a": np.zeros((2, 3), np.float32)}, [("a", "int64")])
    with pytest.raises(ValueError, match="dtype"):
        serialize_examples({"a": good}, [("a", "string")])
    with pytest.raises(ValueError, match="int64"):
        serialize_examples({"a": np.full((1, 1), 2**63, np.uint64)}, [("a", "int64")])
    with pytest.raises(ValueError, match="duplicate"):
        serialize_examples({"a": good}, [("a", "int64"), ("a", "int64")])
    assert serialize_examples({"a": np.zeros((0, 3), np.int64)}, [("a", "int64")]) == []


def test_record_modules_do_not_import_tensorflow_or_protobuf():
    code = (
        "import sys, numpy as np, bert_data.format.batch_decode, bert_data.format.tfrecord as t, "
        "bert_data.format.example_wire as w;"
        "t.frame_records(w.serialize_examples({'a': np.ones((2, 2), np.int64)}, [('a', 'int64')]));"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'tensorflow' or m.startswith('google.protobuf')];"
        "assert not bad, bad"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(REPO))


# ----------------------------------------------------------------------------------------
# frame_records / crc32c
# ----------------------------------------------------------------------------------------


def test_masked_crc_known_values():
    assert tfrecord.crc32c(b"") == 0
    assert tfrecord.crc32c(b"123456789") == 0xE3069283  # the CRC32C check value
    assert tfrecord._crc32c_pure(b"123456789") == 0xE3069283
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 100, 1000):
        data = rng.bytes(size)
        assert tfrecord._crc32c_pure(data) == tfrecord.crc32c(data)
    crc = tfrecord.crc32c(b"abc")
    assert tfrecord.masked_crc32c(b"abc") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def test_pure_python_crc_fallback_when_google_crc32c_missing():
    code = (
        "import sys; sys.modules['google_crc32c'] = None\n"
        "import bert_data.format.tfrecord as r\n"
        "assert r.CRC32C_IMPLEMENTATION == 'pure-python', r.CRC32C_IMPLEMENTATION\n"
        "data = r.frame_records([b'abc', b''])\n"
        "assert list(r.iter_records(__import__('io').BytesIO(data))) == [b'abc', b'']\n"
        "print(data.hex())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(REPO), capture_output=True)
    assert bytes.fromhex(out.stdout.decode().strip()) == frame_records([b"abc", b""])


def test_frame_records_matches_tfrecordwriter(tf, tmp_path):
    rng = np.random.default_rng(2)
    payloads = [b"", b"x", rng.bytes(127), rng.bytes(70_000)] + serialize_examples(bert_batch(20), BERT_ORDER)
    path = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for p in payloads:
            w.write(p)
    assert path.read_bytes() == frame_records(payloads)
    assert frame_records(iter(payloads)) == frame_records(payloads)  # any iterable
    assert frame_records([]) == b""


# ----------------------------------------------------------------------------------------
# Round trips through TensorFlow's reader and parser
# ----------------------------------------------------------------------------------------


def read_with_tf(tf, path, compression_type=""):
    from bert_data.format.schema import tf_feature_spec

    spec = tf_feature_spec(128, 20)
    ds = tf.data.TFRecordDataset([str(path)], compression_type=compression_type)
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()} for r in ds]


def assert_same_batch(parsed_rows, features):
    n = next(iter(features.values())).shape[0]
    assert len(parsed_rows) == n
    for i, row in enumerate(parsed_rows):
        assert set(row) == set(features)
        for name, values in features.items():
            np.testing.assert_array_equal(row[name], values[i])


def test_round_trip_through_tensorflow(tf, tmp_path):
    features = bert_batch(50, seed=7)
    path = tmp_path / "plain.tfrecord"
    path.write_bytes(frame_records(serialize_examples(features, BERT_ORDER)))
    parsed = read_with_tf(tf, path)
    assert_same_batch(parsed, features)
    assert parsed[0]["input_ids"].dtype == np.int64 and parsed[0]["masked_lm_weights"].dtype == np.float32


def test_gzip_round_trip_through_tensorflow(tf, tmp_path):
    features = bert_batch(30, seed=8)
    path = tmp_path / "z.tfrecord.gz"
    path.write_bytes(gzip.compress(frame_records(serialize_examples(features, BERT_ORDER))))
    assert_same_batch(read_with_tf(tf, path, "GZIP"), features)


def test_tensorflow_reads_multi_member_gzip(tf, tmp_path):
    # Two separately gzipped chunks, concatenated: TF's ZlibInputStream must read both members.
    features = bert_batch(30, seed=9)
    recs = serialize_examples(features, BERT_ORDER)
    path = tmp_path / "multi.tfrecord.gz"
    path.write_bytes(gzip.compress(frame_records(recs[:13])) + gzip.compress(frame_records(recs[13:])))
    assert_same_batch(read_with_tf(tf, path, "GZIP"), features)
    assert list(iter_records(path)) == recs  # and so does iter_records (Python's gzip module)


# ----------------------------------------------------------------------------------------
# iter_records
# ----------------------------------------------------------------------------------------


class ReadOnlyStream:
    """A non-seekable file object with only read()."""

    def __init__(self, data: bytes, chunk: int = 5):
        self._data, self._pos, self._chunk = data, 0, chunk

    def read(self, size: int = -1) -> bytes:
        size = self._chunk if size < 0 else min(size, self._chunk)  # short reads on purpose
        out = self._data[self._pos : self._pos + size]
        self._pos += len(out)
        return out


PAYLOADS = [b"first", b"", b"x" * 300, bytes(range(256))]


def test_iter_records_round_trip(tmp_path):
    data = frame_records(PAYLOADS)
    path = tmp_path / "r.tfrecord"
    path.write_bytes(data)
    assert list(iter_records(path)) == PAYLOADS
    assert list(iter_records(str(path))) == PAYLOADS
    with open(path, "rb") as f:
        assert list(iter_records(f)) == PAYLOADS
        assert not f.closed  # a caller's file object is left open
    assert list(iter_records(io.BytesIO(data))) == PAYLOADS
    assert list(iter_records(ReadOnlyStream(data))) == PAYLOADS
    assert list(iter_records(io.BytesIO(b""))) == []


def test_iter_records_gzip_detection(tmp_path):
    data = frame_records(PAYLOADS)
    path = tmp_path / "r.any-name"
    path.write_bytes(gzip.compress(data))
    assert list(iter_records(path)) == PAYLOADS
    assert list(iter_records(ReadOnlyStream(gzip.compress(data)))) == PAYLOADS
    assert list(iter_records(io.BytesIO(gzip.compress(b"")))) == []


def test_iter_records_plain_file_starting_with_gzip_magic():
    # A record of length 0x8b1f makes a plain file start with 1f 8b; its valid length CRC tells it apart.
    payload = b"z" * 0x8B1F
    data = frame_records([payload, b"tail"])
    assert data[:2] == b"\x1f\x8b"
    assert list(iter_records(io.BytesIO(data))) == [payload, b"tail"]


def test_tfrecord_compression_rule():
    plain = frame_records(PAYLOADS)
    assert tfrecord_compression(plain[:12]) == "none"
    assert tfrecord_compression(gzip.compress(plain)[:12]) == "gzip"
    assert tfrecord_compression(gzip.compress(b"")[:12]) == "gzip"
    assert tfrecord_compression(b"") == "none" and tfrecord_compression(b"\x1f") == "none"
    assert tfrecord_compression(b"\x1f\x8b") == "gzip"  # too short to be a frame header
    # a plain file whose first record length starts with 1f 8b: its length CRC is valid
    magic_plain = frame_records([b"z" * 0x8B1F])
    assert magic_plain[:2] == b"\x1f\x8b" and tfrecord_compression(magic_plain[:12]) == "none"
    assert tfrecord_compression(magic_plain) == "none"  # only the first 12 bytes count
    broken = bytearray(magic_plain[:12])
    broken[9] ^= 1  # bad length CRC: not a frame header, so gzip
    assert tfrecord_compression(bytes(broken)) == "gzip"


def test_natural_key_orders_shards():
    names = ["examples-10.tfrecords", "examples-2.tfrecords", "examples-1.tfrecords"]
    assert sorted(names, key=natural_key) == ["examples-1.tfrecords", "examples-2.tfrecords", "examples-10.tfrecords"]


def test_iter_records_truncated_raises_with_offset(tmp_path):
    data = frame_records(PAYLOADS)
    boundaries = {0}
    pos = 0
    for p in PAYLOADS:
        pos += 16 + len(p)
        boundaries.add(pos)
    for cut in range(len(data)):
        path = tmp_path / "t.tfrecord"
        path.write_bytes(data[:cut])
        if cut in boundaries:
            assert len(list(iter_records(path))) == sorted(boundaries).index(cut)
            continue
        frame_start = max(b for b in boundaries if b < cut)
        with pytest.raises(RecordFormatError, match=r"truncated") as info:
            list(iter_records(path))
        assert str(path) in str(info.value)
        assert f"byte offset {frame_start}" in str(info.value)


def test_iter_records_detects_every_corrupted_byte():
    data = frame_records(PAYLOADS)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x40
        with pytest.raises(RecordFormatError, match="CRC|truncated"):
            list(iter_records(io.BytesIO(bytes(bad))))


def test_iter_records_corruption_message_and_verify_false():
    data = frame_records(PAYLOADS)
    second = 16 + len(PAYLOADS[0])
    bad = bytearray(data)
    bad[second + 12] ^= 1  # the second payload is empty: this is its data CRC
    with pytest.raises(RecordFormatError, match=rf"bad data CRC .* byte offset {second}\b"):
        list(iter_records(io.BytesIO(bytes(bad))))
    bad = bytearray(data)
    bad[12] ^= 1  # first byte of the first payload
    with pytest.raises(RecordFormatError, match=r"bad data CRC .* byte offset 0\b"):
        list(iter_records(io.BytesIO(bytes(bad))))
    assert list(iter_records(io.BytesIO(bytes(bad)), verify=False))[0] == b"girst"
    bad = bytearray(data)
    bad[second] ^= 1  # the second frame's length
    with pytest.raises(RecordFormatError, match=rf"bad length CRC .* byte offset {second}\b"):
        list(iter_records(io.BytesIO(bytes(bad))))


def test_iter_records_truncated_gzip(tmp_path):
    z = gzip.compress(frame_records(PAYLOADS * 20))
    path = tmp_path / "t.gz"
    path.write_bytes(z[: len(z) // 2])
    with pytest.raises(RecordFormatError, match=str(path).replace("\\", "\\\\")):
        list(iter_records(path))
    path.write_bytes(z[:-3])  # trailer cut: gzip reports the end of stream
    with pytest.raises(RecordFormatError):
        list(iter_records(path))


def test_iter_records_missing_file(tmp_path):
    with pytest.raises(RecordFormatError, match="cannot open"):
        list(iter_records(tmp_path / "nope.tfrecord"))


# ----------------------------------------------------------------------------------------
# parse_example
# ----------------------------------------------------------------------------------------


def _varint(v: int) -> bytes:
    return example_wire.varint_bytes(v)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def test_parse_example_round_trip():
    features = bert_batch(25, seed=11)
    for i, rec in enumerate(serialize_examples(features, BERT_ORDER)):
        parsed = parse_example(rec)
        for name, values in features.items():
            np.testing.assert_array_equal(parsed[name], values[i])


def test_parse_example_unpacked_and_bytes_list(tf):
    # Unpacked repeated fields, as an old writer could emit them.
    ints = [0, 300, -5, 2**40]
    int64_list = b"".join(_varint(1 << 3 | 0) + _varint(v) for v in ints)
    float_list = b"".join(_varint(1 << 3 | 5) + struct.pack("<f", v) for v in (1.5, -0.0))
    bytes_list = _ld(1, b"ab") + _ld(1, b"") + _ld(1, b"\xff")
    entries = [
        _ld(1, _ld(1, b"b") + _ld(2, _ld(1, bytes_list))),
        _ld(1, _ld(1, b"f") + _ld(2, _ld(2, float_list))),
        _ld(1, _ld(1, b"i") + _ld(2, _ld(3, int64_list))),
        _ld(1, _ld(1, b"none") + _ld(2, b"")),
    ]
    data = _ld(1, b"".join(entries))
    parsed = parse_example(data)
    assert parsed["b"] == [b"ab", b"", b"\xff"]
    np.testing.assert_array_equal(parsed["i"], np.array(ints, np.int64))
    np.testing.assert_array_equal(parsed["f"], np.array([1.5, -0.0], np.float32))
    assert np.signbit(parsed["f"][1])
    assert parsed["none"] == []
    # TF parses our hand-made unpacked bytes the same way.
    ex = tf.train.Example.FromString(data)
    assert list(ex.features.feature["i"].int64_list.value) == ints
    assert list(ex.features.feature["b"].bytes_list.value) == [b"ab", b"", b"\xff"]


def test_parse_example_of_tensorflow_bytes_list(tf):
    ex = tf.train.Example(
        features=tf.train.Features(
            feature={
                "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"hello", b"\x00\x01"])),
                "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 2**63 - 1, 7])),
                "e": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
            }
        )
    )
    parsed = parse_example(ex.SerializeToString(deterministic=True))
    assert parsed["s"] == [b"hello", b"\x00\x01"]
    np.testing.assert_array_equal(parsed["n"], [-1, 2**63 - 1, 7])
    assert parsed["e"].dtype == np.int64 and parsed["e"].size == 0


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05\x0a",  # length overruns the message
        b"\x0a",  # truncated varint
        b"\x0a\x04\x0a\x02\x0a\xff",  # nested truncated varint
        b"\x0b",  # wire type 3 (groups) unsupported
        b"\x0a\x07\x0a\x05\x12\x03\x12\x01\x0a",  # float list length overruns
        _ld(1, _ld(1, _ld(2, _ld(2, _ld(1, b"\x00\x00\x80")))))[:],  # packed floats not a multiple of 4
    ],
)
def test_parse_example_malformed(data):
    with pytest.raises(RecordFormatError, match="malformed"):
        parse_example(data)


# ----------------------------------------------------------------------------------------
# iter_record_batches: iter_records' payloads and errors, in batches
# ----------------------------------------------------------------------------------------


def batch_payloads(path, chunk_bytes: int = 64):
    """(payloads, error message or None) read by iter_record_batches, checking the batches' indices."""
    out = []
    try:
        for batch in batch_decode.iter_record_batches(path, chunk_bytes=chunk_bytes):
            assert batch.first == len(out)
            out += [batch.payload(i) for i in range(len(batch))]
    except RecordFormatError as exc:
        return out, str(exc)
    return out, None


def reference_payloads(path):
    out = []
    try:
        for payload in iter_records(path):
            out.append(payload)
    except RecordFormatError as exc:
        return out, str(exc)
    return out, None


@pytest.mark.parametrize("chunk_bytes", [1, 13, 64, 1 << 20])
def test_iter_record_batches_round_trip(tmp_path, chunk_bytes, impl):
    big = bytes(range(256)) * 40  # a record larger than most chunks
    payloads = PAYLOADS + [big] + PAYLOADS
    path = tmp_path / "r.tfrecord"
    path.write_bytes(frame_records(payloads))
    assert batch_payloads(path, chunk_bytes) == (payloads, None)
    path.write_bytes(gzip.compress(frame_records(payloads)))
    assert batch_payloads(path, chunk_bytes) == (payloads, None)
    path.write_bytes(b"")
    assert batch_payloads(path, chunk_bytes) == ([], None)


def test_iter_record_batches_position_reaches_the_file_size(tmp_path, impl):
    path = tmp_path / "r.tfrecord"
    data = frame_records(PAYLOADS * 50)
    path.write_bytes(data)
    positions = [batch.position for batch in batch_decode.iter_record_batches(path, chunk_bytes=100)]
    assert positions == sorted(positions) and positions[-1] == len(data)


def test_iter_record_batches_truncated_like_iter_records(tmp_path, impl):
    data = frame_records(PAYLOADS)
    path = tmp_path / "t.tfrecord"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        assert batch_payloads(path, 16) == reference_payloads(path), cut


def test_iter_record_batches_corruption_like_iter_records(tmp_path, impl):
    data = frame_records(PAYLOADS)
    path = tmp_path / "c.tfrecord"
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x40
        path.write_bytes(bytes(bad))
        got = batch_payloads(path, 40)
        assert got == reference_payloads(path), i
        assert got[1] is not None


def test_iter_record_batches_damaged_gzip_like_iter_records(tmp_path, impl):
    z = gzip.compress(frame_records(PAYLOADS * 20))
    path = tmp_path / "t.gz"
    for damaged in (z[: len(z) // 2], z[:-3], z[:40] + bytes(20) + z[60:]):
        path.write_bytes(damaged)
        got = batch_payloads(path, 100)
        assert got == reference_payloads(path)
        assert got[1] is not None and str(path) in got[1]


def test_iter_record_batches_missing_file(tmp_path):
    with pytest.raises(RecordFormatError, match="cannot open"):
        list(batch_decode.iter_record_batches(tmp_path / "nope.tfrecord"))


# ----------------------------------------------------------------------------------------
# decode_examples: the batch decoder agrees with parse_example
# ----------------------------------------------------------------------------------------

nonneg_values = st.one_of(st.sampled_from([v for v in SPECIAL_INTS if 0 <= v < 2**63]), st.integers(0, 300))


@st.composite
def layouts(draw):
    """A batch of a fixed layout (every list non-empty, int64 values >= 0), serialized, and some
    of its records damaged: (payloads, features for decode_examples, which were damaged)."""
    n = draw(st.integers(1, 6))
    names = sorted(draw(st.lists(st.sampled_from(["a", "ids", "mask", "w", "labels", "zz"]), min_size=1, max_size=4, unique=True)))
    order = [(name, draw(st.sampled_from(["int64", "float32"]))) for name in names]
    features = {}
    spec = []
    for name, dtype in order:
        k = draw(st.sampled_from([1, 2, 3, 7]))
        if dtype == "int64":
            vals = draw(st.lists(nonneg_values, min_size=n * k, max_size=n * k))
            features[name] = np.array(vals, dtype=np.uint64).astype(np.int64).reshape(n, k)
        else:
            vals = draw(st.lists(float_values, min_size=n * k, max_size=n * k))
            features[name] = np.array(vals, dtype=np.float32).reshape(n, k)
        spec.append((name, dtype, k))
    payloads = serialize_examples(features, order)
    damaged = set()
    for i in range(n):
        if draw(st.booleans()):
            continue
        data = bytearray(payloads[i])
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = bytes([draw(st.integers(0, 255))])
        elif kind == "delete" and at < len(data):
            del data[at]
        else:
            data = data[:at]
        if bytes(data) != payloads[i]:
            payloads[i] = bytes(data)
            damaged.add(i)
    return payloads, spec, damaged


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a.dtype == b.dtype == np.float32 and a.shape == b.shape and a.view(np.uint32).tolist() == b.view(np.uint32).tolist()
    return a.shape == b.shape and a.tolist() == b.tolist()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layouts(), st.booleans())
def test_decode_examples_agrees_with_parse_example(impl, layout, small_ints):
    payloads, spec, damaged = layout
    data = b"".join(payloads)
    lengths = np.array([len(p) for p in payloads], np.int64)
    starts = np.cumsum(lengths) - lengths
    arrays, ok = batch_decode.decode_examples(data, starts, lengths, spec, small_ints=small_ints)
    assert ok.dtype == bool and ok.shape == (len(payloads),)
    assert set(arrays) == {name for name, _, _ in spec}
    for row, i in enumerate(np.flatnonzero(ok)):
        parsed = parse_example(payloads[i])  # every decoded record is one parse_example reads the same
        assert sorted(parsed) == sorted(arrays)
        for name, dtype, k in spec:
            assert isinstance(parsed[name], np.ndarray) and parsed[name].dtype == np.dtype(dtype)
            assert arrays[name].shape[1] == k
            assert _same_values(parsed[name], arrays[name][row])
    for i in set(range(len(payloads))) - damaged:
        assert ok[i]  # every undamaged record (the writer's own encoding) is decoded in bulk


def test_decode_examples_bert_batch(impl):
    features = bert_batch(300, seed=5)
    order = BERT_ORDER
    payloads = serialize_examples(features, order)
    lengths = np.array([len(p) for p in payloads], np.int64)
    starts = np.cumsum(lengths) - lengths
    spec = [(name, dtype, features[name].shape[1]) for name, dtype in order]
    for small in (False, True):
        arrays, ok = batch_decode.decode_examples(b"".join(payloads), starts, lengths, spec, small_ints=small)
        assert ok.all()
        for name, _ in order:
            np.testing.assert_array_equal(arrays[name], features[name])
            if small and features[name].dtype.kind == "i":
                assert arrays[name].dtype == np.int32
    # another length than the layout's: left to parse_example, record by record
    short = [(name, dtype, k + 1 if name == "input_ids" else k) for name, dtype, k in spec]
    _, ok = batch_decode.decode_examples(b"".join(payloads), starts, lengths, short)
    assert not ok.any()


def test_decode_examples_every_changed_byte(impl):
    """Change each byte of one record of a batch in turn (low bit: a varint keeps its width, so
    the record keeps the first record's layout): it is either refused, or read exactly as
    parse_example reads it; the other records are decoded all the same."""
    features = bert_batch(6, seed=9, seq=16, pred=3)
    spec = [(name, dtype, features[name].shape[1]) for name, dtype in BERT_ORDER]
    payloads = serialize_examples(features, BERT_ORDER)
    lengths = np.array([len(p) for p in payloads], np.int64)
    starts = np.cumsum(lengths) - lengths
    target = 3
    for at in range(len(payloads[target])):
        for bit in (0x01, 0x80):
            changed = bytearray(payloads[target])
            changed[at] ^= bit
            data = b"".join(payloads[:target] + [bytes(changed)] + payloads[target + 1 :])
            arrays, ok = batch_decode.decode_examples(data, starts, lengths, spec)
            assert ok[[i for i in range(6) if i != target]].all()
            if ok[target]:
                parsed = parse_example(bytes(changed))
                row = int(np.flatnonzero(ok).tolist().index(target))
                assert sorted(parsed) == sorted(arrays)
                for name in arrays:
                    assert isinstance(parsed[name], np.ndarray) and parsed[name].dtype == arrays[name].dtype
                    assert _same_values(parsed[name], arrays[name][row]), (at, bit, name)


def test_decode_examples_mixed_header_layouts(impl):
    """Records whose length varints have different widths (payloads either side of 128 bytes,
    as MSL-64 input_ids are): several header layouts in one batch, all decoded, all right."""
    rng = np.random.default_rng(4)
    n, k = 200, 100
    ids = rng.integers(0, 128, (n, k))
    wide = rng.integers(0, k + 1, n)  # how many 2-byte values each record has: payloads of 100..200 bytes
    for i in range(n):
        ids[i, : wide[i]] = rng.integers(128, 16384, wide[i])
    ids[::7, 0] = 2**40  # and some 6-byte values
    features = {"input_ids": ids, "input_mask": rng.integers(0, 2, (n, k)), "w": rng.random((n, 3)).astype(np.float32)}
    order = [("input_ids", "int64"), ("input_mask", "int64"), ("w", "float32")]
    payloads = serialize_examples(features, order)
    lengths = np.array([len(p) for p in payloads], np.int64)
    sizes = k + wide + 5 * (np.arange(n) % 7 == 0)
    assert (sizes < 128).any() and (sizes >= 128).any()
    starts = np.cumsum(lengths) - lengths
    arrays, ok = batch_decode.decode_examples(b"".join(payloads), starts, lengths, [(n_, d, features[n_].shape[1]) for n_, d in order])
    assert ok.all()
    for name, _ in order:
        np.testing.assert_array_equal(arrays[name], features[name])


# ----------------------------------------------------------------------------------------
# The C accelerator against the numpy implementations it replaces
# ----------------------------------------------------------------------------------------


@pytest.fixture
def wire():
    require_wire()
    return batch_decode._wire


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 7))
def test_wire_crc32c_is_crc32c(data, offset):
    require_wire()
    import google_crc32c

    view = memoryview(bytes(offset) + data)[offset:]  # every alignment of the first byte
    assert batch_decode._wire.crc32c(view) == google_crc32c.value(data)


@st.composite
def frame_streams(draw):
    """TFRecord bytes of a few payloads, then perhaps damaged: a byte changed, bytes cut off the
    end, a byte inserted, or garbage after the frames."""
    payloads = draw(st.lists(st.binary(max_size=40), max_size=6))
    data = bytearray(frame_records(payloads))
    kind = draw(st.sampled_from(["none", "flip", "truncate", "insert", "garbage"]))
    at = draw(st.integers(0, len(data)))
    if kind == "flip" and at < len(data):
        data[at] ^= draw(st.integers(1, 255))
    elif kind == "truncate":
        data = data[:at]
    elif kind == "insert":
        data[at:at] = bytes([draw(st.integers(0, 255))])
    elif kind == "garbage":
        data += draw(st.binary(min_size=1, max_size=30))
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(frame_streams())
def test_wire_cut_frames_agrees_with_numpy(data):
    require_wire()
    c_starts, c_lengths, c_end, c_bad = batch_decode._cut_frames_c(data)
    n_starts, n_lengths, n_end, n_bad = batch_decode._cut_frames_numpy(data, {})
    assert (c_starts.tolist(), c_lengths.tolist(), c_end, c_bad) == (n_starts.tolist(), n_lengths.tolist(), n_end, n_bad)


def test_wire_cut_frames_huge_length_is_incomplete_not_a_crash(wire):
    """A valid header announcing 2**63 bytes: an incomplete frame (the next chunk), no overflow."""
    length = struct.pack("<Q", 2**63 + 5)
    head = length + struct.pack("<I", tfrecord.masked_crc32c(length))
    starts, lengths, end, bad = batch_decode._cut_frames_c(frame_records([b"ab"]) + head)
    assert (lengths.tolist(), end, bad) == ([2], 18, False)
    assert batch_decode._cut_frames_numpy(frame_records([b"ab"]) + head, {})[2:] == (18, False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.booleans())
def test_wire_decode_agrees_with_numpy(layout, small_ints):
    """The same records decoded, to the same values (int32 with small_ints exactly when every
    decoded value is below 2**28)."""
    require_wire()
    payloads, spec, _ = layout
    data = b"".join(payloads)
    lengths = np.array([len(p) for p in payloads], np.int64)
    starts = np.cumsum(lengths) - lengths
    entries = [
        (b"\x0a" + example_wire.varint_bytes(len(name)) + name.encode() + b"\x12", b"\x1a" if dtype == "int64" else b"\x12")
        for name, dtype, _ in spec
    ]
    c_arrays, c_ok = batch_decode._decode_examples_c(data, starts, lengths, spec, [key for key, _ in entries], small_ints)
    n_arrays, n_ok = batch_decode._decode_examples_numpy(data, starts, lengths, spec, entries, small_ints)
    assert c_ok.tolist() == n_ok.tolist()
    for name, dtype, k in spec:
        assert c_arrays[name].shape == n_arrays[name].shape == (int(c_ok.sum()), k)
        assert _same_values(c_arrays[name], n_arrays[name])
        if dtype == "int64":
            small = small_ints and bool((c_arrays[name] < 2**28).all())
            assert c_arrays[name].dtype == (np.int32 if small else np.int64)


def test_wire_decode_rejects_bad_arguments(wire):
    ok = np.zeros(1, np.uint8)
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError):  # an output too small for the rows
        wire.decode_fixed(b"x", one, one, (b"k",), b"i", (3,), (np.zeros(2, np.int64),), ok, False)
    with pytest.raises(TypeError):
        wire.decode_fixed(b"x", one, one, ["k"], b"i", (3,), (np.zeros(3, np.int64),), ok, False)
    with pytest.raises(BufferError):  # a read-only output
        wire.cut_frames(b"x" * 32, np.zeros(3, np.int64), b"\0" * 24)
    ids = np.array([[2, 5, 3]], np.int32)
    params = (1, 3, 0, 2, 3, 4, 0, -1, False, False, True, 1, 2, 4, 8)  # a vocabulary of 0 ids
    with pytest.raises(ValueError, match="vocabulary"):
        wire.clean_rows((ids, ids, None, None, None, None, None), params, np.zeros(8, np.uint8),
                        np.zeros(1, np.int64), np.zeros(1, np.int64))
    # a row outside the buffer is not ok, not a crash
    assert wire.decode_fixed(b"x", np.array([5], np.int64), np.array([4], np.int64), (), b"", (), (), ok, False) == 0
    assert ok.tolist() == [0]


@pytest.mark.parametrize("module, user, source", [
    ("bert_data.format._wire", "from bert_data.format import batch_decode as user", "_wire.c"),  # numpy reads
    ("bert_data._wordpiece", "from bert_data import tokenization as user", "_wordpiece.c"),  # the Python route
])
def test_a_stale_accelerator_build_is_refused_with_a_warning(module, user, source):
    """A C module of another API (built from an older source in an editable checkout) is never
    called: its caller falls back to the Python path and the warning says how to rebuild."""
    attribute = module.rsplit(".", 1)[1]
    code = (
        "import logging, sys, types\n"
        "logging.basicConfig()\n"
        f"stale = types.ModuleType({module!r}); stale.API = 0\n"
        f"sys.modules[{module!r}] = stale\n"
        f"{user}\n"
        f"assert user.{attribute} is None\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"built from another version of {source}" in proc.stderr and "pip install -e ." in proc.stderr


# --- GZIP files read as TensorFlow reads them (helper-15's case G) -------------------------------

def _members(*runs: list) -> bytes:
    from bert_data.format.tfrecord import frame_records

    return b"".join(gzip.compress(frame_records(run), mtime=0) for run in runs)


@pytest.mark.parametrize("tail, whole", [
    (b"", True),  # members one after another: what a shard is
    (b"\0" * 4096, False),  # zero padding: gzip.GzipFile skipped it; tf.data stops with a DataLossError
    (b"\0", False),
    (b"junk after the stream", False),
    (b"\x1f", False),  # half a magic number
])
def test_bytes_after_the_last_gzip_member_are_an_error_as_for_tensorflow(tmp_path, tail, whole):
    from bert_data.errors import RecordFormatError
    from bert_data.format.batch_decode import iter_record_batches
    from bert_data.format.tfrecord import iter_records

    runs = [[b"a" * 10, b"b" * 300], [b"c" * 5], [b"d" * 70000]]
    path = tmp_path / "x.tfrecords"
    path.write_bytes(_members(*runs) + tail)
    want = [p for run in runs for p in run]
    if whole:
        assert list(iter_records(str(path))) == want
        assert sum(len(b) for b in iter_record_batches(str(path))) == len(want)
        return
    got = []
    with pytest.raises(RecordFormatError, match="corrupt gzip stream"):
        for record in iter_records(str(path)):
            got.append(record)
    assert got == want  # every record before the tail, as tf.data gives them
    with pytest.raises(RecordFormatError, match="corrupt gzip stream"):
        for _ in iter_record_batches(str(path)):
            pass

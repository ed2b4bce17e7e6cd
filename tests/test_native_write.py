"""The write path's C accelerator (``_wire.serialize_examples``, ``_wire.frame_records``) against
the numpy and Python code it stands in for (issue 29): the same bytes for every batch, dtype and
layout, and bad arguments refused with an exception, never a crash.

``native._wire`` None is how the writers tell that there is no accelerator (the numpy path); the
tests of the C side skip where it was not built, and fail under CI (``require_wire``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bert_data.format import example_wire, native, tfrecord
from bert_data.format.example_wire import parse_example, serialize_examples
from bert_data.format.tfrecord import frame_records, iter_records
from bert_data.tools.create import main
from conftest import base_args, both_paths as both, require_wire, same_arrays, write_corpus, write_vocab


@pytest.fixture
def wire():
    require_wire()
    assert native.wire() is not None, "the reading and writing paths bind the same module"
    return native.wire()


# --------------------------------------------------------------------------------------
# serialize_examples: random batches
# --------------------------------------------------------------------------------------

# Values where a varint's length changes, both signs, and the ends of every dtype.
EDGES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**31 - 1, 2**32 - 1, 2**32,
         2**35, 2**56 - 1, 2**56, 2**63 - 1, -1, -128, -(2**31), -(2**63)]
INT_DTYPES = ["int32", "int64", "uint8", "int8", "int16", "uint16", "uint32", "uint64", "bool", ">i4", ">i8"]
FLOAT_DTYPES = ["float32", "float64", "float16", ">f4", "int32", "bool"]


@st.composite
def feature_arrays(draw, n):
    """One feature: its dtype in the record, its array (any dtype the encoder accepts, in range),
    laid out C-contiguous, Fortran, strided or reversed."""
    kind = draw(st.sampled_from(["int64", "float32"]))
    k = draw(st.integers(0, 6))
    if kind == "int64":
        dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
        if dtype == np.bool_:
            values = st.booleans()
        else:
            info = np.iinfo(dtype)
            hi = min(int(info.max), 2**63 - 1)
            edges = [v for v in EDGES if info.min <= v <= hi]
            values = st.one_of(st.sampled_from(edges), st.integers(int(info.min), hi), st.integers(0, min(hi, 30521)))
        array = draw(hnp.arrays(dtype, (n, 2 * k), elements=values))
    else:
        dtype = np.dtype(draw(st.sampled_from(FLOAT_DTYPES)))
        elements = st.booleans() if dtype == np.bool_ else (
            st.integers(-1000, 1000) if dtype.kind == "i" else st.floats(width=min(32, 8 * dtype.itemsize)))
        array = draw(hnp.arrays(dtype, (n, 2 * k), elements=elements))
    layout = draw(st.sampled_from(["c", "fortran", "strided", "reversed"]))
    if layout == "fortran":
        array = np.asfortranarray(array[:, :k])
    elif layout == "strided":
        array = array[:, ::2]
    elif layout == "reversed":
        array = array[::-1, k:]
    else:
        array = np.ascontiguousarray(array[:, :k])
    return kind, array


@st.composite
def batches(draw):
    n = draw(st.integers(0, 5))
    names = draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=7, unique=True))
    features, order = {}, []
    for name in names:
        kind, array = draw(feature_arrays(n))
        features[name] = array
        order.append((name, kind))
    return features, order


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches())
def test_serialize_examples_c_and_numpy_give_the_same_bytes(batch):
    features, order = batch
    with_c, with_numpy = both(lambda: serialize_examples(features, order))
    assert with_c == with_numpy
    assert all(type(record) is bytes for record in with_c)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.integers(0, 4), st.data())
def test_token_id_rows_of_every_length_are_the_same_bytes(k, n_more, data):
    """Rows of token ids and 0/1 masks (the fast paths: eight 1-byte values at once, values of
    up to 3 bytes without a branch), every row length, read back by the reference decoder."""
    n = 1 + n_more
    edges = st.sampled_from([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, -1])
    ids = data.draw(hnp.arrays(np.int32, (n, k), elements=st.integers(0, 30521) | edges))
    mask = data.draw(hnp.arrays(np.int32, (n, k), elements=st.integers(0, 1)))
    order = (("input_ids", "int64"), ("input_mask", "int64"))
    with_c, with_numpy = both(lambda: serialize_examples({"input_ids": ids, "input_mask": mask}, order))
    assert with_c == with_numpy
    for row, record in enumerate(with_c):
        parsed = parse_example(record)
        assert parsed["input_ids"].tolist() == ids[row].tolist()
        assert parsed["input_mask"].tolist() == mask[row].tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(0, 3), st.data())
def test_simd_varint_blocks_are_the_one_by_one_bytes(k, n_more, data):
    """The SSSE3 blocks (eight token ids at once) write the bytes of put_small, one value at a
    time: every length mix of 1, 2 and 3 bytes, and blocks with a value they leave to it
    (negative, 2**21 and more), in rows of every length (the 8-wide blocks and the tail)."""
    native_wire = native.wire()
    if native_wire is not None:
        native_wire.use_simd_varints(True)  # (it returns the setting before: the second call says if it took)
    if native_wire is None or not native_wire.use_simd_varints(True):
        pytest.skip("no SSSE3 varint blocks in this build or on this CPU")
    n = 1 + n_more
    edges = st.sampled_from([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, -1, 2**31 - 1, -2**31])
    ids = data.draw(hnp.arrays(np.int32, (n, k), elements=st.integers(0, 2**21 - 1) | edges))
    order = (("input_ids", "int64"),)
    try:
        native_wire.use_simd_varints(True)
        simd = serialize_examples({"input_ids": ids}, order)
        native_wire.use_simd_varints(False)
        one_by_one = serialize_examples({"input_ids": ids}, order)
    finally:
        native_wire.use_simd_varints(True)
    assert simd == one_by_one
    assert [parse_example(record)["input_ids"].tolist() for record in simd] == ids.tolist()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches(), st.data())
def test_each_shards_run_is_the_framed_records_of_its_rows(batch, data):
    """serialize_shard_runs (the rows read in batch order, each frame written into its shard's
    bytes) gives, per shard, frame_records over serialize_examples' records of its rows in batch
    order: b"" for a shard without rows, whatever the dtypes, lengths and values."""
    features, order = batch
    n = len(next(iter(features.values())))
    num_shards = data.draw(st.integers(1, 6))
    shard_of_row = np.array(data.draw(st.lists(st.integers(0, num_shards - 1), min_size=n, max_size=n)), np.int64)
    runs = example_wire.serialize_shard_runs(features, order, shard_of_row, num_shards)
    if runs is None:  # more features than the C loop takes
        assert len(order) > example_wire.NATIVE_MAX_FEATURES
        return
    records = serialize_examples(features, order)
    assert runs == [frame_records([records[r] for r in np.flatnonzero(shard_of_row == s).tolist()])
                    for s in range(num_shards)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_rows_given_by_their_runs_are_the_bytes_of_the_rows(data):
    """Masks handed over as MaskRuns (their runs of ones alone: what the assemblers make for
    TFRecords) are written from the runs, with the bytes of the same arrays given plainly: empty
    runs, runs to the row's end, rows of width 0 and 1, next to ordinary and float features."""
    from bert_data.format.row_runs import MaskRuns

    require_wire()
    n, width = data.draw(st.integers(0, 12)), data.draw(st.integers(0, 40))
    lo = np.array(data.draw(st.lists(st.integers(0, width), min_size=n, max_size=n)), np.int64)
    hi = np.array([data.draw(st.integers(int(a), width)) for a in lo], np.int64)
    j = np.arange(width)[None, :]
    plain = ((j >= lo[:, None]) & (j < hi[:, None])).astype(np.int32)
    ids = np.array(data.draw(st.lists(st.integers(0, 2**21), min_size=n * 3, max_size=n * 3)), np.int32).reshape(n, 3)
    weights = np.ones((n, 2), np.float32)
    order = (("a_ids", "int64"), ("b_mask", "int64"), ("c_weights", "float32"))
    shards = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64)
    only_runs = {"a_ids": ids, "b_mask": MaskRuns(lo, hi, width), "c_weights": weights}
    expected = example_wire.serialize_shard_runs({"a_ids": ids, "b_mask": plain, "c_weights": weights}, order, shards, 3)
    assert example_wire.serialize_shard_runs(only_runs, order, shards, 3) == expected
    np.testing.assert_array_equal(np.asarray(only_runs["b_mask"]), plain)
    records = serialize_examples({"a_ids": ids, "b_mask": plain, "c_weights": weights}, order)
    assert expected == [frame_records([records[r] for r in np.flatnonzero(shards == s).tolist()]) for s in range(3)]


@pytest.mark.parametrize("run", [[-1, 2, 4], [3, 2, 4], [1, 5, 4], [0, 0, 2**31]])
def test_wire_refuses_runs_outside_their_row(wire, run):
    prefixes, _ = example_wire._entry_prefixes((("m", "int64"),))
    with pytest.raises(ValueError, match="0 <= lo <= hi <= width"):
        wire.serialize_shard_runs((np.array([run], np.int64),), prefixes, b"r", np.zeros(1, np.int64), 1)
    with pytest.raises(TypeError, match="runs feature"):
        wire.serialize_shard_runs((np.array([[0, 1]], np.int64),), prefixes, b"r", np.zeros(1, np.int64), 1)


def test_shard_runs_grow_for_records_longer_than_the_first(wire):
    """A shard's bytes are sized from the batch's first record and grown when later ones are
    longer (here 1-byte values first, then 10-byte varints): the same bytes as framing each record."""
    values = np.zeros((50, 64), np.int64)
    values[1:] = -1  # negative int64: 10-byte varints, ~10x the first record
    features, order = {"v": values}, (("v", "int64"),)
    shard_of_row = np.arange(50, dtype=np.int64) % 3
    records = serialize_examples(features, order)
    assert example_wire.serialize_shard_runs(features, order, shard_of_row, 3) == [
        frame_records([records[r] for r in range(s, 50, 3)]) for s in range(3)]


@pytest.mark.parametrize(
    "shards, num_shards, error",
    [
        (np.array([0, 2], np.int64), 2, IndexError),  # a shard past num_shards
        (np.array([0, -1], np.int64), 2, IndexError),
        (np.array([0, 1], np.int64), 0, ValueError),
        (np.array([0, 1], np.int32), 2, TypeError),
        (np.array([0], np.int64), 2, TypeError),  # one shard per row
        ([0, 1], 2, TypeError),
    ],
)
def test_wire_serialize_shard_runs_refuses_bad_shards(wire, shards, num_shards, error):
    prefixes, kinds = example_wire._entry_prefixes((("v", "int64"),))
    with pytest.raises(error):
        wire.serialize_shard_runs((np.ones((2, 3), np.int32),), prefixes, kinds, shards, num_shards)


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("encoder_kind", ["frames", "payloads only"])
def test_a_batch_becomes_each_shards_run_of_its_rows_in_order(compression, encoder_kind):
    """The container's runs of a batch: one per shard present, in shard order, each the frames (a
    gzip member with --compression gzip) of that shard's rows in batch order, whether the encoder
    frames its own records or gives payloads (an encoder without encode_shard_runs)."""
    from bert_data.format.containers import TFRecordContainer
    from bert_data.format.encoders import ExampleEncoder

    rng = np.random.default_rng(7)
    n = 40
    features = {"input_ids": rng.integers(0, 30522, (n, 9)).astype(np.int32),
                "masked_lm_weights": rng.random((n, 3), dtype=np.float32)}
    order = (("input_ids", "int64"), ("masked_lm_weights", "float32"))
    shard_of_row = rng.integers(0, 7, n)
    shard_of_row[shard_of_row == 3] = 4  # a shard without rows
    encoder = ExampleEncoder.__new__(ExampleEncoder)
    encoder.order = order
    if encoder_kind == "payloads only":
        encoder = type("PayloadsOnly", (), {"encode": lambda self, f: serialize_examples(f, order)})()
    container = TFRecordContainer(compression)
    records = serialize_examples(features, order)

    def runs():
        return [(shard, bytes(data), count) for shard, data, count in container.frame_runs(encoder, features, shard_of_row)]

    with_c, with_numpy = both(runs)
    assert with_c == with_numpy
    expected = []
    for shard in sorted(set(shard_of_row.tolist())):
        rows = np.flatnonzero(shard_of_row == shard).tolist()
        expected.append((shard, container.frame([records[r] for r in rows]), len(rows)))
    assert with_c == expected
    assert 3 not in [shard for shard, _, _ in with_c]
    assert container.frame_runs(encoder, {k: v[:0] for k, v in features.items()}, shard_of_row[:0]) == []


@pytest.mark.parametrize("shards", [[0, 2, 1], [0, -1, 1], [0.0, 1.5, 1.0]])
def test_the_fragment_writer_refuses_rows_of_no_shard(tmp_path, shards):
    """A row's shard outside [0, num_shards) is a bug upstream: refused, never dropped (the writer
    once framed each shard's rows by equality, and silently lost such a row) nor written."""
    from bert_data.format.containers import TFRecordContainer
    from bert_data.format.encoders import ExampleEncoder
    from bert_data.output.fragment import FragmentWriter

    encoder = ExampleEncoder.__new__(ExampleEncoder)
    encoder.order = (("a", "int64"),)
    writer = FragmentWriter(path=str(tmp_path / "f"), encoder=encoder, container=TFRecordContainer(), num_shards=2)
    with pytest.raises(ValueError, match="shards of rows"):
        writer.write_batch({"a": np.arange(6, dtype=np.int32).reshape(3, 2)}, np.array(shards))
    writer.abort()
    assert writer.segments == []


def _spy_on(monkeypatch, wire) -> list:
    """The names of the accelerator's functions the writers call from now on, in order."""
    calls = []

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(wire, name)

    monkeypatch.setattr(native, "_wire", Spy())
    return calls


def test_the_writer_frames_its_records_in_c(monkeypatch, tmp_path, wire):
    """A worker's fragment writer serializes and frames each batch in one C call
    (serialize_shard_runs), so the figures in docs/performance.md are of that path."""
    from bert_data.format.containers import TFRecordContainer
    from bert_data.format.encoders import ExampleEncoder
    from bert_data.output.fragment import FragmentWriter

    calls = _spy_on(monkeypatch, wire)
    encoder = ExampleEncoder.__new__(ExampleEncoder)
    encoder.order = (("a", "int64"),)
    writer = FragmentWriter(path=str(tmp_path / "f"), encoder=encoder, container=TFRecordContainer(), num_shards=2)
    writer.write_batch({"a": np.arange(6, dtype=np.int32).reshape(3, 2)}, np.array([1, 0, 1]))
    writer.close()
    assert calls == ["serialize_shard_runs"]
    assert [(s.shard, s.records) for s in writer.segments] == [(0, 1), (1, 2)]
    assert [parse_example(r)["a"].tolist() for r in iter_records(str(tmp_path / "f"))] == [[2, 3], [0, 1], [4, 5]]


def test_the_c_path_is_the_one_the_writer_takes(monkeypatch, wire):
    """serialize_examples and frame_records call the accelerator when it is there (a spy sees the
    calls), so the figures in docs/performance.md are of the C path."""
    calls = _spy_on(monkeypatch, wire)
    records = serialize_examples({"a": np.ones((3, 2), np.int32)}, [("a", "int64")])
    frame_records(records)
    assert calls == ["serialize_examples", "frame_records"]


def test_more_features_than_the_c_loop_takes_use_numpy(wire):
    features = {f"f{i:02d}": np.full((2, 1), i, np.int64) for i in range(70)}
    order = [(name, "int64") for name in sorted(features)]
    with_c, with_numpy = both(lambda: serialize_examples(features, order))
    assert with_c == with_numpy
    assert parse_example(with_c[1])["f69"].tolist() == [69]


@pytest.mark.parametrize(
    "array, kind, error",
    [
        (np.array([[2**63]], np.uint64), "int64", ValueError),  # does not fit in int64
        (np.array([[1.5]]), "int64", TypeError),
        (np.array([["x"]]), "int64", TypeError),
        (np.array([[1]], object), "int64", TypeError),
        (np.array([["x"]]), "float32", TypeError),
        (np.array([1, 2], np.int32), "int64", ValueError),  # not 2-D
        (np.array([[1]], np.int32), "int8", ValueError),  # not a dtype of a record
    ],
)
def test_bad_features_raise_the_same_error_on_both_paths(array, kind, error):
    def encode():
        with pytest.raises(error) as caught:
            serialize_examples({"x": array}, [("x", kind)])
        return str(caught.value)

    with_c, with_numpy = both(encode)
    assert with_c == with_numpy


# --------------------------------------------------------------------------------------
# The C functions called directly with what they must refuse
# --------------------------------------------------------------------------------------

PREFIX = (b"\x0a\x01x\x12",)


@pytest.mark.parametrize(
    "arrays, prefixes, kinds, error",
    [
        ((np.ones((2, 3), np.int32)[:, ::2],), PREFIX, b"i", (ValueError, TypeError, BufferError)),  # not contiguous
        ((np.ones((2, 3), np.float64),), PREFIX, b"i", TypeError),
        ((np.ones((2, 3), np.float64),), PREFIX, b"f", TypeError),
        ((np.ones((2, 3), np.int32),), PREFIX, b"f", TypeError),
        ((np.ones((2, 3), np.uint32),), PREFIX, b"i", TypeError),
        ((np.ones((2, 3), np.int8),), PREFIX, b"i", TypeError),
        ((np.ones(3, np.int32),), PREFIX, b"i", TypeError),  # 1-D
        ((np.ones((2, 3, 1), np.int32),), PREFIX, b"i", TypeError),  # 3-D
        ((np.ones((2, 3), np.int32), np.ones((3, 3), np.int32)), PREFIX * 2, b"ii", ValueError),  # rows differ
        ((np.ones((2, 3), np.int32),), PREFIX, b"x", TypeError),
        ((np.ones((2, 3), np.int32),), ("x",), b"i", TypeError),
        ((np.ones((2, 3), np.int32),), PREFIX, "i", TypeError),
        ([np.ones((2, 3), np.int32)], PREFIX, b"i", TypeError),
        ((np.ones((2, 3), np.int32),), PREFIX * 2, b"i", ValueError),
        ((), (), b"", ValueError),
        ((np.ones((1, 1), np.int32),) * 65, PREFIX * 65, b"i" * 65, ValueError),
        ((b"abcd",), PREFIX, b"i", TypeError),
        ((object(),), PREFIX, b"i", TypeError),
    ],
)
def test_wire_serialize_examples_refuses_bad_arguments(wire, arrays, prefixes, kinds, error):
    with pytest.raises(error):
        wire.serialize_examples(arrays, prefixes, kinds)


def test_wire_serialize_examples_writes_any_int64_value(wire):
    """Every int64 value is a valid varint: the extremes in C as in numpy (negative: 10 bytes)."""
    values = np.array([[-(2**63), -1, 0, 2**63 - 1]], np.int64)
    prefixes, kinds = example_wire._entry_prefixes((("v", "int64"),))
    (record,) = wire.serialize_examples((values,), prefixes, kinds)
    assert parse_example(record)["v"].tolist() == values[0].tolist()


@pytest.mark.parametrize("payloads", [3, None, [b"a", 1], [b"a", "text"], [b"a", [1]]])
def test_wire_frame_records_refuses_bad_arguments(wire, payloads):
    with pytest.raises(TypeError):
        wire.frame_records(payloads)


# --------------------------------------------------------------------------------------
# frame_records
# --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12), st.sampled_from(["list", "tuple", "generator"]))
def test_frame_records_c_and_python_give_the_same_bytes(payloads, container):
    def frame():
        if container == "list":
            return frame_records(list(payloads))
        if container == "tuple":
            return frame_records(tuple(payloads))
        return frame_records(p for p in payloads)

    with_c, with_python = both(frame)
    assert with_c == with_python
    assert type(with_c) is bytes
    import io

    assert list(iter_records(io.BytesIO(with_c))) == list(payloads)


# --------------------------------------------------------------------------------------
# copy_ranges (MDS pieces: mds.PieceAppender's windows)
# --------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=12), st.data())
def test_mds_pieces_take_the_same_sample_bytes_with_c_and_python(tmp_path_factory, payloads, data):
    """A piece's samples are read again from their frames and compacted a window at a time with
    ``copy_ranges`` or, without the accelerator, a slice at a time: the same bytes either way, for
    any samples and windows (frames larger than the window too)."""
    from bert_data.format import framed
    from bert_data.format.tfrecord import frame_records

    path = tmp_path_factory.mktemp("frames") / "shard.partial"
    path.write_bytes(frame_records(payloads))
    window = data.draw(st.sampled_from([20, 50, 1 << 20]))

    def gathered():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(framed, "WINDOW", window)
            source = framed.FramedFile(str(path))
            try:
                return b"".join(bytes(chunk) for frames in source.frames()
                                for chunk in source.gather(frames.starts, frames.lengths))
            finally:
                source.close()

    with_c, with_python = both(gathered)
    assert with_c == with_python == b"".join(payloads)


@pytest.mark.parametrize("starts, lengths, at, size", [
    ([0, 5], [5], 0, 10),  # counts differ
    ([-1], [2], 0, 10),  # before the source
    ([9], [2], 0, 10),  # past its end
    ([0], [-1], 0, 10),  # a negative length
    ([0], [8], 4, 10),  # out too small from at
    ([0], [1], -1, 10),  # a negative at
    ([0] * 4, [6] * 4, 0, 10),  # each range fits, their sum does not
])
def test_wire_copy_ranges_refuses_ranges_outside_its_buffers(wire, starts, lengths, at, size):
    out = bytearray(size)
    with pytest.raises(ValueError, match="copy_ranges"):
        wire.copy_ranges(bytes(10), np.array(starts, np.int64), np.array(lengths, np.int64), out, at)
    assert out == bytearray(size)


def test_wire_copy_ranges_refuses_lengths_whose_sum_overflows(wire):
    """helper-31: 2^20 ranges of 2^44 bytes each fit a (mapped, untouched) 16 TiB source, and
    their sum wrapped to 0 past the size check: a segmentation fault, not a ValueError."""
    import mmap

    try:
        source = mmap.mmap(-1, 1 << 44, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0),
                           prot=mmap.PROT_READ)
    except (OSError, OverflowError, ValueError):
        pytest.skip("no 16 TiB of address space to map here")
    try:
        for count in (1 << 20, 1 << 19):
            with pytest.raises(ValueError, match="copy_ranges"):
                wire.copy_ranges(source, np.zeros(count, np.int64), np.full(count, 1 << 44, np.int64), bytearray(16), 0)
    finally:
        source.close()


def test_wire_copy_ranges_refuses_the_wrong_types(wire):
    with pytest.raises(TypeError):
        wire.copy_ranges(b"abc", np.array([0], np.int32), np.array([1], np.int64), bytearray(4), 0)
    with pytest.raises(BufferError):  # (out must be writable)
        wire.copy_ranges(b"abc", np.array([0], np.int64), np.array([1], np.int64), b"read-only", 0)
    assert wire.copy_ranges(b"abc", np.array([1, 0], np.int64), np.array([2, 1], np.int64), bytearray(4), 1) == 4


def test_crc32c_of_every_length_and_alignment_is_the_reference_crc(wire):
    """The C CRC32C (three interleaved streams of 256 bytes, joined by shift tables, then single
    words and bytes) is the reference CRC at every length around its 768-byte runs and at every
    start alignment; google_crc32c (or its pure-Python fallback) is the reference."""
    rng = np.random.default_rng(5)
    buffer = rng.bytes(6000)
    sizes = list(range(0, 70)) + [768 * k + d for k in range(1, 7) for d in range(-9, 10)] + [5000]
    for size in sizes:
        for start in range(0, 9, 3):
            data = memoryview(buffer)[start : start + size]
            assert wire.crc32c(data) == tfrecord.crc32c(bytes(data)), (size, start)


def test_frame_records_matches_tensorflows_writer(tmp_path, wire):
    """The C framing against TensorFlow's own TFRecordWriter (its bytes are the definition)."""
    tf = pytest.importorskip("tensorflow")
    payloads = [b"", b"x", bytes(range(256)) * 3, b"\x00" * 70000]
    path = str(tmp_path / "tf.tfrecords")
    with tf.io.TFRecordWriter(path) as writer:
        for payload in payloads:
            writer.write(payload)
    assert wire.frame_records(payloads) == Path(path).read_bytes()


# --------------------------------------------------------------------------------------
# Every layout the objectives write, end to end: the same shards either way
# --------------------------------------------------------------------------------------

LAYOUT_FLAGS = {
    "nsp": {},
    "sop": {"sentence_order_prediction": True},
    "mlm_only": {"mlm_only": True},
    "unmasked_ids": {"mlm_only": True, "disable_masking": True},
    "packed_nsp": {"packing": True},
    "packed_mlm_only": {"mlm_only": True, "packing": True},
    "sop_whole_word": {"sentence_order_prediction": True, "mask_whole_word": True},
    "packed_mlm_only_whole_word": {"mlm_only": True, "packing": True, "mask_whole_word": True},
}


def _shard_digests(out: Path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tfrecords"))}


@pytest.mark.parametrize("layout", sorted(LAYOUT_FLAGS))
def test_every_layout_writes_the_same_shards_with_c_and_numpy(tmp_path, monkeypatch, layout):
    require_wire()
    metadata = write_corpus(tmp_path / "corpus", n_docs=8)
    vocab = write_vocab(tmp_path / "vocab.txt")
    runs = []
    for name, wire_module in (("c", native.wire()), ("numpy", None)):
        monkeypatch.setattr(native, "_wire", wire_module)
        out = tmp_path / name
        assert main(base_args(metadata, vocab, out, **LAYOUT_FLAGS[layout])) == 0
        runs.append(_shard_digests(out))
    assert runs[0] and runs[0] == runs[1]


def test_packed_rows_with_weights_above_one_are_the_same_bytes():
    """Packed rows' masked_lm_weights hold the instance number (1.0..k), not only 0 and 1."""
    rng = np.random.default_rng(5)
    weights = rng.integers(0, 4, (6, 9)).astype(np.float32)
    features = {"input_ids": rng.integers(0, 30522, (6, 16), dtype=np.int32), "masked_lm_weights": weights,
                "next_sentence_weights": np.array([[1.0, 1.0, 0.0]] * 6, np.float32)}
    order = [("input_ids", "int64"), ("masked_lm_weights", "float32"), ("next_sentence_weights", "float32")]
    with_c, with_numpy = both(lambda: serialize_examples(features, order))
    assert with_c == with_numpy
    assert parse_example(with_c[2])["masked_lm_weights"].tolist() == weights[2].tolist()


def test_c_bytes_are_tensorflows_deterministic_serialization(wire):
    """Against TensorFlow's own serializer, for a batch with every varint width and both list kinds."""
    tf = pytest.importorskip("tensorflow")
    ids = np.array([[0, 127, 128, 16383, 16384, 2**21, 2**28, 2**31 - 1], [1, 2, 3, 4, 5, 6, 7, 8]], np.int32)
    big = np.array([[-1, 2**62], [-(2**63), 0]], np.int64)
    weights = np.array([[0.0, 1.5, -2.0], [3.0, 0.0, 1e-30]], np.float32)
    order = [("big", "int64"), ("ids", "int64"), ("none", "int64"), ("weights", "float32")]
    features = {"ids": ids, "big": big, "weights": weights, "none": np.zeros((2, 0), np.int32)}
    records = serialize_examples(features, order)
    for row, record in enumerate(records):
        feature = {
            "big": tf.train.Feature(int64_list=tf.train.Int64List(value=big[row].tolist())),
            "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids[row].tolist())),
            "none": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
            "weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights[row].tolist())),
        }
        expected = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)
        assert record == expected
    assert tfrecord.frame_records(records) == wire.frame_records(records)


# --------------------------------------------------------------------------------------
# A pass's rows: assembly (instances.assemble; masking: test_native_masking.py)
# --------------------------------------------------------------------------------------

from bert_data.instances import InstanceParams, PairPlan, assemble  # noqa: E402


def _outcome(function, *args):
    """The arrays ``function`` returns, or the type of the error it raises (a plan that does not fit)."""
    try:
        return function(*args)
    except (IndexError, ValueError) as error:
        return type(error)


def _same_outcome(with_c, with_numpy):
    if isinstance(with_c, dict):
        same_arrays(with_c, with_numpy)
    else:
        assert with_c is with_numpy


@st.composite
def pair_plans(draw, valid=True):
    """A token space and a plan of pairs that fit (valid) or perhaps do not (reversed or outside
    ranges, too long together), as the planner would hand them to assemble."""
    length = draw(st.integers(3, 40))
    size = draw(st.integers(0, 60))
    ids = draw(hnp.arrays(np.int32, size, elements=st.integers(0, 30521)))
    plan = PairPlan()
    for _ in range(draw(st.integers(0, 8))):
        if valid and size:
            a_lo = draw(st.integers(0, size))
            a_hi = draw(st.integers(a_lo, min(size, a_lo + length - 3)))
            b_lo = draw(st.integers(0, size))
            b_hi = draw(st.integers(b_lo, min(size, b_lo + length - 3 - (a_hi - a_lo))))
        elif valid:
            a_lo = a_hi = b_lo = b_hi = 0
        else:
            a_lo, a_hi, b_lo, b_hi = (draw(st.integers(-3, size + 3)) for _ in range(4))
        plan.add(a_lo, a_hi, b_lo, b_hi, draw(st.integers(0, 1)))
    # masks_as_runs: the C assembler makes no masks, their runs stand for them (MaskRuns)
    return ids, plan, InstanceParams(length, 0.1, 2, cls_id=101, sep_id=102, masks_as_runs=draw(st.booleans()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair_plans())
def test_assemble_c_and_numpy_give_thesame_arrays(case):
    ids, plan, params = case
    with_c, with_numpy = both(lambda: assemble(ids, plan, params))
    same_arrays(with_c, with_numpy)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair_plans(valid=False))
def test_assemble_of_a_bad_plan_is_numpys_answer(case):
    """A plan the C loop refuses goes to numpy: the same arrays, or the same error."""
    _same_outcome(*both(lambda: _outcome(assemble, *case)))


@pytest.mark.parametrize("bad", ["ids_int64", "ids_strided", "plan_int32", "out_short", "candidates_int8"])
def test_wire_assemble_refuses_bad_arrays(wire, bad):
    n, length = 2, 6
    ids = np.arange(10, dtype=np.int64 if bad == "ids_int64" else np.int32)
    if bad == "ids_strided":
        ids = np.arange(20, dtype=np.int32)[::2]
    plan = [np.array([0, 1], np.int32 if bad == "plan_int32" else np.int64) for _ in range(4)]
    outs = [np.empty((n, length - (bad == "out_short")), np.int32) for _ in range(3)]
    candidates = np.empty((n, length), np.int8 if bad == "candidates_int8" else np.bool_)
    with pytest.raises((TypeError, ValueError, BufferError)):
        wire.assemble_pairs(n, length, ids, *plan, 101, 102, *outs, candidates, np.empty(n, np.int64))


from bert_data.windows import assemble_windows  # noqa: E402


@st.composite
def window_batches(draw, valid=True):
    """A token stream (with separators and literal [CLS]/[SEP] ids in it) and windows into it that
    fit (valid) or perhaps do not."""
    length = draw(st.integers(2, 40))
    size = draw(st.integers(0, 60))
    tokens = draw(hnp.arrays(np.int32, size, elements=st.integers(0, 120) | st.sampled_from([101, 102, 7])))
    starts, lengths = [], []
    for _ in range(draw(st.integers(0, 8))):
        if valid:
            lo = draw(st.integers(0, size))
            span = draw(st.integers(0, min(size - lo, length - 2)))
        else:
            lo, span = draw(st.integers(-3, size + 3)), draw(st.integers(-3, length + 1))
        starts.append(lo)
        lengths.append(span)
    params = InstanceParams(length, 0.1, 2, cls_id=101, sep_id=102, masks_as_runs=draw(st.booleans()))
    separator = draw(st.sampled_from([None, 7]))
    return tokens, np.array(starts, np.int64), np.array(lengths, np.int64), params, separator


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans().flatmap(lambda valid: window_batches(valid)))
def test_assemble_windows_c_and_numpy_give_thesame_arrays(case):
    _same_outcome(*both(lambda: _outcome(assemble_windows, *case)))


@pytest.mark.parametrize("bad", ["tokens_int64", "starts_int32", "ids_short", "strided"])
def test_wire_assemble_windows_refuses_bad_arrays(wire, bad):
    n, length = 2, 6
    tokens = np.arange(10, dtype=np.int64 if bad == "tokens_int64" else np.int32)
    starts = np.array([0, 1], np.int32 if bad == "starts_int32" else np.int64)
    if bad == "strided":
        starts = np.array([0, 9, 1, 9], np.int64)[::2]
    ids = np.empty((n, length - (bad == "ids_short")), np.int32)
    with pytest.raises((TypeError, ValueError, BufferError)):
        wire.assemble_windows(n, length, tokens, starts, np.array([2, 3], np.int64), 101, 102, 0, False, ids,
                              np.empty((n, length), np.int32), np.empty((n, length), np.bool_), np.empty(n, np.int64))

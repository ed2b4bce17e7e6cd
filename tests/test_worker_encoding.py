"""Formats the workers encode: Parquet's pieces of data pages (:mod:`bert_data.format.parquet`)
and MDS's samples (:mod:`bert_data.format.mds`), made from the padded rows by the C accelerator
and by numpy, byte for byte; Parquet files made from pieces by a footer of our own (Thrift:
:mod:`bert_data.format.thrift_compact`) that pyarrow and ``datasets`` read back as the rows that
went in, with the Arrow schema of the layout; refusals of rows the formats cannot hold; a stop;
and ``--resume`` past whatever an earlier attempt left where shards are rewritten. Skipped when
pyarrow / streaming are missing, except under CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import base_args, published_files, write_corpus, write_vocab
from conftest import need as _need

from bert_data.format import native, parquet
from bert_data.format import thrift_compact as thrift
from bert_data.format.columns import ColumnError, columns_of, to_columns
from bert_data.format.tfrecord import frame_records
from bert_data.tools.create import main


def _need_native() -> None:
    if native.wire() is None and not os.environ.get("CI"):
        pytest.skip("the C accelerator is not built")
    assert native.wire() is not None, "CI builds the C accelerator (pip install -e .)"


# --- Thrift's compact protocol ------------------------------------------------------------------


def test_compact_structs_round_trip() -> None:
    F = thrift.Field
    struct = [
        F(1, thrift.I32, -5), F(2, thrift.I64, 1 << 40), F(3, thrift.BINARY, b"name"),
        F(4, thrift.LIST, thrift.ThriftList(thrift.I32, tuple(range(-3, 20)))),  # 23 items: the long list header
        F(5, thrift.TRUE, True), F(6, thrift.TRUE, False),
        F(40, thrift.STRUCT, [F(1, thrift.BYTE, -7), F(2, thrift.STRUCT, [])]),  # a field id 34 past the last
        F(41, thrift.LIST, thrift.ThriftList(thrift.STRUCT, ([F(1, thrift.I16, 300)], []))),
    ]
    data = thrift.encode(struct)
    decoded, end = thrift.decode(data + b"tail")
    assert end == len(data)
    assert thrift.encode(decoded) == data
    assert thrift.get(decoded, 1) == -5 and thrift.get(decoded, 2) == 1 << 40 and thrift.get(decoded, 6) is False
    assert thrift.get(decoded, 4).values == tuple(range(-3, 20))
    with pytest.raises(thrift.ThriftError):
        thrift.decode(data[:-3])


# --- pieces: padded rows -> pages ----------------------------------------------------------------


@st.composite
def batches(draw):
    """Padded rows of the NSP layout: lengths 0..width (an empty list included), values anywhere in
    their columns' types, features int32 or int64 as the writer may hand them over."""
    n = draw(st.integers(1, 40))
    seq, pred = draw(st.integers(1, 48)), draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    seq_len = rng.integers(0 if draw(st.booleans()) else 1, seq + 1, n)
    pred_len = rng.integers(0, pred + 1, n)
    wide = np.int64 if draw(st.booleans()) else np.int32
    big = draw(st.sampled_from([30522, 2**31 - 1]))  # ids of a BERT vocabulary, or up to int32's top

    def padded(lengths, width, low, high, dtype=wide):
        out = np.zeros((n, width), dtype)
        real = np.arange(width)[None, :] < lengths[:, None]
        out[real] = rng.integers(low, high, int(real.sum()), endpoint=True)
        return out, real.astype(dtype)

    input_ids, input_mask = padded(seq_len, seq, -big if draw(st.booleans()) else 0, big)
    segment_ids, _ = padded(seq_len, seq, 0, 1)
    positions, weights = padded(pred_len, pred, 0, 32767)
    masked_ids, _ = padded(pred_len, pred, 0, big)
    features = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
                "masked_lm_positions": positions, "masked_lm_ids": masked_ids,
                "masked_lm_weights": weights.astype(np.float32),
                "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(wide)}
    shards = rng.integers(0, draw(st.integers(1, 4)), n)
    return features, shards


def _numpy_pieces(features, shards, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(native, "_wire", None)
        return parquet.encode_pieces(features, shards, "nsp")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches(), page_rows=st.sampled_from([1, 3, 1024]))
def test_the_c_accelerator_makes_the_pages_numpy_makes(batch, page_rows, monkeypatch) -> None:
    _need_native()
    features, shards = batch
    monkeypatch.setattr(parquet, "PAGE_ROWS", page_rows)
    assert parquet.encode_pieces(features, shards, "nsp") == _numpy_pieces(features, shards, monkeypatch)


def _assemble(pieces: List[bytes], directory: Path, name: str = "x.parquet", layout: str = "nsp") -> Path:
    """Pieces, as a partial shard holds them (back to back), made a file: a URL run's finished copy
    (rewrite_shard) and a local run's partial shard finished in place must be the same bytes."""
    from bert_data.format.containers import container_for
    from bert_data.output.rewrite import rewrite_shard

    partial = directory / (name + ".partial")
    partial.write_bytes(b"".join(pieces))
    spec = parquet.ShardSpec(layout, (), 0, 0)
    (files, _) = rewrite_shard(str(partial), container_for("parquet"), str(directory), name, spec)
    assert parquet.finish_in_place(str(partial), spec) == files[0][1] and files[0][0] == name
    assert partial.read_bytes() == (directory / name).read_bytes()
    assert parquet.body_size(str(directory / name)) == sum(len(piece) for piece in pieces)
    return directory / name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches(), page_rows=st.sampled_from([1, 2, 7, 1024]), numpy_only=st.booleans())
def test_assembled_pieces_read_back_as_the_rows_that_went_in(batch, page_rows, numpy_only, monkeypatch,
                                                             tmp_path_factory) -> None:
    _need("pyarrow")
    import pyarrow.parquet as pq

    features, shards = batch
    monkeypatch.setattr(parquet, "PAGE_ROWS", page_rows)
    if numpy_only:
        monkeypatch.setattr(native, "_wire", None)
    pieces = parquet.encode_pieces(features, shards, "nsp")
    assert [shard for shard, _, _ in pieces] == sorted(set(shards.tolist()))
    directory = tmp_path_factory.mktemp("assembled")
    for shard, piece, rows in pieces:
        mine = np.flatnonzero(shards == shard)
        assert rows == len(mine)
        want = to_columns({k: v[mine] for k, v in features.items()}, "nsp")
        path = _assemble([piece, piece], directory, f"s{shard}.parquet")  # twice: rows of two pieces
        handle = pq.ParquetFile(path)
        assert handle.schema_arrow.equals(parquet.arrow_schema("nsp"))
        sizes = [handle.metadata.row_group(i).num_rows for i in range(handle.metadata.num_row_groups)]
        assert sizes == [rows, rows]  # a row group a piece
        table = handle.read()
        for column in columns_of("nsp"):
            got = table.column(column.name).to_pylist()
            if column.kind == "one":
                expected = want.values[column.name].tolist()
            else:
                ends = np.cumsum(want.lengths[column.kind])
                expected = [part.tolist() for part in np.split(want.values[column.name], ends[:-1])]
            assert got == expected + expected, column.name


@pytest.mark.parametrize("layout", ["nsp", "mlm_only", "unmasked"])
def test_every_layout_is_read_with_its_arrow_schema_by_pyarrow_and_datasets(layout, tmp_path) -> None:
    _need("pyarrow")
    import pyarrow.parquet as pq

    names = {c.feature for c in columns_of(layout)}
    features = {"input_ids": np.array([[101, 7, 102, 0]], np.int32), "input_mask": np.array([[1, 1, 1, 0]], np.int32),
                "segment_ids": np.zeros((1, 4), np.int32), "masked_lm_positions": np.array([[1, 0]], np.int64),
                "masked_lm_ids": np.array([[7, 0]], np.int64), "masked_lm_weights": np.array([[1, 0]], np.float32),
                "next_sentence_labels": np.array([[1]], np.int32)}
    features = {k: v for k, v in features.items() if k in names | {"input_mask", "masked_lm_weights"} and
                (k != "masked_lm_weights" or "masked_lm_positions" in names)}
    (piece,) = [p for _, p, _ in parquet.encode_pieces(features, np.zeros(1, np.int64), layout)]
    path = _assemble([piece], tmp_path, layout=layout)
    assert pq.read_schema(path).equals(parquet.arrow_schema(layout))
    assert pq.read_table(path).column("input_ids").to_pylist() == [[101, 7, 102]]
    if importlib.util.find_spec("datasets") is not None:
        import datasets

        rows = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
        assert rows[0]["input_ids"] == [101, 7, 102]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches())
def test_duckdb_and_polars_read_the_rows_pyarrow_reads(batch, tmp_path_factory) -> None:
    """Two readers that share no code with pyarrow's (DuckDB's own Parquet reader, polars' Rust
    one) read every value of a file of pieces, headers between its row groups included."""
    _need("pyarrow")
    _need("duckdb")
    _need("polars")
    import duckdb
    import polars
    import pyarrow.parquet as pq

    features, shards = batch
    pieces = [piece for _, piece, _ in parquet.encode_pieces(features, shards, "nsp")]
    path = _assemble(pieces, tmp_path_factory.mktemp("readers"))
    want = pq.read_table(path).to_pydict()
    assert polars.read_parquet(path).to_dict(as_series=False) == want
    names = ", ".join(want)
    rows = duckdb.sql(f"SELECT {names} FROM read_parquet('{path}')").fetchall()
    assert [list(row) for row in rows] == [list(row) for row in zip(*want.values())]


def _nsp_rows() -> Dict[str, np.ndarray]:
    return {"input_ids": np.array([[101, 7, 102, 0]], np.int32), "input_mask": np.array([[1, 1, 1, 0]], np.int32),
            "segment_ids": np.array([[0, 0, 1, 0]], np.int32), "masked_lm_positions": np.array([[1, 0]], np.int64),
            "masked_lm_ids": np.array([[7, 0]], np.int64), "masked_lm_weights": np.array([[1, 0]], np.float32),
            "next_sentence_labels": np.array([[0]], np.int32)}


@pytest.mark.parametrize("c_accelerator", [True, False])
@pytest.mark.parametrize("damage", ["a mask that is not a prefix", "a token past the mask", "a segment id past int8"])
def test_a_row_unpadded_columns_cannot_hold_is_refused(damage, c_accelerator, monkeypatch) -> None:
    if c_accelerator:
        _need_native()
    else:
        monkeypatch.setattr(native, "_wire", None)
    rows = _nsp_rows()
    if damage == "a mask that is not a prefix":
        rows["input_mask"] = np.array([[1, 0, 1, 0]], np.int32)
    elif damage == "a token past the mask":
        rows["input_ids"][0, 3] = 5
    else:
        rows["segment_ids"][0, 1] = 300
    with pytest.raises(ColumnError):
        parquet.encode_pieces(rows, np.zeros(1, np.int64), "nsp")


def test_a_partial_shard_of_something_else_is_a_clear_error(tmp_path) -> None:
    from bert_data.format.containers import container_for
    from bert_data.output.rewrite import rewrite_shard

    (_, piece, _), = parquet.encode_pieces(_nsp_rows(), np.zeros(1, np.int64), "nsp")
    spec = parquet.ShardSpec("nsp", (), 0, 0)
    for name, data, problem in [("framed", frame_records([piece]), "byte 0 is not a piece of nsp rows"),
                                ("cut", piece[:-3], "the piece at byte 0 runs past its end"),
                                ("other", piece + b"\x08\x01" * 100, f"byte {len(piece)} is not a piece")]:
        partial = tmp_path / f"{name}.partial"
        partial.write_bytes(data)
        with pytest.raises(parquet.PieceError, match=problem):
            rewrite_shard(str(partial), container_for("parquet"), str(tmp_path), f"{name}.parquet", spec)
        assert not (tmp_path / f"{name}.parquet").exists()
    assert parquet.body_size(str(tmp_path / "other.partial")) == -1


def test_a_shard_without_rows_is_a_parquet_file_with_no_row_group(tmp_path) -> None:
    _need("pyarrow")
    import pyarrow.parquet as pq

    path = _assemble([], tmp_path)
    assert path.read_bytes()[:4] == b"PAR1"
    assert pq.read_table(path).num_rows == 0 and pq.ParquetFile(path).metadata.num_row_groups == 0


def test_a_stop_leaves_no_file(tmp_path) -> None:
    """A signal or another shard's failure stops a copy (rewrite_shard's ``stop``); the file goes
    with the writer's abort."""
    import threading

    from bert_data.format.containers import container_for
    from bert_data.output.rewrite import RewriteStopped, rewrite_shard

    (_, piece, _), = parquet.encode_pieces(_nsp_rows(), np.zeros(1, np.int64), "nsp")
    partial = tmp_path / "x.partial"
    partial.write_bytes(piece * 3)
    stop = threading.Event()
    stop.set()
    (tmp_path / "out").mkdir()
    with pytest.raises(RewriteStopped):
        rewrite_shard(str(partial), container_for("parquet"), str(tmp_path / "out"), "x.parquet",
                      parquet.ShardSpec("nsp", (), 4, 2), stop)
    assert not list((tmp_path / "out").iterdir())


# --- MDS samples: padded rows -> TFRecord frames of streaming's sample bytes ---------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches())
def test_the_c_accelerator_makes_the_mds_samples_numpy_makes(batch, monkeypatch) -> None:
    _need_native()
    from bert_data.format import mds

    features, shards = batch
    if (features["input_mask"].sum(axis=1) == 0).any() or (features["masked_lm_weights"].sum(axis=1) == 0).any():
        with pytest.raises(ValueError, match="0 elements"):  # MDS refuses an empty array: C declines, numpy says so
            mds.frame_samples(features, shards, "nsp")
        return
    with monkeypatch.context() as patch:
        patch.setattr(native, "_wire", None)
        expected = mds.frame_samples(features, shards, "nsp")
    assert mds.frame_samples(features, shards, "nsp") == expected


@pytest.mark.parametrize("layout", ["nsp", "mlm_only", "unmasked"])
def test_the_workers_column_list_is_mdswriters(layout, tmp_path) -> None:
    """The workers encode samples in the column order, encodings and sizes of the MDSWriter that
    writes them (computed without importing streaming: tested against a real writer)."""
    _need("streaming")
    from bert_data.format import mds

    writer = mds.mds_writer_class()(out=str(tmp_path / "w"), columns=mds.mds_columns(layout), compression=None)
    mine = mds.writer_columns(layout)
    assert (list(mine.column_names), list(mine.column_encodings), list(mine.column_sizes)) == \
        (list(writer.column_names), list(writer.column_encodings), list(writer.column_sizes))
    writer.finish()


# --- --resume past what an interrupted publish left ---------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("pieces")
    return {"metadata": write_corpus(root / "corpus", n_docs=24), "vocab": write_vocab(root / "vocab.txt")}


def _args(corpus, out: Path, fmt: str) -> List[str]:
    return base_args(corpus["metadata"], corpus["vocab"], out, split_num=2, dupe_factor=3, output_format=fmt)


_CHILD = [sys.executable, "-c", "import sys; from bert_data.tools.create import main; sys.exit(main(sys.argv[1:]))"]


def _cli(args: List[str], crash_at: str = "") -> subprocess.CompletedProcess:
    """create_tfrecords ``args`` in a process of its own (killed with SIGKILL at ``crash_at``, if given)."""
    env = {**os.environ, "BERT_DATA_CRASH_AT": crash_at} if crash_at else None
    return subprocess.run(_CHILD + args, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("fmt", ["parquet", "mds"])
@pytest.mark.parametrize("obstacle", ["fifo", "directory", "read-only file", "fifo as the directory"])
def test_what_an_interrupted_run_left_being_assembled_never_blocks_the_resume(corpus, tmp_path, obstacle, fmt) -> None:
    """Whatever is at the paths an earlier attempt was rewriting into (``.bert_data_work/rewritten``:
    a FIFO, which an open would wait on for ever; a directory; a file that cannot be written) is
    removed by ``--resume`` (Parquet finishes its shards in place, MDS rewrites them there)."""
    _need("pyarrow")
    if fmt == "mds":
        _need("streaming")
    assert main(_args(corpus, tmp_path / "clean", fmt)) == 0
    out = tmp_path / "out"
    args = _args(corpus, out, fmt)
    killed = _cli(args, "checkpointed:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rewritten = out / ".bert_data_work" / "rewritten"
    if obstacle == "fifo as the directory":
        shutil.rmtree(rewritten, ignore_errors=True)
        os.mkfifo(rewritten)
    else:
        rewritten.mkdir(exist_ok=True)
        target = rewritten / ("examples-1.parquet" if fmt == "parquet" else "examples-1.00000.mds")
        target.unlink(missing_ok=True)
        if obstacle == "fifo":
            os.mkfifo(target)
        elif obstacle == "directory":
            (target / "inside").mkdir(parents=True)
        else:
            target.write_bytes(b"x")
            target.chmod(0o444)
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert published_files(out) == published_files(tmp_path / "clean")


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord"])
def test_a_published_shard_changed_before_the_resume_is_named(corpus, tmp_path, fmt) -> None:
    """helper-23: a run killed after publishing its shards, one of which was then changed, was
    refused as 'progress.json is damaged (it counts N bytes in X.partial, which holds 0)': a
    journal blamed, a file named that is not there. The line names the shard that changed."""
    if fmt == "parquet":
        _need("pyarrow")
    out = tmp_path / "out"
    args = _args(corpus, out, fmt)
    killed = _cli(args, "published:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    shard = sorted(out.glob(f"examples-*.{fmt}s" if fmt == "tfrecord" else f"examples-*.{fmt}"))[1]
    shard.write_bytes(shard.read_bytes()[:-10])
    resumed = _cli(args + ["--resume"])
    lines = resumed.stderr.strip().splitlines()
    assert resumed.returncode == 2 and len(lines) == 1, resumed.stderr
    assert lines[0].startswith(f"create_tfrecords: error: --resume: {shard} is not the shard this run published (")
    assert lines[0].endswith("changed or replaced after the run stopped; start over with --overwrite (the interrupted "
                             "run cannot be continued)")
    assert main(args + ["--overwrite"]) == 0


def test_a_partial_shard_damaged_where_the_journal_does_not_look_is_one_line(corpus, tmp_path) -> None:
    """The journal checksums a partial shard's last bytes only; a piece header damaged before them
    (a disk's fault, a hand) is met at publish: one line naming the shard, exit 2, and --overwrite
    recovers (never a traceback, never a file of garbage)."""
    _need("pyarrow")
    out = tmp_path / "out"
    args = _args(corpus, out, "parquet")
    killed = _cli(args, "published:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    shard = sorted(out.glob("examples-*.parquet"))[0]  # published: --resume takes it back as its partial shard
    data = bytearray(shard.read_bytes())
    data[0:4] = b"JUNK"  # the first piece's magic
    shard.write_bytes(bytes(data))
    resumed = _cli(args + ["--resume"])
    lines = [line for line in resumed.stderr.strip().splitlines() if " INFO " not in line]  # (the log's "resuming")
    assert resumed.returncode == 2 and len(lines) == 1 and "Traceback" not in resumed.stderr, resumed.stderr
    assert lines[0].endswith("examples-1.parquet.partial: byte 0 is not a piece of nsp rows: the partial shard is damaged; "
                             "start over with --overwrite")
    assert main(args + ["--overwrite"]) == 0


@pytest.mark.parametrize("fmt", ["parquet", "mds", "hdf5", "tfrecord"])
def test_a_run_whose_workers_encoded_otherwise_is_not_resumed(corpus, tmp_path, fmt) -> None:
    """What a rewriting format's runs hold is a fingerprint (``runs_encoding``): a run interrupted
    by a bert_data that wrote them otherwise (MDS and HDF5 wrote tf.train.Example records until
    2026-11-27) is refused by --resume in one line, never published as samples. A TFRecord run
    records none, so older TFRecord journals stay resumable."""
    _need({"parquet": "pyarrow", "mds": "streaming", "hdf5": "h5py", "tfrecord": "numpy"}[fmt])
    import json

    out = tmp_path / "out"
    args = _args(corpus, out, fmt) + (["--packing"] if fmt == "hdf5" else [])
    killed = _cli(args, "checkpointed:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_file = out / ".bert_data_work" / "run.json"
    run = json.loads(run_file.read_text())
    assert ("runs_encoding" in run["inputs"]) == (fmt != "tfrecord")
    run["inputs"].pop("runs_encoding", None)  # as a bert_data before the fingerprint wrote it
    run_file.write_text(json.dumps(run))
    resumed = _cli(args + ["--resume"])
    if fmt == "tfrecord":
        assert resumed.returncode == 0, resumed.stderr
        return
    lines = resumed.stderr.strip().splitlines()
    assert resumed.returncode == 2 and len(lines) == 1, resumed.stderr
    assert "the interrupted run did not record runs_encoding (an older bert_data)" in lines[0]
    assert "start over with --overwrite" in lines[0]
    assert main(args + ["--overwrite"]) == 0


def test_a_finished_output_of_an_older_bert_data_is_still_complete(corpus, tmp_path) -> None:
    """A finished output has no runs left to publish: one whose manifest records no
    ``runs_encoding`` (an older bert_data's) is complete to ``--resume``, not refused (helper-26)."""
    _need("streaming")
    import json

    out = tmp_path / "out"
    args = _args(corpus, out, "mds")
    assert main(args) == 0
    manifest_file = out / "data_params.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["inputs"].pop("runs_encoding") == "mds-samples/1"
    manifest_file.write_text(json.dumps(manifest))
    before = published_files(out)
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert published_files(out) == before

"""``--output_format parquet`` and ``mds``: the same records as the TFRecords of the same seed,
read back by each format's own reader (pyarrow, ``datasets``, ``streaming.StreamingDataset``),
byte-identical for any worker count, after kill -9 and ``--resume`` and for a URL output, and
trained on by Hugging Face's ``BertForPreTraining``.

Skipped when pyarrow / datasets / mosaicml-streaming / torch are missing, except under CI.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import base_args, published_files, python_code, write_corpus, write_vocab
from conftest import need as _need

from bert_data import storage
from bert_data.config import Config
from bert_data.format.batch_decode import decode_examples, iter_record_batches
from bert_data.format.columns import ColumnError, from_columns, rows_to_batch, to_columns
from bert_data.format.tfrecord import frame_records
from bert_data.output.rewrite import shard_spec
from bert_data.tools.create import main


FORMATS = ("parquet", "mds")
PACKAGE = {"parquet": ("pyarrow",), "mds": ("streaming",)}
OBJECTIVES = {
    "nsp": {},
    "sop": {"sentence_order_prediction": True},
    "mlm_only": {"mlm_only": True, "overlap_size": 4},
    "unmasked": {"mlm_only": True, "overlap_size": 4, "disable_masking": True, "unmasked_format": "ids", "dupe_factor": 1},
}
LAYOUT = {"nsp": "nsp", "sop": "sop", "mlm_only": "mlm_only", "unmasked": "unmasked"}


def _cli(args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("formats")
    return {"metadata": write_corpus(root / "corpus", n_docs=16), "vocab": write_vocab(root / "vocab.txt"), "root": root}


def _run(corpus, out: Path, **extra) -> Path:
    assert main(base_args(corpus["metadata"], corpus["vocab"], out, split_num=3, **extra)) == 0
    return out


_files = published_files


def _tfrecord_arrays(out: Path, config: Config) -> Dict[str, np.ndarray]:
    """The TFRecords of a directory decoded, shard after shard (the manifest's order)."""
    spec = shard_spec(config)
    manifest = json.loads((out / "data_params.json").read_text())
    parts: Dict[str, list] = {}
    for name in manifest["instances_per_shard"]:
        for batch in iter_record_batches(str(out / name)):
            arrays, decoded = decode_examples(batch.data, batch.starts, batch.lengths, spec.features)
            assert decoded.all()
            for key, value in arrays.items():
                parts.setdefault(key, []).append(value)
    return {key: np.concatenate(value) for key, value in parts.items()}


def _config(**extra) -> Config:
    return Config(max_seq_length=32, max_predictions_per_seq=5, **extra)


def _read_rows(fmt: str, out: Path, tmp_path: Path) -> List[Dict]:
    """Every row, in shard order, through the format's own reader."""
    manifest = json.loads((out / "data_params.json").read_text())
    if fmt == "parquet":
        import datasets

        files = [str(out / name) for name in manifest["instances_per_shard"]]
        ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
        return [ds[i] for i in range(len(ds))]
    from bert_data.format.mds import streaming_base

    dataset = streaming_base().StreamingDataset(local=str(out), shuffle=False, batch_size=1)
    return [dataset[i] for i in range(len(dataset))]


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_formats_own_reader_returns_the_tfrecords_records(corpus, tmp_path, fmt, objective) -> None:
    _need(*PACKAGE[fmt], "datasets")
    flags = OBJECTIVES[objective]
    reference = _run(corpus, tmp_path / "tfrecord", **flags)
    out = _run(corpus, tmp_path / fmt, output_format=fmt, **flags)
    config = _config(**{k: v for k, v in flags.items() if k not in ("dupe_factor",)})
    want = _tfrecord_arrays(reference, config)
    rows = _read_rows(fmt, out, tmp_path)
    layout = LAYOUT[objective]
    got = from_columns(rows_to_batch(rows, layout), layout, 32, 5)
    assert sorted(got) == sorted(want)
    mismatches = sum(int((~np.all(got[k] == want[k], axis=1)).sum()) for k in want)
    assert len(rows) == len(want["input_ids"]) > 0 and mismatches == 0
    manifest = json.loads((out / "data_params.json").read_text())
    tf_manifest = json.loads((reference / "data_params.json").read_text())
    assert manifest["output_format"] == fmt and "output_format" not in tf_manifest
    assert manifest["n_examples"] == tf_manifest["n_examples"] == sum(manifest["instances_per_shard"].values())
    assert all((out / name).is_file() for name in manifest["instances_per_shard"])


def test_parquet_columns_are_unpadded_and_named_for_hugging_face(corpus, tmp_path) -> None:
    _need("pyarrow")
    import pyarrow.parquet as pq

    out = _run(corpus, tmp_path / "p", output_format="parquet")
    table = pq.read_table(out / "examples-1.parquet")
    assert table.column_names == ["input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_label"]
    lengths = [len(x) for x in table.column("input_ids").to_pylist()]
    assert min(lengths) < 32 and max(lengths) <= 32  # unpadded
    assert [len(x) for x in table.column("token_type_ids").to_pylist()] == lengths
    metadata = pq.ParquetFile(out / "examples-1.parquet").metadata
    assert metadata.row_group(0).column(0).compression == "UNCOMPRESSED"  # (DELTA_BINARY_PACKED: a copy, not zstd)
    chunks = [metadata.row_group(0).column(i) for i in range(metadata.num_columns)]
    assert [c.path_in_schema for c in chunks] == ["input_ids.list.element", "token_type_ids.list.element",
                                                  "masked_lm_positions.list.element", "masked_lm_ids.list.element",
                                                  "next_sentence_label"]
    assert all(set(c.encodings) == {"DELTA_BINARY_PACKED", "RLE"} for c in chunks), [(c.path_in_schema, c.encodings) for c in chunks]
    assert metadata.created_by.startswith("bert_data version ")


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_bytes_for_any_worker_count_and_a_url_output(corpus, tmp_path, fmt) -> None:
    _need(*PACKAGE[fmt])
    outputs = [_run(corpus, tmp_path / f"w{n}", output_format=fmt, num_workers=n) for n in (1, 2, 3)]
    url = tmp_path / "url"
    assert main(base_args(corpus["metadata"], corpus["vocab"], f"file://{url}", split_num=3, output_format=fmt)) == 0
    first = _files(outputs[0])
    assert len(first) >= 4
    for other in outputs[1:] + [url]:
        assert _files(other) == first


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("crash_at, workers", [("checkpointed:1", 1), ("appended:2", 2), ("published:0", 1)])
def test_kill_then_resume_gives_the_clean_bytes(corpus, tmp_path, fmt, crash_at, workers) -> None:
    _need(*PACKAGE[fmt])
    clean = _run(corpus, tmp_path / "clean", output_format=fmt)
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=3, output_format=fmt, num_workers=workers)
    killed = _cli(args, env={"BERT_DATA_CRASH_AT": crash_at})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (out / "data_params.json").exists()
    resumed = _cli(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _files(out) == _files(clean)
    assert not (out / ".bert_data_work").exists()


@pytest.mark.parametrize("crash_at", ["indexed:1", "published:0"])
def test_a_url_output_killed_then_resumed_gives_the_clean_bytes(corpus, tmp_path, crash_at) -> None:
    _need("pyarrow", "streaming")
    for fmt in FORMATS:
        clean = _run(corpus, tmp_path / f"clean-{fmt}", output_format=fmt)
        out = tmp_path / f"url-{fmt}"
        args = base_args(corpus["metadata"], corpus["vocab"], f"file://{out}", split_num=3, output_format=fmt)
        assert _cli(args, env={"BERT_DATA_CRASH_AT": crash_at}).returncode == -signal.SIGKILL
        resumed = _cli(args + ["--resume"])
        assert resumed.returncode == 0, resumed.stderr
        assert _files(out) == _files(clean)


@pytest.mark.parametrize("half_removed", [False, True])
@pytest.mark.parametrize("fmt", ["tfrecord", *FORMATS])
def test_a_kill_during_the_commit_leaves_a_finished_output_that_resume_tidies(corpus, tmp_path, fmt, half_removed) -> None:
    """Killed after the manifest (the commit point) while the work directory is being removed:
    the output is finished; --resume says so, removes the work directory and changes no byte; a
    plain run again is refused as over any finished output (--overwrite), not as an interrupted one.
    The same for a URL output, whose work directory is many objects."""
    if fmt != "tfrecord":
        _need(*PACKAGE[fmt])
    clean = _run(corpus, tmp_path / "clean", output_format=fmt)
    for out, where in ((tmp_path / "out", str(tmp_path / "out")), (tmp_path / "url", f"file://{tmp_path / 'url'}")):
        args = base_args(corpus["metadata"], corpus["vocab"], where, split_num=3, output_format=fmt)
        assert _cli(args, env={"BERT_DATA_CRASH_AT": "committed:0"}).returncode == -signal.SIGKILL
        assert (out / "data_params.json").exists() and (out / ".bert_data_work").exists()
        again = _cli(args)
        assert again.returncode == 2 and "--overwrite" in again.stderr and "interrupted" not in again.stderr, again.stderr
        if half_removed:
            (out / ".bert_data_work" / "run.json").unlink()  # as a kill half-way through removing it leaves it
        resumed = _cli(args + ["--resume"])
        assert resumed.returncode == 0, resumed.stderr
        assert not (out / ".bert_data_work").exists()
        assert _files(out) == _files(clean)


@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_removes_what_an_interrupted_run_of_another_format_published(corpus, tmp_path, fmt) -> None:
    """Killed after publishing its files but before its manifest, a run of one format leaves only
    its run.json to say what they are: --overwrite with another format (and another --name)
    removes them too, so no reader finds them beside the new run's (local and URL outputs)."""
    _need(*PACKAGE[fmt])
    clean = _run(corpus, tmp_path / "clean")
    for out, where in ((tmp_path / "out", str(tmp_path / "out")), (tmp_path / "url", f"file://{tmp_path / 'url'}")):
        killed = base_args(corpus["metadata"], corpus["vocab"], where, split_num=3, output_format=fmt, name="old")
        assert _cli(killed, env={"BERT_DATA_CRASH_AT": "published:0"}).returncode == -signal.SIGKILL
        assert any(p.name.startswith("old-") for p in out.iterdir())
        done = _cli(base_args(corpus["metadata"], corpus["vocab"], where, split_num=3) + ["--overwrite"])
        assert done.returncode == 0, done.stderr
        assert _files(out) == _files(clean)


def test_a_resume_with_another_format_is_refused_naming_the_flag(corpus, tmp_path) -> None:
    _need("pyarrow")
    out = tmp_path / "out"
    args = base_args(corpus["metadata"], corpus["vocab"], out, split_num=3, output_format="parquet")
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    other = _cli(base_args(corpus["metadata"], corpus["vocab"], out, split_num=3) + ["--resume"])
    assert other.returncode == 2 and "output_format" in other.stderr and "Traceback" not in other.stderr


def test_overwrite_replaces_a_previous_runs_mds_pieces_and_index(corpus, tmp_path) -> None:
    _need("streaming", "pyarrow")
    out = _run(corpus, tmp_path / "out", output_format="mds", num_output_files=4)
    assert (out / "index.json").exists() and (out / "examples-4.00000.mds").exists()
    _run(corpus, out, output_format="parquet", overwrite=True)
    left = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert left == ["data_params.json", "examples-1.parquet", "examples-2.parquet", "examples-3.parquet"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"output_format": "csv"}, "--output_format"),
        ({"output_format": "parquet", "compression": "gzip"}, "--compression gzip is for TFRecords"),
        ({"output_format": "mds", "packing": True}, "drop --packing"),
        ({"output_format": "parquet", "mlm_only": True, "disable_masking": True}, "--unmasked_format ids"),
        ({"output_format": "parquet", "runner": "beam"}, "--runner beam writes TFRecords only"),
    ],
)
def test_a_format_the_run_cannot_write_is_one_line_exit_2(corpus, tmp_path, extra, needle) -> None:
    done = _cli(base_args(corpus["metadata"], corpus["vocab"], tmp_path / "out", **extra))
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert any(needle in line for line in lines) and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


ROWS = st.integers(1, 12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_columns_round_trip_exactly_and_refuse_what_they_cannot_hold(data) -> None:
    n = data.draw(ROWS)
    seq, pred = 16, 4
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(5, seq + 1, n)
    predictions = rng.integers(0, pred + 1, n)
    real = np.arange(seq)[None, :] < lengths[:, None]
    used = np.arange(pred)[None, :] < predictions[:, None]
    features = {
        "input_ids": np.where(real, rng.integers(1, 40000, (n, seq)), 0),
        "input_mask": real.astype(np.int64),
        "segment_ids": np.where(real & (np.arange(seq)[None, :] >= 3), 1, 0),
        "masked_lm_positions": np.where(used, rng.integers(1, 5, (n, pred)), 0),
        "masked_lm_ids": np.where(used, rng.integers(1, 40000, (n, pred)), 0),
        "masked_lm_weights": used.astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n, 1)),
    }
    back = from_columns(to_columns(features, "nsp"), "nsp", seq, pred)
    assert all(np.array_equal(back[k], features[k]) and back[k].dtype == features[k].dtype for k in features)
    row, column = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, seq - 1))
    broken = dict(features, input_ids=features["input_ids"].copy())
    broken["input_ids"][row, column] = 0 if real[row, column] else 7
    if real[row, column]:
        assert np.array_equal(from_columns(to_columns(broken, "nsp"), "nsp", seq, pred)["input_ids"], broken["input_ids"])
    else:
        with pytest.raises(ColumnError):
            to_columns(broken, "nsp")  # a non-zero past the row's length would be lost
    holey = dict(features, input_mask=features["input_mask"].copy())
    holey["input_mask"][row, 0] = 0
    with pytest.raises(ColumnError):
        to_columns(holey, "nsp")  # a mask that is not a prefix of ones


@pytest.mark.parametrize("fmt", FORMATS)
def test_bert_for_pretraining_trains_from_each_format(corpus, tmp_path, fmt) -> None:
    _need(*PACKAGE[fmt], "datasets", "torch", "transformers")
    import torch
    from transformers import BertConfig, BertForPreTraining

    from bert_data.reader.collate import PretrainingCollator

    out = _run(corpus, tmp_path / fmt, output_format=fmt)
    if fmt == "parquet":
        import datasets

        files = sorted(glob.glob(str(out / "*.parquet")))
        dataset = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    else:
        from bert_data.format.mds import streaming_base

        dataset = streaming_base().StreamingDataset(local=str(out), shuffle=False, batch_size=8)
    torch.manual_seed(0)
    vocab_size = len(corpus["vocab"].read_text().split("\n"))
    model = BertForPreTraining(BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, collate_fn=PretrainingCollator())
    losses = []
    for _ in range(3):
        for batch in loader:
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) >= 3 * 19 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])  # it learns from the rows


def _normalised(text: str, out: Path) -> str:
    """An inspect report with the directory and file names of one format taken out."""
    text = text.replace(str(out), "DIR")
    for suffix in (".00000.mds", ".parquet", ".tfrecords"):
        text = text.replace(suffix, ".SHARD")
    return text


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_reads_each_format_to_the_tfrecords_verdict(corpus, tmp_path, fmt, capsys) -> None:
    _need(*PACKAGE[fmt])
    from bert_data.tools import inspect as insp

    reference = _run(corpus, tmp_path / "tfrecord")
    out = _run(corpus, tmp_path / fmt, output_format=fmt)
    capsys.readouterr()
    reports = {}
    for directory in (reference, out):
        for mode in (["--stats"], ["-n", "3"]):
            assert insp.main([str(directory), *mode, "--vocab_file", str(corpus["vocab"])]) == 0
            reports[directory, mode[0]] = _normalised(capsys.readouterr().out, directory)
    assert reports[out, "--stats"] == reports[reference, "--stats"] and "\nOK" in reports[out, "--stats"]
    assert reports[out, "-n"] == reports[reference, "-n"] and "record 2" in reports[out, "-n"]
    # a damaged file is reported as unreadable, never passed
    victim = sorted(p for p in out.iterdir() if p.suffix in (".parquet", ".mds"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    assert insp.main([str(out), "--stats", "--vocab_file", str(corpus["vocab"])]) != 0
    assert "unreadable" in capsys.readouterr().out


def test_tfrecord_readers_refuse_a_parquet_directory_naming_its_reader(corpus, tmp_path) -> None:
    _need("pyarrow")
    from bert_data.errors import RecordFormatError
    from bert_data.format.manifest import directory_reads, load_manifest

    out = _run(corpus, tmp_path / "p", output_format="parquet")
    with pytest.raises(RecordFormatError, match=r"holds parquet files .*datasets.load_dataset\('parquet'"):
        directory_reads(str(out), load_manifest(str(out)), (), [])


MDS_LAYOUTS = {"nsp": 300, "mlm_only": 40, "unmasked": 20}  # layout -> max_seq_length (300: uint16 shapes too)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_mds_bulk_encoding_writes_the_bytes_mdswriter_writes_row_by_row(tmp_path_factory, data) -> None:
    """The MDS writer is fed samples encoded in bulk (mds.encode_samples), framed as the workers
    frame them (a partial shard), its pieces made by mds.PieceAppender from the frames read a
    window at a time (framed.FramedFile): its pieces and index must be byte for byte those of
    ``MDSWriter.write`` called with each row, for any batches, piece size limits and windows
    (several pieces per shard here, samples larger than the limit or the window)."""
    _need("streaming")
    from bert_data.format import framed as framed_module, mds

    layout = data.draw(st.sampled_from(sorted(MDS_LAYOUTS)))
    seq, pred = MDS_LAYOUTS[layout], 6
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = data.draw(st.integers(1, 40))
    lengths = rng.integers(1, seq + 1, n)
    predictions = rng.integers(1, pred + 1, n)  # MDS refuses empty arrays (below)
    real = np.arange(seq)[None, :] < lengths[:, None]
    used = np.arange(pred)[None, :] < predictions[:, None]
    features = {"input_ids": np.where(real, rng.integers(1, 70000, (n, seq)), 0), "input_mask": real.astype(np.int64)}
    if layout != "unmasked":
        features.update(masked_lm_positions=np.where(used, rng.integers(1, seq, (n, pred)), 0),
                        masked_lm_ids=np.where(used, rng.integers(1, 70000, (n, pred)), 0),
                        masked_lm_weights=used.astype(np.float32))
    if layout == "nsp":
        features.update(segment_ids=np.where(real & (np.arange(seq)[None, :] >= 2), 1, 0),
                        next_sentence_labels=rng.integers(0, 2, (n, 1)))
    limit = data.draw(st.sampled_from([None, 1 << 26, 300, 2000, 9000]))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=4)) if n > 1 else []))
    root = tmp_path_factory.mktemp("mds")
    base = mds.streaming_base()
    writers = {"framed": mds.piece_writer(str(root / "framed"), layout, limit, base.MDSWriter),
               "rows": base.MDSWriter(out=str(root / "rows"), columns=mds.mds_columns(layout), compression=None,
                                      hashes=[mds.PIECE_HASH], size_limit=limit, max_workers=1)}
    framed = mds.PieceAppender(writers["framed"])
    frames = []
    with pytest.MonkeyPatch.context() as patch:  # (pieces are gathered a window at a time, written a step at a time:
        patch.setattr(framed_module, "WINDOW", data.draw(st.sampled_from([framed_module.WINDOW, 16, 64, 700])))  # small ones too)
        patch.setattr(storage, "WRITE_STEP", data.draw(st.sampled_from([storage.WRITE_STEP, 7, 1000])))
        for a, b in zip([0] + cuts, cuts + [n]):
            batch = to_columns({k: v[a:b] for k, v in features.items()}, layout)
            frames.append(frame_records([bytes(sample) for sample in mds.encode_samples(writers["framed"], batch)]))
            for row in batch.iter_rows():
                writers["rows"].write(row)
        (root / "frames").write_bytes(b"".join(frames))  # (a partial shard: the batches' frames back to back)
        source = framed_module.FramedFile(str(root / "frames"))
        for frames_read in source.frames():
            framed.append_framed(source, frames_read.starts, frames_read.lengths)
        framed.finish()
        source.close()
    writers["rows"].finish()
    names = sorted(os.listdir(root / "rows"))
    assert len(names) >= 2 and sorted(os.listdir(root / "framed")) == names
    assert all((root / "framed" / name).read_bytes() == (root / "rows" / name).read_bytes() for name in names)
    if layout != "unmasked":  # an empty array is refused as MDSWriter refuses it, never written
        empty = to_columns(dict(features, masked_lm_weights=np.zeros_like(features["masked_lm_weights"]),
                                masked_lm_positions=np.zeros_like(features["masked_lm_positions"]),
                                masked_lm_ids=np.zeros_like(features["masked_lm_ids"])), layout)
        with pytest.raises(ValueError, match="0 elements"):
            mds.encode_samples(writers["framed"], empty)


def test_the_mds_writer_is_imported_without_streamings_datasets_and_they_still_import_after() -> None:
    """Writing MDS imports MDSWriter's own modules only (not transformers, which streaming's
    datasets import: ~1.3 CPU-s a run), and a reader imported afterwards is streaming whole."""
    _need("streaming")
    code = (
        "import sys\n"
        "from bert_data.format import mds\n"
        "writer = mds.mds_writer_class()\n"
        "assert writer.__name__ == 'MDSWriter' and 'transformers' not in sys.modules, sorted(sys.modules)\n"
        "assert 'streaming' not in sys.modules and 'streaming.base' not in sys.modules\n"
        "base = mds.streaming_base()\n"
        "import streaming.base.format.mds.writer as w, streaming.base.storage.upload as u\n"
        "assert base.StreamingDataset.__name__ == 'StreamingDataset' and w.MDSWriter.__name__ == 'MDSWriter'\n"
        "assert sys.modules['streaming.base'].format is sys.modules['streaming.base.format'] and u.CloudUploader\n"
    )
    python_code(code)


@pytest.mark.parametrize("pil_first", [False, True])
def test_the_mds_writer_loads_without_pil_tqdm_filelock_or_compressors_and_streaming_uses_the_real_ones_after(pil_first, tmp_path) -> None:
    """The writer's modules import PIL, tqdm, filelock, brotli, snappy and zstd at their top for
    what writing never does (0.06 -> 0.03 s measured alone): stand-ins load none of them, and every later
    use is the real module (a compressor's round trip, the JPEG encoding's isinstance, the
    barrier's lock). A module the process already imported is used as it is (pil_first)."""
    _need("streaming")
    code = (
        "import io, sys\n"
        + ("import PIL.Image, PIL.JpegImagePlugin\n" if pil_first else "")
        + "from bert_data.format import mds\n"
        "mds.mds_writer_class()\n"
        "loaded = sorted(m for m in ('PIL.Image', 'tqdm', 'filelock', 'brotli', 'snappy', 'zstd') if m in sys.modules)\n"
        "assert not any(getattr(m, '__stand_in__', False) for m in list(sys.modules.values())), 'a stand-in stayed'\n"
        "c, e, b = (sys.modules['streaming.base.' + n] for n in ('compression', 'format.mds.encodings', 'shared.barrier'))\n"
        "assert [c.decompress(a, c.compress(a, b'abc' * 9)) for a in ('br', 'snappy', 'zstd')] == [b'abc' * 9] * 3\n"
        "from PIL import Image, JpegImagePlugin\n"
        "image, out = Image.new('RGB', (4, 4)), io.BytesIO()\n"
        "image.save(out, 'JPEG')\n"
        "jpeg = Image.open(io.BytesIO(out.getvalue()))\n"
        "assert isinstance(jpeg, e.JpegImageFile) and not isinstance(image, e.JpegImageFile)\n"
        "assert issubclass(JpegImagePlugin.JpegImageFile, e.JpegImageFile) and e.Image.Image is Image.Image\n"
        "assert e.JPEG().encode(jpeg) == out.getvalue()  # (the file's own bytes: the JpegImageFile branch)\n"
        "import filelock, tqdm\n"
        "assert isinstance(b.FileLock(sys.argv[1]), filelock.FileLock)\n"
        "assert sys.modules['streaming.base.storage.upload'].tqdm.tqdm is tqdm.tqdm\n"
        "print(loaded)\n"
    )
    assert python_code(code, str(tmp_path / "lock")).splitlines()[-1] == ("['PIL.Image']" if pil_first else "[]")


def test_threads_importing_a_stood_in_module_meanwhile_get_the_real_one() -> None:
    """helper-33/34: the stand-ins are in sys.modules while the writer's modules load; a thread
    that imported one of them then got the stand-in (PIL.Image.open: ImportError) or had its
    own import broken. Each stand-in's import lock is held meanwhile: every form of import in
    another thread waits for the window's end, then reads the real module's attributes. The
    threads are released into their imports inside the window and the window stays open until
    each waits on a module lock (their stacks show it), so the test does not depend on timing."""
    _need("streaming")
    code = (
        "import importlib, sys, threading, time\n"
        "from bert_data.format import streaming_import\n"
        "window, got = threading.Event(), {}\n"
        "def use(form):\n"
        "    if form == 'import_module': return importlib.import_module('PIL.Image').open\n"
        "    if form == 'import a.b':\n"
        "        import PIL.JpegImagePlugin\n"
        "        return PIL.JpegImagePlugin.JpegImageFile\n"
        "    if form == 'import a':\n"
        "        import tqdm\n"
        "        return tqdm.tqdm\n"
        "    if form == 'from a import b':\n"
        "        from zstd import compress\n"
        "        return compress\n"
        "    import filelock\n"
        "    return filelock.FileLock\n"
        "def importer(form):\n"
        "    window.wait()\n"
        "    try:\n"
        "        got[form] = use(form)\n"
        "    except Exception as exc:\n"
        "        got[form] = exc\n"
        "forms = ['import_module', 'import a.b', 'import a', 'from a import b', 'filelock']\n"
        "threads = {form: threading.Thread(target=importer, args=(form,)) for form in forms}\n"
        "[thread.start() for thread in threads.values()]\n"
        "def waiting(thread):\n"
        "    frame = sys._current_frames().get(thread.ident)\n"
        "    while frame is not None:\n"
        "        if frame.f_code.co_name == 'acquire' and 'importlib' in frame.f_code.co_filename: return True\n"
        "        frame = frame.f_back\n"
        "    return False\n"
        "class Importlib:  # (the window: stand-ins in sys.modules, their locks held)\n"
        "    def __getattr__(self, name): return getattr(importlib, name)\n"
        "    def import_module(self, name):\n"
        "        window.set()\n"
        "        deadline = time.monotonic() + 60\n"
        "        while not all(waiting(t) for t in threads.values()) and time.monotonic() < deadline: time.sleep(0.01)\n"
        "        assert all(waiting(t) for t in threads.values()), 'the importers never waited'\n"
        "        return importlib.import_module(name)\n"
        "streaming_import.importlib = Importlib()\n"
        "streaming_import.mds_writer_class()\n"
        "streaming_import.importlib = importlib\n"
        "[thread.join() for thread in threads.values()]\n"
        "import PIL.Image, PIL.JpegImagePlugin, tqdm, zstd, filelock\n"
        "real = {'import_module': PIL.Image.open, 'import a.b': PIL.JpegImagePlugin.JpegImageFile, 'import a': tqdm.tqdm,\n"
        "        'from a import b': None, 'filelock': filelock.FileLock}\n"
        "bad = {form: value for form, value in got.items() if isinstance(value, Exception)\n"
        "       or (real[form] is not None and value is not real[form] and not issubclass(value, real[form]))}\n"
        "assert set(got) == set(forms) and not bad, bad\n"
        "assert got['from a import b'](b'x') == zstd.compress(b'x')\n"
        "print('ok')\n"
    )
    assert python_code(code).splitlines()[-1] == "ok"


@pytest.mark.parametrize("stand_ins_fit", [True, False])
def test_mds_is_written_without_importing_torch_and_torch_still_works_after(corpus, tmp_path, stand_ins_fit) -> None:
    """The MDS writer's modules import torch.distributed and torch.utils.data for functions writing
    never calls: stand-ins take their place while they load (1.0 CPU-s and ~200 MB less a run),
    the real modules serve every later use (rank queries, the readers), and a streaming release
    that reads another torch name as it loads is imported again with torch (stand_ins_fit=False)."""
    _need("streaming", "torch")
    want = _run(corpus, tmp_path / "reference", output_format="mds")
    out = tmp_path / "mds"
    code = (
        "import sys\n"
        "from bert_data.format import mds\n"
        + ("" if stand_ins_fit else "from bert_data.format import streaming_import\nstreaming_import.STAND_INS['torch.utils.data'] = {}\n")
        + "from bert_data.tools.create import main\n"
        f"assert main({base_args(corpus['metadata'], corpus['vocab'], out, split_num=3, output_format='mds')!r}) == 0\n"
        "loaded = 'torch' in sys.modules\n"
        "util, world = sys.modules['streaming.base.util'], sys.modules['streaming.base.world']\n"
        "import torch\n"
        "assert util.dist.is_available() == torch.distributed.is_available() and not util.dist.is_initialized()\n"
        "assert world.get_worker_info() is None and sys.modules['torch'] is torch\n"
        "rows = len(mds.streaming_base().StreamingDataset(local=sys.argv[1], shuffle=False, batch_size=1))\n"
        "print('imported torch:', loaded, 'rows:', rows)\n"
    )
    printed = python_code(code, str(out))
    records = sum(json.loads((want / "data_params.json").read_text())["instances_per_shard"].values())
    assert printed.splitlines()[-1] == f"imported torch: {not stand_ins_fit} rows: {records}"
    assert _files(out) == _files(want)


def test_an_mds_shard_without_a_sample_is_warned_about_like_an_empty_tfrecord_shard(corpus, tmp_path) -> None:
    """An MDS shard with no sample has no piece at all (MDSWriter writes none), so the manifest
    cannot list it: the warning counts shards, not files, out of --num_output_files."""
    _need(*PACKAGE["mds"])
    from bert_data.format.containers import MDSContainer
    from bert_data.runners.finish import empty_shards

    warnings = {}
    for fmt in ("tfrecord", "mds"):
        out = tmp_path / fmt
        done = _cli(base_args(corpus["metadata"], corpus["vocab"], out, output_format=fmt, num_output_files=400,
                              dupe_factor=1))
        assert done.returncode == 0, done.stderr
        manifest = json.loads((out / "data_params.json").read_text())
        warnings[fmt] = [line for line in done.stderr.splitlines() if "shards are empty" in line]
        if fmt == "mds":
            full = {MDSContainer.shard_of(name) for name, count in manifest["instances_per_shard"].items() if count}
            assert empty_shards(manifest) == (400 - len(full), 400) and len(full) == manifest["n_examples"] < 400
    assert len(warnings["mds"]) == 1 and warnings["mds"][0].split("WARNING ")[1] == warnings["tfrecord"][0].split("WARNING ")[1]

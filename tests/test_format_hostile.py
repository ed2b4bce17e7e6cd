"""The new output formats off the happy path (a red-team review's findings, each fixed as a class).

* A finished run is not "resumed" by a command that asks for another layout: the settings a
  manifest leaves out at their defaults (``--output_format tfrecord``, no ``--packing``) are
  compared as those defaults.
* A format's sidecar file (MDS's ``index.json``) is a file the run replaces: never an input.
* ``inspect_tfrecords`` finds an MDS piece that is not the one its ``index.json`` lists (size, xxh64).
* What NVIDIA's HDF5 layout cannot hold in a vocabulary is refused at start-up, not at publish.
* No room for a rewritten shard is one line (HDF5 can crash on a full disk mid-file).
* The end-of-run advice for Parquet names this run's files only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import base_args, write_corpus, write_vocab
from conftest import need as _need
from bert_data.tools import create as cli
from bert_data.tools import inspect as inspect_tool


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_formats")
    metadata = write_corpus(root / "corpus", n_docs=12)
    vocab = write_vocab(root / "vocab.txt")
    return metadata, vocab


def _args(corpus, out: Path, **flags):
    metadata, vocab = corpus
    return base_args(metadata, vocab, out, quiet=True, **flags)


def test_a_finished_run_of_another_layout_is_not_resumed(corpus, tmp_path, capsys):
    _need("pyarrow")
    cases = (({"output_format": "parquet"}, {}, "--output_format was 'parquet', now 'tfrecord'"),
             ({"packing": True}, {}, "--packing was True, now False"),
             ({}, {"output_format": "parquet"}, "--output_format was 'tfrecord', now 'parquet'"))
    for case, (first, then, said) in enumerate(cases):
        out = tmp_path / f"run{case}"
        assert cli.main(_args(corpus, out, **first)) == 0
        listing = sorted(p.name for p in out.iterdir())
        capsys.readouterr()
        assert cli.main(_args(corpus, out, resume=True, **then)) == 2
        assert said in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == listing  # nothing written, nothing removed


def test_mds_index_is_never_an_input_and_damaged_pieces_fail_inspect(corpus, tmp_path, capsys):
    _need("streaming", "pyarrow")
    metadata, vocab = corpus
    out = tmp_path / "mds"
    out.mkdir()
    (out / "index.json").write_bytes(metadata.read_bytes())  # the metadata file, where MDS writes its index
    args = base_args(out / "index.json", vocab, out, input_files_prefix=str(metadata.parent), output_format="mds",
                     overwrite=True, quiet=True)
    capsys.readouterr()
    assert cli.main(args) == 2
    assert "is a file that a run in --output_dir" in capsys.readouterr().err
    assert (out / "index.json").read_bytes() == metadata.read_bytes()

    good = tmp_path / "good"
    assert cli.main(_args(corpus, good, output_format="mds")) == 0
    capsys.readouterr()
    assert inspect_tool.main([str(good), "--stats"]) == 0
    pieces = sorted(good.glob("*.mds"))
    assert len(pieces) == 3
    (pieces[0]).write_bytes(pieces[1].read_bytes())  # another shard's piece in its place
    capsys.readouterr()
    assert inspect_tool.main([str(good), "--stats"]) == 1
    assert "the file is damaged" in capsys.readouterr().out


def test_an_mds_index_that_is_a_fifo_is_one_line_never_a_hang(corpus, tmp_path):
    """helper-17's case 2: the pieces and the manifest were checked for being regular files, the
    index.json beside them was opened as it was (a FIFO blocked inspect forever)."""
    import subprocess
    import sys

    _need("streaming", "pyarrow")
    out = tmp_path / "mds"
    assert cli.main(_args(corpus, out, output_format="mds")) == 0
    (out / "index.json").unlink()
    os.mkfifo(out / "index.json")
    for extra in (["--stats"], ["-n", "1"]):
        done = subprocess.run([sys.executable, "-m", "bert_data.tools.inspect", str(out), *extra], capture_output=True,
                              text=True, timeout=120)  # (a hang fails here, not the whole suite)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"{out / 'index.json'} is not a regular file" in done.stdout + done.stderr


def test_nvidia_hdf5_vocabularies_are_checked_before_any_work(corpus, tmp_path, capsys):
    _need("h5py")
    metadata, vocab = corpus
    lines = vocab.read_text().splitlines()
    big = tmp_path / "big.txt"
    big.write_text("\n".join(lines + [f"fill{i}" for i in range(40000)]) + "\n")
    moved = tmp_path / "moved.txt"
    moved.write_text("\n".join(lines[1:3] + lines[:1] + lines[3:]) + "\n")
    for vocab_file, said in ((big, "at most 32,768 entries"), (moved, "id 0 must be [PAD]")):
        out = tmp_path / vocab_file.stem
        args = base_args(metadata, vocab_file, out, output_format="hdf5", packing=True, quiet=True)
        capsys.readouterr()
        assert cli.main(args) == 2
        assert said in capsys.readouterr().err
        assert not out.exists()


def test_no_room_for_a_rewritten_shard_is_one_line_and_resume_finishes(corpus, tmp_path, capsys, monkeypatch):
    _need("h5py")
    import bert_data.output.rewrite as rewrite

    real = rewrite.shutil.disk_usage
    monkeypatch.setattr(rewrite.shutil, "disk_usage", lambda path: real(path)._replace(free=1000))
    out = tmp_path / "full"
    args = _args(corpus, out, output_format="hdf5", packing=True)
    assert cli.main(args) != 0
    err = capsys.readouterr().err
    assert "No space left on device" in err and "--resume" in err and "Traceback" not in err
    monkeypatch.setattr(rewrite.shutil, "disk_usage", real)
    assert cli.main(args + ["--resume"]) == 0
    clean = tmp_path / "clean"
    assert cli.main(_args(corpus, clean, output_format="hdf5", packing=True)) == 0
    assert {p.name: p.read_bytes() for p in out.glob("*.hdf5")} == {p.name: p.read_bytes() for p in clean.glob("*.hdf5")}


def test_parquet_advice_names_this_runs_files(corpus, tmp_path, capsys):
    _need("pyarrow")
    metadata, vocab = corpus
    out = tmp_path / "named"
    assert cli.main(base_args(metadata, vocab, out, output_format="parquet", name="B")) == 0
    assert f"data_files='{out}/B-*.parquet'" in capsys.readouterr().out


def test_the_tfrecord_reader_names_the_reader_of_a_rewritten_file(corpus, tmp_path):
    _need("pyarrow", "tensorflow")
    from bert_data.errors import RecordFormatError
    from bert_data.reader.files import resolve_reads

    out = tmp_path / "pq"
    assert cli.main(_args(corpus, out, output_format="parquet")) == 0
    for pattern in (str(out / "*.parquet"), str(out / "examples-1.parquet")):
        with pytest.raises(RecordFormatError, match="is a parquet file .* read it with datasets.load_dataset"):
            resolve_reads(pattern)


def test_a_stopping_run_stops_rewriting_shards(corpus, tmp_path):
    """A signal or another shard's error stops the rewrite within a batch (a writer checks between
    batches; shards not begun are not begun), leaving no partial file behind."""
    _need("streaming")  # (MDS: rewritten from the TFRecord frames; Parquet's pieces: tests/test_parquet_pieces.py)
    import threading

    from bert_data.config import Config
    from bert_data.format.containers import container_for
    from bert_data.output.rewrite import RewriteStopped, rewrite_shard, rewrite_shards, shard_spec

    out = tmp_path / "tf"
    assert cli.main(_args(corpus, out)) == 0
    sources = [str(p) for p in sorted(out.glob("*.tfrecords"))]
    spec = shard_spec(Config(max_seq_length=32, max_predictions_per_seq=5))
    stopped = threading.Event()
    stopped.set()
    (tmp_path / "a").mkdir()
    with pytest.raises(RewriteStopped):
        rewrite_shard(sources[0], container_for("mds"), str(tmp_path / "a"), "x.mds", spec, stopped)
    assert not (tmp_path / "a" / "x.mds").exists()

    placed = []

    def place(name: str) -> None:
        placed.append(name)
        raise OSError(28, "No space left on device", name)

    names = [f"s-{i}.mds" for i in range(len(sources))]
    with pytest.raises(OSError):
        rewrite_shards(sources, names, container_for("mds"), str(tmp_path / "b"), spec, place, threads=1)
    assert placed == ["s-0.00000.mds"]  # the shards after the failing one were never placed


@pytest.mark.parametrize("fmt, in_the_way", [("tfrecord", "examples-2.tfrecords"), ("parquet", "examples-2.parquet"),
                                             ("mds", "index.json")])
def test_a_directory_named_like_an_output_file_is_refused_before_any_work(corpus, tmp_path, capsys, fmt, in_the_way):
    """helper-17's case 3: --overwrite removes files, not directories, so the run went ahead and
    failed at publish, naming a path inside its work directory and advising 'free space and
    continue with --resume', which failed the same way every time (and left index.json.*.tmp)."""
    if fmt != "tfrecord":
        _need("pyarrow", *(("streaming",) if fmt == "mds" else ()))
    out = tmp_path / "out"
    (out / in_the_way).mkdir(parents=True)
    capsys.readouterr()
    assert cli.main(_args(corpus, out, output_format=fmt, overwrite=True)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"create_tfrecords: error: {out / in_the_way} is a directory where the run writes a file of its "
                   f"output; remove or rename it, then run again"], err
    assert sorted(p.name for p in out.iterdir()) == [".bert_data.lock", in_the_way] or sorted(
        p.name for p in out.iterdir()) == [in_the_way]
    (out / in_the_way).rmdir()
    assert cli.main(_args(corpus, out, output_format=fmt, overwrite=True)) == 0  # the advice works


def test_directories_in_the_way_of_a_split_job_or_of_no_file_of_the_run(corpus, tmp_path, capsys):
    """helper-19: validation/'s was found only after train was made and published; and a
    directory named like a shard this run does not write (examples-9 of 3) is no obstacle."""
    out = tmp_path / "out"
    (out / "validation" / "examples-1.tfrecords").mkdir(parents=True)
    capsys.readouterr()
    assert cli.main(_args(corpus, out, validation_fraction=0.3, overwrite=True)) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"create_tfrecords: error: {out / 'validation' / 'examples-1.tfrecords'} is a directory where the run writes a "
        f"file of its output; remove or rename it, then run again"]
    assert not (out / "train").exists()  # nothing was made
    other = tmp_path / "other"
    (other / "examples-9.tfrecords").mkdir(parents=True)
    assert cli.main(_args(corpus, other, overwrite=True)) == 0  # base_args writes 3 shards
    assert (other / "examples-9.tfrecords").is_dir()


def test_a_failed_write_advises_what_fits_its_cause():
    import errno

    from bert_data.output.local_dir import way_on

    assert way_on(OSError(errno.ENOSPC, "No space left on device")) == "free space and continue with --resume"
    assert way_on(OSError(errno.EISDIR, "Is a directory")) == "remove or rename what is in the way and continue with --resume"
    assert way_on(OSError(errno.EROFS, "Read-only file system")) == "make it writable and continue with --resume"
    assert way_on(OSError(errno.EIO, "Input/output error")) == "fix it and continue with --resume"


def test_a_sidecar_that_cannot_be_put_in_place_leaves_no_temporary_file(tmp_path):
    from bert_data import storage

    target = tmp_path / "index.json"
    target.mkdir()
    with pytest.raises(OSError):
        storage.write_bytes(str(target), b"{}")
    with pytest.raises(OSError):
        storage.write_json_atomically(str(target), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]

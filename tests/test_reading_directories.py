"""What a reader guarantees about an output directory (docs/reliability.md, "Reading an output
directory"): ``inspect_tfrecords`` and ``pretraining_dataset`` read exactly the files the manifest
lists (a warning names the others), check every file's record count against it (a shard cut at
a record boundary is an error naming it and both counts), read only regular files (a FIFO is one
line, never a hang), and ``--overwrite`` leaves nothing for them to misread, for a local and a URL
output alike. Also ``pretraining_dataset(drop_remainder=...)``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import threading
from pathlib import Path
from typing import Callable, Dict, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_data.format.manifest import listed_shard_names
from bert_data.output.local_dir import replaced_files
from bert_data.output.naming import MANIFEST_NAME
from bert_data.tools import inspect as insp
from bert_data.tools.create import main as create_main
from bert_data.tools.google_bert import main as google_main

from conftest import base_args, sentence, write_corpus, write_vocab

SEQ, PRED = 32, 5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("reading")
    return write_corpus(root / "corpus", n_docs=16), write_vocab(root / "vocab.txt")


def create(corpus, out, **extra) -> None:
    metadata, vocab = corpus
    assert create_main(base_args(metadata, vocab, out, quiet=True, **extra)) == 0


def drop_sizes(out: Path) -> None:
    """The manifest without ``bytes_per_shard`` (as runs before it wrote them)."""
    data = manifest(out)
    data.pop("bytes_per_shard")
    (out / MANIFEST_NAME).write_text(json.dumps(data))


def manifest(out: Path) -> Dict:
    return json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))


def shard_names(out: Path) -> List[str]:
    return sorted(p.name for p in out.iterdir() if p.name.endswith(".tfrecords"))


def inspect(capsys, *argv) -> tuple:
    code = insp.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stats(capsys, tmp_path: Path, target) -> tuple:
    """``inspect_tfrecords TARGET --stats --json``: (exit code, report, stdout)."""
    report = tmp_path / "report.json"
    code, out, _ = inspect(capsys, target, "--stats", "--json", report, "--num_workers", "1")
    return code, json.loads(report.read_text(encoding="utf-8")), out


def cut_at_record(path: Path, keep: int) -> int:
    """Cut a TFRecord file after its first ``keep`` records (a clean record boundary: no CRC
    error to see); returns the records it held."""
    data = path.read_bytes()
    ends, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        pos += 8 + 4 + length + 4
        ends.append(pos)
    path.write_bytes(data[: ends[keep - 1]] if keep else b"")
    return len(ends)


def reader_count(target, **options) -> int:
    """Every record ``pretraining_dataset`` yields in one evaluation pass."""
    from bert_data.reader import pretraining_dataset

    dataset = pretraining_dataset(str(target), 7, SEQ, PRED, is_training=False, drop_remainder=False, **options)
    return sum(int(batch["input_ids"].shape[0]) for batch in dataset)


@pytest.fixture
def tf():
    return pytest.importorskip("tensorflow")


def finishes(call: Callable[[], int], fifos: List[Path], seconds: float = 120) -> int:
    """``call()``'s result (or its exception); a failure (not a hung test) when it blocks on one
    of ``fifos``."""
    result: Dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:  # release the blocked reader, then fail
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"blocked on a FIFO: {fifos}")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]  # type: ignore[return-value]


# --- --overwrite with another --name: the reported case ------------------------------------------


@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_overwrite_with_another_name_leaves_only_the_new_shards(corpus, tmp_path, capsys, tf, url):
    out = tmp_path / "out"
    target = f"file://{out}" if url else out
    create(corpus, target, num_output_files=3)
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")  # not ours: stays
    create(corpus, target, overwrite=True, name="other", num_output_files=2, seed=7)
    assert shard_names(out) == ["other-1.tfrecords", "other-2.tfrecords"]
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    listed = manifest(out)["n_examples"]
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 0 and report["ok"] and report["instances"] == listed and report["warnings"] == []
    assert reader_count(out) == listed


def test_overwrite_removes_what_the_previous_manifest_lists_only(corpus, tmp_path):
    out = tmp_path / "out"
    create(corpus, out, num_output_files=3, name="old")
    (out / "keep-1.tfrecords").write_bytes(b"")  # named like a shard, but no run of ours listed it
    create(corpus, out, overwrite=True, num_output_files=1)
    assert shard_names(out) == ["examples-1.tfrecords", "keep-1.tfrecords"]


# --- files the manifest does not list ----------------------------------------------------------


def test_unlisted_shards_are_named_and_not_read(corpus, tmp_path, capsys, caplog, tf):
    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    stale = tmp_path / "stale"
    create(corpus, stale, num_output_files=3, name="older", seed=3)
    for shard in ("older-1.tfrecords", "older-2.tfrecords", "older-3.tfrecords"):
        shutil.copy(stale / shard, out / shard)
    listed = manifest(out)["n_examples"]
    warning = (
        f"{out}: 3 files named like shards are not listed in {out / MANIFEST_NAME} and were not read: "
        "older-1.tfrecords, older-2.tfrecords, older-3.tfrecords (left over from another run? they are not part "
        "of this output: move or remove them)"
    )
    code, report, text = stats(capsys, tmp_path, out)
    assert code == 0 and report["instances"] == listed and report["warnings"] == [warning]
    assert [Path(f["path"]).name for f in report["files"]] == ["examples-1.tfrecords", "examples-2.tfrecords"]
    assert f"warning: {warning}" in text
    code, _, err = inspect(capsys, out, "-n", "1")  # printing: the same files, the same warning
    assert code == 0 and err == f"inspect_tfrecords: warning: {warning}\n"
    with caplog.at_level(logging.WARNING, logger="bert_data"):
        assert reader_count(out) == listed
    assert [r.getMessage() for r in caplog.records] == [warning]
    # the advice: move them away; then nothing to warn about
    for shard in ("older-1.tfrecords", "older-2.tfrecords", "older-3.tfrecords"):
        (out / shard).unlink()
    caplog.clear()
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 0 and report["warnings"] == [] and report["instances"] == listed
    with caplog.at_level(logging.WARNING, logger="bert_data"):
        assert reader_count(out) == listed
    assert caplog.records == []


def test_check_manifest_false_reads_every_shard(corpus, tmp_path, tf):
    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    shutil.copy(out / "examples-1.tfrecords", out / "extra-1.tfrecords")
    per_shard = manifest(out)["instances_per_shard"]
    assert reader_count(out) == sum(per_shard.values())
    assert reader_count(out, check_manifest=False) == sum(per_shard.values()) + per_shard["examples-1.tfrecords"]


# --- a shard cut at a record boundary ----------------------------------------------------------


def test_a_shard_cut_at_a_record_boundary_is_caught_by_both_readers(corpus, tmp_path, capsys, tf):
    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    shard = out / "examples-2.tfrecords"
    held = cut_at_record(shard, 5)
    assert held == manifest(out)["instances_per_shard"]["examples-2.tfrecords"] > 5
    code, report, text = stats(capsys, tmp_path, out)
    problem = f"{out / MANIFEST_NAME}: instances_per_shard says examples-2.tfrecords holds {held} records, it holds 5"
    assert code == 1 and not report["ok"] and problem in report["manifest_problems"]
    assert f"MISMATCH: {problem}" in text and text.rstrip().endswith("FAILED")
    code, report, _ = stats(capsys, tmp_path, shard)  # the file alone: checked against its manifest too
    assert code == 1 and problem in report["manifest_problems"]
    from bert_data.errors import RecordFormatError

    sized = f"{shard} is {shard.stat().st_size} bytes where {out / MANIFEST_NAME} lists "
    for target in (out, shard, f"{out}/*.tfrecords"):  # the manifest's bytes_per_shard: refused before reading
        with pytest.raises(RecordFormatError, match=sized):
            reader_count(target)
    drop_sizes(out)  # (a manifest without bytes_per_shard, as older runs wrote: the count is checked as it is read)
    message = (
        f"{shard} holds 5 records, but {out / MANIFEST_NAME} lists {held}: the file was cut or changed after it was "
        "written; write the output again (rerun the command that made it; create_tfrecords needs --overwrite)"
    )
    for target in (out, shard, f"{out}/*.tfrecords"):
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            reader_count(target)
        assert message in str(caught.value)
    from bert_data.reader import pretraining_dataset

    training = pretraining_dataset(str(out), 4, SEQ, PRED, is_training=True, seed=1, cycle_length=1)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        for _ in training.take(10_000):
            pass
    assert message in str(caught.value)
    # the corrected rerun, as the message says: the same command with --overwrite
    create(corpus, out, num_output_files=2, overwrite=True)
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 0 and report["ok"] and reader_count(out) == manifest(out)["n_examples"]


def test_a_listed_shard_that_is_missing(corpus, tmp_path, capsys, tf):
    from bert_data.errors import RecordFormatError

    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    (out / "examples-1.tfrecords").unlink()
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 1 and f"{out / MANIFEST_NAME}: lists examples-1.tfrecords, which is missing from {out}" in (
        report["manifest_problems"])
    with pytest.raises(RecordFormatError) as caught:
        reader_count(out)
    assert str(caught.value) == (
        f"{out / MANIFEST_NAME} lists examples-1.tfrecords, which is missing from {out}: the output is incomplete; "
        "write it again (rerun the command that made it; create_tfrecords needs --overwrite)"
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keep=st.integers(min_value=0, max_value=40))
def test_any_cut_at_a_record_boundary_is_caught_by_the_reader(corpus, tmp_path_factory, keep):
    """The reader's per-file check, on the production pipeline: a file cut after any number of
    records short of what is listed fails; the whole file passes."""
    tf = pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("cut") / "out"
    create(corpus, out, num_output_files=1, dupe_factor=1)
    shard = out / "examples-1.tfrecords"
    listed = manifest(out)["instances_per_shard"]["examples-1.tfrecords"]
    if keep >= listed:
        assert reader_count(out) == listed
        return
    cut_at_record(shard, keep)
    drop_sizes(out)  # (bytes_per_shard would refuse it before reading: this is the count checked as it is read)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"holds {keep} records, but .* lists {listed}:"):
        reader_count(out)


# --- BERT-named output files: the hidden manifest ------------------------------------------------


def test_bert_named_outputs_are_read_as_their_manifest_lists_them(tmp_path, capsys, tf):
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n\n".join(" ".join(sentence(d * 5 + s) for s in range(4)).replace(". ", ".\n")
                                       for d in range(20)) + "\n", encoding="utf-8")
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    out.mkdir()
    outputs = [out / "train-a.tfrecords", out / "train-b.tfrecords"]
    code = google_main([f"--input_file={corpus_file}", f"--output_file={','.join(map(str, outputs))}",
                        f"--vocab_file={vocab}", "--max_seq_length=32", "--max_predictions_per_seq=5",
                        "--dupe_factor=1", "--quiet", "--num_workers=1"])
    assert code == 0
    capsys.readouterr()
    hidden = json.loads((out / ".train-a.tfrecords.data_params.json").read_text(encoding="utf-8"))
    shutil.copy(outputs[0], out / "stale-1.tfrecords")
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 0 and report["instances"] == hidden["n_examples"]
    assert report["warnings"] == [
        f"{out}: 1 file named like shards is not listed in {out / '.train-a.tfrecords.data_params.json'} and was not "
        "read: stale-1.tfrecords (left over from another run? they are not part of this output: move or remove them)"
    ]
    assert reader_count(out) == hidden["n_examples"]
    cut_at_record(outputs[1], 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{outputs[1]} holds 1 records, but "):
        reader_count(out)
    assert stats(capsys, tmp_path, out)[0] == 1


# --- not a regular file --------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifos_are_one_line_never_a_hang(corpus, tmp_path, capsys, tf):
    from bert_data.errors import RecordFormatError

    fifo = tmp_path / "x-1.tfrecords"
    os.mkfifo(fifo)
    said = f"{fifo} is a FIFO, not a regular file; give regular files (or an output directory)"
    for argv in ([fifo, "--stats"], [fifo, "--vocab_file", corpus[1]], [tmp_path / "x-*.tfrecords", "--stats"]):
        code = finishes(lambda: insp.main([str(a) for a in argv]), [fifo])
        out, err = capsys.readouterr()
        matched = f" (matched by {argv[0]})" if "*" in str(argv[0]) else ""
        assert code == 2 and out == "" and err == f"inspect_tfrecords: error: {said.replace(' is a', matched + ' is a', 1)}\n"
    with pytest.raises(RecordFormatError, match="is a FIFO, not a regular file"):
        finishes(lambda: reader_count(fifo), [fifo])
    # in an output directory: without a manifest it would be read (refused); a manifest's listed
    # shard that is a FIFO is refused too; one it does not list is only named
    bare = tmp_path / "bare"
    bare.mkdir()
    os.mkfifo(bare / "examples-1.tfrecords")
    code = finishes(lambda: insp.main([str(bare), "--stats"]), [bare / "examples-1.tfrecords"])
    assert code == 2 and "examples-1.tfrecords (in an output directory) is a FIFO" in capsys.readouterr().err
    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    os.mkfifo(out / "junk-1.tfrecords")
    code, report, _ = stats(capsys, tmp_path, out)
    assert code == 0 and "junk-1.tfrecords" in report["warnings"][0]
    assert reader_count(out) == manifest(out)["n_examples"]
    (out / "examples-2.tfrecords").unlink()
    os.mkfifo(out / "examples-2.tfrecords")
    code = finishes(lambda: insp.main([str(out), "--stats"]), [out / "examples-2.tfrecords"])
    err = capsys.readouterr().err
    assert code == 2 and f"examples-2.tfrecords (listed in {out / MANIFEST_NAME}) is a FIFO" in err
    with pytest.raises(RecordFormatError, match="examples-2.tfrecords is a FIFO"):
        finishes(lambda: reader_count(out), [out / "examples-2.tfrecords"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_manifest_that_is_a_fifo_is_one_line(corpus, tmp_path, capsys, tf):
    from bert_data.errors import RecordFormatError

    out = tmp_path / "out"
    create(corpus, out, num_output_files=1)
    (out / MANIFEST_NAME).unlink()
    os.mkfifo(out / MANIFEST_NAME)
    code = finishes(lambda: insp.main([str(out), "--stats"]), [out / MANIFEST_NAME])
    _, err = capsys.readouterr()
    assert code == 2 and err == f"inspect_tfrecords: error: {out / MANIFEST_NAME}: cannot be read (not a regular file)\n"
    with pytest.raises(RecordFormatError, match="cannot be read"):
        finishes(lambda: reader_count(out), [out / MANIFEST_NAME])
    # --overwrite takes it for what it is: not a manifest that lists anything; the rerun is clean
    create(corpus, out, num_output_files=1, overwrite=True)
    assert stats(capsys, tmp_path, out)[0] == 0


# --- drop_remainder --------------------------------------------------------------------------


def test_drop_remainder(corpus, tmp_path, tf):
    from bert_data.errors import ConfigError
    from bert_data.reader import ReaderOptions, pretraining_dataset

    out = tmp_path / "out"
    create(corpus, out, num_output_files=2)
    total = manifest(out)["n_examples"]
    batch = 7 if total % 7 else 8
    assert total % batch

    def sizes(**options) -> List[int]:
        dataset = pretraining_dataset(str(out), batch, SEQ, PRED, is_training=False, **options)
        return [int(b["input_ids"].shape[0]) for b in dataset]

    assert sizes() == [batch] * (total // batch)  # as run_pretraining.py's input_fn: the remainder dropped
    assert sizes(drop_remainder=False) == [batch] * (total // batch) + [total % batch]  # every record seen
    assert sizes(options=ReaderOptions(drop_remainder=False)) == sizes(drop_remainder=False)
    kept = pretraining_dataset(str(out), batch, SEQ, PRED, is_training=False, drop_remainder=False)
    assert kept.element_spec["input_ids"].shape.as_list() == [None, SEQ]
    with pytest.raises(ConfigError, match="drop_remainder must be True or False, got 'no'"):
        pretraining_dataset(str(out), batch, SEQ, PRED, drop_remainder="no")


# --- the rules, as pure functions ------------------------------------------------------------------


NAMES = st.text(alphabet="ab-./*1", min_size=0, max_size=12)


@given(per_shard=st.dictionaries(NAMES, st.integers(0, 9), max_size=6), entries=st.lists(NAMES, max_size=8))
def test_overwrite_removes_only_plain_shard_names(per_shard, entries):
    """Whatever a previous manifest lists, --overwrite removes only the manifest, this run's name
    pattern and plain file names named like shards: never a path, never another kind of file."""
    previous = {"instances_per_shard": per_shard}
    listed = listed_shard_names(previous)
    assert all("/" not in n and n.endswith(".tfrecords") and n in per_shard for n in listed)
    doomed = replaced_files(entries, "examples", ".tfrecords", previous)
    for entry in doomed:
        assert entry == MANIFEST_NAME or entry in listed or (entry.startswith("examples-") and entry.endswith(".tfrecords"))
    assert set(doomed) <= set(entries)


def test_a_named_file_is_checked_against_its_own_manifest_however_the_directory_is_spelled(tmp_path, monkeypatch):
    """Two create_pretraining_data runs share b.tfrecords (the second rewrote it): its count is the
    second run's manifest's, whether the directory is given as ``G`` or absolute (helper-28: ``G``
    took the first run's stale count, an error)."""
    torch_dataset = pytest.importorskip("bert_data.torch").PretrainingDataset
    vocab = write_vocab(tmp_path / "vocab.txt")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "G").mkdir()
    for run, outputs in ((0, "G/a.tfrecords,G/b.tfrecords"), (1, "G/b.tfrecords,G/c.tfrecords")):
        corpus_file = tmp_path / f"corpus{run}.txt"
        corpus_file.write_text("\n\n".join(" ".join(sentence(run * 200 + d * 5 + s) for s in range(4)).replace(". ", ".\n")
                                           for d in range(12 + 6 * run)) + "\n", encoding="utf-8")
        assert google_main([f"--input_file={corpus_file}", f"--output_file={outputs}", f"--vocab_file={vocab}",
                            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1", "--quiet",
                            "--num_workers=1"]) == 0
    second = json.loads((tmp_path / "G" / ".b.tfrecords.data_params.json").read_text())["instances_per_output_file"]
    for spelling in ("G", str(tmp_path / "G")):
        dataset = torch_dataset(spelling, batch_size=8)
        counts = dict(zip((os.path.basename(f) for f in dataset.source.files), dataset.source.counts))
        assert counts["b.tfrecords"] == second[next(k for k in second if k.endswith("b.tfrecords"))], spelling
        assert sum(len(batch["input_ids"]) for batch in dataset) == dataset.num_records, spelling

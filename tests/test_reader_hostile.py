"""Readers against what helper-28 found them taking silently (stale files, merges, mismatches):
every case is now a typed error naming the file, or reads each record exactly once.

The readers: :class:`bert_data.torch.PretrainingDataset` (the one most of these reach),
``inspect_tfrecords`` and, where the rule lives in shared code, the tf.data reader's file
resolution (:mod:`bert_data.reader.files`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from conftest import base_args, need, write_corpus, write_vocab

need("torch", "h5py")

from bert_data.errors import ConfigError, RecordFormatError  # noqa: E402
from bert_data.tools import inspect as insp  # noqa: E402
from bert_data.tools.create import main as create  # noqa: E402
from bert_data.torch import DynamicMaskingOptions, PretrainingDataset  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Dict[str, Path]:
    """A: NSP records; A3: the same corpus at --masked_lm_prob 0.10 (as many records per shard,
    other bytes); VS: another vocabulary; U: unmasked ids; H: HDF5 packed; plus the vocabularies."""
    root = tmp_path_factory.mktemp("reader_hostile")
    metadata = write_corpus(root / "corpus", n_docs=16)
    vocab = write_vocab(root / "vocab.txt")
    other = write_vocab(root / "other_vocab.txt", extra=["lighthouse"])
    out = {"vocab": vocab, "other_vocab": other, "metadata": metadata}
    for name, extra in (("A", {}), ("A3", {"masked_lm_prob": 0.10}), ("U", {"mlm_only": True, "disable_masking": True,
                                                                          "unmasked_format": "ids"}),
                        ("H", {"output_format": "hdf5", "packing": True})):
        assert create(base_args(metadata, vocab, root / name, num_output_files=2, quiet=True, **extra)) == 0
        out[name] = root / name
    assert create(base_args(metadata, other, root / "VS", num_output_files=2, quiet=True)) == 0
    out["VS"] = root / "VS"
    return out


def _records(dataset) -> int:
    return sum(len(batch["input_ids"]) for batch in dataset)


def test_unmasked_records_are_masked_only_with_the_vocabulary_they_were_written_with(made) -> None:
    """Masked with another vocabulary, [MASK], random ids and the never-masked [CLS]/[SEP] were
    other ids, silently ([CLS]/[SEP] chosen as targets 253 times in 898 records)."""
    with pytest.raises(ConfigError, match=r"vocab_file .*other_vocab.txt is not the vocabulary the records were "
                                          r"written with: their data_params.json records vocab_sha256 \w{12} \(.*vocab.txt\)"):
        PretrainingDataset(made["U"], batch_size=4, masking=DynamicMaskingOptions(vocab_file=str(made["other_vocab"])))
    right = PretrainingDataset(made["U"], batch_size=4, masking=DynamicMaskingOptions(vocab_file=str(made["vocab"])))
    assert _records(right) == right.num_records > 0


def test_outputs_of_two_vocabularies_are_not_read_as_one_dataset(made) -> None:
    with pytest.raises(RecordFormatError, match="the files were written with different vocabularies"):
        PretrainingDataset([made["A"], made["VS"]], batch_size=4)


def test_one_file_named_two_ways_is_read_once(made, tmp_path, monkeypatch) -> None:
    """Duplicates were recognised by their spelling only: A and ./A/examples-1.tfrecords read
    that shard twice."""
    monkeypatch.chdir(made["A"].parent)
    once = PretrainingDataset("A", batch_size=4).num_records
    (tmp_path / "link.tfrecords").symlink_to(made["A"] / "examples-1.tfrecords")
    for spec in (["A", "./A/examples-1.tfrecords"], ["A", str(made["A"])], "A,./A/examples-*.tfrecords",
                 ["A", str(tmp_path / "link.tfrecords")]):
        dataset = PretrainingDataset(spec, batch_size=4)
        assert dataset.num_records == once == _records(dataset), spec


def test_a_shard_swapped_for_another_runs_of_as_many_records_is_refused(made, tmp_path, capsys) -> None:
    """Same name, same record count, other bytes: every count and record check passed (inspect
    exit 0, torch read it); its size differs from bytes_per_shard."""
    swapped = tmp_path / "A"
    shutil.copytree(made["A"], swapped)
    shutil.copy(made["A3"] / "examples-2.tfrecords", swapped / "examples-2.tfrecords")
    listed = json.loads((swapped / "data_params.json").read_text())
    assert listed["instances_per_shard"] == json.loads((made["A3"] / "data_params.json").read_text())["instances_per_shard"]
    size = (swapped / "examples-2.tfrecords").stat().st_size
    assert size != listed["bytes_per_shard"]["examples-2.tfrecords"]
    line = (f"{swapped}/examples-2.tfrecords is {size} bytes where {swapped}/data_params.json lists "
            f"{listed['bytes_per_shard']['examples-2.tfrecords']} (bytes_per_shard): it was changed or replaced after "
            f"the run wrote it")
    with pytest.raises(RecordFormatError) as refused:
        PretrainingDataset(swapped, batch_size=4)
    assert str(refused.value).startswith(line)
    assert insp.main([str(swapped), "--stats", "--num_workers", "1"]) == 1
    assert "examples-2.tfrecords is" in capsys.readouterr().out


def test_a_resume_state_of_another_dataset_of_as_many_records_is_refused(made) -> None:
    state = PretrainingDataset(made["A"], batch_size=4, shuffle=True, seed=3).state_dict(2)
    with pytest.raises(ConfigError, match="the state was saved reading other files"):
        PretrainingDataset(made["A3"], batch_size=4, shuffle=True, seed=3).load_state_dict(state)
    moved = PretrainingDataset(made["A"], batch_size=4, shuffle=True, seed=3)
    moved.load_state_dict(state)  # (the same files: resumes)
    older = {key: value for key, value in state.items() if key != "files"}  # (a state of an earlier version)
    PretrainingDataset(made["A"], batch_size=4, shuffle=True, seed=3).load_state_dict(older)


def test_a_shard_that_became_a_fifo_after_the_dataset_was_made_is_an_error_not_a_hang(made, tmp_path) -> None:
    copy = tmp_path / "A"
    shutil.copytree(made["A"], copy)
    dataset = PretrainingDataset(copy, batch_size=4)
    shard = copy / "examples-1.tfrecords"
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(RecordFormatError, match="examples-1.tfrecords: cannot open TFRecord file: not a regular file"):
        _records(dataset)


def test_a_fifo_in_place_of_another_formats_shard_is_not_called_a_tfrecord_file(made, tmp_path, capsys) -> None:
    """A FIFO where an HDF5 output lists a file was said to be "not a TFRecord file" (of a run
    that wrote no TFRecords); the words are the same for every format, in one place."""
    copy = tmp_path / "H"
    shutil.copytree(made["H"], copy)
    shard = copy / "examples-2.hdf5"
    shard.unlink()
    os.mkfifo(shard)
    capsys.readouterr()
    assert insp.main([str(copy), "--stats"]) == 2
    assert capsys.readouterr().err == (f"inspect_tfrecords: error: {shard} (listed in {copy / 'data_params.json'}) is a "
                                       f"FIFO, not a regular file; give regular files (or an output directory)\n")


@pytest.mark.parametrize("link", ["a loop", "dangling"])
def test_a_listed_shard_that_is_a_broken_link_is_not_called_missing(made, tmp_path, link) -> None:
    """A shard replaced by a symbolic link to itself was "missing from" its directory (it is
    there, as a link that cannot be followed): the line says so, with the system's reason."""
    copy = tmp_path / "A"
    shutil.copytree(made["A"], copy)
    shard = copy / "examples-2.tfrecords"
    shard.unlink()
    shard.symlink_to(shard.name if link == "a loop" else tmp_path / "nowhere")
    reason = "Too many levels of symbolic links" if link == "a loop" else "No such file or directory"
    with pytest.raises(RecordFormatError, match=rf"examples-2.tfrecords \(listed in .*data_params.json\) is a symbolic link "
                                                rf"that cannot be followed \({reason}\): point it at the file"):
        PretrainingDataset(copy, batch_size=4)


def test_a_glob_into_an_unfinished_run_is_refused_as_its_directory_is(made, tmp_path, capsys) -> None:
    """Killed after renaming its shards, before its manifest: the directory was refused, the glob
    that create_tfrecords prints for training read what was there (some of the shards, maybe)."""
    out = tmp_path / "U1"
    args = base_args(made["metadata"], made["vocab"], out, num_output_files=2)
    killed = subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                            env={**os.environ, "BERT_DATA_CRASH_AT": "published:0"}, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    line = f"{out}: an unfinished run (its work directory .bert_data_work is there, its data_params.json not yet)"
    with pytest.raises(RecordFormatError) as refused:
        PretrainingDataset(str(out / "examples-*.tfrecords"), batch_size=4)
    assert str(refused.value).startswith(line)
    assert insp.main([str(out / "examples-*.tfrecords"), "--stats"]) == 2
    assert line in capsys.readouterr().err


def test_an_hdf5_file_declaring_samples_it_does_not_store_is_refused_before_reading(made, tmp_path, capsys) -> None:
    """A 264 KB file whose datasets declared 10^9 samples kept inspect reading for hours."""
    import h5py

    copy = tmp_path / "H"
    shutil.copytree(made["H"], copy)
    shard = copy / "examples-1.hdf5"
    with h5py.File(shard, "r") as source:
        data = {name: [source[name][i] for i in range(len(source[name]))] for name in source}
    shard.unlink()
    with h5py.File(shard, "w") as grown:
        for name, values in data.items():
            dataset = grown.create_dataset(name, shape=(10**9,), dtype=h5py.vlen_dtype(values[0].dtype), chunks=(1024,))
            for i, value in enumerate(values):
                dataset[i] = value
    assert insp.main([str(copy), "--stats", "--num_workers", "1"]) == 1
    assert "input_ids declares 1000000000 samples but stores 1024" in capsys.readouterr().out


@pytest.mark.parametrize("listing", [None, {}, ["examples-1.tfrecords"]])
def test_a_manifest_that_lists_no_file_is_damage_not_a_licence_to_read_every_shard(made, tmp_path, listing) -> None:
    """instances_per_shard missing, empty or not a mapping: the readers read every *.tfrecords
    of the directory (another run's included), with warnings only."""
    copy = tmp_path / "A"
    shutil.copytree(made["A"], copy)
    shutil.copy(made["A3"] / "examples-1.tfrecords", copy / "other-1.tfrecords")
    data = json.loads((copy / "data_params.json").read_text())
    if listing is None:
        del data["instances_per_shard"]
    else:
        data["instances_per_shard"] = listing
    (copy / "data_params.json").write_text(json.dumps(data))
    with pytest.raises(RecordFormatError, match=r"data_params.json lists no file \(its instances_per_shard is missing, "
                                                r"empty or not a mapping\): it is damaged"):
        PretrainingDataset(copy, batch_size=4)


def test_the_parent_of_a_validation_split_names_its_two_outputs_to_the_reader(made, tmp_path) -> None:
    out = tmp_path / "split"
    assert create(base_args(made["metadata"], made["vocab"], out, validation_fraction=0.3, quiet=True)) == 0
    with pytest.raises(RecordFormatError) as refused:
        PretrainingDataset(out, batch_size=4)
    assert str(refused.value).endswith(f"it holds the outputs train and validation (the halves of a --validation_fraction "
                                       f"run, each its own dataset): read {out}/train and {out}/validation")


@pytest.mark.parametrize("spoiled", ["as text", "as a float"])
def test_a_count_that_is_not_an_integer_is_a_mismatch_naming_it(made, tmp_path, capsys, spoiled) -> None:
    """'228' said "holds 228 records, it holds 228"; 228.0 passed as OK."""
    copy = tmp_path / "A"
    shutil.copytree(made["A"], copy)
    data = json.loads((copy / "data_params.json").read_text())
    count = data["instances_per_shard"]["examples-1.tfrecords"]
    data["instances_per_shard"]["examples-1.tfrecords"] = str(count) if spoiled == "as text" else float(count)
    (copy / "data_params.json").write_text(json.dumps(data))
    assert insp.main([str(copy), "--stats", "--num_workers", "1"]) == 1
    value = repr(str(count)) if spoiled == "as text" else repr(float(count))
    assert (f"instances_per_shard lists examples-1.tfrecords with {value}, not a record count ({count} records)"
            in capsys.readouterr().out)

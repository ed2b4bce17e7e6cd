"""create_tfrecords --validation_fraction / --validation_metadata_files: one run, two outputs,
documents split before any instance is made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bert_data.tools import split as split_metadata
from bert_data.tools.create import main

from conftest import base_args, write_corpus


def _shards(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.tfrecords"))}


def test_one_shot_split_equals_split_metadata_then_two_runs(tmp_path, tiny_vocab, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=30)
    out = tmp_path / "out"
    assert main(base_args(metadata, tiny_vocab, out, validation_fraction=0.3, seed=7)) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("train: wrote") and "\nvalidation: wrote" in printed
    train = json.loads((out / "train" / "data_params.json").read_text())
    validation = json.loads((out / "validation" / "data_params.json").read_text())
    assert train["split_role"] == "train" and validation["split_role"] == "validation"
    assert train["documents"]["read"] + validation["documents"]["read"] == 30
    assert 0 < validation["documents"]["read"] < 30

    lists = tmp_path / "lists"
    assert split_metadata.main([
        "--metadata_files", str(metadata), "--validation_fraction", "0.3", "--seed", "7", "--output_dir", str(lists),
    ]) == 0
    for side, name in (("train", "train_metadata.txt"), ("validation", "validation_metadata.txt")):
        separate = tmp_path / f"separate_{side}"
        args = base_args(lists / name, tiny_vocab, separate, seed=7)
        args[args.index("--input_files_prefix") + 1] = str(metadata.parent)
        assert main(args) == 0
        assert _shards(separate) == _shards(out / side), side


def test_validation_metadata_files_are_kept_out_of_train(tmp_path, tiny_vocab) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    held_out = tmp_path / "corpus" / "validation.txt"
    held_out.write_text("docs/doc003.txt\ndocs/doc007.txt\n")
    out = tmp_path / "out"
    assert main(base_args(metadata, tiny_vocab, out, validation_metadata_files=str(held_out))) == 0
    train = json.loads((out / "train" / "data_params.json").read_text())
    validation = json.loads((out / "validation" / "data_params.json").read_text())
    assert train["documents"]["read"] == 10 and validation["documents"]["read"] == 2


def test_split_errors_are_one_line(tmp_path, tiny_vocab, capsys) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=3)
    cases = {
        "--validation_fraction 1.5 must be in (0, 1)": dict(validation_fraction=1.5),
        "contradict each other": dict(validation_fraction=0.5, validation_metadata_files=str(metadata)),
        "leaves no document on the validation side; raise it": dict(validation_fraction=0.0001),
    }
    for expected, flags in cases.items():
        assert main(base_args(metadata, tiny_vocab, tmp_path / "o", **flags)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("create_tfrecords: error:") and expected in err[0], err
        # refused before either half ran: nothing is in the way of the corrected command
        assert not (tmp_path / "o").exists(), expected
    assert main(base_args(metadata, tiny_vocab, tmp_path / "o", validation_fraction=0.5)) == 0


def test_beam_runner_refuses_a_one_shot_split(tmp_path, tiny_vocab, capsys) -> None:
    """The Beam runner writes one output: a split request must be an error, not silently ignored."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=3)
    assert main(base_args(metadata, tiny_vocab, tmp_path / "o", runner="beam", validation_fraction=0.5)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "create_tfrecords: error: --validation_fraction/--validation_metadata_files are for the local runner; "
        "with --runner beam, split first with split_metadata and run once per metadata file"
    ]
    assert not (tmp_path / "o").exists()


def test_a_split_job_and_a_plain_run_never_leave_each_others_output(tmp_path, tiny_vocab, capsys) -> None:
    """helper-15's case A: a train/validation job into a directory holding a plain run's output left
    that manifest and those shards on top (inspect said OK on them), even with --overwrite; a plain
    --overwrite run left the old train/ and validation/. Now refused without --overwrite, replaced with it."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    out = tmp_path / "out"
    plain = base_args(metadata, tiny_vocab, out, num_output_files=2, quiet=True)
    split = plain + ["--validation_fraction", "0.3"]
    assert main(plain) == 0
    capsys.readouterr()
    assert main(split) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a run's output" in err[0] and "--overwrite" in err[0]
    assert not (out / "train").exists()
    (out / "notes.txt").write_text("mine\n")  # not a run's: left alone
    assert main(split + ["--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "train", "validation"]
    assert main(plain) == 2  # a plain run into the split's directory: not empty
    capsys.readouterr()
    (out / "train" / "NOTES.md").write_text("mine too\n")  # a user's file inside a half: kept (helper-16)
    assert main(plain + ["--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["data_params.json", "examples-1.tfrecords", "examples-2.tfrecords",
                                                     "notes.txt", "train", "validation"]
    left = sorted(str(p.relative_to(out)) for half in ("train", "validation") for p in (out / half).rglob("*"))
    assert left == ["train/NOTES.md"]  # each half's manifest, shards and work directory went


@pytest.mark.parametrize("url", [False, True])
def test_clearing_a_plain_or_split_output_never_removes_a_listed_document(tmp_path, tiny_vocab, capsys, url):
    """helper-16: a split job with --overwrite emptied the plain run it replaced though the metadata
    (made by `find`) listed its shards: removed, then 'does not exist'. Refused in one line, before
    anything is removed; a file:// output alike."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=10)
    root = metadata.parent
    out = root / "out"
    given = f"file://{out}" if url else str(out)
    assert main(base_args(metadata, tiny_vocab, given, num_output_files=2, quiet=True)) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    every = tmp_path / "every.txt"
    every.write_text(metadata.read_text() + "out/examples-1.tfrecords\n", encoding="utf-8")
    args = base_args(every, tiny_vocab, given, num_output_files=2, quiet=True, overwrite=True)
    args[args.index("--input_files_prefix") + 1] = str(root)
    for extra in ([], ["--validation_fraction", "0.3"]):
        assert main(args + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"the listed document {root}/out/examples-1.tfrecords" in err[0], err
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_many_listed_documents_in_the_output_directory_never_hide_a_shard(tmp_path, tiny_vocab, capsys):
    """helper-16: the protected entries were capped at 100, so 120 documents kept in the output
    directory itself (listed first) hid the shards, which --overwrite then removed."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=4)
    out = tmp_path / "out"
    out.mkdir()
    texts = metadata.parent / "docs"
    for i in range(120):
        (out / f"a{i:03d}.txt").write_text((texts / sorted(p.name for p in texts.iterdir())[i % 4]).read_text())
    listing = tmp_path / "m.txt"
    listing.write_text("".join(f"a{i:03d}.txt\n" for i in range(120)), encoding="utf-8")
    args = base_args(listing, tiny_vocab, out, num_output_files=2, quiet=True)
    args[args.index("--input_files_prefix") + 1] = str(out)
    assert main(args + ["--overwrite"]) == 0
    capsys.readouterr()
    listing.write_text(listing.read_text() + "examples-2.tfrecords\ndata_params.json\n", encoding="utf-8")
    assert main(args + ["--overwrite"]) == 2
    assert "the listed document" in capsys.readouterr().err
    assert (out / "examples-2.tfrecords").exists() and (out / "data_params.json").exists()


def test_a_validation_list_of_nothing_or_of_a_missing_document_is_refused_before_train(tmp_path, tiny_vocab, capsys):
    """helper-15's case F: the validation half's list was read only after train was published,
    so the corrected command found train/ in its way; now one line before either half runs."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=8)
    out = tmp_path / "out"
    empty, missing = tmp_path / "empty.txt", tmp_path / "missing.txt"
    empty.write_text("# none yet\n", encoding="utf-8")
    missing.write_text("docs/not_there.txt\n", encoding="utf-8")
    for listed, words in ((empty, "no documents listed"), (missing, "not_there.txt")):
        assert main(base_args(metadata, tiny_vocab, out, quiet=True) + ["--validation_metadata_files", str(listed)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
        assert not out.exists()
    one = tmp_path / "one.txt"
    one.write_text(metadata.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert main(base_args(metadata, tiny_vocab, out, quiet=True) + ["--validation_metadata_files", str(one)]) == 0


def test_a_validation_half_of_unusable_documents_says_train_is_kept_and_resume_finishes_it(tmp_path, tiny_vocab, capsys):
    """Its documents are read only when the half runs, after train is published: the line said
    "nothing was published" (train was), with no way on. Now it says where train is and that
    --resume, once the documents are usable, makes validation alone."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=8)
    held_out = tmp_path / "corpus" / "validation.txt"
    held_out.write_text("docs/doc006.txt\ndocs/doc007.txt\n", encoding="utf-8")
    kept = {name: (tmp_path / "corpus" / "docs" / name).read_bytes() for name in ("doc006.txt", "doc007.txt")}
    for name in kept:
        (tmp_path / "corpus" / "docs" / name).write_bytes(b"")
    out = tmp_path / "out"
    args = base_args(metadata, tiny_vocab, out, quiet=True) + ["--validation_metadata_files", str(held_out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing was published" not in err[0], err
    assert err[0].endswith(
        f"{out / 'validation'}: no usable document: 2 documents read, all skipped (empty 2); the validation half "
        f"published nothing, the train half is published in {out / 'train'} and kept: once the validation documents "
        f"are usable, continue with --resume (same flags), or start over with --overwrite"), err
    train = _shards(out / "train")
    for name, data in kept.items():
        (tmp_path / "corpus" / "docs" / name).write_bytes(data)
    assert main(args + ["--resume"]) == 0  # the advice works, and train is the one already made
    assert _shards(out / "train") == train
    assert json.loads((out / "validation" / "data_params.json").read_text())["documents"]["used"] == 2

"""No tool writes over, or removes, a file it reads (docs/reliability.md, "Outputs never overwrite
inputs"), whatever the spelling (a symlink, a hard link); each case is one line, exit 2, the input
untouched, and the rerun that follows the message's advice succeeds. Also the tools' one rule for
``--log_level``, and metadata files that are pipes or FIFOs (never a hang)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable, List

import pytest

from bert_data.identity import written_over_input
from bert_data.tools import inspect as insp
from bert_data.tools.create import main as create_main
from bert_data.tools.google_bert import main as google_main
from bert_data.tools.split import main as split_main
from bert_data.tools.vocab import main as vocab_main

from conftest import base_args, sentence, write_corpus, write_vocab


def run(capsys, main: Callable, *argv) -> tuple:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(capsys, prog: str, main: Callable, *argv) -> str:
    """The one error line of a refused run (exit 2, nothing on stdout)."""
    code, out, err = run(capsys, main, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"{prog}: error: "), (code, out, err)
    return err[len(f"{prog}: error: "):].rstrip("\n")


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus", n_docs=10), write_vocab(tmp_path / "vocab.txt")


# --- the rule itself ---------------------------------------------------------------------------------


def test_the_rule_sees_through_spellings_symlinks_and_hard_links(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("x\n", encoding="utf-8")
    (tmp_path / "sym.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    inputs = [("an input", str(source))]
    for output in (source, tmp_path / "sub" / ".." / "in.txt", tmp_path / "sym.txt", tmp_path / "hard.txt",
                   f"file://{source}"):
        assert written_over_input([str(output)], inputs) == (str(output), "an input", str(source)), output
    assert written_over_input([str(tmp_path / "other.txt")], inputs) is None
    assert written_over_input(["gs://b/x"], [("url", "gs://b/x/")]) == ("gs://b/x", "url", "gs://b/x/")


# --- create_pretraining_data --------------------------------------------------------------------------


def _bert_corpus(root: Path) -> Path:
    text = "\n\n".join("\n".join(sentence(d * 5 + s) for s in range(4)) for d in range(12)) + "\n"
    path = root / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_output_file_naming_its_own_flagfile(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _bert_corpus(tmp_path)
    write_vocab(tmp_path / "vocab.txt")
    flags = tmp_path / "flags.txt"
    text = "--input_file=corpus.txt\n--vocab_file=vocab.txt\n--max_seq_length=32\n--max_predictions_per_seq=5\n" \
           "--dupe_factor=1\n--quiet\n"
    flags.write_text(text, encoding="utf-8")
    line = one_line(capsys, "create_pretraining_data", google_main, "--flagfile=flags.txt", "--output_file=flags.txt")
    assert line == ("--output_file flags.txt is a --flagfile; refusing to overwrite it (a file this run reads): "
                    "name another output file")
    os.link(flags, tmp_path / "same.tfrecord")  # a hard link is the same file
    line = one_line(capsys, "create_pretraining_data", google_main, "--flagfile=flags.txt", "--output_file=same.tfrecord")
    assert line == ("--output_file same.tfrecord is a --flagfile (flags.txt); refusing to overwrite it (a file this run "
                    "reads): name another output file")
    nested = tmp_path / "outer.txt"  # a flag file read through another one counts too
    nested.write_text("--flagfile=flags.txt\n", encoding="utf-8")
    line = one_line(capsys, "create_pretraining_data", google_main, "--flagfile=outer.txt", "--output_file=flags.txt")
    assert line.startswith("--output_file flags.txt is a --flagfile;")
    assert flags.read_text(encoding="utf-8") == text and not (tmp_path / ".flags.txt.bert_data").exists()
    code, _, err = run(capsys, google_main, "--flagfile=flags.txt", "--output_file=out.tfrecord")  # the advice
    assert code == 0, err
    assert (tmp_path / "out.tfrecord").stat().st_size > 0 and flags.read_text(encoding="utf-8") == text


def test_output_file_whose_manifest_is_an_input(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _bert_corpus(tmp_path)
    vocab = write_vocab(tmp_path / ".x.tfrecord.data_params.json")  # the manifest beside x.tfrecord
    line = one_line(capsys, "create_pretraining_data", google_main, "--input_file=corpus.txt", "--output_file=x.tfrecord",
                    f"--vocab_file={vocab.name}")
    assert line == (f"the manifest beside --output_file {vocab} is --vocab_file; refusing to overwrite it (a file this run "
                    "reads): name another output file")
    assert vocab.read_text(encoding="utf-8").startswith("[PAD]\n")


# --- build_vocab ------------------------------------------------------------------------------------


def test_build_vocab_output_naming_an_input(corpus, tmp_path, capsys):
    metadata, _ = corpus
    prefix = metadata.parent
    args = ["--metadata_files", metadata, "--input_files_prefix", prefix, "--vocab_size", "120", "--quiet"]
    before = metadata.read_bytes()
    line = one_line(capsys, "build_vocab", vocab_main, *args, "--output", metadata)
    assert line == (f"--output {metadata} is a --metadata_files file; refusing to overwrite it (a file this run reads): "
                    "name another file for vocab.txt")
    document = prefix / "docs" / "doc003.txt"
    line = one_line(capsys, "build_vocab", vocab_main, *args, "--output", document)
    assert line == (f"--output {document} is the document listed at {metadata}:4; refusing to overwrite it (a file this "
                    "run reads): name another file for vocab.txt")
    os.link(document, tmp_path / "linked.txt")
    line = one_line(capsys, "build_vocab", vocab_main, *args, "--output", tmp_path / "linked.txt")
    assert line.startswith(f"--output {tmp_path / 'linked.txt'} is the document listed at {metadata}:4 ({document});")
    assert metadata.read_bytes() == before and document.read_text(encoding="utf-8").startswith(sentence(3 * 31)[:4])
    code, out, err = run(capsys, vocab_main, *args, "--output", tmp_path / "vocab_out.txt")  # the advice
    assert code == 0 and out.startswith(f"wrote {tmp_path / 'vocab_out.txt'}: 120 tokens"), err


def test_build_vocab_output_that_is_a_device(corpus, capsys):
    metadata, _ = corpus
    line = one_line(capsys, "build_vocab", vocab_main, "--metadata_files", metadata, "--input_files_prefix",
                    metadata.parent, "--vocab_size", "120", "--output", "/dev/null")
    assert line == "--output /dev/null is not a regular file (a FIFO, socket or device); name a file for vocab.txt"


def test_build_vocab_metadata_given_as_a_pipe(corpus, tmp_path, capsys):
    metadata, _ = corpus
    read_end, write_end = os.pipe()
    os.write(write_end, metadata.read_bytes())
    os.close(write_end)
    piped = f"/dev/fd/{read_end}"
    try:
        line = one_line(capsys, "build_vocab", vocab_main, "--metadata_files", piped, "--input_files_prefix",
                        metadata.parent, "--vocab_size", "120", "--output", tmp_path / "v.txt")
    finally:
        os.close(read_end)
    assert line == (f"--metadata_files {piped} is not a regular file (a pipe, FIFO or device); build_vocab reads the "
                    "metadata more than once: write the list to a file and pass that")
    code, _, err = run(capsys, vocab_main, "--metadata_files", metadata, "--input_files_prefix", metadata.parent,
                       "--vocab_size", "120", "--output", tmp_path / "v.txt", "--quiet")
    assert code == 0, err


# --- split_metadata ------------------------------------------------------------------------------------


def test_split_output_hard_linked_to_its_input(tmp_path, capsys):
    metadata = tmp_path / "m.txt"
    metadata.write_text("".join(f"doc{i}.txt\n" for i in range(20)), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    os.link(metadata, out / "train_metadata.txt")
    args = ["--metadata_files", metadata, "--validation_count", "3", "--output_dir", out]
    for extra in ([], ["--overwrite"]):  # the input is named, not "exists; pass --overwrite"
        line = one_line(capsys, "split_metadata", split_main, *args, *extra)
        assert line == (f"--train_name {out / 'train_metadata.txt'} is one of the input metadata files ({metadata}); "
                        "refusing to overwrite it (a file this run reads): pass another --output_dir or --train_name")
    assert metadata.read_text(encoding="utf-8").count("\n") == 20
    code, _, err = run(capsys, split_main, *args, "--train_name", "train2.txt")  # the advice
    assert code == 0 and (out / "train2.txt").read_text(encoding="utf-8").count("\n") == 17, err


# --- inspect_tfrecords --json / --plot ---------------------------------------------------------------


def test_inspect_outputs_naming_what_it_reads(corpus, tmp_path, capsys):
    metadata, vocab = corpus
    out = tmp_path / "out"
    assert create_main(base_args(metadata, vocab, out, num_output_files=2, quiet=True)) == 0
    capsys.readouterr()
    shard, manifest = out / "examples-1.tfrecords", out / "data_params.json"
    before = {p: p.read_bytes() for p in (shard, manifest, vocab)}
    for target, what in ((shard, "a record file inspected"), (manifest, "the manifest of the files inspected"),
                         (vocab, "the vocabulary in use")):
        line = one_line(capsys, "inspect_tfrecords", insp.main, out, "--json", target)
        assert line == f"--json {target} is {what}; refusing to overwrite it (a file this run reads): name another output file"
    line = one_line(capsys, "inspect_tfrecords", insp.main, shard, "--json", tmp_path / "x.png", "--plot", tmp_path / "x.png")
    assert line == f"--plot {tmp_path / 'x.png'} is the file --json writes; give them different names"
    for plot in ("x.json", "plots", "noext"):  # (matplotlib raised ValueError, or wrote PATH.png and said OK)
        (tmp_path / "plots").mkdir(exist_ok=True)
        line = one_line(capsys, "inspect_tfrecords", insp.main, shard, "--plot", tmp_path / plot)
        assert line == f"--plot {tmp_path / plot}: give a file name ending in .png (the plot is a PNG)"
    assert all(p.read_bytes() == data for p, data in before.items())
    code, _, err = run(capsys, insp.main, out, "--json", tmp_path / "report.json", "--num_workers", "1")  # the advice
    assert code == 0 and json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["ok"], err


# --- create_tfrecords: inputs an --output_dir run would replace or remove -------------------------------


@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_create_refuses_to_remove_its_own_inputs(corpus, tmp_path, capsys, url):
    metadata, vocab = corpus
    out = tmp_path / "out"
    out.mkdir()
    given = f"file://{out}" if url else str(out)
    inside = out / "examples-1.tfrecords"  # a metadata file named like a shard of the run
    shutil.copy(metadata, inside)
    args = base_args(inside, vocab, given, quiet=True)
    args[args.index("--input_files_prefix") + 1] = str(metadata.parent)
    said = (f"--metadata_files {inside} is a file that a run in --output_dir {given} replaces or removes (the manifest, "
            f"files named like shards, the work directory); move it out of {given} and run again")
    for extra in ([], ["--overwrite"]):
        assert one_line(capsys, "create_tfrecords", create_main, *args, *extra) == said
    assert inside.read_bytes() == metadata.read_bytes()
    moved = tmp_path / "moved.txt"  # the advice
    inside.rename(moved)
    args[args.index("--metadata_files") + 1] = str(moved)
    assert create_main(args + ["--overwrite"]) == 0 and moved.read_bytes() == metadata.read_bytes()


def test_create_refuses_inputs_the_previous_manifest_lists_or_in_the_work_directory(corpus, tmp_path, capsys):
    metadata, vocab = corpus
    out = tmp_path / "out"
    assert create_main(base_args(metadata, vocab, out, num_output_files=1, name="old", quiet=True)) == 0
    capsys.readouterr()
    listed = out / "old-1.tfrecords"  # listed by the manifest: --overwrite --name new would remove it
    shutil.copy(vocab, listed)
    line = one_line(capsys, "create_tfrecords", create_main,
                    *base_args(metadata, listed, out, num_output_files=1, overwrite=True, quiet=True))
    assert line.startswith(f"--vocab_file {listed} is a file that a run in --output_dir {out} replaces or removes")
    assert listed.read_bytes() == vocab.read_bytes()
    work = out / ".bert_data_work"
    work.mkdir()
    hidden = work / "vocab.txt"
    shutil.copy(vocab, hidden)
    line = one_line(capsys, "create_tfrecords", create_main, *base_args(metadata, hidden, out, overwrite=True, quiet=True))
    assert line == (f"--vocab_file {hidden} is inside {work}, a file that a run in --output_dir {out} replaces or removes "
                    f"(the manifest, files named like shards, the work directory); move it out of {out} and run again")
    assert hidden.read_bytes() == vocab.read_bytes()
    assert create_main(base_args(metadata, vocab, out, overwrite=True, quiet=True)) == 0  # the vocabulary elsewhere


@pytest.mark.parametrize("spelling", ["plain", "symlink"])
def test_create_refuses_to_remove_documents_it_reads(corpus, tmp_path, capsys, spelling):
    """helper-15's case D: the output inside the corpus and the metadata made by `find` over it, so
    that it lists the last run's shards and manifest: --overwrite deleted them, then the run
    failed on the missing documents (and said --resume). Now one line before anything is touched,
    however the entry reaches the file (here through a symlinked directory); compared by name, then
    by identity (a link to a shard under another name is not seen: no stat per entry for it)."""
    metadata, vocab = corpus
    root = metadata.parent
    out = root / "out"
    assert create_main(base_args(metadata, vocab, out, num_output_files=2, quiet=True)) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    listed = out / "examples-2.tfrecords"
    if spelling == "symlink":  # the same file through another directory
        (root / "docs" / "linked").symlink_to(out)
        listed = root / "docs" / "linked" / listed.name
    every = tmp_path / "every.txt"
    every.write_text(metadata.read_text() + f"{listed.relative_to(root)}\n", encoding="utf-8")
    args = base_args(every, vocab, out, num_output_files=2, overwrite=True, quiet=True)
    args[args.index("--input_files_prefix") + 1] = str(root)
    line = one_line(capsys, "create_tfrecords", create_main, *args)
    assert line.startswith(f"the listed document {root / listed.relative_to(root)} ") and "move it out of" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing removed


# --- --log_level: one rule for every tool -------------------------------------------------------------


def test_every_tools_log_level_rule(corpus, tmp_path, capsys):
    metadata, vocab = corpus
    cases = [
        ("create_tfrecords", create_main, base_args(metadata, vocab, tmp_path / "out", quiet=True, overwrite=True)),
        ("create_pretraining_data", google_main,
         [f"--input_file={_bert_corpus(tmp_path)}", f"--output_file={tmp_path / 'x.tfrecord'}", f"--vocab_file={vocab}",
          "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1", "--quiet"]),
        ("build_vocab", vocab_main, ["--metadata_files", metadata, "--input_files_prefix", metadata.parent,
                                      "--vocab_size", "120", "--output", tmp_path / "v.txt", "--quiet"]),
    ]
    for prog, main, args in cases:
        for bad in ("bogus", "", "-5", "x" * 100):
            shown = repr(bad) if len(bad) <= 60 else repr("x" * 57 + "...")
            assert one_line(capsys, prog, main, *args, "--log_level", bad) == (
                f"--log_level {shown} is not a logging level (DEBUG, INFO, WARNING, ERROR)"), (prog, bad)
        for good in ("warning", "30"):  # the rerun with a level
            code, _, err = run(capsys, main, *args, "--log_level", good)
            assert code == 0, (prog, good, err)


# --- metadata files that are FIFOs ----------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_metadata_fifo_nobody_writes_to_is_one_line(corpus, tmp_path, capsys):
    import subprocess
    import sys

    metadata, vocab = corpus
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args: List[str] = base_args(fifo, vocab, tmp_path / "out", quiet=True)
    try:  # its own process: create_tfrecords takes over signals, and a hang must fail, not block the suite
        done = subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"create_tfrecords blocked on the metadata FIFO {fifo}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"create_tfrecords: error: no documents listed in {fifo} ({fifo} is a named pipe that gave "
                           f"no line: start its writer first, or pass a file)\n")
    args[args.index("--metadata_files") + 1] = str(metadata)
    args[args.index("--input_files_prefix") + 1] = str(metadata.parent)
    assert create_main(args) == 0  # the corrected rerun: nothing was left behind

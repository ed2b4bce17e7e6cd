"""--resume re-checks the documents, not only the list of them (issue 26, class 3).

A run records each listed document's size and modification time (digested, in order) and the
newest of them. A document edited between a kill and ``--resume`` is refused in one line naming
it, its metadata file and line, and the two ways out; both ways out work: restoring the document
resumes to the clean run's bytes, ``--overwrite`` makes the clean run of the edited corpus. The
same holds for a finished run's ``--resume``, for a train/validation job and for BERT's named
output files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from bert_data.output.journal import check_same_inputs, check_same_run
from bert_data.errors import ResumeError

from conftest import REPO, base_args, sentence, write_corpus, write_vocab

WORK = ".bert_data_work"
FIX = "; restore it, or start over with --overwrite"


def _cli(args: List[str], env: Dict[str, str] | None = None, tool: str = "create", cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", f"bert_data.tools.{tool}", *args], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=300, cwd=cwd,
    )


def _shards(out: Path) -> Dict[str, bytes]:
    shards = {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecords"))}
    assert shards and any(shards.values())
    return shards


def _grow(path: Path) -> os.stat_result:
    """Append a paragraph (the issue's case: a document that grows); returns its stat before."""
    before = path.stat()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n" + " ".join(sentence(900 + i) for i in range(5)) + "\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # surely newer, on any clock
    return before


def _restore(path: Path, data: bytes, before: os.stat_result) -> None:
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture
def killed(tmp_path) -> Dict[str, object]:
    """A run killed after its first group, and the reference run of the same corpus."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=14)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = base_args(metadata, vocab, tmp_path / "out", split_num=3)
    assert _cli(base_args(metadata, vocab, tmp_path / "reference", split_num=3)).returncode == 0
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    return {"metadata": metadata, "vocab": vocab, "args": args, "out": tmp_path / "out"}


def test_a_document_that_grew_is_refused_by_name_and_restoring_it_resumes(killed) -> None:
    doc = killed["metadata"].parent / "docs" / "doc009.txt"
    original = doc.read_bytes()
    before = _grow(doc)
    refused = _cli(killed["args"] + ["--resume"])
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume refused: the listed document {doc} ({killed['metadata']}:10) was modified "
        f"since the interrupted run ({killed['out'] / WORK / 'run.json'}){FIX}"
    ]
    _restore(doc, original, before)  # the first way out: restore it
    resumed = _cli(killed["args"] + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert _shards(killed["out"]) == _shards(killed["out"].parent / "reference")


def test_overwrite_after_an_edit_makes_the_clean_run_of_the_edited_corpus(killed, tmp_path) -> None:
    _grow(killed["metadata"].parent / "docs" / "doc004.txt")
    assert _cli(killed["args"] + ["--resume"]).returncode == 2
    assert _cli(killed["args"] + ["--overwrite"]).returncode == 0  # the second way out
    clean = _cli(base_args(killed["metadata"], killed["vocab"], tmp_path / "clean", split_num=3))
    assert clean.returncode == 0
    assert _shards(killed["out"]) == _shards(tmp_path / "clean") != _shards(tmp_path / "reference")


def test_a_document_replaced_by_an_older_copy_is_refused(killed) -> None:
    """Same size, older modification time (``cp -p`` of another version): not the newest file,
    so not named, but refused all the same."""
    doc = killed["metadata"].parent / "docs" / "doc002.txt"
    data = doc.read_bytes()
    doc.write_bytes(data.upper())
    os.utime(doc, ns=(10**18, 10**18))  # 2001
    refused = _cli(killed["args"] + ["--resume"])
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"create_tfrecords: error: --resume refused: a listed document's size or modification time changed since the "
        f"interrupted run ({killed['out'] / WORK / 'run.json'}){FIX}"
    ]


def test_a_document_replaced_by_a_directory_is_refused(killed) -> None:
    doc = killed["metadata"].parent / "docs" / "doc013.txt"
    doc.unlink()
    doc.mkdir()
    refused = _cli(killed["args"] + ["--resume"])
    assert refused.returncode == 2 and "a listed document's size or modification time changed" in refused.stderr


def test_a_finished_run_notices_an_edit(tmp_path, capsys) -> None:
    from bert_data.tools.create import main

    metadata = write_corpus(tmp_path / "corpus", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = base_args(metadata, vocab, tmp_path / "out")
    assert main(args) == 0
    assert main(args + ["--resume"]) == 0  # unchanged: already complete
    doc = metadata.parent / "docs" / "doc001.txt"
    original, before = doc.read_bytes(), _grow(doc)
    capsys.readouterr()
    assert main(args + ["--resume"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"create_tfrecords: error: --resume refused: the listed document {doc} ({metadata}:2) was modified since the "
        f"interrupted run ({tmp_path / 'out' / 'data_params.json'}){FIX}"
    ]
    _restore(doc, original, before)
    assert main(args + ["--resume"]) == 0


def test_a_train_validation_job_checks_its_half(tmp_path) -> None:
    metadata = write_corpus(tmp_path / "corpus", n_docs=14)
    vocab = write_vocab(tmp_path / "vocab.txt")
    args = base_args(metadata, vocab, tmp_path / "out", split_num=2, validation_fraction=0.3, seed=3)
    assert _cli(args, env={"BERT_DATA_CRASH_AT": "checkpointed:0"}).returncode == -signal.SIGKILL
    from bert_data.config import Config
    from bert_data.runners.plan import split_configs, split_selector
    from bert_data.metadata import iter_metadata

    config = Config(metadata_files=(str(metadata),), input_files_prefix=str(metadata.parent), validation_fraction=0.3,
                    seed=3, output_dir=str(tmp_path / "out"))
    select, _ = split_selector(split_configs(config)["train"])
    train_doc = next(Path(s.path) for s in iter_metadata([str(metadata)], str(metadata.parent)) if select(s))
    before = _grow(train_doc)
    refused = _cli(args + ["--resume"])
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"the listed document {train_doc} (" in refused.stderr and str(tmp_path / "out" / "train" / WORK) in refused.stderr
    _restore(train_doc, train_doc.read_bytes()[: before.st_size], before)
    assert _cli(args + ["--resume"]).returncode == 0


# --- BERT's named output files ----------------------------------------------------------------


def _bert_corpus(root: Path) -> List[Path]:
    root.mkdir()
    files = []
    for f in range(3):
        path = root / f"part{f}.txt"
        path.write_text("\n\n".join("\n".join(sentence(f * 50 + d * 5 + s) for s in range(4)) for d in range(5)) + "\n")
        files.append(path)
    return files


@pytest.mark.parametrize("crash_at", ["checkpointed:0", None], ids=["killed", "finished"])
def test_named_output_files_notice_an_edited_input(tmp_path, crash_at) -> None:
    files = _bert_corpus(tmp_path / "corpus")
    vocab = write_vocab(tmp_path / "vocab.txt")
    output = tmp_path / "o" / "examples.tfrecord"
    args = ["--input_file=corpus/*.txt", f"--output_file={output}", f"--vocab_file={vocab}", "--num_workers=1", "--quiet"]
    first = _cli(args, env={"BERT_DATA_CRASH_AT": crash_at} if crash_at else None, tool="google_bert", cwd=tmp_path)
    assert first.returncode == (-signal.SIGKILL if crash_at else 0), first.stderr
    original, before = files[1].read_bytes(), _grow(files[1])
    refused = _cli(args + ["--resume"], tool="google_bert", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"create_pretraining_data: error: --resume refused: the listed document {files[1]} (")
    assert refused.stderr.rstrip().endswith("restore it, or start over with a rerun without --resume")
    _restore(files[1], original, before)
    resumed = _cli(args + ["--resume"], tool="google_bert", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("already complete") == (crash_at is None)


def test_named_finished_run_with_other_input_files_is_refused(tmp_path) -> None:
    files = _bert_corpus(tmp_path / "corpus")
    vocab = write_vocab(tmp_path / "vocab.txt")
    output = tmp_path / "o" / "examples.tfrecord"
    args = ["--input_file=corpus/*.txt", f"--output_file={output}", f"--vocab_file={vocab}", "--quiet"]
    assert _cli(args, tool="google_bert", cwd=tmp_path).returncode == 0
    files[0].rename(tmp_path / "corpus" / "part9.txt")  # the glob now matches other files
    refused = _cli(args + ["--resume"], tool="google_bert", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"create_pretraining_data: error: --resume: --input_file matches other files than {output} was made from; "
        "run again without --resume"
    ]
    assert _cli(args, tool="google_bert", cwd=tmp_path).returncode == 0  # the advice works


# --- the check itself -----------------------------------------------------------------------------


def test_a_changed_metadata_list_is_not_also_reported_as_changed_documents() -> None:
    previous = {"metadata_sha256": "a", "documents_sha256": "d", "newest_document": "5 x (m:1)"}
    current = {"metadata_sha256": "b", "documents_sha256": "e", "newest_document": "9 y (m:2)"}
    with pytest.raises(ResumeError, match=r"^--resume refused: the metadata files' content changed since"):
        check_same_inputs(current, previous, "run.json")


def test_a_run_recorded_without_document_fingerprints_says_so() -> None:
    with pytest.raises(ResumeError, match=r"did not record documents_sha256 \(an older bert_data\) since"):
        check_same_inputs({"metadata_sha256": "a", "documents_sha256": "d", "newest_document": ""},
                          {"metadata_sha256": "a"}, "run.json")


def test_the_newest_document_alone_is_never_a_change() -> None:
    check_same_inputs({"documents_sha256": "d", "newest_document": "9 moved/x (m:1)"},
                      {"documents_sha256": "d", "newest_document": "9 x (m:1)"}, "run.json")


def test_the_whole_same_run_check_does_not_compare_the_inputs_again_as_a_setting() -> None:
    # it said "--inputs was {...}, now {...}" (no such flag) for what check_same_inputs lets pass
    settings = {"max_seq_length": 128, "inputs": {"documents_sha256": "d", "newest_document": "9 moved/x (m:1)"}}
    finished = {"max_seq_length": 128, "inputs": {"documents_sha256": "d", "newest_document": "9 x (m:1)"}}
    check_same_run(settings, finished, "manifest.json", finished=True)
    with pytest.raises(ResumeError, match=r"--max_seq_length was 128, now 512$"):
        check_same_run({**settings, "max_seq_length": 512}, finished, "manifest.json", finished=True)


# --- an input edited while the run reads it -----------------------------------------------------


@pytest.mark.parametrize("what", ["document", "vocabulary", "token cache"])
def test_an_input_edited_mid_run_is_refused_before_anything_is_published(tmp_path, what) -> None:
    """helper-18's case 2: a document appended to while the run was at its fourth group gave
    exit 0 and shards of neither corpus (the NSP pool was read before, the document's own group
    after), the manifest recording the old fingerprint. The files the groups read are stat'ed
    when the run starts and again before it publishes: a change is one line, nothing published."""
    from bert_data.errors import MetadataError
    from bert_data.runners.job import run
    from bert_data.tools.create import build_parser, config_from_args

    metadata = write_corpus(tmp_path / "corpus", n_docs=14)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    args = base_args(metadata, vocab, out, split_num=3, quiet=True)
    target = vocab if what == "vocabulary" else metadata.parent / "docs" / "doc012.txt"
    if what == "token cache":  # (helper-18's case 3: the cache remade by tokenize --overwrite as a run read it)
        from bert_data.tools.main import main as bert_data_main

        cache = tmp_path / "cache"
        assert bert_data_main(["tokenize", "--metadata_files", str(metadata), "--input_files_prefix", str(metadata.parent),
                               "--vocab_file", str(vocab), "--output_dir", str(cache), "--split_num", "3",
                               "--do_lower_case", "--quiet"]) == 0
        args += ["--from_tokens", str(cache)]
        target = cache / "tokens.json"
    config = config_from_args(build_parser().parse_args(args))
    edited: List[int] = []

    def edit(result) -> None:  # the coordinator, as the first group comes in
        if not edited:
            edited.append(result.group_index)
            if what == "token cache":
                os.utime(target, ns=(0, target.stat().st_mtime_ns + 10**9))
            else:
                _grow(target) if what == "document" else target.write_text(target.read_text() + "extra\n")

    with pytest.raises(MetadataError) as caught:
        run(config, on_group=edit)
    start = {"document": f"{metadata}:13: {target} changed (", "vocabulary": f"--vocab_file {target} changed while",
             "token cache": f"the token cache {target.parent}: {target} was modified while"}[what]
    assert str(caught.value).startswith(start), caught.value
    assert str(caught.value).endswith("nothing was published: run again with --overwrite once it no longer changes "
                                      "(--resume cannot continue a run whose inputs changed)")
    assert not (out / "data_params.json").exists() and not list(out.glob("*.tfrecords"))
    again = _cli(args + ["--overwrite"])  # the advice works
    assert again.returncode == 0, again.stderr


def test_a_vocabulary_touched_mid_run_is_no_change(tmp_path) -> None:
    """helper-19: the vocabulary is compared by its content (each worker loads it when it starts):
    a touch or a same-content copy mid-run does not discard the run."""
    from bert_data.runners.job import run
    from bert_data.tools.create import build_parser, config_from_args

    metadata = write_corpus(tmp_path / "corpus", n_docs=8)
    vocab = write_vocab(tmp_path / "vocab.txt")
    config = config_from_args(build_parser().parse_args(base_args(metadata, vocab, tmp_path / "out", split_num=3)))
    run(config, on_group=lambda result: vocab.write_bytes(vocab.read_bytes()))
    assert (tmp_path / "out" / "data_params.json").exists()

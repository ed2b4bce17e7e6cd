"""``create_tfrecords`` end to end in tmp_path: outputs readable by TensorFlow with the exact
run_pretraining feature spec, determinism, flags, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from bert_data.tools.create import main
from bert_data.format.schema import tf_feature_spec
from conftest import base_args, sentence, write_corpus, write_vocab

L, P = 32, 5  # base_args' max_seq_length / max_predictions_per_seq
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


def read_records(tf, path: Path, max_seq_length=L, max_predictions=P, compression=None) -> List[Dict[str, np.ndarray]]:
    spec = tf_feature_spec(max_seq_length, max_predictions)
    dataset = tf.data.TFRecordDataset([str(path)], compression_type=compression)
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(raw, spec).items()} for raw in dataset]


def manifest_of(out: Path) -> Dict:
    return json.loads((out / "data_params.json").read_text(encoding="utf-8"))


def shards_of(out: Path, name="examples") -> List[Path]:
    return sorted(out.glob(f"{name}-*.tfrecords"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def check_record(rec: Dict[str, np.ndarray], max_seq_length=L, max_predictions=P) -> None:
    """Structural invariants of one parsed record."""
    ids, mask, seg = rec["input_ids"], rec["input_mask"], rec["segment_ids"]
    real = int(mask.sum())
    assert mask.tolist() == [1] * real + [0] * (max_seq_length - real)
    assert ids[0] == CLS and ids[real - 1] == SEP
    assert (ids[real:] == PAD).all()
    weights = rec["masked_lm_weights"]
    count = int(weights.sum())
    assert weights.tolist() == [1.0] * count + [0.0] * (max_predictions - count)
    positions = rec["masked_lm_positions"][:count]
    assert count >= 1 and (np.diff(positions) > 0).all()
    restored = ids.copy()
    restored[positions] = rec["masked_lm_ids"][:count]
    seps = np.flatnonzero(restored == SEP).tolist()
    assert len(seps) == 2 and seps[1] == real - 1
    assert seg.tolist() == [0] * (seps[0] + 1) + [1] * (real - seps[0] - 1) + [0] * (max_seq_length - real)
    assert seps[0] >= 2 and seps[1] - seps[0] >= 2, "A and B are non-empty"
    assert set(positions.tolist()).isdisjoint({0, *seps}) and (positions < real).all()
    assert rec["next_sentence_labels"].tolist() in ([0], [1])


def run_ok(capsys, metadata, vocab, out, **flags) -> Dict:
    code = main(base_args(metadata, vocab, out, **flags))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    return manifest_of(out)


def run_error(capsys, args) -> str:
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("create_tfrecords: error: ")
    assert "Traceback" not in captured.err
    return lines[0]


def check_output(tf, out: Path, manifest: Dict, num_output_files=3, compression=None, **sizes) -> List[Dict]:
    shards = shards_of(out)
    assert [p.name for p in shards] == [f"examples-{i}.tfrecords" for i in range(1, num_output_files + 1)]
    assert sorted(manifest["instances_per_shard"]) == sorted(p.name for p in shards)
    assert not (out / ".bert_data_work").exists()
    records = []
    for shard in shards:
        shard_records = read_records(tf, shard, compression=compression, **sizes)
        assert len(shard_records) == manifest["instances_per_shard"][shard.name]
        records.extend(shard_records)
    assert manifest["n_examples"] == sum(manifest["instances_per_shard"].values()) == len(records)
    docs = manifest["documents"]
    assert docs["read"] == docs["used"] + sum(docs["skipped"].values())
    assert manifest["n_docs"] == docs["used"]
    for rec in records:
        check_record(rec, **sizes)
    return records


# --- successful runs -----------------------------------------------------------------------------


def test_end_to_end(tf, capsys, tmp_path, tiny_corpus, tiny_vocab):
    out = tmp_path / "out"
    manifest = run_ok(capsys, tiny_corpus, tiny_vocab, out)
    records = check_output(tf, out, manifest)
    assert len(records) > 50
    assert manifest["documents"] == {"read": 12, "used": 12, "skipped": {}}
    assert manifest["max_seq_length"] == L and manifest["max_predictions_per_seq"] == P
    assert manifest["metadata_entries"] == 12 and manifest["duplicate_metadata_entries"] == 0
    labels = [int(r["next_sentence_labels"][0]) for r in records]
    assert 0 < sum(labels) < len(labels)  # both NSP classes occur
    assert manifest["schema"]["input_ids"]["length"] == L
    assert manifest["schema"]["masked_lm_weights"]["dtype"] == "float32"


def test_rerun_is_byte_identical_and_seed_changes_bytes(capsys, tmp_path, tiny_corpus, tiny_vocab):
    first, second, third = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    m1 = run_ok(capsys, tiny_corpus, tiny_vocab, first)
    m2 = run_ok(capsys, tiny_corpus, tiny_vocab, second)
    m3 = run_ok(capsys, tiny_corpus, tiny_vocab, third, seed=12345)
    shards1, shards2, shards3 = shards_of(first), shards_of(second), shards_of(third)
    assert [p.name for p in shards1] == [p.name for p in shards2]
    for a, b in zip(shards1, shards2):
        assert a.read_bytes() == b.read_bytes()
    for key in ("output_dir",):
        m1.pop(key), m2.pop(key)
    assert m1 == m2
    assert b"".join(p.read_bytes() for p in shards1) != b"".join(p.read_bytes() for p in shards3)
    assert m3["seed"] == 12345


def test_num_output_files_respected(tf, capsys, tmp_path, tiny_corpus, tiny_vocab):
    out = tmp_path / "out"
    manifest = run_ok(capsys, tiny_corpus, tiny_vocab, out, num_output_files=7)
    check_output(tf, out, manifest, num_output_files=7)
    assert len(list(out.glob("*.tfrecords"))) == 7
    single = tmp_path / "single"
    manifest = run_ok(capsys, tiny_corpus, tiny_vocab, single, num_output_files=1)
    check_output(tf, single, manifest, num_output_files=1)


def test_gzip_output_readable_by_tensorflow(tf, capsys, tmp_path, tiny_corpus, tiny_vocab):
    plain, zipped = tmp_path / "plain", tmp_path / "gz"
    m_plain = run_ok(capsys, tiny_corpus, tiny_vocab, plain)
    m_gz = run_ok(capsys, tiny_corpus, tiny_vocab, zipped, compression="gzip")
    records = check_output(tf, zipped, m_gz, compression="GZIP")
    for shard in shards_of(zipped):
        assert shard.read_bytes()[:2] == b"\x1f\x8b"
    # compression changes the container only: the same records come back
    plain_records = [r for shard in shards_of(plain) for r in read_records(tf, shard)]
    assert len(plain_records) == len(records) == m_plain["n_examples"]
    for a, b in zip(plain_records, records):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_single_sentence_per_line(tf, capsys, tmp_path, tiny_vocab):
    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    names = []
    for d in range(6):
        lines = [sentence(d * 13 + s, 6 + s % 5).rstrip(".") for s in range(10)]  # no punctuation at all
        (root / "docs" / f"d{d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        names.append(f"docs/d{d}.txt")
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(names) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    manifest = run_ok(capsys, metadata, tiny_vocab, out, single_sentence_per_line=True)
    check_output(tf, out, manifest)
    assert manifest["sentences"] == 60  # one sentence per line, none lost or split
    assert manifest["documents"]["used"] == 6


def test_multiple_docs_in_single_file(tf, capsys, tmp_path, tiny_vocab):
    root = tmp_path / "corpus"
    root.mkdir()
    docs = [" ".join(sentence(d * 5 + s) for s in range(6)) for d in range(8)]
    (root / "all.txt").write_text(docs[0] + "\n@@@\n" + "\n@@@\n".join(docs[1:]), encoding="utf-8")
    metadata = root / "metadata.txt"
    metadata.write_text("all.txt\n", encoding="utf-8")
    out = tmp_path / "out"
    manifest = run_ok(capsys, metadata, tiny_vocab, out, multiple_docs_in_single_file=True, multiple_docs_separator="@@@")
    check_output(tf, out, manifest)
    assert manifest["documents"] == {"read": 8, "used": 8, "skipped": {}}
    assert manifest["multiple_docs_separator"] == "@@@"


@pytest.mark.parametrize("separator, documents", [
    (None, 3),  # the default, "\n": a blank line between documents (the Model Zoo's meaning)
    ("\\n", 3),
    ("", 31),  # every line a document
    ("=====", 1),  # no line starts with it: the file is one document
])
def test_multiple_docs_separator_means_what_the_model_zoo_means(capsys, tmp_path, tiny_vocab, separator, documents):
    """--multiple_docs_separator S splits on a newline followed by S, as the Model Zoo's
    text_to_tokenized_documents does: 31 lines in 3 blank-line separated paragraphs are 3
    documents by default, not 31."""
    root = tmp_path / "corpus"
    root.mkdir()
    paragraphs = ["\n".join(sentence(p * 11 + s) for s in range(n)) for p, n in enumerate((10, 11, 10))]
    (root / "all.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    (root / "metadata.txt").write_text("all.txt\n", encoding="utf-8")
    extra = {} if separator is None else {"multiple_docs_separator": separator}
    manifest = run_ok(capsys, root / "metadata.txt", tiny_vocab, tmp_path / "out", multiple_docs_in_single_file=True,
                      split_num=1000, **extra)
    empty = 3 if separator == "" else 0  # the two blank lines and the end after the last newline: empty, counted
    assert manifest["documents"]["read"] == documents + empty and manifest["documents"]["used"] == documents


def test_mask_whole_word(tf, capsys, tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt")
    tokens = vocab.read_text(encoding="utf-8").split("\n")
    is_cont = np.array([t.startswith("##") for t in tokens if t], dtype=bool)
    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    names = []
    for d in range(6):
        # out-of-vocabulary words become letter pieces: z ##e ##b ##r ##a ##s
        text = " ".join(f"The zebras quickly jumped {sentence(d * 3 + s, 5)}" for s in range(8))
        (root / "docs" / f"d{d}.txt").write_text(text, encoding="utf-8")
        names.append(f"docs/d{d}.txt")
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(names), encoding="utf-8")
    out = tmp_path / "out"
    manifest = run_ok(capsys, metadata, vocab, out, mask_whole_word=True, masked_lm_prob=0.3,
                      max_predictions_per_seq=12)
    records = check_output(tf, out, manifest, max_predictions=12)
    assert manifest["mask_whole_word"] is True
    masked_continuations = 0
    for rec in records:
        count = int(rec["masked_lm_weights"].sum())
        positions = set(rec["masked_lm_positions"][:count].tolist())
        restored = rec["input_ids"].copy()
        restored[list(positions)] = rec["masked_lm_ids"][:count]
        real = int(rec["input_mask"].sum())
        for j in range(2, real - 1):
            if is_cont[restored[j]] and restored[j - 1] not in (CLS, SEP):
                # j continues the word at j - 1: both masked or neither
                assert (j in positions) == (j - 1 in positions), (restored.tolist(), sorted(positions))
                masked_continuations += j in positions
    assert masked_continuations > 0  # the test did exercise multi-piece words


def test_skipped_documents_are_counted(tf, capsys, tmp_path, tiny_vocab):
    root = tmp_path / "corpus"
    metadata = write_corpus(root, n_docs=4)
    docs = root / "docs"
    (docs / "empty.txt").write_bytes(b"")
    (docs / "blank.txt").write_text("   \n\n\t \n", encoding="utf-8")
    (docs / "control.txt").write_text("\u200b\u200b\x01\x02 \u200d\ufeff\u200b\n", encoding="utf-8")
    (docs / "binary.bin").write_bytes(b"\x00\x01\x02binary")
    (docs / "subdir").mkdir()
    extra = ["empty.txt", "blank.txt", "control.txt", "binary.bin", "subdir"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(docs / "pipe")
        extra.append("pipe")
    with metadata.open("a", encoding="utf-8") as handle:
        handle.write("".join(f"docs/{name}\n" for name in extra))
    out = tmp_path / "out"
    manifest = run_ok(capsys, metadata, tiny_vocab, out)
    check_output(tf, out, manifest)
    expected_skips = {"empty": 2, "no_usable_sentence": 1, "binary": 1,
                      "not_a_regular_file": 2 if "pipe" in extra else 1}
    assert manifest["documents"] == {"read": 4 + len(extra), "used": 4, "skipped": expected_skips}


def test_overwrite(capsys, tmp_path, tiny_corpus, tiny_vocab):
    out = tmp_path / "out"
    run_ok(capsys, tiny_corpus, tiny_vocab, out)
    before = {p.name: p.read_bytes() for p in shards_of(out)}
    (out / "notes.txt").write_text("keep me", encoding="utf-8")
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, out))
    assert "--overwrite" in line and "not empty" in line
    assert {p.name: p.read_bytes() for p in shards_of(out)} == before  # untouched
    manifest = run_ok(capsys, tiny_corpus, tiny_vocab, out, overwrite=True, num_output_files=2)
    assert [p.name for p in shards_of(out)] == ["examples-1.tfrecords", "examples-2.tfrecords"]
    assert (out / "notes.txt").read_text(encoding="utf-8") == "keep me"
    assert manifest["num_output_files"] == 2


# --- errors: exit 2, one line, no traceback ------------------------------------------------------


def test_missing_document(capsys, tmp_path, tiny_corpus, tiny_vocab):
    lines = tiny_corpus.read_text(encoding="utf-8").splitlines()
    lines.insert(2, "docs/not_there.txt")
    tiny_corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out"))
    assert f"{tiny_corpus}:3" in line
    assert "not_there.txt" in line
    assert not (tmp_path / "out" / "data_params.json").exists()


def test_empty_metadata(capsys, tmp_path, tiny_vocab):
    metadata = tmp_path / "metadata.txt"
    metadata.write_text("# nothing yet\n\n", encoding="utf-8")
    line = run_error(capsys, base_args(metadata, tiny_vocab, tmp_path / "out"))
    assert "no documents listed" in line and str(metadata) in line


def test_missing_metadata_file(capsys, tmp_path, tiny_vocab):
    line = run_error(capsys, base_args(tmp_path / "absent.txt", tiny_vocab, tmp_path / "out"))
    assert "absent.txt" in line and "does not exist" in line


def test_invalid_vocab_blank_line(capsys, tmp_path, tiny_corpus, tiny_vocab):
    tokens = tiny_vocab.read_text(encoding="utf-8").split("\n")
    tokens.insert(7, "")
    tiny_vocab.write_text("\n".join(tokens), encoding="utf-8")
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out"))
    assert "line 8" in line and "blank" in line


def test_missing_vocab_file_path(capsys, tmp_path, tiny_corpus):
    line = run_error(capsys, base_args(tiny_corpus, tmp_path / "nope.txt", tmp_path / "out"))
    assert "nope.txt" in line


@pytest.mark.parametrize(
    "flags, needle",
    [
        ({"max_predictions_per_seq": 32}, "--max_predictions_per_seq"),
        ({"max_predictions_per_seq": 40}, "--max_predictions_per_seq"),
        ({"masked_lm_prob": 1.5}, "--masked_lm_prob"),
        ({"short_seq_prob": -0.5}, "--short_seq_prob"),
        ({"max_seq_length": 4, "max_predictions_per_seq": 2}, "--max_seq_length"),
        ({"dupe_factor": 0}, "--dupe_factor"),
        ({"vocab_file": None}, "--vocab_file"),
        ({"metadata_files": None}, "--metadata_files"),
        ({"name": "a/b"}, "--name"),
        ({"spacy_model": "en_core_web_sm", "single_sentence_per_line": True}, "--single_sentence_per_line"),
    ],
)
def test_bad_flags(capsys, tmp_path, tiny_corpus, tiny_vocab, flags, needle):
    out = tmp_path / "out"
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, out, **flags))
    assert needle in line
    assert not out.exists() or not any(out.iterdir())


def test_unknown_spacy_model(capsys, tmp_path, tiny_corpus, tiny_vocab):
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out", spacy_model="xx_missing_model_q"))
    assert "python -m spacy download xx_missing_model_q" in line


def test_config_preset_with_unknown_key(capsys, tmp_path, tiny_corpus, tiny_vocab):
    preset = tmp_path / "p.yaml"
    preset.write_text("dupe_factr: 3\n", encoding="utf-8")
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out", config=str(preset)))
    assert "dupe_factr" in line


def test_config_preset_used_by_cli(tf, capsys, tmp_path, tiny_corpus, tiny_vocab):
    preset = tmp_path / "p.yaml"
    preset.write_text("max_seq_length: 48\nmax_predictions_per_seq: 7\nnum_output_files: 2\n", encoding="utf-8")
    out = tmp_path / "out"
    # base_args passes --max_seq_length 32 / --max_predictions_per_seq 5 explicitly: those win
    args = base_args(tiny_corpus, tiny_vocab, out, config=str(preset), num_output_files=None)
    assert main(args) == 0
    capsys.readouterr()
    manifest = manifest_of(out)
    assert (manifest["max_seq_length"], manifest["max_predictions_per_seq"]) == (32, 5)
    assert manifest["num_output_files"] == 2  # from the preset
    check_output(tf, out, manifest, num_output_files=2)


def test_one_sentence_single_document_is_nothing_usable(capsys, tmp_path, tiny_vocab):
    """One one-sentence document: no partner for NSP, so no instance: an error, not empty shards."""
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "only.txt").write_text("The cat sat on the mat.\n", encoding="utf-8")
    metadata = root / "metadata.txt"
    metadata.write_text("only.txt\n", encoding="utf-8")
    line = run_error(capsys, base_args(metadata, tiny_vocab, tmp_path / "out"))
    assert line == (
        "create_tfrecords: error: no instance could be made from the 1 usable document (2 one-sentence "
        "chunks had no partner; skipped: none); give more documents (a random B comes from another one), or "
        "documents of more than one sentence; nothing was published"
    )
    assert not list((tmp_path / "out").glob("*.tfrecords"))


def test_invalid_utf8_metadata_is_one_line_error(capsys, tmp_path, tiny_corpus, tiny_vocab):
    tiny_corpus.write_bytes(tiny_corpus.read_bytes() + b"docs/\xff.txt\n")
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out"))
    assert "UTF-8" in line and f"{tiny_corpus}" in line and "line 13" in line


@pytest.mark.parametrize("argv, line", [
    (["--input_files", "x"], "unknown flag --input_files; did you mean --input_files_prefix?"),
    (["--dupe_factr", "3"], "unknown flag --dupe_factr; did you mean --dupe_factor?"),
    (["--dupe_factr=3"], "unknown flag --dupe_factr; did you mean --dupe_factor?"),
    (["--colour", "blue"], "unknown flag --colour; see --help"),
    (["-x"], "unknown flag -x; see --help"),
    (["meta.txt"], "unexpected argument 'meta.txt': every input is given by a flag (e.g. --metadata_files meta.txt); "
     "see --help"),
    (["--max_seq_length", "abc"], "--max_seq_length: invalid int value 'abc'; give an integer"),
    (["--max_seq_length", "1e3"], "--max_seq_length: invalid int value '1e3'; give an integer"),
    (["--max_seq_length", "9" * 5000], "--max_seq_length: invalid int value '" + "9" * 56 + "...; give an integer"),
    (["x" * 100], "unexpected argument '" + "x" * 57 + "...': every input is given by a flag (e.g. "
     "--metadata_files " + "x" * 57 + "...); see --help"),
    (["--buffer_size", "lots"], "--buffer_size: invalid integer value 'lots'; give an integer"),
    (["--masked_lm_prob", "high"], "--masked_lm_prob: invalid float value 'high'; give a number"),
    (["--metadata_files"], "--metadata_files needs a value (expected at least one argument; a value that starts with - is written --metadata_files=VALUE)"),
    (["--output_dir"], "--output_dir needs a value (expected one argument; a value that starts with - is written --output_dir=VALUE)"),
    (["--name", "-x"], "--name needs a value (expected one argument; a value that starts with - is written "
     "--name=VALUE)"),
    (["--config"], "--config needs a value (expected one argument; a value that starts with - is written --config=VALUE)"),
    (["--overwrite=yes"], "--overwrite takes no value (ignored explicit argument 'yes'); write --overwrite or "
     "--no-overwrite"),
    (["--compression", "zip"], "--compression: invalid choice: 'zip' (choose from 'none', 'gzip')"),
    (["--group_bytes", "12Q"], "--group_bytes: invalid size: '12Q' (an integer, or with K, M or G: 8M)"),
])
def test_usage_errors_are_one_line_and_never_abbreviations(capsys, argv, line):
    with pytest.raises(SystemExit) as exit_info:
        main(["--vocab_file", "v.txt", *argv])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"create_tfrecords: error: {line}"]


@pytest.mark.parametrize("flags, line", [
    ({"max_seq_length": 100_000}, "--max_seq_length 100000 is more than 8,192 (the longest BERT-family context; each "
     "batch of 4,096 rows holds L ids per feature)"),
    ({"dupe_factor": 1001}, "--dupe_factor 1001 is more than 1,000 (each pass writes the whole corpus again; BERT "
     "uses 10)"),
    ({"num_output_files": 100_001}, "--num_output_files 100001 is more than 100,000 (the coordinator keeps one open "
     "file per shard)"),
    ({"split_num": 2_000_000}, "--split_num 2000000 is more than 1,048,576 (a group's list of files is held by one "
     "worker)"),
    ({"max_predictions_per_seq": 9000}, "--max_predictions_per_seq 9000 is more than 8,192 (at most "
     "--max_seq_length anyway)"),
    ({"mlm_only": True, "buffer_size": "1e9"}, "--buffer_size 1000000000 is more than 100,000,000 (~40 bytes of "
     "memory per token in each worker)"),
    ({"group_bytes": "2G"}, "--group_bytes 2147483648 must be between 64K and 1G (default 8M): a worker holds ~10 "
     "times it"),
    ({"seed": str(1 << 64)}, "--seed 18446744073709551616 is not a 64-bit integer (between -2^63 and 2^64 - 1)"),
    ({"output_dir": ""}, "--output_dir must not be empty: give a directory (default ./tfrecords/)"),
    ({"spacy_model": ""}, "--spacy_model must not be empty: leave it out for the rule-based sentencizer"),
])
def test_absurd_values_are_refused_before_any_work(capsys, tmp_path, tiny_corpus, tiny_vocab, flags, line):
    out = flags.pop("output_dir", tmp_path / "out")
    assert run_error(capsys, base_args(tiny_corpus, tiny_vocab, out, **flags)) == f"create_tfrecords: error: {line}"
    assert not (tmp_path / "out").exists()


def test_num_workers_is_bounded_by_the_cores(capsys, tmp_path, tiny_corpus, tiny_vocab):
    cores = len(os.sched_getaffinity(0))
    most = min(4 * cores, 1024)
    line = run_error(capsys, base_args(tiny_corpus, tiny_vocab, tmp_path / "out", num_workers=most + 1))
    assert line.startswith(f"create_tfrecords: error: --num_workers {most + 1} is more than {most:,} (")
    assert not (tmp_path / "out").exists()


# --- presets by name, --print_config -------------------------------------------------------------


def test_config_preset_by_name(capsys, tmp_path, tiny_corpus, tiny_vocab):
    out = tmp_path / "out"
    args = base_args(tiny_corpus, tiny_vocab, out, config="bert_base_msl128", max_seq_length=None,
                     max_predictions_per_seq=None, dupe_factor=1)
    assert main(args) == 0, capsys.readouterr().err
    manifest = manifest_of(out)
    assert (manifest["max_seq_length"], manifest["max_predictions_per_seq"], manifest["dupe_factor"]) == (128, 20, 1)


def test_print_config_prints_the_merged_settings_and_runs_nothing(capsys, tmp_path):
    import yaml

    out = tmp_path / "out"
    code = main(["--config", "bert_base_msl512", "--dupe_factor", "3", "--output_dir", str(out), "--print_config"])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    assert captured.out.startswith(
        "# create_tfrecords effective settings: defaults < --config bert_base_msl512 < flags\n"
    )
    data = yaml.safe_load(captured.out)
    assert (data["max_seq_length"], data["max_predictions_per_seq"], data["dupe_factor"]) == (512, 80, 3)
    assert data["output_dir"] == str(out) and data["metadata_files"] == [] and data["vocab_file"] is None
    assert not out.exists()


def test_print_config_reads_back_as_the_same_run(capsys, tmp_path, tiny_corpus, tiny_vocab):
    args = base_args(tiny_corpus, tiny_vocab, tmp_path / "out", multiple_docs_in_single_file=True,
                     multiple_docs_separator="\\n==\\n", seed=7)
    assert main(args + ["--print_config"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out, encoding="utf-8")
    from bert_data.tools.create import build_parser, config_from_args

    direct = config_from_args(build_parser().parse_args(args))
    assert config_from_args(build_parser().parse_args(["--config", str(printed)])) == direct


def test_print_config_refuses_what_a_run_would(capsys):
    line = run_error(capsys, ["--config", "bert_base_msl512", "--max_seq_length", "64", "--print_config"])
    assert line == (
        "create_tfrecords: error: --config bert_base_msl512: max_predictions_per_seq: 80 must be at least 1 and smaller "
        "than --max_seq_length 64"
    )


def test_print_config_into_a_closed_pipe_is_quiet():
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written: the write gets EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bert_data.tools.create", "--config", "bert_base_msl128", "--print_config"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == ""


# --- special files, open files -------------------------------------------------------------------


def test_special_files_as_vocab_or_config_are_one_line_and_never_hang(tmp_path, tiny_corpus):
    import subprocess
    import sys

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flag, value, needle in [
        ("vocab_file", fifo, f"vocab file '{fifo}' is not a regular file"),
        ("vocab_file", "/dev/zero", "vocab file '/dev/zero' is not a regular file"),
        ("vocab_file", tmp_path, "is a directory"),
        ("config", fifo, f"--config {fifo}: not a regular file (a directory, FIFO or device); give a YAML file"),
        ("config", "/dev/zero", "--config /dev/zero: not a regular file (a directory, FIFO or device); give a YAML file"),
        ("config", tmp_path, f"--config {tmp_path}: not a regular file (a directory, FIFO or device); give a YAML file"),
    ]:
        args = base_args(tiny_corpus, tmp_path / "vocab.txt", tmp_path / "out", **{flag: value})
        done = subprocess.run([sys.executable, "-m", "bert_data.tools.create", *args], capture_output=True, text=True,
                              timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (flag, value, done.stderr)
        assert lines[0].startswith("create_tfrecords: error: ") and needle in lines[0], lines[0]


def _limit_open_files(soft: int, hard: int):
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def test_more_shards_than_open_files_is_refused_up_front_or_the_limit_raised(tmp_path, tiny_corpus, tiny_vocab):
    import resource
    import subprocess
    import sys

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.skip(f"hard open-file limit {hard} is too low for this test")
    out = tmp_path / "out"
    args = [sys.executable, "-m", "bert_data.tools.create", *base_args(tiny_corpus, tiny_vocab, out, num_output_files=200)]
    refused = subprocess.run(args, capture_output=True, text=True, timeout=300, preexec_fn=_limit_open_files(100, 100))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "create_tfrecords: error: --num_output_files 200 needs about 268 open files, but this process may open only "
        "100 (ulimit -n, hard limit 100); raise the limit (ulimit -n 268) or write fewer shards"
    ]
    assert not out.exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, preexec_fn=_limit_open_files(100, hard))
    assert done.returncode == 0, done.stderr  # the soft limit is raised as far as needed
    assert len(manifest_of(out)["instances_per_shard"]) == 200


def test_the_open_file_check_guards_library_runs_too(tmp_path, tiny_corpus, tiny_vocab):
    """run_job called from Python (no command line) refuses too many shards for the open-file
    limit up front, instead of failing part way with EMFILE."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from bert_data.presets import build_config\n"
        "from bert_data.errors import ConfigError\n"
        "from bert_data.runners.job import run_job\n"
        f"config = build_config(dict(metadata_files=[{str(tiny_corpus)!r}], input_files_prefix={str(tiny_corpus.parent)!r},"
        f" vocab_file={str(tiny_vocab)!r}, output_dir={str(tmp_path / 'out')!r}, num_output_files=200, num_workers=1))\n"
        "try:\n    run_job(config)\nexcept ConfigError as exc:\n    print(exc)\n    sys.exit(2)\n"
    )
    refused = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             preexec_fn=_limit_open_files(100, 100))
    assert refused.returncode == 2, refused.stderr
    assert "--num_output_files 200 needs about 268 open files" in refused.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--metadata_files", "--validation_metadata_files"])
def test_a_list_flag_given_twice_is_refused_not_replaced(capsys, tmp_path, tiny_corpus, tiny_vocab, flag):
    """helper-15's case L: `--metadata_files a --metadata_files b` read only b (argparse replaces
    the list), exit 0 with less than asked; now one line, exit 2."""
    args = base_args(tiny_corpus, tiny_vocab, tmp_path / "out") + [flag, str(tiny_corpus), flag, str(tiny_corpus)]
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"create_tfrecords: error: {flag} is given twice, and the second would replace the first's list: "
                   f"give every file after one {flag}"]
    assert not (tmp_path / "out").exists()

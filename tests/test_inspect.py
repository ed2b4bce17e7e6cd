"""Tests of ``inspect_tfrecords`` (bert_data.tools.inspect, bert_data.inspection, bert_data.format.checks)
on hand-made records with known content."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest

from bert_data.tools import inspect as insp
from bert_data.tools.create import main as create_main
from bert_data.format.checks import check_records, layout_from_names
from bert_data.format.manifest import ManifestError, ObservedShards, load_manifest, verify_manifest
from bert_data.format import batch_decode
from bert_data.format.example_wire import serialize_examples
from bert_data.format.tfrecord import frame_records
from bert_data.inspection import parallel
from bert_data.inspection.inputs import VocabInfo, resolve_inputs
from bert_data.inspection.file_stats import MAX_REASONS
from bert_data.inspection.stats import inspect_files
from bert_data.format.schema import MLM_ONLY_FEATURES, NSP_FEATURES, UNMASKED_FEATURES

from conftest import base_args, require_wire, write_corpus, write_vocab

ORDER = sorted((f.name, f.dtype) for f in NSP_FEATURES)
MLM_ORDER = sorted((f.name, f.dtype) for f in MLM_ONLY_FEATURES)
UNMASKED_ORDER = sorted((f.name, f.dtype) for f in UNMASKED_FEATURES)
SEQ, PRED = 12, 3
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".", "dog", "ran"]
T = {t: i for i, t in enumerate(TOKENS)}


def ids(*tokens: str) -> List[int]:
    return [T[t] for t in tokens]


def make_record(
    tokens: Sequence[str], n_a: int, predictions: Sequence[tuple], label: int, seq: int = SEQ, pred: int = PRED
) -> Dict[str, np.ndarray]:
    """tokens = the stored ``[CLS] A [SEP] B [SEP]`` (already masked); n_a = len([CLS] A [SEP]);
    predictions = (position, original token)."""
    real = len(tokens)
    rec = {
        "input_ids": np.array(ids(*tokens) + [0] * (seq - real)),
        "input_mask": np.array([1] * real + [0] * (seq - real)),
        "segment_ids": np.array([0] * n_a + [1] * (real - n_a) + [0] * (seq - real)),
        "masked_lm_positions": np.array([p for p, _ in predictions] + [0] * (pred - len(predictions))),
        "masked_lm_ids": np.array([T[o] for _, o in predictions] + [0] * (pred - len(predictions))),
        "masked_lm_weights": np.array([1.0] * len(predictions) + [0.0] * (pred - len(predictions)), np.float32),
        "next_sentence_labels": np.array([label]),
    }
    return rec


# [CLS] the [MASK]{cat} sat [SEP] | the mat{dog} ran .{.} [SEP]  -> [MASK], random, kept; NSP 1
REC1 = make_record(
    ["[CLS]", "the", "[MASK]", "sat", "[SEP]", "the", "mat", "ran", ".", "[SEP]"], 5,
    [(2, "cat"), (6, "dog"), (8, ".")], 1,
)
# [CLS] [MASK]{dog} ran [SEP] | the [UNK] [SEP]  -> one [MASK]; NSP 0
REC2 = make_record(["[CLS]", "[MASK]", "ran", "[SEP]", "the", "[UNK]", "[SEP]"], 4, [(1, "dog")], 0)
BAD_LABEL = dict(REC1, next_sentence_labels=np.array([7]))


def encode(records: Sequence[Dict[str, np.ndarray]], order=ORDER) -> bytes:
    """Frame each record on its own (records may have different shapes)."""
    out = b""
    for rec in records:
        names = [n for n, _ in order]
        batch = {n: np.asarray(rec[n])[None, :] for n in names}
        out += frame_records(serialize_examples(batch, order))
    return out


def write_records(path: Path, records, order=ORDER, gz: bool = False) -> Path:
    data = encode(records, order)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def vocab(tmp_path: Path) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    return path


def write_manifest(directory: Path, per_shard: Dict[str, int], vocab: Optional[Path] = None, **overrides) -> Path:
    manifest = {
        "vocab_file": str(vocab) if vocab else None,
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PRED,
        "compression": "none",
        "n_examples": sum(per_shard.values()),
        "instances_per_shard": per_shard,
    }
    manifest.update(overrides)
    path = directory / "data_params.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def run(capsys, *argv: str):
    code = insp.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stats_json(capsys, tmp_path: Path, *argv) -> tuple:
    out_json = tmp_path / "stats.json"
    code, out, err = run(capsys, *argv, "--stats", "--json", out_json)
    return code, json.loads(out_json.read_text()), out, err


# --------------------------------------------------------------------------------------------
# Printing instances
# --------------------------------------------------------------------------------------------


def test_prints_decoded_instances(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1, REC2])
    code, out, err = run(capsys, f, "--vocab_file", vocab)
    assert code == 0, err
    lines = out.splitlines()
    assert f"{f} record 0: 10/12 tokens, 3 predictions, NSP label 1 = B is a random segment" in lines
    assert "  A: [CLS] the [MASK]{cat} sat [SEP]" in lines
    assert "  B: the mat{dog} ran .{.} [SEP]" in lines
    assert f"{f} record 1: 7/12 tokens, 1 prediction, NSP label 0 = B is the true next segment" in lines
    assert "  A: [CLS] [MASK]{dog} ran [SEP]" in lines
    assert "  B: the [UNK] [SEP]" in lines


def test_n_limits_output_and_vocab_comes_from_manifest(tmp_path, vocab, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    write_records(out_dir / "examples-1.tfrecords", [REC1, REC2])
    write_manifest(out_dir, {"examples-1.tfrecords": 2}, vocab=vocab)
    code, out, _ = run(capsys, out_dir, "-n", "1")
    assert code == 0
    assert "  A: [CLS] the [MASK]{cat} sat [SEP]" in out
    assert "record 1" not in out


def test_print_mode_flags_a_bad_record(tmp_path, vocab, capsys):
    bad = dict(REC1, next_sentence_labels=np.array([7]))
    f = write_records(tmp_path / "a.tfrecords", [bad])
    code, out, _ = run(capsys, f, "--vocab_file", vocab)
    assert code == 1
    assert "NSP label 7 (invalid: must be 0 or 1)" in out
    assert "BAD: next_sentence_labels is not 0 or 1" in out


# --------------------------------------------------------------------------------------------
# --stats
# --------------------------------------------------------------------------------------------


def test_stats_numbers_and_json(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1, REC2, REC1])
    code, report, out, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 0
    assert report["ok"] is True
    assert report["instances"] == 3 and report["valid_instances"] == 3 and report["bad_records"] == 0
    hist = report["real_length"]["histogram"]
    assert len(hist) == SEQ + 1 and hist[10] == 2 and hist[7] == 1 and sum(hist) == 3
    assert report["real_length"]["min"] == 7 and report["real_length"]["max"] == 10
    assert report["real_length"]["mean"] == pytest.approx(9.0)
    mhist = report["masked_per_instance"]["histogram"]
    assert mhist == [0, 1, 0, 2]
    assert report["nsp"] == {"is_next": 1, "random_next": 2, "random_fraction": pytest.approx(2 / 3, abs=1e-6)}
    mc = report["mask_composition"]
    assert (mc["predictions"], mc["mask"], mc["kept"], mc["random"]) == (7, 3, 2, 2)
    assert mc["mask_fraction"] == pytest.approx(3 / 7, abs=1e-6)
    # real non-special tokens by original id: REC1 the cat sat the dog ran . (7), REC2 dog ran the [UNK] (4)
    assert report["unk"] == {"tokens": 18, "unk": 1, "rate": pytest.approx(1 / 18, abs=1e-6)}
    assert report["files"] == [
        {"path": str(f), "records": 3, "bad_records": 0, "compression": "none", "corrupt": None}
    ]
    assert report["lengths"][0]["max_seq_length"] == SEQ
    assert report["lengths"][0]["from"].startswith("first record of")
    assert "instances: 3 (3 valid, 0 bad)" in out
    assert "mask composition over 7 predictions: [MASK] 42.86%, kept 28.57%, random 28.57%" in out
    assert "[UNK] rate: 5.56% (1 of 18 real non-special tokens)" in out
    assert out.rstrip().endswith("OK")


def test_stats_without_vocab_skips_vocab_numbers(tmp_path, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1])
    code, report, out, _ = stats_json(capsys, tmp_path, f)
    assert code == 0
    assert report["mask_composition"] is None and report["unk"] is None
    assert "n/a (no vocabulary" in out


def test_json_to_stdout(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1])
    code, out, _ = run(capsys, f, "--vocab_file", vocab, "--json", "-")
    assert code == 0
    assert json.loads(out)["instances"] == 1


def test_gzip_file(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1, REC2], gz=True)
    assert f.read_bytes()[:2] == b"\x1f\x8b"
    code, report, _, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 0 and report["instances"] == 2
    assert report["files"][0]["compression"] == "gzip"
    code, out, _ = run(capsys, f, "--vocab_file", vocab)
    assert code == 0 and "  B: the mat{dog} ran .{.} [SEP]" in out


def _variant(**changes) -> Dict[str, np.ndarray]:
    rec = {k: v.copy() for k, v in REC1.items()}
    for k, v in changes.items():
        rec[k] = np.asarray(v, dtype=rec[k].dtype)
    return rec


BAD_RECORDS = {
    "input_mask is not a run of 1s followed by 0s": _variant(input_mask=[1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0]),
    "segment_ids is not 0s then 1s within input_mask": _variant(segment_ids=[0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0]),
    "masked_lm_positions is not strictly ascending": _variant(masked_lm_positions=[6, 2, 8], masked_lm_ids=[11, 6, 10]),
    "masked_lm_positions points past the real length": _variant(masked_lm_positions=[2, 6, 11]),
    "masked_lm_weights is not 1.0 exactly on the predictions and 0.0 elsewhere": _variant(
        masked_lm_weights=[1.0, 1.0, 0.5]
    ),
    "next_sentence_labels is not 0 or 1": _variant(next_sentence_labels=[2]),
    "input_ids is not 0 on padding": _variant(input_ids=ids("[CLS]", "the", "[MASK]", "sat", "[SEP]", "the", "mat",
                                                          "ran", ".", "[SEP]", "the", "[PAD]")),
    "input_ids does not start with [CLS]": _variant(input_ids=ids("the", "the", "[MASK]", "sat", "[SEP]", "the", "mat",
                                                                "ran", ".", "[SEP]", "[PAD]", "[PAD]")),
}


def test_schema_violations_are_detected(tmp_path, vocab, capsys, impl):
    f = tmp_path / "bad.tfrecords"
    data = encode([REC1] + list(BAD_RECORDS.values()) + [REC2])
    # structural problems: a missing feature, a wrong dtype, a wrong length, an extra feature
    no_label = [(n, d) for n, d in ORDER if n != "next_sentence_labels"]
    data += encode([REC1], order=no_label)
    data += encode([dict(REC1, masked_lm_weights=np.array([1, 1, 1]))],
                   order=[(n, "int64" if n == "masked_lm_weights" else d) for n, d in ORDER])
    data += encode([dict(REC1, input_ids=REC1["input_ids"][:11])])
    data += encode([dict(REC1, extra=np.array([1]))], order=sorted(ORDER + [("extra", "int64")]))
    f.write_bytes(data)
    code, report, out, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 1
    assert report["ok"] is False
    assert report["instances"] == 2 + len(BAD_RECORDS) + 4
    assert report["valid_instances"] == 2
    assert report["bad_records"] == len(BAD_RECORDS) + 4
    counts = report["bad_reason_counts"]
    for reason in BAD_RECORDS:
        assert counts.get(reason, 0) >= 1, reason
    assert counts["missing feature(s) next_sentence_labels"] == 1
    assert counts["masked_lm_weights is a int64_list, expected a float_list (float32)"] == 1
    assert counts["input_ids has 11 values, expected 12"] == 1
    assert counts["unexpected feature(s) 'extra'"] == 1
    assert len(report["bad_reasons"]) == MAX_REASONS
    assert report["bad_reasons"][0].startswith(f"{f} record 1: input_mask is not a run")
    assert f"BAD RECORDS: {len(BAD_RECORDS) + 4}" in out and out.rstrip().endswith("FAILED")


def test_reports_are_the_same_with_and_without_the_accelerator(tmp_path, tiny_corpus, tiny_vocab, capsys, monkeypatch):
    """A real output with a damaged shard appended: the compiled reader and the numpy reader
    report exactly the same (counts, histograms, reasons, manifest problems)."""
    require_wire()
    out = tmp_path / "tf"
    assert create_main(base_args(tiny_corpus, tiny_vocab, out)) == 0
    shard = sorted(out.glob("*.tfrecords"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # one changed bit in the middle: a CRC fails, the file ends early
    shard.write_bytes(bytes(data) + encode([REC1]))
    capsys.readouterr()
    reports = []
    for wire in (batch_decode._wire, None):
        monkeypatch.setattr(batch_decode, "_wire", wire)
        code, report, _, _ = stats_json(capsys, tmp_path, out, "--num_workers", "1")
        reports.append((code, report))
    assert reports[0][0] == 1 and reports[0][1]["bad_records"] >= 1
    assert reports[0] == reports[1]


def test_check_records_accepts_writer_style_records():
    batch = {k: np.stack([REC1[k], REC2[k]]) for k in REC1}
    vocab = VocabInfo("v", TOKENS, 0, 1, 2, 3, 4)
    assert not any(rows.any() for rows, _ in check_records(batch, vocab))


def test_corrupt_frame_is_a_bad_file(tmp_path, vocab, capsys, impl):
    data = bytearray(encode([REC1, REC2]))
    data[-10] ^= 0xFF  # inside the second record's payload: bad data CRC
    f = tmp_path / "a.tfrecords"
    f.write_bytes(bytes(data))
    code, report, _, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 1
    assert report["instances"] == 1 and report["bad_records"] == 1
    assert "bad data CRC" in report["files"][0]["corrupt"]


# --------------------------------------------------------------------------------------------
# data_params.json
# --------------------------------------------------------------------------------------------


def _out_dir(tmp_path: Path, shards: Dict[str, list]) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    for name, records in shards.items():
        write_records(out / name, records)
    return out


def test_matching_manifest_is_ok(tmp_path, vocab, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1, REC2], "examples-2.tfrecords": [REC2]})
    write_manifest(out, {"examples-1.tfrecords": 2, "examples-2.tfrecords": 1}, vocab=vocab)
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 0, report
    assert report["manifests"][0]["n_examples_checked"] is True
    assert report["vocab_file"] == str(vocab)  # taken from data_params.json
    assert report["lengths"][0]["from"].endswith("data_params.json")


def test_manifest_count_mismatches(tmp_path, vocab, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1, REC2], "examples-2.tfrecords": [REC2]})
    write_manifest(out, {"examples-1.tfrecords": 3, "examples-2.tfrecords": 1}, vocab=vocab, n_examples=5)
    code, report, out_text, _ = stats_json(capsys, tmp_path, out)
    assert code == 1
    assert report["bad_records"] == 0
    problems = "\n".join(report["manifest_problems"])
    assert "instances_per_shard says examples-1.tfrecords holds 3 records, it holds 2" in problems
    assert "n_examples is 5, the 2 shards hold 3 records" in problems
    assert "n_examples is 5 but instances_per_shard sums to 4" in problems
    assert "MISMATCH:" in out_text


def test_manifest_missing_shard_and_partial_inspection(tmp_path, vocab, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1, REC2]})
    write_manifest(out, {"examples-1.tfrecords": 2, "examples-2.tfrecords": 1}, vocab=vocab)
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 1
    assert any("lists examples-2.tfrecords, which is missing" in p for p in report["manifest_problems"])
    # one file given explicitly: the other shard is not required, n_examples is not checked
    code, report, _, _ = stats_json(capsys, tmp_path, out / "examples-1.tfrecords")
    assert code == 0, report
    assert report["manifests"][0]["n_examples_checked"] is False
    assert any("n_examples not checked" in w for w in report["warnings"])


def test_verify_manifest_against_observed_counts(tmp_path):
    write_manifest(tmp_path, {"examples-1.tfrecords": 2, "examples-2.tfrecords": 1}, compression="gzip")
    manifest = load_manifest(str(tmp_path))
    assert manifest is not None and manifest.int_field("n_examples") == 3
    ok = verify_manifest(
        manifest,
        ObservedShards({"examples-1.tfrecords": 2, "examples-2.tfrecords": 1}, layout="nsp", seq_length=SEQ,
                       pred_length=PRED, whole_directory=True),
    )
    assert ok.problems == [] and ok.warnings == [] and ok.report["n_examples_checked"] is True
    bad = verify_manifest(
        manifest,
        ObservedShards({"examples-1.tfrecords": 1}, {"examples-1.tfrecords": "none"}, layout="nsp", seq_length=SEQ + 1,
                       whole_directory=True),
    )
    assert bad.report["n_examples_checked"] is False
    path = str(tmp_path / "data_params.json")
    assert bad.problems == [
        f"{path}: max_seq_length is {SEQ} but the records' input_ids have {SEQ + 1} values",
        f"{path}: instances_per_shard says examples-1.tfrecords holds 2 records, it holds 1",
        f"{path}: lists examples-2.tfrecords, which is missing from {tmp_path}",
        f"{path}: compression is 'gzip' but examples-1.tfrecords is 'none'",
    ]


def test_load_manifest_with_another_reader(tmp_path):
    texts = {str(tmp_path / "data_params.json"): '{"n_examples": 4}'}

    def read_text(path: str) -> str:
        if path not in texts:
            raise FileNotFoundError(path)
        return texts[path]

    assert load_manifest(str(tmp_path), read_text).data == {"n_examples": 4}
    assert load_manifest(str(tmp_path / "elsewhere"), read_text) is None
    assert load_manifest(str(tmp_path)) is None  # the default reads the local file system: nothing there
    texts[str(tmp_path / "data_params.json")] = "[4]"
    with pytest.raises(ManifestError, match="not a JSON object"):
        load_manifest(str(tmp_path), read_text)


def test_manifest_length_mismatch(tmp_path, vocab, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1]})
    write_manifest(out, {"examples-1.tfrecords": 1}, vocab=vocab, max_seq_length=16, compression="gzip")
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 1
    problems = "\n".join(report["manifest_problems"])
    assert "max_seq_length is 16 but the records' input_ids have 12 values" in problems
    assert "compression is 'gzip' but examples-1.tfrecords is 'none'" in problems
    assert report["bad_reason_counts"] == {"input_ids has 12 values, expected 16": 1}


def test_real_create_tfrecords_output(tmp_path, tiny_corpus, tiny_vocab, capsys, impl):
    out = tmp_path / "tf"
    assert create_main(base_args(tiny_corpus, tiny_vocab, out, compression="gzip")) == 0
    manifest = json.loads((out / "data_params.json").read_text())
    capsys.readouterr()
    code, report, _, err = stats_json(capsys, tmp_path, out)
    assert code == 0, (report["bad_reasons"], report["manifest_problems"], err)
    assert report["instances"] == manifest["n_examples"] > 0
    assert {f["compression"] for f in report["files"]} == {"gzip"}
    assert report["manifests"][0]["n_examples_checked"] is True
    mc = report["mask_composition"]
    assert mc["mask"] + mc["kept"] + mc["random"] == mc["predictions"] > 0
    assert report["unk"]["rate"] == pytest.approx(manifest["unk_rate"], abs=1e-9)
    code, text, _ = run(capsys, out, "-n", "2")
    assert code == 0 and text.count("\n  A: [CLS] ") == 2


# --------------------------------------------------------------------------------------------
# Paths and errors
# --------------------------------------------------------------------------------------------


def test_resolve_inputs_globs_and_natural_order(tmp_path):
    for i in (1, 2, 10):
        write_records(tmp_path / f"examples-{i}.tfrecords", [REC1])
    files, dirs = resolve_inputs([str(tmp_path)])
    assert [Path(f.path).name for f in files] == ["examples-1.tfrecords", "examples-2.tfrecords", "examples-10.tfrecords"]
    assert dirs == [str(tmp_path.resolve())]
    files, dirs = resolve_inputs([str(tmp_path / "examples-1*.tfrecords"), str(tmp_path / "examples-1.tfrecords")])
    assert [Path(f.path).name for f in files] == ["examples-1.tfrecords", "examples-10.tfrecords"]
    assert dirs == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{tmp}/nope.tfrecords"], "no such file or directory"),
        (["{tmp}/*.nothing"], "no file matches"),
        (["{tmp}/empty"], "holds no *.tfrecords files"),
        (["{tmp}/unfinished"], "an unfinished run (its work directory .bert_data_work is there"),
        (["{tmp}/a.tfrecords"], "no vocabulary: pass --vocab_file"),
        (["{tmp}/a.tfrecords", "--vocab_file", "{tmp}/missing.txt"], "does not exist"),
        (["{tmp}/a.tfrecords", "--vocab_file", "{vocab}", "-n", "-1"], "-n must be >= 0"),
        (["{tmp}/a.tfrecords", "--stats", "--json", "{tmp}/no/dir/x.json"], "cannot be written"),
    ],
)
def test_cli_errors_exit_2(tmp_path, vocab, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "unfinished" / ".bert_data_work").mkdir(parents=True)  # (a Parquet run's, killed: no shard of ours)
    write_records(tmp_path / "a.tfrecords", [REC1])
    argv = [a.format(tmp=tmp_path, vocab=vocab) for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("inspect_tfrecords: error: ") and message in err
    assert err.count("\n") == 1


def test_a_validation_split_runs_directory_names_its_two_outputs(tmp_path, capsys):
    """The parent of a --validation_fraction run's train/ and validation/ said only that it holds
    no shards; it names the two outputs to inspect (never one pooled report of two datasets)."""
    metadata = write_corpus(tmp_path / "corpus", n_docs=12)
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "split"
    assert create_main(base_args(metadata, vocab, out, validation_fraction=0.3)) == 0
    capsys.readouterr()
    code, _, err = run(capsys, str(out), "--stats")
    assert code == 2 and err.count("\n") == 1, err
    assert err.strip() == (f"inspect_tfrecords: error: {out}: directory holds no *.tfrecords files; it holds the outputs "
                           f"train and validation (the halves of a --validation_fraction run, each its own dataset): "
                           f"inspect {out}/train and {out}/validation")
    assert run(capsys, str(out / "train"), "--stats")[0] == 0


def test_manifest_vocab_missing(tmp_path, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1]})
    write_manifest(out, {"examples-1.tfrecords": 1}, vocab=tmp_path / "gone.txt")
    code, _, err = run(capsys, out)
    assert code == 2 and "gone.txt named in" in err
    code, out_text, err = run(capsys, out, "--stats")  # stats still run, without vocab numbers
    assert code == 0 and "warning" in err


def _matplotlib():
    """matplotlib (the ``plot`` extra): skipped where it is not installed, a failure when CI is
    set (CI installs ``.[test,beam,dask,plot]``, so the plot is tested there)."""
    try:
        import matplotlib
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("matplotlib is not installed (CI is set: the plot extra must be tested)")
        pytest.skip("matplotlib is not installed (pip install 'bert_data[plot]')")
    return matplotlib


def test_plot_without_matplotlib(tmp_path, vocab, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    f = write_records(tmp_path / "a.tfrecords", [REC1])
    code, out, err = run(capsys, f, "--plot", tmp_path / "p.png")
    assert code == 2 and out == ""
    assert err == "inspect_tfrecords: error: --plot needs matplotlib: pip install 'bert_data[plot]'\n"
    assert not (tmp_path / "p.png").exists()


def test_plot_extra_is_declared():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert 'plot = ["matplotlib' in pyproject


def test_plot(tmp_path, vocab, capsys):
    _matplotlib()
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1, REC2], "examples-2.tfrecords": [REC2, BAD_LABEL]})
    png = tmp_path / "p.png"
    code, text, err = run(capsys, out, "--vocab_file", vocab, "--plot", png)
    assert code == 1, err  # the bad record is reported; the plot is drawn all the same
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text.rstrip().endswith("FAILED")
    # unmasked records without a vocabulary: the panels that cannot be drawn say why
    raw = tmp_path / "raw.tfrecords"
    write_records(raw, [RAW1], order=UNMASKED_ORDER)
    code, _, err = run(capsys, raw, "--plot", tmp_path / "raw.png")
    assert code == 0, err
    assert (tmp_path / "raw.png").stat().st_size > 0


def test_plot_panels(tmp_path):
    """The figure holds the panels a reader needs: log-scaled histograms, the label balance,
    the mask composition and the [UNK] rate of each file."""
    matplotlib = _matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bert_data.inspection import report as report_module

    captured = {}
    real_close = plt.close

    def keep(fig):
        captured["fig"] = fig

    files = [write_records(tmp_path / f"examples-{i}.tfrecords", [REC1, REC2]) for i in (1, 2)]
    vocab_info = VocabInfo("v", TOKENS, 0, 1, 2, 3, 4)
    found = inspect_files(resolve_inputs([str(f) for f in files])[0], vocab_info)
    plt.close = keep
    try:
        report_module.write_plot(found.report, str(tmp_path / "p.png"), plt, report_module.shard_rows(found.files))
    finally:
        plt.close = real_close
    axes = captured["fig"].axes
    titles = " | ".join(ax.get_title() for ax in axes)
    for wanted in ("real length", "masked positions", "NSP labels", "mask composition", "[UNK] rate per file", "summary"):
        assert wanted in titles
    assert axes[0].get_yscale() == "log" and axes[1].get_yscale() == "log"
    assert len(axes[4].patches) == 2  # one [UNK] bar per file
    assert report_module.shard_rows(found.files) == [("examples-1.tfrecords", 2, 1, 11), ("examples-2.tfrecords", 2, 1, 11)]
    real_close(captured["fig"])


def test_malformed_example_is_a_bad_record(tmp_path, vocab, capsys):
    f = tmp_path / "a.tfrecords"
    f.write_bytes(encode([REC1]) + frame_records([b"\x0a\x05\x0a\x03abc"]) + encode([REC2]))
    code, report, _, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 1
    assert (report["instances"], report["valid_instances"], report["bad_records"]) == (3, 2, 1)
    assert report["bad_reasons"][0].startswith(f"{f} record 1: malformed tf.train.Example")


def test_warns_when_vocab_differs_from_manifest(tmp_path, vocab, capsys):
    out = _out_dir(tmp_path, {"examples-1.tfrecords": [REC1]})
    write_manifest(out, {"examples-1.tfrecords": 1}, vocab=vocab, vocab_sha256="0" * 64)
    code, text, err = run(capsys, out)
    assert code == 0 and "sha256 differs" in err and "  A: [CLS] the [MASK]{cat} sat [SEP]" in text
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 0 and any("sha256 differs" in w for w in report["warnings"])


# --------------------------------------------------------------------------------------------
# Other record layouts: SOP, MLM-only, unmasked
# --------------------------------------------------------------------------------------------


def make_window(tokens: Sequence[str], predictions: Sequence[tuple] = (), masked: bool = True) -> Dict[str, np.ndarray]:
    """An MLM-only (or, masked=False, unmasked) record: tokens = the stored ``[CLS] window [SEP]``."""
    real = len(tokens)
    rec = {
        "input_ids": np.array(ids(*tokens) + [0] * (SEQ - real)),
        "input_mask": np.array([1] * real + [0] * (SEQ - real)),
    }
    if masked:
        rec.update(
            masked_lm_positions=np.array([p for p, _ in predictions] + [0] * (PRED - len(predictions))),
            masked_lm_ids=np.array([T[o] for _, o in predictions] + [0] * (PRED - len(predictions))),
            masked_lm_weights=np.array([1.0] * len(predictions) + [0.0] * (PRED - len(predictions)), np.float32),
        )
    return rec


# a window spanning two documents: the default document separator [SEP] sits inside it
WIN1 = make_window(["[CLS]", "the", "[MASK]", "sat", ".", "[SEP]", "dog", "mat", "[SEP]"], [(2, "cat"), (7, "ran")])
WIN2 = make_window(["[CLS]", "on", "the", "[MASK]", "[SEP]"], [(3, "mat")])
RAW1 = make_window(["[CLS]", "the", "cat", "sat", "[SEP]", "dog", "[UNK]", "[SEP]"], masked=False)


@pytest.fixture
def corpus(tmp_path: Path):
    return write_corpus(tmp_path / "corpus"), write_vocab(tmp_path / "corpus_vocab.txt")


def _create(tmp_path: Path, corpus, name: str, **extra) -> tuple:
    metadata, vocab = corpus
    out = tmp_path / name
    assert create_main(base_args(metadata, vocab, out, **extra)) == 0
    return out, json.loads((out / "data_params.json").read_text())


def _without_manifest(tmp_path: Path, out: Path) -> Path:
    """The shards alone in a new directory: the layout must come from the feature names."""
    bare = tmp_path / (out.name + "_bare")
    bare.mkdir()
    for shard in out.glob("*.tfrecords"):
        (bare / shard.name).write_bytes(shard.read_bytes())
    return bare


def test_real_mlm_only_output(tmp_path, corpus, capsys):
    out, manifest = _create(tmp_path, corpus, "mlm", mlm_only=True, allow_cross_document_examples=True)
    assert manifest["record_schema"] == "mlm_only" and manifest["windows_spanning_documents"] > 0
    capsys.readouterr()
    code, report, text, err = stats_json(capsys, tmp_path, out)
    assert code == 0, (report["bad_reasons"], report["manifest_problems"], err)
    assert report["bad_records"] == 0 and report["instances"] == manifest["n_examples"] > 0
    assert report["record_schema"] == "mlm_only"
    assert report["lengths"][0]["record_schema_from"].startswith("record_schema in ")
    assert report["nsp"] is None and report["sop"] is None
    assert sum(report["masked_per_instance"]["histogram"]) == report["instances"]
    assert report["masked_per_instance"]["min"] >= 1
    mc = report["mask_composition"]
    assert mc["mask"] + mc["kept"] + mc["random"] == mc["predictions"] > 0
    assert report["unk"]["tokens"] > 0
    assert "next sentence labels" not in text and "record schema: mlm_only" in text
    code, printed, _ = run(capsys, out, "-n", "3")
    assert code == 0
    assert printed.count("\n  tokens: [CLS] ") == 3 and "  A: " not in printed and "NSP label" not in printed
    assert "predictions" in printed and "{" in printed
    # without data_params.json: the layout comes from the first record's feature names
    bare = _without_manifest(tmp_path, out)
    code, report, _, _ = stats_json(capsys, tmp_path, bare, "--vocab_file", corpus[1])
    assert code == 0 and report["bad_records"] == 0 and report["record_schema"] == "mlm_only"
    assert report["lengths"][0]["record_schema_from"].startswith("feature names of the first record")


def test_real_unmasked_output(tmp_path, corpus, capsys):
    out, manifest = _create(tmp_path, corpus, "raw", mlm_only=True, disable_masking=True, unmasked_format="ids")
    assert manifest["record_schema"] == "unmasked"
    capsys.readouterr()
    code, report, text, err = stats_json(capsys, tmp_path, out)
    assert code == 0, (report["bad_reasons"], report["manifest_problems"], err)
    assert report["bad_records"] == 0 and report["instances"] == manifest["n_examples"] > 0
    assert report["record_schema"] == "unmasked"
    assert report["masked_per_instance"] is None and report["mask_composition"] is None
    assert report["nsp"] is None and report["sop"] is None
    assert report["lengths"][0]["max_predictions_per_seq"] is None
    assert sum(report["real_length"]["histogram"]) == report["instances"]
    assert report["real_length"]["max"] <= 32
    assert report["unk"]["tokens"] > 0 and report["unk"]["rate"] is not None
    assert "masked positions per instance" not in text and "[UNK] rate:" in text
    assert "unmasked records: masks are drawn in the reader" in text
    code, printed, _ = run(capsys, out, "-n", "2")
    assert code == 0
    assert printed.count("\n  tokens: [CLS] ") == 2 and "unmasked" in printed
    assert "{" not in printed and "token{original}" not in printed  # no predictions, no legend
    bare = _without_manifest(tmp_path, out)
    code, report, _, _ = stats_json(capsys, tmp_path, bare, "--vocab_file", corpus[1])
    assert code == 0 and report["bad_records"] == 0 and report["record_schema"] == "unmasked"


def test_real_sop_output(tmp_path, corpus, capsys):
    out, manifest = _create(tmp_path, corpus, "sop", sentence_order_prediction=True)
    assert manifest["record_schema"] == "sop"
    capsys.readouterr()
    code, report, text, err = stats_json(capsys, tmp_path, out)
    assert code == 0, (report["bad_reasons"], report["manifest_problems"], err)
    assert report["bad_records"] == 0 and report["instances"] == manifest["n_examples"] > 0
    assert report["record_schema"] == "sop" and report["nsp"] is None
    sop = report["sop"]
    assert sop["in_order"] + sop["swapped"] == report["instances"] and sop["swapped"] > 0 and sop["in_order"] > 0
    assert "swapped fraction" in text and "random fraction" not in text
    code, printed, _ = run(capsys, out, "-n", "6")
    assert code == 0 and printed.count("\n  A: [CLS] ") == 6
    assert "SOP label" in printed and "NSP label" not in printed and "random segment" not in printed
    assert "1 = A and B swapped" in printed or "0 = A and B in document order" in printed
    # SOP and NSP records share features: without the manifest they are checked (fine) as nsp
    bare = _without_manifest(tmp_path, out)
    code, report, _, _ = stats_json(capsys, tmp_path, bare, "--vocab_file", corpus[1])
    assert code == 0 and report["bad_records"] == 0 and report["record_schema"] == "nsp"


def test_hand_made_mlm_only_records(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [WIN1, WIN2], order=MLM_ORDER)
    code, report, _, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 0, report["bad_reasons"]
    assert report["record_schema"] == "mlm_only" and report["valid_instances"] == 2
    assert report["masked_per_instance"]["histogram"] == [0, 1, 1, 0]
    mc = report["mask_composition"]
    assert (mc["predictions"], mc["mask"], mc["kept"], mc["random"]) == (3, 2, 0, 1)
    code, printed, _ = run(capsys, f, "--vocab_file", vocab)
    assert code == 0
    assert f"{f} record 0: 9/12 tokens, 2 predictions" in printed
    assert "  tokens: [CLS] the [MASK]{cat} sat . [SEP] dog mat{ran} [SEP]" in printed


def test_bad_mlm_only_record_is_detected(tmp_path, vocab, capsys):
    masked_sep = make_window(["[CLS]", "the", "cat", "[MASK]"], [(3, "[SEP]")])  # the final [SEP] was masked
    f = write_records(tmp_path / "a.tfrecords", [WIN1, masked_sep, WIN2], order=MLM_ORDER)
    code, report, out, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 1 and report["ok"] is False
    assert (report["instances"], report["valid_instances"], report["bad_records"]) == (3, 2, 1)
    counts = report["bad_reason_counts"]
    assert counts["the last real token is not [SEP]"] == 1
    assert counts["a masked position is a [SEP]"] == 1
    assert report["bad_reasons"][0].startswith(f"{f} record 1: ")
    assert "BAD RECORDS: 1" in out
    code, printed, _ = run(capsys, f, "--vocab_file", vocab)
    assert code == 1 and "  BAD: the last real token is not [SEP]" in printed


def test_mlm_only_checks_follow_the_manifest(tmp_path, vocab, capsys):
    stray_mask = make_window(["[CLS]", "the", "[MASK]", "sat", "[SEP]"], [(1, "the")])  # [MASK] not predicted
    with_seg = dict(WIN2, segment_ids=np.zeros(SEQ, np.int64))
    out = tmp_path / "out"
    out.mkdir()
    data = encode([WIN1, WIN2, stray_mask], order=MLM_ORDER)
    data += encode([with_seg], order=sorted(MLM_ORDER + [("segment_ids", "int64")]))
    (out / "examples-1.tfrecords").write_bytes(data)
    write_manifest(
        out, {"examples-1.tfrecords": 4}, vocab=vocab, record_schema="mlm_only", objective="mlm_only",
        allow_cross_document_examples=False,  # so WIN1's inner [SEP] is wrong here
    )
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 1 and report["manifest_problems"] == []
    assert report["valid_instances"] == 1 and report["bad_records"] == 3
    counts = report["bad_reason_counts"]
    assert counts["[SEP] before the last real token (windows never span documents)"] == 1
    assert counts["[MASK] at a position that is not a prediction"] == 1
    assert counts["unexpected feature(s) 'segment_ids'"] == 1


def test_unmasked_records_and_manifest_mismatches(tmp_path, vocab, capsys):
    with_mask = make_window(["[CLS]", "the", "[MASK]", "[SEP]"], masked=False)
    f = write_records(tmp_path / "a.tfrecords", [RAW1, with_mask], order=UNMASKED_ORDER)
    code, report, _, _ = stats_json(capsys, tmp_path, f, "--vocab_file", vocab)
    assert code == 1 and report["record_schema"] == "unmasked"
    assert report["bad_reason_counts"] == {"input_ids holds [MASK] (unmasked records store no masks)": 1}
    assert report["real_length"]["histogram"][8] == 1
    # the real tokens of RAW1 other than [CLS]/[SEP]: the cat sat dog [UNK]
    assert report["unk"] == {"tokens": 5, "unk": 1, "rate": pytest.approx(0.2, abs=1e-6)}
    # a manifest that names another layout: the records are checked against it, and it is a mismatch
    out = _out_dir(tmp_path, {})
    write_records(out / "examples-1.tfrecords", [RAW1], order=UNMASKED_ORDER)
    write_manifest(out, {"examples-1.tfrecords": 1}, vocab=vocab, record_schema="mlm_only", objective="mlm+nsp")
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 1 and report["record_schema"] == "mlm_only"
    assert report["bad_reason_counts"] == {
        "missing feature(s) masked_lm_ids, masked_lm_positions, masked_lm_weights": 1
    }
    assert any("objective is 'mlm+nsp' but the records are mlm_only records" in p for p in report["manifest_problems"])
    write_manifest(out, {"examples-1.tfrecords": 1}, vocab=vocab, record_schema="bogus")
    code, report, _, _ = stats_json(capsys, tmp_path, out)
    assert code == 1 and report["record_schema"] == "unmasked" and report["bad_records"] == 0
    assert any("record_schema is 'bogus'" in p for p in report["manifest_problems"])


def test_layout_from_names():
    assert layout_from_names([n for n, _ in ORDER]) == "nsp"
    assert layout_from_names([n for n, _ in MLM_ORDER]) == "mlm_only"
    assert layout_from_names(["input_mask", "input_ids"]) == "unmasked"
    # no exact match: the closest layout, so the complaints are the useful ones
    assert layout_from_names(["input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions"]) == "mlm_only"


# --------------------------------------------------------------------------------------------
# Bulk decoding, several processes, progress: the report does not change
# --------------------------------------------------------------------------------------------


def _unpacked(rec: Dict[str, np.ndarray]) -> bytes:
    """A valid tf.train.Example of ``rec`` as an old writer could emit it: int64 values unpacked
    (one varint field each), so the bulk decoder must leave it to parse_example."""
    from bert_data.format.example_wire import varint_bytes as v

    def ld(field: int, payload: bytes) -> bytes:
        return v(field << 3 | 2) + v(len(payload)) + payload

    entries = b""
    for name, dtype in ORDER:
        values = np.asarray(rec[name])
        if dtype == "int64":
            body = ld(3, b"".join(v(1 << 3) + v(int(x)) for x in values))
        else:
            body = ld(2, ld(1, values.astype("<f4").tobytes()))
        entries += ld(1, ld(1, name.encode()) + ld(2, body))
    return ld(1, entries)


def _mixed_shards(directory: Path) -> List[Path]:
    """Shards holding every kind of record: valid, invalid values, wrong structure, another
    valid encoding, malformed bytes, and a corrupt frame at the end of one file."""
    directory.mkdir(exist_ok=True)
    malformed = frame_records([b"\x0a\x05\x0a\x03abc"])
    first = frame_records([_unpacked(REC1)]) + encode([REC1, REC2] + list(BAD_RECORDS.values())) + malformed
    second = encode([dict(REC1, input_ids=REC1["input_ids"][:11]), REC2] * 3) + frame_records([_unpacked(REC2)])
    third = bytearray(encode([REC2, REC1] * 40 + [BAD_LABEL]))
    third[-10] ^= 0xFF  # a bad data CRC in the last record
    paths = []
    for i, data in enumerate((first, second, bytes(third), encode([REC1] * 7)), start=1):
        path = directory / f"examples-{i}.tfrecords"
        path.write_bytes(data)
        paths.append(path)
    return paths


def _report_and_text(capsys, tmp_path: Path, *argv) -> tuple:
    code, report, text, err = stats_json(capsys, tmp_path, *argv)
    return code, report, text


def test_bulk_decoding_gives_the_record_by_record_report(tmp_path, vocab, capsys, monkeypatch):
    """Every record through parse_example (the old path) or in bulk: the same report and text."""
    import bert_data.inspection.file_stats as file_stats

    out = tmp_path / "out"
    _mixed_shards(out)
    listed = {"examples-1.tfrecords": 3, "examples-2.tfrecords": 7, "examples-3.tfrecords": 81, "examples-4.tfrecords": 7}
    write_manifest(out, listed, vocab=vocab)  # a directory is read as its manifest lists it
    bare = tmp_path / "bare"
    _mixed_shards(bare)
    calls = []
    real_parse = file_stats.parse_example
    monkeypatch.setattr(file_stats, "parse_example", lambda data: calls.append(1) or real_parse(data))
    for args in ([out, "--num_workers", "1"], [bare, "--vocab_file", vocab, "--num_workers", "1"]):
        calls.clear()
        fast = _report_and_text(capsys, tmp_path, *args)
        assert len(calls) <= 12  # all but the odd records were decoded in bulk
        with monkeypatch.context() as m:
            m.setattr(file_stats, "decode_examples", lambda data, starts, lengths, features, small_ints=False: (
                {name: np.zeros((0, k), np.int64) for name, _, k in features}, np.zeros(len(starts), bool)))
            slow = _report_and_text(capsys, tmp_path, *args)
        assert fast == slow
        assert fast[1]["bad_records"] > 10 and fast[1]["valid_instances"] > 80


@pytest.mark.parametrize("workers", ["2", "3"])
def test_report_is_the_same_for_any_number_of_workers(tmp_path, vocab, capsys, monkeypatch, workers):
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 0)  # small files: use the workers anyway
    out = tmp_path / "out"
    _mixed_shards(out)
    listed = {"examples-1.tfrecords": 3, "examples-2.tfrecords": 7, "examples-3.tfrecords": 81, "examples-4.tfrecords": 7}
    write_manifest(out, listed, vocab=vocab)
    bare = tmp_path / "bare"  # no manifest: layout and lengths are learnt from the first records
    paths = _mixed_shards(bare)
    paths[0].write_bytes(frame_records([b"\x0a\x05\x0a\x03abc"]) + paths[0].read_bytes())
    # a directory whose first file teaches nothing (only malformed records): read in one process
    dull = tmp_path / "dull"
    _mixed_shards(dull)[0].write_bytes(frame_records([b"\x0a\x05\x0a\x03abc"] * 3))
    for target in (out, bare, dull):
        one = _report_and_text(capsys, tmp_path, target, "--vocab_file", vocab, "--num_workers", "1")
        many = _report_and_text(capsys, tmp_path, target, "--vocab_file", vocab, "--num_workers", workers)
        assert one == many
        assert one[1]["instances"] > 90
    # several directories at once, in one report
    one = _report_and_text(capsys, tmp_path, out, bare, "--vocab_file", vocab, "--num_workers", "1")
    assert one == _report_and_text(capsys, tmp_path, out, bare, "--vocab_file", vocab, "--num_workers", workers)


def test_parallel_read_reports_the_first_unreadable_file(tmp_path, vocab, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 0)
    paths = _mixed_shards(tmp_path / "out")
    unreadable = tmp_path / "out" / "examples-9.tfrecords"
    import socket

    sock = socket.socket(socket.AF_UNIX)  # a socket file exists but cannot be opened, even by root
    sock.bind(str(unreadable))
    argv = [paths[0], unreadable, paths[1], "--stats", "--vocab_file", vocab]
    try:
        for workers in ("1", "2"):
            code, out, err = run(capsys, *argv, "--num_workers", workers)
            assert code == 2 and out == ""  # refused before any file is read: a socket cannot be opened
            assert err == (f"inspect_tfrecords: error: {unreadable} is a socket, not a regular file; give regular "
                           "files (or an output directory)\n")
    finally:
        sock.close()


def test_real_output_with_workers(tmp_path, tiny_corpus, tiny_vocab, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 0)
    out = tmp_path / "tf"
    assert create_main(base_args(tiny_corpus, tiny_vocab, out)) == 0
    capsys.readouterr()
    one = _report_and_text(capsys, tmp_path, out, "--num_workers", "1")
    assert one[0] == 0 and one[1]["bad_records"] == 0
    assert one == _report_and_text(capsys, tmp_path, out, "--num_workers", "3")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(tmp_path, vocab, capsys, monkeypatch):
    f = write_records(tmp_path / "a.tfrecords", [REC1, REC2] * 20)
    code, out, err = run(capsys, f, "--vocab_file", vocab, "--stats")
    assert code == 0 and err == ""  # not a terminal: nothing on stderr
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert insp.main([str(f), "--vocab_file", str(vocab), "--stats"]) == 0
    assert "reading" in terminal.getvalue() and "B/s" in terminal.getvalue()
    quiet = _Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert insp.main([str(f), "--vocab_file", str(vocab), "--stats", "--quiet"]) == 0
    assert quiet.getvalue() == ""
    assert "instances: 40 (40 valid, 0 bad)" in capsys.readouterr().out


def test_progress_bar_with_workers(tmp_path, vocab, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES_PER_WORKER", 0)
    out = tmp_path / "out"
    _mixed_shards(out)
    expected = _report_and_text(capsys, tmp_path, out, "--vocab_file", vocab, "--num_workers", "1")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    got = _report_and_text(capsys, tmp_path, out, "--vocab_file", vocab, "--num_workers", "3")
    assert got == expected
    assert "reading" in terminal.getvalue()


def test_num_workers_must_be_positive(tmp_path, vocab, capsys):
    f = write_records(tmp_path / "a.tfrecords", [REC1])
    with pytest.raises(SystemExit) as exc:
        insp.main([str(f), "--stats", "--num_workers", "0"])
    assert exc.value.code == 2
    assert "--num_workers: must be >= 1" in capsys.readouterr().err


def test_help_says_what_the_numbers_mean(capsys):
    with pytest.raises(SystemExit) as exc:
        insp.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for wanted in ("random fraction", "50-65%", "[MASK] ~80%", "[UNK] rate", "max_predictions_per_seq", "--num_workers"):
        assert wanted in text

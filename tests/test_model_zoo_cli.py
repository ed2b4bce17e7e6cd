"""The Cerebras Model Zoo's own README command lines (TensorFlow BERT, ``transformers/tf/bert``:
"Create TFRecords for 2-phase pre-training") run unchanged with our console scripts, on the
shared corpus laid out as OpenWebText is (one document per file, a metadata file of paths):
documents are counted as the Model Zoo counts them, instance statistics are within the tolerance
of BERT's reference algorithm (``shared/reference``), and the Model Zoo's own feature maps
(``parse_raw_tfrecord``, NSP and MLM-only) parse every record."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from conftest import shared_file
from test_parity import column_stats

# The commands as printed in the Model Zoo's README (phase 1 train, phase 2 train), verbatim but
# for the script name: `python create_tfrecords.py` is our console script `create_tfrecords`.
README_PHASE_1 = (
    "python create_tfrecords.py --metadata_files ../../data_processing/scripts/owt/metadata/train_512k.txt "
    "--input_files_prefix /path/to/raw/data/openwebtext --vocab_file "
    "../input/vocab/google_research_uncased_L-12_H-768_A-12.txt --output_dir train_512k_uncased_msl128 "
    "--do_lower_case --max_seq_length 128 --max_predictions_per_seq 20"
)
README_PHASE_2 = README_PHASE_1.replace("msl128", "msl512").replace(
    "--max_seq_length 128 --max_predictions_per_seq 20", "--max_seq_length 512 --max_predictions_per_seq 80")


def parse_raw_tfrecord_map(max_sequence_length: int, max_predictions_per_seq: int, mlm_only: bool):
    """The Model Zoo's ``parse_raw_tfrecord`` feature map (tf/bert/input/utils.py), written out
    here on purpose: the reference reader's map, not ours."""
    import tensorflow as tf

    feature_map = {
        "input_ids": tf.io.FixedLenFeature([max_sequence_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_sequence_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
    }
    if not mlm_only:
        feature_map["segment_ids"] = tf.io.FixedLenFeature([max_sequence_length], tf.int64)
        feature_map["next_sentence_labels"] = tf.io.FixedLenFeature([], tf.int64)
    return feature_map


def parse_all(out: Path, feature_map) -> Dict[str, np.ndarray]:
    import tensorflow as tf

    files = sorted(str(p) for p in out.glob("*.tfrecords"))
    columns: Dict[str, List[np.ndarray]] = {name: [] for name in feature_map}
    for batch in tf.data.TFRecordDataset(files).batch(4096).map(lambda r: tf.io.parse_example(r, feature_map)):
        for name in feature_map:
            columns[name].append(batch[name].numpy())
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def run_readme_command(command: str, cwd: Path, corpus: Path, documents: List[str], vocab: Path) -> Path:
    """Lay out the files the command names (relative to ``cwd``), then run it as written."""
    metadata = cwd / "../../data_processing/scripts/owt/metadata/train_512k.txt"
    metadata.parent.mkdir(parents=True, exist_ok=True)
    metadata.write_text("\n".join(documents) + "\n")
    (cwd / "../input/vocab").mkdir(parents=True, exist_ok=True)
    (cwd / "../input/vocab/google_research_uncased_L-12_H-768_A-12.txt").write_bytes(vocab.read_bytes())
    args = shlex.split(command.replace("/path/to/raw/data/openwebtext", str(corpus)))
    assert args[:2] == ["python", "create_tfrecords.py"]
    script = Path(sys.executable).parent / "create_tfrecords"  # the installed console script
    done = subprocess.run([str(script), *args[2:], "--quiet"], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return cwd / args[args.index("--output_dir") + 1]


@pytest.fixture
def layout(tmp_path):
    corpus = shared_file("corpus")
    vocab = shared_file("vocab", "bert-base-uncased-vocab.txt")
    cwd = tmp_path / "modelzoo" / "transformers" / "tf" / "bert"  # where the README's relative paths start
    cwd.mkdir(parents=True)
    documents = sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*.txt"))
    return {"corpus": corpus, "vocab": vocab, "cwd": cwd, "documents": documents}


def test_phase_1_readme_command(layout):
    """Phase 1 (MSL 128) on all 2,065 documents: counts, statistics, the Model Zoo's parse map."""
    pytest.importorskip("tensorflow")
    reference = json.loads(shared_file("reference", "reference_stats.json").read_text())["stats"]
    out = run_readme_command(README_PHASE_1, layout["cwd"], layout["corpus"], layout["documents"], layout["vocab"])
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["documents"] == {"read": 2065, "used": 2065, "skipped": {}}
    assert (manifest["dupe_factor"], manifest["num_output_files"], manifest["seed"]) == (10, 10, 0)  # its defaults
    columns = parse_all(out, parse_raw_tfrecord_map(128, 20, mlm_only=False))
    mask_id = [line.rstrip("\n") for line in layout["vocab"].open(encoding="utf-8")].index("[MASK]")
    got = column_stats(columns, 128, mask_id)
    assert got["instances"] == manifest["n_examples"]
    assert got["instances"] / 2065 / 10 == pytest.approx(reference["instances_per_document_per_dupe"], rel=0.05)
    assert got["mean_real_len"] == pytest.approx(reference["mean_real_len"], rel=0.02)
    assert got["mean_masked"] == pytest.approx(reference["mean_masked"], rel=0.02)
    assert got["frac_full_len"] == pytest.approx(reference["frac_full_len"], abs=0.03)
    assert got["nsp_random_frac"] == pytest.approx(reference["nsp_random_frac"], abs=0.02)
    for name in ("mask_frac_MASK", "mask_frac_kept", "mask_frac_random"):
        assert got[name] == pytest.approx(reference[name], abs=0.01), name


def test_phase_2_readme_command_and_mlm_only(layout):
    """Phase 2 (MSL 512, 80 predictions) and create_tfrecords_mlm_only with the Model Zoo's
    defaults, on 60 documents: every record parses with the Model Zoo's maps."""
    pytest.importorskip("tensorflow")
    documents = layout["documents"][:60]
    out = run_readme_command(README_PHASE_2, layout["cwd"], layout["corpus"], documents, layout["vocab"])
    manifest = json.loads((out / "data_params.json").read_text())
    assert manifest["documents"]["read"] == 60 and manifest["max_seq_length"] == 512
    columns = parse_all(out, parse_raw_tfrecord_map(512, 80, mlm_only=False))
    assert len(columns["input_ids"]) == manifest["n_examples"] > 0
    assert columns["input_mask"].sum(axis=1).max() <= 512

    mlm_out = layout["cwd"] / "mlm_only_msl128"
    script = Path(sys.executable).parent / "create_tfrecords_mlm_only"
    metadata = layout["cwd"] / "../../data_processing/scripts/owt/metadata/train_512k.txt"
    done = subprocess.run(
        [str(script), "--metadata_files", str(metadata), "--input_files_prefix", str(layout["corpus"]),
         "--vocab_file", str(layout["vocab"]), "--do_lower_case", "--output_dir", str(mlm_out), "--quiet"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((mlm_out / "data_params.json").read_text())
    assert manifest["objective"] == "mlm_only" and manifest["overlap_size"] == 32
    assert manifest["allow_cross_document_examples"] is False
    columns = parse_all(mlm_out, parse_raw_tfrecord_map(128, 20, mlm_only=True))
    assert len(columns["input_ids"]) == manifest["n_examples"] > 0
    assert "en_core_web_sm" in done.stdout  # the summary says how to segment as the Model Zoo does

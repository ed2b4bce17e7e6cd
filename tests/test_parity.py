"""Statistical parity with BERT's original create_pretraining_data.py on ../shared/corpus.

The reference figures (and their definitions) are in shared/reference/reference_stats.json;
the input was prepared exactly as our default pipeline does it (one document per file,
blank-line paragraphs, spaCy's rule-based sentencizer inside paragraphs).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bert_data.tools.create import main
from bert_data.format.schema import tf_feature_spec

from bert_data.expectations import data_warnings
from conftest import shared_file
from record_stats import column_stats  # (tests/test_google_bert_cli.py and test_model_zoo_cli.py import it from here)


def _stats(output_dir: Path, max_seq_length: int, max_pred: int, mask_id: int) -> dict:
    import tensorflow as tf

    spec = tf_feature_spec(max_seq_length, max_pred)
    files = sorted(str(p) for p in output_dir.glob("*.tfrecords"))
    dataset = tf.data.TFRecordDataset(files).batch(4096).map(lambda r: tf.io.parse_example(r, spec))
    columns = {name: [] for name in spec}
    for batch in dataset:
        for name in spec:
            columns[name].append(batch[name].numpy())
    return column_stats({name: np.concatenate(parts) for name, parts in columns.items()}, max_seq_length, mask_id)


def test_statistics_match_reference_run(tmp_path: Path) -> None:
    reference = json.loads(shared_file("reference", "reference_stats.json").read_text())
    params, expected = reference["params"], reference["stats"]
    corpus = shared_file("corpus")
    vocab = shared_file(*params["vocab"].split("/"))
    documents = sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*.txt"))
    metadata = tmp_path / "metadata.txt"
    metadata.write_text("\n".join(documents) + "\n")
    out = tmp_path / "out"
    code = main(
        [
            "--metadata_files", str(metadata), "--input_files_prefix", str(corpus),
            "--vocab_file", str(vocab), "--do_lower_case" if params["do_lower_case"] else "--no-do_lower_case",
            "--max_seq_length", str(params["max_seq_length"]),
            "--max_predictions_per_seq", str(params["max_predictions_per_seq"]),
            "--masked_lm_prob", str(params["masked_lm_prob"]), "--short_seq_prob", str(params["short_seq_prob"]),
            "--dupe_factor", str(params["dupe_factor"]), "--seed", str(params["random_seed"]),
            "--output_dir", str(out), "--num_workers", "2",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "data_params.json").read_text())
    mask_id = [line.rstrip("\n") for line in vocab.open(encoding="utf-8")].index("[MASK]")
    got = _stats(out, params["max_seq_length"], params["max_predictions_per_seq"], mask_id)
    assert got["instances"] == manifest["n_examples"]
    per_doc_per_dupe = got["instances"] / manifest["n_docs"] / params["dupe_factor"]
    assert manifest["n_docs"] == 2065
    # every pair due a random B got one (the run's negative pool), and the run has nothing to warn about
    assert manifest["nsp_negatives_unavailable"] == manifest["nsp_continuations_kept"] == 0
    assert data_warnings(manifest) == []
    assert per_doc_per_dupe == pytest.approx(expected["instances_per_document_per_dupe"], rel=0.05)
    assert got["mean_real_len"] == pytest.approx(expected["mean_real_len"], rel=0.02)
    assert got["mean_masked"] == pytest.approx(expected["mean_masked"], rel=0.02)
    assert got["frac_full_len"] == pytest.approx(expected["frac_full_len"], abs=0.03)
    assert got["nsp_random_frac"] == pytest.approx(expected["nsp_random_frac"], abs=0.02)
    for name in ("mask_frac_MASK", "mask_frac_kept", "mask_frac_random"):
        assert got[name] == pytest.approx(expected[name], abs=0.01), name

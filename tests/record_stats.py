"""The parity figures of NSP records (the definitions of shared/reference/reference_stats.json),
read without TensorFlow: bert_data's batch decoder, whose answers tests/test_records.py holds
to TensorFlow's parser."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np

from bert_data.format.batch_decode import decode_examples, iter_record_batches
from bert_data.format.schema import NSP_FEATURES, feature_length


def nsp_columns(files: List[Path], max_seq_length: int, max_pred: int) -> Dict[str, np.ndarray]:
    """Every NSP record of ``files``, as ``name -> (n, length)`` arrays."""
    features = [(f.name, f.dtype, feature_length(f, max_seq_length, max_pred)) for f in NSP_FEATURES]
    parts: Dict[str, list] = {name: [] for name, _, _ in features}
    for path in files:
        for batch in iter_record_batches(path):
            arrays, decoded = decode_examples(batch.data, batch.starts, batch.lengths, features)
            assert decoded.all(), f"{path}: a record is not the NSP layout"
            for name in parts:
                parts[name].append(arrays[name])
    return {name: np.concatenate(values) for name, values in parts.items()}


def column_stats(c: Dict[str, np.ndarray], max_seq_length: int, mask_id: int) -> Dict[str, float]:
    """The reference figures (definitions in reference_stats.json) of parsed records, by feature."""
    real = c["input_mask"].sum(axis=1)
    used = c["masked_lm_weights"] > 0
    shown = np.take_along_axis(c["input_ids"], c["masked_lm_positions"], axis=1)[used]
    original = c["masked_lm_ids"][used]
    return {
        "instances": len(real),
        "mean_real_len": float(real.mean()),
        "frac_full_len": float((real == max_seq_length).mean()),
        "mean_masked": float(used.sum(axis=1).mean()),
        "mask_frac_MASK": float((shown == mask_id).mean()),
        "mask_frac_kept": float(((shown == original) & (shown != mask_id)).mean()),
        "mask_frac_random": float(((shown != original) & (shown != mask_id)).mean()),
        "nsp_random_frac": float(c["next_sentence_labels"].mean()),
    }


def output_stats(out: Path, max_seq_length: int, max_pred: int, mask_id: int, dupe_factor: int) -> Dict[str, float]:
    """The parity figures of an output directory, with ``instances_per_pass``."""
    files = sorted(out.glob("*.tfrecords"))
    stats = column_stats(nsp_columns(files, max_seq_length, max_pred), max_seq_length, mask_id)
    stats["instances_per_pass"] = stats["instances"] / dupe_factor
    return stats

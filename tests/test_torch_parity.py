"""bert_data.torch and the tf.data reader read the same records the same way: record by record,
the PyTorch tensors are the TensorFlow decoding of the same files
(:func:`bert_data.reader.dataset.pretraining_dataset` with ``is_training=False``, i.e.
:func:`~bert_data.reader.dataset.decode_record` over the files in order), for NSP, SOP, MLM-only
and gzip: 0 mismatches.

The mapping is the documented one: ``attention_mask`` = ``input_mask``, ``token_type_ids`` =
``segment_ids`` (zeros for MLM-only), ``labels`` = -100 except at the weighted
``masked_lm_positions``, which hold ``masked_lm_ids``, ``next_sentence_label`` =
``next_sentence_labels[0]``. Skipped without torch (except under CI) or TensorFlow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise
    pytest.skip("torch is not installed (pip install 'bert_data[torch]')", allow_module_level=True)

tf = pytest.importorskip("tensorflow")

from conftest import base_args, write_corpus, write_vocab  # noqa: E402

from bert_data.reader.dataset import pretraining_dataset  # noqa: E402
from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.torch import PretrainingDataset  # noqa: E402

SEQ, PRED = 48, 7
RUNS = {
    "nsp": {},
    "sop": {"sentence_order_prediction": True},
    "mlm_only": {"mlm_only": True},
    "nsp_gzip": {"compression": "gzip", "mask_whole_word": True},
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("parity")
    metadata = write_corpus(root / "corpus", n_docs=30)
    vocab = write_vocab(root / "vocab.txt")
    made = {}
    for name, flags in RUNS.items():
        out = root / name
        args = base_args(metadata, vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED, num_output_files=4,
                         quiet=True, **flags)
        assert create_tfrecords(args) == 0
        made[name] = out
    return made


def expected_from_tf(example: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The Hugging Face tensors of one TF-decoded record, by the documented mapping."""
    labels = np.full(SEQ, -100, np.int64)
    used = example["masked_lm_weights"] > 0
    labels[example["masked_lm_positions"][used]] = example["masked_lm_ids"][used]
    out = {
        "input_ids": example["input_ids"].astype(np.int64),
        "attention_mask": example["input_mask"].astype(np.int64),
        "token_type_ids": example.get("segment_ids", np.zeros(SEQ, np.int32)).astype(np.int64),
        "labels": labels,
    }
    if "next_sentence_labels" in example:
        out["next_sentence_label"] = np.int64(example["next_sentence_labels"][0])
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_every_record_is_the_tensorflow_decoding(outputs: Dict[str, Path], name: str) -> None:
    out = outputs[name]
    decoded = pretraining_dataset(str(out), batch_size=1, max_seq_length=SEQ, max_predictions_per_seq=PRED,
                                  is_training=False, drop_remainder=False)
    expected = [expected_from_tf({k: v.numpy()[0] for k, v in batch.items()}) for batch in decoded]
    got = list(PretrainingDataset(out))
    assert len(got) == len(expected) > 50
    mismatches = [
        (i, key) for i, (want, item) in enumerate(zip(expected, got))
        for key in set(want) | set(item)
        if key not in want or key not in item or not np.array_equal(item[key].numpy(), want[key])
    ]
    assert mismatches == []
    assert ("next_sentence_label" in got[0]) == (name != "mlm_only")
    trimmed = [row for batch in PretrainingDataset(out, batch_size=8) for row in _rows(batch)]
    assert len(trimmed) == len(expected)
    for want, item in zip(expected, trimmed):  # trimmed batches: the same tensors up to their width
        width = len(item["input_ids"])
        assert all(np.array_equal(item[k], want[k][:width] if want[k].ndim else want[k]) for k in item)
        assert (want["labels"][width:] == -100).all() and not want["attention_mask"][width:].any()


def _rows(batch):
    n = batch["input_ids"].shape[0]
    return [{k: v[i].numpy() for k, v in batch.items()} for i in range(n)]

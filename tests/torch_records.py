"""Helpers for the bert_data.torch tests: record files written by the test itself, in which
every record says who it is (``input_ids[1]`` = ``TAG + its number``), and ways to read a
dataset as every (rank, worker) would."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_data.format.example_wire import parse_example, serialize_examples
from bert_data.format.schema import SCHEMAS, feature_order
from bert_data.format.tfrecord import frame_records, iter_records

SEQ, PRED = 8, 2
TAG = 1000  # input_ids[1] of record number i is TAG + i
CLS, SEP = 2, 3


def tagged_features(numbers: Sequence[int], layout: str = "nsp") -> Dict[str, np.ndarray]:
    """Features of records ``numbers``: [CLS] TAG+i x.. [SEP], real length 3 + i % 5, one
    prediction at position 1 (weight 1) and a padding slot (position 0, weight 0)."""
    numbers = np.asarray(numbers, np.int64)
    n = len(numbers)
    real = 3 + numbers % 5
    j = np.arange(SEQ)[None, :]
    input_mask = (j < real[:, None]).astype(np.int64)
    input_ids = np.where(input_mask == 1, 50 + j, 0)
    input_ids[:, 0] = CLS
    input_ids[:, 1] = TAG + numbers
    input_ids[np.arange(n), real - 1] = SEP
    features = {"input_ids": input_ids, "input_mask": input_mask}
    if layout != "unmasked":
        features["masked_lm_positions"] = np.tile(np.array([1, 0]), (n, 1))
        features["masked_lm_ids"] = np.stack([TAG + numbers, np.zeros(n, np.int64)], axis=1)
        features["masked_lm_weights"] = np.tile(np.array([1.0, 0.0], np.float32), (n, 1))
    if layout in ("nsp", "sop"):
        features["segment_ids"] = (j >= 2).astype(np.int64) * input_mask
        features["next_sentence_labels"] = (numbers % 2)[:, None]
    return features


def write_tagged(path: Path, numbers: Sequence[int], layout: str = "nsp", compress: bool = False) -> Path:
    order = feature_order(SCHEMAS[layout])
    payloads = serialize_examples(tagged_features(numbers, layout), order) if len(numbers) else []
    data = frame_records(payloads)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def write_tagged_dir(root: Path, counts: Sequence[int], layout: str = "nsp", manifest: bool = True,
                     gzipped: Optional[Sequence[bool]] = None) -> Path:
    """Shards ``examples-1..N.tfrecords`` holding ``counts[k]`` records each, numbered on across
    files, and (with ``manifest``) a ``data_params.json`` listing them."""
    root.mkdir(parents=True, exist_ok=True)
    first = 0
    per_shard = {}
    for k, count in enumerate(counts):
        name = f"examples-{k + 1}.tfrecords"
        write_tagged(root / name, range(first, first + count), layout, bool(gzipped and gzipped[k]))
        per_shard[name] = count
        first += count
    if manifest:
        (root / "data_params.json").write_text(json.dumps({
            "instances_per_shard": per_shard, "n_examples": first, "max_seq_length": SEQ,
            "max_predictions_per_seq": PRED, "record_schema": layout,
        }))
    return root


def numbers_of(batch) -> List[int]:
    """The record numbers of a batch (or a single record) the dataset yielded."""
    ids = batch["input_ids"]
    return [int(v) - TAG for v in (ids[:, 1] if ids.dim() == 2 else ids[1:2])]


def read_as(dataset, monkeypatch, worker: int, workers: int) -> List[dict]:
    """What ``dataset`` yields in DataLoader worker ``worker`` of ``workers`` (no process)."""
    import bert_data.torch.dataset as module

    monkeypatch.setattr(module, "get_worker_info", lambda: SimpleNamespace(id=worker, num_workers=workers))
    try:
        return list(dataset)
    finally:
        monkeypatch.undo()


def read_rows(directory: Path, pattern: str = "*.tfrecords") -> Dict[str, np.ndarray]:
    """Every record of the files of ``directory`` matching ``pattern``, in file order, as stacked arrays."""
    records = [parse_example(raw) for path in sorted(directory.glob(pattern)) for raw in iter_records(str(path))]
    return {name: np.stack([r[name] for r in records]) for name in records[0]}

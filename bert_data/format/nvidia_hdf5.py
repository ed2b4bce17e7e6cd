"""NVIDIA's MLPerf packed HDF5 layout: packed rows (``--packing``) as the files NVIDIA's BERT
PyTorch trainer reads with ``--packed_samples``. Over 600 lines on purpose: one concern, the
layout, whose checks (what it holds exactly), samples (the workers' runs: C dispatch and numpy
reference), file writer and reader must change together.

Source (mlcommons/training_results_v3.1, ``NVIDIA/benchmarks/bert/implementations/pytorch/``):
the files are written by ``input_preprocessing/packed_data/create_packed_trainset.py``
(``create_assignment``) and read by ``run_pretraining.py``'s ``pretraining_dataset``. One HDF5
file per shard, seven one-dimensional datasets of ``n`` samples, each sample a variable-length
array (``h5py.vlen_dtype``), no compression:

============================  ======  ==========================================================
dataset                        dtype   one sample (a row of up to 3 instances, back to back)
============================  ======  ==========================================================
``input_ids``                  int16   the real tokens of every instance, no padding
``segment_ids``                int8    their segment ids
``packed_input_len``           int16   each instance's number of tokens (sums to the above)
``masked_lm_positions``        int16   the row offsets of the predictions, instance after instance
``masked_lm_ids``              int16   their original ids
``packed_masked_lm_len``       int16   each instance's number of predictions
``next_sentence_labels``       int8    each instance's label (1 = B is random; SOP: swapped)
============================  ======  ==========================================================

The reader pads ``input_ids``/``segment_ids`` to ``max_seq_length`` (``input_mask`` 1 on the
real tokens), scatters ``masked_lm_ids`` into a dense ``masked_lm_labels`` at
``masked_lm_positions`` (0 = no prediction: its loss has ``ignore_index=0``), and pads
``next_sentence_labels`` and ``packed_input_len`` to exactly 3 slots, from which its trainer
finds the instances (each ``[CLS]`` at the cumulative offsets).

What the layout cannot hold is an error, never a quietly different file
(:class:`NvidiaLayoutError`, one line): more than 3 instances a row (the reader's fixed 3
slots), token ids or positions past int16 (a vocabulary over 32,768 entries, ``max_seq_length``
over 32,767), a prediction of id 0 (the loss would skip it), MLM-only rows (the layout has NSP
labels and NVIDIA's loss uses them), and rows that would not read back exactly (checked for
every row by :func:`_not_read_back`, whole-batch; a row that fails is named with the invariant of
:func:`bert_data.format.packed.row_checks` it breaks).

:func:`nvidia_samples` is the pure conversion (a batch of rows as the packer yields them ->
the per-sample arrays); :func:`nvidia_hdf5_bytes` makes a whole file with h5py, byte for byte the
same for the same samples (no timestamps: ``track_times=False``; no compression, as NVIDIA's),
and :func:`write_nvidia_hdf5` publishes it atomically at a path or URL. The writer hands HDF5 each
dataset's samples as its own variable-length records over one flat array (:func:`_write_flat`),
not as object arrays that h5py converts one Python object at a time (3x the CPU, the same bytes:
``tests/test_nvidia_hdf5.py`` compares them with h5py's own object-array writes).
``tests/test_nvidia_hdf5.py`` reads the files back with NVIDIA's reading logic.

The workers make the samples (:func:`encode_runs`, the ``hdf5`` container's ``frame_runs``): each
batch's rows of a shard are checked and cut into the seven datasets' flat samples there, and
written as one TFRecord frame (:func:`decode_run` reads it: a header, each dataset's sample
lengths, then its values, the 2-byte datasets first). At publish the shard writer only reads the
frames (CRCs checked) and hands the samples to h5py (``ShardFileWriter.write_partial``): nothing
is decoded from ``tf.train.Example`` records or checked again, and the files are the bytes the
rows gave before (the writer's chunks are counted in samples, whatever the runs).
"""

from __future__ import annotations

import io
import re
import errno
import contextlib
import os
from typing import IO, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import BertDataError, OutputError, RecordFormatError
from ..storage import write_bytes
from .batch_decode import iter_record_batches
from .columns import rows_by_shard
from .native import wire
from .packed import row_checks
from .tfrecord import frame_records, masked_crc32c

__all__ = ["NVIDIA_DATASETS", "NVIDIA_SEQUENCES_PER_SAMPLE", "NvidiaLayoutError", "nvidia_samples",
           "concat_samples", "NvidiaHDF5Writer", "nvidia_hdf5_bytes", "write_nvidia_hdf5", "rows_of_samples",
           "read_feature_batches", "encode_runs", "decode_run", "ShardFileWriter", "unsupported"]

# name -> dtype of each dataset's values, as create_packed_trainset.py creates them (lines 59-65)
NVIDIA_DATASETS: Dict[str, str] = {
    "input_ids": "int16",
    "segment_ids": "int8",
    "packed_input_len": "int16",
    "masked_lm_positions": "int16",
    "masked_lm_ids": "int16",
    "packed_masked_lm_len": "int16",
    "next_sentence_labels": "int8",
}
NVIDIA_SEQUENCES_PER_SAMPLE = 3  # run_pretraining.py pads next_sentence_labels and packed_input_len to 3
CHUNK_ROWS = 1024  # samples per HDF5 chunk, and per write: the writer's memory, counted in samples
# HDF5 shards are rewritten at publish only. Rewritten while the run went on (a chunk at a time,
# tried in 2026-11), a 16-core run with 8 workers was no faster (11.7 -> 12.0 s) and held 165 MB
# more: h5py's writes hold the GIL, which the coordinator's own work then waits for.
_INT16_MAX = np.iinfo(np.int16).max

Samples = Dict[str, np.ndarray]  # dataset name -> (n,) object array of 1-D arrays of its dtype


class NvidiaLayoutError(BertDataError):
    """Packed rows that NVIDIA's HDF5 layout cannot hold as they are (exit 2)."""


def _check_rows(rows: Mapping[str, np.ndarray], counts: "Counts") -> None:
    """Raise :class:`NvidiaLayoutError` for rows the layout cannot hold (the module docstring)."""
    mask = np.asarray(rows["input_mask"])
    depth = int(mask.max(initial=0))
    if depth > NVIDIA_SEQUENCES_PER_SAMPLE:
        raise NvidiaLayoutError(
            f"a row holds {depth} instances, but NVIDIA's reader has {NVIDIA_SEQUENCES_PER_SAMPLE} slots per sample: "
            f"use --max_sequences_per_pack {NVIDIA_SEQUENCES_PER_SAMPLE} (or fewer) with --output_format hdf5"
        )
    if mask.shape[1] > _INT16_MAX:  # (an instance's length is an int16 in packed_input_len)
        raise NvidiaLayoutError(f"--max_seq_length {mask.shape[1]} is past NVIDIA's int16 lengths (at most 32767)")
    real = mask > 0
    ids = np.asarray(rows["input_ids"])
    if (ids[real] > _INT16_MAX).any():
        raise NvidiaLayoutError(
            f"token id {int(ids[real].max())} does not fit NVIDIA's int16 input_ids: the vocabulary (--vocab_file) must "
            "have at most 32768 entries for --output_format hdf5"
        )
    if (ids[real] < -_INT16_MAX - 1).any():
        raise NvidiaLayoutError(f"token id {int(ids[real].min())} does not fit NVIDIA's int16 input_ids (not a row "
                                "bert_data wrote)")
    segments = np.asarray(rows["segment_ids"])[real]
    if ((segments != 0) & (segments != 1)).any():
        raise NvidiaLayoutError("segment_ids other than 0 and 1 in a packed row (not a row bert_data wrote)")
    used = np.asarray(rows["masked_lm_weights"]) > 0
    if (np.asarray(rows["masked_lm_ids"])[used] == 0).any():
        raise NvidiaLayoutError(
            "a masked-LM prediction of token id 0: NVIDIA's loss skips label 0 (ignore_index=0), so it would be lost; "
            "id 0 must be [PAD] in --vocab_file for --output_format hdf5"
        )
    bad = _not_read_back(rows, counts)
    if bad.any():  # not exactly what reads back: name the packed-row invariant it breaks
        for broken, message in row_checks(rows, "nsp_packed"):  # SOP rows: the same features and invariants
            if broken.any():
                raise NvidiaLayoutError(f"packed row {int(np.flatnonzero(broken)[0])}: {message}")
        raise NvidiaLayoutError(f"packed row {int(np.flatnonzero(bad)[0])}: it would not read back exactly from "
                                "NVIDIA's layout (not a row bert_data wrote)")


class Counts(NamedTuple):
    """What NVIDIA's samples keep of packed rows besides the values: per row, its tokens, its
    predictions and its instances, and per instance (3 slots) its tokens and its predictions."""

    tokens: np.ndarray  # (n,)
    predictions: np.ndarray  # (n,)
    depth: np.ndarray  # (n,)
    token_counts: np.ndarray  # (n, 3)
    prediction_counts: np.ndarray  # (n, 3)


def _counts(rows: Mapping[str, np.ndarray]) -> Counts:
    mask, weights = np.asarray(rows["input_mask"]), np.asarray(rows["masked_lm_weights"])
    n, k = len(mask), NVIDIA_SEQUENCES_PER_SAMPLE
    return Counts(
        np.count_nonzero(mask, axis=1), np.count_nonzero(weights, axis=1),
        mask.max(axis=1).astype(np.int64) if n and mask.shape[1] else np.zeros(n, np.int64),
        np.stack([np.count_nonzero(mask == s, axis=1) for s in range(1, k + 1)], axis=1).reshape(n, k),
        np.stack([np.count_nonzero(weights == s, axis=1) for s in range(1, k + 1)], axis=1).reshape(n, k))


def _runs(counts: np.ndarray, width: int) -> Tuple[np.ndarray, np.ndarray]:
    """Instance 1, 2, 3 back to back in runs of ``counts`` (n, 3), then padding: each column's
    instance (0 on padding) and the column its instance starts at, as ``(n, width)`` arrays."""
    col = np.arange(width, dtype=np.int32)[None, :]  # (int32 and int8: a quarter of int64's memory traffic)
    ends = np.cumsum(counts, axis=1).astype(np.int32)
    second, third = col >= ends[:, :1], col >= ends[:, 1:2]
    instance = np.where(col < ends[:, 2:3], second.view(np.int8) + third.view(np.int8) + np.int8(1), np.int8(0))
    start = np.where(third, ends[:, 1:2], np.where(second, ends[:, :1], np.int32(0)))
    return instance, start


def _not_read_back(rows: Mapping[str, np.ndarray], counts: Counts) -> np.ndarray:
    """The rows that NVIDIA's samples of them would not give back exactly (``rows_of_samples``):
    the samples keep each row's values up to its tokens / predictions and the counts per
    instance, so every other feature must be what those imply and every value must fit its dtype."""
    mask, n = np.asarray(rows["input_mask"]), len(rows["input_mask"])
    instance, start = _runs(counts.token_counts, mask.shape[1])
    col = np.arange(mask.shape[1], dtype=np.int32)[None, :]
    bad = (counts.token_counts.sum(axis=1) != counts.tokens) | (counts.depth < 1)
    in_row = np.arange(NVIDIA_SEQUENCES_PER_SAMPLE)[None, :] < counts.depth[:, None]  # the row's instance slots
    bad |= ((counts.token_counts == 0) & in_row).any(axis=1) | ((counts.prediction_counts > 0) & ~in_row).any(axis=1)
    bad |= (instance != mask).any(axis=1)
    padding = instance == 0
    bad |= (np.where(padding, 0, col - start) != np.asarray(rows["positions"])).any(axis=1)
    for name in ("input_ids", "segment_ids"):
        bad |= (padding & (np.asarray(rows[name]) != 0)).any(axis=1)
    weights = np.asarray(rows["masked_lm_weights"])
    slot, _ = _runs(counts.prediction_counts, weights.shape[1])
    bad |= (counts.prediction_counts.sum(axis=1) != counts.predictions) | (slot != weights).any(axis=1)
    for name in ("masked_lm_positions", "masked_lm_ids"):
        values = np.asarray(rows[name])
        bad |= (np.where(slot > 0, 0, values) != 0).any(axis=1) | (values < -_INT16_MAX - 1).any(axis=1)
        bad |= (values > _INT16_MAX).any(axis=1)
    labels = np.asarray(rows["next_sentence_labels"])
    k = labels.shape[1]
    used = np.arange(k)[None, :] < counts.depth[:, None]
    first = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(counts.token_counts, axis=1)[:, :2]], axis=1)
    first = np.pad(first, ((0, 0), (0, max(0, k - NVIDIA_SEQUENCES_PER_SAMPLE))))[:, :k]
    bad |= (counts.depth > k) | (np.where(used, first, 0) != np.asarray(rows["next_sentence_positions"])).any(axis=1)
    bad |= (used.astype(np.float32) != np.asarray(rows["next_sentence_weights"])).any(axis=1)
    bad |= (~np.isin(labels, (0, 1)) | (~used & (labels != 0))).any(axis=1)
    return bad


Flat = Tuple[np.ndarray, np.ndarray]  # one dataset's samples: their values back to back, and each one's length


def _flat(values: np.ndarray, lengths: np.ndarray, dtype: str) -> Flat:
    """Row ``r`` of ``values`` cut to its first ``lengths[r]`` values, every row back to back."""
    lengths = np.asarray(lengths, np.int64)
    return np.asarray(values)[np.arange(values.shape[1])[None, :] < lengths[:, None]].astype(dtype), lengths


def _objects(flat: Flat) -> np.ndarray:
    """Flat samples as an (n,) object array of 1-D arrays (views of the one array: no copies;
    fromiter never stacks equal-length ones into 2-D)."""
    values, lengths = flat
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return np.fromiter((values[a:b] for a, b in zip(bounds[:-1], bounds[1:])), dtype=object, count=len(lengths))


def _flat_samples(rows: Mapping[str, np.ndarray]) -> Dict[str, Flat]:
    """:func:`nvidia_samples`, each dataset's samples flat (what the writer writes)."""
    if "next_sentence_labels" not in rows or "segment_ids" not in rows:
        raise NvidiaLayoutError(unsupported("mlm_only_packed"))
    counts = _counts(rows)
    _check_rows(rows, counts)
    n, k = len(counts.depth), NVIDIA_SEQUENCES_PER_SAMPLE
    labels = np.asarray(rows["next_sentence_labels"])
    padded_labels = np.zeros((n, k), labels.dtype)
    padded_labels[:, :min(k, labels.shape[1])] = labels[:, :k]
    return {
        "input_ids": _flat(rows["input_ids"], counts.tokens, "int16"),
        "segment_ids": _flat(rows["segment_ids"], counts.tokens, "int8"),
        "packed_input_len": _flat(counts.token_counts, counts.depth, "int16"),
        "masked_lm_positions": _flat(rows["masked_lm_positions"], counts.predictions, "int16"),
        "masked_lm_ids": _flat(rows["masked_lm_ids"], counts.predictions, "int16"),
        "packed_masked_lm_len": _flat(counts.prediction_counts, counts.depth, "int16"),
        "next_sentence_labels": _flat(padded_labels, counts.depth, "int8"),
    }


def nvidia_samples(rows: Mapping[str, np.ndarray]) -> Samples:
    """A batch of packed NSP/SOP rows (the features the packer yields, or as read back:
    ``(n, width)`` arrays) -> NVIDIA's per-sample arrays, one sample per row, in row order.
    Raises :class:`NvidiaLayoutError` for rows the layout cannot hold (the module docstring)."""
    return {name: _objects(flat) for name, flat in _flat_samples(rows).items()}


def _flat_of_objects(samples: Samples) -> Dict[str, Flat]:
    """Samples as :func:`nvidia_samples` gives them, flat."""
    out = {}
    for name, dtype in NVIDIA_DATASETS.items():
        parts = [np.asarray(sample, dtype).reshape(-1) for sample in samples[name]]
        out[name] = (np.concatenate(parts) if parts else np.zeros(0, dtype), np.array([len(p) for p in parts], np.int64))
    return out


def _joined(parts: Sequence[Dict[str, Flat]]) -> Dict[str, Flat]:
    """Several batches' flat samples, in order, as one."""
    if len(parts) == 1:
        return dict(parts[0])
    return {name: (np.concatenate([p[name][0] for p in parts]), np.concatenate([p[name][1] for p in parts]))
            for name in NVIDIA_DATASETS}


def _write_flat(dataset, start: int, flat: Flat) -> None:
    """Samples ``start ...`` of a vlen ``dataset`` from flat samples, handed to HDF5 as its own
    variable-length records (``hvl_t``: length, pointer into ``values``) rather than as an object
    array (h5py converts those one Python object at a time: 3x the CPU; the same bytes)."""
    from h5py import h5s, h5t

    values, lengths = flat
    values = np.ascontiguousarray(values)
    n = len(lengths)
    records = np.empty(n, [("len", np.uintp), ("p", np.uintp)])  # hvl_t
    records["len"] = lengths
    offsets = (np.cumsum(lengths) - lengths) * values.itemsize
    records["p"] = np.where(lengths > 0, values.ctypes.data + offsets, 0)
    dataset.resize((start + n,))
    target = dataset.id.get_space()
    target.select_hyperslab((start,), (n,))
    dataset.id.write(h5s.create_simple((n,)), target, records, mtype=h5t.vlen_create(h5t.py_create(values.dtype)))


RUN_MAGIC = b"NVH5"  # the first bytes of a run's payload (encode_runs), then the rows as uint64
_BY_WIDTH = sorted(NVIDIA_DATASETS, key=lambda name: -np.dtype(NVIDIA_DATASETS[name]).itemsize)  # values' order


def encode_runs(features: Mapping[str, np.ndarray], shard_of_row: np.ndarray) -> List[Tuple[int, bytes, int]]:
    """A batch's packed rows (row i for shard ``shard_of_row[i]``) as NVIDIA's samples, one run per
    shard present, in shard order: ``(shard, one TFRecord frame, rows)``. The rows are checked
    and cut here (:func:`_flat_samples` raises :class:`NvidiaLayoutError`), in the workers, once
    for the whole batch (per shard, numpy's per-call cost came to ~20 us a row), then put in
    shard order; the publish only appends the samples (:func:`decode_run`)."""
    shards = rows_by_shard(shard_of_row)
    if not shards:
        return []
    native = wire()
    if native is not None:
        runs = _native_runs(native, features, shards)
        if runs is not None:
            return runs
    flat = _flat_samples(features)
    if len(shards) > 1:
        order = np.concatenate([rows for _, rows in shards])
        flat = {name: _reordered(values, lengths, order) for name, (values, lengths) in flat.items()}
    ends = {name: np.concatenate([[0], np.cumsum(lengths)]) for name, (_, lengths) in flat.items()}
    runs, first = [], 0
    for shard, rows in shards:
        last = first + len(rows)
        part = {name: (values[ends[name][first]:ends[name][last]], lengths[first:last])
                for name, (values, lengths) in flat.items()}
        runs.append((shard, frame_records([_run_payload(part)]), len(rows)))
        first = last
    return runs


NATIVE_FEATURES = ("input_ids", "input_mask", "segment_ids", "positions", "masked_lm_positions", "masked_lm_ids",
                   "masked_lm_weights", "next_sentence_positions", "next_sentence_labels", "next_sentence_weights")


def _native_runs(native, features: Mapping[str, np.ndarray], shards) -> Optional[List[Tuple[int, bytes, int]]]:
    """:func:`encode_runs` by the C accelerator (``nvidia_run``: every check, the same bytes), or
    None where it declines (a row that breaks a check, features of other types or shapes): numpy
    then says why, or makes the runs."""
    arrays = []
    for name in NATIVE_FEATURES:
        values = features.get(name)
        if values is None or np.ndim(values) != 2:
            return None
        values = np.ascontiguousarray(values)
        real = name.endswith("weights")
        if values.dtype not in ((np.float32, np.float64) if real else (np.int32, np.int64)):
            return None
        arrays.append(values)
    n, L = arrays[0].shape
    P, K = arrays[4].shape[1], arrays[8].shape[1]
    if L < 1 or P < 1 or K < 1 or [a.shape for a in arrays] != [(n, L)] * 4 + [(n, P)] * 3 + [(n, K)] * 3:
        return None
    runs = []
    for shard, rows in shards:
        frame = native.nvidia_run(tuple(arrays), L, P, K, np.ascontiguousarray(rows, np.int64))
        if frame is None:
            return None
        runs.append((shard, frame, len(rows)))
    return runs


def _reordered(values: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> Flat:
    """Flat samples taken in ``order`` (row indices)."""
    new_lengths = lengths[order]
    starts = np.cumsum(lengths) - lengths
    new_starts = np.cumsum(new_lengths) - new_lengths
    index = np.repeat(starts[order] - new_starts, new_lengths) + np.arange(int(new_lengths.sum()))
    return values[index], new_lengths


SAMPLE_OVERHEAD_BOUND = 7 * 48  # file bytes a sample takes besides its values, at most: per dataset a vlen
# reference (16) and a global-heap object header (16), aligned to 8 (measured: ~230 a sample in all)
FILE_OVERHEAD_BOUND = 7 * CHUNK_ROWS * 16 + (64 << 10)  # and a file besides its samples: the last chunk's
# references in full (a chunk is allocated whole) and h5py's superblock, B-trees and headers (~22 KB)


def file_size_bound(path: str) -> int:
    """At most how many bytes the HDF5 file made from the assembled shard at ``path`` takes: its
    runs' bytes, :data:`SAMPLE_OVERHEAD_BOUND` a sample and :data:`FILE_OVERHEAD_BOUND`, the
    samples counted from the runs' headers (one small read a frame; counting stops at a frame
    whose length's CRC does not hold: the writer then says the shard is damaged)."""
    size, samples, at = os.path.getsize(path), 0, 0
    with open(path, "rb") as handle:
        while at + 24 <= size:
            handle.seek(at)
            head = handle.read(24)
            if len(head) < 24 or masked_crc32c(head[:8]) != int.from_bytes(head[8:12], "little"):
                break
            length, count = int.from_bytes(head[:8], "little"), int.from_bytes(head[16:24], "little")
            if head[12:16] != RUN_MAGIC or 12 + 28 * count > length or not _lengths_add_up(handle, count, length):
                break  # (not a run, or one whose counts do not add up to its bytes: damaged, as the writer will say)
            samples += count
            at += 16 + length
    return size + samples * SAMPLE_OVERHEAD_BOUND + FILE_OVERHEAD_BOUND


def _lengths_add_up(handle, count: int, length: int) -> bool:
    """Whether a run's sample lengths (the ``28 * count`` bytes after its header, where ``handle``
    is) add up to its payload's ``length``: a damaged count or length is never taken for samples."""
    block = np.frombuffer(handle.read(28 * count), "<u4")
    return len(block) == 7 * count and _run_size(block.reshape(len(NVIDIA_DATASETS), count)) == length


_WIDTHS = np.array([np.dtype(dtype).itemsize for dtype in NVIDIA_DATASETS.values()])


def _run_size(lengths: np.ndarray) -> int:
    """The payload bytes of a run whose samples have ``lengths`` (one row per dataset)."""
    return 12 + 4 * lengths.size + int(lengths.sum(axis=1, dtype=np.int64) @ _WIDTHS)


def _run_payload(flat: Mapping[str, Flat]) -> bytes:
    """``RUN_MAGIC``, the rows (uint64), each dataset's sample lengths (uint32, in
    :data:`NVIDIA_DATASETS` order), then each dataset's values (its dtype, little-endian; the
    2-byte datasets first, so each array starts aligned to its width after the 8-byte header)."""
    n = len(flat["input_ids"][1])
    parts = [RUN_MAGIC, np.array([n], "<u8").tobytes()]
    parts += [np.asarray(flat[name][1], "<u4").tobytes() for name in NVIDIA_DATASETS]
    parts += [np.ascontiguousarray(flat[name][0], np.dtype(NVIDIA_DATASETS[name]).newbyteorder("<")).tobytes()
              for name in _BY_WIDTH]
    return b"".join(parts)


_NAMES = tuple(NVIDIA_DATASETS)
_SAME_LENGTHS = (  # datasets whose samples have the same lengths (rows of a run's lengths block)
    np.array([_NAMES.index(n) for n in ("input_ids", "masked_lm_positions", "packed_input_len", "packed_input_len")]),
    np.array([_NAMES.index(n) for n in ("segment_ids", "masked_lm_ids", "packed_masked_lm_len", "next_sentence_labels")]),
)
_DEPTH = _NAMES.index("packed_input_len")
_LITTLE = {name: np.dtype(NVIDIA_DATASETS[name]).newbyteorder("<") for name in _BY_WIDTH}


def decode_run(payload) -> Dict[str, Flat]:
    """A run's samples (:func:`_run_payload`'s bytes) as each dataset's flat samples; ValueError
    for bytes that are not one: another magic, parts that do not add up to the payload, datasets
    whose lengths disagree (a run's frame is CRC-checked: only a bug makes one). Called once per
    run at publish (~660 runs for 30,000 packed rows), hence whole-block checks."""
    payload = memoryview(payload)
    if len(payload) < 12 or bytes(payload[:4]) != RUN_MAGIC:
        raise ValueError("not a run of NVIDIA samples")
    n = int.from_bytes(payload[4:12], "little")
    if 12 + 4 * len(_NAMES) * n > len(payload):
        raise ValueError("a run of NVIDIA samples cut short")
    block = np.frombuffer(payload, "<u4", len(_NAMES) * n, 12).astype(np.int64).reshape(len(_NAMES), n)
    counts = block.sum(axis=1)
    if 12 + 4 * block.size + int(counts @ _WIDTHS) != len(payload):
        raise ValueError("a run of NVIDIA samples whose parts do not add up to its bytes")
    depth = block[_DEPTH]
    if n and ((block[_SAME_LENGTHS[0]] != block[_SAME_LENGTHS[1]]).any()
              or depth.min() < 1 or depth.max() > NVIDIA_SEQUENCES_PER_SAMPLE):
        raise ValueError("a run of NVIDIA samples whose datasets' lengths disagree")
    offset, out = 12 + 4 * block.size, {}
    for name in _BY_WIDTH:
        dtype, count = _LITTLE[name], int(counts[_NAMES.index(name)])
        values = np.frombuffer(payload, dtype, count, offset)
        out[name] = (values if values.flags.aligned else values.copy(), block[_NAMES.index(name)])
        offset += count * dtype.itemsize
    return {name: out[name] for name in _NAMES}


def concat_samples(parts: Sequence[Samples]) -> Samples:
    """The samples of several batches (:func:`nvidia_samples`), in order: one file's worth."""
    return {name: np.concatenate([part[name] for part in parts]) if parts else np.empty(0, dtype=object)
            for name in NVIDIA_DATASETS}


class NvidiaHDF5Writer:
    """One HDF5 file of NVIDIA's layout, written as samples arrive: each dataset chunked
    (``maxshape=(None,)``, :data:`CHUNK_ROWS` samples a chunk) and grown by exactly
    :data:`CHUNK_ROWS` samples at a time (the last write fewer), so memory is one chunk's samples
    and the bytes depend on the samples only, never on the batches they came in. No timestamps
    (``track_times=False``), no compression (NVIDIA's files have none), the earliest file format.
    ``target``: a local path or a writable, seekable binary file object."""

    def __init__(self, target: Union[str, IO[bytes]]) -> None:
        import h5py

        self.records = 0
        self._pending: List[Dict[str, Flat]] = []
        self._pending_rows = 0
        self._path = target if isinstance(target, str) else None  # (a file reserve() may cut back at close)
        self._reserved = False
        self._file = h5py.File(target, "w", libver="earliest", track_order=False)
        self._datasets = {
            name: self._file.create_dataset(name, (0,), maxshape=(None,), chunks=(CHUNK_ROWS,),
                                            dtype=h5py.vlen_dtype(np.dtype(dtype)), track_times=False)
            for name, dtype in NVIDIA_DATASETS.items()
        }

    def write_samples(self, samples: Samples) -> None:
        """Append samples (:func:`nvidia_samples`); every whole chunk is written."""
        missing = sorted(set(NVIDIA_DATASETS) - set(samples))
        if missing:
            raise ValueError(f"samples without {', '.join(missing)}")
        n = len(samples["input_ids"])
        if any(len(samples[name]) != n for name in NVIDIA_DATASETS):
            raise ValueError("samples whose datasets differ in length")
        self._append(_flat_of_objects(samples))

    def write_flat(self, flat: Dict[str, Flat]) -> None:
        """Append samples already flat and checked (:func:`decode_run`: the workers' runs)."""
        self._append(flat)

    def _append(self, flat: Dict[str, Flat]) -> None:
        n = len(flat["input_ids"][1])
        if n:
            self._pending.append(flat)
            self._pending_rows += n
        while self._pending_rows >= CHUNK_ROWS:
            self._flush(CHUNK_ROWS)

    def _flush(self, rows: int) -> None:
        joined = _joined(self._pending)
        head, rest = {}, {}
        for name, (values, lengths) in joined.items():
            cut = int(lengths[:rows].sum())
            head[name], rest[name] = (values[:cut], lengths[:rows]), (values[cut:], lengths[rows:])
        self._pending = [rest] if len(rest["input_ids"][1]) else []
        self._pending_rows -= rows
        for name, dataset in self._datasets.items():
            _write_flat(dataset, self.records, head[name])
        self.records += rows

    def reserve(self, size: int) -> None:
        """The file's room taken on the disk before anything is written (``posix_fallocate`` of
        ``size`` bytes, a bound on the whole file), its end cut back to HDF5's at :meth:`close`.
        Why: HDF5 that meets a full disk while writing variable-length records can crash the process
        (SIGSEGV in ``H5Dwrite``), not raise; the room checked before writing can be taken by
        another process meanwhile. A file system without ``fallocate`` goes without the reserve."""
        if self._path is None:
            return
        try:
            os.posix_fallocate(self._file.id.get_vfd_handle(), 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise  # (no room: an OSError before a byte of HDF5 is written)
            return
        self._reserved = True

    def close(self) -> int:
        """Write what is pending and close the file; the samples written."""
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._file.close()
        if self._reserved:
            _cut_to_its_end(self._path)
        return self.records

    def abort(self) -> None:
        self._file.close()


def nvidia_hdf5_bytes(samples: Samples) -> bytes:
    """The bytes of one HDF5 file of ``samples`` (:func:`nvidia_samples`, or several batches'
    :func:`concat_samples`), made in memory by :class:`NvidiaHDF5Writer`."""
    buffer = io.BytesIO()
    writer = NvidiaHDF5Writer(buffer)
    writer.write_samples(samples)
    writer.close()
    return buffer.getvalue()


def write_nvidia_hdf5(path: str, samples: Samples) -> None:
    """:func:`nvidia_hdf5_bytes` published whole at ``path`` (a local path or a URL), atomically."""
    write_bytes(path, nvidia_hdf5_bytes(samples))


# --- reading back (what the tests and inspect compare), and the container's shard writer ---------


def rows_of_samples(samples: Samples, max_seq_length: int, row_predictions: int,
                    sequences_per_pack: int) -> Dict[str, np.ndarray]:
    """NVIDIA's samples -> the padded packed rows they were made from (``nsp_packed`` features:
    ``row_predictions`` = P + K masked-LM slots, ``sequences_per_pack`` = K NSP slots): the
    layout is lossless for the rows :func:`nvidia_samples` takes."""
    n, L, slots, k = len(samples["input_ids"]), max_seq_length, row_predictions, sequences_per_pack
    rows = {name: np.zeros((n, L), np.int64) for name in ("input_ids", "input_mask", "segment_ids", "positions")}
    rows.update({name: np.zeros((n, slots), np.int64) for name in ("masked_lm_positions", "masked_lm_ids")})
    rows["masked_lm_weights"] = np.zeros((n, slots), np.float32)
    rows.update({name: np.zeros((n, k), np.int64) for name in ("next_sentence_positions", "next_sentence_labels")})
    rows["next_sentence_weights"] = np.zeros((n, k), np.float32)
    for r in range(n):
        lens = samples["packed_input_len"][r].astype(np.int64)
        d, real = len(lens), int(lens.sum())
        starts = np.cumsum(lens) - lens
        rows["input_ids"][r, :real] = samples["input_ids"][r]
        rows["segment_ids"][r, :real] = samples["segment_ids"][r]
        rows["input_mask"][r, :real] = np.repeat(np.arange(1, d + 1), lens)
        rows["positions"][r, :real] = np.arange(real) - np.repeat(starts, lens)
        predictions = len(samples["masked_lm_positions"][r])
        rows["masked_lm_positions"][r, :predictions] = samples["masked_lm_positions"][r]
        rows["masked_lm_ids"][r, :predictions] = samples["masked_lm_ids"][r]
        rows["masked_lm_weights"][r, :predictions] = np.repeat(np.arange(1, d + 1),
                                                               samples["packed_masked_lm_len"][r].astype(np.int64))
        rows["next_sentence_positions"][r, :d] = starts
        rows["next_sentence_labels"][r, :d] = samples["next_sentence_labels"][r]
        rows["next_sentence_weights"][r, :d] = 1.0
    return rows


def read_feature_batches(path: str, spec) -> Iterator[Dict[str, np.ndarray]]:
    """The rows of an HDF5 shard as the padded arrays the TFRecord decoding of the same rows
    gives (``spec``: the run's :class:`~bert_data.format.columns.ShardSpec`), a chunk at a time."""
    import h5py

    lengths = {name: length for name, _, length in spec.features}
    with h5py.File(path, "r") as handle:
        total = _stored_samples(handle, path)
        for start in range(0, total, CHUNK_ROWS):
            samples = {name: np.asarray(handle[name][start:start + CHUNK_ROWS]) for name in NVIDIA_DATASETS}
            yield rows_of_samples(samples, spec.max_seq_length, lengths["masked_lm_positions"],
                                  lengths["next_sentence_labels"])


def _stored_samples(handle, path: str) -> int:
    """The samples every dataset of an open file holds, checked before any is read: the same
    number in all seven, each stored (a dataset declares its length; the chunks of samples never
    written are not stored and read as empty: a 264 KB file declaring 10^9 samples kept a reader
    busy for hours). RecordFormatError naming the file otherwise."""
    total = len(handle["input_ids"])
    for name in NVIDIA_DATASETS:
        dataset = handle[name]
        if len(dataset) != total:
            raise RecordFormatError(f"{path}: {name} holds {len(dataset)} samples, input_ids {total}: not a file of "
                                    f"NVIDIA's layout as bert_data writes it")
        stored = dataset.id.get_storage_size() // max(1, dataset.id.get_type().get_size())
        if dataset.compression is None and stored < total:
            raise RecordFormatError(f"{path}: {name} declares {total} samples but stores {stored}: the file is damaged "
                                    f"or was not written whole")
    return total


class ShardFileWriter:
    """One shard's HDF5 file in ``directory`` (the ``hdf5`` container's ``open_shard``,
    :mod:`bert_data.format.containers`): the workers' runs of NVIDIA's samples in, h5py's file out."""

    def __init__(self, directory: str, shard_name: str, spec) -> None:
        if spec.layout not in HDF5_LAYOUTS:
            raise NvidiaLayoutError(f"--output_format hdf5: {unsupported(spec.layout)}")
        self.path = os.path.join(directory, shard_name)
        self.name = shard_name
        with _as_os_errors(self.path):
            self._writer = NvidiaHDF5Writer(self.path)

    def write_partial(self, source: str, stopped: Callable[[], bool] = lambda: False) -> None:
        """The assembled shard ``source``: TFRecord frames of the runs the workers encoded
        (:func:`encode_runs`), every CRC checked, their samples handed to h5py in order.
        ``stopped()`` is asked between batches of frames (the run is stopping: give up)."""
        for batch in iter_record_batches(source):
            if stopped():
                raise InterruptedError(self.name)
            data = memoryview(batch.data)
            for index, (start, length) in enumerate(zip(batch.starts.tolist(), batch.lengths.tolist())):
                try:
                    flat = decode_run(data[start:start + length])
                except ValueError as exc:  # (the frame's CRC held: written so, by a bug)
                    raise OutputError(f"{source}: record {batch.first + index}: {exc}; {self.name} was not "
                                      f"written (a bug: please report it)") from None
                with _as_os_errors(self.path):
                    self._writer.write_flat(flat)

    def reserve(self, size: int) -> None:
        """Room for the file taken first (:meth:`NvidiaHDF5Writer.reserve`: a full disk mid-file can
        crash HDF5)."""
        with _as_os_errors(self.path):
            self._writer.reserve(size)

    def close(self) -> List[Tuple[str, int]]:
        with _as_os_errors(self.path):
            return [(self.name, self._writer.close())]

    def abort(self) -> None:
        try:
            with contextlib.suppress(Exception):  # a file whose writes failed fails to close too
                self._writer.abort()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)


_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _cut_to_its_end(path: str) -> None:
    """A closed HDF5 file whose room was reserved beyond its end (:meth:`NvidiaHDF5Writer.reserve`)
    cut back to the end HDF5 recorded: the superblock's end-of-file address (version 0, the one
    ``libver="earliest"`` writes: 8-byte addresses, at byte 40), so its bytes are those of a file
    written without the reserve."""
    with open(path, "rb") as handle:
        head = handle.read(48)
    if len(head) < 48 or head[:8] != _SIGNATURE or head[8] != 0 or head[13] != 8 or int.from_bytes(head[24:32], "little"):
        raise OutputError(f"{path}: not the HDF5 superblock this writer makes; its end is unknown (a bug: please report it)")
    end = int.from_bytes(head[40:48], "little")
    if end > os.path.getsize(path):
        raise OutputError(f"{path}: HDF5 records an end past the file's ({end} bytes; a bug: please report it)")
    os.truncate(path, end)


@contextlib.contextmanager
def _as_os_errors(path: str) -> Iterator[None]:
    """HDF5's write failures as the OSError they are, with the errno HDF5 reports and the file, so
    the output says them in one line like any other: h5py raises RuntimeError, or an OSError whose
    text holds HDF5's whole error record (a full disk at close: "file write failed: time = <a
    ctime(), with its newline>, filename = ..., errno = 28, ...")."""
    try:
        yield
    except (RuntimeError, OSError) as exc:
        text = str(exc)
        if "memory allocation failed" in text:  # (ulimit -v: said as memory, exit 3, as elsewhere)
            raise MemoryError(f"HDF5 could not allocate memory writing {path}") from None
        found = re.search(r"errno = (\d+)", text)
        number = int(found.group(1)) if found else (exc.errno if isinstance(exc, OSError) and exc.errno else 0)
        if number:
            raise OSError(number, os.strerror(number), path) from None
        said = " ".join(text.split())[:160]  # (HDF5's own words, on one line, when it gives no errno)
        raise OSError(errno.EIO, f"HDF5: {said}", path) from None


HDF5_LAYOUTS = ("nsp_packed", "sop_packed")  # NVIDIA's samples are packed rows with NSP (or SOP) labels


def unsupported(layout: str) -> str:
    """Why records of ``layout`` are not written in NVIDIA's layout ("" when they are)."""
    if layout in HDF5_LAYOUTS:
        return ""
    if "mlm_only" in layout:
        return "NVIDIA's packed HDF5 samples have NSP labels, which its loss uses: write NSP or SOP rows (drop --mlm_only)"
    if layout in ("nsp", "sop"):
        return "NVIDIA's packed HDF5 samples are packed rows: add --packing (--max_sequences_per_pack 3 or fewer)"
    return f"{layout} records are not NVIDIA's packed samples (write NSP or SOP rows with --packing)"

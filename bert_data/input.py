"""Reader: TFRecord shards -> ``tf.data.Dataset`` of BERT pretraining feature dicts.

:func:`pretraining_dataset` reproduces google-research/bert ``run_pretraining.py``
``input_fn_builder``:

* training: ``from_tensor_slices(files)`` -> ``repeat()`` -> ``shuffle(len(files))`` ->
  interleave of ``TFRecordDataset`` with ``cycle_length = min(num_cpu_threads, len(files))``
  (non-deterministic order, like ``sloppy=True``, unless a ``seed`` is given) -> ``shuffle(100)``;
* evaluation: the records of every file, file after file, each file in order, read once
  (the original repeats the evaluation data forever, for a fixed number of TPU eval steps;
  here a Keras-style finite pass is returned, call ``.repeat()`` for the original behaviour);
* then parse with the schema of :mod:`bert_data.schema` (the one the writer uses), cast
  every int64 feature to int32, ``batch(batch_size, drop_remainder=True)``, prefetch.

Additions: ``file_pattern`` may be a glob, a comma-separated list of globs (as the original
``--input_file``), a list of globs or an output directory (its ``*.tfrecords``); GZIP files
are detected per file by their magic bytes; per-worker sharding of the *files* (before the
interleave) from a ``tf.distribute.InputContext`` or explicit ``num_shards``/``shard_index``;
and a ``data_params.json`` found beside the files is checked against the requested
``max_seq_length``/``max_predictions_per_seq``, so a mismatch fails at once with a clear
message instead of a parse error deep inside a training step.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import ConfigError, RecordFormatError
from .schema import tf_feature_spec

MANIFEST_NAME = "data_params.json"  # same as bert_data.writer.MANIFEST_NAME (not imported: keep this light)
GZIP_MAGIC = b"\x1f\x8b"
COMPRESSION_CHOICES = ("auto", "gzip", "none")

__all__ = [
    "pretraining_dataset",
    "decode_record",
    "resolve_files",
    "detect_compression",
    "check_manifests",
]

FilePattern = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]


def _natural_key(path: str) -> List[Any]:
    """examples-2 before examples-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def resolve_files(file_pattern: FilePattern) -> List[str]:
    """Every file matched, each pattern's matches in natural order, duplicates removed.

    A directory stands for the ``*.tfrecords`` inside it; a string that is not a directory is
    split on commas. Raises :class:`RecordFormatError` naming the pattern when nothing matches.
    """
    import tensorflow as tf

    if isinstance(file_pattern, (str, os.PathLike)):
        text = os.fspath(file_pattern)
        patterns = [text] if tf.io.gfile.isdir(text) else [p for p in text.split(",") if p.strip()]
    else:
        patterns = [os.fspath(p) for p in file_pattern]
    if not patterns:
        raise RecordFormatError(f"no TFRecord files: empty file pattern {file_pattern!r}")
    files: List[str] = []
    seen = set()
    for pattern in patterns:
        pattern = pattern.strip()
        glob = os.path.join(pattern, "*.tfrecords") if tf.io.gfile.isdir(pattern) else pattern
        matches = [m for m in tf.io.gfile.glob(glob) if not tf.io.gfile.isdir(m)]
        if not matches:
            raise RecordFormatError(f"no TFRecord files match {glob!r}")
        for match in sorted(matches, key=_natural_key):
            if match not in seen:
                seen.add(match)
                files.append(match)
    return files


def detect_compression(path: str) -> str:
    """``"GZIP"`` when the file starts with the gzip magic bytes 1f 8b, else ``""`` (TF's names)."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            head = handle.read(2)
    except (OSError, tf.errors.OpError) as exc:
        raise RecordFormatError(f"cannot read TFRecord file {path} ({exc})") from None
    return "GZIP" if head == GZIP_MAGIC else ""


def _compressions(files: Sequence[str], compression: str) -> List[str]:
    if compression not in COMPRESSION_CHOICES:
        raise ConfigError(f"compression must be one of {', '.join(COMPRESSION_CHOICES)}, got {compression!r}")
    if compression == "auto":
        return [detect_compression(f) for f in files]
    return ["GZIP" if compression == "gzip" else ""] * len(files)


def check_manifests(files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Compare the ``data_params.json`` beside each file's directory with the requested sizes."""
    import tensorflow as tf

    for directory in dict.fromkeys(os.path.dirname(f) for f in files):
        manifest_path = os.path.join(directory, MANIFEST_NAME) if directory else MANIFEST_NAME
        if not tf.io.gfile.exists(manifest_path):
            continue
        try:
            with tf.io.gfile.GFile(manifest_path, "r") as handle:
                manifest = json.loads(handle.read())
        except (OSError, ValueError, tf.errors.OpError) as exc:
            raise RecordFormatError(f"{manifest_path} cannot be read as JSON ({exc})") from None
        if not isinstance(manifest, dict):
            raise RecordFormatError(f"{manifest_path} is not a JSON object")
        for name, wanted in (("max_seq_length", max_seq_length), ("max_predictions_per_seq", max_predictions_per_seq)):
            if name in manifest and manifest[name] != wanted:
                raise RecordFormatError(
                    f"{manifest_path} says the records were written with {name}={manifest[name]}, but the reader "
                    f"was asked for {name}={wanted}; pass {name}={manifest[name]} (or point at other records)"
                )


def decode_record(record_bytes: Any, max_seq_length: int, max_predictions_per_seq: int) -> Dict[str, Any]:
    """One serialized ``tf.train.Example`` -> feature dict, every int64 cast to int32 (as run_pretraining.py)."""
    import tensorflow as tf

    example = tf.io.parse_single_example(record_bytes, tf_feature_spec(max_seq_length, max_predictions_per_seq))
    for name in list(example.keys()):
        tensor = example[name]
        if tensor.dtype == tf.int64:
            tensor = tf.cast(tensor, tf.int32)
        example[name] = tensor
    return example


def _shard_args(
    input_pipeline_context: Any, num_shards: Optional[int], shard_index: Optional[int]
) -> Tuple[int, int]:
    if input_pipeline_context is not None:
        if num_shards is not None or shard_index is not None:
            raise ConfigError("give either input_pipeline_context or num_shards/shard_index, not both")
        num_shards = input_pipeline_context.num_input_pipelines
        shard_index = input_pipeline_context.input_pipeline_id
    if num_shards is None and shard_index is None:
        return 1, 0
    if num_shards is None or shard_index is None:
        raise ConfigError("num_shards and shard_index must be given together")
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ConfigError(f"shard_index {shard_index} must be in [0, num_shards) with num_shards >= 1, got {num_shards}")
    return int(num_shards), int(shard_index)


def pretraining_dataset(
    file_pattern: FilePattern,
    batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    is_training: bool = True,
    num_cpu_threads: int = 4,
    compression: str = "auto",
    input_pipeline_context: Any = None,
    num_shards: Optional[int] = None,
    shard_index: Optional[int] = None,
    shuffle_buffer: int = 100,
    cycle_length: Optional[int] = None,
    seed: Optional[int] = None,
    check_manifest: bool = True,
):
    """A ``tf.data.Dataset`` of ``{feature name: int32/float32 tensor [batch_size, length]}``.

    ``batch_size`` is the batch of *this* pipeline (with ``tf.distribute``, pass the per-replica
    batch, e.g. ``context.get_per_replica_batch_size(global_batch)``). Training data repeats
    forever; evaluation data is one ordered pass. Incomplete final batches are dropped.
    ``seed`` makes the training order reproducible (seeded shuffles, deterministic interleave).

    Raises :class:`RecordFormatError` when no file matches or a ``data_params.json`` beside the
    files disagrees with ``max_seq_length``/``max_predictions_per_seq``, and :class:`ConfigError`
    for bad arguments (including a shard that would get no file).
    """
    import tensorflow as tf

    for name, value in (
        ("batch_size", batch_size),
        ("max_seq_length", max_seq_length),
        ("max_predictions_per_seq", max_predictions_per_seq),
        ("num_cpu_threads", num_cpu_threads),
        ("shuffle_buffer", shuffle_buffer),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    num_shards, shard_index = _shard_args(input_pipeline_context, num_shards, shard_index)

    files = resolve_files(file_pattern)
    if check_manifest:
        check_manifests(files, max_seq_length, max_predictions_per_seq)
    compressions = _compressions(files, compression)
    shard_files = files[shard_index::num_shards]  # what Dataset.shard keeps
    if not shard_files:
        raise ConfigError(
            f"shard {shard_index} of {num_shards} gets no file: only {len(files)} file(s) match {file_pattern!r}; "
            "write at least as many shards (--num_output_files) as input pipelines"
        )

    def read_file(filename, compression_type):
        return tf.data.TFRecordDataset(filename, compression_type=compression_type)

    d = tf.data.Dataset.from_tensor_slices((tf.constant(files), tf.constant(compressions)))
    if num_shards > 1:
        d = d.shard(num_shards, shard_index)
    if is_training:
        d = d.repeat()
        d = d.shuffle(buffer_size=len(shard_files), seed=seed)
        cycle = cycle_length if cycle_length is not None else min(num_cpu_threads, len(shard_files))
        if isinstance(cycle, bool) or not isinstance(cycle, int) or cycle < 1:
            raise ConfigError(f"cycle_length must be a positive integer, got {cycle!r}")
        d = d.interleave(
            read_file,
            cycle_length=cycle,
            num_parallel_calls=cycle,
            deterministic=seed is not None,  # sloppy=is_training, unless reproducibility was asked for
        )
        d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
    else:
        d = d.flat_map(read_file)  # == TFRecordDataset(files): file after file, in order

    def decode(record):
        return decode_record(record, max_seq_length, max_predictions_per_seq)

    d = d.map(decode, num_parallel_calls=num_cpu_threads, deterministic=(not is_training) or seed is not None)
    d = d.batch(batch_size, drop_remainder=True)
    return d.prefetch(tf.data.AUTOTUNE)

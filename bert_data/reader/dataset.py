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

from ..errors import ConfigError, RecordFormatError
from ..format.schema import SCHEMAS, schema_from_names, tf_feature_spec

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


def check_manifests(
    files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int, check_predictions: bool = True
) -> None:
    """Compare the ``data_params.json`` beside each file's directory with the requested sizes
    (``max_predictions_per_seq`` only with ``check_predictions``: unmasked records have none)."""
    for manifest_path, manifest in _manifests(files, strict=True):
        for name, wanted in (("max_seq_length", max_seq_length), ("max_predictions_per_seq", max_predictions_per_seq)):
            if name == "max_predictions_per_seq" and not check_predictions:
                continue
            if name in manifest and manifest[name] != wanted:
                raise RecordFormatError(
                    f"{manifest_path} says the records were written with {name}={manifest[name]}, but the reader "
                    f"was asked for {name}={wanted}; pass {name}={manifest[name]} (or point at other records)"
                )


def decode_record(
    record_bytes: Any, max_seq_length: int, max_predictions_per_seq: int, record_schema: str = "nsp"
) -> Dict[str, Any]:
    """One serialized ``tf.train.Example`` -> feature dict, every int64 cast to int32 (as run_pretraining.py).

    ``record_schema`` names the features to parse (a key of :data:`bert_data.schema.SCHEMAS`)."""
    import tensorflow as tf

    spec = tf_feature_spec(max_seq_length, max_predictions_per_seq, SCHEMAS[record_schema])
    example = tf.io.parse_single_example(record_bytes, spec)
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
    record_schema: Optional[str] = None,
    dynamic_masking: bool = False,
    masked_lm_prob: float = 0.15,
    mask_whole_word: bool = False,
    vocab_size: Optional[int] = None,
    vocab_file: Optional[str] = None,
    mask_id: Optional[int] = None,
    special_ids: Optional[Sequence[int]] = None,
    nsp_compatible: bool = False,
):
    """A ``tf.data.Dataset`` of ``{feature name: int32/float32 tensor [batch_size, length]}``.

    Record layouts (``record_schema``, default: the ``record_schema`` of the ``data_params.json``
    beside the files, else ``"nsp"``): ``"nsp"``/``"sop"`` (the 7 BERT features), ``"mlm_only"``
    (``--mlm_only``: no ``segment_ids``/``next_sentence_labels``) and ``"unmasked"``
    (``--mlm_only --disable_masking``: ``input_ids``/``input_mask`` only).

    ``dynamic_masking=True`` (``"unmasked"`` records only) masks every example in the pipeline,
    before batching, as the writer would (:mod:`bert_data.dynamic_masking`: 80/10/10,
    ``masked_lm_prob``, ``max_predictions_per_seq`` slots, ``mask_whole_word``), adding
    ``masked_lm_positions``/``masked_lm_ids``/``masked_lm_weights``. The vocabulary comes from
    ``vocab_file`` (gives ``vocab_size``, the ``[MASK]`` id, the ``##`` table for whole words and
    the default ``special_ids``: ``[PAD] [CLS] [SEP] [MASK]`` plus the run's
    ``--document_separator_token``) or from ``vocab_size``, ``mask_id`` and ``special_ids``.
    Masks are keyed by (``seed``, example index in this pipeline): with a ``seed`` the same
    examples get the same masks on every run; a training pipeline repeats with new masks
    every epoch. ``nsp_compatible=True`` adds ``segment_ids`` and ``next_sentence_labels``
    (zeros) to MLM-only examples, for models that expect the BERT dict.

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
    manifests = _manifests(files) if check_manifest else []
    record_schema = _resolve_record_schema(record_schema, manifests)
    if check_manifest:
        check_manifests(files, max_seq_length, max_predictions_per_seq, check_predictions=record_schema != "unmasked")
    masker = None
    if dynamic_masking:
        masker = _dynamic_masker(
            record_schema, manifests, max_seq_length, max_predictions_per_seq, masked_lm_prob, mask_whole_word,
            vocab_size, vocab_file, mask_id, special_ids,
        )
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
        return decode_record(record, max_seq_length, max_predictions_per_seq, record_schema)

    deterministic = (not is_training) or seed is not None
    if masker is None:
        d = d.map(decode, num_parallel_calls=num_cpu_threads, deterministic=deterministic)
    else:
        base_seed = _mask_base_seed(seed)

        def decode_and_mask(index, record):
            return masker(decode(record), tf.stack([tf.constant(base_seed, tf.int64), index]))

        d = d.enumerate().map(decode_and_mask, num_parallel_calls=num_cpu_threads, deterministic=deterministic)
    if nsp_compatible and record_schema in ("mlm_only", "unmasked"):
        d = d.map(_add_nsp_zeros(max_seq_length), num_parallel_calls=num_cpu_threads, deterministic=deterministic)
    d = d.batch(batch_size, drop_remainder=True)
    return d.prefetch(tf.data.AUTOTUNE)


# --- record layouts other than NSP, dynamic masking ------------------------------------------


def _manifests(files: Sequence[str], strict: bool = False) -> List[Tuple[str, Dict[str, Any]]]:
    """(path, content) of every ``data_params.json`` beside the files. An unreadable one is
    skipped, or with ``strict`` a :class:`RecordFormatError`."""
    import tensorflow as tf

    found = []
    for directory in dict.fromkeys(os.path.dirname(f) for f in files):
        path = os.path.join(directory, MANIFEST_NAME) if directory else MANIFEST_NAME
        if not tf.io.gfile.exists(path):
            continue
        try:
            with tf.io.gfile.GFile(path, "r") as handle:
                manifest = json.loads(handle.read())
        except (OSError, ValueError, tf.errors.OpError) as exc:
            if strict:
                raise RecordFormatError(f"{path} cannot be read as JSON ({exc})") from None
            continue
        if isinstance(manifest, dict):
            found.append((path, manifest))
        elif strict:
            raise RecordFormatError(f"{path} is not a JSON object")
    return found


def _manifest_schema(manifest: Dict[str, Any]) -> str:
    if manifest.get("record_schema") in SCHEMAS:
        return manifest["record_schema"]
    if isinstance(manifest.get("schema"), dict):
        try:
            return schema_from_names(manifest["schema"].keys())
        except ValueError:
            pass
    return "nsp"


def _resolve_record_schema(record_schema: Optional[str], manifests: List[Tuple[str, Dict[str, Any]]]) -> str:
    if record_schema is not None:
        if record_schema not in SCHEMAS:
            raise ConfigError(f"record_schema must be one of {', '.join(SCHEMAS)}, got {record_schema!r}")
        for path, manifest in manifests:
            found = _manifest_schema(manifest)
            if {found, record_schema} != {"nsp", "sop"} and found != record_schema:
                raise RecordFormatError(
                    f"{path} says the records have the {found!r} layout, but record_schema={record_schema!r} was asked for"
                )
        return record_schema
    found = {_manifest_schema(m) for _, m in manifests}
    if len(found) > 1:
        raise RecordFormatError(
            f"the files mix record layouts {sorted(found)} (see their data_params.json); read them separately"
        )
    return found.pop() if found else "nsp"


def _dynamic_masker(
    record_schema, manifests, max_seq_length, max_predictions_per_seq, masked_lm_prob, mask_whole_word,
    vocab_size, vocab_file, mask_id, special_ids,
):
    from .dynamic_masking import continuation_table, default_special_ids, load_vocab_tokens, make_dynamic_masker

    if record_schema != "unmasked":
        raise ConfigError(
            f"dynamic_masking needs unmasked records (create_tfrecords --mlm_only --disable_masking); these records "
            f"have the {record_schema!r} layout and are already masked"
        )
    is_continuation = None
    if vocab_file is not None:
        tokens = load_vocab_tokens(vocab_file)
        if "[MASK]" not in tokens and mask_id is None:
            raise ConfigError(f"vocab_file {vocab_file} has no [MASK] token; pass mask_id")
        vocab_size = len(tokens) if vocab_size is None else vocab_size
        mask_id = tokens.index("[MASK]") if mask_id is None else mask_id
        if special_ids is None:
            separators = [
                m.get("document_separator_token", "")
                for _, m in manifests
                if m.get("mlm_only") and m.get("allow_cross_document_examples", True)
            ]
            special_ids = default_special_ids(tokens, separators)
        is_continuation = continuation_table(tokens)
    missing = [name for name, value in (("vocab_size", vocab_size), ("mask_id", mask_id), ("special_ids", special_ids)) if value is None]
    if missing:
        raise ConfigError(f"dynamic_masking needs vocab_file, or else {', '.join(missing)}")
    return make_dynamic_masker(
        max_seq_length, max_predictions_per_seq, masked_lm_prob, vocab_size, mask_id, special_ids,
        is_continuation=is_continuation, mask_whole_word=mask_whole_word,
    )


def _mask_base_seed(seed: Optional[int]) -> int:
    """The int64 that keys every mask of a pipeline: from ``seed``, else fresh randomness."""
    import hashlib
    import random

    value = random.SystemRandom().getrandbits(64) if seed is None else seed
    digest = hashlib.blake2b(repr(("dynamic_masking", int(value))).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # non-negative int64


def _add_nsp_zeros(max_seq_length: int):
    import tensorflow as tf

    def add(example):
        example = dict(example)
        example["segment_ids"] = tf.zeros([max_seq_length], tf.int32)
        example["next_sentence_labels"] = tf.zeros([1], tf.int32)
        return example

    return add

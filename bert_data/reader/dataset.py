"""Reader: TFRecord shards -> ``tf.data.Dataset`` of BERT pretraining feature dicts.

:func:`pretraining_dataset` reproduces google-research/bert ``run_pretraining.py``
``input_fn_builder``:

* training: ``from_tensor_slices(files)`` -> ``repeat()`` -> ``shuffle(len(files))`` ->
  interleave of ``TFRecordDataset`` with ``cycle_length = min(num_cpu_threads, len(files))``
  (non-deterministic order, like ``sloppy=True``, unless a ``seed`` is given) -> ``shuffle(100)``;
* evaluation: the records of every file, file after file, each file in order, read once
  (the original repeats the evaluation data forever, for a fixed number of TPU eval steps;
  here a Keras-style finite pass is returned, call ``.repeat()`` for the original behaviour);
* then parse with the schema of :mod:`bert_data.format.schema` (the one the writer uses), cast
  every int64 feature to int32, ``batch(batch_size, drop_remainder=True)`` (``drop_remainder``
  is the original's, always True: static batch shapes for TPU/XLA; ``drop_remainder=False``
  keeps the last, smaller batch, so that an evaluation pass or a record count sees every
  record), prefetch.

Additions: ``file_pattern`` may be a glob, a comma-separated list of globs (as the original
``--input_file``), a list of globs or an output directory (exactly the files its manifest
lists: :mod:`bert_data.reader.files`); GZIP files are detected per file
(:func:`bert_data.format.tfrecord.tfrecord_compression`); per-worker sharding of the *files*
(before the interleave) from a ``tf.distribute.InputContext`` or explicit
``num_shards``/``shard_index``; a ``data_params.json`` found beside the files is checked
against the requested ``max_seq_length``/``max_predictions_per_seq``, so a mismatch fails at
once with a clear message instead of a parse error deep inside a training step; and each file
a manifest lists is checked to hold the records listed when it ends
(:func:`~bert_data.reader.files.count_checked`: a shard cut at a record boundary is an error
naming it, not a silently shorter epoch).

Settings other than the sizes are grouped in two frozen option objects, :class:`ReaderOptions`
(pipeline, sharding, checks) and :class:`~bert_data.reader.dynamic_masking.DynamicMaskingOptions`;
their fields are also accepted as keywords of :func:`pretraining_dataset`, as before they
were grouped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, RecordFormatError, plural
from ..format.manifest import (
    Manifest, manifest_layout, manifest_separator, records_vocabulary, require_records_vocabulary, sequences_per_pack,
)
from ..format.schema import DEFAULT_SEQUENCES_PER_PACK, SCHEMAS, tf_feature_spec
from .dynamic_masking import DynamicMaskingOptions, Masker, masker_from_options
from .files import FilePattern, FileSet, compressions, count_checked, detect_compression, resolve_files, resolve_reads

COMPRESSION_CHOICES = ("auto", "gzip", "none")

__all__ = [
    "ReaderOptions",
    "DynamicMaskingOptions",
    "pretraining_dataset",
    "decode_record",
    "resolve_files",
    "detect_compression",
    "check_manifests",
]

def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ReaderOptions:
    """How :func:`pretraining_dataset` reads: parallelism, compression, sharding, shuffling,
    checks and the output dict (everything but the sizes and dynamic masking).

    Validated on construction (:class:`ConfigError`)."""

    num_cpu_threads: int = 4  # parallel reads (training interleave) and parallel decodes
    compression: str = "auto"  # "auto" (per file), "gzip" or "none"
    input_pipeline_context: Any = None  # a tf.distribute.InputContext: shard the files per worker
    num_shards: Optional[int] = None  # or shard explicitly (both or neither)
    shard_index: Optional[int] = None
    shuffle_buffer: int = 100  # the record shuffle of a training pipeline
    cycle_length: Optional[int] = None  # files read at once in training (default min(num_cpu_threads, files))
    seed: Optional[int] = None  # reproducible training order and dynamic masks
    check_manifest: bool = True  # read a directory's manifest-listed files, check sizes and record counts against it
    record_schema: Optional[str] = None  # a key of SCHEMAS; default: the manifest's, else "nsp"
    nsp_compatible: bool = False  # add zero segment_ids/next_sentence_labels to MLM-only examples
    drop_remainder: bool = True  # as run_pretraining.py: static batch shapes; False keeps a last, smaller batch

    def __post_init__(self) -> None:
        _positive_int("num_cpu_threads", self.num_cpu_threads)
        for name in ("check_manifest", "nsp_compatible", "drop_remainder"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        _positive_int("shuffle_buffer", self.shuffle_buffer)
        if self.cycle_length is not None:
            _positive_int("cycle_length", self.cycle_length)
        if self.compression not in COMPRESSION_CHOICES:
            raise ConfigError(
                f"compression must be one of {', '.join(COMPRESSION_CHOICES)}, got {self.compression!r}"
            )
        if self.record_schema is not None and self.record_schema not in SCHEMAS:
            raise ConfigError(f"record_schema must be one of {', '.join(SCHEMAS)}, got {self.record_schema!r}")


_READER_FIELDS = tuple(f.name for f in dataclasses.fields(ReaderOptions))
_MASKING_FIELDS = tuple(f.name for f in dataclasses.fields(DynamicMaskingOptions))
_MASKING_SWITCH = "dynamic_masking"  # the keyword that turns dynamic masking on (default options)


def _resolve_options(
    options: Optional[ReaderOptions], masking: Optional[DynamicMaskingOptions], overrides: Mapping[str, Any]
) -> Tuple[ReaderOptions, Optional[DynamicMaskingOptions]]:
    """The options objects with the keyword ``overrides`` applied. Dynamic masking is on when
    ``masking`` is given or ``dynamic_masking=True``; masking fields given as keywords while it
    is off are ignored (as they always were)."""
    unknown = sorted(set(overrides) - set(_READER_FIELDS) - set(_MASKING_FIELDS) - {_MASKING_SWITCH})
    if unknown:
        known = ", ".join((*_READER_FIELDS, _MASKING_SWITCH, *_MASKING_FIELDS))
        raise ConfigError(
            f"pretraining_dataset() got an unexpected keyword argument {unknown[0]!r} (known: {known})"
        )
    if options is not None and not isinstance(options, ReaderOptions):
        raise ConfigError(f"options must be a ReaderOptions, got {type(options).__name__}")
    if masking is not None and not isinstance(masking, DynamicMaskingOptions):
        raise ConfigError(f"masking must be a DynamicMaskingOptions, got {type(masking).__name__}")
    options = dataclasses.replace(
        options or ReaderOptions(), **{k: v for k, v in overrides.items() if k in _READER_FIELDS}
    )
    switch = overrides.get(_MASKING_SWITCH)
    if switch is not None and not isinstance(switch, bool):
        raise ConfigError(f"dynamic_masking must be True or False, got {switch!r}")
    if switch is False and masking is not None:
        raise ConfigError("dynamic_masking=False contradicts masking=DynamicMaskingOptions(...); give one of them")
    if masking is None and switch:
        masking = DynamicMaskingOptions()
    if masking is not None:
        masking = dataclasses.replace(masking, **{k: v for k, v in overrides.items() if k in _MASKING_FIELDS})
    return options, masking


# --- data_params.json -----------------------------------------------------------------------


def _load_manifests(files: Sequence[str]) -> List[Manifest]:
    """The manifests describing the files (:func:`~bert_data.reader.files.resolve_reads`), each
    once, in order. Raises :class:`~bert_data.format.manifest.ManifestError` for one that cannot
    be used."""
    return resolve_reads(list(files)).manifests


def _check_manifest_sizes(
    manifests: Sequence[Manifest], max_seq_length: int, max_predictions_per_seq: int, check_predictions: bool
) -> None:
    for manifest in manifests:
        for name, wanted in (("max_seq_length", max_seq_length), ("max_predictions_per_seq", max_predictions_per_seq)):
            if name == "max_predictions_per_seq" and not check_predictions:
                continue
            written = manifest.data.get(name, wanted)
            if written != wanted:
                raise RecordFormatError(
                    f"{manifest.path} says the records were written with {name}={written}, but the reader "
                    f"was asked for {name}={wanted}; pass {name}={written} (or point at other records)"
                )


def check_manifests(
    files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int, check_predictions: bool = True
) -> None:
    """Compare the ``data_params.json`` beside each file's directory with the requested sizes
    (``max_predictions_per_seq`` only with ``check_predictions``: unmasked records have none)."""
    _check_manifest_sizes(_load_manifests(files), max_seq_length, max_predictions_per_seq, check_predictions)


def _sequences_per_pack(manifests: Sequence[Manifest], record_schema: str) -> int:
    """Packed rows: the manifests' ``max_sequences_per_pack`` (one value for every file read)."""
    if not record_schema.endswith("_packed"):
        return DEFAULT_SEQUENCES_PER_PACK
    found = {sequences_per_pack(m.data) for m in manifests} or {DEFAULT_SEQUENCES_PER_PACK}
    if len(found) > 1:
        raise RecordFormatError(f"the files mix max_sequences_per_pack {sorted(found)}; read them separately")
    return found.pop()


def _manifest_record_schema(manifest: Manifest) -> str:
    """The layout a manifest names (:func:`~bert_data.format.manifest.manifest_layout`); ``nsp``
    when it says nothing usable, as manifests of older runs wrote only NSP records."""
    return manifest_layout(manifest)[0] or "nsp"


def _resolve_record_schema(record_schema: Optional[str], manifests: Sequence[Manifest]) -> str:
    if record_schema is not None:
        for manifest in manifests:
            found = _manifest_record_schema(manifest)
            if {found, record_schema} != {"nsp", "sop"} and found != record_schema:
                raise RecordFormatError(
                    f"{manifest.path} says the records have the {found!r} layout, but record_schema={record_schema!r} "
                    "was asked for"
                )
        return record_schema
    found = {_manifest_record_schema(m) for m in manifests}
    if len(found) > 1:
        raise RecordFormatError(
            f"the files mix record layouts {sorted(found)} (see their data_params.json); read them separately"
        )
    return found.pop() if found else "nsp"


# --- the pipeline ---------------------------------------------------------------------------


def decode_record(
    record_bytes: Any, max_seq_length: int, max_predictions_per_seq: int, record_schema: str = "nsp",
    max_sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK,
) -> Dict[str, Any]:
    """One serialized ``tf.train.Example`` -> feature dict, every int64 cast to int32 (as run_pretraining.py).

    ``record_schema`` names the features to parse (a key of :data:`bert_data.format.schema.SCHEMAS`);
    packed rows (``*_packed``) have ``max_predictions_per_seq + max_sequences_per_pack`` prediction
    slots and ``max_sequences_per_pack`` NSP slots."""
    import tensorflow as tf

    spec = tf_feature_spec(max_seq_length, max_predictions_per_seq, SCHEMAS[record_schema], max_sequences_per_pack)
    example = tf.io.parse_single_example(record_bytes, spec)
    for name in list(example.keys()):
        tensor = example[name]
        if tensor.dtype == tf.int64:
            tensor = tf.cast(tensor, tf.int32)
        example[name] = tensor
    return example


def _shard_args(options: ReaderOptions) -> Tuple[int, int]:
    num_shards, shard_index = options.num_shards, options.shard_index
    context = options.input_pipeline_context
    if context is not None:
        if num_shards is not None or shard_index is not None:
            raise ConfigError("give either input_pipeline_context or num_shards/shard_index, not both")
        num_shards = context.num_input_pipelines
        shard_index = context.input_pipeline_id
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
    *,
    options: Optional[ReaderOptions] = None,
    masking: Optional[DynamicMaskingOptions] = None,
    **overrides: Any,
):
    """A ``tf.data.Dataset`` of ``{feature name: int32/float32 tensor [batch_size, length]}``.

    ``options`` (:class:`ReaderOptions`) says how to read, ``masking``
    (:class:`~bert_data.reader.dynamic_masking.DynamicMaskingOptions`) turns dynamic masking on.
    Every field of either is also accepted as a keyword (``num_shards=2``, ``seed=0``,
    ``vocab_file=...``), overriding the object's; ``dynamic_masking=True`` turns masking on with
    default options. An unknown keyword is a :class:`ConfigError` naming it.

    Record layouts (``record_schema``, default: the layout the ``data_params.json`` beside the
    files names, else ``"nsp"``): ``"nsp"``/``"sop"`` (the 7 BERT features), ``"mlm_only"``
    (``--mlm_only``: no ``segment_ids``/``next_sentence_labels``) and ``"unmasked"``
    (``--mlm_only --disable_masking``: ``input_ids``/``input_mask`` only); with ``--packing``,
    ``"nsp_packed"``/``"sop_packed"``/``"mlm_only_packed"``: Habana's MLPerf packed rows, whose
    ``input_mask`` is each token's instance (1..k, 0 on padding) and ``positions`` its position in
    its instance; build the block-diagonal attention mask with
    :func:`bert_data.reader.packed_attention_mask` and pass ``positions`` as the position ids
    (docs/packing.md).

    Dynamic masking (``"unmasked"`` records only) masks every example in the pipeline, before
    batching, as the writer would (:mod:`bert_data.reader.dynamic_masking`: 80/10/10,
    ``masked_lm_prob``, ``max_predictions_per_seq`` slots, ``mask_whole_word``), adding
    ``masked_lm_positions``/``masked_lm_ids``/``masked_lm_weights``. The vocabulary comes from
    ``vocab_file`` (read by the writer's :func:`bert_data.tokenization.load_vocab`; gives
    ``vocab_size``, the ``[MASK]`` id, the ``##`` table for whole words and the default
    ``special_ids``: ``[PAD] [CLS] [SEP] [MASK]`` plus the run's ``--document_separator_token``)
    or from ``vocab_size``, ``mask_id`` and ``special_ids``. Masks are keyed by (``seed``,
    example index in this pipeline): with a ``seed`` the same examples get the same masks on
    every run; a training pipeline repeats with new masks every epoch. ``nsp_compatible=True``
    adds ``segment_ids`` and ``next_sentence_labels`` (zeros) to MLM-only examples, for models
    that expect the BERT dict.

    ``batch_size`` is the batch of *this* pipeline (with ``tf.distribute``, pass the per-replica
    batch, e.g. ``context.get_per_replica_batch_size(global_batch)``). Training data repeats
    forever; evaluation data is one ordered pass. An incomplete final batch is dropped, as
    run_pretraining.py's ``input_fn`` does (``drop_remainder=True``: every batch has the static
    shape TPU/XLA needs); ``drop_remainder=False`` keeps it, so that an evaluation pass or a
    record count sees every record (the batch dimension is then ``None``).
    ``seed`` makes the training order reproducible (seeded shuffles, deterministic interleave).

    An output directory is read as its manifest describes it: exactly the files listed there
    (a warning names other files named like shards, which are not read), each checked to hold
    the records listed when it ends (else the iterator raises ``InvalidArgumentError`` naming
    the file and both counts); ``check_manifest=False`` reads every ``*.tfrecords`` of it and
    checks nothing against the manifest.

    Raises :class:`RecordFormatError` when no file matches, a listed file is missing, a local
    file is not a regular file (a FIFO would block) or a ``data_params.json`` beside the files
    disagrees with ``max_seq_length``/``max_predictions_per_seq``, and :class:`ConfigError` for
    bad arguments (including a shard that would get no file).
    """
    import tensorflow as tf

    options, masking = _resolve_options(options, masking, overrides)
    for name, value in (
        ("batch_size", batch_size),
        ("max_seq_length", max_seq_length),
        ("max_predictions_per_seq", max_predictions_per_seq),
    ):
        _positive_int(name, value)
    num_shards, shard_index = _shard_args(options)

    found = resolve_reads(file_pattern, use_manifest=options.check_manifest)
    files, manifests = found.files, found.manifests
    record_schema = _resolve_record_schema(options.record_schema, manifests)
    records_vocabulary(manifests)  # (one vocabulary, or an error naming them)
    _check_manifest_sizes(manifests, max_seq_length, max_predictions_per_seq, record_schema != "unmasked")
    masker = None
    if masking is not None:
        masker = _dynamic_masker(record_schema, manifests, max_seq_length, max_predictions_per_seq, masking)
    if not files[shard_index::num_shards]:  # what Dataset.shard keeps
        raise ConfigError(
            f"shard {shard_index} of {num_shards} gets no file: only {plural(len(files), 'file')} match {file_pattern!r}; "
            "write at least as many shards (--num_output_files) as input pipelines"
        )

    pack = _sequences_per_pack(manifests, record_schema)

    def decode(record):
        return decode_record(record, max_seq_length, max_predictions_per_seq, record_schema, pack)

    deterministic = (not is_training) or options.seed is not None
    d = _records(found, compressions(files, options.compression), options, is_training, (num_shards, shard_index))
    d = _examples(d, decode, masker, options, deterministic)
    if options.nsp_compatible and record_schema in ("mlm_only", "unmasked"):
        add_zeros = _add_nsp_zeros(max_seq_length)
        d = d.map(add_zeros, num_parallel_calls=options.num_cpu_threads, deterministic=deterministic)
    d = d.batch(batch_size, drop_remainder=options.drop_remainder)
    return d.prefetch(tf.data.AUTOTUNE)


def _records(
    found: FileSet, compression_types: Sequence[str], options: ReaderOptions, is_training: bool,
    shard: Tuple[int, int],
):
    """The serialized records of this shard's files: shuffled, repeated and interleaved in
    training (as run_pretraining.py), file after file in order otherwise. Each file listed in a
    manifest is checked to hold the records it lists when it ends (:func:`count_checked`)."""
    import tensorflow as tf

    num_shards, shard_index = shard
    files = found.files
    n_files = len(files[shard_index::num_shards])
    checked = any(count >= 0 for count in found.expected)

    def read_file(filename, compression_type, expected, listed_in):
        records = tf.data.TFRecordDataset(filename, compression_type=compression_type)
        return count_checked(records, filename, expected, listed_in) if checked else records

    d = tf.data.Dataset.from_tensor_slices((
        tf.constant(list(files)), tf.constant(list(compression_types)),
        tf.constant(found.expected, tf.int64), tf.constant(found.listed_in),
    ))
    if num_shards > 1:
        d = d.shard(num_shards, shard_index)
    if not is_training:
        return d.flat_map(read_file)  # == TFRecordDataset(files): file after file, in order
    d = d.repeat()
    d = d.shuffle(buffer_size=n_files, seed=options.seed)
    cycle = options.cycle_length if options.cycle_length is not None else min(options.num_cpu_threads, n_files)
    d = d.interleave(
        read_file,
        cycle_length=cycle,
        num_parallel_calls=cycle,
        deterministic=options.seed is not None,  # sloppy=is_training, unless reproducibility was asked for
    )
    return d.shuffle(buffer_size=options.shuffle_buffer, seed=options.seed)


def _examples(d, decode, masker: Optional[Masker], options: ReaderOptions, deterministic: bool):
    """Records -> feature dicts, masked by ``masker`` (keyed by the example's index) when given."""
    import tensorflow as tf

    if masker is None:
        return d.map(decode, num_parallel_calls=options.num_cpu_threads, deterministic=deterministic)
    base_seed = _mask_base_seed(options.seed)

    def decode_and_mask(index, record):
        return masker(decode(record), tf.stack([tf.constant(base_seed, tf.int64), index]))

    return d.enumerate().map(decode_and_mask, num_parallel_calls=options.num_cpu_threads, deterministic=deterministic)


# --- dynamic masking ------------------------------------------------------------------------


def _dynamic_masker(
    record_schema: str, manifests: Sequence[Manifest], max_seq_length: int, max_predictions_per_seq: int,
    masking: DynamicMaskingOptions,
) -> Masker:
    if record_schema != "unmasked":
        raise ConfigError(
            f"dynamic_masking needs unmasked records (create_tfrecords --mlm_only --disable_masking); these records "
            f"have the {record_schema!r} layout and are already masked"
        )
    separators = [manifest_separator(m).token for m in manifests]
    masker = masker_from_options(
        masking, max_seq_length, max_predictions_per_seq, separator_tokens=[t for t in separators if t]
    )
    if masking.vocab_file is not None:  # (after: a vocabulary the writer refuses is refused in its words first)
        require_records_vocabulary(masking.vocab_file, manifests)
    return masker


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

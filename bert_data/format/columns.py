"""Rows as unpadded columns: the records of the columnar output formats (Parquet, MDS).

A TFRecord row is padded to ``max_seq_length`` / ``max_predictions_per_seq`` and carries its own
masks; a columnar row is stored unpadded, under the names Hugging Face's ``BertForPreTraining``
takes (``token_type_ids``, ``next_sentence_label``), and the masks are left out because they
follow from the lengths:

==================== ======================== ==========================================
our feature          column                   stored as
==================== ======================== ==========================================
input_ids            ``input_ids``            the row's real tokens (``input_mask`` is 1 there)
segment_ids          ``token_type_ids``       the same length as ``input_ids``
input_mask           (none)                   1 on the first ``len(input_ids)`` tokens
masked_lm_positions  ``masked_lm_positions``  the real predictions (``masked_lm_weights`` 1.0)
masked_lm_ids        ``masked_lm_ids``        the same length as ``masked_lm_positions``
masked_lm_weights    (none)                   1.0 on the first ``len(masked_lm_positions)``
next_sentence_labels ``next_sentence_label``  one value
==================== ======================== ==========================================

That is lossless only for rows whose masks are a prefix of ones and whose padding is zero, which
every row of these layouts is (:mod:`bert_data.format.checks`); :func:`to_columns` checks it for
every row it converts and refuses a row that is not (:class:`ColumnError`), so a conversion is
never silently lossy. :func:`from_columns` pads the columns back into the very arrays the
TFRecord decoding of the same row gives (int64 / float32, the schema's lengths): what the tests
and ``inspect_tfrecords`` compare and check.

Layouts: NSP, SOP, MLM-only and unmasked ids (``--disable_masking --unmasked_format ids``).
Packed rows (``--packing``) and the Model Zoo's token strings are not columnar here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .schema import SCHEMAS, feature_lengths

COLUMNAR_LAYOUTS = ("nsp", "sop", "mlm_only", "unmasked")

SEQ_KIND, PRED_KIND, ONE_KIND = "seq", "pred", "one"
# length of the lists of kind ``seq`` / ``pred``: which mask says how many values are real
LENGTH_OF_KIND = {SEQ_KIND: "input_mask", PRED_KIND: "masked_lm_weights"}


class ColumnError(ValueError):
    """A row that unpadded columns cannot hold exactly (a mask that is not a prefix of ones, or
    padding that is not zero): a bug of the writer, never silently converted."""


@dataclass(frozen=True)
class Column:
    name: str  # the column's name (Hugging Face's)
    feature: str  # our feature's name
    kind: str  # SEQ_KIND, PRED_KIND (a list as long as the row's tokens / predictions) or ONE_KIND
    dtype: str  # numpy dtype of the stored values


_ALL_COLUMNS = (
    Column("input_ids", "input_ids", SEQ_KIND, "int32"),
    Column("token_type_ids", "segment_ids", SEQ_KIND, "int8"),
    Column("masked_lm_positions", "masked_lm_positions", PRED_KIND, "int16"),
    Column("masked_lm_ids", "masked_lm_ids", PRED_KIND, "int32"),
    Column("next_sentence_label", "next_sentence_labels", ONE_KIND, "int8"),
)
KIND_OF_COLUMN = {c.name: c.kind for c in _ALL_COLUMNS}


@dataclass(frozen=True)
class ShardSpec:
    """What a rewriting container is told about the records of a shard it writes."""

    layout: str  # a key of bert_data.format.schema.SCHEMAS
    features: Tuple[Tuple[str, str, int], ...]  # (name, dtype, length) in the records' (sorted) order
    max_seq_length: int
    max_predictions_per_seq: int


def layout_spec(layout: str, max_seq_length: int, max_predictions_per_seq: int,
                max_sequences_per_pack: Optional[int] = None) -> ShardSpec:
    """The :class:`ShardSpec` of records of ``layout`` with these lengths (the writer's, from the
    run's settings; inspect's, from a directory's manifest): every feature with its length."""
    from .schema import DEFAULT_SEQUENCES_PER_PACK, SCHEMAS, feature_length

    pack = max_sequences_per_pack or DEFAULT_SEQUENCES_PER_PACK
    features = tuple((f.name, f.dtype, feature_length(f, max_seq_length, max_predictions_per_seq, pack))
                     for f in SCHEMAS[layout])
    return ShardSpec(layout, features, max_seq_length, max_predictions_per_seq)


def columns_of(layout: str) -> Tuple[Column, ...]:
    """The columns of a layout's rows, in a fixed order (the features it has, the masks left out)."""
    if layout not in COLUMNAR_LAYOUTS:
        raise ValueError(f"{layout} records are not written as columns (columnar layouts: {', '.join(COLUMNAR_LAYOUTS)})")
    names = {f.name for f in SCHEMAS[layout]}
    return tuple(c for c in _ALL_COLUMNS if c.feature in names)


@dataclass
class ColumnBatch:
    """Rows as columns: ``lengths[kind]`` is each row's list length of that kind, ``values[name]``
    a list column's values of every row back to back (a scalar column: one value per row)."""

    rows: int
    lengths: Dict[str, np.ndarray]
    values: Dict[str, np.ndarray]

    def offsets(self, kind: str) -> np.ndarray:
        """Arrow-style offsets (rows + 1, int32) of the lists of ``kind``."""
        return np.concatenate([[0], np.cumsum(self.lengths[kind])]).astype(np.int32)

    def iter_rows(self) -> Iterator[Dict[str, np.ndarray]]:
        """Each row as one array per column (a scalar column: a 0-d array), in order."""
        starts = {kind: self.offsets(kind) for kind in self.lengths}
        for i in range(self.rows):
            row = {}
            for name, values in self.values.items():
                kind = KIND_OF_COLUMN[name]
                row[name] = values[i] if kind == ONE_KIND else values[starts[kind][i]:starts[kind][i + 1]]
            yield row


def rows_to_batch(rows: Sequence[Mapping[str, np.ndarray]], layout: str) -> ColumnBatch:
    """Rows as a reader returns them (one array or scalar per column) as one column batch."""
    columns = columns_of(layout)
    lengths: Dict[str, np.ndarray] = {}
    values: Dict[str, np.ndarray] = {}
    for column in columns:
        if column.kind == ONE_KIND:
            values[column.name] = np.array([row[column.name] for row in rows], column.dtype)
            continue
        parts = [np.asarray(row[column.name], column.dtype).reshape(-1) for row in rows]
        lengths.setdefault(column.kind, np.array([len(p) for p in parts], np.int64))
        values[column.name] = np.concatenate(parts) if parts else np.zeros(0, column.dtype)
    return ColumnBatch(len(rows), lengths, values)


def layout_of_columns(names) -> str:
    """The columnar layout whose columns are exactly ``names`` (NSP and SOP share theirs: "nsp")."""
    wanted = sorted(names)
    for layout in ("nsp", "mlm_only", "unmasked"):
        if sorted(c.name for c in columns_of(layout)) == wanted:
            return layout
    raise ValueError(f"no columnar layout has exactly the columns {wanted}")


def layout_of_features(names) -> str:
    """The columnar layout of padded rows with these features (the one with the most columns whose
    features are all there: NSP and SOP rows are "nsp")."""
    have = set(names)
    fitting = [layout for layout in ("nsp", "mlm_only", "unmasked")
               if {c.feature for c in columns_of(layout)} <= have]
    if not fitting:
        raise ValueError(f"no columnar layout has its features among {sorted(have)}")
    return max(fitting, key=lambda layout: len(columns_of(layout)))


def select_rows(batch: ColumnBatch, rows: np.ndarray) -> ColumnBatch:
    """The column batch of ``rows`` (indices, ascending) of ``batch``."""
    if len(rows) == batch.rows:
        return batch
    lengths = {kind: kind_lengths[rows] for kind, kind_lengths in batch.lengths.items()}
    values = {}
    for name, column_values in batch.values.items():
        kind = KIND_OF_COLUMN[name]
        if kind == ONE_KIND:
            values[name] = column_values[rows]
            continue
        starts = (np.cumsum(batch.lengths[kind]) - batch.lengths[kind])[rows]
        taken = lengths[kind]
        ends = np.cumsum(taken)
        values[name] = column_values[np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(starts - (ends - taken), taken)]
    return ColumnBatch(len(rows), lengths, values)


def rows_by_shard(shard_of_row: np.ndarray) -> List[Tuple[int, np.ndarray]]:
    """Each shard present (ascending) with its rows (ascending), of a batch's ``shard_of_row``."""
    shard_of_row = np.asarray(shard_of_row, dtype=np.int64)
    if not len(shard_of_row):
        return []
    return [(shard, np.flatnonzero(shard_of_row == shard)) for shard in np.flatnonzero(np.bincount(shard_of_row)).tolist()]


def shard_runs(features: Mapping[str, np.ndarray], shard_of_row: np.ndarray, layout: str, native_runs: Callable,
               numpy_run: Callable[[ColumnBatch], bytes]) -> List[Tuple[int, bytes, int]]:
    """A batch's padded rows (row i for shard ``shard_of_row[i]``) as one run of a format's bytes
    per shard present, in shard order: ``(shard, run, rows)``, for a format its workers encode.
    ``native_runs(native, features, shards, layout)`` makes them with the C accelerator, or says
    None (a row it declines: the numpy path names the problem); else each shard's rows, as a
    :class:`ColumnBatch` (:func:`to_columns`, which raises :class:`ColumnError`), go to
    ``numpy_run``: the reference, with the same bytes."""
    from .native import wire

    shards = rows_by_shard(shard_of_row)
    if not shards:
        return []
    native = wire()
    if native is not None:
        runs = native_runs(native, features, shards, layout)
        if runs is not None:
            return runs
    batch = to_columns(features, layout)
    return [(shard, numpy_run(select_rows(batch, rows)), len(rows)) for shard, rows in shards]


def native_counts(native, features: Mapping[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """Each row's list length of every kind (a scalar's: 1) from the masks, by the C accelerator's
    ``prefix_counts``; None when a mask is not a prefix of ones (:func:`to_columns` says so)."""
    n = len(features["input_ids"])
    counts = {ONE_KIND: np.ones(n, dtype=np.int64)}
    for kind, mask in LENGTH_OF_KIND.items():
        if mask in features:
            values = np.asarray(features[mask])
            values = np.ascontiguousarray(values if values.dtype in (np.int32, np.float32) else values.astype(np.float32))
            counts[kind] = np.empty(n, dtype=np.int64)
            if not native.prefix_counts(values, values.shape[1], counts[kind]):
                return None
    return counts


def native_column(features: Mapping[str, np.ndarray], column: Column, counts: Mapping[str, np.ndarray]) -> tuple:
    """A column as the C accelerator's format functions take it: its padded rows (C-contiguous
    int32 or int64, (n, k)), k, each row's count (:func:`native_counts`), whether it is a list, its
    stored bytes a value, and the least and most value its stored type holds."""
    array = np.asarray(features[column.feature]).reshape(len(features["input_ids"]), -1)
    array = np.ascontiguousarray(array if array.dtype in (np.int32, np.int64) else array.astype(np.int64))
    bounds = np.iinfo(column.dtype)
    return (array, array.shape[1], counts[column.kind], column.kind != ONE_KIND, bounds.bits // 8, int(bounds.min),
            int(bounds.max))


def _prefix_lengths(mask: np.ndarray, what: str) -> Tuple[np.ndarray, np.ndarray]:
    """How many leading entries of each row are real, and where they are (``(n, k)`` bools),
    checking that the mask is exactly 1 there and 0 after."""
    lengths = np.count_nonzero(mask, axis=1)
    real = np.arange(mask.shape[1])[None, :] < lengths[:, None]
    if not np.array_equal(mask, real.astype(mask.dtype, copy=False)):
        raise ColumnError(f"{what} is not a prefix of ones in every row: the row cannot be stored unpadded")
    return lengths, real


def to_columns(features: Mapping[str, np.ndarray], layout: str) -> ColumnBatch:
    """Padded rows of ``layout`` (name -> (n, k) arrays, rows in order) as unpadded columns.
    Raises :class:`ColumnError` when a row would not come back exactly (see the module docstring)."""
    columns = columns_of(layout)
    n = len(features["input_ids"])
    lengths, real = {}, {}
    for kind, mask in LENGTH_OF_KIND.items():
        if mask in features:
            lengths[kind], real[kind] = _prefix_lengths(np.asarray(features[mask]), mask)
    values = {}
    for column in columns:
        array = np.asarray(features[column.feature])
        if column.kind == ONE_KIND:
            values[column.name] = array.reshape(n).astype(column.dtype)
            continue
        kept = array[real[column.kind]]
        if np.count_nonzero(kept) != np.count_nonzero(array):
            raise ColumnError(f"{column.feature} has a non-zero value past the row's length: it cannot be stored unpadded")
        narrow = kept.astype(column.dtype, copy=False)
        if narrow is not kept and not np.array_equal(narrow, kept):  # (a copy only when it narrows)
            raise ColumnError(f"{column.feature} has a value outside {column.dtype}: it cannot be stored as {column.name}")
        values[column.name] = narrow
    return ColumnBatch(n, lengths, values)


def from_columns(batch: ColumnBatch, layout: str, max_seq_length: int, max_predictions_per_seq: int
                 ) -> Dict[str, np.ndarray]:
    """The padded (n, k) arrays of the rows, exactly as the TFRecord decoding of the same rows
    gives them (int64 and float32, the schema's lengths)."""
    widths = feature_lengths(max_seq_length, max_predictions_per_seq, SCHEMAS[layout])
    kind_width = {SEQ_KIND: max_seq_length, PRED_KIND: max_predictions_per_seq}
    out: Dict[str, np.ndarray] = {}
    real = {}
    for kind, lengths in batch.lengths.items():
        if len(lengths) and lengths.max() > kind_width[kind]:
            raise ColumnError(f"a row has {int(lengths.max())} {kind} values, more than the {kind_width[kind]} its run allows")
        real[kind] = np.arange(kind_width[kind])[None, :] < lengths[:, None]
    for kind, mask in LENGTH_OF_KIND.items():
        if kind in real and mask in widths:
            out[mask] = real[kind].astype(np.float32 if mask == "masked_lm_weights" else np.int64)
    for column in columns_of(layout):
        if column.kind == ONE_KIND:
            out[column.feature] = batch.values[column.name].astype(np.int64).reshape(batch.rows, 1)
            continue
        padded = np.zeros((batch.rows, widths[column.feature]), np.int64)
        padded[real[column.kind]] = batch.values[column.name]
        out[column.feature] = padded
    return out

"""``--output_format parquet``: one Apache Parquet file per shard, written and read with pyarrow.

Each row is one record, unpadded, in the columns of :mod:`bert_data.format.columns` (Hugging
Face's names: ``input_ids``, ``token_type_ids``, ``masked_lm_positions``, ``masked_lm_ids``,
``next_sentence_label``); ``datasets.load_dataset("parquet", data_files=...)`` and
``pyarrow.parquet`` read it as it is. The bytes are a function of the rows only, so the same
seed gives the same file for any worker count and after ``--resume``:

* row groups of exactly :data:`ROW_GROUP_ROWS` rows (the last one fewer), counted over the
  shard, never by the batches it arrives in; only one row group's rows are held at a time;
* each column's encoding named (:func:`column_encodings`: the list columns' values PLAIN, the
  scalar columns delta-encoded), zstd at a pinned level, no dictionary pages, no column
  statistics, format version 2.6, data page v1: every option that has a default is written
  out, so a pyarrow with other defaults writes the same layout;
* the file's key-value metadata holds only the Arrow schema; its ``created_by`` names the
  pyarrow version (the same bytes need the same pyarrow, as TFRecords need the same bert_data).
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Mapping, Tuple

import numpy as np

from .columns import KIND_OF_COLUMN, ONE_KIND, ColumnBatch, ShardSpec, columns_of, from_columns, to_columns

ROW_GROUP_ROWS = 4096  # rows per row group (a multiple of the readers' usual batch sizes)
LIVE_ROWS = ROW_GROUP_ROWS  # after each whole row group the writer holds nothing (containers.live_rows)


def live_writer_bytes(spec: ShardSpec) -> int:
    """What an open writer keeps between row groups: pyarrow's definition and repetition levels
    of the last row group's list values (2 bytes each, a token a row), measured 8.25 MB at MSL 512."""
    return LIVE_ROWS * spec.max_seq_length * 4
ZSTD_LEVEL = 1  # level 3 is ~10% smaller and ~2x slower to write; either is a third of the TFRecords' bytes
# The encodings of a list column's values and of a scalar column. Lists stay PLAIN: delta-encoding
# their values (random token ids, 0/1 runs) made MSL-512 shards 13% larger (36.2 vs 32.1 MB after
# zstd) for a ~10% faster write; a scalar (NSP's label) is a few bytes either way.
LIST_ENCODING = "PLAIN"
SCALAR_ENCODING = "DELTA_BINARY_PACKED"
WRITE_OPTIONS = dict(
    compression="zstd", compression_level=ZSTD_LEVEL, use_dictionary=False, write_statistics=False,
    version="2.6", data_page_version="1.0", write_page_index=False, write_page_checksum=False, store_schema=True,
)


def column_encodings(layout: str) -> Dict[str, str]:
    """Each column's encoding, by the path pyarrow keys it with: a list column's values are its
    leaf ``NAME.list.element`` (an encoding given for ``NAME`` itself is silently not applied)."""
    return {(c.name if c.kind == ONE_KIND else f"{c.name}.list.element"): (SCALAR_ENCODING if c.kind == ONE_KIND else LIST_ENCODING)
            for c in columns_of(layout)}


def write_options(layout: str) -> dict:
    """Every ParquetWriter option, pinned."""
    return dict(WRITE_OPTIONS, column_encoding=column_encodings(layout))


def arrow_schema(layout: str):
    """The Arrow schema of a layout's rows: list columns of the stored dtypes, scalars as is."""
    import pyarrow as pa

    fields = []
    for column in columns_of(layout):
        value_type = pa.from_numpy_dtype(np.dtype(column.dtype))
        fields.append(pa.field(column.name, value_type if column.kind == ONE_KIND else pa.list_(value_type), nullable=False))
    return pa.schema(fields)


def _arrow_array(values: np.ndarray):
    """A numpy array as an Arrow array of its type, without a copy (and without ``pa.array``,
    whose first call imports pandas when it is installed: seconds, in every run)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def to_table(batch: ColumnBatch, layout: str):
    """A :class:`~bert_data.format.columns.ColumnBatch` as an Arrow table (no copy of the values)."""
    import pyarrow as pa

    schema = arrow_schema(layout)
    arrays = []
    for column in columns_of(layout):
        values = _arrow_array(batch.values[column.name])
        if column.kind != ONE_KIND:
            offsets = _arrow_array(batch.offsets(column.kind))
            values = pa.ListArray.from_arrays(offsets, values, type=schema.field(column.name).type)
        arrays.append(values)
    return pa.Table.from_arrays(arrays, schema=schema)


def _joined(batches: List[ColumnBatch]) -> ColumnBatch:
    """Column batches, in order, as one."""
    if len(batches) == 1:
        return batches[0]
    return ColumnBatch(sum(b.rows for b in batches),
                       {kind: np.concatenate([b.lengths[kind] for b in batches]) for kind in batches[0].lengths},
                       {name: np.concatenate([b.values[name] for b in batches]) for name in batches[0].values})


def _split(batch: ColumnBatch, rows: int) -> Tuple[ColumnBatch, ColumnBatch]:
    """The first ``rows`` rows of a column batch, and the rest (views, no copies)."""
    cut = {kind: int(lengths[:rows].sum()) for kind, lengths in batch.lengths.items()}
    head, rest = {}, {}
    for name, values in batch.values.items():
        at = rows if KIND_OF_COLUMN[name] == ONE_KIND else cut[KIND_OF_COLUMN[name]]
        head[name], rest[name] = values[:at], values[at:]
    return (ColumnBatch(rows, {k: v[:rows] for k, v in batch.lengths.items()}, head),
            ColumnBatch(batch.rows - rows, {k: v[rows:] for k, v in batch.lengths.items()}, rest))


class ShardFileWriter:
    """One shard's Parquet file in ``directory`` (the container's ``open_shard``)."""

    def __init__(self, directory: str, shard_name: str, spec: ShardSpec) -> None:
        import pyarrow.parquet as pq

        self.path = os.path.join(directory, shard_name)
        self.name = shard_name
        self.spec = spec
        self.records = 0
        self._pending: List[ColumnBatch] = []
        self._pending_rows = 0
        self._writer = pq.ParquetWriter(self.path, arrow_schema(spec.layout), **write_options(spec.layout))
        self.sidecar_entries: List[object] = []

    def write(self, features: Mapping[str, np.ndarray]) -> None:
        """Buffer a batch of padded rows as unpadded columns (the padding dropped as the batch
        arrives, so the buffer is a third of the padded rows' bytes); write every whole row group."""
        rows = len(features["input_ids"])
        if not rows:
            return
        self._pending.append(to_columns(features, self.spec.layout))
        self._pending_rows += rows
        while self._pending_rows >= ROW_GROUP_ROWS:
            self._flush(ROW_GROUP_ROWS)

    def _flush(self, rows: int) -> None:
        """Write the first ``rows`` pending rows as one row group (contiguous columns, so its pages
        are the same whatever batches the rows came in)."""
        head, rest = _split(_joined(self._pending), rows)
        self._pending = [rest] if rest.rows else []
        self._pending_rows -= rows
        self._writer.write_table(to_table(head, self.spec.layout), row_group_size=rows)
        self.records += rows

    def close(self) -> List[Tuple[str, int]]:
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._writer.close()
        return [(self.name, self.records)]

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)


def read_column_batches(path: str, layout: str) -> Iterator[ColumnBatch]:
    """The rows of a Parquet shard, one row group at a time, as column batches."""
    import pyarrow.parquet as pq

    columns = columns_of(layout)
    with pq.ParquetFile(path) as handle:
        for group in range(handle.num_row_groups):
            table = handle.read_row_group(group, columns=[c.name for c in columns])
            lengths: Dict[str, np.ndarray] = {}
            values: Dict[str, np.ndarray] = {}
            for column in columns:
                array = table.column(column.name).combine_chunks()
                if column.kind == ONE_KIND:
                    values[column.name] = array.to_numpy()
                    continue
                offsets = array.offsets.to_numpy()
                lengths.setdefault(column.kind, np.diff(offsets))
                values[column.name] = array.flatten().to_numpy()
            yield ColumnBatch(table.num_rows, lengths, values)


def read_feature_batches(path: str, spec: ShardSpec) -> Iterator[Dict[str, np.ndarray]]:
    """The rows of a Parquet shard as the padded arrays the TFRecord decoding of the same rows
    gives (what ``inspect_tfrecords`` checks and the tests compare)."""
    for batch in read_column_batches(path, spec.layout):
        yield from_columns(batch, spec.layout, spec.max_seq_length, spec.max_predictions_per_seq)

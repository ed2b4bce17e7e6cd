"""``--output_format parquet``: one Apache Parquet file per shard, encoded by the workers.

Each row is one record, unpadded, in the columns of :mod:`bert_data.format.columns` (Hugging
Face's names: ``input_ids``, ``token_type_ids``, ``masked_lm_positions``, ``masked_lm_ids``,
``next_sentence_label``); ``datasets.load_dataset("parquet", data_files=...)`` and
``pyarrow.parquet`` read it as it is, with the Arrow schema :func:`arrow_schema`.

Why the workers encode it. A Parquet file cannot be concatenated from fragments (its footer holds
every column chunk's offset), and rewriting the assembled TFRecords into it with pyarrow on the
coordinator cost about as much CPU as the whole run that wrote them (decoding the records, then
pyarrow's writer: ~13 us a row at MSL 512 with zstd, whose entropy coding of random token ids
alone is ~6 us; a ``tf.train.Example`` is ~3 us). So the workers write the pages themselves, in
encodings that cost a copy rather than compression, and a partial shard of their pages becomes
the file by a footer; pyarrow is not needed to write:

* **A piece** (:func:`encode_pieces`, the container's ``frame_runs``): a batch's rows of one shard
  as each column's data pages (data page v1, uncompressed, at most :data:`PAGE_ROWS` rows a page:
  repetition and definition levels as RLE runs, two a row; values DELTA_BINARY_PACKED with
  whole-byte widths, so a token id takes 2 bytes and a segment id about none), behind a header:
  :data:`PIECE_MAGIC` (``PAR1``, Parquet's own magic), the rows, each column's levels and bytes.
  The C accelerator makes a page in one pass over the padded rows, checking them as
  :func:`~bert_data.format.columns.to_columns` does (numpy is the reference and the fallback, with
  the same bytes). The outputs assemble, journal and resume runs of pieces exactly as TFRecords'.
* **The file** (:func:`finish_file`, at publish): the assembled shard as it is (so it begins with
  ``PAR1``), then the footer (:func:`footer`, Thrift: :mod:`bert_data.format.thrift_compact`):
  the layout's schema as pyarrow writes it, one row group per piece (a piece's column chunks are
  contiguous; its header lies between row groups, where readers, which locate everything by the
  footer, never look: as parquet-mr's padding between row groups), ``created_by`` naming
  bert_data. Reading only the pieces' headers, a local run appends the footer to each partial
  shard and renames it into place like a TFRecord shard (:func:`finish_in_place`; a resumed run
  recognises a published shard by :func:`body_size`); a URL run's assembled copy is finished the
  same way (:func:`bert_data.output.rewrite.rewrite_shard`). A local run's publish copies nothing.

The bytes are a function of the rows and of the batches they were made in, which are a group's
(the same for any worker count, runner or resume), so the same seed gives the same file. Row
groups are a batch's rows of a shard: ~4,096 / shards rows (a pass's last batch fewer). At MSL
512 a file is ~0.42x the TFRecords of the same rows (zstd made it ~0.30x, at ~3x the CPU). No
statistics, dictionary pages, page index or key-value metadata: what every Parquet reader
(pyarrow, Spark, DuckDB, polars) reads since Parquet 2.0.
"""

from __future__ import annotations

import os
import struct
from functools import lru_cache
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple

import numpy as np

from ..errors import OutputError
from . import thrift_compact as thrift
from .columns import ONE_KIND, ColumnBatch, ShardSpec, columns_of, from_columns, native_column, native_counts, shard_runs
from .thrift_compact import BINARY, I32, I64, LIST, STRUCT, Field, ThriftList

PAGE_ROWS = 1024  # rows per data page at most (~1.5 MB of values at MSL 512, about pyarrow's page size)
PIECE_MAGIC = b"PAR1"  # a piece's first bytes: Parquet's magic, so a partial shard of pieces begins as a Parquet file does
_INT32, _RLE, _DELTA, _UNCOMPRESSED, _DATA_PAGE = 1, 3, 5, 0, 0  # parquet.thrift's enums
_DELTA_BLOCK = 128  # deltas per DELTA_BINARY_PACKED block (4 miniblocks of 32)
_PIECE_HEAD = struct.Struct("<4sqq")  # magic, rows, columns
_COLUMN_HEAD = struct.Struct("<qq")  # per column: its levels, the bytes of its pages (headers included)
_LENGTH = struct.Struct("<I")
# A list column is ``name`` (required) / ``list`` (repeated) / ``element`` (optional: Arrow's list items
# are nullable, and the schema is pyarrow's): a value is at definition level 2, an empty list at 0.
_MAX_DEFINITION = 2


class PieceError(OutputError):
    """Bytes of a partial Parquet shard that are not a piece of this layout: the partial shards
    are the run's own (journaled, checked and cut back to the journal on resume), so only damage
    or a bug makes one; one line (exit 2) that says to start over."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: the partial shard is damaged; start over with --overwrite")


def arrow_schema(layout: str):
    """The Arrow schema of a layout's rows: list columns of the stored dtypes, scalars as is."""
    import pyarrow as pa

    fields = []
    for column in columns_of(layout):
        value_type = pa.from_numpy_dtype(np.dtype(column.dtype))
        fields.append(pa.field(column.name, value_type if column.kind == ONE_KIND else pa.list_(value_type), nullable=False))
    return pa.schema(fields)


# --- the workers' side: pieces --------------------------------------------------------------


def _varints(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Unsigned LEB128 varints of ``values`` (non-negative, < 2**63) as an (n, 10) byte matrix and
    the mask of each row's bytes (flattened together with other matrices: no loop per value)."""
    values = np.asarray(values, dtype=np.uint64)
    shifts = np.arange(0, 70, 7, dtype=np.uint64)
    groups = (values[:, None] >> shifts) & np.uint64(0x7F)
    count = np.maximum(1, (_bit_length(values) + 6) // 7)
    mask = np.arange(10)[None, :] < count[:, None]
    more = np.arange(10)[None, :] < (count - 1)[:, None]
    return (groups | (more * 0x80).astype(np.uint64)).astype(np.uint8), mask


def _bit_length(values: np.ndarray) -> np.ndarray:
    """Each unsigned value's bit length (0 for 0)."""
    values = np.asarray(values, dtype=np.uint64)
    length = np.zeros(values.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        high = (values >> np.uint64(shift)) > 0
        length += high * shift
        values = np.where(high, values >> np.uint64(shift), values)
    return length + (values > 0)


def _varint(value: int) -> bytes:
    matrix, mask = _varints(np.array([value]))
    return matrix[mask].tobytes()


def _zigzag(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    return ((values << 1) ^ (values >> 63)).astype(np.uint64)


def _flat(parts: Sequence[Tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Byte matrices with the same number of rows, side by side, each row's masked bytes in order."""
    matrix = np.concatenate([m for m, _ in parts], axis=1)
    mask = np.concatenate([k for _, k in parts], axis=1)
    return matrix[mask].tobytes()


def _fixed(rows: int, value: int) -> Tuple[np.ndarray, np.ndarray]:
    return np.full((rows, 1), value, dtype=np.uint8), np.ones((rows, 1), dtype=bool)


def _level_runs(lengths: np.ndarray) -> bytes:
    """A list column's repetition and definition levels (RLE runs of the RLE/bit-packed hybrid,
    each behind its 4-byte length): per row, a run of one 0 and a run of ``length - 1`` 1s; a
    definition of 2 for every value (one run for the page when no list is empty, else one per
    row), 0 for an empty list's one level."""
    rows = len(lengths)
    rest, rest_mask = _varints(np.maximum(lengths - 1, 0) << 1)
    rest_mask &= (lengths > 1)[:, None]
    one = _fixed(rows, 1)
    repetition = _flat([_fixed(rows, 2), _fixed(rows, 0), (rest, rest_mask), (one[0], one[1] & (lengths > 1)[:, None])])
    if rows and lengths.min() > 0:
        definition = _varint(int(lengths.sum()) << 1) + bytes([_MAX_DEFINITION])
    else:
        count, count_mask = _varints(np.maximum(lengths, 1) << 1)
        value = np.where(lengths > 0, _MAX_DEFINITION, 0).astype(np.uint8)[:, None]
        definition = _flat([(count, count_mask), (value, np.ones_like(value, dtype=bool))])
    return _LENGTH.pack(len(repetition)) + repetition + _LENGTH.pack(len(definition)) + definition


def _delta_binary_packed(values: np.ndarray) -> bytes:
    """INT32 ``values`` in Parquet's DELTA_BINARY_PACKED encoding: blocks of :data:`_DELTA_BLOCK`
    deltas (modulo 2**32, as readers add them back) in 4 miniblocks, each miniblock's width the
    fewest whole bytes (0, 8, 16, 24 or 32 bits) that hold its deltas less the block's least (the
    spec allows any width that holds them; whole bytes cost a copy, no shifting). A last block's
    unneeded miniblocks have width 0 and no bytes; a needed one is padded with 0s to 32 values."""
    values = np.asarray(values).astype(np.int32)
    count = len(values)
    header = _varint(_DELTA_BLOCK) + _varint(_DELTA_BLOCK // 32) + _varint(count) + _varint(int(_zigzag(values[:1])[0]) if count else 0)
    if count < 2:
        return header
    deltas = np.diff(values).astype(np.int32)  # (wraps modulo 2**32)
    blocks = -(-len(deltas) // _DELTA_BLOCK)
    padded = np.full(blocks * _DELTA_BLOCK, deltas.max(), dtype=np.int32)
    padded[:len(deltas)] = deltas
    padded = padded.reshape(blocks, _DELTA_BLOCK)
    least = padded.min(axis=1)
    adjusted = padded.view(np.uint32) - least.view(np.uint32)[:, None]  # (wraps modulo 2**32)
    present = (np.arange(blocks * _DELTA_BLOCK) < len(deltas)).reshape(blocks, _DELTA_BLOCK)
    miniblocks = np.where(present, adjusted, 0).astype(np.uint32).reshape(blocks, 4, 32)
    needed = present.reshape(blocks, 4, 32).any(axis=2)
    width_bytes = np.where(needed, (_bit_length(miniblocks.max(axis=2)) + 7) // 8, 0)  # (blocks, 4)
    data = miniblocks.astype("<u4").view(np.uint8).reshape(blocks, 4, 32, 4)
    data_mask = np.broadcast_to(np.arange(4)[None, None, None, :] < width_bytes[:, :, None, None], data.shape)
    least_bytes, least_mask = _varints(_zigzag(least.astype(np.int64)))
    widths = (width_bytes * 8).astype(np.uint8)
    body = _flat([(least_bytes, least_mask), (widths, np.ones_like(widths, dtype=bool)),
                  (data.reshape(blocks, -1), data_mask.reshape(blocks, -1))])
    return header + body


def _page(payload: bytes, levels: int) -> bytes:
    """A data page v1 (uncompressed): its header, then ``payload`` (levels, values) of ``levels`` levels."""
    header = thrift.encode([
        Field(1, I32, _DATA_PAGE), Field(2, I32, len(payload)), Field(3, I32, len(payload)),
        Field(5, STRUCT, [Field(1, I32, levels), Field(2, I32, _DELTA), Field(3, I32, _RLE), Field(4, I32, _RLE)]),
    ])
    return header + payload


def _column_pages(values: np.ndarray, lengths) -> Tuple[int, List[bytes]]:
    """A column's pages, rows cut every :data:`PAGE_ROWS` (``lengths``: each row's list length, or
    None for a scalar column, which has no levels): its levels, and its pages. An empty list is
    one level (repetition 0, definition 0) and no value."""
    rows = len(values) if lengths is None else len(lengths)
    offsets = None if lengths is None else np.concatenate([[0], np.cumsum(lengths)])
    total_levels = 0
    pages = []
    for first in range(0, rows, PAGE_ROWS):
        last = min(rows, first + PAGE_ROWS)
        if lengths is None:
            levels, payload = last - first, _delta_binary_packed(values[first:last])
        else:
            levels = int(np.maximum(lengths[first:last], 1).sum())
            payload = _level_runs(lengths[first:last]) + _delta_binary_packed(values[offsets[first]:offsets[last]])
        pages.append(_page(payload, levels))
        total_levels += levels
    return total_levels, pages


def _piece(rows: int, columns: Sequence[Tuple[int, List[bytes]]]) -> bytes:
    """A piece of ``rows`` rows from each column's (levels, pages), in the layout's column order:
    the header (:data:`PIECE_MAGIC`, rows, columns; each column's levels and bytes), then the pages."""
    chunks = [b"".join(pages) for _, pages in columns]
    heads = [_COLUMN_HEAD.pack(levels, len(chunk)) for (levels, _), chunk in zip(columns, chunks)]
    return b"".join([_PIECE_HEAD.pack(PIECE_MAGIC, rows, len(heads)), *heads, *chunks])


def encode_piece(batch: ColumnBatch, layout: str) -> bytes:
    """Unpadded rows as a piece (numpy: the reference of the C accelerator's pages)."""
    columns = []
    for column in columns_of(layout):
        lengths = None if column.kind == ONE_KIND else np.asarray(batch.lengths[column.kind], dtype=np.int64)
        columns.append(_column_pages(batch.values[column.name], lengths))
    return _piece(batch.rows, columns)


def encode_pieces(features: Mapping[str, np.ndarray], shard_of_row: np.ndarray, layout: str
                  ) -> List[Tuple[int, bytes, int]]:
    """A batch's padded rows (row i for shard ``shard_of_row[i]``) as one piece per shard present,
    in shard order: ``(shard, piece, rows)``. Raises :class:`~bert_data.format.columns.ColumnError`
    for a row that unpadded columns cannot hold exactly."""
    return shard_runs(features, shard_of_row, layout, _native_pieces, lambda batch: encode_piece(batch, layout))


def _native_pieces(native, features: Mapping[str, np.ndarray], shards, layout: str):
    """:func:`encode_pieces` by the C accelerator's ``prefix_counts`` and ``parquet_page`` (the same
    bytes), straight from the padded rows; None where a row does not fit (the numpy path says why)."""
    counts = native_counts(native, features)
    if counts is None:
        return None
    arrays = [native_column(features, column, counts) for column in columns_of(layout)]
    pieces = []
    for shard, rows in shards:
        columns = []
        for array, width, column_counts, levels, _, low, high in arrays:
            total, pages = 0, []
            for first in range(0, len(rows), PAGE_ROWS):
                made = native.parquet_page(array, width, column_counts, rows[first:first + PAGE_ROWS], levels, low, high)
                if made is None:
                    return None
                pages.append(_page(*made))
                total += made[1]
            columns.append((total, pages))
        pieces.append((shard, _piece(len(rows), columns), len(rows)))
    return pieces


# --- the publish's side: pieces into a file -------------------------------------------------


_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2  # FieldRepetitionType
_LIST_CONVERTED = 3  # ConvertedType LIST; INT_8 and INT_16 are 15 and 16
_NARROW_INTS = {"int8": (15, 8), "int16": (16, 16)}  # dtype -> (ConvertedType, IntType's bit width)


def _int_annotation(dtype: str) -> List[Field]:
    """A narrow integer's converted and logical type (INT32 physical values): none for int32."""
    if dtype not in _NARROW_INTS:
        return []
    converted, bits = _NARROW_INTS[dtype]
    return [Field(6, I32, converted),
            Field(10, STRUCT, [Field(10, STRUCT, [Field(1, thrift.BYTE, bits), Field(2, thrift.TRUE, True)])])]


@lru_cache(maxsize=None)
def schema_elements(layout: str) -> Tuple[list, ...]:
    """The footer's schema (SchemaElements, depth first) of a layout's rows, as pyarrow writes the
    Arrow schema :func:`arrow_schema`, so that every reader sees exactly that schema: a list column
    is a required LIST group of a repeated ``list`` of an optional INT32 ``element`` (Arrow's list
    items are nullable), a scalar a required INT32; int8 and int16 annotated as such."""
    columns = columns_of(layout)
    elements = [[Field(3, I32, _REQUIRED), Field(4, BINARY, b"schema"), Field(5, I32, len(columns))]]
    for column in columns:
        name = column.name.encode()
        if column.kind == ONE_KIND:
            elements.append([Field(1, I32, _INT32), Field(3, I32, _REQUIRED), Field(4, BINARY, name), *_int_annotation(column.dtype)])
            continue
        elements.append([Field(3, I32, _REQUIRED), Field(4, BINARY, name), Field(5, I32, 1), Field(6, I32, _LIST_CONVERTED),
                         Field(10, STRUCT, [Field(3, STRUCT, [])])])
        elements.append([Field(3, I32, _REPEATED), Field(4, BINARY, b"list"), Field(5, I32, 1)])
        elements.append([Field(1, I32, _INT32), Field(3, I32, _OPTIONAL), Field(4, BINARY, b"element"),
                         *_int_annotation(column.dtype)])
    return tuple(elements)


def footer(layout: str, rows: int, row_groups: Sequence[list], created_by: bytes) -> bytes:
    """The FileMetaData of a file of ``rows`` rows in ``row_groups``: format version 2, the layout's
    schema, column orders by type (no statistics are written, but readers look for them)."""
    leaves = len(columns_of(layout))
    return thrift.encode([
        Field(1, I32, 2), Field(2, LIST, ThriftList(STRUCT, schema_elements(layout))), Field(3, I64, rows),
        Field(4, LIST, ThriftList(STRUCT, tuple(row_groups))), Field(6, BINARY, created_by),
        Field(7, LIST, ThriftList(STRUCT, tuple([Field(1, STRUCT, [])] for _ in range(leaves)))),
    ])


def _path_in_schema(column) -> Tuple[bytes, ...]:
    name = column.name.encode()
    return (name,) if column.kind == ONE_KIND else (name, b"list", b"element")


def _row_group(columns, rows: int, chunks: Sequence[Tuple[int, int, int]]) -> list:
    """A RowGroup of ``rows`` rows whose column chunks are ``chunks`` (levels, bytes, offset): one
    piece's pages, contiguous, in column order."""
    metadata = []
    for column, (levels, size, offset) in zip(columns, chunks):
        meta = [
            Field(1, I32, _INT32), Field(2, LIST, ThriftList(I32, (_RLE, _DELTA))),
            Field(3, LIST, ThriftList(BINARY, _path_in_schema(column))), Field(4, I32, _UNCOMPRESSED),
            Field(5, I64, levels), Field(6, I64, size), Field(7, I64, size), Field(9, I64, offset),
        ]
        metadata.append([Field(2, I64, 0), Field(3, STRUCT, meta)])
    total = sum(size for _, size, _ in chunks)
    return [Field(1, LIST, ThriftList(STRUCT, tuple(metadata))), Field(2, I64, total), Field(3, I64, rows),
            Field(5, I64, chunks[0][2]), Field(6, I64, total)]


def _row_groups(fd: int, size: int, layout: str, name: str) -> Tuple[List[list], int]:
    """The row groups of the pieces that make the first ``size`` bytes of ``fd`` (each piece one row
    group: its column chunks are contiguous), read from their headers only; and their rows."""
    columns = columns_of(layout)
    head_size = _PIECE_HEAD.size + len(columns) * _COLUMN_HEAD.size
    groups, rows, offset = [], 0, 0
    while offset < size:
        head = os.pread(fd, head_size, offset)
        magic, count, width = _PIECE_HEAD.unpack_from(head, 0) if len(head) == head_size else (b"", 0, 0)
        if magic != PIECE_MAGIC or width != len(columns):
            raise PieceError(f"{name}: byte {offset} is not a piece of {layout} rows")
        position, chunks = offset + head_size, []
        for index in range(width):
            levels, length = _COLUMN_HEAD.unpack_from(head, _PIECE_HEAD.size + index * _COLUMN_HEAD.size)
            chunks.append((levels, length, position))
            position += length
        if position > size:
            raise PieceError(f"{name}: the piece at byte {offset} runs past its end")
        groups.append(_row_group(columns, count, chunks))
        rows += count
        offset = position
    return groups, rows


def finish_file(fd: int, layout: str, name: str) -> int:
    """The file open as ``fd`` (read and write), whose bytes are pieces, made a Parquet file: the
    footer appended (``PAR1`` first if it has no piece), fsynced. Its rows. Nothing is copied:
    the pieces' headers stay between the row groups, which every reader locates by the footer."""
    from .. import __version__

    size = os.fstat(fd).st_size
    groups, rows = _row_groups(fd, size, layout, name)
    encoded = footer(layout, rows, groups, f"bert_data version {__version__}".encode())
    tail = (b"" if size else b"PAR1") + encoded + _LENGTH.pack(len(encoded)) + b"PAR1"
    view = memoryview(tail)
    while view:
        view = view[os.pwrite(fd, view, size + len(tail) - len(view)):]
    os.fsync(fd)
    return rows


def finish_in_place(path: str, spec: ShardSpec) -> int:
    """The partial shard at ``path`` (pieces) made the shard's Parquet file where it is: what a
    local run publishes, renamed into place as TFRecord shards are (:func:`finish_file`)."""
    fd = os.open(path, os.O_RDWR)
    try:
        return finish_file(fd, spec.layout, os.path.basename(path))
    finally:
        os.close(fd)


def body_size(path: str) -> int:
    """How many bytes of the finished file ``path`` are its pieces (the partial shard it was made
    from): its size less the footer; -1 when it is not a finished Parquet file."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size < 12:
                return -1
            handle.seek(size - 8)
            tail = handle.read(8)
    except OSError:
        return -1
    length = _LENGTH.unpack_from(tail, 0)[0]
    if tail[4:] != b"PAR1" or length + 8 > size:
        return -1
    body = size - length - 8
    return 0 if body == 4 else body  # (a shard without pieces: its PAR1 was added by finish_file)


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

"""Records of a run of a file (:class:`~bert_data.torch.plan.Segment`) -> decoded numpy chunks.

Built on the batch reader of ``inspect_tfrecords --stats``: frames cut and CRC-checked a chunk
(~1 MiB) at a time (:func:`~bert_data.format.batch_decode.iter_record_batches`, plain or GZIP),
records of the known layout decoded a whole chunk at a time
(:func:`~bert_data.format.batch_decode.decode_examples`, the optional C accelerator or numpy).
The few records the batch decoder cannot vouch for go through
:func:`~bert_data.format.example_wire.parse_example` and, when they are not exactly the layout
and lengths asked for, stop reading with one error naming the file, the record and what is
wrong (:func:`~bert_data.format.checks.structure_problem`), never a silently wrong row.

A chunk holds every feature as a ``(rows, length)`` array (ints as int32: token ids and
positions; float32 weights) plus ``file`` and ``record`` (int64): where each row came from,
what keys its dynamic masks. Memory is one file chunk and its decoded rows at a time, whatever
the size of the file.

Counts are checked as the dataset was planned: a run that should reach a record past the end
of the file, or the run that ends where the file should end but finds more records, is an
error naming the file, the records it holds and the manifest that lists another number (a
shard cut at a record boundary shows no CRC error: this is what catches it).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import RecordFormatError
from ..format.batch_decode import RecordBatch, decode_examples, iter_record_batches
from ..format.checks import structure_problem
from ..format.example_wire import parse_example
from ..format.schema import DEFAULT_SEQUENCES_PER_PACK
from .plan import Segment
from .sources import opener_for

__all__ = ["Chunk", "SegmentReader", "concat_chunks", "take_rows"]

Chunk = Dict[str, np.ndarray]  # feature name -> (rows, length); "file", "record" -> (rows,) int64
INT32_MAX = (1 << 31) - 1


class SegmentReader:
    """Reads runs of records of the dataset's files into :data:`Chunk` s of one layout."""

    def __init__(self, files: Sequence[str], counts: Sequence[int], listed_in: Sequence[str],
                 features: Sequence[Tuple[str, str, int]], layout: str, max_predictions_per_seq: int,
                 sequences_per_pack: int = 0) -> None:
        self.files = list(files)
        self.counts = list(counts)
        self.listed_in = list(listed_in)
        self.features = list(features)
        self.layout = layout
        self.seq = dict((name, k) for name, _, k in features)["input_ids"]
        self.pred = max_predictions_per_seq
        self.pack = sequences_per_pack  # packed rows' K (0 for other layouts)

    def read(self, segment: Segment) -> Iterator[Chunk]:
        """The records ``[segment.start, segment.stop)`` of the segment's file, in order."""
        path = self.files[segment.file]
        batches = iter_record_batches(path, opener=opener_for(path))
        seen = 0
        try:
            for batch in batches:
                seen = batch.first + len(batch)
                lo, hi = max(segment.start, batch.first), min(segment.stop, seen)
                if lo < hi:
                    yield self._decode(batch, lo - batch.first, hi - batch.first, segment.file)
                if seen >= segment.stop:
                    break
            if seen < segment.stop:
                raise RecordFormatError(self._count_message(path, segment.file, seen))
            if segment.stop == self.counts[segment.file]:  # the run that ends the file: nothing may follow
                held = seen + sum(len(batch) for batch in batches)
                if held > segment.stop:
                    raise RecordFormatError(self._count_message(path, segment.file, held))
        finally:
            batches.close()

    def _count_message(self, path: str, file: int, held: int) -> str:
        listed = self.listed_in[file]
        where = f"{listed} lists {self.counts[file]}" if listed else \
            f"it held {self.counts[file]} when the dataset was made"
        return (f"{path} holds {held} records, but {where}: the file was cut or changed after it was written; "
                "write the output again (rerun the command that made it; create_tfrecords needs --overwrite)")

    def _decode(self, batch: RecordBatch, lo: int, hi: int, file: int) -> Chunk:
        """Rows ``lo .. hi-1`` of ``batch`` decoded; records the batch decoder leaves out are
        parsed one by one and must be exactly the layout."""
        starts, lengths = batch.starts[lo:hi], batch.lengths[lo:hi]
        decoded, ok = decode_examples(batch.data, starts, lengths, self.features, small_ints=True)
        n = hi - lo
        rows = np.flatnonzero(ok)
        chunk: Chunk = {}
        for name, dtype, k in self.features:
            values = decoded[name]
            if len(rows) < n:
                full = np.zeros((n, k), values.dtype)
                full[rows] = values
                values = full
            chunk[name] = values
        for i in np.flatnonzero(~ok).tolist():
            self._parse_into(chunk, batch, lo + i, i, file)
        for name, dtype, _ in self.features:
            if dtype == "int64":
                chunk[name] = self._as_int32(chunk[name], batch, lo, file, name)
        chunk["file"] = np.full(n, file, np.int64)
        chunk["record"] = np.arange(batch.first + lo, batch.first + hi, dtype=np.int64)
        return chunk

    def _parse_into(self, chunk: Chunk, batch: RecordBatch, index: int, row: int, file: int) -> None:
        """One record parsed on its own (another valid encoding, or damage) into ``row``."""
        where = f"{self.files[file]}: record {batch.first + index}"
        try:
            example = parse_example(batch.payload(index))
        except RecordFormatError as exc:
            raise RecordFormatError(f"{where}: {exc}") from None
        problem = structure_problem(example, self.seq, self.pred, self.layout,
                                    self.pack or DEFAULT_SEQUENCES_PER_PACK)
        if problem:
            raise RecordFormatError(
                f"{where} is not a {self.layout} record of max_seq_length {self.seq}"
                + (f" and max_predictions_per_seq {self.pred}" if "masked_lm_ids" in example or self.pred else "")
                + (f" and max_sequences_per_pack {self.pack}" if self.pack else "")
                + f": {problem} (records of another run or layout? give the matching layout and lengths)"
            )
        for name, _, _ in self.features:
            values = np.asarray(example[name])
            if chunk[name].dtype != values.dtype and not np.can_cast(values.dtype, chunk[name].dtype):
                chunk[name] = chunk[name].astype(np.result_type(chunk[name].dtype, values.dtype))
            chunk[name][row] = values

    def _as_int32(self, values: np.ndarray, batch: RecordBatch, lo: int, file: int, name: str) -> np.ndarray:
        """Token ids, masks, positions and labels fit int32 (half the memory in the shuffle
        buffer); a value that does not is a damaged record, never silently wrapped."""
        if values.dtype == np.int32:
            return values
        bad = np.flatnonzero((values > INT32_MAX).any(axis=1) | (values < -INT32_MAX - 1).any(axis=1))
        if len(bad):
            raise RecordFormatError(
                f"{self.files[file]}: record {batch.first + lo + int(bad[0])}: {name} holds "
                f"{int(values[bad[0]].max())}, not a token id, position or label (a damaged record)"
            )
        return values.astype(np.int32)


def concat_chunks(chunks: List[Chunk]) -> Chunk:
    """One chunk of the rows of ``chunks``, in order."""
    if len(chunks) == 1:
        return chunks[0]
    return {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]}


def take_rows(chunk: Chunk, rows: Optional[np.ndarray] = None, start: int = 0, stop: Optional[int] = None) -> Chunk:
    """The rows ``rows`` (an index array) or ``start:stop`` of every array of ``chunk``."""
    if rows is not None:
        return {name: values[rows] for name, values in chunk.items()}
    return {name: values[start:stop] for name, values in chunk.items()}


def chunk_len(chunk: Chunk) -> int:
    return len(chunk["record"])

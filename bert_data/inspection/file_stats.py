"""One file of ``inspect_tfrecords --stats``: read every record once, check it, accumulate statistics.

:func:`read_file` reads a file in batches of records, checks each record's structure and
contents (:mod:`bert_data.format.checks`) against the layout and lengths of its directory, and
accumulates histograms and counters of the valid ones into an :class:`Accumulator` of its own
(a :class:`FileResult`). Accumulators of consecutive files merge in file order.

Why it is fast: a batch of records is framed (:func:`~bert_data.format.batch_decode.iter_record_batches`)
and decoded (:func:`~bert_data.format.batch_decode.decode_examples`) by whole-batch numpy code;
the per-record decoder :func:`~bert_data.format.example_wire.parse_example` only sees the records
that are not in the directory's layout (and the first ones, until the layout and lengths are
known).

Used by :mod:`.stats` (every file in this process, and the report) and by :mod:`.parallel`
(files read by worker processes); it imports neither, so they import it without a cycle.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import RecordFormatError
from ..format.batch_decode import RecordBatch, decode_examples, iter_record_batches
from ..format.checks import (
    KIND_SPECIAL,
    KIND_UNK,
    CleanBatch,
    check_records,
    clean_batch,
    is_masked,
    is_paired,
    layout_names,
    layout_specs,
    structure_problem,
    token_kind_table,
)
from ..format.columns import layout_spec
from ..format.containers import container_for, rewritten_format_of
from ..format.example_wire import parse_example
from ..format.packed import instance_layout, is_packed, unpack_rows
from ..format.schema import feature_length
from . import InspectError
from .inputs import Group, VocabInfo, detect_compression, group_pack

__all__ = [
    "MAX_REASONS",
    "Accumulator",
    "FileResult",
    "Progress",
    "read_file",
]

MAX_REASONS = 10  # bad records quoted in the report (all are counted)

Progress = Callable[[int, int], None]  # (records, file bytes) read since the last call


def _grow_add(hist: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if len(counts) > len(hist):
        hist = np.concatenate([hist, np.zeros(len(counts) - len(hist), np.int64)])
    hist[: len(counts)] += counts
    return hist


class Accumulator:
    """The statistics of every record read so far, and the reasons the bad ones are bad.

    Everything in it is a sum or a first-N list, so accumulators of consecutive files merge
    (:meth:`merge`, in file order) into exactly the accumulator of reading them in one go."""

    def __init__(self, vocab: Optional[VocabInfo]) -> None:
        self.vocab = vocab
        self.records = 0
        self.valid = 0
        self.bad = 0
        self.reasons: List[str] = []
        self.reason_counts: Counter = Counter()
        self.len_hist = np.zeros(1, np.int64)
        self.pred_hist = np.zeros(1, np.int64)
        self.labels = {"nsp": np.zeros(2, np.int64), "sop": np.zeros(2, np.int64)}
        self.composition = np.zeros(3, np.int64)  # [MASK], kept, random
        self.real_tokens = 0
        self.unk_tokens = 0
        self.depth_hist = np.zeros(1, np.int64)  # packed rows by their instances (--packing)
        self.row_tokens = 0  # real tokens of the packed rows read
        self.row_slots = 0  # token slots of the packed rows read
        self._kinds: Optional[np.ndarray] = None
        self._kinds_key: Any = None

    def __getstate__(self) -> Dict[str, Any]:
        """Sent back by worker processes without the vocabulary (the parent has it)."""
        return dict(self.__dict__, vocab=None, _kinds=None, _kinds_key=None)

    def merge(self, other: "Accumulator") -> None:
        """Add the counts of ``other``, read after everything in ``self``."""
        self.records += other.records
        self.valid += other.valid
        self.bad += other.bad
        self.reasons += other.reasons[: max(0, MAX_REASONS - len(self.reasons))]
        self.reason_counts.update(other.reason_counts)  # first-seen order is kept: most_common ties
        self.len_hist = _grow_add(self.len_hist, other.len_hist)
        self.pred_hist = _grow_add(self.pred_hist, other.pred_hist)
        for layout, counts in other.labels.items():
            self.labels[layout] += counts
        self.composition += other.composition
        self.real_tokens += other.real_tokens
        self.unk_tokens += other.unk_tokens
        self.depth_hist = _grow_add(self.depth_hist, other.depth_hist)
        self.row_tokens += other.row_tokens
        self.row_slots += other.row_slots

    def add_bad(self, where: str, messages: List[str]) -> None:
        self.bad += 1
        for m in messages:
            self.reason_counts[m] += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{where}: {'; '.join(messages)}")

    def add_checked(
        self,
        rows: Sequence[Dict[str, np.ndarray]],
        index: np.ndarray,
        bad: List[Tuple[int, List[str]]],
        group: Group,
        where: Callable[[int], str],
    ) -> None:
        """Check and accumulate one batch of records.

        ``rows``: parts of the batch's structurally valid records, each ``name -> (n, k)``
        array, whose batch indices are ``index`` (concatenated in the same order); ``bad``:
        ``(batch index, messages)`` of the records already found bad. The bad ones are reported
        in record order, named by ``where(index)``."""
        bad = list(bad)
        ok = np.zeros(0, bool)
        batch: Dict[str, np.ndarray] = {}
        layout = group.layout
        separator_id = group.separator.id(self.vocab.tokens if self.vocab else None) if rows else None
        if rows:
            assert layout is not None
            names = layout_names(layout)
            batch = rows[0] if len(rows) == 1 else {n: np.concatenate([r[n] for r in rows]) for n in names}
            if not bad and self.vocab is not None:
                clean = clean_batch(batch, self.vocab, self._token_kinds(layout, separator_id), layout, separator_id)
                if clean is not None:  # every record valid: proven in a few passes
                    self.add_clean(clean, layout, batch)
                    return
            checks = check_records(batch, self.vocab, layout, separator_id)
            bad_any = np.zeros(len(index), bool)
            for bad_rows, _ in checks:
                bad_any |= bad_rows
            for i in np.flatnonzero(bad_any):
                bad.append((int(index[i]), [msg for bad_rows, msg in checks if bad_rows[i]]))
            ok = ~bad_any
        for i, messages in sorted(bad, key=lambda b: b[0]):
            self.add_bad(where(i), messages)
        if not ok.any():
            return
        assert layout is not None
        self._accumulate(batch if ok.all() else {name: a[ok] for name, a in batch.items()}, layout, separator_id)

    def _accumulate(self, b: Dict[str, np.ndarray], layout: str, separator_id: Optional[int] = None) -> None:
        if is_packed(layout):  # valid packed rows: the rows' depth and fill, then their instances
            mask = b["input_mask"]
            depth = mask.max(axis=1)
            self.depth_hist = _grow_add(self.depth_hist, np.bincount(depth))
            self.row_tokens += int(np.count_nonzero(mask))
            self.row_slots += mask.size
            base = instance_layout(layout)
            instances = unpack_rows(b, mask.shape[1], b["masked_lm_positions"].shape[1], base in ("nsp", "sop"))
            self.valid -= len(instances["input_ids"]) - len(mask)  # valid counts rows; the instances are added next
            self._accumulate(instances, base, separator_id)
            return
        ids, mask = b["input_ids"], b["input_mask"]
        n, seq = ids.shape
        self.valid += n
        real = mask.sum(axis=1)
        self.len_hist = _grow_add(self.len_hist, np.bincount(real, minlength=seq + 1))
        masked = is_masked(layout)
        if masked:
            pos, mids = b["masked_lm_positions"], b["masked_lm_ids"]
            prefix = pos != 0
            self.pred_hist = _grow_add(self.pred_hist, np.bincount(prefix.sum(axis=1), minlength=pos.shape[1] + 1))
        if is_paired(layout):
            self.labels[layout] += np.bincount(b["next_sentence_labels"][:, 0], minlength=2)[:2]
        if self.vocab is None:
            return
        v = self.vocab
        orig_ids = ids
        if masked:
            rows = np.broadcast_to(np.arange(n)[:, None], pos.shape)
            current = ids[rows[prefix], pos[prefix]]
            original = mids[prefix]
            is_mask = current == v.mask
            kept = ~is_mask & (current == original)
            self.composition += [int(is_mask.sum()), int(kept.sum()), int((~is_mask & ~kept).sum())]
            orig_ids = ids.copy()
            orig_ids[rows[prefix], pos[prefix]] = original
        run = mask == 1
        kind = self._token_kinds(layout, separator_id)[orig_ids]  # valid rows: every id is in the vocabulary
        self.real_tokens += int(np.count_nonzero(run & ((kind & KIND_SPECIAL) == 0)))
        self.unk_tokens += int(np.count_nonzero(run & (kind == KIND_UNK)))

    def _token_kinds(self, layout: str, separator_id: Optional[int]) -> np.ndarray:
        """:func:`token_kind_table` of the vocabulary, layout and separator (made once per key)."""
        assert self.vocab is not None
        key = (layout, separator_id)
        if self._kinds_key != key:
            self._kinds, self._kinds_key = token_kind_table(self.vocab, layout, separator_id), key
        return self._kinds

    def add_clean(self, clean: CleanBatch, layout: str, batch: Dict[str, np.ndarray]) -> None:
        """Accumulate a batch :func:`clean_batch` proved valid (what :meth:`_accumulate` adds)."""
        self.valid += len(clean.real)
        self.len_hist = _grow_add(self.len_hist, np.bincount(clean.real, minlength=batch["input_ids"].shape[1] + 1))
        if is_masked(layout):
            slots = batch["masked_lm_positions"].shape[1]
            self.pred_hist = _grow_add(self.pred_hist, np.bincount(clean.predictions, minlength=slots + 1))
        if clean.labels is not None:
            self.labels[layout] += np.bincount(clean.labels, minlength=2)[:2]
        self.composition += clean.composition
        self.real_tokens += clean.real_tokens
        self.unk_tokens += clean.unk_tokens


# --------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------


@dataclass
class FileResult:
    """What reading one file found: its records' statistics and what it shows of its directory."""

    path: str
    records: int
    corrupt: Optional[str]  # the corrupt-frame message that ended the file early, if any
    compression: str
    acc: Accumulator
    observed_seq: Optional[int]  # input_ids length of the file's first record that has one
    observed_pred: Optional[int]


def read_file(path: str, group: Group, vocab: Optional[VocabInfo], progress: Optional[Progress] = None) -> FileResult:
    """Read every record of ``path`` into a new :class:`Accumulator`, checked against ``group``
    (the file's directory as known when the file starts; it learns from the records as they
    come, as reading every file of the directory in order would). ``progress`` gets the
    records and file bytes (compressed bytes for gzip) read after each batch."""
    rewritten = rewritten_format_of(path)
    compression = detect_compression(path) if rewritten is None else "none"
    acc = Accumulator(vocab)
    observed = (group.observed_seq, group.observed_pred)
    reader = _FileReader(path, acc, group)
    done = 0
    corrupt = None
    try:
        if rewritten is not None:
            corrupt = _read_rewritten(path, rewritten, group, acc, progress)
        for batch in iter_record_batches(path) if rewritten is None else ():
            reader.add(batch)
            if progress is not None:
                progress(len(batch), batch.position - done)
                done = batch.position
    except RecordFormatError as exc:
        corrupt = str(exc)
    except OSError as exc:
        raise InspectError(f"{path}: read error ({exc.strerror or exc})") from None
    if progress is not None:
        try:
            progress(0, max(0, os.path.getsize(path) - done))
        except OSError:
            pass
    count = acc.records
    if corrupt:
        acc.add_bad(f"{path} after record {count - 1}" if count else path, [f"unreadable: {corrupt}"])
    seen_seq = group.observed_seq if observed[0] is None else None
    seen_pred = group.observed_pred if observed[1] is None else None
    return FileResult(path, count, corrupt, compression, acc, seen_seq, seen_pred)


def _read_rewritten(path: str, output_format: str, group: Group, acc: Accumulator, progress: Optional[Progress]
                    ) -> Optional[str]:
    """A Parquet / MDS file (``--output_format``) read through its format's own reader into the
    padded arrays of the TFRecord decoding of the same records, then checked and accumulated as
    those are; returns why the file could not be read to its end, or None."""
    if group.layout is None or group.seq is None or not group.ready():
        raise InspectError(
            f"{path}: a {output_format} file is checked against its directory's data_params.json (the layout and "
            "lengths); inspect the output directory it is in, with its manifest"
        )
    spec = layout_spec(group.layout, group.seq, group.pred or 0, group_pack(group))
    first = 0
    try:
        for arrays in container_for(output_format).read_feature_batches(path, spec):
            n = len(arrays["input_ids"])
            where = (lambda start: lambda i: f"{path} record {start + i}")(first)
            acc.records += n
            if n:
                group.learn(where(0), {name: a[0] for name, a in arrays.items()})
                acc.add_checked([arrays], np.arange(n), [], group, where)
            first += n
            if progress is not None:
                progress(n, 0)
    except (OSError, ValueError, KeyError, IndexError, RuntimeError) as exc:  # pyarrow's, streaming's and h5py's errors
        return f"not a readable {output_format} file of this layout ({type(exc).__name__}: {exc})"
    return None


class _FileReader:
    """Turns the batches of one file into checked, accumulated records."""

    def __init__(self, path: str, acc: Accumulator, group: Group) -> None:
        self.path = path
        self.acc = acc
        self.group = group
        self.features: Optional[List[Tuple[str, str, int]]] = None

    def where(self, first: int) -> Callable[[int], str]:
        return lambda i: f"{self.path} record {first + i}"

    def add(self, batch: RecordBatch) -> None:
        """Check and accumulate a batch. Records are decoded in bulk once the directory's layout
        and lengths are known; the first ones, and any that the bulk decoder leaves out (another
        layout or length, another encoding, malformed), one by one as they always were."""
        group, n = self.group, len(batch)
        where = self.where(batch.first)
        self.acc.records += n
        rows: List[Dict[str, np.ndarray]] = []
        index: List[np.ndarray] = []
        slow: List[Tuple[int, Dict[str, np.ndarray]]] = []
        bad: List[Tuple[int, List[str]]] = []
        i = 0
        while i < n and not group.ready():
            self._one(i, batch.payload(i), where, slow, bad)
            i += 1
        if i < n:
            arrays, decoded = decode_examples(
                batch.data, batch.starts[i:], batch.lengths[i:], self._features(), small_ints=True
            )
            fast = i + np.flatnonzero(decoded)
            if len(fast):
                rows.append(arrays)
                index.append(fast)
            rest = i + np.flatnonzero(~decoded)
            for j in rest[: np.searchsorted(rest, fast[0])] if len(fast) else rest:
                self._one(int(j), batch.payload(int(j)), where, slow, bad)
            if len(fast):
                # what the first bulk-decoded record teaches (only observed lengths can be new)
                group.learn(where(int(fast[0])), {name: a[0] for name, a in arrays.items()})
                for j in rest[np.searchsorted(rest, fast[0]) :]:
                    self._one(int(j), batch.payload(int(j)), where, slow, bad)
        if slow:
            assert group.layout is not None
            names = layout_names(group.layout)
            rows.append({name: np.stack([ex[name] for _, ex in slow]) for name in names})
            index.append(np.array([j for j, _ in slow], np.int64))
        self.acc.add_checked(rows, np.concatenate(index) if index else np.zeros(0, np.int64), bad, group, where)

    def _one(
        self,
        i: int,
        data: bytes,
        where: Callable[[int], str],
        slow: List[Tuple[int, Dict[str, np.ndarray]]],
        bad: List[Tuple[int, List[str]]],
    ) -> None:
        """Decode, learn from and structure-check one record (the record-by-record path)."""
        try:
            example = parse_example(data)
        except RecordFormatError as exc:
            bad.append((i, [str(exc)]))  # a malformed tf.train.Example
            return
        group = self.group
        group.learn(where(i), example)
        layout = group.layout
        assert layout is not None
        if group.seq is None:
            problem: Optional[str] = structure_problem(example, 0, 0, layout) or "missing feature(s)"
        else:
            problem = structure_problem(example, group.seq, group.pred or 0, layout, group_pack(group))
        if problem:
            bad.append((i, [problem]))
        else:
            slow.append((i, example))

    def _features(self) -> List[Tuple[str, str, int]]:
        """The wire layout of a structurally valid record of the (ready) group: sorted names."""
        if self.features is None:
            group = self.group
            assert group.layout is not None and group.seq is not None
            specs = sorted(layout_specs(group.layout), key=lambda spec: spec.name)
            self.features = [(s.name, s.dtype, feature_length(s, group.seq, group.pred or 0, group_pack(group)))
                             for s in specs]
        return self.features

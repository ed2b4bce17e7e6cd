"""``inspect_tfrecords --stats``: read every record once, check it, accumulate statistics.

:func:`inspect_stats` reads each file in batches of records (:func:`read_file`), checks each
record's structure and contents (:mod:`bert_data.format.checks`) against the layout and
lengths of its directory, accumulates histograms and counters of the valid ones
(:class:`Accumulator`), then checks each directory's ``data_params.json`` against what was read
(:func:`bert_data.format.manifest.verify_manifest`). The result is one JSON-able report.

Why it is fast: a batch of records is framed (:func:`~bert_data.format.records.iter_record_batches`)
and decoded (:func:`~bert_data.format.records.decode_examples`) by whole-batch numpy code;
the per-record decoder :func:`~bert_data.format.records.parse_example` only sees the records
that are not in the directory's layout (and the first ones, until the layout and lengths are
known). Files are read by several processes (:mod:`.parallel`); each file gets its own
:class:`Accumulator` and they are merged in file order, so the report is the same for any
number of workers, and the same as reading record by record.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import RecordFormatError
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
from ..format.manifest import verify_manifest
from ..format.records import RecordBatch, decode_examples, iter_record_batches, parse_example
from ..format.schema import feature_length
from . import InspectError
from .inputs import Group, Groups, InputFile, VocabInfo, detect_compression, vocab_differs

__all__ = [
    "MAX_REASONS",
    "Accumulator",
    "FileResult",
    "Inspection",
    "Progress",
    "keep_freed_memory",
    "read_file",
    "inspect_files",
    "inspect_stats",
]

MAX_REASONS = 10  # bad records quoted in the report (all are counted)

Progress = Callable[[int, int], None]  # (records, file bytes) read since the last call


_HEAP_PAD = 256 << 20
_heap_kept = False


def keep_freed_memory() -> None:
    """Ask glibc to keep up to 256 MB of freed heap instead of returning it to the system.

    Decoding and checking a batch makes a few dozen numpy temporaries of a few MB each; by
    default glibc hands each one back to the kernel when it is freed (mmap threshold, heap trim),
    so the next batch page-faults all of it in again: measured at over half the time of
    ``--stats``. Once per process; a no-op where ``mallopt`` is not glibc's."""
    global _heap_kept
    if _heap_kept:
        return
    _heap_kept = True
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(-2, _HEAP_PAD)  # M_TOP_PAD
    except (AttributeError, OSError, TypeError):  # pragma: no cover - not glibc
        pass


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
    compression = detect_compression(path)
    acc = Accumulator(vocab)
    observed = (group.observed_seq, group.observed_pred)
    reader = _FileReader(path, acc, group)
    done = 0
    corrupt = None
    try:
        for batch in iter_record_batches(path):
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
            problem = structure_problem(example, group.seq, group.pred or 0, layout)
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
            self.features = [(s.name, s.dtype, feature_length(s, group.seq, group.pred or 0)) for s in specs]
        return self.features


# --------------------------------------------------------------------------------------------
# Every file, and the report
# --------------------------------------------------------------------------------------------


def _read_all(
    files: Sequence[InputFile],
    vocab: Optional[VocabInfo],
    dirs_given: Sequence[str],
    num_workers: int,
    progress: Optional[Progress],
) -> Tuple[Dict[str, Group], List[FileResult]]:
    """Read every file: the groups (one per manifest, or per directory without one; with what
    reading found) and each file's result,
    in file order. With ``num_workers`` > 1, files are read by worker processes (:mod:`.parallel`)."""
    groups = Groups(dirs_given)
    tasks: List[Tuple[str, Group]] = [(f.path, groups.of(f.path)) for f in files]
    results: Optional[List[FileResult]] = None
    if num_workers > 1 and len(tasks) > 1:
        from .parallel import read_files_in_parallel, worker_count

        workers = worker_count([path for path, _ in tasks], num_workers)
        if workers > 1:
            results = read_files_in_parallel(tasks, vocab, workers, progress)
    if results is None:
        results = [read_file(path, group, vocab, progress) for path, group in tasks]
    for (path, group), result in zip(tasks, results):
        base = os.path.basename(path)
        group.counts[base] = result.records
        group.compressions[base] = result.compression
        if group.observed_seq is None:
            group.observed_seq = result.observed_seq
        if group.observed_pred is None:
            group.observed_pred = result.observed_pred
    return groups.by_key, results


def _hist_summary(hist: np.ndarray) -> Dict[str, Any]:
    total = int(hist.sum())
    values = np.flatnonzero(hist)
    if total == 0:
        return {"histogram": hist.tolist(), "count": 0, "min": None, "max": None, "mean": None}
    mean = float((np.arange(len(hist)) * hist).sum() / total)
    return {
        "histogram": hist.tolist(),
        "count": total,
        "min": int(values[0]),
        "max": int(values[-1]),
        "mean": round(mean, 4),
    }


def _frac(a: int, b: int) -> Optional[float]:
    return round(a / b, 6) if b else None


@dataclass
class Inspection:
    """What :func:`inspect_files` found: the JSON-able ``report`` and, per file in order, what
    reading it gave (e.g. each shard's own [UNK] rate, for the plot)."""

    report: Dict[str, Any]
    files: List[FileResult]


def inspect_stats(
    files: Sequence[InputFile],
    vocab: Optional[VocabInfo],
    dirs_given: Sequence[str] = (),
    num_workers: int = 1,
    progress: Optional[Progress] = None,
) -> Dict[str, Any]:
    """Read every file once; return the JSON-able report (``ok`` False when anything is bad).
    The arguments are :func:`inspect_files`'."""
    return inspect_files(files, vocab, dirs_given, num_workers, progress).report


def inspect_files(
    files: Sequence[InputFile],
    vocab: Optional[VocabInfo],
    dirs_given: Sequence[str] = (),
    num_workers: int = 1,
    progress: Optional[Progress] = None,
) -> Inspection:
    """Read every file once: the report and each file's result.

    ``dirs_given``: the directories given as PATH (all their shards are read, so a shard the
    manifest lists but that is missing is a problem rather than a warning). ``num_workers``:
    processes reading files at once (the report does not depend on it). ``progress``: called
    with the records and file bytes read as reading goes on."""
    keep_freed_memory()
    groups, results = _read_all(files, vocab, dirs_given, num_workers, progress)
    return Inspection(_build_report(groups, results, vocab), results)


def _build_report(groups: Dict[str, Group], results: List[FileResult], vocab: Optional[VocabInfo]) -> Dict[str, Any]:
    """The report of every file read (merged in file order) and of their manifests."""
    acc = Accumulator(vocab)
    for result in results:
        acc.merge(result.acc)
    file_reports = [
        {"path": r.path, "records": r.records, "bad_records": r.acc.bad, "compression": r.compression,
         "corrupt": r.corrupt}
        for r in results
    ]
    manifest_checks = [verify_manifest(g.manifest, g.observed()) for g in groups.values() if g.manifest is not None]
    problems = [p for check in manifest_checks for p in check.problems]
    warnings = [w for check in manifest_checks for w in check.warnings]
    if vocab is not None:
        for g in groups.values():
            if g.manifest is not None and vocab_differs(vocab, g.manifest):
                warnings.append(
                    f"{vocab.path} is not the vocabulary recorded in {g.manifest.path} (sha256 differs): "
                    "decoded tokens and [UNK]/[MASK] statistics may be wrong"
                )
    layouts = {g.layout for g in groups.values() if g.layout is not None}
    any_masked = any(is_masked(x) for x in layouts)
    report: Dict[str, Any] = {
        "files": file_reports,
        "record_schema": (next(iter(layouts)) if len(layouts) == 1 else "mixed") if layouts else None,
        "instances": acc.records,
        "valid_instances": acc.valid,
        "bad_records": acc.bad,
        "bad_reasons": acc.reasons,
        "bad_reason_counts": dict(acc.reason_counts.most_common()),
        "lengths": [_lengths_entry(g) for g in groups.values()],
        "real_length": _hist_summary(acc.len_hist),
        "masked_per_instance": _hist_summary(acc.pred_hist) if any_masked else None,
        "nsp": None,
        "sop": None,
        "mask_composition": None,
        "unk": None,
        "vocab_file": vocab.path if vocab else None,
        "manifests": [check.report for check in manifest_checks],
        "manifest_problems": problems,
        "warnings": warnings,
    }
    report.update(_label_stats(acc, layouts))
    if vocab is not None:
        report.update(_vocab_stats(acc, any_masked))
    report["ok"] = acc.bad == 0 and not problems
    return report


def _lengths_entry(g: Group) -> Dict[str, Any]:
    return {
        "directory": g.directory,
        "record_schema": g.layout,
        "record_schema_from": g.layout_from,
        "max_seq_length": g.seq,
        "max_predictions_per_seq": g.pred if g.layout is None or is_masked(g.layout) else None,
        "from": g.lengths_from,
    }


def _label_stats(acc: Accumulator, layouts: set) -> Dict[str, Any]:
    """The NSP and SOP label balance, for the paired layouts read."""
    out: Dict[str, Any] = {}
    if "nsp" in layouts:
        nsp = acc.labels["nsp"]
        out["nsp"] = {
            "is_next": int(nsp[0]),
            "random_next": int(nsp[1]),
            "random_fraction": _frac(int(nsp[1]), int(nsp.sum())),
        }
    if "sop" in layouts:
        sop = acc.labels["sop"]
        out["sop"] = {
            "in_order": int(sop[0]),
            "swapped": int(sop[1]),
            "swapped_fraction": _frac(int(sop[1]), int(sop.sum())),
        }
    return out


def _vocab_stats(acc: Accumulator, any_masked: bool) -> Dict[str, Any]:
    """The statistics that need the vocabulary: mask composition and [UNK] rate."""
    out: Dict[str, Any] = {}
    if any_masked:
        masked = int(acc.composition.sum())
        out["mask_composition"] = {
            "predictions": masked,
            "mask": int(acc.composition[0]),
            "kept": int(acc.composition[1]),
            "random": int(acc.composition[2]),
            "mask_fraction": _frac(int(acc.composition[0]), masked),
            "kept_fraction": _frac(int(acc.composition[1]), masked),
            "random_fraction": _frac(int(acc.composition[2]), masked),
        }
    out["unk"] = {
        "tokens": acc.real_tokens,
        "unk": acc.unk_tokens,
        "rate": _frac(acc.unk_tokens, acc.real_tokens),
    }
    return out

"""``inspect_tfrecords --stats``: read every record once, check it, accumulate statistics.

:func:`inspect_stats` streams each file in batches of :data:`BATCH_SIZE` decoded records,
checks each record's structure and contents (:mod:`bert_data.format.checks`) against the
layout and lengths of its directory, accumulates histograms and counters of the valid ones
(:class:`Accumulator`), then checks each directory's ``data_params.json`` against what was read
(:func:`bert_data.format.manifest.verify_manifest`). The result is one JSON-able report.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import RecordFormatError
from ..format.checks import check_records, is_masked, is_paired, layout_names, structure_problem
from ..format.manifest import verify_manifest
from ..format.records import iter_records, parse_example
from . import InspectError
from .inputs import Group, InputFile, VocabInfo, detect_compression, file_directory, vocab_differs

__all__ = ["BATCH_SIZE", "MAX_REASONS", "Accumulator", "inspect_stats"]

BATCH_SIZE = 1024  # decoded records checked and accumulated at a time
MAX_REASONS = 10  # bad records quoted in the report (all are counted)


def _grow_add(hist: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if len(counts) > len(hist):
        hist = np.concatenate([hist, np.zeros(len(counts) - len(hist), np.int64)])
    hist[: len(counts)] += counts
    return hist


class Accumulator:
    """The statistics of every record read so far, and the reasons the bad ones are bad."""

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
        self.lengths_seen: Counter = Counter()
        self.layouts: Counter = Counter()  # layout -> valid records

    def add_bad(self, where: str, messages: List[str]) -> None:
        self.bad += 1
        for m in messages:
            self.reason_counts[m] += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{where}: {'; '.join(messages)}")

    def add_batch(self, examples: List[Tuple[str, Any]], group: Group) -> None:
        """Check and accumulate one batch of decoded records: ``(where, example)`` pairs, where
        ``example`` is a decoded dict or the message of a malformed ``tf.train.Example``."""
        good: List[Tuple[int, str, Dict[str, Any]]] = []
        bad: List[Tuple[int, str, List[str]]] = []
        for index, (where, example) in enumerate(examples):
            if isinstance(example, str):  # a malformed tf.train.Example
                bad.append((index, where, [example]))
                continue
            group.learn(where, example)
            layout = group.layout
            assert layout is not None
            if group.seq is None:
                problem: Optional[str] = structure_problem(example, 0, 0, layout) or "missing feature(s)"
            else:
                problem = structure_problem(example, group.seq, group.pred or 0, layout)
            if problem:
                bad.append((index, where, [problem]))
            else:
                good.append((index, where, example))
        ok = np.zeros(0, bool)
        if good:
            layout = group.layout
            assert layout is not None
            batch = {name: np.stack([ex[name] for _, _, ex in good]) for name in layout_names(layout)}
            separator_id = group.separator.id(self.vocab.tokens if self.vocab else None)
            checks = check_records(batch, self.vocab, layout, separator_id)
            bad_any = np.zeros(len(good), bool)
            for bad_rows, _ in checks:
                bad_any |= bad_rows
            for i in np.flatnonzero(bad_any):
                bad.append((good[i][0], good[i][1], [msg for bad_rows, msg in checks if bad_rows[i]]))
            ok = ~bad_any
        for _, where, messages in sorted(bad, key=lambda b: b[0]):
            self.add_bad(where, messages)
        if not ok.any():
            return
        self._accumulate({name: a[ok] for name, a in batch.items()}, layout, separator_id)

    def _accumulate(self, b: Dict[str, np.ndarray], layout: str, separator_id: Optional[int] = None) -> None:
        ids, mask = b["input_ids"], b["input_mask"]
        n, seq = ids.shape
        self.valid += n
        self.layouts[layout] += n
        real = mask.sum(axis=1)
        self.len_hist = _grow_add(self.len_hist, np.bincount(real, minlength=seq + 1))
        masked = is_masked(layout)
        if masked:
            pos, mids = b["masked_lm_positions"], b["masked_lm_ids"]
            prefix = pos != 0
            self.lengths_seen[(seq, pos.shape[1])] += n
            self.pred_hist = _grow_add(self.pred_hist, np.bincount(prefix.sum(axis=1), minlength=pos.shape[1] + 1))
        else:
            self.lengths_seen[(seq, None)] += n
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
        specials = [v.pad, v.cls, v.sep, v.mask]
        if not is_paired(layout) and separator_id is not None and separator_id != v.unk:
            specials.append(separator_id)
        special = np.isin(orig_ids, specials)
        self.real_tokens += int((run & ~special).sum())
        self.unk_tokens += int((run & (orig_ids == v.unk)).sum())


def _stream_file(path: str, acc: Accumulator, group: Group) -> Tuple[int, Optional[str]]:
    """Read every record of ``path`` into ``acc``; returns (records, corrupt-frame message or None)."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    count = 0
    pending: List[Tuple[str, Any]] = []
    corrupt = None
    with handle:
        try:
            for data in iter_records(handle):
                where = f"{path} record {count}"
                count += 1
                acc.records += 1
                try:
                    pending.append((where, parse_example(data)))
                except RecordFormatError as exc:
                    pending.append((where, str(exc)))  # reported in order with the batch
                if len(pending) >= BATCH_SIZE:
                    acc.add_batch(pending, group)
                    pending = []
        except RecordFormatError as exc:
            corrupt = str(exc)
        except OSError as exc:
            raise InspectError(f"{path}: read error ({exc.strerror or exc})") from None
    if pending:
        acc.add_batch(pending, group)
    if corrupt:
        acc.add_bad(f"{path} after record {count - 1}" if count else path, [f"unreadable: {corrupt}"])
    return count, corrupt


def _read_all(
    files: Sequence[InputFile], acc: Accumulator, dirs_given: Sequence[str]
) -> Tuple[Dict[str, Group], List[Dict[str, Any]]]:
    """Stream every file into ``acc``: the directory groups and the per-file report entries."""
    groups: Dict[str, Group] = {}
    file_reports = []
    for f in files:
        directory = file_directory(f.path)
        group = groups.get(directory)
        if group is None:
            group = Group.for_directory(directory, dir_given=directory in dirs_given)
            groups[directory] = group
        compression = detect_compression(f.path)
        before = acc.bad
        count, corrupt = _stream_file(f.path, acc, group)
        base = os.path.basename(f.path)
        group.counts[base] = count
        group.compressions[base] = compression
        file_reports.append(
            {"path": f.path, "records": count, "bad_records": acc.bad - before, "compression": compression,
             "corrupt": corrupt}
        )
    return groups, file_reports


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


def inspect_stats(
    files: Sequence[InputFile], vocab: Optional[VocabInfo], dirs_given: Sequence[str] = ()
) -> Dict[str, Any]:
    """Stream every file once; return the JSON-able report (``ok`` False when anything is bad).

    ``dirs_given``: the directories given as PATH (all their shards are read, so a shard the
    manifest lists but that is missing is a problem rather than a warning)."""
    acc = Accumulator(vocab)
    groups, file_reports = _read_all(files, acc, dirs_given)
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

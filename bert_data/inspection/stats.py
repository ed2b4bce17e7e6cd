"""``inspect_tfrecords --stats``: read every record once, check it, accumulate statistics.

:func:`inspect_stats` reads each file in batches of records
(:func:`~bert_data.inspection.file_stats.read_file`), checks each record's structure and
contents (:mod:`bert_data.format.checks`) against the layout and lengths of its directory,
accumulates histograms and counters of the valid ones
(:class:`~bert_data.inspection.file_stats.Accumulator`), then checks each directory's
``data_params.json`` against what was read (:func:`bert_data.format.manifest.verify_manifest`).
The result is one JSON-able report.

One file's reading, and why it is fast, is :mod:`.file_stats`. Files are read by several
processes (:mod:`.parallel`); each file gets its own :class:`~.file_stats.Accumulator` and they
are merged in file order, so the report is the same for any number of workers, and the same as
reading record by record. This module imports both of them; neither imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..expectations import data_warnings
from ..format.checks import is_masked
from ..format.manifest import verify_manifest
from ..format.packed import instance_layout, is_packed
from ..memory import keep_freed_memory
from .file_stats import Accumulator, FileResult, Progress, read_file
from .inputs import Group, Groups, InputFile, VocabInfo, vocab_differs
from .parallel import read_files_in_parallel, worker_count

__all__ = [
    "Inspection",
    "inspect_files",
    "inspect_stats",
]


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
    report["packing"] = _packing_stats(acc) if any(is_packed(x) for x in layouts) else None
    report.update(_label_stats(acc, {instance_layout(x) if is_packed(x) else x for x in layouts}))
    if vocab is not None:
        report.update(_vocab_stats(acc, any_masked))
    report["data_warnings"] = _data_warnings(groups, report)
    report["ok"] = acc.bad == 0 and not problems
    # the verdict never says OK over a warning about the data (the records may still all be valid)
    report["verdict"] = "FAILED" if not report["ok"] else "WARNINGS" if report["data_warnings"] else "OK"
    return report


def _data_warnings(groups: Dict[str, Group], report: Dict[str, Any]) -> List[str]:
    """How the data differs from what its settings make expected
    (:func:`bert_data.expectations.data_warnings`): per manifest, from its counters, and with
    one manifest (or none) from the NSP labels actually read."""
    nsp = report.get("nsp")
    random_next = nsp["random_next"] if nsp else None
    instances = nsp["random_next"] + nsp["is_next"] if nsp else None
    manifests = [g.manifest for g in groups.values() if g.manifest is not None]
    if not manifests:
        return data_warnings({"record_schema": "nsp"}, random_next, instances) if nsp else []
    if len(manifests) == 1:
        return data_warnings(manifests[0].data, random_next, instances)
    return [f"{m.path}: {w}" for m in manifests for w in data_warnings(m.data)]


def _lengths_entry(g: Group) -> Dict[str, Any]:
    return {
        "directory": g.directory,
        "record_schema": g.layout,
        "record_schema_from": g.layout_from,
        "max_seq_length": g.seq,
        "max_predictions_per_seq": g.pred if g.layout is None or is_masked(g.layout) else None,
        "from": g.lengths_from,
    }


def _packing_stats(acc: Accumulator) -> Dict[str, Any]:
    """Packed rows (``--packing``): rows by instances, the average, and the padding left."""
    depth = acc.depth_hist
    rows = int(depth.sum())
    instances = int((depth * np.arange(len(depth))).sum())
    return {
        "rows": rows,
        "instances": instances,
        "average_sequences_per_row": round(instances / rows, 4) if rows else 0.0,
        "rows_by_sequences": {str(k): int(v) for k, v in enumerate(depth.tolist()) if v},
        "padding": round(1 - acc.row_tokens / acc.row_slots, 6) if acc.row_slots else 0.0,
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

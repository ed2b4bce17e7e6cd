"""The ``--stats`` report (:func:`bert_data.inspection.stats.inspect_stats`) for people: as
text (:func:`format_stats`) and as histograms in a PNG (:func:`write_plot`, needs matplotlib,
imported only when a plot is asked for)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, List, Optional

import numpy as np

from ..format.checks import is_masked
from . import InspectError

__all__ = ["format_stats", "import_pyplot", "write_plot"]


def _text_histogram(hist: np.ndarray, max_rows: int = 16, width: int = 40) -> List[str]:
    values = np.flatnonzero(hist)
    if len(values) == 0:
        return ["  (no data)"]
    lo, hi = int(values[0]), int(values[-1])
    step = max(1, math.ceil((hi - lo + 1) / max_rows))
    rows = []
    for start in range(lo, hi + 1, step):
        stop = min(start + step - 1, hi)
        rows.append((f"{start}" if start == stop else f"{start}-{stop}", int(hist[start : stop + 1].sum())))
    top = max(c for _, c in rows)
    label_w = max(len(label) for label, _ in rows)
    return [f"  {label:>{label_w}} | {'#' * max(1 if c else 0, round(width * c / top)):<{width}} {c}" for label, c in rows]


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def format_stats(report: Dict[str, Any]) -> str:
    """The human-readable report printed by ``--stats`` (last line ``OK`` or ``FAILED``)."""
    out: List[str] = []
    files = report["files"]
    comp = Counter(f["compression"] for f in files)
    out.append(
        f"files: {len(files)} ({', '.join(f'{v} {k}' for k, v in sorted(comp.items()))})"
    )
    out.append(
        f"instances: {report['instances']} ({report['valid_instances']} valid, {report['bad_records']} bad)"
    )
    for entry in report["lengths"]:
        layout = entry.get("record_schema")
        if layout is not None:
            out.append(f"record schema: {layout} (from {entry.get('record_schema_from') or 'nowhere'})")
        lengths = f"max_seq_length {entry['max_seq_length']}"
        if layout is None or is_masked(layout):
            lengths += f", max_predictions_per_seq {entry['max_predictions_per_seq']}"
        out.append(f"{lengths} (from {entry['from'] or 'nowhere: no record readable'})")
    rl = report["real_length"]
    out.append(f"real length (tokens incl. [CLS]/[SEP]): min {rl['min']}, mean {rl['mean']}, max {rl['max']}")
    out += _text_histogram(np.asarray(rl["histogram"]))
    mp = report["masked_per_instance"]
    if mp is not None:
        out.append(f"masked positions per instance: min {mp['min']}, mean {mp['mean']}, max {mp['max']}")
        out += _text_histogram(np.asarray(mp["histogram"]))
    nsp = report.get("nsp")
    if nsp is not None:
        out.append(
            f"next sentence labels: {nsp['is_next']} is-next (0), {nsp['random_next']} random (1); "
            f"random fraction {_pct(nsp['random_fraction'])}"
        )
    sop = report.get("sop")
    if sop is not None:
        out.append(
            f"sentence order labels: {sop['in_order']} in order (0), {sop['swapped']} swapped (1); "
            f"swapped fraction {_pct(sop['swapped_fraction'])}"
        )
    mc = report["mask_composition"]
    if mp is None:
        if report.get("record_schema") is not None:
            out.append("mask composition: n/a (unmasked records: masks are drawn in the reader)")
    elif mc is None:
        out.append("mask composition: n/a (no vocabulary; pass --vocab_file)")
    else:
        out.append(
            f"mask composition over {mc['predictions']} predictions: [MASK] {_pct(mc['mask_fraction'])}, "
            f"kept {_pct(mc['kept_fraction'])}, random {_pct(mc['random_fraction'])}"
        )
    unk = report["unk"]
    if unk is None:
        out.append("[UNK] rate: n/a (no vocabulary; pass --vocab_file)")
    else:
        out.append(f"[UNK] rate: {_pct(unk['rate'])} ({unk['unk']} of {unk['tokens']} real non-special tokens)")
    for m in report["manifests"]:
        out.append(f"checked against {m['path']}" + ("" if m["n_examples_checked"] else " (n_examples not checked)"))
    for w in report["warnings"]:
        out.append(f"warning: {w}")
    for p in report["manifest_problems"]:
        out.append(f"MISMATCH: {p}")
    if report["bad_records"]:
        out.append(f"BAD RECORDS: {report['bad_records']}")
        for reason, count in report["bad_reason_counts"].items():
            out.append(f"  {count} x {reason}")
        out.append("  first ones:")
        out += [f"    {r}" for r in report["bad_reasons"]]
    out.append("OK" if report["ok"] else "FAILED")
    return "\n".join(out)


def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed); InspectError when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InspectError("--plot needs matplotlib, which is not installed: pip install matplotlib") from None
    return plt


def write_plot(report: Dict[str, Any], path: str, plt: Any) -> None:
    """The length (and masking) histograms of a report as a PNG, the headline numbers as caption."""
    panels = [("real_length", "real length per instance", "tokens incl. [CLS]/[SEP]")]
    if report.get("masked_per_instance") is not None:
        panels.append(("masked_per_instance", "masked positions per instance", "predictions"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (key, title, xlabel) in zip(axes[0], panels):
        hist = np.asarray(report[key]["histogram"])
        ax.bar(np.arange(len(hist)), hist, width=1.0, color="#4c72b0")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("instances")
    caption = f"{report['instances']} instances"
    if report.get("record_schema"):
        caption += f" ({report['record_schema']})"
    if report.get("nsp"):
        caption += f"; NSP random {_pct(report['nsp']['random_fraction'])}"
    if report.get("sop"):
        caption += f"; SOP swapped {_pct(report['sop']['swapped_fraction'])}"
    mc = report["mask_composition"]
    if mc:
        caption += (
            f"; [MASK] {_pct(mc['mask_fraction'])} kept {_pct(mc['kept_fraction'])} "
            f"random {_pct(mc['random_fraction'])}"
        )
    if report["unk"]:
        caption += f"; [UNK] {_pct(report['unk']['rate'])}"
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise InspectError(f"--plot {path}: cannot be written ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)

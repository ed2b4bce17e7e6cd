"""The ``--stats`` report (:func:`bert_data.inspection.stats.inspect_stats`) for people: as
text (:func:`format_stats`) and as histograms in a PNG (:func:`write_plot`, needs matplotlib,
imported only when a plot is asked for)."""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import plural  # noqa: F401  (re-exported: report text uses it)
from ..expectations import NSP_RANDOM_BAND

from ..format.checks import is_masked
from . import InspectError

__all__ = ["PLOT_INSTALL_HINT", "format_stats", "import_pyplot", "plural", "shard_rows", "verdict", "write_plot"]

PLOT_INSTALL_HINT = "--plot needs matplotlib: pip install 'bert_data[plot]'"


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


def verdict(report: Dict[str, Any]) -> str:
    """``OK``, ``WARNINGS`` (every record valid, but the data is not what its settings make
    expected: see ``data_warnings``) or ``FAILED``; never OK over a warning about the data."""
    if "verdict" in report:
        return report["verdict"]
    return "FAILED" if not report.get("ok") else "WARNINGS" if report.get("data_warnings") else "OK"


def _records_word(report: Dict[str, Any]) -> str:
    """What the record count counts: packed rows hold several instances each (counted on the
    ``packed rows:`` line), so their records are not called instances."""
    layouts = [str(entry.get("record_schema")) for entry in report["lengths"]]
    if layouts and all(layout.endswith("_packed") for layout in layouts):
        return "rows"
    return "records" if any(layout.endswith("_packed") for layout in layouts) else "instances"


def format_stats(report: Dict[str, Any]) -> str:
    """The human-readable report printed by ``--stats`` (last line ``OK``, ``WARNINGS: ...`` or
    ``FAILED``)."""
    out: List[str] = []
    files = report["files"]
    comp = Counter(f["compression"] for f in files)
    out.append(
        f"files: {len(files)} ({', '.join(f'{v} {k}' for k, v in sorted(comp.items()))})"
    )
    out.append(
        f"{_records_word(report)}: {report['instances']} ({report['valid_instances']} valid, {report['bad_records']} bad)"
    )
    for entry in report["lengths"]:
        layout = entry.get("record_schema")
        if layout is not None:
            out.append(f"record schema: {layout} (from {entry.get('record_schema_from') or 'nowhere'})")
        lengths = f"max_seq_length {entry['max_seq_length']}"
        if layout is None or is_masked(layout):
            lengths += f", max_predictions_per_seq {entry['max_predictions_per_seq']}"
        out.append(f"{lengths} (from {entry['from'] or 'nowhere: no record readable'})")
    packing = report.get("packing")
    if packing is not None:
        by_depth = ", ".join(f"{k}: {v}" for k, v in packing["rows_by_sequences"].items())
        out.append(
            f"packed rows: {packing['rows']} holding {packing['instances']} instances, "
            f"{packing['average_sequences_per_row']} per row (rows by instances {by_depth}); "
            f"padding {packing['padding']:.2%}; the statistics below are per instance"
        )
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
    for w in report.get("data_warnings", []):
        out.append(f"warning: {w}")
    for p in report["manifest_problems"]:
        out.append(f"MISMATCH: {p}")
    if report["bad_records"]:
        out.append(f"BAD RECORDS: {report['bad_records']}")
        for reason, count in report["bad_reason_counts"].items():
            out.append(f"  {count} x {reason}")
        out.append("  first ones:")
        out += [f"    {r}" for r in report["bad_reasons"]]
    word = verdict(report)
    if word == "WARNINGS":
        word = (f"WARNINGS: {plural(len(report['data_warnings']), 'warning')} about the data above "
                f"(every record is valid; the data is not what its settings make expected)")
    out.append(word)
    return "\n".join(out)


def import_pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed); InspectError when not installed."""
    try:
        import logging

        import matplotlib

        matplotlib.use("Agg")
        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # "findfont: ... not found": one per
        # glyph family a machine lacks (a score of lines on stderr, --quiet or not); the plot falls back by itself
        import matplotlib.pyplot as plt
    except ImportError:
        raise InspectError(PLOT_INSTALL_HINT) from None
    return plt


def shard_rows(results: Sequence[Any]) -> List[Tuple[str, int, int, int]]:
    """``(file name, records, [UNK] tokens, real tokens)`` of each file read
    (:class:`bert_data.inspection.file_stats.FileResult`), for the plot's [UNK]-per-file panel."""
    return [(os.path.basename(r.path), r.records, r.acc.unk_tokens, r.acc.real_tokens) for r in results]


def write_plot(
    report: Dict[str, Any], path: str, plt: Any, shards: Optional[Sequence[Tuple[str, int, int, int]]] = None
) -> None:
    """The report as one PNG that answers "is my data right?" at a glance: real lengths and
    predictions per instance (log scale: a few odd instances stay visible next to thousands of
    full ones), the NSP/SOP label balance and the mask composition against what BERT's recipe
    gives (dashed), the [UNK] rate of each file (``shards``, from :func:`shard_rows`), and the
    verdict with the headline numbers."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    _plot_hist(axes[0][0], report["real_length"], "real length per instance", "tokens incl. [CLS]/[SEP]")
    mp = report.get("masked_per_instance")
    if mp is None:
        _plot_none(axes[0][1], "masked positions per instance", "unmasked records: masks are drawn in the reader")
    else:
        _plot_hist(axes[0][1], mp, "masked positions per instance", "predictions")
    _plot_labels(axes[0][2], report)
    _plot_composition(axes[1][0], report)
    _plot_unk(axes[1][1], report, shards or [])
    _plot_summary(axes[1][2], report)
    word = verdict(report)
    title = {"OK": "OK", "FAILED": "FAILED, see the text report"}.get(
        word, f"WARNINGS ({len(report.get('data_warnings', []))}), see the text report")
    packing = report.get("packing")
    counted = f"{report['instances']} {_records_word(report)}"
    if packing is not None:
        counted += f" holding {packing['instances']} instances"
    fig.suptitle(
        f"{counted} ({report.get('record_schema') or 'no layout'}): " + title,
        fontsize=13, color={"OK": "#2a7d2a", "FAILED": "#b22222"}.get(word, "#c77c00"),
    )
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise InspectError(f"--plot {path}: cannot be written ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


_BLUE, _GREY, _RED = "#4c72b0", "#999999", "#b22222"


def _plot_none(ax: Any, title: str, why: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, color=_GREY, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _plot_hist(ax: Any, summary: Dict[str, Any], title: str, xlabel: str) -> None:
    hist = np.asarray(summary["histogram"])
    if not hist.sum():
        _plot_none(ax, title, "no valid instance")
        return
    ax.bar(np.arange(len(hist)), hist, width=1.0, color=_BLUE)
    ax.set_yscale("log")
    ax.set_ylim(0.7, max(10.0, float(hist.max()) * 2))  # a count of 1 stays visible; at least a decade
    ax.set_xlim(-0.5, len(hist) - 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{title}\nmin {summary['min']}, mean {summary['mean']}, max {summary['max']}", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("instances (log scale)")


def _bars(ax: Any, names: Sequence[str], counts: Sequence[int], expected: Sequence[float], title: str) -> None:
    """Shares of ``counts`` as bars labelled with their percentage; ``expected`` shares dashed."""
    total = sum(counts)
    shares = [c / total if total else 0.0 for c in counts]
    x = np.arange(len(names))
    ax.bar(x, [100 * v for v in shares], color=_BLUE, width=0.6)
    for i, (share, count) in enumerate(zip(shares, counts)):
        top = max(share, expected[i] if i < len(expected) else 0.0)
        ax.text(i, 100 * top + 2, f"{100 * share:.1f}% ({count})", ha="center", va="bottom", fontsize=9)
    for i, want in enumerate(expected):
        ax.hlines(100 * want, i - 0.4, i + 0.4, colors=_RED, linestyles="dashed")
    ax.set_xticks(x, names)
    ax.set_ylim(0, 115)
    ax.set_ylabel("% of total")
    ax.set_title(title, fontsize=10)


def _plot_labels(ax: Any, report: Dict[str, Any]) -> None:
    nsp, sop = report.get("nsp"), report.get("sop")
    if nsp is not None:
        _bars(ax, ["is next (0)", "random (1)"], [nsp["is_next"], nsp["random_next"]], [0.5, 0.5],
              f"NSP labels (dashed: 50%; {NSP_RANDOM_BAND[0]:.0%}-{NSP_RANDOM_BAND[1]:.0%} random is BERT's)")
    elif sop is not None:
        _bars(ax, ["in order (0)", "swapped (1)"], [sop["in_order"], sop["swapped"]], [0.5, 0.5],
              "SOP labels (dashed: 50%)")
    else:
        _plot_none(ax, "label balance", "no NSP/SOP labels in this layout")


def _plot_composition(ax: Any, report: Dict[str, Any]) -> None:
    mc = report.get("mask_composition")
    if mc is None:
        why = "no vocabulary: pass --vocab_file" if report.get("masked_per_instance") else "unmasked records"
        _plot_none(ax, "mask composition", why)
        return
    _bars(ax, ["[MASK]", "kept", "random"], [mc["mask"], mc["kept"], mc["random"]], [0.8, 0.1, 0.1],
          f"mask composition, {mc['predictions']} predictions (dashed: 80/10/10)")


def _plot_unk(ax: Any, report: Dict[str, Any], shards: Sequence[Tuple[str, int, int, int]]) -> None:
    unk = report.get("unk")
    if unk is None or not shards:
        _plot_none(ax, "[UNK] rate per file", "no vocabulary: pass --vocab_file")
        return
    rates = [100 * u / t if t else 0.0 for _, _, u, t in shards]
    x = np.arange(len(shards))
    ax.bar(x, rates, color=[_RED if r > 1 else _BLUE for r in rates], width=0.8)
    overall = 100 * (unk["rate"] or 0.0)
    ax.axhline(overall, color=_GREY, linestyle="dashed", label=f"all files: {overall:.3f}%")
    ax.axhline(1.0, color=_RED, linestyle="dotted", label="1%: wrong vocabulary or case?")
    if len(shards) <= 12:
        ax.set_xticks(x, [name for name, _, _, _ in shards], rotation=45, ha="right", fontsize=7)
    else:
        ax.set_xlabel(f"file (1..{len(shards)}, in order)")
    ax.set_ylim(0, max(max(rates, default=0.0), overall, 1.0) * 1.2)
    ax.set_ylabel("% of real tokens")
    ax.set_title("[UNK] rate per file", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")


def _plot_summary(ax: Any, report: Dict[str, Any]) -> None:
    lines = [
        f"files: {len(report['files'])}",
        f"{_records_word(report)}: {report['instances']}",
        f"valid: {report['valid_instances']}, bad: {report['bad_records']}",
        f"schema: {report.get('record_schema')}",
        *([f"instances per row: {report['packing']['average_sequences_per_row']}",
           f"padding: {report['packing']['padding']:.2%}"] if report.get("packing") is not None else []),
        f"manifest mismatches: {len(report['manifest_problems'])}",
        f"warnings: {len(report['warnings']) + len(report.get('data_warnings', []))}",
    ]
    for warning in report.get("data_warnings", [])[:3]:
        lines.append(f"  ! {warning[:52]}")
    for reason, count in list(report["bad_reason_counts"].items())[:4]:
        lines.append(f"  {count} x {reason[:48]}")
    ax.axis("off")
    ax.set_title("summary", fontsize=10)
    ax.text(0.02, 0.95, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=9, transform=ax.transAxes,
            color=_BLUE if verdict(report) == "OK" else _RED)

"""Packed rows (``--packing``: the ``*_packed`` layouts of :mod:`bert_data.format.schema`):
what a valid row holds, and the instances it holds.

A row is Habana's MLPerf packed record: up to k instances back to back, ``input_mask`` the
instance's index in the row (1..k, 0 on padding), ``positions`` restarting at 0 at each
``[CLS]``, ``masked_lm_positions`` offsets into the row with ``masked_lm_weights`` the
prediction's instance, and for NSP/SOP ``next_sentence_positions`` (each ``[CLS]``),
``next_sentence_labels`` and ``next_sentence_weights`` (1.0 per instance) in k slots.

:func:`row_checks` states the row-level invariants (vectorised over ``(n, k)`` arrays, as
:mod:`bert_data.format.checks`, which checks the unpacked instances of the rows that pass them
with the instance layout's own checks); :func:`unpack_rows` turns valid rows back into the
instances, the unpacked layout's features, row by row and in row order.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

import numpy as np

from .schema import PACKED_LAYOUTS

RowChecks = List[Tuple[np.ndarray, str]]


def is_packed(layout) -> bool:
    return layout in PACKED_LAYOUTS


def instance_layout(layout: str) -> str:
    """The layout of the instances a packed layout's rows hold (``nsp_packed`` -> ``nsp``)."""
    return PACKED_LAYOUTS[layout]


def row_checks(batch: Mapping[str, np.ndarray], layout: str) -> RowChecks:
    """``(bad rows, message)`` per row-level invariant of packed rows (the instances inside are
    checked separately, once unpacked)."""
    paired = PACKED_LAYOUTS[layout] in ("nsp", "sop")
    m = np.asarray(batch["input_mask"]).astype(np.int64)
    n, L = m.shape
    col = np.arange(L)[None, :]
    real = m != 0
    depth = m.max(axis=1) if L else np.zeros(n, np.int64)
    prev = np.concatenate([np.zeros((n, 1), np.int64), m[:, :-1]], axis=1)
    step = np.where(real, m - prev, 0)
    starts = real & (step == 1)
    start_col = np.maximum.accumulate(np.where(starts, col, 0), axis=1)
    positions = np.asarray(batch["positions"]).astype(np.int64)
    ids = np.asarray(batch["input_ids"])
    checks: RowChecks = [
        ((m < 0).any(axis=1), "input_mask has negative values"),
        (m[:, 0] != 1 if L else np.zeros(n, bool), "input_mask does not start with instance 1"),
        ((np.diff(real.astype(np.int8), axis=1) > 0).any(axis=1), "input_mask has padding (0) before a real token"),
        (((step != 0) & (step != 1)).any(axis=1), "input_mask is not instances 1, 2, ... in order, each contiguous"),
        ((np.where(real, positions != col - start_col, positions != 0)).any(axis=1),
         "positions do not restart at 0 at each instance (0 on padding)"),
        (((ids != 0) & ~real).any(axis=1), "input_ids is not 0 on padding"),
    ]
    if paired:
        seg = np.asarray(batch["segment_ids"])
        checks.append((((seg != 0) & ~real).any(axis=1), "segment_ids is not 0 on padding"))
    w = np.asarray(batch["masked_lm_weights"])
    pos = np.asarray(batch["masked_lm_positions"]).astype(np.int64)
    mids = np.asarray(batch["masked_lm_ids"])
    slot = w != 0
    count = slot.sum(axis=1)
    prefix = np.arange(w.shape[1])[None, :] < count[:, None]
    safe = np.clip(pos, 0, L - 1)
    owner = np.take_along_axis(m, safe, axis=1)
    checks += [
        ((slot != prefix).any(axis=1), "masked_lm_weights has a padding 0.0 before a prediction"),
        ((prefix & ((w != np.round(w)) | (w < 1) | (w > depth[:, None]))).any(axis=1),
         "masked_lm_weights is not an instance index (1.0..k) on the predictions"),
        ((prefix & ((pos < 0) | (pos >= L) | (owner != w))).any(axis=1),
         "masked_lm_positions is not a token of the instance its masked_lm_weights names"),
        ((~prefix & ((pos != 0) | (mids != 0))).any(axis=1), "masked_lm_positions/ids are not 0 on padding slots"),
        (((np.diff(pos, axis=1) <= 0) & prefix[:, 1:]).any(axis=1), "masked_lm_positions is not strictly ascending"),
    ]
    if paired:
        k = np.asarray(batch["next_sentence_labels"]).shape[1]
        nsp_pos = np.asarray(batch["next_sentence_positions"]).astype(np.int64)
        labels = np.asarray(batch["next_sentence_labels"])
        nsp_w = np.asarray(batch["next_sentence_weights"])
        used = np.arange(k)[None, :] < depth[:, None]
        # the start column of instance s (1-based): where input_mask first equals s
        first = np.zeros((n, k), np.int64)
        r, c = np.nonzero(starts)
        inside = m[r, c] <= k
        first[r[inside], m[r, c][inside] - 1] = c[inside]
        checks += [
            (depth > k, f"more instances than next_sentence_* slots ({k})"),
            ((nsp_w != used.astype(nsp_w.dtype)).any(axis=1),
             "next_sentence_weights is not 1.0 exactly on the row's instances and 0.0 elsewhere"),
            ((np.where(used, nsp_pos != first, nsp_pos != 0)).any(axis=1),
             "next_sentence_positions is not the offset of each instance's [CLS] (0 on empty slots)"),
            ((~np.isin(labels, (0, 1)) | (~used & (labels != 0))).any(axis=1),
             "next_sentence_labels is not 0 or 1 (0 on empty slots)"),
        ]
    return checks




def unpack_rows(rows: Mapping[str, np.ndarray], max_seq_length: int, max_predictions_per_seq: int,
                paired: bool) -> Dict[str, np.ndarray]:
    """Packed rows (as written, or as read: ``(rows, k)`` arrays) -> the instances they hold,
    row by row and in row order, as the unpacked layout's features (``max_seq_length`` tokens,
    ``max_predictions_per_seq`` prediction slots). The rows must be valid
    (:func:`bert_data.format.packed.check_packed_records`)."""
    mask = np.asarray(rows["input_mask"]).astype(np.int64)
    n_rows, L = mask.shape
    depth = mask.max(axis=1) if n_rows else np.zeros(0, np.int64)
    total = int(depth.sum())
    # instance k of row r is index inst_base[r] + k - 1
    inst_base = np.concatenate([[0], np.cumsum(depth)])[:-1]
    real = mask != 0
    r_idx, c_idx = np.nonzero(real)
    inst = inst_base[r_idx] + mask[r_idx, c_idx] - 1
    lengths = np.bincount(inst, minlength=total)
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    # tokens are in row-major order, and instances are contiguous and in order within a row
    col = np.arange(len(inst)) - starts[inst]
    out: Dict[str, np.ndarray] = {}
    for name in ("input_ids",) + (("segment_ids",) if paired else ()):
        a = np.zeros((total, max_seq_length), np.int64)
        a[inst, col] = np.asarray(rows[name])[r_idx, c_idx]
        out[name] = a
    m = np.zeros((total, max_seq_length), np.int64)
    m[inst, col] = 1
    out["input_mask"] = m
    row_offset = np.zeros(total, np.int64)  # the row offset of each instance's [CLS]
    row_offset[inst[col == 0]] = c_idx[col == 0]
    mpos = np.asarray(rows["masked_lm_positions"]).astype(np.int64)
    mweights = np.asarray(rows["masked_lm_weights"])
    pr, pc = np.nonzero(mweights != 0)
    p_inst = inst_base[pr] + mweights[pr, pc].astype(np.int64) - 1
    p_count = np.bincount(p_inst, minlength=total)
    p_start = np.concatenate([[0], np.cumsum(p_count)])[:-1]
    p_col = np.arange(len(p_inst)) - p_start[p_inst]
    P = max_predictions_per_seq
    for name, values in (("masked_lm_positions", mpos[pr, pc] - row_offset[p_inst]),
                         ("masked_lm_ids", np.asarray(rows["masked_lm_ids"])[pr, pc])):
        a = np.zeros((total, P), np.int64)
        a[p_inst, p_col] = values
        out[name] = a
    w = np.zeros((total, P), np.float32)
    w[p_inst, p_col] = 1.0
    out["masked_lm_weights"] = w
    if paired:
        labels = np.asarray(rows["next_sentence_labels"])
        k_idx = np.arange(labels.shape[1])[None, :] < depth[:, None]
        out["next_sentence_labels"] = labels[k_idx].astype(np.int64)[:, None]
    return out


def row_of_instances(input_mask: np.ndarray) -> np.ndarray:
    """The row of each instance :func:`unpack_rows` returns, in its order."""
    depth = np.asarray(input_mask).max(axis=1) if len(input_mask) else np.zeros(0, np.int64)
    return np.repeat(np.arange(len(depth)), depth)

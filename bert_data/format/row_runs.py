"""Padded rows of 0 and 1 that are one run of ones each, kept with their runs.

An assembled NSP/SOP batch's ``input_mask`` is 1 on ``[0, real_length)`` and its ``segment_ids``
1 on ``[len_a + 2, real_length)``, 0 elsewhere. Every consumer reads them as the int32 ``(n, L)``
arrays they are, but the TFRecord serializer only needs the two ends of each row's run: reading
2 KB of int32 a row (at MSL 512) to write 512 bytes of 0 and 1 was a third of its time on a batch
no longer in the caches (4.3 of 11 ms for 3,544 rows). So the assembler hands them over as a
:class:`RowRuns`: the same array, read-only, with its runs; ``_wire.serialize_shard_runs`` writes
those rows from the runs (kind ``r``) and never reads the array.

The runs can never disagree with the values: they are set once, by the code that filled the
array, on an array made read-only then; any view, slice, copy or unpickled array of it has no
runs (:func:`runs_of` returns None), so it is read as the array it is.
"""

from __future__ import annotations

from typing import Optional

import numpy as np


class RowRuns(np.ndarray):
    """An ``(n, width)`` array whose row ``r`` is 1 on ``[lo[r], hi[r])`` and 0 elsewhere, with
    ``runs`` (int64 ``(n, 3)``: ``lo, hi, width``); made by :meth:`of` only."""

    runs: Optional[np.ndarray]

    def __array_finalize__(self, obj) -> None:
        self.runs = None  # a view, slice or copy: its own values, no runs

    @classmethod
    def of(cls, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> "RowRuns":
        """``rows`` (filled by the caller: 1 on ``[lo, hi)``, 0 elsewhere) made read-only, as a view
        with its runs."""
        n, width = rows.shape
        rows.flags.writeable = False  # the array itself too, not only the view: nothing writes the values again
        out = rows.view(cls)
        runs = np.empty((n, 3), np.int64)
        runs[:, 0], runs[:, 1], runs[:, 2] = lo, hi, width
        out.runs = runs
        return out


def runs_of(array) -> Optional[np.ndarray]:
    """The runs of ``array`` when it is a :class:`RowRuns` made by :meth:`RowRuns.of` and still
    read-only; None for anything else (then read its values)."""
    runs = getattr(array, "runs", None) if type(array) is RowRuns else None
    return runs if runs is not None and not array.flags.writeable else None

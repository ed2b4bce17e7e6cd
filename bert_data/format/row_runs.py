"""A mask kept as its rows' runs of ones, where the TFRecord serializer is its only reader.

An assembled NSP/SOP batch's ``input_mask`` is 1 on ``[0, real_length)`` and its ``segment_ids``
1 on ``[len_a + 2, real_length)``, 0 elsewhere (an MLM-only window's ``input_mask`` likewise).
The TFRecord serializer needs only the two ends of each row's run: reading 2 KB of int32 a row
(at MSL 512) to write 512 bytes of 0 and 1 was a third of its time on a batch no longer in the
caches (4.3 of 11 ms for 3,544 rows), and writing them was 14 of the assembler's 23 MB. So for
unpacked ``tf.Example`` TFRecords (``InstanceParams.masks_as_runs``) the C assemblers do not make
them: the batch carries a :class:`MaskRuns`, which ``_wire.serialize_shard_runs`` writes from its
runs (kind ``r``). Every other run (packing, the columnar and HDF5 writers, the Model Zoo's token
sequences) reads the values, and gets the filled arrays as before.

A MaskRuns has no values but the ones ``np.asarray`` makes from its runs, and refuses to be
computed with, so no code can take it for an array and compute something else without a word.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np


class MaskRuns:
    """A mask that was not made: each row's run of ones only, where the run's only reader of the
    mask is the TFRecord serializer (``InstanceParams.masks_as_runs``: the assembler then writes
    neither ``input_mask`` nor ``segment_ids``, 14 of the 23 MB of an MSL-512 batch of 3,544 rows).

    ``np.asarray(mask)`` makes the array (the values the assembler would have written), and
    indexing reads it; comparisons, arithmetic, ``bool()`` and numpy's ufuncs raise ``TypeError``,
    so no code can take this for an array and compute something else from it without a word."""

    __slots__ = ("runs", "width")
    dtype = np.dtype(np.int32)
    ndim = 2
    __array_ufunc__ = None  # numpy's operators and ufuncs refuse it

    def __init__(self, lo: np.ndarray, hi: np.ndarray, width: int) -> None:
        lo, hi = np.broadcast_arrays(np.asarray(lo, np.int64), np.asarray(hi, np.int64))
        if lo.ndim != 1 or (lo < 0).any() or (hi < lo).any() or (hi > width).any():
            raise ValueError("MaskRuns: needs 0 <= lo <= hi <= width for every row")
        self.runs = np.empty((len(lo), 3), np.int64)
        self.runs[:, 0], self.runs[:, 1], self.runs[:, 2] = lo, hi, width
        self.width = int(width)

    @property
    def shape(self) -> Tuple[int, int]:
        return len(self.runs), self.width

    def __len__(self) -> int:
        return len(self.runs)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        j = np.arange(self.shape[1])[None, :]
        rows = ((j >= self.runs[:, :1]) & (j < self.runs[:, 1:2])).astype(np.int32)
        return rows if dtype is None else rows.astype(dtype)

    def __getitem__(self, key):
        return np.asarray(self)[key]

    def _refuse(self, *args):
        raise TypeError("a mask given by its runs (bert_data.format.row_runs.MaskRuns): take np.asarray() of it first")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __and__ = __rand__ = __or__ = __ror__ = _refuse
    __bool__ = __iter__ = _refuse
    __hash__ = None


def runs_of(array) -> Optional[np.ndarray]:
    """The runs (int64 ``(n, 3)``: ``lo, hi, width``) of a :class:`MaskRuns`; None for anything
    else (then read its values)."""
    return array.runs if type(array) is MaskRuns else None

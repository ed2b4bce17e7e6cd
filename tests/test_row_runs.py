"""MaskRuns: a mask the assembler did not make, kept as its rows' runs of ones
(bert_data.format.row_runs).

The TFRecord serializer writes such a mask from its runs; anything else must either get the
values the assembler would have written (np.asarray, indexing) or a TypeError, never a result
computed from an object that only looks like an array.
"""

from __future__ import annotations

import numpy as np
import pytest

from bert_data.format.row_runs import MaskRuns, runs_of


def test_a_mask_given_by_its_runs_is_an_array_only_when_asked_and_never_computed_with():
    """np.asarray and indexing give its values; comparisons, arithmetic, ufuncs, bool and
    iteration raise, so nothing computes on it unawares."""
    mask = MaskRuns(np.array([1, 0, 2]), np.array([4, 5, 2]), 5)
    assert np.asarray(mask).tolist() == [[0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    assert np.asarray(mask).dtype == np.int32 and np.asarray(mask, np.float32).dtype == np.float32
    assert mask.shape == (3, 5) and len(mask) == 3 and mask[1].tolist() == [1, 1, 1, 1, 1]
    assert runs_of(mask).tolist() == [[1, 4, 5], [0, 5, 5], [2, 2, 5]]
    for use in (lambda m: m == 1, lambda m: np.asarray(m) == m, lambda m: m + 1, lambda m: np.add(m, 1),
                lambda m: bool(m), lambda m: list(m), lambda m: m > 0):
        with pytest.raises(TypeError):
            use(mask)


def test_a_mask_of_no_rows_keeps_its_width():
    mask = MaskRuns(np.zeros(0, np.int64), np.zeros(0, np.int64), 7)
    assert mask.shape == (0, 7) and np.asarray(mask).shape == (0, 7)


def test_runs_outside_their_row_are_refused():
    with pytest.raises(ValueError, match="lo <= hi <= width"):
        MaskRuns(np.array([3]), np.array([2]), 5)
    with pytest.raises(ValueError, match="lo <= hi <= width"):
        MaskRuns(np.array([0]), np.array([6]), 5)


def test_plain_arrays_have_no_runs():
    assert runs_of(np.ones((2, 2), np.int32)) is None
    assert runs_of([[1, 0]]) is None

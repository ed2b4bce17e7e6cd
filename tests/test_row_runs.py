"""RowRuns: an assembled mask that carries its runs of ones (bert_data.format.row_runs).

The TFRecord serializer writes such a mask from its runs and never reads its values, so the runs
must never disagree with them: only the array :meth:`RowRuns.of` made, still read-only, has
runs; every view, slice, copy, cast or unpickled array is read as the values it holds.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from bert_data.format.row_runs import RowRuns, runs_of


def made() -> RowRuns:
    rows = np.zeros((3, 5), np.int32)
    rows[0, 1:4] = rows[1, :5] = 1
    return RowRuns.of(rows, np.array([1, 0, 2]), np.array([4, 5, 2]))


def test_the_array_made_carries_its_runs_and_cannot_be_written():
    mask = made()
    assert runs_of(mask).tolist() == [[1, 4, 5], [0, 5, 5], [2, 2, 5]]
    assert np.asarray(mask).tolist() == [[0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="read-only"):
        mask[0, 0] = 1


@pytest.mark.parametrize("derive", [
    lambda m: m[1:], lambda m: m[:, :3], lambda m: m.copy(), lambda m: m.astype(np.int64), lambda m: m.view(),
    lambda m: np.asarray(m), lambda m: pickle.loads(pickle.dumps(m)), lambda m: m + 0,
])
def test_nothing_derived_from_it_has_runs(derive):
    derived = derive(made())
    assert runs_of(derived) is None
    assert np.asarray(derived).tolist() == np.asarray(derive(np.asarray(made()))).tolist()


def test_neither_it_nor_the_array_it_was_made_of_can_be_written_again():
    rows = np.zeros((2, 3), np.int32)
    rows[0, :2] = 1
    mask = RowRuns.of(rows, np.array([0, 0]), np.array([2, 0]))
    with pytest.raises(ValueError):
        mask.flags.writeable = True
    with pytest.raises(ValueError, match="read-only"):
        rows[1, 1] = 1
    assert runs_of(mask).tolist() == [[0, 2, 3], [0, 0, 3]]


def test_plain_arrays_have_no_runs():
    assert runs_of(np.ones((2, 2), np.int32)) is None
    assert runs_of([[1, 0]]) is None

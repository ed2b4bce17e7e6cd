"""RowRuns: an assembled mask that carries its runs of ones (bert_data.format.row_runs).

The TFRecord serializer writes such a mask from its runs and never reads its values, so the runs
must never disagree with them: only the array :meth:`RowRuns.of` made, still read-only, has
runs; every view, slice, copy, cast or unpickled array is read as the values it holds.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from bert_data.format.row_runs import MaskRuns, RowRuns, runs_of


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


def test_a_mask_given_by_its_runs_is_an_array_only_when_asked_and_never_computed_with():
    """MaskRuns (a mask the assembler did not make): np.asarray and indexing give its values;
    comparisons, arithmetic, ufuncs, bool and iteration raise, so nothing computes on it unawares."""
    mask = MaskRuns(np.array([1, 0, 2]), np.array([4, 5, 2]), 5)
    assert np.asarray(mask).tolist() == np.asarray(made()).tolist() and np.asarray(mask).dtype == np.int32
    assert mask.shape == (3, 5) and len(mask) == 3 and mask[1].tolist() == [1, 1, 1, 1, 1]
    assert runs_of(mask).tolist() == [[1, 4, 5], [0, 5, 5], [2, 2, 5]]
    for use in (lambda m: m == 1, lambda m: np.asarray(m) == m, lambda m: m + 1, lambda m: np.add(m, 1),
                lambda m: bool(m), lambda m: list(m), lambda m: m > 0):
        with pytest.raises(TypeError):
            use(mask)
    with pytest.raises(ValueError, match="lo <= hi <= width"):
        MaskRuns(np.array([3]), np.array([2]), 5)

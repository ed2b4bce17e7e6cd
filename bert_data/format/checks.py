"""The record invariants: the executable spec of what a valid record of each layout holds.

:mod:`bert_data.format.schema` fixes the feature names, dtypes and lengths; this module states
what the *values* must be (a run of real tokens, ``[CLS]``/``[SEP]`` where BERT puts them,
segment ids 0s then 1s, predictions in ascending order with weights 1.0, ...). It is used by
``inspect_tfrecords`` (:mod:`bert_data.inspection`) to check every record it reads, and by tests
to check what the writer produces, so the two cannot disagree on what "valid" means.

Four record layouts (the keys of :data:`bert_data.format.schema.SCHEMAS`): ``nsp`` and ``sop``
(``[CLS] A [SEP] B [SEP]`` with ``segment_ids`` and ``next_sentence_labels``), ``mlm_only``
(``[CLS] window [SEP]`` with the masked-LM features; the window may hold document separators)
and ``unmasked`` (``input_ids`` and ``input_mask`` only, masked in the reader).

Everything is vectorised over a batch of records stacked as ``(n, k)`` arrays: no per-record
Python, so checking every record of a large output stays cheap.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Protocol, Tuple

import numpy as np

from . import batch_decode
from .packed import instance_layout, is_packed, row_checks, unpack_rows
from .schema import DEFAULT_SEQUENCES_PER_PACK, SCHEMAS, FeatureSpec, feature_length, schema_from_names

__all__ = [
    "PAIRED_LAYOUTS",
    "layout_specs",
    "layout_names",
    "is_paired",
    "is_masked",
    "layout_from_names",
    "structure_problem",
    "check_records",
    "token_kind_table",
    "CleanBatch",
    "clean_batch",
]

PAIRED_LAYOUTS = ("nsp", "sop")  # [CLS] A [SEP] B [SEP], segment_ids and next_sentence_labels


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------


def layout_specs(layout: str) -> Tuple[FeatureSpec, ...]:
    return SCHEMAS[layout]


def layout_names(layout: str) -> Tuple[str, ...]:
    return tuple(f.name for f in SCHEMAS[layout])


def is_paired(layout: Optional[str]) -> bool:
    return layout in PAIRED_LAYOUTS


def is_masked(layout: Optional[str]) -> bool:
    return layout is not None and "masked_lm_positions" in layout_names(layout)


def is_packed_layout(layout: Optional[str]) -> bool:
    """Rows of several instances (``--packing``): :mod:`bert_data.format.packed`."""
    return is_packed(layout)


def layout_from_names(names: Iterable[str]) -> str:
    """The layout whose feature names are exactly ``names`` (``nsp`` for the NSP/SOP names);
    when none matches, the closest one (fewest missing plus unexpected features), so that a
    bad first record still gets the most useful complaints."""
    names = set(names)
    try:
        return schema_from_names(names)
    except ValueError:
        pass
    return min(("nsp", "mlm_only", "unmasked"), key=lambda key: len(names ^ set(layout_names(key))))


# --------------------------------------------------------------------------------------------
# One record's structure
# --------------------------------------------------------------------------------------------

_WANT_KIND = {"int64": "int64_list", "float32": "float_list"}


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "bytes_list" if value else "feature without a value list"
    if value.dtype == np.float32:
        return "float_list"
    return "int64_list"


def structure_problem(example: Dict[str, Any], seq: int, pred: int, layout: str = "nsp",
                      pack: int = DEFAULT_SEQUENCES_PER_PACK) -> Optional[str]:
    """First problem with the feature names, dtypes and lengths of one decoded record
    (:func:`bert_data.format.example_wire.parse_example`) of the given layout, or None."""
    specs = layout_specs(layout)
    names = [f.name for f in specs]
    missing = [name for name in names if name not in example]
    if missing:
        return "missing feature(s) " + ", ".join(missing)
    extra = sorted(set(example) - set(names))
    if extra:
        return "unexpected feature(s) " + ", ".join(repr(e) for e in extra)
    for spec in specs:
        value = example[spec.name]
        kind, want = _kind(value), _WANT_KIND[spec.dtype]
        if kind != want:
            return f"{spec.name} is a {kind}, expected a {want} ({spec.dtype})"
        length = feature_length(spec, seq, pred, pack)
        if len(value) != length:
            return f"{spec.name} has {len(value)} values, expected {length}"
    return None


# --------------------------------------------------------------------------------------------
# Record contents
# --------------------------------------------------------------------------------------------


class RecordVocab(Protocol):
    """What the content checks need of a vocabulary (e.g. :class:`bert_data.inspection.inputs.VocabInfo`)."""

    cls: int
    sep: int
    mask: int

    @property
    def size(self) -> int: ...


Checks = List[Tuple[np.ndarray, str]]  # (bad rows as a bool vector, message), one per check


class _Rows(NamedTuple):
    """Per-record quantities that several checks share."""

    real: np.ndarray  # real tokens (input_mask 1s)
    run: np.ndarray  # (n, seq): inside the real tokens
    len_a: np.ndarray  # [CLS] A [SEP] length of paired records (0 for the others)
    prefix: np.ndarray  # (n, pred): a real prediction slot ((n, 0) for unmasked records)
    safe_pos: np.ndarray  # masked_lm_positions clipped into the sequence ((n, 0) when unmasked)


def _any_row(bad: np.ndarray) -> np.ndarray:
    return bad.any(axis=1)


def check_records(
    batch: Dict[str, np.ndarray],
    vocab: Optional[RecordVocab],
    layout: str = "nsp",
    separator_id: Optional[int] = None,
) -> Checks:
    """Vectorised content checks of structurally valid records (:func:`structure_problem` is
    None) of one layout, stacked as ``(n, k)`` arrays.

    Returns ``(bad_rows_bool, message)`` pairs, one per check, in a fixed order. A prediction
    slot is a slot whose position is non-zero (position 0 is always ``[CLS]``, which is never
    masked). Without ``vocab`` only the checks that need no token ids are made.
    ``separator_id`` is the MLM-only document separator (``None``: windows never span
    documents); it is ignored for the paired (NSP/SOP) layouts. ``vocab.sep`` as separator
    allows ``[SEP]`` inside MLM-only windows.
    """
    if is_packed(layout):
        return _check_packed(batch, vocab, layout, separator_id)
    paired, masked = is_paired(layout), is_masked(layout)
    ids = batch["input_ids"]
    mask = batch["input_mask"]
    n, seq = ids.shape
    real = (mask == 1).sum(axis=1)
    run = np.arange(seq)[None, :] < real[:, None]

    checks: Checks = [
        (_any_row(~np.isin(mask, (0, 1))), "input_mask has values other than 0 and 1"),
        (_any_row((mask == 1) != run), "input_mask is not a run of 1s followed by 0s"),
        (real == 0, "input_mask is all 0s (no real tokens)"),
    ]
    len_a = np.zeros(n, np.int64)
    if paired:
        seg = batch["segment_ids"]
        len_a = ((seg == 0) & run).sum(axis=1)
        checks += [
            (_any_row(~np.isin(seg, (0, 1))), "segment_ids has values other than 0 and 1"),
            (_any_row((seg != 0) & ~run), "segment_ids is not 0 on padding"),
            (_any_row(np.diff(np.where(run, seg, 1), axis=1) < 0), "segment_ids is not 0s then 1s within input_mask"),
            ((real > 0) & (len_a == 0), "segment A is empty (segment_ids starts with 1)"),
            ((real > 0) & (len_a == real), "segment B is empty (no segment_ids 1 within input_mask)"),
        ]
    else:
        checks.append(((real > 0) & (real < 3), "the window holds no token between [CLS] and [SEP]"))
    checks.append((_any_row((ids != 0) & ~run), "input_ids is not 0 on padding"))
    if paired:
        checks.append((~np.isin(batch["next_sentence_labels"][:, 0], (0, 1)), "next_sentence_labels is not 0 or 1"))
    prefix, safe_pos = np.zeros((n, 0), bool), np.zeros((n, 0), np.int64)
    if masked:
        prefix, safe_pos, prediction_checks = _prediction_checks(batch, real)
        checks += prediction_checks
    if vocab is None:
        negative = _any_row(ids < 0)
        if masked:
            negative |= _any_row((batch["masked_lm_ids"] < 0) & prefix)
        checks.append((negative, "negative token id"))
        return checks
    return checks + _vocab_checks(batch, vocab, layout, separator_id, _Rows(real, run, len_a, prefix, safe_pos))


def _check_packed(batch: Dict[str, np.ndarray], vocab: Optional[RecordVocab], layout: str,
                  separator_id: Optional[int]) -> Checks:
    """Packed rows: the row-level invariants (:func:`bert_data.format.packed.row_checks`), then
    every instance of the rows that pass them, unpacked, with its own layout's checks (a row is
    bad when one of its instances is)."""
    checks = row_checks(batch, layout)
    good = ~np.any([bad for bad, _ in checks], axis=0) if checks else np.ones(len(batch["input_ids"]), bool)
    rows = {name: np.asarray(value)[good] for name, value in batch.items()}
    base = instance_layout(layout)
    seq = batch["input_ids"].shape[1]
    slots = batch["masked_lm_positions"].shape[1]
    instances = unpack_rows(rows, seq, slots, base in PAIRED_LAYOUTS)
    row_of = np.repeat(np.flatnonzero(good), rows["input_mask"].max(axis=1) if len(rows["input_mask"]) else [])
    for bad, message in check_records(instances, vocab, base, separator_id):
        per_row = np.zeros(len(good), bool)
        per_row[row_of[bad]] = True
        checks.append((per_row, "an instance: " + message))
    return checks


def _prediction_checks(batch: Dict[str, np.ndarray], real: np.ndarray) -> Tuple[np.ndarray, np.ndarray, Checks]:
    """The masked-LM slots: ``(real prediction slots, positions clipped into the sequence, checks)``."""
    pos = batch["masked_lm_positions"]
    mids = batch["masked_lm_ids"]
    weights = batch["masked_lm_weights"]
    seq = batch["input_ids"].shape[1]
    pred = pos != 0
    k = pred.sum(axis=1)
    prefix = np.arange(pos.shape[1])[None, :] < k[:, None]
    checks: Checks = [
        (_any_row(pred != prefix), "masked_lm_positions has a padding 0 before a real prediction"),
        (_any_row(pos < 0), "masked_lm_positions has negative values"),
        (_any_row((np.diff(pos, axis=1) <= 0) & prefix[:, 1:]), "masked_lm_positions is not strictly ascending"),
        (_any_row((pos >= real[:, None]) & prefix), "masked_lm_positions points past the real length"),
        (
            _any_row(((weights != 1.0) & prefix) | ((weights != 0.0) & ~prefix)),
            "masked_lm_weights is not 1.0 exactly on the predictions and 0.0 elsewhere",
        ),
        (_any_row((mids != 0) & ~prefix), "masked_lm_ids is not 0 on padding slots"),
    ]
    return prefix, np.clip(pos, 0, seq - 1), checks


def _vocab_checks(
    batch: Dict[str, np.ndarray], vocab: RecordVocab, layout: str, separator_id: Optional[int], rows: _Rows
) -> Checks:
    """The checks that need token ids: ids in the vocabulary, ``[CLS]``/``[SEP]``/``[MASK]``
    where (and only where) the layout puts them. Tokens are judged by their *original* id
    (before masking), recovered from ``masked_lm_ids``."""
    paired, masked = is_paired(layout), is_masked(layout)
    ids = batch["input_ids"]
    n, seq = ids.shape
    real, run, len_a, prefix, safe_pos = rows
    size = vocab.size
    r1 = np.arange(n)
    column = np.broadcast_to(np.arange(seq)[None, :], ids.shape)
    last = np.clip(real - 1, 0, seq - 1)
    slot_rows = np.broadcast_to(r1[:, None], prefix.shape)
    original = ids.copy()
    is_pred = np.zeros(ids.shape, bool)
    mids = batch["masked_lm_ids"] if masked else None
    if masked:
        original[slot_rows[prefix], safe_pos[prefix]] = mids[prefix]
        is_pred[slot_rows[prefix], safe_pos[prefix]] = True
    checks: Checks = [(_any_row((ids < 0) | (ids >= size)), f"input_ids outside the vocabulary (0..{size - 1})")]
    if masked:
        checks.append(
            (_any_row(((mids < 0) | (mids >= size)) & prefix), f"masked_lm_ids outside the vocabulary (0..{size - 1})")
        )
    checks += [
        ((real > 0) & (ids[:, 0] != vocab.cls), "input_ids does not start with [CLS]"),
        ((real > 0) & (ids[r1, last] != vocab.sep), "the last real token is not [SEP]"),
        (_any_row((original == vocab.cls) & run & (column > 0)), "[CLS] after position 0"),
    ]
    sep_in_run = (original == vocab.sep) & run
    if paired:
        end_a = np.clip(len_a - 1, 0, seq - 1)
        checks += [
            ((len_a > 0) & (ids[r1, end_a] != vocab.sep), "segment A does not end with [SEP]"),
            (sep_in_run.sum(axis=1) != 2, "does not hold exactly 2 [SEP] (after A and after B)"),
            (
                _any_row(((safe_pos == end_a[:, None]) | (safe_pos == last[:, None])) & prefix),
                "a masked position is a [SEP]",
            ),
        ]
    else:
        if separator_id != vocab.sep:
            what = (
                "windows never span documents" if separator_id is None else f"the document separator is id {separator_id}"
            )
            checks.append(
                (_any_row(sep_in_run & (column < last[:, None])), f"[SEP] before the last real token ({what})")
            )
        if masked:
            checks.append(
                (
                    _any_row(((safe_pos == last[:, None]) | (mids == vocab.sep)) & prefix),
                    "a masked position is a [SEP]",
                )
            )
            if separator_id is not None and separator_id != vocab.sep:
                checks.append((_any_row((mids == separator_id) & prefix), "a masked position is the document separator"))
    if masked:
        checks.append((_any_row((ids == vocab.mask) & run & ~is_pred), "[MASK] at a position that is not a prediction"))
    else:
        checks.append((_any_row((ids == vocab.mask) & run), "input_ids holds [MASK] (unmasked records store no masks)"))
    return checks


# --------------------------------------------------------------------------------------------
# The fast path: a whole batch proven clean in a few passes
# --------------------------------------------------------------------------------------------

# Token kind bits of :func:`token_kind_table` (one uint8 lookup answers every special-token question).
KIND_SPECIAL, KIND_UNK, KIND_CLS, KIND_SEP, KIND_MASK = 1, 2, 4, 8, 16


class KindVocab(RecordVocab, Protocol):
    """A vocabulary whose [PAD] and [UNK] ids are known too (what the statistics count)."""

    pad: int
    unk: int


def token_kind_table(vocab: KindVocab, layout: str, separator_id: Optional[int]) -> np.ndarray:
    """Token id -> kind bits. ``KIND_SPECIAL`` marks what is not a word piece of the text
    ([PAD] [CLS] [SEP] [MASK], and the MLM-only document separator unless it is [UNK]);
    ``KIND_UNK`` is [UNK] when it is not special."""
    kinds = np.zeros(vocab.size, np.uint8)
    specials = [vocab.pad, vocab.cls, vocab.sep, vocab.mask]
    if not is_paired(layout) and separator_id is not None and separator_id != vocab.unk:
        specials.append(separator_id)
    if vocab.unk not in specials:
        kinds[vocab.unk] |= KIND_UNK
    kinds[specials] |= KIND_SPECIAL
    kinds[vocab.cls] |= KIND_CLS
    kinds[vocab.sep] |= KIND_SEP
    kinds[vocab.mask] |= KIND_MASK
    return kinds


class CleanBatch(NamedTuple):
    """What the statistics need from a batch whose every record passed every check."""

    real: np.ndarray  # (n,) real tokens per record
    predictions: np.ndarray  # (n,) prediction slots per record ((n,) zeros when unmasked)
    labels: Optional[np.ndarray]  # (n,) next_sentence_labels of paired records
    composition: Tuple[int, int, int]  # predictions shown as [MASK], kept, replaced by a random token
    real_tokens: int  # non-special tokens within input_mask, by original id
    unk_tokens: int  # of which [UNK]


def clean_batch(
    batch: Dict[str, np.ndarray], vocab: RecordVocab, kinds: np.ndarray, layout: str, separator_id: Optional[int]
) -> Optional[CleanBatch]:
    """The statistics of ``batch`` when *every* record passes *every* check of
    :func:`check_records`; None when that is not proven (then the caller runs
    :func:`check_records`, which says which records fail and why).

    One pass of C per record (``_wire.clean_rows``) over the int32 arrays the batch decoder
    gives, when the accelerator is built; else :func:`_clean_batch_numpy`. Both prove the same
    invariants (the tests check them against each other and against :func:`check_records`)."""
    n = len(batch["input_ids"])
    if n == 0 or vocab.mask == 0 or is_packed(layout):
        return None  # packed rows: check_records (numpy) is the only path
    if batch_decode.wire() is not None:
        arrays = _c_arrays(batch, layout)
        if arrays is not None and kinds.dtype == np.uint8 and kinds.flags.c_contiguous and len(kinds) >= vocab.size:
            return _clean_batch_c(batch, arrays, vocab, kinds, layout, separator_id)
    return _clean_batch_numpy(batch, vocab, kinds, layout, separator_id)


_C_FEATURES = (  # clean_rows' argument order; which layouts have them
    ("input_ids", np.int32, lambda layout: True),
    ("input_mask", np.int32, lambda layout: True),
    ("segment_ids", np.int32, is_paired),
    ("next_sentence_labels", np.int32, is_paired),
    ("masked_lm_positions", np.int32, is_masked),
    ("masked_lm_ids", np.int32, is_masked),
    ("masked_lm_weights", np.float32, is_masked),
)


def _c_arrays(batch: Dict[str, np.ndarray], layout: str) -> Optional[Tuple[Optional[np.ndarray], ...]]:
    """``clean_rows``' arrays (None where the layout has no such feature), or None when some
    array is not what it takes: 2-D, C-contiguous, int32 (float32 weights), shapes that agree."""
    out: List[Optional[np.ndarray]] = []
    for name, dtype, present in _C_FEATURES:
        if not present(layout):
            out.append(None)
            continue
        a = batch.get(name)
        if a is None or a.dtype != dtype or a.ndim != 2 or not a.flags.c_contiguous:
            return None
        out.append(a)
    ids = out[0]
    n, seq = ids.shape  # type: ignore[union-attr]
    if out[1].shape != (n, seq) or (out[2] is not None and (out[2].shape != (n, seq) or out[3].shape != (n, 1))):  # type: ignore[union-attr]
        return None
    if out[4] is not None and not (out[4].shape[0] == n and out[4].shape == out[5].shape == out[6].shape):  # type: ignore[union-attr]
        return None
    return tuple(out)


def _clean_batch_c(
    batch: Dict[str, np.ndarray],
    arrays: Tuple[Optional[np.ndarray], ...],
    vocab: RecordVocab,
    kinds: np.ndarray,
    layout: str,
    separator_id: Optional[int],
) -> Optional[CleanBatch]:
    paired, masked = is_paired(layout), is_masked(layout)
    n, seq = arrays[0].shape  # type: ignore[union-attr]
    slots = arrays[4].shape[1] if masked else 0  # type: ignore[union-attr]
    mids_not = separator_id if not paired and separator_id is not None and separator_id != vocab.sep else -1
    count_seps = paired or separator_id != vocab.sep
    params = (
        n, seq, slots, vocab.cls, vocab.sep, vocab.mask, vocab.size, mids_not, paired, masked, count_seps,
        KIND_SPECIAL, KIND_UNK, KIND_CLS, KIND_SEP,
    )  # fmt: skip
    real, predictions = np.empty(n, np.int64), np.zeros(n, np.int64)
    sums = batch_decode.wire().clean_rows(arrays, params, kinds, real, predictions)
    if sums is None:
        return None
    shown, kept, random, real_tokens, unk_tokens = sums
    labels = batch["next_sentence_labels"][:, 0] if paired else None
    return CleanBatch(real, predictions, labels, (shown, kept, random), real_tokens, unk_tokens)


def _clean_batch_numpy(
    batch: Dict[str, np.ndarray], vocab: RecordVocab, kinds: np.ndarray, layout: str, separator_id: Optional[int]
) -> Optional[CleanBatch]:
    """:func:`clean_batch` without the accelerator.

    Why: :func:`check_records` computes each check for each record, some forty passes over the
    ``(n, seq)`` arrays; this proves the same invariants with a dozen, most of them whole-batch
    reductions, because what a valid batch looks like is rigid: ``input_mask`` equals the run
    its sum implies, ``segment_ids`` the run its sum implies, the special tokens are where the
    run's ends put them and their total count leaves no room for others. It is a sufficient
    condition only: a batch it does not prove is never assumed bad. ``kinds`` is
    :func:`token_kind_table` of the same vocabulary, layout and separator."""
    ids, mask = batch["input_ids"], batch["input_mask"]
    n, seq = ids.shape
    if n == 0 or vocab.mask == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab.size:
        return None
    real = mask.sum(axis=1)
    column = np.arange(seq)
    run = column < real[:, None]
    if int(real.min()) <= 0 or not np.array_equal(mask, run):
        return None  # values other than 0/1, not a run, or no real token
    rows = np.arange(n)
    last = real - 1
    if (ids[:, 0] != vocab.cls).any() or (ids[rows, last] != vocab.sep).any() or np.count_nonzero(ids[~run]):
        return None
    paired, masked = is_paired(layout), is_masked(layout)
    seps_per_row = 1
    end_a = last
    labels = None
    if paired:
        len_a = real - batch["segment_ids"].sum(axis=1)
        if int(len_a.min()) <= 0 or (len_a >= real).any():
            return None
        if not np.array_equal(batch["segment_ids"], run & (column >= len_a[:, None])):
            return None
        end_a = len_a - 1
        if (ids[rows, end_a] != vocab.sep).any():
            return None
        labels = batch["next_sentence_labels"][:, 0]
        if int(labels.min()) < 0 or int(labels.max()) > 1:
            return None
        seps_per_row = 2
    elif int(real.min()) < 3:
        return None
    original, predictions, composition = ids, np.zeros(n, np.int64), (0, 0, 0)
    current_masks = 0
    if masked:
        found = _clean_predictions(batch, vocab, layout, separator_id, real, end_a, last)
        if found is None:
            return None
        original, predictions, composition, current_masks = found
    if np.count_nonzero(ids == vocab.mask) != current_masks:
        return None  # a [MASK] where no prediction is (padding is all 0s, and [MASK] is not 0)
    k = np.take(kinds, original)  # (2x faster than kinds[original])
    k *= run
    if np.count_nonzero(k & KIND_CLS) != n:
        return None  # [CLS] after position 0 (position 0 is [CLS] and never a prediction)
    if paired or separator_id != vocab.sep:
        if np.count_nonzero(k & KIND_SEP) != seps_per_row * n:
            return None  # a [SEP] besides the ones the layout puts (those are there, and not predictions)
    real_tokens = int(np.count_nonzero((k & KIND_SPECIAL) == 0)) - int(np.count_nonzero(~run))
    unk_tokens = int(np.count_nonzero(k == KIND_UNK))
    return CleanBatch(real, predictions, labels, composition, real_tokens, unk_tokens)


def _clean_predictions(
    batch: Dict[str, np.ndarray],
    vocab: RecordVocab,
    layout: str,
    separator_id: Optional[int],
    real: np.ndarray,
    end_a: np.ndarray,
    last: np.ndarray,
) -> Optional[Tuple[np.ndarray, np.ndarray, Tuple[int, int, int], int]]:
    """:func:`clean_batch`'s masked-LM part: (original ids, predictions per record,
    composition, [MASK]s at predictions), or None when some check may fail."""
    ids = batch["input_ids"]
    pos, mids, weights = batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"]
    n, seq = ids.shape
    slot = pos != 0
    predictions = slot.sum(axis=1)
    prefix = np.arange(pos.shape[1]) < predictions[:, None]
    if not np.array_equal(slot, prefix) or int(pos.min()) < 0 or (pos.max(axis=1) >= real).any():
        return None  # ascending (checked next) and below the real length: the last one is the largest
    # Strictly ascending: past a record's predictions the positions are 0 (a fall, then flat),
    # so only steps between two predictions can rise; all of them rise iff the rises count them.
    if np.count_nonzero(np.diff(pos, axis=1) > 0) != int(np.maximum(predictions - 1, 0).sum()):
        return None
    if not np.array_equal(weights, prefix.astype(weights.dtype)):
        return None  # weights 1.0 exactly on the predictions and 0.0 elsewhere
    if int(mids.min()) < 0 or int(mids.max()) >= vocab.size or np.count_nonzero(mids[~prefix]):
        return None
    at_sep = (pos == last[:, None]) | (pos == end_a[:, None])
    chosen = mids[prefix]
    if at_sep[prefix].any() or (chosen == vocab.sep).any():
        return None  # a masked position is a [SEP]
    if not is_paired(layout) and separator_id is not None and separator_id != vocab.sep:
        if (chosen == separator_id).any():
            return None
    flat = (np.arange(n)[:, None] * seq + pos)[prefix]
    current = ids.reshape(-1)[flat]
    original = ids.copy()
    original.reshape(-1)[flat] = chosen
    is_mask = current == vocab.mask
    shown = int(np.count_nonzero(is_mask))
    kept = int(np.count_nonzero(~is_mask & (current == chosen)))
    return original, predictions, (shown, kept, len(chosen) - shown - kept), shown

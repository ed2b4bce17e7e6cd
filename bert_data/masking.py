"""Masking stage: assembled sequences -> masked-LM predictions (pure, no I/O).

Shared by every objective that masks when writing: NSP/SOP pairs (:mod:`bert_data.instances`)
and MLM-only windows (:mod:`bert_data.windows`). The reader's dynamic masking
(:mod:`bert_data.reader.dynamic_masking`) implements the same rules in TensorFlow ops.

The rules are the reference's: ``num_to_predict = min(max_pred, max(1, round(len * prob)))``
(round half to even) among the *candidates* (real tokens other than ``[CLS]``/``[SEP]``/the
document separator), 80% ``[MASK]`` / 10% kept / 10% a random id, positions sorted. Masking is
vectorised over a whole batch; ``mask_whole_word`` picks whole words (a candidate plus its
``##`` continuation candidates) greedily and makes one 80/10/10 choice per word.

Randomness comes only from the generator passed in, which callers derive from
(seed, group, pass) in :mod:`bert_data.group`. With the C accelerator the choice is made by
``_wire.choose_rows``, which draws the keys itself from that generator exactly as
``rng.random((n, L))`` would (a PCG64 stepped inline, any other BitGenerator through its
capsule) and leaves it in the same state; the numpy path below stays the reference and fallback.
Whole-word masking's rows are ``_wire.mask_words``: the Python rows' draws (a permutation of the
words, the coins, the random ids) from the BitGenerator's own functions, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from .format.native import wire


@dataclass(frozen=True)
class MaskingParams:
    """What masking needs to know: how much to mask and the vocabulary's size and ``[MASK]`` id."""

    masked_lm_prob: float
    max_predictions_per_seq: int
    mask_whole_word: bool
    vocab_size: int
    mask_id: int


def num_to_predict(real_length: np.ndarray, params: MaskingParams) -> np.ndarray:
    """``min(max_pred, max(1, round(len * prob)))`` with Python's round-half-even, per row."""
    return np.minimum(
        params.max_predictions_per_seq,
        np.maximum(1, np.rint(real_length.astype(np.float64) * params.masked_lm_prob)),
    ).astype(np.int64)


def _replacement_tokens(original: np.ndarray, coin: np.ndarray, random_ids: np.ndarray, mask_id: int) -> np.ndarray:
    """80% [MASK], 10% keep, 10% a random vocabulary id (the reference's choice)."""
    return np.where(coin < 0.8, mask_id, np.where(coin < 0.9, original, random_ids))


def mask_batch(
    arrays: Dict[str, np.ndarray],
    params: MaskingParams,
    rng: np.random.Generator,
    is_continuation: Optional[np.ndarray] = None,
    *,
    owns_input_ids: bool = False,
) -> Dict[str, np.ndarray]:
    """Masked-LM predictions for every row of an assembled batch.

    ``arrays`` holds ``input_ids`` (n, L), ``candidates`` (n, L bool) and ``real_length`` (n,),
    plus whatever else the objective passes through unchanged (``input_mask``, ``segment_ids``,
    ``next_sentence_labels``). Returns those with the masked ``input_ids`` and the three
    ``masked_lm_*`` features (``max_predictions_per_seq`` slots, 0-padded). ``owns_input_ids``:
    the caller made ``input_ids`` for this call alone (an assembled batch), so the masks may be
    written into it instead of a copy (at MSL 512 a copy is 2 KB a row)."""
    if params.mask_whole_word:
        if is_continuation is None:
            raise ValueError("whole-word masking needs the vocabulary's ## continuation table")
        return _mask_whole_words(arrays, params, rng, is_continuation)
    candidates = arrays["candidates"]
    n, length = arrays["input_ids"].shape
    p = params.max_predictions_per_seq
    wanted = num_to_predict(arrays["real_length"], params)
    width = min(p, length)
    masked = _mask_native(arrays, wanted, width, params, rng, owns_input_ids)
    if masked is not None:
        return masked
    k = np.minimum(wanted, candidates.sum(axis=1))
    input_ids = arrays["input_ids"].copy()
    keys = rng.random((n, length))
    coin = rng.random((n, width))  # drawn before the choice, which draws nothing: the same stream
    random_ids = rng.integers(0, params.vocab_size, size=(n, width))
    keys[~candidates] = 2.0
    chosen = np.argpartition(keys, width - 1, axis=1)[:, :width] if width < length else np.argsort(keys, axis=1)
    chosen_keys = np.take_along_axis(keys, chosen, axis=1)
    order = np.argsort(chosen_keys, axis=1)
    chosen = np.take_along_axis(chosen, order, axis=1)  # positions in random order
    slot = np.arange(width)[None, :]
    used = slot < k[:, None]
    positions = np.where(used, chosen, length)  # sentinel sorts last
    positions.sort(axis=1)
    used = positions < length
    positions = np.where(used, positions, 0)
    rows = np.arange(n)[:, None]
    original = np.where(used, input_ids[rows, positions], 0)
    replacement = _replacement_tokens(original, coin, random_ids, params.mask_id)
    input_ids[rows, positions] = np.where(used, replacement, input_ids[rows, positions])
    return _features(arrays, input_ids, positions, original, used.astype(np.float32), p)


def _mask_native(arrays, wanted, width, params, rng, owns_input_ids=False) -> Optional[Dict[str, np.ndarray]]:
    """:func:`mask_batch` by ``_wire.choose_rows`` (which lowers the ``wanted`` counts to the
    rows' counts of candidates) and ``_wire.replace_rows``, on the very draws of the numpy path,
    in its order: the keys (``rng.random((n, L))``, drawn in C, never stored), the coin, the
    random ids (from a PCG64 drawn in C too, row by row: ``_wire.replace_rows_pcg64``). None,
    with ``rng``'s state as it was, without the accelerator, for arrays or a generator it does not
    take (no BitGenerator capsule), or when a row's k-th key ties with the next (numpy's choice
    among equal keys is its own; about once in 2**45 rows)."""
    native = wire()
    input_ids, candidates = arrays["input_ids"], arrays["candidates"]
    bit_generator = getattr(rng, "bit_generator", None)
    if native is None or not hasattr(bit_generator, "capsule"):
        return None
    if input_ids.dtype != np.int32 or candidates.dtype != np.bool_:
        return None
    n, length = input_ids.shape
    p = params.max_predictions_per_seq
    k = np.array(wanted, dtype=np.int64)  # lowered in place to each row's count of candidates
    positions = np.empty((n, p), np.int32)
    chosen = _choose_native(native, (n, length, width, p, np.ascontiguousarray(candidates), k), bit_generator, positions)
    if chosen is False:
        return None
    if owns_input_ids and input_ids.flags.c_contiguous and input_ids.flags.writeable:
        masked_ids = input_ids
    else:
        masked_ids = np.array(input_ids, order="C")  # a copy: the caller's ids are left alone
    original, weights = np.empty((n, p), np.int32), np.empty((n, p), np.float32)
    if chosen is not True:  # a PCG64's words, after the keys
        if 1 <= params.vocab_size <= 2**31:  # the coin and ids drawn in C too
            native.replace_rows_pcg64(n, length, width, p, params.mask_id, params.vocab_size, masked_ids, k, chosen,
                                      positions, original, weights)
            _set_pcg64(bit_generator, chosen)
            return _features(arrays, masked_ids, positions, original, weights, p)
        _set_pcg64(bit_generator, chosen)  # numpy draws them on from there
    coin = rng.random((n, width))
    random_ids = rng.integers(0, params.vocab_size, size=(n, width))
    native.replace_rows(n, length, width, p, params.mask_id, masked_ids, k, coin, random_ids, positions, original,
                        weights)
    return _features(arrays, masked_ids, positions, original, weights, p)


_WORD = (1 << 64) - 1


def _choose_native(native, sizes, bit_generator, positions):
    """``_wire.choose_rows`` on keys drawn from ``bit_generator`` as ``Generator.random`` draws
    them: a PCG64 (every pass's, see :mod:`bert_data.group`) by its state, stepped inline in C; any
    other through its capsule's ``next_double``, under its lock. False on a tie, the generator's
    state then as it was. A PCG64's state after the keys is returned, not yet set back: uint64
    ``[state >> 64, state low, inc >> 64, inc low, has_uint32, uinteger]`` (``_wire.replace_rows_pcg64``
    draws the coin and ids on from it; :func:`_set_pcg64` sets it: the lock is not held from the read
    to the write, ``state`` takes it, and older numpy's is a plain Lock; a pass's generator is drawn
    from by one thread). True for any other, its state set by its own draws."""
    before = bit_generator.state
    if native.PCG64 and type(bit_generator) is np.random.PCG64:
        state, inc = before["state"]["state"], before["state"]["inc"]
        words = np.array([state >> 64, state & _WORD, inc >> 64, inc & _WORD, before["has_uint32"], before["uinteger"]],
                         np.uint64)
        return words if native.choose_rows(*sizes, words[:4], positions) else False
    with bit_generator.lock:  # as Generator.random holds it while it draws
        chosen = native.choose_rows(*sizes, bit_generator.capsule, positions)
    if not chosen:
        bit_generator.state = before  # numpy draws the same keys again and makes its own choice
    return chosen


def _set_pcg64(bit_generator, words: np.ndarray) -> None:
    """A PCG64's state set to ``words`` (:func:`_choose_native`'s layout)."""
    bit_generator.state = {"bit_generator": "PCG64", "state": {"state": int(words[0]) << 64 | int(words[1]),
                                                                "inc": int(words[2]) << 64 | int(words[3])},
                           "has_uint32": int(words[4]), "uinteger": int(words[5])}


def _features(arrays, input_ids, positions, original, weights, p) -> Dict[str, np.ndarray]:
    """The batch's output features: ``arrays`` but for the masking inputs, the masked ids and the
    ``masked_lm_*`` features padded to ``p`` slots (``weights`` float32, 1.0 per prediction)."""
    n, width = positions.shape
    if width < p:
        pad = np.zeros((n, p - width), dtype=positions.dtype)
        positions = np.concatenate([positions, pad], axis=1)
        original = np.concatenate([original, pad], axis=1)
        weights = np.concatenate([weights, pad.astype(np.float32)], axis=1)
    features = {name: value for name, value in arrays.items() if name not in _MASKING_INPUTS}
    features.update(
        input_ids=input_ids.astype(np.int32, copy=False),  # fresh arrays of this module: no copy needed
        masked_lm_positions=positions.astype(np.int32, copy=False),
        masked_lm_ids=original.astype(np.int32, copy=False),
        masked_lm_weights=weights,
    )
    return features


_MASKING_INPUTS = ("candidates", "real_length")  # consumed here, never written


def _mask_words_native(input_ids, candidates, is_continuation, k_all, rng, params, positions, original, used) -> bool:
    """:func:`_mask_whole_words`' rows by ``_wire.mask_words``; False, having drawn nothing,
    without the accelerator, for a generator without a BitGenerator capsule or inputs it does
    not take (the Python rows then run)."""
    native = wire()
    bit_generator = getattr(rng, "bit_generator", None)
    if native is None or not hasattr(bit_generator, "capsule") or candidates.dtype != np.bool_:
        return False
    table = np.ascontiguousarray(is_continuation)
    if table.dtype not in (np.bool_, np.uint8) or table.ndim != 1:
        return False
    n, length = input_ids.shape
    k = np.ascontiguousarray(k_all, dtype=np.int64)
    with bit_generator.lock:  # as Generator's methods hold it while they draw
        return bool(native.mask_words(n, length, positions.shape[1], input_ids, np.ascontiguousarray(candidates), table,
                                      k, bit_generator.capsule, params.vocab_size, params.mask_id, positions, original,
                                      used))


def _mask_whole_words(arrays, params, rng, is_continuation) -> Dict[str, np.ndarray]:
    """Whole-word masking, one row at a time (the greedy "skip words that do not fit" rule):
    ``_wire.mask_words`` when the accelerator is built and ``rng`` has a BitGenerator capsule
    (the same draws, in the same order, from numpy's own bit generator functions), else the
    Python rows below, which are the reference."""
    input_ids = np.array(arrays["input_ids"], dtype=np.int32, order="C")  # a copy: masked in place
    candidates = arrays["candidates"]
    n, length = input_ids.shape
    p = params.max_predictions_per_seq
    k_all = num_to_predict(arrays["real_length"], params)
    positions = np.zeros((n, p), dtype=np.int64)
    original = np.zeros((n, p), dtype=np.int64)
    used = np.zeros((n, p), dtype=bool)
    if _mask_words_native(input_ids, candidates, is_continuation, k_all, rng, params, positions, original, used):
        return _features(arrays, input_ids, positions, original, used.astype(np.float32), p)
    for row in range(n):
        ids_row = input_ids[row]
        words: List[List[int]] = []
        previous = -2
        for index in np.flatnonzero(candidates[row]).tolist():
            if words and previous == index - 1 and is_continuation[ids_row[index]]:
                words[-1].append(index)
            else:
                words.append([index])
            previous = index
        order = rng.permutation(len(words))
        budget = int(k_all[row])
        picked: List[int] = []
        chosen_words: List[List[int]] = []
        for w in order.tolist():
            if len(picked) >= budget:
                break
            word = words[w]
            if len(picked) + len(word) > budget:
                continue
            picked.extend(word)
            chosen_words.append(word)
        if not chosen_words:
            continue
        coins = rng.random(len(chosen_words))
        randoms = rng.integers(0, params.vocab_size, size=len(picked))
        new_values = {}
        r = 0
        for word, coin in zip(chosen_words, coins.tolist()):
            for index in word:
                if coin < 0.8:
                    new_values[index] = params.mask_id
                elif coin < 0.9:
                    new_values[index] = int(ids_row[index])
                else:
                    new_values[index] = int(randoms[r])
                r += 1
        sorted_positions = sorted(picked)
        count = len(sorted_positions)
        positions[row, :count] = sorted_positions
        original[row, :count] = ids_row[sorted_positions]
        used[row, :count] = True
        ids_row[sorted_positions] = [new_values[i] for i in sorted_positions]
    return _features(arrays, input_ids, positions, original, used.astype(np.float32), p)



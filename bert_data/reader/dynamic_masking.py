"""Dynamic masked-LM masking inside ``tf.data``, for records written with ``--disable_masking``.

:func:`make_dynamic_masker` returns a function ``(features, seed) -> features`` that takes one
unmasked example (``input_ids``, ``input_mask``, int32 ``[L]``) and adds the static records'
masked-LM features, drawn as the writer draws them (:func:`bert_data.instances.mask_batch`):

* ``k = min(max_predictions_per_seq, max(1, round(real_tokens * masked_lm_prob)))`` (round
  half to even), at most the number of candidates; candidates are real tokens (``input_mask``
  1) whose id is not in ``special_ids`` (``[CLS]``, ``[SEP]``, the document separator, ...);
* per token: ``k`` candidates uniformly without replacement; with ``mask_whole_word``, words
  (a candidate followed by ``##`` continuation candidates) in random order, a word taken only
  if it still fits in ``k`` (the writer's greedy rule), one 80/10/10 choice per word;
* 80% ``[MASK]``, 10% unchanged, 10% a uniform random id in ``[0, vocab_size)``;
* ``masked_lm_positions`` ascending, ``masked_lm_ids`` the original ids, ``masked_lm_weights``
  1.0, all zero-padded to ``max_predictions_per_seq`` slots; ``input_ids`` gets the replacements.

Every draw is a stateless TensorFlow op keyed by ``seed`` (a pair of int64), so the same seed
gives the same masks on any machine and any number of parallel calls.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..errors import ConfigError

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")


def load_vocab_tokens(vocab_file: str) -> List[str]:
    try:
        with open(vocab_file, encoding="utf-8") as handle:
            return [line.rstrip("\r\n") for line in handle]
    except OSError as exc:
        raise ConfigError(f"vocab_file {vocab_file}: cannot read it ({exc.strerror})") from None


def continuation_table(tokens: Sequence[str]) -> np.ndarray:
    """``table[id]`` is True when token ``id`` is a ``##`` WordPiece continuation."""
    return np.asarray([t.startswith("##") for t in tokens], dtype=bool)


def default_special_ids(tokens: Sequence[str], extra_tokens: Iterable[str] = ()) -> List[int]:
    """Ids of ``[PAD] [CLS] [SEP] [MASK]`` and of ``extra_tokens`` (e.g. the document separator)
    that the vocabulary holds."""
    index = {t: i for i, t in enumerate(tokens)}
    wanted = list(SPECIAL_TOKENS) + [t for t in extra_tokens if t]
    return sorted({index[t] for t in wanted if t in index})


def make_dynamic_masker(
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    vocab_size: int,
    mask_id: int,
    special_ids: Sequence[int],
    is_continuation: Optional[np.ndarray] = None,
    mask_whole_word: bool = False,
) -> Callable[[Dict[str, Any], Any], Dict[str, Any]]:
    """The per-example masking function (see the module docstring)."""
    import tensorflow as tf

    if not 1 <= max_predictions_per_seq <= max_seq_length:
        raise ConfigError(
            f"max_predictions_per_seq {max_predictions_per_seq} must be between 1 and max_seq_length {max_seq_length}"
        )
    if not 0.0 <= masked_lm_prob <= 1.0:
        raise ConfigError(f"masked_lm_prob {masked_lm_prob} is outside [0, 1]")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ConfigError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if not 0 <= int(mask_id) < vocab_size:
        raise ConfigError(f"mask_id {mask_id} is outside the vocabulary [0, {vocab_size})")
    if mask_whole_word and is_continuation is None:
        raise ConfigError("mask_whole_word needs the vocabulary (vocab_file) to find ## continuation pieces")
    length = int(max_seq_length)
    slots = int(max_predictions_per_seq)
    special = tf.constant(sorted(set(int(i) for i in special_ids)) or [-1], dtype=tf.int32)
    continuation = None
    if mask_whole_word:
        continuation = tf.constant(np.asarray(is_continuation, dtype=bool))
        n_table = int(continuation.shape[0])

    def choose_tokens(candidates, budget, seeds):
        keys = tf.random.stateless_uniform([length], seed=seeds[0], dtype=tf.float32)
        keys = tf.where(candidates, keys, 2.0)
        _, smallest = tf.math.top_k(-keys, k=slots, sorted=True)
        picked = smallest[:budget]
        chosen = tf.scatter_nd(picked[:, None], tf.ones_like(picked, dtype=tf.int32), [length]) > 0
        coin = tf.random.stateless_uniform([length], seed=seeds[1], dtype=tf.float32)
        return chosen, coin

    def choose_words(input_ids, candidates, budget, seeds):
        ids = tf.clip_by_value(input_ids, 0, n_table - 1)
        is_cont = tf.gather(continuation, ids)
        previous = tf.concat([[False], candidates[:-1]], axis=0)
        starts = candidates & ~(previous & is_cont)
        word_of_token = tf.cumsum(tf.cast(starts, tf.int32)) - 1  # valid on candidates
        n_words = tf.reduce_sum(tf.cast(starts, tf.int32))
        segment = tf.where(candidates, word_of_token, length)  # non-candidates -> dummy segment
        word_len = tf.math.unsorted_segment_sum(tf.ones([length], tf.int32), segment, length + 1)[:length]
        keys = tf.random.stateless_uniform([length], seed=seeds[0], dtype=tf.float32)
        keys = tf.where(tf.range(length) < n_words, keys, 2.0)
        _, order = tf.math.top_k(-keys, k=length, sorted=True)  # words in random order, then dummies
        # The greedy rule (take each word in turn if it still fits, stop once the budget is
        # reached) without a loop over every word: while the running total fits, every word is
        # taken (a prefix, found with a cumsum); after the first word that does not fit, the
        # rest r is smaller than that word, so at most r more (short) words fit: a loop of at
        # most r steps, each taking the next word no longer than what is left.
        index = tf.range(length)
        valid = index < n_words
        ordered_len = tf.where(valid, tf.gather(word_len, order), budget + 1)
        prefix = tf.cumsum(ordered_len) <= budget
        taken = prefix
        picked = tf.reduce_sum(tf.where(prefix, ordered_len, 0))
        next_index = tf.reduce_sum(tf.cast(prefix, tf.int32)) + 1  # after the word that did not fit

        def cond(taken, left, next_index):
            return (left > 0) & tf.reduce_any(valid & (index >= next_index) & (ordered_len <= left))

        def body(taken, left, next_index):
            fits = valid & (index >= next_index) & (ordered_len <= left)
            j = tf.cast(tf.argmax(tf.cast(fits, tf.int32)), tf.int32)  # the first that fits
            taken = taken | tf.equal(index, j)
            return taken, left - ordered_len[j], j + 1

        taken, _, _ = tf.while_loop(
            cond, body, (taken, budget - picked, next_index), maximum_iterations=length
        )
        chosen_words = tf.scatter_nd(order[:, None], tf.cast(taken, tf.int32), [length]) > 0
        safe_word = tf.clip_by_value(word_of_token, 0, length - 1)
        chosen = candidates & tf.gather(chosen_words, safe_word)
        word_coin = tf.random.stateless_uniform([length], seed=seeds[1], dtype=tf.float32)
        return chosen, tf.gather(word_coin, safe_word)

    def mask(features: Dict[str, Any], seed: Any) -> Dict[str, Any]:
        seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
        seeds = tf.random.experimental.stateless_split(seed, num=3)
        input_ids = tf.cast(features["input_ids"], tf.int32)
        input_mask = tf.cast(features["input_mask"], tf.int32)
        is_special = tf.reduce_any(tf.equal(input_ids[:, None], special[None, :]), axis=1)
        candidates = (input_mask > 0) & ~is_special
        real_tokens = tf.reduce_sum(input_mask)
        wanted = tf.cast(tf.round(tf.cast(real_tokens, tf.float64) * masked_lm_prob), tf.int32)
        budget = tf.minimum(tf.minimum(slots, tf.maximum(1, wanted)), tf.reduce_sum(tf.cast(candidates, tf.int32)))
        if mask_whole_word:
            chosen, coin = choose_words(input_ids, candidates, budget, seeds)
        else:
            chosen, coin = choose_tokens(candidates, budget, seeds)
        random_ids = tf.random.stateless_uniform(
            [length], seed=seeds[2], minval=0, maxval=vocab_size, dtype=tf.int32
        )
        replacement = tf.where(coin < 0.8, tf.constant(int(mask_id), tf.int32), tf.where(coin < 0.9, input_ids, random_ids))
        positions = tf.cast(tf.where(chosen)[:, 0], tf.int32)  # ascending
        count = tf.shape(positions)[0]
        pad = [[0, slots - count]]
        out = dict(features)
        out["input_ids"] = tf.where(chosen, replacement, input_ids)
        out["input_mask"] = input_mask
        out["masked_lm_positions"] = tf.ensure_shape(tf.pad(positions, pad), [slots])
        out["masked_lm_ids"] = tf.ensure_shape(tf.pad(tf.gather(input_ids, positions), pad), [slots])
        out["masked_lm_weights"] = tf.ensure_shape(tf.pad(tf.ones([count], tf.float32), pad), [slots])
        return out

    return mask

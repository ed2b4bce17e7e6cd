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

:class:`DynamicMaskingOptions` is how :func:`bert_data.reader.dataset.pretraining_dataset` is
asked to mask; :func:`masker_from_options` turns it into a masker. The vocabulary is read by
the writer's own :func:`bert_data.tokenization.load_vocab`, so the reader refuses exactly the
vocabularies the writer refuses, and never masks the writer's
:data:`~bert_data.tokenization.NEVER_MASKED_TOKENS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConfigError

__all__ = ["DynamicMaskingOptions", "default_special_ids", "masker_from_options", "make_dynamic_masker"]

Masker = Callable[[Dict[str, Any], Any], Dict[str, Any]]


@dataclass(frozen=True)
class DynamicMaskingOptions:
    """How to mask unmasked records in the pipeline (the writer's ``--masked_lm_prob`` and
    ``--mask_whole_word``, and the vocabulary). Give ``vocab_file``, or else ``vocab_size``,
    ``mask_id`` and ``special_ids`` (those given override what the vocabulary says)."""

    masked_lm_prob: float = 0.15
    mask_whole_word: bool = False
    vocab_file: Optional[str] = None
    vocab_size: Optional[int] = None
    mask_id: Optional[int] = None
    special_ids: Optional[Sequence[int]] = None  # ids never masked; default NEVER_MASKED_TOKENS + separator

    def __post_init__(self) -> None:
        if self.special_ids is not None:  # a tuple: frozen all the way down
            object.__setattr__(self, "special_ids", tuple(int(i) for i in self.special_ids))


def default_special_ids(vocab: Mapping[str, int], extra_tokens: Iterable[str] = ()) -> List[int]:
    """Ids of :data:`~bert_data.tokenization.NEVER_MASKED_TOKENS` and of ``extra_tokens`` (e.g.
    the document separator) that the vocabulary (token -> id) holds."""
    from ..tokenization import NEVER_MASKED_TOKENS

    wanted = list(NEVER_MASKED_TOKENS) + [t for t in extra_tokens if t]
    return sorted({vocab[t] for t in wanted if t in vocab})


def masker_from_options(
    masking: DynamicMaskingOptions,
    max_seq_length: int,
    max_predictions_per_seq: int,
    separator_tokens: Iterable[str] = (),
) -> Masker:
    """The masker that ``masking`` asks for. ``separator_tokens``: the runs' document separators,
    never masked (unless ``special_ids`` is given). Raises :class:`bert_data.errors.VocabError`
    for a ``vocab_file`` the writer would refuse, :class:`ConfigError` when neither the
    vocabulary nor ``vocab_size``/``mask_id``/``special_ids`` are given."""
    vocab_size, mask_id, special_ids = masking.vocab_size, masking.mask_id, masking.special_ids
    is_continuation = None
    if masking.vocab_file is not None:
        from ..tokenization import continuation_table, load_vocab  # lazily: `import bert_data.reader` stays light

        vocab = load_vocab(masking.vocab_file)
        vocab_size = len(vocab) if vocab_size is None else vocab_size
        mask_id = vocab["[MASK]"] if mask_id is None else mask_id
        if special_ids is None:
            special_ids = default_special_ids(vocab, separator_tokens)
        is_continuation = continuation_table(vocab)
    given = (("vocab_size", vocab_size), ("mask_id", mask_id), ("special_ids", special_ids))
    missing = [name for name, value in given if value is None]
    if missing:
        raise ConfigError(f"dynamic_masking needs vocab_file, or else {', '.join(missing)}")
    assert vocab_size is not None and mask_id is not None and special_ids is not None
    return make_dynamic_masker(
        max_seq_length, max_predictions_per_seq, masking.masked_lm_prob, vocab_size, mask_id, special_ids,
        is_continuation=is_continuation, mask_whole_word=masking.mask_whole_word,
    )


def _check_masker_args(
    max_seq_length: int, max_predictions_per_seq: int, masked_lm_prob: float, vocab_size: int, mask_id: int
) -> None:
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


# Eight parameters: this is the public, documented signature (users and tests call it with the
# first six positionally); pretraining_dataset reaches it through masker_from_options.
def make_dynamic_masker(
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    vocab_size: int,
    mask_id: int,
    special_ids: Sequence[int],
    is_continuation: Optional[np.ndarray] = None,
    mask_whole_word: bool = False,
) -> Masker:
    """The per-example masking function (see the module docstring)."""
    import tensorflow as tf

    _check_masker_args(max_seq_length, max_predictions_per_seq, masked_lm_prob, vocab_size, mask_id)
    if mask_whole_word and is_continuation is None:
        raise ConfigError("mask_whole_word needs the vocabulary (vocab_file) to find ## continuation pieces")
    length = int(max_seq_length)
    slots = int(max_predictions_per_seq)
    special = tf.constant(sorted(set(int(i) for i in special_ids)) or [-1], dtype=tf.int32)
    continuation = tf.constant(np.asarray(is_continuation, dtype=bool)) if mask_whole_word else None

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
        if continuation is not None:
            chosen, coin = _choose_words(input_ids, candidates, budget, seeds, continuation, length)
        else:
            chosen, coin = _choose_tokens(candidates, budget, seeds, length, slots)
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


def _choose_tokens(candidates: Any, budget: Any, seeds: Any, length: int, slots: int) -> Tuple[Any, Any]:
    """``budget`` candidates uniformly without replacement, and one 80/10/10 coin per token."""
    import tensorflow as tf

    keys = tf.random.stateless_uniform([length], seed=seeds[0], dtype=tf.float32)
    keys = tf.where(candidates, keys, 2.0)
    _, smallest = tf.math.top_k(-keys, k=slots, sorted=True)
    picked = smallest[:budget]
    chosen = tf.scatter_nd(picked[:, None], tf.ones_like(picked, dtype=tf.int32), [length]) > 0
    coin = tf.random.stateless_uniform([length], seed=seeds[1], dtype=tf.float32)
    return chosen, coin


def _choose_words(
    input_ids: Any, candidates: Any, budget: Any, seeds: Any, continuation: Any, length: int
) -> Tuple[Any, Any]:
    """Whole words (a candidate and the ``##`` candidates after it) in random order, each taken if
    it still fits in ``budget`` (the writer's greedy rule), and one 80/10/10 coin per word."""
    import tensorflow as tf

    n_table = int(continuation.shape[0])
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

    taken, _, _ = tf.while_loop(cond, body, (taken, budget - picked, next_index), maximum_iterations=length)
    chosen_words = tf.scatter_nd(order[:, None], tf.cast(taken, tf.int32), [length]) > 0
    safe_word = tf.clip_by_value(word_of_token, 0, length - 1)
    chosen = candidates & tf.gather(chosen_words, safe_word)
    word_coin = tf.random.stateless_uniform([length], seed=seeds[1], dtype=tf.float32)
    return chosen, tf.gather(word_coin, safe_word)

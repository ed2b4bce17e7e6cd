"""Dynamic masking of unmasked records (``--mlm_only --disable_masking --unmasked_format ids``) in
the PyTorch reader, by the writer's own code: :func:`bert_data.masking.mask_batch` (80% ``[MASK]``
/ 10% kept / 10% a random id, ``min(max_predictions_per_seq, max(1, round(real * masked_lm_prob)))``
predictions among the real tokens that are not special, whole words optional, positions sorted).

What differs from the writer is only where the randomness comes from. The writer draws a batch's
masks from one generator; a reader must give a record the same masks whichever worker, rank or
batch it lands in, so that a run is reproducible for any number of workers and a resumed run
masks as the uninterrupted one would. :class:`RecordRandom` stands in for the generator
``mask_batch`` is given: row ``r`` of every draw comes from a counter-based hash (SplitMix64) of
the record's own key, which :func:`record_keys` derives from ``(seed, epoch, file, record)``.
The same seed and epoch give the same masks; another epoch gives new ones.

The vocabulary options are the tf.data reader's,
:class:`~bert_data.reader.dynamic_masking.DynamicMaskingOptions` (``vocab_file``, or
``vocab_size``/``mask_id``/``special_ids``), read by the writer's
:func:`bert_data.tokenization.load_vocab`; the default never-masked ids are ``[PAD] [CLS] [SEP]
[MASK]`` and the runs' document separator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConfigError
from ..masking import MaskingParams, mask_batch
from ..reader.dynamic_masking import DynamicMaskingOptions, default_special_ids
from .plan import derive_seed

__all__ = ["RecordRandom", "RecordMasker", "record_keys", "masker_for"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def record_keys(base: int, file: np.ndarray, record: np.ndarray) -> np.ndarray:
    """One 64-bit key per record from the epoch's ``base`` seed, the file's index in the dataset's
    list of files and the record's index in its file."""
    with np.errstate(over="ignore"):
        mixed = _mix(np.uint64(base) ^ _mix(file.astype(np.uint64) * _GAMMA + np.uint64(1)))
        return _mix(mixed ^ _mix(record.astype(np.uint64) + _GAMMA))


class RecordRandom:
    """The part of ``numpy.random.Generator`` that :func:`bert_data.masking.mask_batch` uses
    (``random``, ``integers``, ``permutation``), where row ``r`` of every draw depends only on
    ``keys[r]`` and on how many draws came before: a record's masks do not depend on the other
    rows of its batch. A draw for several rows must be ``(rows, n)``-shaped (anything else is
    refused rather than silently mixing records); a one-row instance also takes 1-D draws, as
    whole-word masking makes them."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = np.asarray(keys, dtype=np.uint64)
        self.draws = 0

    def _bits(self, size: object) -> np.ndarray:
        shape = (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)  # type: ignore[arg-type]
        rows = len(self.keys)
        if len(shape) == 2 and shape[0] == rows:
            keys = self.keys[:, None]
        elif rows == 1 and len(shape) == 1:
            keys = self.keys
        else:
            raise ValueError(f"a draw of shape {shape} for {rows} records: rows must come first")
        self.draws += 1
        with np.errstate(over="ignore"):
            stream = _mix(keys ^ _mix(np.uint64(self.draws) * _GAMMA))
            counter = np.arange(1, shape[-1] + 1, dtype=np.uint64) * _GAMMA
            return _mix(stream + counter)

    def random(self, size: object) -> np.ndarray:
        """Uniform floats in [0, 1), 53 bits each."""
        return (self._bits(size) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def integers(self, low: int, high: int, size: object) -> np.ndarray:
        """Integers in ``[low, high)`` (the 64-bit draw scaled: uniform to within 2**-40 for a vocabulary)."""
        return low + np.floor(self.random(size) * (high - low)).astype(np.int64)

    def permutation(self, n: int) -> np.ndarray:
        """A uniform random permutation of ``range(n)``."""
        return np.argsort(self._bits(n), kind="stable")


@dataclass(frozen=True)
class RecordMasker:
    """Masks a chunk of unmasked rows; everything ``mask_batch`` needs, built once per dataset."""

    params: MaskingParams
    special_ids: np.ndarray
    is_continuation: Optional[np.ndarray]

    def __call__(self, chunk: Dict[str, np.ndarray], keys: np.ndarray) -> Dict[str, np.ndarray]:
        """``chunk`` (``input_ids``, ``input_mask``) with masked ``input_ids`` and the
        ``masked_lm_*`` features added; row ``r`` masked from ``keys[r]`` alone."""
        input_ids, input_mask = chunk["input_ids"], chunk["input_mask"]
        candidates = (input_mask > 0) & ~np.isin(input_ids, self.special_ids)
        arrays = {"input_ids": input_ids, "candidates": candidates,
                  "real_length": input_mask.sum(axis=1, dtype=np.int64)}
        if self.params.mask_whole_word:  # the writer's per-row loop: one generator per row
            rows = [mask_batch({k: v[r : r + 1] for k, v in arrays.items()}, self.params, RecordRandom(keys[r : r + 1]),
                               self.is_continuation) for r in range(len(keys))]
            masked = {name: np.concatenate([row[name] for row in rows]) for name in rows[0]} if rows else \
                mask_batch(arrays, self.params, RecordRandom(keys), self.is_continuation)
        else:
            masked = mask_batch(arrays, self.params, RecordRandom(keys), self.is_continuation)  # type: ignore[arg-type]
        out = dict(chunk)
        out.update(masked)
        return out


def _vocabulary(options: DynamicMaskingOptions, separator_tokens: Sequence[str]
                ) -> Tuple[Optional[int], Optional[int], Optional[Sequence[int]], Optional[np.ndarray]]:
    vocab_size, mask_id, special_ids = options.vocab_size, options.mask_id, options.special_ids
    is_continuation = None
    if options.vocab_file is not None:
        from ..tokenization import continuation_table, load_vocab

        vocab = load_vocab(options.vocab_file)
        vocab_size = len(vocab) if vocab_size is None else vocab_size
        mask_id = vocab["[MASK]"] if mask_id is None else mask_id
        if special_ids is None:
            special_ids = default_special_ids(vocab, separator_tokens)
        is_continuation = continuation_table(vocab)
    return vocab_size, mask_id, special_ids, is_continuation


def masker_for(options: DynamicMaskingOptions, max_seq_length: int, max_predictions_per_seq: int,
               separator_tokens: Sequence[str] = ()) -> RecordMasker:
    """The masker ``options`` ask for. Raises :class:`ConfigError` for missing or bad settings,
    :class:`~bert_data.errors.VocabError` for a vocabulary the writer would refuse."""
    if not isinstance(options, DynamicMaskingOptions):
        raise ConfigError(f"masking must be a DynamicMaskingOptions, got {type(options).__name__}")
    vocab_size, mask_id, special_ids, is_continuation = _vocabulary(options, separator_tokens)
    missing = [name for name, value in (("vocab_size", vocab_size), ("mask_id", mask_id), ("special_ids", special_ids))
               if value is None]
    if missing:
        raise ConfigError(
            f"dynamic masking needs masking=DynamicMaskingOptions(vocab_file=...), or else {', '.join(missing)}")
    assert vocab_size is not None and mask_id is not None and special_ids is not None
    if not 1 <= max_predictions_per_seq < max_seq_length:
        raise ConfigError(
            f"max_predictions_per_seq {max_predictions_per_seq} must be between 1 and max_seq_length - 1 "
            f"({max_seq_length - 1}): give max_predictions_per_seq (the masks per record)"
        )
    if not 0.0 <= options.masked_lm_prob <= 1.0:
        raise ConfigError(f"masked_lm_prob {options.masked_lm_prob} is outside [0, 1]")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ConfigError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if not 0 <= int(mask_id) < vocab_size:
        raise ConfigError(f"mask_id {mask_id} is outside the vocabulary [0, {vocab_size})")
    if options.mask_whole_word and is_continuation is None:
        raise ConfigError("mask_whole_word needs the vocabulary (vocab_file) to find ## continuation pieces")
    params = MaskingParams(options.masked_lm_prob, max_predictions_per_seq, options.mask_whole_word, vocab_size,
                           int(mask_id))
    return RecordMasker(params, np.asarray(sorted(set(int(i) for i in special_ids)) or [-1], np.int64), is_continuation)


def epoch_base(seed: int, epoch: int) -> int:
    """The seed every record key of an epoch's masks derives from."""
    return derive_seed(seed, "masks", epoch)

"""What a model needs to keep the instances of a packed row apart (``--packing``, docs/packing.md).

A packed row's ``input_mask`` is each token's instance (1..k, 0 on padding): a token may attend
to the tokens of its own instance only, which is a block-diagonal attention mask;
``positions`` (position ids restarting at 0 at each instance) replaces ``0..L-1``;
``next_sentence_positions`` are the rows where each instance's ``[CLS]`` is (gather the
sequence output there for the pooler and the NSP/SOP head, weighted by
``next_sentence_weights``); ``masked_lm_weights`` is each prediction's instance, so
``masked_lm_weights > 0`` are the real predictions.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def packed_attention_mask(input_mask: Any, dtype: Any = None) -> Any:
    """``[batch, L]`` instance indices -> the ``[batch, L, L]`` block-diagonal attention mask
    (1 where query and key tokens belong to the same instance, 0 elsewhere and on padding), as a
    TensorFlow tensor (``dtype`` default ``tf.float32``). Habana's model builds the same mask
    with ``one_hot(input_mask - 1, depth=3)`` times its transpose."""
    import tensorflow as tf

    m = tf.convert_to_tensor(input_mask)
    same = tf.logical_and(tf.equal(m[:, :, None], m[:, None, :]), tf.greater(m[:, :, None], 0))
    return tf.cast(same, dtype or tf.float32)


def packed_attention_mask_numpy(input_mask: np.ndarray) -> np.ndarray:
    """:func:`packed_attention_mask` in numpy (``[batch, L, L]`` of 0/1 int32), for torch/JAX
    trainers: ``torch.from_numpy(...)`` is the 3-D mask Hugging Face's BERT accepts."""
    m = np.asarray(input_mask)
    return ((m[:, :, None] == m[:, None, :]) & (m[:, :, None] > 0)).astype(np.int32)

"""Encoders: a batch of features (one row per instance) -> one record payload per row.

Which encoder a run uses is a property of its layout (:mod:`bert_data.objectives`): every layout
but one writes ``tf.train.Example`` records of its features in the schema's sorted order
(:class:`ExampleEncoder`); the Model Zoo's ``--disable_masking`` records are a
``tf.train.SequenceExample`` of WordPiece strings (:class:`TokenSequenceEncoder`). Encoders
are built once per worker and are pure: same features, same bytes.

A new record encoding is one class here and one entry in :data:`ENCODERS`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .example_wire import serialize_examples, serialize_shard_runs, serialize_token_sequences, token_sequence_elements
from .schema import FeatureSpec, feature_order


class ExampleEncoder:
    """``tf.train.Example`` records, byte-identical to TensorFlow's deterministic serialization."""

    def __init__(self, features: Tuple[FeatureSpec, ...], vocab: Mapping[str, int]) -> None:
        self.order = feature_order(features)

    def encode(self, features: Mapping[str, np.ndarray]) -> List[bytes]:
        return serialize_examples(features, self.order)

    def encode_shard_runs(self, features: Mapping[str, np.ndarray], shard_of_row: np.ndarray,
                          num_shards: int) -> Optional[List[bytes]]:
        """Each shard's records (its rows in batch order) in TFRecord frames, one ``bytes`` a shard,
        made by the C accelerator in one pass (:func:`serialize_shard_runs`); None without it (the
        container then frames :meth:`encode`'s payloads)."""
        return serialize_shard_runs(features, self.order, shard_of_row, num_shards)


class TokenSequenceEncoder:
    """The Model Zoo's ``SequenceExample`` of WordPiece strings (``--unmasked_format tokens``);
    the bytes of every vocabulary entry are made once, when the encoder is built."""

    def __init__(self, features: Tuple[FeatureSpec, ...], vocab: Mapping[str, int]) -> None:
        tokens = [""] * len(vocab)
        for token, index in vocab.items():
            tokens[index] = token
        self.elements = token_sequence_elements(tokens)

    def encode(self, features: Mapping[str, np.ndarray]) -> List[bytes]:
        return serialize_token_sequences(features["input_ids"], features["input_mask"], self.elements)


Encoder = Callable[[Mapping[str, np.ndarray]], Sequence[bytes]]
ENCODERS: Dict[str, type] = {"example": ExampleEncoder, "token_sequences": TokenSequenceEncoder}

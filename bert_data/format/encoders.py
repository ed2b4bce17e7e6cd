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

from .example_wire import (serialize_examples, serialize_frames, serialize_shard_runs, serialize_token_sequences,
                           token_sequence_elements)
from .schema import FeatureSpec, feature_order
from .tfrecord import frame_records


class ExampleEncoder:
    """``tf.train.Example`` records, byte-identical to TensorFlow's deterministic serialization."""

    def __init__(self, features: Tuple[FeatureSpec, ...], vocab: Mapping[str, int]) -> None:
        self.order = feature_order(features)

    def encode(self, features: Mapping[str, np.ndarray]) -> List[bytes]:
        return serialize_examples(features, self.order)

    def encode_frames(self, features: Mapping[str, np.ndarray], rows: np.ndarray) -> Tuple[bytes, np.ndarray]:
        """The records of ``rows`` (batch row numbers, in that order) in TFRecord frames, one
        ``bytes``, and each frame's end offset: what the TFRecord container asks of an encoder
        that can frame its own records (one C pass, no object per record), else it frames
        :meth:`encode`'s payloads."""
        framed = serialize_frames(features, self.order, rows)
        if framed is not None:
            return framed
        payloads = self.encode(features)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(payloads)):  # as the C path refuses them
            raise IndexError(f"encode_frames: rows {rows.min()}..{rows.max()} of a batch of {len(payloads)}")
        picked = [payloads[row] for row in rows.tolist()]
        return frame_records(picked), np.cumsum([16 + len(p) for p in picked], dtype=np.int64)

    def encode_shard_runs(self, features: Mapping[str, np.ndarray], shard_of_row: np.ndarray,
                          num_shards: int) -> Optional[List[bytes]]:
        """Each shard's frames of :meth:`encode_frames` (its rows in batch order), one ``bytes`` a
        shard, made by the C accelerator reading the rows in batch order; None without it (the
        container then asks :meth:`encode_frames`)."""
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

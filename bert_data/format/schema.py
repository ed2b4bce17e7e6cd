"""The one record schema, shared by the writer, the reader, the inspector and the manifest.

Feature names, dtypes and lengths are exactly those that google-research/bert
``run_pretraining.py`` parses. On disk:

* ``input_mask`` is 1 on real tokens and 0 on padding;
* ``segment_ids`` is 0 for ``[CLS]``, segment A and the first ``[SEP]``, 1 for B and the last ``[SEP]``;
* ``masked_lm_weights`` is 1.0 on real predictions and 0.0 on padding slots;
* ``next_sentence_labels`` is 1 when segment B is a *random* segment (not the true next), 0 otherwise.

Features are serialized in sorted key order, the order protobuf's deterministic
serialization uses, so our hand-encoded bytes equal TensorFlow's deterministic bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

SEQ = "max_seq_length"
PRED = "max_predictions_per_seq"
ONE = "one"
# Packed layouts (--packing, docs/packing.md): several instances per row, Habana's MLPerf layout.
PACK = "max_sequences_per_pack"  # one slot per instance of the row
PACKED_PRED = "max_predictions_per_seq + max_sequences_per_pack"  # the row's masked-LM budget (Habana's)
DEFAULT_SEQUENCES_PER_PACK = 3  # every MLPerf packed layout; Habana's model hard-codes it


@dataclass(frozen=True)
class FeatureSpec:
    name: str
    dtype: str  # "int64" or "float32"
    length: str  # SEQ, PRED, ONE, or for packed layouts PACK or PACKED_PRED
    description: str


NSP_FEATURES: Tuple[FeatureSpec, ...] = (
    FeatureSpec("input_ids", "int64", SEQ, "WordPiece ids, [CLS] A [SEP] B [SEP], 0-padded"),
    FeatureSpec("input_mask", "int64", SEQ, "1 on real tokens, 0 on padding"),
    FeatureSpec("masked_lm_ids", "int64", PRED, "original ids of the masked positions, 0-padded"),
    FeatureSpec("masked_lm_positions", "int64", PRED, "masked positions in ascending order, 0-padded"),
    FeatureSpec("masked_lm_weights", "float32", PRED, "1.0 for real predictions, 0.0 for padding"),
    FeatureSpec("next_sentence_labels", "int64", ONE, "1 = B is a random segment, 0 = B is the true next"),
    FeatureSpec("segment_ids", "int64", SEQ, "0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding"),
)

FEATURE_NAMES: Tuple[str, ...] = tuple(f.name for f in NSP_FEATURES)

# --- other training objectives (--sentence_order_prediction, --mlm_only, --disable_masking) ---
# Same names, dtypes and sorted order as NSP_FEATURES; only the subset and descriptions differ.

SOP_FEATURES: Tuple[FeatureSpec, ...] = tuple(
    FeatureSpec(f.name, f.dtype, f.length, "1 = A and B swapped (B precedes A in the document), 0 = in order")
    if f.name == "next_sentence_labels"
    else f
    for f in NSP_FEATURES
)

MLM_ONLY_FEATURES: Tuple[FeatureSpec, ...] = tuple(
    FeatureSpec(f.name, f.dtype, f.length, "WordPiece ids, [CLS] window [SEP], 0-padded") if f.name == "input_ids" else f
    for f in NSP_FEATURES
    if f.name not in ("next_sentence_labels", "segment_ids")
)

UNMASKED_FEATURES: Tuple[FeatureSpec, ...] = (
    FeatureSpec("input_ids", "int64", SEQ, "unmasked WordPiece ids, [CLS] window [SEP], 0-padded (mask in the reader)"),
    FeatureSpec("input_mask", "int64", SEQ, "1 on real tokens, 0 on padding"),
)

# --- packed rows (--packing): the layout of Habana's MLPerf packed TFRecords (HabanaAI/Model-References,
# MLPERF3.1 TensorFlow BERT run_pretraining.py, input_fn's name_to_features under enable_packed_data_mode;
# values as pack_pretraining_data_tfrec.py's create_multi_sequence_example writes them). Up to
# max_sequences_per_pack instances per row, each whole and in its own positions.

_PACKED_SEQ_AND_MLM: Tuple[FeatureSpec, ...] = (
    FeatureSpec("input_ids", "int64", SEQ, "WordPiece ids: each instance's [CLS] ... [SEP] back to back, 0-padded"),
    FeatureSpec("input_mask", "int64", SEQ, "the token's instance: 1..k in row order, 0 on padding"),
    FeatureSpec("masked_lm_ids", "int64", PACKED_PRED, "original ids of the masked positions, 0-padded"),
    FeatureSpec("masked_lm_positions", "int64", PACKED_PRED,
                "masked positions as offsets into the row, ascending, 0-padded"),
    FeatureSpec("masked_lm_weights", "float32", PACKED_PRED,
                "the prediction's instance (1.0..k, its input_mask), 0.0 for padding"),
)
_PACKED_NSP: Tuple[FeatureSpec, ...] = (
    FeatureSpec("next_sentence_labels", "int64", PACK, "per instance: 1 = B is a random segment, 0 = the true next; "
                                                       "0 on empty slots"),
    FeatureSpec("next_sentence_positions", "int64", PACK, "per instance: the row offset of its [CLS]; 0 on empty slots"),
    FeatureSpec("next_sentence_weights", "float32", PACK, "1.0 per instance of the row, 0.0 on empty slots"),
)
_POSITIONS = FeatureSpec("positions", "int64", SEQ, "position of the token within its instance (0 at each [CLS]), "
                                                     "0 on padding")
_PACKED_SEGMENTS = FeatureSpec("segment_ids", "int64", SEQ, "per instance 0 for [CLS] A [SEP], 1 for B [SEP]; 0 on padding")

PACKED_NSP_FEATURES: Tuple[FeatureSpec, ...] = _PACKED_SEQ_AND_MLM + _PACKED_NSP + (_POSITIONS, _PACKED_SEGMENTS)
PACKED_SOP_FEATURES: Tuple[FeatureSpec, ...] = _PACKED_SEQ_AND_MLM + tuple(
    FeatureSpec(f.name, f.dtype, f.length, "per instance: 1 = A and B swapped, 0 = in order; 0 on empty slots")
    if f.name == "next_sentence_labels" else f
    for f in _PACKED_NSP
) + (_POSITIONS, _PACKED_SEGMENTS)
PACKED_MLM_ONLY_FEATURES: Tuple[FeatureSpec, ...] = tuple(
    FeatureSpec(f.name, f.dtype, f.length, "WordPiece ids: each window's [CLS] ... [SEP] back to back, 0-padded")
    if f.name == "input_ids" else f
    for f in _PACKED_SEQ_AND_MLM
) + (_POSITIONS,)

SCHEMAS: Dict[str, Tuple[FeatureSpec, ...]] = {
    "nsp": NSP_FEATURES,
    "sop": SOP_FEATURES,
    "mlm_only": MLM_ONLY_FEATURES,
    "unmasked": UNMASKED_FEATURES,
    "nsp_packed": PACKED_NSP_FEATURES,
    "sop_packed": PACKED_SOP_FEATURES,
    "mlm_only_packed": PACKED_MLM_ONLY_FEATURES,
}
# A packed layout -> the layout of its instances (what unpacking a row gives back).
PACKED_LAYOUTS: Dict[str, str] = {"nsp_packed": "nsp", "sop_packed": "sop", "mlm_only_packed": "mlm_only"}


# Not a tf.train.Example: the Cerebras Model Zoo's --disable_masking records, a SequenceExample
# whose feature_lists["tokens"] holds the window's WordPiece strings ([CLS] ... [SEP], no padding),
# read by its BertMlmOnlyTfRecordsDynamicMaskProcessor. Written with --unmasked_format tokens.
TOKEN_SEQUENCES = "unmasked_tokens"
TOKEN_SEQUENCES_DESCRIPTION = {
    "tokens": {
        "dtype": "string", "length": "variable: the window's real tokens, at most max_seq_length",
        "description": "tf.train.SequenceExample feature_lists['tokens']: one bytes Feature per WordPiece, "
                       "[CLS] window [SEP], unpadded (the Model Zoo's --disable_masking records)",
    }
}


def schema_from_names(names) -> str:
    """The :data:`SCHEMAS` key whose feature names are exactly ``names``; ``sop`` and ``nsp``
    share names, so that set gives ``nsp``. ValueError when none matches."""
    wanted = sorted(names)
    for key in ("nsp", "mlm_only", "unmasked", "nsp_packed", "mlm_only_packed"):
        if sorted(f.name for f in SCHEMAS[key]) == wanted:
            return key
    raise ValueError(f"no known record schema has exactly the features {wanted}")


def feature_length(spec: FeatureSpec, max_seq_length: int, max_predictions_per_seq: int,
                   max_sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK) -> int:
    """The fixed length of a feature (``max_sequences_per_pack`` matters to packed layouts only)."""
    return {SEQ: max_seq_length, PRED: max_predictions_per_seq, ONE: 1, PACK: max_sequences_per_pack,
            PACKED_PRED: max_predictions_per_seq + max_sequences_per_pack}[spec.length]


def feature_lengths(
    max_seq_length: int, max_predictions_per_seq: int, features: Tuple[FeatureSpec, ...] = NSP_FEATURES,
    max_sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK,
) -> Dict[str, int]:
    """Name -> fixed length of every feature, for the given sequence/prediction sizes."""
    return {f.name: feature_length(f, max_seq_length, max_predictions_per_seq, max_sequences_per_pack) for f in features}


def schema_description(
    max_seq_length: int, max_predictions_per_seq: int, features: Tuple[FeatureSpec, ...] = NSP_FEATURES,
    max_sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK,
) -> Dict[str, Any]:
    """JSON-able description written into the manifest (``data_params.json``)."""
    return {
        f.name: {
            "dtype": f.dtype,
            "length": feature_length(f, max_seq_length, max_predictions_per_seq, max_sequences_per_pack),
            "description": f.description,
        }
        for f in features
    }


def tf_feature_spec(
    max_seq_length: int, max_predictions_per_seq: int, features: Tuple[FeatureSpec, ...] = NSP_FEATURES,
    max_sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK,
) -> Dict[str, Any]:
    """``tf.io.FixedLenFeature`` dict identical to run_pretraining.py's ``name_to_features``."""
    import tensorflow as tf  # imported lazily: the writer never needs TensorFlow

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    return {
        f.name: tf.io.FixedLenFeature(
            [feature_length(f, max_seq_length, max_predictions_per_seq, max_sequences_per_pack)], dtypes[f.dtype])
        for f in features
    }


def feature_order(features: Tuple[FeatureSpec, ...]) -> Tuple[Tuple[str, str], ...]:
    """``(name, dtype)`` pairs in the order records are serialized (the schema's sorted order)."""
    return tuple((f.name, f.dtype) for f in features)

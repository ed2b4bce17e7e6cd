"""One row per record layout: what a run with these settings trains, plans and writes.

Every place that used to ask "NSP, SOP or MLM-only? masked or not?" reads the row instead: the
per-group code (which planner makes a pass's instances, under which RNG stream, and which
counters a pass adds), the encoder that turns features into record payloads, the manifest (the
objective, the schema written, the counters it reports) and the readers (a layout's features).

A new objective or layout is one :class:`Objective` row in :data:`OBJECTIVES` (and, when it
makes instances another way, one planner function here); :func:`layout_of` maps the settings
to a row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .format.schema import (
    MLM_ONLY_FEATURES, NSP_FEATURES, SOP_FEATURES, TOKEN_SEQUENCES, TOKEN_SEQUENCES_DESCRIPTION, UNMASKED_FEATURES,
    FeatureSpec, schema_description,
)
from .instances import InstancePass, PassRandomness, pair_pass
from .tokenization import TokenizedGroup
from .windows import WindowOptions, build_streams, window_pass

# A planner prepares one unit's passes: given the unit's tokenized documents and the worker's
# resources (config, instance/masking parameters, ...), it returns the function that plans one
# dupe pass from that pass's randomness.
PassPlanner = Callable[[TokenizedGroup, Any], Callable[[PassRandomness], InstancePass]]


def plan_pairs(unit: TokenizedGroup, resources: Any) -> Callable[[PassRandomness], InstancePass]:
    """BERT's sentence pairs (NSP or SOP), re-planned every pass."""
    config = resources.config

    def one_pass(randomness: PassRandomness) -> InstancePass:
        return pair_pass(unit, resources.params, resources.masking, randomness, config.num_output_files,
                         resources.is_continuation)

    return one_pass


def plan_windows(unit: TokenizedGroup, resources: Any) -> Callable[[PassRandomness], InstancePass]:
    """MLM-only windows over the unit's token streams (built once per unit)."""
    config = resources.config
    streams = build_streams(unit, resources.separator_id if config.allow_cross_document_examples else None)
    options = WindowOptions(config.overlap_size, max(1, config.buffer_size // config.max_seq_length))

    def one_pass(randomness: PassRandomness) -> InstancePass:
        return window_pass(streams, resources.params, options, resources.masking, randomness, config.num_output_files,
                           resources.is_continuation)

    return one_pass


@dataclass(frozen=True)
class Objective:
    layout: str  # the record layout, recorded as the manifest's record_schema
    objective: str  # what it trains, recorded as the manifest's objective
    features: Tuple[FeatureSpec, ...]  # the features every instance has (in the schema's sorted order)
    planner: PassPlanner
    plan_stream: str  # the name of the planning RNG stream (part of the seed derivation: never change it)
    pass_counters: Mapping[str, str] = field(default_factory=dict)  # counter name -> InstancePass attribute
    encoder: str = "example"  # key of bert_data.format.encoders.ENCODERS
    masked: bool = True  # masked_lm_* written (else masking is the reader's)
    schema: Optional[Dict[str, Any]] = None  # the manifest's schema when not the features' (token strings)

    def count_pass(self, instance_pass: InstancePass, stats: Counter) -> None:
        """Add a finished pass's counters: its instances and what it could not make."""
        stats["instances"] += instance_pass.n
        for counter, attribute in self.pass_counters.items():
            stats[counter] += getattr(instance_pass, attribute)

    def manifest_fields(self, settings: Mapping[str, Any], stats: Counter) -> Dict[str, Any]:
        """The manifest keys of this layout: objective, masking, record_schema, the schema written
        and the counters its passes keep."""
        schema = self.schema if self.schema is not None else schema_description(
            settings["max_seq_length"], settings["max_predictions_per_seq"], self.features)
        out: Dict[str, Any] = {
            "objective": self.objective,
            "masking": "static" if self.masked else "none (mask in the reader)",
            "record_schema": self.layout,
            "schema": schema,
        }
        for counter in self.pass_counters:
            if counter != "nsp_negatives_unavailable":  # a top-level key of every manifest
                out[counter] = stats[counter]
        return out


_WINDOWS = {"windows_spanning_documents": "spanning_documents"}

OBJECTIVES: Dict[str, Objective] = {
    row.layout: row
    for row in (
        Objective("nsp", "mlm+nsp", NSP_FEATURES, plan_pairs, "pairs", {"nsp_negatives_unavailable": "unpaired"}),
        Objective("sop", "mlm+sop", SOP_FEATURES, plan_pairs, "pairs", {"sop_single_segment_chunks": "unpaired"}),
        Objective("mlm_only", "mlm_only", MLM_ONLY_FEATURES, plan_windows, "windows", _WINDOWS),
        Objective("unmasked", "mlm_only", UNMASKED_FEATURES, plan_windows, "windows", _WINDOWS, masked=False),
        Objective(TOKEN_SEQUENCES, "mlm_only", UNMASKED_FEATURES, plan_windows, "windows", _WINDOWS,
                  encoder="token_sequences", masked=False, schema=TOKEN_SEQUENCES_DESCRIPTION),
    )
}

# The objective each record layout trains, as recorded under "objective".
OBJECTIVE_OF_LAYOUT = {name: row.objective for name, row in OBJECTIVES.items()}


def layout_of(mlm_only: bool, sentence_order_prediction: bool, disable_masking: bool,
              unmasked_format: str = "ids") -> str:
    """The layout (a key of :data:`OBJECTIVES`) of the records a run with these settings writes."""
    if mlm_only:
        if disable_masking:
            return TOKEN_SEQUENCES if unmasked_format == "tokens" else "unmasked"
        return "mlm_only"
    return "sop" if sentence_order_prediction else "nsp"


def objective_of(settings: Any) -> Objective:
    """The row of a Config, or of a settings mapping (``Config.to_json()``, a manifest)."""
    get = settings.get if isinstance(settings, Mapping) else lambda key, default=None: getattr(settings, key, default)
    return OBJECTIVES[layout_of(get("mlm_only"), get("sentence_order_prediction"), get("disable_masking"),
                                get("unmasked_format", "ids"))]

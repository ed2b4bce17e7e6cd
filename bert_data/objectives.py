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
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from .format.schema import (
    DEFAULT_SEQUENCES_PER_PACK, MLM_ONLY_FEATURES, NSP_FEATURES, PACKED_MLM_ONLY_FEATURES, PACKED_NSP_FEATURES,
    PACKED_SOP_FEATURES, SOP_FEATURES, TOKEN_SEQUENCES, TOKEN_SEQUENCES_DESCRIPTION, UNMASKED_FEATURES, FeatureSpec,
    schema_description,
)
from .instances import InstancePass, PassRandomness, pair_pass
from .negatives import count_unit_negatives, pool_manifest_fields
from .packing import PackingParams, UnitPacker, packing_summary
from .tokenization import TokenizedGroup
from .windows import WindowOptions, build_streams, window_pass

# A planner prepares one unit's passes: given the unit's tokenized documents, the worker's
# resources (config, instance/masking parameters, the NSP negative pool, ...) and the original
# document of each of the unit's documents (``origins``: None when the row does not ask for
# them), it returns the function that plans one dupe pass from that pass's randomness.
PassPlanner = Callable[[TokenizedGroup, Any, Optional[Sequence[int]]], Callable[[PassRandomness], InstancePass]]


def plan_pairs(unit: TokenizedGroup, resources: Any, origins: Optional[Sequence[int]] = None
               ) -> Callable[[PassRandomness], InstancePass]:
    """BERT's sentence pairs (NSP or SOP), re-planned every pass. NSP's random B segments come
    from the run's negative pool when there is one (:mod:`bert_data.negatives`), else from the
    unit's other documents (a library caller without a planned pool)."""
    config = resources.config
    pool = getattr(resources, "pool", None)
    negatives = None
    if pool is not None and origins is not None and not resources.params.sentence_order_prediction:
        negatives = pool.negatives(unit, origins)

    def one_pass(randomness: PassRandomness) -> InstancePass:
        return pair_pass(unit, resources.params, resources.masking, randomness, config.num_output_files,
                         resources.is_continuation, negatives=negatives)

    return one_pass


def plan_windows(unit: TokenizedGroup, resources: Any, origins: Optional[Sequence[int]] = None
                 ) -> Callable[[PassRandomness], InstancePass]:
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
    negatives: bool = False  # draws random B segments: the run's negative pool is built, origins are tracked
    packed: bool = False  # --packing: rows of several instances (bert_data.packing); n_examples counts rows

    def unit_packer(self, config: Any, first_pass: PassRandomness) -> Optional[UnitPacker]:
        """--packing: the packer of one unit's passes (seeded by its first pass); None otherwise."""
        if not self.packed:
            return None
        paired = any(spec.name == "segment_ids" for spec in self.features)
        params = PackingParams(config.max_seq_length, config.max_predictions_per_seq, config.max_sequences_per_pack,
                               paired)
        return UnitPacker(params, first_pass.packing_seed, first_pass.first_shard, config.num_output_files)

    def count_pass(self, instance_pass: InstancePass, stats: Counter) -> None:
        """Add a finished pass's counters: its instances and what it could not make."""
        stats["instances"] += instance_pass.n
        for counter, attribute in self.pass_counters.items():
            stats[counter] += getattr(instance_pass, attribute)

    def count_unit(self, unit: TokenizedGroup, resources: Any, origins: Optional[Sequence[int]], stats: Counter) -> None:
        """Add a unit's counters (once per unit, not per pass): its documents without a negative."""
        if self.negatives:
            count_unit_negatives(getattr(resources, "pool", None), unit, origins, stats)

    def manifest_fields(self, settings: Mapping[str, Any], stats: Counter) -> Dict[str, Any]:
        """The manifest keys of this layout: objective, masking, record_schema, the schema written
        and the counters its passes keep."""
        schema = self.schema if self.schema is not None else schema_description(
            settings["max_seq_length"], settings["max_predictions_per_seq"], self.features,
            settings.get("max_sequences_per_pack") or DEFAULT_SEQUENCES_PER_PACK)
        out: Dict[str, Any] = {
            "objective": self.objective,
            "masking": "static" if self.masked else "none (mask in the reader)",
            "record_schema": self.layout,
            "schema": schema,
        }
        for counter in self.pass_counters:
            if counter != "nsp_negatives_unavailable":  # (a top-level key of every manifest)
                out[counter] = stats[counter]
        if self.negatives:
            out.update(pool_manifest_fields(stats))
        if self.packed:
            out["packing_summary"] = packing_summary(stats["instances"], stats["packed_rows"], stats["packed_real_tokens"],
                                             settings["max_seq_length"], settings.get("max_sequences_per_pack"))
        return out


_WINDOWS = {"windows_spanning_documents": "spanning_documents"}
_NSP = {"nsp_negatives_unavailable": "unpaired", "nsp_random_next": "random_next",
        "nsp_single_sentence_chunks": "single_sentence_chunks", "nsp_continuations_kept": "continuations_kept"}


OBJECTIVES: Dict[str, Objective] = {
    row.layout: row
    for row in (
        Objective("nsp", "mlm+nsp", NSP_FEATURES, plan_pairs, "pairs", _NSP, negatives=True),
        Objective("sop", "mlm+sop", SOP_FEATURES, plan_pairs, "pairs", {"sop_single_segment_chunks": "unpaired"}),
        Objective("mlm_only", "mlm_only", MLM_ONLY_FEATURES, plan_windows, "windows", _WINDOWS),
        Objective("unmasked", "mlm_only", UNMASKED_FEATURES, plan_windows, "windows", _WINDOWS, masked=False),
        Objective(TOKEN_SEQUENCES, "mlm_only", UNMASKED_FEATURES, plan_windows, "windows", _WINDOWS,
                  encoder="token_sequences", masked=False, schema=TOKEN_SEQUENCES_DESCRIPTION),
        # --packing: the same instances (same planners, same streams), several per row
        Objective("nsp_packed", "mlm+nsp", PACKED_NSP_FEATURES, plan_pairs, "pairs", _NSP, negatives=True, packed=True),
        Objective("sop_packed", "mlm+sop", PACKED_SOP_FEATURES, plan_pairs, "pairs",
                  {"sop_single_segment_chunks": "unpaired"}, packed=True),
        Objective("mlm_only_packed", "mlm_only", PACKED_MLM_ONLY_FEATURES, plan_windows, "windows", _WINDOWS, packed=True),
    )
}

# The objective each record layout trains, as recorded under "objective".
OBJECTIVE_OF_LAYOUT = {name: row.objective for name, row in OBJECTIVES.items()}


def layout_of(mlm_only: bool, sentence_order_prediction: bool, disable_masking: bool,
              unmasked_format: str = "ids", packing: bool = False) -> str:
    """The layout (a key of :data:`OBJECTIVES`) of the records a run with these settings writes."""
    if packing and not disable_masking:
        return "mlm_only_packed" if mlm_only else "sop_packed" if sentence_order_prediction else "nsp_packed"
    if mlm_only:
        if disable_masking:
            return TOKEN_SEQUENCES if unmasked_format == "tokens" else "unmasked"
        return "mlm_only"
    return "sop" if sentence_order_prediction else "nsp"


def objective_of(settings: Any) -> Objective:
    """The row of a Config, or of a settings mapping (``Config.to_json()``, a manifest)."""
    get = settings.get if isinstance(settings, Mapping) else lambda key, default=None: getattr(settings, key, default)
    return OBJECTIVES[layout_of(get("mlm_only"), get("sentence_order_prediction"), get("disable_masking"),
                                get("unmasked_format", "ids"), bool(get("packing", False)))]

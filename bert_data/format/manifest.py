"""The manifest, ``data_params.json``: what a run wrote, how, and from what.

Written last, beside the shards, by every runner: it is the commit point of a run (a directory
without it is not a finished output). Readers use it to find the record layout and sizes, and
``inspect_tfrecords`` checks the shards against it.

This module is the manifest's one home: its file name, :func:`build_manifest` (a pure function
of the settings and the run's counters), and loading/checking it.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Mapping

from .. import __version__
from .schema import SCHEMAS, objective_schema, schema_description

MANIFEST_NAME = "data_params.json"

# The objective each record layout trains, as recorded under "objective".
OBJECTIVE_OF_LAYOUT = {"nsp": "mlm+nsp", "sop": "mlm+sop", "mlm_only": "mlm_only", "unmasked": "mlm_only"}


def file_sha256(path: str) -> str:
    """sha256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class VocabIdentity:
    """The vocabulary as the manifest records it: where it was named, its content hash and size."""

    path: str  # absolute local path, or the URL as given
    sha256: str
    size: int


class AccountingError(RuntimeError):
    """read != used + skipped: a bug, never a user error (it must not be published)."""


def _by_prefix(stats: Mapping[str, int], prefix: str) -> Dict[str, int]:
    return {key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith(prefix)}


def build_manifest(settings: Mapping[str, Any], stats: Counter, per_shard: Dict[str, int], summary,
                   vocab: VocabIdentity) -> Dict[str, Any]:
    """The manifest of a finished run: every setting (``Config.to_json()``), then the counters.

    ``summary`` is the metadata scan's (``entries``, ``duplicate_entries``). Raises
    :class:`AccountingError` when documents read != used + skipped."""
    skipped = _by_prefix(stats, "skipped.")
    read = stats["documents.read"]
    used = stats["documents.used"]
    manifest = dict(settings)
    seq, pred = settings["max_seq_length"], settings["max_predictions_per_seq"]
    manifest.update(
        {
            "bert_data_version": __version__,
            "n_examples": sum(per_shard.values()),
            "n_docs": used,
            "documents": {"read": read, "used": used, "skipped": skipped},
            "metadata_entries": summary.entries,
            "duplicate_metadata_entries": summary.duplicate_entries,
            "input_bytes": stats["input_bytes"],
            "replaced_bytes": stats["replaced_bytes"],
            "decoded_as": _by_prefix(stats, "decoded_as."),
            "decompressed": _by_prefix(stats, "decompressed."),
            "paragraph_chunks": stats["paragraph_chunks"],
            "sentences": stats["sentences"],
            "sentences_without_tokens": stats["sentences_without_tokens"],
            "tokens": stats["tokens"],
            "unk_tokens": stats["unk_tokens"],
            "unk_rate": (stats["unk_tokens"] / stats["tokens"]) if stats["tokens"] else 0.0,
            "nsp_negatives_unavailable": stats["nsp_negatives_unavailable"],
            "instances_per_shard": per_shard,
            "vocab_path": vocab.path,
            "vocab_sha256": vocab.sha256,
            "vocab_size": vocab.size,
            "schema": schema_description(seq, pred),
        }
    )
    manifest.update(_objective_fields(settings, stats))  # objective, record_schema, the schema written
    if read != used + sum(skipped.values()):
        raise AccountingError(f"document accounting broke: read {read} != used {used} + skipped {skipped}")
    return manifest


def _objective_fields(settings: Mapping[str, Any], stats: Counter) -> Dict[str, Any]:
    """Manifest keys of the training objective: the mode and the schema actually written."""
    name = objective_schema(settings["mlm_only"], settings["sentence_order_prediction"], settings["disable_masking"])
    out: Dict[str, Any] = {
        "objective": OBJECTIVE_OF_LAYOUT[name],
        "masking": "none (mask in the reader)" if settings["disable_masking"] else "static",
        "record_schema": name,
        "schema": schema_description(settings["max_seq_length"], settings["max_predictions_per_seq"], SCHEMAS[name]),
    }
    if settings["sentence_order_prediction"]:
        out["sop_single_segment_chunks"] = stats["sop_single_segment_chunks"]
    if settings["mlm_only"]:
        out["windows_spanning_documents"] = stats["windows_spanning_documents"]
    return out


def local_vocab_identity(vocab_file: str, size: int) -> VocabIdentity:
    return VocabIdentity(os.path.abspath(vocab_file), file_sha256(vocab_file), size)

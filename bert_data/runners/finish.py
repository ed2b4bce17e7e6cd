"""The one finish/commit sequence of every runner and every output.

:func:`finish` is called by the coordinator (:mod:`bert_data.runners.job`: the process pool, Dask,
BERT's named files) and by Beam's last step (:func:`bert_data.runners.beam.finalize`) alike:

    nothing usable?  -> everything of the run discarded, one line, exit 2 (nothing published)
    publish          -> every shard in place under its final name
    manifest         -> built from the summed counters (:func:`bert_data.format.manifest.build_manifest`)
    commit           -> the manifest written (the commit point), then the work directory removed

:func:`quality_warnings` is what a finished run says on the console besides the manifest.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Mapping, Tuple

from .. import storage
from ..config import Config
from ..errors import NothingUsableError, plural
from ..faults import crash_point
from ..format.containers import CONTAINERS
from ..format.manifest import VocabIdentity, build_manifest
from ..metadata import MetadataSummary
from ..output.outputs import Output


def finish(
    output: Output, *, config: Config, stats: Counter, summary: MetadataSummary, vocab: VocabIdentity,
    inputs: Mapping[str, str],
) -> Dict:
    """The one finish/commit sequence of every runner and output: a run that made nothing
    publishes nothing (its work is discarded: the corrected rerun starts clean) and is one line,
    exit 2; else the shards are published, the manifest is built from the counters and written
    (the commit point), then the work directory removed (a kill between leaves a finished
    output that ``--resume`` tidies)."""
    if not stats["instances"]:
        output.discard()
        raise NothingUsableError(nothing_usable(stats))
    per_shard = output.publish()
    crash_point("published", 0)
    sizes = storage.sizes(config.output_dir, list(per_shard))
    manifest = build_manifest(config.to_json(), stats, per_shard, summary, vocab, sizes)
    manifest["inputs"] = dict(inputs)  # what --resume of a finished run checks
    return output.commit(manifest)  # the manifest as published


def nothing_usable(stats: Counter) -> str:
    skipped = {k.split(".", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("skipped.") and v}
    reasons = ", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"
    read, used = stats["documents.read"], stats["documents.used"]
    if not read and stats["wikiextractor_lines_outside_doc"]:
        return (f"no <doc ...> block found: {plural(stats['wikiextractor_lines_outside_doc'], 'non-blank line')} outside any "
                f"(--input_format wikiextractor reads WikiExtractor's output); for plain text pass --input_format text; "
                f"nothing was published")
    if not used and not read:  # (not "0 documents read, all skipped (none)")
        why = f"skipped: {reasons}" if skipped else "the input files hold none"
        return f"no document was read ({why}); nothing was published"
    if not used:
        return f"no usable document: {plural(read, 'document')} read, all skipped ({reasons}); nothing was published"
    if stats["sop_single_segment_chunks"] and not stats["nsp_negatives_unavailable"]:  # SOP: no random B to find
        return (
            f"no instance could be made from the {plural(used, 'usable document')} "
            f"({plural(stats['sop_single_segment_chunks'], 'chunk')} held one segment, and sentence-order prediction "
            f"swaps two segments of one document; skipped: {reasons}); give documents of more than one sentence, or a "
            f"longer --max_seq_length; nothing was published"
        )
    unpaired = stats["nsp_negatives_unavailable"] + stats["sop_single_segment_chunks"]
    return (
        f"no instance could be made from the {plural(used, 'usable document')} ({plural(unpaired, 'one-sentence chunk')} had no "
        f"partner; skipped: {reasons}); give more documents (a random B comes from another one), or documents of "
        f"more than one sentence; nothing was published"
    )


def keep_worst(stats: Counter, prefix: str, keep: int) -> None:
    """Only the ``keep`` largest ``prefix*`` counters stay (the journal stays small)."""
    keys = sorted((k for k in stats if k.startswith(prefix)), key=lambda k: -stats[k])
    for key in keys[keep:]:
        del stats[key]


UNK_WARNING_RATE = 0.05  # above this share of [UNK] tokens the run warns: probably the wrong vocabulary


def quality_warnings(stats: Counter, manifest: Dict) -> List[str]:
    """What a finished run must say on the console, not only in the manifest."""
    out = []
    replaced = manifest.get("replaced_bytes", 0)
    if replaced:
        worst = sorted(((k.split(".", 1)[1], v) for k, v in stats.items() if k.startswith("replaced_in.")),
                       key=lambda kv: -kv[1])[:3]
        files = ", ".join(f"{path} ({n})" for path, n in worst)
        out.append(
            f"{plural(replaced, 'byte')} that are not valid {manifest.get('input_encoding', 'utf-8')} were replaced with U+FFFD "
            f"(worst: {files}); if the corpus is in another encoding pass --input_encoding (e.g. latin-1, cp1252)"
        )
    if manifest.get("unk_rate", 0.0) > UNK_WARNING_RATE:
        out.append(
            f"{manifest['unk_rate']:.1%} of all tokens are [UNK] (more than {UNK_WARNING_RATE:.0%}): check that "
            f"--vocab_file fits the corpus and that --do_lower_case matches it (uncased vocabularies need it)"
        )
    outside = manifest.get("wikiextractor_lines_outside_doc", 0)
    if outside:
        out.append(
            f"{plural(outside, 'non-blank line')} outside <doc ...> ... </doc> blocks were not read (counted as "
            f"wikiextractor_lines_outside_doc): are all listed files WikiExtractor output? Plain text needs --input_format text"
        )
    empty, shards = empty_shards(manifest)
    if empty:
        out.append(
            f"{empty} of {shards} shards are empty (only {manifest['n_examples']} instances): lower --num_output_files"
        )
    return out


def empty_shards(manifest: Mapping) -> Tuple[int, int]:
    """(shards without a record, shards) of a manifest: its files grouped by shard (an MDS shard
    is one or more pieces, and none at all when it has no sample), out of the shards asked for."""
    container = CONTAINERS.get(str(manifest.get("output_format", "tfrecord")), CONTAINERS["tfrecord"])
    records: Counter = Counter()
    for name, count in manifest.get("instances_per_shard", {}).items():
        records[container.shard_of(name)] += count
    shards = max(int(manifest.get("num_output_files") or 0), len(records))
    return shards - sum(1 for count in records.values() if count > 0), shards

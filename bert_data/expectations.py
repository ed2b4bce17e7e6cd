"""What the data of a run should look like for its settings, and a warning when it does not.

A run can be valid record by record and still not be the data BERT's recipe makes: too few
random-next pairs because B had no other document to come from, almost only random-next pairs
because every chunk was one sentence, far fewer instances than the corpus's tokens allow, or
documents cut into pieces. :func:`data_warnings` says so, each warning with its number and its
likely cause, from a run's manifest (``data_params.json``: the counters the run kept) and, in
``inspect_tfrecords``, from what reading the records found. The end-of-run summary
(:func:`bert_data.progress.run_summary`, of ``create_tfrecords`` and ``create_pretraining_data``)
and ``inspect_tfrecords --stats`` / ``--plot`` print them, and never say "OK" over one.

Pure: a mapping in, sentences out (no I/O, no imports of the pipeline).
"""

from __future__ import annotations

import math
from typing import Any, List, Mapping, Optional, Tuple

from .errors import plural

# BERT's recipe labels a pair random next half the time, and always when the chunk is one
# sentence: on prose 50-56% (its own figures on ../shared/corpus: 53.8%). Outside this band by
# more than chance, the data's NSP task is not BERT's.
NSP_RANDOM_BAND = (0.50, 0.65)
INSTANCES_FAR_BELOW = 0.5  # instances per pass under this share of (tokens / max_num_tokens): far below


def _int(data: Mapping[str, Any], key: str) -> Optional[int]:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _slack(n: int) -> float:
    """How far a fraction of ``n`` fair coins may stray by chance (4 standard deviations), at
    least 2 points."""
    return max(0.02, 4 * math.sqrt(0.25 / n)) if n else 1.0


def nsp_expected(instances: int) -> Tuple[float, float]:
    """``(low, high)``: the random-next fractions BERT's recipe makes expected of ``instances``
    pairs (:data:`NSP_RANDOM_BAND`, widened by what chance alone may do to so few pairs)."""
    slack = _slack(instances)
    return max(NSP_RANDOM_BAND[0] - slack, 0.0), min(NSP_RANDOM_BAND[1] + slack, 1.0)


def data_warnings(
    manifest: Mapping[str, Any], random_next: Optional[int] = None, instances: Optional[int] = None
) -> List[str]:
    """The warnings of a run's data, from its manifest; the NSP balance from ``random_next`` of
    ``instances`` pairs when given (inspect: the labels read, maybe of some shards only), else
    from the manifest's counts."""
    layout = manifest.get("record_schema", "nsp")
    total = _int(manifest, "n_examples") or 0
    out: List[str] = []
    if layout in ("nsp", "nsp_packed"):
        out += _no_negatives(manifest)
    if layout == "nsp":  # (packed rows hold several pairs: their counts are not the pairs')
        r, n = (random_next, instances) if random_next is not None and instances else (
            _int(manifest, "nsp_random_next"), total)
        if r is not None and n:
            out += _nsp_balance(manifest, r, n)
    if layout in ("nsp", "sop"):
        out += _few_instances(manifest, total)
    out += _cut_documents(manifest)
    return out


def _no_negatives(manifest: Mapping[str, Any]) -> List[str]:
    units = _int(manifest, "nsp_units_without_negatives") or 0
    dropped = _int(manifest, "nsp_negatives_unavailable") or 0
    kept = _int(manifest, "nsp_continuations_kept") or 0
    if not (units or dropped or kept):
        return []
    pool = manifest.get("nsp_negative_pool") or {}
    documents = pool.get("documents") if isinstance(pool, Mapping) else None
    where = (f"the negative pool holds {plural(documents, 'document')} (nsp_negative_pool)" if isinstance(documents, int)
             else "negatives came from each unit's other documents")
    lost = [f"{plural(dropped, 'one-sentence chunk')} dropped (nsp_negatives_unavailable)" if dropped else "",
            f"{plural(kept, 'pair')} kept as is-next where a random B was due (nsp_continuations_kept)" if kept else ""]
    documents_without = _int(manifest, "nsp_documents_without_negatives") or 0
    return [
        f"no negative for a random B in {plural(units, 'unit')} ({plural(documents_without, 'document')}): "
        f"{' and '.join(x for x in lost if x) or 'nothing lost yet'}; likely cause: the corpus (or this split) has only "
        f"one document, {where}; give more documents"
    ]


def _nsp_balance(manifest: Mapping[str, Any], random_next: int, instances: int) -> List[str]:
    fraction = random_next / instances
    low, high = nsp_expected(instances)
    if low <= fraction <= high:
        return []
    single, total = _int(manifest, "nsp_single_sentence_chunks"), _int(manifest, "n_examples")
    kept = _int(manifest, "nsp_continuations_kept")
    if fraction < low:
        cause = ("pairs due a random B kept their true continuation because no other document was there"
                 + (f" ({plural(kept, 'pair')}, nsp_continuations_kept)" if kept else ""))
    elif single is not None and total:
        cause = (f"{single / total:.0%} of the pairs are one-sentence chunks, random next whatever the coin: "
                 "sentences as long as --max_seq_length, or documents of one sentence (check the sentence "
                 "splitting; lines that are sentences need --single_sentence_per_line)")
    else:
        cause = ("many chunks are one sentence (random next whatever the coin): sentences as long as --max_seq_length, "
                 "or documents of one sentence; check the sentence splitting")
    return [
        f"random-next fraction {fraction:.1%} ({random_next:,} of {instances:,} pairs) is outside the "
        f"{low:.0%}-{high:.0%} BERT's recipe gives; likely cause: {cause}"
    ]


def _few_instances(manifest: Mapping[str, Any], instances: int) -> List[str]:
    tokens, dupe, seq = _int(manifest, "tokens"), _int(manifest, "dupe_factor"), _int(manifest, "max_seq_length")
    if not (tokens and dupe and seq and seq > 3):
        return []
    possible = tokens / (seq - 3)  # one full instance per max_num_tokens of text, per pass
    per_pass = instances / dupe
    if per_pass >= INSTANCES_FAR_BELOW * possible or possible < 20:
        return []
    sentences = _int(manifest, "sentences")
    if sentences and tokens / sentences > (seq - 3) / 2:
        cause = (f"sentences average {tokens / sentences:.0f} tokens, so most of each is cut away to fit "
                 f"--max_seq_length {seq} (check the sentence splitting)")
    else:
        dropped = (_int(manifest, "nsp_negatives_unavailable") or 0) + (_int(manifest, "sop_single_segment_chunks") or 0)
        cause = (f"{plural(dropped, 'one-sentence chunk')} had no partner and were dropped" if dropped
                 else "documents shorter than a pair's two segments")
    return [
        f"{per_pass:,.0f} instances per pass is {per_pass / possible:.0%} of the ~{possible:,.0f} the corpus's "
        f"{tokens:,} tokens make expected (one per {seq - 3} tokens); likely cause: {cause}"
    ]


def _cut_documents(manifest: Mapping[str, Any]) -> List[str]:
    split = manifest.get("documents_split") or {}
    documents = split.get("documents") if isinstance(split, Mapping) else None
    if not isinstance(documents, int) or documents <= 0:
        return []
    pieces = documents + (split.get("extra_pieces") or 0)
    limits = [x for x in (_int(manifest, "max_document_chars"), _int(manifest, "group_bytes")) if x]
    where = f" of more than {min(limits):,} characters (--max_document_chars, at most --group_bytes)" if limits else ""
    return [
        f"{plural(documents, 'document')}{where} were cut into {plural(pieces, 'piece')}: no instance spans a cut and "
        f"each piece draws its own target length (NSP negatives still never come from the same document); "
        f"raise --max_document_chars and --group_bytes to keep them whole"
    ]


def nsp_fact(manifest: Mapping[str, Any]) -> str:
    """A short account of the NSP labels and negatives for the end-of-run summary, or ""."""
    if manifest.get("record_schema", "nsp") != "nsp":
        return ""
    n, r = _int(manifest, "n_examples"), _int(manifest, "nsp_random_next")
    if not n or r is None:
        return ""
    pool = manifest.get("nsp_negative_pool") or {}
    documents = pool.get("documents") if isinstance(pool, Mapping) else None
    negatives = f", negatives from a pool of {plural(documents, 'document')}" if isinstance(documents, int) else ""
    return f"{r / n:.1%} random next{negatives}"

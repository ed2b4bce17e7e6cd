"""The per-group function and the local runner that drives it.

Work unit: a *group* of ``--split_num`` consecutive metadata entries. A group is read,
segmented and tokenized once; then every dupe pass builds its instances (NSP negatives come
from other documents of the same group) and writes them to the group's fragment file. Every
random choice comes from RNGs seeded by a hash of (seed, group index, dupe pass), so a group's
bytes do not depend on any other group, on the worker that ran it, or on the worker count.

:func:`process_group` is the function every runner executes (in-process, a process pool, or
Apache Beam); :func:`run` is the local runner.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__
from .config import Config
from .documents import SKIP_EMPTY, SKIP_NO_SENTENCE, read_source
from .instances import InstanceParams, TokenizedGroup, create_instances
from .metadata import DocumentSource, iter_groups, iter_metadata, scan_metadata
from .schema import NSP_FEATURES, schema_description
from .writer import (
    MANIFEST_NAME,
    FragmentWriter,
    Segment,
    ShardAssembler,
    fragment_path,
    prepare_output_dir,
    write_json_atomically,
)

log = logging.getLogger("bert_data")

FEATURE_ORDER: Tuple[Tuple[str, str], ...] = tuple((f.name, f.dtype) for f in NSP_FEATURES)


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from stable ids (seed, purpose, group, pass): independent streams per unit."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass
class Resources:
    """What a worker builds once and reuses for every group: never pickled per task."""

    config: Config
    segmenter: object
    tokenizer: object
    params: InstanceParams
    is_continuation: Optional[np.ndarray]


def build_resources(config: Config) -> Resources:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per worker: no hidden threads
    from .sentences import SentenceSegmenter
    from .tokenization import FullTokenizer

    tokenizer = FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
    segmenter = SentenceSegmenter(config.spacy_model, config.single_sentence_per_line)
    params = InstanceParams(
        max_seq_length=config.max_seq_length,
        short_seq_prob=config.short_seq_prob,
        min_short_seq_length=config.min_short_seq_length,
        masked_lm_prob=config.masked_lm_prob,
        max_predictions_per_seq=config.max_predictions_per_seq,
        mask_whole_word=config.mask_whole_word,
        vocab_size=len(tokenizer.vocab),
        cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id,
        mask_id=tokenizer.mask_id,
    )
    is_continuation = None
    if config.mask_whole_word:
        is_continuation = np.zeros(len(tokenizer.vocab), dtype=bool)
        for token, index in tokenizer.vocab.items():
            is_continuation[index] = token.startswith("##")
    return Resources(config, segmenter, tokenizer, params, is_continuation)


@dataclass
class GroupResult:
    group_index: int
    fragment_path: str
    segments: List[Segment]
    stats: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)  # wall time per stage (benchmarks only)


class _StageClock:
    """Accumulates wall time per stage: ``with clock("tokenize"): ...``."""

    def __init__(self, seconds: Counter) -> None:
        self.seconds = seconds
        self._stage = ""
        self._start = 0.0

    def __call__(self, stage: str) -> "_StageClock":
        self._stage = stage
        return self

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.seconds[self._stage] += time.perf_counter() - self._start


def tokenize_documents(
    documents: Sequence[str], resources: Resources, stats: Counter, clock: Optional[_StageClock] = None
) -> TokenizedGroup:
    """Segment and tokenize a group's documents at once; empty ones are counted, not kept."""
    clock = clock or _StageClock(Counter())
    with clock("segment"):
        per_doc_sentences, chunked = resources.segmenter.segment(documents)
    stats["paragraph_chunks"] += chunked
    texts: List[str] = []
    owner: List[int] = []
    for index, sentences in enumerate(per_doc_sentences):
        texts.extend(sentences)
        owner.extend([index] * len(sentences))
    with clock("tokenize"):
        ids, offsets = resources.tokenizer.encode_ids(texts)
    lengths = np.diff(offsets)
    keep = lengths > 0
    owner_arr = np.asarray(owner, dtype=np.int64)
    per_doc = np.bincount(owner_arr[keep], minlength=len(documents)) if len(owner_arr) else np.zeros(
        len(documents), dtype=np.int64
    )
    stats["sentences"] += int(keep.sum())
    stats["sentences_without_tokens"] += int((~keep).sum())
    stats["tokens"] += int(len(ids))
    stats["unk_tokens"] += int(np.count_nonzero(ids == resources.tokenizer.unk_id))
    doc_starts = [0]
    for index, count in enumerate(per_doc.tolist()):
        if count == 0:
            reason = SKIP_EMPTY if not documents[index].strip() else SKIP_NO_SENTENCE
            stats[f"skipped.{reason}"] += 1
            continue
        doc_starts.append(doc_starts[-1] + count)
    stats["documents.used"] += len(doc_starts) - 1
    sent_offsets = np.concatenate([[0], np.cumsum(lengths[keep])]).astype(np.int64)
    return TokenizedGroup(ids=ids, sent_offsets=sent_offsets, doc_starts=doc_starts)


def read_group(sources: Sequence[DocumentSource], config: Config, stats: Counter) -> List[str]:
    separator = config.multiple_docs_separator if config.multiple_docs_in_single_file else None
    documents: List[str] = []
    for source in sources:
        result = read_source(source, separator)
        stats["input_bytes"] += result.input_bytes
        stats["replaced_bytes"] += result.replaced_bytes
        if result.encoding != "utf-8":
            stats[f"decoded_as.{result.encoding}"] += 1
        if result.skip_reason:
            stats["documents.read"] += 1
            stats[f"skipped.{result.skip_reason}"] += 1
            continue
        stats["documents.read"] += len(result.documents)
        documents.extend(result.documents)
    return documents


def process_group(
    group_index: int, sources: Sequence[DocumentSource], resources: Resources, work_dir: str
) -> GroupResult:
    """Read, segment, tokenize, then for each dupe pass: pair, mask, shuffle, write a fragment."""
    config = resources.config
    stats: Counter = Counter()
    seconds: Counter = Counter()
    clock = _StageClock(seconds)
    with clock("read"):
        documents = read_group(sources, config, stats)
    group = tokenize_documents(documents, resources, stats, clock)
    writer = FragmentWriter(fragment_path(work_dir, group_index), config.compression, seconds=seconds)
    try:
        if group.n_docs:
            for dupe_pass in range(config.dupe_factor):
                with clock("instances"):
                    pair_rng = random.Random(derive_seed(config.seed, "pairs", group_index, dupe_pass))
                    mask_rng = np.random.Generator(
                        np.random.PCG64(derive_seed(config.seed, "mask", group_index, dupe_pass))
                    )
                    features = create_instances(group, resources.params, pair_rng, mask_rng, resources.is_continuation)
                    if not features:
                        continue
                    stats["nsp_negatives_unavailable"] += int(features.pop("_negatives_unavailable")[0])
                    n = len(features["input_ids"])
                    order = mask_rng.permutation(n)
                    features = {name: features[name][order] for name, _ in FEATURE_ORDER}
                    shard_offset = derive_seed(config.seed, "shard", group_index, dupe_pass) % config.num_output_files
                    shard_of_row = (np.arange(n) + shard_offset) % config.num_output_files
                writer.write_batch(features, FEATURE_ORDER, shard_of_row, config.num_output_files)
                stats["instances"] += n
        with clock("write"):
            writer.close()
    except BaseException:
        writer.abort()
        raise
    return GroupResult(group_index, writer.path, writer.segments, stats, seconds)


# --- local runner ---------------------------------------------------------------------------

_WORKER_RESOURCES: Optional[Resources] = None


def _init_worker(config: Config) -> None:
    global _WORKER_RESOURCES
    _WORKER_RESOURCES = build_resources(config)


def _process_in_worker(group_index: int, sources: Sequence[DocumentSource], work_dir: str) -> GroupResult:
    if _WORKER_RESOURCES is None:
        raise RuntimeError("worker initializer did not run")
    return process_group(group_index, sources, _WORKER_RESOURCES, work_dir)


def run_groups(
    config: Config, groups: Iterable[Tuple[int, List[DocumentSource]]], work_dir: str
) -> Iterator[GroupResult]:
    """Results in group order. At most ``2 * num_workers`` groups are in flight, so memory
    (and the metadata read ahead) stays bounded whatever the corpus size."""
    if config.num_workers == 1:
        resources = build_resources(config)
        for group_index, sources in groups:
            yield process_group(group_index, sources, resources, work_dir)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=config.num_workers, mp_context=context, initializer=_init_worker, initargs=(config,)
    ) as pool:
        pending: deque = deque()
        try:
            for group_index, sources in groups:
                pending.append(pool.submit(_process_in_worker, group_index, sources, work_dir))
                if len(pending) >= 2 * config.num_workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BaseException:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def vocab_fingerprint(vocab_file: str) -> str:
    with open(vocab_file, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def build_manifest(config: Config, stats: Counter, per_shard: Dict[str, int], summary, vocab_size: int) -> Dict:
    skipped = {key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith("skipped.")}
    read = stats["documents.read"]
    used = stats["documents.used"]
    manifest = dict(config.to_json())
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
            "decoded_as": {
                key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith("decoded_as.")
            },
            "paragraph_chunks": stats["paragraph_chunks"],
            "sentences": stats["sentences"],
            "sentences_without_tokens": stats["sentences_without_tokens"],
            "tokens": stats["tokens"],
            "unk_tokens": stats["unk_tokens"],
            "unk_rate": (stats["unk_tokens"] / stats["tokens"]) if stats["tokens"] else 0.0,
            "nsp_negatives_unavailable": stats["nsp_negatives_unavailable"],
            "instances_per_shard": per_shard,
            "vocab_sha256": vocab_fingerprint(config.vocab_file),
            "vocab_size": vocab_size,
            "schema": schema_description(config.max_seq_length, config.max_predictions_per_seq),
        }
    )
    if read != used + sum(skipped.values()):
        raise RuntimeError(f"document accounting broke: read {read} != used {used} + skipped {skipped}")
    return manifest


ProgressCallback = Callable[[GroupResult], None]


def run(config: Config, on_group: Optional[ProgressCallback] = None) -> Dict:
    """Run the whole job locally; returns the manifest that was written."""
    from .tokenization import case_mismatch_warning, load_vocab

    vocab = load_vocab(config.vocab_file)
    warning = case_mismatch_warning(vocab, config.do_lower_case)
    if warning:
        log.warning(warning)
    summary = scan_metadata(config.metadata_files, config.input_files_prefix)
    if summary.duplicate_entries:
        log.warning("%d duplicate document path(s) in the metadata; each is processed again", summary.duplicate_entries)
    work_dir = prepare_output_dir(config.output_dir, config.name, config.num_output_files, config.overwrite)
    assembler = ShardAssembler(config.output_dir, work_dir, config.name, config.num_output_files)
    stats: Counter = Counter()
    try:
        groups = iter_groups(iter_metadata(config.metadata_files, config.input_files_prefix), config.split_num)
        for result in run_groups(config, groups, work_dir):
            assembler.append(result.fragment_path, result.segments)
            stats.update(result.stats)
            if on_group is not None:
                on_group(result)
        per_shard = assembler.publish()
    finally:
        assembler.close()
    manifest = build_manifest(config, stats, per_shard, summary, len(vocab))
    shutil.rmtree(work_dir, ignore_errors=True)
    write_json_atomically(os.path.join(config.output_dir, MANIFEST_NAME), manifest)  # the commit point
    return manifest

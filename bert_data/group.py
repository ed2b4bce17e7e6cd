"""WHAT a group is made of: a group's work items -> batches of features + counters.

Work unit: a *group* (planned by :func:`bert_data.metadata.plan_groups`): at most
``--split_num`` consecutive metadata entries and ``--group_bytes`` bytes of files, or one byte
range of a large file, or one large file that cannot be ranged (compressed, say). Its documents
are streamed and cut into *units* of at most ``--group_bytes`` characters of text (usually a
group is one unit); a unit is segmented and tokenized once, then every dupe pass plans its
instances and masks them. NSP's random B segments come from the run's negative pool
(:mod:`bert_data.negatives`: a corpus-wide sample chosen at plan time, built once per worker by
:func:`ensure_pool`), never from A's own original document, so they do not depend on how the
work is cut. Memory per worker is bounded by one unit plus the pool. :func:`group_batches`
reads top to bottom as the pipeline, one call into each stage:

    read (documents) -> segment (sentences) -> tokenize (tokenization)    (tokenized_units)
      -> per pass: plan + mask (the objective's planner: instances / windows + masking)

With ``--from_tokens DIR`` the first three stages are the token cache's units instead
(:func:`bert_data.token_cache.cached_units`, made by `bert-data tokenize` with
:func:`tokenized_units`, counters included): the passes, and so the bytes, are the same.

It writes no file: where the batches go (encoder, container, fragment) is the worker's
business (:func:`bert_data.runners.worker.make_group`, which every runner calls).

Randomness: every random choice of group *g*, pass *p* comes from RNGs derived here, by
:func:`pass_randomness`, from a hash of (``--seed``, purpose, *g*, *p*). A group's bytes
therefore do not depend on any other group, on the worker that ran it, or on the worker count.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from .config import Config
from .errors import ConfigError
from .documents import ReadOptions, can_range, iter_documents, untokenized_reason
from .format.encoders import ENCODERS
from .instances import InstanceParams, PassRandomness
from .masking import MaskingParams
from .metadata import GroupPlan, WorkItem
from .negatives import DocumentOrigins, NegativePool, build_pool, one_document_per_file
from .objectives import Objective, objective_of
from .token_cache import TokenizedUnit, cached_pool, cached_units, pool_identity
from .tokenization import TokenizedDocuments, tokenize_group

Batch = Tuple[Mapping[str, np.ndarray], np.ndarray]  # features (one row per instance), the shard of each row


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from stable ids (seed, purpose, group, pass): independent streams per unit."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def pass_randomness(
    seed: int, plan_stream: str, group_index: int, dupe_pass: int, num_shards: int, unit: int = 0
) -> PassRandomness:
    """Everything random in one (group, unit, pass): the planning RNG (``plan_stream`` is "pairs"
    or "windows"), the masking/shuffling RNG and the shard its first instance goes to. (The
    first unit of a group keeps the ids of the time when a group was always one unit.)"""
    ids = (group_index, dupe_pass) if unit == 0 else (group_index, dupe_pass, unit)
    return PassRandomness(
        plan_rng=random.Random(derive_seed(seed, plan_stream, *ids)),
        mask_rng=np.random.Generator(np.random.PCG64(derive_seed(seed, "mask", *ids))),
        first_shard=derive_seed(seed, "shard", *ids) % num_shards,
        packing_seed=derive_seed(seed, "packing", *ids),  # read only by --packing, of a unit's first pass (packing.UnitPacker)
    )


@dataclass
class Resources:
    """What a worker builds once and reuses for every group: never pickled per task."""

    config: Config
    segmenter: object
    tokenizer: object
    params: InstanceParams
    masking: Optional[MaskingParams]  # None with --disable_masking
    is_continuation: Optional[np.ndarray]  # the ## table, for whole-word masking
    separator_id: Optional[int] = None  # --mlm_only with cross-document windows: the document separator's id
    bytes_read: object = None  # a shared multiprocessing.Value the reader advances (progress), or None
    objective: Optional[Objective] = None  # the layout's row: planner, counters, encoder
    encoder: object = None  # features -> record payloads, built once (bert_data.format.encoders)
    pool: Optional[NegativePool] = None  # NSP: the run's negative pool, built by the first group that needs it
    pool_built: bool = False

    @property
    def read_options(self) -> ReadOptions:
        return read_options(self.config)


def ensure_pool(resources: Resources) -> Optional[NegativePool]:
    """The run's NSP negative pool (``config.negative_pool``, planned by
    :func:`bert_data.runners.plan.plan_run`), read, segmented and tokenized once per worker and
    kept in its resources; None when the layout draws no negatives or the Config was not planned
    (a library caller: then a unit's other documents are its negatives)."""
    config = resources.config
    if not resources.pool_built:
        if resources.objective is not None and resources.objective.negatives and config.negative_pool:
            def build() -> NegativePool:
                return build_pool(config.negative_pool, resources.read_options, config.input_files_prefix,
                                  config.metadata_files, resources.segmenter, resources.tokenizer)

            if config.from_tokens:
                vocab = resources.tokenizer.vocab
                resources.pool = cached_pool(config.from_tokens, config.negative_pool, pool_identity(config, vocab),
                                             len(vocab), build)
            else:
                resources.pool = build()
        resources.pool_built = True
    return resources.pool


def document_boundary(config: Config) -> Optional[str]:
    """The text between two documents of one file, or None (one document per file). As in the
    Model Zoo, ``--multiple_docs_separator S`` is a line holding S: documents are split on a
    newline followed by S, so the default S = "\n" means a blank line between documents, and an
    empty S makes every line a document."""
    return "\n" + config.multiple_docs_separator if config.multiple_docs_in_single_file else None


def read_options(config: Config) -> ReadOptions:
    separator = document_boundary(config)
    return ReadOptions(
        input_format=config.input_format, text_key=config.text_key, separator=separator,
        max_document_chars=min(config.max_document_chars, config.group_bytes),  # a piece fits in a unit
        encoding=config.input_encoding,
    )


def group_plan(config: Config) -> GroupPlan:
    """How this run's metadata entries become groups (see :func:`bert_data.metadata.plan_groups`)."""
    options = read_options(config)
    return GroupPlan(config.split_num, config.group_bytes, lambda source: can_range(source, options))


def build_resources(config: Config) -> Resources:
    """Tokenizer, sentence segmenter and the stages' parameters. The run's start-up checks
    (:mod:`bert_data.runners.startup`) have already validated the vocabulary and settings."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per worker: no hidden threads
    from .sentences import SentenceSegmenter
    from .tokenization import FullTokenizer, continuation_table

    tokenizer = FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
    segmenter = LazySegmenter(lambda: SentenceSegmenter(config.spacy_model, config.lines_are_sentences))
    if not config.from_tokens:  # (a run from the token cache segments at most its NSP pool: spaCy may never load)
        segmenter = segmenter.made()
    objective = objective_of(config)
    params = InstanceParams(
        max_seq_length=config.max_seq_length,
        short_seq_prob=config.short_seq_prob,
        min_short_seq_length=config.min_short_seq_length,
        cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id,
        sentence_order_prediction=config.sentence_order_prediction,
        # TFRecords of tf.Examples, unpacked: the masks' only reader is the serializer (format/row_runs.py)
        masks_as_runs=config.output_format == "tfrecord" and not config.packing and objective.encoder == "example",
    )
    masking = None
    if not config.disable_masking:
        masking = MaskingParams(
            masked_lm_prob=config.masked_lm_prob,
            max_predictions_per_seq=config.max_predictions_per_seq,
            mask_whole_word=config.mask_whole_word,
            vocab_size=len(tokenizer.vocab),
            mask_id=tokenizer.mask_id,
        )
    is_continuation = continuation_table(tokenizer.vocab) if config.mask_whole_word else None
    separator_id = None
    if config.mlm_only and config.allow_cross_document_examples:
        separator_id = document_separator_id(config, tokenizer.vocab)
    encoder = ENCODERS[objective.encoder](objective.features, tokenizer.vocab)
    return Resources(config, segmenter, tokenizer, params, masking, is_continuation, separator_id,
                     objective=objective, encoder=encoder)


class LazySegmenter:
    """The sentence segmenter, made at its first use: a ``--from_tokens`` run segments nothing but
    its NSP negative pool, which the token cache usually holds already (``cached_pool``), so most
    such workers never load spaCy (~0.7 CPU-s each)."""

    def __init__(self, make: Callable[[], object]) -> None:
        self._make = make
        self._segmenter: object = None

    def made(self) -> object:
        if self._segmenter is None:
            self._segmenter = self._make()
        return self._segmenter

    def segment(self, documents: Sequence[str]):
        return self.made().segment(documents)


def document_separator_id(config: Config, vocab: Dict[str, int]) -> int:
    """The id of ``--document_separator_token`` (MLM-only windows across documents)."""
    token = config.document_separator_token
    if token not in vocab:
        raise ConfigError(
            f"--document_separator_token {token!r} is not in --vocab_file {config.vocab_file}; use [SEP] or a "
            "token of that vocabulary"
        )
    return vocab[token]


class StageClock:
    """Accumulates wall time per stage: ``with clock("tokenize"): ...``."""

    def __init__(self, seconds: Counter) -> None:
        self.seconds = seconds
        self._stage = ""
        self._start = 0.0

    def __call__(self, stage: str) -> "StageClock":
        self._stage = stage
        return self

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.seconds[self._stage] += time.perf_counter() - self._start

    def timed(self, stage: str, items: Iterator["T"]) -> Iterator["T"]:
        """``items``, with the time spent producing each one added to ``stage``."""
        while True:
            with self(stage):
                item = next(items, _END)
            if item is _END:
                return
            yield item  # type: ignore[misc]


T = TypeVar("T")
_END = object()


def group_batches(
    group_index: int, items: Sequence[WorkItem], resources: Resources, stats: Counter, clock: "StageClock"
) -> Iterator[Batch]:
    """Stream the group's documents; for each unit of them: segment and tokenize once, then for
    each dupe pass plan and mask its instances, yielding them batch by batch (rows in output
    order, each with its shard). ``stats`` gets the group's counters, ``clock`` the time per stage."""
    config, objective = resources.config, resources.objective
    if objective.negatives:
        with clock("pool"):
            pool = ensure_pool(resources)
        if pool is not None and group_index == 0:  # the pool's facts, counted once per run (group 0 always runs)
            stats.update(pool.facts)
    if config.from_tokens:  # --from_tokens: the units as `bert-data tokenize` made them (bert_data.token_cache)
        units = clock.timed("read", cached_units(config, group_index, items, stats, objective.negatives))
    else:
        units = tokenized_units(items, resources, stats, clock, objective.negatives)
    work = WorkDone(resources.bytes_read, stats)
    for tokenized_unit in units:
        work.unit_read()
        unit, group, unit_origins = tokenized_unit.index, tokenized_unit.group, tokenized_unit.origins
        if group.n_docs:  # a unit without a usable document has no pass
            objective.count_unit(group, resources, unit_origins, stats)
            plan_pass = objective.planner(group, resources, unit_origins)
            packer = None  # --packing: the unit's passes are packed together (bert_data.packing.UnitPacker)
            for dupe_pass in range(config.dupe_factor):
                with clock("instances"):
                    randomness = pass_randomness(
                        config.seed, objective.plan_stream, group_index, dupe_pass, config.num_output_files, unit
                    )
                    planned = plan_pass(randomness)
                    if dupe_pass == 0:
                        packer = objective.unit_packer(config, randomness)
                yield from clock.timed("instances", planned.batches if packer is None else packer.add(planned.batches))
                objective.count_pass(planned, stats)
                work.pass_done(dupe_pass + 1, config.dupe_factor)
            if packer is not None:
                yield from clock.timed("instances", packer.finish())
                packer.count(stats)
        stats["units"] += 1
    work.group_done()


def tokenized_units(
    items: Sequence[WorkItem], resources: Resources, stats: Counter, clock: "StageClock", with_origins: bool
) -> Iterator[TokenizedUnit]:
    """Read, segment and tokenize: the group's documents cut into units, each segmented and
    tokenized once (with ``with_origins``, each kept document's origin for NSP). What a dupe pass
    reads, and what `bert-data tokenize` stores (:mod:`bert_data.token_cache`)."""
    origins: Optional[Deque[int]] = deque() if with_origins else None
    documents = clock.timed("read", _read(items, resources, stats, origins))
    for unit, unit_documents in enumerate(cut_units(documents, resources.config.group_bytes)):
        unit_origins = [origins.popleft() for _ in unit_documents] if origins is not None else None
        with clock("segment"):
            per_doc_sentences, chunked = resources.segmenter.segment(unit_documents)
            stats["paragraph_chunks"] += chunked
        with clock("tokenize"):
            tokenized = _tokenize(unit_documents, per_doc_sentences, resources, stats)
        if unit_origins is not None:  # the kept documents' origins
            left_out = set(tokenized.left_out)
            unit_origins = [o for d, o in enumerate(unit_origins) if d not in left_out]
        yield TokenizedUnit(unit, tokenized.group, unit_origins)


def _read(items: Sequence, resources: Resources, stats: Counter, origins: Optional[Deque[int]]) -> Iterator[str]:
    """The group's documents, item by item; with ``origins``, each document's original document
    (:class:`bert_data.negatives.DocumentOrigins`) is appended to it as the document is read."""
    options = resources.read_options
    tagger = DocumentOrigins(one_document_per_file(options), resources.config.input_files_prefix)
    for item in _as_items(items):
        documents = iter_documents([item], options, stats)
        if origins is None:
            yield from documents
            continue
        for document, origin in tagger.tag(item, documents):
            origins.append(origin)
            yield document


class WorkDone:
    """Advances the coordinator's live progress counter (``counter.value``, input bytes) by the
    work *done*, not the input read: a unit's input bytes count a ``1/dupe_factor`` share as each
    of its passes is written, so the bar reaches 100% when the last instances are written.

    Unlocked on purpose: a lost update between two workers only blurs the progress bar, and a
    lock would need a semaphore that a kill -9 leaks (with a warning)."""

    def __init__(self, counter, stats: Counter) -> None:
        self.counter = counter
        self.stats = stats
        self.reported = stats["input_bytes"]  # bytes whose work is already counted
        self.unit_start = self.reported
        self.unit_bytes = 0

    def _advance_to(self, position: int) -> None:
        if self.counter is not None and position > self.reported:
            self.counter.value += position - self.reported
        self.reported = max(self.reported, position)

    def unit_read(self) -> None:
        """A unit was read: its bytes (those read since the last unit) are now its work."""
        self._advance_to(self.unit_start + self.unit_bytes)  # a unit without a pass is done when the next is read
        self.unit_start = self.reported
        self.unit_bytes = self.stats["input_bytes"] - self.unit_start

    def pass_done(self, done: int, passes: int) -> None:
        self._advance_to(self.unit_start + self.unit_bytes * done // passes)

    def group_done(self) -> None:
        self._advance_to(self.stats["input_bytes"])


def _as_items(items: Sequence) -> List[WorkItem]:
    """Work items; bare sources (callers that predate byte ranges) are whole-file items."""
    return [item if isinstance(item, WorkItem) else WorkItem(item) for item in items]


def cut_units(documents: Iterable[str], budget: int) -> Iterator[List[str]]:
    """Consecutive runs of documents of at most ``budget`` characters each (a document longer
    than that is a unit of its own; the reader has already cut it to ``--max_document_chars``)."""
    unit: List[str] = []
    size = 0
    for document in documents:
        if unit and size + len(document) > budget:
            yield unit
            unit, size = [], 0
        unit.append(document)
        size += len(document)
    if unit:
        yield unit


def _tokenize(documents: Sequence[str], per_doc_sentences, resources: Resources, stats: Counter) -> TokenizedDocuments:
    tokenized = tokenize_group(per_doc_sentences, resources.tokenizer)
    stats["sentences"] += tokenized.sentences
    stats["sentences_without_tokens"] += tokenized.sentences_without_tokens
    stats["tokens"] += tokenized.tokens
    stats["unk_tokens"] += tokenized.unk_tokens
    for index in tokenized.left_out:
        stats[f"skipped.{untokenized_reason(documents[index])}"] += 1
    stats["documents.used"] += tokenized.group.n_docs
    return tokenized

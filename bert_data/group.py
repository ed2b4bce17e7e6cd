"""WHAT a group is made of: a group's work items -> batches of features + counters.

Work unit: a *group* (planned by :func:`bert_data.metadata.plan_groups`): at most
``--split_num`` consecutive metadata entries and ``--group_bytes`` bytes of files, or one byte
range of a large file, or one large file that cannot be ranged (compressed, say). Its documents
are streamed and cut into *units* of at most ``--group_bytes`` characters of text (usually a
group is one unit); a unit is segmented and tokenized once, then every dupe pass plans its
instances (NSP negatives come from other documents of the same unit) and masks them. Memory per
worker is bounded by one unit. :func:`group_batches` reads top to bottom as the pipeline, one
call into each stage:

    read (documents) -> segment (sentences) -> tokenize (tokenization)
      -> per pass: plan + mask (the objective's planner: instances / windows + masking)

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
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from .config import Config
from .errors import ConfigError
from .documents import ReadOptions, can_range, iter_documents, untokenized_reason
from .format.encoders import ENCODERS
from .instances import InstanceParams, PassRandomness
from .masking import MaskingParams
from .metadata import GroupPlan, WorkItem
from .objectives import Objective, objective_of
from .tokenization import TokenizedGroup, tokenize_group

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

    @property
    def read_options(self) -> ReadOptions:
        return read_options(self.config)


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
    segmenter = SentenceSegmenter(config.spacy_model, config.lines_are_sentences)
    params = InstanceParams(
        max_seq_length=config.max_seq_length,
        short_seq_prob=config.short_seq_prob,
        min_short_seq_length=config.min_short_seq_length,
        cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id,
        sentence_order_prediction=config.sentence_order_prediction,
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
    objective = objective_of(config)
    encoder = ENCODERS[objective.encoder](objective.features, tokenizer.vocab)
    return Resources(config, segmenter, tokenizer, params, masking, is_continuation, separator_id,
                     objective=objective, encoder=encoder)


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
    documents = iter_documents(_as_items(items), resources.read_options, stats)
    documents = clock.timed("read", _reporting_bytes(documents, stats, resources.bytes_read))
    for unit, unit_documents in enumerate(cut_units(documents, config.group_bytes)):
        with clock("segment"):
            per_doc_sentences, chunked = resources.segmenter.segment(unit_documents)
            stats["paragraph_chunks"] += chunked
        with clock("tokenize"):
            group = _tokenize(unit_documents, per_doc_sentences, resources, stats)
        if group.n_docs:  # a unit without a usable document has no pass
            plan_pass = objective.planner(group, resources)
            for dupe_pass in range(config.dupe_factor):
                with clock("instances"):
                    randomness = pass_randomness(
                        config.seed, objective.plan_stream, group_index, dupe_pass, config.num_output_files, unit
                    )
                    planned = plan_pass(randomness)
                yield from clock.timed("instances", planned.batches)
                objective.count_pass(planned, stats)
        stats["units"] += 1


_PROGRESS_STEP = 1 << 20  # input bytes between two updates of the shared progress counter


def _reporting_bytes(documents: Iterator[str], stats: Counter, counter) -> Iterator[str]:
    """``documents``, advancing ``counter.value`` by the input bytes read (every MiB and at the
    end), so the coordinator's progress moves inside a long group too."""
    reported = stats["input_bytes"]

    def report() -> None:
        nonlocal reported
        if counter is not None and stats["input_bytes"] != reported:
            # unlocked on purpose: a lost update between two workers only blurs the progress bar,
            # and a lock would need a semaphore that a kill -9 leaks (with a warning)
            counter.value += stats["input_bytes"] - reported
            reported = stats["input_bytes"]

    for document in documents:
        if stats["input_bytes"] - reported >= _PROGRESS_STEP:
            report()
        yield document
    report()


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


def _tokenize(documents: Sequence[str], per_doc_sentences, resources: Resources, stats: Counter) -> TokenizedGroup:
    tokenized = tokenize_group(per_doc_sentences, resources.tokenizer)
    stats["sentences"] += tokenized.sentences
    stats["sentences_without_tokens"] += tokenized.sentences_without_tokens
    stats["tokens"] += tokenized.tokens
    stats["unk_tokens"] += tokenized.unk_tokens
    for index in tokenized.left_out:
        stats[f"skipped.{untokenized_reason(documents[index])}"] += 1
    stats["documents.used"] += tokenized.group.n_docs
    return tokenized.group

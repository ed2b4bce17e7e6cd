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
import json
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
from .config import Config, output_settings
from .errors import OutputError
from .documents import SKIP_EMPTY, SKIP_NO_SENTENCE, read_source
from .instances import InstanceParams, TokenizedGroup, assemble, mask_batch, plan_pairs
from .metadata import DocumentSource, iter_groups, iter_metadata, scan_metadata
from .schema import NSP_FEATURES, schema_description
from .schema import MLM_ONLY_FEATURES, SCHEMAS, UNMASKED_FEATURES, objective_schema
from .writer import (
    MANIFEST_NAME,
    RUN_FILE,
    WORK_DIR_NAME,
    load_resume_state,
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
    separator_id: Optional[int] = None  # --mlm_only with cross-document windows: the document separator's id


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
        sentence_order_prediction=config.sentence_order_prediction,
    )
    is_continuation = None
    if config.mask_whole_word:
        is_continuation = np.zeros(len(tokenizer.vocab), dtype=bool)
        for token, index in tokenizer.vocab.items():
            is_continuation[index] = token.startswith("##")
    separator_id = None
    if config.mlm_only and config.allow_cross_document_examples:
        separator_id = tokenizer.vocab.get(config.document_separator_token)
        if separator_id is None:
            from .errors import ConfigError

            raise ConfigError(
                f"--document_separator_token {config.document_separator_token!r} is not in --vocab_file {config.vocab_file}"
            )
    return Resources(config, segmenter, tokenizer, params, is_continuation, separator_id)


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
        result = read_source(source, separator, config.input_format, config.text_key)
        stats["input_bytes"] += result.input_bytes
        stats["replaced_bytes"] += result.replaced_bytes
        if result.encoding != "utf-8":
            stats[f"decoded_as.{result.encoding}"] += 1
        if result.compression:
            stats[f"decompressed.{result.compression}"] += 1  # files decompressed, by format
        if result.skip_reason:
            stats["documents.read"] += 1
            stats[f"skipped.{result.skip_reason}"] += 1
            continue
        for reason, count in result.skipped.items():  # JSON Lines lines skipped one by one
            stats["documents.read"] += count
            stats[f"skipped.{reason}"] += count
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
        if group.n_docs and config.mlm_only:
            _write_mlm_only_passes(group_index, group, resources, writer, stats, clock)
        elif group.n_docs:
            for dupe_pass in range(config.dupe_factor):
                _write_pair_pass(group_index, dupe_pass, group, resources, writer, stats, clock)
        with clock("write"):
            writer.close()
    except BaseException:
        writer.abort()
        raise
    return GroupResult(group_index, writer.path, writer.segments, stats, seconds)


# Instances of one pass are assembled, masked and serialized in batches of this many rows, so
# the (rows x max_seq_length) temporaries stay bounded however large a group is.
INSTANCE_BATCH_ROWS = 4096


def _pass_randomness(config: Config, plan_stream: str, group_index: int, dupe_pass: int):
    """Everything random in one (group, pass): the planning RNG, the masking/shuffling RNG and
    the shard its first instance goes to, each derived from (seed, purpose, group, pass)."""
    plan_rng = random.Random(derive_seed(config.seed, plan_stream, group_index, dupe_pass))
    mask_rng = np.random.Generator(np.random.PCG64(derive_seed(config.seed, "mask", group_index, dupe_pass)))
    first_shard = derive_seed(config.seed, "shard", group_index, dupe_pass) % config.num_output_files
    return plan_rng, mask_rng, first_shard


def _write_pair_pass(
    group_index: int, dupe_pass: int, group: TokenizedGroup, resources: Resources, writer: FragmentWriter,
    stats: Counter, clock: _StageClock,
) -> None:
    """One NSP/SOP dupe pass: plan every pair, shuffle the plan, then build and write it in batches."""
    config = resources.config
    with clock("instances"):
        pair_rng, mask_rng, shard_offset = _pass_randomness(config, "pairs", group_index, dupe_pass)
        plan = plan_pairs(group, resources.params, pair_rng)
        stats[_UNPAIRED_STAT[config.sentence_order_prediction]] += plan.negatives_unavailable
        n = len(plan)
        order = mask_rng.permutation(n).tolist()  # the pass's instance order, before any is built
    for start in range(0, n, INSTANCE_BATCH_ROWS):
        with clock("instances"):
            rows = order[start : start + INSTANCE_BATCH_ROWS]
            arrays = assemble(group.ids, plan.take(rows), resources.params)
            features = mask_batch(arrays, resources.params, mask_rng, resources.is_continuation)
            shard_of_row = (np.arange(start, start + len(rows)) + shard_offset) % config.num_output_files
        writer.write_batch(features, FEATURE_ORDER, shard_of_row, config.num_output_files)
    stats["instances"] += n


# --- training objectives: MLM-only windows, SOP --------------------------------------------

_UNPAIRED_STAT = {False: "nsp_negatives_unavailable", True: "sop_single_segment_chunks"}
MLM_ONLY_ORDER: Tuple[Tuple[str, str], ...] = tuple((f.name, f.dtype) for f in MLM_ONLY_FEATURES)
UNMASKED_ORDER: Tuple[Tuple[str, str], ...] = tuple((f.name, f.dtype) for f in UNMASKED_FEATURES)


def _write_mlm_only_passes(
    group_index: int, group, resources: Resources, writer: FragmentWriter, stats: Counter, clock: _StageClock
) -> None:
    """Every dupe pass of an MLM-only group: plan windows over the group's token stream, then
    assemble, mask (unless --disable_masking), shuffle and write them in batches of at most
    ``--buffer_size`` tokens. The group was tokenized once; a pass only re-plans and re-masks."""
    from .windows import assemble_windows, build_streams, mask_windows, plan_group_windows

    config = resources.config
    params = resources.params
    masking = not config.disable_masking
    order_spec = MLM_ONLY_ORDER if masking else UNMASKED_ORDER
    rows_per_batch = max(1, config.buffer_size // config.max_seq_length)
    tokens, bounds = build_streams(group, config.allow_cross_document_examples, resources.separator_id or 0)
    separator_id = resources.separator_id if config.allow_cross_document_examples else None
    for dupe_pass in range(config.dupe_factor):
        window_rng, mask_rng, shard_offset = _pass_randomness(config, "windows", group_index, dupe_pass)
        with clock("instances"):
            starts, lengths = plan_group_windows(bounds, params, config.overlap_size, window_rng)
        written = 0
        for lo in range(0, len(starts), rows_per_batch):
            with clock("instances"):
                arrays = assemble_windows(
                    tokens, starts[lo : lo + rows_per_batch], lengths[lo : lo + rows_per_batch], params, separator_id
                )
                if masking:
                    features = mask_windows(arrays, params, mask_rng, resources.is_continuation)
                else:
                    features = {"input_ids": arrays["input_ids"], "input_mask": arrays["input_mask"]}
                n = len(features["input_ids"])
                order = mask_rng.permutation(n)
                features = {name: features[name][order] for name, _ in order_spec}
                shard_of_row = (np.arange(written, written + n) + shard_offset) % config.num_output_files
            writer.write_batch(features, order_spec, shard_of_row, config.num_output_files)
            written += n
        stats["instances"] += written
        if separator_id is not None and len(starts):
            stats["windows_spanning_documents"] += _windows_with_separator(tokens, starts, lengths, separator_id)


def _windows_with_separator(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray, separator_id: int) -> int:
    is_separator = np.concatenate([[0], np.cumsum(tokens == separator_id)])
    return int(np.count_nonzero(is_separator[starts + lengths] - is_separator[starts]))


def objective_manifest(config: Config, stats: Counter) -> Dict:
    """Manifest keys of the training objective: the mode and the schema actually written."""
    name = objective_schema(config.mlm_only, config.sentence_order_prediction, config.disable_masking)
    out: Dict = {
        "objective": {"nsp": "mlm+nsp", "sop": "mlm+sop", "mlm_only": "mlm_only", "unmasked": "mlm_only"}[name],
        "masking": "none (mask in the reader)" if config.disable_masking else "static",
        "record_schema": name,
        "schema": schema_description(config.max_seq_length, config.max_predictions_per_seq, SCHEMAS[name]),
    }
    if config.sentence_order_prediction:
        out["sop_single_segment_chunks"] = stats["sop_single_segment_chunks"]
    if config.mlm_only:
        out["windows_spanning_documents"] = stats["windows_spanning_documents"]
    return out


# --- local runner ---------------------------------------------------------------------------

_WORKER_RESOURCES: Optional[Resources] = None


def _die_with_parent(parent_pid: int) -> None:
    """A worker must not outlive its coordinator (kill -9, OOM killer): it would keep computing
    and hold the coordinator's pipes open. Linux: PR_SET_PDEATHSIG; elsewhere: a watchdog."""
    import signal
    import threading

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, name="bert_data-parent-watchdog", daemon=True).start()


def _init_worker(config: Config, parent_pid: int) -> None:
    global _WORKER_RESOURCES
    import signal

    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
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
        max_workers=config.num_workers, mp_context=context, initializer=_init_worker, initargs=(config, os.getpid())
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
            # Stop promptly (Ctrl-C, a failed group): cancel queued groups and end the workers;
            # their fragments are discarded and remade by --resume.
            for future in pending:
                future.cancel()
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
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
            "decompressed": {
                key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith("decompressed.")
            },
            "paragraph_chunks": stats["paragraph_chunks"],
            "sentences": stats["sentences"],
            "sentences_without_tokens": stats["sentences_without_tokens"],
            "tokens": stats["tokens"],
            "unk_tokens": stats["unk_tokens"],
            "unk_rate": (stats["unk_tokens"] / stats["tokens"]) if stats["tokens"] else 0.0,
            "nsp_negatives_unavailable": stats["nsp_negatives_unavailable"],
            "instances_per_shard": per_shard,
            "vocab_path": os.path.abspath(config.vocab_file),
            "vocab_sha256": vocab_fingerprint(config.vocab_file),
            "vocab_size": vocab_size,
            "schema": schema_description(config.max_seq_length, config.max_predictions_per_seq),
        }
    )
    manifest.update(objective_manifest(config, stats))  # objective, record_schema, the schema written
    if read != used + sum(skipped.values()):
        raise RuntimeError(f"document accounting broke: read {read} != used {used} + skipped {skipped}")
    return manifest


ProgressCallback = Callable[[GroupResult], None]


def _crash_point(stage: str, group_index: int) -> None:
    """Test hook: ``BERT_DATA_CRASH_AT=stage:group`` kills this process with SIGKILL right there,
    so tests can check that every kill point leaves a resumable, never complete-looking, state."""
    target = os.environ.get("BERT_DATA_CRASH_AT")
    if target and target == f"{stage}:{group_index}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _prepare(config: Config):
    """Work dir, assembler, first group to make and counters so far (fresh run or --resume)."""
    settings = output_settings(config)
    if config.resume:
        state = load_resume_state(config.output_dir, settings)
        if state is None:
            return None
        work_dir = os.path.join(config.output_dir, WORK_DIR_NAME)
        assembler = ShardAssembler(
            config.output_dir, work_dir, config.name, config.num_output_files, resume_from=state
        )
        log.info("resuming %s at group %d", config.output_dir, state["next_group"])
        return work_dir, assembler, state["next_group"], Counter(state["stats"])
    work_dir = prepare_output_dir(config.output_dir, config.name, config.num_output_files, config.overwrite)
    write_json_atomically(os.path.join(work_dir, RUN_FILE), settings)
    assembler = ShardAssembler(config.output_dir, work_dir, config.name, config.num_output_files)
    return work_dir, assembler, 0, Counter()


def split_configs(config: Config) -> Dict[str, Config]:
    """One config per output: the run itself, or its train and validation halves.

    With ``--validation_fraction F`` a document goes to validation when the seeded hash of its
    metadata entry (as written, the same hash ``split_metadata --seed`` uses) is below F, so the
    split is decided before any instance exists: no NSP negative or duplicate crosses it, and a
    document keeps its side when others are added. With ``--validation_metadata_files`` those
    documents are the validation set and are excluded from train.
    """
    if not (config.validation_fraction or config.validation_metadata_files) or config.split_role:
        return {"": config}
    train = config.replace(output_dir=os.path.join(config.output_dir, "train"), split_role="train")
    validation = config.replace(output_dir=os.path.join(config.output_dir, "validation"), split_role="validation")
    if config.validation_metadata_files:
        validation = validation.replace(metadata_files=config.validation_metadata_files)
    return {"train": train, "validation": validation}


def _split_selector(config: Config):
    """(predicate choosing this half's documents, message when none is chosen), or (None, "")."""
    if not config.split_role:
        return None, ""
    role = config.split_role
    if config.validation_fraction:
        from .split_metadata import split_hash

        fraction, seed = config.validation_fraction, config.seed
        want_validation = role == "validation"
        hint = (
            f"--validation_fraction {fraction} leaves no document on the {role} side; "
            f"{'raise' if want_validation else 'lower'} it"
        )
        return (lambda source: (split_hash(source.entry, seed) < fraction) == want_validation), hint
    if role == "train":
        # The validation list is usually small: hold its paths to keep them out of train.
        held_out = {
            os.path.normpath(s.path) for s in iter_metadata(config.validation_metadata_files, config.input_files_prefix)
        }
        hint = "every document listed in --metadata_files is also in --validation_metadata_files: train is empty"
        return (lambda source: os.path.normpath(source.path) not in held_out), hint
    return None, ""


def run_job(
    config: Config, on_group: Optional[ProgressCallback] = None, on_start: Optional[Callable[..., None]] = None
) -> Dict[str, Dict]:
    """Run every output of the job (one, or train + validation); manifests by split name."""
    return {name: run(part, on_group=on_group, on_start=on_start) for name, part in split_configs(config).items()}


def run(config: Config, on_group: Optional[ProgressCallback] = None, on_start: Optional[Callable[..., None]] = None) -> Dict:
    """Run the whole job locally; returns the manifest that was written.

    Crash safety: groups are merged into partial shards in order and journaled after each
    one; shards get their final names only at the end and ``data_params.json`` is written
    last. A killed run is continued with ``--resume`` to byte-identical output.
    """
    from .tokenization import case_mismatch_warning, load_vocab

    vocab = load_vocab(config.vocab_file)
    warning = case_mismatch_warning(vocab, config.do_lower_case)
    if warning:
        log.warning(warning)
    select, empty_hint = _split_selector(config)
    summary = scan_metadata(config.metadata_files, config.input_files_prefix, select, empty_hint)
    if on_start is not None:  # gets the MetadataSummary (entries, total_bytes) before any group runs
        on_start(summary)
    if summary.duplicate_entries:
        log.warning("%d duplicate document path(s) in the metadata; each is processed again", summary.duplicate_entries)
    try:
        prepared = _prepare(config)
        if prepared is None:
            log.info("%s is already complete: nothing to resume", config.output_dir)
            with open(os.path.join(config.output_dir, MANIFEST_NAME), encoding="utf-8") as handle:
                return json.load(handle)
        work_dir, assembler, first_group, stats = prepared
        try:
            sources = iter_metadata(config.metadata_files, config.input_files_prefix)
            if select is not None:
                sources = (source for source in sources if select(source))
            groups = iter_groups(sources, config.split_num)
            todo = ((g, sources) for g, sources in groups if g >= first_group)
            # Each attempt writes fragments into a directory of its own: anything an earlier,
            # killed attempt left behind (or a worker of it still writing) is never read.
            attempt_dir = os.path.join(work_dir, "attempts", f"{os.getpid()}-{time.time_ns()}")
            os.makedirs(os.path.join(attempt_dir, "fragments"))
            for result in run_groups(config, todo, attempt_dir):
                assembler.append(result.fragment_path, result.segments)
                _crash_point("appended", result.group_index)
                stats.update(result.stats)
                assembler.checkpoint(result.group_index + 1, stats)
                _crash_point("checkpointed", result.group_index)
                if on_group is not None:
                    on_group(result)
            per_shard = assembler.publish()
        finally:
            assembler.close()
        _crash_point("published", 0)
        manifest = build_manifest(config, stats, per_shard, summary, len(vocab))
        shutil.rmtree(work_dir, ignore_errors=True)
        write_json_atomically(os.path.join(config.output_dir, MANIFEST_NAME), manifest)  # the commit point
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise OutputError(
            f"writing to --output_dir {config.output_dir} failed: {exc.strerror or exc}{where}; "
            f"free space and continue with --resume"
        ) from None
    return manifest

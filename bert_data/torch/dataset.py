""":class:`PretrainingDataset`: the records ``create_tfrecords`` writes as a PyTorch
``IterableDataset`` of Hugging-Face-ready tensors, without TensorFlow.

One epoch is exactly one pass over the records, whatever the number of DataLoader workers and
distributed ranks: every reader (a worker of a rank) reads its own contiguous span of the epoch's
records (:mod:`bert_data.torch.plan`), so no record is read twice and none is left out. Each
reader streams its span through a bounded shuffle buffer (:mod:`bert_data.torch.shuffle`) and,
for unmasked records, masks each record from its own key (:mod:`bert_data.torch.dynamic`); the
file order, the buffer's draws and the masks are seeded by ``(seed, epoch)``, so ``set_epoch``
gives every epoch a new order and new masks, and the same epoch is the same on every run.

Mid-epoch resumption: :meth:`PretrainingDataset.state_dict` records how many batches this
rank's loop had consumed; :meth:`PretrainingDataset.load_state_dict` makes the next pass of that
epoch skip exactly the records those batches held (each worker's share follows from the
DataLoader's turn-taking, :func:`~bert_data.torch.plan.consumed_by_worker`), so the resumed
epoch yields the rest of the uninterrupted one, record for record. The epoch and the resume point
live in a small shared-memory tensor, so they reach DataLoader workers that persist across epochs.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import ConfigError
from ..format.manifest import require_records_vocabulary
from ..reader.dynamic_masking import DynamicMaskingOptions
from .dynamic import RecordMasker, epoch_base, masker_for, record_keys
from .plan import consumed_by_worker, derive_seed, file_order, next_in_turn, reader_span, segments, worker_records
from .records import Chunk, SegmentReader, chunk_len, concat_chunks, take_rows
from .shuffle import ShuffleBuffer
from .sources import FilePattern, RecordFiles, layout_features, resolve
from .tensors import RecordView, hf_arrays, to_tensors, trim

__all__ = ["PretrainingDataset"]

_EPOCH, _RESUME_EPOCH, _RESUME_BATCHES, _RESUME_BATCH_SIZE, _RESUME_WORKERS = range(5)
_STATE_KEYS = ("seed", "shuffle", "world_size", "drop_last", "num_records")


def _check_int(name: str, value: Any, least: int = 1, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name} must be an integer >= {least}{' or None' if allow_none else ''}, got {value!r}")


def _distributed_world() -> Tuple[int, int]:
    """(rank, world size) of an initialized ``torch.distributed`` process group, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _ranks(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    if rank is None and world_size is None:
        found_rank, found_world = _distributed_world()
        if found_world > 1:
            raise ConfigError(
                f"torch.distributed runs {found_world} processes: say how they share the records. In a DDP loop of "
                f"your own, each rank reads its part: rank=torch.distributed.get_rank(), world_size="
                f"torch.distributed.get_world_size(). Under the Hugging Face Trainer (accelerate), which splits or "
                f"dispatches batches itself: rank=0, world_size=1"
            )
        return 0, 1
    if rank is None or world_size is None:
        raise ConfigError("rank and world_size must be given together")
    _check_int("world_size", world_size)
    _check_int("rank", rank, least=0)
    if rank >= world_size:
        raise ConfigError(f"rank {rank} must be below world_size {world_size}")
    return rank, world_size


class PretrainingDataset(IterableDataset):
    """BERT pretraining records as an ``IterableDataset`` of Hugging Face model inputs.

    ``files``: an output directory of ``create_tfrecords``/``create_pretraining_data`` (exactly
    the files its manifest lists), a glob, a comma-separated list of globs or a list of them;
    local files or URLs (``file://``, ``s3://``, ``gs://``, ``memory://``, ...: fsspec), plain or
    GZIP. Every layout bert_data writes: NSP and SOP records give
    ``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels`` and
    ``next_sentence_label``; MLM-only records the same without ``next_sentence_label``
    (``token_type_ids`` zeros); unmasked records (``--disable_masking --unmasked_format ids``)
    are masked here, by the writer's rules, with ``masking=DynamicMaskingOptions(vocab_file=...)``;
    packed rows (``--packing``) give ``position_ids``, ``sequence_ids`` (each token's instance)
    and, for NSP/SOP, ``next_sentence_positions`` and ``next_sentence_labels`` per instance slot
    besides (:mod:`bert_data.torch.tensors`; the 4-D mask: :func:`~bert_data.torch.packed_attention_mask`).

    ``layout``, ``max_seq_length`` and ``max_predictions_per_seq`` default to what the files'
    ``data_params.json`` says (else their first record); given, they must agree with it.
    ``batch_size``: yield batches of that many records (the fast path: ``DataLoader(dataset,
    batch_size=None)``), trimmed to their longest real row unless ``trim=False``; None yields
    single records (``DataLoader(dataset, batch_size=B, collate_fn=bert_data.torch.collate)``).
    ``shuffle``: a seeded file order per epoch and a record buffer of ``shuffle_buffer`` records
    per reader (memory: that many records). ``rank``/``world_size``: this process's part under
    ``torch.distributed`` (required when a process group of more than one is initialized).
    ``drop_last``: every rank reads the same number of records, ``floor(N / world_size)``, the
    tail of the epoch's order left out (for DDP loops, whose ranks must step together).

    Raises :class:`~bert_data.errors.ConfigError` for bad arguments and
    :class:`~bert_data.errors.RecordFormatError` for files that do not match their manifest, the
    arguments or the layout, naming the file and the fix.
    """

    def __init__(self, files: FilePattern, *, batch_size: Optional[int] = None, shuffle: bool = False, seed: int = 0,
                 shuffle_buffer: int = 10_000, layout: Optional[str] = None, max_seq_length: Optional[int] = None,
                 max_predictions_per_seq: Optional[int] = None, masking: Optional[DynamicMaskingOptions] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None, drop_last: bool = False,
                 trim: bool = True) -> None:
        super().__init__()
        _check_int("batch_size", batch_size, allow_none=True)
        _check_int("shuffle_buffer", shuffle_buffer)
        _check_int("max_seq_length", max_seq_length, allow_none=True)
        _check_int("max_predictions_per_seq", max_predictions_per_seq, allow_none=True)
        _check_int("seed", seed, least=-(1 << 63))
        for name, value in (("shuffle", shuffle), ("drop_last", drop_last), ("trim", trim)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        self.rank, self.world_size = _ranks(rank, world_size)
        self._rank_given = rank is not None
        self.source: RecordFiles = resolve(files, layout, max_seq_length, max_predictions_per_seq)
        self.batch_size, self.shuffle, self.seed, self.shuffle_buffer = batch_size, shuffle, seed, shuffle_buffer
        self.drop_last, self.trim = drop_last, trim
        self.masker = self._masker(masking)
        source = self.source
        self._reader = SegmentReader(source.files, source.counts, source.listed_in,
                                     layout_features(source.layout, source.max_seq_length,
                                                     source.max_predictions_per_seq, source.sequences_per_pack),
                                     source.layout, source.max_predictions_per_seq, source.sequences_per_pack)
        self._control = torch.zeros(5, dtype=torch.int64).share_memory_()
        self._control[_RESUME_EPOCH] = -1

    def _masker(self, masking: Optional[DynamicMaskingOptions]) -> Optional[RecordMasker]:
        layout = self.source.layout
        if layout != "unmasked":
            if masking is not None:
                raise ConfigError(f"masking= is for unmasked records (create_tfrecords --mlm_only --disable_masking "
                                  f"--unmasked_format ids); these are {layout} records, masked when written")
            return None
        if masking is None:
            raise ConfigError(
                f"{self.source.files[0]} and the rest are unmasked records: give masking=DynamicMaskingOptions("
                "vocab_file=..., masked_lm_prob=0.15) to mask them as the writer would "
                "(bert_data.torch.DynamicMaskingOptions)"
            )
        masker = masker_for(masking, self.source.max_seq_length, self.source.max_predictions_per_seq,
                            self.source.separator_tokens)
        if masking.vocab_file is not None:  # (after: a vocabulary the writer refuses is refused in its words first)
            require_records_vocabulary(masking.vocab_file, self.source.manifests)
        return masker

    # --- sizes ----------------------------------------------------------------------------

    @property
    def layout(self) -> str:
        return self.source.layout

    @property
    def num_records(self) -> int:
        """Records in the files: one epoch over all ranks (``drop_last`` may leave a few unread)."""
        return self.source.total

    @property
    def rank_records(self) -> int:
        """Records this rank reads in an epoch."""
        return sum(worker_records(self.num_records, self.world_size, self.rank, 1, self.drop_last))

    def num_batches(self, num_workers: int = 0) -> int:
        """Batches this rank yields in an epoch with ``num_workers`` DataLoader workers (each
        worker's last batch may be smaller). Needs ``batch_size``."""
        if self.batch_size is None:
            raise ConfigError("num_batches() needs the dataset's batch_size")
        return sum(math.ceil(n / self.batch_size) for n in self._worker_records(max(1, num_workers)))

    def __len__(self) -> int:
        """Records this rank yields in an epoch (without ``batch_size``); with ``batch_size`` the
        number of batches depends on the DataLoader's workers: :meth:`num_batches`."""
        if self.batch_size is not None:
            raise TypeError("len() of a PretrainingDataset with batch_size depends on num_workers: use "
                            "dataset.num_batches(num_workers)")
        return self.rank_records

    def _worker_records(self, workers: int) -> List[int]:
        return worker_records(self.num_records, self.world_size, self.rank, workers, self.drop_last)

    # --- epochs and resumption --------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return int(self._control[_EPOCH])

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s file order, shuffle and masks from the next pass on (like
        ``DistributedSampler.set_epoch``; call it before iterating the DataLoader). A resume
        point loaded for another epoch is dropped."""
        _check_int("epoch", epoch, least=0)
        self._check_world()
        self._control[_EPOCH] = epoch
        if int(self._control[_RESUME_EPOCH]) != epoch:
            self._control[_RESUME_EPOCH] = -1

    def state_dict(self, batches: int, num_workers: int = 0, batch_size: Optional[int] = None) -> Dict[str, Any]:
        """Where this rank is: ``batches`` consumed from the DataLoader in the current epoch,
        read with ``num_workers`` workers and ``batch_size`` records a batch (default: the
        dataset's own; give the DataLoader's when the dataset yields single records). Save it
        with the model; :meth:`load_state_dict` resumes there. JSON-able."""
        _check_int("batches", batches, least=0)
        _check_int("num_workers", num_workers, least=0)
        size = batch_size if batch_size is not None else self.batch_size
        if size is None:
            raise ConfigError("state_dict() needs batch_size= (the DataLoader's): the dataset yields single records")
        _check_int("batch_size", size)
        # a point past this rank's epoch is an error here, where it is made, not when it is loaded
        consumed_by_worker([math.ceil(n / size) for n in self._worker_records(max(1, num_workers))], batches)
        state = {"epoch": self.epoch, "batches": batches, "batch_size": size, "num_workers": num_workers}
        state.update({key: self._state_value(key) for key in _STATE_KEYS})
        state["files"] = self.source.fingerprint()
        return state

    def _state_value(self, key: str) -> Any:
        return self.num_records if key == "num_records" else getattr(self, key)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume where :meth:`state_dict` was taken: the epoch is set to the state's and the next
        pass of that epoch skips the records the consumed batches held. The dataset (files,
        seed, shuffle, world size, drop_last) must be the one the state was taken from, and the
        DataLoader must have the same ``num_workers`` (checked when reading starts)."""
        missing = [key for key in ("epoch", "batches", "batch_size", "num_workers", *_STATE_KEYS) if key not in state]
        if missing:
            raise ConfigError(f"not a PretrainingDataset state: {', '.join(missing)} missing")
        for key in _STATE_KEYS:
            if state[key] != self._state_value(key):
                raise ConfigError(f"the state was saved with {key}={state[key]!r}, this dataset has "
                                  f"{key}={self._state_value(key)!r}: resume with the dataset the state was taken from")
        if "files" in state and state["files"] != self.source.fingerprint():  # (states of older versions have none)
            raise ConfigError("the state was saved reading other files (their names, records or bytes differ: "
                              f"{state['files']} there, {self.source.fingerprint()} here): resume with the dataset "
                              "the state was taken from")
        per_worker = [math.ceil(n / state["batch_size"]) for n in self._worker_records(max(1, state["num_workers"]))]
        consumed_by_worker(per_worker, state["batches"])  # a point past this rank's epoch is an error now
        self._control[_EPOCH] = state["epoch"]
        self._control[_RESUME_EPOCH] = state["epoch"]
        self._control[_RESUME_BATCHES] = state["batches"]
        self._control[_RESUME_BATCH_SIZE] = state["batch_size"]
        self._control[_RESUME_WORKERS] = max(1, state["num_workers"])

    def _resume(self, epoch: int, workers: int) -> Tuple[List[int], int]:
        """Records each worker already delivered in the resumed epoch (zeros when not resuming),
        and whose turn it was: the rotation of the workers' roles that makes the resumed
        DataLoader (its turns start at worker 0) hand out the rest in the uninterrupted order."""
        control = self._control.tolist()
        if control[_RESUME_EPOCH] != epoch:
            return [0] * workers, 0
        if control[_RESUME_WORKERS] != workers:
            raise ConfigError(
                f"the resume state was taken with {control[_RESUME_WORKERS]} DataLoader worker(s) (num_workers="
                f"{control[_RESUME_WORKERS] if control[_RESUME_WORKERS] > 1 else '0 or 1'}), this DataLoader has "
                f"{workers}: resume with the same num_workers"
            )
        size = control[_RESUME_BATCH_SIZE]
        records = self._worker_records(workers)
        batches = [math.ceil(n / size) for n in records]
        consumed = consumed_by_worker(batches, control[_RESUME_BATCHES])
        return [min(c * size, n) for c, n in zip(consumed, records)], next_in_turn(batches, consumed)

    def _check_world(self) -> None:
        """A dataset made before ``torch.distributed`` was initialized must not read as rank 0
        of 1 in every process (each record once per process): an error, once it can be seen."""
        if not self._rank_given and get_worker_info() is None and _distributed_world()[1] > 1:
            _ranks(None, None)

    # --- reading ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Mapping[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self._check_world()
        epoch = self.epoch
        skips, turn = self._resume(epoch, workers)
        role = (worker + turn) % workers  # the reader this worker is in the epoch's plan
        chunks = _skip_records(self._chunks(epoch, role, workers), skips[role])
        base = epoch_base(self.seed, epoch)
        if self.batch_size is None:
            for chunk in chunks:
                columns = to_tensors(self._hf(chunk, base))
                for row in range(chunk_len(chunk)):
                    yield RecordView(columns, row)
        else:
            for batch in _rebatch(chunks, self.batch_size):
                arrays = self._hf(batch, base)
                yield to_tensors(trim(arrays) if self.trim else arrays)

    def _hf(self, chunk: Chunk, base: int) -> Dict[str, np.ndarray]:
        if self.masker is not None:
            chunk = self.masker(chunk, record_keys(base, chunk["file"], chunk["record"]))
        return hf_arrays(chunk, self.source.files, self.source.layout)

    def _chunks(self, epoch: int, worker: int, workers: int) -> Iterator[Chunk]:
        """This reader's records of the epoch, decoded, in its (shuffled) order."""
        order = file_order(len(self.source.files), self.seed, epoch, self.shuffle)
        start, stop = reader_span(self.num_records, self.world_size, self.rank, workers, worker, self.drop_last)
        runs = segments(self.source.counts, order, start, stop)
        if not self.shuffle:
            for run in runs:
                yield from self._reader.read(run)
            return
        seed = derive_seed(self.seed, "buffer", epoch, self.rank, self.world_size, worker, workers)
        rng = np.random.default_rng(seed)
        buffer = ShuffleBuffer(self.shuffle_buffer, rng)
        for run in runs:
            for chunk in self._reader.read(run):
                out = buffer.push(chunk)
                if out is not None:
                    yield out
        rest = buffer.finish()
        if rest is not None:
            yield rest


def _skip_records(chunks: Iterator[Chunk], skip: int) -> Iterator[Chunk]:
    """``chunks`` without their first ``skip`` rows."""
    for chunk in chunks:
        n = chunk_len(chunk)
        if skip >= n:
            skip -= n
            continue
        yield take_rows(chunk, start=skip) if skip else chunk
        skip = 0


def _rebatch(chunks: Iterator[Chunk], size: int) -> Iterator[Chunk]:
    """The rows of ``chunks`` in batches of ``size`` (the last may be smaller)."""
    pending: List[Chunk] = []
    held = 0
    for chunk in chunks:
        pending.append(chunk)
        held += chunk_len(chunk)
        if held < size:
            continue
        whole = concat_chunks(pending)
        full = held // size
        for i in range(full):
            yield take_rows(whole, start=i * size, stop=(i + 1) * size)
        held -= full * size
        pending = [take_rows(whole, start=full * size)] if held else []
    if held:
        yield concat_chunks(pending)

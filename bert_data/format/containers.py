"""Containers: how a shard's record payloads become file bytes, and what that allows.

An encoder (:mod:`bert_data.format.encoders`) turns a batch of features into one payload per
record; a container frames payloads into the bytes of a file. The container also says what the
output side may do with those bytes:

* ``suffix``: the shards' file-name suffix (:func:`bert_data.output.naming.shard_file_names`);
* ``concatenates``: whether two framed runs written one after the other are one valid file of the
  records of both. TFRecord framing (and gzip members) concatenate, so every shard assembler
  builds a shard by appending groups' byte runs in group order, without parsing a record. A
  container that does not (Parquet, with its footer; MDS, with its header of offsets; HDF5) says
  ``False``, and the output side then refuses to byte-concatenate it
  (:func:`require_concatenation`) and rewrites its shards instead (below).

A new container is one class here and one entry in :data:`CONTAINERS`.

The rewriting protocol (containers with ``concatenates = False``)
-----------------------------------------------------------------

A group's fragment holds, per (pass, shard), a run of the format's bytes, and the output assembles
every shard's runs in group order exactly as for TFRecords (the local partial shards and their
journal, resume, the URL output's index objects: unchanged). Only at ``publish`` does the output
hand each assembled shard to :func:`bert_data.output.rewrite.rewrite_shard`, which makes the
container's file(s) from it. A frame holds the format's own encoding, made by the workers (the
container's ``frame_runs``), so nothing is decoded at publish:

* MDS's samples in TFRecord frames (:mod:`bert_data.format.mds`) and HDF5's runs of NVIDIA's
  samples in TFRecord frames (:mod:`bert_data.format.nvidia_hdf5`), which the shard writer's
  ``write_partial(path, stopped)`` hands to streaming's writer or to h5py;
* Parquet's pieces of data pages, unframed (:mod:`bert_data.format.parquet`), a shard of which
  the container's ``finish_in_place(path, spec)`` makes the file where it is (a local run's
  partial shard; a URL run's copy of it): such a container needs no shard writer.

Every way, a shard's file is a pure function of its assembled shard: byte-identical for any
worker count, runner or resume, holding the same records in the same order as the TFRecords of
the same seed. A rewriting container has:

* ``name``, ``suffix``, ``concatenates = False`` and ``frame(payloads)`` (TFRecord frames);
* ``supports(layout) -> str``: "" when it can hold records of that layout, else why not (one
  phrase, for the ``--output_format`` error line of :func:`bert_data.config.validate`);
* ``frame_runs(encoder, features, shard_of_row)``: a batch's padded rows (name -> ``(n, k)``
  array) as one run per shard present, ``(shard, bytes, rows)``, made in the workers;
* ``open_shard(directory, shard_name, spec: ShardSpec) -> ShardWriter``: a writer of one shard
  into the local ``directory``, whose ``write_partial(path, stopped)`` takes the assembled shard
  (the runs, in order) and whose ``close()`` finishes the file(s) and returns
  ``[(file name, records)]`` in order (one file, or several when the format cuts a shard into
  pieces, as MDS does); ``abort()`` removes what it wrote; an optional ``reserve(size)``, called
  first with the container's ``rewritten_size_bound``, takes the file's room on the disk (HDF5:
  h5py meeting a full disk mid-file can crash the process). Memory is bounded by the writer's own
  buffer (an HDF5 chunk, an MDS file), never a whole shard (or, for Parquet, ``finish_in_place``);
* ``sidecar``: the name of one file written beside the shards once all are written (MDS's
  ``index.json``), or None; ``sidecar_bytes(entries)`` makes it from what every shard writer's
  ``close()`` reported, in shard order (a writer may keep per-file details for it in
  ``writer.sidecar_entries``).

A writer's bytes must be a function of the rows only: no timestamps, no host names, fixed
row-group or file boundaries (counted in rows or bytes of the rows, or at the batches of a group,
which are the same for any worker count; never by time), compression and its level pinned. Containers in :data:`CONTAINERS`: ``tfrecord``, ``parquet``
(:mod:`bert_data.format.parquet`), ``mds`` (:mod:`bert_data.format.mds`), ``hdf5``
(:mod:`bert_data.format.nvidia_hdf5`); their packages are imported only when a shard is written
or read.
"""

from __future__ import annotations

import gzip
import os
import re
from importlib import import_module
from typing import Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Type

import numpy as np

from ..output.naming import HDF5_SUFFIX, MDS_INDEX_NAME, MDS_SUFFIX, PARQUET_SUFFIX, TFRECORD_SUFFIX
from .columns import COLUMNAR_LAYOUTS, ShardSpec, layout_of_features
from .tfrecord import frame_records


class TFRecordContainer:
    """TFRecord framing (length, masked CRC32C of the length, payload, masked CRC32C of the
    payload), optionally each written run a gzip member (``--compression gzip``); the layout
    google-research/bert, TF Model Garden and the Model Zoo read."""

    name = "tfrecord"
    suffix = TFRECORD_SUFFIX
    concatenates = True
    runs_encoding: Optional[str] = None  # what a rewriting format's runs hold (a resume fingerprint); records here

    def __init__(self, compression: str = "none") -> None:
        self.compression = compression

    @staticmethod
    def shard_of(file_name: str) -> str:
        """The shard a published file belongs to: a shard is one file (MDS: one or more pieces)."""
        return file_name

    @staticmethod
    def published_body_size(path: str) -> int:
        """How many bytes of a published shard are the assembled shard it was renamed from: all of
        them (a TFRecord shard is published as assembled)."""
        return os.path.getsize(path)

    @staticmethod
    def check_assembled(path: str, size: int) -> None:
        """The first ``size`` bytes of the assembled shard at ``path`` (a partial shard a resume
        keeps) are whole records whose CRCs hold: the runs of every format but Parquet are
        TFRecord frames; else :class:`~bert_data.errors.RecordFormatError` saying where not."""
        from .batch_decode import check_head

        check_head(path, size)

    def frame(self, payloads: Sequence[bytes]) -> bytes:
        """One run of records: framed, and a gzip member with ``--compression gzip`` (mtime 0, so
        the bytes depend only on the records)."""
        return self._member(frame_records(payloads))

    def _member(self, data):
        return gzip.compress(data, compresslevel=6, mtime=0) if self.compression == "gzip" else data

    def frame_runs(self, encoder, features: Mapping[str, np.ndarray],
                   shard_of_row: np.ndarray) -> List[Tuple[int, object, int]]:
        """A batch's records (rows in output order, row i for shard ``shard_of_row[i]``) as one run
        per shard present, in shard order: ``(shard, bytes-like, records)``, each run what
        :meth:`frame` makes of the shard's payloads. An encoder that frames its own records
        (``encode_shard_runs``: one C pass over the batch, no object per record) is asked to."""
        shard_of_row = np.asarray(shard_of_row, dtype=np.int64)
        counts = np.bincount(shard_of_row) if len(shard_of_row) else np.zeros(0, dtype=np.int64)
        shards = np.flatnonzero(counts).tolist()
        encode_shard_runs = getattr(encoder, "encode_shard_runs", None)
        shard_runs = encode_shard_runs(features, shard_of_row, len(counts)) if encode_shard_runs and shards else None
        if shard_runs is not None:
            return [(shard, self._member(shard_runs[shard]), int(counts[shard])) for shard in shards]
        payloads = encoder.encode(features)
        return [(shard, self.frame([payloads[row] for row in np.flatnonzero(shard_of_row == shard).tolist()]),
                 int(counts[shard])) for shard in shards]


class ShardWriter(Protocol):
    def write_partial(self, source: str, stopped: Callable[[], bool]) -> None: ...
    def close(self) -> List[Tuple[str, int]]: ...
    def abort(self) -> None: ...


class RewritingContainer(TFRecordContainer):
    """A container whose shards are made at publish from the runs its workers encoded (see the
    module docstring)."""

    concatenates = False
    sidecar: Optional[str] = None
    package = ""  # the pip package it needs (named in the error when it is missing)
    module = ""  # the module that writes and reads it (bert_data.format.<module>)
    packed_rows = False  # whether it takes packed rows (--packing) rather than refusing them
    rewrite_holds_gil = True  # its shard writer holds the GIL (h5py writes): at most REWRITE_THREADS threads
    rewrite_in_processes = True  # a big publish rewrites its shards in processes (bert_data.output.rewrite)
    process_min_bytes: Optional[int] = None  # from how many assembled bytes (None: rewrite.PROCESS_MIN_BYTES)

    def __init__(self, compression: str = "none") -> None:
        super().__init__("none")

    def supports(self, layout: str) -> str:
        return "" if layout in COLUMNAR_LAYOUTS else f"{layout} records are not written as {self.name} rows"

    def settings_problem(self, config) -> str:
        """"" when the run's other settings fit the format, else why not (config.validate's line)."""
        return ""

    def vocabulary_problem(self, vocab: Mapping[str, int]) -> str:
        """"" when every id of ``vocab`` fits the format, else why not (checked at start-up, before
        any work: a token id is only seen when a shard is rewritten, at the end)."""
        return ""

    def open_shard(self, directory: str, shard_name: str, spec: ShardSpec) -> ShardWriter:
        return import_module(f"bert_data.format.{self.module}").ShardFileWriter(directory, shard_name, spec)

    def sidecar_bytes(self, entries: Sequence[object]) -> Optional[bytes]:
        return None

    @staticmethod
    def rewritten_size_bound(path: str) -> int:
        """At most how many bytes the file(s) made from the assembled shard at ``path`` take (room
        is checked for them first): its size, for a format whose files are no larger (MDS's
        pieces hold its samples with 4 bytes of offset each where the frames took 16)."""
        return os.path.getsize(path)

    def read_feature_batches(self, path: str, spec: ShardSpec):
        """A shard file's records as the padded arrays of the TFRecord decoding of the same
        records, batch by batch (how inspect and the tests read every format)."""
        return import_module(f"bert_data.format.{self.module}").read_feature_batches(path, spec)


class ParquetContainer(RewritingContainer):
    """Apache Parquet, one file per shard: unpadded list columns (:mod:`bert_data.format.columns`)
    in uncompressed data pages the workers encode, a row group per batch's rows of the shard
    (:mod:`bert_data.format.parquet`)."""

    name = "parquet"
    runs_encoding = "parquet-pieces/1"  # what a run holds (a fingerprint: bump it when the workers write otherwise)
    suffix = PARQUET_SUFFIX
    package = "pyarrow"
    module = "parquet"
    rewrite_in_processes = False  # (a URL run's shard is copied and its footer appended: no Python per record)

    def frame_runs(self, encoder, features: Mapping[str, np.ndarray],
                   shard_of_row: np.ndarray) -> List[Tuple[int, object, int]]:
        """A batch's rows as one piece per shard present: the workers encode the pages, and a
        partial shard of pieces becomes the Parquet file by a footer (:mod:`bert_data.format.parquet`)."""
        from .parquet import encode_pieces

        return encode_pieces(features, shard_of_row, layout_of_features(features))

    @staticmethod
    def finish_in_place(path: str, spec: ShardSpec) -> int:
        """The assembled shard at ``path`` made the shard's file where it is (its footer appended);
        its records. A local run publishes so, renaming it as it renames TFRecord shards."""
        from .parquet import finish_in_place

        return finish_in_place(path, spec)

    @staticmethod
    def check_assembled(path: str, size: int) -> None:
        """Nothing: a partial shard of pieces has no checksums to hold (its data pages carry no
        CRC; the piece headers are read, and a damaged one refused, when its footer is made)."""

    @staticmethod
    def published_body_size(path: str) -> int:
        """How many bytes of a published shard are the assembled shard it was made from (all but
        the footer; -1 for anything else): how a resumed run recognises a shard it published."""
        from .parquet import body_size

        return body_size(path)


class MDSContainer(RewritingContainer):
    """MosaicML streaming's MDS, written by its own ``MDSWriter``: each shard is one or more MDS
    files, and one ``index.json`` beside them lists every file of every shard
    (:mod:`bert_data.format.mds`)."""

    name = "mds"
    runs_encoding = "mds-samples/1"  # what a run holds (a fingerprint: bump it when the workers write otherwise)
    suffix = MDS_SUFFIX
    sidecar = MDS_INDEX_NAME
    package = "mosaicml-streaming"
    module = "mds"
    rewrite_holds_gil = False  # (reads, CRCs, copies, xxh64 and writes of a window at a time release it:
    # two threads rewrote 92 MB 1.3-1.6x faster than one, so as many threads as the run had workers)
    process_min_bytes = 1 << 30  # (~0.8 s/GB of one core, ~2/3 of it off the GIL: with 8-15 threads the
    # rewrite of 1 GB is estimated at ~0.3 s, what starting the processes costs; estimated, not measured there)

    @staticmethod
    def shard_of(file_name: str) -> str:
        """``{name}-{i}.{j:05d}.mds`` (piece j, :func:`bert_data.format.mds.piece_name`) is shard
        ``{name}-{i}.mds``; a shard without samples has no piece at all."""
        return re.sub(r"\.\d{5}" + re.escape(MDS_SUFFIX) + "$", MDS_SUFFIX, file_name)

    def sidecar_bytes(self, entries: Sequence[object]) -> Optional[bytes]:
        from .mds import index_bytes

        return index_bytes(entries)

    def frame_runs(self, encoder, features: Mapping[str, np.ndarray],
                   shard_of_row: np.ndarray) -> List[Tuple[int, object, int]]:
        """A batch's rows as MDS samples the workers encode, TFRecord-framed: the publish hands them
        to the ``MDSWriter`` as they are (:func:`bert_data.format.mds.frame_samples`)."""
        from .mds import frame_samples

        return frame_samples(features, shard_of_row, layout_of_features(features))


class HDF5Container(RewritingContainer):
    """NVIDIA's MLPerf packed HDF5 layout, one file per shard, for its BERT PyTorch trainer
    (``--packed_samples``): packed NSP/SOP rows (``--packing``, at most 3 instances a row) as
    unpadded vlen samples (:mod:`bert_data.format.nvidia_hdf5`)."""

    name = "hdf5"
    runs_encoding = "nvidia-samples/1"  # what a run holds (a fingerprint: bump it when the workers write otherwise)
    suffix = HDF5_SUFFIX
    package = "h5py"
    module = "nvidia_hdf5"
    packed_rows = True

    def supports(self, layout: str) -> str:
        from .nvidia_hdf5 import unsupported

        return unsupported(layout)

    def vocabulary_problem(self, vocab: Mapping[str, int]) -> str:
        largest = max(vocab.values(), default=0)
        if largest > np.iinfo(np.int16).max:
            return (f"NVIDIA's samples hold token ids as int16, and --vocab_file has ids up to {largest}: use a "
                    f"vocabulary of at most 32,768 entries, or another --output_format")
        if next((token for token, index in vocab.items() if index == 0), None) != "[PAD]":
            return ("NVIDIA's loss skips label 0 (ignore_index=0), so id 0 must be [PAD]: the first line of "
                    "--vocab_file is not [PAD]")
        return ""

    def frame_runs(self, encoder, features: Mapping[str, np.ndarray],
                   shard_of_row: np.ndarray) -> List[Tuple[int, object, int]]:
        """A batch's packed rows as NVIDIA's samples the workers check and cut, a TFRecord frame
        per shard present: the publish hands them to h5py (:func:`bert_data.format.nvidia_hdf5.encode_runs`)."""
        from .nvidia_hdf5 import encode_runs

        return encode_runs(features, shard_of_row)

    @staticmethod
    def rewritten_size_bound(path: str) -> int:
        """An HDF5 file is larger than its runs (~230 bytes a sample of vlen references and heap
        headers: 1.18x the runs at MSL 512, 1.46x at 128): :func:`bert_data.format.nvidia_hdf5.file_size_bound`."""
        from .nvidia_hdf5 import file_size_bound

        return file_size_bound(path)

    def settings_problem(self, config) -> str:
        from .nvidia_hdf5 import NVIDIA_SEQUENCES_PER_SAMPLE

        if config.max_sequences_per_pack > NVIDIA_SEQUENCES_PER_SAMPLE:
            return (f"NVIDIA's reader has {NVIDIA_SEQUENCES_PER_SAMPLE} slots per sample: pass --max_sequences_per_pack "
                    f"{NVIDIA_SEQUENCES_PER_SAMPLE} or fewer")
        return ""


CONTAINERS: Dict[str, Type[TFRecordContainer]] = {
    "tfrecord": TFRecordContainer, "parquet": ParquetContainer, "mds": MDSContainer, "hdf5": HDF5Container,
}
OUTPUT_FORMATS = tuple(CONTAINERS)


def container_for(output_format: str = "tfrecord", compression: str = "none") -> TFRecordContainer:
    return CONTAINERS[output_format](compression)


def container_of(config) -> TFRecordContainer:
    """The container a run writes (``--output_format``, ``--compression``)."""
    return container_for(getattr(config, "output_format", "tfrecord"), config.compression)


def rewritten_format_of(path: str) -> Optional[str]:
    """The ``--output_format`` of a rewritten shard file by its suffix (``parquet``, ``mds``), or
    None for anything else (TFRecords, whatever their name)."""
    for name, container in CONTAINERS.items():
        if issubclass(container, RewritingContainer) and path.endswith(container.suffix):
            return name
    return None


def is_rewriting(container: object) -> bool:
    """Whether the output rewrites this container's shards from their TFRecord stream."""
    return isinstance(container, RewritingContainer)


class NotConcatenableError(RuntimeError):
    """An assembler was asked to concatenate byte runs of a container that does not allow it."""


def require_concatenation(container: TFRecordContainer) -> None:
    """The assemblers build shards by concatenating byte runs: refuse a container for which that
    would not be a valid file (a programming error, never a user's). A rewriting container passes:
    its runs are TFRecord frames, and the output rewrites the assembled shards at publish."""
    if not container.concatenates and not is_rewriting(container):
        raise NotConcatenableError(
            f"{container.name} shards cannot be assembled by concatenating group runs; this output needs an "
            f"assembler that rewrites them"
        )


def require_tfrecord_shards(container: TFRecordContainer, where: str) -> None:
    """An output that publishes the assembled TFRecord stream as it is (BERT's named files, Beam's
    shard writer) refuses a rewriting container (a programming error: config.validate refuses
    the flags first)."""
    if is_rewriting(container):
        raise NotConcatenableError(f"{where} writes TFRecord files only, not {container.name}")

"""Containers: how a shard's record payloads become file bytes, and what that allows.

An encoder (:mod:`bert_data.format.encoders`) turns a batch of features into one payload per
record; a container frames payloads into the bytes of a file. The container also says what the
output side may do with those bytes:

* ``suffix``: the shards' file-name suffix (:func:`bert_data.output.naming.shard_file_names`);
* ``concatenates``: whether two framed runs written one after the other are one valid file of the
  records of both. TFRecord framing (and gzip members) concatenate, so every shard assembler
  builds a shard by appending groups' byte runs in group order, without parsing a record. A
  container that does not (Parquet, with its footer; HDF5) must say ``False``, and the output
  side then refuses to byte-concatenate it (:func:`require_concatenation`) rather than write a
  corrupt file.

A new container is one class here and one entry in :data:`CONTAINERS`.
"""

from __future__ import annotations

import gzip
from typing import Dict, Sequence, Type

from ..output.naming import TFRECORD_SUFFIX
from .tfrecord import frame_records


class TFRecordContainer:
    """TFRecord framing (length, masked CRC32C of the length, payload, masked CRC32C of the
    payload), optionally each written run a gzip member (``--compression gzip``); the layout
    google-research/bert, TF Model Garden and the Model Zoo read."""

    name = "tfrecord"
    suffix = TFRECORD_SUFFIX
    concatenates = True

    def __init__(self, compression: str = "none") -> None:
        self.compression = compression

    def frame(self, payloads: Sequence[bytes]) -> bytes:
        """One run of records: framed, and a gzip member with ``--compression gzip`` (mtime 0, so
        the bytes depend only on the records)."""
        data = frame_records(payloads)
        if self.compression == "gzip":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        return data


CONTAINERS: Dict[str, Type[TFRecordContainer]] = {"tfrecord": TFRecordContainer}


def container_for(output_format: str = "tfrecord", compression: str = "none") -> TFRecordContainer:
    return CONTAINERS[output_format](compression)


def container_of(config) -> TFRecordContainer:
    """The container a run writes (every run writes TFRecords today; ``--compression``)."""
    return container_for("tfrecord", config.compression)


class NotConcatenableError(RuntimeError):
    """An assembler was asked to concatenate byte runs of a container that does not allow it."""


def require_concatenation(container: TFRecordContainer) -> None:
    """The assemblers build shards by concatenating byte runs: refuse a container for which that
    would not be a valid file (a programming error, never a user's)."""
    if not container.concatenates:
        raise NotConcatenableError(
            f"{container.name} shards cannot be assembled by concatenating group runs; this output needs an "
            f"assembler that rewrites them"
        )

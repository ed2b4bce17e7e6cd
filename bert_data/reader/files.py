"""Which record files :func:`~bert_data.reader.dataset.pretraining_dataset` reads, and the checks
of them that need no training step: the file half of the reader (the pipeline is
:mod:`bert_data.reader.dataset`'s).

* :func:`resolve_reads`: a file pattern -> the files, in order, with the manifest describing each
  and the records it lists for each. An output directory stands for exactly the files its
  manifest lists (its ``data_params.json``, or the hidden manifests of BERT-named output files:
  :func:`bert_data.format.manifest.listed_files`), never every ``*.tfrecords`` in it, so shards a
  run of another ``--name`` left beside them are not read as data (they are named in a
  warning); a listed file that is missing is an error. A local file that is not a regular file
  (a FIFO, a device) is an error: reading it could block or never end.
* :func:`count_checked`: a file's records in tf.data, checked against the count its manifest
  lists when the file ends: a shard cut at a record boundary (no CRC error to see) stops the
  pipeline with an error naming the file, the records read and the records listed. Counted
  per batch of records, so it costs nothing measurable.
* :func:`detect_compression`: GZIP or not, per file, by the rule every reader of this package uses.

Every file system ``tf.io.gfile`` knows works (local, ``gs://``, ...); the hidden manifests of
BERT-named files are local only, as ``create_pretraining_data`` writes only local files.
TensorFlow is imported when a function is called.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import RecordFormatError
from ..format.manifest import (
    FORMAT_READERS,
    Manifest,
    directory_reads,
    listed_count,
    load_file_manifest,
    load_manifest,
    named_output_manifests,
    refuse_unfinished_globs,
    require_listed_size,
)
from ..format.containers import rewritten_format_of
from ..format.tfrecord import tfrecord_compression
from ..output.naming import natural_key, shard_glob
from ..storage import file_identity, file_kind, is_remote, require_regular_file

log = logging.getLogger("bert_data")

__all__ = ["FilePattern", "FileSet", "resolve_reads", "resolve_files", "detect_compression", "count_checked"]

FilePattern = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]
COUNT_BATCH = 256  # records counted at once by count_checked (per-record counting cost 20x the read)


@dataclass
class FileSet:
    """The files to read, in order, and what their manifests say of them."""

    files: List[str] = field(default_factory=list)
    expected: List[int] = field(default_factory=list)  # records listed for each file, -1 when not listed
    listed_in: List[str] = field(default_factory=list)  # the manifest listing each file ("" when none)
    manifests: List[Manifest] = field(default_factory=list)  # each manifest once, in order of first use

    def add(self, path: str, manifest: Optional[Manifest]) -> None:
        count = listed_count(manifest, path)
        self.files.append(path)
        self.expected.append(-1 if count is None else count)
        self.listed_in.append(manifest.path if manifest is not None and count is not None else "")
        if manifest is not None and all(m.path != manifest.path for m in self.manifests):
            self.manifests.append(manifest)


def gfile_read_text(path: str) -> str:
    """:func:`~bert_data.format.manifest.load_manifest`'s reader for every file system
    ``tf.io.gfile`` knows (local, ``gs://``, ...). A local manifest that is not a regular file
    is an error, never read (a FIFO would block)."""
    import tensorflow as tf

    if not is_remote(path) and os.path.lexists(path) and file_kind(path) is not None:
        raise OSError(errno.EINVAL, "not a regular file")  # load_manifest: "PATH: cannot be read (...)"
    try:
        if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
            raise FileNotFoundError(path)
        with tf.io.gfile.GFile(path, "r") as handle:
            return handle.read()
    except tf.errors.OpError as exc:
        raise OSError(str(exc)) from None


class _Manifests:
    """The manifests of each directory, read once: its ``data_params.json`` (through gfile) and,
    for a local directory without one, the hidden manifests of BERT-named output files."""

    def __init__(self) -> None:
        self._read: Dict[str, Tuple[Optional[Manifest], Any]] = {}

    def of_directory(self, directory: str) -> Tuple[Optional[Manifest], Any]:
        if directory not in self._read:
            manifest = load_manifest(directory, read_text=gfile_read_text)
            named = named_output_manifests(directory) if manifest is None and not is_remote(directory) else ()
            self._read[directory] = (manifest, named)
        return self._read[directory]

    def of_file(self, path: str) -> Optional[Manifest]:
        manifest, named = self.of_directory(os.path.dirname(path))
        if manifest is not None or not named:
            return manifest
        return load_file_manifest(path, None, named)


def _patterns(file_pattern: FilePattern) -> List[str]:
    import tensorflow as tf

    if isinstance(file_pattern, (str, os.PathLike)):
        text = os.fspath(file_pattern)
        patterns = [text] if tf.io.gfile.isdir(text) else [p for p in text.split(",") if p.strip()]
    else:
        patterns = [os.fspath(p) for p in file_pattern]
    if not patterns:
        raise RecordFormatError(f"no TFRecord files: empty file pattern {file_pattern!r}")
    return [p.strip() for p in patterns]


def _shard_like(directory: str) -> List[str]:
    import tensorflow as tf

    found = tf.io.gfile.glob(os.path.join(directory, shard_glob()))
    return sorted((m for m in found if not tf.io.gfile.isdir(m)), key=natural_key)


def _directory_files(directory: str, manifests: _Manifests, use_manifest: bool) -> List[str]:
    """The files an output directory stands for (see the module docstring)."""
    import tensorflow as tf

    shard_like = _shard_like(directory)
    if not use_manifest:
        return directory_reads(directory, None, (), shard_like, unfinished_is_error=False)[0]  # (every shard, as asked)
    manifest, named = manifests.of_directory(directory)
    files, warning = directory_reads(directory, manifest, named, shard_like, tf.io.gfile.exists)
    if warning:
        log.warning("%s", warning)
    return files


def resolve_reads(file_pattern: FilePattern, use_manifest: bool = True) -> FileSet:
    """The files a pattern names, in order, duplicates removed, each with its manifest's count.

    A directory stands for the files its manifest lists (every file named like a shard when it
    has none, or with ``use_manifest=False``); a string that is not a directory is split on
    commas; each glob's matches come in natural order. A file matched by a glob that lies beside
    a manifest not listing it is read, with a warning that its count is not checked. Raises
    :class:`RecordFormatError` naming the pattern when nothing matches, a listed file that is
    missing, a local file that is not a regular file."""
    import tensorflow as tf

    manifests = _Manifests()
    found = FileSet()
    seen = set()
    for pattern in _patterns(file_pattern):
        if tf.io.gfile.isdir(pattern):
            matches = _directory_files(pattern, manifests, use_manifest)
        else:
            matches = sorted((m for m in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(m)), key=natural_key)
            if not matches:
                raise RecordFormatError(f"no TFRecord files match {pattern!r}")
            refuse_unfinished_globs(matches, manifests.of_directory)
        for match in matches:
            if file_identity(match) in seen:  # (one file named twice: ./A/x and A, a symlink)
                continue
            seen.add(file_identity(match))
            other = rewritten_format_of(match)
            if other is not None:  # a Parquet / MDS / HDF5 file is not a TFRecord: say which reader reads it
                raise RecordFormatError(
                    f"{match} is a {other} file (--output_format {other}), not a TFRecord: read it with "
                    + FORMAT_READERS.get(other, "its format's own reader")
                )
            if not is_remote(match):
                require_regular_file(match, RecordFormatError)
            manifest = manifests.of_file(match) if use_manifest else None
            require_listed_size(manifest, match)
            found.add(match, manifest)
            if manifest is not None and found.expected[-1] < 0:
                log.warning("%s is not listed in %s (not part of that output?): it is read, but its record count is not "
                            "checked", match, manifest.path)
    return found


def resolve_files(file_pattern: FilePattern) -> List[str]:
    """Every file a pattern names (:func:`resolve_reads`), in order."""
    return resolve_reads(file_pattern).files


def detect_compression(path: str) -> str:
    """``"GZIP"`` or ``""`` (TensorFlow's names), from the first 12 bytes of the file, with the
    rule every reader of this package uses (:func:`bert_data.format.tfrecord.tfrecord_compression`:
    a plain file whose first record length starts with the gzip magic bytes is plain)."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            head = handle.read(12)
    except (OSError, tf.errors.OpError) as exc:
        raise RecordFormatError(f"cannot read TFRecord file {path} ({exc})") from None
    return "GZIP" if tfrecord_compression(head) == "gzip" else ""


def compressions(files: Sequence[str], compression: str) -> List[str]:
    """TensorFlow's compression name of each file: detected per file with ``"auto"``."""
    if compression == "auto":
        return [detect_compression(f) for f in files]
    return ["GZIP" if compression == "gzip" else ""] * len(files)


def count_checked(records: Any, filename: Any, expected: Any, listed_in: Any) -> Any:
    """``records`` (one file's serialized records, a ``tf.data.Dataset``) unchanged, but when the
    file ends with another number of records than ``expected`` (a scalar int64 tensor; < 0: not
    checked) the iterator raises ``InvalidArgumentError`` naming the file, the records read and
    the manifest ``listed_in`` with its count. Records are counted a batch at a time (an empty
    batch marks the end), then unbatched: same records, same order."""
    import tensorflow as tf

    end = tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))

    def count(read, batch):
        size = tf.size(batch, out_type=tf.int64)
        ok = tf.logical_or(tf.logical_or(size > 0, expected < 0), tf.equal(read, expected))
        message = tf.strings.join([
            filename, " holds ", tf.strings.as_string(read), " records, but ", listed_in, " lists ",
            tf.strings.as_string(expected), ": the file was cut or changed after it was written; write the output "
            "again (rerun the command that made it; create_tfrecords needs --overwrite)",
        ])
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return read + size, batch

    return records.batch(COUNT_BATCH).concatenate(end).scan(tf.constant(0, tf.int64), count).unbatch()

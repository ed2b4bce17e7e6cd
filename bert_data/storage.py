"""Storage: local paths and remote URLs behind one small interface.

Every file that may be a URL goes through here: the Beam runner's metadata, documents, work
directory, shards and manifest, and the manifest written by any runner. A path may be a local one
or a URL with a scheme (``gs://``, ``s3://``, ``hdfs://``, ...). The local runner's work directory
(fragments, partial shards, journal: :mod:`bert_data.writer`) is local by design: it appends
with kernel copies and fsyncs, which object stores cannot do.
Local paths use the operating system directly (fsync before rename where a crash must not
lose what a journal claims); URLs go through Apache Beam's ``FileSystems`` (installed with
the ``beam`` extra), which is only imported when a URL is actually used.

Object stores publish an object atomically when its upload closes, so :func:`atomic_create`
needs no temporary name there; elsewhere it writes ``path.<random>.tmp`` and renames it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import uuid
from typing import IO, Any, Callable, List, Mapping, Sequence, Tuple

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ATOMIC_SCHEMES = ("gs", "s3", "azfs")  # object stores: an upload is published whole, or not at all
_OCTET = "application/octet-stream"


def is_remote(path: str) -> bool:
    """True for paths with a scheme (gs://, s3://, hdfs://, ...)."""
    return bool(_SCHEME.match(path))


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _uncompressed():
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return _filesystems().join(base, *parts)
    return os.path.join(base, *parts)


def open_read(path: str) -> IO[bytes]:
    """Raw bytes of a file (never decompressed on the way: readers sniff compression themselves)."""
    if not is_remote(path):
        return open(path, "rb")
    return _filesystems().open(path, mime_type=_OCTET, compression_type=_uncompressed())


def open_metadata(path: str) -> IO[bytes]:
    """:func:`open_read` whose remote failures are OSErrors, as local ones are (metadata files may be remote)."""
    if not is_remote(path):
        return open(path, "rb")
    try:
        return open_read(path)
    except Exception as exc:  # BeamIOError and friends
        raise OSError(errno.EIO, getattr(exc, "strerror", None) or str(exc)) from None


def create(path: str) -> IO[bytes]:
    """A new file for writing (truncated if it exists)."""
    if not is_remote(path):
        return open(path, "wb")
    return _filesystems().create(path, mime_type=_OCTET, compression_type=_uncompressed())


def atomic_create(path: str) -> Tuple[IO[bytes], Callable[[], None]]:
    """``(handle, commit)``: write ``path`` so that a reader never sees a partial file; call
    ``commit()`` after closing the handle."""
    scheme = path.split("://", 1)[0] if is_remote(path) else None
    if scheme in _ATOMIC_SCHEMES:
        return create(path), lambda: None
    if not is_remote(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    return create(tmp), lambda: rename(tmp, path)


def rename(source: str, destination: str) -> None:
    if not is_remote(source):
        os.replace(source, destination)
        return
    _filesystems().rename([source], [destination])


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    return _filesystems().exists(path)


def listing(pattern: str) -> List[str]:
    """Files matching a glob pattern (for URLs: what the file system's match finds)."""
    if not is_remote(pattern):
        import glob

        return sorted(glob.glob(pattern))
    try:
        return [m.path for m in _filesystems().match([pattern])[0].metadata_list]
    except Exception:  # BeamIOError: nothing matches
        return []


def delete(paths: Sequence[str], batch: int = 1000, only_existing: bool = True) -> None:
    """Delete the files that exist among ``paths``; with ``only_existing=False`` every path must
    exist (paths from :func:`listing`: no round trip per file to ask)."""
    existing = [p for p in paths if exists(p)] if only_existing else list(paths)
    for start in range(0, len(existing), batch):
        part = existing[start : start + batch]
        if is_remote(part[0]):
            _filesystems().delete(list(part))
        else:
            for path in part:
                os.unlink(path)


def read_bytes(path: str) -> bytes:
    with open_read(path) as handle:
        return handle.read()


def read_range(path: str, offset: int, length: int) -> bytes:
    """Exactly ``length`` bytes of ``path`` at ``offset`` (an error if the file is shorter)."""
    with open_read(path) as handle:
        handle.seek(offset)
        data = handle.read(length)
    if len(data) != length:
        raise RuntimeError(f"{path}: expected {length} bytes at offset {offset}, got {len(data)}")
    return data


def write_json_atomically(path: str, payload: Mapping[str, Any]) -> None:
    """JSON to ``path`` under a temporary name, flushed to disk, then renamed into place."""
    text = json.dumps(payload, indent=1, sort_keys=False) + "\n"
    if is_remote(path):
        tmp = path + ".tmp"
        with create(tmp) as handle:
            handle.write(text.encode("utf-8"))
        rename(tmp, path)
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)

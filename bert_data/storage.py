"""Storage: local paths and remote URLs behind one small interface.

Every file that may be a URL goes through here: metadata, documents, the work directory of a
run whose ``--output_dir`` is a URL (fragments, the journal of finished groups), shards and the
manifest, for every runner. A path is a local one or a URL with a scheme (``s3://``, ``gs://``,
``file://``, ``hdfs://``, ...). A local ``--output_dir`` keeps the local runner's work directory
(partial shards appended with kernel copies and fsyncs: :mod:`bert_data.output.local_dir`), which object
stores cannot do; a URL ``--output_dir`` gets the object-store layout of
:mod:`bert_data.output.object_store`.

Local paths use the operating system directly (fsync before rename where a crash must not lose
what a journal claims). URLs go through fsspec (installed with the ``dask`` extra; ``s3://``
needs ``s3fs``, ``gs://`` needs ``gcsfs``, ...); a scheme fsspec does not know falls back to
Apache Beam's ``FileSystems`` (the ``beam`` extra: ``gs://`` with ``apache-beam[gcp]``, and file
systems registered with Beam). A URL whose file system is not installed is one line naming the
package to install (:class:`StorageError`, exit 2), raised where the URL is first used.

Object stores publish an object atomically when its upload closes, so :func:`atomic_create`
needs no temporary name there; elsewhere it writes ``path.<random>.tmp`` and renames it.

Two rules every tool shares live here too: no output names a file the run reads
(:func:`refuse_writing_over_inputs`, through :func:`written_over_input`: real paths, and device
and inode for hard links), and what a local path is when it is not a regular file
(:func:`file_kind`: readers refuse FIFOs and devices rather than block on them).
"""

from __future__ import annotations

import errno
import json
import os
import re
import uuid
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import BertDataError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Object stores: an upload is published whole or not at all, and there are no directories.
_ATOMIC_SCHEMES = ("gs", "gcs", "s3", "s3a", "azfs", "az", "abfs", "abfss", "oss")
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
             "abfss": "adlfs", "oss": "ossfs", "hdfs": "pyarrow", "sftp": "paramiko"}
_OCTET = "application/octet-stream"
_BEAM_NATIVE = ("gs", "hdfs")  # schemes Beam's own file systems serve without further set-up


class StorageError(BertDataError):
    """A URL whose file system is not installed or not known (exit 2)."""


def is_remote(path: str) -> bool:
    """True for paths with a scheme (gs://, s3://, hdfs://, ...)."""
    return bool(_SCHEME.match(path))


def scheme(path: str) -> str:
    """``s3`` for ``s3://b/k``; ``""`` for a local path."""
    return path.split("://", 1)[0].lower() if is_remote(path) else ""


def is_object_store(path: str) -> bool:
    return scheme(path) in _ATOMIC_SCHEMES


# --- backends ---------------------------------------------------------------------------------


def _fsspec(path: str) -> Optional[Tuple[Any, str]]:
    """``(fsspec file system, path within it)`` for a URL, or None when fsspec is not installed
    or does not know the scheme (then Beam's ``FileSystems`` is tried)."""
    try:
        import fsspec.core
    except ImportError:
        return None
    try:
        return fsspec.core.url_to_fs(path)
    except ValueError:  # "Protocol not known"
        return None
    except ImportError as exc:  # fsspec knows the scheme, its implementation is not installed
        if scheme(path) in _BEAM_NATIVE and _beam_knows(path):
            return None  # e.g. gs:// on Dataflow: apache-beam[gcp] without gcsfs
        key = scheme(path)
        hint = f"pip install {_PACKAGES[key]}" if key in _PACKAGES else "install fsspec's implementation for it"
        raise StorageError(f"{key}:// paths need a file system that is not installed ({exc}): {hint}") from None


def _beam_knows(path: str) -> bool:
    """Beam has a usable file system for ``path`` (its GCS one needs apache-beam[gcp])."""
    try:
        from apache_beam.io.filesystems import FileSystems

        FileSystems.get_filesystem(path)
        if scheme(path) == "gs":
            import apache_beam.io.gcp.gcsio  # noqa: F401
        return True
    except Exception:
        return False


def _filesystems():
    """Apache Beam's ``FileSystems``, for schemes fsspec does not know."""
    try:
        from apache_beam.io.filesystems import FileSystems
    except ImportError:
        raise StorageError(
            "URL paths need fsspec (pip install 'bert_data[dask]') or Apache Beam (pip install 'bert_data[beam]')"
        ) from None
    return FileSystems


def _uncompressed():
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def _beam_or_error(path: str):
    filesystems = _filesystems()
    try:
        filesystems.get_filesystem(path)
    except ValueError:
        raise StorageError(
            f"{scheme(path)}:// is not a file system that fsspec or Apache Beam knows: check the URL's scheme"
        ) from None
    return filesystems


# --- the interface ------------------------------------------------------------------------------


def join(base: str, *parts: str) -> str:
    if not is_remote(base):
        return os.path.join(base, *parts)
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])


def parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0] if is_remote(path) else os.path.dirname(path)


def open_read(path: str) -> IO[bytes]:
    """Raw bytes of a file (never decompressed on the way: readers sniff compression themselves)."""
    if not is_remote(path):
        return open(path, "rb")
    found = _fsspec(path)
    if found is not None:
        fs, inner = found
        return fs.open(inner, "rb")
    return _beam_or_error(path).open(path, mime_type=_OCTET, compression_type=_uncompressed())


def open_metadata(path: str) -> IO[bytes]:
    """:func:`open_read` whose remote failures are OSErrors, as local ones are (metadata files may be remote).
    A local FIFO (a named pipe, or ``<(command)``) is opened without waiting for a writer, so a
    named pipe nobody writes to reads as empty instead of hanging the run."""
    if not is_remote(path):
        import stat

        if stat.S_ISFIFO(os.stat(path).st_mode):
            import fcntl

            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # then read blocking
            return os.fdopen(fd, "rb")
        return open(path, "rb")
    try:
        return open_read(path)
    except BertDataError:
        raise
    except FileNotFoundError:
        raise
    except Exception as exc:  # BeamIOError, botocore errors and friends
        raise OSError(errno.EIO, getattr(exc, "strerror", None) or str(exc)) from None


def create(path: str) -> IO[bytes]:
    """A new file for writing (truncated if it exists; directories made as needed)."""
    if not is_remote(path):
        return open(path, "wb")
    found = _fsspec(path)
    if found is not None:
        fs, inner = found
        if not is_object_store(path):
            fs.makedirs(fs._parent(inner), exist_ok=True)
        return fs.open(inner, "wb")
    return _beam_or_error(path).create(path, mime_type=_OCTET, compression_type=_uncompressed())


def atomic_create(path: str) -> Tuple[IO[bytes], Callable[[], None]]:
    """``(handle, commit)``: write ``path`` so that a reader never sees a partial file; call
    ``commit()`` after closing the handle."""
    if is_object_store(path):
        return create(path), lambda: None
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    return create(tmp), lambda: rename(tmp, path)


WRITE_STEP = 1 << 20  # bytes handed to one write() of a large buffer (write_in_steps)


def write_in_steps(handle: IO[bytes], data) -> None:
    """``data`` (any contiguous buffer) written to ``handle``, at most :data:`WRITE_STEP` bytes a call.

    Why: Linux 6.x gives one large write() of a new file large page-cache folios, and where free
    memory of that order is cold (a VM whose unused memory the host takes back) allocating them
    costs more than the copy: 92 MB written as 9 MB writes took 0.13-0.28 s here, as 1 MB writes
    0.025 s (MDS pieces were written whole then, 64 MB at most). Smaller writes cost nothing elsewhere."""
    view = memoryview(data).cast("B")
    for start in range(0, len(view), WRITE_STEP):
        handle.write(view[start:start + WRITE_STEP])


def _write_local(path: str, data: bytes, tmp: str, sync: bool) -> None:
    """``data`` to ``tmp``, then renamed to ``path``; the temporary file never outlives a failure
    (a full disk, a directory in the way), so nothing is left beside the output to clutter it."""
    try:
        with open(tmp, "wb") as handle:
            write_in_steps(handle, data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes(path: str, data: bytes, sync: bool = False) -> None:
    """``data`` as the whole of ``path``, published atomically (``sync``: a local file is on disk
    before its name is, as what a manifest written after it lists must be)."""
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        _write_local(path, data, f"{path}.{uuid.uuid4().hex}.tmp", sync=sync)
        return
    handle, commit = atomic_create(path)
    try:
        handle.write(data)
    finally:
        handle.close()
    commit()


def rename(source: str, destination: str) -> None:
    if not is_remote(source):
        os.replace(source, destination)
        return
    found = _fsspec(source)
    if found is not None:
        fs, inner = found
        fs.mv(inner, fs._strip_protocol(destination))
        return
    _beam_or_error(source).rename([source], [destination])


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    found = _fsspec(path)
    if found is not None:
        fs, inner = found
        return fs.exists(inner)
    return _beam_or_error(path).exists(path)


def size(path: str) -> int:
    """The size in bytes of the file ``path`` (a URL: one request)."""
    if not is_remote(path):
        return os.path.getsize(path)
    found = _fsspec(path)
    if found is not None:
        fs, inner = found
        return int(fs.size(inner))
    return int(_beam_or_error(path).match([path])[0].metadata_list[0].size_in_bytes)


def sizes(directory: str, names: Sequence[str]) -> Dict[str, int]:
    """The size in bytes of each file ``names[i]`` of ``directory`` (a URL: one listing, not a
    request per file); an error when one is not there."""
    if not is_remote(directory):
        return {name: os.path.getsize(os.path.join(directory, name)) for name in names}
    found = _fsspec(directory)
    if found is not None:
        fs, inner = found
        listed = {entry["name"].rstrip("/").rsplit("/", 1)[-1]: entry.get("size") for entry in fs.ls(inner, detail=True)}
    else:
        matched = _beam_or_error(directory).match([join(directory, "*")])[0].metadata_list
        listed = {m.path.rsplit("/", 1)[-1]: m.size_in_bytes for m in matched}
    return {name: int(listed[name]) if isinstance(listed.get(name), int) else size(join(directory, name)) for name in names}


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory (a URL: what its fsspec file system says, e.g. a prefix with
    objects under it; False for schemes only Apache Beam serves, which has no directories)."""
    if not is_remote(path):
        return os.path.isdir(path)
    found = _fsspec(path)
    if found is not None:
        fs, inner = found
        return bool(fs.isdir(inner))
    _beam_or_error(path)
    return False


def listing(pattern: str) -> List[str]:
    """Files matching a glob pattern (for URLs: what the file system's glob finds, as URLs)."""
    if not is_remote(pattern):
        import glob

        return sorted(glob.glob(pattern))
    found = _fsspec(pattern)
    if found is not None:
        fs, inner = found
        return sorted(fs.unstrip_protocol(p) for p in fs.glob(inner) if not fs.isdir(p))
    try:
        return [m.path for m in _beam_or_error(pattern).match([pattern])[0].metadata_list]
    except BertDataError:
        raise
    except Exception:  # BeamIOError: nothing matches
        return []


def delete(paths: Sequence[str], batch: int = 1000, only_existing: bool = True) -> None:
    """Delete the files that exist among ``paths``; with ``only_existing=False`` every path must
    exist (paths from :func:`listing`: no round trip per file to ask)."""
    existing = [p for p in paths if exists(p)] if only_existing else list(paths)
    for start in range(0, len(existing), batch):
        part = existing[start : start + batch]
        if not is_remote(part[0]):
            for path in part:
                os.unlink(path)
            continue
        found = _fsspec(part[0])
        if found is not None:
            fs = found[0]
            fs.rm([fs._strip_protocol(p) for p in part])
        else:
            _beam_or_error(part[0]).delete(list(part))


def delete_tree(root: str) -> None:
    """Every file under ``root`` (a URL; object stores have no directories), then ``root``."""
    found = _fsspec(root)
    if found is not None:
        fs, inner = found
        if fs.exists(inner):
            fs.rm(inner, recursive=True)
        return
    listed = listing(join(root, "**")) or []
    if listed:
        delete(listed, only_existing=False)


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
    """JSON to ``path`` under a temporary name, flushed to disk, then renamed into place (an
    object store publishes it whole when the upload closes)."""
    text = json.dumps(payload, indent=1, sort_keys=False) + "\n"
    if is_remote(path):
        write_bytes(path, text.encode("utf-8"))
        return
    _write_local(path, text.encode("utf-8"), path + ".tmp", sync=True)


def local_path_of(path: str) -> str:
    """A ``file://`` URL as the local path it names; anything else unchanged."""
    return path[len("file://"):] if path.startswith("file://") else path


def file_identity(path: str) -> str:
    """What makes two names of one file the same (``A/x``, ``./A/x``, ``/abs/A/x``, a symlink to
    it, ``file:///abs/A/x``): the real path of a local file, the URL of any other. Readers read a
    file once however it is named."""
    if is_remote(path) and not path.startswith("file://"):
        return path
    return os.path.realpath(local_path_of(path))


def file_kind(path: str) -> Optional[str]:
    """None when the local ``path`` is a regular file (symlinks followed), else what it is ("a
    directory", "a FIFO", "a socket", "a device"): every reader that expects a file refuses the
    others, since reading one could block (a FIFO nobody writes to) or never end (a device).
    Raises :class:`OSError` when it cannot be stat'ed."""
    import stat

    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device"


def require_regular_file(path: str, error: type, where: str = "") -> None:
    """Raise ``error`` (one line) unless the local ``path`` is a regular file the readers may
    open (:func:`file_kind`): the tf.data reader, ``bert_data.torch`` and inspect give the same words."""
    try:
        kind = file_kind(path)
    except OSError as exc:
        raise error(f"cannot read {path}{where} ({exc.strerror or exc})") from None
    if kind is not None:  # (any format's shard: a Parquet, MDS or HDF5 file too)
        raise error(f"{path}{where} is {kind}, not a regular file; give regular files (or an output directory)")

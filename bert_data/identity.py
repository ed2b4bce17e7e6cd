"""A document's identity: which file a metadata entry names, however its path is spelled, and
what ``--resume`` re-checks of it.

Three questions, three answers, and one rule for outputs (docs/reliability.md, "What a document is"):

* **Is this the same file?** (duplicate entries in the scan; a ``--validation_metadata_files``
  document kept out of train): the file itself, its device and inode (:func:`file_identity`),
  so ``docs/a.txt`` under ``--input_files_prefix /corpus``, ``/corpus/docs/a.txt``,
  ``./docs//a.txt`` and a symlink to it are one document. A URL is its text.
* **Which side of a train/validation split?** The split hashes text, never the file (it must
  give the same answer on another machine, or after the corpus moved): the entry's canonical
  spelling (:func:`entry_key`), its normalized path relative to ``--input_files_prefix`` when it
  lies under it, else its normalized absolute path. Relative entries that stay under the prefix
  (the usual case) are their own key, so existing splits did not move.
* **Has it changed since the interrupted run?** The size and modification time of every listed
  local file, in order, digested (:class:`DocumentsDigest`); the most recently modified one is
  remembered to name it when ``--resume`` refuses. URLs are not stat'ed (a round trip per
  document): only their listing is checked, through the metadata files' digest.
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import re
import stat
import sys
from typing import Callable, Hashable, Iterable, Optional, Sequence, Tuple

from .errors import OutputError
from .storage import is_remote, local_path_of


def _climbs(path: str) -> bool:
    """A normalized relative path that leaves its base (``..`` or ``../x``)."""
    return path == os.pardir or path.startswith(os.pardir + os.sep)


def _normalized(path: str) -> str:
    """``os.path.normpath``, with a leading ``//`` made ``/`` (POSIX keeps two slashes; Linux
    reads them as one)."""
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def entry_key(entry: str, prefix: str = "") -> str:
    """A metadata entry's canonical spelling: what the train/validation split hashes and
    ``split_metadata`` writes duplicates once by.

    * a relative entry that stays under the prefix: its normalized path (``./docs//a.txt`` is
      ``docs/a.txt``), whatever the prefix, so moving the corpus does not move the split;
    * an absolute entry under the (local) prefix: its path relative to it (``/corpus/docs/a.txt``
      with prefix ``/corpus`` is ``docs/a.txt``); other absolute entries, and relative ones that
      climb out of the prefix, their normalized absolute path. Without a prefix an entry is its
      normalized self (relative entries are then relative to the working directory, which the
      key must not depend on);
    * a URL: as written, or relative to a URL prefix when under it.
    """
    entry = entry.strip()
    prefix_remote = bool(prefix) and is_remote(prefix)
    if "://" in entry and is_remote(entry):
        base = prefix.rstrip("/") + "/" if prefix_remote else None
        return posixpath.normpath(entry[len(base):]) if base and entry.startswith(base) else entry
    if prefix_remote and not os.path.isabs(entry):
        return posixpath.normpath(entry)
    norm = _normalized(entry)
    if not prefix or prefix_remote or (not os.path.isabs(norm) and not _climbs(norm)):
        return norm
    base = _normalized(os.path.abspath(prefix))
    full = _normalized(os.path.join(base, norm))
    relative = os.path.relpath(full, base)
    return full if _climbs(relative) else relative


def shown(path: str, most: int = 200) -> str:
    """A path as an error line shows it: as is when printable and short, else its repr cut short
    (a metadata line may hold control characters or be very long)."""
    text = path if path.isprintable() else repr(path)
    return text if len(text) <= most else text[: most - 3] + "..."


def unusable_path(path: str) -> str:
    """Why the operating system cannot take ``path`` as a file name ("" when it can try): a NUL
    byte (no POSIX path holds one), or characters the file system encoding cannot write. Too long
    a name is left to the OS (its limits vary): the stat says so, naming the line."""
    if "\0" in path:
        return "holds a NUL byte, which no file name can"
    if "://" in path and is_remote(path):
        return ""
    try:
        os.fsencode(path)
    except UnicodeError:
        return f"holds characters that file names cannot have here (file system encoding {sys.getfilesystemencoding()})"
    return ""


def file_identity(info: Optional[os.stat_result], path: str) -> Hashable:
    """The file an entry names: ``(device, inode)`` from its stat (a symlink, a hard link or
    another spelling of the path are the same file), else its normalized absolute path (a file
    system without inode numbers), or the URL itself (``info`` None)."""
    if info is not None and info.st_ino:
        return (info.st_dev, info.st_ino)
    return path if "://" in path and is_remote(path) else _normalized(os.path.abspath(path))


def stat_identity(path: str) -> Optional[Hashable]:
    """:func:`file_identity` of a local path, stat'ed now; None when it cannot be (the scan
    reports a missing or unusable document with its metadata line)."""
    if "://" in path and is_remote(path):
        return path
    try:
        return file_identity(os.stat(path), path)
    except (OSError, ValueError):
        return None


class DocumentsDigest:
    """What ``--resume`` re-checks of the listed documents: per entry, in order, whether it is a
    regular file and its size and modification time (nanoseconds), digested; a URL only as
    "remote". The most recently modified file is remembered: a document edited after a run
    started is newer than every file that run saw, so a refused resume can name it."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self.newest: Tuple[int, str] = (-1, "")  # (mtime_ns, "path (metadata:line)")

    def add(self, info: Optional[os.stat_result], path: str, where: Callable[[], str]) -> None:
        """One entry, in order: its stat (None for a URL); ``where()`` names its metadata line
        (called only for a new newest file: the scan adds millions of entries)."""
        if info is None:
            self._digest.update(b"remote\n")
        elif not stat.S_ISREG(info.st_mode):
            self._digest.update(b"not a regular file\n")
        else:
            self._digest.update(b"%d %d\n" % (info.st_size, info.st_mtime_ns))
            if info.st_mtime_ns > self.newest[0]:
                self.newest = (info.st_mtime_ns, f"{path} ({where()})")

    def add_missing(self) -> None:
        """An entry that is not there (never in a scan's digest: the scan stops at it)."""
        self._digest.update(b"missing\n")

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    @property
    def newest_document(self) -> str:
        """``"MTIME_NS PATH (METADATA:LINE)"`` of the newest file, or "" when none was stat'ed."""
        mtime, described = self.newest
        return f"{mtime} {described}" if described else ""


def newest_mtime(newest_document: object) -> Optional[int]:
    """The modification time recorded by :attr:`DocumentsDigest.newest_document`, or None."""
    if not isinstance(newest_document, str):
        return None
    head = newest_document.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def newest_described(newest_document: str) -> str:
    """The ``PATH (METADATA:LINE)`` part of :attr:`DocumentsDigest.newest_document`."""
    return newest_document.split(" ", 1)[1] if " " in newest_document else ""


def documents_fingerprint(entries: Iterable[Tuple[str, str]]) -> Tuple[str, str]:
    """``(documents_sha256, newest_document)`` of ``(path, where)`` entries as the metadata scan
    records them, each stat'ed now (a finished run of BERT-named files is checked without a
    scan); an entry that is not there makes a digest no scan recorded."""
    documents = DocumentsDigest()
    for path, where in entries:
        if "://" in path and is_remote(path):
            documents.add(None, path, where.__str__)
            continue
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            documents.add_missing()
            continue
        documents.add(info, path, where.__str__)
    return documents.sha256, documents.newest_document


# --- outputs never overwrite inputs: the same rule of "one file", applied to what a tool writes ---


def written_over_input(
    outputs: Sequence[str], inputs: Iterable[Tuple[str, str]]
) -> Optional[Tuple[str, str, str]]:
    """The first ``(output, what, input)`` where writing or removing ``output`` would destroy a
    file the run reads (``inputs``: ``(what it is, path)`` pairs), or None.

    Every tool's one rule that an output never names one of its inputs. Local paths name one
    file when they have one real path (symlinks, ``..``) or, when the output exists, one device
    and inode (hard links, bind mounts): one ``stat`` per input, so a corpus's documents can be
    checked. URLs are compared as written (trailing slashes aside), ``file://`` ones as paths."""
    remote = {o.rstrip("/"): o for o in outputs if is_remote(local_path_of(o))}
    names: dict = {}
    files: dict = {}
    for given in outputs:
        out = local_path_of(given)
        if is_remote(out):
            continue
        names.setdefault(os.path.abspath(out), given)
        names.setdefault(os.path.realpath(out), given)
        try:
            info = os.stat(out)
        except (OSError, ValueError):
            continue
        files.setdefault(file_identity(info, out), given)
    for what, path in inputs:
        local = local_path_of(path)
        if is_remote(local):
            hit = remote.get(local.rstrip("/"))
        else:
            hit = names.get(os.path.abspath(local))
            if hit is None and files:
                try:
                    info = os.stat(local)
                except (OSError, ValueError):
                    info = None
                hit = files.get(file_identity(info, local)) if info is not None else None
        if hit is not None:
            return hit, what, path
    return None


def refuse_writing_over_inputs(
    flag: str, outputs: Sequence[str], inputs: Iterable[Tuple[str, str]], fix: str = "write it elsewhere"
) -> None:
    """Raise :class:`~bert_data.errors.OutputError` (one line, exit 2) when writing or removing
    one of ``outputs`` (given by ``flag``) would destroy an input (:func:`written_over_input`)."""
    found = written_over_input(outputs, inputs)
    if found is None:
        return
    output, what, path = found
    same_text = is_remote(path) or os.path.abspath(local_path_of(path)) == os.path.abspath(local_path_of(output))
    detail = "" if same_text else f" ({path})"
    raise OutputError(f"{flag} {output} is {what}{detail}; refusing to overwrite it (a file this run reads): {fix}")


@functools.lru_cache(maxsize=None)
def package_version(package: str) -> str:
    """An installed package's version (what a run records of its segmenter, tokenizers and
    bert_data, and --resume re-checks), or "not installed". Read from the first
    ``NAME-VERSION.dist-info/METADATA`` along ``sys.path`` (importlib.metadata's choice and answer)
    when there is exactly one there: importing ``importlib.metadata`` (email, zipfile, csv: ~33 ms)
    was a tenth of a run from the token cache. Anything else asks importlib.metadata."""
    found = _dist_info_version(package)
    if found is not None:
        return found
    from importlib import metadata as package_metadata

    try:
        return package_metadata.version(package)
    except package_metadata.PackageNotFoundError:
        return "not installed"


def _dist_info_version(package: str) -> Optional[str]:
    """The ``Version:`` of ``package``'s only dist-info in the first ``sys.path`` directory holding
    one, or None (none, several, unreadable, another layout: the caller asks importlib.metadata)."""
    wanted = re.sub(r"[-_.]+", "_", package).lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [name for name in names if name.endswith((".dist-info", ".egg-info"))
                 and re.sub(r"[-_.]+", "_", name.rsplit(".", 1)[0].split("-", 1)[0]).lower() == wanted]
        if not found:
            continue
        if len(found) != 1 or not found[0].endswith(".dist-info"):
            return None
        try:
            with open(os.path.join(entry or ".", found[0], "METADATA"), encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line[len("Version:"):].strip()
                    if not line.strip():
                        return None  # the headers ended without one
        except OSError:
            return None
        return None
    return None

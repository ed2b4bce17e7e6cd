"""Which files a :class:`~bert_data.torch.PretrainingDataset` reads, how many records each holds,
and what the records are (layout, lengths), without TensorFlow.

The rules are the tf.data reader's (:mod:`bert_data.reader.files`): an output directory stands
for exactly the files its manifest lists (its ``data_params.json``, or the hidden manifests of
BERT-named output files), a listed file that is missing is an error, a file named like a shard
but not listed is named in a warning and not read; a string that is not a directory is a
comma-separated list of globs, each matched in natural order; duplicates are read once; a local
file that is not a regular file is refused (reading a FIFO could block).

Paths may be URLs (``file://``, ``memory://``, ``s3://``, ``gs://``, ...: every file system of
:mod:`bert_data.storage`, fsspec's or Beam's), with the same rules: a URL directory stands for
the files its ``data_params.json`` lists, counts checked as they are read. DataLoader workers
open their files themselves (a ``memory://`` file system is per process: it reaches workers
that are forked, not spawned ones).

What is new here is that the record count of every file is needed before reading starts: the
exactly-once split (:mod:`bert_data.torch.plan`) cuts the epoch's records, not its files. A file
a manifest lists has its listed count (checked while it is read); any other file is counted
once, by reading its frames (:func:`count_records`, at the speed of the batch reader; a gzip
file must be decompressed to be counted).

Layout and lengths come from the manifests (``record_schema``/``schema``/run settings,
``max_seq_length``, ``max_predictions_per_seq``); what the caller asks for must agree with them,
and manifests that disagree with each other are an error. Files without a manifest are described
by the caller's arguments, or else by their first record.
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .. import storage
from ..errors import BertDataError, ConfigError, RecordFormatError, plural
from ..format.batch_decode import iter_record_batches
from ..format.checks import is_masked, layout_from_names
from ..format.example_wire import parse_example
from ..format.manifest import (
    Manifest, directory_reads, listed_count, load_file_manifest, load_manifest, manifest_layout, manifest_separator,
    named_output_manifests, records_vocabulary, refuse_other_format, refuse_unfinished_globs, require_listed_size,
    listed_bytes, sequences_per_pack,
)
from ..format.packed import is_packed
from ..format.schema import DEFAULT_SEQUENCES_PER_PACK, SCHEMAS, feature_length
from ..output.naming import natural_key, shard_glob
from ..storage import is_remote, require_regular_file

log = logging.getLogger("bert_data")

__all__ = ["FilePattern", "RecordFiles", "resolve", "count_records"]

FilePattern = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]
LAYOUTS = ("nsp", "sop", "mlm_only", "unmasked", "nsp_packed", "sop_packed", "mlm_only_packed")


@dataclass(frozen=True)
class RecordFiles:
    """The files of a dataset and what is known of their records before reading them."""

    files: Tuple[str, ...]
    counts: Tuple[int, ...]  # records in each file: listed in a manifest, else counted
    listed_in: Tuple[str, ...]  # the manifest listing each file's count ("" when it was counted)
    layout: str  # a key of bert_data.format.schema.SCHEMAS
    max_seq_length: int
    max_predictions_per_seq: int  # masked_lm_* slots; for unmasked records, the dynamic masking's (0: unknown)
    separator_tokens: Tuple[str, ...]  # the runs' --document_separator_token (never masked)
    sequences_per_pack: int = 0  # packed rows (--packing): max_sequences_per_pack; 0 for other layouts
    manifests: Tuple[Manifest, ...] = field(default=(), compare=False)  # those of the files (their vocabulary)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def fingerprint(self) -> str:
        """The files as a resume state knows them: each one's name, records and bytes (as its
        manifest lists them, else its size; -1 for an unlisted URL), hashed. Another dataset of
        as many records (another run's masking of one corpus) has other bytes; the same files
        moved elsewhere keep it."""
        import hashlib
        import json

        def size(path: str) -> int:
            listed = next((n for n in (listed_bytes(m, path) for m in self.manifests) if n is not None), None)
            if listed is not None:
                return listed
            local = storage.local_path_of(path)
            return os.path.getsize(local) if not is_remote(local) and os.path.isfile(local) else -1

        described = [(os.path.basename(path), count, size(path)) for path, count in zip(self.files, self.counts)]
        return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:16]


def _patterns(file_pattern: FilePattern) -> List[str]:
    if isinstance(file_pattern, (str, os.PathLike)):
        text = os.fspath(file_pattern)
        patterns = [text] if storage.isdir(text) else [p for p in text.split(",") if p.strip()]
    else:
        patterns = [os.fspath(p) for p in file_pattern]
    if not patterns:
        raise ConfigError(f"no TFRecord files: empty file pattern {file_pattern!r}")
    return [p.strip() for p in patterns]


def opener_for(path: str) -> Optional[Callable[[str], BinaryIO]]:
    """How to open a record file: None (the OS) for a local path, the storage layer for a URL."""
    return storage.open_read if is_remote(path) else None


def _url_text(path: str) -> str:
    """:func:`~bert_data.format.manifest.load_manifest`'s reader for a URL (fsspec, or Beam)."""
    if not storage.exists(path):
        raise FileNotFoundError(path)
    try:
        return storage.read_bytes(path).decode("utf-8")
    except BertDataError:
        raise
    except Exception as exc:  # fsspec/botocore/Beam errors are not all OSErrors: "cannot be read"
        raise OSError(str(exc)) from None


class _Manifests:
    """The manifests of each directory, read once (many files of one directory share them). A
    URL's is its ``data_params.json``: the hidden manifests of BERT-named files are local only,
    as ``create_pretraining_data`` writes only local files."""

    def __init__(self) -> None:
        self.read: Dict[str, Tuple[Optional[Manifest], List[Tuple[str, Any]]]] = {}

    def of_directory(self, directory: str) -> Tuple[Optional[Manifest], List[Tuple[str, Any]]]:
        if is_remote(directory):
            key = directory.rstrip("/")
            if key not in self.read:
                self.read[key] = (load_manifest(key, read_text=_url_text), [])
            return self.read[key]
        key = os.path.abspath(directory)
        if key not in self.read:
            manifest = load_manifest(directory)
            self.read[key] = (manifest, named_output_manifests(directory) if manifest is None else [])
        return self.read[key]

    def of_file(self, path: str) -> Optional[Manifest]:
        if is_remote(path):
            return self.of_directory(storage.parent(path))[0]
        manifest, named = self.of_directory(os.path.dirname(os.path.abspath(path)))
        return load_file_manifest(path, manifest, named)


def _glob(pattern: str) -> List[str]:
    """The files (not directories) a glob matches, local or URL, in natural order."""
    if is_remote(pattern):
        return sorted(storage.listing(pattern), key=natural_key)
    return sorted((p for p in glob.glob(pattern) if not os.path.isdir(p)), key=natural_key)


def _directory_files(directory: str, manifests: _Manifests) -> List[str]:
    """The files an output directory stands for (see the module docstring)."""
    manifest, named = manifests.of_directory(directory)
    remote = is_remote(directory)
    if remote:
        directory = directory.rstrip("/")
    shard_like = _glob(storage.join(directory, shard_glob()) if remote
                       else os.path.join(glob.escape(directory), shard_glob()))
    files, warning = directory_reads(directory, manifest, named, shard_like, storage.exists)
    if warning:
        log.warning("%s", warning)
    return files


def _matches(file_pattern: FilePattern) -> List[Tuple[str, Optional[Manifest]]]:
    """Every file the pattern names, in order, once, with its manifest (None when it has none)."""
    manifests = _Manifests()
    found: List[Tuple[str, Optional[Manifest]]] = []
    seen = set()
    for pattern in _patterns(file_pattern):
        if storage.isdir(pattern):
            paths = _directory_files(pattern, manifests)
        else:
            paths = _glob(pattern)
            if not paths:
                raise RecordFormatError(f"no TFRecord files match {pattern!r}")
            refuse_unfinished_globs(paths, manifests.of_directory)
        for path in paths:
            if storage.file_identity(path) in seen:  # (one file named twice: ./A/x and A, a symlink)
                continue
            seen.add(storage.file_identity(path))
            if not is_remote(path) or path.startswith("file://"):  # a FIFO could block the reader
                require_regular_file(storage.local_path_of(path), RecordFormatError)
            found.append((path, manifests.of_file(path)))
    return found


def count_records(path: str) -> int:
    """The records of a TFRecord file (plain or GZIP), every frame's CRCs checked."""
    return sum(len(batch) for batch in iter_record_batches(path, opener=opener_for(path)))


def _counts(matches: Sequence[Tuple[str, Optional[Manifest]]]) -> Tuple[List[int], List[str]]:
    counts: List[int] = []
    listed_in: List[str] = []
    for path, manifest in matches:
        count = listed_count(manifest, path)
        require_listed_size(manifest, storage.local_path_of(path))
        if count is None:
            if manifest is not None:
                log.warning("%s is not listed in %s (not part of that output?): it is read, but its record count is "
                            "not checked", path, manifest.path)
            count = count_records(path)
        elif count == 0 and count_records(path):  # no run of records would reach it: check it now
            raise RecordFormatError(
                f"{path} holds {count_records(path)} records, but {manifest.path if manifest else ''} lists 0: the "
                "file was changed after it was written; write the output again (create_tfrecords needs --overwrite)"
            )
        counts.append(count)
        listed_in.append(manifest.path if manifest is not None and listed_count(manifest, path) is not None else "")
    return counts, listed_in


def _manifest_layout(manifest: Manifest) -> str:
    layout, _, problem = manifest_layout(manifest)
    if problem:
        raise RecordFormatError(f"{manifest.path}: {problem}")
    return layout or "nsp"  # manifests of older runs wrote only NSP records


def _one(values: Sequence[Tuple[str, object]], what: str) -> Optional[object]:
    """The one value the manifests agree on (None when none gives one); an error when they differ."""
    distinct = sorted({repr(v) for _, v in values})
    if len(distinct) > 1:
        shown = "; ".join(f"{path}: {value!r}" for path, value in values)
        raise RecordFormatError(f"the files mix {what}s ({shown}); read them with separate datasets")
    return values[0][1] if values else None


def _record_layout(layout: str) -> str:
    """NSP and SOP records (packed or not) have one record layout: the same features."""
    return {"sop": "nsp", "sop_packed": "nsp_packed"}.get(layout, layout)


def _layout(manifests: Sequence[Manifest], wanted: Optional[str]) -> Optional[str]:
    found = [(m.path, _manifest_layout(m)) for m in manifests]
    same = [(path, _record_layout(layout)) for path, layout in found]
    _one(same, "record layout")
    if wanted is not None:
        for path, layout in found:
            if layout != wanted and _record_layout(layout) != _record_layout(wanted):
                raise RecordFormatError(
                    f"{path} says the records have the {layout!r} layout, but layout={wanted!r} was asked for; "
                    f"pass layout={layout!r} (or leave it out)"
                )
        return wanted
    return found[0][1] if found else None


def _size(manifests: Sequence[Manifest], name: str, wanted: Optional[int]) -> Optional[int]:
    values = [(m.path, m.data.get(name)) for m in manifests if name in m.data]
    written = _one(values, name)
    if written is not None and (isinstance(written, bool) or not isinstance(written, int) or written < 1):
        raise RecordFormatError(f"{values[0][0]}: {name} is not a positive integer ({written!r})")
    if wanted is not None and written is not None and written != wanted:
        raise RecordFormatError(
            f"{values[0][0]} says the records were written with {name}={written}, but the reader was asked for "
            f"{name}={wanted}; pass {name}={written} (or leave it out: it is read from the manifest)"
        )
    return wanted if wanted is not None else written  # type: ignore[return-value]


def _first_record(files: Sequence[str]) -> Optional[Tuple[str, dict]]:
    for path in files:
        for batch in iter_record_batches(path, opener=opener_for(path)):
            if len(batch):
                return path, parse_example(batch.payload(0))
    return None


def _described_by_records(files: Sequence[str], layout: Optional[str], seq: Optional[int],
                          pred: Optional[int]) -> Tuple[str, int, int]:
    """Layout and lengths of files no manifest describes: the caller's, else the first record's."""
    if layout is not None and seq is not None and (pred is not None or not is_masked(layout)):
        return layout, seq, pred or 0
    first = _first_record(files)
    if first is None:
        raise RecordFormatError(
            f"{plural(len(files), 'file')} without a data_params.json and without a record: give layout, "
            "max_seq_length and max_predictions_per_seq"
        )
    path, example = first
    found = layout if layout is not None else layout_from_names(example)
    try:
        seq = seq if seq is not None else len(example["input_ids"])
        if pred is None and is_masked(found):  # packed rows have P + K slots
            pred = len(example["masked_lm_positions"]) - _record_pack(found, example)
    except (KeyError, TypeError):
        raise RecordFormatError(
            f"{path}: the first record has the features {sorted(example)}, not those of a BERT pretraining record; "
            "give layout, max_seq_length and max_predictions_per_seq (or point at other records)"
        ) from None
    return found, seq, pred or 0


def _record_pack(layout: str, example: dict) -> int:
    """K of a packed record without a manifest: its NSP slots (MLM-only rows: the default, 3;
    only their P + K total matters to reading them)."""
    if not is_packed(layout):
        return 0
    return len(example["next_sentence_positions"]) if "next_sentence_positions" in example \
        else DEFAULT_SEQUENCES_PER_PACK


def _sequences_per_pack(manifests: Sequence[Manifest], files: Sequence[str]) -> int:
    """K of packed rows: the manifests' ``max_sequences_per_pack`` (one value), else the first
    record's NSP slots."""
    values = [(m.path, sequences_per_pack(m.data)) for m in manifests]
    found = _one(values, "max_sequences_per_pack")
    if found is not None:
        return int(found)  # type: ignore[call-overload]
    first = _first_record(files)
    return _record_pack("nsp_packed", first[1]) if first is not None and "next_sentence_positions" in first[1] \
        else DEFAULT_SEQUENCES_PER_PACK


def resolve(file_pattern: FilePattern, layout: Optional[str] = None, max_seq_length: Optional[int] = None,
            max_predictions_per_seq: Optional[int] = None) -> RecordFiles:
    """The files ``file_pattern`` names and what their records are (see the module docstring).

    Raises :class:`RecordFormatError` when nothing matches, a listed file is missing, a file is
    not a regular file, manifests disagree with each other or with the arguments, or a file
    cannot be counted; :class:`ConfigError` for a URL or an unknown ``layout``."""
    if layout is not None and layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    matches = _matches(file_pattern)
    manifests: List[Manifest] = []
    for _, manifest in matches:
        if manifest is not None and all(m.path != manifest.path for m in manifests):
            manifests.append(manifest)
    files = [path for path, _ in matches]
    for manifest in manifests:  # files named by a glob too: never read another format as TFRecords
        refuse_other_format(manifest.directory, manifest)
    found = _layout(manifests, layout)
    seq = _size(manifests, "max_seq_length", max_seq_length)
    if found == "unmasked":  # no masked_lm_* on disk: the number is the dynamic masking's, any value will do
        pred = max_predictions_per_seq if max_predictions_per_seq is not None else _size(
            manifests, "max_predictions_per_seq", None)
    else:
        pred = _size(manifests, "max_predictions_per_seq", max_predictions_per_seq)
    if found is None or seq is None or (pred is None and is_masked(found)):
        found, seq, pred = _described_by_records(files, found, seq, pred)
    if found not in LAYOUTS:
        raise RecordFormatError(
            f"{files[0]}: the records have the {found!r} layout; bert_data.torch reads the layouts {', '.join(LAYOUTS)}"
        )
    pack = _sequences_per_pack(manifests, files) if is_packed(found) else 0
    records_vocabulary(manifests)  # (one vocabulary, or an error naming them)
    counts, listed_in = _counts(matches)
    separators = tuple(sorted({t for t in (manifest_separator(m).token for m in manifests) if t}))
    return RecordFiles(tuple(files), tuple(counts), tuple(listed_in), found, seq, pred or 0, separators, pack,
                       tuple(manifests))


def layout_features(layout: str, max_seq_length: int, max_predictions_per_seq: int,
                    sequences_per_pack: int = DEFAULT_SEQUENCES_PER_PACK) -> List[Tuple[str, str, int]]:
    """``(name, dtype, length)`` of the layout's features in the order records are written (what
    :func:`~bert_data.format.batch_decode.decode_examples` takes); packed rows have
    ``max_predictions_per_seq + sequences_per_pack`` prediction slots and ``sequences_per_pack``
    NSP slots."""
    return [(f.name, f.dtype, feature_length(f, max_seq_length, max_predictions_per_seq, sequences_per_pack))
            for f in SCHEMAS[layout]]

"""Which files a :class:`~bert_data.torch.PretrainingDataset` reads, how many records each holds,
and what the records are (layout, lengths), without TensorFlow.

The rules are the tf.data reader's (:mod:`bert_data.reader.files`): an output directory stands
for exactly the files its manifest lists (its ``data_params.json``, or the hidden manifests of
BERT-named output files), a listed file that is missing is an error, a file named like a shard
but not listed is named in a warning and not read; a string that is not a directory is a
comma-separated list of globs, each matched in natural order; duplicates are read once; a local
file that is not a regular file is refused (reading a FIFO could block).

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
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConfigError, RecordFormatError, plural
from ..format.batch_decode import iter_record_batches
from ..format.checks import is_masked, layout_from_names
from ..format.example_wire import parse_example
from ..format.manifest import (
    Manifest, directory_reads, listed_count, load_file_manifest, load_manifest, manifest_layout, manifest_separator,
    named_output_manifests,
)
from ..format.schema import SCHEMAS
from ..format.tfrecord import iter_records
from ..output.naming import natural_key, shard_glob
from ..storage import is_remote, require_regular_file

log = logging.getLogger("bert_data")

__all__ = ["FilePattern", "RecordFiles", "resolve", "count_records"]

FilePattern = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]
LAYOUTS = ("nsp", "sop", "mlm_only", "unmasked")


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

    @property
    def total(self) -> int:
        return sum(self.counts)


def _patterns(file_pattern: FilePattern) -> List[str]:
    if isinstance(file_pattern, (str, os.PathLike)):
        text = os.fspath(file_pattern)
        patterns = [text] if os.path.isdir(text) else [p for p in text.split(",") if p.strip()]
    else:
        patterns = [os.fspath(p) for p in file_pattern]
    if not patterns:
        raise ConfigError(f"no TFRecord files: empty file pattern {file_pattern!r}")
    for pattern in patterns:
        if is_remote(pattern.strip()):
            raise ConfigError(
                f"{pattern.strip()}: bert_data.torch reads local files; copy the output directory to local disk "
                "(or read it with bert_data.pretraining_dataset, which reads URLs through tf.io.gfile)"
            )
    return [p.strip() for p in patterns]


class _Manifests:
    """The manifests of each directory, read once (many files of one directory share them)."""

    def __init__(self) -> None:
        self.read: Dict[str, Tuple[Optional[Manifest], List[Tuple[str, Any]]]] = {}

    def of_directory(self, directory: str) -> Tuple[Optional[Manifest], List[Tuple[str, Any]]]:
        key = os.path.abspath(directory)
        if key not in self.read:
            manifest = load_manifest(directory)
            self.read[key] = (manifest, named_output_manifests(directory) if manifest is None else [])
        return self.read[key]

    def of_file(self, path: str) -> Optional[Manifest]:
        manifest, named = self.of_directory(os.path.dirname(os.path.abspath(path)))
        return load_file_manifest(path, manifest, named)


def _directory_files(directory: str, manifests: _Manifests) -> List[str]:
    """The files an output directory stands for (see the module docstring)."""
    manifest, named = manifests.of_directory(directory)
    shard_like = sorted((p for p in glob.glob(os.path.join(glob.escape(directory), shard_glob()))
                         if not os.path.isdir(p)), key=natural_key)
    files, warning = directory_reads(directory, manifest, named, shard_like)
    if warning:
        log.warning("%s", warning)
    return files


def _matches(file_pattern: FilePattern) -> List[Tuple[str, Optional[Manifest]]]:
    """Every file the pattern names, in order, once, with its manifest (None when it has none)."""
    manifests = _Manifests()
    found: List[Tuple[str, Optional[Manifest]]] = []
    seen = set()
    for pattern in _patterns(file_pattern):
        if os.path.isdir(pattern):
            paths = _directory_files(pattern, manifests)
        else:
            paths = sorted((m for m in glob.glob(pattern) if not os.path.isdir(m)), key=natural_key)
            if not paths:
                raise RecordFormatError(f"no TFRecord files match {pattern!r}")
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            require_regular_file(path, RecordFormatError)
            found.append((path, manifests.of_file(path)))
    return found


def count_records(path: str) -> int:
    """The records of a TFRecord file (plain or GZIP), every frame's CRCs checked."""
    return sum(len(batch) for batch in iter_record_batches(path))


def _counts(matches: Sequence[Tuple[str, Optional[Manifest]]]) -> Tuple[List[int], List[str]]:
    counts: List[int] = []
    listed_in: List[str] = []
    for path, manifest in matches:
        count = listed_count(manifest, path)
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


def _layout(manifests: Sequence[Manifest], wanted: Optional[str]) -> Optional[str]:
    found = [(m.path, _manifest_layout(m)) for m in manifests]
    same = [(path, "nsp" if layout == "sop" else layout) for path, layout in found]  # one record layout
    _one(same, "record layout")
    if wanted is not None:
        for path, layout in found:
            if layout != wanted and {layout, wanted} != {"nsp", "sop"}:
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
        for payload in iter_records(path):
            return path, parse_example(payload)
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
        pred = pred if pred is not None or not is_masked(found) else len(example["masked_lm_positions"])
    except (KeyError, TypeError):
        raise RecordFormatError(
            f"{path}: the first record has the features {sorted(example)}, not those of a BERT pretraining record; "
            "give layout, max_seq_length and max_predictions_per_seq (or point at other records)"
        ) from None
    return found, seq, pred or 0


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
    found = _layout(manifests, layout)
    seq = _size(manifests, "max_seq_length", max_seq_length)
    if found == "unmasked":  # no masked_lm_* on disk: the number is the dynamic masking's, any value will do
        pred = max_predictions_per_seq if max_predictions_per_seq is not None else _size(
            manifests, "max_predictions_per_seq", None)
    else:
        pred = _size(manifests, "max_predictions_per_seq", max_predictions_per_seq)
    if found is None or seq is None or (pred is None and is_masked(found)):
        found, seq, pred = _described_by_records(files, found, seq, pred)
    if found not in LAYOUTS:  # e.g. packed rows (--packing): several instances a row, other features
        raise RecordFormatError(
            f"{files[0]}: the records have the {found!r} layout; bert_data.torch reads the layouts "
            f"{', '.join(LAYOUTS)} (write the data without --packing to read it here)"
        )
    counts, listed_in = _counts(matches)
    separators = tuple(sorted({t for t in (manifest_separator(m).token for m in manifests) if t}))
    return RecordFiles(tuple(files), tuple(counts), tuple(listed_in), found, seq, pred or 0, separators)


def layout_features(layout: str, max_seq_length: int, max_predictions_per_seq: int) -> List[Tuple[str, str, int]]:
    """``(name, dtype, length)`` of the layout's features in the order records are written (what
    :func:`~bert_data.format.batch_decode.decode_examples` takes)."""
    lengths = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq, "one": 1}
    return [(f.name, f.dtype, lengths[f.length]) for f in SCHEMAS[layout]]

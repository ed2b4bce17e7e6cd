"""The manifest, ``data_params.json``: what a run wrote, how, and from what. (Over 600 lines on
purpose: every reader, tf.data, PyTorch and inspect, checks files against their manifest by one
rule, so the rules stay together with the manifest.)

Written last, beside the shards, by every runner: it is the commit point of a run (a directory
without it is not a finished output). Readers use it to find the record layout and sizes, and
``inspect_tfrecords`` checks the shards against it.

This module is the manifest's one home: its file name, :func:`build_manifest` (a pure function
of the settings and the run's counters), loading it (:func:`load_manifest`, for every reader),
reading what it says about the records (:func:`manifest_layout`, :func:`manifest_separator`)
and checking it against the shards actually found (:func:`verify_manifest`, and before any
record is read, :func:`size_problem` and :func:`records_vocabulary`).
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import __version__
from ..errors import ConfigError, RecordFormatError, plural
from ..objectives import OBJECTIVE_OF_LAYOUT, layout_of, objective_of
from ..output.journal import unfinished_run
from ..output.naming import (
    MANIFEST_NAME, NAMED_MANIFEST_SUFFIX, TFRECORD_SUFFIX, named_outputs_manifest_path, natural_key, shard_glob,
)
from .checks import is_masked, is_packed_layout, layout_names, layout_specs
from .schema import (
    DEFAULT_SEQUENCES_PER_PACK, SCHEMAS, TOKEN_SEQUENCES, feature_length, schema_description, schema_from_names,
)


def file_sha256(path: str) -> str:
    """sha256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class VocabIdentity:
    """The vocabulary as the manifest records it: where it was named, its content hash and size."""

    path: str  # absolute local path, or the URL as given
    sha256: str
    size: int

    @classmethod
    def of(cls, vocab_file: str, data: bytes, size: int) -> "VocabIdentity":
        """From the vocabulary's bytes (a URL stays as given, a local path becomes absolute)."""
        named = vocab_file if "://" in vocab_file else os.path.abspath(vocab_file)
        return cls(named, hashlib.sha256(data).hexdigest(), size)


class AccountingError(RuntimeError):
    """read != used + skipped: a bug, never a user error (it must not be published)."""


def _by_prefix(stats: Mapping[str, int], prefix: str) -> Dict[str, int]:
    return {key.split(".", 1)[1]: value for key, value in sorted(stats.items()) if key.startswith(prefix)}


def build_manifest(settings: Mapping[str, Any], stats: Counter, per_shard: Dict[str, int], summary,
                   vocab: VocabIdentity, sizes: Optional[Mapping[str, int]] = None) -> Dict[str, Any]:
    """The manifest of a finished run: every setting (``Config.to_json()``), then the counters.

    ``summary`` is the metadata scan's (``entries``, ``duplicate_entries``); ``sizes`` the bytes
    of each file of ``per_shard`` as published (``bytes_per_shard``: what ``--resume`` of a
    finished run compares the files with; the readers count the records). Raises
    :class:`AccountingError` when documents read != used + skipped."""
    skipped = _by_prefix(stats, "skipped.")
    read = stats["documents.read"]
    used = stats["documents.used"]
    manifest = dict(settings)
    seq, pred = settings["max_seq_length"], settings["max_predictions_per_seq"]
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
            "decoded_as": _by_prefix(stats, "decoded_as."),
            "decompressed": _by_prefix(stats, "decompressed."),
            "documents_split": _by_prefix(stats, "documents_split."),  # cut at --max_document_chars or by ranges
            "groups": getattr(summary, "groups", 0),
            "units": stats["units"],
            "paragraph_chunks": stats["paragraph_chunks"],
            "sentences": stats["sentences"],
            "sentences_without_tokens": stats["sentences_without_tokens"],
            "tokens": stats["tokens"],
            "unk_tokens": stats["unk_tokens"],
            "unk_rate": (stats["unk_tokens"] / stats["tokens"]) if stats["tokens"] else 0.0,
            "nsp_negatives_unavailable": stats["nsp_negatives_unavailable"],
            "instances_per_shard": per_shard,
            **({"bytes_per_shard": dict(sizes)} if sizes is not None else {}),
            "vocab_path": vocab.path,
            "vocab_sha256": vocab.sha256,
            "vocab_size": vocab.size,
            "schema": schema_description(seq, pred),
        }
    )
    manifest.update(_objective_fields(settings, stats))  # objective, record_schema, the schema written
    if read != used + sum(skipped.values()):
        raise AccountingError(f"document accounting broke: read {read} != used {used} + skipped {skipped}")
    return manifest


def _objective_fields(settings: Mapping[str, Any], stats: Counter) -> Dict[str, Any]:
    """Manifest keys of the training objective (its row's) and of the input format."""
    out = objective_of(settings).manifest_fields(settings, stats)
    if settings.get("input_format") == "wikiextractor":  # text outside <doc> blocks is not read as documents
        out["wikiextractor_lines_outside_doc"] = stats["wikiextractor_lines_outside_doc"]
    return out


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


class ManifestError(RecordFormatError):
    """A ``data_params.json`` exists but cannot be used (unreadable, not JSON, not an object)."""


@dataclass(frozen=True)
class Manifest:
    """A loaded ``data_params.json``: where it is and its JSON object, as written."""

    path: str
    data: Dict[str, Any]

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    def int_field(self, key: str) -> Optional[int]:
        """``data[key]`` when it is an int (not a bool), else None."""
        value = self.data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


ReadText = Callable[[str], str]


def _read_local_text(path: str) -> str:
    """A local manifest's text; a FIFO, device or directory of that name is an error (reading it
    could block or never end), never taken for "no manifest"."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:  # (FileNotFoundError too): no manifest
        raise FileNotFoundError(path) from None
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # swapped for a FIFO since the stat: no wait
    with open(fd, encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return handle.read()


def named_output_manifests(directory: str) -> List[Tuple[str, Union[Dict[str, Any], str]]]:
    """The hidden manifests of named output files in ``directory`` (:func:`named_outputs_manifest_path`):
    ``(path, its JSON object)``, or ``(path, why it is not one)``."""
    found: List[Tuple[str, Union[Dict[str, Any], str]]] = []
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), ".*" + NAMED_MANIFEST_SUFFIX))):
        try:
            data = json.loads(_read_local_text(path))
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            found.append((path, f"cannot be read as JSON ({exc})"))
            continue
        found.append((path, data if isinstance(data, dict) else "not a JSON object"))
    return found


def load_file_manifest(
    path: str,
    directory_manifest: Optional[Manifest] = None,
    named: Optional[List[Tuple[str, Union[Dict[str, Any], str]]]] = None,
) -> Optional[Manifest]:
    """The manifest describing the record file ``path``: its directory's ``data_params.json``
    when there is one; else the hidden manifest of named output files in its directory whose
    ``output_files`` include it (the one named after ``path`` first). That one is seen as a
    directory manifest would be: its ``instances_per_output_file`` as ``instances_per_shard``,
    keyed by file name, so :func:`verify_manifest` checks the files' record counts against it.
    A caller reading many files passes what it has read of their directory already
    (``directory_manifest``, ``named``: :func:`named_output_manifests`). Raises
    :class:`ManifestError` when the manifest named after ``path`` is damaged."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory_manifest is None:
        directory_manifest = load_manifest(directory)
    if directory_manifest is not None:
        return directory_manifest
    base, own = os.path.basename(path), named_outputs_manifest_path(path)
    entries = named if named is not None else named_output_manifests(directory)
    mine = lambda candidate: os.path.abspath(candidate) == own  # noqa: E731  (however the caller spelled the directory)
    for candidate, data in sorted(entries, key=lambda entry: not mine(entry[0])):
        if isinstance(data, str):
            if mine(candidate):
                raise ManifestError(f"{candidate}: {data}")
            continue
        outputs = data.get("output_files")
        if not isinstance(outputs, list) or base not in {os.path.basename(o) for o in outputs if isinstance(o, str)}:
            continue
        per_file = data.get("instances_per_output_file")
        if isinstance(per_file, dict):
            data = dict(data, instances_per_shard={os.path.basename(k): v for k, v in per_file.items()})
        return Manifest(candidate, data)
    return None


def listed_shard_names(data: Mapping[str, Any], suffix: str = TFRECORD_SUFFIX) -> List[str]:
    """The shard file names a manifest (its JSON object) lists under ``instances_per_shard``
    that a run of ours may have written beside it: plain file names (no directory part) named
    like shards (:func:`~bert_data.output.naming.shard_glob`), in natural order. What
    ``--overwrite`` removes besides the new run's own names; a damaged manifest lists none."""
    per_shard = data.get("instances_per_shard")
    if not isinstance(per_shard, dict):
        return []
    names = [
        name for name in per_shard
        if isinstance(name, str) and name == os.path.basename(name) and name not in ("", ".", "..")
        and fnmatch.fnmatchcase(name, shard_glob(suffix=suffix))
    ]
    return sorted(names, key=natural_key)


@dataclass(frozen=True)
class ListedFiles:
    """The record files the manifests of one directory list: what a reader of that directory
    reads (never every file named like a shard: another run's may be there)."""

    names: List[str]  # file names in the directory, in natural order
    manifests: List[str]  # the manifests listing them

    def unlisted_warning(self, directory: str, shard_like: Sequence[str]) -> Optional[str]:
        """The warning naming the files of ``directory`` named like shards that no manifest lists
        (they are not read), or None when there is none."""
        listed = set(self.names)
        unlisted = [f for f in shard_like if os.path.basename(f) not in listed]
        if not unlisted:
            return None
        one = len(unlisted) == 1
        shown = ", ".join(os.path.basename(f) for f in unlisted[:10])
        more = f" and {len(unlisted) - 10} more" if len(unlisted) > 10 else ""
        return (
            f"{directory}: {plural(len(unlisted), 'file')} named like shards {'is' if one else 'are'} not listed in "
            f"{' or '.join(self.manifests)} and {'was' if one else 'were'} not read: {shown}{more} (left over from "
            "another run? they are not part of this output: move or remove them)"
        )


def listed_files(
    directory: str, manifest: Optional[Manifest], named: Sequence[Tuple[str, Union[Dict[str, Any], str]]] = ()
) -> Optional[ListedFiles]:
    """The files the manifests of ``directory`` list: its ``data_params.json`` (``manifest``: the
    keys of ``instances_per_shard``), else the hidden manifests of BERT-named output files
    there (``named``: :func:`named_output_manifests`; their ``output_files`` that lie in it).
    None when there is no manifest, or when ``data_params.json`` lists no file by name (then
    the caller falls back to every file named like a shard, and checking the manifest says
    what is wrong with it)."""
    if manifest is not None:
        per_shard = manifest.data.get("instances_per_shard")
        if not isinstance(per_shard, dict) or not per_shard:
            return None
        names = {os.path.basename(str(name)) for name in per_shard}
        return ListedFiles(sorted(names, key=natural_key), [manifest.path])
    found: set = set()
    paths: List[str] = []
    real = os.path.realpath(directory)
    for path, data in named:
        outputs = data.get("output_files") if isinstance(data, dict) else None
        mine = [o for o in outputs if isinstance(o, str) and os.path.realpath(os.path.dirname(o) or ".") == real] \
            if isinstance(outputs, list) else []
        if mine:
            found.update(os.path.basename(o) for o in mine)
            paths.append(path)
    return ListedFiles(sorted(found, key=natural_key), paths) if paths else None


def outputs_below(directory: str, verb: str = "inspect") -> str:
    """'; it holds the outputs train and validation (...): inspect DIR/train and DIR/validation'
    when subdirectories of ``directory`` are outputs (a --validation_fraction job's two halves:
    said to a reader given their parent), else ''."""
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.is_dir() and os.path.isfile(
            os.path.join(e.path, MANIFEST_NAME)))
    except OSError:
        return ""
    if not names:
        return ""
    shown = [os.path.join(directory, name) for name in names[:3]]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    why = " (the halves of a --validation_fraction run, each its own dataset)" if names == ["train", "validation"] else ""
    return (f"; it holds the output{'s' if len(names) > 1 else ''} {' and '.join(names[:3])}{more}{why}: {verb} "
            f"{' and '.join(shown)}{more}")


def directory_reads(
    directory: str, manifest: Optional[Manifest], named: Sequence[Tuple[str, Union[Dict[str, Any], str]]],
    shard_like: Sequence[str], exists: Callable[[str], bool] = os.path.exists, unfinished_is_error: bool = True,
) -> Tuple[List[str], Optional[str]]:
    """What a reader of an output directory reads (the tf.data reader and ``bert_data.torch``
    alike): the files its manifests list (:func:`listed_files`), every one of which must exist,
    else every file named like a shard (``shard_like``, found by the caller's file system); and
    the warning naming shard-like files no manifest lists (None when there are none). Raises
    :class:`RecordFormatError` when there is nothing to read or a listed file is missing."""
    refuse_other_format(directory, manifest)
    listed = listed_files(directory, manifest, named)
    if listed is None and manifest is not None:  # (read as every shard-like file, another run's were read too)
        raise RecordFormatError(
            f"{manifest.path} lists no file (its instances_per_shard is missing, empty or not a mapping): it is damaged; "
            "write the output again (rerun the command that made it; create_tfrecords needs --overwrite)"
        )
    if listed is None:
        unfinished = unfinished_run(directory, manifest, named, exists) if unfinished_is_error else None
        if unfinished:
            raise RecordFormatError(unfinished)
        if not shard_like:
            raise RecordFormatError(f"no TFRecord files match {os.path.join(directory, shard_glob())!r}"
                                    f"{outputs_below(directory, 'read') if '://' not in directory else ''}")
        return list(shard_like), None
    files = [os.path.join(directory, name) for name in listed.names]
    for path in files:
        if not exists(path):
            raise RecordFormatError(_not_there(path, listed.manifests[0], directory))
    return files, listed.unlisted_warning(directory, shard_like)


def _not_there(path: str, manifest_path: str, directory: str) -> str:
    """Why a listed file cannot be read: missing, or (a local link: os.path.exists follows it)
    a symbolic link that leads nowhere, a loop or a dangling one, which is not a missing file."""
    if "://" not in path and os.path.islink(path):
        try:
            os.stat(path)
        except OSError as exc:
            return (f"{path} (listed in {manifest_path}) is a symbolic link that cannot be followed ({exc.strerror or exc}): "
                    "point it at the file, or write the output again (create_tfrecords needs --overwrite)")
    return (f"{manifest_path} lists {os.path.basename(path)}, which is missing from {directory}: the output is "
            "incomplete; write it again (rerun the command that made it; create_tfrecords needs --overwrite)")


def output_format(manifest: Optional[Manifest]) -> str:
    """The ``--output_format`` a manifest's run wrote (``tfrecord`` when it does not say)."""
    value = manifest.data.get("output_format", "tfrecord") if manifest is not None else "tfrecord"
    return value if isinstance(value, str) else "tfrecord"


FORMAT_READERS = {
    "parquet": "datasets.load_dataset('parquet', ...) or pyarrow",
    "mds": "streaming.StreamingDataset(local=...)",
    "hdf5": "the pretraining_dataset of NVIDIA's MLPerf run_pretraining.py (packed samples)",
}


def refuse_other_format(directory: str, manifest: Optional[Manifest]) -> None:
    """A TFRecord reader given a directory of another ``--output_format`` says so in one line,
    naming the format's own reader, rather than reading its files as TFRecords."""
    found = output_format(manifest)
    if found != "tfrecord":
        reader = FORMAT_READERS.get(found, "that format's own reader")
        how = (" (docs/packing.md)" if found == "hdf5" else  # (NVIDIA's samples: not rows for our collator)
               " and bert_data.reader.collate.PretrainingCollator (docs/recipes.md, 'Train in PyTorch')")
        raise RecordFormatError(
            f"{directory} holds {found} files (--output_format {found}), not TFRecords: read them with {reader}{how}"
        )


def listed_count(manifest: Optional[Manifest], path: str) -> Optional[int]:
    """The records ``manifest`` says the file ``path`` holds (``instances_per_shard``, keyed by
    file name), or None when it does not list the file with an integer count."""
    per_shard = manifest.data.get("instances_per_shard") if manifest is not None else None
    count = per_shard.get(os.path.basename(path)) if isinstance(per_shard, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def listed_bytes(manifest: Optional[Manifest], path: str) -> Optional[int]:
    """The bytes ``manifest`` says the file ``path`` holds (``bytes_per_shard``, keyed by file
    name), or None when it does not list the file with an integer size."""
    sizes = manifest.data.get("bytes_per_shard") if manifest is not None else None
    listed = sizes.get(os.path.basename(path)) if isinstance(sizes, dict) else None
    return listed if isinstance(listed, int) and not isinstance(listed, bool) else None


def require_listed_size(manifest: Optional[Manifest], path: str) -> None:
    """:func:`size_problem` as the readers' RecordFormatError, with the way on."""
    changed = size_problem(manifest, path) if listed_count(manifest, path) is not None else None
    if changed:
        raise RecordFormatError(f"{changed}; write the output again (create_tfrecords needs --overwrite)")


def refuse_unfinished_globs(paths: Sequence[str], of_directory: Callable[[str], Tuple[Optional[Manifest], Any]]) -> None:
    """A glob's local matches never come from an unfinished run (killed while publishing: some of
    its shards, never all), as its directory is refused (:func:`directory_reads`). ``of_directory``
    gives a directory's ``(manifest, named manifests)``, as the reader has read them."""
    for directory in sorted({os.path.dirname(os.path.abspath(p)) for p in paths if "://" not in p}):
        unfinished = unfinished_run(directory, *of_directory(directory))
        if unfinished:
            raise RecordFormatError(unfinished)


def size_problem(manifest: Optional[Manifest], path: str) -> Optional[str]:
    """Why the local file ``path`` is not the one ``manifest`` lists (its ``bytes_per_shard``:
    another size), or None (the same size, not listed with one, a URL, or not there: said
    elsewhere). A shard swapped for another run's with as many records passes every count and
    record check; its size gives it away for one ``stat``."""
    listed = listed_bytes(manifest, path)
    if listed is None or "://" in path:
        return None
    try:
        actual = os.path.getsize(path)
    except OSError:
        return None
    if actual == listed:
        return None
    return (f"{path} is {actual} bytes where {manifest.path} lists {listed} (bytes_per_shard): it was changed or "
            f"replaced after the run wrote it")


def load_manifest(directory: str, read_text: Optional[ReadText] = None) -> Optional[Manifest]:
    """The ``data_params.json`` of ``directory``, or None when there is none.

    ``read_text(path) -> str`` reads the file; it raises :class:`FileNotFoundError` when there is
    no such file, any other :class:`OSError` when it cannot be read. The default reads local
    files; the tf.data reader passes a ``tf.io.gfile`` reader so that ``gs://`` outputs work
    (this module must not import TensorFlow). Raises :class:`ManifestError` when the file is
    there but unreadable, not JSON or not a JSON object."""
    path = os.path.join(directory, MANIFEST_NAME)
    read = read_text if read_text is not None else _read_local_text
    try:
        data = json.loads(read(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: not a JSON object")
    return Manifest(path, data)


# --------------------------------------------------------------------------------------------
# What it says about the records
# --------------------------------------------------------------------------------------------


def _flag_layout(data: Mapping[str, Any]) -> Optional[str]:
    """The layout the run settings recorded in a manifest write, when all three are there."""
    flags = [data.get(k) for k in ("mlm_only", "sentence_order_prediction", "disable_masking")]
    if not all(isinstance(v, bool) for v in flags):
        return None
    return layout_of(*flags, packing=data.get("packing") is True)


def manifest_layout(manifest: Manifest) -> Tuple[Optional[str], str, Optional[str]]:
    """``(layout, where it came from, problem)`` from a ``data_params.json``: its
    ``record_schema``, else the feature names listed under ``schema``, else the run settings
    (``mlm_only``, ``sentence_order_prediction``, ``disable_masking``). ``layout`` is None when
    the manifest says nothing usable (then the records decide); ``problem`` is set when
    ``record_schema`` is there but is not a known layout."""
    d = manifest.data
    problem = None
    named = d.get("record_schema")
    if named == TOKEN_SEQUENCES:
        raise ManifestError(
            f"{manifest.path}: the records are the Cerebras Model Zoo's SequenceExamples of WordPiece strings "
            f"(--disable_masking --unmasked_format tokens), read by its BertMlmOnlyTfRecordsDynamicMaskProcessor; "
            f"bert_data reads --unmasked_format ids records"
        )
    if named is not None:
        if isinstance(named, str) and named in SCHEMAS:
            return named, f"record_schema in {manifest.path}", None
        problem = f"record_schema is {named!r}, not one of {sorted(SCHEMAS)}"
    schema = d.get("schema")
    if isinstance(schema, dict):
        try:
            layout: Optional[str] = schema_from_names(schema)
        except ValueError:
            layout = None
        if layout is not None:
            if layout == "nsp" and (d.get("sentence_order_prediction") is True or d.get("objective") == "mlm+sop"):
                layout = "sop"  # same features as nsp: the settings tell them apart
            return layout, f"schema in {manifest.path}", problem
    layout = _flag_layout(d)
    if layout is not None:
        return layout, f"run settings in {manifest.path}", problem
    return None, "", problem


@dataclass(frozen=True)
class Separator:
    """What may sit between documents inside MLM-only windows (from ``data_params.json``)."""

    token: Optional[str] = "[SEP]"  # --document_separator_token; None: windows never span documents

    def id(self, tokens: Optional[Sequence[str]]) -> Optional[int]:
        """The separator's id in a vocabulary given as its tokens by id, or None."""
        if tokens is None or self.token is None:
            return None
        try:
            return tokens.index(self.token)
        except ValueError:
            return None


def manifest_separator(manifest: Optional[Manifest]) -> Separator:
    """The document separator of a run's MLM-only windows (the default ``[SEP]`` without a manifest)."""
    if manifest is None:
        return Separator()
    if manifest.data.get("allow_cross_document_examples") is False:
        return Separator(None)
    token = manifest.data.get("document_separator_token")
    return Separator(token if isinstance(token, str) and token else "[SEP]")


# --------------------------------------------------------------------------------------------
# Checking it against the shards
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedShards:
    """What reading (some of) the shards beside a manifest found."""

    record_counts: Mapping[str, int]  # shard file name (basename) -> records read
    compressions: Mapping[str, str] = field(default_factory=dict)  # shard file name -> "gzip" / "none"
    layout: Optional[str] = None  # the layout the records were read as (None: no record read)
    layout_from: str = ""  # where that layout came from, for messages
    seq_length: Optional[int] = None  # input_ids length of the first record that has one
    pred_length: Optional[int] = None  # masked_lm_positions length of the first record that has one
    whole_directory: bool = False  # every shard of the directory was read, so a listed one missing is an error


@dataclass
class ManifestCheck:
    """The outcome of :func:`verify_manifest`."""

    report: Dict[str, Any]  # JSON-able: path, files_checked, n_examples_checked
    problems: List[str] = field(default_factory=list)  # mismatches: the output is not what the manifest says
    warnings: List[str] = field(default_factory=list)


def verify_manifest(manifest: Manifest, observed: ObservedShards) -> ManifestCheck:
    """Check a manifest against the shards read beside it: its sizes, layout, objective and
    schema against the records, ``instances_per_shard``/``n_examples`` against the record
    counts, ``compression`` against the files. Problems are prefixed with the manifest's path."""
    check = ManifestCheck({"path": manifest.path, "files_checked": sorted(observed.record_counts, key=natural_key)})
    problems: List[str] = []
    _check_records_fields(manifest, observed, problems)
    _check_counts(manifest, observed, check, problems)
    check.problems = [f"{manifest.path}: {p}" for p in problems]
    return check


def _check_records_fields(manifest: Manifest, observed: ObservedShards, bad: List[str]) -> None:
    """The fields that describe the records: lengths, layout, objective, run settings, schema."""
    d = manifest.data
    layout = observed.layout
    layout_problem = manifest_layout(manifest)[2]
    if layout_problem:
        bad.append(layout_problem)
    seq, pred = manifest.int_field("max_seq_length"), manifest.int_field("max_predictions_per_seq")
    needs_pred = layout is None or is_masked(layout)
    for key, value in (("max_seq_length", seq), ("max_predictions_per_seq", pred)):
        if (value is None or value < 1) and (key == "max_seq_length" or needs_pred):
            bad.append(f"{key} is missing or not a positive integer ({d.get(key)!r})")
    if seq and observed.seq_length is not None and observed.seq_length != seq:
        bad.append(f"max_seq_length is {seq} but the records' input_ids have {observed.seq_length} values")
    pack = sequences_per_pack(d) if is_packed_layout(layout) else 0
    if pred and is_masked(layout) and observed.pred_length is not None and observed.pred_length != pred + pack:
        bad.append(
            f"max_predictions_per_seq is {pred}" + (f" (+ max_sequences_per_pack {pack}: packed rows)" if pack else "")
            + f" but the records' masked_lm_positions have {observed.pred_length} values"
        )
    if layout is not None:
        objective = d.get("objective")
        if isinstance(objective, str) and objective != OBJECTIVE_OF_LAYOUT[layout]:
            bad.append(
                f"objective is {objective!r} but the records are {layout} records ({OBJECTIVE_OF_LAYOUT[layout]!r})"
            )
        by_flags = _flag_layout(d)
        if by_flags is not None and by_flags != layout:
            bad.append(
                f"the run settings (mlm_only={d.get('mlm_only')}, sentence_order_prediction="
                f"{d.get('sentence_order_prediction')}, disable_masking={d.get('disable_masking')}) write "
                f"{by_flags} records, but the records are {layout} records ({observed.layout_from})"
            )
    schema = d.get("schema")
    if isinstance(schema, dict) and seq and (pred or not needs_pred):
        bad.extend(_schema_problems(schema, layout, seq, pred or 0, sequences_per_pack(d)))


def records_vocabulary(manifests: Sequence[Manifest]) -> Optional[str]:
    """The ``vocab_sha256`` the manifests of a dataset's files record (None when none does);
    :class:`RecordFormatError` when they record two: ids of two vocabularies read as one dataset
    mean nothing (a reader of several outputs refuses them, as it refuses two layouts)."""
    found = [(m.path, m.data.get("vocab_sha256")) for m in manifests if isinstance(m.data.get("vocab_sha256"), str)]
    if len({digest for _, digest in found}) > 1:
        shown = "; ".join(f"{path}: vocab_sha256 {digest[:12]}" for path, digest in found)
        raise RecordFormatError(f"the files were written with different vocabularies ({shown}); read them as separate "
                                f"datasets, or write them again with one --vocab_file")
    return found[0][1] if found else None


def require_records_vocabulary(vocab_file: str, manifests: Sequence[Manifest]) -> None:
    """Dynamic masking's ``vocab_file`` is the vocabulary the records were written with (their
    manifests' ``vocab_sha256``): masked with another, [MASK], random ids and the never-masked
    [CLS]/[SEP] are other ids, silently. ConfigError naming both, else nothing."""
    want = records_vocabulary(manifests)
    if want is None:
        return
    try:
        have = file_sha256(vocab_file)
    except OSError as exc:
        raise ConfigError(f"vocab_file {vocab_file}: {exc.strerror or exc}") from None
    if have != want:
        listed = next((m.data.get("vocab_path") for m in manifests if m.data.get("vocab_sha256") == want), None)
        hint = f" ({listed})" if listed else ""
        raise ConfigError(f"vocab_file {vocab_file} is not the vocabulary the records were written with: their "
                          f"data_params.json records vocab_sha256 {want[:12]}{hint}, this file's is {have[:12]}; mask "
                          f"them with that vocabulary")


def sequences_per_pack(data: Mapping[str, Any]) -> int:
    """``max_sequences_per_pack`` of a packed run's manifest (3, the default, when absent)."""
    value = data.get("max_sequences_per_pack")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_SEQUENCES_PER_PACK


def _schema_problems(schema: Dict[str, Any], layout: Optional[str], seq: int, pred: int,
                     pack: int = DEFAULT_SEQUENCES_PER_PACK) -> List[str]:
    """What is wrong with the manifest's ``schema`` description for records of ``layout``."""
    if layout is None:
        try:
            schema_from_names(schema)
        except ValueError as exc:
            return [f"schema: {exc}"]
        return []
    if sorted(schema) != sorted(layout_names(layout)):
        return [f"schema lists features {sorted(schema)}, expected the {layout} features {sorted(layout_names(layout))}"]
    problems = []
    for spec in layout_specs(layout):
        entry = schema[spec.name] if isinstance(schema[spec.name], dict) else {}
        want = feature_length(spec, seq, pred, pack)
        if entry.get("dtype") != spec.dtype or entry.get("length") != want:
            problems.append(
                f"schema entry {spec.name} is {entry.get('dtype')}[{entry.get('length')}], expected {spec.dtype}[{want}]"
            )
    return problems


def _check_counts(manifest: Manifest, observed: ObservedShards, check: ManifestCheck, bad: List[str]) -> None:
    """``instances_per_shard``, ``n_examples`` and ``compression`` against the shards read."""
    d = manifest.data
    counts = observed.record_counts
    per_shard = d.get("instances_per_shard")
    n_examples = manifest.int_field("n_examples")
    if not isinstance(per_shard, dict):
        bad.append("instances_per_shard is missing")
        per_shard = {}
    for base, count in sorted(counts.items(), key=lambda kv: natural_key(kv[0])):
        listed = per_shard.get(base)
        if base not in per_shard:
            check.warnings.append(f"{os.path.join(manifest.directory, base)} is not listed in {manifest.path}")
        elif not isinstance(listed, int) or isinstance(listed, bool):  # ("228" said "holds 228 records, it holds 228")
            bad.append(f"instances_per_shard lists {base} with {listed!r}, not a record count ({count} records)")
        elif per_shard[base] != count:
            bad.append(f"instances_per_shard says {base} holds {per_shard[base]} records, it holds {count}")
        changed = size_problem(manifest, os.path.join(manifest.directory, base)) if base in per_shard else None
        if changed:
            bad.append(changed.replace(f" where {manifest.path} lists ", " where it lists "))
    listed = set(per_shard)
    inspected = listed & set(counts)
    if n_examples is None:
        bad.append(f"n_examples is missing or not an integer ({d.get('n_examples')!r})")
    elif per_shard and all(isinstance(v, int) for v in per_shard.values()) and sum(per_shard.values()) != n_examples:
        bad.append(f"n_examples is {n_examples} but instances_per_shard sums to {sum(per_shard.values())}")
    missing = sorted(listed - inspected, key=natural_key)
    if not missing and n_examples is not None:
        total = sum(counts[b] for b in inspected)
        if total != n_examples:
            bad.append(f"n_examples is {n_examples}, the {plural(len(inspected), 'shard')} hold {total} records")
        check.report["n_examples_checked"] = True
    else:
        check.report["n_examples_checked"] = False
        if observed.whole_directory:
            for base in missing:
                bad.append(f"lists {base}, which is missing from {manifest.directory}")
        elif missing:
            check.warnings.append(
                f"{manifest.path}: n_examples not checked ({len(inspected)} of {len(listed)} listed shards inspected)"
            )
    compression = d.get("compression")
    if compression in ("none", "gzip"):
        for base, found in sorted(observed.compressions.items()):
            if found != compression:
                bad.append(f"compression is {compression!r} but {base} is {found!r}")

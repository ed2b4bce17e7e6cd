"""What ``inspect_tfrecords`` inspects: the files, the directory each lies in, the vocabulary.

* :func:`resolve_inputs`: the files named by PATH arguments (files, globs, output directories:
  exactly the files a directory's manifest lists, :func:`directory_files`), regular files only
  (a FIFO would block, a device never end);
* :class:`Group`: one directory's files: its ``data_params.json`` (if any), the record layout
  and lengths they are checked against, and what reading them found;
* :class:`VocabInfo`: the vocabulary ids are decoded with, loaded by the writer's own strict
  :func:`bert_data.tokenization.load_vocab`, so a vocabulary the writer refuses is refused here.
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..format.checks import is_masked, layout_from_names
from ..format.manifest import (
    Manifest,
    ObservedShards,
    Separator,
    file_sha256,
    load_file_manifest,
    listed_files,
    load_manifest,
    manifest_layout,
    named_output_manifests,
    manifest_separator,
    outputs_below,
    refuse_unfinished_globs,
    sequences_per_pack,
)
from ..errors import RecordFormatError
from ..output.journal import unfinished_run
from ..format.schema import DEFAULT_SEQUENCES_PER_PACK
from ..format.tfrecord import tfrecord_compression
from ..output.naming import natural_key, shard_glob
from ..storage import file_identity, require_regular_file
from . import InspectError

__all__ = [
    "InputFile",
    "resolve_inputs",
    "directory_files",
    "detect_compression",
    "file_directory",
    "VocabInfo",
    "load_vocab_info",
    "manifest_vocab_path",
    "vocab_differs",
    "names_source",
    "Group",
    "Groups",
]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


@dataclass
class InputFile:
    path: str
    dir_given: bool  # found by listing a directory PATH


def _regular(path: str, where: str = "") -> str:
    """``path``, or :class:`InspectError` (exit 2) when it is not a regular file."""
    require_regular_file(path, InspectError, where)
    return path


def _shard_like(directory: str) -> List[str]:
    """The entries of ``directory`` named like shards (:func:`~bert_data.output.naming.shard_glob`),
    in natural order; sub-directories so named are left out."""
    found = glob.glob(os.path.join(glob.escape(directory), shard_glob()))
    return sorted((f for f in found if not os.path.isdir(f)), key=natural_key)


def directory_files(directory: str, notes: Optional[List[str]] = None) -> List[str]:
    """The record files an output directory holds: exactly those its manifest lists (its
    ``data_params.json``, else the hidden manifests of BERT-named output files there:
    :func:`~bert_data.format.manifest.listed_files`), in natural order, so shards left over from
    another run are never read as data; every file named like a shard when there is no
    manifest. Listed files that are missing are left out (checking the directory against its
    manifest reports them); files named like shards that no manifest lists are named in a
    warning added to ``notes``. Raises :class:`InspectError` for a file to read that is not a
    regular file (a FIFO would block)."""
    manifest = load_manifest(directory)
    named = () if manifest is not None else named_output_manifests(directory)
    listed = listed_files(directory, manifest, named)
    shard_like = _shard_like(directory)
    if listed is None:
        unfinished = unfinished_run(directory, manifest, named)  # its shards are some of an output, never all
        if unfinished:
            raise InspectError(unfinished)
        return [_regular(f, " (in an output directory)") for f in shard_like]
    files = []
    for name in listed.names:
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            files.append(_regular(path, f" (listed in {listed.manifests[0]})"))
    warning = listed.unlisted_warning(directory, shard_like)
    if warning and notes is not None:
        notes.append(warning)
    return files


def _manifests_of(directory: str):
    manifest = load_manifest(directory)
    return manifest, (named_output_manifests(directory) if manifest is None else ())


def resolve_inputs(paths: Sequence[str], notes: Optional[List[str]] = None) -> Tuple[List[InputFile], List[str]]:
    """Files to read (in order, without duplicates) and the directories given as PATH.

    A directory stands for the files its manifest lists (:func:`directory_files`; warnings about
    files it holds but does not list go to ``notes``); a glob for the regular files it matches.
    A PATH or a match that is not a regular file (a FIFO, a socket, a device) is an
    :class:`InspectError`: reading it could block or never end."""
    files: List[InputFile] = []
    dirs: List[str] = []
    seen = set()
    for p in paths:
        if os.path.isdir(p):
            found = directory_files(p, notes)
            if not found:
                raise InspectError(f"{p}: directory holds no {shard_glob()} files{outputs_below(p)}")
            dirs.append(os.path.realpath(p))
            from_dir = True
        elif os.path.exists(p):
            found, from_dir = [_regular(p)], False
        elif glob.has_magic(p):
            found = sorted((f for f in glob.glob(p) if not os.path.isdir(f)), key=natural_key)
            if not found:
                raise InspectError(f"{p}: no file matches")
            found = [_regular(f, f" (matched by {p})") for f in found]
            try:
                refuse_unfinished_globs(found, _manifests_of)
            except RecordFormatError as exc:
                raise InspectError(str(exc)) from None
            from_dir = False
        else:
            raise InspectError(f"{p}: no such file or directory")
        for f in found:
            real = file_identity(f)
            if real in seen:
                continue
            seen.add(real)
            files.append(InputFile(f, from_dir))
    return files, dirs


def detect_compression(path: str) -> str:
    """``"gzip"`` or ``"none"`` (:func:`bert_data.format.tfrecord.tfrecord_compression`). The file
    is opened without waiting (had it become a FIFO since it was listed, the open must not block)
    and must be a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise InspectError(f"{path} is not a regular file; give TFRecord files")
            head = handle.read(12)
    except OSError as exc:
        raise InspectError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return tfrecord_compression(head)


def file_directory(path: str) -> str:
    """The real directory of a file: files reached by different paths share one :class:`Group`."""
    return os.path.realpath(os.path.dirname(os.path.abspath(path)))


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


@dataclass
class VocabInfo:
    path: str
    tokens: List[str]  # by id
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @property
    def size(self) -> int:
        return len(self.tokens)

    def token(self, i: int) -> str:
        return self.tokens[i] if 0 <= i < len(self.tokens) else f"<id {i}>"


def load_vocab_info(path: str) -> VocabInfo:
    """Raises :class:`bert_data.errors.VocabError` (exit 2) for a file the writer would refuse."""
    from ..tokenization import load_vocab, vocab_tokens  # lazily: keeps the CLI's startup light

    vocab = load_vocab(path)
    return VocabInfo(
        path, vocab_tokens(vocab), vocab["[PAD]"], vocab["[UNK]"], vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
    )


def manifest_vocab_path(manifest: Manifest) -> Optional[str]:
    """The manifest's vocab_file, as given if it exists, else relative to the manifest's directory."""
    value = manifest.data.get("vocab_file")
    if not isinstance(value, str) or not value:
        return None
    if os.path.isfile(value) or os.path.isabs(value):
        return value
    beside = os.path.join(manifest.directory, value)
    return beside if os.path.isfile(beside) else value


def vocab_differs(vocab: VocabInfo, manifest: Optional[Manifest]) -> bool:
    """True when the manifest records another vocabulary (its ``vocab_sha256``) than ``vocab``:
    decoded tokens and [UNK]/[MASK] statistics may then be wrong."""
    want = manifest.data.get("vocab_sha256") if manifest else None
    return isinstance(want, str) and want != file_sha256(vocab.path)


# --------------------------------------------------------------------------------------------
# Directories
# --------------------------------------------------------------------------------------------


def names_source(layout: str, where: str) -> str:
    """Where a layout learnt from a record's feature names came from, for the report."""
    text = f"feature names of the first record of {where}"
    if layout == "nsp":
        text += " (sop records have the same features: without data_params.json they are reported as nsp)"
    return text


@dataclass
class Group:
    """Files of one directory: the manifest there, if any, the layout and the expected lengths,
    and (``--stats``) what reading them found."""

    directory: str
    manifest: Optional[Manifest]
    seq: Optional[int] = None
    pred: Optional[int] = None
    lengths_from: str = ""
    layout: Optional[str] = None  # a key of SCHEMAS; None until known
    layout_from: str = ""
    separator: Separator = field(default_factory=Separator)
    observed_seq: Optional[int] = None  # input_ids length of the first record that has one
    observed_pred: Optional[int] = None  # masked_lm_positions length of the first record that has one
    counts: Dict[str, int] = field(default_factory=dict)  # file basename -> records
    compressions: Dict[str, str] = field(default_factory=dict)
    dir_given: bool = False

    @classmethod
    def with_manifest(cls, directory: str, manifest: Optional[Manifest], dir_given: bool = False) -> "Group":
        group = cls(directory, manifest, dir_given=dir_given)
        m = group.manifest
        if m is not None:
            group.layout, group.layout_from, _ = manifest_layout(m)  # a bad record_schema: verify_manifest
            group.separator = manifest_separator(m)
            seq, pred = m.int_field("max_seq_length"), m.int_field("max_predictions_per_seq")
            if seq and seq > 0:
                group.seq, group.lengths_from = seq, m.path
            if pred and pred > 0:
                group.pred = pred
        return group

    def ready(self) -> bool:
        """True once what a record is checked against (layout, lengths) is known: learning from
        further records can then only fill in ``observed_seq``/``observed_pred``."""
        if self.layout is None or self.seq is None:
            return False
        return self.pred is not None or not is_masked(self.layout)

    def snapshot(self) -> "Group":
        """A copy to read one more file with (in another process), without what was observed
        so far: it reports what that file alone shows (:attr:`observed_seq`/``_pred``, counts)."""
        return replace(self, observed_seq=None, observed_pred=None, counts={}, compressions={})

    def learn_layout(self, example: Dict[str, Any], source: str) -> str:
        """The layout, from the first record's feature names when the manifest left it open."""
        if self.layout is None:
            self.layout = layout_from_names(example)
            self.layout_from = names_source(self.layout, source)
        return self.layout

    def learn(self, where: str, example: Dict[str, Any]) -> None:
        """Layout and lengths from a decoded record, for whatever the manifest left open."""
        source = where.rsplit(" record ", 1)[0]
        self.learn_layout(example, source)
        ids, positions = example.get("input_ids"), example.get("masked_lm_positions")
        if isinstance(ids, np.ndarray):
            if self.observed_seq is None:
                self.observed_seq = len(ids)
            if self.seq is None:
                self.seq = len(ids)
                self.lengths_from = f"first record of {source}"
        if isinstance(positions, np.ndarray):
            if self.observed_pred is None:
                self.observed_pred = len(positions)
            if self.pred is None:
                self.pred = len(positions)

    def observed(self) -> ObservedShards:
        """What reading the files found, to verify the manifest against."""
        return ObservedShards(
            record_counts=dict(self.counts),
            compressions=dict(self.compressions),
            layout=self.layout,
            layout_from=self.layout_from,
            seq_length=self.observed_seq,
            pred_length=self.observed_pred,
            whole_directory=self.dir_given,
        )



def group_pack(group: "Group") -> int:
    """``max_sequences_per_pack`` of a directory's packed records (its manifest's; else 3)."""
    manifest = getattr(group, "manifest", None)
    return sequences_per_pack(manifest.data) if manifest is not None else DEFAULT_SEQUENCES_PER_PACK


class Groups:
    """The :class:`Group` of each record file, made on first use: one per manifest that describes
    files (a directory's ``data_params.json``, or the hidden manifest of named output files that
    ``create_pretraining_data`` writes beside them: :func:`load_file_manifest`), and one per
    directory without either. Each directory's ``data_params.json`` is read once."""

    def __init__(self, dirs_given: Sequence[str] = ()) -> None:
        self.dirs_given = set(dirs_given)
        self.by_key: Dict[str, Group] = {}
        self._read: Dict[str, Tuple[Optional[Manifest], Any]] = {}  # directory -> its manifests, read once

    def of(self, path: str) -> Group:
        directory = file_directory(path)
        if directory not in self._read:
            found = load_manifest(directory)
            self._read[directory] = (found, None if found is not None else named_output_manifests(directory))
        manifest = load_file_manifest(path, *self._read[directory])
        key = manifest.path if manifest is not None else directory
        group = self.by_key.get(key)
        if group is None:
            group = self.by_key[key] = Group.with_manifest(directory, manifest, dir_given=directory in self.dirs_given)
        return group

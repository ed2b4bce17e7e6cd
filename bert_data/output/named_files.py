"""Named output files: google-research/bert's ``--output_file a,b,c`` contract.

BERT's ``create_pretraining_data.py`` writes its instances round-robin into the files it is
given. A run deals each pass round-robin over ``num_output_files`` shards; here shard ``i``
becomes output file ``i``:

* the run happens in a *staging directory* beside the first output file, ``DIR/.NAME.bert_data/``
  (names: :mod:`bert_data.output.naming`), as a :class:`~bert_data.output.local_dir.LocalDirOutput`
  with its lock, journal and atomic assembly, and the list of input files as its metadata;
* when the run is committed (:meth:`NamedFilesOutput.commit`), each shard is renamed onto its
  output file (copied then renamed when that file is on another file system), replacing a
  previous file of that name as BERT does; the manifest is then written beside the first output
  file, ``DIR/.NAME.data_params.json`` (hidden, so that ``run_pretraining.py
  --input_file=DIR/NAME*`` never matches it), and the staging directory is removed.

Every step is idempotent: a run killed while publishing is finished by ``--resume``.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..config import output_settings
from ..errors import ConfigError, OutputError, ResumeError
from ..faults import crash_point
from ..format.containers import require_tfrecord_shards
from ..format.manifest import named_output_manifests
from ..identity import documents_fingerprint
from ..objectives import OBJECTIVES
from ..identity import refuse_writing_over_inputs
from ..storage import write_json_atomically
from .journal import check_published_files, check_same_inputs, read_journal
from .local_dir import LocalDirOutput
from .naming import MANIFEST_NAME, NAMED_MANIFEST_SUFFIX, WORK_DIR_NAME, named_outputs_manifest_path, staging_dir

INPUT_LIST_NAME = "input_files.txt"  # the expanded --input_file, as the runner's metadata file
SHARD_NAME = "examples"  # shard prefix inside the staging directory
MAX_FILE_NAME_BYTES = 255


@dataclass(frozen=True)
class NamedFiles:
    """Where a BERT-style run's shards go: the ``--output_file`` list, in order, and what the
    published manifest adds to the run's (the tool's own flags and input files)."""

    outputs: Sequence[str]
    extra_manifest: Mapping[str, Any] = field(default_factory=dict)

    @property
    def manifest_path(self) -> str:
        return named_outputs_manifest_path(self.outputs[0])


def expand_input_patterns(value: str, flag: str = "--input_file") -> List[str]:
    """BERT's ``--input_file``: a comma-separated list of glob patterns, each expanded in the order
    given (its matches sorted), as ``input_files.extend(tf.gfile.Glob(pattern))`` does. Empty
    items (a trailing comma) are ignored; a pattern that matches nothing is an error here (BERT
    would silently read nothing from it). Duplicates are kept: BERT reads such a file twice."""
    patterns = [p for p in value.split(",") if p.strip()]
    if not patterns:
        raise ConfigError(f"{flag} is empty: give a text file, a glob or a comma-separated list of them")
    files: List[str] = []
    for pattern in patterns:
        if "://" in pattern:
            raise ConfigError(
                f"{flag} {pattern}: URLs are not read by create_pretraining_data; copy the files locally, or use "
                "create_tfrecords --runner beam"
            )
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else ([pattern] if os.path.lexists(pattern) else [])
        if not matches:
            what = "matches no file" if glob.has_magic(pattern) else "does not exist"
            raise ConfigError(f"{flag} {pattern} {what}; check the path (patterns are relative to {os.getcwd()})")
        files.extend(matches)
    for path in files:
        _check_listable(path, flag)
    return [os.path.abspath(path) for path in files]


def _check_listable(path: str, flag: str) -> None:
    """A path the runner's file list (one path per line) can carry unchanged."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{flag}: the file name {path!r} is not UTF-8; rename the file") from None
    if any(c in path for c in "\n\r") or path != path.strip():
        raise ConfigError(f"{flag}: the file name {path!r} has a line break or surrounding blanks; rename the file")


def check_output_files(
    value: str, inputs: Sequence[str], vocab_file: str, flag: str = "--output_file", flagfiles: Sequence[str] = ()
) -> List[str]:
    """BERT's ``--output_file`` (one path or a comma-separated list) as absolute paths, refused with
    one line when an entry is empty, a URL, a directory, inside a file, repeated, or too long a
    name for the staging directory and manifest beside it; and when it, the manifest or the
    staging directory beside it names a file the run reads (an input, the vocabulary, a
    ``--flagfile``: :func:`bert_data.identity.refuse_writing_over_inputs`, hard links too)."""
    entries = value.split(",")
    if not value or any(not entry.strip() for entry in entries):
        raise ConfigError(f"{flag} {value!r} has an empty entry; give one file or a comma-separated list of files")
    protected = [("an input file", p) for p in inputs] + [("--vocab_file", vocab_file)]
    protected += [("a --flagfile", p) for p in flagfiles]
    seen: Dict[str, int] = {}
    outputs: List[str] = []
    for position, entry in enumerate(entries, start=1):
        if "://" in entry:
            raise ConfigError(f"{flag} {entry}: URLs are not written by create_pretraining_data; write locally, then copy")
        if entry.endswith(os.sep) or os.path.isdir(entry):
            raise ConfigError(f"{flag} {entry} is a directory; name the TFRecord file to write")
        path = os.path.abspath(entry)
        real = os.path.realpath(path)
        if real in seen:
            raise ConfigError(f"{flag}: {entry} is given twice (entries {seen[real]} and {position}); name each file once")
        refuse_writing_over_inputs(f"{flag}", [entry], protected, "name another output file")
        seen[real] = position
        _check_parent(path, entry, flag)
        outputs.append(path)
    longest = f".{os.path.basename(outputs[0])}{NAMED_MANIFEST_SUFFIX}.tmp"
    if len(longest.encode("utf-8", "surrogateescape")) > MAX_FILE_NAME_BYTES:
        raise ConfigError(f"{flag} {entries[0]}: the file name is too long for the manifest beside it; shorten it")
    beside, staging = named_outputs_manifest_path(outputs[0]), staging_dir(outputs[0])
    refuse_writing_over_inputs(f"the manifest beside {flag}", [beside], protected, "name another output file")
    for what, path in protected:  # the staging directory is removed when the run is published
        if os.path.realpath(path).startswith(os.path.realpath(staging) + os.sep):
            raise OutputError(
                f"{what} {path} is inside {staging}, the work directory of {flag} {entries[0]}, which the run removes; "
                "move it elsewhere"
            )
    return outputs


def _check_parent(path: str, entry: str, flag: str) -> None:
    """The directory of an output file is one (or can be made): a missing one is created."""
    probe = os.path.dirname(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(f"{flag} {entry}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {entry}: the directory {probe} is not writable")


def write_input_list(staging: str, files: Sequence[str]) -> str:
    """The expanded input files as the runner's metadata file (one absolute path per line) in the
    staging directory; its content is what ``--resume`` fingerprints."""
    try:
        os.makedirs(staging, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the work directory {staging} ({exc.strerror})") from None
    path = os.path.join(staging, INPUT_LIST_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{name}\n" for name in files)
    os.replace(tmp, path)
    return path


def already_published(config, named: NamedFiles) -> Optional[Dict]:
    """``--resume`` of a run whose staging directory is gone (or holds no run any more): its
    published manifest (checked to be this run's), or None when there is a staging run to resume. Raises
    :class:`ResumeError` when there is neither."""
    staging, beside = config.output_dir, named.manifest_path
    if not config.resume or leftover_work(staging):  # (a staging directory without its run: the publish had
        return None  # moved the files and written the manifest beside them, and was killed removing it)
    if not os.path.isfile(beside):
        raise ResumeError(f"--resume: no interrupted run for {named.outputs[0]} (nothing to continue); run without --resume")
    try:
        manifest = read_journal(beside)
    except ResumeError:
        raise ResumeError(f"--resume: {beside} cannot be read as a manifest; run again without --resume") from None
    check_published_files(output_settings(config), manifest, named.outputs, named.outputs[0])
    _check_same_documents(config, named, manifest, beside)
    missing = [out for out in named.outputs if not os.path.isfile(out)]
    if missing:
        raise ResumeError(f"--resume: {missing[0]} is missing; run again without --resume")
    shutil.rmtree(staging, ignore_errors=True)  # what a kill while removing it left (it holds no run: leftover_work)
    return dict(manifest, already_complete=True)


def _check_same_documents(config, named: NamedFiles, manifest: Mapping, beside: str) -> None:
    """A finished run is this run only while its documents are the ones it read: the same
    ``--input_file`` list, and each file's size and modification time as its scan recorded them
    (what a resumed unfinished run checks, :func:`~bert_data.output.journal.check_same_inputs`)."""
    files = list(named.extra_manifest.get("create_pretraining_data", {}).get("input_files", []))
    published = manifest.get("create_pretraining_data")
    if isinstance(published, dict) and list(published.get("input_files") or []) != files:
        raise ResumeError(f"--resume: --input_file matches other files than {named.outputs[0]} was made from; "
                          "run again without --resume")
    listed = config.metadata_files[0]  # the staging run's list of the input files, as its scan named them
    documents, newest = documents_fingerprint((path, f"{listed}:{n}") for n, path in enumerate(files, start=1))
    previous = manifest.get("inputs")
    keys = ("documents_sha256", "newest_document")
    recorded = {k: previous[k] for k in keys if k in previous} if isinstance(previous, dict) else previous
    check_same_inputs(dict(zip(keys, (documents, newest))), recorded, beside)


class NamedFilesOutput(LocalDirOutput):
    """A local run in the staging directory whose commit moves the shards onto the named files."""

    publishes_in_place = False  # (a finished staging run's shards may have moved: finished_manifest checks)

    def __init__(self, config, container, named: NamedFiles) -> None:
        require_tfrecord_shards(container, "--output_file (google-research/bert's named output files)")
        super().__init__(config, container)
        self.named = named

    def commit(self, manifest: Mapping) -> Dict:
        super().commit(manifest)  # the staging run is complete: a kill from here on is finished by --resume
        return self._publish_named(manifest)

    def finished_manifest(self) -> Dict:
        """The staging run is complete (a kill while moving its files): finish publishing."""
        manifest = super().finished_manifest()
        return self._publish_named(manifest)

    def _publish_named(self, manifest: Mapping) -> Dict:
        outputs, beside, staging = self.named.outputs, self.named.manifest_path, self.output_dir
        _remove(beside)  # an older manifest must not describe the files being replaced
        disown_replaced(outputs, beside)  # (nor another run's that lists some of them)
        for index, (shard, target) in enumerate(zip(self.shard_names, outputs)):
            source = os.path.join(staging, shard)
            if os.path.lexists(source):
                _move(source, target)
                crash_point("moved", index)  # test hook: killed between two output files
            elif not os.path.isfile(target):  # moved by a publish that was killed after it: fine
                raise OutputError(f"{source} is missing: the run's output was removed; run again without --resume")
        published = dict(manifest, output_dir=os.path.dirname(outputs[0]), **self.named.extra_manifest)
        per_shard = manifest.get("instances_per_shard", {})
        published["output_files"] = list(outputs)
        published["instances_per_output_file"] = {out: per_shard.get(name, 0) for name, out in zip(self.shard_names, outputs)}
        write_json_atomically(beside, published)
        shutil.rmtree(staging, ignore_errors=True)
        return published


REPLACED_KEY = "output_files_replaced_later"  # what a later run replaced, in a manifest that listed it


def disown_replaced(outputs: Sequence[str], own_manifest: str) -> None:
    """Every other run's hidden manifest in the outputs' directories (:func:`named_output_manifests`)
    that lists one of ``outputs`` (by file name, as the readers match them) stops listing it: its
    ``output_files``, ``instances_per_output_file`` and ``n_examples`` keep only its own files, the
    replaced ones are named under :data:`REPLACED_KEY`, and a manifest left with no file goes.
    Why: run 1 wrote a,b; run 2 wrote b,c. Run 1's manifest still listed b with run 1's counts,
    so inspect of the directory called run 2's b "missing" from run 1, and a reader of run 1's
    files read run 2's b as run 1's. Done before the files move: a kill in between leaves a
    manifest listing fewer files, never one describing another run's."""
    by_directory: Dict[str, set] = {}
    for target in outputs:
        by_directory.setdefault(os.path.dirname(os.path.abspath(target)), set()).add(os.path.basename(target))
    for directory, names in by_directory.items():
        for path, data in named_output_manifests(directory):
            listed = data.get("output_files") if isinstance(data, dict) else None
            if os.path.abspath(path) == os.path.abspath(own_manifest) or not isinstance(listed, list):
                continue
            replaced = [o for o in listed if isinstance(o, str) and os.path.basename(o) in names]
            kept = [o for o in listed if o not in replaced]
            if not replaced:
                continue
            if not kept:
                _remove(path)
                continue
            per_file = data.get("instances_per_output_file")
            per_file = per_file if isinstance(per_file, dict) else {}
            amended = dict(data, output_files=kept, instances_per_output_file={
                k: v for k, v in per_file.items() if k not in replaced})
            gone = [per_file.get(o) for o in replaced]
            if isinstance(data.get("n_examples"), int) and all(isinstance(n, int) for n in gone):
                amended["n_examples"] = data["n_examples"] - sum(gone)
            for counter in _PASS_COUNTERS:  # (the run's tallies of its instances: the files kept hold some of them)
                amended.pop(counter, None)
            amended[REPLACED_KEY] = list(data.get(REPLACED_KEY) or []) + replaced
            write_json_atomically(path, amended)


_PASS_COUNTERS = frozenset(name for row in OBJECTIVES.values() for name in row.pass_counters)


def _move(source: str, target: str) -> None:
    """Rename ``source`` onto ``target`` (replacing it); across file systems, copy to a temporary
    name beside ``target`` and rename that, so ``target`` is never seen half written."""
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.replace(source, target)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        tmp = f"{target}.bert_data.partial"
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
        os.unlink(source)
    except OSError as exc:
        raise OutputError(f"cannot write {target} ({exc.strerror or exc}); fix it and continue with --resume") from None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise OutputError(f"cannot replace {path} ({exc.strerror})") from None


def leftover_work(staging: str) -> bool:
    """True when the staging directory holds an interrupted run (for the tool's hint)."""
    return os.path.isdir(os.path.join(staging, WORK_DIR_NAME)) or os.path.isfile(os.path.join(staging, MANIFEST_NAME))

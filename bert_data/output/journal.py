"""Resume's one home: every read of a run's journal and every "is this the same run?" check.

A run records what it is before it writes anything (``run.json``: its settings and the
fingerprints of its inputs), and what it has done after each group (a local output's
``progress.json``; a URL output's ``index/gNNNNNNNNN.json`` objects). A finished run's manifest
holds the same settings and fingerprints. ``--resume`` continues only when every input that
shapes the bytes is unchanged, for every output kind alike:

* :func:`read_journal` reads any of these files, local or behind a URL, guarded the same way (a
  regular file of a sane size, UTF-8 JSON, an object), so a damaged one is one line naming it;
* :func:`check_same_run` compares the interrupted (or finished) run with this one: the inputs
  first, each change named (the vocabulary, the metadata, the segmenter, ...), then the
  settings, each flag that differs named with both values;
* :func:`resume_point` decides, from the files a previous run left, whether there is a run to
  continue (its ``run.json``), a finished one (its manifest), or nothing;
* :func:`check_progress` and :func:`load_index` read the per-group journals.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Mapping, Optional, Sequence

from .. import storage
from ..config import LEFT_OUT_AT_DEFAULT
from ..errors import RecordFormatError, ResumeError
from ..identity import newest_described, newest_mtime
from .naming import MANIFEST_NAME, PARTIAL_SUFFIX, RUN_FILE, WORK_DIR_NAME, index_group, shard_file_names

MAX_JOURNAL_BYTES = 64 << 20  # run.json and progress.json are a few KB (~30 bytes a shard)
_INDEX_THREADS = 16

# What a change of each input fingerprint means, in the user's words.
INPUT_CHANGES = {
    "metadata_sha256": "the metadata files' content changed",
    "documents_sha256": "a listed document's size or modification time changed",
    "vocab_sha256": "--vocab_file's content changed",
    "segmenter": "the sentence segmenter (spaCy or its model) changed",
    "tokenizers": "the tokenizers library changed",
    "bert_data_version": "bert_data's version changed",
    "runs_encoding": "what the workers write for --output_format changed (another bert_data made the interrupted run: "
                     "resume it with that one)",
}


def damaged(path: str, what: str) -> ResumeError:
    return ResumeError(
        f"--resume: {path} is damaged ({what}); start over with --overwrite (the interrupted run cannot be continued)"
    )


def read_journal(path: str) -> Dict:
    """A journal file (``run.json``, ``progress.json``, an index entry, a manifest read for
    resume) as a JSON object, or one line saying it is damaged. A local file is opened only when
    it is a regular file (a FIFO put there would block the open) of a sane size."""
    return read_json_object(path)


#: What a JSON reader raises for a file it cannot use: ``(path, what is wrong) -> exception``.
Refusal = Callable[[str, str], Exception]


def read_json_object(path: str, refuse: Refusal = damaged, follow_links: bool = False,
                     on_bytes: Optional[Callable[[bytes], None]] = None) -> Dict:
    """The one reader of the small JSON files bert_data writes and reads back (journals, the
    token cache's manifest and sidecars): a JSON object, or ``refuse(path, what)`` raised, never a
    hang on a FIFO or device, never a whole huge file read, never a traceback on bytes that are
    not UTF-8 or nested too deeply. ``follow_links``: a symbolic link to a regular file is read
    (a journal never is one: it is refused there). ``on_bytes`` is given the bytes read (to
    checksum the file that was parsed, not a second read of it)."""
    raw = _read_remote(path, refuse) if storage.is_remote(path) else _read_local(path, refuse, follow_links)
    if on_bytes is not None:
        on_bytes(raw)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise refuse(path, "not valid JSON: not UTF-8 text") from None
    except ValueError as exc:
        raise refuse(path, f"not valid JSON: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise refuse(path, "not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise refuse(path, "not a JSON object")
    return data


def _read_local(path: str, refuse: Refusal, follow_links: bool) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO for reading returns at once (fstat then says what it is)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW))
        try:
            info = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JOURNAL_BYTES:
            os.close(fd)
            raise refuse(path, "not a regular file" if not stat.S_ISREG(info.st_mode) else
                         f"{info.st_size} bytes, far more than a journal holds")
        with open(fd, "rb") as handle:
            return handle.read(MAX_JOURNAL_BYTES + 1)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:  # O_NOFOLLOW on a link
            raise refuse(path, "not a regular file") from None
        raise refuse(path, f"cannot be read: {exc.strerror or exc}") from None


def _read_remote(path: str, refuse: Refusal) -> bytes:
    try:
        raw = storage.read_bytes(path)
    except ResumeError:
        raise
    except Exception as exc:  # the store's own errors (network, credentials, a missing object)
        raise refuse(path, f"cannot be read: {exc}") from None
    if len(raw) > MAX_JOURNAL_BYTES:
        raise refuse(path, f"{len(raw)} bytes, far more than a journal holds")
    return raw


def short(value: object, most: int = 40) -> str:
    """``repr(value)`` cut to ``most`` characters (a damaged file may hold anything)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def whole(value: object) -> bool:
    """A non-negative integer (JSON true/false are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_run_file(previous: Mapping, settings: Mapping, path: str) -> None:
    """run.json holds every setting of a run and its input fingerprints: a missing one, or
    fingerprints that are not a mapping of text, is damage, not a changed setting."""
    missing = sorted(k for k in settings if k not in previous)
    if missing:
        raise damaged(path, f"it has no {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    inputs = previous.get("inputs", {})
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise damaged(path, "inputs is not a mapping of fingerprints")


# Fingerprints that only help name a change (never compared themselves), and those that say
# nothing more once another has changed (the documents of another metadata list differ anyway).
NAMING_ONLY = {"newest_document"}
IMPLIED_BY = {"documents_sha256": "metadata_sha256"}
SETTING_OF = {"runs_encoding": "output_format"}  # a fingerprint that a setting decides: that setting's change is named
RUNS_ONLY = {"runs_encoding"}  # fingerprints of what an unfinished run's partial shards hold


def check_same_inputs(current: Mapping[str, str], previous: object, where: str,
                      changed_settings: Sequence[str] = ()) -> None:
    """--resume refuses, naming what changed, when the inputs differ from the earlier run's (but
    for those a changed setting decides, ``changed_settings``: the settings' line names it)."""
    if not isinstance(previous, dict):
        return  # damage: the run-file check says so
    differ = {k for k in set(current) | set(previous) if k not in NAMING_ONLY and current.get(k) != previous.get(k)
              and SETTING_OF.get(k) not in changed_settings}
    differ -= {k for k, cause in IMPLIED_BY.items() if cause in differ}
    changed = [_input_change(k, current, previous) for k in sorted(differ)]
    if changed:
        raise ResumeError(
            f"--resume refused: {'; '.join(changed)} since the interrupted run ({where}); restore it, or start "
            f"over with --overwrite"
        )


def _input_change(key: str, current: Mapping[str, str], previous: Mapping) -> str:
    """What a changed fingerprint means; for the documents, the one edited since the earlier run
    when it is the newest file now (an edit makes a file newer than any the run saw)."""
    if key not in previous:
        return f"the interrupted run did not record {key} (an older bert_data)"
    if key == "documents_sha256":
        before, now = newest_mtime(previous.get("newest_document")), newest_mtime(current.get("newest_document"))
        if now is not None and (before is None or now > before):
            return f"the listed document {newest_described(current['newest_document'])} was modified"
    return INPUT_CHANGES.get(key, key)


def check_same_settings(current: Mapping, previous: Mapping, where: str) -> None:
    """Every setting that shapes the bytes is the same as the earlier run's; else one line
    naming up to four of them with both values."""
    differing = sorted(k for k in set(current) | set(previous) if current.get(k) != previous.get(k))
    if differing:
        details = ", ".join(
            f"--{k[:40]} was {short(previous.get(k))}, now {short(current.get(k))}" for k in differing[:4]
        )
        more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
        raise ResumeError(f"--resume: settings differ from the interrupted run ({where}): {details}{more}")


def check_same_run(settings: Mapping, previous: Mapping, where: str, finished: bool = False) -> None:
    """The one same-run check of every output kind: ``settings`` (``output_settings`` plus
    ``inputs``) against a ``run.json`` (``finished=False``: its completeness is checked too) or a
    finished run's manifest (only the keys of ``settings`` are compared). Inputs are compared
    first, so a changed vocabulary is named as such, for a local and a URL output alike."""
    merged, merged_before = {**LEFT_OUT_AT_DEFAULT, **settings}, {**LEFT_OUT_AT_DEFAULT, **previous}
    changed = [k for k in set(SETTING_OF.values()) if merged.get(k) != merged_before.get(k)]
    inputs = settings.get("inputs", {})
    if finished:  # (a finished output has no runs left to publish: what they held does not matter)
        inputs = {k: v for k, v in inputs.items() if k not in RUNS_ONLY}
        before = previous.get("inputs")
        previous = {**previous, "inputs": {k: v for k, v in before.items() if k not in RUNS_ONLY}} \
            if isinstance(before, dict) else previous
    check_same_inputs(inputs, previous.get("inputs"), where, changed)
    settings, previous = merged, merged_before
    if finished:
        previous = {k: previous.get(k) for k in settings}
    else:
        check_run_file(previous, settings, where)
    # the inputs were compared above, by what each fingerprint means (and without the ones that
    # only name a change): never again as one "--inputs" setting
    settings = {k: v for k, v in settings.items() if k != "inputs"}
    previous = {k: v for k, v in previous.items() if k != "inputs"}
    check_same_settings(settings, previous, where)


def resume_point(
    output_dir: str, work_dir: str, settings: Mapping, started: Callable[[], bool] = lambda: False
) -> Optional[Dict]:
    """What ``--resume`` finds in ``output_dir`` (local or a URL): the interrupted run's
    ``run.json`` (checked to be this run), or None when the output is already complete with these
    settings (its manifest). Raises :class:`ResumeError` when there is nothing to resume or it is
    another run. ``started()`` says whether a run began there without writing its ``run.json``."""
    run_file = storage.join(work_dir, RUN_FILE)
    manifest_path = storage.join(output_dir, MANIFEST_NAME)
    if _exists(manifest_path):  # the commit point was passed (what is left of the work directory is garbage: the
        # commit writes the manifest, then removes it); read like a journal: a damaged one is said as such
        check_same_run(settings, read_journal(manifest_path), manifest_path, finished=True)
        return None
    if not _exists(run_file):
        if started():  # killed between making the work directory and its run.json
            raise damaged(run_file, "missing: the run was stopped before it started")
        raise ResumeError(f"--resume: no interrupted run in {output_dir} (nothing to continue); run without --resume")
    previous = read_journal(run_file)
    check_same_run(settings, previous, run_file)
    return previous


def require_listed_files(output_dir: str) -> None:
    """A finished run (its manifest checked by :func:`resume_point`) is complete only with every
    file its manifest lists records in, each of the size it lists (``bytes_per_shard``; a manifest
    of an older bert_data has none): one removed, cut short or replaced since is said, never
    reported as done. Not for BERT's named files, whose staging run's shards move away."""
    manifest_path = storage.join(output_dir, MANIFEST_NAME)
    manifest = read_journal(manifest_path)
    per_shard = manifest.get("instances_per_shard")
    names = [n for n, c in per_shard.items() if isinstance(n, str) and n == os.path.basename(n) and n not in ("", ".", "..")
             and isinstance(c, int) and c > 0] if isinstance(per_shard, dict) else []
    missing = next((n for n in names if not _exists(storage.join(output_dir, n))), None)
    if missing is not None:
        raise ResumeError(
            f"--resume: {output_dir} holds a finished run, but {storage.join(output_dir, missing)}, which its manifest "
            f"{manifest_path} lists, is missing; make it anew with --overwrite instead of --resume"
        )
    listed = manifest.get("bytes_per_shard")
    listed = {n: b for n, b in listed.items() if n in names and whole(b)} if isinstance(listed, dict) else {}
    found = storage.sizes(output_dir, sorted(listed)) if listed else {}
    changed = next((n for n in sorted(listed) if found[n] != listed[n]), None)
    if changed is not None:
        raise ResumeError(
            f"--resume: {output_dir} holds a finished run, but {storage.join(output_dir, changed)} is {found[changed]:,} "
            f"bytes where its manifest {manifest_path} lists {listed[changed]:,} (cut short or replaced since); make it "
            f"anew with --overwrite instead of --resume"
        )


def _exists(path: str) -> bool:
    return storage.exists(path) if storage.is_remote(path) else os.path.lexists(path)


def check_progress(state: Mapping, shards: Optional[int], path: str) -> None:
    """The local journal's fields have the types and lengths a resume relies on."""
    if not whole(state.get("next_group")):
        raise damaged(path, f"next_group is {short(state.get('next_group'))}, not a group number")
    for key in ("shard_bytes", "shard_records"):
        values = state.get(key)
        if not isinstance(values, list) or len(values) != shards or not all(whole(v) for v in values):
            raise damaged(path, f"{key} is not {shards} non-negative integers")
    stats = state.get("stats")
    if not isinstance(stats, dict) or not all(whole(v) for v in stats.values()):
        raise damaged(path, "stats is not a mapping of non-negative counters")
    tails = state.get("shard_tails", [])  # (journals of older versions have none)
    if not isinstance(tails, list) or len(tails) not in (0, shards) or not all(whole(v) for v in tails):
        raise damaged(path, f"shard_tails is not {shards} non-negative integers")


TAIL_BYTES = 4096  # the journal's checksum of each partial shard covers its last bytes up to the size it counts


def tail_checksum(read_at, size: int) -> int:
    """CRC-32 of the last :data:`TAIL_BYTES` bytes before ``size`` (``read_at(length, offset)``: a
    pread), the journal's proof of where each partial shard's counted bytes end: bytes appended
    after it (a group made but not journaled) leave it unchanged, a count that is too large or
    bytes changed below it do not."""
    start = max(0, size - TAIL_BYTES)
    return zlib.crc32(read_at(size - start, start))


def check_partial_shards(  # (8 parameters: the journal's counts and how the container checks its bytes)
    output_dir: str, work_dir: str, name: object, shard_bytes: Sequence[int], path: str, suffix: str,
    tails: Optional[Sequence[int]] = None, body_size: Callable[[str], int] = os.path.getsize,
    check_records: Optional[Callable[[str, int], None]] = None,
) -> None:
    """Each partial shard holds at least the bytes the journal says (the resume cuts it back to
    them), and its last bytes up to there are the ones the journal saw (``tails``: its
    checksums; a journal of an older version has none): a shorter one, or one whose counted end
    moved (a count too large, bytes changed), was damaged after the journal was written. (A
    shard already renamed into place by a run killed while publishing counts too: the resume
    takes it back.) ``check_records(file, size)`` (the container's ``check_assembled``) then
    reads every record of those bytes, whose own checksums show a byte changed anywhere before
    the tail; its RecordFormatError or OSError refuses the resume."""
    if not isinstance(name, str):
        return  # the settings check has refused this already
    for shard, (final, size) in enumerate(zip(shard_file_names(name, len(shard_bytes), suffix), shard_bytes)):
        partial = os.path.join(work_dir, final + PARTIAL_SUFFIX)
        published = os.path.join(output_dir, final)
        where = partial if os.path.exists(partial) else published
        try:
            irregular = os.path.exists(where) and not stat.S_ISREG(os.stat(where).st_mode)  # (a FIFO: reads block)
        except OSError:
            irregular = False  # (what cannot be stat'ed is taken as missing, below)
        if irregular:
            raise damaged(path, f"{os.path.basename(where)} is not a regular file")
        try:
            actual = os.path.getsize(where) if os.path.exists(where) else 0
            replaced = where == published and actual and body_size(where) != size
            actual = 0 if replaced else actual
            moved = actual >= size and tails is not None and _tail_of(where, size) != tails[shard]
        except OSError:
            actual, moved, replaced = 0, False, False
        if replaced:  # (its partial shard is gone: the run was killed while publishing, then the file changed)
            raise ResumeError(
                f"--resume: {published} is not the shard this run published ({size} bytes of records, then the "
                f"format's ending): it was changed or replaced after the run stopped; start over with --overwrite (the "
                f"interrupted run cannot be continued)"
            )
        if actual < size:
            raise damaged(path, f"it counts {size} bytes in {final}{PARTIAL_SUFFIX}, which holds {actual}")
        if moved:
            raise damaged(path, f"it counts {size} bytes in {final}{PARTIAL_SUFFIX}, whose last bytes up to there are "
                                f"not the ones it wrote down")
        if check_records is not None:
            try:
                check_records(where, size)
            except (RecordFormatError, OSError) as exc:
                said = " ".join(str(exc).split())
                raise ResumeError(f"--resume: the records this run wrote to {where} before it stopped are damaged "
                                  f"({said}); start over with --overwrite (the interrupted run cannot be continued)"
                                  ) from None


def _tail_of(path: str, size: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return tail_checksum(functools.partial(os.pread, fd), size)
    finally:
        os.close(fd)


def load_index(work_dir: str) -> Dict[int, Dict]:
    """The index entries of the groups a killed URL-output run finished (read in parallel)."""
    paths = storage.listing(storage.join(work_dir, "index", "g*.json"))

    def load(path: str):
        group = index_group(path)
        entry = read_journal(path)
        if group is None or not isinstance(entry.get("segments"), list) or not isinstance(entry.get("stats"), dict):
            raise damaged(path, "not a group index")
        return group, entry

    with ThreadPoolExecutor(max_workers=_INDEX_THREADS) as pool:
        return dict(pool.map(load, paths))


def check_published_files(settings: Mapping, manifest: Mapping, outputs, first_output: str) -> None:
    """A finished run of BERT-named output files (its hidden manifest) is this run: same settings
    (but the staging run's metadata file and worker count) and the same ``--output_file`` list."""
    ignored = {"metadata_files", "num_workers", "inputs"}
    changed = sorted(k for k, v in settings.items() if k not in ignored and k in manifest and manifest[k] != v)
    if changed or list(manifest.get("output_files", [])) != list(outputs):
        what = ", ".join(changed) or "--output_file"
        raise ResumeError(f"--resume: {first_output} was written with other settings ({what}); run again without --resume")


def unfinished_run(directory: str, manifest: Optional[object], named: Sequence[object],
                   exists: Callable[[str], bool] = os.path.exists) -> Optional[str]:
    """One line when ``directory`` holds a run that has not finished (its work directory there, its
    manifest not yet), else None. Whatever shards it shows then are part of an output (a run
    stopped while publishing renames them one by one, the manifest last): never read as a whole."""
    if manifest is not None or named or not exists(storage.join(directory, WORK_DIR_NAME)) or exists(
            storage.join(directory, MANIFEST_NAME)):
        return None
    return (f"{directory}: an unfinished run (its work directory {WORK_DIR_NAME} is there, its {MANIFEST_NAME} not "
            f"yet): finish it with the same create_tfrecords command and --resume")

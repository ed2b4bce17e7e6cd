"""The token cache: a corpus read, segmented and tokenized once, for any number of runs.

``bert-data tokenize`` (:mod:`bert_data.runners.tokenize`) writes, per planned group ``g``,
the group's units exactly as :func:`bert_data.group.group_batches` would tokenize them:

* ``gNNNNNNNNN.bin`` / ``.idx``: Megatron's indexed dataset (:mod:`bert_data.format.indexed`:
  sentences as sequences, documents as documents, uint16 ids under 65,536 vocabulary entries),
  every unit's kept documents back to back; readable by Megatron's ``IndexedDataset``;
* ``gNNNNNNNNN.json`` (the sidecar, written last: the group is complete when it exists): what
  Megatron's layout cannot carry and the passes need: each unit's index and number of documents,
  each kept document's origin (NSP's "never from A's own document"), the counters the read,
  segment and tokenize stages added while the unit was made (so a run from the cache counts
  what a run from the text counts) and the digest of the group's work items (the plan);
* ``tokens.json``: the manifest, written last: the settings the cache fixes
  (:data:`PLAN_SETTINGS`, :data:`TOKEN_SETTINGS`), the vocabulary's sha256, the segmenter, the
  inputs' fingerprints, and each group's file sizes;
* ``pool-DIGEST.npz``: NSP's negative pool of one ``--seed`` (:func:`cached_pool`), kept by
  ``tokenize`` for its ``--seed`` and by the first NSP run from the cache with another.

``create_tfrecords --from_tokens DIR`` plans its groups from the metadata as always (every
entry is still checked: the corpus must be there, which also serves an NSP negative pool the
cache does not hold yet, read from the text: at most 4 MB, a few % of a run) and each worker then takes a group's units from
here instead of reading, segmenting and tokenizing (:func:`cached_units`). Everything after is the
same code with the same RNGs, so the output is byte-identical to the run from the text. A cache
whose settings, vocabulary, corpus or files do not match is one line and exit 2 (:func:`check_cache`,
:func:`check_cache_inputs`, and per group as it is read).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .config import Config
from .errors import BertDataError
from .faults import crash_point
from .storage import write_bytes
from .format.indexed import check_consistent, index_bytes, parse_index
from .identity import newest_described
from .output.journal import read_json_object, whole
from .negatives import NegativePool
from .sentences import segmenter_identity
from .tokenization import TokenizedGroup

CACHE_FORMAT = "bert_data token cache"
CACHE_VERSION = 2  # 2: tokens.json records each group's sidecar digest (a sidecar edited or swapped in is refused)
CACHE_MANIFEST = "tokens.json"
CACHE_RUN_FILE = "tokenize_run.json"  # the settings of a tokenize run in progress (its resume check)

# The flags a cache fixes: a --from_tokens run must pass the same (the plan and the tokens are the cache's).
PLAN_SETTINGS = ("split_num", "group_bytes", "max_document_chars", "input_format", "text_key", "input_encoding",
                 "multiple_docs_in_single_file", "multiple_docs_separator")
TOKEN_SETTINGS = ("do_lower_case", "single_sentence_per_line", "spacy_model")
# ... and the inputs: the metadata and the documents (sizes and modification times), vocabulary and segmenter
CACHE_INPUTS = ("metadata_sha256", "documents_sha256", "vocab_sha256", "segmenter")


class TokenCacheError(BertDataError):
    """A token cache that does not match the run, or is incomplete or damaged: one line, exit 2."""


@dataclass
class TokenizedUnit:
    """One unit of a group, segmented and tokenized: what every dupe pass of it reads."""

    index: int  # the unit's number in its group (its RNG streams' id)
    group: TokenizedGroup  # its documents that have a token
    origins: Optional[List[int]]  # NSP: the original document of each of them (else None)


def group_file(directory: str, group_index: int, suffix: str) -> str:
    return os.path.join(directory, f"g{group_index:09d}{suffix}")


def plan_digest(items: Sequence[Any]) -> str:
    """What a group is: its work items (entry, byte range); equal digests, equal documents read."""
    parts = [(item.source.entry, item.start, item.end) for item in items]
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def cache_settings(config: Config) -> Dict[str, Any]:
    """The settings recorded in (and compared against) a cache."""
    return {name: getattr(config, name) for name in PLAN_SETTINGS + TOKEN_SETTINGS}


def stats_delta(before: Mapping[str, int], after: Mapping[str, int]) -> Dict[str, int]:
    """The counters added between two snapshots (a key created at 0 included: it is in the manifest)."""
    return {k: v - before.get(k, 0) for k, v in after.items() if k not in before or v != before[k]}


# --------------------------------------------------------------------------------------------
# One group's files
# --------------------------------------------------------------------------------------------


def write_group_cache(
    directory: str, group_index: int, digest: str, units: Sequence[Tuple[TokenizedUnit, Dict[str, int]]],
    tail: Dict[str, int], dtype: np.dtype,
) -> Dict[str, int]:
    """A group's ``.bin``, ``.idx`` and sidecar, each under a temporary name renamed into place,
    the sidecar last (a group without one is not done). Returns the files' sizes."""
    tokens, lengths, indices, entries = [], [], [0], []
    for unit, delta in units:
        group = unit.group
        tokens.append(np.asarray(group.ids).astype(dtype))
        lengths.append(np.diff(group.sent_offsets).astype(np.int32))
        base = indices[-1]  # sentences so far
        indices.extend(base + start for start in group.doc_starts[1:])
        origins = None
        if unit.origins is not None:
            origins = base64.b64encode(np.asarray(unit.origins, dtype="<u8").tobytes()).decode("ascii")
        entries.append({"unit": unit.index, "documents": group.n_docs, "stats": delta, "origins": origins})
    data = np.concatenate(tokens) if tokens else np.zeros(0, dtype=dtype)
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int32)
    index = index_bytes(all_lengths, np.asarray(indices, dtype=np.int64), dtype)
    sizes = {"bin_bytes": int(data.nbytes), "idx_bytes": len(index)}
    raw = data.tobytes()
    sidecar = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "group": group_index, "plan": digest, **sizes,
               "blake2b": _checksum(raw, index), "units": entries, "tail": tail}
    sidecar_bytes = json.dumps(sidecar, sort_keys=True).encode()
    write_bytes(group_file(directory, group_index, ".bin"), raw)
    write_bytes(group_file(directory, group_index, ".idx"), index)
    crash_point("tokenized", group_index)  # test hook: killed with the tokens written, the sidecar not
    write_bytes(group_file(directory, group_index, ".json"), sidecar_bytes)
    return dict(sizes, sidecar_blake2b=_digest(sidecar_bytes))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _checksum(data: bytes, index: bytes) -> str:
    """Of a group's tokens and index: a damaged byte is refused, not turned into other instances."""
    digest = hashlib.blake2b(data, digest_size=16)
    digest.update(index)
    return digest.hexdigest()


def group_done(directory: str, group_index: int, digest: str) -> Optional[Dict[str, Any]]:
    """What the manifest records of a group already tokenized for this plan (its sidecar whole,
    its files there with the recorded sizes), or None (to make, or remake). The tokens are not
    re-read (a finished cache of hundreds of GB is checked in a moment): a run that finds a
    group's checksum wrong names its sidecar to remove, and then this remakes the group."""
    try:
        sidecar = read_sidecar(directory, group_index, digest)
        check_group_files(directory, group_index, sidecar)
    except TokenCacheError:
        return None
    return {"bin_bytes": sidecar["bin_bytes"], "idx_bytes": sidecar["idx_bytes"], "sidecar_blake2b": sidecar[SIDECAR_DIGEST]}


SIDECAR_DIGEST = "_file_blake2b"  # added to a sidecar as read: the digest of its file's bytes


def _counters(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and type(v) is int for k, v in value.items())


def _sidecar_fault(sidecar: Mapping[str, Any]) -> str:
    """What is wrong with a sidecar's fields ("" when nothing): what a run takes from it must have
    the types it relies on (a traceback otherwise, or other instances)."""
    for key in ("bin_bytes", "idx_bytes"):
        if not whole(sidecar.get(key)):
            return f"{key} is not a byte count"
    if not isinstance(sidecar.get("blake2b"), str) or not _counters(sidecar.get("tail")):
        return "its checksum or counters are missing"
    units = sidecar.get("units")
    if not isinstance(units, list):
        return "units is not a list"
    for entry in units:
        if not (isinstance(entry, dict) and whole(entry.get("unit")) and whole(entry.get("documents"))
                and _counters(entry.get("stats")) and isinstance(entry.get("origins"), str)):  # (tokenize keeps origins)
            return "a unit's entry is not one this version writes"
    return ""


def read_sidecar(directory: str, group_index: int, digest: Optional[str]) -> Dict[str, Any]:
    path = group_file(directory, group_index, ".json")
    raw: List[bytes] = []
    sidecar = read_cache_json(path, "--from_tokens: ", "the cache is incomplete", on_bytes=raw.append)
    if sidecar.get("format") != CACHE_FORMAT or sidecar.get("group") != group_index:
        raise TokenCacheError(f"--from_tokens: {path} is not group {group_index} of a token cache; {RETOKENIZE}")
    fault = _sidecar_fault(sidecar)
    if fault:
        raise TokenCacheError(f"--from_tokens: {path} is damaged ({fault}); {RETOKENIZE}")
    sidecar[SIDECAR_DIGEST] = _digest(raw[0])
    if digest is not None and sidecar.get("plan") != digest:
        raise TokenCacheError(
            f"--from_tokens: {path}: group {group_index} of the cache holds other documents than this run's group "
            f"{group_index} (the metadata or a plan flag differs); {RETOKENIZE}"
        )
    return sidecar


RETOKENIZE = "run bert-data tokenize again (the same command completes it; --overwrite remakes it)"


def check_group_files(directory: str, group_index: int, sidecar: Mapping[str, Any]) -> None:
    """The group's ``.bin`` and ``.idx`` exist with the sizes its sidecar recorded."""
    for suffix, key in ((".bin", "bin_bytes"), (".idx", "idx_bytes")):
        path = group_file(directory, group_index, suffix)
        try:
            info = os.stat(path)
        except OSError:
            raise TokenCacheError(f"--from_tokens: {path} is missing: the cache is incomplete; {RETOKENIZE}") from None
        if not stat.S_ISREG(info.st_mode):  # (a FIFO there would block the read)
            raise TokenCacheError(f"--from_tokens: {path} is not a regular file; {RETOKENIZE}")
        size = info.st_size
        if size != sidecar.get(key):
            raise TokenCacheError(
                f"--from_tokens: {path} has {size} bytes, the cache recorded {sidecar.get(key)} (truncated or "
                f"damaged); {RETOKENIZE}"
            )


def read_group_cache(directory: str, group_index: int, digest: Optional[str]
                     ) -> Tuple[List[Tuple[TokenizedUnit, Dict[str, int]]], Dict[str, int]]:
    """A group's units (each with the counters its making added) and the counters after its last."""
    sidecar = read_sidecar(directory, group_index, digest)
    check_group_files(directory, group_index, sidecar)
    idx_path, bin_path = group_file(directory, group_index, ".idx"), group_file(directory, group_index, ".bin")
    with open(idx_path, "rb") as handle:
        raw_index = handle.read()
    with open(bin_path, "rb") as handle:
        raw_tokens = handle.read()
    if _checksum(raw_tokens, raw_index) != sidecar.get("blake2b"):
        raise TokenCacheError(
            f"--from_tokens: {bin_path} or {idx_path} is damaged (checksum differs); remove "
            f"{group_file(directory, group_index, '.json')} and run bert-data tokenize again (the same command remakes that group)")
    try:
        dtype, lengths, pointers, indices = parse_index(raw_index)
        check_consistent(dtype, lengths, pointers, indices, os.stat(bin_path).st_size)
    except ValueError as exc:
        raise TokenCacheError(f"--from_tokens: {idx_path}: {exc}; {RETOKENIZE}") from None
    tokens = np.frombuffer(raw_tokens, dtype=dtype).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    units, document = [], 0
    for entry in sidecar["units"]:
        count = entry["documents"]
        if document + count >= len(indices):
            raise TokenCacheError(f"--from_tokens: {idx_path} has fewer documents than {group_file(directory, group_index, '.json')} says; {RETOKENIZE}")
        first, last = int(indices[document]), int(indices[document + count])
        group = TokenizedGroup(
            ids=tokens[offsets[first]:offsets[last]],
            sent_offsets=offsets[first:last + 1] - offsets[first],
            doc_starts=[int(i) - first for i in indices[document:document + count + 1]],
        )
        packed = base64.b64decode(entry["origins"])  # (a str: _sidecar_fault)
        if len(packed) != 8 * count:
            raise TokenCacheError(f"--from_tokens: {group_file(directory, group_index, '.json')} is damaged (a unit's "
                                  f"origins are not one per document); {RETOKENIZE}")
        origins = np.frombuffer(packed, dtype="<u8").tolist()
        units.append((TokenizedUnit(entry["unit"], group, origins), entry["stats"]))
        document += count
    return units, sidecar["tail"]


def cached_units(config: Config, group_index: int, items: Sequence[Any], stats, with_origins: bool) -> Iterator[TokenizedUnit]:
    """The group's units from ``--from_tokens``, adding to ``stats`` what reading, segmenting and
    tokenizing them added in the run that made the cache, at the same moments."""
    units, tail = read_group_cache(config.from_tokens, group_index, plan_digest(items))
    for unit, delta in units:
        stats.update(delta)
        if not with_origins:
            unit.origins = None
        yield unit
    stats.update(tail)


def pool_identity(config: Config, vocab: Mapping[str, int]) -> str:
    """What a kept pool's tokens depend on besides its choice (``spec``): the cache's settings,
    the segmenter and the vocabulary (its tokens in id order). Part of the pool file's name, so a
    pool copied from a cache of another vocabulary, casing or segmenter is never read as this one's."""
    tokens = "\n".join(sorted(vocab, key=vocab.__getitem__)).encode("utf-8", "surrogatepass")
    return json.dumps({"settings": cache_settings(config), "segmenter": segmenter_identity(config),
                       "vocab": hashlib.blake2b(tokens, digest_size=16).hexdigest()}, sort_keys=True)


def pool_path(directory: str, spec: str, identity: str) -> str:
    """Where the cache keeps the negative pool of ``spec`` made with ``identity`` (named by their digest)."""
    digest = hashlib.blake2b(f"{spec}\0{identity}".encode("utf-8"), digest_size=16).hexdigest()
    return os.path.join(directory, f"pool-{digest}.npz")


POOL_FACTS = ("negative_pool.candidates", "negative_pool.documents", "negative_pool.characters", "negative_pool.tokens",
              "negative_pool.cap_characters")


def _read_pool(path: str, vocab_size: int) -> NegativePool:
    """A kept pool, every array checked against the others and the vocabulary (a damaged or
    edited file raises: it is made again, never drawn from)."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # (a FIFO would block np.load)
        raise OSError(errno.EINVAL, "not a regular file", path)
    with np.load(path, allow_pickle=False) as data:
        ids, offsets, doc_starts, origins = (data[k] for k in ("ids", "offsets", "doc_starts", "origins"))
        facts = json.loads(str(data["facts"]))
    arrays = (ids, offsets, doc_starts, origins)
    if any(a.ndim != 1 or a.dtype.kind not in "iu" for a in arrays):
        raise ValueError("not 1-D integer arrays")
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError("ids outside the vocabulary")
    for bounds, end in ((offsets, len(ids)), (doc_starts, len(offsets) - 1)):
        bounds = bounds.astype(np.int64)  # (a difference of unsigned offsets would wrap round, never negative)
        if not len(bounds) or bounds[0] != 0 or bounds[-1] != end or (len(bounds) > 1 and (np.diff(bounds) < 0).any()):
            raise ValueError("offsets that do not cut the ids")
    if len(origins) != len(doc_starts) - 1:
        raise ValueError("origins of another length")
    if not isinstance(facts, dict) or sorted(facts) != sorted(POOL_FACTS) or not all(type(v) is int for v in facts.values()):
        raise ValueError("facts of another kind")
    if facts["negative_pool.tokens"] != len(ids) or facts["negative_pool.documents"] != len(origins):
        raise ValueError("facts that do not count the arrays")  # (they are the manifest's negative_pool.*)
    return NegativePool(ids, offsets.tolist(), doc_starts.tolist(), origins.astype(np.uint64).tolist(), facts)


def pool_is_kept(directory: str, spec: str, identity: str, vocab_size: int) -> bool:
    """Whether the cache holds a whole, readable pool of ``spec`` and ``identity``."""
    try:
        _read_pool(pool_path(directory, spec, identity), vocab_size)
    except Exception:  # noqa: BLE001 - whatever keeps it from being read (as cached_pool judges)
        return False
    return True


def cached_pool(directory: str, spec: str, identity: str, vocab_size: int, build: Callable[[], NegativePool]) -> NegativePool:
    """NSP's negative pool of ``spec`` (:func:`bert_data.negatives.encode_pool`: chosen from the
    corpus and ``--seed``), kept in the cache as ``pool-DIGEST.npz`` by ``tokenize`` or the first
    run that built it, so that the next runs with that seed (the other phase, another objective)
    need not read, segment and tokenize it again. The name's digest covers ``identity``
    (:func:`pool_identity`); the documents are the cache's own (checked by every run). A file
    that cannot be read or does not hold a pool of this vocabulary is built anew; a cache that
    cannot be written to is only read."""
    path = pool_path(directory, spec, identity)
    try:
        return _read_pool(path, vocab_size)
    except Exception:  # noqa: BLE001 - any damage (OSError, EOFError, BadZipFile, ValueError, KeyError, ...): made again
        pass
    pool = build()
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as handle:
            np.savez(handle, ids=pool.ids, offsets=np.asarray(pool.offsets, dtype=np.int64),
                     doc_starts=np.asarray(pool.doc_starts, dtype=np.int64),
                     origins=np.asarray(pool.origins, dtype=np.uint64), facts=np.asarray(json.dumps(pool.facts)))
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
    return pool


# --------------------------------------------------------------------------------------------
# The cache's manifest, and the run's checks against it
# --------------------------------------------------------------------------------------------


def read_cache_json(path: str, where: str, if_missing: str, on_bytes=None) -> Dict[str, Any]:
    """A JSON file of the cache (its manifest, a group's sidecar) as an object, or one line:
    missing (``if_missing`` says what that means), or not a readable JSON object (a FIFO or a
    device put there is refused, never waited on: :func:`bert_data.output.journal.read_json_object`)."""
    if not os.path.lexists(path):
        raise TokenCacheError(f"{where}{path} is missing: {if_missing}; {RETOKENIZE}")
    return read_json_object(path, lambda p, what: TokenCacheError(f"{where}{p} cannot be read ({what}); {RETOKENIZE}"),
                            follow_links=True, on_bytes=on_bytes)


# The counters a cache's manifest keeps (the rest are in each group's sidecar).
MANIFEST_COUNTS = ("input_bytes", "documents.used", "sentences", "tokens", "unk_tokens", "units")


def manifest_fault(manifest: Mapping[str, Any]) -> str:
    """What is wrong with a cache manifest's fields ("" when nothing): every field a run or
    ``tokenize`` reads, of the type it relies on."""
    if not isinstance(manifest.get("settings"), dict):
        return "settings is not a mapping"
    if not all(isinstance(manifest.get(k), str) for k in ("vocab_file", "dtype")) or not whole(manifest.get("bytes")):
        return "vocab_file, dtype or bytes is missing"
    counts = manifest.get("counts")
    if not _counters(counts) or not all(name in counts for name in MANIFEST_COUNTS):
        return f"counts does not count {', '.join(MANIFEST_COUNTS)}"
    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict) or not all(isinstance(inputs.get(k), str) for k in CACHE_INPUTS):
        return f"inputs does not name {', '.join(CACHE_INPUTS)}"
    groups = manifest.get("groups")
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and whole(g.get("bin_bytes")) and whole(g.get("idx_bytes"))
            and isinstance(g.get("sidecar_blake2b"), str) for g in groups):
        return "groups is not a list of each group's sizes and sidecar digest"
    return ""


def load_cache_manifest(directory: str) -> Dict[str, Any]:
    path = os.path.join(directory, CACHE_MANIFEST)
    if not os.path.isdir(directory):
        what = "not a directory (a token cache is the directory `bert-data tokenize --output_dir` made)" \
            if os.path.lexists(directory) else f"no such directory; make it with bert-data tokenize --output_dir {directory}"
        raise TokenCacheError(f"--from_tokens {directory}: {what}")
    manifest = read_cache_json(path, f"--from_tokens {directory}: ",
                               "not a token cache, or bert-data tokenize did not finish")
    if manifest.get("format") != CACHE_FORMAT:
        raise TokenCacheError(f"--from_tokens {directory}: {path} is not a token cache; {RETOKENIZE}")
    if manifest.get("version") != CACHE_VERSION:
        raise TokenCacheError(f"--from_tokens {directory}: {path} is a token cache of version {manifest.get('version')!r}, "
                              f"this bert_data reads version {CACHE_VERSION}; {RETOKENIZE}")
    fault = manifest_fault(manifest)
    if fault:
        raise TokenCacheError(f"--from_tokens {directory}: {path} is damaged ({fault}); {REMAKE}")
    return manifest


REMAKE = "remake it with bert-data tokenize --overwrite (the same flags)"


def _same_setting(name: str, recorded: object, given: object) -> bool:
    """A cache's recorded setting and this run's: an encoding by the codec it names (``UTF-8``,
    ``utf8`` and ``utf-8`` are one), everything else as written."""
    if name == "input_encoding" and isinstance(recorded, str) and isinstance(given, str):
        try:
            return codecs.lookup(recorded).name == codecs.lookup(given).name
        except LookupError:
            return recorded == given
    return recorded == given


def check_cache(config: Config, vocab_sha256: str, segmenter: str) -> Dict[str, Any]:
    """Before anything runs: the cache is complete (every group's files there, of the sizes
    recorded) and was made with this run's vocabulary, casing, segmenter and plan flags."""
    directory = config.from_tokens
    manifest = load_cache_manifest(directory)
    recorded = manifest["settings"]
    if manifest["inputs"]["vocab_sha256"] != vocab_sha256:
        raise TokenCacheError(
            f"--from_tokens {directory} was tokenized with another vocabulary ({manifest['vocab_file']}, sha256 "
            f"{manifest['inputs']['vocab_sha256'][:12]}) than --vocab_file {config.vocab_file}; pass that vocabulary, or tokenize again"
        )
    for name in TOKEN_SETTINGS + PLAN_SETTINGS:
        if not _same_setting(name, recorded.get(name), getattr(config, name)):
            raise TokenCacheError(
                f"--from_tokens {directory} was made with --{name} {recorded.get(name)!r}, this run has "
                f"{getattr(config, name)!r}; pass the same --{name} (a cache fixes it), or tokenize again"
            )
    if manifest["inputs"]["segmenter"] != segmenter:
        raise TokenCacheError(
            f"--from_tokens {directory} was segmented by {manifest['inputs']['segmenter']}, this run's segmenter is "
            f"{segmenter}; use that segmenter (--spacy_model, spaCy version), or tokenize again"
        )
    for group_index, recorded in enumerate(manifest["groups"]):
        check_group_files(directory, group_index, recorded)
        sidecar = read_sidecar(directory, group_index, None)
        if sidecar[SIDECAR_DIGEST] != recorded["sidecar_blake2b"]:  # (edited, or a group's files copied in from another cache)
            raise TokenCacheError(
                f"--from_tokens: {group_file(directory, group_index, '.json')} is not the sidecar the cache recorded "
                f"for group {group_index}; {RETOKENIZE}")
    return manifest


def check_cache_inputs(config: Config, inputs: Mapping[str, str], groups: int) -> None:
    """After the plan: the metadata and documents are the ones the cache was made from."""
    manifest = load_cache_manifest(config.from_tokens)
    if manifest["inputs"]["metadata_sha256"] != inputs["metadata_sha256"]:
        raise TokenCacheError(f"--from_tokens {config.from_tokens}: the metadata files' content changed since the cache "
                              f"was made; tokenize again")
    if manifest["inputs"]["documents_sha256"] != inputs["documents_sha256"]:
        newest = newest_described(inputs.get("newest_document", ""))
        raise TokenCacheError(
            f"--from_tokens {config.from_tokens}: a document's size or modification time changed since the cache was "
            f"made{f' (the newest is now {newest})' if newest else ''}; tokenize again"
        )
    if len(manifest["groups"]) != groups:
        raise TokenCacheError(
            f"--from_tokens {config.from_tokens} holds {len(manifest['groups'])} groups, this run plans {groups}; "
            f"pass the flags the cache was made with, or tokenize again"
        )

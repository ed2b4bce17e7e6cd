"""``split_metadata``: split metadata files into a train and a validation metadata file.

Every document goes to one side according to a *seeded hash of its path*, never according to
its position, so the split is

* deterministic (same entries, same seed -> same files),
* independent of the order of the input entries and of how they are spread over metadata files,
* stable under additions with ``--validation_fraction``: a document keeps its side when other
  documents are added or removed, so a validation set never leaks into a later training set.

The hash is ``blake2b(f"{seed}:{key}")`` read as a number uniform in ``[0, 1)``, where ``key`` is
the entry *as written in the metadata file* (normalised with ``os.path.normpath``), not joined
with ``--input_files_prefix``: moving the corpus to another directory does not change the
split. With ``--validation_fraction F`` a document is in validation when its hash is below
``F`` (so the validation size is about ``F`` times the number of documents, not exactly).
With ``--validation_count N`` the validation side holds exactly the ``N`` documents with the
smallest hashes (ties broken by the key). That is deterministic too, but stability under
additions is only approximate: a new document whose hash is small enough takes the place of
the old validation document with the largest hash, which moves to train.

The outputs list the input entries as written (stripped of surrounding blanks; comments and
blank lines dropped), in input order; a duplicated entry is written once (first occurrence)
and reported on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple

from .errors import BertDataError, ConfigError, MetadataError, OutputError, print_error
from .metadata import iter_metadata

PROG = "split_metadata"

__all__ = [
    "split_key",
    "split_hash",
    "assign_split",
    "SplitResult",
    "split_metadata_files",
    "build_parser",
    "main",
    "entry_point",
]


def split_key(path: str) -> str:
    """The text that is hashed for ``path``: ``./a//b.txt`` and ``a/b.txt`` are the same document."""
    return os.path.normpath(path.strip())


def split_hash(path: str, seed: int = 0) -> float:
    """A number uniform in ``[0, 1)`` that depends only on ``(seed, path)``."""
    digest = hashlib.blake2b(f"{seed}:{split_key(path)}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _check_sizes(n_docs: int, fraction: Optional[float], count: Optional[int]) -> None:
    if fraction is None and count is None:
        raise ConfigError("give the validation size with --validation_fraction F (0 < F < 1) or --validation_count N")
    if fraction is not None and count is not None:
        raise ConfigError("--validation_fraction and --validation_count contradict each other: give only one")
    if n_docs == 0:
        raise ConfigError("no documents to split")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
            raise ConfigError(f"--validation_fraction {fraction!r} must be strictly between 0 and 1")
    else:
        if isinstance(count, bool) or not isinstance(count, int):
            raise ConfigError(f"--validation_count must be an integer, got {count!r}")
        if count < 1:
            raise ConfigError(f"--validation_count {count} leaves the validation set empty: it must be at least 1")
        if count >= n_docs:
            raise ConfigError(
                f"--validation_count {count} leaves no training documents: there are only {n_docs} document(s); "
                f"use at most {n_docs - 1}"
            )


def _unique(paths: Sequence[str]) -> Tuple[List[str], List[str], Counter]:
    """(first occurrences in order, their keys, key -> number of occurrences)."""
    seen: Counter = Counter()
    unique: List[str] = []
    keys: List[str] = []
    for path in paths:
        key = split_key(path)
        seen[key] += 1
        if seen[key] == 1:
            unique.append(path)
            keys.append(key)
    return unique, keys, seen


def assign_split(
    paths: Sequence[str], fraction: Optional[float] = None, count: Optional[int] = None, seed: int = 0
) -> Tuple[List[str], List[str]]:
    """Split ``paths`` into ``(train, validation)`` by a seeded hash of each path.

    Exactly one of ``fraction`` (``0 < fraction < 1``: validation when the hash is below it)
    and ``count`` (``1 <= count < number of documents``: the ``count`` smallest hashes) must
    be given. Both lists keep the input order; duplicates (same :func:`split_key`) appear once.
    Raises :class:`~bert_data.errors.ConfigError` for a bad size, including a fraction that
    leaves one side empty.

    Library callers must pass the entries as written in the metadata (not joined with the
    input prefix) to get the same split as the ``split_metadata`` tool.
    """
    unique, keys, _ = _unique(paths)
    _check_sizes(len(unique), fraction, count)
    hashes = [split_hash(key, seed) for key in keys]
    if fraction is not None:
        in_validation = [h < fraction for h in hashes]
    else:
        order = sorted(range(len(unique)), key=lambda i: (hashes[i], keys[i]))
        chosen = set(order[:count])
        in_validation = [i in chosen for i in range(len(unique))]
    train = [p for p, v in zip(unique, in_validation) if not v]
    validation = [p for p, v in zip(unique, in_validation) if v]
    if not validation:
        raise ConfigError(
            f"--validation_fraction {fraction} puts none of the {len(unique)} document(s) in validation; "
            "use a larger fraction or --validation_count"
        )
    if not train:
        raise ConfigError(
            f"--validation_fraction {fraction} puts all {len(unique)} document(s) in validation; "
            "use a smaller fraction or --validation_count"
        )
    return train, validation


@dataclass
class SplitResult:
    train: List[str]
    validation: List[str]
    entries: int
    duplicates: Dict[str, int]  # entry as first written -> number of occurrences (> 1)
    train_path: str
    validation_path: str


def _write_lines(path: str, lines: Sequence[str]) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"cannot write {path} ({exc.strerror})") from None


def split_metadata_files(
    metadata_files: Sequence[str],
    output_dir: str = ".",
    train_name: str = "train_metadata.txt",
    validation_name: str = "validation_metadata.txt",
    fraction: Optional[float] = None,
    count: Optional[int] = None,
    seed: int = 0,
) -> SplitResult:
    """Read the metadata files, split, write both outputs; nothing is written on an error."""
    if not metadata_files:
        raise ConfigError("--metadata_files is required: give one or more metadata files listing the documents")
    for flag, name in (("--train_name", train_name), ("--validation_name", validation_name)):
        if not name or any(c in name for c in "/\\\0") or name in (".", ".."):
            raise ConfigError(f"{flag} {name!r} must be a plain file name (no slashes)")
    train_path = os.path.join(output_dir, train_name)
    validation_path = os.path.join(output_dir, validation_name)
    if os.path.realpath(train_path) == os.path.realpath(validation_path):
        raise ConfigError(f"--train_name and --validation_name both write {train_path}: give different names")
    inputs = {os.path.realpath(m) for m in metadata_files}
    for flag, path in (("--train_name", train_path), ("--validation_name", validation_path)):
        if os.path.realpath(path) in inputs:
            raise ConfigError(f"{flag}: {path} is one of the input metadata files; refusing to overwrite it")

    entries = [source.path for source in iter_metadata(metadata_files, "")]
    if not entries:
        raise MetadataError(f"no documents listed in {', '.join(metadata_files)} (only blank or comment lines)")
    unique, keys, occurrences = _unique(entries)
    duplicates = {path: occurrences[key] for path, key in zip(unique, keys) if occurrences[key] > 1}
    train, validation = assign_split(unique, fraction=fraction, count=count, seed=seed)

    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise OutputError(f"--output_dir {output_dir} exists and is not a directory")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be created ({exc.strerror})") from None
    _write_lines(train_path, train)
    _write_lines(validation_path, validation)
    return SplitResult(train, validation, len(entries), duplicates, train_path, validation_path)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line ``split_metadata: error: ...`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Split metadata files into train and validation metadata files by a seeded hash of each document "
            "path: deterministic, independent of input order, and (with --validation_fraction) stable when "
            "documents are added."
        ),
    )
    parser.add_argument("--metadata_files", nargs="+", required=True, help="metadata file(s), one document path per line")
    parser.add_argument(
        "--input_files_prefix",
        default="",
        help="prefix of the relative paths (only reported; entries are hashed and written as written)",
    )
    parser.add_argument("--output_dir", default=".", help="where the two metadata files go (default .)")
    parser.add_argument("--train_name", default="train_metadata.txt", help="default train_metadata.txt")
    parser.add_argument("--validation_name", default="validation_metadata.txt", help="default validation_metadata.txt")
    parser.add_argument(
        "--validation_fraction", type=float, default=None,
        help="F in (0, 1): each document goes to validation with probability F (by its hash)",
    )
    parser.add_argument(
        "--validation_count", type=int, default=None,
        help="N: the N documents with the smallest hashes go to validation (stability under additions is approximate)",
    )
    parser.add_argument("--seed", type=int, default=0, help="hash seed; another seed gives another split (default 0)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = split_metadata_files(
            args.metadata_files,
            output_dir=args.output_dir,
            train_name=args.train_name,
            validation_name=args.validation_name,
            fraction=args.validation_fraction,
            count=args.validation_count,
            seed=args.seed,
        )
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    if result.duplicates:
        extra = sum(n - 1 for n in result.duplicates.values())
        shown = sorted(result.duplicates.items(), key=lambda item: (-item[1], item[0]))[:10]
        listing = ", ".join(f"{path} (x{n})" for path, n in shown)
        more = f", and {len(result.duplicates) - len(shown)} more" if len(result.duplicates) > len(shown) else ""
        print(
            f"{PROG}: warning: {extra} duplicate entr{'y' if extra == 1 else 'ies'} of {len(result.duplicates)} "
            f"document(s) written once: {listing}{more}",
            file=sys.stderr,
        )
    n_docs = len(result.train) + len(result.validation)
    where = f" (relative to {args.input_files_prefix})" if args.input_files_prefix else ""
    print(
        f"split {n_docs} documents{where} from {result.entries} entries: "
        f"{len(result.train)} train -> {result.train_path}, "
        f"{len(result.validation)} validation ({len(result.validation) / n_docs:.1%}) -> {result.validation_path}"
    )
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

"""``split_metadata``: split metadata files into a train and a validation metadata file by a
seeded hash of each entry (deterministic, independent of input order, stable under additions
with ``--validation_fraction``). The rules are :func:`bert_data.metadata.assign_split`'s; the
one-shot ``create_tfrecords --validation_fraction`` uses the same hash."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional, Sequence

from ..errors import BertDataError, print_error
from ..metadata import split_metadata_files

PROG = "split_metadata"


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

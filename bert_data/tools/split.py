"""``split_metadata``: split metadata files into a train and a validation metadata file by a
seeded hash of each entry (deterministic, independent of input order, stable under additions
with ``--validation_fraction``). The rules are :func:`bert_data.metadata.assign_split`'s; the
one-shot ``create_tfrecords --validation_fraction`` uses the same hash."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from ..errors import BertDataError, OutputError, print_error
from ..errors import plural
from ..metadata import split_metadata_files
from ..identity import written_over_input
from .cli import GivenOnce, OneLineParser, terminal_bar
from .endings import emit, guarded, stopped

PROG = "split_metadata"


GUIDE = """\
how big a validation set:
  Aim for a few thousand documents (a few million tokens): enough to measure the loss steadily,
  and every validation document is kept out of training. So 0.5-1% of a corpus of a million
  documents (--validation_fraction 0.005), 5-10% of one of 50,000; for a corpus of under a few
  thousand documents give an exact --validation_count (e.g. 200) instead.

  --validation_fraction F: each document goes to validation when its hash is below F. Adding
  documents later never moves an existing one to the other side, so the splits of a growing
  corpus stay comparable. --validation_count N: the N smallest hashes (exact size; only
  approximately stable when documents are added).

Both outputs list the entries as written in the metadata. A document is hashed by its path
relative to --input_files_prefix (an absolute entry under the prefix counts as its relative
path, ./a and a//b as a and a/b): give split_metadata and create_tfrecords the same
--input_files_prefix and they split alike. Existing output files are only replaced with --overwrite.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(  # usage errors are one line, as in every tool
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Split metadata files into train and validation metadata files by a seeded hash of each document "
            "path: deterministic, independent of input order, and (with --validation_fraction) stable when "
            "documents are added."
        ),
        epilog=GUIDE,
    )
    parser.add_argument("--metadata_files", nargs="+", action=GivenOnce, required=True, help="metadata file(s), one document path per line")
    parser.add_argument(
        "--input_files_prefix",
        default="",
        help="prefix the relative paths are relative to (as create_tfrecords'): an absolute entry under it is "
        "hashed as its path relative to it; entries are written as written",
    )
    parser.add_argument("--output_dir", default=".", help="where the two metadata files go (default .)")
    parser.add_argument("--train_name", default="train_metadata.txt", help="default train_metadata.txt")
    parser.add_argument("--validation_name", default="validation_metadata.txt", help="default validation_metadata.txt")
    parser.add_argument(
        "--validation_fraction", type=float, default=None,
        help="F in (0, 1): each document goes to validation with probability F (by its hash); see below for a size",
    )
    parser.add_argument(
        "--validation_count", type=int, default=None,
        help="N: the N documents with the smallest hashes go to validation (stability under additions is approximate)",
    )
    parser.add_argument("--seed", type=int, default=0, help="hash seed; another seed gives another split (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files (default: refuse)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is drawn only on a terminal anyway)")
    return parser


def _metadata_bytes(paths: Sequence[str]) -> Optional[int]:
    """The metadata files' total size (the bar's total), or None when one cannot be stat'ed."""
    try:
        return sum(os.path.getsize(path) for path in paths)
    except OSError:
        return None


def _refuse_overwrite(args: argparse.Namespace) -> None:
    """Existing outputs are an error without --overwrite, as in every bert_data tool. (An output
    that is one of the inputs is refused by split_metadata_files itself, even with --overwrite.)"""
    if args.overwrite:
        return
    inputs = [("an input", m) for m in args.metadata_files]
    for name in (args.train_name, args.validation_name):
        path = os.path.join(args.output_dir, name)
        if os.path.lexists(path) and written_over_input([path], inputs) is None:  # an input: refused with its own line
            raise OutputError(f"{path} exists; pass --overwrite to replace it")


def main(argv: Optional[Sequence[str]] = None) -> int:
    return guarded(PROG, lambda: _main(argv))


def _main(argv: Optional[Sequence[str]]) -> int:
    args = build_parser().parse_args(argv)
    bar = terminal_bar("reading metadata", _metadata_bytes(args.metadata_files), quiet=args.quiet)
    try:
        _refuse_overwrite(args)
        result = split_metadata_files(
            args.metadata_files,
            output_dir=args.output_dir,
            train_name=args.train_name,
            validation_name=args.validation_name,
            fraction=args.validation_fraction,
            count=args.validation_count,
            seed=args.seed,
            on_bytes=bar.update if bar is not None else None,
            prefix=args.input_files_prefix,
        )
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except (KeyboardInterrupt, MemoryError) as exc:  # Ctrl-C, SIGTERM/SIGHUP/SIGXCPU, a memory limit
        return stopped(PROG, exc, "run the same command again")
    finally:
        if bar is not None:
            bar.close()
    if result.duplicates:
        extra = sum(n - 1 for n in result.duplicates.values())
        shown = sorted(result.duplicates.items(), key=lambda item: (-item[1], item[0]))[:10]
        listing = ", ".join(f"{path} (x{n})" for path, n in shown)
        more = f", and {len(result.duplicates) - len(shown)} more" if len(result.duplicates) > len(shown) else ""
        print(
            f"{PROG}: warning: {plural(extra, 'duplicate entry', 'duplicate entries')} of "
            f"{plural(len(result.duplicates), 'document')} written once: {listing}{more}",
            file=sys.stderr,
        )
    n_docs = len(result.train) + len(result.validation)
    where = f" (relative to {args.input_files_prefix})" if args.input_files_prefix else ""
    emit(
        PROG,
        f"split {plural(n_docs, 'document')}{where} from {plural(result.entries, 'entry', 'entries')}: "
        f"{len(result.train)} train -> {result.train_path}, "
        f"{len(result.validation)} validation ({len(result.validation) / n_docs:.1%}) -> {result.validation_path}"
    )
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

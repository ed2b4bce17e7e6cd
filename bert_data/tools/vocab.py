"""``build_vocab``: train a WordPiece ``vocab.txt`` on the documents of metadata files
(the work is :mod:`bert_data.vocab_builder`'s)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Optional, Sequence

from ..errors import BertDataError, OutputError, print_error
from ..vocab_builder import build_vocab, write_vocab

PROG = "build_vocab"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Train a BERT WordPiece vocab.txt ([PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4) on the documents "
            "listed in metadata files. Same input and flags give a byte-identical file."
        ),
    )
    parser.add_argument("--metadata_files", nargs="+", required=True, help="metadata file(s), one document path per line")
    parser.add_argument("--input_files_prefix", default="", help="prefix joined to relative paths in the metadata files")
    parser.add_argument("--output", required=True, help="vocab.txt to write")
    parser.add_argument("--vocab_size", type=int, required=True, help="target vocabulary size (incl. special tokens)")
    parser.add_argument(
        "--do_lower_case", default=True, action=argparse.BooleanOptionalAction,
        help="lower-case and strip accents, for an uncased vocabulary (default: on; use --no-do_lower_case for cased)",
    )
    parser.add_argument("--min_frequency", type=int, default=2, help="least count of a pair to be merged (default 2)")
    parser.add_argument("--limit_alphabet", type=int, default=1000, help="most characters kept in the alphabet (default 1000)")
    parser.add_argument("--log_level", default="WARNING", help="logging level (default WARNING)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    started = time.perf_counter()
    try:
        if os.path.isdir(args.output):
            raise OutputError(f"--output {args.output} is a directory")
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
            raise OutputError(f"--output {args.output}: its directory does not exist")
        result = build_vocab(
            args.metadata_files, args.input_files_prefix, args.vocab_size, args.do_lower_case,
            args.min_frequency, args.limit_alphabet,
        )
        write_vocab(result.tokens, args.output)
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    size = len(result.tokens)
    note = "" if size == args.vocab_size else f" (asked for {args.vocab_size}: the corpus has no more pairs seen >= {args.min_frequency} times)"
    print(
        f"wrote {args.output}: {size} tokens{note}; alphabet {result.alphabet} characters + "
        f"{result.continuation} '##' forms; from {result.documents} documents "
        f"({result.skipped} skipped), {result.paragraphs} paragraphs, {result.characters} characters "
        f"in {time.perf_counter() - started:.1f}s. Use with create_tfrecords --vocab_file {args.output} "
        + ("--do_lower_case" if args.do_lower_case else "--no-do_lower_case")
    )
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

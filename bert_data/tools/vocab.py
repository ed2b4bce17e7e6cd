"""``build_vocab``: train a WordPiece ``vocab.txt`` on the documents of metadata files
(the work is :mod:`bert_data.vocab_builder`'s).

Cased by default, like ``create_tfrecords``: a vocabulary and the records made with it must use
the same ``--do_lower_case``, and the last line printed says which ``create_tfrecords`` flag
goes with the file written. Both passes over the corpus show a progress bar on a terminal
(``--quiet``: none)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any, Optional, Sequence

from ..errors import BertDataError, ConfigError, OutputError, print_error
from ..errors import plural
from ..vocab_builder import build_vocab, write_vocab
from ..documents import INPUT_FORMATS, ReadOptions
from .cli import GivenOnce, OneLineParser, resolve_log_level, terminal_bar, unknown_log_level
from .endings import emit, guarded, stopped

PROG = "build_vocab"


GUIDE = """\
what --vocab_size to choose:
  The size trades how finely words are cut (a small vocabulary splits words into many '##'
  pieces: longer sequences, less text per instance) against embedding parameters (size x hidden
  width). Reference points: BERT's English vocabularies have 30,522 (uncased) and 28,996 (cased)
  tokens, multilingual BERT 119,547. For one language, 16,000-32,000 is the usual range; a
  small or narrow corpus supports fewer (it stops early when no pair is seen --min_frequency
  times) and 8,000-16,000 is then typical. Keep it a multiple of 8 or 64 for fast embeddings
  on accelerators. The special tokens [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4) are included.

case: the vocabulary and create_tfrecords must use the same --do_lower_case. Both default to
  off (cased); pass --do_lower_case to both for an uncased vocabulary. The last line printed
  names the create_tfrecords flag that goes with the file written.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(  # usage errors are one line, as in every tool
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Train a BERT WordPiece vocab.txt ([PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4) on the documents "
            "listed in metadata files. Same input and flags give a byte-identical file."
        ),
        epilog=GUIDE,
    )
    parser.add_argument("--metadata_files", nargs="+", action=GivenOnce, required=True, help="metadata file(s), one document path per line")
    parser.add_argument("--input_files_prefix", default="", help="prefix joined to relative paths in the metadata files")
    parser.add_argument("--output", required=True, help="vocab.txt to write")
    parser.add_argument(
        "--vocab_size", type=int, required=True,
        help="target vocabulary size incl. the 5 special tokens (BERT: 30522 uncased, 28996 cased; see below)",
    )
    parser.add_argument(
        "--do_lower_case", default=False, action=argparse.BooleanOptionalAction,
        help="lower-case and strip accents, for an uncased vocabulary (default: off, cased, as in create_tfrecords; "
        "the vocabulary and create_tfrecords must use the same --do_lower_case)",
    )
    parser.add_argument(
        "--input_format", default="text", choices=INPUT_FORMATS,
        help="how the listed files hold documents, as in create_tfrecords (default text: a file is a document; "
        "jsonl: a JSON line is one, its text under --text_key; wikiextractor: a <doc> block is one)",
    )
    parser.add_argument("--text_key", default="text", help="jsonl: the key holding a document's text (default text)")
    parser.add_argument("--input_encoding", default="utf-8", help="the documents' encoding when not UTF-8 (default utf-8)")
    parser.add_argument("--min_frequency", type=int, default=2, help="least count of a pair to be merged (default 2)")
    parser.add_argument("--limit_alphabet", type=int, default=1000, help="most characters kept in the alphabet (default 1000)")
    parser.add_argument("--log_level", default="WARNING", help="logging level (DEBUG, INFO, WARNING, ERROR; default WARNING)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is only drawn when stderr is a terminal)")
    return parser


class _Bar:
    """:class:`bert_data.vocab_builder.VocabProgress` as one terminal bar per pass."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.documents = 0

    def start(self, description: str, total_bytes: int) -> None:
        self.finish()
        self.documents = 0
        self.bar = terminal_bar(description, total_bytes, quiet=self.quiet)

    def advance(self, nbytes: int) -> None:
        if self.bar is not None:
            self.documents += 1
            self.bar.set_postfix_str(f"documents={self.documents:,}", refresh=False)
            self.bar.update(nbytes)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _read_options(args: argparse.Namespace) -> ReadOptions:
    """How documents are read, checked by the same rules as create_tfrecords' flags."""
    from ..presets import build_config

    config = build_config({"input_format": args.input_format, "text_key": args.text_key,
                           "input_encoding": args.input_encoding}, require_inputs=False)
    return ReadOptions(input_format=config.input_format, text_key=config.text_key, encoding=config.input_encoding)


def _check_files(args: argparse.Namespace) -> None:
    """What build_vocab reads and writes, checked before the corpus is read: the metadata files
    are regular files (the corpus is read in more than one pass, so a pipe would be empty the
    second time, and a FIFO nobody writes to would hang), and ``--output`` is a path for a new or
    regular file that is none of the files read (the metadata files, the listed documents)."""
    import stat

    for path in args.metadata_files:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # missing or unreadable: the metadata reader says so
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise ConfigError(
                f"--metadata_files {path} is not a regular file (a pipe, FIFO or device); build_vocab reads the "
                "metadata more than once: write the list to a file and pass that"
            )
    if os.path.isdir(args.output):
        raise OutputError(f"--output {args.output} is a directory")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        raise OutputError(f"--output {args.output}: its directory does not exist")
    try:
        mode = os.stat(args.output).st_mode
    except OSError:
        return  # nothing there yet: no file read can be it
    if not stat.S_ISREG(mode):
        raise OutputError(f"--output {args.output} is not a regular file (a FIFO, socket or device); name a file for vocab.txt")
    from ..metadata import iter_metadata
    from ..identity import refuse_writing_over_inputs

    inputs = [("a --metadata_files file", path) for path in args.metadata_files]
    refuse_writing_over_inputs("--output", [args.output], inputs, "name another file for vocab.txt")
    listed = iter_metadata(args.metadata_files, args.input_files_prefix)
    documents = ((f"the document listed at {source.where()}", source.path) for source in listed)
    refuse_writing_over_inputs("--output", [args.output], documents, "name another file for vocab.txt")


def main(argv: Optional[Sequence[str]] = None) -> int:
    return guarded(PROG, lambda: _main(argv))


def _main(argv: Optional[Sequence[str]]) -> int:
    args = build_parser().parse_args(argv)
    level = resolve_log_level(args.log_level, quiet=True)
    if level is None:
        return print_error(PROG, unknown_log_level(args.log_level))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    started = time.perf_counter()
    try:
        _check_files(args)
        options = _read_options(args)
        bar = _Bar(args.quiet)
        try:
            result = build_vocab(
                args.metadata_files, args.input_files_prefix, args.vocab_size, args.do_lower_case,
                args.min_frequency, args.limit_alphabet, progress=bar, options=options,
            )
        finally:
            bar.finish()
        write_vocab(result.tokens, args.output)
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except (KeyboardInterrupt, MemoryError) as exc:  # Ctrl-C, SIGTERM/SIGHUP/SIGXCPU, a memory limit
        return stopped(PROG, exc, "run the same command again")
    size = len(result.tokens)
    note = "" if size == args.vocab_size else f" (asked for {args.vocab_size}: the corpus has no more pairs seen >= {args.min_frequency} times)"
    forms = plural(result.continuation, "'##' form")
    emit(
        PROG,
        f"wrote {args.output}: {plural(size, 'token')}{note}; alphabet {plural(result.alphabet, 'character')} + "
        f"{forms}; from {plural(result.documents, 'document')} ({result.skipped} skipped), "
        f"{plural(result.paragraphs, 'paragraph')}, {plural(result.characters, 'character')} "
        f"in {time.perf_counter() - started:.1f}s. Use with create_tfrecords --vocab_file {args.output} "
        + ("--do_lower_case" if args.do_lower_case else "--no-do_lower_case")
    )
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

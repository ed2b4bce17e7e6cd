"""``inspect_tfrecords``: look inside BERT pretraining TFRecords, without TensorFlow.

Four record layouts (:data:`bert_data.format.schema.SCHEMAS`) are understood: ``nsp`` and ``sop``
(``[CLS] A [SEP] B [SEP]`` with ``segment_ids`` and ``next_sentence_labels``; for SOP label 1
means A and B were swapped), ``mlm_only`` (``[CLS] window [SEP]`` with the masked-LM features
only; the window may hold document separators) and ``unmasked`` (``input_ids`` and
``input_mask`` only, masked in the reader). The layout of a directory's files is the one named
by ``record_schema`` (or the features listed under ``schema``) in its ``data_params.json``,
else the one whose feature names are exactly those of the first record (``nsp`` and ``sop``
share names: without a manifest such records are reported as ``nsp``). Only the checks and
statistics that apply to the layout are made.

Two modes:

* default: print the first ``-n`` instances decoded back to WordPiece text, segment A and B on
  separate lines (one token line for MLM-only and unmasked records). Every masked-LM
  prediction position is written ``token{original}``: so ``[MASK]{cat}`` was masked,
  ``dog{cat}`` was replaced by a random token and ``cat{cat}`` was kept unchanged (but is
  still predicted).
* ``--stats`` (implied by ``--json`` and ``--plot``): stream every record once and report the
  instance count, histograms of real lengths and (masked layouts) of predictions per
  instance, the NSP or SOP label balance (paired layouts), the mask composition (masked
  layouts), the ``[UNK]`` rate, and a check of every record against its schema
  (:mod:`bert_data.format.checks`) and of the files against ``data_params.json`` when there is one.

This module is the command line only (flags, messages, exit status); the work is done by
:mod:`bert_data.inspection`.

Exit status: 0 when everything checked is fine, 1 when a record is bad (schema violation,
malformed Example, corrupt frame) or the files disagree with ``data_params.json``, 2 for usage
and I/O errors (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Optional, Sequence

from ..errors import BertDataError, print_error
from ..format.manifest import MANIFEST_NAME, load_manifest
from ..inspection import InspectError
from ..inspection.inputs import InputFile, VocabInfo, load_vocab_info, manifest_vocab_path, resolve_inputs, vocab_differs
from ..inspection.printer import print_instances
from ..inspection.report import format_stats, import_pyplot, write_plot
from ..inspection.stats import inspect_stats

PROG = "inspect_tfrecords"

__all__ = ["PROG", "build_parser", "main", "entry_point"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Print BERT pretraining TFRecords (NSP, SOP, MLM-only or unmasked layout) decoded to WordPiece "
            "text, or (--stats) check every record against its schema and data_params.json and report "
            "length/masking/label statistics. "
            "Exit status: 0 ok, 1 bad records or manifest mismatch, 2 usage or I/O error."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a .tfrecords file, a glob, or an output directory")
    parser.add_argument(
        "--vocab_file", help="vocab.txt to decode ids with (default: vocab_file in data_params.json beside the files)"
    )
    parser.add_argument("-n", type=int, default=3, help="instances to print without --stats (default 3)")
    parser.add_argument("--stats", action="store_true", help="read every record: statistics and schema checks")
    parser.add_argument("--json", metavar="OUT", help="write the --stats report as JSON to OUT ('-' for stdout); implies --stats")
    parser.add_argument("--plot", metavar="OUT.png", help="length and masking histograms as a PNG (needs matplotlib); implies --stats")
    return parser


def _choose_vocab(args: argparse.Namespace, files: Sequence[InputFile], required: bool) -> Optional[VocabInfo]:
    """--vocab_file, else the vocab_file of the data_params.json beside the first file."""
    if args.vocab_file:
        return load_vocab_info(args.vocab_file)
    manifest = load_manifest(os.path.dirname(os.path.abspath(files[0].path)))
    path = manifest_vocab_path(manifest) if manifest else None
    if path is None:
        if required:
            raise InspectError(f"no vocabulary: pass --vocab_file (no {MANIFEST_NAME} naming one beside {files[0].path})")
        return None
    if not os.path.isfile(path):
        message = f"vocab_file {path} named in {manifest.path} does not exist; pass --vocab_file"
        if required:
            raise InspectError(message)
        print(f"{PROG}: warning: {message}", file=sys.stderr)
        return None
    return load_vocab_info(path)


def _print_mode(args: argparse.Namespace, files: Sequence[InputFile], vocab: VocabInfo) -> int:
    """Without --stats: print the first -n records; exit 1 when one of them is bad."""
    manifest = load_manifest(os.path.dirname(os.path.abspath(files[0].path)))
    if vocab_differs(vocab, manifest):
        assert manifest is not None
        print(
            f"{PROG}: warning: {vocab.path} is not the vocabulary recorded in {manifest.path} "
            "(sha256 differs): the decoded text may be wrong",
            file=sys.stderr,
        )
    return 1 if print_instances(files, vocab, args.n) else 0


def _write_json(report: Dict[str, Any], where: str) -> None:
    text = json.dumps(report, indent=1) + "\n"
    if where == "-":
        sys.stdout.write(text)
        return
    try:
        with open(where, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise InspectError(f"--json {where}: cannot be written ({exc.strerror or exc})") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stats = bool(args.stats or args.json or args.plot)
    try:
        if args.n < 0:
            raise InspectError(f"-n must be >= 0, got {args.n}")
        plt = import_pyplot() if args.plot else None
        files, dirs = resolve_inputs(args.paths)
        vocab = _choose_vocab(args, files, required=not stats)
        if not stats:
            assert vocab is not None
            return _print_mode(args, files, vocab)
        report = inspect_stats(files, vocab, dirs)
        if args.json != "-":
            print(format_stats(report))
        if args.json:
            _write_json(report, args.json)
        if plt is not None:
            write_plot(report, args.plot, plt)
        return 0 if report["ok"] else 1
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

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
* ``--stats`` (implied by ``--json`` and ``--plot``): read every record once and report the
  instance count, histograms of real lengths and (masked layouts) of predictions per
  instance, the NSP or SOP label balance (paired layouts), the mask composition (masked
  layouts), the ``[UNK]`` rate, and a check of every record against its schema
  (:mod:`bert_data.format.checks`) and of the files against ``data_params.json`` when there is one.

``--stats`` reads the files in ``--num_workers`` processes (default: the usable cores; the
report does not depend on the number) and shows a progress bar on a terminal (``--quiet``: none).
The epilog of ``--help`` says what each statistic means and what healthy values are.

This module is the command line only (flags, messages, exit status); the work is done by
:mod:`bert_data.inspection`.

An output directory is read as its manifest lists it (``data_params.json``, or the hidden
manifest of BERT-named files): only the listed shards, each checked to hold the records listed
(with ``--stats``); other files named like shards are named in a warning, not read. Only regular
files are read (a FIFO is refused, never waited on). ``--json`` and ``--plot`` never name a file
being read.

Exit status: 0 when everything checked is fine, 1 when a record is bad (schema violation,
malformed Example, corrupt frame) or the files disagree with ``data_params.json`` (a shard with
another record count than listed, a listed shard missing), 2 for usage and I/O errors (one line
on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from ..errors import BertDataError, print_error
from ..format.manifest import MANIFEST_NAME, load_file_manifest, named_output_manifests
from ..inspection import InspectError
from ..inspection.inputs import InputFile, VocabInfo, load_vocab_info, manifest_vocab_path, resolve_inputs, vocab_differs
from ..inspection.printer import print_instances
from ..inspection.report import format_stats, import_pyplot, shard_rows, write_plot
from ..inspection.stats import Inspection, inspect_files
from ..identity import refuse_writing_over_inputs, written_over_input
from .cli import OneLineParser, drop_stdout, terminal_bar
from .endings import STDOUT_PRODUCT, emit, flush_stdout, guarded, stopped

PROG = "inspect_tfrecords"

__all__ = ["PROG", "build_parser", "main", "entry_point"]


STATS_GUIDE = """\
what --stats reports, and what healthy BERT data looks like (defaults of create_tfrecords):
  instances          records read (valid + bad). Any bad record, or a mismatch with
                     data_params.json, makes the exit status 1.
  real length        tokens per instance incl. [CLS]/[SEP], before padding. Expect most at
                     max_seq_length (instances are packed full) and about --short_seq_prob
                     (10%) spread over shorter lengths; a big pile of short instances means
                     short documents or a wrong sentence splitter.
  masked positions   predictions per instance: about masked_lm_prob (15%) of the real tokens,
                     capped at max_predictions_per_seq (so full instances sit at the cap, e.g.
                     19-20 for 128 tokens). Many zeros mean masking is off or broken.
  NSP labels         random fraction: share of label 1 (B is a random segment). BERT draws a
                     random B half the time, plus always when a chunk holds one sentence:
                     50-65% is normal. Outside it (more than chance allows) a warning says why:
                     too few negatives (one document), or one-sentence chunks (sentence splits).
  SOP labels         swapped fraction: close to 50%.
  mask composition   of the predicted positions: [MASK] ~80%, kept ~10%, random ~10%.
  [UNK] rate         share of real tokens (not [CLS]/[SEP]/[PAD]/[MASK]) that are [UNK]. With
                     the vocabulary the data was made with: well under 0.1% for English text
                     and BERT's vocabularies. Above ~1%: the wrong vocabulary, or a cased
                     vocabulary with --do_lower_case (or the reverse), or another script.

With data_params.json, warnings also flag instances per pass far below what the corpus's
tokens allow, units without an NSP negative and documents cut into pieces; the last line is
then WARNINGS (the records are valid, the data is not what its settings make expected), never
OK. --json writes all of it (histograms, data_warnings, verdict) for scripts; --plot draws it
(length and prediction histograms on a log scale, label balance, mask composition, [UNK] rate
per file; the title says OK, WARNINGS or FAILED).
Exit status: 0 ok or warnings about the data, 1 bad records or manifest mismatch, 2 usage or
I/O error.
"""


def _workers(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(  # a usage error is one line, as in every other tool
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Print BERT pretraining TFRecords (NSP, SOP, MLM-only or unmasked layout) decoded to WordPiece "
            "text, or (--stats) check every record against its schema and data_params.json and report "
            "length/masking/label statistics."
        ),
        epilog=STATS_GUIDE,
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH",
        help="a .tfrecords file, a glob, or an output directory (the files its manifest lists)",
    )
    parser.add_argument(
        "--vocab_file", help="vocab.txt to decode ids with (default: vocab_file in data_params.json beside the files)"
    )
    parser.add_argument("-n", type=int, default=3, help="instances to print without --stats (default 3)")
    parser.add_argument("--stats", action="store_true", help="read every record: statistics and schema checks")
    parser.add_argument("--json", metavar="OUT", help="write the --stats report as JSON to OUT ('-' for stdout); implies --stats")
    parser.add_argument(
        "--plot", metavar="OUT.png",
        help="draw the --stats report as a PNG (needs matplotlib: pip install 'bert_data[plot]'); implies --stats",
    )
    parser.add_argument(
        "--num_workers", type=_workers, default=None,
        help="processes reading files at once with --stats (default: usable cores; the report is the same for any "
        "number)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is only drawn when stderr is a terminal)")
    return parser


def _choose_vocab(args: argparse.Namespace, files: Sequence[InputFile], required: bool) -> Optional[VocabInfo]:
    """--vocab_file, else the vocab_file of the manifest of the first file (the data_params.json
    beside it, or the hidden one of named output files)."""
    if args.vocab_file:
        return load_vocab_info(args.vocab_file)
    manifest = load_file_manifest(files[0].path)
    path = manifest_vocab_path(manifest) if manifest else None
    if path is None:
        if required:
            raise InspectError(f"no vocabulary: pass --vocab_file (no {MANIFEST_NAME} naming one beside {files[0].path})")
        return None
    if not os.path.exists(path):  # there but not a regular file: load_vocab_info says what it is
        message = f"vocab_file {path} named in {manifest.path} does not exist; pass --vocab_file"
        if required:
            raise InspectError(message)
        print(f"{PROG}: warning: {message}", file=sys.stderr)
        return None
    return load_vocab_info(path)


def _print_mode(args: argparse.Namespace, files: Sequence[InputFile], vocab: VocabInfo) -> int:
    """Without --stats: print the first -n records; exit 1 when one of them is bad."""
    manifest = load_file_manifest(files[0].path)
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


def _stats(args: argparse.Namespace, files: Sequence[InputFile], vocab: Optional[VocabInfo], dirs: Sequence[str]) -> Inspection:
    """Read every record, with a progress bar (file bytes, records) on a terminal."""
    workers = args.num_workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f.path)
        except OSError:
            pass
    bar = terminal_bar("reading", total, quiet=args.quiet)
    if bar is None:
        return inspect_files(files, vocab, dirs, workers)
    records = 0

    def progress(n: int, nbytes: int) -> None:
        nonlocal records
        records += n
        bar.set_postfix_str(f"records={records:,}", refresh=False)
        bar.update(nbytes)

    try:
        return inspect_files(files, vocab, dirs, workers, progress)
    finally:
        bar.close()


def _check_outputs(args: argparse.Namespace, files: Sequence[InputFile], vocab: Optional[VocabInfo]) -> None:
    """--json and --plot never name a file this run reads: a record file, a manifest beside one,
    the vocabulary (:func:`bert_data.identity.refuse_writing_over_inputs`), nor each other."""
    # (matplotlib raised ValueError for another suffix, and added .png to a name without one or to a directory)
    if args.plot and (not args.plot.lower().endswith(".png") or os.path.isdir(args.plot)):
        raise InspectError(f"--plot {args.plot}: give a file name ending in .png (the plot is a PNG)")
    outputs = [(flag, path) for flag, path in (("--json", args.json), ("--plot", args.plot)) if path and path != "-"]
    if len(outputs) == 2 and written_over_input([outputs[0][1]], [("--json", outputs[1][1])]):
        raise InspectError(f"--plot {args.plot} is the file --json writes; give them different names")
    inputs = [("a record file inspected", f.path) for f in files]
    for directory in dict.fromkeys(os.path.dirname(os.path.abspath(f.path)) for f in files):
        inputs.append(("the manifest of the files inspected", os.path.join(directory, MANIFEST_NAME)))
        inputs += [("the manifest of the files inspected", path) for path, _ in named_output_manifests(directory)]
    if vocab is not None:
        inputs.append(("the vocabulary in use", vocab.path))
    for flag, path in outputs:
        refuse_writing_over_inputs(flag, [path], inputs, "name another output file")


def main(argv: Optional[Sequence[str]] = None) -> int:
    STDOUT_PRODUCT[PROG] = "report"  # (inspect's output: a stdout that cannot take it is not exit 0)
    code = guarded(PROG, lambda: _main(argv))
    if not flush_stdout(PROG):  # now: a full or closed stdout is one line, not a traceback at exit
        return code or 3
    return code


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stats = bool(args.stats or args.json or args.plot)
    try:
        if args.n < 0:
            raise InspectError(f"-n must be >= 0, got {args.n}")
        plt = import_pyplot() if args.plot else None
        notes: List[str] = []
        files, dirs = resolve_inputs(args.paths, notes)
        vocab = _choose_vocab(args, files, required=not stats)
        _check_outputs(args, files, vocab)
        if not stats:
            assert vocab is not None
            for note in notes:
                print(f"{PROG}: warning: {note}", file=sys.stderr)
            return _print_mode(args, files, vocab)
        found = _stats(args, files, vocab, dirs)
        report = found.report
        report["warnings"] = notes + report["warnings"]
        if args.json != "-":
            emit(PROG, format_stats(report))
        if args.json:
            _write_json(report, args.json)
        if plt is not None:
            write_plot(report, args.plot, plt, shards=shard_rows(found.files))
        return 0 if report["ok"] else 1
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    except BrokenPipeError:  # e.g. piped into head
        drop_stdout()
        return 0
    except (KeyboardInterrupt, MemoryError) as exc:  # Ctrl-C, SIGTERM/SIGHUP/SIGXCPU, a memory limit
        return stopped(PROG, exc, "run the same command again")


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

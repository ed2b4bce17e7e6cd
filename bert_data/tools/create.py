"""``create_tfrecords``: the command-line front end (flags named as in the Cerebras Model Zoo).

Parses flags into a :class:`~bert_data.config.Config` (defaults < ``--config`` YAML < flags),
runs the pipeline, and turns every :class:`~bert_data.errors.BertDataError` into one line on
stderr and exit code 2. Library code never sees argparse.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from ..config import COMPRESSIONS, Config
from ..format.containers import OUTPUT_FORMATS
from ..documents import INPUT_FORMATS
from ..errors import NOTHING_WRITTEN, BertDataError, ConfigError, print_error
from ..presets import FileSettings, byte_size, configure, effective_yaml, preset_names, token_count
from ..progress import RunProgress, run_summary
from . import started_as_program
from .cli import GivenOnce, OneLineParser, drop_stdout, resolve_log_level, unknown_log_level
from .endings import emit, guarded, os_error, stopped, work_is_done

PROG = "create_tfrecords"


def _flag(parser: argparse.ArgumentParser, name: str, help: str, **kwargs: Any) -> None:
    parser.add_argument(f"--{name}", default=None, help=help, **kwargs)


def _bool_flag(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    parser.add_argument(f"--{name}", default=None, action=argparse.BooleanOptionalAction, help=help)


EPILOG = """\
examples:
  create_tfrecords --metadata_files meta.txt --input_files_prefix /data/txt --vocab_file vocab.txt \\
      --do_lower_case --config bert_base_msl128 --output_dir out/msl128 --num_output_files 256
  create_tfrecords ... --input_format jsonl --validation_fraction 0.01    # JSON Lines, held-out split
  create_tfrecords ... --resume                                           # after a crash or Ctrl-C

exit codes: 0 done; 2 a user error (one line: what, where, the fix); 3 a worker died (continue with
--resume); 130 interrupted (continue with --resume); 1 the Beam pipeline failed.
Check the result with `inspect_tfrecords OUTPUT_DIR --stats`; recipes: docs/recipes.md.
"""


MLM_ONLY_PROG = "create_tfrecords_mlm_only"
DESCRIPTIONS = {
    PROG: "Turn raw text documents into BERT pretraining TFRecords (masked LM + next sentence prediction).",
    MLM_ONLY_PROG: "Turn raw text documents into masked-LM-only BERT pretraining TFRecords: windows of "
    "[CLS] ... [SEP] over the token stream, no segment_ids or next-sentence label (create_tfrecords --mlm_only; "
    "the Model Zoo's create_tfrecords_mlm_only.py flags and defaults).",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    d = Config()
    parser = OneLineParser(
        prog=prog,
        description=DESCRIPTIONS[prog],
        argument_default=None,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = parser.add_argument_group("inputs")
    _flag(io, "metadata_files", "metadata file(s), each listing one document path per line", nargs="+", action=GivenOnce)
    _flag(io, "input_files_prefix", f"prefix joined to relative paths in the metadata files (default {d.input_files_prefix!r})")
    _bool_flag(io, "multiple_docs_in_single_file", "each input file holds several documents split by --multiple_docs_separator")
    _flag(io, "multiple_docs_separator", "as in the Model Zoo, documents are split on a newline followed by this: the "
          "default (\\n) means a blank line between documents, '-----' a line starting with -----, '' every line "
          "a document (escapes like \\n allowed)")
    _bool_flag(io, "single_sentence_per_line", "every non-empty input line is one sentence: spaCy is not used")
    _flag(io, "spacy_model", "installed spaCy pipeline for sentence boundaries (default: rule-based sentencizer)")
    _flag(io, "config", "a preset by name (" + ", ".join(preset_names()) + ") or a YAML file of any of these "
          "flags; explicit flags override it")

    tok = parser.add_argument_group("tokenization")
    _flag(tok, "vocab_file", "WordPiece vocab.txt (required)")
    _bool_flag(tok, "do_lower_case", f"lower-case and strip accents, for uncased vocabularies; the vocabulary (build_vocab) "
               f"and create_tfrecords must use the same --do_lower_case (default {d.do_lower_case})")

    inst = parser.add_argument_group("instances")
    _flag(inst, "max_seq_length", f"tokens per instance incl. [CLS]/[SEP] (default {d.max_seq_length})", type=int)
    _flag(inst, "dupe_factor", "passes over the data, each with different pairs and masks. Disk grows "
          "linearly with it: at --max_seq_length 128 each pass writes about 2x the input text in records (dupe 10: "
          "~20x the text, ~6x with --compression gzip); time less: text is tokenized once, so dupe 10 takes ~2.4x "
          "the time of dupe 1 (docs/performance.md) "
          f"(default {d.dupe_factor})", type=int)
    _flag(inst, "short_seq_prob", f"probability of a shorter target length (default {d.short_seq_prob})", type=float)
    _flag(inst, "min_short_seq_length", "smallest target length for short sequences (default 2; with --mlm_only "
          "2 + --overlap_size, as in the Model Zoo)", type=int)
    _flag(inst, "masked_lm_prob", f"fraction of tokens masked (default {d.masked_lm_prob})", type=float)
    _flag(inst, "max_predictions_per_seq", f"masked positions per instance at most (default {d.max_predictions_per_seq})", type=int)
    _bool_flag(inst, "mask_whole_word", f"mask every WordPiece of a word together (default {d.mask_whole_word})")
    _flag(inst, "seed", f"random seed; same seed and input give byte-identical output (default {d.seed})", type=int)
    _flag(inst, "split_num", "documents (metadata entries) per group at most: the unit of work, memory, resume and "
          "NSP negatives (drawn from the same group). Keep it in the hundreds or more; a corpus should make at least "
          f"~10 groups per worker (the log says how many), so lower it only for small corpora (default {d.split_num})",
          type=int)
    _flag(inst, "group_bytes", "a group's text at most, e.g. 8M: bounds a worker's memory; a larger file spans several "
          "groups (default 8M)", type=byte_size)
    _flag(inst, "max_document_chars", "longer documents are cut into consecutive pieces at line breaks, counted in "
          "data_params.json (default 1M)", type=byte_size)

    out = parser.add_argument_group("output")
    _flag(out, "output_dir", f"where shards and data_params.json go (default {d.output_dir})")
    _flag(out, "num_output_files", f"number of shards (default {d.num_output_files})", type=int)
    _flag(out, "name", f"shard file prefix: NAME-1.tfrecords ... (default {d.name})")
    _flag(out, "compression", f"shard compression (default {d.compression})", choices=COMPRESSIONS)
    _flag(out, "output_format", "tfrecord (padded tf.train.Examples), parquet (NAME-N.parquet: unpadded columns for "
          "datasets/pyarrow), mds (MosaicML streaming: NAME-N.PIECE.mds + index.json) or hdf5 (with --packing: "
          "NVIDIA's MLPerf packed samples, NAME-N.hdf5); see docs/recipes.md "
          f"(default {d.output_format})", choices=OUTPUT_FORMATS)
    _bool_flag(out, "overwrite", "replace a previous run's output in --output_dir")
    _flag(out, "validation_fraction", "split documents (by a seeded hash of their metadata entry) into "
          "OUTPUT_DIR/train and OUTPUT_DIR/validation before any instance is made", type=float)
    _flag(out, "validation_metadata_files", "metadata file(s) of the validation documents: writes "
          "OUTPUT_DIR/train and OUTPUT_DIR/validation (listed documents are kept out of train)", nargs="+",
          action=GivenOnce)
    _bool_flag(out, "resume", "continue an interrupted run in --output_dir (same settings); output is byte-identical")
    _flag(io, "from_tokens", "a token cache made by `bert-data tokenize` from these inputs: its groups' tokens are read "
          "instead of reading, segmenting and tokenizing the text; byte-identical output (docs/performance.md)")

    run = parser.add_argument_group("execution")
    _flag(run, "num_workers", "worker processes (default: usable cores)", type=int)
    _flag(run, "log_level", "logging level (DEBUG, INFO, WARNING, ERROR; default INFO)")
    run.add_argument(
        "--print_config", action="store_true", default=None,
        help="print the effective settings (defaults < --config < flags) as YAML, checked, and exit without running",
    )
    parser.set_defaults(log_level=None)
    _add_input_format_flags(parser)
    _add_objective_flags(parser)
    _add_runner_flags(parser)
    return parser


def _add_input_format_flags(parser: argparse.ArgumentParser) -> None:
    d = Config()
    fmt = parser.add_argument_group("input formats")
    _flag(
        fmt,
        "input_format",
        f"'text': each file is a document; 'jsonl': each JSON line is one; 'wikiextractor': each <doc ...> ... "
        f"</doc> block of WikiExtractor's output is one, its repeated title line dropped; 'bert': google-research/bert's "
        f"layout, one sentence per line, blank lines between documents (default {d.input_format}); "
        "files may be .gz/.bz2/.xz compressed (.zst with the zstandard module)",
        choices=INPUT_FORMATS,
    )
    _flag(fmt, "text_key", f"jsonl: key holding a document's text (default {d.text_key!r})")
    _flag(fmt, "input_encoding", "documents' text encoding when it is not UTF-8, e.g. latin-1 or cp1252 (default "
          "utf-8; UTF-16/32 files with a byte-order mark are recognised either way)")
    parser.add_argument(
        "--quiet", action="store_true", default=None, help="no progress bar; log level WARNING unless --log_level is given"
    )


_NOT_SETTINGS = ("config", "log_level", "quiet", "print_config")


def config_from_args(args: argparse.Namespace, require_inputs: bool = True) -> Config:
    """The Config of the parsed flags and their ``--config`` file (defaults < file < flags)."""
    return configured_from_args(args, require_inputs)[0]


def configured_from_args(
    args: argparse.Namespace, require_inputs: bool = True
) -> Tuple[Config, Optional[FileSettings]]:
    """The Config of the flags and ``--config``, and what that file set (for the run's error lines:
    :func:`explained`)."""
    overrides: Dict[str, Any] = {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS}
    return configure(overrides, config_file=args.config, require_inputs=require_inputs)


def explained(message: str, from_file: Optional[FileSettings]) -> str:
    """A run's error line, pointing at the --config file where it is about a setting the file
    gave (the settings' own checks are explained by :func:`configure`). Other flags it names are
    left alone: a run's line may name another command's (``bert-data tokenize --output_dir``)."""
    return from_file.explain(message, mentions=False) if from_file is not None else message


def _print_config(args: argparse.Namespace, prog: str = PROG) -> int:
    """--print_config: the merged, checked settings as a YAML preset on stdout; nothing runs."""
    try:
        config = config_from_args(args, require_inputs=False)
    except BertDataError as exc:
        return print_error(prog, str(exc), exc.exit_code)
    source = f"--config {args.config}" if args.config is not None else ""
    try:
        sys.stdout.write(effective_yaml(config, source))
        sys.stdout.flush()
    except BrokenPipeError:  # | head: the reader has all it wanted
        drop_stdout()
    return 0


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    return guarded(prog, lambda: _main(argv, prog), then=NOTHING_WRITTEN, writes_output=True)


def _main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    if prog == MLM_ONLY_PROG:
        parser.set_defaults(mlm_only=True)
    argv, pipeline_args = _split_pipeline_args(argv)
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # --help | head
        drop_stdout()
        return 0
    if args.print_config:
        return _print_config(args, prog)
    level = resolve_log_level(args.log_level, bool(args.quiet))
    if level is None:
        return print_error(prog, unknown_log_level(args.log_level))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("bert_data").setLevel(level)  # even when logging was configured before main()
    config, from_file = None, None
    from ..runners.job import error_line, next_step, run_job

    try:
        config, from_file = configured_from_args(args)
        if started_as_program() and config.output_dir.startswith("memory://"):  # (exit 0, then the data was gone)
            raise ConfigError(f"--output_dir {config.output_dir}: memory:// lives in this process and is gone when it "
                              f"exits; write to a path or a shared URL (memory:// is for a library caller of run_job)")

        started = time.perf_counter()
        if pipeline_args and config.runner != "beam":
            return print_error(prog, "pipeline options after '--' are for --runner beam")
        quiet = bool(args.quiet) or config.runner == "beam"  # Beam's runner reports its own progress
        with RunProgress(stream=sys.stderr, quiet=quiet) as progress:
            manifests = run_job(config, on_group=progress.update, on_start=progress.start, pipeline_args=pipeline_args)
            work_is_done()  # (a stop while the summary prints, or at exit, changes nothing now)
        elapsed = time.perf_counter() - started
    except BertDataError as exc:
        return print_error(prog, explained(error_line(exc), from_file), exc.exit_code)
    except (KeyboardInterrupt, MemoryError) as exc:  # Ctrl-C, SIGTERM/SIGHUP/SIGXCPU, a memory limit
        return stopped(prog, exc, next_step(config))
    except OSError as exc:  # the last resort (the runner names what it knows): still one line
        way_on = next_step(config).replace("continue later", "continue")
        return print_error(prog, explained(f"{os_error(exc)}; fix it, then {way_on}", from_file))
    emit(prog, run_summary(manifests, elapsed))
    return 0


def _add_runner_flags(parser: argparse.ArgumentParser) -> None:
    d = Config()
    runner = parser.add_argument_group(
        "runner", "create_tfrecords --runner beam [flags] -- [Beam pipeline options, e.g. --runner DataflowRunner ...]"
    )
    _flag(
        runner,
        "runner",
        f"'local': worker processes on this machine; 'beam': an Apache Beam pipeline, options after '--' "
        f"(see docs/beam.md); 'dask': a dask.distributed cluster, or a LocalCluster of --num_workers processes "
        f"(docs/cluster.md) (default {d.runner})",
        choices=("local", "beam", "dask"),
    )
    _flag(runner, "scheduler_address", "--runner dask: the scheduler of a running cluster, tcp://HOST:PORT (default: "
          "start a LocalCluster)")
    _flag(runner, "scheduler_file", "--runner dask: a scheduler file (dask-jobqueue, dask scheduler --scheduler-file)")
    _bool_flag(runner, "dask_dashboard", "--runner dask: serve the LocalCluster's dashboard and log its link (default off)")


def _split_pipeline_args(argv: Optional[Sequence[str]]):
    """(our flags, Beam pipeline options): everything after the first bare '--' goes to Beam."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        cut = args.index("--")
        return args[:cut], args[cut + 1:]
    return args, []


def entry_point() -> None:
    sys.exit(main())


def _add_objective_flags(parser: argparse.ArgumentParser) -> None:
    d = Config()
    obj = parser.add_argument_group("training objective (MLM-only / SOP)")
    _bool_flag(obj, "mlm_only", "masked-LM only: windows of [CLS] ... [SEP] over the token stream, no segment_ids / NSP label")
    _bool_flag(
        obj,
        "sentence_order_prediction",
        "ALBERT sentence-order prediction: B is A's true continuation, swapped with probability 0.5 "
        "(next_sentence_labels 1 = swapped)",
    )
    _bool_flag(obj, "disable_masking", "with --mlm_only: store the windows unmasked, once (--dupe_factor is taken as 1 "
               "with --unmasked_format tokens); mask dynamically in the reader")
    _flag(obj, "unmasked_format", "with --disable_masking: 'tokens', the Model Zoo's SequenceExample of WordPiece strings "
          "for its dynamic-masking reader (default), or 'ids', int64 input_ids/input_mask for "
          "bert_data.pretraining_dataset(dynamic_masking=True)", choices=("tokens", "ids"))
    _bool_flag(
        obj,
        "allow_cross_document_examples",
        f"with --mlm_only: windows may span documents of a group, split by --document_separator_token "
        f"(default {d.allow_cross_document_examples})",
    )
    _flag(obj, "document_separator_token", f"with --mlm_only: token between documents (default {d.document_separator_token})")
    _flag(obj, "overlap_size", "with --mlm_only: tokens shared by consecutive windows (default --max_seq_length / 4, "
          "as in the Model Zoo)", type=int)
    _flag(
        obj,
        "buffer_size",
        f"with --mlm_only: window tokens assembled and masked at once; bounds that memory (default {d.buffer_size})",
        type=token_count,
    )
    pack = parser.add_argument_group("packing (docs/packing.md)")
    _bool_flag(pack, "packing", "padding-free rows: up to --max_sequences_per_pack instances per row, each with its own "
               "positions, predictions and NSP/SOP label (Habana's MLPerf packed layout); the same instances as without")
    _flag(pack, "max_sequences_per_pack", f"with --packing: instances per row at most (default {d.max_sequences_per_pack}, "
          "as in every MLPerf layout)", type=int)


def mlm_only_entry_point() -> None:
    """``create_tfrecords_mlm_only``: ``create_tfrecords --mlm_only ...``, with its own name in
    --help and in messages."""
    sys.exit(main(prog=MLM_ONLY_PROG))


if __name__ == "__main__":
    entry_point()

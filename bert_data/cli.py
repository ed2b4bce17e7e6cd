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
from typing import Any, Dict, List, Optional, Sequence

from .config import COMPRESSIONS, Config, build_config
from .errors import BertDataError

PROG = "create_tfrecords"


def _flag(parser: argparse.ArgumentParser, name: str, help: str, **kwargs: Any) -> None:
    parser.add_argument(f"--{name}", default=None, help=help, **kwargs)


def _bool_flag(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    parser.add_argument(f"--{name}", default=None, action=argparse.BooleanOptionalAction, help=help)


def build_parser() -> argparse.ArgumentParser:
    d = Config()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Turn raw text documents into BERT pretraining TFRecords (masked LM + next sentence prediction).",
        argument_default=None,
    )
    io = parser.add_argument_group("inputs")
    _flag(io, "metadata_files", "metadata file(s), each listing one document path per line", nargs="+")
    _flag(io, "input_files_prefix", f"prefix joined to relative paths in the metadata files (default {d.input_files_prefix!r})")
    _bool_flag(io, "multiple_docs_in_single_file", "each input file holds several documents split by --multiple_docs_separator")
    _flag(io, "multiple_docs_separator", "separator between documents inside one file (escapes like \\n allowed; default newline)")
    _bool_flag(io, "single_sentence_per_line", "every non-empty input line is one sentence: spaCy is not used")
    _flag(io, "spacy_model", "installed spaCy pipeline for sentence boundaries (default: rule-based sentencizer)")
    _flag(io, "config", "YAML preset of any of these flags; explicit flags override it")

    tok = parser.add_argument_group("tokenization")
    _flag(tok, "vocab_file", "WordPiece vocab.txt (required)")
    _bool_flag(tok, "do_lower_case", f"lower-case and strip accents (uncased vocabularies) (default {d.do_lower_case})")

    inst = parser.add_argument_group("instances")
    _flag(inst, "max_seq_length", f"tokens per instance incl. [CLS]/[SEP] (default {d.max_seq_length})", type=int)
    _flag(inst, "dupe_factor", f"passes over the data, each with different masks (default {d.dupe_factor})", type=int)
    _flag(inst, "short_seq_prob", f"probability of a shorter target length (default {d.short_seq_prob})", type=float)
    _flag(inst, "min_short_seq_length", f"smallest target length for short sequences (default {d.min_short_seq_length})", type=int)
    _flag(inst, "masked_lm_prob", f"fraction of tokens masked (default {d.masked_lm_prob})", type=float)
    _flag(inst, "max_predictions_per_seq", f"masked positions per instance at most (default {d.max_predictions_per_seq})", type=int)
    _bool_flag(inst, "mask_whole_word", f"mask every WordPiece of a word together (default {d.mask_whole_word})")
    _flag(inst, "seed", f"random seed; same seed and input give byte-identical output (default {d.seed})", type=int)
    _flag(inst, "split_num", f"documents per group: the unit of work, memory and NSP negatives (default {d.split_num})", type=int)

    out = parser.add_argument_group("output")
    _flag(out, "output_dir", f"where shards and data_params.json go (default {d.output_dir})")
    _flag(out, "num_output_files", f"number of shards (default {d.num_output_files})", type=int)
    _flag(out, "name", f"shard file prefix: NAME-1.tfrecords ... (default {d.name})")
    _flag(out, "compression", f"shard compression (default {d.compression})", choices=COMPRESSIONS)
    _bool_flag(out, "overwrite", "replace a previous run's output in --output_dir")

    run = parser.add_argument_group("execution")
    _flag(run, "num_workers", "worker processes (default: usable cores)", type=int)
    _flag(run, "log_level", "logging level (DEBUG, INFO, WARNING, ERROR; default INFO)")
    parser.set_defaults(log_level=None)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: Dict[str, Any] = {k: v for k, v in vars(args).items() if k not in ("config", "log_level")}
    return build_config(overrides, config_file=args.config)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=(args.log_level or "INFO").upper(), format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        config = config_from_args(args)
        from .pipeline import run

        started = time.perf_counter()
        manifest = run(config)
        elapsed = time.perf_counter() - started
    except BertDataError as exc:
        return _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    skipped = manifest["documents"]["skipped"]
    print(
        f"wrote {manifest['n_examples']} instances from {manifest['n_docs']} documents "
        f"({manifest['documents']['read']} read, {sum(skipped.values())} skipped"
        + (f": {', '.join(f'{k} {v}' for k, v in skipped.items())}" if skipped else "")
        + f") into {config.num_output_files} shards in {config.output_dir} in {elapsed:.1f}s"
    )
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

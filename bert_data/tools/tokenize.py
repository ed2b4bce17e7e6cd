"""``bert-data tokenize``: the corpus read, segmented and tokenized once into a token cache.

It takes ``create_tfrecords``' flags that decide the tokens and the plan (inputs, input format,
vocabulary, casing, segmenter, ``--split_num``, ``--group_bytes``, ``--max_document_chars``,
``--config``) and ``--output_dir``, ``--num_workers``, ``--overwrite``; every instance setting stays
open for the runs that read the cache (``create_tfrecords --from_tokens DIR``), so an instance or
output flag here is a usage error (one line, exit 2). See :mod:`bert_data.token_cache`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from typing import Iterator, Optional, Sequence

from ..errors import NOTHING_WRITTEN, BertDataError, print_error
from .cli import resolve_log_level, unknown_log_level
from .create import build_parser, configured_from_args, explained
from .endings import emit, guarded, os_error, stopped, work_is_done

PROG = "bert-data tokenize"

# create_tfrecords' flags that tokenize takes (the rest are the runs' own, given to create --from_tokens)
TOKENIZE_FLAGS = frozenset({
    "metadata_files", "input_files_prefix", "multiple_docs_in_single_file", "multiple_docs_separator",
    "single_sentence_per_line", "spacy_model", "config", "vocab_file", "do_lower_case", "split_num", "group_bytes",
    "max_document_chars", "output_dir", "overwrite", "resume", "num_workers", "log_level", "quiet", "input_format",
    "text_key", "input_encoding", "input_file", "seed",
})
BERT_RANDOM_SEED = 12345  # create_pretraining_data's --random_seed default: the seed of a cache made for it


def main(argv: Optional[Sequence[str]] = None) -> int:
    return guarded(PROG, lambda: _main(argv), then=NOTHING_WRITTEN, writes_output=True)


NEEDS_OUTPUT_DIR = "--output_dir is required: the local (or mounted) directory the token cache goes to"


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    parser.prog = PROG
    parser.description = ("Read, segment and tokenize the documents once into a token cache (Megatron .bin/.idx per "
                          "group + a manifest) that create_tfrecords --from_tokens DIR turns into instances of any "
                          "length, objective, packing and format. Takes create_tfrecords' input, vocabulary and plan flags.")
    parser.add_argument("--input_file", default=None, help=(
        "instead of --metadata_files: create_pretraining_data's --input_file (BERT's comma-separated globs, BERT's "
        "corpus layout), for `create_pretraining_data --from_tokens DIR`"))
    _seed_help(parser)
    args = parser.parse_args(argv)
    given = sorted(name for name, value in vars(args).items() if value is not None and name not in TOKENIZE_FLAGS)
    if given:
        if given[0] in ("validation_fraction", "validation_metadata_files"):  # (create --from_tokens refuses them too)
            return print_error(PROG, f"--{given[0]}: a cache holds the groups of one metadata list; split the metadata "
                                     f"first (split_metadata) and tokenize each half into a cache of its own")
        return print_error(PROG, f"--{given[0]} is a create_tfrecords setting, not a tokenize one: one cache serves any "
                                 f"value of it; give it to create_tfrecords --from_tokens DIR")
    if args.output_dir is not None and "://" in args.output_dir:
        return print_error(PROG, NEEDS_OUTPUT_DIR)
    level = resolve_log_level(args.log_level, bool(args.quiet))
    if level is None:
        return print_error(PROG, unknown_log_level(args.log_level))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("bert_data").setLevel(level)
    from ..runners.tokenize import run_tokenize

    started = time.perf_counter()
    from_file = None
    try:
        with _bert_input_list(args):
            config, from_file = configured_from_args(args)
            if args.output_dir is None and "output_dir" not in (from_file.values if from_file else {}):
                return print_error(PROG, NEEDS_OUTPUT_DIR)  # (no default: a cache goes where it is told)
            if "://" in config.output_dir:
                return print_error(PROG, explained(f"--output_dir {config.output_dir}: a token cache goes to a local (or "
                                                   f"mounted) directory, not a URL", from_file))
            manifest, pool_kept = run_tokenize(config)
            work_is_done()  # (a stop while the summary prints, or at exit, changes nothing now)
    except BertDataError as exc:
        return print_error(PROG, explained(str(exc), from_file), exc.exit_code)
    except (KeyboardInterrupt, MemoryError) as exc:
        return stopped(PROG, exc, "run the same command again (the groups already written are kept)")
    except OSError as exc:
        return print_error(PROG, explained(f"{os_error(exc)}; fix it, then run the same command again", from_file))
    counts = manifest["counts"]
    ratio = manifest["bytes"] / max(1, counts["input_bytes"])
    emit(PROG, f"{len(manifest['groups'])} groups, {counts['documents.used']} documents, {counts['sentences']} sentences, "
               f"{counts['tokens']} tokens ({manifest['dtype']}): {manifest['bytes']} bytes, {ratio:.2f}x the text, "
               f"in {time.perf_counter() - started:.1f}s" + (f"; NSP's negative pool for --seed {config.seed} kept" if pool_kept else ""))
    return 0


def _seed_help(parser: argparse.ArgumentParser) -> None:
    """``--seed`` here names the seed of the NSP runs to come, not this run's (tokens have none)."""
    for action in parser._actions:
        if action.dest == "seed":
            action.help = (f"the --seed of the NSP runs to come from this cache: their negative pool is made now and kept, "
                           f"so those runs never load spaCy (default: create_tfrecords' 0; with --input_file, "
                           f"create_pretraining_data's --random_seed {BERT_RANDOM_SEED}); a run with another seed makes "
                           f"its own once")


@contextlib.contextmanager
def _bert_input_list(args: argparse.Namespace) -> Iterator[None]:
    """``--input_file``: the globs expanded as create_pretraining_data expands them, listed (one
    absolute path per line, its own input list) as this run's metadata, so that its cache is the one
    ``create_pretraining_data --from_tokens`` finds made from its inputs; BERT's layout is implied."""
    patterns = args.input_file
    del args.input_file
    if patterns is None:
        yield
        return
    from ..errors import ConfigError
    from ..output.named_files import expand_input_patterns, write_input_list
    from ..output.scratch import scratch_context

    if args.metadata_files:
        raise ConfigError("--input_file and --metadata_files both name the inputs: give one of them")
    if args.input_format not in (None, "bert"):
        raise ConfigError(f"--input_file reads BERT's corpus layout (create_pretraining_data's), not --input_format "
                          f"{args.input_format}: drop --input_format, or list the files in --metadata_files")
    if args.seed is None:
        args.seed = BERT_RANDOM_SEED
    files = expand_input_patterns(patterns)
    with scratch_context("inputs") as staging:
        args.metadata_files, args.input_format = [write_input_list(staging, files)], "bert"
        yield


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

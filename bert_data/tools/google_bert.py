"""``create_pretraining_data``: google-research/bert's command line, unchanged.

Takes the 11 flags of BERT's ``create_pretraining_data.py`` with their names, defaults and absl
syntax (``--flag=value``, ``--flag value``, ``-flag``, booleans ``--flag`` / ``--noflag`` /
``--flag=true|false|1|0``, ``--flagfile=F``), reads BERT's corpus layout (one sentence per line,
blank lines between documents: ``--input_format bert``) from a comma-separated list of globs,
and writes the instances round-robin into the ``--output_file`` list
(:mod:`bert_data.output.named_files`), plus our extras: worker processes, ``--resume``, a
manifest beside the output. Differences from BERT are listed in docs/migrating.md.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import NOTHING_WRITTEN, BertDataError, ConfigError, print_error
from .cli import clip, drop_stdout, resolve_log_level, unknown_log_level
from .endings import emit, guarded, os_error, stopped, work_is_done

PROG = "create_pretraining_data"


class UsageError(ConfigError):
    """A command-line problem (unknown flag, bad value, missing value)."""


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str  # "string", "bool", "integer", "float"
    default: Any
    help: str


# BERT's flags, in its order, with its defaults and help texts.
BERT_FLAGS = (
    Flag("input_file", "string", None, "Input raw text file (or comma-separated list of files)."),
    Flag("output_file", "string", None, "Output TF example file (or comma-separated list of files)."),
    Flag("vocab_file", "string", None, "The vocabulary file that the BERT model was trained on."),
    Flag("do_lower_case", "bool", True,
         "Whether to lower case the input text. Should be True for uncased models and False for cased models."),
    Flag("do_whole_word_mask", "bool", False, "Whether to use whole word masking rather than per-WordPiece masking."),
    Flag("max_seq_length", "integer", 128, "Maximum sequence length."),
    Flag("max_predictions_per_seq", "integer", 20, "Maximum number of masked LM predictions per sequence."),
    Flag("random_seed", "integer", 12345, "Random seed for data generation."),
    Flag("dupe_factor", "integer", 10, "Number of times to duplicate the input data (with different masks)."),
    Flag("masked_lm_prob", "float", 0.15, "Masked LM probability."),
    Flag("short_seq_prob", "float", 0.1, "Probability of creating sequences which are shorter than the maximum length."),
)
EXTRA_FLAGS = (
    Flag("num_workers", "integer", None, "bert_data: worker processes (default: usable cores); the output does not "
         "depend on it."),
    Flag("from_tokens", "string", None, "bert_data: a token cache made from these inputs by `bert-data tokenize "
         "--input_file=... --vocab_file=... --do_lower_case`: read, not the text (byte-identical output)."),
    Flag("resume", "bool", False, "bert_data: continue an interrupted run with the same flags (byte-identical output)."),
    Flag("quiet", "bool", False, "bert_data: no progress bar; log level WARNING unless --log_level is given."),
    Flag("log_level", "string", None, "bert_data: logging level (DEBUG, INFO, WARNING, ERROR; default INFO)."),
)
# absl's logging flags that BERT command lines carry (tf.app.run): accepted, and nothing to do
# (logs always go to stderr here).
ABSL_FLAGS = (
    Flag("logtostderr", "bool", False, "absl: accepted for compatibility; logs always go to stderr."),
    Flag("alsologtostderr", "bool", False, "absl: accepted for compatibility; logs always go to stderr."),
)
FLAGS: Dict[str, Flag] = {f.name: f for f in BERT_FLAGS + EXTRA_FLAGS + ABSL_FLAGS}
REQUIRED = ("input_file", "output_file", "vocab_file")
HELP_NAMES = ("help", "helpshort", "helpfull", "h", "?")
_TRUE, _FALSE = ("true", "t", "1"), ("false", "f", "0")  # absl's boolean spellings, any case
MAX_FLAGFILE_DEPTH = 32
MAX_FLAGFILE_BYTES = 1 << 20

# Our setting names in messages of the shared pipeline, as BERT's flags.
def _flag_it_lacks(match: "re.Match") -> str:
    """A token cache's "pass the same --FLAG" for a flag BERT's command line has no way to pass."""
    name = match.group(1)
    if name in FLAGS:
        return match.group(0)
    if name == "input_format":  # (this command line reads BERT's layout, always)
        return f"; {PROG} reads BERT's corpus layout: tokenize again with --input_file (its globs), as {PROG} names them"
    return f"; {PROG} runs with the default --{name} (it has no such flag): tokenize again without --{name}"


_OUR_NAMES = (
    # a cache made by `bert-data tokenize --split_num ...` (or other flags this command line lacks)
    (r"; pass the same --(\w+) \(a cache fixes it\), or tokenize again", _flag_it_lacks),
    (r"the metadata files' content changed since the cache was made",
     "--input_file matches other files than the cache was made from"),
    (r"--seed\b", "--random_seed"),
    (r"--mask_whole_word\b", "--do_whole_word_mask"),
    (r"--metadata_files\b", "--input_file"),
    (r"--num_output_files\b", "the number of --output_file entries"),
    (r"--output_dir\b", "the work directory"),
    (r"--overwrite\b", "a rerun without --resume"),
    (r"the metadata files' content changed", "--input_file matches other files"),
)


def usage() -> str:
    lines = [
        f"usage: {PROG} --input_file=FILES --output_file=FILES --vocab_file=FILE [--flag=value ...]",
        "",
        "google-research/bert's create_pretraining_data.py, streaming and parallel (see docs/migrating.md).",
        "Flags take absl syntax: --flag=value, --flag value, booleans --flag, --noflag or --flag=true|false;",
        "--flagfile=FILE reads flags from FILE, one per line.",
        "",
        "flags of create_pretraining_data.py:",
    ]
    for group, flags in (("", BERT_FLAGS), ("bert_data extras:", EXTRA_FLAGS), ("absl:", ABSL_FLAGS)):
        if group:
            lines += ["", group]
        for f in flags:
            shown = f"--[no]{f.name}" if f.kind == "bool" else f"--{f.name}"
            default = "" if f.default is None else f"\n    (default: '{f.default}')"
            lines.append(f"  {shown}: {f.help}{default}")
    lines += ["", "  --flagfile: Insert flag definitions from the given file into the command line.", ""]
    return "\n".join(lines)


def expand_flagfiles(args: Sequence[str], stack: Tuple[str, ...] = (), read: Optional[List[str]] = None) -> List[str]:
    """``--flagfile=F`` (or ``--flagfile F``) replaced in place by F's flags, absl's format: one flag
    per line, blank lines and lines starting with ``#`` or ``//`` ignored, nested flagfiles read
    (relative to the working directory, as absl does). Later flags override earlier ones.
    ``read`` collects every flag file read (no output may overwrite one)."""
    out: List[str] = []
    it = iter(args)
    for arg in it:
        name, eq, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name != "flagfile":
            out.append(arg)
            continue
        if not eq:
            value = next(it, None)
            if value is None:
                raise UsageError("--flagfile needs a value (--flagfile=FILE)")
        out.extend(_flagfile_lines(value, stack, read))
    return out


def _flagfile_lines(path: str, stack: Tuple[str, ...], read: Optional[List[str]] = None) -> List[str]:
    real = os.path.realpath(path)
    if real in stack:
        raise UsageError(f"--flagfile {path} includes itself (through {' -> '.join(stack)}); remove the loop")
    if len(stack) >= MAX_FLAGFILE_DEPTH:
        raise UsageError(f"--flagfile {path}: flag files nested more than {MAX_FLAGFILE_DEPTH} deep")
    import stat

    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block, a directory cannot be read
            raise UsageError(f"--flagfile {path} is not a regular file; give a file of flags, one per line")
        if info.st_size > MAX_FLAGFILE_BYTES:
            raise UsageError(f"--flagfile {path} is {info.st_size} bytes, more than a flag file can be; is it a flag file?")
        with open(path, encoding="utf-8") as handle:
            raw = handle.read(MAX_FLAGFILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"--flagfile {path} cannot be read ({reason})") from None
    lines = [line.strip() for line in raw.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("#", "//"))]
    if read is not None:
        read.append(path)
    return expand_flagfiles(lines, stack + (real,), read)


def parse_flags(argv: Sequence[str]) -> Dict[str, Any]:
    """absl's parsing of BERT's flags (and our extras): ``{name: value}`` with defaults filled in,
    or ``{"help": True}``. Raises :class:`UsageError` with one line naming the flag and the fix.
    Flags are never abbreviated; an unknown flag is an error (absl's behaviour too). ``flagfile``
    lists the flag files read."""
    _require_list_flags_once(argv)
    flagfiles: List[str] = []
    args = expand_flagfiles(argv, read=flagfiles)
    values: Dict[str, Any] = {f.name: f.default for f in FLAGS.values()}
    values["flagfile"] = flagfiles
    i = 0
    while i < len(args):
        arg, i = args[i], i + 1
        if arg == "--":
            if i < len(args):
                raise UsageError(f"unexpected argument {args[i]!r} after --: every input is given by a flag")
            break
        if not arg.startswith("-") or arg == "-":
            raise UsageError(f"unexpected argument {arg!r}: every input is given by a flag (e.g. --input_file={arg})")
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else arg[1:].partition("=")
        if name in HELP_NAMES:
            return {"help": True}
        flag = FLAGS.get(name)
        if flag is None and name.startswith("no") and FLAGS.get(name[2:]) and FLAGS[name[2:]].kind == "bool":
            if eq:
                raise UsageError(f"--{name} takes no value; write --{name[2:]}={value} or --{name}")
            values[name[2:]] = False
            continue
        if flag is None:
            raise UsageError(_unknown(name))
        if flag.kind == "bool":
            values[name], i = _bool_value(flag, eq, value, args, i)
            continue
        if not eq:
            if i >= len(args) or _looks_like_flag(args[i]):
                raise UsageError(f"--{name} needs a value (--{name}=VALUE)")
            value, i = args[i], i + 1
        values[name] = _convert(flag, value)
    return values


LIST_FLAGS = ("input_file", "output_file")  # comma-separated lists of files


def _require_list_flags_once(argv: Sequence[str]) -> None:
    """absl keeps the last of a repeated flag, so BERT reads only ``b`` of ``--input_file=a
    --input_file=b``: a run of less than was asked, exit 0. On the command line itself that is
    refused (the files go in one comma-separated value); a flag file's value overridden on the
    command line is absl's usual idiom and stays as absl does it."""
    for name in LIST_FLAGS:
        given = [a for a in argv if a.lstrip("-") == name or a.lstrip("-").startswith(name + "=")]
        given = [a for a in given if a.startswith("-")]
        if len(given) > 1:
            raise UsageError(f"--{name} is given {len(given)} times, and absl (so BERT) would read only the last; "
                             f"give every file in one comma-separated --{name}=A,B")


def _bool_value(flag: Flag, eq: str, value: str, args: Sequence[str], i: int) -> Tuple[bool, int]:
    """A boolean's value and the next index. absl reads ``--flag False`` as ``--flag`` plus an
    ignored word, so BERT would run with True: a following true word is taken (same meaning
    either way); a following false word is refused rather than guessed."""
    if eq:
        if value.lower() in _TRUE:
            return True, i
        if value.lower() in _FALSE:
            return False, i
        raise UsageError(f"--{flag.name}={value!r}: a boolean is true/false (or 1/0); write --{flag.name} or --no{flag.name}")
    following = args[i].lower() if i < len(args) else ""
    if following in _TRUE:
        return True, i + 1
    if following in _FALSE:
        raise UsageError(
            f"--{flag.name} {args[i]}: absl (and so BERT) reads this as --{flag.name} and ignores {args[i]!r}; "
            f"write --{flag.name}=false or --no{flag.name}"
        )
    return True, i


def _looks_like_flag(arg: str) -> bool:
    name = arg.lstrip("-").split("=", 1)[0]
    return arg.startswith("-") and (name in FLAGS or name == "flagfile" or name[2:] in FLAGS)


def _convert(flag: Flag, value: str) -> Any:
    """absl's conversions: integers in base 10, or 0x / 0o prefixed; floats as Python reads them."""
    text = value.strip()
    try:
        if flag.kind == "integer":
            body = text.lstrip("+-").lower()
            base = 16 if body.startswith("0x") else 8 if body.startswith("0o") else 10
            return int(text, base)
        if flag.kind == "float":
            return float(text)
    except ValueError:
        kind = "an integer" if flag.kind == "integer" else "a number"
        raise UsageError(f"--{flag.name}={clip(value)!r} is not {kind}") from None
    return value


def _unknown(name: str) -> str:
    known = list(FLAGS) + ["flagfile"]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"unknown flag --{clip(name)}" + (f"; did you mean --{close[0]}?" if close else f"; see {PROG} --help")


def _in_bert_terms(message: str) -> str:
    """``message`` with our flag names as BERT's command line knows them, up to a ``bert-data
    tokenize`` command it advises (the token cache's fix): that command's flags are tokenize's own."""
    ours_part, command, rest = message.partition("bert-data tokenize")
    for ours, theirs in _OUR_NAMES:
        ours_part = re.sub(ours, theirs, ours_part)
    return ours_part + command + rest


def build_run(values: Dict[str, Any]):
    """(Config for the staging run, output files, input files) from the parsed flags."""
    from ..presets import build_config
    from ..output.named_files import (
        INPUT_LIST_NAME, SHARD_NAME, check_output_files, expand_input_patterns, write_input_list,
    )
    from ..output.naming import staging_dir

    for name in REQUIRED:
        if values[name] is None:
            raise UsageError(f"--{name} is required (see {PROG} --help)")
    inputs = expand_input_patterns(values["input_file"])
    outputs = check_output_files(values["output_file"], inputs, values["vocab_file"], flagfiles=values.get("flagfile", ()))
    staging = staging_dir(outputs[0])
    overrides = {
        "input_format": "bert",
        "vocab_file": values["vocab_file"],
        "do_lower_case": values["do_lower_case"],
        "mask_whole_word": values["do_whole_word_mask"],
        "max_seq_length": values["max_seq_length"],
        "max_predictions_per_seq": values["max_predictions_per_seq"],
        "seed": values["random_seed"],
        "dupe_factor": values["dupe_factor"],
        "masked_lm_prob": values["masked_lm_prob"],
        "short_seq_prob": values["short_seq_prob"],
        "output_dir": staging,
        "num_output_files": len(outputs),
        "name": SHARD_NAME,
        "resume": values["resume"],
        "overwrite": not values["resume"],
        "num_workers": values["num_workers"],
        "metadata_files": (os.path.join(staging, INPUT_LIST_NAME),),
    }
    if values["from_tokens"] is not None:
        overrides["from_tokens"] = values["from_tokens"]
    config = build_config(overrides)  # checked before anything is written
    if not values["resume"] or os.path.isdir(staging):  # (a resumed run's list is fingerprinted: globs must agree)
        write_input_list(staging, inputs)
    return config, outputs, inputs


def _log_level(values: Dict[str, Any]) -> Optional[int]:
    return resolve_log_level(values["log_level"], bool(values["quiet"]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    return guarded(PROG, lambda: _main(argv), then=NOTHING_WRITTEN, writes_output=True)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        values = parse_flags(args)
    except BertDataError as exc:
        return print_error(PROG, str(exc), exc.exit_code)
    if values.get("help"):
        try:
            print(usage())
            sys.stdout.flush()
        except BrokenPipeError:  # --help | head
            drop_stdout()
        return 0
    level = _log_level(values)
    if level is None:
        return print_error(PROG, unknown_log_level(values["log_level"]))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("bert_data").setLevel(level)
    state: Dict[str, Any] = {}
    try:
        return _run(values, state)
    except BertDataError as exc:
        from ..runners.job import error_line

        return print_error(PROG, _in_bert_terms(error_line(exc)), exc.exit_code)
    except (KeyboardInterrupt, MemoryError) as exc:  # Ctrl-C, SIGTERM/SIGHUP/SIGXCPU, a memory limit
        from ..runners.job import next_step

        return stopped(PROG, exc, next_step(state.get("config"), manifest_is_the_end=False))
    except OSError as exc:  # the last resort (the runner names what it knows): still one line
        from ..runners.job import next_step

        advice = next_step(state.get("config"), manifest_is_the_end=False).replace("continue later", "continue")
        return print_error(PROG, f"{os_error(exc)}; fix it, then {advice}")


def _run(values: Dict[str, Any], state: Dict[str, Any]) -> int:
    """Run the job; ``state["config"]`` is its configuration as soon as it is known (what a
    stopped run's advice depends on)."""
    from ..progress import RunProgress, run_summary
    from ..output.named_files import NamedFiles
    from ..runners.job import run_job

    started = time.perf_counter()
    config, outputs, inputs = build_run(values)  # (the runner checks the open-file limit)
    state["config"] = config
    flags = {f.name: values[f.name] for f in BERT_FLAGS}
    named = NamedFiles(outputs, {"metadata_files": [], "create_pretraining_data": {"flags": flags, "input_files": inputs}})
    with RunProgress(stream=sys.stderr, quiet=bool(values["quiet"])) as progress:
        manifest = run_job(config, on_group=progress.update, on_start=progress.start, named=named)[""]
        work_is_done()  # (a stop while the summary prints, or at exit, changes nothing now)
    # the same end-of-run summary as create_tfrecords (the named files, the data's warnings, what next)
    emit(PROG, run_summary({"": dict(manifest, manifest_path=named.manifest_path)}, time.perf_counter() - started))
    return 0


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

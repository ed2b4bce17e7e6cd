"""What the console scripts share on a command line: an echoed value cut short, ``--log_level``
read as a number, stdout's reader going away (``| head``), and the progress bar shown on a
terminal only. Each tool keeps its own parser and messages; this is the one home of the helpers
more than one of them uses.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any, Optional, TextIO

if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["clip", "resolve_log_level", "unknown_log_level", "drop_stdout", "terminal_bar"]


class GivenOnce(argparse.Action):
    """A list flag (``nargs="+"``) given at most once: argparse would let a second
    ``--metadata_files B`` silently replace the first's files (a run of less than asked, exit 0);
    the whole list goes after one flag."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} is given twice, and the second would replace the first's list: give every "
                         f"file after one {option_string}")
        setattr(namespace, self.dest, values)


def clip(text: str, most: int = 60) -> str:
    """A value echoed in an error, cut to ``most`` characters (the line stays one short line)."""
    return text if len(text) <= most else text[: most - 3] + "..."


def resolve_log_level(name: Optional[str], quiet: bool) -> Optional[int]:
    """--log_level as a number (names case-insensitive, or an integer); None when unknown."""
    if name is None:
        return logging.WARNING if quiet else logging.INFO
    if name.strip().isdigit():
        return int(name)
    level = logging.getLevelName(name.strip().upper())
    return level if isinstance(level, int) else None


def unknown_log_level(name: str) -> str:
    """Every tool's one line for a ``--log_level`` that :func:`resolve_log_level` refuses (exit 2)."""
    return f"--log_level {clip(name)!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)"


def drop_stdout() -> None:
    """stdout's reader went away (``| head``): send the rest to /dev/null, so that neither this
    write nor the flush at exit becomes a traceback."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def terminal_bar(
    description: str, total: Optional[int], unit: str = "B", quiet: bool = False, stream: Optional[TextIO] = None
) -> Optional[Any]:
    """A tqdm bar on ``stream`` (stderr) when it is a terminal and not ``quiet``, else None.

    With ``unit="B"`` counts are shown as KiB/MiB with the rate; the bar is removed when closed,
    so stdout's final report is all that stays on screen."""
    from ..progress import progress_enabled

    stream = sys.stderr if stream is None else stream
    if not progress_enabled(stream, quiet):
        return None
    from tqdm import tqdm

    return tqdm(
        total=total or None, desc=description, unit=unit, unit_scale=True, unit_divisor=1024 if unit == "B" else 1000,
        file=stream, dynamic_ncols=True, mininterval=0.5, leave=False,
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what, and the closest flag for an unknown one),
    exit 2, and no flag is ever taken as an abbreviation of another (``--input_files X`` must not
    silently become ``--input_files_prefix X``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        """An unknown flag is named before anything else: argparse says first that a required flag
        is missing when the user only misspelled it (``--metadata_file``)."""
        words = sys.argv[1:] if args is None else list(args)
        for word in words:
            if word == "--":
                break
            flag = word.split("=", 1)[0]
            if " " in flag:  # argparse takes a word with a space for a value ("-- next document --")
                continue
            if flag.startswith("--") and flag not in self._option_string_actions:
                self.error(f"unrecognized arguments: {word}")
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> "NoReturn":
        print(f"{self.prog}: error: {_usage_message(self, message)}", file=sys.stderr)
        raise SystemExit(2)


def _usage_message(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's complaint in our words: the flag first, what is wrong, the fix."""
    import difflib
    import re

    unknown = re.match(r"unrecognized arguments: (.+)", message)
    if unknown:
        first = clip(unknown.group(1).split()[0])
        if not first.startswith("-"):
            return (f"unexpected argument {first!r}: every input is given by a flag (e.g. --metadata_files "
                    f"{first}); see --help")
        flag = first.split("=", 1)[0]
        known = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        return f"unknown flag {flag}" + (f"; did you mean {close[0]}?" if close else "; see --help")
    argument = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
    if not argument:
        return message
    flag, problem = argument.groups()
    value = re.match(r"invalid (int|integer|float) value: (.*)", problem)
    if value:
        kind = "a number" if value.group(1) == "float" else "an integer"
        return f"{flag}: invalid {value.group(1)} value {clip(value.group(2))}; give {kind}"
    if problem.startswith("expected"):
        return f"{flag} needs a value ({problem}; a value that starts with - is written {flag}=VALUE)"
    if problem.startswith("ignored explicit argument"):
        return f"{flag} takes no value ({problem}); write {flag} or --no-{flag[2:]}"
    return f"{flag}: {problem}"

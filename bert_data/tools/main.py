"""``bert-data``: one command in front of the six tools.

``bert-data create|google|inspect|split|vocab|tokenize [ARGS]`` runs ``create_tfrecords``,
``create_pretraining_data``, ``inspect_tfrecords``, ``split_metadata``, ``build_vocab`` or ``tokenize`` with
``ARGS`` (each tool's own ``main(argv)``; the old command names stay). Their exit status passes through unchanged: 0 ok, 1 (inspect) bad
records, 2 usage or input errors, 130 interrupted. ``bert-data --version`` prints
``bert_data VERSION``; ``bert-data --help`` lists the commands. What the tools share on a
command line (the progress bar shown on a terminal only, ...) is in :mod:`bert_data.tools.cli`.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["PROG", "COMMANDS", "main", "entry_point"]

PROG = "bert-data"

# subcommand -> (module under bert_data.tools, the tool's own name, what it does)
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "create": ("create", "create_tfrecords", "turn text documents into BERT pretraining TFRecords"),
    "google": ("google_bert", "create_pretraining_data", "the same, with google-research/bert's create_pretraining_data.py flags"),
    "inspect": ("inspect", "inspect_tfrecords", "print records as text, or check them all and report statistics (--stats)"),
    "split": ("split", "split_metadata", "split metadata files into train and validation by a seeded hash"),
    "vocab": ("vocab", "build_vocab", "train a WordPiece vocab.txt on the documents of metadata files"),
    "tokenize": ("tokenize", "tokenize", "read, segment and tokenize the corpus once into a token cache (create --from_tokens)"),
}


def _version() -> str:
    from .. import __version__

    return __version__


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        f"usage: {PROG} COMMAND [ARGS ...]   ({PROG} COMMAND --help for a command's flags)",
        "",
        "commands:",
        *(f"  {name:<{width}}  {about} ({tool})" for name, (_, tool, about) in COMMANDS.items()),
        "",
        "options:",
        "  -h, --help  show this message and exit",
        "  --version   print the version and exit",
        "",
        "Exit status: the command's own (0 ok, 1 bad records found by inspect, 2 usage or input error).",
    ]
    return "\n".join(lines)


def _unknown(command: str) -> int:
    close = difflib.get_close_matches(command, list(COMMANDS) + [tool for _, tool, _ in COMMANDS.values()], n=1)
    if close:
        name = close[0] if close[0] in COMMANDS else next(k for k, v in COMMANDS.items() if v[1] == close[0])
        hint = f"; did you mean '{name}'?"
    else:
        hint = f"; commands: {', '.join(COMMANDS)}"
    print(f"{PROG}: error: unknown command '{command}'{hint}", file=sys.stderr)
    return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    first, rest = args[0], args[1:]
    if first in ("-h", "--help"):
        print(usage())
        return 0
    if first == "--version":
        print(f"bert_data {_version()}")
        return 0
    command = first if first in COMMANDS else next((k for k, v in COMMANDS.items() if v[1] == first), None)
    if command is None:
        return _unknown(first)
    module = importlib.import_module(f"bert_data.tools.{COMMANDS[command][0]}")
    try:
        return int(module.main(rest))
    except SystemExit as exc:  # argparse's usage errors and --help: their code, unchanged
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()

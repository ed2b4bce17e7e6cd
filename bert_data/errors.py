"""Typed errors. Every data or usage problem a user can cause raises a subclass of
:class:`BertDataError`; the command-line tools print its message on one line and exit 2.

Exit codes of the tools (documented in the README): 0 done; 1 ``inspect_tfrecords`` found a bad
record, or a Beam pipeline failed; 2 a user error (:class:`BertDataError`: input, flags, config,
output directory, resume); 3 a worker process died (resumable); 130 interrupted (Ctrl-C,
resumable); 143 terminated (SIGTERM: preemption, a scheduler's time limit; resumable)."""

from __future__ import annotations

import sys


class BertDataError(Exception):
    """A problem with the user's input, flags or environment (not a bug)."""

    exit_code = 2


class ConfigError(BertDataError):
    """Invalid or contradictory flags / config values. The message names the flag."""


class MetadataError(BertDataError):
    """A metadata file, or a document it names, cannot be used."""


class VocabError(BertDataError):
    """The vocabulary file is unusable (missing specials, blank or duplicate lines)."""


class SpacyModelError(BertDataError):
    """The requested spaCy pipeline is not installed or cannot segment sentences."""


class OutputError(BertDataError):
    """The output directory cannot be written as asked (exists, not writable, disk full)."""


class ResumeError(BertDataError):
    """``--resume`` was asked for but the previous run cannot be continued."""


class NothingUsableError(BertDataError):
    """Every document was skipped, or none made an instance: nothing is published (exit 2)."""


class RecordFormatError(BertDataError):
    """A TFRecord file is corrupt or does not match the expected schema."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (preemption, ``kill``, a batch scheduler's time limit) raised in the main thread:
    the run stops as on Ctrl-C (workers stopped, nothing published, resumable), and the tool
    says so and exits 143 instead of vanishing without a word."""


def raise_on_sigterm() -> None:
    """From now on SIGTERM raises :class:`Terminated` in the main thread (command-line tools only)."""
    import signal

    def _terminated(signum: int, frame: object) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, _terminated)


def print_error(prog: str, message: str, code: int = 2) -> int:
    """The one line every command prints for a user error, ``prog: error: message``; returns the exit code."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def plural(count: int, word: str, many: str = "") -> str:
    """``"1 document"``, ``"2 documents"``, ``"1 entry"`` / ``"3 entries"`` (``many`` when the
    plural is not ``word + "s"``): every tool's messages count things this way."""
    return f"{count} {word if count == 1 else (many or word + 's')}"

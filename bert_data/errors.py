"""Typed errors. Every data or usage problem a user can cause raises a subclass of
:class:`BertDataError`; the command-line tools print its message on one line and exit 2.

Exit codes of the tools (documented in the README): 0 done; 1 ``inspect_tfrecords`` found a bad
record, or a Beam pipeline failed; 2 a user error (:class:`BertDataError`: input, flags, config,
output directory, resume); 3 a worker process died or memory ran out (resumable); 130
interrupted (Ctrl-C, resumable); 129 hung up (SIGHUP), 143 terminated (SIGTERM: preemption, a
scheduler's time limit), 152 the CPU time limit (SIGXCPU), all resumable."""

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
    """A stop signal raised in the main thread: SIGTERM (preemption, ``kill``, a batch scheduler's
    time limit), SIGHUP (the terminal or SSH session closed) or SIGXCPU (the CPU time limit,
    ``ulimit -t``). The run stops as on Ctrl-C (workers stopped, nothing published, resumable),
    and the tool says so and exits 128 + the signal's number instead of vanishing without a word."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def describe(self) -> str:
        """What stopped the run, in the words of the tools' last line."""
        import signal

        words = {
            getattr(signal, "SIGTERM", -1): "terminated (SIGTERM)",
            getattr(signal, "SIGHUP", -1): "hung up (SIGHUP: the terminal or session closed)",
            getattr(signal, "SIGXCPU", -1): "stopped at the CPU time limit (SIGXCPU: ulimit -t)",
        }
        return words.get(self.signum, f"stopped by signal {self.signum}")


STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGXCPU")


def raise_on_sigterm() -> None:
    """From now on SIGTERM, SIGHUP and SIGXCPU raise :class:`Terminated` in the main thread
    (command-line tools only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # (a tool's main() called from a thread, as tests do: signals stay the process's own)

    def _terminated(signum: int, frame: object) -> None:
        raise Terminated(signum)

    for name in STOP_SIGNALS:  # (one the process was started ignoring, as nohup does SIGHUP, stays ignored)
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
            signal.signal(getattr(signal, name), _terminated)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file-size limit becomes an OSError (EFBIG), not a kill


def ignore_stop_signals() -> None:
    """From now on the stop signals (Ctrl-C, SIGTERM, SIGHUP, SIGXCPU) are ignored: for a tool
    whose work is done and which is only exiting, so that a stop then neither prints a traceback
    from the interpreter's shutdown, nor kills it silently once the shutdown has put the default
    actions back (it does so for Python handlers, not for SIG_IGN), nor prints a line calling the
    finished work undone; the tool exits with its own code. SIGKILL still ends a stuck exit. Main
    thread only, as :func:`raise_on_sigterm`."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGINT", *STOP_SIGNALS):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the process that unlinks a run's shared memory and
    semaphores at its end) with SIGHUP and SIGXCPU blocked, which it inherits and keeps: it
    ignores SIGINT and SIGTERM itself but died of a closed terminal's hang-up (sent to the whole
    process group), and its replacement printed a warning and a traceback per semaphore after the
    run's one line. Blocked, not ignored, in the caller: a hang-up meanwhile is delivered when
    the mask is restored (any thread may call this; a running tracker is left as it is). Call
    before the first shared Value, Array or process pool."""
    import signal
    from multiprocessing import resource_tracker

    block = getattr(signal, "pthread_sigmask", None)
    hangups = {getattr(signal, name) for name in ("SIGHUP", "SIGXCPU") if hasattr(signal, name)}
    if block is None or not hangups:  # pragma: no cover - Windows
        resource_tracker.ensure_running()
        return
    previous = block(signal.SIG_BLOCK, hangups)
    try:
        resource_tracker.ensure_running()
    finally:
        block(signal.SIG_SETMASK, previous)


def print_error(prog: str, message: str, code: int = 2) -> int:
    """The one line every command prints for a user error, ``prog: error: message``; returns the exit code."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def plural(count: int, word: str, many: str = "") -> str:
    """``"1 document"``, ``"2 documents"``, ``"1 entry"`` / ``"3 entries"`` (``many`` when the
    plural is not ``word + "s"``): every tool's messages count things this way."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


#: The next step after a writing tool stopped before it wrote anything; the same words whether the
#: stop came before the tool's own handlers (:func:`bert_data.tools.endings.guarded`) or after them
#: (:func:`bert_data.runners.job.next_step`), so a user (and a test) sees one line for one state.
NOTHING_WRITTEN = "run the same command again (nothing was written yet)"

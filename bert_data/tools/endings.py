"""How a tool's run ends, for every way it can: the one last line and the exit code.

A run that is stopped (Ctrl-C, a stop signal, memory running out) says what stopped it and the
next step that works: ``--resume`` when the run has a journal to continue (:func:`stopped` is
told so by the caller), else running the same command again. A result that cannot be written to
standard output (``| head`` gone, ``> /dev/full``) is not a traceback either (:func:`emit`). And
a tool started with a standard descriptor closed (``>&-``) gets ``/dev/null`` there first
(:func:`guard_standard_fds`), so no file it opens later (a shard!) becomes its stdout.

Exit codes (README, ``bert_data.errors``): 130 interrupted, 128 + N stopped by signal N
(129 SIGHUP, 143 SIGTERM, 152 SIGXCPU), 3 out of memory; all resumable when there is a journal.
"""

from __future__ import annotations

import os
import sys

from typing import Callable, Dict

from ..errors import Terminated, ignore_stop_signals, raise_on_sigterm
from . import restore_default_interrupt, started_as_program

OUT_OF_MEMORY_EXIT = 3


def guard_standard_fds() -> None:
    """Open ``/dev/null`` on any of descriptors 0, 1, 2 that is closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # a lower descriptor was closed too and took it: it is handled in turn
                os.dup2(opened, fd)
                os.close(opened)
    # Python leaves sys.stdout/stderr None for a descriptor closed at start: writes to them go nowhere
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def guarded(prog: str, body: Callable[[], int], then: str = "run the same command again", writes_output: bool = False) -> int:
    """Every tool's ``main``: standard descriptors guarded, stop signals raising from now on, and
    a stop that comes before the tool's own handlers (nothing began) said in one line ending with
    ``then`` (:data:`bert_data.errors.NOTHING_WRITTEN` for the tools that write output). A stop
    that comes once the body has returned is not the body's: its code stands, and a tool that
    ``writes_output`` (its work durable once the body returns) then ignores stops (:func:`_exiting`)."""
    guard_standard_fds()
    code = None
    try:
        raise_on_sigterm()  # SIGTERM, SIGHUP, SIGXCPU; a file-size limit (SIGXFSZ) becomes an OSError
        restore_default_interrupt()  # (the start-up handler of bert_data.tools: Ctrl-C raises from now on)
        if not _working_directory_exists():
            print(f"{prog}: error: the working directory was removed (a shell still in it?): cd to a directory "
                  f"that exists and {then}", file=sys.stderr)
            return 2
        code = body()
        _exiting(writes_output)
        return code
    except (KeyboardInterrupt, MemoryError) as exc:
        if code is not None:  # (stopped between the tool's end and the line above: its result stands)
            _exiting(writes_output)
            return code
        return stopped(prog, exc, then)


def _exiting(writes_output: bool) -> None:
    """The tool's body has returned: a writing tool started as a program only exits from here
    (:func:`work_is_done`). One that only prints (inspect) keeps Ctrl-C for a stdout that blocks."""
    if writes_output:
        work_is_done()


def work_is_done() -> None:
    """The tool's output is complete (published, its manifest written): from now on a tool started
    as a program ignores stop signals (:func:`bert_data.errors.ignore_stop_signals`) and exits with
    its own code, whatever comes while it prints its summary and the interpreter shuts down (a stop
    then changes nothing: no traceback, no line calling the finished work undone). A tool called
    in-process (tests, a library) keeps its caller's signal handlers."""
    if started_as_program():
        ignore_stop_signals()


def _working_directory_exists() -> bool:
    """Relative paths and libraries that ask for it (spaCy's imports call ``Path.cwd()``) fail
    in a working directory removed from under the shell: said at once, not as a failed write."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def stopped(prog: str, exc: BaseException, then: str) -> int:
    """The last line (on stderr) of a run stopped by ``exc`` (KeyboardInterrupt, a
    :class:`~bert_data.errors.Terminated` signal or MemoryError), ending with ``then``, the next
    step that works (:func:`bert_data.runners.job.next_step`); returns the exit code."""
    if isinstance(exc, MemoryError):
        print(f"{prog}: error: out of memory (MemoryError: a memory limit such as ulimit -v, or the machine's); lower "
              f"--num_workers or --group_bytes, then {then}", file=sys.stderr)
        return OUT_OF_MEMORY_EXIT
    if isinstance(exc, Terminated):
        print(f"{prog}: {exc.describe()}; {then}", file=sys.stderr)
        return exc.exit_code
    print(f"{prog}: interrupted; {then}", file=sys.stderr)
    return 130


def os_error(exc: OSError) -> str:
    """An operating-system error as words: what failed and on which file."""
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return f"{exc.strerror or exc}{where}"


def emit(prog: str, text: str) -> None:
    """``text`` and a newline on stdout, flushed (:func:`flush_stdout`)."""
    if sys.stdout is None:
        return
    try:
        try:
            sys.stdout.write(text + "\n")
        except UnicodeEncodeError:  # (PYTHONIOENCODING=ascii and a path with an é: the run is done, say it escaped)
            encoding = getattr(sys.stdout, "encoding", None) or "ascii"
            sys.stdout.write((text + "\n").encode(encoding, "backslashreplace").decode(encoding))
    except OSError as exc:
        _stdout_failed(prog, exc)
        return
    flush_stdout(prog)


STDOUT_PRODUCT: Dict[str, str] = {}  # tool -> what its stdout carries when that is its output ("report": inspect)
_STDOUT_LOST: Dict[str, bool] = {}  # tool -> its stdout could not be written (a closed pipe excepted)


def flush_stdout(prog: str) -> bool:
    """Flush stdout now, not at exit: a reader that went away (``| head``) is not an error; a
    stdout that cannot be written (``> /dev/full``) is one line on stderr; neither becomes a
    traceback when the interpreter flushes again at exit. Returns False when stdout could not
    be written, now or before (:func:`emit`), a closed pipe excepted."""
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except OSError as exc:
            _stdout_failed(prog, exc)
    return not _STDOUT_LOST.get(prog, False)


def _stdout_failed(prog: str, exc: OSError) -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail again
    except (OSError, ValueError):
        pass
    if not isinstance(exc, BrokenPipeError):
        _STDOUT_LOST[prog] = True
        product = STDOUT_PRODUCT.get(prog)
        after = f"the {product} was not written: free the device or write it elsewhere" if product else \
            "the run itself is complete"
        print(f"{prog}: could not write to standard output ({exc.strerror or exc}); {after}", file=sys.stderr)

"""The console tools (``bert-data``, ``create_tfrecords``, ...): thin wrappers over the library.

Importing this package (which every tool's module does, before numpy) caps the thread pools of
numerical libraries at one thread unless the user set them: a tool's processes (the coordinator
and every worker, which inherit the environment) run one core each and never call BLAS, yet
OpenBLAS starts a thread per core at numpy's import and spins them (measured: ~0.17 CPU-s of a
2-core machine's 1.9 CPU-s cached MSL-512 run; 2.4 CPU-s per worker on a 16-core one).
The caps hold for the whole process that imports this package (a tool's, or a test session's);
a library caller of ``bert_data.run`` that never imports it keeps its own settings. A
``--spacy_model`` pipeline's small matrices run on one thread too, as each worker is one core."""

import os
import signal as _signal

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# A stop signal while a tool starts (its imports take ~0.2 s before its main() guards the run)
# ends it with one line, never a KeyboardInterrupt traceback from inside an import; main() then
# installs the run's own handlers. Only for a tool started as a program, never on a library import.
_CONSOLE_SCRIPTS = ("bert-data", "create_tfrecords", "create_tfrecords_mlm_only", "create_pretraining_data",
                    "split_metadata", "inspect_tfrecords", "build_vocab")


def _program_name():
    """The tool's name when this process was started as one (``python -m bert_data.tools.X`` or
    a console script), else None: decided from the interpreter's own command line, so neither a
    library import nor a worker process (``python -c "...spawn_main..."``, which is given its
    parent's ``sys.argv``) takes it for a tool."""
    import sys

    argv = list(getattr(sys, "orig_argv", ()))
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1].startswith("bert_data.tools"):
        return argv[argv.index("-m") + 1]
    script = os.path.basename(argv[1]) if len(argv) > 1 else ""
    return script if script in _CONSOLE_SCRIPTS else None


def _stopped_while_starting(signum, frame) -> None:
    try:
        os.write(2, f"{_PROGRAM}: stopped while starting; run the same command again (nothing was written yet)\n".encode())
    except OSError:  # (stderr closed)
        pass
    os._exit(130 if signum == _signal.SIGINT else 128 + signum)


def started_as_program() -> bool:
    """Whether this process was started as one of the tools (a console script, ``python -m``),
    not a library import, a test or a worker process."""
    return _PROGRAM is not None


def restore_default_interrupt() -> None:
    """Ctrl-C raises KeyboardInterrupt again (a tool's main() handles it from here on)."""
    if _PROGRAM is not None and _signal.getsignal(_signal.SIGINT) is _stopped_while_starting:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


_PROGRAM = _program_name()
if _PROGRAM is not None:
    for _stop in ("SIGINT", "SIGTERM", "SIGHUP"):
        # a signal the tool was started ignoring stays ignored: a script's background job (SIGINT),
        # nohup (SIGHUP) are not stopped by what they were started to be immune to
        if hasattr(_signal, _stop) and _signal.getsignal(getattr(_signal, _stop)) is not _signal.SIG_IGN:
            _signal.signal(getattr(_signal, _stop), _stopped_while_starting)

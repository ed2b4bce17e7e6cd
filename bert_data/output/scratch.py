"""A run's scratch directories in the temporary directory (``$TMPDIR``), and the removal of those
a killed run left.

Every scratch directory bert_data makes (the plan's spool, a worker's staged group, a URL run's
local copies of its shards while they are rewritten, the NSP pool's staged inputs, ...) is named
``bert_data_<kind>_<pid>_L<token>_<random>``. A run that ends, fails or is stopped removes its
own; a ``kill -9`` (or a machine that loses power) cannot, so each run begins by removing the
scratch directories whose process is gone (:func:`remove_stale_scratch`): killed runs do not
pile up in ``$TMPDIR``, which may be small.

Whether a process is gone is not told by its pid: containers that share a ``/tmp`` each number
their processes from 1 (pid namespaces), so a pid that is dead here may be a live run there. So
each process that makes scratch directories holds an exclusive ``flock`` on a file of its own,
``bert_data_live_<pid>_L<token>``, for as long as it lives (the kernel releases it when the
process ends, however it ends), and its directories carry the token: a directory is removed only
when that lock can be taken. Directories named without a token (a bert_data from before this
rule) are judged by their pid, as they were.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import re
import secrets
import shutil
import tempfile
import time
from typing import Dict, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: directories carry no token, pids decide
    fcntl = None

SCRATCH_PREFIX = "bert_data_"
LIVE_PREFIX = "bert_data_live_"
_NAME = re.compile(r"bert_data_[a-z0-9]+_(\d+)_(?:L([0-9a-f]{12})_)?")
_LIVE = re.compile(r"bert_data_live_(\d+)_L([0-9a-f]{12})$")
_live: Dict[str, Tuple[int, str, int]] = {}  # per directory: this process's (pid, token, locked fd)


def _token(root: str) -> str:
    """This process's token in ``root``, its lock file there made and locked on first use (after a
    fork, the child's own; the file is beside the directories it vouches for): '' where there is
    no flock or ``root`` cannot hold the file."""
    pid = os.getpid()
    held = _live.get(root)
    if held is not None and held[0] == pid:
        return held[1]
    if fcntl is None:
        return ""
    token = secrets.token_hex(6)
    final = os.path.join(root, _live_name(pid, token))
    making = final + ".new"  # locked before it has the name a clean-up looks for
    try:
        fd = os.open(making, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return ""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, final)
    except OSError:
        os.close(fd)
        _remove(making)
        return ""
    _live[root] = (pid, token, fd)
    atexit.register(_forget, final, pid)  # a normal end: its directories are gone, so is its lock file
    multiprocessing.util.Finalize(None, _forget, args=(final, pid), exitpriority=0)  # a pool worker's end
    return token


def _live_name(pid: int, token: str) -> str:
    """The name of the lock file of the process ``pid`` (in its namespace) with ``token``."""
    return f"{LIVE_PREFIX}{pid}_L{token}"


def _forget(path: str, pid: int) -> None:
    """This process's lock file removed as it ends (not a forked child's: the handlers are copied)."""
    if os.getpid() == pid:
        _remove(path)


def scratch_prefix(kind: str, parent: Optional[str] = None) -> str:
    """The name prefix of this process's scratch directories of ``kind`` (lowercase letters and
    digits: what :func:`remove_stale_scratch` recognises) in ``parent`` (default the temporary
    directory)."""
    token = _token(os.path.abspath(parent or tempfile.gettempdir()))
    return f"{SCRATCH_PREFIX}{kind}_{os.getpid()}_" + (f"L{token}_" if token else "")


def scratch_dir(kind: str, parent: Optional[str] = None) -> str:
    """A new scratch directory of ``kind`` (in ``parent``, default the temporary directory)."""
    return tempfile.mkdtemp(prefix=scratch_prefix(kind, parent), dir=parent)


def scratch_context(kind: str) -> tempfile.TemporaryDirectory:
    """A scratch directory of ``kind`` removed when the ``with`` block ends."""
    return tempfile.TemporaryDirectory(prefix=scratch_prefix(kind))


def remove_stale_scratch() -> None:
    """The scratch directories of processes that are gone (killed with SIGKILL: nothing of theirs
    ran at the kill), removed, then the lock files of gone processes; those of a live process (in
    any pid namespace sharing this directory) and of other users' processes are left alone."""
    root = os.path.abspath(tempfile.gettempdir())
    try:
        names = [n for n in os.listdir(root) if n.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    held = _live.get(root)
    own = held[1] if held is not None and held[0] == os.getpid() else None
    for name in names:
        found = None if name.startswith(LIVE_PREFIX) else _NAME.match(name)
        if found is None or (found.group(2) is not None and found.group(2) == own):
            continue
        pid, token = int(found.group(1)), found.group(2)
        if (_lock_gone(os.path.join(root, _live_name(pid, token))) if token else _pid_gone(pid)) is True:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    for name in names:
        found = _LIVE.match(name.removesuffix(".new"))
        if found is None or found.group(2) == own:
            continue
        if name.endswith(".new") and not _older_than(os.path.join(root, name), 60):
            continue  # being made (locked, then renamed): a process killed in between left it
        if _lock_gone(os.path.join(root, name)):
            _remove(os.path.join(root, name))


def _lock_gone(path: str) -> Optional[bool]:
    """Whether the process of the lock file ``path`` is gone: the file is free, or was already
    removed as free; None when it cannot be read (another user's)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True  # made before its directories, removed only once free
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # held: the process lives (here or in another pid namespace)
    finally:
        os.close(fd)


def _pid_gone(pid: int) -> Optional[bool]:
    """A directory without a token (an older bert_data's): gone when no process has its pid here."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
        return False  # alive (or reused by another process: left alone)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return None  # another user's process (or no pid at all): not ours to judge


def _older_than(path: str, seconds: float) -> bool:
    try:
        return time.time() - os.stat(path).st_mtime > seconds
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

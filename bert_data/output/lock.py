"""One run at a time per output directory.

A second ``create_tfrecords`` on the same ``--output_dir`` while one runs (a second ``--resume``,
an ``--overwrite``) would interleave two runs' fragments and journals. The lock is an
``flock`` on ``output_dir/.bert_data.lock``: the kernel releases it when its holder dies, even
by kill -9, so a stale lock never blocks; the file holds who holds it, for the refusal message.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from typing import Iterator

from ..errors import OutputError
from .naming import LOCK_NAME


@contextlib.contextmanager
def output_lock(output_dir: str) -> Iterator[None]:
    """Hold the output directory's lock for the block (local directories; URLs are not locked)."""
    if "://" in output_dir:
        yield
        return
    import fcntl

    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--output_dir {output_dir} cannot be created ({exc.strerror or exc})") from None
    path = os.path.join(output_dir, LOCK_NAME)
    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise OutputError(
                f"--output_dir {output_dir} is in use by another run ({holder}); wait for it to finish or "
                f"use another --output_dir"
            ) from None
        except OSError as exc:  # a file system without flock (some network mounts)
            os.close(fd)
            raise OutputError(
                f"--output_dir {output_dir}: cannot lock {path} ({exc.strerror or exc}); use a local --output_dir"
            ) from None
        try:  # the file may have been removed (and made anew) by the holder we waited on
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}).encode())
    except OSError as exc:
        _release(fd, path)
        raise OutputError(
            f"--output_dir {output_dir}: cannot write its lock file {path} ({exc.strerror or exc}); free space there"
        ) from None
    try:
        yield
    finally:
        _release(fd, path)


def _release(fd: int, path: str) -> None:
    """Remove the lock file, then close it (which releases the lock): a run that opened the
    removed file meanwhile sees that it is no longer the one at ``path`` and tries again."""
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def _open_lock_file(path: str) -> int:
    """The lock file, opened for writing: never through a symbolic link (it would truncate the
    link's target), never blocking (a FIFO put there), and only a regular file."""
    import stat

    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        odd = exc.errno in (errno.ELOOP, errno.EISDIR)
        raise OutputError(
            f"--output_dir {os.path.dirname(path)}: cannot open its lock file {path} "
            f"({'a symbolic link or a directory' if odd else exc.strerror or exc}); remove it (no run uses it then)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(
            f"--output_dir {os.path.dirname(path)}: its lock file {path} is not a regular file; remove it"
        )
    return fd


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that holds its lock"

"""A run's scratch directories in the temporary directory (``$TMPDIR``), and the removal of those
a killed run left.

Every scratch directory bert_data makes (the plan's spool, a worker's staged group, a URL run's
local copies of its shards while they are rewritten, the NSP pool's staged inputs, ...) is named
``bert_data_<kind>_<pid>_<random>`` with the pid of the process that made it. A run that ends,
fails or is stopped removes its own; a ``kill -9`` (or a machine that loses power) cannot, so
each run begins by removing the scratch directories whose process is gone
(:func:`remove_stale_scratch`): killed runs do not pile up in ``$TMPDIR``, which may be small.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Optional

SCRATCH_PREFIX = "bert_data_"
_NAME = re.compile(r"bert_data_[a-z0-9]+_(\d+)_")


def scratch_prefix(kind: str) -> str:
    """The name prefix of this process's scratch directories of ``kind`` (lowercase letters and
    digits: what :func:`remove_stale_scratch` recognises)."""
    return f"{SCRATCH_PREFIX}{kind}_{os.getpid()}_"


def scratch_dir(kind: str, parent: Optional[str] = None) -> str:
    """A new scratch directory of ``kind`` (in ``parent``, default the temporary directory)."""
    return tempfile.mkdtemp(prefix=scratch_prefix(kind), dir=parent)


def scratch_context(kind: str) -> tempfile.TemporaryDirectory:
    """A scratch directory of ``kind`` removed when the ``with`` block ends."""
    return tempfile.TemporaryDirectory(prefix=scratch_prefix(kind))


def remove_stale_scratch() -> None:
    """The scratch directories of processes that are gone (killed with SIGKILL: nothing of theirs
    ran at the kill), removed; those of a live process (another run, or a pid reused) and of other
    users' processes are left alone."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for name in names:
        found = _NAME.match(name)
        if found is None or int(found.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(found.group(1)), 0)
            continue  # alive (or reused by another process: left alone)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except (OSError, OverflowError):
            continue  # another user's process (or no pid at all): not ours to judge

"""Named fault-injection hooks: the one place where tests reach into a running job.

Every hook is read from the environment at the moment it could fire, so a test sets a variable
for one command and production runs (the variables unset) pay one dictionary lookup. Each hook
is named after the moment of the run it kills, so a test says what it breaks:

* ``BERT_DATA_CRASH_AT=STAGE:GROUP`` (:func:`crash_point`) kills this process with SIGKILL at
  STAGE for group GROUP: ``appended`` (a group's fragment appended to the partial shards; the
  previous group's journal entry may still be on its way), ``checkpointed`` (its journal entry
  written, on the journal's thread: the next group may have written past it already),
  ``indexed`` (a URL output's group index written), ``published`` (shards in place, manifest
  not yet; GROUP is 0), ``worker`` (a worker process about to make GROUP, as the OOM killer
  would), ``moved`` (BERT-named output file GROUP renamed into place), ``tokenized``
  (`bert-data tokenize`: group GROUP's tokens written, its sidecar not yet), ``rewriter`` (a
  process rewriting shard GROUP at publish, :mod:`bert_data.output.rewrite`, about to begin).
* ``BERT_DATA_PAUSE_AT=MARKER:STAGE:GROUP`` (:func:`pause_point`): the process at STAGE for
  GROUP creates MARKER and waits two minutes there (a run stopped while that step is surely
  in flight). Stages: every crash point's (each :func:`crash_point` is a pause point too; a
  thread other than the main one, ``checkpointed``'s, pauses only itself), and ``committed``
  (GROUP 0: the manifest written).
* ``BERT_DATA_DASK_PAUSE=MARKER:GROUP``, ``BERT_DATA_DASK_KILL_ONCE=MARKER:GROUP`` and
  ``BERT_DATA_DASK_KILL_PID=PID:GROUP`` (:func:`dask_worker_faults`): a Dask worker making GROUP
  waits two minutes after creating MARKER (a run stopped while a group is surely in flight),
  kills itself the first time (MARKER records that it happened), or kills process PID (a
  scheduler).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

CRASH_AT = "BERT_DATA_CRASH_AT"
CRASH_STAGES = ("appended", "checkpointed", "indexed", "published", "committed", "worker", "moved", "tokenized",
                "rewriter")
PAUSE_AT = "BERT_DATA_PAUSE_AT"


def crash_point(stage: str, group_index: int) -> None:
    """SIGKILL this process when ``BERT_DATA_CRASH_AT`` is ``stage:group_index``; pause it there
    when ``BERT_DATA_PAUSE_AT`` names the stage (:func:`pause_point`)."""
    target = os.environ.get(CRASH_AT)
    if target and target == f"{stage}:{group_index}":
        os.kill(os.getpid(), signal.SIGKILL)
    pause_point(stage, group_index)


def pause_point(stage: str, group_index: int) -> None:
    """Create MARKER and wait two minutes when ``BERT_DATA_PAUSE_AT`` is ``MARKER:stage:group_index``."""
    marker = _hook(PAUSE_AT, group_index)
    if marker.endswith(f":{stage}"):
        with open(marker[: -len(stage) - 1], "w"):
            pass
        time.sleep(120)


def _hook(name: str, group_index: int) -> str:
    """The hook's first part (a marker file or a pid) when ``name`` targets ``group_index``."""
    first, _, group = os.environ.get(name, "").rpartition(":")
    return first if first and group == str(group_index) else ""


def dask_worker_faults(group_index: int) -> None:
    """The Dask worker's hooks (see the module docstring), checked as a group starts."""
    marker = _hook("BERT_DATA_DASK_PAUSE", group_index)
    if marker:
        with open(marker, "w"):
            pass
        time.sleep(120)
    marker = _hook("BERT_DATA_DASK_KILL_ONCE", group_index)
    if marker and not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    pid = _hook("BERT_DATA_DASK_KILL_PID", group_index)
    if pid:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)

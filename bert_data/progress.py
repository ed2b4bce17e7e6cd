"""Progress of a ``create_tfrecords`` run: a tqdm bar on stderr, fed by :func:`bert_data.runners.local.run`.

``run(config, on_start=progress.start, on_group=progress.update)``: ``start`` receives the
:class:`~bert_data.metadata.MetadataSummary` (the number of metadata entries is the bar's
total), ``update`` each :class:`~bert_data.group.GroupResult` in group order. The bar shows
documents done of total, instances written, input MB/s and the ETA. It is drawn only on a
terminal and never on stdout (the final summary line owns stdout); otherwise every method is a
no-op, so callers never need to check.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO

__all__ = ["RunProgress", "format_postfix", "progress_enabled"]


def progress_enabled(stream: Optional[TextIO], quiet: bool = False) -> bool:
    """A bar only for a terminal, and never with ``--quiet``."""
    if quiet or stream is None:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def format_postfix(documents_read: int, entries_done: int, instances: int, input_bytes: int, seconds: float) -> str:
    """The text after the bar: ``instances=5,230, 12.3 MB/s`` (+ documents read when files hold several)."""
    rate = input_bytes / seconds / 1e6 if seconds > 0 else 0.0
    parts = []
    if documents_read != entries_done:  # multi-document files or JSON Lines: entries != documents
        parts.append(f"docs read={documents_read:,}")
    parts.append(f"instances={instances:,}")
    parts.append(f"{rate:.1f} MB/s" if rate >= 1 else f"{rate:.3f} MB/s")
    return ", ".join(parts)


class RunProgress:
    """Documents done / total, instances, input MB/s, ETA; silent unless ``enabled``.

    ``split_num`` maps a finished group to entries done (groups arrive in order, each of
    ``split_num`` entries but the last), so the bar is right even when groups are skipped.
    """

    def __init__(
        self,
        split_num: int,
        stream: Optional[TextIO] = None,
        quiet: bool = False,
        enabled: Optional[bool] = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.split_num = split_num
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = progress_enabled(self.stream, quiet) if enabled is None else enabled
        self.clock = clock
        self.total = 0
        self.entries_done = 0
        self.documents_read = 0
        self.instances = 0
        self.input_bytes = 0
        self._started = clock()
        self._bar: Any = None

    def start(self, summary: Any) -> None:
        self.total = int(summary.entries)
        self._started = self.clock()
        if not self.enabled:
            return
        from tqdm import tqdm

        self._bar = tqdm(
            total=self.total,
            desc="documents",
            unit="doc",
            file=self.stream,
            dynamic_ncols=True,
            mininterval=0.5,
            smoothing=0.1,
            leave=True,
        )

    def update(self, result: Any) -> None:
        stats = result.stats
        self.documents_read += int(stats.get("documents.read", 0))
        self.instances += int(stats.get("instances", 0))
        self.input_bytes += int(stats.get("input_bytes", 0))
        done = (result.group_index + 1) * self.split_num
        self.entries_done = min(done, self.total) if self.total else done
        if self._bar is None:
            return
        self._bar.set_postfix_str(self.postfix(), refresh=False)
        self._bar.update(self.entries_done - self._bar.n)

    def postfix(self) -> str:
        return format_postfix(
            self.documents_read, self.entries_done, self.instances, self.input_bytes, self.clock() - self._started
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "RunProgress":
        """While the bar is shown, log records go through ``tqdm.write`` so they do not tear it."""
        self._redirect = None
        if self.enabled:
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if getattr(self, "_redirect", None) is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None

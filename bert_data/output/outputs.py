"""The output seam's protocol and its table: which :class:`Output` a run writes through.

See :mod:`bert_data.output` for the protocol's steps. :func:`open_output` chooses the output once,
from ``--output_dir``'s scheme (a path: :class:`~bert_data.output.local_dir.LocalDirOutput`; a URL:
:class:`~bert_data.output.object_store.ObjectStoreOutput`) or, for google-research/bert's
``--output_file`` list, :class:`~bert_data.output.named_files.NamedFilesOutput`. A new destination
is one class and one entry in :data:`OUTPUTS`.
"""


from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, Iterator, Mapping, Optional, Protocol, Sequence, Tuple

from .. import storage
from ..format.containers import container_of
from .local_dir import LocalDirOutput
from .named_files import NamedFiles, NamedFilesOutput
from .object_store import ObjectStoreOutput


class Output(Protocol):
    output_dir: str
    work_dir: str
    fragment_dir: str  # where workers leave their groups' fragments
    catches: tuple  # the exceptions of this destination that :meth:`failure` turns into one line

    def lock(self): ...
    def prepare(self, settings: Mapping, planned_groups: int) -> Optional[Counter]: ...
    def todo(self, planned: Iterable[Tuple[int, list]]) -> Iterator[Tuple[int, list]]: ...
    def shard_files(self) -> Sequence[int]: ...  # open partial shards the coordinator's own groups write onto, or ()
    def accept(self, result, stats: Counter) -> None: ...
    def publish(self) -> Dict[str, int]: ...
    def commit(self, manifest: Mapping) -> Dict: ...
    def discard(self) -> None: ...
    def close(self) -> None: ...
    def finished_manifest(self) -> Dict: ...
    def failure(self, exc: Exception) -> Exception: ...


OUTPUTS = {"local_dir": LocalDirOutput, "object_store": ObjectStoreOutput, "named_files": NamedFilesOutput}


def output_kind(output_dir: str, named: Optional[NamedFiles] = None) -> str:
    if named is not None:
        return "named_files"
    return "object_store" if storage.is_remote(output_dir) else "local_dir"


def open_output(config, *, named: Optional[NamedFiles] = None) -> Output:
    """The output of ``config``: chosen by ``--output_dir``'s scheme, or the named files."""
    container = container_of(config)
    kind = output_kind(config.output_dir, named)
    if kind == "named_files":
        return NamedFilesOutput(config, container, named)
    return OUTPUTS[kind](config, container)

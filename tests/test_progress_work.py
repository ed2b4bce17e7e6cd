"""The progress bar measures work done (issue 25): a worker advances the live counter as each
dupe pass of a unit is written, so the bar reaches 100% when the instances are written, not
when the input has been read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from bert_data.group import StageClock, build_resources, group_batches
from bert_data.metadata import DocumentSource, WorkItem
from bert_data.presets import build_config
from conftest import write_corpus, write_vocab


@pytest.mark.parametrize("mlm_only", [False, True])
def test_the_live_counter_follows_the_passes_written_not_the_input_read(tmp_path: Path, mlm_only: bool) -> None:
    metadata = write_corpus(tmp_path / "c", n_docs=6)
    vocab = write_vocab(tmp_path / "vocab.txt")
    config = build_config({"metadata_files": (str(metadata),), "vocab_file": str(vocab), "dupe_factor": 4,
                           "max_seq_length": 32, "max_predictions_per_seq": 5, "do_lower_case": True,
                           "mlm_only": mlm_only, "output_dir": str(tmp_path / "out")})
    resources = build_resources(config)
    live = SimpleNamespace(value=0)
    resources.bytes_read = live
    items = [WorkItem(DocumentSource(str(p), str(metadata), i + 1, p.name))
             for i, p in enumerate(sorted((metadata.parent / "docs").glob("*.txt")))]
    total = sum(p.stat().st_size for p in (metadata.parent / "docs").glob("*.txt"))
    stats: Counter = Counter()
    seen = []
    for _ in group_batches(0, items, resources, stats, StageClock(Counter())):
        seen.append(live.value)  # what the bar shows while this batch is being written
    assert stats["input_bytes"] == total and stats["units"] == 1
    assert seen and seen[0] == 0 < seen[-1] < total  # every document was read before the first batch
    # one batch per pass here: the bar moves a quarter of the unit's input with each pass written
    assert seen == [total * p // 4 for p in range(4)]
    assert live.value == total  # 100% once the last pass is written

"""Start-up checks: everything that can be known to fail is checked once, in the parent process,
before any output is touched or any worker starts. Every runner calls :func:`startup_checks`.

What is checked here (each failure is one line naming the flag and the fix):

* the vocabulary: readable, well formed, the five special tokens present (one loader, one rule:
  :func:`bert_data.tokenization.load_vocab`, the same the workers, the reader and inspect use);
  a vocabulary that looks cased with ``--do_lower_case`` (or the reverse) is a warning;
* the MLM-only document separator: a token of that vocabulary
  (:func:`bert_data.group.document_separator_id`, which the workers call too).

The metadata scan (every listed document exists and is readable) is the runner's next step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict

from ..config import Config
from ..group import document_separator_id

log = logging.getLogger("bert_data")


@dataclass(frozen=True)
class StartupInfo:
    """What the checks learned that the run needs again: the vocabulary, loaded once."""

    vocab: Dict[str, int]


def startup_checks(config: Config, local_vocab_file: str = "") -> StartupInfo:
    """Run every start-up check; ``local_vocab_file`` is a local copy when ``--vocab_file`` is a URL."""
    from ..tokenization import case_mismatch_warning, load_vocab

    vocab = load_vocab(local_vocab_file or config.vocab_file)
    warning = case_mismatch_warning(vocab, config.do_lower_case)
    if warning:
        log.warning(warning)
    if config.mlm_only and config.allow_cross_document_examples:
        document_separator_id(config, vocab)
    return StartupInfo(vocab=vocab)

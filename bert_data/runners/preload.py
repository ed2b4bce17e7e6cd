"""spaCy for a fork server's preload list (the Dask LocalCluster's, beside the per-group code):
imported once there, before it forks the workers. It is loaded as the
rule-based sentencizer loads it (:func:`bert_data.sentences.import_spacy`: without PyTorch,
CuPy and spaCy's command line), where a plain ``spacy`` in the list would import all three into
the fork server (PyTorch alone ~1.4 CPU-s and ~175 MB; CuPy initialises CUDA on a GPU host) and
every worker forked from it. A run with a named ``--spacy_model``, which may need PyTorch,
preloads ``spacy`` itself instead, and one whose lines are its sentences neither
(:func:`bert_data.runners.dask.fork_server_preload`)."""

from ..sentences import import_spacy

import_spacy(without_torch=True)

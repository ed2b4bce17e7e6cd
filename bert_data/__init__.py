"""bert_data: streaming, parallel, deterministic BERT pretraining-data preparation."""

__version__ = "0.1.0"

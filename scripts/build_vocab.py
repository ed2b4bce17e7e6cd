#!/usr/bin/env python3
"""Thin wrapper: ``python scripts/build_vocab.py --help`` is the same as ``build_vocab --help``."""

import sys

from bert_data.tools.vocab import main

if __name__ == "__main__":
    sys.exit(main())

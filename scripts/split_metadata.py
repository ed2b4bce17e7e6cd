#!/usr/bin/env python3
"""Thin wrapper: ``python scripts/split_metadata.py --help`` is the same as ``split_metadata --help``."""

import sys

from bert_data.tools.split import main

if __name__ == "__main__":
    sys.exit(main())

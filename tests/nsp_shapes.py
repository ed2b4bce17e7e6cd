"""Corpus shapes for the NSP statistics tests, built deterministically from ``../shared/corpus``.

The same text is fed to BERT's own ``create_pretraining_data.py`` to make the figures in
``tests/data/bert_nsp_shapes.json`` (how: the ``note`` there). Each shape is one document per
file, documents made by joining source files with a blank line (a paragraph break):

* ``short``: many short documents (500 movie reviews, ~3.9 KB each, 1.9 MB);
* ``books``: a few huge documents (the 65 State of the Union addresses in 8 "books" of ~260 KB,
  2.1 MB): at ``--group_bytes 64K`` each book is cut into pieces, at 1M a unit holds 3 or 4;
* ``mix``: the shape of issue 25's corpus scaled down (2 documents of ~1.1 MB, longer than
  ``--max_document_chars``' default 1M, 6 of ~170 KB, 56 of ~8 KB; 3.6 MB).

Only sorted file lists and fixed slices are used: the shapes never change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

SHAPES = ("short", "books", "mix")


def _reviews(corpus: Path) -> List[Path]:
    return sorted((corpus / "movie_reviews").rglob("*.txt"))


def _speeches(corpus: Path) -> List[Path]:
    return sorted((corpus / "state_union").glob("*.txt"))


def _text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # a few addresses are Latin-1
        return data.decode("latin-1")


def _join(paths: Sequence[Path]) -> str:
    return "\n\n".join(_text(p).strip("\n") for p in paths) + "\n"


def shape_documents(name: str, corpus: Path) -> List[str]:
    """The documents (texts) of shape ``name``, in order."""
    reviews, speeches = _reviews(corpus), _speeches(corpus)
    if name == "short":
        return [_join([p]) for p in reviews[::4][:500]]
    if name == "books":
        return [_join(speeches[i::8]) for i in range(8)]
    if name == "mix":
        huge = [_join(reviews[1000 + 290 * i : 1000 + 290 * (i + 1)]) for i in range(2)]
        medium = [_join(speeches[i::6][:5]) for i in range(6)]
        small = [_join(reviews[2 * i : 2 * i + 2]) for i in range(56)]
        documents: List[str] = []
        for i in range(64):  # interleaved, so every unit of a small --group_bytes is not only one kind
            if i % 32 == 0:
                documents.append(huge[i // 32])
            elif i % 10 == 5 and len(medium):
                documents.append(medium.pop())
            if small:
                documents.append(small.pop(0))
        return documents + medium
    raise ValueError(f"unknown shape {name!r}; shapes: {', '.join(SHAPES)}")


def write_shape(name: str, corpus: Path, root: Path) -> Path:
    """Write shape ``name`` under ``root`` (``docs/NNN.txt``) and return its metadata file."""
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, text in enumerate(shape_documents(name, corpus)):
        (docs / f"{i:03d}.txt").write_text(text, encoding="utf-8")
        lines.append(f"docs/{i:03d}.txt")
    metadata = root / "metadata.txt"
    metadata.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return metadata


def shape_sizes(corpus: Path) -> Dict[str, List[int]]:
    """Characters per document of every shape (for messages and checks)."""
    return {name: [len(t) for t in shape_documents(name, corpus)] for name in SHAPES}

"""The optional C accelerator ``bert_data.format._wire``, bound once for every caller.

``_wire.c`` holds the hot loops of both directions: reading (frames cut, records of one layout
decoded, the record checks: :mod:`bert_data.format.batch_decode`, :mod:`bert_data.format.checks`)
and writing (a pass's pairs planned on its ``random.Random``'s state, its rows assembled and masked on
its own draws: :mod:`bert_data.instances`, :mod:`bert_data.windows`, :mod:`bert_data.masking`; a
batch of ``tf.train.Example`` records serialized, payloads framed, or both in one pass:
:mod:`bert_data.format.example_wire`, :mod:`bert_data.format.tfrecord`). It is optional (built by
``setup.py`` when a C compiler is there), and every caller keeps a numpy or Python version of each
function, used when :func:`wire` is None; the tests hold the two to the same answers and bytes.

Why one module: the import and the stale-build check are one concept. A build from another
version of ``_wire.c`` (its ``API`` constant is not :data:`WIRE_API`) is refused with a warning
rather than called with arguments it does not take. Raise ``API`` in ``_wire.c`` and
:data:`WIRE_API` here together whenever a function's arguments or results change.

The switches the tests use: ``batch_decode._wire`` None runs the numpy reading paths (bound from
here at import); this module's ``_wire`` None runs the numpy writing paths (read at call time
through :func:`wire`). This module imports nothing of the package.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Optional

WIRE_API = 16  # the interface of bert_data/format/_wire.c its callers expect (its API constant)

def bind_optional(name: str, api: int, without: str) -> Optional[ModuleType]:
    """The optional C module ``name`` (built by setup.py when a compiler is there), or None: not
    built, or built from another version of its source (an editable checkout after a pull), whose
    ``API`` constant differs from ``api``: never called then, and a warning says what runs
    instead (``without``) and how to rebuild. The one binding rule of every C module."""
    try:
        module = importlib.import_module(name)
    except ImportError:  # no C compiler at install time
        return None
    if getattr(module, "API", None) != api:  # a stale build
        logging.getLogger(__name__).warning(
            "%s was built from another version of %s.c (API %s, expected %s): %s; rebuild it with `pip install -e .` "
            "(or reinstall)", name, name.rsplit(".", 1)[-1], getattr(module, "API", None), api, without,
        )
        return None
    return module


_wire = bind_optional("bert_data.format._wire", WIRE_API, "reading and writing TFRecords with numpy")


def wire() -> Optional[ModuleType]:
    """The C accelerator module, or None (the numpy paths are used). Read at call time, so a test
    that sets this module's ``_wire`` to None runs the writers' numpy paths."""
    return _wire

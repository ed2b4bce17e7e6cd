"""How ``mosaicml-streaming`` is imported: whole for its readers (:func:`streaming_base`), and for
a run that only writes MDS, its writer's own modules with stand-ins for what they import at their
top but never use in writing (:func:`mds_writer_class`).

Why stand-ins: ``streaming/base/util.py`` imports ``torch.distributed`` for index merging, which
writing never calls (PyTorch: 1.0 CPU-s and ~250 MB a run); its MDS encodings import PIL for
image columns, its compression module brotli, snappy and zstd, its uploader tqdm, its shared
barrier filelock (0.06 -> 0.03 s measured alone; the publish of a 1-worker run was ~0.3 s, issue
28). Each stand-in is a module in ``sys.modules`` only while the writer's modules load; the names
they take from it then (:data:`STAND_INS`) are annotation-only classes, functions and classes that
forward to the real module when first used. A stand-in's attribute read afterwards imports the real module, so
every later use (a reader, an image column, a rank query) is the real code. Meanwhile each
stand-in's import lock is held, and the stand-in says it is initializing: another thread that
imports one of them waits until the window ends (helper-33, helper-34: :func:`_module_locks`). A
name read while they load that the table does not list makes the import start over without
stand-ins (another streaming release: slower, never different). A module already imported is
used as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from typing import Dict

_IMPORT_LOCK = threading.Lock()


def streaming_base() -> types.ModuleType:
    """``streaming.base`` (MDSWriter, StreamingDataset, the MDS reader).

    ``import streaming`` also imports its vision and text datasets, hence torchvision, which
    fails where torchvision is missing or does not match the installed torch (a CPU torch with
    PyPI's CUDA torchvision, say) although nothing here needs it. When that import fails for that reason,
    the package's ``base`` is imported without the package's ``__init__`` (the same code)."""
    with _IMPORT_LOCK:
        base = _import_streaming_base()
        _link_submodules()
        return base


def _import_streaming_base():
    try:
        import streaming.base as base  # noqa: F401

        return base
    except ImportError as exc:
        if (exc.name or "streaming").split(".")[0] == "streaming":
            raise  # streaming itself is not installed
    except Exception:  # noqa: BLE001 - torchvision's own import failing (RuntimeError), not streaming's
        pass
    spec = importlib.util.find_spec("streaming")
    package = types.ModuleType("streaming")
    package.__path__ = list(spec.submodule_search_locations)  # type: ignore[union-attr]
    package.__spec__ = spec
    for name in [m for m in sys.modules if m == "streaming" or m.startswith("streaming.")]:
        del sys.modules[name]
    sys.modules["streaming"] = package
    import streaming.base as base

    return base


_WRITER_CLASS = None  # MDSWriter as imported by mds_writer_class


def mds_writer_class() -> type:
    """``MDSWriter``, for a run that only writes: imported without the ``__init__`` of ``streaming``
    and ``streaming.base``, which import its datasets and data loader and with them transformers
    (1.3 CPU-s and ~25 MB in a run whose MDS writing costs about as much), and with the stand-ins
    of :data:`STAND_INS`. Its modules stay imported, the two packages do not: a later ``import
    streaming`` (a reader, :func:`streaming_base`) imports them whole, as usual, around those
    modules. When ``streaming.base`` is already imported, its ``MDSWriter`` is the one used."""
    global _WRITER_CLASS
    with _IMPORT_LOCK:
        base = sys.modules.get("streaming.base")
        if base is not None and hasattr(base, "MDSWriter"):
            return base.MDSWriter
        if _WRITER_CLASS is None:
            _WRITER_CLASS = _import_writer_alone()
        return _WRITER_CLASS


def _import_writer_alone():
    before = set(sys.modules)
    try:
        with _module_locks(sorted(STAND_INS)):  # (another thread importing one of them waits for the window's end)
            stand_ins = _stand_ins_needed()  # (after the locks: what another thread imported meanwhile is used as it is)
            if stand_ins:
                return _import_writer_modules(stand_ins)
    except (ImportError,) + _DEADLOCK:  # another streaming release reads another name as it loads (or a thread's
        for name in set(sys.modules) - before:  # import waits for a lock of ours while ours waits for one of its):
            if name.split(".")[0] == "streaming":  # its modules go, then the real modules
                del sys.modules[name]
    return _import_writer_modules(())


_DEADLOCK = tuple(error for error in [getattr(importlib._bootstrap, "_DeadlockError", None)] if error)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _module_locks(names):
    """Each module's import lock (the one ``importlib`` holds while it imports the module), held
    while its stand-in is in ``sys.modules``. One already being imported by another thread is
    finished first. Another thread that imports one meanwhile waits (a stand-in says it is
    initializing), then: ``importlib.import_module`` and ``from X import Y`` read ``sys.modules``
    again and import the real module; an ``import X`` statement returns the stand-in it found,
    whose attributes are the real module's from then on (and ``import PIL.Image`` finds ``Image``
    on the real ``PIL``: :func:`_hand_over`). Without importlib's lock manager (another Python),
    nothing is held."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)  # type: ignore[attr-defined]
    with contextlib.ExitStack() as held:
        if manager is not None:
            for name in names:
                held.enter_context(manager(name))
        yield


def _hand_over(lazy) -> None:
    """Before the locks go: a stand-in of a submodule whose real package is imported (``PIL.Image``)
    that a thread waits for (an ``import PIL.Image`` statement, which binds the real ``PIL`` and
    will hold the stand-in) is made the package's attribute, which the real module replaces when
    it is imported. Without a waiter nothing is set: a later ``from PIL import Image`` imports it."""
    get_lock = getattr(importlib._bootstrap, "_get_module_lock", None)  # type: ignore[attr-defined]
    for name, module in lazy.items():
        parent, _, child = name.rpartition(".")
        holder = sys.modules.get(parent) if parent and parent not in lazy else None
        if holder is None or hasattr(holder, child) or get_lock is None:
            continue
        if getattr(get_lock(name), "waiters", 0):
            setattr(holder, child, module)


def _stand_ins_needed():
    """The modules of :data:`STAND_INS` to stand in: those not imported yet whose parent is
    stood in too or is no stand-in's (``torch.distributed`` only with ``torch``: a real package
    with a stand-in for its submodule would be half of each)."""
    needed = []
    for name in STAND_INS:  # (parents first)
        parent = name.rpartition(".")[0]
        if name not in sys.modules and (not parent or parent in needed or parent not in STAND_INS):
            needed.append(name)
    return needed


def _import_writer_modules(stand_ins):
    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'streaming'", name="streaming")
    packages = {name: sys.modules.get(name) for name in ("streaming", "streaming.base")}
    lazy = {name: _LazyModule(name) for name in stand_ins}
    for module in lazy.values():  # ("initializing": another thread's import of it waits for its lock, held by us)
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
        module.__spec__._initializing = True  # type: ignore[attr-defined]
    for name, module in lazy.items():  # each an attribute of its stood-in parent (`import torch.distributed as dist` reads it)
        parent, _, child = name.rpartition(".")
        if parent in lazy:
            setattr(lazy[parent], child, module)
    root = types.ModuleType("streaming")
    root.__path__ = list(spec.submodule_search_locations)
    base = types.ModuleType("streaming.base")
    base.__path__ = [os.path.join(path, "base") for path in root.__path__]
    try:
        sys.modules["streaming"], sys.modules["streaming.base"] = root, base
        sys.modules.update(lazy)
        return importlib.import_module("streaming.base.format.mds.writer").MDSWriter
    finally:  # the two packages as they were (absent); the modules under them stay (upload.py looks itself up)
        for name, module in packages.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name, module in lazy.items():
            module.__spec__._initializing = False  # type: ignore[attr-defined]
            if sys.modules.get(name) is module:
                del sys.modules[name]  # a later import is the real one; the writer's references load it when used
        _hand_over(lazy)


def _standing_in(module_name: str) -> bool:
    return getattr(sys.modules.get(module_name), "__stand_in__", False)


class _LazyModule(types.ModuleType):
    """A module that the MDS writer's modules import but that is loaded only when one of its
    attributes is first used (see the module docstring). Once the writer is imported the
    stand-ins leave ``sys.modules``; an attribute read then imports the real module and returns
    its attribute (while they still stand in, only the names of :data:`STAND_INS` are read)."""

    __stand_in__ = True

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # (__path__, __file__...: what the import machinery asks hasattr() of)
            raise AttributeError(attribute)
        if sys.modules.get(self.__name__) is self:  # still standing in, while the writer's modules load
            kind = STAND_INS[self.__name__].get(attribute)
            if kind == "annotation":
                return type(attribute, (), {"__module__": self.__name__, "__doc__": "bert_data's stand-in (annotations)"})
            if kind == "function":
                return _forwarding(self.__name__, attribute)
            if kind == "class":
                return _ForwardingClass(attribute, (), {"__module__": self.__name__, "__doc__": "bert_data's stand-in"})
            raise ImportError(f"{self.__name__}.{attribute} is used while the MDS writer's modules load")
        return getattr(importlib.import_module(self.__name__), attribute)


def _real(module: str, name: str):
    """``module.name``, the real one (imported now if need be)."""
    if _standing_in(module):
        raise ImportError(f"{module}.{name} is used while the MDS writer's modules load")
    return getattr(importlib.import_module(module), name)


def _forwarding(module: str, name: str):
    """A function that calls ``module.name``, importing the module at its first call."""

    def forward(*args, **kwargs):
        return _real(module, name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


class _ForwardingClass(type):
    """The type of a class stand-in (``JpegImageFile``, ``FileLock``): calling it makes an instance
    of the real class, ``isinstance`` and ``issubclass`` ask the real class, and so does reading
    one of its attributes, each importing the real module at its first use."""

    def __call__(cls, *args, **kwargs):
        return _real(cls.__module__, cls.__name__)(*args, **kwargs)

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, _real(cls.__module__, cls.__name__))

    def __subclasscheck__(cls, subclass) -> bool:
        return issubclass(subclass, _real(cls.__module__, cls.__name__))

    def __getattr__(cls, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(_real(cls.__module__, cls.__name__), attribute)


# What the writer's modules of mosaicml-streaming 0.13 import but writing uncompressed MDS never
# uses, and the names they take from each as they load (parents before their submodules):
# - torch: classes only to annotate functions (streaming/base/distributed.py: `from torch import
#   Tensor`), functions called only by readers (streaming/base/world.py: `get_worker_info`);
# - PIL: `from PIL import Image` (annotations: `obj: Image.Image`) and `JpegImageFile` (an
#   isinstance in the JPEG encoding), streaming/base/format/mds/encodings.py;
# - brotli, snappy, zstd (streaming/base/compression.py) and tqdm (storage/upload.py): modules
#   whose functions are called, never read at load;
# - filelock: `from filelock import FileLock`, made by the shared barrier of a reader.
# Any other name read while they load makes the import start over without stand-ins.
STAND_INS: Dict[str, Dict[str, str]] = {
    "torch": {"Tensor": "annotation"},
    "torch.distributed": {},
    "torch.utils": {},
    "torch.utils.data": {"get_worker_info": "function"},
    "PIL.Image": {"Image": "annotation"},
    "PIL.JpegImagePlugin": {"JpegImageFile": "class"},
    "brotli": {},
    "snappy": {},
    "zstd": {},
    "tqdm": {},
    "filelock": {"FileLock": "class"},
}


def _link_submodules() -> None:
    """Each imported ``streaming`` module an attribute of its package, as an import makes it: the
    packages imported after :func:`mds_writer_class` did not import the modules it left."""
    for name, module in list(sys.modules.items()):
        parent, _, child = name.rpartition(".")
        if parent.split(".")[0] == "streaming" and parent in sys.modules and not hasattr(sys.modules[parent], child):
            setattr(sys.modules[parent], child, module)

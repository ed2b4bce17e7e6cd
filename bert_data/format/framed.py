"""A partial shard's TFRecord frames read a window at a time: what MDS's shard writer reads at
publish (HDF5's hands h5py views of the frames it reads, kept until a chunk is whole: it reads
them with :func:`~bert_data.format.batch_decode.iter_record_batches`; windows were tried for it
and saved nothing next to h5py's writes).

Why windows: the frames are read into one buffer per thread, used again for every window, piece
and shard. Fresh memory is what costs in the publish here (a VM whose unused memory the host
takes back: ~2.4 ms per MB at first touch, so a 64 MB piece buffer cost more than writing it),
and a window bounds the memory a shard's rewriting holds. :class:`FramedFile` reads the frames
(every CRC checked, a damaged file raising what :func:`~bert_data.format.batch_decode.iter_record_batches`
raises for it) and reads chosen frames again, checked again (:meth:`FramedFile.gather`: MDS, whose
pieces' headers precede their samples and are known only once the pieces are cut).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterator, NamedTuple, Tuple

import numpy as np

from ..errors import RecordFormatError
from . import batch_decode, native
from .batch_decode import cut_frames, iter_record_batches

WINDOW = 1 << 20  # bytes of samples gathered at once into a thread's window (written, hashed, then the next)
_WINDOW = threading.local()  # each thread's window, kept for its next piece: its pages are touched already


def thread_window(size: int) -> memoryview:
    """This thread's window, at least ``size`` bytes (one larger sample's frame grows it for once)."""
    window = getattr(_WINDOW, "buffer", None)
    if window is None or len(window) < size:
        window = np.empty(max(size, WINDOW), np.uint8)
        if size <= WINDOW:
            _WINDOW.buffer = window
    return memoryview(window)


def spans(begins: np.ndarray, ends: np.ndarray) -> Iterator[Tuple[int, int]]:
    """Consecutive items ``[i, j)`` whose bytes, ``begins[i]`` to ``ends[j - 1]``, take at most a
    window (or one item, larger than a window)."""
    i, n = 0, len(begins)
    while i < n:
        j = max(i + 1, int(np.searchsorted(ends, begins[i] + WINDOW, side="right")))
        yield i, min(j, n)
        i = min(j, n)


def copy_ranges(source: memoryview, starts: np.ndarray, lengths: np.ndarray, out: memoryview) -> int:
    """``source``'s ranges back to back at the start of ``out`` (which may be ``source``: each
    range moves left); their total. One C loop of memmove, or a slice at a time without it."""
    wire = native.wire()
    if wire is not None:
        return wire.copy_ranges(source, starts, lengths, out, 0)
    at = 0
    for start, length in zip(starts.tolist(), lengths.tolist()):
        out[at:at + length] = source[start:start + length]
        at += length
    return at


class Frames(NamedTuple):
    """The whole frames of one window of a :class:`FramedFile`: payload ``i`` is at ``starts[i]``
    in the file, ``lengths[i]`` bytes."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64


class FramedFile:
    """A partial shard of TFRecord frames (the workers' runs), read a window at a time: its
    frames in order (:meth:`frames`, every CRC checked), and chosen frames again
    (:meth:`gather`: MDS reads a piece's frames twice, once for their lengths, which cut the
    pieces and make their headers, then for their samples). Every read lands in the thread's
    window: nothing of a shard or a piece is held, and the memory touched is the window (and, once,
    a larger buffer for a frame larger than it) and each window's frame offsets.
    Opening it raises :class:`RecordFormatError` caused by the ``OSError``, as
    ``iter_record_batches`` does."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._handle = batch_decode.open_regular(path)  # (as iter_record_batches opens: not a FIFO that would block)
        except OSError as exc:  # (said as iter_record_batches says it; a caller tells an I/O error by its cause)
            raise RecordFormatError(f"{path}: cannot open TFRecord file: {exc.strerror or exc}") from exc
        self.fd = self._handle.fileno()
        try:
            self.size = os.fstat(self.fd).st_size
        except BaseException:
            self._handle.close()
            raise

    def _read(self, window: memoryview, at: int) -> int:
        """``window`` filled from byte ``at`` (less only at the file's end); the bytes read."""
        got = 0
        while got < len(window):
            more = os.preadv(self.fd, [window[got:]], at + got)
            if not more:
                break
            got += more
        return got

    def frames(self, stopped: Callable[[], bool] = lambda: False) -> Iterator[Frames]:
        """Every frame, in order, a window at a time (:class:`Frames`), both CRCs of each checked.
        A damaged or cut-short file raises what ``iter_record_batches`` raises for it.
        ``stopped()`` is asked between windows (the run is stopping: give up)."""
        at, need = 0, WINDOW
        while at < self.size:
            if stopped():
                raise InterruptedError(self.path)
            window = thread_window(need)[:min(need, self.size - at)]
            got = self._read(window, at)
            starts, lengths, end, bad = cut_frames(window[:got])
            if bad or (not end and got < need):  # a damaged frame, or one the file's end cuts short
                self._damaged(at + end)
            if not end:  # one frame larger than the window (its header checked): read it whole
                need = 16 + int(np.frombuffer(window[:8], "<u8")[0])
                if need > self.size - at:
                    self._damaged(at)
                continue
            yield Frames(at + starts, lengths.copy())  # (copies: views would keep cut_frames' whole arrays)
            at, need = at + end, WINDOW

    def _damaged(self, at: int) -> None:
        for _ in iter_record_batches(self.path):  # (its exact error: the frame, what is wrong with it)
            pass
        raise RecordFormatError(f"{self.path}: a damaged frame at byte {at}")

    def gather(self, starts: np.ndarray, lengths: np.ndarray) -> Iterator[memoryview]:
        """The payloads at ``starts`` (offsets in the file) of consecutive frames, a window at a
        time, read again and checked again (both CRCs, the lengths): a file written to since
        :meth:`frames` read it is an error, never other bytes (helper-33: a byte changed in place
        kept every length, and the piece took it)."""
        begins, ends = starts - 12, starts + lengths + 4  # (a frame: length, its CRC, payload, its CRC)
        for i, j in spans(begins, ends):
            at, size = int(begins[i]), int(ends[j - 1] - begins[i])
            window = thread_window(size)[:size]
            got = self._read(window, at)
            found, found_lengths, end, bad = cut_frames(window[:got])
            if bad or end != size or not np.array_equal(found_lengths, lengths[i:j]):
                raise RecordFormatError(f"{self.path}: the frames at byte {at} changed after they were read "
                                        f"(the file was written to meanwhile)")
            yield window[:copy_ranges(window, found, found_lengths, window)]

    def close(self) -> None:
        self._handle.close()

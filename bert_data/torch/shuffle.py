"""A bounded record shuffle buffer, ``tf.data.Dataset.shuffle(buffer_size)``'s algorithm, a whole
chunk at a time.

The buffer holds ``capacity`` records. Once it is full, each arriving record takes the place of
a uniformly drawn one, which leaves; at the end what is left leaves in a random order. So a
record can travel arbitrarily far from where it was read, and memory is ``capacity`` records
whatever the size of the files (together with the file order shuffled per epoch, this is how
``run_pretraining.py``'s input pipeline shuffles).

Done one record at a time in Python that would cost more than decoding; here a whole chunk of
``m`` arriving records is placed at once: the ``m`` slots are drawn together, and record ``i``
leaving through slot ``j`` is the one the last earlier arrival of the chunk put in ``j``, else
what ``j`` held before the chunk (found with one stable sort of the slots). The output is
exactly that of the one-record-at-a-time loop with the same draws, which a test checks.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from .records import Chunk, chunk_len, take_rows

__all__ = ["ShuffleBuffer"]


class ShuffleBuffer:
    """Records in, the same records out in a seeded random order; at most ``capacity`` held."""

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        self.capacity = int(capacity)
        self.rng = rng
        self.buffer: Optional[Dict[str, np.ndarray]] = None
        self.filled = 0

    def _allocate(self, chunk: Chunk) -> Dict[str, np.ndarray]:
        return {name: np.empty((self.capacity,) + values.shape[1:], values.dtype) for name, values in chunk.items()}

    def push(self, chunk: Chunk) -> Optional[Chunk]:
        """Add ``chunk``'s records; returns the records that leave (as many as arrived once the
        buffer is full), or None while it fills."""
        n = chunk_len(chunk)
        if self.buffer is None:
            self.buffer = self._allocate(chunk)
        buffer = self.buffer
        take = min(self.capacity - self.filled, n)
        if take:
            for name, values in chunk.items():
                if buffer[name].dtype != values.dtype:  # (a wider value parsed on its own: keep it exact)
                    buffer[name] = buffer[name].astype(np.result_type(buffer[name].dtype, values.dtype))
                buffer[name][self.filled : self.filled + take] = values[:take]
            self.filled += take
        rest = n - take
        if rest == 0:
            return None
        new = take_rows(chunk, start=take)
        slots = self.rng.integers(0, self.capacity, rest)
        order = np.argsort(slots, kind="stable")  # by slot, then by arrival
        by_slot = slots[order]
        follows = np.zeros(rest, bool)
        follows[1:] = by_slot[1:] == by_slot[:-1]  # an earlier arrival of this chunk wrote the slot
        earlier = np.zeros(rest, np.int64)
        earlier[1:] = order[:-1]
        source = np.empty(rest, np.int64)  # per arrival: the arrival it lets out (+capacity) or the slot
        source[order] = np.where(follows, self.capacity + earlier, by_slot)
        from_buffer = source < self.capacity
        out: Chunk = {}
        for name, values in new.items():
            leaving = np.empty_like(values)
            leaving[from_buffer] = buffer[name][source[from_buffer]]
            leaving[~from_buffer] = values[source[~from_buffer] - self.capacity]
            out[name] = leaving
        last = np.ones(rest, bool)
        last[:-1] = by_slot[1:] != by_slot[:-1]  # the last arrival into each slot stays
        for name, values in new.items():
            if buffer[name].dtype != values.dtype:
                buffer[name] = buffer[name].astype(np.result_type(buffer[name].dtype, values.dtype))
            buffer[name][by_slot[last]] = values[order[last]]
        return out

    def finish(self) -> Optional[Chunk]:
        """The records still held, in a random order (None when there are none); empties the buffer."""
        if self.buffer is None or not self.filled:
            return None
        rows = self.rng.permutation(self.filled)
        out = take_rows({name: values[: self.filled] for name, values in self.buffer.items()}, rows)
        self.buffer, self.filled = None, 0
        return out

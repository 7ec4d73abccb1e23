"""The inference server's per-batch machinery: bucket buffers written in place, and the
action-sampling keys drawn in blocks.

* :class:`BatchBuffer` — one preallocated host array per request array, as large as the
  largest bucket; each accepted request's rows are copied straight from its received
  frames to the next free rows (one copy, no concatenation), and ``act`` reads the
  first ``bucket`` rows (views made once per bucket, so a batch builds no pytree).
* :class:`KeyStream` — the keys ``self._rng, key = jax.random.split(self._rng)`` would
  give, one per call of ``act``, computed 256 at a time by one jitted scan (the same
  sequence, bit for bit, without an eager ``split`` per batch: about 50 µs of Python
  each on a CPU).
"""

from __future__ import annotations

import bisect
import functools
from typing import Mapping

import jax
import numpy as np

from jaxsrl.streams.wire import ArraySpec


class BatchBuffer:
    """Host rows of one batch, filled request by request.

    Args:
      schema: ``{name: ArraySpec}`` of the request arrays (leading dimension free).
      buckets: the batch sizes ``act`` is compiled for, ascending; the last is the most
        rows a batch holds.

    Attributes:
      arrays: name -> ``[buckets[-1], ...]`` array the rows are written to.
      rows: rows written since the last :meth:`clear`.
    """

    def __init__(self, schema: Mapping[str, ArraySpec], buckets: list[int]):
        self.buckets = list(buckets)
        self.capacity = self.buckets[-1]
        self.arrays = {k: np.zeros((self.capacity, *s.shape[1:]), s.dtype) for k, s in schema.items()}
        self._views = {b: {k: a[:b] for k, a in self.arrays.items()} for b in self.buckets}
        self._row_bytes = {k: a[0].nbytes for k, a in self.arrays.items()}
        self._bytes = {k: memoryview(a.reshape(-1).view(np.uint8)) for k, a in self.arrays.items()}
        self.rows = 0

    def bucket(self, rows: int) -> int:
        """The smallest bucket holding ``rows`` rows.

        Raises:
          ValueError: ``rows`` exceeds the largest bucket.
        """
        i = bisect.bisect_left(self.buckets, rows)
        if i == len(self.buckets):
            raise ValueError(f"{rows} rows exceed the largest bucket {self.capacity}")
        return self.buckets[i]

    def add(self, arrays: Mapping[str, np.ndarray], n: int, skip=()) -> int:
        """Copy a request's arrays (``n`` rows each, names of the schema but those in
        ``skip``, whose rows the caller writes) after the rows
        already written; returns their first row. An array viewing a whole ``bytes``
        object (a received frame) in the buffer's dtype and row shape is copied as bytes
        (a third of NumPy's cost); any other is assigned by NumPy.

        Raises:
          ValueError: they do not fit (the caller answers the batch first).
        """
        start = self.rows
        if start + n > self.capacity:
            raise ValueError(f"{n} more rows do not fit after {start} of {self.capacity}")
        for k, a in self.arrays.items():
            if k in skip:
                continue
            src = arrays[k]
            raw, row_bytes = src.base, self._row_bytes[k]
            if (type(raw) is bytes and len(raw) == n * row_bytes  # noqa: E721
                    and src.dtype == a.dtype and src.shape[1:] == a.shape[1:]
                    and src.flags.c_contiguous):
                # a received frame viewed whole (wire.SchemaDecoder): copy its bytes as they are
                self._bytes[k][start * row_bytes:(start + n) * row_bytes] = raw
            else:
                a[start:start + n] = src
        self.rows = start + n
        return start

    def add_frames(self, frames, arrays, n: int) -> int:
        """Copy a request's array frames after the rows already written, as they are: each
        ``(i, name, nbytes)`` of ``arrays`` (a
        :class:`~jaxsrl.workers.inference.admitted.Verdict`'s) says that ``frames[i]`` (bytes-like) holds ``n`` rows of array ``name`` in its dtype
        and row shape, ``nbytes`` bytes; they must cover every array. Returns their first row.

        Raises:
          ValueError: they do not fit (the caller answers the batch first).
        """
        start = self.rows
        if start + n > self.capacity:
            raise ValueError(f"{n} more rows do not fit after {start} of {self.capacity}")
        row_bytes, dst = self._row_bytes, self._bytes
        for i, name, nbytes in arrays:
            offset = start * row_bytes[name]
            dst[name][offset:offset + nbytes] = frames[i]
        self.rows = start + n
        return start

    def view(self, bucket: int) -> dict:
        """Name -> the first ``bucket`` rows of each array (views, made once)."""
        return self._views[bucket]

    def clear(self) -> None:
        """Start a new batch (the rows written stay until overwritten)."""
        self.rows = 0


@functools.partial(jax.jit, static_argnums=1)
def _split_block(rng, n: int):
    def step(r, _):
        r, key = jax.random.split(r)
        return r, key
    return jax.lax.scan(step, rng, None, length=n)


class KeyStream:
    """Keys for successive ``act`` calls: the ``i``-th is what the ``i``-th
    ``rng, key = jax.random.split(rng)`` starting from ``rng`` returns.

    Args:
      rng: the starting key (``jax.random.PRNGKey(seed)``; raw ``uint32[2]`` keys are
        handed out as NumPy arrays, typed keys as device arrays).
      block: keys computed per jitted call.
    """

    def __init__(self, rng, block: int = 256):
        self._rng, self._block = rng, int(block)
        self._keys: list = []
        self._next = 0

    def peek(self):
        """The next key, without taking it (e.g. to compile ``act`` for its type)."""
        if self._next == len(self._keys):
            self._rng, keys = _split_block(self._rng, self._block)
            typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
            self._keys = list(keys) if typed else list(np.asarray(keys))
            self._next = 0
        return self._keys[self._next]

    def next(self):
        """The next key (taken)."""
        key = self.peek()
        self._next += 1
        return key

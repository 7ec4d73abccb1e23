"""Recurrent state kept by the inference server: an actor's request need not carry it.

An actor's request for a ring group carries each row's recurrent state (``carry/i``
``[n, ...]``), and in the steady state that state is exactly what the server answered the
group last time, except rows whose episode ended since, which the actor zeroed. For the
full hide-and-seek game (two LSTMs of 256) the carry is three quarters of the bytes an
actor sends (``docs/benchmarks.md``, rung 12). So:

* The server keeps, per connection (its ROUTER identity) and ``group``, the carry rows of
  its last reply, in a :class:`KeptCarries` (bounded in bytes; the oldest entries go first).
* The actor's client (``jaxsrl.workers.actor.server_client``) compares the carry it is
  about to send with the last reply's, bit for bit (:func:`keep_mask`): when every row is
  either that reply's row or all zero bits, it sends ``carry_kept`` ``[n]`` uint8 (1: the
  kept row, 0: zeros) instead of the carry arrays. Anything else (a first request, after a
  failover, a carry changed otherwise) sends the carry in full.
* A server that holds no kept carry of ``n`` rows for the request's connection and group
  (restarted, evicted, another server) answers ``resend`` (meta ``{group}``, no arrays);
  the client then sends that request again with its carry in full.

The server fills its batch rows from the kept arrays with zeros where ``carry_kept`` is
0 (:meth:`KeptCarries.fill`): the rows ``act`` sees are bit for bit those of the full
request. No JAX here (actors import it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import numpy as np

#: wire name of the ``[n]`` uint8 array that replaces the carry arrays of a request.
KEPT = "carry_kept"
#: kind of the server's answer to a kept request it cannot serve (meta ``{group}``).
RESEND = "resend"


def _bits(a: np.ndarray) -> np.ndarray:
    """``a`` ``[n, ...]`` viewed as ``[n, bytes per row]`` uint8 (a copy if not contiguous)."""
    a = np.ascontiguousarray(a)
    return a.reshape(len(a), -1).view(np.uint8)


def keep_mask(carry: Mapping[str, np.ndarray], last: Mapping[str, np.ndarray] | None
              ) -> np.ndarray | None:
    """The ``carry_kept`` array of a request whose carry is ``carry`` (name -> ``[n, ...]``),
    the last reply's being ``last`` (the same names and shapes), or ``None`` if the carry
    must be sent in full.

    Returns:
      ``[n]`` uint8: 1 where every leaf's row equals ``last``'s bit for bit, 0 where every
      leaf's row is all zero bits (a new episode; ``-0.0`` is not zero bits); ``None`` when
      ``last`` is ``None``, has other names or shapes, or some row is neither.
    """
    if last is None or not carry or set(carry) != set(last):
        return None
    same = zero = None
    for name, value in carry.items():
        old = last[name]
        if old.shape != value.shape or old.dtype != value.dtype:
            return None
        bits, old_bits = _bits(value), _bits(old)
        eq = (bits == old_bits).all(axis=1)
        nil = ~bits.any(axis=1)
        same = eq if same is None else same & eq
        zero = nil if zero is None else zero & nil
    if not (same | zero).all():
        return None
    return same.astype(np.uint8)


class KeptCarries:
    """The server's kept carries: ``(identity, group)`` -> name -> ``[n, ...]`` arrays.

    Args:
      max_bytes: most bytes kept; putting more evicts the oldest entries first.

    Attributes:
      nbytes: bytes kept now.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self._entries: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, identity: bytes, group: int, rows: int) -> dict | None:
        """The kept arrays of ``(identity, group)`` if they have ``rows`` rows, else ``None``."""
        entry = self._entries.get((identity, group))
        if entry is None or len(next(iter(entry.values()))) != rows:
            return None
        return entry

    def put(self, identity: bytes, group: int, arrays: Mapping[str, np.ndarray]) -> None:
        """Keep copies of ``arrays`` (name -> ``[n, ...]``: copies, so that an entry never
        holds on to a whole batch's outputs) for ``(identity, group)``, replacing what was
        kept for it; the oldest entries are dropped past ``max_bytes``."""
        key = (identity, group)
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= sum(a.nbytes for a in old.values())
        entry = {k: np.array(v) for k, v in arrays.items()}
        size = sum(a.nbytes for a in entry.values())
        if size > self.max_bytes:
            return
        while self._entries and self.nbytes + size > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.nbytes -= sum(a.nbytes for a in dropped.values())
        self._entries[key] = entry
        self.nbytes += size

    @staticmethod
    def fill(dst: Mapping[str, np.ndarray], kept: Mapping[str, np.ndarray], keep: np.ndarray) -> None:
        """Write the request's carry rows into ``dst`` (name -> ``[n, ...]`` views of the
        batch buffer): ``kept``'s rows where ``keep`` (``[n]`` uint8) is 1, zeros where 0.

        Raises:
          ValueError: ``keep`` holds a value other than 0 or 1.
        """
        keep = np.asarray(keep)
        if keep.size and keep.max() > 1:
            raise ValueError(f"{KEPT} must hold 0 or 1, got {int(keep.max())}")
        zero = keep == 0
        for name, out in dst.items():
            out[...] = kept[name]
            if zero.any():
                out[zero] = 0

"""Server side of the parameter stream: :class:`ParamSubscriber` rebuilds a policy's
parameters from ``param_chunk`` messages and publishes them locally (see
:mod:`jaxsrl.streams.param_stream`)."""

from __future__ import annotations

import collections
import logging
import math
import threading
import zlib
from typing import Any, Callable, Sequence

import jax
import numpy as np
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.streams import wire
from jaxsrl.streams.admission import DropLog
from jaxsrl.streams.param_wire import ACTORS_TOPIC, CHUNK_BYTES, leaf_specs, topic
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.sockets import open_socket

log = logging.getLogger("jaxsrl.streams.param_stream")


class _Assembly:
    """The chunks of one (stream, version) received so far."""

    def __init__(self, meta: dict):
        self.key = (meta["stream"], meta["version"])
        self.shape = (meta["chunks"], meta["chunk_bytes"], meta["nbytes"], meta["crc32"])
        self.parts: dict[int, memoryview] = {}
        self.leaves: list | None = None


class ParamSubscriber(Worker):
    """Server-process side: rebuilds ``policy``'s parameters and publishes them locally.

    Args:
      address: the publisher's address.
      policy: the policy this server serves.
      template: a pytree with the parameters' structure, leaf dtypes and shapes (arrays
        or ``jax.ShapeDtypeStruct``; e.g. ``jax.eval_shape`` of the agent's ``init``).
      store: local store the :class:`~jaxsrl.workers.inference.policy.PolicyWorker` reads.
      put: places a host pytree on the devices (default ``jax.device_put``).
      context: ZeroMQ context (default: the process-wide one).
      curve: ``(server_public, public, secret)`` to connect as a CURVE client, or ``None``.
      on_actor_runs: called with ``{actor_id: run_id}`` for each ``actor_runs`` message.
      max_pending: versions assembled at once; older incomplete ones are dropped.

    Attributes:
      version: newest version published into ``store`` (-1: none yet).
      received: versions taken.
      dropped: ``Counter`` of dropped messages or versions by reason (``malformed``,
        ``old_version``, ``incomplete``, ``mismatch``, ``checksum``).
      last_drop: reason and detail of the newest drop (``""``: none).
      error: an unexpected exception that stopped the thread (never input; also
        logged), or ``None``.
      ready: set once the SUB socket is connected.
    """

    reraise = False
    log = log

    def __init__(self, address: str, policy: str, template: Any, store: ParameterStore,
                 put: Callable[[Any], Any] = jax.device_put, context: zmq.Context | None = None,
                 curve: tuple | None = None, on_actor_runs: Callable[[dict], None] | None = None,
                 max_pending: int = 2):
        super().__init__("parameter subscriber")
        self.address, self.policy, self.store, self._put = address, policy, store, put
        self._context, self._curve, self._on_actor_runs = context, curve, on_actor_runs
        self._specs, self._treedef = leaf_specs(template)
        self._nbytes = sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize for s in self._specs)
        self.max_pending = max(1, max_pending)
        self.version, self.stream, self.received = -1, None, 0
        self.dropped: collections.Counter = collections.Counter()
        self.last_drop = ""  # reason and detail of the newest drop
        self._pending: dict[tuple, _Assembly] = {}
        self._drop_log = DropLog(log, "parameter message")
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="param-subscriber", daemon=True)
        self._thread.start()
        self.ready.wait(10)

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def connect(self) -> zmq.Socket:
        """A SUB socket connected to the publisher, subscribed to this policy's topic (and
        the actor table's if ``on_actor_runs`` is given), for a caller that polls it
        itself and passes each message to :meth:`handle` (an inline actor, between two
        steps); the thread of :meth:`start` uses one too. The caller closes it."""
        topics = [topic(self.policy)] + ([ACTORS_TOPIC] if self._on_actor_runs is not None else [])
        sock = open_socket(
            self._context, zmq.SUB,
            # Room for ~3 versions: more means this thread fell behind (then chunks drop).
            recv_hwm=max(64, 3 * math.ceil(self._nbytes / CHUNK_BYTES) + 16),
            # Larger frames than a whole version cannot be valid: disconnect the peer.
            max_frame_bytes=max(wire.MAX_HEADER_BYTES, self._nbytes),
            curve_client=self._curve, subscribe=topics)
        try:
            sock.connect(self.address)
        except BaseException:
            sock.close()
            raise
        return sock

    def _run(self) -> None:
        """Receive until ``stop`` is set (``run()`` calls this; errors end up in ``error``)."""
        sock = self.connect()
        try:
            self.ready.set()
            self.start_serving()
            while not self.stop.is_set():
                self.beat()
                if sock.poll(100):
                    self.handle(sock.recv_multipart(copy=False))
        finally:
            sock.close()

    def handle(self, frames: Sequence) -> bool:
        """Take one received message (topic frame first); returns whether a new version
        was published. Bad input is dropped and counted, never raised."""
        try:
            return self._handle(frames)
        except _Drop as drop:
            self._drop(drop.reason, drop.detail)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep going)
            self._drop("malformed", f"{type(exc).__name__}: {exc}")
        return False

    def _drop(self, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        self.last_drop = f"{reason}: {detail}"
        self._drop_log(f"param stream of {self.policy}", f"{reason}: {detail}")

    def _handle(self, frames: Sequence) -> bool:
        if len(frames) < 2:
            raise _Drop("malformed", f"{len(frames)} frames")
        head = bytes(getattr(frames[0], "bytes", frames[0]))
        msg = wire.decode(frames[1:], max_bytes=max(1, self._nbytes))
        if head == ACTORS_TOPIC and msg.kind == "actor_runs" and self._on_actor_runs is not None:
            self._on_actor_runs(_actor_runs(msg.meta.get("runs")))
            return False
        if head != topic(self.policy) or msg.kind != "param_chunk":
            raise _Drop("malformed", f"unexpected topic {head[:40]!r} / kind {msg.kind!r}")
        meta = msg.meta
        ints = {k: meta.get(k) for k in ("version", "stream", "chunk", "chunks", "chunk_bytes",
                                          "nbytes", "crc32")}
        if not all(type(v) is int and 0 <= v < 2**63 for v in ints.values()):  # noqa: E721
            raise _Drop("malformed", f"meta fields must be non-negative integers: {ints}")
        if meta.get("policy") != self.policy:
            raise _Drop("malformed", f"policy {meta.get('policy')!r} is not {self.policy!r}")
        if ints["nbytes"] != self._nbytes:
            raise _Drop("mismatch", f"version {ints['version']} has {ints['nbytes']} bytes of "
                        f"parameters, the template {self._nbytes}")
        chunks, size, k = ints["chunks"], ints["chunk_bytes"], ints["chunk"]
        if size < 1 or chunks != max(1, math.ceil(self._nbytes / size)) or k >= chunks:
            raise _Drop("malformed", f"chunk {k} of {chunks} of {size} bytes: not a split of "
                        f"{self._nbytes} bytes")
        data = msg.arrays.get("data")
        expected = min(size, self._nbytes - k * size)
        if (len(msg.arrays) != 1 or data is None or data.dtype != np.uint8
                or data.shape != (expected,)):
            raise _Drop("malformed", f"chunk {k}: expected one uint8 'data' array of {expected} bytes")
        stream, version = ints["stream"], ints["version"]
        if stream == self.stream and version == self.version:
            return False  # a periodic re-send of the version served: nothing to do
        if stream == self.stream and version < self.version:
            raise _Drop("old_version", f"version {version} (serving {self.version})")
        key = (stream, version)
        asm = self._pending.get(key)
        if asm is None:
            asm = self._pending[key] = _Assembly(meta)
            self._evict()
        if asm.shape != (chunks, size, ints["nbytes"], ints["crc32"]):
            del self._pending[key]
            raise _Drop("malformed", f"version {version}: chunks disagree on size or checksum")
        if k == 0:
            asm.leaves = meta.get("leaves")
        asm.parts[k] = data.data
        if len(asm.parts) < chunks or asm.leaves is None:
            return False
        del self._pending[key]
        for other in [o for o in self._pending if o[0] == stream and o[1] < version]:
            del self._pending[other]
            self._drop("incomplete", f"version {other[1]} superseded by {version} before all "
                       "its chunks arrived")
        return self._take(stream, version, asm, ints["crc32"])

    def _evict(self) -> None:
        while len(self._pending) > self.max_pending:
            oldest = min(self._pending, key=lambda key: key[1])
            asm = self._pending.pop(oldest)
            self._drop("incomplete", f"version {oldest[1]}: {len(asm.parts)} of {asm.shape[0]} "
                       "chunks arrived before newer versions")

    def _take(self, stream: int, version: int, asm: _Assembly, crc: int) -> bool:
        blob = b"".join(asm.parts[k] for k in range(len(asm.parts)))
        if zlib.crc32(blob) != crc:
            raise _Drop("checksum", f"version {version}: CRC-32 mismatch")
        leaves = asm.leaves
        if not isinstance(leaves, list) or len(leaves) != len(self._specs):
            raise _Drop("mismatch", f"version {version}: {len(leaves) if isinstance(leaves, list) else leaves!r}"
                        f" leaves, the template has {len(self._specs)}")
        out, offset = [], 0
        for got, want in zip(leaves, self._specs):
            if (not isinstance(got, list) or len(got) != 3
                    or (got[0], got[1], tuple(got[2]) if isinstance(got[2], list) else None) != tuple(want)):
                raise _Drop("mismatch", f"version {version}: leaf {got!r} is not "
                            f"[{want.name}, {want.dtype}, {list(want.shape)}]")
            n = math.prod(want.shape)
            out.append(np.frombuffer(blob, want.dtype, n, offset).reshape(want.shape))
            offset += n * np.dtype(want.dtype).itemsize
        params = self._put(jax.tree_util.tree_unflatten(self._treedef, out))
        self.store.publish(self.policy, version, params)
        self.stream, self.version = stream, version
        self.received += 1
        return True


class _Drop(Exception):
    """Input to drop; ``reason`` is its ``dropped`` counter."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _actor_runs(runs: Any) -> dict:
    if not isinstance(runs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int and 0 <= x < 2**63 for x in p)  # noqa: E721
            for p in runs):
        raise _Drop("malformed", f"actor_runs must be [[actor, run], ...], got {str(runs)[:80]}")
    return {a: r for a, r in runs}

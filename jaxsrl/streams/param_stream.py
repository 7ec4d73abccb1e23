"""Parameter stream: a learner's newest parameters to remote inference servers (PUB/SUB).

A co-located inference server reads the learner's parameters on device through the
:class:`~jaxsrl.streams.params.ParameterStore`. A server in its own process (another host)
gets them over ZeroMQ: the learner process runs a :class:`ParamPublisher` (PUB,
bound), each server a :class:`ParamSubscriber` (SUB, connected), which rebuilds the
pytree and publishes it, on its own devices, into a local ``ParameterStore`` that the
unchanged :class:`~jaxsrl.workers.inference.policy.PolicyWorker` reads.

One policy version travels as ``chunks`` messages, each a topic frame followed by a
:mod:`jaxsrl.streams.wire` message (never pickled)::

    frame 0: topic  b"params/<policy>\\0"
    frames 1..: wire message kind "param_chunk",
        meta {policy, version, stream, chunk, chunks, chunk_bytes, nbytes, crc32,
              leaves (chunk 0 only: [[name, dtype, shape], ...])}
        arrays {"data": uint8 [<= chunk_bytes]}   bytes [chunk*chunk_bytes, ...) of the
                                                  leaves' raw C-order bytes, concatenated

``stream`` is a random id of the publisher (a new learner process may restart the
version count). The publisher sends each new version (at most one every
``interval_s``) and re-sends the newest every ``resend_s`` when nothing new was sent,
so a late-joining or restarted server catches up. It also sends the run's actor
table (topic ``b"actors\\0"``, kind ``actor_runs``, meta ``{"runs": [[actor, run],
...]}``) so remote servers drop requests of dead actor runs like local ones do.

The subscriber takes a version only when every chunk arrived and the bytes (count,
CRC-32) and every leaf (name, dtype, shape) match the template pytree; anything else
(garbage, a missing chunk, a wrong shape, a version older than the one it serves) is
dropped with a rate-limited logged reason and counted in ``dropped`` by reason; it
never raises on input. Re-sends of the version it serves are ignored silently.
"""

from __future__ import annotations

import collections
import logging
import math
import random
import threading
import time
import zlib
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.streams import wire
from jaxsrl.streams.admission import DropLog
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.sockets import bind, open_socket

log = logging.getLogger("jaxsrl.streams.param_stream")

CHUNK_BYTES = 1 << 20  # 1 MiB: one chunk never holds a socket for long
ACTORS_TOPIC = b"actors\0"


def topic(policy: str) -> bytes:
    """PUB/SUB topic of ``policy``'s parameters (``\\0`` ends it: ``a`` is no prefix of ``ab``)."""
    return b"params/" + policy.encode() + b"\0"


class LeafSpec(NamedTuple):
    """Name (``jax.tree_util.keystr`` of its path), dtype name and shape of one leaf."""

    name: str
    dtype: str
    shape: tuple


def leaf_specs(tree: Any) -> tuple[list[LeafSpec], Any]:
    """``([LeafSpec, ...], treedef)`` of a pytree of arrays (or ``ShapeDtypeStruct``)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [LeafSpec(jax.tree_util.keystr(path), np.dtype(x.dtype).name, tuple(x.shape))
            for path, x in flat], treedef


def encode_chunks(policy: str, version: int, params: Any, stream: int = 0,
                  chunk_bytes: int = CHUNK_BYTES) -> list[list]:
    """Split one version of host (NumPy) parameters into ``param_chunk`` messages.

    Args:
      policy: policy name.
      version: policy version (learner updates).
      params: pytree of host arrays (e.g. ``jax.device_get`` of the learner's).
      stream: the publisher's id.
      chunk_bytes: most data bytes per chunk.

    Returns:
      One frame list per chunk (topic frame first), ready for ``send_multipart``.

    Raises:
      ValueError: a leaf dtype not allowed on the wire, ``chunk_bytes`` < 1, or a tree
        with so many leaves that chunk 0's header exceeds the wire's header limit.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes} must be >= 1")
    specs, _ = leaf_specs(params)
    bad = [s for s in specs if s.dtype not in wire.ALLOWED_DTYPES]
    if bad:
        raise ValueError(f"parameter leaves {[s.name for s in bad]} have dtypes "
                         f"{[s.dtype for s in bad]}, not allowed on the wire")
    leaves = [np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in jax.tree.leaves(params)]
    blob = np.concatenate(leaves) if leaves else np.zeros(0, np.uint8)
    nbytes = int(blob.size)
    chunks = max(1, math.ceil(nbytes / chunk_bytes))
    meta = {"policy": policy, "version": int(version), "stream": int(stream), "chunks": chunks,
            "chunk_bytes": int(chunk_bytes), "nbytes": nbytes,
            "crc32": zlib.crc32(memoryview(blob))}
    out = []
    for k in range(chunks):
        extra = {"chunk": k}
        if k == 0:
            extra["leaves"] = [[s.name, s.dtype, list(s.shape)] for s in specs]
        frames = wire.encode("param_chunk", {"data": blob[k * chunk_bytes:(k + 1) * chunk_bytes]},
                             meta | extra)
        if len(frames[0]) > wire.MAX_HEADER_BYTES:
            raise ValueError(f"{len(specs)} parameter leaves do not fit one wire header "
                             f"({len(frames[0])} > {wire.MAX_HEADER_BYTES} bytes)")
        out.append([topic(policy)] + frames)
    return out


class ParamPublisher(Worker):
    """Learner-process side: publishes the store's newest parameters on a PUB socket.

    A thread waits on the :class:`ParameterStore` (nothing in the trainer changes):
    each new version of a watched policy is copied to host (``jax.device_get``) and
    sent in chunks, at most once every ``interval_s``; the newest is re-sent every
    ``resend_s`` while nothing new went out. ``actor_runs`` (a callable returning
    ``{actor_id: run_id}``) is sent when it changes and every ``resend_s``.

    Args:
      store: the learner's parameter store.
      policies: policies to publish.
      context: ZeroMQ context (default: the process-wide one).
      host: interface to bind.
      interval_s: least seconds between two versions of a policy (0: every version).
      resend_s: seconds between re-sends of an unchanged newest version.
      chunk_bytes: most data bytes per message.
      curve: ``(public, secret)`` server keys to require CURVE, or ``None``.
      actor_runs: ``() -> {actor_id: run_id}``, or ``None``.
      metrics: where ``param_stream/publish_ms`` (host copy and send of one version)
        goes, or ``None``.

    Attributes:
      address: ``tcp://host:port`` to connect to (after :meth:`start`).
      sent: ``policy -> (version, time.monotonic())`` of the last version sent.
      error: the exception that stopped the thread (also logged), or ``None``.
    """

    reraise = False
    log = log

    def __init__(self, store: ParameterStore, policies: Sequence[str],
                 context: zmq.Context | None = None, host: str = "127.0.0.1",
                 interval_s: float = 0.0, resend_s: float = 1.0, chunk_bytes: int = CHUNK_BYTES,
                 curve: tuple | None = None, actor_runs: Callable[[], Mapping] | None = None,
                 metrics: Any = None):
        if interval_s < 0 or resend_s <= 0 or chunk_bytes < 1:
            raise ValueError(f"need interval_s >= 0, resend_s > 0, chunk_bytes >= 1; got "
                             f"{interval_s}, {resend_s}, {chunk_bytes}")
        super().__init__("parameter publisher")
        self.metrics = metrics
        self.store, self.policies = store, list(policies)
        self._context, self.host, self._curve = context, host, curve
        self.interval_s, self.resend_s, self.chunk_bytes = interval_s, resend_s, chunk_bytes
        self._actor_runs = actor_runs
        self.stream = random.getrandbits(62)
        self.sent: dict[str, tuple[int, float]] = {}
        self._sock: zmq.Socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Bind the socket, start the thread; returns the address."""
        # Queue (per subscriber) up to ~3 versions of the current size, so a subscriber
        # that is briefly slow gets whole versions rather than holes.
        chunks = 1
        for p in self.policies:
            try:
                leaves = jax.tree.leaves(self.store.get(p).params)
                chunks = max(chunks, math.ceil(sum(x.nbytes for x in leaves) / self.chunk_bytes))
            except KeyError:
                pass
        sock = open_socket(self._context, zmq.PUB, send_hwm=max(64, 3 * chunks + 16),
                           curve_server=self._curve)
        self.address = bind(sock, self.host)
        self._sock = sock
        self.ready.set()
        self.start_serving()
        self._thread = threading.Thread(target=self.run, name="param-publisher", daemon=True)
        self._thread.start()
        return self.address

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None and (self._thread is None or not self._thread.is_alive()):
            self._sock.close()

    def _run(self) -> None:
        runs_sent: tuple[Any, float] = (None, -math.inf)
        while not self.stop.is_set():
            self.beat()
            seen = {p: self.sent.get(p, (-1, 0.0))[0] for p in self.policies}
            self.store.wait_changed(seen, timeout=0.05)
            now = time.monotonic()
            for p in self.policies:
                try:
                    latest = self.store.get(p)
                except KeyError:
                    continue
                version, at = self.sent.get(p, (None, -math.inf))
                new = latest.version != version and now - at >= self.interval_s
                if new or now - at >= self.resend_s:
                    self._send(p, latest.version, latest.params)
                    self.sent[p] = (latest.version, now)
            if self._actor_runs is not None:
                runs = sorted((int(a), int(r)) for a, r in dict(self._actor_runs()).items())
                if runs != runs_sent[0] or now - runs_sent[1] >= self.resend_s:
                    self._sock.send_multipart(
                        [ACTORS_TOPIC] + wire.encode("actor_runs", {}, {"runs": runs}))
                    runs_sent = (runs, now)

    def _send(self, policy: str, version: int, params: Any) -> None:
        t0 = time.perf_counter()
        host = jax.device_get(params)
        for frames in encode_chunks(policy, version, host, self.stream, self.chunk_bytes):
            self._sock.send_multipart(frames, copy=False)
        if self.metrics is not None:
            self.metrics.add_means({"param_stream/publish_ms": 1e3 * (time.perf_counter() - t0)})


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

    def _run(self) -> None:
        """Receive until ``stop`` is set (``run()`` calls this; errors end up in ``error``)."""
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

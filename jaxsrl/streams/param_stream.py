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

Files: the messages are built in :mod:`jaxsrl.streams.param_wire`, the subscriber is
:mod:`jaxsrl.streams.param_subscriber`; this module has the publisher and re-exports
the rest.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.streams import wire
from jaxsrl.streams.param_subscriber import ParamSubscriber
from jaxsrl.streams.param_wire import (ACTORS_TOPIC, CHUNK_BYTES, LeafSpec, encode_chunks,
                                       leaf_specs, topic)
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.sockets import bind, open_socket

log = logging.getLogger("jaxsrl.streams.param_stream")
__all__ = ["ACTORS_TOPIC", "CHUNK_BYTES", "LeafSpec", "ParamPublisher", "ParamSubscriber",
           "encode_chunks", "leaf_specs", "topic"]


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

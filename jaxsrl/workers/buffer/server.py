"""Buffer process: the replay of an off-policy trainer in its own process (placement
``"process"`` of a ``[dataflow]`` buffer).

Run as ``python -m jaxsrl.workers.buffer '<json spec>'`` (a
:class:`~jaxsrl.workers.buffer.spec.BufferProcessSpec`; the launcher starts, watches and
restarts it through ``jaxsrl/launch/buffer_processes.py``). The process builds the agent
from the spec and drives the same :class:`~jaxsrl.workers.buffer.feed.ReplayFeed` as the
learner-placed buffer (``to_items``, flashbax replay, Reverb's rate limiter, metrics),
with JAX on the CPU (the launcher sets ``JAX_PLATFORMS=cpu``): the items live in this
host's memory, not on an accelerator. Reusing the feed keeps one implementation of the
prioritised-replay maths (tested in ``tests/unit/test_replay.py``), of item ids that
survive overwrites, and of the limiter; flashbax on CPU costs a jit dispatch per
operation, which a batch of a few hundred items amortises.

Sockets (see ``jaxsrl/streams/replay_wire.py`` for the messages):

- **samples** (PULL, bound): the actors' ``segment`` messages, checked by
  :class:`~jaxsrl.workers.buffer.segments.SegmentGate` (the trainer's rules). One-segment
  queue and 4 KiB kernel buffers, like a replay learner's; the socket is read only
  while the rate limiter allows inserts, so a learner that falls behind slows the
  actors (their sends block), it does not drop their data;
- **requests** (ROUTER, bound): the trainer's ``sample`` requests (a few outstanding
  per trainer connection, answered oldest first; a request sent again is held once, and
  one sent again after its answer left is not answered twice: the last
  :data:`MAX_ANSWERED` answered requests are remembered, such re-sends counted in
  ``duplicate_sample_requests``) are answered with a ``replay_batch`` only while the
  limiter allows an update, so the learner waits for data; ``priorities`` are written
  back (dropped if they name another run of this process, i.e. a batch from before a
  restart); the launcher's ``actor_runs`` fill the actor table;
- **status** (PUSH, connected to the launcher): every ``status_interval_s`` a
  ``buffer_status``::

      meta {buffer, run, pid, sample_address, request_address, serving, heartbeat_age_s,
            pending (requests waiting for the limiter), insert_allowed (the limiter's),
            env_steps (run-long total), episodes [finished episodes since the last status],
            means {replay/..., staleness_mean, staleness_max, actor/...},
            counters {dropped_segments, ...}, seen [actor ids heard from]}

A malformed message on any socket is dropped and counted (``dropped_segments``,
``dropped_buffer_messages``), never raised. Exit codes: 0 stopped (SIGTERM/SIGINT or
the launcher died), 1 an error, :data:`~jaxsrl.core.exit_codes.EXIT_NONFINITE` a
segment with NaN or Inf under ``on_nonfinite="raise"``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sys
import threading
import time

import jax
import numpy as np
import zmq

from jaxsrl.core.child import serve, start_child
from jaxsrl.core.exit_codes import EXIT_NONFINITE
from jaxsrl.core.worker import Worker
from jaxsrl.experiment.agent_build import factory_of_spec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.admission import ActorTable, DropLog, drop_input
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.segment import to_trajectory
from jaxsrl.streams.sockets import bind, open_socket
from jaxsrl.streams.status import BUFFER_STATUS
from jaxsrl.workers.buffer.feed import ReplayFeed
from jaxsrl.workers.buffer.segments import NonFiniteSegment, SegmentGate
from jaxsrl.workers.buffer.spec import BufferProcessSpec

log = logging.getLogger("jaxsrl.buffer")
MAX_STATUS_EPISODES = 400
"""Episodes per status message (the rest wait for the next one: a header stays small)."""
MAX_STATUS_SEEN = 1000
MAX_PENDING = 64  # sample requests held while the limiter allows no update
MAX_ANSWERED = 16384
"""Answered ``(trainer connection, request)`` pairs remembered, so a request the trainer
sent again while its answer was on the way (``buffer_client.RESEND_S`` after the first)
is not answered (and counted against the replay ratio) twice: far more answers than a
buffer sends in the seconds a re-send can lag its answer."""


class HeardTable(ActorTable):
    """The run's actor table as the launcher's ``actor_runs`` messages give it, recording
    the actors heard from since the last :meth:`take_heard`."""

    def __init__(self):
        super().__init__()
        self._heard: set = set()
        self._heard_lock = threading.Lock()

    def update(self, runs: list) -> None:
        """Make ``runs`` (``[[actor, run], ...]``) the accepted runs (bad pairs ignored)."""
        for pair in runs[:100_000]:
            if (isinstance(pair, list) and len(pair) == 2
                    and all(type(x) is int and 0 <= x < 2**63 for x in pair)):  # noqa: E721
                try:
                    self.check({"actor": pair[0], "run": pair[1]})
                except wire.WireError:  # unknown actor, or a new run of it
                    self.register(*pair)

    def seen(self, actor_id: int) -> None:
        super().seen(actor_id)
        with self._heard_lock:
            self._heard.add(actor_id)

    def take_heard(self, limit: int = MAX_STATUS_SEEN) -> list[int]:
        with self._heard_lock:
            heard = sorted(self._heard)[:limit]
            self._heard.difference_update(heard)
        return heard


class BufferServer(Worker):
    """One buffer process (see the module doc); :meth:`run` serves until ``stop`` is set
    or SIGTERM/SIGINT (``SystemExit``). ``ready`` once its sockets are bound
    (``sample_address``, ``request_address``), ``serving`` once compiled.

    Args:
      spec: the process's spec.
      context: ZeroMQ context (default: a new one, destroyed by :meth:`close`).

    Raises:
      ValueError: an unknown agent or environment, an on-policy agent, or a shard
        capacity below the batch size.
    """

    def __init__(self, spec: BufferProcessSpec, context: zmq.Context | None = None):
        super().__init__(spec.name)
        self.spec, self.run_id = spec, int(spec.run_id)
        enable_compilation_cache(spec.compilation_cache_dir)
        factory = factory_of_spec(spec.to_dict())
        fns = factory.make(spec.planned_updates)
        if fns.replay is None or fns.to_items is None:
            raise ValueError(f"agent {spec.agent!r} learns from segments (on-policy): it has "
                             "no replay for a buffer process")
        replay = dataclasses.replace(fns.replay, capacity=spec.capacity, min_fill=spec.min_fill)
        self.feed = ReplayFeed(fns._replace(replay=replay), spec.planned_updates,
                               device=jax.devices()[0])
        self._obs_space = factory.env.observation_space
        self._carry = CarryCodec(fns.initial_carry)
        self.metrics = MetricsAccumulator()
        self.table = HeardTable()
        self.gate = SegmentGate(self._obs_space, factory.env.action_space, spec.segment_length,
                                self._carry, spec.idle_rows, spec.max_rows, self.table,
                                self.metrics, spec.on_nonfinite, spec.max_staleness, spec.name)
        self.pending: dict[tuple, None] = {}  # (trainer connection, request), oldest first
        self.answered: collections.OrderedDict = collections.OrderedDict()  # the same, answered
        self.episodes: collections.deque = collections.deque(maxlen=100 * MAX_STATUS_EPISODES)
        self.rng = jax.random.PRNGKey(self.run_id + 7919 * spec.shard)
        self.sample_address = self.request_address = None
        self.context = context or zmq.Context()
        self._own_context = context is None
        self._drop_log = DropLog(log, "message")
        self._status_at = 0.0

    # -- start-up ---------------------------------------------------------------------
    def warmup(self) -> None:
        """Build the buffer and compile ``to_items`` and every buffer operation."""
        rows = self.spec.max_rows
        zeros = {k: np.zeros((rows,) + s.shape[1:], s.dtype) for k, s in self.gate.schema.items()}
        self.feed.warmup(to_trajectory(zeros, self._obs_space, self._carry))

    def _run(self) -> None:
        spec = self.spec
        samples = open_socket(self.context, zmq.PULL, recv_hwm=1, recv_buffer_bytes=4096,
                              max_frame_bytes=self.gate.max_frame_bytes)
        requests = open_socket(self.context, zmq.ROUTER, max_frame_bytes=max(
            wire.MAX_HEADER_BYTES, 8 * self.feed.batch_size))
        status = open_socket(self.context, zmq.PUSH, send_hwm=8)
        try:
            self.sample_address = bind(samples, spec.host, spec.sample_port, name=f"{self.name}-s")
            self.request_address = bind(requests, spec.host, spec.request_port,
                                        name=f"{self.name}-r")
            self.address = self.sample_address
            self.gate.drops.where = self.sample_address  # named in every drop's log line
            self._drop_log.where = self.request_address
            status.connect(spec.status_address)
            self.ready.set()
            self._send_status(status)
            self.warmup()
            self.start_serving()
            log.info("%s: serving (segments at %s, batches at %s; capacity %d, min fill %d)",
                     self.name, self.sample_address, self.request_address,
                     self.feed.spec.capacity, self.feed.spec.min_fill)
            self._loop(samples, requests, status)
        finally:
            for sock in (samples, requests, status):
                sock.close()

    # -- the loop ---------------------------------------------------------------------
    def _loop(self, samples: zmq.Socket, requests: zmq.Socket, status: zmq.Socket) -> None:
        poller_all, poller_requests = zmq.Poller(), zmq.Poller()
        for p in (poller_all, poller_requests):
            p.register(requests, zmq.POLLIN)
        poller_all.register(samples, zmq.POLLIN)
        while not self.stop.is_set():
            self.turn(samples, requests, poller_all, poller_requests)
            now = time.monotonic()
            if now - self._status_at >= self.spec.status_interval_s:
                self._send_status(status)

    def turn(self, samples: zmq.Socket, requests: zmq.Socket, poller_all: zmq.Poller,
             poller_requests: zmq.Poller, timeout_ms: int = 50) -> None:
        """One turn: read every waiting request, answer what the limiter allows, then take
        at most one segment (only while inserts are allowed)."""
        self.beat()
        self.read_requests(requests)
        self.answer(requests)
        can_insert = self.feed.insert_allowed()
        busy = bool(self.pending) and self.feed.updates_allowed() > 0
        events = dict((poller_all if can_insert else poller_requests).poll(0 if busy else timeout_ms))
        if can_insert and samples in events:
            self.receive_segment(samples.recv_multipart(copy=False))

    def read_requests(self, requests: zmq.Socket) -> None:
        """Handle every message waiting on the request socket."""
        while True:
            try:
                frames = requests.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.on_request(frames)

    def on_request(self, frames: list) -> None:
        """One ROUTER message ``[peer, header, arrays...]``; bad ones are dropped and counted."""
        try:
            peer = frames[0].bytes
            msg = wire.decode(frames[1:], max_bytes=16 * self.feed.batch_size + 1024)
            if msg.kind == replay_wire.ACTOR_RUNS:
                runs = msg.meta.get("runs")
                if not isinstance(runs, list):
                    raise wire.WireError(f"actor_runs meta 'runs'={runs!r} is not a list")
                self.table.update(runs)
                return
            version = msg.meta.get("version")
            if type(version) is not int or not 0 <= version < 2**31:  # noqa: E721
                raise wire.WireError(f"meta 'version'={version!r} is not a policy version")
            if msg.kind == replay_wire.SAMPLE:
                req = msg.meta.get("req")
                if type(req) is not int:  # noqa: E721
                    raise wire.WireError(f"sample meta 'req'={req!r} is not an integer")
                if (peer, req) in self.answered:  # sent again while its answer was on the way
                    self.metrics.count("duplicate_sample_requests")
                else:
                    if (peer, req) not in self.pending and len(self.pending) >= MAX_PENDING:
                        raise wire.WireError(f"more than {MAX_PENDING} sample requests waiting")
                    self.pending[(peer, req)] = None  # a request sent again is kept once
            elif msg.kind == replay_wire.PRIORITIES:
                ids, priorities = replay_wire.check_priorities(msg, self.feed.batch_size)
                if msg.meta.get("run") != self.run_id:
                    self.metrics.count("stale_priorities_dropped")  # a batch of a previous run
                else:
                    self.feed.set_priorities(ids, priorities)
            else:
                raise wire.WireError(f"unexpected message kind {msg.kind!r}")
            self.gate.version = max(self.gate.version, version)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep serving)
            drop_input(self._drop_log, self.name, exc, self.metrics, "dropped_buffer_messages",
                       "dropped_buffer_messages")

    def answer(self, requests: zmq.Socket) -> int:
        """Answer pending requests while the limiter allows updates; returns the answers."""
        sent = 0
        while self.pending and self.feed.updates_allowed() > 0:
            peer, req = next(iter(self.pending))
            del self.pending[(peer, req)]
            self.rng, key = jax.random.split(self.rng)
            batch, ids = self.feed.sample(key, self.gate.version)
            frames = replay_wire.encode_batch(batch.items, batch.weights, ids,
                                              {"req": req, "run": self.run_id,
                                               "shard": self.spec.shard})
            try:
                requests.send_multipart([peer, *frames], flags=zmq.NOBLOCK)
            except zmq.ZMQError:  # the trainer is gone (ROUTER drops): it asks again
                pass
            else:
                self.answered[(peer, req)] = None
                if len(self.answered) > MAX_ANSWERED:
                    self.answered.popitem(last=False)
            sent += 1
        return sent

    def receive_segment(self, frames: list) -> int:
        """Admit one ``segment`` message and insert its items; returns the items written.

        Raises:
          NonFiniteSegment: NaN or Inf under ``on_nonfinite="raise"``.
        """
        admitted = self.gate.admit(frames)
        if admitted is None:
            return 0
        arrays, episodes = admitted
        self.episodes.extend(episodes)
        return self.feed.insert(to_trajectory(arrays, self._obs_space, self._carry))

    # -- status -----------------------------------------------------------------------
    def status(self) -> dict:
        """The ``buffer_status`` meta (:data:`~jaxsrl.streams.status.BUFFER_STATUS`)."""
        now = time.monotonic()
        elapsed, self._status_at = now - self._status_at, now
        snap = self.metrics.snapshot(max(elapsed, 1e-3))
        means = {k: v for k, v in snap.items() if k.startswith("actor/") and isinstance(v, float)}
        counters = {k: v for k, v in snap.items() if type(v) is int  # noqa: E721
                    and k not in ("env_steps", "policy_version")}
        if self.serving.is_set():
            replay = self.feed.metrics()
            means.update(replay)
            for key in ("staleness_mean", "staleness_max"):
                if f"replay/{key}" in replay:
                    means[key] = replay[f"replay/{key}"]
        episodes = [self.episodes.popleft()
                    for _ in range(min(len(self.episodes), MAX_STATUS_EPISODES))]
        return {"buffer": self.name, "run": self.run_id, "pid": os.getpid(),
                "sample_address": self.sample_address, "request_address": self.request_address,
                "serving": self.serving.is_set(), "heartbeat_age_s": now - self.heartbeat,
                "pending": len(self.pending), "insert_allowed": self.feed.insert_allowed(),
                "env_steps": snap["env_steps"], "episodes": episodes, "means": means,
                "counters": counters, "seen": self.table.take_heard()}

    def _send_status(self, status: zmq.Socket) -> None:
        try:
            status.send_multipart(BUFFER_STATUS.encode(self.status()), flags=zmq.NOBLOCK)
        except zmq.Again:  # the launcher is busy or gone: the next status will do
            pass

    def close(self) -> None:
        if self._own_context:
            self.context.destroy(linger=0)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.buffer SPEC_JSON``; returns the exit code."""
    raw = start_child(argv, lambda s: s.get("name", "buffer"))
    return serve(raw, lambda: BufferServer(BufferProcessSpec.from_dict(raw)),
                 {NonFiniteSegment: EXIT_NONFINITE})


if __name__ == "__main__":
    sys.exit(main())

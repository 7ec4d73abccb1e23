"""Off-policy trainer fed by buffer processes (a ``[dataflow]`` buffer with
``placement = "process"``).

The actors' segments go to the buffer processes (``jaxsrl/workers/buffer/server.py``),
not here: this trainer binds no sample socket. It connects one DEALER socket to each
buffer process (shard) of its stream and keeps :attr:`BufferClientTrainer.prefetch` ``sample``
requests outstanding per shard (``jaxsrl/streams/replay_wire.py``), so with several
shards it learns from whichever answers first, in turn. On each ``replay_batch``:

1. the batch is checked against the item schema (a malformed one is dropped and
   counted, ``dropped_batches``) and the next request goes out at once, so the buffer
   samples the next batches while this one is learned from (their priorities are then
   up to ``prefetch`` updates behind, as in Ape-X's distributed replay);
2. jitted ``learn(state, batch, rng) -> (state, metrics, priorities)``; an update whose
   new state holds NaN or Inf is discarded (``nonfinite_updates_skipped``);
3. the priorities go back to the shard that sampled the batch (with its run id: a
   restarted shard drops those of its previous run) with the new version, then the
   parameters are published: the buffer hears of a version before actors can act
   with it.

The rate limiter lives in the buffer processes: they answer only while it allows an
update (the learner waits for data) and read their sample sockets only while it allows
inserts (the actors are slowed). A request unanswered for :data:`RESEND_S` is sent
again (a restarted shard lost it; a waiting shard holds it once). Replay
metrics reach the run through the buffers' status messages; the trainer logs the
agent's metrics, ``learner/update_ms``, ``learner/batch_wait_ms`` and
``learner/publish_ms``.

Checkpoints hold the learner state; the replay contents are not saved (``--save_replay``
with buffer processes is refused by the config checks): a resumed run refills.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable

import jax
import numpy as np
import zmq

from jaxsrl.core.agent import AgentFns, ReplayBatch
from jaxsrl.experiment import events
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.admission import DropLog
from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.learner.trainer import TrainerWorker

log = logging.getLogger("jaxsrl.trainer")
RESEND_S = 1.0
"""Seconds after which an unanswered ``sample`` request is sent again."""


@dataclasses.dataclass
class _Shard:
    sock: zmq.Socket
    reqs: dict = dataclasses.field(default_factory=dict)  # outstanding request -> sent at


class BufferClientTrainer(TrainerWorker):
    """Learner thread of an off-policy agent whose replay lives in buffer processes.

    Args:
      *args, **kwargs: as :class:`TrainerWorker` (``batch_segments`` unused; ``learn`` is
        the off-policy ``learn`` jitted by :func:`jaxsrl.parallel.devices.jit_replay_learn`;
        ``max_rows`` the segment row count the item structure is derived from).
      fns: the agent's functions (``replay`` and ``to_items`` set).
      connect: ``connect(stop) -> [request address of each shard]``, blocking until the
        buffer processes serve; ``None`` if ``stop`` was set first.
      restore_replay: a ``--resume``: logs that the buffer refills.

    Raises:
      ValueError: ``before_update`` given, a ``fns`` without replay, or a batch size not
        divisible by the local devices.
    """

    #: the actors' side of the sample stream (now towards the buffer processes)
    sample_send_hwm = 1
    sample_buffer_bytes = 4096
    #: requests kept outstanding per shard: the shard samples the next batches while
    #: this one is learned from, so its answers' latency (another process, woken by
    #: the OS) stays hidden behind ``learn`` (Reverb's and Acme's prefetch)
    prefetch = 2

    def __init__(self, *args: Any, fns: AgentFns, connect: Callable[[threading.Event], Any],
                 restore_replay: bool = False, **kwargs: Any):
        if kwargs.get("before_update") is not None:
            raise ValueError("off-policy agents learn in one process: use num_learner_processes=1")
        if fns.replay is None or fns.to_items is None:
            raise ValueError("BufferClientTrainer needs an off-policy agent (AgentFns.replay set)")
        self.batch_size = fns.replay.batch_size
        n_dev = jax.local_device_count()
        if self.batch_size % n_dev:
            raise ValueError(f"replay batch_size={self.batch_size} is not divisible by the "
                             f"{n_dev} local devices")
        super().__init__(*args, **kwargs)
        self._to_items, self._connect, self._restore_replay = fns.to_items, connect, restore_replay
        self.item_spec: Any = None
        self.shards: list[_Shard] = []
        self._next_req = 0
        self._batch_drops = DropLog(log, "replay batch")

    # -- start-up -------------------------------------------------------------------
    def warmup(self) -> None:
        """Derive the item structure from ``to_items`` and compile ``learn`` for a batch."""
        rows = self.max_rows or 1
        zeros = {k: np.zeros((rows,) + s.shape[1:], s.dtype) for k, s in self._schema.items()}
        items, _ = jax.eval_shape(self._to_items, self._trajectory(zeros))
        self.item_spec = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), items)
        B = self.batch_size
        example = ReplayBatch(jax.tree.map(lambda s: np.zeros((B, *s.shape), s.dtype),
                                           self.item_spec), np.ones((B,), np.float32))
        self._learn = self._learn.lower(self.state, self._put_batch(example), self.rng).compile()
        if self._restore_replay:
            events.emit(log, logging.INFO, "replay_refill",
                        {"learner": self.name, "step": self.version, "reason": "buffer processes"},
                        "%s: the replay of buffer processes is not checkpointed: refilling the "
                        "buffer, learning resumes at its minimum fill", self.name)

    def _run(self) -> None:
        addresses = self._connect(self.stop)
        if addresses is None:
            self.ready.set()
            return
        try:
            for address in addresses:
                sock = open_socket(self._context, zmq.DEALER, send_hwm=4, recv_hwm=4,
                                   curve_client=None)
                sock.connect(address)
                self.shards.append(_Shard(sock))
            self.address = addresses[0]
            self.ready.set()
            self.warmup()
            self.start_serving()
            self._waiting_since = time.perf_counter()
            poller = zmq.Poller()
            for s in self.shards:
                poller.register(s.sock, zmq.POLLIN)
            while not self.stop.is_set():
                self.beat()
                self._requests.serve()
                if self.checkpoint_requested.is_set():
                    self.save_checkpoint()
                self.turn(poller)
        finally:
            for s in self.shards:
                s.sock.close()
            self._requests.close()

    # -- the loop -------------------------------------------------------------------
    def _ask(self, shard: _Shard, req: int, now: float) -> None:
        shard.reqs[req] = now
        try:
            shard.sock.send_multipart(wire.encode(replay_wire.SAMPLE, {}, {
                "req": req, "version": self.version}), flags=zmq.NOBLOCK)
        except zmq.Again:  # the shard is gone: asked again after RESEND_S
            pass

    def _fill(self, shard: _Shard, now: float) -> None:
        """Keep ``prefetch`` requests outstanding at ``shard``; send again those
        unanswered for :data:`RESEND_S` (a restarted shard lost them)."""
        for req, sent_at in list(shard.reqs.items()):
            if now - sent_at > RESEND_S:
                self._ask(shard, req, now)
        while len(shard.reqs) < self.prefetch:
            self._next_req += 1
            self._ask(shard, self._next_req, now)

    def turn(self, poller: zmq.Poller, timeout_ms: int = 100) -> None:
        """Keep every shard's requests outstanding, then learn from each batch that came."""
        now = time.monotonic()
        for s in self.shards:
            self._fill(s, now)
        events = dict(poller.poll(timeout_ms))
        for s in self.shards:
            if s.sock in events and not self.stop.is_set():
                try:
                    frames = s.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    continue
                self._on_batch(s, frames)

    def _on_batch(self, shard: _Shard, frames: list) -> None:
        try:
            msg, items = replay_wire.decode_batch(frames, self.item_spec, self.batch_size)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep learning)
            self._batch_drops(self.name, exc)
            self.metrics.count("dropped_batches")
            return
        if shard.reqs.pop(msg.meta["req"], None) is None:
            return  # a second answer to a request sent again meanwhile
        self._fill(shard, time.monotonic())  # the buffer samples the next while we learn
        self._update_from(shard, msg, ReplayBatch(items, msg.arrays["weights"]))

    def _update_from(self, shard: _Shard, msg: wire.Message, batch: ReplayBatch) -> None:
        self.beat()
        t0 = time.perf_counter()
        self.metrics.add_means({"learner/batch_wait_ms": 1e3 * (t0 - self._waiting_since)})
        self.rng, key = jax.random.split(self.rng)
        learned = self.learn_replay_batch(batch, key)
        if learned is None:
            return
        metrics, priorities = learned
        t1 = time.perf_counter()
        arrays = {"ids": np.asarray(msg.arrays["ids"], np.int32),
                  "priorities": np.asarray(priorities, np.float32).reshape(-1)}
        try:
            shard.sock.send_multipart(wire.encode(replay_wire.PRIORITIES, arrays, {
                "run": msg.meta["run"], "version": self.version}), flags=zmq.NOBLOCK)
        except zmq.Again:
            self.metrics.count("priorities_not_sent")
        self.metrics.set_version(self.policy, self.version)  # before publishing: param_lag >= 0
        self.store.publish(self.policy, self.version, self.state.params)
        t2 = time.perf_counter()
        self.metrics.add_means({k: float(v) for k, v in metrics.items()})
        self.metrics.add_means({"learner/update_ms": 1e3 * (t2 - t0),
                                "learner/publish_ms": 1e3 * (t2 - t1)})
        self._waiting_since = time.perf_counter()

    # -- checkpoints ----------------------------------------------------------------
    def _checkpoint_extra(self, meta: dict) -> dict:
        """No replay item: buffer processes keep their replay (``replay_saved`` False)."""
        meta["replay_saved"] = False
        return {}

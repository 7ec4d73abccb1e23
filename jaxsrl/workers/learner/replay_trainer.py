"""Off-policy trainer: the trainer worker with a replay (buffer) worker inside it.

The default placement of the dataflow's ``buffer`` worker (``placement = "learner"``,
``jaxsrl/experiment/dataflow.py``): the buffer lives on the learner's first device in
the trainer's thread, so sampled batches never cross the host. Everything a
:class:`~jaxsrl.workers.learner.trainer.TrainerWorker` does to segments on arrival is
unchanged (validation, run ids, NaN checks, episode metrics, ``max_staleness`` drops);
then, instead of waiting for ``batch_segments`` rows, each valid segment goes into a
:class:`~jaxsrl.workers.buffer.feed.ReplayFeed`, and each turn of the loop:

1. takes at most one segment from the sample stream, and only while the rate limiter
   allows inserts: otherwise the socket is not read, its queue fills and the actors
   block on their sends (slowed, not dropped; they ping their inference servers
   meanwhile so they are not taken for hung). The queues are one segment each way
   (``RCVHWM`` here, ``SNDHWM`` on the actors) with 4 KiB kernel buffers, so about two
   segments per actor wait in flight: with the defaults of on-policy learners (4 + 2
   segments, kernel buffers autotuned to megabytes) small segments piled up by the
   hundred and reached the buffer thousands of versions old;
2. runs one update if the rate limiter allows one: sample (``beta`` annealed over the
   planned updates) -> jitted ``learn`` -> ``set_priorities`` -> publish; the policy
   version bumps per ``learn`` call, as for on-policy learners.

An update whose new state holds NaN or Inf is discarded as in the base trainer
(``nonfinite_updates_skipped``); its batch counts as sampled. Per update it logs the
agent's metrics, ``learner/update_ms`` (sample to priorities written back) and
``learner/publish_ms`` (publish and priorities). Replay metrics
(``replay/...``, see :meth:`ReplayFeed.metrics`) reach the run metrics once a second;
``staleness_mean`` / ``staleness_max`` are those of the sampled items.

Checkpoints hold the learner state as before; with ``save_replay`` also the buffer
contents and rate-limiter counters (item ``replay``), restored on resume so the run
continues without refilling. A resume from a checkpoint without them refills the
buffer up to ``min_fill`` before learning again, and logs that it does.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import jax
import numpy as np
import zmq

from jaxsrl.core.agent import AgentFns
from jaxsrl.experiment import events
from jaxsrl.workers.buffer.feed import ReplayFeed
from jaxsrl.workers.learner.trainer import TrainerWorker

log = logging.getLogger("jaxsrl.trainer")

REPLAY_ITEM = "replay"
"""Name of the checkpoint item holding the replay contents (``--save_replay``)."""
METRICS_INTERVAL_S = 1.0
"""Seconds between two reports of the replay metrics into the run metrics."""


class ReplayTrainer(TrainerWorker):
    """Learner thread of an off-policy agent (see the module doc).

    Args:
      *args, **kwargs: as :class:`TrainerWorker`; ``learn`` is the off-policy
        ``learn(state, batch, rng) -> (state, metrics, priorities)`` jitted over the
        devices (:func:`jaxsrl.parallel.devices.jit_replay_learn`); ``batch_segments`` is
        unused (batches are ``fns.replay.batch_size`` items); ``max_rows`` is the segment
        row count ``to_items`` is compiled for at warm-up.
      fns: the agent's functions (``replay`` and ``to_items`` set).
      planned_updates: planned ``learn`` calls (beta schedule horizon).
      save_replay: checkpoints also hold the replay contents and rate-limiter counters.
      restore_replay: at warm-up, load the replay contents from the checkpoint of the
        starting ``version`` if it has them and they fit this buffer (``--resume``);
        otherwise log the refill.

    Raises:
      ValueError: ``before_update`` given (off-policy learners run in one process), a
        ``fns`` without replay, or a batch size not divisible by the local devices.
    """

    #: Short queues and small kernel buffers on the sample stream: the segments in
    #: flight between an actor and this trainer while inserts wait (items collected but
    #: not yet inserted, which age meanwhile) stay about two per actor (see the module doc).
    sample_recv_hwm = 1
    sample_send_hwm = 1
    sample_buffer_bytes = 4096

    def __init__(self, *args: Any, fns: AgentFns, planned_updates: int,
                 save_replay: bool = False, restore_replay: bool = False, **kwargs: Any):
        if kwargs.get("before_update") is not None:
            raise ValueError("off-policy agents learn in one process: use "
                             "num_learner_processes=1")
        self.feed = ReplayFeed(fns, planned_updates)
        n_dev = jax.local_device_count()
        if self.feed.batch_size % n_dev:
            raise ValueError(f"replay batch_size={self.feed.batch_size} is not divisible by the "
                             f"{n_dev} local devices")
        super().__init__(*args, **kwargs)
        self.save_replay, self._restore_replay = save_replay, restore_replay
        self._metrics_at = time.monotonic()
        self._learning = False

    # -- start-up -------------------------------------------------------------------------
    def warmup(self) -> None:
        """Build and compile the buffer and ``to_items`` for ``max_rows``-row segments,
        compile ``learn`` for one replay batch, then restore the replay if asked."""
        rows = self.max_rows or 1
        zeros = {k: np.zeros((rows,) + s.shape[1:], s.dtype) for k, s in self._schema.items()}
        self.feed.warmup(self._trajectory(zeros))
        example = self._put_batch(self.feed.example_batch())
        self._learn = self._learn.lower(self.state, example, self.rng).compile()
        if self._restore_replay:
            self._load_replay()

    def _load_replay(self) -> None:
        step, ckpt = self.version, self.checkpointer
        if ckpt is not None and ckpt.has_item(step, REPLAY_ITEM):
            try:
                self.feed.load_state_dict(ckpt.restore_item(step, REPLAY_ITEM))
            except (ValueError, KeyError) as exc:
                events.emit(log, logging.WARNING, "replay_refill",
                            {"learner": self.name, "step": step, "reason": "does not fit",
                             "error": str(exc)},
                            "%s: the replay saved in checkpoint %d does not fit this run (%s): "
                            "refilling the buffer, learning resumes at %d items", self.name,
                            step, exc, self.feed.spec.min_fill)
                return
            events.emit(log, logging.INFO, "replay_restored",
                        {"learner": self.name, "step": step, "items": self.feed.replay.size},
                        "%s: restored the replay from checkpoint %d: %s", self.name, step,
                        self.feed.describe())
        else:
            events.emit(log, logging.INFO, "replay_refill",
                        {"learner": self.name, "step": step, "reason": "not saved"},
                        "%s: checkpoint %d holds no replay contents (saved without "
                        "--save_replay): refilling the buffer, learning resumes at %d items",
                        self.name, step, self.feed.spec.min_fill)

    # -- the loop -------------------------------------------------------------------------
    def turn(self, sock: zmq.Socket) -> None:
        """One turn of the loop: read at most one segment off ``sock`` (while the rate
        limiter allows inserts), run at most one update (while it allows updates), and
        report the replay metrics once a second. Public for driving the worker step by
        step (tests, debugging); its thread calls it in a loop."""
        n = self.feed.updates_allowed()
        if self.feed.insert_allowed():
            if sock.poll(0 if n else 100):
                self._receive(sock.recv_multipart(copy=False))
                n = self.feed.updates_allowed()
        elif not n:  # not reachable by the limiter's rules; never spin
            self.stop.wait(0.01)
        if n and not self.stop.is_set():
            if not self._learning:
                self._learning = True
                log.info("%s: replay holds %d items: learning starts", self.name,
                         self.feed.replay.size)
            self.update()
        now = time.monotonic()
        if now - self._metrics_at >= METRICS_INTERVAL_S:
            self._metrics_at = now
            self.report_metrics()

    def _accept(self, arrays: dict) -> None:
        self.feed.insert(self._trajectory(arrays))

    def update(self) -> None:
        """Sample one batch from the replay, ``learn`` on it, publish the new parameters
        and write the returned priorities back (a non-finite result is skipped)."""
        self.beat()
        t0 = time.perf_counter()
        self.rng, k_sample, k_learn = jax.random.split(self.rng, 3)
        batch, ids = self.feed.sample(k_sample, self.version)
        learned = self.learn_replay_batch(batch, k_learn)
        if learned is None:
            return
        metrics, priorities = learned
        t1 = time.perf_counter()
        self.metrics.set_version(self.policy, self.version)  # before publishing: param_lag >= 0
        self.store.publish(self.policy, self.version, self.state.params)
        self.feed.set_priorities(ids, priorities)
        t2 = time.perf_counter()
        self.metrics.add_means({k: float(v) for k, v in metrics.items()})
        self.metrics.add_means({"learner/update_ms": 1e3 * (t2 - t0),
                                "learner/publish_ms": 1e3 * (t2 - t1)})

    def report_metrics(self) -> None:
        """Add the replay's metrics (size, rates, ratio, priorities, staleness) to the
        run's metrics now."""
        values = self.feed.metrics()
        for key in ("staleness_mean", "staleness_max"):
            if f"replay/{key}" in values:
                values[key] = values[f"replay/{key}"]
        self.metrics.add_means(values)

    # -- checkpoints ----------------------------------------------------------------------
    def _checkpoint_extra(self, meta: dict) -> dict:
        """With ``save_replay`` the replay contents (and ``replay_saved`` in ``meta``)."""
        meta["replay_saved"] = self.save_replay
        return {REPLAY_ITEM: self.feed.state_dict()} if self.save_replay else {}

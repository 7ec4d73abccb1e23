"""The replay path of an off-policy learner: segments in, replay batches out.

:class:`ReplayFeed` joins the parts of ``jaxsrl/workers/buffer`` for one buffer worker
(no sockets, no threads): the learner-placed buffer
(:mod:`jaxsrl.workers.learner.replay_trainer`) and the buffer process
(:mod:`jaxsrl.workers.buffer.server`) drive it the same way:

1. :meth:`ReplayFeed.insert`: a batch of validated segments (a
   :class:`~jaxsrl.core.agent.Trajectory` of ``[n, T]`` host leaves) becomes items with
   the agent's jitted ``to_items``; the valid ones are written to the
   :class:`~jaxsrl.workers.buffer.replay.Replay` (on the learner's first device) and
   counted by the :class:`~jaxsrl.workers.buffer.rate_limiter.SampleToInsertRatio`;
2. :meth:`ReplayFeed.updates_allowed` / :meth:`ReplayFeed.insert_allowed`: the rate
   limiter's answers (learn calls that may run now; whether another segment may be
   taken from the sample stream);
3. :meth:`ReplayFeed.sample`: one batch, its importance weights at the annealed
   ``beta`` (:func:`~jaxsrl.workers.buffer.replay.beta_schedule` over the planned
   updates, evaluated at the learner's version), recorded for the staleness metrics;
4. :meth:`ReplayFeed.set_priorities`: the priorities ``learn`` returned.

Recompiles: ``to_items`` is jitted once per segment row count (every actor group of
one config sends the same count, so one or two shapes per run; :meth:`ReplayFeed.warmup`
compiles the expected one); the buffer compiles a fixed set of add chunk shapes (see
``replay.py``).

A segment is taken while :meth:`ReplayFeed.insert_allowed` says one more item may be
inserted, so ``diff`` (the limiter's ``inserts * ratio - samples``) may overshoot its
upper bound by one segment's items, never more; the learner then runs the updates that
bring it back. Reverb checks every item of an insert instead; a whole segment is
either stored or not here, so a segment larger than the allowed window cannot block
the run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import jax
import numpy as np

from jaxsrl.core.agent import AgentFns, ReplayBatch, Trajectory
from jaxsrl.workers.buffer.rate_limiter import SampleToInsertRatio
from jaxsrl.workers.buffer.replay import Replay, beta_schedule
from jaxsrl.workers.buffer.stats import ReplayStats

log = logging.getLogger("jaxsrl.replay")


class ReplayFeed:
    """Replay buffer, rate limiter and metrics of one off-policy trainer.

    Args:
      fns: the agent's functions; ``fns.replay`` (a ``ReplaySpec``) and ``fns.to_items``
        must be set.
      planned_updates: planned ``learn`` calls of the run (horizon of the beta schedule).
      device: where the buffer lives (default: the first local device).
      error_buffer: the rate limiter's allowed ``diff`` half-width in items (default
        :meth:`SampleToInsertRatio.from_spec`'s).

    Raises:
      ValueError: ``fns`` is not an off-policy agent's, a bad ``ReplaySpec`` value, or
        ``planned_updates`` < 1.
    """

    def __init__(self, fns: AgentFns, planned_updates: int, device: jax.Device | None = None,
                 error_buffer: float | None = None):
        if fns.replay is None or fns.to_items is None:
            raise ValueError("ReplayFeed needs an off-policy agent (AgentFns.replay and "
                             "AgentFns.to_items set)")
        self.spec = fns.replay
        self.batch_size = self.spec.batch_size
        self.limiter = SampleToInsertRatio.from_spec(self.spec, error_buffer)
        self.limiter.updates_allowed(self.batch_size)  # ValueError now for a deadlocking window
        self.beta = beta_schedule(self.spec.importance_exponent, planned_updates)
        self.device = device or jax.local_devices()[0]
        self._to_items = jax.jit(fns.to_items)
        self.stats = ReplayStats()
        self.replay: Replay | None = None  # built by build() (needs the item structure)
        self.item_spec: Any = None  # one item's leaves as ShapeDtypeStruct (no lead axis)
        self._last = (time.monotonic(), 0, 0)  # (time, inserts, samples) at the last metrics

    # -- set-up -----------------------------------------------------------------------
    def build(self, example: Trajectory) -> None:
        """Make the (empty) buffer for the items of segments shaped like ``example``.

        Raises:
          ValueError: ``to_items`` returned a ``valid`` mask that is not ``[N]`` bool.
        """
        items, valid = jax.eval_shape(self._to_items, example)
        n = jax.tree.leaves(items)[0].shape[0]
        if valid.shape != (n,) or valid.dtype != np.bool_:
            raise ValueError(f"to_items returned valid {valid.dtype}{list(valid.shape)}; "
                             f"expected bool[{n}]")
        self.item_spec = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), items)
        self.replay = Replay(self.spec, self.item_spec, device=self.device)

    def example_batch(self) -> ReplayBatch:
        """A zero batch of ``batch_size`` items (host arrays), for compiling ``learn``."""
        B = self.batch_size
        items = jax.tree.map(lambda s: np.zeros((B, *s.shape), s.dtype), self.item_spec)
        return ReplayBatch(items=items, weights=np.ones((B,), np.float32))

    def warmup(self, example: Trajectory) -> None:
        """:meth:`build`, then compile ``to_items`` for ``example``'s row count and every
        buffer operation (the buffer is left empty)."""
        if self.replay is None:
            self.build(example)
        jax.block_until_ready(self._to_items(example))
        self.replay.warmup()

    # -- data path --------------------------------------------------------------------
    def insert(self, traj: Trajectory) -> int:
        """Store the items of ``traj`` (``[n, T]`` host leaves); returns the items written."""
        items, valid = self._to_items(traj)
        written = self.replay.add(items, valid)
        self.limiter.inserted(written)
        return written

    def insert_allowed(self) -> bool:
        """Whether the next segment may be taken (see the module doc)."""
        return self.limiter.insert_allowed(1)

    def updates_allowed(self) -> int:
        """``learn`` calls the rate limiter allows now (0 below ``min_fill``)."""
        return self.limiter.updates_allowed(self.batch_size)

    def sample(self, rng: jax.Array, version: int) -> tuple[ReplayBatch, jax.Array]:
        """One batch for the learner at ``version`` (its update count so far).

        Returns:
          ``(batch, ids)`` as :meth:`Replay.sample`, with ``beta = beta(version)``.
        """
        batch, ids = self.replay.sample(rng, self.beta(version))
        self.limiter.sampled(self.batch_size)
        self.stats.record_sample(batch.items, version)
        return batch, ids

    def set_priorities(self, ids: jax.Array, priorities: jax.Array) -> None:
        """Write back the priorities ``learn`` returned (a no-op for uniform replay)."""
        self.replay.set_priorities(ids, priorities)

    # -- metrics and checkpoints --------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Buffer metrics since the last call (``replay/...``, see ``stats.py``), plus
        ``replay/inserts_per_s``, ``replay/samples_per_s`` and ``replay/updates_per_s``
        over the time since the last call."""
        out = self.stats.metrics(self.replay, self.limiter)
        now = time.monotonic()
        t0, inserts0, samples0 = self._last
        dt = max(now - t0, 1e-9)
        out["replay/inserts_per_s"] = (self.replay.inserts - inserts0) / dt
        out["replay/samples_per_s"] = (self.replay.samples - samples0) / dt
        out["replay/updates_per_s"] = out["replay/samples_per_s"] / self.batch_size
        self._last = (now, self.replay.inserts, self.replay.samples)
        return out

    def state_dict(self) -> dict:
        """Buffer contents and rate-limiter counters as a pytree of numpy arrays."""
        limiter = {k: np.asarray(v, np.int64) for k, v in self.limiter.state_dict().items()}
        return {"buffer": self.replay.state_dict(), "limiter": limiter}

    def load_state_dict(self, d: dict) -> None:
        """Restore :meth:`state_dict`'s output (into a built buffer).

        Raises:
          ValueError: the saved buffer does not match this one (``Replay.load_state_dict``).
          KeyError: ``d`` lacks ``buffer`` or ``limiter``.
        """
        limiter = {k: int(np.asarray(d["limiter"][k])) for k in ("inserts", "samples", "deletes")}
        self.replay.load_state_dict(d["buffer"])  # checks everything before it changes anything
        self.limiter.load_state_dict(limiter)
        self._last = (time.monotonic(), self.replay.inserts, self.replay.samples)

    def describe(self) -> str:
        """One line for the log: size, inserts, samples, ratio."""
        r = self.replay
        return (f"{r.size} items held, {r.inserts} inserted, {r.samples} sampled, "
                f"replay ratio {self.limiter.achieved_ratio:.1f} (target {self.spec.replay_ratio:g})")

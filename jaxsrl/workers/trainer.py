"""Trainer worker (learner): turns trajectory segments into new parameters.

Runs as a thread of the accelerator process. It binds a ZeroMQ PULL socket for the
sample stream, validates each ``segment`` message, drops samples older than
``max_staleness`` versions, assembles ``batch_segments`` rows into a
:class:`~jaxsrl.agent.Trajectory`, runs the jitted ``learn`` over the local devices,
bumps the policy version and publishes the new parameters on device. Between
updates it saves checkpoints when asked.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import jax
import numpy as np
import zmq

from jaxsrl import wire
from jaxsrl.agent import Trajectory
from jaxsrl.checkpoint import Checkpointer
from jaxsrl.envs.spaces import action_leaf, obs_schema, space_leaves, unflatten_obs
from jaxsrl.metrics import MetricsAccumulator
from jaxsrl.params import ParameterStore
from jaxsrl.workers.carry import CarryCodec

log = logging.getLogger("jaxsrl.trainer")


def segment_schema(observation_space, action_space, T: int, carry: CarryCodec | None = None) -> dict:
    """Wire schema of a ``segment`` message with ``T`` steps (rows left free)."""
    adtype, ashape = action_leaf(action_space)
    schema = obs_schema(observation_space, lead=(None, T + 1))
    schema.update(obs_schema(observation_space, prefix="final_obs", lead=(None, T)))
    S = wire.ArraySpec
    schema.update(action=S(adtype, (None, T) + ashape), reward=S("float32", (None, T)),
                  terminated=S("bool", (None, T)), truncated=S("bool", (None, T)),
                  logp=S("float32", (None, T)), version=S("int32", (None, T)))
    if carry is not None:
        schema.update(carry.schema())
    return schema


class TrainerWorker:
    """Learner thread of one policy.

    Args:
      name: worker name (logs, errors).
      policy: policy name under which parameters are published.
      learn: ``learn(state, trajectory, rng)`` already jitted over the devices.
      put_batch: places a host batch on the devices (split along the batch axis).
      state: initial (or restored) learner state, on device; ``state.params`` is served.
      rng: learner RNG key.
      version: starting policy version (0, or the restored one).
      observation_space, action_space: per-row spaces (validate segments).
      segment_length: ``T``.
      batch_segments: rows (segments) per ``learn`` call.
      store, metrics: shared with the policy workers and the launcher.
      checkpointer: where to save, or ``None``.
      max_staleness: drop a segment whose oldest action is more than this many
        versions behind the learner (0 keeps everything).
      host: interface to bind.
      initial_carry: the agent's ``initial_carry`` (describes carry arrays in segments).
    """

    def __init__(self, name: str, policy: str, learn: Callable, put_batch: Callable, state: Any,
                 rng: jax.Array, version: int, observation_space, action_space,
                 segment_length: int, batch_segments: int, store: ParameterStore,
                 metrics: MetricsAccumulator, checkpointer: Checkpointer | None = None,
                 max_staleness: int = 0, host: str = "127.0.0.1",
                 initial_carry: Callable[[int], Any] = lambda n: None):
        self.name, self.policy = name, policy
        self._learn, self._put_batch = learn, put_batch
        self.state, self.rng, self.version = state, rng, version
        self._carry = CarryCodec(initial_carry)
        self._schema = segment_schema(observation_space, action_space, segment_length, self._carry)
        self._obs_names = list(space_leaves(observation_space))
        self.batch_segments = batch_segments
        self.store, self.metrics, self.checkpointer = store, metrics, checkpointer
        self.max_staleness, self.host = max_staleness, host
        self._pending: list[dict] = []
        self._pending_rows = 0
        self.address: str | None = None
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.checkpoint_requested = threading.Event()
        self.error: BaseException | None = None
        self.extra_meta: dict = {}  # run counters saved with checkpoints (set by the launcher)
        store.publish(policy, version, state.params)
        metrics.set_version(policy, version)

    def _example_batch(self) -> Trajectory:
        """A zero batch of the configured shape (for ahead-of-time compilation)."""
        B = self.batch_segments
        zeros = {k: np.zeros((B,) + s.shape[1:], s.dtype) for k, s in self._schema.items()}
        return self._trajectory(zeros)

    def _trajectory(self, host: dict) -> Trajectory:
        return Trajectory(
            obs=unflatten_obs({k: host[k] for k in self._obs_names}),
            action=host["action"], reward=host["reward"], terminated=host["terminated"],
            truncated=host["truncated"],
            final_obs=unflatten_obs({k: host["final_" + k] for k in self._obs_names}),
            behaviour_logp=host["logp"], policy_version=host["version"],
            carry=self._carry.to_tree(host))

    def warmup(self) -> None:
        """Compile ``learn`` for the batch shape before any sample arrives."""
        example = self._put_batch(self._example_batch())
        self._learn = self._learn.lower(self.state, example, self.rng).compile()

    def run(self) -> None:
        """Learn until ``stop`` is set. Exceptions are kept in ``self.error``."""
        try:
            sock = zmq.Context.instance().socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 4)  # small queue: backpressure bounds staleness
            port = sock.bind_to_random_port(f"tcp://{self.host}")
            self.address = f"tcp://{self.host}:{port}"
            self.ready.set()  # actors may connect while we compile
            try:
                self.warmup()
                while not self.stop.is_set():
                    if self.checkpoint_requested.is_set():
                        self.save_checkpoint()
                    if sock.poll(100):
                        self._receive(sock.recv_multipart(copy=False))
                        while self._pending_rows >= self.batch_segments and not self.stop.is_set():
                            self._update()
            finally:
                sock.close()
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            raise

    def _receive(self, frames: list) -> None:
        try:
            msg = wire.decode(frames)
            if msg.kind != "segment":
                raise wire.WireError(f"expected a 'segment', got kind {msg.kind!r}")
            free = wire.check_arrays(msg.arrays, self._schema)
            if len(set(free.values())) != 1:
                raise wire.WireError(f"segment arrays disagree on the number of rows: {free}")
        except wire.WireError as exc:
            log.warning("%s: dropped a malformed segment: %s", self.name, exc)
            self.metrics.count("dropped_segments")
            return
        meta = msg.meta
        env_steps = meta.get("env_steps", 0)
        self.metrics.add_env_steps(int(env_steps) if isinstance(env_steps, int) else 0)
        for episode in meta.get("episodes", []) if isinstance(meta.get("episodes"), list) else []:
            if isinstance(episode, dict):
                team = episode.get("team")
                self.metrics.add_episode(episode)
                if isinstance(team, str):
                    self.metrics.add_episode(episode, suffix=f"/{team}")
        timing = meta.get("timing")
        if isinstance(timing, dict):
            self.metrics.add_means({k: v for k, v in timing.items() if isinstance(v, float)},
                                   prefix="actor/")
        oldest = int(msg.arrays["version"].min())
        if self.max_staleness and self.version - oldest > self.max_staleness:
            self.metrics.count("stale_segments_dropped")
            return
        self._pending.append(msg.arrays)
        self._pending_rows += len(msg.arrays["reward"])

    def _take_batch(self) -> dict:
        B = self.batch_segments
        joined = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
        rest = {k: v[B:] for k, v in joined.items()}
        self._pending = [rest] if len(rest["reward"]) else []
        self._pending_rows = len(rest["reward"])
        return {k: v[:B] for k, v in joined.items()}

    def _update(self) -> None:
        host = self._take_batch()
        staleness = self.version - host["version"]
        traj = self._trajectory(host)
        self.rng, key = jax.random.split(self.rng)
        self.state, metrics = self._learn(self.state, self._put_batch(traj), key)
        self.version += 1
        self.store.publish(self.policy, self.version, self.state.params)
        metrics = jax.device_get(metrics)
        self.metrics.add_means({k: float(v) for k, v in metrics.items()})
        self.metrics.add_means({"staleness_mean": float(staleness.mean()),
                                "staleness_max": float(staleness.max())})
        self.metrics.set_version(self.policy, self.version)

    def save_checkpoint(self) -> None:
        """Save state, RNG and counters now (called between updates)."""
        self.checkpoint_requested.clear()
        if self.checkpointer is None or self.checkpointer.latest_step() == self.version:
            return
        tree = {"agent": self.state, "rng": self.rng}
        meta = {"policy_version": self.version, **self.extra_meta,
                "env_steps": self.metrics.env_steps}
        self.checkpointer.save(self.version, tree, meta)

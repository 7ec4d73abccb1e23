"""The trainer worker (jaxsrl/workers/learner/trainer.py) through its socket: staleness at learn
time and per-step validity flags, with a fake agent whose state records what it saw."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams.params import ParameterStore
from jaxsrl.core.agent import EnvSpec
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart, TrainerWorker

OBS = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
ACTIONS = gymnasium.spaces.Discrete(2)
T = 4
BATCH = 2  # rows per update


class Seen(NamedTuple):
    """What the fake learner saw: every field a scalar (the state must be replicable).

    Attributes:
      params: updates so far (= the learner version the next update runs at).
      worst_staleness: largest ``version - policy_version`` over every step learned from.
      valid_steps: valid steps summed over every batch (-1 if ``valid`` was None).
    """

    params: jax.Array
    worst_staleness: jax.Array
    valid_steps: jax.Array


def fake_learn(state: Seen, traj, rng):
    del rng
    stale = jnp.max(state.params - traj.policy_version)
    valid = (jnp.int32(-1) if traj.valid is None
             else state.valid_steps + jnp.sum(traj.valid.astype(jnp.int32)))
    return Seen(state.params + 1, jnp.maximum(state.worst_staleness, stale), valid), {}


class Trainer:
    def __init__(self, max_staleness: int = 0, idle_rows: bool = False):
        mesh = devices.local_mesh()
        self.metrics = MetricsAccumulator()
        state = Seen(jnp.int32(0), jnp.int32(0), jnp.int32(0))
        self.worker = TrainerWorker(
            "test-trainer", "p", devices.jit_learn(fake_learn, mesh),
            lambda b: devices.put_batch(b, mesh), TrainerStart(state, jax.random.PRNGKey(0), 0),
            EnvSpec(OBS, ACTIONS),
            TrainerSettings(T, BATCH, max_staleness=max_staleness, max_rows=8,
                            idle_rows=idle_rows),
            ParameterStore(), self.metrics)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()
        self.worker.ready.wait()
        assert self.worker.serving.wait(60) and self.worker.error is None, self.worker.error
        self.sock = zmq.Context.instance().socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(self.worker.address)

    def send(self, rows: int, version: int, valid: np.ndarray | None = None) -> None:
        rng = np.random.default_rng(rows + 10 * version)
        arrays = {"obs": rng.uniform(-1, 1, (rows, T + 1, 3)).astype(np.float32),
                  "final_obs": np.zeros((rows, T, 3), np.float32),
                  "action": rng.integers(0, 2, (rows, T)).astype(np.int32),
                  "reward": np.ones((rows, T), np.float32),
                  "terminated": np.zeros((rows, T), bool), "truncated": np.zeros((rows, T), bool),
                  "logp": np.full((rows, T), -0.69, np.float32),
                  "version": np.full((rows, T), version, np.int32)}
        if valid is not None:
            arrays["valid"] = valid
        meta = {"actor": 0, "run": 1, "group": 0, "env_steps": rows * T, "episodes": []}
        self.sock.send_multipart(wire.encode("segment", arrays, meta))

    def wait_version(self, version: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.worker.version < version:
            assert self.worker.error is None, self.worker.error
            assert time.monotonic() < deadline, f"stuck at version {self.worker.version}"
            time.sleep(0.01)

    def settle(self) -> None:
        """Give the trainer time to take what was sent (no update expected)."""
        time.sleep(0.5)

    def close(self) -> None:
        self.worker.stop.set()
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def trainer_factory():
    made = []

    def make(**kwargs):
        made.append(Trainer(**kwargs))
        return made[-1]

    yield make
    for t in made:
        t.close()


def test_max_staleness_is_enforced_when_the_batch_is_assembled(trainer_factory):
    """max_staleness=1, batches of 2 rows. 5 rows of version 0 arrive at once: updates
    at versions 0 and 1 use 4 of them; the 5th would be 2 versions old at the next
    update and must be dropped (counted), not learned from with the next arrivals.
    Catches the check on arrival only (the leftover row would reach update 3)."""
    t = trainer_factory(max_staleness=1)
    t.send(5, version=0)
    t.wait_version(2)
    t.send(1, version=2)
    t.settle()
    assert t.worker.version == 2  # the leftover v0 row is gone: one fresh row is no batch
    t.send(1, version=2)
    t.wait_version(3)
    assert int(t.worker.state.worst_staleness) <= 1
    snap = t.metrics.snapshot(1.0)
    assert snap["stale_rows_dropped"] == 1
    assert snap["staleness_max"] <= 1


def test_without_max_staleness_leftover_rows_are_kept(trainer_factory):
    t = trainer_factory(max_staleness=0)
    t.send(5, version=0)
    t.wait_version(2)
    t.send(1, version=2)
    t.wait_version(3)  # the leftover v0 row completes the third batch
    assert int(t.worker.state.worst_staleness) == 2
    assert "stale_rows_dropped" not in t.metrics.snapshot(1.0)


def test_validity_flags_are_stacked_into_the_trajectory(trainer_factory):
    """With idle_rows the segment carries ``valid`` [rows, T] and the learner gets it as
    ``Trajectory.valid``; without, segments are as before and ``valid`` is None."""
    t = trainer_factory(idle_rows=True)
    valid = np.ones((2, T), bool)
    valid[1] = False  # an absent agent's row
    t.send(2, version=0, valid=valid)
    t.wait_version(1)
    assert int(t.worker.state.valid_steps) == T
    t.send(2, version=0)  # a segment without flags breaks the schema: dropped
    t.settle()
    assert t.worker.version == 1
    assert t.metrics.snapshot(1.0)["dropped_segments"] == 1

    plain = trainer_factory(idle_rows=False)
    plain.send(2, version=0)
    plain.wait_version(1)
    assert int(plain.worker.state.valid_steps) == -1  # Trajectory.valid is None


def test_per_stage_timers_reach_the_metrics(trainer_factory):
    """Each update records how long it took, how long the learner waited for its batch
    and how long publishing the parameters took (milliseconds, means per interval)."""
    t = trainer_factory()
    t.send(4, version=0)
    t.wait_version(2)
    record = t.metrics.snapshot(1.0)
    for key in ("learner/update_ms", "learner/batch_wait_ms", "learner/publish_ms"):
        assert isinstance(record[key], float) and record[key] >= 0, (key, record.get(key))
    assert record["learner/publish_ms"] <= record["learner/update_ms"]

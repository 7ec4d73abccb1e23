"""Fault-injection helpers shared by the ``test_faults_*`` files (and a check of them).

* ``FlakyCartPole-v0``: CartPole whose ``step`` or ``reset`` raises on demand (once per
  run with ``once_file``, or always). Actor processes register it through a
  ``sitecustomize`` module that the :func:`flaky_env_path` fixture puts on their
  ``PYTHONPATH`` (the launcher passes its environment on to actors).
* :func:`small_args`, :func:`actor_children`, :func:`wait_for`, :func:`records`,
  :func:`train_until`.
* :class:`Servers`: a policy worker (fake ``act``) and a trainer (fake ``learn``) in
  threads of this process, with an actor table knowing actor 0 (run 1) and 1 (run 2),
  plus helpers that build valid requests and segments.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
import zmq
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.admission import ActorTable
from jaxsrl.core.agent import EnvSpec
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart, TrainerWorker

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
FLAKY_ENV = "FlakyCartPole-v0"

# The inference server (these tests drive and break it); --inference=auto would pick
# inline on a CPU-only machine (tests/system/test_inline_inference.py covers that).
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=4", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.3", "--ppo.hidden_sizes", "16", "16",
         "--ppo.num_minibatches=2", "--ppo.num_epochs=1",
         "--inference=server"]


class FlakyCartPole(CartPoleEnv):
    """CartPole that raises ``RuntimeError("injected ...")`` in ``fail_in`` (``"step"``,
    ``"reset"`` or ``""``: never) after ``fail_after`` steps of this instance. With
    ``once_file``, only the first instance to get there (across processes) fails: it
    creates the file. With ``nan_reward_after >= 0``, rewards turn NaN after that many
    steps."""

    def __init__(self, fail_in: str = "step", fail_after: int = 0, once_file: str = "",
                 nan_reward_after: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.fail_in, self.fail_after, self.once_file = fail_in, fail_after, once_file
        self.nan_reward_after = nan_reward_after
        self.steps = 0

    def _should_fail(self, where: str) -> bool:
        if where != self.fail_in or self.steps < self.fail_after:
            return False
        if not self.once_file:
            return True
        try:
            os.close(os.open(self.once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    def step(self, action):
        self.steps += 1
        if self._should_fail("step"):
            raise RuntimeError(f"injected step failure after {self.steps} steps")
        obs, reward, terminated, truncated, info = super().step(action)
        if 0 <= self.nan_reward_after < self.steps:
            reward = float("nan")
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self._should_fail("reset"):
            raise RuntimeError("injected reset failure")
        return super().reset(**kwargs)


if FLAKY_ENV not in gymnasium.registry:
    gymnasium.register(FLAKY_ENV, entry_point="test_faults_helpers:FlakyCartPole", max_episode_steps=500)


@pytest.fixture
def flaky_env_path(tmp_path, monkeypatch):
    """Make actor processes (children of this one) know ``FlakyCartPole-v0``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {TESTS_DIR!r})\nimport test_faults_helpers  # noqa\n")
    path = [str(site), TESTS_DIR, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    return site


def small_args(logdir: str, *extra: str) -> list:
    return SMALL + [f"--logdir={logdir}", *extra]


def actor_children(pid: int | None = None) -> list:
    """Live actor processes below ``pid`` (default: this process)."""
    out = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if "jaxsrl.workers.actor" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def actor_spec(proc: psutil.Process) -> dict:
    return json.loads(proc.cmdline()[-1])


def train_until(cfg, watch) -> dict:
    """Run ``train(cfg)`` (a run with no reachable step budget) while ``watch(out)`` runs
    in a thread; when it returns, SIGTERM this process, which ends ``train`` cleanly
    (``KeyboardInterrupt``). Returns ``out``, the dict ``watch`` filled; an exception of
    ``watch`` (e.g. :func:`wait_for` timing out) fails the test.

    A test that stops the run once it has seen what it waits for cannot be raced by a
    step budget that fast actors reach first."""
    from jaxsrl.launch.launcher import train  # not at import: actors import this module

    out: dict = {}

    def go():
        try:
            watch(out)
        except BaseException as exc:  # reported below
            out["error"] = exc
        os.kill(os.getpid(), signal.SIGTERM)  # train() stops cleanly

    th = threading.Thread(target=go, daemon=True)
    th.start()
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    th.join(10)
    assert "error" not in out, out.get("error")
    return out


def wait_for(cond, timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def records(logdir: str) -> list:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def test_flaky_env_fails_as_configured(tmp_path):
    env = gymnasium.make(FLAKY_ENV, fail_in="step", fail_after=3)
    env.reset(seed=0)
    env.step(0), env.step(0)
    with pytest.raises(RuntimeError, match="injected step failure"):
        env.step(0)
    once = str(tmp_path / "once")
    a = gymnasium.make(FLAKY_ENV, fail_in="reset", once_file=once)
    b = gymnasium.make(FLAKY_ENV, fail_in="reset", once_file=once)
    with pytest.raises(RuntimeError, match="injected reset failure"):
        a.reset()
    b.reset()  # the failure happened once already


# -- in-process servers with fake agents -------------------------------------------------
OBS = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
ACTIONS = gymnasium.spaces.Discrete(2)
T = 4
BATCH = 4  # segments (rows) per update
MAX_ROWS = 8  # rows per request / segment


class FakeState(NamedTuple):
    params: jax.Array


def fake_act(params, obs, carry, rng):
    """Action = index of the largest feature; logp = params * row sum (checkable)."""
    return jnp.argmax(obs, axis=-1).astype(jnp.int32), carry, {"logp": params * obs.sum(-1)}


def fake_learn(state, traj, rng):
    """params += mean reward (so a huge reward overflows the parameters to Inf)."""
    mean = jnp.mean(traj.reward)
    return FakeState(state.params + mean), {"mean_reward": mean}


class Servers:
    def __init__(self, on_nonfinite: str = "drop", curve=None, context=None):
        mesh = devices.local_mesh()
        self.store, self.metrics, self.table = ParameterStore(), MetricsAccumulator(), ActorTable()
        self.table.register(0, 1)
        self.table.register(1, 2)
        self.trainer = TrainerWorker(
            "test-trainer", "p", devices.jit_learn(fake_learn, mesh),
            lambda b: devices.put_batch(b, mesh),
            TrainerStart(FakeState(jnp.float32(1.0)), jax.random.PRNGKey(0), 0),
            EnvSpec(OBS, ACTIONS),
            TrainerSettings(T, BATCH, max_rows=MAX_ROWS, on_nonfinite=on_nonfinite, curve=curve),
            self.store, self.metrics, actors=self.table, context=context)
        self.policy = PolicyWorker("test-policy", "p", devices.jit_act(fake_act, mesh),
                                   lambda n: None, OBS, self.store, self.metrics,
                                   PolicySettings(max_rows=MAX_ROWS, curve=curve),
                                   actors=self.table, context=context)
        self.threads = [threading.Thread(target=w.run, daemon=True)
                        for w in (self.trainer, self.policy)]
        for th in self.threads:
            th.start()
        for w in (self.trainer, self.policy):
            w.ready.wait()
            assert w.serving.wait(60) and w.error is None, w.error

    def counter(self, name: str) -> int:
        return self.metrics.counter(name)

    def close(self):
        for w in (self.trainer, self.policy):
            w.stop.set()
        for th in self.threads:
            th.join(10)


@pytest.fixture
def servers():
    s = Servers()
    yield s
    s.close()


def client(address: str, kind=zmq.DEALER, context=None):
    sock = (context or zmq.Context.instance()).socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def request(obs=None, actor=0, run=1, group=0, **extra_meta) -> list:
    obs = np.eye(3, dtype=np.float32) if obs is None else obs
    return wire.encode("act", {"obs": obs}, {"actor": actor, "run": run, "group": group, **extra_meta})


def ask(sock, frames, group=0, timeout_ms=20_000):
    """Send ``frames`` and return the reply whose group is ``group`` (others are skipped)."""
    sock.send_multipart(frames)
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        if sock.poll(100):
            reply = wire.decode(sock.recv_multipart())
            if reply.meta.get("group") == group:
                return reply
    raise AssertionError("no answer from the server")


def segment_arrays(rows=2, reward=0.5, version=0) -> dict:
    rng = np.random.default_rng(rows)
    return {"obs": rng.uniform(-1, 1, (rows, T + 1, 3)).astype(np.float32),
            "final_obs": np.zeros((rows, T, 3), np.float32),
            "action": rng.integers(0, 2, (rows, T)).astype(np.int32),
            "reward": np.full((rows, T), reward, np.float32),
            "terminated": np.zeros((rows, T), bool), "truncated": np.zeros((rows, T), bool),
            "logp": np.full((rows, T), -0.69, np.float32),
            "version": np.full((rows, T), version, np.int32)}


def segment(rows=2, actor=0, run=1, arrays=None, **meta) -> list:
    arrays = segment_arrays(rows) if arrays is None else arrays
    base = {"actor": actor, "run": run, "group": 0, "env_steps": rows * T,
            "episodes": [{"return": 10.0, "length": 10}], "timing": {"env_s": 0.1, "wait_s": 0.2}}
    return wire.encode("segment", arrays, base | meta)


def push(sock, frames):
    sock.send_multipart(frames)


def wait_counter(servers: Servers, name: str, at_least: int = 1, timeout_s: float = 20):
    return wait_for(lambda: servers.counter(name) >= at_least, timeout_s, f"counter {name}")

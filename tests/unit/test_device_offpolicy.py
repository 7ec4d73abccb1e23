"""Off-policy agents on device actors (issue 30): the compiled step (rollout, insert into
the on-device replay, the learn calls due) against an unfused reference sequence of the
same pieces on the same keys, and the host's update plan against the CPU path's."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec, ReplaySpec
from jaxsrl.workers.buffer.replay import Replay, beta_schedule
from jaxsrl.workers.device import offpolicy
from jaxsrl.workers.learner.replay_setup import planned_updates
from fake_devices import fake_devices_env

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, T = 4, 8  # 32 items per step
# min_fill 40: step 1 (32 items) learns nothing, step 2 learns 12 times (a partial scan),
# step 3 all K = 32 * 8 / 16 = 16 times
DQN = dict(capacity=256, batch_size=16, replay_ratio=8.0, min_fill=40, hidden_sizes=(16,),
           target_update_period=5)
TODO = [0, 12, 16]


@functools.lru_cache(maxsize=None)
def _setup(prioritised=True):
    """DQN on gymnax CartPole (time limit 5: truncations in every segment), built once
    per mode for the module (compiles are most of these tests' time)."""
    pytest.importorskip("gymnax")
    from jaxsrl.envs.jax_native import registry
    from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": 5})
    agent = get_agent("dqn")
    fns = agent.make(agent.config_cls(**DQN, prioritised=prioritised),
                     EnvSpec(env.observation_space, env.action_space), 100)
    state = jax.tree.map(jnp.copy, fns.init(jax.random.PRNGKey(0)))
    carry = initial_rollout_carry(env, jax.random.PRNGKey(1), N, fns.initial_carry)
    rollout = make_rollout(env, fns.act, T, fns.initial_carry)
    traj = jax.eval_shape(rollout, state.params, carry, jax.random.PRNGKey(0), jnp.int32(0))[1]
    items = jax.eval_shape(fns.to_items, traj)[0]
    replay = Replay(fns.replay, jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype),
                                             items))
    return fns, state, carry, rollout, replay


_JITTED: dict = {}


def _reference(fns, state, carry, rollout, replay, rng, learn_first=False):
    """The unfused sequence, step by step on the host: rollout -> to_items -> insert ->
    the learn calls of the plan (sample, learn, priorities), each piece jitted alone."""
    spec, period = fns.replay, replay.id_period
    beta = beta_schedule(spec.importance_exponent, 100)
    r = offpolicy.empty_replay(replay)
    buffer, bad, size, inserted = r.buffer, r.bad, 0, 0
    if _JITTED.get("for") is not fns:  # compiled once per _setup (the mutation reuses them)
        _JITTED.update({"for": fns, "pieces": (
            jax.jit(rollout), jax.jit(fns.learn), jax.jit(replay.sample_fn),
            jax.jit(replay.add_fn), jax.jit(replay.set_priorities_fn))})
    rollout, learn, sample, add, setp = _JITTED["pieces"]
    version, K = 0, offpolicy.max_updates(N * T, spec)

    def learn_all(state, buffer, bad, todo, k_learn):
        for i, key in enumerate(jax.random.split(k_learn, K)[:todo]):
            k_sample, k_update = jax.random.split(key)
            batch, ids = sample(buffer, k_sample, jnp.float32(beta(version + i)),
                                jnp.int32(size), jnp.int32(inserted))
            state, _, priorities = learn(state, batch, k_update)
            if spec.prioritised:
                buffer, bad = setp(buffer, bad, ids, priorities, jnp.int32(size),
                                   jnp.int32(inserted))
        return state, buffer, bad

    for todo in TODO:
        rng, k_rollout, k_learn = jax.random.split(rng, 3)
        carry, traj, _ = rollout(state.params, carry, k_rollout, jnp.int32(version))
        items, valid = fns.to_items(traj)
        assert bool(np.all(valid))
        if learn_first:  # the mutation: learn on the replay before this step's items
            state, buffer, bad = learn_all(state, buffer, bad, todo, k_learn)
        buffer = add(buffer, items)
        size, inserted = min(size + N * T, spec.capacity), (inserted + N * T) % period
        if not learn_first:
            state, buffer, bad = learn_all(state, buffer, bad, todo, k_learn)
        version += todo
    return state, carry, buffer, rng


@functools.lru_cache(maxsize=None)
def _jit_step(fns, rollout, replay):
    return jax.jit(offpolicy.make_offpolicy_step(rollout, fns, replay, 100, N * T)[0])


def _compiled(fns, state, carry, rollout, replay, rng):
    step = _jit_step(fns, rollout, replay)
    r, version, metrics = offpolicy.empty_replay(replay), 0, []
    for todo in TODO:
        state, carry, r, rng, m, *_ = step(state, carry, r, rng, jnp.int32(version),
                                          jnp.int32(todo))
        version += todo
        metrics.append(m)
    return (state, carry, r.buffer, rng), metrics


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=1e-5, atol=1e-6)


# slow: each compiles the step and its pieces, about a minute of CPU time on the 2-core machine
@pytest.mark.slow
@pytest.mark.parametrize("prioritised", [True, False])
def test_compiled_step_equals_rollout_insert_then_the_planned_learn_calls(prioritised):
    fns, state, carry, rollout, replay = _setup(prioritised)
    rng = jax.random.PRNGKey(7)
    compiled, metrics = _compiled(fns, state, carry, rollout, replay, rng)
    reference = _reference(fns, state, carry, rollout, replay, rng)
    _assert_same(compiled, reference)
    assert int(compiled[0].update_step) == sum(TODO)
    assert float(metrics[0]["loss"]) == 0.0 and float(metrics[1]["loss"]) > 0.0


@pytest.mark.slow
def test_the_equality_catches_learning_before_inserting():
    """The comparison is sensitive: a sequence that learns on the replay before the
    step's new items are in (the other order) is told apart."""
    fns, state, carry, rollout, replay = _setup()
    rng = jax.random.PRNGKey(7)
    compiled, _ = _compiled(fns, state, carry, rollout, replay, rng)
    swapped = _reference(fns, state, carry, rollout, replay, rng, learn_first=True)
    with pytest.raises(AssertionError):
        _assert_same(compiled[0], swapped[0])


def test_the_steps_plan_is_the_hand_computed_one():
    """The plan the equality tests feed the step: none below min_fill (32 < 40), then
    ceil((64 - 40) * 8 / 16) = 12, then ceil((96 - 40) * 8 / 16) - 12 = 16 = K."""
    spec = _setup()[0].replay
    due = [offpolicy.updates_due(k * N * T, spec) for k in range(4)]
    assert [b - a for a, b in zip(due, due[1:])] == TODO
    assert offpolicy.max_updates(N * T, spec) == 16


def test_updates_due_is_the_cpu_paths_plan():
    spec = ReplaySpec(capacity=10_000, batch_size=128, replay_ratio=32.0, min_fill=1_000)
    inserted, done = 0, 0
    for _ in range(50):  # 64 x 32 items per step, as a default device-actor run
        inserted += 2048
        todo = offpolicy.updates_due(inserted, spec) - done
        assert 0 <= todo <= offpolicy.max_updates(2048, spec)
        done += todo
    assert done == planned_updates(inserted, spec)
    assert offpolicy.updates_due(999, spec) == 0


def test_traced_beta_equals_the_host_schedule():
    beta = beta_schedule(0.4, 1000)
    for u in (0, 1, 500, 999, 1000, 5000):
        assert float(jax.jit(beta)(jnp.int32(u))) == pytest.approx(beta(u), rel=1e-6)


def test_items_per_step_above_capacity_is_refused():
    with pytest.raises(ValueError, match="2048 items per step exceed the replay capacity 1000"):
        offpolicy.check_replay(ReplaySpec(capacity=1000, batch_size=10, min_fill=10), 2048, 1)


TWO_DEVICES = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, "tests/unit")
import test_device_offpolicy as t
from jaxsrl.parallel import devices
from jaxsrl.workers.device import offpolicy
from jaxsrl.workers.device.fused import put_env_carry

assert len(jax.devices()) == 2, jax.devices()
fns, state, carry, rollout, replay = t._setup()
rng = jax.random.PRNGKey(7)
one, _ = t._compiled(fns, state, carry, rollout, replay, rng)
mesh = devices.local_mesh()
step, K = offpolicy.make_offpolicy_step(rollout, fns, replay, 100, t.N * t.T, mesh)
step = offpolicy.jit_offpolicy_step(step, mesh)
s, c = devices.put_replicated(state, mesh), put_env_carry(carry, mesh)
r = devices.put_replicated(offpolicy.empty_replay(replay), mesh)
version = 0
for todo in t.TODO:
    s, c, r, rng, m, *_ = step(s, c, r, rng, jnp.int32(version), jnp.int32(todo))
    version += todo
assert c.env.obs.sharding.shard_shape(c.env.obs.shape) == (2, 4)  # envs stay split
t._assert_same(one, (s, c, r.buffer, rng))
print("TWO_DEVICES_MATCH_OK")
"""


@pytest.mark.slow
def test_sharded_over_two_devices_matches_one_device():
    """Environments split over 2 (fake CPU) devices, replay and learner state
    replicated, batches split: the same result as on one device (a subprocess: the
    device count is fixed when JAX starts)."""
    pytest.importorskip("gymnax")
    proc = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=fake_devices_env(2),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert "TWO_DEVICES_MATCH_OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_a_device_population_of_an_off_policy_agent_is_refused_before_the_run_folder(tmp_path):
    pytest.importorskip("gymnax")
    from jaxsrl.experiment.config import load_config
    from jaxsrl.launch.launcher import train
    logdir = tmp_path / "run"
    # today the config refuses it first (DQN declares no PBT hyperparameters); device
    # actors refuse any off-policy population too (a population's step is the fused one)
    with pytest.raises(ValueError, match="population") as info:
        train(load_config(["--env=gymnax:CartPole-v1", "--agent=dqn", "--population=2",
                           f"--logdir={logdir}"]))
    assert "\n" not in str(info.value) and not logdir.exists()

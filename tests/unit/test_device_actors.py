"""Device actors (issue 30): the gymnax adapter, the device rollout against the CPU
path's Trajectory layout and against the environment's own transitions, and the fused
rollout-and-learn step against a rollout followed by ``learn``."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import make_actor_env, make_env
from jaxsrl.envs.jax_native import is_jax_native, registry
from jaxsrl.streams.segment import segment_schema, to_trajectory

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, T, MAX_STEPS = 8, 8, 5  # truncations inside every segment


def _gymnax():
    return pytest.importorskip("gymnax")


def _setup(max_steps=MAX_STEPS, **ppo):
    _gymnax()
    from jaxsrl.workers.device.rollout import make_rollout
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": max_steps})
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(**ppo), EnvSpec(env.observation_space, env.action_space), 10)
    state = fns.init(jax.random.PRNGKey(0))
    carry = env.reset(jax.random.PRNGKey(1), N)
    return env, fns, state, carry, make_rollout(env, fns.act, T)


def test_jax_native_ids_are_not_built_as_gymnasium_envs():
    # gymnax:CartPole-v1 reads like module:EnvId; it must not become Gymnasium's CartPole.
    assert is_jax_native("gymnax:CartPole-v1") and not is_jax_native("CartPole-v1")
    for build in (lambda: make_env("gymnax:CartPole-v1"),
                  lambda: make_actor_env("gymnax:CartPole-v1", 2, 0)):
        with pytest.raises(ValueError, match="JAX-native"):
            build()


def test_missing_gymnax_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnax", None)  # import gymnax -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'jaxsrl\[gymnax\]'") as info:
        registry.make("gymnax:CartPole-v1")
    assert "\n" not in str(info.value)


def test_unknown_gymnax_id_and_kwarg_are_named():
    _gymnax()
    with pytest.raises(ValueError, match="NoSuchEnv-v0"):
        registry.make("gymnax:NoSuchEnv-v0")
    with pytest.raises(ValueError, match="max_step"):
        registry.make("gymnax:CartPole-v1", {"max_step": 3})


def test_spaces_match_gymnasium_cartpole():
    _gymnax()
    obs, act = registry.spaces("gymnax:CartPole-v1")
    ref = gymnasium.make("CartPole-v1")
    assert obs.shape == ref.observation_space.shape and obs.dtype == ref.observation_space.dtype
    assert isinstance(act, gymnasium.spaces.Discrete) and act.n == ref.action_space.n


def _layout(tree):
    return jax.tree.map(lambda x: (tuple(x.shape), np.dtype(x.dtype)), tree)


def test_trajectory_layout_equals_the_cpu_paths():
    env, fns, state, carry, rollout = _setup()
    _, traj, _ = jax.jit(rollout)(state.params, carry, jax.random.PRNGKey(2), 3)
    # The CPU path: the trainer's Trajectory of N segments of Gymnasium CartPole-v1.
    ref_env = gymnasium.make("CartPole-v1")
    schema = segment_schema(ref_env.observation_space, ref_env.action_space, T)
    cpu = to_trajectory({k: np.zeros((N,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        ref_env.observation_space)
    assert jax.tree.structure(traj) == jax.tree.structure(cpu)
    assert _layout(traj) == _layout(cpu)
    assert traj.carry is None and traj.valid is None


def test_rollout_steps_are_the_environments_transitions():
    """Every step of the trajectory, replayed through gymnax's own CartPole dynamics:
    obs[t + 1] follows obs[t] and action[t] unless the episode ended; a truncated
    episode's final_obs does, and a new episode starts; terminated and truncated as
    gymnax reports them, truncation exactly at the time limit."""
    env, fns, state, carry, rollout = _setup()
    from gymnax.environments.classic_control.cartpole import EnvState
    carry, traj, stats = jax.jit(rollout)(state.params, carry, jax.random.PRNGKey(2), 3)
    obs, final = np.asarray(traj.obs), np.asarray(traj.final_obs)
    term, trunc = np.asarray(traj.terminated), np.asarray(traj.truncated)
    o = obs[:, :T].reshape(-1, 4)
    s = EnvState(x=o[:, 0], x_dot=o[:, 1], theta=o[:, 2], theta_dot=o[:, 3],
                 time=jnp.zeros(len(o), jnp.int32))
    nxt, _, reward, terminal, _ = jax.vmap(env.env.step_env, in_axes=(None, 0, 0, None))(
        jax.random.PRNGKey(0), s, jnp.asarray(traj.action).reshape(-1), env.params)
    nxt = np.asarray(nxt).reshape(N, T, 4)
    done = term | trunc
    assert trunc.any() and not (term & trunc).any()
    np.testing.assert_allclose(obs[:, 1:][~done], nxt[~done], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final[trunc], nxt[trunc], rtol=1e-5, atol=1e-6)
    assert not final[~trunc].any()
    assert (np.abs(obs[:, 1:][done]) <= 0.05).all()  # a fresh episode (reset range)
    np.testing.assert_array_equal(term, np.asarray(terminal).reshape(N, T))
    np.testing.assert_array_equal(traj.reward, np.asarray(reward).reshape(N, T))
    # Truncation exactly MAX_STEPS steps after the last episode end of each row.
    for b in range(N):
        start = 0
        for t in range(T):
            length = t + 1 - start
            assert trunc[b, t] == (not term[b, t] and length == MAX_STEPS), (b, t)
            if done[b, t]:
                start = t + 1
    assert int(stats.count) == int(done.sum())
    assert float(stats.return_sum) == float(stats.length_sum)  # CartPole: reward 1 a step
    assert (np.asarray(traj.policy_version) == 3).all()


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=1e-5, atol=1e-6)


def _fused_vs_separate(fused_fn):
    env, fns, state, carry, rollout = _setup()
    rng, version = jax.random.PRNGKey(5), jnp.int32(2)
    fused = jax.jit(fused_fn(rollout, fns.learn))(state, carry, rng, version)
    # The reference: the rollout, then learn on its trajectory, as separate programs.
    rng2, k_rollout, k_learn = jax.random.split(rng, 3)
    carry2, traj, stats = jax.jit(rollout)(state.params, carry, k_rollout, version)
    state2, metrics = jax.jit(fns.learn)(state, traj, k_learn)
    return fused, (state2, carry2, rng2, metrics, stats)


def test_fused_step_equals_rollout_then_learn():
    _gymnax()
    from jaxsrl.workers.device.fused import make_fused_step
    fused, separate = _fused_vs_separate(make_fused_step)
    _assert_same(fused, separate)
    assert int(fused[0].update_step) == 1


def test_the_equality_catches_a_wrong_bootstrap_of_truncated_episodes():
    """The comparison above is sensitive: a fused step that learns as if truncated
    episodes had terminated (no bootstrap from ``final_obs``) is told apart."""
    _gymnax()

    def mutant(rollout, learn):
        def step(state, env_carry, rng, version):
            rng, k_rollout, k_learn = jax.random.split(rng, 3)
            env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
            traj = traj._replace(terminated=traj.terminated | traj.truncated,
                                 truncated=jnp.zeros_like(traj.truncated))
            state, metrics = learn(state, traj, k_learn)
            return state, env_carry, rng, metrics, stats
        return step

    fused, separate = _fused_vs_separate(mutant)
    with pytest.raises(AssertionError):
        _assert_same(fused[0], separate[0])


TWO_DEVICES = r"""
import jax, jax.numpy as jnp, numpy as np
from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import registry
from jaxsrl.parallel import devices
from jaxsrl.workers.device.fused import jit_fused_step, make_fused_step, put_env_carry
from jaxsrl.workers.device.rollout import make_rollout

assert len(jax.devices()) == 2, jax.devices()
env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": 5})
agent = get_agent("ppo")
fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
step = make_fused_step(make_rollout(env, fns.act, 8), fns.learn)
state, carry = fns.init(jax.random.PRNGKey(0)), env.reset(jax.random.PRNGKey(1), 8)
args = (jax.random.PRNGKey(5), jnp.int32(0))
one = jax.jit(step, device=jax.devices()[0])(state, carry, *args)
mesh = devices.local_mesh()
carry2 = put_env_carry(carry, mesh)
assert len(carry2.obs.addressable_shards) == 2
two = jit_fused_step(step, mesh)(devices.put_replicated(state, mesh), carry2, *args)
assert two[1].obs.sharding.shard_shape(two[1].obs.shape) == (4, 4)  # envs stay split
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=1e-5, atol=1e-5)
print("TWO_DEVICES_MATCH_OK")
"""


def test_fused_step_sharded_over_two_devices_matches_one_device():
    """Environments split over 2 (fake CPU) devices, learner state replicated: the same
    result as on one device. The device count is fixed when JAX starts: a subprocess."""
    _gymnax()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO_ROOT)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    proc = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert "TWO_DEVICES_MATCH_OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_trajectory_type_is_the_agents():
    env, fns, state, carry, rollout = _setup()
    _, traj, _ = rollout(state.params, carry, jax.random.PRNGKey(2), 0)
    assert isinstance(traj, Trajectory)


def test_a_terminal_step_at_the_time_limit_is_terminated_not_truncated():
    """gymnax reports both flags there; the CPU path (GymVectorEnv) reports
    ``truncated and not terminated``: no bootstrap from a terminal state."""
    _gymnax()
    from gymnax.environments.classic_control.cartpole import EnvState
    from jaxsrl.envs.jax_native.gymnax_env import EnvCarry
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": MAX_STEPS})
    one = lambda v, dt=jnp.float32: jnp.full((2,), v, dt)
    # Row 0: the pole falls on the last allowed step; row 1: upright at the time limit.
    state = EnvState(x=one(0.0), x_dot=one(0.0), theta=jnp.array([0.2, 0.0]),
                     theta_dot=jnp.array([2.0, 0.0]), time=one(MAX_STEPS - 1, jnp.int32))
    carry = EnvCarry(state, jnp.zeros((2, 4)), one(0.0), one(MAX_STEPS - 1, jnp.int32))
    _, out = env.step(carry, jnp.array([1, 1], jnp.int32), jax.random.PRNGKey(0))
    np.testing.assert_array_equal(out.terminated, [True, False])
    np.testing.assert_array_equal(out.truncated, [False, True])
    assert not np.asarray(out.final_obs[0]).any() and np.asarray(out.final_obs[1]).any()
    np.testing.assert_array_equal(out.episode_length, [MAX_STEPS, MAX_STEPS])


def test_put_env_carry_gives_every_leaf_its_own_buffer():
    """A reset that hands one array out as several leaves (Brax's envs share one zeros
    array for reward, done and metrics) must not reach the donating fused step as one
    buffer twice ("Attempt to donate the same buffer twice", seen on brax:halfcheetah)."""
    from jaxsrl.parallel import devices
    from jaxsrl.workers.device.fused import put_env_carry
    z = jnp.zeros(4)
    carry = put_env_carry((z, z, {"a": z}), devices.local_mesh())
    ptrs = {x.addressable_shards[0].data.unsafe_buffer_pointer() for x in jax.tree.leaves(carry)}
    assert len(ptrs) == 3


# Recurrent agents: the agent's carry rides through the scan, reset where episodes end.

def _setup_recurrent(max_steps=MAX_STEPS):
    _gymnax()
    from recurrent_box_agent import AGENT
    from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": max_steps})
    fns = AGENT.make(AGENT.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
    state = fns.init(jax.random.PRNGKey(0))
    carry = initial_rollout_carry(env, jax.random.PRNGKey(1), N, fns.initial_carry)
    return env, fns, state, carry, make_rollout(env, fns.act, T, fns.initial_carry)


def test_recurrent_trajectory_layout_equals_the_cpu_paths():
    """The CPU path's Trajectory of a recurrent agent: segments with ``carry/i`` arrays
    (the agent's CarryCodec), no ``valid`` (single-agent env)."""
    from jaxsrl.streams.carry import CarryCodec
    env, fns, state, carry, rollout = _setup_recurrent()
    _, traj, _ = jax.jit(rollout)(state.params, carry, jax.random.PRNGKey(2), 3)
    ref_env = gymnasium.make("CartPole-v1")
    codec = CarryCodec(fns.initial_carry)
    schema = segment_schema(ref_env.observation_space, ref_env.action_space, T, carry=codec)
    cpu = to_trajectory({k: np.zeros((N,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        ref_env.observation_space, carry=codec)
    assert cpu.carry is not None and traj.carry is not None
    assert jax.tree.structure(traj) == jax.tree.structure(cpu)
    assert _layout(traj) == _layout(cpu)
    assert traj.valid is None and cpu.valid is None


def _reference_segments(env, fns, params, carry, rngs, reset=True):
    """The rollouts of ``rngs`` (one per segment), one step and one row at a time in
    Python as the CPU actors do: act, step, then zero the carry of every row whose
    episode ended. Returns per segment (first carry, actions) and the last carry."""
    env_c, agent_c = carry.env, np.array(carry.agent)
    segments = []
    for rng in rngs:
        first, actions = agent_c.copy(), []
        for key in jax.random.split(rng, T):
            k_act, k_env = jax.random.split(key)
            action, new, _ = fns.act(params, env_c.obs, jnp.asarray(agent_c), k_act)
            env_c, out = env.step(env_c, action, k_env)
            agent_c = np.array(new)
            for b in range(N):
                if reset and (bool(out.terminated[b]) or bool(out.truncated[b])):
                    agent_c[b] = np.asarray(fns.initial_carry(1))[0]
            actions.append(np.asarray(action))
        segments.append((first, np.stack(actions, 1)))
    return segments, agent_c


def _device_segments(rollout, params, carry, rngs):
    out, step = [], jax.jit(rollout)
    for rng in rngs:
        carry, traj, _ = step(params, carry, rng, 0)
        out.append(traj)
    return out, carry


def test_recurrent_carry_is_reset_at_episode_ends_as_a_step_by_step_loop_does():
    """Two consecutive segments (MAX_STEPS=5 < T: episodes end inside and across them):
    each segment's first carry, the actions (they depend on the carry) and the carry
    handed on equal a per-step, per-row Python loop that resets as the CPU actors do."""
    env, fns, state, carry, rollout = _setup_recurrent()
    rngs = [jax.random.PRNGKey(7), jax.random.PRNGKey(8)]
    ref, ref_last = _reference_segments(env, fns, state.params, carry, rngs)
    trajs, last = _device_segments(rollout, state.params, carry, rngs)
    assert (np.asarray(trajs[0].truncated) | np.asarray(trajs[0].terminated)).any()
    for (first, actions), traj in zip(ref, trajs):
        np.testing.assert_allclose(np.asarray(traj.carry), first, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(np.asarray(traj.action), actions)
    np.testing.assert_allclose(np.asarray(last.agent), ref_last, rtol=1e-6, atol=1e-7)
    # The second segment starts where the first ended, reset rows included.
    np.testing.assert_allclose(np.asarray(trajs[1].carry), ref[1][0], rtol=1e-6, atol=1e-7)


def test_the_reference_loop_tells_a_missing_reset_apart():
    """The comparison above is sensitive: without the reset the carries differ."""
    env, fns, state, carry, rollout = _setup_recurrent()
    rngs = [jax.random.PRNGKey(7), jax.random.PRNGKey(8)]
    _, no_reset_last = _reference_segments(env, fns, state.params, carry, rngs, reset=False)
    _, last = _device_segments(rollout, state.params, carry, rngs)
    assert not np.allclose(np.asarray(last.agent), no_reset_last, rtol=1e-6, atol=1e-7)


def _fused_vs_separate_recurrent(fused_fn):
    env, fns, state, carry, rollout = _setup_recurrent()
    rng, version = jax.random.PRNGKey(5), jnp.int32(2)
    fused = jax.jit(fused_fn(rollout, fns.learn))(state, carry, rng, version)
    rng2, k_rollout, k_learn = jax.random.split(rng, 3)
    carry2, traj, stats = jax.jit(rollout)(state.params, carry, k_rollout, version)
    state2, metrics = jax.jit(fns.learn)(state, traj, k_learn)
    return fused, (state2, carry2, rng2, metrics, stats)


def test_recurrent_fused_step_equals_rollout_then_learn():
    _gymnax()
    from jaxsrl.workers.device.fused import make_fused_step
    from jaxsrl.workers.device.rollout import RecurrentCarry
    fused, separate = _fused_vs_separate_recurrent(make_fused_step)
    assert isinstance(fused[1], RecurrentCarry)
    assert jax.tree.structure(fused) == jax.tree.structure(separate)
    _assert_same(fused, separate)
    assert int(fused[0].update_step) == 1


def test_the_recurrent_equality_catches_a_wrong_first_carry():
    """A fused step that learns from the carry the rollout ended with, not the one each
    segment started from, is told apart."""
    _gymnax()

    def mutant(rollout, learn):
        def step(state, env_carry, rng, version):
            rng, k_rollout, k_learn = jax.random.split(rng, 3)
            env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
            state, metrics = learn(state, traj._replace(carry=env_carry.agent), k_learn)
            return state, env_carry, rng, metrics, stats
        return step

    fused, separate = _fused_vs_separate_recurrent(mutant)
    with pytest.raises(AssertionError):
        _assert_same(fused[0], separate[0])

"""A user's own JAX-native env (``--env=jax:package.module:factory``,
``jaxsrl.envs.jax_native.user_env``): ``tests/jax_cartpole.py`` against Gymnasium's
CartPole-v1 (the independent reference: same state and action, same next state), the
batching layer's time limit and auto-reset, and one-line errors for bad ids and
factories. No extra needed."""

from __future__ import annotations

import os

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cartpole
from jaxsrl.envs.jax_native import is_jax_native, registry, split_id
from jaxsrl.envs.jax_native.autoreset import EnvCarry

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = "jax:jax_cartpole:make"


def _random_states(n, seed=0):
    """``n`` CartPole states ``[n, 4]`` float32 in and just beyond the termination bounds."""
    rng = np.random.default_rng(seed)
    scale = np.array([2.6, 2.0, 0.25, 2.5])
    return (rng.uniform(-1, 1, (n, 4)) * scale).astype(np.float32)


def _gymnasium(states, actions):
    ref = gymnasium.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    nxt, rewards, terms = [], [], []
    for s, a in zip(states, actions):
        ref.state, ref.steps_beyond_terminated = s.astype(np.float64), None
        obs, reward, terminated, truncated, _ = ref.step(int(a))
        assert not truncated
        nxt.append(obs), rewards.append(reward), terms.append(terminated)
    return np.stack(nxt), np.array(rewards), np.array(terms)


def _ours(step, states, actions):
    obs, state, reward, terminated = jax.jit(jax.vmap(step, in_axes=(None, 0, 0)))(
        jax.random.PRNGKey(0), jnp.asarray(states), jnp.asarray(actions, jnp.int32))
    np.testing.assert_array_equal(obs, state)
    return np.asarray(obs), np.asarray(reward), np.asarray(terminated)


def test_jax_cartpole_steps_as_gymnasium_cartpole_v1():
    """400 states (both actions, many beyond the bounds): next state, reward and
    terminated equal Gymnasium's (float32 here, float64 there)."""
    states = _random_states(400)
    actions = np.arange(400) % 2
    nxt, reward, terminated = _ours(jax_cartpole.make().step, states, actions)
    ref_nxt, ref_reward, ref_terminated = _gymnasium(states, actions)
    assert 50 < ref_terminated.sum() < 350  # both outcomes are exercised
    np.testing.assert_allclose(nxt, ref_nxt, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(terminated, ref_terminated)
    np.testing.assert_array_equal(reward, ref_reward)


def test_the_comparison_catches_semi_implicit_euler():
    """The comparison above is sensitive: the same dynamics integrated with Gymnasium's
    other integrator (``semi-implicit euler``: velocities first) are told apart."""
    class SemiImplicit(jax_cartpole.CartPole):
        def step(self, key, state, action):
            _, new, reward, _ = super().step(key, state, action)
            x = state[0] + jax_cartpole.TAU * new[1]
            theta = state[2] + jax_cartpole.TAU * new[3]
            new = jnp.stack([x, new[1], theta, new[3]])
            term = (jnp.abs(x) > jax_cartpole.X_LIMIT) | (jnp.abs(theta) > jax_cartpole.THETA_LIMIT)
            return new, new, reward, term

    states, actions = _random_states(400), np.arange(400) % 2
    nxt, _, _ = _ours(SemiImplicit().step, states, actions)
    ref_nxt, _, _ = _gymnasium(states, actions)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(nxt, ref_nxt, rtol=1e-5, atol=1e-5)


def test_jax_cartpole_spaces_reset_and_time_limit_are_gymnasiums():
    env, ref = jax_cartpole.make(), gymnasium.make("CartPole-v1")
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    assert env.max_episode_steps == ref.spec.max_episode_steps == 500
    obs, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 1000))
    assert obs.dtype == jnp.float32 and obs.shape == (1000, 4)
    assert float(jnp.abs(obs).max()) <= 0.05 and float(jnp.abs(obs).max()) > 0.045


def test_jax_ids_split_at_the_first_colon():
    assert is_jax_native(CARTPOLE) and split_id(CARTPOLE) == ("jax", "jax_cartpole:make")
    assert not is_jax_native("jax:")


def test_a_terminal_step_at_the_time_limit_is_terminated_not_truncated():
    """At the time limit, a terminal state is ``terminated`` (no bootstrap), an upright
    pole ``truncated`` with its final observation; both rows start a fresh episode."""
    env = registry.make(CARTPOLE, {"max_episode_steps": 5})
    state = jnp.array([[0.0, 0.0, 0.2, 2.0], [0.0, 0.0, 0.0, 0.0]], jnp.float32)
    carry = EnvCarry(state, state, jnp.full(2, 4.0), jnp.full(2, 4, jnp.int32))
    nxt, out = jax.jit(env.step)(carry, jnp.array([1, 1], jnp.int32), jax.random.PRNGKey(0))
    np.testing.assert_array_equal(out.terminated, [True, False])
    np.testing.assert_array_equal(out.truncated, [False, True])
    np.testing.assert_array_equal(out.episode_done, [True, True])
    np.testing.assert_array_equal(out.episode_length, [5, 5])
    np.testing.assert_array_equal(out.episode_return, [5.0, 5.0])
    expected_final = np.asarray(jax_cartpole.make().step(None, state[1], 1)[0])
    np.testing.assert_allclose(out.final_obs[1], expected_final, rtol=1e-6)
    assert not np.asarray(out.final_obs[0]).any()
    assert float(jnp.abs(nxt.obs).max()) <= 0.05  # both reset
    np.testing.assert_array_equal(nxt.obs, nxt.state)
    np.testing.assert_array_equal(nxt.episode_length, [0, 0])
    np.testing.assert_array_equal(nxt.episode_return, [0.0, 0.0])


def test_no_time_limit_never_truncates():
    env = registry.make(CARTPOLE, {"max_episode_steps": None})
    carry = EnvCarry(jnp.zeros((2, 4)), jnp.zeros((2, 4)), jnp.zeros(2), jnp.full(2, 10 ** 6, jnp.int32))
    nxt, out = jax.jit(env.step)(carry, jnp.array([0, 1], jnp.int32), jax.random.PRNGKey(0))
    assert not np.asarray(out.truncated).any() and not np.asarray(out.episode_done).any()
    np.testing.assert_array_equal(nxt.episode_length, [10 ** 6 + 1] * 2)


def test_a_file_reference_loads_the_same_env():
    env = registry.make(f"jax:{os.path.join(TESTS, 'jax_cartpole.py')}:make")
    assert env.observation_space == gymnasium.make("CartPole-v1").observation_space


class _NoStep:
    observation_space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)
    max_episode_steps = 10

    def reset(self, key):
        return jnp.zeros(2), jnp.zeros(2)


def no_step():
    return _NoStep()


class _FiveTuple(jax_cartpole.CartPole):
    def step(self, key, state, action):
        return (*super().step(key, state, action), {})  # Gymnasium's order with info


def five_tuple():
    return _FiveTuple()


class _Batched(jax_cartpole.CartPole):
    def reset(self, key):
        return jax.vmap(super().reset)(jax.random.split(key, 3))  # N envs, not one


def batched():
    return _Batched()


def dict_obs():
    env = jax_cartpole.make()
    env.observation_space = gymnasium.spaces.Dict({"a": env.observation_space})
    return env


@pytest.mark.parametrize("env_id, kwargs, match", [
    ("jax:no_such_module_xyz:make", None, "cannot import module 'no_such_module_xyz'"),
    ("jax:jax_cartpole", None, "not of the form jax:package.module:factory"),
    ("jax:jax_cartpole:nope", None, "has no callable 'nope'"),
    ("jax:jax_cartpole:GRAVITY", None, "has no callable 'GRAVITY'"),
    (CARTPOLE, {"max_steps": 3}, r"--env_kwargs \['max_steps'\] do not fit make"),
    (CARTPOLE, {"max_episode_steps": 0}, "max_episode_steps=0 must be a positive integer"),
    ("jax:test_user_jax_env:no_step", None, "lacks step"),
    ("jax:test_user_jax_env:dict_obs", None, "unsupported observation space Dict"),
    ("jax:test_user_jax_env:five_tuple", None,
     r"step\(key, state, action\) must return \(obs, state, reward, terminated\), not tuple of 5"),
    ("jax:test_user_jax_env:batched", None, r"reset gives obs of shape \(3, 4\), not"),
])
def test_bad_ids_and_factories_are_one_line_errors(env_id, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        registry.make(env_id, kwargs)
    assert "\n" not in str(info.value)
    assert env_id.partition(":")[2].partition(":")[0] in str(info.value)  # names the module

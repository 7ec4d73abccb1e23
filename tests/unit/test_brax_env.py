"""The Brax adapter of device actors (``--env=brax:<name>``): auto-reset, terminated kept
apart from truncated, the final observation of truncated episodes and episode statistics
as the CPU path reports them. Brax's trivial ``fast`` env (no physics, compiles in
seconds) and a terminating variant of it stand in for the locomotion envs, whose CPU
compile takes minutes. Skipped without brax."""

from __future__ import annotations

import sys

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import is_jax_native, registry
from jaxsrl.streams.segment import segment_schema, to_trajectory

N, T, LIMIT = 4, 12, 5
DT = 0.02  # brax's Fast: vel += dt for a positive action, pos += vel * dt, reward = pos


def _brax():
    return pytest.importorskip("brax.envs")


def _register_terminating():
    """``fast`` whose episode terminates once ``pos > 0.002`` (on its 3rd push)."""
    brax_envs = _brax()
    from brax.envs.fast import Fast

    class FastDone(Fast):
        def step(self, state, action):
            state = super().step(state, action)
            return state.replace(done=(state.pipeline_state.x.pos[0] > 0.002).astype(jnp.float32))

    brax_envs.register_environment("jaxsrl_fast_done", FastDone)


def test_brax_ids_are_jax_native():
    assert is_jax_native("brax:halfcheetah") and not is_jax_native("halfcheetah")


def test_missing_brax_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax", None)  # import brax -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'jaxsrl\[brax\]'") as info:
        registry.make("brax:halfcheetah")
    assert "\n" not in str(info.value)


def test_bad_name_backend_and_kwargs_are_named():
    _brax()
    with pytest.raises(ValueError, match="nosuchenv"):
        registry.make("brax:nosuchenv")
    with pytest.raises(ValueError, match="warp9"):
        registry.make("brax:halfcheetah", {"backend": "warp9"})
    with pytest.raises(ValueError, match="episode_length"):
        registry.make("brax:fast", {"episode_length": 0})
    with pytest.raises(ValueError, match="no_such_weight"):
        registry.make("brax:halfcheetah", {"no_such_weight": 1.0})


def test_halfcheetah_spaces():
    _brax()
    obs, act = registry.spaces("brax:halfcheetah")
    assert obs.shape == (17,) and obs.dtype == np.float32
    assert act.shape == (6,) and (act.low == -1).all() and (act.high == 1).all()


def _run(name, max_steps=LIMIT, push=1.0):
    env = registry.make(f"brax:{name}", {"episode_length": max_steps})
    carry = env.reset(jax.random.PRNGKey(0), N)
    step = jax.jit(env.step)
    outs, obs = [], [np.asarray(carry.obs)]
    for t in range(T):
        carry, out = step(carry, jnp.full((N, 1), push, jnp.float32), jax.random.PRNGKey(t))
        outs.append(jax.device_get(out))
        obs.append(np.asarray(carry.obs))
    stack = lambda f: np.stack([getattr(o, f) for o in outs], axis=1)  # [N, T, ...]
    return env, np.stack(obs, axis=1), stack


def _pos(k):
    """Fast's position after ``k`` pushes from rest: dt^2 * k (k + 1) / 2."""
    return DT * DT * k * (k + 1) / 2


def test_time_limit_truncates_with_the_final_observation_and_resets():
    _brax()
    env, obs, out = _run("fast")
    trunc, term = out("truncated"), out("terminated")
    assert not term.any()
    expected = np.zeros(T, bool)
    expected[LIMIT - 1::LIMIT] = True  # steps 5, 10 of every row
    np.testing.assert_array_equal(trunc, np.broadcast_to(expected, (N, T)))
    final = out("final_obs")
    np.testing.assert_allclose(final[:, LIMIT - 1, 0], _pos(LIMIT), rtol=1e-5)
    assert not final[~trunc].any()
    # After a truncation the carry holds a fresh episode's first observation (zeros).
    assert not obs[:, LIMIT].any() and obs[:, LIMIT - 1, 0].all()
    # Episode statistics as GymVectorEnv reports them: length and summed reward.
    np.testing.assert_array_equal(out("episode_length")[trunc], LIMIT)
    ret = sum(_pos(k) for k in range(1, LIMIT + 1))
    np.testing.assert_allclose(out("episode_return")[trunc], ret, rtol=1e-5)
    assert not out("episode_return")[~trunc].any()
    np.testing.assert_array_equal(out("episode_done"), trunc)


def test_termination_is_not_truncation_even_at_the_time_limit():
    _register_terminating()
    # Terminates on its 3rd step: before a limit of 5, and exactly at a limit of 3.
    for limit in (5, 3):
        _, obs, out = _run("jaxsrl_fast_done", max_steps=limit)
        term, trunc = out("terminated"), out("truncated")
        expected = np.zeros(T, bool)
        expected[2::3] = True
        np.testing.assert_array_equal(term, np.broadcast_to(expected, (N, T)))
        assert not trunc.any() and not out("final_obs").any()
        np.testing.assert_array_equal(out("episode_length")[term], 3)
        assert not obs[:, 3].any()  # reset after the terminal step


def test_trajectory_layout_equals_the_cpu_paths():
    _brax()
    from jaxsrl.workers.device.rollout import make_rollout
    env = registry.make("brax:fast", {"episode_length": LIMIT})
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
    state = fns.init(jax.random.PRNGKey(0))
    carry = env.reset(jax.random.PRNGKey(1), N)
    _, traj, stats = jax.jit(make_rollout(env, fns.act, T))(state.params, carry,
                                                            jax.random.PRNGKey(2), 3)
    # The CPU path's Trajectory for the same spaces (a Box observation and action).
    schema = segment_schema(env.observation_space, env.action_space, T)
    cpu = to_trajectory({k: np.zeros((N,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        env.observation_space)
    layout = lambda tree: jax.tree.map(lambda x: (tuple(x.shape), np.dtype(x.dtype)), tree)
    assert jax.tree.structure(traj) == jax.tree.structure(cpu)
    assert layout(traj) == layout(cpu)
    assert int(stats.count) == int(np.asarray(traj.truncated).sum()) == N * (T // LIMIT)
    assert isinstance(env.action_space, gymnasium.spaces.Box)

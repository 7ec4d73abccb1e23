"""The JaxMARL adapter of device actors (``--env=jaxmarl:MPE_<id>``): each agent of an
environment is one row, auto-reset at the time limit (every MPE episode end is
``truncated``), the final observation, and per-agent episode statistics. Skipped without
jaxmarl."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import is_jax_native, registry
from jaxsrl.streams.segment import segment_schema, to_trajectory

ID, A, E, LIMIT = "jaxmarl:MPE_simple_spread_v3", 3, 2, 3


def _jaxmarl():
    return pytest.importorskip("jaxmarl")


def test_missing_jaxmarl_is_a_one_line_error_naming_the_extra(monkeypatch):
    assert is_jax_native(ID)
    monkeypatch.setitem(sys.modules, "jaxmarl", None)
    with pytest.raises(ValueError, match=r"pip install 'jaxsrl\[jaxmarl\]'") as info:
        registry.make(ID)
    assert "\n" not in str(info.value)


def test_spaces_ids_and_row_count_are_checked():
    _jaxmarl()
    env = registry.make(ID)
    assert env.num_agents == A and env.observation_space.shape == (18,)
    assert env.action_space.n == 5
    with pytest.raises(ValueError, match="MPE ids only"):
        registry.make("jaxmarl:hanabi")
    with pytest.raises(ValueError, match="not a multiple of its 3 agents"):
        env.reset(jax.random.PRNGKey(0), 4)


def test_rows_are_agents_truncated_at_the_limit_with_final_obs():
    _jaxmarl()
    env = registry.make(ID, {"max_steps": LIMIT})
    carry = env.reset(jax.random.PRNGKey(0), E * A)
    step = jax.jit(env.step)
    action = jnp.tile(jnp.arange(A, dtype=jnp.int32), E)  # agent i takes action i
    acts = {a: jnp.full((E,), i, jnp.int32) for i, a in enumerate(env.env.agents)}
    for t in range(2 * LIMIT):
        # The reference: JaxMARL's own step_env of the same state and actions.
        ref_obs, _, ref_rew, _, _ = jax.vmap(env.env.step_env)(
            jax.random.split(jax.random.split(jax.random.PRNGKey(t))[0], E), carry.state, acts)
        ref_obs = np.stack([ref_obs[a] for a in env.env.agents], 1).reshape(E * A, -1)
        ref_rew = np.stack([ref_rew[a] for a in env.env.agents], 1).reshape(E * A)
        new, out = step(carry, action, jax.random.PRNGKey(t))
        np.testing.assert_allclose(out.reward, ref_rew, rtol=1e-5)
        at_limit = (t + 1) % LIMIT == 0
        assert not np.asarray(out.terminated).any()
        np.testing.assert_array_equal(out.truncated, np.full(E * A, at_limit))
        if at_limit:
            np.testing.assert_allclose(out.final_obs, ref_obs, rtol=1e-5)
            np.testing.assert_array_equal(out.episode_length, LIMIT)
            assert not np.allclose(new.obs, ref_obs)  # a fresh episode
            assert not np.asarray(new.episode_length).any()
        else:
            assert not np.asarray(out.final_obs).any()
            np.testing.assert_allclose(new.obs, ref_obs, rtol=1e-5)
        carry = new


def test_trajectory_layout_equals_the_cpu_paths():
    _jaxmarl()
    from jaxsrl.workers.device.rollout import make_rollout
    env = registry.make(ID, {"max_steps": LIMIT})
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
    state = fns.init(jax.random.PRNGKey(0))
    carry = env.reset(jax.random.PRNGKey(1), E * A)
    T = 2 * LIMIT
    _, traj, stats = jax.jit(make_rollout(env, fns.act, T))(state.params, carry,
                                                            jax.random.PRNGKey(2), 0)
    schema = segment_schema(env.observation_space, env.action_space, T)
    cpu = to_trajectory({k: np.zeros((E * A,) + s.shape[1:], s.dtype) for k, s in schema.items()},
                        env.observation_space)
    layout = lambda tree: jax.tree.map(lambda x: (tuple(x.shape), np.dtype(x.dtype)), tree)
    assert layout(traj) == layout(cpu)
    assert int(stats.count) == E * A * 2 and int(stats.length_sum) == E * A * T

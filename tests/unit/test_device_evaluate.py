"""Evaluation on device actors (issue 30): the compiled evaluation loop
(``jaxsrl/workers/device/evaluate.py``) against a step-by-step loop over gymnax's own
``reset``/``step``, one environment at a time, with the same parameters and keys; the
host trace against the compiled loop; videos of envs that cannot be drawn refused in
one line."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs.jax_native import registry

E, LIMIT = 6, 9  # a time limit that some greedy episodes reach (truncated), some not (8 steps)


def _setup(episodes=E, max_steps=None, **ppo):
    pytest.importorskip("gymnax")
    from jaxsrl.workers.device.evaluate import make_evaluation
    env = registry.make("gymnax:CartPole-v1", {"max_steps_in_episode": LIMIT})
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(hidden_sizes=(16, 16), **ppo),
                     EnvSpec(env.observation_space, env.action_space), 10)
    params = fns.init(jax.random.PRNGKey(3)).params
    act = functools.partial(fns.act, deterministic=True)
    return env, act, params, make_evaluation(env, act, episodes, fns.initial_carry, max_steps)


def _reference(env, act, params, key, episodes, max_steps=None):
    """Each environment alone with gymnax's ``reset``/``step`` (no auto-reset, no batch
    bookkeeping): its first episode's return and length. Keys as documented in
    ``make_evaluation``: reset keys split from the first half of ``key``; at every step
    the loop key splits into ``(next, k_act, k_env)`` and ``k_env`` over the envs."""
    gym_env, params_env = env.env, env.params
    reset, step, act = jax.jit(gym_env.reset), jax.jit(gym_env.step), jax.jit(act)
    k_reset, k_loop = jax.random.split(key)
    returns, lengths = [], []
    for i in range(episodes):
        obs, state = reset(jax.random.split(k_reset, episodes)[i], params_env)
        k, total, n = k_loop, 0.0, 0
        while True:
            k, k_act, k_env = jax.random.split(k, 3)
            action, _, _ = act(params, np.asarray(obs, np.float32)[None], None, k_act)
            obs, state, reward, terminated, truncated, _ = step(
                jax.random.split(k_env, episodes)[i], state, action[0], params_env)
            total, n = total + float(reward), n + 1
            if bool(terminated) or bool(truncated) or (max_steps is not None and n >= max_steps):
                break
        returns.append(total)
        lengths.append(n)
    return np.array(returns, np.float32), np.array(lengths, np.int32)


@pytest.fixture(scope="module")
def evaluated():
    """The default setup and its compiled evaluation's ``(returns, lengths)``."""
    env, act, params, evaluation = _setup()
    key = jax.random.PRNGKey(7)
    return env, act, params, evaluation, key, jax.device_get(jax.jit(evaluation.run)(params, key))


def test_compiled_evaluation_equals_a_step_by_step_loop(evaluated):
    env, act, params, evaluation, key, (returns, lengths) = evaluated
    ref_returns, ref_lengths = _reference(env, act, params, key, E)
    # Both kinds of episode end are in the batch, and the lengths differ between rows
    # (a row that ended must stop counting while the others run on).
    assert (ref_lengths == LIMIT).any() and (ref_lengths < LIMIT).any(), ref_lengths
    np.testing.assert_array_equal(lengths, ref_lengths)
    np.testing.assert_allclose(returns, ref_returns, rtol=0, atol=0)


def test_max_steps_cuts_every_episode():
    env, act, params, evaluation = _setup(max_steps=4)
    key = jax.random.PRNGKey(7)
    returns, lengths = jax.device_get(jax.jit(evaluation.run)(params, key))
    ref_returns, ref_lengths = _reference(env, act, params, key, E, max_steps=4)
    assert (lengths == 4).all()
    np.testing.assert_array_equal(lengths, ref_lengths)
    np.testing.assert_allclose(returns, ref_returns, rtol=0, atol=0)


def test_chunks_give_the_compiled_loops_episodes_and_how_they_ended(evaluated):
    """``run_chunks`` (calls of at most ``chunk_steps`` steps) equals the one compiled
    loop; no episode is cut at gymnax's own time limit (gymnax's CartPole may call an
    episode at the limit terminated); ``max_steps`` below it cuts every episode."""
    from jaxsrl.workers.device.evaluate import make_evaluation
    env, act, params, evaluation, key, (returns, lengths) = evaluated
    assert evaluation.max_steps == LIMIT  # the env's own time limit bounds it
    chunked = make_evaluation(env, act, E, None, chunk_steps=2).run_chunks(params, key)
    np.testing.assert_array_equal(chunked.lengths, lengths)
    np.testing.assert_allclose(chunked.returns, returns, rtol=0, atol=0)
    assert not chunked.truncated[lengths < LIMIT].any()  # ended early: terminated
    assert not chunked.cut.any()
    cut = make_evaluation(env, act, E, None, max_steps=4, chunk_steps=3).run_chunks(params, key)
    assert (cut.lengths == 4).all() and cut.cut.all() and cut.truncated.all()


def test_an_env_without_a_time_limit_is_cut_at_the_default_bound():
    from jaxsrl.workers.device import evaluate as device_evaluate
    env = registry.make("jax:tests.jax_endless:make")
    assert device_evaluate.time_limit(env) is None
    assert device_evaluate.time_limit(registry.make("jax:tests.jax_cartpole:make")) == 500

    def act(params, obs, carry, rng):  # noqa: ARG001
        return jax.numpy.ones(obs.shape[0], jax.numpy.int32), carry, {}

    evaluation = device_evaluate.make_evaluation(env, act, 3)
    assert evaluation.max_steps == device_evaluate.DEFAULT_MAX_STEPS
    out = evaluation.run_chunks(None, jax.random.PRNGKey(0))
    assert (out.lengths == device_evaluate.DEFAULT_MAX_STEPS).all()
    assert out.truncated.all() and out.cut.all()
    assert (out.returns == device_evaluate.DEFAULT_MAX_STEPS).all()


def test_host_trace_gives_the_compiled_loops_episodes_and_their_states(evaluated):
    from jaxsrl.workers.device.evaluate import trace
    env, act, params, evaluation, key, (returns, lengths) = evaluated
    outcome, states = trace(evaluation, params, key)
    t_returns, t_lengths = outcome.returns, outcome.lengths
    np.testing.assert_array_equal(t_lengths, lengths)
    np.testing.assert_allclose(t_returns, returns, rtol=0, atol=0)
    assert len(states) == int(lengths.max()) + 1  # the reset, then one per step
    assert states[0].obs.shape == (E, 4)


def test_bad_sizes_are_named():
    pytest.importorskip("gymnax")
    from jaxsrl.workers.device.evaluate import make_evaluation
    env = registry.make("gymnax:CartPole-v1")
    with pytest.raises(ValueError, match="episodes=0"):
        make_evaluation(env, None, 0)
    with pytest.raises(ValueError, match="max_steps=0"):
        make_evaluation(env, None, 1, max_steps=0)
    with pytest.raises(ValueError, match="chunk_steps=0"):
        make_evaluation(env, None, 1, chunk_steps=0)


@pytest.mark.parametrize("env_id", ["brax:ant", "jaxmarl:MPE_simple_spread_v3",
                                    "gymnax:DeepSea-bsuite"])
def test_a_video_of_an_env_that_cannot_be_drawn_is_a_one_line_error(env_id):
    from jaxsrl.tools.device_video import frame_renderer
    env = None
    if env_id.startswith("gymnax:"):  # gymnax's Visualizer draws no bsuite DeepSea
        pytest.importorskip("gymnax")
        env = registry.make(env_id)
    with pytest.raises(ValueError, match="cannot record a video") as info:
        frame_renderer(env, env_id)
    assert "\n" not in str(info.value) and env_id in str(info.value)

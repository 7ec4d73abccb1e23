"""Ape-X DQN (agents/dqn.py): the learner and actor maths against NumPy, plus a tiny
MDP that ``learn`` must solve."""

import dataclasses

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents import dqn, encoders
from agents.q_network import QNetwork, dueling_combine
from agents.transitions import n_step_transitions
from jaxsrl.core.agent import EnvSpec, ReplayBatch, ReplaySpec
from jaxsrl.streams.carry import CarryCodec
from test_transitions import random_traj  # tests/unit/test_transitions.py

DICT_OBS = gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(-1, 1, (2,), np.float32),
                                  "b": gymnasium.spaces.Box(-1, 1, (2, 2), np.float32)})
BOX_OBS = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
ACTIONS = gymnasium.spaces.Discrete(3, start=1)  # a non-zero start exercises the offset
SMALL = dqn.DQNConfig(hidden_sizes=(16, 8))


def _obs(space, lead, rng):
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: _obs(s, lead, rng) for k, s in space.spaces.items()}
    return rng.normal(size=lead + space.shape).astype(np.float32)


def _net(config, spec):
    """The network ``make`` builds, for computing Q values outside the agent."""
    return QNetwork(encoders.observation_layout(spec.observation_space), int(spec.action_space.n),
                    config.hidden_sizes, config.activation, config.dueling)


def _batch(spec, B=32, seed=0):
    rng = np.random.default_rng(seed)
    items = {"obs": _obs(spec.observation_space, (B,), rng),
             "action": rng.integers(1, 4, B).astype(np.int32),
             "reward": rng.normal(size=B).astype(np.float32),
             "discount": np.where(rng.random(B) < 0.3, 0.0, 0.9**3).astype(np.float32),
             "next_obs": _obs(spec.observation_space, (B,), rng),
             "policy_version": np.zeros(B, np.int32)}
    return ReplayBatch(items, rng.uniform(0.1, 1.0, B).astype(np.float32))


def _huber(x, delta):
    return np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))


def test_dueling_combination_hand_computed():
    np.testing.assert_allclose(dueling_combine(jnp.array([1.0]), jnp.array([[1.0, 2.0, 6.0]])),
                               [[1 + 1 - 3, 1 + 2 - 3, 1 + 6 - 3]])
    spec = EnvSpec(DICT_OBS, ACTIONS)
    net = _net(SMALL, spec)
    obs = _obs(DICT_OBS, (5,), np.random.default_rng(0))
    variables = net.init(jax.random.PRNGKey(0), obs)
    value, adv = net.apply(variables, obs, method="streams")
    value, adv = np.asarray(value), np.asarray(adv)
    q = np.asarray(net.apply(variables, obs))
    np.testing.assert_allclose(q, value[:, None] + adv - adv.mean(-1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("obs_space", [DICT_OBS, BOX_OBS], ids=["dict", "box"])
def test_target_loss_and_priorities_match_numpy(double, obs_space):
    """Double-Q (or max) target, weighted Huber loss and |td| priorities, from the
    network's own Q values recomputed here and combined in NumPy."""
    config = dataclasses.replace(SMALL, double=double, huber_delta=0.7)  # both branches used
    spec = EnvSpec(obs_space, ACTIONS)
    fns = dqn.make(config, spec, 10)
    state = fns.init(jax.random.PRNGKey(0))
    state = state._replace(target_params=fns.init(jax.random.PRNGKey(1)).params)  # != online
    batch = _batch(spec)
    _, metrics, priorities = jax.jit(fns.learn)(state, batch, jax.random.PRNGKey(2))

    net, it = _net(config, spec), batch.items
    q = np.asarray(net.apply(state.params, it["obs"]))
    q_next_online = np.asarray(net.apply(state.params, it["next_obs"]))
    q_next_target = np.asarray(net.apply(state.target_params, it["next_obs"]))
    a, rows = it["action"] - 1, np.arange(len(it["action"]))
    if double:
        bootstrap = q_next_target[rows, q_next_online.argmax(-1)]
    else:
        bootstrap = q_next_target.max(-1)
    td = it["reward"] + it["discount"] * bootstrap - q[rows, a]
    assert np.abs(td).max() > 0.7 > np.abs(td).min()  # both Huber branches are used
    np.testing.assert_allclose(metrics["loss"], np.mean(batch.weights * _huber(td, 0.7)), rtol=1e-5)
    np.testing.assert_allclose(priorities, np.abs(td) + 1e-6, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["q_mean"], q[rows, a].mean(), rtol=1e-5, atol=1e-6)
    assert priorities.dtype == jnp.float32 and priorities.shape == (32,)


def test_double_and_max_targets_differ():
    """The fixture above tests something: with unequal networks the two targets disagree."""
    spec = EnvSpec(BOX_OBS, ACTIONS)
    fns = {d: dqn.make(dataclasses.replace(SMALL, double=d), spec, 10) for d in (True, False)}
    state = fns[True].init(jax.random.PRNGKey(0))
    state = state._replace(target_params=fns[True].init(jax.random.PRNGKey(1)).params)
    batch = _batch(spec)
    p = {d: np.asarray(jax.jit(f.learn)(state, batch, jax.random.PRNGKey(2))[2]) for d, f in fns.items()}
    assert np.abs(p[True] - p[False]).max() > 1e-3


@pytest.mark.parametrize("period, tau", [(3, 1.0), (2, 0.25)])
def test_target_moves_exactly_every_period(period, tau):
    spec = EnvSpec(BOX_OBS, ACTIONS)
    fns = dqn.make(dataclasses.replace(SMALL, target_update_period=period, tau=tau,
                                       learning_rate=1e-2), spec, 10)
    learn = jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    expected = state.target_params
    leaves = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])
    for k in range(1, 3 * period + 1):
        state, metrics, _ = learn(state, _batch(spec, seed=k), jax.random.PRNGKey(k))
        if k % period == 0:
            expected = jax.tree.map(lambda o, t: tau * o + (1 - tau) * t, state.params, expected)
        np.testing.assert_allclose(leaves(state.target_params), leaves(expected), rtol=1e-6, atol=1e-7)
        moved_fully = k % period == 0 and tau == 1.0
        assert np.allclose(leaves(state.params), leaves(state.target_params)) == moved_fully
        assert int(state.update_step) == k and float(metrics["target_updates"]) == k // period


def _ladder_act(config, n, rank, seed=0, deterministic=False):
    spec = EnvSpec(BOX_OBS, ACTIONS)
    fns = dqn.make(config, spec, 10)
    params = fns.init(jax.random.PRNGKey(0)).params
    obs = np.tile(np.array([[0.3, -0.2, 0.5]], np.float32), (n, 1))  # one state: one greedy action
    greedy = int(np.argmax(np.asarray(_net(config, spec).apply(params, obs[:1]))[0])) + 1
    act = jax.jit(fns.act, static_argnames="deterministic")
    action, carry, extras = act(params, obs, {"explore_rank": jnp.asarray(rank, jnp.float32)},
                                jax.random.PRNGKey(seed), deterministic=deterministic)
    return np.asarray(action), np.asarray(carry["explore_rank"]), np.asarray(extras["logp"]), greedy


@pytest.mark.parametrize("u", [0.05, 0.5, 1.0])
def test_greedy_frequency_matches_the_ladder_rate(u):
    """With rank u fixed, P(greedy) = 1 - eps + eps / |A|, eps = 0.4^(1 + 7 u) (Ape-X)."""
    config = dataclasses.replace(SMALL, epsilon=0.9, epsilon_alpha=2.0)  # large eps: a sharp test
    n = 40_000
    action, rank, logp, greedy = _ladder_act(config, n, np.full(n, u))
    eps = 0.9 ** (1 + 2.0 * u)
    p_greedy = 1 - eps + eps / 3
    assert abs((action == greedy).mean() - p_greedy) < 4 * np.sqrt(p_greedy * (1 - p_greedy) / n)
    assert set(np.unique(action)) == {1, 2, 3}  # every action of Discrete(3, start=1) occurs
    np.testing.assert_allclose(rank, u)  # kept
    np.testing.assert_allclose(logp, np.log(np.where(action == greedy, p_greedy, eps / 3)), rtol=1e-5)


def test_ranks_drawn_only_for_zero_rows_and_uniform():
    n = 20_000
    rank = np.where(np.arange(n) % 2 == 0, 0.0, 0.25)
    _, new, _, _ = _ladder_act(SMALL, n, rank)
    np.testing.assert_array_equal(new[1::2], 0.25)
    drawn = new[::2]
    assert drawn.min() > 0 and drawn.max() <= 1
    # Uniform(0, 1]: mean 1/2, deciles 1/10 each (fixed seed, generous bounds).
    assert abs(drawn.mean() - 0.5) < 0.01
    np.testing.assert_allclose(np.histogram(drawn, bins=10, range=(0, 1))[0] / drawn.size, 0.1, atol=0.01)
    _, again, _, _ = _ladder_act(SMALL, n, rank, seed=1)
    assert not np.allclose(again[::2], drawn)  # a fresh draw per call for zero rows


def test_deterministic_act_is_greedy_and_carry_is_zero():
    action, rank, logp, greedy = _ladder_act(SMALL, 64, np.zeros(64), deterministic=True)
    assert (action == greedy).all() and (logp == 0).all() and (rank > 0).all()
    fns = dqn.make(SMALL, EnvSpec(BOX_OBS, ACTIONS), 10)
    carry = fns.initial_carry(5)
    assert carry["explore_rank"].shape == (5,) and carry["explore_rank"].dtype == jnp.float32
    CarryCodec(fns.initial_carry)  # raises unless the initial carry is all zeros


def test_learn_solves_a_two_state_mdp():
    """s0 --a0, r 0--> s1, s0 --a1, r 1--> end, s1 --a0, r 2--> end, s1 --a1, r 0--> s0;
    gamma 0.9: Q*(s0) = (1.8, 1), Q*(s1) = (2, 1.62). Random importance weights."""
    spec = EnvSpec(gymnasium.spaces.Box(0, 1, (2,), np.float32), gymnasium.spaces.Discrete(2))
    config = dataclasses.replace(SMALL, hidden_sizes=(32, 32), learning_rate=3e-3,
                                 target_update_period=20, gamma=0.9)
    fns = dqn.make(config, spec, 3000)
    eye = np.eye(2, dtype=np.float32)
    reps = 8
    items = {"obs": np.repeat(eye[[0, 0, 1, 1]], reps, 0),
             "action": np.repeat(np.array([0, 1, 0, 1], np.int32), reps),
             "reward": np.repeat(np.array([0, 1, 2, 0], np.float32), reps),
             "discount": np.repeat(np.array([0.9, 0, 0, 0.9], np.float32), reps),
             "next_obs": np.repeat(eye[[1, 1, 0, 0]], reps, 0),
             "policy_version": np.zeros(4 * reps, np.int32)}
    weights = np.random.default_rng(0).uniform(0.3, 1.0, 4 * reps).astype(np.float32)
    batch = ReplayBatch(items, weights)

    def body(state, key):
        state, metrics, _ = fns.learn(state, batch, key)
        return state, metrics["loss"]

    state, _ = jax.jit(lambda s, k: jax.lax.scan(body, s, jax.random.split(k, 3000)))(
        fns.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    q = np.asarray(_net(config, spec).apply(state.params, eye))
    np.testing.assert_allclose(q, [[1.8, 1.0], [2.0, 1.62]], atol=0.05)


def test_to_items_is_n_step_transitions_and_replay_spec():
    config = dataclasses.replace(SMALL, n_step=4, gamma=0.8, capacity=5000, batch_size=64)
    fns = dqn.make(config, EnvSpec(BOX_OBS, ACTIONS), 10)
    traj = random_traj()
    got, expected = fns.to_items(traj), n_step_transitions(traj, 4, 0.8)
    jax.tree.map(np.testing.assert_array_equal, got, expected)
    assert fns.replay == ReplaySpec(5000, 64, 32.0, 1000, True, 0.6, 0.4)
    assert dqn.DQNConfig().replay_spec().capacity == dqn.DQNConfig().capacity


def test_registered_and_configurable():
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415 (the run config pulls in the registry)
    assert agents.AGENTS["dqn"] is dqn.AGENT
    cfg = load_config(["--agent=dqn", "--env=CartPole-v1", "--dqn.n_step=5"])
    assert cfg.dqn.n_step == 5 and cfg.dqn.dueling


def test_image_observations_get_the_nature_cnn():
    image = gymnasium.spaces.Box(0, 255, (36, 36, 2), np.uint8)
    fns = dqn.make(SMALL, EnvSpec(image, ACTIONS), 10)
    state = fns.init(jax.random.PRNGKey(0))
    assert "encoder" in state.params["params"]
    obs = np.random.default_rng(0).integers(0, 255, (4, 36, 36, 2), dtype=np.uint8)
    action, _, extras = fns.act(state.params, obs, fns.initial_carry(4), jax.random.PRNGKey(1))
    assert action.shape == (4,) and action.dtype == jnp.int32 and extras["logp"].shape == (4,)


@pytest.mark.parametrize("space", [gymnasium.spaces.Box(-1, 1, (2,), np.float32),
                                   gymnasium.spaces.MultiDiscrete([2, 3])])
def test_non_discrete_actions_raise(space):
    with pytest.raises(ValueError, match="Discrete action space"):
        dqn.make(SMALL, EnvSpec(BOX_OBS, space), 10)


@pytest.mark.parametrize("field, value", [("n_step", 0), ("tau", 0.0), ("epsilon", 1.5),
                                          ("target_update_period", 0), ("activation", "nope")])
def test_bad_config_raises(field, value):
    with pytest.raises(ValueError, match=f"dqn.{field}="):
        dqn.make(dataclasses.replace(SMALL, **{field: value}), EnvSpec(BOX_OBS, ACTIONS), 10)

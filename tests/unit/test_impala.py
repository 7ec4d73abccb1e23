"""IMPALA (agents/impala.py): the learner as pure functions, plus one tiny run."""

import functools
import json
import os

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import AGENTS, impala, networks
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.experiment.config import load_config

BOX_OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
DICT_OBS = gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(-1, 1, (2,), np.float32),
                                  "b": gymnasium.spaces.Box(-1, 1, (2, 2), np.float32)})
SPACES = {
    "discrete": (BOX_OBS, gymnasium.spaces.Discrete(2)),
    "multi_discrete_dict_obs": (DICT_OBS, gymnasium.spaces.MultiDiscrete([3, 2, 4])),
    "box": (BOX_OBS, gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)),
}
SMALL = impala.IMPALAConfig(hidden_sizes=(16,), num_minibatches=2)


def _obs(space, lead, rng):
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: _obs(s, lead, rng) for k, s in space.spaces.items()}
    return rng.normal(size=lead + space.shape).astype(np.float32)


def _trajectory(fns, state, spec, B=4, T=5, seed=0, behaviour_shift=0.0):
    """Random on-policy segments (actions from ``act``), with both kinds of episode end."""
    rng = np.random.default_rng(seed)
    obs = _obs(spec.observation_space, (B, T + 1), rng)
    flat_obs = jax.tree.map(lambda x: x[:, :T].reshape((B * T,) + x.shape[2:]), obs)
    action, _, extras = jax.jit(fns.act)(state.params, flat_obs, None, jax.random.PRNGKey(seed))
    action = np.asarray(action).reshape((B, T) + np.asarray(action).shape[1:])
    logp = np.asarray(extras["logp"]).reshape(B, T) - behaviour_shift
    terminated = np.zeros((B, T), bool)
    truncated = np.zeros((B, T), bool)
    terminated[0, 1], truncated[1, 2] = True, True
    return Trajectory(obs=obs, action=action, reward=rng.normal(size=(B, T)).astype(np.float32),
                      terminated=terminated, truncated=truncated,
                      final_obs=_obs(spec.observation_space, (B, T), rng),
                      behaviour_logp=logp.astype(np.float32),
                      policy_version=np.zeros((B, T), np.int32))


@pytest.fixture(scope="module")
def discrete():
    """IMPALA on a Box -> Discrete interface, with ``learn`` jitted once for the module."""
    spec = EnvSpec(*SPACES["discrete"])
    fns = impala.make(SMALL, spec, num_updates=10)
    return spec, fns, fns.init(jax.random.PRNGKey(0)), jax.jit(fns.learn)


@pytest.mark.parametrize("kind", sorted(SPACES))
def test_act_on_every_supported_space(kind):
    spec = EnvSpec(*SPACES[kind])
    fns = impala.make(SMALL, spec, num_updates=10)
    state = fns.init(jax.random.PRNGKey(0))
    obs = _obs(spec.observation_space, (7,), np.random.default_rng(0))
    action, carry, extras = jax.jit(fns.act)(state.params, obs, None, jax.random.PRNGKey(1))
    assert carry is None and fns.initial_carry(7) is None
    assert action.shape == (7,) + spec.action_space.shape and extras["logp"].shape == (7,)
    assert spec.action_space.contains(np.asarray(action[0], spec.action_space.dtype)) or kind == "box"
    greedy_act = jax.jit(functools.partial(fns.act, deterministic=True))
    greedy, _, _ = greedy_act(state.params, obs, None, jax.random.PRNGKey(2))
    again, _, _ = greedy_act(state.params, obs, None, jax.random.PRNGKey(3))
    np.testing.assert_array_equal(greedy, again)  # deterministic: the mode, whatever the key


def _check_learn(fns, state, learn, traj):
    new_state, metrics = learn(state, traj, jax.random.PRNGKey(4))
    assert int(new_state.update_step) == 1
    for key in ("loss/total", "loss/policy", "loss/value", "loss/entropy", "rho_mean",
                "rho_clip_fraction", "grad_norm", "learning_rate", "vtrace_target_mean"):
        assert np.isfinite(float(metrics[key])), key
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, new_state.params)
    assert any(jax.tree.leaves(changed))
    return metrics


def test_learn_updates_parameters(discrete):
    spec, fns, state, learn = discrete
    metrics = _check_learn(fns, state, learn, _trajectory(fns, state, spec))
    # On-policy data: ratios are 1 in the first minibatch (the second one has moved on).
    assert 0.5 < float(metrics["rho_mean"]) < 1.5


def test_learn_with_dict_observations_and_multi_discrete_actions():
    """The hide-and-seek interface: Dict observations, MultiDiscrete actions."""
    spec = EnvSpec(*SPACES["multi_discrete_dict_obs"])
    fns = impala.make(impala.IMPALAConfig(hidden_sizes=(8,), num_minibatches=1), spec, 10)
    state = fns.init(jax.random.PRNGKey(0))
    _check_learn(fns, state, jax.jit(fns.learn), _trajectory(fns, state, spec, B=2, T=3))


def test_loss_matches_hand_computation():
    logp = jnp.array([-0.5, -1.0, -2.0])
    adv = jnp.array([1.0, -2.0, 0.5])
    value = jnp.array([0.0, 1.0, 2.0])
    vs = jnp.array([1.0, 1.0, 0.0])
    ent = jnp.array([0.6, 0.4, 0.5])
    out = impala.impala_loss(logp, adv, value, vs, ent, vf_coef=0.5, ent_coef=0.01)
    policy = -np.mean([-0.5, 2.0, -1.0])
    valuel = 0.5 * np.mean([1.0, 0.0, 4.0])
    np.testing.assert_allclose(float(out.policy), policy, rtol=1e-6)
    np.testing.assert_allclose(float(out.value), valuel, rtol=1e-6)
    np.testing.assert_allclose(float(out.total), policy + 0.5 * valuel - 0.01 * 0.5, rtol=1e-6)
    # Gradients only through logp and value, never through the targets.
    g = jax.grad(lambda a, t: impala.impala_loss(logp, a, value, t, ent, vf_coef=0.5,
                                                  ent_coef=0.01).total, argnums=(0, 1))(adv, vs)
    assert all(float(jnp.abs(x).sum()) == 0.0 for x in g)


def test_stale_behaviour_policy_is_importance_weighted_and_clipped(discrete):
    """Actions far likelier now than when they were taken: ratios > 1 get clipped."""
    spec, fns, state, learn = discrete
    traj = _trajectory(fns, state, spec, behaviour_shift=1.0)  # mu(a) = pi(a) / e
    _, metrics = learn(state, traj, jax.random.PRNGKey(1))
    assert float(metrics["rho_clip_fraction"]) > 0.9
    assert float(metrics["rho_mean"]) > 2.0


def test_minibatches_hold_whole_segments():
    assert impala.minibatches_for(64, 16) == 16
    assert impala.minibatches_for(8, 16) == 8  # fewer segments than minibatches
    assert impala.minibatches_for(12, 8) == 6  # largest divisor below the wish
    assert impala.minibatches_for(7, 4) == 1
    spec = EnvSpec(*SPACES["discrete"])
    fns = impala.make(impala.IMPALAConfig(hidden_sizes=(8,), num_minibatches=3), spec, 1)
    state = fns.init(jax.random.PRNGKey(0))
    traj = _trajectory(fns, state, spec, B=4)  # 4 % 3 != 0: two minibatches of two segments
    out, _ = jax.eval_shape(fns.learn, state, traj, jax.random.PRNGKey(0))
    assert out.update_step.shape == ()


def test_learning_rate_anneal_counts_the_optimiser_steps_taken():
    """B=6 segments, num_minibatches=4 -> 3 minibatches per learn. Over num_updates=2
    learn calls the linear anneal spans 2 * 3 = 6 optimiser steps: the metric is the mean
    of lr0 * (1 - k / 6) over the steps of each call, and a third call (past the plan)
    takes steps of size 0 and leaves the parameters where they were. Catches a horizon
    or metric computed from the configured num_minibatches (4 -> 8 steps)."""
    spec = EnvSpec(*SPACES["discrete"])
    lr0 = 1e-2
    cfg = impala.IMPALAConfig(hidden_sizes=(8,), num_minibatches=4, learning_rate=lr0)
    fns = impala.make(cfg, spec, num_updates=2)
    learn = jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    traj = _trajectory(fns, state, spec, B=6)
    expected = [lr0 * np.mean([1 - k / 6 for k in steps]) for steps in ((0, 1, 2), (3, 4, 5))]
    for i, want in enumerate(expected):
        state, metrics = learn(state, traj, jax.random.PRNGKey(i))
        np.testing.assert_allclose(float(metrics["learning_rate"]), want, rtol=1e-6)
    after, metrics = learn(state, traj, jax.random.PRNGKey(9))
    assert abs(float(metrics["learning_rate"])) < 1e-6 * lr0  # 0, up to float32 rounding
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-7), after.params,
                 state.params)


def _with_idle_row(traj: Trajectory, seed: int) -> Trajectory:
    """``traj`` plus one last row of random garbage marked idle (``valid`` False)."""
    rng = np.random.default_rng(seed)

    def junk(x):
        x = np.asarray(x)
        if x.dtype == bool:
            row = rng.integers(0, 2, x.shape[1:]).astype(bool)
        elif np.issubdtype(x.dtype, np.integer):
            row = rng.integers(0, 2, x.shape[1:]).astype(x.dtype)
        else:
            row = (10 * rng.normal(size=x.shape[1:])).astype(x.dtype)
        return np.concatenate([x, row[None]])

    B, T = np.shape(traj.reward)
    valid = np.ones((B + 1, T), bool)
    valid[B] = False
    fields = {k: jax.tree.map(junk, v) for k, v in traj._asdict().items()
              if k not in ("carry", "valid")}
    return Trajectory(**fields, valid=valid)


def test_an_all_idle_row_changes_nothing():
    """An idle row (an agent absent from the episode) holding arbitrary values must not
    move the update: with one minibatch, learn(B rows + idle row) equals learn(B rows)
    (masked means = means over the B valid rows), and two different garbage contents
    give bitwise the same result. Catches any loss, target or metric term that reads
    the idle row (e.g. dropping the mask from the value loss or from V-trace)."""
    spec = EnvSpec(*SPACES["discrete"])
    cfg = impala.IMPALAConfig(hidden_sizes=(16,), num_minibatches=1, num_epochs=2,
                              normalize_advantages=True, learning_rate=1e-2)
    fns = impala.make(cfg, spec, num_updates=10)
    learn = jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    traj = _trajectory(fns, state, spec, B=4, T=5)
    ref, ref_metrics = learn(state, traj, jax.random.PRNGKey(3))
    a, a_metrics = learn(state, _with_idle_row(traj, 1), jax.random.PRNGKey(3))
    b, b_metrics = learn(state, _with_idle_row(traj, 2), jax.random.PRNGKey(3))
    jax.tree.map(np.testing.assert_array_equal, a.params, b.params)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7),
                 a.params, ref.params)
    for key in ("loss/total", "loss/value", "rho_mean", "vtrace_target_mean", "approx_kl"):
        np.testing.assert_allclose(float(a_metrics[key]), float(ref_metrics[key]),
                                   rtol=1e-5, atol=1e-7, err_msg=key)
        assert float(a_metrics[key]) == float(b_metrics[key]), key
    np.testing.assert_allclose(float(a_metrics["valid_fraction"]), 4 / 5, rtol=1e-6)


def test_learns_a_contextual_bandit():
    """Reward 1 for the action equal to sign(obs[0]); every step ends its episode.
    A few dozen on-policy updates must make the greedy policy right almost always."""
    spec = EnvSpec(BOX_OBS, gymnasium.spaces.Discrete(2))
    cfg = impala.IMPALAConfig(hidden_sizes=(16,), learning_rate=1e-2, num_minibatches=2,
                              anneal_lr=False)
    fns = impala.make(cfg, spec, num_updates=40)
    act, learn = jax.jit(fns.act), jax.jit(fns.learn)
    state = fns.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    B, T = 8, 4
    for i in range(40):
        obs = rng.uniform(-1, 1, size=(B, T + 1, 3)).astype(np.float32)
        a, _, ex = act(state.params, obs[:, :T].reshape(-1, 3), None, jax.random.PRNGKey(i))
        a = np.asarray(a).reshape(B, T)
        reward = (a == (obs[:, :T, 0] > 0)).astype(np.float32)
        traj = Trajectory(obs, a, reward, np.ones((B, T), bool), np.zeros((B, T), bool),
                          np.zeros((B, T, 3), np.float32),
                          np.asarray(ex["logp"]).reshape(B, T), np.zeros((B, T), np.int32))
        state, _ = learn(state, traj, jax.random.PRNGKey(1000 + i))
    test = rng.uniform(-1, 1, size=(256, 3)).astype(np.float32)
    greedy, _, _ = jax.jit(functools.partial(fns.act, deterministic=True))(
        state.params, test, None, jax.random.PRNGKey(0))
    assert np.mean(np.asarray(greedy) == (test[:, 0] > 0)) > 0.9


def test_registered_and_configurable_from_flags():
    assert AGENTS["impala"] is impala.AGENT
    cfg = load_config(["--agent=impala", "--env=CartPole-v1", "--impala.learning_rate=3e-4",
                       "--impala.clip_rho=2.0", "--impala.hidden_sizes", "8", "8"])
    assert cfg.agent_config() == impala.IMPALAConfig(learning_rate=3e-4, clip_rho=2.0,
                                                     hidden_sizes=(8, 8))
    assert networks.head_for_space(gymnasium.spaces.Discrete(2)).kind == "categorical"


def test_trains_cartpole_through_the_dataflow(tmp_path):
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path / "run")
    cfg = load_config(["--agent=impala", "--env=CartPole-v1", "--num_actors=2",
                       "--envs_per_actor=8", "--segment_length=16", "--batch_segments=8",
                       "--log_interval_s=0.5", "--total_env_steps=3000", f"--logdir={logdir}",
                       "--impala.hidden_sizes", "16", "16"])
    record = train(cfg)
    assert record["env_steps"] >= 3000 and record["policy_version"] >= 2
    assert "rho_mean" in record and np.isfinite(record["loss/total"])
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))
    with open(os.path.join(logdir, "config.json")) as f:
        assert json.load(f)["impala"]["hidden_sizes"] == [16, 16]

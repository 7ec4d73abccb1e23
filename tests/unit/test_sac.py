"""SAC (agents/sac.py, agents/sac_loss.py): the critic target against a NumPy forward
pass of the same parameters, Polyak averaging, the delayed actor update, the sign of
the temperature step, the action bounds, and a 1-D continuous bandit it must solve."""

import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents import AGENTS, get_agent, sac
from agents import sac_loss
from agents.transitions import n_step_transitions
from jaxsrl.core.agent import EnvSpec, ReplayBatch, Trajectory

HIDDEN = (16, 16)
OBS = gymnasium.spaces.Box(-1, 1, (3,))
ACT = gymnasium.spaces.Box(np.float32([-2, 0]), np.float32([2, 5]))  # scale [2, 2.5], bias [0, 2.5]
SCALE, BIAS = np.array([2.0, 2.5]), np.array([0.0, 2.5])
B = 8


_BUILT = {}


def build(obs_space=OBS, act_space=ACT, **kw):
    """SAC's functions for a config, with learn jitted; built once per config."""
    kw.setdefault("hidden_sizes", HIDDEN)
    key = (repr(obs_space), repr(act_space), tuple(sorted(kw.items())))
    if key not in _BUILT:
        fns = sac.make(sac.SACConfig(**kw), EnvSpec(obs_space, act_space), 100)
        _BUILT[key] = fns._replace(learn=jax.jit(fns.learn))
    return _BUILT[key]


def np_mlp(variables, x):
    """ReLU MLP forward pass in float64 from a flax ``{"params": {"Dense_i": ...}}`` tree."""
    layers = variables["params"]
    for i in range(len(layers)):
        x = x @ np.asarray(layers[f"Dense_{i}"]["kernel"], np.float64) + np.asarray(layers[f"Dense_{i}"]["bias"])
        x = np.maximum(x, 0.0) if i < len(layers) - 1 else x
    return x


def np_policy(actor_vars, x):
    """CleanRL's Actor: mean and log_std heads, log_std = -5 + 3.5 (tanh(raw) + 1)."""
    out = np_mlp(actor_vars, x)
    return out[:, :2], -5.0 + 3.5 * (np.tanh(out[:, 2:]) + 1.0)


def np_q(critic_vars, x, a):
    """Twin critics on concat(obs, action) -> [2, B]."""
    return np.stack([np_mlp(jax.tree.map(lambda l: l[i], critic_vars), np.concatenate([x, a], -1))[:, 0]
                     for i in range(2)])


def random_items(seed=0, n=B):
    rng = np.random.default_rng(seed)
    f = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)
    action = (BIAS + SCALE * rng.uniform(-0.9, 0.9, (n, 2))).astype(np.float32)
    return {"obs": f(n, 3), "action": action, "reward": rng.normal(size=n).astype(np.float32),
            "discount": rng.choice([0.0, 0.99, 0.99**3], n).astype(np.float32), "next_obs": f(n, 3),
            "policy_version": np.zeros(n, np.int32)}


def perturbed_target(state, seed=1):
    """Target critics that differ from the critics (they start equal)."""
    leaves, tree = jax.tree.flatten(state.target_critic_params)
    rng = np.random.default_rng(seed)
    return state._replace(target_critic_params=jax.tree.unflatten(
        tree, [x + 0.1 * rng.normal(size=x.shape).astype(np.float32) for x in leaves]))


def np_soft_target(state, items, rng, alpha):
    """The soft Bellman target ``[B]`` (float64) of ``learn(state, batch, rng)`` at
    temperature ``alpha``: ``a' ~ pi(.|s')`` with the key learn documents
    (``k_target = split(rng)[0]``)."""
    eps = np.asarray(jax.random.normal(jax.random.split(rng)[0], (len(items["reward"]), 2)),
                     np.float64)
    mean, log_std = np_policy(state.params["actor"], items["next_obs"])
    u = mean + np.exp(log_std) * eps
    next_a = SCALE * np.tanh(u) + BIAS
    next_logp = (-0.5 * eps**2 - log_std - 0.5 * math.log(2 * math.pi)
                 - np.log(1 - np.tanh(u) ** 2) - np.log(SCALE)).sum(-1)
    q_targ = np_q(state.target_critic_params, items["next_obs"], next_a)
    return items["reward"] + items["discount"] * (np.minimum(q_targ[0], q_targ[1]) - alpha * next_logp)


def test_critic_target_and_loss_match_numpy():
    fns = build()
    state = perturbed_target(fns.init(jax.random.PRNGKey(0)))._replace(log_alpha=jnp.float32(math.log(0.37)))
    items = random_items()
    weights = np.random.default_rng(2).uniform(0.2, 2.0, B).astype(np.float32)
    rng = jax.random.PRNGKey(5)
    _, metrics, priorities = fns.learn(state, ReplayBatch(items, weights), rng)
    y = np_soft_target(state, items, rng, 0.37)
    td = np_q(state.critic_params, items["obs"], items["action"]) - y
    np.testing.assert_allclose(np.asarray(priorities), np.abs(td).mean(0) + 1e-6, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["target_mean"]), y.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["qf_loss"]), (weights * td**2).mean(1).sum(), rtol=1e-4)
    assert priorities.shape == (B,) and priorities.dtype == jnp.float32


def test_zero_weights_leave_the_critics_unchanged():
    fns = build()
    state = fns.init(jax.random.PRNGKey(0))
    new, _, _ = fns.learn(state, ReplayBatch(random_items(), np.zeros(B, np.float32)), jax.random.PRNGKey(1))
    for a, b in zip(jax.tree.leaves(new.critic_params), jax.tree.leaves(state.critic_params)):
        np.testing.assert_array_equal(a, b)


def test_polyak_update_is_exact_and_every_target_network_frequency():
    fns = build(tau=0.3, target_network_frequency=3)
    state = perturbed_target(fns.init(jax.random.PRNGKey(0)))
    learn, batch = fns.learn, ReplayBatch(random_items(), np.ones(B, np.float32))
    for step in range(6):
        new, metrics, _ = learn(state, batch, jax.random.PRNGKey(step))
        assert float(metrics["target_updated"]) == (step % 3 == 0)
        for t_new, t_old, c_new in zip(*(jax.tree.leaves(s) for s in (
                new.target_critic_params, state.target_critic_params, new.critic_params))):
            if step % 3 == 0:
                expected = 0.3 * np.asarray(c_new, np.float64) + 0.7 * np.asarray(t_old, np.float64)
                np.testing.assert_allclose(np.asarray(t_new), expected, rtol=1e-6, atol=1e-7)
            else:
                np.testing.assert_array_equal(t_new, t_old)
        state = new


def test_delayed_actor_update_every_policy_frequency_without_recompiling():
    fns = build(policy_frequency=3)
    state = fns.init(jax.random.PRNGKey(0))
    traces = []

    def counted(s, b, r):
        traces.append(1)  # runs once per trace, not per call
        return fns.learn(s, b, r)

    learn, batch = jax.jit(counted), ReplayBatch(random_items(), np.ones(B, np.float32))
    for step in range(7):
        new, metrics, _ = learn(state, batch, jax.random.PRNGKey(step))
        moved = any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(new.params["actor"]),
                                                             jax.tree.leaves(state.params["actor"])))
        assert moved == (step % 3 == 0) == bool(metrics["actor_updated"])
        assert (float(new.log_alpha) != float(state.log_alpha)) == (step % 3 == 0)
        state = new
    assert len(traces) == 1
    # Steps 0, 3, 6 each run policy_frequency = 3 actor and temperature Adam steps.
    assert int(optax.tree_utils.tree_get(state.actor_opt_state, "count")) == 9
    assert int(optax.tree_utils.tree_get(state.alpha_opt_state, "count")) == 9
    assert int(optax.tree_utils.tree_get(state.critic_opt_state, "count")) == 7
    assert int(state.update_step) == 7


def test_fixed_temperature_without_autotune():
    fns = build(autotune=False, alpha=0.2)
    state = fns.init(jax.random.PRNGKey(0))
    for step in range(2):
        state, metrics, _ = fns.learn(state, ReplayBatch(random_items(), np.ones(B, np.float32)),
                                      jax.random.PRNGKey(step))
    np.testing.assert_allclose(float(metrics["alpha"]), 0.2, rtol=1e-6)
    assert float(metrics["alpha_loss"]) == 0.0


@pytest.mark.parametrize("saved", [{"autotune": False, "alpha": 0.2}, {"autotune": True}])
def test_a_resumed_fixed_alpha_is_the_one_learned_with(saved):
    """``--resume --sac.no_autotune --sac.alpha=0.01``: the checkpoint's ``log_alpha``
    (log 0.2, or a learned one) is not the temperature any more; the resumed agent's
    first ``learn`` targets with 0.01 (the NumPy target at 0.01) and leaves it in the
    state. The resume's own step (``apply_hyperparameters``) runs as the launcher runs it."""
    import types  # noqa: PLC0415

    from jaxsrl.experiment.resume import apply_hyperparameters  # noqa: PLC0415
    old = build(**saved)
    state = old.init(jax.random.PRNGKey(0))
    for step in range(3):  # the run before the checkpoint
        state, _, _ = old.learn(state, ReplayBatch(random_items(step), np.ones(B, np.float32)),
                                jax.random.PRNGKey(step))
    assert not np.isclose(float(jnp.exp(state.log_alpha)), 0.01)
    restored = jax.device_get(state)  # as a checkpoint gives it back
    resumed = build(autotune=False, alpha=0.01)
    restored = apply_hyperparameters(restored, resumed.init(jax.random.PRNGKey(0)), "default",
                                     types.SimpleNamespace(population=0))
    items, rng = random_items(7), jax.random.PRNGKey(9)
    new, metrics, _ = resumed.learn(restored, ReplayBatch(items, np.ones(B, np.float32)), rng)
    np.testing.assert_allclose(float(metrics["target_mean"]),
                               np_soft_target(restored, items, rng, 0.01).mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["alpha"]), 0.01, rtol=1e-6)
    np.testing.assert_allclose(float(jnp.exp(new.log_alpha)), 0.01, rtol=1e-6)


def test_temperature_loss_gradient_sign():
    grad = jax.grad(sac_loss.temperature_loss)
    low_entropy = jnp.full((4,), 2.0)  # entropy -2, below the target -1
    np.testing.assert_allclose(float(grad(jnp.log(0.5), low_entropy, -1.0)), -0.5, rtol=1e-6)
    assert float(grad(0.0, jnp.full((4,), -3.0), -1.0)) > 0  # entropy 3 above target: alpha falls


def test_default_target_entropy_is_minus_action_dims():
    """On a call without actor update, alpha_loss and entropy come from one sample:
    alpha_loss = -alpha (log pi + H_target) = -alpha (H_target - entropy)."""
    fns = build()
    state = fns.init(jax.random.PRNGKey(0))
    batch = ReplayBatch(random_items(), np.ones(B, np.float32))
    state, _, _ = fns.learn(state, batch, jax.random.PRNGKey(0))  # call 0 updates the actor
    _, metrics, _ = fns.learn(state, batch, jax.random.PRNGKey(1))
    assert float(metrics["actor_updated"]) == 0.0
    expected = -float(metrics["alpha"]) * (-2.0 - float(metrics["entropy"]))  # |A| = 2
    np.testing.assert_allclose(float(metrics["alpha_loss"]), expected, rtol=1e-5)


def test_actor_loss_matches_numpy():
    rng = np.random.default_rng(3)
    q_pi, logp = rng.normal(size=(2, 6)).astype(np.float32), rng.normal(size=6).astype(np.float32)
    got = sac_loss.actor_loss(jnp.asarray(q_pi), jnp.asarray(logp), jnp.float32(0.3))
    np.testing.assert_allclose(float(got), np.mean(0.3 * logp - np.minimum(q_pi[0], q_pi[1])), rtol=1e-6)
    # alpha is a constant of the actor loss: no gradient flows into the temperature.
    assert float(jax.grad(sac_loss.actor_loss, argnums=2)(jnp.asarray(q_pi), jnp.asarray(logp), 0.3)) == 0.0


@pytest.mark.parametrize("target_entropy, rises", [(5.0, True), (-50.0, False)])
def test_learn_moves_alpha_towards_the_entropy_target(target_entropy, rises):
    fns = build(target_entropy=target_entropy)
    state = fns.init(jax.random.PRNGKey(0))
    new, metrics, _ = fns.learn(state, ReplayBatch(random_items(), np.ones(B, np.float32)), jax.random.PRNGKey(0))
    assert (float(new.log_alpha) > float(state.log_alpha)) == rises
    assert (float(metrics["alpha"]) > 1.0) == rises


def test_a_resume_without_random_warmup_acts_by_the_policy():
    """A checkpoint saved before the first ``learn`` holds ``warmup`` True; resumed with
    ``--sac.no_random_warmup``, ``act`` samples the policy (as with ``warmup`` False)."""
    restored = build().init(jax.random.PRNGKey(0)).params
    assert bool(restored["warmup"])
    fns, obs, key = build(random_warmup=False), np.zeros((64, 3), np.float32), jax.random.PRNGKey(1)
    action, _, extras = fns.act(restored, obs, None, key)
    policy, _, expected = fns.act({**restored, "warmup": jnp.asarray(False)}, obs, None, key)
    np.testing.assert_array_equal(np.asarray(action), np.asarray(policy))
    np.testing.assert_array_equal(np.asarray(extras["logp"]), np.asarray(expected["logp"]))


def test_act_bounds_warmup_and_deterministic_median():
    fns = build(log_std_min=0.9, log_std_max=1.0)  # wide policy: samples reach both bounds
    state = fns.init(jax.random.PRNGKey(0))
    obs = np.tile(np.float32([[0.3, -0.5, 0.9]]), (20_000, 1))
    uniform, carry, extras = fns.act(state.params, obs, None, jax.random.PRNGKey(1))  # warm-up
    assert carry is None and uniform.dtype == jnp.float32 and uniform.shape == (20_000, 2)
    np.testing.assert_allclose(np.asarray(extras["logp"]), -math.log(4 * 5), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(uniform).mean(0), BIAS, atol=0.05)
    np.testing.assert_allclose(np.asarray(uniform).std(0), 2 * SCALE / math.sqrt(12), rtol=0.02)

    state, _, _ = fns.learn(state, ReplayBatch(random_items(), np.ones(B, np.float32)), jax.random.PRNGKey(2))
    assert not bool(state.params["warmup"])
    out = state.params["actor"]["params"]["Dense_2"]  # output layer: [mean (2) | raw log_std (2)]
    shifted = {**out, "bias": out["bias"].at[:2].add(jnp.float32([0.8, -0.6]))}  # means off 0
    state = state._replace(params={**state.params, "actor": {"params": {
        **state.params["actor"]["params"], "Dense_2": shifted}}})
    action, _, extras = fns.act(state.params, obs, None, jax.random.PRNGKey(3))
    a = np.asarray(action)
    assert np.all(a >= ACT.low) and np.all(a <= ACT.high) and extras["logp"].shape == (20_000,)
    np.testing.assert_allclose(a.min(0), ACT.low, atol=0.05)
    np.testing.assert_allclose(a.max(0), ACT.high, atol=0.05)
    # tanh is monotone, so the deterministic action scale tanh(mean) + bias is the median.
    det, _, _ = fns.act(state.params, obs[:1], None, jax.random.PRNGKey(4), deterministic=True)
    np.testing.assert_allclose(np.asarray(det)[0], np.median(a, 0), atol=0.08)


def test_bandit_policy_moves_to_the_best_action():
    """One state, actions in [-1, 1], reward -(a - 0.6)^2, episodes of one step; items
    from uniform actions. Faster critic and temperature steps than the defaults, so 400
    updates suffice (the greedy action ends at 0.64; entropy keeps it off 0.6)."""
    space = gymnasium.spaces.Box(-1, 1, (1,))
    fns = build(space, space, hidden_sizes=(32, 32), q_lr=3e-3, alpha_lr=1e-2, policy_frequency=1)
    pool = np.random.default_rng(0).uniform(-1, 1, (4096, 1)).astype(np.float32)
    state, learn = fns.init(jax.random.PRNGKey(0)), fns.learn
    obs = np.ones((128, 1), np.float32)  # not zeros: ReLU units fed zeros give no kernel gradients
    greedy = lambda s: float(fns.act(s.params, obs[:1], None, jax.random.PRNGKey(0), deterministic=True)[0][0, 0])
    before = greedy(state)
    for step in range(400):
        a = pool[np.random.default_rng(step).integers(0, 4096, 128)]
        items = {"obs": obs, "action": a, "reward": -(a[:, 0] - 0.6) ** 2, "discount": np.zeros(128, np.float32),
                 "next_obs": obs, "policy_version": np.zeros(128, np.int32)}
        state, metrics, _ = learn(state, ReplayBatch(items, np.ones(128, np.float32)), jax.random.PRNGKey(step))
    after = greedy(state)
    assert abs(before - 0.6) > 0.3
    assert abs(after - 0.6) < 0.1, (before, after, {k: float(v) for k, v in metrics.items()})


def test_to_items_are_n_step_transitions_and_learnable():
    fns = build(n_step=2, gamma=0.9)
    rng = np.random.default_rng(0)
    Bs, T = 2, 4
    traj = Trajectory(
        obs=rng.uniform(-1, 1, (Bs, T + 1, 3)).astype(np.float32),
        action=(BIAS + SCALE * rng.uniform(-1, 1, (Bs, T, 2))).astype(np.float32),
        reward=rng.normal(size=(Bs, T)).astype(np.float32),
        terminated=np.array([[0, 1, 0, 0], [0, 0, 0, 0]], bool),
        truncated=np.zeros((Bs, T), bool), final_obs=np.zeros((Bs, T, 3), np.float32),
        behaviour_logp=np.zeros((Bs, T), np.float32), policy_version=np.zeros((Bs, T), np.int32))
    items, valid = fns.to_items(traj)
    ref, ref_valid = n_step_transitions(traj, n=2, gamma=0.9)
    for key in ref:
        np.testing.assert_array_equal(items[key], ref[key])
    np.testing.assert_array_equal(valid, ref_valid)
    np.testing.assert_allclose(np.asarray(items["discount"])[:4], [0.0, 0.0, 0.81, 0.9], rtol=1e-6)
    _, metrics, prio = fns.learn(fns.init(jax.random.PRNGKey(0)), ReplayBatch(items, np.ones(8, np.float32)),
                                 jax.random.PRNGKey(1))
    assert prio.shape == (8,) and all(np.isfinite(float(v)) for v in metrics.values())


def test_dict_observations_and_registration():
    space = gymnasium.spaces.Dict({"pos": gymnasium.spaces.Box(-1, 1, (2,)), "vel": gymnasium.spaces.Box(-1, 1, (1,))})
    fns = build(space)
    state = fns.init(jax.random.PRNGKey(0))
    action, _, extras = fns.act(state.params, {"pos": np.zeros((5, 2)), "vel": np.zeros((5, 1))}, None,
                                jax.random.PRNGKey(1))
    assert action.shape == (5, 2) and extras["logp"].dtype == jnp.float32
    assert AGENTS["sac"] is sac.AGENT and get_agent("sac").config_cls is sac.SACConfig
    spec = build().replay
    assert (spec.capacity, spec.batch_size, spec.replay_ratio, spec.min_fill, spec.prioritised) == (
        1_000_000, 256, 256.0, 5_000, False)
    assert fns.initial_carry(4) is None


@pytest.mark.parametrize("obs_space, act_space, match", [
    (OBS, gymnasium.spaces.Discrete(3), "Box action space, got Discrete"),
    (OBS, gymnasium.spaces.Box(-np.inf, np.inf, (2,)), "finite Box bounds"),
    (gymnasium.spaces.Box(0, 255, (64, 64, 3), np.uint8), ACT, "no image encoder"),
    (gymnasium.spaces.Discrete(4), ACT, "unsupported observation space"),
])
def test_unsupported_spaces_raise(obs_space, act_space, match):
    with pytest.raises(ValueError, match=match):
        build(obs_space, act_space)


@pytest.mark.parametrize("field, value", [("tau", 0.0), ("policy_frequency", 0), ("n_step", 0),
                                          ("log_std_max", -6.0), ("gamma", 1.5)])
def test_bad_hyperparameters_raise(field, value):
    with pytest.raises(ValueError, match=f"sac.{field}="):
        build(**{field: value})

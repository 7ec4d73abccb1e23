"""PPO: the loss on hand-checked numbers, act, and learn."""

import dataclasses
import functools
import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents import networks, ppo
from agents.returns import bootstrap_values, gae
from jaxsrl.core.agent import EnvSpec, Trajectory

BOX_OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,))
DICT_OBS = gymnasium.spaces.Dict({
    "pos": gymnasium.spaces.Box(-1.0, 1.0, (2,)),
    "grid": gymnasium.spaces.Box(0, 1, (2, 2), np.int8),
})
HEADS = {
    "discrete": EnvSpec(BOX_OBS, gymnasium.spaces.Discrete(4, start=1)),
    "multi_discrete": EnvSpec(DICT_OBS, gymnasium.spaces.MultiDiscrete([2, 3, 5])),
    "box": EnvSpec(BOX_OBS, gymnasium.spaces.Box(-2.0, 2.0, (2,))),
}
DISCRETE = HEADS["discrete"]
SMALL = ppo.PPOConfig(hidden_sizes=(16, 16), num_epochs=2, num_minibatches=2)
METRICS = {"loss/total", "loss/policy", "loss/value", "loss/entropy", "approx_kl",
           "clip_fraction", "grad_norm", "learning_rate", "value_mean",
           "advantage_mean"}


def random_obs(space, shape, rng):
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: random_obs(s, shape, rng) for k, s in space.spaces.items()}
    return rng.normal(size=shape + space.shape).astype(np.float32)


def random_traj(spec, B=4, T=6, seed=0):
    """A random batch with terminations and truncations mid-segment."""
    rng = np.random.default_rng(seed)
    space = spec.action_space
    if isinstance(space, gymnasium.spaces.Box):
        action = rng.normal(size=(B, T) + space.shape).astype(np.float32)
    elif isinstance(space, gymnasium.spaces.MultiDiscrete):
        action = rng.integers(space.start, space.start + space.nvec,
                              (B, T, len(space.nvec))).astype(np.int32)
    else:
        action = rng.integers(space.start, space.start + space.n, (B, T)).astype(np.int32)
    terminated = np.zeros((B, T), bool)
    truncated = np.zeros((B, T), bool)
    terminated[0, 2] = truncated[1, 3] = truncated[2, T - 1] = True
    return Trajectory(
        obs=random_obs(spec.observation_space, (B, T + 1), rng),
        action=action,
        reward=rng.normal(size=(B, T)).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        final_obs=random_obs(spec.observation_space, (B, T), rng),
        behaviour_logp=(rng.normal(size=(B, T)) * 0.1 - 1.0).astype(np.float32),
        policy_version=np.zeros((B, T), np.int32),
    )


@functools.cache
def build(name):
    """(fns, jitted learn, initial state) of a small agent for ``HEADS[name]``."""
    fns = ppo.make(SMALL, HEADS[name], num_updates=10)
    return fns, jax.jit(fns.learn), jax.jit(fns.init)(jax.random.PRNGKey(0))


@pytest.fixture
def discrete():
    return build("discrete")


# ------------------------------------------------------------------ ppo_loss


@functools.cache
def jitted_loss(clip_value_loss, normalize_advantages):
    return jax.jit(functools.partial(
        ppo.ppo_loss, clip_eps=0.2, vf_coef=0.5, ent_coef=0.01,
        clip_value_loss=clip_value_loss, normalize_advantages=normalize_advantages))


def loss(clip_value_loss=True, normalize_advantages=False, **arrays):
    return jitted_loss(clip_value_loss, normalize_advantages)(**arrays)


HAND = dict(
    logp=jnp.log(jnp.array([1.5, 0.5, 1.0])),  # ratios 1.5, 0.5, 1.0
    behaviour_logp=jnp.zeros(3),
    advantage=jnp.array([1.0, -1.0, 2.0]),
    value=jnp.array([1.0, 2.0, 3.0]),
    old_value=jnp.array([0.5, 2.0, 4.0]),
    return_=jnp.array([2.0, 2.0, 2.0]),
    entropy=jnp.array([0.5, 0.6, 0.7]),
)


def test_ppo_loss_hand_checked():
    out = loss(**HAND)
    # min(1.5 * 1, 1.2 * 1) = 1.2; min(0.5 * -1, 0.8 * -1) = -0.8; min(2, 2) = 2.
    np.testing.assert_allclose(out.policy, -(1.2 - 0.8 + 2.0) / 3, rtol=1e-6)
    # Clipped values 0.7, 2.0, 3.8 -> errors max(1, 1.69), max(0, 0), max(1, 3.24).
    np.testing.assert_allclose(out.value, 0.5 * (1.69 + 0.0 + 3.24) / 3, rtol=1e-6)
    np.testing.assert_allclose(out.entropy, 0.6, rtol=1e-6)
    np.testing.assert_allclose(
        out.total, out.policy + 0.5 * out.value - 0.01 * 0.6, rtol=1e-6)
    np.testing.assert_allclose(out.clip_fraction, 2 / 3, rtol=1e-6)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + 0.0) / 3
    np.testing.assert_allclose(out.approx_kl, kl, rtol=1e-5)

    unclipped = loss(clip_value_loss=False, **HAND)
    np.testing.assert_allclose(unclipped.value, 0.5 * (1.0 + 0.0 + 1.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(unclipped.policy, out.policy)


def test_ppo_loss_kl_penalty_value_clip_range_and_mask_hand_checked():
    kw = dict(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, normalize_advantages=False)
    base = ppo.ppo_loss(**HAND, **kw)
    with_kl = ppo.ppo_loss(**HAND, **kw, kl_coef=0.1)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + 0.0) / 3
    np.testing.assert_allclose(with_kl.total, base.total + 0.1 * kl, rtol=1e-5)
    # The penalty's gradient is the KL's: d/dlogp_i [(r - 1) - log r] / N = (r_i - 1) / N.
    g = jax.grad(lambda lp: ppo.ppo_loss(**{**HAND, "logp": lp}, **kw, kl_coef=1.0).total
                 - ppo.ppo_loss(**{**HAND, "logp": lp}, **kw).total)(HAND["logp"])
    np.testing.assert_allclose(g, [0.5 / 3, -0.5 / 3, 0.0], atol=1e-6)
    # Value clip range 1.0: V - V_old = 0.5, 0, -1 all lie within it, so the clipped
    # values equal V and the errors are the unclipped 1, 0, 1 (with 0.2 they were 1.69, 0, 3.24).
    wide = ppo.ppo_loss(**HAND, **kw, value_clip_eps=1.0)
    np.testing.assert_allclose(wide.value, 0.5 * (1.0 + 0.0 + 1.0) / 3, rtol=1e-6)
    # A mask drops sample 1 from every mean.
    masked = ppo.ppo_loss(**HAND, **kw, mask=jnp.array([True, False, True]))
    np.testing.assert_allclose(masked.policy, -(1.2 + 2.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(masked.value, 0.5 * (1.69 + 3.24) / 2, rtol=1e-6)
    np.testing.assert_allclose(masked.entropy, 0.6, rtol=1e-6)
    np.testing.assert_allclose(masked.clip_fraction, 0.5, rtol=1e-6)


def test_ppo_loss_gradient_only_through_unclipped_ratios():
    def policy_loss(logp):
        return loss(**{**HAND, "logp": logp}).policy

    grad = jax.grad(policy_loss)(HAND["logp"])
    # Samples 0 and 1 sit on the clipped branch; sample 2 has d/dlogp = -A * r / N.
    np.testing.assert_allclose(grad, [0.0, 0.0, -2.0 / 3], atol=1e-6)


def test_ppo_loss_normalizes_advantages():
    adv = HAND["advantage"]
    standardised = (adv - adv.mean()) / (adv.std() + 1e-8)
    a = loss(normalize_advantages=True, **HAND)
    b = loss(normalize_advantages=False, **{**HAND, "advantage": standardised})
    np.testing.assert_allclose(a.policy, b.policy, rtol=1e-6)
    c = loss(normalize_advantages=False, **HAND)
    assert not np.isclose(a.policy, c.policy)


# ------------------------------------------------------------------ learn


def test_learn_lowers_the_loss_on_a_fixed_batch():
    config = dataclasses.replace(SMALL, num_minibatches=1, num_epochs=4,
                                 learning_rate=1e-2, anneal_lr=False)
    fns = ppo.make(config, DISCRETE, num_updates=1)
    state = build("discrete")[2]  # same network and optimiser structure as `config`
    traj = random_traj(DISCRETE, B=4, T=8)
    net = networks.ActorCritic(networks.head_for_space(DISCRETE.action_space),
                               hidden_sizes=config.hidden_sizes)

    @jax.jit
    def fixed_batch_loss(params, target_params):
        # Targets from `target_params` (what learn computes with the pre-update ones).
        v_obs = net.apply(target_params, traj.obs, method="value")
        v_final = net.apply(target_params, traj.final_obs, method="value")
        adv, ret = gae(traj.reward.T, config.gamma * (1.0 - traj.terminated.T),
                       v_obs[:, :-1].T, bootstrap_values(v_obs.T, v_final.T,
                                                         traj.truncated.T),
                       (traj.terminated | traj.truncated).T, config.gae_lambda)
        dist, value = net.apply(params, traj.obs[:, :-1])
        flat = lambda x: x.reshape(-1)
        return ppo.ppo_loss(
            flat(networks.log_prob(dist, traj.action)), flat(traj.behaviour_logp),
            flat(adv.T), flat(value), flat(v_obs[:, :-1]), flat(ret.T),
            flat(networks.entropy(dist)), clip_eps=config.clip_eps,
            vf_coef=config.vf_coef, ent_coef=config.ent_coef).total

    new_state, _ = jax.jit(fns.learn)(state, traj, jax.random.PRNGKey(1))
    before = fixed_batch_loss(state.params["net"], state.params["net"])
    after = fixed_batch_loss(new_state.params["net"], state.params["net"])
    assert after < before - 0.05, (before, after)
    assert int(new_state.update_step) == 1


def test_learn_metrics_and_lr_anneal(discrete):
    fns, learn, state = discrete
    traj = random_traj(DISCRETE)
    s1, m1 = learn(state, traj, jax.random.PRNGKey(1))
    assert set(m1) == METRICS
    assert all(np.shape(v) == () and np.isfinite(v) for v in m1.values())
    _, m2 = learn(s1, traj, jax.random.PRNGKey(2))
    # 10 updates x 2 epochs x 2 minibatches = 40 steps; update 0 uses steps 0..3.
    lr0 = SMALL.learning_rate
    np.testing.assert_allclose(m1["learning_rate"], lr0 * (1 - 1.5 / 40), rtol=1e-5)
    np.testing.assert_allclose(m2["learning_rate"], lr0 * (1 - 5.5 / 40), rtol=1e-5)
    # value_mean uses the current parameters' values of obs[:, :T].
    v = jax.jit(lambda p, o: jnp.mean(networks.ActorCritic(
        networks.head_for_space(DISCRETE.action_space), SMALL.hidden_sizes
    ).apply(p, o, method="value")))(state.params["net"], traj.obs[:, :-1])
    np.testing.assert_allclose(m1["value_mean"], v, rtol=1e-5)


def test_learn_is_deterministic_given_rng(discrete):
    _, learn, state = discrete
    traj = random_traj(DISCRETE)
    a, ma = learn(state, traj, jax.random.PRNGKey(7))
    b, mb = learn(state, traj, jax.random.PRNGKey(7))
    c, _ = learn(state, traj, jax.random.PRNGKey(8))
    jax.tree.map(np.testing.assert_array_equal, a, b)
    jax.tree.map(np.testing.assert_array_equal, ma, mb)
    diff = jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), a.params,
                                        c.params))
    assert max(diff) > 0  # the minibatch shuffle depends on rng


def test_final_obs_bootstraps_only_truncated_steps(discrete):
    _, learn, state = discrete
    traj = random_traj(DISCRETE)
    rng = jax.random.PRNGKey(3)
    base, _ = learn(state, traj, rng)

    # Changing final_obs where not truncated changes nothing ...
    junk = traj.final_obs.copy()
    junk[~traj.truncated] += 100.0
    same, _ = learn(state, traj._replace(final_obs=junk), rng)
    jax.tree.map(np.testing.assert_array_equal, base.params, same.params)
    # ... and where truncated it changes the update.
    moved = traj.final_obs.copy()
    moved[traj.truncated] += 1.0
    other, _ = learn(state, traj._replace(final_obs=moved), rng)
    diff = jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), base.params,
                                        other.params))
    assert max(diff) > 0


def test_learn_rejects_indivisible_batch():
    fns = ppo.make(dataclasses.replace(SMALL, num_minibatches=5), DISCRETE, 1)
    state = build("discrete")[2]  # same structure; B * T = 24 is not divisible by 5
    with pytest.raises(ValueError, match="num_minibatches"):
        jax.eval_shape(fns.learn, state, random_traj(DISCRETE, 4, 6),
                       jax.random.PRNGKey(1))


# ------------------------------------------------------------------ act, per head

@pytest.mark.parametrize("name", sorted(HEADS))
def test_act_and_learn_per_head(name):
    spec = HEADS[name]
    fns, learn, state = build(name)
    obs = random_obs(spec.observation_space, (64,), np.random.default_rng(0))
    act = jax.jit(fns.act, static_argnames="deterministic")
    action, carry, extras = act(state.params, obs, fns.initial_carry(64),
                                jax.random.PRNGKey(1))
    assert carry is None and set(extras) == {"logp"}
    logp = np.asarray(extras["logp"])
    assert logp.shape == (64,) and logp.dtype == np.float32 and np.isfinite(logp).all()

    space = spec.action_space
    action = np.asarray(action)
    if isinstance(space, gymnasium.spaces.Box):
        assert action.dtype == np.float32 and action.shape == (64, 2)
        assert action.std() > 0.5  # unit initial std, not squashed to the mean
    else:
        assert action.dtype == np.int32
        assert all(space.contains(a) for a in action.astype(space.dtype))
        assert len(np.unique(action.reshape(64, -1), axis=0)) > 1  # it samples
    if isinstance(space, gymnasium.spaces.Discrete):
        assert action.shape == (64,)

    # Deterministic actions ignore rng and are at least as likely as samples.
    det1, _, ex1 = act(state.params, obs, None, jax.random.PRNGKey(2),
                       deterministic=True)
    det2, _, _ = act(state.params, obs, None, jax.random.PRNGKey(3),
                     deterministic=True)
    np.testing.assert_array_equal(det1, det2)
    assert (np.asarray(ex1["logp"]) >= logp - 1e-6).all()

    traj = random_traj(spec)
    _, metrics = learn(state, traj, jax.random.PRNGKey(4))
    assert set(metrics) == METRICS
    assert all(np.isfinite(v) for v in metrics.values())


# ------------------------------------------------------------------ registry


def test_registry():
    assert agents.AGENTS["ppo"] is ppo.AGENT
    assert agents.get_agent("ppo").make is ppo.make
    assert agents.get_agent("ppo").config_cls is ppo.PPOConfig
    with pytest.raises(ValueError, match=r"'nope'.*ppo"):
        agents.get_agent("nope")


def test_config_is_frozen_and_documented():
    config = ppo.PPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gamma = 0.5
    assert isinstance(config.hidden_sizes, tuple)
    with pytest.raises(ValueError, match="activation"):
        ppo.make(ppo.PPOConfig(activation="nope"), DISCRETE, 1)


# ------------------------------------------------------------------ normalisation (MLP path)
NORMALISED = dataclasses.replace(SMALL, normalize_observations=True, normalize_values=True)


@pytest.mark.parametrize("name", ["box", "multi_discrete"])
def test_learn_updates_running_statistics(name):
    """Observation statistics move to the batch's, return statistics to the GAE returns'."""
    spec = HEADS[name]
    fns = ppo.make(NORMALISED, spec, num_updates=10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    traj = random_traj(spec, B=8, T=16)
    traj = traj._replace(obs=jax.tree.map(lambda x: x * 3.0 + 5.0, traj.obs),
                         reward=traj.reward * 100.0)
    new, metrics = jax.jit(fns.learn)(state, traj, jax.random.PRNGKey(1))
    T = traj.reward.shape[1]
    for path, stats in jax.tree_util.tree_flatten_with_path(
            new.params["obs_stats"], is_leaf=lambda x: hasattr(x, "mean"))[0]:
        leaf = traj.obs if not isinstance(traj.obs, dict) else traj.obs[path[0].key]
        np.testing.assert_allclose(stats.mean, leaf[:, :T].reshape((-1,) + stats.mean.shape).mean(0),
                                   atol=1e-3)
    rs = new.params["ret_stats"]
    assert float(jnp.sqrt(rs.var)) > 10.0  # rewards of scale 100 -> returns of that scale
    assert all(np.isfinite(v) for v in metrics.values())


def test_normalisation_off_leaves_statistics_untouched(discrete):
    fns, learn, state = discrete
    new, _ = learn(state, random_traj(DISCRETE), jax.random.PRNGKey(1))
    for a, b in zip(jax.tree.leaves(state.params["obs_stats"]), jax.tree.leaves(new.params["obs_stats"])):
        np.testing.assert_array_equal(a, b)


def test_entity_lstm_on_a_non_entity_space_is_refused_naming_it():
    with pytest.raises(ValueError, match="entity_lstm.*Box.*mlp"):
        ppo.make(dataclasses.replace(SMALL, network="entity_lstm"), DISCRETE, num_updates=10)

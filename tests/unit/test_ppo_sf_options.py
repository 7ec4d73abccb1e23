"""PPO's Sample Factory / RL Zoo options: the ratio clip interval, the ratio clamp,
unshuffled minibatches and the initial log std, against hand-computed values."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import networks, ppo
from tests.unit.test_ppo import HAND, HEADS, SMALL, random_traj

KW = dict(clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, normalize_advantages=False)


def test_inverse_ratio_clip_hand_checked():
    # Ratios 1.5, 0.5, 1.0, advantages 1, -1, 2; interval [1/1.2, 1.2]:
    # min(1.5, 1.2) = 1.2; min(-0.5, -1/1.2) = -0.8333; min(2, 2) = 2.
    out = ppo.ppo_loss(**HAND, **KW, ratio_clip="inverse")
    np.testing.assert_allclose(out.policy, -(1.2 - 1 / 1.2 + 2.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(out.clip_fraction, 2 / 3, rtol=1e-6)
    # The paper's interval [0.8, 1.2] gives -0.8 for the second sample.
    sym = ppo.ppo_loss(**HAND, **KW)
    np.testing.assert_allclose(sym.policy, -(1.2 - 0.8 + 2.0) / 3, rtol=1e-6)
    # A ratio of 0.82 lies inside [0.8, 1.2] but outside [0.833, 1.2].
    near = {**HAND, "logp": jnp.log(jnp.array([0.82, 1.0, 1.0]))}
    assert float(ppo.ppo_loss(**near, **KW).clip_fraction) == 0.0
    np.testing.assert_allclose(ppo.ppo_loss(**near, **KW, ratio_clip="inverse").clip_fraction,
                               1 / 3, rtol=1e-6)


def test_ratio_clamp_bounds_the_unclipped_branch_hand_checked():
    arrays = {**{k: v[:2] for k, v in HAND.items()},
              "logp": jnp.log(jnp.array([3.0, 0.25])), "advantage": jnp.array([-1.0, 1.0])}
    # Unclamped: min(3 * -1, 1.2 * -1) = -3; min(0.25, 0.8) = 0.25.
    free = ppo.ppo_loss(**arrays, **KW)
    np.testing.assert_allclose(free.policy, -(-3.0 + 0.25) / 2, rtol=1e-6)
    # Clamped to [0.5, 2]: min(-2, -1.2) = -2; min(0.5, 0.8) = 0.5.
    clamped = ppo.ppo_loss(**arrays, **KW, ratio_clamp=2.0)
    np.testing.assert_allclose(clamped.policy, -(-2.0 + 0.5) / 2, rtol=1e-6)
    # Saturated ratios pass no gradient; the KL estimate uses the unclamped ratio.
    g = jax.grad(lambda lp: ppo.ppo_loss(**{**arrays, "logp": lp}, **KW,
                                         ratio_clamp=2.0).policy)(arrays["logp"])
    np.testing.assert_allclose(g, [0.0, 0.0], atol=1e-7)
    kl = ((3.0 - 1 - math.log(3.0)) + (0.25 - 1 - math.log(0.25))) / 2
    np.testing.assert_allclose(clamped.approx_kl, kl, rtol=1e-5)


def test_unknown_ratio_clip_is_refused_naming_it():
    with pytest.raises(ValueError, match="'asymmetric'"):
        ppo.ppo_loss(**HAND, **KW, ratio_clip="asymmetric")
    with pytest.raises(ValueError, match="ratio_clip='asymmetric'"):
        ppo.PPOConfig(ratio_clip="asymmetric").validate()
    with pytest.raises(ValueError, match="ratio_clamp=0.5"):
        ppo.PPOConfig(ratio_clamp=0.5).validate()


def _learned(config, key):
    fns = ppo.make(config, HEADS["box"], num_updates=10)
    state = fns.init(jax.random.PRNGKey(0))
    state, _ = jax.jit(fns.learn)(state, random_traj(HEADS["box"]), jax.random.PRNGKey(key))
    return state.params["net"]


def test_unshuffled_minibatches_ignore_the_key_and_shuffled_ones_do_not():
    # The only randomness of a Box-action update is the minibatch permutation.
    fixed = dataclasses.replace(SMALL, shuffle_minibatches=False)
    a, b = _learned(fixed, 1), _learned(fixed, 2)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    c, d = _learned(SMALL, 1), _learned(SMALL, 2)
    diffs = jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.max(jnp.abs(x - y))), c, d))
    assert max(diffs) > 0


def test_unshuffled_single_minibatch_equals_the_shuffled_one():
    # With one minibatch a permutation only reorders the samples of every mean, so the
    # update is the same up to float rounding: both orders see the same data.
    one = dataclasses.replace(SMALL, num_minibatches=1, num_epochs=1)
    a = _learned(dataclasses.replace(one, shuffle_minibatches=False), 1)
    b = _learned(one, 1)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6), a, b)


def test_log_std_init_sets_the_gaussian_spread():
    for shared in (False, True):
        config = dataclasses.replace(SMALL, log_std_init=-1.0, shared_torso=shared)
        fns = ppo.make(config, HEADS["box"], num_updates=1)
        params = fns.init(jax.random.PRNGKey(0)).params
        np.testing.assert_array_equal(params["net"]["params"]["log_std"], [-1.0, -1.0])
        obs = jnp.zeros((4096, 3))
        det, _, _ = fns.act(params, obs, None, jax.random.PRNGKey(1), deterministic=True)
        act, _, _ = fns.act(params, obs, None, jax.random.PRNGKey(1))
        np.testing.assert_allclose(np.std(np.asarray(act - det), axis=0), math.exp(-1.0),
                                   rtol=0.05)


def test_kl_divergence_matches_tensorflow_probability():
    tfd = pytest.importorskip("tensorflow_probability.substrates.jax.distributions")
    rng = np.random.default_rng(0)
    mp, mq = rng.normal(size=(2, 5, 3)).astype(np.float32)
    sp, sq = (rng.normal(size=(2, 3)) * 0.5).astype(np.float32)
    ours = networks.kl_divergence(networks.DiagGaussian(mp, sp), networks.DiagGaussian(mq, sq))
    ref = tfd.kl_divergence(tfd.MultivariateNormalDiag(mp, np.exp(sp)),
                            tfd.MultivariateNormalDiag(mq, np.exp(sq)))
    np.testing.assert_allclose(ours, ref, rtol=1e-5)
    lp, lq = rng.normal(size=(2, 5, 4, 6)).astype(np.float32)
    ours = networks.kl_divergence(networks.MultiCategorical(lp, 0), networks.MultiCategorical(lq, 0))
    ref = tfd.kl_divergence(tfd.Categorical(logits=lp), tfd.Categorical(logits=lq)).sum(-1)
    np.testing.assert_allclose(ours, ref, rtol=1e-5)
    with pytest.raises(TypeError, match="Categorical and a DiagGaussian"):
        networks.kl_divergence(networks.Categorical(lp[0, 0]), networks.DiagGaussian(mp, sp))


def test_closed_form_kl_penalty_replaces_the_estimator_in_the_total():
    pen = jnp.array([0.3, 0.0, 0.6])
    base = ppo.ppo_loss(**HAND, **KW)
    out = ppo.ppo_loss(**HAND, **KW, kl_coef=0.5, kl_penalty=pen)
    np.testing.assert_allclose(out.total, base.total + 0.5 * 0.3, rtol=1e-6)
    np.testing.assert_allclose(out.approx_kl, base.approx_kl)  # the metric stays the estimator


@pytest.mark.parametrize("head", ["box", "discrete"])
def test_closed_form_kl_vanishes_at_the_first_step_and_pulls_later_ones(head):
    # pi_old is the policy at the start of the update: at the first minibatch the
    # closed-form KL and its gradient are 0, so one epoch of one minibatch equals the
    # update without a penalty; over 2 epochs x 2 minibatches the penalty acts.
    def learned(kl_coef, epochs_minibatches=(2, 2)):
        e, m = epochs_minibatches
        config = dataclasses.replace(SMALL, kl_coef=kl_coef, kl_estimator="closed_form",
                                     shuffle_minibatches=False, num_epochs=e, num_minibatches=m)
        fns = ppo.make(config, HEADS[head], num_updates=10)
        state = fns.init(jax.random.PRNGKey(0))
        return jax.jit(fns.learn)(state, random_traj(HEADS[head]), jax.random.PRNGKey(1))[0]

    def max_diff(a, b):
        return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.max(jnp.abs(x - y))),
                                                a.params["net"], b.params["net"])))

    assert max_diff(learned(5.0, (1, 1)), learned(0.0, (1, 1))) < 1e-6
    assert max_diff(learned(5.0), learned(0.0)) > 1e-4
    with pytest.raises(ValueError, match="kl_estimator='exact'"):
        ppo.PPOConfig(kl_estimator="exact").validate()
    with pytest.raises(ValueError, match="needs ppo.network='mlp'"):
        ppo.PPOConfig(kl_estimator="closed_form", network="entity_lstm").validate()

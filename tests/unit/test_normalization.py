"""Running statistics (agents/normalization.py) against pooled NumPy mean and variance."""

import jax.numpy as jnp
import numpy as np

from agents import normalization


def _batches(seed=0):
    """Batches of different sizes whose means differ a lot (so the between-batch term
    of the merge dominates the pooled variance), with a feature axis of 3."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(n, 3)) * scale + shift).astype(np.float32)
            for n, scale, shift in [(50, 1.0, 0.0), (7, 0.5, 10.0), (200, 2.0, -4.0), (31, 0.1, 3.0)]]


def test_merge_of_batches_equals_pooled_moments():
    """Starting from the first batch's exact moments, merging the rest must give the
    mean and (population) variance of all samples pooled. Catches a merge without the
    between-batch term ``delta^2 n_a n_b / n`` or with a wrong weighting."""
    batches = _batches()
    first = batches[0]
    stats = normalization.RunningStats(jnp.asarray(first.mean(0)), jnp.asarray(first.var(0)),
                                       jnp.float32(len(first)))
    for x in batches[1:]:
        stats = normalization.update_stats(stats, jnp.asarray(x))
    pooled = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(stats.mean, pooled.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.var, pooled.var(0), rtol=1e-5)
    assert float(stats.count) == len(pooled)


def test_from_the_initial_statistics_leading_axes_are_samples():
    """From ``init_stats`` (a prior of weight 1e-4) with ``[B, T, 3]`` batches: the pooled
    moments up to that prior's weight."""
    stats = normalization.init_stats((3,))
    batches = _batches(1)
    for x in batches:
        stats = normalization.update_stats(stats, jnp.asarray(x).reshape(-1, 1, 3))
    pooled = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(stats.mean, pooled.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats.var, pooled.var(0), rtol=1e-4)
    np.testing.assert_allclose(float(stats.count), len(pooled) + 1e-4, rtol=1e-7)


def test_dict_observations_skip_flag_leaves():
    obs = {"pos": np.ones((4, 2), np.float32), "agent_mask": np.ones((4, 5), np.float32)}
    stats = normalization.init_obs_stats({k: v[0] for k, v in obs.items()})
    assert set(stats) == {"pos"}
    out = normalization.normalize_obs(normalization.update_obs_stats(stats, obs), obs)
    np.testing.assert_array_equal(out["agent_mask"], obs["agent_mask"])  # flags untouched

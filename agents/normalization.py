"""Running mean/variance statistics for observation and return normalisation.

Batch update by the parallel algorithm of Chan, Golub & LeVeque (1979), as in
OpenAI Baselines' ``RunningMeanStd``. Pure functions over a ``RunningStats`` pytree,
so the statistics live in the learner state and are saved with checkpoints.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RunningStats(NamedTuple):
    """Mean and variance of everything seen so far; ``count`` is a float scalar."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_stats(shape: tuple) -> RunningStats:
    return RunningStats(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32),
                        jnp.asarray(1e-4, jnp.float32))


def update_stats(stats: RunningStats, x: jax.Array, mask: jax.Array | None = None) -> RunningStats:
    """Merge a batch ``x [..., *shape]`` (all leading axes are samples).

    The pooled mean and variance of the old samples and the batch (Chan et al. 1979)::

        mean' = mean + delta * n / (c + n)
        var'  = (var * c + var_b * n + delta^2 * c * n / (c + n)) / (c + n)

    with ``delta = mean_b - mean``, ``c`` the old count, ``n`` the batch's.

    Args:
      stats: the statistics so far.
      x: ``[..., *shape]`` float samples.
      mask: ``[...]`` bool (the leading axes of ``x``), the samples that count
        (``None``: all). An all-False mask leaves ``stats`` unchanged.
    """
    lead = x.shape[: x.ndim - stats.mean.ndim]
    x = x.reshape((-1,) + stats.mean.shape).astype(jnp.float32)
    if mask is None:
        w = jnp.ones((x.shape[0],), jnp.float32)
    else:
        chex_shape = tuple(mask.shape)
        if chex_shape != tuple(lead):
            raise ValueError(f"mask shape {chex_shape} != sample axes {tuple(lead)}")
        w = mask.reshape(-1).astype(jnp.float32)
    w = w.reshape((-1,) + (1,) * stats.mean.ndim)
    n = jnp.sum(w)
    safe_n = jnp.maximum(n, 1.0)
    mean = jnp.sum(w * x, 0) / safe_n
    var = jnp.sum(w * (x - mean) ** 2, 0) / safe_n
    delta = mean - stats.mean
    total = stats.count + n
    new_mean = stats.mean + delta * n / total
    m2 = stats.var * stats.count + var * n + delta**2 * stats.count * n / total
    return RunningStats(new_mean, m2 / total, total)


def normalize(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    """``clip((x - mean) / sqrt(var + 1e-8), -clip, clip)``."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + 1e-8), -clip, clip)


def is_feature(key: str) -> bool:
    """Observation keys that are normalised: not the 0/1 ``*_mask`` / ``*_present`` flags."""
    return not (key.endswith("_mask") or key.endswith("_present"))


def init_obs_stats(example_obs) -> dict | RunningStats:
    """Statistics for each feature leaf of one observation (no batch dim)."""
    if isinstance(example_obs, dict):
        return {k: init_stats(v.shape) for k, v in example_obs.items() if is_feature(k)}
    return init_stats(example_obs.shape)


def update_obs_stats(stats, obs, mask=None):
    """Merge an observation batch (leaves ``[..., *shape]``); ``mask`` as in ``update_stats``."""
    if isinstance(stats, dict):
        return {k: update_stats(s, obs[k], mask) for k, s in stats.items()}
    return update_stats(stats, obs, mask)


def normalize_obs(stats, obs):
    """Normalise the feature leaves of an observation batch with ``stats``."""
    if isinstance(stats, dict):
        return {k: normalize(stats[k], v) if k in stats else v for k, v in obs.items()}
    return normalize(stats, obs)

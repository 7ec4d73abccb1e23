"""The tanh-squashed diagonal Gaussian policy of SAC, rescaled to a ``Box``'s bounds.

A pre-squash Gaussian sample ``u ~ N(mean, exp(log_std)^2)`` (``[..., A]``) becomes the
action ``a = scale * tanh(u) + bias`` with ``scale = (high - low) / 2`` and ``bias =
(high + low) / 2``, so ``a`` lies in ``(low, high)``. By the change of variables
(Haarnoja et al. 2018, arXiv 1812.05905, Appendix C "Enforcing Action Bounds")::

    log pi(a|s) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2) - sum_i log(scale_i)

The last term is the affine rescale's Jacobian; CleanRL's ``sac_continuous_action.py``
keeps it too (``log(scale * (1 - y^2) + 1e-6)``), so the target entropy ``-|A|``
means the same here as there. Instead of CleanRL's ``+ 1e-6`` we use the exact,
numerically stable identity ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``
(finite for any finite ``u``). Log-probabilities are computed from ``u``, never from
``a`` (``atanh`` of a saturated action is infinite).
"""

from __future__ import annotations

import math

import chex
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from agents import networks


def box_affine(space: gymnasium.spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, bias)``, float32 ``[A]``, mapping ``tanh`` outputs in ``(-1, 1)`` onto the bounds.

    Raises:
      ValueError: ``space`` is not a 1-D ``Box`` with finite bounds and ``low < high``.
    """
    if not isinstance(space, gymnasium.spaces.Box):
        raise ValueError(f"sac needs a Box action space, got {space!r}")
    if len(space.shape) != 1:
        raise ValueError(f"sac needs 1-D Box actions, got shape {space.shape} ({space!r})")
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ValueError(f"sac needs finite Box bounds with low < high, got low={low.tolist()} "
                         f"high={high.tolist()}")
    return ((high - low) / 2).astype(np.float32), ((high + low) / 2).astype(np.float32)


def log1m_tanh_sq(u: jax.Array) -> jax.Array:
    """``log(1 - tanh(u)^2)`` elementwise as ``2 (log 2 - u - softplus(-2u))``; any shape."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def bounded_log_std(raw: jax.Array, low: float, high: float) -> jax.Array:
    """Maps a network output onto ``[low, high]`` by ``low + (high - low) (tanh(raw) + 1) / 2``.

    CleanRL's ``Actor.forward`` (from Spinning Up / D. Yarats' ``pytorch_sac``): smooth
    bounds instead of a hard clip, so the gradient never vanishes at a bound exactly.
    """
    return low + 0.5 * (high - low) * (jnp.tanh(raw) + 1.0)


def log_prob(u: jax.Array, mean: jax.Array, log_std: jax.Array, scale: chex.Array) -> jax.Array:
    """``log pi(a|s)`` ``[...]`` of the action ``scale * tanh(u) + bias`` (module doc).

    Args:
      u: ``[..., A]`` pre-squash sample.
      mean, log_std: ``[..., A]`` Gaussian parameters (``log_std`` broadcasts).
      scale: ``[A]`` half-widths of the bounds (``box_affine``).
    """
    gaussian = networks.log_prob(networks.DiagGaussian(mean, log_std), u)
    return gaussian - jnp.sum(log1m_tanh_sq(u), -1) - jnp.sum(jnp.log(scale))


def sample(mean: jax.Array, log_std: jax.Array, rng: chex.PRNGKey, scale: chex.Array,
           bias: chex.Array) -> tuple[jax.Array, jax.Array]:
    """A reparameterised draw (Haarnoja et al. 2018, Eq. 8: ``u = mean + std * eps``).

    ``eps = jax.random.normal(rng, mean.shape)``; gradients flow into ``mean`` and
    ``log_std``.

    Returns:
      ``(action [..., A] float32 in (low, high), logp [...] float32)``.
    """
    u = mean + jnp.exp(log_std) * jax.random.normal(rng, mean.shape, mean.dtype)
    return squash(u, scale, bias), log_prob(u, mean, log_std, scale)


def mode(mean: jax.Array, log_std: jax.Array, scale: chex.Array, bias: chex.Array
         ) -> tuple[jax.Array, jax.Array]:
    """The deterministic action ``scale * tanh(mean) + bias`` and its ``logp`` (``u = mean``)."""
    return squash(mean, scale, bias), log_prob(mean, mean, log_std, scale)


def squash(u: jax.Array, scale: chex.Array, bias: chex.Array) -> jax.Array:
    """``scale * tanh(u) + bias`` as float32, ``[..., A]``."""
    return (scale * jnp.tanh(u) + bias).astype(jnp.float32)

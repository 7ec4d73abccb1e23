"""SAC's losses as pure functions of network outputs (Haarnoja et al. 2018, arXiv 1812.05905).

Twin critics ``Q_1, Q_2`` are stacked on a leading axis of size 2; the minimum of the
two (clipped double Q, Fujimoto et al. 2018, Sec. 4.1) is used in the target and in
the actor loss. Index convention: ``[2, B]`` Q-values, ``[B]`` everything else.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def soft_q_target(reward: jax.Array, discount: jax.Array, next_q: jax.Array,
                  next_logp: jax.Array, alpha: jax.Array) -> jax.Array:
    """Soft Bellman target ``y = r + discount * (min_i Q_targ_i(s', a') - alpha log pi(a'|s'))``.

    Haarnoja et al. 2018, Eq. 3 (soft value) inside Eq. 5/6 (the critic's target),
    with ``a' ~ pi(.|s')`` and the target critics; ``discount`` is ``gamma^k`` of an
    n-step item (0 after a termination), ``reward`` its discounted k-step sum.

    Args:
      reward, discount, next_logp: ``[B]`` float32.
      next_q: ``[2, B]`` target-critic values at ``(s', a')``.
      alpha: ``[]`` temperature.

    Returns:
      ``y`` ``[B]``, no gradient stopped (the caller stops it).
    """
    chex.assert_rank([reward, discount, next_q, next_logp], [1, 1, 2, 1])
    chex.assert_equal_shape([reward, discount, next_logp, next_q[0]])
    return reward + discount * (jnp.min(next_q, axis=0) - alpha * next_logp)


def critic_loss(q: jax.Array, target: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``sum_i mean_b w_b (Q_i(s_b, a_b) - y_b)^2`` and the TD errors ``Q_i - y`` ``[2, B]``.

    Haarnoja et al. 2018, Eq. 5, without its factor 1/2 and summed over the twin
    critics, as CleanRL's ``qf_loss = mse(qf1) + mse(qf2)``; ``weights`` ``[B]`` are the
    importance-sampling weights of prioritised replay (Schaul et al. 2016, Sec. 3.4;
    ones for uniform replay).
    """
    chex.assert_rank([q, target, weights], [2, 1, 1])
    td = q - target[None]
    return jnp.sum(jnp.mean(weights[None] * td**2, axis=1)), td


def actor_loss(q_pi: jax.Array, logp: jax.Array, alpha: jax.Array) -> jax.Array:
    """``mean_b(alpha log pi(a_b|s_b) - min_i Q_i(s_b, a_b))`` with ``a_b ~ pi`` reparameterised.

    Haarnoja et al. 2018, Eq. 9 (its gradient is Eq. 10); ``q_pi`` ``[2, B]``, ``logp``
    ``[B]``, ``alpha`` ``[]`` (treated as a constant: its gradient is stopped).
    """
    chex.assert_rank([q_pi, logp], [2, 1])
    return jnp.mean(jax.lax.stop_gradient(alpha) * logp - jnp.min(q_pi, axis=0))


def temperature_loss(log_alpha: jax.Array, logp: jax.Array, target_entropy: float) -> jax.Array:
    """``mean_b(-alpha (log pi(a_b|s_b) + target_entropy))`` with ``alpha = exp(log_alpha)``.

    Haarnoja et al. 2018, Eq. 18, optimised over ``log_alpha`` as CleanRL does
    (``alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()``);
    ``logp`` ``[B]`` is a constant here. Its gradient ``-alpha (log pi + H_target)`` is
    negative, so descent raises ``alpha``, when the entropy ``-log pi`` is below the
    target.
    """
    chex.assert_rank(logp, 1)
    return jnp.mean(-jnp.exp(log_alpha) * (jax.lax.stop_gradient(logp) + target_entropy))

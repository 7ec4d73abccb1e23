"""Q-learning TD errors, RLax-style: pure functions of Q values, actions, rewards and
discounts (tests/unit/test_q_learning.py checks them against ``rlax``, which is only a
test dependency)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

__all__ = ["double_q_learning", "q_learning"]


def _taken(q_tm1: chex.Array, a_tm1: chex.Array) -> jax.Array:
    """``q_tm1[..., a_tm1]``: the Q value of the action taken, ``[...]``."""
    return jnp.take_along_axis(q_tm1, a_tm1[..., None], axis=-1)[..., 0]


def _check(q_tm1, a_tm1, r_t, discount_t, *q_t) -> None:
    chex.assert_rank(q_tm1, a_tm1.ndim + 1)
    chex.assert_equal_shape([a_tm1, r_t, discount_t])
    chex.assert_equal_shape([q_tm1, *q_t])
    chex.assert_type(a_tm1, int)


def q_learning(
    q_tm1: chex.Array,
    a_tm1: chex.Array,
    r_t: chex.Array,
    discount_t: chex.Array,
    q_t: chex.Array,
) -> jax.Array:
    """Q-learning TD error (Watkins 1989; Mnih et al. 2015, Eq. 3)::

        target_tm1 = r_t + discount_t * max_a q_t[a]
        td         = target_tm1 - q_tm1[a_tm1]

    Time indices as in RLax: ``q_tm1`` are the Q values of ``s_{t-1}``, where action
    ``a_tm1`` was taken; ``r_t`` and ``discount_t`` came with the next state ``s_t``
    (``discount_t = 0`` at a terminal ``s_t``; an n-step item passes ``R^(n)`` and
    ``gamma^n``), and ``q_t`` are the (target network's) Q values of ``s_t``. The target is
    under ``stop_gradient``: gradients of ``td`` flow only through ``q_tm1``.

    Args:
      q_tm1: ``[..., A]`` float Q values at ``t-1``.
      a_tm1: ``[...]`` int action indices at ``t-1``, in ``[0, A)``.
      r_t: ``[...]`` float rewards at ``t``.
      discount_t: ``[...]`` float discounts at ``t``.
      q_t: ``[..., A]`` float Q values at ``t``.

    Returns:
      ``[...]`` TD errors, dtype of ``q_tm1``.

    Raises:
      AssertionError (chex): shapes that disagree or a non-integer ``a_tm1``.
    """
    _check(q_tm1, a_tm1, r_t, discount_t, q_t)
    target_tm1 = jax.lax.stop_gradient(r_t + discount_t * jnp.max(q_t, axis=-1))
    return target_tm1 - _taken(q_tm1, a_tm1)


def double_q_learning(
    q_tm1: chex.Array,
    a_tm1: chex.Array,
    r_t: chex.Array,
    discount_t: chex.Array,
    q_t_value: chex.Array,
    q_t_selector: chex.Array,
) -> jax.Array:
    """Double Q-learning TD error (van Hasselt, Guez & Silver 2016, "Deep Reinforcement
    Learning with Double Q-learning", Eq. 4)::

        target_tm1 = r_t + discount_t * q_t_value[argmax_a q_t_selector[a]]
        td         = target_tm1 - q_tm1[a_tm1]

    The online network selects the next action (``q_t_selector``), the target network
    evaluates it (``q_t_value``). Time indices as in :func:`q_learning`; the target is
    under ``stop_gradient``. Ties in the argmax go to the lowest action index.

    Args:
      q_tm1: ``[..., A]`` float Q values at ``t-1`` (online network).
      a_tm1: ``[...]`` int action indices at ``t-1``, in ``[0, A)``.
      r_t: ``[...]`` float rewards at ``t``.
      discount_t: ``[...]`` float discounts at ``t``.
      q_t_value: ``[..., A]`` float Q values at ``t`` that evaluate (target network).
      q_t_selector: ``[..., A]`` float Q values at ``t`` that select (online network).

    Returns:
      ``[...]`` TD errors, dtype of ``q_tm1``.

    Raises:
      AssertionError (chex): shapes that disagree or a non-integer ``a_tm1``.
    """
    _check(q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    a_t = jnp.argmax(q_t_selector, axis=-1)
    target_tm1 = jax.lax.stop_gradient(r_t + discount_t * _taken(q_t_value, a_t))
    return target_tm1 - _taken(q_tm1, a_tm1)

"""Return estimators, RLax-style: pure, time-major (``[T, ...]``) functions."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp


class GAEOutput(NamedTuple):
    """Output of ``gae``.

    Attributes:
      advantage: ``[T, ...]`` generalised advantage estimates ``A_t``.
      return_: ``[T, ...]`` lambda-returns ``A_t + V(s_t)`` (value-function targets).
    """

    advantage: jax.Array
    return_: jax.Array


def gae(
    r_t: chex.Array,
    discount_t: chex.Array,
    v_t: chex.Array,
    v_tp1: chex.Array,
    done_t: chex.Array,
    lambda_: chex.Numeric,
) -> GAEOutput:
    """Generalised advantage estimation (Schulman et al. 2016, eqs. 11-16).

    Time-major: axis 0 is time, any trailing axes (e.g. a batch axis ``B``) are carried
    along. Step ``t`` goes from ``s_t`` by action ``a_t`` to reward ``r_t`` and next
    observation ``s_{t+1}``::

        delta_t = r_t + discount_t * v_tp1_t - v_t
        A_t     = delta_t + discount_t * lambda_t * (1 - done_t) * A_{t+1},   A_T = 0
        G_t     = A_t + v_t

    ``discount_t`` is ``gamma * (1 - terminated_t)``: a terminal state has no value, so
    terminated steps do not bootstrap. ``v_tp1_t`` is the value of the step's own next
    observation: ``V(s_{t+1})`` for a step that did not end its episode and ``V(final
    observation)`` for a step truncated by a time limit, so truncated steps bootstrap
    through the limit. ``done_t = terminated_t or truncated_t`` cuts the recursion so
    no advantage leaks across an episode boundary (``s_{t+1}`` then starts a new
    episode). The last step's recursion uses ``A_T = 0``, i.e. ``A_{T-1} = delta_{T-1}``
    with ``v_tp1`` as the bootstrap.

    Args:
      r_t: ``[T, ...]`` rewards ``r_t``.
      discount_t: ``[T, ...]`` discounts ``gamma * (1 - terminated_t)``.
      v_t: ``[T, ...]`` values ``V(s_t)``.
      v_tp1: ``[T, ...]`` values of the next observation of each step (see above).
      done_t: ``[T, ...]`` bool or {0, 1}, the episode ended at step ``t``
        (terminated or truncated).
      lambda_: scalar or ``[T, ...]`` GAE mixing parameter ``lambda`` in ``[0, 1]``.

    Returns:
      ``GAEOutput(advantage, return_)``, each ``[T, ...]`` float.
    """
    chex.assert_rank([r_t, discount_t, v_t, v_tp1, done_t], r_t.ndim)
    chex.assert_equal_shape([r_t, discount_t, v_t, v_tp1, done_t])
    chex.assert_type([r_t, discount_t, v_t, v_tp1], float)

    lambda_ = jnp.broadcast_to(jnp.asarray(lambda_, r_t.dtype), r_t.shape)
    not_done = 1.0 - done_t.astype(r_t.dtype)
    delta_t = r_t + discount_t * v_tp1 - v_t  # [T, ...]
    trace_t = discount_t * lambda_ * not_done  # [T, ...] weight of A_{t+1} in A_t

    def step(adv_tp1, inputs):
        delta, trace = inputs
        adv = delta + trace * adv_tp1
        return adv, adv

    _, advantage = jax.lax.scan(
        step, jnp.zeros_like(delta_t[0]), (delta_t, trace_t), reverse=True
    )
    return GAEOutput(advantage=advantage, return_=advantage + v_t)


def bootstrap_values(
    v_obs: chex.Array, v_final: chex.Array, truncated_t: chex.Array
) -> jax.Array:
    """Value of each step's own next observation, ``v_tp1`` for ``gae``.

    Args:
      v_obs: ``[T + 1, ...]`` values of the observations ``V(obs_0 .. obs_T)``; where a
        step ended its episode, ``obs_{t+1}`` is the first observation of the next one.
      v_final: ``[T, ...]`` values of the final observations of truncated steps (any
        value elsewhere).
      truncated_t: ``[T, ...]`` bool, step ``t`` was cut by a time limit.

    Returns:
      ``[T, ...]``: ``v_final[t]`` where truncated, else ``v_obs[t + 1]``. Terminated
      steps get ``v_obs[t + 1]`` too, which ``gae`` multiplies by a zero discount.
    """
    chex.assert_equal_shape([v_obs[1:], v_final, truncated_t])
    return jnp.where(truncated_t, v_final, v_obs[1:])

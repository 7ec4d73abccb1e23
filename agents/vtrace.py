"""V-trace off-policy targets (Espeholt et al. 2018, "IMPALA", section 4), RLax-style.

Pure, time-major (``[T, ...]``) functions, like ``agents/returns.py``. Actors act with
a *behaviour* policy ``mu`` that may be several learner versions old; V-trace corrects
for that with truncated importance weights of the *target* policy ``pi`` (the current
parameters). With ratios ``pi(a_t|x_t) / mu(a_t|x_t)``::

    rho_t   = min(rho_bar, pi/mu)                 (clip_rho)
    c_t     = lambda * min(c_bar, pi/mu)          (clip_c, lambda_)
    delta_t = rho_t * (r_t + gamma * V(x_{t+1}) - V(x_t))
    v_s     = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t   (eq. 1)

computed with the recursion ``v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))``
(Remark 1 of the paper). The policy gradient uses the advantage
``rho^pg_s (r_s + gamma v_{s+1} - V(x_s))`` with ``rho^pg_s = min(pg_rho_bar, pi/mu)``.

Episode ends inside a segment follow ``agents/returns.py``: a *terminated* step has no
next value (``discount_t = 0``); a *truncated* step (time limit) bootstraps from the
value of its final observation (``v_tp1_t = V(final_obs_t)``, see
``returns.bootstrap_values``); either way the trace is cut (``done_t``) so nothing of
the next episode leaks into this one.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp


class VTraceOutput(NamedTuple):
    """Output of ``vtrace``; every field is ``[T, ...]``.

    Attributes:
      vs: V-trace value targets ``v_s`` (eq. 1).
      vs_tp1: target of each step's own next observation: ``v_{s+1}`` inside an
        episode, ``V(final_obs)`` for a truncated step, ``V(x_T)`` for the segment's
        last step (multiplied by ``discount_t``, so terminated steps ignore it).
      pg_advantage: ``rho^pg_s (r_s + discount_s vs_tp1_s - V(x_s))``.
      rho: the clipped importance weights ``rho_t`` used in ``delta_t``.
    """

    vs: jax.Array
    vs_tp1: jax.Array
    pg_advantage: jax.Array
    rho: jax.Array


def vtrace(
    v_t: chex.Array,
    v_tp1: chex.Array,
    r_t: chex.Array,
    discount_t: chex.Array,
    done_t: chex.Array,
    log_rho_t: chex.Array,
    *,
    lambda_: chex.Numeric = 1.0,
    clip_rho: float | None = 1.0,
    clip_c: float | None = 1.0,
    clip_pg_rho: float | None = 1.0,
    valid_t: chex.Array | None = None,
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages for one batch of segments.

    Time-major: axis 0 is time ``T``, trailing axes (a batch ``B``) are carried along.
    No gradient flows through the outputs (they are targets).

    Args:
      v_t: ``[T, ...]`` values ``V(x_t)``.
      v_tp1: ``[T, ...]`` values of each step's own next observation: ``V(x_{t+1})``,
        or ``V(final_obs_t)`` where truncated (``returns.bootstrap_values``).
      r_t: ``[T, ...]`` rewards.
      discount_t: ``[T, ...]`` ``gamma * (1 - terminated_t)``.
      done_t: ``[T, ...]`` bool or {0, 1}: step ``t`` ended its episode (terminated or
        truncated); cuts the trace.
      log_rho_t: ``[T, ...]`` ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
      lambda_: scalar or ``[T, ...]`` trace coefficient (1 in the paper).
      clip_rho: ``rho_bar`` (``None``: no clipping).
      clip_c: ``c_bar`` (``None``: no clipping).
      clip_pg_rho: ``rho_bar`` of the policy-gradient weights (``None``: no clipping).
      valid_t: ``[T, ...]`` bool, False on idle steps (an agent absent from the episode;
        ``Trajectory.valid``), or ``None`` (all valid). An idle step contributes nothing:
        its ``delta_t`` and trace are 0, so ``v_s = V(x_s)`` and ``pg_advantage = 0``
        there, and a valid step followed by an idle one bootstraps from ``v_tp1`` alone
        (in practice idle steps fill whole episodes, cut off by ``done_t`` anyway).

    Returns:
      ``VTraceOutput(vs, vs_tp1, pg_advantage, rho)``, each ``[T, ...]`` float.
    """
    chex.assert_rank([v_t, v_tp1, r_t, discount_t, done_t, log_rho_t], v_t.ndim)
    chex.assert_equal_shape([v_t, v_tp1, r_t, discount_t, done_t, log_rho_t])
    chex.assert_type([v_t, v_tp1, r_t, discount_t, log_rho_t], float)

    dtype = v_t.dtype
    lambda_ = jnp.broadcast_to(jnp.asarray(lambda_, dtype), v_t.shape)
    ratio = jnp.exp(log_rho_t)
    rho = ratio if clip_rho is None else jnp.minimum(clip_rho, ratio)
    c = lambda_ * (ratio if clip_c is None else jnp.minimum(clip_c, ratio))
    pg_rho = ratio if clip_pg_rho is None else jnp.minimum(clip_pg_rho, ratio)
    not_done = 1.0 - done_t.astype(dtype)
    valid = jnp.ones(v_t.shape, bool) if valid_t is None else valid_t.astype(bool)
    chex.assert_equal_shape([v_t, valid])

    # `where`, not a product: whatever an idle step holds never reaches the targets.
    delta = jnp.where(valid, rho * (r_t + discount_t * v_tp1 - v_t), 0.0)  # [T, ...]
    # weight of (v_{t+1} - V(x_{t+1})) in v_t - V(x_t):
    trace = jnp.where(valid, discount_t * c * not_done, 0.0)

    def step(acc_tp1, inputs):
        d, tr = inputs
        acc = d + tr * acc_tp1
        return acc, acc

    # acc_t = v_t - V(x_t); acc_T = 0 (the bootstrap value is its own target).
    _, acc = jax.lax.scan(step, jnp.zeros_like(delta[0]), (delta, trace), reverse=True)
    vs = v_t + acc
    acc_tp1 = jnp.concatenate([acc[1:], jnp.zeros_like(acc[:1])], axis=0)
    vs_tp1 = v_tp1 + not_done * acc_tp1  # v_{t+1} inside an episode, else the bootstrap
    pg_advantage = jnp.where(valid, pg_rho * (r_t + discount_t * vs_tp1 - v_t), 0.0)
    return VTraceOutput(
        vs=jax.lax.stop_gradient(vs),
        vs_tp1=jax.lax.stop_gradient(vs_tp1),
        pg_advantage=jax.lax.stop_gradient(pg_advantage),
        rho=jax.lax.stop_gradient(rho),
    )

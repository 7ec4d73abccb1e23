"""The PPO loss, its per-minibatch metrics and PopArt value normalisation.

Shared by the feed-forward (``agents/ppo.py``) and recurrent (``agents/ppo_recurrent.py``)
PPO learners, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents import normalization as nz


RATIO_CLIPS = ("symmetric", "inverse")
"""``ppo_loss``'s clipping intervals: ``[1 - eps, 1 + eps]`` and ``[1/(1 + eps), 1 + eps]``."""


class PPOLoss(NamedTuple):
    """Output of ``ppo_loss``; every field is a scalar.

    Attributes:
      total: ``policy + vf_coef * value - ent_coef * entropy + kl_coef * KL`` (KL:
        ``approx_kl``, or the mean of ``kl_penalty`` when given).
        (what is minimised).
      policy: clipped-surrogate loss ``-L^CLIP``.
      value: ``0.5 * mean((V - G)^2)``, with the clipped variant where configured.
      entropy: mean policy entropy.
      approx_kl: ``mean((r - 1) - log r)``, an estimate of ``KL(pi_old || pi)``
        (Schulman's "k3" estimator; unbiased, and its gradient is the KL's gradient).
      clip_fraction: fraction of samples whose ratio is outside the clipping interval.
    """

    total: jax.Array
    policy: jax.Array
    value: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array


def masked_mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``mean(x)`` over the entries where ``mask`` (all when ``None``); 0 if none are."""
    if mask is None:
        return jnp.mean(x)
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def ppo_loss(
    logp: chex.Array,
    behaviour_logp: chex.Array,
    advantage: chex.Array,
    value: chex.Array,
    old_value: chex.Array,
    return_: chex.Array,
    entropy: chex.Array,
    *,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    clip_value_loss: bool = True,
    normalize_advantages: bool = True,
    kl_coef: float = 0.0,
    value_clip_eps: float | None = None,
    mask: chex.Array | None = None,
    ratio_clip: str = "symmetric",
    ratio_clamp: float = 0.0,
    kl_penalty: chex.Array | None = None,
) -> PPOLoss:
    """PPO clipped-surrogate loss (Schulman et al. 2017, eq. 7 and eq. 9).

    With ratio ``r = exp(logp - behaviour_logp)`` (first clamped to ``[1/c, c]`` when
    ``ratio_clamp = c > 0``: Sample Factory clamps to [0.05, 20], "super large/small
    values can cause numerical problems") and advantages ``A`` (standardised over the
    valid samples when ``normalize_advantages``)::

        L^CLIP = mean(min(r * A, clip(r, lo, hi) * A))
                 lo, hi = 1 - eps, 1 + eps              (ratio_clip="symmetric", the paper)
                 lo, hi = 1 / (1 + eps), 1 + eps        (ratio_clip="inverse", Sample
                                                         Factory's learner.py)
        L^V    = 0.5 * mean((V - G)^2), or with ``clip_value_loss`` (PPO2 / CleanRL)
                 0.5 * mean(max((V - G)^2, (V_old + clip(V - V_old, -eps_v, eps_v) - G)^2))
        KL     = mean((r - 1) - log r)          (estimate of KL(pi_old || pi))
        total  = -L^CLIP + vf_coef * L^V - ent_coef * mean(H) + kl_coef * KL

    The ``kl_coef`` term is the fixed KL penalty of Schulman et al. 2017 (sec. 4) used
    on top of clipping by Sample Factory (``kl_loss_coeff``); Sample Factory computes
    the KL in closed form from stored distribution parameters, this uses the sample
    estimator above, whose expectation and gradient are those of the KL.

    Args:
      logp: ``[N]`` log-probability of the taken actions under the current policy.
      behaviour_logp: ``[N]`` log-probability under the policy that acted.
      advantage: ``[N]`` advantage estimates (no gradient flows through them).
      value: ``[N]`` current value predictions ``V(s)``.
      old_value: ``[N]`` value predictions before this update, in the same units as
        ``value`` (for value clipping).
      return_: ``[N]`` value targets ``G``.
      entropy: ``[N]`` policy entropy at each state.
      clip_eps: clipping range epsilon (ratio and, if enabled, value).
      vf_coef: weight of ``L^V``.
      ent_coef: weight of the entropy bonus.
      clip_value_loss: use the clipped value loss.
      normalize_advantages: standardise ``advantage`` (mean 0, std 1, eps 1e-8).
      kl_coef: weight of the KL penalty (0: none).
      value_clip_eps: ``eps_v``, the value clipping range (``None``: ``clip_eps``, as
        CleanRL; Sample Factory's ``ppo_clip_value`` is 1.0 in normalised units).
      mask: ``[N]`` bool, the samples that count (``None``: all). Masked-out samples
        (idle rows of absent agents) contribute to no mean and get no gradient.
      ratio_clip: ``symmetric`` or ``inverse`` (the clipping interval above).
      ratio_clamp: ``c``; ``0``: no clamp.
      kl_penalty: ``[N]`` per-sample KL the penalty uses instead of the sample
        estimator (Sample Factory's closed-form ``KL(pi || pi_old)``; see
        ``agents.networks.kl_divergence``); ``approx_kl`` stays the estimator.

    Raises:
      ValueError: an unknown ``ratio_clip``.

    Returns:
      ``PPOLoss`` of scalars.
    """
    chex.assert_rank([logp, behaviour_logp, advantage, value, old_value, return_,
                      entropy], 1)
    chex.assert_equal_shape([logp, behaviour_logp, advantage, value, old_value,
                             return_, entropy])
    mean = lambda x: masked_mean(x, mask)
    advantage = jax.lax.stop_gradient(advantage)
    if normalize_advantages:
        adv_mean = mean(advantage)
        adv_std = jnp.sqrt(mean((advantage - adv_mean) ** 2))
        advantage = (advantage - adv_mean) / (adv_std + 1e-8)

    if ratio_clip not in RATIO_CLIPS:
        raise ValueError(f"ratio_clip={ratio_clip!r}; valid: {', '.join(RATIO_CLIPS)}")
    log_ratio = logp - behaviour_logp
    ratio = jnp.exp(log_ratio)
    if ratio_clamp:
        ratio = jnp.clip(ratio, 1.0 / ratio_clamp, ratio_clamp)
    low = 1.0 - clip_eps if ratio_clip == "symmetric" else 1.0 / (1.0 + clip_eps)
    clipped_ratio = jnp.clip(ratio, low, 1.0 + clip_eps)
    policy_loss = -mean(jnp.minimum(ratio * advantage, clipped_ratio * advantage))

    value_err = (value - return_) ** 2
    if clip_value_loss:
        eps_v = clip_eps if value_clip_eps is None else value_clip_eps
        clipped_value = old_value + jnp.clip(value - old_value, -eps_v, eps_v)
        value_err = jnp.maximum(value_err, (clipped_value - return_) ** 2)
    value_loss = 0.5 * mean(value_err)

    kl = mean((jnp.exp(log_ratio) - 1.0) - log_ratio)  # the unclamped ratio
    mean_entropy = mean(entropy)
    total = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    if kl_coef:
        total = total + kl_coef * (kl if kl_penalty is None else mean(kl_penalty))
    return PPOLoss(
        total=total,
        policy=policy_loss,
        value=value_loss,
        entropy=mean_entropy,
        approx_kl=jax.lax.stop_gradient(kl),
        clip_fraction=jax.lax.stop_gradient(
            mean(((ratio < low) | (ratio > 1.0 + clip_eps)).astype(jnp.float32))),
    )


def minibatch_metrics(out: PPOLoss, grads, learning_rate: jax.Array) -> dict[str, jax.Array]:
    """The scalars both PPO learners log per optimiser step (averaged per update)."""
    return {
        "loss/total": out.total,
        "loss/policy": out.policy,
        "loss/value": out.value,
        "loss/entropy": out.entropy,
        "approx_kl": out.approx_kl,
        "clip_fraction": out.clip_fraction,
        "grad_norm": optax.tree.norm(grads),
        "learning_rate": jnp.asarray(learning_rate, jnp.float32),
    }


# ------------------------------------------------------------- value normalisation

def _std(stats: nz.RunningStats) -> jax.Array:
    return jnp.sqrt(stats.var + 1e-8)


def standardise(stats: nz.RunningStats, v: jax.Array) -> jax.Array:
    """Return units -> value-head units: ``(v - mu) / sigma``."""
    return (v - stats.mean) / _std(stats)


def unstandardise(stats: nz.RunningStats, n: jax.Array) -> jax.Array:
    """Value-head units -> return units: ``sigma * n + mu``."""
    return n * _std(stats) + stats.mean


def pop_art_preserve(dense: dict, old: nz.RunningStats, new: nz.RunningStats) -> dict:
    """Rescale the value head's last linear layer so its unnormalised output is unchanged.

    PopArt's "preserving outputs precisely" (van Hasselt et al. 2016, "Learning values
    across many orders of magnitude", eq. 6-7; rlax ``pop_art.art``/``pop``): when the
    return statistics move from ``(mu, sigma)`` to ``(mu', sigma')``, the layer
    ``n(s) = w . h(s) + b`` becomes::

        w' = w * sigma / sigma'
        b' = (sigma * b + mu - mu') / sigma'

    so that ``sigma' * n'(s) + mu' == sigma * n(s) + mu`` for every ``s``. Then the
    pre-update value, standardised with the new statistics, equals the head's output
    in the new units, and value clipping is centred on what the head predicts.

    Args:
      dense: ``{"kernel": [H, 1], "bias": [1]}`` of the value head's output layer.
      old: statistics the head was trained against.
      new: statistics from now on.

    Returns:
      The rescaled ``{"kernel", "bias"}`` (same shapes and dtypes).
    """
    s_old, s_new = _std(old), _std(new)
    return {**dense,
            "kernel": dense["kernel"] * (s_old / s_new),
            "bias": (s_old * dense["bias"] + old.mean - new.mean) / s_new}


def replace_at(tree: dict, path: tuple[str, ...], fn) -> dict:
    """A copy of nested dict ``tree`` with ``tree[path] = fn(tree[path])``."""
    if not path:
        return fn(tree)
    head, *rest = path
    return {**tree, head: replace_at(tree[head], tuple(rest), fn)}


def get_at(tree: dict, path: tuple[str, ...]):
    for k in path:
        tree = tree[k]
    return tree

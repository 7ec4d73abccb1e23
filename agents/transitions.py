"""Trajectory segments -> n-step transitions, the replay items of value-based agents.

An n-step transition (n-step returns: Sutton & Barto 2018, Sec. 7.1; as Ape-X uses
them, Horgan et al. 2018, Sec. 3.1 and Algorithm 1) from step ``t`` of a segment is::

    reward   = sum_{j < k} gamma^j r_{t+j}
    discount = gamma^k * (1 - terminated_{t+k-1})
    next_obs = final_obs_{t+k-1} if truncated_{t+k-1} else obs_{t+k}

with ``k = min(n, steps to the end of the episode, T - t)``: the sum stops after the
step that ends the episode (terminated or truncated) or at the segment end, whichever
comes first. So the last ``n - 1`` items of every segment sum fewer than ``n`` steps
and bootstrap from ``obs[:, T]`` (the segment's bootstrap observation): segments are
sent independently, so an item cannot look into the next one (like an Ape-X actor,
which builds transitions from its local buffer before sending them; Horgan et al.
2018, Algorithm 1). Such an item is still a correct k-step target, only a shorter one.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from jaxsrl.agent import Trajectory


def n_step_transitions(traj: Trajectory, n: int, gamma: float) -> tuple[dict, jax.Array]:
    """The ``N = B * T`` n-step transitions of a batch of segments, one per step.

    Args:
      traj: ``B`` segments of ``T`` steps (see :class:`jaxsrl.agent.Trajectory`): obs
        ``[B, T + 1, ...]`` pytree, action ``[B, T, ...]``, reward / terminated /
        truncated / policy_version ``[B, T]``, final_obs ``[B, T, ...]`` pytree, valid
        ``[B, T]`` bool or ``None``.
      n: most steps summed per item (>= 1; 1 gives one-step transitions).
      gamma: discount factor in ``[0, 1]``.

    Returns:
      ``(items, valid)``. ``items`` is a dict of ``[N, ...]`` leaves, item
      ``b * T + t`` built from step ``t`` of segment ``b`` (see the module doc for the
      formulas): ``obs`` (pytree, obs at ``t``), ``action`` (dtype kept), ``reward``
      float32, ``discount`` float32 (``gamma^k``, or 0 if the episode terminated within
      the ``k`` steps), ``next_obs`` (pytree; after a termination it is the next
      episode's first observation, finite but unused since ``discount`` is 0),
      ``policy_version`` int32 (of the action at ``t``). ``valid`` is ``[N]`` bool,
      ``traj.valid`` flattened (all True if ``None``). Windows never cross idle steps:
      by the ``Trajectory`` contract a row is idle for whole episodes, and sums stop at
      episode ends.

    Raises:
      ValueError: ``n < 1`` or ``gamma`` outside ``[0, 1]``.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n-step length n={n!r} must be an int >= 1")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discount gamma={gamma!r} must be in [0, 1]")
    B, T = traj.reward.shape
    chex.assert_shape([traj.terminated, traj.truncated, traj.policy_version], (B, T))
    reward = traj.reward.astype(jnp.float32)
    done = jnp.logical_or(traj.terminated, traj.truncated)
    t = jnp.arange(T)

    # Step j of the window of item t (j = 0..n-1, n static and small) is summed iff
    # t + j < T and none of steps t..t+j-1 ended the episode. k counts summed steps.
    pad = lambda x: jnp.pad(x, ((0, 0), (0, n)))  # [B, T + n]; padding is never summed
    reward_p, done_p = pad(reward), pad(done)
    alive = jnp.ones((B, T), bool)  # step j = 0 is always summed
    ret = jnp.zeros((B, T), jnp.float32)
    k = jnp.zeros((B, T), jnp.int32)
    for j in range(n):
        ret = ret + jnp.where(alive, gamma**j * reward_p[:, j:j + T], 0.0)
        k = k + alive.astype(jnp.int32)
        alive = alive & ~done_p[:, j:j + T] & (t + j + 1 < T)

    last = t + k - 1  # [B, T] index of the window's last step, in [t, T - 1]
    rows = jnp.arange(B)[:, None]
    terminated_last = traj.terminated[rows, last]
    truncated_last = traj.truncated[rows, last]
    discount = jnp.where(terminated_last, 0.0, jnp.float32(gamma) ** k.astype(jnp.float32))

    def next_leaf(obs_leaf, final_leaf):  # [B, T + 1, ...], [B, T, ...] -> [B, T, ...]
        mask = truncated_last.reshape((B, T) + (1,) * (obs_leaf.ndim - 2))
        return jnp.where(mask, final_leaf[rows, last], obs_leaf[rows, t + k])

    flat = lambda x: x.reshape((B * T,) + x.shape[2:])
    items = {
        "obs": jax.tree.map(lambda x: flat(x[:, :T]), traj.obs),
        "action": flat(traj.action),
        "reward": flat(ret),
        "discount": flat(discount.astype(jnp.float32)),
        "next_obs": jax.tree.map(lambda o, f: flat(next_leaf(o, f)), traj.obs, traj.final_obs),
        "policy_version": flat(traj.policy_version.astype(jnp.int32)),
    }
    valid = jnp.ones((B * T,), bool) if traj.valid is None else flat(traj.valid.astype(bool))
    return items, valid

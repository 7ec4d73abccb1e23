"""Non-finite values inside a device step (``--on_nonfinite``; ``docs/reliability.md``).

The CPU learner drops a segment holding NaN or Inf and skips an update whose new
learner state holds one (:mod:`jaxsrl.workers.learner.trainer`). A device step decides
the same inside the compiled call: :func:`bad_rows` counts the trajectory's rows holding
a non-finite value per field, :func:`keep_if` keeps the new learner state only where
every value of it and of the trajectory is finite (``where(ok, new, old)``), and the
step returns the counts, so the host counts what was skipped (and stops the run on
``on_nonfinite="raise"``) without ever keeping, publishing or checkpointing such a state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

#: The trajectory fields checked, as the CPU segment gate checks them (observations,
#: rewards, behaviour log-probabilities; ``final_obs`` is part of ``obs``).
CHECKED = ("obs", "reward", "behaviour_logp")


def _rows_finite(tree: Any, rows: int) -> jax.Array:
    """``[rows]`` bool: every inexact leaf of ``tree`` (``[rows, ...]``) finite in that row."""
    ok = jnp.ones((rows,), bool)
    for x in jax.tree.leaves(tree):
        if jnp.issubdtype(x.dtype, jnp.inexact):
            ok &= jnp.all(jnp.isfinite(x).reshape(rows, -1), axis=1)
    return ok


def bad_rows(traj: Any) -> dict[str, jax.Array]:
    """``{field: [] int32}``: rows of ``traj`` (a :class:`~jaxsrl.core.agent.Trajectory`,
    ``[B, T, ...]`` leaves) holding NaN or Inf in ``obs`` (with ``final_obs``),
    ``reward`` and ``behaviour_logp``, and ``"any"``: rows holding one in any of them."""
    rows = traj.reward.shape[0]
    fields = {"obs": (traj.obs, traj.final_obs), "reward": traj.reward,
              "behaviour_logp": traj.behaviour_logp}
    ok = {k: _rows_finite(v, rows) for k, v in fields.items()}
    out = {k: jnp.sum(~v, dtype=jnp.int32) for k, v in ok.items()}
    out["any"] = jnp.sum(~(ok["obs"] & ok["reward"] & ok["behaviour_logp"]), dtype=jnp.int32)
    return out


def all_finite(tree: Any) -> jax.Array:
    """``[]`` bool: every inexact leaf of ``tree`` is finite everywhere."""
    ok = jnp.bool_(True)
    for x in jax.tree.leaves(tree):
        if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact):
            ok &= jnp.all(jnp.isfinite(x))
    return ok


def keep_if(ok: jax.Array, new: Any, old: Any) -> Any:
    """``new`` where ``ok`` (``[]`` bool), else ``old`` (same structure)."""
    return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)


def health(bad: dict[str, jax.Array], skipped: jax.Array) -> dict:
    """The step's report (``[]`` int32 each): ``bad/<field>``, the trajectory's rows
    holding NaN or Inf in that field (:func:`bad_rows`), and ``skipped``, the learn
    calls whose result was not kept."""
    return {**{f"bad/{k}": v for k, v in bad.items()}, "skipped": skipped.astype(jnp.int32)}

"""Metrics of the replay buffer as a flat dict of floats (``replay/...`` keys).

Staleness of a sampled item is the learner's current policy version minus the
``policy_version`` the item was collected with (``Trajectory.policy_version``, carried
into the items by ``to_items``): how many updates old the behaviour policy is. It is
accumulated on the device per sampled batch (no host sync per update) and read, then
reset, by :meth:`ReplayStats.metrics`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def policy_version_of(items: Any) -> jax.Array:
    """The ``[B]`` int32 ``policy_version`` leaf of items (a dict key or an attribute).

    Raises:
      KeyError: the items have no ``policy_version``.
    """
    if isinstance(items, dict):
        if "policy_version" in items:
            return items["policy_version"]
    elif hasattr(items, "policy_version"):
        return items.policy_version
    raise KeyError(f"items of type {type(items).__name__} have no policy_version leaf")


@jax.jit
def _accumulate(acc, versions, current):
    age = (current - versions).astype(jnp.float32)  # [B]
    return {"sum": acc["sum"] + jnp.sum(age), "max": jnp.maximum(acc["max"], jnp.max(age)),
            "count": acc["count"] + age.shape[0]}


class ReplayStats:
    """Collects staleness of sampled batches; :meth:`metrics` adds the buffer's counters."""

    def __init__(self):
        self._acc = None

    def record_sample(self, items: Any, current_version: int) -> None:
        """Add one sampled batch's staleness (``items`` as ``ReplayBatch.items``)."""
        if self._acc is None:
            self._acc = {"sum": jnp.float32(0), "max": jnp.float32(-np.inf), "count": jnp.int32(0)}
        self._acc = _accumulate(self._acc, policy_version_of(items), jnp.int32(current_version))

    def metrics(self, replay, limiter=None) -> dict[str, float]:
        """Flat metrics; staleness over the batches recorded since the last call.

        Keys: ``replay/size``, ``replay/inserts``, ``replay/samples``,
        ``replay/bad_priorities``; with a prioritised buffer ``replay/priority_mean``,
        ``replay/priority_max`` (of ``p_i^alpha`` over held items); with ``limiter``
        (a ``SampleToInsertRatio``) ``replay/ratio`` (its ``achieved_ratio``) and
        ``replay/updates_allowed``; after :meth:`record_sample`, ``replay/staleness_mean``
        and ``replay/staleness_max`` (policy versions).
        """
        out = {"replay/size": float(replay.size), "replay/inserts": float(replay.inserts),
               "replay/samples": float(replay.samples),
               "replay/bad_priorities": float(replay.bad_priorities)}
        out.update({f"replay/{k}": v for k, v in replay.priority_stats().items()})
        if limiter is not None:
            out["replay/ratio"] = float(limiter.achieved_ratio)
            out["replay/updates_allowed"] = float(limiter.updates_allowed(replay.spec.batch_size))
        if self._acc is not None:
            acc = jax.device_get(self._acc)
            out["replay/staleness_mean"] = float(acc["sum"] / max(int(acc["count"]), 1))
            out["replay/staleness_max"] = float(acc["max"])
            self._acc = None
        return out

"""The ``segment`` message of the sample stream: its arrays' names, its schema, and the
:class:`~jaxsrl.core.agent.Trajectory` a batch of them becomes.

Arrays (``n`` rows, ``T`` steps; see ``docs/architecture.md``): the observation leaves
``obs...`` ``[n, T+1, ...]`` (wire names of :mod:`jaxsrl.streams.spaces`), their
``final_obs...`` ``[n, T, ...]``, ``action``, ``reward``, ``terminated``, ``truncated``,
``logp``, ``version`` ``[n, T]``, ``valid`` ``[n, T]`` bool for environments with idle
rows, and the carry leaves ``carry/i`` ``[n, ...]``.

No JAX here (actors import this): the carry's pytree is rebuilt by the
:class:`~jaxsrl.streams.carry.CarryCodec` passed in.
"""

from __future__ import annotations

from typing import Any, Mapping

from jaxsrl.core.agent import Trajectory
from jaxsrl.streams.spaces import action_leaf, obs_schema, space_leaves, unflatten_obs
from jaxsrl.streams.wire import ArraySpec

#: arrays of a segment that are not observations or carry leaves.
STEP_ARRAYS = ("action", "reward", "terminated", "truncated", "logp", "version")


def final_name(obs_name: str) -> str:
    """Wire name of the final observation of observation leaf ``obs_name``
    (``obs`` -> ``final_obs``, ``obs/pos`` -> ``final_obs/pos``)."""
    return "final_" + obs_name


def segment_schema(observation_space, action_space, T: int, carry: Any = None,
                   idle_rows: bool = False) -> dict:
    """Wire schema ``{name: ArraySpec}`` of a ``segment`` message with ``T`` steps (rows
    left free).

    Args:
      observation_space, action_space: per-row spaces.
      T: steps per segment.
      carry: the agent's :class:`~jaxsrl.streams.carry.CarryCodec` (its ``schema()``),
        or ``None`` for no carry arrays.
      idle_rows: environments whose rows may belong to absent agents
        (``jaxsrl.envs.env_has_idle_rows``): include ``valid`` ``[rows, T]`` bool, False
        on idle steps; otherwise segments carry no such array (every step is valid).

    Raises:
      ValueError: an unsupported observation or action space.
    """
    adtype, ashape = action_leaf(action_space)
    schema = obs_schema(observation_space, lead=(None, T + 1))
    schema.update(obs_schema(observation_space, prefix=final_name("obs"), lead=(None, T)))
    S = ArraySpec
    schema.update(action=S(adtype, (None, T) + ashape), reward=S("float32", (None, T)),
                  terminated=S("bool", (None, T)), truncated=S("bool", (None, T)),
                  logp=S("float32", (None, T)), version=S("int32", (None, T)))
    if idle_rows:
        schema.update(valid=S("bool", (None, T)))
    if carry is not None:
        schema.update(carry.schema())
    return schema


def to_trajectory(arrays: Mapping[str, Any], observation_space, carry: Any = None) -> Trajectory:
    """The :class:`~jaxsrl.core.agent.Trajectory` of a batch of segments' arrays
    (``[B, ...]`` each, names as in :func:`segment_schema`).

    Args:
      arrays: name -> host array.
      observation_space: per-row observation space (names the observation leaves).
      carry: the agent's ``CarryCodec`` (``None``: no carry, ``Trajectory.carry`` is
        ``None``).
    """
    names = list(space_leaves(observation_space))
    return Trajectory(
        obs=unflatten_obs({k: arrays[k] for k in names}),
        action=arrays["action"], reward=arrays["reward"], terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        final_obs=unflatten_obs({k: arrays[final_name(k)] for k in names}),
        behaviour_logp=arrays["logp"], policy_version=arrays["version"],
        carry=carry.to_tree(arrays) if carry is not None else None, valid=arrays.get("valid"))

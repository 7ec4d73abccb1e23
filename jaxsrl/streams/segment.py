"""The ``segment`` message of the sample stream: its arrays' names, its schema, and the
:class:`~jaxsrl.core.agent.Trajectory` a batch of them becomes.

Arrays (``n`` rows, ``T`` steps; see ``docs/architecture.md``): the observation leaves
``obs...`` ``[n, T+1, ...]`` (wire names of :mod:`jaxsrl.streams.spaces`), their
``final_obs...`` ``[n, T, ...]``, ``action``, ``reward``, ``terminated``, ``truncated``,
``logp``, ``version`` ``[n, T]``, ``valid`` ``[n, T]`` bool for environments with idle
rows, and the carry leaves ``carry/i`` ``[n, ...]``.

On the wire the final observations are sparse (:func:`pack_final_obs`): only those of
the ``K`` truncated steps travel, ``final_obs...`` ``[K, ...]``, with ``final_index``
``[K]`` int32, their flat step indices ``row * T + t`` in ascending order (exactly the
truncated steps). Receivers rebuild the dense ``[n, T, ...]`` arrays, zeros where not
truncated (:func:`dense_segment`); agents read ``final_obs`` only under ``truncated``
(``agents.returns.bootstrap_values``, ``agents.transitions``). A segment without
``final_index`` is the older dense encoding and is still accepted.

No JAX here (actors import this): the carry's pytree is rebuilt by the
:class:`~jaxsrl.streams.carry.CarryCodec` passed in.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from jaxsrl.core.agent import Trajectory
from jaxsrl.streams.spaces import action_leaf, obs_schema, space_leaves, unflatten_obs
from jaxsrl.streams.wire import ArraySpec, WireError, check_rows

#: arrays of a segment that are not observations or carry leaves.
STEP_ARRAYS = ("action", "reward", "terminated", "truncated", "logp", "version")
#: wire name of the sparse final observations' flat step indices (``row * T + t``).
FINAL_INDEX = "final_index"


def final_name(obs_name: str) -> str:
    """Wire name of the final observation of observation leaf ``obs_name``
    (``obs`` -> ``final_obs``, ``obs/pos`` -> ``final_obs/pos``)."""
    return "final_" + obs_name


def is_final(name: str) -> bool:
    """Whether wire name ``name`` is a final-observation leaf (``final_obs``, ``final_obs/...``)."""
    return name == "final_obs" or name.startswith("final_obs/")


def sparse_final_schema(schema: Mapping[str, ArraySpec]) -> dict:
    """Wire schema of the sparse final observations of a dense segment ``schema``
    (:func:`segment_schema`): ``final_obs...`` ``[K, ...]`` and ``final_index`` ``[K]``
    int32."""
    out = {k: ArraySpec(s.dtype, (None,) + tuple(s.shape[2:])) for k, s in schema.items()
           if is_final(k)}
    out[FINAL_INDEX] = ArraySpec("int32", (None,))
    return out


def pack_final_obs(arrays: Mapping[str, Any]) -> dict:
    """A segment's arrays as sent: the dense ``final_obs...`` ``[n, T, ...]`` leaves
    replaced by the rows of the truncated steps only, ``[K, ...]``, plus
    ``final_index`` ``[K]`` int32 (``row * T + t``, ascending; ``K = truncated.sum()``).
    Values of ``final_obs`` at steps that were not truncated are not sent. Other arrays
    are passed through (not copied)."""
    index = np.flatnonzero(np.asarray(arrays["truncated"]))
    out = {}
    for k, v in arrays.items():
        out[k] = np.asarray(v).reshape((-1,) + v.shape[2:])[index] if is_final(k) else v
    out[FINAL_INDEX] = index.astype(np.int32)
    return out


def dense_segment(arrays: Mapping[str, Any], schema: Mapping[str, ArraySpec],
                  what: str = "segment") -> tuple[dict, int]:
    """``(arrays, rows)`` of a received segment, final observations dense.

    Sparse encoding (``final_index`` present, :func:`pack_final_obs`): every other array
    is checked against ``schema`` (rows ``n`` shared), the final observations and
    ``final_index`` against :func:`sparse_final_schema` (``K`` shared); ``final_index``
    must be the flat indices of the truncated steps, ascending; the dense
    ``final_obs...`` ``[n, T, ...]`` are rebuilt with zeros where not truncated. Dense
    encoding (no ``final_index``): checked against ``schema`` as it is.

    Args:
      arrays: name -> received array.
      schema: the dense schema (:func:`segment_schema`, plus any carry leaves).
      what: the message's name in errors.

    Raises:
      WireError: a missing, unknown or wrong-typed array, disagreeing row counts, or a
        ``final_index`` out of ``0..n*T-1`` or not exactly the truncated steps.
    """
    if FINAL_INDEX not in arrays:
        return dict(arrays), check_rows(arrays, schema, what)
    sparse_names = {k for k in arrays if k == FINAL_INDEX or is_final(k)}
    out = {k: v for k, v in arrays.items() if k not in sparse_names}
    n = check_rows(out, {k: s for k, s in schema.items() if not is_final(k)}, what)
    sparse_schema = sparse_final_schema(schema)
    check_rows({k: arrays[k] for k in sparse_names}, sparse_schema, f"{what} final_obs")
    index, T = arrays[FINAL_INDEX], out["truncated"].shape[1]
    if index.size and (int(index.min()) < 0 or int(index.max()) >= n * T):
        raise WireError(f"{what}: final_index values {int(index.min())}..{int(index.max())} "
                        f"outside 0..{n * T - 1} (rows x T - 1)")
    truncated = np.flatnonzero(out["truncated"])
    if not np.array_equal(index, truncated):
        raise WireError(f"{what}: final_index lists {index.size} steps, not the "
                        f"{truncated.size} truncated steps (row * T + t, ascending)")
    for k in sparse_schema:
        if k == FINAL_INDEX:
            continue
        dense = np.zeros((n, T) + tuple(schema[k].shape[2:]), schema[k].dtype)
        dense.reshape((n * T,) + dense.shape[2:])[index] = arrays[k]
        out[k] = dense
    return out, n


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

"""Observation pytrees <-> named wire arrays, and wire schemas derived from spaces.

A ``Box`` observation travels as one array named ``"obs"``; a ``Dict`` of ``Box``es as
``"obs/<key>"`` arrays. Leading (batch) dimensions are left free in schemas.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium
import numpy as np

from jaxsrl.streams.wire import ArraySpec


def space_leaves(space: gymnasium.spaces.Space, prefix: str = "obs") -> dict:
    """Map wire names to ``(dtype_name, shape)`` of each leaf of an observation space.

    Raises:
      ValueError: the space is neither a ``Box`` nor a ``Dict`` of ``Box``es.
    """
    if isinstance(space, gymnasium.spaces.Box):
        return {prefix: (np.dtype(space.dtype).name, tuple(space.shape))}
    if isinstance(space, gymnasium.spaces.Dict):
        out = {}
        for key in sorted(space.spaces):
            out.update(space_leaves(space.spaces[key], f"{prefix}/{key}"))
        return out
    raise ValueError(f"unsupported observation space {space!r}: use Box or Dict of Box")


def obs_schema(space: gymnasium.spaces.Space, prefix: str = "obs", lead: tuple = (None,)) -> dict:
    """Wire schema ``{name: ArraySpec}`` for observations with ``lead`` leading dims."""
    return {name: ArraySpec(dtype, tuple(lead) + shape)
            for name, (dtype, shape) in space_leaves(space, prefix).items()}


def flatten_obs(obs: Any, prefix: str = "obs") -> dict:
    """Flatten an observation pytree (array or nested dict) into named arrays."""
    if isinstance(obs, Mapping):
        out = {}
        for key in sorted(obs):
            out.update(flatten_obs(obs[key], f"{prefix}/{key}"))
        return out
    return {prefix: np.asarray(obs)}


def unflatten_obs(named: Mapping[str, np.ndarray], prefix: str = "obs") -> Any:
    """Inverse of :func:`flatten_obs` for the names under ``prefix``."""
    if prefix in named:
        return named[prefix]
    tree: dict = {}
    for name, value in named.items():
        if not name.startswith(prefix + "/"):
            continue
        parts = name[len(prefix) + 1:].split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def action_leaf(space: gymnasium.spaces.Space) -> tuple:
    """``(dtype_name, per-row shape)`` of actions on the wire for an action space.

    Raises:
      ValueError: unsupported action space.
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        return "int32", ()
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return "int32", tuple(space.shape)
    if isinstance(space, gymnasium.spaces.Box):
        return "float32", tuple(space.shape)
    raise ValueError(f"unsupported action space {space!r}: use Discrete, MultiDiscrete or Box")

"""Hide-and-seek (Baker et al. 2019) on MuJoCo as a PettingZoo ``ParallelEnv``.

Public API: ``make_env(variant="quadrant", **overrides)``, ``HideAndSeekEnv``,
``HideAndSeekConfig``, ``make_config``, ``Layout`` (hand-built arenas via
``reset(options={"layout": ...})``) and ``VARIANTS``. See ``docs/hide_and_seek.md``.
Imports no JAX.
"""

import functools

from jaxsrl.envs.hide_and_seek.config import VARIANTS, HideAndSeekConfig, make_config
from jaxsrl.envs.hide_and_seek.env import ACTION_DIMS, HideAndSeekEnv, make_env
from jaxsrl.envs.hide_and_seek.layout import Layout, generate_layout, outer_walls

ENV_FACTORIES = {
    "hide_and_seek": functools.partial(make_env, "quadrant"),
    "hide_and_seek_full": functools.partial(make_env, "full"),
}
"""``--env`` names -> factories ``(**overrides) -> HideAndSeekEnv``, for the env registry."""

__all__ = [
    "ENV_FACTORIES",
    "ACTION_DIMS",
    "HideAndSeekConfig",
    "HideAndSeekEnv",
    "Layout",
    "VARIANTS",
    "generate_layout",
    "make_config",
    "make_env",
    "outer_walls",
]

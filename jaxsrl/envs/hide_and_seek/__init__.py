"""Hide-and-seek (Baker et al. 2019) on MuJoCo as a PettingZoo ``ParallelEnv``.

Public API: ``make_env(variant="quadrant", **overrides)``, ``HideAndSeekEnv``,
``HideAndSeekConfig``, ``make_config``, ``Layout`` (hand-built arenas via
``reset(options={"layout": ...})``) and ``VARIANTS``. See ``docs/hide_and_seek.md``.
Imports no JAX.
"""

from jaxsrl.envs.hide_and_seek.config import VARIANTS, HideAndSeekConfig, make_config
from jaxsrl.envs.hide_and_seek.env import ACTION_DIMS, HideAndSeekEnv, make_env
from jaxsrl.envs.hide_and_seek.layout import Layout, generate_layout, outer_walls

__all__ = [
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

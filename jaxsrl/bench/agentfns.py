"""Build the configured agent's pure functions and the device mesh, as the launcher does."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs import env_spaces, env_teams
from jaxsrl.parallel import devices
from jaxsrl.streams.carry import CarryCodec


class Built(NamedTuple):
    """What the accelerator-side rungs need.

    Attributes:
      fns: the agent's ``AgentFns``.
      observation_space, action_space: per-row (per-agent) spaces.
      mesh: the local device mesh.
      rows_per_env: agents (rows) per environment (1 for single-agent envs).
    """

    fns: Any
    observation_space: Any
    action_space: Any
    mesh: Any
    rows_per_env: int


def enable_compilation_cache(cfg) -> None:
    """Use the run config's persistent XLA cache, like ``jaxsrl.launch.launcher.train``."""
    if cfg.compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(cfg.compilation_cache_dir))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def rows_per_env(cfg) -> int:
    """Agents per environment of ``cfg.env`` (1 where the registry has no teams)."""
    return len(env_teams(cfg.env, cfg.env_kwargs))


def build(cfg) -> Built:
    """``agent.make`` for ``cfg``'s agent and environment, plus the local mesh."""
    enable_compilation_cache(cfg)
    obs_space, action_space = env_spaces(cfg.env, cfg.env_kwargs)
    rows = rows_per_env(cfg)
    fns = get_agent(cfg.agent).make(cfg.agent_config(), EnvSpec(obs_space, action_space),
                                    cfg.num_updates(rows))
    return Built(fns, obs_space, action_space, devices.local_mesh(), rows)


def carry_spec(fns) -> list:
    """``[[name, dtype, shape], ...]`` of the agent's recurrent state on the wire."""
    return CarryCodec(fns.initial_carry).spec()

"""Build the configured agent's pure functions and the device mesh, as the launcher does
(through :mod:`jaxsrl.experiment.agent_build`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.parallel import devices
from jaxsrl.parallel.compile_cache import enable_compilation_cache
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


def build(cfg) -> Built:
    """``agent.make`` for ``cfg``'s agent and environment (learning-rate schedules planned
    as for a run feeding every agent to one policy), plus the local mesh; uses the run
    config's XLA cache like ``jaxsrl.launch.launcher.train``."""
    enable_compilation_cache(cfg.compilation_cache_dir)
    factory = factory_of_run(cfg)
    rows = factory.env.rows_of(None)
    fns = factory.make(cfg.num_updates(rows))
    return Built(fns, factory.env.observation_space, factory.env.action_space,
                 devices.local_mesh(), rows)


def carry_spec(fns) -> list:
    """``[[name, dtype, shape], ...]`` of the agent's recurrent state on the wire."""
    return CarryCodec(fns.initial_carry).spec()

"""Building an agent's pure functions from names: the one place that turns (agent name,
its hyperparameters, env id, env kwargs) into :class:`~jaxsrl.core.agent.AgentFns`.

Every process that needs an agent builds it here: the launcher (from the run config),
a remote inference server and a learner process (from the JSON spec the launcher sends
them, :func:`agent_spec`), evaluation (from a run's ``config.json``) and the benchmark::

    factory = factory_of_run(cfg)            # or factory_of_spec(spec) in a child process
    fns = factory.make(num_updates)          # agent.make(config, EnvSpec, num_updates)
    factory.env.teams                        # team of each agent of one environment
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

from agents import get_agent
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec
from jaxsrl.envs import EnvInfo, env_info
from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.experiment.config import to_dict

log = logging.getLogger("jaxsrl.experiment.agent_build")


def agent_config_from_dict(config_cls: type, data: Mapping | None) -> Any:
    """Rebuild an agent's config dataclass from its JSON form.

    Lists become tuples where the default is a tuple (e.g. ``hidden_sizes``); keys the
    dataclass does not know are ignored with a warning (older or newer code).
    """
    data = dict(data or {})
    kwargs = {}
    for field in dataclasses.fields(config_cls):
        if field.name not in data:
            continue
        value = data.pop(field.name)
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory() if field.default_factory is not dataclasses.MISSING
                   else None)
        if isinstance(value, list) and isinstance(default, tuple):
            value = tuple(value)
        kwargs[field.name] = value
    if data:
        log.warning("ignoring unknown %s keys in config.json: %s", config_cls.__name__, sorted(data))
    return config_cls(**kwargs)


@dataclasses.dataclass(frozen=True)
class AgentFactory:
    """An agent, its hyperparameters and its environment: everything ``make`` needs but
    the number of planned updates.

    Attributes:
      agent: the registered agent.
      config: its config dataclass (hyperparameters).
      env: the environment's spaces and teams.
    """

    agent: Agent
    config: Any
    env: EnvInfo

    @property
    def spec(self) -> EnvSpec:
        """The per-agent spaces, as ``Agent.make`` takes them."""
        return EnvSpec(self.env.observation_space, self.env.action_space)

    def make(self, num_updates: int = 1) -> AgentFns:
        """``agent.make(config, spec, num_updates)``; ``num_updates`` is the horizon of
        learning-rate schedules (1 where only ``act`` or ``init`` is used)."""
        return self.agent.make(self.config, self.spec, num_updates)


def agent_factory(agent: str, agent_config: Any, env: str, env_kwargs: Mapping | None = None,
                  registry: dict | None = None) -> AgentFactory:
    """Look the agent up and read the environment.

    Args:
      agent: ``--agent``: a registry name or ``module:OBJ``.
      agent_config: the agent's config dataclass, or its JSON form (a dict, or ``None``
        for the defaults; see :func:`agent_config_from_dict`).
      env: ``--env``.
      env_kwargs: ``--env_kwargs``.
      registry: agent registry (default ``agents.AGENTS``).

    Raises:
      ValueError: an unknown agent or environment.
    """
    found = get_agent(agent, registry)
    if agent_config is None or isinstance(agent_config, Mapping):
        agent_config = agent_config_from_dict(found.config_cls, agent_config)
    return AgentFactory(found, agent_config, _env_info(env, dict(env_kwargs or {})))


def _env_info(env: str, env_kwargs: dict) -> EnvInfo:
    """:func:`jaxsrl.envs.env_info`, or for a JAX-native ``env`` the spaces of its
    adapter (single-agent; its library is imported here, only for such an id)."""
    if is_jax_native(env):
        from jaxsrl.envs.jax_native import registry  # noqa: PLC0415  (imports JAX and gymnax)
        return EnvInfo(*registry.spaces(env, env_kwargs), [None])
    return env_info(env, env_kwargs)


def factory_of_run(cfg: Any) -> AgentFactory:
    """The agent of a run config (:func:`jaxsrl.experiment.config.load_config`)."""
    return agent_factory(cfg.agent, cfg.agent_config(), cfg.env, cfg.env_kwargs)


def agent_spec(cfg: Any) -> dict:
    """The agent of a run config as JSON-able spec keys for a child process
    (``agent``, ``agent_config``, ``env``, ``env_kwargs``); :func:`factory_of_spec`
    rebuilds it there."""
    return {"agent": cfg.agent, "agent_config": to_dict(cfg.agent_config()),
            "env": cfg.env, "env_kwargs": dict(cfg.env_kwargs or {})}


def factory_of_spec(spec: Mapping) -> AgentFactory:
    """The agent named by a child process's spec (see :func:`agent_spec`).

    Raises:
      KeyError: the spec lacks ``agent`` or ``env``.
      ValueError: an unknown agent or environment.
    """
    return agent_factory(spec["agent"], spec.get("agent_config"), spec["env"],
                         spec.get("env_kwargs"))

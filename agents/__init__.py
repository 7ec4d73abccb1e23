"""Agent registry: ``--agent=NAME`` resolves through ``AGENTS``, ``--agent=module:OBJ``
through an import (any :class:`~jaxsrl.core.agent.Agent` object in an importable module)."""

from __future__ import annotations

from agents import dqn, impala, ppo, sac
from jaxsrl.core.agent import Agent
from jaxsrl.core.imports import import_object, is_reference

AGENTS: dict[str, Agent] = {
    ppo.AGENT.name: ppo.AGENT,
    impala.AGENT.name: impala.AGENT,
    sac.AGENT.name: sac.AGENT,
    dqn.AGENT.name: dqn.AGENT,
}

HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    ppo.AGENT.name: ppo.HYPERPARAMETERS,
    impala.AGENT.name: impala.HYPERPARAMETERS,
}
"""Per built-in agent, the config fields its ``learn`` reads from ``state.hyper`` (the
ones population-based training may change without recompiling; see
``jaxsrl/population/search_space.py``). An agent of your own declares them as a
``HYPERPARAMETERS`` tuple in its module."""


def get_agent(name: str, registry: dict[str, Agent] | None = None) -> Agent:
    """The agent ``name`` names: a key of ``registry`` (default :data:`AGENTS`) or a
    ``package.module:OBJECT`` reference to an ``Agent``.

    Raises:
      ValueError: an unknown name (listing the valid ones), a reference that cannot be
        imported, or an object that is not an ``Agent``.
    """
    registry = AGENTS if registry is None else registry
    if name in registry:
        return registry[name]
    if not is_reference(name):
        raise ValueError(f"unknown agent {name!r}; valid agents: {sorted(registry)} "
                         "(or package.module:AGENT for your own)")
    agent = import_object(name, "--agent")
    if not isinstance(agent, Agent):
        raise ValueError(f"--agent={name} is a {type(agent).__name__}, not a jaxsrl.core.agent.Agent "
                         "(Agent(name, config_cls, make))")
    if not agent.name.isidentifier():
        raise ValueError(f"--agent={name}: Agent.name={agent.name!r} must be a Python identifier "
                         "(it names the --<name>.<field> flags)")
    return agent

"""Agent registry: ``--agent=NAME`` resolves through ``AGENTS``, ``--agent=module:OBJ``
through an import (any :class:`~jaxsrl.agent.Agent` object in an importable module)."""

from __future__ import annotations

from agents import dqn, impala, ppo
from jaxsrl.agent import Agent
from jaxsrl.imports import import_object, is_reference

AGENTS: dict[str, Agent] = {
    ppo.AGENT.name: ppo.AGENT,
    impala.AGENT.name: impala.AGENT,
    dqn.AGENT.name: dqn.AGENT,
}


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
        raise ValueError(f"--agent={name} is a {type(agent).__name__}, not a jaxsrl.agent.Agent "
                         "(Agent(name, config_cls, make))")
    if not agent.name.isidentifier():
        raise ValueError(f"--agent={name}: Agent.name={agent.name!r} must be a Python identifier "
                         "(it names the --<name>.<field> flags)")
    return agent

"""Agent registry: ``--agent=NAME`` resolves through ``AGENTS``."""

from __future__ import annotations

from agents import impala, ppo
from jaxsrl.agent import Agent

AGENTS: dict[str, Agent] = {
    ppo.AGENT.name: ppo.AGENT,
    impala.AGENT.name: impala.AGENT,
}


def get_agent(name: str) -> Agent:
    """The registered agent called ``name``; ``ValueError`` listing valid names if none."""
    try:
        return AGENTS[name]
    except KeyError:
        raise ValueError(
            f"unknown agent {name!r}; valid agents: {', '.join(sorted(AGENTS))}"
        ) from None

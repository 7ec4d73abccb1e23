"""Environment registry: one place maps an ``--env`` name to how actors build it.

Any Gymnasium id works (``CartPole-v1``, ``ALE/Pong-v5``, ...). Names in
:data:`MULTI_AGENT_ENVS` are PettingZoo-style parallel environments of our own.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from jaxsrl.envs.gym_vector import GymVectorEnv, single_spaces

#: multi-agent environments of jaxsrl: name -> (module, factory keyword defaults).
MULTI_AGENT_ENVS = {
    "hide_and_seek": ("jaxsrl.envs.hide_and_seek", {"variant": "quadrant"}),
    "hide_and_seek_full": ("jaxsrl.envs.hide_and_seek", {"variant": "full"}),
}


def check_env_name(env_id: str) -> None:
    """Raise ``ValueError`` naming ``env_id`` if it is neither ours nor a Gymnasium id."""
    if env_id in MULTI_AGENT_ENVS:
        return
    try:
        gymnasium.spec(env_id)
    except Exception:
        ours = ", ".join(sorted(MULTI_AGENT_ENVS))
        raise ValueError(f"unknown environment {env_id!r}: not a registered Gymnasium id "
                         f"and not one of jaxsrl's ({ours})") from None


def make_actor_env(env_id: str, num_envs: int, seed: int, env_kwargs: dict | None = None) -> Any:
    """Build the group of ``num_envs`` environments that one actor ring slot steps."""
    check_env_name(env_id)
    if env_id in MULTI_AGENT_ENVS:
        from jaxsrl.envs.multi_agent import MultiAgentVectorEnv  # noqa: PLC0415
        module, defaults = MULTI_AGENT_ENVS[env_id]
        return MultiAgentVectorEnv(module, {**defaults, **(env_kwargs or {})}, num_envs, seed)
    return GymVectorEnv(env_id, num_envs, seed, env_kwargs)


def _make_multi_agent(env_id: str, env_kwargs: dict | None) -> Any:
    import importlib  # noqa: PLC0415
    module, defaults = MULTI_AGENT_ENVS[env_id]
    return importlib.import_module(module).make_env(**{**defaults, **(env_kwargs or {})})


def env_spaces(env_id: str, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """Per-agent ``(observation_space, action_space)`` of ``env_id``."""
    check_env_name(env_id)
    if env_id in MULTI_AGENT_ENVS:
        env = _make_multi_agent(env_id, env_kwargs)
        agent = env.possible_agents[0]
        return env.observation_space(agent), env.action_space(agent)
    return single_spaces(env_id, env_kwargs)


def env_teams(env_id: str, env_kwargs: dict | None = None) -> list:
    """Team of each agent of one environment (``[None]`` for single-agent envs)."""
    check_env_name(env_id)
    if env_id in MULTI_AGENT_ENVS:
        env = _make_multi_agent(env_id, env_kwargs)
        return [env.team_of(a) for a in env.possible_agents]
    return [None]

"""Environment registry: one place maps an ``--env`` name to how actors build it.

Any Gymnasium id works (``CartPole-v1``, ...). ``ALE/<Game>-v5`` ids get the standard
Atari preprocessing of :mod:`jaxsrl.envs.atari` (84x84x4 uint8 frames; actors train on
clipped rewards and per-life episodes but report raw whole-game returns). Names in
:data:`MULTI_AGENT_ENVS` are PettingZoo-style parallel environments of our own.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from jaxsrl.envs import atari
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
    if atari.is_atari(env_id):
        atari.register()  # ValueError if ale-py is missing
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
    if atari.is_atari(env_id):
        return GymVectorEnv(env_id, num_envs, seed, env_fn=atari.env_fn(env_id, env_kwargs),
                            episodes_from_info=True)
    return GymVectorEnv(env_id, num_envs, seed, env_kwargs)


def make_env(env_id: str, env_kwargs: dict | None = None, render_mode: str | None = None) -> Any:
    """One single-agent Gymnasium env for evaluation (Atari: full games, raw rewards)."""
    check_env_name(env_id)
    if env_id in MULTI_AGENT_ENVS:
        raise ValueError(f"{env_id!r} is multi-agent: use its module's make_env")
    if atari.is_atari(env_id):
        return atari.make_env(env_id, env_kwargs, training=False, render_mode=render_mode)
    return gymnasium.make(env_id, render_mode=render_mode, **(env_kwargs or {}))


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
    if atari.is_atari(env_id):
        return atari.spaces(env_id, env_kwargs)
    return single_spaces(env_id, env_kwargs)


def env_has_idle_rows(env_id: str) -> bool:
    """Whether ``env_id``'s actor groups report per-row validity (``StepResult.valid``):
    True for the multi-agent environments (agents may be absent from an episode), whose
    segments then carry ``valid`` flags; single-agent traffic carries none."""
    check_env_name(env_id)
    return env_id in MULTI_AGENT_ENVS


def env_teams(env_id: str, env_kwargs: dict | None = None) -> list:
    """Team of each agent of one environment (``[None]`` for single-agent envs)."""
    check_env_name(env_id)
    if env_id in MULTI_AGENT_ENVS:
        env = _make_multi_agent(env_id, env_kwargs)
        return [env.team_of(a) for a in env.possible_agents]
    return [None]

"""Environment registry: one place maps an ``--env`` name to how actors build it.

Any Gymnasium id works (``CartPole-v1``, ...), and so does Gymnasium's
``module:EnvId`` form (``corridor:Corridor-v0``): ``module`` is imported first, in every
process that builds the env (actors included), so its ``gymnasium.register`` calls run.
``ALE/<Game>-v5`` ids get the standard Atari preprocessing of :mod:`jaxsrl.envs.atari`
(84x84x4 uint8 frames; actors train on clipped rewards and per-life episodes but report
raw whole-game returns). Multi-agent games are PettingZoo-style parallel environments:
the names in :data:`MULTI_AGENT_ENVS` (ours), or ``module:factory`` for a function of
yours returning a ``pettingzoo.ParallelEnv`` (``docs/writing_an_agent.md``, "A custom
environment"). JAX-native ids (``gymnax:CartPole-v1``, :mod:`jaxsrl.envs.jax_native`) pass
:func:`check_env_name` but are stepped by device actors only: the functions here that
build a CPU environment refuse them (:func:`_refuse_jax_native`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import gymnasium

from jaxsrl.envs import atari
from jaxsrl.envs.gym_vector import GymVectorEnv, single_spaces
from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.envs.mujoco_warnings import quiet_repeats
from jaxsrl.envs.multi_agent import MultiAgentVectorEnv
from jaxsrl.core.imports import import_module, is_reference

#: multi-agent environments of jaxsrl: name -> (module, factory keyword defaults).
MULTI_AGENT_ENVS = {
    "hide_and_seek": ("jaxsrl.envs.hide_and_seek", {"variant": "quadrant"}),
    "hide_and_seek_full": ("jaxsrl.envs.hide_and_seek", {"variant": "full"}),
}


def multi_agent_factory(env_id: str) -> Callable[..., Any] | None:
    """``factory(**env_kwargs) -> ParallelEnv`` for a multi-agent ``env_id``, else ``None``
    (a Gymnasium id). Imports the module of a ``module:...`` id.

    Raises:
      ValueError: the module of a ``module:...`` id cannot be imported.
    """
    if is_jax_native(env_id):
        return None
    if env_id in MULTI_AGENT_ENVS:
        module, defaults = MULTI_AGENT_ENVS[env_id]
        return functools.partial(import_module(module, f"--env={env_id}").make_env, **defaults)
    if not is_reference(env_id):
        return None
    module_name, _, attr = env_id.partition(":")
    module = import_module(module_name, f"--env={env_id}")
    if _registered(attr):  # module:EnvId, the module registered it
        return None
    factory = getattr(module, attr, None) if attr.isidentifier() else None
    return factory if callable(factory) else None


def gym_id(env_id: str) -> str:
    """The Gymnasium id of a single-agent ``env_id`` (``module:EnvId`` -> ``EnvId``, after
    importing ``module``)."""
    if is_reference(env_id) and not atari.is_atari(env_id):
        module_name, _, attr = env_id.partition(":")
        import_module(module_name, f"--env={env_id}")
        return attr
    return env_id


def _registered(env_id: str) -> bool:
    try:
        gymnasium.spec(env_id)
    except Exception:  # noqa: BLE001  (gymnasium raises several kinds)
        return False
    return True


def _refuse_jax_native(env_id: str) -> None:
    """``ValueError`` for a JAX-native ``env_id``: without this, ``gymnax:CartPole-v1``
    would read as ``module:EnvId`` and silently build Gymnasium's ``CartPole-v1``."""
    if is_jax_native(env_id):
        raise ValueError(f"--env={env_id} is a JAX-native environment: device actors step it "
                         "(python scripts/train.py), not CPU actors or evaluation")


def check_env_name(env_id: str) -> None:
    """Raise ``ValueError`` naming ``env_id`` if it is neither ours, a ``module:factory``,
    nor a (``module:``) Gymnasium id. A JAX-native id (``gymnax:<EnvId>``) passes here;
    its library and id are checked when the device path builds it."""
    if is_jax_native(env_id):
        return
    if multi_agent_factory(env_id) is not None:
        return
    if atari.is_atari(env_id):
        atari.register()  # ValueError if ale-py is missing
    if not _registered(gym_id(env_id)):
        ours = ", ".join(sorted(MULTI_AGENT_ENVS))
        extra = (f": module {env_id.partition(':')[0]!r} registered no Gymnasium id "
                 f"{gym_id(env_id)!r} and has no callable of that name" if is_reference(env_id) else
                 f": not a registered Gymnasium id, not module:EnvId or module:factory, "
                 f"and not one of jaxsrl's ({ours})")
        raise ValueError(f"unknown environment {env_id!r}{extra}")


def make_actor_env(env_id: str, num_envs: int, seed: int, env_kwargs: dict | None = None,
                   clip_actions: bool = True) -> Any:
    """Build the group of ``num_envs`` environments that one actor ring slot steps
    (``clip_actions``: Gymnasium ``Box`` actions, see ``GymVectorEnv``)."""
    _refuse_jax_native(env_id)
    check_env_name(env_id)
    factory = multi_agent_factory(env_id)
    if factory is not None:
        return MultiAgentVectorEnv(factory, dict(env_kwargs or {}), num_envs, seed)
    if atari.is_atari(env_id):
        return GymVectorEnv(env_id, num_envs, seed, env_fn=atari.env_fn(env_id, env_kwargs),
                            episodes_from_info=True)
    return GymVectorEnv(gym_id(env_id), num_envs, seed, env_kwargs, clip_actions=clip_actions)


def make_env(env_id: str, env_kwargs: dict | None = None, render_mode: str | None = None) -> Any:
    """One environment for evaluation: a Gymnasium env (Atari: full games, raw rewards)
    or, for a multi-agent ``env_id``, a PettingZoo ``ParallelEnv``.

    ``render_mode`` reaches the constructor only when given (not ``None``): an env
    whose constructor has no ``render_mode`` keyword is built as in training."""
    _refuse_jax_native(env_id)
    check_env_name(env_id)
    kwargs = dict(env_kwargs or {})
    if render_mode:
        kwargs["render_mode"] = render_mode
    factory = multi_agent_factory(env_id)
    if factory is not None:
        return factory(**kwargs)
    if atari.is_atari(env_id):
        return atari.make_env(env_id, env_kwargs, training=False, render_mode=render_mode)
    quiet_repeats(gym_id(env_id))
    return gymnasium.make(gym_id(env_id), **kwargs)


def is_multi_agent(env_id: str) -> bool:
    """Whether ``env_id`` is a multi-agent (PettingZoo parallel) environment."""
    return multi_agent_factory(env_id) is not None


class EnvInfo(NamedTuple):
    """What the runtime needs to know about an environment before any actor starts.

    Attributes:
      observation_space: per-agent (per-row) observation space.
      action_space: per-agent action space.
      teams: team of each agent of one environment (``[None]`` for single-agent envs;
        ``""`` for the agents of a multi-agent env without ``team_of``).
    """

    observation_space: Any
    action_space: Any
    teams: list

    def rows_of(self, team: str | None = None) -> int:
        """Rows one environment gives a stream serving ``team`` (``None``: every agent)."""
        return len(self.teams) if team is None else sum(t == team for t in self.teams)


def env_info(env_id: str, env_kwargs: dict | None = None) -> EnvInfo:
    """Spaces and teams of ``env_id``, read off one environment, which is then closed.

    Raises:
      ValueError: unknown ``env_id`` (see :func:`check_env_name`).
    """
    _refuse_jax_native(env_id)
    check_env_name(env_id)
    factory = multi_agent_factory(env_id)
    if factory is not None:
        env = factory(**(env_kwargs or {}))
        try:
            agents = list(env.possible_agents)
            team_of = getattr(env, "team_of", lambda _: "")  # optional method of a game
            return EnvInfo(env.observation_space(agents[0]), env.action_space(agents[0]),
                           [team_of(a) for a in agents])
        finally:
            env.close()
    if atari.is_atari(env_id):
        return EnvInfo(*atari.spaces(env_id, env_kwargs), [None])
    return EnvInfo(*single_spaces(gym_id(env_id), env_kwargs), [None])


def env_spaces(env_id: str, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """Per-agent ``(observation_space, action_space)`` of ``env_id`` (:func:`env_info`)."""
    info = env_info(env_id, env_kwargs)
    return info.observation_space, info.action_space


def env_has_idle_rows(env_id: str) -> bool:
    """Whether ``env_id``'s actor groups report per-row validity (``StepResult.valid``):
    True for the multi-agent environments, ours and a user's ``module:factory`` (agents
    may be absent from an episode), whose segments then carry ``valid`` flags;
    single-agent traffic carries none. The actor and the trainer both ask this, so the
    segments and the trainer's schema cannot disagree."""
    check_env_name(env_id)
    return is_multi_agent(env_id)


def env_teams(env_id: str, env_kwargs: dict | None = None) -> list:
    """Team of each agent of one environment (:attr:`EnvInfo.teams` of :func:`env_info`)."""
    return env_info(env_id, env_kwargs).teams

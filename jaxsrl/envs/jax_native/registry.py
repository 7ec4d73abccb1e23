"""The JAX-native environment of an ``--env`` id (``gymnax:CartPole-v1``,
``brax:halfcheetah``, ``jax:package.module:factory``): one place
that maps a library prefix to its adapter, imported only when used."""

from __future__ import annotations

from typing import Any

from jaxsrl.envs.jax_native import split_id


def make(env_id: str, env_kwargs: dict | None = None, clip_actions: bool = True) -> Any:
    """The batched pure environment (:class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv`,
    :class:`~jaxsrl.envs.jax_native.brax_env.BraxEnv`,
    :class:`~jaxsrl.envs.jax_native.jaxmarl_env.JaxMarlEnv`, a user's
    :class:`~jaxsrl.envs.jax_native.autoreset.AutoResetEnv`) of a JAX-native ``env_id``.

    Raises:
      ValueError: not a JAX-native id, its library is not installed (the message names
        the pip extra), an unknown environment, or an unknown ``env_kwargs`` key; for
        ``jax:``, what :func:`jaxsrl.envs.jax_native.user_env.make` refuses.
    """
    library, name = split_id(env_id)
    if library == "gymnax":
        from jaxsrl.envs.jax_native import gymnax_env
        return gymnax_env.GymnaxEnv(name, env_kwargs, clip_actions)
    if library == "brax":
        from jaxsrl.envs.jax_native import brax_env
        return brax_env.BraxEnv(name, env_kwargs, clip_actions)
    if library == "jaxmarl":
        from jaxsrl.envs.jax_native import jaxmarl_env
        return jaxmarl_env.JaxMarlEnv(name, env_kwargs, clip_actions)
    if library == "jax":
        from jaxsrl.envs.jax_native import user_env
        return user_env.make(name, env_kwargs, clip_actions)
    raise AssertionError(library)  # split_id accepts only the prefixes handled here


def spaces(env_id: str, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """Per-env ``(observation_space, action_space)`` as Gymnasium spaces (what
    ``Agent.make`` takes). Same errors as :func:`make`."""
    env = make(env_id, env_kwargs)
    return env.observation_space, env.action_space

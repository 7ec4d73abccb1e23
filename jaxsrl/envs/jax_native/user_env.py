"""A user's own JAX-native environment, ``--env=jax:package.module:factory`` (or
``jax:path/to/file.py:factory``), as device actors step it.

``factory(**env_kwargs)`` (``--env_kwargs`` go to it) returns ONE environment as pure
functions, gymnax's functional style; jaxsrl vmaps it and adds auto-reset, the time
limit, the final observation of truncated episodes and episode statistics
(:class:`~jaxsrl.envs.jax_native.autoreset.AutoResetEnv`). The object it returns has:

- ``reset(key) -> (obs, state)``: a fresh episode; ``key`` a JAX PRNG key, ``obs`` an
  array of ``observation_space.shape``, ``state`` any pytree of arrays.
- ``step(key, state, action) -> (obs, state, reward, terminated)``: one step, without
  auto-reset and without a time limit; ``reward`` a ``[]`` float, ``terminated`` a
  ``[]`` bool (a terminal state, not the time limit).
- ``observation_space``: a ``gymnasium.spaces.Box``; ``action_space``: a
  ``gymnasium.spaces.Discrete`` (``action`` an int32 ``[]``) or ``Box`` (float32).
- ``max_episode_steps``: the time limit in steps (``truncated`` when reached without
  terminating), or ``None``.

``reset`` and ``step`` must be jittable (no Python control flow on array values).
``tests/jax_cartpole.py`` is an example. ``docs/device_actors.md``, "Your own JAX-native
environment", shows the command.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax

from jaxsrl.core.imports import import_module, is_reference
from jaxsrl.envs.jax_native.autoreset import AutoResetEnv, check_spaces
from jaxsrl.streams.spaces import action_leaf

#: What the factory's environment must have (:mod:`jaxsrl.envs.jax_native.user_env`).
REQUIRED = ("reset", "step", "observation_space", "action_space", "max_episode_steps")


def make(reference: str, env_kwargs: dict | None = None, clip_actions: bool = True) -> AutoResetEnv:
    """The batched environment of ``--env=jax:<reference>``.

    Args:
      reference: ``package.module:factory`` or ``path/to/file.py:factory``.
      env_kwargs: keywords of ``factory``.
      clip_actions: ``Box`` actions clipped to the action space before stepping.

    Raises:
      ValueError: ``reference`` is not ``module:factory``, the module cannot be
        imported, it has no callable ``factory``, ``factory`` does not take an
        ``env_kwargs`` key, or what it returns lacks one of :data:`REQUIRED`, has
        unsupported spaces or time limit, or ``reset``/``step`` do not return what the
        protocol says (:func:`check_signatures`). One line each, naming the ``--env``.
    """
    what = f"--env=jax:{reference}"
    if not is_reference(reference):
        raise ValueError(f"{what}: not of the form jax:package.module:factory "
                         "(or jax:path/to/file.py:factory)")
    module_name, _, attr = reference.partition(":")
    factory = getattr(import_module(module_name, what), attr, None)
    if not callable(factory):
        raise ValueError(f"{what}: module {module_name!r} has no callable {attr!r}")
    kwargs = dict(env_kwargs or {})
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{what}: --env_kwargs {sorted(kwargs)} do not fit "
                         f"{attr}{inspect.signature(factory)} ({exc})") from None
    except ValueError:  # no signature to inspect (a builtin): the call itself tells
        pass
    env = factory(**kwargs)
    missing = [name for name in REQUIRED if not hasattr(env, name)]
    if missing:
        raise ValueError(f"{what}: {attr}() returned {type(env).__name__}, which lacks "
                         f"{', '.join(missing)} (a JAX-native env has {', '.join(REQUIRED)}; "
                         "docs/device_actors.md)")
    for name in ("reset", "step"):
        if not callable(getattr(env, name)):
            raise ValueError(f"{what}: {attr}().{name} is not callable")
    check_spaces(what, env.observation_space, env.action_space)
    check_signatures(env, what)
    return AutoResetEnv(env.reset, env.step, env.observation_space, env.action_space,
                        env.max_episode_steps, clip_actions, f"jax:{reference}")


def check_signatures(env: Any, what: str) -> None:
    """Trace ``env.reset`` and ``env.step`` once on abstract values (``jax.eval_shape``:
    nothing runs) and raise ``ValueError`` naming ``what`` unless ``reset(key)`` gives
    ``(obs, state)`` and ``step(key, state, action)`` gives ``(obs, state, reward,
    terminated)`` with ``obs`` of ``observation_space.shape``, ``state`` of the same
    structure and shapes, and ``[]`` ``reward`` and ``terminated``."""
    key = jax.random.PRNGKey(0)
    shape_of = lambda x: tuple(x.shape) if hasattr(x, "shape") else type(x).__name__

    def check_obs(name, obs):
        if shape_of(obs) != tuple(env.observation_space.shape):
            raise ValueError(f"{what}: {name} gives obs of shape {shape_of(obs)}, not "
                             f"observation_space's {tuple(env.observation_space.shape)}")

    reset = _trace(env.reset, (key,), "reset(key)", 2, "(obs, state)", what)
    check_obs("reset", reset[0])
    dtype, shape = action_leaf(env.action_space)
    step = _trace(env.step, (key, reset[1], jax.ShapeDtypeStruct(shape, dtype)),
                  "step(key, state, action)", 4, "(obs, state, reward, terminated)", what)
    check_obs("step", step[0])
    shapes = lambda tree: jax.tree.map(lambda x: tuple(x.shape), tree)
    if shapes(step[1]) != shapes(reset[1]):
        raise ValueError(f"{what}: step's state {shapes(step[1])} differs from reset's "
                         f"{shapes(reset[1])} (it must keep one structure and shape)")
    for name, x in (("reward", step[2]), ("terminated", step[3])):
        if shape_of(x) != ():
            raise ValueError(f"{what}: step gives {name} of shape {shape_of(x)}, not [] "
                             "(one environment: jaxsrl vmaps it)")


def _trace(fn: Any, args: tuple, call: str, n: int, form: str, what: str) -> tuple:
    try:
        out = jax.eval_shape(fn, *args)
    except Exception as exc:  # noqa: BLE001  (any error of the user's code, on one line)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ValueError(f"{what}: {call} cannot be traced by JAX ({type(exc).__name__}: "
                         f"{first})") from None
    if not isinstance(out, tuple) or len(out) != n:
        raise ValueError(f"{what}: {call} must return {form}, not {type(out).__name__} "
                         f"{'of ' + str(len(out)) if isinstance(out, tuple) else ''}".rstrip())
    return out

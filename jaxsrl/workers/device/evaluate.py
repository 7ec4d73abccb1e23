"""Evaluation on device actors: whole episodes of separate evaluation environments,
stepped with the agent's ``act`` under one compiled ``lax.while_loop``.

``E`` episodes are ``E`` environments (``E * A`` rows for an environment of ``A`` agents,
JaxMARL's MPE: one row per agent) reset with the evaluation's own key; each row's
first episode is kept (return, length) and the loop ends when every row's first
episode has ended (terminated, truncated, or cut at ``max_steps``). Rows whose
episode ended keep stepping (the adapters auto-reset) but count no more. The step
function is shared by the compiled loop and by a host loop that also returns the
environment states (:func:`make_evaluation`'s ``trace``), so a video shows exactly the
evaluated episodes."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class EvalCarry(NamedTuple):
    """The state of an evaluation between two steps (``R = E * A`` rows).

    Attributes:
      env: the environments' carry (``env.reset``'s, ``[R, ...]`` leaves).
      agent: the agent's carry (``initial_carry(R)``), or ``None`` (feed-forward).
      key: PRNG key of the next step.
      done: ``[R]`` bool, the row's first episode has ended.
      episode_return: ``[R]`` float32 reward summed over the row's first episode.
      episode_length: ``[R]`` int32 steps of the row's first episode.
    """

    env: Any
    agent: Any
    key: jax.Array
    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


class Evaluation(NamedTuple):
    """The functions of :func:`make_evaluation` (all pure; ``run`` is jittable).

    Attributes:
      start: ``start(key) -> EvalCarry``: fresh evaluation environments.
      step: ``step(params, carry) -> carry``: one step of every row.
      finished: ``finished(carry) -> [] bool``: every row's first episode has ended.
      run: ``run(params, key) -> (returns [E] float32, lengths [E] int32)``: the whole
        evaluation (``start``, then ``step`` until ``finished``).
      result: ``result(carry) -> (returns, lengths)`` of a finished carry: per
        environment, its agents' mean return and its length.
    """

    start: Callable
    step: Callable
    finished: Callable
    run: Callable
    result: Callable


def make_evaluation(env: Any, act: Callable, episodes: int,
                    initial_carry: Callable | None = None,
                    max_steps: int | None = None) -> Evaluation:
    """The evaluation of ``episodes`` episodes of the batched pure environment ``env``.

    Args:
      env: a device-actor environment (:mod:`jaxsrl.envs.jax_native`: ``reset(key, n)``,
        ``step(carry, action, key) -> (carry, StepOut)``; ``num_agents`` rows per
        environment if it has that attribute, else 1).
      act: ``act(params, obs, carry, rng) -> (action, carry, extras)``, e.g. the agent's
        ``act`` with ``deterministic=True`` bound (the most likely action, as the CPU
        evaluation takes it).
      episodes: ``E``, environments (one episode each).
      initial_carry: the agent's ``initial_carry(n)`` (``None`` or returning ``None``:
        feed-forward). A row's carry is not reset after its first episode: nothing
        after it counts.
      max_steps: cut an episode after this many steps (``None``: the environment's own
        time limit ends it).

    Keys: ``key`` is split into the reset key (``env.reset(k, E * A)``) and the loop's;
    at every step the loop's key is split into ``(next, k_act, k_env)``.

    Raises:
      ValueError: ``episodes`` < 1 or ``max_steps`` < 1.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1")
    agents = int(getattr(env, "num_agents", 1))
    rows = episodes * agents
    recurrent = initial_carry is not None and initial_carry(1) is not None

    def start(key):
        k_reset, k_loop = jax.random.split(key)
        return EvalCarry(env.reset(k_reset, rows), initial_carry(rows) if recurrent else None,
                         k_loop, jnp.zeros(rows, bool), jnp.zeros(rows, jnp.float32),
                         jnp.zeros(rows, jnp.int32))

    def step(params, c: EvalCarry) -> EvalCarry:
        key, k_act, k_env = jax.random.split(c.key, 3)
        action, agent, _ = act(params, c.env.obs, c.agent, k_act)
        env_carry, out = env.step(c.env, action, k_env)
        live = ~c.done
        ret = c.episode_return + jnp.where(live, out.reward, 0.0)
        length = c.episode_length + live.astype(jnp.int32)
        done = c.done | out.episode_done
        if max_steps is not None:
            done = done | (length >= max_steps)
        return EvalCarry(env_carry, agent if recurrent else None, key, done, ret, length)

    def finished(c: EvalCarry) -> jax.Array:
        return c.done.all()

    def result(c: EvalCarry) -> tuple[jax.Array, jax.Array]:
        returns = c.episode_return.reshape(episodes, agents).mean(axis=1)
        return returns, c.episode_length.reshape(episodes, agents)[:, 0]

    def run(params, key):
        c = jax.lax.while_loop(lambda c: ~finished(c), lambda c: step(params, c), start(key))
        return result(c)

    return Evaluation(start, step, finished, run, result)


def trace(evaluation: Evaluation, params: Any, key: jax.Array) -> tuple[Any, Any, list]:
    """:attr:`Evaluation.run` step by step on the host, keeping the environment states:
    ``(returns, lengths, states)`` where ``states[t]`` is the environments' carry
    (``EnvCarry``, host arrays, ``[R, ...]`` leaves) after ``t`` steps (``states[0]``
    the reset). Same keys, hence the same episodes, as ``run``; row ``r``'s episode
    is ``states[0 .. lengths[r]]``."""
    step, finished = jax.jit(evaluation.step), jax.jit(evaluation.finished)
    c = jax.jit(evaluation.start)(key)
    states = [jax.device_get(c.env)]
    while not bool(finished(c)):
        c = step(params, c)
        states.append(jax.device_get(c.env))
    returns, lengths = jax.device_get(evaluation.result(c))
    return returns, lengths, states

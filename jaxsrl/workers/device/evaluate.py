"""Evaluation on device actors: whole episodes of separate evaluation environments,
stepped with the agent's ``act`` in compiled chunks of at most :data:`CHUNK_STEPS` steps.

``E`` episodes are ``E`` environments (``E * A`` rows for an environment of ``A`` agents,
JaxMARL's MPE: one row per agent) reset with the evaluation's own key; each row's
first episode is kept (return, length, how it ended). Rows whose episode ended keep
stepping (the adapters auto-reset) but count no more.

Every evaluation is **bounded**: an episode is cut after ``bound`` steps, where
``bound`` is the caller's ``max_steps``, else the environment's own time limit
(:func:`time_limit`), else :data:`DEFAULT_MAX_STEPS`; an episode cut there counts as
truncated (``cut``). So :meth:`Evaluation.run` (one compiled ``lax.while_loop``) ends
after at most ``bound`` steps, and :meth:`Evaluation.run_chunks` (the host's entry
point) runs the same steps as compiled calls of at most ``chunk_steps`` steps each:
a Ctrl-C or SIGTERM (a ``KeyboardInterrupt``) is raised between two calls, never
waits for a whole evaluation. The step function is shared by the compiled loop and
by a host loop that also returns the environment states (:func:`trace`), so a video
shows exactly the evaluated episodes."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.core import interrupts

#: Steps after which an evaluation episode is cut (and counted truncated) when neither
#: ``max_steps`` (``scripts/evaluate.py --max_steps``) nor the environment's own time
#: limit bounds it: a JAX-native env that never terminates nor truncates (a user's
#: ``jax:`` env with ``max_episode_steps=None``) would otherwise evaluate forever.
DEFAULT_MAX_STEPS = 10_000
#: Steps of every row per compiled call of :meth:`Evaluation.run_chunks`: the longest
#: the host waits before it can see a signal.
CHUNK_STEPS = 256


def time_limit(env: Any) -> int | None:
    """The time limit in steps of a :mod:`jaxsrl.envs.jax_native` adapter, or ``None``
    if its episodes may run forever: ``max_episode_steps`` (a user's ``jax:`` env and
    the :class:`~jaxsrl.envs.jax_native.autoreset.AutoResetEnv` ones), gymnax's
    ``params.max_steps_in_episode``, Brax's ``episode_length``, JaxMARL's ``max_steps``."""
    for value in (getattr(env, "max_episode_steps", None),
                  getattr(getattr(env, "params", None), "max_steps_in_episode", None),
                  getattr(env, "episode_length", None), getattr(env, "max_steps", None)):
        if value is not None and not isinstance(value, bool):
            try:
                steps = int(value)
            except (TypeError, ValueError):
                continue
            if steps >= 1:
                return steps
    return None


class EvalCarry(NamedTuple):
    """The state of an evaluation between two steps (``R = E * A`` rows).

    Attributes:
      env: the environments' carry (``env.reset``'s, ``[R, ...]`` leaves).
      agent: the agent's carry (``initial_carry(R)``), or ``None`` (feed-forward).
      key: PRNG key of the next step.
      done: ``[R]`` bool, the row's first episode has ended.
      episode_return: ``[R]`` float32 reward summed over the row's first episode.
      episode_length: ``[R]`` int32 steps of the row's first episode.
      terminated: ``[R]`` bool, that episode ended in a terminal state (not by the
        time limit nor cut at the bound).
      cut: ``[R]`` bool, that episode was cut at the evaluation's bound (it had neither
        terminated nor reached the env's own time limit).
    """

    env: Any
    agent: Any
    key: jax.Array
    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    terminated: jax.Array
    cut: jax.Array


class Outcome(NamedTuple):
    """Per evaluation environment (``[E]`` each): ``returns`` float32 (its agents' mean
    return), ``lengths`` int32 steps, ``truncated`` bool (ended without a terminal
    state: the env's time limit or the bound), ``cut`` bool (cut at the bound)."""

    returns: Any
    lengths: Any
    truncated: Any
    cut: Any


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The functions of :func:`make_evaluation` (``start``, ``step``, ``chunk``, ``run``
    are pure and jittable).

    Attributes:
      start: ``start(key) -> EvalCarry``: fresh evaluation environments.
      step: ``step(params, carry) -> carry``: one step of every row.
      finished: ``finished(carry) -> [] bool``: every row's first episode has ended.
      chunk: ``chunk(params, carry) -> carry``: ``step`` until ``finished`` or
        ``chunk_steps`` steps, whichever comes first (a bounded ``lax.while_loop``).
      run: ``run(params, key) -> (returns [E] float32, lengths [E] int32)``: the whole
        evaluation as one compiled loop (at most ``max_steps`` steps).
      result: ``result(carry) -> (returns, lengths)`` of a finished carry: per
        environment, its agents' mean return and its length.
      outcome: ``outcome(carry) -> Outcome`` of a finished carry.
      max_steps: the bound (steps) every episode is cut at.
      chunk_steps: steps per call of ``chunk``.
    """

    start: Callable
    step: Callable
    finished: Callable
    chunk: Callable
    run: Callable
    result: Callable
    outcome: Callable
    max_steps: int
    chunk_steps: int

    def run_chunks(self, params: Any, key: jax.Array) -> Outcome:
        """The whole evaluation from the host: ``start``, then compiled ``chunk`` calls
        until every row's first episode has ended (at most ``ceil(max_steps /
        chunk_steps)`` calls), as host NumPy arrays. Same keys, hence the same episodes,
        as :attr:`run`.

        Raises:
          KeyboardInterrupt: Ctrl-C or SIGTERM (where the caller turns it into one)
            arrived: raised when the call it arrived in returns
            (:mod:`jaxsrl.core.interrupts`).
        """
        jitted = _jitted(self)
        with interrupts.interrupt_flag():
            c = jitted["start"](key)
            for _ in range(-(-self.max_steps // self.chunk_steps)):
                interrupts.check()
                if bool(jitted["finished"](c)):
                    break
                c = jitted["chunk"](params, c)
            interrupts.check()
        return Outcome(*(np.asarray(x) for x in jax.device_get(jitted["outcome"](c))))


def _jitted(evaluation: Evaluation) -> dict:
    """The jitted ``start``/``finished``/``chunk``/``outcome`` of ``evaluation``, made
    once per :class:`Evaluation` object (so a periodic evaluation compiles once)."""
    cache = evaluation.__dict__.get("_jitted")
    if cache is None:
        cache = {name: jax.jit(getattr(evaluation, name))
                 for name in ("start", "finished", "chunk", "outcome")}
        object.__setattr__(evaluation, "_jitted", cache)
    return cache


def make_evaluation(env: Any, act: Callable, episodes: int,
                    initial_carry: Callable | None = None,
                    max_steps: int | None = None,
                    chunk_steps: int = CHUNK_STEPS) -> Evaluation:
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
        time limit, :func:`time_limit`, else :data:`DEFAULT_MAX_STEPS`). A cut episode
        is truncated.
      chunk_steps: steps per compiled call of :meth:`Evaluation.run_chunks`.

    Keys: ``key`` is split into the reset key (``env.reset(k, E * A)``) and the loop's;
    at every step the loop's key is split into ``(next, k_act, k_env)``.

    Raises:
      ValueError: ``episodes``, ``max_steps`` or ``chunk_steps`` < 1.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1")
    if chunk_steps < 1:
        raise ValueError(f"chunk_steps={chunk_steps} must be >= 1")
    bound = int(max_steps) if max_steps is not None else (time_limit(env) or DEFAULT_MAX_STEPS)
    agents = int(getattr(env, "num_agents", 1))
    rows = episodes * agents
    recurrent = initial_carry is not None and initial_carry(1) is not None

    def start(key):
        k_reset, k_loop = jax.random.split(key)
        false = jnp.zeros(rows, bool)
        return EvalCarry(env.reset(k_reset, rows), initial_carry(rows) if recurrent else None,
                         k_loop, false, jnp.zeros(rows, jnp.float32),
                         jnp.zeros(rows, jnp.int32), false, false)

    def step(params, c: EvalCarry) -> EvalCarry:
        key, k_act, k_env = jax.random.split(c.key, 3)
        action, agent, _ = act(params, c.env.obs, c.agent, k_act)
        env_carry, out = env.step(c.env, action, k_env)
        live = ~c.done
        ret = c.episode_return + jnp.where(live, out.reward, 0.0)
        length = c.episode_length + live.astype(jnp.int32)
        ended = live & out.episode_done
        cut = live & ~out.episode_done & (length >= bound)
        return EvalCarry(env_carry, agent if recurrent else None, key, c.done | ended | cut,
                         ret, length, c.terminated | (ended & out.terminated), c.cut | cut)

    def finished(c: EvalCarry) -> jax.Array:
        return c.done.all()

    def per_env(x):
        return x.reshape(episodes, agents)

    def result(c: EvalCarry) -> tuple[jax.Array, jax.Array]:
        return per_env(c.episode_return).mean(axis=1), per_env(c.episode_length)[:, 0]

    def outcome(c: EvalCarry) -> Outcome:
        returns, lengths = result(c)
        return Outcome(returns, lengths, ~per_env(c.terminated)[:, 0], per_env(c.cut)[:, 0])

    def chunk(params, c: EvalCarry) -> EvalCarry:
        def cond(state):
            i, c = state
            return (i < chunk_steps) & ~finished(c)

        def body(state):
            i, c = state
            return i + 1, step(params, c)

        return jax.lax.while_loop(cond, body, (jnp.int32(0), c))[1]

    def run(params, key):
        # Bounded: every live row's length grows by one per step and is cut at ``bound``.
        c = jax.lax.while_loop(lambda c: ~finished(c), lambda c: step(params, c), start(key))
        return result(c)

    return Evaluation(start, step, finished, chunk, run, result, outcome, bound, chunk_steps)


def trace(evaluation: Evaluation, params: Any, key: jax.Array) -> tuple[Outcome, list]:
    """:meth:`Evaluation.run_chunks` step by step on the host, keeping the environment
    states: ``(outcome, states)`` where ``states[t]`` is the environments' carry
    (``EnvCarry``, host arrays, ``[R, ...]`` leaves) after ``t`` steps (``states[0]``
    the reset). Same keys, hence the same episodes; row ``r``'s episode is
    ``states[0 .. lengths[r]]``; at most ``max_steps + 1`` states.

    Raises:
      KeyboardInterrupt: between two steps, as :meth:`Evaluation.run_chunks`."""
    step, finished = jax.jit(evaluation.step), jax.jit(evaluation.finished)
    c = jax.jit(evaluation.start)(key)
    states = [jax.device_get(c.env)]
    while not bool(finished(c)):
        c = step(params, c)
        states.append(jax.device_get(c.env))
    outcome = Outcome(*(np.asarray(x) for x in jax.device_get(evaluation.outcome(c))))
    return outcome, states

"""The agent interface: an agent is a bundle of pure functions over pytrees.

An agent never sees sockets, processes or devices. The runtime calls, in order::

    fns = agent.make(config, spec, num_updates)   # build pure functions once
    state = fns.init(rng)                         # learner state (params, optimiser, ...)
    carry = fns.initial_carry(batch_size)         # None for feed-forward agents
    action, carry, extras = fns.act(state.params, obs, carry, rng)   # inference
    state, metrics = fns.learn(state, trajectory, rng)               # one update

``act`` and ``learn`` are jitted (and sharded over the local devices) by the runtime;
agents write them as single-device code. See ``agents/ppo.py`` for a worked example.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import gymnasium

PyTree = Any


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What an agent needs to know about one agent's environment interface.

    Attributes:
      observation_space: per-agent observation space (``Box`` or ``Dict`` of ``Box``).
      action_space: per-agent action space (``Discrete``, ``MultiDiscrete`` or ``Box``).
    """

    observation_space: gymnasium.spaces.Space
    action_space: gymnasium.spaces.Space


class Trajectory(NamedTuple):
    """A batch of trajectory segments, as the learner receives them.

    ``B`` segments of ``T`` steps each. Observations are pytrees (an array, or a dict
    of arrays for ``Dict`` spaces); every leaf has the leading dims shown.

    Attributes:
      obs: ``[B, T + 1, *obs]`` observations; ``obs[:, T]`` is the bootstrap observation.
        ``obs[:, t + 1]`` is the first observation of a new episode where
        ``terminated[:, t] or truncated[:, t]``.
      action: ``[B, T, *act]`` actions taken (int32 for discrete, float32 for Box).
      reward: ``[B, T]`` float32 rewards received after ``action``.
      terminated: ``[B, T]`` bool, the episode ended in a terminal state (no bootstrap).
      truncated: ``[B, T]`` bool, the episode was cut by a time limit (bootstrap from
        ``final_obs``).
      final_obs: ``[B, T, *obs]`` the last observation of a truncated episode; only
        meaningful where ``truncated`` (zeros elsewhere).
      behaviour_logp: ``[B, T]`` float32 log-probability of ``action`` under the
        policy that chose it (for importance ratios).
      policy_version: ``[B, T]`` int32 learner version of the parameters that chose
        each action (for staleness).
      carry: recurrent state at ``t = 0`` of each segment, ``[B, ...]`` leaves, or
        ``None`` for feed-forward agents.
      valid: ``[B, T]`` bool, False on idle steps (the row's agent is absent from the
        episode, e.g. variable team sizes in ``hide_and_seek_full``), or ``None`` when
        every step is valid. Agents mask idle steps out of observation statistics,
        advantages, returns and the loss.
    """

    obs: PyTree
    action: Any
    reward: Any
    terminated: Any
    truncated: Any
    final_obs: PyTree
    behaviour_logp: Any
    policy_version: Any
    carry: PyTree = None
    valid: Any = None


class AgentFns(NamedTuple):
    """Pure functions of one agent, built by ``Agent.make``.

    Attributes:
      init: ``init(rng) -> state``; ``state.params`` are the policy parameters.
      act: ``act(params, obs, carry, rng) -> (action, carry, extras)`` for a batch of
        ``N`` observations ``[N, *obs]``; ``extras["logp"]`` is ``[N]`` float32.
      learn: ``learn(state, trajectory, rng) -> (state, metrics)``; ``metrics`` is a
        flat dict of scalar arrays.
      initial_carry: ``initial_carry(n) -> carry`` (``None`` for feed-forward agents).
    """

    init: Callable[..., Any]
    act: Callable[..., Any]
    learn: Callable[..., Any]
    initial_carry: Callable[[int], PyTree]


class Agent(NamedTuple):
    """An agent as registered by name (``--agent=NAME``).

    Attributes:
      name: registry name.
      config_cls: frozen dataclass of the agent's hyperparameters (defaults included).
      make: ``make(config, spec, num_updates) -> AgentFns``; ``num_updates`` is the
        planned number of ``learn`` calls (for learning-rate schedules).
    """

    name: str
    config_cls: type
    make: Callable[[Any, EnvSpec, int], AgentFns]

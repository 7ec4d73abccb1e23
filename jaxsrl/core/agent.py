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


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """What an off-policy agent asks of the replay (buffer) worker.

    The runtime stores the agent's *items* (built by ``AgentFns.to_items`` from each
    trajectory segment), samples batches of them for ``learn``, writes back the
    priorities ``learn`` returns, and keeps the replay ratio (Reverb's
    ``SampleToInsertRatio``; Cassirer et al. 2021).

    Attributes:
      capacity: items held; the oldest are overwritten first.
      batch_size: items per ``learn`` call.
      replay_ratio: items sampled per item inserted (one item per env step for
        transition replay), so ``learn`` runs ``replay_ratio / batch_size`` times per
        inserted item. CleanRL's DQN (batch 128, train every 4 steps): 32; SAC (batch
        256, one update per step): 256.
      min_fill: items in the buffer before the first ``learn``.
      prioritised: proportional prioritised replay (Schaul et al. 2016, Sec. 3.3) if
        True, else uniform.
      priority_exponent: alpha of ``P(i) = p_i^alpha / sum_k p_k^alpha``.
      importance_exponent: beta at the first update of the importance-sampling
        weights ``w_i = (N P(i))^-beta / max_j w_j``; annealed linearly to 1 over the
        planned updates (Schaul et al. 2016, Sec. 3.4).
    """

    capacity: int = 100_000
    batch_size: int = 256
    replay_ratio: float = 32.0
    min_fill: int = 1_000
    prioritised: bool = False
    priority_exponent: float = 0.6
    importance_exponent: float = 0.4


class ReplayBatch(NamedTuple):
    """A sampled batch of replay items, as an off-policy ``learn`` receives it.

    Attributes:
      items: pytree of ``[batch_size, ...]`` leaves, as ``to_items`` built them.
      weights: ``[batch_size]`` float32 importance-sampling weights (ones for
        uniform replay).
    """

    items: PyTree
    weights: Any


class AgentFns(NamedTuple):
    """Pure functions of one agent, built by ``Agent.make``.

    Attributes:
      init: ``init(rng) -> state``; ``state.params`` are the policy parameters.
      act: ``act(params, obs, carry, rng) -> (action, carry, extras)`` for a batch of
        ``N`` observations ``[N, *obs]``; ``extras["logp"]`` is ``[N]`` float32.
      learn: on-policy agents: ``learn(state, trajectory, rng) -> (state, metrics)``;
        ``metrics`` is a flat dict of scalar arrays. Off-policy agents (``replay`` set):
        ``learn(state, batch: ReplayBatch, rng) -> (state, metrics, priorities)`` with
        ``priorities`` ``[batch_size]`` float32, non-negative.
      initial_carry: ``initial_carry(n) -> carry`` (``None`` for feed-forward agents).
      replay: ``None`` for on-policy agents (the learner gets trajectory segments);
        a :class:`ReplaySpec` for off-policy agents (the learner gets replay batches).
      to_items: off-policy agents only: ``to_items(trajectory) -> (items, valid)``
        turns a batch of segments into replay items (``[N, ...]`` leaves) and a
        ``[N]`` bool mask of the items to insert.
    """

    init: Callable[..., Any]
    act: Callable[..., Any]
    learn: Callable[..., Any]
    initial_carry: Callable[[int], PyTree]
    replay: ReplaySpec | None = None
    to_items: Callable[..., Any] | None = None


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

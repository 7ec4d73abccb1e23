"""Ape-X DQN (Horgan et al. 2018): n-step double Q-learning with a dueling network,
prioritised replay and a ladder of per-row exploration rates.

The parts, and where each comes from:

* replay items: n-step transitions (``agents/transitions.py``; Horgan et al. 2018,
  Sec. 3.1), stored and sampled by the runtime's replay worker as
  :attr:`AgentFns.replay` asks (proportional prioritised replay, Schaul et al. 2016).
* target: ``G = R^(k) + gamma^k Q_target(s_{t+k}, argmax_a Q(s_{t+k}, a))``, double
  Q-learning (van Hasselt et al. 2016, Eq. 4), and ``max_a Q_target`` with
  ``double=False`` (Mnih et al. 2015); both in ``agents/q_learning.py``.
* loss: importance-weighted mean Huber loss of the TD error; new priorities ``|td|``
  (Horgan et al. 2018, Sec. 3.1; Schaul et al. 2016, Algorithm 1).
* network: dueling head (Wang et al. 2016, Eq. 9; ``agents/q_network.py``).
* exploration: epsilon-greedy with ``eps = epsilon^(1 + alpha * u)`` (Horgan et al.
  2018, Sec. 4.1: actor ``i`` of ``N`` uses ``u = i / (N - 1)``, ``epsilon = 0.4``,
  ``alpha = 7``). The runtime gives ``act`` no row index and resets a row's carry to
  zeros at each episode start, so here every *episode* of every row draws its ``u ~
  Uniform(0, 1]`` when it starts (a zero carry) and keeps it in the carry: exploration
  rates follow the ladder's distribution (for many rows, the same mix of rates as
  Ape-X's actors) and stay fixed within an episode, as Ape-X's are, but one row does
  not keep one rate for the whole run. Rates are then independent of how the runtime
  splits rows over actors and of how many rows there are.

Deviations from the paper: Adam instead of centred RMSProp (the agents' shared
optimiser, ``agents/optim.py``); the replay worker, not the actors, gives new items
their first priority.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import chex
import gymnasium
import jax
import jax.numpy as jnp
import optax

from agents import encoders, networks
from agents.optim import clipped_adam
from agents.q_learning import double_q_learning, q_learning
from agents.q_network import QNetwork
from agents.transitions import n_step_transitions
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec, ReplayBatch, ReplaySpec

__all__ = ["AGENT", "DQNConfig", "DQNState", "make"]


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """Ape-X DQN hyperparameters.

    Defaults are aimed at CartPole-v1 (eval return 475 within 200k env steps):
    CleanRL's ``dqn.py`` network (120, 84), step size 2.5e-4, batch 128 and 10k-item
    buffer, with Ape-X's n = 3, prioritised replay and exploration ladder, and a Huber
    threshold of 10. Checked with an in-process loop (64 envs, 32-step segments, the
    replay of :class:`ReplaySpec` emulated in NumPy; greedy eval of 10 episodes every
    10k steps): first eval >= 475 at 82k, 51k and 31k env steps (seeds 0-2). With a
    Huber threshold of 1 *and* a 100k buffer, Q diverged (to 1e4-1e5) on all three
    seeds; either change alone fixed it. The Atari settings of Horgan et al. 2018
    (Sec. 4.1 and its appendix) are noted per field.
    """

    #: Learns from replay: the config refuses it with several learner processes before
    #: any process starts (``jaxsrl/experiment/modes.py``, mode ``off-policy agent``).
    OFF_POLICY: ClassVar[bool] = True

    learning_rate: float = 2.5e-4
    """Adam step size (CleanRL's DQN; Ape-X: 0.00025 / 4 with centred RMSProp)."""
    anneal_lr: bool = False
    """Anneal the step size linearly to 0 over the planned ``learn`` calls."""
    gamma: float = 0.99
    """Discount factor per env step."""
    n_step: int = 3
    """Most rewards summed per replay item (Ape-X: 3); see ``agents/transitions.py``."""
    hidden_sizes: tuple[int, ...] = (120, 84)
    """Dense layer widths after the encoder (CleanRL's DQN: 120, 84). Dueling: the
    last one is each stream's hidden layer, the others are shared (Atari: ``(512,)``
    after the Nature CNN)."""
    activation: str = "relu"
    """Hidden activation: one of ``networks.ACTIVATIONS``."""
    dueling: bool = True
    """Dueling value/advantage streams (Wang et al. 2016) instead of a plain Q head."""
    double: bool = True
    """Double Q-learning target (online argmax, target value); False: target max."""
    target_update_period: int = 100
    """``learn`` calls between target updates (Ape-X: 2500 on Atari). With the
    default replay ratio one call per 4 env steps, so 400 env steps (CleanRL: 500)."""
    tau: float = 1.0
    """Target update ``target <- tau * online + (1 - tau) * target`` every
    ``target_update_period`` calls; 1 is a hard copy (DQN, Ape-X), small values with
    period 1 give Polyak averaging."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip before Adam (Ape-X: 40)."""
    huber_delta: float = 10.0
    """Huber loss threshold on the TD error (Mnih et al. 2015 and Ape-X: 1, with
    rewards clipped to [-1, 1]); CartPole's returns reach 100, see the class doc."""
    epsilon: float = 0.4
    """Base of the exploration ladder ``epsilon^(1 + alpha * u)`` (Ape-X: 0.4)."""
    epsilon_alpha: float = 7.0
    """Exponent scale of the ladder (Ape-X: 7): rates range over ``[0.4^8, 0.4]``."""
    capacity: int = 10_000
    """Replay items held (CleanRL's CartPole DQN: 10k; Ape-X: 2M)."""
    batch_size: int = 128
    """Items per ``learn`` call (CleanRL: 128; Ape-X: 512)."""
    replay_ratio: float = 32.0
    """Items sampled per item inserted: one ``learn`` call per 4 env steps."""
    min_fill: int = 1_000
    """Items in the replay before the first ``learn`` call."""
    prioritised: bool = True
    """Proportional prioritised replay (Schaul et al. 2016) instead of uniform."""
    priority_exponent: float = 0.6
    """alpha of ``P(i) ~ p_i^alpha`` (Ape-X: 0.6)."""
    importance_exponent: float = 0.4
    """Starting beta of the importance weights, annealed to 1 (Ape-X: 0.4)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first out-of-range hyperparameter."""
        checks = [("learning_rate", self.learning_rate > 0), ("gamma", 0 <= self.gamma <= 1),
                  ("n_step", self.n_step >= 1), ("target_update_period", self.target_update_period >= 1),
                  ("tau", 0 < self.tau <= 1), ("max_grad_norm", self.max_grad_norm > 0),
                  ("huber_delta", self.huber_delta > 0), ("epsilon", 0 <= self.epsilon <= 1),
                  ("epsilon_alpha", self.epsilon_alpha >= 0), ("capacity", self.capacity >= 1),
                  ("batch_size", 1 <= self.batch_size), ("replay_ratio", self.replay_ratio > 0),
                  ("min_fill", 0 <= self.min_fill <= self.capacity),
                  ("priority_exponent", self.priority_exponent >= 0),
                  ("importance_exponent", 0 <= self.importance_exponent <= 1),
                  ("hidden_sizes", all(h >= 1 for h in self.hidden_sizes))]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"dqn.{name}={getattr(self, name)!r} is out of range")
        if self.activation not in networks.ACTIVATIONS:
            raise ValueError(f"dqn.activation={self.activation!r}; valid: "
                             f"{', '.join(sorted(networks.ACTIVATIONS))}")

    def replay_spec(self) -> ReplaySpec:
        """The replay fields as the runtime's :class:`ReplaySpec`."""
        return ReplaySpec(self.capacity, self.batch_size, self.replay_ratio, self.min_fill,
                          self.prioritised, self.priority_exponent, self.importance_exponent)


class DQNState(NamedTuple):
    """Learner state, updated by ``learn`` and saved in checkpoints.

    Attributes:
      params: what ``act`` takes: the online network's variables (``{"params": ...}``).
      target_params: the target network's variables (same tree).
      opt_state: optax state of the clipped Adam.
      update_step: ``[]`` int32 number of ``learn`` calls so far.
    """

    params: chex.ArrayTree
    target_params: chex.ArrayTree
    opt_state: optax.OptState
    update_step: jax.Array


def make(config: DQNConfig, spec: EnvSpec, num_updates: int) -> AgentFns:
    """Builds Ape-X DQN's pure functions for one environment interface.

    Args:
      config: hyperparameters (validated here).
      spec: observation space (``Box`` or ``Dict`` of ``Box``; uint8 images get a
        Nature CNN) and a ``Discrete`` action space.
      num_updates: planned number of ``learn`` calls (horizon of ``anneal_lr``).

    Returns:
      ``AgentFns`` with ``replay`` and ``to_items`` set. ``act`` has an extra static
      keyword ``deterministic=False``.

    Raises:
      ValueError: a non-``Discrete`` action space, or an out-of-range config field.
    """
    config.validate()
    if not isinstance(spec.action_space, gymnasium.spaces.Discrete):
        raise ValueError(f"dqn needs a Discrete action space, got {spec.action_space!r}")
    num_actions, start = int(spec.action_space.n), int(spec.action_space.start)
    obs_space = spec.observation_space
    net = QNetwork(encoders.observation_layout(obs_space), num_actions,
                   tuple(config.hidden_sizes), config.activation, config.dueling)
    optimiser, learning_rate = clipped_adam(config.learning_rate, config.anneal_lr,
                                            num_updates, config.max_grad_norm)

    def init(rng: chex.PRNGKey) -> DQNState:
        """Online variables, an identical target, Adam state, step 0."""
        variables = net.init(rng, networks.dummy_observation(obs_space))
        return DQNState(variables, variables, optimiser.init(variables), jnp.zeros((), jnp.int32))

    def initial_carry(n: int) -> dict:
        """``{"explore_rank": [n] float32 zeros}``: 0 means "draw at the next act"."""
        return {"explore_rank": jnp.zeros((n,), jnp.float32)}

    def act(params, obs, carry, rng, *, deterministic: bool = False):
        """Epsilon-greedy actions ``[N]`` int32 for observations ``[N, *obs]``.

        Each row's rank ``u`` in ``carry["explore_rank"]`` (``[N]`` float32) is drawn
        from Uniform(0, 1] where it is 0 and kept otherwise; the row explores with
        probability ``eps = epsilon^(1 + epsilon_alpha * u)``, taking a uniform action.
        ``extras["logp"]`` ``[N]`` float32 is ``log((1 - eps) [a = greedy] + eps /
        |A|)``. ``deterministic`` (static): greedy actions, ``logp`` 0 (the greedy
        policy's); ranks are still drawn.
        """
        q = net.apply(params, obs)  # [N, A]
        n = q.shape[0]
        rank_key, explore_key, action_key = jax.random.split(rng, 3)
        rank = carry["explore_rank"]
        rank = jnp.where(rank > 0, rank, 1.0 - jax.random.uniform(rank_key, (n,)))  # (0, 1]
        greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
        carry = {"explore_rank": rank}
        if deterministic:
            return greedy + start, carry, {"logp": jnp.zeros((n,), jnp.float32)}
        eps = config.epsilon ** (1.0 + config.epsilon_alpha * rank)  # [N]
        explore = jax.random.uniform(explore_key, (n,)) < eps
        uniform = jax.random.randint(action_key, (n,), 0, num_actions, jnp.int32)
        action = jnp.where(explore, uniform, greedy)
        prob = (1.0 - eps) * (action == greedy) + eps / num_actions
        return action + start, carry, {"logp": jnp.log(prob).astype(jnp.float32)}

    def to_items(traj):
        """n-step transitions of a batch of segments (``agents.transitions``)."""
        return n_step_transitions(traj, config.n_step, config.gamma)

    def loss_fn(variables, target_variables, items, weights):
        q = net.apply(variables, items["obs"])  # [B, A]
        q_next_target = net.apply(target_variables, items["next_obs"])  # [B, A]
        action = (items["action"] - start).astype(jnp.int32)
        reward = items["reward"].astype(jnp.float32)
        discount = items["discount"].astype(jnp.float32)
        if config.double:
            q_next_online = jax.lax.stop_gradient(net.apply(variables, items["next_obs"]))
            td = double_q_learning(q, action, reward, discount, q_next_target, q_next_online)
        else:
            td = q_learning(q, action, reward, discount, q_next_target)
        loss = jnp.mean(weights * optax.huber_loss(td, delta=config.huber_delta))
        q_taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        return loss, (td, q_taken)

    def learn(state: DQNState, batch: ReplayBatch, rng: chex.PRNGKey):
        """One gradient step on a replay batch -> ``(state, metrics, priorities)``.

        ``batch.items`` as :func:`to_items` built them (``[B, ...]`` leaves),
        ``batch.weights`` ``[B]`` float32. Loss: ``mean_i w_i huber(td_i)`` with
        ``td_i = G_i - Q(s_i, a_i)`` (target under stop-gradient). After the step,
        on every ``target_update_period``-th call the target moves to the new online
        variables (``tau = 1``: a copy). ``priorities`` ``[B]`` float32 are ``|td| +
        1e-6`` (positive, so every item can be sampled again).
        """
        del rng
        weights = batch.weights.astype(jnp.float32)
        chex.assert_shape(weights, (batch.items["reward"].shape[0],))
        (loss, (td, q_taken)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, batch.items, weights)
        updates, opt_state = optimiser.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        step = state.update_step + 1
        move = step % config.target_update_period == 0
        target = jax.tree.map(
            lambda o, t: jnp.where(move, config.tau * o + (1.0 - config.tau) * t, t),
            params, state.target_params)
        metrics = {
            "loss": loss,
            "q_mean": jnp.mean(q_taken),
            "td_abs_mean": jnp.mean(jnp.abs(td)),
            "target_updates": (step // config.target_update_period).astype(jnp.float32),
            "learning_rate": jnp.asarray(learning_rate(state.update_step), jnp.float32),
            "grad_norm": optax.tree.norm(grads),
            "weight_mean": jnp.mean(weights),
        }
        priorities = (jnp.abs(td) + 1e-6).astype(jnp.float32)
        return DQNState(params, target, opt_state, step), metrics, priorities

    return AgentFns(init=init, act=act, learn=learn, initial_carry=initial_carry,
                    replay=config.replay_spec(), to_items=to_items)


AGENT = Agent("dqn", DQNConfig, make)

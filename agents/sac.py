"""Soft Actor-Critic with automatic entropy tuning (Haarnoja et al. 2018, arXiv 1812.05905).

Off-policy: the runtime stores the n-step transitions ``to_items`` builds from each
segment (``agents/transitions.py``) and feeds ``learn`` uniform (or prioritised)
replay batches. One ``learn`` call follows one training step of CleanRL's
``sac_continuous_action.py`` (the reference for every default):

1. critics: one Adam step on ``sum_i mean w (Q_i(s, a) - y)^2`` with the soft target
   ``y = r + discount (min_i Q_targ_i(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')``
   (Eq. 5-6; twin critics with the min, Fujimoto et al. 2018);
2. actor and temperature, on calls ``update_step % policy_frequency == 0`` only (TD3's
   delayed update), then ``policy_frequency`` times in a row to compensate (CleanRL):
   an Adam step on ``mean(alpha log pi(a|s) - min_i Q_i(s, a))`` (Eq. 9-10, ``a``
   reparameterised, the critics just updated), then, with ``autotune``, an Adam step on
   ``log_alpha`` for ``mean(-alpha (log pi(a|s) + H_target))`` (Eq. 18) with ``a`` drawn
   again from the updated actor;
3. target critics: ``theta_targ <- tau theta + (1 - tau) theta_targ`` on calls
   ``update_step % target_network_frequency == 0``.

The skip in step 2 is a ``lax.cond`` on ``update_step``: one compiled ``learn``. The
policy is a tanh-squashed Gaussian rescaled to the ``Box`` (``agents/squashed_gaussian.py``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents import encoders, networks, transitions
from agents import sac_loss as losses
from agents import squashed_gaussian as sg
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec, ReplayBatch, ReplaySpec, Trajectory

__all__ = ["AGENT", "SACConfig", "SACState", "make"]


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters (flags ``--sac.<name>``); defaults are CleanRL's
    ``sac_continuous_action.py`` (its ``Args``, ``Actor`` and ``SoftQNetwork``)."""

    #: Learns from replay: the config refuses it with several learner processes before
    #: any process starts (``jaxsrl/experiment/modes.py``, mode ``off-policy agent``).
    OFF_POLICY: ClassVar[bool] = True

    policy_lr: float = 3e-4
    """Adam step size of the actor."""
    q_lr: float = 1e-3
    """Adam step size of the twin critics (one optimiser over both)."""
    alpha_lr: float = 1e-3
    """Adam step size of ``log_alpha`` (CleanRL uses ``q_lr`` for it)."""
    tau: float = 0.005
    """Polyak coefficient of the target critics: ``tau * online + (1 - tau) * target``."""
    gamma: float = 0.99
    """Discount factor (per step; an n-step item bootstraps with ``gamma^k``)."""
    batch_size: int = 256
    """Replay items per ``learn`` call."""
    buffer_size: int = 1_000_000
    """Replay capacity in items (one item per env step)."""
    learning_starts: int = 5_000
    """Items in the replay before the first ``learn`` (CleanRL: env steps)."""
    policy_frequency: int = 2
    """The actor and temperature learn on every ``policy_frequency``-th call, then
    ``policy_frequency`` steps in a row (TD3's delay, compensated as CleanRL does)."""
    target_network_frequency: int = 1
    """Polyak-update the target critics every this many ``learn`` calls."""
    alpha: float = 0.2
    """Temperature when ``autotune`` is off (with ``autotune`` alpha starts at 1, as CleanRL).
    Off, ``learn`` takes it from the config, not from ``state.log_alpha`` (which it then
    holds): ``--resume --sac.no_autotune --sac.alpha=0.01`` trains at 0.01. Turning
    ``autotune`` on at a resume tunes on from the checkpoint's temperature."""
    autotune: bool = True
    """Learn the temperature by Eq. 18 of Haarnoja et al. 2018 towards ``target_entropy``."""
    target_entropy: Optional[float] = None
    """Entropy target of ``autotune`` in nats; ``None``: ``-|A|`` (the paper's heuristic)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden widths (ReLU) of the actor and of each critic."""
    log_std_min: float = -5.0
    """Lower bound of the policy's log standard deviation (smooth tanh bound)."""
    log_std_max: float = 2.0
    """Upper bound of the policy's log standard deviation."""
    n_step: int = 1
    """Steps summed per replay item (1: one-step transitions, as CleanRL)."""
    random_warmup: bool = True
    """Until the first ``learn`` (``state.params["warmup"]``), ``act`` samples uniformly
    from the ``Box`` as CleanRL's first ``learning_starts`` steps; deterministic acts
    are unaffected. Off, ``act`` never does, whatever the (restored) flag says."""
    prioritised: bool = False
    """Proportional prioritised replay with priorities ``|td| + 1e-6`` (off: uniform, CleanRL)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first out-of-range hyperparameter."""
        checks = [("policy_lr", self.policy_lr > 0), ("q_lr", self.q_lr > 0),
                  ("alpha_lr", self.alpha_lr > 0), ("tau", 0 < self.tau <= 1),
                  ("gamma", 0 <= self.gamma <= 1), ("batch_size", self.batch_size >= 1),
                  ("buffer_size", self.buffer_size >= self.batch_size),
                  ("learning_starts", self.learning_starts >= 1),
                  ("policy_frequency", self.policy_frequency >= 1),
                  ("target_network_frequency", self.target_network_frequency >= 1),
                  ("alpha", self.alpha > 0), ("hidden_sizes", all(h >= 1 for h in self.hidden_sizes)),
                  ("log_std_max", self.log_std_min < self.log_std_max),
                  ("n_step", isinstance(self.n_step, int) and self.n_step >= 1)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"sac.{name}={getattr(self, name)!r} is out of range")


class SACState(NamedTuple):
    """SAC's learner state, updated by ``learn`` and saved whole in checkpoints.

    Attributes:
      params: what ``act`` takes: ``{"actor": flax variables, "warmup": [] bool}``
        (``warmup``: no ``learn`` yet and ``random_warmup``, see :class:`SACConfig`).
      critic_params: twin critic variables, every leaf stacked ``[2, ...]``.
      target_critic_params: their Polyak average, same tree.
      log_alpha: ``[]`` float32 log temperature: learned with ``autotune``, else
        ``log(alpha)`` of the config ``learn`` was built from (set by every ``learn``).
      actor_opt_state, critic_opt_state, alpha_opt_state: Adam states.
      update_step: ``[]`` int32 number of ``learn`` calls so far.
    """

    params: chex.ArrayTree
    critic_params: chex.ArrayTree
    target_critic_params: chex.ArrayTree
    log_alpha: jax.Array
    actor_opt_state: optax.OptState
    critic_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    update_step: jax.Array


def make(config: SACConfig, spec: EnvSpec, num_updates: int) -> AgentFns:
    """Builds SAC's pure functions for one environment interface.

    Args:
      config: hyperparameters.
      spec: a 1-D ``Box`` action space with finite bounds; a ``Box`` or ``Dict`` of
        ``Box`` observation space (flattened into the MLPs; no image encoder).
      num_updates: unused (constant step sizes).

    Returns:
      ``AgentFns`` with ``replay`` and ``to_items`` set (off-policy ``learn``).

    Raises:
      ValueError: bad hyperparameters, another action space, or an unsupported or
        image observation space.
    """
    del num_updates
    config.validate()
    scale, bias = sg.box_affine(spec.action_space)  # [A] float32 each
    A = scale.shape[0]
    obs_space = spec.observation_space
    try:
        layout = encoders.observation_layout(obs_space)
    except TypeError as exc:
        raise ValueError(f"sac: {exc}") from None
    if any(leaf.image for leaf in layout):
        raise ValueError(f"sac has no image encoder; observation space {obs_space!r} holds an "
                         "image (uint8 [H, W, C])")
    target_entropy = float(-A if config.target_entropy is None else config.target_entropy)
    hidden = tuple(config.hidden_sizes)
    # PyTorch nn.Linear default weights, as CleanRL's (biases zero here, see the report).
    actor_net = networks.MLP(hidden, 2 * A, 1.0, "relu", "torch_default")  # [mean | raw log_std]
    q_net = networks.MLP(hidden, 1, 1.0, "relu", "torch_default")
    actor_opt, critic_opt = optax.adam(config.policy_lr), optax.adam(config.q_lr)
    alpha_opt = optax.adam(config.alpha_lr)
    uniform_logp = -float(np.sum(np.log(2.0 * scale)))  # log density of U(low, high)
    # autotune off: the config's temperature, not the state's (a resume may change it)
    fixed_log_alpha = None if config.autotune else np.log(np.float32(config.alpha))  # [] float32
    pf, tnf = config.policy_frequency, config.target_network_frequency

    def flat(obs):
        return networks.flatten_observation(obs, obs_space)

    def policy(actor_vars, x):
        """``(mean, log_std)`` ``[N, A]`` each for flat observations ``[N, D]``."""
        mean, raw = jnp.split(actor_net.apply(actor_vars, x), 2, axis=-1)
        return mean, sg.bounded_log_std(raw, config.log_std_min, config.log_std_max)

    def q_values(critic_vars, x, action):
        """``[2, N]`` twin Q-values of flat observations ``[N, D]`` and actions ``[N, A]``."""
        xa = jnp.concatenate([x, action.astype(jnp.float32)], axis=-1)
        return jax.vmap(lambda v: q_net.apply(v, xa)[..., 0])(critic_vars)

    def init(rng: chex.PRNGKey) -> SACState:
        """Fresh networks (target critics = critics), ``log_alpha`` 0 (autotune) or
        ``log(alpha)``, Adam states, step 0."""
        k_actor, k_critic = jax.random.split(rng)
        x = flat(networks.dummy_observation(obs_space))
        actor_vars = actor_net.init(k_actor, x)
        xa = jnp.concatenate([x, jnp.zeros((1, A), jnp.float32)], axis=-1)
        critic_vars = jax.vmap(lambda k: q_net.init(k, xa))(jax.random.split(k_critic, 2))
        log_alpha = jnp.asarray(0.0 if config.autotune else fixed_log_alpha, jnp.float32)
        params = {"actor": actor_vars, "warmup": jnp.asarray(config.random_warmup)}
        return SACState(params, critic_vars, critic_vars, log_alpha, actor_opt.init(actor_vars),
                        critic_opt.init(critic_vars), alpha_opt.init(log_alpha),
                        jnp.zeros((), jnp.int32))

    def act(params, obs, carry, rng, *, deterministic: bool = False):
        """Actions ``[N, A]`` float32 in the bounds for observations ``[N, *obs]``.

        Samples ``scale * tanh(u) + bias``, ``u ~ N(mean, std)``; ``deterministic``
        (static) takes ``scale * tanh(mean) + bias``. While ``params["warmup"]`` a
        sample is uniform in the ``Box`` instead. Returns ``(action, None,
        {"logp": [N] float32})``.
        """
        del carry
        mean, log_std = policy(params["actor"], flat(obs))
        if deterministic:
            action, logp = sg.mode(mean, log_std, scale, bias)
            return action, None, {"logp": logp.astype(jnp.float32)}
        k_policy, k_uniform = jax.random.split(rng)
        action, logp = sg.sample(mean, log_std, k_policy, scale, bias)
        uniform = jax.random.uniform(k_uniform, action.shape, jnp.float32, bias - scale, bias + scale)
        warm = params["warmup"] if config.random_warmup else False  # static gate
        action = jnp.where(warm, uniform, action)
        logp = jnp.where(warm, uniform_logp, logp)
        return action, None, {"logp": logp.astype(jnp.float32)}

    def actor_step(critic_vars, x, carry, key):
        """One actor Adam step, then (autotune) one temperature step; CleanRL's inner loop."""
        actor_vars, actor_os, log_alpha, alpha_os = carry
        k_pi, k_alpha = jax.random.split(key)
        alpha = jnp.exp(log_alpha)

        def loss_fn(v):
            action, logp = sg.sample(*policy(v, x), k_pi, scale, bias)
            return losses.actor_loss(q_values(critic_vars, x, action), logp, alpha), logp

        (a_loss, logp), grads = jax.value_and_grad(loss_fn, has_aux=True)(actor_vars)
        updates, actor_os = actor_opt.update(grads, actor_os, actor_vars)
        actor_vars = optax.apply_updates(actor_vars, updates)
        t_loss = jnp.zeros((), jnp.float32)
        if config.autotune:  # static
            _, logp_new = sg.sample(*policy(actor_vars, x), k_alpha, scale, bias)
            t_loss, g = jax.value_and_grad(losses.temperature_loss)(log_alpha, logp_new, target_entropy)
            updates, alpha_os = alpha_opt.update(g, alpha_os, log_alpha)
            log_alpha = optax.apply_updates(log_alpha, updates)
        metrics = {"actor_loss": a_loss, "alpha_loss": t_loss, "entropy": -jnp.mean(logp)}
        return (actor_vars, actor_os, log_alpha, alpha_os), metrics

    def actor_phase(critic_vars, x, carry, key):
        """``policy_frequency`` actor (+ temperature) steps; metrics of the last one."""
        carry, metrics = jax.lax.scan(lambda c, k: actor_step(critic_vars, x, c, k), carry,
                                      jax.random.split(key, pf))
        return carry, {**jax.tree.map(lambda m: m[-1], metrics), "actor_updated": jnp.float32(1)}

    def actor_eval(critic_vars, x, carry, key):
        """No update; the actor and temperature losses of the current actor on this batch."""
        actor_vars, _, log_alpha, _ = carry
        action, logp = sg.sample(*policy(actor_vars, x), key, scale, bias)
        t_loss = (losses.temperature_loss(log_alpha, logp, target_entropy) if config.autotune
                  else jnp.zeros((), jnp.float32))
        return carry, {"actor_loss": losses.actor_loss(q_values(critic_vars, x, action), logp,
                                                       jnp.exp(log_alpha)),
                       "alpha_loss": t_loss, "entropy": -jnp.mean(logp),
                       "actor_updated": jnp.float32(0)}

    def learn(state: SACState, batch: ReplayBatch, rng: chex.PRNGKey):
        """One SAC update (module doc, steps 1-3) -> ``(state, metrics, priorities)``.

        Args:
          state: the learner state.
          batch: ``items`` as ``to_items`` builds them (``obs``, ``action [B, A]``,
            ``reward [B]``, ``discount [B]``, ``next_obs``; ``policy_version`` unused) and
            ``weights [B]`` (``None``: ones).
          rng: split as ``k_target, k_actor = jax.random.split(rng)``; the next actions
            are ``squashed_gaussian.sample(mean, log_std, k_target, ...)`` of the actor
            at ``next_obs`` (before this call's actor update); ``k_actor`` is split
            ``policy_frequency`` ways, one key per actor step.

        Returns:
          ``priorities`` ``[B]`` float32: ``mean_i |Q_i(s, a) - y| + 1e-6`` with the
          critics before this call's step. ``metrics``: ``qf_loss`` (the weighted
          critic loss), ``q_mean``, ``target_mean``, ``actor_loss``, ``alpha_loss``,
          ``entropy`` (``-mean log pi``; of the last actor step, or of the current
          actor where the actor does not learn), ``alpha``, ``actor_updated`` (1/0),
          ``target_updated`` (1/0).
        """
        items = batch.items
        reward, discount, action = items["reward"], items["discount"], items["action"]
        B = reward.shape[0]
        chex.assert_shape([reward, discount], (B,))
        chex.assert_shape(action, (B, A))
        weights = jnp.ones((B,), jnp.float32) if batch.weights is None else batch.weights
        chex.assert_shape(weights, (B,))
        if fixed_log_alpha is not None:  # static: the config's temperature (module doc)
            state = state._replace(log_alpha=jnp.asarray(fixed_log_alpha, jnp.float32))
        k_target, k_actor = jax.random.split(rng)
        x, x_next = flat(items["obs"]), flat(items["next_obs"])
        alpha = jnp.exp(state.log_alpha)

        next_action, next_logp = sg.sample(*policy(state.params["actor"], x_next), k_target,
                                           scale, bias)
        next_q = q_values(state.target_critic_params, x_next, next_action)
        y = jax.lax.stop_gradient(losses.soft_q_target(reward.astype(jnp.float32), discount,
                                                       next_q, next_logp, alpha))

        def q_loss(v):
            q = q_values(v, x, action)
            loss, td = losses.critic_loss(q, y, weights)
            return loss, (td, q)

        (qf_loss, (td, q)), grads = jax.value_and_grad(q_loss, has_aux=True)(state.critic_params)
        updates, critic_os = critic_opt.update(grads, state.critic_opt_state, state.critic_params)
        critic_vars = optax.apply_updates(state.critic_params, updates)

        carry = (state.params["actor"], state.actor_opt_state, state.log_alpha, state.alpha_opt_state)
        carry, actor_metrics = jax.lax.cond(
            state.update_step % pf == 0,
            lambda c: actor_phase(critic_vars, x, c, k_actor),
            lambda c: actor_eval(critic_vars, x, c, jax.random.split(k_actor, pf)[0]), carry)
        actor_vars, actor_os, log_alpha, alpha_os = carry

        update_target = state.update_step % tnf == 0
        target = jax.lax.cond(update_target,
                              lambda t: optax.incremental_update(critic_vars, t, config.tau),
                              lambda t: t, state.target_critic_params)
        metrics = {"qf_loss": qf_loss, "q_mean": jnp.mean(q), "target_mean": jnp.mean(y),
                   **actor_metrics, "alpha": jnp.exp(log_alpha),
                   "target_updated": update_target.astype(jnp.float32)}
        priorities = (jnp.mean(jnp.abs(td), axis=0) + 1e-6).astype(jnp.float32)
        new_state = SACState({"actor": actor_vars, "warmup": jnp.asarray(False)}, critic_vars, target,
                             log_alpha, actor_os, critic_os, alpha_os, state.update_step + 1)
        return new_state, metrics, priorities

    def to_items(traj: Trajectory):
        """Segments -> ``(items, valid)``: n-step transitions (``agents/transitions.py``)."""
        return transitions.n_step_transitions(traj, n=config.n_step, gamma=config.gamma)

    def initial_carry(n: int):
        del n
        return None

    replay = ReplaySpec(capacity=config.buffer_size, batch_size=config.batch_size,
                        replay_ratio=float(config.batch_size), min_fill=config.learning_starts,
                        prioritised=config.prioritised)
    return AgentFns(init=init, act=act, learn=learn, initial_carry=initial_carry,
                    replay=replay, to_items=to_items)


AGENT = Agent("sac", SACConfig, make)

"""A complete agent outside the framework: synchronous advantage actor-critic (A2C,
Mnih et al. 2016), one gradient step per batch on GAE(lambda) advantages.

Run it without touching jaxsrl (the module only has to be importable)::

    python scripts/train.py --agent=examples.a2c:AGENT --env=CartPole-v1 --a2c.learning_rate=1e-3
"""

import dataclasses

import jax
import jax.numpy as jnp

from agents import networks
from agents.optim import clipped_adam
from agents.returns import bootstrap_values, gae
from agents.state import LearnerState
from jaxsrl.core.agent import Agent, AgentFns


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    learning_rate: float = 7e-4
    """Adam step size (annealed linearly to 0 over the run)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE mixing parameter (1: Monte-Carlo returns bootstrapped at the segment end)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layers of the policy and of the value MLP."""


def make(config: A2CConfig, spec, num_updates: int) -> AgentFns:
    space = spec.observation_space
    net = networks.ActorCritic(networks.head_for_space(spec.action_space), config.hidden_sizes)
    optimiser, schedule = clipped_adam(config.learning_rate, True, num_updates, config.max_grad_norm)

    def flat(obs):  # Box or Dict observations -> [..., D]
        return networks.flatten_observation(obs, space)

    def init(rng):
        params = net.init(rng, flat(networks.dummy_observation(space)))
        return LearnerState(params, optimiser.init(params), jnp.zeros((), jnp.int32))

    def act(params, obs, carry, rng, *, deterministic=False):
        dist = net.apply(params, flat(obs), method="policy")
        action = networks.mode(dist) if deterministic else networks.sample(dist, rng)
        return action, carry, {"logp": networks.log_prob(dist, action)}

    def loss_fn(params, traj):  # traj leaves: [B, T] (obs: [B, T + 1, ...])
        T = traj.reward.shape[1]
        dist = net.apply(params, flat(jax.tree.map(lambda o: o[:, :T], traj.obs)), method="policy")
        v_obs = net.apply(params, flat(traj.obs), method="value")           # [B, T + 1]
        v_final = net.apply(params, flat(traj.final_obs), method="value")  # [B, T]
        v_tp1 = bootstrap_values(v_obs.T, v_final.T, traj.truncated.T)     # time-major [T, B]
        adv, ret = gae(traj.reward.T, config.gamma * (1.0 - traj.terminated.T), v_obs[:, :T].T,
                       v_tp1, traj.terminated.T | traj.truncated.T, config.gae_lambda)
        adv, ret = jax.lax.stop_gradient((adv.T, ret.T))                   # [B, T]
        mask = jnp.ones_like(traj.reward) if traj.valid is None else traj.valid.astype(jnp.float32)
        mean = lambda x: jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)  # noqa: E731
        policy = -mean(adv * networks.log_prob(dist, traj.action))
        value = 0.5 * mean((ret - v_obs[:, :T]) ** 2)
        ent = mean(networks.entropy(dist))
        total = policy + config.vf_coef * value - config.ent_coef * ent
        return total, {"loss/total": total, "loss/policy": policy, "loss/value": value, "entropy": ent}

    def learn(state, traj, rng):  # noqa: ARG001  (A2C takes no random decisions)
        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, traj)
        updates, opt_state = optimiser.update(grads, state.opt_state, state.params)
        params = jax.tree.map(jnp.add, state.params, updates)
        metrics["learning_rate"] = schedule(state.update_step)
        return LearnerState(params, opt_state, state.update_step + 1), metrics

    return AgentFns(init, act, learn, lambda n: None)


AGENT = Agent("a2c", A2CConfig, make)

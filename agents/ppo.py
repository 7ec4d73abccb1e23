"""Proximal Policy Optimisation (Schulman et al. 2017), clipped-surrogate variant.

One ``learn`` call is one PPO update on a batch of ``B`` segments of ``T`` steps:
values of every observation are recomputed with the current parameters (samples may
be stale in an asynchronous runtime), GAE advantages and returns are computed, then
``num_epochs`` epochs of shuffled minibatches over the ``B * T`` transitions, all
inside one jittable function. Single-device code: the runtime shards the batch axis.

Files: this one builds the agent's functions; ``ppo_config.py`` the hyperparameters,
``ppo_loss.py`` the loss terms, ``ppo_recurrent.py`` the ``entity_lstm`` variant.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents import encoders, networks
from agents import normalization as nz
from agents.optim import clipped_adam_lr_arg
from agents.ppo_config import PPOConfig
from agents.ppo_loss import (PPOLoss, masked_mean, minibatch_metrics, pop_art_preserve, ppo_loss,
                             replace_at, standardise, unstandardise)
from agents.ppo_recurrent import make_recurrent
from agents.returns import bootstrap_values, gae
from agents.state import LearnerState, hyper_from_config, hyper_of
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec, Trajectory

__all__ = ["AGENT", "HYPERPARAMETERS", "PPOConfig", "PPOLoss", "PPOState", "make",
           "ppo_loss"]  # config and loss re-exported


PPOState = LearnerState  # (params, opt_state, update_step, hyper); see agents/state.py

HYPERPARAMETERS: tuple[str, ...] = ("learning_rate", "ent_coef", "vf_coef", "clip_eps", "gamma",
                                    "gae_lambda")
"""``PPOConfig`` fields that ``learn`` reads from ``state.hyper`` (``[]`` float32 each),
not from the config: changing them in the state takes effect at the next ``learn``
without recompiling (population-based training). ``learning_rate`` is the base step
size; ``anneal_lr`` still multiplies it by ``1 - step / total``. The config values are
the initial ones (``init``)."""


class _Batch(NamedTuple):
    """Flat transitions, ``[N, ...]`` leaves with ``N = B * T``.

    ``return_`` and ``old_value`` are in the value head's units; ``mask`` is ``[N]``
    bool (valid steps) or ``None``; ``old_dist`` the pre-update policy at each sample
    (``kl_estimator="closed_form"``) or ``None``.
    """

    obs: chex.ArrayTree
    action: jax.Array
    behaviour_logp: jax.Array
    advantage: jax.Array
    return_: jax.Array
    old_value: jax.Array
    mask: jax.Array | None
    old_dist: networks.Distribution | None = None  # [N, ...] leaves; closed-form KL only


def _per_sample(dist: networks.Distribution) -> networks.Distribution:
    """``dist`` with only per-sample leaves (the KL needs no ``start``; a Gaussian's
    state-independent ``log_std [A]`` is broadcast to its mean), so minibatches can index it."""
    if isinstance(dist, networks.DiagGaussian):
        return dist._replace(log_std=jnp.broadcast_to(dist.log_std, dist.mean.shape))
    return dist._replace(start=None)


def make(config: PPOConfig, spec: EnvSpec, num_updates: int) -> AgentFns:
    """Builds PPO's pure functions for one environment interface.

    Args:
      config: hyperparameters.
      spec: observation and action spaces of one agent.
      num_updates: planned number of ``learn`` calls (horizon of the LR anneal).

    Returns:
      ``AgentFns``. ``act`` has an extra static keyword ``deterministic=False`` that
      takes the most likely action instead of sampling (``logp`` is still of it).
    """
    if config.network == "entity_lstm":
        keys = getattr(spec.observation_space, "spaces", None)
        if not isinstance(keys, dict) or not {"self", "lidar"} <= set(keys):
            raise ValueError(
                "ppo.network='entity_lstm' needs entity observations (a Dict with 'self', "
                "'lidar' and per-kind entity/mask keys, as hide_and_seek gives); got "
                f"{spec.observation_space}: use ppo.network='mlp' for this environment")
        return make_recurrent(config, spec, num_updates, PPOState, HYPERPARAMETERS)
    if config.network != "mlp":
        raise ValueError(f"unknown network {config.network!r}; valid: 'mlp', 'entity_lstm'")
    if config.activation not in networks.ACTIVATIONS:
        raise ValueError(f"activation {config.activation!r} not in "
                         f"{sorted(networks.ACTIVATIONS)}")
    obs_space = spec.observation_space
    # Vectors -> MLPs on the flat observation; images (uint8 [H, W, C]), alone or in a
    # Dict -> Nature CNN per image key + flattened other keys (agents/encoders.py).
    net, net_input = encoders.actor_critic(
        obs_space, networks.head_for_space(spec.action_space), config.hidden_sizes,
        config.activation, config.shared_torso, config.init, config.log_std_init)
    unroll = encoders.scan_unroll(net)  # CNN gradients are slow inside XLA:CPU loops
    steps_per_update = config.num_epochs * config.num_minibatches
    optimiser, lr_multiplier = clipped_adam_lr_arg(config.anneal_lr, num_updates * steps_per_update,
                                                   config.max_grad_norm)

    def _obs(params, obs):
        """Observations as the network sees them (normalised if configured)."""
        if config.normalize_observations:
            obs = nz.normalize_obs(params["obs_stats"], obs)
        return net_input(obs)

    def _unscale(params, v):
        """Network value -> return units (identity unless ``normalize_values``)."""
        return unstandardise(params["ret_stats"], v) if config.normalize_values else v

    def init(rng: chex.PRNGKey) -> PPOState:
        """Parameters ``{"net", "obs_stats", "ret_stats"}``, Adam state, step 0 and the
        configured ``HYPERPARAMETERS`` as ``hyper``."""
        dummy = networks.dummy_observation(obs_space)
        variables = net.init(rng, net_input(dummy))
        params = {"net": variables,
                  "obs_stats": nz.init_obs_stats(jax.tree.map(lambda x: x[0], dummy)),
                  "ret_stats": nz.init_stats(())}
        return PPOState(params, optimiser.init(variables), jnp.zeros((), jnp.int32),
                        hyper_from_config(config, HYPERPARAMETERS))

    def act(params, obs, carry, rng, *, deterministic: bool = False):
        """Actions ``[N, *act]`` for observations ``[N, *obs]``; ``carry`` passes through.

        ``deterministic`` (static) takes the mode instead of sampling. Box actions are
        unsquashed: clip them for the environment, store them unclipped.
        """
        dist = net.apply(params["net"], _obs(params, obs), method="policy")
        action = networks.mode(dist) if deterministic else networks.sample(dist, rng)
        return action, carry, {"logp": networks.log_prob(dist, action)}

    def value_fn(params, obs):
        """Values in return units of observations ``[B, T, ...]``."""
        return _unscale(params, net.apply(params["net"], _obs(params, obs), method="value"))

    # The value head's output layer (rescaled by PopArt when the return statistics move).
    value_layer = (("params", "value_out") if isinstance(net, networks.SharedActorCritic)
                   else ("params", "value_net", f"Dense_{len(config.hidden_sizes)}"))

    def loss_fn(variables, batch: _Batch, hyper):
        # batch.obs is already normalised; return_/old_value are in the value head's units.
        dist, value = net.apply(variables, net_input(batch.obs))
        out = ppo_loss(
            networks.log_prob(dist, batch.action),
            batch.behaviour_logp,
            batch.advantage,
            value,
            batch.old_value,
            batch.return_,
            networks.entropy(dist),
            clip_eps=hyper["clip_eps"],
            vf_coef=hyper["vf_coef"],
            ent_coef=hyper["ent_coef"],
            clip_value_loss=config.clip_value_loss,
            normalize_advantages=config.normalize_advantages,
            kl_coef=config.kl_coef,
            value_clip_eps=config.value_clip_eps or None,
            mask=batch.mask,
            ratio_clip=config.ratio_clip,
            ratio_clamp=config.ratio_clamp,
            kl_penalty=(None if batch.old_dist is None
                        else networks.kl_divergence(dist, batch.old_dist)),
        )
        return out.total, out

    def sgd_step(carry, batch: _Batch, hyper):
        params, opt_state, step = carry
        grads, out = jax.grad(loss_fn, has_aux=True)(params, batch, hyper)
        lr = hyper["learning_rate"] * lr_multiplier(step)  # what Adam uses (for the metrics)
        updates, opt_state = optimiser.update(grads, opt_state, params,
                                              learning_rate=hyper["learning_rate"])
        params = optax.apply_updates(params, updates)
        return (params, opt_state, step + 1), minibatch_metrics(out, grads, lr)

    def learn(state: PPOState, traj: Trajectory, rng: chex.PRNGKey):
        """One PPO update on ``B`` segments of ``T`` steps -> ``(state, metrics)``.

        Order (so that on-policy data at learning rate 0 gives ratio 1 and clipped =
        unclipped value loss at the first step): values and GAE with the parameters
        and statistics the actors used; then the return statistics merge this batch's
        returns and PopArt rescales the value head to them; SGD on observations
        normalised with the *unchanged* observation statistics; the observation
        statistics merge this batch last (CleanRL/SB3 normalise with the statistics
        the actors used as well). Steps where ``traj.valid`` is False count nowhere.
        The ``HYPERPARAMETERS`` come from ``state.hyper`` (carried over unchanged).
        """
        B, T = traj.reward.shape
        n = B * T
        if n % config.num_minibatches:
            raise ValueError(f"B * T = {B} * {T} is not divisible by num_minibatches="
                             f"{config.num_minibatches}")
        chex.assert_shape([traj.terminated, traj.truncated, traj.behaviour_logp], (B, T))
        valid = traj.valid  # [B, T] bool or None
        if valid is not None:
            chex.assert_shape(valid, (B, T))
        params, hyper = state.params, hyper_of(state, HYPERPARAMETERS, "ppo")

        # Fresh values with the current parameters; also the "old" values for clipping.
        v_obs = value_fn(params, traj.obs)  # [B, T + 1]
        v_final = value_fn(params, traj.final_obs)  # [B, T]
        chex.assert_shape(v_obs, (B, T + 1))
        terminated = traj.terminated.astype(jnp.float32)
        v_tp1 = bootstrap_values(v_obs.T, v_final.T, traj.truncated.T)  # [T, B]
        adv, ret = gae(
            traj.reward.T.astype(jnp.float32),
            hyper["gamma"] * (1.0 - terminated.T),
            v_obs[:, :T].T,
            v_tp1,
            jnp.logical_or(traj.terminated, traj.truncated).T,
            hyper["gae_lambda"],
        )  # [T, B] each

        target, old_value = ret.T, v_obs[:, :T]  # [B, T], return units
        variables = params["net"]
        if config.normalize_values:
            rs_old = params["ret_stats"]
            rs = nz.update_stats(rs_old, target, valid)
            variables = replace_at(variables, value_layer,
                                   lambda d: pop_art_preserve(d, rs_old, rs))
            params = {**params, "ret_stats": rs}
            target, old_value = standardise(rs, target), standardise(rs, old_value)

        flat = lambda x: x.reshape((n,) + x.shape[2:])
        obs = traj.obs
        if config.normalize_observations:
            obs = nz.normalize_obs(params["obs_stats"], obs)
        old_dist = None
        if config.kl_coef and config.kl_estimator == "closed_form":
            old_dist = jax.tree.map(flat, _per_sample(net.apply(
                params["net"], net_input(jax.tree.map(lambda x: x[:, :T], obs)), method="policy")))
        data = _Batch(
            obs=jax.tree.map(lambda x: flat(x[:, :T]), obs),
            action=flat(traj.action),
            behaviour_logp=flat(traj.behaviour_logp),
            advantage=flat(adv.T),
            return_=flat(target),
            old_value=flat(old_value),
            mask=None if valid is None else flat(valid),
            old_dist=old_dist,
        )

        def epoch(carry, key):
            perm = (jax.random.permutation(key, n) if config.shuffle_minibatches
                    else jnp.arange(n)).reshape(config.num_minibatches, -1)
            minibatches = jax.tree.map(lambda x: x[perm], data)  # [M, N / M, ...]
            return jax.lax.scan(lambda c, mb: sgd_step(c, mb, hyper), carry, minibatches,
                                unroll=unroll)

        first_step = state.update_step * steps_per_update  # optimiser steps so far
        (variables, opt_state, _), metrics = jax.lax.scan(
            epoch, (variables, state.opt_state, first_step),
            jax.random.split(rng, config.num_epochs), unroll=unroll,
        )
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["value_mean"] = masked_mean(v_obs[:, :T], valid)
        metrics["advantage_mean"] = masked_mean(adv.T, valid)
        if config.normalize_values:
            metrics["return_std"] = jnp.sqrt(params["ret_stats"].var)
        if config.normalize_observations:  # last: act and learn used the same statistics
            params = {**params, "obs_stats": nz.update_obs_stats(
                params["obs_stats"], jax.tree.map(lambda x: x[:, :T], traj.obs), valid)}
        return PPOState({**params, "net": variables}, opt_state, state.update_step + 1,
                        hyper), metrics

    def initial_carry(n: int):
        del n
        return None

    return AgentFns(init=init, act=act, learn=learn, initial_carry=initial_carry)


AGENT = Agent("ppo", PPOConfig, make)

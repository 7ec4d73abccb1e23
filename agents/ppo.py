"""Proximal Policy Optimisation (Schulman et al. 2017), clipped-surrogate variant.

One ``learn`` call is one PPO update on a batch of ``B`` segments of ``T`` steps:
values of every observation are recomputed with the current parameters (samples may
be stale in an asynchronous runtime), GAE advantages and returns are computed, then
``num_epochs`` epochs of shuffled minibatches over the ``B * T`` transitions, all
inside one jittable function. Single-device code: the runtime shards the batch axis.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from agents import encoders, networks
from agents import normalization as nz
from agents.optim import clipped_adam_lr_arg
from agents.ppo_loss import (RATIO_CLIPS, PPOLoss, masked_mean, minibatch_metrics, pop_art_preserve,
                             ppo_loss, replace_at, standardise, unstandardise)
from agents.ppo_recurrent import make_recurrent
from agents.returns import bootstrap_values, gae
from agents.state import LearnerState, hyper_from_config, hyper_of
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec, Trajectory

__all__ = ["AGENT", "HYPERPARAMETERS", "PPOConfig", "PPOLoss", "PPOState", "make",
           "ppo_loss"]  # loss re-exported


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters.

    Defaults follow CleanRL's ``ppo.py`` except a 12x larger learning rate, tuned on
    CartPole-v1 with 8 envs x 128 steps per update (solves it in ~50-100k env steps).
    """

    learning_rate: float = 3e-3
    """Adam step size (the start value when ``anneal_lr``). Tuned on CartPole-v1;
    CleanRL's 2.5e-4 is the safer start for harder tasks."""
    anneal_lr: bool = True
    """Anneal the step size linearly to 0 over ``num_updates * num_epochs *
    num_minibatches`` optimiser steps."""
    num_epochs: int = 4
    """Passes over each batch per ``learn`` call."""
    num_minibatches: int = 4
    """Minibatches per epoch; ``B * T`` must be divisible by it."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (bias-variance trade-off of the advantage estimate)."""
    clip_eps: float = 0.2
    """Surrogate clipping range epsilon: ratios outside ``1 +- eps`` get no gradient."""
    vf_coef: float = 0.5
    """Weight of the value loss in the total loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (subtracted from the total loss)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip applied before Adam."""
    clip_value_loss: bool = True
    """Clip the value change to ``+- clip_eps`` around the pre-update values (PPO2)."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of both the policy and the value MLP (after the CNN for
    image observations; ``()``: linear heads, as CleanRL's Atari PPO)."""
    activation: str = "tanh"
    """Hidden activation: one of ``networks.ACTIVATIONS`` (tanh, relu, gelu, ...)."""
    network: str = "mlp"
    """``mlp`` (feed-forward, any Box/Dict observation; uint8 ``[H, W, C]`` images get a
    Nature CNN first, see ``agents/encoders.py``) or ``entity_lstm`` (entity
    attention + LSTM for hide-and-seek; see ``agents/ppo_recurrent.py``)."""
    attention_heads: int = 4
    """Heads of the entity self-attention (``entity_lstm`` only)."""
    entity_embed: int = 0
    """``entity_lstm``: entity embedding and attention width (0: ``hidden_sizes[0]``).
    Released spec: 128."""
    dense_size: int = 0
    """``entity_lstm``: the dense layer between pooling and the LSTM (0: ``hidden_sizes[0]``).
    Released spec: 256."""
    lstm_size: int = 0
    """``entity_lstm``: LSTM units (0: ``hidden_sizes[0]``). Released spec: 256."""
    attention_style: str = "ours"
    """``entity_lstm``: ``ours`` (residual attention + LN, then a feed-forward block +
    LN; the attended self token joins the pool) or ``released`` (OpenAI's
    ``residual_sa_block`` with pre- and post-LayerNorm and no feed-forward block, the
    self embedding joins the pool, LN around the dense layer and after the LSTM;
    mae:ma_policy/layers.py:89-139). See ``agents/entity_network.py``."""
    lidar_filters: int = 4
    """``entity_lstm``: filters of the circular lidar convolution (released spec: 9)."""
    lidar_to_entities: bool = False
    """``entity_lstm``: the flattened lidar features join the self features that are
    concatenated to every entity (as released) instead of the self token only."""
    normalize_observations: bool = False
    """Running mean/std observation normalisation, clipped to +-10 (statistics in the
    learner state, saved with checkpoints). For vector/MuJoCo observations."""
    normalize_values: bool = False
    """Value head predicts returns standardised by a running mean/std of the GAE returns
    (plays the part of the reward scaling of PPO for MuJoCo, Engstrom et al. 2020). When
    the statistics change, the head's last layer is rescaled so its unnormalised output
    is preserved (PopArt, van Hasselt et al. 2016; ``agents.ppo_loss.pop_art_preserve``)."""
    kl_coef: float = 0.0
    """Weight of a KL(pi_old || pi) penalty added to the clipped loss (0: none).
    Sample Factory's ``kl_loss_coeff`` (0.1 in its MuJoCo settings)."""
    kl_estimator: str = "sample"
    """The KL of the ``kl_coef`` penalty: ``sample`` (``mean((r - 1) - log r)``, an
    estimate of KL(pi_old || pi) from the taken actions) or ``closed_form`` (KL(pi ||
    pi_old) of the whole distributions, as Sample Factory; ``pi_old`` is the policy at
    the start of the update, so the actors' lag does not enter it; ``mlp`` networks)."""
    shared_torso: bool = False
    """Vector observations: one MLP torso under the policy and value heads (Sample
    Factory's default, ``actor_critic_share_weights``) instead of two MLPs (CleanRL)."""
    init: str = "orthogonal"
    """Weight initialisation of the MLPs: ``orthogonal`` (CleanRL: gain sqrt(2), 0.01 for
    the policy output, 1 for the value) or ``torch_default`` (PyTorch's ``nn.Linear``
    default with zero biases, Sample Factory's ``policy_initialization=torch_default``)."""
    value_clip_eps: float = 0.0
    """Value clipping range around the pre-update values, in the value head's units
    (0: ``clip_eps``). Sample Factory's ``ppo_clip_value`` (1.0)."""
    ratio_clip: str = "symmetric"
    """Clipping interval of the ratio: ``symmetric`` ``[1 - eps, 1 + eps]`` (Schulman et
    al. 2017) or ``inverse`` ``[1/(1 + eps), 1 + eps]`` (Sample Factory; see
    ``agents.ppo_loss.ppo_loss``)."""
    ratio_clamp: float = 0.0
    """Clamp the ratio to ``[1/c, c]`` before the surrogate (0: no clamp; Sample Factory:
    20, i.e. [0.05, 20])."""
    shuffle_minibatches: bool = True
    """Draw each epoch's minibatches as a random permutation of the batch (CleanRL);
    ``False``: the same contiguous slices of whole segments every epoch, in order
    (Sample Factory's ``shuffle_minibatches=False``)."""
    log_std_init: float = 0.0
    """Initial learned log standard deviation of a Box action's Gaussian (``mlp`` networks; 0: std 1; RL
    Zoo's tuned MuJoCo PPO uses -2 to -0.5)."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first out-of-range hyperparameter."""
        checks = [("learning_rate", self.learning_rate > 0), ("num_epochs", self.num_epochs >= 1),
                  ("num_minibatches", self.num_minibatches >= 1), ("gamma", 0 <= self.gamma <= 1),
                  ("gae_lambda", 0 <= self.gae_lambda <= 1), ("clip_eps", self.clip_eps > 0),
                  ("vf_coef", self.vf_coef >= 0), ("ent_coef", self.ent_coef >= 0),
                  ("max_grad_norm", self.max_grad_norm > 0), ("kl_coef", self.kl_coef >= 0),
                  ("value_clip_eps", self.value_clip_eps >= 0), ("attention_heads", self.attention_heads >= 1),
                  ("ratio_clamp", self.ratio_clamp == 0 or self.ratio_clamp > 1),
                  ("entity_embed", self.entity_embed >= 0), ("dense_size", self.dense_size >= 0),
                  ("lstm_size", self.lstm_size >= 0), ("lidar_filters", self.lidar_filters >= 1),
                  ("hidden_sizes", all(h >= 1 for h in self.hidden_sizes))]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"ppo.{name}={getattr(self, name)!r} is out of range")
        if self.kl_estimator not in ("sample", "closed_form"):
            raise ValueError(f"ppo.kl_estimator={self.kl_estimator!r}; valid: 'sample', "
                             "'closed_form'")
        if self.kl_estimator == "closed_form" and self.network != "mlp":
            raise ValueError("ppo.kl_estimator='closed_form' needs ppo.network='mlp'; got "
                             f"{self.network!r}")
        if self.ratio_clip not in RATIO_CLIPS:
            raise ValueError(f"ppo.ratio_clip={self.ratio_clip!r}; valid: {', '.join(RATIO_CLIPS)}")
        if self.attention_style not in ("ours", "released"):
            raise ValueError(f"ppo.attention_style={self.attention_style!r}; valid: 'ours', 'released'")
        width = self.entity_embed or (self.hidden_sizes[0] if self.hidden_sizes else 64)
        if self.network == "entity_lstm" and width % self.attention_heads:
            raise ValueError(f"entity width {width} is not divisible by ppo.attention_heads="
                             f"{self.attention_heads}")
        if self.init not in networks.INITS:
            raise ValueError(f"ppo.init={self.init!r}; valid: {', '.join(networks.INITS)}")
        if self.network not in ("mlp", "entity_lstm"):
            raise ValueError(f"ppo.network={self.network!r}; valid: 'mlp', 'entity_lstm'")


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

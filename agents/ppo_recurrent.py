"""Recurrent PPO with the entity-attention network, for hide-and-seek.

Selected by ``PPOConfig.network = "entity_lstm"`` (``agents.ppo.make`` dispatches
here). Differences from the feed-forward path in ``agents/ppo.py``:

* the recurrent state travels with inference requests (the actor zeroes it at
  episode start) and each segment carries its first-step carry; learning unrolls
  the LSTM over the whole segment (BPTT length = ``segment_length``), zeroing the
  carry after every step that ended an episode;
* minibatches are sets of whole segments, not shuffled transitions;
* observations are normalised with running statistics (``normalize_observations``,
  merged after the loss so ``act`` and ``learn`` agree) and values with a running
  return scale (``normalize_values``: the value head predicts ``(G - mean) / std``,
  its output layer rescaled by PopArt when the statistics move), both kept in
  ``params`` so that ``act`` and checkpoints see them;
* steps where ``Trajectory.valid`` is False (idle rows) count in no statistic or loss;
* a non-finite gradient skips the optimiser step (``optax.apply_if_finite``).

The hyperparameters of ``agents.ppo.HYPERPARAMETERS`` are read from ``state.hyper``, as
in the feed-forward path.

The loss is ``agents.ppo.ppo_loss`` (Schulman et al. 2017, eq. 7, 9); advantages are
GAE (Schulman et al. 2016) with bootstrapping through truncation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from agents import networks, normalization as nz
from agents.optim import clipped_adam_lr_arg
from agents import entity_network
from agents.ppo_loss import (masked_mean, minibatch_metrics, pop_art_preserve, ppo_loss,
                             replace_at, standardise, unstandardise)
from agents.returns import bootstrap_values, gae
from agents.state import hyper_from_config, hyper_of
from jaxsrl.core.agent import AgentFns, EnvSpec, Trajectory


def _unstack_constants(dist):
    """``lax.scan`` stacks a distribution's per-step constants (``start``, ``log_std``)
    along time; keep one copy so they broadcast against ``[T, b, ...]`` leaves."""
    if isinstance(dist, networks.DiagGaussian):
        return dist._replace(log_std=dist.log_std[0])
    return dist._replace(start=dist.start[0])


def unroll_network(net, variables, obs, final_obs, reset, carry):
    """Run the recurrent network over a segment, time-major.

    Args:
      net: a ``RecurrentEntityActorCritic``.
      variables: its Flax variables.
      obs: observation leaves ``[T + 1, b, ...]`` (the last is the bootstrap one).
      final_obs: leaves ``[T, b, ...]``: last observations of truncated episodes, or
        ``None`` to skip their values.
      reset: ``[T + 1, b]`` bool: zero the carry before step ``t`` (a new episode).
      carry: the carry before step 0 (``[b, ...]`` leaves).

    Returns:
      ``(dists, values [T + 1, b], final_values [T, b] or None)``; the value of
      ``final_obs[t]`` continues from the value carry after step ``t``.
    """
    def step(c, inputs):
        o, r = inputs
        dist, value, c = net.apply(variables, o, c, r)
        return c, (dist, value, c[1])

    _, (dists, values, v_carries) = jax.lax.scan(step, carry, (obs, reset))
    dists = _unstack_constants(dists)
    if final_obs is None:
        return dists, values, None
    T = reset.shape[0] - 1
    rows = jax.tree.leaves(final_obs)[0].shape[1]
    v_final, _ = jax.vmap(lambda o, c: net.apply(variables, o, c, jnp.zeros((rows,), bool),
                                                 method="value"))(
        final_obs, jax.tree.map(lambda x: x[:T], v_carries))
    return dists, values, v_final


def _first_steps(dist, T: int):
    """The first ``T`` steps of a time-major distribution from :func:`unroll_network`.

    Only the per-step leaves are cut: the unstacked constants (``start [A]``,
    ``log_std [A]``) are not time-indexed (cutting them broke ``T < A``)."""
    if isinstance(dist, networks.DiagGaussian):
        return dist._replace(mean=dist.mean[:T])
    return dist._replace(logits=dist.logits[:T])


def _schedule_count(opt_state) -> jax.Array:
    """The step count Adam's schedule reads (skipped non-finite steps do not advance it)."""
    is_sched = lambda x: isinstance(x, optax.ScaleByScheduleState)
    return next(x for x in jax.tree.leaves(opt_state, is_leaf=is_sched) if is_sched(x)).count


def make_recurrent(config, spec: EnvSpec, num_updates: int, state_cls,
                   hyperparameters: tuple[str, ...]) -> AgentFns:
    """Build recurrent PPO's pure functions (see module docstring).

    ``state.params`` is ``{"net": variables, "obs_stats": ..., "ret_stats": ...}``;
    ``state.hyper`` holds ``hyperparameters`` (``agents.ppo.HYPERPARAMETERS``).
    """
    net = entity_network.from_config(networks.head_for_space(spec.action_space), config)
    obs_space = spec.observation_space
    steps_per_update = config.num_epochs * config.num_minibatches
    inner, lr_multiplier = clipped_adam_lr_arg(config.anneal_lr, num_updates * steps_per_update,
                                               config.max_grad_norm)
    optimiser = optax.apply_if_finite(inner, max_consecutive_errors=1_000_000)

    def initial_carry(n: int):
        return net.initial_carry(n)

    def _obs(params, obs):
        return nz.normalize_obs(params["obs_stats"], obs) if config.normalize_observations else obs

    def init(rng):
        dummy = networks.dummy_observation(obs_space)
        variables = net.init(rng, dummy, initial_carry(1), jnp.zeros((1,), bool))
        params = {"net": variables,
                  "obs_stats": nz.init_obs_stats(jax.tree.map(lambda x: x[0], dummy)),
                  "ret_stats": nz.init_stats(())}
        return state_cls(params, optimiser.init(variables), jnp.zeros((), jnp.int32),
                         hyper_from_config(config, hyperparameters))

    def act(params, obs, carry, rng, *, deterministic: bool = False):
        dist, _, carry = net.apply(params["net"], _obs(params, obs), carry,
                                   jnp.zeros(jax.tree.leaves(obs)[0].shape[:1], bool))
        action = networks.mode(dist) if deterministic else networks.sample(dist, rng)
        return action, carry, {"logp": networks.log_prob(dist, action)}

    def unroll(variables, obs, final_obs, reset, carry):
        return unroll_network(net, variables, obs, final_obs, reset, carry)

    value_layer = ("params", "v_out")  # rescaled by PopArt when the return statistics move

    def learn(state, traj: Trajectory, rng):
        """One update; same order of operations as ``agents.ppo`` (see its ``learn``)."""
        B, T = traj.reward.shape
        if B % config.num_minibatches:
            raise ValueError(f"B={B} segments not divisible by num_minibatches={config.num_minibatches}")
        params, hyper = state.params, hyper_of(state, hyperparameters, "ppo")
        tm = lambda x: jnp.swapaxes(x, 0, 1)  # [B, T, ...] -> [T, B, ...]
        obs = jax.tree.map(tm, _obs(params, traj.obs))
        final_obs = jax.tree.map(tm, _obs(params, traj.final_obs))
        done = jnp.logical_or(traj.terminated, traj.truncated)
        reset = jnp.concatenate([jnp.zeros((B, 1), bool), done], axis=1)  # [B, T+1]: before step t
        valid = None if traj.valid is None else tm(traj.valid)  # [T, B]
        _, v_norm, vf_norm = unroll(params["net"], obs, final_obs, tm(reset), traj.carry)
        rs = params["ret_stats"]
        scale = (lambda v: unstandardise(rs, v)) if config.normalize_values else (lambda v: v)
        v_obs, v_final = scale(v_norm), scale(vf_norm)  # [T+1, B], [T, B]
        v_tp1 = bootstrap_values(v_obs, v_final, tm(traj.truncated))
        adv, ret = gae(tm(traj.reward).astype(jnp.float32),
                       hyper["gamma"] * (1.0 - tm(traj.terminated).astype(jnp.float32)),
                       v_obs[:T], v_tp1, tm(done), hyper["gae_lambda"])  # [T, B]
        target, old_value = ret, v_obs[:T]
        variables = params["net"]
        if config.normalize_values:
            rs_new = nz.update_stats(rs, ret, valid)
            variables = replace_at(variables, value_layer,
                                   lambda d: pop_art_preserve(d, rs, rs_new))
            rs = rs_new
            params = {**params, "ret_stats": rs}
            target, old_value = standardise(rs, target), standardise(rs, old_value)
        data = dict(obs=obs, reset=tm(reset), action=tm(traj.action),
                    logp=tm(traj.behaviour_logp), adv=adv, target=target, old_value=old_value,
                    valid=jnp.ones((T, B), bool) if valid is None else valid)

        def loss_fn(variables, mb, carry):
            dists, values, _ = unroll(variables, mb["obs"], None, mb["reset"], carry)
            dist = _first_steps(dists, T)
            flat = lambda x: x.reshape((-1,) + x.shape[2:])
            out = ppo_loss(flat(networks.log_prob(dist, mb["action"])), flat(mb["logp"]),
                           flat(mb["adv"]), flat(values[:T]), flat(mb["old_value"]),
                           flat(mb["target"]), flat(networks.entropy(dist)),
                           clip_eps=hyper["clip_eps"], vf_coef=hyper["vf_coef"],
                           ent_coef=hyper["ent_coef"],
                           clip_value_loss=config.clip_value_loss,
                           normalize_advantages=config.normalize_advantages,
                           kl_coef=config.kl_coef, value_clip_eps=config.value_clip_eps or None,
                           mask=None if traj.valid is None else flat(mb["valid"]),
                           ratio_clip=config.ratio_clip, ratio_clamp=config.ratio_clamp)
            return out.total, out

        def sgd_step(carry, idx):
            variables, opt_state = carry
            mb = jax.tree.map(lambda x: x[:, idx], data)  # segments idx, time-major
            seg_carry = jax.tree.map(lambda x: x[idx], traj.carry)
            grads, out = jax.grad(loss_fn, has_aux=True)(variables, mb, seg_carry)
            lr = hyper["learning_rate"] * lr_multiplier(_schedule_count(opt_state))
            updates, opt_state = optimiser.update(grads, opt_state, variables,
                                                  learning_rate=hyper["learning_rate"])
            variables = optax.apply_updates(variables, updates)
            return (variables, opt_state), minibatch_metrics(out, grads, lr)

        def epoch(carry, key):
            perm = (jax.random.permutation(key, B) if config.shuffle_minibatches
                    else jnp.arange(B)).reshape(config.num_minibatches, -1)
            return jax.lax.scan(sgd_step, carry, perm)

        (variables, opt_state), metrics = jax.lax.scan(
            epoch, (variables, state.opt_state), jax.random.split(rng, config.num_epochs))
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics.update(value_mean=masked_mean(v_obs[:T], valid), advantage_mean=masked_mean(adv, valid),
                       return_std=jnp.sqrt(rs.var),
                       nonfinite_grads=jnp.asarray(opt_state.total_notfinite, jnp.float32))
        if config.normalize_observations:  # last: act and learn used the same statistics
            params = {**params, "obs_stats": nz.update_obs_stats(
                params["obs_stats"], jax.tree.map(lambda x: x[:, :T], traj.obs), traj.valid)}
        return state_cls({**params, "net": variables}, opt_state, state.update_step + 1,
                         hyper), metrics

    return AgentFns(init=init, act=act, learn=learn, initial_carry=initial_carry)

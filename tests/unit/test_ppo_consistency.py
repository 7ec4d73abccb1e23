"""PPO's learn at a vanishing learning rate on on-policy data, and idle rows.

On-policy data (behaviour log-probabilities from ``act`` with the same parameters) at a
learning rate of ~0 must give ratio 1 (approx_kl 0, clip fraction 0) and, because the
parameters are those that produced the "old" values, a clipped value loss equal to the
unclipped one, with observation and value normalisation on or off, for the MLP and the
recurrent path. These catch the value-clip centre in the wrong units (issue 15, bug 1:
old values standardised with the new statistics while the head is in the old ones) and
observation statistics merged before the loss (bug 6). The idle-row tests check that
steps with ``Trajectory.valid == False`` change nothing (bug 5).
"""

import dataclasses
import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import ppo
from agents.ppo_loss import get_at, replace_at
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import env_spaces

BOX_OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,))
MLP_SPECS = {
    "discrete": EnvSpec(BOX_OBS, gymnasium.spaces.Discrete(4)),
    "multi_discrete": EnvSpec(BOX_OBS, gymnasium.spaces.MultiDiscrete([2, 3, 5])),
    "box": EnvSpec(BOX_OBS, gymnasium.spaces.Box(-2.0, 2.0, (2,))),
}
B, T = 6, 8
TINY_LR = 1e-30  # > 0 as the config demands; Adam's steps are then ~1e-30


@functools.cache
def hs_spec():
    return EnvSpec(*env_spaces("hide_and_seek"))


def _config(recurrent, norm, **kw):
    base = dict(hidden_sizes=(16,) if recurrent else (16, 16), num_epochs=2, num_minibatches=2,
                normalize_observations=norm, normalize_values=norm, anneal_lr=False)
    if recurrent:
        base.update(network="entity_lstm", attention_heads=2)
    return ppo.PPOConfig(**{**base, **kw})


def _obs(space, lead, rng):
    """Observations far from the initial statistics (mean 0, var 1): ``3 x + 5``."""
    if isinstance(space, gymnasium.spaces.Dict):
        out = {}
        for k, s in space.spaces.items():
            x = rng.random(lead + s.shape).astype(np.float32)
            out[k] = (x > 0.3).astype(np.float32) if k.endswith("_mask") else 3 * x + 5
        return out
    return (3 * rng.normal(size=lead + space.shape) + 5).astype(np.float32)


def _sharpen(params, recurrent):
    """A confident policy: logits x20 (Gaussian: std e^-2), so input shifts show in the ratio."""
    net = params["net"]
    if recurrent:
        net = replace_at(net, ("params", "pi_out", "kernel"), lambda k: k * 20.0)
    elif "policy_out" in net["params"]:  # shared torso
        net = replace_at(net, ("params", "policy_out", "kernel"), lambda k: k * 20.0)
    else:
        layers = get_at(net, ("params", "policy_net"))
        last = sorted(layers, key=lambda n: int(n.split("_")[1]))[-1]
        net = replace_at(net, ("params", "policy_net", last, "kernel"), lambda k: k * 20.0)
    if "log_std" in net["params"]:
        net = replace_at(net, ("params", "log_std"), lambda s: s - 2.0)
    return {**params, "net": net}


def on_policy_batch(fns, params, spec, seed=0):
    """A trajectory whose actions and log-probabilities come from ``act(params, ...)``.

    Rewards ~ 10 +- 10, a termination and truncations (one on the last step); recurrent
    carries are zeroed after every done, as the actor does.
    """
    rng = np.random.default_rng(seed)
    obs = _obs(spec.observation_space, (B, T + 1), rng)
    final_obs = _obs(spec.observation_space, (B, T), rng)
    terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
    terminated[0, 3] = truncated[1, 4] = truncated[2, T - 1] = True
    done = terminated | truncated
    carry0 = fns.initial_carry(B)
    carry, actions, logps = carry0, [], []
    act = jax.jit(fns.act)
    for t in range(T):
        a, carry, extras = act(params, jax.tree.map(lambda x: x[:, t], obs), carry,
                               jax.random.PRNGKey(100 + t))
        actions.append(np.asarray(a))
        logps.append(np.asarray(extras["logp"]))
        if carry is not None:
            keep = jnp.asarray(~done[:, t], jnp.float32)[:, None]
            carry = jax.tree.map(lambda c: c * keep, carry)
    return Trajectory(obs=obs, action=np.stack(actions, 1), final_obs=final_obs,
                      reward=(10 + 10 * rng.normal(size=(B, T))).astype(np.float32),
                      terminated=terminated, truncated=truncated,
                      behaviour_logp=np.stack(logps, 1).astype(np.float32),
                      policy_version=np.zeros((B, T), np.int32), carry=carry0)


SHARED = dict(shared_torso=True, init="torch_default")  # Sample Factory's MLP
CASES = [(name, False, norm) for name in MLP_SPECS for norm in (False, True)]
CASES += [("box_shared", False, True)]
CASES += [("hide_and_seek", True, norm) for norm in (False, True)]


@pytest.mark.parametrize("name,recurrent,norm", CASES)
def test_on_policy_data_at_zero_learning_rate_gives_ratio_one_and_centred_value_clip(
        name, recurrent, norm):
    spec = hs_spec() if recurrent else MLP_SPECS[name.removesuffix("_shared")]
    extra = SHARED if name.endswith("_shared") else {}
    metrics = {}
    for clip in (True, False):
        fns = ppo.make(_config(recurrent, norm, learning_rate=TINY_LR, clip_value_loss=clip,
                               **extra), spec, num_updates=10)
        state = jax.jit(fns.init)(jax.random.PRNGKey(0))
        state = state._replace(params=_sharpen(state.params, recurrent))
        traj = on_policy_batch(fns, state.params, spec)
        _, metrics[clip] = jax.jit(fns.learn)(state, traj, jax.random.PRNGKey(1))
    m = metrics[True]
    assert float(m["approx_kl"]) < 1e-8, m["approx_kl"]
    assert float(m["clip_fraction"]) == 0.0, m["clip_fraction"]
    # Not vacuous: the value targets are far from the values (rewards ~10 per step).
    assert float(m["loss/value"]) > 1e-2
    np.testing.assert_allclose(float(m["loss/value"]), float(metrics[False]["loss/value"]),
                               rtol=1e-5)


@pytest.mark.parametrize("recurrent", [False, True])
def test_normalised_values_keep_their_return_units_when_statistics_move(recurrent):
    """PopArt: at learning rate ~0 the reported value (return units) does not change
    while the return statistics move from (0, 1) to returns of order 100 -- a head left
    in standardised units, or statistics changed without rescaling the head, would."""
    spec = hs_spec() if recurrent else MLP_SPECS["box"]
    # Observation statistics off: their change would move the values legitimately.
    cfg = _config(recurrent, True, learning_rate=TINY_LR, normalize_observations=False)
    fns = ppo.make(cfg, spec, num_updates=10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    traj = on_policy_batch(fns, state.params, spec)
    learn = jax.jit(fns.learn)
    values, stds = [], []
    for i in range(3):
        state, m = learn(state, traj, jax.random.PRNGKey(i))
        values.append(float(m["value_mean"]))
        stds.append(float(m["return_std"]))
    assert stds[-1] > 10.0, stds  # the statistics did move
    np.testing.assert_allclose(values, values[0], atol=1e-3 * max(1.0, abs(values[0])))


def _with_idle_rows(traj, k=2, seed=7):
    """``traj`` plus ``k`` rows of garbage (huge observations and rewards) marked idle."""
    rng = np.random.default_rng(seed)

    def pad(x, scale=1e3):
        x = np.asarray(x)
        extra = (rng.normal(size=(k,) + x.shape[1:]) * scale).astype(x.dtype) \
            if x.dtype.kind == "f" else np.zeros((k,) + x.shape[1:], x.dtype)
        return np.concatenate([x, extra], 0)

    valid = np.concatenate([np.ones((B, T), bool), np.zeros((k, T), bool)], 0)
    return traj._replace(
        obs=jax.tree.map(pad, traj.obs), final_obs=jax.tree.map(pad, traj.final_obs),
        action=np.concatenate([traj.action, np.asarray(traj.action)[:k]], 0),
        reward=pad(traj.reward), terminated=pad(traj.terminated), truncated=pad(traj.truncated),
        behaviour_logp=np.concatenate([traj.behaviour_logp, np.full((k, T), -3.0, np.float32)], 0),
        policy_version=pad(traj.policy_version),
        carry=None if traj.carry is None else jax.tree.map(lambda c: pad(c, 1.0), traj.carry),
        valid=valid)


@pytest.mark.parametrize("recurrent", [False, True])
def test_idle_rows_change_nothing(recurrent):
    """Rows with ``valid`` False leave parameters, statistics and losses as without them."""
    spec = hs_spec() if recurrent else MLP_SPECS["multi_discrete"]
    cfg = _config(recurrent, True, learning_rate=1e-3, num_minibatches=1)
    fns = ppo.make(cfg, spec, num_updates=10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    traj = on_policy_batch(fns, state.params, spec)
    plain, m_plain = jax.jit(fns.learn)(state, traj, jax.random.PRNGKey(1))
    padded, m_pad = jax.jit(fns.learn)(state, _with_idle_rows(traj), jax.random.PRNGKey(1))
    moved = max(float(jnp.abs(a - b).max()) for a, b in
                zip(jax.tree.leaves(plain.params["net"]), jax.tree.leaves(state.params["net"])))
    assert moved > 1e-4  # the update did something
    for a, b in zip(jax.tree.leaves(plain.params), jax.tree.leaves(padded.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-6)
    for k in ("loss/total", "loss/value", "approx_kl", "value_mean", "advantage_mean"):
        np.testing.assert_allclose(float(m_plain[k]), float(m_pad[k]), rtol=1e-4, atol=1e-6)

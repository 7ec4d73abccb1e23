"""The recurrent (entity-LSTM) PPO learner against a step-by-step recomputation.

An on-policy trajectory is built by stepping ``act`` one step at a time from a non-zero
carry (warm-up steps before the segment) and zeroing the carry after every done, as the
actor does. The reference then walks the same segment with a Python loop over
``net.apply`` of a fresh ``RecurrentEntityActorCritic`` (``reset`` always False; the
carry is zeroed by hand after a done), taking ``V(final_obs[t])`` from the *value* carry
right after step ``t``. From those values: GAE by a NumPy loop, and a hand-written
CleanRL-style update over whole-segment minibatches (same ``split``/``permutation``
order as the library), with pooled NumPy running statistics and the PopArt rescale
where normalisation is on.

Checked: the recomputation reproduces the actor's log-probabilities; ``unroll_network``
gives the loop's values and ``V(final_obs)``; learn's ``value_mean``/``advantage_mean``
equal the reference's (rtol 1e-5, float32 sums of 32 values of order 10); parameters
after two updates agree to ``atol=1e-6`` (absolute; float32 weights of order 1).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents import networks, ppo
from agents.entity_network import RecurrentEntityActorCritic
from agents.ppo_recurrent import unroll_network
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import env_spaces

B, T, WARMUP, NUM_UPDATES = 4, 8, 3, 3


@functools.cache
def spec():
    return EnvSpec(*env_spaces("hide_and_seek"))


def _config(norm):
    return ppo.PPOConfig(network="entity_lstm", hidden_sizes=(16,), attention_heads=2,
                         num_epochs=2, num_minibatches=2, learning_rate=3e-3,
                         normalize_observations=norm, normalize_values=norm)


def _is_feature(key):
    return not (key.endswith("_mask") or key.endswith("_present"))


def _obs(lead, rng, scale, shift):
    out = {}
    for k, s in spec().observation_space.spaces.items():
        x = rng.random(lead + s.shape).astype(np.float32)
        out[k] = (x > 0.3).astype(np.float32) if not _is_feature(k) else scale * x + shift
    return out


def _trajectory(fns, params, seed, scale=3.0, shift=5.0):
    """On-policy segment from ``act``; terminations at (0, 3) and (3, T-1), truncations at
    (1, 1), (1, 4) and (2, T-1); rewards 10 +- 10; carry at t=0 after WARMUP steps."""
    rng = np.random.default_rng(seed)
    obs = _obs((B, WARMUP + T + 1), rng, scale, shift)
    final_obs = _obs((B, T), rng, scale, shift)
    terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
    terminated[0, 3] = terminated[3, T - 1] = truncated[1, 1] = truncated[1, 4] = True
    truncated[2, T - 1] = True
    done = terminated | truncated
    act, carry, actions, logps = jax.jit(fns.act), fns.initial_carry(B), [], []
    for t in range(WARMUP + T):
        a, carry, extras = act(params, jax.tree.map(lambda x: x[:, t], obs), carry,
                               jax.random.PRNGKey(100 * seed + t))
        if t == WARMUP - 1:
            carry0 = carry
        if t >= WARMUP:
            actions.append(np.asarray(a))
            logps.append(np.asarray(extras["logp"]))
            keep = jnp.asarray(~done[:, t - WARMUP], jnp.float32)[:, None]
            carry = jax.tree.map(lambda c: c * keep, carry)
    return Trajectory(obs=jax.tree.map(lambda x: x[:, WARMUP:], obs), action=np.stack(actions, 1),
                      final_obs=final_obs, reward=(10 + 10 * rng.normal(size=(B, T))).astype(np.float32),
                      terminated=terminated, truncated=truncated,
                      behaviour_logp=np.stack(logps, 1).astype(np.float32),
                      policy_version=np.zeros((B, T), np.int32), carry=carry0)


def numpy_gae(reward, value, next_value, terminated, truncated, gamma, lam):
    """CleanRL-style backward loop; value ``[B, T + 1]``, next_value = V(final_obs) ``[B, T]``."""
    adv = np.zeros(reward.shape)
    for b in range(reward.shape[0]):
        last = 0.0
        for t in reversed(range(reward.shape[1])):
            v_next = 0.0 if terminated[b, t] else (
                next_value[b, t] if truncated[b, t] else value[b, t + 1])
            done = terminated[b, t] or truncated[b, t]
            last = reward[b, t] + gamma * v_next - value[b, t] + (0 if done else gamma * lam * last)
            adv[b, t] = last
    return adv, adv + value[:, :-1]


class Pooled:
    """Pooled float64 mean/variance of all samples, prior weight 1e-4 at (0, 1)."""

    def __init__(self, shape):
        self.c, self.s1, self.s2 = 1e-4, np.zeros(shape), 1e-4 * np.ones(shape)

    def add(self, x):
        x = np.asarray(x, np.float64).reshape((-1,) + self.s1.shape)
        self.c, self.s1, self.s2 = self.c + len(x), self.s1 + x.sum(0), self.s2 + (x**2).sum(0)

    mean = property(lambda self: self.s1 / self.c)
    var = property(lambda self: self.s2 / self.c - self.mean**2)
    sd = property(lambda self: np.sqrt(self.var + 1e-8))


def make_step(net):
    """One step of the actor's bookkeeping, written out: apply the net with ``reset`` False,
    V(final_obs) from the value carry right after the step, then zero the carry where the
    step ended an episode. ``d`` is ``[b]`` float (1 = done)."""
    def step(variables, carry, o, f, d):
        no_reset = jnp.zeros(d.shape, bool)
        dist, v, new = net.apply(variables, o, carry, no_reset)
        vf = None if f is None else net.apply(variables, f, new[1], no_reset, method="value")[0]
        return dist.logits, v, vf, jax.tree.map(lambda c: c * (1.0 - d)[:, None], new)
    return step


def step_loop(step, variables, obs, final_obs, done, carry):
    """Python loop over ``T + 1`` steps -> logits, values ``[b, T + 1]``, V(final_obs) ``[b, T]``."""
    logits, values, v_final = [], [], []
    for t in range(T + 1):
        last = t == T  # the bootstrap observation: no final_obs, no done
        f = jax.tree.map(lambda x: x[:, min(t, T - 1)], final_obs)
        d = np.zeros(B, np.float32) if last else done[:, t].astype(np.float32)
        lg, v, vf, carry = step(variables, carry, jax.tree.map(lambda x: x[:, t], obs), f, d)
        logits.append(lg), values.append(v)
        if not last:
            v_final.append(vf)
    return tuple(np.stack(x, 1) for x in (logits, values, v_final))


def make_reference(cfg):
    head = networks.head_for_space(spec().action_space)
    net = RecurrentEntityActorCritic(head, width=cfg.hidden_sizes[0], heads=cfg.attention_heads)
    total = NUM_UPDATES * cfg.num_epochs * cfg.num_minibatches
    schedule = lambda count: cfg.learning_rate * (1.0 - jnp.minimum(count, total) / total)
    tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(schedule, eps=1e-5))
    start = jnp.asarray(head.start)

    def logp_entropy(logits, action):  # logits [b, T, K, n_max] (padded), action [b, T, K]
        lp = jax.nn.log_softmax(logits, -1)
        logp = jnp.take_along_axis(lp, (action - start)[..., None], -1)[..., 0].sum(-1)
        return logp, -jnp.sum(jnp.exp(lp) * lp, (-2, -1))

    step = make_step(net)

    def loss(variables, mb):  # the same step, in lax.scan (a Python loop compiles slowly)
        def body(carry, inp):
            lg, v, _, carry = step(variables, carry, inp[0], None, inp[1])
            return carry, (lg, v)
        tm = lambda x: jnp.swapaxes(x, 0, 1)
        _, (logits, value) = jax.lax.scan(
            body, mb["carry"], (jax.tree.map(tm, mb["obs"]), tm(mb["done"].astype(jnp.float32))))
        logits, value = tm(logits), tm(value)  # [b, T, ...]
        logp, ent = logp_entropy(logits, mb["action"])
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        ratio = jnp.exp(logp - mb["logp"])
        pg = -jnp.mean(jnp.minimum(ratio * adv,
                                   jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv))
        v_clip = mb["old_v"] + jnp.clip(value - mb["old_v"], -cfg.clip_eps, cfg.clip_eps)
        v_loss = 0.5 * jnp.mean(jnp.maximum((value - mb["ret"]) ** 2, (v_clip - mb["ret"]) ** 2))
        return pg - cfg.ent_coef * jnp.mean(ent) + cfg.vf_coef * v_loss

    @jax.jit
    def sgd(variables, opt_state, mb):
        updates, opt_state = tx.update(jax.grad(loss)(variables, mb), opt_state, variables)
        return optax.apply_updates(variables, updates), opt_state

    jstep = jax.jit(step)
    obs_keys = [k for k in spec().observation_space.spaces if _is_feature(k)]
    ref = dict(obs_stats={k: Pooled(spec().observation_space[k].shape) for k in obs_keys},
               ret_stats=Pooled(()), opt_state=None, net=net)

    def normalise(obs):
        if not cfg.normalize_observations:
            return obs
        st = ref["obs_stats"]
        return {k: np.clip((x - st[k].mean) / st[k].sd, -10, 10).astype(np.float32)
                if k in st else x for k, x in obs.items()}

    def update(variables, traj, rng):
        ref["opt_state"] = ref["opt_state"] or tx.init(variables)
        obs, final_obs = normalise(traj.obs), normalise(traj.final_obs)
        ref["obs"], ref["final_obs"] = obs, final_obs  # as the reference normalised them
        done = traj.terminated | traj.truncated
        logits, v, v_final = step_loop(jstep, variables, obs, final_obs, done, traj.carry)
        ref["logp"] = np.asarray(logp_entropy(logits[:, :T], traj.action)[0])
        ref["v_head"], ref["v_final_head"] = v, v_final
        rs = ref["ret_stats"]
        if cfg.normalize_values:
            v, v_final = v * rs.sd + rs.mean, v_final * rs.sd + rs.mean
        adv, ret = numpy_gae(traj.reward, v, v_final, traj.terminated, traj.truncated,
                             cfg.gamma, cfg.gae_lambda)
        ref["value_mean"], ref["advantage_mean"] = v[:, :T].mean(), adv.mean()
        old_v = v[:, :T]
        if cfg.normalize_values:  # PopArt
            s_old, m_old = rs.sd, rs.mean
            rs.add(ret)
            d = variables["params"]["v_out"]
            d = {"kernel": d["kernel"] * (s_old / rs.sd),
                 "bias": (s_old * d["bias"] + m_old - rs.mean) / rs.sd}
            variables = {**variables, "params": {**variables["params"], "v_out": d}}
            ret = (ret - rs.mean) / rs.sd
            old_v = step_loop(jstep, variables, obs, final_obs, done, traj.carry)[1][:, :T]  # own output
        data = dict(obs=jax.tree.map(lambda x: x[:, :T], obs), done=done, action=traj.action,
                    logp=traj.behaviour_logp, adv=adv.astype(np.float32),
                    ret=ret.astype(np.float32), old_v=old_v.astype(np.float32), carry=traj.carry)
        for key in jax.random.split(rng, cfg.num_epochs):
            for idx in np.asarray(jax.random.permutation(key, B)).reshape(cfg.num_minibatches, -1):
                mb = jax.tree.map(lambda x: np.asarray(x)[idx], data)
                variables, ref["opt_state"] = sgd(variables, ref["opt_state"], mb)
        if cfg.normalize_observations:
            for k, st in ref["obs_stats"].items():
                st.add(traj.obs[k][:, :T])
        return variables

    return update, ref


@pytest.mark.parametrize("norm", [False, True])
def test_recurrent_learn_matches_step_by_step_recomputation(norm):
    """Two updates (the second on observations of other statistics): the step loop
    reproduces the actor's log-probs; ``unroll_network`` its values and V(final_obs);
    learn's value/advantage means and the parameters after each update the reference's.
    Catches resets one step early or never, V(final_obs) from the wrong carry, advantage
    order, the value-clip centre, and (``norm``) un-normalised observations in the loss,
    the PopArt rescale and the running-variance merge."""
    cfg = _config(norm)
    fns = ppo.make(cfg, spec(), num_updates=NUM_UPDATES)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    update, ref = make_reference(cfg)
    learn, variables = jax.jit(fns.learn), state.params["net"]
    for i, (scale, shift) in enumerate([(3.0, 5.0), (2.0, -3.0)]):
        traj = _trajectory(fns, state.params, seed=i, scale=scale, shift=shift)
        rng = jax.random.PRNGKey(10 + i)
        variables = update(variables, traj, rng)
        np.testing.assert_allclose(ref["logp"], traj.behaviour_logp, atol=1e-5)
        before, (state, m) = state.params["net"], learn(state, traj, rng)
        np.testing.assert_allclose(float(m["value_mean"]), ref["value_mean"], rtol=1e-5)
        np.testing.assert_allclose(float(m["advantage_mean"]), ref["advantage_mean"], rtol=1e-5)
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(state.params["net"]),
                                jax.tree.leaves(variables)):
            if "['key']['bias']" in jax.tree_util.keystr(path):
                continue  # softmax ignores a key bias: its gradient is float noise Adam amplifies
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6,
                                       err_msg=jax.tree_util.keystr(path))
        # The public unroll (last: learn-level checks above must catch its mutations too).
        tm = lambda x: jnp.swapaxes(jnp.asarray(x), 0, 1)
        reset = np.concatenate([np.zeros((B, 1), bool), traj.terminated | traj.truncated], 1)
        _, v_u, vf_u = jax.jit(functools.partial(unroll_network, ref["net"]))(
            before, jax.tree.map(tm, ref["obs"]), jax.tree.map(tm, ref["final_obs"]),
            tm(reset), traj.carry)
        np.testing.assert_allclose(np.asarray(v_u).T, ref["v_head"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(np.asarray(vf_u).T, ref["v_final_head"], rtol=0, atol=1e-5)
    if norm:
        for name, st in [("ret_stats", ref["ret_stats"])] + [
                (("obs_stats", k), s) for k, s in ref["obs_stats"].items()]:
            got = state.params[name] if isinstance(name, str) else state.params[name[0]][name[1]]
            np.testing.assert_allclose(np.asarray(got.mean), st.mean, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(got.var), st.var, rtol=1e-5)

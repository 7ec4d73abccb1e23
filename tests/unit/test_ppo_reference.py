"""``ppo.learn`` (MLP path) against an independent, hand-written CleanRL-style update.

The reference below shares only the network module (a fresh ``agents.networks.ActorCritic``
applied to the same parameter tree) and ``optax``'s Adam with the library: values come
from ``net.apply``, GAE from a plain NumPy loop over each segment (truncated steps
bootstrap from ``V(final_obs)``, terminated ones from nothing), log-probabilities,
entropies and the clipped PPO loss are written out in ``jnp``, the minibatch order is
rebuilt from the RNG (``split(rng, num_epochs)``, then per epoch
``permutation(key, B*T).reshape(num_minibatches, -1)``), the linear LR anneal is written
out, and, where normalisation is on, the running statistics are the pooled NumPy mean
and variance of everything seen (with the prior count 1e-4 at mean 0, variance 1), the
value head is rescaled by PopArt (``w' = w s/s'``, ``b' = (s b + m - m')/s'``), the loss
sees observations normalised with the statistics *before* the update and the
observation statistics merge the batch *after* the SGD.

Tolerance: parameters are float32 of order 1; they must agree to ``atol=1e-6`` (absolute,
i.e. a few float32 ulps of an O(1) weight, far below one Adam step of ~1e-3), the
running statistics (means up to ~5, variances up to ~1e3) to ``rtol=1e-6``.
"""

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents import networks, ppo
from jaxsrl.core.agent import EnvSpec, Trajectory

BOX_OBS = gymnasium.spaces.Box(-1.0, 1.0, (3,))
SPECS = {
    "discrete": EnvSpec(BOX_OBS, gymnasium.spaces.Discrete(4, start=1)),
    "multi_discrete": EnvSpec(BOX_OBS, gymnasium.spaces.MultiDiscrete([2, 3, 5])),
    "box": EnvSpec(BOX_OBS, gymnasium.spaces.Box(-2.0, 2.0, (2,))),
}
B, T, NUM_UPDATES = 6, 8, 3
ATOL = 1e-6


def _config(norm):
    return ppo.PPOConfig(hidden_sizes=(16, 16), num_epochs=3, num_minibatches=4,
                         learning_rate=3e-3, anneal_lr=True, normalize_observations=norm,
                         normalize_values=norm)


def _batch(fns, params, spec, seed, obs_scale, obs_shift):
    """Actions from ``act``; behaviour log-probs perturbed (+-0.3) so ratios get clipped.

    Terminations at (0, 3) and on the last step of row 3; truncations at (1, 4) and on
    the last step of row 2; rewards 10 +- 10.
    """
    rng = np.random.default_rng(seed)
    obs = (obs_scale * rng.normal(size=(B, T + 1, 3)) + obs_shift).astype(np.float32)
    final_obs = (obs_scale * rng.normal(size=(B, T, 3)) + obs_shift).astype(np.float32)
    action, _, extras = jax.jit(fns.act)(params, obs[:, :T].reshape(B * T, 3), None,
                                         jax.random.PRNGKey(seed))
    action = np.asarray(action).reshape((B, T) + np.shape(action)[1:])
    logp = np.asarray(extras["logp"]).reshape(B, T) + 0.3 * rng.uniform(-1, 1, (B, T))
    terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
    terminated[0, 3] = terminated[3, T - 1] = truncated[1, 4] = truncated[2, T - 1] = True
    return Trajectory(obs=obs, action=action, final_obs=final_obs,
                      reward=(10 + 10 * rng.normal(size=(B, T))).astype(np.float32),
                      terminated=terminated, truncated=truncated,
                      behaviour_logp=logp.astype(np.float32),
                      policy_version=np.zeros((B, T), np.int32))


# ------------------------------------------------------------------ the reference

def numpy_gae(reward, value, next_value, terminated, truncated, gamma, lam):
    """CleanRL-style backward loop, one segment at a time. value ``[B, T + 1]``, next_value
    ``[B, T]`` = V(final_obs). Returns (advantages, returns) ``[B, T]`` float64."""
    adv = np.zeros(reward.shape)
    for b in range(reward.shape[0]):
        last = 0.0
        for t in reversed(range(reward.shape[1])):
            if terminated[b, t]:
                v_next = 0.0
            elif truncated[b, t]:
                v_next = next_value[b, t]
            else:
                v_next = value[b, t + 1]
            delta = reward[b, t] + gamma * v_next - value[b, t]
            done = terminated[b, t] or truncated[b, t]
            last = delta + (0.0 if done else gamma * lam * last)
            adv[b, t] = last
    return adv, adv + value[:, :-1]


class Pooled:
    """Running statistics as the pooled mean/variance of all samples seen (float64),
    with the library's prior of weight 1e-4 at mean 0 and variance 1."""

    def __init__(self, shape):
        self.c, self.s1, self.s2 = 1e-4, np.zeros(shape), 1e-4 * np.ones(shape)

    def add(self, x):
        x = np.asarray(x, np.float64).reshape((-1,) + self.s1.shape)
        self.c, self.s1, self.s2 = self.c + len(x), self.s1 + x.sum(0), self.s2 + (x**2).sum(0)

    @property
    def mean(self):
        return self.s1 / self.c

    @property
    def var(self):
        return self.s2 / self.c - self.mean**2


def _sd(stats):
    return np.sqrt(stats.var + 1e-8)


def make_reference(cfg, spec):
    """A stateful CleanRL-style PPO learner; ``update(variables, traj, rng)``."""
    head = networks.head_for_space(spec.action_space)
    net = networks.ActorCritic(head, hidden_sizes=cfg.hidden_sizes, activation=cfg.activation)
    total = NUM_UPDATES * cfg.num_epochs * cfg.num_minibatches
    schedule = lambda count: cfg.learning_rate * (1.0 - jnp.minimum(count, total) / total)
    tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                     optax.adam(schedule, eps=1e-5))

    def logp_entropy(variables, x, action):
        out = net.apply(variables, x, method=lambda m, x: m.policy_net(x))
        if head.kind == "gaussian":
            log_std = variables["params"]["log_std"]
            z = (action - out) / jnp.exp(log_std)
            logp = jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), -1)
            return logp, jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e)) * jnp.ones_like(logp)
        groups = np.split(np.arange(out.shape[-1]), np.cumsum(head.sizes)[:-1])
        acts = action[:, None] if head.kind == "categorical" else action
        logp, ent = 0.0, 0.0
        for k, g in enumerate(groups):
            lp = jax.nn.log_softmax(out[:, g])
            logp = logp + jnp.take_along_axis(lp, (acts[:, k] - head.start[k])[:, None], 1)[:, 0]
            ent = ent - jnp.sum(jnp.exp(lp) * lp, -1)
        return logp, ent

    def loss(variables, mb):
        logp, ent = logp_entropy(variables, mb["obs"], mb["action"])
        value = net.apply(variables, mb["obs"], method="value")
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        ratio = jnp.exp(logp - mb["logp"])
        pg = -jnp.mean(jnp.minimum(ratio * adv,
                                   jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv))
        v_clip = mb["old_v"] + jnp.clip(value - mb["old_v"], -cfg.clip_eps, cfg.clip_eps)
        v_loss = 0.5 * jnp.mean(jnp.maximum((value - mb["ret"]) ** 2, (v_clip - mb["ret"]) ** 2))
        return pg - cfg.ent_coef * jnp.mean(ent) + cfg.vf_coef * v_loss

    @jax.jit
    def sgd(variables, opt_state, mb):
        grads = jax.grad(loss)(variables, mb)
        updates, opt_state = tx.update(grads, opt_state, variables)
        return optax.apply_updates(variables, updates), opt_state

    value = jax.jit(lambda v, x: net.apply(v, x, method="value"))
    ref = dict(obs_stats=Pooled((3,)), ret_stats=Pooled(()), opt_state=None)

    def normalise_obs(x):
        st = ref["obs_stats"]
        return np.clip((x - st.mean) / _sd(st), -10, 10).astype(np.float32) \
            if cfg.normalize_observations else x

    def update(variables, traj, rng):
        if ref["opt_state"] is None:
            ref["opt_state"] = tx.init(variables)
        obs, final_obs = normalise_obs(traj.obs), normalise_obs(traj.final_obs)
        v, v_final = np.asarray(value(variables, obs)), np.asarray(value(variables, final_obs))
        rs = ref["ret_stats"]
        if cfg.normalize_values:  # head units -> return units, pre-update statistics
            v, v_final = v * _sd(rs) + rs.mean, v_final * _sd(rs) + rs.mean
        adv, ret = numpy_gae(traj.reward, v, v_final, traj.terminated, traj.truncated,
                             cfg.gamma, cfg.gae_lambda)
        if cfg.normalize_values:  # PopArt: preserve the head's output in return units
            s_old, m_old = _sd(rs), rs.mean
            rs.add(ret)
            layer = variables["params"]["value_net"][f"Dense_{len(cfg.hidden_sizes)}"]
            layer = {"kernel": layer["kernel"] * (s_old / _sd(rs)),
                     "bias": (s_old * layer["bias"] + m_old - rs.mean) / _sd(rs)}
            vn = {**variables["params"]["value_net"], f"Dense_{len(cfg.hidden_sizes)}": layer}
            variables = {**variables, "params": {**variables["params"], "value_net": vn}}
            ret = (ret - rs.mean) / _sd(rs)
        n = B * T
        data = dict(obs=obs[:, :T].reshape(n, 3), action=np.reshape(traj.action, (n, -1)),
                    logp=traj.behaviour_logp.reshape(n), adv=adv.reshape(n).astype(np.float32),
                    ret=ret.reshape(n).astype(np.float32))
        data["old_v"] = np.asarray(value(variables, data["obs"]))  # the head's own output
        if data["action"].shape[1] == 1 and spec.action_space.shape == ():
            data["action"] = data["action"][:, 0]
        for key in jax.random.split(rng, cfg.num_epochs):
            perm = np.asarray(jax.random.permutation(key, n)).reshape(cfg.num_minibatches, -1)
            for idx in perm:
                variables, ref["opt_state"] = sgd(variables, ref["opt_state"],
                                                  {k: x[idx] for k, x in data.items()})
        if cfg.normalize_observations:
            ref["obs_stats"].add(traj.obs[:, :T])
        return variables

    return update, ref


# ------------------------------------------------------------------ the tests

def _close(actual, expected, **tol):
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path),
                                   **tol)


def _run(name, norm):
    spec, cfg = SPECS[name], _config(norm)
    fns = ppo.make(cfg, spec, num_updates=NUM_UPDATES)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    update, ref = make_reference(cfg, spec)
    learn, variables = jax.jit(fns.learn), state.params["net"]
    # Two updates: the second batch has other observation statistics (scale 2, shift -3 vs
    # 3, +5), so the between-batch term of the running variance matters.
    for i, (scale, shift) in enumerate([(3.0, 5.0), (2.0, -3.0)]):
        traj = _batch(fns, state.params, spec, seed=i, obs_scale=scale, obs_shift=shift)
        rng = jax.random.PRNGKey(10 + i)
        variables = update(variables, traj, rng)
        before = state.params["net"]
        state, _ = learn(state, traj, rng)
        moved = max(float(jnp.abs(a - b).max()) for a, b in
                    zip(jax.tree.leaves(state.params["net"]), jax.tree.leaves(before)))
        assert moved > 1e-3  # the update is not vacuous
        _close(state.params["net"], variables, rtol=0, atol=ATOL)
    return state, ref


@pytest.mark.parametrize("name", list(SPECS))
def test_learn_matches_hand_written_update_without_normalisation(name):
    """Discrete, MultiDiscrete and Box heads, 3 epochs x 4 minibatches, two updates with a
    partly annealed LR, terminations and truncations mid-segment and on the last step,
    perturbed behaviour log-probs (clipped ratios): parameters equal the reference's
    to 1e-6 after each update. Catches advantages or returns paired with the wrong
    transitions, a wrong bootstrap, wrong minibatch order and a shifted value-clip centre."""
    _run(name, norm=False)


def test_learn_matches_hand_written_update_with_observation_and_value_normalisation():
    """As above for the Box head with ``normalize_observations`` and ``normalize_values``:
    also the PopArt rescale, the loss seeing observations normalised with the
    pre-update statistics, and both running statistics (observation: merged after the
    SGD; return: merged before it) equal to the pooled NumPy mean and variance."""
    state, ref = _run("box", norm=True)
    for key in ("obs_stats", "ret_stats"):
        got, want = state.params[key], ref[key]
        np.testing.assert_allclose(float(got.count), want.c, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(got.mean), want.mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got.var), want.var, rtol=1e-6)

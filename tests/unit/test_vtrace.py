"""V-trace targets (agents/vtrace.py) against a NumPy loop over eq. 1 of Espeholt et al."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.returns import bootstrap_values, gae
from agents.vtrace import vtrace
from episode_pieces import episode_pieces  # tests/episode_pieces.py


def reference(v_obs, v_final, r, terminated, truncated, log_rho, gamma, lam,
              clip_rho, clip_c, clip_pg_rho):
    """Eq. 1 as an explicit sum, one segment (``[T]`` arrays, ``v_obs`` ``[T + 1]``).

    v_s = V(x_s) + sum_{t=s}^{end} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t, where the
    sum stops at the segment end or the step that ends the episode; a terminated step
    has no next value, a truncated one uses V(final_obs).
    """
    T = len(r)
    ratio = np.exp(log_rho)
    clip = lambda x, c: x if c is None else min(c, x)  # noqa: E731

    def next_value(t):
        if terminated[t]:
            return 0.0
        return v_final[t] if truncated[t] else v_obs[t + 1]

    vs = np.zeros(T)
    for s in range(T):
        total, coef = v_obs[s], 1.0
        for t in range(s, T):
            delta = clip(ratio[t], clip_rho) * (r[t] + gamma * next_value(t) - v_obs[t])
            total += coef * delta
            if terminated[t] or truncated[t]:
                break
            coef *= gamma * lam * clip(ratio[t], clip_c)
        vs[s] = total
    pg = np.zeros(T)
    for s in range(T):
        if terminated[s]:
            nxt = 0.0
        elif truncated[s]:
            nxt = v_final[s]
        else:
            nxt = vs[s + 1] if s + 1 < T else v_obs[T]
        pg[s] = clip(ratio[s], clip_pg_rho) * (r[s] + gamma * nxt - v_obs[s])
    return vs, pg


def _data(seed, T=12, B=5, log_rho_scale=0.7):
    rng = np.random.default_rng(seed)
    v_obs = rng.normal(size=(B, T + 1)).astype(np.float32)
    v_final = rng.normal(size=(B, T)).astype(np.float32)
    r = rng.normal(size=(B, T)).astype(np.float32)
    ends = rng.random((B, T))
    terminated = ends < 0.12
    truncated = (ends >= 0.12) & (ends < 0.24)
    terminated[0, 3], truncated[0, 3] = True, False  # both kinds are always present
    terminated[1, 5], truncated[1, 5] = False, True
    terminated[2, T - 1], truncated[2, T - 1] = False, True  # at the segment's last step
    log_rho = (rng.normal(size=(B, T)) * log_rho_scale).astype(np.float32)
    return v_obs, v_final, r, terminated, truncated, log_rho


def _run(v_obs, v_final, r, terminated, truncated, log_rho, gamma, **kw):
    """``vtrace`` on batch-major data, as agents/impala.py calls it; batch-major out."""
    v_tp1 = bootstrap_values(jnp.asarray(v_obs).T, jnp.asarray(v_final).T, jnp.asarray(truncated).T)
    out = jax.jit(lambda *a: vtrace(*a, **kw))(
        jnp.asarray(v_obs[:, :-1]).T, v_tp1, jnp.asarray(r).T,
        gamma * (1.0 - jnp.asarray(terminated, jnp.float32).T),
        jnp.logical_or(terminated, truncated).T, jnp.asarray(log_rho).T)
    return jax.tree.map(lambda x: np.asarray(x).T, out)


@pytest.mark.parametrize("seed, lam, clip_rho, clip_c, clip_pg_rho", [
    (0, 1.0, 1.0, 1.0, 1.0),      # the paper's setting
    (1, 0.9, 2.0, 0.8, 1.5),      # lambda < 1, different truncation levels
    (2, 1.0, None, None, None),   # no truncation: plain importance sampling
    (3, 0.5, 0.5, 0.5, 0.5),
])
def test_vtrace_matches_numpy_reference_with_episode_ends(seed, lam, clip_rho, clip_c, clip_pg_rho):
    gamma = 0.95
    data = _data(seed)
    out = _run(*data, gamma, lambda_=lam, clip_rho=clip_rho, clip_c=clip_c, clip_pg_rho=clip_pg_rho)
    v_obs, v_final, r, terminated, truncated, log_rho = data
    for b in range(v_obs.shape[0]):
        vs, pg = reference(v_obs[b], v_final[b], r[b], terminated[b], truncated[b], log_rho[b],
                           gamma, lam, clip_rho, clip_c, clip_pg_rho)
        np.testing.assert_allclose(out.vs[b], vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.pg_advantage[b], pg, rtol=1e-5, atol=1e-5)
    ratio = np.exp(log_rho)
    np.testing.assert_allclose(out.rho, ratio if clip_rho is None else np.minimum(clip_rho, ratio),
                               rtol=1e-6)


def test_on_policy_vtrace_is_the_lambda_one_return_of_gae():
    """pi = mu, lambda = 1: v_s is the n-step bootstrapped return, pg_advantage the
    GAE(lambda=1) advantage; truncation bootstraps, termination does not."""
    v_obs, v_final, r, terminated, truncated, _ = _data(7)
    gamma = 0.9
    out = _run(v_obs, v_final, r, terminated, truncated, np.zeros_like(r), gamma)
    v_tp1 = bootstrap_values(jnp.asarray(v_obs).T, jnp.asarray(v_final).T, jnp.asarray(truncated).T)
    adv, ret = gae(jnp.asarray(r).T, gamma * (1.0 - jnp.asarray(terminated, jnp.float32).T),
                   jnp.asarray(v_obs[:, :-1]).T, v_tp1, jnp.logical_or(terminated, truncated).T, 1.0)
    np.testing.assert_allclose(out.vs, np.asarray(ret).T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantage, np.asarray(adv).T, rtol=1e-5, atol=1e-5)


def test_terminated_does_not_bootstrap_truncated_does():
    """One segment of 4 steps, all rewards 1, gamma 0.5, on-policy, V = 0 except the
    final observation (V = 8): the episode ends at step 1."""
    r = np.ones((1, 4), np.float32)
    v_obs = np.zeros((1, 5), np.float32)
    v_final = np.full((1, 4), 8.0, np.float32)
    no = np.zeros((1, 4), bool)
    ends = no.copy()
    ends[0, 1] = True
    term = _run(v_obs, v_final, r, ends, no, np.zeros_like(r), 0.5)
    trunc = _run(v_obs, v_final, r, no, ends, np.zeros_like(r), 0.5)
    np.testing.assert_allclose(term.vs[0], [1.5, 1.0, 1.5, 1.0])  # 1 + 0.5 * 1; nothing after
    np.testing.assert_allclose(trunc.vs[0], [1.5 + 2.0, 1.0 + 4.0, 1.5, 1.0])  # + gamma^k * 8
    # The next episode (steps 2, 3) never sees the final observation's value.
    np.testing.assert_allclose(term.vs[0, 2:], trunc.vs[0, 2:])
    np.testing.assert_allclose(trunc.vs_tp1[0, 1], 8.0)


def test_truncated_importance_weights_cut_the_trace():
    """With c = 0 (a tiny ratio at step 0) nothing after step 0 reaches v_0."""
    r = np.ones((1, 3), np.float32)
    v_obs = np.zeros((1, 4), np.float32)
    log_rho = np.array([[np.log(1e-8), 0.0, 0.0]], np.float32)
    no = np.zeros((1, 3), bool)
    out = _run(v_obs, np.zeros((1, 3), np.float32), r, no, no, log_rho, 1.0)
    np.testing.assert_allclose(out.vs[0, 0], 0.0, atol=1e-6)  # rho_0 ~ 0 as well
    np.testing.assert_allclose(out.vs[0, 1:], [2.0, 1.0], rtol=1e-6)
    # A large ratio is truncated at rho_bar = 1: same targets as on-policy.
    big = _run(v_obs, np.zeros((1, 3), np.float32), r, no, no, np.full((1, 3), 3.0, np.float32), 1.0)
    np.testing.assert_allclose(big.vs[0], [3.0, 2.0, 1.0], rtol=1e-6)


def test_targets_carry_no_gradient():
    v_obs, v_final, r, terminated, truncated, log_rho = _data(4, T=6, B=3)

    def f(v):
        v_tp1 = bootstrap_values(v.T, jnp.asarray(v_final).T, jnp.asarray(truncated).T)
        out = vtrace(v[:, :-1].T, v_tp1, jnp.asarray(r).T,
                     0.9 * (1.0 - jnp.asarray(terminated, jnp.float32).T),
                     jnp.logical_or(terminated, truncated).T, jnp.asarray(log_rho).T)
        return out.vs.sum() + out.pg_advantage.sum()

    np.testing.assert_array_equal(np.asarray(jax.grad(f)(jnp.asarray(v_obs))), 0.0)


@pytest.mark.parametrize("seed, lam, clip_rho, clip_pg_rho", [
    (0, 1.0, 1.0, 1.0), (1, 0.9, 2.0, 1.5), (2, 0.6, 0.7, 0.5), (3, 1.0, 2.0, 1.5)])
def test_vtrace_matches_rlax_per_episode_piece(seed, lam, clip_rho, clip_pg_rho):
    """An independent reference: ``rlax.vtrace_td_error_and_advantage`` (whose trace
    weights are ``lambda * min(1, rho)``, so ``clip_c=1``) on each episode piece of each
    column, with the piece's own bootstrap: discount 0 after a termination,
    ``V(final_obs)`` after a truncation, ``V(x_T)`` at the segment end. Catches traces
    or targets that cross an episode end and truncations that bootstrap from the next
    episode. For ``lambda < 1`` rlax's policy-gradient advantage departs from the paper's
    (it bootstraps from ``lambda v_{s+1} + (1 - lambda) V(x_{s+1})``; ours, like eq. 4,
    from ``v_{s+1}``, checked by the NumPy reference above), so only ``vs`` is compared."""
    rlax = pytest.importorskip("rlax")
    gamma = 0.95
    data = _data(seed, T=16, B=6)
    v_obs, v_final, r, terminated, truncated, log_rho = data
    out = _run(*data, gamma, lambda_=lam, clip_rho=clip_rho, clip_c=1.0, clip_pg_rho=clip_pg_rho)
    for b in range(v_obs.shape[0]):
        for s, e in episode_pieces(terminated[b] | truncated[b]):
            steps = slice(s, e + 1)
            v_next = np.concatenate([v_obs[b, s + 1:e + 1],
                                     [v_final[b, e] if truncated[b, e] else v_obs[b, e + 1]]])
            discount = gamma * (1.0 - terminated[b, steps].astype(np.float32))
            ref = rlax.vtrace_td_error_and_advantage(
                jnp.asarray(v_obs[b, steps]), jnp.asarray(v_next, jnp.float32), jnp.asarray(r[b, steps]),
                jnp.asarray(discount), jnp.exp(jnp.asarray(log_rho[b, steps])), lambda_=lam,
                clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
            np.testing.assert_allclose(out.vs[b, steps], ref.errors + v_obs[b, steps],
                                       rtol=1e-5, atol=1e-5)
            if lam == 1.0:  # rlax's advantage bootstraps from lambda v_{s+1} + (1 - lambda) V(x_{s+1})
                np.testing.assert_allclose(out.pg_advantage[b, steps], ref.pg_advantage,
                                           rtol=1e-5, atol=1e-5)


def test_idle_steps_contribute_nothing_to_the_targets():
    """A column whose last steps are idle (``valid_t`` False, holding garbage): the valid
    steps' targets are rlax's V-trace on the valid piece bootstrapped with ``v_tp1`` of
    its last step; idle steps get ``vs = V`` and a zero advantage."""
    rlax = pytest.importorskip("rlax")
    T, gamma = 8, 0.9
    rng = np.random.default_rng(5)
    v = rng.normal(size=(T, 1)).astype(np.float32)
    v_tp1 = rng.normal(size=(T, 1)).astype(np.float32)
    v_tp1[:-1] = v[1:]
    r = rng.normal(size=(T, 1)).astype(np.float32)
    log_rho = (0.5 * rng.normal(size=(T, 1))).astype(np.float32)
    valid = np.arange(T)[:, None] < 5
    r[~valid] = 1e3  # garbage on idle steps
    log_rho[~valid] = 7.0
    discount = np.full((T, 1), gamma, np.float32)
    out = vtrace(jnp.asarray(v), jnp.asarray(v_tp1), jnp.asarray(r), jnp.asarray(discount),
                 jnp.zeros((T, 1), bool), jnp.asarray(log_rho), valid_t=jnp.asarray(valid))
    ref = rlax.vtrace_td_error_and_advantage(
        jnp.asarray(v[:5, 0]), jnp.asarray(v_tp1[:5, 0]), jnp.asarray(r[:5, 0]),
        jnp.asarray(discount[:5, 0]), jnp.exp(jnp.asarray(log_rho[:5, 0])))
    np.testing.assert_allclose(out.vs[:5, 0], ref.errors + v[:5, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantage[:5, 0], ref.pg_advantage, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out.vs[5:], v[5:])
    np.testing.assert_array_equal(out.pg_advantage[5:], 0.0)

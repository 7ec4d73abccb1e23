"""GAE against a plain NumPy loop (Schulman et al. 2016, eqs. 11-16)."""

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from agents.returns import bootstrap_values, gae
from episode_pieces import episode_pieces  # tests/episode_pieces.py

GAMMA, LAM = 0.9, 0.8


def gae_reference(reward, terminated, truncated, v_obs, v_final, gamma, lam):
    """Plain loop over ``[T, B]`` arrays; ``v_obs`` is ``[T + 1, B]``."""
    T, B = reward.shape
    adv = np.zeros((T, B))
    for b in range(B):
        next_adv = 0.0
        for t in reversed(range(T)):
            next_v = v_final[t, b] if truncated[t, b] else v_obs[t + 1, b]
            nonterminal = 0.0 if terminated[t, b] else 1.0
            delta = reward[t, b] + gamma * nonterminal * next_v - v_obs[t, b]
            done = terminated[t, b] or truncated[t, b]
            next_adv = delta + gamma * lam * (0.0 if done else 1.0) * next_adv
            adv[t, b] = next_adv
    return adv, adv + v_obs[:T]


def run_gae(reward, terminated, truncated, v_obs, v_final, gamma=GAMMA, lam=LAM):
    v_tp1 = bootstrap_values(v_obs, v_final, truncated)
    out = gae(
        jnp.asarray(reward, jnp.float32),
        gamma * (1.0 - jnp.asarray(terminated, jnp.float32)),
        jnp.asarray(v_obs[:-1], jnp.float32),
        jnp.asarray(v_tp1, jnp.float32),
        jnp.asarray(terminated | truncated),
        lam,
    )
    return np.asarray(out.advantage), np.asarray(out.return_)


def random_segment(T=9, B=4, seed=0):
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=(T, B)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.2
    truncated = rng.random((T, B)) < 0.2
    v_obs = rng.normal(size=(T + 1, B)).astype(np.float32)
    v_final = rng.normal(size=(T, B)).astype(np.float32)
    return reward, terminated, truncated, v_obs, v_final


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_numpy_loop(seed):
    seg = random_segment(seed=seed)
    assert seg[1].any() and seg[2].any()  # the segment has both kinds of ends
    adv, ret = run_gae(*seg)
    ref_adv, ref_ret = gae_reference(*seg, GAMMA, LAM)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_truncation_differs_from_termination_by_bootstrap_value():
    T, t_end = 8, 3
    reward, _, _, v_obs, v_final = random_segment(T=T, B=1, seed=3)
    no_end = np.zeros((T, 1), bool)
    ends = no_end.copy()
    ends[t_end] = True

    adv_term, _ = run_gae(reward, ends, no_end, v_obs, v_final)
    adv_trunc, _ = run_gae(reward, no_end, ends, v_obs, v_final)
    diff = (adv_trunc - adv_term)[:, 0]

    # At the end step the difference is exactly the bootstrapped term gamma * V(final).
    np.testing.assert_allclose(diff[t_end], GAMMA * v_final[t_end, 0], rtol=1e-5)
    # Earlier steps see it through the GAE trace, later steps (new episode) not at all.
    k = t_end - np.arange(t_end)
    np.testing.assert_allclose(diff[:t_end], (GAMMA * LAM) ** k * diff[t_end], rtol=1e-5)
    np.testing.assert_array_equal(diff[t_end + 1:], 0.0)
    # Neither leaks the next episode's values: both match the reference loop.
    np.testing.assert_allclose(
        adv_trunc, gae_reference(reward, no_end, ends, v_obs, v_final, GAMMA, LAM)[0],
        rtol=1e-5, atol=1e-6)


def test_lambda_limits():
    reward, _, _, v_obs, v_final = random_segment(T=6, B=2, seed=4)
    no_end = np.zeros(reward.shape, bool)
    # lambda = 0: one-step TD errors.
    adv0, _ = run_gae(reward, no_end, no_end, v_obs, v_final, lam=0.0)
    np.testing.assert_allclose(adv0, reward + GAMMA * v_obs[1:] - v_obs[:-1], rtol=1e-5)
    # lambda = 1: discounted return bootstrapped from V(obs_T), minus V(obs_t).
    _, ret1 = run_gae(reward, no_end, no_end, v_obs, v_final, lam=1.0)
    expected = np.zeros_like(reward)
    acc = v_obs[-1]
    for t in reversed(range(reward.shape[0])):
        acc = reward[t] + GAMMA * acc
        expected[t] = acc
    np.testing.assert_allclose(ret1, expected, rtol=1e-5)


def test_shape_mismatch_raises():
    x = jnp.zeros((5, 2))
    with pytest.raises(AssertionError):
        gae(x, x, x, jnp.zeros((5, 3)), x.astype(bool), 0.9)


def test_batch_columns_are_independent():
    reward, terminated, truncated, v_obs, v_final = random_segment(T=7, B=3, seed=5)
    adv, _ = run_gae(reward, terminated, truncated, v_obs, v_final)
    col = lambda x: x[:, 1:2]
    adv1, _ = run_gae(col(reward), col(terminated), col(truncated), col(v_obs),
                      col(v_final))
    chex.assert_trees_all_close(adv[:, 1:2], adv1, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_rlax_per_episode_piece(seed):
    """An independent reference: ``rlax.truncated_generalized_advantage_estimation`` on
    each episode piece of each column, bootstrapped with what that piece's last step
    sees (0 after a termination, ``V(final_obs)`` after a truncation, ``V(obs_T)`` at
    the segment end). Catches advantages leaking across an episode end, or a truncated
    step bootstrapping from the next episode's first observation."""
    rlax = pytest.importorskip("rlax")
    seg = random_segment(T=16, B=6, seed=seed)
    reward, terminated, truncated, v_obs, v_final = seg
    adv, ret = run_gae(*seg)
    T, B = reward.shape
    checked = 0
    for b in range(B):
        for s, e in episode_pieces(terminated[:, b] | truncated[:, b]):
            last = 0.0 if terminated[e, b] else (v_final[e, b] if truncated[e, b] else v_obs[e + 1, b])
            values = np.concatenate([v_obs[s:e + 1, b], [last]]).astype(np.float32)
            discount = np.full(e + 1 - s, GAMMA, np.float32)
            ref = rlax.truncated_generalized_advantage_estimation(
                jnp.asarray(reward[s:e + 1, b]), jnp.asarray(discount), LAM, jnp.asarray(values))
            np.testing.assert_allclose(adv[s:e + 1, b], ref, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(ret[s:e + 1, b], np.asarray(ref) + v_obs[s:e + 1, b],
                                       rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked > B  # several pieces per column on average

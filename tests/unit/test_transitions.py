"""n-step transitions against a plain NumPy loop (Sutton & Barto 2018, Sec. 7.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.transitions import n_step_transitions
from jaxsrl.core.agent import Trajectory

GAMMA = 0.9


def reference(obs, final_obs, reward, terminated, truncated, n, gamma):
    """Plain loop: for each (b, t) walk forward up to n steps; obs leaves are NumPy."""
    B, T = reward.shape
    ret, disc, nxt = np.zeros((B, T)), np.zeros((B, T)), {}
    for key in obs:
        nxt[key] = np.zeros((B, T) + obs[key].shape[2:], obs[key].dtype)
    for b in range(B):
        for t in range(T):
            total, scale, s = 0.0, 1.0, t
            while True:
                total += scale * reward[b, s]
                scale *= gamma
                if terminated[b, s] or truncated[b, s] or s - t + 1 == n or s + 1 == T:
                    break
                s += 1
            ret[b, t] = total
            disc[b, t] = 0.0 if terminated[b, s] else scale
            for key in obs:
                nxt[key][b, t] = final_obs[key][b, s] if truncated[b, s] else obs[key][b, s + 1]
    return ret, disc, nxt


def random_traj(B=3, T=11, seed=0, with_valid=False):
    rng = np.random.default_rng(seed)
    obs = {"pos": rng.normal(size=(B, T + 1, 2)).astype(np.float32),
           "grid": rng.integers(0, 255, size=(B, T + 1, 3, 2), dtype=np.uint8)}
    final_obs = {"pos": rng.normal(size=(B, T, 2)).astype(np.float32),
                 "grid": rng.integers(0, 255, size=(B, T, 3, 2), dtype=np.uint8)}
    terminated = rng.random((B, T)) < 0.15
    truncated = (rng.random((B, T)) < 0.15) & ~terminated
    traj = Trajectory(
        obs=obs, action=rng.integers(0, 4, (B, T)).astype(np.int32),
        reward=rng.normal(size=(B, T)).astype(np.float32), terminated=terminated,
        truncated=truncated, final_obs=final_obs,
        behaviour_logp=np.zeros((B, T), np.float32),
        policy_version=rng.integers(0, 9, (B, T)).astype(np.int32),
        valid=rng.random((B, T)) < 0.8 if with_valid else None)
    return traj


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_numpy_loop(n, seed):
    traj = random_traj(seed=seed)
    assert traj.terminated.any() and traj.truncated.any()  # both kinds of end inside
    items, valid = jax.jit(n_step_transitions, static_argnums=(1, 2))(traj, n, GAMMA)
    ret, disc, nxt = reference(traj.obs, traj.final_obs, traj.reward, traj.terminated,
                               traj.truncated, n, GAMMA)
    B, T = traj.reward.shape
    flat = lambda x: np.asarray(x).reshape((B * T,) + np.shape(x)[2:])
    np.testing.assert_allclose(items["reward"], flat(ret), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(items["discount"], flat(disc), rtol=1e-6)
    for key in traj.obs:
        np.testing.assert_array_equal(items["next_obs"][key], flat(nxt[key]))
        np.testing.assert_array_equal(items["obs"][key], flat(traj.obs[key][:, :T]))
    np.testing.assert_array_equal(items["action"], flat(traj.action))
    np.testing.assert_array_equal(items["policy_version"], flat(traj.policy_version))
    assert items["reward"].dtype == jnp.float32 and items["discount"].dtype == jnp.float32
    assert items["policy_version"].dtype == jnp.int32
    assert valid.shape == (B * T,) and bool(valid.all())


def test_hand_computed_segment():
    """One row, n = 3: a truncation at t=1 and a termination at t=4, T = 6."""
    obs = np.arange(7, dtype=np.float32)[None, :, None] * 10  # obs_t = 10 t
    final_obs = np.full((1, 6, 1), -1.0, np.float32)
    final_obs[0, 1] = 15.0  # the truncated episode's last observation
    term = np.array([[0, 0, 0, 0, 1, 0]], bool)
    trunc = np.array([[0, 1, 0, 0, 0, 0]], bool)
    r = np.array([[1, 2, 3, 4, 5, 6]], np.float32)
    traj = Trajectory(obs, np.zeros((1, 6), np.int32), r, term, trunc, final_obs,
                      np.zeros((1, 6), np.float32), np.zeros((1, 6), np.int32))
    items, _ = n_step_transitions(traj, 3, 0.5)
    g = 0.5
    np.testing.assert_allclose(items["reward"], [1 + g * 2, 2, 3 + g * 4 + g * g * 5,
                                                 4 + g * 5, 5, 6])
    np.testing.assert_allclose(items["discount"], [g * g, g, 0, 0, 0, g])
    # t=0,1 end by truncation at step 1 -> final_obs[1]; t=5 ends at the segment end -> obs[6].
    np.testing.assert_allclose(items["next_obs"][:, 0], [15, 15, 50, 50, 50, 60])


def test_valid_is_flattened():
    traj = random_traj(seed=3, with_valid=True)
    _, valid = n_step_transitions(traj, 3, GAMMA)
    np.testing.assert_array_equal(valid, traj.valid.reshape(-1))


@pytest.mark.parametrize("n, gamma", [(0, 0.9), (2, 1.5), (2, -0.1)])
def test_bad_arguments_raise(n, gamma):
    with pytest.raises(ValueError, match="n=|gamma="):
        n_step_transitions(random_traj(), n, gamma)

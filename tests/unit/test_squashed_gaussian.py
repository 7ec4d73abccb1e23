"""The tanh-squashed, Box-rescaled Gaussian of SAC against independent references:
a float64 NumPy formula, quadrature of the density, a numeric Jacobian, and a
histogram of samples."""

import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import squashed_gaussian as sg


def np_log_prob(u, mean, log_std, scale):
    """log N(u) - sum log(1 - tanh(u)^2) - sum log scale, the textbook form, float64."""
    u, mean, log_std = (np.asarray(v, np.float64) for v in (u, mean, log_std))
    std = np.exp(log_std)
    gauss = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return (gauss - np.log(1.0 - np.tanh(u) ** 2) - np.log(np.asarray(scale, np.float64))).sum(-1)


def test_log1m_tanh_sq_is_stable_and_exact():
    u = np.linspace(-40.0, 40.0, 801)
    # -2 log cosh(u) = -2 (|u| + log1p(exp(-2|u|)) - log 2), an independent stable form.
    ref = -2.0 * (np.abs(u) + np.log1p(np.exp(-2.0 * np.abs(u))) - math.log(2.0))
    got = np.asarray(sg.log1m_tanh_sq(jnp.asarray(u, jnp.float32)), np.float64)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    small = np.linspace(-3, 3, 61)  # the naive form is accurate here
    np.testing.assert_allclose(np.asarray(sg.log1m_tanh_sq(jnp.asarray(small, jnp.float32))),
                               np.log(1 - np.tanh(small) ** 2), rtol=1e-5, atol=1e-5)


def test_log_prob_matches_numpy_formula():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(5, 3))
    log_std = rng.uniform(-1.5, 0.5, size=(5, 3))
    u = rng.uniform(-2.5, 2.5, size=(5, 3))
    scale = np.array([0.5, 2.0, 3.0])
    got = sg.log_prob(*(jnp.asarray(v, jnp.float32) for v in (u, mean, log_std, scale)))
    assert got.shape == (5,) and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np_log_prob(u, mean, log_std, scale), rtol=1e-5, atol=1e-4)


LOW, HIGH = -2.0, 3.0  # asymmetric 1-D box: scale 2.5, bias 0.5
SCALE, BIAS = np.float32([2.5]), np.float32([0.5])


def _logp_of_action(a, mean=0.3, log_std=0.2):
    """log density of the env action a (float64 grid) via the pre-squash u = atanh."""
    u = np.arctanh((a - BIAS[0]) / SCALE[0])[:, None]
    return np.asarray(sg.log_prob(jnp.asarray(u, jnp.float32), jnp.full_like(u, mean, dtype=jnp.float32),
                                  jnp.float32(log_std), jnp.asarray(SCALE)), np.float64)


def test_density_over_the_box_integrates_to_one():
    a = np.linspace(LOW, HIGH, 400_001)[1:-1]
    density = np.exp(_logp_of_action(a))
    np.testing.assert_allclose(np.trapezoid(density, a), 1.0, atol=2e-3)


def test_density_matches_numeric_jacobian():
    u = np.array([-3.0, -1.0, 0.0, 0.4, 2.0, 4.0])
    h = 1e-5
    da_du = (SCALE[0] * (np.tanh(u + h) - np.tanh(u - h))) / (2 * h)  # finite differences
    gauss = -0.5 * ((u - 0.3) / math.exp(0.2)) ** 2 - 0.2 - 0.5 * math.log(2 * math.pi)
    got = sg.log_prob(jnp.asarray(u[:, None], jnp.float32), jnp.full((6, 1), 0.3), jnp.float32(0.2),
                      jnp.asarray(SCALE))
    np.testing.assert_allclose(np.asarray(got), gauss - np.log(da_du), rtol=1e-4, atol=1e-4)


def test_samples_follow_the_density_and_stay_in_bounds():
    n = 200_000
    mean, log_std = jnp.full((n, 1), 0.3), jnp.full((n, 1), 0.2)
    action, logp = sg.sample(mean, log_std, jax.random.PRNGKey(0), SCALE, BIAS)
    action = np.asarray(action, np.float64)[:, 0]
    assert action.min() >= LOW and action.max() <= HIGH
    np.testing.assert_allclose(np.asarray(logp), _logp_of_action(np.clip(action, LOW + 1e-6, HIGH - 1e-6)),
                               atol=2e-2)  # atanh of float32 actions loses digits near the bounds
    hist, edges = np.histogram(action, bins=25, range=(LOW, HIGH), density=True)
    centres = (edges[1:] + edges[:-1]) / 2
    inner = slice(2, -2)  # the density changes fast in the outer bins
    np.testing.assert_allclose(hist[inner], np.exp(_logp_of_action(centres))[inner], atol=0.015)


def test_squash_and_mode_rescale_to_the_bounds():
    scale, bias = sg.box_affine(gymnasium.spaces.Box(np.float32([-2, 0]), np.float32([2, 5])))
    np.testing.assert_array_equal(scale, [2.0, 2.5])
    np.testing.assert_array_equal(bias, [0.0, 2.5])
    u = jnp.float32([[-50, -50], [0, 0], [50, 50], [0.5, -1.0]])
    np.testing.assert_allclose(np.asarray(sg.squash(u, scale, bias)),
                               [[-2, 0], [0, 2.5], [2, 5], [2 * np.tanh(0.5), 2.5 + 2.5 * np.tanh(-1.0)]],
                               rtol=1e-6, atol=1e-6)
    action, logp = sg.mode(u[3:], jnp.zeros((1, 2)), scale, bias)
    np.testing.assert_allclose(np.asarray(action), np.asarray(sg.squash(u[3:], scale, bias)))
    np.testing.assert_allclose(np.asarray(logp), np_log_prob(u[3:], u[3:], np.zeros((1, 2)), scale), rtol=1e-5)


@pytest.mark.parametrize("space", [
    gymnasium.spaces.Discrete(3),
    gymnasium.spaces.Box(-1, 1, (2, 2)),
    gymnasium.spaces.Box(-np.inf, np.inf, (2,)),
])
def test_box_affine_rejects_unusable_action_spaces(space):
    with pytest.raises(ValueError, match="sac needs"):
        sg.box_affine(space)


def test_bounded_log_std():
    raw = jnp.float32([-100.0, 0.0, 100.0])
    np.testing.assert_allclose(np.asarray(sg.bounded_log_std(raw, -5.0, 2.0)), [-5.0, -1.5, 2.0])

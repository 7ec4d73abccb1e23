"""agents/q_learning.py against its independent reference, ``rlax`` (a test dependency
only), and the runtime's promise that importing the agents never imports rlax."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.q_learning import double_q_learning, q_learning

B, A = 64, 5


def _inputs(seed):
    rng = np.random.default_rng(seed)
    q_tm1 = rng.normal(size=(B, A)).astype(np.float32)
    a_tm1 = rng.integers(0, A, B).astype(np.int32)
    r_t = rng.normal(size=B).astype(np.float32)
    discount_t = np.where(rng.random(B) < 0.25, 0.0, rng.uniform(0.5, 1.0, B)).astype(np.float32)
    q_t_value = rng.normal(size=(B, A)).astype(np.float32)
    q_t_selector = rng.normal(size=(B, A)).astype(np.float32)
    return q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector


@pytest.mark.parametrize("seed", range(3))
def test_q_learning_matches_rlax(seed):
    rlax = pytest.importorskip("rlax")
    q_tm1, a_tm1, r_t, discount_t, q_t, _ = _inputs(seed)
    ref = jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t)
    np.testing.assert_allclose(q_learning(q_tm1, a_tm1, r_t, discount_t, q_t), ref,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_double_q_learning_matches_rlax(seed):
    rlax = pytest.importorskip("rlax")
    args = _inputs(seed)
    ref = jax.vmap(rlax.double_q_learning)(*args)
    np.testing.assert_allclose(double_q_learning(*args), ref, rtol=1e-6, atol=1e-6)


def test_double_selects_with_the_selector_and_evaluates_with_the_value_hand_computed():
    q_tm1 = jnp.array([[1.0, 2.0]])
    a_tm1 = jnp.array([1], jnp.int32)
    q_t_value = jnp.array([[10.0, 20.0]])
    q_t_selector = jnp.array([[5.0, 0.0]])  # selects action 0, whose value is 10
    td = double_q_learning(q_tm1, a_tm1, jnp.array([0.5]), jnp.array([0.9]), q_t_value,
                           q_t_selector)
    np.testing.assert_allclose(td, [0.5 + 0.9 * 10.0 - 2.0], rtol=1e-6)
    td_max = q_learning(q_tm1, a_tm1, jnp.array([0.5]), jnp.array([0.9]), q_t_value)
    np.testing.assert_allclose(td_max, [0.5 + 0.9 * 20.0 - 2.0], rtol=1e-6)


def test_gradient_flows_only_through_q_tm1():
    q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector = map(jnp.asarray, _inputs(0))
    grads = jax.grad(lambda *q: double_q_learning(q[0], a_tm1, r_t, discount_t, q[1], q[2]).sum(),
                     argnums=(0, 1, 2))(q_tm1, q_t_value, q_t_selector)
    np.testing.assert_array_equal(grads[0], -jax.nn.one_hot(a_tm1, A))
    assert not np.any(grads[1]) and not np.any(grads[2])
    grads = jax.grad(lambda q, v: q_learning(q, a_tm1, r_t, discount_t, v).sum(),
                     argnums=(0, 1))(q_tm1, q_t_value)
    np.testing.assert_array_equal(grads[0], -jax.nn.one_hot(a_tm1, A))
    assert not np.any(grads[1])


def test_float_actions_raise():
    q_tm1, a_tm1, r_t, discount_t, q_t, _ = _inputs(0)
    with pytest.raises(AssertionError):
        q_learning(q_tm1, a_tm1.astype(np.float32), r_t, discount_t, q_t)


def test_importing_the_agents_imports_no_rlax():
    """rlax (and the tfp-nightly it brings, ~0.7 s per process) is a test dependency only:
    ``pip install -e .`` has no rlax, so the runtime must not import it."""
    code = "import sys, agents; print('rlax' in sys.modules, 'tensorflow_probability' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout

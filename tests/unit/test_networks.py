"""Action distributions and actor-critic networks against NumPy references."""

import collections

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import networks

# Jitted helpers: one compile each instead of op-by-op dispatch (keeps tests fast).
log_prob = jax.jit(networks.log_prob)
entropy = jax.jit(networks.entropy)
sample = jax.jit(networks.sample)
mode = jax.jit(networks.mode)


def np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_categorical_log_prob_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 4)).astype(np.float32)
    start = 3
    action = rng.integers(0, 4, 5) + start
    dist = networks.Categorical(jnp.asarray(logits), start)

    ref_logp = np_log_softmax(logits.astype(np.float64))
    np.testing.assert_allclose(
        log_prob(dist, jnp.asarray(action, jnp.int32)),
        ref_logp[np.arange(5), action - start], rtol=1e-5)
    np.testing.assert_allclose(
        entropy(dist), -(np.exp(ref_logp) * ref_logp).sum(-1), rtol=1e-5)


def test_multi_categorical_log_prob_entropy():
    nvec, start = (3, 5, 2), (0, 1, -2)
    head = networks.head_for_space(gymnasium.spaces.MultiDiscrete(nvec, start=start))
    net = networks.ActorCritic(head, hidden_sizes=(8,))
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 4))
    params = jax.jit(net.init)(jax.random.PRNGKey(1), x)
    dist = jax.jit(lambda p, x: net.apply(p, x, method="policy"))(params, x)
    assert dist.logits.shape == (6, 3, 5)

    flat = np.asarray(jax.jit(
        lambda p, x: net.apply(p, x, method=lambda m, x: m.policy_net(x)))(params, x),
        np.float64)  # [6, 10] raw logits, groups of 3, 5, 2
    groups = np.split(flat, np.cumsum(nvec)[:-1], axis=-1)
    rng = np.random.default_rng(1)
    action = np.stack([rng.integers(0, n, 6) + s for n, s in zip(nvec, start)], -1)

    ref_logp = sum(np_log_softmax(g)[np.arange(6), action[:, k] - start[k]]
                   for k, g in enumerate(groups))
    ref_ent = sum(-(np.exp(np_log_softmax(g)) * np_log_softmax(g)).sum(-1)
                  for g in groups)
    np.testing.assert_allclose(
        log_prob(dist, jnp.asarray(action, jnp.int32)), ref_logp, rtol=1e-5)
    np.testing.assert_allclose(entropy(dist), ref_ent, rtol=1e-5)

    # Padding entries are never sampled and the mode is each group's argmax.
    samples = sample(dist, jax.random.PRNGKey(2))
    assert samples.dtype == jnp.int32 and samples.shape == (6, 3)
    wide = networks.MultiCategorical(jnp.broadcast_to(dist.logits, (500, 6, 3, 5)),
                                     dist.start)
    many = np.asarray(sample(wide, jax.random.PRNGKey(3)))
    assert (many >= np.asarray(start)).all() and (many < np.add(start, nvec)).all()
    np.testing.assert_array_equal(
        mode(dist), np.stack([g.argmax(-1) for g in groups], -1) + start)


def test_diag_gaussian_log_prob_entropy():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(4, 3)).astype(np.float32)
    log_std = rng.normal(size=(3,)).astype(np.float32) * 0.5
    action = rng.normal(size=(4, 3)).astype(np.float32) * 2
    dist = networks.DiagGaussian(jnp.asarray(mean), jnp.asarray(log_std))

    std = np.exp(log_std.astype(np.float64))
    ref_logp = (-0.5 * ((action - mean) / std) ** 2 - np.log(std)
                - 0.5 * np.log(2 * np.pi)).sum(-1)
    ref_ent = (0.5 * np.log(2 * np.pi * np.e * std**2)).sum() * np.ones(4)
    np.testing.assert_allclose(log_prob(dist, action), ref_logp, rtol=1e-5)
    np.testing.assert_allclose(entropy(dist), ref_ent, rtol=1e-5)


def test_sampling_frequencies():
    n = 20000
    logits = jnp.broadcast_to(jnp.log(jnp.array([0.1, 0.6, 0.3])), (n, 3))
    cat = sample(networks.Categorical(logits), jax.random.PRNGKey(0))
    np.testing.assert_allclose(np.bincount(cat, minlength=3) / n, [0.1, 0.6, 0.3],
                               atol=0.015)
    mean = jnp.broadcast_to(jnp.array([1.0, -2.0]), (n, 2))
    gauss = networks.DiagGaussian(mean, jnp.log(jnp.array([0.5, 2.0])))
    x = sample(gauss, jax.random.PRNGKey(1))
    assert x.dtype == jnp.float32
    np.testing.assert_allclose(x.mean(0), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(x.std(0), [0.5, 2.0], rtol=0.03)


def test_categorical_samples_and_mode_respect_the_start_offset():
    # Discrete(4, start=3): actions in [3, 7), never the raw index.
    head = networks.head_for_space(gymnasium.spaces.Discrete(4, start=3))
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2000, 4)), jnp.float32)
    dist = networks.logits_to_distribution(logits, head)
    x = np.asarray(sample(dist, jax.random.PRNGKey(0)))
    assert x.dtype == np.int32 and x.min() == 3 and x.max() == 6
    np.testing.assert_array_equal(mode(dist), np.argmax(logits, -1) + 3)
    np.testing.assert_allclose(  # log_prob takes the offset action
        log_prob(dist, jnp.asarray(x)),
        np_log_softmax(np.asarray(logits, np.float64))[np.arange(2000), x - 3], rtol=1e-5)


def test_flatten_observation_box_and_dict():
    # An OrderedDict keeps "b" first in the space: the flat order must still be sorted.
    space = gymnasium.spaces.Dict(collections.OrderedDict(
        b=gymnasium.spaces.Box(0, 255, (2, 3), np.uint8),
        a=gymnasium.spaces.Box(-1, 1, (2,)),
    ))
    assert list(space.spaces) == ["b", "a"]
    obs = {"b": np.arange(2 * 5 * 6, dtype=np.uint8).reshape(2, 5, 2, 3),
           "a": -np.ones((2, 5, 2), np.float32)}
    flat = networks.flatten_observation(obs, space)
    assert flat.shape == (2, 5, 8) and flat.dtype == jnp.float32
    np.testing.assert_array_equal(flat[..., :2], -1.0)  # "a" first (sorted keys)
    np.testing.assert_array_equal(flat[..., 2:], obs["b"].reshape(2, 5, 6))
    with pytest.raises(ValueError):
        networks.flatten_observation({"a": obs["a"]}, space)


@pytest.mark.parametrize("space, kind", [
    (gymnasium.spaces.Discrete(3), "categorical"),
    (gymnasium.spaces.MultiDiscrete([2, 4]), "multi_categorical"),
    (gymnasium.spaces.Box(-1, 1, (2,)), "gaussian"),
])
def test_actor_critic_shapes_and_cleanrl_init(space, kind):
    head = networks.head_for_space(space)
    assert head.kind == kind
    net = networks.ActorCritic(head, hidden_sizes=(16, 16))
    x = jax.random.normal(jax.random.PRNGKey(0), (7, 5))
    params = jax.jit(net.init)(jax.random.PRNGKey(1), x)
    dist, value = jax.jit(net.apply)(params, x)
    assert value.shape == (7,)
    p = params["params"]
    # Orthogonal hidden kernel with gain sqrt(2), zero biases, tiny policy outputs.
    w = np.asarray(p["policy_net"]["Dense_1"]["kernel"])
    np.testing.assert_allclose(w.T @ w, 2.0 * np.eye(16), atol=1e-5)
    np.testing.assert_array_equal(p["value_net"]["Dense_0"]["bias"], 0.0)
    out = dist.mean if kind == "gaussian" else dist.logits
    out = np.asarray(out)
    assert np.abs(out[out > -1e6]).max() < 0.2  # gain 0.01 output layer (not padding)
    if kind == "gaussian":
        np.testing.assert_array_equal(dist.log_std, 0.0)
    # Policy and value torsos are separate: no shared parameters.
    assert set(p) >= {"policy_net", "value_net"}


def test_unsupported_spaces_raise():
    with pytest.raises(TypeError):
        networks.head_for_space(gymnasium.spaces.MultiBinary(3))
    with pytest.raises(ValueError):
        networks.head_for_space(gymnasium.spaces.Box(-1, 1, (2, 2)))
    with pytest.raises(TypeError):
        networks.flatten_observation(np.zeros(3), gymnasium.spaces.Discrete(3))

"""Observation encoders: Nature CNN on uint8 images, Dict of image + vector, network choice,
and PPO learning with them on 2 fake devices (matches 1 device)."""

import pathlib
import subprocess
import sys

import gymnasium
import jax
import numpy as np
import pytest
from jax import lax

from agents import encoders, networks
from fake_devices import fake_devices_env

REPO = pathlib.Path(__file__).resolve().parents[2]
IMAGE = gymnasium.spaces.Box(0, 255, (84, 84, 4), np.uint8)
VECTOR = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _reference_cnn(p, x):
    """Mnih et al. 2015 torso in plain lax ops: x/255, 3 ReLU convs, ReLU dense 512."""
    h = np.asarray(x, np.float32) / 255.0
    for name, stride in (("Conv_0", 4), ("Conv_1", 2), ("Conv_2", 1)):
        h = lax.conv_general_dilated(h, p[name]["kernel"], (stride, stride), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = np.maximum(h + p[name]["bias"], 0.0)
    h = np.asarray(h).reshape(h.shape[0], -1)
    return np.maximum(h @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], 0.0)


def test_nature_cnn_architecture_and_uint8_scaling():
    net = encoders.NatureCNN()
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 84, 84, 4), dtype=np.uint8)
    params = jax.jit(net.init)(jax.random.PRNGKey(0), x[0])
    shapes = jax.tree.map(lambda a: a.shape, params["params"])
    assert shapes["Conv_0"]["kernel"] == (8, 8, 4, 32)
    assert shapes["Conv_1"]["kernel"] == (4, 4, 32, 64)
    assert shapes["Conv_2"]["kernel"] == (3, 3, 64, 64)
    assert shapes["Dense_0"]["kernel"] == (7 * 7 * 64, 512)
    out = jax.jit(net.apply)(params, x)  # any leading dims: [2, 3, ...] -> [2, 3, 512]
    assert out.shape == (2, 3, 512) and out.dtype == np.float32
    ref = _reference_cnn(params["params"], x.reshape(6, 84, 84, 4)).reshape(2, 3, 512)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert (np.asarray(out) > 0).any()
    # Scaled by 1/255 inside: uint8 pixels and the same numbers as float32 agree.
    np.testing.assert_allclose(jax.jit(net.apply)(params, x.astype(np.float32)), out, rtol=1e-6)


@pytest.mark.parametrize("space, cls, image_keys", [
    (VECTOR, networks.ActorCritic, []),
    (IMAGE, encoders.EncoderActorCritic, [None]),
    (gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8), networks.ActorCritic, []),  # symbolic grid
    (gymnasium.spaces.Box(0.0, 1.0, (84, 84, 4), np.float32), networks.ActorCritic, []),
    (gymnasium.spaces.Dict(pos=VECTOR, vel=VECTOR), networks.ActorCritic, []),
    (gymnasium.spaces.Dict(pixels=IMAGE, state=VECTOR), encoders.EncoderActorCritic, ["pixels"]),
])
def test_network_chosen_from_observation_space(space, cls, image_keys):
    head = networks.head_for_space(gymnasium.spaces.Discrete(3))
    net, net_input = encoders.actor_critic(space, head, (8,), "relu")
    assert type(net) is cls
    layout = encoders.observation_layout(space)
    assert [leaf.key for leaf in layout if leaf.image] == image_keys
    obs = networks.dummy_observation(space, batch=2)
    params = jax.jit(net.init)(jax.random.PRNGKey(0), net_input(obs))
    dist, value = jax.jit(net.apply)(params, net_input(obs))
    assert dist.logits.shape == (2, 3) and value.shape == (2,)


def test_dict_of_image_and_vector_encodes_each_key_and_concatenates():
    space = gymnasium.spaces.Dict(state=VECTOR, pixels=IMAGE)  # sorted: pixels, state
    enc = encoders.ObservationEncoder(encoders.observation_layout(space))
    rng = np.random.default_rng(0)
    obs = {"pixels": rng.integers(0, 256, (5, 84, 84, 4), dtype=np.uint8),
           "state": rng.normal(size=(5, 3)).astype(np.float32)}
    params = jax.jit(enc.init)(jax.random.PRNGKey(0), obs)
    feats = jax.jit(enc.apply)(params, obs)
    assert feats.shape == (5, 512 + 3)
    cnn = encoders.NatureCNN()
    np.testing.assert_allclose(feats[:, :512], cnn.apply({"params": params["params"]["cnn_pixels"]},
                                                         obs["pixels"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(feats[:, 512:], obs["state"])
    with pytest.raises(ValueError):  # a bare array where a dict is expected
        enc.apply(params, obs["pixels"])


def test_encoder_actor_critic_shares_the_torso_and_inits_like_cleanrl():
    head = networks.head_for_space(gymnasium.spaces.Box(-1, 1, (2,)))
    net = encoders.EncoderActorCritic(head, encoders.observation_layout(IMAGE))
    x = np.random.default_rng(0).integers(0, 256, (4, 84, 84, 4), dtype=np.uint8)
    params = jax.jit(net.init)(jax.random.PRNGKey(0), x)
    p = params["params"]
    assert set(p) == {"encoder", "policy_net", "value_net", "log_std"}  # one CNN for both
    dist, value = jax.jit(net.apply)(params, x)
    np.testing.assert_allclose(jax.jit(lambda p, x: net.apply(p, x, method="value"))(params, x),
                               value, rtol=1e-6)
    pol = jax.jit(lambda p, x: net.apply(p, x, method="policy"))(params, x)
    np.testing.assert_allclose(pol.mean, dist.mean, rtol=1e-6)
    assert np.abs(np.asarray(dist.mean)).max() < 0.2  # gain-0.01 policy layer
    np.testing.assert_array_equal(dist.log_std, 0.0)
    w = np.asarray(p["encoder"]["cnn"]["Conv_1"]["kernel"]).reshape(-1, 64)  # orthogonal, gain sqrt 2
    np.testing.assert_allclose(w.T @ w, 2.0 * np.eye(64), atol=1e-4)


SNIPPET = r"""
import gymnasium, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from agents import ppo
from jaxsrl.core.agent import EnvSpec, Trajectory

assert len(jax.devices()) == 2, jax.devices()
B, T = 4, 4
IMG = gymnasium.spaces.Box(0, 255, (36, 36, 2), np.uint8)  # smallest Nature-CNN input
VEC = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
mesh = Mesh(np.array(jax.devices()), ("data",))
batch, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

def sample(space, r, lead):
    if isinstance(space, gymnasium.spaces.Dict):
        return {k: sample(s, r, lead) for k, s in space.spaces.items()}
    if space.dtype == np.uint8:
        return r.integers(0, 256, lead + space.shape, dtype=np.uint8)
    return r.normal(size=lead + space.shape).astype(np.float32)

for name, obs_space in [("cnn", IMG), ("dict", gymnasium.spaces.Dict(pixels=IMG, state=VEC))]:
    spec = EnvSpec(obs_space, gymnasium.spaces.Discrete(4))
    config = ppo.PPOConfig(hidden_sizes=(), activation="relu", num_epochs=1, num_minibatches=2,
                           learning_rate=1e-3)
    fns = ppo.make(config, spec, num_updates=10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    r = np.random.default_rng(0)
    terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
    terminated[0, 2] = truncated[3, 1] = True
    traj = Trajectory(
        obs=sample(obs_space, r, (B, T + 1)), action=r.integers(0, 4, (B, T)).astype(np.int32),
        reward=r.normal(size=(B, T)).astype(np.float32), terminated=terminated, truncated=truncated,
        final_obs=sample(obs_space, r, (B, T)),
        behaviour_logp=np.full((B, T), np.log(1 / 4), np.float32),
        policy_version=np.zeros((B, T), np.int32))
    rng = jax.random.PRNGKey(1)
    action, _, extras = jax.jit(fns.act)(state.params, jax.tree.map(lambda x: x[:, 0], traj.obs),
                                         None, rng)
    assert action.shape == (B,) and ((0 <= action) & (action < 4)).all(), action
    one, one_metrics = jax.jit(fns.learn)(state, traj, rng)
    learn = jax.jit(fns.learn, in_shardings=(replicated, batch, replicated),
                    out_shardings=(replicated, replicated))
    sharded = jax.device_put(traj, batch)
    assert sharded.reward.addressable_shards[0].data.shape == (B // 2, T)
    two, two_metrics = learn(jax.device_put(state, replicated), sharded, rng)
    cnn = lambda s: s.params["net"]["params"]["encoder"]["cnn" if name == "cnn" else "cnn_pixels"]
    moved = float(np.abs(cnn(one)["Conv_0"]["kernel"] - cnn(state)["Conv_0"]["kernel"]).max())
    assert moved > 1e-5, (name, moved)  # the CNN itself learned
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-4)
    for k in one_metrics:
        np.testing.assert_allclose(one_metrics[k], two_metrics[k], atol=1e-5, rtol=1e-4, err_msg=k)
    print(name, "SHARDED_MATCH_OK")
"""


def test_cnn_and_dict_ppo_on_two_fake_devices_match_one_device():
    proc = subprocess.run([sys.executable, "-c", SNIPPET], env=fake_devices_env(2), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cnn SHARDED_MATCH_OK" in proc.stdout and "dict SHARDED_MATCH_OK" in proc.stdout

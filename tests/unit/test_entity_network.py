"""Entity-attention recurrent network and recurrent PPO (hide-and-seek policy)."""

import dataclasses
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import networks, ppo
from agents.entity_network import RecurrentEntityActorCritic
from agents.ppo_recurrent import unroll_network
from fake_devices import fake_devices_env
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs import env_spaces

REPO = pathlib.Path(__file__).resolve().parents[2]
SPEC = EnvSpec(*env_spaces("hide_and_seek"))
N = 6


@pytest.fixture(scope="module")
def net_and_vars():
    net = RecurrentEntityActorCritic(networks.head_for_space(SPEC.action_space), width=16, heads=2)
    obs = _obs(0)
    variables = net.init(jax.random.PRNGKey(0), obs, net.initial_carry(N), jnp.zeros((N,), bool))
    return net, variables


def _obs(seed, lead=(N,)):
    rng = np.random.default_rng(seed)
    out = {}
    for key, space in SPEC.observation_space.spaces.items():
        if key.endswith("_mask") or key.endswith("_present"):
            out[key] = np.ones(lead + space.shape, np.float32)
        else:
            out[key] = rng.normal(size=lead + space.shape).astype(np.float32)
    return out


def _apply(net, variables, obs, carry=None):
    carry = net.initial_carry(N) if carry is None else carry
    dist, value, carry = net.apply(variables, obs, carry, jnp.zeros((N,), bool))
    return np.asarray(dist.logits), np.asarray(value), carry


def test_shapes_for_padded_entities(net_and_vars):
    net, variables = net_and_vars
    obs = _obs(1)
    obs["boxes_present"][:, 1] = 0  # a padded box slot
    logits, value, carry = _apply(net, variables, obs)
    nvec = SPEC.action_space.nvec
    assert logits.shape == (N, len(nvec), nvec.max())
    assert value.shape == (N,)
    assert jax.tree.map(lambda x: x.shape, carry) == (((N, 16), (N, 16)), ((N, 16), (N, 16)))
    assert np.isfinite(logits[..., :11]).all() and np.isfinite(value).all()


def test_invisible_entities_do_not_change_the_policy_but_the_critic_sees_them(net_and_vars):
    net, variables = net_and_vars
    obs = _obs(2)
    obs["boxes_mask"][:, 0] = 0  # box 0 is real but not visible to the agent
    obs["agents_mask"][:, 1] = 0
    logits, value, _ = _apply(net, variables, obs)
    perturbed = {k: v.copy() for k, v in obs.items()}
    perturbed["boxes"][:, 0] += 5.0
    perturbed["agents"][:, 1] -= 3.0
    logits2, value2, _ = _apply(net, variables, perturbed)
    np.testing.assert_allclose(logits2, logits, rtol=1e-5, atol=1e-5)  # policy: masked
    assert np.abs(value2 - value).max() > 1e-4  # omniscient critic: sees them


def test_visible_entities_do_change_the_policy(net_and_vars):
    net, variables = net_and_vars
    obs = _obs(3)
    logits, _, _ = _apply(net, variables, obs)
    perturbed = {k: v.copy() for k, v in obs.items()}
    perturbed["boxes"][:, 0] += 5.0
    logits2, _, _ = _apply(net, variables, perturbed)
    assert np.abs(logits2 - logits).max() > 1e-4


def test_padded_entities_change_neither_policy_nor_value(net_and_vars):
    net, variables = net_and_vars
    obs = _obs(4)
    obs["ramps_present"][:, 0] = 0
    obs["ramps_mask"][:, 0] = 0
    logits, value, _ = _apply(net, variables, obs)
    perturbed = {k: v.copy() for k, v in obs.items()}
    perturbed["ramps"][:, 0] = 100.0
    logits2, value2, _ = _apply(net, variables, perturbed)
    np.testing.assert_allclose(logits2, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value2, value, rtol=1e-5, atol=1e-5)


def test_carry_is_reset_at_episode_boundaries_inside_a_chunk(net_and_vars):
    net, variables = net_and_vars
    T, k = 6, 2  # the episode ends at step k; step k + 1 starts a new one
    obs = _obs(5, lead=(T + 1, N))
    carry0 = jax.tree.map(lambda x: x + 0.5, net.initial_carry(N))  # mid-episode carry
    reset = np.zeros((T + 1, N), bool)
    reset[k + 1] = True
    _, values, _ = unroll_network(net, variables, obs, None, reset, carry0)
    # The same steps from k + 1 on, started afresh from a zero carry:
    tail = jax.tree.map(lambda x: x[k + 1:], obs)
    _, fresh, _ = unroll_network(net, variables, tail, None, np.zeros((T - k, N), bool),
                                 net.initial_carry(N))
    np.testing.assert_allclose(values[k + 1:], fresh, rtol=1e-5, atol=1e-5)
    # ... while without the reset the carry leaks across the boundary:
    _, leaky, _ = unroll_network(net, variables, obs, None, np.zeros((T + 1, N), bool), carry0)
    assert np.abs(np.asarray(leaky[k + 1:]) - np.asarray(fresh)).max() > 1e-4


SNIPPET = r"""
import dataclasses, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from agents import ppo
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import env_spaces
assert len(jax.devices()) == 2
spec = EnvSpec(*env_spaces("hide_and_seek"))
cfg = dataclasses.replace(ppo.PPOConfig(), network="entity_lstm", hidden_sizes=(16,), attention_heads=2,
                          num_epochs=1, num_minibatches=2, normalize_observations=True,
                          normalize_values=True, learning_rate=1e-3)
fns = ppo.make(cfg, spec, 10)
state = jax.jit(fns.init)(jax.random.PRNGKey(0))
B, T = 4, 5
r = np.random.default_rng(0)
obs = {k: r.random((B, T + 1) + s.shape).astype(np.float32) for k, s in spec.observation_space.spaces.items()}
fin = {k: r.random((B, T) + s.shape).astype(np.float32) for k, s in spec.observation_space.spaces.items()}
term, trunc = np.zeros((B, T), bool), np.zeros((B, T), bool)
trunc[1, 2] = True
traj = Trajectory(obs=obs, action=r.integers(0, 2, (B, T, 5)).astype(np.int32),
                  reward=r.normal(size=(B, T)).astype(np.float32), terminated=term, truncated=trunc,
                  final_obs=fin, behaviour_logp=np.full((B, T), -8.0, np.float32),
                  policy_version=np.zeros((B, T), np.int32), carry=fns.initial_carry(B))
rng = jax.random.PRNGKey(1)
one, m1 = jax.jit(fns.learn)(state, traj, rng)
mesh = Mesh(np.array(jax.devices()), ("data",))
batch, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
two, m2 = jax.jit(fns.learn, in_shardings=(rep, batch, rep), out_shardings=(rep, rep))(
    jax.device_put(state, rep), jax.device_put(traj, batch), rng)
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=1e-4)
moved = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(one.params["net"]), jax.tree.leaves(state.params["net"])))
assert moved > 1e-5, moved
print("RECURRENT_SHARDED_MATCH_OK")
"""


def test_recurrent_learn_on_two_fake_devices_matches_one():
    proc = subprocess.run([sys.executable, "-c", SNIPPET], env=fake_devices_env(2), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RECURRENT_SHARDED_MATCH_OK" in proc.stdout


def test_unknown_network_is_refused():
    with pytest.raises(ValueError, match="unknown network 'cnn'"):
        ppo.make(dataclasses.replace(ppo.PPOConfig(), network="cnn"), SPEC, 10)

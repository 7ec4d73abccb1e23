"""PPO learn sharded over 2 fake CPU devices matches the single-device result.

The device count is fixed when JAX starts, so the check runs in a subprocess with
two fake devices (``fake_devices.fake_devices_env``).
"""

import pathlib
import subprocess
import sys

from fake_devices import fake_devices_env

REPO = pathlib.Path(__file__).resolve().parents[2]

SNIPPET = r"""
import gymnasium, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from agents import ppo
from jaxsrl.core.agent import EnvSpec, Trajectory

assert len(jax.devices()) == 2, jax.devices()
B, T = 4, 8
spec = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Discrete(3))
config = ppo.PPOConfig(hidden_sizes=(16, 16), num_epochs=2, num_minibatches=4)
fns = ppo.make(config, spec, num_updates=10)
state = jax.jit(fns.init)(jax.random.PRNGKey(0))
r = np.random.default_rng(0)
terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
terminated[0, 2] = truncated[3, 5] = True
traj = Trajectory(
    obs=r.normal(size=(B, T + 1, 3)).astype(np.float32),
    action=r.integers(0, 3, (B, T)).astype(np.int32),
    reward=r.normal(size=(B, T)).astype(np.float32),
    terminated=terminated, truncated=truncated,
    final_obs=r.normal(size=(B, T, 3)).astype(np.float32),
    behaviour_logp=np.full((B, T), np.log(1 / 3), np.float32),
    policy_version=np.zeros((B, T), np.int32),
)
rng = jax.random.PRNGKey(1)

one, one_metrics = jax.jit(fns.learn)(state, traj, rng)  # one device

mesh = Mesh(np.array(jax.devices()), ("data",))
batch, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
sharded_traj = jax.device_put(traj, batch)
assert len(sharded_traj.reward.addressable_shards) == 2
assert sharded_traj.reward.addressable_shards[0].data.shape == (B // 2, T)
learn = jax.jit(fns.learn, in_shardings=(replicated, batch, replicated),
                out_shardings=(replicated, replicated))
two, two_metrics = learn(jax.device_put(state, replicated), sharded_traj, rng)
assert two.params["net"]["params"]["value_net"]["Dense_0"]["kernel"].sharding.is_fully_replicated

moved = max(float(np.abs(a - b).max()) for a, b in
            zip(jax.tree.leaves(one.params), jax.tree.leaves(state.params)))
assert moved > 1e-3, moved  # the update did something
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)
for k in one_metrics:
    np.testing.assert_allclose(one_metrics[k], two_metrics[k], atol=1e-5, rtol=1e-4,
                               err_msg=k)
print("SHARDED_MATCH_OK")
"""


def test_two_fake_devices_match_one_device():
    proc = subprocess.run([sys.executable, "-c", SNIPPET], env=fake_devices_env(2), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SHARDED_MATCH_OK" in proc.stdout, proc.stdout + proc.stderr

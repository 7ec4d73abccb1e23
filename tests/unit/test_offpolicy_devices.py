"""Off-policy learn over 2 fake CPU devices: a batch sampled from the replay (which lives
on the first device) is split across both, and SAC's update and priorities match the
single-device ones.

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
from agents import sac
from jaxsrl.core.agent import EnvSpec, ReplaySpec
from jaxsrl.parallel import devices
from jaxsrl.workers.buffer.replay import Replay

assert len(jax.devices()) == 2, jax.devices()
spec = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32),
               gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32))
fns = sac.make(sac.SACConfig(hidden_sizes=(16, 16), batch_size=8), spec, 1)
state = jax.jit(fns.init)(jax.random.PRNGKey(0))
r = np.random.default_rng(0)
N = 64
items = {"obs": r.normal(size=(N, 3)).astype(np.float32),
         "action": r.uniform(-1, 1, (N, 2)).astype(np.float32),
         "reward": r.normal(size=N).astype(np.float32),
         "discount": np.full(N, 0.99, np.float32),
         "next_obs": r.normal(size=(N, 3)).astype(np.float32),
         "policy_version": np.zeros(N, np.int32)}
replay = Replay(ReplaySpec(capacity=N, batch_size=8, prioritised=True),
                jax.tree.map(lambda x: x[0], items), device=jax.devices()[0])
replay.add(items)
batch, ids = replay.sample(jax.random.PRNGKey(3), 0.5)
rng = jax.random.PRNGKey(1)

one_state, one_metrics, one_p = jax.jit(fns.learn)(state, jax.device_get(batch), rng)
mesh = devices.local_mesh()
learn = devices.jit_replay_learn(fns.learn, mesh)
two_state, two_metrics, two_p = learn(devices.put_replicated(state, mesh),
                                      devices.put_batch(batch, mesh),
                                      devices.put_replicated(rng, mesh))
assert len(two_p.sharding.device_set) == 2
np.testing.assert_allclose(np.asarray(two_p), np.asarray(one_p), rtol=1e-4, atol=1e-5)
for a, b in zip(jax.tree.leaves(two_state), jax.tree.leaves(one_state)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
replay.set_priorities(ids, two_p)  # sharded priorities go back to the replay's device
assert replay.priority_stats()["priority_max"] > 0
print("OK")
"""


def test_replay_learn_over_two_devices_matches_one():
    out = subprocess.run([sys.executable, "-c", SNIPPET], env=fake_devices_env(2), cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]

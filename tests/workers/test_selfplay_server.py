"""An inference server serving several parameter versions of its policy in one batch
(self-play opponents), over real ZeroMQ sockets: each row gets its version's action and
carry, evicted snapshots reset the row's carry, nothing recompiles, and finished games
reach the pools."""


import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.opponents import LATEST, PoolView, draw_value
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from policy_server import served

SPACE = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
SCALE = {LATEST: 2.0, 1: 10.0, 3: 100.0}  # each version's parameter


def fake_act(params, obs, carry, rng):
    """Recurrent fake: logp = s * row sum, new carry = carry + s (s: the parameters)."""
    s = params["s"]
    return jnp.argmax(obs, axis=-1).astype(jnp.int32), carry + s, {"logp": s * obs.sum(-1)}


class FakePools:
    def __init__(self):
        p = {v: {"s": jnp.float32(SCALE[v])} for v in (1, 3)}
        self.pool = PoolView((1, 3), (p[1], p[3]), np.array([0.5, 1.0]))
        self.games: list = []

    def view(self, policy):
        assert policy == "p"
        return self.pool

    def record_games(self, games):
        self.games.extend(games)
        return len(games)


@pytest.fixture
def server():
    store, metrics, pools = ParameterStore(), MetricsAccumulator(), FakePools()
    store.publish("p", 5, {"s": jnp.float32(SCALE[LATEST])})
    act = devices.jit_act(fake_act, devices.local_mesh())
    worker = PolicyWorker("sp-server", "p", act, lambda n: jnp.zeros((n, 1), jnp.float32), SPACE,
                          store, metrics, PolicySettings(max_rows=16), opponents=pools)
    with served(worker) as sock:
        yield worker, sock, act, pools, metrics


def _ask(sock, obs, carry, opponent, meta=None):
    sock.send_multipart(wire.encode("act", {"obs": obs, "carry/0": carry, "opponent": opponent},
                                    {"actor": 0, "run": 1, "group": 0, **(meta or {})}))
    assert sock.poll(30_000), "no answer from the server"
    return wire.decode(sock.recv_multipart())


def test_two_versions_in_one_batch_each_row_its_own_without_recompiling(server):
    worker, sock, act, pools, metrics = server
    rng = np.random.default_rng(0)
    n = 6
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    carry = np.ones((n, 1), np.float32)
    _ask(sock, obs, carry, np.full(n, LATEST, np.int32))  # warm: the server compiled its buckets
    # latest, snapshot 1, snapshot 3, 1, a draw (u=0.9 -> 3), evicted 2 (-> next newer, 3)
    opponent = np.array([LATEST, 1, 3, 1, draw_value(0.9), 2], np.int32)
    compiles = []
    listener = lambda event, *a, **k: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        reply = _ask(sock, obs, carry, opponent, {"games": [{"p": [1, 1.0]}]})
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []  # parameters are an input of act: no new compilation
    served = [LATEST, 1, 3, 1, 3, 3]
    assert reply.arrays["opponent"].tolist() == served
    assert reply.meta["version"] == 5  # the latest version, as without self-play
    # Reference: act called row by row with that row's version's parameters (and the
    # evicted row's carry zeroed).
    carry_in = carry.copy()
    carry_in[5] = 0
    for r, v in enumerate(served):
        params = {"s": jnp.float32(SCALE[v])}
        a, c, extras = act(params, obs[r:r + 1], carry_in[r:r + 1], jax.random.PRNGKey(0))
        assert reply.arrays["action"][r] == int(a[0])
        np.testing.assert_allclose(reply.arrays["logp"][r], float(extras["logp"][0]), rtol=1e-6)
        np.testing.assert_allclose(reply.arrays["carry/0"][r], np.asarray(c)[0], rtol=1e-6)
    assert pools.games == [{"p": [1, 1.0]}]
    counters = metrics.snapshot(1.0)
    assert counters["selfplay/snapshot_rows/p"] == 5 and counters["selfplay/carry_resets/p"] == 1


def test_request_without_opponent_is_dropped_when_serving_pools(server):
    worker, sock, *_ , metrics = server
    sock.send_multipart(wire.encode("act", {"obs": np.zeros((2, 3), np.float32),
                                            "carry/0": np.zeros((2, 1), np.float32)},
                                    {"actor": 0, "run": 1, "group": 0}))
    reply = _ask(sock, np.eye(3, dtype=np.float32), np.zeros((3, 1), np.float32),
                 np.full(3, LATEST, np.int32))
    assert reply.arrays["opponent"].tolist() == [LATEST] * 3
    assert metrics.snapshot(1.0)["dropped_requests"] == 1

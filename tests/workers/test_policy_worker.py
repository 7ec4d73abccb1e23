"""Inference server over real ZeroMQ sockets: batching, answers, malformed requests."""

import threading
import time

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker, bucket_sizes

SPACE = gymnasium.spaces.Box(-1, 1, (3,), np.float32)


def fake_act(params, obs, carry, rng):
    """Action = index of the largest feature; logp = params * row sum (checkable)."""
    return jnp.argmax(obs, axis=-1).astype(jnp.int32), carry, {"logp": params * obs.sum(-1)}


@pytest.fixture
def server():
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 3, jnp.float32(2.0))
    worker = PolicyWorker("test-server", "p", devices.jit_act(fake_act, devices.local_mesh()),
                          lambda n: None, SPACE, store, metrics, PolicySettings(max_rows=16))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    worker.ready.wait()
    yield worker, metrics
    worker.stop.set()
    thread.join(5)


def _client(address):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _ask(sock, obs, group=0):
    sock.send_multipart(wire.encode("act", {"obs": obs}, {"actor": 0, "run": 1, "group": group}))
    assert sock.poll(20_000), "no answer from the server"
    return wire.decode(sock.recv_multipart())


def test_bucket_sizes_cover_max_rows_and_divide_by_devices():
    assert bucket_sizes(100, 1) == [8, 16, 32, 64, 100]
    assert all(b % 4 == 0 for b in bucket_sizes(30, 4)) and bucket_sizes(30, 4)[-1] >= 30


def test_answers_each_client_with_its_rows(server):
    worker, _ = server
    rng = np.random.default_rng(0)
    clients = [_client(worker.address) for _ in range(3)]
    for i, sock in enumerate(clients):
        obs = rng.standard_normal((i + 2, 3)).astype(np.float32)
        reply = _ask(sock, obs, group=i)
        assert reply.kind == "action" and reply.meta == {"group": i, "version": 3}
        np.testing.assert_array_equal(reply.arrays["action"], obs.argmax(-1))
        np.testing.assert_allclose(reply.arrays["logp"], 2.0 * obs.sum(-1), rtol=1e-6)
        sock.close()


@pytest.mark.parametrize("frames", [
    [b"garbage"],
    wire.encode("act", {"obs": np.zeros((2, 4), np.float32)}),  # wrong shape
    wire.encode("act", {"obs": np.zeros((2, 3), np.float64)}),  # wrong dtype
    wire.encode("act", {"obs": np.zeros((2, 3), np.float32), "x": np.zeros(1)}),  # unknown key
    wire.encode("act", {"obs": np.zeros((17, 3), np.float32)}),  # more rows than the server takes
    wire.encode("hello", {"obs": np.zeros((2, 3), np.float32)}),  # wrong kind
])
def test_malformed_request_is_dropped_and_server_keeps_serving(server, frames):
    worker, metrics = server
    sock = _client(worker.address)
    sock.send_multipart([bytes(f) for f in frames])
    obs = np.eye(3, dtype=np.float32)
    reply = _ask(sock, obs)
    np.testing.assert_array_equal(reply.arrays["action"], [0, 1, 2])
    assert metrics.snapshot(1.0)["dropped_requests"] == 1
    sock.close()


def test_batch_latency_percentiles_and_batch_count_go_to_the_metrics(server):
    """Each answered batch adds one latency sample (``inference/latency_ms_p50``/``_p99``
    in the interval's record) and one to the ``inference/batches`` counter."""
    worker, metrics = server
    sock = _client(worker.address)
    for g in range(5):
        _ask(sock, np.zeros((2, 3), np.float32), group=g)
    sock.close()
    deadline = time.monotonic() + 20  # the last batch is counted just after its reply
    while metrics.counter("inference/batches") < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert metrics.counter("inference/batches") == 5
    record = metrics.snapshot(1.0)
    assert 0 < record["inference/latency_ms_p50"] <= record["inference/latency_ms_p99"]
    assert "inference/latency_ms_p50" not in metrics.snapshot(1.0)  # per interval
    assert metrics.counter("inference/batches") == 5  # run-long

"""The trainer of buffer processes (jaxsrl/workers/learner/buffer_client.py) against a fake
buffer process (a ROUTER socket on inproc): it asks for batches, learns from each valid
one, sends its priorities back to the shard with the batch's run id, asks again, and
drops a malformed batch (counted) without stopping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.core.agent import ReplaySpec
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.sockets import INPROC, bind
from jaxsrl.core.agent import EnvSpec
from jaxsrl.workers.learner.buffer_client import BufferClientTrainer
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart

from test_offpolicy import ACTIONS, OBS, ROWS, T, Count, fake_agent

B = 4
WAIT_MS = 60_000  # generous bound on every wait for a message


@pytest.fixture
def setup():
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    address = bind(router, INPROC, name="fake-buffer")
    mesh = devices.local_mesh()
    fns = fake_agent(ReplaySpec(capacity=64, batch_size=B, replay_ratio=2.0, min_fill=8,
                                prioritised=True))
    metrics = MetricsAccumulator()
    trainer = BufferClientTrainer(
        "test-client", "p", devices.jit_replay_learn(fns.learn, mesh),
        lambda b: devices.put_batch(b, mesh),
        TrainerStart(devices.put_replicated(Count(jnp.int32(0)), mesh), jax.random.PRNGKey(0), 0),
        EnvSpec(OBS, ACTIONS), TrainerSettings(T, 1, max_rows=ROWS, host=INPROC), ParameterStore(),
        metrics, context=context, fns=fns, connect=lambda stop: [address])
    thread = trainer.start_thread(wait_ready=True)
    yield trainer, router, metrics
    trainer.stop.set()
    thread.join(10)
    router.close()
    context.term()


def _request(router):
    assert router.poll(WAIT_MS), "no request from the trainer"
    peer, *frames = router.recv_multipart()
    return peer, wire.decode(frames)


def test_learns_from_batches_sends_priorities_and_survives_bad_ones(setup):
    trainer, router, metrics = setup
    peer, msg = _request(router)
    assert msg.kind == replay_wire.SAMPLE and msg.meta["version"] == 0
    assert trainer.serving.wait(60)
    router.send_multipart([peer, b"not a batch"])  # malformed: dropped, not fatal
    spec = trainer.item_spec
    items = jax.tree.map(lambda s: np.zeros((B, *s.shape), s.dtype), spec)
    items["reward"] = np.full((B,), 2.0, np.float32)
    ids = np.arange(10, 10 + B, dtype=np.int32)
    router.send_multipart([peer, *replay_wire.encode_batch(
        items, np.ones(B, np.float32), ids, {"req": msg.meta["req"], "run": 5, "shard": 0})])
    seen = {}
    while set(seen) != {replay_wire.SAMPLE, replay_wire.PRIORITIES}:
        _, m = _request(router)
        if m.kind == replay_wire.SAMPLE and m.meta["req"] == msg.meta["req"]:
            continue  # the first request sent again (unanswered for RESEND_S)
        seen.setdefault(m.kind, m)
    prio = seen[replay_wire.PRIORITIES]
    assert prio.meta == {"run": 5, "version": 1}
    np.testing.assert_array_equal(prio.arrays["ids"], ids)
    np.testing.assert_allclose(prio.arrays["priorities"], 3.0)  # the fake learn: reward + 1
    assert seen[replay_wire.SAMPLE].meta["req"] != msg.meta["req"]  # the next request
    assert trainer.version == 1 and trainer.error is None
    assert metrics.counter("dropped_batches") == 1

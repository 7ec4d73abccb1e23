"""Memory under steady load: the inference server (real CartPole PPO ``act``) and the
learner's segment admission, driven for a fixed number of requests with RSS sampled per
block after warm-up; sustained linear growth beyond a generous bound fails
(:func:`jaxsrl.bench.growth.growth`). Counted in requests, not seconds, so a loaded
machine changes the duration, not the verdict. The second test injects a leak (every
request's frames kept in a module-level list) and checks that it is caught.

Each measurement runs in a fresh Python process: in a test process that has already run
other tests, memory those tests freed can absorb a leak without RSS rising, and whatever
ran before in it (under pytest-xdist, any file) would decide the verdict.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import psutil
import zmq

from jaxsrl.bench import agentfns
from jaxsrl.bench.growth import growth
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.segment import pack_final_obs, segment_schema
from jaxsrl.streams.segment_gate import SegmentGate
from jaxsrl.streams.spaces import obs_schema
from jaxsrl.workers.inference import policy
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker

ROWS, T = 16, 32  # one CartPole actor group's request; steps per segment
BLOCK = 600  # requests between RSS samples
MAX_GROWTH = 2**20  # bytes over the measured span: 175 B per request over 6,000 (the leak below: ~550)
LEAK: list = []  # the injected leak's store
HERE = os.path.dirname(os.path.abspath(__file__))


def _setup():
    cfg = load_config(["--env=CartPole-v1"])
    b = agentfns.build(cfg)
    mesh = devices.local_mesh()
    state = b.fns.init(jax.random.PRNGKey(0))
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 0, devices.put_replicated(state.params, mesh))
    table = ActorTable()
    table.register(0, 1)
    carry = CarryCodec(b.fns.initial_carry)
    schema = segment_schema(b.observation_space, b.action_space, T, carry)
    gate = SegmentGate(schema, T, ROWS, table, metrics, name="growth")
    worker = PolicyWorker("growth-server", "p", devices.jit_act(b.fns.act, mesh),
                          b.fns.initial_carry, b.observation_space, store, metrics,
                          PolicySettings(max_rows=2 * ROWS, num_devices=mesh.size), actors=table)
    thread = worker.start_thread(wait_ready=True)
    assert worker.serving.wait(300), "the server did not warm up"
    request = {k: np.zeros((ROWS,) + s.shape[1:], s.dtype)
               for k, s in (obs_schema(b.observation_space) | carry.schema()).items()}
    segment = pack_final_obs({k: np.zeros((ROWS,) + tuple(s.shape[1:]), s.dtype)
                              for k, s in schema.items()})
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker.address)
    return (worker, gate, sock, request, segment), thread


def _drive(setup, blocks: int, warmup_blocks: int) -> dict:
    """``blocks`` blocks of :data:`BLOCK` requests (two groups in flight, like an actor's
    ring; a segment through the gate every ``T`` replies of a group, each message encoded
    afresh); the growth verdict over the blocks after ``warmup_blocks``."""
    worker, gate, sock, request, segment = setup
    me = psutil.Process()
    events, rss, replies = [], [], 0
    for g in (0, 1):
        sock.send_multipart(wire.encode("act", request, {"actor": 0, "run": 1, "group": g}))
    for block in range(blocks):
        for _ in range(BLOCK):
            assert sock.poll(60_000), "no reply from the server in 60 s"
            g = wire.decode(sock.recv_multipart()).meta["group"]
            replies += 1
            sock.send_multipart(wire.encode("act", request, {"actor": 0, "run": 1, "group": g}))
            if replies % T == 0:
                frames = wire.encode("segment", segment, {"actor": 0, "run": 1,
                                                          "env_steps": ROWS * T, "episodes": []})
                assert gate.admit(frames) is not None, gate.drops.recent()
        worker.raise_error()
        if block >= warmup_blocks:
            events.append(replies)
            rss.append(me.memory_info().rss)
    for _ in (0, 1):  # the two requests still in flight
        assert sock.poll(60_000)
        sock.recv_multipart()
    return growth(events, rss, MAX_GROWTH)


def _measure(leak: bool, blocks: int, warmup_blocks: int) -> dict:
    """Build the server and the gate, drive them (with the injected leak if ``leak``: a
    reference to every request's frames kept), stop them; the growth verdict."""
    setup, thread = _setup()
    own_recv = policy.recv_routed  # the serving loop's receive, called once per request

    def leaky_recv(sock, *flags):
        frames = own_recv(sock, *flags)
        LEAK.append([bytes(f) for f in frames])
        return frames

    if leak:
        policy.recv_routed = leaky_recv
    try:
        return _drive(setup, blocks, warmup_blocks)
    finally:
        policy.recv_routed = own_recv
        worker, sock = setup[0], setup[2]
        sock.close()
        worker.stop.set()
        thread.join(30)


def _in_fresh_process(*args) -> dict:
    """:func:`_measure` in a new interpreter (a plain subprocess: multiprocessing's spawn
    would leave its resource tracker behind as a child of the test process)."""
    code = ("import json, sys, test_memory_growth as t; "
            f"print(json.dumps(t._measure(*{args!r}), default=lambda x: x.item()))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, *sys.path]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_server_and_sample_gate_hold_memory_steady():
    verdict = _in_fresh_process(False, 14, 4)
    assert not verdict["sustained"], verdict


def test_an_injected_leak_per_request_is_caught():
    verdict = _in_fresh_process(True, 12, 2)
    assert verdict["sustained"], verdict
    assert verdict["bytes_per_event"] > 200, verdict

"""What stopped one server from taking thousands of actors (the fan-in rung,
``jaxsrl/bench/fan_in.py``): the server's table of remembered request verdicts was capped
at 4,096 headers (one per actor group), so 4,000 actors of a ring of 2 emptied it over and
over and every request was checked in full; and a soft open-file limit of 1,024 (a common
default) caps a process at about 500 actors (two connections each)."""

import json
import resource
import subprocess
import sys

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.core.limits import raise_fd_limit
from jaxsrl.core.paths import child_env
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.sockets import LISTEN_BACKLOG, bind
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from policy_server import served

SPACE = gymnasium.spaces.Box(-1, 1, (3,), np.float32)


def _act(params, obs, carry, rng):
    return jnp.zeros(obs.shape[:1], jnp.int32), carry, {"logp": jnp.zeros(obs.shape[:1])}


def test_server_remembers_a_verdict_for_every_actor_group():
    actors = 5000  # more actor groups than the old fixed cap of 4,096
    store = ParameterStore()
    store.publish("p", 0, jnp.float32(0.0))
    worker = PolicyWorker("fan-in", "p", devices.jit_act(_act, devices.local_mesh()),
                          lambda n: None, SPACE, store, MetricsAccumulator(),
                          PolicySettings(max_rows=actors))
    with served(worker) as sock:
        obs = {"obs": np.zeros((1, 3), np.float32)}
        for start in range(0, actors, 500):
            for a in range(start, start + 500):
                sock.send_multipart(wire.encode("act", obs, {"actor": a, "run": 1, "group": 0}))
            for _ in range(500):
                assert sock.poll(60_000), "no reply from the server"
                sock.recv_multipart()
        assert len(worker._admitted) == actors  # old code: 5000 - 4096 = 904 (emptied once)


def _restore(limits):
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


@pytest.fixture
def nofile():
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limits[1] == resource.RLIM_INFINITY or limits[1] <= 256:
        pytest.skip(f"hard RLIMIT_NOFILE {limits[1]}: nothing to raise to")
    yield limits
    _restore(limits)


def test_raise_fd_limit_lifts_the_soft_limit_to_the_hard_one(nofile):
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, nofile[1]))
    assert raise_fd_limit() == (nofile[1], nofile[1])
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (nofile[1], nofile[1])


def test_every_worker_process_raises_its_fd_limit(nofile):
    code = ("import json, resource, sys; from jaxsrl.core.child import start_child; "
            "start_child([json.dumps({})], lambda s: 'w'); "
            "print(json.dumps(resource.getrlimit(resource.RLIMIT_NOFILE)))")
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True,
        timeout=120, check=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, nofile[1])))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [nofile[1], nofile[1]]


def test_bound_sockets_queue_thousands_of_connections():
    # ZeroMQ's default backlog of 100 made 4,000 actors connecting at once wait ~30 s
    # (dropped SYNs retried with TCP's back-off) in the fan-in rung
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    try:
        bind(sock, "127.0.0.1")
        assert sock.getsockopt(zmq.BACKLOG) == LISTEN_BACKLOG >= 4096
    finally:
        sock.close(0)

"""Security: loopback binding by default, nothing unpickled, optional CURVE streams."""

from __future__ import annotations

import os
import pickle
import re
import threading

import numpy as np
import psutil
import pytest
import zmq

from jaxsrl.streams import security
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train
from test_faults_helpers import (REPO_ROOT, Servers, actor_children, ask, client, request,
                                 segment, small_args, wait_for)

needs_curve = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


def _listening(port: int) -> list:
    return [c.laddr.ip for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def test_servers_bind_loopback_unless_told_otherwise():
    assert load_config([]).host == "127.0.0.1"
    s = Servers()
    try:
        for w in (s.policy, s.trainer):
            assert w.address.startswith("tcp://127.0.0.1:")
            assert _listening(int(w.address.rsplit(":", 1)[1])) == ["127.0.0.1"]
    finally:
        s.close()


def test_explicit_host_is_used_and_local_clients_connect_over_loopback():
    from test_faults_helpers import fake_act, OBS
    from jaxsrl.parallel import devices
    from jaxsrl.experiment.metrics import MetricsAccumulator
    from jaxsrl.streams.params import ParameterStore
    from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
    store = ParameterStore()
    store.publish("p", 0, np.float32(1.0))
    w = PolicyWorker("any-host", "p", devices.jit_act(fake_act, devices.local_mesh()),
                     lambda n: None, OBS, store, MetricsAccumulator(),
                     PolicySettings(max_rows=8, host="0.0.0.0"))
    th = threading.Thread(target=w.run, daemon=True)
    th.start()
    try:
        w.ready.wait()
        assert w.address.startswith("tcp://127.0.0.1:")
        assert _listening(int(w.address.rsplit(":", 1)[1])) == ["0.0.0.0"]
        sock = client(w.address)
        assert ask(sock, request()).kind == "action"
        sock.close()
    finally:
        w.stop.set()
        th.join(10)


def test_runtime_never_unpickles():
    pattern = re.compile(r"\bpickle\b|recv_pyobj|recv_serialized|allow_pickle\s*=\s*True|"
                         r"\bmarshal\b|cloudpickle|\bdill\b|\beval\(|\bexec\(")
    offenders = []
    for root, _, files in os.walk(os.path.join(REPO_ROOT, "jaxsrl")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as f:
                    for i, line in enumerate(f, 1):
                        if pattern.search(line.split("#")[0]):
                            offenders.append(f"{path}:{i}: {line.strip()}")
    assert offenders == []


class _Exploit:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # would create a file if anything unpickled it
        return (open, (self.path, "w"))


def test_pickled_payloads_are_dropped_not_executed(tmp_path):
    marker = str(tmp_path / "pwned")
    payload = pickle.dumps(_Exploit(marker))
    s = Servers()
    try:
        req = client(s.policy.address)
        req.send_multipart([payload])
        req.send_multipart([request()[0], payload])
        push = client(s.trainer.address, zmq.PUSH)
        push.send_multipart([payload])
        push.send_multipart([segment()[0], payload])
        wait_for(lambda: s.counter("dropped_requests") == 2 and s.counter("dropped_segments") == 2,
                 20, "the drops")
        assert not os.path.exists(marker)
        req.close()
        push.close()
    finally:
        s.close()


@pytest.fixture
def curve_servers():
    ctx = zmq.Context()
    server_public, server_secret = zmq.curve_keypair()
    allowed = zmq.curve_keypair()
    auth = security.start_authenticator(ctx, {allowed[0]})
    s = Servers(curve=(server_public, server_secret), context=ctx)
    yield s, server_public, allowed
    s.close()
    auth.stop()
    ctx.destroy(linger=0)


def _curve_client(address, kind, server_public, keypair):
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if keypair is not None:
        security.make_client(sock, server_public, *keypair)
    sock.connect(address)
    return sock


@needs_curve
@pytest.mark.parametrize("who", ["plaintext", "unknown keypair", "wrong server key"])
def test_curve_refuses_clients_without_the_right_keys(curve_servers, who):
    s, server_public, _ = curve_servers
    keypair = None if who == "plaintext" else zmq.curve_keypair()
    server_key = zmq.curve_keypair()[0] if who == "wrong server key" else server_public
    sock = _curve_client(s.policy.address, zmq.DEALER, server_key, keypair)
    sock.setsockopt(zmq.SNDTIMEO, 1000)  # a refused handshake can leave DEALER no pipe to queue on
    try:
        sock.send_multipart(request())
    except zmq.Again:
        pass
    assert not sock.poll(1500), "the server answered a client it should refuse"
    push = _curve_client(s.trainer.address, zmq.PUSH, server_key, keypair)
    push.setsockopt(zmq.SNDTIMEO, 1000)
    for _ in range(2):
        try:
            push.send_multipart(segment())
        except zmq.Again:
            pass
    sock.close()
    push.close()
    # Nothing reached the servers: not even as a dropped message.
    assert s.counter("dropped_requests") == 0 and s.counter("dropped_segments") == 0
    assert s.metrics.env_steps == 0 and s.store.get("p").version == 0


@needs_curve
def test_curve_admits_the_run_keys(curve_servers):
    s, server_public, allowed = curve_servers
    sock = _curve_client(s.policy.address, zmq.DEALER, server_public, allowed)
    reply = ask(sock, request())
    np.testing.assert_array_equal(reply.arrays["action"], [0, 1, 2])
    push = _curve_client(s.trainer.address, zmq.PUSH, server_public, allowed)
    for _ in range(2):
        push.send_multipart(segment())
    wait_for(lambda: s.store.get("p").version == 1, 20, "an update")
    sock.close()
    push.close()


@needs_curve
def test_training_with_curve_end_to_end(tmp_path, monkeypatch):
    generated = {}
    original = security.CurveKeys.generate.__func__

    def spy(cls, actor_ids):
        generated["keys"] = original(cls, actor_ids)
        return generated["keys"]

    monkeypatch.setattr(security.CurveKeys, "generate", classmethod(spy))
    seen = {}

    def watch():  # the actors' command lines hold the server's public key, no secret
        procs = wait_for(actor_children, 60, "actors")
        seen["cmdlines"] = [" ".join(p.cmdline()) for p in procs]

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    cfg = load_config(small_args(str(tmp_path / "run"), "--total_env_steps=3000", "--curve"))
    record = train(cfg)
    th.join(10)
    assert record["env_steps"] >= 3000 and record["policy_version"] >= 2
    keys = generated["keys"]
    for cmdline in seen["cmdlines"]:
        assert keys.server_public.decode() in cmdline
        assert keys.server_secret.decode() not in cmdline
        assert not any(sec.decode() in cmdline for _, sec in keys.clients.values())
    assert record.get("dropped_requests", 0) == 0 and record.get("dropped_segments", 0) == 0

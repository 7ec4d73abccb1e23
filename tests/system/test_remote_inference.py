"""Remote inference servers: the parameter stream, actor-to-server topology, actor
failover, and end-to-end runs with servers in their own processes (one killed mid-run)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import zmq

from jaxsrl.streams import param_stream as ps
from jaxsrl.streams import wire
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import ComponentDied, train
from jaxsrl.streams.params import ParameterStore
from jaxsrl.launch.topology import Assigner, server_order
from jaxsrl.core import exit_codes

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16",
         "--remote_inference", "--inference_servers=2"]


def _tree(rng: np.random.Generator, rows: int = 600) -> dict:
    return {"params": {"dense": {"kernel": rng.standard_normal((rows, 700)).astype(np.float32),
                                 "bias": np.arange(700, dtype=np.float32)},
                       "count": np.int32(3), "mask": rng.random(13) > 0.5}}


def _same(a, b) -> bool:
    import jax
    return all(jax.tree.leaves(jax.tree.map(
        lambda x, y: np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y), a, b)))


def _subscriber(template, store=None, **kwargs):
    return ps.ParamSubscriber("tcp://127.0.0.1:1", "p", template, store or ParameterStore(),
                              put=lambda tree: tree, **kwargs)


# -- parameter stream ------------------------------------------------------------------
def test_large_tree_in_chunks_reassembles_exactly_in_any_order():
    tree = _tree(np.random.default_rng(0))  # ~1.7 MB: 4 chunks of 512 KiB
    messages = ps.encode_chunks("p", 5, tree, stream=1, chunk_bytes=1 << 19)
    assert len(messages) == 4
    random.Random(0).shuffle(messages)
    sub = _subscriber(tree)
    taken = [sub.handle(m) for m in messages]
    assert taken == [False, False, False, True]  # published only with the last chunk
    assert sub.store.get("p").version == 5 and _same(sub.store.get("p").params, tree)
    assert sub.handle(messages[0]) is False and not sub.dropped  # a re-send: ignored quietly


def test_missing_chunk_wrong_shape_garbage_and_old_versions_are_dropped():
    rng = np.random.default_rng(1)
    tree = _tree(rng)
    sub = _subscriber(tree)
    v1 = ps.encode_chunks("p", 1, tree, stream=1, chunk_bytes=1 << 19)
    for m in v1[:-1]:  # the last chunk never comes
        assert not sub.handle(m)
    with pytest.raises(KeyError):
        sub.store.get("p")
    newer = _tree(rng)
    for m in ps.encode_chunks("p", 3, newer, stream=1, chunk_bytes=1 << 19):
        sub.handle(m)
    assert sub.store.get("p").version == 3 and _same(sub.store.get("p").params, newer)
    assert sub.dropped["incomplete"] == 1  # version 1 was superseded while incomplete

    # Same byte count, other shapes: caught leaf by leaf.
    flipped = {"params": {**tree["params"], "dense": {"kernel": tree["params"]["dense"]["kernel"].reshape(700, 600),
                                                      "bias": tree["params"]["dense"]["bias"]}}}
    for m in ps.encode_chunks("p", 4, flipped, stream=1):
        sub.handle(m)
    smaller = _tree(rng, rows=5)
    for m in ps.encode_chunks("p", 5, smaller, stream=1):
        sub.handle(m)
    assert sub.dropped["mismatch"] == 2
    # An older version than the one served.
    for m in ps.encode_chunks("p", 2, newer, stream=1):
        sub.handle(m)
    assert sub.dropped["old_version"] >= 1
    # A corrupted byte: the checksum catches it.
    corrupt = ps.encode_chunks("p", 6, newer, stream=1)
    data = bytearray(corrupt[-1][-1])
    data[7] ^= 0xFF
    corrupt[-1][-1] = bytes(data)
    for m in corrupt:
        sub.handle(m)
    assert sub.dropped["checksum"] == 1
    # Garbage: not msgpack, wrong kind, wrong topic, lying meta, too few frames.
    good = ps.encode_chunks("p", 7, newer, stream=1)[0]
    header = wire.encode("param_chunk", {"data": np.zeros(4, np.uint8)},
                         {"policy": "p", "version": 9, "stream": 1, "chunk": 0, "chunks": 10**9,
                          "chunk_bytes": 1, "nbytes": 10, "crc32": 0})
    for frames in ([b"params/p\0", b"\x93garbage"], [b"x"], [b"params/q\0"] + good[1:],
                   [good[0]] + wire.encode("act", {}, {}), [good[0]] + header,
                   [good[0], os.urandom(64), os.urandom(8)]):
        assert sub.handle(frames) is False
    assert sub.dropped["malformed"] >= 5 and sub.dropped["mismatch"] == 3
    assert sub.store.get("p").version == 3  # nothing bad was ever published


def test_late_subscriber_gets_the_newest_version_and_the_actor_table():
    ctx = zmq.Context()
    store = ParameterStore()
    rng = np.random.default_rng(2)
    store.publish("p", 7, _tree(rng))
    runs = {0: 11, 1: 12}
    pub = ps.ParamPublisher(store, ["p"], ctx, resend_s=0.3, chunk_bytes=1 << 19,
                            actor_runs=lambda: dict(runs))
    try:
        address = pub.start()
        deadline = time.monotonic() + 10
        while "p" not in pub.sent and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.sent["p"][0] == 7  # sent before the subscriber existed
        local, heard = ParameterStore(), []
        sub = ps.ParamSubscriber(address, "p", _tree(rng), local, put=lambda t: t, context=ctx,
                                 on_actor_runs=heard.append)
        sub.start()
        try:
            assert local.wait_for("p", timeout=10).version == 7  # from a periodic re-send
            assert _same(local.get("p").params, store.get("p").params)
            newer = _tree(rng)
            store.publish("p", 8, newer)
            runs[2] = 13
            deadline = time.monotonic() + 10
            while local.get("p").version != 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert local.get("p").version == 8 and _same(local.get("p").params, newer)
            while (not heard or heard[-1] != {0: 11, 1: 12, 2: 13}) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert heard[-1] == {0: 11, 1: 12, 2: 13}
            assert not sub.dropped and sub.error is None
        finally:
            sub.close()
    finally:
        pub.close()
        ctx.destroy(linger=0)
    assert pub.error is None


# -- topology --------------------------------------------------------------------------
def test_actors_are_balanced_over_servers_and_a_dead_servers_actors_spread():
    orders = [server_order(k, 3, fallbacks=True) for k in range(12)]
    assert [o[0] for o in orders] == [k % 3 for k in range(12)]
    assert all(sorted(o) == [0, 1, 2] for o in orders)
    # The actors of server 0 move to servers 1 and 2 alike when it dies.
    assert sorted(o[1] for o in orders if o[0] == 0) == [1, 1, 2, 2]
    assert server_order(4, 3, fallbacks=False) == [1]
    assign = Assigner({"inf": ["a", "b"]}, fallbacks=True)
    assert [assign.next("inf") for _ in range(2)] == [
        {"inference_address": "a", "inference_addresses": ["a", "b"]},
        {"inference_address": "b", "inference_addresses": ["b", "a"]}]
    assert Assigner({"inf": ["a"]}, fallbacks=True).next("inf") == {"inference_address": "a"}


@pytest.mark.parametrize("extra, message", [
    (["--inference_servers=0"], "inference_servers=0 must be positive"),
    (["--inference_failover_s=30"], "inference_failover_s=30.0 must be below actor_timeout_s"),
    (["--max_server_restarts=-1"], "max_server_restarts=-1 must be >= 0"),
])
def test_bad_topology_config_is_refused(extra, message):
    with pytest.raises(ValueError, match=message):
        load_config(SMALL + extra)


def test_launch_prefix_of_a_local_server_is_refused(tmp_path):
    toml = tmp_path / "graph.toml"
    toml.write_text("""
[dataflow]
actors = [{name = "a", count = 1, inference_stream = "inf", sample_stream = "smp"}]
policy_workers = [
  {name = "s", inference_stream = "inf", policy = "p", count = 2, launch_prefix = ["ip", "netns", "exec", "h1"]},
]
trainers = [{name = "t", sample_stream = "smp", policy = "p"}]
""")
    with pytest.raises(ValueError, match="the launch_prefix of policy worker 's' needs --inference=process"):
        load_config([f"--config={toml}"])
    with pytest.raises(ValueError, match="--inference_servers=2 does not work with a \\[dataflow\\] table"):
        load_config([f"--config={toml}", "--remote_inference", "--inference_servers=2"])
    assert load_config([f"--config={toml}", "--remote_inference"]).get_dataflow().policy_workers[0].count == 2


# -- actor failover --------------------------------------------------------------------
class _Router:
    """A ROUTER that answers ``act`` requests with zeros (``answer=False``: never)."""

    def __init__(self, answer: bool):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.address = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.answer, self.requests = answer, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            identity, *body = self.sock.recv_multipart()
            msg = wire.decode(body)
            if msg.kind != "act":
                continue
            self.requests += 1
            if self.answer:
                n = len(msg.arrays["obs"])
                self.sock.send_multipart([identity] + wire.encode(
                    "action", {"action": np.zeros(n, np.int64), "logp": np.zeros(n, np.float32)},
                    {"group": msg.meta["group"], "version": 0}))

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close(0)


def _actor(addresses: list, samples: str, **extra) -> subprocess.Popen:
    spec = {"actor_id": 0, "run_id": 1, "env": "CartPole-v1", "env_kwargs": {},
            "envs_per_group": 2, "ring_size": 2, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": addresses[0],
                         "inference_addresses": addresses, "sample_address": samples}],
            "carry_spec": [], "timeout_s": 2.0, "failover_s": 0.5, **extra}
    return subprocess.Popen([sys.executable, "-m", "jaxsrl.workers.actor", json.dumps(spec)],
                            env=dict(os.environ, PYTHONPATH=REPO_ROOT), stderr=subprocess.PIPE,
                            text=True)


def test_actor_fails_over_to_the_next_server_and_counts_it():
    dead, alive = _Router(answer=False), _Router(answer=True)
    samples = zmq.Context.instance().socket(zmq.PULL)
    address = f"tcp://127.0.0.1:{samples.bind_to_random_port('tcp://127.0.0.1')}"
    proc = _actor([dead.address, alive.address], address)
    try:
        failovers = 0
        for _ in range(6):  # segments keep coming from the second server's answers
            assert samples.poll(30_000), "no segment from the actor"
            msg = wire.decode(samples.recv_multipart())
            failovers += msg.meta["failovers"]
        assert failovers == 1 and dead.requests == 2 and alive.requests >= 6
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
        for s in (dead, alive):
            s.close()
        samples.close(0)
    assert proc.returncode == 0, err
    assert f"failing over to {alive.address} (re-sent 2 request(s))" in err


def test_actor_exits_only_when_every_server_failed():
    a, b = _Router(answer=False), _Router(answer=False)
    try:
        t0 = time.monotonic()
        proc = _actor([a.address, b.address], "tcp://127.0.0.1:1", startup_timeout_s=2.0)
        err = proc.communicate(timeout=60)[1]
        took = time.monotonic() - t0
    finally:
        a.close()
        b.close()
    assert proc.returncode == exit_codes.EXIT_SERVER_TIMEOUT, err
    assert f"inference servers at {a.address}, {b.address} did not answer within 2.0 s" in err
    assert a.requests >= 4 and b.requests >= 2  # both tried (2 ring groups each time)
    assert took < 30


# -- end to end ------------------------------------------------------------------------
def _records(logdir):
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _servers() -> list:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "jaxsrl.workers.inference" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:  # exited meanwhile
            pass
    return out


def test_cartpole_with_two_remote_servers_over_curve(tmp_path):
    logdir = str(tmp_path / "run")
    record = train(load_config(SMALL + ["--total_env_steps=4000", f"--logdir={logdir}", "--curve"]))
    assert record["env_steps"] >= 4000 and record["policy_version"] >= 3
    records = [r for r in _records(logdir) if not r.get("final")]
    for name in ("policy_0", "policy_1"):  # both servers served and reported their lag
        lags = [r[f"param_lag/{name}"] for r in records if f"param_lag/{name}" in r]
        assert lags and all(0 <= lag <= record["policy_version"] for lag in lags)
    assert any(r.get("inference/batch_rows", 0) > 0 for r in records)
    assert "server_restarts" not in record
    assert "dropped_status" not in record  # every server_status passed its schema
    assert psutil.Process().children(recursive=True) == []  # servers and actors stopped


def test_training_goes_on_when_a_remote_server_is_killed(tmp_path):
    # No step budget to race against: the run goes on until this test has seen samples
    # flow after the kill (however loaded the machine), then it is stopped with SIGINT.
    logdir = str(tmp_path / "run")
    cfg = load_config(SMALL + ["--total_env_steps=100000000", f"--logdir={logdir}",
                               "--inference_failover_s=1", "--actor_timeout_s=20"])
    seen: dict = {}

    def kill_one_then_stop_the_run():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                records = _records(logdir)
            except (OSError, ValueError):
                continue
            steps = max((r["env_steps"] for r in records), default=0)
            if "pid" not in seen:
                servers = _servers()
                if steps >= 2000 and len(servers) == 2:
                    seen["steps"], seen["pid"] = steps, servers[0].pid
                    os.kill(servers[0].pid, signal.SIGKILL)
                continue
            after = [r["env_steps"] for r in records if r["env_steps"] > seen["steps"]
                     and r.get("server_restarts", 0) >= 1 and r.get("inference_failovers", 0) >= 1]
            if len(after) >= 2 and after == sorted(after) and after[-1] > after[0]:
                # The replacement and the actors' failover are counted; samples kept flowing.
                seen["recovered"] = True
                break
        os.kill(os.getpid(), signal.SIGINT)  # train() stops cleanly and re-raises it

    watcher = threading.Thread(target=kill_one_then_stop_the_run, daemon=True)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    watcher.join(5)
    assert seen.get("pid"), "no server was killed"
    assert seen.get("recovered"), "samples did not flow after the kill within 300 s"
    closing = _records(logdir)[-1]
    assert closing.get("final") and closing.get("server_restarts") == 1, closing
    assert closing.get("inference_failovers", 0) >= 1, closing
    assert psutil.Process().children(recursive=True) == []


def test_a_server_that_keeps_dying_stops_the_run_naming_it(tmp_path):
    logdir = str(tmp_path / "run")
    cfg = load_config(SMALL + ["--total_env_steps=100000000", f"--logdir={logdir}",
                               "--max_server_restarts=0"])

    def kill_one():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                steps = max((r["env_steps"] for r in _records(logdir)), default=0)
            except (OSError, ValueError):
                continue
            servers = _servers()
            if steps > 0 and len(servers) == 2:
                os.kill(servers[-1].pid, signal.SIGKILL)
                return

    threading.Thread(target=kill_one, daemon=True).start()
    with pytest.raises(ComponentDied, match=r"inference server policy\[\d\] \(pid \d+\) killed by "
                       r"SIGKILL.*max_server_restarts=0\), giving up"):
        train(cfg)
    assert psutil.Process().children(recursive=True) == []


def test_server_on_another_ray_node_binds_its_own_address(monkeypatch):
    from jaxsrl.workers.inference.server import bind_host
    monkeypatch.setenv("JAXSRL_NODE_IP", "10.9.0.7")
    assert bind_host("10.9.0.1") == "10.9.0.7"  # the learner's address is not on this node
    assert bind_host("127.0.0.1") == "127.0.0.1"  # one-node runs stay on loopback
    assert bind_host("0.0.0.0") == "0.0.0.0"
    monkeypatch.delenv("JAXSRL_NODE_IP")
    assert bind_host("10.9.0.1") == "10.9.0.1"


def test_remote_servers_report_liveness_by_address():
    """The launcher asks this to tell a cut-off actor host from a dead remote server."""
    from jaxsrl.launch.remote_inference import RemoteInferenceServers, RemoteServer
    sup = RemoteInferenceServers.__new__(RemoteInferenceServers)
    sup.servers = [RemoteServer("p[0]", "default", "inference", None, address="tcp://a:1",
                                serving=True, heartbeat=5.0),
                   RemoteServer("p[1]", "default", "inference", None, address="tcp://b:2",
                                serving=False, heartbeat=1.0)]
    assert sup.liveness({"tcp://a:1"}) == [(True, 5.0)]
    assert sorted(sup.liveness({"tcp://a:1", "tcp://b:2", "tcp://c:3"})) == [(False, 1.0), (True, 5.0)]
    assert sup.liveness({"tcp://c:3"}) == []

"""The shared plumbing of workers and streams: the socket helper, the Worker lifecycle,
sampled metrics, the run folder's layout, env_info, the actor's spec, building an
agent from names, and an actor stopped through its Worker interface."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest
import zmq

import jaxsrl
from jaxsrl.core.worker import Worker
from jaxsrl.experiment.metrics import MAX_SAMPLES, MetricsAccumulator
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.streams import security, wire
from jaxsrl.streams.sockets import bind, open_socket
from jaxsrl.workers.actor.spec import ActorSpec, StreamSpec


# -- sockets -----------------------------------------------------------------------------
def test_open_socket_sets_the_options_asked_for():
    sock = open_socket(None, zmq.PUSH, linger_ms=1000, send_hwm=2, recv_hwm=5,
                       max_frame_bytes=4096)
    try:
        assert sock.getsockopt(zmq.LINGER) == 1000
        assert sock.getsockopt(zmq.SNDHWM) == 2 and sock.getsockopt(zmq.RCVHWM) == 5
        assert sock.getsockopt(zmq.MAXMSGSIZE) == 4096
    finally:
        sock.close()
    sock = open_socket(None, zmq.SUB, subscribe=[b"a\0"])
    try:
        assert sock.getsockopt(zmq.LINGER) == 0  # the default: close drops queued messages
    finally:
        sock.close()


def test_bind_returns_the_address_clients_connect_to_and_messages_flow():
    server = open_socket(None, zmq.PULL)
    client = open_socket(None, zmq.PUSH)
    try:
        address = bind(server, "0.0.0.0")
        assert address.startswith("tcp://127.0.0.1:")  # 0.0.0.0 -> loopback for clients
        client.connect(address)
        client.send_multipart(wire.encode("x", {"a": np.arange(3)}))
        assert server.poll(20_000)
        np.testing.assert_array_equal(wire.decode(server.recv_multipart()).arrays["a"], np.arange(3))
    finally:
        client.close()
        server.close()


def test_a_socket_is_not_both_a_curve_server_and_client():
    with pytest.raises(ValueError, match="not both"):
        open_socket(None, zmq.PUSH, curve_server=(b"p", b"s"), curve_client=(b"sp", b"p", b"s"))


@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")
def test_curve_client_and_server_through_the_helper():
    server_public, server_secret = zmq.curve_keypair()
    public, secret = zmq.curve_keypair()
    server = open_socket(None, zmq.PULL, curve_server=(server_public, server_secret))
    client = open_socket(None, zmq.PUSH, curve_client=(server_public.decode(), public, secret))
    try:
        assert server.getsockopt(zmq.CURVE_SERVER) == 1
        client.connect(bind(server, security.LOOPBACK))
        client.send(b"hello")
        assert server.poll(20_000) and server.recv() == b"hello"
    finally:
        client.close()
        server.close()


# -- Worker ------------------------------------------------------------------------------
class _Failing(Worker):
    def _run(self, message: str) -> None:
        self.ready.set()
        raise RuntimeError(message)


class _Looping(Worker):
    def _run(self) -> None:
        self.ready.set()
        self.start_serving()
        while not self.stop.wait(0.01):
            self.beat()


def test_worker_keeps_the_error_that_ended_its_loop():
    w = _Failing("failing")
    with pytest.raises(RuntimeError, match="boom"):
        w.run("boom")
    assert isinstance(w.error, RuntimeError) and w.ready.is_set()
    with pytest.raises(RuntimeError, match="failing failed: RuntimeError"):
        w.raise_error()


def test_worker_without_reraise_only_keeps_the_error():
    class Quiet(_Failing):
        reraise = False

    w = Quiet("quiet")
    w.run("kept")
    assert str(w.error) == "kept"


def test_worker_lifecycle_in_a_thread():
    w = _Looping("looping")
    assert w.address is None and not w.serving.is_set()
    thread = w.start_thread(wait_ready=True)
    assert w.serving.wait(20) and w.error is None
    w.stop.set()
    thread.join(20)
    assert not thread.is_alive() and w.error is None
    w.raise_error()  # nothing to raise


# -- metrics -----------------------------------------------------------------------------
def test_samples_give_percentiles_per_interval_and_counters_are_run_long():
    m = MetricsAccumulator()
    for v in range(1, 101):
        m.add_sample("lat_ms", float(v))
    m.count("batches", 3)
    assert m.counter("batches") == 3 and m.counter("never") == 0
    record = m.snapshot(1.0)
    assert record["lat_ms_p50"] == pytest.approx(np.percentile(np.arange(1, 101), 50))
    assert record["lat_ms_p99"] == pytest.approx(np.percentile(np.arange(1, 101), 99))
    assert record["batches"] == 3
    second = m.snapshot(1.0)
    assert "lat_ms_p50" not in second and second["batches"] == 3


def test_samples_beyond_the_cap_are_a_uniform_reservoir():
    m = MetricsAccumulator()
    for v in range(4 * MAX_SAMPLES):  # uniform on [0, 4 MAX_SAMPLES)
        m.add_sample("x", float(v))
    record = m.snapshot(1.0)
    assert record["x_p50"] == pytest.approx(2 * MAX_SAMPLES, rel=0.05)


# -- the run folder ----------------------------------------------------------------------
def test_run_dir_layout_config_and_metrics(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    assert not run.has_checkpoint() and run.config_or_empty() == {}
    with pytest.raises(FileNotFoundError, match="no run config"):
        run.read_config()
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        run.read_metrics()
    run.write_config({"agent": "ppo"})
    assert run.read_config() == {"jaxsrl": {"format": 1, "version": jaxsrl.__version__},
                                 "agent": "ppo"}  # marked as jaxsrl's (run_dir.holds_run)
    assert run.config_path == os.path.join(run.path, "config.json")
    assert run.error_file("actor3") == os.path.join(run.path, "errors", "actor3.txt")
    with open(run.metrics_path, "w") as f:
        f.write(json.dumps({"env_steps": 1}) + "\n" + json.dumps({"final": True}) + "\n{\"trunc")
    assert run.read_metrics() == [{"env_steps": 1}, {"final": True}]
    assert run.read_metrics(final=False) == [{"env_steps": 1}]
    os.makedirs(os.path.join(run.checkpoint_dir("p"), "12"))
    assert run.has_checkpoint()
    assert RunDir.of_checkpoint(os.path.join(run.checkpoint_dir("p"), "12"))[1:] == ("p", 12)
    found, policy, step = RunDir.of_checkpoint(run.checkpoint_dir("p"))
    assert (os.path.abspath(found.path), policy, step) == (os.path.abspath(run.path), "p", None)


def test_run_dir_refuses_a_config_that_is_not_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        RunDir(str(tmp_path)).read_config()


# -- env_info ----------------------------------------------------------------------------
def test_env_info_builds_one_environment_and_closes_it(tmp_path, monkeypatch):
    module = tmp_path / "closing_game.py"
    module.write_text(textwrap.dedent('''
        import gymnasium
        import numpy as np

        EVENTS = []

        class Game:
            possible_agents = ["a", "b", "c"]

            def __init__(self):
                EVENTS.append("made")

            def observation_space(self, agent):
                return gymnasium.spaces.Box(-1, 1, (2,), np.float32)

            def action_space(self, agent):
                return gymnasium.spaces.Discrete(3)

            def team_of(self, agent):
                return "x" if agent == "a" else "y"

            def close(self):
                EVENTS.append("closed")

        def make_game():
            return Game()
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    from jaxsrl.envs import env_info  # noqa: PLC0415

    info = env_info("closing_game:make_game")
    events = sys.modules["closing_game"].EVENTS
    assert events == ["made", "closed"]
    assert info.teams == ["x", "y", "y"] and info.rows_of(None) == 3 and info.rows_of("y") == 2
    assert info.observation_space.shape == (2,) and info.action_space.n == 3


def test_env_info_of_a_gymnasium_env():
    from jaxsrl.envs import env_info  # noqa: PLC0415

    info = env_info("CartPole-v1")
    assert info.teams == [None] and info.rows_of(None) == 1
    assert info.observation_space.shape == (4,) and info.action_space.n == 2


# -- the actor's spec --------------------------------------------------------------------
def _spec(**extra) -> dict:
    return {"actor_id": 3, "run_id": 7, "env": "CartPole-v1", "envs_per_group": 2,
            "ring_size": 1, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": "tcp://127.0.0.1:1",
                         "sample_address": "tcp://127.0.0.1:2"}], **extra}


def test_actor_spec_defaults_and_round_trip():
    spec = ActorSpec.from_dict(_spec(timeout_s=2.0, curve_server_key=None, unknown_key=1))
    assert spec.startup_timeout_s == 300.0 and spec.sample_timeout_s == 20.0
    assert spec.failover_s == 5.0 and spec.ping_interval_s == 1.0 and spec.curve_server_key is None
    stream = spec.streams[0]
    assert isinstance(stream, StreamSpec) and stream.inference_addresses == ("tcp://127.0.0.1:1",)
    assert stream.sample_hwm == 2
    assert ActorSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_actor_spec_names_what_is_missing_or_wrong():
    bad = _spec()
    del bad["segment_length"]
    with pytest.raises(ValueError, match="segment_length"):
        ActorSpec.from_dict(bad)
    with pytest.raises(ValueError, match="ring_size=0"):
        ActorSpec.from_dict(_spec(ring_size=0))
    with pytest.raises(ValueError, match="no inference_address"):
        ActorSpec.from_dict(_spec(streams=[{"policy": "p", "sample_address": "tcp://x:1"}]))


# -- building an agent from names --------------------------------------------------------
def test_agent_spec_rebuilds_the_same_agent_in_a_child_process():
    from jaxsrl.experiment.agent_build import agent_spec, factory_of_run, factory_of_spec  # noqa: PLC0415
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415

    cfg = load_config(["--env=CartPole-v1", "--ppo.hidden_sizes", "8", "8"])
    here = factory_of_run(cfg)
    spec = json.loads(json.dumps(agent_spec(cfg)))  # what a child process receives
    there = factory_of_spec(spec)
    assert there.config == here.config and there.config.hidden_sizes == (8, 8)
    assert there.agent.name == "ppo" and there.env.teams == [None]
    assert there.spec.observation_space == here.spec.observation_space


# -- an actor in a thread ----------------------------------------------------------------
def test_actor_stops_when_its_stop_event_is_set():
    """An actor waiting for a server that never answers ends its loop cleanly once
    ``stop`` is set (serial use), without waiting out its timeouts."""
    from jaxsrl.workers.actor.worker import Actor  # noqa: PLC0415

    router, pull = open_socket(None, zmq.ROUTER), open_socket(None, zmq.PULL)
    try:
        spec = _spec(timeout_s=600.0)
        spec["streams"][0].update(inference_address=bind(router, "127.0.0.1"),
                                  sample_address=bind(pull, "127.0.0.1"))
        actor = Actor(spec)
        try:
            thread = actor.start_thread(wait_ready=True)
            assert router.poll(20_000)  # its first request arrived: it is waiting
            actor.stop.set()
            thread.join(30)
            assert not thread.is_alive() and actor.error is None, actor.error
        finally:
            actor.close()
    finally:
        router.close()
        pull.close()


def test_actor_spec_error_is_a_value_error_before_any_socket():
    from jaxsrl.workers.actor.worker import Actor  # noqa: PLC0415

    with pytest.raises(ValueError, match="actor spec lacks"):
        Actor({"actor_id": 0})


def test_start_thread_name_and_daemon():
    w = _Looping("named")
    thread = w.start_thread()
    try:
        assert thread.name == "named" and thread.daemon
    finally:
        w.stop.set()
        thread.join(20)


def test_an_actor_process_loads_no_jax():
    """An actor built in a fresh interpreter (its modules, sockets and environments)
    has no ``jax``/``jaxlib`` module loaded."""
    import subprocess  # noqa: PLC0415

    from jaxsrl.core.paths import REPO_ROOT  # noqa: PLC0415

    code = textwrap.dedent(f'''
        import json, sys
        from jaxsrl.workers.actor.process import main
        from jaxsrl.workers.actor.worker import Actor
        actor = Actor(json.loads({json.dumps(json.dumps(_spec()))}))
        actor.close()
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib"))))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []

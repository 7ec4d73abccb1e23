"""Actor specs built in one place (jaxsrl/launch/specs.py) and the inference backend
picked in one place (jaxsrl/launch/inference_backends.py)."""

import json
import threading

import pytest

from jaxsrl.bench.inference import actor_spec as bench_actor_spec
from jaxsrl.experiment.config import RunConfig
from jaxsrl.launch import specs
from jaxsrl.launch.inference_backends import (InlineBackend, ProcessServers, ThreadServers,
                                              inference_backend)
from jaxsrl.workers.actor.spec import ActorSpec

CARRY = [["h", "float32", [4]]]


def _received(spec: dict) -> ActorSpec:
    """What an actor process reads of ``spec`` (JSON, with the run id its start adds)."""
    return ActorSpec.from_dict(json.loads(json.dumps(spec | {"run_id": 1})))


def test_the_bench_actor_spec_carries_the_configs_settings():
    cfg = RunConfig(clip_actions=False, inference_failover_s=2.5, envs_per_actor=8, ring_size=2)
    got = _received(bench_actor_spec(cfg, 3, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", CARRY))
    assert got.clip_actions is False  # benchmarked as configured (it was always clipped)
    assert got.failover_s == 2.5
    assert (got.actor_id, got.envs_per_group, got.ring_size) == (3, 4, 2)
    assert got.streams[0].inference_addresses == ("tcp://127.0.0.1:1",)
    assert got.carry_spec == (("h", "float32", (4,)),)


def test_actor_spec_matches_what_the_actor_reads_and_leaves_the_run_id_to_each_start():
    cfg = RunConfig(envs_per_actor=6, ring_size=3, seed=5)
    streams = [specs.stream_spec("p", "tcp://h:1", ["tcp://h:2", "tcp://h:3"], team="a",
                                 sample_hwm=4, sample_sndbuf=65536),
               specs.stream_spec("q", "tcp://h:4")]  # an inline actor's stream: no server
    spec = specs.actor_spec(cfg, 0, streams, CARRY, envs_per_actor=12, seed=9,
                            inline={"param_address": "tcp://h:5"})
    assert "run_id" not in spec
    got = _received(spec)
    assert (got.envs_per_group, got.seed, got.clip_actions) == (4, 9, True)
    assert got.streams == tuple(streams)
    assert got.streams[0].inference_address == "tcp://h:2"


def test_the_backend_is_picked_from_the_config():
    assert isinstance(inference_backend(RunConfig(inference="inline")), InlineBackend)
    assert isinstance(inference_backend(RunConfig(inference="process")), ProcessServers)
    assert isinstance(inference_backend(RunConfig(inference="thread")), ThreadServers)
    with pytest.raises(ValueError, match="'auto' is not resolved"):
        inference_backend(RunConfig(inference="auto"))


class _Server:
    def __init__(self, address: str, serving: bool, heartbeat: float):
        self.address, self.heartbeat, self.serving = address, heartbeat, threading.Event()
        if serving:
            self.serving.set()


def test_local_servers_report_liveness_by_address():
    backend = ThreadServers()
    backend.servers = {"a": _Server("inproc://a", True, 5.0),
                       "b": _Server("inproc://b", False, 1.0)}
    assert backend.liveness({"inproc://a"}) == [(True, 5.0)]
    assert sorted(backend.liveness({"inproc://a", "inproc://b", "inproc://c"})) == [
        (False, 1.0), (True, 5.0)]
    assert backend.liveness({"inproc://c"}) == []
    assert InlineBackend().liveness({"inproc://a"}) == []
    assert ProcessServers().liveness({"inproc://a"}) == []  # not built yet

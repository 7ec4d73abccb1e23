"""Hostile or broken messages on both listening ports (the policy worker's ROUTER and
the trainer's PULL): each is dropped, counted and recorded with its reason (the
workers' public ``drops.recent()`` records; the rate-limited log line is written from
the same call), the server keeps serving, and a valid message afterwards is still
answered / learned from."""

from __future__ import annotations

import re

import msgpack
import numpy as np
import pytest
import zmq

from jaxsrl.streams import wire
from jaxsrl.streams.segment import pack_final_obs
from test_faults_helpers import (MAX_ROWS, T, Servers, ask, client, request, segment,
                                 segment_arrays, wait_counter, wait_for)


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.close()


def _last_drop(worker, what: str, stale: bool = False):
    """The worker's latest drop record, checked to be of kind ``what``."""
    drop = worker.drops.recent()[-1]
    assert (drop.worker, drop.what, drop.stale) == (worker.name, what, stale), drop
    return drop


def _header(kind, specs, meta=None):
    return msgpack.packb({"v": 1, "kind": kind, "meta": meta or {"actor": 0, "run": 1, "group": 0},
                          "arrays": specs})


def _truncated(frames):
    return [frames[0], bytes(frames[1])[:-4]] + [bytes(f) for f in frames[2:]]


OBS = np.eye(3, dtype=np.float32)
BAD_REQUESTS = {
    "random bytes": ([b"\xc1\x00 not msgpack"], "not valid msgpack"),
    "random header type": ([msgpack.packb([1, 2, 3])], "header must be a map"),
    "truncated buffer": (_truncated(request()), "bytes received, 36 declared"),
    "missing buffer": (request()[:1], "declares 1 arrays but 0 buffers came"),
    "unknown key": (wire.encode("act", {"obs": OBS, "x": np.zeros(1)},
                                {"actor": 0, "run": 1, "group": 0}), "unknown arrays \\['x'\\]"),
    "wrong dtype": (request(OBS.astype(np.float64)), "dtype float64, expected float32"),
    "wrong shape": (request(np.zeros((3, 4), np.float32)), "shape \\(3, 4\\), expected"),
    "object dtype": ([_header("act", [["obs", "object", [1]]]), b"\0" * 8], "not allowed"),
    "huge declared size": ([_header("act", [["obs", "float32", [2**39, 3]]]), b"\0" * 12],
                           "payload exceeds"),
    "overflowing shape": ([_header("act", [["obs", "float32", [2**39, 2**39, 2**39]]]), b""],
                          "payload exceeds"),
    "bool in shape": ([_header("act", [["obs", "float32", [True, 3]]]), b"\0" * 12], "bad shape"),
    "too many rows": (request(np.zeros((MAX_ROWS + 1, 3), np.float32)),
                      "payload exceeds 96 bytes \\(array 'obs' declares \\[9, 3\\]\\)"),
    "wrong kind": (wire.encode("hello", {"obs": OBS}, {"actor": 0, "run": 1, "group": 0}),
                   "expected an 'act' request"),
    "unknown actor id": (request(actor=99), "unknown actor id 99"),
    "missing ids": (wire.encode("act", {"obs": OBS}, {"group": 0}), "meta 'actor' must be"),
    "bool actor id": (request(actor=True), "meta 'actor' must be"),
    "bad group": (request(group="x"), "meta 'group' must be"),
}


@pytest.mark.parametrize("name", list(BAD_REQUESTS))
def test_bad_request_is_dropped_recorded_and_server_keeps_serving(servers, name):
    frames, reason = BAD_REQUESTS[name]
    sock = client(servers.policy.address)
    before = servers.counter("dropped_requests")
    sock.send_multipart([bytes(f) for f in frames])
    wait_counter(servers, "dropped_requests", before + 1)
    drop = _last_drop(servers.policy, "request")
    assert re.search(reason, drop.reason), drop.reason
    reply = ask(sock, request(OBS, group=5), group=5)  # a valid request is still answered
    np.testing.assert_array_equal(reply.arrays["action"], [0, 1, 2])
    sock.close()


def test_request_of_a_previous_run_is_dropped(servers):
    sock = client(servers.policy.address)
    before = servers.counter("stale_run_requests_dropped")
    sock.send_multipart(request(run=7))
    wait_counter(servers, "stale_run_requests_dropped", before + 1)
    drop = _last_drop(servers.policy, "request", stale=True)
    assert "run id 7 of actor 0 is not its current run 1" in drop.reason
    assert ask(sock, request(group=3), group=3).kind == "action"
    sock.close()


def test_oversized_frame_is_cut_by_zeromq_and_server_keeps_serving(servers):
    big = client(servers.policy.address)
    big.send_multipart([b"x" * (servers.policy.max_frame_bytes + 1_000_000)])  # peer disconnected
    big.close()
    sock = client(servers.policy.address)
    assert ask(sock, request(group=4), group=4).kind == "action"
    sock.close()


def _segment_with(**changes):
    arrays = segment_arrays(2)
    arrays.update(changes)
    return segment(arrays=arrays)


def _sparse_with(**changes):
    """A sparse-final_obs segment (as actors send it; steps (0, 1) and (1, 3) truncated)
    with ``changes`` applied after packing."""
    arrays = segment_arrays(2)
    arrays["truncated"] = arrays["truncated"].copy()
    arrays["truncated"][0, 1] = arrays["truncated"][1, 3] = True
    arrays = pack_final_obs(arrays)
    arrays.update(changes)
    return segment(arrays=arrays)


BAD_SEGMENTS = {
    "sparse index out of range": (_sparse_with(final_index=np.array([1, 2 * T], np.int32)),
                                  f"final_index values 1..{2 * T} outside 0..{2 * T - 1}"),
    "sparse negative index": (_sparse_with(final_index=np.array([-1, T + 3], np.int32)),
                              "final_index values -1"),
    "sparse index not the truncated steps": (
        _sparse_with(final_index=np.array([1, 2], np.int32)),
        "final_index lists 2 steps, not the 2 truncated steps"),
    "sparse index misses a truncated step": (
        _sparse_with(final_index=np.array([1], np.int32), final_obs=np.zeros((1, 3), np.float32)),
        "final_index lists 1 steps, not the 2 truncated steps"),
    "sparse index wrong dtype": (_sparse_with(final_index=np.array([1, T + 3], np.int64)),
                                 "'final_index': dtype int64"),
    "sparse index wrong shape": (_sparse_with(final_index=np.array([[1], [T + 3]], np.int32)),
                                 "'final_index': shape"),
    "sparse final_obs and index disagree": (
        _sparse_with(final_obs=np.zeros((3, 3), np.float32)), "final_obs arrays disagree"),
    "sparse final_obs of a wrong shape": (
        _sparse_with(final_obs=np.zeros((2, 4), np.float32)), "'final_obs': shape"),

    "random bytes": ([b"\xc1\x00 not msgpack"], "not valid msgpack"),
    "truncated buffer": (_truncated(segment()), "bytes received"),
    "unknown key": (_segment_with(extra=np.zeros(1, np.float32)), "unknown arrays \\['extra'\\]"),
    "wrong dtype": (_segment_with(reward=np.zeros((2, T), np.float64)), "'reward': dtype float64"),
    "wrong shape": (_segment_with(obs=np.zeros((2, T + 2, 3), np.float32)), "'obs': shape"),
    "rows disagree": (_segment_with(reward=np.zeros((3, T), np.float32)), "disagree"),
    "huge declared size": ([_header("segment", [["obs", "float32", [2**35, T + 1, 3]]]), b""],
                           "payload exceeds"),
    "too many rows": (segment(rows=MAX_ROWS + 1), "payload exceeds"),
    "future versions": (_segment_with(version=np.full((2, T), 10**6, np.int32)),
                        "action versions 1000000..1000000 outside"),
    "negative versions": (_segment_with(version=np.full((2, T), -1, np.int32)), "action versions -1"),
    "bogus env_steps": (segment(env_steps=10**12), "meta 'env_steps'=1000000000000"),
    "wrong kind": (wire.encode("act", segment_arrays(2), {"actor": 0, "run": 1}), "expected a 'segment'"),
    "unknown actor id": (segment(actor=5), "unknown actor id 5"),
    "string run id": (segment(run="1"), "meta 'run' must be"),
}


def _learns(servers, sock):
    """A valid batch after the bad message is learned from (the version goes up)."""
    version = servers.store.get("p").version
    for _ in range(2):
        sock.send_multipart(segment(rows=2))
    wait_for(lambda: servers.store.get("p").version > version, 20, "an update")


@pytest.mark.parametrize("name", list(BAD_SEGMENTS))
def test_bad_segment_is_dropped_recorded_and_learner_keeps_learning(servers, name):
    frames, reason = BAD_SEGMENTS[name]
    sock = client(servers.trainer.address, zmq.PUSH)
    before = servers.counter("dropped_segments")
    steps = servers.metrics.env_steps
    sock.send_multipart([bytes(f) for f in frames])
    wait_counter(servers, "dropped_segments", before + 1)
    assert servers.metrics.env_steps == steps  # nothing of it was counted
    drop = _last_drop(servers.trainer, "segment")
    assert re.search(reason, drop.reason), drop.reason
    _learns(servers, sock)
    sock.close()


def test_segment_of_a_previous_run_is_dropped(servers):
    sock = client(servers.trainer.address, zmq.PUSH)
    before = servers.counter("stale_run_segments_dropped")
    sock.send_multipart(segment(actor=1, run=1))  # actor 1 is on run 2
    wait_counter(servers, "stale_run_segments_dropped", before + 1)
    drop = _last_drop(servers.trainer, "segment", stale=True)
    assert "run id 1 of actor 1 is not its current run 2" in drop.reason
    servers.table.register(1, 3)  # actor 1 restarts: run 2 is now stale too
    sock.send_multipart(segment(actor=1, run=2))
    wait_counter(servers, "stale_run_segments_dropped", before + 2)
    _learns(servers, sock)
    sock.close()


def test_hostile_episode_statistics_cannot_grow_metric_names(servers):
    sock = client(servers.trainer.address, zmq.PUSH)
    for i in range(20):
        episodes = [{f"stat{i}_{j}": 1.0 for j in range(30)} | {"return": float("nan"), "team": 5}]
        sock.send_multipart(segment(rows=2, episodes=episodes, timing={f"k{i}": 1.0}))
    _learns(servers, sock)
    from jaxsrl.streams.episodes import MAX_EPISODE_KEYS
    episode_keys = {k for k in servers.metrics.snapshot(1.0) if k.startswith("episode/")}
    assert 0 < len(episode_keys) <= MAX_EPISODE_KEYS
    record = servers.metrics.snapshot(1.0)
    assert not any(k.startswith("actor/k") for k in record)  # unknown timing keys ignored
    assert all(np.isfinite(v) for v in record.values() if isinstance(v, float))
    sock.close()


def test_ping_marks_the_actor_alive_and_is_not_answered(servers):
    import time

    sock = client(servers.policy.address)
    seen = servers.table.last_seen(0)
    time.sleep(0.01)
    before = servers.counter("dropped_requests")
    sock.send_multipart(wire.encode("ping", {}, {"actor": 0, "run": 1}))
    wait_for(lambda: servers.table.last_seen(0) > seen, 10, "the ping to be recorded")
    sock.send_multipart(wire.encode("ping", {}, {"actor": 42, "run": 1}))  # unknown actor
    wait_counter(servers, "dropped_requests", before + 1)
    sock.send_multipart(request(group=6))
    assert sock.poll(20_000)
    reply = wire.decode(sock.recv_multipart())  # the first reply: pings get none of their own
    assert reply.kind == "action" and reply.meta["group"] == 6 and not sock.poll(200)
    sock.close()


def test_sparse_segments_as_actors_send_them_are_learned(servers):
    """Actors send final_obs for truncated steps only; the trainer takes them (no drop)."""
    sock = client(servers.trainer.address, zmq.PUSH)
    before = servers.counter("dropped_segments")
    version = servers.store.get("p").version
    for _ in range(2):
        sock.send_multipart(_sparse_with())
    wait_for(lambda: servers.store.get("p").version > version, 20, "an update")
    assert servers.counter("dropped_segments") == before
    sock.close()

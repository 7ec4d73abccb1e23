"""Fuzzing both listening ports with 10,000 generated messages each.

Every message is either answered / accepted or dropped and counted (never lost, never
fatal); memory does not grow; afterwards a valid request is answered correctly and a
valid batch is learned from.
"""

from __future__ import annotations

import gc
import random

import msgpack
import numpy as np
import psutil
import pytest
import zmq

from jaxsrl.streams import wire
from test_faults_helpers import (BATCH, MAX_ROWS, Servers, client, request, segment,
                                 segment_arrays, wait_for)

N = 10_000
DTYPES = sorted(wire.ALLOWED_DTYPES) + ["object", "V8", "<U4", "complex64", 7, None]


def _random_value(r: random.Random, depth=0):
    choices = [lambda: r.randint(-2**63, 2**64 - 1), lambda: r.random() * 10 ** r.randint(-5, 40),
               lambda: None, lambda: True, lambda: "x" * r.randint(0, 40),
               lambda: r.randbytes(r.randint(0, 40)), lambda: float("nan")]
    if depth < 3:
        choices += [lambda: [_random_value(r, depth + 1) for _ in range(r.randint(0, 4))],
                    lambda: {f"k{r.randint(0, 9)}": _random_value(r, depth + 1)
                             for _ in range(r.randint(0, 4))}]
    return r.choice(choices)()


def _random_shape(r: random.Random):
    kind = r.randint(0, 5)
    if kind == 0:
        return [r.randint(0, 2**41) for _ in range(r.randint(0, 9))]
    if kind == 1:
        return [r.choice([-1, True, 2.5, "3", None, [2]]) for _ in range(r.randint(1, 3))]
    if kind == 2:
        return _random_value(r)
    return [r.randint(0, 12) for _ in range(r.randint(0, 4))]


def _mutate(r: random.Random, frames: list) -> list:
    """A broken variant of a valid message."""
    frames = [bytes(f) for f in frames]
    header = msgpack.unpackb(frames[0])
    kind = r.randint(0, 10)
    if kind == 0:  # flip bytes of the header
        h = bytearray(frames[0])
        for _ in range(r.randint(1, 8)):
            h[r.randrange(len(h))] = r.randrange(256)
        frames[0] = bytes(h)
    elif kind == 1:  # truncate or extend a buffer
        i = r.randrange(1, len(frames))
        frames[i] = frames[i][: r.randrange(len(frames[i]) + 1)] if r.random() < 0.5 else \
            frames[i] + r.randbytes(r.randint(1, 64))
    elif kind == 2:  # drop or add frames
        frames = frames[: max(1, r.randrange(len(frames)))] if r.random() < 0.5 else \
            frames + [r.randbytes(r.randint(0, 64)) for _ in range(r.randint(1, 3))]
    elif kind == 3:  # wrong dtypes
        for spec in header["arrays"]:
            if r.random() < 0.5:
                spec[1] = r.choice(DTYPES)
        frames[0] = msgpack.packb(header)
    elif kind == 4:  # wrong or huge shapes
        spec = r.choice(header["arrays"])
        spec[2] = _random_shape(r)
        frames[0] = msgpack.packb(header)
    elif kind == 5:  # unknown / renamed arrays
        spec = r.choice(header["arrays"])
        spec[0] = r.choice(["", "x", "obs/../etc", "carry/0", spec[0] + "_", "\x00"])
        frames[0] = msgpack.packb(header)
    elif kind == 6:  # wrong ids and meta
        key = r.choice(["actor", "run", "group", "env_steps", "episodes", "timing", "version"])
        header["meta"][key] = r.choice([r.randint(0, 2**40), -1, 99, 2, _random_value(r)])
        frames[0] = msgpack.packb(header)
    elif kind == 7:  # wrong version / kind / header fields
        field = r.choice(["v", "kind", "meta", "arrays"])
        header[field] = _random_value(r)
        frames[0] = msgpack.packb(header)
    elif kind == 8:  # a random msgpack document
        frames[0] = msgpack.packb(_random_value(r))
    elif kind == 9:  # random bytes
        frames = [r.randbytes(r.randint(0, 300)) for _ in range(r.randint(1, 4))]
    else:  # NaN / Inf in float payloads (structurally valid)
        i = r.randrange(1, len(frames))
        arr = bytearray(frames[i])
        if len(arr) >= 4:
            pos = 4 * r.randrange(len(arr) // 4)
            arr[pos:pos + 4] = np.float32(r.choice([np.nan, np.inf, -np.inf])).tobytes()
        frames[i] = bytes(arr)
    return frames


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.close()


def test_fuzz_policy_worker(servers):
    r = random.Random(0)
    rng = np.random.default_rng(0)
    sock = client(servers.policy.address)
    replies = 0

    def message(i):
        if i % 10 == 0:  # some valid requests (1..MAX_ROWS rows, maybe NaN observations)
            obs = rng.standard_normal((r.randint(1, MAX_ROWS), 3)).astype(np.float32)
            return request(obs, group=1)
        return _mutate(r, request(rng.standard_normal((r.randint(1, MAX_ROWS), 3)).astype(np.float32),
                                  actor=r.choice([0, 1]), run=r.choice([1, 2]), group=1))

    def drain(until_group=None):
        """Count replies; with ``until_group``, wait for that one (it is not counted)."""
        nonlocal replies
        while sock.poll(0 if until_group is None else 20_000):
            reply = wire.decode(sock.recv_multipart())
            assert reply.kind == "action"
            if until_group is not None and reply.meta["group"] == until_group:
                return reply
            replies += 1
        assert until_group is None, "no answer from the server"

    rss = None
    for i in range(N):
        sock.send_multipart(message(i))
        if i % 200 == 199:
            drain()
        if i == 1000:
            sock.send_multipart(request(group=9))  # warmed up
            drain(until_group=9)
            rss = _rss()
    obs = np.eye(3, dtype=np.float32)[::-1].copy()
    sock.send_multipart(request(obs, group=77))
    reply = drain(until_group=77)  # answered after every fuzz message
    np.testing.assert_array_equal(reply.arrays["action"], [2, 1, 0])
    np.testing.assert_allclose(reply.arrays["logp"], [1.0, 1.0, 1.0])  # params 1.0 * row sums
    growth = _rss() - rss
    assert servers.policy.error is None
    dropped = servers.counter("dropped_requests") + servers.counter("stale_run_requests_dropped")
    assert dropped >= N * 0.8  # almost all fuzz messages are invalid ...
    # ... and every message was either answered or dropped.
    assert dropped + replies == N, (dropped, replies)
    assert growth < 30 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB"
    sock.close()


def test_fuzz_trainer(servers):
    r = random.Random(1)
    received = servers.counter("segments_received")
    sock = client(servers.trainer.address, zmq.PUSH)

    def message(i):
        rows = r.randint(1, MAX_ROWS)
        arrays = segment_arrays(rows, reward=r.uniform(-1, 1))
        frames = segment(rows=rows, arrays=arrays, actor=r.choice([0, 1]), run=r.choice([1, 2]))
        return frames if i % 10 == 0 else _mutate(r, frames)

    rss = None
    for i in range(N):
        sock.send_multipart(message(i))
        if i == 1000:
            wait_for(lambda: servers.counter("segments_received") - received >= 1001, 60, "the trainer to catch up")
            rss = _rss()
    wait_for(lambda: servers.counter("segments_received") - received >= N, 120, "the trainer to read every message")
    version = servers.trainer.version
    for _ in range(BATCH):  # a valid batch is still learned from
        sock.send_multipart(segment(rows=1))
    wait_for(lambda: servers.store.get("p").version > version, 20, "an update after the fuzz")
    growth = _rss() - rss
    assert servers.trainer.error is None
    counters = ("dropped_segments", "stale_run_segments_dropped", "nonfinite_segments_dropped")
    dropped = sum(servers.counter(c) for c in counters)
    assert dropped >= N * 0.7
    assert servers.trainer.pending_rows < BATCH  # nothing piles up
    assert growth < 30 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB"
    assert np.isfinite(float(servers.trainer.state.params))
    sock.close()

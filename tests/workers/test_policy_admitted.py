"""The inference server's remembered verdicts (``AdmittedRequests``): a repeated request is
admitted without its checks only while nothing its verdict rests on changed; a stale
entry (an actor restarted since, a frame of another size, another frame count) never
admits a request that the full checks reject, and the request is dropped with the same
reason as a first-time one. Also the actor table's ``generation`` and ``seen_all``."""

from __future__ import annotations

import contextlib
import threading
import time

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.inference.admitted import AdmittedRequests
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from jaxsrl.workers.inference.server import ReportingActorTable

SPACE = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
OBS = np.eye(3, dtype=np.float32)


def fake_act(params, obs, carry, rng):
    return jnp.argmax(obs, axis=-1).astype(jnp.int32), carry, {"logp": params * obs.sum(-1)}


def _request(obs=OBS, actor=0, run=1, group=0) -> list:
    return [bytes(f) for f in wire.encode("act", {"obs": obs},
                                          {"actor": actor, "run": run, "group": group})]


@contextlib.contextmanager
def _serving(cls=PolicyWorker, name="admitted-server"):
    """A policy worker of ``cls`` whose actor table accepts actor 0 in run 1, serving in
    a thread, and a DEALER connected to it: ``(worker, metrics, table, sock)``."""
    store, metrics, table = ParameterStore(), MetricsAccumulator(), ActorTable()
    store.publish("p", 3, jnp.float32(2.0))
    table.register(0, 1)
    worker = cls(name, "p", devices.jit_act(fake_act, devices.local_mesh()),
                 lambda n: None, SPACE, store, metrics, PolicySettings(max_rows=8), actors=table)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert worker.serving.wait(60) and worker.error is None, worker.error
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker.address)
    try:
        yield worker, metrics, table, sock
    finally:
        sock.close()
        worker.stop.set()
        thread.join(5)


@pytest.fixture
def served():
    """A policy worker whose actor table accepts actor 0 in run 1."""
    with _serving() as parts:
        yield parts


def _answered(sock, frames, group, timeout_s=20.0) -> bool:
    """Send ``frames``; whether a reply of ``group`` comes (any other reply is skipped)."""
    sock.send_multipart(frames)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sock.poll(100):
            reply = wire.decode(sock.recv_multipart())
            if reply.meta.get("group") == group:
                return True
    return False


def _wait(cond, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_restarted_actor_s_old_request_is_dropped_although_it_was_admitted_before(served):
    """The stale-entry case: the very bytes admitted (and remembered) in run 1 are
    refused as a previous run's once the actor is registered again in run 2."""
    worker, metrics, table, sock = served
    old = _request(run=1, group=1)
    for _ in range(3):  # admitted, then admitted from the remembered verdict
        assert _answered(sock, old, group=1)
    table.register(0, 2)  # the launcher restarted actor 0
    sock.send_multipart(old)
    _wait(lambda: metrics.counter("stale_run_requests_dropped") == 1, "the stale drop")
    drop = worker.drops.recent()[-1]
    assert drop.stale and "run id 1 of actor 0 is not its current run 2" in drop.reason
    assert _answered(sock, _request(run=2, group=2), group=2)  # the new run is served
    assert metrics.counter("dropped_requests") == 0


def test_an_unregistered_actor_is_never_admitted(served):
    worker, metrics, table, sock = served
    assert _answered(sock, _request(group=1), group=1)
    for i in range(2):
        sock.send_multipart(_request(actor=5, group=1))
        _wait(lambda: metrics.counter("dropped_requests") == i + 1, "the drop")
        assert "unknown actor id 5" in worker.drops.recent()[-1].reason


@pytest.mark.parametrize("mangle, reason", [
    (lambda f: [f[0], f[1][:-4]], "array 'obs': 32 bytes received, 36 declared"),
    (lambda f: f[:1], "header declares 1 arrays but 0 buffers came"),
    (lambda f: f + [b"extra"], "header declares 1 arrays but 2 buffers came"),
])
def test_a_remembered_header_with_frames_of_other_sizes_is_checked_in_full(served, mangle, reason):
    worker, metrics, table, sock = served
    good = _request(group=1)
    assert _answered(sock, good, group=1) and _answered(sock, good, group=1)
    sock.send_multipart(mangle(good))
    _wait(lambda: metrics.counter("dropped_requests") == 1, "the drop")
    assert reason in worker.drops.recent()[-1].reason
    assert _answered(sock, good, group=1)  # still admitted


def test_remembered_verdicts_hold_only_for_the_same_frames_and_table_generation():
    table = ActorTable()
    table.register(0, 1)
    admitted = AdmittedRequests(table)
    frames = [b"id"] + _request(group=4)
    assert admitted.get(frames) is None  # never seen
    admitted.remember(frames, table.generation, 0, 4, 3, ["obs"])
    verdict = admitted.get(frames)
    assert (verdict.actor, verdict.group, verdict.rows) == (0, 4, 3)
    assert verdict.arrays == ((2, "obs", 36),)  # frame 2: 3 rows of 3 float32
    assert admitted.get([b"other identity"] + frames[1:]) == verdict  # the identity is no part
    assert admitted.get(frames[:2]) is None  # a frame missing
    assert admitted.get(frames + [b""]) is None  # one more
    assert admitted.get(frames[:2] + [frames[2][:-1]]) is None  # a frame of another size
    assert admitted.get([b"id"] + _request(group=5)) is None  # another header
    table.register(1, 1)  # any change of the table: everything is checked again
    assert admitted.get(frames) is None
    stale = table.generation - 1  # a verdict given before a change is never valid after it
    admitted.remember(frames, stale, 0, 4, 3, ["obs"])
    assert admitted.get(frames) is None
    without_table = AdmittedRequests(None)
    without_table.remember(frames, without_table.generation(), None, 4, 3, ["obs"])
    assert without_table.get(frames).actor is None


def test_only_received_bytes_are_remembered_and_the_memory_is_bounded():
    admitted = AdmittedRequests(None, max_known=2)
    frames = [b"id"] + _request(group=0)
    admitted.remember([b"id", memoryview(frames[1]), frames[2]], 0, None, 0, 3, ["obs"])
    assert len(admitted) == 0 and admitted.get(frames) is None
    for g in range(3):
        admitted.remember([b"id"] + _request(group=g), 0, None, g, 3, ["obs"])
    assert len(admitted) == 1  # forgotten when full, then the newest


def test_generation_changes_with_every_registration():
    table = ActorTable()
    seen = [table.generation]
    table.register(0, 1)
    seen.append(table.generation)
    table.register(0, 1)  # the same pair again still counts as a change
    seen.append(table.generation)
    table.check({"actor": 0, "run": 1})
    table.seen(0)
    seen.append(table.generation)  # checks and sightings change nothing
    assert seen[0] < seen[1] < seen[2] == seen[3]


def test_seen_all_records_one_time_for_each_known_actor():
    now = [10.0]
    table = ActorTable(clock=lambda: now[0])
    table.register(0, 1)
    table.register(1, 1)
    now[0] = 12.5
    table.seen_all({0, 7})  # 7 is no actor of the run: ignored
    assert (table.last_seen(0), table.last_seen(1), table.last_seen(7)) == (12.5, 10.0, None)


def test_seen_all_of_a_table_that_records_more_uses_its_seen():
    table = ReportingActorTable({0: 1, 1: 1, 2: 1})
    table.seen_all([2, 0])
    assert table.take_heard() == [0, 2]


@pytest.mark.parametrize("how", ["subclass", "patched class"])
def test_a_worker_whose_parse_is_overridden_checks_every_request_with_it(monkeypatch, how):
    """Remembered verdicts are ``PolicyWorker.parse``'s own: a subclass, or a patch of the
    class, deciding per request (here: refusing every request after two) sees every one."""
    calls = {"n": 0}
    own = PolicyWorker.parse

    def parse(self, frames):
        calls["n"] += 1
        if calls["n"] > 2:
            raise wire.WireError("refused after two")
        return own(self, frames)

    if how == "subclass":
        cls = type("Strict", (PolicyWorker,), {"parse": parse})
    else:
        cls = PolicyWorker
        monkeypatch.setattr(PolicyWorker, "parse", parse)
    with _serving(cls, "strict-server") as (worker, metrics, table, sock):
        good = _request(group=1)
        assert _answered(sock, good, group=1) and _answered(sock, good, group=1)
        sock.send_multipart(good)
        _wait(lambda: metrics.counter("dropped_requests") == 1, "the third request's drop")
        assert calls["n"] == 3 and "refused after two" in worker.drops.recent()[-1].reason

"""The buffer process's worker (jaxsrl/workers/buffer/server.py) through its sockets: a
BufferServer thread on inproc endpoints, fed segments like an actor, asked for batches
and sent priorities like a trainer, reporting like a buffer process to the launcher.
Inserts, samples (ids, importance weights), priority updates, the rate limiter and its
back-pressure on the actors, and malformed input on every socket."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from jaxsrl.experiment.config import load_config
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.sockets import INPROC, bind
from jaxsrl.workers.buffer.server import BufferServer
from jaxsrl.workers.buffer.spec import BufferProcessSpec

T, ROWS = 4, 2
ITEMS = T * ROWS  # items per segment (1-step transitions)
BATCH = 4
WAIT_S = 60.0  # generous bound on every wait for an event
CACHE = load_config([]).compilation_cache_dir  # the launcher's XLA cache: later runs skip compiles


class Harness:
    """A BufferServer thread and the sockets of one actor, one trainer and the launcher."""

    def __init__(self, replay_ratio: float = 2.0, min_fill: int = 8, capacity: int = 64,
                 prioritised: bool = True):
        self.context = zmq.Context()
        self.status = self.context.socket(zmq.PULL)
        status_address = bind(self.status, INPROC, name="status")
        config = {"n_step": 1, "hidden_sizes": [8], "batch_size": BATCH, "capacity": capacity,
                  "min_fill": min_fill, "replay_ratio": replay_ratio, "prioritised": prioritised}
        self.spec = BufferProcessSpec(
            name="replay", agent="dqn", env="CartPole-v1", agent_config=config,
            planned_updates=100, segment_length=T, max_rows=ROWS, capacity=capacity,
            min_fill=min_fill, status_address=status_address, host=INPROC, run_id=77,
            status_interval_s=0.05, compilation_cache_dir=CACHE)
        self.server = BufferServer(self.spec, context=self.context)
        self.thread = self.server.start_thread(wait_ready=True)
        assert self.server.error is None, self.server.error
        self.push = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 1)
        self.push.connect(self.server.sample_address)
        self.trainer = self.context.socket(zmq.DEALER)
        self.trainer.connect(self.server.request_address)
        self.sent = 0
        self.req = 0
        self.actor_runs([[0, 1]])
        self.wait(lambda s: s["serving"])

    def actor_runs(self, runs) -> None:
        self.trainer.send_multipart(wire.encode(replay_wire.ACTOR_RUNS, {}, {"runs": runs}))

    def segment(self, reward: float = 0.0, version: int = 0, actor: int = 0, **meta):
        rng = np.random.default_rng(self.sent)
        arrays = {"obs": rng.uniform(-1, 1, (ROWS, T + 1, 4)).astype(np.float32),
                  "final_obs": np.zeros((ROWS, T, 4), np.float32),
                  "action": rng.integers(0, 2, (ROWS, T)).astype(np.int32),
                  "reward": np.full((ROWS, T), reward, np.float32),
                  "terminated": np.zeros((ROWS, T), bool), "truncated": np.zeros((ROWS, T), bool),
                  "logp": np.zeros((ROWS, T), np.float32),
                  "version": np.full((ROWS, T), version, np.int32)}
        for name, spec in self.server.gate.schema.items():  # the agent's carry (zeros)
            if name not in arrays:
                arrays[name] = np.zeros((ROWS, *spec.shape[1:]), spec.dtype)
        return arrays, {"actor": actor, "run": 1, "group": 0, "env_steps": ITEMS,
                        "episodes": [{"return": 9.0, "length": 9}], **meta}

    def send(self, block: bool = True, **kwargs) -> bool:
        arrays, meta = self.segment(**kwargs)
        try:
            self.push.send_multipart(wire.encode("segment", arrays, meta),
                                     flags=0 if block else zmq.NOBLOCK)
        except zmq.Again:
            return False
        self.sent += 1
        return True

    def ask(self, version: int = 0, req: int | None = None) -> int:
        """Send a sample request: a new one, or request ``req`` again (as the trainer
        does after ``RESEND_S`` without an answer)."""
        if req is None:
            self.req += 1
            req = self.req
        self.trainer.send_multipart(wire.encode(replay_wire.SAMPLE, {}, {"req": req,
                                                                         "version": version}))
        return req

    def batch(self, timeout_s: float = WAIT_S):
        """The next replay_batch (decoded against the item structure), or None."""
        if not self.trainer.poll(int(1e3 * timeout_s)):
            return None
        frames = self.trainer.recv_multipart()
        return replay_wire.decode_batch(frames, self.server.feed.item_spec, BATCH)

    def priorities(self, ids, values, run: int = 77, version: int = 1) -> None:
        self.trainer.send_multipart(wire.encode(replay_wire.PRIORITIES, {
            "ids": np.asarray(ids, np.int32), "priorities": np.asarray(values, np.float32)},
            {"run": run, "version": version}))

    def wait(self, pred, timeout_s: float = WAIT_S) -> dict:
        """The first status (meta) satisfying ``pred`` within the bound."""
        while self.status.poll(0):  # older reports: the answer must be a fresh one
            self.status.recv_multipart()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status.poll(100):
                meta = wire.decode(self.status.recv_multipart(), max_bytes=0).meta
                self.last = meta
                if pred(meta):
                    return meta
        raise AssertionError(f"no status satisfied the condition within {timeout_s} s; "
                             f"last: {getattr(self, 'last', None)}")

    def close(self) -> None:
        self.server.stop.set()
        self.thread.join(10)
        for s in (self.push, self.trainer, self.status):
            s.close()
        self.context.term()


@pytest.fixture
def harness():
    made = []

    def make(**kwargs):
        made.append(Harness(**kwargs))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_insert_sample_and_priorities(harness):
    """Below min fill a request waits; after it, the batch carries items of the inserted
    segments, ids and importance weights (max 1); priorities sent back become the
    buffer's (p^alpha), those naming another run of the process are dropped."""
    h = harness(replay_ratio=2.0, min_fill=8)
    req = h.ask()
    # empty: the request waits for data (wait for its arrival: the first serving status
    # can come before the buffer has read it, under load)
    assert h.wait(lambda s: s["serving"] and s["pending"] == 1)["env_steps"] == 0
    h.send(reward=2.0)
    status = h.wait(lambda s: s["episodes"])
    assert status["env_steps"] == ITEMS and status["episodes"] == [{"return": 9.0, "length": 9}]
    assert status["seen"] == [0]
    msg, items = h.batch()
    assert msg.meta["req"] == req and msg.meta["run"] == 77
    assert items["reward"].shape == (BATCH,) and np.all(items["reward"] == 2.0)
    ids, weights = msg.arrays["ids"], msg.arrays["weights"]
    assert ids.dtype == np.int32 and set(ids) <= set(range(ITEMS))
    assert weights.dtype == np.float32 and weights.max() == pytest.approx(1.0)
    h.priorities(ids, np.full(BATCH, 3.0))
    status = h.wait(lambda s: s["means"].get("replay/priority_max", 0) > 1.5)
    assert status["means"]["replay/priority_max"] == pytest.approx(3.0 ** 0.6, rel=1e-5)
    h.priorities(ids, np.full(BATCH, 9.0), run=78)  # a batch of a previous process run
    status = h.wait(lambda s: s["counters"].get("stale_priorities_dropped") == 1)
    assert status["means"]["replay/priority_max"] == pytest.approx(3.0 ** 0.6, rel=1e-5)


def test_rate_limiter_holds_the_ratio_and_slows_the_actor(harness):
    """Ratio 2, batches of 4, min fill 8: the window [16 - 6, 16 + 6] allows
    floor((2 * inserts - samples - 10) / 4) batches; a request beyond waits (pending).
    A trainer that stops asking blocks the inserts: the buffer stops reading, the
    actor's sends block (Again), nothing is dropped, and once it asks again every
    segment gets in, the achieved ratio within the window."""
    h = harness(replay_ratio=2.0, min_fill=8)
    h.send()
    s = h.wait(lambda s: s["means"].get("replay/inserts") == ITEMS)
    assert s["means"]["replay/updates_allowed"] == (2 * ITEMS - 10) // BATCH == 1
    h.ask()
    assert h.batch() is not None
    h.ask()
    s = h.wait(lambda s: s["pending"] == 1)  # no update allowed: the learner waits
    assert s["means"]["replay/samples"] == BATCH
    h.send()
    assert h.batch() is not None  # answered once the items came
    s = h.wait(lambda s: s["means"].get("replay/inserts") == 2 * ITEMS and s["pending"] == 0)
    left = int(s["means"]["replay/updates_allowed"])
    assert 2 + left == (2 * 2 * ITEMS - 10) // BATCH
    for _ in range(left):
        h.ask()
        assert h.batch() is not None
    # no more requests: the inserts stop at the window's top, then the actor blocks
    while h.send(block=False):
        assert h.sent < 50
    h.wait(lambda s: not s["insert_allowed"] and s["pending"] == 0)
    while h.send(block=False):  # (queue slots the last reads freed)
        assert h.sent < 50
    inserted = h.wait(lambda s: True)["means"]["replay/inserts"]
    assert h.push.poll(0, zmq.POLLOUT) == 0  # still blocked: the buffer does not read
    assert inserted < h.sent * ITEMS
    while inserted < h.sent * ITEMS:  # asking again lets every queued segment in
        h.ask()
        assert h.batch() is not None
        inserted = h.wait(lambda s: s["pending"] == 0)["means"]["replay/inserts"]
    s = h.wait(lambda s: True)
    assert s["counters"].get("dropped_segments", 0) == 0
    # |samples - 2 (inserts - 8)| <= 6 (the window) + one segment's 8 items x 2
    assert abs(s["means"]["replay/ratio"] - 2.0) * (inserted - 8) <= 6 + ITEMS * 2


def test_a_request_sent_again_after_its_answer_is_answered_once(harness):
    """The trainer re-sends a request whose answer is still on its way (RESEND_S); the
    buffer answers it once: the next batch answers the next request, the samples count
    only the batches sent, and the re-send is counted."""
    h = harness(replay_ratio=2.0, min_fill=8)
    for _ in range(2):  # (2 * 16 - 10) // 4 = 5 updates allowed: the limiter holds none back
        h.send()
    h.wait(lambda s: s["means"].get("replay/inserts") == 2 * ITEMS)
    first = h.ask()
    msg, _ = h.batch()
    assert msg.meta["req"] == first
    h.ask(req=first)  # sent again: its answer was on the way
    second = h.ask()
    msg, _ = h.batch()
    assert msg.meta["req"] == second, "the re-sent request was answered again"
    s = h.wait(lambda s: s["counters"].get("duplicate_sample_requests") == 1 and s["pending"] == 0)
    assert s["means"]["replay/samples"] == 2 * BATCH
    assert h.trainer.poll(0) == 0  # no third batch


def test_malformed_messages_are_dropped_and_counted(harness):
    """Garbage, a wrong schema, an unknown actor, future versions and bad requests are
    each dropped and counted; the buffer keeps serving."""
    h = harness()
    h.push.send_multipart([b"not msgpack", b"x"])
    arrays, meta = h.segment()
    h.push.send_multipart(wire.encode("segment", {**arrays, "reward": arrays["reward"][:, :2]}, meta))
    h.send(actor=5)  # no such actor in the table
    h.send(version=10_000)  # far beyond any version the learner announced
    h.trainer.send_multipart([b"\x00garbage"])
    h.trainer.send_multipart(wire.encode(replay_wire.SAMPLE, {}, {"req": "x", "version": 0}))
    h.trainer.send_multipart(wire.encode(replay_wire.PRIORITIES, {
        "ids": np.zeros(3, np.int32), "priorities": np.zeros(2, np.float32)}, {"run": 77, "version": 0}))
    status = h.wait(lambda s: s["counters"].get("dropped_segments", 0) == 4
                    and s["counters"].get("dropped_buffer_messages", 0) == 3)
    assert status["serving"] and status["env_steps"] == 0
    h.send()
    h.ask()
    assert h.batch() is not None  # still serving
    assert h.server.error is None

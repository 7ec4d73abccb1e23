"""The inline actor (``--inference=inline``: the actor with jaxsrl/workers/inline/client.py) against fakes: a fake
parameter publisher (a PUB socket sending ``param_chunk`` messages, as the learner's
``ParamPublisher`` does) and a fake sample sink (a PULL socket, the trainer's end).

The agent is a recurrent test agent whose outputs can be recomputed from a segment by
hand: action ``argmax(obs @ w + b)``, and a carry counting the row's steps since its
episode began, reported as ``logp = -carry``. So every recorded action must equal what
``act`` gives with the parameters of the version recorded for it, and every ``logp`` the
count of steps since the last episode end (the carry kept by the actor, zeroed at each
episode start); a newer version must be adopted, and a malformed parameter message
dropped with the old parameters kept.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.core.agent import Agent, AgentFns
from jaxsrl.streams import param_stream as ps
from jaxsrl.streams import wire
from jaxsrl.workers.actor.worker import Actor
from jaxsrl.workers.inline.client import InlineClient

T, ENVS = 4, 3
WAIT_MS = 60_000  # generous: the actor compiles act on its first request


@dataclasses.dataclass(frozen=True)
class ArgmaxConfig:
    pass


class ArgmaxState(NamedTuple):
    params: dict


def _argmax_make(config, spec, num_updates):
    n_obs, n_act = spec.observation_space.shape[0], spec.action_space.n

    def init(rng):
        return ArgmaxState({"w": jnp.zeros((n_obs, n_act)), "b": jnp.zeros((n_act,))})

    def act(params, obs, carry, rng):
        action = jnp.argmax(obs @ params["w"] + params["b"], axis=-1).astype(jnp.int32)
        carry = carry + 1.0
        return action, carry, {"logp": -carry}

    def initial_carry(n):
        return jnp.zeros((n,), jnp.float32)

    return AgentFns(init, act, None, initial_carry)


ARGMAX = Agent("argmax", ArgmaxConfig, _argmax_make)

#: the slow-compiling agent's hooks: set when its ``act`` is traced, the event its
#: tracing waits on, and how many times it was traced.
SLOW_TRACING, SLOW_RELEASE, SLOW_TRACES = threading.Event(), threading.Event(), []


def _slow_make(config, spec, num_updates):
    fns = _argmax_make(config, spec, num_updates)

    def act(params, obs, carry, rng):  # its body runs while jit traces it: the compile
        SLOW_TRACES.append(obs.shape)
        SLOW_TRACING.set()
        assert SLOW_RELEASE.wait(WAIT_MS / 1000), "the test never released the compile"
        return fns.act(params, obs, carry, rng)

    return fns._replace(act=act)


SLOW = Agent("slow", ArgmaxConfig, _slow_make)


def params_of(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"b": rng.normal(size=2).astype(np.float32),
            "w": rng.normal(size=(4, 2)).astype(np.float32)}


def is_argmax(params: dict, obs: np.ndarray, action: int) -> bool:
    """The test agent's choice by hand (NumPy): ``action`` has the best linear score
    (up to float rounding: XLA may sum in another order than NumPy)."""
    scores = obs.astype(np.float64) @ params["w"] + params["b"]
    return scores[action] >= scores.max() - 1e-5


class FakePublisher:
    """A PUB socket re-sending its current messages every 20 ms (late subscribers
    catch up, as with the real publisher's re-sends)."""

    def __init__(self, ctx: zmq.Context):
        self.sock = ctx.socket(zmq.PUB)
        self.address = "inproc://fake-params"
        self.sock.bind(self.address)
        self.messages: list = []
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def publish(self, messages: list) -> None:
        with self.lock:
            self.messages = list(messages)

    def _run(self):
        while not self.stop.wait(0.02):
            with self.lock:
                for frames in self.messages:
                    self.sock.send_multipart(frames)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close(linger=0)


@pytest.fixture
def rig():
    ctx = zmq.Context()
    pub = FakePublisher(ctx)
    sink = ctx.socket(zmq.PULL)
    sink.bind("inproc://fake-samples")
    spec = {"actor_id": 0, "run_id": 7, "env": "CartPole-v1", "envs_per_group": ENVS,
            "ring_size": 2, "segment_length": T, "seed": 3,
            "streams": [{"policy": "p", "team": None, "sample_address": "inproc://fake-samples"}],
            "carry_spec": [["carry/0", "float32", []]], "timeout_s": 60.0,
            "inline": {"param_address": pub.address, "status_address": None,
                       "agent": "test_inline_actor:ARGMAX", "agent_config": {},
                       "env": "CartPole-v1", "env_kwargs": {}, "compilation_cache_dir": ""}}
    yield ctx, pub, sink, spec
    pub.close()
    sink.close(linger=0)
    ctx.destroy(linger=0)


def segments(sink: zmq.Socket, limit: int = 500):
    """Decoded segments from the sink, one per call (fails after ``WAIT_MS`` of silence,
    or after ``limit`` segments: what the test waits for never came)."""
    for _ in range(limit):
        assert sink.poll(WAIT_MS), "the inline actor sent no segment"
        yield wire.decode(sink.recv_multipart())
    pytest.fail(f"what the test waited for did not happen in {limit} segments")


def check_segment(seg: wire.Message, params: dict[int, dict], carry_in: np.ndarray) -> np.ndarray:
    """Every action is the agent's with its recorded version's parameters and every logp
    the step count since the row's episode began (``carry_in``: the count before step 0);
    returns the count after the segment."""
    a = seg.arrays
    np.testing.assert_array_equal(a["carry/0"], carry_in)
    carry = carry_in.copy()
    for t in range(T):
        for row in range(ENVS):
            v = int(a["version"][row, t])
            assert v in params, f"version {v} was never published"
            assert is_argmax(params[v], a["obs"][row, t], int(a["action"][row, t]))
        carry = carry + 1
        np.testing.assert_array_equal(a["logp"][:, t], -carry)
        done = a["terminated"][:, t] | a["truncated"][:, t]
        carry[done] = 0  # a new episode starts from the zero carry
    return carry


def test_inline_actor_acts_with_the_newest_parameters_and_drops_malformed_ones(rig):
    ctx, pub, sink, spec = rig
    params = {3: params_of(0), 5: params_of(1)}
    pub.publish(ps.encode_chunks("p", 3, params[3], stream=11))
    actor = Actor(spec, ctx, client=InlineClient)
    thread = threading.Thread(target=actor.run, daemon=True)
    thread.start()
    try:
        stream = segments(sink)
        carry = {0: np.zeros(ENVS, np.float32), 1: np.zeros(ENVS, np.float32)}  # per ring group
        first = next(stream)
        assert first.kind == "segment" and first.meta["actor"] == 0 and first.meta["run"] == 7
        assert (first.arrays["version"] == 3).all()
        carry[first.meta["group"]] = check_segment(first, params, carry[first.meta["group"]])

        # A newer version is adopted between two steps; a group's versions never go back.
        pub.publish(ps.encode_chunks("p", 5, params[5], stream=11))
        newest = {0: 3, 1: 3}
        for seg in stream:
            g, version = seg.meta["group"], seg.arrays["version"]
            carry[g] = check_segment(seg, params, carry[g])
            assert version.min() >= newest[g] and (np.diff(version, axis=1) >= 0).all()
            newest[g] = int(version.max())
            if (version == 5).all():
                break
        policy = actor.client.policies["p"]
        assert policy.version == 5

        # Malformed messages: junk frames, then a version of as many bytes but the wrong
        # leaf shapes. Both are dropped (counted by reason); version 5 stays in use.
        wrong = {"b": np.zeros(2, np.float32), "w": np.zeros((2, 4), np.float32)}
        pub.publish([[ps.topic("p"), b"not a wire header", b"junk"]]
                    + ps.encode_chunks("p", 9, wrong, stream=11))
        for seg in stream:
            g = seg.meta["group"]
            carry[g] = check_segment(seg, params, carry[g])
            assert (seg.arrays["version"] == 5).all()
            dropped = policy.subscriber.dropped
            if dropped["malformed"] >= 1 and dropped["mismatch"] >= 1:
                break
        assert policy.version == 5
        assert "mismatch" in policy.subscriber.last_drop or "malformed" in policy.subscriber.last_drop
        seg = next(stream)  # still acting, with the old parameters
        assert (seg.arrays["version"] == 5).all()
        check_segment(seg, params, carry[seg.meta["group"]])
    finally:
        actor.stop.set()
        thread.join(10)
        actor.close()
    assert not thread.is_alive() and actor.error is None


def test_inline_actor_gives_up_without_parameters(rig):
    ctx, pub, sink, spec = rig
    actor = Actor({**spec, "startup_timeout_s": 0.3}, ctx, client=InlineClient)
    try:
        with pytest.raises(TimeoutError, match="no parameters of policy 'p' arrived"):
            actor.run()
    finally:
        actor.close()


def test_plain_and_inline_actors_refuse_each_others_specs(rig):
    ctx, pub, sink, spec = rig
    with pytest.raises(ValueError, match="run it with jaxsrl.workers.inline"):
        Actor(spec, ctx)
    plain = {**spec, "inline": None,
             "streams": [{**spec["streams"][0], "inference_address": "inproc://nowhere"}]}
    with pytest.raises(ValueError, match="needs the spec's 'inline' settings"):
        Actor(plain, ctx, client=InlineClient)


def test_inline_actor_keeps_reporting_while_act_compiles(rig):
    """A first compile of ``act`` as long as the test wants (its tracing waits on an
    event): the actor compiles before it steps and keeps sending ``inline_status``
    messages (what marks it alive to the launcher's hang detection) and beating all
    the while; released, it steps without compiling again."""
    ctx, pub, sink, spec = rig
    status = ctx.socket(zmq.PULL)
    status.bind("inproc://fake-status")
    spec = {**spec, "ping_interval_s": 0.01,
            "inline": {**spec["inline"], "agent": "test_inline_actor:SLOW",
                       "status_address": "inproc://fake-status"}}
    SLOW_TRACING.clear()
    SLOW_RELEASE.clear()
    SLOW_TRACES.clear()
    pub.publish(ps.encode_chunks("p", 3, params_of(0), stream=11))
    actor = Actor(spec, ctx, client=InlineClient)
    thread = threading.Thread(target=actor.run, daemon=True)
    thread.start()
    try:
        assert SLOW_TRACING.wait(WAIT_MS / 1000), "act was never compiled"
        beat = actor.heartbeat
        held = 0  # statuses since the parameters came (older ones say version -1)
        while held < 3:  # statuses keep coming while the compile is held
            assert status.poll(WAIT_MS // 4), "no status while act compiles: it would be taken for hung"
            meta = wire.decode(status.recv_multipart()).meta
            assert meta["actor"] == 0
            held += meta["versions"] == {"p": 3}
        assert actor.heartbeat > beat and not SLOW_RELEASE.is_set()
        SLOW_RELEASE.set()
        for seg, _ in zip(segments(sink), range(3)):
            assert (seg.arrays["version"] == 3).all()
        assert SLOW_TRACES == [(ENVS, 4)]  # compiled once, before stepping
    finally:
        SLOW_RELEASE.set()
        actor.stop.set()
        thread.join(10)
        actor.close()
        status.close(linger=0)
    assert not thread.is_alive() and actor.error is None

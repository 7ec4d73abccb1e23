"""The actor's action clients (jaxsrl/workers/actor/action_client.py) through their
public methods: the inline client answers with exactly the policy's ``act`` for the
parameters it received, and the plain ``Actor`` runs on any client implementing the
protocol (here a fake one choosing actions by a rule the test can check)."""

from __future__ import annotations

import collections
import threading

import jax
import numpy as np
import pytest
import zmq

from jaxsrl.streams import param_stream as ps
from jaxsrl.streams import wire
from jaxsrl.workers.actor.action_client import Actions
from jaxsrl.workers.actor.spec import ActorSpec
from jaxsrl.workers.actor.worker import Actor
from jaxsrl.workers.inline.client import InlineClient
from test_inline_actor import ARGMAX, FakePublisher, params_of

ROWS, T = 5, 4


class _Alive:
    """The actor's side of a wait: ``stop`` and ``beat`` (counted)."""

    def __init__(self):
        self.stop, self.beats = threading.Event(), 0

    def beat(self):
        self.beats += 1


def _spec(**extra) -> dict:
    return {"actor_id": 2, "run_id": 9, "env": "CartPole-v1", "envs_per_group": ROWS,
            "ring_size": 2, "segment_length": T, "seed": 1,
            "streams": [{"policy": "p", "team": None, "sample_address": "inproc://client-samples",
                         "inference_address": "inproc://unused", "sample_hwm": 100}],
            "carry_spec": [["carry/0", "float32", []]], "timeout_s": 60.0, **extra}


def test_inline_client_answers_with_the_policy_act_of_the_newest_parameters():
    ctx = zmq.Context()
    pub = FakePublisher(ctx)
    inline = {"param_address": pub.address, "status_address": None,
              "agent": "test_inline_actor:ARGMAX", "agent_config": {}, "env": "CartPole-v1",
              "env_kwargs": {}, "compilation_cache_dir": ""}
    spec = ActorSpec.from_dict({**_spec(), "inline": inline,
                                "streams": [{"policy": "p", "sample_address": "inproc://x"}]})
    fns = ARGMAX.make(ARGMAX.config_cls(), _cartpole_spec(), 1)
    act = jax.jit(fns.act)
    rng = np.random.default_rng(0)
    client = InlineClient(spec, ctx)
    alive = _Alive()
    try:
        obs = rng.normal(size=(ROWS, 4)).astype(np.float32)
        carry = np.arange(ROWS, dtype=np.float32)
        pub.publish(ps.encode_chunks("p", 3, params_of(0), stream=1))
        assert client.prepare([(0, {"obs": obs, "carry/0": carry})], alive)
        assert alive.beats > 0  # it beat while it waited for parameters and compiled
        params = {3: params_of(0), 4: params_of(1)}

        def ask(group: int) -> int:
            """One request of fresh observations; its answer is ``act`` under the
            parameters of the version it reports. Returns that version."""
            nonlocal carry
            obs = rng.normal(size=(ROWS, 4)).astype(np.float32)
            client.request(group, 0, {"obs": obs, "carry/0": carry}, {})
            got = client.receive({0: [group]}, alive)
            assert (got.stream, got.group) == (0, group) and got.version in params
            action, new_carry, extras = act(params[got.version], obs, carry, jax.random.PRNGKey(0))
            np.testing.assert_array_equal(got.arrays["action"], np.asarray(action))
            np.testing.assert_array_equal(got.arrays["logp"], np.asarray(extras["logp"]))
            np.testing.assert_array_equal(got.arrays["carry/0"], np.asarray(new_carry))
            carry = got.arrays["carry/0"]
            return got.version

        assert [ask(g) for g in (1, 0)] == [3, 3]
        pub.publish(ps.encode_chunks("p", 4, params[4], stream=1))
        newest = False
        for _ in range(2000):  # the client takes the newer version by itself, between two requests
            if ask(0) == 4:
                newest = True
                break
            alive.stop.wait(0.01)
        assert newest, "the client never acted with the newer parameters"
        assert ask(1) == 4  # and keeps them
        alive.stop.set()
        assert client.receive({0: [0]}, alive) is None
        assert client.take_failovers() == 0
    finally:
        client.close()
        pub.close()
        ctx.destroy(linger=0)


def _cartpole_spec():
    """CartPole's per-agent spaces, as an agent's ``make`` takes them."""
    from jaxsrl.core.agent import EnvSpec  # noqa: PLC0415
    from jaxsrl.envs import env_info  # noqa: PLC0415

    info = env_info("CartPole-v1", {})
    return EnvSpec(info.observation_space, info.action_space)


class FakeClient:
    """An action client by a rule: push toward the pole's lean (``obs[:, 2] > 0``),
    ``logp = -(carry + 1)`` and carry + 1 (steps since the episode began), version 7;
    one failover per segment; it checks the actor says which groups wait."""

    VERSION = 7

    def __init__(self, spec, context, curve):
        assert isinstance(spec, ActorSpec) and curve is None
        self.examples, self.requests, self.pings, self.closed = None, [], 0, False
        self.ready: collections.deque = collections.deque()

    def prepare(self, examples, alive):
        self.examples = examples
        return True

    def request(self, group, stream, arrays, meta, kept=None):
        self.requests.append((group, stream, {k: v.shape for k, v in arrays.items()}))
        carry = arrays["carry/0"] + 1
        self.ready.append(Actions(stream, group, self.VERSION, {
            "action": (arrays["obs"][:, 2] > 0).astype(np.int64), "logp": -carry, "carry/0": carry}))

    def receive(self, waiting, alive):
        if alive.stop.is_set():
            return None
        alive.beat()
        actions = self.ready.popleft()
        assert actions.group in waiting[actions.stream], (actions, waiting)
        return actions

    def ping(self):
        self.pings += 1

    def take_failovers(self):
        return 1

    def close(self):
        self.closed = True


def test_actor_runs_on_any_client_of_the_protocol():
    ctx = zmq.Context()
    sink = ctx.socket(zmq.PULL)
    sink.bind("inproc://client-samples")
    clients = []

    def make(spec, context, curve):
        clients.append(FakeClient(spec, context, curve))
        return clients[-1]

    actor = Actor(_spec(), ctx, client=make)
    try:
        actor.run(max_segments=6)
    finally:
        actor.close()
    (fake,) = clients
    assert fake.closed and actor.client is fake
    assert [i for i, _ in fake.examples] == [0] and fake.examples[0][1]["obs"].shape == (ROWS, 4)
    assert {shapes["obs"] for _, _, shapes in fake.requests} == {(ROWS, 4)}
    carry = {0: np.zeros(ROWS, np.float32), 1: np.zeros(ROWS, np.float32)}
    for _ in range(6):
        assert sink.poll(10_000)
        seg = wire.decode(sink.recv_multipart())
        a, g = seg.arrays, seg.meta["group"]
        assert seg.meta["failovers"] == 1 and "wait_s" in seg.meta["timing"]
        assert (a["version"] == FakeClient.VERSION).all()
        np.testing.assert_array_equal(a["action"], (a["obs"][:, :T, 2] > 0).astype(a["action"].dtype))
        np.testing.assert_array_equal(a["carry/0"], carry[g])
        for t in range(T):  # the carry the actor kept: steps since the episode began
            carry[g] = carry[g] + 1
            np.testing.assert_array_equal(a["logp"][:, t], -carry[g])
            carry[g][a["terminated"][:, t] | a["truncated"][:, t]] = 0
    sink.close(linger=0)
    ctx.destroy(linger=0)


def test_a_spec_with_inline_settings_needs_the_inline_client():
    with pytest.raises(ValueError, match="run it with jaxsrl.workers.inline"):
        Actor({**_spec(), "inline": {"param_address": "inproc://p"}})

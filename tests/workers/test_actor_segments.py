"""The actor's segment building (jaxsrl/workers/actor/worker.py) through its public interface:
a real ``Actor`` steps counter environments whose every observation says where it is,
a fake inference server answers over ZeroMQ, and the test reads the segments the actor
pushes, checking each field against an independent simulation of the counters."""

from __future__ import annotations

import threading
import time

import gymnasium
import numpy as np
import pytest
import zmq

from jaxsrl import envs
from jaxsrl.streams import wire
from jaxsrl.workers.actor.worker import Actor
from jaxsrl.streams.segment import dense_segment
from jaxsrl.workers.learner.trainer import segment_schema

T = 5
ACTION_OFFSET = 5.0  # the fake policy's Box actions lie far outside [-1, 1]


def episode_length(k: int, offset: int) -> int:
    return 2 + (k + offset) % 3


class CounterEnv(gymnasium.Env):
    """Observation ``[steps into the episode, episode index]``; reward = the (clipped)
    action. Episode ``k`` lasts ``episode_length(k, seed % 3)`` steps and ends
    terminated if ``k`` is even, truncated (time limit) if odd."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self):
        self.ep, self.count, self.offset = -1, 0, 0

    def _obs(self):
        return np.array([self.count, self.ep], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.offset = seed % 3
        self.ep, self.count = self.ep + 1, 0
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        end = self.count == episode_length(self.ep, self.offset)
        terminated, truncated = end and self.ep % 2 == 0, end and self.ep % 2 == 1
        return self._obs(), float(action[0]), terminated, truncated, {}


gymnasium.register("jaxsrl_test/Counter-v0", entry_point=CounterEnv)


def simulate(offset: int, steps: int) -> dict:
    """Independent reference: what row ``offset``'s env shows at each global step."""
    obs, term, trunc, final = [], [], [], []
    ep, count = 0, 0
    for _ in range(steps + 1):
        obs.append([count, ep])
        count += 1
        end = count == episode_length(ep, offset)
        term.append(end and ep % 2 == 0)
        trunc.append(end and ep % 2 == 1)
        final.append([count, ep] if trunc[-1] else [0, 0])
        if end:
            ep, count = ep + 1, 0
    return {"obs": np.array(obs, np.float32), "terminated": np.array(term),
            "truncated": np.array(trunc), "final_obs": np.array(final, np.float32)}


class TeamCounter:
    """Two agents, one team; agent ``a_1`` is absent from every odd episode (3 steps,
    truncated). Observation ``[steps into the episode, episode index]``, reward 1."""

    possible_agents = ["a_0", "a_1"]

    def __init__(self):
        self.agents, self.ep, self.count = [], -1, 0

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def team_of(self, agent):
        return "team"

    def _obs(self):
        return {a: np.array([self.count, self.ep], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.ep, self.count = self.ep + 1, 0
        self.agents = list(self.possible_agents) if self.ep % 2 == 0 else ["a_0"]
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents)  # idle rows' actions are not passed on
        self.count += 1
        end = self.count == 3
        obs = self._obs()
        return (obs, {a: 1.0 for a in self.agents}, {a: False for a in self.agents},
                {a: end for a in self.agents}, {a: {} for a in self.agents})

    def close(self):
        pass


class DiscardCounter(TeamCounter):
    """Both agents always present; episodes of 3 steps (truncated), observation ``[steps
    into the episode, episode index]``, reward 1; every episode ``k`` with ``k % 3 == 1``
    ends marked ``discard_episode`` (as hide-and-seek's when its physics fails)."""

    def reset(self, seed=None, options=None):
        self.ep, self.count = self.ep + 1, 0
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        obs, rew, term, trunc, _ = super().step(actions)
        info = {"discard_episode": self.count == 3 and self.ep % 3 == 1}
        return obs, rew, term, trunc, {a: dict(info) for a in self.agents}


def make_env(discard: bool = False, **kwargs):  # the module interface of jaxsrl.envs.multi_agent
    return DiscardCounter() if discard else TeamCounter()


class FakeServer:
    """Answers ``act`` requests: Box action ``ACTION_OFFSET + count`` (Discrete: 1),
    logp ``-count``, carry ``carry + 1`` (so an un-reset carry shows), and a version
    that changes every 3 requests. Records what it saw."""

    def __init__(self, box: bool):
        ctx = zmq.Context.instance()
        self.router, self.pull = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PULL)
        for s in (self.router, self.pull):
            s.setsockopt(zmq.LINGER, 0)
        self.inference = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        self.samples = f"tcp://127.0.0.1:{self.pull.bind_to_random_port('tcp://127.0.0.1')}"
        self.box = box
        self.versions: list[int] = []  # version given with the k-th answer
        self.carry_mismatches = 0  # requests whose carry was not the steps into the episode

    def serve(self, n_segments: int, actor: Actor, timeout_s: float = 60.0) -> list:
        thread = threading.Thread(target=actor.run, kwargs={"max_segments": n_segments},
                                  daemon=True)
        thread.start()
        segments, deadline = [], time.monotonic() + timeout_s
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.pull, zmq.POLLIN)
        while len(segments) < n_segments:
            assert time.monotonic() < deadline, "the actor sent too few segments"
            ready = dict(poller.poll(100))
            if self.pull in ready:
                segments.append(wire.decode(self.pull.recv_multipart()))
            if self.router in ready:
                identity, *frames = self.router.recv_multipart()
                msg = wire.decode(frames)
                count = msg.arrays["obs"][:, 0]
                n = len(count)
                carry = msg.arrays["carry/0"]
                self.carry_mismatches += int(np.any(carry[:, 0] != count))
                version = len(self.versions) // 3
                self.versions.append(version)
                action = ((ACTION_OFFSET + count)[:, None].astype(np.float32) if self.box
                          else np.ones(n, np.int32))
                reply = {"action": action, "logp": -count.astype(np.float32),
                         "carry/0": carry + 1}
                self.router.send_multipart([identity] + wire.encode(
                    "action", reply, {"group": msg.meta["group"], "version": version}))
        thread.join(10)
        return segments

    def close(self):
        self.router.close()
        self.pull.close()


def actor_spec(env: str, server: FakeServer, envs_per_group: int) -> dict:
    return {"actor_id": 0, "run_id": 1, "env": env, "env_kwargs": {},
            "envs_per_group": envs_per_group, "ring_size": 1, "segment_length": T, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": server.inference,
                         "sample_address": server.samples}],
            "carry_spec": [["carry/0", "float32", [1]]], "timeout_s": 30.0}


@pytest.fixture
def box_server():
    server = FakeServer(box=True)
    yield server
    server.close()


def test_segments_of_a_single_agent_counter_env(box_server):
    """Over 3 segments of 2 rows: observations and bootstrap observations, flags,
    ``final_obs`` only on truncated steps, the unclipped Box action (the env saw the
    clipped one: reward 1), logp, per-step version tags, the segment's first carry and
    the carry zeroed after every episode end; no ``valid`` array (single-agent)."""
    n_seg, rows = 3, 2
    actor = Actor(actor_spec("jaxsrl_test/Counter-v0", box_server, rows))
    try:
        segments = box_server.serve(n_seg, actor)
    finally:
        actor.close()
    space = CounterEnv.observation_space
    schema = segment_schema(space, CounterEnv.action_space, T,
                            carry=None) | {"carry/0": wire.ArraySpec("float32", (None, 1))}
    refs = [simulate(r % 3, n_seg * T) for r in range(rows)]  # env r is seeded 0 + r
    assert box_server.carry_mismatches == 0
    for j, msg in enumerate(segments):
        # final_obs travels for truncated steps only; the learner's decoding rebuilds it
        truncated = np.flatnonzero(msg.arrays["truncated"])
        np.testing.assert_array_equal(msg.arrays["final_index"], truncated)
        assert msg.arrays["final_obs"].shape == (truncated.size,) + space.shape
        a, n = dense_segment(msg.arrays, schema)  # strict: no extra arrays
        assert n == rows
        steps = slice(j * T, (j + 1) * T)
        for r, ref in enumerate(refs):
            np.testing.assert_array_equal(a["obs"][r], ref["obs"][j * T: (j + 1) * T + 1])
            np.testing.assert_array_equal(a["terminated"][r], ref["terminated"][steps])
            np.testing.assert_array_equal(a["truncated"][r], ref["truncated"][steps])
            np.testing.assert_array_equal(a["final_obs"][r], ref["final_obs"][steps])
            count = ref["obs"][steps, 0]
            np.testing.assert_array_equal(a["action"][r, :, 0], ACTION_OFFSET + count)
            np.testing.assert_array_equal(a["reward"][r], np.ones(T, np.float32))
            np.testing.assert_array_equal(a["logp"][r], -count)
            np.testing.assert_array_equal(a["carry/0"][r], [ref["obs"][j * T, 0]])
        np.testing.assert_array_equal(a["version"], np.broadcast_to(
            np.array(box_server.versions[steps], np.int32), (rows, T)))
    assert any(ref["truncated"][: n_seg * T].any() and ref["terminated"][: n_seg * T].any()
               for ref in refs)  # both kinds of episode end were exercised


def test_idle_rows_of_absent_agents_are_flagged(monkeypatch):
    """A multi-agent env whose second agent is absent from odd episodes: its row's
    steps there are sent with ``valid`` False (zero observations and rewards), every
    other step True; the segment passes the trainer's strict schema with ``idle_rows``."""
    monkeypatch.setitem(envs.MULTI_AGENT_ENVS, "jaxsrl_test_team_counter",
                        ("test_actor_segments", {}))
    assert envs.env_has_idle_rows("jaxsrl_test_team_counter")
    assert not envs.env_has_idle_rows("jaxsrl_test/Counter-v0")
    server = FakeServer(box=False)
    actor = Actor(actor_spec("jaxsrl_test_team_counter", server, 1))
    try:
        segments = server.serve(3, actor)
    finally:
        actor.close()
        server.close()
    space = TeamCounter().observation_space("a_0")
    schema = segment_schema(space, gymnasium.spaces.Discrete(2), T, idle_rows=True) | {
        "carry/0": wire.ArraySpec("float32", (None, 1))}
    saw_idle = False
    for msg in segments:
        a, n = dense_segment(msg.arrays, schema)  # strict: no extra arrays
        assert n == 2
        episode = a["obs"][0, :T, 1]  # row 0 (always present) knows the episode
        np.testing.assert_array_equal(a["valid"][0], np.ones(T, bool))
        np.testing.assert_array_equal(a["valid"][1], episode % 2 == 0)
        idle = ~a["valid"][1]
        saw_idle |= bool(idle.any())
        assert np.all(a["reward"][1][idle] == 0) and np.all(a["obs"][1, :T][idle] == 0)
    assert saw_idle


def test_discarded_episodes_are_masked_and_counted_not_reported(monkeypatch):
    """Episodes ``k % 3 == 1`` (3 steps each) end marked ``discard_episode``: every step of
    such an episode in the segment where it ends is sent not ``valid`` (its steps in an
    earlier, already sent segment stay valid), its return is in no segment's
    ``episodes``, and segment meta counts it per agent in ``episodes_discarded``; through
    the learner's gate those become the ``episodes_discarded`` metric."""
    from jaxsrl.experiment.metrics import MetricsAccumulator
    from jaxsrl.streams.segment_gate import SegmentGate

    monkeypatch.setitem(envs.MULTI_AGENT_ENVS, "jaxsrl_test_discard_counter",
                        ("test_actor_segments", {"discard": True}))
    server = FakeServer(box=False)
    n_seg = 5
    actor = Actor(actor_spec("jaxsrl_test_discard_counter", server, 1))
    try:
        segments = server.serve(n_seg, actor)
    finally:
        actor.close()
        server.close()
    space = TeamCounter().observation_space("a_0")
    schema = segment_schema(space, gymnasium.spaces.Discrete(2), T, idle_rows=True) | {
        "carry/0": wire.ArraySpec("float32", (None, 1))}
    steps = np.arange(n_seg * T)
    episode = steps // 3  # global step -> episode index
    last_segment = (3 * episode + 2) // T  # the segment where the step's episode ends
    discarded = episode % 3 == 1
    expected_valid = ~(discarded & (last_segment == steps // T))
    ended = [k for k in range(n_seg * T // 3) if 3 * k + 2 < n_seg * T]
    metrics = MetricsAccumulator()
    gate = SegmentGate(schema, T, 2, None, metrics)
    gate.version = 100  # the fake server's versions
    returns = []
    for j, msg in enumerate(segments):
        a, n = dense_segment(msg.arrays, schema)
        np.testing.assert_array_equal(a["obs"][0, :T, 1], episode[j * T:(j + 1) * T])
        for row in range(2):
            np.testing.assert_array_equal(a["valid"][row], expected_valid[j * T:(j + 1) * T])
        admitted = gate.admit(wire.encode(msg.kind, msg.arrays, msg.meta))
        assert admitted is not None
        returns += [e["return"] for e in admitted[1]]
    # exercised: episode 1 (steps 3-5) ends in segment 1, its steps in segment 0 stay
    # valid; episode 4 (steps 12-14) lies in segment 2, all masked
    assert expected_valid[3:5].all() and not expected_valid[5] and not expected_valid[12:15].any()
    n_discarded = sum(k % 3 == 1 for k in ended)
    assert sum(m.meta["episodes_discarded"] for m in segments) == 2 * n_discarded
    assert metrics.counter("episodes_discarded") == 2 * n_discarded
    assert returns == [3.0] * (2 * (len(ended) - n_discarded))  # only whole, kept episodes

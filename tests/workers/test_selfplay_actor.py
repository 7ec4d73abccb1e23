"""A real ``Actor`` in self-play (``spec.opponents``) against fake inference servers of
two team policies, over ZeroMQ: per-episode draws follow ``p_latest`` (statistical),
rows played by a snapshot never reach the sample stream, a row's carry starts from zero
whenever its policy changes (episode start, or a snapshot the server replaced), and
finished games reach the first stream's server."""

from __future__ import annotations

import threading
import time

import gymnasium
import numpy as np
import pytest
import zmq

from jaxsrl import envs
from jaxsrl.streams import wire
from jaxsrl.streams.opponents import LATEST
from jaxsrl.workers.actor.worker import Actor

T, HORIZON, ENVS = 4, 3, 16
SNAPSHOT, REPLACEMENT = 7, 9  # what the fake servers serve draws with, and after "evicting" 7
EVICT_AT = 30  # requests per stream before snapshot 7 leaves the pool


class Duel:
    """Agents ``a_0`` (team a) and ``b_0`` (team b); obs ``[t, episode]``; a scores 1 a
    step, b -1; episodes last ``HORIZON`` steps (truncated)."""

    possible_agents = ["a_0", "b_0"]

    def __init__(self):
        self.agents, self.ep, self.t = [], -1, 0

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def team_of(self, agent):
        return agent[0]

    def _obs(self):
        return {a: np.array([self.t, self.ep], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.ep, self.t = list(self.possible_agents), self.ep + 1, 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        end = self.t == HORIZON
        return (self._obs(), {"a_0": 1.0, "b_0": -1.0}, {a: False for a in self.agents},
                {a: end for a in self.agents}, {a: {} for a in self.agents})

    def close(self):
        pass


def make_env(**kwargs):
    return Duel()


class FakeServers:
    """One ROUTER and one PULL per team policy. Serves draws with ``SNAPSHOT``, replaces
    it by ``REPLACEMENT`` (zeroing the carry, as a real server does) after ``EVICT_AT``
    requests; logp of a row = what served it (so a snapshot step in a segment shows);
    carry = carry + 1. Checks every request's carry: steps since the row's policy
    started (episode start or replacement)."""

    def __init__(self):
        ctx = zmq.Context.instance()
        self.routers, self.pulls = {}, {}
        for p in ("a", "b"):
            self.routers[p], self.pulls[p] = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PULL)
            for s in (self.routers[p], self.pulls[p]):
                s.setsockopt(zmq.LINGER, 0)
        self.addr = {p: (f"tcp://127.0.0.1:{self.routers[p].bind_to_random_port('tcp://127.0.0.1')}",
                         f"tcp://127.0.0.1:{self.pulls[p].bind_to_random_port('tcp://127.0.0.1')}")
                     for p in ("a", "b")}
        self.requests = {"a": 0, "b": 0}
        self.draw_rows = {"a": 0, "b": 0}  # rows asking for a draw (first step of an episode)
        self.first_steps = 0  # env-episodes started (rows of team a at t == 0)
        self.both_drew = 0  # env-episodes in which both teams asked for a snapshot
        self.problems: list = []
        self.games: list = []
        self.started = {p: np.zeros(ENVS) for p in ("a", "b")}  # t at which the row's policy began
        self.served_at = {}  # (policy, row) -> what served it last

    def _answer(self, p: str, frames: list) -> None:
        msg = wire.decode(frames)
        if msg.kind != "act":
            return
        self.requests[p] += 1
        obs, carry, ask = msg.arrays["obs"], msg.arrays["carry/0"][:, 0], msg.arrays["opponent"]
        t = obs[:, 0]
        served = np.where(ask <= -2, SNAPSHOT, ask).astype(np.int32)
        evicted = self.requests[p] > EVICT_AT
        replaced = evicted & (served == SNAPSHOT)
        served[replaced] = REPLACEMENT
        self.started[p][t == 0] = 0
        expected = t - self.started[p]
        bad = (carry != expected) & ~replaced
        if bad.any() or np.any(carry[ask <= -2] != 0):
            self.problems.append((p, "carry", t.tolist(), carry.tolist(), expected.tolist()))
        if evicted and np.any(ask == SNAPSHOT) and self.requests[p] > EVICT_AT + 1:
            self.problems.append((p, "asked for an evicted snapshot", ask.tolist()))
        carry = np.where(replaced, 0.0, carry)
        self.started[p][replaced] = t[replaced]
        self.draw_rows[p] += int((ask <= -2).sum())
        if p == "a":
            self.first_steps += int((t == 0).sum())
            self.games.extend(msg.meta.get("games", []))
        reply = {"action": np.zeros(len(t), np.int32), "logp": served.astype(np.float32),
                 "carry/0": (carry + 1)[:, None].astype(np.float32), "opponent": served}
        return wire.encode("action", reply, {"group": msg.meta["group"], "version": 1})

    def serve(self, actor: Actor, n_segments: int, timeout_s: float = 60.0) -> dict:
        thread = threading.Thread(target=actor.run, kwargs={"max_segments": n_segments}, daemon=True)
        thread.start()
        poller = zmq.Poller()
        for s in (*self.routers.values(), *self.pulls.values()):
            poller.register(s, zmq.POLLIN)
        segments = {"a": [], "b": []}
        deadline = time.monotonic() + timeout_s
        while thread.is_alive():
            assert time.monotonic() < deadline, "the actor sent too few segments"
            ready = dict(poller.poll(50))
            for p in ("a", "b"):
                if self.pulls[p] in ready:
                    segments[p].append(wire.decode(self.pulls[p].recv_multipart()))
                if self.routers[p] in ready:
                    identity, *frames = self.routers[p].recv_multipart()
                    reply = self._answer(p, frames)
                    if reply is not None:
                        self.routers[p].send_multipart([identity] + reply)
        for p in ("a", "b"):  # segments still queued
            while self.pulls[p].poll(200):
                segments[p].append(wire.decode(self.pulls[p].recv_multipart()))
        return segments

    def close(self):
        for s in (*self.routers.values(), *self.pulls.values()):
            s.close()


@pytest.fixture
def servers(monkeypatch):
    monkeypatch.setitem(envs.MULTI_AGENT_ENVS, "jaxsrl_test_duel", ("test_selfplay_actor", {}))
    s = FakeServers()
    yield s
    s.close()


def _spec(servers, p_latest):
    streams = [{"policy": p, "team": p, "inference_address": servers.addr[p][0],
                "sample_address": servers.addr[p][1], "sample_hwm": 1000} for p in ("a", "b")]
    return {"actor_id": 0, "run_id": 1, "env": "jaxsrl_test_duel", "env_kwargs": {},
            "envs_per_group": ENVS, "ring_size": 1, "segment_length": T, "seed": 0,
            "streams": streams, "carry_spec": [["carry/0", "float32", [1]]], "timeout_s": 30.0,
            "opponents": {"p_latest": p_latest}}


def test_draws_snapshot_rows_carries_and_games_in_a_running_actor(servers):
    p_latest, n_segments = 0.6, 60
    actor = Actor(_spec(servers, p_latest))
    try:
        segments = servers.serve(actor, n_segments)
    finally:
        actor.close()
    assert servers.problems == []
    # Draws: an env-episode asks one team to play a snapshot with probability 1 - p_latest,
    # each team half of those (binomial bounds, 5 sigma).
    n = servers.first_steps
    assert n >= 500
    for p in ("a", "b"):
        q = (1 - p_latest) / 2
        assert abs(servers.draw_rows[p] - n * q) <= 5 * np.sqrt(n * q * (1 - q)) + 1
    # Rows played by a snapshot never reach the sample stream: every sent step is latest's.
    sent_rows = 0
    for p in ("a", "b"):
        for msg in segments[p]:
            assert np.all(msg.arrays["logp"] == LATEST), "a snapshot-played step was sent"
            sent_rows += len(msg.arrays["logp"])
    assert 0 < sent_rows < 2 * ENVS * len(segments["a"] + segments["b"])
    # Env frames are not lost when a stream sends nothing: sent + still pending = stepped.
    steps = sum(m.meta["env_steps"] for p in segments for m in segments[p])
    pending = sum(g.draws.pending_steps for g in actor.groups)
    assert steps + pending == ENVS * T * (n_segments // 2)  # both streams fill each round
    # Games: one per finished env-episode, scores a 3, b -3, opponents as served.
    assert len(servers.games) >= n - 2 * ENVS
    for g in servers.games:
        assert g["a"][1] == HORIZON and g["b"][1] == -HORIZON
        assert g["a"][0] in (LATEST, SNAPSHOT, REPLACEMENT) and g["b"][0] in (LATEST, SNAPSHOT, REPLACEMENT)
        assert g["a"][0] == LATEST or g["b"][0] == LATEST
    assert any(g["a"][0] == REPLACEMENT or g["b"][0] == REPLACEMENT for g in servers.games)

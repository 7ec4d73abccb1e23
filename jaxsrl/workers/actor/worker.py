"""Actor worker: a CPU process that steps a ring of environment groups.

It imports no JAX. Each of its ``ring_size`` groups holds ``envs_per_group``
environments; while one group waits for actions from the inference server(s), the
others step (SRL's environment ring). A group's rows (one row = one agent in one
environment) are split among the actor's *streams*, one per policy (a stream serves
the rows whose team matches its filter, or all rows). Each stream's rows are cut into
segments of ``T`` steps plus one bootstrap observation, tagged with the policy
version of each action, and pushed on that policy's sample stream.

Recurrent policies: the actor keeps each row's recurrent state (``carry``), sends it
with every request, stores the server's new one, zeroes it at episode start (the
agent's ``initial_carry`` must be zeros) and records each segment's first carry.

Messages (see ``docs/architecture.md``):
  -> inference: ``act``    meta {actor, run, group}; arrays obs..., carry/i...
  <- inference: ``action`` meta {group, version}; arrays action [n, ...], logp [n], carry/i...
  -> samples:   ``segment`` meta {actor, run, group, env_steps, episodes, timing, failovers,
                episodes_discarded};
                arrays obs... [n, T+1, ...], final_obs... [K, ...] with final_index [K]
                int32 (only the K truncated steps, row * T + t: jaxsrl.streams.segment.
                pack_final_obs), action, reward, terminated, truncated, logp,
                version [n, T], carry/i... [n, ...], and
                valid [n, T] (False on idle steps) from groups whose rows can be idle
                (``jaxsrl.envs.env_has_idle_rows``: multi-agent envs; single-agent ones send none)

Run as ``python -m jaxsrl.workers.actor '<json spec>'`` (the launcher does this).
While a segment waits for room in the learner's queue (backpressure), the actor sends
``ping`` messages (meta {actor, run}, no arrays, no reply) on its inference streams
every ``ping_interval_s`` (1 s), so the launcher's hang detection does not take a
throttled actor for a hung one.

Failover: a stream may list several inference servers (``inference_addresses``, its
own first; remote servers, see ``jaxsrl/launch/topology.py``). If the current one leaves a
request unanswered for ``failover_s`` (default 5 s), the actor connects a fresh DEALER
socket to the next address (replies still on their way from the old one are lost
with the old socket) and re-sends that stream's outstanding requests; failovers are
logged and counted in segment meta (``failovers``, since the previous segment).

Discarded episodes (hide-and-seek's ``info["discard_episode"]``: its physics failed;
``StepResult.discarded``): not in ``episodes``; every step of such an episode the
actor still holds (the current segment's, the failed step included) is sent not
``valid``, so learners skip it; agent episodes discarded are counted in segment meta
(``episodes_discarded``, since the previous segment; the metric of that name). Steps of
the episode in segments already sent stay valid (each passed the physics check).

Serial mode (``--launcher=serial``) runs the same :class:`Actor` as a thread of the
launcher's process through :func:`run_actor`, with the run's ZeroMQ context (its
``inproc://`` addresses) and a ``stop`` event in place of SIGTERM.

Exit codes, :func:`run_actor` and :func:`main`: :mod:`~jaxsrl.workers.actor.process`.

With ``spec["curve_server_key"]`` set, every socket is a CURVE client of that server
key, with this actor's keypair from the environment (:mod:`jaxsrl.streams.security`).

In one process with other workers (tests, a serial launcher), :class:`Actor` is a
:class:`~jaxsrl.core.worker.Worker`: ``run()`` in a thread; ``stop.set()`` ends it
within ``_POLL_SLICE_MS`` (dropping a segment waiting for the learner's queue).

Self-play (``spec.opponents``): requests carry ``opponent`` (and finished ``games`` in
meta), replies say what served each row; rows played by snapshots are not sent
(:mod:`~jaxsrl.workers.actor.opponents`). Files: this one is the event loop;
:mod:`~jaxsrl.workers.actor.spec` the spec, :mod:`~jaxsrl.workers.actor.segments` a ring
slot and its buffers, :mod:`~jaxsrl.workers.actor.policy_stream` one policy's sockets,
:mod:`~jaxsrl.workers.actor.process` the process around it (exit codes).
"""

from __future__ import annotations

import logging
import math
import sys
import time

import numpy as np
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.envs import env_has_idle_rows, make_actor_env
from jaxsrl.streams import security, wire
from jaxsrl.streams.spaces import action_leaf
from jaxsrl.streams.opponents import OPPONENT
from jaxsrl.streams.segment import pack_final_obs
from jaxsrl.workers.actor.opponents import SelfPlayDraws
from jaxsrl.workers.actor.policy_stream import PolicyStream
from jaxsrl.workers.actor.process import LearnerTimeout, main, run_actor  # re-exported
from jaxsrl.workers.actor.segments import EnvError, Group, take_rows
from jaxsrl.workers.actor.spec import ActorSpec

__all__ = ["Actor", "EnvError", "LearnerTimeout", "main", "run_actor"]  # the last three: process.py

log = logging.getLogger("jaxsrl.actor")
#: longest single wait of the event loop (ms): how soon a set ``stop`` is noticed.
_POLL_SLICE_MS = 100


class Actor(Worker):
    """The actor's event loop (see module docstring).

    Inline inference (:class:`jaxsrl.workers.inline.worker.InlineActor`) subclasses it
    and replaces the three places where it meets its inference servers:
    :meth:`_send_request`, :meth:`_receive` and :meth:`_ping`.

    Args:
      spec: the launcher's spec (:class:`~jaxsrl.workers.actor.spec.ActorSpec` or its
        JSON form).
      context: ZeroMQ context of its sockets (default: the process-wide one).

    Raises:
      EnvError: an environment could not be built or reset.
      ValueError: a bad spec.
      RuntimeError: the spec asks for CURVE but the keypair is not in the environment.
    """

    #: whether this class acts itself (the spec's ``inline`` settings must match).
    inline = False

    def __init__(self, spec: dict | ActorSpec, context: zmq.Context | None = None):
        spec = spec if isinstance(spec, ActorSpec) else ActorSpec.from_dict(spec)
        super().__init__(f"actor {spec.actor_id}")
        self.spec = spec
        self.actor_id, self.run_id = spec.actor_id, spec.run_id
        self.T = spec.segment_length
        self.timeout_ms = int(1000 * spec.timeout_s)
        self.startup_timeout_ms = int(1000 * spec.startup_timeout_s)
        self.failover_s = spec.failover_s
        self.failovers = 0  # since the last segment sent
        self.episodes_discarded = 0  # agent episodes, since the last segment sent
        ctx = context or zmq.Context.instance()
        curve = None
        if spec.curve_server_key:
            keys = security.client_keys_from_env()
            if keys is None:
                raise RuntimeError("spec asks for CURVE but the actor's keypair is not in "
                                   f"${security.ENV_CLIENT_PUBLIC} / ${security.ENV_CLIENT_SECRET}")
            curve = (spec.curve_server_key, *keys)
        self.sample_timeout_s = spec.sample_timeout_s
        self.ping_interval_s = spec.ping_interval_s
        self._last_ping = 0.0
        if bool(spec.inline) != self.inline:
            raise ValueError("the spec asks for inline inference: run it with "
                             "jaxsrl.workers.inline" if spec.inline else
                             "an inline actor needs the spec's 'inline' settings")
        self.streams = [PolicyStream(s, ctx, curve) for s in spec.streams]
        self.poller = zmq.Poller()
        for s in self.streams:
            if s.inference is not None:
                self.poller.register(s.inference, zmq.POLLIN)
        self._socket_stream = {s.inference: i for i, s in enumerate(self.streams)}
        n = spec.envs_per_group
        self.groups = []
        for g in range(spec.ring_size):
            seed = spec.seed + 10_000 * self.actor_id + n * g
            try:
                env = make_actor_env(spec.env, n, seed, spec.env_kwargs, spec.clip_actions)
            except Exception as exc:
                raise EnvError(f"environment construction raised {type(exc).__name__}: {exc}") from exc
            if g == 0:
                self.action_leaf = action_leaf(env.action_space)
            self.groups.append(Group(env, self.streams, self.T, spec.carry_spec, self.action_leaf,
                                     env_has_idle_rows(spec.env)))  # rows of absent agents
        self.timing = {"env_s": 0.0, "wait_s": 0.0}
        rng = np.random.default_rng([spec.seed, spec.actor_id, spec.run_id, 1729])
        for group in self.groups:  # self-play: who plays each episode (None: latest only)
            group.draws = SelfPlayDraws(spec.opponents["p_latest"], group.rows,
                                        [s.policy for s in self.streams], group.env.num_envs,
                                        rng, group.env.num_rows) if spec.opponents else None

    def _request(self, g: int) -> None:
        for i in range(len(self.streams)):
            self._send_request(g, i)

    def _send_request(self, g: int, i: int) -> None:
        group, stream = self.groups[g], self.streams[i]
        if not self._outstanding(i):  # the stream's silence clock runs while it waits
            stream.silent_since = stream.tried_at = time.monotonic()
        arrays = take_rows(group.obs, group.rows[i])
        arrays.update(group.carry[i])
        meta = {"actor": self.actor_id, "run": self.run_id, "group": g}
        if group.draws:
            arrays[OPPONENT] = group.draws.request[i].copy()
            games = group.draws.take_games() if i == 0 else None
            if games:
                meta["games"] = games
        stream.inference.send_multipart(wire.encode("act", arrays, meta), copy=False)
        group.waiting.add(i)

    def _outstanding(self, i: int) -> bool:
        return any(i in group.waiting for group in self.groups)

    def _limit_s(self, i: int) -> float:
        """Longest silence of stream ``i``'s servers before the actor gives up. Until
        a stream's first answer its servers may still be compiling: wait longer."""
        return (self.timeout_ms if self.streams[i].has_answered else self.startup_timeout_ms) / 1000

    def _deadline(self, i: int) -> float:
        stream = self.streams[i]
        if len(stream.addresses) == 1:
            return stream.silent_since + self._limit_s(i)
        return stream.tried_at + min(self.failover_s, self._limit_s(i))

    def _fail_over(self, i: int) -> None:
        """Stream ``i``'s server missed its deadline: try the next one, re-sending the
        stream's outstanding requests.

        Raises:
          TimeoutError: the stream was silent for its whole limit and every server of it
            was tried (or it has only one).
        """
        stream, now = self.streams[i], time.monotonic()
        limit = self._limit_s(i)
        if len(stream.addresses) == 1:
            raise TimeoutError(f"inference server(s) at {stream.inference_address} did not "
                               f"answer within {limit:.1f} s")
        if now - stream.silent_since >= limit and stream.tried >= len(stream.addresses):
            raise TimeoutError(f"inference servers at {', '.join(stream.addresses)} did not "
                               f"answer within {limit:.1f} s (each tried, failing over after "
                               f"{self.failover_s:g} s)")
        old, waited = stream.inference_address, now - stream.tried_at
        self.poller.unregister(stream.inference)
        del self._socket_stream[stream.inference]
        sock = stream.failover()
        self.poller.register(sock, zmq.POLLIN)
        self._socket_stream[sock] = i
        resend = [g for g, group in enumerate(self.groups) if i in group.waiting]
        for g in resend:
            self._send_request(g, i)
        self.failovers += 1
        log.warning("inference server %s did not answer in %.1f s; failing over to %s "
                    "(re-sent %d request(s))", old, waited, stream.inference_address, len(resend))

    def _receive(self) -> tuple[int, wire.Message] | None:
        """The next reply and its stream's index; ``None`` once ``stop`` is set.

        Raises:
          TimeoutError: a stream's servers stayed silent too long (:meth:`_fail_over`).
        """
        t0 = time.perf_counter()
        while True:
            if self.stop.is_set():
                return None
            self.beat()
            waiting = [i for i in range(len(self.streams)) if self._outstanding(i)]
            now = time.monotonic()
            deadline = min((self._deadline(i) for i in waiting), default=now + self.timeout_ms / 1000)
            wait_ms = min(_POLL_SLICE_MS, max(0, math.ceil(1000 * (deadline - now))))
            ready = dict(self.poller.poll(wait_ms))
            if ready:
                break
            now = time.monotonic()
            for i in waiting:
                if now >= self._deadline(i):
                    self._fail_over(i)
        sock = next(iter(ready))
        i = self._socket_stream[sock]
        self.streams[i].answered()
        try:
            msg = wire.decode(sock.recv_multipart())
        except wire.WireError as exc:
            msg = wire.Message("invalid", {"error": str(exc)}, {})
        self.timing["wait_s"] += time.perf_counter() - t0
        return i, msg

    def _run(self, max_segments: int | None = None) -> None:
        """Loop until ``stop`` is set, SIGTERM (``SystemExit``), or ``max_segments``
        segments were sent (for tests). ``run(max_segments)`` calls this."""
        self.ready.set()
        self.start_serving()
        for g in range(len(self.groups)):
            self._request(g)
        sent = 0
        while max_segments is None or sent < max_segments:
            received = self._receive()
            if received is None:  # stopped
                return
            i, msg = received
            g = msg.meta.get("group")
            if (msg.kind != "action" or not isinstance(g, int) or not 0 <= g < len(self.groups)
                    or i not in self.groups[g].waiting
                    or not self.groups[g].reply_ok(msg, i, self.action_leaf[1])):
                log.warning("dropping unexpected reply kind=%r group=%r %s", msg.kind, g,
                            msg.meta.get("error", ""))
                continue
            group = self.groups[g]
            group.store_reply(msg, i)
            group.waiting.discard(i)
            if not group.waiting:
                sent += self._step(g)

    def _step(self, g: int) -> int:
        group = self.groups[g]
        t0 = time.perf_counter()
        try:
            step = group.env.step(group.action)
        except Exception as exc:
            raise EnvError(f"environment step raised {type(exc).__name__}: {exc}") from exc
        self.timing["env_s"] += time.perf_counter() - t0
        group.obs = step.obs
        done = step.terminated | step.truncated
        discarded = step.discarded
        if discarded is not None:
            self.episodes_discarded += int(np.count_nonzero(discarded))
        if group.draws:
            group.draws.stepped(step.reward, done, step.valid, discarded)
        full = []
        for i, rows in enumerate(group.rows):
            for v in group.carry[i].values():
                v[done[rows]] = 0  # a new episode starts from the initial (zero) carry
            buf = group.buffers[i]
            if buf.record(group.action[rows], group.logp[rows], group.version[i], step.reward[rows],
                          step.terminated[rows], step.truncated[rows], take_rows(step.obs, rows),
                          take_rows(step.final_obs, rows) if step.truncated[rows].any() else {},
                          None if step.valid is None else step.valid[rows],
                          None if discarded is None else discarded[rows]):
                full.append(i)
        for i in range(len(self.streams)):
            group.buffers[i].episodes.extend(step.episodes if i == 0 else ())
        self._request(g)  # keep the server busy before sending samples
        for i in full:
            self._send_segment(g, i)
        return len(full)

    def _send_segment(self, g: int, i: int) -> None:
        group, buf = self.groups[g], self.groups[g].buffers[i]
        # Environment frames (not agent steps) and episodes are counted on the first stream only.
        arrays, steps = buf.arrays(), group.env.num_envs * buf.T if i == 0 else 0
        episodes = buf.episodes
        if group.draws:  # self-play: rows played by snapshots are not sent
            arrays, steps, episodes = group.draws.segment(i, arrays, steps, episodes, buf.T)
        if arrays is not None:
            meta = {"actor": self.actor_id, "run": self.run_id, "group": g, "env_steps": steps,
                    "episodes": episodes, "timing": dict(self.timing) if i == 0 else {},
                    "failovers": self.failovers if i == 0 else 0,
                    "episodes_discarded": self.episodes_discarded if i == 0 else 0}
            if i == 0:
                self.timing = {"env_s": 0.0, "wait_s": 0.0}
                self.failovers = self.episodes_discarded = 0
            self._push(self.streams[i], wire.encode("segment", pack_final_obs(arrays), meta))
        buf.start(take_rows(group.obs, group.rows[i]), group.carry[i])

    def _push(self, stream: PolicyStream, frames: list) -> None:
        """Send a segment; while the learner's queue is full (backpressure), tell the
        inference servers this actor is alive (``ping``) so it is not taken for hung.

        Raises:
          LearnerTimeout: the learner took nothing for ``sample_timeout_s``.
        """
        deadline = time.monotonic() + self.sample_timeout_s
        while True:
            try:
                stream.samples.send_multipart(frames, flags=zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            if self.stop.is_set():  # stopping: the segment is dropped
                return
            now = time.monotonic()
            if now >= deadline:
                raise LearnerTimeout(f"the learner at {stream.sample_address} did not take a "
                                     f"segment in time (sample_timeout_s={self.sample_timeout_s:g})")
            if now - self._last_ping >= self.ping_interval_s:
                self._last_ping = now
                self._ping()
            self.beat()
            stream.samples.poll(min(1000, 1000 * max(0.0, deadline - now)), zmq.POLLOUT)

    def _ping(self) -> None:
        """Tell the inference servers this actor is alive while it waits on its learner."""
        meta = {"actor": self.actor_id, "run": self.run_id}
        for s in self.streams:
            try:
                s.inference.send_multipart(wire.encode("ping", {}, meta), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass

    def close(self) -> None:
        for group in self.groups:
            try:
                group.env.close()
            except Exception:  # noqa: BLE001  (a broken env must not hide the real error)
                log.exception("closing an environment failed")
        for s in self.streams:
            s.close()


if __name__ == "__main__":
    sys.exit(main())

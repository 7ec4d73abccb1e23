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
  -> samples:   ``segment`` meta {actor, run, group, env_steps, episodes, timing, failovers};
                arrays obs... [n, T+1, ...], final_obs... [n, T, ...], action, reward,
                terminated, truncated, logp, version [n, T], carry/i... [n, ...], and
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

Serial mode (``--launcher=serial``) runs the same :class:`Actor` as a thread of the
launcher's process through :func:`run_actor`, with the run's ZeroMQ context (its
``inproc://`` addresses) and a ``stop`` event in place of SIGTERM.

Exit codes: 0 stopped by SIGTERM/SIGINT (or the ``stop`` event); 3 no inference server of a stream answered in
``timeout_s`` (``startup_timeout_s``, default 300 s, for the first answer: servers
compile while actors start; with fallbacks, after every server was tried); 4 the
environment raised in ``reset`` or ``step`` (traceback logged, and written to
``spec["error_file"]`` if given); 5 the learner did not take a segment in
``sample_timeout_s`` (default ``10 * timeout_s``); 1 any other error (traceback on
stderr).

With ``spec["curve_server_key"]`` set, every socket is a CURVE client of that server
key, with this actor's keypair from the environment (:mod:`jaxsrl.streams.security`).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import traceback
from typing import Any

import numpy as np
import zmq

from jaxsrl.streams import security
from jaxsrl.streams import wire
from jaxsrl.envs import env_has_idle_rows, make_actor_env
from jaxsrl.streams.spaces import action_leaf
from jaxsrl.core.child import die_with_parent, install_stop_signals, write_error
from jaxsrl.core.exit_codes import EXIT_ENV_ERROR, EXIT_LEARNER_TIMEOUT, EXIT_SERVER_TIMEOUT

log = logging.getLogger("jaxsrl.actor")



class EnvError(RuntimeError):
    """The environment raised in ``reset`` or ``step`` (the original is the ``__cause__``)."""


class LearnerTimeout(TimeoutError):
    """A trainer did not take a segment within the sample timeout."""


class Stopped(Exception):
    """The actor's ``stop`` event was set (serial mode's SIGTERM): :meth:`Actor.run` returns."""


#: Longest blocking wait (ms) of an actor with a ``stop`` event: how soon it sees the event.
STOP_POLL_MS = 100


class SegmentBuffer:
    """Preallocated ``[rows, T(+1), ...]`` buffers for one stream's current segment.

    With ``with_valid`` it also keeps ``valid`` ``[rows, T]`` bool per-step validity
    flags (``StepResult.valid``), sent as the segment's ``valid`` array."""

    def __init__(self, first_obs: dict, T: int, action_dtype: str, action_shape: tuple, carry: dict,
                 with_valid: bool = False):
        rows = len(next(iter(first_obs.values())))
        self.T, self.t = T, 0
        self.obs = {k: np.zeros((rows, T + 1) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.final_obs = {k: np.zeros((rows, T) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.action = np.zeros((rows, T) + action_shape, action_dtype)
        self.reward = np.zeros((rows, T), np.float32)
        self.terminated = np.zeros((rows, T), bool)
        self.truncated = np.zeros((rows, T), bool)
        self.logp = np.zeros((rows, T), np.float32)
        self.version = np.zeros((rows, T), np.int32)
        self.valid = np.ones((rows, T), bool) if with_valid else None
        self.carry = {k: np.zeros_like(v) for k, v in carry.items()}
        self.episodes: list = []
        self.start(first_obs, carry)

    def start(self, obs: dict, carry: dict) -> None:
        self.t = 0
        self.episodes = []
        for k, v in obs.items():
            self.obs[k][:, 0] = v
        for k, v in carry.items():
            self.carry[k][:] = v

    def record(self, action, logp, version: int, reward, terminated, truncated, obs, final_obs,
               valid=None) -> bool:
        """Store one step; returns True when the segment is full."""
        t = self.t
        if self.valid is not None:
            self.valid[:, t] = valid
        self.action[:, t] = action
        self.logp[:, t] = logp
        self.version[:, t] = version
        self.reward[:, t] = reward
        self.terminated[:, t] = terminated
        self.truncated[:, t] = truncated
        for k, v in obs.items():
            self.obs[k][:, t + 1] = v
        for k, v in final_obs.items():
            self.final_obs[k][:, t] = v
        self.t += 1
        return self.t == self.T

    def arrays(self) -> dict:
        out = dict(self.obs)
        out.update({"final_" + k: v for k, v in self.final_obs.items()})
        out.update(action=self.action, reward=self.reward, terminated=self.terminated,
                   truncated=self.truncated, logp=self.logp, version=self.version)
        if self.valid is not None:
            out["valid"] = self.valid
        out.update(self.carry)
        return out


class Stream:
    """One policy's view of the actor: its sockets and the rows of each group it serves."""

    def __init__(self, spec: dict, ctx: zmq.Context, curve: tuple | None = None):
        self.policy = spec["policy"]
        self.team = spec.get("team")
        self.addresses = list(spec.get("inference_addresses") or [spec["inference_address"]])
        self.current = 0  # index of the server in use
        self.sample_address = spec["sample_address"]
        self._ctx, self._curve = ctx, curve
        self.inference = self._connect(self.addresses[0])
        self.samples = ctx.socket(zmq.PUSH)
        self.samples.setsockopt(zmq.LINGER, 1000)
        self.samples.setsockopt(zmq.SNDHWM, int(spec.get("sample_hwm", 2)))
        if curve is not None:
            security.make_client(self.samples, *curve)
        self.samples.connect(spec["sample_address"])
        # Failover state: since when requests wait without an answer, since when the
        # current server has been tried, servers tried since the last answer.
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = False

    @property
    def inference_address(self) -> str:
        return self.addresses[self.current]

    def _connect(self, address: str) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self._curve is not None:
            security.make_client(sock, *self._curve)
        sock.connect(address)
        return sock

    def failover(self) -> zmq.Socket:
        """Close the inference socket and connect a fresh one to the next server."""
        self.inference.close()
        self.current = (self.current + 1) % len(self.addresses)
        self.inference = self._connect(self.addresses[self.current])
        self.tried += 1
        self.tried_at = time.monotonic()
        return self.inference

    def answered(self) -> None:
        """A message came from the current server: it is alive."""
        self.silent_since = self.tried_at = time.monotonic()
        self.tried = 1
        self.has_answered = True

    def rows_of(self, env) -> np.ndarray:
        teams = getattr(env, "row_team", None)
        if self.team is None or teams is None:
            return np.arange(env.num_rows)
        return np.flatnonzero(np.asarray(teams) == self.team)

    def close(self) -> None:
        self.inference.close()
        self.samples.close()


class Group:
    """One ring slot: its environments, and per stream its rows, carry and segment."""

    def __init__(self, env, streams: list, T: int, carry_spec: list, action: tuple,
                 with_valid: bool = False):
        self.env = env
        self.rows = [s.rows_of(env) for s in streams]
        self.carry = [{name: np.zeros((len(r),) + tuple(shape), dtype) for name, dtype, shape in carry_spec}
                      for r in self.rows]
        self.action = np.zeros((env.num_rows,) + action[1], action[0])
        self.logp = np.zeros(env.num_rows, np.float32)
        self.version = [0] * len(streams)
        self.waiting: set = set()
        try:
            self.obs = env.reset()
        except Exception as exc:
            raise EnvError(f"environment reset raised {type(exc).__name__}: {exc}") from exc
        self.buffers = [SegmentBuffer(self._slice(self.obs, r), T, action[0], action[1], c, with_valid)
                        for r, c in zip(self.rows, self.carry)]

    @staticmethod
    def _slice(named: dict, rows: np.ndarray) -> dict:
        return {k: v[rows] for k, v in named.items()}


class Actor:
    """The actor's event loop (see module docstring). ``spec`` is the launcher's dict.

    ``context``: the ZeroMQ context of its sockets (default: the process-wide one);
    ``stop``: an event (``is_set()``) that ends :meth:`run` within ``STOP_POLL_MS``
    of a blocking wait (serial mode; ``None``: only a signal stops it).
    """

    def __init__(self, spec: dict, context: zmq.Context | None = None, stop: Any = None):
        self.spec = spec
        self.stop = stop
        self.actor_id, self.run_id = int(spec["actor_id"]), int(spec["run_id"])
        self.T = int(spec["segment_length"])
        self.timeout_ms = int(1000 * float(spec.get("timeout_s", 30.0)))
        self.startup_timeout_ms = int(1000 * float(spec.get("startup_timeout_s",
                                                              max(300.0, self.timeout_ms / 1000))))
        self.failover_s = float(spec.get("failover_s", 5.0))
        self.failovers = 0  # since the last segment sent
        sample_timeout_s = float(spec.get("sample_timeout_s", 10 * self.timeout_ms / 1000))
        ctx = context or zmq.Context.instance()
        curve = None
        if spec.get("curve_server_key"):
            keys = security.client_keys_from_env()
            if keys is None:
                raise RuntimeError("spec asks for CURVE but the actor's keypair is not in "
                                   f"${security.ENV_CLIENT_PUBLIC} / ${security.ENV_CLIENT_SECRET}")
            curve = (spec["curve_server_key"], *keys)
        self.sample_timeout_s = sample_timeout_s
        self.ping_interval_s = float(spec.get("ping_interval_s", 1.0))
        self._last_ping = 0.0
        self.streams = [Stream(s, ctx, curve) for s in spec["streams"]]
        self.poller = zmq.Poller()
        for s in self.streams:
            self.poller.register(s.inference, zmq.POLLIN)
        self._socket_stream = {s.inference: i for i, s in enumerate(self.streams)}
        n = int(spec["envs_per_group"])
        carry_spec = spec.get("carry_spec", [])
        self.groups = []
        for g in range(int(spec["ring_size"])):
            seed = int(spec["seed"]) + 10_000 * self.actor_id + n * g
            try:
                env = make_actor_env(spec["env"], n, seed, spec.get("env_kwargs"))
            except Exception as exc:
                raise EnvError(f"environment construction raised {type(exc).__name__}: {exc}") from exc
            if g == 0:
                self.action_leaf = action_leaf(env.action_space)
            self.groups.append(Group(env, self.streams, self.T, carry_spec, self.action_leaf,
                                     env_has_idle_rows(spec["env"])))  # rows of absent agents
        self.timing = {"env_s": 0.0, "wait_s": 0.0}

    def _request(self, g: int) -> None:
        for i in range(len(self.streams)):
            self._send_request(g, i)

    def _send_request(self, g: int, i: int) -> None:
        group, stream = self.groups[g], self.streams[i]
        if not self._outstanding(i):  # the stream's silence clock runs while it waits
            stream.silent_since = stream.tried_at = time.monotonic()
        arrays = Group._slice(group.obs, group.rows[i])
        arrays.update(group.carry[i])
        meta = {"actor": self.actor_id, "run": self.run_id, "group": g}
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

    def _receive(self) -> tuple[int, wire.Message]:
        t0 = time.perf_counter()
        while True:
            waiting = [i for i in range(len(self.streams)) if self._outstanding(i)]
            now = time.monotonic()
            deadline = min((self._deadline(i) for i in waiting), default=now + self.timeout_ms / 1000)
            ready = dict(self.poller.poll(self._wait_ms(deadline - now)))
            if ready:
                break
            self._check_stop()
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

    def _wait_ms(self, seconds: float) -> int:
        """A blocking wait of ``seconds``, in ms, cut to ``STOP_POLL_MS`` with a ``stop`` event."""
        ms = max(0, math.ceil(1000 * seconds))
        return ms if self.stop is None else min(ms, STOP_POLL_MS)

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped

    def run(self, max_segments: int | None = None) -> None:
        """Loop until stopped (or ``max_segments`` segments were sent, for tests)."""
        try:
            self._loop(max_segments)
        except Stopped:
            pass

    def _loop(self, max_segments: int | None) -> None:
        for g in range(len(self.groups)):
            self._request(g)
        sent = 0
        while max_segments is None or sent < max_segments:
            self._check_stop()
            i, msg = self._receive()
            g = msg.meta.get("group")
            if (msg.kind != "action" or not isinstance(g, int) or not 0 <= g < len(self.groups)
                    or i not in self.groups[g].waiting or not self._reply_ok(msg, g, i)):
                log.warning("dropping unexpected reply kind=%r group=%r %s", msg.kind, g,
                            msg.meta.get("error", ""))
                continue
            group = self.groups[g]
            rows = group.rows[i]
            group.action[rows] = msg.arrays["action"]
            group.logp[rows] = msg.arrays["logp"]
            group.version[i] = int(msg.meta["version"])
            for name in group.carry[i]:
                group.carry[i][name][:] = msg.arrays[name]
            group.waiting.discard(i)
            if not group.waiting:
                sent += self._step(g)

    def _reply_ok(self, msg: wire.Message, g: int, i: int) -> bool:
        """The reply has every array this group needs, with the right shapes (values
        are cast on assignment, as before)."""
        group = self.groups[g]
        n = len(group.rows[i])
        expected = {"action": (n,) + tuple(self.action_leaf[1]), "logp": (n,)}
        expected.update({k: v.shape for k, v in group.carry[i].items()})
        bad = [k for k, shape in expected.items()
               if k not in msg.arrays or tuple(msg.arrays[k].shape) != tuple(shape)]
        if bad:
            msg.meta["error"] = f"arrays {bad} missing or of the wrong shape"
            return False
        return isinstance(msg.meta.get("version"), int)

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
        full = []
        for i, rows in enumerate(group.rows):
            for v in group.carry[i].values():
                v[done[rows]] = 0  # a new episode starts from the initial (zero) carry
            buf = group.buffers[i]
            if buf.record(group.action[rows], group.logp[rows], group.version[i], step.reward[rows],
                          step.terminated[rows], step.truncated[rows], Group._slice(step.obs, rows),
                          Group._slice(step.final_obs, rows),
                          None if step.valid is None else step.valid[rows]):
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
        meta = {"actor": self.actor_id, "run": self.run_id, "group": g,
                "env_steps": int(getattr(group.env, "num_envs", group.env.num_rows)) * buf.T if i == 0 else 0,
                "episodes": buf.episodes, "timing": dict(self.timing) if i == 0 else {},
                "failovers": self.failovers if i == 0 else 0}
        if i == 0:
            self.timing = {"env_s": 0.0, "wait_s": 0.0}
            self.failovers = 0
        self._push(self.streams[i], wire.encode("segment", buf.arrays(), meta))
        buf.start(Group._slice(group.obs, group.rows[i]), group.carry[i])

    def _push(self, stream: Stream, frames: list) -> None:
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
            now = time.monotonic()
            if now >= deadline:
                raise LearnerTimeout(f"the learner at {stream.sample_address} did not take a "
                                     f"segment in time (sample_timeout_s={self.sample_timeout_s:g})")
            if now - self._last_ping >= self.ping_interval_s:
                self._last_ping = now
                meta = {"actor": self.actor_id, "run": self.run_id}
                for s in self.streams:
                    try:
                        s.inference.send_multipart(wire.encode("ping", {}, meta), flags=zmq.NOBLOCK)
                    except zmq.Again:
                        pass
            stream.samples.poll(min(1000, self._wait_ms(deadline - now)), zmq.POLLOUT)
            self._check_stop()

    def close(self) -> None:
        for group in self.groups:
            try:
                group.env.close()
            except Exception:  # noqa: BLE001  (a broken env must not hide the real error)
                log.exception("closing an environment failed")
        for s in self.streams:
            s.close()


def run_actor(spec: dict, context: zmq.Context | None = None, stop: Any = None) -> int:
    """Build and run one actor until it stops; returns its exit code (module docstring).

    The body of an actor process, and of an actor thread in serial mode (``context``,
    ``stop``: see :class:`Actor`). Errors other than the ones with an exit code propagate.
    """
    actor = None
    try:
        actor = Actor(spec, context, stop)
        actor.run()
    except LearnerTimeout as exc:
        log.error("%s; exiting", exc)
        return EXIT_LEARNER_TIMEOUT
    except TimeoutError as exc:
        log.error("%s; exiting", exc)
        return EXIT_SERVER_TIMEOUT
    except EnvError as exc:
        text = "".join(traceback.format_exception(exc.__cause__ or exc))
        log.error("%s; exiting (exit code %d)\n%s", exc, EXIT_ENV_ERROR, text)
        write_error(spec.get("error_file"), f"{exc}\n{text}")
        return EXIT_ENV_ERROR
    finally:
        if actor is not None:
            actor.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec: dict[str, Any] = json.loads(argv[0])
    logging.basicConfig(level=logging.INFO, format=f"[actor {spec['actor_id']}] %(message)s")
    die_with_parent(spec.get("parent_pid"))
    install_stop_signals()
    return run_actor(spec)


if __name__ == "__main__":
    sys.exit(main())

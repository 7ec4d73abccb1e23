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

Inference: the actor gets its actions from one action client
(:mod:`jaxsrl.workers.actor.action_client`), picked once when it is built:
:class:`~jaxsrl.workers.actor.server_client.ServerClient` (its inference servers: the
``act``/``action``/``ping`` messages, deadlines and failover are there) unless the spec
has ``inline`` settings, then the client the caller passes
(:class:`~jaxsrl.workers.inline.client.InlineClient`: the policy in this process).

Messages on the sample stream (see ``docs/architecture.md``):
  -> samples:   ``segment`` meta {actor, run, group, env_steps, episodes, timing, failovers,
                episodes_discarded};
                arrays obs... [n, T+1, ...], final_obs... [K, ...] with final_index [K]
                int32 (only the K truncated steps, row * T + t: jaxsrl.streams.segment.
                pack_final_obs), action, reward, terminated, truncated, logp,
                version [n, T], carry/i... [n, ...], and
                valid [n, T] (False on idle steps) from groups whose rows can be idle
                (``jaxsrl.envs.env_has_idle_rows``: multi-agent envs; single-agent ones send none).
                With ``spec.obs_pack`` and an env that declares boolean observation columns
                (``wire_bits``: hide-and-seek), the obs... and final_obs... leaves travel
                packed as obs#f/obs#b and final_obs#f/final_obs#b with meta ``obs_pack``
                (:mod:`jaxsrl.streams.obs_pack`; requests to inference servers too)

``timing`` holds ``env_s`` (seconds in the environments' ``step``) and ``wait_s``
(seconds in the action client: what the environments waited for actions).

Run as ``python -m jaxsrl.workers.actor '<json spec>'`` (the launcher does this;
:mod:`~jaxsrl.workers.actor.process`). While a segment waits for room in the learner's
queue (backpressure), the actor calls its client's ``ping`` every ``ping_interval_s``
(1 s), so the launcher's hang detection does not take a throttled actor for a hung one.

Discarded episodes (hide-and-seek's ``info["discard_episode"]``: its physics failed;
``StepResult.discarded``): not in ``episodes``; every step of such an episode the
actor still holds (the current segment's, the failed step included) is sent not
``valid``, so learners skip it; agent episodes discarded are counted in segment meta
(``episodes_discarded``, since the previous segment; the metric of that name). Steps of
the episode in segments already sent stay valid (each passed the physics check).

Serial mode (``--launcher=serial``) runs the same :class:`Actor` as a thread of the
launcher's process through :func:`~jaxsrl.workers.actor.process.run_actor`, with the run's ZeroMQ context (its
``inproc://`` addresses) and a ``stop`` event in place of SIGTERM.

Exit codes, :func:`~jaxsrl.workers.actor.process.run_actor` and
:func:`~jaxsrl.workers.actor.process.main`: :mod:`~jaxsrl.workers.actor.process`.

With ``spec["curve_server_key"]`` set, every socket is a CURVE client of that server
key, with this actor's keypair from the environment (:mod:`jaxsrl.streams.security`).

In one process with other workers (tests, a serial launcher), :class:`Actor` is a
:class:`~jaxsrl.core.worker.Worker`: ``run()`` in a thread; ``stop.set()`` ends it
within 100 ms (dropping a segment waiting for the learner's queue).

Self-play (``spec.opponents``): requests carry ``opponent`` (and finished ``games`` in
meta), replies say what served each row; rows played by snapshots are not sent
(:mod:`~jaxsrl.workers.actor.opponents`). Files: this one is the event loop;
:mod:`~jaxsrl.workers.actor.spec` the spec, :mod:`~jaxsrl.workers.actor.segments` a ring
slot and its buffers, :mod:`~jaxsrl.workers.actor.policy_stream` one policy's sample socket,
:mod:`~jaxsrl.workers.actor.action_client` where actions come from,
:mod:`~jaxsrl.workers.actor.process` the process around it (exit codes).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.envs import env_has_idle_rows, make_actor_env
from jaxsrl.streams import obs_pack, security, wire
from jaxsrl.streams.opponents import OPPONENT
from jaxsrl.streams.segment import pack_final_obs
from jaxsrl.streams.spaces import action_leaf, space_leaves
from jaxsrl.workers.actor.action_client import ActionClient, ClientFactory
from jaxsrl.workers.actor.opponents import SelfPlayDraws
from jaxsrl.workers.actor.policy_stream import PolicyStream
from jaxsrl.workers.actor.segments import EnvError, Group, take_rows
from jaxsrl.workers.actor.server_client import ServerClient
from jaxsrl.workers.actor.spec import ActorSpec

__all__ = ["Actor", "EnvError", "LearnerTimeout"]

log = logging.getLogger("jaxsrl.actor")


class LearnerTimeout(TimeoutError):
    """A trainer did not take a segment within the sample timeout."""


class Actor(Worker):
    """The actor's event loop (see module docstring).

    Args:
      spec: the launcher's spec (:class:`~jaxsrl.workers.actor.spec.ActorSpec` or its
        JSON form).
      context: ZeroMQ context of its sockets (default: the process-wide one).
      client: builds its action client from ``(spec, context, curve)``
        (:data:`~jaxsrl.workers.actor.action_client.ClientFactory`); ``None``: a
        :class:`~jaxsrl.workers.actor.server_client.ServerClient`, for a spec without
        ``inline`` settings (a spec with them needs the inline client:
        :mod:`jaxsrl.workers.inline` passes it).

    Attributes:
      client: its :class:`~jaxsrl.workers.actor.action_client.ActionClient`.

    Raises:
      EnvError: an environment could not be built or reset.
      ValueError: a bad spec, or a spec with ``inline`` settings and no ``client``.
      RuntimeError: the spec asks for CURVE but the keypair is not in the environment.
    """

    def __init__(self, spec: dict | ActorSpec, context: zmq.Context | None = None,
                 client: ClientFactory | None = None):
        spec = spec if isinstance(spec, ActorSpec) else ActorSpec.from_dict(spec)
        super().__init__(f"actor {spec.actor_id}")
        self.spec = spec
        self.actor_id, self.run_id = spec.actor_id, spec.run_id
        self.T = spec.segment_length
        self.episodes_discarded = 0  # agent episodes, since the last segment sent
        if client is None and spec.inline:
            raise ValueError("the spec asks for inline inference: run it with jaxsrl.workers.inline")
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
        self.streams: list[PolicyStream] = []
        self.groups: list[Group] = []
        self.packer: obs_pack.ObsPacker | None = None  # packed observations (spec.obs_pack)
        self.pack_requests = False
        self.client: ActionClient | None = None
        try:
            self.client = (client or ServerClient)(spec, ctx, curve)
            self.streams = [PolicyStream(s, ctx, curve) for s in spec.streams]
            self._build_groups(spec)
        except BaseException:
            self.close()
            raise
        self.timing = {"env_s": 0.0, "wait_s": 0.0}

    def _build_groups(self, spec: ActorSpec) -> None:
        """The ring: ``ring_size`` groups of ``envs_per_group`` environments each.

        Raises:
          EnvError: an environment could not be built or reset.
        """
        n = spec.envs_per_group
        for g in range(spec.ring_size):
            seed = spec.seed + 10_000 * self.actor_id + n * g
            try:
                env = make_actor_env(spec.env, n, seed, spec.env_kwargs, spec.clip_actions)
            except Exception as exc:
                raise EnvError(f"environment construction raised {type(exc).__name__}: {exc}") from exc
            if g == 0:
                self.action_leaf = action_leaf(env.action_space)
                bits = getattr(env, "wire_bits", None)
                if spec.obs_pack and bits:
                    self.packer = obs_pack.ObsPacker(space_leaves(env.observation_space), bits)
                    # an inline client acts on the leaves themselves
                    self.pack_requests = isinstance(self.client, ServerClient)
            self.groups.append(Group(env, self.streams, self.T, spec.carry_spec, self.action_leaf,
                                     env_has_idle_rows(spec.env)))  # rows of absent agents
        rng = np.random.default_rng([spec.seed, spec.actor_id, spec.run_id, 1729])
        for group in self.groups:  # self-play: who plays each episode (None: latest only)
            group.draws = SelfPlayDraws(spec.opponents["p_latest"], group.rows,
                                        [s.policy for s in self.streams], group.env.num_envs,
                                        rng, group.env.num_rows) if spec.opponents else None

    def _inputs(self, g: int, i: int) -> dict:
        """Stream ``i``'s rows of group ``g`` as a request's arrays: obs and carry."""
        group = self.groups[g]
        arrays = take_rows(group.obs, group.rows[i])
        if self.pack_requests:
            arrays = self.packer.encode(arrays)
        arrays.update(group.carry[i])
        return arrays

    def _request(self, g: int) -> None:
        group = self.groups[g]
        t0 = time.perf_counter()
        for i in range(len(self.streams)):
            arrays, meta = self._inputs(g, i), {}
            if self.pack_requests:
                meta[obs_pack.META] = self.packer.layout
            if group.draws:
                arrays[OPPONENT] = group.draws.request[i].copy()
                games = group.draws.take_games() if i == 0 else None
                if games:
                    meta["games"] = games
            group.waiting.add(i)
            self.client.request(g, i, arrays, meta, kept=group.kept_mask(i))
        self.timing["wait_s"] += time.perf_counter() - t0

    def _waiting(self) -> dict[int, list[int]]:
        """Stream -> groups waiting for its actions."""
        return {i: [g for g, group in enumerate(self.groups) if i in group.waiting]
                for i in range(len(self.streams))}

    def _run(self, max_segments: int | None = None) -> None:
        """Loop until ``stop`` is set, SIGTERM (``SystemExit``), or ``max_segments``
        segments were sent (for tests). ``run(max_segments)`` calls this.

        Raises:
          TimeoutError: the action client's inference stayed silent past its limits.
        """
        self.ready.set()
        examples = [(i, self._inputs(0, i)) for i in range(len(self.streams))]
        if not self.client.prepare(examples, self):
            return  # stopped
        self.start_serving()
        for g in range(len(self.groups)):
            self._request(g)
        sent = 0
        while max_segments is None or sent < max_segments:
            t0 = time.perf_counter()
            actions = self.client.receive(self._waiting(), self)
            self.timing["wait_s"] += time.perf_counter() - t0
            if actions is None:  # stopped
                return
            group = self.groups[actions.group]
            problem = group.reply_problem(actions, self.action_leaf[1])
            if problem:
                log.warning("dropping the actions for group %d of stream %d: %s",
                            actions.group, actions.stream, problem)
                group.reject_reply(actions.stream)
                continue
            group.store_reply(actions)
            group.waiting.discard(actions.stream)
            if not group.waiting:
                sent += self._step(actions.group)

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
        for i, rows in enumerate(group.select):  # (a slice for a stream of every row: views)
            group.zero_carry(i, done[rows])  # a new episode starts from the initial (zero) carry
            buf = group.buffers[i]
            every = type(rows) is slice  # noqa: E721
            if buf.record(group.action[rows], group.logp[rows], group.version[i], step.reward[rows],
                          step.terminated[rows], step.truncated[rows],
                          step.obs if every else take_rows(step.obs, rows),
                          (step.final_obs if every else take_rows(step.final_obs, rows))
                          if step.truncated[rows].any() else {},
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
                    "failovers": self.client.take_failovers() if i == 0 else 0,
                    "episodes_discarded": self.episodes_discarded if i == 0 else 0}
            if i == 0:
                self.timing = {"env_s": 0.0, "wait_s": 0.0}
                self.episodes_discarded = 0
            arrays = pack_final_obs(arrays)
            if self.packer is not None:
                arrays = obs_pack.pack_arrays(arrays, self.packer)
                meta[obs_pack.META] = self.packer.layout
            self._push(self.streams[i], wire.encode("segment", arrays, meta))
        buf.start(take_rows(group.obs, group.rows[i]), group.carry[i])

    def _push(self, stream: PolicyStream, frames: list) -> None:
        """Send a segment; while the learner's queue is full (backpressure), tell the
        launcher's side this actor is alive (the client's ``ping``) so it is not taken for hung.

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
                self.client.ping()
            self.beat()
            stream.samples.poll(min(1000, 1000 * max(0.0, deadline - now)), zmq.POLLOUT)

    def close(self) -> None:
        """Close the environments, the action client and the sample sockets."""
        for group in self.groups:
            try:
                group.env.close()
            except Exception:  # noqa: BLE001  (a broken env must not hide the real error)
                log.exception("closing an environment failed")
        if self.client is not None:
            self.client.close()
        for s in self.streams:
            s.close()

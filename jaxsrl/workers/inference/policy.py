"""Policy worker (inference server): batches actors' observations and answers with actions.

Runs as a thread of the accelerator process. It binds a ZeroMQ ROUTER socket; each
``act`` request carries one actor group's observations. The worker drains every
request that is waiting (and, with a deadline, waits a little for more), pads the
rows to the smallest fitting bucket size so that XLA never recompiles after warm-up,
runs the jitted ``act`` over the local devices with the newest parameters from the
:class:`~jaxsrl.streams.params.ParameterStore` (on device, shared with the learner), and
answers each actor with its slice.

The request path is kept cheap (a trivial policy costs about a quarter of the CPU per
request it did; ``scripts/bench.py --rungs=server_only``): a request whose header bytes,
frame count and frame sizes are those of one accepted before, while the actor table is
unchanged since, is admitted on that remembered verdict
(:class:`~jaxsrl.workers.inference.admitted.AdmittedRequests`; any other is checked in
full by :meth:`parse`: a :class:`~jaxsrl.streams.wire.SchemaDecoder` and the actor
table), the actors heard from are recorded once per batch; the rows are copied once,
straight from the received frames into the preallocated
:class:`~jaxsrl.workers.inference.batch.BatchBuffer` that ``act`` reads; the
action-sampling keys come in blocks (:class:`~jaxsrl.workers.inference.batch.KeyStream`:
the same keys as one ``split`` per call); replies are slices of the outputs' bytes with
cached headers (:class:`~jaxsrl.streams.wire.SliceEncoder`), sent and received below
pyzmq's Python wrappers.

Requests may carry their observations packed (meta ``obs_pack``,
:mod:`jaxsrl.streams.obs_pack`: boolean columns as bits) and their carry kept by this
server (``carry_kept``, :mod:`jaxsrl.streams.kept_carry`); both are rebuilt into the batch
rows, bit for bit, before ``act`` sees them.

Hostile or broken input: a request that is not a well-formed ``act`` message of this
server's schema, is larger than the server takes, or whose ``actor``/``run`` ids are
not those of a live actor of the run (:class:`~jaxsrl.streams.admission.ActorTable`) is
dropped with a (rate-limited) logged reason and counted in ``dropped_requests``; the
server keeps serving. Frames larger than any valid array are cut by ZeroMQ before
they are buffered (``MAXMSGSIZE``: the peer is disconnected).

Self-play (``opponents`` given: the run's opponent pools): requests also carry
``opponent`` (int32 ``[n]``) and may carry finished games in their meta (``games``,
handed to the pools); the rows of each parameter version in a batch are run with that
version's parameters and the reply's ``opponent`` array says which served each row
(:mod:`jaxsrl.streams.opponents`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

import jax
import numpy as np
import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable, DropLog, drop_input, message_ids
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams import obs_pack
from jaxsrl.streams.kept_carry import KEPT, RESEND, KeptCarries
from jaxsrl.streams.params import ParameterStore, Versioned
from jaxsrl.streams.sockets import bind, open_socket, recv_routed, send_frames
from jaxsrl.streams.spaces import obs_schema, space_leaves, unflatten_obs
from jaxsrl.streams import opponents as opp
from jaxsrl.workers.inference.admitted import AdmittedRequests
from jaxsrl.workers.inference.batch import BatchBuffer, KeyStream

log = logging.getLogger("jaxsrl.policy")
_MAX_GROUP = 1 << 20
_NOBLOCK = int(zmq.NOBLOCK)  # a plain int: enum flags are slow


def bucket_sizes(max_rows: int, multiple: int, smallest: int = 8) -> list[int]:
    """Batch sizes to compile: powers of two up to ``max_rows``, each a multiple of ``multiple``.

    ``multiple`` is the device count (the batch axis is split across devices).
    """
    sizes, size = [], max(smallest, multiple)
    while size < max_rows:
        sizes.append(-(-size // multiple) * multiple)
        size *= 2
    sizes.append(-(-max_rows // multiple) * multiple)
    return sorted(set(sizes))


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """A policy worker's batch sizes, deadline, action-sampling seed and socket.

    Attributes:
      max_rows: largest batch of rows in one call (sum over actors' groups).
      num_devices: batch sizes are padded to multiples of this.
      host: interface to bind (``127.0.0.1`` unless told otherwise), or
        ``jaxsrl.streams.sockets.INPROC`` (serial mode).
      deadline_ms: after the first request, wait this long for more (0: take what
        is waiting).
      seed: seed of the action-sampling RNG.
      port: TCP port to bind (0: a free one; a restarted remote server asks for its
        previous port, so actors' addresses stay valid).
      curve: ``(public, secret)`` server keys to require CURVE on the socket, or ``None``.
      kept_carry_bytes: most bytes of replies' carries kept for the actors' next requests
        (:mod:`jaxsrl.streams.kept_carry`; the oldest go first).
    """

    max_rows: int
    num_devices: int = 1
    host: str = "127.0.0.1"
    deadline_ms: float = 0.0
    seed: int = 0
    port: int = 0
    curve: tuple | None = None
    kept_carry_bytes: int = 1 << 30


class PolicyWorker(Worker):
    """Inference server thread of one policy (lifecycle: :class:`~jaxsrl.core.worker.Worker`).

    Metrics: ``inference/batch_rows`` and ``inference/requests`` (means per batch),
    ``inference/latency_ms`` samples (``_p50``/``_p99`` per interval: from noticing a
    batch's first request to its last reply sent), ``inference/batches`` (counter),
    ``dropped_requests`` and ``stale_run_requests_dropped``; with opponent pools the
    counters ``selfplay/snapshot_rows/<policy>`` (rows served by snapshots) and
    ``selfplay/carry_resets/<policy>`` (rows whose snapshot left the pool).

    Args:
      name: worker name (for logs and errors).
      policy: name of the policy whose parameters it serves.
      act: ``act(params, obs, carry, rng)`` already jitted over the devices.
      initial_carry: the agent's ``initial_carry``.
      observation_space: per-row observation space (validates requests).
      store: where the learner publishes parameters.
      metrics: run metrics (dropped messages, batch sizes).
      settings: batch sizes, deadline, seed and socket (:class:`PolicySettings`).
      actors: the run's actor table; requests whose ids it does not accept are dropped
        (``None``: any integer ids are accepted, e.g. in tests and benchmarks).
      context: ZeroMQ context of the socket (default: the process-wide one).
      opponents: the run's opponent pools (:class:`~jaxsrl.streams.opponents.Opponents`)
        for self-play, or ``None`` (requests carry no ``opponent`` array).

    Attributes:
      drops: the :class:`~jaxsrl.streams.admission.DropLog` of refused requests (its
        ``recent()`` records say why each was dropped).
    """

    def __init__(self, name: str, policy: str, act: Callable, initial_carry: Callable,
                 observation_space: Any, store: ParameterStore, metrics: MetricsAccumulator,
                 settings: PolicySettings, *, actors: ActorTable | None = None,
                 context: zmq.Context | None = None, opponents: opp.Opponents | None = None):
        super().__init__(name)
        self.settings = settings
        self.policy, self.port = policy, settings.port
        self.actors, self._context, self._curve = actors, context, settings.curve
        self._act = act
        self._carry = CarryCodec(initial_carry)
        self._obs_names = list(obs_schema(observation_space))
        self._obs_leaves = space_leaves(observation_space)  # packed observations (obs_pack)
        self._wire_names: list = []  # the arrays of the request parse saw last, in frame order
        self._schema = obs_schema(observation_space) | self._carry.schema()
        self._opponents = opponents
        self._request_schema = self._schema | (
            {opp.OPPONENT: wire.ArraySpec("int32", (None,))} if opponents is not None else {})
        self.store, self.metrics = store, metrics
        self.buckets = bucket_sizes(settings.max_rows, settings.num_devices)
        self.max_rows = self.buckets[-1]
        self.host, self.deadline_s = settings.host, settings.deadline_ms / 1000.0
        self.drops = DropLog(log, "request")
        # Largest valid request: max_rows rows of every array (header aside).
        row_bytes = {k: int(np.prod(s.shape[1:], dtype=np.int64)) * np.dtype(s.dtype).itemsize
                     for k, s in self._request_schema.items()}
        self.max_bytes = max(1, self.max_rows * sum(row_bytes.values()))
        packed = obs_pack.packed_row_bytes(  # obs#f: every obs leaf in one frame
            int(np.prod(self._request_schema[k].shape[1:], dtype=np.int64)) for k in self._obs_names)
        self.max_frame_bytes = max(wire.MAX_HEADER_BYTES,
                                   self.max_rows * max(*row_bytes.values(), packed))
        self._keys = KeyStream(jax.random.PRNGKey(settings.seed))
        self._batch = BatchBuffer(self._request_schema, self.buckets)
        self._inputs = {}  # bucket -> (obs tree, carry tree) viewing the batch buffer
        for b in self.buckets:
            view = self._batch.view(b)
            self._inputs[b] = (unflatten_obs({k: view[k] for k in self._obs_names}),
                               self._carry.to_tree(view))
        self._replies = wire.SliceEncoder("action")
        self._decoder = wire.SchemaDecoder(self._request_schema, self.max_bytes, "observation")
        # requests whose carry this server keeps (jaxsrl.streams.kept_carry): carry_kept [n]
        # uint8 in place of the carry arrays; the carry of every reply is kept for them
        self._kept_schema = {k: v for k, v in self._request_schema.items()
                             if k not in self._carry.names} | {KEPT: wire.ArraySpec("uint8", (None,))}
        self._kept = KeptCarries(settings.kept_carry_bytes)
        # one header per actor group, each of >= 1 row: max_rows of them never thrash it
        self._admitted = AdmittedRequests(actors, max_known=max(4096, self.max_rows))
        self._remember = True  # (set again when serving starts)

    # -- compute -----------------------------------------------------------------
    def warmup(self) -> None:
        """Compile ``act`` for every bucket size (blocks until parameters exist)."""
        params = self.store.wait_for(self.policy).params
        key = self._keys.peek()  # the serving keys' type; the sequence is not advanced
        for b in self.buckets:
            jax.block_until_ready(self._act(params, *self._inputs[b], key))

    def infer(self, named: dict | None, rows: int, versioned: Versioned | None = None
              ) -> tuple[dict, int]:
        """Run ``act`` on ``rows`` rows with ``versioned`` (default: the newest parameters);
        returns reply arrays (``[rows, ...]`` host arrays) and the version.

        ``named`` (obs and carry arrays of ``rows`` rows) is copied to the batch buffer
        first; ``None``: the serving loop already wrote the rows there. The rows are
        padded to the smallest bucket (the padding rows hold whatever an earlier batch
        left there; their outputs are dropped).
        """
        if named is not None:
            for k, v in named.items():
                self._batch.arrays[k][:rows] = v
        versioned = versioned or self.store.get(self.policy)
        out = self._act_bucket(rows, versioned.params)
        return {k: np.asarray(v)[:rows] for k, v in out.items()}, versioned.version

    def _act_bucket(self, rows: int, params) -> dict:
        """``act`` on the smallest bucket of the batch buffer holding ``rows`` rows: the
        reply arrays (device arrays of the bucket's size, padding rows included)."""
        obs, carry = self._inputs[self._batch.bucket(rows)]
        action, carry, extras = self._act(params, obs, carry, self._keys.next())
        out = {"action": action, "logp": extras["logp"]}
        if self._carry.names:
            out.update(self._carry.to_named(carry))
        return out

    def _infer_versions(self, named: dict, rows: int) -> tuple[dict, int]:
        """:meth:`infer` per parameter version of the rows' ``opponent`` (self-play);
        the reply arrays get ``opponent`` (what served each row)."""
        view = self._opponents.view(self.policy)
        served, reset = opp.resolve(named.pop(opp.OPPONENT), view)
        if reset.any():  # a snapshot left the pool: its rows start afresh with another
            for k in self._carry.names:
                named[k] = np.array(named[k])
                named[k][reset] = 0
            self.metrics.count(f"selfplay/carry_resets/{self.policy}", int(reset.sum()))
        latest = self.store.get(self.policy)
        versions = np.unique(served)
        out: dict = {}
        for v in versions:
            params = latest.params if v == opp.LATEST else opp.params_of(view, int(v))
            if len(versions) == 1:  # one version (e.g. every row latest): no split
                out, _ = self.infer(named, rows, Versioned(latest.version, params))
                break
            idx = np.flatnonzero(served == v)
            part, _ = self.infer({k: a[idx] for k, a in named.items()}, len(idx),
                                  Versioned(latest.version, params))
            for k, a in part.items():
                if k not in out:
                    out[k] = np.empty((rows,) + a.shape[1:], a.dtype)
                out[k][idx] = a
        snapshot_rows = int((served != opp.LATEST).sum())
        if snapshot_rows:
            self.metrics.count(f"selfplay/snapshot_rows/{self.policy}", snapshot_rows)
        out[opp.OPPONENT] = served
        return out, latest.version

    # -- messaging -----------------------------------------------------------------
    def parse(self, frames: list) -> tuple[bytes, dict, dict, int] | None:
        """Check one received request (``[identity, *wire frames]``) against the wire
        format and the actor table: ``(identity, meta, named arrays, rows)``, or ``None``
        for a ping (the actor is recorded as alive). The serving loop remembers the
        verdicts of accepted requests and admits repeats of them without calling it
        (:mod:`jaxsrl.workers.inference.admitted`), unless a subclass overrides it.

        Raises:
          WireError (and its ``StaleRunError``): the request is malformed or from an
            unknown or previous run; the serving loop drops and counts it.
        """
        identity, body = frames[0], frames[1:]
        checked = self._decoder.decode(body)  # = wire.decode + wire.check_rows, cached
        msg = checked.message
        if msg.kind == "ping" and not msg.arrays:  # an actor waiting on its learner: alive
            if self.actors is not None:
                self.actors.seen(self.actors.check(msg.meta))
            else:
                message_ids(msg.meta)
            return None
        if msg.kind != "act":
            raise wire.WireError(f"expected an 'act' request, got kind {msg.kind!r}")
        group = msg.meta.get("group")
        if type(group) is not int or not 0 <= group < _MAX_GROUP:  # noqa: E721
            raise wire.WireError(f"meta 'group' must be a small non-negative integer, got {group!r}")
        actor = self.actors.check(msg.meta) if self.actors is not None else None
        packed = obs_pack.META in msg.meta  # observations packed: the float32 leaves rebuilt
        arrays = obs_pack.unpack(msg.arrays, msg.meta, self._obs_leaves) if packed else msg.arrays
        self._wire_names = list(msg.arrays)
        if KEPT in arrays and self._carry.names:  # its carry is the one this server kept
            n = wire.check_rows(arrays, self._kept_schema, "observation")
        elif packed:
            n = wire.check_rows(arrays, self._request_schema, "observation")
        else:
            n = checked.require_rows()
        if not 0 < n <= self.max_rows:
            raise wire.WireError(f"request of {n} rows; this server takes 1..{self.max_rows}")
        if actor is not None:
            self.actors.seen(actor)
        if self._opponents is not None and "games" in msg.meta:
            self._opponents.record_games(msg.meta["games"])  # checks them, never raises
        return identity, msg.meta, arrays, n

    def _run(self) -> None:
        """Serve until ``stop`` is set (``run()`` calls this; exceptions end up in ``error``)."""
        sock = open_socket(self._context, zmq.ROUTER,
                           max_frame_bytes=self.max_frame_bytes,  # bigger frames: disconnect
                           recv_timeout_ms=100,  # the serving loop checks ``stop`` this often
                           curve_server=self._curve)
        try:
            self.address = bind(sock, self.host, self.port, self.name)
            self.drops.where = self.address  # named in every drop's log line
            self.ready.set()  # actors may connect and queue requests while we compile
            self.warmup()
            self.start_serving()
            self._serve(sock)
        finally:
            sock.close()

    def _serve(self, sock: zmq.Socket) -> None:
        batch, buf, admitted = [], self._batch, self._admitted
        # Remembered verdicts are parse's own: a subclass (or a patch) overriding parse may
        # decide per request, so then every request goes through it.
        self._remember = type(self).parse is _OWN_PARSE
        heard = set()  # actors of admitted requests, recorded as seen once per batch
        max_rows, actors, wait = self.max_rows, self.actors, self.deadline_s > 0
        while not self.stop.is_set():
            self.beat()
            try:
                frames = recv_routed(sock)  # waits 100 ms at most (the socket's receive timeout)
            except zmq.Again:
                continue
            t0 = time.perf_counter()
            deadline = t0 + self.deadline_s
            while frames is not None:
                verdict = admitted.get(frames)  # accepted before, and nothing it rests on changed
                if verdict is not None:
                    n = verdict.rows
                    kept = None
                    if verdict.kept:  # the carry this server kept for the connection's group
                        keep = np.frombuffer(frames[verdict.kept], np.uint8)
                        kept = self._kept.get(frames[0], verdict.group, n)
                        if kept is None or keep.max(initial=0) > 1:
                            self._resend(sock, frames[0], verdict.group)
                            frames = self._more(sock, deadline, wait)
                            continue
                    if buf.rows + n > max_rows:  # answer it in the next call
                        self._answer(sock, batch)
                        batch.clear()
                    start = buf.add_frames(frames, verdict.arrays, n)
                    if verdict.packer is not None:  # observations packed: unpacked into the rows
                        (fi, _), (bi, _) = verdict.packed
                        verdict.packer.decode_into(
                            {k: buf.arrays[k][start:start + n] for k in self._obs_names},
                            np.frombuffer(frames[fi], np.float32).reshape(n, -1),
                            np.frombuffer(frames[bi], np.uint8).reshape(n, -1))
                    if kept is not None:
                        self._fill_kept(start, n, kept, keep)
                    batch.append((frames[0], verdict.group, start, n))
                    if actors is not None:
                        heard.add(verdict.actor)
                else:
                    self._check_and_add(sock, frames, batch)
                if buf.rows >= max_rows:
                    break
                frames = self._more(sock, deadline, wait)
            if batch:
                self._answer(sock, batch)
                batch.clear()
                self.metrics.add_sample("inference/latency_ms", 1e3 * (time.perf_counter() - t0))
                self.metrics.count("inference/batches")
            if heard:
                actors.seen_all(heard)
                heard.clear()

    def _check_and_add(self, sock: zmq.Socket, frames: list, batch: list) -> None:
        """Check a request in full (:meth:`parse`); drop it (logged and counted) or add its
        rows to the batch buffer and ``batch``, answering the batch first if they do not
        fit; remember an accepted request's verdict."""
        generation = self._admitted.generation()  # before the check: see AdmittedRequests
        try:
            parsed = self.parse(frames)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep serving)
            drop_input(self.drops, self.name, exc, self.metrics, "dropped_requests",
                       "stale_run_requests_dropped")
            return
        if parsed is None:  # a ping
            return
        identity, meta, arrays, n = parsed
        buf = self._batch
        kept = None
        if KEPT in arrays:
            kept = self._kept.get(identity, meta["group"], n)
            if kept is None or arrays[KEPT].max(initial=0) > 1:
                self._resend(sock, identity, meta["group"])
                return
        if buf.rows + n > self.max_rows:  # answer it in the next call
            self._answer(sock, batch)
            batch.clear()
        # its rows go straight to the batch buffer (the frames are dropped now)
        if kept is None:
            start = buf.add(arrays, n)
        else:
            start = buf.add(arrays, n, skip=self._carry.names)
            self._fill_kept(start, n, kept, arrays[KEPT])
        batch.append((identity, meta.get("group"), start, n))
        if self._remember and "games" not in meta and all(
                a.dtype == buf.arrays[k].dtype for k, a in arrays.items() if k != KEPT):
            actor = None if self.actors is None else message_ids(meta)[0]
            packer = (obs_pack.ObsPacker.from_layout(self._obs_leaves, meta[obs_pack.META])
                      if obs_pack.META in meta else None)
            self._admitted.remember(frames, generation, actor, meta["group"], n, self._wire_names,
                                    packer)

    def _more(self, sock: zmq.Socket, deadline: float, wait: bool) -> list | None:
        """The next request of this batch: one already waiting, else (``wait``) the first
        before ``deadline``; ``None`` if none."""
        try:
            return recv_routed(sock, _NOBLOCK)
        except zmq.Again:
            return self._next_request(sock, deadline) if wait else None

    def _fill_kept(self, start: int, n: int, kept: dict, keep: np.ndarray) -> None:
        """Batch rows ``start:start + n`` of the carry: the kept rows where ``keep`` is 1,
        zeros where 0 (:meth:`~jaxsrl.streams.kept_carry.KeptCarries.fill`)."""
        arrays = self._batch.arrays
        KeptCarries.fill({k: arrays[k][start:start + n] for k in self._carry.names}, kept, keep)

    def _resend(self, sock: zmq.Socket, identity: bytes, group: int) -> None:
        """Ask for a kept-carry request again with its carry (none is kept for it here)."""
        self.metrics.count("inference/carry_resends")
        send_frames(sock, identity, [wire.pack_header(RESEND, [], {"group": group})])

    def _next_request(self, sock: zmq.Socket, deadline: float) -> list | None:
        """The first request that comes before ``deadline``; ``None`` if none does."""
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not sock.poll(remaining * 1000):
                return None
            try:
                return recv_routed(sock, _NOBLOCK)
            except zmq.Again:  # (another reader cannot exist; a message that went away)
                continue

    def _answer(self, sock: zmq.Socket, batch: list) -> None:
        """Run the batch buffer's rows and send each request of ``batch`` (``(identity,
        group, first row, rows)``) its slice; the buffer is empty afterwards."""
        rows = self._batch.rows
        try:
            if self._opponents is None:
                out, version = self.infer(None, rows)
            else:
                named = {k: a[:rows].copy() for k, a in self._batch.arrays.items()}
                out, version = self._infer_versions(named, rows)
        finally:
            self._batch.clear()
        self.metrics.add_means({"inference/batch_rows": rows, "inference/requests": len(batch)})
        replies = self._replies
        replies.reset(out)
        names = self._carry.names
        for identity, group, start, n in batch:
            if names:  # the actor's next request may say "the carry you sent" (kept_carry)
                self._kept.put(identity, group, {k: out[k][start:start + n] for k in names})
            send_frames(sock, identity, replies.frames(
                start, n, {"group": group, "version": version}, (group, version)))


_OWN_PARSE = PolicyWorker.parse  # (the class's own, whatever replaces it later)

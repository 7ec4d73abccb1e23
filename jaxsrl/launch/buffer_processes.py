"""Launcher side of buffer processes: start, feed, watch and restart them.

A ``[dataflow]`` buffer with ``placement = "process"`` runs as ``count`` buffer processes
(shards, :mod:`jaxsrl.workers.buffer.server`); actor process ``i`` of the run sends its
segments to shard ``i % count`` of its stream, and the stream's trainer
(:class:`~jaxsrl.workers.learner.buffer_client.BufferClientTrainer`) draws batches from
every shard in turn. :class:`BufferProcesses` looks like a worker to the launcher
(``name``, ``ready``, ``stop``, ``error``, ``serving``, ``heartbeat``, ``run``) and runs as
one thread of the learner process (:class:`~jaxsrl.launch.worker_threads.Kind` ``WATCH``):

* it binds a status socket (PULL) and starts every shard with
  :class:`~jaxsrl.launch.processes.ChildProcess` (``JAX_PLATFORMS=cpu``: the replay lives
  in host memory); it is ``ready`` once every shard bound its sockets and compiled;
* from each ``buffer_status`` it adds the shard's env steps, finished episodes,
  ``replay/...`` means (averaged over shards and reports; with several shards also
  ``replay/shard_<i>/size``), counters and the actors it
  heard from (hang detection) to the run's metrics, as the trainer does for a
  learner-placed buffer;
* it sends the run's actor table (``actor_runs``) to every shard when it changes and
  every :data:`ACTOR_RUNS_INTERVAL_S`, so segments of unknown actors or of a restarted
  actor's previous run are dropped there;
* a shard that dies, or stays silent once serving for ``actor_timeout_s``, is killed
  and restarted on the same ports (actors and the trainer reconnect by themselves; its
  replay refills), at most ``max_server_restarts`` times per run; then, or when a
  shard stopped on a segment with NaN or Inf under ``on_nonfinite="raise"``, ``error``
  names it and the launcher stops the run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from typing import Any, Callable

import zmq

from jaxsrl.core.child import read_error
from jaxsrl.core.exit_codes import EXIT_NONFINITE
from jaxsrl.core.worker import Worker
from jaxsrl.envs import env_has_idle_rows
from jaxsrl.experiment import events
from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.processes import ChildProcess, exit_reason, kill_for_restart, stop_all
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.sockets import bind, drain, open_socket
from jaxsrl.workers.buffer.spec import BufferProcessSpec

log = logging.getLogger("jaxsrl.launch.buffers")
STARTUP_LIMIT_S = 300.0  # a shard must serve this long after its start (compiles)
ACTOR_RUNS_INTERVAL_S = 0.5


@dataclasses.dataclass
class Shard:
    """The launcher's view of one buffer process."""

    name: str
    stream: str
    child: ChildProcess
    sample_address: str | None = None
    request_address: str | None = None
    control: Any = None  # DEALER to its request socket (actor_runs)
    serving: bool = False
    last_status: float = 0.0
    heartbeat: float = 0.0
    env_steps: int = 0  # run-long total of the current process run, as last reported
    counters: dict = dataclasses.field(default_factory=dict)


def shard_specs(cfg: Any, buffer: Any, fns: Any, planned_updates: int, max_rows: int,
                logdir: str) -> list[BufferProcessSpec]:
    """The specs of ``buffer``'s ``count`` shards (capacity and minimum fill divided
    among them, rounded up).

    Raises:
      ValueError: a shard would hold fewer items than one batch.
    """
    replay, count = fns.replay, buffer.count
    capacity, min_fill = math.ceil(replay.capacity / count), math.ceil(replay.min_fill / count)
    if capacity < replay.batch_size:
        raise ValueError(f"buffer {buffer.name!r}: count={count} shards of {capacity} items "
                         f"each hold fewer than a batch ({replay.batch_size}): use fewer shards")
    base = agent_spec(cfg)
    names = [buffer.name] if count == 1 else [f"{buffer.name}[{i}]" for i in range(count)]
    return [BufferProcessSpec(
        name=name, agent=base["agent"], agent_config=base["agent_config"], env=base["env"],
        env_kwargs=base["env_kwargs"], planned_updates=planned_updates,
        segment_length=cfg.segment_length, max_rows=max_rows, capacity=capacity,
        min_fill=min_fill, status_address="", shard=i, shards=count, host=cfg.host,
        max_staleness=cfg.max_staleness, on_nonfinite=cfg.on_nonfinite,
        idle_rows=env_has_idle_rows(cfg.env), parent_pid=os.getpid(),
        error_file=RunDir(logdir).error_file(name.replace("[", "_").replace("]", "")),
        compilation_cache_dir=cfg.compilation_cache_dir) for i, name in enumerate(names)]


class BufferProcesses(Worker):
    """Supervisor thread of a run's buffer processes (see the module doc).

    Args:
      cfg: the run config.
      specs: sample stream -> the specs of its shards (:func:`shard_specs`).
      metrics: sample stream -> the metrics of its trainer (``run.metrics`` or a
        policy's view of it).
      table: the run's actor table.
      actor_runs: ``() -> {actor_id: run_id}`` of the live actor processes.
      context: the run's ZeroMQ context.
      spawner: where processes start (``None``: this machine).
    """

    def __init__(self, cfg: Any, specs: dict, metrics: dict, table: Any,
                 actor_runs: Callable[[], dict], context: zmq.Context, spawner: Any = None):
        super().__init__("buffer processes")
        self.cfg, self.metrics_of, self.table = cfg, metrics, table
        self.context, self._actor_runs = context, actor_runs
        self.restarts = 0
        self.shards: list[Shard] = []
        env = {"JAX_PLATFORMS": "cpu"}  # the replay lives in this host's memory
        for stream, group in specs.items():
            for spec in group:
                child = ChildProcess(spec.name, spec.to_dict(), module="jaxsrl.workers.buffer",
                                     env=env, spawner=spawner)
                self.shards.append(Shard(spec.name, stream, child))
        self._runs_at, self._runs = 0.0, None

    def streams(self) -> set:
        return {s.stream for s in self.shards}

    def sample_address(self, stream: str, actor_index: int) -> str:
        """The shard of ``stream`` that actor ``actor_index`` feeds (after ``ready``)."""
        group = [s for s in self.shards if s.stream == stream]
        return group[actor_index % len(group)].sample_address

    def connector(self, stream: str) -> Callable[[threading.Event], list | None]:
        """``connect(stop)`` for the trainer of ``stream``: its shards' request addresses,
        once every shard serves (``None`` if ``stop`` or this worker's stop came first).

        Raises (from ``connect``):
          RuntimeError: the buffer processes failed to start.
        """
        def connect(stop: threading.Event) -> list | None:
            while not self.ready.wait(0.1):
                if stop.is_set() or self.stop.is_set():
                    return None
            if self.error is not None:
                raise RuntimeError(f"buffer processes failed: {self.error!r}") from self.error
            return [s.request_address for s in self.shards if s.stream == stream]
        return connect

    # -- thread -----------------------------------------------------------------------
    def _run(self) -> None:
        status = open_socket(self.context, zmq.PULL, max_frame_bytes=wire.MAX_HEADER_BYTES)
        try:
            address = bind(status, self.cfg.host, name="buffer-status")
            for s in self.shards:
                s.child.spec = s.child.spec | {"status_address": address}
                self._start(s)
            while not self.stop.is_set():
                self.beat()
                drain(status, self.on_status)
                self._send_actor_runs()
                self._watch()
        finally:
            stop_all([s.child for s in self.shards])
            for s in self.shards:
                if s.control is not None:
                    s.control.close()
            status.close()

    def _start(self, s: Shard) -> None:
        path = s.child.spec.get("error_file")
        if path and os.path.exists(path):
            os.remove(path)
        s.serving, s.last_status, s.env_steps, s.counters = False, 0.0, 0, {}
        s.child.start()

    def _send_actor_runs(self) -> None:
        """The actor table to every shard: at once when it changed (an actor started or
        restarted: its first segments must not find it unknown), else every
        :data:`ACTOR_RUNS_INTERVAL_S` (a restarted shard learns it again)."""
        now = time.monotonic()
        runs = [[int(a), int(r)] for a, r in sorted(self._actor_runs().items())]
        if runs == self._runs and now - self._runs_at < ACTOR_RUNS_INTERVAL_S:
            return
        self._runs, self._runs_at = runs, now
        frames = wire.encode(replay_wire.ACTOR_RUNS, {}, {"runs": runs})
        for s in self.shards:
            if s.control is not None:
                try:
                    s.control.send_multipart(frames, flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass

    def on_status(self, frames: list) -> None:
        """Apply one ``buffer_status`` (anything else, or a previous run's, is ignored)."""
        try:
            msg = wire.decode(frames, max_bytes=0)
            meta = msg.meta
            s = next(x for x in self.shards if x.name == meta.get("buffer"))
        except (wire.WireError, StopIteration):
            return
        if msg.kind != replay_wire.STATUS or meta.get("run") != s.child.spec.get("run_id"):
            return
        now = time.monotonic()
        s.last_status = now
        age = meta.get("heartbeat_age_s")
        s.heartbeat = now - (age if type(age) is float and math.isfinite(age) else 0.0)  # noqa: E721
        s.serving = meta.get("serving") is True
        self._addresses(s, meta)
        metrics = self.metrics_of[s.stream]
        total = meta.get("env_steps")
        if type(total) is int and total > s.env_steps:  # noqa: E721
            metrics.add_env_steps(total - s.env_steps)
            s.env_steps = total
        episodes = meta.get("episodes")
        for episode in episodes if isinstance(episodes, list) else []:
            if not isinstance(episode, dict):
                continue
            clean = {k: v for k, v in episode.items() if isinstance(k, str)
                     and type(v) in (int, float) and math.isfinite(v)}
            metrics.add_episode(clean)
            team = episode.get("team")
            if isinstance(team, str) and len(team) <= 64:
                metrics.add_episode({k: clean[k] for k in ("return", "length") if k in clean},
                                    suffix=f"/{team}")
        means = meta.get("means")
        if isinstance(means, dict):
            means = {k: v for k, v in means.items() if isinstance(k, str) and len(k) < 64
                     and type(v) in (int, float) and math.isfinite(v)}
            metrics.add_means(means)
            if "replay/size" in means and sum(x.stream == s.stream for x in self.shards) > 1:
                # per shard too: replay[1] -> replay/shard_1/size
                metrics.add_means({f"replay/shard_{s.child.spec.get('shard', 0)}/size":
                                   means["replay/size"]})
        counters = meta.get("counters")
        if isinstance(counters, dict):
            for k, v in counters.items():
                if isinstance(k, str) and len(k) < 64 and type(v) is int and v > s.counters.get(k, 0):  # noqa: E721
                    metrics.count(k, v - s.counters.get(k, 0))
                    s.counters[k] = v
        seen = meta.get("seen")
        for actor in seen[:100_000] if isinstance(seen, list) else []:
            if type(actor) is int:  # noqa: E721
                self.table.seen(actor)

    def _addresses(self, s: Shard, meta: dict) -> None:
        sample, request = meta.get("sample_address"), meta.get("request_address")
        if not (isinstance(sample, str) and isinstance(request, str)):
            return
        if s.request_address is None:  # first start: later runs bind the same ports
            try:
                ports = [int(a.rsplit(":", 1)[1]) for a in (sample, request)]
            except (IndexError, ValueError):
                return  # not tcp://host:port: not from a buffer process of this run
            s.sample_address, s.request_address = sample, request
            s.child.spec = s.child.spec | {"sample_port": ports[0], "request_port": ports[1]}
            s.control = open_socket(self.context, zmq.DEALER, send_hwm=2)
            s.control.connect(request)
        elif (sample, request) != (s.sample_address, s.request_address):
            log.warning("%s now listens at %s / %s, not %s / %s", s.name, sample, request,
                        s.sample_address, s.request_address)

    def _watch(self) -> None:
        """Restart dead or silent shards; update ``ready``, ``serving``, ``heartbeat``."""
        now = time.monotonic()
        for s in self.shards:
            code = s.child.proc.poll()
            reason = None
            if code is not None:
                reason = exit_reason(code)
                if code == EXIT_NONFINITE:
                    raise RuntimeError(f"buffer process {s.name}: "
                                       f"{read_error(s.child.spec.get('error_file'))}")
            elif s.serving and now - s.last_status > self.cfg.actor_timeout_s:
                reason = f"sent no status for {now - s.last_status:.1f} s"
            elif s.serving and now - s.heartbeat > self.cfg.actor_timeout_s:
                reason = f"its loop stalled for {now - s.heartbeat:.1f} s"
            elif not s.serving and now - s.child.started_at > STARTUP_LIMIT_S:
                reason = f"was not serving {STARTUP_LIMIT_S:g} s after its start"
            if reason is not None:
                self._restart(s, reason)
        if all(s.serving for s in self.shards):
            self.serving.set()
            self.heartbeat = min(min(s.heartbeat for s in self.shards), self.heartbeat)
            if not self.ready.is_set():
                log.info("buffer processes serving: %s", ", ".join(
                    f"{s.name} (segments at {s.sample_address})" for s in self.shards))
                self.ready.set()
        else:
            self.serving.clear()

    def _restart(self, s: Shard, reason: str) -> None:
        error = kill_for_restart(s.child, f"buffer process {s.name}", "buffer processes", reason,
                                 self.restarts, self.cfg.max_server_restarts)
        self.restarts += 1
        self.metrics_of[s.stream].count("buffer_restarts")
        events.emit(log, logging.WARNING, "buffer_restart",
                    {"buffer": s.name, "reason": reason, "error": error, "restart": self.restarts},
                    "buffer process %s (pid %d) %s%s; restarting it on the same ports (restart "
                    "%d of at most %d; its replay refills)", s.name, s.child.proc.pid, reason,
                    f": {error}" if error else "", self.restarts, self.cfg.max_server_restarts)
        self._start(s)

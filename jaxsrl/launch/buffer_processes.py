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
* a shard that dies, is not serving :data:`~jaxsrl.launch.children.STARTUP_LIMIT_S` after
  its start, or stays silent once serving for ``actor_timeout_s``, is killed and
  restarted on the same ports (actors and the trainer reconnect by themselves; its
  replay refills), at most ``max_server_restarts`` times per run; then, or when a
  shard stopped on a segment with NaN or Inf under ``on_nonfinite="raise"``, ``error``
  names it and the launcher stops the run. These rules, the status socket and the
  restart events are :class:`~jaxsrl.launch.children.ChildSupervisor`'s.
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
from jaxsrl.envs import env_has_idle_rows
from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.children import Child, ChildSupervisor
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.streams import replay_wire, wire
from jaxsrl.streams.sockets import open_socket
from jaxsrl.streams.status import BUFFER_STATUS
from jaxsrl.workers.buffer.spec import BufferProcessSpec

log = logging.getLogger("jaxsrl.launch.buffers")
ACTOR_RUNS_INTERVAL_S = 0.5


@dataclasses.dataclass
class Shard(Child):
    """The launcher's view of one buffer process (and, keyword-only, :class:`Child`'s)."""

    name: str
    stream: str
    child: ChildProcess
    sample_address: str | None = None
    request_address: str | None = None
    control: Any = None  # DEALER to its request socket (actor_runs)
    env_steps: int = 0  # run-long total of the current process run, as last reported

    def reset(self) -> None:
        super().reset()
        self.env_steps = 0


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


class BufferProcesses(ChildSupervisor):
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
        env = {"JAX_PLATFORMS": "cpu"}  # the replay lives in this host's memory
        shards = [Shard(spec.name, stream, ChildProcess(
            spec.name, spec.to_dict(), module="jaxsrl.workers.buffer", env=env, spawner=spawner))
            for stream, group in specs.items() for spec in group]
        super().__init__("buffer processes", "buffer process", BUFFER_STATUS, shards, cfg,
                         table, context, log)
        self.shards: list[Shard] = self.children
        self.metrics_of, self._actor_runs = metrics, actor_runs
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

    # -- ChildSupervisor hooks ------------------------------------------------------------
    def _turn(self) -> None:
        self._send_actor_runs()

    def _close(self) -> None:
        for s in self.shards:
            if s.control is not None:
                s.control.close()

    def _metrics(self, s: Shard) -> Any:
        return self.metrics_of[s.stream]

    def _exited(self, s: Shard, code: int) -> None:
        if code == EXIT_NONFINITE:
            raise RuntimeError(f"buffer process {s.name}: "
                               f"{read_error(s.child.spec.get('error_file'))}")

    def _describe(self, s: Shard) -> str:
        return f"{s.name} (segments at {s.sample_address})"

    def _where(self, s: Shard) -> str:
        return " on the same ports (its replay refills)"

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

    def _apply(self, s: Shard, meta: dict) -> None:
        """Addresses, env steps, episodes and means of a shard's status."""
        self._addresses(s, meta)
        metrics = self.metrics_of[s.stream]
        if meta["env_steps"] > s.env_steps:
            metrics.add_env_steps(meta["env_steps"] - s.env_steps)
            s.env_steps = meta["env_steps"]
        for episode in meta["episodes"]:
            stats = {k: v for k, v in episode.items() if k != "team"}
            metrics.add_episode(stats)
            team = episode.get("team")
            if team is not None and len(team) <= 64:
                metrics.add_episode({k: stats[k] for k in ("return", "length") if k in stats},
                                    suffix=f"/{team}")
        means = {k: v for k, v in meta["means"].items() if len(k) < 64 and math.isfinite(v)}
        metrics.add_means(means)
        if "replay/size" in means and sum(x.stream == s.stream for x in self.shards) > 1:
            # per shard too: replay[1] -> replay/shard_1/size
            metrics.add_means({f"replay/shard_{s.child.spec.get('shard', 0)}/size":
                               means["replay/size"]})

    def _addresses(self, s: Shard, meta: dict) -> None:
        sample, request = meta["sample_address"], meta["request_address"]
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

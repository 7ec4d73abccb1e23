"""Wiring of a run: its workers and streams, read off the config's
:class:`~jaxsrl.experiment.dataflow.Dataflow`.

:func:`agent_setup` resolves the agent and spaces (every ``ValueError`` before anything
starts); :func:`new_run` makes the run's ZeroMQ context and picks its spawner and bind
host (serial mode: threads and ``inproc://``); :func:`start` builds the trainers (one
per ``[dataflow]`` trainer), the inference servers (local threads or remote processes)
and the actors, and starts them. The learner's placement
(:class:`~jaxsrl.launch.placement.LearnerPlacement`) is asked the same questions for
one process and for N learner processes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable

import jax
import zmq

from jaxsrl.core.agent import AgentFns, EnvSpec
from jaxsrl.envs import env_has_idle_rows
from jaxsrl.experiment import events
from jaxsrl.experiment import resume as resumption
from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.experiment.metrics import MetricsWriter, PolicyMetrics
from jaxsrl.launch import serial
from jaxsrl.launch.buffer_processes import BufferProcesses, shard_specs
from jaxsrl.launch.control import Run
from jaxsrl.launch.inference_backends import inference_backend
from jaxsrl.launch.periodic_eval import PeriodicEvaluator
from jaxsrl.launch.population import Population
from jaxsrl.launch.processes import ChildProcess, local_spawner
from jaxsrl.launch.selfplay import SelfPlay
from jaxsrl.launch.supervision import ComponentDied
from jaxsrl.launch.topology import envs_of
from jaxsrl.launch.worker_threads import Kind, WorkerThread
from jaxsrl.parallel import devices
from jaxsrl.streams import security, sockets
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.spaces import action_leaf, space_leaves
from jaxsrl.workers.learner import replay_setup

log = logging.getLogger("jaxsrl")


@dataclasses.dataclass
class AgentSetup:
    """The agent of a run and the spaces it is built for.

    Attributes:
      spec: per-row observation and action spaces.
      teams: team of each agent of one environment (``jaxsrl.envs.EnvInfo.teams``).
      fns_of: trainer name -> its :class:`AgentFns` (learning-rate schedules follow each
        trainer's planned updates, ``updates``).
      act: the first trainer's ``act`` jitted for this process's inference servers
        (``act`` and ``initial_carry`` do not depend on the plan).
      flow: the run's graph with a buffer worker on every off-policy trainer's stream
        (``replay_setup.complete_dataflow``).
    """

    spec: EnvSpec
    teams: list
    fns_of: dict[str, AgentFns]
    updates: dict[str, int]
    act: Any
    flow: Any = None

    @property
    def fns(self) -> AgentFns:
        return next(iter(self.fns_of.values()))

    def rows_per_env(self, team) -> int:
        """Rows of one environment on a stream serving ``team`` (``None``: every agent)."""
        return len(self.teams) if team is None else sum(t == team for t in self.teams)


def planned_updates(cfg: Any, flow: Any, teams: list, replay: Any = None) -> dict:
    """Planned ``learn`` calls of each trainer over ``cfg.total_env_steps`` env frames:
    the horizon of its policy's learning-rate schedule.

    A trainer takes ``batch_segments * segment_length`` row-steps per update; each env
    frame gives its policy ``rows`` row-steps, the number of agents of one environment
    whose rows go to its sample stream, averaged over the actor groups weighted by their
    environments (``ActorGroup.count * envs_per_actor``). So::

        num_updates = ceil(total_env_steps * rows / (batch_segments * segment_length))

    (``RunConfig.num_updates(rows)``). On ``--resume`` this is recomputed from the
    current ``--total_env_steps`` while the optimiser's step count is restored: the
    schedule is a function of that count only, so a resumed run continues on the
    schedule it would have followed had it been planned for the new total from the
    start (``docs/reliability.md``, "Learner interruption and checkpoints").

    Off-policy agents (``replay``, their ``ReplaySpec``) insert one item per row-step
    and learn at the replay ratio: :func:`jaxsrl.workers.learner.replay_setup.planned_updates`.

    Args:
      cfg: the run config.
      flow: its :class:`~jaxsrl.experiment.dataflow.Dataflow`.
      teams: team of each agent of one environment (``jaxsrl.envs.EnvInfo.teams``).
      replay: the agent's ``ReplaySpec``, or ``None`` (on-policy).

    Returns:
      ``{trainer name: planned updates}`` (at least 1 each).
    """
    out = {}
    for t in flow.trainers:
        frames = rows = 0.0
        for a in flow.actors:
            envs = a.count * envs_of(cfg, a)
            frames += envs
            rows += envs * sum(len(teams) if team is None else sum(x == team for x in teams)
                               for team, _, sample in a.bindings() if sample == t.sample_stream)
        out[t.name] = ((replay_setup.planned_updates(cfg.total_env_steps * rows / frames, replay)
                        if replay else cfg.num_updates(rows / frames)) if rows else 1)
    return out


def agent_setup(cfg: Any, flow: Any, placement: Any) -> AgentSetup:
    """Resolve the agent and spaces of a run and jit its ``act``.

    Raises:
      ValueError: ``batch_segments`` not divisible by the local devices, or an
        unsupported observation or action space.
    """
    n_dev = placement.local_mesh.size
    if cfg.batch_segments % n_dev:
        raise ValueError(f"batch_segments={cfg.batch_segments} is not divisible by the "
                         f"{n_dev} local devices")
    factory = factory_of_run(cfg)
    obs_space, action_space = factory.env.observation_space, factory.env.action_space
    space_leaves(obs_space)  # ValueError naming an unsupported space, before anything starts
    action_leaf(action_space)
    spec = EnvSpec(obs_space, action_space)
    teams = factory.env.teams
    updates = planned_updates(cfg, flow, teams, factory.make(1).replay)  # make: closures only
    fns_of = {t.name: factory.make(updates[t.name]) for t in flow.trainers}
    flow = replay_setup.complete_dataflow(flow, fns_of, placement.processes, cfg)
    act = placement.jit_act(fns_of[flow.trainers[0].name].act)
    return AgentSetup(spec, teams, fns_of, updates, act, flow)


def new_run(cfg: Any, flow: Any, logdir: str, clock: Any, placement: Any, spawner: Any) -> Run:
    """A :class:`Run` with its own ZeroMQ context, spawner and bind host.

    Raises:
      ValueError: serial mode given another spawner.
    """
    context = zmq.Context()  # one per run: its sockets (and the CURVE authenticator) end with it
    if cfg.launcher == "serial":
        try:
            threads = serial.spawner_for(context, spawner)
        except ValueError:
            context.destroy(linger=0)
            raise
        return Run(cfg, flow, logdir, clock, placement, threads, sockets.INPROC, context,
                   actor_threads=threads)
    return Run(cfg, flow, logdir, clock, placement, spawner or local_spawner, cfg.host, context)


def start(run: Run, setup: AgentSetup, restored: Callable[[], None] = lambda: None) -> None:
    """Build and start every worker and actor of ``run``; ``restored`` is called once
    the trainers' states are built (restored, on ``--resume``), before anything starts.

    Raises:
      ComponentDied: a worker failed to start.
    """
    cfg, flow = run.cfg, run.flow
    run.store = run.placement.parameter_store()
    run.inference = inference_backend(cfg)
    num_actors = sum(a.count for a in flow.actors)
    num_keys = num_actors + run.inference.client_keys(flow)
    run.keys = security.CurveKeys.generate(range(num_keys)) if cfg.curve else None
    run.auth = security.start_authenticator(run.context, run.keys.allowed()) if run.keys else None
    run.population = Population.of_run(cfg, run.logdir, run.metrics)  # None without --population
    buffers = _buffer_processes(run, setup)  # None unless a buffer has placement "process"
    _build_trainers(run, setup, buffers)
    restored()
    if buffers is not None:
        buffers.metrics_of = {s: run.trainers[s].metrics for s in buffers.streams()}
    run.selfplay = SelfPlay.of_run(run)  # opponent pools: None without [opponents]
    inference = run.inference.build(run, setup)
    manager = (run.population.manager({t.policy: t for t in run.trainers.values()})
               if run.population else None)  # PBT over the members' trainers (before they start)
    run.workers = ([WorkerThread(t, Kind.TRAINER) for t in run.trainers.values()]
                   + ([WorkerThread(manager, Kind.WATCH)] if manager else [])
                   + ([WorkerThread(run.selfplay.worker, Kind.WATCH)] if run.selfplay else [])
                   + inference
                   + ([WorkerThread(buffers, Kind.WATCH)] if buffers else [])
                   + [WorkerThread(w, Kind.WATCH) for w in run.placement.watchers()])
    run.writer = MetricsWriter(run.logdir)
    _start_workers(run)
    run.seed_base = cfg.seed + run.metrics.env_steps
    _build_actors(run, setup, buffers)
    for a in run.actors:
        a.start()
    run.evaluator = PeriodicEvaluator(run.logdir, cfg.eval_every, cfg.eval_episodes)


def segment_rows(cfg: Any, flow: Any, setup: AgentSetup, stream: str) -> int:
    """Most rows one segment of sample stream ``stream`` has (its actor groups' envs per
    ring group times the rows of one env on the stream)."""
    return max([envs_of(cfg, a) // cfg.ring_size * setup.rows_per_env(team)
                for a in flow.actors for team, _, sample in a.bindings()
                if sample == stream] or [1])


def _buffer_processes(run: Run, setup: AgentSetup) -> BufferProcesses | None:
    """The supervisor of the buffers placed ``"process"`` (``None`` if there are none)."""
    specs = {}
    for b in run.flow.buffers:
        if b.placement == "process":
            t = next(t for t in run.flow.trainers if t.sample_stream == b.sample_stream)
            specs[b.sample_stream] = shard_specs(
                run.cfg, b, setup.fns_of[t.name], setup.updates[t.name],
                segment_rows(run.cfg, run.flow, setup, b.sample_stream), run.logdir)
    if not specs:
        return None
    return BufferProcesses(
        run.cfg, specs, {s: run.metrics for s in specs}, run.table,
        run.actor_runs, run.context, run.spawner)


def _build_trainers(run: Run, setup: AgentSetup, buffers: BufferProcesses | None = None) -> None:
    """One trainer per ``[dataflow]`` trainer, from a fresh or restored state."""
    cfg, flow, placement = run.cfg, run.flow, run.placement
    for i, t in enumerate(flow.trainers):
        ckpt = placement.checkpointer(RunDir(run.logdir).checkpoint_dir(t.policy),
                                      cfg.keep_checkpoints)
        run.checkpointers.append(ckpt)
        fns = setup.fns_of[t.name]
        rng = jax.random.PRNGKey(cfg.seed + 1000 * i)
        rng, init_key = jax.random.split(rng)
        state = devices.put_replicated(fns.init(init_key), placement.local_mesh)
        version = 0
        if cfg.resume:
            tree, meta = ckpt.restore({"agent": state, "rng": rng}, set_aside_unreadable=True)
            state = resumption.apply_hyperparameters(tree["agent"], state, t.policy, cfg)
            rng, version = tree["rng"], int(meta["policy_version"])
            run.metrics.env_steps = max(run.metrics.env_steps, int(meta.get("env_steps", 0)))
            events.emit(log, logging.INFO, "resumed", {"policy": t.policy, "version": version,
                        "env_steps": run.metrics.env_steps},
                        "resumed %s from version %d, %d env steps", t.policy, version,
                        run.metrics.env_steps)
        rows = segment_rows(cfg, flow, setup, t.sample_stream)
        state, rng = placement.share_state(t.name, t.policy, state, rng, version,
                                           num_updates=setup.updates[t.name], max_rows=rows)
        connect = (buffers.connector(t.sample_stream)
                   if buffers and t.sample_stream in buffers.streams() else None)
        kind, extra = replay_setup.trainer_kind(fns, cfg, setup.updates[t.name], connect)
        run.trainers[t.sample_stream] = kind(
            t.name, t.policy, replay_setup.jit_learn(fns, placement), placement.put_batch,
            state, rng, version, setup.spec.observation_space, setup.spec.action_space,
            cfg.segment_length, cfg.batch_segments // placement.processes, run.store,
            (run.population.metrics_for(t.policy) if run.population else
             PolicyMetrics(run.metrics, t.policy) if len(flow.trainers) > 1 else run.metrics),
            ckpt, cfg.max_staleness, run.bind_host, setup.fns.initial_carry, actors=run.table,
            max_rows=rows, on_nonfinite=cfg.on_nonfinite, context=run.context,
            curve=run.server_keys, before_update=placement.gate(t.policy, run.metrics),
            idle_rows=env_has_idle_rows(cfg.env), **extra)


def _start_workers(run: Run) -> None:
    for w in run.workers:
        w.start()
    for w in run.workers:
        w.worker.ready.wait()
        if w.worker.error is not None:
            raise ComponentDied(f"{w.name} failed to start: {w.worker.error!r}") from w.worker.error
    acting = run.inference.compiling()
    log.info("servers listening after %.1f s; starting actors while %s on %d device(s) (the "
             "first run of a config compiles for longer; later runs hit the XLA cache)",
             run.clock(), acting, run.placement.local_mesh.size)


def _build_actors(run: Run, setup: AgentSetup, buffers: BufferProcesses | None = None) -> None:
    """One :class:`ChildProcess` per actor of every actor group (not started), served by
    the run's inference backend (``run.inference``: its servers, or inline actors fed by
    its parameter stream, whose streams name no inference server)."""
    cfg, keys, inference = run.cfg, run.keys, run.inference
    inline_spec = inference.inline_spec()
    carry_spec = CarryCodec(setup.fns.initial_carry).spec()
    for a in run.flow.actors:
        for k in range(a.count):
            idx = len(run.actors)
            streams = [{"policy": run.trainers[sample].policy, "team": team,
                        **inference.assign(stream),  # its server(s)
                        "sample_address": run.placement.sample_address(
                            idx, buffers.sample_address(sample, idx)
                            if buffers and sample in buffers.streams()
                            else run.trainers[sample].address),
                        "sample_hwm": run.trainers[sample].sample_send_hwm,
                        "sample_sndbuf": run.trainers[sample].sample_buffer_bytes}
                       for team, stream, sample in a.bindings()]
            error_file = RunDir(run.logdir).error_file(f"actor{idx}")
            if os.path.exists(error_file):
                os.remove(error_file)
            spec = {"actor_id": idx, "env": cfg.env, "env_kwargs": cfg.env_kwargs or {},
                    "clip_actions": cfg.clip_actions,
                    "envs_per_group": envs_of(cfg, a) // cfg.ring_size, "ring_size": cfg.ring_size,
                    "segment_length": cfg.segment_length, "seed": run.seed_base,
                    "streams": streams, "carry_spec": carry_spec,
                    "timeout_s": cfg.actor_timeout_s, "failover_s": cfg.inference_failover_s,
                    "parent_pid": os.getpid(), "error_file": error_file,
                    "curve_server_key": keys.server_public.decode() if keys else None,
                    "opponents": run.selfplay.actor_spec() if run.selfplay else None,
                    "inline": inline_spec}
            run.actors.append(ChildProcess(f"{a.name}[{k}]", spec, table=run.table,
                                           env=keys.client_env(idx) if keys else None,
                                           prefix=tuple(a.launch_prefix), spawner=run.spawner,
                                           module=inference.actor_module()))

"""Wiring of a run: its workers and streams, read off the config's
:class:`~jaxsrl.experiment.dataflow.Dataflow`.

:func:`agent_setup` resolves the agent and spaces (every ``ValueError`` before anything
starts); :func:`new_run` makes the run's frozen :class:`~jaxsrl.launch.control.RunContext`
(ZeroMQ context, spawner and bind host, inference backend, parameter store, CURVE keys,
population); :func:`start` runs the builders of :mod:`jaxsrl.launch.builders` over it
(trainers, one per ``[dataflow]`` trainer; the inference backend's workers; buffers;
actors) and starts what they built. The differences between modes live in the builders
and in the inference backends (:mod:`jaxsrl.launch.inference_backends`), not here. The
learner's placement (:class:`~jaxsrl.launch.placement.LearnerPlacement`) is asked the
same questions for one process and for N learner processes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import zmq

from jaxsrl.core.agent import AgentFns, EnvSpec
from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.experiment.metrics import MetricsAccumulator, MetricsWriter
from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.launch import builders, device_trainers, serial
from jaxsrl.launch.control import Run, RunContext
from jaxsrl.launch.inference_backends import inference_backend
from jaxsrl.launch.periodic_eval import PeriodicEvaluator
from jaxsrl.launch.population import Population
from jaxsrl.launch.supervision import ComponentDied
from jaxsrl.launch.topology import envs_of
from jaxsrl.streams.spaces import action_leaf, space_leaves
from jaxsrl.tools.eval_result import supports_deterministic
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
        out[t.name] = replay_setup.updates_of_plan(cfg, rows, frames, replay) if rows else 1
    return out


def agent_setup(cfg: Any, flow: Any, placement: Any) -> AgentSetup:
    """Resolve the agent and spaces of a run and jit its ``act``.

    Raises:
      ValueError: ``batch_segments`` not divisible by the local devices, an
        unsupported observation or action space, a JAX-native env's agent that
        device actors cannot run (:func:`jaxsrl.launch.device_trainers.check`), or
        ``--eval_every`` with an agent whose ``act`` takes no ``deterministic`` keyword.
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
    replay = factory.make(1).replay  # make: closures only
    if is_jax_native(cfg.env):  # device actors: their own plan and limits
        device_trainers.check(cfg, flow, replay, n_dev)
        updates = device_trainers.planned_updates(cfg, flow, replay)
    else:
        updates = planned_updates(cfg, flow, teams, replay)
    fns_of = {t.name: factory.make(updates[t.name]) for t in flow.trainers}
    act = fns_of[flow.trainers[0].name].act
    if cfg.eval_every > 0 and not supports_deterministic(act):
        raise ValueError(f"--eval_every={cfg.eval_every}: the agent's act() has no "
                         "'deterministic' keyword (evaluations take the most likely action)")
    flow = replay_setup.complete_dataflow(flow, fns_of, placement.processes, cfg)
    act = placement.jit_act(fns_of[flow.trainers[0].name].act)
    return AgentSetup(spec, teams, fns_of, updates, act, flow)


def new_run(cfg: Any, flow: Any, logdir: str, clock: Any, placement: Any, spawner: Any) -> Run:
    """A :class:`Run` over a new frozen :class:`RunContext`: its own ZeroMQ context,
    spawner and bind host (:func:`jaxsrl.launch.serial.launch_site`), the inference
    backend picked from ``cfg``, the learner's parameter store, the CURVE keys of its
    actors and servers, its population.

    Raises:
      ValueError: serial mode given another spawner.
    """
    inference = inference_backend(cfg)
    keys = builders.curve_keys(cfg, flow, inference)
    metrics = MetricsAccumulator()
    population = Population.of_run(cfg, logdir, metrics)  # None without --population
    context = zmq.Context()  # one per run: its sockets (and the CURVE authenticator) end with it
    try:
        where, host, actor_threads = serial.launch_site(cfg, context, spawner)
    except ValueError:
        context.destroy(linger=0)
        raise
    return Run(RunContext(cfg, flow, logdir, clock, placement, where, host, context, inference,
                          placement.parameter_store(), keys, population, actor_threads,
                          metrics=metrics))


def start(run: Run, setup: AgentSetup, restored: Callable[[], None] = lambda: None) -> None:
    """Build and start every worker and actor of ``run``; ``restored`` is called once
    the trainers' states are built (restored, on ``--resume``), before anything starts.

    Raises:
      ComponentDied: a worker failed to start.
    """
    run.auth = builders.authenticator(run)
    run.buffers = builders.buffer_processes(run, setup)
    builders.trainers(run, setup)
    restored()
    run.selfplay = builders.selfplay(run)
    run.workers = [w for build in builders.WORKERS for w in build(run, setup)]
    run.writer = MetricsWriter(run.logdir)
    _start_workers(run)
    run.seed_base = run.cfg.seed + run.metrics.env_steps
    run.actors = builders.actors(run, setup)
    for a in run.actors:
        a.start()
    run.evaluator = PeriodicEvaluator(run.logdir, run.cfg.eval_every, run.cfg.eval_episodes,
                                      run.cfg.compilation_cache_dir)


def _start_workers(run: Run) -> None:
    for w in run.workers:
        w.start()
    for w in run.workers:
        w.worker.ready.wait()
        if w.worker.error is not None:
            raise ComponentDied(f"{w.name} failed to start: {w.worker.error!r}") from w.worker.error
    if run.inference.actor_placement == "device":
        log.info("learners started after %.1f s; %s on %d device(s) (the first run of a "
                 "config compiles for longer; later runs hit the XLA cache)", run.clock(),
                 run.inference.compiling(), run.placement.local_mesh.size)
        return
    log.info("servers listening after %.1f s; starting actors while %s on %d device(s) (the "
             "first run of a config compiles for longer; later runs hit the XLA cache)",
             run.clock(), run.inference.compiling(), run.placement.local_mesh.size)

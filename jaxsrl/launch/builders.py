"""The builders of a run's workers, one per kind, each read off the run's frozen
:class:`~jaxsrl.launch.control.RunContext` (``run.cfg``, ``run.flow``, ``run.placement``,
``run.store``, ``run.metrics``, ``run.keys``, ...) and what earlier builders made.

:func:`jaxsrl.launch.wiring.start` calls them in this order: :func:`authenticator`,
:func:`buffer_processes`, :func:`trainers`, (the restore callback), :func:`selfplay`,
then every builder of :data:`WORKERS` (each returns its worker threads, not started),
then :func:`actors`. The differences between modes live here and in
:mod:`jaxsrl.launch.inference_backends`; the wiring holds none.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable


from jaxsrl.envs import env_has_idle_rows
from jaxsrl.experiment.metrics import PolicyMetrics
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch import specs
from jaxsrl.launch.buffer_processes import BufferProcesses, shard_specs
from jaxsrl.launch.control import Run
from jaxsrl.launch.device_trainers import device_trainers
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.launch.selfplay import SelfPlay
from jaxsrl.launch.topology import envs_of
from jaxsrl.launch.trainer_state import initial_state
from jaxsrl.launch.worker_threads import Kind, WorkerThread
from jaxsrl.streams import security
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.workers.learner import replay_setup
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart

log = logging.getLogger("jaxsrl")


def segment_rows(cfg: Any, flow: Any, setup: Any, stream: str) -> int:
    """Most rows one segment of sample stream ``stream`` has (its actor groups' envs per
    ring group times the rows of one env on the stream)."""
    return max([envs_of(cfg, a) // cfg.ring_size * setup.rows_per_env(team)
                for a in flow.actors for team, _, sample in a.bindings()
                if sample == stream] or [1])


def curve_keys(cfg: Any, flow: Any, inference: Any) -> security.CurveKeys | None:
    """The run's CURVE keys (``--curve``; else ``None``): client ids ``0 ..`` are the
    actors', then those of the inference backend's own processes."""
    if not cfg.curve:
        return None
    return security.CurveKeys.generate(range(sum(a.count for a in flow.actors)
                                             + inference.client_keys(flow)))


def authenticator(run: Run) -> Any:
    """The run's CURVE authenticator (started), or ``None`` without ``--curve``."""
    return security.start_authenticator(run.context, run.keys.allowed()) if run.keys else None


def buffer_processes(run: Run, setup: Any) -> BufferProcesses | None:
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
    return BufferProcesses(run.cfg, specs, {s: run.metrics for s in specs}, run.table,
                           run.actor_runs, run.context, run.spawner)


def _trainer_metrics(run: Run, policy: str) -> Any:
    """What the trainer of ``policy`` records into: its population member's metrics, its
    policy's (several trainers), or the run's."""
    if run.population:
        return run.population.metrics_for(policy)
    return PolicyMetrics(run.metrics, policy) if len(run.flow.trainers) > 1 else run.metrics


def trainers(run: Run, setup: Any) -> dict:
    """One trainer per ``[dataflow]`` trainer, from a fresh or restored state, added to
    ``run.trainers`` (``{sample stream: trainer}``, returned) as each is made, its
    checkpointer to ``run.checkpointers`` (so a failed restore leaves them to close).
    Device actors (a JAX-native env): the device learners of
    :func:`jaxsrl.launch.device_trainers.device_trainers` instead."""
    if run.inference.actor_placement == "device":  # JAX-native env: device learners
        return device_trainers(run, setup)
    cfg, flow, placement, buffers = run.cfg, run.flow, run.placement, run.buffers
    out = run.trainers
    for i, t in enumerate(flow.trainers):
        ckpt = placement.checkpointer(RunDir(run.logdir).checkpoint_dir(t.policy),
                                      cfg.keep_checkpoints)
        run.checkpointers.append(ckpt)
        fns = setup.fns_of[t.name]
        state, rng, version = initial_state(run, t, i, fns, ckpt)
        rows = segment_rows(cfg, flow, setup, t.sample_stream)
        state, rng = placement.share_state(t.name, t.policy, state, rng, version,
                                           num_updates=setup.updates[t.name], max_rows=rows)
        connect = (buffers.connector(t.sample_stream)
                   if buffers and t.sample_stream in buffers.streams() else None)
        kind, extra = replay_setup.trainer_kind(fns, cfg, setup.updates[t.name], connect)
        settings = TrainerSettings(
            cfg.segment_length, cfg.batch_segments // placement.processes,
            max_staleness=cfg.max_staleness, max_rows=rows, on_nonfinite=cfg.on_nonfinite,
            idle_rows=env_has_idle_rows(cfg.env), host=run.bind_host, curve=run.server_keys)
        out[t.sample_stream] = kind(
            t.name, t.policy, replay_setup.jit_learn(fns, placement), placement.put_batch,
            TrainerStart(state, rng, version), setup.spec, settings, run.store,
            _trainer_metrics(run, t.policy), initial_carry=setup.fns.initial_carry,
            checkpointer=ckpt, actors=run.table, context=run.context,
            before_update=placement.gate(t.policy, run.metrics), **extra)
    return out


def selfplay(run: Run) -> SelfPlay | None:
    """The run's opponent pools (trainers built): ``None`` without ``[opponents]``."""
    return SelfPlay.of_run(run)


def trainer_workers(run: Run, setup: Any) -> list[WorkerThread]:
    """The trainers' threads: one per trainer (a device population's members share one,
    their handles' ``worker``)."""
    learners = dict.fromkeys(getattr(t, "worker", t) for t in run.trainers.values())
    return [WorkerThread(t, Kind.TRAINER) for t in learners]


def population_workers(run: Run, setup: Any) -> list[WorkerThread]:
    """The population manager (PBT over the members' trainers, made before they start)."""
    if not run.population:
        return []
    return [WorkerThread(run.population.manager({t.policy: t for t in run.trainers.values()}),
                         Kind.WATCH)]


def selfplay_workers(run: Run, setup: Any) -> list[WorkerThread]:
    return [WorkerThread(run.selfplay.worker, Kind.WATCH)] if run.selfplay else []


def inference_workers(run: Run, setup: Any) -> list[WorkerThread]:
    return run.inference.build(run, setup)


def buffer_workers(run: Run, setup: Any) -> list[WorkerThread]:
    """The buffer processes' supervisor, reporting into each stream's trainer metrics."""
    if run.buffers is None:
        return []
    run.buffers.metrics_of = {s: run.trainers[s].metrics for s in run.buffers.streams()}
    return [WorkerThread(run.buffers, Kind.WATCH)]


def learner_watchers(run: Run, setup: Any) -> list[WorkerThread]:
    """Watches of the learner's other processes (none for one process)."""
    return [WorkerThread(w, Kind.WATCH) for w in run.placement.watchers()]


#: The builders of a run's worker threads, in start order (trainers first).
WORKERS: tuple[Callable[[Run, Any], list[WorkerThread]], ...] = (
    trainer_workers, population_workers, selfplay_workers, inference_workers, buffer_workers,
    learner_watchers)


def actors(run: Run, setup: Any) -> list[ChildProcess]:
    """One :class:`ChildProcess` per actor of every actor group (not started), served by
    the run's inference backend (``run.inference``: its servers, or inline actors fed by
    its parameter stream, whose streams name no inference server); none for device actors."""
    cfg, keys, inference, buffers = run.cfg, run.keys, run.inference, run.buffers
    if inference.actor_placement == "device":  # the envs step inside the learners' calls
        return []
    inline = inference.inline_spec()
    carry_spec = CarryCodec(setup.fns.initial_carry).spec()
    out: list[ChildProcess] = []
    for a in run.flow.actors:
        for k in range(a.count):
            idx = len(out)
            streams = [specs.stream_spec(
                run.trainers[sample].policy, run.placement.sample_address(
                    idx, buffers.sample_address(sample, idx)
                    if buffers and sample in buffers.streams() else run.trainers[sample].address),
                inference.assign(stream), team, run.trainers[sample].sample_send_hwm,
                run.trainers[sample].sample_buffer_bytes)
                for team, stream, sample in a.bindings()]
            error_file = RunDir(run.logdir).error_file(f"actor{idx}")
            if os.path.exists(error_file):
                os.remove(error_file)
            spec = specs.actor_spec(
                cfg, idx, streams, carry_spec, envs_per_actor=envs_of(cfg, a), seed=run.seed_base,
                error_file=error_file,
                curve_server_key=keys.server_public.decode() if keys else None,
                opponents=run.selfplay.actor_spec() if run.selfplay else None, inline=inline)
            out.append(ChildProcess(f"{a.name}[{k}]", spec, table=run.table,
                                    env=keys.client_env(idx) if keys else None,
                                    prefix=tuple(a.launch_prefix), spawner=run.spawner,
                                    module=inference.actor_module()))
    return out

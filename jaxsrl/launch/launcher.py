"""Launcher: builds the dataflow of a run, starts every worker, watches and stops them.

The accelerator process (this one) hosts the policy workers and trainers as threads
sharing parameters on device; actors are separate OS processes started here
(``--launcher=serial``: threads of this process, :mod:`jaxsrl.launch.serial`). With
``--remote_inference`` the policy workers are processes too, started, fed parameters
and restarted by :class:`~jaxsrl.launch.remote_inference.RemoteInferenceServers`. With
``--num_learner_processes`` > 1 this process is learner process 0 of a multi-process
learner (:class:`~jaxsrl.launch.learner_group.LearnerGroup`). The wiring of workers and
streams is :mod:`jaxsrl.launch.wiring`, driven by the config's
:class:`~jaxsrl.experiment.dataflow.Dataflow`; the control loop is
:mod:`jaxsrl.launch.control`, the actors' restart policy :mod:`jaxsrl.launch.supervision`.

Guarantees (see ``docs/reliability.md``): Ctrl-C, SIGTERM or a crashed component stop
the run, save a checkpoint and leave no child process (actors run in their own
session, so a terminal's Ctrl-C reaches only the launcher, and die with this process
via ``PR_SET_PDEATHSIG``); a crashed actor, or a hung one (silent for
``actor_heartbeat_timeout_s`` while the servers are responsive), is restarted with a
new run id, so messages of its previous run are dropped by the servers (up to
``max_actor_restarts`` restarts per run); so is an actor that got no answer from an
inference server that kept serving (its host or network failed: counted as
``actor_unreachable``); an actor whose runs keep failing before reaching the servers
is restarted with a growing delay (:func:`restart_delay`); an environment that keeps
failing stops the run with its error; a dead or stalled inference server or trainer
stops the run with an error naming it.

A JAX-native ``--env`` (``gymnax:CartPole-v1``) runs on device actors: the same run
(folder, checks, control loop, checkpoints, evaluation, population, shutdown) whose
learners step the environments themselves (:mod:`jaxsrl.launch.device_trainers`, picked
by the inference backend :class:`~jaxsrl.launch.inference_backends.DeviceActors`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from typing import Any


from jaxsrl.core import interrupts
from jaxsrl.experiment import events
from jaxsrl.experiment import inline as inline_lib
from jaxsrl.experiment import resume as resumption
from jaxsrl.experiment import run_dir as run_folder
from jaxsrl.experiment.metrics import Clock
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.launch import wiring
from jaxsrl.launch.device_trainers import envs_text
from jaxsrl.launch.control import ControlLoop, Run
from jaxsrl.launch.placement import learner_placement
from jaxsrl.launch.processes import Spawner, stop_all
from jaxsrl.launch.supervision import ComponentDied, restart_delay
from jaxsrl.launch.wiring import planned_updates
from jaxsrl.parallel import devices, distributed
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams import security

#: Also importable from here: the run's error, the actors' backoff, the LR-schedule plan.
__all__ = ["ComponentDied", "default_logdir", "planned_updates", "restart_delay", "train"]

log = logging.getLogger("jaxsrl")


def default_logdir(cfg) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    agent = cfg.agent_field or cfg.agent  # a module:OBJ agent: its name
    return os.path.join("runs", f"{cfg.env.replace('/', '_').replace(':', '_')}-{agent}-{stamp}")


def train(cfg: Any, spawner: Spawner | None = None) -> dict:
    """Run one experiment described by ``cfg`` to completion.

    Args:
      cfg: the run config (:func:`jaxsrl.experiment.config.load_config`).
      spawner: where every child process of the run starts (default
        :func:`~jaxsrl.launch.processes.local_spawner`; ``jaxsrl.launch.ray_placement`` passes one that
        places them on a Ray cluster; ``--launcher=serial`` uses its own and takes none).

    Returns:
      The last metrics record (``env_steps``, ``episode_return_mean``, ...), plus
      ``logdir``.

    Raises:
      ComponentDied: an inference server, trainer or (repeatedly) an actor died.
      FileNotFoundError: ``--resume`` without a checkpoint in ``--logdir``.
      RunFolderError: ``--logdir`` is locked by another live run, holds a run without
        ``--resume`` / ``--overwrite``, or holds files named like a run's that no jaxsrl
        run wrote (a ``ValueError``). Nothing in the folder is deleted or written until
        every check has passed (:func:`jaxsrl.experiment.run_dir.prepare`).
      ValueError: an impossible config (before any worker or process starts).
      KeyboardInterrupt: Ctrl-C or SIGTERM (after a clean shutdown and checkpoint).
    """
    cfg.validate()
    logdir = cfg.logdir or default_logdir(cfg)
    if cfg.resume and not RunDir(logdir).has_checkpoint():
        raise FileNotFoundError(f"--resume: no checkpoint under {RunDir(logdir).checkpoints_path} "
                                "(give the --logdir of a run that saved one)")
    created = not os.path.isdir(logdir)
    # Locked until the run has ended; checked, but not changed (that is _train's prepare).
    lock = run_folder.claim(logdir, cfg.resume, cfg.overwrite)
    try:
        with events.recording(RunDir(logdir).events_path):
            return _train(cfg, spawner, logdir)
    finally:
        lock.release()
        if created:
            run_folder.remove_if_unused(logdir)


def _configure(cfg: Any) -> None:
    """Process-wide settings of a run: the XLA cache, a warning for open streams."""
    enable_compilation_cache(cfg.compilation_cache_dir)
    if cfg.launcher != "serial" and not security.is_loopback(cfg.host) and not cfg.curve:
        log.warning("servers bind %s without --curve: streams are unauthenticated plaintext "
                    "(anyone who can reach this host can send samples)", cfg.host)


def _inference_mode(cfg: Any, flow: Any, setup: Any, placement: Any) -> tuple[Any, str]:
    """``cfg`` with ``inference="auto"`` resolved (:func:`inline_lib.auto_mode`), and why
    (device actors: ``cfg`` as it is, no inference servers)."""
    if is_jax_native(cfg.env):
        members = cfg.population or 0
        who = "members' policies" if members else "policy"
        return cfg, (f"none, actors on the device: {cfg.env} is a JAX-native environment, so its "
                     f"{envs_text(cfg.batch_segments, members)} step on the device next to the "
                     f"{who} inside one compiled "
                     f"rollout-and-learn step of {cfg.segment_length} steps per update "
                     "(device actors)")
    if cfg.inference != "auto":
        return cfg, cfg.inference
    off_policy = any(fns.replay is not None for fns in setup.fns_of.values())
    accelerator = any(d.platform != "cpu" for d in placement.local_mesh.devices.flat)
    mode, why = inline_lib.auto_mode(cfg, flow, off_policy, accelerator)
    cfg = dataclasses.replace(cfg, inference=mode)
    cfg.validate()  # the same checks as an explicit --inference=<mode>
    return cfg, why


def devices_line(learner_devices: Any, processes: int, inline: bool, remote: bool,
                 jax_platforms: str = "", device_actors: bool = False) -> str:
    """The devices the learner and inference use, for the run's first log line, e.g.
    ``"learner cpu:0 (x1), inference the same (threads of the learner)"``.

    Args:
      learner_devices: the learner process's JAX devices (its local mesh).
      processes: learner processes (> 1: each of them has such devices).
      inline: inline inference (the actors act, on CPU unless ``jax_platforms`` says else).
      remote: inference servers are processes of their own, on their hosts' devices.
      jax_platforms: ``$JAX_PLATFORMS`` as the inline actors inherit it ("" if unset).
      device_actors: the envs step on the learner's devices (a JAX-native env).
    """
    learner = devices.describe(learner_devices)
    if device_actors:
        return f"learner {learner}, actors and inference the same (device actors)"
    if processes > 1:
        learner += f" in each of {processes} learner processes"
    if inline:
        inference = f"{jax_platforms or 'cpu'} in each inline actor process"
    elif remote:
        inference = "the local devices of each remote server process"
    else:
        inference = "the same (threads of the learner)"
    return f"learner {learner}, inference {inference}"


def _train(cfg: Any, spawner: Spawner | None, logdir: str) -> dict:
    """:func:`train` in the claimed run folder ``logdir``."""
    clock = Clock()
    flow = cfg.get_dataflow()
    _configure(cfg)
    # A multi-process learner joins its processes before any other JAX call.
    placement = learner_placement(cfg, None if cfg.launcher == "serial" else spawner)
    old_handlers: dict = {}
    record: dict = {}
    run: Run | None = None
    finished = False  # the control loop ended the run (not a signal or an error)
    try:
        setup = wiring.agent_setup(cfg, flow, placement)  # ValueErrors before anything starts
        requested = cfg.inference
        cfg, why = _inference_mode(cfg, flow, setup, placement)
        config = resumption.config_record(cfg, requested, logdir)  # config.json
        if cfg.resume:  # refused before anything is written; config.json once restored
            resumption.check(cfg, setup, logdir)
            why = resumption.inference_reason(RunDir(logdir).config_or_empty(), why)
        # Every check has passed (config, devices, agent against the env's spaces,
        # inference mode, on resume the checkpoint's structure): only now is the run
        # folder changed.
        run_folder.prepare(logdir, cfg.overwrite)
        if not cfg.resume:
            RunDir(logdir).write_config(config)
        device_actors = is_jax_native(cfg.env)
        where = devices_line(placement.local_mesh.devices.flat, placement.processes,
                             cfg.inline_inference, cfg.remote_inference,
                             os.environ.get("JAX_PLATFORMS", ""), device_actors)
        events.emit(log, logging.INFO, "run_start",
                    {"agent": cfg.agent, "env": cfg.env, "resume": bool(cfg.resume),
                     "launcher": cfg.launcher, "inference": cfg.inference, "pid": os.getpid(),
                     "devices": where, "actors": "device" if device_actors else "processes"},
                    "run of %s on %s starts in %s%s; inference: %s; devices: %s", cfg.agent,
                    cfg.env, logdir, " (resumed)" if cfg.resume else "", why, where)
        done = cfg.resume and resumption.budget_reached(logdir, cfg.total_env_steps)
        if done:
            log.warning("--resume: %s", done)
        run = wiring.new_run(cfg, setup.flow, logdir, clock, placement, spawner)
        old_handlers = interrupts.install_stop_handlers()
        wiring.start(run, setup, restored=lambda: resumption.commit_config(logdir, config))
        record.update(ControlLoop(run)())
        finished = True
    finally:
        # A second signal (e.g. from a process manager) must not cut the cleanup short.
        for sig in old_handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if run is not None:
                record.update(_shutdown(run, finished))
        finally:
            placement.close()
            interrupts.restore(old_handlers)
    return record | {"logdir": logdir}


def _shutdown(run: Run, finished: bool = False) -> dict:
    """Stop everything of ``run`` (learners' intake, then actors, then the other
    workers), save the final checkpoints and write
    the closing metrics line; returns the counters it holds. A ``finished`` run (its
    control loop ended it) also records its running evaluation and, if one is due, that
    of its final checkpoint (:meth:`PeriodicEvaluator.finish`); a stopped or failed one
    kills its evaluation at once."""
    record: dict = {}
    if run.evaluator is not None and not finished:
        run.evaluator.stop()
    # The learners take no more samples once the run is done: segments queued while the
    # actors stop would otherwise be learned and counted (docs/reliability.md, shutdown).
    for w in run.trainer_threads():
        w.worker.stop.set()
    stop_all(run.actors)
    for w in run.workers:
        w.worker.stop.set()
    for w in run.workers:
        if w.started:  # a device learner ends its compiled call first: as long as its longest
            w.thread.join(timeout=max(30.0, 2 * getattr(w.worker, "longest_call_s", 0.0)))
    for w in run.trainer_threads():
        t = w.worker
        # A dead learner process (PeerError) left the last update's state intact.
        if (t.error is None or isinstance(t.error, distributed.PeerError)) \
                and w.started and not w.thread.is_alive():
            t.extra_meta = {"wall_time_s": run.clock()}
            t.save_checkpoint()
    for ckpt in run.checkpointers:
        ckpt.close()
    if run.evaluator is not None and finished:
        final = [t.checkpointer.latest_step() for t in run.trainers.values()
                 if t.checkpointer is not None]
        for result in run.evaluator.finish(min(final) if None not in final and final else None):
            if run.writer is not None:
                run.writer.write(result | {"wall_time_s": run.clock()})
    if run.writer is not None:
        # Learners finish their last update after the control loop ends: one
        # closing line with the counters the final checkpoint holds.
        closing = {k: v for k, v in run.metrics.snapshot(1.0).items()
                   if k == "env_steps" or k.startswith("policy_version") or isinstance(v, int)}
        closing.update(wall_time_s=run.clock(), final=True)
        run.writer.write(closing)
        record.update({k: v for k, v in closing.items() if k != "final"})
        record.update(run.writer.last_returns)  # the last known return(s), not "none"
        run.writer.close()
    if run.auth is not None:
        run.auth.stop()
    run.end_context()
    saved = {t.policy: t.checkpointer.latest_step() for t in run.trainers.values()
             if t.checkpointer is not None}
    events.emit(log, logging.INFO, "run_end",
                {"env_steps": record.get("env_steps"), "checkpoints": saved},
                "stopped after %.1f s; %s; logs in %s", run.clock(),
                ", ".join(f"checkpoint of {p} at version {v}" if v is not None else
                          f"no checkpoint of {p} (stopped before its first save)"
                          for p, v in saved.items()) or "no checkpoint", run.logdir)
    return record

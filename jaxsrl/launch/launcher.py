"""Launcher: builds the dataflow of a run, starts every worker, watches and stops them.

The accelerator process (this one) hosts the policy workers and trainers as threads
sharing parameters on device; actors are separate OS processes started here. With
``--remote_inference`` the policy workers are processes too, started, fed parameters
and restarted by :class:`~jaxsrl.launch.remote_inference.RemoteInferenceServers`. With
``--num_learner_processes`` > 1 this process is learner process 0 of a multi-process
learner (:class:`~jaxsrl.workers.learner.process.LearnerGroup`). Wiring
of workers and streams happens in :func:`train` alone, driven by the config's
:class:`~jaxsrl.experiment.dataflow.Dataflow`.

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
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

import jax
import zmq

from jaxsrl.core.child import read_error
from jaxsrl.experiment import config as config_lib
from jaxsrl.parallel import devices
from jaxsrl.parallel import distributed
from jaxsrl.experiment import run_dir as run_folder
from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams import security
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.envs import env_has_idle_rows
from jaxsrl.streams.spaces import action_leaf, space_leaves
from jaxsrl.experiment.metrics import Clock, MetricsAccumulator, MetricsWriter, PolicyMetrics, console_line
from jaxsrl.streams.params import ParameterStore
from jaxsrl.launch.periodic_eval import PeriodicEvaluator
from jaxsrl.launch.population import Population
from jaxsrl.launch.processes import ActorProcess, Spawner, local_spawner, stop_all
from jaxsrl.launch.processes import exit_reason as _exit_reason
from jaxsrl.launch.remote_inference import RemoteInferenceServers
from jaxsrl.launch.topology import Assigner, server_names
from jaxsrl.core.exit_codes import EXIT_ENV_ERROR, EXIT_LEARNER_TIMEOUT, EXIT_SERVER_TIMEOUT
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.admission import ActorTable
from jaxsrl.workers.learner.process import LearnerGroup
from jaxsrl.workers.inference.policy import PolicyWorker
from jaxsrl.workers.learner.trainer import TrainerWorker

log = logging.getLogger("jaxsrl")


class ComponentDied(RuntimeError):
    """A worker of the run died; the message names it."""


def default_logdir(cfg) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    agent = cfg.agent_field or cfg.agent  # a module:OBJ agent: its name
    return os.path.join("runs", f"{cfg.env.replace('/', '_').replace(':', '_')}-{agent}-{stamp}")


# Set by SIGINT/SIGTERM during train(). The handler also raises KeyboardInterrupt, but
# Python drops an exception raised while a callback runs (e.g. JAX's GC callback:
# "Exception ignored in ..."), so the control loop checks this flag too.
_interrupted = threading.Event()


def _raise_interrupt(signum, frame):  # noqa: ARG001
    _interrupted.set()
    raise KeyboardInterrupt(f"signal {signum}")


def _install_stop_handlers() -> dict:
    """SIGINT and SIGTERM -> KeyboardInterrupt (+ flag); returns the previous handlers.

    Only the main thread may set handlers; elsewhere (e.g. train() in a worker thread)
    nothing changes and the caller's handling stays in charge.
    """
    _interrupted.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}


def train(cfg: Any, spawner: Spawner | None = None) -> dict:
    """Run one experiment described by ``cfg`` to completion.

    Args:
      cfg: the run config (:func:`jaxsrl.experiment.config.load_config`).
      spawner: where every child process of the run starts (default
        :func:`~jaxsrl.launch.processes.local_spawner`; ``jaxsrl.launch.ray_placement`` passes one that
        places them on a Ray cluster).

    Returns:
      The last metrics record (``env_steps``, ``episode_return_mean``, ...), plus
      ``logdir``.

    Raises:
      ComponentDied: an inference server, trainer or (repeatedly) an actor died.
      FileNotFoundError: ``--resume`` without a checkpoint in ``--logdir``.
      RunFolderError: ``--logdir`` is locked by another live run, or holds files
        without ``--resume`` / ``--overwrite`` (a ``ValueError``).
      ValueError: an impossible config (before any worker or process starts).
      KeyboardInterrupt: Ctrl-C or SIGTERM (after a clean shutdown and checkpoint).
    """
    cfg.validate()
    logdir = cfg.logdir or default_logdir(cfg)
    if cfg.resume and not RunDir(logdir).has_checkpoint():
        raise FileNotFoundError(f"--resume: no checkpoint under {RunDir(logdir).checkpoints_path} "
                                "(give the --logdir of a run that saved one)")
    created = not os.path.isdir(logdir)
    lock = run_folder.claim(logdir, cfg.resume, cfg.overwrite)  # until the run has ended
    try:
        return _train(cfg, spawner, logdir)
    finally:
        lock.release()
        if created:
            run_folder.remove_if_unused(logdir)


def _train(cfg: Any, spawner: Spawner | None, logdir: str) -> dict:
    """:func:`train` in the claimed run folder ``logdir``."""
    spawner = spawner or local_spawner  # hand it to every ChildProcess this run creates
    clock = Clock()
    flow = cfg.get_dataflow()
    enable_compilation_cache(cfg.compilation_cache_dir)
    if not security.is_loopback(cfg.host) and not cfg.curve:
        log.warning("servers bind %s without --curve: streams are unauthenticated plaintext "
                    "(anyone who can reach this host can send samples)", cfg.host)
    # A multi-process learner joins its processes before any other JAX call.
    learners = LearnerGroup.start(cfg, spawner) if cfg.num_learner_processes > 1 else None
    mesh = devices.local_mesh()
    n_dev = mesh.size
    if cfg.batch_segments % n_dev:
        raise ValueError(f"batch_segments={cfg.batch_segments} is not divisible by the "
                         f"{n_dev} local devices")
    factory = factory_of_run(cfg)
    obs_space, action_space = factory.env.observation_space, factory.env.action_space
    space_leaves(obs_space)  # ValueError naming an unsupported space, before anything starts
    action_leaf(action_space)
    run_dir = RunDir(logdir)
    run_dir.write_config(config_lib.to_dict(cfg) | {"logdir": logdir})
    teams = factory.env.teams  # team of each agent of one environment

    def rows_per_env(team) -> int:
        return len(teams) if team is None else sum(t == team for t in teams)

    def envs_of(group) -> int:
        return group.envs_per_actor or cfg.envs_per_actor

    # Learning-rate schedules are planned per policy: each trainer's learn follows its
    # own number of updates (a policy fed more rows per env frame updates more often).
    updates = planned_updates(cfg, flow, teams)
    fns_of = {t.name: factory.make(updates[t.name]) for t in flow.trainers}
    fns = fns_of[flow.trainers[0].name]  # act and initial_carry do not depend on the plan
    act = (distributed.jit_act_local if learners else devices.jit_act)(fns.act, mesh)

    # One ZeroMQ context per run: its sockets (and the CURVE authenticator) end with it.
    context = zmq.Context()
    table = ActorTable()
    # A multi-process learner's parameters span every process: servers read this one's part.
    store = distributed.LocalViewStore(mesh) if learners else ParameterStore()
    metrics = MetricsAccumulator()
    population = Population.of_run(cfg, logdir, metrics)  # None without --population
    trainers: dict[str, TrainerWorker] = {}
    servers: dict[str, PolicyWorker] = {}
    checkpointers: list[Checkpointer] = []
    workers: list = []
    threads: list[threading.Thread] = []
    actors: list[ActorProcess] = []
    writer: MetricsWriter | None = None
    auth = None
    old_handlers = _install_stop_handlers()
    record: dict = {}
    evaluator: PeriodicEvaluator | None = None
    try:
        num_actor_procs = sum(a.count for a in flow.actors)
        num_remote = sum(p.count for p in flow.policy_workers) if cfg.remote_inference else 0
        keys = security.CurveKeys.generate(range(num_actor_procs + num_remote)) if cfg.curve else None
        auth = security.start_authenticator(context, keys.allowed()) if keys else None
        server_keys = (keys.server_public, keys.server_secret) if keys else None

        for i, t in enumerate(flow.trainers):
            ckpt = (distributed.PrimaryCheckpointer if learners else Checkpointer)(
                run_dir.checkpoint_dir(t.policy), cfg.keep_checkpoints)
            checkpointers.append(ckpt)
            rng = jax.random.PRNGKey(cfg.seed + 1000 * i)
            rng, init_key = jax.random.split(rng)
            state = devices.put_replicated(fns_of[t.name].init(init_key), mesh)
            version = 0
            if cfg.resume:
                tree, meta = ckpt.restore({"agent": state, "rng": rng}, set_aside_unreadable=True)
                state, rng, version = tree["agent"], tree["rng"], int(meta["policy_version"])
                metrics.env_steps = max(metrics.env_steps, int(meta.get("env_steps", 0)))
                log.info("resumed %s from version %d, %d env steps", t.policy, version,
                         metrics.env_steps)
            segment_rows = max([envs_of(a) // cfg.ring_size * rows_per_env(team) for a in flow.actors
                                for team, _, sample in a.bindings() if sample == t.sample_stream]
                               or [1])
            if learners is not None:  # every learner process starts from this state
                state, rng = learners.share_state(t.name, t.policy, state, rng, version,
                                                  num_updates=updates[t.name],
                                                  max_rows=segment_rows)
            learn = (learners.jit_learn(fns_of[t.name].learn) if learners
                     else devices.jit_learn(fns_of[t.name].learn, mesh))
            trainers[t.sample_stream] = TrainerWorker(
                t.name, t.policy, learn,
                learners.put_batch if learners else (lambda b: devices.put_batch(b, mesh)),
                state, rng, version, obs_space, action_space, cfg.segment_length,
                cfg.batch_segments // cfg.num_learner_processes, store,
                population.metrics_for(t.policy) if population else
                PolicyMetrics(metrics, t.policy) if len(flow.trainers) > 1 else metrics,  # loss/*/<policy>
                ckpt, cfg.max_staleness, cfg.host, fns.initial_carry, actors=table,
                max_rows=segment_rows, on_nonfinite=cfg.on_nonfinite, context=context,
                curve=server_keys, before_update=learners.gate(t.policy, metrics) if learners else None,
                idle_rows=env_has_idle_rows(cfg.env))

        stream_rows: dict[str, int] = {}  # every server of a stream can take all its actors
        for i, p in enumerate(flow.policy_workers):
            rows = sum(a.count * envs_of(a) * rows_per_env(team) for a in flow.actors
                       for team, inference, _ in a.bindings() if inference == p.inference_stream)
            stream_rows[p.inference_stream] = max(rows, 1)
            for j, name in enumerate(server_names(p.name, p.count) if not cfg.remote_inference else []):
                servers[name] = PolicyWorker(
                    name, p.policy, act, fns.initial_carry, obs_space, store, metrics,
                    max_rows=max(rows, 1), num_devices=n_dev, host=cfg.host,
                    deadline_ms=cfg.inference_deadline_ms, seed=cfg.seed + 7919 * (i + 1) + 104729 * j,
                    actors=table, context=context, curve=server_keys)
        remote = RemoteInferenceServers(
            cfg, flow, stream_rows, store, metrics, table,
            lambda: {a.spec["actor_id"]: a.spec["run_id"] for a in actors if "run_id" in a.spec},
            context, logdir, keys, num_actor_procs, spawner) if cfg.remote_inference else None

        workers = list(trainers.values()) + list(servers.values()) + ([remote] if remote else [])
        workers += [learners.watch] if learners else []  # names a dead learner process
        if population is not None:  # PBT over the members' trainers (before they start)
            workers.append(population.manager({t.policy: t for t in trainers.values()}))
        threads = [threading.Thread(target=w.run, name=w.name, daemon=True) for w in workers]
        writer = MetricsWriter(logdir)
        for th in threads:
            th.start()
        for w in workers:
            w.ready.wait()
            if w.error is not None:
                raise ComponentDied(f"{w.name} failed to start: {w.error!r}") from w.error
        log.info("servers listening after %.1f s; starting actors while act (batch sizes %s) "
                 "and learn compile on %d device(s) (the first run of a config compiles for "
                 "longer; later runs hit the XLA cache)", clock(),
                 [s.buckets for s in servers.values()], n_dev)
        seed_base = cfg.seed + metrics.env_steps
        assigner = Assigner({p.inference_stream: remote.addresses(p.inference_stream) if remote else
                             [servers[n].address for n in server_names(p.name, p.count)]
                             for p in flow.policy_workers}, fallbacks=remote is not None)
        for a in flow.actors:
            envs = envs_of(a)
            for k in range(a.count):
                idx = len(actors)
                streams = [{"policy": trainers[sample].policy, "team": team,
                            **assigner.next(inference),  # its server (and fallbacks)
                            "sample_address": learners.sample_address(idx, trainers[sample].address)
                            if learners else trainers[sample].address}
                           for team, inference, sample in a.bindings()]
                error_file = run_dir.error_file(f"actor{idx}")
                if os.path.exists(error_file):
                    os.remove(error_file)
                spec_ = {"actor_id": idx, "env": cfg.env, "env_kwargs": cfg.env_kwargs or {},
                         "envs_per_group": envs // cfg.ring_size, "ring_size": cfg.ring_size,
                         "segment_length": cfg.segment_length, "seed": seed_base,
                         "streams": streams, "carry_spec": CarryCodec(fns.initial_carry).spec(),
                         "timeout_s": cfg.actor_timeout_s, "failover_s": cfg.inference_failover_s,
                         "parent_pid": os.getpid(),
                         "error_file": error_file,
                         "curve_server_key": keys.server_public.decode() if keys else None}
                actors.append(ActorProcess(f"{a.name}[{k}]", spec_, table=table,
                                           env=keys.client_env(idx) if keys else None,
                                           prefix=tuple(a.launch_prefix), spawner=spawner))
                actors[-1].start()
        evaluator = PeriodicEvaluator(logdir, cfg.eval_every, cfg.eval_episodes)
        record.update(_control_loop(cfg, clock, metrics, writer, workers, threads, trainers,
                                    actors, table, seed_base, evaluator))
    finally:
        # A second signal (e.g. from a process manager) must not cut the cleanup short.
        for sig in old_handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if evaluator is not None:
                evaluator.stop()
            stop_all(actors)
            for w in workers:
                w.stop.set()
            for th in threads:
                if th.ident is not None:  # started
                    th.join(timeout=30)
            for t, th in zip(trainers.values(), threads):  # trainers come first in `threads`
                # A dead learner process (PeerError) left the last update's state intact.
                if (t.error is None or isinstance(t.error, distributed.PeerError)) \
                        and th.ident is not None and not th.is_alive():
                    t.extra_meta = {"wall_time_s": clock()}
                    t.save_checkpoint()
            for ckpt in checkpointers:
                ckpt.close()
            if writer is not None:
                # Learners finish their last update after the control loop ends: one
                # closing line with the counters the final checkpoint holds.
                closing = {k: v for k, v in metrics.snapshot(1.0).items()
                           if k == "env_steps" or k.startswith("policy_version")
                           or isinstance(v, int)}
                closing.update(wall_time_s=clock(), final=True)
                writer.write(closing)
                record.update({k: v for k, v in closing.items() if k != "final"})
                record.update(writer.last_returns)  # the last known return(s), not "none"
                writer.close()
            if auth is not None:
                auth.stop()
            if not any(th.is_alive() for th in threads):
                context.destroy(linger=0)
            saved = {t.policy: t.checkpointer.latest_step() for t in trainers.values()
                     if t.checkpointer is not None}
            log.info("stopped after %.1f s; %s; logs in %s", clock(),
                     ", ".join(f"checkpoint of {p} at version {v}" if v is not None else
                               f"no checkpoint of {p} (stopped before its first save)"
                               for p, v in saved.items()) or "no checkpoint", logdir)
        finally:
            if learners is not None:
                learners.close()
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
    return record | {"logdir": logdir}


def planned_updates(cfg: Any, flow: Any, teams: list) -> dict:
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

    Args:
      cfg: the run config.
      flow: its :class:`~jaxsrl.experiment.dataflow.Dataflow`.
      teams: team of each agent of one environment (``jaxsrl.envs.EnvInfo.teams``).

    Returns:
      ``{trainer name: planned updates}`` (at least 1 each).
    """
    out = {}
    for t in flow.trainers:
        frames = rows = 0.0
        for a in flow.actors:
            envs = a.count * (a.envs_per_actor or cfg.envs_per_actor)
            frames += envs
            rows += envs * sum(len(teams) if team is None else sum(x == team for x in teams)
                               for team, _, sample in a.bindings() if sample == t.sample_stream)
        out[t.name] = cfg.num_updates(rows / frames) if rows else 1
    return out


def _control_loop(cfg, clock, metrics, writer, workers, threads, trainers, actors, table,
                  seed_base, evaluator) -> dict:
    last_log = last_ckpt = clock()
    record: dict = {}
    restarts = 0
    responsive_since: float | None = None  # since when every worker kept turning its loop
    hang_s = cfg.actor_heartbeat_timeout_s
    # Per actor (index): restarts in a row whose run never reached the servers, and when
    # a delayed restart is due (backoff, so an unreachable host does not burn every
    # allowed restart within seconds).
    futile: dict[int, int] = {}
    restart_at: dict[int, float] = {}
    while True:
        time.sleep(0.02)
        if _interrupted.is_set():  # the signal's own KeyboardInterrupt may have been dropped
            raise KeyboardInterrupt("stop signal")
        for w, th in zip(workers, threads):
            if w.error is not None:
                raise ComponentDied(f"{w.name} died: {w.error!r}") from w.error
            if not th.is_alive():
                raise ComponentDied(f"{w.name} stopped unexpectedly")
        mono = time.monotonic()
        # An actor is hung only if silent for hang_s while every server kept turning its
        # loop (warmed up, not stuck in a long update or checkpoint) all that time.
        if all(w.serving.is_set() and mono - w.heartbeat < max(hang_s / 2, 1.0) for w in workers):
            responsive_since = responsive_since or mono
        else:
            responsive_since = None
        for i, a in enumerate(actors):
            if i in restart_at:  # a delayed restart
                if mono >= restart_at[i]:
                    del restart_at[i]
                    a.start()
                continue
            code = a.proc.poll()
            hung = False
            reason = ""
            if code is None:
                if not (hang_s > 0 and responsive_since is not None):
                    continue
                last = max(table.last_seen(a.spec["actor_id"]) or 0.0, a.started_at, responsive_since)
                if mono - last <= hang_s:
                    continue
                never = not _heard_since_start(a, table)
                log.warning("%s (pid %d) sent nothing for %.1f s while the servers were "
                            "responsive: hung%s; killing it", a.name, a.proc.pid, mono - last,
                            " (nothing reached the servers since it started: is its host "
                            "unreachable?)" if never else "")
                metrics.count("actor_hangs")
                a.kill()
                code, hung = a.proc.returncode, True
            if code == EXIT_SERVER_TIMEOUT:
                addresses = sorted({s["inference_address"] for s in a.spec["streams"]})
                # Its servers (own and fallbacks) kept turning their loops during the
                # second half of the actor's wait, so they were alive: the answers did not
                # reach the actor (its host or network failed). Otherwise a server died or
                # stalled. Remote servers report their loop's heartbeat in their status.
                tried = {x for s in a.spec["streams"]
                         for x in s.get("inference_addresses") or [s["inference_address"]]}
                waited = [(w.serving.is_set(), w.heartbeat) for w in workers
                          if w.address in tried]
                waited += [pair for w in workers if isinstance(w, RemoteInferenceServers)
                           for pair in w.liveness(tried)]
                if not (waited and all(serving and mono - beat < cfg.actor_timeout_s / 2
                                       for serving, beat in waited)):
                    raise ComponentDied(f"{a.name} timed out waiting for its inference server "
                                        f"({', '.join(addresses)}): did the server die or stall?")
                metrics.count("actor_unreachable")
                reason = (f"got no answer from {', '.join(addresses)} in {cfg.actor_timeout_s:g} s "
                          "while that server kept serving: its host or network is unreachable")
            if code == EXIT_LEARNER_TIMEOUT:
                addresses = sorted({s["sample_address"] for s in a.spec["streams"]})
                raise ComponentDied(f"{a.name} timed out waiting for its learner "
                                    f"({', '.join(addresses)}) to take samples")
            reason = reason or ("hung" if hung else _exit_reason(code))
            error = read_error(a.spec.get("error_file")) if code == EXIT_ENV_ERROR else ""
            if restarts >= cfg.max_actor_restarts:
                what = ("its environment keeps failing" if code == EXIT_ENV_ERROR
                        else f"it stopped ({reason})")
                raise ComponentDied(
                    f"{a.name}: {what}; actors were restarted {restarts} times in this run "
                    f"(max_actor_restarts={cfg.max_actor_restarts}), giving up"
                    + (f". Last error: {error}" if error else ""))
            restarts += 1
            a.restarts += 1
            metrics.count("actor_restarts")
            futile[i] = 0 if _heard_since_start(a, table) else futile.get(i, 0) + 1
            delay = restart_delay(futile[i])
            log.warning("%s %s%s; restarting it with a new run id%s (restart %d of at most %d)",
                        a.name, reason, f": {error}" if error else "",
                        f" in {delay:g} s" if delay else "", restarts, cfg.max_actor_restarts)
            # New environment seeds, so a restarted actor does not replay its episodes.
            a.spec = {**a.spec, "seed": seed_base + a.restarts * 10_000 * len(actors)}
            if delay:
                restart_at[i] = mono + delay
            else:
                a.start()
        now = clock()
        done = metrics.env_steps >= cfg.total_env_steps
        if done or now - last_log >= cfg.log_interval_s:
            record = metrics.snapshot(now - last_log) | {"wall_time_s": now}
            last_log = now
            writer.write(record)
            if writer.progress is None:  # the progress bar shows the same figures
                log.info(console_line(record))
            ret = record.get("episode_return_mean")
            if cfg.target_return is not None and ret is not None and ret >= cfg.target_return:
                log.info("target return %.1f reached", cfg.target_return)
                return record
        if done:
            return record
        if now - last_ckpt >= cfg.checkpoint_interval_s:
            last_ckpt = now
            for t in trainers.values():
                t.checkpoint_requested.set()
        if evaluator.every:
            version = min(t.version for t in trainers.values())
            if evaluator.due(version):
                for t in trainers.values():
                    t.checkpoint_requested.set()
                evaluator.requested(version)
            saved = None
            if evaluator.pending_version is not None:
                saved = min(t.checkpointer.latest_step() or -1 for t in trainers.values())
            result = evaluator.poll(saved)
            if result:
                metrics.add_means(result)


#: Backoff between restarts of an actor whose runs never reach the servers (seconds).
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0


def restart_delay(futile: int) -> float:
    """Seconds to wait before restarting an actor whose last ``futile`` runs in a row
    never reached the servers (e.g. its host is cut off): 0 for up to one such run,
    then ``RESTART_BACKOFF_S`` doubling per run, at most ``RESTART_BACKOFF_MAX_S``.

    Raises:
      ValueError: ``futile`` < 0.
    """
    if futile < 0:
        raise ValueError(f"futile={futile} runs must be >= 0")
    if futile <= 1:
        return 0.0
    return min(RESTART_BACKOFF_S * 2.0 ** min(futile - 2, 32), RESTART_BACKOFF_MAX_S)


def _heard_since_start(actor, table) -> bool:
    """Some message of the actor's current run reached a server (the table records the
    registration time at ``start``, just before ``started_at``)."""
    return (table.last_seen(actor.spec["actor_id"]) or 0.0) > actor.started_at

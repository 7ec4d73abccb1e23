"""Launcher: builds the dataflow of a run, starts every worker, watches and stops them.

The accelerator process (this one) hosts the policy workers and trainers as threads
sharing parameters on device; actors are separate OS processes started here. Wiring
of workers and streams happens in :func:`train` alone, driven by the config's
:class:`~jaxsrl.dataflow.Dataflow`.

Guarantees: Ctrl-C, SIGTERM or a crashed component stop the run and leave no child
process (actors also die with this process, via ``PR_SET_PDEATHSIG``); a crashed
actor is restarted with a new run id (up to ``max_actor_restarts``); a dead
inference server or trainer stops the run with an error naming it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import jax

from jaxsrl import config as config_lib
from jaxsrl import devices
from jaxsrl.agent import EnvSpec
from jaxsrl.checkpoint import Checkpointer
from jaxsrl.envs import env_spaces, env_teams
from jaxsrl.metrics import Clock, MetricsAccumulator, MetricsWriter, console_line
from jaxsrl.params import ParameterStore
from jaxsrl.workers.actor import EXIT_SERVER_TIMEOUT
from jaxsrl.workers.policy import PolicyWorker
from jaxsrl.workers.carry import CarryCodec
from jaxsrl.workers.trainer import TrainerWorker

log = logging.getLogger("jaxsrl")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ComponentDied(RuntimeError):
    """A worker of the run died; the message names it."""


@dataclasses.dataclass
class ActorProcess:
    """One running actor process and how to start it again."""

    name: str
    spec: dict
    proc: subprocess.Popen | None = None
    restarts: int = 0

    def start(self) -> None:
        self.spec = {**self.spec, "run_id": random.getrandbits(31)}
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jaxsrl.workers.actor", json.dumps(self.spec)], env=env)

    def stop(self, grace_s: float = 3.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def default_logdir(cfg) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.env.replace('/', '_')}-{cfg.agent}-{stamp}")


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def train(cfg: Any) -> dict:
    """Run one experiment described by ``cfg`` to completion.

    Returns:
      The last metrics record (``env_steps``, ``episode_return_mean``, ...), plus
      ``logdir``.

    Raises:
      ComponentDied: an inference server, trainer or (repeatedly) an actor died.
      FileNotFoundError: ``--resume`` without a checkpoint in ``--logdir``.
      KeyboardInterrupt: Ctrl-C or SIGTERM (after a clean shutdown and checkpoint).
    """
    cfg.validate()
    clock = Clock()
    logdir = cfg.logdir or default_logdir(cfg)
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, "config.json"), "w") as f:
        json.dump(config_lib.to_dict(cfg) | {"logdir": logdir}, f, indent=2)
    flow = cfg.get_dataflow()
    if cfg.compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(cfg.compilation_cache_dir))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    mesh = devices.local_mesh()
    n_dev = mesh.size
    if cfg.batch_segments % n_dev:
        raise ValueError(f"batch_segments={cfg.batch_segments} is not divisible by the "
                         f"{n_dev} local devices")

    from agents import get_agent  # noqa: PLC0415
    agent = get_agent(cfg.agent)
    obs_space, action_space = env_spaces(cfg.env, cfg.env_kwargs)
    spec = EnvSpec(obs_space, action_space)
    teams = env_teams(cfg.env, cfg.env_kwargs)  # team of each agent of one environment

    def rows_per_env(team) -> int:
        return len(teams) if team is None else sum(t == team for t in teams)

    # Learning-rate schedules are planned per policy; with a policy per team the
    # fewest rows per environment (most updates) is used for all of them.
    fewest_rows = min(rows_per_env(team) for a in flow.actors for team, _, _ in a.bindings())
    fns = agent.make(cfg.agent_config(), spec, cfg.num_updates(fewest_rows))
    learn = devices.jit_learn(fns.learn, mesh)
    act = devices.jit_act(fns.act, mesh)

    store, metrics = ParameterStore(), MetricsAccumulator()
    trainers: dict[str, TrainerWorker] = {}
    for i, t in enumerate(flow.trainers):
        ckpt = Checkpointer(os.path.join(logdir, "checkpoints", t.policy), cfg.keep_checkpoints)
        rng = jax.random.PRNGKey(cfg.seed + 1000 * i)
        rng, init_key = jax.random.split(rng)
        state = devices.put_replicated(fns.init(init_key), mesh)
        version = 0
        if cfg.resume:
            tree, meta = ckpt.restore({"agent": state, "rng": rng})
            state, rng, version = tree["agent"], tree["rng"], int(meta["policy_version"])
            metrics.env_steps = max(metrics.env_steps, int(meta.get("env_steps", 0)))
            log.info("resumed %s from version %d, %d env steps", t.policy, version, metrics.env_steps)
        trainers[t.sample_stream] = TrainerWorker(
            t.name, t.policy, learn, lambda b: devices.put_batch(b, mesh), state, rng, version,
            obs_space, action_space, cfg.segment_length, cfg.batch_segments, store, metrics,
            ckpt, cfg.max_staleness, cfg.host, fns.initial_carry)

    def envs_of(group) -> int:
        return group.envs_per_actor or cfg.envs_per_actor

    servers: dict[str, PolicyWorker] = {}
    for i, p in enumerate(flow.policy_workers):
        rows = sum(a.count * envs_of(a) * rows_per_env(team) for a in flow.actors
                   for team, inference, _ in a.bindings() if inference == p.inference_stream)
        servers[p.inference_stream] = PolicyWorker(
            p.name, p.policy, act, fns.initial_carry, obs_space, store, metrics,
            max_rows=max(rows, 1), num_devices=n_dev, host=cfg.host,
            deadline_ms=cfg.inference_deadline_ms, seed=cfg.seed + 7919 * (i + 1))

    workers = list(trainers.values()) + list(servers.values())
    threads = [threading.Thread(target=w.run, name=w.name, daemon=True) for w in workers]
    actors: list[ActorProcess] = []
    writer = MetricsWriter(logdir)
    old_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    record: dict = {}
    try:
        for th in threads:
            th.start()
        for w in workers:
            w.ready.wait()
            if w.error is not None:
                raise ComponentDied(f"{w.name} failed to start: {w.error!r}") from w.error
        log.info("workers ready after %.1f s (compiled %s on %d device(s))", clock(),
                 [s.buckets for s in servers.values()], n_dev)
        seed_base = cfg.seed + metrics.env_steps
        for a in flow.actors:
            envs = envs_of(a)
            if envs % cfg.ring_size:
                raise ValueError(f"actor group {a.name!r}: envs_per_actor={envs} is not "
                                 f"divisible by ring_size={cfg.ring_size}")
            for k in range(a.count):
                idx = len(actors)
                streams = [{"policy": trainers[sample].policy, "team": team,
                            "inference_address": servers[inference].address,
                            "sample_address": trainers[sample].address}
                           for team, inference, sample in a.bindings()]
                spec_ = {"actor_id": idx, "env": cfg.env, "env_kwargs": cfg.env_kwargs or {},
                         "envs_per_group": envs // cfg.ring_size, "ring_size": cfg.ring_size,
                         "segment_length": cfg.segment_length, "seed": seed_base,
                         "streams": streams, "carry_spec": CarryCodec(fns.initial_carry).spec(),
                         "timeout_s": cfg.actor_timeout_s, "parent_pid": os.getpid()}
                actors.append(ActorProcess(f"{a.name}[{k}]", spec_))
                actors[-1].start()
        record = _control_loop(cfg, clock, metrics, writer, workers, trainers, actors)
        return record | {"logdir": logdir}
    finally:
        signal.signal(signal.SIGTERM, old_handler)
        for a in actors:
            a.stop()
        for w in workers:
            w.stop.set()
        for th in threads:
            th.join(timeout=30)
        for t in trainers.values():
            if t.error is None:
                t.extra_meta = {"wall_time_s": clock()}
                t.save_checkpoint()
            t.checkpointer.close()
        writer.close()
        log.info("stopped after %.1f s; logs in %s", clock(), logdir)


def _control_loop(cfg, clock, metrics, writer, workers, trainers, actors) -> dict:
    last_log = last_ckpt = clock()
    record: dict = {}
    while True:
        time.sleep(0.02)
        for w in workers:
            if w.error is not None:
                raise ComponentDied(f"{w.name} died: {w.error!r}") from w.error
        for a in actors:
            code = a.proc.poll()
            if code is None:
                continue
            if code == EXIT_SERVER_TIMEOUT:
                raise ComponentDied(f"{a.name} timed out waiting for its inference server")
            if a.restarts >= cfg.max_actor_restarts:
                raise ComponentDied(f"{a.name} exited with code {code} and was restarted "
                                    f"{a.restarts} times; giving up (max_actor_restarts)")
            a.restarts += 1
            metrics.count("actor_restarts")
            log.warning("%s exited with code %s; restarting it (restart %d)", a.name, code, a.restarts)
            a.start()
        now = clock()
        done = metrics.env_steps >= cfg.total_env_steps
        if done or now - last_log >= cfg.log_interval_s:
            record = metrics.snapshot(now - last_log) | {"wall_time_s": now}
            last_log = now
            writer.write(record)
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

"""The run loop of device actors (Podracer's Anakin; ``docs/device_actors.md``): a run
whose environment is JAX-native (``--env=gymnax:CartPole-v1``) steps its environments
on the accelerator, next to the policy, instead of in actor processes.

One compiled step (:func:`jaxsrl.workers.device.fused.make_fused_step`) rolls
``batch_segments`` environments out for ``segment_length`` steps with the agent's own
``act`` and runs its ``learn`` on that trajectory, sharded over the local devices like
the learner. Everything around it is the launcher's: the run folder and its lock,
``config.json``, ``metrics.jsonl`` (the same keys: ``env_steps``, ``fps``,
``episode_return_mean``, ``policy_version``, the learner's losses, ``staleness_mean``
0), TensorBoard and the progress bar (:class:`~jaxsrl.experiment.metrics.MetricsWriter`),
checkpoints in ``checkpoints/<policy>/<version>`` holding ``{"agent", "rng"}`` as a
trainer's do, ``--resume``, ``--target_return`` and Ctrl-C/SIGTERM (a checkpoint, then
the closing metrics line).

Off-policy agents (``AgentFns.replay`` set) run the step of
:mod:`jaxsrl.workers.device.offpolicy` instead (rollout, insert into a replay on the
device, the learn calls the replay ratio asks for; host side in
:mod:`jaxsrl.launch.device_offpolicy`); their policy version counts learn calls.

Recurrent agents (``initial_carry`` not ``None``) run too: their carry travels with
the environments' from step to step and segment to segment
(:class:`~jaxsrl.workers.device.rollout.RecurrentCarry`), reset where an episode ended,
and each trajectory holds its segments' first carry, as the CPU actors send it.

Periodic evaluation (``--eval_every``) runs in the loop, on the device
(:class:`~jaxsrl.launch.device_eval.DeviceEvaluator`).

Not here yet (refused with a one-line error): ``--save_replay`` (the on-device replay
is not checkpointed), populations of an off-policy agent, self-play, ``[dataflow]``
tables, several learner processes, Ray and remote inference. ``--num_actors``,
``--envs_per_actor`` and ``--ring_size`` do not apply: the device actors step
``batch_segments`` environments, one segment per row of each update.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp

from jaxsrl.envs.jax_native import registry
from jaxsrl.experiment import resume as resumption
from jaxsrl.experiment import events
from jaxsrl.experiment import run_dir as run_folder
from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.metrics import Clock, MetricsAccumulator, MetricsWriter, console_line
from jaxsrl.experiment import modes
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.device_eval import DeviceEvaluator
from jaxsrl.launch.device_offpolicy import OffPolicySteps
from jaxsrl.parallel import devices
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.workers.device.offpolicy import check_replay
from jaxsrl.workers.device.fused import jit_fused_step, make_fused_step, put_env_carry
from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout
from jaxsrl.workers.learner import replay_setup

log = logging.getLogger("jaxsrl")


def check_config(cfg: Any) -> None:
    """Raise ``ValueError`` naming the first setting device actors cannot run (rows
    ``device actors`` of :data:`jaxsrl.experiment.modes.REFUSED`; ``cfg.validate`` ran
    them already)."""
    modes.check(cfg, cfg.get_dataflow())


def train(cfg: Any, logdir: str) -> dict:
    """Run ``cfg`` (a JAX-native ``--env``) on device actors in the claimed run folder
    ``logdir``; the launcher's :func:`~jaxsrl.launch.launcher.train` calls this.

    Returns:
      The closing metrics record (``env_steps``, ``policy_version``, the last
      ``episode_return_mean``, ...) plus ``logdir``.

    Raises:
      ValueError: a setting device actors do not support (:func:`check_config`),
        ``batch_segments`` not divisible by the local devices, an unknown
        environment, or for an off-policy agent ``batch_segments * segment_length``
        above its replay capacity or a replay batch not divisible by the local devices
        (all before the run folder is changed).
      KeyboardInterrupt: Ctrl-C or SIGTERM, after the checkpoint and closing line.
    """
    clock = Clock()
    check_config(cfg)
    enable_compilation_cache(cfg.compilation_cache_dir)
    policy = cfg.get_dataflow().trainers[0].policy
    factory = factory_of_run(cfg)
    replay = factory.make(1).replay  # make: closures only
    # env_steps count rows (agent steps), one item per row-step: the CPU path's plan
    updates = cfg.num_updates() if replay is None else \
        replay_setup.planned_updates(cfg.total_env_steps, replay)
    fns = factory.make(updates)
    mesh = devices.local_mesh()
    num_envs, T = cfg.batch_segments, cfg.segment_length
    if num_envs % mesh.size:
        raise ValueError(f"batch_segments={num_envs} is not divisible by the {mesh.size} "
                         "local devices")
    if replay is not None:
        check_replay(replay, num_envs * T, mesh.size)
        if cfg.population:
            raise ValueError(f"--population={cfg.population} with --agent={cfg.agent} (off-policy) "
                             "on device actors: a device population runs on-policy agents only "
                             "yet (docs/device_actors.md)")
    env = registry.make(cfg.env, cfg.env_kwargs, cfg.clip_actions)
    evaluator = (DeviceEvaluator(logdir, cfg.eval_every, cfg.eval_episodes, env, fns)
                 if cfg.eval_every > 0 else None)
    if cfg.resume:  # refused before anything is written, as the launcher does
        _check_resume(cfg, fns, logdir)
    # Every check has passed: only now is the run folder changed.
    run_folder.prepare(logdir, cfg.overwrite)
    config = resumption.config_record(cfg, cfg.inference, logdir)
    if not cfg.resume:  # on resume config.json is replaced once the restore succeeded
        RunDir(logdir).write_config(config)
    where = ", ".join(sorted({str(d) for d in mesh.devices.flat}))
    events.emit(log, logging.INFO, "run_start",
                {"agent": cfg.agent, "env": cfg.env, "resume": bool(cfg.resume),
                 "launcher": cfg.launcher, "actors": "device", "pid": os.getpid()},
                "run of %s on %s starts in %s%s; actors on the device (%s): %s is a JAX-native "
                "environment, so %s step next to the %s inside one compiled "
                "rollout-and-learn step of %d steps per update (--num_actors, --envs_per_actor "
                "and --inference do not apply)", cfg.agent, cfg.env, logdir,
                " (resumed)" if cfg.resume else "", where, cfg.env,
                envs_text(num_envs, cfg.population), "members' policies" if cfg.population
                else "policy", T)
    old_handlers = _install_stop_flag()
    try:
        if cfg.population:  # the members stacked, one vmapped step: their own loop
            from jaxsrl.launch.device_population import PopulationLoop  # noqa: PLC0415
            loop = PopulationLoop(cfg, logdir, policy, fns, env, mesh, clock, evaluator)
        else:
            loop = _Loop(cfg, logdir, policy, fns, env, mesh, clock, updates, evaluator)
        if cfg.resume:
            resumption.commit_config(logdir, config)
        return loop.run() | {"logdir": logdir}
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


def envs_text(envs_per_member: int, population: int = 0) -> str:
    """The run's environments for its first log line: ``"its 64 envs"``, or for a
    ``--population`` (each member steps its own ``batch_segments`` envs)
    ``"its 4 members x 64 envs = 256 envs"``."""
    if population:
        return (f"its {population} members x {envs_per_member} envs = "
                f"{population * envs_per_member} envs")
    return f"its {envs_per_member} envs"


def _check_resume(cfg: Any, fns: Any, logdir: str) -> None:
    """:func:`jaxsrl.experiment.resume.check` for a device-actor run: every trainer of its
    graph (one, or one per population member) has ``fns``'s learner state.

    Raises:
      ResumeRefused: the checkpoints hold a state of another structure, naming the
        settings that changed it.
    """
    flow = cfg.get_dataflow()
    setup = SimpleNamespace(flow=flow, spec=factory_of_run(cfg).spec,
                            fns_of={t.name: fns for t in flow.trainers},
                            updates={t.name: cfg.num_updates() for t in flow.trainers})
    resumption.check(cfg, setup, logdir)


#: Set by SIGINT/SIGTERM; the loop raises ``KeyboardInterrupt`` between two steps.
_STOP = threading.Event()


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    _STOP.set()


def _install_stop_flag() -> dict:
    """SIGINT and SIGTERM set :data:`_STOP` (main thread only); returns the previous
    handlers. A flag, not the launcher's ``KeyboardInterrupt`` at any bytecode: an
    interrupt inside the step call would leave the learner state donated to a step
    whose result is lost, and the final checkpoint unwritable."""
    _STOP.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}


class _Loop:
    """State of one device-actor run: learner state, environments, counters, sinks."""

    def __init__(self, cfg, logdir, policy, fns, env, mesh, clock, planned_updates,
                 evaluator=None):
        self.cfg, self.logdir, self.policy, self.clock = cfg, logdir, policy, clock
        self.evaluator = evaluator
        self.num_envs, self.T = cfg.batch_segments, cfg.segment_length
        # As the first trainer of a CPU run seeds itself (jaxsrl.launch.wiring).
        rng, init_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
        # every leaf in a buffer of its own: the step donates the state, and an agent's
        # init may hand one array out twice (DQN's target network starts as its online one)
        state = devices.put_replicated(jax.tree.map(jnp.copy, fns.init(init_key)), mesh)
        self.ckpt = Checkpointer(RunDir(logdir).checkpoint_dir(policy), cfg.keep_checkpoints)
        self.version, env_steps = 0, 0
        if cfg.resume:
            tree, meta = self.ckpt.restore({"agent": state, "rng": rng}, set_aside_unreadable=True)
            state = resumption.apply_hyperparameters(tree["agent"], state, policy, cfg)
            rng = tree["rng"]
            self.version, env_steps = int(meta["policy_version"]), int(meta.get("env_steps", 0))
            events.emit(log, logging.INFO, "resumed", {"policy": policy, "version": self.version,
                        "env_steps": env_steps}, "resumed %s from version %d, %d env steps",
                        policy, self.version, env_steps)
        self.state, self.rng = state, rng
        # Fresh episodes on every (re)start, as restarted actor processes begin them.
        env_key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed + 1), self.version)
        # Recurrent agents: the agent's carry rides with the environments' (RecurrentCarry).
        self.env_carry = put_env_carry(
            initial_rollout_carry(env, env_key, self.num_envs, fns.initial_carry), mesh)
        rollout = make_rollout(env, fns.act, self.T, fns.initial_carry)
        t0 = clock()
        if fns.replay is None:  # on-policy: rollout then learn, one version per step
            step = jit_fused_step(make_fused_step(rollout, fns.learn), mesh).lower(
                self.state, self.env_carry, self.rng, jnp.int32(self.version)).compile()
            self.step = lambda *args: (*step(*args[:3], jnp.int32(args[3])), 1)
        else:  # off-policy: rollout, insert into the device replay, the learn calls due
            self.step = OffPolicySteps(fns, rollout, mesh, self.num_envs * self.T,
                                       planned_updates, (self.state, self.env_carry, rng))
            if cfg.resume:
                self.step.log_refill(policy, self.version)
        log.info("device actors: rollout-and-learn step compiled in %.1f s", clock() - t0)
        self.metrics = MetricsAccumulator(env_steps)
        self.metrics.set_version(policy, self.version)
        self.writer = MetricsWriter(logdir)
        self.last_log = self.last_ckpt = clock()
        self.record: dict = {}

    def run(self) -> dict:
        """Steps until ``total_env_steps`` or ``target_return``; always ends with a
        checkpoint and the closing metrics line."""
        # Outputs of the steps not counted yet (metrics, stats, version): the newest is
        # in flight while the one before it is counted, so at most one step is queued.
        queued: list = []
        try:
            while True:
                if _STOP.is_set():
                    raise KeyboardInterrupt("stop signal")
                self.state, self.env_carry, self.rng, metrics, stats, updates = self.step(
                    self.state, self.env_carry, self.rng, self.version)
                self.version += updates  # learn calls
                queued.append((metrics, stats, self.version, updates))
                while len(queued) > 1:
                    self._count(*queued.pop(0))  # blocks until that step has finished
                if self._log_due() and self._done():
                    break
                self._checkpoint_due()
                self._evaluate_due()
        finally:  # a second signal only sets the flag again: the cleanup runs to its end
            for item in queued:
                self._count(*item)
            closing = self._close()
        return closing

    def _count(self, metrics, stats, version, updates) -> None:
        """Add one finished step to the interval (blocks until it has finished). A step
        without learn calls (an off-policy replay below ``min_fill``) adds only its
        ``replay/`` metrics."""
        metrics, stats = jax.device_get((metrics, stats))
        self.metrics.add_env_steps(self.num_envs * self.T)
        self.metrics.add_episodes(int(stats.count), float(stats.return_sum),
                                  float(stats.length_sum))
        means = {k: float(v) for k, v in metrics.items() if updates or k.startswith("replay/")}
        # fused on-policy: 0; off-policy: the sampled items' age, as the CPU path reports it
        for key in ("staleness_mean", "staleness_max"):
            if updates:
                means[key] = means.get(f"replay/{key}", 0.0)
        self.metrics.add_means(means)
        self.metrics.set_version(self.policy, version)

    def _log_due(self) -> bool:
        """Write a metrics record when due (as the launcher's control loop does)."""
        now = self.clock()
        if self.metrics.env_steps < self.cfg.total_env_steps and \
                now - self.last_log < self.cfg.log_interval_s:
            return False
        self.record = self.metrics.snapshot(now - self.last_log) | {"wall_time_s": now}
        self.last_log = now
        self.writer.write(self.record)
        if self.writer.progress is None:  # the progress bar shows the same figures
            log.info(console_line(self.record))
        return True

    def _done(self) -> bool:
        if self.metrics.env_steps >= self.cfg.total_env_steps:
            return True
        ret, target = self.record.get("episode_return_mean"), self.cfg.target_return
        if target is not None and ret is not None and ret >= target:
            log.info("target return %.1f reached", target)
            return True
        return False

    def _checkpoint_due(self) -> None:
        if self.clock() - self.last_ckpt >= self.cfg.checkpoint_interval_s:
            self.last_ckpt = self.clock()
            self._save()

    def _evaluate_due(self) -> None:
        """``--eval_every``: checkpoint the newest version, then evaluate it."""
        if self.evaluator is not None and self.evaluator.due(self.version):
            self._save()
            saved = {self.policy: os.path.join(self.ckpt.directory, str(self.version))}
            self.metrics.add_means(self.evaluator.evaluate(self.state.params, self.version, saved))

    def _save(self) -> None:
        """Checkpoint the newest state."""
        self._save_to(self.ckpt, self.version, self.state, self.rng)

    def _save_to(self, ckpt: Checkpointer, version: int, state: Any, rng: Any) -> None:
        """Save ``{"agent": state, "rng": rng}`` as ``version`` in ``ckpt`` unless its
        newest checkpoint is that version (host copies: the device buffers are donated to
        the next step while Orbax writes)."""
        if ckpt.latest_step() == version:
            return
        tree = jax.device_get({"agent": state, "rng": rng})
        meta = {"policy_version": version, "env_steps": self.metrics.env_steps,
                "wall_time_s": self.clock()}
        ckpt.save(version, tree, meta)

    def _close(self) -> dict:
        """Final checkpoint and the closing metrics line (the launcher's ``_shutdown``)."""
        self._save()
        versions = self._close_checkpoints()
        closing = {k: v for k, v in self.metrics.snapshot(1.0).items()
                   if k == "env_steps" or k.startswith("policy_version") or isinstance(v, int)}
        closing.update(wall_time_s=self.clock(), final=True)
        self.writer.write(closing)
        record = {k: v for k, v in closing.items() if k != "final"}
        record.update(self.writer.last_returns)
        self.writer.close()
        events.emit(log, logging.INFO, "run_end",
                    {"env_steps": record.get("env_steps"), "checkpoints": versions},
                    "stopped after %.1f s; checkpoint of %s; logs in %s", self.clock(),
                    ", ".join(f"{p} at version {v}" for p, v in versions.items()), self.logdir)
        return record

    def _close_checkpoints(self) -> dict:
        """Close the checkpointer; ``{policy: version}`` of the final checkpoints."""
        self.ckpt.close()
        return {self.policy: self.version}

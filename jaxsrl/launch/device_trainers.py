"""The learners of a run on device actors (a JAX-native ``--env``; ``docs/device_actors.md``):
the one branch of :func:`jaxsrl.launch.builders.trainers` that differs by placement.

Everything around them is the launcher's, as for CPU actors: the run folder, the
resume checks, the control loop (metrics, checkpoints, periodic evaluation, the
population manager, signals), the shutdown. The learners step the environments
themselves (:class:`~jaxsrl.workers.device.trainer.DeviceTrainer`, or for a
``--population`` one :class:`~jaxsrl.workers.device.population_trainer.DevicePopulationTrainer`
whose members the launcher sees as trainers), so the inference backend of this
placement (:class:`~jaxsrl.launch.inference_backends.DeviceActors`) has no servers
and the actor builder makes no actor processes.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from jaxsrl.envs.jax_native import registry
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.trainer_state import initial_state
from jaxsrl.workers.device.offpolicy import check_replay
from jaxsrl.workers.device.population_trainer import DevicePopulationTrainer
from jaxsrl.workers.device.trainer import DeviceSettings, DeviceTrainer, compile_fused_step
from jaxsrl.workers.learner import replay_setup
from jaxsrl.workers.learner.trainer import TrainerStart


def planned_updates(cfg: Any, flow: Any, replay: Any) -> dict[str, int]:
    """``{trainer name: planned learn calls}`` on device actors: each of the ``M``
    trainers (population members, else one) learns once per step of ``batch_segments *
    segment_length`` of its own env steps, and a step of all members adds ``M`` times
    that to the run, so every trainer plans ``ceil(total_env_steps / (M * batch_segments
    * segment_length))`` calls (``cfg.num_updates(1 / M)``, the steps the run starts);
    an off-policy agent (``replay``) plans the replay ratio's calls over the run's items."""
    m = len(flow.trainers)
    n = cfg.num_updates(1 / m) if replay is None else \
        replay_setup.planned_updates(cfg.total_env_steps, replay)
    return {t.name: n for t in flow.trainers}


def check(cfg: Any, flow: Any, replay: Any, num_devices: int) -> None:
    """What device actors cannot run with this config, each a one-line ``ValueError``
    (raised by :func:`jaxsrl.launch.wiring.agent_setup`, before the run folder changes).

    Raises:
      ValueError: an off-policy agent whose ``batch_segments * segment_length`` exceeds
        its replay capacity or whose replay batch is not divisible by ``num_devices``; an
        off-policy agent in a ``--population``.
    """
    if replay is None:
        return
    check_replay(replay, cfg.batch_segments * cfg.segment_length, num_devices)
    if len(flow.trainers) > 1:
        raise ValueError(f"--population={cfg.population} with --agent={cfg.agent} (off-policy) "
                         "on device actors: a device population runs on-policy agents only "
                         "yet (docs/device_actors.md)")


def device_trainers(run: Any, setup: Any) -> dict:
    """The device learners of ``run`` (a :class:`~jaxsrl.launch.control.Run`), fresh or
    restored, added to ``run.trainers`` (``{sample stream: trainer or member handle}``,
    returned) and their checkpointers to ``run.checkpointers``."""
    cfg, flow, mesh = run.cfg, run.flow, run.placement.local_mesh
    env = registry.make(cfg.env, cfg.env_kwargs, cfg.clip_actions)
    fns = setup.fns_of[flow.trainers[0].name]
    settings = DeviceSettings(cfg.batch_segments, cfg.segment_length, cfg.total_env_steps,
                              setup.updates[flow.trainers[0].name], cfg.on_nonfinite,
                              env_seed=cfg.seed + 1)
    compiled = None
    if run.population is None and fns.replay is None:  # compile while the state is made
        compiled = concurrent.futures.ThreadPoolExecutor(1, "compile").submit(
            compile_fused_step, env, fns, settings, mesh)
    starts, ckpts = [], []
    for i, t in enumerate(flow.trainers):
        ckpt = run.placement.checkpointer(RunDir(run.logdir).checkpoint_dir(t.policy),
                                          cfg.keep_checkpoints)
        run.checkpointers.append(ckpt)
        ckpts.append(ckpt)
        starts.append(TrainerStart(*initial_state(run, t, i, fns, ckpt)))
    env_steps = run.metrics.env_steps  # the newest checkpoint's (0 on a fresh start)
    if run.population is None:
        t = flow.trainers[0]
        run.trainers[t.sample_stream] = DeviceTrainer(
            t.name, t.policy, fns, env, mesh, starts[0], settings, run.metrics,
            env_steps=env_steps, checkpointer=ckpts[0], compiled=compiled)
        return run.trainers
    members = DevicePopulationTrainer(
        "population learner", [t.policy for t in flow.trainers], fns, env, mesh, starts,
        settings, [run.population.metrics_for(t.policy) for t in flow.trainers], ckpts,
        env_steps=env_steps)
    for t, handle in zip(flow.trainers, members.handles):
        run.trainers[t.sample_stream] = handle
    return run.trainers


def envs_text(envs_per_member: int, members: int = 0) -> str:
    """The run's environments for its first log line: ``"64 envs"``, or for a
    ``--population`` (each member steps its own ``batch_segments`` envs) ``"4 members x
    64 envs = 256 envs"``."""
    if members:
        return f"{members} members x {envs_per_member} envs = {members * envs_per_member} envs"
    return f"{envs_per_member} envs"


"""What the launcher asks about an off-policy agent: the hooks of the replay path.

The launcher wires an off-policy agent (``AgentFns.replay`` set) like an on-policy one,
with these differences, each answered here so the launcher's wiring and builders hold
only one-line hooks:

- :func:`planned_updates`: ``learn`` calls over the run's env frames at the replay ratio
  (:func:`updates_of_plan`: that or the on-policy plan);
- :func:`complete_dataflow`: the graph gets a ``buffer`` worker on each sample stream of
  an off-policy trainer (``placement = "learner"`` unless the config says otherwise);
- :func:`trainer_kind`: the trainer class and its extra arguments
  (:class:`~jaxsrl.workers.learner.replay_trainer.ReplayTrainer`, or
  :class:`~jaxsrl.workers.learner.buffer_client.BufferClientTrainer` with buffer
  processes; :func:`check_buffer_processes` refuses what they do not support), and
  :func:`jit_learn`, which ``learn`` signature to jit over the devices.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from jaxsrl.core.agent import AgentFns, ReplaySpec
from jaxsrl.experiment.dataflow import Dataflow
from jaxsrl.parallel import devices
from jaxsrl.workers.learner.buffer_client import BufferClientTrainer
from jaxsrl.workers.learner.replay_trainer import ReplayTrainer
from jaxsrl.workers.learner.trainer import TrainerWorker


def planned_updates(items: float, spec: ReplaySpec) -> int:
    """Planned ``learn`` calls for ``items`` inserted items (one per row-step).

    The rate limiter allows ``replay_ratio / batch_size`` calls per item once
    ``min_fill`` items are in: ``ceil((items - min_fill) * replay_ratio / batch_size)``,
    at least 1.
    """
    return max(1, math.ceil((items - spec.min_fill) * spec.replay_ratio / spec.batch_size))


def updates_of_plan(cfg: Any, rows: float, frames: float, replay: ReplaySpec | None) -> int:
    """Planned ``learn`` calls of a trainer whose policy gets ``rows`` row-steps per
    ``frames`` env frames (> 0), over ``cfg.total_env_steps`` frames: at the replay ratio
    (:func:`planned_updates`) for an off-policy agent (``replay``), else one per
    ``batch_segments * segment_length`` row-steps (``cfg.num_updates``)."""
    if replay is None:
        return cfg.num_updates(rows / frames)
    return planned_updates(cfg.total_env_steps * rows / frames, replay)


def complete_dataflow(flow: Dataflow, fns_of: dict[str, AgentFns], processes: int = 1,
                      cfg: Any = None) -> Dataflow:
    """``flow`` with a learner-placed buffer on the sample stream of every off-policy
    trainer that has none.

    Args:
      fns_of: trainer name -> its agent functions.
      processes: learner processes (``--num_learner_processes``).
      cfg: the run config, to check what buffer processes do not support (``None``:
        not checked).

    Raises:
      ValueError: a buffer on the stream of an on-policy trainer (placements are checked
        by :meth:`Dataflow.validate`), an off-policy agent with ``processes`` > 1, or
        buffer processes with ``--save_replay``, ``--launcher=serial`` or ``--curve``.
    """
    if cfg is not None:
        check_buffer_processes(flow, cfg)
    replayed = [t.sample_stream for t in flow.trainers if fns_of[t.name].replay is not None]
    if replayed and processes > 1:
        raise ValueError(f"num_learner_processes={processes}: off-policy agents learn in one "
                         "process (their replay lives on its device); use 1")
    for t in flow.trainers:
        b = flow.buffer_for(t.sample_stream)
        if b is not None and fns_of[t.name].replay is None:
            raise ValueError(f"buffer {b.name!r} feeds trainer {t.name!r}, whose agent is "
                             "on-policy (it learns from segments): remove the buffer")
    return flow.with_buffers(replayed)


def check_buffer_processes(flow: Dataflow, cfg: Any) -> None:
    """Refuse what buffer processes (``placement = "process"``) do not support.

    Raises:
      ValueError: with ``--save_replay`` (their replay is not checkpointed: a resumed
        run refills), ``--launcher=serial`` (they are processes) or ``--curve`` (their
        sockets are not encrypted yet), naming the buffer.
    """
    for b in flow.buffers:
        if b.placement != "process":
            continue
        for refused, why in ((getattr(cfg, "save_replay", False), "--save_replay (a buffer "
                              "process's replay is not checkpointed; a resumed run refills it)"),
                             (cfg.launcher == "serial", "--launcher=serial (one process)"),
                             (cfg.curve, "--curve (buffer sockets are not encrypted)")):
            if refused:
                raise ValueError(f"buffer {b.name!r} has placement='process', which does not "
                                 f"support {why}: use placement='learner' or drop the option")


def trainer_kind(fns: AgentFns, cfg: Any, updates: int,
                 connect: Callable | None = None) -> tuple[type, dict]:
    """``(trainer class, extra keyword arguments)`` for a trainer of ``fns``.

    On-policy: ``TrainerWorker`` and ``{}``. Off-policy: ``ReplayTrainer`` with the
    agent, its planned updates, ``cfg.save_replay`` and (``cfg.resume``) the replay
    restore; with buffer processes (``connect``: how it reaches them, see
    ``jaxsrl/launch/buffer_processes.py``) ``BufferClientTrainer``.
    """
    if fns.replay is None:
        return TrainerWorker, {}
    if connect is not None:
        return BufferClientTrainer, {"fns": fns, "connect": connect,
                                     "restore_replay": bool(cfg.resume)}
    return ReplayTrainer, {"fns": fns, "planned_updates": updates,
                           "save_replay": bool(getattr(cfg, "save_replay", False)),
                           "restore_replay": bool(cfg.resume)}


def jit_learn(fns: AgentFns, placement: Any) -> Callable:
    """``fns.learn`` jitted for its signature: on-policy through the learner's placement
    (``placement.jit_learn``), off-policy (three outputs) over its local devices
    (:func:`jaxsrl.parallel.devices.jit_replay_learn`; off-policy runs have one process)."""
    if fns.replay is None:
        return placement.jit_learn(fns.learn)
    return devices.jit_replay_learn(fns.learn, placement.local_mesh)

"""The accelerator process lost under ``--launcher=ray``: one line, and one run event.

The accelerator process (an :class:`~jaxsrl.launch.ray_placement.AcceleratorHost` Ray
actor: the learner, and the inference servers unless ``--remote_inference``) records the
run's events itself; when it dies (killed, out of memory, its node lost) nobody is left
to say so in the run folder. The driver, which sees the actor die
(``ray.exceptions.RayActorError``), calls :func:`lost` for one line naming what was lost,
where and why, and appends it to ``LOGDIR/run_events.jsonl`` as an ``accelerator_lost``
event::

    {"event": "accelerator_lost", "level": "ERROR", "node_ip": "10.231.5.11",
     "node_id": "b6e9...", "pid": 4242, "reason": "The actor is dead because its worker
     process has died. Worker exit type: SYSTEM_ERROR ...", "message": "..."}

The run folder is on the accelerator's node: the driver writes the event itself when it
runs on that node, else a zero-CPU Ray task pinned to that node does. The actors die
with their hosts (their owner is the lost process), the run lock (an ``flock``) is
released with the process, and the last checkpoint is as the learner last saved it, so
``--resume`` with the same ``--logdir`` continues from it.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from jaxsrl.experiment import events
from jaxsrl.experiment.run_dir import RunDir

log = logging.getLogger("jaxsrl")

WHAT = "the accelerator process (learner and inference)"
REASON_CHARS = 300  # Ray's explanation, cut to one readable line
RECORD_TIMEOUT_S = 60.0  # the pinned task that writes the event on the accelerator's node
# Ray's own lines of an ActorDiedError that name the actor (said otherwise in our line).
_RAY_FIELDS = re.compile(r"^(class_name|actor_id|pid|name|namespace|ip):")
# Where Ray's list of possible causes starts (Ray < 2.50 / Ray 2.60 raylet wording).
_RAY_ADVICE = re.compile(r"\s*(There are some potential root causes|Some common causes include)")


def death_reason(exc: BaseException) -> str:
    """Ray's explanation of an actor's death (``str(exc)`` of a ``RayActorError``) as
    one line of at most ``REASON_CHARS`` characters: without the generic first
    sentence, the actor's id fields and Ray's list of possible causes; the exception's
    type name if nothing is left."""
    lines = [line.strip() for line in str(exc).splitlines()]
    kept = [line for line in lines if line and not _RAY_FIELDS.match(line)
            and not line.startswith("The actor died unexpectedly before finishing")]
    text = _RAY_ADVICE.split(" ".join(kept))[0].strip()
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS - 3].rstrip() + "..."
    return text or type(exc).__name__


def lost(logdir: str, where: dict | None, exc: BaseException) -> str:
    """Name the lost accelerator process: record an ``accelerator_lost`` event in
    ``logdir`` (see the module docstring) and return the line for the run's error.

    Args:
      logdir: the run folder (a path on the accelerator's node).
      where: ``{"node_id", "node_ip", "pid"}`` of the accelerator process
        (``AcceleratorHost.where``), or ``None`` if it died before saying.
      exc: the ``RayActorError`` the driver got.

    Returns:
      One line, e.g. ``"the accelerator process (learner and inference) pid 4242 on Ray
      node 10.231.5.11 was lost (The actor is dead because ...); its last checkpoint
      is in runs/x (continue with --resume --logdir=runs/x)"``. Never
      raises: a failure to record is said in the line.
    """
    reason = death_reason(exc)
    place = f" pid {where['pid']} on Ray node {where['node_ip']}" if where else ""
    line = (f"{WHAT}{place} was lost ({reason}); its last checkpoint is in {logdir} "
            f"(continue with --resume --logdir={logdir})")
    if where is None:
        return line + "; not recorded in run_events.jsonl (it died before it started)"
    fields = {"node_ip": where["node_ip"], "node_id": where["node_id"], "pid": where["pid"],
              "reason": reason}
    try:
        _record(RunDir(logdir).events_path, where["node_id"], fields, line)
    except Exception as exc2:  # noqa: BLE001  (the line still names the loss)
        return line + f"; not recorded in run_events.jsonl ({type(exc2).__name__}: {exc2})"
    return line


def _record(path: str, node_id: str, fields: dict, line: str) -> None:
    """Append the event to ``path`` on node ``node_id`` (here if the driver runs there)."""
    import ray  # noqa: PLC0415  (Ray: optional; only under --launcher=ray)
    if not ray.is_initialized() or node_id == ray.get_runtime_context().get_node_id():
        _append(path, fields, line)
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    ray.get(ray.remote(_append).options(num_cpus=0, scheduling_strategy=strategy, max_retries=0)
            .remote(path, fields, line), timeout=RECORD_TIMEOUT_S)


def _append(path: str, fields: dict, line: str) -> None:
    if not os.path.isdir(os.path.dirname(path)):  # not this run's folder: do not create one
        raise FileNotFoundError(f"no run folder {os.path.dirname(path)}")
    events.append(path, logging.ERROR, "accelerator_lost", fields, line)

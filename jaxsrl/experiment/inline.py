"""``--inline_inference``: which runs can have their actors run the policy themselves.

With inline inference (SRL's inline mode, Mei et al. 2023, Sec. 3.2: CPU actors that
call the policy in their own process) every actor process runs the agent's ``act``
itself, with parameters from the learner's parameter stream (PUB/SUB,
:mod:`jaxsrl.streams.param_stream`) and its rows' recurrent state kept locally; the
learner stays where it is and no inference server is started. Pure checks: nothing
here builds workers (the actor is :mod:`jaxsrl.workers.inline`, its launcher side
:mod:`jaxsrl.launch.inline_params`).
"""

from __future__ import annotations

from typing import Any


def check(cfg: Any, flow: Any) -> None:
    """Refuse ``--inline_inference`` with settings it cannot honour.

    Raises:
      ValueError: one line naming the setting: ``inline_inference`` not a bool, or
        together with ``--remote_inference`` (no server runs), self-play opponent pools
        (snapshots are served by inference servers), ``--inference_servers`` > 1 or an
        ``--inference_deadline_ms`` (settings of servers that do not exist), or a policy
        worker of the ``[dataflow]`` with ``count`` > 1.
    """
    on = cfg.inline_inference
    if not isinstance(on, bool):
        raise ValueError(f"inline_inference={on!r} must be true or false")
    if not on:
        return
    if cfg.remote_inference:
        raise ValueError("--inline_inference runs act inside the actors: it starts no inference "
                         "server, so --remote_inference has none to place (choose one)")
    if cfg.opponents.enabled:
        raise ValueError(f"opponents.snapshot_every={cfg.opponents.snapshot_every} does not work "
                         "with --inline_inference: opponent snapshots are served by inference "
                         "servers (set opponents.snapshot_every=0 or drop --inline_inference)")
    if cfg.inference_servers != 1:
        raise ValueError(f"inference_servers={cfg.inference_servers} does not apply with "
                         "--inline_inference: no inference server runs (the actors act)")
    if cfg.inference_deadline_ms:
        raise ValueError(f"inference_deadline_ms={cfg.inference_deadline_ms} does not apply with "
                         "--inline_inference: there is no server to batch requests")
    for worker in flow.policy_workers:
        if worker.count != 1:
            raise ValueError(f"policy worker {worker.name!r} has count={worker.count}, which "
                             "does not apply with --inline_inference: no inference server runs")

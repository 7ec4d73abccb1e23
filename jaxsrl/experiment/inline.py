"""``--inference=inline``: which runs can have their actors run the policy themselves.

With inline inference (SRL's inline mode, Mei et al. 2023, Sec. 3.2: CPU actors that
call the policy in their own process) every actor process runs the agent's ``act``
itself, with parameters from the learner's parameter stream (PUB/SUB,
:mod:`jaxsrl.streams.param_stream`) and its rows' recurrent state kept locally; the
learner stays where it is and no inference server is started. Pure: nothing here
builds workers (the actor is :mod:`jaxsrl.workers.inline`, its launcher side
:mod:`jaxsrl.launch.inline_params`); the settings inline refuses are rows of
:mod:`jaxsrl.experiment.modes`.
"""

from __future__ import annotations

from typing import Any


def auto_mode(cfg: Any, flow: Any, off_policy: bool, accelerator: bool) -> tuple[str, str]:
    """What ``inference="auto"`` runs: ``("inline" | "thread", why)``.

    Inline where it wins (measurements: ``docs/architecture.md``, "Inline inference")
    and where it is tested: a learner without an accelerator (on a GPU one
    batched call serves every actor), one learner process on the local or serial
    launcher, an on-policy agent, the default graph (no ``[dataflow]`` table, population
    or self-play opponents) and no server settings. Anything else: inference server
    threads (``thread``).

    Args:
      cfg: the run config; flow: its dataflow; off_policy: the agent learns from replay;
      accelerator: the learner's local devices are not CPUs.
    """
    reasons = [(accelerator, "the learner has an accelerator"),
               (cfg.launcher not in ("local", "serial"), f"launcher={cfg.launcher}"),
               (cfg.num_learner_processes != 1, "several learner processes"),
               (off_policy, "an off-policy agent"),
               (bool(cfg.dataflow), "a [dataflow] table"),
               (bool(cfg.population), "a population"),
               (cfg.opponents.enabled, "self-play opponents"),
               (bool(cfg.inference_deadline_ms), "an inference deadline")]
    several = len(flow.policy_workers) != 1 or any(w.count != 1 for w in flow.policy_workers)
    if several and not (cfg.dataflow or cfg.population):  # those already say why
        reasons.append((True, f"inference_servers={cfg.inference_servers}"))
    why = [text for hit, text in reasons if hit]
    if why:
        return "thread", "auto: thread (" + ", ".join(why) + ")"
    return "inline", "auto: inline (CPU-only learner: the actors run act themselves)"

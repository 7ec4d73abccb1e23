"""``--inference=inline``: which runs can have their actors run the policy themselves.

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

MODES = ("auto", "server", "inline")
#: the flags of the boolean field this one replaced, still accepted on the command line.
FLAG_ALIASES = {"--inline_inference": "--inference=inline",
                "--no_inline_inference": "--inference=server"}


def legacy_key(data: dict, path: str) -> dict:
    """``data`` (a TOML table or an older run's ``config.json``) with the old boolean key
    ``inline_inference`` turned into ``inference`` (``true``: inline, ``false``: server).

    Raises:
      ValueError: ``inline_inference`` is not a bool, or contradicts an ``inference`` key
        of the same file (``path`` names the file).
    """
    if "inline_inference" not in data:
        return data
    data = dict(data)
    value = data.pop("inline_inference")
    if not isinstance(value, bool):
        raise ValueError(f"{path}: inline_inference={value!r} must be true or false")
    mode = "inline" if value else "server"
    if data.get("inference", mode) != mode:
        raise ValueError(f"{path}: inline_inference={str(value).lower()} contradicts "
                         f"inference={data['inference']!r} (keep one of them)")
    data["inference"] = mode
    return data


def saved_mode(data: dict) -> dict:
    """A run's ``config.json`` (after :func:`legacy_key`) with the mode it ran: one saved
    before the ``inference`` setting existed (no ``inference`` key) ran inference servers,
    and resumes with them rather than as ``auto``."""
    return data if "inference" in data else {**data, "inference": "server"}


def auto_mode(cfg: Any, flow: Any, off_policy: bool, accelerator: bool) -> tuple[str, str]:
    """What ``inference="auto"`` runs: ``("inline" | "server", why)``.

    Inline where it wins (``docs/architecture.md``, "Inline inference": CartPole 1.6x the
    env steps/s of the server on 2 cores, hide-and-seek 91% of the compute-bound ceiling
    against 85%) and where it is tested: a learner without an accelerator (on a GPU one
    batched call serves every actor), one learner process on the local or serial
    launcher, an on-policy agent, the default graph (no ``[dataflow]`` table, population
    or self-play opponents) and no server settings. Anything else: the server.

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
               (cfg.remote_inference, "--remote_inference"),
               (bool(cfg.inference_deadline_ms), "an inference deadline")]
    several = len(flow.policy_workers) != 1 or any(w.count != 1 for w in flow.policy_workers)
    if several and not (cfg.dataflow or cfg.population):  # those already say why
        reasons.append((True, f"inference_servers={cfg.inference_servers}"))
    why = [text for hit, text in reasons if hit]
    if why:
        return "server", "auto: server (" + ", ".join(why) + ")"
    return "inline", "auto: inline (CPU-only learner: the actors run act themselves)"


def check(cfg: Any, flow: Any) -> None:
    """Refuse ``--inference=inline`` with settings it cannot honour.

    Raises:
      ValueError: one line naming the setting: ``inference`` not one of :data:`MODES`, or
        inline together with ``--remote_inference`` (no server runs), self-play opponent
        pools (snapshots are served by inference servers), ``--inference_servers`` > 1 or
        an ``--inference_deadline_ms`` (settings of servers that do not exist), or a
        policy worker of the ``[dataflow]`` with ``count`` > 1.
    """
    if cfg.inference not in MODES:
        raise ValueError(f"inference={cfg.inference!r} must be one of {', '.join(MODES)}")
    if cfg.inference != "inline":
        return
    if cfg.remote_inference:
        raise ValueError("--inference=inline runs act inside the actors: it starts no inference "
                         "server, so --remote_inference has none to place (choose one; a "
                         "resumed run keeps its config.json's mode: add --inference=server)")
    if cfg.opponents.enabled:
        raise ValueError(f"opponents.snapshot_every={cfg.opponents.snapshot_every} does not work "
                         "with --inference=inline: opponent snapshots are served by inference "
                         "servers (set opponents.snapshot_every=0 or --inference=server)")
    if cfg.inference_servers != 1:
        raise ValueError(f"inference_servers={cfg.inference_servers} does not apply with "
                         "--inference=inline: no inference server runs (the actors act; a resumed "
                         "run keeps its config.json's mode: add --inference=server)")
    if cfg.inference_deadline_ms:
        raise ValueError(f"inference_deadline_ms={cfg.inference_deadline_ms} does not apply with "
                         "--inference=inline: there is no server to batch requests (add "
                         "--inference=server)")
    for worker in flow.policy_workers:
        if worker.count != 1:
            raise ValueError(f"policy worker {worker.name!r} has count={worker.count}, which "
                             "does not apply with --inference=inline: no inference server runs")

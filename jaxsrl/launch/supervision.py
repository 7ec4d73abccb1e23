"""Restart policy of a run's actors: which exits are restarted, when, and when to give up.

:class:`ActorSupervisor` is called by the control loop every turn. A crashed actor, or a
hung one (silent for ``actor_heartbeat_timeout_s`` while every worker thread of the
launcher kept turning its loop), is restarted with a new run id and new environment
seeds, so the servers drop messages of its previous run; so is an actor that got no
answer from an inference server that kept serving (its host or network failed:
``actor_unreachable``). An actor whose runs keep failing before reaching the servers is
restarted with a growing delay (:func:`restart_delay`). After ``max_actor_restarts``
restarts in a run (all actors together), or when an actor timed out waiting for a
server that died or stalled, or for its learner, :class:`ComponentDied` stops the run.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from jaxsrl.core.exit_codes import EXIT_ENV_ERROR, EXIT_LEARNER_TIMEOUT, EXIT_SERVER_TIMEOUT
from jaxsrl.core.child import read_error
from jaxsrl.experiment import events
from jaxsrl.launch.processes import ChildProcess, exit_reason

log = logging.getLogger("jaxsrl")

#: Backoff between restarts of an actor whose runs never reach the servers (seconds).
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0


class ComponentDied(RuntimeError):
    """A worker of the run died; the message names it."""


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


class ActorSupervisor:
    """Watches and restarts the actors of one run (see module docstring).

    Args:
      cfg: the run config (``actor_heartbeat_timeout_s``, ``actor_timeout_s``,
        ``max_actor_restarts``).
      actors: the run's actor processes (restarted in place).
      table: the run's :class:`~jaxsrl.streams.admission.ActorTable` (when each actor
        was last heard from).
      metrics: the run's metrics (``actor_restarts``, ``actor_hangs``, ``actor_unreachable``).
      liveness: ``liveness(addresses)``: ``(serving, last heartbeat)`` of each inference
        server at one of ``addresses`` (the run's inference backend; is the server an
        actor waited for alive?).
      seed_base: environment seed of the run's first actor runs.
    """

    def __init__(self, cfg: Any, actors: Sequence[ChildProcess], table: Any, metrics: Any,
                 liveness: Callable[[set], list[tuple[bool, float]]], seed_base: int):
        self.cfg, self.actors, self.table, self.metrics = cfg, actors, table, metrics
        self.liveness, self.seed_base = liveness, seed_base
        self.restarts = 0  # in this run, all actors together
        # Per actor (index): restarts in a row whose run never reached the servers, and
        # when a delayed restart is due.
        self.futile: dict[int, int] = {}
        self.restart_at: dict[int, float] = {}

    def check(self, mono: float, responsive_since: float | None) -> None:
        """Restart every actor that exited or hung; ``responsive_since``: since when
        every worker thread kept turning its loop (``None``: one did not).

        Raises:
          ComponentDied: an actor cannot or may not be restarted (message names it).
        """
        for i, a in enumerate(self.actors):
            if i in self.restart_at:  # a delayed restart
                if mono >= self.restart_at[i]:
                    del self.restart_at[i]
                    a.start()
                continue
            code = a.proc.poll()
            hung = False
            if code is None:
                if not self._hung(a, mono, responsive_since):
                    continue
                a.kill()
                code, hung = a.proc.returncode, True
            self._restart(i, a, code, hung, mono)

    def _hung(self, a: ChildProcess, mono: float, responsive_since: float | None) -> bool:
        """Silent for ``actor_heartbeat_timeout_s`` while every server kept turning its
        loop (warmed up, not stuck in a long update or checkpoint) all that time."""
        hang_s = self.cfg.actor_heartbeat_timeout_s
        if not (hang_s > 0 and responsive_since is not None):
            return False
        last = max(self.table.last_seen(a.spec["actor_id"]) or 0.0, a.started_at, responsive_since)
        if mono - last <= hang_s:
            return False
        events.emit(log, logging.WARNING, "actor_hang",
                    {"actor": a.name, "actor_id": a.spec["actor_id"], "silent_s": mono - last},
                    "%s (pid %d) sent nothing for %.1f s while the servers were responsive: "
                    "hung%s; killing it", a.name, a.proc.pid, mono - last,
                    "" if self.heard_since_start(a) else " (nothing reached the servers since "
                    "it started: is its host unreachable?)")
        self.metrics.count("actor_hangs")
        return True

    def _unreachable(self, a: ChildProcess, mono: float) -> str:
        """An actor exited with ``EXIT_SERVER_TIMEOUT``: the reason to restart it.

        Its servers (own and fallbacks) kept turning their loops during the second half
        of the actor's wait, so they were alive: the answers did not reach the actor
        (its host or network failed). Otherwise a server died or stalled.

        Raises:
          ComponentDied: a server it waited for died or stalled, or (an inline actor)
            no parameters reached it.
        """
        inline = a.spec.get("inline")
        if inline:  # it waited for parameters, not for a server
            raise ComponentDied(f"{a.name} got no parameters from {inline.get('param_address')} "
                                f"in time: did the learner's parameter publisher stop?")
        addresses = sorted({s["inference_address"] for s in a.spec["streams"]})
        tried = {x for s in a.spec["streams"]
                 for x in s.get("inference_addresses") or [s["inference_address"]]}
        waited = self.liveness(tried)
        limit = self.cfg.actor_timeout_s
        if not (waited and all(serving and mono - beat < limit / 2 for serving, beat in waited)):
            raise ComponentDied(f"{a.name} timed out waiting for its inference server "
                                f"({', '.join(addresses)}): did the server die or stall?")
        self.metrics.count("actor_unreachable")
        return (f"got no answer from {', '.join(addresses)} in {limit:g} s "
                "while that server kept serving: its host or network is unreachable")

    def _restart(self, i: int, a: ChildProcess, code: int, hung: bool, mono: float) -> None:
        """Restart actor ``i``, which exited with ``code`` (or was killed as ``hung``)."""
        reason = ""
        if code == EXIT_SERVER_TIMEOUT:
            reason = self._unreachable(a, mono)
        if code == EXIT_LEARNER_TIMEOUT:
            addresses = sorted({s["sample_address"] for s in a.spec["streams"]})
            raise ComponentDied(f"{a.name} timed out waiting for its learner "
                                f"({', '.join(addresses)}) to take samples")
        # A process whose Ray host died says so, naming the node (``RayProcess.lost_reason``).
        reason = reason or ("hung" if hung else getattr(a.proc, "lost_reason", "") or exit_reason(code))
        error = read_error(a.spec.get("error_file")) if code == EXIT_ENV_ERROR else ""
        limit = self.cfg.max_actor_restarts
        if self.restarts >= limit:
            what = "its environment keeps failing" if code == EXIT_ENV_ERROR else f"it stopped ({reason})"
            raise ComponentDied(
                f"{a.name}: {what}; actors were restarted {self.restarts} times in this run "
                f"(max_actor_restarts={limit}), giving up" + (f". Last error: {error}" if error else ""))
        self.restarts += 1
        a.restarts += 1
        self.metrics.count("actor_restarts")
        self.futile[i] = 0 if self.heard_since_start(a) else self.futile.get(i, 0) + 1
        delay = restart_delay(self.futile[i])
        events.emit(log, logging.WARNING, "actor_restart",
                    {"actor": a.name, "actor_id": a.spec["actor_id"], "reason": reason,
                     "error": error, "error_file": a.spec.get("error_file") if error else None,
                     "code": code,
                     "restart": self.restarts, "delay_s": delay},
                    "%s %s%s; restarting it with a new run id%s (restart %d of at most %d)",
                    a.name, reason, f": {error}" if error else "",
                    f" in {delay:g} s" if delay else "", self.restarts, limit)
        # New environment seeds, so a restarted actor does not replay its episodes.
        a.spec = {**a.spec, "seed": self.seed_base + a.restarts * 10_000 * len(self.actors)}
        if delay:
            self.restart_at[i] = mono + delay
        else:
            a.start()

    def heard_since_start(self, actor: ChildProcess) -> bool:
        """Some message of the actor's current run reached a server (the table records
        the registration time at ``start``, just before ``started_at``)."""
        return (self.table.last_seen(actor.spec["actor_id"]) or 0.0) > actor.started_at

"""A self-play run's opponent pools in the launcher (``[opponents]``, see
``docs/population.md``).

The wiring builds it after the trainers (their restored versions and parameters are in
the run's parameter store) and before the inference servers, which serve the pools'
snapshots::

    run.selfplay = SelfPlay.of_run(run)            # None unless opponents.snapshot_every > 0
    PolicyWorker(..., opponents=run.selfplay.league)
    workers.append(WorkerThread(run.selfplay.worker, Kind.WATCH))
    actor spec["opponents"] = run.selfplay.actor_spec()

On ``--resume`` the pools, their snapshots' parameters and the ratings come back from
``LOGDIR/selfplay/`` (:class:`~jaxsrl.workers.population.league_store.LeagueStore`).
"""

from __future__ import annotations

import logging
from typing import Any

from jaxsrl.experiment.selfplay import team_policies
from jaxsrl.parallel import devices
from jaxsrl.workers.population.league import League, LeagueWorker
from jaxsrl.workers.population.league_store import LeagueStore

log = logging.getLogger("jaxsrl.selfplay")


class SelfPlay:
    """The league of a run, its worker thread and what actors are told.

    Args:
      run: the :class:`~jaxsrl.launch.control.Run` (trainers built).

    Raises:
      ValueError: saved league state of other policies, or unreadable.
    """

    def __init__(self, run: Any):
        s = run.cfg.opponents
        self.settings = s
        policies = team_policies(run.flow)
        self.league = League(policies, s.pool_config(), s.rating_model)
        self.store = LeagueStore(run.logdir)
        if run.cfg.resume:
            mesh = run.placement.local_mesh
            saved = self.store.load(lambda p: devices.put_replicated(run.store.get(p).params, mesh))
            if saved is not None:
                versions = {t.policy: t.version for t in run.trainers.values()}
                self.league.load(*saved, versions)
                log.info("resumed the self-play pools: %s", ", ".join(
                    f"{p} {len(self.league.view(p).versions)} snapshots" for p in policies))
        self.worker = LeagueWorker("selfplay", self.league, run.store, run.metrics, self.store,
                                   save_interval_s=s.save_interval_s)

    @classmethod
    def of_run(cls, run: Any) -> "SelfPlay | None":
        """The run's self-play pools, ``None`` unless ``opponents.snapshot_every > 0``."""
        return cls(run) if run.cfg.opponents.enabled else None

    def actor_spec(self) -> dict:
        """The actors' ``opponents`` spec entry."""
        return {"p_latest": float(self.settings.p_latest)}

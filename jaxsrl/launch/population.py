"""A ``--population`` run's pieces in the launcher: the members' metrics and the
population manager (see ``docs/population.md``).

The dataflow itself (one actor group, inference server and trainer per member) comes
from the config (``jaxsrl.experiment.population.population_dataflow``, through
``RunConfig.get_dataflow``). The launcher then::

    population = Population.of_run(cfg, logdir, metrics)   # None without --population
    ... TrainerWorker(..., population.metrics_for(policy), ...)
    workers.append(population.manager(trainers_by_policy))  # after the trainers exist

On a fresh start :meth:`Population.manager` sets each member's initial
hyperparameters in its learner state (``[pbt.initial]`` or drawn from the search
space); on ``--resume`` the restored learner states keep theirs and the manager's
lineage, round counter and random generator come back from ``population/``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np

from jaxsrl.experiment import population as settings
from jaxsrl.experiment.metrics import MetricsAccumulator, PolicyMetrics
from jaxsrl.population.pbt import PBT, with_hyper
from jaxsrl.workers.population.fitness import FitnessTracker
from jaxsrl.workers.population.manager import PopulationManager
from jaxsrl.workers.population.store import PopulationStore

log = logging.getLogger("jaxsrl.population")


class MemberMetrics(PolicyMetrics):
    """A member's view of the run's metrics: :class:`PolicyMetrics` (learner metrics
    also as ``<name>/<member>``), and each episode's return and the samples' env frames
    also go to the population's :class:`FitnessTracker`; the return is logged as
    ``population/return/<member>`` (the member's mean over the interval).

    Args:
      base: the run's accumulator.
      policy: the member's policy name.
      tracker: the population's fitness tracker.
    """

    def __init__(self, base: MetricsAccumulator, policy: str, tracker: FitnessTracker):
        super().__init__(base, policy)
        self._tracker = tracker

    def add_episode(self, episode: dict, suffix: str = "") -> None:
        self._base.add_episode(episode, suffix)
        ret = episode.get("return")
        if not suffix and isinstance(ret, (int, float)) and not isinstance(ret, bool):
            self._tracker.add_episode(self.policy, float(ret))
            self._base.add_means({f"population/return/{self.policy}": float(ret)})

    def add_episodes(self, returns: Any, lengths: Any) -> None:
        """Finished episodes as ``[E]`` arrays in the order they finished (device actors):
        as one :meth:`add_episode` per pair (the fitness and ``population/return/<member>``
        take the finite returns).

        Raises:
          ValueError: as :meth:`MetricsAccumulator.add_episodes`.
        """
        self._base.add_episodes(returns, lengths)
        returns = np.asarray(returns, np.float64)
        returns = returns[np.isfinite(returns)]
        if returns.size:
            self._tracker.add_episodes(self.policy, int(returns.size), float(returns.sum()))
            self._base.add_sums({f"population/return/{self.policy}": float(returns.sum())},
                                int(returns.size))

    def add_env_steps(self, n: int) -> None:
        self._base.add_env_steps(n)
        self._tracker.add_env_steps(self.policy, n)


class Population:
    """The population of a run: its members, their fitness tracker and the manager.

    Args:
      cfg: the run config (``population >= 2``, validated).
      logdir: the run folder.
      metrics: the run's accumulator.
    """

    def __init__(self, cfg: Any, logdir: str, metrics: MetricsAccumulator):
        self.cfg, self.metrics = cfg, metrics
        self.members = settings.member_names(cfg.population)
        self.space = settings.search_space(cfg)
        if not cfg.pbt.search_space or settings.ready_interval(cfg.pbt) != (
                cfg.pbt.ready_env_steps, cfg.pbt.ready_versions):
            env_steps, versions = settings.ready_interval(cfg.pbt)
            log.info("population of %d: search space %s; a round every %s (defaults where "
                     "[pbt] sets none: docs/population.md)", cfg.population,
                     ", ".join(f"{k} in [{r.min:g}, {r.max:g}]{' (log)' if r.log else ''}"
                               for k, r in self.space.items()),
                     f"{env_steps:,} env frames per member" if env_steps else
                     f"{versions} policy versions per member")
        self.tracker = FitnessTracker(self.members)
        self.store = PopulationStore(logdir)

    @classmethod
    def of_run(cls, cfg: Any, logdir: str, metrics: MetricsAccumulator) -> "Population | None":
        """The run's population, ``None`` without ``--population``."""
        return cls(cfg, logdir, metrics) if cfg.population else None

    def metrics_for(self, policy: str) -> MemberMetrics:
        """What member ``policy``'s trainer records into."""
        return MemberMetrics(self.metrics, policy, self.tracker)

    def manager(self, trainers: Mapping[str, Any]) -> PopulationManager:
        """The population manager over ``{member: TrainerWorker}`` (built, not started).

        Fresh start: sets each member's initial hyperparameters in its learner state
        (call before the trainer threads start). ``--resume``: reads them from the
        restored states and loads the manager's saved state, if any.

        Raises:
          ValueError: trainers of other policies than the members, or saved manager
            state of another population.
        """
        if sorted(trainers) != sorted(self.members):
            raise ValueError(f"population: trainers of {sorted(trainers)}, members {self.members}")
        if self.cfg.resume:
            hyper = {m: {k: float(trainers[m].state.hyper[k]) for k in self.space}
                     for m in self.members}
        else:
            hyper = settings.initial_hyper(self.cfg)
            for m in self.members:
                trainers[m].state = with_hyper(trainers[m].state, hyper[m])
        s = self.cfg.pbt
        ready_env_steps, ready_versions = settings.ready_interval(s)
        manager = PopulationManager(
            "population", {m: trainers[m] for m in self.members}, PBT(self.space, s.pbt_config()),
            self.tracker, hyper, self.metrics, ready_env_steps=ready_env_steps,
            ready_versions=ready_versions, store=self.store, seed=self.cfg.seed)
        saved = self.store.load() if self.cfg.resume else None
        if saved is not None:
            manager.load(*saved)
            log.info("resumed the population at round %d (%d events in its lineage)",
                     manager.round, sum(len(manager.lineage.history(m)) for m in self.members))
        log.info("population of %d: %s", len(self.members),
                 "; ".join(f"{m} " + ", ".join(f"{k}={v:.3g}" for k, v in hyper[m].items())
                           for m in self.members))
        return manager

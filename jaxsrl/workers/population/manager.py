"""Population manager: population-based training over the member policies of a run.

A thread of the accelerator process (a :class:`~jaxsrl.core.worker.Worker` the
launcher watches like a trainer), beside the members' trainers. Every ready interval
(each member trained ``ready_env_steps`` env frames, or published ``ready_versions``
policy versions, since the previous round) it runs one PBT *round*:

1. each member's fitness: the mean return of the training episodes it finished since
   the previous round (:class:`~jaxsrl.workers.population.fitness.FitnessTracker`; a
   member with none keeps its last fitness, one that never had any ranks lowest);
2. :meth:`jaxsrl.population.pbt.PBT.decide` picks the events (a bottom member copies a
   strictly fitter top member and perturbs the search-space hyperparameters);
3. for each event, the *source's* trainer thread builds the copy between two of its
   updates (``TrainerWorker.run_between_updates`` running
   :func:`jaxsrl.population.pbt.apply`: every leaf copied, placements kept, ``hyper``
   set to the event's ``after``), then the *member's* trainer thread swaps it in
   between two of its updates (``TrainerWorker.request_replace``), which publishes its
   parameters as a new policy version. No thread touches a learner state while its
   ``learn`` runs, and ``learn`` is never recompiled (hyperparameters are state).

Each event is appended to ``population/events.jsonl`` with before/after values and
logged; the lineage and the manager's state are rewritten after each event
(:class:`~jaxsrl.workers.population.store.PopulationStore`) and the changed member is
asked for a checkpoint. Metrics: counters ``pbt/rounds`` and ``pbt/exploits``, means
``population/fitness/<member>`` (per round) and ``population/<hyperparameter>/<member>``
(the values in force, sampled on each turn of the loop).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import time
from typing import Any, Mapping

import numpy as np

from jaxsrl.core.worker import Worker
from jaxsrl.population import pbt as pbt_lib
from jaxsrl.population.lineage import Lineage
from jaxsrl.workers.population.fitness import FitnessTracker
from jaxsrl.workers.population.store import PopulationStore

log = logging.getLogger("jaxsrl.population")


class _Stopped(Exception):
    """The run is stopping: leave the round."""


class PopulationManager(Worker):
    """PBT over ``trainers`` (lifecycle: :class:`~jaxsrl.core.worker.Worker`).

    Args:
      name: worker name (logs, errors).
      trainers: ``{member: trainer}``; a trainer offers ``version`` (int),
        ``run_between_updates(fn) -> Future`` and ``request_replace(state) -> Future``
        (:class:`~jaxsrl.workers.learner.trainer.TrainerWorker`), optionally ``stop``
        (an Event: set while the run stops) and ``checkpoint_requested`` (an Event).
      pbt: the exploit-and-explore rule over the search space.
      tracker: the members' fitness and env frames.
      hyper: ``{member: {name: value}}``: the search-space hyperparameters in force now
        (the initial ones, or those of the restored learner states).
      metrics: the run's metrics accumulator (``count``, ``add_means``, ``env_steps``).
      ready_env_steps, ready_versions: the ready interval (exactly one positive).
      store: where the events, lineage and state go (``None``: nowhere).
      seed: seed of the NumPy generator behind every PBT choice.
      poll_s: seconds between two checks of the ready rule.
      request_timeout_s: longest wait for a trainer to serve a request.

    Raises:
      ValueError: no or two ready intervals, members without hyperparameters.
    """

    def __init__(self, name: str, trainers: Mapping[str, Any], pbt: pbt_lib.PBT,
                 tracker: FitnessTracker, hyper: Mapping[str, Mapping[str, float]], metrics: Any,
                 *, ready_env_steps: int = 0, ready_versions: int = 0,
                 store: PopulationStore | None = None, seed: int = 0, poll_s: float = 0.2,
                 request_timeout_s: float = 300.0):
        super().__init__(name)
        if (ready_env_steps > 0) == (ready_versions > 0):
            raise ValueError(f"population manager: set exactly one of ready_env_steps="
                             f"{ready_env_steps} and ready_versions={ready_versions}")
        missing = [m for m in trainers if m not in hyper]
        if missing:
            raise ValueError(f"population manager: no hyperparameters for members {missing}")
        self.trainers, self.pbt, self.tracker, self.metrics = dict(trainers), pbt, tracker, metrics
        self.members = list(self.trainers)
        self.ready_env_steps, self.ready_versions = int(ready_env_steps), int(ready_versions)
        self.store, self.poll_s, self.request_timeout_s = store, poll_s, request_timeout_s
        self.hyper = {m: {k: float(v) for k, v in hyper[m].items()} for m in self.members}
        self.lineage = Lineage(self.hyper)
        self.rng = np.random.default_rng(seed)
        self.round = 0
        self.fitness = {m: math.nan for m in self.members}
        self._base = {m: self.progress(m) for m in self.members}

    # -- state (resume) ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-serialisable manager state (not the lineage: :attr:`lineage`)."""
        return {"round": self.round, "rng": self.rng.bit_generator.state,
                "fitness": dict(self.fitness), "hyper": {m: dict(h) for m, h in self.hyper.items()},
                "members": list(self.members)}

    def load(self, lineage: Mapping, state: Mapping) -> None:
        """Continue a saved population (``--resume``): lineage, round counter, random
        generator and last fitness; the hyperparameters in force stay those given at
        construction (the restored learner states hold them).

        Raises:
          ValueError: saved for other members, or a malformed lineage.
        """
        if list(state.get("members", ())) != self.members:
            raise ValueError(f"--resume: the population was saved with members "
                             f"{state.get('members')}, this run has {self.members}")
        self.lineage.load(lineage)
        self.round = int(state["round"])
        self.rng.bit_generator.state = state["rng"]
        self.fitness = {m: math.nan if v is None else float(v) for m, v in state["fitness"].items()}

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(self.lineage.state_dict(), self.state_dict())

    # -- the ready rule ------------------------------------------------------------------
    def progress(self, member: str) -> int:
        """``member``'s env frames (``ready_env_steps``) or policy version."""
        if self.ready_env_steps:
            return self.tracker.env_steps(member)
        return int(self.trainers[member].version)

    def is_ready(self) -> bool:
        """Every member progressed by the ready interval since the previous round."""
        interval = self.ready_env_steps or self.ready_versions
        return all(self.progress(m) - self._base[m] >= interval for m in self.members)

    # -- one round -----------------------------------------------------------------------
    def step(self) -> list[pbt_lib.Event]:
        """Run one PBT round now (the loop calls it when :meth:`is_ready`); returns the
        events applied.

        Raises:
          TimeoutError: a trainer did not serve a request in ``request_timeout_s``.
          Exception: what a trainer's request raised (e.g. a state that does not match).
        """
        self._base = {m: self.progress(m) for m in self.members}
        self.round += 1
        for m, (mean, episodes) in self.tracker.take().items():
            if episodes:
                self.fitness[m] = mean
        finite = {m: f for m, f in self.fitness.items() if math.isfinite(f)}
        self.metrics.add_means({f"population/fitness/{m}": f for m, f in finite.items()})
        self.metrics.count("pbt/rounds")
        step = int(self.metrics.env_steps)
        events = self.pbt.decide(self.fitness, self.hyper, self.rng)
        log.info("pbt round %d at %d env steps: fitness %s; %d exploit(s)", self.round, step,
                 ", ".join(f"{m} {f:.1f}" for m, f in self.fitness.items()), len(events))
        applied = []
        for event in events:
            version, source_version = self._apply(event)
            self.hyper[event.member] = {k: float(event.after[k]) for k in self.hyper[event.member]}
            self.lineage.record(event, step)
            self.metrics.count("pbt/exploits")
            record = {"round": self.round, "env_steps": step, **event.to_dict(),
                      "source_version": source_version, "version": version}
            if self.store is not None:
                self.store.append_event(record)
            log.info("pbt: %s (fitness %.1f) <- %s (fitness %.1f, version %d): %s", event.member,
                     event.member_fitness, event.source, event.source_fitness, source_version,
                     ", ".join(f"{k} {event.before.get(k, math.nan):.3g} -> {v:.3g} "
                               f"({event.how.get(k, 'copied')})" for k, v in event.after.items()))
            checkpoint = getattr(self.trainers[event.member], "checkpoint_requested", None)
            if checkpoint is not None:
                checkpoint.set()
            applied.append(event)
            self._save()
        self._save()
        return applied

    def _apply(self, event: pbt_lib.Event) -> tuple[int, int]:
        """Copy in the source's thread, swap in the member's; ``(new version, source
        version)``."""
        def exploit(trainer):  # in the source's trainer thread, between its updates
            copied = pbt_lib.apply(event, {event.member: None, event.source: trainer.state})
            return copied[event.member], int(trainer.version)

        source, member = self.trainers[event.source], self.trainers[event.member]
        state, source_version = self._wait(source.run_between_updates(exploit), source, event.source)
        version = self._wait(member.request_replace(state), member, event.member)
        return int(version), source_version

    def _wait(self, future: concurrent.futures.Future, trainer: Any, member: str) -> Any:
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            self.beat()
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self.stop.is_set():
                    future.cancel()
                    raise _Stopped() from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise TimeoutError(f"{self.name}: the trainer of {member} served no request "
                                       f"in {self.request_timeout_s:g} s") from None
            except Exception:
                stopping = getattr(trainer, "stop", None)
                if self.stop.is_set() or (stopping is not None and stopping.is_set()):
                    raise _Stopped() from None
                raise

    # -- the loop ------------------------------------------------------------------------
    def record_hyper(self) -> None:
        """Sample the hyperparameters in force into the metrics
        (``population/<hyperparameter>/<member>``)."""
        self.metrics.add_means({f"population/{k}/{m}": v for m, h in self.hyper.items()
                                for k, v in h.items()})

    def _run(self) -> None:
        """Check the ready rule every ``poll_s`` until ``stop``; run a round when ready."""
        self.ready.set()
        self.start_serving()
        try:
            while not self.stop.is_set():
                self.beat()
                self.record_hyper()
                if self.is_ready():
                    self.step()
                self.stop.wait(self.poll_s)
        except _Stopped:
            log.info("%s: the run stopped during round %d", self.name, self.round)
        finally:
            try:
                self._save()
            except OSError as exc:
                log.warning("%s: could not save the population state: %r", self.name, exc)

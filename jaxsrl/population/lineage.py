"""Lineage: per member of a PBT population, where its weights and hyperparameters came from.

A JSON-serialisable record (``state_dict``/``load``) of every exploit-and-explore event
(:class:`~jaxsrl.population.pbt.Event`) by member, with the step at which it happened, so
that a run folder can show each member's hyperparameter schedule and a final model's
ancestry (Jaderberg et al. 2017, Fig. 5 and 6 draw these trees).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from jaxsrl.population.pbt import Event

FORMAT = 1  # version of state_dict's layout


class Lineage:
    """Events by member.

    Args:
      initial: ``{member: initial hyperparameters}`` (the start of each schedule).

    Raises:
      ValueError: a non-string member name.
    """

    def __init__(self, initial: Mapping[str, Mapping[str, float]]):
        bad = [m for m in initial if not isinstance(m, str)]
        if bad:
            raise ValueError(f"lineage: members must be strings; got {bad!r}")
        self._initial = {m: {k: float(v) for k, v in h.items()} for m, h in initial.items()}
        # Per member [(step, seq, event)]; seq numbers every event of the population in
        # the order recorded, which orders events recorded at the same step.
        self._events: dict[str, list[tuple[int, int, Event]]] = {m: [] for m in initial}
        self._seq = 0

    @property
    def members(self) -> list[str]:
        return list(self._initial)

    def record(self, event: Event, step: int) -> None:
        """Add ``event`` (applied at ``step``, e.g. the member's env steps or PBT round),
        after every event recorded so far.

        Raises:
          ValueError: an unknown member or source, or a step below the member's last one.
        """
        for m in (event.member, event.source):
            if m not in self._events:
                raise ValueError(f"lineage: unknown member {m!r} (members: {self.members})")
        history = self._events[event.member]
        if history and step < history[-1][0]:
            raise ValueError(f"lineage: step={step} of {event.member!r} is before its last "
                             f"event's step {history[-1][0]}")
        history.append((int(step), self._seq, event))
        self._seq += 1

    def record_all(self, events: Iterable[Event], step: int) -> None:
        for e in events:
            self.record(e, step)

    def history(self, member: str) -> list[tuple[int, Event]]:
        """``[(step, event)]`` of ``member``, oldest first."""
        return [(s, e) for s, _, e in self._events[member]]

    def hyper_at(self, member: str, step: int) -> dict[str, float]:
        """``member``'s hyperparameters in force at ``step`` (after events at ``<= step``)."""
        hyper = dict(self._initial[member])
        for s, _, e in self._events[member]:
            if s > step:
                break
            hyper = dict(e.after)
        return hyper

    def ancestry(self, member: str) -> list[tuple[str, int]]:
        """Whose weights ``member`` carries: ``[(member, inf), (source, step), ...]``,
        newest first; each entry's weights came from the next one at that step (the
        last entry trained from its own initialisation)."""
        chain, cur, before = [(member, math.inf)], member, math.inf
        while True:
            earlier = [(s, q, e) for s, q, e in self._events[cur] if q < before]
            if not earlier:
                return chain
            step, before, e = earlier[-1]
            cur = e.source
            chain.append((cur, step))

    def state_dict(self) -> dict:
        """JSON-serialisable: ``{"format", "initial", "events": {member: [{step, seq,
        ...Event fields}]}}``."""
        return {"format": FORMAT, "initial": {m: dict(h) for m, h in self._initial.items()},
                "events": {m: [{"step": s, "seq": q, **e.to_dict()} for s, q, e in ev]
                           for m, ev in self._events.items()}}

    def load(self, state: Mapping) -> None:
        """Replace the contents by those of ``state_dict()``.

        Raises:
          ValueError: an unknown ``format`` or a malformed entry.
        """
        if state.get("format") != FORMAT:
            raise ValueError(f"lineage: format={state.get('format')!r}; this version reads {FORMAT}")
        fresh = Lineage(state["initial"])
        try:
            entries = sorted((d for ev in state["events"].values() for d in ev),
                             key=lambda d: d["seq"])
            for d in entries:
                fresh.record(Event.from_dict(d), int(d["step"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"lineage: malformed event entry ({exc!r})") from None
        self._initial, self._events = fresh._initial, fresh._events

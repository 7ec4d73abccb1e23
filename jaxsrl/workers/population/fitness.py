"""Each member's fitness for population-based training, from its training episodes.

The trainer of member ``m`` reports each finished episode and the env frames of each
segment (through ``jaxsrl.launch.population.MemberMetrics``); the population manager
:meth:`~FitnessTracker.take`\\ s, at each round, the mean return of the episodes that
finished since the previous round: a member's fitness is its *mean training episode
return over the last ready interval*. Thread-safe (trainers add, the manager takes).
"""

from __future__ import annotations

import math
import threading
from typing import Iterable


class FitnessTracker:
    """Per member: returns of the episodes finished since the last :meth:`take`, and the
    env frames of its segments since this tracker was made.

    Args:
      members: the members' policy names.
    """

    def __init__(self, members: Iterable[str]):
        self.members = list(members)
        self._lock = threading.Lock()
        self._sum = {m: 0.0 for m in self.members}
        self._count = {m: 0 for m in self.members}
        self._steps = {m: 0 for m in self.members}

    def _check(self, member: str) -> None:
        if member not in self._sum:
            raise KeyError(f"fitness: unknown member {member!r} (members: {self.members})")

    def add_episode(self, member: str, episode_return: float) -> None:
        """One finished episode of ``member`` (non-finite returns are ignored).

        Raises:
          KeyError: an unknown member.
        """
        self._check(member)
        if not math.isfinite(episode_return):
            return
        with self._lock:
            self._sum[member] += float(episode_return)
            self._count[member] += 1

    def add_episodes(self, member: str, count: int, return_sum: float) -> None:
        """``count`` finished episodes of ``member`` by the sum of their returns (device
        actors sum them on the accelerator): as ``count`` calls of :meth:`add_episode`
        (a non-finite sum is ignored, as a non-finite return is).

        Raises:
          KeyError: an unknown member.
        """
        self._check(member)
        if count <= 0 or not math.isfinite(return_sum):
            return
        with self._lock:
            self._sum[member] += float(return_sum)
            self._count[member] += int(count)

    def add_env_steps(self, member: str, n: int) -> None:
        """``n`` env frames of ``member``'s samples arrived."""
        self._check(member)
        with self._lock:
            self._steps[member] += int(n)

    def env_steps(self, member: str) -> int:
        """Env frames of ``member`` since the tracker was made (this process's run)."""
        self._check(member)
        with self._lock:
            return self._steps[member]

    def take(self) -> dict[str, tuple[float, int]]:
        """``{member: (mean return, episodes)}`` since the last ``take`` (``nan`` for a
        member with no episode), then start a new interval."""
        with self._lock:
            out = {m: (self._sum[m] / self._count[m] if self._count[m] else math.nan,
                       self._count[m]) for m in self.members}
            for m in self.members:
                self._sum[m], self._count[m] = 0.0, 0
            return out

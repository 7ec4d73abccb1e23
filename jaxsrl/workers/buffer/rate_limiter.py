"""Reverb's ``SampleToInsertRatio`` rate limiter, in pure Python (no JAX).

Semantics of ``reverb/rate_limiters.py`` and ``reverb/cc/rate_limiter.cc`` (Cassirer et
al. 2021, "Reverb: A Framework for Experience Replay"), counted in items:

- ``diff = inserts * samples_per_insert - samples`` must stay in ``[min_diff, max_diff]``;
- sampling ``k`` items is allowed iff ``inserts - deletes >= min_size_to_sample`` and
  ``diff - k >= min_diff`` (``RateLimiter::CanSample``);
- inserting ``k`` items is allowed iff ``inserts + k - deletes <= min_size_to_sample``
  (free until the table is filled) or ``(inserts + k) * samples_per_insert - samples <=
  max_diff`` (``RateLimiter::CanInsert``);
- a single ``error_buffer`` gives ``[offset - error_buffer, offset + error_buffer]`` with
  ``offset = samples_per_insert * min_size_to_sample``, so the ratio is kept over the
  items inserted after the first ``min_size_to_sample``; a pair is used as is.

Reverb blocks a caller until its operation is allowed; here the caller asks first:
the learner runs :meth:`SampleToInsertRatio.updates_allowed` learn calls, actors (or the
buffer worker on their behalf) wait while :meth:`SampleToInsertRatio.insert_allowed` is
False. One difference: Reverb checks every item of a batch; learners here sample whole
batches, so ``updates_allowed`` also refuses an allowed range narrower than one batch
plus one insert (where neither side could ever move: a deadlock).
"""

from __future__ import annotations

import math

TOLERANCE_RATE = 0.1
"""Acme's default ``samples_per_insert_tolerance_rate`` (e.g. ``acme/agents/jax/dqn``):
``error_buffer = min_size_to_sample * samples_per_insert * 0.1``."""


class SampleToInsertRatio:
    """Keeps ``samples / inserts`` near ``samples_per_insert`` once ``min_size_to_sample`` is in.

    Args:
      samples_per_insert: items sampled per item inserted (> 0).
      min_size_to_sample: items held before any sample (>= 1).
      error_buffer: half-width of the allowed ``diff`` range around the offset, or the
        range ``(min_diff, max_diff)`` itself.

    Raises:
      ValueError: as Reverb's constructor: ``samples_per_insert`` <= 0,
        ``min_size_to_sample`` < 1, a range narrower than ``2 * max(1, samples_per_insert)``,
        or ``min_diff > samples_per_insert * min_size_to_sample`` (a certain deadlock).
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int,
                 error_buffer: float | tuple[float, float]):
        if not samples_per_insert > 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert}")
        if min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be >= 1, got {min_size_to_sample}")
        offset = samples_per_insert * min_size_to_sample
        if isinstance(error_buffer, (int, float)):
            min_diff, max_diff = offset - error_buffer, offset + error_buffer
        else:
            min_diff, max_diff = (float(x) for x in error_buffer)
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise ValueError(f"error_buffer {error_buffer} gives a range narrower than 2 * "
                             f"max(1, samples_per_insert={samples_per_insert})")
        if min_diff > offset:
            raise ValueError(f"error_buffer {error_buffer}: min_diff {min_diff} is above "
                             f"samples_per_insert * min_size_to_sample = {offset} (deadlock)")
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.min_diff, self.max_diff = float(min_diff), float(max_diff)
        self.inserts = self.samples = self.deletes = 0

    @classmethod
    def from_spec(cls, spec, error_buffer: float | None = None) -> "SampleToInsertRatio":
        """From a ``ReplaySpec``: ``replay_ratio``, ``min_fill``, and by default Acme's
        error buffer widened to at least one batch plus one insert (see the module doc)."""
        if error_buffer is None:
            error_buffer = max(spec.min_fill * spec.replay_ratio * TOLERANCE_RATE,
                               spec.batch_size + spec.replay_ratio)
        return cls(spec.replay_ratio, spec.min_fill, error_buffer)

    @property
    def diff(self) -> float:
        """``inserts * samples_per_insert - samples``."""
        return self.inserts * self.samples_per_insert - self.samples

    def _count(self, what: str, n: int) -> int:
        if n < 0 or int(n) != n:
            raise ValueError(f"{what}: n must be a non-negative integer, got {n}")
        return int(n)

    def inserted(self, n: int) -> None:
        """Record ``n`` items inserted."""
        self.inserts += self._count("inserted", n)

    def sampled(self, n: int) -> None:
        """Record ``n`` items sampled (``batch_size`` per learn call)."""
        self.samples += self._count("sampled", n)

    def deleted(self, n: int) -> None:
        """Record ``n`` items removed (unneeded for a ring buffer with ``capacity >=
        min_size_to_sample``: once full it never holds fewer)."""
        self.deletes += self._count("deleted", n)

    def updates_allowed(self, batch_size: int) -> int:
        """Learn calls of ``batch_size`` items each that may run now (0 below min fill).

        Raises:
          ValueError: ``batch_size`` < 1, or an allowed range narrower than
            ``batch_size + samples_per_insert`` (inserts and samples would both block).
        """
        if batch_size < 1:
            raise ValueError(f"updates_allowed: batch_size must be >= 1, got {batch_size}")
        if self.max_diff - self.min_diff < batch_size + self.samples_per_insert:
            raise ValueError(
                f"updates_allowed: the allowed range [{self.min_diff}, {self.max_diff}] is "
                f"narrower than batch_size={batch_size} + samples_per_insert="
                f"{self.samples_per_insert}: inserts and samples would deadlock")
        if self.inserts - self.deletes < self.min_size_to_sample:
            return 0
        return max(0, math.floor((self.diff - self.min_diff) / batch_size))

    def insert_allowed(self, n: int = 1) -> bool:
        """Whether ``n`` more items may be inserted now (False: samples lag too far behind)."""
        n = self._count("insert_allowed", n)
        if self.inserts + n - self.deletes <= self.min_size_to_sample:
            return True
        return (self.inserts + n) * self.samples_per_insert - self.samples <= self.max_diff

    @property
    def achieved_ratio(self) -> float:
        """``samples / (inserts - min_size_to_sample)``: the ratio over the items inserted
        after the first ``min_size_to_sample`` (0 before), which the offset range controls."""
        after = self.inserts - self.min_size_to_sample
        return self.samples / after if after > 0 else 0.0

    def state_dict(self) -> dict[str, int]:
        """The counters (Reverb checkpoints them too)."""
        return {"inserts": self.inserts, "samples": self.samples, "deletes": self.deletes}

    def load_state_dict(self, d: dict) -> None:
        """Restore :meth:`state_dict`'s counters."""
        self.inserts, self.samples, self.deletes = (int(d[k]) for k in
                                                    ("inserts", "samples", "deletes"))

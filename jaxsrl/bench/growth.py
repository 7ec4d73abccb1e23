"""Sustained memory growth against a count of events (requests, segments, updates).

A leak of the kind long runs show (a reference kept per request or per step) makes a
process's resident memory grow in proportion to the work done, not to the time taken, so
growth is fitted against an event count: the verdict is the same on an idle and on a
loaded machine. :func:`growth` calls growth sustained when both the least-squares fit of
RSS against events over the sampled span and the rise of the last third's median over
the first third's exceed a bound: a one-off step (a cache filled once) moves the medians
but not a long linear fit much, and noise moves neither. Pure Python, no JAX.
"""

from __future__ import annotations

import statistics
from typing import Sequence


def growth(events: Sequence[float], rss: Sequence[float], max_bytes: float) -> dict:
    """Fit ``rss`` (bytes) against ``events`` (cumulative counts, one per sample).

    Returns ``{"bytes_per_event", "fitted_bytes", "median_rise_bytes", "sustained"}``:
    the least-squares slope, slope x (last - first event), the last third's median RSS
    minus the first third's, and whether both exceed ``max_bytes``.

    Raises:
      ValueError: fewer than 3 samples, lengths that differ, or events not increasing.
    """
    n = len(events)
    if n < 3 or len(rss) != n:
        raise ValueError(f"need >= 3 samples of events and rss of one length, got {n} and {len(rss)}")
    if any(b <= a for a, b in zip(events, events[1:])):
        raise ValueError(f"events must increase, got {list(events)}")
    mx, my = sum(events) / n, sum(rss) / n
    slope = (sum((x - mx) * (y - my) for x, y in zip(events, rss))
             / sum((x - mx) ** 2 for x in events))
    fitted = slope * (events[-1] - events[0])
    third = max(1, n // 3)
    rise = statistics.median(rss[-third:]) - statistics.median(rss[:third])
    return {"bytes_per_event": slope, "fitted_bytes": fitted, "median_rise_bytes": rise,
            "sustained": fitted > max_bytes and rise > max_bytes}

"""Episode records that actors attach to segments, cleaned before they reach metrics
(by the trainer and the buffer process, through :class:`~jaxsrl.streams.segment_gate.SegmentGate`).

A segment's meta may carry ``episodes``: a list of ``{"return", "length", "team",
...numeric statistics}`` dicts, one per episode finished in it. They come from actor
processes, so they are checked like any other input: malformed records and values are
ignored, and the statistic names a run accepts are bounded (:data:`MAX_EPISODE_KEYS`),
so a broken or hostile actor cannot grow the metric names without limit.
"""

from __future__ import annotations

import math
from typing import Any

#: episode statistics keys the trainer accepts per run (a bound on metric names).
MAX_EPISODE_KEYS = 256
#: most episode records read from one segment.
MAX_EPISODES_PER_SEGMENT = 4096


class EpisodeFilter:
    """Keeps the well-formed part of each segment's episode records, with a bounded
    set of statistic names per run (the first :data:`MAX_EPISODE_KEYS` seen)."""

    def __init__(self, max_keys: int = MAX_EPISODE_KEYS):
        self.max_keys = max_keys
        self._keys: set = set()

    def __call__(self, episodes: Any) -> list[dict]:
        """Well-formed episode records of a segment (others are ignored).

        Args:
          episodes: the segment meta's ``episodes`` value, as received.

        Returns:
          One dict per well-formed record: finite int/float statistics with string keys
          of at most 128 characters, plus ``team`` if it is a string of at most 64.
        """
        if not isinstance(episodes, list):
            return []
        out = []
        for episode in episodes[:MAX_EPISODES_PER_SEGMENT]:
            if not isinstance(episode, dict):
                continue
            clean = {}
            for key, value in episode.items():
                if key == "team":
                    if isinstance(value, str) and len(value) <= 64:
                        clean[key] = value
                    continue
                if (type(value) not in (int, float) or not math.isfinite(value)
                        or not isinstance(key, str) or len(key) > 128):
                    continue
                if key not in self._keys:
                    if len(self._keys) >= self.max_keys:
                        continue  # bounded metric names, whatever actors send
                    self._keys.add(key)
                clean[key] = value
            out.append(clean)
        return out

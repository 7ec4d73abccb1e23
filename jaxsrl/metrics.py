"""Training metrics: a thread-safe accumulator and the ``metrics.jsonl`` writer.

Each logging interval produces one JSON object (one line of ``LOGDIR/metrics.jsonl``)
with at least: ``env_steps`` (environment frames so far), ``fps`` (frames/s over the
interval), ``episode_return_mean`` (episodes finished in the interval),
``policy_version``, ``staleness_mean`` (learner version minus the version that chose
each action, over the samples learned in the interval), ``wall_time_s`` and the
learner's losses (averaged over the interval's updates).
"""

from __future__ import annotations

import collections
import json
import math
import os
import threading
import time
from typing import Any


class MetricsAccumulator:
    """Counters and running sums shared by the workers of one run."""

    def __init__(self, env_steps: int = 0):
        self._lock = threading.Lock()
        self.env_steps = env_steps
        self.policy_version: dict[str, int] = {}
        self._counters: collections.Counter = collections.Counter()
        self._reset_interval()

    def _reset_interval(self) -> None:
        self._sums: dict[str, float] = collections.defaultdict(float)
        self._counts: dict[str, int] = collections.defaultdict(int)
        self._interval_steps = 0

    def add_env_steps(self, n: int) -> None:
        with self._lock:
            self.env_steps += n
            self._interval_steps += n

    def add_episode(self, episode: dict, suffix: str = "") -> None:
        """Record one finished episode: ``{"return", "length", ...numeric extras}``."""
        with self._lock:
            for key, value in episode.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    name = {"return": "episode_return_mean",
                            "length": "episode_length_mean"}.get(key, f"episode/{key}")
                    self._sums[name + suffix] += value
                    self._counts[name + suffix] += 1
            self._counters["episodes" + suffix] += 1

    def add_means(self, values: dict, prefix: str = "") -> None:
        """Add values averaged over the interval (e.g. the learner's losses)."""
        with self._lock:
            for key, value in values.items():
                self._sums[prefix + key] += float(value)
                self._counts[prefix + key] += 1

    def count(self, key: str, n: int = 1) -> None:
        """Increase a run-long counter (e.g. ``actor_restarts``, ``dropped_messages``)."""
        with self._lock:
            self._counters[key] += n

    def set_version(self, policy: str, version: int) -> None:
        with self._lock:
            self.policy_version[policy] = version

    def snapshot(self, elapsed_s: float) -> dict:
        """Close the interval of ``elapsed_s`` seconds and return its metrics."""
        with self._lock:
            out: dict[str, Any] = {"env_steps": self.env_steps,
                                   "fps": self._interval_steps / max(elapsed_s, 1e-9)}
            for key, total in self._sums.items():
                out[key] = total / self._counts[key]
            out.update(self._counters)
            versions = list(self.policy_version.values())
            out["policy_version"] = max(versions) if versions else 0
            if len(self.policy_version) > 1:
                out.update({f"policy_version/{k}": v for k, v in self.policy_version.items()})
            self._reset_interval()
            return out


class MetricsWriter:
    """Appends one JSON object per interval to ``LOGDIR/metrics.jsonl``."""

    def __init__(self, logdir: str):
        self.path = os.path.join(logdir, "metrics.jsonl")
        self._file = open(self.path, "a", buffering=1)

    def write(self, record: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")

    def close(self) -> None:
        self._file.close()


def console_line(record: dict) -> str:
    """One human-readable line for the console."""
    parts = [f"steps {record['env_steps']:>9,}", f"fps {record['fps']:>8,.0f}",
             f"v {record['policy_version']:>5}"]
    if "episode_return_mean" in record:
        parts.append(f"return {record['episode_return_mean']:8.2f}")
    for key in ("staleness_mean", "loss/total", "approx_kl"):
        if key in record:
            parts.append(f"{key.split('/')[-1]} {record[key]:.3g}")
    parts.append(f"t {record['wall_time_s']:6.1f}s")
    return "  ".join(parts)


class Clock:
    """Wall-clock seconds since the run started."""

    def __init__(self):
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start

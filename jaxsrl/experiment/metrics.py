"""Training metrics: the thread-safe accumulator the workers of a run share, and the
run's clock. The log sinks (``metrics.jsonl``, TensorBoard, W&B, the progress bar) are
in :mod:`jaxsrl.experiment.metrics_writer` (re-exported here).

Each logging interval produces one JSON object (one line of ``LOGDIR/metrics.jsonl``)
with at least: ``env_steps`` (environment frames so far), ``fps`` (frames/s over the
interval), ``episode_return_mean`` (the mean return of the last :data:`EPISODE_WINDOW`
finished episodes, whenever they finished: see :class:`MetricsAccumulator`),
``policy_version``, ``staleness_mean`` (learner version minus the version that chose
each action, over the samples learned in the interval), ``wall_time_s`` and the
learner's losses (averaged over the interval's updates).

Per-stage timers (milliseconds; like Cleanba's queue get/put times) come with them:
``learner/update_ms`` (one update: batch to device, ``learn``, publish),
``learner/batch_wait_ms`` (the learner waiting for its next batch to fill; with
several learner processes, the lockstep gate too),
``learner/publish_ms`` (handing new parameters to the co-located servers),
``param_stream/publish_ms`` (a version copied to host and sent to remote servers),
and ``inference/latency_ms_p50`` / ``_p99`` (a batch of requests, from noticing the
first to the last reply sent; with remote servers, the mean over their status
intervals of each interval's percentile); ``inference/batches`` counts the batches.
"""

from __future__ import annotations

import collections
import math
import os
import random
import threading
import time
from typing import Any

import numpy as np

from jaxsrl.experiment.metrics_writer import (  # noqa: F401  (re-exported: one import for users)
    MetricsWriter, ProgressBar, console_line, format_duration, numeric_items, return_text,
    returns_of)


#: percentiles reported for :meth:`MetricsAccumulator.add_sample` keys.
PERCENTILES = (50, 99)
#: most samples kept per key and interval (a uniform reservoir beyond that).
MAX_SAMPLES = 8192
#: finished episodes the episode statistics of a record average (the last ones, per key),
#: as SB3's ``ep_rew_mean`` and Sample Factory's stats window; a constant, not a flag: it
#: only smooths what ``--target_return`` and the curves read.
EPISODE_WINDOW = 100


class MetricsAccumulator:
    """Counters, running sums and sampled distributions shared by the workers of one run.

    Thread-safe. Each :meth:`snapshot` closes a logging interval: means and
    percentiles are of the interval, counters are run-long, and the episode statistics
    (``episode_return_mean``, ``episode_length_mean``, ``episode/<stat>``, each also with
    a ``/<team>`` suffix) are the means of the last :data:`EPISODE_WINDOW` finished
    episodes that reported that key, so they do not depend on the logging interval.
    """

    def __init__(self, env_steps: int = 0):
        self._lock = threading.Lock()
        self.env_steps = env_steps
        self.policy_version: dict[str, int] = {}
        self._counters: collections.Counter = collections.Counter()
        self._rng = random.Random(0)
        # per record key: the values of the last EPISODE_WINDOW episodes (never reset)
        self._windows: dict[str, collections.deque] = {}
        self._reset_interval()

    def _reset_interval(self) -> None:
        self._sums: dict[str, float] = collections.defaultdict(float)
        self._counts: dict[str, int] = collections.defaultdict(int)
        self._samples: dict[str, list] = collections.defaultdict(list)
        self._seen: dict[str, int] = collections.defaultdict(int)
        self._interval_steps = 0

    def add_env_steps(self, n: int) -> None:
        with self._lock:
            self.env_steps += n
            self._interval_steps += n

    def _window(self, name: str) -> collections.deque:
        window = self._windows.get(name)
        if window is None:
            window = self._windows[name] = collections.deque(maxlen=EPISODE_WINDOW)
        return window

    def add_episode(self, episode: dict, suffix: str = "") -> None:
        """Record one finished episode: ``{"return", "length", ...numeric extras}``.

        Each numeric value enters the window of its record key (``return`` ->
        ``episode_return_mean``, ``length`` -> ``episode_length_mean``, ``x`` ->
        ``episode/x``; each with ``suffix``, e.g. ``"/hider"``); the run-long counter
        ``episodes<suffix>`` goes up by one. Booleans, non-finite numbers and other
        values are ignored (a NaN would otherwise stay in the window for
        :data:`EPISODE_WINDOW` episodes).
        """
        with self._lock:
            for key, value in episode.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value):
                    name = {"return": "episode_return_mean",
                            "length": "episode_length_mean"}.get(key, f"episode/{key}")
                    self._window(name + suffix).append(float(value))
            self._counters["episodes" + suffix] += 1

    def add_episodes(self, returns: Any, lengths: Any) -> None:
        """Record finished episodes given as arrays, in the order they finished (device
        actors: :func:`jaxsrl.workers.device.rollout.finished_episodes`): the same record
        as one :meth:`add_episode` ``({"return": r, "length": n})`` per pair, in order
        (non-finite values ignored; the counter ``episodes`` goes up by ``E``).

        Args:
          returns: ``[E]`` returns (any real dtype; 1-D array-like).
          lengths: ``[E]`` lengths in env steps (any real dtype).

        Raises:
          ValueError: ``returns`` or ``lengths`` not 1-D, or of different lengths.
        """
        returns = np.asarray(returns, np.float64)
        lengths = np.asarray(lengths, np.float64)
        if returns.ndim != 1 or returns.shape != lengths.shape:
            raise ValueError(f"add_episodes: returns {returns.shape} and lengths "
                             f"{lengths.shape} must be 1-D arrays of one length")
        if not returns.size:
            return
        with self._lock:
            # only the newest EPISODE_WINDOW can stay in the window
            for name, values in (("episode_return_mean", returns),
                                 ("episode_length_mean", lengths)):
                values = values[np.isfinite(values)]
                if values.size:
                    self._window(name).extend(values[-EPISODE_WINDOW:].tolist())
            self._counters["episodes"] += int(returns.size)

    def add_means(self, values: dict, prefix: str = "") -> None:
        """Add values averaged over the interval (e.g. the learner's losses)."""
        with self._lock:
            for key, value in values.items():
                self._sums[prefix + key] += float(value)
                self._counts[prefix + key] += 1

    def add_sums(self, sums: dict, count: int) -> None:
        """Add values averaged over the interval given as sums of ``count`` samples each
        (device actors sum on the accelerator): the same record as ``count`` calls of
        :meth:`add_means` whose values add up to ``sums``; nothing if ``count`` <= 0."""
        if count <= 0:
            return
        with self._lock:
            for key, total in sums.items():
                self._sums[key] += float(total)
                self._counts[key] += int(count)

    def add_sample(self, key: str, value: float) -> None:
        """Add one observation of a distribution (e.g. one batch's latency in ms); the
        interval's record gets ``<key>_p50`` and ``<key>_p99`` (:data:`PERCENTILES`),
        over at most :data:`MAX_SAMPLES` observations drawn uniformly from it."""
        with self._lock:
            seen = self._seen[key] = self._seen[key] + 1
            samples = self._samples[key]
            if len(samples) < MAX_SAMPLES:
                samples.append(float(value))
            else:  # reservoir sampling (Vitter's algorithm R)
                j = self._rng.randrange(seen)
                if j < MAX_SAMPLES:
                    samples[j] = float(value)

    def count(self, key: str, n: int = 1) -> None:
        """Increase a run-long counter (e.g. ``actor_restarts``, ``dropped_messages``)."""
        with self._lock:
            self._counters[key] += n

    def counter(self, key: str) -> int:
        """The run-long counter ``key`` (0 if it was never counted)."""
        with self._lock:
            return self._counters[key]

    def set_version(self, policy: str, version: int) -> None:
        with self._lock:
            self.policy_version[policy] = version

    def window_mean(self, key: str) -> float | None:
        """The current mean of record key ``key``'s episode window (e.g.
        ``"episode_return_mean"``), as the next :meth:`snapshot` would give it, without
        closing the interval; ``None`` before any episode reported it."""
        with self._lock:
            window = self._windows.get(key)
            return sum(window) / len(window) if window else None

    def snapshot(self, elapsed_s: float) -> dict:
        """Close the interval of ``elapsed_s`` seconds and return its metrics."""
        with self._lock:
            out: dict[str, Any] = {"env_steps": self.env_steps,
                                   "fps": self._interval_steps / max(elapsed_s, 1e-9)}
            for key, total in self._sums.items():
                out[key] = total / self._counts[key]
            for key, window in self._windows.items():
                out[key] = sum(window) / len(window)
            for key, samples in self._samples.items():
                ordered = sorted(samples)
                for q in PERCENTILES:
                    out[f"{key}_p{q}"] = _percentile(ordered, q)
            out.update(self._counters)
            versions = list(self.policy_version.values())
            out["policy_version"] = max(versions) if versions else 0
            if len(self.policy_version) > 1:
                out.update({f"policy_version/{k}": v for k, v in self.policy_version.items()})
            self._reset_interval()
            return out


def _percentile(ordered: list, q: float) -> float:
    """``q``-th percentile (0..100) of sorted values, linear interpolation (NumPy's default)."""
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class PolicyMetrics:
    """The accumulator as one policy's learner sees it when a run has several policies:
    its learner metrics (``add_means`` without a prefix: ``loss/total``, ``entropy``,
    ``learning_rate``, ``staleness_mean``, ...) are recorded twice, as the mean over
    the policies under their own name and as ``<name>/<policy>`` (``loss/total/hider``);
    everything else goes to the shared accumulator unchanged.

    Args:
      base: the run's :class:`MetricsAccumulator`.
      policy: the policy's name.
    """

    def __init__(self, base: MetricsAccumulator, policy: str):
        self._base, self.policy = base, policy

    def add_means(self, values: dict, prefix: str = "") -> None:
        self._base.add_means(values, prefix)
        if not prefix:
            self._base.add_means({f"{k}/{self.policy}": v for k, v in values.items()})

    def __getattr__(self, name: str) -> Any:  # env_steps, add_episode, count, set_version, ...
        return getattr(self._base, name)


def _process_age_s() -> float:
    """Seconds since this OS process was launched (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of proc(5): starttime, ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Clock:
    """Wall-clock seconds since the training process was launched (``wall_time_s``).

    Counted from the OS process's start, so Python start-up, imports and compilation are
    included: "time from launch", as one compares frameworks by.
    """

    def __init__(self):
        self.start = time.monotonic() - _process_age_s()

    def __call__(self) -> float:
        return time.monotonic() - self.start

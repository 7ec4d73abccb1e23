"""Admission of the sample stream's segments into a buffer process.

The same rules as the trainer's (``jaxsrl/workers/learner/trainer.py``, which the buffer
worker does not import: workers meet through streams): a message must be a ``segment``
of this run's schema (:func:`jaxsrl.streams.segment.segment_schema`) with 1..``max_rows``
rows, from a live run of a known actor, with ``env_steps`` in ``0..rows*T`` and action
versions in ``0..newest + VERSION_SLACK``; NaN or Inf in its float arrays drops it (or
raises :class:`NonFiniteSegment`). Episode records are cleaned as the trainer cleans
them (numbers and a short ``team`` string, at most :data:`MAX_EPISODE_KEYS` names).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable, DropLog, drop_input, nonfinite_arrays
from jaxsrl.streams.segment import segment_schema

log = logging.getLogger("jaxsrl.buffer")
MAX_EPISODE_KEYS = 256
VERSION_SLACK = 64
"""Action versions may be this far ahead of the newest learner version the buffer has
heard of: versions reach the actors through the inference servers and this process
through the trainer's requests, two paths with no common order."""
_TIMING_KEYS = ("env_s", "wait_s")


class NonFiniteSegment(RuntimeError):
    """A segment held NaN or Inf and the run is configured with ``on_nonfinite="raise"``."""


class SegmentGate:
    """Checks segments; counts drops in ``metrics`` under the trainer's counter names.

    Args:
      observation_space, action_space, T, carry, idle_rows: the segments' schema
        (:func:`~jaxsrl.streams.segment.segment_schema`).
      max_rows: most rows per segment.
      table: the run's actors (``None``: any ids accepted).
      metrics: a :class:`~jaxsrl.experiment.metrics.MetricsAccumulator`.
      on_nonfinite: ``"drop"`` or ``"raise"``.
      max_staleness: drop segments whose oldest action is more than this many versions
        behind the newest known learner version (0: keep all).
    """

    def __init__(self, observation_space, action_space, T: int, carry: Any, idle_rows: bool,
                 max_rows: int, table: ActorTable | None, metrics: Any, on_nonfinite: str = "drop",
                 max_staleness: int = 0, name: str = "buffer"):
        self.schema = segment_schema(observation_space, action_space, T, carry, idle_rows)
        self.T, self.max_rows, self.table, self.metrics = T, max_rows, table, metrics
        self.on_nonfinite, self.max_staleness, self.name = on_nonfinite, max_staleness, name
        row_bytes = [math.prod(s.shape[1:]) * np.dtype(s.dtype).itemsize
                     for s in self.schema.values()]
        self.max_bytes = max(1, max_rows * sum(row_bytes))
        self.max_frame_bytes = max(wire.MAX_HEADER_BYTES, max_rows * max(row_bytes))
        self.floats = [k for k in self.schema if not k.startswith("carry/")
                       and k not in ("action", "terminated", "truncated", "version", "valid")]
        self.version = 0  # newest learner version heard of
        self._keys: set = set()
        self._drop_log = DropLog(log, "segment")

    def _validate(self, frames: list) -> wire.Message:
        msg = wire.decode(frames, max_bytes=self.max_bytes)
        if msg.kind != "segment":
            raise wire.WireError(f"expected a 'segment', got kind {msg.kind!r}")
        actor = self.table.check(msg.meta) if self.table is not None else None
        n = wire.check_rows(msg.arrays, self.schema, "segment")
        if not 1 <= n <= self.max_rows:
            raise wire.WireError(f"segment of {n} rows; this buffer takes 1..{self.max_rows}")
        env_steps = msg.meta.get("env_steps", 0)
        if type(env_steps) is not int or not 0 <= env_steps <= n * self.T:  # noqa: E721
            raise wire.WireError(f"meta 'env_steps'={env_steps!r} is not an integer in "
                                 f"0..{n * self.T} (rows x T)")
        version = msg.arrays["version"]
        lo, hi = int(version.min()), int(version.max())
        if lo < 0 or hi > self.version + VERSION_SLACK:
            raise wire.WireError(f"action versions {lo}..{hi} outside 0..{self.version} + "
                                 f"{VERSION_SLACK} (the learner's newest known version)")
        if actor is not None:
            self.table.seen(actor)
        return msg

    def episodes(self, episodes: Any) -> list:
        """Well-formed episode records of a segment's meta (others are ignored)."""
        if not isinstance(episodes, list):
            return []
        out = []
        for episode in episodes[:4096]:
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
                    if len(self._keys) >= MAX_EPISODE_KEYS:
                        continue
                    self._keys.add(key)
                clean[key] = value
            out.append(clean)
        return out

    def admit(self, frames: list) -> tuple[dict, list] | None:
        """``(arrays, episodes)`` of an acceptable segment, else ``None`` (counted).

        Counts env steps (``metrics.add_env_steps``) and actor timings of every valid
        segment, dropped for staleness or not, as the trainer does.

        Raises:
          NonFiniteSegment: NaN or Inf with ``on_nonfinite="raise"``.
        """
        try:
            msg = self._validate(frames)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep serving)
            drop_input(self._drop_log, self.name, exc, self.metrics, "dropped_segments",
                       "stale_run_segments_dropped")
            return None
        meta = msg.meta
        bad = nonfinite_arrays(msg.arrays, self.floats)
        if bad:
            reason = f"segment from actor {meta.get('actor')!r} holds NaN or Inf in {bad}"
            if self.on_nonfinite == "raise":
                raise NonFiniteSegment(f"{self.name}: {reason} (on_nonfinite='raise')")
            self._drop_log(self.name, reason)
            self.metrics.count("nonfinite_segments_dropped")
            return None
        self.metrics.add_env_steps(meta.get("env_steps", 0))
        if type(meta.get("failovers")) is int and 0 < meta["failovers"] < 2**31:  # noqa: E721
            self.metrics.count("inference_failovers", meta["failovers"])
        timing = meta.get("timing")
        if isinstance(timing, dict):
            self.metrics.add_means({k: timing[k] for k in _TIMING_KEYS
                                    if type(timing.get(k)) is float and math.isfinite(timing[k])},
                                   prefix="actor/")
        episodes = self.episodes(meta.get("episodes"))
        oldest = int(msg.arrays["version"].min())
        if self.max_staleness and self.version - oldest > self.max_staleness:
            self.metrics.count("stale_segments_dropped")
            return None
        return msg.arrays, episodes

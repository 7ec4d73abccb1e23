"""Admission of the sample stream's segments: one set of rules for every receiver.

The trainer (``jaxsrl/workers/learner/trainer.py``) and the buffer process
(``jaxsrl/workers/buffer/``) take segments from actors they do not trust. A message is
admitted when it is a ``segment`` of the run's schema
(:func:`jaxsrl.streams.segment.segment_schema`; final observations sparse, rebuilt dense
by :func:`jaxsrl.streams.segment.dense_segment`, or dense; observations packed by
:mod:`jaxsrl.streams.obs_pack` are rebuilt as their float32 leaves first, so every check
below sees the schema's arrays) with 1..``max_rows`` rows, from a live
run of a known actor (:class:`~jaxsrl.streams.admission.ActorTable`), with
``env_steps`` in ``0..rows*T`` and action versions in ``0..version + version_slack``
(``version``: the newest learner version the receiver knows). A malformed message is
dropped, counted (``dropped_segments``, ``stale_run_segments_dropped``) and recorded
(:class:`~jaxsrl.streams.admission.DropLog`). A segment holding NaN or Inf in a float
array is dropped and counted (``nonfinite_segments_dropped``), or raises
:class:`NonFiniteSegment` under ``on_nonfinite="raise"``.

Every admitted segment's env steps, actor server switches (``inference_failovers``),
agent episodes the actor discarded (``episodes_discarded``: their physics failed) and
actor timings (``actor/env_s``, ``actor/wait_s``) are counted, and its episode records
cleaned (:class:`~jaxsrl.streams.episodes.EpisodeFilter`); what a receiver does after
that (staleness, batches, replay) is its own.

This module imports no JAX.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from jaxsrl.streams import obs_pack, wire
from jaxsrl.streams.admission import ActorTable, DropLog, drop_input, nonfinite_arrays
from jaxsrl.streams.episodes import EpisodeFilter
from jaxsrl.streams.segment import dense_segment, is_final

TIMING_KEYS = ("env_s", "wait_s")
_NOT_FLOAT = ("action", "terminated", "truncated", "version", "valid")


class NonFiniteSegment(RuntimeError):
    """A segment held NaN or Inf and the run is configured with ``on_nonfinite="raise"``."""


class SegmentGate:
    """Checks and counts segments (module docstring).

    Args:
      schema: the segments' arrays, ``name -> ArraySpec`` with a leading rows axis
        (:func:`~jaxsrl.streams.segment.segment_schema`).
      T: steps per segment.
      max_rows: most rows per segment (``None``: limited by the wire cap only).
      table: the run's actors (``None``: any integer ids accepted).
      metrics: a :class:`~jaxsrl.experiment.metrics.MetricsAccumulator` (duck-typed).
      on_nonfinite: ``"drop"`` or ``"raise"``.
      name: the receiver's name (logs, errors).
      logger: where drops are logged.
      version_slack: how far ahead of ``version`` action versions may be (0 for the
        trainer, which publishes them; more where versions arrive by another path).
      nonfinite_error: the :class:`NonFiniteSegment` subclass raised under ``"raise"``.

    Attributes:
      version: the newest learner version the receiver knows; its owner keeps it current.
      drops: the :class:`~jaxsrl.streams.admission.DropLog` (``recent()``: why).
      max_bytes, max_frame_bytes: the largest message and frame of ``max_rows`` rows
        (for the receiving socket's cap; ``-1``: none).
    """

    def __init__(self, schema: dict, T: int, max_rows: int | None, table: ActorTable | None,
                 metrics: Any, on_nonfinite: str = "drop", name: str = "trainer",
                 logger: logging.Logger | None = None, version_slack: int = 0,
                 nonfinite_error: type = NonFiniteSegment):
        self.schema, self.T, self.max_rows, self.table = schema, T, max_rows, table
        self.metrics, self.on_nonfinite, self.name = metrics, on_nonfinite, name
        self.version_slack, self.version = version_slack, 0
        self.nonfinite_error = nonfinite_error
        row_bytes = [math.prod(s.shape[1:]) * np.dtype(s.dtype).itemsize for s in schema.values()]
        if any(is_final(k) for k in schema):  # sparse final obs: at most T int32 indices a row
            row_bytes.append(T * 4)
        # packed observations join every obs leaf in one frame (obs#f, final_obs#f)
        packed = obs_pack.packed_row_bytes(
            math.prod(s.shape[1:]) for k, s in schema.items() if k == "obs" or k.startswith("obs/"))
        if max_rows is None:
            self.max_bytes, self.max_frame_bytes = wire.DEFAULT_MAX_BYTES, -1
        else:
            self.max_bytes = max(1, max_rows * sum(row_bytes))
            self.max_frame_bytes = max(wire.MAX_HEADER_BYTES, max_rows * max(*row_bytes, packed))
        # observation leaves (name -> (dtype, per-row shape)) for packed observations
        self._obs_leaves = {k: (s.dtype, tuple(s.shape[2:])) for k, s in schema.items()
                            if k == "obs" or k.startswith("obs/")}
        self.floats = [k for k in schema if not k.startswith("carry/") and k not in _NOT_FLOAT]
        self.drops = DropLog(logger or logging.getLogger("jaxsrl.segments"), "segment")
        self.episodes = EpisodeFilter()

    def validate(self, frames: list) -> wire.Message:
        """Decode and check one message (the rules of the module docstring); a sparse
        segment's final observations come back dense (``msg.arrays`` as the schema has it).

        Raises:
          WireError (its ``StaleRunError`` for a previous run's message): why it is refused.
        """
        msg = wire.decode(frames, max_bytes=self.max_bytes)
        if msg.kind != "segment":
            raise wire.WireError(f"expected a 'segment', got kind {msg.kind!r}")
        actor = self.table.check(msg.meta) if self.table is not None else None
        arrays = msg.arrays
        if obs_pack.META in msg.meta:  # packed observations: their float32 leaves, bit for bit
            arrays = obs_pack.unpack(arrays, msg.meta, self._obs_leaves)
        arrays, n = dense_segment(arrays, self.schema, "segment")
        msg = msg._replace(arrays=arrays)
        if n == 0 or (self.max_rows is not None and n > self.max_rows):
            raise wire.WireError(f"segment of {n} rows; {self.name} takes 1..{self.max_rows}")
        env_steps = msg.meta.get("env_steps", 0)
        if type(env_steps) is not int or not 0 <= env_steps <= n * self.T:  # noqa: E721
            raise wire.WireError(f"meta 'env_steps'={env_steps!r} is not an integer in "
                                 f"0..{n * self.T} (rows x T)")
        version = msg.arrays["version"]
        lo, hi = int(version.min()), int(version.max())
        if lo < 0 or hi > self.version + self.version_slack:
            slack = f" + {self.version_slack}" if self.version_slack else ""
            raise wire.WireError(f"action versions {lo}..{hi} outside 0..{self.version}{slack} "
                                 f"(the learner's newest known version)")
        if actor is not None:
            self.table.seen(actor)
        return msg

    def admit(self, frames: list) -> tuple[wire.Message, list[dict]] | None:
        """``(message, cleaned episode records)`` of an acceptable segment, after counting
        its env steps, failovers and actor timings; ``None`` if it was dropped (counted).

        Raises:
          NonFiniteSegment: (``nonfinite_error``) NaN or Inf under ``on_nonfinite="raise"``.
        """
        try:
            msg = self.validate(frames)
        except Exception as exc:  # noqa: BLE001  (any bad input: drop it, keep going)
            drop_input(self.drops, self.name, exc, self.metrics, "dropped_segments",
                       "stale_run_segments_dropped")
            return None
        meta = msg.meta
        bad = nonfinite_arrays(msg.arrays, self.floats)
        if bad:
            reason = f"segment from actor {meta.get('actor')!r} holds NaN or Inf in {bad}"
            if self.on_nonfinite == "raise":
                raise self.nonfinite_error(f"{self.name}: {reason} (on_nonfinite='raise')")
            self.drops(self.name, reason)
            self.metrics.count("nonfinite_segments_dropped")
            return None
        self.metrics.add_env_steps(meta.get("env_steps", 0))
        if type(meta.get("failovers")) is int and 0 < meta["failovers"] < 2**31:  # noqa: E721
            self.metrics.count("inference_failovers", meta["failovers"])  # actors' server switches
        discarded = meta.get("episodes_discarded")
        if type(discarded) is int and 0 < discarded < 2**31:  # noqa: E721
            self.metrics.count("episodes_discarded", discarded)  # not in the returns
        timing = meta.get("timing")
        if isinstance(timing, dict):
            self.metrics.add_means({k: timing[k] for k in TIMING_KEYS
                                    if type(timing.get(k)) is float and math.isfinite(timing[k])},
                                   prefix="actor/")
        return msg, self.episodes(meta.get("episodes"))

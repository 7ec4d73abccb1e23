"""Admission of the sample stream's segments into a buffer process.

The rules are the trainer's, from the one place that holds them
(:class:`jaxsrl.streams.segment_gate.SegmentGate`). Two things differ here:

* action versions may run up to :data:`VERSION_SLACK` ahead of the newest learner
  version the buffer has heard of;
* with ``max_staleness`` a segment whose oldest action is too old is dropped here
  (``stale_segments_dropped``), as the trainer drops it before batching.
"""

from __future__ import annotations

import logging
from typing import Any

from jaxsrl.streams import segment_gate
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.segment import segment_schema
from jaxsrl.streams.segment_gate import NonFiniteSegment  # noqa: F401  (re-exported)

log = logging.getLogger("jaxsrl.buffer")
VERSION_SLACK = 64
"""Action versions may be this far ahead of the newest learner version the buffer has
heard of: versions reach the actors through the inference servers and this process
through the trainer's requests, two paths with no common order."""


class SegmentGate(segment_gate.SegmentGate):
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
        super().__init__(segment_schema(observation_space, action_space, T, carry, idle_rows), T,
                         max_rows, table, metrics, on_nonfinite, name, log, VERSION_SLACK)
        self.max_staleness = max_staleness

    def admit(self, frames: list) -> tuple[dict, list] | None:
        """``(arrays, episodes)`` of an acceptable segment, else ``None`` (counted).

        Counts env steps (``metrics.add_env_steps``) and actor timings of every valid
        segment, dropped for staleness or not, as the trainer does.

        Raises:
          NonFiniteSegment: NaN or Inf with ``on_nonfinite="raise"``.
        """
        admitted = super().admit(frames)
        if admitted is None:
            return None
        msg, episodes = admitted
        oldest = int(msg.arrays["version"].min())
        if self.max_staleness and self.version - oldest > self.max_staleness:
            self.metrics.count("stale_segments_dropped")
            return None
        return msg.arrays, episodes

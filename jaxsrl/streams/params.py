"""Parameter store: how a co-located learner hands parameters to inference servers.

The learner publishes ``(version, params)`` by swapping one reference; ``params``
stay on device (no host round trip). Readers always see a consistent pair.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, NamedTuple


class Versioned(NamedTuple):
    """Parameters with the learner version (number of updates) that produced them."""

    version: int
    params: Any


class ParameterStore:
    """Latest parameters of each policy, by policy name. Thread-safe."""

    def __init__(self):
        self._latest: dict[str, Versioned] = {}
        self._changed = threading.Condition()

    def publish(self, policy: str, version: int, params: Any) -> None:
        """Make ``params`` (device arrays) the newest of ``policy``."""
        with self._changed:
            self._latest[policy] = Versioned(int(version), params)
            self._changed.notify_all()

    def get(self, policy: str) -> Versioned:
        """Newest parameters of ``policy``.

        Raises:
          KeyError: nothing was published for ``policy`` yet.
        """
        return self._latest[policy]

    def wait_changed(self, seen: Mapping[str, int], timeout: float | None = None) -> bool:
        """Block until a policy of ``seen`` has a version other than ``seen[policy]``
        (``timeout`` s at most); returns whether one has. A policy not published yet
        counts as unchanged. (The parameter stream to remote servers waits here.)"""
        def changed() -> bool:
            return any(p in self._latest and self._latest[p].version != v for p, v in seen.items())

        with self._changed:
            return self._changed.wait_for(changed, timeout)

    def wait_for(self, policy: str, timeout: float | None = None) -> Versioned:
        """Block until ``policy`` has parameters (or ``timeout`` s), then return them."""
        with self._changed:
            self._changed.wait_for(lambda: policy in self._latest, timeout)
            return self._latest[policy]

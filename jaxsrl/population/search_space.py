"""The hyperparameter search space of population-based training, declared in config form.

A search space maps a hyperparameter name to its range::

    {"learning_rate": {"min": 1e-5, "max": 1e-2, "log": True},
     "ent_coef": {"min": 0.0, "max": 0.05},
     "gamma": {"min": 0.9, "max": 0.999}}

Names must be hyperparameters the agent reads from its learner state (its module's
``HYPERPARAMETERS``, e.g. ``agents.ppo.HYPERPARAMETERS``). ``log`` ranges resample
log-uniformly (the usual prior for learning rates), the others uniformly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

_KEYS = ("min", "max", "log")


@dataclasses.dataclass(frozen=True)
class Range:
    """One hyperparameter's closed range ``[min, max]``.

    Attributes:
      min: lower bound (``> 0`` when ``log``).
      max: upper bound, ``> min``.
      log: resample log-uniformly (``exp(U(log min, log max))``) instead of uniformly.
    """

    min: float
    max: float
    log: bool = False

    def clip(self, value: float) -> float:
        """``value`` clipped to ``[min, max]`` (a Python float)."""
        return float(min(max(float(value), self.min), self.max))

    def sample(self, rng: np.random.Generator) -> float:
        """A value drawn from the range: log-uniform when ``log``, else uniform."""
        if self.log:
            return self.clip(math.exp(rng.uniform(math.log(self.min), math.log(self.max))))
        return self.clip(rng.uniform(self.min, self.max))

    def contains(self, value: float) -> bool:
        return self.min <= float(value) <= self.max


SearchSpace = dict[str, Range]


def parse_search_space(spec: Mapping[str, Any], declared: Sequence[str] | None = None,
                       *, where: str = "pbt.search_space") -> SearchSpace:
    """Parse and check a search space in config form (see the module docstring).

    Args:
      spec: ``{name: {"min": float, "max": float, "log": bool (default False)}}``.
      declared: the hyperparameters the agent exposes (``None``: any name).
      where: the config path used in error messages.

    Returns:
      ``{name: Range}`` in the order of ``spec``.

    Raises:
      ValueError: an empty space, a name the agent does not declare, a range that is not
        a mapping, an unknown or missing key, a non-numeric or non-finite bound,
        ``min >= max``, a non-bool ``log``, or ``log`` with ``min <= 0``; the message
        names the offending entry and value.
    """
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"{where}={spec!r} must be a non-empty mapping of hyperparameter "
                         "name to {min, max, log}")
    space: SearchSpace = {}
    for name, entry in spec.items():
        at = f"{where}.{name}"
        if declared is not None and name not in declared:
            raise ValueError(f"{at}: {name!r} is not a hyperparameter the agent reads from its "
                             f"state; valid: {', '.join(declared)}")
        if not isinstance(entry, Mapping):
            raise ValueError(f"{at}={entry!r} must be a mapping with keys min, max (and log)")
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise ValueError(f"{at}: unknown key(s) {unknown}; valid: {', '.join(_KEYS)}")
        for key in ("min", "max"):
            if key not in entry:
                raise ValueError(f"{at}: missing {key!r}")
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"{at}.{key}={value!r} must be a finite number")
        lo, hi, log = float(entry["min"]), float(entry["max"]), entry.get("log", False)
        if not isinstance(log, bool):
            raise ValueError(f"{at}.log={log!r} must be true or false")
        if lo >= hi:
            raise ValueError(f"{at}: min={lo!r} must be below max={hi!r}")
        if log and lo <= 0:
            raise ValueError(f"{at}: min={lo!r} must be > 0 for a log range")
        space[name] = Range(lo, hi, log)
    return space


def sample_hyper(space: SearchSpace, rng: np.random.Generator) -> dict[str, float]:
    """One draw of every hyperparameter from its range: the random-search start of a
    population (Jaderberg et al. 2017, Sec. 3: members start from random hyperparameters)."""
    return {name: r.sample(rng) for name, r in space.items()}

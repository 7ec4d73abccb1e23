"""Population-based training: truncation selection (exploit) and perturbation (explore).

Jaderberg et al. 2017, "Population Based Training of Neural Networks", Sec. 3 (used for
deep RL in Sec. 4.1): when the population is ready (every so many steps, decided by the
runtime), members are ranked by fitness (e.g. the mean episodic return); each member of
the bottom fraction copies the whole learner state of a member of the top fraction
chosen uniformly at random (*exploit*: parameters, optimiser state, normaliser
statistics, counters and hyperparameters), then perturbs the copied hyperparameters
(*explore*): each one is multiplied by 0.8 or 1.2, or, with ``resample_probability``,
drawn afresh from its range, and clipped to the range. Every decision is an
:class:`Event`; :func:`apply` carries it out on learner-state pytrees;
:class:`~jaxsrl.population.lineage.Lineage` records them.

Deviations from the paper, and why:

* the truncated fraction defaults to 25% (the paper: 20%; 25% is Ray Tune's
  ``quantile_fraction``), with at least one member in each of bottom and top and never
  more than half the population in either, so N = 2 and N = 4 populations still evolve;
* a bottom member only copies a top member with *strictly* higher fitness: with ties
  (all members equal at the start of training, say) copying an equal would destroy
  diversity for no gain; ties in the ranking are broken by a random permutation, so no
  member is favoured by its name;
* a non-finite fitness (NaN from a diverged member) ranks lowest;
* the resample probability (the paper leaves it open) defaults to 25%, Ray Tune's value.

This module is pure: it decides from numbers and copies pytrees; it neither trains nor
talks to learners.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.population.search_space import SearchSpace


@dataclasses.dataclass(frozen=True)
class PBTConfig:
    """Settings of exploit and explore.

    Attributes:
      fraction: share of the population in each of the bottom and the top, in
        ``(0, 0.5]``; ``k = min(ceil(fraction * N), N // 2)`` members each.
      perturb_factors: explore multiplies a hyperparameter by one of these, uniformly
        chosen (the paper's 0.8 and 1.2).
      resample_probability: chance, per hyperparameter, of resampling it from its range
        instead of perturbing it.
    """

    fraction: float = 0.25
    perturb_factors: tuple[float, ...] = (0.8, 1.2)
    resample_probability: float = 0.25

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        if not isinstance(self.fraction, (int, float)) or not 0 < self.fraction <= 0.5:
            raise ValueError(f"pbt.fraction={self.fraction!r} must be in (0, 0.5]: the "
                             "bottom and top fractions must not overlap")
        if not self.perturb_factors or not all(
                isinstance(f, (int, float)) and math.isfinite(f) and f > 0
                for f in self.perturb_factors):
            raise ValueError(f"pbt.perturb_factors={self.perturb_factors!r} must be a non-empty "
                             "sequence of positive numbers")
        if not 0 <= self.resample_probability <= 1:
            raise ValueError(f"pbt.resample_probability={self.resample_probability!r} must be "
                             "in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Event:
    """One exploit-and-explore decision: ``member`` takes ``source``'s learner state.

    Attributes:
      member: the bottom member whose state is replaced.
      source: the top member it copies.
      before: ``member``'s hyperparameters before (every key of its ``hyper``).
      after: its hyperparameters after: ``source``'s, with the search-space ones
        perturbed or resampled and clipped (Python floats; the learner state holds
        their float32 roundings).
      how: per search-space name, ``"*0.8"``/``"*1.2"`` (perturbed) or ``"resample"``.
      member_fitness, source_fitness: the fitnesses the decision was made on.
    """

    member: str
    source: str
    before: dict[str, float]
    after: dict[str, float]
    how: dict[str, str]
    member_fitness: float
    source_fitness: float

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (non-finite fitness as ``None``)."""
        d = dataclasses.asdict(self)
        for k in ("member_fitness", "source_fitness"):
            d[k] = d[k] if math.isfinite(d[k]) else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Event:
        fit = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(str(d["member"]), str(d["source"]), dict(d["before"]), dict(d["after"]),
                   dict(d["how"]), fit(d["member_fitness"]), fit(d["source_fitness"]))


def truncation(fitness: Mapping[str, float], fraction: float, rng: np.random.Generator
               ) -> tuple[list[str], list[str]]:
    """``(bottom, top)`` members, worst first and best last respectively.

    ``k = min(ceil(fraction * N), N // 2)`` each; ties are ordered by a random
    permutation drawn from ``rng``; non-finite fitness ranks lowest.

    Raises:
      ValueError: ``fraction`` outside ``(0, 0.5]``, or a fitness that is not a number.
    """
    PBTConfig(fraction=fraction).validate()
    members = list(fitness)
    values = {}
    for m in members:
        v = fitness[m]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise ValueError(f"fitness[{m!r}]={v!r} is not a number")
        values[m] = float(v) if math.isfinite(v) else -math.inf
    n = len(members)
    k = min(math.ceil(fraction * n), n // 2)
    shuffled = [members[i] for i in rng.permutation(n)]
    order = sorted(shuffled, key=lambda m: values[m])  # stable: ties keep the random order
    return order[:k], order[n - k:]


class PBT:
    """Exploit-and-explore decisions over a search space.

    Args:
      space: the hyperparameters to explore (``parse_search_space``).
      config: fractions and perturbation settings.

    Raises:
      ValueError: a bad ``config`` (see ``PBTConfig.validate``) or an empty ``space``.
    """

    def __init__(self, space: SearchSpace, config: PBTConfig = PBTConfig()):
        config.validate()
        if not space:
            raise ValueError("pbt: the search space is empty")
        self.space, self.config = dict(space), config

    def explore(self, hyper: Mapping[str, float], rng: np.random.Generator
                ) -> tuple[dict[str, float], dict[str, str]]:
        """``(new hyper, how)``: each search-space value perturbed or resampled, clipped
        (Jaderberg et al. 2017, Sec. 3, "explore": perturb and resample); other keys kept.

        Raises:
          ValueError: ``hyper`` lacks a search-space name.
        """
        missing = [n for n in self.space if n not in hyper]
        if missing:
            raise ValueError(f"pbt: hyperparameters {missing} of the search space are not in "
                             f"the member's hyper (has {sorted(hyper)})")
        new, how = {k: float(v) for k, v in hyper.items()}, {}
        factors = self.config.perturb_factors
        for name, r in self.space.items():
            if rng.random() < self.config.resample_probability:
                new[name], how[name] = r.sample(rng), "resample"
            else:
                f = factors[int(rng.integers(len(factors)))]
                new[name], how[name] = r.clip(new[name] * f), f"*{f}"
        return new, how

    def decide(self, fitness: Mapping[str, float], hyper: Mapping[str, Mapping[str, float]],
               rng: np.random.Generator) -> list[Event]:
        """The exploit-and-explore events of one round.

        Args:
          fitness: ``{member: fitness}`` of the members taking part (higher is better).
          hyper: ``{member: {name: value}}`` (floats or ``[]`` arrays, e.g.
            ``state.hyper``); must cover every member of ``fitness``.
          rng: a NumPy generator (all random choices come from it).

        Returns:
          One ``Event`` per bottom member that has a strictly fitter top member, in
          bottom order (worst first); empty for fewer than two members.

        Raises:
          ValueError: a member without ``hyper``, a non-string member, a non-numeric
            fitness, or a ``hyper`` lacking a search-space name.
        """
        bad = [m for m in fitness if not isinstance(m, str)]
        if bad:
            raise ValueError(f"pbt: members must be strings (policy names); got {bad!r}")
        missing = [m for m in fitness if m not in hyper]
        if missing:
            raise ValueError(f"pbt: no hyperparameters for members {missing}")
        bottom, top = truncation(fitness, self.config.fraction, rng)
        f = {m: float(v) if math.isfinite(v) else -math.inf for m, v in fitness.items()}
        events = []
        for m in bottom:
            fitter = [t for t in top if f[t] > f[m]]
            if not fitter:
                continue
            src = fitter[int(rng.integers(len(fitter)))]
            after, how = self.explore({k: float(v) for k, v in hyper[src].items()}, rng)
            events.append(Event(m, src, {k: float(v) for k, v in hyper[m].items()}, after, how,
                                float(fitness[m]), float(fitness[src])))
        return events


def _copy_leaf(x):
    """A fresh buffer with ``x``'s value, dtype and placement: a learner may donate its
    state to ``learn``, so two members must never share a buffer."""
    if isinstance(x, jax.Array):
        return x.copy()
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


def _scalar_like(old, value: float):
    """``value`` as an array like ``old``: shape, dtype and, for a jax array, sharding and
    commitment (a committed array is a different jit signature from an uncommitted
    one), so that ``learn`` is not recompiled."""
    arr = np.asarray(value, dtype=np.asarray(old).dtype).reshape(np.shape(old))
    if not isinstance(old, jax.Array):
        return arr
    return jax.device_put(arr, old.sharding) if old.committed else jnp.asarray(arr)


def apply(event: Event, states: Mapping[str, Any]) -> dict[str, Any]:
    """Carry out ``event``: ``states[member]`` becomes a copy of ``states[source]`` (every
    leaf: parameters, optimiser state, normaliser statistics in ``params``, counters)
    with ``hyper`` set to ``event.after``.

    Args:
      event: from :meth:`PBT.decide`.
      states: ``{member: learner state}``; a state is a ``NamedTuple`` (or dataclass)
        with a ``hyper`` dict of ``[]`` arrays (``agents.state.LearnerState``).

    Returns:
      A new dict: ``states`` with the member's state replaced (``states`` is not
      modified; the copy shares no buffer with the source).

    Raises:
      ValueError: an unknown member or source, a state without ``hyper``, or an
        ``event.after`` key the source's ``hyper`` lacks.
    """
    for role, m in (("member", event.member), ("source", event.source)):
        if m not in states:
            raise ValueError(f"pbt.apply: {role} {m!r} has no state (members: {sorted(states)})")
    src = states[event.source]
    hyper = getattr(src, "hyper", None)
    if not isinstance(hyper, Mapping):
        raise ValueError(f"pbt.apply: the state of {event.source!r} has no hyper dict "
                         f"(got {type(hyper).__name__}); the agent declares no hyperparameters")
    unknown = sorted(set(event.after) - set(hyper))
    if unknown:
        raise ValueError(f"pbt.apply: {unknown} are not in the learner state's hyper "
                         f"(has {sorted(hyper)})")
    return {**states, event.member: with_hyper(jax.tree.map(_copy_leaf, src), event.after)}


def with_hyper(state: Any, values: Mapping[str, float]) -> Any:
    """``state`` with ``state.hyper[name]`` set to ``values[name]``, each as an array of
    the old one's shape, dtype and placement (so a compiled ``learn`` takes it); the
    other leaves are shared with ``state``.

    Raises:
      ValueError: a state without a ``hyper`` dict, or a name it lacks.
    """
    hyper = getattr(state, "hyper", None)
    if not isinstance(hyper, Mapping):
        raise ValueError(f"pbt: the state has no hyper dict (got {type(hyper).__name__}); "
                         "the agent declares no hyperparameters")
    unknown = sorted(set(values) - set(hyper))
    if unknown:
        raise ValueError(f"pbt: {unknown} are not in the learner state's hyper (has {sorted(hyper)})")
    new_hyper = {k: _scalar_like(v, values[k]) if k in values else v for k, v in hyper.items()}
    return (state._replace(hyper=new_hyper) if hasattr(state, "_replace")
            else dataclasses.replace(state, hyper=new_hyper))

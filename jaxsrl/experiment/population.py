"""A population run's settings and dataflow: ``--population=N`` and the ``[pbt]`` table.

``--population=N`` (N >= 2) makes the run a population of N member policies of the same
agent, named ``member0 .. member{N-1}``, each with its own actor group, inference
server and trainer (a multi-policy dataflow, :func:`population_dataflow`); a
population-manager worker (``jaxsrl/workers/population/manager.py``) runs
population-based training over them (Jaderberg et al. 2017; ``jaxsrl/population/pbt.py``).
Its settings are the ``[pbt]`` table of a config file (or ``--pbt.<field>`` flags for
the scalar ones)::

    population = 4
    [pbt]
    ready_env_steps = 25_000            # or ready_versions = 10
    fraction = 0.25
    [pbt.search_space]
    learning_rate = {min = 1e-5, max = 1e-2, log = true}
    [pbt.initial]                       # optional: per member, else drawn from the space
    learning_rate = [1e-5, 1e-4, 1e-3, 1e-2]

The search space names must be hyperparameters the agent reads from its learner state
(``agents.HYPERPARAMETERS``, or the ``HYPERPARAMETERS`` tuple of a ``module:AGENT``
agent's module). Pure data and checks: nothing here builds agents or workers.

``--population=N`` alone runs with defaults (:func:`ready_interval`,
:func:`search_space`): a round every :data:`DEFAULT_READY_ENV_STEPS` env frames per
member, and ``learning_rate`` searched log-uniformly from a tenth to ten times the
agent's configured one (:data:`DEFAULT_LR_SPAN`). ``configs/pbt_cartpole.toml``
(:data:`EXAMPLE_CONFIG`) sets them all explicitly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Optional

import numpy as np
import tyro

from jaxsrl.core.imports import import_module, is_reference
from jaxsrl.experiment.dataflow import ActorGroup, Dataflow, PolicyWorkerSpec, TrainerSpec
from jaxsrl.population.search_space import SearchSpace, parse_search_space, sample_hyper

MEMBER_PREFIX = "member"
#: The shipped config with every population setting, named by errors about a missing one.
EXAMPLE_CONFIG = "configs/pbt_cartpole.toml"
#: The ready interval when neither ``ready_env_steps`` nor ``ready_versions`` is set:
#: env frames of each member between rounds (as in :data:`EXAMPLE_CONFIG`).
DEFAULT_READY_ENV_STEPS = 20_000
#: Without ``[pbt.search_space]``: ``learning_rate`` in ``[lr / 10, lr * 10]`` (log),
#: ``lr`` the agent's configured learning rate.
DEFAULT_LR_SPAN = 10.0


@dataclasses.dataclass(frozen=True)
class PBTSettings:
    """Population-based training of a ``--population`` run (the ``[pbt]`` table).

    A *round* starts once every member has trained ``ready_env_steps`` env frames (or
    published ``ready_versions`` policy versions) since the previous round: each
    member's fitness is the mean return of the training episodes it finished since the
    previous round (its last fitness if it finished none; members that never finished
    one rank lowest), and ``jaxsrl.population.pbt.PBT.decide`` picks the
    exploit-and-explore events.

    Attributes:
      ready_env_steps: env frames of each member between rounds (0: use ``ready_versions``;
        both 0: :data:`DEFAULT_READY_ENV_STEPS`).
      ready_versions: policy versions of each member between rounds (0: use ``ready_env_steps``).
      fraction: share of the population in each of the bottom and the top, in ``(0, 0.5]``.
      perturb_factors: explore multiplies a hyperparameter by one of these.
      resample_probability: chance per hyperparameter of resampling it from its range.
      search_space: ``{name: {min, max, log}}`` (TOML only: ``[pbt.search_space]``;
        ``None``: the default of :func:`search_space`).
      initial: ``{name: [value per member]}``: given initial hyperparameters (TOML only:
        ``[pbt.initial]``); search-space names not given are drawn from their range
        (log-uniformly for ``log`` ranges) with the run's seed; the agent's other
        hyperparameters start at their config value in every member.
    """

    ready_env_steps: int = 0
    ready_versions: int = 0
    fraction: float = 0.25
    perturb_factors: tuple[float, ...] = (0.8, 1.2)
    resample_probability: float = 0.25
    search_space: Annotated[Optional[dict], tyro.conf.Suppress] = None
    initial: Annotated[Optional[dict], tyro.conf.Suppress] = None

    def pbt_config(self) -> Any:
        """The ``jaxsrl.population.pbt.PBTConfig`` of these settings (imported here:
        the config module stays free of JAX)."""
        from jaxsrl.population.pbt import PBTConfig  # noqa: PLC0415  (keeps JAX out of config)
        return PBTConfig(float(self.fraction), tuple(float(f) for f in self.perturb_factors),
                         float(self.resample_probability))


def member_names(n: int) -> list[str]:
    """``["member0", ..., f"member{n-1}"]``: the members' policy names."""
    return [f"{MEMBER_PREFIX}{i}" for i in range(n)]


def actor_counts(num_actors: int, n: int) -> list[int]:
    """Actor processes per member: ``max(num_actors, n)`` dealt out evenly (the first
    members get one more when it does not divide), so every member has at least one."""
    total = max(int(num_actors), n)
    return [total // n + (i < total % n) for i in range(n)]


def population_dataflow(population: int, num_actors: int, inference_servers: int = 1) -> Dataflow:
    """The dataflow of a population run: per member ``m``, an actor group ``actors_m``
    (:func:`actor_counts`), a policy worker ``policy_m`` (``inference_servers`` servers)
    and a trainer ``trainer_m`` of policy ``m``, on streams ``inference_m`` and
    ``samples_m``. Every member's actors run the same environment config."""
    members = member_names(population)
    counts = actor_counts(num_actors, population)
    return Dataflow(
        actors=tuple(ActorGroup(f"actors_{m}", c, f"inference_{m}", f"samples_{m}")
                     for m, c in zip(members, counts)),
        policy_workers=tuple(PolicyWorkerSpec(f"policy_{m}", f"inference_{m}", m, inference_servers)
                             for m in members),
        trainers=tuple(TrainerSpec(f"trainer_{m}", f"samples_{m}", m) for m in members))


def declared_hyperparameters(agent: str) -> tuple[str, ...]:
    """The hyperparameters agent ``agent`` (``--agent``) reads from its learner state.

    Raises:
      ValueError: an agent that declares none (then PBT has nothing to change).
    """
    from agents import HYPERPARAMETERS  # noqa: PLC0415  (agents import config users)
    names: Any = HYPERPARAMETERS.get(agent)
    if names is None and is_reference(agent):
        names = getattr(import_module(agent.partition(":")[0], "--agent"), "HYPERPARAMETERS", None)
    if not names:
        raise ValueError(f"--population: agent {agent!r} declares no hyperparameters in its "
                         "learner state (HYPERPARAMETERS), so PBT cannot change any")
    return tuple(names)


def check(cfg: Any) -> None:
    """Check the population settings of run config ``cfg`` (``RunConfig.validate``).

    Raises:
      ValueError: one line naming the bad value: ``population`` of 1 or below 0, a
        ``[pbt]`` search space without ``--population``, two ready intervals, a bad or
        no search space or PBT setting, or bad ``initial`` values (pairs with other
        modes: :mod:`jaxsrl.experiment.modes`).
    """
    n, s = cfg.population, cfg.pbt
    if not isinstance(n, int) or n < 0 or n == 1:
        raise ValueError(f"population={n!r} must be 0 (no population) or at least 2 members")
    if not isinstance(s, PBTSettings):
        raise ValueError(f"pbt={s!r} must be a [pbt] table")
    if n == 0:
        if s.search_space or s.initial:
            raise ValueError("[pbt] sets a search space or initial values but population=0: "
                             "add --population=N (N >= 2)")
        return
    # with a [dataflow] table or several learner processes: refused by jaxsrl.experiment.modes
    for name in ("ready_env_steps", "ready_versions"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"pbt.{name}={value!r} must be an integer >= 0")
    if s.ready_env_steps > 0 and s.ready_versions > 0:
        raise ValueError(f"population={n}: set at most one of pbt.ready_env_steps and "
                         f"pbt.ready_versions (got {s.ready_env_steps} and {s.ready_versions}; "
                         f"see {EXAMPLE_CONFIG})")
    s.pbt_config().validate()
    space = search_space(cfg)
    initial = s.initial or {}
    if not isinstance(initial, dict):
        raise ValueError(f"pbt.initial={initial!r} must map hyperparameter -> [value per member]")
    for name, values in initial.items():
        if name not in space:
            raise ValueError(f"pbt.initial.{name}: not in pbt.search_space ({', '.join(space)})")
        if not isinstance(values, (list, tuple)) or len(values) != n:
            raise ValueError(f"pbt.initial.{name}={values!r} must list {n} values (one per member)")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not space[name].contains(v):
                raise ValueError(f"pbt.initial.{name}: {v!r} is not a number in "
                                 f"[{space[name].min:g}, {space[name].max:g}]")


def ready_interval(s: PBTSettings) -> tuple[int, int]:
    """``(ready_env_steps, ready_versions)`` of settings ``s``, exactly one positive:
    :data:`DEFAULT_READY_ENV_STEPS` env frames when neither is set."""
    if s.ready_env_steps <= 0 and s.ready_versions <= 0:
        return DEFAULT_READY_ENV_STEPS, 0
    return int(s.ready_env_steps), int(s.ready_versions)


def default_search_space(cfg: Any) -> dict:
    """The search space of a run without ``[pbt.search_space]``, in config form:
    ``learning_rate`` log-uniform in ``[lr / DEFAULT_LR_SPAN, lr * DEFAULT_LR_SPAN]``,
    ``lr`` the agent's configured ``learning_rate``.

    Raises:
      ValueError: the agent does not declare ``learning_rate`` as a hyperparameter or has
        no positive one configured (then the table must be given; the message names
        :data:`EXAMPLE_CONFIG`).
    """
    declared = declared_hyperparameters(cfg.agent)
    lr = getattr(cfg.agent_config(), "learning_rate", None)
    if "learning_rate" not in declared or isinstance(lr, bool) \
            or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"population={cfg.population} needs a [pbt.search_space] table (agent "
                         f"{cfg.agent!r} has no learning_rate to search by default), e.g. as in "
                         f"{EXAMPLE_CONFIG}: learning_rate = {{min = 1e-5, max = 1e-2, log = true}}")
    return {"learning_rate": {"min": float(lr) / DEFAULT_LR_SPAN,
                              "max": float(lr) * DEFAULT_LR_SPAN, "log": True}}


def search_space(cfg: Any) -> SearchSpace:
    """The parsed ``[pbt.search_space]`` of ``cfg`` (:func:`default_search_space` when it
    gives none), checked against the agent's names.

    Raises:
      ValueError: none given and no default (see :func:`default_search_space`), or a bad
        entry (see ``parse_search_space``).
    """
    spec = cfg.pbt.search_space or default_search_space(cfg)
    return parse_search_space(spec, declared_hyperparameters(cfg.agent), where="pbt.search_space")


def initial_hyper(cfg: Any) -> dict[str, dict[str, float]]:
    """``{member: {name: value}}`` over the search space: ``[pbt.initial]`` where given,
    else drawn from the range with ``numpy.random.default_rng(cfg.seed)`` (the same
    draw on every call, so a run's members are reproducible from its config)."""
    space = search_space(cfg)
    rng = np.random.default_rng([cfg.seed, 7411])
    given = cfg.pbt.initial or {}
    out = {}
    for i, m in enumerate(member_names(cfg.population)):
        drawn = sample_hyper(space, rng)
        out[m] = {k: float(given[k][i]) if k in given else drawn[k] for k in space}
    return out

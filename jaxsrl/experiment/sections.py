"""The sections of a run config, each with the checks of its own values.

:class:`~jaxsrl.experiment.config.RunConfig` keeps its fields flat (the flags
``--num_actors``, ``--inference`` ... and the top-level TOML keys are the users'
contract); :data:`SECTIONS` says which section each field belongs to, in one place:
``train.py --help`` shows its groups in this order (:mod:`jaxsrl.cli.help`), a TOML file
may set a section's fields in a table of its name (``[inference] mode = "process"``,
:mod:`jaxsrl.experiment.config_layers`), ``cfg.section("inference")`` is a read-only
view, and ``RunConfig.validate`` runs each section's check. A check raises
``ValueError`` naming the first impossible value of its section; refused pairs of
modes (settings of two sections) are the table of :mod:`jaxsrl.experiment.modes`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from jaxsrl.experiment import modes
from jaxsrl.experiment import population as population_lib
from jaxsrl.experiment import selfplay as selfplay_lib
from jaxsrl.experiment.ray_resources import parse_resources
from jaxsrl.streams.security import check_curve_available


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name}={getattr(cfg, name)} must be positive")


def _above_zero(cfg: Any, *names: str) -> None:
    for name in names:
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name}={getattr(cfg, name)} must be > 0")


def _non_negative(cfg: Any, *names: str) -> None:
    for name in names:
        if not getattr(cfg, name) >= 0:
            raise ValueError(f"{name}={getattr(cfg, name)} must be >= 0")


def check_run(cfg: Any) -> None:
    _positive(cfg, "total_env_steps")
    if cfg.on_nonfinite not in ("drop", "raise"):
        raise ValueError(f"on_nonfinite={cfg.on_nonfinite!r} must be 'drop' or 'raise'")
    if cfg.launcher not in ("local", "ray", "serial"):
        raise ValueError(f"launcher={cfg.launcher!r} must be 'local', 'ray' or 'serial'")


def check_folder(cfg: Any) -> None:
    _positive(cfg, "keep_checkpoints")
    _above_zero(cfg, "log_interval_s", "checkpoint_interval_s")
    if cfg.resume and cfg.overwrite:
        raise ValueError("--resume and --overwrite contradict each other: continue the run "
                         "in --logdir or replace it, not both")


def check_actors(cfg: Any) -> None:
    _positive(cfg, "num_actors", "envs_per_actor", "ring_size")
    _above_zero(cfg, "actor_timeout_s")
    if cfg.envs_per_actor % cfg.ring_size:
        raise ValueError(f"envs_per_actor={cfg.envs_per_actor} must be divisible by "
                         f"ring_size={cfg.ring_size}")
    _non_negative(cfg, "max_actor_restarts", "actor_heartbeat_timeout_s")


def check_inference(cfg: Any) -> None:
    if cfg.inference not in modes.INFERENCE:
        raise ValueError(f"inference={cfg.inference!r} must be one of {', '.join(modes.INFERENCE)}")
    _positive(cfg, "inference_servers")
    _above_zero(cfg, "inference_failover_s")
    _non_negative(cfg, "inference_deadline_ms", "param_publish_interval_s", "max_server_restarts")
    if cfg.inference == "process" and cfg.inference_failover_s >= cfg.actor_timeout_s:
        raise ValueError(f"inference_failover_s={cfg.inference_failover_s} must be below "
                         f"actor_timeout_s={cfg.actor_timeout_s} (an actor tries the next "
                         "server before it gives up)")


def check_learner(cfg: Any) -> None:
    _positive(cfg, "segment_length", "batch_segments")
    _non_negative(cfg, "max_staleness")
    n = cfg.num_learner_processes
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"num_learner_processes={n!r} must be a positive integer")
    host, _, port = cfg.coordinator_address.rpartition(":")
    if cfg.coordinator_address and not (host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"coordinator_address={cfg.coordinator_address!r} must be host:port")
    if cfg.batch_segments % n:
        raise ValueError(f"batch_segments={cfg.batch_segments} must be divisible by "
                         f"num_learner_processes={n} (each takes an equal share)")
    name = cfg.agent_field or cfg.agent
    agent_cfg = getattr(cfg, name, None)
    minibatches = getattr(agent_cfg, "num_minibatches", 1)
    rows = cfg.batch_segments * cfg.segment_length
    if not isinstance(minibatches, int) or minibatches <= 0 or rows % minibatches:
        raise ValueError(f"{name}.num_minibatches={minibatches} must be a positive divisor "
                         f"of batch_segments*segment_length={cfg.batch_segments}*"
                         f"{cfg.segment_length}={rows}")
    steps = cfg.num_updates() * minibatches * getattr(agent_cfg, "num_epochs", 1)
    if steps >= 2**31:
        raise ValueError(f"total_env_steps={cfg.total_env_steps} plans {steps:,} optimiser steps; "
                         f"learning-rate schedules count in int32 (< 2**31): lower it")


def check_evaluation(cfg: Any) -> None:
    _positive(cfg, "eval_episodes")
    _non_negative(cfg, "eval_every")


def check_cluster(cfg: Any) -> None:
    if not cfg.host:
        raise ValueError("host='' must name an interface, e.g. 127.0.0.1")
    _non_negative(cfg, "actor_cpus", "learner_cpus", "learner_gpus")
    for name in ("actor_resources", "learner_resources"):
        if getattr(cfg, name):
            parse_resources(getattr(cfg, name), name)
    if cfg.curve:
        check_curve_available()


def check_graph(cfg: Any, flow: Any) -> None:
    """Checks of the dataflow against the run's values (after the sections')."""
    for group in flow.actors:
        if not isinstance(group.count, int) or group.count <= 0:
            raise ValueError(f"actor group {group.name!r}: count={group.count} must be positive")
        envs = group.envs_per_actor or cfg.envs_per_actor
        if not isinstance(envs, int) or envs < 0 or envs % cfg.ring_size:
            raise ValueError(f"actor group {group.name!r}: envs_per_actor={envs} must be a "
                             f"positive multiple of ring_size={cfg.ring_size}")
    n = cfg.num_learner_processes
    actors = sum(group.count for group in flow.actors)
    if n > 1 and actors < n:
        raise ValueError(f"num_learner_processes={n} needs at least {n} actors (each learner "
                         f"process is fed by its own), not {actors}")
    selfplay_lib.check_teams(cfg, flow)


@dataclasses.dataclass(frozen=True)
class Section:
    """A section: its ``name`` (TOML table, ``cfg.section(name)``), the ``title`` of its
    ``--help`` group, its run ``fields`` (a dataclass-valued one, such as ``pbt``, stands
    for its own ``--pbt.<field>`` flags) and the ``check`` of their values."""

    name: str
    title: str
    fields: tuple[str, ...]
    check: Callable[[Any], None]


#: Every run field in exactly one section (a test checks it), in ``--help`` order.
SECTIONS: tuple[Section, ...] = (
    Section("run", "run", ("agent", "env", "env_kwargs", "total_env_steps", "seed",
                           "target_return", "launcher", "on_nonfinite", "compilation_cache_dir",
                           "dataflow"), check_run),
    Section("actors", "actors", ("num_actors", "envs_per_actor", "ring_size", "clip_actions",
                                 "actor_timeout_s", "actor_heartbeat_timeout_s",
                                 "max_actor_restarts"), check_actors),
    Section("inference", "inference", ("inference", "inference_servers", "inference_deadline_ms",
                                       "param_publish_interval_s", "inference_failover_s",
                                       "max_server_restarts"), check_inference),
    Section("learner", "learner", ("segment_length", "batch_segments", "max_staleness",
                                   "num_learner_processes", "coordinator_address",
                                   "spawn_learner_processes"), check_learner),
    Section("folder", "run folder, metrics and checkpoints",
            ("logdir", "resume", "overwrite", "log_interval_s", "checkpoint_interval_s",
             "keep_checkpoints", "save_replay"), check_folder),
    Section("evaluation", "evaluation", ("eval_every", "eval_episodes"), check_evaluation),
    Section("cluster", "network and cluster", ("host", "curve", "ray_address", "actor_cpus",
                                               "learner_cpus", "learner_gpus", "actor_resources",
                                               "learner_resources"), check_cluster),
    Section("pbt", "population-based training", ("population", "pbt"), population_lib.check),
    Section("opponents", "self-play opponents", ("opponents",), selfplay_lib.check),
)
#: Section by name.
BY_NAME: dict[str, Section] = {s.name: s for s in SECTIONS}
#: In a section's TOML table, these keys name a field differently (``[inference] mode``).
TABLE_KEYS: dict[str, dict[str, str]] = {"inference": {"mode": "inference"}}

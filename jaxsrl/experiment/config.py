"""Run configuration: defaults here, per-environment files in ``configs/``, CLI overrides.

Resolution order (later wins):
  1. the defaults of :class:`RunConfig` and of the agent's config dataclass;
  2. ``configs/<env>.toml`` if it exists (``/`` and ``:`` in the env id become ``_``),
     then ``configs/<agent>/<env>.toml`` if it exists (``Agent.name``); with
     ``--resume``, the run's own ``LOGDIR/config.json`` instead;
  3. the files given by ``--config FILE`` (repeatable), in order; in each, top-level
     keys set run fields, the ``[<agent>]`` table sets agent hyperparameters,
     ``[env_kwargs]`` is merged key by key and ``[dataflow]`` replaces the graph;
  4. command-line flags: ``--num_actors=4``, ``--ppo.learning_rate=1e-3``,
     ``--env_kwargs.max_episode_steps=50`` (a TOML value; a bare word is a string), ...
The resolved config is immutable and saved as ``LOGDIR/config.json`` at start.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import types
from typing import Annotated, Any, ClassVar, Literal, Mapping, Optional, Sequence

import tyro

from agents import AGENTS, get_agent
from jaxsrl.envs import check_env_name
from jaxsrl.experiment import config_layers as layers
from jaxsrl.experiment import modes
from jaxsrl.experiment import population as population_lib
from jaxsrl.experiment import sections
from jaxsrl.experiment import selfplay as selfplay_lib
from jaxsrl.experiment import switches
from jaxsrl.experiment.dataflow import Dataflow, default_dataflow
from jaxsrl.experiment.run_dir import RunDir


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything about a run except the agent's hyperparameters.

    Fields are flat (each is a flag ``--<field>`` and a top-level TOML key); the section
    each belongs to, and the checks of its values, are
    :data:`jaxsrl.experiment.sections.SECTIONS`; refused pairs of modes are the table of
    :mod:`jaxsrl.experiment.modes`. :meth:`validate` runs both once per config object.
    """

    #: Name of the field holding the agent's hyperparameters (``Agent.name``; set by
    #: :func:`config_class`). It differs from ``agent`` for ``module:OBJ`` agents.
    agent_field: ClassVar[str] = ""

    agent: str = "ppo"
    """Agent: a built-in name (listed above) or ``package.module:AGENT``, any importable
    ``jaxsrl.core.agent.Agent`` (its hyperparameters are then ``--<Agent.name>.<field>``)."""
    env: str = "CartPole-v1"
    """Environment: a Gymnasium id (``module:EnvId`` imports ``module`` first, as
    ``gymnasium.make`` does), ``hide_and_seek`` / ``hide_and_seek_full``,
    ``module:factory``, a function returning a PettingZoo ``ParallelEnv``, or
    ``gymnax:<EnvId>``, a JAX-native env stepped by device actors on the accelerator
    (``docs/device_actors.md``; ``pip install 'jaxsrl[gymnax]'``; also ``brax:<name>``,
    ``jaxmarl:MPE_<id>`` and ``jax:module:factory``, your own pure-JAX env)."""
    total_env_steps: int = 500_000
    """Stop after this many environment frames (all actors together). A lower bound: the
    run stops at the first check at or past it, so it overshoots by the segments in
    flight then (more on a loaded machine); a --resume needs a larger value than the
    checkpoint's ``env_steps`` to train at all. It counts env frames, not updates: a
    tiny budget can end before a learner's first update (compile included) is done."""
    num_actors: int = 2
    """Actor processes (of the default dataflow)."""
    envs_per_actor: int = 32
    """Environments per actor process, split evenly over its ring."""
    ring_size: int = 2
    """Environment groups per actor: one steps while another waits for actions."""
    segment_length: int = 32
    """T: steps per trajectory segment (plus one bootstrap observation)."""
    batch_segments: int = 64
    """Segments (rows of T steps) per learner update; divisible by the device count."""
    max_staleness: int = 0
    """Drop segments whose oldest action is more versions behind the learner (0: keep all)."""
    inference_deadline_ms: float = 0.0
    """After the first request, wait this long for more before running a batch."""
    inference_servers: int = 1
    """Inference servers of the default dataflow; the k-th actor uses server k % N (a
    ``[dataflow]`` table sets ``count`` per policy worker instead)."""
    inference: Literal["auto", "thread", "process", "inline"] = "auto"
    """Where actors get their actions. ``thread``: inference servers batch every actor's
    requests, as threads of the learner process reading parameters on device;
    ``process``: each server runs in its own process (placed like actors), fed
    parameters over ZeroMQ PUB/SUB; ``inline``: each actor process runs ``act`` itself
    with parameters from the learner's PUB/SUB parameter stream (SRL's inline
    inference); ``auto``: inline on a machine whose learner has no accelerator, where
    the run allows it (:func:`jaxsrl.experiment.inline.auto_mode`), else thread. Older
    spellings still work: ``--remote_inference`` is ``process``, ``--inline_inference``
    ``inline``, ``server`` ``thread`` (:mod:`jaxsrl.experiment.modes`). The run's
    ``config.json`` records the mode as given and, as ``inference_resolved``, the mode it
    ran; a ``--resume`` resolves ``auto`` again (``docs/architecture.md``, "Inline
    inference"; ``docs/reliability.md``, "Seams: resume")."""
    param_publish_interval_s: float = 0.0
    """--inference=process or inline: least seconds between two parameter versions sent
    to the servers or actors (0: every version)."""
    inference_failover_s: float = 5.0
    """--inference=process: an actor whose server leaves a request unanswered this long
    re-sends it to the next server of its stream."""
    max_server_restarts: int = 5
    """--inference=process: dead remote inference servers are restarted (same port) up to
    this many times per run (all servers together), then the run stops."""
    seed: int = 0
    """Seed of parameters, learner RNG and environments."""
    logdir: str = ""
    """Run folder (metrics.jsonl, config.json, checkpoints/); default runs/<env>-<agent>-<time>."""
    resume: bool = False
    """Continue from the newest checkpoint in --logdir."""
    overwrite: bool = False
    """Replace the run already in --logdir: its own files are deleted once every check
    of the new run has passed; other files there stay (without it, and without
    --resume, a --logdir holding a run is refused)."""
    log_interval_s: float = 2.0
    """Seconds between metrics lines."""
    checkpoint_interval_s: float = 120.0
    """Seconds between periodic checkpoints (one is always written at the end)."""
    keep_checkpoints: int = 3
    """Newest checkpoints kept per policy."""
    save_replay: bool = False
    """Off-policy agents: checkpoints also hold the replay contents and rate-limiter
    counters, so a ``--resume`` continues without refilling the buffer (without it the
    resumed run refills up to the agent's minimum fill first, and logs that it does)."""
    target_return: Optional[float] = None
    """Stop early at the first metrics record whose episode_return_mean (the mean return
    of the last 100 finished training episodes) reaches this (for benchmarks)."""
    host: str = "127.0.0.1"
    """Interface the servers bind; loopback unless you need remote actors (then use --curve)."""
    curve: bool = False
    """Encrypt and authenticate every stream with ZeroMQ CURVE (keys generated per run)."""
    actor_timeout_s: float = 30.0
    """An actor exits if its inference server is silent this long (a learner: 10x this)."""
    actor_heartbeat_timeout_s: float = 60.0
    """An actor silent this long while the servers are responsive is hung: it is killed and
    restarted (0 disables)."""
    eval_every: int = 0
    """Evaluate the newest checkpoint every this many policy versions, in a separate
    process, logging ``eval/*`` metrics (0: off; see ``jaxsrl/launch/periodic_eval.py``)."""
    eval_episodes: int = 5
    """Episodes per periodic evaluation (deterministic actions)."""
    max_actor_restarts: int = 10
    """Crashed or hung actors are restarted up to this many times per run (all actors
    together), then the run stops."""
    on_nonfinite: Literal["drop", "raise"] = "drop"
    """A segment with NaN/Inf observations or rewards: drop it (counted) or stop the run."""
    compilation_cache_dir: str = "~/.cache/jaxsrl/xla"
    """JAX persistent compilation cache (later runs skip XLA compiles); "" disables it."""
    num_learner_processes: int = 1
    """JAX processes (e.g. one per host) running one data-parallel learner over all their
    devices; this launcher is process 0 (``docs/architecture.md``, "Multi-host learner")."""
    coordinator_address: str = ""
    """--num_learner_processes>1: ``host:port`` where process 0 runs JAX's coordination
    service (reachable by every learner process); empty: 127.0.0.1 and a free port."""
    spawn_learner_processes: bool = True
    """--num_learner_processes>1: start processes 1..N-1 here (through the run's spawner);
    False: wait for them to be started on other hosts (``jaxsrl/workers/learner/process.py``)."""
    launcher: Literal["local", "ray", "serial"] = "local"
    """Where processes run: this machine, a Ray cluster (``docs/cluster.md``), or
    ``serial``: every worker in this one process, actors as threads (for debuggers and
    tests; ``docs/architecture.md``, "Serial mode")."""
    ray_address: str = ""
    """--launcher=ray: address of a running cluster (``HEAD_IP:6379``, or ``auto``);
    empty starts a one-node Ray cluster on this machine for the run."""
    actor_cpus: float = 1.0
    """--launcher=ray: CPUs each actor process asks Ray for."""
    learner_cpus: float = 1.0
    """--launcher=ray: CPUs the accelerator process (learner + inference) asks Ray for."""
    learner_gpus: float = 0.0
    """--launcher=ray: GPUs the accelerator process asks Ray for (0: runs on CPU)."""
    actor_resources: str = ""
    """--launcher=ray: Ray custom resources each actor process asks for, ``NAME=AMOUNT[,...]``
    (e.g. ``actor_node=1``: actors run only on nodes started with ``ray start
    --resources='{"actor_node": N}'``; ``docs/cluster.md``)."""
    learner_resources: str = ""
    """--launcher=ray: Ray custom resources the accelerator process (learner + inference)
    asks for, ``NAME=AMOUNT[,...]`` (e.g. ``learner_node=1`` to pin it to the head)."""
    clip_actions: bool = True
    """Gymnasium ``Box`` actions are clipped to the action space's bounds before the
    environment steps (CleanRL's ``ClipAction``; the learner still sees the sampled
    action). ``--no_clip_actions`` passes the Gaussian's sample as it is, as Sample
    Factory does: MuJoCo then clamps the control itself while the environment's
    control cost (HalfCheetah: ``0.1 * sum(a^2)``) sees the raw action, so an
    out-of-range mean is penalised instead of free. Training and evaluation alike."""
    env_kwargs: Annotated[Optional[dict], tyro.conf.Suppress] = None
    """Keyword arguments for the environment constructor (``[env_kwargs]`` of the TOML
    files, then ``--env_kwargs.KEY=VALUE`` flags)."""
    dataflow: Annotated[Optional[dict], tyro.conf.Suppress] = None
    """Worker graph (``[dataflow]`` TOML table); default: see ``default_dataflow``."""
    population: int = 0
    """Population-based training over N >= 2 member policies of the agent, each with its
    own actors (``--num_actors`` in all, at least one per member), inference server and
    trainer; settings in the ``[pbt]`` table (0: no population; ``docs/population.md``)."""
    pbt: population_lib.PBTSettings = dataclasses.field(default_factory=population_lib.PBTSettings)
    """PBT settings of a ``--population`` run (``[pbt]`` table, ``--pbt.<field>`` flags)."""
    opponents: selfplay_lib.OpponentSettings = dataclasses.field(
        default_factory=selfplay_lib.OpponentSettings)
    """Self-play opponent pools of a run with one policy per team (``[opponents]`` table,
    ``--opponents.<field>`` flags; off unless ``snapshot_every`` > 0; ``docs/population.md``)."""

    # -- derived values (one place) ----------------------------------------------------
    @property
    def envs_per_group(self) -> int:
        return self.envs_per_actor // self.ring_size

    def steps_per_update(self, rows_per_env: float = 1) -> float:
        """Environment frames consumed by one learner update whose policy controls
        ``rows_per_env`` agents of each environment (a mean over actor groups may be
        fractional: ``jaxsrl.launch.launcher.planned_updates``)."""
        return self.batch_segments * self.segment_length / rows_per_env

    def num_updates(self, rows_per_env: float = 1) -> int:
        """Planned learner updates of one policy (for learning-rate schedules)."""
        return max(1, math.ceil(self.total_env_steps / self.steps_per_update(rows_per_env)))

    def agent_config(self) -> Any:
        """The agent's hyperparameters (its config dataclass)."""
        return getattr(self, self.agent_field or self.agent)

    @property
    def inline_inference(self) -> bool:
        """The actors run ``act`` themselves: ``inference`` is ``"inline"`` (``"auto"`` is
        resolved when the run starts, :func:`jaxsrl.experiment.inline.auto_mode`)."""
        return self.inference == "inline"

    @property
    def remote_inference(self) -> bool:
        """Each inference server is a process of its own: ``inference`` is ``"process"``."""
        return self.inference == "process"

    def section(self, name: str) -> Mapping[str, Any]:
        """Read-only view ``{field: value}`` of section ``name`` (``"inference"``, ...;
        :data:`jaxsrl.experiment.sections.SECTIONS`).

        Raises:
          KeyError: no section of that name.
        """
        if name not in sections.BY_NAME:
            raise KeyError(f"no config section {name!r}; valid: {', '.join(sections.BY_NAME)}")
        return types.MappingProxyType({f: getattr(self, f) for f in sections.BY_NAME[name].fields})

    @functools.cached_property
    def flow(self) -> Dataflow:
        """The run's worker graph, parsed and checked once per config object.

        Raises:
          ValueError: a malformed ``[dataflow]`` table.
        """
        if self.population:
            flow = population_lib.population_dataflow(self.population, self.num_actors,
                                                      self.inference_servers)
        elif self.dataflow:
            flow = Dataflow.from_dict(self.dataflow)
        else:
            flow = default_dataflow(self.num_actors, self.inference_servers)
        flow.validate()
        return flow

    def get_dataflow(self) -> Dataflow:
        """:attr:`flow` (parsed once)."""
        return self.flow

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first impossible value: each section's checks
        (:data:`~jaxsrl.experiment.sections.SECTIONS`), a field set where its placement
        does not apply it (:data:`~jaxsrl.experiment.modes.FIELDS`: device actors refuse,
        e.g., ``--num_actors``), the refused mode pairs
        (:data:`~jaxsrl.experiment.modes.REFUSED`), the dataflow against the sections'
        values, the agent's own.
        Runs once per config object (a changed copy, ``dataclasses.replace``, runs again)."""
        if self.__dict__.get("_validated"):
            return
        for section in sections.SECTIONS:
            section.check(self)
        modes.check(self, self.flow)
        sections.check_graph(self, self.flow)
        agent_validate = getattr(self.agent_config(), "validate", None)
        if agent_validate is not None:  # the agent's own hyperparameter checks
            agent_validate()
        self.__dict__["_validated"] = True  # a frozen dataclass: not a field, not compared


def config_class(agent_name: str, agent_config_cls: type) -> type:
    """The frozen dataclass of a run with agent ``agent_name`` (field of that name).

    Raises:
      ValueError: ``agent_name`` is also the name of a run field or section.
    """
    if agent_name in {f.name for f in dataclasses.fields(RunConfig)} | set(sections.BY_NAME):
        raise ValueError(f"Agent.name={agent_name!r} is taken by a run field or section: "
                         "rename the agent")
    return dataclasses.make_dataclass(
        "TrainConfig", [(agent_name, agent_config_cls, dataclasses.field(default_factory=agent_config_cls))],
        bases=(RunConfig,), frozen=True, namespace={"agent_field": agent_name})


def help_text(agents: dict) -> str:
    """The top of ``train.py --help``: how flags and files combine (the flags that the
    config dataclass does not hold are listed here, since the pre-parser takes them)."""
    return ("Train an agent. Values resolve in this order, later wins: dataclass defaults, "
            "configs/<env>.toml, configs/<agent>/<env>.toml, each --config FILE in order, then flags. "
            "--config FILE: a TOML file layered over configs/<env>.toml (repeatable; top-level "
            "keys are run fields, [<agent>] its hyperparameters, [env_kwargs], [dataflow]). "
            "--env_kwargs.KEY=VALUE: an argument of the environment constructor (a TOML "
            "value; a bare word is a string). "
            f"Built-in agents: {', '.join(sorted(agents))}; or --agent=package.module:AGENT.")


def load_config(args: Sequence[str] | None = None, agents: dict | None = None) -> Any:
    """Parse the command line into a validated, frozen run config.

    Args:
      args: command-line arguments (default ``sys.argv[1:]``).
      agents: the agent registry (default ``agents.AGENTS``); ``--agent`` may also be a
        ``package.module:AGENT`` reference.

    Raises:
      ValueError: unknown agent, environment, config file or key, a malformed
        ``--env_kwargs`` flag, a switch given a value other than true/false/1/0, or an
        impossible value — before any process starts.
      SystemExit: bad flags (tyro prints the error and the valid flags).
    """
    agents = AGENTS if agents is None else agents
    args = list(sys.argv[1:] if args is None else args)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--agent", default="ppo")
    pre.add_argument("--env", default="CartPole-v1")
    pre.add_argument("--config", action="append", default=[])
    pre.add_argument("--logdir", default="")
    pre.add_argument("--resume", action="store_true")
    known, rest = pre.parse_known_args(args)
    rest, env_kwargs = layers.split_env_kwargs_flags(rest)
    saved = _saved_config(known.logdir) if known.resume else None
    if saved is not None:  # --resume: the run's own config, then the flags given now
        explicit = {a.split("=")[0] for a in args}
        for key in ("agent", "env"):
            given = getattr(known, key)
            if f"--{key}" in explicit and given != saved.get(key):
                raise ValueError(f"--resume: --{key}={given} but the run in {known.logdir} was "
                                 f"made with {key}={saved.get(key)!r}")
            setattr(known, key, saved.get(key, given))
    rest = list(rest) + (["--logdir", known.logdir] if known.logdir else []) + (
        ["--resume"] if known.resume else [])
    agent = get_agent(known.agent, agents)
    check_env_name(known.env)
    cls = config_class(agent.name, agent.config_cls)
    rest, inference_flags = modes.split_inference_flags(rest)  # --remote_inference, ...
    rest = switches.normalize(rest, switches.switch_names(cls))  # --x=false -> --no_x
    cfg = cls(agent=known.agent, env=known.env)
    for path in known.config:
        if not os.path.isfile(path):
            raise ValueError(f"--config {path!r}: no such file")
    if saved is not None:
        known_keys = {f.name for f in dataclasses.fields(cls)} - {"agent", "env", "logdir", "resume",
                                                                    "overwrite"}
        saved = modes.current_record(saved, RunDir(known.logdir).config_path)  # older keys
        fields = {k: v for k, v in saved.items() if k in known_keys}  # older/newer keys: skipped
        cfg = layers.apply_table(cfg, fields, RunDir(known.logdir).config_path)
    else:
        for path in (layers.config_file_for(known.env),
                     layers.agent_config_file_for(known.env, agent.name)):
            if os.path.exists(path):
                cfg = layers.apply_file(cfg, path)
    for path in known.config:
        cfg = layers.apply_file(cfg, path)
    if inference_flags:
        cfg = dataclasses.replace(cfg, inference=modes.resolve_inference(
            cfg.inference, inference_flags, modes.CLI))
    cfg = tyro.cli(cls, default=cfg, args=list(rest) + ["--agent", known.agent, "--env", known.env],
                   use_underscores=True, prog="train.py", description=help_text(agents))
    if env_kwargs:
        cfg = dataclasses.replace(cfg, env_kwargs={**(cfg.env_kwargs or {}), **env_kwargs})
    cfg.validate()
    return cfg


def _saved_config(logdir: str) -> dict | None:
    """``LOGDIR/config.json`` of an earlier run (``None`` if there is none).

    Raises:
      ValueError: the file exists but is not a JSON object.
    """
    run = RunDir(logdir) if logdir else None
    if run is None or not os.path.exists(run.config_path):
        return None
    try:
        return run.read_config()
    except (OSError, ValueError) as exc:
        raise ValueError(f"--resume: {exc}") from None


def to_dict(cfg: Any) -> dict:
    """Plain-data form of a config (for ``config.json``)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=str))

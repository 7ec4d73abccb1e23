"""The run's modes, the one table of mode pairs a run refuses, and the inference aliases.

A *mode* is a setting that changes what gets built (where processes run, where
inference runs, several learner processes, a population, ...). :data:`MODES` names each
one with how it is detected on a config and how its flag is written; :data:`REFUSED`
lists every pair of modes that cannot run together, with the reason. :func:`check`
walks the table once per config (``RunConfig.validate``) and raises the first refusal
as one line naming both flags: ``--inference=process does not work with
--launcher=serial: it runs inference servers as processes``. Checks of one value, or
of values of one section, stay with their section (:mod:`jaxsrl.experiment.sections`).

Inference is one choice, ``--inference=auto|thread|process|inline``. The older
spellings are aliases resolved here and only here (:func:`resolve_inference`, applied
per layer: each TOML file, a resumed run's ``config.json``, the command line):

==========================================  =======================================
``--remote_inference`` (key ``remote_inference = true``)  ``process``
``--no_remote_inference`` (``false``)                     ``thread`` if it was ``process``
``--inline_inference`` (``inline_inference = true``)      ``inline``
``--no_inline_inference`` (``false``)                     ``thread`` (``process`` stays)
``--inference=server``                                    ``thread`` (``process`` stays)
==========================================  =======================================

An alias that contradicts a mode given in the same layer is refused in one line.

Placements: :data:`FIELDS` lists every run field with the placements of the actors it
applies on (``cpu``: actor processes; ``device``: a JAX-native ``--env`` stepped inside
the compiled step) and, where it does not apply, why. :func:`check` refuses a field set
to a value other than its dataclass default on a placement where it does not apply, in
one line naming the field: ``--num_actors=4 does not apply to device actors
(--env=gymnax:CartPole-v1): ...`` (``docs/device_actors.md``, "Which settings apply").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from jaxsrl.envs.jax_native import is_jax_native

#: The values of ``--inference``: ``thread``: inference servers are threads of the learner
#: process; ``process``: each server is a process of its own; ``inline``: each actor runs
#: ``act`` itself; ``auto``: inline or thread, resolved when the run starts
#: (:func:`jaxsrl.experiment.inline.auto_mode`).
INFERENCE = ("auto", "thread", "process", "inline")
#: Older keys of the inference mode (switches), still read from flags and files.
ALIAS_KEYS = ("remote_inference", "inline_inference")
#: The command-line spellings of :data:`ALIAS_KEYS`.
ALIAS_FLAGS = frozenset(f"--{no}{k}" for k in ("remote_inference", "inline_inference")
                        for no in ("", "no_"))
#: The older value ``server``: inference servers, threads unless already processes.
SERVER = "server"
#: ``where`` of the command-line layer (its messages name flags).
CLI = "the command line"


def resolve_inference(prior: str, given: Mapping[str, Any], where: str) -> str:
    """The inference mode after one layer (a file, the command line) set ``given``.

    Args:
      prior: the mode before this layer (one of :data:`INFERENCE`).
      given: the layer's values of ``inference`` and of the :data:`ALIAS_KEYS` (only
        those it sets).
      where: the layer, for messages (a path, ``"the command line"``).

    Returns:
      One of :data:`INFERENCE`.

    Raises:
      ValueError: one line: an unknown mode, an alias that is not true/false, or two
        keys of the layer that contradict each other (naming both).
    """
    mode = given.get("inference")
    if mode is not None and mode not in INFERENCE + (SERVER,):
        raise ValueError(f"{where}: inference={mode!r} must be one of {', '.join(INFERENCE)}")
    for key in ALIAS_KEYS:
        if key in given and not isinstance(given[key], bool):
            raise ValueError(f"{where}: {key}={given[key]!r} must be true or false")
    base = prior if mode is None else mode
    if base == SERVER:
        base = "process" if prior == "process" else "thread"
    remote, inline = given.get("remote_inference"), given.get("inline_inference")

    def said(key: str, value: Any) -> str:  # as the layer wrote it
        if where != CLI:
            return f"{key}={str(value).lower() if isinstance(value, bool) else repr(value)}"
        return f"--{key}={value}" if key == "inference" else f"--{'' if value else 'no_'}{key}"

    def clash(key: str, value: bool) -> ValueError:
        return ValueError(f"{where}: {said(key, value)} contradicts {said('inference', mode)} "
                          "(keep one of them: --inference=auto|thread|process|inline)")

    if inline is True:
        if mode not in (None, "inline"):
            raise clash("inline_inference", True)
        if remote is True:
            raise ValueError(f"{where}: {said('inline_inference', True)} contradicts "
                             f"{said('remote_inference', True)} "
                             "(inline starts no inference server: keep one of them)")
        return "inline"
    if inline is False:
        if mode not in (None, SERVER, "thread", "process"):
            raise clash("inline_inference", False)
        base = "process" if base == "process" or remote is True else "thread"
    if remote is True:
        if mode not in (None, SERVER, "process", "auto"):
            raise clash("remote_inference", True)
        return "process"
    if remote is False:
        if mode == "process":
            raise clash("remote_inference", False)
        if base == "process":
            return "thread"
    return base


def split_inference_flags(args: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """Take ``--inference``, ``--remote_inference`` and ``--inline_inference`` (with their
    ``--no_`` and ``=true|false|1|0`` forms) out of the command line ``args``.

    Returns:
      The other arguments, and the values given (the last of each key), for
      :func:`resolve_inference`.

    Raises:
      ValueError: ``--inference`` without a value, or an alias switch given a value
        other than true/false/1/0.
    """
    words = {"true": True, "false": False, "1": True, "0": False}
    rest: list[str] = []
    given: dict[str, Any] = {}
    i = 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        i += 1
        flag, eq, value = arg.partition("=")
        if flag == "--inference":
            if not eq:
                if i >= len(args):
                    raise ValueError("--inference: needs a value, one of " + "|".join(INFERENCE))
                value, i = args[i], i + 1
            given["inference"] = value
            continue
        key = flag.removeprefix("--")
        negated = key.removeprefix("no_")
        if negated not in ALIAS_KEYS:
            rest.append(arg)
            continue
        sense = key == negated
        if not eq and i < len(args) and args[i].lower() in words:
            value, eq, i = args[i], "=", i + 1
        if eq:
            if value.lower() not in words:
                raise ValueError(f"{arg}: --{negated} is a switch; write --{negated} or "
                                 f"--no_{negated} (or --{negated}=true / --{negated}=false)")
            sense = words[value.lower()] == sense
        given[negated] = sense
    return rest, given


def inference_of_table(prior: str, data: Mapping[str, Any], where: str) -> tuple[dict, str | None]:
    """``data`` (a TOML table or a ``config.json``) without the inference keys, and the
    mode they give after ``prior`` (``None`` if the table sets none)."""
    keys = ("inference",) + ALIAS_KEYS
    given = {k: data[k] for k in keys if k in data}
    rest = {k: v for k, v in data.items() if k not in keys}
    return rest, (resolve_inference(prior, given, where) if given else None)


def current_record(data: Mapping[str, Any], path: str) -> dict:
    """A run's ``config.json`` (``data``, read from ``path``) with its inference keys as
    today's code writes them: the older keys resolved into ``inference``; one without
    ``inference`` or ``inline_inference`` predates the setting, and ran inference servers.

    Raises:
      ValueError: contradicting or malformed inference keys (one line naming ``path``).
    """
    if not any(k in data for k in ALIAS_KEYS) and data.get("inference") != SERVER \
            and "inference" in data:
        return dict(data)
    if "inference" not in data and "inline_inference" not in data:
        data = {**data, "inference": SERVER}
    rest, mode = inference_of_table("auto", data, path)
    return {**rest, "inference": mode}


# -- modes and the table of refused pairs ---------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mode:
    """One mode: ``on(cfg, flow)`` says whether a run uses it, ``flag(cfg)`` how it was
    given (for messages)."""

    name: str
    on: Callable[[Any, Any], bool]
    flag: Callable[[Any], str]


def _launcher(name: str) -> Mode:
    return Mode(f"launcher={name}", lambda c, f: c.launcher == name, lambda c: f"--launcher={name}")


def _inference(name: str) -> Mode:
    return Mode(f"inference={name}", lambda c, f: c.inference == name,
                lambda c: f"--inference={name}")


def _any_prefix(groups: Sequence[Any]) -> str:
    return next(g.name for g in groups if g.launch_prefix)


_MODES = [
    _launcher("local"), _launcher("serial"), _launcher("ray"),
    Mode("not launcher=ray", lambda c, f: c.launcher != "ray", lambda c: "--launcher=ray"),
    _inference("thread"), _inference("process"), _inference("inline"),
    Mode("not inference=process", lambda c, f: c.inference != "process",
         lambda c: "--inference=process"),
    Mode("learner processes", lambda c, f: c.num_learner_processes > 1,
         lambda c: f"--num_learner_processes={c.num_learner_processes}"),
    Mode("off-policy agent", lambda c, f: bool(getattr(c.agent_config(), "OFF_POLICY", False)),
         lambda c: f"--agent={c.agent}"),
    Mode("coordinator address", lambda c, f: bool(c.coordinator_address),
         lambda c: f"--coordinator_address={c.coordinator_address}"),
    Mode("curve", lambda c, f: bool(c.curve), lambda c: "--curve"),
    Mode("periodic evaluation", lambda c, f: c.eval_every > 0,
         lambda c: f"--eval_every={c.eval_every}"),
    Mode("population", lambda c, f: bool(c.population), lambda c: f"--population={c.population}"),
    Mode("opponents", lambda c, f: c.opponents.enabled,
         lambda c: f"--opponents.snapshot_every={c.opponents.snapshot_every}"),
    Mode("dataflow table", lambda c, f: bool(c.dataflow), lambda c: "a [dataflow] table"),
    Mode("several trainers", lambda c, f: len(f.trainers) != 1,
         lambda c: "a dataflow of several trainers"),
    Mode("inference servers", lambda c, f: c.inference_servers != 1,
         lambda c: f"--inference_servers={c.inference_servers}"),
    Mode("server count", lambda c, f: any(w.count != 1 for w in f.policy_workers),
         lambda c: "a [dataflow] policy worker with count > 1"),
    Mode("inference deadline", lambda c, f: bool(c.inference_deadline_ms),
         lambda c: f"--inference_deadline_ms={c.inference_deadline_ms:g}"),
    Mode("server launch_prefix", lambda c, f: any(w.launch_prefix for w in f.policy_workers),
         lambda c: f"the launch_prefix of policy worker {_any_prefix(c.flow.policy_workers)!r}"),
    Mode("actor launch_prefix", lambda c, f: any(a.launch_prefix for a in f.actors),
         lambda c: f"the launch_prefix of actor group {_any_prefix(c.flow.actors)!r}"),
    Mode("ray address", lambda c, f: bool(c.ray_address), lambda c: f"--ray_address={c.ray_address}"),
    Mode("actor resources", lambda c, f: bool(c.actor_resources),
         lambda c: f"--actor_resources={c.actor_resources}"),
    Mode("learner resources", lambda c, f: bool(c.learner_resources),
         lambda c: f"--learner_resources={c.learner_resources}"),
]
#: Every mode by name.
MODES: dict[str, Mode] = {m.name: m for m in _MODES}


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Modes ``first`` and ``second`` (names in :data:`MODES`) cannot run together: ``why``.
    ``verb`` joins the two flags in the message (``needs`` where ``second`` is the
    absence of a mode, e.g. ``--ray_address=auto needs --launcher=ray``)."""

    first: str
    second: str
    why: str
    verb: str = "does not work with"

    def applies(self, cfg: Any, flow: Any) -> bool:
        return MODES[self.first].on(cfg, flow) and MODES[self.second].on(cfg, flow)

    def message(self, cfg: Any) -> str:
        return f"{MODES[self.first].flag(cfg)} {self.verb} {MODES[self.second].flag(cfg)}: {self.why}"


_SERIAL = "the serial launcher runs every worker in this one process, but"

#: Every pair of modes a run refuses, with the reason (first match wins).
REFUSED: tuple[Refusal, ...] = (
    # --launcher=serial: one process, actors as threads
    Refusal("inference=process", "launcher=serial", f"{_SERIAL} inference servers would be processes"),
    Refusal("learner processes", "launcher=serial", f"{_SERIAL} learner processes are processes"),
    Refusal("coordinator address", "launcher=serial", f"{_SERIAL} this joins learner processes"),
    Refusal("curve", "launcher=serial", f"{_SERIAL} actors get their CURVE keys through "
            "their process environment"),
    Refusal("periodic evaluation", "launcher=serial", f"{_SERIAL} periodic evaluation runs in "
            "a process of its own"),
    Refusal("actor launch_prefix", "launcher=serial", f"{_SERIAL} its actors are threads"),
    # Ray settings without Ray
    Refusal("ray address", "not launcher=ray", "it addresses a Ray cluster", "needs"),
    Refusal("actor resources", "not launcher=ray", "resources are asked of Ray", "needs"),
    Refusal("learner resources", "not launcher=ray", "resources are asked of Ray", "needs"),
    # inference placement
    Refusal("server launch_prefix", "not inference=process", "it places server processes "
            "(local servers are threads of the learner)", "needs"),
    Refusal("inference servers", "dataflow table", "it applies to the default dataflow only; "
            "with a [dataflow] table set count on its policy_workers"),
    Refusal("opponents", "inference=inline", "opponent snapshots are served by inference servers "
            "(set opponents.snapshot_every=0 or --inference=thread)"),
    Refusal("inference servers", "inference=inline", "no inference server runs, the actors act "
            "(a resumed run keeps its config.json's mode: add --inference=thread)"),
    Refusal("inference deadline", "inference=inline", "there is no server to batch requests "
            "(add --inference=thread)"),
    Refusal("server count", "inference=inline", "no inference server runs, the actors act"),
    # population and self-play opponents
    Refusal("population", "dataflow table", "a population builds its own dataflow (one actor "
            "group, inference server and trainer per member): drop the [dataflow] table"),
    Refusal("population", "learner processes", "population members train in one learner process"),
    # several learner processes
    Refusal("learner processes", "several trainers", "the learner processes train one policy"),
    Refusal("off-policy agent", "learner processes", "an off-policy agent learns in one "
            "process (its replay lives on that process's device)"),
    Refusal("curve", "learner processes", "the learner processes' streams are not encrypted yet"),
    Refusal("opponents", "inference=process", "snapshots are served by local inference servers "
            "of one learner process"),
    Refusal("opponents", "population", "snapshots are served by local inference servers of one "
            "learner process"),
    Refusal("opponents", "learner processes", "snapshots are served by local inference servers "
            "of one learner process"),
)


def refusal(cfg: Any, flow: Any) -> Refusal | None:
    """The first row of :data:`REFUSED` that run config ``cfg`` (graph ``flow``) hits."""
    return next((r for r in REFUSED if r.applies(cfg, flow)), None)


def check(cfg: Any, flow: Any) -> None:
    """Raise ``ValueError`` (one line) if ``cfg`` sets a field that does not apply on its
    placement (:data:`FIELDS`, :func:`placement_refusal`: naming the field, its value and
    why), else if it uses a pair of modes of :data:`REFUSED` (naming both flags and why)."""
    message = placement_refusal(cfg)
    if message is not None:
        raise ValueError(message)
    hit = refusal(cfg, flow)
    if hit is not None:
        raise ValueError(hit.message(cfg))


# -- the table of fields by placement ----------------------------------------------------

#: The two placements of a run's actors: ``cpu``: actor processes step Gymnasium /
#: PettingZoo envs on CPU cores (any ``--env`` that is not JAX-native); ``device``: a
#: JAX-native ``--env`` (``gymnax:``, ``brax:``, ``jaxmarl:``, ``jax:``) is stepped next
#: to the policy inside one compiled step (``docs/device_actors.md``).
PLACEMENTS = ("cpu", "device")


def placement(cfg: Any) -> str:
    """``"device"`` if run config ``cfg``'s ``env`` is JAX-native, else ``"cpu"``."""
    return "device" if is_jax_native(cfg.env) else "cpu"


@dataclasses.dataclass(frozen=True)
class Field:
    """Where run field ``name`` applies. ``cpu`` / ``device``: ``None`` where it applies
    on that placement, else why it does not (the end of its one-line refusal).
    ``allowed(value) -> bool``: the values accepted where it does not apply (default:
    only the dataclass default, so a field left alone never refuses a run)."""

    name: str
    device: str | None = None
    cpu: str | None = None
    allowed: Callable[[Any], bool] | None = None

    def why_not(self, where: str) -> str | None:
        """Why the field does not apply on placement ``where`` (``None``: it applies)."""
        return self.device if where == "device" else self.cpu


_NO_ACTORS = ("device actors step batch_segments environments inside the compiled step, "
              "with no actor processes")
_NO_SERVER = "device actors act inside the compiled step, with no inference server"
_NO_RAY = "device actors run in the launcher's process, without Ray"
_NO_LEARNERS = ("device actors train in one process (one compiled step over its local "
                "devices)")
_NO_SOCKETS = "device actors open no sockets: nothing crosses a stream"

#: Every field of :class:`~jaxsrl.experiment.config.RunConfig`, in its order, with the
#: placements it applies on (``tests/unit/test_modes.py`` fails on a field missing
#: here). The agent's own hyperparameters (``--ppo.*``) apply on both. A value that
#: differs from the dataclass default (and is not ``allowed``) where the field does not
#: apply is refused by :func:`check`, before the run folder is touched; files of
#: ``configs/`` picked for a JAX-native env set only fields that apply there.
FIELDS: tuple[Field, ...] = (
    Field("agent"), Field("env"), Field("total_env_steps"),
    Field("num_actors", _NO_ACTORS), Field("envs_per_actor", _NO_ACTORS),
    Field("ring_size", _NO_ACTORS),
    Field("segment_length"), Field("batch_segments"),
    Field("max_staleness", "device actors have no segments in flight to drop (on-policy: "
          "zero staleness; off-policy: items age in the on-device replay)"),
    Field("inference_deadline_ms", _NO_SERVER), Field("inference_servers", _NO_SERVER),
    Field("inference", "device actors act on the accelerator; leave --inference at auto"),
    Field("param_publish_interval_s", _NO_SERVER + " to publish parameters to"),
    Field("inference_failover_s", _NO_SERVER), Field("max_server_restarts", _NO_SERVER),
    Field("seed"), Field("logdir"), Field("resume"), Field("overwrite"),
    Field("log_interval_s"), Field("checkpoint_interval_s"), Field("keep_checkpoints"),
    Field("save_replay", "the device actors' on-device replay is not checkpointed yet (a "
          "resumed run refills it)"),
    Field("target_return"),
    Field("host", _NO_SOCKETS), Field("curve", _NO_SOCKETS),
    Field("actor_timeout_s", _NO_ACTORS), Field("actor_heartbeat_timeout_s", _NO_ACTORS),
    Field("eval_every"), Field("eval_episodes"),
    Field("max_actor_restarts", _NO_ACTORS),
    Field("on_nonfinite"), Field("compilation_cache_dir"),
    Field("num_learner_processes", _NO_LEARNERS),
    Field("coordinator_address", _NO_LEARNERS), Field("spawn_learner_processes", _NO_LEARNERS),
    Field("launcher", _NO_RAY, allowed=lambda v: v in ("local", "serial")),
    Field("ray_address", _NO_RAY), Field("actor_cpus", _NO_RAY), Field("learner_cpus", _NO_RAY),
    Field("learner_gpus", _NO_RAY), Field("actor_resources", _NO_RAY),
    Field("learner_resources", _NO_RAY),
    Field("clip_actions"), Field("env_kwargs"),
    Field("dataflow", "device actors build their own graph (one policy, or one per "
          "population member)"),
    Field("population"), Field("pbt"),
    Field("opponents", "opponent snapshots are served by inference servers, which device "
          "actors do not have"),
)
#: :data:`FIELDS` by field name.
FIELDS_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}


def _default(cfg: Any, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cfg) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _flag(name: str, value: Any, default: Any) -> str:
    """How a user writes ``value`` of field ``name`` (the first changed key of a
    dataclass-valued one: ``--opponents.snapshot_every=4``)."""
    if dataclasses.is_dataclass(value) and dataclasses.is_dataclass(default):
        for f in dataclasses.fields(value):
            if getattr(value, f.name) != getattr(default, f.name):
                return _flag(f"{name}.{f.name}", getattr(value, f.name), getattr(default, f.name))
    if isinstance(value, dict):
        return f"a [{name}] table"
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no_{name}"
    return f"--{name}={value}"


def placement_refusal(cfg: Any) -> str | None:
    """The one-line refusal of the first field of :data:`FIELDS` that run config ``cfg``
    sets, on its :func:`placement`, to a value that does not apply there (``None``: all
    apply), e.g. ``--num_actors=4 does not apply to device actors (--env=gymnax:CartPole-v1):
    device actors step ... (docs/device_actors.md)``."""
    where = placement(cfg)
    for row in FIELDS:
        why = row.why_not(where)
        if why is None:
            continue
        value, default = getattr(cfg, row.name), _default(cfg, row.name)
        if value == default or (row.allowed is not None and row.allowed(value)):
            continue
        place = (f"device actors (--env={cfg.env})" if where == "device"
                 else "CPU actors")
        return (f"{_flag(row.name, value, default)} does not apply to {place}: {why} "
                "(docs/device_actors.md)")
    return None

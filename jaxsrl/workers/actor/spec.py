"""The actor process's spec: what the launcher tells an actor (its only argument, JSON).

:class:`ActorSpec` is the typed form; ``ActorSpec.from_dict(json.loads(argv[1]))`` in
the actor, ``ActorSpec(...).to_dict()`` for whoever starts one. No JAX here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


def _check_keys(cls: type, data: Mapping, what: str) -> None:
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [k for k in required if k not in data]
    if missing:
        raise ValueError(f"{what} lacks {missing} (has {sorted(data)})")


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """One policy's streams as an actor uses them.

    Attributes:
      policy: the policy's name.
      sample_address: its learner's sample socket (``tcp://host:port``).
      inference_addresses: its inference servers, the actor's own first, then the
        fallbacks it fails over to (see ``jaxsrl/launch/topology.py``); empty for an
        inline actor (it acts itself: :mod:`jaxsrl.workers.inline`).
      team: the rows it serves: the agents of this team (``None``: every row).
      sample_hwm: segments queued on the sample socket before the actor blocks
        (backpressure; small, so a slow learner slows the actors).
      sample_sndbuf: the sample socket's kernel send buffer in bytes (-1: the OS
        default); small for replay learners, so few segments wait in flight
        (``TrainerWorker.sample_buffer_bytes``).
    """

    policy: str
    sample_address: str
    inference_addresses: tuple
    team: str | None = None
    sample_hwm: int = 2
    sample_sndbuf: int = -1

    @property
    def inference_address(self) -> str | None:
        """The actor's own server (``None``: an inline actor's stream)."""
        return self.inference_addresses[0] if self.inference_addresses else None

    @classmethod
    def from_dict(cls, data: Mapping, inline: bool = False) -> "StreamSpec":
        """From the JSON form (``inference_address`` alone, or ``inference_addresses``).

        Args:
          data: the JSON form.
          inline: the stream of an inline actor, which needs no inference address.

        Raises:
          ValueError: a key is missing or (not ``inline``) no inference address is given.
        """
        addresses = tuple(data.get("inference_addresses") or
                          ([data["inference_address"]] if data.get("inference_address") else []))
        if not addresses and not inline:
            raise ValueError(f"actor stream spec has no inference_address: {dict(data)}")
        _check_keys(cls, {**data, "inference_addresses": addresses}, "actor stream spec")
        return cls(policy=data["policy"], sample_address=data["sample_address"],
                   inference_addresses=addresses, team=data.get("team"),
                   sample_hwm=int(data.get("sample_hwm", 2)),
                   sample_sndbuf=int(data.get("sample_sndbuf", -1)))

    def to_dict(self) -> dict:
        return {"policy": self.policy, "team": self.team, "sample_address": self.sample_address,
                "inference_address": self.inference_address,
                "inference_addresses": list(self.inference_addresses), "sample_hwm": self.sample_hwm,
                "sample_sndbuf": self.sample_sndbuf}


@dataclasses.dataclass(frozen=True)
class ActorSpec:
    """Everything one actor process needs (see ``jaxsrl/workers/actor/worker.py``).

    Attributes:
      actor_id: the actor's index in the run (the servers' actor table key).
      run_id: this process's run of the actor (a restarted actor gets a new one).
      env, env_kwargs: ``--env`` and ``--env_kwargs``.
      envs_per_group: environments per ring slot; ring_size: ring slots.
      segment_length: ``T`` steps per segment.
      seed: base environment seed (slot ``g`` of actor ``i`` seeds
        ``seed + 10_000 i + envs_per_group g``).
      streams: one :class:`StreamSpec` per policy the actor feeds.
      carry_spec: ``[[name, dtype, per-row shape], ...]`` of the agent's recurrent state.
      timeout_s: longest silence of a stream's servers once they answered (seconds).
      startup_timeout_s: the same before the first answer (servers compile; default
        ``max(300, timeout_s)``).
      failover_s: silence of one server before trying the next one.
      sample_timeout_s: longest wait for the learner to take a segment (default
        ``10 * timeout_s``).
      ping_interval_s: seconds between ``ping`` messages while blocked on the learner.
      parent_pid: die with this process (``None``: do not).
      error_file: where a failing environment's traceback goes (``None``: nowhere).
      curve_server_key: z85 server public key: every socket is a CURVE client of it
        (the actor's keypair comes from its environment); ``None``: no CURVE.
      opponents: self-play opponent pools (``{"p_latest": float}``,
        ``jaxsrl/workers/actor/opponents.py``), or ``None``.
      clip_actions: clip ``Box`` actions to the space's bounds (``--clip_actions``).
      inline: inline inference (``--inference=inline``): what the actor needs to run the
        policy itself (``param_address``, ``status_address``, the agent's spec keys; see
        :mod:`jaxsrl.workers.inline`), or ``None``: its inference servers act.
      kept_carry: its inference servers keep each group's carry between requests
        (:mod:`jaxsrl.streams.kept_carry`: requests send ``carry_kept`` in place of the
        carry when they can); the launcher's actors do (jaxsrl's policy workers all keep
        it), ``False`` for servers that do not (the carry always travels).
      obs_pack: send the observations of an env that declares boolean columns
        (``wire_bits``) packed (:mod:`jaxsrl.streams.obs_pack`) in segments, and in requests
        to its inference servers (not to an inline client); the launcher's actors do.
    """

    actor_id: int
    run_id: int
    env: str
    envs_per_group: int
    ring_size: int
    segment_length: int
    seed: int
    streams: tuple
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    carry_spec: tuple = ()
    timeout_s: float = 30.0
    startup_timeout_s: float | None = None
    failover_s: float = 5.0
    sample_timeout_s: float | None = None
    ping_interval_s: float = 1.0
    parent_pid: int | None = None
    error_file: str | None = None
    curve_server_key: str | None = None
    opponents: dict | None = None
    clip_actions: bool = True
    inline: dict | None = None
    kept_carry: bool = False
    obs_pack: bool = False

    def __post_init__(self):
        if self.startup_timeout_s is None:
            object.__setattr__(self, "startup_timeout_s", max(300.0, float(self.timeout_s)))
        if self.sample_timeout_s is None:
            object.__setattr__(self, "sample_timeout_s", 10 * float(self.timeout_s))
        for name in ("envs_per_group", "ring_size", "segment_length"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"actor spec {name}={getattr(self, name)!r} must be >= 1")
        if not self.streams:
            raise ValueError("actor spec has no streams")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ActorSpec":
        """From the JSON form the launcher sends (unknown keys are ignored).

        Raises:
          ValueError: a required key is missing or a value is out of range.
        """
        _check_keys(cls, data, "actor spec")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        inline = bool(data.get("inline"))
        values["streams"] = tuple(s if isinstance(s, StreamSpec) else StreamSpec.from_dict(s, inline)
                                  for s in data["streams"])
        values["carry_spec"] = tuple((n, d, tuple(s)) for n, d, s in data.get("carry_spec") or ())
        values["env_kwargs"] = dict(data.get("env_kwargs") or {})
        for name in ("actor_id", "run_id", "envs_per_group", "ring_size", "segment_length", "seed"):
            values[name] = int(values[name])
        for name in ("timeout_s", "startup_timeout_s", "failover_s", "sample_timeout_s",
                     "ping_interval_s"):
            if name in values:
                values[name] = float(values[name])
        return cls(**values)

    def to_dict(self) -> dict:
        """The JSON form (what :meth:`from_dict` reads)."""
        out = dataclasses.asdict(self)
        out["streams"] = [s.to_dict() for s in self.streams]
        out["carry_spec"] = [[n, d, list(s)] for n, d, s in self.carry_spec]
        return out

"""The buffer process's spec: what the launcher tells a buffer process (its only
argument, JSON).

:class:`BufferProcessSpec` is the typed form, shared by the launcher
(``jaxsrl/launch/buffer_processes.py``, which builds one per shard and ``to_dict``'s
it) and the process (``BufferProcessSpec.from_dict(read_spec())``). No JAX here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class BufferProcessSpec:
    """Everything one buffer process needs (see ``jaxsrl/workers/buffer/server.py``).

    Attributes:
      name: process name (logs, errors), e.g. ``replay[0]``.
      agent, agent_config, env, env_kwargs: the agent, as
        :func:`jaxsrl.experiment.agent_build.agent_spec` gives them (its ``to_items``
        and ``ReplaySpec`` are used).
      planned_updates: the trainer's planned ``learn`` calls (the horizon of beta).
      segment_length: ``T`` of the segments.
      max_rows: most rows one segment may have.
      shard, shards: this process's index among the buffer's ``shards`` processes.
      capacity, min_fill: this shard's capacity and minimum fill in items (the
        ``ReplaySpec``'s divided among the shards, rounded up).
      host: interface to bind; sample_port, request_port: ports to bind (0: free ones;
        a restarted process gets its previous ones, where actors and the trainer
        reconnect by themselves).
      status_address: the launcher's status socket (PULL).
      max_staleness: segments whose oldest action is more versions behind the
        learner's newest known version are dropped (0: none).
      on_nonfinite: ``"drop"`` (segments with NaN or Inf are dropped and counted) or
        ``"raise"`` (the process stops with an error and the run stops naming it).
      idle_rows: segments carry ``valid`` flags (multi-agent environments).
      run_id: this run of the process (a restarted one gets a new one; set by
        :class:`~jaxsrl.launch.processes.ChildProcess`).
      parent_pid, error_file, compilation_cache_dir: as for every worker process.
      status_interval_s: seconds between two ``buffer_status`` messages.
    """

    name: str
    agent: str
    env: str
    planned_updates: int
    segment_length: int
    max_rows: int
    capacity: int
    min_fill: int
    status_address: str
    agent_config: dict = dataclasses.field(default_factory=dict)
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    shard: int = 0
    shards: int = 1
    host: str = "127.0.0.1"
    sample_port: int = 0
    request_port: int = 0
    max_staleness: int = 0
    on_nonfinite: str = "drop"
    idle_rows: bool = False
    run_id: int = 0
    parent_pid: int | None = None
    error_file: str | None = None
    compilation_cache_dir: str | None = None
    status_interval_s: float = 0.5

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BufferProcessSpec":
        """From the JSON form.

        Raises:
          ValueError: a required key is missing, an unknown key, or a bad value
            (``on_nonfinite``, ``shard`` outside ``0..shards-1``, a capacity or
            minimum fill below 1).
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ValueError(f"buffer process spec: unknown keys {unknown}")
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"buffer process spec lacks {missing} (has {sorted(data)})")
        spec = cls(**dict(data))
        spec.check()
        return spec

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad value."""
        if self.on_nonfinite not in ("drop", "raise"):
            raise ValueError(f"on_nonfinite={self.on_nonfinite!r} must be 'drop' or 'raise'")
        if not 0 <= self.shard < self.shards:
            raise ValueError(f"shard={self.shard} is outside 0..{self.shards - 1}")
        for key in ("capacity", "min_fill", "planned_updates", "segment_length", "max_rows"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"buffer process spec: {key}={getattr(self, key)} must be >= 1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

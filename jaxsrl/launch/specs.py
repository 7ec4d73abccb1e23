"""The actor processes' specs, built in one place from the run config.

Every starter of actor processes (the launcher's builders, the serial spawner and Ray,
which receive what the builders made, and the benchmark) builds them here, as
:class:`~jaxsrl.workers.actor.spec.ActorSpec` and
:class:`~jaxsrl.workers.actor.spec.StreamSpec` (checked on construction) in their JSON
form, so no starter can leave out a setting of the config (``--clip_actions``, ...).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from jaxsrl.workers.actor.spec import ActorSpec, StreamSpec


def stream_spec(policy: str, sample_address: str, inference_addresses: Sequence[str] = (),
                team: str | None = None, sample_hwm: int = 2,
                sample_sndbuf: int = -1) -> StreamSpec:
    """One policy's streams as an actor uses them (fields: :class:`StreamSpec`);
    ``inference_addresses`` empty for an inline actor."""
    return StreamSpec(policy=policy, sample_address=sample_address,
                      inference_addresses=tuple(inference_addresses), team=team,
                      sample_hwm=sample_hwm, sample_sndbuf=sample_sndbuf)


def actor_spec(cfg: Any, actor_id: int, streams: Sequence[StreamSpec], carry_spec: Sequence,
               *, envs_per_actor: int | None = None, seed: int | None = None,
               error_file: str | None = None, curve_server_key: str | None = None,
               opponents: dict | None = None, inline: dict | None = None) -> dict:
    """The JSON spec of one actor process: :meth:`ActorSpec.to_dict` without ``run_id``
    (each start of the process gets its own, :class:`~jaxsrl.launch.processes.ChildProcess`).

    Args:
      cfg: the run config (env, ring, segment length, timeouts, ``clip_actions``).
      actor_id: the actor's index in the run.
      streams: one :class:`StreamSpec` per policy the actor feeds.
      carry_spec: ``[[name, dtype, per-row shape], ...]`` of the agent's recurrent state.
      envs_per_actor: environments of the process (default ``cfg.envs_per_actor``).
      seed: base environment seed (default ``cfg.seed``).
      error_file, curve_server_key, opponents, inline: see :class:`ActorSpec`.

    Raises:
      ValueError: a value :class:`ActorSpec` refuses (no streams, ``envs_per_actor``
        below ``ring_size``, ...).
    """
    spec = ActorSpec(
        actor_id=actor_id, run_id=0, env=cfg.env, env_kwargs=dict(cfg.env_kwargs or {}),
        envs_per_group=(envs_per_actor or cfg.envs_per_actor) // cfg.ring_size,
        ring_size=cfg.ring_size, segment_length=cfg.segment_length,
        seed=cfg.seed if seed is None else seed, streams=tuple(streams),
        carry_spec=tuple((n, d, tuple(s)) for n, d, s in carry_spec),
        timeout_s=cfg.actor_timeout_s, failover_s=cfg.inference_failover_s,
        parent_pid=os.getpid(), error_file=error_file, curve_server_key=curve_server_key,
        opponents=opponents, clip_actions=cfg.clip_actions, inline=inline,
        kept_carry=True,  # its servers are jaxsrl's policy workers (jaxsrl.streams.kept_carry)
        obs_pack=True)  # and its receivers unpack observations (jaxsrl.streams.obs_pack)
    out = spec.to_dict()
    del out["run_id"]
    return out

"""Scaling model: projected training throughput at cluster scale from measured costs.

Throughput of an SRL-style dataflow is the minimum of the ceilings of its stages
(SRL, Mei et al. 2023, section 5: actors, inference, learner and the network are
provisioned separately, so each is a separate ceiling):

* **actors**: ``actor_cores * env_steps_per_core * (1 - actor_overhead)``; the
  overhead is the share of an actor core spent outside ``env.step`` (encoding,
  sockets, waiting) at steady state, measured by the bench ladder.
* **inference**: ``gpus_inference * gpu_flops_inference / act_flops_per_env_step``.
* **learner**: ``gpus_learner * gpu_flops_learner / learn_flops_per_env_step`` with
  ``learn_flops = 3 * epochs * act_flops`` (forward + backward is about three
  forwards, Kaplan et al. 2020, section 2.1) for each of ``agents`` rows per env step.
* **server CPU**: inference servers decode/encode each request on a CPU core:
  ``server_cores * requests_per_core_s * env_steps_per_request`` (``requests_per_core_s``
  = 1e6 / the server's CPU µs per request, measured by the bench's fan-in rung).
* **network**: bytes per env step (observations up, actions + carry down, the
  trajectory again to the learner) against the NIC bandwidth of the accelerator
  hosts (one per ``gpus_per_host`` GPUs).

GPUs are split between inference and learning in proportion to their work (what a
user sizing SRL's inference and trainer workers would do). Nothing here is measured
on a GPU: the effective FLOP/s per GPU is an input, stated in the report.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Costs:
    """Per-unit costs of one workload (environment + model + layout).

    Attributes:
      name: workload label.
      env_steps_per_core: env steps/s of one actor core stepping random actions.
      actor_overhead: share (0..1) of an actor core not spent in ``env.step`` when fed.
      agents: rows (agents) per env step.
      act_flops_per_row: FLOPs of one ``act`` row (XLA cost analysis).
      epochs: PPO epochs over each sample.
      bytes_per_env_step: network bytes per env step, all streams together.
      requests_per_core_s: act requests one server core can decode, answer and encode per s.
      env_steps_per_request: env steps carried by one act request (envs per ring group).
    """

    name: str
    env_steps_per_core: float
    actor_overhead: float
    agents: int
    act_flops_per_row: float
    epochs: int
    bytes_per_env_step: float
    requests_per_core_s: float
    env_steps_per_request: int

    @property
    def act_flops_per_env_step(self) -> float:
        return self.agents * self.act_flops_per_row

    @property
    def learn_flops_per_env_step(self) -> float:
        return 3.0 * self.epochs * self.act_flops_per_env_step


@dataclasses.dataclass(frozen=True)
class Hardware:
    """Assumed accelerator and network figures (not measured here).

    Attributes:
      gpu_flops_learner: effective FLOP/s of one GPU running ``learn`` on large batches.
      gpu_flops_inference: effective FLOP/s of one GPU running ``act`` on request batches.
      gpus_per_host: GPUs sharing one host's network interface.
      nic_bytes_per_s: network bandwidth of one accelerator host (bytes/s).
      server_cores_per_gpu: CPU cores of inference-server processes per inference GPU.
    """

    gpu_flops_learner: float = 20e12
    gpu_flops_inference: float = 10e12
    gpus_per_host: int = 8
    nic_bytes_per_s: float = 25e9 / 8
    server_cores_per_gpu: int = 8


def ceilings(c: Costs, hw: Hardware, actor_cores: int, gpus: int) -> dict[str, float]:
    """Env steps/s allowed by each stage for ``actor_cores`` CPU cores and ``gpus`` GPUs.

    Raises:
      ValueError: ``actor_cores`` or ``gpus`` below 1.
    """
    if actor_cores < 1 or gpus < 1:
        raise ValueError(f"need at least one actor core and one GPU, got {actor_cores}, {gpus}")
    t_act = c.act_flops_per_env_step / hw.gpu_flops_inference  # GPU-seconds per env step
    t_learn = c.learn_flops_per_env_step / hw.gpu_flops_learner
    gpu_rate = gpus / (t_act + t_learn)  # both kinds of work, GPUs split in proportion
    inference_gpus = gpus * t_act / (t_act + t_learn)
    hosts = max(1, math.ceil(gpus / hw.gpus_per_host))
    return {
        "actors": actor_cores * c.env_steps_per_core * (1.0 - c.actor_overhead),
        "gpus": gpu_rate,
        "server CPU": (max(1.0, inference_gpus * hw.server_cores_per_gpu)
                       * c.requests_per_core_s * c.env_steps_per_request),
        "network": hosts * hw.nic_bytes_per_s / c.bytes_per_env_step,
    }


def project(c: Costs, hw: Hardware, actor_cores: int, gpus: int) -> tuple[float, str, dict]:
    """``(env steps/s, bottleneck stage, all ceilings)`` for one cluster size."""
    ceil = ceilings(c, hw, actor_cores, gpus)
    stage = min(ceil, key=ceil.get)
    return ceil[stage], stage, ceil


def gpus_to_keep_up(c: Costs, hw: Hardware, actor_cores: int, max_gpus: int = 4096) -> int | None:
    """Fewest GPUs (and the accelerator hosts and server cores that come with them) for
    which the actors are the bottleneck, or None within ``max_gpus``."""
    for g in range(1, max_gpus + 1):
        if project(c, hw, actor_cores, g)[1] == "actors":
            return g
    return None

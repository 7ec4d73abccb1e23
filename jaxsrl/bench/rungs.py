"""Run the ladder: every rung in turn, each failure recorded instead of raised.

:func:`run_ladder` returns plain data (the ``rungs`` part of the report): one entry
per rung, either its measurements or ``{"error": "..."}`` (e.g. an environment that
is not registered yet), so one broken rung never hides the others.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import traceback
from typing import Callable

import numpy as np

from jaxsrl.bench import (actor_core, agentfns, end_to_end, fan_in, inference, learner, offpolicy,
                          physics, raw_env, replay, server_only, transport)
from jaxsrl.bench.load import LoadMeter
from jaxsrl.bench.memory import MemorySampler

RUNGS = ("raw_env", "physics", "transport", "inference", "server_only", "learner", "end_to_end",
         "scaling", "replay")
#: valid in ``--rungs`` but not run by default (their own configs, minutes each)
OPT_IN_RUNGS = ("offpolicy", "fan_in", "device_actors", "actor_core")


@dataclasses.dataclass
class Options:
    """How long and how wide to measure (``--quick`` shrinks everything)."""

    rung_s: float = 5.0
    """Measured seconds of rungs 1-4 and 7 (each; rung 1b: CPU-seconds)."""
    warmup_s: float = 1.0
    """Seconds of warm-up before rung 3's window (after every actor produced a segment)."""
    e2e_measure_s: float = 12.0
    """Measured seconds of rung 5 (after warm-up)."""
    scaling_measure_s: float = 8.0
    """Measured seconds of each extra rung-6 run."""
    e2e_interval_s: float = 1.0
    """``log_interval_s`` of the end-to-end runs (their fps records)."""
    e2e_warmup_intervals: int = 1
    """Records skipped after the first one with frames."""
    inference_actors: tuple = (4,)
    """Rung 3 also runs with these actor counts (besides the layout's)."""
    scaling_counts: tuple = (1, 2, 4)
    """Rung 6 actor counts."""
    server_rows: tuple = (1, 16, 64)
    """Rung 9 (server only): rows per request, one point each."""
    server_client_procs: int = 1
    """Rung 9: fake-actor processes feeding the server (``server_only.measure``'s
    ``client_procs``)."""
    fan_in_actors: tuple = (1000, 2000, 4000)
    """Rung 10 (fan in): simulated actors, one point each (and per workload)."""
    fan_in_rate: float = 1.0
    """Rung 10: requests per second of one simulated actor."""
    fan_in_client_procs: int = 4
    """Rung 10: processes the simulated actors are spread over."""
    rungs: tuple = RUNGS
    """Which rungs to run."""
    workdir: str = ""
    """Where the end-to-end runs' logdirs go (default: a temporary folder, removed)."""


def actor_layout(cfg) -> list[int]:
    """Environments per group of each actor process of ``cfg``'s dataflow."""
    flow = cfg.get_dataflow()
    return [(a.envs_per_actor or cfg.envs_per_actor) // cfg.ring_size
            for a in flow.actors for _ in range(a.count)]


def _guard(name: str, fn: Callable, log: Callable) -> dict:
    """Run one rung: its result plus wall time and machine load, or its error."""
    log(f"[bench] {name} ...")
    t0 = time.perf_counter()
    meter = LoadMeter().start()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - record it, run the other rungs
        log(f"[bench] {name} failed: {exc!r}")
        return {"error": f"{type(exc).__name__}: {exc}".strip()[:2000],
                "traceback": traceback.format_exc(limit=-3)[-2000:]}
    out["rung_wall_s"] = round(time.perf_counter() - t0, 2)
    out["load"] = meter.stop()
    log(f"[bench] {name} done in {out['rung_wall_s']:.1f} s "
        f"(other work kept {out['load'].get('other_cores', '?')} cores busy)")
    return out


def run_ladder(cfg, argv: list[str], opts: Options, log: Callable = print) -> dict:
    """Measure every rung in ``opts.rungs`` for run config ``cfg``.

    Args:
      cfg: the resolved run config (``load_config(argv)``).
      argv: the flags it was resolved from (the end-to-end runs resolve them again).
      opts: durations and counts.
      log: progress printer.
    """
    layout = actor_layout(cfg)
    num_actors = len(layout)
    rungs: dict = {}
    built: list = []

    def get_built():
        if not built:
            built.append(agentfns.build(cfg))
        return built[0]

    if "raw_env" in opts.rungs:
        rungs["raw_env"] = _guard("rung 1, raw environment", lambda: raw_env.measure(
            cfg.env, cfg.env_kwargs, layout, cfg.ring_size, opts.rung_s, cfg.seed), log)

    if "physics" in opts.rungs:
        rungs["physics"] = _guard("rung 1b, physics only", lambda: physics.measure(
            cfg.env, cfg.env_kwargs, opts.rung_s, cfg.seed), log)

    if "transport" in opts.rungs:
        def transport_rung():
            b = get_built()
            obs = transport.act_request(cfg.env, cfg.env_kwargs, cfg.envs_per_group,
                                        b.observation_space)
            rows = len(next(iter(obs.values())))
            for name, dtype, shape in agentfns.carry_spec(b.fns):  # recurrent agents' carry
                obs[name] = np.zeros((rows,) + tuple(shape), dtype)
            out = transport.measure(obs, opts.rung_s, in_flight=cfg.ring_size, host=cfg.host)
            out["rows_per_request"] = rows
            out["env_steps_per_request"] = rows // b.rows_per_env
            return out
        rungs["transport"] = _guard("rung 2, transport", transport_rung, log)

    if "inference" in opts.rungs:
        counts = sorted({num_actors, *opts.inference_actors})
        rungs["inference"] = []
        for n in counts:
            rungs["inference"].append(_guard(
                f"rung 3, inference with {n} actor(s)", lambda n=n: inference.measure(
                    cfg, n, opts.rung_s, opts.warmup_s, get_built(),
                    sampler_factory=MemorySampler), log))
            rungs["inference"][-1].setdefault("actors", n)

    if "server_only" in opts.rungs:
        rungs["server_only"] = _guard("rung 9, inference server only", lambda: server_only.measure(
            get_built().observation_space, get_built().action_space, get_built().fns.initial_carry,
            opts.server_rows, duration_s=opts.rung_s, warmup_s=opts.warmup_s, host=cfg.host,
            mesh=get_built().mesh, client_procs=opts.server_client_procs), log)

    if "learner" in opts.rungs:
        rungs["learner"] = _guard("rung 4, learner", lambda: learner.measure(
            cfg, opts.rung_s, get_built()), log)

    if "replay" in opts.rungs:
        rungs["replay"] = _guard("rung 7, replay buffer", lambda: replay.measure_for(
            get_built(), opts.rung_s), log)

    if "fan_in" in opts.rungs:
        rungs["fan_in"] = _guard("rung 10, fan in", lambda: fan_in.measure(
            opts.fan_in_actors, client_procs=opts.fan_in_client_procs, rate=opts.fan_in_rate,
            duration_s=opts.rung_s, warmup_s=2 * opts.warmup_s, host=cfg.host, log=log), log)

    if "actor_core" in opts.rungs:  # rung 12: one pinned actor, a real server on another core
        rungs["actor_core"] = _guard("rung 12, actor core", lambda: actor_core.measure(
            cfg, opts.rung_s, max(opts.warmup_s, 2.0), get_built()), log)

    if "device_actors" in opts.rungs:  # rung 11: gymnax CartPole's compiled rollout, by batch
        from jaxsrl.bench import device_rollout
        rungs["device_actors"] = _guard("rung 11, device actors", lambda: device_rollout.measure(
            duration_s=opts.rung_s, seed=cfg.seed), log)

    workdir = opts.workdir or tempfile.mkdtemp(prefix="jaxsrl-bench-")
    try:
        common = {"log_interval_s": opts.e2e_interval_s}
        if "end_to_end" in opts.rungs:
            rungs["end_to_end"] = _guard("rung 5, end to end", lambda: end_to_end.run(
                argv, common, os.path.join(workdir, "e2e"), opts.e2e_warmup_intervals,
                opts.e2e_measure_s), log)
        if "scaling" in opts.rungs:
            rungs["scaling"] = []
            if cfg.dataflow:
                rungs["scaling"].append({"error": "skipped: a [dataflow] config fixes the actors"})
            for n in ([] if cfg.dataflow else sorted(set(opts.scaling_counts))):
                e2e = rungs.get("end_to_end", {})
                if n == num_actors and "env_steps_per_s" in e2e:
                    point = {k: v for k, v in e2e.items() if k != "resolved_config"}
                    point["reused"] = "end_to_end"
                else:
                    point = _guard(f"rung 6, scaling with {n} actor(s)", lambda n=n: end_to_end.run(
                        argv, {**common, "num_actors": n}, os.path.join(workdir, f"scale{n}"),
                        opts.e2e_warmup_intervals, opts.scaling_measure_s), log)
                    point.pop("resolved_config", None)
                point["num_actors"] = n
                rungs["scaling"].append(point)
        if "offpolicy" in opts.rungs:
            rungs["offpolicy"] = offpolicy.measure(
                workdir, common, opts.e2e_warmup_intervals, opts.e2e_measure_s,
                lambda name, fn: _guard(name, fn, log))
    finally:
        if not opts.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return rungs

"""Project jaxsrl's hide-and-seek throughput to 100-10,000 actor cores and 1-32 GPUs.

Measures on this machine what it can (env steps/s per core of the quadrant and full
games, FLOPs of ``act`` by XLA cost analysis, bytes per env step from the spaces),
reads the actor overhead from the hide-and-seek bench ladder
(``docs/benchmarks_hide_and_seek.json``) and the inference server's CPU per request from
the fan-in rung (``docs/benchmarks_fan_in.json``: one server, 1,000-4,000 simulated
actors), applies the model of ``jaxsrl/bench/scaling_model.py`` and writes
``docs/scaling.md``.

    python scripts/scaling_model.py                 # ~1 minute
    python scripts/scaling_model.py --gpu_tflops_learner 40 --out ''   # print only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import jax
import numpy as np

from jaxsrl.bench import agentfns
from jaxsrl.bench.scaling_model import Costs, Hardware, gpus_to_keep_up, project
from jaxsrl.core.paths import CONFIG_DIR, REPO_ROOT as REPO
from jaxsrl.envs.hide_and_seek.bench import env_steps_per_second
from jaxsrl.envs.hide_and_seek.config import make_config
from jaxsrl.experiment.config import load_config
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.spaces import space_leaves, unflatten_obs

CORES = (100, 1_000, 10_000)
GPUS = (1, 2, 4, 8, 16, 32)


def server_cost(fan_in: dict, workload: str = "hide_and_seek") -> dict:
    """The fan-in point of ``workload`` (rung 10, ``fan_in["rungs"]["fan_in"]``) the model
    takes its server CPU per request from: the most actors at which the server kept up
    (no error, no lost request, at least 90% of the offered requests answered).

    Raises:
      ValueError: no such point (the rung failed or the server never kept up).
    """
    points = [p for p in fan_in["rungs"]["fan_in"]["points"]
              if p.get("workload") == workload and "error" not in p and not p["lost"]
              and p["requests_per_s"] >= 0.9 * p["actors"] * p["rate_per_actor"]]
    if not points:
        raise ValueError(f"no fan-in point of {workload!r} where one server kept up; rerun "
                         "python scripts/bench.py --rungs=fan_in (on a less loaded machine)")
    return max(points, key=lambda p: p["actors"])


def env_steps_per_core_s(variant: str, steps: int) -> float:
    """Env steps per CPU-second of this thread: the wall rate of ``env_steps_per_second``
    scaled by the share of a core the call got (on a shared machine the wall rate falls
    with the other load; the rate per CPU-second much less)."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    rate = env_steps_per_second(variant, steps)
    return rate * (time.perf_counter() - wall0) / max(time.thread_time() - cpu0, 1e-9)


#: OpenAI's ramp defence (Baker et al. 2019): about 31.7 B env steps in about 34 h.
OPENAI_ENV_STEPS, OPENAI_HOURS = 31.7e9, 34.0
#: SRL's hide-and-seek configuration: envs behind each policy worker, its batching window (s).
SRL_ENVS_PER_POLICY_WORKER, SRL_WINDOW_S = 267, 0.050


def actor_core_costs(rung: dict) -> tuple[float, float]:
    """``(actor overhead share of a core, network bytes per env step)`` from rung 12
    (``jaxsrl.bench.actor_core``): overhead / (env + overhead) CPU per env step; requests and
    segments sent by the actor plus the replies it received."""
    share = rung["overhead_ms"] / (rung["env_ms"] + rung["overhead_ms"])
    return share, rung["request_bytes"] + rung["segment_bytes"] + rung["reply_bytes"]


def openai_rate(label: str, c: Costs, rung: dict | None, hw: Hardware) -> str:
    """One row of the *OpenAI's rate* table: what 259k env steps/s needs of ``c``."""
    rate = OPENAI_ENV_STEPS / (OPENAI_HOURS * 3600)
    per_core = c.env_steps_per_core * (1 - c.actor_overhead)
    net = rate * c.bytes_per_env_step
    sent = "" if rung is None else f"{(rung['request_bytes'] + rung['segment_bytes']) / 1e3:.1f}"
    servers = rate / (c.requests_per_core_s * c.env_steps_per_request)
    return (f"| {label} | {c.actor_overhead:.0%} | {per_core:,.0f} | {rate / per_core:,.0f} | "
            f"{sent} | {c.bytes_per_env_step / 1e3:.1f} | {net / 1e9:.2f} | "
            f"{net / hw.nic_bytes_per_s:.1f} | {servers:,.0f} |")


def measured_costs(env: str, config: str, bench: dict, env_seconds: float, server: dict,
                   rung: dict | None = None):
    """``Costs`` of ``env`` with the model and layout of ``config`` (a configs/ file); with
    ``rung`` (rung 12's result for ``env``) the actor overhead and bytes are its measures."""
    cfg = load_config(["--env", env, "--config", os.path.join(CONFIG_DIR, config)])
    b = agentfns.build(cfg)
    variant = "full" if env.endswith("full") else "quadrant"
    steps = 200
    env_rate = max(env_steps_per_core_s(variant, steps) for _ in range(2))
    while steps / env_rate < env_seconds:
        steps *= 2
        env_rate = max(env_rate, env_steps_per_core_s(variant, steps))
    state = b.fns.init(jax.random.PRNGKey(0))
    n = 256
    leaves = space_leaves(b.observation_space)  # name -> (dtype, shape)
    obs = {k: np.zeros((n,) + shape, dtype) for k, (dtype, shape) in leaves.items()}
    cost = jax.jit(b.fns.act).lower(state.params, unflatten_obs(obs), b.fns.initial_carry(n),
                                    jax.random.PRNGKey(0)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    act_flops = float(cost["flops"]) / n
    obs_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for dtype, shape in leaves.values())
    carry_bytes = sum(int(np.prod(s.shape[1:])) * np.dtype(s.dtype).itemsize
                      for s in CarryCodec(b.fns.initial_carry).schema().values())
    # Per agent row: request obs + carry up; action, logp, carry down; in the sample
    # stream obs (T + 1 per T steps), final_obs and its int32 index for truncated steps
    # only (one per episode of `horizon` steps), action, reward, flags, logp, version,
    # and the segment's first carry spread over T steps.
    T, horizon = cfg.segment_length, make_config(variant).horizon
    per_row = (obs_bytes + 2 * carry_bytes + 3 * 4 + obs_bytes * (T + 1) / T
               + (obs_bytes + 4) / horizon + 3 * 4 + 4 * 4 + carry_bytes / T)
    raw = bench["rungs"]["raw_env"]["env_steps_per_s"]
    fed = bench["rungs"]["inference"][0]["env_steps_per_s"]
    per_core_requests = 1e6 / server["server_cpu_us_per_request"]  # one server core
    overhead, bytes_per_env_step = max(0.0, 1.0 - fed / raw), per_row * b.rows_per_env
    if rung is not None:
        overhead, bytes_per_env_step = actor_core_costs(rung)
    costs = Costs(
        name=f"{env} ({config}: width {cfg.ppo.hidden_sizes[0]}, {b.rows_per_env} agents)",
        env_steps_per_core=env_rate, actor_overhead=overhead,
        agents=b.rows_per_env, act_flops_per_row=act_flops, epochs=cfg.ppo.num_epochs,
        bytes_per_env_step=bytes_per_env_step, requests_per_core_s=per_core_requests,
        env_steps_per_request=cfg.envs_per_actor // cfg.ring_size)
    params = sum(x.size for x in jax.tree.leaves(state.params))
    return costs, params


def render(rows: list, hw, bench_path: str, command: str, fan_in_path: str, server: dict,
           core_note: str = "", rate_rows: list | None = None) -> str:
    out = ["# Scaling model: hide-and-seek from 2 cores to 10,000",
           "",
           f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
           "(do not edit by hand; rerun it). Model: `jaxsrl/bench/scaling_model.py`.",
           "",
           "## Inputs",
           "",
           "Measured on this machine (2 cores, no GPU; load average "
           f"{os.getloadavg()[0]:.1f} when this ran, other sessions sharing the cores): env "
           "steps per CPU-second of one core (random actions, "
           "`jaxsrl.envs.hide_and_seek.bench`), FLOPs of one `act` row (XLA cost analysis of the "
           "jitted function)" + ("" if core_note else ", bytes per env step (from the "
                                  "observation, action and carry spaces)") + (core_note or
           f". From the bench ladder (`{os.path.relpath(bench_path, REPO)}`): actor "
           "overhead = 1 - (rung 3 env steps/s) / (rung 1 env steps/s), an upper bound since the "
           "inference server shared the actors' two cores there.") + " Server requests/s per core = "
           "1e6 / the server's CPU µs per request measured by the fan-in rung "
           f"(`{os.path.relpath(fan_in_path, REPO)}`, rung 10: one `PolicyWorker` with a trivial "
           f"policy and the learner's sample socket, {server['actors']:,} simulated "
           f"hide-and-seek actors at {server['rate_per_actor']:g} request/s each, the most at "
           f"which it kept up on this loaded machine): {server['server_cpu_us_per_request']:,.0f} "
           f"µs per request, {1e6 / server['server_cpu_us_per_request']:,.0f} requests per "
           "core-second (before: the echo transport's round trips per core, a constant that "
           "left out decoding, admission, batching and replies). The policy's own arithmetic "
           "is in the GPU term.",
           "",
           "| workload | params | env steps/s per core | actor overhead | agents | act MFLOP/row | "
           "learn MFLOP/env step | KB/env step | env steps/request | server requests/core-s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, params in rows:
        out.append(f"| {c.name} | {params:,} | {c.env_steps_per_core:,.0f} | {c.actor_overhead:.0%} | "
                   f"{c.agents} | {c.act_flops_per_row / 1e6:.2f} | "
                   f"{c.learn_flops_per_env_step / 1e6:.1f} | {c.bytes_per_env_step / 1e3:.1f} | "
                   f"{c.env_steps_per_request} | {c.requests_per_core_s:,.0f} |")
    out += ["",
            "Assumed (none of these is measured yet: no GPU machine was available): effective "
            f"{hw.gpu_flops_learner / 1e12:.0f} TFLOP/s per GPU for `learn` (large batches) and "
            f"{hw.gpu_flops_inference / 1e12:.0f} TFLOP/s for `act` (request-sized batches) — "
            "about 10-15% of an A100/H100's dense peak for these small layers; "
            f"{hw.gpus_per_host} GPUs per host sharing a {hw.nic_bytes_per_s * 8 / 1e9:.0f} Gb/s NIC; "
            f"{hw.server_cores_per_gpu} inference-server CPU cores per inference GPU. "
            "`learn` = 3 x epochs x `act` FLOPs per row (forward + backward ~ 3 forwards).",
            ""]
    for c, _ in rows:
        out += [f"## {c.name}", "",
                "Projected training env steps/s (bottleneck stage in brackets):", "",
                "| actor cores | " + " | ".join(f"{g} GPU" + ("s" if g > 1 else "") for g in GPUS) +
                " | GPUs (with their hosts and server cores) for the actors to be the limit |",
                "| --- |" + " --- |" * (len(GPUS) + 1)]
        for n in CORES:
            cells = []
            for g in GPUS:
                rate, stage, _ = project(c, hw, n, g)
                cells.append(f"{rate:,.0f} ({stage})")
            need = gpus_to_keep_up(c, hw, n)
            out.append(f"| {n:,} | " + " | ".join(cells) + f" | {need if need else '> 4096'} |")
        out.append("")
    if rate_rows:
        rate = OPENAI_ENV_STEPS / (OPENAI_HOURS * 3600)
        out += [f"## OpenAI's rate: {rate:,.0f} env steps/s", "",
                f"OpenAI's ramp defence took about {OPENAI_ENV_STEPS / 1e9:.1f} B env steps in about "
                f"{OPENAI_HOURS:.0f} h (Baker et al. 2019, as issue 43 reads them). What that rate "
                "needs, from the measured costs: actor cores = rate / (env steps per core-second x "
                "(1 - actor overhead)); network = rate x bytes per env step (requests and segments "
                "the actors send, replies they receive: all pass the accelerator hosts' NICs); "
                f"{hw.nic_bytes_per_s * 8 / 1e9:.0f} Gb/s NICs = that / the NIC's rate; inference-server "
                "cores = rate / (requests per core-second x env steps per request). *Before* is "
                "main before issue 43 (the carry sent with every request, observations as float32 "
                "leaves), *after* is the kept carry and packed observations.", "",
                "| workload, code | actor overhead | env steps/s per actor core | actor cores | "
                "KB sent per env step | KB per env step, all | network GB/s | NICs | server cores |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rate_rows + [
                "",
                f"Side by side, SRL's configuration (Mei et al. 2023, as issue 43 quotes it): "
                f"{SRL_ENVS_PER_POLICY_WORKER} envs behind each policy worker, batching for "
                f"{SRL_WINDOW_S * 1e3:.0f} ms. An env then steps at most once per window "
                f"({1 / SRL_WINDOW_S:.0f} env steps/s), so one policy worker serves at most "
                f"{SRL_ENVS_PER_POLICY_WORKER / SRL_WINDOW_S:,.0f} env steps/s and OpenAI's rate needs "
                f"at least {rate * SRL_WINDOW_S / SRL_ENVS_PER_POLICY_WORKER:,.0f} policy workers, each "
                f"batch holding {SRL_ENVS_PER_POLICY_WORKER} envs' observations. Ours batches what "
                "arrives (no window unless `--inference_deadline_ms`): a request carries "
                "envs_per_actor / ring_size envs ("
                + ", ".join(f"{c.env_steps_per_request} in {c.name.split(' ')[0]}" for c, _ in rows)
                + "), and the server cores above are what decoding, "
                "batching and answering those requests costs (rung 10); the policy's arithmetic is in "
                "the GPU term. SRL's actor cores ran the original `mujoco-worldgen` game, whose speed "
                "per core was not measured here.",
                ""]
    out += ["## Where the bottleneck moves", ""]
    for c, _ in rows:
        out.append(f"**{c.name}**:")
        out.append("")
        for n in CORES:
            stages = [project(c, hw, n, g)[1] for g in GPUS]
            moves = [f"{stages[0]} at {GPUS[0]} GPU"]
            for g, prev, cur in zip(GPUS[1:], stages, stages[1:]):
                if cur != prev:
                    moves.append(f"{cur} from {g} GPUs")
            out.append(f"- {n:,} actor cores: " + ", then ".join(moves) + ".")
        out.append("")
    out += ["Remedies, by stage: **actors** — more actor cores (the point of the design); "
            "**gpus** — more GPUs (learner processes with `--num_learner_processes`, remote "
            "inference servers with `--remote_inference`); **server CPU** — more env steps per "
            "request (`envs_per_actor / ring_size`) or more inference-server processes; "
            "**network** — more accelerator hosts, or fewer bytes per step (the sample stream "
            "already sends `final_obs` for truncated steps only).",
            "",
            "## Compared with SRL and OpenAI",
            "",
            "- SRL (Mei et al. 2023, abstract of arXiv 2306.16688v2) ran hide-and-seek on over "
            "15,000 CPU cores and 32 A100 GPUs, and reproduced OpenAI's result up to 5x faster "
            "in wall-clock time than OpenAI's Rapid. The last column above says how many GPUs "
            "this model needs before the actors are the limit; it assumes our "
            "environment's speed per core, and SRL's (the original `mujoco-worldgen` game) was "
            "not measured here.",
            "- OpenAI (Baker et al. 2019) trained the full game with a 64,000-sample batch and a "
            "model of about 1.6M parameters (figures as we recall them from the paper; check "
            "them there before relying on them). Our `configs/hide_and_seek_full.toml` uses the "
            "same batch (6,400 segments x 10 steps) with a 0.6M-parameter model (width 128).",
            "",
            "## What this model leaves out",
            "",
            "- Staleness: more actors per learner raise the policy lag; SRL bounds it with "
            "its parameter service, we with `--max_staleness` and the parameter stream's version "
            "lag (`param_lag/*` metric of remote inference servers).",
            "- Gradient all-reduce between learner GPUs (jax.distributed): small for these "
            "models (0.6M parameters = 2.4 MB per update) next to the sample traffic.",
            "- Connections per process: one inference server and one learner each hold a TCP "
            "connection (one file descriptor) per actor; rung 10 measured 2.0 descriptors per "
            "actor in a process holding both, so one process takes about (hard `ulimit -n`) / 2 "
            "actors (the launcher and every worker process raise the soft limit to the hard "
            "one). Past the point where one server keeps up (see *Inputs*), the model's answer "
            "is more server processes (`server CPU` stage), not more actors per server.",
            "- Stragglers, restarts and the Python overhead of one inference-server process; "
            "measure them with `scripts/bench.py` on the real cluster and rerun this script "
            "with `--bench_json` and `--fan_in_json`.",
            ""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench_json", default=os.path.join(REPO, "docs", "benchmarks_hide_and_seek.json"))
    p.add_argument("--fan_in_json", default=os.path.join(REPO, "docs", "benchmarks_fan_in.json"))
    p.add_argument("--out", default=os.path.join(REPO, "docs", "scaling.md"), help="'' prints only")
    p.add_argument("--gpu_tflops_learner", type=float, default=20.0)
    p.add_argument("--gpu_tflops_inference", type=float, default=10.0)
    p.add_argument("--env_seconds", type=float, default=2.0, help="time spent per env measurement")
    p.add_argument("--actor_core", action="append", default=[], metavar="VARIANT=JSON",
                   help="rung 12 report (scripts/bench.py --rungs=actor_core) of a variant "
                        "(quadrant or full): the model's actor overhead and bytes per env step")
    p.add_argument("--actor_core_before", action="append", default=[], metavar="VARIANT=JSON",
                   help="rung 12 report of the code before, for the OpenAI's-rate table only")
    args = p.parse_args(argv)

    def rungs(pairs):
        out = {}
        for pair in pairs:
            variant, _, path = pair.partition("=")
            with open(path) as f:
                out[variant] = json.load(f)["rungs"]["actor_core"]
        return out
    after, before = rungs(args.actor_core), rungs(args.actor_core_before)
    with open(args.bench_json) as f:
        bench = json.load(f)
    hw = Hardware(gpu_flops_learner=args.gpu_tflops_learner * 1e12,
                  gpu_flops_inference=args.gpu_tflops_inference * 1e12)
    with open(args.fan_in_json) as f:
        server = server_cost(json.load(f))
    rows = [measured_costs("hide_and_seek", "hide_and_seek.toml", bench, args.env_seconds, server,
                           after.get("quadrant")),
            measured_costs("hide_and_seek_full", "hide_and_seek_full.toml", bench,
                           args.env_seconds, server, after.get("full"))]
    command = "python scripts/scaling_model.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    core_note, rate_rows = "", []
    if after:
        core_note = (". Actor overhead (the share of an actor core spent outside `env.step` and "
                     "not waiting) and bytes per env step (requests and segments sent, replies "
                     "received) are rung 12's measures (`scripts/bench.py --rungs=actor_core`: one "
                     "actor pinned to one core, a real inference server on the other; "
                     + ", ".join(f"`{p.partition('=')[2]}`" for p in args.actor_core) + ").")
        for (c, _), variant in zip(rows, ("quadrant", "full")):
            for label, rung in (("before", before.get(variant)), ("after", after.get(variant))):
                if rung is None:
                    continue
                overhead, nbytes = actor_core_costs(rung)
                rate_rows.append(openai_rate(
                    f"{c.name.split(' ')[0]}, {label}",
                    dataclasses.replace(c, actor_overhead=overhead, bytes_per_env_step=nbytes),
                    rung, hw))
    text = render(rows, hw, args.bench_json, command, args.fan_in_json, server, core_note, rate_rows)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The prepared accelerator check: learner-only and act-only rates of the project's four
networks across batch sizes, and a short end-to-end hide-and-seek run, in one command.

    python -m jaxsrl.bench.device_check                  # on the GPU machine: < 5 minutes
    python -m jaxsrl.bench.device_check --quick --out '' # CPU smoke test (CI)

``scripts/device_check.sh`` wraps it with a time limit. For each network (CartPole MLP,
Atari Nature CNN, the quadrant hide-and-seek entity network, the released full-game
entity network) it measures

* **learn**: ``learn`` updates/s and samples/s on a synthetic batch of ``B`` segments of
  the config's ``T`` steps (rung 4, :func:`jaxsrl.bench.learner.measure`), for each
  ``B`` in ``--batch_segments``;
* **act**: jitted ``act`` calls/s and rows/s on ``R`` random observation rows
  (parameters and carry on the device, the result fetched to host as the inference
  server does), for each ``R`` in ``--act_rows``;

then rung 11, the device actors' compiled rollout loop on gymnax ``CartPole-v1`` by
batch size (:mod:`jaxsrl.bench.device_rollout`; a skipped line without gymnax), and one
end-to-end hide-and-seek run (rung 5: actors on this machine's CPU cores, the
learner and inference on its accelerator). It writes ``docs/benchmarks_gpu.md`` (and the
JSON beside it): the device, then one table per measurement. The scaling model
(``docs/scaling.md``) assumes GPU rates until this file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from jaxsrl.bench import agentfns, device_rollout, learner
from jaxsrl.core.paths import REPO_ROOT, child_env
from jaxsrl.experiment.config import load_config
from jaxsrl.parallel import devices

NETWORKS = {
    "cartpole_mlp": ["--env=CartPole-v1"],
    "atari_cnn": ["--env=ALE/Breakout-v5"],
    "hns_quadrant": ["--env=hide_and_seek"],
    "hns_full": ["--env=hide_and_seek", f"--config={os.path.join(REPO_ROOT, 'configs', 'hide_and_seek_full.toml')}"],
}
DEFAULT_OUT = os.path.join(REPO_ROOT, "docs", "benchmarks_gpu.md")


def random_rows(space, rows: int, seed: int = 0):
    """``rows`` observations of ``space`` stacked along a leading axis (a pytree)."""
    space.seed(seed)
    samples = [space.sample() for _ in range(rows)]
    return jax.tree.map(lambda *xs: np.stack(xs), *samples)


def measure_act(built, rows: int, duration_s: float, min_calls: int = 3) -> dict:
    """Calls/s and rows/s of the jitted ``act`` on ``rows`` rows (padded to the device
    count, as the inference server pads its batches)."""
    n_dev = built.mesh.size
    rows = -(-rows // n_dev) * n_dev
    rng = jax.random.PRNGKey(0)
    params = devices.put_replicated(built.fns.init(rng).params, built.mesh)
    obs = devices.put_batch(random_rows(built.observation_space, rows), built.mesh)
    carry = devices.put_batch(built.fns.initial_carry(rows), built.mesh)
    act = devices.jit_act(built.fns.act, built.mesh)
    t0 = time.perf_counter()
    act = act.lower(params, obs, carry, rng).compile()
    compile_s = time.perf_counter() - t0
    jax.device_get(act(params, obs, carry, rng))
    calls, times, start = 0, [], time.perf_counter()
    while calls < min_calls or time.perf_counter() - start < duration_s:
        t = time.perf_counter()
        rng, key = jax.random.split(rng)
        jax.device_get(act(params, obs, carry, key)[0])  # the reply needs the actions on host
        times.append(time.perf_counter() - t)
        calls += 1
    seconds = time.perf_counter() - start
    return {"rows": rows, "calls_per_s": calls / seconds, "rows_per_s": calls * rows / seconds,
            "call_ms_p50": float(np.percentile(times, 50) * 1e3), "compile_s": compile_s}


def run(networks: list[str], batch_segments: list[int], act_rows: list[int], duration_s: float,
        e2e_s: float, save=lambda result: None, device_envs: tuple = ()) -> dict:
    """Every measurement of the module docstring; returns the JSON report. ``save`` is
    called with the report so far after each measurement (a time limit keeps those)."""
    dev = jax.devices()[0]
    result = {"device": f"{dev.platform}: {dev.device_kind} x {jax.device_count()}",
              "jax": jax.__version__, "learn": [], "act": [], "device_actors": None,
              "end_to_end": None}
    for name in networks:
        for B in batch_segments:
            # A fixed budget: the LR schedule's planned steps stay in int32 at any B.
            cfg = load_config(NETWORKS[name] + [f"--batch_segments={B}", "--total_env_steps=10000000"])
            built = agentfns.build(cfg)
            row = learner.measure(cfg, duration_s, built)
            result["learn"].append({"network": name, "T": cfg.segment_length, **row})
            print(f"[device_check] learn {name} B={B}: {row['samples_per_s']:,.0f} samples/s", flush=True)
            save(result)
        built = agentfns.build(load_config(NETWORKS[name] + ["--total_env_steps=10000000"]))
        for R in act_rows:
            row = measure_act(built, R, duration_s)
            result["act"].append({"network": name, **row})
            print(f"[device_check] act {name} R={R}: {row['rows_per_s']:,.0f} rows/s", flush=True)
            save(result)
    if device_envs:  # rung 11: environments and policy in one compiled rollout
        result["device_actors"] = device_rollout.measure(batches=device_envs, duration_s=duration_s)
        print(f"[device_check] device actors: {result['device_actors']}", flush=True)
        save(result)
    if e2e_s > 0:  # the bench's own rung 5, in a child process like any bench run
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "e2e.json")
            subprocess.run([sys.executable, "-m", "jaxsrl.cli.bench", "--rungs=end_to_end",
                            f"--e2e_s={e2e_s:g}", f"--out_json={out}", "--out_md=",
                            *NETWORKS["hns_quadrant"]], env=child_env(), check=True)
            with open(out) as f:
                row = json.load(f)["rungs"]["end_to_end"]
        result["end_to_end"] = {k: v for k, v in row.items() if k != "resolved_config"}
        save(result)
    return result


def render(result: dict, command: str) -> str:
    """The Markdown report."""
    lines = ["# Accelerator check", "", f"Device: {result['device']} (JAX {result['jax']}). "
             f"Command: `{command}`.", "", "## learn (rung 4, synthetic batches)", "",
             "| network | B x T | updates/s | samples/s | update ms p50 | compile s |",
             "|---|---|---|---|---|---|"]
    for r in result["learn"]:
        lines.append(f"| {r['network']} | {r['batch'][0]} x {r['T']} | {r['updates_per_s']:,.1f} | "
                     f"{r['samples_per_s']:,.0f} | {r['update_ms_p50']:.2f} | {r['compile_s']:.1f} |")
    lines += ["", "## act (jitted policy step, actions fetched to host)", "",
              "| network | rows | calls/s | rows/s | call ms p50 | compile s |", "|---|---|---|---|---|---|"]
    for r in result["act"]:
        lines.append(f"| {r['network']} | {r['rows']} | {r['calls_per_s']:,.1f} | {r['rows_per_s']:,.0f} | "
                     f"{r['call_ms_p50']:.2f} | {r['compile_s']:.1f} |")
    dev = result.get("device_actors")
    if dev and "skipped" in dev:
        lines += ["", "## device actors (rung 11)", "", dev["skipped"]]
    elif dev:
        lines += ["", f"## device actors (rung 11): {dev['env']}, compiled rollout of "
                  f"{dev['segment_length']} steps with PPO's act", "",
                  "| envs | env steps/s | calls | compile s |", "|---|---|---|---|"]
        for r in dev["points"]:
            lines.append(f"| {r['num_envs']} | {r['env_steps_per_s']:,.0f} | {r['calls']} | "
                         f"{r['compile_s']:.1f} |")
    e2e = result["end_to_end"]
    if e2e:
        lines += ["", "## end to end, hide-and-seek (quadrant), actors on this machine's CPU", "",
                  f"{e2e.get('env_steps_per_s', 0):,.0f} env steps/s, "
                  f"{e2e.get('updates_per_s', 0):,.2f} updates/s over {e2e.get('seconds', 0):.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m jaxsrl.bench.device_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="a CPU smoke test: CartPole only, one size each, 0.3 s, no end to end")
    p.add_argument("--networks", default=",".join(NETWORKS), help=f"of {','.join(NETWORKS)}")
    p.add_argument("--batch_segments", default="64,512", help="learn batch sizes B")
    p.add_argument("--act_rows", default="16,256,2048", help="act batch sizes (rows)")
    p.add_argument("--seconds", type=float, default=1.5, help="measured seconds per row")
    p.add_argument("--device_envs", default=",".join(map(str, device_rollout.BATCHES)),
                   help="device actors: environments per compiled rollout ('' to skip)")
    p.add_argument("--e2e_s", type=float, default=30.0, help="end-to-end seconds (0: skip)")
    p.add_argument("--out", default=DEFAULT_OUT, help="Markdown report ('' to skip; JSON beside it)")
    args = p.parse_args(argv)
    if args.quick:
        args.networks, args.batch_segments, args.act_rows = "cartpole_mlp", "8", "16"
        args.device_envs = "8"
        args.seconds, args.e2e_s = 0.3, 0.0
    networks = [n for n in args.networks.split(",") if n]
    unknown = sorted(set(networks) - set(NETWORKS))
    if unknown:
        print(f"device_check: error: unknown networks {unknown}; valid: {','.join(NETWORKS)}",
              file=sys.stderr)
        return 2
    command = "python -m jaxsrl.bench.device_check " + " ".join(argv)

    def save(result: dict) -> None:
        if args.out:
            with open(args.out, "w") as f:
                f.write(render(result, command))
            with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
                json.dump(result, f, indent=1)

    result = run(networks, [int(b) for b in args.batch_segments.split(",")],
                 [int(r) for r in args.act_rows.split(",")], args.seconds, args.e2e_s, save,
                 tuple(int(n) for n in args.device_envs.split(",") if n))
    print(render(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

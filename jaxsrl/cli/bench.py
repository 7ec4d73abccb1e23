"""The benchmark ladder: ``jaxsrl-bench [--quick] [--env=CartPole-v1] [train flags]``.

The same command is ``python scripts/bench.py ...`` or ``python -m jaxsrl.cli.bench ...``.
Bench flags here, every other flag to the run config. Measures raw environment speed,
transport, inference, learner, end-to-end training and its scaling with the number of
actor processes on this machine, plus peak memory per process kind; prints a table and
writes ``docs/benchmarks.json`` and ``docs/benchmarks.md`` (see ``--help`` and
``jaxsrl/bench/``).

Exit codes: 0 the report was written (rungs that failed are marked in it), 2 a bad
flag or config (e.g. an unknown ``--env``, or an existing ``--out_md`` file without the
markers of its generated region: :mod:`jaxsrl.cli.bench_report.md_region`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import sys
import time

from jaxsrl.bench import machine
from jaxsrl.cli.bench_report import md_region, report
from jaxsrl.cli.bench_report import render as report_render
from jaxsrl.bench.rungs import OPT_IN_RUNGS, RUNGS, Options, actor_layout, run_ladder
from jaxsrl.core.paths import REPO_ROOT
from jaxsrl.experiment.config import load_config, to_dict

DOCS = os.path.join(REPO_ROOT, "docs")


def _counts(text: str) -> tuple:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench.py", description="The jaxsrl benchmark ladder (docs/benchmarks.md).",
        allow_abbrev=False,
        epilog="Every other flag is a train.py flag (--env, --num_actors, --envs_per_actor, "
               "--ppo.hidden_sizes, ...) and sets the run config being measured.")
    p.add_argument("--quick", action="store_true",
                   help="tiny durations (about 1-2 s per rung) and no extra actor counts")
    p.add_argument("--out_json", default=None,
                   help="JSON report path ('' to skip; default docs/benchmarks.json, but with "
                        "--quick none: a quick run never overwrites the tracked report)")
    p.add_argument("--out_md", default=None,
                   help="Markdown report path ('' to skip; default docs/benchmarks.md, with "
                        "--quick none); an existing file has only the part between its "
                        "bench:generated markers replaced")
    p.add_argument("--max_scaling_actors", type=int, default=None,
                   help="rung 6 runs 1, 2, 4, ... up to this many actor processes "
                        "(default: 2 x cores; with --quick: the layout's count)")
    p.add_argument("--inference_actors", type=_counts, default=None,
                   help="comma-separated extra actor counts for rung 3 (default: 4; "
                        "with --quick: none); the layout's count always runs")
    p.add_argument("--rungs", default=",".join(RUNGS),
                   help=f"comma-separated rungs to run, of {','.join(RUNGS + OPT_IN_RUNGS)} "
                        f"(default: all but {','.join(OPT_IN_RUNGS)}: off-policy agents end to "
                        "end, DQN CartPole-v1 and SAC HalfCheetah-v5 with their own configs)")
    p.add_argument("--fan_in_actors", type=_counts, default=None,
                   help="rung 10 (fan_in): comma-separated simulated actor counts "
                        "(default 1000,2000,4000; with --quick: 50)")
    p.add_argument("--fan_in_rate", type=float, default=None,
                   help="rung 10: requests per second of one simulated actor (default 1)")
    p.add_argument("--rung_s", type=float, default=None, help="measured seconds of rungs 1-4, 7 and 9")
    p.add_argument("--e2e_s", type=float, default=None, help="measured seconds of rung 5")
    p.add_argument("--from_json", default="",
                   help="measure nothing: re-render --out_md (and the console table) from "
                        "this JSON report, e.g. after editing jaxsrl/cli/bench_report/render.py")
    p.add_argument("--workdir", default="",
                   help="keep the end-to-end runs' logdirs here (default: a temporary folder)")
    return p


def report_paths(args: argparse.Namespace) -> tuple[str, str]:
    """``(json_path, md_path)`` the report goes to (``""``: not written).

    Without ``--out_json``/``--out_md`` a full run regenerates ``docs/benchmarks.*``;
    a ``--quick`` run writes nothing there (its numbers are not the ones to publish),
    only the paths given explicitly.
    """
    def pick(given: str | None, name: str) -> str:
        if given is not None:
            return given
        return "" if args.quick else os.path.join(DOCS, name)

    return pick(args.out_json, "benchmarks.json"), pick(args.out_md, "benchmarks.md")


def options(args, cfg, cores: int) -> Options:
    n = len(actor_layout(cfg))
    if args.quick:
        opts = Options(rung_s=1.0, warmup_s=0.3, e2e_measure_s=1.5, scaling_measure_s=1.0,
                       e2e_interval_s=0.5, e2e_warmup_intervals=1, inference_actors=(),
                       scaling_counts=())
        max_scaling = n
    else:
        opts = Options()
        max_scaling = 2 * cores
    if args.max_scaling_actors is not None:
        max_scaling = args.max_scaling_actors
    counts, c = [], 1
    while c <= max_scaling:
        counts.append(c)
        c *= 2
    opts.scaling_counts = tuple(counts)
    if args.inference_actors is not None:
        opts.inference_actors = args.inference_actors
    if args.quick:
        opts.fan_in_actors, opts.fan_in_client_procs = (50,), 2
    if args.fan_in_actors is not None:
        opts.fan_in_actors = args.fan_in_actors
    if args.fan_in_rate is not None:
        opts.fan_in_rate = args.fan_in_rate
    if args.rung_s is not None:
        opts.rung_s = args.rung_s
    if args.e2e_s is not None:
        opts.e2e_measure_s = args.e2e_s
    opts.rungs = tuple(r for r in args.rungs.split(",") if r)
    unknown = set(opts.rungs) - set(RUNGS) - set(OPT_IN_RUNGS)
    if unknown:
        raise ValueError(f"unknown rungs {sorted(unknown)}; valid: {','.join(RUNGS + OPT_IN_RUNGS)}")
    opts.workdir = args.workdir
    return opts


def rerender(json_path: str, md_path: str) -> int:
    """Recompute the derived parts of a JSON report and rewrite its Markdown."""
    with open(json_path) as f:
        result = json.load(f)
    for key in ("table", "bottleneck", "targets", "memory", "scaling", "compute_ceiling",
                "raw_env_over_physics"):
        result.pop(key, None)
    report.finalize(result)
    report_render.write(result, json_path if os.path.abspath(json_path) != os.devnull else None,
                 md_path or None)
    print(report_render.render_console(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s",
                        force=True)  # importing Orbax gave the root logger a handler already
    args, rest = parser().parse_known_args(argv)
    out_json, out_md = report_paths(args)
    if out_md:
        try:  # before measuring: the report's hand-written sections are never overwritten
            md_region.check(out_md)
        except md_region.RegionError as exc:
            print(f"bench.py: error: {exc}", file=sys.stderr)
            return 2
    if args.from_json:
        return rerender(args.from_json, out_md)
    t0 = time.monotonic()
    try:
        cfg = load_config(rest)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        opts = options(args, cfg, cores)
    except ValueError as exc:
        print(f"bench.py: error: {exc}", file=sys.stderr)
        return 2
    command = "python scripts/bench.py " + shlex.join(argv) if argv else "python scripts/bench.py"
    result = {"quick": args.quick, "machine": machine.describe(command.strip())}
    layout = actor_layout(cfg)
    result["layout"] = {"env": cfg.env, "agent": cfg.agent, "num_actors": len(layout),
                        "envs_per_actor": cfg.envs_per_actor, "ring_size": cfg.ring_size,
                        "segment_length": cfg.segment_length,
                        "batch_segments": cfg.batch_segments}
    result["options"] = dataclasses.asdict(opts)
    result["config"] = to_dict(cfg)
    print(f"[bench] {cfg.env}: {len(layout)} actors x {cfg.envs_per_actor} envs on "
          f"{result['machine']['cores']} cores, {result['machine']['devices']}; load average "
          f"{result['machine']['load_average_start']}", flush=True)

    result["rungs"] = run_ladder(cfg, rest, opts, log=lambda s: print(s, flush=True))
    result["machine"]["load_average_end"] = machine.load_average()
    result["wall_s"] = time.monotonic() - t0
    load = result["machine"]["load_average_start"]
    result["notes"] = []
    if load and load[0] > 0.5 * result["machine"]["cores"]:
        result["notes"].append(
            f"The 1-minute load average was {load[0]} at the start and "
            f"{result['machine']['load_average_end'][0]} at the end on {result['machine']['cores']} "
            "cores: other work shared the CPU, so rates are lower and latencies higher than "
            "on an idle machine.")
    report.finalize(result)
    report_render.write(result, out_json or None, out_md or None)
    print(report_render.render_console(result), flush=True)
    for path in (out_json, out_md):
        if path:
            print(f"[bench] wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak test: train for N minutes and watch every process's resident memory.

    python scripts/soak.py --minutes=20                     # CartPole, small network
    python scripts/soak.py --minutes=3 --warmup_minutes=1 -- --num_actors=4 --env=Acrobot-v1

Starts ``scripts/train.py`` (extra flags after ``--`` are passed on) with an endless
step budget, samples the resident set size (RSS) of the launcher and of each actor
process every ``--interval_s`` seconds, then stops the run with SIGTERM and checks that
it exits cleanly (exit code 130, checkpoint written, no process left).

Reported per process: RSS at the end of warm-up and at the end (medians of the samples
in the first and last ``--window_s`` seconds after warm-up), and the growth between
them. Exit code 0 if every process grew less than ``--max_growth`` (default 10 %)
and the run shut down cleanly, 1 otherwise. The report is printed and saved as
``LOGDIR/soak.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRAIN_ARGS = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=16",
                      "--segment_length=32", "--batch_segments=16", "--ppo.hidden_sizes", "32", "32",
                      "--log_interval_s=10", "--checkpoint_interval_s=60"]


def _role(proc: psutil.Process, launcher_pid: int) -> str | None:
    if proc.pid == launcher_pid:
        return "launcher"
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    if "jaxsrl.workers.actor" in " ".join(cmd):
        try:
            return f"actor{json.loads(cmd[-1])['actor_id']}"
        except (ValueError, KeyError):
            return "actor?"
    return None


def _sample(launcher: psutil.Process) -> dict:
    """``{role: (pid, rss_bytes)}`` of the launcher and its actor processes."""
    out = {}
    try:
        procs = [launcher] + launcher.children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        role = _role(p, launcher.pid)
        if role is None:
            continue
        try:
            out[role] = (p.pid, p.memory_info().rss)
        except psutil.Error:
            pass
    return out


def _last_record(logdir: str) -> dict:
    try:
        with open(os.path.join(logdir, "metrics.jsonl")) as f:
            lines = [line for line in f if line.endswith("\n")]
        return json.loads(lines[-1]) if lines else {}
    except OSError:
        return {}


def main(argv=None) -> int:
    args, extra = parse_args(argv, __doc__)
    warmup_s = warmup_seconds(args)
    logdir = args.logdir or os.path.join("runs", time.strftime("soak-%Y%m%d-%H%M%S"))
    cmd = [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *DEFAULT_TRAIN_ARGS,
           *extra, "--total_env_steps=10000000000", f"--logdir={logdir}"]
    print("soak:", " ".join(cmd), flush=True)
    log_path = os.path.join(logdir, "soak_train.log")
    os.makedirs(logdir, exist_ok=True)
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT)
    launcher = psutil.Process(proc.pid)
    descendants: list = []  # as of the last sample

    def sample() -> dict:
        with contextlib.suppress(psutil.Error):
            descendants[:] = launcher.children(recursive=True)
        return _sample(launcher)

    done = sample_then_stop(proc, sample, args, log_path, stop_timeout_s=120)
    if done is None:
        return 1
    samples, code, stop_s = done
    time.sleep(1.0)
    leftovers = [p.pid for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    report = {"minutes": args.minutes, "warmup_s": warmup_s, "samples": len(samples),
              "stop_s": round(stop_s, 2), "exit_code": code, "leftover_processes": leftovers,
              "train_args": cmd[2:]}
    return finish(report, samples, args, logdir, clean=code == 130 and not leftovers)


def parse_args(argv: list[str] | None, doc: str,
               more: Callable[[argparse.ArgumentParser], None] = lambda parser: None
               ) -> tuple[argparse.Namespace, list[str]]:
    """A soak script's options (the common ones and ``more``'s) and the train flags
    after ``--`` in ``argv`` (default ``sys.argv[1:]``); ``doc``: the script's docstring."""
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_options(parser)
    more(parser)
    return parser.parse_args(argv), extra


def sample_then_stop(proc: subprocess.Popen, sample: Callable[[], dict], args: argparse.Namespace,
                     log_path: str, stop_timeout_s: float) -> tuple[list, int, float] | None:
    """Call ``sample()`` (``{role: (pid, rss_bytes)}``) every ``args.interval_s`` for
    ``args.minutes`` (printing the roles whenever they change), then SIGTERM ``proc``.

    Returns:
      ``(samples, exit code, seconds the stop took)``, samples as ``(t, sample)``; or
      ``None`` if the run exited early (said, with ``log_path``).

    Raises:
      subprocess.TimeoutExpired: ``proc`` did not exit ``stop_timeout_s`` after SIGTERM
        (it is killed; so it is when this is interrupted).
    """
    samples: list = []
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 60 * args.minutes:
            if proc.poll() is not None:
                print(f"soak: the run exited early with code {proc.returncode}; see {log_path}")
                return None
            samples.append((time.monotonic() - t0, sample()))
            if len(samples) == 1 or set(samples[-1][1]) != set(samples[-2][1]):
                print(f"soak: t={samples[-1][0]:.0f} s, following {len(samples[-1][1])} "
                      f"processes: {', '.join(sorted(samples[-1][1]))}", flush=True)
            time.sleep(args.interval_s)
        t_stop = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(stop_timeout_s)
        return samples, code, time.monotonic() - t_stop
    finally:  # interrupted, or no stop in time: killed
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of every soak script: duration, sampling, growth limit, run folder."""
    parser.add_argument("--minutes", type=float, default=20.0, help="total run time")
    parser.add_argument("--warmup_minutes", type=float, default=None,
                        help="ignored start (default: a quarter of the run, at most 5 min)")
    parser.add_argument("--interval_s", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--window_s", type=float, default=30.0,
                        help="samples of this many seconds are averaged (median) at both ends")
    parser.add_argument("--max_growth", type=float, default=0.10, help="allowed RSS growth")
    parser.add_argument("--logdir", default="", help="run folder (default runs/soak-<time>)")


def warmup_seconds(args: argparse.Namespace) -> float:
    return 60 * (args.warmup_minutes if args.warmup_minutes is not None else min(5.0, args.minutes / 4))


def finish(report: dict, samples: list, args: argparse.Namespace, logdir: str, clean: bool) -> int:
    """Add each process's RSS growth to ``report`` (from ``samples``: ``(t, {role:
    (pid, rss_bytes)})``), print it, save it as ``LOGDIR/soak.json``; the exit code
    (0: ``clean`` and every comparable process grew less than ``args.max_growth``)."""
    warmup_s = warmup_seconds(args)
    after = [(t, s) for t, s in samples if t >= warmup_s]
    if len(after) < 2:
        print("soak: too few samples after warm-up; run longer")
        return 1
    first = [s for t, s in after if t <= after[0][0] + args.window_s]
    last = [s for t, s in after if t >= after[-1][0] - args.window_s]
    report["processes"] = {}
    ok = clean
    for role in sorted({r for _, s in after for r in s}):
        pids = {s[role][0] for _, s in after if role in s}
        a = [s[role][1] for s in first if role in s]
        b = [s[role][1] for s in last if role in s]
        if not a or not b:
            continue
        start, end = statistics.median(a), statistics.median(b)
        growth = (end - start) / start
        peak = max(s[role][1] for _, s in after if role in s)
        # A restarted actor (new pid) starts a fresh process: its growth is not comparable.
        comparable = len(pids) == 1
        report["processes"][role] = {"pids": sorted(pids), "rss_after_warmup_mb": round(start / 2**20, 1),
                                     "rss_end_mb": round(end / 2**20, 1),
                                     "rss_peak_mb": round(peak / 2**20, 1),
                                     "growth": round(growth, 4), "comparable": comparable}
        if comparable and growth >= args.max_growth:
            ok = False
    record = _last_record(logdir)
    report["last_metrics"] = {k: record.get(k) for k in (
        "env_steps", "fps", "policy_version", "episode_return_mean", "actor_restarts", "actor_hangs",
        "dropped_requests", "dropped_segments", "nonfinite_segments_dropped",
        "nonfinite_updates_skipped") if k in record}
    report["ok"] = ok
    with open(os.path.join(logdir, "soak.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"soak: {args.minutes} min, warm-up {warmup_s:.0f} s, {len(samples)} samples, "
          f"stopped in {report['stop_s']:.1f} s with exit code {report['exit_code']}, "
          f"leftover processes: {report['leftover_processes'] or 'none'}")
    width = max([10, *map(len, report["processes"])])
    print(f"{'process':<{width}} {'after warm-up MB':>17} {'end MB':>8} {'peak MB':>8} {'growth':>8}")
    for role, p in report["processes"].items():
        note = "" if p["comparable"] else "  (restarted: not compared)"
        print(f"{role:<{width}} {p['rss_after_warmup_mb']:>17.1f} {p['rss_end_mb']:>8.1f} "
              f"{p['rss_peak_mb']:>8.1f} {100 * p['growth']:>7.2f}%{note}")
    print("last metrics:", json.dumps(report["last_metrics"]))
    print("soak:", "PASS" if ok else f"FAIL (growth limit {100 * args.max_growth:.0f}%, clean stop)")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())

"""Rungs 5 and 6, end to end: training env steps/s through ``jaxsrl.launch.launcher.train``.

Each run is its own accelerator process (``python -m jaxsrl.bench.end_to_end
'<json>'``) that resolves the config with ``jaxsrl.experiment.config.load_config`` from the same
flags as ``train.py``, applies the benchmark's overrides (log interval, logdir, no
step limit, and for the scaling rung ``num_actors``) and calls ``train``. The parent
follows ``LOGDIR/run/metrics.jsonl`` (``LOGDIR/train.log`` beside the run folder): it skips the records up to the first one with
frames, plus ``warmup_intervals`` more, measures frames/s between that record and the
last one once ``measure_s`` seconds of records have arrived, then stops the run with
SIGTERM (which ``train`` turns into a clean shutdown). Meanwhile it samples the peak
resident memory of the accelerator process and of its actor processes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time

from jaxsrl.bench import procs
from jaxsrl.bench.memory import MemorySampler
from jaxsrl.core.child import die_with_parent
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train
from jaxsrl.experiment.run_dir import RunDir

#: what every benchmark run overrides (and why): no early stop, so the parent decides
#: when to stop; no periodic checkpoint inside the measured window.
BASE_OVERRIDES = {"target_return": None, "checkpoint_interval_s": 1e9, "resume": False,
                  "overwrite": True}  # a kept folder of an earlier benchmark is reused
#: the step limit is raised to this many learner updates' worth of frames: far beyond
#: any benchmark window, yet small enough that ``num_updates`` (the horizon of
#: learning-rate schedules, counted in int32 optimiser steps) does not overflow.
UPDATES_HORIZON = 2**18


def child_main(payload: dict) -> int:
    """Resolve the config, apply the overrides and train until SIGTERM."""
    die_with_parent(payload.get("parent_pid"))  # with the benchmark process, as actors with train
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S", force=True)  # Orbax's import set up the root logger
    logging.getLogger("absl").setLevel(logging.WARNING)
    cfg = dataclasses.replace(load_config(payload["argv"]), **payload["overrides"])
    horizon = cfg.batch_segments * cfg.segment_length * UPDATES_HORIZON
    cfg = dataclasses.replace(cfg, total_env_steps=max(cfg.total_env_steps, horizon))
    cfg.validate()
    try:
        train(cfg)
    except KeyboardInterrupt:
        pass
    return 0


def read_records(logdir: str) -> list[dict]:
    """The interval records of a run's ``metrics.jsonl`` so far (not the closing one)."""
    try:
        return RunDir(logdir).read_metrics(final=False)
    except FileNotFoundError:
        return []


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _first(records: list[dict], learning_only: bool = False) -> int | None:
    """Index of the first record with frames (``learning_only``: and updates, for
    off-policy runs, whose actors run ahead of the learner until the minimum fill)."""
    return next((i for i, r in enumerate(records) if r.get("env_steps", 0) > 0
                 and (not learning_only or r.get("policy_version", 0) > 0)), None)


def summarize(records: list[dict], warmup_intervals: int, learning_only: bool = False) -> dict:
    """Frames/s and friends over the records after warm-up (see module docstring)."""
    first = _first(records, learning_only)
    if first is None:
        raise RuntimeError("the run produced no env steps")
    start = min(first + warmup_intervals, len(records) - 2)
    if start < first:
        raise RuntimeError(f"only {len(records) - first} record(s) with env steps; need 2")
    s, e = records[start], records[-1]
    window = records[start + 1:]
    dt = e["wall_time_s"] - s["wall_time_s"]

    def wait_fraction(r):
        env_s, wait_s = r.get("actor/env_s"), r.get("actor/wait_s")
        return wait_s / (env_s + wait_s) if env_s is not None and wait_s and env_s + wait_s > 0 else None

    fps = [r["fps"] for r in window]
    return {
        "env_steps_per_s": (e["env_steps"] - s["env_steps"]) / dt,
        "interval_fps_min": min(fps),
        "interval_fps_max": max(fps),
        "updates_per_s": (e.get("policy_version", 0) - s.get("policy_version", 0)) / dt,
        "batch_rows_mean": _mean([r.get("inference/batch_rows") for r in window]),
        # per-stage timers (ms), means over the measured intervals
        "learner_update_ms": _mean([r.get("learner/update_ms") for r in window]),
        "learner_batch_wait_ms": _mean([r.get("learner/batch_wait_ms") for r in window]),
        "inference_latency_ms_p50": _mean([r.get("inference/latency_ms_p50") for r in window]),
        "inference_latency_ms_p99": _mean([r.get("inference/latency_ms_p99") for r in window]),
        "staleness_mean": _mean([r.get("staleness_mean") for r in window]),
        # off-policy runs: the achieved samples per inserted item (None for on-policy)
        "replay_ratio": _mean([r.get("replay/ratio") for r in window]),
        "actor_wait_fraction": _mean([wait_fraction(r) for r in window]),
        "episode_return_mean_last": e.get("episode_return_mean"),
        "first_frames_at_s": records[first]["wall_time_s"],
        "measured_from_s": s["wall_time_s"],
        "seconds": dt,
        "intervals": len(window),
    }


def run(argv: list[str], overrides: dict, logdir: str, warmup_intervals: int, measure_s: float,
        timeout_s: float = 180.0, sample_memory: bool = True, learning_only: bool = False) -> dict:
    """One training run in a child process, measured and stopped (see module docstring;
    ``learning_only``: the window starts once updates have started, see :func:`_first`)."""
    os.makedirs(logdir, exist_ok=True)
    run_dir = os.path.join(logdir, "run")  # the run folder holds the run's files only
    overrides = {**BASE_OVERRIDES, **overrides, "logdir": run_dir}
    log_path = os.path.join(logdir, "train.log")
    with open(log_path, "w") as log_file:
        child = procs.start_module("jaxsrl.bench.end_to_end",
                                   {"argv": list(argv), "overrides": overrides,
                                    "parent_pid": os.getpid()},
                                   pipes=False, stdout=log_file, stderr=subprocess.STDOUT)
    sampler = MemorySampler(child.pid, root_kind="accelerator") if sample_memory else None
    t0 = time.monotonic()
    stopped_early = None
    try:
        if sampler:
            sampler.__enter__()
        while True:
            time.sleep(0.2)
            if child.poll() is not None:
                stopped_early = f"the training process exited with code {child.returncode}"
                break
            records = read_records(run_dir)
            first = _first(records, learning_only)
            if first is not None and len(records) > first + warmup_intervals:
                start = records[first + warmup_intervals]["wall_time_s"]
                if records[-1]["wall_time_s"] - start >= measure_s:
                    break
            if time.monotonic() - t0 > timeout_s:
                stopped_early = f"timed out after {timeout_s:.0f} s"
                break
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if sampler:
            sampler.__exit__(None, None, None)
    records = read_records(run_dir)
    try:
        out = summarize(records, warmup_intervals, learning_only)
    except RuntimeError as exc:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-15:])
        raise RuntimeError(f"{exc} ({stopped_early or 'stopped'}); last log lines:\n{tail}") from None
    if stopped_early:
        out["note"] = stopped_early
    resolved = RunDir(run_dir).config_or_empty()
    flow = resolved.get("dataflow") or {}
    out["num_actors"] = (sum(int(a.get("count", 0)) for a in flow.get("actors", []))
                         if flow else resolved.get("num_actors", overrides.get("num_actors")))
    out["inference"] = resolved.get("inference_resolved", resolved.get("inference"))  # server or inline
    out["resolved_config"] = resolved
    out["wall_s"] = time.monotonic() - t0
    if sampler:
        out["memory"] = sampler.peaks()
    return out


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))

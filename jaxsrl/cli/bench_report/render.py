"""Render a finished ladder report (:func:`jaxsrl.cli.bench_report.report.finalize`) as Markdown
(``docs/benchmarks.md``) and console text, and write it with its JSON (the Markdown
into the generated region of the file, :mod:`jaxsrl.cli.bench_report.md_region`).

Plain data in, text out (no JAX, no processes).
"""

from __future__ import annotations

import json
import os

from jaxsrl.cli.bench_report import md_region
from jaxsrl.cli.bench_report.report import RUNG_TITLES, UNIT_DIGITS, fmt, fmt_pct

METHOD = """\
Every rung runs on the machine described above, with the run config resolved by
`jaxsrl.experiment.config.load_config` from the same flags as `scripts/train.py`.

1. **Raw environment**: one OS process per actor of the layout (`python -m
   jaxsrl.bench.raw_env`, no JAX), each stepping the actor's ring of
   `jaxsrl.envs.make_actor_env` groups with uniformly random actions; all processes
   start together. The sum of their env steps/s is the ceiling of this machine.
   Each process also times its `env.step` calls in CPU time (`time.thread_time`): env
   steps per core-second, and the env part of the compute-bound ceiling.
1b. **Physics only**: the env's own MuJoCo model stepped with random controls and no
   observations, on one core in the benchmark process, timed in CPU time
   (`jaxsrl/bench/physics.py`): hide-and-seek through
   `jaxsrl.envs.hide_and_seek.bench.physics_steps_per_second` (`n_substeps` `mj_step`
   per env step), Gymnasium MuJoCo envs by `mj_step` x `frame_skip` on
   `env.unwrapped.model`; n/a for envs without a MuJoCo model (CartPole, Atari). Rung 1
   per core-second over this rate is what observations, rewards and the rest of the
   env step leave of its physics.
2. **Transport**: one actor group's `act` request (real observations after a reset,
   encoded by `jaxsrl.streams.wire`) sent by a DEALER to an echo ROUTER in another process over
   tcp loopback, `ring_size` requests in flight, replies decoded. MB/s counts both
   directions. Its frames/s ceiling is round trips/s x env steps per request for ONE
   actor connection.
3. **Inference**: real `python -m jaxsrl.workers.actor` processes (specs as the launcher
   builds them) and a real `PolicyWorker` thread with frozen initial parameters; no
   learner (a PULL socket counts the segments' `env_steps` and drops them). Batch rows
   come from the server's `inference/batch_rows` metric, latency from its
   `inference/latency_ms_p50`/`_p99` metrics (time from noticing a request to the last
   reply of that batch sent; queueing before that is not included). "Actor wait" is the share of actor time spent waiting for
   actions (the actors' own `timing`).
4. **Learner only**: the jitted `learn` (`jaxsrl.parallel.devices.jit_learn`, compiled ahead of
   time) called back to back on one synthetic batch of `batch_segments x
   segment_length` (random observations and actions) already on the devices.
5. **End to end**: `jaxsrl.launch.launcher.train` in its own process with the resolved config
   (overridden only: `log_interval_s`, `logdir`, no early stop, no periodic checkpoint,
   and a step limit far beyond the window). Env steps/s are read from its
   `metrics.jsonl` between the record after the first interval with frames (warm-up
   skipped) and the last record; then the run is stopped with SIGTERM.
6. **Scaling**: rung 5 again with `--num_actors` = 1, 2, 4, ... The ideal line is
   rung 1's env steps/s per process x the number of actors, capped at the number of
   cores (more processes than cores cannot step more environments).
7. **Replay buffer**: `jaxsrl.workers.buffer.replay.Replay` alone on the device, at the
   agent's `ReplaySpec` (defaults for on-policy agents), uniform and prioritised: `add`
   of 256 host rows back to back, then `sample` (fetched to the host) and, prioritised,
   `sample` + `set_priorities` on the full buffer (`jaxsrl/bench/replay.py`).
8. **Off-policy end to end** (opt-in: `--rungs=offpolicy`): rung 5's measurement for
   Ape-X DQN on CartPole-v1 (replay in the learner, then in a buffer process) and SAC
   on HalfCheetah-v5, each with its own configs, the window starting once updates
   started; updates/s and the achieved replay ratio beside env steps/s
   (`jaxsrl/bench/offpolicy.py`).
9. **Inference server only**: the real `PolicyWorker` (its ROUTER socket, request
   loop, checks, batching, jitted `act` over the local devices, replies) serving a
   trivial policy (zeros, the carry passed through: no arithmetic to speak of) to the
   DEALER sockets of one fake-actor process (`jaxsrl/bench/fake_clients.py`: no JAX, no
   environments; 8 sockets x 2 requests in flight) over tcp loopback, at 1, 16 and 64
   rows per request. Rows/s per server core = rows answered / CPU seconds of the server's
   process (`time.process_time`: every thread) over the window; CPU per request split by
   thread kind (policy thread, ZeroMQ I/O, XLA pool, other) from psutil's thread times
   (`jaxsrl/bench/server_only.py`).
10. **Fan in** (opt-in: `--rungs=fan_in`): 1,000-4,000 simulated actors (one DEALER and
   one PUSH socket each, spread over a few processes: `jaxsrl/bench/fan_in_clients.py`,
   no JAX) on ONE inference server (the real `PolicyWorker`, trivial policy, every actor
   in its actor table, `max_rows` of all actors as the launcher sizes it) and ONE sample
   socket (the trainer's PULL settings and `SegmentGate`, no `learn`), with the
   CartPole and hide-and-seek request and segment sizes, each actor sending about
   `--fan_in_rate` requests per second and a segment every T replies of a ring group.
   Latency from send to reply at the actors (p50/p99 of a log histogram), server CPU per
   request (`time.process_time` of the server's process), RSS growth per actor, file
   descriptors, and connections refused or never answered (`jaxsrl/bench/fan_in.py`).
11. **Device actors** (opt-in: `--rungs=device_actors`, needs the `gymnax` extra): env
   steps/s of the device actors' compiled rollout (gymnax `CartPole-v1` and PPO's `act`
   under one `lax.scan`) at 16, 64 and 256 environments x 32 steps, timed after its
   compile (`jaxsrl/bench/device_rollout.py`).

**Compute-bound ceiling** (`jaxsrl/cli/bench_report/ceiling.py`): cores / (env + act + learn),
each the core time of one env step measured alone: env, rung 1's CPU time of
`env.step`; act, the CPU time of rung 3's policy-worker process (every thread, XLA's
included) at the layout's actor count; learn, rung 4's CPU time of the learner
process. End to end is given as a fraction of it; what it misses is the work none of
the three rungs counts (actor bookkeeping and encoding, the sample stream, batching).

**Memory**: peak resident set size per process kind: the kernel's high-water mark
(`VmHWM` of `/proc/<pid>/status`) of the training process (= accelerator process) and
of its actor processes, read every 0.25 s during rung 5 (psutil finds the processes);
rung 1's environment processes report their own `VmHWM`. MB = 10^6 bytes, MiB = 2^20.

**Other load**: for each rung, the CPU-seconds the whole machine used (`/proc/stat`)
minus those of the benchmark's own processes (`RUSAGE_SELF` + `RUSAGE_CHILDREN`),
divided by the rung's wall time: how many cores other work kept busy. Rungs run one
after another, so on a shared machine they can see different competition; compare
rates only between rows with similar other load.

**Bottleneck**: each rung gives a ceiling in env frames/s for this layout (rungs 1, 3, 4,
and rung 2 for one connection); the lowest one is the bottleneck. "Learner busy" is
rung 5's updates/s x rung 4's time per update: the share of the wall time the learner
needs at its isolated speed (near 100% would make the learner the limit).
"""


def _md_table(header: list[str], rows: list[list]) -> str:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _met(t: dict) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[t["met"]]


def _mode(c: dict) -> str:
    """`` (inference: inline)`` for a ceiling whose end-to-end run recorded its mode."""
    return f" (inference: {c['end_to_end_inference']})" if c.get("end_to_end_inference") else ""


def _ceiling_md(result: dict) -> list[str]:
    c = result.get("compute_ceiling") or {}
    out = ["## Compute-bound ceiling", ""]
    if "missing" in c or not c:
        return out + [f"Not computed: no measurement of {', '.join(c.get('missing', ['?']))} "
                      "(its rung not run or failed, or the report predates the figure).", ""]
    rows = [[part, fmt(c[key], 3), source, fmt_pct(c[key] / c["total_ms"])]
            for part, key, source in (("env", "env_ms", RUNG_TITLES["raw_env"]),
                                      ("act", "act_ms", RUNG_TITLES["inference"]),
                                      ("learn", "learn_ms", RUNG_TITLES["learner"]))]
    rows.append(["sum", fmt(c["total_ms"], 3), "", "100%"])
    frac = c.get("end_to_end_fraction")
    return out + [_md_table(["part", "core ms per env step", "measured in", "share"], rows), "",
                  f"Ceiling: {c['cores']} cores / {fmt(c['total_ms'], 3)} ms = "
                  f"**{fmt(c['env_steps_per_s'])} env steps/s**; end to end"
                  + _mode(c) + " reaches "
                  + (f"**{fmt_pct(frac)}** of it." if frac is not None else "— (not run)."), ""]


def render_markdown(result: dict) -> str:
    """``docs/benchmarks.md``: machine, command, ladder, targets, scaling, memory, method."""
    m, lay = result["machine"], result["layout"]
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench.py` down to *How each rung is measured* (do not edit "
           "this part by hand; rerun it); sections after it are written by hand and kept when "
           "the file is regenerated. Raw numbers: [`benchmarks.json`](benchmarks.json).", "",
           "## Machine", "",
           f"- cores: {m.get('cores')} ({m.get('cpu')}), memory: {m.get('memory_gib')} GiB",
           f"- devices: {', '.join(m.get('devices', []))} (backend `{m.get('platform')}`)",
           f"- python {m.get('python')}, jax {m.get('jax')}, {m.get('os')}",
           f"- date: {m.get('date')}",
           f"- load average (1, 5, 15 min) at start: {m.get('load_average_start')}, "
           f"at end: {m.get('load_average_end')}"
           + (" — the machine was shared with other work: rates are lower and latencies higher "
              "than on an idle machine (see the other-load column)"
              if (m.get("load_average_start") or [0])[0] > 0.5 * (m.get("cores") or 1) else ""),
           "- mode: " + ("quick (tiny durations; numbers are rough)" if result.get("quick")
                         else "full") + ", "
           f"total benchmark time {fmt(result.get('wall_s'))} s",
           "", "Command:", "", "```bash", m.get("command", ""), "```", "",
           f"Layout: `--env={lay['env']}`, {lay['num_actors']} actor processes x "
           f"{lay['envs_per_actor']} envs (ring of {lay['ring_size']}), segments of "
           f"{lay['segment_length']} steps, {lay['batch_segments']} segments per update, agent "
           f"`{lay['agent']}`.", "",
           "## Ladder", "",
           _md_table(["rung", "what", "measured", "ceiling (env frames/s)", "other load (cores)",
                      "details"],
                     [[r["rung"], r["what"], r["value"], fmt(r["ceiling_fps"]),
                       fmt(r.get("other_cores"), 1), r["detail"]] for r in result["table"]]), "",
           "*Ceiling*: the env frames/s this rung allows the layout. *Other load*: cores kept "
           "busy by processes other than the benchmark's during that rung (see below).", ""]
    b = result["bottleneck"]
    out += ["## Bottleneck", "",
            f"**{RUNG_TITLES.get(b.get('rung'), '—')}** — {b.get('why')}.", ""]
    out += _ceiling_md(result)
    if result["targets"]:
        out += ["## Targets", "",
                _md_table(["target", "wanted", "measured", "status", "bottleneck rung", "why"],
                          [[t["name"], t["target"],
                            f"{fmt(t['value'], UNIT_DIGITS.get(t['unit'], 1))} {t['unit']}"
                            if t["value"] is not None else "—",
                            _met(t), t["bottleneck"], t["why"]] for t in result["targets"]]), ""]
    if result["scaling"]:
        out += ["## Scaling", "",
                _md_table(["actor processes", "env steps/s", "ideal", "efficiency",
                           "actors wait", "updates/s", "other load (cores)"],
                          [[p["num_actors"],
                            fmt(p["env_steps_per_s"]) if not p["error"] else p["error"],
                            fmt(p["ideal"]),
                            fmt_pct(p["efficiency"]),
                            fmt_pct(p["actor_wait_fraction"]),
                            fmt(p["updates_per_s"], 1), fmt(p.get("other_cores"), 1)]
                           for p in result["scaling"]]), ""]
    if result["memory"]:
        out += ["## Peak memory", "",
                _md_table(["process kind", "peak RSS (MiB)", "processes", "measured in"],
                          [[k, fmt(v["peak_rss_mib"], 1), v["processes"], v["measured_in"]]
                           for k, v in sorted(result["memory"].items())]), ""]
    if "points" in (result["rungs"].get("fan_in") or {}):
        out += ["## Fan in", "", fan_in_markdown(result["rungs"]["fan_in"]), ""]
    if result.get("notes"):
        out += ["## Notes", ""] + [f"- {n}" for n in result["notes"]] + [""]
    out += ["## How each rung is measured", "", METHOD]
    return "\n".join(out)


def fan_in_markdown(rung: dict) -> str:
    """Rung 10's table (one row per workload and actor count) and its fd limits."""
    rows = []
    for p in rung["points"]:
        if "error" in p:
            rows.append([p["workload"], f"{p['actors']:,}", p["error"]] + [""] * 9)
            continue
        by = p.get("cpu_us_per_request_by_thread") or {}
        rows.append([
            p["workload"], f"{p['actors']:,}", fmt(p["requests_per_s"]),
            fmt(p["latency_ms_p50"], 2), fmt(p["latency_ms_p99"], 1),
            f"{fmt(p['server_cpu_us_per_request'])} ({fmt(by.get('policy'))} / {fmt(by.get('zmq'))})",
            fmt(p["server_cores"], 2),
            f"{fmt(p['segments_per_s'])} ({fmt(p['receiver_cpu_us_per_segment'])} µs)",
            f"{fmt(p['server_kib_per_actor'], 1)} / {fmt(p['client_rss_mib_per_actor'] * 1024, 0)}",
            f"{p['server_fds']:,} ({p['server_fds_per_actor']:.2f})",
            f"{p['refused']} / {p['unanswered']} / {p['lost']}",
            f"{p['segments_blocked']} / {p['segments_dropped']}"])
    return "\n".join([
        _md_table(["workload", "actors", "requests/s", "p50 ms", "p99 ms",
                   "server CPU µs/request (policy thread / ZeroMQ I/O)", "server cores",
                   "segments/s (receiver CPU per segment)",
                   "KiB per actor: server RSS / client RSS", "server fds (per actor)",
                   "refused / unanswered / lost requests (since connecting)",
                   "segments blocked / dropped"], rows),
        "",
        f"{rung.get('rate_per_actor')} requests/s per actor, actors spread over "
        f"{rung.get('client_procs')} client processes; file-descriptor limit (soft/hard): "
        f"{rung.get('fd_limit_soft_before')} / {rung.get('fd_limit_hard')}, soft raised to "
        f"{rung.get('fd_limit_soft')} in the server and client processes."])


def render_console(result: dict) -> str:
    """A plain-text summary for the terminal."""
    lines = []
    for r in result["table"]:
        lines.append(f"{r['rung']:<20} {r['value']:>14}  {r['what']}")
        lines.append(f"{'':<20} {'':>14}  {r['detail']}")
    lines.append(f"bottleneck: {RUNG_TITLES.get(result['bottleneck'].get('rung'), '—')} — "
                 f"{result['bottleneck'].get('why')}")
    c = result.get("compute_ceiling") or {}
    if "env_steps_per_s" in c:
        frac = c.get("end_to_end_fraction")
        lines.append(f"compute-bound ceiling: {fmt(c['env_steps_per_s'])} env steps/s = "
                     f"{c['cores']} cores / (env {c['env_ms']:.3f} + act {c['act_ms']:.3f} + "
                     f"learn {c['learn_ms']:.3f} ms per env step); end to end{_mode(c)} "
                     + (f"{frac:.0%} of it" if frac is not None else "not run"))
    else:
        lines.append(f"compute-bound ceiling: not computed (missing {c.get('missing')})")
    phys = result.get("raw_env_over_physics")
    if phys is not None:
        lines.append(f"raw env per core-second: {phys:.0%} of physics only")
    for t in result["targets"]:
        lines.append(f"target {t['name']} {t['target']}: "
                     f"{fmt(t['value'], UNIT_DIGITS.get(t['unit'], 1))} {t['unit']} "
                     f"-> {_met(t).strip('*')}")
    for k, v in sorted(result["memory"].items()):
        lines.append(f"memory {k}: {v['peak_rss_mib']} MiB peak ({v['processes']} process(es))")
    return "\n".join(lines)


def write(result: dict, json_path: str | None, md_path: str | None) -> None:
    """Write ``result`` as JSON and/or Markdown (folders created). The Markdown replaces
    only the generated region of an existing ``md_path``; its hand-written rest is kept.

    Raises:
      jaxsrl.cli.bench_report.md_region.RegionError: ``md_path`` exists without its region markers
        (nothing is written to it).
    """
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as f:
            f.write(json.dumps(result, indent=2, default=str) + "\n")
    if md_path:
        md_region.write(md_path, render_markdown(result))

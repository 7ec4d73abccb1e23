"""Turn the ladder's measurements into targets, a bottleneck, a table, JSON and Markdown.

Everything here is plain data in, plain data or text out (no JAX, no processes), so
the report of any ``benchmarks.json`` can be re-rendered with :func:`render_markdown`.
"""

from __future__ import annotations

import json
import math
import os

#: targets per environment (the issue's numbers, for the 2-core, no-GPU machine).
TARGETS = {
    "CartPole-v1": {"end_to_end_fps": 10_000, "inference_actors": 4, "inference_p99_ms": 5.0,
                    "actor_rss_mb": 100},
}

UNIT_DIGITS = {"frames/s": 0, "ms": 2, "MB": 1}

RUNG_TITLES = {
    "raw_env": "1. raw environment",
    "transport": "2. transport",
    "inference": "3. inference",
    "learner": "4. learner only",
    "end_to_end": "5. end to end",
    "scaling": "6. scaling",
    "replay": "7. replay buffer",
}

METHOD = """\
Every rung runs on the machine described above, with the run config resolved by
`jaxsrl.experiment.config.load_config` from the same flags as `scripts/train.py`.

1. **Raw environment**: one OS process per actor of the layout (`python -m
   jaxsrl.bench.raw_env`, no JAX), each stepping the actor's ring of
   `jaxsrl.envs.make_actor_env` groups with uniformly random actions; all processes
   start together. The sum of their env steps/s is the ceiling of this machine.
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


# -- formatting ---------------------------------------------------------------------
def fmt(x, digits: int = 0) -> str:
    """``x`` with thousands separators and ``digits`` decimals; ``—`` when missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, (int, float)):
        return f"{x:,.{digits}f}"
    return str(x)


def fmt_pct(x) -> str:
    return "—" if x is None else f"{x:.0%}"


def _ok(rung) -> bool:
    return isinstance(rung, dict) and "error" not in rung


def _err(rung) -> str:
    return f"failed: {rung.get('error', 'not run')}" if isinstance(rung, dict) else "not run"


def _inference_at(rungs: dict, actors: int):
    for entry in rungs.get("inference") or []:
        if entry.get("actors") == actors:
            return entry
    return None


# -- analysis -----------------------------------------------------------------------
def ceilings(result: dict) -> dict:
    """Env frames/s ceiling of each measured rung for the layout (see ``METHOD``)."""
    rungs, n = result["rungs"], result["layout"]["num_actors"]
    out = {}
    if _ok(rungs.get("raw_env")):
        out["raw_env"] = rungs["raw_env"]["env_steps_per_s"]
    t = rungs.get("transport")
    if _ok(t):
        out["transport"] = t["round_trips_per_s"] * t.get("env_steps_per_request", 1)
    inf = _inference_at(rungs, n)
    if _ok(inf):
        out["inference"] = inf["env_steps_per_s"]
    if _ok(rungs.get("learner")):
        out["learner"] = rungs["learner"]["env_steps_per_s"]
    return out


def bottleneck(result: dict) -> dict:
    """The limiting rung and why, in words and numbers."""
    ceil = ceilings(result)
    rungs = result["rungs"]
    e2e = rungs.get("end_to_end")
    if not ceil:
        return {"rung": None, "why": "no rung produced a ceiling"}
    rung = min(ceil, key=ceil.get)
    parts = [f"lowest ceiling: {RUNG_TITLES[rung]} at {fmt(ceil[rung])} env frames/s"]
    if rung == "inference":
        inf = _inference_at(rungs, result["layout"]["num_actors"])
        wait = inf.get("actor_wait_fraction")
        if wait is not None:
            parts.append(f"actors spend {wait:.0%} of their time waiting for actions "
                         f"(batches of {fmt(inf.get('batch_rows_mean'))} rows, server p50 "
                         f"{fmt(inf.get('latency_ms_p50'), 2)} ms)")
        if "raw_env" in ceil:
            parts.append(f"the environments alone step {ceil['raw_env'] / ceil[rung]:.1f}x faster")
    out = {"rung": rung, "ceilings": ceil}
    if _ok(e2e):
        fps = e2e["env_steps_per_s"]
        parts.append(f"end to end reaches {fps / ceil[rung]:.0%} of it")
        if fps > ceil[rung]:
            parts.append("(above 100%: the rungs ran one after another and the machine's other "
                         "load changed between them; compare their other-load columns)")
        if e2e.get("updates_per_s") and _ok(rungs.get("learner")):
            busy = e2e["updates_per_s"] * rungs["learner"]["update_ms_p50"] / 1e3
            out["learner_busy_fraction"] = busy
            parts.append(f"learner busy {busy:.0%} (rung 5's updates/s x rung 4's time per update)")
            if rung == "inference" and busy < 0.5 and fps < 0.8 * ceil[rung]:
                parts.append("so training runs below the inference ceiling although the learner "
                             "is mostly idle: likely because in training the policy worker shares "
                             "the accelerator process (its GIL) with the trainer thread and the "
                             "cores with the learner's XLA threads")
    out["why"] = "; ".join(parts)
    return out


def targets(result: dict) -> list[dict]:
    """Each target of this environment: value, met or not, and the rung to look at."""
    spec = TARGETS.get(result["layout"]["env"])
    if not spec:
        return []
    rungs, out = result["rungs"], []
    limit = bottleneck(result)
    e2e = rungs.get("end_to_end")
    fps = e2e.get("env_steps_per_s") if _ok(e2e) else None
    out.append({"name": "end-to-end env frames/s", "target": f">= {fmt(spec['end_to_end_fps'])}",
                "value": fps, "unit": "frames/s",
                "met": None if fps is None else fps >= spec["end_to_end_fps"],
                "bottleneck": RUNG_TITLES.get(limit.get("rung"), "—"),
                "why": "the lowest ceiling of the ladder (see Bottleneck)"})
    n = spec["inference_actors"]
    inf = _inference_at(rungs, n)
    p99 = inf.get("latency_ms_p99") if _ok(inf) else None
    why = "inference rung not run" if inf is None else (
        _err(inf) if not _ok(inf) else
        f"server batches of {fmt(inf.get('batch_rows_mean'))} rows, p50 "
        f"{fmt(inf.get('latency_ms_p50'), 2)} ms, {fmt(inf.get('batches_per_s'))} batches/s; "
        f"{n} actor processes + the server on {result['machine'].get('cores')} cores")
    out.append({"name": f"inference server p99 latency, {n} actors",
                "target": f"<= {spec['inference_p99_ms']} ms", "value": p99, "unit": "ms",
                "met": None if p99 is None else p99 <= spec["inference_p99_ms"],
                "bottleneck": RUNG_TITLES["inference"], "why": why})
    mem = memory(result)
    actor = mem.get("actor", {}).get("peak_rss_mib")
    actor_mb = None if actor is None else actor * 2**20 / 1e6
    raw = mem.get("raw_env", {}).get("peak_rss_mib")
    why = (f"{fmt(actor, 1)} MiB; " if actor is not None else "") + (
        f"a raw environment process (imports + envs, no sockets) peaks at {fmt(raw, 1)} MiB"
        if raw is not None else "")
    # Mostly imports + environments (what a raw environment process holds too), or the
    # actor's own buffers and sockets?
    where = (RUNG_TITLES["raw_env"] + ": imports + environments"
             if raw is not None and actor is not None and raw >= 0.8 * actor
             else "actor runtime: segment buffers, sockets")
    out.append({"name": "actor process peak RSS", "target": f"< {spec['actor_rss_mb']} MB",
                "value": actor_mb, "unit": "MB",
                "met": None if actor_mb is None else actor_mb < spec["actor_rss_mb"],
                "bottleneck": where, "why": why})
    return out


def memory(result: dict) -> dict:
    """Peak RSS per process kind: rung 5's processes, rung 1's, and rung 3's (fallback)."""
    rungs, out = result["rungs"], {}
    e2e = rungs.get("end_to_end")
    if _ok(e2e):
        for kind, entry in (e2e.get("memory") or {}).items():
            out[kind] = {**entry, "measured_in": RUNG_TITLES["end_to_end"]}
    for inf in rungs.get("inference") or []:
        for kind, entry in (inf.get("memory") or {}).items() if _ok(inf) else ():
            if kind == "actor" and "actor" not in out:
                out["actor"] = {**entry, "measured_in": RUNG_TITLES["inference"]}
    if _ok(rungs.get("raw_env")):
        out["raw_env"] = {"peak_rss_mib": rungs["raw_env"]["peak_rss_mib"],
                          "processes": rungs["raw_env"]["processes"],
                          "measured_in": RUNG_TITLES["raw_env"]}
    return out


def scaling(result: dict) -> list[dict]:
    """Rung 6 points with the ideal line (rung 1 per process x count, capped at cores)."""
    rungs, cores = result["rungs"], result["machine"].get("cores") or 1
    raw = rungs.get("raw_env")
    per_proc = raw["env_steps_per_s_per_process"] if _ok(raw) else None
    out = []
    for p in rungs.get("scaling") or []:
        n = p.get("num_actors")
        ideal = per_proc * min(n, cores) if per_proc and n else None
        fps = p.get("env_steps_per_s") if _ok(p) else None
        out.append({"num_actors": n, "env_steps_per_s": fps, "ideal": ideal,
                    "efficiency": fps / ideal if fps and ideal else None,
                    "actor_wait_fraction": p.get("actor_wait_fraction"),
                    "updates_per_s": p.get("updates_per_s"),
                    "other_cores": (p.get("load") or {}).get("other_cores"),
                    "error": None if _ok(p) else p.get("error")})
    return out


def table(result: dict) -> list[dict]:
    """The ladder as rows: rung, measured value, its env-frames/s ceiling, details."""
    rungs, lay, rows = result["rungs"], result["layout"], []
    ceil = ceilings(result)

    def add(rung, what, value, detail, ceiling=None, source=None):
        other = ((source or {}).get("load") or {}).get("other_cores")
        rows.append({"rung": RUNG_TITLES[rung], "what": what, "value": value,
                     "ceiling_fps": ceiling, "other_cores": other, "detail": detail})

    r = rungs.get("raw_env")
    what = f"env steps/s, {lay['num_actors']} procs x {lay['envs_per_actor']} envs, random actions"
    if _ok(r):
        add("raw_env", what, fmt(r["env_steps_per_s"]),
            f"{fmt(r['env_steps_per_s_per_process'])}/s per process; "
            f"{r['env_time_fraction']:.0%} of the time in env.step", ceil.get("raw_env"), r)
    elif r is not None:
        add("raw_env", what, "—", _err(r))
    t = rungs.get("transport")
    if _ok(t):
        add("transport", f"round trips/s, {fmt(t['request_bytes'])} B act request, "
                         f"{t['in_flight']} in flight",
            fmt(t["round_trips_per_s"]),
            f"{t['mb_per_s']:.1f} MB/s; round trip p50 {fmt(t['latency_us_p50'])} µs, "
            f"p99 {fmt(t['latency_us_p99'])} µs; x{t.get('env_steps_per_request', 1)} "
            f"env steps per request (one connection)", ceil.get("transport"), t)
    elif t is not None:
        add("transport", "round trips/s", "—", _err(t))
    for inf in rungs.get("inference") or []:
        n = inf.get("actors")
        what = f"env steps/s, {n} actor(s) + policy worker, frozen params"
        if _ok(inf):
            wait = inf.get("actor_wait_fraction")
            add("inference", what, fmt(inf["env_steps_per_s"]),
                f"batch {fmt(inf.get('batch_rows_mean'))} rows "
                f"({fmt(inf.get('requests_per_batch_mean'), 1)} requests), "
                f"{fmt(inf.get('batches_per_s'))} batches/s; latency p50 "
                f"{fmt(inf.get('latency_ms_p50'), 2)} ms, "
                f"p99 {fmt(inf.get('latency_ms_p99'), 2)} ms"
                + (f"; actors wait {wait:.0%}" if wait is not None else ""),
                ceil.get("inference") if n == lay["num_actors"] else None, inf)
        else:
            add("inference", what, "—", _err(inf))
    le = rungs.get("learner")
    if _ok(le):
        b, t_ = le["batch"]
        add("learner", f"samples/s, batch {b} x {t_}, {le['devices']} device(s)",
            fmt(le["samples_per_s"]),
            f"{fmt(le['samples_per_s_per_device'])}/s per device; {le['updates_per_s']:.1f} "
            f"updates/s, {le['update_ms_p50']:.1f} ms each (compile {le['compile_s']:.1f} s)",
            ceil.get("learner"), le)
    elif le is not None:
        add("learner", "samples/s", "—", _err(le))
    e = rungs.get("end_to_end")
    if _ok(e):
        ratio = e["env_steps_per_s"] / ceil["raw_env"] if "raw_env" in ceil else None
        wait = e.get("actor_wait_fraction")
        add("end_to_end", f"training env steps/s, {e.get('num_actors')} actors",
            fmt(e["env_steps_per_s"]),
            (f"{ratio:.0%} of rung 1; " if ratio is not None else "")
            + f"intervals {fmt(e['interval_fps_min'])}–{fmt(e['interval_fps_max'])}; "
            f"{e['updates_per_s']:.1f} updates/s, staleness {fmt(e.get('staleness_mean'), 2)}"
            + (f"; actors wait {wait:.0%}" if wait is not None else "")
            + f"; first frames after {e['first_frames_at_s']:.1f} s, measured {e['seconds']:.1f} s",
            None, e)
    elif e is not None:
        add("end_to_end", "training env steps/s", "—", _err(e))
    pts = scaling(result)
    if pts:
        add("scaling", "training env steps/s by actors (ideal)",
            ", ".join(f"{p['num_actors']}: {fmt(p['env_steps_per_s'])}" for p in pts),
            "ideal " + ", ".join(f"{p['num_actors']}: {fmt(p['ideal'])}" for p in pts))
    rp = rungs.get("replay")
    for mode in ("uniform", "prioritised") if _ok(rp) else ():
        m = rp[mode]
        cycle = m.get("learn_cycle_items_per_s")
        add("replay", f"items/s inserted, {mode}, {m['item_bytes']} B items, capacity "
                      f"{m['capacity']}", fmt(m["insert_items_per_s"]),
            f"sampled {fmt(m['sample_items_per_s'])}/s in batches of {m['batch_size']}"
            + (f"; sample + set_priorities {fmt(cycle)}/s" if cycle else "")
            + f" (compile {m['compile_s']:.1f} s)", None, rp)
    if rp is not None and not _ok(rp):
        add("replay", "items/s inserted", "—", _err(rp))
    return rows


def finalize(result: dict) -> dict:
    """Add the derived parts (table, targets, bottleneck, memory, scaling) to ``result``."""
    result["table"] = table(result)
    result["bottleneck"] = bottleneck(result)
    result["targets"] = targets(result)
    result["memory"] = memory(result)
    result["scaling"] = scaling(result)
    ceil, e2e = result["bottleneck"].get("ceilings") or {}, result["rungs"].get("end_to_end")
    result["end_to_end_over_raw_env"] = (e2e["env_steps_per_s"] / ceil["raw_env"]
                                         if _ok(e2e) and ceil.get("raw_env") else None)
    return result


# -- rendering ------------------------------------------------------------------------
def _md_table(header: list[str], rows: list[list]) -> str:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _met(t: dict) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[t["met"]]


def render_markdown(result: dict) -> str:
    """``docs/benchmarks.md``: machine, command, ladder, targets, scaling, memory, method."""
    m, lay = result["machine"], result["layout"]
    out = ["# Benchmarks", "",
           "Generated by `scripts/bench.py` (do not edit by hand; rerun it). "
           "Raw numbers: [`benchmarks.json`](benchmarks.json).", "",
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
    if result.get("notes"):
        out += ["## Notes", ""] + [f"- {n}" for n in result["notes"]] + [""]
    out += ["## How each rung is measured", "", METHOD]
    return "\n".join(out)


def render_console(result: dict) -> str:
    """A plain-text summary for the terminal."""
    lines = []
    for r in result["table"]:
        lines.append(f"{r['rung']:<20} {r['value']:>14}  {r['what']}")
        lines.append(f"{'':<20} {'':>14}  {r['detail']}")
    lines.append(f"bottleneck: {RUNG_TITLES.get(result['bottleneck'].get('rung'), '—')} — "
                 f"{result['bottleneck'].get('why')}")
    for t in result["targets"]:
        lines.append(f"target {t['name']} {t['target']}: "
                     f"{fmt(t['value'], UNIT_DIGITS.get(t['unit'], 1))} {t['unit']} "
                     f"-> {_met(t).strip('*')}")
    for k, v in sorted(result["memory"].items()):
        lines.append(f"memory {k}: {v['peak_rss_mib']} MiB peak ({v['processes']} process(es))")
    return "\n".join(lines)


def write(result: dict, json_path: str | None, md_path: str | None) -> None:
    """Write ``result`` as JSON and/or Markdown (folders created)."""
    for path, text in ((json_path, lambda: json.dumps(result, indent=2, default=str) + "\n"),
                       (md_path, lambda: render_markdown(result))):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(text())

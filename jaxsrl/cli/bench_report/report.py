"""Turn the ladder's measurements into targets, a bottleneck, a table, JSON and Markdown.

Everything here is plain data in, plain data or text out (no JAX, no processes), so
the report of any ``benchmarks.json`` can be re-rendered with :func:`render_markdown`
(:mod:`jaxsrl.cli.bench_report.render`).
"""

from __future__ import annotations

import math

from jaxsrl.cli.bench_report import ceiling as ceiling_model

#: targets per environment (the issue's numbers, for the 2-core, no-GPU machine).
TARGETS = {
    "CartPole-v1": {"end_to_end_fps": 10_000, "inference_actors": 4, "inference_p99_ms": 5.0,
                    "actor_rss_mb": 100},
}

UNIT_DIGITS = {"frames/s": 0, "ms": 2, "MB": 1}

RUNG_TITLES = {
    "raw_env": "1. raw environment",
    "physics": "1b. physics only",
    "transport": "2. transport",
    "inference": "3. inference",
    "learner": "4. learner only",
    "end_to_end": "5. end to end",
    "scaling": "6. scaling",
    "replay": "7. replay buffer",
    "offpolicy": "8. off-policy",
    "server_only": "9. inference server only",
    "fan_in": "10. fan in",
    "device_actors": "11. device actors",
}



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
            f"{r['env_time_fraction']:.0%} of the time in env.step"
            + (f"; {fmt(r['env_steps_per_core_s'])} per core-second of env.step"
               if r.get("env_steps_per_core_s") else ""), ceil.get("raw_env"), r)
    elif r is not None:
        add("raw_env", what, "—", _err(r))
    ph = rungs.get("physics")
    what = "env steps per core-second, the env's MuJoCo model, random controls, no observations"
    if isinstance(ph, dict) and "not_applicable" in ph:
        add("physics", what, "n/a", ph["not_applicable"], None, ph)
    elif _ok(ph):
        frac = ceiling_model.physics_fraction(result)
        add("physics", what, fmt(ph["physics_steps_per_core_s"]),
            f"{ph['substeps_per_env_step']} mj_step per env step"
            + (f" ({ph['variant']})" if ph.get("variant") else "")
            + (f"; rung 1 steps {frac:.0%} of it per core-second" if frac is not None else "")
            + (f"; ignored env_kwargs {ph['ignored_env_kwargs']}"
               if ph.get("ignored_env_kwargs") else ""), None, ph)
    elif ph is not None:
        add("physics", what, "—", _err(ph))
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
    bound = ceiling_model.ceiling(result)
    if _ok(e):
        ratio = e["env_steps_per_s"] / ceil["raw_env"] if "raw_env" in ceil else None
        of_bound = bound.get("end_to_end_fraction")
        wait = e.get("actor_wait_fraction")
        add("end_to_end", f"training env steps/s, {e.get('num_actors')} actors",
            fmt(e["env_steps_per_s"]),
            (f"{ratio:.0%} of rung 1; " if ratio is not None else "")
            + (f"{of_bound:.0%} of the compute-bound ceiling; " if of_bound is not None else "")
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
    for o in rungs.get("offpolicy") or []:
        what = f"training env steps/s, {o.get('label')}"
        if not _ok(o):
            add("offpolicy", what, "—", _err(o))
            continue
        add("offpolicy", what, fmt(o["env_steps_per_s"]),
            f"{o['updates_per_s']:.1f} updates/s, replay ratio {fmt(o.get('replay_ratio'), 1)}, "
            f"{fmt(o.get('learner_update_ms'), 2)} ms per update, staleness "
            f"{fmt(o.get('staleness_mean'))}; `{o.get('command')}`; measured {o['seconds']:.1f} s "
            f"after the first updates", None, o)
    so = rungs.get("server_only")
    for p in so["points"] if _ok(so) else ():
        by = p.get("cpu_us_per_request_by_thread") or {}
        add("server_only", f"rows/s per server core, {p['rows_per_request']} rows/request, "
                           f"trivial policy, {so['clients']} clients x {so['in_flight']} in flight",
            fmt(p["rows_per_server_core_s"]),
            f"{fmt(p['cpu_us_per_request'], 1)} µs CPU per request ("
            + ", ".join(f"{k} {fmt(v, 1)}" for k, v in by.items()) + "); "
            f"{fmt(p['requests_per_s'])} requests/s on {p['server_cores']:.2f} server cores; "
            f"batch {fmt(p.get('batch_rows_mean'))} rows "
            f"({fmt(p.get('requests_per_batch_mean'), 1)} requests)", None, so)
    if so is not None and not _ok(so):
        add("server_only", "rows/s per server core", "—", _err(so))
    fi = rungs.get("fan_in")
    for p in fi["points"] if _ok(fi) else ():
        what = f"p99 latency (ms), {p['workload']}, {p['actors']:,} actors"
        if not _ok(p):
            add("fan_in", what, "—", _err(p))
            continue
        add("fan_in", what, fmt(p["latency_ms_p99"], 1),
            f"p50 {fmt(p['latency_ms_p50'], 2)} ms at {fmt(p['requests_per_s'])} requests/s "
            f"({p['rate_per_actor']:g}/s per actor); server {fmt(p['server_cpu_us_per_request'])} "
            f"µs CPU per request, {fmt(p['server_kib_per_actor'], 1)} KiB per actor; refused "
            f"{p['refused']}, unanswered {p['unanswered']}, lost {p['lost']}", None, fi)
    if fi is not None and not _ok(fi):
        add("fan_in", "p99 latency (ms)", "—", _err(fi))
    da = rungs.get("device_actors")
    if da is not None and "skipped" in da:
        add("device_actors", "env steps/s of the compiled rollout", "—", da["skipped"])
    for p in da.get("points", ()) if da is not None and _ok(da) else ():
        add("device_actors", f"env steps/s of the compiled rollout, {da['env']}, "
                             f"{p['num_envs']} envs x {da['segment_length']} steps",
            fmt(p["env_steps_per_s"]), f"device {da['device']}; compile {p['compile_s']:.1f} s, "
            f"{p['calls']} calls in {p['seconds']:.1f} s", None, da)
    if da is not None and "skipped" not in da and not _ok(da):
        add("device_actors", "env steps/s of the compiled rollout", "—", _err(da))
    return rows


def finalize(result: dict) -> dict:
    """Add the derived parts (table, targets, bottleneck, memory, scaling, the
    compute-bound ceiling, rung 1 over physics) to ``result``."""
    result["table"] = table(result)
    result["compute_ceiling"] = ceiling_model.ceiling(result)
    result["raw_env_over_physics"] = ceiling_model.physics_fraction(result)
    result["bottleneck"] = bottleneck(result)
    result["targets"] = targets(result)
    result["memory"] = memory(result)
    result["scaling"] = scaling(result)
    ceil, e2e = result["bottleneck"].get("ceilings") or {}, result["rungs"].get("end_to_end")
    result["end_to_end_over_raw_env"] = (e2e["env_steps_per_s"] / ceil["raw_env"]
                                         if _ok(e2e) and ceil.get("raw_env") else None)
    return result


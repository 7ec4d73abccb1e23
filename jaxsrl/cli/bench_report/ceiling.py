"""The compute-bound ceiling of end-to-end training, and where rung 1 stands against
the env's physics. Plain data in, plain data out (no JAX, no processes).

A training env step costs the core time of its three parts, each measured alone by
the ladder: ``env`` (rung 1, CPU time of ``env.step`` per env step), ``act`` (rung 3
at the layout's actor count, CPU time of the policy worker's process per env step)
and ``learn`` (rung 4, CPU time of the learner per env step). ``cores`` cores doing
nothing else can at most train

    ceiling = cores / (env + act + learn)        env steps/s (times in core-seconds)

(issue 19's "compute-bound ceiling"; with the issue's hide-and-seek figures, 2 cores
and 0.81 + 0.57 + 0.65 ms give 985 env steps/s). End to end (rung 5) is then reported
as a fraction of it. What the three parts leave out (the actor's own bookkeeping and
encoding, the sample stream, the trainer's batching) is what that fraction misses.

The act part is rung 3's real policy; a server-only rung (the inference server with a
trivial policy, built separately) measures the server's overhead, not an input here.
"""

from __future__ import annotations


def compute_bound_ceiling(cores: float, env_ms: float, act_ms: float, learn_ms: float) -> float:
    """Env steps/s that ``cores`` cores allow when one env step costs ``env_ms + act_ms +
    learn_ms`` milliseconds of core time.

    Raises:
      ValueError: ``cores`` not positive, a part negative, or all parts zero.
    """
    parts = {"env_ms": env_ms, "act_ms": act_ms, "learn_ms": learn_ms}
    if not cores > 0:
        raise ValueError(f"cores={cores!r} must be positive")
    bad = {k: v for k, v in parts.items() if not v >= 0}
    if bad:
        raise ValueError(f"core times {bad} must be >= 0 ms")
    total = env_ms + act_ms + learn_ms
    if total <= 0:
        raise ValueError("the core times of env, act and learn sum to 0 ms")
    return cores * 1e3 / total


def _ok(rung) -> bool:
    return isinstance(rung, dict) and "error" not in rung and "not_applicable" not in rung


def _inference_at(rungs: dict, actors: int):
    for entry in rungs.get("inference") or []:
        if entry.get("actors") == actors:
            return entry
    return None


def ceiling(result: dict) -> dict:
    """The compute-bound ceiling of a ladder report (``result["rungs"]``, ``"layout"``,
    ``"machine"``): ``{"cores", "env_ms", "act_ms", "learn_ms", "total_ms",
    "env_steps_per_s", "end_to_end_fraction", "end_to_end_inference"}`` (the last: the
    end-to-end run's inference mode, ``"server"`` or ``"inline"``), or
    ``{"missing": [parts]}`` when a part was not measured (its rung not run or failed)."""
    rungs, cores = result["rungs"], result["machine"].get("cores")
    raw, learn = rungs.get("raw_env"), rungs.get("learner")
    inf = _inference_at(rungs, result["layout"]["num_actors"])
    parts = {"env_ms": raw.get("env_core_ms_per_step") if _ok(raw) else None,
             "act_ms": inf.get("server_core_ms_per_env_step") if _ok(inf) else None,
             "learn_ms": learn.get("core_ms_per_env_step") if _ok(learn) else None}
    missing = [k for k, v in parts.items() if v is None] + ([] if cores else ["cores"])
    if missing:
        return {"missing": missing}
    out = {"cores": cores, **parts, "total_ms": sum(parts.values()),
           "env_steps_per_s": compute_bound_ceiling(cores, **parts)}
    e2e = rungs.get("end_to_end")
    out["end_to_end_fraction"] = (e2e["env_steps_per_s"] / out["env_steps_per_s"]
                                  if _ok(e2e) else None)
    out["end_to_end_inference"] = e2e.get("inference") if _ok(e2e) else None
    return out


def physics_fraction(result: dict) -> float | None:
    """Rung 1's env steps per core-second over rung 1b's physics-only ones (``None``
    when either is missing or not applicable)."""
    raw, phys = result["rungs"].get("raw_env"), result["rungs"].get("physics")
    if not (_ok(raw) and _ok(phys) and raw.get("env_steps_per_core_s")):
        return None
    return raw["env_steps_per_core_s"] / phys["physics_steps_per_core_s"]

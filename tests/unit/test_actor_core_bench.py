"""Rung 12 (``jaxsrl.bench.actor_core``): its per-env-step arithmetic, and the ladder knows it."""

from jaxsrl.bench import actor_core
from jaxsrl.bench.rungs import OPT_IN_RUNGS, RUNGS


def test_summarize_per_env_step():
    c = dict.fromkeys(actor_core.COUNTERS, 0)
    c.update(env_cpu_s=1.0, env_steps=1000, request_cpu_s=0.05, receive_cpu_s=0.02,
             receive_wall_s=0.5, segment_cpu_s=0.01, request_bytes=4_000_000,
             segment_bytes=2_000_000, reply_bytes=1_000_000, requests=250, segments=10)
    out = actor_core.summarize({"counters": c, "wall_s": 2.0, "process_cpu_s": 1.1}, 4)
    assert out["env_ms"] == 1.0
    assert abs(out["overhead_ms"] - 0.1) < 1e-12 and abs(out["overhead_fraction"] - 0.1) < 1e-12
    assert abs(out["other_ms"] - 0.02) < 1e-12  # 0.1 - (0.05 + 0.02 + 0.01)
    assert abs(out["wait_ms"] - 0.48) < 1e-12
    assert out["request_bytes"] == 4000 and out["segment_bytes"] == 2000
    assert out["sent_bytes"] == 6000 and out["reply_bytes"] == 1000
    assert out["env_steps_per_s"] == 500


def test_actor_core_is_an_opt_in_rung():
    assert "actor_core" in OPT_IN_RUNGS and "actor_core" not in RUNGS


def test_the_rung_runs_a_real_actor_against_a_real_server(tmp_path):
    """A short rung on CartPole: the child's wrappers still fit the actor's loop (a
    changed ``request`` signature once broke every rung), and the counters add up."""
    import os  # noqa: PLC0415

    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    cfg = load_config(["--env=CartPole-v1", "--envs_per_actor=4", "--segment_length=8",
                       "--ppo.hidden_sizes", "8",
                       f"--compilation_cache_dir={tmp_path / 'xla'}"])
    cores = sorted(os.sched_getaffinity(0))
    out = actor_core.measure(cfg, duration_s=1.0, warmup_s=0.5, actor_core=cores[0],
                             server_core=cores[-1], start_timeout_s=600)
    assert out["env_steps"] > 0 and out["requests"] > 0 and out["segments"] > 0
    assert out["env_ms"] > 0 and out["request_bytes"] > 0 and out["segment_bytes"] > 0
    assert out["envs_per_request"] == 2

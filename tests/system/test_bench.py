"""The benchmark ladder runs in quick mode and writes a well-formed report (no timing checks)."""

import copy
import json
import os
import subprocess
import sys

import psutil
import pytest

from jaxsrl.cli.bench_report import report
from jaxsrl.cli.bench_report import render as report_render
from jaxsrl.cli import bench as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=4", "--segment_length=8",
        "--batch_segments=4", "--ppo.hidden_sizes", "16", "16"]
RUNG_KEYS = {
    "raw_env": {"env_steps_per_s", "env_steps_per_s_per_process", "peak_rss_mib",
                "env_steps_per_core_s", "env_core_ms_per_step"},
    "transport": {"round_trips_per_s", "mb_per_s", "request_bytes", "latency_us_p99"},
    "learner": {"samples_per_s", "samples_per_s_per_device", "update_ms_p50",
                "core_ms_per_env_step"},
    "end_to_end": {"env_steps_per_s", "updates_per_s", "memory"},
    "replay": {"uniform", "prioritised"},
}


@pytest.mark.slow  # every rung once (~40 s on 2 cores); the report's rendering is tested below
def test_quick_bench_writes_a_well_formed_report(tmp_path):
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "bench.py"), "--quick", *TINY,
         f"--out_json={out_json}", f"--out_md={out_md}", f"--workdir={tmp_path / 'runs'}"],
        cwd=REPO, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out_json.read_text())

    assert {"cores", "devices", "python", "jax", "date", "command", "load_average_start",
            "load_average_end"} <= set(result["machine"])
    assert "--quick" in result["machine"]["command"]
    assert result["layout"]["env"] == "CartPole-v1" and result["layout"]["num_actors"] == 1
    rungs = result["rungs"]
    for name, keys in RUNG_KEYS.items():
        assert "error" not in rungs[name], rungs[name]
        assert keys <= set(rungs[name]), (name, rungs[name])
    (inference,) = rungs["inference"]  # quick: the layout's actor count only
    assert "error" not in inference, inference
    assert {"env_steps_per_s", "batch_rows_mean", "latency_ms_p50", "latency_ms_p99",
            "server_core_ms_per_env_step"} <= set(inference)
    assert "not a MuJoCo env" in rungs["physics"]["not_applicable"]  # CartPole: rung 1b is n/a
    bound = result["compute_ceiling"]  # cores / (env + act + learn), end to end against it
    assert bound["cores"] == result["machine"]["cores"] and bound["env_steps_per_s"] > 0
    assert bound["env_ms"] == rungs["raw_env"]["env_core_ms_per_step"]
    assert bound["end_to_end_fraction"] == (rungs["end_to_end"]["env_steps_per_s"]
                                            / bound["env_steps_per_s"])
    assert result["raw_env_over_physics"] is None
    (point,) = rungs["scaling"]
    assert point["num_actors"] == 1 and point["env_steps_per_s"] > 0

    assert [r["rung"] for r in result["table"]] == [
        "1. raw environment", "1b. physics only", "2. transport", "3. inference", "4. learner only",
        "5. end to end", "6. scaling", "7. replay buffer", "7. replay buffer",
        *["9. inference server only"] * 3]
    server = rungs["server_only"]
    assert "error" not in server, server
    assert [p["rows_per_request"] for p in server["points"]] == [1, 16, 64]
    assert {"insert_items_per_s", "sample_items_per_s"} <= set(rungs["replay"]["uniform"])
    assert "learn_cycle_items_per_s" in rungs["replay"]["prioritised"]
    assert all({"rung", "what", "value", "ceiling_fps", "detail"} <= set(r) for r in result["table"])
    assert result["bottleneck"]["rung"] in {"raw_env", "transport", "inference", "learner"}
    assert [t["name"] for t in result["targets"]] == [
        "end-to-end env frames/s", "inference server p99 latency, 4 actors", "actor process peak RSS"]
    assert {"accelerator", "actor", "raw_env"} <= set(result["memory"])

    md = out_md.read_text()
    assert "rows/s per server core, 16 rows/request" in md
    for heading in ("# Benchmarks", "## Machine", "## Ladder", "## Bottleneck",
                    "## Compute-bound ceiling", "## Targets",
                    "## Scaling", "## Peak memory", "## How each rung is measured"):
        assert heading in md
    assert "| rung | what | measured |" in md and result["machine"]["command"] in md
    # The Markdown is a pure function of the JSON: re-rendering gives the same page.
    again = tmp_path / "again.md"
    assert cli.main(["--from_json", str(out_json), f"--out_md={again}"]) == 0
    assert again.read_text() == md
    assert psutil.Process().children(recursive=True) == []


def test_report_renders_failed_and_missing_rungs():
    result = {
        "quick": True, "wall_s": 1.0, "notes": [],
        "machine": {"cores": 2, "devices": ["cpu:0"], "command": "python scripts/bench.py",
                    "load_average_start": [0.1, 0.1, 0.1]},
        "layout": {"env": "CartPole-v1", "agent": "ppo", "num_actors": 2, "envs_per_actor": 32,
                   "ring_size": 2, "segment_length": 32, "batch_segments": 64},
        "rungs": {"raw_env": {"error": "ValueError: unknown environment"},
                  "inference": [{"actors": 2, "error": "RuntimeError: boom"}],
                  "scaling": [{"num_actors": 1, "error": "TimeoutError: slow"}]},
    }
    done = report.finalize(copy.deepcopy(result))
    md = report_render.render_markdown(done)
    assert "failed: ValueError: unknown environment" in md
    assert all(t["met"] is None for t in done["targets"])
    assert done["bottleneck"]["rung"] is None
    json.dumps(done)  # plain data
    other = copy.deepcopy(result)
    other["layout"]["env"] = "hide_and_seek"  # no targets for other environments (yet)
    assert report.finalize(other)["targets"] == []


def test_unknown_environment_is_a_clean_error(capsys):
    assert cli.main(["--env=NoSuchEnv-v0", "--out_json=", "--out_md="]) == 2
    assert "NoSuchEnv-v0" in capsys.readouterr().err


def test_quick_runs_write_into_docs_only_when_asked(tmp_path):
    docs = os.path.join(REPO, "docs")
    quick = cli.parser().parse_args(["--quick"])
    assert cli.report_paths(quick) == ("", "")  # the tracked report is left alone
    full = cli.parser().parse_args([])
    assert cli.report_paths(full) == (os.path.join(docs, "benchmarks.json"),
                                      os.path.join(docs, "benchmarks.md"))
    asked = cli.parser().parse_args(["--quick", f"--out_md={tmp_path / 'q.md'}"])
    assert cli.report_paths(asked) == ("", str(tmp_path / "q.md"))


def test_physics_rung_runs_quick_for_mujoco_envs():
    """Rung 1b steps the env's own MuJoCo model (hide-and-seek through its own bench,
    HalfCheetah through env.unwrapped); CartPole has none."""
    from jaxsrl.bench import physics

    for env in ("HalfCheetah-v5", "hide_and_seek"):
        out = physics.measure(env, {}, duration_s=0.05)
        assert out["physics_steps_per_core_s"] > 0 and out["substeps_per_env_step"] > 1, out
    assert "not_applicable" in physics.measure("CartPole-v1", {}, duration_s=0.05)


def test_server_only_rung_serves_fake_actors_and_accounts_its_cpu():
    """Rung 9 alone, in seconds: the real policy worker, a recurrent carry travelling
    through it, one fake-actor process (which checks each group's first reply)."""
    import gymnasium
    import jax.numpy as jnp
    import numpy as np

    from jaxsrl.bench import server_only

    out = server_only.measure(gymnasium.spaces.Box(-1, 1, (3,), np.float32),
                              gymnasium.spaces.MultiDiscrete([2, 3]),
                              lambda n: (jnp.zeros((n, 2), jnp.float32), jnp.zeros((n,), jnp.int8)),
                              rows=(1, 5), clients=3, in_flight=2, duration_s=0.5, warmup_s=0.1)
    assert out["clients"] == 3 and out["in_flight"] == 2 and out["buckets"][-1] >= 30
    assert [a[0] for a in out["request_arrays"]] == ["obs", "carry/0", "carry/1"]
    for rows, p in zip((1, 5), out["points"]):
        assert p["rows_per_request"] == rows and p["requests_per_s"] > 0
        requests = p["requests_per_s"] * p["seconds"]
        assert p["rows_per_s"] == pytest.approx(rows * p["requests_per_s"])
        assert p["rows_per_server_core_s"] == pytest.approx(rows * requests / p["server_cpu_s"])
        assert p["cpu_us_per_request"] == pytest.approx(1e6 * p["server_cpu_s"] / requests)
        assert p["server_cores"] == pytest.approx(p["server_cpu_s"] / p["seconds"])
        assert set(p["cpu_us_per_request_by_thread"]) == {"policy", "zmq", "xla", "other"}
        assert 1 <= p["requests_per_batch_mean"] <= 6  # at most clients x in_flight waiting
        assert p["batch_rows_mean"] == pytest.approx(rows * p["requests_per_batch_mean"])
    assert psutil.Process().children(recursive=True) == []


def test_server_only_rung_sums_several_client_processes():
    """Two fake-actor processes (actor ids 0-1 and 2-3) are both served and counted
    together: their replies add up to the point's requests, its rows to rows x requests."""
    import gymnasium
    import jax.numpy as jnp
    import numpy as np

    from jaxsrl.bench import server_only

    out = server_only.measure(gymnasium.spaces.Box(-1, 1, (3,), np.float32),
                              gymnasium.spaces.Discrete(2),
                              lambda n: jnp.zeros((n,), jnp.float32), rows=(4,), clients=2,
                              in_flight=2, duration_s=0.4, warmup_s=0.1, client_procs=2)
    assert out["client_procs"] == 2 and out["buckets"][-1] >= 2 * 2 * 2 * 4
    (p,) = out["points"]
    by_proc = p["requests_by_client_proc"]
    assert len(by_proc) == 2 and min(by_proc) > 0, by_proc
    requests = sum(by_proc)
    assert p["requests_per_s"] * p["seconds"] == pytest.approx(requests)
    assert p["rows_per_s"] * p["seconds"] == pytest.approx(4 * requests)
    assert p["rows_per_server_core_s"] == pytest.approx(4 * requests / p["server_cpu_s"])
    assert p["cpu_us_per_request"] == pytest.approx(1e6 * p["server_cpu_s"] / requests)
    assert 1 <= p["requests_per_batch_mean"] <= 8  # at most 2 x 2 x 2 waiting
    assert p["batch_rows_mean"] == pytest.approx(4 * p["requests_per_batch_mean"])
    assert psutil.Process().children(recursive=True) == []


def test_server_only_rung_refuses_empty_sizes():
    from jaxsrl.bench import server_only

    with pytest.raises(ValueError, match="rows \\(0,\\)"):
        server_only.measure(None, None, None, rows=(0,))
    with pytest.raises(ValueError, match="client_procs 0"):
        server_only.measure(None, None, None, client_procs=0)

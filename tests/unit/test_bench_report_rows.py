"""Rows of the bench report for the opt-in device-actor rung (rung 11):
``jaxsrl.cli.bench_report.report.table`` lists each measured batch, or the reason the rung
was skipped, from the shapes ``jaxsrl.bench.device_rollout.measure`` returns."""

from jaxsrl.cli.bench_report.report import table

LAYOUT = {"env": "CartPole-v1", "agent": "ppo", "num_actors": 2, "envs_per_actor": 32,
          "ring_size": 2, "segment_length": 32, "batch_segments": 64}


def _rows(rung: dict) -> list[dict]:
    return [r for r in table({"layout": LAYOUT, "machine": {"cores": 2},
                              "rungs": {"device_actors": rung}})
            if r["rung"] == "11. device actors"]


def test_each_measured_batch_is_a_row():
    rung = {"env": "gymnax:CartPole-v1", "segment_length": 32, "device": "cpu",
            "points": [{"num_envs": n, "compile_s": 1.5, "calls": 10, "seconds": 5.0,
                        "env_steps_per_s": 1000.0 * n} for n in (16, 64)]}
    rows = _rows(rung)
    assert [r["value"] for r in rows] == ["16,000", "64,000"]
    assert "64 envs x 32 steps" in rows[1]["what"]


def test_a_skipped_rung_says_why_in_one_row():
    rows = _rows({"skipped": "device actors rung skipped: needs gymnax"})
    assert len(rows) == 1 and rows[0]["detail"].endswith("needs gymnax")

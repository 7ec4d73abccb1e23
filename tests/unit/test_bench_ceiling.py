"""The compute-bound ceiling and rung 1 over physics, against hand computations."""

import pytest

from jaxsrl.cli.bench_report import ceiling, report


def _result(e2e=1500.0, **rungs):
    base = {
        "raw_env": {"env_steps_per_s": 3000.0, "env_core_ms_per_step": 0.5,
                    "env_steps_per_core_s": 2000.0},
        # the layout has 2 actors: the 4-actor entry must not be used
        "inference": [{"actors": 4, "server_core_ms_per_env_step": 9.0},
                      {"actors": 2, "server_core_ms_per_env_step": 0.3}],
        "learner": {"core_ms_per_env_step": 0.2},
        "end_to_end": {"env_steps_per_s": e2e},
        "physics": {"physics_steps_per_core_s": 8000.0, "substeps_per_env_step": 15},
    }
    base.update(rungs)
    return {"rungs": base, "layout": {"num_actors": 2}, "machine": {"cores": 2}}


def test_issue_figures_by_hand():
    # issue 19: 2 cores, env 0.81 + act 0.57 + learn 0.65 ms -> 2000 / 2.03 = 985.22 env steps/s
    assert ceiling.compute_bound_ceiling(2, 0.81, 0.57, 0.65) == pytest.approx(985.2216749, rel=1e-9)
    assert ceiling.compute_bound_ceiling(1, 1.0, 0.0, 0.0) == pytest.approx(1000.0)


def test_ceiling_of_a_report_by_hand():
    c = ceiling.ceiling(_result())
    # 2 cores / (0.5 + 0.3 + 0.2 ms) = 2 / 1e-3 s = 2000 env steps/s; 1500 / 2000 = 75%
    assert c["env_steps_per_s"] == pytest.approx(2000.0)
    assert c["total_ms"] == pytest.approx(1.0)
    assert c["end_to_end_fraction"] == pytest.approx(0.75)
    assert (c["env_ms"], c["act_ms"], c["learn_ms"]) == (0.5, 0.3, 0.2)


def test_missing_parts_are_named():
    c = ceiling.ceiling(_result(learner={"error": "RuntimeError: boom"}, inference=[]))
    assert c == {"missing": ["act_ms", "learn_ms"]}
    no_e2e = ceiling.ceiling(_result(end_to_end={"error": "TimeoutError"}))
    assert no_e2e["end_to_end_fraction"] is None and no_e2e["env_steps_per_s"] == pytest.approx(2000)


@pytest.mark.parametrize("args, word", [((0, 1, 1, 1), "cores=0"), ((2, -1, 1, 1), "env_ms"),
                                        ((2, 0, 0, 0), "sum to 0")])
def test_bad_inputs_raise(args, word):
    with pytest.raises(ValueError, match=word):
        ceiling.compute_bound_ceiling(*args)


def test_physics_fraction_by_hand():
    assert ceiling.physics_fraction(_result()) == pytest.approx(2000 / 8000)
    assert ceiling.physics_fraction(_result(physics={"not_applicable": "CartPole"})) is None


def test_report_carries_both():
    raw = {"env_steps_per_s": 3000.0, "env_steps_per_s_per_process": 1500.0, "processes": 2,
           "env_time_fraction": 0.9, "peak_rss_mib": 40.0, "env_core_ms_per_step": 0.5,
           "env_steps_per_core_s": 2000.0}
    result = _result(raw_env=raw, inference=[], learner={"error": "x"},
                     end_to_end={"error": "x"})
    result.update(quick=True, wall_s=1.0, notes=[],
                  layout={"env": "HalfCheetah-v5", "agent": "ppo", "num_actors": 2,
                          "envs_per_actor": 4, "ring_size": 2, "segment_length": 8,
                          "batch_segments": 4})
    done = report.finalize(result)
    assert done["compute_ceiling"] == {"missing": ["act_ms", "learn_ms"]}
    assert done["raw_env_over_physics"] == pytest.approx(0.25)
    (physics_row,) = [r for r in done["table"] if r["rung"] == "1b. physics only"]
    assert physics_row["value"] == "8,000" and "25% of it" in physics_row["detail"]

"""The scaling model's arithmetic: ceilings, bottleneck choice, GPUs to keep up."""

import pytest

from jaxsrl.bench.scaling_model import Costs, Hardware, ceilings, gpus_to_keep_up, project

COSTS = Costs(name="toy", env_steps_per_core=1_000.0, actor_overhead=0.5, agents=4,
              act_flops_per_row=1e6, epochs=2, bytes_per_env_step=10_000.0,
              requests_per_core_s=5_000.0, env_steps_per_request=4)
HW = Hardware(gpu_flops_learner=24e12, gpu_flops_inference=12e12, gpus_per_host=8,
              nic_bytes_per_s=1e9, server_cores_per_gpu=8)


def test_ceilings_follow_the_documented_formulas():
    c = ceilings(COSTS, HW, actor_cores=100, gpus=2)
    assert c["actors"] == pytest.approx(100 * 1_000 * 0.5)
    t_act = 4 * 1e6 / 12e12  # GPU-seconds per env step, inference
    t_learn = 3 * 2 * 4 * 1e6 / 24e12  # learning: 3 x epochs x act
    assert c["gpus"] == pytest.approx(2 / (t_act + t_learn))
    assert c["server CPU"] == pytest.approx(2 * t_act / (t_act + t_learn) * 8 * 5_000 * 4)
    assert c["network"] == pytest.approx(1e9 / 10_000)


def test_bottleneck_moves_from_actors_to_the_rest_as_cores_grow():
    assert project(COSTS, HW, 10, 32)[1] == "actors"
    rate, stage, ceil = project(COSTS, HW, 100_000, 1)
    assert stage != "actors" and rate == min(ceil.values())


def test_gpus_to_keep_up_is_the_first_gpu_count_where_the_actors_are_the_bottleneck():
    g = gpus_to_keep_up(COSTS, HW, 10_000)
    assert g is not None and g > 1
    assert project(COSTS, HW, 10_000, g)[1] == "actors"
    assert project(COSTS, HW, 10_000, g - 1)[1] != "actors"


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="0"):
        ceilings(COSTS, HW, 0, 1)


def _fan_in(points):
    return {"rungs": {"fan_in": {"points": points}}}


def test_server_cost_is_the_largest_fan_in_point_that_kept_up():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "scaling_model.py")
    spec = importlib.util.spec_from_file_location("scaling_model_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    ok = {"workload": "hide_and_seek", "lost": 0, "rate_per_actor": 1.0}
    points = [{**ok, "actors": 1000, "requests_per_s": 990.0, "server_cpu_us_per_request": 250.0},
              {**ok, "actors": 2000, "requests_per_s": 1900.0, "server_cpu_us_per_request": 200.0},
              {**ok, "actors": 4000, "requests_per_s": 1500.0, "server_cpu_us_per_request": 160.0},
              {**ok, "actors": 8000, "error": "RuntimeError: x"},
              {**ok, "workload": "CartPole-v1", "actors": 4000, "requests_per_s": 4000.0,
               "server_cpu_us_per_request": 50.0}]
    assert script.server_cost(_fan_in(points))["server_cpu_us_per_request"] == 200.0
    with pytest.raises(ValueError, match="kept up"):
        script.server_cost(_fan_in(points[2:]))

"""scripts/scaling_model.py takes the actor overhead and bytes per env step from rung 12."""

import importlib.util
import os

from jaxsrl.bench.scaling_model import Costs, Hardware


def _script():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "scaling_model.py")
    spec = importlib.util.spec_from_file_location("scaling_model_script_ac", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_actor_core_costs_and_the_openai_rate_row():
    script = _script()
    rung = {"env_ms": 0.6, "overhead_ms": 0.2, "request_bytes": 1000.0, "segment_bytes": 500.0,
            "reply_bytes": 2500.0}
    share, nbytes = script.actor_core_costs(rung)
    assert abs(share - 0.25) < 1e-12 and nbytes == 4000.0
    c = Costs("hide_and_seek (x)", env_steps_per_core=2000.0, actor_overhead=share, agents=4,
              act_flops_per_row=1e6, epochs=2, bytes_per_env_step=nbytes,
              requests_per_core_s=4000.0, env_steps_per_request=4)
    row = script.openai_rate("hide_and_seek, after", c, rung, Hardware()).split(" | ")
    rate = script.OPENAI_ENV_STEPS / (script.OPENAI_HOURS * 3600)
    assert row[1] == "25%" and row[2] == "1,500"  # 2,000 x (1 - 0.25)
    assert row[3] == f"{rate / 1500:,.0f}" and row[4] == "1.5"  # KB sent: requests + segments
    assert row[6] == f"{rate * 4000 / 1e9:.2f}"

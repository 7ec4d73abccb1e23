"""The prepared accelerator check runs on CPU in its quick mode and writes its report."""

import json

from jaxsrl.bench import device_check


def test_quick_mode_writes_the_report(tmp_path):
    out = tmp_path / "gpu.md"
    assert device_check.main(["--quick", f"--out={out}"]) == 0
    text = out.read_text()
    assert "| cartpole_mlp | 8 x 32 |" in text and "| cartpole_mlp | 16 |" in text
    result = json.loads((tmp_path / "gpu.json").read_text())
    (learn,) = result["learn"]
    assert learn["samples_per_s"] > 0 and learn["batch"] == [8, 32]
    (act,) = result["act"]
    assert act["rows"] == 16 and act["rows_per_s"] == act["calls_per_s"] * 16


def test_unknown_network_is_refused(capsys):
    assert device_check.main(["--networks=nope", "--out="]) == 2
    assert "unknown networks ['nope']" in capsys.readouterr().err


def test_quick_mode_measures_device_actors_or_says_why_not(tmp_path):
    """Rung 10: the compiled rollout of gymnax CartPole, or one line naming the extra."""
    out = tmp_path / "gpu.md"
    assert device_check.main(["--quick", f"--out={out}"]) == 0
    dev = json.loads((tmp_path / "gpu.json").read_text())["device_actors"]
    text = out.read_text()
    if "skipped" in dev:
        assert "jaxsrl[gymnax]" in dev["skipped"] and dev["skipped"] in text
    else:
        (point,) = dev["points"]
        assert point["num_envs"] == 8 and point["env_steps_per_s"] > 0
        assert "| 8 |" in text and "gymnax:CartPole-v1" in text

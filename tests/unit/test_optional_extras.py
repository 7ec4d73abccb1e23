"""Optional dependencies are imported on first use and, when missing, raise a one-line
error naming the extra that installs them (``pip install -e .`` has no Ray)."""

import sys

import pytest

from jaxsrl.tools import multiseed, sweep


@pytest.fixture
def no_ray(monkeypatch):
    """``import ray`` raises ImportError, as without the extra installed."""
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)


def test_seeds_on_ray_without_ray_name_the_extra(no_ray, tmp_path):
    with pytest.raises(ImportError, match=r"pip install -e '\.\[ray\]'") as info:
        multiseed.run_seeds(["--env=CartPole-v1"], [0], str(tmp_path / "seeds"), ray_cpus=1.0)
    assert "\n" not in str(info.value)


def test_sweep_without_ray_tune_names_the_extra(no_ray):
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tune\]'") as info:
        sweep.search_space([("seed", "grid", (0, 1))])
    assert "\n" not in str(info.value)

"""The memory-growth verdict (jaxsrl.bench.growth) on made-up RSS series."""

import random

import pytest

from jaxsrl.bench.growth import growth

MIB = 2**20


def _series(per_event: float, noise: float, n: int = 12, block: int = 1000, seed: int = 0):
    rng = random.Random(seed)
    events = [block * (i + 1) for i in range(n)]
    return events, [300 * MIB + per_event * e + rng.uniform(-noise, noise) for e in events]


def test_linear_growth_is_sustained_and_its_rate_recovered():
    events, rss = _series(per_event=500, noise=0.2 * MIB)
    v = growth(events, rss, MIB)
    assert v["sustained"] and v["bytes_per_event"] == pytest.approx(500, rel=0.1)


def test_noise_and_a_one_off_step_are_not_sustained():
    events, rss = _series(per_event=0, noise=0.5 * MIB)
    assert not growth(events, rss, MIB)["sustained"]
    step = [r + (4 * MIB if i == len(rss) - 1 else 0) for i, r in enumerate(rss)]  # last sample only
    assert not growth(events, step, MIB)["sustained"]


@pytest.mark.parametrize("events, rss", [([1, 2], [1, 2]), ([1, 2, 3], [1, 2]), ([1, 1, 2], [1, 2, 3])])
def test_bad_series_are_refused(events, rss):
    with pytest.raises(ValueError):
        growth(events, rss, MIB)

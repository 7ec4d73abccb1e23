"""SampleToInsertRatio (jaxsrl/workers/buffer/rate_limiter.py) against Reverb's semantics.

Hand-computed cases follow ``RateLimiter::CanSample`` / ``CanInsert`` of
``reverb/cc/rate_limiter.cc`` and the constructor of ``reverb/rate_limiters.py``; the
simulation interleaves actors inserting random amounts with a greedy learner.
"""

import numpy as np
import pytest

from jaxsrl.core.agent import ReplaySpec
from jaxsrl.workers.buffer.rate_limiter import SampleToInsertRatio


def test_blocks_learners_below_min_fill():
    lim = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=100, error_buffer=50.0)
    assert (lim.min_diff, lim.max_diff) == (350.0, 450.0)  # offset 4 * 100 -+ 50
    lim.inserted(99)  # diff 396 would allow 4 items, but the table is not filled
    assert lim.updates_allowed(1) == 0
    assert lim.insert_allowed()  # inserts are free until min_size_to_sample
    lim.inserted(1)
    assert lim.updates_allowed(1) == 50  # (400 - 350) / 1
    assert lim.updates_allowed(16) == 3  # floor(50 / 16)
    lim.sampled(48)
    assert lim.updates_allowed(1) == 2 and lim.updates_allowed(16) == 0
    lim.deleted(1)  # back below min size (Reverb's stage 1)
    assert lim.updates_allowed(1) == 0


def test_insert_allowed_turns_false_when_samples_lag_beyond_the_error_buffer():
    lim = SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=6.0)
    assert lim.max_diff == 26.0
    lim.inserted(10)  # diff 20
    assert lim.insert_allowed(3)  # 13 * 2 = 26 <= 26
    assert not lim.insert_allowed(4)  # 28 > 26
    lim.inserted(3)  # diff 26: samples lag by the error buffer
    assert not lim.insert_allowed()
    lim.sampled(1)  # 25 + 2 = 27 > 26 still
    assert not lim.insert_allowed()
    lim.sampled(1)
    assert lim.insert_allowed()


def test_a_tuple_error_buffer_is_the_range_itself():
    lim = SampleToInsertRatio(1.0, 5, (-3.0, 7.0))
    lim.inserted(5)
    assert lim.updates_allowed(2) == 4  # floor((5 - -3) / 2)
    assert lim.insert_allowed(2) and not lim.insert_allowed(3)


def test_keeps_the_ratio_with_random_inserts_and_greedy_learners():
    rng = np.random.default_rng(0)
    for spi, batch, min_size in ((32.0, 128, 500), (256.0, 256, 100), (0.5, 32, 200)):
        lim = SampleToInsertRatio.from_spec(ReplaySpec(
            batch_size=batch, replay_ratio=spi, min_fill=min_size))
        refused = 0
        for _ in range(20_000):
            if rng.random() < 0.5:  # an actor's segment arrives, if not held back
                if lim.insert_allowed():
                    lim.inserted(int(rng.integers(1, 17)))
                    assert lim.diff <= lim.max_diff + 16 * spi  # one segment's overshoot
                else:
                    refused += 1
            else:  # a greedy learner runs every update it is allowed
                for _ in range(lim.updates_allowed(batch)):
                    lim.sampled(batch)
                if lim.inserts >= min_size:
                    assert lim.diff >= lim.min_diff
        assert lim.inserts - min_size > 20 * batch / spi and refused > 0  # back-pressure ran
        # samples = (inserts - min_size) * spi -+ error buffer (+ one segment's overshoot)
        slack = (lim.max_diff - lim.min_diff) / 2 + 16 * spi
        assert abs(lim.samples - (lim.inserts - min_size) * spi) <= slack + 1e-9
        assert lim.achieved_ratio == pytest.approx(spi, rel=0.1)


def test_from_spec_widens_acmes_error_buffer_to_one_batch_plus_one_insert():
    lim = SampleToInsertRatio.from_spec(ReplaySpec(batch_size=256, replay_ratio=32.0,
                                                   min_fill=1000))
    assert lim.max_diff - lim.min_diff == 2 * 3200.0  # 1000 * 32 * 0.1
    lim = SampleToInsertRatio.from_spec(ReplaySpec(batch_size=256, replay_ratio=256.0,
                                                   min_fill=1))
    assert lim.max_diff - lim.min_diff == 2 * (256 + 256.0)


def test_achieved_ratio_and_state_dict():
    lim = SampleToInsertRatio(2.0, 10, 8.0)
    assert lim.achieved_ratio == 0.0
    lim.inserted(30)
    lim.sampled(44)
    assert lim.achieved_ratio == pytest.approx(44 / 20)
    other = SampleToInsertRatio(2.0, 10, 8.0)
    other.load_state_dict(lim.state_dict())
    assert other.state_dict() == {"inserts": 30, "samples": 44, "deletes": 0}
    assert other.updates_allowed(4) == lim.updates_allowed(4)


def test_bad_arguments_raise_like_reverb():
    with pytest.raises(ValueError, match="samples_per_insert"):
        SampleToInsertRatio(0.0, 10, 5.0)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        SampleToInsertRatio(1.0, 0, 5.0)
    with pytest.raises(ValueError, match="narrower"):
        SampleToInsertRatio(4.0, 10, 3.0)  # range 6 < 2 * 4
    with pytest.raises(ValueError, match="deadlock"):
        SampleToInsertRatio(1.0, 10, (11.0, 20.0))
    lim = SampleToInsertRatio(1.0, 10, 2.0)
    with pytest.raises(ValueError, match="deadlock"):
        lim.updates_allowed(8)  # range 4 < 8 + 1: neither side could move
    with pytest.raises(ValueError, match="non-negative"):
        lim.inserted(-1)

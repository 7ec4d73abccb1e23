"""Hide-and-seek behaviour pinned to a reference recorded before issue 19's speed work.

Seeded random episodes of the quadrant game, the full game and the full game with
``extra_obs`` (grabs, locks, lidar rays that hit nothing, resets, varying team sizes)
are traced through the public API (``tests/hide_and_seek_trace.py``) and compared with
``tests/data/hide_and_seek_reference.npz``, recorded from commit 9bf0c7a: observations
(random projections of every key, the masks and one agent's lidar), rewards,
truncations, infos, held objects, locks and every episode's ``episode_stats``.
Mutations it caught (each tried alone): the lidar's no-hit value 6.0 -> 6.01 in
vision.py (917 lidar values of the full game, rays into the open), the vision cone's
axis turned by 1 degree (48 mask entries), and every agent in reach counted as a lock
decider whatever its team (manipulation.py; one ``held`` entry of the full game).
"""

import os

import numpy as np
import pytest
from hide_and_seek_trace import RUNS, digest, trace

REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                         "hide_and_seek_reference.npz")
EXACT = ("n_agents", "reward", "trunc", "in_prep", "discard", "held", "lock_team", "masks", "stat_keys")


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_seeded_episode_matches_reference(run, reference):
    got = trace(run)
    ref = {k.split("/", 1)[1]: v for k, v in reference.items() if k.startswith(run + "/")}
    assert set(got) == set(ref) - {"sha256"}
    for k in EXACT:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{run}: {k}")
    for k in sorted(set(got) - set(EXACT)):  # floats: equal bits on the recording platform
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-5, err_msg=f"{run}: {k}")
    if digest(got) != str(ref["sha256"]):  # bit-exact is only expected on the same platform
        pytest.xfail(f"{run}: within tolerance but not bit-identical to the reference (another platform?)")

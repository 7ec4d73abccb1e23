"""Self-play runtime logic without sockets: the ``opponent`` array's resolution, the
actor's per-episode draws (statistics), the league's snapshots and ratings, its
checkpoint, and the ``[opponents]`` settings."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.population.opponents import OpponentPoolConfig
from jaxsrl.streams.opponents import LATEST, PoolView, draw_value, resolve
from jaxsrl.workers.actor.opponents import SelfPlayDraws
from jaxsrl.workers.population.league import League
from jaxsrl.workers.population.league_store import LeagueStore

TEAMS = "configs/hide_and_seek_teams.toml"


def _binomial_ok(k: int, n: int, p: float, z: float = 5.0) -> bool:
    """``k`` successes of ``n`` within ``z`` standard deviations of ``n p``."""
    return abs(k - n * p) <= z * np.sqrt(n * p * (1 - p)) + 1


# -- the opponent array ----------------------------------------------------------------

def test_draws_follow_the_pool_cdf_and_share_a_snapshot_per_uniform():
    view = PoolView((10, 20, 30), ("a", "b", "c"), np.array([0.5, 0.75, 1.0]))
    rng = np.random.default_rng(0)
    u = rng.random(20_000)
    served, reset = resolve(np.array([draw_value(x) for x in u], np.int32), view)
    assert not reset.any()
    for v, p in ((10, 0.5), (20, 0.25), (30, 0.25)):
        assert _binomial_ok(int((served == v).sum()), len(u), p)
    # Same uniform (one env's team) -> same snapshot; reference: a loop over the cdf.
    for x in (0.0, 0.4999, 0.5, 0.74, 0.75, 0.9999):
        expected = next(v for v, c in zip(view.versions, view.cdf) if x < c)
        assert resolve(np.array([draw_value(x)] * 2, np.int32), view)[0].tolist() == [expected] * 2


def test_evicted_snapshot_is_replaced_by_the_next_newer_and_its_carry_reset():
    view = PoolView((10, 30), ("a", "c"), np.array([0.5, 1.0]))
    served, reset = resolve(np.array([LATEST, 10, 20, 40, draw_value(0.7)], np.int32), view)
    assert served.tolist() == [LATEST, 10, 30, 30, 30]
    assert reset.tolist() == [False, False, True, True, False]
    served, reset = resolve(np.array([20, draw_value(0.1), LATEST], np.int32), PoolView())
    assert served.tolist() == [LATEST] * 3 and reset.tolist() == [True, False, False]


# -- the actor's draws -----------------------------------------------------------------

def _draws(p_latest, num_envs=400, seed=0):
    # 2 agents per env: agent 0 team A (stream 0), agent 1 team B (stream 1).
    rows = [np.arange(0, 2 * num_envs, 2), np.arange(1, 2 * num_envs, 2)]
    return SelfPlayDraws(p_latest, rows, ["a", "b"], num_envs, np.random.default_rng(seed))


@pytest.mark.parametrize("p_latest", [0.8, 0.3])
def test_episode_draws_follow_p_latest_and_pick_a_team_uniformly(p_latest):
    """Over many episode starts: every team latest with probability p_latest, else one
    team (each half the time) asks for a snapshot draw; the others ask for latest."""
    d = _draws(p_latest)
    n, counts = 0, np.zeros(3, int)
    for _ in range(25):  # 25 episodes of 400 envs
        ask = np.stack([d.request[0] <= -2, d.request[1] <= -2])  # [stream, env]
        assert not (ask[0] & ask[1]).any()  # at most one team plays a snapshot
        counts += [int((~ask.any(0)).sum()), int(ask[0].sum()), int(ask[1].sum())]
        n += ask.shape[1]
        for i in range(2):
            d.answered(i, np.where(d.request[i] <= -2, 7, LATEST).astype(np.int32))
        d.stepped(np.zeros(800), np.ones(800, bool), None)  # every episode ends
    q = (1 - p_latest) / 2
    assert _binomial_ok(counts[0], n, p_latest)
    assert _binomial_ok(counts[1], n, q) and _binomial_ok(counts[2], n, q)


def test_rows_played_by_a_snapshot_are_not_kept_and_games_are_recorded():
    d = _draws(0.0, num_envs=4, seed=1)
    team = d.snapshot_team.copy()  # p_latest 0: one team plays a snapshot in every env
    for i in range(2):
        d.answered(i, np.where(d.request[i] <= -2, 5, LATEST).astype(np.int32))
    reward = np.tile([1.0, -1.0], 4)
    d.stepped(reward, np.zeros(8, bool), None)
    for i in range(2):
        np.testing.assert_array_equal(d.keep(i), team != i)  # kept: rows latest played
        assert d.keep(i).all()  # marks start afresh
    d.stepped(reward, np.ones(8, bool), None)  # the episodes end: 4 games
    games = d.take_games()
    assert len(games) == 4 and d.take_games() == []
    for e, g in enumerate(games):
        assert g["a"] == [5 if team[e] == 0 else LATEST, 2.0]
        assert g["b"] == [5 if team[e] == 1 else LATEST, -2.0]


def test_segment_without_kept_rows_defers_its_env_steps_and_episodes():
    d = _draws(0.0, num_envs=2, seed=3)
    d.off[0][:] = True  # every row of stream 0 was played by a snapshot
    arrays = {"reward": np.zeros((2, 4))}
    assert d.segment(0, arrays, 8, [{"return": 1.0}], T=4) == (None, 0, [])
    out, steps, eps = d.segment(1, {"reward": np.arange(8.0).reshape(2, 4)}, 0, [], T=4)
    assert steps == 8 and eps == [{"return": 1.0}] and out["reward"].shape == (2, 4)
    d.off[1][:] = [True, False]  # one row kept: at most 1 x T frames go with it
    out, steps, _ = d.segment(1, {"reward": np.arange(8.0).reshape(2, 4)}, 12, [], T=4)
    assert steps == 4 and out["reward"].tolist() == [[4.0, 5.0, 6.0, 7.0]]
    assert d.pending_steps == 8


# -- the league ------------------------------------------------------------------------

def _league(sampling="uniform", **kw):
    cfg = OpponentPoolConfig(snapshot_every=2, max_size=2, p_latest=0.5, sampling=sampling, **kw)
    return League(["seeker", "hider"], cfg)


def test_snapshots_every_k_versions_with_copied_parameters_and_eviction():
    league = _league()
    params = {"w": jnp.arange(3.0)}
    for v in range(7):
        league.observe("hider", v, jax.tree.map(lambda x: x + v, params))
    view = league.view("hider")
    assert view.versions == (4, 6) and league.view("seeker").versions == ()
    np.testing.assert_array_equal(view.params[0]["w"], np.arange(3.0) + 4)
    assert view.cdf.tolist() == [0.5, 1.0]
    assert league.gauges()["selfplay/pool_size/hider"] == 2
    assert {r["id"] for r in league.table()} == {"hider:4", "hider:6"}  # forked, evicted forgotten


def test_ratings_move_towards_the_winner_of_a_rigged_game():
    """A hider snapshot that always beats the latest seeker climbs, the seeker falls;
    mirrored scores make draws; malformed and evicted-snapshot games are not rated."""
    league = _league(sampling="rating", temperature=1.0)
    league.observe("hider", 0, {"w": jnp.zeros(2)})
    league.observe("hider", 2, {"w": jnp.zeros(2)})
    games = [{"hider": [0, 1.0], "seeker": [LATEST, -1.0]}] * 20
    before = league.ratings.ordinal("hider:0"), league.ratings.ordinal("seeker:latest")
    assert league.record_games(games) == 20
    after = league.ratings.ordinal("hider:0"), league.ratings.ordinal("seeker:latest")
    assert after[0] > before[0] + 1 and after[1] < before[1] - 1
    assert league.ratings.ordinal("hider:2") == pytest.approx(before[0])  # did not play
    # Rating-weighted sampling now favours the winning snapshot (softmax of ordinals).
    view = league.view("hider")
    assert view.versions == (0, 2) and view.cdf[0] > 0.5
    row = next(r for r in league.table() if r["id"] == "hider:0")
    assert (row["games"], row["wins"]) == (20, 20)
    assert league.record_games([{"hider": [LATEST, 0.5], "seeker": [LATEST, 0.5]}]) == 1
    assert next(r for r in league.table() if r["id"] == "hider:latest")["draws"] == 1
    bad = [{"hider": [0, 1.0]}, {"hider": ["x", 1.0], "seeker": [LATEST, 0.0]},
           {"hider": [0, float("nan")], "seeker": [LATEST, 0.0]}, "junk"]
    assert league.record_games(bad) == 0 and league.record_games("junk") == 0
    assert league.record_games([{"hider": [99, 1.0], "seeker": [LATEST, 0.0]}]) == 0
    g = league.gauges()
    assert g["selfplay/malformed_games"] == 5 and g["selfplay/unrated_games"] == 1
    assert g["selfplay/games"] == 22 and g["selfplay/games_vs_snapshot/hider"] == 21


def test_league_store_round_trip_restores_pools_snapshots_and_ratings(tmp_path):
    league = _league()
    for v in (0, 2, 4):
        league.observe("hider", v, {"w": jnp.full(3, float(v))})
        league.observe("seeker", v + 1, {"w": jnp.full(3, -float(v))})
    league.record_games([{"hider": [2, 1.0], "seeker": [LATEST, 0.0]}] * 3)
    store = LeagueStore(str(tmp_path))
    store.save(league)
    store.close()
    assert [r["id"] for r in store.read_table()][0] == "hider:2"
    assert (tmp_path / "selfplay" / "league.md").read_text().startswith("| rank |")

    other = _league()
    store = LeagueStore(str(tmp_path))
    state, snaps = store.load(lambda p: {"w": jnp.zeros(3)})
    # The seeker's learner checkpoint is older than its last snapshot: that one goes.
    other.load(state, snaps, {"hider": 4, "seeker": 3})
    store.close()
    assert league.view("seeker").versions == (3, 5)
    assert other.view("hider").versions == (2, 4) and other.view("seeker").versions == (3,)
    np.testing.assert_array_equal(other.view("hider").params[0]["w"], np.full(3, 2.0))
    rows = [r for r in league.ratings.state_dict()["rows"] if r["id"] != "seeker:5"]
    assert other.ratings.state_dict()["rows"] == rows  # the dropped snapshot's rating too
    assert other.gauges()["selfplay/games"] == 3
    other.observe("seeker", 4, {"w": jnp.zeros(3)})  # versions continue from 3
    other.observe("seeker", 5, {"w": jnp.zeros(3)})
    assert other.view("seeker").versions == (3, 5)


# -- settings --------------------------------------------------------------------------

def test_opponent_settings_load_and_bad_values_name_themselves(tmp_path):
    good = tmp_path / "sp.toml"
    good.write_text("[opponents]\nsnapshot_every = 3\np_latest = 0.7\n")
    cfg = load_config(["--env=hide_and_seek", f"--config={TEAMS}", f"--config={good}"])
    assert cfg.opponents.enabled and cfg.opponents.pool_config().p_latest == 0.7
    assert not load_config(["--env=hide_and_seek"]).opponents.enabled
    cases = [(["--opponents.p_latest=1.5"], "opponents.p_latest=1.5"),
             (["--opponents.sampling=best"], "opponents.sampling='best'"),
             (["--opponents.snapshot_every=-1"], "opponents.snapshot_every=-1"),
             (["--opponents.rating_model=elo"], "opponents.rating_model='elo'"),
             (["--remote_inference"], "--opponents.snapshot_every=3 does not work with "
                                      "--inference=process")]
    for flags, match in cases:
        with pytest.raises(ValueError, match=match.replace(".", r"\.").replace("(", r"\(")):
            load_config(["--env=hide_and_seek", f"--config={TEAMS}", f"--config={good}", *flags])
    with pytest.raises(ValueError, match="needs a teams table of two teams"):
        load_config(["--env=hide_and_seek", f"--config={good}"])
    assert dataclasses.asdict(cfg)["opponents"]["snapshot_every"] == 3


def test_league_tool_reads_the_saved_table_and_names_a_missing_one(tmp_path, capsys):
    from jaxsrl.tools import league as tool
    assert tool.main([str(tmp_path)]) == 2 and "no league table" in capsys.readouterr().err
    league = _league()
    league.observe("hider", 0, {"w": jnp.zeros(1)})
    league.record_games([{"hider": [0, 2.0], "seeker": [LATEST, -2.0]}])
    store = LeagueStore(str(tmp_path))
    store.save(league)
    store.close()
    assert tool.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| 1 | hider | 0 |") and lines[-1].startswith("| 2 | seeker | latest |")

"""Ratings from two-team episodes (openskill Plackett-Luce), the league table and state
round trips. One game is checked against the Plackett-Luce update of Weng & Lin (2011),
written out by hand for two one-player teams."""

import json
import math

import pytest

from jaxsrl.population.ratings import Ratings

BETA, TAU, KAPPA = 25 / 6, 25 / 300, 1e-4  # openskill's defaults (beta = sigma0 / 2)


def weng_lin_pl_two_players(mu_w, sigma_w, mu_l, sigma_l):
    """Plackett-Luce update of a winner and a loser (Weng & Lin 2011, with
    gamma_q = sigma_i / c, as openskill; openskill first adds tau^2 to sigma^2)."""
    s2w, s2l = sigma_w**2 + TAU**2, sigma_l**2 + TAU**2
    c = math.sqrt(s2w + s2l + 2 * BETA**2)
    ew, el = math.exp(mu_w / c), math.exp(mu_l / c)
    p_w = ew / (ew + el)  # P(winner ranked first)
    p_l = el / (ew + el)
    # Winner: only its own rank set {w, l} counts. Loser: both the {w, l} set and {l}.
    omega_w, delta_w = s2w / c * (1 - p_w), math.sqrt(s2w) / c * s2w / c**2 * p_w * (1 - p_w)
    omega_l, delta_l = -s2l / c * p_l, math.sqrt(s2l) / c * s2l / c**2 * p_l * (1 - p_l)
    return ((mu_w + omega_w, math.sqrt(s2w) * math.sqrt(max(1 - delta_w, KAPPA))),
            (mu_l + omega_l, math.sqrt(s2l) * math.sqrt(max(1 - delta_l, KAPPA))))


@pytest.mark.parametrize("start", [None, ((30.0, 5.0), (20.0, 7.0))])
def test_one_game_matches_weng_lin_algorithm_4(start):
    r = Ratings()
    if start:  # non-prior ratings, set through the saved-state format
        r.load({"format": 1, "model": "plackett_luce", "rows": [
            {"id": pid, "mu": mu, "sigma": sigma, "ordinal": mu - 3 * sigma}
            for pid, (mu, sigma) in zip("ab", start)]})
    (mu_a, s_a), (mu_b, s_b) = r.rating("a"), r.rating("b")
    r.record("b", "a", 0)  # A wins, with A as team B
    (ew_mu, ew_s), (el_mu, el_s) = weng_lin_pl_two_players(mu_a, s_a, mu_b, s_b)
    assert r.rating("a") == pytest.approx((ew_mu, ew_s), rel=1e-12)
    assert r.rating("b") == pytest.approx((el_mu, el_s), rel=1e-12)


def test_a_rigged_game_moves_the_winner_up_and_the_loser_down():
    r = Ratings()
    history = [(r.rating("A"), r.rating("B"))]
    for _ in range(30):
        assert r.record("A", "B", 1)
        history.append((r.rating("A"), r.rating("B")))
    mus_a = [a[0] for a, _ in history]
    mus_b = [b[0] for _, b in history]
    assert all(x < y for x, y in zip(mus_a, mus_a[1:]))  # strictly up after every game
    assert all(x > y for x, y in zip(mus_b, mus_b[1:]))  # strictly down
    assert r.ordinal("A") > 0 > r.ordinal("B")
    table = r.table()
    assert [row.id for row in table] == ["A", "B"]
    assert (table[0].games, table[0].wins, table[0].losses) == (30, 30, 0)
    assert (table[1].games, table[1].wins, table[1].losses) == (30, 0, 30)


def test_draws_mirror_games_and_bad_outcomes():
    r = Ratings()
    assert r.record("a", "b", 0.5)
    (mu_a, s_a), (mu_b, s_b) = r.rating("a"), r.rating("b")
    assert mu_a == pytest.approx(25.0) and mu_b == pytest.approx(25.0)  # equal players
    assert s_a < 25 / 3 and r.table()[0].draws == 1
    assert r.record("latest", "latest", 1) is False  # no information
    assert r.rating("latest") == (25.0, 25 / 3)
    for bad in (2, -1, 0.7, True, "win"):
        with pytest.raises(ValueError, match=r"outcome=.* must be 1 \(A won\), 0 \(B won\)"):
            r.record("a", "b", bad)
    with pytest.raises(ValueError, match="ids must be strings"):
        r.record(1, "b", 1)
    with pytest.raises(ValueError, match="ratings.model='elo'; valid"):
        Ratings("elo")


def test_fork_and_forget():
    r = Ratings()
    for _ in range(3):
        r.record("latest", "old", 1)
    r.fork("latest", "snap:3")
    assert r.rating("snap:3") == r.rating("latest")
    assert [row.games for row in r.table() if row.id == "snap:3"] == [0]
    with pytest.raises(ValueError, match="'snap:3' already has a rating"):
        r.fork("latest", "snap:3")
    r.forget("old")
    r.forget("never-seen")
    assert {row.id for row in r.table()} == {"latest", "snap:3"}
    assert r.ordinal("unseen") == pytest.approx(0.0)  # the prior's mu - 3 sigma


def test_league_table_sorts_by_ordinal_not_by_mean():
    """A lucky newcomer (mu 30, sigma 8: ordinal 6) ranks below a proven player (mu 28,
    sigma 2: ordinal 22)."""
    r = Ratings()
    r.load({"format": 1, "model": "plackett_luce", "rows": [
        {"id": "new", "mu": 30.0, "sigma": 8.0, "ordinal": 6.0, "games": 1, "wins": 1},
        {"id": "proven", "mu": 28.0, "sigma": 2.0, "ordinal": 22.0, "games": 90, "wins": 60,
         "losses": 30}]})
    assert [(row.id, row.ordinal) for row in r.table()] == [("proven", 22.0), ("new", 6.0)]


def test_state_dict_round_trip_through_json():
    r = Ratings()
    for outcome in (1, 0, 0.5, 1):
        r.record("latest", "snap:0", outcome)
    r.record("snap:1", "snap:0", 1)
    restored = Ratings()
    restored.load(json.loads(json.dumps(r.state_dict())))
    assert restored.table() == r.table()
    r.record("latest", "snap:1", 1)
    restored.record("latest", "snap:1", 1)
    assert restored.table() == r.table()  # identical after further games
    with pytest.raises(ValueError, match="saved with model 'plackett_luce'"):
        Ratings("bradley_terry_full").load(r.state_dict())
    with pytest.raises(ValueError, match="format=None"):
        Ratings().load({})

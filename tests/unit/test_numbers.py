"""The numbers people look at: per-team and last known returns in the progress bar,
per-team return panels in the default plot, learner metrics per policy."""

import io
import json

import pytest

from jaxsrl.experiment import metrics
from jaxsrl.tools import plotting


def _bar_writer(logdir, console):
    logdir.mkdir()
    (logdir / "config.json").write_text(json.dumps({"agent": "ppo", "env": "hide_and_seek",
                                                    "total_env_steps": 1000}))
    return metrics.MetricsWriter(str(logdir), console=console, tensorboard=False)


def _last_bar_line(buf: io.StringIO) -> str:
    """The bar as last drawn (rich draws it on refresh and once more when stopped)."""
    lines = buf.getvalue().replace("\r", "\n").splitlines()
    return [line for line in lines if " steps" in line][-1]


def test_progress_bar_shows_team_returns_and_keeps_the_last_known_one(tmp_path):
    pytest.importorskip("rich")
    from rich.console import Console  # noqa: PLC0415
    buf = io.StringIO()
    writer = _bar_writer(tmp_path / "run", Console(file=buf, force_terminal=True, width=200))
    writer.write({"env_steps": 100, "fps": 50.0, "policy_version": 1, "episode_return_mean": 0.0,
                  "episode_return_mean/hider": 0.75, "episode_return_mean/seeker": -0.75})
    writer.write({"env_steps": 200, "fps": 50.0, "policy_version": 2})  # no episode ended
    assert writer.last_returns["episode_return_mean/hider"] == 0.75
    writer.write({"env_steps": 250, "policy_version": 3, "final": True})  # the closing record
    writer.close()
    last = _last_bar_line(buf)
    assert "250/1,000 steps" in last  # the closing record's steps...
    assert "hider 0.75" in last and "seeker -0.75" in last  # ...with the last known returns
    assert "return" not in last


def test_single_team_bar_keeps_the_last_return_at_the_end(tmp_path):
    pytest.importorskip("rich")
    from rich.console import Console  # noqa: PLC0415
    buf = io.StringIO()
    writer = _bar_writer(tmp_path / "run", Console(file=buf, force_terminal=True, width=200))
    writer.write({"env_steps": 100, "fps": 50.0, "policy_version": 1, "episode_return_mean": 21.5})
    writer.write({"env_steps": 120, "policy_version": 2, "final": True})
    writer.close()
    assert "return 21.50" in _last_bar_line(buf)


def test_return_text():
    assert metrics.return_text({}) == "return -"
    assert metrics.return_text({"episode_return_mean": 3.0}) == "return 3.00"
    assert metrics.return_text({"episode_return_mean": 0.0, "episode_return_mean/b": -1.0,
                                "episode_return_mean/a": 1.0}) == "a 1.00  b -1.00"


def _run(records):
    return plotting.Run("x", "ppo", records)


def test_default_plot_shows_team_returns_not_their_zero_sum_mean():
    teams = _run([{"env_steps": 1, "wall_time_s": 1.0, "episode_return_mean": 0.0,
                   "episode_return_mean/hider": 1.0, "episode_return_mean/seeker": -1.0}])
    panels = plotting.return_panels([teams])
    assert ("episode_return_mean", "env_steps") not in panels
    assert ("episode_return_mean/hider", "env_steps") in panels
    assert ("episode_return_mean/seeker", "wall_time_s") in panels
    single = _run([{"env_steps": 1, "wall_time_s": 1.0, "episode_return_mean": 9.0}])
    assert plotting.return_panels([single])[0] == ("episode_return_mean", "env_steps")


def test_learner_metrics_are_reported_per_policy_and_as_their_mean():
    acc = metrics.MetricsAccumulator()
    hider, seeker = metrics.PolicyMetrics(acc, "hider"), metrics.PolicyMetrics(acc, "seeker")
    hider.add_means({"loss/total": 1.0, "entropy": 0.5})
    seeker.add_means({"loss/total": 3.0, "entropy": 1.5})
    seeker.add_means({"env_s": 0.1}, prefix="actor/")  # actor timings stay shared
    seeker.add_env_steps(10)
    record = acc.snapshot(1.0)
    assert record["loss/total/hider"] == 1.0 and record["loss/total/seeker"] == 3.0
    assert record["entropy/seeker"] == 1.5 and record["loss/total"] == 2.0
    assert "actor/env_s/seeker" not in record and record["env_steps"] == 10


def test_drops_after_an_actor_restart_are_not_called_malformed(caplog):
    import logging  # noqa: PLC0415

    from jaxsrl.streams.admission import DropLog, StaleRunError  # noqa: PLC0415
    logger = logging.getLogger("jaxsrl.test_droplog")
    with caplog.at_level(logging.INFO, logger="jaxsrl.test_droplog"):
        DropLog(logger, "segment")("learner", StaleRunError("run id 3 of actor 0 is not its current run 4"))
        DropLog(logger, "segment")("learner", ValueError("7 frames"))
    stale, bad = [r for r in caplog.records if r.name == "jaxsrl.test_droplog"]
    assert "malformed" not in stale.getMessage() and "previous run" in stale.getMessage()
    assert stale.levelno == logging.INFO
    assert "malformed" in bad.getMessage() and bad.levelno == logging.WARNING

"""Learning-curve plots (jaxsrl/tools/plotting.py, scripts/plot.py) and the log sinks of
``jaxsrl.experiment.metrics.MetricsWriter`` (TensorBoard events, W&B, progress bar)."""

import glob
import importlib.util
import io
import json
import os
import struct
import sys
import types

import numpy as np
import pytest

from jaxsrl.experiment import metrics
from jaxsrl.tools import plotting

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.3", "--ppo.hidden_sizes", "16", "16"]


def _plot_main(argv):
    spec = importlib.util.spec_from_file_location("plot", os.path.join(ROOT, "scripts", "plot.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def _tb_scalars(logdir):
    """tag -> [(step, value)] from the TensorBoard event files of ``logdir``."""
    from tensorboardX.proto import event_pb2  # noqa: PLC0415
    out = {}
    for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                if v.HasField("simple_value"):
                    out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def _write_run(path, records, agent="ppo"):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"agent": agent, "env": "hide_and_seek", "total_env_steps": 1000}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.write('{"env_steps": 99')  # a line still being written
    return str(path)


def _hs_records(seed, n=8, resume_at=None):
    rng = np.random.default_rng(seed)
    out, wall = [], 0.0
    for i in range(n):
        wall = 0.5 if i == resume_at else wall + 1.0  # a resumed process restarts its clock
        out.append({"env_steps": 100 * (i + 1), "fps": 50.0, "policy_version": i,
                    "wall_time_s": wall, "episode_return_mean": float(rng.normal()),
                    "episode_return_mean/hider": float(i), "episode_return_mean/seeker": float(-i),
                    "episode/hider_seen_fraction": 0.5, "episode/hider_seen_fraction/hider": 0.5,
                    "episode/boxes_locked_hiders_prep": 0.1 * i, "loss/total": None})
    return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path_factory.mktemp("plot") / "run")
    train(load_config(SMALL + ["--total_env_steps=2500", f"--logdir={logdir}"]))
    return logdir


def test_plot_tiny_run_and_tensorboard_events_beside_metrics(tiny_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboardX")
    out = str(tmp_path / "curves.png")
    assert _plot_main([tiny_run, "--out", out, "--keys", "loss/total", "fps"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    w, h = _png_size(out)
    assert w > 400 and h > 300
    assert not os.path.exists(str(tmp_path / "curves_episode.png"))  # CartPole: no phase stats
    # TensorBoard events were written by the launcher's MetricsWriter, against env_steps.
    with open(os.path.join(tiny_run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    scalars = _tb_scalars(tiny_run)
    assert {"fps", "policy_version", "loss/total"} <= set(scalars)
    assert [s for s, _ in scalars["fps"]] == [r["env_steps"] for r in records if "fps" in r]


def test_several_runs_hide_and_seek_teams_and_phase_stats(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [_write_run(tmp_path / f"r{i}", _hs_records(i, resume_at=5 if i == 0 else None))
            for i in range(3)]
    runs.append(_write_run(tmp_path / "other", _hs_records(9), agent="impala"))
    out = str(tmp_path / "hs.png")
    paths = plotting.plot_runs(runs, out, smoothing=0.5)
    assert paths == [out, str(tmp_path / "hs_episode.png")]
    for p in paths:
        _png_size(p)
    loaded = plotting.load_runs(runs, average=True)
    assert [r.label for r in loaded] == ["ppo", "ppo", "ppo", "impala"]
    assert len(loaded[0].records) == 8  # the partial last line is skipped
    assert plotting.episode_stat_keys(loaded) == ["episode/boxes_locked_hiders_prep",
                                                  "episode/hider_seen_fraction"]
    assert plotting.episode_stat_keys(loaded, ["*locked*"]) == ["episode/boxes_locked_hiders_prep"]
    x, _ = loaded[0].series("episode_return_mean", "wall_time_s")
    assert np.all(np.diff(x) > 0)  # resumed clock made monotonic
    x, y = loaded[0].series("loss/total")
    assert len(x) == 0  # nulls are skipped
    assert _plot_main(runs[:2] + ["--out", str(tmp_path / "x.png"), "--labels", "a", "b",
                                  "--no_stats"]) == 0
    assert not os.path.exists(tmp_path / "x_episode.png")


def _legends(monkeypatch, fn):
    """The legend entries of the first panel of each figure ``fn()`` saves."""
    from matplotlib.figure import Figure  # noqa: PLC0415
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kw: saved.append((path, fig)))
    fn()
    return {os.path.basename(path): fig.axes[0].get_legend_handles_labels()[1]
            for path, fig in saved}


def test_two_runs_are_two_curves_unless_averaging_is_asked(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    runs = [_write_run(tmp_path / "runs" / f"seed{i}", _hs_records(i)) for i in range(2)]
    both = _legends(monkeypatch, lambda: plotting.plot_runs(runs, str(tmp_path / "c.png")))
    assert both["c.png"] == ["seed0", "seed1"]  # one curve each, not their mean
    mean = _legends(monkeypatch, lambda: plotting.plot_runs(runs, str(tmp_path / "c.png"),
                                                            band="mean"))
    assert mean["c.png"] == ["ppo (mean of 2)"]
    median = _legends(monkeypatch, lambda: plotting.plot_runs(runs, str(tmp_path / "c.png"),
                                                              band="median"))
    assert median["c.png"] == ["ppo (median of 2, min-max shaded)"]
    same = _legends(monkeypatch, lambda: plotting.plot_runs(runs, str(tmp_path / "c.png"),
                                                            labels=["x", "x"]))
    assert same["c.png"] == ["x (mean of 2)"]  # repeated labels: asked for
    assert plotting.run_labels(["a/s0", "b/s0"]) == ["a/s0", "b/s0"]
    assert plotting.run_labels(["a/s0", "a/s0/"]) == ["a/s0 #0", "a/s0 #1"]


def test_plot_writes_into_the_first_run_folder_by_default(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    runs = [_write_run(tmp_path / "runs" / f"r{i}", _hs_records(i)) for i in range(2)]
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert _plot_main(runs + ["--no_stats"]) == 0
    out = os.path.join(runs[0], "curves.png")
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    _png_size(out)
    assert os.listdir(cwd) == []


def _eval_records(n=8, every=3, teams=()):
    """Training records with, every ``every``-th one, the ``eval/*`` means that periodic
    evaluation adds (jaxsrl/launch/periodic_eval.py, eval_metrics)."""
    out = []
    for i in range(n):
        r = {"env_steps": 100 * (i + 1), "wall_time_s": float(i + 1),
             "episode_return_mean": float(i)}
        if i % every == every - 1:
            r.update({"eval/return_mean": 10.0 + i, "eval/return_std": 1.0,
                      "eval/episodes": 4.0, "eval/policy_version": float(i)})
            r.update({f"eval/return_mean/{t}": (1.0 if t == "hider" else -1.0) * i
                      for t in teams})
        out.append(r)
    return out


def _panels(monkeypatch, fn):
    """``{(figure, panel title): [(x, y) of each line drawn]}`` of the figures ``fn()`` saves."""
    from matplotlib.figure import Figure  # noqa: PLC0415
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kw: saved.append((path, fig)))
    fn()
    return {(os.path.basename(path), ax.get_title()):
            [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()]
            for path, fig in saved for ax in fig.axes if ax.get_visible()}


def test_evaluation_return_is_plotted_against_steps_and_eval_keys_by_pattern(
        tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    records = _eval_records()
    run = _write_run(tmp_path / "r", records)
    out = str(tmp_path / "c.png")
    drawn = _panels(monkeypatch, lambda: _plot_main([run, "--out", out, "--no_stats"]))
    evaluated = [r for r in records if "eval/return_mean" in r]
    assert drawn[("c.png", "eval/return_mean")] == [
        ([r["env_steps"] for r in evaluated], [r["eval/return_mean"] for r in evaluated])]
    assert ("c.png", "eval/return_std") not in drawn  # the return only, unless asked for
    drawn = _panels(monkeypatch, lambda: _plot_main([run, "--out", out, "--keys", "eval/*"]))
    assert sorted(t for f, t in drawn if t.startswith("eval/")) == [
        "eval/episodes", "eval/policy_version", "eval/return_mean", "eval/return_std"]
    assert drawn[("c.png", "eval/policy_version")][0][1] == [
        r["eval/policy_version"] for r in evaluated]
    team_run = _write_run(tmp_path / "t", _eval_records(teams=("hider", "seeker")))
    loaded = plotting.load_runs([team_run])
    assert plotting.return_panels(loaded)[-2:] == [("eval/return_mean/hider", "env_steps"),
                                                   ("eval/return_mean/seeker", "env_steps")]
    assert plotting.return_panels(plotting.load_runs([_write_run(tmp_path / "n", _hs_records(0))])) \
        == [(k, x) for x in ("env_steps", "wall_time_s")
            for k in ("episode_return_mean/hider", "episode_return_mean/seeker")]
    capsys.readouterr()
    assert _plot_main([run, "--out", out, "--keys", "evl/*"]) == 2
    assert "'evl/*'" in capsys.readouterr().err


def test_published_reference_markers(tmp_path):
    pytest.importorskip("matplotlib")
    run = _write_run(tmp_path / "r", _hs_records(0))
    out = str(tmp_path / "ref.png")
    assert _plot_main([run, "--out", out, "--no_stats",
                       "--reference", "1e6:1867:CleanRL PPO", "--reference", "5e5:900:x"]) == 0
    _png_size(out)
    assert plotting.parse_reference("1e6:1867.5:A: b") == (1e6, 1867.5, "A: b")
    for bad in ["1e6:1867", "steps:1:x", "1:2:"]:
        with pytest.raises(ValueError, match="STEPS:RETURN:LABEL"):
            plotting.parse_reference(bad)
    assert _plot_main([run, "--out", out, "--reference", "oops"]) == 2


def test_aggregate_and_smooth():
    x1, x2 = np.array([0.0, 10.0]), np.array([5.0, 20.0])
    grid, mean, std = plotting.aggregate([(x1, 2 * x1), (x2, 2 * x2 + 2)], points=3)
    np.testing.assert_allclose(grid, [5.0, 7.5, 10.0])  # the range both runs cover
    np.testing.assert_allclose(mean, 2 * grid + 1)
    np.testing.assert_allclose(std, 1.0)
    assert plotting.aggregate([(x1, x1)]) is None
    np.testing.assert_allclose(plotting.smooth(np.array([1.0, 1.0, 1.0]), 0.9), 1.0)
    np.testing.assert_allclose(plotting.smooth(np.array([0.0, 2.0]), 0.0), [0.0, 2.0])


def test_plot_errors(tmp_path):
    assert _plot_main([str(tmp_path / "missing"), "--out", str(tmp_path / "a.png")]) == 2
    run = _write_run(tmp_path / "r", _hs_records(0))
    with pytest.raises(ValueError):
        plotting.plot_runs([run], str(tmp_path / "a.png"), labels=["a", "b"])
    with pytest.raises(ValueError):
        plotting.plot_runs([run], str(tmp_path / "a.png"), smoothing=1.0)


# ---- MetricsWriter sinks --------------------------------------------------------------


def _config(path, total=1000):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"agent": "ppo", "env": "CartPole-v1", "total_env_steps": total}, f)
    return str(path)


RECORD = {"env_steps": 250, "fps": 125.0, "policy_version": 3, "wall_time_s": 2.0,
          "episode_return_mean": 21.5, "episode_return_mean/hider": 1.0,
          "loss/total": float("nan"), "episodes": 4}


def test_progress_bar_shows_steps_fps_return_version_eta(tmp_path):
    pytest.importorskip("rich")
    from rich.console import Console  # noqa: PLC0415
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160)
    writer = metrics.MetricsWriter(_config(tmp_path / "run"), console=console, tensorboard=False)
    assert writer.total_env_steps == 1000 and writer.progress is not None
    writer.write({**RECORD, "env_steps": 50, "fps": 1.0, "policy_version": 0})  # compiling
    writer.write({**RECORD, "env_steps": 100, "fps": 40.0, "policy_version": 2})  # 1st update
    writer.write(RECORD)  # 150 steps after the first update at 125 fps: 750 left, 6 s
    writer.close()
    writer.close()  # idempotent
    text = buf.getvalue()
    # With team returns the bar shows them (the mean over zero-sum teams says nothing).
    for part in ("ppo CartPole-v1", "250/1,000 steps", "125 fps", "hider 1.00", "v3", "ETA 0:06"):
        assert part in text, part
    with open(os.path.join(tmp_path, "run", "metrics.jsonl")) as f:
        assert json.loads(f.readline())["loss/total"] is None


def test_progress_bar_shows_no_eta_before_a_rate_is_measured(tmp_path):
    """While the learner compiles (no update yet), and over the interval of the first
    update, the FPS says nothing about the rest of the run: no ETA, not 10:51:58."""
    pytest.importorskip("rich")
    from rich.console import Console  # noqa: PLC0415

    def bar_text(records):
        buf = io.StringIO()
        bar = metrics.ProgressBar(10**6, "ppo", Console(file=buf, force_terminal=True, width=200))
        for r in records:
            bar.update(r)
        bar.close()
        return "ETA " + buf.getvalue().rsplit("ETA ", 1)[1].split()[0]  # as last drawn

    compiling = {"env_steps": 64, "fps": 25.0, "policy_version": 0, "wall_time_s": 40.0}
    first_update = {"env_steps": 3200, "fps": 2200.0, "policy_version": 49, "wall_time_s": 42.0}
    assert bar_text([compiling]) == "ETA -:--"
    assert bar_text([compiling, first_update]) == "ETA -:--"
    steady = {"env_steps": 5200, "fps": 2000.0, "policy_version": 90, "wall_time_s": 43.0}
    assert bar_text([compiling, first_update, steady]) == "ETA 8:17"  # 994,800 / 2,000 fps
    # A resumed run starts at its checkpoint's version: the same rule from there.
    resumed = [{**r, "policy_version": r["policy_version"] + 500}
               for r in (compiling, first_update, steady)]
    assert bar_text(resumed[:2]) == "ETA -:--" and bar_text(resumed) == "ETA 8:17"


def test_quiet_without_a_terminal_and_sinks_switch_off(tmp_path, monkeypatch):
    monkeypatch.delenv("JAXSRL_PROGRESS", raising=False)
    monkeypatch.setenv("JAXSRL_TENSORBOARD", "0")
    logdir = _config(tmp_path / "run")
    writer = metrics.MetricsWriter(logdir)  # pytest captures stderr: not a terminal
    assert writer.progress is None and writer.tensorboard is None and writer.wandb_run is None
    writer.write(RECORD)
    writer.close()
    assert not glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    # No config.json (e.g. a writer used on its own): no total, still works.
    writer = metrics.MetricsWriter(str(tmp_path), progress=False)
    assert writer.total_env_steps is None
    writer.close()


def test_wandb_only_behind_the_flag(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def log(self, data, step):
            calls.setdefault("log", []).append((step, data))

        def finish(self):
            calls["finish"] = True

    def init(**kwargs):
        calls["init"] = kwargs
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    logdir = _config(tmp_path / "run")
    metrics.MetricsWriter(logdir, progress=False, tensorboard=False).close()
    assert "init" not in calls  # off by default
    monkeypatch.setenv("JAXSRL_WANDB", "1")
    monkeypatch.setenv("JAXSRL_WANDB_PROJECT", "proj")
    writer = metrics.MetricsWriter(logdir, progress=False, tensorboard=False)
    writer.write(RECORD)
    writer.close()
    assert calls["init"]["project"] == "proj" and calls["init"]["config"]["agent"] == "ppo"
    step, data = calls["log"][0]
    assert step == 250 and data["episode_return_mean"] == 21.5 and "loss/total" not in data
    assert calls["finish"]
    first_id = calls["init"]["id"]
    metrics.MetricsWriter(logdir, progress=False, tensorboard=False).close()
    assert calls["init"]["id"] == first_id  # a resumed run continues the same W&B run


def test_console_line_names_team_returns():
    line = metrics.console_line(RECORD)
    assert "return    21.50" in line and "hider 1.00" in line


def test_median_band_is_the_median_and_range_of_the_runs():
    x = np.linspace(0.0, 10.0, 11)
    curves = [(x, x), (x, x + 1.0), (x, x + 10.0)]
    grid, median, lo, hi = plotting.aggregate_median(curves, points=5)
    np.testing.assert_allclose(median, grid + 1.0)  # the middle run, not the mean (+3.67)
    np.testing.assert_allclose(lo, grid)
    np.testing.assert_allclose(hi, grid + 10.0)
    assert plotting.aggregate_median(curves[:1]) is None


def test_median_band_and_time_references_draw(tmp_path):
    dirs = []
    for i in range(3):
        d = tmp_path / f"s{i}"
        d.mkdir()
        with open(d / "metrics.jsonl", "w") as f:
            for step in range(1, 6):
                f.write(json.dumps({"env_steps": step * 100, "wall_time_s": step * 1.0,
                                    "episode_return_mean": step * (i + 1.0)}) + "\n")
        dirs.append(str(d))
    out = plotting.plot_runs(dirs, str(tmp_path / "c.png"), labels=["ppo"] * 3, band="median",
                             time_references=[(156.0, 3000.0, "SF")])
    assert os.path.getsize(out[0]) > 0
    with pytest.raises(ValueError, match="band='nope'"):
        plotting.plot_runs(dirs, str(tmp_path / "d.png"), band="nope")

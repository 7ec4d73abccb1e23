"""Rung 10, fan in, at a small size: simulated actors on one server and one sample socket,
every actor answered, its segments admitted, the figures of the table present."""

from jaxsrl.bench import fan_in
from jaxsrl.cli.bench_report import render


def test_fan_in_rung_connects_every_actor_and_reports_its_figures():
    out = fan_in.measure(counts=(40,), workloads=("CartPole-v1",), client_procs=2, rate=20.0,
                         duration_s=2.0, warmup_s=1.0, log=lambda s: None)
    (p,) = out["points"]
    assert "error" not in p, p
    assert p["refused"] == p["unanswered"] == p["lost"] == 0, p
    assert p["requests_per_s"] > 0 and p["latency_ms_p50"] <= p["latency_ms_p99"]
    assert p["segments_per_s"] > 0 and p["segments_dropped"] == 0, p  # the gate took them
    assert 1.9 <= p["server_fds_per_actor"] <= 2.5, p  # one connection per socket
    assert out["fd_limit_soft"] == out["fd_limit_hard"] or out["fd_limit_hard"] < 0
    assert "| CartPole-v1 | 40 |" in render.fan_in_markdown(out)

"""Regenerating the benchmark report keeps its hand-written sections
(jaxsrl/cli/bench_report/md_region.py through ``scripts/bench.py --from_json``, which rewrites the
Markdown the way a full run does, without measuring)."""

from __future__ import annotations

import copy
import json

import pytest

from jaxsrl.cli.bench_report import md_region, report
from jaxsrl.cli.bench_report import render as report_render
from jaxsrl.cli import bench as cli

START, END = md_region.START, md_region.END
HAND_BEFORE = "Hand-written intro.\n\n"
HAND_AFTER = "\n## Measured by hand\n\nA table the ladder does not make.\n"


def _report(tmp_path):
    """A small finished report (rungs failed or missing) saved as JSON -> (path, its Markdown)."""
    result = {
        "quick": True, "wall_s": 1.0, "notes": [],
        "machine": {"cores": 2, "devices": ["cpu:0"], "command": "python scripts/bench.py",
                    "load_average_start": [0.1, 0.1, 0.1]},
        "layout": {"env": "CartPole-v1", "agent": "ppo", "num_actors": 2, "envs_per_actor": 32,
                   "ring_size": 2, "segment_length": 32, "batch_segments": 64},
        "rungs": {"raw_env": {"error": "ValueError: unknown environment"}},
    }
    done = report.finalize(copy.deepcopy(result))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(done))
    return path, report_render.render_markdown(done)


def test_regenerating_replaces_only_the_region_between_the_markers(tmp_path):
    json_path, generated = _report(tmp_path)
    md = tmp_path / "benchmarks.md"
    md.write_text(f"{HAND_BEFORE}{START}\n# Benchmarks\n\nold ladder, old numbers\n{END}\n{HAND_AFTER}")
    assert cli.main(["--from_json", str(json_path), f"--out_md={md}"]) == 0
    text = md.read_text()
    assert text == f"{HAND_BEFORE}{START}\n{generated}{END}\n{HAND_AFTER}"
    assert "old ladder" not in text and "failed: ValueError: unknown environment" in text
    assert cli.main(["--from_json", str(json_path), f"--out_md={md}"]) == 0
    assert md.read_text() == text  # regenerating again changes nothing


def test_a_new_report_is_created_with_the_markers(tmp_path):
    json_path, generated = _report(tmp_path)
    md = tmp_path / "docs" / "new.md"
    assert cli.main(["--from_json", str(json_path), f"--out_md={md}"]) == 0
    assert md.read_text() == f"{START}\n{generated}{END}\n"


@pytest.mark.parametrize("body", [
    "# Benchmarks\n\nno markers at all\n",
    f"{START}\nonly the start\n",
    f"{END}\nend first\n{START}\n",
    f"{START}\na\n{END}\n{START}\nb\n{END}\n",
])
def test_a_report_without_a_well_formed_region_is_refused_before_measuring(tmp_path, capsys, body):
    json_path, _ = _report(tmp_path)
    md = tmp_path / "benchmarks.md"
    md.write_text(body + HAND_AFTER)
    assert cli.main(["--from_json", str(json_path), f"--out_md={md}"]) == 2
    assert md.read_text() == body + HAND_AFTER  # untouched
    err = capsys.readouterr().err.strip()
    assert str(md) in err and START in err and len(err.splitlines()) == 1
    with pytest.raises(md_region.RegionError):
        md_region.write(str(md), "new\n")


def test_splice_keeps_the_bytes_around_the_region():
    existing = f"a\r\n  {START}  \nold\n{END}\nb"  # markers may carry spaces; the rest is kept as is
    assert md_region.splice(existing, "new") == f"a\r\n  {START}  \nnew\n{END}\nb"
    assert md_region.splice(None, "x\n") == f"{START}\nx\n{END}\n"


def test_the_tracked_report_has_its_region():
    md_region.check("docs/benchmarks.md")  # raises if the markers were lost

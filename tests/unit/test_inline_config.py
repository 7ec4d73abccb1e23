"""``--inline_inference`` in the config: the settings it cannot honour are one-line errors
(``jaxsrl/experiment/inline.py``)."""

import pytest

from jaxsrl.experiment.config import load_config

INLINE = "--inline_inference"


def test_inline_inference_is_off_by_default_and_a_flag():
    assert load_config([]).inline_inference is False
    assert load_config([INLINE]).inline_inference is True


@pytest.mark.parametrize("flags, match", [
    (["--remote_inference"], r"--inline_inference runs act inside the actors: it starts no "
                             r"inference server, so --remote_inference"),
    (["--inference_servers=2"], r"inference_servers=2 does not apply with --inline_inference"),
    (["--inference_deadline_ms=2"], r"inference_deadline_ms=2.0 does not apply"),
    (["--env=hide_and_seek", "--config=configs/hide_and_seek_teams.toml",
      "--config=configs/hide_and_seek_selfplay.toml"],
     r"opponents.snapshot_every=4 does not work with --inline_inference"),
])
def test_what_inline_inference_cannot_do_is_a_one_line_error(flags, match):
    with pytest.raises(ValueError, match=match) as info:
        load_config([INLINE, *flags])
    assert "\n" not in str(info.value)


def test_a_policy_worker_of_several_servers_is_refused(tmp_path):
    toml = tmp_path / "two_servers.toml"
    toml.write_text('[dataflow]\nactors = [{name = "actors", count = 2, inference_stream = "inf", '
                    'sample_stream = "smp"}]\npolicy_workers = [{name = "server", count = 2, '
                    'inference_stream = "inf", policy = "p"}]\ntrainers = [{name = "learner", '
                    'sample_stream = "smp", policy = "p"}]\n')
    with pytest.raises(ValueError, match=r"policy worker 'server' has count=2") as info:
        load_config([INLINE, f"--config={toml}"])
    assert "\n" not in str(info.value)

"""``--inference`` in the config: ``auto`` picks inline or thread by the run
(``auto_mode``), the old ``--inline_inference`` / ``--remote_inference`` flags and keys
still work (``jaxsrl/experiment/modes.py``), and the settings inline cannot honour are
one-line errors (rows of ``modes.REFUSED``)."""

import dataclasses
import json

import pytest

from jaxsrl.experiment.config import load_config, to_dict
from jaxsrl.experiment.inline import auto_mode
from jaxsrl.experiment.resume import config_record, inference_reason

INLINE = "--inline_inference"


def test_inference_is_auto_by_default_and_the_old_flags_still_work():
    assert load_config([]).inference == "auto"
    assert load_config([]).inline_inference is False  # resolved when the run starts
    assert load_config([INLINE]).inference == "inline"
    assert load_config([INLINE]).inline_inference is True
    assert load_config(["--no_inline_inference"]).inference == "thread"
    assert load_config(["--inference=server"]).inference == "thread"
    assert load_config(["--remote_inference"]).inference == "process"
    assert load_config(["--remote_inference"]).remote_inference is True
    assert load_config(["--inference=server", "--remote_inference"]).inference == "process"
    assert load_config(["--remote_inference=false"]).inference == "auto"
    with pytest.raises(ValueError, match=r"inference='gpu' must be one of auto, thread, process, "
                                         r"inline"):
        load_config(["--inference=gpu"])


def _auto(flags, off_policy=False, accelerator=False):
    cfg = load_config(flags)
    return auto_mode(cfg, cfg.get_dataflow(), off_policy, accelerator)


def test_auto_is_inline_for_a_plain_run_on_a_cpu_only_learner():
    mode, why = _auto([])
    assert mode == "inline" and "CPU-only" in why
    assert _auto(["--env=hide_and_seek"])[0] == "inline"
    assert _auto(["--launcher=serial"])[0] == "inline"


@pytest.mark.parametrize("flags, kwargs, reason", [
    ([], {"accelerator": True}, "the learner has an accelerator"),
    ([], {"off_policy": True}, "an off-policy agent"),
    (["--launcher=ray"], {}, "launcher=ray"),
    (["--num_learner_processes=2"], {}, "several learner processes"),
    (["--inference_servers=2"], {}, "inference_servers=2"),
    (["--inference_deadline_ms=2"], {}, "an inference deadline"),
    (["--config=configs/pbt_cartpole.toml"], {}, "a population"),
    (["--env=hide_and_seek", "--config=configs/hide_and_seek_teams.toml",
      "--config=configs/hide_and_seek_selfplay.toml"], {}, "self-play opponents"),
])
def test_auto_is_the_server_where_inline_does_not_fit(flags, kwargs, reason):
    mode, why = _auto(flags, **kwargs)
    assert mode == "thread" and reason in why, why


def test_auto_keeps_the_server_for_a_dataflow_table(tmp_path):
    toml = tmp_path / "graph.toml"
    toml.write_text('[dataflow]\nactors = [{name = "actors", count = 2, inference_stream = "inf", '
                    'sample_stream = "smp"}]\npolicy_workers = [{name = "server", '
                    'inference_stream = "inf", policy = "p"}]\ntrainers = [{name = "learner", '
                    'sample_stream = "smp", policy = "p"}]\n')
    mode, why = _auto([f"--config={toml}"])
    assert mode == "thread" and "a [dataflow] table" in why


@pytest.mark.parametrize("value, mode", [("true", "inline"), ("false", "thread")])
def test_the_old_inline_inference_key_of_a_config_file(tmp_path, value, mode):
    toml = tmp_path / "old.toml"
    toml.write_text(f"inline_inference = {value}\n")
    assert load_config([f"--config={toml}"]).inference == mode


def test_a_bad_inline_inference_key_or_inference_value_is_a_one_line_error(tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text('inline_inference = "yes"\n')
    with pytest.raises(ValueError, match=r"bad.toml: inline_inference='yes' must be true or false"):
        load_config([f"--config={toml}"])
    toml.write_text('inference = "gpu"\n')
    with pytest.raises(ValueError, match=r"inference='gpu' must be one of auto, thread, process, "
                                         r"inline") as info:
        load_config([f"--config={toml}"])
    assert "\n" not in str(info.value)


def test_the_old_key_contradicting_the_new_one_is_refused(tmp_path):
    toml = tmp_path / "both.toml"
    toml.write_text('inline_inference = false\ninference = "inline"\n')
    with pytest.raises(ValueError, match=r"both.toml: inline_inference=false contradicts "
                                         r"inference='inline' \(keep one of them"):
        load_config([f"--config={toml}"])
    toml.write_text('inline_inference = true\ninference = "inline"\n')  # agreeing: fine
    assert load_config([f"--config={toml}"]).inference == "inline"


def test_resuming_a_run_saved_with_the_old_key_keeps_its_mode(tmp_path):
    """An older run's ``config.json`` says ``inline_inference``: its mode is kept."""
    logdir = tmp_path / "run"
    (logdir / "checkpoints").mkdir(parents=True)
    saved = load_config([f"--logdir={logdir}"])
    data = to_dict(saved)
    data.pop("inference")
    data["inline_inference"] = True
    (logdir / "config.json").write_text(json.dumps(data))
    assert load_config([f"--logdir={logdir}", "--resume"]).inference == "inline"


@pytest.mark.parametrize("flags, match", [
    (["--remote_inference"], r"--inline_inference contradicts --remote_inference"),
    (["--env=hide_and_seek", "--config=configs/hide_and_seek_teams.toml",
      "--config=configs/hide_and_seek_selfplay.toml"],
     r"--opponents.snapshot_every=4 does not work with --inference=inline"),
])
def test_what_inline_inference_cannot_do_is_a_one_line_error(flags, match):
    with pytest.raises(ValueError, match=match) as info:
        load_config([INLINE, *flags])
    assert "\n" not in str(info.value)


def _saved_run(tmp_path, **changes):
    """A run folder whose ``config.json`` is the defaults with ``changes`` (a value of
    ``None`` removes the key)."""
    logdir = tmp_path / "run"
    (logdir / "checkpoints").mkdir(parents=True)
    data = to_dict(load_config([f"--logdir={logdir}"]))
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    (logdir / "config.json").write_text(json.dumps(data))
    return logdir


def test_a_run_saved_before_the_inference_setting_resumes_with_servers(tmp_path):
    """A ``config.json`` without ``inference`` (nor ``inline_inference``) is a run made
    before inline inference existed: it ran inference servers, and resumes so (not as
    ``auto``, which would pick inline on a CPU-only machine); the run_start line says why."""
    logdir = _saved_run(tmp_path, inference=None)
    cfg = load_config([f"--logdir={logdir}", "--resume"])
    assert cfg.inference == "thread"
    saved = json.loads((logdir / "config.json").read_text())
    assert "predates the inference setting" in inference_reason(saved, "thread")
    # a flag given now still wins
    assert load_config([f"--logdir={logdir}", "--resume", INLINE]).inference == "inline"


def test_auto_is_recorded_as_auto_and_resolved_again_on_resume(tmp_path):
    """``config.json`` keeps ``inference = "auto"`` with the mode it ran
    (``inference_resolved``): a resume resolves it again (on a GPU machine or with
    learner processes it may be the server) and the run_start line says so."""
    cfg = load_config([])
    resolved = dataclasses.replace(cfg, inference="inline")  # what _inference_mode returns
    record = config_record(resolved, cfg.inference, "runs/x")
    assert record["inference"] == "auto" and record["inference_resolved"] == "inline"
    logdir = _saved_run(tmp_path, inference="auto", inference_resolved="inline")
    assert load_config([f"--logdir={logdir}", "--resume"]).inference == "auto"
    why = inference_reason(record, "auto: thread (the learner has an accelerator)")
    assert why == ("auto: thread (the learner has an accelerator); resolved again on resume "
                   "(it ran inline before)")


@pytest.mark.parametrize("changes, mode", [
    ({"inference": None, "remote_inference": True}, "process"),   # before the setting
    ({"inference": None, "remote_inference": False}, "thread"),
    ({"inference": "server", "remote_inference": True}, "process"),
    ({"inference": "server", "remote_inference": False}, "thread"),
    ({"inference": "auto", "remote_inference": False}, "auto"),
    ({"inference": "auto", "remote_inference": True}, "process"),  # auto fell back to servers
    ({"inference": "inline", "remote_inference": False}, "inline"),
])
def test_resuming_a_run_written_by_older_code_keeps_its_mode(tmp_path, changes, mode):
    """``config.json`` of older code: ``remote_inference`` beside ``inference`` (``server``,
    ``auto`` or ``inline``), or no ``inference`` at all; the mode it ran is kept, and the
    changed-settings diff of the resume sees no change of it."""
    from jaxsrl.experiment import modes
    from jaxsrl.experiment.resume import changed_settings
    logdir = _saved_run(tmp_path, **changes)
    cfg = load_config([f"--logdir={logdir}", "--resume"])
    assert cfg.inference == mode
    old = json.loads((logdir / "config.json").read_text())
    assert "inference" not in changed_settings(modes.current_record(old, "config.json"), to_dict(cfg))


def test_inference_table_of_a_config_file(tmp_path):
    """``[inference] mode = ...`` (a section table) sets ``--inference``; the old keys
    work there too; a key the section lacks, or one given twice, is refused."""
    toml = tmp_path / "sec.toml"
    toml.write_text('[inference]\nmode = "process"\ninference_servers = 2\n'
                    '[actors]\nnum_actors = 4\n')
    cfg = load_config([f"--config={toml}"])
    assert (cfg.inference, cfg.inference_servers, cfg.num_actors) == ("process", 2, 4)
    assert cfg.section("actors")["num_actors"] == 4
    toml.write_text('[inference]\nremote_inference = true\n')
    assert load_config([f"--config={toml}"]).inference == "process"
    toml.write_text('[inference]\nnum_actors = 4\n')
    with pytest.raises(ValueError, match=r"unknown \[inference\] keys \['num_actors'\]"):
        load_config([f"--config={toml}"])
    toml.write_text('num_actors = 3\n[actors]\nnum_actors = 4\n')
    with pytest.raises(ValueError, match=r"num_actors is set both at the top level and in \[actors\]"):
        load_config([f"--config={toml}"])

"""The accelerator process lost under Ray: one line naming it, and an ``accelerator_lost``
event in the run folder (Ray's real exception type; no cluster)."""

import os

import pytest

pytest.importorskip("ray")

import ray.exceptions  # noqa: E402
from ray.core.generated.common_pb2 import ActorDiedErrorContext  # noqa: E402

from jaxsrl.experiment import events  # noqa: E402
from jaxsrl.launch import ray_loss  # noqa: E402

# What Ray 2.60's raylet says of a worker killed by SIGKILL (its binary's text).
RAY_DETAIL = ("The actor is dead because its worker process has died. Worker exit type: "
              "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
              "error code 2. End of file")
RAY_ADVICE = (". Some common causes include: (1) the process was killed by the OOM killer due "
              "to high memory usage, (2) ray stop --force was called, or (3) the worker crashed "
              "unexpectedly due to SIGSEGV or another unexpected error.")
WHERE = {"node_id": "b6e9" * 10, "node_ip": "10.0.0.11", "pid": 4242}


def _died(detail: str = RAY_DETAIL + RAY_ADVICE) -> ray.exceptions.ActorDiedError:
    return ray.exceptions.ActorDiedError(ActorDiedErrorContext(
        error_message=detail, pid=4242, node_ip_address="10.0.0.11",
        class_name="AcceleratorHost", actor_id=b"\x01" * 16))


def test_death_reason_is_ray_s_detail_in_one_line():
    assert "\n" in str(_died())  # Ray's own message: several lines with the actor's fields
    assert ray_loss.death_reason(_died()) == RAY_DETAIL + "."
    long = ray_loss.death_reason(_died("x" * 1000))
    assert len(long) == ray_loss.REASON_CHARS and long.endswith("...")
    assert ray_loss.death_reason(ray.exceptions.ActorDiedError()) == "ActorDiedError"


def test_lost_names_it_in_one_line_and_in_the_run_events(tmp_path):
    logdir = str(tmp_path / "run")
    os.makedirs(logdir)
    line = ray_loss.lost(logdir, WHERE, _died())  # Ray not initialised: written here
    assert "\n" not in line
    assert line.startswith("the accelerator process (learner and inference) pid 4242 on Ray "
                           f"node 10.0.0.11 was lost ({RAY_DETAIL}.); its last checkpoint is in "
                           f"{logdir} (continue with --resume --logdir={logdir})"), line
    [event] = events.read_events(os.path.join(logdir, "run_events.jsonl"))
    assert event == event | {"event": "accelerator_lost", "level": "ERROR", "message": line,
                             "pid": 4242, "node_ip": "10.0.0.11", "node_id": WHERE["node_id"],
                             "reason": RAY_DETAIL + "."}


def test_lost_creates_no_run_folder_and_says_what_it_did_not_record(tmp_path):
    logdir = str(tmp_path / "elsewhere")  # not on this machine (no shared filesystem)
    line = ray_loss.lost(logdir, WHERE, _died())
    assert line.endswith(f"; not recorded in run_events.jsonl (FileNotFoundError: no run folder "
                         f"{logdir})"), line
    assert not os.path.exists(logdir)
    early = ray_loss.lost(logdir, None, _died())  # died before saying where it runs
    assert early.startswith("the accelerator process (learner and inference) was lost (")
    assert early.endswith("not recorded in run_events.jsonl (it died before it started)")

"""The run's first log line names the learner's and inference's devices
(jaxsrl/parallel/devices.py ``describe``, jaxsrl/launch/launcher.py ``devices_line``)."""

from types import SimpleNamespace

import jax
import pytest

from jaxsrl.launch.launcher import devices_line
from jaxsrl.parallel.devices import describe


def _gpus(n):
    return [SimpleNamespace(platform="gpu", id=i, device_kind="NVIDIA H200") for i in range(n)]


def test_describe_this_machines_cpu():
    assert describe(jax.devices("cpu")[:1]) == "cpu:0 (x1)"


def test_describe_gpus_with_their_kind_and_a_long_list_shortened():
    assert describe(_gpus(2)) == "gpu:0,gpu:1 (x2 NVIDIA H200)"
    assert describe(_gpus(8)) == "gpu:0,...,gpu:7 (x8 NVIDIA H200)"


def test_describe_no_devices_raises():
    with pytest.raises(ValueError, match="no devices"):
        describe([])


def test_devices_line_per_inference_mode():
    cpu = jax.devices("cpu")[:1]
    assert devices_line(cpu, 1, inline=False, remote=False) == \
        "learner cpu:0 (x1), inference the same (threads of the learner)"
    assert devices_line(_gpus(2), 1, inline=True, remote=False) == \
        "learner gpu:0,gpu:1 (x2 NVIDIA H200), inference cpu in each inline actor process"
    assert devices_line(cpu, 1, inline=True, remote=False, jax_platforms="cuda") == \
        "learner cpu:0 (x1), inference cuda in each inline actor process"
    assert devices_line(_gpus(1), 2, inline=False, remote=True) == \
        ("learner gpu:0 (x1 NVIDIA H200) in each of 2 learner processes, "
         "inference the local devices of each remote server process")

"""The off-policy learner (jaxsrl/workers/learner/replay_trainer.py, jaxsrl/workers/buffer/feed.py): the
replay path driven turn by turn with fake segments and a fake agent whose state counts
its updates, so every rate-limiter and back-pressure decision is checked exactly;
checkpoints of the replay; the dataflow's buffer worker."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from agents.transitions import n_step_transitions
from jaxsrl.core.agent import AgentFns, ReplaySpec
from jaxsrl.experiment import events
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.dataflow import BufferSpec, Dataflow, default_dataflow
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.learner import replay_setup
from jaxsrl.workers.learner.replay_trainer import ReplayTrainer
from jaxsrl.core.agent import EnvSpec
from jaxsrl.workers.learner.trainer import TrainerSettings, TrainerStart, TrainerWorker

OBS = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
ACTIONS = gymnasium.spaces.Discrete(2)
T, ROWS = 4, 2  # each segment: 2 rows of 4 steps = 8 items
ITEMS = T * ROWS


@pytest.fixture(scope="module", autouse=True)
def _compilation_cache():
    """The launcher's persistent XLA cache, as in a run: later test runs skip compiles."""
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    jax.config.update("jax_compilation_cache_dir",
                      os.path.expanduser(load_config([]).compilation_cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


class Count(NamedTuple):
    params: jax.Array  # learn calls so far


def fake_agent(spec: ReplaySpec) -> AgentFns:
    """``learn`` counts calls and returns priority ``reward + 1`` per sampled item."""

    def learn(state, batch, rng):
        del rng
        metrics = {"weight_mean": jnp.mean(batch.weights)}
        return Count(state.params + 1), metrics, batch.items["reward"] + 1.0

    return AgentFns(init=lambda rng: Count(jnp.int32(0)), act=None, learn=learn,
                    initial_carry=lambda n: None, replay=spec,
                    to_items=lambda traj: n_step_transitions(traj, 1, 0.99))


class Driven:
    """A ReplayTrainer driven turn by turn on an inproc PULL socket (no thread)."""

    def __init__(self, spec: ReplaySpec, checkpointer=None, version: int = 0, **kwargs):
        mesh = devices.local_mesh()
        fns = fake_agent(spec)
        self.metrics = MetricsAccumulator()
        state = devices.put_replicated(Count(jnp.int32(version)), mesh)
        self.worker = ReplayTrainer(
            "test-replay", "p", devices.jit_replay_learn(fns.learn, mesh),
            lambda b: devices.put_batch(b, mesh),
            TrainerStart(state, jax.random.PRNGKey(0), version), EnvSpec(OBS, ACTIONS), TrainerSettings(T, 1, max_rows=ROWS), ParameterStore(),
            self.metrics, checkpointer=checkpointer, fns=fns, planned_updates=100, **kwargs)
        self.worker.warmup()
        self.context = zmq.Context()
        self.pull = self.context.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, 2)
        self.pull.bind("inproc://samples")
        self.push = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 1)
        self.push.connect("inproc://samples")
        self.sent = 0

    def send(self, reward: float = 0.0, block: bool = True) -> bool:
        """One segment of ``ITEMS`` items with this reward; False if the send would block."""
        rng = np.random.default_rng(self.sent)
        arrays = {"obs": rng.uniform(-1, 1, (ROWS, T + 1, 3)).astype(np.float32),
                  "final_obs": np.zeros((ROWS, T, 3), np.float32),
                  "action": rng.integers(0, 2, (ROWS, T)).astype(np.int32),
                  "reward": np.full((ROWS, T), reward, np.float32),
                  "terminated": np.zeros((ROWS, T), bool), "truncated": np.zeros((ROWS, T), bool),
                  "logp": np.full((ROWS, T), -0.69, np.float32),
                  "version": np.full((ROWS, T), self.worker.version, np.int32)}
        meta = {"actor": 0, "run": 1, "group": 0, "env_steps": ITEMS, "episodes": []}
        try:
            self.push.send_multipart(wire.encode("segment", arrays, meta),
                                     flags=0 if block else zmq.NOBLOCK)
        except zmq.Again:
            return False
        self.sent += 1
        return True

    def turn(self) -> None:
        self.worker.turn(self.pull)

    @property
    def limiter(self):
        return self.worker.feed.limiter

    def close(self) -> None:
        self.push.close()
        self.pull.close()
        self.context.term()


@pytest.fixture
def driven():
    made = []

    def make(spec, **kwargs):
        made.append(Driven(spec, **kwargs))
        return made[-1]

    yield make
    for d in made:
        d.close()


def test_no_update_before_min_fill_then_the_ratio_is_held(driven):
    """Replay ratio 2 (items sampled per item inserted), batches of 4: one update per 2
    items once 24 items are in. Random arrivals; after every turn the limiter's diff is
    in its window (overshooting only by the one segment just taken), and at the end the
    learner has done exactly the updates the window allows."""
    spec = ReplaySpec(capacity=256, batch_size=4, replay_ratio=2.0, min_fill=24)
    d = driven(spec)
    lim = d.limiter
    for _ in range(2):
        d.send()
        d.turn()
    assert d.worker.feed.replay.inserts == 16 and d.worker.version == 0  # below min fill
    d.send()
    d.turn()  # 24 items: the first update runs in the same turn
    assert d.worker.version == 1
    rng = np.random.default_rng(0)
    for _ in range(150):
        if rng.random() < 0.3:
            d.send(block=False)
        d.turn()
        assert lim.diff >= lim.min_diff  # never sampled ahead of the ratio
        assert lim.diff <= lim.max_diff + ITEMS * spec.replay_ratio  # at most one segment over
        assert d.worker.version * spec.batch_size == lim.samples
    for _ in range(50):  # drain: every allowed update runs
        d.turn()
    assert lim.updates_allowed(spec.batch_size) == 0
    expected = (lim.inserts * spec.replay_ratio - lim.min_diff) // spec.batch_size
    assert d.worker.version == expected
    assert lim.inserts == d.sent * ITEMS  # nothing dropped


def test_back_pressure_stops_reading_until_updates_catch_up(driven):
    """Ratio 8, batch 4, min fill 8: one segment (8 items) allows 16 updates but a turn
    runs one, so inserts soon wait for samples. While they do, the trainer does not
    read its socket (the segments stay queued), the sender's non-blocking sends fail
    (the queues are full: actors block), and nothing is lost once reading resumes."""
    spec = ReplaySpec(capacity=256, batch_size=4, replay_ratio=8.0, min_fill=8)
    d = driven(spec)
    lim, feed = d.limiter, d.worker.feed
    d.send()
    d.send()
    d.turn()
    d.turn()
    assert not feed.insert_allowed()
    while d.send(block=False):  # fill the queues: the next send would block
        assert d.sent < 50
    inserts, version = lim.inserts, d.worker.version
    held_back = 0
    while not feed.insert_allowed():
        d.turn()
        held_back += 1
        assert lim.inserts == inserts  # not read
        assert d.worker.version == version + held_back  # the learner works meanwhile
        assert d.pull.poll(0)  # segments are waiting
    assert held_back > 0
    while d.pull.poll(0) or lim.updates_allowed(spec.batch_size):
        d.turn()
    assert lim.inserts == d.sent * ITEMS  # slowed, not dropped


def test_priorities_from_learn_are_written_back(driven):
    """learn returns reward + 1 = 3 for every sampled item: after its updates the
    buffer's largest priority is 3^alpha and every held priority is 1 (new, never
    sampled before the first write) or 3^alpha."""
    spec = ReplaySpec(capacity=64, batch_size=4, replay_ratio=4.0, min_fill=8, prioritised=True,
                      priority_exponent=0.6)
    d = driven(spec)
    d.send(reward=2.0)
    for _ in range(5):
        d.turn()
    assert d.worker.version == 2  # the window [32 - 8, 32 + 8] allows (32 - 24) / 4 updates
    stats = d.worker.feed.replay.priority_stats()
    assert stats["priority_max"] == pytest.approx(3.0 ** 0.6, rel=1e-5)
    leaves = d.worker.feed.replay.state_dict()["priority_nodes"][-64:][:ITEMS]
    assert np.all(np.isclose(leaves, 1.0) | np.isclose(leaves, 3.0 ** 0.6)), leaves
    assert np.isclose(leaves, 3.0 ** 0.6).any()


def test_metrics_report_the_buffer(driven):
    spec = ReplaySpec(capacity=64, batch_size=4, replay_ratio=4.0, min_fill=8, prioritised=True)
    d = driven(spec)
    d.send()
    for _ in range(4):
        d.turn()
    d.worker.report_metrics()
    record = d.metrics.snapshot(1.0)
    for key in ("replay/size", "replay/inserts_per_s", "replay/samples_per_s", "replay/ratio",
                "replay/priority_mean", "replay/staleness_mean", "staleness_mean",
                "replay/updates_per_s", "weight_mean"):
        assert key in record, key
    assert record["replay/size"] == ITEMS


@pytest.mark.parametrize("save_replay", [True, False])
def test_resume_with_and_without_the_replay(driven, tmp_path, save_replay):
    """With save_replay the checkpoint holds buffer and limiter: a trainer restored from
    it holds the same items and samples the same batch; without, it starts empty and
    records that it refills (a run event)."""
    spec = ReplaySpec(capacity=64, batch_size=4, replay_ratio=2.0, min_fill=8, prioritised=True)
    ckpt = Checkpointer(str(tmp_path / "ck"))
    d = driven(spec, checkpointer=ckpt, save_replay=save_replay)
    for r in (1.0, 2.0, 3.0):
        d.send(reward=r)
        d.turn()
    version = d.worker.version
    assert version > 0
    d.worker.save_checkpoint()
    ckpt.manager.wait_until_finished()
    assert ckpt.has_item(version, "replay") == save_replay
    before = (d.worker.feed.replay.inserts, d.limiter.state_dict())
    key = jax.random.PRNGKey(7)
    batch, _ = d.worker.feed.replay.sample(key)

    with events.recording(str(tmp_path / "events.jsonl")):
        resumed = Driven(spec, checkpointer=ckpt, version=version, restore_replay=True)
    recorded = events.read_events(str(tmp_path / "events.jsonl"))
    try:
        feed = resumed.worker.feed
        if save_replay:
            assert (feed.replay.inserts, feed.limiter.state_dict()) == before
            again, _ = feed.replay.sample(key)
            np.testing.assert_array_equal(again.items["obs"], batch.items["obs"])
            assert [(e["event"], e["step"], e["items"]) for e in recorded] == [
                ("replay_restored", version, feed.replay.size)]
        else:
            assert feed.replay.inserts == 0 and feed.limiter.inserts == 0
            assert [(e["event"], e["reason"]) for e in recorded] == [("replay_refill", "not saved")]
    finally:
        resumed.close()
        ckpt.close()


def test_a_saved_replay_that_does_not_fit_is_refilled(driven, tmp_path):
    spec = ReplaySpec(capacity=64, batch_size=4, replay_ratio=2.0, min_fill=8)
    ckpt = Checkpointer(str(tmp_path / "ck"))
    d = driven(spec, checkpointer=ckpt, save_replay=True)
    d.send()
    d.turn()
    d.worker.save_checkpoint()
    ckpt.manager.wait_until_finished()
    bigger = dataclasses.replace(spec, capacity=128)
    with events.recording(str(tmp_path / "events.jsonl")):
        resumed = Driven(bigger, checkpointer=ckpt, version=d.worker.version, restore_replay=True)
    try:
        assert resumed.worker.feed.replay.inserts == 0
        (refill,) = events.read_events(str(tmp_path / "events.jsonl"), "replay_refill")
        assert refill["reason"] == "does not fit" and "expected int32[128]" in refill["error"]
    finally:
        resumed.close()
        ckpt.close()


def test_dataflow_buffers():
    flow = default_dataflow(2).with_buffers(["samples"])
    flow.validate()
    assert flow.buffer_for("samples") == BufferSpec("replay", "samples", "learner")
    assert flow.with_buffers(["samples"]) is flow  # already there
    data = {"actors": [{"name": "a", "count": 1, "inference_stream": "i", "sample_stream": "s"}],
            "policy_workers": [{"name": "p", "inference_stream": "i", "policy": "d"}],
            "trainers": [{"name": "t", "sample_stream": "s", "policy": "d"}]}
    Dataflow.from_dict({**data, "buffers": [{"name": "b", "sample_stream": "s"}]}).validate()
    Dataflow.from_dict({**data, "buffers": [{"name": "b", "sample_stream": "s",
                                            "placement": "process", "count": 2}]}).validate()
    with pytest.raises(ValueError, match="placement='disk'"):
        Dataflow.from_dict({**data, "buffers": [{"name": "b", "sample_stream": "s",
                                                "placement": "disk"}]}).validate()
    with pytest.raises(ValueError, match="count=2; need an integer >= 1, and 1 unless"):
        Dataflow.from_dict({**data, "buffers": [{"name": "b", "sample_stream": "s",
                                                "count": 2}]}).validate()
    with pytest.raises(ValueError, match="no trainer reads sample stream 'x'"):
        Dataflow.from_dict({**data, "buffers": [{"name": "b", "sample_stream": "x"}]}).validate()
    on_policy = AgentFns(None, None, None, None)
    with pytest.raises(ValueError, match="on-policy"):
        replay_setup.complete_dataflow(flow, {"trainer": on_policy})


def test_planned_updates_and_trainer_kind():
    spec = ReplaySpec(batch_size=128, replay_ratio=32.0, min_fill=1000)
    assert replay_setup.planned_updates(201_000, spec) == 50_000  # one per 4 items past the fill
    assert replay_setup.planned_updates(10, spec) == 1

    class Cfg:
        save_replay, resume = True, False
    kind, extra = replay_setup.trainer_kind(fake_agent(spec), Cfg, 7)
    assert kind is ReplayTrainer and extra["planned_updates"] == 7 and extra["save_replay"]
    assert replay_setup.trainer_kind(AgentFns(None, None, None, None), Cfg, 7) == (TrainerWorker, {})


def test_buffer_processes_refuse_what_they_do_not_support():
    from jaxsrl.workers.learner.buffer_client import BufferClientTrainer  # noqa: PLC0415
    flow = dataclasses.replace(default_dataflow(2), buffers=(
        BufferSpec("replay", "samples", "process", 2),))

    class Cfg:
        save_replay, launcher, curve, resume = False, "local", False, True
    replay_setup.check_buffer_processes(flow, Cfg)  # nothing refused
    for key, value, words in (("save_replay", True, "--save_replay"),
                              ("launcher", "serial", "--launcher=serial"), ("curve", True, "--curve")):
        bad = type("Bad", (Cfg,), {key: value})
        with pytest.raises(ValueError, match=f"buffer 'replay' has placement='process', which "
                                             f"does not support {words}"):
            replay_setup.complete_dataflow(flow, {"trainer": fake_agent(ReplaySpec())}, 1, bad)
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    example = load_config(["--agent=dqn", "--env=CartPole-v1",
                           "--config=configs/dqn/CartPole-v1-buffer-process.toml"])
    assert example.get_dataflow().buffers == (BufferSpec("replay", "samples", "process", 1),)
    kind, extra = replay_setup.trainer_kind(fake_agent(ReplaySpec()), Cfg, 7, connect=print)
    assert kind is BufferClientTrainer and extra["connect"] is print and extra["restore_replay"]


# -- end to end, through real actor processes ------------------------------------------
def _records(logdir):
    import json  # noqa: PLC0415
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


SAC_SMALL = ["--agent=sac", "--env=Pendulum-v1", "--num_actors=2", "--envs_per_actor=2",
             "--segment_length=8", "--log_interval_s=0.5", "--sac.learning_starts=200",
             "--sac.buffer_size=4096", "--sac.batch_size=32", "--sac.hidden_sizes", "16", "16"]


def _sac_save_then_resume(tmp_path):
    """SAC learns from replay fed by actor processes at its replay ratio (one update per
    item, batch 32). A --save_replay run resumes with its buffer (no refill, learning
    goes on at once), and that resumed run, without --save_replay, saves none."""
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path / "run")
    record = train(load_config(SAC_SMALL + ["--total_env_steps=1000", f"--logdir={logdir}",
                                            "--save_replay"]))
    assert record["env_steps"] >= 1000 and record["policy_version"] > 0
    last = [r for r in _records(logdir) if "replay/ratio" in r][-1]
    assert last["replay/size"] > 200 and "qf_loss" in last
    # samples stay within the limiter's window around 32 per item past the fill:
    # |samples - 32 (inserts - 200)| <= 640 (10% of 200 x 32) + one segment (8 items x 32);
    # x2: the record holds interval means
    assert abs(last["replay/ratio"] - 32.0) * (last["replay/inserts"] - 200) <= 2 * (640 + 8 * 32)
    ckdir = os.path.join(logdir, "checkpoints", "default")
    saved = Checkpointer(ckdir)
    step = saved.latest_step()
    assert saved.has_item(step, "replay")
    saved.close()

    more = record["env_steps"] + 300
    record2 = train(load_config(SAC_SMALL + [f"--total_env_steps={more}", f"--logdir={logdir}",
                                             "--resume", "--no-save_replay"]))
    assert RunDir(logdir).read_events("replay_restored")
    assert record2["policy_version"] > record["policy_version"]
    saved = Checkpointer(ckdir)
    assert not saved.has_item(saved.latest_step(), "replay")  # saved without it this time
    saved.close()
    return logdir, record2


def test_sac_through_real_actors_then_resume_with_and_without_the_replay(tmp_path):
    _sac_save_then_resume(tmp_path)


@pytest.mark.slow
def test_sac_resume_from_a_checkpoint_without_the_replay_refills(tmp_path):
    """The third leg through real processes (the unit test above covers it quickly):
    a resume from a checkpoint saved without --save_replay refills and says so."""
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir, record = _sac_save_then_resume(tmp_path)
    more = record["env_steps"] + 300
    train(load_config(SAC_SMALL + [f"--total_env_steps={more}", f"--logdir={logdir}", "--resume"]))
    assert RunDir(logdir).read_events("replay_refill")[-1]["reason"] == "not saved"


def test_dqn_through_real_actors(tmp_path):
    """Ape-X DQN through actor processes: prioritised replay fed by the actors, one
    update per 4 items past the fill, priorities written back (their statistics move
    off the initial 1)."""
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path / "dqn")
    record = train(load_config([
        "--agent=dqn", "--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=4",
        "--segment_length=8", "--log_interval_s=0.5", "--total_env_steps=2500",
        "--dqn.min_fill=500", "--dqn.capacity=4096", "--dqn.batch_size=32",
        "--dqn.replay_ratio=8", "--dqn.hidden_sizes", "16", "16", f"--logdir={logdir}"]))
    assert record["policy_version"] > 0
    last = [r for r in _records(logdir) if "replay/priority_max" in r][-1]
    assert last["replay/priority_max"] != pytest.approx(1.0)
    assert "loss" in last and last["replay/size"] > 500


# -- buffer processes (placement "process") --------------------------------------------
DQN_SMALL = ["--agent=dqn", "--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=4",
             "--segment_length=8", "--log_interval_s=0.5", "--dqn.min_fill=500",
             "--dqn.capacity=4096", "--dqn.batch_size=32", "--dqn.replay_ratio=8",
             "--dqn.hidden_sizes", "16", "16"]


def _buffer_process_config(tmp_path, shards: int) -> str:
    path = tmp_path / "buffers.toml"
    path.write_text(
        "[dataflow]\n"
        'actors = [{name = "actors", count = 2, inference_stream = "inference", '
        'sample_stream = "samples"}]\n'
        'policy_workers = [{name = "policy", inference_stream = "inference", policy = "default"}]\n'
        'trainers = [{name = "trainer", sample_stream = "samples", policy = "default"}]\n'
        f'buffers = [{{name = "replay", sample_stream = "samples", placement = "process", '
        f"count = {shards}}}]\n")
    return str(path)


def test_dqn_with_buffer_processes_then_resume(tmp_path):
    """Ape-X DQN with its replay in two buffer processes (shards; actor process i feeds
    shard i % 2) through real actor processes: the trainer learns from batches they
    serve, priorities go back (their statistics move off 1), the replay ratio holds and
    the buffers' metrics reach metrics.jsonl. A resume (no --save_replay: refused with
    buffer processes) refills the buffers and learns on."""
    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path / "dqn")
    flags = DQN_SMALL + [f"--config={_buffer_process_config(tmp_path, 2)}", f"--logdir={logdir}"]
    record = train(load_config(flags + ["--total_env_steps=2500"]))
    assert record["policy_version"] > 0 and record["env_steps"] >= 2500
    last = [r for r in _records(logdir) if "replay/priority_max" in r][-1]
    assert last["replay/priority_max"] != pytest.approx(1.0)
    assert "loss" in last and last["replay/size"] > 250  # per shard: 500 / 2 to fill
    for shard in (0, 1):  # both shards are fed (each actor process feeds one)
        assert max(r.get(f"replay/shard_{shard}/size", 0) for r in _records(logdir)) > 250
    for key in ("replay/inserts_per_s", "replay/samples_per_s", "replay/ratio",
                "staleness_mean", "episode_return_mean"):
        assert key in last, key
    assert 0 < last["replay/ratio"] < 16  # about 8 per item past the fill (interval means)
    assert "dropped_status" not in record  # every buffer_status passed its schema

    with pytest.raises(ValueError, match="does not support --save_replay"):
        train(load_config(flags + ["--total_env_steps=3000", "--resume", "--save_replay"]))
    record2 = train(load_config(flags + [f"--total_env_steps={record['env_steps'] + 1500}",
                                         "--resume"]))
    assert RunDir(logdir).read_events("replay_refill")[-1]["reason"] == "buffer processes"
    assert record2["policy_version"] > record["policy_version"]


def test_a_killed_buffer_process_is_restarted(tmp_path):
    """SIGKILL the buffer process mid-run: the launcher restarts it on the same ports,
    the actors and the trainer reconnect by themselves, it refills and learning goes
    on (counted: buffer_restarts); no child process is left at the end."""
    import threading  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    from jaxsrl.experiment.config import load_config  # noqa: PLC0415
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path / "dqn")
    cfg = load_config(DQN_SMALL + [f"--config={_buffer_process_config(tmp_path, 1)}",
                                   f"--logdir={logdir}", "--total_env_steps=4000"])
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(train(cfg)), daemon=True)
    thread.start()

    def buffers():
        return [p for p in psutil.Process().children(recursive=True)
                if "jaxsrl.workers.buffer" in " ".join(p.cmdline())]

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            r.get("policy_version", 0) > 0 for r in _records_or_none(logdir)):
        time.sleep(0.2)
    (victim,) = buffers()
    victim_name = json.loads(victim.cmdline()[-1])["name"]
    victim.kill()
    killed_at = max(r.get("policy_version", 0) for r in _records_or_none(logdir))
    thread.join(300)
    assert not thread.is_alive() and out["env_steps"] >= 4000
    (restart,) = RunDir(logdir).read_events("buffer_restart")
    assert restart["buffer"] == victim_name
    final = _records(logdir)[-1]
    assert final["buffer_restarts"] == 1
    assert final["policy_version"] > killed_at  # learning went on from the new process
    assert buffers() == []


def _records_or_none(logdir):
    try:
        return _records(logdir)
    except (FileNotFoundError, ValueError):  # not there yet, or a line being written
        return []

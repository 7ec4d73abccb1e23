"""ChildSupervisor's rules (jaxsrl/launch/children.py) with fake child processes: no
sockets, no threads; time is the ``now`` handed to ``watch``."""

import dataclasses
import logging
import types

import pytest

from jaxsrl.experiment import events
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.children import Child, ChildSupervisor
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.streams import wire
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.status import BOOLEAN, FINITE, INTEGER, TEXT, StatusSchema, list_of, map_of

SCHEMA = StatusSchema("fake_status", "fake", {
    "fake": TEXT, "run": INTEGER, "serving": BOOLEAN, "heartbeat_age_s": FINITE,
    "counters": map_of(TEXT, INTEGER), "seen": list_of(INTEGER)})
TIMEOUT_S, LIMIT_S = 10.0, 100.0


@dataclasses.dataclass
class FakeChild(Child):
    name: str
    child: ChildProcess


class FakeSupervisor(ChildSupervisor):
    metrics = None

    def _metrics(self, child):
        if self.metrics is None:
            self.metrics = MetricsAccumulator()
        return self.metrics


class FakeProc:
    """A ``subprocess.Popen`` stand-in: running until ``exit`` or ``kill``."""

    pids = iter(range(1000, 10**6))

    def __init__(self):
        self.pid, self.returncode = next(self.pids), None

    def poll(self):
        return self.returncode

    def kill(self):
        self.returncode = -9

    terminate = kill

    def wait(self, timeout=None):
        return self.returncode


@pytest.fixture
def sup(tmp_path):
    procs = []

    def spawner(argv, env, prefix=()):
        procs.append(FakeProc())
        return procs[-1]

    children = [FakeChild(f"fake[{i}]", ChildProcess(
        f"fake[{i}]", {"error_file": str(tmp_path / f"fake_{i}.txt")}, module="nothing",
        spawner=spawner)) for i in range(2)]
    cfg = types.SimpleNamespace(host="127.0.0.1", actor_timeout_s=TIMEOUT_S, max_server_restarts=2)
    s = FakeSupervisor("fake children", "fake child", SCHEMA, children, cfg, ActorTable(), None,
                       logging.getLogger("test.children"))
    s.startup_limit_s = s.now = LIMIT_S
    s.clock = lambda: s.now
    s.start_children("inproc://status")
    return s


def status(c, **meta):
    return SCHEMA.encode({"fake": c.name, "run": c.child.spec["run_id"], "serving": True,
                          "heartbeat_age_s": 0.0, "counters": {}, "seen": []} | meta)


def serve_all(sup, **meta):
    for c in sup.children:
        sup.on_status(status(c, **meta))


def test_children_start_with_the_status_address_and_a_run_id(sup):
    for c in sup.children:
        assert c.child.spec["status_address"] == "inproc://status"
        assert isinstance(c.child.spec["run_id"], int) and c.child.proc.poll() is None


def test_startup_limit_restarts_a_child_that_never_serves(sup):
    first, second = sup.children
    second.child.started_at = first.child.started_at + 2  # the second started later
    pids = [first.child.proc.pid, second.child.proc.pid]
    sup.watch(first.child.started_at + LIMIT_S)
    assert sup.restarts == 0
    sup.watch(first.child.started_at + LIMIT_S + 1)
    assert sup.restarts == 1 and first.child.proc.pid != pids[0]
    assert second.child.proc.pid == pids[1]


def test_silence_counts_once_a_child_serves(sup):
    """A child that reported while compiling (not serving) and then went quiet is left to
    the startup limit, not the silence rule (a buffer compiles without reporting)."""
    t0 = sup.now
    serve_all(sup, serving=False)
    sup.watch(t0 + 5 * TIMEOUT_S)
    assert sup.restarts == 0 and not sup.ready.is_set()
    serve_all(sup)
    sup.watch(t0 + TIMEOUT_S / 2)
    assert sup.ready.is_set() and sup.serving.is_set() and sup.restarts == 0
    sup.now = t0 + TIMEOUT_S
    sup.on_status(status(sup.children[1]))  # only the second keeps reporting
    sup.watch(t0 + TIMEOUT_S * 1.5)
    assert sup.restarts == 1 and not sup.serving.is_set()
    assert sup.children[0].serving is False  # restarted: its state is reset


def test_a_stalled_loop_counts_as_silence(sup, tmp_path):
    serve_all(sup)
    sup.on_status(status(sup.children[0], heartbeat_age_s=TIMEOUT_S + 1))  # an int is fine too
    assert sup.children[0].heartbeat == sup.now - TIMEOUT_S - 1
    sup.on_status(status(sup.children[1], heartbeat_age_s=3))
    sup.watch(sup.now)
    assert sup.restarts == 1 and sup.children[1].serving


def test_heartbeat_is_the_oldest_childs_and_serving_follows_the_children(sup):
    sup.on_status(status(sup.children[0], heartbeat_age_s=2.0))
    sup.watch(sup.now)
    assert not sup.serving.is_set() and not sup.ready.is_set()
    sup.on_status(status(sup.children[1], heartbeat_age_s=5.0))
    sup.watch(sup.now)
    assert sup.serving.is_set() and sup.heartbeat == sup.now - 5.0


def test_restart_budget_then_the_run_stops_naming_the_child(sup, tmp_path):
    path = tmp_path / "run_events.jsonl"
    with events.recording(str(path)):
        for n in (1, 2):
            c = sup.children[n - 1]
            old_run, old_pid = c.child.spec["run_id"], c.child.proc.pid
            c.child.proc.returncode = 1
            sup.watch(sup.now)
            assert sup.restarts == n and c.child.proc.pid != old_pid
            assert c.child.spec["run_id"] != old_run  # statuses of the killed run are ignored
        (tmp_path / "fake_0.txt").write_text("ValueError: bad thing\nTraceback...\n")
        sup.children[0].child.proc.returncode = -9
        with pytest.raises(RuntimeError, match=r"^fake child fake\[0\] \(pid \d+\) killed by "
                           r"SIGKILL: ValueError: bad thing; fake children were restarted 2 "
                           r"times in this run \(max_server_restarts=2\), giving up$"):
            sup.watch(sup.now)
    assert sup.metrics.counter("fake_restarts") == 2
    records = events.read_events(str(path), "fake_restart")
    assert [{k: r[k] for k in ("fake", "reason", "error", "restart")} for r in records] == [
        {"fake": "fake[0]", "reason": "exit code 1", "error": "", "restart": 1},
        {"fake": "fake[1]", "reason": "exit code 1", "error": "", "restart": 2}]


def test_error_file_of_a_previous_run_is_removed_at_a_restart(sup, tmp_path):
    (tmp_path / "fake_1.txt").write_text("RuntimeError: old\n")
    sup.children[1].child.proc.returncode = 1
    sup.watch(sup.now)
    assert not (tmp_path / "fake_1.txt").exists()


def test_statuses_of_another_run_or_child_are_ignored(sup):
    c = sup.children[0]
    sup.on_status(status(c, run=c.child.spec["run_id"] + 1))
    sup.on_status(status(c, fake="fake[9]"))
    assert not c.serving and c.last_status == 0.0
    assert sup._metrics(c).counter("dropped_status") == 0


def test_malformed_status_is_dropped_counted_and_warned(sup, caplog):
    c = sup.children[0]
    with caplog.at_level(logging.WARNING, "test.children"):
        sup.on_status([b"not msgpack \xc1"])
        sup.on_status(status(c)[:1] + [b"x"])
        meta = wire.decode(status(c)).meta | {"serving": "yes"}
        sup.on_status(wire.encode("fake_status", {}, meta))
    assert not c.serving and sup._metrics(c).counter("dropped_status") == 3
    assert "fake children: dropped a malformed status: header is not valid msgpack" in caplog.text
    assert sup.drop_log.recent()[-1].reason == "fake_status: 'serving' is not true or false: 'yes'"


def test_counters_add_their_increase_and_seen_actors_are_marked(sup):
    sup.table.register(7, 1)
    registered = sup.table.last_seen(7)
    c = sup.children[0]
    sup.on_status(status(c, counters={"dropped_requests": 3}, seen=[7, 99]))
    sup.on_status(status(c, counters={"dropped_requests": 5}))
    assert sup.metrics.counter("dropped_requests") == 5
    assert sup.table.last_seen(7) > registered
    c.child.proc.returncode = 1  # a restarted child counts from 0 again
    sup.watch(sup.now)
    sup.on_status(status(c, counters={"dropped_requests": 2}))
    assert sup.metrics.counter("dropped_requests") == 7

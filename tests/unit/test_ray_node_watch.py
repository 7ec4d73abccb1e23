"""NodeWatch: a node_lost event names the processes of the run lost with a Ray node
(a fake node table; no Ray cluster)."""

import logging

from jaxsrl.experiment import events
from jaxsrl.launch.ray_nodes import NodeWatch


class FakeTable:
    def __init__(self, *alive):
        self.alive = set(alive)
        self.known = set(alive)

    def __call__(self):
        return [{"NodeID": n, "Alive": n in self.alive} for n in sorted(self.known)]


def test_node_lost_names_the_processes_that_ran_there(tmp_path, caplog):
    table = FakeTable("A", "B")
    watch = NodeWatch(poll_s=3600, nodes=table)  # no polling thread turn during the test
    watch.placed("A", "10.0.0.2", 11, "jaxsrl.workers.actor", 0)
    watch.placed("A", "10.0.0.2", 12, "jaxsrl.workers.actor", 1)
    watch.placed("A", "10.0.0.2", 13, "jaxsrl.workers.actor", 2)
    watch.placed("B", "10.0.0.3", 21, "jaxsrl.workers.inference", None)
    watch.ended("A", 13)  # exited by itself before the loss: not lost with the node
    path = str(tmp_path / "run_events.jsonl")
    with events.recording(path), caplog.at_level(logging.WARNING, logger="jaxsrl"):
        assert watch.check() == []
        assert not watch.is_lost("A")
        table.alive.discard("A")
        assert watch.is_lost("A") and not watch.is_lost("B")
        assert watch.check() == ["A"]
        assert watch.check() == []  # once per node
    [event] = events.read_events(path, "node_lost")
    assert (event["node_id"], event["node_ip"]) == ("A", "10.0.0.2")
    assert event["processes"] == [
        {"module": "jaxsrl.workers.actor", "actor_id": 0, "pid": 11},
        {"module": "jaxsrl.workers.actor", "actor_id": 1, "pid": 12}]
    assert ("Ray node 10.0.0.2 (node id A) left the cluster with 2 process(es) of this run: "
            "jaxsrl.workers.actor (actor_id 0, pid 11), jaxsrl.workers.actor (actor_id 1, pid 12)"
            in caplog.text)
    assert watch.lost == {"A": "10.0.0.2"}


def test_a_node_unknown_to_the_cluster_is_lost_and_a_disconnected_one_is_not():
    table = FakeTable("A")
    watch = NodeWatch(poll_s=3600, nodes=table)
    watch.placed("B", "10.0.0.3", 5, "jaxsrl.workers.actor", 0)
    assert watch.is_lost("B")  # not in the table (removed from it)
    assert NodeWatch(nodes=lambda: None).is_lost("B") is False  # not connected: no verdict
    assert NodeWatch(nodes=lambda: 1 / 0).is_lost("B") is False  # unreadable: no verdict
    watch.placed("", "", -1, "jaxsrl.workers.actor", 1)  # a host that died starting: not tracked
    assert watch.check() == ["B"]

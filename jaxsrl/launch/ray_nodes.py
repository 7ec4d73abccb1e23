"""Lost Ray nodes: which processes of a run went down with a node, as a ``node_lost`` event.

A Ray node that dies (its machine, its raylet, its network) takes the processes it
hosts with it. Their handles (:class:`~jaxsrl.launch.ray_spawner.RayProcess`) see the
host die at once, but Ray declares the *node* dead only after missing its health
checks (by default ~15-30 s later). :class:`NodeWatch` keeps, per node, the processes
of this run placed there, polls the cluster's node table every ``poll_s`` seconds from
a daemon thread, and records one ``node_lost`` event per node that left the cluster
while it hosted some of them (``LOGDIR/run_events.jsonl``, see
:mod:`jaxsrl.experiment.events`)::

    {"event": "node_lost", "node_id": "b6e9...", "node_ip": "10.231.5.12",
     "processes": [{"module": "jaxsrl.workers.actor", "actor_id": 1, "pid": 4242}], ...}

The launcher restarts the lost processes itself (they read as killed by SIGKILL), on
nodes that have the resources they ask for.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from jaxsrl.experiment import events

log = logging.getLogger("jaxsrl")

NODE_POLL_S = 2.0  # how often the node table is read while some process is placed


def _ray_nodes() -> list[dict] | None:
    """Ray's node table (``ray.nodes()``), or ``None`` when not connected to a cluster."""
    import ray  # noqa: PLC0415  (Ray: optional; only imported under --launcher=ray)
    if not ray.is_initialized():
        return None
    return ray.nodes()


class NodeWatch:
    """Processes of a run per Ray node; a ``node_lost`` event when a node leaves.

    Args:
      poll_s: seconds between reads of the node table (the daemon thread, started by
        the first :meth:`placed`).
      nodes: returns the node table, a list of ``{"NodeID", "Alive", ...}`` dicts as
        ``ray.nodes()`` does, or ``None`` once disconnected (the thread then ends);
        default ``ray.nodes()``.
    """

    def __init__(self, poll_s: float = NODE_POLL_S,
                 nodes: Callable[[], list[dict] | None] = _ray_nodes):
        self.poll_s, self._nodes = poll_s, nodes
        self._lock = threading.Lock()
        self._procs: dict[str, dict[int, dict]] = {}  # node id -> pid -> what runs there
        self._ips: dict[str, str] = {}
        self.lost: dict[str, str] = {}  # node id -> its IP, for nodes found lost
        self._thread: threading.Thread | None = None

    def placed(self, node_id: str, node_ip: str, pid: int, module: str,
               actor_id: Any = None) -> None:
        """Process ``pid`` (``python -m module``, actor ``actor_id`` if an actor) runs on
        node ``node_id``."""
        if not node_id:
            return
        with self._lock:
            self._procs.setdefault(node_id, {})[pid] = {"module": module, "actor_id": actor_id,
                                                        "pid": pid}
            self._ips[node_id] = node_ip
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ray-node-watch", daemon=True)
                self._thread.start()

    def ended(self, node_id: str, pid: int) -> None:
        """Process ``pid`` exited by itself (its host answered): not lost with a node."""
        with self._lock:
            self._procs.get(node_id, {}).pop(pid, None)

    def is_lost(self, node_id: str) -> bool:
        """Whether node ``node_id`` is dead or unknown to the cluster now (reads the
        node table; ``False`` when it cannot be read)."""
        if node_id in self.lost:
            return True
        try:
            table = self._nodes()
        except Exception:  # noqa: BLE001  (GCS unreachable: no verdict)
            return False
        return table is not None and not any(n["NodeID"] == node_id and n["Alive"] for n in table)

    def check(self, table: list[dict] | None = None) -> list[str]:
        """Record ``node_lost`` for every node that hosted a process of this run and is
        not alive in ``table`` (default: read the node table now). Returns their ids."""
        table = self._nodes() if table is None else table
        if table is None:
            return []
        alive = {n["NodeID"] for n in table if n["Alive"]}
        with self._lock:
            gone = [(nid, self._ips.get(nid, ""), sorted(procs.values(), key=lambda p: p["pid"]))
                    for nid, procs in self._procs.items() if procs and nid not in alive]
            for nid, ip, _ in gone:
                self.lost[nid] = ip
                del self._procs[nid]
        for nid, ip, procs in gone:
            names = ", ".join(_describe(p) for p in procs)
            events.emit(log, logging.WARNING, "node_lost",
                        {"node_id": nid, "node_ip": ip, "processes": procs},
                        "Ray node %s (node id %s) left the cluster with %d process(es) of this "
                        "run: %s; they are restarted where the cluster has room", ip, nid,
                        len(procs), names)
        return [nid for nid, _, _ in gone]

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_s)
            try:
                table = self._nodes()
                if table is None:  # disconnected: the run is over
                    with self._lock:
                        self._thread = None
                    return
                self.check(table)
            except Exception as exc:  # noqa: BLE001  (a failed read: try again next time)
                log.debug("reading Ray's node table failed: %s", exc)


def _describe(proc: dict) -> str:
    """``"jaxsrl.workers.actor (actor_id 1, pid 4242)"``."""
    actor = "" if proc["actor_id"] is None else f"actor_id {proc['actor_id']}, "
    return f"{proc['module']} ({actor}pid {proc['pid']})"

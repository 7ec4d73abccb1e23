"""Hostile messages at every port a live run binds (``tests/system/test_hostile_ports.py``,
``scripts/attack_ports.py``).

:func:`attack_run` starts ``scripts/train.py`` as a child process, waits until its
process tree listens on TCP ports, and sends each port one message of every class of
:data:`MESSAGES` (the issue-42 packet first) from a PUSH and from a DEALER socket (a
socket type the port does not take is refused by ZeroMQ's handshake), then raw bytes
that are no ZeroMQ greeting. It returns the run's exit code, its log, its last metrics
record and the ports it attacked.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import NamedTuple

import msgpack
import psutil
import zmq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DROPPED = ("dropped_status", "dropped_segments", "stale_run_segments_dropped",
           "dropped_requests", "stale_run_requests_dropped", "dropped_buffer_messages")


def _h(header: dict) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def _v(kind="inline_status", meta=None, arrays=()):
    return {"v": 1, "kind": kind, "meta": {} if meta is None else meta, "arrays": list(arrays)}


#: one message of each class: (name, frames)
MESSAGES: list[tuple[str, list]] = [
    ("issue 42: dtype a list", [_h(_v(arrays=[["obs", [[1]], [1]]])), b"\0" * 4]),
    ("dtype a map", [_h(_v(arrays=[["obs", {"a": 1}, [1]]])), b"\0" * 4]),
    ("name a list", [_h(_v(arrays=[[["obs"], "int8", [1]]])), b"\0"]),
    ("shape a map", [_h(_v(arrays=[["obs", "int8", {"a": 1}]])), b"\0"]),
    ("version true", [_h({**_v(), "v": True})]),
    ("version a list", [_h({**_v(), "v": [1]})]),
    ("kind a map", [_h({**_v(), "kind": {"k": 1}})]),
    ("meta a list", [_h({**_v(), "meta": [1, 2]})]),
    ("meta int keys", [msgpack.packb({"v": 1, "kind": "x", "meta": {1: 2}, "arrays": []})]),
    ("arrays a map", [_h({**_v(), "arrays": {"a": 1}})]),
    ("header a list", [_h([1, 2, 3])]),
    ("header missing fields", [_h({"v": 1})]),
    ("deep nesting", [b"\x91" * 5000 + b"\x00"]),
    ("huge shape", [_h(_v(arrays=[["obs", "float32", [2**39, 2**39]]])), b""]),
    ("negative dim", [_h(_v(arrays=[["obs", "float32", [-1]]])), b""]),
    ("bool dim", [_h(_v(arrays=[["obs", "float32", [True]]])), b"\0" * 4]),
    ("wrong buffer size", [_h(_v(arrays=[["obs", "float32", [4]]])), b"\0" * 15]),
    ("missing frame", [_h(_v(arrays=[["obs", "float32", [4]]]))]),
    ("extra frame", [_h(_v()), b"junk"]),
    ("random bytes", [os.urandom(64), os.urandom(8)]),
    ("empty frame", [b""]),
    ("inline_status ill-typed", [_h(_v(meta={"actor": 0, "run": [1], "versions": "x", "dropped": 3}))]),
    ("server_status ill-typed", [_h(_v("server_status", meta={"server": ["a"], "run": 1.5}))]),
    ("segment ill-typed meta", [_h(_v("segment", meta={"actor": 999, "run": 1, "env_steps": [1]},
                                      arrays=[["reward", "float32", [1, 1]]])), b"\0" * 4]),
    ("act ill-typed meta", [_h(_v("act", meta={"actor": "0", "run": {}, "group": -1},
                                  arrays=[["obs", "float32", [1, 4]]])), b"\0" * 16]),
    ("sample ill-typed", [_h(_v("sample", meta={"req": "x", "version": [1]}))]),
    ("priorities wrong arrays", [_h(_v("priorities", meta={"run": 1, "version": 0},
                                       arrays=[["ids", "float64", [2]]])), b"\0" * 16]),
    ("actor_runs ill-typed", [_h(_v("actor_runs", meta={"runs": [[1, "x"], {"a": 1}, None]}))]),
]


def listening_ports(pid: int) -> set[int]:
    """TCP ports in LISTEN state of ``pid`` and its descendants."""
    ports = set()
    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return ports
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else \
                p.connections(kind="tcp")
        except psutil.Error:
            continue
        ports |= {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
    return ports


def attack(ports, host: str = "127.0.0.1", messages=MESSAGES, rounds: int = 1) -> int:
    """Send every message to every port (PUSH and DEALER), then raw bytes; returns the
    number of messages sent."""
    ctx = zmq.Context.instance()
    sent = 0
    for port in sorted(ports):
        for kind in (zmq.PUSH, zmq.DEALER):
            s = ctx.socket(kind)
            s.setsockopt(zmq.LINGER, 2000)
            s.setsockopt(zmq.SNDTIMEO, 2000)
            s.connect(f"tcp://{host}:{port}")
            for _ in range(rounds):
                for _, frames in messages:
                    try:
                        s.send_multipart(frames)
                        sent += 1
                    except zmq.Again:  # handshake refused (another socket type): nothing to send to
                        break
            s.close()
        try:
            with socket.create_connection((host, port), timeout=2) as raw:
                raw.sendall(os.urandom(256))
        except OSError:
            pass
    return sent


class Outcome(NamedTuple):
    code: int
    log: str
    last: dict
    ports: set


def attack_run(args: list[str], logdir: str, timeout_s: float = 420, rounds: int = 1,
               settle_s: float = 3.0, env: dict | None = None, ready_line: str = "") -> Outcome:
    """Run ``scripts/train.py args --logdir=logdir``; once it logs metrics (and
    ``ready_line``, e.g. ``buffer processes serving``: children bind later), attack every
    port its process tree listens on when no new one has appeared for ``settle_s``; wait
    for the run to end."""
    log_path = os.path.join(os.path.dirname(logdir.rstrip("/")) or ".",
                            os.path.basename(logdir.rstrip("/")) + ".log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts", "train.py"), *args,
                                 f"--logdir={logdir}"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})
    ports: set = set()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            ports = listening_ports(proc.pid)
            if ports and os.path.exists(os.path.join(logdir, "metrics.jsonl")) and (
                    not ready_line or ready_line in open(log_path, errors="replace").read()):
                break
            time.sleep(0.2)
        stable_since, settle_deadline = time.monotonic(), time.monotonic() + 60
        while time.monotonic() - stable_since < settle_s and time.monotonic() < settle_deadline:
            time.sleep(0.2)
            now = listening_ports(proc.pid)
            if now - ports:
                stable_since = time.monotonic()
            ports |= now
        if proc.poll() is None:
            attack(ports, rounds=rounds)
        code = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with open(log_path, errors="replace") as f:
        text = f.read()
    last: dict = {}
    path = os.path.join(logdir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    last.update(json.loads(line))
                except ValueError:
                    pass
    return Outcome(code, text, last, ports)


def dropped(last: dict) -> dict:
    """The run's ``dropped_*`` counters (non-zero ones)."""
    return {k: last[k] for k in DROPPED if last.get(k)}

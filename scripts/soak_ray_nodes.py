"""Soak test across Ray nodes: train for N minutes on a multi-node cluster, watch every process's RSS.

    sudo PYTHONPATH=.:tests python scripts/soak_ray_nodes.py --minutes=20   # head + 2 workers
    sudo PYTHONPATH=.:tests python scripts/soak_ray_nodes.py --minutes=3 --warmup_minutes=1 -- --env=Acrobot-v1

:mod:`scripts.soak`'s measurement on the namespace cluster of the multi-node tests
(``tests/ray_netns_cluster.py``: a Ray head and ``--workers`` worker nodes, each in its
own network namespace with its own address, started with ``ray start``; needs root and
iproute2). The run (``scripts/train.py --launcher=ray --ray_address=HEAD:6379``, the
learner and inference on the head, ``--actors_per_node`` actors on each worker node,
scripts/soak.py's small CartPole config with as many environments in all, extra flags
after ``--``) is started in the head's namespace with an endless step budget. Every
``--interval_s`` the resident set size of each process of each node is sampled, by
kind: the driver, the accelerator process (learner + inference), the actors, their Ray
process hosts, and Ray's daemons (``gcs_server``, ``raylet``, agents, monitors; idle
pooled Ray workers come and go and are not followed); the list is printed whenever it
changes. After ``--minutes`` the driver
gets SIGTERM; the stop must be clean (exit code 130, no process of the run left on any
node). The report (growth per process, exit code 0 if every one grew less than
``--max_growth``) is printed and saved as ``LOGDIR/soak.json`` as by ``scripts/soak.py``.
The cluster and its namespaces are torn down at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

import psutil

from soak import DEFAULT_TRAIN_ARGS, REPO_ROOT, finish, parse_args, sample_then_stop, warmup_seconds

try:  # the namespace cluster of the tests
    from ray_netns_cluster import PLACEMENT, Cluster, cmdlines, ray_cluster, ray_env
except ImportError as exc:
    raise SystemExit(f"soak_ray_nodes.py: {exc}: run it with the tests' helpers on the path, "
                     "PYTHONPATH=.:tests python scripts/soak_ray_nodes.py ...") from None

ENVS_IN_ALL = 32  # scripts/soak.py's 2 actors x 16 environments, spread over the actors
RAY_BINARIES = ("gcs_server", "raylet")  # Ray's daemons that are programs of their own
# Ray's Python daemons by a piece of their command line (script, module or process
# title), and the name they are reported under.
RAY_SCRIPTS = [("ray::DashboardAgent", "dashboard agent"), ("ray::RuntimeEnvAgent", "runtime_env agent"),
               ("log_monitor.py", "log_monitor"), ("autoscaler/_private/monitor.py", "monitor"),
               ("dashboard/dashboard.py", "dashboard"), ("ray.util.client.server", "client server")]


def _actor_id(cmd: list[str]) -> str:
    try:
        return str(json.loads(cmd[-1])["actor_id"])
    except (ValueError, KeyError, IndexError):
        return "?"


def _role(proc: psutil.Process, cmd: list[str], driver_pid: int) -> str | None:
    """What the process is (``None``: not followed)."""
    line = " ".join(cmd)
    if proc.pid == driver_pid:
        return "driver"
    if "jaxsrl.workers.actor" in line:
        return f"actor{_actor_id(cmd)}"
    if "AcceleratorHost" in line:
        return "learner+inference"
    if "ProcessHost" in line:  # named after the process it hosts
        with contextlib.suppress(psutil.Error):
            for child in proc.children():
                return f"host of actor{_actor_id(child.cmdline())}"
        return None
    program = os.path.basename(cmd[0]) if cmd else ""
    if program in RAY_BINARIES:
        return program
    named = next((name for needle, name in RAY_SCRIPTS if needle in line), None)
    if named or "/ray/" not in line or "default_worker.py" in line or line.startswith("ray::"):
        return named  # pooled Ray workers (ray::IDLE) come and go: not followed
    script = next((a for a in cmd if a.endswith(".py")), cmd[0])  # another Ray daemon
    return os.path.basename(script).removesuffix(".py")


def _sample(cluster: Cluster, names: dict, driver_pid: int) -> dict:
    """``{"<node> <kind>": (pid, rss_bytes)}`` of the followed processes of every node."""
    out = {}
    for node in cluster.nodes:
        for pid in sorted(cmdlines(node.host.netns)):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                role = _role(proc, proc.cmdline(), driver_pid)
                if role is not None:
                    key = f"{names[node.host.ip]} {role}"
                    while key in out:  # two of a kind on one node
                        key += "'"
                    out[key] = (pid, proc.memory_info().rss)
    return out


def _leftovers(cluster: Cluster, logdir: str) -> list[str]:
    """Processes of the run still alive on some node (``node: command``)."""
    return [f"{node.host.ip}: {cmd[:120]}" for node in cluster.nodes
            for cmd in cmdlines(node.host.netns).values()
            if logdir in cmd or "ProcessHost" in cmd or "AcceleratorHost" in cmd]


def _more_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="Ray worker nodes")
    parser.add_argument("--actors_per_node", type=int, default=2, help="actors on each worker node")


def main(argv=None) -> int:
    args, extra = parse_args(argv, __doc__, _more_options)
    logdir = os.path.abspath(args.logdir or os.path.join(
        REPO_ROOT, "runs", time.strftime("soak-ray-%Y%m%d-%H%M%S")))
    actors = args.workers * args.actors_per_node
    train_args = [a for a in DEFAULT_TRAIN_ARGS if not a.startswith(("--num_actors", "--envs_per_actor"))]
    train_args += [f"--num_actors={actors}", f"--envs_per_actor={max(1, ENVS_IN_ALL // actors)}"]
    os.makedirs(logdir, exist_ok=True)
    log_path = os.path.join(logdir, "soak_train.log")
    with ray_cluster(workers=args.workers, head_cpus=3, worker_cpus=args.actors_per_node,
                     actor_slots=args.actors_per_node) as cluster:
        names = {cluster.head.host.ip: "head"} | {
            w.host.ip: f"w{i + 1}" for i, w in enumerate(cluster.workers)}
        cmd = [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *PLACEMENT,
               f"--ray_address={cluster.address}", *train_args, *extra,
               "--total_env_steps=10000000000", f"--logdir={logdir}"]
        print("soak:", " ".join(cmd), flush=True)
        with open(log_path, "w") as log_file:  # `ip netns exec` execs: the pid is the driver's
            proc = subprocess.Popen([*cluster.driver_prefix, *cmd], cwd=REPO_ROOT, env=ray_env(),
                                    stdout=log_file, stderr=subprocess.STDOUT)
        done = sample_then_stop(proc, lambda: _sample(cluster, names, proc.pid), args,
                                log_path, stop_timeout_s=240)
        if done is None:
            return 1
        samples, code, stop_s = done
        deadline = time.monotonic() + 60  # hosts and actors die with their owner
        while (leftovers := _leftovers(cluster, logdir)) and time.monotonic() < deadline:
            time.sleep(1.0)
    report = {"minutes": args.minutes, "warmup_s": warmup_seconds(args),
              "samples": len(samples), "stop_s": round(stop_s, 2), "exit_code": code,
              "leftover_processes": leftovers, "nodes": names, "train_args": cmd[2:]}
    return finish(report, samples, args, logdir, clean=code == 130 and not leftovers)


if __name__ == "__main__":
    sys.exit(main())

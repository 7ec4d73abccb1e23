"""SIGKILL the learner during checkpoint writes, then ``--resume`` (docs/reliability.md).

Each trial starts ``scripts/train.py`` with checkpoints every ``--interval_s`` seconds
and no reachable step budget, waits for a complete checkpoint after the learner's first
update, then SIGKILLs the
launcher (the learner's process; its actors die with it) at a random moment: in half
the trials as soon as Orbax's temporary folder of a write (``*.orbax-checkpoint-tmp*``)
appears, plus 0-50 ms, in the others after a random 0-3 s. It records what the kill
left (complete steps, temporary folders), then runs ``--resume`` with a budget a little
above the newest complete checkpoint's env steps and checks that

* the resumed run exits 0,
* it resumed from the newest complete checkpoint (its ``resumed`` event names that
  checkpoint's ``policy_version``), never from a partial one.

Usage::

    python scripts/checkpoint_kills.py --trials=20 --root=/tmp/ckpt_kills
    python scripts/checkpoint_kills.py --trials=10 --env=jax:tests.jax_cartpole:make  # device actors

Prints one line per trial and a summary; exits 1 if any trial failed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--segment_length=16", "--batch_segments=8", "--ppo.hidden_sizes", "16", "16",
         "--ppo.num_minibatches=2", "--ppo.num_epochs=1", "--log_interval_s=1"]
ACTORS = ["--num_actors=2", "--envs_per_actor=4"]  # actor processes (not device actors)
DEVICE_ENVS = ("jax:", "gymnax:", "brax:", "jaxmarl:")  # device actors: no actor processes


def complete_steps(policy_dir: str) -> list[int]:
    """Finalised checkpoint steps (Orbax renames the temporary folder when complete)."""
    return sorted(int(n) for n in os.listdir(policy_dir) if n.isdigit()) if os.path.isdir(policy_dir) else []


def meta_of(policy_dir: str, step: int) -> dict | None:
    try:
        with open(os.path.join(policy_dir, str(step), "meta", "metadata")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def resumed_versions(logdir: str) -> list[int]:
    out = []
    path = os.path.join(logdir, "run_events.jsonl")
    if os.path.exists(path):
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("event") == "resumed":
                out.append(r.get("version"))
    return out


def trial(i: int, args, rng: random.Random) -> dict:
    logdir = os.path.join(args.root, f"t{i:02d}")
    shutil.rmtree(logdir, ignore_errors=True)
    actors = [] if args.env.startswith(DEVICE_ENVS) else ACTORS
    base = [sys.executable, os.path.join(REPO, "scripts", "train.py"), f"--env={args.env}",
            *SMALL, *actors, f"--logdir={logdir}"]
    policy_dir = os.path.join(logdir, "checkpoints", "default")
    log = open(logdir + ".log", "w")
    proc = subprocess.Popen(base + ["--total_env_steps=1000000000",
                                    f"--checkpoint_interval_s={args.interval_s}"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    how = "during a write" if i % 2 == 0 else "at a random moment"
    deadline = time.monotonic() + args.timeout_s
    try:
        while not [s for s in complete_steps(policy_dir) if s > 0]:  # the learner updated
            if proc.poll() is not None or time.monotonic() > deadline:
                return {"trial": i, "ok": False, "why": f"no checkpoint after an update (exit {proc.poll()})"}
            time.sleep(0.05)
        if i % 2 == 0:  # kill while Orbax writes: its temporary folder exists
            while not glob.glob(os.path.join(policy_dir, "*.orbax-checkpoint-tmp*")):
                if proc.poll() is not None or time.monotonic() > deadline:
                    return {"trial": i, "ok": False, "why": "no write seen"}
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.05))
        else:
            time.sleep(rng.uniform(0, 3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    time.sleep(0.5)  # actors die with the launcher (PR_SET_PDEATHSIG)
    steps = complete_steps(policy_dir)
    partial = [os.path.basename(p) for p in glob.glob(os.path.join(policy_dir, "*tmp*"))]
    newest = meta_of(policy_dir, steps[-1]) if steps else None
    if newest is None:
        return {"trial": i, "ok": False, "why": f"newest complete step {steps[-1:]} has no meta"}
    budget = newest["env_steps"] + args.more_steps
    with open(logdir + ".resume.log", "w") as rlog:
        code = subprocess.call(base + ["--resume", f"--total_env_steps={budget}",
                                       f"--checkpoint_interval_s={args.interval_s}"],
                               cwd=REPO, stdout=rlog, stderr=subprocess.STDOUT,
                               timeout=args.timeout_s)
    resumed = resumed_versions(logdir)
    ok = code == 0 and resumed[:1] == [newest["policy_version"]]
    out = {"trial": i, "ok": ok, "kill": how, "complete_steps": steps, "partial": partial,
           "newest_version": newest["policy_version"], "resumed_from": resumed[:1],
           "resume_exit": code}
    if not ok:
        out["why"] = open(logdir + ".resume.log").read()[-1500:]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--root", default="/tmp/jaxsrl_checkpoint_kills")
    p.add_argument("--interval_s", type=float, default=0.5)
    p.add_argument("--more_steps", type=int, default=2000)
    p.add_argument("--timeout_s", type=float, default=600)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.root, exist_ok=True)
    rng = random.Random(args.seed)
    results = []
    for i in range(args.trials):
        r = trial(i, args, rng)
        results.append(r)
        print(json.dumps(r), flush=True)
    during = [r for r in results if r.get("kill") == "during a write"]
    left_partial = sum(bool(r.get("partial")) for r in results)
    ok = sum(r["ok"] for r in results)
    print(f"summary: env={args.env} trials={len(results)} resumed_ok={ok} "
          f"killed_during_write={len(during)} left_partial_folder={left_partial}", flush=True)
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

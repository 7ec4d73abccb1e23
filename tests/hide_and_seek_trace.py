"""A compact trace of seeded random hide-and-seek episodes, through the public API only.

``trace(run)`` steps one of ``RUNS`` with seeded random actions and returns a dict of
NumPy arrays: per step, every observation key reduced to ``N_PROJ`` fixed random
projections per agent (float64; any change to any element moves them), the 0/1 masks
and the lidar of the first agent exactly, rewards, truncations, ``in_prep_phase``,
``discard_episode``, ``held`` and ``lock_team``, and each episode's ``episode_stats``.
``digest(arrays)`` is a SHA-256 of the exact bytes (equal only on the same platform).

The reference fixture ``tests/data/hide_and_seek_reference.npz`` was recorded with the
code before issue 19's speed work (commit 9bf0c7a), this file run against a checkout of
that commit (``OLD``) from this one (``NEW``)::

    cd $OLD && PYTHONPATH=$OLD python $NEW/tests/hide_and_seek_trace.py $NEW/tests/data/hide_and_seek_reference.npz

so the file must use nothing but the env's public API.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from jaxsrl.envs.hide_and_seek import make_env

N_PROJ = 3
RUNS = {
    # name: (variant, reset seed, action seed, env steps, overrides)
    "quadrant": ("quadrant", 3, 11, 170, {}),  # 2 episodes of 80 and part of a third
    "full": ("full", 5, 12, 250, {}),  # one episode of 240, then a reset
    "full_extra": ("full", 8, 13, 120, {"extra_obs": True, "horizon": 60}),
}


def _weights(key: str, size: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return np.random.default_rng(seed).standard_normal((size, N_PROJ))


def trace(run: str) -> dict[str, np.ndarray]:
    variant, seed, act_seed, steps, overrides = RUNS[run]
    env = make_env(variant, **overrides)
    cfg = env.config
    n_max, n_obj = cfg.max_agents, cfg.max_boxes + cfg.max_ramps
    rng = np.random.default_rng(act_seed)
    obs, _ = env.reset(seed=seed)
    keys = sorted(env.observation_space(env.possible_agents[0]).spaces)
    rec: dict[str, list] = {k: [] for k in ("n_agents", "reward", "trunc", "in_prep", "discard", "held",
                                             "lock_team", "lidar0", "masks")}
    rec.update({f"proj_{k}": [] for k in keys})
    stats: list[list[float]] = []
    stat_keys: list[str] = []

    def observe(obs, rew=None, trunc=None, infos=None):
        names = list(obs)
        a = len(names)
        rec["n_agents"].append(a)
        for k in keys:
            flat = np.stack([obs[n][k].reshape(-1) for n in names]).astype(np.float64)  # [a, F]
            proj = np.zeros((n_max, N_PROJ))
            proj[:a] = flat @ _weights(k, flat.shape[1])
            rec[f"proj_{k}"].append(proj)
        masks = np.zeros((n_max, sum(obs[names[0]][k].size for k in keys if k.endswith(("_mask", "_present")))),
                         np.uint8)
        masks[:a] = np.stack([np.concatenate([obs[n][k] for k in keys if k.endswith(("_mask", "_present"))])
                              for n in names])
        rec["masks"].append(masks)
        rec["lidar0"].append(obs[names[0]]["lidar"].astype(np.float32))
        pad = np.zeros(n_max)
        r, t, p, dsc = pad.copy(), pad.copy(), pad.copy(), pad.copy()
        if rew is not None:
            r[:a] = [rew[n] for n in names]
            t[:a] = [trunc[n] for n in names]
            p[:a] = [infos[n]["in_prep_phase"] for n in names]
            dsc[:a] = [infos[n]["discard_episode"] for n in names]
        rec["reward"].append(r), rec["trunc"].append(t), rec["in_prep"].append(p), rec["discard"].append(dsc)
        held = np.full(n_max, -2)
        held[:a] = env.held
        lock = np.full(n_obj, -2)
        lt = env.lock_team
        lock[: len(lt)] = lt
        rec["held"].append(held), rec["lock_team"].append(lock)

    observe(obs)
    for _ in range(steps):
        acts = rng.integers(0, [11, 11, 11, 2, 2], size=(len(env.possible_agents), 5))
        obs, rew, _, trunc, infos = env.step({a: acts[i] for i, a in enumerate(env.agents)})
        observe(obs, rew, trunc, infos)
        if not env.agents:
            st = next(iter(infos.values())).get("episode_stats", {})
            stat_keys = sorted(st)
            stats.append([st[k] for k in stat_keys])
            obs, _ = env.reset()
            observe(obs)
    out = {k: np.asarray(v) for k, v in rec.items()}
    out["stats"] = np.asarray(stats, np.float64)
    out["stat_keys"] = np.asarray(stat_keys)
    return out


def digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()


def record(path: str) -> None:
    flat = {}
    for run in RUNS:
        arrays = trace(run)
        flat.update({f"{run}/{k}": v for k, v in arrays.items()})
        flat[f"{run}/sha256"] = np.asarray(digest(arrays))
    np.savez_compressed(path, **flat)


if __name__ == "__main__":
    record(sys.argv[1])

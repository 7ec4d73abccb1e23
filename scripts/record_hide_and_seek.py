"""Record one random-policy hide-and-seek episode as a GIF (or MP4) with imageio.

    python scripts/record_hide_and_seek.py --variant quadrant --out quadrant.gif
    python scripts/record_hide_and_seek.py --variant full --out full.gif --seed 3

MP4 output needs the ``imageio-ffmpeg`` package; GIF works with plain imageio + PIL.
The renderer is a 2-D PIL drawing, so no display or GPU is needed.
"""

from __future__ import annotations

import argparse

import imageio.v2 as imageio
import numpy as np

from jaxsrl.envs.hide_and_seek import make_env


def record(variant: str, out: str, seed: int, fps: float, every: int) -> int:
    """Write the episode to ``out``; returns the number of frames."""
    env = make_env(variant, render_mode="rgb_array")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    frames = [env.render()]
    t = 0
    while env.agents:
        acts = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
        env.step(acts)
        t += 1
        if t % every == 0 or not env.agents:
            frames.append(env.render())
    if out.lower().endswith(".gif"):
        imageio.mimsave(out, frames, duration=1000.0 / fps, loop=0)
    else:
        imageio.mimsave(out, frames, fps=fps)
    return len(frames)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="quadrant", choices=["quadrant", "full"])
    p.add_argument("--out", default=None, help="output .gif or .mp4 (default: <variant>.gif)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fps", type=float, default=13.3, help="frames per second (13.3 = real time)")
    p.add_argument("--every", type=int, default=1, help="keep every n-th step")
    args = p.parse_args()
    out = args.out or f"{args.variant}.gif"
    n = record(args.variant, out, args.seed, args.fps, args.every)
    print(f"wrote {n} frames to {out}")


if __name__ == "__main__":
    main()

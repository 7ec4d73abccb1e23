"""Top-down RGB drawing of a hide-and-seek state with PIL (no display, GL or GPU needed).

Legend: light floor, dark-grey walls; boxes orange, ramps green with a dark bar on
the high edge; hiders blue, seekers red (dimmed while frozen in the preparation
phase), each with a heading tick and a translucent vision cone; a yellow ring
marks a hider seen by some seeker. A locked object gets a thick outline in the
locking team's colour and a small padlock square; a held object a white outline.
The header shows the step and the phase, and on its right a legend of the team
colours ("hiders", "seekers", each beside a dot of its colour).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.layout import Layout
from jaxsrl.envs.hide_and_seek.scene import ramp_vertices

HIDER_RGB, SEEKER_RGB = (40, 90, 230), (225, 60, 45)
TEAM_RGB = (HIDER_RGB, SEEKER_RGB)
BOX_RGB, RAMP_RGB, WALL_RGB, FLOOR_RGB = (230, 160, 60), (70, 170, 90), (70, 70, 70), (236, 234, 224)
CONE_RANGE = 1.5  # m, drawn length of the vision cone (the cone itself is unbounded)


def _rect(cx: float, cy: float, yaw: float, lx: float, ly: float) -> np.ndarray:
    """``[4, 2]`` corners of a rectangle of full sizes (lx, ly) rotated by yaw."""
    c, s = np.cos(yaw), np.sin(yaw)
    local = np.array([[-lx, -ly], [lx, -ly], [lx, ly], [-lx, ly]]) / 2
    return local @ np.array([[c, s], [-s, c]]) + (cx, cy)


def render_topdown(
    cfg: HideAndSeekConfig,
    layout: Layout,
    qpos: np.ndarray,
    visible: np.ndarray,
    lock_team: np.ndarray,
    held: np.ndarray,
    n_hiders: int,
    step: int = 0,
    in_prep: bool = False,
    size: int = 480,
) -> np.ndarray:
    """Draw one state.

    Args:
      qpos: ``[M, 4]`` (x, y, z, yaw) of hiders, seekers, boxes, ramps.
      visible: ``[A, A + O]`` bool visibility (observer rows).
      lock_team: ``[O]`` -1 unlocked, 0 hiders, 1 seekers; ``held``: ``[A]`` object per agent.
    Returns:
      ``[size + 24, size, 3]`` uint8 RGB image (a 24-pixel header on top).
    """
    header = 24
    margin = 0.3
    half = cfg.floor_size / 2
    scale = size / (cfg.floor_size + 2 * margin)

    def px(pts) -> list[tuple[float, float]]:
        pts = np.asarray(pts, np.float64).reshape(-1, 2)
        return [((x + half + margin) * scale, header + (half + margin - y) * scale) for x, y in pts]

    img = Image.new("RGB", (size, size + header), (30, 30, 34))
    draw = ImageDraw.Draw(img, "RGBA")
    draw.rectangle(px([(-half, half), (half, -half)]), fill=FLOOR_RGB)
    for cx, cy, hx, hy, _ in layout.walls:
        draw.rectangle(px([(cx - hx, cy + hy), (cx + hx, cy - hy)]), fill=WALL_RGB)

    a = len(held)
    n_b = len(layout.boxes)
    objs = qpos[a:]
    held_objs = set(int(h) for h in held if h >= 0)
    for k, (x, y, z, yaw) in enumerate(objs):
        if k < n_b:
            lx, ly = layout.box_sizes[k, :2]
            poly = _rect(x, y, yaw, lx, ly)
            draw.polygon(px(poly), fill=BOX_RGB, outline=(120, 80, 20))
        else:
            lx, ly = cfg.ramp_size[:2]
            poly = _rect(x, y, yaw, lx, ly)
            draw.polygon(px(poly), fill=RAMP_RGB, outline=(30, 90, 40))
            high = ramp_vertices(cfg.ramp_size)[[1, 4], :2]  # base corners under the high edge
            c, s = np.cos(yaw), np.sin(yaw)
            edge = high @ np.array([[c, s], [-s, c]]) + (x, y)
            draw.line(px(edge), fill=(20, 70, 30), width=max(2, int(0.08 * scale)))
        if lock_team[k] >= 0:
            draw.polygon(px(poly), outline=TEAM_RGB[lock_team[k]], width=max(2, int(0.06 * scale)))
            (ux, uy), = px([(x, y)])
            r = max(2.0, 0.07 * scale)
            draw.rectangle((ux - r, uy - r, ux + r, uy + r), fill=TEAM_RGB[lock_team[k]])
        if k in held_objs:
            draw.polygon(px(poly), outline=(255, 255, 255), width=2)

    seen = visible[n_hiders:, :n_hiders].any(axis=0) if a > n_hiders else np.zeros(n_hiders, bool)
    half_cone = np.deg2rad(cfg.vision_cone_deg) / 2
    for i in range(a):
        x, y, z, yaw = qpos[i]
        yaw = yaw + np.deg2rad(cfg.facing_offset_deg)  # the agent's front
        frozen = in_prep and i >= n_hiders
        rgb = TEAM_RGB[int(i >= n_hiders)]
        if frozen:
            rgb = tuple(int(0.5 * c + 60) for c in rgb)
        arc = np.linspace(yaw - half_cone, yaw + half_cone, 16)
        cone = [(x, y)] + [(x + CONE_RANGE * np.cos(t), y + CONE_RANGE * np.sin(t)) for t in arc]
        draw.polygon(px(cone), fill=rgb + (40,))
        r = cfg.agent_radius * scale * (1.0 + 0.6 * min(max(z - cfg.agent_radius, 0.0), 1.0))  # bigger when up high
        (ux, uy), = px([(x, y)])
        if i < n_hiders and seen[i]:
            draw.ellipse((ux - r - 4, uy - r - 4, ux + r + 4, uy + r + 4), outline=(250, 210, 0), width=3)
        draw.ellipse((ux - r, uy - r, ux + r, uy + r), fill=rgb, outline=(0, 0, 0))
        tip = px([(x + 1.6 * cfg.agent_radius * np.cos(yaw), y + 1.6 * cfg.agent_radius * np.sin(yaw))])[0]
        draw.line([(ux, uy), tip], fill=(0, 0, 0), width=2)

    phase = "preparation" if in_prep else "seeking"
    n_seen = int(seen.sum())
    draw.text((6, 6), f"step {step}/{cfg.horizon}  {phase}  hiders seen: {n_seen}", fill=(240, 240, 240))
    _team_legend(draw, size, header)
    return np.asarray(img, dtype=np.uint8)


def _team_legend(draw: ImageDraw.ImageDraw, width: int, header: int) -> None:
    """"(dot) hiders  (dot) seekers", right-aligned in the header, dots in team colours."""
    dot, gap = 8, 4
    x = width - 6
    for name, rgb in (("seekers", SEEKER_RGB), ("hiders", HIDER_RGB)):  # right to left
        x -= draw.textlength(name)
        draw.text((x, 6), name, fill=(240, 240, 240))
        x -= gap + dot
        top = (header - dot) / 2
        draw.ellipse((x, top, x + dot, top + dot), fill=rgb)
        x -= 3 * gap

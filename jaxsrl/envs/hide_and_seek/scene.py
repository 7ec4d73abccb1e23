"""MJCF generation for one hide-and-seek layout, and the index map of the compiled model.

Every movable thing (agent, box, ramp) is a body at the origin with four joints:
slide x, slide y, slide z (passive, under gravity: agents can climb ramps and boxes)
and a hinge about z. Hence ``qpos`` reshaped to ``[n_movable, 4]`` reads directly as
``(x, y, z, yaw)`` in world coordinates, and ``qvel`` as ``(vx, vy, vz, wz)``.
Body order: hiders, seekers, boxes, ramps. Agents have three motors (force x,
force y, torque z). Grabbing is a weld equality created inactive, one per (agent, object)
pair; locking limits the object's joints to their current values (manipulation.py).

Geom groups (used by the ray casts): 0 floor, 1 walls, 2 boxes, 3 ramps, 4 agents (and
their arms, ``ARM_OFFSETS``, when ``agent_arms``).
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.layout import Layout

GROUP_FLOOR, GROUP_WALL, GROUP_BOX, GROUP_RAMP, GROUP_AGENT = 0, 1, 2, 3, 4
DOFS_PER_BODY = 4
ARM_RADIUS = 0.05
ARM_OFFSETS = ((-0.13, 0.075, -0.05), (0.13, 0.075, -0.05))
"""Centres of the two massless arm spheres in the agent's frame (m): particle_hinge.xml:15-16
with y mirrored like the whole arena (layout.py), i.e. on the agent's front (+y at yaw 0,
``facing_offset_deg``)."""


def ramp_vertices(size: tuple[float, float, float]) -> np.ndarray:
    """``[6, 3]`` vertices of the ramp wedge in its body frame: base at z = 0, the
    slope rises from local -x (height 0) to +x (height ``size[2]``)."""
    lx, wy, hz = size[0] / 2, size[1] / 2, size[2]
    return np.array(
        [[-lx, -wy, 0], [lx, -wy, 0], [lx, -wy, hz], [-lx, wy, 0], [lx, wy, 0], [lx, wy, hz]], np.float64
    )


def _f(values) -> str:
    return " ".join(f"{float(v):.6g}" for v in np.ravel(values))


def _joints(prefix: str, damping: float, z_damping: float, ang_damping: float) -> str:
    return (
        f'<joint name="{prefix}_x" type="slide" axis="1 0 0" damping="{damping:g}"/>'
        f'<joint name="{prefix}_y" type="slide" axis="0 1 0" damping="{damping:g}"/>'
        f'<joint name="{prefix}_z" type="slide" axis="0 0 1" damping="{z_damping:g}"/>'
        f'<joint name="{prefix}_rz" type="hinge" axis="0 0 1" damping="{ang_damping:g}"/>'
    )


def _mu(value: float) -> str:
    """Geom friction attribute; MuJoCo uses the larger of the two geoms' coefficients."""
    return f'friction="{value:g} 0.005 0.0001"'



def _arms(cfg: HideAndSeekConfig, name: str, rgba: str) -> str:
    """The agent's two arm geoms: mass 0, the agent's friction (set_geom_attr_transform sets
    every geom of the agent, mae:modules/agents.py:41-42)."""
    if not cfg.agent_arms:
        return ""
    return "".join(
        f'<geom name="{name}_arm{k + 1}" type="sphere" size="{ARM_RADIUS:g}" mass="0" pos="{_f(pos)}" '
        f'{_mu(cfg.other_friction)} group="{GROUP_AGENT}" rgba="{rgba}"/>'
        for k, pos in enumerate(ARM_OFFSETS)
    )


def build_mjcf(cfg: HideAndSeekConfig, layout: Layout, arena_bytes: int | None = None) -> str:
    """MJCF text of the scene. Initial poses are not in the XML: the env writes qpos.
    ``arena_bytes``: the ``MjData`` arena (``<size memory>``); None: MuJoCo's default."""
    n_h, n_s = len(layout.hiders), len(layout.seekers)
    n_b, n_r = len(layout.boxes), len(layout.ramps)
    out = [
        '<mujoco model="hide_and_seek">',
        f'<option timestep="{cfg.timestep:g}" gravity="0 0 {cfg.gravity:g}">'
        f'<flag sleep="{"enable" if cfg.physics_sleep else "disable"}"/></option>',
        f'<size memory="{int(arena_bytes)}"/>' if arena_bytes else "",
        '<default><geom condim="3"/></default>',
        f'<asset><mesh name="ramp" vertex="{_f(ramp_vertices(cfg.ramp_size))}"/></asset>',
        "<worldbody>",
        f'<geom name="floor" type="plane" size="{cfg.floor_size:g} {cfg.floor_size:g} 0.1" '
        f'{_mu(cfg.friction)} group="{GROUP_FLOOR}" rgba="0.9 0.9 0.85 1"/>',
    ]
    for k, (cx, cy, hx, hy, hz) in enumerate(layout.walls):
        out.append(
            f'<geom name="wall_{k}" type="box" pos="{_f((cx, cy, hz / 2))}" size="{_f((hx, hy, hz / 2))}" '
            f'{_mu(cfg.wall_friction)} group="{GROUP_WALL}" rgba="0.4 0.4 0.4 1"/>'
        )
    agent_names = [f"hider_{i}" for i in range(n_h)] + [f"seeker_{i}" for i in range(n_s)]
    for k, name in enumerate(agent_names):
        rgba = "0.2 0.4 0.9 1" if k < n_h else "0.9 0.3 0.2 1"
        out.append(
            f'<body name="{name}">{_joints(name, cfg.agent_damping, cfg.agent_z_damping, cfg.agent_angular_damping)}'
            f'<geom name="{name}" type="sphere" size="{cfg.agent_radius:g}" mass="{cfg.agent_mass:g}" '
            f'{_mu(cfg.other_friction)} group="{GROUP_AGENT}" rgba="{rgba}"/>{_arms(cfg, name, rgba)}</body>'
        )
    for k, size in enumerate(layout.box_sizes):
        out.append(
            f'<body name="box_{k}">{_joints(f"box_{k}", *(cfg.box_damping,) * 3)}'
            f'<geom name="box_{k}" type="box" size="{_f(np.asarray(size) / 2)}" mass="{cfg.box_mass:g}" '
            f'{_mu(cfg.friction)} group="{GROUP_BOX}" rgba="0.85 0.65 0.3 1"/></body>'
        )
    for k in range(n_r):
        out.append(
            f'<body name="ramp_{k}">{_joints(f"ramp_{k}", *(cfg.ramp_damping,) * 3)}'
            f'<geom name="ramp_{k}" type="mesh" mesh="ramp" mass="{cfg.ramp_mass:g}" '
            f'{_mu(cfg.other_friction)} group="{GROUP_RAMP}" rgba="0.3 0.7 0.4 1"/></body>'
        )
    out.append("</worldbody><actuator>")
    for name in agent_names:
        for axis, gear in (("x", cfg.motor_force), ("y", cfg.motor_force), ("rz", cfg.motor_torque)):
            out.append(f'<motor joint="{name}_{axis}" gear="{gear:g}" ctrlrange="-1 1" ctrllimited="true"/>')
    out.append("</actuator><equality>")
    objects = [f"box_{k}" for k in range(n_b)] + [f"ramp_{k}" for k in range(n_r)]
    for name in agent_names:  # grab welds, index a * n_objects + o
        for obj in objects:
            out.append(f'<weld body1="{name}" body2="{obj}" active="false" solref="0.02 1"/>')
    out.append("</equality></mujoco>")
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class SceneIndex:
    """Where things live in the compiled model (counts for this episode).

    Movable body ``k`` (hiders, seekers, boxes, ramps in that order) has body id
    ``body[k]``, geom id ``geom[k]`` and qpos/qvel rows ``4k .. 4k + 3``.
    """

    n_hiders: int
    n_seekers: int
    n_boxes: int
    n_ramps: int
    body: np.ndarray  # [n_movable] int32
    geom: np.ndarray  # [n_movable] int32
    n_walls: int

    @property
    def n_agents(self) -> int:
        return self.n_hiders + self.n_seekers

    @property
    def n_objects(self) -> int:
        return self.n_boxes + self.n_ramps

    def grab_eq(self, agent: int, obj: int) -> int:
        return agent * self.n_objects + obj


def compile_scene(cfg: HideAndSeekConfig, layout: Layout,
                  arena_bytes: int | None = None) -> tuple[mujoco.MjModel, SceneIndex]:
    """Compile the layout's MJCF (about 2 ms) and map its ids (``arena_bytes``: ``build_mjcf``)."""
    model = mujoco.MjModel.from_xml_string(build_mjcf(cfg, layout, arena_bytes))
    names = (
        [f"hider_{i}" for i in range(len(layout.hiders))]
        + [f"seeker_{i}" for i in range(len(layout.seekers))]
        + [f"box_{i}" for i in range(len(layout.boxes))]
        + [f"ramp_{i}" for i in range(len(layout.ramps))]
    )
    body = np.array([mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in names], np.int32)
    geom = np.array([mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in names], np.int32)
    assert np.all(model.body_dofadr[body] == DOFS_PER_BODY * np.arange(len(names)))
    assert np.all(model.jnt_qposadr[model.body_jntadr[body]] == DOFS_PER_BODY * np.arange(len(names)))
    index = SceneIndex(
        len(layout.hiders), len(layout.seekers), len(layout.boxes), len(layout.ramps), body, geom, len(layout.walls)
    )
    return model, index

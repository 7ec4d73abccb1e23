"""Configuration of the hide-and-seek game: one frozen dataclass holds every knob.

Two named variants follow Baker et al. 2019 ("Emergent Tool Use From Multi-Agent
Autocurricula", arXiv 1909.07528): ``quadrant`` and ``full``. ``make_config``
starts from a variant and applies overrides, rejecting unknown keys by name.
Lengths are metres, masses kilograms, times seconds, angles degrees.
"""

from __future__ import annotations

import dataclasses
from typing import Any

Range = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class HideAndSeekConfig:
    """Every knob of the game. Ranges ``(lo, hi)`` are inclusive, sampled per episode."""

    variant: str = "quadrant"
    """Layout generator: ``quadrant`` (one corner room) or ``full`` (random rooms)."""

    # --- arena (the original builds it on a 30-cell grid of 0.2 m, mae:envs/base.py:68-70) ---
    floor_size: float = 6.0
    """Side of the square spawn floor, centred on the origin (m); 6 m in both variants
    (mae:hide_and_seek.py:220)."""
    grid_cells: int = 30
    """Placement grid of the original: walls sit on cell centres (mae:walls.py:246-283)."""
    room_cells: int = 15
    """Quadrant only: the room's wall sits on cell ``room_cells`` = int(0.5 * 30)
    (mae:walls.py:393-399), a room of about 2.7 x 2.9 m inside."""
    n_rooms: Range = (1, 4)
    """Full only: rooms, randint(4) + 1 (mae:walls.py:326-329)."""
    min_room_size: float = 1.2
    """Full only: a new wall must be more than this from the walls already leaving the wall
    it starts from, on that side (6 cells, mae:hide_and_seek.py:254-258; the test is
    ``> min_dist_between``, mae:walls.py:157) (m; rounded to cells)."""
    door_cells: int = 2
    """Door size in grid cells (mae:hide_and_seek.py:220). The gap it leaves is 0.7 m:
    segments end 0.05 m short of their end cells' centres, 3 x 0.2 + 0.1
    (mae:walls.py:64-123, 246-283); 0.6 m where a door starts one cell after a joining
    wall (the 1-cell stub is dropped, as released)."""
    door_dropout: float = 0.5
    """Quadrant: with this probability only one of the two room walls (drawn at random)
    has a door, else both do (Q.jsonnet:25; mae:walls.py:400-405). Full: no dropout."""
    p_outer_walls: float = 1.0
    """Probability that the episode has outer walls (full: 0.5, F.jsonnet:24; mae:walls.py:344-347)."""
    wall_thickness: float = 0.1
    inner_wall_height: float = 0.5
    outer_wall_height: float = 4.0
    """Outer walls are 4 m (mae:walls.py:286-291): not climbable with one box and a ramp."""
    bounds_size: float = 5.8
    """Side of the out-of-bounds square centred on the origin (m): quadrant [0.1, 5.9]^2 in the
    original's frame (Q.jsonnet:24), full 18 m, [-6, 12]^2 (F.jsonnet:27)."""

    # --- entities ----------------------------------------------------------------
    n_hiders: Range = (2, 2)
    n_seekers: Range = (2, 2)
    n_boxes: Range = (2, 2)
    n_elongated: Range = (0, 0)
    """Elongated boxes, drawn from ``lo .. min(hi, n_boxes)`` (mae:objects.py:47-54)."""
    n_ramps: Range = (1, 1)
    teammate_radius: float = 0.0
    """If > 0, teammates spawn within this distance of their team's first member
    (full: 0.5, F.jsonnet:29-30; mae:hide_and_seek.py:263-290) (m)."""
    agent_radius: float = 0.15
    agent_mass: float = 1.0
    agent_arms: bool = True
    """Two massless "arm" spheres of radius 0.05 on each agent, on its front: at
    (-+0.13, -0.075, -0.05) m in the original's agent frame (particle_hinge.xml:15-16), so
    at (-+0.13, +0.075, -0.05) m in ours, whose y is the original's mirrored (layout.py).
    They collide like the body (they push boxes, catch on walls) and count as the agent
    for line of sight. False: a bare sphere (our game before issue 14)."""
    facing_offset_deg: float = 90.0
    """An agent's front (vision cone, arms) points at yaw + this angle. The released game
    rotates yaw by -pi/2 "to match visual front" (mae:modules/agents.py:83): at the initial
    yaw 0 every agent faces the original's -y, the side of the quadrant room. Our frame
    mirrors the original's y (layout.py: its room at low y is our +y corner), which turns
    -90 degrees into +90: at yaw 0 our agents face +y, the room's side, as released. The
    observed yaw stays the raw joint angle."""
    box_size: float = 0.5
    """Side of a cubic box (m)."""
    elongated_size: tuple[float, float, float] = (1.65, 0.15, 0.5)
    """Full sizes of an elongated box, 0.5 x (3.3, 0.3, 1), axis-aligned along x or y
    (mae:objects.py:55-61) (m)."""
    box_mass: float = 1.0
    """mae:modules/objects.py:37 (kg)."""
    ramp_size: tuple[float, float, float] = (0.5, 0.5, 0.5)
    """Full sizes (length along the slope, width, height) of the 45-degree ramp wedge
    (wg:assets/xmls/ramp/main.xml:2-14, mesh vertices +-0.5 scaled by 0.5) (m)."""
    ramp_mass: float = 1.0
    lock_ramp: bool = False
    """Whether ramps can be locked (quadrant false, Q.jsonnet:34; full true)."""

    # --- physics -----------------------------------------------------------------
    timestep: float = 0.005
    n_substeps: int = 15
    """Physics steps per env step: 15 x 0.005 s = 0.075 s."""
    physics_sleep: bool = True
    """Deviation kept on purpose (speed; dynamics unchanged as measured, docs/hide_and_seek.md):
    MuJoCo's sleeping islands (``<flag sleep="enable"/>``, MuJoCo >= 3.4). A box or ramp whose
    velocities stay below 1e-3 m/s for 10 substeps is frozen until an awake body touches it or
    a grab weld ties it to an agent; agents (actuated) never sleep. The released MuJoCo 2.0 had
    no sleeping. False simulates every body every substep."""
    blowup_speed: float = 100.0
    """A step after which any joint velocity exceeds this (m/s, rad/s) or MuJoCo flags a bad
    state is a solver failure: it is redone with MuJoCo's CG solver, and if that fails too
    the episode ends marked ``discard_episode`` (as released, mae:wrappers/util.py:61-95;
    guard.py). Legitimate motion stays under about 20."""
    gravity: float = -50.0
    """mae:hide_and_seek.py:230; mae:modules/world.py:19-31 (m/s^2)."""
    friction: float = 0.2
    """Sliding friction of the floor and boxes (box_floor_friction, mae:hide_and_seek.py:230)."""
    other_friction: float = 0.01
    """Sliding friction of agents and ramps (mae:hide_and_seek.py:293-314)."""
    wall_friction: float = 0.01
    """Quadrant walls 0.01 (other_friction); full-game walls MuJoCo's default 1.0."""
    motor_force: float = 100.0
    """Gear of the x/y motors; controls are clipped to +-0.9, so at most 90 N
    (mae:hide_and_seek.py:231; wg:env.py:346-349)."""
    motor_torque: float = 100.0
    """Gear of the z-rotation motor (N m)."""
    agent_damping: float = 10.0
    """Damping of agent x/y slides (N s/m) (particle_hinge.xml:10-13)."""
    agent_z_damping: float = 1.0
    """Damping of the agent z slide (damp_z=False, mae:modules/agents.py:48-49)."""
    agent_angular_damping: float = 10.0
    box_damping: float = 0.01
    """Every box joint (wg:util/obj_util.py:162)."""
    ramp_damping: float = 0.1
    """Every ramp joint (wg:assets/xmls/ramp/main.xml)."""

    # --- actions -----------------------------------------------------------------
    n_action_bins: int = 11
    action_max: float = 0.9
    """Bins span [-action_max, action_max] of the motor range."""
    grab_reach: float = 0.25
    """Max distance from the agent's centre to the object's cuboid surface to grab or
    lock (lock_grab_radius, mae:hide_and_seek.py:245; mae:util/geometry.py:5-54) (m)."""

    # --- observations ------------------------------------------------------------
    n_lidar: int = 30
    lidar_range: float = 6.0
    vision_cone_deg: float = 135.0
    rays_hit_walls: bool = True
    """Deviation kept on purpose: walls block sight and lidar. The released ray call passes
    flg_static=0 (wg:util/geometry.py:7-49), which may skip static geoms; the blog's forts
    need walls that hide."""
    extra_obs: bool = False
    """Deviation, off by default: append our extra features (self: sin/cos yaw, time
    elapsed, holding; agents: dx, dy, sin/cos; objects: dx, dy, held by self/other)."""

    # --- episode and reward ------------------------------------------------------
    horizon: int = 80
    prep_fraction: float = 0.4
    """Fraction of the horizon in which seekers are frozen and no reward flows."""
    boundary_penalty: float = 10.0
    """An agent outside the bounds square gets reward -boundary_penalty (replacing its
    team reward), after the preparation phase only (mae:limit_mvmnt.py:44-55; prep_phase.py:26-30)."""
    penalize_objects_out: bool = True
    """Quadrant: any box or ramp outside the bounds sets every agent's reward to
    -boundary_penalty (Q.jsonnet:35; mae:limit_mvmnt.py:37-40, 48-52). Full: off."""
    check_connected: bool = False
    """Ours, off by default (the released generator has no such check): resample a layout
    whose free floor is not one 4-connected region for an agent. It did not fire on 2,000
    layouts of either variant (seed 0): every inner wall has a door."""
    max_layout_tries: int = 200

    @property
    def max_hiders(self) -> int:
        return self.n_hiders[1]

    @property
    def max_seekers(self) -> int:
        return self.n_seekers[1]

    @property
    def max_agents(self) -> int:
        return self.n_hiders[1] + self.n_seekers[1]

    @property
    def max_boxes(self) -> int:
        return self.n_boxes[1]

    @property
    def max_ramps(self) -> int:
        return self.n_ramps[1]

    @property
    def prep_steps(self) -> int:
        """Env steps of the preparation phase."""
        return int(round(self.prep_fraction * self.horizon))

    @property
    def dt(self) -> float:
        """Seconds per env step."""
        return self.timestep * self.n_substeps

    def validate(self) -> "HideAndSeekConfig":
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown hide-and-seek variant {self.variant!r}; known: {sorted(VARIANTS)}")
        for name in ("n_hiders", "n_seekers", "n_boxes", "n_elongated", "n_ramps", "n_rooms"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name}={lo, hi} must satisfy 0 <= lo <= hi")
        if self.n_hiders[0] < 1 or self.n_seekers[0] < 1:
            raise ValueError("need at least one hider and one seeker")
        if self.horizon < 1 or not 0.0 <= self.prep_fraction < 1.0:
            raise ValueError("horizon must be >= 1 and prep_fraction in [0, 1)")
        if self.door_cells < 0 or self.min_room_size < 0:
            raise ValueError("door_cells and min_room_size must be >= 0")
        if self.n_action_bins < 2:
            raise ValueError("n_action_bins must be >= 2")
        return self


VARIANTS: dict[str, dict[str, Any]] = {
    "quadrant": dict(variant="quadrant"),
    "full": dict(
        variant="full",
        n_hiders=(1, 3),  # the paper's 1-3 per team (the released code fixes 2 v 2)
        n_seekers=(1, 3),
        n_boxes=(3, 9),
        n_elongated=(3, 9),
        n_ramps=(2, 2),
        horizon=240,
        p_outer_walls=0.5,
        bounds_size=18.0,
        teammate_radius=0.5,
        lock_ramp=True,
        penalize_objects_out=False,
        wall_friction=1.0,
    ),
}


def make_config(variant: str = "quadrant", **overrides: Any) -> HideAndSeekConfig:
    """Config of a named variant with ``overrides`` applied.

    Raises:
      ValueError: unknown variant or override key, or an invalid value.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown hide-and-seek variant {variant!r}; known: {sorted(VARIANTS)}")
    names = {f.name for f in dataclasses.fields(HideAndSeekConfig)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"unknown hide-and-seek config key(s) {bad}; known: {sorted(names)}")
    if "variant" in overrides and overrides["variant"] != variant:
        raise ValueError("pass the variant as the first argument, not as an override")
    kwargs = {**VARIANTS[variant], **overrides}
    for k, v in kwargs.items():  # lists from CLIs/JSON become tuples (hashable, frozen)
        if isinstance(v, list):
            kwargs[k] = tuple(v)
    return HideAndSeekConfig(**kwargs).validate()

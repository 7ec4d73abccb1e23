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

    # --- arena -------------------------------------------------------------------
    floor_size: float = 6.0
    """Side of the square play area, centred on the origin (m)."""
    room_size: float = 3.0
    """Quadrant only: side of the corner room (m)."""
    n_rooms: Range = (1, 4)
    """Full only: how many rooms the random walls split the floor into."""
    min_room_size: float = 3.0
    """Full only: smallest side of a room (m)."""
    door_width: float = 1.0
    """Width of a door (gap in an inner wall) (m)."""
    door_dropout: float = 0.5
    """Probability that a door is closed; at least one door per wall stays open in
    ``full``, at least one door of the room stays open in ``quadrant``."""
    wall_thickness: float = 0.1
    inner_wall_height: float = 0.5
    outer_wall_height: float = 0.5
    """Outer walls are climbable with a ramp, hence the boundary penalty."""

    # --- entities ----------------------------------------------------------------
    n_hiders: Range = (2, 2)
    n_seekers: Range = (2, 2)
    n_boxes: Range = (2, 2)
    n_elongated: Range = (0, 0)
    """How many of the boxes are elongated (capped by the box count)."""
    n_ramps: Range = (1, 1)
    agent_radius: float = 0.15
    agent_mass: float = 1.0
    box_size: float = 0.5
    """Side of a cubic box (m)."""
    elongated_size: tuple[float, float, float] = (1.65, 0.15, 0.5)
    """Full sizes (length, width, height) of an elongated box (m)."""
    box_mass: float = 2.0
    ramp_size: tuple[float, float, float] = (1.0, 0.6, 0.5)
    """Full sizes (length along the slope, width, height) of a ramp (m)."""
    ramp_mass: float = 2.0

    # --- physics -----------------------------------------------------------------
    timestep: float = 0.005
    n_substeps: int = 15
    """Physics steps per env step: 15 x 0.005 s = 0.075 s."""
    friction: float = 0.5
    """Sliding friction coefficient of every contact."""
    motor_force: float = 30.0
    """Gear of the x/y motors: action 1.0 pushes with this force (N)."""
    motor_torque: float = 1.0
    """Gear of the z motor (N m)."""
    agent_damping: float = 10.0
    """Linear damping of agent slides (N s/m); top speed ~ (0.9 * force - friction) / damping."""
    agent_angular_damping: float = 0.15
    object_damping: float = 1.0

    # --- actions -----------------------------------------------------------------
    n_action_bins: int = 11
    action_max: float = 0.9
    """Bins span [-action_max, action_max] of the motor range."""
    grab_reach: float = 0.25
    """Max gap between agent surface and object surface to grab or lock (m)."""

    # --- observations ------------------------------------------------------------
    n_lidar: int = 30
    lidar_range: float = 6.0
    vision_cone_deg: float = 135.0

    # --- episode and reward ------------------------------------------------------
    horizon: int = 80
    prep_fraction: float = 0.4
    """Fraction of the horizon in which seekers are frozen and no team reward flows."""
    boundary_penalty: float = 10.0
    """Subtracted each step from an agent outside the play area."""
    object_boundary_penalty: float = 0.0
    """If > 0, subtracted from every agent per object outside the play area per step."""
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
        if self.n_action_bins < 2:
            raise ValueError("n_action_bins must be >= 2")
        return self


VARIANTS: dict[str, dict[str, Any]] = {
    "quadrant": dict(variant="quadrant"),
    "full": dict(
        variant="full",
        floor_size=18.0,
        n_hiders=(1, 3),
        n_seekers=(1, 3),
        n_boxes=(3, 9),
        n_elongated=(1, 3),
        n_ramps=(2, 2),
        horizon=240,
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

"""One actor ring slot and its segments: the environments of a group, the rows each
stream serves, their recurrent state, and the ``[rows, T(+1), ...]`` buffers a
segment is assembled in before it is sent (see ``jaxsrl/workers/actor/worker.py``).

No JAX here.
"""

from __future__ import annotations

import numpy as np

from jaxsrl.streams.opponents import OPPONENT
from jaxsrl.streams.segment import final_name


class EnvError(RuntimeError):
    """The environment raised in ``reset`` or ``step`` (the original is the ``__cause__``)."""


class SegmentBuffer:
    """Preallocated ``[rows, T(+1), ...]`` buffers for one stream's current segment.

    With ``with_valid`` it also keeps ``valid`` ``[rows, T]`` bool per-step validity
    flags (``StepResult.valid``), sent as the segment's ``valid`` array; a row whose
    episode is discarded (``StepResult.discarded``) has every step of that episode this
    segment holds marked not valid (the steps of it in segments already sent cannot be)."""

    def __init__(self, first_obs: dict, T: int, action_dtype: str, action_shape: tuple, carry: dict,
                 with_valid: bool = False):
        rows = len(next(iter(first_obs.values())))
        self.T, self.t = T, 0
        self.obs = {k: np.zeros((rows, T + 1) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.final_obs = {k: np.zeros((rows, T) + v.shape[1:], v.dtype) for k, v in first_obs.items()}
        self.action = np.zeros((rows, T) + action_shape, action_dtype)
        self.reward = np.zeros((rows, T), np.float32)
        self.terminated = np.zeros((rows, T), bool)
        self.truncated = np.zeros((rows, T), bool)
        self.logp = np.zeros((rows, T), np.float32)
        self.version = np.zeros((rows, T), np.int32)
        self.valid = np.ones((rows, T), bool) if with_valid else None
        self.episode_start = np.zeros(rows, np.intp)  # step of this segment where the row's episode began
        self.carry = {k: np.zeros_like(v) for k, v in carry.items()}
        self.episodes: list = []
        self.start(first_obs, carry)

    def start(self, obs: dict, carry: dict) -> None:
        self.t = 0
        self.episodes = []
        self.episode_start[:] = 0
        for k, v in obs.items():
            self.obs[k][:, 0] = v
        for k, v in carry.items():
            self.carry[k][:] = v

    def record(self, action, logp, version: int, reward, terminated, truncated, obs, final_obs,
               valid=None, discarded=None) -> bool:
        """Store one step; returns True when the segment is full. ``final_obs`` (name ->
        ``[rows, ...]``, or empty when no row was truncated) is kept for the truncated
        rows only: :meth:`arrays` holds stale values at other steps, which the wire
        encoding (``jaxsrl.streams.segment.pack_final_obs``) leaves out. ``discarded``
        (``[rows]`` bool or ``None``): rows whose episode ended at this step for discard;
        every step of it in this segment becomes not valid.

        Raises:
          ValueError: ``discarded`` rows in a buffer without ``valid`` flags."""
        t = self.t
        if self.valid is not None:
            self.valid[:, t] = valid
        if discarded is not None and np.count_nonzero(discarded):
            if self.valid is None:
                raise ValueError("a discarded episode in a segment without 'valid' flags "
                                 "(only groups with idle rows can discard episodes)")
            steps = np.arange(self.T)
            self.valid &= ~((steps >= self.episode_start[:, None]) & (steps <= t)
                            & np.asarray(discarded, bool)[:, None])
        self.action[:, t] = action
        self.logp[:, t] = logp
        self.version[:, t] = version
        self.reward[:, t] = reward
        self.terminated[:, t] = terminated
        self.truncated[:, t] = truncated
        for k, v in obs.items():
            self.obs[k][:, t + 1] = v
        if final_obs:  # only truncated steps' final observations are sent (pack_final_obs):
            for k, v in final_obs.items():  # other steps keep stale values nobody reads
                self.final_obs[k][truncated, t] = v[truncated]
        self.episode_start[np.asarray(terminated) | np.asarray(truncated)] = t + 1
        self.t += 1
        return self.t == self.T

    def arrays(self) -> dict:
        out = dict(self.obs)
        out.update({final_name(k): v for k, v in self.final_obs.items()})
        out.update(action=self.action, reward=self.reward, terminated=self.terminated,
                   truncated=self.truncated, logp=self.logp, version=self.version)
        if self.valid is not None:
            out["valid"] = self.valid
        out.update(self.carry)
        return out


class Group:
    """One ring slot: its environments, and per stream its rows, carry and segment."""

    def __init__(self, env, streams: list, T: int, carry_spec: list, action: tuple,
                 with_valid: bool = False):
        self.env = env
        self.rows = [s.rows_of(env) for s in streams]
        # each stream's rows as an index: a slice (views, no copies) when it serves every row
        # in order (what is recorded from them is copied into its segment buffer at once)
        self.select = [slice(None) if np.array_equal(r, np.arange(env.num_rows)) else r
                       for r in self.rows]
        self.carry = [{name: np.zeros((len(r),) + tuple(shape), dtype) for name, dtype, shape in carry_spec}
                      for r in self.rows]
        # per stream: whether its carry is the last accepted reply's (save rows zeroed
        # since, ``zeroed``), which is what a server that keeps carries holds (kept_mask)
        self.accepted = [False] * len(streams)
        self._expected: dict = {}  # stream -> ((name, shape), ...) of its replies (reply_problem)
        self.zeroed = [np.zeros(len(r), bool) for r in self.rows]
        self.action = np.zeros((env.num_rows,) + action[1], action[0])
        self.logp = np.zeros(env.num_rows, np.float32)
        self.version = [0] * len(streams)
        self.waiting: set = set()
        self.draws = None  # self-play: a SelfPlayDraws (jaxsrl/workers/actor/opponents.py)
        try:
            self.obs = env.reset()
        except Exception as exc:
            raise EnvError(f"environment reset raised {type(exc).__name__}: {exc}") from exc
        self.buffers = [SegmentBuffer(take_rows(self.obs, r), T, action[0], action[1], c, with_valid)
                        for r, c in zip(self.rows, self.carry)]

    def reply_problem(self, actions, action_shape: tuple) -> str:
        """Why stream ``actions.stream``'s :class:`~jaxsrl.workers.actor.action_client.Actions`
        cannot be stored ("" if they can): every array this group needs, with the right
        shapes (values are cast on assignment)."""
        i = actions.stream
        expected = self._expected.get(i)
        if expected is None:
            n = len(self.rows[i])
            expected = {"action": (n,) + tuple(action_shape), "logp": (n,)}
            expected.update({k: v.shape for k, v in self.carry[i].items()})
            if self.draws:
                expected[OPPONENT] = (n,)
            expected = self._expected[i] = tuple(expected.items())
        arrays = actions.arrays
        for k, shape in expected:
            if k not in arrays or np.shape(arrays[k]) != shape:
                bad = [k for k, shape in expected
                       if k not in arrays or np.shape(arrays[k]) != shape]
                return f"arrays {bad} missing or of the wrong shape"
        return ""

    def store_reply(self, actions) -> None:
        """Keep stream ``actions.stream``'s (checked) actions: actions, log-probabilities,
        version, the rows' new carry and, in self-play, what served each row."""
        i = actions.stream
        rows = self.rows[i]
        self.action[rows] = actions.arrays["action"]
        self.logp[rows] = actions.arrays["logp"]
        self.version[i] = int(actions.version)
        for name in self.carry[i]:
            self.carry[i][name][:] = actions.arrays[name]
        self.accepted[i] = True
        self.zeroed[i][:] = False
        if self.draws:
            self.draws.answered(i, actions.arrays[OPPONENT])

    def reject_reply(self, stream: int) -> None:
        """Stream ``stream``'s last reply was not stored: its carry is not that reply's."""
        self.accepted[stream] = False

    def zero_carry(self, stream: int, done: np.ndarray) -> None:
        """Start the episodes of stream ``stream``'s rows where ``done`` (``[n]`` bool)
        from the initial (zero) carry."""
        if done.any():
            for v in self.carry[stream].values():
                v[done] = 0
            self.zeroed[stream] |= done

    def kept_mask(self, stream: int) -> np.ndarray | None:
        """``[n]`` uint8: 1 where stream ``stream``'s carry row is the last accepted
        reply's bit for bit, 0 where it was zeroed since; ``None`` if the carry is not
        that reply's (none accepted yet, or the last reply was rejected)
        (:meth:`~jaxsrl.workers.actor.action_client.ActionClient.request`'s ``kept``)."""
        if not self.accepted[stream]:
            return None
        return (~self.zeroed[stream]).view(np.uint8)


def take_rows(named: dict, rows: np.ndarray) -> dict:
    """``{name: array[rows]}``: the rows of named ``[rows, ...]`` arrays a stream serves."""
    return {k: v[rows] for k, v in named.items()}



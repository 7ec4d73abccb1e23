"""Curve arithmetic for the learning-curve figures (:mod:`jaxsrl.tools.plotting`): the
TensorBoard-style smoothing of one curve and the band of several (mean +- std, or
median and min-max) on the x range they all cover. NumPy only: no matplotlib here.

A curve is a pair ``(x, y)`` of 1-D float arrays of one length, ``x`` increasing (env
steps or seconds).
"""

from __future__ import annotations

import numpy as np

#: the bands :func:`jaxsrl.tools.plotting.plot_runs` draws for a group of runs.
BANDS = ("mean", "median")


def smooth(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard-style exponential moving average (debiased) of ``y`` (``[n]``):
    ``[n]`` float64, or ``y`` itself if ``weight`` <= 0 or ``y`` is empty; ``weight`` in
    [0, 1) (the caller checks the range)."""
    if weight <= 0 or len(y) == 0:
        return y
    out, acc, norm = np.empty_like(y, dtype=np.float64), 0.0, 0.0
    for i, v in enumerate(y):
        acc = weight * acc + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out[i] = acc / norm
    return out


def _on_common_grid(curves: list, points: int):
    """``(grid, ys [runs, points])``: the curves interpolated on the x range all of them
    cover, or ``None`` if fewer than two curves or no overlap."""
    curves = [(x, y) for x, y in curves if len(x) >= 2]
    if len(curves) < 2:
        return None
    lo = max(x.min() for x, _ in curves)
    hi = min(x.max() for x, _ in curves)
    if not hi > lo:
        return None
    grid = np.linspace(lo, hi, points)
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves])


def aggregate(curves: list, points: int = 200):
    """Mean and std of several ``(x, y)`` curves on a common grid over the x range all
    of them cover: ``(grid, mean, std)``, each ``[points]`` float64; ``None`` if fewer
    than two curves of two or more points, or no overlap."""
    common = _on_common_grid(curves, points)
    if common is None:
        return None
    grid, ys = common
    return grid, ys.mean(0), ys.std(0)


def aggregate_median(curves: list, points: int = 200):
    """Median, minimum and maximum of several curves on the common grid of ``aggregate``:
    ``(grid, median, lo, hi)``, or ``None`` as there."""
    common = _on_common_grid(curves, points)
    if common is None:
        return None
    grid, ys = common
    return grid, np.median(ys, 0), ys.min(0), ys.max(0)

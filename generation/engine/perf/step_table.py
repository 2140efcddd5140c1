"""A measured step-time table, interpolated (issue 20: "a measured step-time table can replace
the roofline"; the Dynamo mocker's profile tables, docs/engine-model.md §6).

The table maps ``(decode_seqs, context_tokens, prefill_tokens)`` to milliseconds, where

* ``decode_seqs``: decoding sequences in the step (``D``);
* ``context_tokens``: their *mean* context, tokens already in the KV cache per decoding
  sequence (``C_dec / D``; how a measurement "batch 32 at 2k context" is naturally stated);
* ``prefill_tokens``: new prompt tokens in the step (``sum n_i``, all chunks together).

The points must form a full grid: every combination of the values seen on each axis, once.
Between grid points the time is multilinear (trilinear) in the three axes.  Outside the grid:

* below an axis's smallest value the axis is clamped (a step is never taken to be faster than
  the smallest measured one: a fixed overhead dominates there);
* above its largest value the time is extrapolated linearly from the last two grid values
  (``extrapolate: linear``, the default: step time keeps growing with the batch, context and
  prefill) or clamped (``extrapolate: clamp``).

An axis with a single value is constant.  A step with no decoding sequence reads its context
at the axis's smallest value.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterable

from generation.config.values import ConfigError

AXES = ("decode_seqs", "context_tokens", "prefill_tokens")


class StepTable:
    """A full grid of measured step times; :meth:`lookup` interpolates (seconds).

    ``points``: iterable of ``(decode_seqs, context_tokens, prefill_tokens, ms)``.
    ``extrapolate``: ``"linear"`` or ``"clamp"`` above the grid.  Raises ConfigError (naming
    ``source``) for a missing or repeated grid point, a negative coordinate or a time <= 0."""

    def __init__(self, points: Iterable[tuple[float, float, float, float]],
                 extrapolate: str = "linear", source: str = "step_table") -> None:
        if extrapolate not in ("linear", "clamp"):
            raise ConfigError(f"{source}: extrapolate must be 'linear' or 'clamp', got "
                              f"{extrapolate!r}", param="step-time-profile")
        self.extrapolate = extrapolate
        values: dict[tuple[float, float, float], float] = {}
        for p in points:
            d, c, n, ms = (float(x) for x in p)
            if min(d, c, n) < 0 or ms <= 0:
                raise ConfigError(f"{source}: point {p!r}: coordinates must be >= 0 and ms > 0",
                                  param="step-time-profile")
            if (d, c, n) in values:
                raise ConfigError(f"{source}: point ({d:g}, {c:g}, {n:g}) appears twice",
                                  param="step-time-profile")
            values[(d, c, n)] = ms / 1000.0
        if not values:
            raise ConfigError(f"{source}: no points", param="step-time-profile")
        self.axes = tuple(sorted({k[i] for k in values}) for i in range(3))
        missing = [(d, c, n) for d in self.axes[0] for c in self.axes[1] for n in self.axes[2]
                   if (d, c, n) not in values]
        if missing:
            shown = ", ".join(f"({d:g}, {c:g}, {n:g})" for d, c, n in missing[:5])
            raise ConfigError(f"{source}: the points must form a full grid of "
                              f"{' x '.join(AXES)}; {len(missing)} missing, e.g. {shown}",
                              param="step-time-profile")
        self._values = values
        self._grid = [[[values[(d, c, n)] for n in self.axes[2]] for c in self.axes[1]]
                      for d in self.axes[0]]

    def _locate(self, axis: int, x: float) -> tuple[int, int, float]:
        """Indices ``(i, j)`` of the two grid values bracketing ``x`` on ``axis`` and the weight
        of ``j`` (beyond 1 when extrapolating linearly above the grid)."""
        a = self.axes[axis]
        if len(a) == 1 or x <= a[0]:
            return 0, 0, 0.0
        if x >= a[-1]:
            if self.extrapolate == "clamp":
                return len(a) - 1, len(a) - 1, 0.0
            i = len(a) - 2
        else:
            i = bisect_right(a, x) - 1
        return i, i + 1, (x - a[i]) / (a[i + 1] - a[i])

    def lookup(self, decode_seqs: float, context_tokens: float, prefill_tokens: float) -> float:
        """The interpolated step time in seconds at one point of the three axes."""
        i0, i1, wi = self._locate(0, decode_seqs)
        j0, j1, wj = self._locate(1, context_tokens)
        k0, k1, wk = self._locate(2, prefill_tokens)
        g0, g1 = self._grid[i0], self._grid[i1]
        r00, r01, r10, r11 = g0[j0], g0[j1], g1[j0], g1[j1]
        v00 = r00[k0] + (r00[k1] - r00[k0]) * wk
        v01 = r01[k0] + (r01[k1] - r01[k0]) * wk
        v10 = r10[k0] + (r10[k1] - r10[k0]) * wk
        v11 = r11[k0] + (r11[k1] - r11[k0]) * wk
        v0 = v00 + (v01 - v00) * wj
        v1 = v10 + (v11 - v10) * wj
        return v0 + (v1 - v0) * wi

    @classmethod
    def from_spec(cls, spec: Any, source: str = "step_table") -> "StepTable":
        """Build from a profile's ``step_table`` value: a mapping with ``points`` (a list of
        ``[decode_seqs, context_tokens, prefill_tokens, ms]`` lists or of mappings with those
        keys) and optional ``extrapolate``, or the bare list of points."""
        if isinstance(spec, list):
            spec = {"points": spec}
        if not isinstance(spec, dict):
            raise ConfigError(f"{source}: expected a mapping with 'points'", param="step-time-profile")
        unknown = set(spec) - {"points", "extrapolate"}
        if unknown:
            raise ConfigError(f"{source}: unknown keys {', '.join(sorted(unknown))} (known: points, "
                              f"extrapolate)", param="step-time-profile")
        raw = spec.get("points")
        if not isinstance(raw, list):
            raise ConfigError(f"{source}: 'points' must be a list", param="step-time-profile")
        points = []
        for p in raw:
            if isinstance(p, dict):
                keys = set(p) - set(AXES) - {"ms"}
                if keys or "ms" not in p:
                    raise ConfigError(f"{source}: point {p!r}: keys are {', '.join(AXES)}, ms "
                                      f"(ms required)", param="step-time-profile")
                p = [p.get(a, 0) for a in AXES] + [p["ms"]]
            if (not isinstance(p, (list, tuple)) or len(p) != 4
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)):
                raise ConfigError(f"{source}: point {p!r} must be 4 numbers: {', '.join(AXES)}, ms",
                                  param="step-time-profile")
            points.append(tuple(p))
        return cls(points, spec.get("extrapolate", "linear"), source)

"""Compact per-token and per-step records of a replay (issue 32: a list of floats per token and a
tuple per step cost 14 KB a request and 1 GB for an hour at 20 requests/s).

:class:`Latencies` keeps every inter-token latency as runs of ``(value, count)`` (a step's
decoding requests share one value); :class:`StepLog` keeps one row per step in typed arrays.  Both
read like the lists they replace: ``len``, iteration (every value, in recording order), indexing;
percentiles are exact (the same multiset of values).
"""
from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from itertools import accumulate, repeat


class Latencies:
    """Inter-token latencies (seconds) as ``(value, count)`` runs: 16 bytes a run, not 32 a
    token.  ``append(x)`` adds one, ``add(x, n)`` ``n`` equal ones; ``len`` is the number of
    latencies; iteration yields each of them, in recording order."""

    __slots__ = ("values", "counts", "_n")

    def __init__(self, values=()):
        self.values = array("d")
        self.counts = array("q")
        self._n = 0
        for v in values:
            self.append(v)

    def append(self, x: float) -> None:
        v = self.values
        if v and v[-1] == x:
            self.counts[-1] += 1
        else:
            v.append(x)
            self.counts.append(1)
        self._n += 1

    def add(self, x: float, n: int) -> None:
        if n <= 0:
            return
        v = self.values
        if v and v[-1] == x:
            self.counts[-1] += n
        else:
            v.append(x)
            self.counts.append(n)
        self._n += n

    def extend(self, other) -> None:
        """Add ``other``'s latencies: another :class:`Latencies` (its runs, as they are: a
        fleet's pods merged without expanding them) or any iterable of seconds."""
        if isinstance(other, Latencies):
            self.values.extend(other.values)
            self.counts.extend(other.counts)
            self._n += other._n
        else:
            for x in other:
                self.append(x)

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self):
        for x, n in zip(self.values, self.counts):
            yield from repeat(x, n)

    def __getitem__(self, i: int) -> float:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("latency index out of range")
        ends = list(accumulate(self.counts))
        return self.values[bisect_right(ends, i)]

    def __eq__(self, other) -> bool:
        try:
            return len(other) == self._n and all(a == b for a, b in zip(self, other))
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"Latencies({self._n} values in {len(self.values)} runs)"

    def sum(self) -> float:
        import numpy as np
        return float(np.dot(np.frombuffer(self.values, dtype=np.float64), np.frombuffer(self.counts, dtype=np.int64)))

    def percentiles(self, ps=(50, 90, 99)) -> dict:
        """``{"pP": value}``: the sorted values' element at ``ceil(P/100 n) - 1`` (nearest rank),
        exactly as on the list of every value; None when empty."""
        return _weighted_percentiles(self.values, self.counts, self._n, ps)


class LatencyPool:
    """Several :class:`Latencies` read as one (a fleet's pods, not copied): ``len``, iteration
    (each part in turn), ``sum`` and exact ``percentiles`` over all of their values."""

    __slots__ = ("parts",)

    def __init__(self, parts=()):
        self.parts = list(parts)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __bool__(self) -> bool:
        return any(self.parts)

    def __iter__(self):
        for p in self.parts:
            yield from p

    def sum(self) -> float:
        return sum(p.sum() for p in self.parts)

    def percentiles(self, ps=(50, 90, 99), bins: int = 4096) -> dict:
        """Nearest-rank percentiles, exactly as :meth:`Latencies.percentiles` on all the values,
        without sorting them all: the values fall into ``bins`` equal ranges of value (a
        histogram weighted by the counts), and only the runs in the range that holds each rank
        are sorted.  Memory: ~2 bytes a run."""
        n = len(self)
        if not n:
            return {f"p{p}": None for p in ps}
        import numpy as np
        parts = [(np.frombuffer(p.values, dtype=np.float64), np.frombuffer(p.counts, dtype=np.int64))
                 for p in self.parts if len(p)]
        lo = min(float(v.min()) for v, _ in parts)
        hi = max(float(v.max()) for v, _ in parts)
        edges = np.linspace(lo, hi, bins + 1)
        where = [np.clip(np.searchsorted(edges, v, side="right") - 1, 0, bins - 1).astype(np.int16 if bins < 32768
                                                                                          else np.int32)
                 for v, _ in parts]
        hist = np.zeros(bins, dtype=np.int64)
        for (_, c), b in zip(parts, where):
            hist += np.bincount(b, weights=c, minlength=bins).astype(np.int64)     # exact below 2**53
        ends = np.cumsum(hist)
        out = {}
        for p in ps:
            k = min(n - 1, max(0, _rank(p, n)))
            b = int(np.searchsorted(ends, k, side="right"))
            below = int(ends[b - 1]) if b else 0
            v = np.concatenate([v[w == b] for (v, _), w in zip(parts, where)])
            c = np.concatenate([c[w == b] for (_, c), w in zip(parts, where)])
            out[f"p{p}"] = _weighted_percentiles(v, c, len(v) and int(c.sum()), (p,), rank=k - below)[f"p{p}"]
        return out


def _weighted_percentiles(values, counts, n: int, ps, rank: int | None = None) -> dict:
    """Nearest-rank percentiles of ``values`` (seconds) each repeated ``counts`` times (``n`` in
    all); ``rank``: the 0-based rank to read instead (one percentile).  Memory: 16 bytes a run
    besides the inputs (the sort order and the running counts)."""
    if not n:
        return {f"p{p}": None for p in ps}
    import numpy as np              # here: the server imports this module in step mode
    v = np.frombuffer(values, dtype=np.float64) if not isinstance(values, np.ndarray) else values
    c = np.frombuffer(counts, dtype=np.int64) if not isinstance(counts, np.ndarray) else counts
    order = np.argsort(v, kind="stable")
    ends = c[order]
    np.cumsum(ends, out=ends)
    out = {}
    for p in ps:
        k = min(n - 1, max(0, _rank(p, n))) if rank is None else rank
        out[f"p{p}"] = float(v[order[int(np.searchsorted(ends, k, side="right"))]])
    return out


def _rank(p, n: int) -> int:
    return math.ceil(p / 100 * n) - 1


class StepStats:
    """A step log that keeps no row per step (a fleet's compact mode; :class:`StepLog` keeps 40
    bytes a step, 570 MB for a 32-pod hour): the number of steps (``len``), the KV usage's sum
    (added in step order, as ``sum`` over :class:`StepLog`'s column) and peak, and ``(end time
    s, KV usage)`` of the first step of every ``every`` seconds of virtual time, which iteration
    yields (for plots)."""

    __slots__ = ("n", "usage_sum", "usage_peak", "every", "next_at", "samples")

    def __init__(self, every: float = 0.1):
        self.n = 0
        self.usage_sum = 0.0
        self.usage_peak = 0.0
        self.every = every
        self.next_at = 0.0
        self.samples = array("d")

    def append(self, row) -> None:
        self.add(row[0], row[1])

    def add(self, t: float, u: float) -> None:
        """One step ending at ``t`` (s) with KV usage ``u``: the replay's every step."""
        self.n += 1
        self.usage_sum += u
        if u > self.usage_peak:
            self.usage_peak = u
        if t >= self.next_at:
            self.samples.extend((t, u))
            self.next_at = t + self.every

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __iter__(self):
        s = self.samples
        for i in range(0, len(s), 2):
            yield (s[i], s[i + 1])

    def __repr__(self) -> str:
        return f"StepStats({self.n} steps, {len(self.samples) // 2} samples)"


class Finished:
    """Finished requests as columns (a fleet's compact mode, instead of keeping each
    EngineRequest): ``arrival``, ``first`` and ``last`` token at the client (seconds),
    ``prompt``, ``output`` and ``cached`` tokens; 48 bytes a request."""

    __slots__ = ("arrival", "first", "last", "prompt", "output", "cached")

    def __init__(self):
        self.arrival, self.first, self.last = array("d"), array("d"), array("d")
        self.prompt, self.output, self.cached = array("q"), array("q"), array("q")

    def add(self, req, first: float, last: float) -> None:
        self.arrival.append(req.arrival)
        self.first.append(first)
        self.last.append(last)
        self.prompt.append(req.prompt_len)
        self.output.append(req.num_output)
        self.cached.append(req.cached_tokens)

    def __len__(self) -> int:
        return len(self.arrival)


class StepLog:
    """One row per engine step: ``(end time s, KV usage 0..1, running, waiting, tokens)``, in one
    flat array of doubles (40 bytes a step; a row is one C call to append).  ``append(row)``,
    ``len``, indexing, slicing and iteration give the rows as tuples (the counts as ints);
    ``time``, ``usage``, ``running``, ``waiting`` and ``tokens`` are the columns (arrays)."""

    __slots__ = ("rows",)

    def __init__(self, rows=()):
        self.rows = array("d")
        for r in rows:
            self.append(r)

    def append(self, row) -> None:
        self.rows.extend(row)

    def __len__(self) -> int:
        return len(self.rows) // 5

    def __bool__(self) -> bool:
        return len(self.rows) > 0

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("step index out of range")
        t, u, r, w, k = self.rows[5 * i:5 * i + 5]
        return (t, u, int(r), int(w), int(k))

    def __iter__(self):
        rows = self.rows
        for i in range(0, len(rows), 5):
            t, u, r, w, k = rows[i:i + 5]
            yield (t, u, int(r), int(w), int(k))

    @property
    def time(self) -> array:
        return self.rows[0::5]

    @property
    def usage(self) -> array:
        return self.rows[1::5]

    @property
    def running(self) -> array:
        return self.rows[2::5]

    @property
    def waiting(self) -> array:
        return self.rows[3::5]

    @property
    def tokens(self) -> array:
        return self.rows[4::5]

    def __repr__(self) -> str:
        return f"StepLog({len(self)} steps)"

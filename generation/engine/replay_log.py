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
        n = self._n
        if not n:
            return {f"p{p}": None for p in ps}
        import numpy as np              # here: the server imports this module in step mode
        v = np.frombuffer(self.values, dtype=np.float64)
        c = np.frombuffer(self.counts, dtype=np.int64)
        order = np.argsort(v, kind="stable")
        v, ends = v[order], np.cumsum(c[order])
        out = {}
        for p in ps:
            k = min(n - 1, max(0, _rank(p, n)))
            out[f"p{p}"] = float(v[int(np.searchsorted(ends, k, side="right"))])
        return out


def _rank(p, n: int) -> int:
    return math.ceil(p / 100 * n) - 1


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
